"""Attach with ddptop's NCCL profiler plugin (docs/profiler.md "Never silently blind", issue 45):
ddptop's comm hook times the buckets until the plugin's exported state says it reports, the
plugin then, and the hook again when it stops; the script's own comm hook runs untouched; the
worker sends what the plugin's timeline needs (`plan.comm_timing`/`comm_why`,
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

from ddptop_worker import attach, attach_hooks, attach_plugin, protocol

import needs


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


@pytest.fixture
def group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class FakePlugin:
    """The plugin's exported state as `attach_plugin.PluginState` reads it, set by the test:
    None while NCCL has not loaded the library."""

    def __init__(self) -> None:
        self.reading: attach_plugin.Reading = None
        self.reads = 0

    def __call__(self) -> attach_plugin.Reading:
        self.reads += 1
        return self.reading


def session(monkeypatch: pytest.MonkeyPatch, backend: str, plugin: FakePlugin | None,
            world: int = 2) -> tuple[attach.Session, Recorder]:
    """An attached rank on the test's one-rank gloo group, rank 0 of `world` as torchrun's
    WORLD_SIZE says; `plugin` set: ddptop put its plugin on the launch (DDPTOP_NCCL_PLUGIN=1)
    and the test says what its exported state reads."""
    monkeypatch.setenv("WORLD_SIZE", str(world))
    if plugin is not None:
        monkeypatch.setenv("DDPTOP_NCCL_PLUGIN", "1")
        monkeypatch.setenv("NCCL_PROFILER_PLUGIN", __file__)  # a file that exists
        monkeypatch.setattr(attach_plugin, "PluginState", lambda path: plugin)
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


def sources(rec: Recorder) -> list[tuple[int, str, str | None]]:
    """(the rank's step when sent, comm_timing, comm_why) of every plan that said a source."""
    out = []
    for t, f in rec.sent:
        if t == "plan" and "comm_timing" in f:
            out.append((len([1 for t2, _ in rec.sent[: rec.sent.index((t, f))] if t2 == "step"]),
                        f["comm_timing"], f.get("comm_why")))
    return out


# ------------------------------------------------------------------ the switch-over, unit level


def test_the_hook_stays_until_the_plugin_reports_and_comes_back_when_it_stops() -> None:
    fake = FakePlugin()
    src = attach_plugin.CommSource(True, "nccl", fake, __file__)
    assert src.source == attach_plugin.HOOK
    src.poll(0)
    assert (src.source, src.why) == ("comm_hook", f"plugin not reporting: NCCL has not loaded it yet ({__file__})")
    src.poll(5)
    assert "NCCL never loaded it" in src.why and "ncclProfiler_v5/v4" in src.why
    fake.reading = (attach_plugin.CONNECTED, "")
    assert src.poll(6) and src.source == "comm_hook", "connected is not confirmed"
    assert src.why == "plugin not reporting: connected, no collective reported yet"
    fake.reading = (attach_plugin.REPORTING, "")
    assert src.poll(7) and (src.source, src.why) == ("nccl_profiler", "")
    assert not src.poll(8), "nothing new: nothing to say"
    fake.reading = (attach_plugin.RECONNECTING, "ddptop stopped reading for 5.0 s")
    assert src.poll(9) and src.source == "comm_hook"
    assert src.why == "plugin not reporting: stalled, reconnecting: ddptop stopped reading for 5.0 s"
    fake.reading = (attach_plugin.REPORTING, "ddptop stopped reading for 5.0 s")
    assert src.poll(10) and src.source == "nccl_profiler"
    fake.reading = (attach_plugin.OFF, "ddptop refused the plugin's reconnect: the run is over")
    assert src.poll(11) and src.source == "comm_hook" and "off: ddptop refused" in src.why
    assert src.switches == 4


def test_without_ddptops_plugin_the_hook_is_the_source_and_the_state_is_never_read() -> None:
    fake = FakePlugin()
    gloo = attach_plugin.CommSource(False, "gloo", fake)
    assert not gloo.poll(3) and fake.reads == 0
    assert (gloo.source, gloo.why) == ("comm_hook", "gloo: no NCCL to profile")
    own = attach_plugin.from_env("nccl", {"NCCL_PROFILER_PLUGIN": "/their/plugin.so"})
    assert not own.expected, "a plugin of the user's own does not report to ddptop"
    tls = attach_plugin.from_env("nccl", {"DDPTOP_NCCL_PLUGIN": "1", "NCCL_PROFILER_PLUGIN": "/nowhere/x.so"})
    assert tls.expected
    tls.poll(0)
    assert tls.why == "plugin not reporting: its file is missing (/nowhere/x.so)"


def test_the_scripts_own_hook_is_untimed_until_the_plugin_reports() -> None:
    fake = FakePlugin()
    fake.reading = (attach_plugin.OFF, "DDPTOP_SOCKET=tls://h:1 is a TLS listener and the plugin speaks no TLS")
    src = attach_plugin.CommSource(True, "nccl", fake, __file__)
    src.own_hook = "fp16_compress_hook"
    src.poll(0)
    assert src.source == "untimed"
    assert src.why == ("the script's own comm hook (fp16_compress_hook) runs; plugin not reporting: off: "
                       "DDPTOP_SOCKET=tls://h:1 is a TLS listener and the plugin speaks no TLS")
    fake.reading = (attach_plugin.REPORTING, "")
    src.poll(1)
    assert src.source == "nccl_profiler"


def built_plugin() -> Path:
    root = Path(__file__).resolve().parents[2]
    for profile in ("debug", "release"):
        p = root / "target" / profile / "libnccl_profiler_ddptop.so"
        if p.is_file():
            return p
    why = "the NCCL profiler plugin is not built (cargo build -p ddptop-nccl-profiler)"
    if needs.on_ci():
        pytest.fail(f"CI is set, so this cannot be skipped: {why}", pytrace=False)
    pytest.skip(why)


def test_the_real_plugins_exported_state_is_read_only_once_loaded() -> None:
    """ctypes against the built .so: RTLD_NOLOAD finds nothing until the library is loaded
    (ddptop never loads it itself), then reads NOT_STARTED: loaded, no NCCL `init` (none here)."""
    path = built_plugin()
    import ctypes
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        # A copy under a new path: a library another test loaded is not this one.
        copy = Path(d) / "libnccl_profiler_ddptop.so"
        shutil.copy(path, copy)
        read = attach_plugin.PluginState(str(copy))
        assert read() is None, "not loaded: nothing read, nothing loaded"
        ctypes.CDLL(str(copy))  # as NCCL's dlopen would
        assert read() == (attach_plugin.NOT_STARTED, "")
        src = attach_plugin.CommSource(True, "nccl", read, str(copy))
        src.poll(0)
        assert (src.source, src.why) == ("comm_hook", "plugin not reporting: loaded, NCCL has not called its init")


# ------------------------------------------------------------------ an attached rank, in process


def test_on_nccl_the_hook_times_until_the_plugin_reports_then_the_plugin_then_the_hook_again(
    group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakePlugin()
    s, rec = session(monkeypatch, "nccl", fake)
    try:
        ddp = DDP(model(), bucket_cap_mb=0.01)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

        def step() -> None:
            opt.zero_grad()
            ddp(torch.randn(4, 64)).sum().backward()
            opt.step()

        for _ in range(6):  # NCCL never loads the plugin: the hook times
            step()
        assert ddptop_hook_in(ddp), "the fallback hook is in DDP's reducer"
        fake.reading = (attach_plugin.REPORTING, "")
        for _ in range(6):  # read at step 7's end: the plugin times steps 8-13
            step()
        fake.reading = (attach_plugin.RECONNECTING, "ddptop stopped reading for 5.0 s")
        for _ in range(6):  # read at step 13's end: the hook again from step 14
            step()
        s.flush(force=True)
        said = [(n, t) for n, t, _ in sources(rec)]
        assert said[0] == (0, "comm_hook") and ("nccl_profiler" in [t for _, t in said])
        whys = [w for _, t, w in sources(rec) if t == "comm_hook"]
        assert "plugin not reporting: NCCL has not loaded it yet" in whys[0]
        assert whys[-1] == "plugin not reporting: stalled, reconnecting: ddptop stopped reading for 5.0 s"
        # No step is timed twice: the hook's bucket timelines only outside steps 8-13, and the
        # layout the plugin's timeline needs came with the switch (or before it).
        timed = sorted(b["step"] for b in rec.of("buckets"))
        assert [n for n in timed if n <= 7] == [4, 5, 6, 7], timed  # from DDP's rebuild on
        assert not [n for n in timed if 8 <= n <= 13], timed
        assert [n for n in timed if n >= 14] == [14, 15, 16, 17, 18], timed
        assert any("bucket_bytes" in p for p in rec.of("plan"))
        assert all("t_bwd" in st for st in rec.of("step")), "the plugin's step cut on every step"
        logs = [f["msg"] for f in rec.of("log")]
        assert "communication from step 8: NCCL profiler plugin" in logs
        assert any(m.startswith("communication from step 14: Python comm hook (plugin not "
                                "reporting: stalled") for m in logs), logs
        assert s.instrument == "full"
    finally:
        s.stop_hooks()
        attach_hooks.set_session(None)


def test_a_plugin_reporting_before_the_first_forward_leaves_ddps_allreduce_alone(
    group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DDP's constructor broadcast made NCCL report already: no ddptop hook in the reducer
    unless the plugin stops; then the hook is registered at the next forward."""
    fake = FakePlugin()
    fake.reading = (attach_plugin.REPORTING, "")
    s, rec = session(monkeypatch, "nccl", fake)
    try:
        ddp = DDP(model(), bucket_cap_mb=0.01)
        train(ddp, 4)
        assert not ddptop_hook_in(ddp) and not rec.of("buckets")
        assert sources(rec)[0][1:] == ("nccl_profiler", None)
        fake.reading = (attach_plugin.OFF, "ddptop closed the connection")
        train(ddp, 4)
        s.flush(force=True)
        assert ddptop_hook_in(ddp), "registered late, when the plugin stopped"
        assert rec.of("buckets"), "and timing the buckets again"
    finally:
        s.stop_hooks()
        attach_hooks.set_session(None)


@pytest.mark.parametrize("reports", [False, True], ids=["plugin_silent", "plugin_reports"])
def test_the_scripts_own_comm_hook_runs_untouched_with_the_plugin_expected(
    group: None, monkeypatch: pytest.MonkeyPatch, reports: bool
) -> None:
    fake = FakePlugin()
    if reports:
        fake.reading = (attach_plugin.REPORTING, "")
    s, rec = session(monkeypatch, "nccl", fake)
    try:
        ddp = DDP(model(), bucket_cap_mb=0.01)
        calls: list[int] = []

        # No annotations: DDP compares them with the real GradBucket / Future objects.
        def own_hook(state, bucket):  # type: ignore[no-untyped-def]
            calls.append(bucket.index())
            return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])

        ddp.register_comm_hook(None, own_hook)
        train(ddp, 6)
        assert not ddptop_hook_in(ddp), "no ddptop comm hook in DDP's reducer"
        assert calls, "the script's own comm hook ran, untouched"
        assert s.instrument == "full" and not rec.of("buckets")
        last = sources(rec)[-1]
        if reports:
            assert last[1:] == ("nccl_profiler", None)
        else:
            assert last[1] == "untimed" and last[2] is not None
            assert last[2].startswith("the script's own comm hook (")
    finally:
        s.stop_hooks()
        attach_hooks.set_session(None)


def test_on_gloo_the_timing_hook_stays(group: None, monkeypatch: pytest.MonkeyPatch) -> None:
    s, rec = session(monkeypatch, "gloo", None)
    try:
        ddp = DDP(model(), bucket_cap_mb=0.01)
        train(ddp, 6)
        assert ddptop_hook_in(ddp), "gloo: ddptop's comm hook times the buckets"
        assert rec.of("plan")[0]["comm_timing"] == "comm_hook"
        assert rec.of("plan")[0]["comm_why"] == "gloo: no NCCL to profile"
        assert rec.of("buckets"), "the hook's bucket timelines"
        assert all("t_bwd" not in st for st in rec.of("step"))
    finally:
        s.stop_hooks()
        attach_hooks.set_session(None)


def test_at_k1_with_the_plugin_expected_no_hook_and_the_run_says_why(
    group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rank: NCCL reports nothing for a one-rank communicator and there is nothing to
    communicate, so no ddptop hook costs the steps; the source says so."""
    fake = FakePlugin()
    fake.reading = (attach_plugin.CONNECTED, "")
    s, rec = session(monkeypatch, "nccl", fake, world=1)
    try:
        ddp = DDP(model(), bucket_cap_mb=0.01)
        train(ddp, 6)
        assert not ddptop_hook_in(ddp) and not rec.of("buckets")
        assert {src[1:] for src in sources(rec)} == {("untimed", attach_plugin.SINGLE_RANK_WHY)}
    finally:
        s.stop_hooks()
        attach_hooks.set_session(None)
