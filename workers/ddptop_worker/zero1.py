"""The `zero1` experiment: DDP with `torch.distributed.optim.ZeroRedundancyOptimizer` (ZeRO stage
1: the optimizer state sharded over the k ranks), on the same model, data and per-rank batch as
`fsdp`, reporting what each rank holds against a prediction made from the model alone.

What a rank holds, fp32, and the prediction (docs/zero1.md):

- parameters: whole on every rank (DDP's replica; ZeroRedundancyOptimizer broadcasts each rank's
  updated tensors after its local step): 4P bytes;
- gradients: whole on every rank (DDP all-reduces them all; ZeRO-1 does not shard them, which is
  ZeRO-2): 4P bytes, inside DDP's buckets (`gradient_as_bucket_view=True`, as `fsdp` builds it);
- Adam's two moments for the parameters this rank owns only: 8·P_r bytes, where P_r is the size
  of rank r's share of ZeroRedundancyOptimizer's partition. That partition hands out whole
  tensors, largest first, each to the rank with the fewest elements so far; `partition` below
  computes it from the parameter shapes, before any optimizer exists.

So the prediction is 8P + s·P_r (s = 8 for Adam, 0 for plain SGD), which is 8P + 8P/k when the
tensors divide evenly. The measured state also holds Adam's scalar `step` counter per owned
tensor (4 bytes each), the only residue. The issue's 4P + 12P/k is what fp32 ZeRO-2 would hold
(gradients sharded too); at k=1 both are 16P.

Messages are the `fsdp` experiment's (same types and fields: `plan`, `step`, `comm` for DDP's
bucket all-reduces, `epoch`, `memory` with strategy `zero1`, `result`), with experiment `zero1`.
The hello names the worker program `fsdp`: this module runs that program's trainer
(`fsdp.Trainer`), and the protocol's worker kinds are the programs that speak it.
"""

from __future__ import annotations

import argparse

import torch

from . import book, memory, models
from .client import write_line
from .data import Data, DataConfig
from .fsdp import DEFAULT_LR, Trainer, add_trainer_args, build_optimizer, owned_params, wrap
from .runtime import Runtime, WorkerError
from .timing import Clock, rebuilt_bucket_sizes

STRATEGY = "zero1"
# The hello's worker kind: the program this module runs (see the module's docstring).
WORKER = "fsdp"


def add_args(p: argparse.ArgumentParser) -> None:
    add_trainer_args(p, adam_help="adam: 8 bytes of sharded state per parameter")
    # fsdp.Trainer reads the strategy from the arguments; here it is not a choice.
    p.set_defaults(strategy=STRATEGY)


def partition(sizes: list[int], k: int) -> list[list[int]]:
    """ZeroRedundancyOptimizer's partition of one parameter group (torch 2.x,
    `_partition_parameters`): tensors sorted by size, largest first (a stable sort: equal sizes
    keep their order), each given to the rank with the fewest elements so far (the lowest rank
    on a tie). Returns, per rank, the indices into `sizes` it owns."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True)
    owned: list[list[int]] = [[] for _ in range(k)]
    load = [0] * k
    for i in order:
        r = load.index(min(load))
        owned[r].append(i)
        load[r] += sizes[i]
    return owned


def predicted_state(n_params: int, owned_elems: int, optimizer: str) -> int:
    """Bytes rank r holds: whole fp32 weights and gradients (8P), and the optimizer's s bytes
    per element only for the P_r elements it owns (Adam's scalar `step` counters left out)."""
    whole = (memory.PARAM_BYTES_PER_ELEM + memory.GRAD_BYTES_PER_ELEM) * n_params
    return whole + memory.OPTIM_BYTES_PER_ELEM[optimizer] * owned_elems


def balanced_state(n_params: int, k: int, optimizer: str) -> float:
    """The closed form when the tensors divide evenly: 8P + s·P/k (8P + 8P/k for Adam)."""
    whole = (memory.PARAM_BYTES_PER_ELEM + memory.GRAD_BYTES_PER_ELEM) * n_params
    return whole + memory.OPTIM_BYTES_PER_ELEM[optimizer] * n_params / k


def _fmt_mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def run(args: argparse.Namespace) -> int:
    book.apply(args.torch_settings)
    with Runtime(WORKER, args.backend, args.timeout_s) as rt:
        if args.epochs < 1 or args.batch < 1 or args.samples < 1 or args.comm_every < 1:
            raise WorkerError("--epochs, --batch, --samples and --comm-every must be >= 1")
        client, k = rt.client, rt.world_size
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
            strategy=STRATEGY,
            phase="data",
            param_bytes=0,
            grad_bytes=0,
            optim_bytes=0,
            **memory.cuda_counters(rt.device),
        )
        torch.manual_seed(args.seed)  # same weights on every rank (DDP broadcasts rank 0's)
        net = models.build_model(args.model, rt.device)
        n_params = models.count_params(net)
        sizes = [int(p.numel()) for p in net.parameters()]
        mine = partition(sizes, k)[rt.rank]  # predicted before the optimizer exists
        mine_elems = sum(sizes[i] for i in mine)
        predicted = predicted_state(n_params, mine_elems, args.optimizer)
        clock = Clock(rt.device)
        client.phase = "ddp_init"
        w = wrap(STRATEGY, net, rt, clock, models.MODEL_SPECS[args.model])
        opt = build_optimizer(STRATEGY, args.optimizer, w.model.parameters(), lr)
        client.phase = "train"
        owned = owned_params(opt)
        if owned is not None and owned != mine_elems:
            # torch changed its partition: the prediction no longer follows it; say so.
            client.log(
                "warn",
                f"zero1: ZeroRedundancyOptimizer gave rank {rt.rank} {owned} parameters, the "
                f"predicted partition {mine_elems}",
            )
        tr = Trainer(args, rt, client, data, w, opt, clock, n_params, predicted)
        tr.send_memory("init")
        client.log(
            "info",
            f"zero1 experiment: optimizer {args.optimizer} (lr {lr}), k={k}, per-rank batch "
            f"{args.batch}, {data.steps_per_epoch} steps/epoch, data {data.description}, model "
            f"{args.model} ({n_params} params in {len(sizes)} tensors), timing {clock.method}; "
            f"predicted state per rank {_fmt_mb(predicted)} (8P whole + optimizer state of the "
            f"{mine_elems} parameters in the {len(mine)} tensors this rank owns; balanced "
            f"8P + 8P/k: {_fmt_mb(balanced_state(n_params, k, args.optimizer))})",
        )
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
            experiment=STRATEGY,
            samples_per_s=mean,
            timed_epochs=len(timed),
            params=n_params,
            grad_bytes=memory.GRAD_BYTES_PER_ELEM * n_params,
            bucket_bytes=(tr.layout or rebuilt_bucket_sizes(w.ddp) or []) if w.ddp else [],
            optimizer=args.optimizer,
            strategy=STRATEGY,
            **book.observed(),
        )
        rate = f"{mean:.1f}" if mean is not None else "n/a"
        # One write per line: ranks sharing torchrun's pipe must not interleave mid-line.
        write_line(
            f"rank {rt.rank}: zero1 {args.optimizer} k={k}: {rate} samples/s per rank over "
            f"{len(timed)} timed epoch(s); state {sb.total} B (params {sb.params}, grads "
            f"{sb.grads}, optimizer {sb.optim}), predicted {predicted} B, owned {mine_elems} of "
            f"{n_params} params in {len(mine)} tensors"
        )
    return 0
