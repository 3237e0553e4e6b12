"""The no_sync() probe, done right (ddp-nccl-facts.md §9, §10.10).

Blocks of `block_steps` forward+backward steps, all synced or all under `no_sync()`, interleaved
A B A B after a warm-up. The forward runs *inside* `no_sync()` (otherwise DDP still syncs), grads
are zeroed before every step (they would accumulate), and there is no optimizer step (unsynced
grads must never reach the weights). Per-step times come from CUDA events on cuda (read once at
the end of each block) and from the host clock on CPU. `synced − no_sync` is exposed
communication plus reducer overhead, not total communication time; the k=1 run is the control.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import models
from .data import Data, DataConfig
from .runtime import Runtime, WorkerError
from .timing import Clock, Mark, rebuilt_bucket_sizes

MODES = ("synced", "no_sync")


@dataclass(frozen=True)
class BlockStats:
    mode: str
    steps: int
    median_ms: float
    min_ms: float
    max_ms: float


def run_block(
    ddp: DDP,
    x: torch.Tensor,
    y: torch.Tensor,
    mode: str,
    steps: int,
    clock: Clock,
    loss_fn: nn.Module,
    on_step: Callable[[], None] | None = None,
) -> BlockStats:
    """`steps` fwd+bwd steps in one mode; grads zeroed before each step and after the block.
    `on_step` runs after each step is enqueued: it advances the rank's step counter, so ddptop's
    watchdog sees progress inside long blocks (CPU runs)."""
    marks: list[tuple[Mark, Mark]] = []
    for _ in range(steps):
        ddp.zero_grad(set_to_none=True)
        ctx = ddp.no_sync() if mode == "no_sync" else contextlib.nullcontext()
        start = clock.mark()
        with ctx:  # the forward must be inside no_sync
            loss = loss_fn(ddp(x), y)
            loss.backward()
        marks.append((start, clock.mark()))
        if on_step is not None:
            on_step()
    Clock.wait(marks[-1][1])
    ddp.zero_grad(set_to_none=True)
    times = [max(0.0, Clock.ms(a, b)) for a, b in marks]
    return BlockStats(mode, steps, statistics.median(times), min(times), max(times))


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=256, help="per-rank batch")
    p.add_argument("--model", choices=sorted(models.MODEL_SPECS), default="resnet18", help="model")
    p.add_argument(
        "--blocks",
        type=int,
        default=15,
        help="blocks per mode: N synced and N no_sync blocks, interleaved A B A B",
    )
    p.add_argument("--block-steps", type=int, default=10, help="steps per block")
    p.add_argument(
        "--warmup-steps", type=int, default=5, help="warm-up steps per mode, not reported"
    )
    p.add_argument(
        "--backend", choices=("nccl", "gloo", "auto"), default="auto", help="auto: nccl if CUDA"
    )
    p.add_argument("--seed", type=int, default=0, help="data and init seed")
    p.add_argument("--timeout-s", type=float, default=300.0, help="process-group timeout")


def run(args: argparse.Namespace) -> int:
    with Runtime("probe", args.backend, args.timeout_s) as rt:
        client = rt.client
        if args.batch < 1 or args.blocks < 1 or args.block_steps < 1:
            raise WorkerError("--batch, --blocks and --block-steps must be >= 1")
        torch.manual_seed(args.seed)
        data = Data(
            DataConfig("synthetic", "device", None, args.batch * rt.world_size, args.seed),
            batch=args.batch,
            rank=rt.rank,
            world_size=rt.world_size,
            device=rt.device,
        )
        x, y = data.fixed_batch()
        net = models.build_model(args.model, rt.device)
        spec = models.MODEL_SPECS[args.model]
        ddp = DDP(
            net,
            device_ids=[rt.local_rank] if rt.device.type == "cuda" else None,
            broadcast_buffers=False,  # the first no_sync forward would still broadcast BN buffers
            bucket_cap_mb=spec.bucket_cap_mb,  # None: DDP's default 25 MiB + 1 MiB first bucket
        )
        clock = Clock(rt.device)
        loss_fn = nn.CrossEntropyLoss()
        client.phase = "probe"
        client.log(
            "info",
            f"probe: k={rt.world_size}, model {args.model}, per-rank batch {args.batch}, "
            f"{args.blocks}x2 blocks of {args.block_steps} steps, timing {clock.method}",
        )
        def advance() -> None:
            client.step += 1

        for mode in MODES:  # warm-up, incl. DDP's bucket rebuild after the first synced step
            run_block(ddp, x, y, mode, args.warmup_steps, clock, loss_fn, advance)
        per_mode: dict[str, list[float]] = {m: [] for m in MODES}
        for block in range(2 * args.blocks):
            mode = MODES[block % 2]
            s = run_block(ddp, x, y, mode, args.block_steps, clock, loss_fn, advance)
            per_mode[mode].append(s.median_ms)
            client.send(
                "probe",
                block=block,
                mode=mode,
                steps=s.steps,
                median_ms=s.median_ms,
                min_ms=s.min_ms,
                max_ms=s.max_ms,
            )
        synced = statistics.median(per_mode["synced"])
        nosync = statistics.median(per_mode["no_sync"])
        summary = (
            f"probe k={rt.world_size}: synced {synced:.3f} ms, no_sync {nosync:.3f} ms, "
            f"difference {synced - nosync:.3f} ms (median of {args.blocks} block medians each)"
        )
        client.log("info", summary)
        if rt.rank == 0:
            print(summary, flush=True)
        client.send(
            "result",
            experiment="probe",
            samples_per_s=None,
            timed_epochs=0,
            params=models.count_params(net),
            grad_bytes=models.grad_bytes(net),
            bucket_bytes=rebuilt_bucket_sizes(ddp) or [],
        )
    return 0
