"""TLS to ddptop's multi-node listener (`tls://`): the client accepts exactly the certificate
whose SHA-256 ddptop passed in DDPTOP_TLS_FP. The server here uses a test-only self-signed
certificate (fixtures/tls, made with openssl; ddptop itself makes a fresh one per run)."""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import threading
from collections.abc import Iterator

import pytest

from ddptop_worker.client import FingerprintMismatch, connect, parse_tcp

HERE = os.path.dirname(os.path.abspath(__file__))
CERT = os.path.join(HERE, "fixtures", "tls", "cert.pem")
KEY = os.path.join(HERE, "fixtures", "tls", "key.pem")


def cert_fingerprint() -> str:
    with open(CERT, encoding="ascii") as f:
        der = ssl.PEM_cert_to_DER_cert(f.read())
    return hashlib.sha256(der).hexdigest()


@pytest.fixture
def tls_server() -> Iterator[tuple[int, list[str]]]:
    """A TLS echo of one line per connection; records how each handshake ended."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(CERT, KEY)
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    outcomes: list[str] = []

    def serve() -> None:
        while True:
            try:
                raw, _ = lsock.accept()
            except OSError:
                return
            try:
                with ctx.wrap_socket(raw, server_side=True) as t:
                    line = t.makefile("rb").readline()
                    if line:
                        t.sendall(b"echo " + line)
                        outcomes.append("served")
                    else:
                        outcomes.append("closed before a line")
            except (OSError, ssl.SSLError) as e:
                outcomes.append(f"handshake failed: {e}")

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    yield port, outcomes
    lsock.close()


def test_the_pinned_certificate_is_accepted(
    tls_server: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, _ = tls_server
    monkeypatch.setenv("DDPTOP_TLS_FP", cert_fingerprint())
    s = connect(f"tls://127.0.0.1:{port}")
    try:
        assert isinstance(s, ssl.SSLSocket)
        s.sendall(b"hello\n")
        assert s.makefile("rb").readline() == b"echo hello\n"
    finally:
        s.close()


def test_another_certificate_is_refused_before_anything_is_sent(
    tls_server: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, outcomes = tls_server
    monkeypatch.setenv("DDPTOP_TLS_FP", "0" * 64)
    with pytest.raises(FingerprintMismatch, match="refusing"):
        connect(f"tls://127.0.0.1:{port}")
    monkeypatch.setenv("DDPTOP_TLS_FP", "not-hex")
    with pytest.raises(ValueError, match="64 hex"):
        connect(f"tls://127.0.0.1:{port}")
    monkeypatch.delenv("DDPTOP_TLS_FP")
    with pytest.raises(ValueError, match="DDPTOP_TLS_FP"):
        connect(f"tls://127.0.0.1:{port}")
    assert "served" not in outcomes, "no line (no token) reached the impostor"


def test_tls_addresses_parse() -> None:
    assert parse_tcp("tls://10.0.0.1:4000") == ("10.0.0.1", 4000)
    with pytest.raises(ValueError, match="tls://"):
        parse_tcp("tls://nohost")
