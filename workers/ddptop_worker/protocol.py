"""The ddptop wire protocol (docs/protocol.md), version 1: a small stdlib-only validator.

`parse_line(raw, direction)` decodes one JSON line and checks it against the message schemas;
`validate(msg, direction)` checks an already-built dict. Both raise `ProtocolError` on anything
ddptop would refuse (`bad_message`), and return the message type otherwise. Unknown extra fields
are ignored, as the protocol says.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Final, Literal

VERSION: Final = 1
MAX_LINE_BYTES: Final = 1024 * 1024  # excluding the newline

Direction = Literal["worker", "ddptop"]


class ProtocolError(ValueError):
    """A line or message that does not follow docs/protocol.md."""


Check = Callable[[Any], bool]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) and math.isfinite(x)


def uint(x: Any) -> bool:
    return _is_int(x) and x >= 0


def pos_int(x: Any) -> bool:
    return _is_int(x) and x >= 1


def nonneg(x: Any) -> bool:
    return _is_num(x) and x >= 0


def boolean(x: Any) -> bool:
    return isinstance(x, bool)


def string(x: Any) -> bool:
    return isinstance(x, str)


def nonempty_string(x: Any) -> bool:
    return isinstance(x, str) and len(x) > 0


def opt_string(x: Any) -> bool:
    return x is None or isinstance(x, str)


def opt_nonneg(x: Any) -> bool:
    return x is None or nonneg(x)


def opt_uint(x: Any) -> bool:
    return x is None or uint(x)


def opt(check: Check) -> Check:
    """`check`, or null: an optional field sent as null means the same as leaving it out."""

    def checked(x: Any) -> bool:
        return x is None or check(x)

    checked.__name__ = f"{check.__name__} or null"
    return checked


def finite(x: Any) -> bool:
    return _is_num(x)


def one_of(*values: str) -> Check:
    allowed = frozenset(values)

    def check(x: Any) -> bool:
        return isinstance(x, str) and x in allowed

    check.__name__ = "one of " + "|".join(values)
    return check


def list_of(item: Check) -> Check:
    def check(x: Any) -> bool:
        return isinstance(x, list) and all(item(e) for e in x)

    check.__name__ = f"list of {item.__name__}"
    return check


def obj(fields: dict[str, Check], optional: dict[str, Check] | None = None) -> Check:
    """An object with every key of `fields`; keys of `optional` are checked when present."""
    extra = optional or {}

    def check(x: Any) -> bool:
        return (
            isinstance(x, dict)
            and all(k in x and c(x[k]) for k, c in fields.items())
            and all(c(x[k]) for k, c in extra.items() if k in x)
        )

    check.__name__ = "object{" + ",".join([*fields, *(k + "?" for k in extra)]) + "}"
    return check


def dict_of(value: Check) -> Check:
    def check(x: Any) -> bool:
        return isinstance(x, dict) and all(isinstance(k, str) and value(v) for k, v in x.items())

    check.__name__ = f"object of {value.__name__}"
    return check


BACKENDS: Final = ("nccl", "gloo", "sim", "xla", "copy")
WORKERS: Final = ("train", "probe", "allreduce", "sim", "handrolled", "fsdp", "jax", "attach")
INSTRUMENTS: Final = ("full", "steps_only", "off")
# plan.comm_timing: what times the buckets ("untimed": the script's own comm hook runs and the
# plugin is not reporting; issue 45).
COMM_TIMINGS: Final = ("comm_hook", "nccl_profiler", "untimed")
MATMUL_PRECISIONS: Final = ("highest", "high", "medium")
PHASES: Final = ("init", "ddp_init", "train", "probe", "bench", "compile", "autotune", "done")
TIMINGS: Final = ("cuda_events", "host", "profiler", "model")
COLLECTIVES: Final = ("all_gather", "reduce_scatter", "all_reduce", "broadcast")
PASSES: Final = ("fwd", "bwd", "opt")
STRATEGIES: Final = ("ddp", "zero1", "fsdp", "jax_data", "jax_fsdp")
SHARDINGS: Final = ("data", "fsdp")
HLO_OPS: Final = ("all_reduce", "all_gather", "reduce_scatter")
OPTIMIZERS: Final = ("sgd", "adam")
DDP_ARGS: Final = ("bucket_cap_mb", "static_graph", "gradient_as_bucket_view")
# ddptop's families, each with its result's own optional fields (Rust: `protocol::FamilyResult`'s
# records; tests/protocol_fixtures.rs holds the families equal to `run::Experiment`'s, in order):
# a result names the family it measured. Another family's field is an unknown key in Rust and is
# ignored here too, so both sides accept the same lines (tests/fixtures/protocol/cases.jsonl).
_TORCH_RESULT: Final = ("optimizer", "matmul_precision", "cudnn_benchmark")
_ATTACH_RESULT: Final = (
    "process_group",
    "ddp_module",
    "ddp_args",
    "epochs_seen",
    "compile_s",
    "compiles",
    "recompiles",
    "compile_steps",
)
RESULT_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "weak": _TORCH_RESULT,
    "strong": _TORCH_RESULT,
    "probe": _TORCH_RESULT,
    "allreduce": (),
    "jax": ("optimizer", "jax_matmul_precision"),
    "fsdp": (*_TORCH_RESULT, "strategy"),
    "attach": (*_TORCH_RESULT, *_ATTACH_RESULT),
    "handrolled": _TORCH_RESULT,
    "zero1": (*_TORCH_RESULT, "strategy"),
}
EXPERIMENTS: Final = tuple(RESULT_FIELDS)
LOG_LEVELS: Final = ("debug", "info", "warn", "error")
BYE_REASONS: Final = ("done", "stopped", "error")
PROBE_MODES: Final = ("synced", "no_sync")
ERROR_CODES: Final = (
    "bad_token",
    "unknown_run",
    "duplicate_rank",
    "expected_hello",
    "peer_uid",
    "line_too_long",
    "bad_message",
)
COMMANDS: Final = ("probe_on", "probe_off", "dump_fr", "stop")

# Fields every worker message carries (besides v and type). `hello` has no `step`.
COMMON: Final[dict[str, Check]] = {"rank": uint, "step": uint, "t": nonneg}

BUCKET: Final = obj(
    {"index": uint, "bytes": uint, "ready_ms": nonneg, "start_ms": nonneg, "done_ms": nonneg},
    {"kernel_ms": opt(nonneg)},
)

COMM_OP: Final = obj(
    {
        "op": one_of(*COLLECTIVES),
        "name": string,
        "pass": one_of(*PASSES),
        "bytes": uint,
        "start_ms": nonneg,
        "dur_ms": nonneg,
    }
)


HLO_STATS_KEYS: Final = ("count", "largest_elems", "total_elems", "total_bytes")


def hlo_op_stats(x: Any) -> bool:
    return (
        isinstance(x, dict)
        and all(k in x and uint(x[k]) for k in HLO_STATS_KEYS)
        and x["largest_elems"] <= x["total_elems"]
    )


hlo_op_stats.__name__ = "{count,largest_elems<=total_elems,total_bytes}"

# Other op names are ignored, like unknown fields.
# A heartbeat's view of the rank's collectives (inflight.coll_state).
FINDING_KINDS: Final = ("unused_parameters",)
# At most 64 names of at most 200 characters (ddptop refuses more: protocol::Finding).


def finding_names(x: Any) -> bool:
    return (
        isinstance(x, list)
        and len(x) <= 64
        and all(isinstance(n, str) and len(n) <= 200 for n in x)
    )


FINDING: Final = obj(
    {"kind": one_of(*FINDING_KINDS)},
    {"names": finding_names, "count": opt_uint},
)

RENDEZVOUS_STATES: Final = ("entered", "joined")


def short_string(x: Any) -> bool:
    return x is None or (isinstance(x, str) and len(x) <= 200)


def interface_list(x: Any) -> bool:
    # At most 32 of at most 200 characters (ddptop refuses more: protocol::Rendezvous).
    return isinstance(x, list) and len(x) <= 32 and all(short_string(i) and i is not None for i in x)


RENDEZVOUS: Final = obj(
    {"state": one_of(*RENDEZVOUS_STATES)},
    {
        "master_addr": short_string,
        "master_port": short_string,
        "gloo_socket_ifname": short_string,
        "nccl_socket_ifname": short_string,
        "interfaces": interface_list,
    },
)

COLL_STATE: Final = obj(
    {"pending": uint},
    {
        "op": opt_string,
        "seq": opt_uint,
        "age_s": opt_nonneg,
        "last_done": opt_uint,
        "bytes": opt_uint,
    },
)
HLO_OPS_CHECK: Final = obj({}, {name: hlo_op_stats for name in HLO_OPS})
# The NCCL profiler plugin's batch (plugins/nccl-profiler; docs/protocol.md `nccl`).
NCCL_INFLIGHT: Final = obj(
    {
        "func": string,
        "seq": uint,
        "bytes": uint,
        "t_call": nonneg,
        "age_s": nonneg,
        "kernel": boolean,
    }
)
NCCL_COLL: Final = obj(
    {
        "func": string,
        "seq": uint,
        "count": uint,
        "bytes": uint,
        "dtype": string,
        "algo": string,
        "proto": string,
        "channels": uint,
        "t_call": nonneg,
        "t_kernel": opt_nonneg,
        "t_end": nonneg,
        "kernel_us": opt_nonneg,
    },
    {"partial": boolean},
)
NCCL_FUNC_SUM: Final = obj({"count": uint, "bytes": uint, "kernel_us": nonneg})
# Messages without a training step: the plugin knows nothing of steps.
STEPLESS: Final = ("hello", "nccl_hello", "nccl")

# Required fields per message type (worker -> ddptop), beyond COMMON.
WORKER_SCHEMAS: Final[dict[str, dict[str, Check]]] = {
    "hello": {
        "token": nonempty_string,
        "run_id": nonempty_string,
        "world_size": pos_int,
        "local_rank": uint,
        "pid": uint,
        "host": string,
        "device": string,
        "backend": one_of(*BACKENDS),
        "worker": one_of(*WORKERS),
        "torch": opt_string,
        "nccl": opt_string,
        "cuda": opt_string,
    },
    "heartbeat": {},
    "step": {
        "epoch": uint,
        "warmup": boolean,
        "sync": boolean,
        "samples": uint,
        "fwd_ms": nonneg,
        "bwd_ms": nonneg,
        "opt_ms": nonneg,
        "data_ms": nonneg,
        "step_ms": nonneg,
        "timing": one_of(*TIMINGS),
    },
    "buckets": {
        "rebuilt": boolean,
        "bwd_compute_ms": nonneg,
        "exposed_ms": nonneg,
        "buckets": list_of(BUCKET),
    },
    "epoch": {
        "epoch": uint,
        "warmup": boolean,
        "samples": uint,
        "seconds": nonneg,
        "samples_per_s": nonneg,
        "data_wait_ms": nonneg,
    },
    "probe": {
        "block": uint,
        "mode": one_of(*PROBE_MODES),
        "steps": uint,
        "median_ms": nonneg,
        "min_ms": nonneg,
        "max_ms": nonneg,
    },
    "bench": {
        "op": nonempty_string,
        "bytes": uint,
        "dtype": nonempty_string,
        "iters": uint,
        "time_us": nonneg,
        "algbw_gbs": nonneg,
        "busbw_gbs": nonneg,
    },
    # Required keys, null where there is no allocator counter (CPU).
    "memory": {
        "allocated_bytes": opt_uint,
        "reserved_bytes": opt_uint,
        "peak_bytes": opt_uint,
    },
    "hlo": {"k": uint, "all_reduce_ops": uint, "all_reduce_bytes": uint},
    "log": {"level": one_of(*LOG_LEVELS), "msg": string},
    "result": {
        "experiment": one_of(*EXPERIMENTS),
        "samples_per_s": opt_nonneg,
        "timed_epochs": uint,
        "params": opt_uint,
        "grad_bytes": opt_uint,
        "bucket_bytes": list_of(uint),
    },
    "bye": {"reason": one_of(*BYE_REASONS)},
    "plan": {"total_steps": opt_uint},
    "comm": {"timing": one_of(*TIMINGS), "ops": list_of(COMM_OP)},
    "check": {
        "name": string,
        "a": finite,
        "b": finite,
        "diff": nonneg,
        "tol": nonneg,
        "ok": boolean,
    },
    "nccl_hello": {
        "token": nonempty_string,
        "run_id": string,
        "world_size": pos_int,
        "pid": uint,
        "host": string,
        "plugin": string,
        "abi": string,
    },
    "nccl": {
        "comm": string,
        "comm_rank": uint,
        "nranks": uint,
        "nnodes": uint,
        "last_done": dict_of(uint),
        "inflight": list_of(NCCL_INFLIGHT),
        "colls": list_of(NCCL_COLL),
        "more": uint,
        "funcs": dict_of(NCCL_FUNC_SUM),
        "dropped": uint,
        "lost": uint,
        "bad": uint,
        "final": boolean,
    },
}

# Optional fields: checked only when present; null allowed except for hello.devices.
WORKER_OPTIONAL: Final[dict[str, dict[str, Check]]] = {
    "hello": {
        "devices": pos_int,
        "instrument": opt(one_of(*INSTRUMENTS)),
        "node": opt_string,
        # The NCCL library the rank mapped and the ncclProfiler_vN names it holds (nccl_lib.py).
        "nccl_lib": opt(obj({"path": string, "profiler": list_of(uint)})),
    },
    "heartbeat": {
        "phase": opt(one_of(*PHASES)),
        "cpu_s": opt_nonneg,
        "coll": opt(COLL_STATE),
        "rendezvous": opt(RENDEZVOUS),
    },
    "step": {
        "fused": opt(boolean),
        "loss": opt(finite),
        "every": opt(pos_int),
        "t_bwd": opt(nonneg),
        "compiled": opt(boolean),
        "sync_ms": opt(nonneg),
        "exposed_ms": opt(nonneg),
    },
    "probe": {"live": opt(boolean)},
    "buckets": {"start_inferred": opt(boolean)},
    "memory": {
        "device": opt_uint,
        "strategy": opt(one_of(*STRATEGIES)),
        "phase": opt_string,
        "param_bytes": opt_uint,
        "grad_bytes": opt_uint,
        "optim_bytes": opt_uint,
        "predicted_bytes": opt_uint,
    },
    "hlo": {
        "sharding": opt(one_of(*SHARDINGS)),
        "ops": opt(HLO_OPS_CHECK),
        "combined_by": opt(list_of(string)),
        "layout": opt(dict_of(string)),
        "platform": opt_string,
    },
    "result": {
        "optimizer": opt(one_of(*OPTIMIZERS)),
        "strategy": opt(one_of(*STRATEGIES)),
        "matmul_precision": opt(one_of(*MATMUL_PRECISIONS)),
        "cudnn_benchmark": opt(boolean),
        "jax_matmul_precision": opt(nonempty_string),
        "process_group": opt(boolean),
        "ddp_module": opt(boolean),
        "ddp_args": opt(list_of(one_of(*DDP_ARGS))),
        "epochs_seen": opt_uint,
        "compile_s": opt_nonneg,
        "compiles": opt_uint,
        "recompiles": opt_uint,
        "compile_steps": opt_uint,
    },
    "plan": {
        "epochs": opt_uint,
        "steps_per_epoch": opt_uint,
        "phase": opt(one_of(*PHASES)),
        "comm_timing": opt(one_of(*COMM_TIMINGS)),
        "comm_why": opt_string,
        "bucket_bytes": opt(list_of(uint)),
    },
    "check": {"note": opt_string},
    "nccl_hello": {"node": opt_string},
    "log": {"finding": opt(FINDING)},
}

DDPTOP_SCHEMAS: Final[dict[str, dict[str, Check]]] = {
    "welcome": {"run_id": nonempty_string, "rank": uint, "heartbeat_s": nonneg},
    "error": {"code": one_of(*ERROR_CODES), "msg": string},
    "command": {"cmd": one_of(*COMMANDS)},
}


def _reject_constant(name: str) -> Any:
    raise ProtocolError(f"non-finite number {name} is not JSON")


def decode(raw: str | bytes) -> dict[str, Any]:
    """Parse one line (without its newline) into a JSON object, or raise ProtocolError."""
    if isinstance(raw, bytes):
        if len(raw) > MAX_LINE_BYTES:
            raise ProtocolError(f"line of {len(raw)} bytes is over 1 MiB")
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"invalid UTF-8: {e}") from None
    elif len(raw.encode("utf-8")) > MAX_LINE_BYTES:
        raise ProtocolError("line is over 1 MiB")
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"a JSON {type(value).__name__}, not an object")
    return value


def validate(msg: Any, direction: Direction) -> str:
    """Check a decoded message; return its type or raise ProtocolError."""
    if not isinstance(msg, dict):
        raise ProtocolError("message is not an object")
    if "v" not in msg:
        raise ProtocolError("missing field v")
    if not _is_int(msg["v"]) or msg["v"] != VERSION:
        raise ProtocolError(f"unsupported version v={msg['v']!r}")
    mtype = msg.get("type")
    if not isinstance(mtype, str):
        raise ProtocolError("missing or non-string field type")
    schemas = WORKER_SCHEMAS if direction == "worker" else DDPTOP_SCHEMAS
    if mtype not in schemas:
        raise ProtocolError(f"unknown type {mtype!r} for direction {direction}")
    fields: dict[str, Check] = {}
    if direction == "worker":
        fields.update(COMMON)
        if mtype in STEPLESS:
            del fields["step"]
    fields.update(schemas[mtype])
    for name, check in fields.items():
        if name not in msg:
            raise ProtocolError(f"{mtype}: missing field {name}")
        if not check(msg[name]):
            raise ProtocolError(f"{mtype}: bad field {name}={msg[name]!r} ({check.__name__})")
    if direction == "worker":
        optional = WORKER_OPTIONAL.get(mtype, {})
        if mtype == "result":
            own = RESULT_FIELDS[msg["experiment"]]
            optional = {n: c for n, c in optional.items() if n in own}
        for name, check in optional.items():
            if name in msg and not check(msg[name]):
                raise ProtocolError(f"{mtype}: bad field {name}={msg[name]!r} ({check.__name__})")
        if mtype in ("hello", "nccl_hello") and msg["rank"] >= msg["world_size"]:
            raise ProtocolError(f"{mtype}: rank {msg['rank']} >= world_size {msg['world_size']}")
    return mtype


def parse_line(raw: str | bytes, direction: Direction) -> dict[str, Any]:
    """Decode and validate one line; return the message."""
    msg = decode(raw)
    validate(msg, direction)
    return msg


def encode(msg: dict[str, Any]) -> bytes:
    """Serialize one message as a protocol line (with the trailing newline).

    Raises ValueError for NaN/inf (allow_nan=False) and ProtocolError for lines over 1 MiB.
    """
    line = json.dumps(msg, separators=(",", ":"), allow_nan=False).encode("ascii")
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"{msg.get('type')}: line of {len(line)} bytes is over 1 MiB")
    return line + b"\n"


# Builders for the type-specific fields of the newer messages, for `Client.send(mtype, **fields)`.
# Each validates what it builds, so a bad value fails at the call site with the field's name.


def _checked(mtype: str, fields: dict[str, Any]) -> dict[str, Any]:
    validate({"v": VERSION, "type": mtype, "rank": 0, "step": 0, "t": 0.0, **fields}, "worker")
    return fields


def hello_extra(
    *,
    devices: int = 1,
    instrument: str | None = None,
    node: str | None = None,
    nccl_lib: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The optional `hello` fields, to merge into a hello message (only those that are set)."""
    if not pos_int(devices):
        raise ProtocolError(f"hello: devices must be an int >= 1, got {devices!r}")
    if instrument is not None and instrument not in INSTRUMENTS:
        raise ProtocolError(f"hello: instrument must be one of {'|'.join(INSTRUMENTS)}")
    if node is not None and not isinstance(node, str):
        raise ProtocolError("hello: node must be a string")
    out: dict[str, Any] = {"devices": devices}
    if instrument is not None:
        out["instrument"] = instrument
    if node is not None:
        out["node"] = node
    if nccl_lib is not None:
        if not WORKER_OPTIONAL["hello"]["nccl_lib"](nccl_lib):
            raise ProtocolError("hello: nccl_lib must be {path: string, profiler: [int >= 0]}")
        out["nccl_lib"] = nccl_lib
    return out


