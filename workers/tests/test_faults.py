"""DDPTOP_INJECT parsing and targeting (the fault matrix's worker side), and the faults on real
2-rank gloo runs."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from conftest import WORKERS
from fakeserver import FakeDdptop, last_types
from test_train_gloo import launcher

from ddptop_worker.faults import Fault, SlowRank


def test_unset_means_no_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPTOP_INJECT", raising=False)
    assert Fault.from_env() is None


def test_parses_and_targets_the_last_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTOP_INJECT", "hang:5")
    f = Fault.from_env()
    assert f == Fault("hang", 5)
    assert not f.due(4, 1, 2)
    assert f.due(5, 1, 2)
    assert not f.due(9, 0, 2)


@pytest.mark.parametrize(
    "bad",
    [
        "explode:3",
        "hang",
        "hang:x",
        "raise:-1",
        "slow:1",
        "slow:1:1",
        "slow:x:1.5",
        "slow:1:nan",
        "slow:1:1.5@",
        "slow:1:1.5@0",
        "slow:1:1.5:gpu",
        "slow:1:1.5:data:x",
        "slow:1@5:1.5",
        "nojoin",
        "nojoin:x",
        "mismatch:0",
        "mismatch:x",
    ],
)
def test_bad_specs_are_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("DDPTOP_INJECT", bad)
    with pytest.raises(ValueError, match="DDPTOP_INJECT"):
        Fault.from_env()


def test_teardown_and_new_kinds_parse() -> None:
    assert Fault.parse("teardown:0") == Fault("teardown", 0)
    assert Fault.parse("teardown:0").at_teardown
    assert not Fault("teardown", 0).due(5, 1, 2)  # never fires as a step fault
    assert Fault.parse("frozen:4") == Fault("frozen", 4) and Fault("frozen", 4).due(4, 1, 2)
    assert Fault.parse("") is None


def test_nojoin_blocks_its_rank_only_and_mismatch_fires_once_on_the_last_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = Fault.parse("nojoin:1")
    assert f == Fault("nojoin", 0, rank=1)
    said: list[str] = []

    class Quiet:
        def log(self, level: str, msg: str) -> None:
            said.append(msg)

    import ddptop_worker.faults as faults

    monkeypatch.setattr(faults, "block_forever", lambda: said.append("blocked"))
    f.never_join(Quiet(), 0)  # type: ignore[arg-type]
    assert said == []
    f.never_join(Quiet(), 1)  # type: ignore[arg-type]
    assert said == ["injected fault nojoin:1: this rank never calls init_process_group", "blocked"]
    m = Fault.parse("mismatch:3")
    assert m == Fault("mismatch", 3)
    # Fires as step 3 begins (2 finished), on the last rank, once.
    assert [s for s in range(6) if m.due(s, 1, 2)] == [2]
    assert not any(m.due(s, 0, 2) for s in range(6))


def test_slow_targets_its_rank_only() -> None:
    f = Fault.parse("slow:1:1.5")
    assert f == Fault("slow", 1, 1.5)
    assert f.slowdown(1) is not None and f.slowdown(0) is None
    # Not a step fault: it never fires, it paces every step of its rank.
    assert not any(f.due(s, r, 2) for s in range(20) for r in range(2))


def test_slow_from_a_step_and_in_a_phase_parse_as_ddptop_writes_them() -> None:
    # The spellings src/run/fault.rs writes (Display) for `slow`.
    assert Fault.parse("slow:1:1.5@40") == Fault("slow", 1, 1.5, start=40)
    assert Fault.parse("slow:0:2:compute") == Fault("slow", 0, 2.0, phase="compute")
    f = Fault.parse("slow:3:1.3:data@7")
    assert f == Fault("slow", 3, 1.3, start=7, phase="data")
    pacer = f.slowdown(3)
    assert pacer is not None and (pacer.start, pacer.phase) == (7, "data")


def test_slow_from_a_step_sleeps_only_from_that_step_and_says_so_once() -> None:
    pacer = SlowRank(3.0, start=4, text="slow:1:3@4")
    said: list[str] = []
    pacer.on_start = said.append
    slept = []
    for step in range(1, 7):
        slept.append(pacer.wait(step))
        time.sleep(0.002)
    assert slept[:3] == [0.0, 0.0, 0.0] and all(s > 0.0 for s in slept[3:]), slept
    assert said == ["injected fault slow:1:3@4: slowing from now (step 4), 3.0x in its data wait"]


@pytest.mark.timing
def test_slow_rank_sleeps_factor_minus_one_of_its_own_step() -> None:
    pacer = SlowRank(1.5)
    work = 0.02
    starts = []
    for _ in range(8):
        starts.append(time.perf_counter())
        pacer.wait()
        time.sleep(work)  # the rank's own step
    # After the first iteration (no pace known yet), each one takes about 1.5x its own work.
    gaps = [b - a for a, b in zip(starts[2:], starts[3:], strict=False)]
    med = sorted(gaps)[len(gaps) // 2]
    assert 1.35 * work < med < 1.9 * work, gaps


# ---------------------------------------------------------------- real 2-rank gloo runs

GLOO_TRAIN = ["train", "--model", "tiny", "--backend", "gloo", "--batch", "16"]


def _start(srv: FakeDdptop, inject: str, samples: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        launcher(2) + GLOO_TRAIN + ["--samples", str(samples)],
        env=srv.env(PYTHONPATH=WORKERS, DDPTOP_INJECT=inject),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM torchrun (it forwards it to the workers, whose default action ends them)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_teardown_hang_after_every_bye() -> None:
    srv = FakeDdptop(heartbeat_s=0.2)
    proc = _start(srv, "teardown:0", 256)
    try:
        assert srv.wait_for(lambda: len(srv.messages("bye")) == 2, timeout=120), srv.messages()[-5:]
        time.sleep(3)
        assert proc.poll() is None  # every rank said bye, and the launcher has not exited
        assert all(_alive(h["pid"]) for h in srv.hellos())
        for r in (0, 1):
            msgs = srv.messages(rank=r)
            assert last_types(msgs) == ["result", "bye"] and msgs[-1]["reason"] == "done"
    finally:
        _stop(proc)
        srv.stop()
    assert srv.bad == []
    assert not any(_alive(h["pid"]) for h in srv.hellos())


@pytest.mark.parametrize("kind", ["silent", "frozen"])
def test_a_silent_rank_stops_heartbeats_and_stays_alive(kind: str) -> None:
    srv = FakeDdptop(heartbeat_s=0.2)
    proc = _start(srv, f"{kind}:3", 20000)
    try:
        assert srv.wait_for(lambda: any(
            m["msg"] == f"injected fault {kind}:3" for m in srv.messages("log", rank=1)), timeout=120)
        time.sleep(0.5)  # let a beat in flight arrive
        n1, n0 = len(srv.messages("heartbeat", rank=1)), len(srv.messages("heartbeat", rank=0))
        time.sleep(2.0)  # ten heartbeat periods
        assert len(srv.messages("heartbeat", rank=1)) == n1  # rank 1 is silent
        assert len(srv.messages("heartbeat", rank=0)) >= n0 + 5  # rank 0, blocked, still beats
        assert proc.poll() is None
        assert all(_alive(h["pid"]) for h in srv.hellos())
        assert max(m["step"] for m in srv.messages("step", rank=1)) <= 3
    finally:
        _stop(proc)
        srv.stop()
    assert not any(_alive(h["pid"]) for h in srv.hellos())


@pytest.mark.timing
def test_slowstart_burns_cpu_on_every_rank_before_the_first_step_only() -> None:
    f = Fault.parse("slowstart:1")
    assert f == Fault("slowstart", 1)
    assert f.due(0, 0, 2) and f.due(0, 1, 2)
    assert not f.due(1, 1, 2)

    class Log:
        lines: list[str] = []

        def log(self, level: str, msg: str) -> None:
            self.lines.append(msg)

    cpu0, wall0 = time.process_time(), time.monotonic()
    f.fire(Log())  # type: ignore[arg-type]  # only .log is used
    wall = time.monotonic() - wall0
    assert 1.0 <= wall < 3.0
    assert time.process_time() - cpu0 > 0.5  # busy, not sleeping
