"""Step and per-bucket timing without a per-step synchronize.

On CUDA every mark is a `torch.cuda.Event` recorded on the current stream and read one or two
steps later (`Pending`); on CPU (gloo) marks are host `time.perf_counter()` readings, which are the
real times there because CPU compute is synchronous.

The per-bucket all-reduce timeline comes from a DDP comm hook (ddp-nccl-facts.md §1.8): a *ready*
mark at hook entry (the bucket's gradients are complete on the compute stream), a *done* mark in
the all-reduce future's `then` callback (on CUDA that callback runs on a stream that waits for the
NCCL kernel, so an event recorded there completes with it; on gloo the future completes when the
all-reduce has finished on the host). Kernel start ≈ max(ready_i, done_{i-1}) since all-reduces
serialize in bucket order: an inference (`start_inferred`), which counts the all-reduce's wait
behind backward kernels on the GPU as communication.

Where torch measures the NCCL kernel itself, the start is measured instead: with collective
timing on (`TORCH_NCCL_ENABLE_TIMING=1`, or `ProcessGroup._enable_collectives_timing()`),
ProcessGroupNCCL records a start event on its stream before the kernel, and `Work._get_duration()`
(torch 2.11: WorkNCCL::getDuration, ProcessGroupNCCL.hpp) is the elapsed time from it to the end
event, in ms. Then start = done - kernel_ms, and start - ready is the bucket's queueing. Gloo has
no such duration ("This Backend doesn't support getDuration"): there the start stays inferred.

No `from __future__ import annotations` here: DDP's `_check_comm_hook` compares the hook's
annotations with the real `dist.GradBucket` / `torch.futures.Future[torch.Tensor]` objects.
"""

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import GradBucket  # the same object as dist.GradBucket

Mark = Union["torch.cuda.Event", float]


class Clock:
    """Makes marks: CUDA events on cuda devices, perf_counter seconds elsewhere."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.method = "cuda_events" if self.cuda else "host"

    def mark(self) -> Mark:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            ev.record()
            return ev
        return time.perf_counter()

    @staticmethod
    def ms(a: Mark, b: Mark) -> float:
        """Milliseconds from mark a to mark b (both must be complete)."""
        if isinstance(a, float) and isinstance(b, float):
            return (b - a) * 1000.0
        assert not isinstance(a, float) and not isinstance(b, float)
        return float(a.elapsed_time(b))

    @staticmethod
    def done(m: Mark) -> bool:
        return isinstance(m, float) or bool(m.query())  # type: ignore[no-untyped-call]

    @staticmethod
    def wait(m: Mark) -> None:
        if not isinstance(m, float):
            m.synchronize()


@dataclass
class BucketRecord:
    index: int
    nbytes: int
    ready: Mark
    done: Optional[Mark] = None
    work: Any = None  # the all-reduce's Work, kept when kernel timing is on
    kernel_ms: Optional[float] = None  # NCCL's own measure of the kernel, once resolved
    # False: only the ready mark is taken (no `done`): the step's exposed comm without its
    # timeline. A done mark is an event recorded in the all-reduce future's callback, on the
    # callback's side stream, and costs ~1 ms of GPU time a step on an H100 where the ready
    # marks together cost ~0.13 ms (scripts/device/timed_step_cost.py --split).
    timeline: bool = True


@dataclass
class StepMarks:
    """The marks of one step, plus whatever the caller wants back when it resolves."""

    marks: dict[str, Mark] = field(default_factory=dict)
    buckets: Optional[list[BucketRecord]] = None
    info: dict[str, Any] = field(default_factory=dict)

    def last(self) -> Mark:
        return list(self.marks.values())[-1]


def step_figures(sm: StepMarks) -> dict[str, float]:
    """A timed step's phase times for its `step` message, from the marks `timed_step` set
    (start, fwd0, bwd0, bwd1, opt1) and the data wait the loop measured."""
    m = sm.marks
    return {
        "fwd_ms": max(0.0, Clock.ms(m["fwd0"], m["bwd0"])),
        "bwd_ms": max(0.0, Clock.ms(m["bwd0"], m["bwd1"])),
        "opt_ms": max(0.0, Clock.ms(m["bwd1"], m["opt1"])),
        "data_ms": max(0.0, float(sm.info["data_ms"])),
        "step_ms": max(0.0, Clock.ms(m["start"], m["opt1"])),
    }


class Pending:
    """Steps waiting for their events: resolved when complete, or forced after `lag` steps."""

    def __init__(self, lag: int = 2) -> None:
        self.lag = lag
        self._q: deque[StepMarks] = deque()

    def push(self, s: StepMarks) -> None:
        self._q.append(s)

    def pop_ready(self, force_all: bool = False) -> list[StepMarks]:
        out: list[StepMarks] = []
        while self._q:
            head = self._q[0]
            complete = _complete(head)
            if not complete and (force_all or len(self._q) > self.lag):
                _wait(head)
                complete = True
            if not complete:
                break
            out.append(self._q.popleft())
        return out

    def __len__(self) -> int:
        return len(self._q)


def _complete(s: StepMarks) -> bool:
    if not Clock.done(s.last()):
        return False
    for b in s.buckets or []:
        if b.timeline and (b.done is None or not Clock.done(b.done)):
            return False
    return True


def _wait(s: StepMarks) -> None:
    Clock.wait(s.last())
    for b in s.buckets or []:
        if not b.timeline:
            continue  # its ready mark is before the step's last one
        # The done callback runs once the all-reduce future completes; the step's last mark is
        # after finalize_backward waited for every bucket, so this loop is short.
        deadline = time.monotonic() + 60.0
        while b.done is None and time.monotonic() < deadline:
            time.sleep(0.0001)
        if b.done is not None:
            Clock.wait(b.done)


@dataclass
class BucketSpan:
    index: int
    nbytes: int
    ready_ms: float
    start_ms: float
    done_ms: float
    kernel_ms: Optional[float] = None  # None: start_ms is inferred


def start_inferred(spans: list[BucketSpan]) -> bool:
    """True when any span's start is the max(ready, previous done) inference."""
    return any(s.kernel_ms is None for s in spans)


