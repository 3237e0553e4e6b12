"""Attach mode pieces on their own: step/epoch bookkeeping, batch size from DDP inputs, the
bootstrap's conditions and its chaining to an existing sitecustomize."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import WORKERS

import ddptop_worker as dt
from ddptop_worker import attach, attach_hooks
from ddptop_worker.attach_steps import WARMUP_STEPS, Account, StepInfo

BOOTSTRAP = os.path.join(WORKERS, "ddptop_bootstrap")


def info(step: int, epoch: int, samples: int = 32, known: bool = True) -> StepInfo:
    return StepInfo(step, epoch, samples, known)


def test_warmup_steps_are_never_timed() -> None:
    a = Account()
    for n in range(1, 11):
        a.add(info(n, 0), step_ms=10.0, data_ms=1.0)
    done = a.close_epoch(None)
    assert done is not None
    t, warmup = done
    assert not warmup  # the only epoch is the timed one
    assert t.all_steps == 10 and t.steps == 10 - WARMUP_STEPS
    assert t.samples == 32 * t.steps and t.seconds == pytest.approx(0.01 * t.steps)
    assert t.samples_per_s == pytest.approx(3200.0)
    assert t.data_wait_ms == pytest.approx(t.steps * 1.0)
    assert a.mean_rate() == pytest.approx(3200.0)


def test_first_epoch_is_warmup_when_another_follows() -> None:
    a = Account()
    for n in range(1, 6):
        a.add(info(n, 0), 10.0, 0.0)
    t0, w0 = a.close_epoch(1) or (None, None)
    assert t0 is not None and w0 is True
    for n in range(6, 11):
        a.add(info(n, 1), 20.0, 0.0)
    t1, w1 = a.close_epoch(None) or (None, None)
    assert t1 is not None and w1 is False and t1.steps == 5
    assert a.timed_rates == [pytest.approx(1600.0)]  # epoch 0 not counted


def test_unknown_batch_gives_no_rate_and_empty_epochs_nothing() -> None:
    a = Account()
    assert a.close_epoch(3) is None  # set_epoch before any step
    for n in range(1, 8):
        a.add(info(n, 3, samples=0, known=False), 5.0, 0.0)
    t, _ = a.close_epoch(None) or (None, None)
    assert t is not None and not t.samples_known
    assert a.mean_rate() is None


def test_leading_dim_finds_the_batch() -> None:
    x = torch.zeros(7, 3)
    assert attach_hooks.leading_dim((x,), {}) == 7
    assert attach_hooks.leading_dim(([x, x],), {}) == 7
    assert attach_hooks.leading_dim((), {"input_ids": torch.zeros(5, 9)}) == 5
    assert attach_hooks.leading_dim(({"a": x},), {}) == 7
    assert attach_hooks.leading_dim((3, torch.tensor(1.0)), {}) is None  # no batched tensor


def test_error_line_is_the_traceback_last_line() -> None:
    assert attach.error_line(ValueError("bad label 12")) == "ValueError: bad label 12"
    assert attach.error_line(RuntimeError("first\nAt:\n  frame")) == "RuntimeError: first"


def test_explicit_api_is_a_noop_without_ddptop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPTOP_SOCKET", raising=False)
    m = torch.nn.Linear(2, 2)
    assert dt.watch(m) is m
    dt.step(samples=4)
    assert attach.current() is None


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPTOP_")}
    env.pop("RANK", None)
    env.update(extra)
    return env


WATCHERS = "import sys; print([type(f).__name__ for f in sys.meta_path if 'Torch' in type(f).__name__])"


def test_bootstrap_acts_only_in_a_rank_under_ddptop() -> None:
    path = f"{BOOTSTRAP}{os.pathsep}{WORKERS}"
    on = python(WATCHERS, base_env(PYTHONPATH=path, DDPTOP_SOCKET="/x", RANK="0"))
    assert on.stdout.strip() == "['_TorchImportWatcher']", on.stderr
    for env in (
        base_env(PYTHONPATH=path, RANK="0"),  # ddptop not there
        base_env(PYTHONPATH=path, DDPTOP_SOCKET="/x"),  # torchrun's agent: no RANK
        base_env(PYTHONPATH=path, DDPTOP_SOCKET="/x", RANK="0", DDPTOP_ATTACHED_PID="1"),  # a child
    ):
        p = python(WATCHERS, env)
        assert p.returncode == 0 and p.stdout.strip() == "[]" and p.stderr == ""


def test_bootstrap_chains_to_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    other = tmp_path / "site2"
    other.mkdir()
    (other / "sitecustomize.py").write_text(
        "import os\nprint('theirs ran', os.getpid())\nMARK = 'theirs'\n"
    )
    env = base_env(PYTHONPATH=f"{BOOTSTRAP}{os.pathsep}{other}")
    p = python("import sitecustomize; print('mark', sitecustomize.MARK)", env)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len([ln for ln in lines if ln.startswith("theirs ran")]) == 1
    assert "mark theirs" in lines
    # a broken one fails the way it would have without ddptop: site reports it, Python goes on
    (other / "sitecustomize.py").write_text("raise RuntimeError('their bug')\n")
    p = python("print('still runs')", env)
    q = python("print('still runs')", base_env(PYTHONPATH=str(other)))
    assert p.returncode == q.returncode == 0 and p.stdout == q.stdout == "still runs\n"
    assert "their bug" in p.stderr and "their bug" in q.stderr


def test_sampled_timing_counts_every_step_and_takes_the_epochs_span() -> None:
    from ddptop_worker.attach_steps import is_timed
    from ddptop_worker.cadence import Cadence

    every = Cadence.of(10)
    a = Account()
    for n in range(1, 104):
        timed = is_timed(n, every, now=0.01 * n)
        a.add(info(n, 0), step_ms=10.0 if timed else None, data_ms=1.0)
    # 100 counted steps, of which 10 timed (steps 10, 20, ..., 100); the span says 1.25 s.
    done = a.close_epoch(None, span_ms=1250.0)
    assert done is not None
    t, _ = done
    assert t.steps == 100 and t.timed_steps == 10 and t.samples == 3200
    assert t.seconds == pytest.approx(1.25)
    assert t.samples_per_s == pytest.approx(2560.0)


def test_every_step_timed_takes_the_span_and_without_one_the_sum_of_step_times() -> None:
    # The span also holds what runs between one step's end mark and the next one's start
    # (ddptop's own work after each step): the script's clock sees it, the step times do not.
    for span, want in ((103.0, 0.103), (None, 0.1)):
        a = Account()
        for n in range(1, 14):
            a.add(info(n, 0), step_ms=10.0, data_ms=0.0)
        t, _ = a.close_epoch(None, span_ms=span) or (None, None)
        assert t is not None and t.seconds == pytest.approx(want)


def test_time_every_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from ddptop_worker.attach_steps import is_timed, time_every_from_env
    from ddptop_worker.cadence import AUTO, Cadence

    monkeypatch.setenv("DDPTOP_TIME_EVERY", "10")
    assert time_every_from_env() == 10
    monkeypatch.setenv("DDPTOP_TIME_EVERY", "auto")
    assert time_every_from_env() == AUTO
    for bad in ("", "0", "x"):
        monkeypatch.setenv("DDPTOP_TIME_EVERY", bad)
        assert time_every_from_env() == 1
    ten = Cadence.of(10)
    assert all(is_timed(n, ten, now=n) for n in range(1, WARMUP_STEPS + 1))
    assert [n for n in range(4, 31) if is_timed(n, ten, now=n)] == [10, 20, 30]


def test_a_step_that_compiled_is_counted_as_a_step_and_left_out_of_throughput() -> None:
    a = Account()
    for n in range(1, 14):
        compiled = n in (2, 8)  # a warm-up step and a counted one
        a.add(StepInfo(n, 0, 32, True, compiled), step_ms=500.0 if compiled else 10.0,
              data_ms=0.0)
    t, _ = a.close_epoch(None) or (None, None)
    assert t is not None and t.all_steps == 13
    assert t.steps == 13 - WARMUP_STEPS - 1 and t.compiled_steps == 1
    assert t.samples_per_s == pytest.approx(3200.0)  # the 500 ms step is not in it


def test_compile_clock_counts_compiles_recompiles_and_the_time_per_step() -> None:
    from types import SimpleNamespace

    from ddptop_worker.attach_compile import CompileClock, is_recompile

    assert [is_recompile(c) for c in ("0/0", "0/1", "3/2_1", "!0/1", "x")] == [
        False, True, True, True, False]
    c = CompileClock()
    assert c.take() == 0.0 and c.result_fields() == {}
    for trigger, cid in (("DYNAMO", "0/0"), ("LAZY_BACKWARD", "0/0"), ("DYNAMO", "0/1")):
        args = SimpleNamespace(callback_trigger=SimpleNamespace(name=trigger), compile_id=cid)
        c.start(args)
        c.end(args)
    assert c.take() > 0.0 and c.take() == 0.0  # handed once
    assert (c.compiles, c.recompiles, c.lazy_backward) == (2, 1, 1)
    c.start(None)
    assert c.take() > 0.0  # a compile still running marks the step too
    c.registered, c.steps = True, 2
    assert c.result_fields()["recompiles"] == 1 and c.result_fields()["compile_steps"] == 2
    assert c.describe().endswith("2 steps with a compile left out of samples/s")


def test_torch_compile_runs_ddptops_hooks_eagerly() -> None:
    """At the script's first torch.compile, the hooks on a module are swapped for dynamo-disabled
    twins (traced, their clocks recompiled every step)."""
    m = torch.nn.Linear(2, 2)
    m.register_forward_pre_hook(attach_hooks.hook(attach_hooks.forward_pre), with_kwargs=True)
    attach_hooks.run_eagerly([m])
    (fn,) = m._forward_pre_hooks.values()
    assert fn is not attach_hooks.forward_pre and getattr(fn, "_torchdynamo_disable", False)
    assert attach_hooks.hook(attach_hooks.forward_post) is not attach_hooks.forward_post


def test_at_exit_ddptop_lets_go_of_the_scripts_process_group() -> None:
    """Issue 51: ddptop's bucket timer held the process group from a module global, so the group
    outlived the script and was destroyed during interpreter finalization, where a rank aborted.
    After release_torch nothing of ddptop's keeps it; the reducer's hook state falls back to
    DDP's own all-reduce."""
    import types
    import weakref

    class Group:  # stands for the ProcessGroup the timer was given
        pass

    group = Group()
    gone = weakref.ref(group)
    s = attach.Session("explicit")
    module = torch.nn.Linear(2, 2)  # the WeakKeyDictionary's key, as a DDP module is
    rec = attach.DdpRecord()
    rec.timer = types.SimpleNamespace(pg=group, recording=True)  # type: ignore[assignment]
    rec.hook_state = attach_hooks.HookState(rec.timer)
    s.records[module] = rec  # type: ignore[index]
    kept_by_reducer = rec.hook_state
    del group, rec
    assert gone() is not None
    s.release_torch()
    assert gone() is None, "ddptop still holds the script's process group"
    assert kept_by_reducer.timer is None


