"""Unit tests of the fsdp experiment's pieces that need no process group: byte accounting, the
16P/k prediction, shard units, and turning collective marks into `comm` ops."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ddptop_worker import collectives, memory, models
from ddptop_worker.fsdp import shard_units, unit_params
from ddptop_worker.timing import Clock


def test_padded_numel_pads_dim0_to_a_multiple_of_k() -> None:
    assert memory.padded_numel((10, 3), 4) == 12 * 3
    assert memory.padded_numel((8, 3, 3), 2) == 72
    assert memory.padded_numel((7,), 2) == 8
    assert memory.padded_numel((), 4) == 1


def test_predicted_bytes_ddp_is_16p_fsdp_is_16p_over_k_plus_one_unit() -> None:
    p = models.RESNET18_PARAMS
    assert memory.predicted_bytes("ddp", p, 4, "adam", 123) == 16 * p
    assert memory.predicted_bytes("ddp", p, 1, "sgd", 123) == 8 * p
    assert memory.predicted_bytes("fsdp", p, 2, "adam", 1000) == 8 * p + 4000
    assert memory.predicted_bytes("fsdp", p, 4, "sgd", 0) == 2 * p
    assert memory.predicted_bytes("fsdp", 3, 2, "adam", 0) == 24  # rounded up, never down
    assert memory.predicted_bytes("fsdp", p, 1, "adam", 1000) == 16 * p  # k=1 gathers nothing
    # ZeRO-1: weights and grads whole (8P), Adam's 8 bytes only for the owned share
    assert memory.predicted_bytes("zero1", p, 2, "adam", 0, owned_params=p // 2) == 12 * p
    assert memory.predicted_bytes("zero1", p, 1, "adam", 0) == 16 * p  # k=1 owns everything
    assert memory.predicted_bytes("zero1", p, 4, "sgd", 0, owned_params=p // 4) == 8 * p


def test_state_bytes_counts_params_grads_and_adam_state() -> None:
    net = nn.Linear(10, 3)  # 33 parameters in 2 tensors
    opt = torch.optim.Adam(net.parameters())
    sb = memory.state_bytes(net, opt)
    assert (sb.params, sb.grads, sb.optim) == (132, 0, 0)  # no grads, no state before a step
    net(torch.ones(2, 10)).sum().backward()
    opt.step()
    sb = memory.state_bytes(net, opt)
    # Adam: exp_avg + exp_avg_sq per element, plus one fp32 scalar `step` per parameter tensor
    assert (sb.params, sb.grads, sb.optim) == (132, 132, 2 * 132 + 2 * 4)
    assert sb.total == 132 + 132 + 272


def test_cuda_counters_are_none_on_cpu() -> None:
    assert memory.cuda_counters(torch.device("cpu")) == {
        "allocated_bytes": None,
        "reserved_bytes": None,
        "peak_bytes": None,
    }


def test_resnet18_units_are_the_eight_residual_blocks() -> None:
    net = models.build_model("resnet18", "cpu")
    units = shard_units(net)
    assert [n for n, _ in units] == [
        f"resnet_block{s}.{i}" for s in (1, 2, 3, 4) for i in (0, 1)
    ]
    sizes = unit_params(net, units, 2)
    # ResNet-18's channel counts are all even: nothing is padded at k=2, the units cover P
    assert sum(sizes.values()) == models.RESNET18_PARAMS
    assert max(sizes, key=lambda n: sizes[n]) in ("resnet_block4.0", "resnet_block4.1")
    assert sizes["root"] == 64 * 9 + 64 + 64 + 64 + 512 * 10 + 10  # stem conv+BN, fc


def test_tiny_units_are_its_conv_and_linear_layers() -> None:
    net = models.build_model("tiny", "cpu")
    names = [n for n, _ in shard_units(net)]
    assert len(names) == 6  # 5 convs and the classifier
    sizes = unit_params(net, shard_units(net), 3)
    # at k=3 dim 0 of 16/32/64/128/256/10 rows is padded up to a multiple of 3
    assert sum(sizes.values()) > models.count_params(net)


def test_recorder_times_a_call_and_names_it() -> None:
    rec = collectives.CommRecorder(Clock(torch.device("cpu")))
    step_start = Clock(torch.device("cpu")).mark()
    assert rec.timed("all_gather", "x", 8, lambda: 42) == 42  # outside a step: not recorded
    records = rec.begin_step()
    rec.pass_ = "bwd"
    rec.timed("reduce_scatter", "resnet_block1.0", 1024, lambda: None)
    rec.end_step()
    rec.timed("all_gather", "late", 8, lambda: None)  # after end_step: not recorded
    assert [(r.op, r.name, r.pass_, r.nbytes) for r in records] == [
        ("reduce_scatter", "resnet_block1.0", "bwd", 1024)
    ]
    (op,) = collectives.comm_ops(records, step_start)
    assert op["op"] == "reduce_scatter" and op["pass"] == "bwd" and op["bytes"] == 1024
    assert op["start_ms"] >= 0 and op["dur_ms"] >= 0


def test_comm_ops_are_relative_to_the_step_start() -> None:
    r = collectives.CommRecord("all_gather", "b", "fwd", 100, 10.002, 10.005)
    (op,) = collectives.comm_ops([r], 10.0)
    assert op["start_ms"] == pytest.approx(2.0) and op["dur_ms"] == pytest.approx(3.0)
    unfinished = collectives.CommRecord("all_gather", "b", "fwd", 100, 10.002)
    assert collectives.comm_ops([unfinished], 10.0) == []
    assert not collectives.records_complete([unfinished])
