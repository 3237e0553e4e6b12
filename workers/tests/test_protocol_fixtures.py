"""The shared protocol fixtures (tests/fixtures/protocol/cases.jsonl) against the validator,
and the messages the client builds against the validator."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from conftest import REPO

from ddptop_worker import protocol
from ddptop_worker.client import Client, hello_message

CASES_PATH = os.path.join(REPO, "tests", "fixtures", "protocol", "cases.jsonl")


def load_cases() -> list[dict[str, Any]]:
    with open(CASES_PATH, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


CASES = load_cases()


def test_fixture_names_unique() -> None:
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names))
    assert any(c["expect"] == "accept" for c in CASES)
    assert any(c["expect"] == "reject" for c in CASES)


@pytest.mark.parametrize("case", [c for c in CASES if c["expect"] == "accept"], ids=lambda c: c["name"])
def test_accept(case: dict[str, Any]) -> None:
    msg = protocol.parse_line(case["raw"], case["dir"])
    assert msg["type"] == case["type"]
    assert protocol.validate(msg, case["dir"]) == case["type"]
    # bytes input works the same
    assert protocol.parse_line(case["raw"].encode("utf-8"), case["dir"])["type"] == case["type"]


@pytest.mark.parametrize("case", [c for c in CASES if c["expect"] == "reject"], ids=lambda c: c["name"])
def test_reject(case: dict[str, Any]) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_line(case["raw"], case["dir"])


def doc_fields(mtype: str) -> dict[str, Any]:
    """The type-specific fields of the doc_<type> fixture (common fields stripped)."""
    case = next(c for c in CASES if c["name"] == f"doc_{mtype}")
    msg: dict[str, Any] = json.loads(case["raw"])
    for k in ("v", "type", "rank", "step", "t"):
        msg.pop(k, None)
    return msg


# The client builds every worker message but the handshakes and the NCCL profiler plugin's own
# (the plugin is Rust: plugins/nccl-profiler).
WORKER_TYPES = sorted(t for t in protocol.WORKER_SCHEMAS if t not in protocol.STEPLESS)


@pytest.mark.parametrize("mtype", WORKER_TYPES)
def test_client_built_messages_validate(mtype: str) -> None:
    c = Client(None, rank=1, validate=True)
    c.step = 7
    msg = c.build(mtype, doc_fields(mtype))
    assert protocol.validate(msg, "worker") == mtype
    assert msg["rank"] == 1 and msg["step"] == 7 and msg["v"] == 1
    line = protocol.encode(msg)
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert protocol.parse_line(line[:-1], "worker")["type"] == mtype


def test_client_hello_validates() -> None:
    versions: dict[str, str | None] = {"torch": "2.11.0", "nccl": None, "cuda": None}
    hello = hello_message(
        token="ab" * 32,
        run_id="r1",
        rank=1,
        world_size=2,
        local_rank=1,
        device="cpu",
        backend="gloo",
        worker="train",
        versions=versions,
    )
    assert protocol.validate(hello, "worker") == "hello"
    assert hello["pid"] == os.getpid() and "step" not in hello


def test_validator_catches_bad_built_messages() -> None:
    c = Client(None, validate=True)
    with pytest.raises(protocol.ProtocolError):
        protocol.validate(c.build("step", {**doc_fields("step"), "fwd_ms": -1.0}), "worker")
    with pytest.raises(protocol.ProtocolError):
        protocol.validate(c.build("probe", {**doc_fields("probe"), "mode": "x"}), "worker")
    with pytest.raises(protocol.ProtocolError):
        protocol.validate(c.build("heartbeat", {"phase": "sleeping"}), "worker")
    with pytest.raises(ValueError):
        protocol.encode(c.build("bench", {**doc_fields("bench"), "time_us": float("nan")}))
    with pytest.raises(protocol.ProtocolError):
        protocol.encode(c.build("log", {"level": "info", "msg": "x" * (protocol.MAX_LINE_BYTES + 1)}))


def test_encode_is_compact_json_lines() -> None:
    line = protocol.encode({"v": 1, "type": "bye", "rank": 0, "step": 1, "t": 1.0, "reason": "done"})
    assert line == b'{"v":1,"type":"bye","rank":0,"step":1,"t":1.0,"reason":"done"}\n'


def test_builders_reproduce_the_doc_examples() -> None:
    assert protocol.plan_fields(470, epochs=2, steps_per_epoch=235) == doc_fields("plan")
    assert protocol.plan_fields(None, phase=None) == doc_fields("plan_unknown_length")
    op = protocol.comm_op("all_gather", "layer1.0", "fwd", 1234, 0.5, 0.2)
    assert protocol.comm_fields("cuda_events", [op]) == doc_fields("comm")
    note = "first step only; BatchNorm statistics differ after"
    check = protocol.check_fields("k1_vs_k2_loss", 2.3026, 2.3026, 1e-6, note=note)
    assert check["ok"] is True and check["diff"] == 0.0
    assert {k: v for k, v in check.items() if k != "diff"} == {
        k: v for k, v in doc_fields("check").items() if k != "diff"
    }
    ops = doc_fields("hlo_fsdp")["ops"]
    assert protocol.hlo_ops_entry(**ops["all_gather"]) == ops["all_gather"]


def test_check_fields_computes_the_verdict() -> None:
    failed = protocol.check_fields("k1_vs_k2_loss", 2.30, 2.31, 1e-3)
    assert failed["ok"] is False and abs(failed["diff"] - 0.01) < 1e-12
    assert protocol.check_fields("neg", -0.5, -0.5, 0.0)["ok"] is True


def test_builders_reject_bad_values() -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.plan_fields(-470)
    with pytest.raises(protocol.ProtocolError):
        protocol.plan_fields(470, phase="warmup")
    with pytest.raises(protocol.ProtocolError):
        protocol.comm_op("all_gather", "layer1.0", "fwd", 1234, 0.5, -0.2)
    with pytest.raises(protocol.ProtocolError):
        protocol.comm_op("all_to_all", "layer1.0", "fwd", 1234, 0.5, 0.2)
    with pytest.raises(protocol.ProtocolError):
        protocol.comm_fields("guess", [])
    with pytest.raises(protocol.ProtocolError):
        protocol.check_fields("x", float("nan"), 1.0, 1e-6)
    with pytest.raises(protocol.ProtocolError):
        protocol.check_fields("x", 1.0, 1.0, -1.0)
    with pytest.raises(protocol.ProtocolError):
        protocol.hlo_ops_entry(2, 10, 5, 20)
    with pytest.raises(protocol.ProtocolError):
        protocol.hello_extra(devices=0)
    with pytest.raises(protocol.ProtocolError):
        protocol.hello_extra(instrument="some")


def test_hello_extra_merges_into_a_valid_hello() -> None:
    versions: dict[str, str | None] = {"torch": None, "nccl": None, "cuda": None}
    hello = hello_message(
        token="ab" * 32,
        run_id="r1",
        rank=0,
        world_size=1,
        local_rank=0,
        device="cpu",
        backend="gloo",
        worker="jax",
        versions=versions,
    )
    extra = protocol.hello_extra(devices=2, instrument="full", node="gpubox")
    assert extra == {"devices": 2, "instrument": "full", "node": "gpubox"}
    assert protocol.validate({**hello, **extra}, "worker") == "hello"
    assert protocol.hello_extra() == {"devices": 1}
    with pytest.raises(protocol.ProtocolError):
        protocol.validate({**hello, "devices": 0}, "worker")


def test_older_messages_stay_valid() -> None:
    """The first-release shapes (no optional fields) of every extended message still validate."""
    old = ("hello", "heartbeat", "step", "buckets", "memory", "hlo", "result")
    for name in (f"doc_{t}" for t in old):
        case = next(c for c in CASES if c["name"] == name)
        assert protocol.parse_line(case["raw"], "worker")["type"] == case["type"]


def test_every_family_lists_its_own_result_fields() -> None:
    """Every optional result field belongs to one family at least (Rust: `protocol::FamilyResult`):
    none is checked for nobody."""
    own = {name for fields in protocol.RESULT_FIELDS.values() for name in fields}
    assert own == set(protocol.WORKER_OPTIONAL["result"])
    # An attach field on an attach result is checked; on a weak one it is an unknown key.
    base = {"v": 1, "type": "result", "rank": 0, "step": 1, "t": 1.0, "samples_per_s": None}
    base |= {"timed_epochs": 0, "params": None, "grad_bytes": None, "bucket_bytes": []}
    with pytest.raises(protocol.ProtocolError, match="process_group"):
        protocol.validate(base | {"experiment": "attach", "process_group": "yes"}, "worker")
    assert protocol.validate(base | {"experiment": "weak", "process_group": "yes"}, "worker")
