"""The `fsdp` experiment: FSDP2 (`fully_shard` on each residual block, then the root), ZeRO-1
(DDP with `ZeroRedundancyOptimizer`) or DDP on the same model, data and per-rank batch as `weak`,
reporting what each rank holds and what it sends.

- `memory` messages: exact local bytes of parameters, gradients and optimizer state (sums of
  local shards), the 16P/k prediction, and on CUDA the allocator's peak (reset per phase) and
  reserved bytes. Phases: `data` (inputs resident, no model yet), `init` (model wrapped, optimizer
  built, no state yet), `first_step` (after the first optimizer step: Adam's state now exists),
  `epoch<N>` (end of each epoch, peak over that epoch).
- `comm` messages, one per step: FSDP's per-block all-gathers (forward and backward) and
  reduce-scatters from custom collectives installed with `set_custom_all_gather` /
  `set_custom_reduce_scatter` (collectives.py); under DDP the per-bucket all-reduces from
  timing.py's comm hook (only after DDP's bucket rebuild; start inferred as for `buckets`).
- step/epoch/result as `train` does, with experiment `fsdp`, so throughput joins the scaling chart.

DDP here uses `gradient_as_bucket_view=True` so that its gradients live in the buckets instead of
beside them: then the replicated state really is 16P bytes with Adam, the figure FSDP divides by k.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import book, collectives, memory, models
from .client import Client, write_line
from .data import Data, DataConfig, add_data_args
from .faults import Fault
from .runtime import Runtime, WorkerError
from .timing import (
    BucketTimer,
    Clock,
    Pending,
    StepMarks,
    bucket_timeline,
    rebuilt_bucket_sizes,
    step_figures,
)

STRATEGIES = ("fsdp", "zero1", "ddp")
OPTIMIZERS = ("adam", "sgd")
DEFAULT_LR = {"adam": 1e-3, "sgd": 0.1}
REBUILD_MIN_STEPS = 2  # DDP's iteration-0 bucket layout is not the steady one (facts §10.1)
REBUILD_GIVE_UP_STEPS = 8


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategy", choices=STRATEGIES, default="fsdp", help="sharding strategy")
    add_trainer_args(p, adam_help="adam: 16P bytes of state (weights, grads, two moments)")


def add_trainer_args(p: argparse.ArgumentParser, *, adam_help: str) -> None:
    """The flags `Trainer` reads, shared with the zero1 experiment (its strategy is fixed)."""
    p.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default="adam",
        help=f"{adam_help}; sgd: the book's plain SGD",
    )
    p.add_argument("--lr", type=float, default=None, help="learning rate (adam 1e-3, sgd 0.1)")
    p.add_argument("--batch", type=int, default=256, help="per-rank batch (weak scaling)")
    p.add_argument("--epochs", type=int, default=2, help="epochs, epoch 0 is warm-up")
    p.add_argument("--model", choices=sorted(models.MODEL_SPECS), default="resnet18", help="model")
    add_data_args(p)
    p.add_argument(
        "--backend", choices=("nccl", "gloo", "auto"), default="auto", help="auto: nccl if CUDA"
    )
    p.add_argument("--comm-every", type=int, default=1, help="send a comm message every N steps")
    p.add_argument(
        "--control-every", type=int, default=5, help="ranks agree on commands every N steps"
    )
    p.add_argument("--timeout-s", type=float, default=300.0, help="process-group timeout")
    book.add_args(p)


# ---------------------------------------------------------------------- model wrapping


def shard_units(net: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules FSDP shards as units, bottom-up: ResNet-18's residual blocks; for models
    without them (`tiny`), each conv/linear layer. The root takes whatever is left."""
    blocks = [(n, m) for n, m in net.named_modules() if isinstance(m, models.Residual)]
    if blocks:
        return blocks
    return [(n, m) for n, m in net.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


def unit_params(net: nn.Module, units: list[tuple[str, nn.Module]], k: int) -> dict[str, int]:
    """Padded element count each unit all-gathers ("root": the parameters no unit owns)."""
    owned: set[int] = set()
    out: dict[str, int] = {}
    for name, m in units:
        ps = list(m.parameters())
        owned.update(id(p) for p in ps)
        out[name] = sum(memory.padded_numel(tuple(p.shape), k) for p in ps)
    out["root"] = sum(
        memory.padded_numel(tuple(p.shape), k) for p in net.parameters() if id(p) not in owned
    )
    return out


@dataclass
class Wrapped:
    model: nn.Module
    recorder: collectives.CommRecorder | None = None
    btimer: BucketTimer | None = None
    ddp: DDP | None = None
    units: dict[str, int] = field(default_factory=dict)


def wrap(
    strategy: str, net: nn.Module, rt: Runtime, clock: Clock, spec: models.ModelSpec
) -> Wrapped:
    k = rt.world_size
    units = shard_units(net)
    sizes = unit_params(net, units, k)
    if strategy in ("ddp", "zero1"):  # ZeRO-1 is DDP with a sharded optimizer (build_optimizer)
        ddp = DDP(
            net,
            device_ids=[rt.local_rank] if rt.device.type == "cuda" else None,
            bucket_cap_mb=spec.bucket_cap_mb,
            gradient_as_bucket_view=True,  # grads are views into the buckets: 4P, not 8P
        )
        bt = BucketTimer(clock)
        bt.register(ddp)
        return Wrapped(ddp, btimer=bt, ddp=ddp, units=sizes)
    from torch.distributed.fsdp import fully_shard

    recorder = collectives.CommRecorder(clock)
    for name, m in units:
        fully_shard(m)
        collectives.install(m, recorder, name)
    fully_shard(net)
    collectives.install(net, recorder, "root")
    return Wrapped(net, recorder=recorder, units=sizes)


def build_optimizer(strategy: str, name: str, params: Any, lr: float) -> torch.optim.Optimizer:
    cls: type[torch.optim.Optimizer] = torch.optim.Adam if name == "adam" else torch.optim.SGD
    if strategy == "zero1":
        # Each rank keeps the state of the parameters it owns (whole tensors, balanced by size)
        # and broadcasts them after its local step: DDP's gradients and weights stay whole.
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(params, optimizer_class=cls, lr=lr)
    return cls(params, lr=lr)


def owned_params(opt: torch.optim.Optimizer) -> int | None:
    """Elements of the parameters whose optimizer state this rank holds: its ZeRO-1 partition
    (`None` when the optimizer is not sharded: every rank owns everything)."""
    local = memory.local_optimizer(opt)
    if local is opt:
        return None
    return sum(int(p.numel()) for g in local.param_groups for p in g["params"])


# ---------------------------------------------------------------------- the loop


@dataclass
class EpochStats:
    epoch: int
    warmup: bool
    steps: int = 0
    samples: int = 0
    seconds: float = 0.0
    data_wait_ms: float = 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Trainer:
    args: argparse.Namespace
    rt: Runtime
    client: Client
    data: Data
    w: Wrapped
    opt: torch.optim.Optimizer
    clock: Clock
    n_params: int
    predicted: int
    pending: Pending = field(default_factory=Pending)
    loss_fn: nn.Module = field(default_factory=nn.CrossEntropyLoss)
    global_step: int = 0
    layout: list[int] | None = None
    warned_probe: bool = False
    fault: Fault | None = field(default_factory=Fault.from_env)

    @property
    def strategy(self) -> str:
        return str(self.args.strategy)

    def send_memory(self, phase: str) -> None:
        sb = memory.state_bytes(self.w.model, self.opt)
        self.client.send(
            "memory",
            strategy=self.strategy,
            phase=phase,
            param_bytes=sb.params,
            grad_bytes=sb.grads,
            optim_bytes=sb.optim,
            predicted_bytes=self.predicted,
            **memory.cuda_counters(self.rt.device),
        )

    def step(self, x: torch.Tensor, y: torch.Tensor, sm: StepMarks) -> torch.Tensor:
        mark = self.clock.mark
        rec, bt = self.w.recorder, self.w.btimer
        self.opt.zero_grad(set_to_none=True)
        if rec is not None:
            sm.info["comm"] = rec.begin_step()
            rec.pass_ = "fwd"
        if bt is not None:
            sm.buckets = bt.begin_step()
        sm.marks["fwd0"] = mark()
        loss = self.loss_fn(self.w.model(x), y)
        sm.marks["bwd0"] = mark()
        if rec is not None:
            rec.pass_ = "bwd"
        loss.backward()
        sm.marks["bwd1"] = mark()
        if rec is not None:
            rec.pass_ = "opt"
        self.opt.step()
        sm.marks["opt1"] = mark()
        if rec is not None:
            rec.end_step()
        if bt is not None:
            bt.end_step()
        return loss.detach()

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
            **step_figures(sm),
            timing=self.clock.method,
            loss=float(info["loss"].item()),
        )
        if step_no % max(1, int(self.args.comm_every)) != 0:
            return
        ops: list[dict[str, Any]] = []
        records = info.get("comm")
        if records is not None:
            collectives.wait_records(records)
            ops = collectives.comm_ops(records, m["start"])
        elif sm.buckets:
            spans, _, _ = bucket_timeline(sm.buckets, m["bwd0"], m["bwd1"])
            bwd0 = max(0.0, Clock.ms(m["start"], m["bwd0"]))
            ops = [
                {
                    "op": "all_reduce",
                    "name": f"bucket{s.index}",
                    "pass": "bwd",
                    "bytes": s.nbytes,
                    "start_ms": bwd0 + s.start_ms,
                    "dur_ms": max(0.0, s.done_ms - s.start_ms),
                }
                for s in spans
            ]
        if ops:
            self.client.send("comm", step=step_no, timing=self.clock.method, ops=ops)

    def flush(self, force: bool = False) -> None:
        for sm in self.pending.pop_ready(force_all=force):
            self.emit(sm)

    def after_step(self) -> None:
        """DDP: time buckets once the rebuilt layout is reported (as train does)."""
        bt, ddp = self.w.btimer, self.w.ddp
        if bt is None or ddp is None or bt.recording or self.global_step < REBUILD_MIN_STEPS:
            return
        self.layout = rebuilt_bucket_sizes(ddp)
        if self.layout is not None or self.global_step >= REBUILD_GIVE_UP_STEPS:
            bt.recording = True

    def run_epoch(self, epoch: int) -> tuple[EpochStats, bool]:
        st = EpochStats(epoch, warmup=epoch == 0 and self.args.epochs > 1)
        every = max(1, int(self.args.control_every))
        memory.reset_peak(self.rt.device)
        self.rt.synchronize()
        t_epoch = time.perf_counter()
        it = self.data.epoch(epoch)
        stop = False
        for i in range(self.data.steps_per_epoch):
            if self.global_step % every == 0 or (i == 0 and epoch > 0):
                probe, stop = self.rt.agree()
                if stop:
                    break
                if probe and not self.warned_probe:
                    self.warned_probe = True
                    self.client.log("warn", "probe: not available in the fsdp experiment (ignored)")
            sm = StepMarks()
            t0 = time.perf_counter()
            sm.marks["start"] = self.clock.mark()
            x, y = next(it)
            data_ms = (time.perf_counter() - t0) * 1000.0
            if self.fault and self.fault.due(self.global_step, self.rt.rank, self.rt.world_size):
                self.fault.fire(self.client)
            loss = self.step(x, y, sm)
            self.global_step += 1
            self.client.step = self.global_step
            st.steps += 1
            st.samples += int(y.shape[0])
            st.data_wait_ms += data_ms
            sm.info.update(
                step=self.global_step,
                epoch=epoch,
                warmup=st.warmup,
                samples=int(y.shape[0]),
                data_ms=data_ms,
                loss=loss,
            )
            self.pending.push(sm)
            self.flush()
            if self.global_step == 1:
                self.send_memory("first_step")
            self.after_step()
        it.close()  # the book's loader ends its epoch here, timed (data.Data.epoch)
        self.rt.synchronize()
        st.seconds = max(0.0, time.perf_counter() - t_epoch)
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
            self.client.log(
                "info",
                f"epoch {epoch}{' (warm-up)' if st.warmup else ''}: {st.steps} steps, "
                f"{st.samples_per_s:.1f} samples/s on this rank",
            )
        self.send_memory(f"epoch{epoch}")
        return st, stop


