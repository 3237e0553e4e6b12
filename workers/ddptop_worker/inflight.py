"""What a rank whose steps stopped is doing, for ddptop's watchdog: its pending collectives as
torch's flight recorder holds them, read inside the process (no dump file, no signal).

Standard library at import time: torch is looked up in `sys.modules` only, so a process that
never imported torch.distributed (the simulated client, a bare test) reports nothing.
"""

from __future__ import annotations

import pickle
import sys
import time
from typing import Any


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
        if not dist.is_initialized():
            return None
        backend = str(dist.get_backend())
        dump = getattr(c10d, "_dump_nccl_trace" if backend == "nccl" else "_dump_fr_trace")
        raw = dump(True, False, True)
        entries = pickle.loads(bytes(raw)).get("entries", [])  # noqa: S301 - torch's own bytes
    except Exception:  # noqa: BLE001 - a recorder that is off or unavailable is no evidence
        return None
    return summarize(entries, time.time_ns())


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
        created = oldest.get("time_created_ns")
        if isinstance(created, int):
            out["age_s"] = max(0.0, (now_ns - created) / 1e9)
    return out
