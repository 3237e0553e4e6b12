"""The client against a fake ddptop: handshake, heartbeats, commands, no-op mode, dead-man."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from conftest import WORKERS
from fakeserver import RUN_ID, TOKEN, FakeDdptop

from ddptop_worker import protocol
from ddptop_worker.client import Client, HandshakeError, write_line

VERSIONS: dict[str, str | None] = {"torch": "2.11.0+test", "nccl": None, "cuda": None}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDdptop]:
    srv = FakeDdptop(heartbeat_s=0.1)
    monkeypatch.setenv("DDPTOP_SOCKET", srv.path)
    monkeypatch.setenv("DDPTOP_TOKEN", TOKEN)
    monkeypatch.setenv("DDPTOP_RUN_ID", RUN_ID)
    yield srv
    srv.stop()


def connect(**kw: object) -> Client:
    return Client.from_env(
        worker="train",
        backend="gloo",
        device="cpu",
        rank=1,
        world_size=2,
        local_rank=1,
        versions=VERSIONS,
        validate=True,
        deadman=False,  # never SIGTERM the pytest process; the real switch is tested below
        **kw,  # type: ignore[arg-type]
    )


def test_handshake_sends_hello_and_awaits_welcome(server: FakeDdptop) -> None:
    c = connect()
    try:
        assert c.enabled
        assert server.wait_for(lambda: len(server.hellos()) == 1)
        hello = server.hellos()[0]
        assert protocol.validate(hello, "worker") == "hello"
        assert hello["token"] == TOKEN and hello["run_id"] == RUN_ID
        assert (hello["rank"], hello["world_size"], hello["local_rank"]) == (1, 2, 1)
        assert hello["pid"] == os.getpid()
        assert hello["backend"] == "gloo" and hello["worker"] == "train"
        assert hello["device"] == "cpu" and hello["torch"] == "2.11.0+test" and hello["nccl"] is None
        assert abs(hello["t"] - time.monotonic()) < 60
        assert c.heartbeat_s == pytest.approx(0.1)  # taken from welcome
    finally:
        c.close()
    assert server.wait_for(lambda: [m["reason"] for m in server.messages("bye")] == ["done"])
    assert not c.disconnected


def test_tcp_for_ranks_on_other_nodes_with_the_node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    srv = FakeDdptop(heartbeat_s=0.1, tcp=True)
    monkeypatch.setenv("DDPTOP_SOCKET", srv.path)
    monkeypatch.setenv("DDPTOP_TOKEN", TOKEN)
    monkeypatch.setenv("DDPTOP_RUN_ID", RUN_ID)
    monkeypatch.setenv("DDPTOP_NODE", "node-b")
    try:
        c = connect()
        try:
            assert srv.wait_for(lambda: len(srv.hellos()) == 1)
            hello = srv.hellos()[0]
            assert protocol.validate(hello, "worker") == "hello"
            assert hello["node"] == "node-b"
        finally:
            c.close()
        assert srv.wait_for(lambda: [m["reason"] for m in srv.messages("bye")] == ["done"])
    finally:
        srv.stop()


def test_tcp_addresses_parse() -> None:
    from ddptop_worker.client import parse_tcp

    assert parse_tcp("/run/ddptop-1/s.sock") is None
    assert parse_tcp("tcp://10.0.0.1:4000") == ("10.0.0.1", 4000)
    assert parse_tcp("tcp://[fe80::1]:4000") == ("fe80::1", 4000)
    with pytest.raises(ValueError):
        parse_tcp("tcp://nohost")


def test_error_reply_raises_with_code(monkeypatch: pytest.MonkeyPatch) -> None:
    srv = FakeDdptop(reject_with="bad_token")
    monkeypatch.setenv("DDPTOP_SOCKET", srv.path)
    monkeypatch.setenv("DDPTOP_TOKEN", "00" * 32)
    monkeypatch.setenv("DDPTOP_RUN_ID", RUN_ID)
    try:
        with pytest.raises(HandshakeError, match="bad_token") as ei:
            connect()
        assert ei.value.code == "bad_token"
    finally:
        srv.stop()


def test_connect_failure_is_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTOP_SOCKET", "/nonexistent/ddptop.sock")
    with pytest.raises(HandshakeError, match="cannot connect"):
        connect()


def test_heartbeats_carry_step_and_phase(server: FakeDdptop) -> None:
    c = connect()
    try:
        c.step = 42
        c.phase = "train"
        assert server.wait_for(lambda: len(server.messages("heartbeat")) >= 3, timeout=5)
        hb = server.messages("heartbeat")[-1]
        assert hb["rank"] == 1 and hb["step"] == 42 and hb["phase"] == "train"
    finally:
        c.close()


def test_entering_a_phase_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    srv = FakeDdptop(heartbeat_s=60.0)  # the periodic beat would come a minute later
    monkeypatch.setenv("DDPTOP_SOCKET", srv.path)
    monkeypatch.setenv("DDPTOP_TOKEN", TOKEN)
    monkeypatch.setenv("DDPTOP_RUN_ID", RUN_ID)
    c = connect()
    try:
        c.phase = "ddp_init"
        c.phase = "ddp_init"  # no change, no message
        c.phase = "train"
        assert srv.wait_for(lambda: len(srv.messages("heartbeat")) >= 3, timeout=5)
        time.sleep(0.2)
        beats = srv.messages("heartbeat")
        # One periodic beat at once (the CPU baseline), then one beat per phase entered.
        periodic = [m for m in beats if "cpu_s" in m]
        assert len(periodic) == 1, beats
        assert [m["phase"] for m in beats if "cpu_s" not in m] == ["ddp_init", "train"]
    finally:
        c.close()
    # The fake server reads on its own thread: wait for the bye before judging the order.
    assert srv.wait_for(lambda: any(m["type"] == "bye" for m in srv.messages()), timeout=5)
    assert [m["type"] for m in srv.messages()][-1] == "bye"  # closing sends no "done" beat
    srv.stop()


def test_hello_extra_fields_are_merged(server: FakeDdptop) -> None:
    c = connect(hello_extra=protocol.hello_extra(devices=2, instrument="steps_only"))
    try:
        assert server.wait_for(lambda: len(server.hellos()) == 1)
        hello = server.hellos()[0]
        assert hello["devices"] == 2 and hello["instrument"] == "steps_only"
        assert hello["worker"] == "train"
    finally:
        c.close()


class _Recorder:
    """A text stream without a file descriptor that records each write call."""

    encoding = "utf-8"

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return len(s)

    def flush(self) -> None:
        pass


def test_write_line_is_one_write_call(tmp_path: object) -> None:
    rec = _Recorder()
    write_line("rank 0: 178.6 samples/s", rec)  # type: ignore[arg-type]
    assert rec.writes == ["rank 0: 178.6 samples/s\n"]
    # Through a real file descriptor: two processes appending lines never split each other's.
    path = os.path.join(str(tmp_path), "out.txt")
    script = (
        "import sys\n"
        "from ddptop_worker.client import write_line\n"
        "f = open(sys.argv[1], 'a', buffering=1)\n"
        "for i in range(300): write_line(sys.argv[2] * 200 + f' {i}', f)\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, path, ch], env=dict(os.environ, PYTHONPATH=WORKERS))
        for ch in "ab"
    ]
    for p in procs:
        assert p.wait(timeout=60) == 0
    lines = open(path).read().splitlines()
    assert len(lines) == 600
    assert all(ln[:200] in ("a" * 200, "b" * 200) and ln[200:].strip().isdigit() for ln in lines)


def test_send_adds_common_fields_and_is_thread_safe(server: FakeDdptop) -> None:
    import threading

    c = connect()
    try:
        c.step = 3

        def spam(i: int) -> None:
            for j in range(50):
                c.send("log", level="debug", msg=f"thread {i} line {j} " + "x" * 200)

        threads = [threading.Thread(target=spam, args=(i,)) for i in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert server.wait_for(lambda: len(server.messages("log")) == 200)
        m = server.messages("log")[0]
        assert m["v"] == 1 and m["rank"] == 1 and m["step"] == 3 and isinstance(m["t"], float)
        with pytest.raises(protocol.ProtocolError):
            c.send("step", fwd_ms=1.0)  # validate mode: missing fields are caught before sending
    finally:
        c.close()
    assert server.bad == []


def test_send_many_is_one_write_in_order(server: FakeDdptop) -> None:
    """A step and its buckets go out in one write: ddptop takes them in one read (issue 30)."""
    c = connect()
    try:
        writes: list[bytes] = []

        class Spy:
            def __init__(self, sock: object) -> None:
                self.sock = sock

            def sendall(self, data: bytes) -> None:
                writes.append(data)
                self.sock.sendall(data)  # type: ignore[attr-defined]

            def __getattr__(self, name: str) -> object:
                return getattr(self.sock, name)

        c._sock = Spy(c._sock)  # type: ignore[assignment]
        c.send_many([("log", {"level": "info", "msg": "first"}), ("log", {"level": "info", "msg": "second"})])
        assert len(writes) == 1 and writes[0].count(b"\n") == 2
        assert server.wait_for(lambda: len(server.messages("log")) == 2)
        assert [m["msg"] for m in server.messages("log")] == ["first", "second"]
        c.send_many([])
        assert len(writes) == 1
    finally:
        c.close()
    assert server.bad == []


def test_commands_are_received(server: FakeDdptop, tmp_path: object) -> None:
    c = connect()
    c.fr_dir = str(tmp_path)
    try:
        assert not c.probe_requested and not c.stop_requested
        assert server.command("probe_on") == 1
        assert server.wait_for(lambda: c.probe_requested, timeout=5)
        server.command("probe_off")
        assert server.wait_for(lambda: not c.probe_requested, timeout=5)
        server.command("dump_fr")
        path = os.path.join(str(tmp_path), "fr_dump_rank1.pkl")
        assert server.wait_for(lambda: os.path.exists(path), timeout=10)
        assert os.path.getsize(path) > 0
        server.command("stop")
        assert server.wait_for(lambda: c.stop_requested, timeout=5)
        assert c.commands == ["probe_on", "probe_off", "dump_fr", "stop"]
        assert any("flight recorder dumped" in m["msg"] for m in server.messages("log"))
    finally:
        c.close("stopped")
    assert server.wait_for(lambda: [m["reason"] for m in server.messages("bye")] == ["stopped"])


def test_noop_without_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPTOP_SOCKET", raising=False)
    c = Client.from_env(worker="probe", backend="gloo", device="cpu", rank=0, world_size=1)
    assert not c.enabled
    c.send("log", level="info", msg="nobody listens")
    c.log("info", "still nobody")
    assert not c.probe_requested and not c.stop_requested
    c.close()
    c.close()


DEADMAN_SCRIPT = r"""
import signal, sys, time
from ddptop_worker.client import Client
if sys.argv[1] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
c = Client.from_env(worker="train", backend="gloo", device="cpu", rank=0, world_size=1,
                    versions={"torch": None, "nccl": None, "cuda": None})