def bucket_timeline(
    records: list[BucketRecord], bwd_start: Mark, bwd_end: Mark
) -> tuple[list[BucketSpan], float, float]:
    """(spans in all-reduce order, bwd_compute_ms, exposed_ms) relative to backward start."""
    spans: list[BucketSpan] = []
    prev_done = 0.0
    for r in records:
        if r.done is None:
            continue
        ready = max(0.0, Clock.ms(bwd_start, r.ready))
        done = max(ready, Clock.ms(bwd_start, r.done))
        if r.kernel_ms is not None:
            # The done mark completes right after NCCL's end event, so the kernel began
            # kernel_ms before it; it cannot have begun before its gradients were ready.
            start = min(done, max(ready, done - r.kernel_ms))
        else:
            start = min(done, max(ready, prev_done))
        spans.append(BucketSpan(r.index, r.nbytes, ready, start, done, r.kernel_ms))
        prev_done = done
    if not spans:
        return spans, 0.0, 0.0
    last_ready = spans[-1].ready_ms
    exposed = max(0.0, Clock.ms(bwd_start, bwd_end) - last_ready)
    return spans, last_ready, exposed


def exposed_from_ready(
    records: list[BucketRecord], bwd_start: Mark, bwd_end: Mark
) -> Optional[tuple[float, float]]:
    """(bwd_compute_ms, exposed_ms) from the ready marks alone, as `bucket_timeline` reckons
    them (the last bucket in all-reduce order was ready at bwd_compute_ms; the backward ended
    exposed_ms later); None without a bucket."""
    if not records:
        return None
    last_ready = max(0.0, Clock.ms(bwd_start, records[-1].ready))
    return last_ready, max(0.0, Clock.ms(bwd_start, bwd_end) - last_ready)


