"""Attach with ddptop's NCCL profiler plugin (docs/profiler.md): on NCCL with the plugin loaded,
no ddptop comm hook is installed, DDP's own all-reduce and the script's own comm hook run
untouched, and the worker sends what the plugin's timeline needs (`plan.comm_timing`,
`plan.bucket_bytes`, `step.t_bwd`); on gloo the timing hook stays.

One in-process rank on a one-rank gloo group. "NCCL" is the backend `attach_hooks.backend_of`
reports (patched): the decision and everything after it are the same code as on a GPU, only the
collectives underneath are gloo's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddptop_worker import attach, attach_hooks, protocol


class Recorder:
    """A Client stand-in that keeps what the session sends (validated as the real one would)."""

    enabled = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.phase = "train"
        self.step = 0

    def send(self, mtype: str, **fields: Any) -> None:
        protocol.validate({"v": 1, "type": mtype, "rank": 0, "step": 0, "t": 1.0, **fields}, "worker")
        self.sent.append((mtype, fields))

    def log(self, level: str, msg: str) -> None:
        self.sent.append(("log", {"level": level, "msg": msg}))

    def of(self, mtype: str) -> list[dict[str, Any]]:
        return [f for t, f in self.sent if t == mtype]


def test_the_plugin_times_buckets_only_on_nccl_with_ddptops_plugin() -> None:
    on = {"DDPTOP_NCCL_PLUGIN": "1"}
    assert attach.comm_timing("nccl", on) == "nccl_profiler"
    assert attach.comm_timing("gloo", on) == "comm_hook", "gloo has no NCCL to profile"
    assert attach.comm_timing("nccl", {}) == "comm_hook", "plugin off or a plugin of the user's"
    assert attach.comm_timing("nccl", {"DDPTOP_NCCL_PLUGIN": "0"}) == "comm_hook"
    assert attach.comm_timing(None, on) == "comm_hook", "backend unknown: the hook"


@pytest.fixture
def group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def session(monkeypatch: pytest.MonkeyPatch, backend: str, plugin: bool) -> tuple[attach.Session, Recorder]:
    if plugin:
        monkeypatch.setenv("DDPTOP_NCCL_PLUGIN", "1")
    else:
        monkeypatch.delenv("DDPTOP_NCCL_PLUGIN", raising=False)
    monkeypatch.setenv("DDPTOP_TIME_EVERY", "1")
    monkeypatch.setattr(attach_hooks, "backend_of", lambda ddp: backend)
    s = attach.Session("zero_code")
    rec = Recorder()
    s.client = rec  # type: ignore[assignment]
    s.handles = attach_hooks.install(s)
    s.hooks_on = True
    return s, rec


def train(ddp: DDP, steps: int) -> None:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        ddp(torch.randn(4, 64)).sum().backward()
        opt.step()


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))


def ddptop_hook_in(ddp: DDP) -> bool:
    return any(h is attach_hooks.dispatch_hook for h, _ in getattr(ddp, "_comm_hooks", []))


@pytest.mark.parametrize("own", [False, True], ids=["ddp_default", "own_hook"])
def test_on_nccl_with_the_plugin_no_comm_hook_and_the_scripts_own_runs(
    group: None, monkeypatch: pytest.MonkeyPatch, own: bool
) -> None:
    s, rec = session(monkeypatch, "nccl", plugin=True)
    try:
        t0 = time.monotonic()
        ddp = DDP(model(), bucket_cap_mb=0.01)
        calls: list[int] = []

        # No annotations: DDP compares them with the real GradBucket / Future objects.
        def own_hook(state, bucket):  # type: ignore[no-untyped-def]
            calls.append(bucket.index())
            return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])

        if own:
            ddp.register_comm_hook(None, own_hook)
        train(ddp, 6)
        record = s.record(ddp)
        assert record is not None and record.hook_state is None and record.timer is None
        assert not ddptop_hook_in(ddp), "no ddptop comm hook in DDP's reducer"
        assert bool(calls) == own, "the script's own comm hook ran, untouched"
        assert s.instrument == "full", "the script's own hook no longer lowers attach to steps only"
        plans = rec.of("plan")
        assert plans[0]["comm_timing"] == "nccl_profiler"
        layout = [p["bucket_bytes"] for p in plans if "bucket_bytes" in p]
        assert len(layout) == 1 and sum(layout[0]) == sum(
            p.numel() * p.element_size() for p in ddp.parameters()
        )
        steps = rec.of("step")
        assert steps and all(t0 <= st["t_bwd"] <= time.monotonic() for st in steps)
        assert not rec.of("buckets"), "bucket timing is the plugin's, not the worker's"
    finally:
        s.stop_hooks()
        attach_hooks.set_session(None)


def test_on_gloo_the_timing_hook_stays(group: None, monkeypatch: pytest.MonkeyPatch) -> None:
    s, rec = session(monkeypatch, "gloo", plugin=True)
    try:
        ddp = DDP(model(), bucket_cap_mb=0.01)
        train(ddp, 6)
        assert ddptop_hook_in(ddp), "gloo: ddptop's comm hook times the buckets"
        assert rec.of("plan")[0]["comm_timing"] == "comm_hook"
        assert rec.of("buckets"), "the hook's bucket timelines"
        assert all("t_bwd" not in st for st in rec.of("step"))
    finally:
        s.stop_hooks()
        attach_hooks.set_session(None)
