"""Connection from one worker rank to ddptop over its Unix socket, or over TCP for a rank on
another node of a multi-node run (`DDPTOP_SOCKET=tcp://HOST:PORT`, or `tls://HOST:PORT` with the
listener's certificate fingerprint in `DDPTOP_TLS_FP`; docs/protocol.md).

Standard library only (torch is imported lazily, inside the `dump_fr` handler). Without
`DDPTOP_SOCKET` in the environment the client is disabled and every method is a no-op, so the
worker scripts also run bare.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import signal
import socket
import ssl
import sys
import threading
import time
from types import TracebackType
from typing import Any, Final, TextIO

from . import inflight, protocol

DEADMAN_EXIT_CODE: Final = 70
DEADMAN_GRACE_S: Final = 2.0
HANDSHAKE_TIMEOUT_S: Final = 30.0


class HandshakeError(RuntimeError):
    """ddptop refused the connection (it answered `error`) or the handshake failed."""

    def __init__(self, code: str, msg: str) -> None:
        if code in protocol.ERROR_CODES:
            super().__init__(f"ddptop refused the connection: {code}: {msg}")
        else:
            super().__init__(f"handshake with ddptop failed ({code}): {msg}")
        self.code = code


def parse_tcp(address: str) -> tuple[str, int] | None:
    """`tcp://HOST:PORT` or `tls://HOST:PORT` (HOST may be `[v6]`) → (host, port); anything
    else → None (a path)."""
    scheme = address[:6]
    if scheme not in ("tcp://", "tls://"):
        return None
    rest = address[len(scheme) :]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"DDPTOP_SOCKET={address} is not {scheme}HOST:PORT")
    return host.strip("[]"), int(port)


class FingerprintMismatch(OSError):
    """The TLS listener's certificate is not the one ddptop named: refused."""


def wrap_tls(sock: socket.socket, fingerprint: str) -> ssl.SSLSocket:
    """TLS over `sock`, accepting only the certificate whose DER encoding has SHA-256
    `fingerprint` (hex). No CA and no host name: ddptop made the certificate for this run and
    passed its fingerprint with the token, so the pin is the whole check."""
    fp = fingerprint.strip().lower()
    if len(fp) != 64 or any(c not in "0123456789abcdef" for c in fp):
        raise ValueError("DDPTOP_TLS_FP is not a SHA-256 fingerprint (64 hex characters)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the pin below replaces the CA check
    tls = ctx.wrap_socket(sock, server_hostname="ddptop")
    der = tls.getpeercert(binary_form=True) or b""
    seen = hashlib.sha256(der).hexdigest()
    if not hmac.compare_digest(seen, fp):
        tls.close()
        raise FingerprintMismatch(
            f"the TLS certificate at ddptop's address has fingerprint {seen[:16]}…, not the one "
            "ddptop passed: refusing to connect"
        )
    return tls


def connect(address: str) -> socket.socket:
    """Connect to ddptop: a Unix socket path, or `tcp://HOST:PORT` / `tls://HOST:PORT` for a
    rank on another node (multi-node runs). Keepalive on TCP, so a vanished ddptop host ends the
    connection and the dead-man switch fires instead of the rank running on unsupervised."""
    tcp = parse_tcp(address)
    if tcp is None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            sock.connect(address)
        except BaseException:
            sock.close()
            raise
        return sock
    sock = socket.create_connection(tcp, timeout=HANDSHAKE_TIMEOUT_S)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, val in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, opt):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), val)
    except OSError:
        pass
    if address.startswith("tls://"):
        fp = os.environ.get("DDPTOP_TLS_FP", "")
        if not fp:
            sock.close()
            raise ValueError("DDPTOP_SOCKET is tls:// but DDPTOP_TLS_FP is not set")
        try:
            return wrap_tls(sock, fp)
        except BaseException:
            sock.close()
            raise
    return sock


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def write_line(text: str, stream: TextIO | None = None) -> None:
    """Write one line (the newline added) with ONE write call.

    `print()` issues the text and its newline as separate writes, so with unbuffered output two
    ranks sharing torchrun's pipe interleave mid-line (`…batch 256rank 0: 178.6…`). A pipe write
    of at most PIPE_BUF (4096) bytes is atomic, so whole lines up to that size never mix."""
    out = stream if stream is not None else sys.stdout
    data = text if text.endswith("\n") else text + "\n"
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):  # a replaced stream (tests, notebooks)
        out.write(data)
        out.flush()
        return
    out.flush()  # anything buffered earlier goes first
    raw = data.encode(getattr(out, "encoding", None) or "utf-8", "replace")
    while raw:
        n = os.write(fd, raw)
        raw = raw[n:]