class BucketTimer:
    """State of the timing comm hook. The hook always all-reduces (like DDP's default hook);
    it records marks only while `recording` is on, into the list set by `begin_step`."""

    def __init__(
        self,
        clock: Clock,
        process_group: Optional[dist.ProcessGroup] = None,
        *,
        kernel_timing: bool = False,
    ) -> None:
        self.clock = clock
        self.pg = process_group
        self.recording = False
        self.kernel_timing = kernel_timing  # keep each Work to ask NCCL for its kernel time
        self.kernel_error: Optional[str] = None  # why kernel timing stopped, if it did
        self._current: Optional[list[BucketRecord]] = None
        self._timeline = True  # the current step's buckets get done marks too
        self._end: Optional[list[Mark]] = None  # receives the step's backward-end mark
        self.end_error: Optional[str] = None  # why backward-end marks stopped, if they did
        self._lock = threading.Lock()
        self._avg: Optional[bool] = None
        # The `slowlink:MS` fault (faults.py): seconds each all-reduce completes late.
        self.delay_s = 0.0

    def average_in_collective(self, group: Any) -> bool:
        if self._avg is None:
            self._avg = dist.get_backend(group) == "nccl"
        return self._avg

    def resolve_kernels(self, records: Optional[list[BucketRecord]]) -> None:
        """Fill kernel_ms from each record's Work; call only once the step's marks completed
        (elapsed_time on an unfinished CUDA event raises). The first failure turns it off."""
        for r in records or []:
            work, r.work = r.work, None
            if work is None or not self.kernel_timing:
                continue
            try:
                r.kernel_ms = max(0.0, float(work._get_duration()))
            except Exception as e:  # noqa: BLE001 - private API; unsupported backends raise
                self.kernel_timing = False
                self.kernel_error = f"{type(e).__name__}: {e}"

    def begin_step(
        self, timeline: bool = True, end_mark: bool = False
    ) -> Optional[list[BucketRecord]]:
        """The list this step's buckets go to (None while not recording); `timeline` False
        takes their ready marks only. `end_mark` also marks the backward's end (`step_end`)."""
        with self._lock:
            self._current = [] if self.recording else None
            self._timeline = timeline
            wants_end = self.recording and end_mark and self.end_error is None
            self._end = [] if wants_end else None
            return self._current

    @property
    def step_end(self) -> Optional[list[Mark]]:
        """The list the current step's backward-end marks go to (one per backward that
        all-reduced, once it returned; the last is the step's); None when not asked for."""
        return self._end

    def end_step(self) -> None:
        with self._lock:
            self._current = None
            self._end = None

    def mark_after_finalize(self, into: list[Mark]) -> None:
        """Mark the backward's end as a caller of `loss.backward()` sees it (its comm waits
        included) for a script whose loop ddptop does not own: `ddptop attach` has no line after
        the backward to mark. Called from each backward's last bucket hook. DDP's reducer queues
        its `finalize_backward` (which waits for every bucket's all-reduce, on the host for gloo
        and on the current stream for NCCL) as an autograd-engine final callback once that hook
        returned, so after `before`; a callback queued while the engine runs its final callbacks
        runs after those already queued: so `after` runs right after finalize_backward. A
        failure turns the marks off (`end_error`): never raises into the backward."""
        clock = self.clock
        try:
            engine: Any = torch.autograd.Variable._execution_engine  # type: ignore[attr-defined]
        except AttributeError as e:
            self.end_error = f"{type(e).__name__}: {e}"
            return

        def after() -> None:
            try:
                into.append(clock.mark())
            except Exception as e:  # noqa: BLE001 - an error here would fail the backward
                self.end_error = f"{type(e).__name__}: {e}"

        def before() -> None:
            try:
                engine.queue_callback(after)
            except Exception as e:  # noqa: BLE001 - engine internals; never break the backward
                self.end_error = f"{type(e).__name__}: {e}"

        try:
            engine.queue_callback(before)
        except Exception as e:  # noqa: BLE001 - e.g. not inside a backward
            self.end_error = f"{type(e).__name__}: {e}"

    def register(self, ddp: torch.nn.parallel.DistributedDataParallel) -> None:
        ddp.register_comm_hook(state=self, hook=timed_allreduce_hook)


def timed_allreduce_hook(
    state: BucketTimer, bucket: GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (the mean over ranks), with ready/done marks."""
    buf = bucket.buffer()
    with state._lock:
        records, timeline, end = state._current, state._timeline, state._end
    rec: Optional[BucketRecord] = None
    if records is not None:
        rec = BucketRecord(
            bucket.index(), buf.numel() * buf.element_size(), state.clock.mark(), timeline=timeline
        )
        records.append(rec)
        if end is not None and bucket.is_last():
            # One end mark per backward, queued from the hook of the bucket whose readiness makes
            # the reducer queue finalize_backward right after it: into the same graph task (a
            # reentrant checkpoint runs part of the backward as a nested one).
            state.mark_after_finalize(end)
    group = state.pg if state.pg is not None else dist.group.WORLD
    if state.average_in_collective(group):
        # NCCL averages inside the all-reduce: no separate div_ kernel on the compute stream
        # (DDP's own C++ path folds the division into its bucket copy; a Python hook cannot).
        work = dist.all_reduce(buf, op=dist.ReduceOp.AVG, group=group, async_op=True)
    else:
        buf.div_(dist.get_world_size(group))  # gloo has no AVG
        work = dist.all_reduce(buf, group=group, async_op=True)
    assert work is not None
    if rec is not None and rec.timeline and state.kernel_timing:
        rec.work = work
    fut = work.get_future()
    clock = state.clock

    delay = state.delay_s

    def _done(f: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        if delay > 0.0:
            time.sleep(delay)  # injected slow link: the bucket's all-reduce ends this late
        if rec is not None and rec.timeline:
            rec.done = clock.mark()
        return f.value()[0]

    out: torch.futures.Future[torch.Tensor] = fut.then(_done)
    return out


def parse_bucket_sizes(value: Any) -> Optional[list[int]]:
    """'1189928, 389760' -> [1189928, 389760]."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    parts = [p.strip() for p in str(value).split(",") if p.strip()]
    try:
        return [int(p) for p in parts] or None
    except ValueError:
        return None


def rebuilt_bucket_sizes(ddp: torch.nn.parallel.DistributedDataParallel) -> Optional[list[int]]:
    """Bucket bytes after DDP's rebuild (bucket index order), None until it is reported."""
    try:
        data = ddp._get_ddp_logging_data()  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - private API, best effort
        return None
    if not data.get("has_rebuilt_buckets"):
        return None
    return parse_bucket_sizes(data.get("rebuilt_bucket_sizes"))
