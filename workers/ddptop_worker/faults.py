"""Fault injection for ddptop's fault matrix: `DDPTOP_INJECT=KIND:STEP` in the environment.

Kinds applied on the last rank, at the first training step >= STEP:
  crash     exit at once with code 3 (no cleanup)
  raise     raise a RuntimeError (a worker failing with a traceback)
  hang      stop making progress; the heartbeat thread keeps running (alive but stuck)
  silent    stop making progress and stop heartbeats too; the connection stays open
  frozen    block the whole interpreter: a C call that holds the GIL, so no Python thread runs
            (no heartbeat, no reader, no dead-man switch), as a rank stuck inside an extension
            that never releases the GIL. Only a signal's default action (SIGTERM, SIGKILL) ends it.
The other ranks then block in their next all-reduce, as in a real stuck collective.

Applied on every rank, before its first step (here the number is SECONDS, not a step):
  slowstart the first step first burns SECONDS of CPU, as cudnn.benchmark's autotuning or a
            compile does: a healthy run whose first step is slow, which must not be called hung.

Applied on one rank, every step (`slow:RANK:FACTOR[:PHASE][@STEP]`, FACTOR above 1):
  slow      RANK waits (FACTOR - 1) x its own step time in each step, a straggler the others
            wait for at the all-reduce: inside the data wait (PHASE `data`, the default: a slow
            input pipeline) or at the end of the forward (PHASE `compute`: a slower device;
            ddptop's own loop only). From step STEP on (default: the first), with a `log` line
            "injected fault slow:...@STEP: slowing from now" at the first slowed step.

Applied on one rank (`uneven:RANK:STEPS`):
  uneven    RANK stops its loop after STEPS optimizer steps and ends cleanly, as a rank given
            fewer batches than its peers: they wait (NCCL) or fail (gloo) in the next all-reduce.

Applied to the model, on every rank (`unused:LAYER`, LAYER a Python identifier):
  unused    the model gets a submodule LAYER that its forward never calls (defined in __init__,
            never used): DDP without find_unused_parameters fails at the next forward.

Applied on one rank (`nojoin:RANK`):
  nojoin    RANK never calls init_process_group (it said hello, then blocks before it, as a
            rank waiting for a file its peers write only after init): its peers wait in the
            rendezvous until ddptop names it (rendezvous.py) or the process group times out.

Applied on the last rank, once (`mismatch:STEP`):
  mismatch  before step STEP's forward (after step STEP-1's optimizer step under attach), the
            last rank all-reduces one extra value, as a script that reduces a metric on one
            rank only: it meets its peers' next gradient all-reduce, of another size.

Applied on every rank, in every step (`slowlink:MS`, MS milliseconds from 1):
  slowlink  each bucket's all-reduce completes MS ms later (ddptop's comm hook waits that long
            once the collective is done), as over a slow interconnect: the exposed communication
            grows and DDP can do fewer samples/s than one rank alone (src/app/diagnose/slower.rs).
            ddptop's own loop only (its comm hook times the buckets).

Applied on every rank, at the end of the run (STEP is ignored; write `teardown:0`):
  teardown  send `result` and `bye` as usual, then block instead of destroy_process_group(), as
            a rank whose NCCL teardown hangs: ddptop has every bye but the launcher never exits.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from collections import deque
from dataclasses import dataclass, field

from .client import Client

STEP_KINDS = ("crash", "raise", "hang", "silent", "frozen")
KINDS = (*STEP_KINDS, "slowstart", "teardown", "slow", "uneven", "unused", "nojoin", "mismatch", "slowlink")


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    kind: str
    step: int  # slow: the rank; uneven: the steps RANK takes
    factor: float = 1.0  # slow only
    rank: int = -1  # uneven and nojoin only
    layer: str = ""  # unused only
    start: int = 1  # slow only: the first slowed step
    phase: str = "data"  # slow only: "data" or "compute"
    text: str = field(default="", compare=False)  # slow only: the spec as written

    @staticmethod
    def parse(spec: str) -> Fault | None:
        spec = spec.strip()
        if not spec:
            return None
        kind, _, step = spec.partition(":")
        if kind == "slow":
            body, at, start = step.partition("@")
            parts = body.split(":")
            rank, factor = (parts + ["", ""])[:2]
            phase = parts[2] if len(parts) > 2 else "data"
            try:
                f = float(factor)
            except ValueError:
                f = float("nan")
            # Up to 100x, as ddptop's own parser (src/run/fault.rs): more is a hang.
            if (
                not rank.isdigit()
                or not 1.0 < f <= 100.0
                or len(parts) > 3
                or phase not in ("data", "compute")
                or (at and (not start.isdigit() or int(start) < 1))
            ):
                raise FaultSpecError(
                    f"DDPTOP_INJECT={spec!r}: expected slow:RANK:FACTOR[:PHASE][@STEP] with "
                    "FACTOR above 1, PHASE data or compute, STEP from 1"
                )
            return Fault(
                "slow", int(rank), f, start=int(start) if at else 1, phase=phase, text=spec
            )
        if kind == "uneven":
            rank, _, steps = step.partition(":")
            if not rank.isdigit() or not steps.isdigit():
                raise FaultSpecError(f"DDPTOP_INJECT={spec!r}: expected uneven:RANK:STEPS")
            return Fault("uneven", int(steps), rank=int(rank))
        if kind == "nojoin":
            if not step.isdigit():
                raise FaultSpecError(f"DDPTOP_INJECT={spec!r}: expected nojoin:RANK")
            return Fault("nojoin", 0, rank=int(step))
        if kind == "mismatch":
            if not step.isdigit() or int(step) < 1:
                raise FaultSpecError(f"DDPTOP_INJECT={spec!r}: expected mismatch:STEP, STEP from 1")
            return Fault("mismatch", int(step))
        if kind == "slowlink":
            if not step.isdigit() or int(step) < 1:
                raise FaultSpecError(f"DDPTOP_INJECT={spec!r}: expected slowlink:MS, MS from 1")
            return Fault("slowlink", int(step))
        if kind == "unused":
            if not step.isidentifier():
                raise FaultSpecError(
                    f"DDPTOP_INJECT={spec!r}: expected unused:LAYER, LAYER a Python identifier"
                )
            return Fault("unused", 0, layer=step)
        if kind not in KINDS or not step.isdigit():
            raise FaultSpecError(
                f"DDPTOP_INJECT={spec!r}: expected one of {', '.join(KINDS)} as KIND:STEP"
            )
        return Fault(kind, int(step))

    @staticmethod
    def from_env() -> Fault | None:
        return Fault.parse(os.environ.get("DDPTOP_INJECT", ""))

    @property
    def at_teardown(self) -> bool:
        return self.kind == "teardown"

    def due(self, step: int, rank: int, world_size: int) -> bool:
        if self.kind == "slowstart":
            return step == 0
        if self.kind == "mismatch":
            # `step` is the count of finished steps: fire once, as step STEP begins.
            return rank == world_size - 1 and step == self.step - 1
        return self.kind in STEP_KINDS and rank == world_size - 1 and step >= self.step

    def never_join(self, client: Client, rank: int) -> None:
        """`nojoin`: on RANK, say so and block where init_process_group would be called; the
        heartbeat thread goes on (alive, idle, never joined)."""
        if self.kind == "nojoin" and rank == self.rank:
            client.log("warn", f"injected fault nojoin:{self.rank}: this rank never calls init_process_group")
            block_forever()

    def out_of_data(self, step: int, rank: int) -> bool:
        """`uneven`: whether RANK has taken its last step (it ends its loop now)."""
        return self.kind == "uneven" and rank == self.rank and step >= self.step

    def slowdown(self, rank: int) -> SlowRank | None:
        """The `slow` fault's pacer on its rank, else None."""
        if self.kind == "slow" and rank == self.step:
            return SlowRank(self.factor, start=self.start, phase=self.phase, text=self.text)
        return None

    def fire(self, client: Client) -> None:
        """Apply a step fault; `slowstart` returns after its work, `raise` by raising, the
        others never return."""
        client.log("warn", f"injected fault {self.kind}:{self.step}")
        if self.kind == "slowstart":
            burn_cpu(float(self.step))
            return
        if self.kind == "mismatch":
            extra_all_reduce()
            return
        if self.kind == "crash":
            os._exit(3)
        if self.kind == "raise":
            raise RuntimeError(f"injected exception at step {self.step}")
        if self.kind == "silent":
            client.silence()
        if self.kind == "frozen":
            hold_gil_forever()
        block_forever()

    def block_teardown(self, client: Client) -> None:
        """The teardown hang: after bye, never reach destroy_process_group()."""
        if self.at_teardown:
            client.silence()
            block_forever()


