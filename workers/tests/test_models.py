from __future__ import annotations

import torch
from torch import nn

from ddptop_worker import models


def test_d2l_resnet18_has_the_books_parameter_count() -> None:
    net = models.build_model("resnet18", "cpu")
    assert models.count_params(net) == models.RESNET18_PARAMS == 11_175_818
    assert models.grad_bytes(net) == 44_703_272
    assert len(list(net.parameters())) == 76
    assert not any(isinstance(p, nn.parameter.UninitializedParameter) for p in net.parameters())
    # the book's shape: 3x3 stride-1 stem with bias, BN, ReLU, no max-pool; avgpool + fc
    assert isinstance(net, nn.Sequential)
    stem = net[0]
    assert isinstance(stem, nn.Conv2d) and stem.kernel_size == (3, 3) and stem.stride == (1, 1)
    assert stem.bias is not None
    assert not any(isinstance(m, nn.MaxPool2d) for m in net.modules())
    shortcuts = [m.conv3 for m in net.modules() if isinstance(m, models.Residual) and m.conv3]
    assert len(shortcuts) == 3  # 1x1 conv shortcuts of stages 2-4, no BN on them
    assert net.training  # the dummy forward ran in eval mode and restored train mode


def test_tiny_builds_and_runs() -> None:
    net = models.build_model("tiny", "cpu")
    n = models.count_params(net)
    assert 100_000 < n < 2_000_000
    # more than 1 MiB of gradients, so bucket_cap_mb=1 gives >= 2 buckets after the rebuild
    assert models.grad_bytes(net) > 1024 * 1024
    assert models.MODEL_SPECS["tiny"].bucket_cap_mb == 1.0
    out = net(torch.zeros(3, 1, models.IMAGE_SIZE, models.IMAGE_SIZE))
    assert out.shape == (3, 10)


def test_unknown_model() -> None:
    import pytest

    with pytest.raises(ValueError, match="unknown model"):
        models.build_model("vgg", "cpu")
