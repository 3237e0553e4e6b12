"""The HLO receipt parser on handwritten HLO (no jax needed)."""

from __future__ import annotations

import pytest

from ddptop_worker import hlo_receipt as h

# Shaped like XLA's CPU output after the all-reduce combiner (jax 0.10), GPU async ops, comments in
# tuples, layouts with tiling and memory space, and names without `%` as newer printers write them.
CPU_HLO = """\
HloModule jit_train_step, is_scheduled=true, entry_computation_layout={(f32[64]{0}, f32[3,3,1,64]{3,2,1,0})->f32[]}

%region_1.0.clone (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(%x, %y)
}

ENTRY %main.1 (p0: f32[64], p1: f32[3,3,1,64]) -> f32[] {
  %all-reduce.128 = (f32[64]{0}, f32[64]{0}) all-reduce(%a, %b), channel_id=2, replica_groups=mesh['axis_0'=2] {'axis_0'}, use_global_device_ids=true, to_apply=%region_1.0.clone
  %all-reduce.161 = (f32[64]{0}, f32[3,3,64,64]{3,2,1,0}, f32[10]{0}, /*index=3*/f32[512,10]{1,0}, f32[]) all-reduce(%c, %d, %e, %f, %g), channel_id=4, to_apply=%region_1.0.clone
  %all-reduce.3 = f32[8,64]{1,0} all-reduce(%dot.1), channel_id=1, replica_groups={{0,1}}, to_apply=%region_1.0.clone
  %copy.all-reduce = f32[8]{0} copy(%all-reduce.3)
  %fusion.all-gather = f32[8]{0} fusion(%all-reduce.128), kind=kLoop, calls=%fused
  %n = f32[] negate(%q), metadata={op_name="jit(f)/ all-reduce(x)"}
  ROOT %r = f32[] constant(0)
}
"""

GPU_HLO = """\
ENTRY %main {
  %all-reduce-start = (f32[1024,1024]{1,0:T(8,128)}, bf16[2,3]{1,0}) all-reduce-start(%p, %q), channel_id=1, to_apply=%add
  %all-reduce-done = (f32[1024,1024]{1,0:T(8,128)}, bf16[2,3]{1,0}) all-reduce-done(%all-reduce-start)
  all-gather-start.1 = (f32[16,4]{1,0}, f32[64,4]{1,0}) all-gather-start(p.2), dimensions={0}
  all-gather-done.1 = f32[64,4]{1,0} all-gather-done(all-gather-start.1)
  %all-gather-start.2 = ((f32[4]{0}, f32[2,2]{1,0}), (f32[16]{0}, f32[8,2]{1,0})) all-gather-start(%a, %b), dimensions={0}
  ROOT %reduce-scatter.7 = f32[<=32,3]{1,0:S(1)} reduce-scatter(%big), dimensions={0}, to_apply=%add
  %a2a = (f32[1,4,256]{2,1,0}, f32[1,4,256]{2,1,0}) all-to-all(%s, %t), channel_id=129
  %cp-start = (f32[8]{0}, f32[8]{0}, u32[], u32[]) collective-permute-start(%x), source_target_pairs={{0,1}}
}
"""


def test_parse_array_and_scalar_shapes() -> None:
    assert h.parse_shape("f32[3,3,64,64]{3,2,1,0}") == [h.Array("f32", (3, 3, 64, 64))]
    assert h.parse_shape("f32[]") == [h.Array("f32", ())]
    assert h.parse_shape("f32[]")[0].elems == 1  # type: ignore[union-attr]
    assert h.parse_shape("bf16[<=128,4]{1,0}") == [h.Array("bf16", (128, 4))]
    arr = h.parse_shape("f32[1024,1024]{1,0:T(8,128)}")[0]
    assert isinstance(arr, h.Array) and arr.elems == 1024 * 1024 and arr.nbytes == 4 * 1024 * 1024


def test_parse_tuple_shapes_with_comments_and_nesting() -> None:
    flat = h.flatten(h.parse_shape("(f32[64]{0}, f32[3,3,64,64]{3,2,1,0}, /*index=2*/f32[])"))
    assert [a.elems for a in flat] == [64, 36864, 1]
    nested = h.parse_shape("((f32[4]{0}, f32[2,2]{1,0}), (f32[16]{0}, f32[8,2]{1,0}))")
    assert len(nested) == 2 and isinstance(nested[1], list)
    assert [a.elems for a in nested[1]] == [16, 16]


def test_bad_shapes_raise() -> None:
    with pytest.raises(h.HloParseError):
        h.parse_shape("nonsense")
    with pytest.raises(h.HloParseError):
        h.parse_shape("(f32[2]")
    with pytest.raises(h.HloParseError):
        h.Array("q7", (2,)).nbytes