def _fmt_mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def run(args: argparse.Namespace) -> int:
    book.apply(args.torch_settings)
    with Runtime("fsdp", args.backend, args.timeout_s) as rt:
        if args.epochs < 1 or args.batch < 1 or args.samples < 1 or args.comm_every < 1:
            raise WorkerError("--epochs, --batch, --samples and --comm-every must be >= 1")
        client = rt.client
        k = rt.world_size
        lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
        torch.manual_seed(args.seed)
        data = Data(
            DataConfig(args.data, args.data_path, args.data_dir, args.samples, args.seed),
            batch=args.batch,
            rank=rt.rank,
            world_size=k,
            device=rt.device,
        )
        client.send(
            "plan",
            total_steps=args.epochs * data.steps_per_epoch,
            epochs=args.epochs,
            steps_per_epoch=data.steps_per_epoch,
            phase="train",
        )
        memory.reset_peak(rt.device)
        client.send(
            "memory",
            strategy=args.strategy,
            phase="data",
            param_bytes=0,
            grad_bytes=0,
            optim_bytes=0,
            **memory.cuda_counters(rt.device),
        )
        # Same seed on every rank: identical initial weights, which FSDP's sharding of the local
        # full copy relies on (DDP broadcasts rank 0's anyway).
        torch.manual_seed(args.seed)
        net = models.build_model(args.model, rt.device)
        n_params = models.count_params(net)
        clock = Clock(rt.device)
        client.phase = "ddp_init"
        w = wrap(args.strategy, net, rt, clock, models.MODEL_SPECS[args.model])
        opt = build_optimizer(args.strategy, args.optimizer, w.model.parameters(), lr)
        client.phase = "train"
        largest_name = max(w.units, key=lambda n: w.units[n])
        owned = owned_params(opt)
        predicted = memory.predicted_bytes(
            args.strategy, n_params, k, args.optimizer, w.units[largest_name], owned
        )
        tr = Trainer(args, rt, client, data, w, opt, clock, n_params, predicted)
        tr.send_memory("init")
        client.log(
            "info",
            f"fsdp experiment: strategy {args.strategy}, optimizer {args.optimizer} (lr {lr}), "
            f"k={k}, per-rank batch {args.batch}, {data.steps_per_epoch} steps/epoch, data "
            f"{data.description} via the {args.data_path} path, model {args.model} "
            f"({n_params} params, {len(w.units) - 1} units + root), timing {clock.method}; "
            f"predicted state per rank {_fmt_mb(predicted)}"
            + (
                f" (16P/k + largest gathered unit {largest_name}: "
                f"{_fmt_mb(4 * w.units[largest_name])})"
                if args.strategy == "fsdp"
                else (
                    f" (8P whole + optimizer state of the {owned} of {n_params} parameters "
                    f"this rank owns)"
                    if owned is not None
                    else ""
                )
            ),
        )
        if args.strategy == "fsdp" and rt.backend == "gloo" and k > 1:
            client.log("warn", collectives.GLOO_REDUCE_SCATTER_NOTE)
        timed: list[float] = []
        for epoch in range(args.epochs):
            st, stop = tr.run_epoch(epoch)
            if not st.warmup and st.steps > 0:
                timed.append(st.samples_per_s)
            if stop:
                client.log("info", f"stop agreed at step {tr.global_step}")
                break
        mean = sum(timed) / len(timed) if timed else None
        sb = memory.state_bytes(w.model, opt)
        client.send(
            "result",
            experiment="fsdp",
            samples_per_s=mean,
            timed_epochs=len(timed),
            params=n_params,
            grad_bytes=memory.GRAD_BYTES_PER_ELEM * n_params,
            bucket_bytes=(tr.layout or rebuilt_bucket_sizes(w.ddp) or []) if w.ddp else [],
            optimizer=args.optimizer,
            strategy=args.strategy,
            **book.observed(),
        )
        rate = f"{mean:.1f}" if mean is not None else "n/a"
        # One write per line: ranks sharing torchrun's pipe must not interleave mid-line.
        write_line(
            f"rank {rt.rank}: {args.strategy} {args.optimizer} k={k}: {rate} samples/s per rank "
            f"over {len(timed)} timed epoch(s); state {_fmt_mb(sb.total)} (params "
            f"{_fmt_mb(sb.params)}, grads {_fmt_mb(sb.grads)}, optimizer {_fmt_mb(sb.optim)}), "
            f"predicted {_fmt_mb(predicted)}"
        )
    return 0
