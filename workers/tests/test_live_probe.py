"""The live probe inside `train`, in-process on a one-rank gloo group: the steps in flight are
synchronized before the clock of the time left out of the epoch starts, a session warms up past
DDP's logger samples, and DDP's sampling is off while probing and restored after."""

from __future__ import annotations

import pytest
import torch

from ddptop_worker import models, probe, train
from ddptop_worker.data import Data, DataConfig
from ddptop_worker.runtime import Runtime
from ddptop_worker.timing import BucketTimer, Clock


def test_live_probe_synchronizes_before_its_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPTOP_SOCKET", raising=False)
    monkeypatch.delenv("DDPTOP_INJECT", raising=False)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    s = train.TrainSettings(model="tiny", batch=4, data=DataConfig("synthetic", "device", None, 16, 0),
                            backend="gloo", probe_block_steps=2, probe_warmup_steps=1)
    with Runtime("train", "gloo") as rt:
        data = Data(s.data, batch=4, rank=0, world_size=1, device=rt.device)
        net = models.build_model("tiny", rt.device)
        ddp = rt.wrap_ddp(net, bucket_cap_mb=1.0)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        clock = Clock(rt.device)
        tr = train.Trainer(s, rt, rt.client, data, net, ddp, opt, clock, 4)
        tr.btimer = BucketTimer(clock)
        tr.btimer.register(ddp)
        x, y = next(iter(data.epoch(0)))
        for _ in range(3):  # three training steps: DDP's logger is still in its first ten
            tr.bare_step(x, y)
            tr.synced_iterations += 1
            tr.global_step += 1

        events: list[str] = []
        real_sync, real_clock = rt.synchronize, train.time.perf_counter
        monkeypatch.setattr(rt, "synchronize", lambda: (events.append("sync"), real_sync())[1])
        monkeypatch.setattr(train.time, "perf_counter", lambda: (events.append("clock"), real_clock())[1])
        rates: list[int] = []
        real_rate = probe.set_logger_sample_rate
        monkeypatch.setattr(train, "set_logger_sample_rate",
                            lambda d, r: (rates.append(r), real_rate(d, r))[1])
        st = train.EpochStats(1, warmup=False)
        tr.live_probe(x, y, st)
        # (host marks read the same clock in between) in-flight steps stay on the epoch's time
        assert events[:2] == ["sync", "clock"] and events[-2:] == ["sync", "clock"]
        assert events.count("sync") == 2
        assert st.excluded_s > 0
        # the session's synced warm-up takes DDP's samples up to iteration 10: 11 - 3 = 8 steps
        assert tr.synced_iterations == 3 + 8 + 2
        assert tr.extra_steps == 8 + 1 + 2 + 2 and tr.global_step == 3 + tr.extra_steps
        assert probe.last_sampled_iteration(ddp) == 10
        assert rates == [probe.NO_SAMPLING] and tr.probing
        tr.live_probe(x, y, st)  # the same session: no second warm-up
        assert tr.extra_steps == 13 + 4
        tr.end_probe()
        assert rates == [probe.NO_SAMPLING, probe.DEFAULT_SAMPLE_RATE] and not tr.probing
