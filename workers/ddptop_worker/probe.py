"""The no_sync() probe, done right (ddp-nccl-facts.md §9, §10.10).

Blocks of `block_steps` forward+backward steps, all synced or all under `no_sync()`, interleaved
A B A B after a warm-up. The forward runs *inside* `no_sync()` (otherwise DDP still syncs), grads
are zeroed before every step (they would accumulate), and there is no optimizer step (unsynced
grads must never reach the weights). Per-step times come from CUDA events on cuda (read once at
the end of each block) and from the host clock on CPU. `synced − no_sync` is exposed
communication plus reducer overhead, not total communication time; the k=1 run is the control.

DDP's own logger must not add work to one arm only. In torch 2.11 it samples runtime stats at
the start of a synced forward when the number of synced iterations so far is 1..10 or a multiple
of its sample rate (`Reducer::should_collect_runtime_stats` in reducer.cpp; the rule is in the
docstring of `DistributedDataParallel._set_ddp_runtime_logging_sample_rate`,
torch/nn/parallel/distributed.py:2375-2393, and the default rate `kDDPRuntimeLoggingSampleRate =
100` in torch/include/torch/csrc/distributed/c10d/reducer.hpp:33). On CUDA each sample calls
cudaEventSynchronize on the previous iteration's timer events (`Logger::set_runtime_stats_and_log`,
called from `_pre_forward`, distributed.py:1566), so the host loses its lead over the GPU;
no_sync forwards never sample. torch 2.11 allows both remedies and the probe uses both: a synced
warm-up of at least 11 steps takes the first ten samples, and the sample rate is raised to
INT_MAX while probing, which removes the every-100th.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import book, models
from .client import Client, write_line
from .data import Data, DataConfig
from .runtime import Runtime, WorkerError
from .timing import Clock, Mark, rebuilt_bucket_sizes

MODES = ("synced", "no_sync")
LOGGER_FIRST_ITERATIONS = 10  # DDP samples after synced iterations 1..10 (reducer.cpp)
DEFAULT_SAMPLE_RATE = 100  # kDDPRuntimeLoggingSampleRate, reducer.hpp:33
NO_SAMPLING = 2**31 - 1  # the rate is a C++ int; iteration counts never reach a multiple


def live_label(timing_hook: bool) -> str:
    """How a probe inside a training run differs from the standalone one."""
    hook = "timing hook on" if timing_hook else "no timing hook"
    return f"live (training DDP, buffers broadcast, {hook})"


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


def send_block(client: Client, block: int, s: BlockStats, *, live: bool) -> None:
    client.send(
        "probe",
        block=block,
        mode=s.mode,
        steps=s.steps,
        median_ms=s.median_ms,
        min_ms=s.min_ms,
        max_ms=s.max_ms,
        live=live,
    )


def synced_warmup_steps(requested: int, synced_so_far: int) -> int:
    """Synced warm-up steps so that DDP's first ten logger samples all fall in the warm-up
    (the tenth is taken at the forward of synced iteration 11)."""
    return max(requested, LOGGER_FIRST_ITERATIONS + 1 - synced_so_far)


def set_logger_sample_rate(ddp: DDP, rate: int) -> bool:
    """False where this torch has no such switch (a private DDP API)."""
    try:
        ddp._set_ddp_runtime_logging_sample_rate(rate)  # type: ignore[no-untyped-call]
    except (AttributeError, RuntimeError, ValueError):
        return False
    return True


def last_sampled_iteration(ddp: DDP) -> int | None:
    """The synced-iteration count at DDP's latest logger sample (`iteration` in its data)."""
    try:
        value = ddp._get_ddp_logging_data().get("iteration")  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - private API
        return None
    return int(value) if isinstance(value, int) else None


# ---------------------------------------------------------------------- the probe experiment


@dataclass(frozen=True)
class ProbeSettings:
    batch: int = 256
    model: str = "resnet18"
    blocks: int = 15
    block_steps: int = 10
    warmup_steps: int = 5
    backend: str = "auto"
    seed: int = 0
    timeout_s: float = 300.0

    @staticmethod
    def from_args(a: argparse.Namespace) -> ProbeSettings:
        return ProbeSettings(
            batch=a.batch,
            model=a.model,
            blocks=a.blocks,
            block_steps=a.block_steps,
            warmup_steps=a.warmup_steps,
            backend=a.backend,
            seed=a.seed,
            timeout_s=a.timeout_s,
        )

    def check(self) -> None:
        if self.batch < 1 or self.blocks < 1 or self.block_steps < 1 or self.warmup_steps < 0:
            raise WorkerError(
                "--batch, --blocks (DDPTOP_PROBE_BLOCKS) and --block-steps must be >= 1, "
                "--warmup-steps >= 0"
            )

    @property
    def synced_warmup(self) -> int:
        return synced_warmup_steps(self.warmup_steps, 0)

    @property
    def total_steps(self) -> int:
        return self.synced_warmup + self.warmup_steps + 2 * self.blocks * self.block_steps


