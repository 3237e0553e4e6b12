"""The receipt: which collectives XLA wrote into a compiled program, read from its HLO text.

Pure text parsing, standard library only, so that it is tested on handwritten HLO without jax.

- `collectives(hlo)`: every `all-reduce`, `all-gather` and `reduce-scatter` op (and their async
  `-start` forms; `-done` halves are not counted twice) with its element count: the product of all
  dimensions of its result, summed over tuple elements. Matching only `[(\\d+)]` would miss
  multi-dimensional and tuple shapes, and the all-reduce combiner makes nearly every op a tuple.
  Elements are the op's *result*: the full array for all-reduce and all-gather, the local shard for
  reduce-scatter.
- `pass_changes(snapshots)`: from XLA's per-pass HLO dumps (`xla_dump_hlo_pass_re`), the passes
  that changed how many collectives there are (the SPMD partitioner inserts them, combiners merge
  them). Counting the final text alone cannot say which pass did it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# Bits per element of XLA's primitive types (sub-byte types round up per op, not per element).
DTYPE_BITS: dict[str, int] = {
    "pred": 8,
    "s2": 2,
    "u2": 2,
    "s4": 4,
    "u4": 4,
    "s8": 8,
    "u8": 8,
    "s16": 16,
    "u16": 16,
    "f16": 16,
    "bf16": 16,
    "s32": 32,
    "u32": 32,
    "f32": 32,
    "s64": 64,
    "u64": 64,
    "f64": 64,
    "c64": 64,
    "c128": 128,
    "f8e4m3fn": 8,
    "f8e5m2": 8,
    "f8e4m3": 8,
    "f8e3m4": 8,
    "f8e4m3b11fnuz": 8,
    "f8e4m3fnuz": 8,
    "f8e5m2fnuz": 8,
    "f8e8m0fnu": 8,
    "f4e2m1fn": 4,
    "token": 0,
}

# The ops of the receipt, keyed by the protocol's names (`hlo.ops`).
OPS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("all-reduce", "all-reduce-start"),
    "all_gather": ("all-gather", "all-gather-start"),
    "reduce_scatter": ("reduce-scatter",),
}
# Other collectives are counted (never sized) so that the receipt does not hide them.
OTHER_OPS: dict[str, tuple[str, ...]] = {
    "all_to_all": ("all-to-all",),
    "collective_permute": ("collective-permute", "collective-permute-start"),
    "collective_broadcast": ("collective-broadcast",),
}
_OPCODE_KEY = {op: key for d in (OPS, OTHER_OPS) for key, ops in d.items() for op in ops}

# `%name = SHAPE opcode(` with an optional ROOT and an optional `%` (newer printers drop it). The
# shape is whatever lies between `=` and the opcode: an array shape or a (nested) tuple; it holds
# no `=` outside `/*index=N*/` comments and `<=` bounds, so text in another op's attributes never matches.
_INSTR = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>(?:/\*[^*]*\*/|<=|[^=\n])+?)\s+"
    r"(?P<op>" + "|".join(re.escape(o) for o in sorted(_OPCODE_KEY, key=len, reverse=True)) + r")\(",
    re.MULTILINE,
)
# One array shape inside a shape string: `f32[3,3,64,64]`, `bf16[<=128,4]`, `f32[]`.
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([^\]]*)\]")
_COMMENT = re.compile(r"/\*.*?\*/")


class HloParseError(ValueError):
    pass


@dataclass(frozen=True)
class Array:
    dtype: str
    dims: tuple[int, ...]

    @property
    def elems(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        bits = DTYPE_BITS.get(self.dtype)
        if bits is None:
            raise HloParseError(f"unknown HLO element type {self.dtype!r}")
        return (self.elems * bits + 7) // 8


def _split_top_level(s: str) -> list[str]:
    """The comma-separated elements of a tuple body, ignoring commas inside [] {} ()."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(s):
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    tail = s[start:]
    if tail.strip():
        parts.append(tail)
    return parts


