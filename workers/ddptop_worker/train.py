"""DDP training (the book's weak/strong scaling experiments) with per-step, per-bucket and
per-epoch reports to ddptop.

Epoch 0 is warm-up (reported with warmup:true and never counted). Step messages are resolved one
or two steps late from CUDA events (no per-step synchronize) or, on gloo/CPU, from host timers.
The comm-hook bucket timeline is recorded only after DDP's bucket rebuild (>= 2 steps in).
Ranks agree on ddptop's probe/stop commands every `--control-every` steps over a small gloo group.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import models
from .client import Client
from .faults import Fault
from .data import Data, DataConfig
from .probe import run_block
from .runtime import Runtime, WorkerError
from .timing import (
    BucketTimer,
    Clock,
    Pending,
    StepMarks,
    bucket_timeline,
    parse_bucket_sizes,
    rebuilt_bucket_sizes,
)

REBUILD_MIN_STEPS = 2  # never time buckets before this many steps (iteration 0 has one bucket)
REBUILD_GIVE_UP_STEPS = 8  # then time whatever layout there is, marked rebuilt:false
MEMORY_EVERY = 50


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--experiment", choices=("weak", "strong"), default="weak", help="scaling experiment"
    )
    p.add_argument(
        "--batch",
        type=int,
        default=256,
        help="weak: per-rank batch; strong: global batch, per-rank = B // k",
    )
    p.add_argument("--epochs", type=int, default=2, help="epochs, epoch 0 is warm-up")
    p.add_argument(
        "--samples", type=int, default=60000, help="samples per epoch, split across ranks"
    )
    p.add_argument("--model", choices=sorted(models.MODEL_SPECS), default="resnet18", help="model")
    p.add_argument(
        "--data",
        choices=("synthetic", "real", "auto"),
        default="auto",
        help="auto: real if --data-dir (or $DDPTOP_DATASET_DIR) has the raw files, else synthetic",
    )
    p.add_argument(
        "--data-path", choices=("loader", "device"), default="device", help="input pipeline"
    )
    p.add_argument(
        "--data-dir",
        default=os.environ.get("DDPTOP_DATASET_DIR") or None,
        help="folder with FashionMNIST raw files (default: $DDPTOP_DATASET_DIR)",
    )
    p.add_argument(
        "--backend", choices=("nccl", "gloo", "auto"), default="auto", help="auto: nccl if CUDA"
    )
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate")
    p.add_argument("--seed", type=int, default=0, help="data and init seed")
    p.add_argument(
        "--no-instrument",
        dest="instrument",
        action="store_false",
        help="bare DDP loop: no hook, no events, only hello/result/bye (overhead baseline)"
        "%(default).0s",
    )
    p.add_argument(
        "--buckets-every", type=int, default=1, help="send a buckets message every N steps"
    )
    p.add_argument(
        "--control-every", type=int, default=5, help="ranks agree on commands every N steps"
    )
    p.add_argument(
        "--probe-block-steps", type=int, default=10, help="steps per probe block (probe_on)"
    )
    p.add_argument("--timeout-s", type=float, default=300.0, help="process-group timeout")


@dataclass
class EpochStats:
    epoch: int
    warmup: bool
    steps: int = 0
    samples: int = 0
    seconds: float = 0.0
    data_wait_ms: float = 0.0
    excluded_s: float = 0.0  # time spent in probe blocks, not training

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Trainer:
    args: argparse.Namespace
    rt: Runtime
    client: Client
    data: Data
    net: nn.Module
    ddp: DDP
    opt: torch.optim.Optimizer
    clock: Clock
    per_rank_batch: int
    btimer: BucketTimer | None = None
    pending: Pending = field(default_factory=Pending)
    loss_fn: nn.Module = field(default_factory=nn.CrossEntropyLoss)
    global_step: int = 0
    probe_block: int = 0
    layout: list[int] | None = None
    last_loss: torch.Tensor | None = None
    fault: Fault | None = field(default_factory=Fault.from_env)

    @property
    def instrument(self) -> bool:
        return bool(self.args.instrument)

    # ------------------------------------------------------------------ one step

    def step(self, x: torch.Tensor, y: torch.Tensor, sm: StepMarks) -> None:
        mark = self.clock.mark if self.instrument else None
        self.opt.zero_grad(set_to_none=True)
        if self.btimer is not None:
            sm.buckets = self.btimer.begin_step()
        if mark:
            sm.marks["fwd0"] = mark()
        loss = self.loss_fn(self.ddp(x), y)
        if mark:
            sm.marks["bwd0"] = mark()
        loss.backward()
        if mark:
            sm.marks["bwd1"] = mark()
        self.opt.step()
        if mark:
            sm.marks["opt1"] = mark()
        if self.btimer is not None:
            self.btimer.end_step()
        self.last_loss = loss.detach()

    def emit(self, sm: StepMarks) -> None:
        m, info = sm.marks, sm.info
        step_no = int(info["step"])
        self.client.send(
            "step",
            step=step_no,
            epoch=info["epoch"],
            warmup=info["warmup"],
            sync=True,
            samples=info["samples"],
            fwd_ms=max(0.0, Clock.ms(m["fwd0"], m["bwd0"])),
            bwd_ms=max(0.0, Clock.ms(m["bwd0"], m["bwd1"])),
            opt_ms=max(0.0, Clock.ms(m["bwd1"], m["opt1"])),
            data_ms=max(0.0, float(info["data_ms"])),
            step_ms=max(0.0, Clock.ms(m["start"], m["opt1"])),
            timing=self.clock.method,
        )
        every = max(1, int(self.args.buckets_every))
        if sm.buckets is not None and step_no % every == 0:
            spans, bwd_compute, exposed = bucket_timeline(sm.buckets, m["bwd0"], m["bwd1"])
            if spans:
                self.client.send(
                    "buckets",
                    step=step_no,
                    rebuilt=self.layout is not None,
                    bwd_compute_ms=bwd_compute,
                    exposed_ms=exposed,
                    buckets=[
                        {
                            "index": s.index,
                            "bytes": s.nbytes,
                            "ready_ms": s.ready_ms,
                            "start_ms": s.start_ms,
                            "done_ms": s.done_ms,
                        }
                        for s in spans
                    ],
                )

    def flush(self, force: bool = False) -> None:
        for sm in self.pending.pop_ready(force_all=force):
            self.emit(sm)

    def after_step(self) -> None:
        """Start bucket timing once DDP reports its rebuilt layout; memory now and then."""
        bt = self.btimer
        if bt is not None and not bt.recording and self.global_step >= REBUILD_MIN_STEPS:
            self.layout = rebuilt_bucket_sizes(self.ddp)
            if self.layout is not None:
                bt.recording = True
                self.client.log(
                    "info",
                    f"buckets rebuilt: {len(self.layout)} buckets, {sum(self.layout)} bytes "
                    f"({', '.join(str(b) for b in self.layout)}); timing buckets from step "
                    f"{self.global_step + 1}",
                )
            elif self.global_step >= REBUILD_GIVE_UP_STEPS:
                bt.recording = True
                self.client.log(
                    "warn", "DDP reported no rebuilt bucket layout; timing the buckets as they are"
                )
        if (
            self.instrument
            and self.rt.device.type == "cuda"
            and self.global_step % MEMORY_EVERY == 0
        ):
            self.send_memory()

    def send_memory(self) -> None:
        if self.rt.device.type != "cuda":
            return
        dev = self.rt.device
        self.client.send(
            "memory",
            allocated_bytes=int(torch.cuda.memory_allocated(dev)),
            reserved_bytes=int(torch.cuda.memory_reserved(dev)),
            peak_bytes=int(torch.cuda.max_memory_allocated(dev)),
        )

    # ------------------------------------------------------------------ probe blocks

    def advance(self) -> None:
        """One more iteration done (probe steps count too: the step counter is liveness)."""
        self.global_step += 1
        self.client.step = self.global_step

    def probe_pair(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One synced and one no_sync block on the last batch (fwd+bwd, no optimizer step)."""
        self.flush(force=True)
        self.client.phase = "probe"
        steps = max(1, int(self.args.probe_block_steps))
        for mode in ("synced", "no_sync"):
            s = run_block(self.ddp, x, y, mode, steps, self.clock, self.loss_fn, self.advance)
            self.client.send(
                "probe",
                block=self.probe_block,
                mode=mode,
                steps=s.steps,
                median_ms=s.median_ms,
                min_ms=s.min_ms,
                max_ms=s.max_ms,
            )
            self.probe_block += 1
        self.client.phase = "train"

    # ------------------------------------------------------------------ epochs

    def run_epoch(self, epoch: int) -> tuple[EpochStats, bool]:
        """Train one epoch; returns its stats and whether a stop was agreed."""
        # Epoch 0 is warm-up, unless it is the only one (then it is all there is to time).
        st = EpochStats(epoch, warmup=epoch == 0 and self.args.epochs > 1)
        inst = self.instrument
        every = max(1, int(self.args.control_every))
        self.rt.synchronize()
        t_epoch = time.perf_counter()
        it = self.data.epoch(epoch)
        last: tuple[torch.Tensor, torch.Tensor] | None = None
        stop = False
        i = 0
        while i < self.data.steps_per_epoch:
            if self.global_step % every == 0 or (i == 0 and epoch > 0):
                probe, stop = self.rt.agree()
                if stop:
                    break
                if probe and last is not None:
                    t_probe = time.perf_counter()
                    self.probe_pair(*last)
                    st.excluded_s += time.perf_counter() - t_probe
                    continue
            sm = StepMarks()
            t0 = time.perf_counter()
            if inst:
                sm.marks["start"] = self.clock.mark()
            x, y = next(it)
            data_ms = (time.perf_counter() - t0) * 1000.0
            if self.fault and self.fault.due(self.global_step, self.rt.rank, self.rt.world_size):
                self.fault.fire(self.client)
            self.step(x, y, sm)
            last = (x, y)
            i += 1
            self.global_step += 1
            self.client.step = self.global_step
            st.steps += 1
            st.samples += int(y.shape[0])
            st.data_wait_ms += data_ms
            if inst:
                sm.info = {
                    "step": self.global_step,
                    "epoch": epoch,
                    "warmup": st.warmup,
                    "samples": int(y.shape[0]),
                    "data_ms": data_ms,
                }
                self.pending.push(sm)
                self.flush()
            self.after_step()
        self.rt.synchronize()
        st.seconds = max(0.0, time.perf_counter() - t_epoch - st.excluded_s)
        if inst:
            self.flush(force=True)
            if st.steps > 0:
                self.client.send(
                    "epoch",
                    epoch=epoch,
                    warmup=st.warmup,
                    samples=st.samples,
                    seconds=st.seconds,
                    samples_per_s=st.samples_per_s,
                    data_wait_ms=st.data_wait_ms,
                )
                loss = float(self.last_loss.item()) if self.last_loss is not None else float("nan")
                self.client.log(
                    "info",
                    f"epoch {epoch}{' (warm-up)' if st.warmup else ''}: {st.steps} steps, "
                    f"{st.samples_per_s:.1f} samples/s on this rank, last loss {loss:.4f}",
                )
            self.send_memory()
        return st, stop


