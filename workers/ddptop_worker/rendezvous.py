"""A rank at `init_process_group`, said to ddptop (heartbeat `rendezvous`, docs/protocol.md): as it
enters, with the bootstrap environment it calls it with, and once it returns. A rank that said
hello but never entered, while its peers wait inside, is the rank that never joins; ddptop names
it within its stall threshold (src/app/diagnose.rs `never_joined`, docs/troubleshooting.md)
instead of letting the others wait out the process group's timeout (30 minutes by default).

Standard library only: the attach bootstrap wraps the script's `init_process_group` with
`wrap_init`, and ddptop's own workers call `entering`/`joined` around theirs.
"""

from __future__ import annotations

import fcntl
import functools
import os
import socket
import struct
from collections.abc import Callable
from typing import Any

from .client import Client
from .faults import Fault

MAX_INTERFACES = 32  # protocol::Rendezvous::MAX_INTERFACES
MAX_CHARS = 200  # protocol::Rendezvous::MAX_CHARS
SIOCGIFADDR = 0x8915


def _ipv4(name: str) -> str | None:
    """The interface's IPv4 address (Linux ioctl), or None (no address, another OS)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = struct.pack("256s", name.encode()[:15])
            return socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, packed)[20:24])
    except OSError:
        return None


def interfaces() -> list[str]:
    """`name address` of each network interface (`name` alone without an IPv4 address): what
    GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME could name on this host."""
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        return []
    out = []
    for n in names[:MAX_INTERFACES]:
        addr = _ipv4(n)
        out.append((f"{n} {addr}" if addr else n)[:MAX_CHARS])
    return out


def bootstrap_env() -> dict[str, Any]:
    """The environment `init_process_group(init_method="env://")` reads, and the interfaces."""

    def env(name: str) -> str | None:
        v = os.environ.get(name)
        return v[:MAX_CHARS] if v else None

    return {
        "master_addr": env("MASTER_ADDR"),
        "master_port": env("MASTER_PORT"),
        "gloo_socket_ifname": env("GLOO_SOCKET_IFNAME"),
        "nccl_socket_ifname": env("NCCL_SOCKET_IFNAME"),
        "interfaces": interfaces(),
    }


def entering(client: Client, fault: Fault | None, rank: int) -> None:
    """Just before `init_process_group`. The `nojoin:RANK` fault stops RANK here, for good."""
    if fault is not None:
        fault.never_join(client, rank)
    client.send("heartbeat", phase=client.phase, rendezvous={"state": "entered", **bootstrap_env()})


def joined(client: Client) -> None:
    """Just after `init_process_group` returned."""
    client.send("heartbeat", phase=client.phase, rendezvous={"state": "joined"})


def wrap_init(
    init: Callable[..., Any], client_of: Callable[[], Client | None]
) -> Callable[..., Any]:
    """`torch.distributed.init_process_group` that says entering and joined on the client
    `client_of()` returns (None: nothing is said; the script's call is unchanged either way)."""

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        client = client_of()
        if client is not None:
            try:
                fault = Fault.from_env()
            except ValueError:
                fault = None  # the bootstrap reports a bad DDPTOP_INJECT itself
            rank = int(os.environ.get("RANK", "0") or 0)
            entering(client, fault, rank)
        out = init(*args, **kwargs)
        if client is not None:
            joined(client)
        return out

    init_process_group.__ddptop_wrapped__ = True  # type: ignore[attr-defined]
    return init_process_group
