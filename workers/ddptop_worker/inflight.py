"""What a rank whose steps stopped is doing, for ddptop's watchdog: its pending collectives as
torch's flight recorder holds them, read inside the process (no dump file, no signal).

Standard library at import time: torch is looked up in `sys.modules` only, so a process that
never imported torch.distributed (the simulated client, a bare test) reports nothing.
"""

from __future__ import annotations

import functools
import pickle
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

# Held while the recorder is read (the heartbeat thread) and while a process group is destroyed
# (the script's main thread, through `guard_destroy`): an attached script destroys its group
# while ddptop's heartbeat may be reading the recorder's entries, which point at the group's
# work objects.
_LOCK = threading.Lock()


def guard_destroy(destroy: Callable[..., Any]) -> Callable[..., Any]:
    """`torch.distributed.destroy_process_group`, never at the same time as a recorder read."""

    @functools.wraps(destroy)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return destroy(*args, **kwargs)

    destroy_process_group.__ddptop_guarded__ = True  # type: ignore[attr-defined]
    return destroy_process_group


def coll_state() -> dict[str, Any] | None:
    """`{"pending": n, "op", "seq", "age_s", "last_done"}` for the default process group's
    recorder, or None when there is no recorder to ask (no process group, no buffer, no torch).

    An entry is pending while it is neither retired nor completed: NCCL's watchdog retires an
    entry when its kernels finish; gloo retires it when its work completes.
    """
    dist = sys.modules.get("torch.distributed")
    c10d = sys.modules.get("torch._C._distributed_c10d")
    if dist is None or c10d is None:
        return None
    try:
        with _LOCK:  # the group cannot be destroyed between the check and the read
            if not dist.is_initialized():
                return None
            backend = str(dist.get_backend())
            dump = getattr(c10d, "_dump_nccl_trace" if backend == "nccl" else "_dump_fr_trace")
            raw = dump(True, False, True)
        entries = pickle.loads(bytes(raw)).get("entries", [])  # noqa: S301 - torch's own bytes
    except Exception:  # noqa: BLE001 - a recorder that is off or unavailable is no evidence
        return None
    return summarize(entries, time.time_ns())


# Bytes per element of the dtypes the recorder names (its `input_dtypes`).
DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
    "Char": 1, "Byte": 1, "Bool": 1,
}


def input_bytes(entry: dict[str, Any]) -> int | None:
    """The entry's input tensors' size in bytes, or None when a dtype is not known."""
    sizes, dtypes = entry.get("input_sizes"), entry.get("input_dtypes")
    if not isinstance(sizes, list) or not isinstance(dtypes, list) or len(sizes) != len(dtypes):
        return None
    total = 0
    for shape, dtype in zip(sizes, dtypes):
        width = DTYPE_BYTES.get(str(dtype))
        if width is None or not isinstance(shape, list):
            return None
        n = 1
        for d in shape:
            n *= int(d)
        total += n * width
    return total


def summarize(entries: list[dict[str, Any]], now_ns: int) -> dict[str, Any]:
    pending = [
        e
        for e in entries
        if not e.get("retired") and e.get("state") != "completed" and not e.get("is_p2p")
    ]
    done = [
        int(e["collective_seq_id"])
        for e in entries
        if (e.get("retired") or e.get("state") == "completed") and e.get("collective_seq_id")
    ]
    out: dict[str, Any] = {"pending": len(pending)}
    if done:
        out["last_done"] = max(done)
    if pending:
        oldest = min(pending, key=lambda e: int(e.get("collective_seq_id") or 0))
        out["op"] = str(oldest.get("profiling_name") or "collective")
        seq = oldest.get("collective_seq_id")
        if isinstance(seq, int):
            out["seq"] = seq
        size = input_bytes(oldest)
        if size is not None:
            out["bytes"] = size
        created = oldest.get("time_created_ns")
        if isinstance(created, int):
            out["age_s"] = max(0.0, (now_ns - created) / 1e9)
    return out
