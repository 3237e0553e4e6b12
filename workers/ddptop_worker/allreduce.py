"""Bare fp32 all-reduce size sweep with nccl-tests' formulas (ddp-nccl-facts.md §4, §10.19).

Per size: barrier + synchronize (ranks start together), `warmup` untimed ops, barrier +
synchronize again, then `iters` back-to-back `all_reduce` calls bracketed by CUDA events on the
current stream (host clock on CPU), time per op = total / iters. algbw = bytes / t,
busbw = algbw * 2(k-1)/k, GB = 1e9 bytes.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .client import write_line
from .runtime import Runtime, WorkerError
from .timing import Clock


def sizes(min_bytes: int, max_bytes: int, factor: int, extra: list[int]) -> list[int]:
    """min, min*factor, ... up to max, plus the extra sizes within [min, max]; sorted, unique,
    each rounded down to a whole number of fp32 elements."""
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise WorkerError("need 4 <= --min-bytes <= --max-bytes and --factor >= 2")
    out: set[int] = set()
    s = min_bytes
    while s <= max_bytes:
        out.add(s)
        s *= factor
    out.update(e for e in extra if min_bytes <= e <= max_bytes)
    return sorted({(b // 4) * 4 for b in out})


def busbw_factor(k: int) -> float:
    return 2.0 * (k - 1) / k if k > 1 else 0.0


@dataclass(frozen=True)
class AllreduceSettings:
    min_bytes: int = 1024
    max_bytes: int = 268435456
    factor: int = 4
    extra_bytes: tuple[int, ...] = (67108864,)
    warmup: int = 5
    iters: int = 20
    backend: str = "auto"
    timeout_s: float = 300.0

    @staticmethod
    def from_args(a: argparse.Namespace) -> AllreduceSettings:
        return AllreduceSettings(
            min_bytes=a.min_bytes,
            max_bytes=a.max_bytes,
            factor=a.factor,
            extra_bytes=tuple(a.extra_bytes),
            warmup=a.warmup,
            iters=a.iters,
            backend=a.backend,
            timeout_s=a.timeout_s,
        )

    def sizes(self) -> list[int]:
        """The sweep's sizes; raises WorkerError for a bad range or counts."""
        if self.iters < 1 or self.warmup < 0:
            raise WorkerError("--iters must be >= 1 and --warmup >= 0")
        return sizes(self.min_bytes, self.max_bytes, self.factor, list(self.extra_bytes))


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--min-bytes", type=int, default=1024, help="smallest size")
    p.add_argument("--max-bytes", type=int, default=268435456, help="largest size")
    p.add_argument("--factor", type=int, default=4, help="size step factor")
    p.add_argument(
        "--extra-bytes",
        type=int,
        action="append",
        default=[67108864],
        help="extra sizes, repeatable, added to the default (64 MiB); only those within "
        "[min, max] are run",
    )
    p.add_argument("--warmup", type=int, default=5, help="untimed ops per size")
    p.add_argument("--iters", type=int, default=20, help="timed ops per size")
    p.add_argument(
        "--backend", choices=("nccl", "gloo", "auto"), default="auto", help="auto: nccl if CUDA"
    )
    p.add_argument("--timeout-s", type=float, default=300.0, help="process-group timeout")


def run(args: argparse.Namespace) -> int:
    return sweep(AllreduceSettings.from_args(args))


def sweep(s: AllreduceSettings) -> int:
    with Runtime("allreduce", s.backend, s.timeout_s) as rt:
        plan = s.sizes()
        client = rt.client
        clock = Clock(rt.device)
        k = rt.world_size
        client.send("plan", total_steps=len(plan) * (s.warmup + s.iters), phase="bench")
        client.phase = "bench"
        client.log(
            "info",
            f"all-reduce sweep: k={k}, {len(plan)} sizes {plan[0]}..{plan[-1]} B, "
            f"{s.warmup} warm-up + {s.iters} timed ops each, timing {clock.method}",
        )
        done = 0
        for nbytes in plan:
            buf = torch.ones(nbytes // 4, dtype=torch.float32, device=rt.device)
            dist.barrier()
            rt.synchronize()
            for _ in range(s.warmup):
                dist.all_reduce(buf)
            dist.barrier()
            rt.synchronize()
            start = clock.mark()
            for _ in range(s.iters):
                dist.all_reduce(buf)
            end = clock.mark()
            Clock.wait(end)
            rt.synchronize()
            t_s = max(Clock.ms(start, end), 1e-6) / 1000.0 / s.iters
            done += s.warmup + s.iters
            client.step = done
            algbw = nbytes / t_s / 1e9
            row = {
                "op": "all_reduce",
                "bytes": nbytes,
                "dtype": "float32",
                "iters": s.iters,
                "time_us": t_s * 1e6,
                "algbw_gbs": algbw,
                "busbw_gbs": algbw * busbw_factor(k),
            }
            client.send("bench", **row)
            if rt.rank == 0:
                write_line(
                    f"{nbytes:>12} B  {row['time_us']:10.1f} us  algbw {algbw:8.2f} GB/s  "
                    f"busbw {row['busbw_gbs']:8.2f} GB/s"
                )
            del buf
        client.send(
            "result",
            experiment="allreduce",
            samples_per_s=None,
            timed_epochs=0,
            params=None,
            grad_bytes=None,
            bucket_bytes=[],
        )
    return 0