def test_fully_shard_wrap_reports_each_module_and_keeps_its_attributes() -> None:
    """FSDP2 (issue 43): ddptop's fully_shard is the script's own plus a call per sharded module;
    the contract's attributes (`fully_shard.state`, used inside torch) stay on it."""
    from ddptop_worker import attach_fsdp

    seen: list[object] = []

    def fully_shard(module, **kwargs):  # type: ignore[no-untyped-def]
        return module

    fully_shard.state = "the contract's"  # type: ignore[attr-defined]
    w = attach_fsdp.wrap(fully_shard, seen.append)
    assert w.state == "the contract's" and attach_fsdp.wrap(w, seen.append) is w
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    assert w(a, reshard_after_forward=True) is a
    w([a, b])
    assert seen == [a, a, b]
    root = torch.nn.Sequential(a, b)
    assert attach_fsdp.takes_over(a, None) and attach_fsdp.takes_over(root, a)
    assert not attach_fsdp.takes_over(b, a) and not attach_fsdp.takes_over(a, root)


def test_fully_shard_is_wrapped_when_the_script_imports_fsdp() -> None:
    """The watcher does not import torch.distributed.fsdp (over a second) itself: it wraps
    fully_shard, in both modules scripts import it from, once the script's import finishes."""
    code = (
        "import sys, torch; from ddptop_worker import attach_fsdp as f; seen = []\n"
        "f.install(seen.append, print)\n"
        "assert 'torch.distributed.fsdp' not in sys.modules\n"
        "from torch.distributed.fsdp import fully_shard\n"
        "from torch.distributed._composable.fsdp import fully_shard as old_path\n"
        "assert fully_shard.__ddptop_wrapped__ and old_path.__ddptop_wrapped__\n"
        "assert not any(isinstance(x, f._FsdpImportWatcher) for x in sys.meta_path)\n"
        "print('wrapped')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": WORKERS}, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "wrapped", out.stderr