def plan_fields(
    total_steps: int | None,
    *,
    epochs: int | None = None,
    steps_per_epoch: int | None = None,
    phase: str | None = "train",
    comm_timing: str | None = None,
    comm_why: str | None = None,
    bucket_bytes: list[int] | None = None,
) -> dict[str, Any]:
    """`plan`: total_steps None means unknown (attach mode); `comm_timing` says what times DDP's
    buckets, `bucket_bytes` their layout when no comm hook reports it (docs/profiler.md)."""
    fields: dict[str, Any] = {"total_steps": total_steps}
    for key, value in (
        ("epochs", epochs),
        ("steps_per_epoch", steps_per_epoch),
        ("phase", phase),
        ("comm_timing", comm_timing),
        ("comm_why", comm_why),
        ("bucket_bytes", bucket_bytes),
    ):
        if value is not None:
            fields[key] = value
    return _checked("plan", fields)


def comm_op(
    op: str, name: str, pass_: str, nbytes: int, start_ms: float, dur_ms: float
) -> dict[str, Any]:
    """One entry of `comm.ops`; times in ms from the step's start."""
    entry: dict[str, Any] = {
        "op": op,
        "name": name,
        "pass": pass_,
        "bytes": nbytes,
        "start_ms": start_ms,
        "dur_ms": dur_ms,
    }
    if not COMM_OP(entry):
        raise ProtocolError(f"comm: bad op {entry!r} ({COMM_OP.__name__})")
    return entry


