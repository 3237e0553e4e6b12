"""The training loop the shape scripts share (issue 43): DDP loops as people write them, each
printing its own steady-state throughput so ddptop's figure can be checked against it.

A step is an optimizer step: `--accum` micro-batches, the first `--accum - 1` under
`ddp.no_sync()`, the last one synchronizing. Every rank times steps `--warmup + 1 .. --steps`
(ddptop leaves its first 3 steps out too) with its host clock, synchronizing the GPU only at the
two ends, and rank 0 prints

    script samples/s: 1234.5 (sum of 2 ranks' own; steps 4..40, 37 steps, ...)
    script global samples/s (rank 0's clock): 1230.1

The first is the figure defined as ddptop defines a run's (each rank's samples over its own
window, summed over ranks), so the two compare like with like; the second is what a script
usually prints. They differ only by when each rank's window starts and ends (a rank descheduled
at either end on a busy CPU). Samples are every micro-batch. Nothing here knows about ddptop.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args(argv: Sequence[str] | None, **defaults: object) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="a DDP loop shape that prints its own samples/s")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps")
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the figure")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--batch", type=int, default=32, help="micro-batch size per rank")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--comm-hook", choices=["none", "fp16"], default="none")
    p.add_argument("--compile", choices=["none", "outer", "inner"], default="none",
                   help="outer: torch.compile(DDP(model)); inner: DDP(torch.compile(model))")
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--static-graph", action="store_true")
    p.add_argument("--find-unused", action="store_true")
    p.add_argument("--odd-step", type=int, default=0,
                   help="this step runs on half-size micro-batches (a compiled model recompiles "
                   "for the new shape); the script leaves the step out of its figure")
    p.set_defaults(**defaults)
    return p.parse_args(argv)


class Net(nn.Module):
    """An MLP; `unused` is a head that forward never calls (DDP needs find_unused_parameters)."""

    def __init__(self, hidden: int, with_unused: bool) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(28 * 28, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 10),
        )
        self.unused = nn.Linear(hidden, 10) if with_unused else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def setup() -> tuple[torch.device, list[int] | None]:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local), [local]
    return torch.device("cpu"), None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: Sequence[str] | None = None, **defaults: object) -> None:
    args = parse_args(argv, **defaults)
    device, device_ids = setup()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net: nn.Module = Net(args.hidden, args.find_unused).to(device)
    if args.compile == "inner":
        net = torch.compile(net, backend=args.compile_backend)  # type: ignore[assignment]
    ddp = DDP(net, device_ids=device_ids, static_graph=args.static_graph,
              find_unused_parameters=args.find_unused)
    if args.comm_hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    model: nn.Module = ddp
    if args.compile == "outer":
        model = torch.compile(ddp, backend=args.compile_backend)  # type: ignore[assignment]
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(rank)
    n_batches = 8  # a few fixed batches, cycled: no loader in the way
    data = [(torch.randn(args.batch, 28 * 28, generator=g).to(device),
             torch.randint(0, 10, (args.batch,), generator=g).to(device))
            for _ in range(n_batches)]
    t0 = 0.0
    left_out = t_odd = 0.0  # the odd step: seconds inside the timed window, its start
    mb = 0
    for step in range(1, args.steps + 1):
        odd = step == args.odd_step
        if odd:
            sync(device)
            t_odd = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for micro in range(args.accum):
            x, y = data[mb % n_batches]
            if odd:
                x, y = x[: args.batch // 2], y[: args.batch // 2]
            mb += 1
            last = micro == args.accum - 1
            with contextlib.nullcontext() if last else ddp.no_sync():
                loss = loss_fn(model(x), y) / args.accum
                loss.backward()
        opt.step()
        if odd:
            sync(device)
            left_out += time.perf_counter() - t_odd if step > args.warmup else 0.0
        if step == args.warmup:
            sync(device)
            t0 = time.perf_counter()
    sync(device)
    seconds = time.perf_counter() - t0 - left_out
    timed = args.steps - args.warmup - (1 if args.odd_step > args.warmup else 0)
    samples = timed * args.accum * args.batch  # this rank's
    rates = torch.tensor([samples / seconds], dtype=torch.float64, device=device)
    dist.all_reduce(rates)  # after the timed window: the sum of the ranks' own samples/s
    if rank == 0:
        print(f"script samples/s: {rates.item():.1f} (sum of {world} ranks' own; steps "
              f"{args.warmup + 1}..{args.steps}, {timed} steps"
              f"{f' (step {args.odd_step} left out)' if args.odd_step > args.warmup else ''}, "
              f"{samples} samples/rank, rank 0 "
              f"{seconds:.3f} s)", flush=True)
        print(f"script global samples/s (rank 0's clock): {samples * world / seconds:.1f}",
              flush=True)
    dist.destroy_process_group()
