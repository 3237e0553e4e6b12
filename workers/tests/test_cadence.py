"""Which steps a sampled run times: 1 in N, or `auto`, by run time (ddptop_worker/cadence.py)."""

from __future__ import annotations

import random

import pytest

from ddptop_worker.cadence import (
    AUTO,
    COARSER_S,
    FINER_S,
    MAX_EVERY,
    START,
    TIMELINE_EVERY,
    Cadence,
    parse_every,
    timeline_every,
)


def run(cad: Cadence, step_times: list[float], jitter: float = 0.0, seed: int = 0) -> list[int]:
    """Steps one rank times, its clock read at each step's start as the workers do."""
    rng = random.Random(seed)
    now, timed = 0.0, []
    for step, dt in enumerate(step_times, start=1):
        if cad.start(step, now):
            timed.append(step)
        now += dt * (1.0 + rng.uniform(-jitter, jitter))
    return timed


def test_the_setting_is_a_whole_number_or_auto() -> None:
    assert parse_every("auto") == parse_every(" AUTO ") == AUTO
    assert parse_every("10") == 10 and parse_every("1") == 1
    for bad in ("", "0", "-1", "ten", "2.5"):
        with pytest.raises(ValueError, match="'auto'"):
            parse_every(bad)


def test_a_fixed_cadence_times_1_in_n_whatever_the_step_time() -> None:
    for step_s in (0.001, 0.5):
        cad = Cadence.of(10)
        assert run(cad, [step_s] * 100) == list(range(10, 101, 10))
        assert cad.every == 10


@pytest.mark.parametrize(
    ("step_s", "every"),
    [(0.0005, MAX_EVERY), (0.004, MAX_EVERY), (0.025, 16), (0.052, 8), (0.0625, 4), (0.12, 2),
     (0.3, 1), (3.0, 1)],
)
def test_auto_times_a_step_every_fifth_to_half_a_second(step_s: float, every: int) -> None:
    cad = Cadence.of(AUTO)
    timed = run(cad, [step_s] * max(400, int(8 / step_s)))  # 8 s of run time at least
    assert cad.every == every
    gaps = {(b - a) * step_s for a, b in zip(timed[-5:], timed[-4:])}
    if 1 < every < MAX_EVERY:  # within the band unless held at an end of the range
        assert all(COARSER_S / 2 < g <= FINER_S for g in gaps), gaps


def test_auto_follows_a_mid_run_slowdown_at_its_next_timed_step() -> None:
    # 40 steps/s timed 1 in 16 (0.4 s apart); from step 400 the steps take 90 ms: 1 in 16 would
    # space timed steps 1.44 s apart, the cadence goes to 1 in 4 (0.36 s).
    cad = Cadence.of(AUTO)
    timed = run(cad, [0.025] * 400 + [0.09] * 100)
    assert cad.every == 4
    after = [s for s in timed if s > 400]
    # the first timed step after the slowdown reads it (16 -> 4: 0.36 s), the next follows 4
    assert after[0] == 416 and after[1:4] == [420, 424, 428], after[:4]


def test_lock_step_ranks_with_jitter_share_their_timed_steps() -> None:
    # Every step time from 1 ms to 0.4 s, each rank's clock 10% jittery on its own: the ranks
    # pick the same N almost always, and where they do not (at a band's edge), a power of two
    # makes the coarser rank's timed steps a subset of the finer one's: of the steps the rank
    # with fewer timed steps timed, the other timed nearly all.
    for i in range(60):
        step_s = 0.001 * (1.1**i)
        a, b = Cadence.of(AUTO), Cadence.of(AUTO)
        ta = {s for s in run(a, [step_s] * 400, jitter=0.1, seed=i) if s > 100}
        tb = {s for s in run(b, [step_s] * 400, jitter=0.1, seed=1000 + i) if s > 100}
        assert len(ta & tb) >= 0.9 * min(len(ta), len(tb)), (step_s, sorted(ta ^ tb))


