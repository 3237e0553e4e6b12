"""The book's models in flax nnx, NHWC: d2l's ResNet-18 (the same layers as models.resnet18: 3x3
stride-1 stem with BatchNorm, no max-pool, four stages of two residual blocks, 1x1 shortcut convs
without BatchNorm, biases on every conv, global average pool, one linear layer) and the `tiny` CNN.

BatchNorm follows torch's defaults (eps 1e-5, running-stat momentum 0.1, i.e. flax's 0.9).
Imports flax: only the jax worker loads this module.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx

from .models import IMAGE_SIZE, IN_CHANNELS, NUM_CLASSES, RESNET18_PARAMS

__all__ = ["IMAGE_SIZE", "RESNET18_PARAMS", "MODELS", "build", "count_params"]

BN_MOMENTUM = 0.9  # flax's momentum is torch's 1 - 0.1
BN_EPS = 1e-5


def _bn(features: int, rngs: nnx.Rngs) -> nnx.BatchNorm:
    return nnx.BatchNorm(features, momentum=BN_MOMENTUM, epsilon=BN_EPS, rngs=rngs)


class Residual(nnx.Module):
    """d2l's Residual: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))."""

    def __init__(
        self, cin: int, cout: int, *, use_1x1conv: bool = False, strides: int = 1, rngs: nnx.Rngs
    ) -> None:
        self.conv1 = nnx.Conv(cin, cout, (3, 3), strides=strides, padding=1, rngs=rngs)
        self.conv2 = nnx.Conv(cout, cout, (3, 3), padding=1, rngs=rngs)
        self.conv3 = (
            nnx.Conv(cin, cout, (1, 1), strides=strides, padding=0, rngs=rngs)
            if use_1x1conv
            else None
        )
        self.bn1 = _bn(cout, rngs)
        self.bn2 = _bn(cout, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = nnx.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        if self.conv3 is not None:
            x = self.conv3(x)
        return nnx.relu(y + x)


# (channels, first stage) for d2l's four resnet_block calls, two residuals each.
STAGES = ((64, True), (128, False), (256, False), (512, False))


class ResNet18(nnx.Module):
    def __init__(
        self, num_classes: int = NUM_CLASSES, in_channels: int = IN_CHANNELS, *, rngs: nnx.Rngs
    ) -> None:
        self.conv0 = nnx.Conv(in_channels, 64, (3, 3), strides=1, padding=1, rngs=rngs)
        self.bn0 = _bn(64, rngs)
        self.block_names: tuple[str, ...] = ()
        cin = 64
        names = []
        for stage, (cout, first) in enumerate(STAGES, start=1):
            for i in range(2):
                downsample = i == 0 and not first
                blk = Residual(
                    cin, cout, use_1x1conv=downsample, strides=2 if downsample else 1, rngs=rngs
                )
                # Named attributes (not a list) keep the state paths readable: block3_0.conv1.
                name = f"block{stage}_{i}"
                setattr(self, name, blk)
                names.append(name)
                cin = cout
        self.block_names = tuple(names)
        self.fc = nnx.Linear(512, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = nnx.relu(self.bn0(self.conv0(x)))
        for name in self.block_names:
            x = getattr(self, name)(x)
        return self.fc(x.mean(axis=(1, 2)))


class Tiny(nnx.Module):
    """models.tiny in flax: five conv-BN-ReLU blocks (strides 1,2,2,2,2), average pool, linear."""

    WIDTHS = ((16, 1), (32, 2), (64, 2), (128, 2), (256, 2))

    def __init__(
        self, num_classes: int = NUM_CLASSES, in_channels: int = IN_CHANNELS, *, rngs: nnx.Rngs
    ) -> None:
        cin = in_channels
        for i, (cout, stride) in enumerate(self.WIDTHS):
            setattr(self, f"conv{i}", nnx.Conv(cin, cout, (3, 3), strides=stride, padding=1, rngs=rngs))
            setattr(self, f"bn{i}", _bn(cout, rngs))
            cin = cout
        self.fc = nnx.Linear(cin, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        for i in range(len(self.WIDTHS)):
            x = nnx.relu(getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x)))
        return self.fc(x.mean(axis=(1, 2)))


MODELS: dict[str, type[nnx.Module]] = {"resnet18": ResNet18, "tiny": Tiny}


def build(name: str, seed: int) -> nnx.Module:
    try:
        cls: Any = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r} (choices: {', '.join(MODELS)})") from None
    model: nnx.Module = cls(NUM_CLASSES, IN_CHANNELS, rngs=nnx.Rngs(seed))
    return model


def _names(path: tuple[Any, ...]) -> tuple[str, ...]:
    """('block1_0', 'conv1', 'kernel') from a pytree path (newer flax adds a trailing `.value`)."""
    out = []
    for k in path:
        name = getattr(k, "key", getattr(k, "name", None))
        out.append(str(name if name is not None else k))
    if out and out[-1] == "value":
        out.pop()
    return tuple(out)


def init_state(name: str, seed: int) -> tuple[Any, Any, Any]:
    """(graphdef, params, batch_stats) with host (numpy) arrays, initialized as torch initializes
    the book's layers: conv and linear weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
    BatchNorm scale 1, bias 0, running mean 0, running var 1.

    Drawn with numpy from the shapes of `nnx.eval_shape`: flax's own initializers would compile a
    random-number program first, which on CPU takes longer than the whole tiny run.
    """
    abstract = nnx.eval_shape(lambda: build(name, seed))
    parts: tuple[Any, ...] = nnx.split(abstract, nnx.Param, nnx.BatchStat)
    graphdef, params, stats = parts
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    fan_in: dict[tuple[str, ...], int] = {}
    for path, leaf in flat:
        names = _names(path)
        if names[-1] == "kernel":
            fan_in[names[:-1]] = int(np.prod(leaf.shape[:-1]))
    rng = np.random.default_rng(seed)

    def param(path: tuple[Any, ...], leaf: Any) -> Any:
        names = _names(path)
        layer, field = names[:-1], names[-1]
        if field in ("kernel", "bias") and layer in fan_in:
            bound = 1.0 / float(np.sqrt(fan_in[layer]))
            return rng.uniform(-bound, bound, leaf.shape).astype(leaf.dtype)
        if field == "scale":
            return np.ones(leaf.shape, leaf.dtype)
        if field == "bias":
            return np.zeros(leaf.shape, leaf.dtype)
        raise ValueError(f"no initializer for parameter {'.'.join(names)}")

    def stat(path: tuple[Any, ...], leaf: Any) -> Any:
        fill = 1.0 if _names(path)[-1] == "var" else 0.0
        return np.full(leaf.shape, fill, leaf.dtype)

    params = jax.tree_util.tree_map_with_path(param, params)
    stats = jax.tree_util.tree_map_with_path(stat, stats)
    return graphdef, params, stats


def count_params(model: nnx.Module) -> int:
    """Trainable parameters (nnx.Param), like models.count_params; BatchNorm's running stats are
    nnx.BatchStat and not counted, as torch's buffers are not."""
    return param_count(nnx.state(model, nnx.Param))


def param_count(params: Any) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(params))

