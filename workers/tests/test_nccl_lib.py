"""Which profiler interfaces an NCCL library can use, read from the names NCCL passes to dlsym
(nccl_lib.py, issue 45): fixtures shaped like NCCL 2.28 (v5..v1), 2.27 (v4..v1) and 2.26 (v3..v1)
as minimal ELF files with a `.rodata`, the same names outside `.rodata` (not counted), a file
that is not ELF (scanned whole, across chunk edges), and the real NCCL of the test venv."""

from __future__ import annotations

import glob
import os
import struct
import sys
from pathlib import Path

import pytest

from ddptop_worker import nccl_lib


def elf(rodata: bytes, other: bytes = b"") -> bytes:
    """A 64-bit little-endian ELF with sections NULL, .rodata, .debug_str and .shstrtab."""
    shstr = b"\x00.rodata\x00.debug_str\x00.shstrtab\x00"
    names = {".rodata": 1, ".debug_str": 9, ".shstrtab": 20}
    body = bytearray(b"\x00" * 64)
    offs = {}
    for name, data in ((".rodata", rodata), (".debug_str", other), (".shstrtab", shstr)):
        offs[name] = (len(body), len(data))
        body += data
    shoff = len(body)
    sections = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    for name in (".rodata", ".debug_str", ".shstrtab"):
        off, size = offs[name]
        sections.append(struct.pack("<IIQQQQIIQQ", names[name], 1, 0, 0, off, size, 0, 0, 1, 0))
    body += b"".join(sections)
    head = bytearray(b"\x7fELF" + bytes([2, 1, 1]) + b"\x00" * 9)
    head += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 4, 3)
    body[:64] = head
    return bytes(body)


def names(*versions: int) -> bytes:
    # As NCCL's .rodata holds them: a log format before each name (profiler_v*.cc).
    return b"".join(b"Profiler/Plugin: Loaded %%s (v%d)\x00ncclProfiler_v%d\x00" % (v, v) for v in versions)


@pytest.mark.parametrize(
    "versions, loads",
    [((5, 4, 3, 2, 1), True), ((4, 3, 2, 1), True), ((3, 2, 1), False), ((), False)],
    ids=["nccl_2_28", "nccl_2_27", "nccl_2_26", "no_profiler"],
)
def test_the_interfaces_are_the_names_in_rodata(tmp_path: Path, versions: tuple[int, ...], loads: bool) -> None:
    lib = tmp_path / "libnccl.so.2"
    # A newer name only in the debug strings (a static variable's name) is not a dlsym name.
    lib.write_bytes(elf(b"\x00misc\x00" + names(*versions), other=b"\x00ncclProfiler_v9\x00"))
    found = nccl_lib.profiler_interfaces(str(lib))
    assert found == list(versions)
    assert any(v in nccl_lib.PLUGIN_INTERFACES for v in found) == loads


def test_a_file_that_is_not_elf_is_scanned_whole_across_chunk_edges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_lib, "_CHUNK", 64)
    blob = b"x" * 50 + b"\x00ncclProfiler_v4\x00" + b"y" * 100 + b"\x00ncclProfiler_v3\x00"
    p = tmp_path / "libnccl.so"
    p.write_bytes(blob)
    assert nccl_lib.profiler_interfaces(str(p)) == [4, 3]


def test_the_mapped_library_is_found_in_the_process_maps(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r--p 00000000 08:01 1 /usr/lib/libc.so.6\n"
        "7f02-7f03 r--p 00000000 08:01 2 /v/nvidia/nccl/lib/libnccl-net.so\n"
        "7f04-7f05 r-xp 00000000 08:01 3 /v/nvidia/nccl/lib/libnccl.so.2\n"
        "7f06-7f07 rw-p 00000000 00:00 0\n"
    )
    assert nccl_lib.loaded_nccl(str(maps)) == "/v/nvidia/nccl/lib/libnccl.so.2"
    maps.write_text("7f00-7f01 r--p 00000000 08:01 1 /usr/lib/libc.so.6\n")
    assert nccl_lib.loaded_nccl(str(maps)) is None


def test_the_real_nccl_of_this_venv_names_v5_and_v4() -> None:
    """torch's CUDA wheels bring NCCL 2.28.9 (nvidia-nccl-cu13), CPU-only torch none."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    libs = glob.glob(os.path.join(root, "lib", "python3*", "site-packages", "nvidia", "nccl", "lib", "libnccl.so*"))
    if not libs:
        pytest.skip("this python's torch brings no NCCL library")
    found = nccl_lib.profiler_interfaces(libs[0])
    assert found[:2] == [5, 4], found