def test_covered_counts_the_steps_started_since_the_previous_message() -> None:
    cad = Cadence.of(4)
    said = []
    for step in range(1, 11):
        if cad.start(step, now=step) and step > 1:
            said.append((step, cad.covered()))
        if step == 1:
            said.append((step, cad.covered()))  # a warm-up step, timed whatever the cadence
    assert said == [(1, 1), (4, 3), (8, 4)]
    # An epoch ends after step 10: steps 9-10 are its epoch message's; a probe (steps that
    # never start here) and a step started twice count nothing.
    cad.new_epoch()
    for step in (11, 11, 12):
        timed = cad.start(step, now=step)
    assert timed and cad.covered() == 2
    # An attached script's epoch ends with its next step already started: that one counts.
    cad.start(13, now=13)
    cad.new_epoch(step_open=True)
    cad.start(13, now=13)
    assert not cad.start(14, now=14) and not cad.start(15, now=15)
    assert cad.start(16, now=16) and cad.covered() == 4


def test_a_step_started_twice_keeps_its_answer_even_across_a_pick() -> None:
    # 10 ms steps from 1 in 8: the pick at step 88 (0.8 s read) doubles N; step 88 stays timed.
    cad = Cadence.of(AUTO)
    for step in range(1, 88):
        cad.start(step, now=0.01 * step)
    assert cad.every == 8 and cad.start(88, now=0.88)
    assert cad.every > 8 and cad.start(88, now=0.885)


def test_pauses_are_left_out_of_the_step_time() -> None:
    # 25 ms steps with a 5 s evaluation after every 100: without the pause, a pick reading it
    # would see ~75 ms steps and time 1 in 4; with it, 1 in 16 throughout.
    cad = Cadence.of(AUTO)
    now, seen = 0.0, set()
    for step in range(1, 1001):
        cad.start(step, now)
        seen.add(cad.every)
        now += 0.025
        if step % 100 == 0:
            cad.pause()
            now += 5.0
    assert seen == {START, 16}


def test_one_timed_step_in_four_takes_the_timeline_by_the_n_it_was_timed_by() -> None:
    fixed = Cadence.of(2)
    lines = [step for step in range(1, 41) if fixed.start(step, float(step)) and fixed.timeline()]
    assert lines == list(range(2 * TIMELINE_EVERY, 41, 2 * TIMELINE_EVERY))
    # auto: 30 ms steps start at 1 in 8 and pick 1 in 8 (0.24 s); a slowdown to 0.2 s steps
    # picks 1 in 2 at the next timed step after 0.8 s of it. Each timeline step is a timed step
    # at a multiple of 4 x the N that timed it, whichever N came after.
    cad, now, timed, lines, by = Cadence.of(AUTO), 0.0, [], [], []
    for step in range(1, 201):
        n = cad.every
        if cad.start(step, now):
            timed.append(step)
            if cad.timeline():
                lines.append(step)
                by.append(n)
        now += 0.03 if step <= 100 else 0.2
    assert lines and set(lines) <= set(timed)
    assert all(step % (TIMELINE_EVERY * n) == 0 for step, n in zip(lines, by))
    assert {8, 2} <= set(by), by  # lines came at both cadences
    late = [s for s in timed if s > 150]
    assert [s for s in lines if s > 150] == [s for s in late if s % (2 * TIMELINE_EVERY) == 0]
    assert len(late) == 25 and len([s for s in lines if s > 150]) == 7  # 1 in 4 of them
    # a step that was not timed takes no timeline, whatever its number
    once = Cadence.of(8)
    assert not once.start(4 * TIMELINE_EVERY + 1, 0.0) and not once.timeline()


def test_takes_timeline_in_warm_up_by_step_number_after_it_by_the_cadence() -> None:
    fixed = Cadence.of(2)
    # warm-up (every step timed): 1 step in `every` by its own number
    assert [s for s in range(1, 13) if fixed.takes_timeline(s, True, 4)] == [4, 8, 12]
    # after it: the cadence's timed steps whose number 4N divides
    after = [s for s in range(13, 41)
             if fixed.start(s, float(s)) and fixed.takes_timeline(s, False, 4)]
    assert after == [16, 24, 32, 40]
    # every 1: the timeline on every step asked about
    assert all(fixed.takes_timeline(s, w, 1) for s in (3, 5) for w in (True, False))


def test_timeline_every_defaults_by_device() -> None:
    assert timeline_every(0, cuda=True) == TIMELINE_EVERY and timeline_every(0, cuda=False) == 1
    assert timeline_every(3, cuda=True) == 3 and timeline_every(3, cuda=False) == 3
