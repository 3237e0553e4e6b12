"""A typical DDP training script, written the way the PyTorch tutorials write one.

Nothing in it knows about ddptop. Run it yourself:

    torchrun --standalone --nproc-per-node=2 examples/train_ddp.py            # gloo on CPU
    torchrun --standalone --nproc-per-node=2 examples/train_ddp.py --backend nccl

or under ddptop, unchanged:

    ddptop attach --k 2 -- examples/train_ddp.py --epochs 3

One process per rank (torchrun sets RANK, LOCAL_RANK, WORLD_SIZE), one GPU per rank with NCCL,
a DistributedSampler + DataLoader over a synthetic FashionMNIST-shaped dataset (a fixed random
teacher labels random 28x28 images, so the loss really falls), a small MLP, SGD.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="DDP training of a small MLP on synthetic data")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--samples", type=int, default=2048, help="dataset size (all ranks)")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument(
        "--backend",
        default=os.environ.get("DDP_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo"),
        help="process-group backend (default: $DDP_BACKEND, else nccl with CUDA, else gloo)",
    )
    return p.parse_args(argv)


def synthetic_dataset(n: int, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 28 * 28, generator=g)
    teacher = torch.randn(28 * 28, 10, generator=g)
    y = (x @ teacher).argmax(dim=1)
    return TensorDataset(x, y)


def build_model(hidden: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(28 * 28, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 10),
    )


def main(
    argv: Sequence[str] | None = None,
    setup: Callable[[DDP], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> None:
    args = parse_args(argv)
    dist.init_process_group(backend=args.backend)
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")

    torch.manual_seed(0)
    dataset = synthetic_dataset(args.samples)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        drop_last=True,
    )

    model = build_model(args.hidden).to(device)
    ddp_model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    if setup is not None:
        setup(ddp_model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        ddp_model.train()
        total, batches = 0.0, 0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = loss_fn(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if on_step is not None:
                on_step(step, x.shape[0])
            total += loss.item()
            batches += 1
        if rank == 0:
            print(f"epoch {epoch}: mean loss {total / max(1, batches):.6f} over {batches} batches")

    if rank == 0:
        print("done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
