"""Real 2-process DDP runs over gloo on CPU (torchrun), reporting to a fake ddptop."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import WORKERS
from fakeserver import FakeDdptop

from ddptop_worker.allreduce import sizes

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


def launcher(nproc: int) -> list[str]:
    base = [TORCHRUN] if os.path.exists(TORCHRUN) else [sys.executable, "-m", "torch.distributed.run"]
    return base + ["--standalone", f"--nproc-per-node={nproc}", "-m", "ddptop_worker"]


@pytest.fixture
def server() -> Iterator[FakeDdptop]:
    srv = FakeDdptop()
    yield srv
    srv.stop()


def run(srv: FakeDdptop, args: list[str], nproc: int = 2, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = launcher(nproc) + args if nproc > 0 else [sys.executable, "-m", "ddptop_worker"] + args
    p = subprocess.run(cmd, env=srv.env(PYTHONPATH=WORKERS), capture_output=True, text=True, timeout=timeout)
    # every connection has been closed by the workers; let the server threads drain
    srv.wait_for(lambda: all(c.closed for c in srv.conns), timeout=5)
    return p


def by_rank(srv: FakeDdptop, mtype: str) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for m in srv.messages(mtype):
        out[m["rank"]].append(m)
    return out


def check_common(srv: FakeDdptop, worker: str, k: int, reason: str = "done") -> None:
    assert srv.bad == [], srv.bad
    hellos = srv.hellos()
    assert sorted(h["rank"] for h in hellos) == list(range(k))
    for h in hellos:
        assert h["worker"] == worker and h["backend"] == "gloo" and h["world_size"] == k
        assert h["device"] == "cpu" and h["torch"]
    for r in range(k):
        msgs = srv.messages(rank=r)
        assert msgs[-1]["type"] == "bye" and msgs[-1]["reason"] == reason, msgs[-3:]
        assert msgs[-2]["type"] == "result"
        assert [m["type"] for m in msgs].count("bye") == 1


def test_train_weak_two_ranks(server: FakeDdptop) -> None:
    p = run(server, ["train", "--model", "tiny", "--samples", "512", "--batch", "32", "--backend", "gloo"])
    assert p.returncode == 0, p.stderr[-3000:]
    check_common(server, "train", 2)
    steps_per_epoch = 512 // 2 // 32
    steps, buckets, epochs, results = (by_rank(server, t) for t in ("step", "buckets", "epoch", "result"))
    for r in (0, 1):
        s = steps[r]
        assert [m["step"] for m in s] == list(range(1, 2 * steps_per_epoch + 1))
        assert all(m["timing"] == "host" and m["sync"] and m["samples"] == 32 for m in s)
        assert [m["warmup"] for m in s] == [True] * steps_per_epoch + [False] * steps_per_epoch
        assert all(m["step_ms"] >= m["fwd_ms"] + m["bwd_ms"] for m in s)
        b = buckets[r]
        assert b, "no buckets message"
        assert all(m["rebuilt"] and m["step"] >= 3 for m in b)  # only after the rebuild
        for m in b:
            spans = m["buckets"]
            assert len(spans) >= 2  # tiny with bucket_cap_mb=1
            assert sorted(x["index"] for x in spans) == list(range(len(spans)))
            prev_done = 0.0
            for x in spans:
                assert x["ready_ms"] <= x["start_ms"] <= x["done_ms"]
                assert x["start_ms"] >= min(prev_done, x["done_ms"]) - 1e-6
                prev_done = x["done_ms"]
            assert m["bwd_compute_ms"] == pytest.approx(spans[-1]["ready_ms"])
        e = epochs[r]
        assert [(m["epoch"], m["warmup"]) for m in e] == [(0, True), (1, False)]
        assert all(m["samples"] == steps_per_epoch * 32 and m["samples_per_s"] > 0 for m in e)
        (res,) = results[r]
        assert res["experiment"] == "weak" and res["timed_epochs"] == 1
        assert res["samples_per_s"] == pytest.approx(e[1]["samples_per_s"])
        assert res["params"] > 0 and res["grad_bytes"] == 4 * res["params"]
        assert len(res["bucket_bytes"]) >= 2 and sum(res["bucket_bytes"]) == res["grad_bytes"]
        assert sorted(x["bytes"] for x in b[-1]["buckets"]) == sorted(res["bucket_bytes"])
    logs = [m["msg"] for m in server.messages("log")]
    assert any(msg.startswith("buckets rebuilt:") for msg in logs)
    assert any("via the device path" in msg for msg in logs)


def test_train_strong_loader_path(server: FakeDdptop) -> None:
    p = run(
        server,
        ["train", "--experiment", "strong", "--model", "tiny", "--samples", "256", "--batch", "32",
         "--epochs", "2", "--data-path", "loader", "--backend", "gloo"],
    )
    assert p.returncode == 0, p.stderr[-3000:]
    check_common(server, "train", 2)
    for r, s in by_rank(server, "step").items():
        assert all(m["samples"] == 16 for m in s)  # global batch 32 over 2 ranks
        assert len(s) == 2 * (256 // 2 // 16)
    assert any("via the loader path" in m["msg"] for m in server.messages("log"))


def test_train_no_instrument(server: FakeDdptop) -> None:
    p = run(server, ["train", "--model", "tiny", "--samples", "256", "--batch", "32", "--backend", "gloo",
                     "--no-instrument"])
    assert p.returncode == 0, p.stderr[-3000:]
    check_common(server, "train", 2)
    types = {m["type"] for m in server.messages()}
    assert types <= {"heartbeat", "result", "bye"}, types
    assert "samples/s" in p.stdout and "no instrumentation" in p.stdout


def test_train_probe_on_off_then_stop(server: FakeDdptop) -> None:
    args = ["train", "--model", "tiny", "--samples", "20000", "--batch", "16", "--backend", "gloo",
            "--probe-block-steps", "2", "--control-every", "2"]
    proc = subprocess.Popen(launcher(2) + args, env=server.env(PYTHONPATH=WORKERS),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.wait_for(lambda: len(server.messages("step")) >= 4, timeout=30)
        assert server.command("probe_on") == 2
        assert server.wait_for(lambda: all(len(by_rank(server, "probe")[r]) >= 4 for r in (0, 1)), timeout=30)
        server.command("probe_off")
        n_probe = len(server.messages("probe"))
        n_steps = len(server.messages("step"))
        assert server.wait_for(lambda: len(server.messages("step")) >= n_steps + 6, timeout=30)
        server.command("stop")
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    check_common(server, "train", 2, reason="stopped")
    probes = by_rank(server, "probe")
    for r in (0, 1):
        modes = [m["mode"] for m in probes[r]]
        assert modes == ["synced", "no_sync"] * (len(modes) // 2)
        assert [m["block"] for m in probes[r]] == list(range(len(modes)))
        assert all(m["steps"] == 2 and m["min_ms"] <= m["median_ms"] <= m["max_ms"] for m in probes[r])
    assert len(probes[0]) == len(probes[1])  # the ranks agreed on when to switch
    assert len(server.messages("probe")) <= n_probe + 4  # probe_off took effect
    for r, res in by_rank(server, "result").items():
        assert len(res) == 1 and res[0]["experiment"] == "weak"
        assert len(by_rank(server, "step")[r]) < 20000 // 2 // 16  # stopped early


def test_deadman_ends_a_real_run(server: FakeDdptop) -> None:
    args = ["train", "--model", "tiny", "--samples", "20000", "--batch", "16", "--backend", "gloo"]
    proc = subprocess.Popen(launcher(2) + args, env=server.env(PYTHONPATH=WORKERS),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.wait_for(lambda: len(server.messages("step")) >= 6, timeout=30)
        t0 = time.monotonic()
        server.close_all()  # ddptop is gone
        _, err = proc.communicate(timeout=15)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert elapsed < 5
    assert proc.returncode != 0
    assert err.count("dead-man switch") == 2


def test_probe_two_ranks_interleaved(server: FakeDdptop) -> None:
    p = run(server, ["probe", "--model", "tiny", "--batch", "16", "--blocks", "3", "--block-steps", "3",
                     "--warmup-steps", "2", "--backend", "gloo"])
    assert p.returncode == 0, p.stderr[-3000:]
    check_common(server, "probe", 2)
    for r, msgs in by_rank(server, "probe").items():
        assert [m["block"] for m in msgs] == list(range(6))
        assert [m["mode"] for m in msgs] == ["synced", "no_sync"] * 3
        assert all(m["steps"] == 3 and 0 < m["min_ms"] <= m["median_ms"] <= m["max_ms"] for m in msgs)
        assert [m["step"] for m in msgs] == [4 + 3 * (i + 1) for i in range(6)]
    for res in server.messages("result"):
        assert res["experiment"] == "probe" and res["samples_per_s"] is None
    assert "probe k=2" in p.stdout


def test_probe_world_size_one_without_torchrun(server: FakeDdptop) -> None:
    p = run(server, ["probe", "--model", "tiny", "--batch", "8", "--blocks", "1", "--block-steps", "2",
                     "--warmup-steps", "1", "--backend", "gloo"], nproc=0)
    assert p.returncode == 0, p.stderr[-3000:]
    check_common(server, "probe", 1)
    assert [m["mode"] for m in server.messages("probe")] == ["synced", "no_sync"]


def test_allreduce_one_bench_row_per_size(server: FakeDdptop) -> None:
    args = ["allreduce", "--min-bytes", "1024", "--max-bytes", "1048576", "--factor", "4",
            "--extra-bytes", "65536", "--extra-bytes", "100000", "--warmup", "1", "--iters", "3",
            "--backend", "gloo"]
    p = run(server, args)
    assert p.returncode == 0, p.stderr[-3000:]
    check_common(server, "allreduce", 2)
    expected = sizes(1024, 1048576, 4, [65536, 100000])
    assert expected == [1024, 4096, 16384, 65536, 100000, 262144, 1048576]
    rows = by_rank(server, "bench")[0]
    assert [m["bytes"] for m in rows] == expected
    for m in rows:
        assert m["op"] == "all_reduce" and m["dtype"] == "float32" and m["iters"] == 3
        assert m["algbw_gbs"] == pytest.approx(m["bytes"] / (m["time_us"] * 1e-6) / 1e9)
        assert m["busbw_gbs"] == pytest.approx(m["algbw_gbs"])  # 2(k-1)/k = 1 at k=2
    (res,) = by_rank(server, "result")[0]
    assert res["experiment"] == "allreduce" and res["samples_per_s"] is None


def test_default_sweep_sizes() -> None:
    s = sizes(1024, 268435456, 4, [67108864])
    assert s[0] == 1024 and s[-1] == 268435456 and 67108864 in s and len(s) == 10  # 64 MiB is on the x4 grid already


def test_nccl_without_cuda_fails_clearly(server: FakeDdptop) -> None:
    t0 = time.monotonic()
    p = run(server, ["train", "--model", "tiny", "--backend", "nccl"], nproc=0)
    assert time.monotonic() - t0 < 30
    assert p.returncode != 0
    assert "--backend nccl needs CUDA: torch sees no GPU; use --backend gloo" in p.stderr
    assert p.stderr.strip().count("\n") == 0  # one line
    errors = [m for m in server.messages("log") if m["level"] == "error"]
    assert errors and "needs CUDA" in errors[0]["msg"]
    assert [m["reason"] for m in server.messages("bye")] == ["error"]
