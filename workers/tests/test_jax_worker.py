"""The jax worker on CPU with 4 fake devices: receipts at k=1/2/4, the fsdp layout, the k=1
equality check over the real protocol, the parameter count, and its one-line errors."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import needs
import pytest

# Must be set before jax creates its CPU client (scripts/test sets it too).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

# Skipped without jax, flax and optax; under CI a missing one fails the run (needs.py).
HINT = "scripts/test installs jax, flax and optax"
jax = needs.module("jax", HINT)
nnx = needs.module("flax.nnx", HINT)
optax = needs.module("optax", HINT)

from ddptop_worker import jax_model, models  # noqa: E402
from ddptop_worker.client import Client  # noqa: E402
from ddptop_worker.jax_worker import JaxRun, run  # noqa: E402
from ddptop_worker.runtime import WorkerError  # noqa: E402
from fakeserver import FakeDdptop  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.dirname(HERE)
TINY_TENSORS = 22  # 5 x (conv kernel, conv bias, BN scale, BN bias) + linear kernel and bias

if len(jax.devices()) < 4:
    needs.unavailable(
        "needs 4 CPU devices: XLA_FLAGS=--xla_force_host_platform_device_count=4 before jax starts"
    )


def args_for(k: int, sharding: str = "data", **over: Any) -> argparse.Namespace:
    a = argparse.Namespace(
        k=k,
        sharding=sharding,
        batch=4,
        epochs=1,
        samples=32,
        model="tiny",
        optimizer="sgd",
        lr=None,
        data="synthetic",
        data_path="loader",  # the subprocess run below takes the default, device
        data_dir=None,
        seed=0,
        check=True,
        passes=True,
        platform="cpu",
        hlo_out=None,
        matmul_precision="tensorfloat32",
    )
    for key, value in over.items():
        setattr(a, key, value)
    return a


_RUNS: dict[tuple[int, str], JaxRun] = {}


def compiled_run(k: int, sharding: str = "data") -> JaxRun:
    """Built and compiled (not trained) once per (k, sharding) for the whole module."""
    key = (k, sharding)
    if key not in _RUNS:
        r = JaxRun(args_for(k, sharding), Client.disabled(), jax, nnx, optax)
        r.build()
        r.compile()
        _RUNS[key] = r
    return _RUNS[key]


def test_resnet18_has_the_books_parameter_count() -> None:
    for name, torch_net in (("resnet18", models.resnet18()), ("tiny", models.tiny())):
        abstract = nnx.eval_shape(lambda name=name: jax_model.build(name, 0))
        n = jax_model.count_params(abstract)
        if name == "resnet18":
            assert n == 11_175_818 == models.RESNET18_PARAMS
        else:
            assert n == models.count_params(torch_net)


def test_k1_receipt_has_no_collectives() -> None:
    r = compiled_run(1)
    assert r.collectives.counts() == {"all_reduce": 0, "all_gather": 0, "reduce_scatter": 0}
    assert r.combined == [] and r.changes == []


def assert_data_parallel_receipt(
    ops: dict[str, dict[str, int]], changes: list[dict[str, Any]], combined: list[str], params: int
) -> None:
    """What a data-parallel CPU receipt shows, from the hlo message's fields."""
    ar = ops["all_reduce"]
    assert ops["all_gather"]["count"] == 0 and ops["reduce_scatter"]["count"] == 0
    # The SPMD partitioner writes one all-reduce per gradient and per BatchNorm statistic; XLA's
    # CPU combiner merges them into tuple-shaped ops.
    first = changes[0]
    assert (first["pass"], first["op"], first["before"]) == ("spmd-partitioning", "all_reduce", 0)
    assert first["after"] > TINY_TENSORS
    assert any("all-reduce-combiner" in p for p in combined)
    assert 1 <= ar["count"] < first["after"]
    # Every gradient is summed: the all-reduced elements cover all parameters.
    assert ar["total_elems"] >= params
    assert ar["largest_elems"] * ar["count"] >= params
    assert ar["total_bytes"] == 4 * ar["total_elems"]