def parse_shape(text: str) -> list[Array | list[Array]]:
    """An HLO shape as a list of tuple elements (nested tuples as lists); an array is [Array]."""
    s = _COMMENT.sub("", text).strip()
    if s.startswith("("):
        if not s.endswith(")"):
            raise HloParseError(f"unbalanced tuple shape {text!r}")
        out: list[Array | list[Array]] = []
        for part in _split_top_level(s[1:-1]):
            inner = parse_shape(part)
            out.append(flatten(inner) if part.strip().startswith("(") else _single(inner, part))
        return out
    m = _ARRAY.match(s)
    if m is None:
        raise HloParseError(f"not an HLO shape: {text!r}")
    dims: list[int] = []
    for d in m.group(2).split(","):
        d = d.strip().removeprefix("<=")
        if d:
            if not d.isdigit():
                raise HloParseError(f"bad dimension {d!r} in {text!r}")
            dims.append(int(d))
    return [Array(m.group(1), tuple(dims))]


def _single(parsed: list[Array | list[Array]], text: str) -> Array:
    if len(parsed) != 1 or not isinstance(parsed[0], Array):
        raise HloParseError(f"expected one array shape: {text!r}")
    return parsed[0]


def flatten(parsed: Iterable[Array | list[Array]]) -> list[Array]:
    out: list[Array] = []
    for p in parsed:
        out.extend(p if isinstance(p, list) else [p])
    return out


@dataclass(frozen=True)
class Op:
    name: str
    opcode: str
    arrays: tuple[Array, ...]  # the result arrays the op's elements are counted from

    @property
    def elems(self) -> int:
        return sum(a.elems for a in self.arrays)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    @property
    def is_async(self) -> bool:
        return self.opcode.endswith("-start")


def _result_arrays(opcode: str, shape: str) -> tuple[Array, ...]:
    parsed = parse_shape(shape)
    if opcode == "all-gather-start" and len(parsed) == 2:
        # An async all-gather's shape is (operands, results): count the gathered results only.
        out = parsed[1]
        return tuple(out) if isinstance(out, list) else (out,)
    return tuple(flatten(parsed))


def find_ops(hlo: str, problems: list[str] | None = None) -> list[Op]:
    """Every collective instruction of the module text, in text order. An op whose shape does
    not parse (a printer this parser has not seen) is counted without a size, and why goes to
    `problems` when given: the receipt must not take the run down."""
    ops: list[Op] = []
    for m in _INSTR.finditer(hlo):
        opcode = m.group("op")
        try:
            arrays = _result_arrays(opcode, m.group("shape"))
            unknown = [a.dtype for a in arrays if a.dtype not in DTYPE_BITS]
            if unknown:
                raise HloParseError(f"unknown HLO element type {unknown[0]!r}")
        except HloParseError as e:
            if problems is not None:
                problems.append(f"{m.group('name')}: {e}")
            arrays = ()
        ops.append(Op(m.group("name"), opcode, arrays))
    return ops


@dataclass
class OpStats:
    count: int = 0
    async_count: int = 0  # how many of them are `-start` ops (GPU's async collectives)
    tuple_count: int = 0  # how many have more than one operand (merged by a combiner)
    largest_elems: int = 0
    total_elems: int = 0
    total_bytes: int = 0
    elems: list[int] = field(default_factory=list)  # per op, in text order

    def add(self, op: Op) -> None:
        n = op.elems
        self.count += 1
        self.async_count += int(op.is_async)
        self.tuple_count += int(len(op.arrays) > 1)
        self.largest_elems = max(self.largest_elems, n)
        self.total_elems += n
        self.total_bytes += op.nbytes
        self.elems.append(n)

    def wire(self) -> dict[str, int]:
        """The protocol's `hlo.ops` entry."""
        return {
            "count": self.count,
            "largest_elems": self.largest_elems,
            "total_elems": self.total_elems,
            "total_bytes": self.total_bytes,
        }


@dataclass
class Collectives:
    ops: dict[str, OpStats]
    other: dict[str, int]  # counts of collectives outside the receipt's three
    problems: list[str] = field(default_factory=list)  # ops counted without a size, and why

    def count(self, key: str) -> int:
        if key in self.ops:
            return self.ops[key].count
        return self.other.get(key, 0)

    def counts(self) -> dict[str, int]:
        out = {k: v.count for k, v in self.ops.items()}
        out.update(self.other)
        return out


