"""The bare weak-scaling loop of the book (d2l's multi-GPU chapter), independent of ddptop.

    torchrun --standalone --nproc-per-node=K workers/scripts/bare_d2l.py [--batch 256]
             [--samples 60000] [--epochs 2]

It is the chapter's loop, its two settings included: `torch.set_float32_matmul_precision("high")`
and `torch.backends.cudnn.benchmark = True` (`--no-book-settings` leaves PyTorch's defaults, for
the comparison arm). It imports nothing from ddptop_worker: the d2l ResNet-18 is written out here again, the data is
`torch.rand` resident in device memory (samples / K per rank), each step slices the next batch,
and the step is zero_grad(set_to_none=True), forward, backward, SGD step: nothing else, no
events, no hook, no messages. Epoch 0 is warm-up; each later epoch is timed between two
synchronizes. Rank 0 prints one line per timed epoch and a last line
`BARE_RESULT {json}` with the sum over ranks of each rank's mean samples/s (the figure ddptop's
`train` reports per rank and ddptop sums), for scripts/device/loop_overhead.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class Residual(nn.Module):
    def __init__(self, channels: int, use_1x1conv: bool = False, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.LazyConv2d(channels, kernel_size=3, padding=1, stride=stride)
        self.conv2 = nn.LazyConv2d(channels, kernel_size=3, padding=1)
        self.conv3 = nn.LazyConv2d(channels, kernel_size=1, stride=stride) if use_1x1conv else None
        self.bn1 = nn.LazyBatchNorm2d()
        self.bn2 = nn.LazyBatchNorm2d()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.conv3(x) if self.conv3 is not None else x))


def stage(channels: int, first: bool) -> nn.Sequential:
    return nn.Sequential(
        Residual(channels, use_1x1conv=not first, stride=1 if first else 2), Residual(channels)
    )


def resnet18(num_classes: int = 10, in_channels: int = 1) -> nn.Sequential:
    """d2l.resnet18: 3x3 stride-1 stem, no max-pool, four stages of two residual blocks."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        stage(64, True),
        stage(128, False),
        stage(256, False),
        stage(512, False),
        nn.AdaptiveAvgPool2d((1, 1)),
        nn.Flatten(),
        nn.Linear(512, num_classes),
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=256, help="per-rank batch (weak scaling)")
    p.add_argument("--samples", type=int, default=60000, help="samples per epoch, all ranks")
    p.add_argument("--epochs", type=int, default=2, help="epochs; epoch 0 is warm-up")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--no-book-settings", action="store_true", help="PyTorch's defaults instead")
    a = p.parse_args()
    if not a.no_book_settings:
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.benchmark = True
    rank, k = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if "MASTER_ADDR" not in os.environ:  # plain `python bare_d2l.py`: one rank
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=k)
    torch.manual_seed(0)
    per_rank = a.samples // k
    steps = per_rank // a.batch
    if a.epochs < 2 or steps < 1:
        sys.exit(f"bare_d2l: need --epochs >= 2 and at least one batch of {a.batch} per rank")
    x = torch.rand(per_rank, 1, 64, 64, device=dev)
    y = torch.randint(0, 10, (per_rank,), device=dev)
    net = resnet18().to(dev)
    net(torch.zeros(2, 1, 64, 64, device=dev))  # materialize the Lazy modules before DDP
    ddp = nn.parallel.DistributedDataParallel(net, device_ids=[local] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr)
    loss = nn.CrossEntropyLoss()
    rates: list[float] = []
    for epoch in range(a.epochs):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            xb, yb = x[i * a.batch : (i + 1) * a.batch], y[i * a.batch : (i + 1) * a.batch]
            opt.zero_grad(set_to_none=True)
            loss(ddp(xb), yb).backward()
            opt.step()
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if epoch > 0:
            rates.append(steps * a.batch / dt)
    mine = torch.tensor([sum(rates) / len(rates)], dtype=torch.float64, device=dev)
    every = [torch.zeros_like(mine) for _ in range(k)]
    dist.all_gather(every, mine)
    if rank == 0:
        per = [round(float(t.item()), 1) for t in every]
        result = {"k": k, "samples_per_s": round(sum(per), 1), "per_rank": per,
                  "epochs": a.epochs, "samples": a.samples, "batch": a.batch,
                  "rank0_epochs": [round(r, 1) for r in rates]}
        sys.stdout.write(f"BARE_RESULT {json.dumps(result)}\n")
        sys.stdout.flush()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