class SlowRank:
    """Makes this rank FACTOR times slower than its own pace: once per step (in its data wait,
    or at the end of its forward for the `compute` phase) it sleeps (FACTOR - 1) x its own
    recent step time (the median of the last few loop iterations without the sleeps), so the
    slowdown follows the rank's real speed. Before step `start` it only learns that pace; at
    `start` it says so once through `on_start` (a log line whose arrival ddptop stores: the
    slowdown's start instant, from which the straggler verdict's latency is measured)."""

    def __init__(
        self,
        factor: float,
        sync: Callable[[], None] | None = None,
        start: int = 1,
        phase: str = "data",
        text: str = "",
    ) -> None:
        self.factor = factor
        # On CUDA the host runs ahead of the GPU: a sleep would hide in the launch queue.
        # Waiting for the device first makes the loop's wall time the step's real time.
        self.sync = sync
        self.start = start
        self.phase = phase
        self.text = text or f"slow:?:{factor}"
        self.on_start: Callable[[str], None] | None = None
        self.calls = 0
        self.own: deque[float] = deque(maxlen=5)
        self.last: float | None = None
        self.slept = 0.0

    def wait(self, step: int | None = None) -> float:
        """Called once per step (`step`: the step it slows; default: one more than the last
        call); returns the seconds slept."""
        self.calls += 1
        step = self.calls if step is None else step
        if self.sync is not None:
            self.sync()
        now = time.perf_counter()
        if self.last is not None:
            self.own.append(max(0.0, now - self.last - self.slept))
        self.slept = 0.0
        if step == self.start and self.on_start is not None:
            where = "forward+backward" if self.phase == "compute" else "data wait"
            self.on_start(
                f"injected fault {self.text}: slowing from now (step {step}), "
                f"{self.factor}x in its {where}"
            )
        if self.own and step >= self.start:
            own = sorted(self.own)[len(self.own) // 2]
            self.slept = (self.factor - 1.0) * own
            time.sleep(self.slept)
        self.last = now
        return self.slept


def extra_all_reduce() -> None:
    """One all-reduce of a single value on the default group, which no other rank issues: it
    pairs with their next collective (DDP's gradient bucket), of another size. On gloo the
    receiving side aborts ("Received data size doesn't match expected size"); NCCL checks no
    sizes (TORCH_DISTRIBUTED_DEBUG=DETAIL does, on either backend)."""
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    dist.all_reduce(torch.ones(1, device=dev))


def burn_cpu(seconds: float) -> None:
    """Busy for `seconds` of wall time on this thread (CPU time grows, as in autotuning)."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for i in range(10_000):
            x ^= i
    _ = x


def block_forever() -> None:
    while True:
        time.sleep(3600)


def hold_gil_forever() -> None:
    # ctypes.PyDLL keeps the GIL during the foreign call (CDLL would release it).
    libc = ctypes.PyDLL(None)
    while True:
        libc.sleep(3600)
