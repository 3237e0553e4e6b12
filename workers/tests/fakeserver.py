"""A fake ddptop end for tests: a Unix-socket server that checks hello, answers welcome (or an
error), records every line per rank, validates it against the protocol, and can send commands."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddptop_worker import protocol

TOKEN = "ab" * 32
RUN_ID = "r20261130-011500-test"


def last_types(msgs: list[dict[str, Any]], n: int = 2) -> list[str]:
    """The types of a rank's last `n` lines, heartbeats left out: the beat thread runs until
    `close()`, so a beat may fall between `result` and `bye` when the teardown between them
    (destroy_process_group, a barrier) takes longer than one interval on a busy machine."""
    return [m["type"] for m in msgs if m["type"] != "heartbeat"][-n:]


@dataclass
class Conn:
    sock: socket.socket
    hello: dict[str, Any] | None = None
    lines: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False


class FakeDdptop:
    def __init__(
        self, *, reject_with: str | None = None, heartbeat_s: float = 1.0, tcp: bool = False
    ) -> None:
        self.dir = tempfile.mkdtemp(prefix="ddptop-test-")
        self.path = os.path.join(self.dir, "sock")
        self.tcp = tcp
        self.reject_with = reject_with
        self.heartbeat_s = heartbeat_s
        self.conns: list[Conn] = []
        self.bad: list[tuple[str, str]] = []  # (raw line, why) for lines that failed validation
        self._lock = threading.Lock()
        if tcp:  # a rank on another node: DDPTOP_SOCKET=tcp://HOST:PORT
            self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._srv.bind(("127.0.0.1", 0))
            self.path = f"tcp://127.0.0.1:{self._srv.getsockname()[1]}"
        else:
            self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._srv.bind(self.path)
        self._srv.listen(16)
        self._stopping = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def env(self, **extra: str) -> dict[str, str]:
        e = dict(os.environ)
        e.update(
            DDPTOP_SOCKET=self.path,
            DDPTOP_TOKEN=TOKEN,
            DDPTOP_RUN_ID=RUN_ID,
            DDPTOP_VALIDATE="1",
            PYTHONUNBUFFERED="1",
        )
        e.update(extra)
        return e

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                s, _ = self._srv.accept()
            except OSError:
                return
            c = Conn(s)
            with self._lock:
                self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _send(self, c: Conn, msg: dict[str, Any]) -> None:
        try:
            c.sock.sendall(protocol.encode(msg))
        except OSError:
            pass

    def _serve(self, c: Conn) -> None:
        f = c.sock.makefile("rb")
        first = True
        try:
            for raw in f:
                line = raw.rstrip(b"\n")
                try:
                    msg = protocol.parse_line(line, "worker")
                except protocol.ProtocolError as e:
                    with self._lock:
                        self.bad.append((line.decode("utf-8", "replace"), str(e)))
                    if first:
                        self._send(c, {"v": 1, "type": "error", "code": "expected_hello", "msg": str(e)})
                        break
                    continue
                if first:
                    first = False
                    if msg["type"] != "hello" or msg["token"] != TOKEN or self.reject_with:
                        code = self.reject_with or ("bad_token" if msg["type"] == "hello" else "expected_hello")
                        self._send(c, {"v": 1, "type": "error", "code": code, "msg": "rejected by test"})
                        with self._lock:
                            c.hello = msg
                        break
                    with self._lock:
                        c.hello = msg
                    self._send(
                        c,
                        {"v": 1, "type": "welcome", "run_id": RUN_ID, "rank": msg["rank"], "heartbeat_s": self.heartbeat_s},
                    )
                    continue
                with self._lock:
                    c.lines.append(msg)
        except OSError:
            pass
        finally:
            c.closed = True
            try:
                c.sock.close()
            except OSError:
                pass

    # ------------------------------------------------------------------ queries

    def messages(self, mtype: str | None = None, rank: int | None = None) -> list[dict[str, Any]]:
        with self._lock:
            out = [m for c in self.conns for m in c.lines]
        return [
            m for m in out if (mtype is None or m["type"] == mtype) and (rank is None or m["rank"] == rank)
        ]

    def hellos(self) -> list[dict[str, Any]]:
        with self._lock:
            return [c.hello for c in self.conns if c.hello is not None]

    def wait_for(self, pred: Callable[[], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.02)
        return pred()

    def command(self, cmd: str, rank: int | None = None) -> int:
        """Send a command to every connected rank (or one); returns how many got it."""
        n = 0
        with self._lock:
            targets = [c for c in self.conns if c.hello is not None and not c.closed]
        for c in targets:
            assert c.hello is not None
            if rank is None or c.hello["rank"] == rank:
                self._send(c, {"v": 1, "type": "command", "cmd": cmd})
                n += 1
        return n

    def close_all(self) -> None:
        with self._lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        self._stopping = True
        try:
            self._srv.close()
        except OSError:
            pass
        self.close_all()
        try:
            if not self.tcp:
                os.unlink(self.path)
            os.rmdir(self.dir)
        except OSError:
            pass
