"""Attach mode end to end: the unmodified example scripts in examples/ under real torchrun on
gloo/CPU, with ddptop's bootstrap on PYTHONPATH and a fake ddptop end."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import REPO, WORKERS
from fakeserver import FakeDdptop, last_types

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
BOOTSTRAP = os.path.join(WORKERS, "ddptop_bootstrap")
EXAMPLES = os.path.join(REPO, "examples")
STEPS_PER_EPOCH = 2048 // 2 // 32  # the example's defaults at k=2
ATTACH_PATH = f"{BOOTSTRAP}{os.pathsep}{WORKERS}"


def torchrun(script: str, nproc: int = 2) -> list[str]:
    base = [TORCHRUN] if os.path.exists(TORCHRUN) else [sys.executable, "-m", "torch.distributed.run"]
    return base + ["--standalone", f"--nproc-per-node={nproc}", os.path.join(EXAMPLES, script)]


def bare_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPTOP_") and k != "PYTHONPATH"}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run(cmd: list[str], env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def run_attached(
    srv: FakeDdptop, script: str, nproc: int = 2, args: list[str] | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    e = srv.env(PYTHONPATH=ATTACH_PATH, DDPTOP_BACKEND="gloo", DDP_BACKEND="gloo", **env)
    p = run(torchrun(script, nproc) + (args or []), e)
    srv.wait_for(lambda: all(c.closed for c in srv.conns), timeout=5)
    return p


def by_rank(srv: FakeDdptop, mtype: str) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for m in srv.messages(mtype):
        out[m["rank"]].append(m)
    return out


def logs(srv: FakeDdptop, rank: int | None = None, level: str | None = None) -> list[str]:
    return [
        m["msg"] for m in srv.messages("log", rank) if level is None or m["level"] == level
    ]


def rank_lines(text: str) -> list[str]:
    """What the script printed (torchrun's own warnings left out)."""
    return [ln for ln in text.splitlines() if ln and "torch/distributed/run.py" not in ln]


@pytest.fixture
def server() -> Iterator[FakeDdptop]:
    srv = FakeDdptop()
    yield srv
    srv.stop()


def test_example_unmodified_full_instrumentation(server: FakeDdptop) -> None:
    bare = run(torchrun("train_ddp.py"), bare_env(DDP_BACKEND="gloo"))
    assert bare.returncode == 0, bare.stderr[-3000:]
    p = run_attached(server, "train_ddp.py")
    assert p.returncode == 0, p.stderr[-3000:]
    # ddptop's comm hook does DDP's own all-reduce: the script computes exactly what it did bare
    assert rank_lines(p.stdout) == rank_lines(bare.stdout)
    assert "mean loss" in bare.stdout
    assert server.bad == [], server.bad

    hellos = server.hellos()
    assert sorted(h["rank"] for h in hellos) == [0, 1]
    for h in hellos:
        assert h["worker"] == "attach" and h["instrument"] == "full"
        assert h["backend"] == "gloo" and h["device"] == "cpu" and h["world_size"] == 2
        assert h["torch"]
    steps, buckets, epochs = by_rank(server, "step"), by_rank(server, "buckets"), by_rank(server, "epoch")
    for r in (0, 1):
        msgs = server.messages(rank=r)
        assert last_types(msgs) == ["result", "bye"] and msgs[-1]["reason"] == "done"
        (plan,) = by_rank(server, "plan")[r]
        assert plan["total_steps"] is None
        s = steps[r]
        assert [m["step"] for m in s] == list(range(1, 2 * STEPS_PER_EPOCH + 1))
        assert [m["epoch"] for m in s] == [0] * STEPS_PER_EPOCH + [1] * STEPS_PER_EPOCH
        assert [m["warmup"] for m in s] == [True] * 3 + [False] * (2 * STEPS_PER_EPOCH - 3)
        assert all(m["samples"] == 32 and m["timing"] == "host" and m["sync"] for m in s)
        for m in s:
            assert m["step_ms"] > 0 and m["fwd_ms"] > 0 and m["bwd_ms"] > 0, str(m)
            # Its `total += loss.item()` is a host sync (on a CPU tensor it waits for nothing).
            assert 0.0 <= m["sync_ms"] < m["step_ms"], m
            assert m["step_ms"] >= m["data_ms"] + m["fwd_ms"] + m["bwd_ms"] + m["opt_ms"] - 1e-6
        e = epochs[r]
        assert [(m["epoch"], m["warmup"]) for m in e] == [(0, True), (1, False)]
        assert e[1]["samples"] == STEPS_PER_EPOCH * 32 and e[1]["samples_per_s"] > 0
        assert e[1]["samples_per_s"] == pytest.approx(e[1]["samples"] / e[1]["seconds"])
        (res,) = by_rank(server, "result")[r]
        assert res["experiment"] == "attach" and res["timed_epochs"] == 1
        assert res["samples_per_s"] == pytest.approx(e[1]["samples_per_s"])
        assert res["optimizer"] == "sgd" and res["params"] == 669706
        # what ddptop saw of the script, for its record (it claims no setting it did not see)
        assert res["process_group"] is True and res["ddp_module"] is True
        assert res["ddp_args"] == []  # it leaves DDP's tuned arguments to DDP (`ddptop tune`)
        assert res["epochs_seen"] == 2
        assert res["grad_bytes"] == 4 * res["params"] == sum(res["bucket_bytes"])
        assert len(res["bucket_bytes"]) == 2  # 1 MiB first bucket + the rest
        b = buckets[r]
        assert [m["step"] for m in b] == list(range(4, 2 * STEPS_PER_EPOCH + 1))
        for m in b:
            assert m["rebuilt"] and m["start_inferred"]  # gloo has no kernel durations
            spans = m["buckets"]
            assert sorted(x["bytes"] for x in spans) == sorted(res["bucket_bytes"])
            prev_done = 0.0
            for x in spans:
                assert x["ready_ms"] <= x["start_ms"] <= x["done_ms"]
                assert x["start_ms"] >= min(prev_done, x["done_ms"]) - 1e-6
                prev_done = x["done_ms"]
            assert m["bwd_compute_ms"] == pytest.approx(spans[-1]["ready_ms"])
        assert any(msg.startswith("buckets rebuilt: 2 buckets") for msg in logs(server, r))
        assert logs(server, r, "warn") == [] and logs(server, r, "error") == []
    phases = {m.get("phase") for m in server.messages("heartbeat")}
    assert "train" in phases


def test_bootstrap_without_ddptop_changes_nothing() -> None:
    args = ["--epochs", "1", "--workers", "1"]
    bare = run(torchrun("train_ddp.py") + args, bare_env(DDP_BACKEND="gloo"))
    boot = run(torchrun("train_ddp.py") + args, bare_env(DDP_BACKEND="gloo", PYTHONPATH=ATTACH_PATH))
    assert bare.returncode == boot.returncode == 0, boot.stderr[-3000:]
    assert rank_lines(boot.stdout) == rank_lines(bare.stdout)
    assert "ddptop" not in boot.stderr


def test_own_comm_hook_times_steps_only(server: FakeDdptop) -> None:
    p = run_attached(server, "train_ddp_own_hook.py")
    assert p.returncode == 0, p.stderr[-3000:]
    assert server.bad == [], server.bad
    assert server.messages("buckets") == []
    for r in (0, 1):
        (warn,) = logs(server, r, "warn")
        assert warn.startswith("instrument: steps_only") and "allreduce_hook" in warn
        s = by_rank(server, "step")[r]
        assert len(s) == 2 * STEPS_PER_EPOCH and all(m["samples"] == 32 for m in s)
        (res,) = by_rank(server, "result")[r]
        assert res["bucket_bytes"] == [] and res["samples_per_s"] > 0
        assert server.messages(rank=r)[-1]["reason"] == "done"


def test_raising_script_behaves_as_without_bootstrap(server: FakeDdptop) -> None:
    bare = run(torchrun("train_ddp_raises.py"), bare_env(DDP_BACKEND="gloo"))
    p = run_attached(server, "train_ddp_raises.py")
    want = "ValueError: label out of range in batch 5 (example failure)"
    assert bare.returncode == p.returncode != 0
    assert want in bare.stderr and want in p.stderr
    assert rank_lines(p.stdout) == rank_lines(bare.stdout)
    assert server.bad == [], server.bad
    assert want in logs(server, 1, "error")
    last = server.messages(rank=1)[-1]
    assert last["type"] == "bye" and last["reason"] == "error"
    assert [m["step"] for m in by_rank(server, "step")[1]] == [1, 2, 3, 4, 5]


@pytest.mark.timing
def test_injected_hang_keeps_heartbeats_then_deadman_ends_it(server: FakeDdptop) -> None:
    env = server.env(PYTHONPATH=ATTACH_PATH, DDPTOP_BACKEND="gloo", DDP_BACKEND="gloo",
                     DDPTOP_INJECT="hang:4")
    proc = subprocess.Popen(torchrun("train_ddp.py"), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert server.wait_for(lambda: len(by_rank(server, "step")[0]) >= 3, timeout=120)
        time.sleep(3.0)  # stuck: no step progress, heartbeats go on
        n_hb = len(server.messages("heartbeat", 1))
        assert server.wait_for(lambda: len(server.messages("heartbeat", 1)) >= n_hb + 2, timeout=10)
        assert max(m["step"] for m in server.messages(rank=1)) == 4
        assert max(m["step"] for m in server.messages(rank=0)) <= 5
        assert "injected fault hang:4" in logs(server, 1, "warn")
        t0 = time.monotonic()
        server.close_all()  # ddptop is gone: every rank must go
        _, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0 and elapsed < 15
    assert err.count("dead-man switch") == 2


def test_explicit_mode_counts_its_steps_once(server: FakeDdptop) -> None:
    # explicit calls plus the zero-code bootstrap, and DataLoader worker processes (forked)
    p = run_attached(server, "train_ddp_explicit.py", args=["--workers", "2"])
    assert p.returncode == 0, p.stderr[-3000:]
    assert server.bad == [], server.bad
    assert len(server.hellos()) == 2  # no DataLoader worker connected as a rank
    for r in (0, 1):
        s = by_rank(server, "step")[r]
        assert [m["step"] for m in s] == list(range(1, 2 * STEPS_PER_EPOCH + 1))
        assert all(m["samples"] == 32 and m["fwd_ms"] > 0 for m in s)
        assert by_rank(server, "buckets")[r]
        assert server.messages(rank=r)[-1]["reason"] == "done"


def test_explicit_mode_without_bootstrap(server: FakeDdptop) -> None:
    e = server.env(PYTHONPATH=WORKERS, DDP_BACKEND="gloo", DDPTOP_BACKEND="gloo")
    p = run(torchrun("train_ddp_explicit.py", nproc=1) + ["--epochs", "1"], e)
    server.wait_for(lambda: all(c.closed for c in server.conns), timeout=5)
    assert p.returncode == 0, p.stderr[-3000:]
    assert server.bad == [], server.bad
    (h,) = server.hellos()
    assert h["worker"] == "attach"
    s = server.messages("step")
    assert [m["step"] for m in s] == list(range(1, 2048 // 32 + 1))
    assert server.messages("buckets")  # watch() registered the timing hook at the first forward
    bare = run(torchrun("train_ddp_explicit.py", nproc=1) + ["--epochs", "1"],
               bare_env(PYTHONPATH=WORKERS, DDP_BACKEND="gloo"))
    assert bare.returncode == 0 and rank_lines(bare.stdout) == rank_lines(p.stdout)


def test_unreachable_ddptop_one_line_and_script_runs() -> None:
    args = ["--epochs", "1"]
    ref = run(torchrun("train_ddp.py", nproc=1) + args, bare_env(DDP_BACKEND="gloo"))
    env = bare_env(DDP_BACKEND="gloo", PYTHONPATH=ATTACH_PATH, DDPTOP_SOCKET="/nonexistent/ddptop.sock",
                   DDPTOP_TOKEN="ab" * 32, DDPTOP_RUN_ID="r1")
    p = run(torchrun("train_ddp.py", nproc=1) + args, env)
    assert p.returncode == 0 and rank_lines(p.stdout) == rank_lines(ref.stdout)
    lines = [ln for ln in p.stderr.splitlines() if "ddptop" in ln]
    assert len(lines) == 1 and "not measured" in lines[0] and "cannot connect" in lines[0], lines
    # the bootstrap alone, without the ddptop_worker package: also one line, also unharmed
    env["PYTHONPATH"] = BOOTSTRAP
    p = run(torchrun("train_ddp.py", nproc=1) + args, env)
    assert p.returncode == 0 and rank_lines(p.stdout) == rank_lines(ref.stdout)
    lines = [ln for ln in p.stderr.splitlines() if "ddptop" in ln]
    assert len(lines) == 1 and "cannot import ddptop_worker" in lines[0], lines


def test_failure_inside_turns_instrumentation_off(server: FakeDdptop) -> None:
    p = run_attached(server, "train_ddp.py", nproc=1, args=["--epochs", "1"], DDPTOP_INJECT="bogus")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "done" in p.stdout
    (warn,) = logs(server, 0, "warn")
    assert warn.startswith("instrumentation off: bad DDPTOP_INJECT")
    assert server.messages("step") == []
    assert server.messages("heartbeat")  # still alive and watched
    assert server.messages(rank=0)[-1]["type"] == "bye"


NO_DDP_SCRIPT = """
import torch
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    x = torch.randn(64, 8)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
"""


def test_no_process_group_no_ddp_is_reported_as_independent(server: FakeDdptop, tmp_path: Any) -> None:
    script = tmp_path / "no_ddp.py"
    script.write_text(NO_DDP_SCRIPT)
    base = [TORCHRUN] if os.path.exists(TORCHRUN) else [sys.executable, "-m", "torch.distributed.run"]
    e = server.env(PYTHONPATH=ATTACH_PATH, DDPTOP_BACKEND="gloo")
    p = run(base + ["--standalone", "--nproc-per-node=2", str(script)], e)
    server.wait_for(lambda: all(c.closed for c in server.conns), timeout=5)
    assert p.returncode == 0, p.stderr[-3000:]
    assert server.bad == [], server.bad
    for r in (0, 1):
        (res,) = by_rank(server, "result")[r]
        # the steps were seen; a process group, a DDP module, epochs and samples were not
        assert res["process_group"] is False and res["ddp_module"] is False
        assert "epochs_seen" not in res
        assert res["samples_per_s"] is None
        assert [m["step"] for m in by_rank(server, "step")[r]] == [1, 2, 3, 4, 5]
        assert all(m["samples"] == 0 for m in by_rank(server, "step")[r])


@pytest.mark.parametrize("time_every", ["1", "2"])
def test_timed_steps_send_their_timeline_or_their_exposed_comm(
    server: FakeDdptop, time_every: str
) -> None:
    # ddptop's CUDA default (1 timed step in 4 takes the whole timeline, the others ready marks
    # and the backward's end) asked for on CPU, where it would otherwise time every timeline.
    p = run_attached(server, "train_ddp.py", DDPTOP_TIMELINE_EVERY="4",
                     DDPTOP_TIME_EVERY=time_every)
    assert p.returncode == 0, p.stderr[-3000:]
    assert server.bad == [], server.bad
    n = int(time_every)
    for r in (0, 1):
        assert not [m for m in logs(server, r, "warn") if "backward-end" in m]
        steps = by_rank(server, "step")[r]
        timelines = {m["step"]: m for m in by_rank(server, "buckets")[r]}
        exposed = {m["step"]: m["exposed_ms"] for m in steps if "exposed_ms" in m}
        assert timelines and exposed, (sorted(timelines), sorted(exposed))
        first = min([*timelines, *exposed])
        after = [m["step"] for m in steps if m["step"] >= first]
        assert not set(timelines) & set(exposed), "never both"
        assert sorted([*timelines, *exposed]) == after, "every timed step has one of them"
        # the warm-up's 1 step in 4, then the timed steps whose number 4N divides
        assert all(s % 4 == 0 if s <= 3 else s % (4 * n) == 0 for s in timelines), sorted(timelines)
        assert all(0.0 <= v < 1000.0 for v in exposed.values())
        assert all(s % n == 0 for s in exposed if s > 3)


TL_EVERY = 3  # bucket timing starts at step 4: its ready-only case, the one that sends neither


def test_without_backward_end_marks_every_timed_step_takes_its_timeline(
    server: FakeDdptop, tmp_path: Any
) -> None:
    # An autograd engine that accepts final callbacks and never runs them: the fallback path
    # (one warning, the whole timeline from the next step on, one step with neither).
    wrapper = tmp_path / "no_final_callbacks.py"
    wrapper.write_text(
        "import runpy, sys, torch\n"
        "class NoFinalCallbacks:\n"
        "    def __init__(self, real): self.real = real\n"
        "    def queue_callback(self, cb): pass\n"
        "    def __getattr__(self, name): return getattr(self.real, name)\n"
        "torch.autograd.Variable._execution_engine = NoFinalCallbacks(\n"
        "    torch.autograd.Variable._execution_engine)\n"
        f"sys.argv[0] = {os.path.join(EXAMPLES, 'train_ddp.py')!r}\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    p = run_attached(server, str(wrapper), DDPTOP_TIMELINE_EVERY=str(TL_EVERY))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "mean loss" in p.stdout
    for r in (0, 1):
        warns = [m for m in logs(server, r, "warn") if "backward-end marks unavailable" in m]
        assert len(warns) == 1, logs(server, r)
        steps = by_rank(server, "step")[r]
        timelines = sorted(m["step"] for m in by_rank(server, "buckets")[r])
        assert not [m for m in steps if "exposed_ms" in m]
        (first,) = [int(m.rsplit(" ", 1)[1]) for m in logs(server, r)
                    if m.startswith("buckets rebuilt:")]  # "... timing buckets from step N"
        after = [m["step"] for m in steps if m["step"] >= first]
        neither = sorted(set(after) - set(timelines))
        # The first marked step finds its end mark missing: ready marks only where TL_EVERY
        # does not divide its number (it then sends neither), else its timeline with the last
        # bucket's completion as the backward's end. From the next step on, every timeline.
        assert neither == ([] if first % TL_EVERY == 0 else [first]), (first, neither, timelines)
        assert timelines == [s for s in after if s != first or first % TL_EVERY == 0], timelines
