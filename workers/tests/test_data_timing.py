"""Data sources/paths and the timing arithmetic, without any process group."""

from __future__ import annotations

import gzip
import os
import struct
from collections.abc import Iterator

import needs
import pytest
import torch

from ddptop_worker import data as data_mod
from ddptop_worker.data import Data, DataConfig, DataError
from ddptop_worker.timing import (
    BucketRecord,
    BucketTimer,
    Clock,
    Pending,
    StepMarks,
    bucket_timeline,
    exposed_from_ready,
    parse_bucket_sizes,
    start_inferred,
)

TV_HINT = "the loader tests need torchvision==0.26.0 (scripts/test_env.sh installs it)"


def write_idx(folder: str, n: int, gz: bool) -> None:
    os.makedirs(folder, exist_ok=True)
    images = bytes((i * 7) % 256 for i in range(n * 28 * 28))
    labels = bytes(i % 10 for i in range(n))
    blobs = {
        data_mod.IMAGES_FILE: struct.pack(">IIII", 2051, n, 28, 28) + images,
        data_mod.LABELS_FILE: struct.pack(">II", 2049, n) + labels,
    }
    for name, blob in blobs.items():
        if gz:
            with gzip.open(os.path.join(folder, name + ".gz"), "wb") as f:
                f.write(blob)
        else:
            with open(os.path.join(folder, name), "wb") as f:
                f.write(blob)


