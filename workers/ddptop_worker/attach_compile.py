"""torch.compile in an attached script: how long compiling took, and which steps it fell in.

A step during which torch compiled something (a dynamo frame, a recompile, AOTAutograd's lazy
backward) is not steady state: `attach` leaves it out of samples/s and reports the compile time
on its own (`result.compile_s`, `compiles`, `recompiles`, `compile_steps`; docs/attach.md).

Measured with torch._dynamo's compile callbacks (`torch._dynamo.callback.callback_handler`,
start/end of every compilation, nested ones counted once), registered when the script first
calls `torch.compile` (or at once when torch._dynamo is already imported): a script that never
compiles never imports dynamo because of ddptop.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

def is_recompile(compile_id: str) -> bool:
    """dynamo's compile id is `FRAME/N` (N-th compile of that frame, maybe `_ATTEMPT` after it,
    a `!` prefix for compiled autograd): N > 0 is a recompile of a frame compiled before."""
    tail = compile_id.lstrip("!").split("/")
    if len(tail) < 2:
        return False
    n = tail[1].split("_")[0]
    return n.isdigit() and int(n) > 0


# torch._dynamo.config.recompile_limit's default: a frame recompiled this often is a storm (at
# the limit dynamo gives up on it and runs it eagerly from then on).
RECOMPILE_STORM = 8
MAX_REASONS = 16  # graph-break reasons said in a finding (the most frequent)


def graph_breaks() -> list[tuple[str, int]]:
    """torch._dynamo's graph breaks so far, as (reason, count), most frequent first ([] when
    dynamo is not loaded: nothing compiled)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return []
    found: dict[str, int] = {}
    for r, n in dict(counters.get("graph_break", {})).items():
        text = str(r)
        # ddptop's own measuring hooks are `torch.compiler.disable`d (attach_hooks): the breaks
        # they cause are ddptop's cost, not the script's.
        if OWN_HOOK_REASON in text:
            continue
        key = one_line(text)
        found[key] = found.get(key, 0) + int(n)
    return sorted(found.items(), key=lambda rn: (-rn[1], rn[0]))


OWN_HOOK_REASON = "ddptop attach: a measuring hook"  # attach_hooks.run_eagerly's reason


def one_line(reason: str) -> str:
    """dynamo's multi-line reason as one line: its head, then its explanation when given."""
    lines = [ln.strip() for ln in reason.splitlines() if ln.strip()]
    if not lines:
        return "?"
    head = lines[0]
    why = next((ln[len("Explanation:"):].strip() for ln in lines[1:]
                if ln.startswith("Explanation:")), "")
    return f"{head}: {why}" if why else head


def compile_finding(recompiles: int, compiles: int, breaks: list[tuple[str, int]]) -> dict[str, Any]:
    """The `compile_regression` finding (protocol::Finding): graph-break reasons as names
    (`reason (×n)`), their total as count, and the compile counts."""
    return {
        "kind": "compile_regression",
        "names": [f"{r[:180]} (×{n})" for r, n in breaks[:MAX_REASONS]],
        "count": sum(n for _, n in breaks),
        "recompiles": recompiles,
        "compiles": compiles,
    }


@dataclass
class CompileClock:
    """Compile time and counts of one rank; `take()` hands the time since the last call."""

    seconds: float = 0.0
    compiles: int = 0  # dynamo compiles (first ones and recompiles)
    recompiles: int = 0
    lazy_backward: int = 0  # AOTAutograd's backward graphs, compiled at their first backward
    steps: int = 0  # steps that contained a compile (counted by the caller)
    _t0: float | None = None
    _pending: float = 0.0
    registered: bool = False

    def start(self, args: Any) -> None:
        self._t0 = time.perf_counter()

    def end(self, args: Any) -> None:
        if self._t0 is None:
            return
        dt = time.perf_counter() - self._t0
        self._t0 = None
        self.seconds += dt
        self._pending += dt
        trigger = str(getattr(getattr(args, "callback_trigger", None), "name", ""))
        if trigger == "LAZY_BACKWARD":
            self.lazy_backward += 1
        elif trigger == "DYNAMO":
            self.compiles += 1
            if is_recompile(str(getattr(args, "compile_id", ""))):
                self.recompiles += 1

    said: tuple[int, int] = (0, 0)  # (recompiles, graph breaks) of the last finding

    def finding_due(self, compiled_now: bool) -> dict[str, Any] | None:
        """The compile counters as a finding at the first step without a compile after steps
        with one (the compiled program's steady state begins) when they changed since last
        said; None otherwise. Cheap: called once per step."""
        if compiled_now or self.compiles == 0:
            return None
        breaks = graph_breaks()
        now = (self.recompiles, sum(n for _, n in breaks))
        if now == self.said:
            return None
        self.said = now
        return compile_finding(self.recompiles, self.compiles, breaks)

    def take(self) -> float:
        """Seconds compiled since the last call (a compile still running counts as some)."""
        out = self._pending
        self._pending = 0.0
        if self._t0 is not None:
            out = max(out, 1e-9)
        return out

    def register(self) -> bool:
        """Register the callbacks once torch._dynamo is importable; False when it is not."""
        if self.registered:
            return True
        try:
            from torch._dynamo.callback import callback_handler
        except Exception:  # noqa: BLE001 - an old or partial torch: nothing to measure
            return False
        callback_handler.register_start_callback(self.start)
        callback_handler.register_end_callback(self.end)
        self.registered = True
        return True

    def register_if_imported(self) -> None:
        if "torch._dynamo" in sys.modules:
            self.register()

    def describe(self) -> str:
        """`compile 41.2 s (3 compiles, 2 recompiles, 1 backward), 2 steps left out`."""
        parts = [f"{self.compiles} compile{'s' if self.compiles != 1 else ''}",
                 f"{self.recompiles} recompile{'s' if self.recompiles != 1 else ''}"]
        if self.lazy_backward:
            parts.append(f"{self.lazy_backward} backward")
        steps = f"{self.steps} step{'s' if self.steps != 1 else ''}"
        return (f"compile {self.seconds:.1f} s ({', '.join(parts)}); {steps} with a compile "
                "left out of samples/s")

    def result_fields(self) -> dict[str, Any]:
        if not self.registered or (self.compiles == 0 and self.lazy_backward == 0):
            return {}
        return {"compile_s": self.seconds, "compiles": self.compiles,
                "recompiles": self.recompiles, "compile_steps": self.steps}
