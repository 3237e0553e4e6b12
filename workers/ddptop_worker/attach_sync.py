"""Host syncs of an attached script, timed: the `host sync` phase (issue 46).

A host sync is a call that makes the host wait until the device has done the work queued before
it: `loss.item()`, `t.tolist()`, `t.cpu()`, `float(t)` of a CUDA tensor, `torch.cuda.synchronize()`.
With CUDA events (ddptop's GPU timing) the time the host spends blocked there is invisible: the
device is busy meanwhile, and its phases are timed on the device. What it costs is that the host
cannot queue the next step's work ahead; a rank that syncs more than the others (rank 0 logging
its loss every step) falls behind. So each such call's host time (`time.perf_counter` around the
original) is added up per step on the training loop's thread and sent as the step message's
`sync_ms`: ddptop shows it per rank beside the other phases (median rank vs worst rank).

Only the thread that installed the wraps counts (the script's main thread: DataLoader threads and
ddptop's heartbeat thread do not train). ddptop's own syncs (the slow fault's wait for the
device) call `original_synchronize`, so they are not counted.

Under torch.compile the wraps are taken off at the script's first `torch.compile` call (attach's
`on_compile_call`): dynamo inlines a Python wrap and breaks its graph at the original C method, a
graph break the script does not have (seen with torch 2.11: `Tensor.item` inside a compiled
function broke twice instead of once). A compiled script has no host-sync phase. Should dynamo
trace a wrap anyway (a compile not through `torch.compile`), it calls the original bare.

Not wrapped: `Tensor.__bool__` (`if t.any():`; torch itself tests tensors everywhere, and the
cost would land on every such test), `.to("cpu")`, `.numpy()` (a CUDA tensor cannot), stream
and event `synchronize()`. Their waits fall in whichever phase they run in, as before. On a CPU
tensor none of these waits for anything: `sync_ms` is then the calls' own host cost (µs).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

# The Tensor methods wrapped: each one returns a host value of a (maybe CUDA) tensor.
TENSOR_METHODS = ("item", "tolist", "cpu", "__float__")

original_synchronize: Callable[..., None] = torch.cuda.synchronize


# torch.compiler.is_compiling (torch >= 2.3; dynamo reads it as True while it traces).
_compiling: Callable[[], bool] = getattr(
    getattr(torch, "compiler", None), "is_compiling", None
) or (lambda: False)


class SyncClock:
    """Host milliseconds spent in the wrapped calls on the counting thread since the last
    `take`."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.ms = 0.0
        self.calls = 0
        self.on = True

    def timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = self
        perf = time.perf_counter

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _compiling() or not clock.on or threading.get_ident() != clock.thread:
                return fn(*args, **kwargs)
            t0 = perf()
            try:
                return fn(*args, **kwargs)
            finally:
                clock.ms += (perf() - t0) * 1000.0
                clock.calls += 1

        wrapper.__name__ = getattr(fn, "__name__", "sync")
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    def take(self) -> float:
        """The ms since the last take (and start over)."""
        ms, self.ms, self.calls = self.ms, 0.0, 0
        return ms


def wanted() -> bool:
    """`DDPTOP_HOST_SYNC=0` leaves torch unwrapped (no host-sync row): the other arm of the
    wraps' overhead measurement, and a way out should a wrap ever get in a script's way."""
    return os.environ.get("DDPTOP_HOST_SYNC", "").strip() != "0"


def install(clock: SyncClock) -> Callable[[], None]:
    """Wrap the host-sync calls; returns what puts the originals back."""
    saved: list[tuple[Any, str, Any]] = []
    for name in TENSOR_METHODS:
        orig = getattr(torch.Tensor, name)
        saved.append((torch.Tensor, name, torch.Tensor.__dict__.get(name)))
        setattr(torch.Tensor, name, clock.timed(orig))
    saved.append((torch.cuda, "synchronize", torch.cuda.synchronize))
    torch.cuda.synchronize = clock.timed(original_synchronize)  # type: ignore[assignment]

    def uninstall() -> None:
        clock.on = False
        for owner, name, prev in reversed(saved):
            if prev is None:
                try:
                    delattr(owner, name)  # it was TensorBase's, inherited
                except AttributeError:
                    pass
            else:
                setattr(owner, name, prev)

    return uninstall
