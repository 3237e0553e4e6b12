"""The dataset folder comes from --data-dir or $DDPTOP_DATASET_DIR (how ddptop passes it)."""

from __future__ import annotations

import argparse

import pytest

from ddptop_worker import train


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    train.add_args(p)
    return p.parse_args(argv)


def test_env_supplies_the_dataset_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTOP_DATASET_DIR", "/data/fmnist")
    args = parse([])
    assert args.data == "auto" and args.data_dir == "/data/fmnist"
    assert parse(["--data-dir", "/other"]).data_dir == "/other"


def test_without_env_the_default_is_synthetic_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPTOP_DATASET_DIR", raising=False)
    args = parse([])
    assert args.data == "auto" and args.data_dir is None