def test_a_forward_inside_optimizer_step_is_a_closure_step() -> None:
    """Lightning's automatic optimization calls optimizer.step(closure): the forward comes after
    the optimizer's start mark. ddptop then drops that mark (backward and update are one span)
    instead of timing the whole step as the optimizer's; samples count as for any forward."""
    import weakref

    s = attach.Session("explicit")
    m = torch.nn.Linear(2, 2)
    s.fsdp = weakref.ref(m)  # a watched root without DDP (FSDP2's path)
    s.start_step()
    s.in_opt = True
    s.cur.marks["opt0"] = s.clock.mark()
    s.on_forward_pre(m, (torch.zeros(4, 2),), {})
    assert s.cur_closure and "opt0" not in s.cur.marks and "fwd0" in s.cur.marks
    assert s.cur_samples == 4 and "closure" in s.once and "fsdp_forward" in s.once
    s.start_step()
    assert not s.cur_closure


def test_host_syncs_are_timed_on_the_scripts_thread_only_and_put_back() -> None:
    """Issue 46's host-sync phase: the wraps add up the host time of `.item()`, `.tolist()`,
    `.cpu()`, `float()` and `torch.cuda.synchronize()` on the thread that installed them, return
    what the originals return, and `uninstall` leaves torch as it was."""
    import threading
    import time

    from ddptop_worker import attach_sync

    clock = attach_sync.SyncClock()
    uninstall = attach_sync.install(clock)
    try:
        t = torch.tensor([1.5, 2.5])
        assert t.sum().item() == 4.0 and t.tolist() == [1.5, 2.5] and float(t[0]) == 1.5
        assert torch.equal(t.cpu(), t)
        assert clock.calls == 4 and clock.ms > 0.0
        clock.take()
        # A wait inside a wrapped call is counted whole (here a sleep standing for the device).
        slow = clock.timed(lambda: time.sleep(0.02))
        slow()
        assert 19.0 <= clock.take() < 200.0
        assert clock.ms == 0.0 and clock.calls == 0
        # Another thread (a DataLoader thread, ddptop's heartbeat) is not the training loop.
        got: list[float] = []
        th = threading.Thread(target=lambda: (got.append(t[0].item()), slow()))
        th.start()
        th.join()
        assert got == [1.5] and clock.calls == 0 and clock.ms == 0.0
    finally:
        uninstall()
    for name in attach_sync.TENSOR_METHODS:
        assert name not in torch.Tensor.__dict__, name  # TensorBase's again, inherited
    assert torch.cuda.synchronize is attach_sync.original_synchronize
    torch.tensor(1.0).item()
    assert clock.calls == 0


def test_a_compiled_functions_graph_breaks_are_the_scripts_own_once_the_wraps_are_off() -> None:
    """Dynamo inlines a Python wrap of `Tensor.item` and breaks at the C method inside it: one
    graph break more than the script has. attach takes the wraps off at the first torch.compile
    call (`on_compile_call`); this checks the reason for doing so, and that without the wraps the
    breaks are the bare script's."""
    from torch._dynamo.utils import counters

    from ddptop_worker import attach_sync

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * x.sum().item()

    def breaks() -> int:
        torch._dynamo.reset()
        counters.clear()
        torch.compile(f, backend="eager")(torch.ones(3))
        return sum(counters["graph_break"].values())

    bare = breaks()
    uninstall = attach_sync.install(attach_sync.SyncClock())
    try:
        wrapped = breaks()
    finally:
        uninstall()
    assert wrapped > bare >= 1, (bare, wrapped)
    assert breaks() == bare
