"""The pure layout rules of jax_sharding (no jax needed)."""

from __future__ import annotations

import pytest

from ddptop_worker.jax_sharding import fsdp_axis, spec_tuple, view_2d


def test_fsdp_splits_the_largest_divisible_dimension() -> None:
    assert fsdp_axis((3, 3, 64, 128), 2) == 3
    assert fsdp_axis((512, 10), 4) == 0  # 10 is not divisible by 4, 512 is
    assert fsdp_axis((3, 3, 1, 64), 4) == 3
    assert fsdp_axis((10,), 4) is None  # nothing divisible: stays replicated
    assert fsdp_axis((64, 64), 2) == 0  # ties: the earliest
    assert fsdp_axis((512, 10), 1) is None  # one device: nothing to split
    assert fsdp_axis((), 2) is None


def test_spec_tuple_per_strategy() -> None:
    assert spec_tuple((3, 3, 64, 128), 2, "data") == (None, None, None, None)
    assert spec_tuple((3, 3, 64, 128), 2, "fsdp") == (None, None, None, "data")
    assert spec_tuple((10,), 4, "fsdp") == (None,)
    with pytest.raises(ValueError, match="unknown sharding"):
        spec_tuple((4,), 2, "tensor")


def test_view_2d_folds_trailing_dimensions() -> None:
    assert view_2d((256, 64, 64, 1), ("data",)) == ((256, 4096), ("data", None))
    assert view_2d((3, 3, 64, 128), (None, None, None, "data")) == ((3, 24576), (None, "data"))
    assert view_2d((512, 10), ("data",)) == ((512, 10), ("data", None))
    assert view_2d((10,), ()) == ((10,), (None,))
