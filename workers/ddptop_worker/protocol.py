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


def obj(fields: dict[str, Check]) -> Check:
    def check(x: Any) -> bool:
        return isinstance(x, dict) and all(k in x and c(x[k]) for k, c in fields.items())

    check.__name__ = "object{" + ",".join(fields) + "}"
    return check


BACKENDS: Final = ("nccl", "gloo", "sim")
WORKERS: Final = ("train", "probe", "allreduce", "sim")
PHASES: Final = ("init", "train", "probe", "bench", "done")
TIMINGS: Final = ("cuda_events", "host", "model")
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
    {"index": uint, "bytes": uint, "ready_ms": nonneg, "start_ms": nonneg, "done_ms": nonneg}
)

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
    "memory": {"allocated_bytes": uint, "reserved_bytes": uint, "peak_bytes": uint},
    "hlo": {"k": uint, "all_reduce_ops": uint, "all_reduce_bytes": uint},
    "log": {"level": one_of(*LOG_LEVELS), "msg": string},
    "result": {
        "experiment": nonempty_string,
        "samples_per_s": opt_nonneg,
        "timed_epochs": uint,
        "params": opt_uint,
        "grad_bytes": opt_uint,
        "bucket_bytes": list_of(uint),
    },
    "bye": {"reason": one_of(*BYE_REASONS)},
}

# Optional fields: checked only when present.
WORKER_OPTIONAL: Final[dict[str, dict[str, Check]]] = {
    "heartbeat": {"phase": one_of(*PHASES)},
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
        if mtype == "hello":
            del fields["step"]
    fields.update(schemas[mtype])
    for name, check in fields.items():
        if name not in msg:
            raise ProtocolError(f"{mtype}: missing field {name}")
        if not check(msg[name]):
            raise ProtocolError(f"{mtype}: bad field {name}={msg[name]!r} ({check.__name__})")
    if direction == "worker":
        for name, check in WORKER_OPTIONAL.get(mtype, {}).items():
            if name in msg and not check(msg[name]):
                raise ProtocolError(f"{mtype}: bad field {name}={msg[name]!r} ({check.__name__})")
        if mtype == "hello" and msg["rank"] >= msg["world_size"]:
            raise ProtocolError(f"hello: rank {msg['rank']} >= world_size {msg['world_size']}")
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