def collectives(hlo: str) -> Collectives:
    """Counts and sizes of the module's collectives (all three keys always present)."""
    stats = {key: OpStats() for key in OPS}
    other = {key: 0 for key in OTHER_OPS}
    problems: list[str] = []
    for op in find_ops(hlo, problems):
        key = _OPCODE_KEY[op.opcode]
        if key in stats:
            stats[key].add(op)
        else:
            other[key] += 1
    return Collectives(stats, {k: v for k, v in other.items() if v}, problems)


def count_only(hlo: str) -> dict[str, int]:
    """Op counts without sizes: cheap enough for every per-pass snapshot."""
    out = {key: 0 for d in (OPS, OTHER_OPS) for key in d}
    for m in _INSTR.finditer(hlo):
        out[_OPCODE_KEY[m.group("op")]] += 1
    return out


# ---------------------------------------------------------------------------- per-pass dumps

# module_0074.jit_train_step.0032.HLO_passes_after_layout_assignment.after_cpu-all-reduce-combiner
#   .before_tuple-simplifier.txt
_DUMP_NAME = re.compile(
    r"^module_(?P<module>\d+)\.(?P<fn>.+?)\.(?P<seq>\d{4})\.(?P<pipeline>[^.]+)"
    r"\.after_(?P<after>[^.]+)\.before_(?P<before>[^.]+)\.txt$"
)


@dataclass(frozen=True)
class DumpName:
    module: int
    fn: str
    seq: int
    pipeline: str
    after: str  # the pass that produced this snapshot
    before: str  # the pass that runs next


def parse_dump_name(filename: str) -> DumpName | None:
    m = _DUMP_NAME.match(filename)
    if m is None:
        return None
    return DumpName(
        int(m.group("module")),
        m.group("fn"),
        int(m.group("seq")),
        m.group("pipeline"),
        m.group("after"),
        m.group("before"),
    )


@dataclass(frozen=True)
class PassChange:
    pass_name: str
    op: str
    before: int
    after: int

    @property
    def combined(self) -> bool:
        """Fewer ops of a kind that was there before and still is: a merge, not a removal."""
        return 0 < self.after < self.before

    def wire(self) -> dict[str, object]:
        return {"pass": self.pass_name, "op": self.op, "before": self.before, "after": self.after}


def pass_changes(snapshots: Sequence[tuple[str, str]]) -> list[PassChange]:
    """(pass name, module text after it) in pass order -> each change of a collective count.

    The first snapshot is the baseline; a pass that changed nothing is skipped.
    """
    changes: list[PassChange] = []
    prev: dict[str, int] | None = None
    for pass_name, text in snapshots:
        now = count_only(text)
        if prev is not None:
            for key, n in now.items():
                if n != prev[key]:
                    changes.append(PassChange(pass_name, key, prev[key], n))
        prev = now
    return changes


def combined_by(changes: Iterable[PassChange]) -> list[str]:
    """Names of the passes that merged collectives, in the order they ran, each once."""
    out: list[str] = []
    for c in changes:
        if c.combined and c.pass_name not in out:
            out.append(c.pass_name)
    return out


def inferred_combiners(c: Collectives) -> list[str]:
    """Without per-pass dumps: a tuple-shaped collective can only come from a combiner pass."""
    names = {
        "all_reduce": "all-reduce-combiner",
        "all_gather": "all-gather-combiner",
        "reduce_scatter": "reduce-scatter-combiner",
    }
    return [
        f"{names[key]} (inferred: tuple-shaped op)"
        for key, st in c.ops.items()
        if st.tuple_count > 0
    ]


def summary(c: Collectives, k: int) -> str:
    """One line for logs: `35 all-reduce ops (largest 4,788,992 elems, 44.9 MB), ...`."""
    parts = []
    for key, st in c.ops.items():
        if st.count:
            parts.append(
                f"{st.count} {key.replace('_', '-')} ops (largest {st.largest_elems:,} elems, "
                f"{st.total_bytes / 1e6:.1f} MB in all)"
            )
    for key, n in c.other.items():
        parts.append(f"{n} {key.replace('_', '-')} ops")
    return f"k={k}: " + (", ".join(parts) if parts else "no collectives")