print("connected", flush=True)
time.sleep(60)
print("still alive", flush=True)
"""


@pytest.mark.timing
@pytest.mark.parametrize("mode,tcp", [("default", False), ("ignore-term", False), ("default", True)])
def test_deadman_switch_exits_promptly(mode: str, tcp: bool) -> None:
    """Also over TCP: a rank on another node whose connection to ddptop drops ends itself."""
    srv = FakeDdptop(tcp=tcp)
    try:
        env = srv.env(PYTHONPATH=WORKERS)
        p = subprocess.Popen(
            [sys.executable, "-c", DEADMAN_SCRIPT, mode],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "connected"
            assert srv.wait_for(lambda: len(srv.hellos()) == 1)
            t0 = time.monotonic()
            srv.close_all()
            rc = p.wait(timeout=5)
            elapsed = time.monotonic() - t0
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert elapsed < 5
        if mode == "default":
            assert rc == -signal.SIGTERM
        else:
            assert rc == 70  # SIGTERM ignored: the os._exit fallback
        assert "dead-man" in (p.stderr.read() if p.stderr else "")
    finally:
        srv.stop()


def test_close_does_not_trigger_deadman() -> None:
    srv = FakeDdptop()
    script = (
        "from ddptop_worker.client import Client\n"
        "c = Client.from_env(worker='train', backend='gloo', device='cpu', rank=0, world_size=1)\n"
        "c.close('done')\n"
        "import time; time.sleep(0.5)\n"
        "print('clean exit', flush=True)\n"
    )
    try:
        p = subprocess.run(
            [sys.executable, "-c", script],
            env=srv.env(PYTHONPATH=WORKERS),
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert p.returncode == 0, p.stderr
        assert "clean exit" in p.stdout
        # At most the immediate first heartbeat before it; bye is the last line.
        types = [m["type"] for m in srv.messages()]
        assert types[-1] == "bye" and set(types[:-1]) <= {"heartbeat"}, types
    finally:
        srv.stop()
