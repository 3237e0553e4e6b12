"""Input data: FashionMNIST-shaped images (1x28x28 uint8, 10 classes) resized to 1x64x64 as in
the book, either synthetic (default, deterministic) or the real FashionMNIST raw files (never
downloaded). Two paths:

- `loader`: a torch DataLoader with a DistributedSampler over all samples; the resize happens per
  sample in the loader (like the book's transforms), batches are copied to the device.
- `device`: this rank's share of the samples resized once and kept resident on the device; each
  epoch shuffles it with one gather and the steps take contiguous slices (views).
"""

from __future__ import annotations

import argparse
import gzip
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .models import IMAGE_SIZE

RAW_SIZE = 28
FASHION_MNIST_TRAIN = 60_000
IMAGES_FILE = "train-images-idx3-ubyte"
LABELS_FILE = "train-labels-idx1-ubyte"

Batch = tuple[torch.Tensor, torch.Tensor]


class DataError(RuntimeError):
    pass


@dataclass(frozen=True)
class DataConfig:
    kind: str = "synthetic"  # synthetic | real | auto
    path: str = "device"  # loader | device
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
        "--data-path", choices=("loader", "device"), default="device", help="input pipeline"
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
    """Per-sample resize in the loader, like the book's ToTensor+Resize transforms."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __getitem__(self, i: int) -> Batch:
        return resize(self.images[i : i + 1])[0], self.labels[i]


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
        if cfg.path not in ("loader", "device"):
            raise DataError(f"unknown data path {cfg.path!r} (loader|device)")
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
        self._loader: DataLoader[Batch] | None = None
        self._sampler: DistributedSampler[Batch] | None = None
        self._x: torch.Tensor | None = None
        self._y: torch.Tensor | None = None
        if cfg.path == "loader":
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
        return self.steps_per_epoch * self.batch

    def epoch(self, e: int) -> Iterator[Batch]:
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
        return next(iter(self.epoch(0)))
