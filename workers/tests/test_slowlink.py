"""The `slowlink:MS` fault (faults.py): parsed as ddptop writes it, refused otherwise; the comm
hook's state carries its delay (timing.BucketTimer.delay_s, 0 without the fault)."""

from __future__ import annotations

import pytest
import torch

from ddptop_worker.faults import Fault, FaultSpecError
from ddptop_worker.timing import BucketTimer, Clock


def test_slowlink_parses_and_bad_specs_are_refused() -> None:
    assert Fault.parse("slowlink:250") == Fault("slowlink", 250)
    for bad in ("slowlink", "slowlink:", "slowlink:0", "slowlink:x", "slowlink:-3"):
        with pytest.raises(FaultSpecError):
            Fault.parse(bad)


def test_the_comm_hook_state_has_no_delay_unless_injected() -> None:
    assert BucketTimer(Clock(torch.device("cpu"))).delay_s == 0.0
