"""Which instrument times DDP's bucket all-reduces on an attached rank, switched live (issue 45,
docs/profiler.md "attach: never silently blind").

ddptop's NCCL profiler plugin lives in this very process once NCCL loads it, and exports its
state (`ddptop_nccl_profiler_state`, `ddptop_nccl_profiler_why`; plugins/nccl-profiler/src/
status.rs). Attach keeps its own comm hook timing the buckets (the fallback) until that state
says `REPORTING` (a batch with a completed collective of this run reached ddptop on the current
connection), hands the buckets to the plugin then, and takes them back the moment the plugin is
anything else (stalled and reconnecting, off, never loaded). One source per step: the hook's
marks stop while the plugin is the source, so no step is timed twice.

Standard library only (ctypes): the library is opened with RTLD_NOLOAD, so ddptop never loads
the plugin itself; it is only found once NCCL has loaded it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Optional

# The plugin's states (plugins/nccl-profiler/src/status.rs).
NOT_STARTED, CONNECTING, CONNECTED, REPORTING, RECONNECTING, OFF = -1, 0, 1, 2, 3, 4
STATE_WORDS = {
    NOT_STARTED: "loaded, NCCL has not called its init",
    CONNECTING: "connecting to ddptop",
    CONNECTED: "connected, no collective reported yet",
    RECONNECTING: "stalled, reconnecting",
    OFF: "off",
}
# Where NCCL finds ddptop's plugin (supervisor::nccl_profiler::ENV), and ddptop's word that it
# is ddptop's own (supervisor::nccl_profiler::ON_ENV).
PLUGIN_PATH_ENV = "NCCL_PROFILER_PLUGIN"
PLUGIN_ON_ENV = "DDPTOP_NCCL_PLUGIN"
# After this many steps without NCCL loading the plugin, the reason says so outright: DDP's
# constructor already ran a collective (its parameter broadcast), which made NCCL's communicator.
NEVER_LOADED_AFTER = 3

HOOK, PLUGIN, UNTIMED = "comm_hook", "nccl_profiler", "untimed"
SINGLE_RANK_WHY = ("k=1: one rank, nothing to communicate (NCCL fires no collective events for a "
                   "one-rank communicator, so its profiler plugin never reports)")

Reading = Optional[tuple[int, str]]  # (state, why); None: the library is not loaded


class PluginState:
    """Reads the plugin's exported state through ctypes, once NCCL has loaded it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lib: Optional[ctypes.CDLL] = None

    def __call__(self) -> Reading:
        if self._lib is None:
            if not self.path:
                return None
            try:
                # RTLD_NOLOAD: a handle only if NCCL already loaded it (the plugin pins itself).
                self._lib = ctypes.CDLL(self.path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            except OSError:
                return None
            self._lib.ddptop_nccl_profiler_state.restype = ctypes.c_int
            self._lib.ddptop_nccl_profiler_why.restype = ctypes.c_size_t
            self._lib.ddptop_nccl_profiler_why.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        state = int(self._lib.ddptop_nccl_profiler_state())
        buf = ctypes.create_string_buffer(512)
        self._lib.ddptop_nccl_profiler_why(buf, len(buf))
        return state, buf.value.decode("utf-8", "replace")


class CommSource:
    """The source of the bucket timings, decided at each step's end (`poll`).

    `expected`: ddptop put its own plugin on this launch (DDPTOP_NCCL_PLUGIN=1). Without it the
    hook is the only source and `why` says so. `own_hook`: the script registered its own DDP comm
    hook, which ddptop does not replace; then, while the plugin does not report, nothing times
    the buckets (`untimed`)."""

    def __init__(self, expected: bool, backend: Optional[str], read: Callable[[], Reading],
                 plugin_path: str = "") -> None:
        self.expected = expected
        self.backend = backend
        self.read = read
        self.plugin_path = plugin_path
        self.own_hook: Optional[str] = None
        # One rank (k=1): nothing to communicate, and NCCL fires no collective events for a
        # one-rank communicator, so the plugin never reports; no hook either (its cost on short
        # steps was measured: docs/profiler.md).
        self.single_rank = False
        self.source = HOOK
        self.why = self._not_expected_why() if not expected else "plugin not reporting: not checked yet"
        self.reported = False  # the plugin reported at some point of this run
        self.switches = 0  # times the source changed

    def _not_expected_why(self) -> str:
        if self.backend == "gloo":
            return "gloo: no NCCL to profile"
        return "ddptop's NCCL profiler plugin is not on this launch"

    def _not_reporting(self, reading: Reading, step: int) -> str:
        if reading is None:
            where = f" ({self.plugin_path})" if self.plugin_path else ""
            if self.plugin_path and not os.path.exists(self.plugin_path):
                return f"plugin not reporting: its file is missing{where}"
            if step < NEVER_LOADED_AFTER:
                return f"plugin not reporting: NCCL has not loaded it yet{where}"
            if self.backend not in (None, "nccl"):
                return (f"plugin not reporting: the process group is {self.backend}, so NCCL "
                        f"never loaded it{where}")
            return (f"plugin not reporting: NCCL never loaded it{where}; an NCCL without the "
                    "ncclProfiler_v5/v4 interface ignores it")
        state, why = reading
        words = STATE_WORDS.get(state, f"state {state}")
        return f"plugin not reporting: {words}" + (f": {why}" if why and state in (RECONNECTING, OFF) else "")

    def poll(self, step: int) -> bool:
        """Read the plugin's state; True when the source or its reason changed (the caller says
        it to ddptop and switches its hook's marks on or off)."""
        if not self.expected:
            return False
        reading = self.read()
        if self.single_rank:
            new, why = UNTIMED, SINGLE_RANK_WHY
        elif reading is not None and reading[0] == REPORTING:
            new, why = PLUGIN, ""
            self.reported = True
        else:
            new = UNTIMED if self.own_hook is not None else HOOK
            why = self._not_reporting(reading, step)
            if self.own_hook is not None:
                why = f"the script's own comm hook ({self.own_hook}) runs; {why}"
        changed = (new, why) != (self.source, self.why)
        if new != self.source:
            self.switches += 1
        self.source, self.why = new, why
        return changed

    def hook_times(self) -> bool:
        """ddptop's comm hook records marks (it is the source)."""
        return self.source == HOOK and not self.single_rank


def from_env(backend: Optional[str], env: "os._Environ[str] | dict[str, str]") -> CommSource:
    path = str(env.get(PLUGIN_PATH_ENV, "") or "")
    expected = str(env.get(PLUGIN_ON_ENV, "")) == "1" and bool(path)
    return CommSource(expected, backend, PluginState(path) if expected else (lambda: None), path)
