"""Real 2-process FSDP2 and DDP runs over gloo on CPU (torchrun), reporting to a fake ddptop:
memory per rank, per-block collectives, and equal losses for the two strategies."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import WORKERS
from fakeserver import FakeDdptop, last_types

from ddptop_worker import memory, models
from ddptop_worker.fsdp import shard_units, unit_params

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
K = 2
SAMPLES, BATCH, EPOCHS = 256, 32, 2
STEPS = EPOCHS * (SAMPLES // K // BATCH)


def launch(args: list[str], srv: FakeDdptop, nproc: int = K) -> subprocess.CompletedProcess[str]:
    if nproc > 0:
        base = [TORCHRUN] if os.path.exists(TORCHRUN) else [sys.executable, "-m", "torch.distributed.run"]
        cmd = base + ["--standalone", f"--nproc-per-node={nproc}", "-m", "ddptop_worker"] + args
    else:
        cmd = [sys.executable, "-m", "ddptop_worker"] + args
    p = subprocess.run(cmd, env=srv.env(PYTHONPATH=WORKERS), capture_output=True, text=True, timeout=180)
    srv.wait_for(lambda: all(c.closed for c in srv.conns), timeout=5)
    return p


def by_rank(srv: FakeDdptop, mtype: str) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for m in srv.messages(mtype):
        out[m["rank"]].append(m)
    return out


class Run:
    def __init__(self, strategy: str, model: str = "tiny", samples: int = SAMPLES, batch: int = BATCH,
                 epochs: int = EPOCHS) -> None:
        self.srv = FakeDdptop()
        args = ["fsdp", "--strategy", strategy, "--optimizer", "adam", "--model", model,
                "--samples", str(samples), "--batch", str(batch), "--epochs", str(epochs),
                "--backend", "gloo", "--seed", "3"]
        self.proc = launch(args, self.srv)
        self.srv.stop()

    def final_memory(self, rank: int) -> dict[str, Any]:
        return by_rank(self.srv, "memory")[rank][-1]


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Run]]:
    yield {s: Run(s) for s in ("fsdp", "zero1", "ddp")}


def test_both_strategies_complete(runs: dict[str, Run]) -> None:
    for strategy, run in runs.items():
        srv = run.srv
        assert run.proc.returncode == 0, run.proc.stderr[-3000:]
        assert srv.bad == [], srv.bad
        assert sorted(h["rank"] for h in srv.hellos()) == list(range(K))
        assert all(h["worker"] == "fsdp" and h["backend"] == "gloo" for h in srv.hellos())
        for r in range(K):
            msgs = srv.messages(rank=r)
            assert last_types(msgs) == ["result", "bye"] and msgs[-1]["reason"] == "done"
            (res,) = by_rank(srv, "result")[r]
            assert res["experiment"] == "fsdp" and res["optimizer"] == "adam"
            assert res["strategy"] == strategy and res["timed_epochs"] == 1 and res["samples_per_s"] > 0
            (plan,) = by_rank(srv, "plan")[r]
            assert plan["total_steps"] == STEPS and plan["epochs"] == EPOCHS
            steps = by_rank(srv, "step")[r]
            assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
            assert all(m["timing"] == "host" and m["samples"] == BATCH for m in steps)
            epochs = by_rank(srv, "epoch")[r]
            assert [(m["epoch"], m["warmup"]) for m in epochs] == [(0, True), (1, False)]
        assert f"{strategy} adam k=2" in run.proc.stdout


def test_losses_of_ddp_fsdp_and_zero1_agree(runs: dict[str, Run]) -> None:
    for other in ("fsdp", "zero1"):
        for r in range(K):
            a = [m["loss"] for m in by_rank(runs["ddp"].srv, "step")[r]]
            b = [m["loss"] for m in by_rank(runs[other].srv, "step")[r]]
            assert len(a) == len(b) == STEPS
            assert a[0] == pytest.approx(b[0], abs=1e-6)  # same weights, same batch: same first loss
            assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4, (other, a, b)
            assert a[-1] != a[0]  # the optimizer really stepped


def test_zero1_shards_only_the_optimizer_state(runs: dict[str, Run]) -> None:
    """ZeRO-1: weights and gradients whole on every rank, Adam's moments only for the parameters
    the rank owns; the ranks' moments add up to DDP's, and each rank's prediction (8P + 8P_owned)
    is its exact state but for Adam's scalar `step` counters."""
    net = models.build_model("tiny", "cpu")
    n_params = models.count_params(net)
    ddp = [runs["ddp"].final_memory(r) for r in range(K)]
    zero = [runs["zero1"].final_memory(r) for r in range(K)]
    moments = 0
    for d, z in zip(ddp, zero):
        assert z["strategy"] == "zero1" and z["phase"] == f"epoch{EPOCHS - 1}"
        assert z["param_bytes"] == d["param_bytes"] == 4 * n_params
        assert z["grad_bytes"] == d["grad_bytes"] == 4 * n_params
        assert 0 < z["optim_bytes"] < d["optim_bytes"]
        state = z["param_bytes"] + z["grad_bytes"] + z["optim_bytes"]
        assert abs(state - z["predicted_bytes"]) <= 4 * len(list(net.parameters())), (state, z)
        moments += z["predicted_bytes"] - 8 * n_params
    assert moments == 8 * n_params  # the partition covers every parameter exactly once
    logs = [m["msg"] for m in runs["zero1"].srv.messages("log")]
    assert any("parameters this rank owns" in x for x in logs), logs


