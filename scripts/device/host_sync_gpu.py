"""A DDP loop on the GPU whose ranks differ only in their host syncs (issue 46's host-sync row).

Every rank trains the same MLP on `cuda:LOCAL_RANK % devices` (with one GPU, all ranks share
it: the gloo backend, since NCCL refuses two ranks on one device; gloo all-reduces CUDA tensors
through host memory). `--sync-rank R` makes rank R
(-1: every rank) call `loss.item()` where `--sync-at` says: `end` (after optimizer.step(), the
usual logging line: it waits for the optimizer's kernels) or `forward` (right after the
forward: it waits for the whole forward). The other ranks never sync on the host. Prints the
script's own samples/s at the end (rank 0; steps after the first 5).

    ddptop attach --k 2 --backend gloo -- scripts/device/host_sync_gpu.py --unhide-gpu --sync-rank 0
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# `ddptop attach --backend gloo` hides the GPUs (CUDA_VISIBLE_DEVICES=""), and its NCCL mode
# refuses k=2 on one GPU: `--unhide-gpu` shows GPU 0 again before torch (and ddptop's bootstrap,
# which starts at the import of torch) first asks CUDA anything.
if "--unhide-gpu" in sys.argv and not os.environ.get("CUDA_VISIBLE_DEVICES"):
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--sync-rank", type=int, default=0)
    p.add_argument("--sync-at", choices=("end", "forward"), default="end")
    p.add_argument("--backend", default=os.environ.get("DDP_BACKEND", "gloo"))
    p.add_argument("--unhide-gpu", action="store_true", help="see the top of this file")
    a = p.parse_args()
    dist.init_process_group(a.backend)
    rank = dist.get_rank()
    if torch.cuda.is_available():
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        wait = torch.cuda.synchronize
    else:  # a check of the script (and of host_sync_one_gpu.sh) on a machine without a GPU
        dev, wait = torch.device("cpu"), (lambda: None)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(a.layers):
        layers += [nn.Linear(a.hidden, a.hidden), nn.ReLU()]
    net = nn.Sequential(*layers, nn.Linear(a.hidden, 10)).to(dev)
    model = DDP(net, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(a.batch, a.hidden, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    syncs = a.sync_rank in (-1, rank)
    total = 0.0
    t0 = 0.0
    for step in range(a.steps):
        if step == 5:
            wait()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        if syncs and a.sync_at == "forward":
            total += loss.item()
        loss.backward()
        opt.step()
        if syncs and a.sync_at == "end":
            total += loss.item()
    wait()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(f"script: {(a.steps - 5) * a.batch / dt:.1f} samples/s per rank, "
              f"sync_rank={a.sync_rank} sync_at={a.sync_at} loss_sum={total:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
