"""Models: the book's d2l `resnet18(10, 1)` and a `tiny` CNN for CPU runs.

The d2l model uses Lazy modules, so `build_model` materializes them with a dummy forward on the
target device before anything wraps the model in DDP (DDP refuses uninitialized parameters).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

IMAGE_SIZE = 64  # FashionMNIST 28x28 resized to 64x64, as in the book
IN_CHANNELS = 1
NUM_CLASSES = 10
RESNET18_PARAMS = 11_175_818


class Residual(nn.Module):
    """d2l.torch.Residual: two 3x3 convs with BN, optional 1x1 conv shortcut (no BN)."""

    def __init__(self, num_channels: int, use_1x1conv: bool = False, strides: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.LazyConv2d(num_channels, kernel_size=3, padding=1, stride=strides)
        self.conv2 = nn.LazyConv2d(num_channels, kernel_size=3, padding=1)
        self.conv3: nn.Module | None = (
            nn.LazyConv2d(num_channels, kernel_size=1, stride=strides) if use_1x1conv else None
        )
        self.bn1 = nn.LazyBatchNorm2d()
        self.bn2 = nn.LazyBatchNorm2d()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        if self.conv3 is not None:
            x = self.conv3(x)
        return F.relu(y + x)


def resnet_block(
    in_channels: int, num_channels: int, num_residuals: int, first_block: bool = False
) -> nn.Sequential:
    """d2l's resnet_block (the in_channels argument is unused there too: Lazy modules)."""
    del in_channels
    blk: list[nn.Module] = []
    for i in range(num_residuals):
        if i == 0 and not first_block:
            blk.append(Residual(num_channels, use_1x1conv=True, strides=2))
        else:
            blk.append(Residual(num_channels))
    return nn.Sequential(*blk)


def resnet18(num_classes: int = NUM_CLASSES, in_channels: int = IN_CHANNELS) -> nn.Sequential:
    """d2l.resnet18: 3x3/stride-1 stem with BN+ReLU, no max-pool, 4 residual stages, avgpool, fc."""
    net = nn.Sequential(
        nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
    )
    net.add_module("resnet_block1", resnet_block(64, 64, 2, first_block=True))
    net.add_module("resnet_block2", resnet_block(64, 128, 2))
    net.add_module("resnet_block3", resnet_block(128, 256, 2))
    net.add_module("resnet_block4", resnet_block(256, 512, 2))
    net.add_module("global_avg_pool", nn.AdaptiveAvgPool2d((1, 1)))
    net.add_module("fc", nn.Sequential(nn.Flatten(), nn.Linear(512, num_classes)))
    return net


def tiny(num_classes: int = NUM_CLASSES, in_channels: int = IN_CHANNELS) -> nn.Sequential:
    """A small strided CNN (~0.4 M params, ~1.6 MB of fp32 grads): cheap on CPU, and with
    `bucket_cap_mb=1` DDP splits its gradients into 2 buckets after the rebuild."""

    def block(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [
            nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        ]

    return nn.Sequential(
        *block(in_channels, 16, 1),
        *block(16, 32, 2),
        *block(32, 64, 2),
        *block(64, 128, 2),
        *block(128, 256, 2),
        nn.AdaptiveAvgPool2d((1, 1)),
        nn.Flatten(),
        nn.Linear(256, num_classes),
    )


@dataclass(frozen=True)
class ModelSpec:
    name: str
    bucket_cap_mb: float | None  # None: DDP's default (25 MiB, plus the 1 MiB first bucket)


MODEL_SPECS: dict[str, ModelSpec] = {
    "resnet18": ModelSpec("resnet18", None),
    "tiny": ModelSpec("tiny", 1.0),
}


def build_model(name: str, device: torch.device | str) -> nn.Module:
    """Build `name` on `device` and materialize Lazy modules with a dummy forward there."""
    device = torch.device(device)
    if name == "resnet18":
        net: nn.Module = resnet18(NUM_CLASSES, IN_CHANNELS)
    elif name == "tiny":
        net = tiny(NUM_CLASSES, IN_CHANNELS)
    else:
        raise ValueError(f"unknown model {name!r} (choices: {', '.join(MODEL_SPECS)})")
    net = net.to(device)
    was_training = net.training
    net.eval()  # the dummy forward must not touch BN running stats
    with torch.no_grad():
        net(torch.zeros(2, IN_CHANNELS, IMAGE_SIZE, IMAGE_SIZE, device=device))
    net.train(was_training)
    return net


def count_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


def grad_bytes(net: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in net.parameters() if p.requires_grad)
