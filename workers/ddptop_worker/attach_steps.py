"""Step and epoch bookkeeping for attached scripts (no torch; unit-tested on its own).

In attach mode a step is one optimizer step (or one `ddptop_worker.step()` call), resolved a step
or two late. An epoch is what lies between two `DistributedSampler.set_epoch` calls with different
values; a script that never calls it has one epoch, 0.

Sampled timing (`DDPTOP_TIME_EVERY=N`, or `auto`, ddptop's default on GPUs, as for its own runs:
N from the step time, cadence.py): after the warm-up steps only every Nth step carries CUDA events
and a `step` message; the others are
counted (samples, host data wait) and an epoch's time is then the span from its first counted
step's start to its last step's end (two events per epoch), not a sum of step times; so is
an epoch's time with every step timed (`Account.close_epoch`).

Warm-up: the first `WARMUP_STEPS` steps carry `warmup: true` and are never counted in an epoch's
throughput (the first step creates the NCCL communicator and CUDA context state, the second one
runs on DDP's single iteration-0 bucket and rebuilds the buckets). The first epoch is also a
warm-up epoch when a later epoch follows, as in ddptop's own workers; when it is the only epoch,
its steps after the warm-up steps are the timed ones.

Compiles (torch.compile; attach_compile): a step during which torch compiled is not steady state
either. It is counted as a step but, like a warm-up step, adds neither samples nor time to its
epoch's throughput; with sampled timing its wall time is cut out of the epoch's span
(`Account.add` is told, the caller subtracts the span).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .cadence import Cadence, parse_every

WARMUP_STEPS = 3


def time_every_from_env() -> int:
    """`DDPTOP_TIME_EVERY`: N, or cadence.AUTO (ddptop's default on GPUs); else 1: every step."""
    try:
        return parse_every(os.environ.get("DDPTOP_TIME_EVERY", ""))
    except ValueError:
        return 1


def is_timed(step: int, cadence: Cadence, now: float) -> bool:
    """Whether step `step` (1-based), starting at host time `now`, carries events: every warm-up
    step, then the cadence's (which it tells each step's start)."""
    timed = cadence.start(step, now)
    return step <= WARMUP_STEPS or timed


def timeline_every_from_env() -> int:
    """`DDPTOP_TIMELINE_EVERY`: 1 timed step in N takes its whole bucket timeline; 0 (unset,
    or not a positive integer) leaves it to ddptop: 4 on CUDA, 1 on CPU (as `--timeline-every`)."""
    try:
        return max(0, int(os.environ.get("DDPTOP_TIMELINE_EVERY", "") or 0))
    except ValueError:
        return 0


@dataclass
class EpochTally:
    epoch: int
    steps: int = 0  # timed (non-warm-up) steps
    samples: int = 0
    ms: float = 0.0
    data_wait_ms: float = 0.0
    samples_known: bool = True
    all_steps: int = 0  # warm-up steps included
    timed_steps: int = 0  # counted steps with their own step time (all of them unless sampled)
    compiled_steps: int = 0  # steps after the warm-up left out because torch compiled in them

    @property
    def seconds(self) -> float:
        return self.ms / 1000.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.ms > 0 else 0.0


@dataclass
class StepInfo:
    """What the loop knew about one step when it ended (resolved into ms later)."""

    step: int
    epoch: int
    samples: int
    samples_known: bool
    compiled: bool = False  # torch compiled during this step: not steady state

    @property
    def warmup(self) -> bool:
        return self.step <= WARMUP_STEPS

    @property
    def counted(self) -> bool:
        """Whether the step's samples and time go into its epoch's throughput."""
        return not self.warmup and not self.compiled

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "samples": self.samples,
            "samples_known": self.samples_known,
            "compiled": self.compiled,
        }


@dataclass
class Account:
    """Epoch tallies of one rank. `add` takes resolved steps in order; `close_epoch` returns the
    finished tally and whether it is a warm-up epoch."""

    current: EpochTally = field(default_factory=lambda: EpochTally(0))
    first_epoch: int | None = None
    timed_rates: list[float] = field(default_factory=list)
    total_steps: int = 0

    def add(self, info: StepInfo, step_ms: float | None, data_ms: float) -> None:
        """One finished step; `step_ms` None for an untimed step (its time is in the span)."""
        if info.epoch != self.current.epoch:
            # A step resolved after its epoch was closed (should not happen: epochs close after a
            # forced flush); keep it in the epoch it ran in only if that is the current one.
            return
        if self.first_epoch is None:
            self.first_epoch = info.epoch
        t = self.current
        t.all_steps += 1
        self.total_steps += 1
        if info.warmup:
            return
        if info.compiled:
            t.compiled_steps += 1
            return
        t.steps += 1
        t.samples += info.samples
        if step_ms is not None:
            t.timed_steps += 1
            t.ms += max(0.0, step_ms)
        t.data_wait_ms += max(0.0, data_ms)
        t.samples_known = t.samples_known and info.samples_known

    def close_epoch(
        self, next_epoch: int | None, span_ms: float | None = None
    ) -> tuple[EpochTally, bool] | None:
        """Finish the current epoch (next_epoch None: the run ended). None when nothing ran.
        `span_ms`: the counted steps' wall time (their first start to their last end, steps that
        compiled cut out), which replaces the sum of step times: the sum leaves out what runs
        between one step's end mark and the next one's start (ddptop's own per-step work, which
        the script's clock sees), about 1.5% on a CPU step of 30 ms; untimed steps have no time
        of their own at all."""
        t = self.current
        if span_ms is not None and t.steps > 0:
            t.ms = max(0.0, span_ms)
        warmup = next_epoch is not None and t.epoch == self.first_epoch
        if next_epoch is not None:
            self.current = EpochTally(next_epoch)
        if t.all_steps == 0:
            return None
        if not warmup and t.steps > 0 and t.samples_known:
            self.timed_rates.append(t.samples_per_s)
        return t, warmup

    def mean_rate(self) -> float | None:
        return sum(self.timed_rates) / len(self.timed_rates) if self.timed_rates else None
