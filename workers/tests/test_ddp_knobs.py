"""DDP settings from the environment (DDPTOP_DDP_*): parsing, the positional refusal, and a real
DDP module built with them at world size 1 over gloo."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddptop_worker import ddp_knobs


def test_from_env_reads_the_three_settings_and_nothing_when_unset() -> None:
    env = {ddp_knobs.BUCKET_CAP: "5", ddp_knobs.STATIC_GRAPH: "1", ddp_knobs.GRAD_VIEW: "0"}
    assert ddp_knobs.from_env(env) == {
        "bucket_cap_mb": 5.0,
        "static_graph": True,
        "gradient_as_bucket_view": False,
    }
    assert ddp_knobs.from_env({}) == {}
    assert ddp_knobs.describe(ddp_knobs.from_env(env)) == (
        "bucket_cap_mb=5, static_graph=True, gradient_as_bucket_view=False"
    )


def test_knobs_are_typed_and_keep_the_keyword_order() -> None:
    knobs = ddp_knobs.Knobs.parse({ddp_knobs.BUCKET_CAP: " 0.5 ", ddp_knobs.GRAD_VIEW: "true"})
    assert knobs == ddp_knobs.Knobs(bucket_cap_mb=0.5, gradient_as_bucket_view=True)
    assert list(knobs.kwargs()) == ["bucket_cap_mb", "gradient_as_bucket_view"]
    assert ddp_knobs.Knobs.parse({}) == ddp_knobs.Knobs()


@pytest.mark.parametrize(
    "env",
    [
        {ddp_knobs.BUCKET_CAP: "0"},
        {ddp_knobs.BUCKET_CAP: "lots"},
        {ddp_knobs.BUCKET_CAP: "nan"},
        {ddp_knobs.BUCKET_CAP: "2e6"},
        {ddp_knobs.STATIC_GRAPH: "yes"},
    ],
)
def test_bad_values_are_one_clear_error(env: dict[str, str]) -> None:
    with pytest.raises(ddp_knobs.KnobError, match="DDPTOP_DDP_"):
        ddp_knobs.from_env(env)


def test_a_setting_passed_by_position_is_left_alone_and_said() -> None:
    kwargs: dict[str, object] = {}
    # module, device_ids, output_device, dim, broadcast_buffers, init_sync, process_group, 25
    args = (nn.Linear(2, 2), None, None, 0, True, True, None, 25)
    why = ddp_knobs.override(args, kwargs, {"bucket_cap_mb": 5.0})
    assert why is not None and "bucket_cap_mb positionally" in why
    assert kwargs == {}
    assert ddp_knobs.override(args[:2], kwargs, {"bucket_cap_mb": 5.0}) is None
    assert kwargs == {"bucket_cap_mb": 5.0}


def test_what_the_script_passes_itself_is_named_by_keyword_or_position() -> None:
    m = nn.Linear(2, 2)
    assert ddp_knobs.passed((m,), {"device_ids": [0]}) == []
    assert ddp_knobs.passed((m,), {"bucket_cap_mb": None}) == []  # DDP's default, spelled out
    assert ddp_knobs.passed((m,), {"static_graph": False}) == ["static_graph"]
    # module … process_group, then bucket_cap_mb by position.
    assert ddp_knobs.passed((m, None, None, 0, True, True, None, 25), {}) == ["bucket_cap_mb"]
    both = ddp_knobs.passed((m,), {"gradient_as_bucket_view": True, "bucket_cap_mb": 10})
    assert sorted(both) == ["bucket_cap_mb", "gradient_as_bucket_view"]


def test_a_real_ddp_takes_them() -> None:
    # The positions above are DDP's own: checked against this torch's signature.
    import inspect

    params = list(inspect.signature(DDP.__init__).parameters)[1:]
    for kw, pos in ddp_knobs.POSITIONS.items():
        assert params[pos] == kw
    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        kwargs: dict[str, object] = {}
        knobs = ddp_knobs.from_env({ddp_knobs.BUCKET_CAP: "2", ddp_knobs.GRAD_VIEW: "1"})
        assert ddp_knobs.override((), kwargs, knobs) is None
        ddp = DDP(nn.Linear(64, 64), **kwargs)  # type: ignore[arg-type]
        assert ddp.bucket_bytes_cap == 2 * 1024 * 1024
        assert ddp.gradient_as_bucket_view is True
        ddp(torch.randn(4, 64)).sum().backward()
    finally:
        dist.destroy_process_group()