def comm_fields(timing: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
    return _checked("comm", {"timing": timing, "ops": ops})


def check_fields(
    name: str,
    a: float,
    b: float,
    tol: float,
    *,
    note: str | None = None,
    diff: float | None = None,
) -> dict[str, Any]:
    """`check` with ok = diff <= tol; diff is |a - b| unless the caller measured its own distance
    (e.g. the largest elementwise difference of two parameter sets whose norms are a and b)."""
    if not (finite(a) and finite(b)):
        raise ProtocolError(f"check {name}: a={a!r} and b={b!r} must be finite numbers")
    diff = abs(float(a) - float(b)) if diff is None else float(diff)
    fields: dict[str, Any] = {
        "name": name,
        "a": a,
        "b": b,
        "diff": diff,
        "tol": tol,
        "ok": diff <= tol,
    }
    if note is not None:
        fields["note"] = note
    return _checked("check", fields)


def hlo_ops_entry(
    count: int, largest_elems: int, total_elems: int, total_bytes: int
) -> dict[str, int]:
    """One value of `hlo.ops`."""
    entry = {
        "count": count,
        "largest_elems": largest_elems,
        "total_elems": total_elems,
        "total_bytes": total_bytes,
    }
    if not hlo_op_stats(entry):
        raise ProtocolError(f"hlo: bad ops entry {entry!r} ({hlo_op_stats.__name__})")
    return entry
