"""Input data: FashionMNIST-shaped images (1x28x28 uint8, 10 classes) resized to 1x64x64 as in
the book, either synthetic (default, deterministic) or the real FashionMNIST raw files (never
downloaded). Three paths:

- `loader`: the book's pipeline, exactly: each sample a PIL image made by torchvision's own
  `FashionMNIST.__getitem__`, then `transforms.Resize(64)` and `transforms.ToTensor()`, batched
  by `DataLoader(batch_size, sampler=DistributedSampler(...), num_workers=2)` with every other
  argument at its default (no pinning, workers started afresh each epoch), `set_epoch` per epoch
  and a plain `.to(device)`. Needs torchvision.
- `fast-loader`: ddptop's faster pipeline: tensors resized with `F.interpolate` in the loader,
  pinned memory, persistent workers, non-blocking copies. Its gap to `loader` is the cost of the
  book's input pipeline.
- `device`: this rank's share of the samples resized once and kept resident on the device; each
  epoch shuffles it with one gather and the steps take contiguous slices (views).
"""

from __future__ import annotations

import argparse
import gzip
import os
import struct
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .models import IMAGE_SIZE

RAW_SIZE = 28
FASHION_MNIST_TRAIN = 60_000
IMAGES_FILE = "train-images-idx3-ubyte"
LABELS_FILE = "train-labels-idx1-ubyte"

Batch = tuple[torch.Tensor, torch.Tensor]

PATHS = ("device", "loader", "fast-loader")
# The book's DataLoader worker processes (its `num_workers=2`).
BOOK_WORKERS = 2


class DataError(RuntimeError):
    pass


@dataclass(frozen=True)
class DataConfig:
    kind: str = "synthetic"  # synthetic | real | auto
    path: str = "device"  # device | loader | fast-loader
    data_dir: str | None = None
    samples: int = FASHION_MNIST_TRAIN
    seed: int = 0

    @staticmethod
    def from_args(a: argparse.Namespace) -> DataConfig:
        """From the options of `add_data_args`."""
        return DataConfig(a.data, a.data_path, a.data_dir, a.samples, a.seed)


def add_data_args(p: argparse.ArgumentParser) -> None:
    """--samples, --data, --data-path, --data-dir, --seed: what `DataConfig.from_args` reads."""
    p.add_argument(
        "--samples", type=int, default=60000, help="samples per epoch, split across ranks"
    )
    p.add_argument(
        "--data",
        choices=("synthetic", "real", "auto"),
        default="auto",
        help="auto: real if --data-dir (or $DDPTOP_DATASET_DIR) has the raw files, else synthetic",
    )
    p.add_argument(
        "--data-path",
        choices=PATHS,
        default="device",
        help="input pipeline: device (resident tensors), loader (the book's torchvision "
        "DataLoader), fast-loader (ddptop's pinned, persistent, tensor-resize DataLoader)",
    )
    p.add_argument(
        "--data-dir",
        default=os.environ.get("DDPTOP_DATASET_DIR") or None,
        help="folder with FashionMNIST raw files (default: $DDPTOP_DATASET_DIR)",
    )
    p.add_argument("--seed", type=int, default=0, help="data and init seed")


def _open_maybe_gz(path: str) -> bytes:
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    with gzip.open(path + ".gz", "rb") as f:
        return f.read()


def find_raw_dir(data_dir: str | None) -> str | None:
    """The folder holding FashionMNIST's raw training files under data_dir, or None."""
    if not data_dir:
        return None
    for sub in ("", "FashionMNIST/raw", "raw", "FashionMNIST"):
        d = os.path.join(data_dir, sub)
        have = all(
            os.path.exists(os.path.join(d, n)) or os.path.exists(os.path.join(d, n + ".gz"))
            for n in (IMAGES_FILE, LABELS_FILE)
        )
        if have:
            return d
    return None