def test_fsdp_shards_hold_half_of_ddps_state(runs: dict[str, Run]) -> None:
    net = models.build_model("tiny", "cpu")
    n_params = models.count_params(net)
    n_tensors = len(list(net.parameters()))
    # what padding dim 0 to a multiple of k can add to one rank's share (zero for tiny at k=2,
    # whose row counts are all even; the bound keeps the test honest if that changes)
    pad = 4 * sum(memory.padded_numel(tuple(p.shape), K) - p.numel() for p in net.parameters())
    sizes = unit_params(net, shard_units(net), K)
    step_bytes = 4 * n_tensors  # Adam's scalar `step` per parameter tensor, on every rank
    ddp = [runs["ddp"].final_memory(r) for r in range(K)]
    fsdp = [runs["fsdp"].final_memory(r) for r in range(K)]
    for d, f in zip(ddp, fsdp):
        assert d["strategy"] == "ddp" and f["strategy"] == "fsdp"
        assert d["phase"] == f["phase"] == f"epoch{EPOCHS - 1}"
        assert d["param_bytes"] == d["grad_bytes"] == 4 * n_params
        assert d["optim_bytes"] == 8 * n_params + step_bytes
        assert d["predicted_bytes"] == 16 * n_params
        assert abs(2 * f["param_bytes"] - d["param_bytes"]) <= 2 * pad
        assert abs(2 * f["grad_bytes"] - d["grad_bytes"]) <= 2 * pad
        assert abs(2 * (f["optim_bytes"] - step_bytes) - (d["optim_bytes"] - step_bytes)) <= 4 * pad
        assert f["predicted_bytes"] == 8 * n_params + 4 * max(sizes.values())
        for m in (d, f):  # CPU: no allocator counters
            assert m["peak_bytes"] is None and m["reserved_bytes"] is None and m["allocated_bytes"] is None
    # the shards partition the parameters exactly
    assert sum(f["param_bytes"] for f in fsdp) == ddp[0]["param_bytes"]
    phases = [m["phase"] for m in by_rank(runs["fsdp"].srv, "memory")[0]]
    assert phases == ["data", "init", "first_step", "epoch0", "epoch1"]
    init = by_rank(runs["fsdp"].srv, "memory")[0][1]
    assert init["grad_bytes"] == 0 and init["optim_bytes"] == 0  # no state before the first step


