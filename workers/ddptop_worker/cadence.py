"""Which steps carry timing events after warm-up: 1 in N, or about one every quarter second.

A timed step costs a GPU run GPU time, measured on an H100 (scripts/device/timed_step_cost.py,
docs/stragglers.md "What a timed step costs"): its five step events ~0.04 ms, a ready mark per
gradient bucket ~0.13 ms together, and the bucket timeline's completion marks ~0.95 ms. So a
timed step takes the ready marks (the exposed comm the straggler score needs) and only one timed
step in `TIMELINE_EVERY` the whole timeline. `DDPTOP_TIME_EVERY=N` times 1 step in N, whatever
the step time: at 40 steps/s 1 in 10 gives the straggler detector 4 samples a second, but a
model at 2 steps/s gets one every 5 s and a rank that slows is named ~40 s late instead of
within 5 s.

`DDPTOP_TIME_EVERY=auto` (ddptop's default on GPUs) picks N from the step time instead, so that
a timed step comes every 0.2-0.45 s of run time: N in 1, 2, 4, ... 64. The cost is then bounded
by run time (at most 5 timed steps a second for steps of 3.5 ms or more: with the costs above
<= 0.2 ms + 0.95 ms / 4 each, <= 0.25% of the run), not by step count, and the detector's
samples cover the same run time at any step rate, close enough that 5 + 3 of them come within
5 s (docs/stragglers.md, "Sampling by run time").

Ranks pick alone, because an attached script offers no collective to agree on, but they pick
alike: at the first timed step 0.8 s of run time after the previous pick, from the wall time of
the steps in between (which lock-step DDP makes the same on every rank; pauses between epochs
and probes left out), with a hysteresis wider than their jitter. By run time, not every 8
steps: at 5 steps/s 8 steps are 1.6 s, and a rank slowed 1.5x was named 4.4-4.6 s late while N
caught up. And N is a power of two with a step timed where `step % N == 0`: a rank that picked
4 still times every step that a rank at 8 times, so two ranks that pick apart for a moment
still share their timed steps.
"""

from __future__ import annotations

from dataclasses import dataclass

AUTO = 0  # the setting's value for `auto`
START = 8  # auto's N before the first pick: 1 in 8, about the old 1 in 10
MAX_EVERY = 64
FINER_S = 0.45  # timed steps further apart than this in run time: halve N
COARSER_S = 0.4  # steps timed twice as far apart would still be within this: double N
PICK_S = 0.8  # the run time a pick reads at least (2-4 timed steps: one step's jitter averages out)
TIMELINE_EVERY = 4  # one timed step in 4 takes its full bucket timeline (CUDA; see above)


def timeline_every(setting: int, cuda: bool) -> int:
    """1 timed step in N takes its whole bucket timeline: the setting (`--timeline-every`,
    `DDPTOP_TIMELINE_EVERY`), else TIMELINE_EVERY on CUDA (a timeline's completion marks cost
    ~1 ms a step there) and 1 on CPU (host marks cost nothing)."""
    return setting or (TIMELINE_EVERY if cuda else 1)


def parse_every(raw: str) -> int:
    """`auto` → AUTO, a whole number ≥ 1 → itself; anything else is a ValueError."""
    text = raw.strip().lower()
    if text == "auto":
        return AUTO
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise ValueError(f"time-every must be a whole number >= 1 or 'auto', not {raw!r}")


def describe(setting: int) -> str:
    """The clause the workers' first log line ends with (", ..."), or "" when every step is
    timed."""
    if setting == AUTO:
        band = f"{COARSER_S / 2:g}-{FINER_S:g} s"
        return f", one step timed every {band} after warm-up (1 in 1-{MAX_EVERY})"
    return f", steps timed 1 in {setting} after warm-up" if setting > 1 else ""


def pick(every: int, step_s: float) -> int:
    """The next N, from the current one and the run time of one step."""
    if step_s <= 0.0:
        return every
    n = every
    while n > 1 and n * step_s > FINER_S:
        n //= 2
    if n == every:
        while n < MAX_EVERY and 2 * n * step_s <= COARSER_S:
            n *= 2
    return n


@dataclass
class Cadence:
    """One rank's choice of timed steps (steps are numbered from 1, as the workers count)."""

    setting: int  # AUTO, or a fixed N
    every: int = 1
    _step: int = 0  # the last step started, and whether it was timed (a step may start twice)
    _timed: bool = False
    _by: int = 1  # the N that step was timed by (a pick at it changes `every` for the next)
    _since: int = 0  # steps started since the last timed one's message
    _last_t: float | None = None  # the last step's start; None after a pause
    _run_s: float = 0.0  # run time and steps read since the last pick (pauses left out)
    _run_steps: int = 0

    @staticmethod
    def of(setting: int) -> Cadence:
        return Cadence(setting, START if setting == AUTO else setting)

    @property
    def auto(self) -> bool:
        return self.setting == AUTO

    def start(self, step: int, now: float) -> bool:
        """Step `step` starts at host time `now` (seconds): whether it is timed. At a timed step
        with `PICK_S` of run time read since the previous pick, `auto` re-picks N from it; this
        step is timed by the old N, the next one by the new. Starting the same step again (an
        attached script's step restarted) changes nothing and answers the same."""
        if step == self._step:
            return self._timed
        self._step, self._since = step, self._since + 1
        if self._last_t is not None:
            self._run_s += now - self._last_t
            self._run_steps += 1
        self._last_t = now
        self._by = self.every
        self._timed = step % self.every == 0
        if self._timed and self.auto and self._run_s >= PICK_S:
            self.every = pick(self.every, self._run_s / self._run_steps)
            self._run_s, self._run_steps = 0.0, 0
        return self._timed

    def timeline(self, every: int = TIMELINE_EVERY) -> bool:
        """Whether the step just started also takes its full bucket timeline (on CUDA): one timed
        step in `every`, by step number, so ranks timing by the same N take the same ones. The
        other timed steps mark their buckets' ready points only, which give the exposed comm the
        straggler score needs at a seventh of the cost."""
        return self._timed and self._step % (every * self._by) == 0

    def takes_timeline(self, step: int, warmup: bool, every: int) -> bool:
        """Whether timed step `step` takes its whole bucket timeline rather than its buckets'
        ready marks only: 1 timed step in `every` (`timeline`), and in warm-up, where every
        step is timed, 1 step in `every`, so the first timeline comes a few steps in."""
        if every <= 1:
            return True
        return step % every == 0 if warmup else self.timeline(every)

    def pause(self) -> None:
        """Not training until the next step (an epoch's end, evaluation, a probe): the time until
        then is left out of the next pick."""
        self._last_t = None

    def new_epoch(self, step_open: bool = False) -> None:
        """An epoch ended: its untimed steps are in its epoch message, not the next step's. With
        `step_open` the next epoch's first step has started already (an attached script's step
        starts when the previous one ends) and counts for the next message."""
        self.pause()
        self._since = 1 if step_open else 0

    def covered(self) -> int:
        """Steps the message of a timed step covers: those started since the previous one's."""
        n = max(1, self._since)
        self._since = 0
        return n
