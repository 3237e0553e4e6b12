"""The flight recorder's environment for the torch at hand.

ddptop's launch sets the current names (`TORCH_FR_BUFFER_SIZE`, `TORCH_FR_DUMP_TEMP_FILE`): torch
2.11 reads them, and warns on every rank about the deprecated `TORCH_NCCL_*` names they replace
(a gloo run's log would start with that warning). A torch from before the rename reads only the
old names, so they are copied for it before its process group exists. 2.11 is the version ddptop
is tested with; older ones get both names (a possible warning line beats a lost recorder).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# (current name, the name torch used before it)
RENAMED = (
    ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
    ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
)
READS_CURRENT_NAMES = (2, 11)


def _version(text: str) -> tuple[int, int]:
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return READS_CURRENT_NAMES  # unknown: assume a current torch


def add_legacy_names(torch_version: str, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Copy each current name to its old one for a torch older than 2.11; the names copied."""
    env = os.environ if environ is None else environ
    if _version(torch_version) >= READS_CURRENT_NAMES:
        return []
    copied = []
    for new, old in RENAMED:
        if new in env and old not in env:
            env[old] = env[new]
            copied.append(old)
    return copied
