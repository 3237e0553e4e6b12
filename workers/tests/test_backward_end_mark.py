"""The backward-end mark `ddptop attach` takes for its ready-only steps (timing.py,
`BucketTimer.mark_after_finalize`), on a real DDP over a one-rank gloo group in this process:
the mark must come after DDP's finalize_backward waited for every bucket's all-reduce. The test's
hook wraps ddptop's and completes each bucket's future DELAY_S later from a timer thread: only
finalize_backward waits for that, so a mark taken before it cannot be DELAY_S after the last
ready mark, whichever thread the all-reduce's own callback ran on."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddptop_worker.timing import BucketTimer, Clock, exposed_from_ready, timed_allreduce_hook

DELAY_S = 0.05


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ddp() -> Iterator[DDP]:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.Linear(512, 8))
        # ~1 MiB of gradients in 0.25 MiB buckets: several buckets, so several hooks a step
        yield DDP(model, bucket_cap_mb=0.25)
    finally:
        dist.destroy_process_group()


def late_hook(state, bucket):  # type: ignore[no-untyped-def]  # no annotations: DDP checks them
    """ddptop's timing hook, its result handed to DDP DELAY_S after the all-reduce ended."""
    inner = timed_allreduce_hook(state, bucket)
    out: torch.futures.Future[Any] = torch.futures.Future()

    def later(f: torch.futures.Future[Any]) -> None:
        threading.Timer(DELAY_S, lambda: out.set_result(f.value())).start()

    inner.add_done_callback(later)
    return out


def step(model: DDP) -> None:
    model(torch.randn(16, 64)).sum().backward()


def test_the_end_mark_follows_every_buckets_all_reduce(ddp: DDP) -> None:
    timer = BucketTimer(Clock(torch.device("cpu")), ddp.process_group)
    ddp.register_comm_hook(state=timer, hook=late_hook)
    step(ddp)  # iteration 0 (DDP's rebuild), untimed
    timer.recording = True
    for timeline in (False, True):
        t0 = Clock(torch.device("cpu")).mark()
        records = timer.begin_step(timeline, end_mark=True)
        end = timer.step_end
        step(ddp)
        timer.end_step()
        assert timer.end_error is None
        assert records and len(records) >= 2, records
        assert end is not None and len(end) == 1, "one mark, once the backward returned"
        last_ready = max(r.ready for r in records)
        # finalize_backward waited for the last bucket's future, done DELAY_S after its hook:
        # a mark taken before it (a callback queued once, from the hook) would not see that
        assert Clock.ms(last_ready, end[0]) >= DELAY_S * 1000.0 * 0.9
        got = exposed_from_ready(records, t0, end[0])
        assert got is not None and got[1] >= DELAY_S * 1000.0 * 0.9
        if timeline:
            assert all(r.done is not None and r.done <= end[0] for r in records)
        else:
            assert all(r.done is None for r in records), "ready marks only"


def test_no_end_mark_unless_asked_and_none_outside_a_backward(ddp: DDP) -> None:
    timer = BucketTimer(Clock(torch.device("cpu")), ddp.process_group)
    timer.register(ddp)
    step(ddp)
    timer.recording = True
    timer.begin_step(False)
    assert timer.step_end is None
    step(ddp)
    timer.end_step()
    # Outside a backward the engine refuses a final callback: the marks turn off, nothing raises.
    into: list[float] = []
    timer.mark_after_finalize(into)  # type: ignore[arg-type]
    assert into == [] and timer.end_error is not None
    assert timer.begin_step(False, end_mark=True) is not None and timer.step_end is None
