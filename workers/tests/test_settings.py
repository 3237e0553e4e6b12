"""One settings dataclass per experiment, converted once from the command line; the worker's
lines to stdout/stderr are written whole."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import pytest

from ddptop_worker import __main__ as cli
from ddptop_worker import allreduce, cadence, probe, runtime, train
from ddptop_worker.data import DataConfig
from ddptop_worker.runtime import WorkerError


def parse(argv: list[str]) -> argparse.Namespace:
    return cli._parser().parse_args(argv)


def test_probe_blocks_default_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTOP_PROBE_BLOCKS", "3")
    assert probe.ProbeSettings.from_args(parse(["probe"])).blocks == 3
    assert probe.ProbeSettings.from_args(parse(["probe", "--blocks", "5"])).blocks == 5
    monkeypatch.delenv("DDPTOP_PROBE_BLOCKS")
    assert probe.ProbeSettings.from_args(parse(["probe"])).blocks == 15
    monkeypatch.setenv("DDPTOP_PROBE_BLOCKS", "three")
    s = probe.ProbeSettings.from_args(parse(["probe"]))
    with pytest.raises(WorkerError, match="DDPTOP_PROBE_BLOCKS"):
        s.check()


def test_train_settings_hold_every_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPTOP_DATASET_DIR", raising=False)
    monkeypatch.delenv("DDPTOP_TIME_EVERY", raising=False)
    s = train.TrainSettings.from_args(
        parse(["train", "--experiment", "strong", "--batch", "64", "--samples", "512",
               "--data-path", "loader", "--no-instrument", "--time-every", "4", "--seed", "3"])
    )
    assert s.experiment == "strong" and s.batch == 64 and not s.instrument and s.time_every == 4
    assert s.data == DataConfig("auto", "loader", None, 512, 3)
    assert s.per_rank_batch(4) == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.batch = 1  # type: ignore[misc]
    # every option the parser defines is read into the settings (none left to re-parse later)
    fields = {f.name for f in dataclasses.fields(train.TrainSettings)} | {
        f.name for f in dataclasses.fields(DataConfig)
    }
    aliases = {"data": "kind", "data_path": "path", "command": None, "func": None}
    for name in vars(parse(["train"])):
        assert aliases.get(name, name) in fields | {None}, name


def test_time_every_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTOP_TIME_EVERY", "10")
    assert train.TrainSettings.from_args(parse(["train"])).time_every == 10
    monkeypatch.setenv("DDPTOP_TIME_EVERY", "auto")
    assert train.TrainSettings.from_args(parse(["train"])).time_every == cadence.AUTO
    for bad in ("ten", "0"):
        monkeypatch.setenv("DDPTOP_TIME_EVERY", bad)
        with pytest.raises(SystemExit) as e:  # argparse's one-line usage error, exit 2
            parse(["train"])
        assert e.value.code == 2


@pytest.mark.parametrize(
    ("argv", "k", "msg"),
    [
        (["train", "--epochs", "0"], 1, "--epochs, --batch and --samples must be >= 1"),
        (["train", "--experiment", "strong", "--batch", "2"], 4, "global batch 2 < 4 ranks"),
        (["train", "--buckets-every", "0"], 1, "--buckets-every"),
    ],
)
def test_train_settings_are_checked_once(argv: list[str], k: int, msg: str) -> None:
    s = train.TrainSettings.from_args(parse(argv))
    with pytest.raises(WorkerError, match=msg):
        s.per_rank_batch(k)


def test_probe_and_allreduce_settings() -> None:
    p = probe.ProbeSettings.from_args(parse(["probe", "--blocks", "2", "--block-steps", "3",
                                             "--warmup-steps", "1"]))
    assert (p.blocks, p.block_steps, p.warmup_steps) == (2, 3, 1)
    assert p.synced_warmup == 11  # DDP's logger samples the first ten synced iterations
    assert p.total_steps == 11 + 1 + 2 * 2 * 3
    with pytest.raises(WorkerError):
        probe.ProbeSettings(blocks=0).check()
    a = allreduce.AllreduceSettings.from_args(parse(["allreduce", "--max-bytes", "4096",
                                                     "--extra-bytes", "2048"]))
    assert a.sizes() == [1024, 2048, 4096]
    with pytest.raises(WorkerError, match="--iters"):
        dataclasses.replace(a, iters=0).sizes()


def test_the_experiments_read_settings_not_the_namespace() -> None:
    for fn in (train.train, probe.probe, allreduce.sweep):
        (param,) = inspect.signature(fn).parameters.values()
        assert "Settings" in str(param.annotation), fn
    assert "args" not in {f.name for f in dataclasses.fields(train.Trainer)}


class Recorder:
    """A text stream without a file descriptor that records each write call."""

    encoding = "utf-8"

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return len(s)

    def flush(self) -> None:
        pass


def test_stdout_and_error_lines_are_single_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPTOP_SOCKET", raising=False)
    monkeypatch.setattr(runtime, "install_pdeathsig", lambda: None)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    out, err = Recorder(), Recorder()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    rc = cli.main(["allreduce", "--min-bytes", "1024", "--max-bytes", "4096", "--warmup", "0",
                   "--iters", "1", "--backend", "gloo"])
    assert rc == 0
    assert len(out.writes) == 2  # one row per size
    assert all(w.endswith("\n") and w.count("\n") == 1 for w in out.writes), out.writes
    rc = cli.main(["probe", "--batch", "0", "--backend", "gloo"])
    assert rc == 1
    assert err.writes == ["ddptop_worker probe (rank 0): error: --batch, --blocks "
                          "(DDPTOP_PROBE_BLOCKS) and --block-steps must be >= 1, "
                          "--warmup-steps >= 0\n"]
