"""Explicit mode for scripts that want control (docs/attach.md):

    import ddptop_worker as dt
    ddp = DistributedDataParallel(model, ...)
    dt.watch(ddp)                 # measure this module (its buckets, its batch size)
    for x, y in loader:
        ...
        opt.step()
        dt.step(samples=len(x))   # a step ends here, with this many samples

Both are no-ops when ddptop is not running the script (`DDPTOP_SOCKET` unset), and they never
raise: a failure inside ddptop turns its instrumentation off and the script goes on. torch is
imported only when ddptop is there (a script that calls them already has it).
"""

from __future__ import annotations

import os
from typing import Any


def _active() -> bool:
    return bool(os.environ.get("DDPTOP_SOCKET"))


def watch(ddp: Any) -> Any:
    """Measure `ddp` (a DistributedDataParallel module); returns it unchanged."""
    if _active():
        try:
            from . import attach

            attach.watch_ddp(ddp)
        except Exception:  # noqa: BLE001 - never break the script; attach logs its own failures
            pass
    return ddp


def step(samples: int | None = None) -> None:
    """End one training step; `samples` is this rank's batch (None: taken from the DDP input)."""
    if not _active():
        return
    try:
        from . import attach
    except Exception:  # noqa: BLE001
        return
    attach.explicit_step(samples)  # guarded inside; only a DDPTOP_INJECT fault raises from here
