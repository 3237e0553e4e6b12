"""The layout: a 1-D mesh named `data` over k devices, the batch split along its leading axis, and
the parameters either replicated (`data`) or split along the mesh axis (`fsdp`). Switching strategy
changes only the PartitionSpecs chosen here; the training step never changes.

`fsdp_axis` is pure so that it is tested without jax; the rest needs jax.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from typing import Any

AXIS = "data"
SHARDINGS = ("data", "fsdp")


def fsdp_axis(shape: Sequence[int], k: int) -> int | None:
    """The dimension an FSDP-style layout splits across k devices: the largest one divisible by
    k (the earliest on ties), or None (kept replicated) when there is none or k is 1."""
    if k <= 1:
        return None
    best: int | None = None
    for d, n in enumerate(shape):
        if n % k == 0 and (best is None or n > shape[best]):
            best = d
    return best


def spec_tuple(shape: Sequence[int], k: int, sharding: str) -> tuple[str | None, ...]:
    """PartitionSpec entries for a parameter (or optimizer-state) array of this shape."""
    if sharding not in SHARDINGS:
        raise ValueError(f"unknown sharding {sharding!r} (choices: {', '.join(SHARDINGS)})")
    axis = fsdp_axis(shape, k) if sharding == "fsdp" else None
    return tuple(AXIS if d == axis else None for d in range(len(shape)))


def view_2d(shape: Sequence[int], spec: Sequence[str | None]) -> tuple[tuple[int, ...], tuple[str | None, ...]]:
    """visualize_sharding draws 1-D and 2-D arrays only: fold an N-D array into (dim 0, the rest),
    keeping which side the mesh axis splits (an N-D spec here splits at most one dimension)."""
    if len(shape) <= 2:
        return tuple(shape), tuple(spec) + (None,) * (len(shape) - len(spec))
    rest = 1
    for n in shape[1:]:
        rest *= n
    first = spec[0] if spec else None
    tail = next((s for s in spec[1:] if s is not None), None)
    return (shape[0], rest), (first, tail)


# ------------------------------------------------------------------------ jax from here on


def make_mesh(devices: Sequence[Any]) -> Any:
    import numpy as np
    from jax.sharding import Mesh

    return Mesh(np.array(list(devices)), (AXIS,))


def named(mesh: Any, *entries: str | None) -> Any:
    """NamedSharding(mesh, PartitionSpec(*entries))."""
    import jax.sharding

    sharding: Any = jax.sharding  # PartitionSpec carries no type annotations
    return sharding.NamedSharding(mesh, sharding.PartitionSpec(*entries))


def batch_sharding(mesh: Any) -> Any:
    return named(mesh, AXIS)


def replicated(mesh: Any) -> Any:
    return named(mesh)


def place_state(tree: Any, mesh: Any, sharding: str) -> Any:
    """device_put every array of a parameter/optimizer-state tree with the strategy's layout."""
    import jax

    k = int(mesh.devices.size)

    def put(a: Any) -> Any:
        return jax.device_put(a, named(mesh, *spec_tuple(tuple(a.shape), k, sharding)))

    return jax.tree.map(put, tree)


def spec_of(arr: Any) -> tuple[str | None, ...]:
    spec = getattr(arr.sharding, "spec", ())
    return tuple(s if isinstance(s, str) or s is None else "+".join(s) for s in spec)


def layout_text(arr: Any, width: int = 24) -> str:
    """The text jax.debug.visualize_array_sharding prints for arr (N-D arrays drawn as their 2-D
    fold), without colour."""
    import jax

    debug: Any = jax.debug  # the visualize_* functions carry no type annotations
    shape = tuple(int(n) for n in arr.shape)
    buf = io.StringIO()
    # visualize_* print through rich to sys.stdout; redirecting it captures the drawing.
    with contextlib.redirect_stdout(buf):
        if len(shape) <= 2:
            debug.visualize_array_sharding(arr, use_color=False, max_width=width)
        else:
            shape2, spec2 = view_2d(shape, spec_of(arr))
            sh = named(arr.sharding.mesh, *spec2)
            debug.visualize_sharding(shape2, sh, use_color=False, max_width=width)
    return buf.getvalue().rstrip("\n")


def local_bytes(tree: Any, device: Any) -> int:
    """Bytes of the tree's arrays that live on one device (its shards only)."""
    import jax

    total = 0
    for leaf in jax.tree.leaves(tree):
        for shard in getattr(leaf, "addressable_shards", ()):
            if shard.device == device:
                total += int(shard.data.nbytes)
    return total
