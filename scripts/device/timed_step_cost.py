"""Where a timed step's cost comes from, on one GPU (issue 46: the `auto` cadence's overhead).

`ddptop run weak` measured ~0.4% between timing 1 step in 2 and 1 in 10 at batch 1024 (H100,
2026-12-05, cadence_overhead.sh), ~1.9 ms per timed step, while a timed step adds no
synchronize. This script takes the worker's own pieces (models.resnet18, timing.Clock /
BucketTimer / Pending / step_figures, the timed_allreduce_hook) and times one process (k=1,
NCCL, collective timing on as ddptop's runs have it) in variants, every step of a segment
timed the variant's way, segments interleaved (order reversed every other round):

  nohook   plain DDP (C++ all-reduce), the book's loop body: the reference
  hook     ddptop's untimed step: DDP with the timing comm hook, nothing recorded
  marks    + the step's five CUDA events, pushed to Pending and read back (step_figures)
  buckets  + the hook's ready/done events per bucket (bucket timeline resolved)
  kernels  + each bucket's Work kept and NCCL's kernel time read (_get_duration)
  full     + the step message built and JSON-encoded as the worker does (not sent)

With --split, the bucket marks taken apart (a copy of the hook in this script, same all-reduce):
  ready    only the hook-entry event per bucket      done      only the completion callback's
  ready_pre, done_pre   the same with events created once and reused (no cudaEventCreate)

Prints ms per step (median of the segments) and each variant against `hook`.
  python scripts/device/timed_step_cost.py --batch 1024 --steps 40 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "workers"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from ddptop_worker import models  # noqa: E402
from ddptop_worker.timing import (  # noqa: E402
    BucketRecord,
    BucketTimer,
    Clock,
    Pending,
    StepMarks,
    bucket_timeline,
    step_figures,
)

VARIANTS = ("nohook", "hook", "marks", "buckets", "kernels", "full")
SPLIT = ("hook", "marks", "buckets", "ready", "done", "ready_pre", "done_pre")
MODE = {"ready": False, "done": False, "pre": False}
POOL: list[torch.cuda.Event] = []
POOL_AT = [0]


def pooled_mark() -> torch.cuda.Event:
    ev = POOL[POOL_AT[0] % len(POOL)]
    POOL_AT[0] += 1
    ev.record()
    return ev


def split_hook(state, bucket):  # type: ignore[no-untyped-def]
    """timed_allreduce_hook with its two marks switched by MODE (diagnostic copy). Not
    annotated: DDP checks a hook's annotations against the real classes, and this module's
    are strings (`from __future__ import annotations`)."""
    buf = bucket.buffer()
    mark = pooled_mark if MODE["pre"] else state.clock.mark
    records = state._current
    rec = None
    if records is not None:
        rec = BucketRecord(bucket.index(), buf.numel() * buf.element_size(),
                           mark() if MODE["ready"] else 0.0)
        records.append(rec)
    avg = dist.get_backend() == "nccl"
    work = dist.all_reduce(buf, op=dist.ReduceOp.AVG if avg else dist.ReduceOp.SUM, async_op=True)
    fut = work.get_future()

    def _done(f):  # type: ignore[no-untyped-def]
        if rec is not None:
            rec.done = mark() if MODE["done"] else 0.0
        return f.value()[0]

    return fut.then(_done)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=40, help="steps per segment")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--split", action="store_true", help="the bucket marks taken apart")
    a = ap.parse_args()
    variants = SPLIT if a.split else VARIANTS
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.benchmark = True
    cuda = torch.cuda.is_available()  # without a GPU: gloo on the CPU, to try the script out
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
    else:
        dist.init_process_group("gloo", rank=0, world_size=1)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    x = torch.randn(a.batch, models.IN_CHANNELS, models.IMAGE_SIZE, models.IMAGE_SIZE, device=dev)
    y = torch.randint(0, models.NUM_CLASSES, (a.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    nets: dict[str, tuple[DDP, torch.optim.Optimizer, BucketTimer | None]] = {}
    clock = Clock(dev)
    for name in ("nohook", "hook", "split") if a.split else ("nohook", "hook"):
        torch.manual_seed(0)
        net = DDP(models.build_model("resnet18", dev), device_ids=[0] if cuda else None)
        bt = None
        if name == "hook":
            bt = BucketTimer(clock, kernel_timing=True)
            bt.register(net)
        elif name == "split":
            bt = BucketTimer(clock)
            net.register_comm_hook(state=bt, hook=split_hook)
        nets[name] = (net, torch.optim.SGD(net.parameters(), lr=0.1), bt)
    if cuda:
        POOL.extend(torch.cuda.Event(enable_timing=True) for _ in range(256))

    def segment(variant: str) -> float:
        split = variant in ("ready", "done", "ready_pre", "done_pre")
        net, opt, bt = nets["nohook" if variant == "nohook" else "split" if split else "hook"]
        if split:
            assert bt is not None
            bt.recording = True
            MODE.update(ready=variant.startswith("ready"), done=variant.startswith("done"),
                        pre=variant.endswith("_pre") and cuda)
        elif bt is not None:
            bt.recording = variant in ("buckets", "kernels", "full")
            bt.kernel_timing = variant in ("kernels", "full")
        timed = variant != "nohook" and variant != "hook"
        pending = Pending()
        encoded = 0

        def drain(force: bool) -> None:
            nonlocal encoded
            for sm in pending.pop_ready(force_all=force):
                figs = step_figures(sm)
                if sm.buckets is not None and bt is not None and not split:
                    bt.resolve_kernels(sm.buckets)
                    spans, _, _ = bucket_timeline(sm.buckets, sm.marks["bwd0"], sm.marks["bwd1"])
                    if variant == "full":
                        msg = {"v": 1, "type": "step", "rank": 0, **figs, **sm.info,
                               "buckets": [s.__dict__ for s in spans]}
                        encoded += len(json.dumps(msg))

        sync()
        t0 = time.perf_counter()
        for i in range(a.steps):
            if not timed:
                opt.zero_grad(set_to_none=True)
                loss_fn(net(x), y).backward()
                opt.step()
                continue
            sm = StepMarks()
            sm.marks["start"] = clock.mark()
            opt.zero_grad(set_to_none=True)
            if bt is not None:
                sm.buckets = bt.begin_step()
            sm.marks["fwd0"] = clock.mark()
            loss = loss_fn(net(x), y)
            sm.marks["bwd0"] = clock.mark()
            loss.backward()
            sm.marks["bwd1"] = clock.mark()
            opt.step()
            sm.marks["opt1"] = clock.mark()
            if bt is not None:
                bt.end_step()
            sm.info = {"step": i, "epoch": 1, "warmup": False, "samples": a.batch, "data_ms": 0.01}
            pending.push(sm)
            drain(False)
        drain(True)
        sync()
        return (time.perf_counter() - t0) * 1000.0 / a.steps

    for v in variants:  # warm-up: cudnn.benchmark, DDP's bucket rebuild, allocator
        segment(v)
    per: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(a.rounds):
        order = variants if r % 2 == 0 else tuple(reversed(variants))
        for v in order:
            per[v].append(segment(v))
        print(f"round {r}: " + ", ".join(f"{v} {per[v][-1]:.2f}" for v in variants), flush=True)
    ref = statistics.median(per["hook"])
    print(f"\nbatch {a.batch}, {a.steps} steps a segment, {a.rounds} rounds, "
          f"{torch.cuda.get_device_name(dev) if cuda else 'CPU (gloo)'}")
    print(f"{'variant':10}{'ms/step (median)':>18}{'vs hook':>10}   each")
    for v in variants:
        m = statistics.median(per[v])
        print(f"{v:10}{m:18.3f}{100 * (m / ref - 1):+9.2f}%   " + ", ".join(f"{t:.2f}" for t in per[v]))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
