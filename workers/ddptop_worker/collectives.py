"""Per-block timing of FSDP2's all-gathers and reduce-scatters.

FSDP2 lets a caller replace each parameter group's collectives (`FSDPModule.set_custom_all_gather`,
`set_custom_reduce_scatter`). The replacements here issue exactly the collectives FSDP's defaults
issue (`all_gather_into_tensor`, `reduce_scatter_tensor`, same arguments) and bracket each one with
two marks from `timing.Clock`. That is the least invasive hook torch 2.11 offers: nothing global is
patched, FSDP's streams, buffers and ordering stay its own, and every call is attributed to the
module it was installed on.

Where the marks land:
- CUDA: FSDP calls the collective with its all-gather (or reduce-scatter) stream current and
  `async_op=False`, so the current stream either runs the NCCL kernel or waits for it. An event
  recorded before the call completes when that stream reaches the collective (after the copy-in);
  one recorded after completes with the kernel. `dur_ms` therefore includes any wait behind an
  earlier collective on NCCL's stream.
- CPU (gloo): a synchronous call returns when the collective has finished, so host
  `perf_counter` readings bracket it exactly. gloo has no reduce-scatter of its own: torch runs it
  as a full all-reduce of the input (ddp-nccl-facts.md §11), so its time overstates FSDP's.
- If FSDP ever passes `async_op=True`, the end mark is taken in the work future's callback (as
  timing.py does for DDP buckets).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from .timing import Clock, Mark

PASSES = ("fwd", "bwd", "opt")
GLOO_REDUCE_SCATTER_NOTE = (
    "gloo has no reduce-scatter: torch runs it as a full all-reduce of the input, "
    "so CPU reduce-scatter times overstate FSDP's communication"
)


@dataclass
class CommRecord:
    op: str  # all_gather | reduce_scatter | all_reduce
    name: str  # the module the collective belongs to ("root" for the root's own parameters)
    pass_: str  # fwd | bwd | opt
    nbytes: int  # nccl-tests convention: all-gather output bytes, reduce-scatter input bytes
    start: Mark
    end: Mark | None = None


class CommRecorder:
    """Collects the CommRecords of the current step. `pass_` is set by the training loop before
    forward and before backward; the collectives read it when they are issued (backward runs them
    on autograd's thread, after the loop set it)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.pass_ = "fwd"
        self._current: list[CommRecord] | None = None
        self._lock = threading.Lock()

    def begin_step(self) -> list[CommRecord]:
        with self._lock:
            self._current = []
            return self._current

    def end_step(self) -> None:
        with self._lock:
            self._current = None

    def timed(self, op: str, name: str, nbytes: int, call: Callable[[], Any]) -> Any:
        """Run `call` (one collective) between two marks; return what it returns."""
        with self._lock:
            records = self._current
            pass_ = self.pass_
        if records is None:
            return call()
        rec = CommRecord(op, name, pass_, nbytes, self.clock.mark())
        with self._lock:
            records.append(rec)
        work = call()
        if isinstance(work, dist.Work):
            clock = self.clock

            def _done(f: torch.futures.Future[Any]) -> None:
                rec.end = clock.mark()

            work.get_future().then(_done)
        else:
            rec.end = self.clock.mark()
        return work


def _nbytes(t: torch.Tensor) -> int:
    return int(t.numel()) * int(t.element_size())


class _Timed:
    """What both timed collectives share: the recorder, the unit's name, FSDP's default buffer."""

    def __init__(self, recorder: CommRecorder, name: str) -> None:
        self.recorder = recorder
        self.name = name

    def allocate(
        self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)


class TimedAllGather(_Timed, AllGather):
    """FSDP's default all-gather, timed and named."""

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        async_op: bool = False,
    ) -> dist.Work | None:
        def call() -> dist.Work | None:
            return dist.all_gather_into_tensor(
                output_tensor, input_tensor, group=group, async_op=async_op
            )

        out: dist.Work | None = self.recorder.timed(
            "all_gather", self.name, _nbytes(output_tensor), call
        )
        return out


class TimedReduceScatter(_Timed, ReduceScatter):
    """FSDP's default reduce-scatter, timed and named."""

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: Any,
        async_op: bool = False,
    ) -> dist.Work | None:
        def call() -> dist.Work | None:
            return dist.reduce_scatter_tensor(
                output=output_tensor, input=input_tensor, group=group, op=op, async_op=async_op
            )

        out: dist.Work | None = self.recorder.timed(
            "reduce_scatter", self.name, _nbytes(input_tensor), call
        )
        return out


def install(module: Any, recorder: CommRecorder, name: str) -> None:
    """Time the collectives of one `fully_shard`-ed module (an FSDPModule)."""
    module.set_custom_all_gather(TimedAllGather(recorder, name))
    module.set_custom_reduce_scatter(TimedReduceScatter(recorder, name))


def wait_records(records: list[CommRecord], timeout_s: float = 60.0) -> None:
    """Block until every record has its end mark and both marks are complete."""
    deadline = time.monotonic() + timeout_s
    for r in records:
        while r.end is None and time.monotonic() < deadline:
            time.sleep(0.0001)
        Clock.wait(r.start)
        if r.end is not None:
            Clock.wait(r.end)


def records_complete(records: list[CommRecord]) -> bool:
    return all(r.end is not None and Clock.done(r.end) for r in records)


def comm_ops(records: list[CommRecord], step_start: Mark) -> list[dict[str, Any]]:
    """The `comm` message's ops: times in ms from the step's start mark, in issue order."""
    ops: list[dict[str, Any]] = []
    for r in records:
        if r.end is None:
            continue
        start = max(0.0, Clock.ms(step_start, r.start))
        ops.append(
            {
                "op": r.op,
                "name": r.name,
                "pass": r.pass_,
                "bytes": r.nbytes,
                "start_ms": start,
                "dur_ms": max(0.0, Clock.ms(r.start, r.end)),
            }
        )
    return ops
