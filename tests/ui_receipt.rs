//! The Receipt pane of a JAX run (in the Timeline's place) and the jax curve beside DDP's on the
//! Scaling pane, drawn into ratatui's TestBackend from a hand-built state and kept as insta
//! snapshots. The receipt's figures are those a `ddptop run jax --k 2 --backend gloo --model tiny`
//! run reported on this project's CPU machine (jax 0.10.2).

mod common;
use common::ui as fixtures;

use ddptop::app::{HostInfo, Pane};
use ddptop::protocol::{Backend, Check, Hlo, HloOpStats, HloOps, Memory, Sharding};
use ddptop::run::{Experiment, HostBackend, ModelName, RunSpec, RunStatus};
use fixtures::Screen;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::collections::BTreeMap;

/// visualize_array_sharding's drawing of an array split in `k` row blocks (`CPU i` each), or
/// replicated (`CPU 0,1`), `width` wide, with its blank padding rows.
fn drawing(k: usize, split: bool, width: usize) -> String {
    let bar = "─".repeat(width - 2);
    let blank = format!("│{}│", " ".repeat(width - 2));
    let label = |s: &str| format!("│{s:^w$}│", w = width - 2);
    let mut rows = vec![format!("┌{bar}┐")];
    if split {
        for i in 0..k {
            if i > 0 {
                rows.push(format!("├{bar}┤"));
            }
            rows.extend([blank.clone(), label(&format!("CPU {i}")), blank.clone()]);
        }
    } else {
        let all: Vec<String> = (0..k).map(|i| i.to_string()).collect();
        rows.extend([
            blank.clone(),
            blank.clone(),
            label(&format!("CPU {}", all.join(","))),
        ]);
        rows.extend([blank.clone(), blank.clone()]);
    }
    rows.push(format!("└{bar}┘"));
    rows.join("\n")
}

fn jax_spec(k: u32) -> RunSpec {
    RunSpec {
        model: ModelName::Tiny,
        batch: 8,
        samples: 64,
        epochs: 1,
        ..RunSpec::new(Experiment::Jax, k, Backend::Gloo)
    }
}

fn hlo(k: u32) -> Hlo {
    let mut layout = BTreeMap::new();
    let n = k as usize;
    for when in ["before", "after"] {
        layout.insert(format!("batch ({when})"), drawing(n, true, 24));
        layout.insert(format!("fc.kernel ({when})"), drawing(n, false, 9));
    }
    let stats = |count, largest, total: u64| HloOpStats {
        count,
        largest_elems: largest,
        total_elems: total,
        total_bytes: 4 * total,
    };
    Hlo {
        rank: 0,
        step: 1,
        t: 20.7,
        k,
        all_reduce_ops: if k > 1 { 11 } else { 0 },
        all_reduce_bytes: if k > 1 { 1_589_484 } else { 0 },
        sharding: Some(Sharding::Data),
        ops: Some(HloOps {
            all_reduce: Some(if k > 1 {
                stats(11, 394_891, 397_371)
            } else {
                stats(0, 0, 0)
            }),
            all_gather: Some(stats(0, 0, 0)),
            reduce_scatter: Some(stats(0, 0, 0)),
        }),
        combined_by: Some(if k > 1 {
            vec!["cpu-all-reduce-combiner".into()]
        } else {
            vec![]
        }),
        layout: Some(layout),
        platform: Some("cpu".into()),
    }
}

fn memory(device: u32) -> Memory {
    Memory {
        rank: 0,
        step: 4,
        t: 21.1,
        device: Some(device),
        phase: Some("epoch0".into()),
        param_bytes: Some(1_583_528),
        optim_bytes: Some(0),
        predicted_bytes: Some(16_418_916),
        ..Memory::default()
    }
}