def torch_versions() -> dict[str, str | None]:
    """torch / NCCL / CUDA versions if torch is already imported (never imports it)."""
    out: dict[str, str | None] = {"torch": None, "nccl": None, "cuda": None}
    torch: Any = sys.modules.get("torch")
    if torch is None:
        return out
    out["torch"] = str(getattr(torch, "__version__", None) or "") or None
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    out["cuda"] = str(cuda) if cuda else None
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - versions are best effort
        pass
    return out


def hello_message(
    *,
    token: str,
    run_id: str,
    rank: int,
    world_size: int,
    local_rank: int,
    device: str,
    backend: str,
    worker: str,
    versions: dict[str, str | None],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The first line of every connection (docs/protocol.md `hello`); `extra` holds the optional
    fields (`devices`, `instrument`, `node`; see protocol.hello_extra)."""
    msg = {
        "v": protocol.VERSION,
        "type": "hello",
        "token": token,
        "run_id": run_id,
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "device": device,
        "backend": backend,
        "worker": worker,
        "torch": versions.get("torch"),
        "nccl": versions.get("nccl"),
        "cuda": versions.get("cuda"),
        "t": time.monotonic(),
    }
    if extra:
        msg.update(extra)
    return msg


class Client:
    """One rank's connection to ddptop. Thread-safe `send`; heartbeat and reader threads."""

    def __init__(
        self,
        sock: socket.socket | None,
        *,
        rank: int = 0,
        token: str = "",
        run_id: str = "",
        validate: bool | None = None,
        deadman: bool = True,
    ) -> None:
        self._sock = sock
        self.deadman = deadman  # exit the process when ddptop's end closes (off only in tests)
        self.rank = rank
        self.token = token
        self.run_id = run_id
        self.validate = (
            validate if validate is not None else os.environ.get("DDPTOP_VALIDATE", "") == "1"
        )
        self.step = 0
        self._phase = "init"
        self._silent = False
        self.heartbeat_s = 1.0
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._probe_requested = False
        self._stop_requested = False
        self._closing = False
        self._closed = False
        self._stop_threads = threading.Event()
        self._threads: list[threading.Thread] = []
        self.commands: list[str] = []  # every command received, in order (for tests and logs)
        self.fr_dir = os.environ.get("DDPTOP_FR_DIR")
        self._rfile: io.BufferedReader | None = None
        self.disconnected = False  # ddptop's end closed while we were still running

    # ------------------------------------------------------------------ construction

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    @classmethod
    def disabled(cls) -> Client:
        return cls(None)

    @classmethod
    def from_env(
        cls,
        *,
        worker: str,
        backend: str,
        device: str,
        rank: int | None = None,
        world_size: int | None = None,
        local_rank: int | None = None,
        versions: dict[str, str | None] | None = None,
        validate: bool | None = None,
        start_threads: bool = True,
        deadman: bool = True,
        hello_extra: dict[str, Any] | None = None,
    ) -> Client:
        """Connect to `$DDPTOP_SOCKET`, send hello, wait for welcome; a no-op client if unset.

        rank / world_size / local_rank default to torchrun's RANK / WORLD_SIZE / LOCAL_RANK.
        `hello_extra`: optional hello fields merged in (build them with protocol.hello_extra).
        """
        path = os.environ.get("DDPTOP_SOCKET")
        rank = rank if rank is not None else _env_int("RANK", 0)
        if not path:
            c = cls(None, rank=rank)
            return c
        world_size = world_size if world_size is not None else _env_int("WORLD_SIZE", 1)
        local_rank = local_rank if local_rank is not None else _env_int("LOCAL_RANK", 0)
        token = os.environ.get("DDPTOP_TOKEN", "")
        run_id = os.environ.get("DDPTOP_RUN_ID", "")
        v = versions if versions is not None else torch_versions()
        try:
            sock = connect(path)
        except (OSError, ValueError) as e:
            raise HandshakeError("connect", f"cannot connect to DDPTOP_SOCKET={path}: {e}") from e
        try:
            c = cls(
                sock, rank=rank, token=token, run_id=run_id, validate=validate, deadman=deadman
            )
            node = os.environ.get("DDPTOP_NODE")
            if node and not (hello_extra or {}).get("node"):
                hello_extra = {**(hello_extra or {}), "node": node}
            hello = hello_message(
                token=token,
                run_id=run_id,
                rank=rank,
                world_size=world_size,
                local_rank=local_rank,
                device=device,
                backend=backend,
                worker=worker,
                versions=v,
                extra=hello_extra,
            )
            c._write([hello])
            c._await_welcome()
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        if start_threads:
            c.start()
        return c

    def _await_welcome(self) -> None:
        assert self._sock is not None
        self._rfile = self._sock.makefile("rb")
        line = self._rfile.readline(protocol.MAX_LINE_BYTES + 2)
        if not line:
            raise HandshakeError("closed", "ddptop closed the connection before its welcome")
        try:
            msg = protocol.parse_line(line.rstrip(b"\n"), "ddptop")
        except protocol.ProtocolError as e:
            raise HandshakeError("bad_reply", f"ddptop's reply to hello is invalid: {e}") from None
        if msg["type"] == "error":
            raise HandshakeError(str(msg["code"]), str(msg["msg"]))
        if msg["type"] != "welcome":
            raise HandshakeError("bad_reply", f"expected welcome, got {msg['type']}")
        hb = msg.get("heartbeat_s")
        if isinstance(hb, (int, float)) and hb > 0:
            self.heartbeat_s = float(hb)

    def start(self) -> None:
        """Start the heartbeat and reader daemon threads."""
        if self._sock is None or self._threads:
            return
        for target, name in ((self._heartbeat_loop, "ddptop-heartbeat"), (self._reader_loop, "ddptop-reader")):
            th = threading.Thread(target=target, name=name, daemon=True)
            th.start()
            self._threads.append(th)

    # ------------------------------------------------------------------ phase

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        """Entering a phase is reported at once (a heartbeat), not at the next beat: ddptop's
        watchdog applies a different threshold per phase (e.g. `ddp_init`, whose constructor
        broadcast is where the book's deadlock blocks)."""
        changed = value != self._phase
        self._phase = value
        if changed and self._threads and not self._silent and not self._closing:
            self.send("heartbeat", phase=value)

    # ------------------------------------------------------------------ commands

    @property
    def probe_requested(self) -> bool:
        with self._state_lock:
            return self._probe_requested

    @property
    def stop_requested(self) -> bool:
        with self._state_lock:
            return self._stop_requested

    def _handle_command(self, cmd: str) -> None:
        with self._state_lock:
            self.commands.append(cmd)
            if cmd == "probe_on":
                self._probe_requested = True
            elif cmd == "probe_off":
                self._probe_requested = False
            elif cmd == "stop":
                self._stop_requested = True
        if cmd == "dump_fr":
            self.dump_stacks()
            self.dump_flight_recorder()

    def dump_stacks(self) -> str | None:
        """Every thread's Python stack to $DDPTOP_FR_DIR/stacks_rank{rank}.txt (faulthandler, from
        this reader thread, so a main thread blocked in C still shows where). The first line names
        the main thread, so ddptop can say where the training loop is."""
        if not self.fr_dir:
            return None
        import faulthandler
        import threading

        path = os.path.join(self.fr_dir, f"stacks_rank{self.rank}.txt")
        try:
            os.makedirs(self.fr_dir, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"main thread 0x{threading.main_thread().ident or 0:016x}\n")
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
        except OSError as e:
            self.log("warn", f"dump_fr: cannot write {path}: {e}")
            return None
        return path

    def dump_flight_recorder(self) -> str | None:
        """Write the NCCL flight recorder to $DDPTOP_FR_DIR/fr_dump_rank{rank}.pkl; return the path."""
        if not self.fr_dir:
            self.log("warn", "dump_fr: DDPTOP_FR_DIR is not set; nothing written")
            return None
        try:
            import torch  # lazy: client.py stays stdlib-only at import time

            import torch.distributed as dist

            # gloo's collectives are in the generic recorder, NCCL's in its own.
            name = "_dump_nccl_trace"
            if dist.is_initialized() and str(dist.get_backend()) != "nccl":
                name = "_dump_fr_trace"
            dump = getattr(torch._C._distributed_c10d, name)()
        except Exception as e:  # noqa: BLE001 - unavailable on builds without NCCL, or no PG
            self.log("warn", f"dump_fr: flight recorder unavailable: {type(e).__name__}: {e}")
            return None
        path = os.path.join(self.fr_dir, f"fr_dump_rank{self.rank}.pkl")
        try:
            os.makedirs(self.fr_dir, exist_ok=True)
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(bytes(dump))
            os.replace(tmp, path)
        except OSError as e:
            self.log("warn", f"dump_fr: cannot write {path}: {e}")
            return None
        self.log("info", f"flight recorder dumped to {path} ({len(dump)} bytes)")
        return path

    # ------------------------------------------------------------------ sending

    def build(self, mtype: str, fields: dict[str, Any]) -> dict[str, Any]:
        """The message `send` would write: v/type/rank/step/t first, then the fields."""
        msg: dict[str, Any] = {
            "v": protocol.VERSION,
            "type": mtype,
            "rank": self.rank,
            "step": self.step,
            "t": time.monotonic(),
        }
        msg.update(fields)
        return msg

    def send(self, mtype: str, **fields: Any) -> None:
        """Send one message; `step` defaults to `self.step`. No-op when disabled or closed."""
        if self._sock is None or self._closed:
            return
        self._write([self.build(mtype, fields)])

    def send_many(self, msgs: list[tuple[str, dict[str, Any]]]) -> None:
        """Several messages in one write, in order: ddptop takes them in one read, not one each
        (a step and its buckets; at 1,024 ranks the reads are a large part of ddptop's CPU)."""
        if self._sock is None or self._closed or not msgs:
            return
        self._write([self.build(mtype, fields) for mtype, fields in msgs])

    def _write(self, msgs: list[dict[str, Any]], *, final: bool = False) -> None:
        lines: list[bytes] = []
        for msg in msgs:
            if self.validate:
                protocol.validate(msg, "worker")
            try:
                lines.append(protocol.encode(msg))
            except (ValueError, protocol.ProtocolError) as e:
                if self.validate:
                    raise
                write_line(f"ddptop_worker: dropped a {msg.get('type')} message: {e}", sys.stderr)
        if not lines:
            return
        data = b"".join(lines)
        with self._send_lock:
            sock = self._sock
            if sock is None or self._closed:
                return
            try:
                sock.sendall(data)
            except OSError:
                # ddptop's end is gone: the reader thread sees it too and fires the dead-man switch.
                pass
            if final:
                self._closed = True

    def log(self, level: str, msg: str, finding: dict[str, Any] | None = None) -> None:
        if finding is None:
            self.send("log", level=level, msg=msg[:8000])
        else:
            self.send("log", level=level, msg=msg[:8000], finding=finding)

    # ------------------------------------------------------------------ threads

    def silence(self) -> None:
        """Stop heartbeats while staying connected (fault injection: a silent rank)."""
        self._silent = True

    def _heartbeat_loop(self) -> None:
        # The first beat goes at once, not a period later: it is the CPU-time baseline the
        # watchdog's idle/computing window starts from, and a script that ends (or hangs)
        # within its first second is otherwise judged with no evidence at all.
        last_step, still = self.step, -1
        while True:
            if self._closing:
                return
            if not self._silent:
                still = still + 1 if self.step == last_step else 0
                last_step = self.step
                self.send("heartbeat", phase=self._phase, **self.evidence(still))
            if self._stop_threads.wait(self.heartbeat_s):
                return

    def evidence(self, beats_still: int) -> dict[str, Any]:
        """What the watchdog judges a stopped rank by: the process's CPU time on every beat,
        and its pending collectives once the step counter has stood still for two beats (the
        recorder is not read while steps flow, so a healthy run pays nothing for it)."""
        out: dict[str, Any] = {"cpu_s": round(time.process_time(), 3)}
        if beats_still >= 2 and self._phase not in ("init", "done"):
            coll = inflight.coll_state()
            if coll is not None:
                out["coll"] = coll
        return out

    def _reader_loop(self) -> None:
        rfile = self._rfile
        try:
            while rfile is not None:
                line = rfile.readline(protocol.MAX_LINE_BYTES + 2)
                if not line:
                    break
                try:
                    msg = protocol.parse_line(line.rstrip(b"\n"), "ddptop")
                except protocol.ProtocolError as e:
                    write_line(f"ddptop_worker: ignoring a bad line from ddptop: {e}", sys.stderr)
                    continue
                if msg["type"] == "command":
                    self._handle_command(str(msg["cmd"]))
                elif msg["type"] == "error":
                    write_line(f"ddptop_worker: ddptop reported {msg['code']}: {msg['msg']}", sys.stderr)
        except (OSError, ValueError):
            pass
        if rfile is not None:
            try:
                rfile.close()
            except OSError:
                pass
        if not self._closing:
            self.disconnected = True
            if self.deadman:
                self._deadman()

    def _deadman(self) -> None:
        """ddptop's end closed: terminate this process now (SIGTERM, then _exit after a grace)."""
        write_line("ddptop_worker: ddptop closed the connection; exiting (dead-man switch)", sys.stderr)
        self._closed = True

        def _hard_exit() -> None:
            time.sleep(DEADMAN_GRACE_S)
            os._exit(DEADMAN_EXIT_CODE)

        threading.Thread(target=_hard_exit, name="ddptop-deadman", daemon=True).start()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except OSError:
            os._exit(DEADMAN_EXIT_CODE)

    # ------------------------------------------------------------------ closing

    def close(self, reason: str = "done") -> None:
        """Send `bye` and close the connection without triggering the dead-man switch."""
        if self._sock is None or self._closed:
            return
        self._phase = "done"  # no heartbeat: bye is the last line
        self._closing = True
        self._stop_threads.set()
        self._write([self.build("bye", {"reason": reason})], final=True)
        self._closed = True
        sock = self._sock
        with self._send_lock:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for th in self._threads:
            if th is not threading.current_thread():
                th.join(timeout=2.0)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close("done" if exc_type is None else "error")