def test_k4_data_parallel_receipt() -> None:
    r = compiled_run(4)
    c = r.collectives
    assert r.changes is not None
    ops = {key: st.wire() for key, st in c.ops.items()}
    assert_data_parallel_receipt(ops, [ch.wire() for ch in r.changes], r.combined, r.params_count)
    assert c.ops["all_reduce"].tuple_count >= 1
    # Weights replicated on all four devices, the batch split four ways.
    assert "CPU 0,1,2,3" in r.layouts.texts["fc.kernel (before)"]
    batch = r.layouts.texts["batch (before)"]
    assert all(f"CPU {i}" in batch for i in range(4)) and "CPU 0,1" not in batch


def test_fsdp_receipt_shows_all_gathers_and_split_weights() -> None:
    fs = compiled_run(2, "fsdp")
    ag = fs.collectives.ops["all_gather"]
    assert ag.count > 0 and ag.largest_elems > 0
    from ddptop_worker.jax_sharding import local_bytes

    # Every tiny parameter has an even dimension, so at k=2 device 0 holds exactly half.
    assert local_bytes(fs.params, fs.devices[0]) * 2 == 4 * fs.params_count
    split = fs.layouts.texts["fc.kernel (before)"]
    assert "CPU 0,1" not in split and "CPU 0" in split and "CPU 1" in split
    # The unchanged step trains under the fsdp layout and keeps it.
    mean, timed = fs.train()
    assert timed == 1 and mean is not None and mean > 0
    assert fs.layouts.texts["fc.kernel (after)"] == split
    assert all(l == l and l > 0 for l in fs.losses.values())  # finite, positive


@pytest.fixture()
def server() -> Iterator[FakeDdptop]:
    srv = FakeDdptop()
    yield srv
    srv.stop()


def run_k2_worker(
    server: FakeDdptop, hlo_dir: Path | None = None, **env_extra: str
) -> subprocess.CompletedProcess[str]:
    """The jax worker at k=2 (tiny, 4 steps of global batch 8) against the fake server."""
    cmd = [sys.executable, "-m", "ddptop_worker", "jax", "--k", "2", "--model", "tiny"]
    cmd += ["--batch", "4", "--samples", "32", "--epochs", "1", "--data", "synthetic"]
    if hlo_dir is not None:
        env_extra["DDPTOP_JAX_HLO_DIR"] = str(hlo_dir)
    env = server.env(
        PYTHONPATH=WORKERS, XLA_FLAGS="--xla_force_host_platform_device_count=4", **env_extra
    )
    if "DDPTOP_TEST_BREAK_REDUCTION" not in env_extra:
        env.pop("DDPTOP_TEST_BREAK_REDUCTION", None)  # never inherited by the correct run
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_run_k2_over_the_protocol_with_equality_check(server: FakeDdptop, tmp_path: Path) -> None:
    hlo_dir = tmp_path / "hlo"
    hlo_dir.mkdir()
    p = run_k2_worker(server, hlo_dir)
    assert server.bad == []
    (conn,) = server.conns
    hello = conn.hello
    assert hello is not None
    assert (hello["worker"], hello["world_size"], hello["devices"], hello["backend"]) == (
        "jax",
        1,
        2,
        "xla",
    )
    (plan,) = server.messages("plan")
    assert plan["total_steps"] == 4
    steps = server.messages("step")
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert all(s["fused"] and s["samples"] == 8 and s["step_ms"] > 0 for s in steps)
    (hlo,) = server.messages("hlo")
    assert hlo["k"] == 2 and hlo["sharding"] == "data" and hlo["platform"] == "cpu"
    assert hlo["all_reduce_ops"] == hlo["ops"]["all_reduce"]["count"] >= 1
    assert_data_parallel_receipt(hlo["ops"], hlo["pass_changes"], hlo["combined_by"], 395_882)
    # The program's collectives do not depend on k, only their replica groups do.
    k4 = compiled_run(4).collectives.ops["all_reduce"].wire()
    assert hlo["ops"]["all_reduce"] == k4
    assert set(hlo["layout"]) == {
        "batch (before)",
        "fc.kernel (before)",
        "batch (after)",
        "fc.kernel (after)",
    }
    assert hlo["layout"]["fc.kernel (after)"] == hlo["layout"]["fc.kernel (before)"]
    checks = server.messages("check")
    losses = [c for c in checks if c["name"] == "k1_vs_k2_loss"]
    (params,) = [c for c in checks if c["name"] == "k1_vs_k2_params"]
    # Every step up to 3 after the first update, and the parameters after step 1.
    assert [c["step"] for c in losses] == [1, 2, 3, 4]
    assert all(c["ok"] and c["diff"] <= c["tol"] for c in checks), checks
    assert losses[0]["tol"] == pytest.approx(1e-6 * max(1.0, abs(losses[0]["a"])))
    assert losses[3]["tol"] == pytest.approx(2e-3 * max(1.0, abs(losses[3]["a"])))
    for c, s in zip(losses, steps):
        assert c["b"] == pytest.approx(s["loss"], abs=1e-6)
    # 1e-4 x max(1, the largest |parameter| at k=1), a little above 1 for the tiny model.
    assert params["step"] == 1 and 1e-4 <= params["tol"] < 2e-4, params
    assert params["a"] == pytest.approx(params["b"], rel=1e-5)  # L2 norms of the parameters
    assert all("tol (cpu)" in c["note"] for c in checks)
    mem = server.messages("memory")
    assert {m["device"] for m in mem} == {0, 1}
    assert all(m["strategy"] == "jax_data" and m["peak_bytes"] is None for m in mem)
    (result,) = server.messages("result")
    assert result["experiment"] == "jax" and result["samples_per_s"] > 0
    assert result["params"] == 395_882
    # The book's matmul precision ("high": TF32) by default, recorded like the DDP workers'.
    assert result["jax_matmul_precision"] == "tensorfloat32"
    logs = [m["msg"] for m in server.messages("log")]
    assert any("jax_default_matmul_precision tensorfloat32" in m for m in logs), logs
    (bye,) = server.messages("bye")
    assert bye["reason"] == "done"
    assert "jax k=2 data:" in p.stdout
    hlo_text = (hlo_dir / "hlo_tiny_k2_data.txt").read_text()
    assert hlo_text.count(" all-reduce(") == hlo["all_reduce_ops"]