/// A CPU machine with weak (DDP over gloo) and jax curves at k=1 and 2, the jax k=2 run focused.
fn jax_screen() -> Screen {
    let mut st = Screen::new(HostInfo {
        hostname: "laptop".into(),
        backend: HostBackend::Gloo,
        torch: Some("2.11.0".into()),
        ..fixtures::host_laptop()
    });
    let weak = |n, k, per_rank: &[f64]| {
        let spec = RunSpec {
            model: ModelName::Tiny,
            batch: 8,
            samples: 64,
            epochs: 1,
            ..RunSpec::new(Experiment::Weak, k, Backend::Gloo)
        };
        let mut r = fixtures::completed(n, spec, per_rank);
        r.live = false;
        r
    };
    let mut j1 = fixtures::completed(3, jax_spec(1), &[139.8]);
    j1.figures.hlo = Some(hlo(1));
    j1.figures.device_memory.insert(0, memory(0));
    let mut j2 = fixtures::completed(4, jax_spec(2), &[123.9]);
    j2.figures.hlo = Some(hlo(2));
    // What the worker sends (jax_check.py): the loss at steps 1-4 and the params after step 1,
    // as the tiny model measured them at k=2 on CPU.
    let rule = "tol (cpu): loss x max(1,|loss|) 1e-06 at step 1, 2e-03 at steps 2-4; params \
                1e-04 x max(1,max|p|) elementwise after step 1";
    let check = |name: &str, step: u64, a: f64, diff: f64, tol: f64| Check {
        rank: 0,
        step,
        t: 20.98,
        name: name.into(),
        a,
        b: a + diff,
        diff,
        tol,
        ok: diff <= tol,
        note: Some(format!("loss at step {step}, same global batch; {rule}")),
    };
    for (step, a, diff, tol) in [
        (1, 2.359275, 0.0, 2.36e-6),
        (2, 2.516002, 0.0, 5.03e-3),
        (3, 2.561905, 2.4e-7, 5.12e-3),
        (4, 1.752692, 2.4e-7, 3.51e-3),
    ] {
        j2.figures
            .checks
            .push(check("k1_vs_k2_loss", step, a, diff, tol));
    }
    j2.figures
        .checks
        .push(check("k1_vs_k2_params", 1, 25.81217, 6.0e-8, 1.0e-4));
    for d in 0..2 {
        j2.figures.device_memory.insert(d, memory(d));
    }
    st.runs = vec![j2, j1, weak(2, 2, &[61.0, 60.2]), weak(1, 1, &[88.5])];
    st.view.selected = 0;
    st.view.focused = Some(fixtures::id(4));
    st
}

fn draw(st: &Screen, w: u16, h: u16) -> (Terminal<TestBackend>, String) {
    let t = fixtures::draw(st, w, h);
    let buf = t.backend().buffer().clone();
    let mut s = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            s.push_str(buf[(x, y)].symbol());
        }
        s.push('\n');
    }
    (t, s)
}

#[test]
fn receipt_pane_of_a_jax_run_120x40() {
    let st = jax_screen();
    let (t, s) = draw(&st, 120, 40);
    assert!(
        s.contains("Receipt") && s.contains("k=2 · data sharding · cpu"),
        "{s}"
    );
    assert!(
        s.contains("all-reduce") && s.contains("394.9k") && s.contains("1.59 MB"),
        "{s}"
    );
    assert!(s.contains("cpu-all-reduce-combiner"), "{s}");
    // The verdict over every step and the parameters, with the tolerance it was decided by.
    assert!(
        s.contains("k=1 vs k=2 ok steps 1–4: loss |diff| 2.4e-7"),
        "{s}"
    );
    assert!(
        s.contains("tol (cpu): loss x max(1,|loss|) 1e-06 at step 1"),
        "{s}"
    );
    assert!(s.contains("before the step = after it"), "{s}");
    assert!(s.contains("CPU 0,1") && s.contains("CPU 1"), "{s}");
    // Neither the bucket timeline nor the no_sync probe is drawn for a JAX run.
    assert!(
        !s.contains("Timeline") && !s.contains("Probe no_sync"),
        "{s}"
    );
    // The jax curve sits beside DDP's (weak) on the Scaling pane.
    assert!(s.contains("jax ·") && s.contains("weak ·"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn receipt_pane_on_the_timeline_page_80x24() {
    let mut st = jax_screen();
    st.view.pane = Pane::Timeline;
    let (t, s) = draw(&st, 80, 24);
    assert!(s.contains("Receipt") && s.contains("all-reduce"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn a_jax_run_still_compiling_says_so() {
    let mut st = jax_screen();
    let mut r = fixtures::run(5, jax_spec(2), RunStatus::Running);
    r.figures.hlo = None;
    st.runs.insert(0, r);
    st.view.focused = Some(fixtures::id(5));
    let (_, s) = draw(&st, 120, 40);
    assert!(s.contains("compiling the step"), "{s}");
}
