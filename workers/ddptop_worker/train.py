"""DDP training (the book's weak/strong scaling experiments) with per-step, per-bucket and
per-epoch reports to ddptop.

Epoch 0 is warm-up (reported with warmup:true and never counted). Step messages are resolved one
or two steps late from CUDA events (no per-step synchronize) or, on gloo/CPU, from host timers.
The comm-hook bucket timeline is recorded only after DDP's bucket rebuild (>= 2 steps in).
Ranks agree on ddptop's probe/stop commands every `--control-every` steps over a small gloo group.

The hot loop is kept as close as possible to the book's bare loop (zero_grad(set_to_none=True),
forward, backward, step, on slices of device-resident data): an untimed step does nothing else;
no `.item()`, no synchronize, no per-step allocation of marks. With `--time-every N` only every
Nth step of the timed epochs carries events and a `step` message (whose `samples` then counts
every step since the previous message, and `every` says how many steps that is); with `auto`
(ddptop's default on GPUs) N follows the step time, one timed step every 0.2-0.45 s
(cadence.py). The warm-up epoch is timed in full.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import book, cadence, diagnose, models
from .client import Client, write_line
from .data import Data, DataConfig, add_data_args
from .faults import Fault, SlowRank
from .probe import (
    DEFAULT_SAMPLE_RATE,
    NO_SAMPLING,
    BlockStats,
    live_label,
    run_block,
    send_block,
    set_logger_sample_rate,
    synced_warmup_steps,
)
from .runtime import Runtime, WorkerError
from .timing import (
    BucketTimer,
    Clock,
    Pending,
    StepMarks,
    bucket_timeline,
    exposed_from_ready,
    parse_bucket_sizes,
    rebuilt_bucket_sizes,
    start_inferred,
    step_figures,
)

REBUILD_MIN_STEPS = 2  # never time buckets before this many steps (iteration 0 has one bucket)
REBUILD_GIVE_UP_STEPS = 8  # then time whatever layout there is, marked rebuilt:false
MEMORY_EVERY = 50
AUTOTUNE_STEPS = 2  # the first step, and the first after DDP's bucket rebuild (new shapes)


@dataclass(frozen=True)
class TrainSettings:
    """Everything `train` reads from its command line, converted once."""

    experiment: str = "weak"
    batch: int = 256
    epochs: int = 2
    model: str = "resnet18"
    data: DataConfig = field(default_factory=DataConfig)
    backend: str = "auto"
    lr: float = 0.1
    instrument: bool = True
    kernel_timing: bool = True
    time_every: int = 1  # cadence.AUTO, or 1 in N
    buckets_every: int = 1
    timeline_every: int = 0  # 1 timed step in N takes its bucket timeline; 0: by the device
    control_every: int = 5
    probe_block_steps: int = 10
    probe_warmup_steps: int = 3
    timeout_s: float = 300.0
    torch_settings: str = "book"

    @staticmethod
    def from_args(a: argparse.Namespace) -> TrainSettings:
        return TrainSettings(
            experiment=a.experiment,
            batch=a.batch,
            epochs=a.epochs,
            model=a.model,
            data=DataConfig.from_args(a),
            backend=a.backend,
            lr=a.lr,
            instrument=a.instrument,
            kernel_timing=a.kernel_timing,
            time_every=a.time_every,
            buckets_every=a.buckets_every,
            timeline_every=a.timeline_every,
            control_every=a.control_every,
            probe_block_steps=a.probe_block_steps,
            probe_warmup_steps=a.probe_warmup_steps,
            timeout_s=a.timeout_s,
            torch_settings=a.torch_settings,
        )

    def per_rank_batch(self, world_size: int) -> int:
        """Checks the settings for this world size; returns the per-rank batch."""
        if self.epochs < 1 or self.batch < 1 or self.data.samples < 1:
            raise WorkerError("--epochs, --batch and --samples must be >= 1")
        counts = (self.buckets_every, self.control_every, self.probe_block_steps)
        if min(counts) < 1 or self.probe_warmup_steps < 0 or self.timeline_every < 0:
            raise WorkerError(
                "--buckets-every, --control-every and --probe-block-steps must be >= 1, "
                "--probe-warmup-steps and --timeline-every >= 0"
            )
        per_rank = self.batch if self.experiment == "weak" else self.batch // world_size
        if per_rank < 1:
            raise WorkerError(f"strong scaling: global batch {self.batch} < {world_size} ranks")
        return per_rank


def every_arg(raw: str) -> int:
    try:
        return cadence.parse_every(raw)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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
    p.add_argument("--model", choices=sorted(models.MODEL_SPECS), default="resnet18", help="model")
    add_data_args(p)
    p.add_argument(
        "--backend", choices=("nccl", "gloo", "auto"), default="auto", help="auto: nccl if CUDA"
    )
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate")
    p.add_argument(
        "--no-instrument",
        dest="instrument",
        action="store_false",
        help="bare DDP loop: no hook, no events, only hello/plan/result/bye (overhead baseline)"
        "%(default).0s",
    )
    p.add_argument(
        "--no-kernel-timing",
        dest="kernel_timing",
        action="store_false",
        help="nccl: do not ask ProcessGroupNCCL for the all-reduce kernels' own durations "
        "(bucket starts are then inferred)%(default).0s",
    )
    p.add_argument(
        "--time-every",
        type=every_arg,
        default=os.environ.get("DDPTOP_TIME_EVERY") or 1,  # argparse applies type= to it
        help="timed epochs: events and a step message on every Nth step only, or 'auto': "
        "one step every 0.2-0.45 s of run time (default: $DDPTOP_TIME_EVERY or 1)",
    )
    p.add_argument(
        "--buckets-every", type=int, default=1, help="send a buckets message every N steps"
    )
    p.add_argument(
        "--timeline-every",
        type=int,
        default=os.environ.get("DDPTOP_TIMELINE_EVERY") or 0,  # argparse applies type= to it
        help="one timed step in N takes its whole bucket timeline (a buckets message); the "
        "others mark their buckets' ready points only and send the exposed comm in the step "
        f"message. 0: {cadence.TIMELINE_EVERY} on CUDA, where a timeline's completion marks "
        "cost ~1 ms a step, 1 on CPU (default: $DDPTOP_TIMELINE_EVERY or 0)",
    )
    p.add_argument(
        "--control-every", type=int, default=5, help="ranks agree on commands every N steps"
    )
    p.add_argument(
        "--probe-block-steps", type=int, default=10, help="steps per probe block (probe_on)"
    )
    p.add_argument(
        "--probe-warmup-steps",
        type=int,
        default=3,
        help="probe_on: unreported warm-up steps per mode before the first block pair",
    )
    p.add_argument("--timeout-s", type=float, default=300.0, help="process-group timeout")
    book.add_args(p)


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
    s: TrainSettings
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
    synced_iterations: int = 0  # synced DDP forwards so far: DDP's logger samples by these
    extra_steps: int = 0  # probe steps, beyond the planned training steps
    probe_block: int = 0
    probing: bool = False
    layout: list[int] | None = None
    last_loss: torch.Tensor | None = None
    unreported_samples: int = 0  # samples since the last step message
    out_of_data: bool = False  # the `uneven` fault ended this rank's loop
    _slow: SlowRank | None = None
    _cadence: cadence.Cadence | None = None

    @property
    def cadence(self) -> cadence.Cadence:
        """Which steps after warm-up are timed (warm-up steps all are)."""
        if self._cadence is None:
            self._cadence = cadence.Cadence.of(self.s.time_every)
        return self._cadence

    @property
    def fault(self) -> Fault | None:
        return self.rt.fault

    @property
    def slow(self) -> SlowRank | None:
        """The `slow` fault's pacer, kept across epochs so it knows this rank's pace."""
        if self._slow is None and self.fault is not None:
            self._slow = self.fault.slowdown(self.rt.rank)
            if self._slow is not None:
                self._slow.sync = self.rt.synchronize
                self._slow.on_start = lambda text: self.client.log("warn", text)
                f = self.fault
                start = f" from step {f.start}" if f.start > 1 else ""
                msg = f"injected fault {f.text}: this rank is the straggler{start}"
                self.client.log("warn", msg)
        return self._slow

    def compute_delay(self) -> None:
        """`slow:...:compute`: the sleep at the end of the forward (a slower device), after
        DDP's buffer broadcast at its start: the other ranks wait for it in the backward's
        all-reduce, where their buckets message measures the wait (in the broadcast it would
        hide inside their forward, as long as this rank's)."""
        slow = self._slow
        if slow is not None and slow.phase == "compute":
            slow.wait(self.global_step)

    # ------------------------------------------------------------------ steps

    def bare_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """The book's loop body and nothing else."""
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.ddp(x), y)
        self.compute_delay()
        loss.backward()
        self.opt.step()
        self.last_loss = loss

    def timed_step(
        self, x: torch.Tensor, y: torch.Tensor, sm: StepMarks, timeline: bool = True
    ) -> None:
        mark = self.clock.mark
        self.opt.zero_grad(set_to_none=True)
        if self.btimer is not None:
            sm.buckets = self.btimer.begin_step(timeline)
        sm.marks["fwd0"] = mark()
        loss = self.loss_fn(self.ddp(x), y)
        self.compute_delay()
        sm.marks["bwd0"] = mark()
        loss.backward()
        sm.marks["bwd1"] = mark()
        self.opt.step()
        sm.marks["opt1"] = mark()
        if self.btimer is not None:
            self.btimer.end_step()
        self.last_loss = loss

    @property
    def timeline_every(self) -> int:
        """1 timed step in N takes its whole bucket timeline (`cadence.timeline_every`)."""
        return cadence.timeline_every(self.s.timeline_every, self.clock.cuda)

    def takes_timeline(self, warmup: bool) -> bool:
        """Whether the step just started takes its whole bucket timeline, not its buckets' ready
        marks only: 1 timed step in `timeline_every` (in warm-up, where every step is timed, 1
        step in it, so the first timeline comes a few steps in), and only on steps whose buckets
        message `--buckets-every` lets through (a timeline nobody sends costs ~1 ms for nothing)."""
        step = self.global_step
        if step % self.s.buckets_every != 0:
            return False
        return self.cadence.takes_timeline(step, warmup, self.timeline_every)

    def emit(self, sm: StepMarks) -> None:
        """The step's line, and its buckets' when they were timed, in one write."""
        info = sm.info
        step_no = int(info["step"])
        every = int(info["every"])
        extra = {"every": every} if every > 1 else {}
        step = {
            "step": step_no,
            "epoch": info["epoch"],
            "warmup": info["warmup"],
            "sync": True,
            "samples": info["samples"],
            **step_figures(sm),
            "timing": self.clock.method,
            **extra,
        }
        msgs: list[tuple[str, dict[str, Any]]] = [("step", step)]
        buckets = self.buckets_fields(sm, step_no)
        if buckets is not None:
            msgs.append(("buckets", buckets))
        elif sm.buckets:
            # Ready marks only (or a timeline that came out empty): the exposed comm rides on
            # the step message.
            got = exposed_from_ready(sm.buckets, sm.marks["bwd0"], sm.marks["bwd1"])
            if got is not None:
                step["exposed_ms"] = got[1]
        self.client.send_many(msgs)

    def buckets_fields(self, sm: StepMarks, step_no: int) -> dict[str, Any] | None:
        """The step's `buckets` message fields, or None when its buckets were not timed."""
        if sm.buckets is None or step_no % self.s.buckets_every != 0:
            return None
        assert self.btimer is not None
        self.btimer.resolve_kernels(sm.buckets)
        if self.btimer.kernel_error is not None:
            self.client.log(
                "warn",
                f"kernel timing unavailable ({self.btimer.kernel_error}); bucket starts are "
                "inferred from now on",
            )
            self.btimer.kernel_error = None
        marks = sm.marks
        spans, bwd_compute, exposed = bucket_timeline(sm.buckets, marks["bwd0"], marks["bwd1"])
        if not spans:
            return None
        buckets = []
        for sp in spans:
            b = {
                "index": sp.index,
                "bytes": sp.nbytes,
                "ready_ms": sp.ready_ms,
                "start_ms": sp.start_ms,
                "done_ms": sp.done_ms,
            }
            if sp.kernel_ms is not None:
                b["kernel_ms"] = sp.kernel_ms
            buckets.append(b)
        return {
            "step": step_no,
            "rebuilt": self.layout is not None,
            "bwd_compute_ms": bwd_compute,
            "exposed_ms": exposed,
            "start_inferred": start_inferred(spans),
            "buckets": buckets,
        }

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
        if self.rt.device.type == "cuda" and self.global_step % MEMORY_EVERY == 0:
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

    def send_plan(self) -> None:
        send_plan(self.client, self.s, self.data, self.extra_steps)

    # ------------------------------------------------------------------ live probe

    def advance(self, synced: bool) -> None:
        """One more probe iteration (the step counter is liveness, probe steps count too)."""
        self.global_step += 1
        self.extra_steps += 1
        self.synced_iterations += int(synced)
        self.client.step = self.global_step

    def block(self, x: torch.Tensor, y: torch.Tensor, mode: str, steps: int) -> BlockStats:
        synced = mode == "synced"
        return run_block(
            self.ddp, x, y, mode, steps, self.clock, self.loss_fn, lambda: self.advance(synced)
        )

    def start_probe(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """A probe session begins: DDP's logger stops sampling, then warm-up in both modes."""
        sampling_off = set_logger_sample_rate(self.ddp, NO_SAMPLING)
        warm = synced_warmup_steps(self.s.probe_warmup_steps, self.synced_iterations)
        self.client.log(
            "info",
            f"probe: {live_label(self.btimer is not None)}; warm-up {warm} synced + {self.s.probe_warmup_steps} no_sync "
            f"steps; DDP logger sampling {'off' if sampling_off else 'unchanged'} while probing",
        )
        if warm > 0:
            self.block(x, y, "synced", warm)
        if self.s.probe_warmup_steps > 0:
            self.block(x, y, "no_sync", self.s.probe_warmup_steps)
        self.probing = True

    def end_probe(self) -> None:
        set_logger_sample_rate(self.ddp, DEFAULT_SAMPLE_RATE)  # as the bare loop has it
        self.probing = False
        self.client.log("info", "probe: off; training resumes with DDP's default logger sampling")

    def live_probe(self, x: torch.Tensor, y: torch.Tensor, st: EpochStats) -> None:
        """One synced and one no_sync block on the last batch (fwd+bwd, no optimizer step),
        all of it left out of the epoch's time."""
        self.flush(force=True)
        # The training steps still in flight finish here, on the epoch's clock, not the probe's.
        self.rt.synchronize()
        t0 = time.perf_counter()
        self.client.phase = "probe"
        if not self.probing:
            self.start_probe(x, y)
        steps = self.s.probe_block_steps
        for mode in ("synced", "no_sync"):
            send_block(self.client, self.probe_block, self.block(x, y, mode, steps), live=True)
            self.probe_block += 1
        self.rt.synchronize()
        st.excluded_s += time.perf_counter() - t0
        self.cadence.pause()  # the probe is no training step time
        self.client.phase = "train"
        self.send_plan()  # the probe's steps extend the run

    # ------------------------------------------------------------------ epochs

    def run_epoch(self, epoch: int) -> tuple[EpochStats, bool]:
        """Train one epoch; returns its stats and whether a stop was agreed."""
        # Epoch 0 is warm-up, unless it is the only one (then it is all there is to time).
        st = EpochStats(epoch, warmup=epoch == 0 and self.s.epochs > 1)
        inst = self.s.instrument
        cad = self.cadence
        control_every = self.s.control_every
        fault = self.fault
        rank, k = self.rt.rank, self.rt.world_size
        slow = self.slow
        steps = self.data.steps_per_epoch
        batches = self.data.epoch(epoch)
        last: tuple[torch.Tensor, torch.Tensor] | None = None
        stop = False
        i = 0
        self.rt.synchronize()
        t_epoch = time.perf_counter()
        while i < steps:
            if self.global_step % control_every == 0 or (i == 0 and epoch > 0):
                probe, stop = self.rt.agree()
                if stop:
                    break
                if probe and last is not None:
                    self.live_probe(*last, st)
                    continue
                if not probe and self.probing:
                    self.end_probe()
            if fault is not None and fault.due(self.global_step, rank, k):
                fault.fire(self.client)
            if fault is not None and fault.out_of_data(self.global_step, rank):
                self.out_of_data = True
                break
            t0 = time.perf_counter()
            timed = cad.start(self.global_step + 1, t0) or st.warmup
            x, y = next(batches)
            n = int(y.shape[0])  # the batch, or the book loader's last, partial one
            if slow is not None and slow.phase == "data":
                # Counted as data wait: a rank with a slow input pipeline.
                slow.wait(self.global_step + 1)
            t1 = time.perf_counter()
            st.data_wait_ms += (t1 - t0) * 1000.0
            self.global_step += 1
            if inst and timed:
                sm = StepMarks()
                sm.marks["start"] = self.clock.mark()
                self.timed_step(x, y, sm, timeline=self.takes_timeline(st.warmup))
                sm.info = {
                    "step": self.global_step,
                    "epoch": epoch,
                    "warmup": st.warmup,
                    "samples": self.unreported_samples + n,
                    "data_ms": (t1 - t0) * 1000.0,
                    "every": cad.covered(),  # steps its samples cover
                }
                self.unreported_samples = 0
                self.pending.push(sm)
                self.flush()
            else:
                self.bare_step(x, y)
                self.unreported_samples += n
            st.samples += n
            self.synced_iterations += 1
            self.client.step = self.global_step
            if self.global_step == AUTOTUNE_STEPS and self.client.phase == "autotune":
                self.client.phase = "train"
            last = (x, y)
            i += 1
            if inst:
                self.after_step()
        # Inside the timed epoch: the book's loader ends its epoch here (its last, partial batch
        # and its workers' shutdown), as the chapter's loop does before it is timed.
        batches.close()
        self.rt.synchronize()
        st.steps = i
        st.seconds = max(0.0, time.perf_counter() - t_epoch - st.excluded_s)
        self.unreported_samples = 0  # an epoch's leftover is in its epoch message
        self.cadence.new_epoch()
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


def send_plan(client: Client, s: TrainSettings, data: Data, extra_steps: int = 0) -> None:
    spe = data.steps_per_epoch
    client.send(
        "plan",
        total_steps=s.epochs * spe + extra_steps,
        epochs=s.epochs,
        steps_per_epoch=spe,
        phase="train",
    )


def run(args: argparse.Namespace) -> int:
    return train(TrainSettings.from_args(args))


def train(s: TrainSettings) -> int:
    kernel_timing = s.instrument and s.kernel_timing
    with Runtime(
        "train", s.backend, s.timeout_s, quiet=not s.instrument, kernel_timing=kernel_timing
    ) as rt:
        client = rt.client
        book.apply(s.torch_settings)
        k = rt.world_size
        per_rank = s.per_rank_batch(k)
        torch.manual_seed(s.data.seed)
        data = Data(s.data, batch=per_rank, rank=rt.rank, world_size=k, device=rt.device)
        send_plan(client, s, data)
        net = models.build_model(s.model, rt.device)
        if rt.fault is not None and rt.fault.kind == "unused":
            net = diagnose.WithUnusedLayer(net, rt.fault.layer).to(rt.device)
            client.log("warn", f"injected fault unused:{rt.fault.layer}: a layer forward never uses")
        spec = models.MODEL_SPECS[s.model]
        # bucket_cap_mb None: DDP's default 25 MiB + 1 MiB first bucket
        ddp = rt.wrap_ddp(net, bucket_cap_mb=spec.bucket_cap_mb)
        opt = torch.optim.SGD(ddp.parameters(), lr=s.lr)
        diagnose.watch_first_step(client, ddp, opt)
        clock = Clock(rt.device)
        tr = Trainer(s, rt, client, data, net, ddp, opt, clock, per_rank)
        if s.instrument:
            tr.btimer = BucketTimer(clock, kernel_timing=kernel_timing and rt.backend == "nccl")
            tr.btimer.register(ddp)
            if rt.fault is not None and rt.fault.kind == "slowlink":
                tr.btimer.delay_s = rt.fault.step / 1000.0
                ms = rt.fault.step
                client.log("warn", f"injected fault slowlink:{ms}: each all-reduce ends {ms} ms late")
            kernels = (
                "NCCL kernel durations measured (TORCH_NCCL_ENABLE_TIMING)"
                if tr.btimer.kernel_timing
                else "bucket starts inferred (no kernel durations on "
                f"{rt.backend if rt.backend != 'nccl' else 'this run'})"
            )
            every = cadence.describe(s.time_every)
            tl = tr.timeline_every
            lines = (
                f", bucket timeline on 1 timed step in {tl} (the others: exposed comm only)"
                if tl > 1
                else ""
            )
            client.log(
                "info",
                f"{s.experiment} scaling: k={k}, per-rank batch {per_rank} "
                f"(global {per_rank * k}), {data.steps_per_epoch} steps/epoch, data "
                f"{data.description} via the {s.data.path} path, model {s.model} "
                f"({models.count_params(net)} params), timing {clock.method}{every}{lines}; "
                f"{kernels}",
            )
        # cudnn.benchmark tries every convolution algorithm in the first steps: say so, so the
        # watchdog shows why they are slow (train.run_epoch leaves the phase after step 2).
        client.phase = "autotune" if book.autotunes(rt.device) else "train"
        timed: list[float] = []
        for epoch in range(s.epochs):
            st, stop = tr.run_epoch(epoch)
            if not st.warmup and st.steps > 0:
                timed.append(st.samples_per_s)
            if stop:
                client.log("info", f"stop agreed at step {tr.global_step}")
                break
            if tr.out_of_data:
                client.log("warn", f"injected fault uneven: out of data after step {tr.global_step}")
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
            experiment=s.experiment,
            samples_per_s=mean,
            timed_epochs=len(timed),
            params=models.count_params(net),
            grad_bytes=models.grad_bytes(net),
            bucket_bytes=layout or [],
            **book.observed(),
        )
        rate = f"{mean:.1f}" if mean is not None else "n/a"
        write_line(
            f"rank {rt.rank}: {rate} samples/s per rank over {len(timed)} timed epoch(s), "
            f"{s.experiment} k={k} per-rank batch {per_rank}"
            f"{'' if s.instrument else ' (no instrumentation)'}"
        )
    return 0