def run(args: argparse.Namespace) -> int:
    with Runtime("train", args.backend, args.timeout_s, quiet=not args.instrument) as rt:
        if args.epochs < 1 or args.batch < 1 or args.samples < 1:
            raise WorkerError("--epochs, --batch and --samples must be >= 1")
        client = rt.client
        k = rt.world_size
        per_rank = args.batch if args.experiment == "weak" else args.batch // k
        if per_rank < 1:
            raise WorkerError(f"strong scaling: global batch {args.batch} < {k} ranks")
        torch.manual_seed(args.seed)
        data = Data(
            DataConfig(args.data, args.data_path, args.data_dir, args.samples, args.seed),
            batch=per_rank,
            rank=rt.rank,
            world_size=k,
            device=rt.device,
        )
        net = models.build_model(args.model, rt.device)
        spec = models.MODEL_SPECS[args.model]
        ddp = DDP(
            net,
            device_ids=[rt.local_rank] if rt.device.type == "cuda" else None,
            bucket_cap_mb=spec.bucket_cap_mb,  # None: DDP's default 25 MiB + 1 MiB first bucket
        )
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
        clock = Clock(rt.device)
        tr = Trainer(args, rt, client, data, net, ddp, opt, clock, per_rank)
        if args.instrument:
            tr.btimer = BucketTimer(clock)
            tr.btimer.register(ddp)
            client.log(
                "info",
                f"{args.experiment} scaling: k={k}, per-rank batch {per_rank} "
                f"(global {per_rank * k}), {data.steps_per_epoch} steps/epoch, data "
                f"{data.description} via the {args.data_path} path, model {args.model} "
                f"({models.count_params(net)} params), timing {clock.method}",
            )
        client.phase = "train"
        timed: list[float] = []
        for epoch in range(args.epochs):
            st, stop = tr.run_epoch(epoch)
            if not st.warmup and st.steps > 0:
                timed.append(st.samples_per_s)
            if stop:
                client.log("info", f"stop agreed at step {tr.global_step}")
                break
        mean = sum(timed) / len(timed) if timed else None
        layout = tr.layout or rebuilt_bucket_sizes(ddp)
        if layout is None:
            try:
                info = ddp._get_ddp_logging_data()  # type: ignore[no-untyped-call]
                layout = parse_bucket_sizes(info.get("bucket_sizes"))
            except Exception:  # noqa: BLE001 - private API
                layout = None
        client.send(
            "result",
            experiment=args.experiment,
            samples_per_s=mean,
            timed_epochs=len(timed),
            params=models.count_params(net),
            grad_bytes=models.grad_bytes(net),
            bucket_bytes=layout or [],
        )
        rate = f"{mean:.1f}" if mean is not None else "n/a"
        print(
            f"rank {rt.rank}: {rate} samples/s per rank over {len(timed)} timed epoch(s), "
            f"{args.experiment} k={k} per-rank batch {per_rank}"
            f"{'' if args.instrument else ' (no instrumentation)'}",
            flush=True,
        )
    return 0
