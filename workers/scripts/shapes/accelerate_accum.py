"""Loop shape 'accelerate_accum' (issue 43): a Hugging Face Accelerate loop as its documentation
writes one, `Accelerator(gradient_accumulation_steps=4)`, `accelerator.prepare`, `with
accelerator.accumulate(model)`, `accelerator.backward(loss)`, `optimizer.step()` and
`optimizer.zero_grad()` on every micro-batch (Accelerate skips them, and DDP's all-reduce, until
the 4th); prints its own samples/s.

A step is an optimizer step: `--accum` micro-batches of `--batch` samples per rank (the batches
come from `accelerator.prepare`'s sharded DataLoader over a dataset of exactly `--steps` optimizer
steps per rank). Every rank times optimizer steps `--warmup + 1 .. --steps` (the steps where
`accelerator.sync_gradients` is true; ddptop leaves its first 3 steps out too) with its host
clock, synchronizing the GPU at the two ends only, and rank 0 prints `script samples/s: X` (each
rank's samples over its own window, summed over the ranks, ddptop's definition of a run's figure)
and `script global samples/s (rank 0's clock): Y`. Launched by torchrun (Accelerate reads its
environment: gloo on CPU, where it needs `cpu=True`, NCCL with a GPU per rank). Nothing here
knows about ddptop.
"""

from __future__ import annotations

import argparse
import time

import torch
from accelerate import Accelerator
from loop import Net
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40, help="optimizer steps")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--accum", type=int, default=4, help="gradient_accumulation_steps")
    p.add_argument("--batch", type=int, default=32, help="micro-batch size per rank")
    p.add_argument("--hidden", type=int, default=512)
    args = p.parse_args()
    # On a CPU Accelerate forms a process group only when told it runs on the CPU (`cpu=True`, or
    # ACCELERATE_USE_CPU=1 as `accelerate launch --cpu` sets): without it each torchrun rank
    # trains alone (DistributedType.NO).
    accelerator = Accelerator(cpu=not torch.cuda.is_available(),
                              gradient_accumulation_steps=args.accum)
    world = accelerator.num_processes
    torch.manual_seed(0)
    model = Net(args.hidden, with_unused=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    n = args.steps * args.accum * args.batch * world
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(n, 28 * 28, generator=g), torch.randint(0, 10, (n,), generator=g))
    loader = DataLoader(ds, batch_size=args.batch, shuffle=False)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    loss_fn = nn.CrossEntropyLoss()
    device = accelerator.device

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step = 0
    t0 = 0.0
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = loss_fn(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            step += 1
            if step == args.warmup:
                sync()
                t0 = time.perf_counter()
    sync()
    seconds = time.perf_counter() - t0
    timed = step - args.warmup
    samples = timed * args.accum * args.batch
    rates = torch.tensor([samples / seconds], dtype=torch.float64, device=device)
    rates = accelerator.reduce(rates, reduction="sum")
    if accelerator.is_main_process:
        print(f"script samples/s: {rates.item():.1f} (sum of {world} ranks' own; optimizer "
              f"steps {args.warmup + 1}..{step}, {timed} steps of {args.accum} micro-batches, "
              f"{samples} samples/rank, rank 0 {seconds:.3f} s)", flush=True)
        print(f"script global samples/s (rank 0's clock): {samples * world / seconds:.1f}",
              flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