@pytest.mark.parametrize("gz", [False, True])
def test_real_fashion_mnist_files_are_read(tmp_path: object, gz: bool) -> None:
    root = str(tmp_path)
    write_idx(os.path.join(root, "FashionMNIST", "raw"), 40, gz)
    assert data_mod.find_raw_dir(root) == os.path.join(root, "FashionMNIST/raw")
    images, labels, desc = data_mod.source(DataConfig("real", "device", root, 32, 0))
    assert images.shape == (32, 28, 28) and images.dtype == torch.uint8
    assert labels.tolist()[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    assert "FashionMNIST" in desc


def test_real_data_missing_is_a_clear_error(tmp_path: object) -> None:
    with pytest.raises(DataError, match="nothing is downloaded"):
        data_mod.source(DataConfig("real", "device", str(tmp_path), 32, 0))
    # auto falls back to synthetic
    _, _, desc = data_mod.source(DataConfig("auto", "device", str(tmp_path), 8, 0))
    assert desc.startswith("synthetic")


def test_synthetic_is_deterministic() -> None:
    a, la = data_mod.synthetic_fashion_mnist(16, 3)
    b, lb = data_mod.synthetic_fashion_mnist(16, 3)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert a.shape == (16, 28, 28) and int(la.max()) <= 9


@pytest.mark.parametrize("path", ["device", "loader", "fast-loader"])
def test_every_path_gives_full_batches_per_rank(path: str) -> None:
    """Full batches on every rank; `loader` (the book's) also its last, partial one (50 = 6x8 + 2)."""
    cpu = torch.device("cpu")
    d0 = Data(DataConfig("synthetic", path, None, 100, 0), batch=8, rank=0, world_size=2, device=cpu)
    d1 = Data(DataConfig("synthetic", path, None, 100, 0), batch=8, rank=1, world_size=2, device=cpu)
    want = [8] * 6 + ([2] if path == "loader" else [])
    assert d0.steps_per_epoch == d1.steps_per_epoch == len(want)
    batches = list(d0.epoch(0))
    assert [int(b[1].shape[0]) for b in batches] == want
    x, y = batches[0]
    assert x.shape == (8, 1, 64, 64) and x.dtype == torch.float32 and y.shape == (8,)
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    # each epoch reshuffles; the two ranks see different samples
    xs0 = torch.cat([b[0] for b in batches])
    xs0_next = torch.cat([b[0] for b in d0.epoch(1)])
    xs1 = torch.cat([b[0] for b in d1.epoch(0)])
    assert not torch.equal(xs0, xs0_next)
    assert not torch.equal(xs0, xs1)


def test_loader_is_the_books_torchvision_pipeline() -> None:
    needs.module("torchvision", TV_HINT)
    from PIL import Image
    from torchvision import datasets, transforms

    d = Data(DataConfig("synthetic", "loader", None, 64, 0), batch=8, rank=0, world_size=1,
             device=torch.device("cpu"))
    loader = d._loader
    assert loader is not None
    ds = loader.dataset
    # torchvision's own FashionMNIST class: its __getitem__ makes each sample a PIL image.
    assert isinstance(ds, datasets.FashionMNIST)
    images, labels = data_mod.synthetic_fashion_mnist(64, 0)
    assert torch.equal(ds.data, images) and torch.equal(ds.targets, labels)
    assert isinstance(ds.transform, transforms.Compose)
    resize, to_tensor = ds.transform.transforms
    assert isinstance(resize, transforms.Resize) and resize.size == 64
    assert isinstance(to_tensor, transforms.ToTensor)
    ds.transform = None
    img, y = ds[3]
    assert isinstance(img, Image.Image) and img.size == (28, 28) and isinstance(y, int)
    # The book's DataLoader arguments, everything else at its default.
    assert loader.num_workers == 2 and loader.batch_size == 8
    assert loader.pin_memory is False and loader.persistent_workers is False
    assert loader.drop_last is False
    assert "as PIL images, torchvision Resize(64) + ToTensor per sample" in d.description
    assert "2 loader workers per rank" in d.description


def test_loader_samples_match_the_books_transforms() -> None:
    needs.module("torchvision", TV_HINT)
    from PIL import Image
    from torchvision import transforms

    d = Data(DataConfig("synthetic", "loader", None, 16, 0), batch=4, rank=0, world_size=1,
             device=torch.device("cpu"))
    assert d._loader is not None
    x, y = d._loader.dataset[5]
    images, labels = data_mod.synthetic_fashion_mnist(16, 0)
    want = transforms.ToTensor()(transforms.Resize(64)(Image.fromarray(images[5].numpy())))
    assert torch.equal(x, want) and y == int(labels[5])


def test_a_loader_epoch_is_the_books_with_its_partial_batch_and_a_cut_one_is_not_drained() -> None:
    """The book trains on every batch its loader gives (drop_last=False: the last one is
    partial) and its DistributedSampler pads to a multiple of k; its loop runs the loader to the
    end (the workers' shutdown) inside its epoch. So does the `loader` path."""
    needs.module("torchvision", TV_HINT)
    d = Data(DataConfig("synthetic", "loader", None, 20, 0), batch=8, rank=0, world_size=1,
             device=torch.device("cpu"))
    assert (d.steps_per_epoch, d.samples_per_epoch) == (3, 20)
    g = d.epoch(0)
    assert [int(next(g)[1].shape[0]) for _ in range(3)] == [8, 8, 4]
    g.close()
    with pytest.raises(StopIteration):
        next(g)
    # 21 samples over k=2: the sampler pads to 22, 11 per rank: batches of 8 and 3 on each rank.
    for rank in (0, 1):
        dk = Data(DataConfig("synthetic", "loader", None, 21, 0), batch=8, rank=rank,
                  world_size=2, device=torch.device("cpu"))
        assert (dk.steps_per_epoch, dk.samples_per_epoch) == (2, 11)
        assert [int(y.shape[0]) for _, y in dk.epoch(0)] == [8, 3]
    # What close() reads, counted on a stand-in loader of 3 batches.
    read: list[int] = []

    class Counting:
        def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for i, n in enumerate((8, 8, 4)):
                read.append(i)
                yield torch.zeros(n, 1, 64, 64), torch.zeros(n, dtype=torch.long)

    d._loader = Counting()  # type: ignore[assignment]
    whole = d.epoch(1)
    next(whole), next(whole), next(whole)
    whole.close()
    assert read == [0, 1, 2], "a whole epoch: every batch is read inside it"
    read.clear()
    cut = d.epoch(2)
    next(cut)
    cut.close()
    assert read == [0], "an epoch cut short (a stop) is not drained"


def test_device_path_steps_take_views_of_one_epoch_tensor() -> None:
    d = Data(DataConfig("synthetic", "device", None, 64, 0), batch=8, rank=0, world_size=1,
             device=torch.device("cpu"))
    batches = list(d.epoch(0))
    storages = {x.untyped_storage().data_ptr() for x, _ in batches}
    assert len(storages) == 1  # slices of one tensor: no per-step gather or copy
    assert all(x._base is not None and y._base is not None for x, y in batches)


def test_too_few_samples() -> None:
    with pytest.raises(DataError, match="fewer than one batch"):
        Data(DataConfig("synthetic", "device", None, 10, 0), batch=8, rank=0, world_size=2,
             device=torch.device("cpu"))


def test_bucket_timeline_arithmetic() -> None:
    # backward starts at t=10 s; buckets ready at +1, +2, +6 ms; all-reduces serialize
    t0 = 10.0
    recs = [
        BucketRecord(0, 100, t0 + 0.001, t0 + 0.0030),  # runs 1..3 ms
        BucketRecord(1, 200, t0 + 0.002, t0 + 0.0050),  # waits for bucket 0: starts at 3
        BucketRecord(2, 300, t0 + 0.006, t0 + 0.0065),  # starts at ready (6)
    ]
    spans, bwd_compute, exposed = bucket_timeline(recs, t0, t0 + 0.007)
    assert [s.index for s in spans] == [0, 1, 2]
    assert [round(s.start_ms, 6) for s in spans] == [1.0, 3.0, 6.0]
    assert [round(s.done_ms, 6) for s in spans] == [3.0, 5.0, 6.5]
    assert bwd_compute == pytest.approx(6.0)
    assert exposed == pytest.approx(1.0)
    # an unfinished record is skipped, not reported as zero
    spans2, _, _ = bucket_timeline([BucketRecord(0, 1, t0 + 0.001, None)], t0, t0 + 0.002)
    assert spans2 == []


def test_measured_kernel_time_gives_the_start_and_the_queueing() -> None:
    t0 = 10.0
    recs = [
        BucketRecord(0, 100, t0 + 0.001, t0 + 0.0030, kernel_ms=1.5),  # queued 0.5 ms
        BucketRecord(1, 200, t0 + 0.002, t0 + 0.0050, kernel_ms=1.0),  # started at 4, not 3
        BucketRecord(2, 300, t0 + 0.006, t0 + 0.0065, kernel_ms=9.0),  # longer than possible
    ]
    spans, _, _ = bucket_timeline(recs, t0, t0 + 0.007)
    assert [round(s.start_ms, 6) for s in spans] == [1.5, 4.0, 6.0]  # clamped at ready
    assert [s.kernel_ms for s in spans] == [1.5, 1.0, 9.0]
    assert not start_inferred(spans)
    spans2, _, _ = bucket_timeline([BucketRecord(0, 1, t0, t0 + 0.001)], t0, t0 + 0.002)
    assert spans2[0].kernel_ms is None and start_inferred(spans2)


class _Work:
    def __init__(self, ms: float | None) -> None:
        self.ms = ms

    def _get_duration(self) -> float:
        if self.ms is None:
            raise RuntimeError("This Backend doesn't support getDuration.")
        return self.ms


def test_kernel_durations_come_from_the_work_and_stop_on_the_first_failure() -> None:
    bt = BucketTimer(Clock(torch.device("cpu")), kernel_timing=True)
    recs = [BucketRecord(0, 1, 0.0, 0.1, work=_Work(0.25)), BucketRecord(1, 1, 0.0, 0.1, work=_Work(None))]
    bt.resolve_kernels(recs)
    assert recs[0].kernel_ms == 0.25 and recs[1].kernel_ms is None
    assert not bt.kernel_timing and "getDuration" in (bt.kernel_error or "")
    assert all(r.work is None for r in recs)  # no Work outlives its step


def test_pending_resolves_host_marks_immediately() -> None:
    p = Pending(lag=2)
    for i in range(3):
        p.push(StepMarks(marks={"a": float(i), "b": float(i) + 0.5}, info={"i": i}))
    done = p.pop_ready()
    assert [s.info["i"] for s in done] == [0, 1, 2] and len(p) == 0
    assert Clock.ms(0.0, 0.5) == 500.0


def test_ready_marks_alone_give_the_timelines_exposed_comm() -> None:
    t0 = 10.0
    full = [
        BucketRecord(0, 100, t0 + 0.001, t0 + 0.0030),
        BucketRecord(1, 200, t0 + 0.002, t0 + 0.0050),
        BucketRecord(2, 300, t0 + 0.006, t0 + 0.0065),
    ]
    _, bwd_compute, exposed = bucket_timeline(full, t0, t0 + 0.0071)
    ready_only = [BucketRecord(r.index, r.nbytes, r.ready, None, timeline=False) for r in full]
    got = exposed_from_ready(ready_only, t0, t0 + 0.0071)
    assert got is not None
    assert got[0] == pytest.approx(bwd_compute) and got[1] == pytest.approx(exposed)
    assert got[1] == pytest.approx(1.1)
    assert exposed_from_ready([], t0, t0 + 0.001) is None
    # a backward that ended before its last ready mark (clock jitter) exposes nothing
    assert exposed_from_ready(ready_only, t0, t0 + 0.005) == (pytest.approx(6.0), 0.0)


def test_pending_does_not_wait_for_done_marks_a_step_did_not_take() -> None:
    p = Pending(lag=0)
    p.push(StepMarks(marks={"a": 0.0, "b": 0.5},
                     buckets=[BucketRecord(0, 1, 0.1, None, timeline=False)], info={"i": 0}))
    assert [s.info["i"] for s in p.pop_ready()] == [0]  # not stuck on the missing done mark
    p = Pending(lag=2)
    p.push(StepMarks(marks={"a": 0.0, "b": 0.5},
                     buckets=[BucketRecord(0, 1, 0.1, None)], info={"i": 1}))
    assert p.pop_ready() == []  # a timeline step waits for its callback's mark
    p._q[0].buckets[0].done = 0.3  # type: ignore[index]
    assert [s.info["i"] for s in p.pop_ready()] == [1]


class _HookWork:
    def __init__(self, fut: torch.futures.Future[list[torch.Tensor]]) -> None:
        self.fut = fut

    def get_future(self) -> torch.futures.Future[list[torch.Tensor]]:
        return self.fut


class _Bucket:
    def __init__(self, buf: torch.Tensor) -> None:
        self.buf = buf

    def buffer(self) -> torch.Tensor:
        return self.buf

    def index(self) -> int:
        return 0

    def is_last(self) -> bool:
        return True


def test_the_hook_marks_ready_only_when_the_step_takes_no_timeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ddptop_worker.timing as timing_mod

    bt = BucketTimer(Clock(torch.device("cpu")), process_group=object())  # type: ignore[arg-type]
    bt.recording = True
    bt._avg = False  # gloo's path: divide, then sum
    monkeypatch.setattr(timing_mod.dist, "get_world_size", lambda group=None: 1)
    for timeline in (True, False):
        fut: torch.futures.Future[list[torch.Tensor]] = torch.futures.Future()
        monkeypatch.setattr(timing_mod.dist, "all_reduce", lambda *a, **k: _HookWork(fut))
        recs = bt.begin_step(timeline)
        assert recs is not None
        buf = torch.ones(4)
        out = timing_mod.timed_allreduce_hook(bt, _Bucket(buf))  # type: ignore[arg-type]
        fut.set_result([buf])
        assert torch.equal(out.wait(), buf)
        bt.end_step()
        assert len(recs) == 1 and recs[0].timeline is timeline
        assert (recs[0].done is not None) is timeline, "done marks only on timeline steps"


def test_parse_bucket_sizes() -> None:
    assert parse_bucket_sizes("9461800, 26501120, 8740352") == [9461800, 26501120, 8740352]
    assert parse_bucket_sizes(None) is None
    assert parse_bucket_sizes("") is None
    assert parse_bucket_sizes("x,y") is None
