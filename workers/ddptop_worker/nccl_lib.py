"""Which profiler interfaces the NCCL library this process loaded can use, by symbol name
(issue 45; docs/profiler.md "Which interface").

NCCL finds a profiler plugin's table with `dlsym(plugin, "ncclProfiler_vN")`, newest it knows
first, so the names it can look up are NUL-terminated strings in its own `.rodata`. ddptop's
plugin exports `ncclProfiler_v5` and `ncclProfiler_v4`: an NCCL whose library names neither
cannot load it, whatever its version number says. The worker says in `hello` (`nccl_lib`) which
library it mapped and which names it holds; ddptop turns a library without v5/v4 into one line
on the run (`app::collectives::note_nccl_interfaces`).

Standard library only. Reads the ELF section table and `.rodata` (about 200 KiB of NCCL 2.28.9's
218 MB), or, for a file that is not a 64-bit little-endian ELF with `.rodata`, all of it in
chunks.
"""

from __future__ import annotations

import os
import re
import struct
from typing import Any, Optional

# The names NCCL passes to dlsym: "\0ncclProfiler_v5\0" in its string table.
_NAME = re.compile(rb"\x00ncclProfiler_v(\d{1,2})\x00")
# The ones ddptop's plugin exports (plugins/nccl-profiler/src/lib.rs).
PLUGIN_INTERFACES = (5, 4)
_CHUNK = 8 << 20


def loaded_nccl(maps: str = "/proc/self/maps") -> Optional[str]:
    """The path of the NCCL library mapped into this process (`libnccl.so*`), if any; torch's
    CUDA build maps it at `import torch`."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
                if os.path.basename(path).startswith("libnccl.so"):
                    return path
    except OSError:
        return None
    return None


def _rodata(f: Any) -> Optional[bytes]:
    """The `.rodata` section of a 64-bit little-endian ELF file; None for anything else."""
    head = f.read(64)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shentsize < 64 or shnum == 0 or shstrndx >= shnum:
        return None
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    if len(table) < shentsize * shnum:
        return None

    def section(i: int) -> tuple[int, int, int]:
        name, = struct.unpack_from("<I", table, i * shentsize)
        off, size = struct.unpack_from("<QQ", table, i * shentsize + 0x18)
        return name, off, size

    _, str_off, str_size = section(shstrndx)
    f.seek(str_off)
    names = f.read(str_size)
    for i in range(shnum):
        name, off, size = section(i)
        if names[name:name + 8] == b".rodata\x00":
            f.seek(off)
            data: bytes = f.read(size)
            return b"\x00" + data  # a name at the section's very start has its NUL before it
    return None


def profiler_interfaces(path: str) -> list[int]:
    """The `ncclProfiler_vN` names the library at `path` can look up, newest first (raises
    OSError when it cannot be read)."""
    found: set[int] = set()
    with open(path, "rb") as f:
        data = _rodata(f)
        if data is not None:
            found.update(int(m) for m in _NAME.findall(data))
        else:
            f.seek(0)
            tail = b""
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                found.update(int(m) for m in _NAME.findall(tail + chunk))
                tail = chunk[-24:]
    return sorted(found, reverse=True)


def hello_field() -> Optional[dict[str, Any]]:
    """`hello.nccl_lib`: the mapped NCCL's path and the profiler interfaces it names; None when
    no NCCL is mapped (gloo-only torch, a CPU wheel) or it cannot be read."""
    path = loaded_nccl()
    if path is None:
        return None
    try:
        return {"path": path, "profiler": profiler_interfaces(path)}
    except OSError:
        return None