def test_a_broken_gradient_reduction_fails_the_equality_check(server: FakeDdptop) -> None:
    """Device 0's gradient left unaveraged (the test-only switch): the first-step loss, computed
    before any update, still agrees, so a first-step check would pass; the later steps and the
    parameters after step 1 do not, and the check fails."""
    p = run_k2_worker(server, DDPTOP_TEST_BREAK_REDUCTION="1")
    assert server.bad == []
    checks = server.messages("check")
    losses = [c for c in checks if c["name"] == "k1_vs_k2_loss"]
    (params,) = [c for c in checks if c["name"] == "k1_vs_k2_params"]
    assert [c["step"] for c in losses] == [1, 2, 3, 4]
    assert losses[0]["ok"] is True, "the first step cannot see the reduction"
    assert [c["ok"] for c in losses[1:]] == [False, False, False], losses
    assert params["ok"] is False and params["diff"] > 10 * params["tol"], params
    assert all("TEST SWITCH DDPTOP_TEST_BREAK_REDUCTION=1" in c["note"] for c in checks)
    logs = [m["msg"] for m in server.messages("log")]
    assert any("equality check k=1 vs k=2 FAILED" in m for m in logs), logs
    assert p.returncode == 0


def test_missing_jax_is_one_line_naming_pip(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ddptop_worker.__main__ import main

    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` now raises ImportError
    monkeypatch.delenv("DDPTOP_SOCKET", raising=False)
    assert main(["jax", "--k", "2"]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "pip install" in lines[0] and "jax is missing" in lines[0]


def test_more_devices_than_jax_sees_is_a_clear_error() -> None:
    with pytest.raises(WorkerError, match="--k 64 but jax sees 4 cpu device.*XLA_FLAGS"):
        run(args_for(64))
    with pytest.raises(WorkerError, match="--platform gpu but jax's devices are cpu.*cuda13"):
        run(args_for(2, platform="gpu"))
