"""Loop shape 'lightning_ddp' (issue 43): a PyTorch Lightning script, `Trainer(strategy="ddp")`
launched by torchrun, with its own throughput logging; prints its own samples/s.

How it runs under torchrun: Lightning's `TorchElasticEnvironment` is chosen when torchrun's
variables are set (`TORCHELASTIC_RUN_ID`, `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, ...): Lightning then
launches nothing itself, each torchrun process is one rank, and `devices` must equal the
processes per node, so the script passes `LOCAL_WORLD_SIZE` (2 at `--nproc-per-node=2`).
`accelerator` is "cpu" (gloo) when no GPU is visible, else "gpu" (NCCL, one GPU per rank).
Lightning wraps the LightningModule in DistributedDataParallel and gives the DataLoader a
DistributedSampler; the optimizer is stepped by Lightning's automatic optimization, which calls
`optimizer.step(closure)` with the forward and backward inside the closure.

Its own throughput, comparable with ddptop's steady-state samples/s: a step is one optimizer step
(`trainer.global_step`), one batch of `--batch` samples per rank; the dataset holds exactly
`--steps` batches per rank (one epoch, `max_steps=--steps`). A Callback takes each rank's host
clock at `on_train_batch_end` of optimizer step `--warmup` (3, the steps ddptop leaves out as
warm-up) and of the last step (synchronizing the GPU there only), so it times steps 4..N as
ddptop does; at the end rank 0 prints `script samples/s: X`, each rank's samples over its own
window summed over the ranks (how ddptop defines a run's figure), and `script global samples/s
(rank 0's clock): Y`. Lightning's `ThroughputMonitor` is not used: it reports a sliding window
of batches through a logger, not a figure over named steps. Nothing here knows about ddptop.
"""

from __future__ import annotations

import argparse
import os
import time

import lightning as L
import torch
import torch.distributed as dist
from loop import Net
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = Net(hidden, with_unused=False)
        self.loss_fn = nn.CrossEntropyLoss()

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return self.loss_fn(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


class OwnThroughput(L.Callback):
    """Each rank's samples/s over optimizer steps warmup+1..N, on its own host clock."""

    def __init__(self, warmup: int, batch: int) -> None:
        self.warmup, self.batch = warmup, batch
        self.t0 = self.t1 = 0.0
        self.last = 0

    def _sync(self, pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: object, batch: object, batch_idx: int) -> None:
        step = trainer.global_step  # optimizer steps done
        if step == self.warmup:
            self._sync(pl_module)
            self.t0 = time.perf_counter()
        elif step > self.warmup:
            self._sync(pl_module) if step == trainer.max_steps else None
            self.t1 = time.perf_counter()
            self.last = step

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        seconds = self.t1 - self.t0
        timed = self.last - self.warmup
        samples = timed * self.batch
        rates = torch.tensor([samples / seconds], dtype=torch.float64, device=pl_module.device)
        dist.all_reduce(rates)
        if trainer.global_rank == 0:
            world = trainer.world_size
            print(f"script samples/s: {rates.item():.1f} (sum of {world} ranks' own; optimizer "
                  f"steps {self.warmup + 1}..{self.last}, {timed} steps, {samples} samples/rank, "
                  f"rank 0 {seconds:.3f} s)", flush=True)
            print(f"script global samples/s (rank 0's clock): {samples * world / seconds:.1f}",
                  flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40, help="optimizer steps (max_steps)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=32, help="batch size per rank")
    p.add_argument("--hidden", type=int, default=512)
    args = p.parse_args()
    devices = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    L.seed_everything(0, verbose=False)
    n = args.steps * args.batch * world
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(n, 28 * 28, generator=g), torch.randint(0, 10, (n,), generator=g))
    loader = DataLoader(ds, batch_size=args.batch, shuffle=False)
    trainer = L.Trainer(
        strategy="ddp", accelerator=accelerator, devices=devices, num_nodes=1,
        max_steps=args.steps, max_epochs=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[OwnThroughput(args.warmup, args.batch)],
    )
    trainer.fit(Model(args.hidden), loader)


if __name__ == "__main__":
    main()
