"""DDPTOP_INJECT parsing and targeting (the fault matrix's worker side)."""

from __future__ import annotations

import pytest

from ddptop_worker.faults import Fault


def test_unset_means_no_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPTOP_INJECT", raising=False)
    assert Fault.from_env() is None


def test_parses_and_targets_the_last_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTOP_INJECT", "hang:5")
    f = Fault.from_env()
    assert f == Fault("hang", 5)
    assert not f.due(4, 1, 2)
    assert f.due(5, 1, 2)
    assert not f.due(9, 0, 2)


@pytest.mark.parametrize("bad", ["explode:3", "hang", "hang:x", "raise:-1"])
def test_bad_specs_are_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("DDPTOP_INJECT", bad)
    with pytest.raises(ValueError, match="DDPTOP_INJECT"):
        Fault.from_env()