def load_fashion_mnist(raw_dir: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Parse the idx files: (N,28,28) uint8 images and (N,) int64 labels."""
    img = _open_maybe_gz(os.path.join(raw_dir, IMAGES_FILE))
    lab = _open_maybe_gz(os.path.join(raw_dir, LABELS_FILE))
    magic, n, rows, cols = struct.unpack(">IIII", img[:16])
    if magic != 2051 or rows != RAW_SIZE or cols != RAW_SIZE:
        raise DataError(f"{raw_dir}/{IMAGES_FILE}: not an idx3 28x28 image file")
    magic_l, n_l = struct.unpack(">II", lab[:8])
    if magic_l != 2049 or n_l != n:
        raise DataError(f"{raw_dir}/{LABELS_FILE}: not an idx1 label file matching the images")
    images = torch.frombuffer(bytearray(img[16 : 16 + n * rows * cols]), dtype=torch.uint8)
    labels = torch.frombuffer(bytearray(lab[8 : 8 + n]), dtype=torch.uint8)
    return images.view(n, rows, cols), labels.long()


def synthetic_fashion_mnist(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic FashionMNIST-shaped data: (n,28,28) uint8 images, (n,) int64 labels."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    # A faint class-dependent mean so that the task is learnable, plus uniform noise.
    noise = torch.randint(0, 200, (n, RAW_SIZE, RAW_SIZE), generator=g, dtype=torch.int16)
    images = (noise + labels.view(n, 1, 1).to(torch.int16) * 5).clamp_(0, 255).to(torch.uint8)
    return images, labels


def source(cfg: DataConfig) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(images, labels, description) for cfg.samples samples."""
    raw_dir = find_raw_dir(cfg.data_dir)
    if cfg.kind == "real" and raw_dir is None:
        raise DataError(
            f"--data real: no FashionMNIST raw files ({IMAGES_FILE}[.gz], {LABELS_FILE}[.gz]) "
            f"under --data-dir {cfg.data_dir!r}; nothing is downloaded, use --data synthetic"
        )
    if cfg.kind in ("real", "auto") and raw_dir is not None:
        images, labels = load_fashion_mnist(raw_dir)
        if cfg.samples > images.shape[0]:
            raise DataError(f"--samples {cfg.samples} > {images.shape[0]} images in {raw_dir}")
        return images[: cfg.samples], labels[: cfg.samples], f"FashionMNIST from {raw_dir}"
    images, labels = synthetic_fashion_mnist(cfg.samples, cfg.seed)
    return images, labels, f"synthetic FashionMNIST-shaped (seed {cfg.seed})"


def resize(images_u8: torch.Tensor) -> torch.Tensor:
    """(n,28,28) uint8 -> (n,1,64,64) float32 in [0,1] (bilinear, like the book's Resize(64))."""
    x = images_u8.unsqueeze(1).float().div_(255.0)
    return F.interpolate(x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False)


class ResizingDataset(Dataset[Batch]):
    """fast-loader: per-sample tensor resize in the loader (the work of the book's transforms
    without PIL)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __getitem__(self, i: int) -> Batch:
        return resize(self.images[i : i + 1])[0], self.labels[i]


def book_dataset(images: torch.Tensor, labels: torch.Tensor) -> Dataset[Any]:
    """torchvision's FashionMNIST over these images, with the book's transforms.

    The class is torchvision's own, so each sample goes through its `__getitem__` (uint8 tensor
    -> `PIL.Image` -> `Resize(64)` -> `ToTensor()`, label as a Python int) exactly as in the
    book; only the constructor is bypassed, because it reads (or downloads) files from a fixed
    layout, and the images here may be synthetic or raw files found elsewhere.
    """
    try:
        from torchvision import datasets, transforms
    except ImportError as e:
        raise DataError(
            "--data-path loader is the book's torchvision pipeline and needs torchvision "
            f"({e.name or 'torchvision'} is missing): pip install torchvision==0.26.0 "
            "(the release that pairs with torch 2.11.0), or use --data-path fast-loader"
        ) from None

    class BookFashionMNIST(datasets.FashionMNIST):
        def __init__(self) -> None:  # noqa: D107 - see book_dataset
            datasets.VisionDataset.__init__(
                self,
                root=None,
                transform=transforms.Compose([transforms.Resize(IMAGE_SIZE), transforms.ToTensor()]),
            )
            self.train = True
            self.data = images
            self.targets = labels

    return BookFashionMNIST()


class Data:
    """Batches for one rank. `epoch(e)` yields exactly `steps_per_epoch` (x, y) batches on device."""

    def __init__(
        self,
        cfg: DataConfig,
        *,
        batch: int,
        rank: int,
        world_size: int,
        device: torch.device,
    ) -> None:
        if cfg.path not in PATHS:
            raise DataError(f"unknown data path {cfg.path!r} ({'|'.join(PATHS)})")
        self.cfg = cfg
        self.batch = batch
        self.rank = rank
        self.world_size = world_size
        self.device = device
        images, labels, self.description = source(cfg)
        self.per_rank = int(images.shape[0]) // world_size
        self.steps_per_epoch = self.per_rank // batch
        if self.steps_per_epoch < 1:
            raise DataError(
                f"--samples {cfg.samples} over {world_size} rank(s) gives {self.per_rank} "
                f"samples per rank: fewer than one batch of {batch}"
            )
        self._samples_per_epoch = self.steps_per_epoch * batch
        if cfg.path == "loader":
            # The book's epoch: its DistributedSampler pads the samples to a multiple of k
            # (ceil(n/k) per rank) and its DataLoader keeps the last, partial batch
            # (drop_last=False), which the book trains on and counts. Measured on one H200,
            # leaving that step out read 1% above the book's loop (docs/results/loader.md).
            padded = -(-int(images.shape[0]) // world_size)
            self._samples_per_epoch = padded
            self.steps_per_epoch = -(-padded // batch)
        if cfg.path != "device":
            # The loaders' cost depends on how many cores each rank's workers get: said with
            # the data, so the gap between the two loaders is read against it (k=2, k=4 share).
            cores = len(os.sched_getaffinity(0))
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))  # torchrun's, per node
            workers = BOOK_WORKERS if cfg.path == "loader" or device.type == "cuda" else 0
            self.description += (
                f"; {cores} CPU cores for {local} rank(s) on this node "
                f"({cores / local:.1f} per rank), {workers} loader workers per rank"
            )
        self._loader: DataLoader[Any] | None = None
        self._sampler: DistributedSampler[Any] | None = None
        self._x: torch.Tensor | None = None
        self._y: torch.Tensor | None = None
        if cfg.path == "loader":
            book = book_dataset(images, labels)
            self.description += " as PIL images, torchvision Resize(64) + ToTensor per sample"
            # The book's arguments; everything else (pin_memory, persistent_workers, drop_last,
            # prefetch_factor) at DataLoader's defaults, as in the chapter's script. The seed
            # is the only addition: DistributedSampler's default is 0, ddptop's --seed is too.
            self._sampler = DistributedSampler(
                book, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed
            )
            self._loader = DataLoader(
                book, batch_size=batch, sampler=self._sampler, num_workers=BOOK_WORKERS
            )
        elif cfg.path == "fast-loader":
            ds = ResizingDataset(images, labels)
            self._sampler = DistributedSampler(
                ds, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True
            )
            workers = 2 if device.type == "cuda" else 0
            self._loader = DataLoader(
                ds,
                batch_size=batch,
                sampler=self._sampler,
                num_workers=workers,
                pin_memory=device.type == "cuda",
                drop_last=True,
                persistent_workers=workers > 0,
            )
        else:
            lo = rank * self.per_rank
            mine_x, self._y = images[lo : lo + self.per_rank], labels[lo : lo + self.per_rank]
            chunks = [
                resize(mine_x[i : i + 4096].to(device)) for i in range(0, self.per_rank, 4096)
            ]
            self._x = torch.cat(chunks)
            self._y = self._y.to(device)

    @property
    def samples_per_epoch(self) -> int:
        """Samples one rank trains on per epoch (with `loader`, the last batch may be smaller)."""
        return self._samples_per_epoch

    def epoch(self, e: int) -> Generator[Batch, None, None]:
        """This epoch's batches. The caller may stop early and should then `close()` the
        iterator inside its timed epoch: for `loader` that ends the epoch as the book's does."""
        if self.cfg.path == "loader" and self._loader is not None and self._sampler is not None:
            self._sampler.set_epoch(e)
            it = iter(self._loader)
            given = 0
            try:
                for x, y in it:
                    if given >= self.steps_per_epoch:
                        break
                    given += 1
                    xd, yd = x.to(self.device), y.to(self.device)
                    # The book rebinds `X, y = X.to(device), y.to(device)`: its host batch (a
                    # shared-memory block from a loader worker) is freed right there, after
                    # the copy and before the step's work is launched. Held in this frame, it
                    # would be freed one step later, inside the next data wait, while the GPU
                    # is busy: a different, cheaper pipeline than the book's (issue 48).
                    del x, y
                    yield xd, yd
            finally:
                # The book's loop runs its loader to the end (the last, partial batch, then the
                # workers' shutdown: they are not persistent), and that is part of its epoch:
                # after a whole epoch the rest is fetched and dropped here, where ddptop stops
                # after the full batches its steps count. An epoch cut short (a stop, a fault)
                # is not drained: the iterator's own clean-up stops the workers.
                if given >= self.steps_per_epoch:
                    for _ in it:
                        pass
            return
        if self._loader is not None and self._sampler is not None:
            self._sampler.set_epoch(e)
            non_blocking = self.device.type == "cuda"
            for i, (x, y) in enumerate(self._loader):
                if i >= self.steps_per_epoch:
                    break
                yield x.to(self.device, non_blocking=non_blocking), y.to(
                    self.device, non_blocking=non_blocking
                )
            return
        assert self._x is not None and self._y is not None
        # One gather per epoch, then each step takes a slice: a view, no kernel, no host work,
        # as in the bare loop. (A per-step index_select launched a gather kernel every step.)
        g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + e * 101 + self.rank)
        perm = torch.randperm(self.per_rank, generator=g).to(self.device)
        x, y = self._x.index_select(0, perm), self._y.index_select(0, perm)
        b = self.batch
        for i in range(self.steps_per_epoch):
            yield x[i * b : (i + 1) * b], y[i * b : (i + 1) * b]

    def fixed_batch(self) -> Batch:
        """One batch kept for repeated use (the no_sync probe)."""
        batches = self.epoch(0)
        first = next(batches)
        batches.close()  # not a whole epoch: a loader's workers stop, nothing more is read
        return first
