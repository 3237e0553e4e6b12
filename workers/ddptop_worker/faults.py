"""Fault injection for ddptop's fault matrix: `DDPTOP_INJECT=KIND:STEP` in the environment.

Kinds (applied on the last rank, at the first training step >= STEP):
  crash   exit at once with code 3 (no cleanup)
  raise   raise a RuntimeError (a worker failing with a traceback)
  hang    stop making progress; the heartbeat thread keeps running (alive but stuck)
  silent  stop making progress and stop heartbeats too
The other ranks then block in their next all-reduce, as in a real stuck collective.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .client import Client

KINDS = ("crash", "raise", "hang", "silent")


@dataclass(frozen=True)
class Fault:
    kind: str
    step: int

    @staticmethod
    def from_env() -> Fault | None:
        spec = os.environ.get("DDPTOP_INJECT", "").strip()
        if not spec:
            return None
        kind, _, step = spec.partition(":")
        if kind not in KINDS or not step.isdigit():
            raise ValueError(f"DDPTOP_INJECT={spec!r}: expected one of {', '.join(KINDS)} as KIND:STEP")
        return Fault(kind, int(step))

    def due(self, step: int, rank: int, world_size: int) -> bool:
        return rank == world_size - 1 and step >= self.step

    def fire(self, client: Client) -> None:
        """Apply the fault; only `raise` returns control (by raising)."""
        client.log("warn", f"injected fault {self.kind}:{self.step}")
        if self.kind == "crash":
            os._exit(3)
        if self.kind == "raise":
            raise RuntimeError(f"injected exception at step {self.step}")
        if self.kind == "silent":
            client.silence()
        while True:
            time.sleep(3600)
