"""attach_compile's dynamo counters: graph-break reasons made one line each, ddptop's own
measuring hooks' breaks left out, and the finding said once per change, at steady state."""

from __future__ import annotations

import sys
import types
from collections import Counter

import pytest

from ddptop_worker import attach_compile as ac


@pytest.fixture
def fake_counters(monkeypatch: pytest.MonkeyPatch) -> dict[str, Counter[str]]:
    counters: dict[str, Counter[str]] = {"graph_break": Counter()}
    mod = types.ModuleType("torch._dynamo.utils")
    mod.counters = counters  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", mod)
    return counters


def test_reasons_are_one_line_and_ddptops_hooks_are_left_out(
    fake_counters: dict[str, Counter[str]],
) -> None:
    fake_counters["graph_break"]["Tensor.item() call\n  Explanation: a data-dependent value\n  Hint: x"] = 9
    fake_counters["graph_break"][
        "Skip calling `torch.compiler.disable()`d function\n  Explanation: forward_pre "
        "(reason: ddptop attach: a measuring hook)"
    ] = 40
    fake_counters["graph_break"]["print\n"] = 2
    assert ac.graph_breaks() == [
        ("Tensor.item() call: a data-dependent value", 9),
        ("print", 2),
    ]


def test_the_finding_is_said_at_steady_state_when_the_counters_changed(
    fake_counters: dict[str, Counter[str]],
) -> None:
    clock = ac.CompileClock(compiles=8, recompiles=7)
    assert clock.finding_due(compiled_now=True) is None  # still compiling
    f = clock.finding_due(compiled_now=False)
    assert f == {"kind": "compile_regression", "names": [], "count": 0, "recompiles": 7,
                 "compiles": 8}
    assert clock.finding_due(compiled_now=False) is None  # nothing new
    fake_counters["graph_break"]["print"] = 3
    f = clock.finding_due(compiled_now=False)
    assert f is not None and f["names"] == ["print (×3)"] and f["count"] == 3
    assert ac.CompileClock().finding_due(compiled_now=False) is None  # never compiled