def test_fsdp_reports_each_blocks_all_gathers_and_reduce_scatter(runs: dict[str, Run]) -> None:
    net = models.build_model("tiny", "cpu")
    sizes = unit_params(net, shard_units(net), K)
    srv = runs["fsdp"].srv
    for r in range(K):
        comms = by_rank(srv, "comm")[r]
        assert [m["step"] for m in comms] == list(range(1, STEPS + 1))
        for m in comms:
            assert m["timing"] == "host"
            ops = m["ops"]
            seen = collections.Counter((o["op"], o["pass"], o["name"]) for o in ops)
            for name, numel in sizes.items():
                assert seen[("all_gather", "fwd", name)] == 1, (name, seen)
                assert seen[("reduce_scatter", "bwd", name)] == 1, (name, seen)
                if name != "root":  # the root keeps its parameters gathered after forward
                    assert seen[("all_gather", "bwd", name)] == 1, (name, seen)
            for o in ops:
                assert o["bytes"] == 4 * sizes[o["name"]]
                assert o["dur_ms"] >= 0 and o["start_ms"] >= 0
            ends = [o["start_ms"] + o["dur_ms"] for o in ops]
            assert all(o["start_ms"] >= prev - 1e-6 for o, prev in zip(ops[1:], ends))  # serial on CPU
            step = next(s for s in by_rank(srv, "step")[r] if s["step"] == m["step"])
            assert max(ends) <= step["step_ms"] + 1e-6
    logs = [m["msg"] for m in srv.messages("log")]
    assert any("reduce-scatter" in x and "all-reduce" in x for x in logs)  # gloo's caveat, labelled


def test_ddp_reports_its_bucket_all_reduces(runs: dict[str, Run]) -> None:
    net = models.build_model("tiny", "cpu")
    srv = runs["ddp"].srv
    for r in range(K):
        comms = by_rank(srv, "comm")[r]
        assert comms and all(m["step"] >= 3 for m in comms)  # only after DDP's bucket rebuild
        for m in comms:
            assert {o["op"] for o in m["ops"]} == {"all_reduce"}
            assert sum(o["bytes"] for o in m["ops"]) == models.grad_bytes(net)
        res = by_rank(srv, "result")[r][0]
        assert sum(res["bucket_bytes"]) == models.grad_bytes(net)


def test_one_rank_holds_everything_and_sends_no_collectives() -> None:
    srv = FakeDdptop()
    try:
        p = launch(["fsdp", "--model", "tiny", "--samples", "64", "--batch", "32", "--epochs", "1",
                    "--backend", "gloo", "--optimizer", "sgd"], srv, nproc=0)
        assert p.returncode == 0, p.stderr[-3000:]
        assert srv.bad == [], srv.bad
        n = models.count_params(models.build_model("tiny", "cpu"))
        mem = srv.messages("memory")[-1]
        assert mem["param_bytes"] == mem["grad_bytes"] == 4 * n and mem["optim_bytes"] == 0
        assert mem["predicted_bytes"] == 8 * n  # SGD without momentum: weights and grads only
        # k=1: the shard is the whole parameter, FSDP gathers and reduces nothing
        assert srv.messages("comm") == []
        assert len(srv.messages("step")) == 2
    finally:
        srv.stop()


def test_resnet18_gathers_per_residual_block() -> None:
    srv = FakeDdptop()
    try:
        p = launch(["fsdp", "--model", "resnet18", "--samples", "4", "--batch", "2", "--epochs", "1",
                    "--backend", "gloo", "--optimizer", "sgd"], srv)
        assert p.returncode == 0, p.stderr[-3000:]
        assert srv.bad == [], srv.bad
        for r in range(K):
            (comm,) = by_rank(srv, "comm")[r]
            kinds = collections.Counter((o["op"], o["pass"]) for o in comm["ops"])
            # 8 residual blocks + root forward, 8 blocks again in backward; 9 reduce-scatters
            assert kinds == {("all_gather", "fwd"): 9, ("all_gather", "bwd"): 8,
                             ("reduce_scatter", "bwd"): 9}, kinds
            assert sum(o["bytes"] for o in comm["ops"] if o["op"] == "reduce_scatter") == 4 * models.RESNET18_PARAMS
            mem = by_rank(srv, "memory")[r][-1]
            assert 2 * mem["param_bytes"] == 4 * models.RESNET18_PARAMS  # even channel counts: no padding
    finally:
        srv.stop()


def test_bad_arguments_fail_in_one_line() -> None:
    srv = FakeDdptop()
    try:
        p = launch(["fsdp", "--model", "tiny", "--epochs", "0", "--backend", "gloo"], srv, nproc=0)
    finally:
        srv.stop()
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        "ddptop_worker fsdp (rank 0): error: --epochs, --batch, --samples and --comm-every must be >= 1"
    ]