def blocks_default() -> int:
    """15 blocks per mode, or `DDPTOP_PROBE_BLOCKS` (`ddptop run probe --env
    DDPTOP_PROBE_BLOCKS=4`: a quicker probe with a wider spread). 0 when it is not a whole
    number, which `ProbeSettings.check` refuses with the usual line."""
    v = os.environ.get("DDPTOP_PROBE_BLOCKS", "").strip()
    if not v:
        return 15
    return int(v) if v.isdigit() else 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=256, help="per-rank batch")
    p.add_argument("--model", choices=sorted(models.MODEL_SPECS), default="resnet18", help="model")
    p.add_argument(
        "--blocks",
        type=int,
        default=blocks_default(),
        help="blocks per mode: N synced and N no_sync blocks, interleaved A B A B "
        "(default 15, or DDPTOP_PROBE_BLOCKS)",
    )
    p.add_argument("--block-steps", type=int, default=10, help="steps per block")
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=5,
        help="warm-up steps per mode, not reported (synced: at least 11, DDP's logger samples)",
    )
    p.add_argument(
        "--backend", choices=("nccl", "gloo", "auto"), default="auto", help="auto: nccl if CUDA"
    )
    p.add_argument("--seed", type=int, default=0, help="data and init seed")
    p.add_argument("--timeout-s", type=float, default=300.0, help="process-group timeout")
    book.add_args(p)


def run(args: argparse.Namespace) -> int:
    book.apply(args.torch_settings)
    return probe(ProbeSettings.from_args(args))


def probe(s: ProbeSettings) -> int:
    with Runtime("probe", s.backend, s.timeout_s) as rt:
        client = rt.client
        s.check()
        torch.manual_seed(s.seed)
        data = Data(
            DataConfig("synthetic", "device", None, s.batch * rt.world_size, s.seed),
            batch=s.batch,
            rank=rt.rank,
            world_size=rt.world_size,
            device=rt.device,
        )
        client.send("plan", total_steps=s.total_steps, phase="probe")
        x, y = data.fixed_batch()
        net = models.build_model(s.model, rt.device)
        spec = models.MODEL_SPECS[s.model]
        ddp = rt.wrap_ddp(
            net,
            broadcast_buffers=False,  # the first no_sync forward would still broadcast BN buffers
            bucket_cap_mb=spec.bucket_cap_mb,  # None: DDP's default 25 MiB + 1 MiB first bucket
        )
        client.phase = "probe"
        sampling_off = set_logger_sample_rate(ddp, NO_SAMPLING)
        clock = Clock(rt.device)
        loss_fn = nn.CrossEntropyLoss()
        client.log(
            "info",
            f"probe: k={rt.world_size}, model {s.model}, per-rank batch {s.batch}, "
            f"{s.blocks}x2 blocks of {s.block_steps} steps after {s.synced_warmup} synced + "
            f"{s.warmup_steps} no_sync warm-up steps, timing {clock.method}",
        )

        def advance() -> None:
            client.step += 1

        # Warm-up: DDP's bucket rebuild after the first synced step, and its logger's samples.
        run_block(ddp, x, y, "synced", s.synced_warmup, clock, loss_fn, advance)
        if s.warmup_steps > 0:
            run_block(ddp, x, y, "no_sync", s.warmup_steps, clock, loss_fn, advance)
        per_mode: dict[str, list[float]] = {m: [] for m in MODES}
        for block in range(2 * s.blocks):
            mode = MODES[block % 2]
            st = run_block(ddp, x, y, mode, s.block_steps, clock, loss_fn, advance)
            per_mode[mode].append(st.median_ms)
            send_block(client, block, st, live=False)
        sampled = last_sampled_iteration(ddp)
        client.log(
            "info",
            f"DDP logger: last runtime-stats sample at synced iteration {sampled} "
            f"(synced warm-up {s.synced_warmup} steps; sample rate "
            f"{'raised to INT_MAX' if sampling_off else 'unchanged: not settable here'} "
            "for the probe)",
        )
        synced = statistics.median(per_mode["synced"])
        nosync = statistics.median(per_mode["no_sync"])
        summary = (
            f"probe k={rt.world_size}: synced {synced:.3f} ms, no_sync {nosync:.3f} ms, "
            f"difference {synced - nosync:.3f} ms (median of {s.blocks} block medians each)"
        )
        client.log("info", summary)
        if rt.rank == 0:
            write_line(summary)
        client.send(
            "result",
            experiment="probe",
            samples_per_s=None,
            timed_epochs=0,
            params=models.count_params(net),
            grad_bytes=models.grad_bytes(net),
            bucket_bytes=rebuilt_bucket_sizes(ddp) or [],
            **book.observed(),
        )
    return 0
