"""Loop shape 'fsdp2' (issue 43): FSDP2 (`torch.distributed.fsdp.fully_shard`) on loop.py's MLP,
each Linear sharded and then the root; prints its own samples/s as loop.py does.

A step is an optimizer step on one micro-batch (`--batch` samples per rank). Every rank times
steps `--warmup + 1 .. --steps` (ddptop leaves its first 3 steps out too) with its host clock,
synchronizing the GPU at the two ends only, and rank 0 prints `script samples/s: X` (each rank's
samples over its own window, summed over the ranks: ddptop's definition of a run's figure) and
`script global samples/s (rank 0's clock): Y`. Runs on gloo/CPU (torch 2.11 supports it) and on
NCCL, one GPU per rank. Nothing here knows about ddptop.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from loop import Net, setup, sync
from torch import nn
from torch.distributed.fsdp import fully_shard


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--hidden", type=int, default=512)
    args = p.parse_args()
    device, _ = setup()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = Net(args.hidden, with_unused=False).to(device)
    for layer in net.body:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(rank)
    data = [(torch.randn(args.batch, 28 * 28, generator=g).to(device),
             torch.randint(0, 10, (args.batch,), generator=g).to(device)) for _ in range(8)]
    t0 = 0.0
    for step in range(1, args.steps + 1):
        x, y = data[step % len(data)]
        opt.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        opt.step()
        if step == args.warmup:
            sync(device)
            t0 = time.perf_counter()
    sync(device)
    seconds = time.perf_counter() - t0
    timed = args.steps - args.warmup
    samples = timed * args.batch
    rates = torch.tensor([samples / seconds], dtype=torch.float64, device=device)
    dist.all_reduce(rates)
    if rank == 0:
        print(f"script samples/s: {rates.item():.1f} (sum of {world} ranks' own; steps "
              f"{args.warmup + 1}..{args.steps}, {timed} steps, {samples} samples/rank, rank 0 "
              f"{seconds:.3f} s)", flush=True)
        print(f"script global samples/s (rank 0's clock): {samples * world / seconds:.1f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
