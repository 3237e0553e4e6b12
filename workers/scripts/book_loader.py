"""The book's loader loop (d2l's multi-GPU chapter), independent of ddptop: its data pipeline.

    torchrun --standalone --nproc-per-node=K workers/scripts/book_loader.py [--batch 256]
             [--samples 60000] [--epochs 2] [--data-dir DIR] [--model resnet18|tiny]

The chapter's script as it feeds the model: FashionMNIST as PIL images through
`transforms.Compose([transforms.Resize(64), transforms.ToTensor()])`, a `DistributedSampler`,
`DataLoader(dataset, batch_size, sampler=sampler, num_workers=2)` with every other argument at
its default (no pinning, workers started afresh each epoch), `sampler.set_epoch(epoch)`, and a
plain `X.to(device), y.to(device)` per batch; then zero_grad(set_to_none=True), forward,
backward, SGD step. The book's two settings are applied (`--no-book-settings` leaves PyTorch's
defaults). It imports nothing from ddptop_worker: the d2l ResNet-18 is bare_d2l.py's copy.

The data: torchvision's `FashionMNIST` from `--data-dir` (torchvision's layout,
`DIR/FashionMNIST/raw/`, never downloaded: GPU machines often have no network), else
synthetic FashionMNIST-shaped images (28x28 uint8, labels 0-9) in torchvision's own
FashionMNIST class, so each sample still goes through its `__getitem__` (tensor -> PIL image ->
transforms); the first line says which.

Epoch 0 is warm-up; each later epoch is timed between two synchronizes, the whole loader loop
(its workers' start, the last partial batch, their shutdown) included, and its samples/s is the
samples it trained on over that time. Rank 0 prints one line per timed epoch and a last line
`BOOK_RESULT {json}` with the sum over ranks of each rank's mean samples/s (ddptop's figure),
for scripts/device/loop_overhead.sh and scripts/bench/loader_cpu.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bare_d2l import resnet18  # noqa: E402 - the same directory, not a package


def tiny() -> nn.Sequential:
    """ddptop's `--model tiny` (a small strided CNN), for CPU-sized runs; written out again."""

    def block(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        *block(1, 16, 1), *block(16, 32, 2), *block(32, 64, 2), *block(64, 128, 2),
        *block(128, 256, 2), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(256, 10),
    )


def dataset(data_dir: str | None, samples: int) -> tuple[Any, str]:
    from torchvision import datasets, transforms

    trans = transforms.Compose([transforms.Resize(64), transforms.ToTensor()])
    if data_dir:
        ds = datasets.FashionMNIST(root=data_dir, train=True, transform=trans, download=False)
        ds.data, ds.targets = ds.data[:samples], ds.targets[:samples]
        return ds, f"FashionMNIST from {data_dir}"
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 10, (samples,), generator=g)
    images = torch.randint(0, 256, (samples, 28, 28), generator=g, dtype=torch.uint8)

    class Synthetic(datasets.FashionMNIST):
        def __init__(self) -> None:  # torchvision's constructor reads files: bypassed
            datasets.VisionDataset.__init__(self, root=None, transform=trans)
            self.train = True
            self.data, self.targets = images, labels

    return Synthetic(), "synthetic FashionMNIST-shaped (28x28 uint8 as PIL images)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=256, help="per-rank batch (weak scaling)")
    p.add_argument("--samples", type=int, default=60000, help="samples per epoch, all ranks")
    p.add_argument("--epochs", type=int, default=2, help="epochs; epoch 0 is warm-up")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--model", choices=("resnet18", "tiny"), default="resnet18")
    p.add_argument("--data-dir", default=None, help="torchvision FashionMNIST root (no download)")
    p.add_argument("--no-book-settings", action="store_true", help="PyTorch's defaults instead")
    a = p.parse_args()
    if not a.no_book_settings:
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.benchmark = True
    rank, k = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if "MASTER_ADDR" not in os.environ:  # plain `python book_loader.py`: one rank
        # A free port, not a fixed one: tests may run it beside other process groups.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=k)
    torch.manual_seed(0)
    if a.epochs < 2:
        sys.exit("book_loader: need --epochs >= 2 (epoch 0 is warm-up)")
    ds, what = dataset(a.data_dir, a.samples)
    if rank == 0:
        print(f"book_loader: k={k}, data {what}, model {a.model}, batch {a.batch}", flush=True)
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, a.batch, sampler=sampler, num_workers=2)
    net = resnet18() if a.model == "resnet18" else tiny()
    net = net.to(dev)
    net(torch.zeros(2, 1, 64, 64, device=dev))  # materialize the Lazy modules before DDP
    # ddptop's tiny model runs with 1 MiB buckets (its models.MODEL_SPECS); ResNet-18 with DDP's.
    kw: dict[str, Any] = {"bucket_cap_mb": 1.0} if a.model == "tiny" else {}
    ddp = nn.parallel.DistributedDataParallel(net, device_ids=[local] if cuda else None, **kw)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr)
    loss = nn.CrossEntropyLoss()
    rates: list[float] = []
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        n = 0
        for X, y in loader:
            X, y = X.to(dev), y.to(dev)
            opt.zero_grad(set_to_none=True)
            loss(ddp(X), y).backward()
            opt.step()
            n += int(y.shape[0])
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if epoch > 0:
            rates.append(n / dt)
            if rank == 0:
                print(f"epoch {epoch}: {n} samples in {dt:.2f} s, {n / dt:.1f} samples/s", flush=True)
    mine = torch.tensor([sum(rates) / len(rates)], dtype=torch.float64, device=dev)
    every = [torch.zeros_like(mine) for _ in range(k)]
    dist.all_gather(every, mine)
    if rank == 0:
        per = [round(float(t.item()), 1) for t in every]
        result = {"k": k, "samples_per_s": round(sum(per), 1), "per_rank": per,
                  "epochs": a.epochs, "samples": a.samples, "batch": a.batch, "model": a.model,
                  "data": what, "rank0_epochs": [round(r, 1) for r in rates]}
        sys.stdout.write(f"BOOK_RESULT {json.dumps(result)}\n")
        sys.stdout.flush()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