def test_cpu_receipt_counts_tuple_and_multi_dim_elements() -> None:
    c = h.collectives(CPU_HLO)
    ar = c.ops["all_reduce"]
    # Names containing "all-reduce" (copy.all-reduce, operands) are not ops; only opcodes are.
    assert ar.count == 3
    assert ar.elems == [128, 64 + 36864 + 10 + 5120 + 1, 512]
    assert ar.largest_elems == 42059
    assert ar.total_elems == 128 + 42059 + 512
    assert ar.total_bytes == 4 * ar.total_elems
    assert ar.tuple_count == 2 and ar.async_count == 0
    assert c.ops["all_gather"].count == 0 and c.ops["reduce_scatter"].count == 0
    assert c.other == {}
    assert h.inferred_combiners(c) == ["all-reduce-combiner (inferred: tuple-shaped op)"]


def test_gpu_receipt_async_ops_counted_once() -> None:
    c = h.collectives(GPU_HLO)
    ar = c.ops["all_reduce"]
    assert (ar.count, ar.async_count) == (1, 1)  # -done is not a second op
    assert ar.largest_elems == 1024 * 1024 + 6
    assert ar.total_bytes == 4 * 1024 * 1024 + 2 * 6
    ag = c.ops["all_gather"]
    # An async all-gather's shape is (operands, results): only the gathered results count.
    assert ag.count == 2 and ag.elems == [256, 32]
    rs = c.ops["reduce_scatter"]
    assert rs.count == 1 and rs.largest_elems == 96 and rs.total_bytes == 384
    assert c.other == {"all_to_all": 1, "collective_permute": 1}
    assert c.ops["all_reduce"].wire() == {
        "count": 1,
        "largest_elems": 1048582,
        "total_elems": 1048582,
        "total_bytes": 4194316,
    }


def test_an_unparsable_op_is_counted_without_a_size() -> None:
    hlo = (
        "  %all-reduce.1 = q9[4]{0} all-reduce(%a), to_apply=%add\n"
        "  %all-reduce.2 = f32[4]{0} all-reduce(%b), to_apply=%add\n"
    )
    c = h.collectives(hlo)
    ar = c.ops["all_reduce"]
    assert ar.count == 2 and ar.elems == [0, 4] and ar.total_bytes == 16
    assert len(c.problems) == 1 and "all-reduce.1" in c.problems[0] and "q9" in c.problems[0]


def test_no_collectives() -> None:
    c = h.collectives("ENTRY %m {\n  ROOT %r = f32[4]{0} add(%a, %b)\n}\n")
    assert all(st.count == 0 for st in c.ops.values())
    assert h.summary(c, 1) == "k=1: no collectives"


def test_dump_names() -> None:
    n = h.parse_dump_name(
        "module_0074.jit_train_step.0032.HLO_passes_after_layout_assignment"
        ".after_cpu-all-reduce-combiner.before_tuple-simplifier.txt"
    )
    assert n is not None
    assert (n.module, n.fn, n.seq, n.after, n.before) == (
        74,
        "jit_train_step",
        32,
        "cpu-all-reduce-combiner",
        "tuple-simplifier",
    )
    assert h.parse_dump_name("module_0074.jit_train_step.cpu_after_optimizations.txt") is None
    assert h.parse_dump_name("module_0074.jit_train_step.ir-no-opt.ll") is None


def _module(n_ar: int, tuple_size: int = 1) -> str:
    shape = "f32[4]{0}" if tuple_size == 1 else "(" + ", ".join(["f32[4]{0}"] * tuple_size) + ")"
    return "".join(f"  %all-reduce.{i} = {shape} all-reduce(%p{i})\n" for i in range(n_ar))


def test_pass_changes_name_the_partitioner_and_the_combiner() -> None:
    snaps = [
        ("pipeline-start", "ENTRY {\n}\n"),
        ("spmd-partitioning", _module(6)),
        ("dce", _module(6)),
        ("all-reduce-combiner", _module(2, tuple_size=3)),
        ("reduce-scatter-creator", _module(1)),
        ("dce", _module(0)),
    ]
    ch = h.pass_changes(snaps)
    assert [c.wire() for c in ch] == [
        {"pass": "spmd-partitioning", "op": "all_reduce", "before": 0, "after": 6},
        {"pass": "all-reduce-combiner", "op": "all_reduce", "before": 6, "after": 2},
        {"pass": "reduce-scatter-creator", "op": "all_reduce", "before": 2, "after": 1},
        {"pass": "dce", "op": "all_reduce", "before": 1, "after": 0},
    ]
    # Insertions and removals to zero are not merges.
    assert h.combined_by(ch) == ["all-reduce-combiner", "reduce-scatter-creator"]
