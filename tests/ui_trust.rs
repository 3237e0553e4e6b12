//! The panes issue 10 changed, drawn from hand-built states (insta snapshots, ui_screens style):
//! the Timeline's median over recent steps with kernel time and queueing (and `f` still showing
//! one step), the Scaling pane's prediction under each k>1 point, the Probe pane's control order,
//! live label and (difference − control) / model ratio.

mod common;
use common::ui as fixtures;

use ddptop::app::{Experiment, Freeze, Pane};
use ddptop::protocol::{Backend, BucketSpan, Buckets};
use ddptop::run::RunView;
use fixtures::*;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn text(t: &Terminal<TestBackend>) -> String {
    let buf = t.backend().buffer();
    let mut s = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            s.push_str(buf[(x, y)].symbol());
        }
        s.push('\n');
    }
    s
}

/// One step of a 2-GPU run with measured kernel times: bucket i queues `q` ms, runs `k` ms.
fn timed_step(step: u64, wobble: f64) -> Buckets {
    let span = |index: u32, bytes: u64, ready: f64, q: f64, k: f64| BucketSpan {
        index,
        bytes,
        ready_ms: ready,
        start_ms: ready + q,
        done_ms: ready + q + k,
        kernel_ms: Some(k),
    };
    Buckets {
        rank: 0,
        step,
        t: 10.0,
        rebuilt: true,
        bwd_compute_ms: 28.9,
        exposed_ms: 0.09 + wobble / 10.0,
        buckets: vec![
            span(0, 9_461_800, 4.3, 0.02, 0.11 + wobble / 20.0),
            span(1, 26_501_120, 15.9, 0.01, 0.19 + wobble / 20.0),
            span(2, 8_740_352, 28.9, 0.00, 0.08 + wobble / 20.0),
        ],
        start_inferred: Some(false),
    }
}

/// A k=1,2 weak curve on NCCL with rank 0's last 30 timelines, and an allreduce run.
fn trust_state() -> Screen {
    let mut st = Screen::new(host_gpubox(2));
    let mut k1 = completed(1, spec(Experiment::Weak, 1, Backend::Nccl), &[5467.0]);
    let mut k2 = completed(
        2,
        spec(Experiment::Weak, 2, Backend::Nccl),
        &[5390.0, 5385.0],
    );
    for (r, ready_scale) in [(&mut k1, 1.0), (&mut k2, 1.0)] {
        let rv = r.ranks.get_mut(&0).unwrap();
        for i in 0..30u64 {
            let mut b = timed_step(100 + i, (i % 5) as f64 * 0.1);
            for s in &mut b.buckets {
                s.ready_ms *= ready_scale;
            }
            rv.recent_buckets.push_back(b.clone());
            rv.buckets = Some(b);
        }
        rv.last_step = Some(step(0, 129));
    }
    let mut b = completed(3, spec(Experiment::Allreduce, 2, Backend::Nccl), &[]);
    b.figures.aggregate = None;
    b.figures.bench = bench_rows(2, 300.0);
    st.runs = vec![b, k2, k1];
    st.view.focused = Some(id(2));
    st
}

#[test]
fn timeline_shows_the_median_of_recent_steps_with_kernel_time_and_queueing() {
    let mut st = trust_state();
    st.view.pane = Pane::Timeline;
    st.view.timeline_steps = 20;
    let t = draw(&st, 200, 50);
    let s = text(&t);
    assert!(s.contains("median of 20 steps (110–129)"), "{s}");
    assert!(s.contains("k NCCL kernel time (measured)"), "{s}");
    assert!(!s.contains("start inferred"), "{s}");
    // bucket 1: kernel 0.19–0.21 ms over the window, queued 0.01 ms
    assert!(s.contains("k0.20ms q0.01ms [0.19–0.21]"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn timeline_frozen_is_one_step_and_inferred_starts_are_labelled() {
    let mut st = trust_state();
    st.view.pane = Pane::Timeline;
    let run: &mut RunView = st.state.runs.iter_mut().find(|r| r.id == id(2)).unwrap();
    let rv = run.ranks.get_mut(&0).unwrap();
    for b in rv.recent_buckets.iter_mut().chain(rv.buckets.iter_mut()) {
        b.start_inferred = Some(true);
        for s in &mut b.buckets {
            s.kernel_ms = None;
        }
    }
    assert!(st.view.freeze(&st.state));
    assert!(matches!(st.view.freeze, Freeze::Frozen(_)));
    let t = draw(&st, 200, 50);
    let s = text(&t);
    assert!(s.contains("step 129"), "{s}");
    assert!(!s.contains("median of"), "{s}");
    assert!(s.contains("start inferred"), "{s}");
    assert!(
        s.contains("~ all-reduce time: done − start (start inferred)"),
        "{s}"
    );
    // No bucket has a kernel's own time: the legend does not claim one.
    assert!(!s.contains("kernel time"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn scaling_pane_shows_prediction_error_and_sources_under_k2() {
    let st = trust_state();
    let t = draw(&st, 200, 50);
    let s = text(&t);
    assert!(s.contains("model "), "{s}");
    assert!(
        s.contains(&format!("k=1 {}", ddptop::ui::fmt::tiny_id(&id(1)))),
        "{s}"
    );
    assert!(
        s.contains(&format!("bw {}", ddptop::ui::fmt::tiny_id(&id(3)))),
        "{s}"
    );
    insta::assert_snapshot!(t.backend());
}

#[test]
fn probe_pane_control_ran_before_live_label_and_ratio() {
    let mut st = probe_state(Backend::Nccl);
    // A weak k=1 run at the probe's setting supplies the bucket-ready times.
    let mut k1 = completed(2, spec(Experiment::Weak, 1, Backend::Nccl), &[5467.0]);
    k1.ranks.get_mut(&0).unwrap().buckets = Some(timed_step(100, 0.0));
    st.runs.push(k1);
    st.view.pane = Pane::Timeline;
    let t = draw(&st, 260, 50);
    let s = text(&t);
    assert!(s.contains("ran before, not interleave"), "{s}"); // cut at 260 columns, marked …
    assert!(s.contains("(difference − control) / model"), "{s}");
    assert!(!s.contains("live (training DDP"), "{s}");
    insta::assert_snapshot!(t.backend());

    for b in &mut st.state.runs[0].figures.probe {
        b.live = Some(true);
    }
    let t = draw(&st, 260, 50);
    let s = text(&t);
    assert!(
        s.contains("live (training DDP, buffers broadcast, timing hook on)"),
        "{s}"
    );
}

#[test]
fn timeline_window_is_configurable_and_at_least_twenty_steps() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("config.toml");
    std::fs::write(&p, "[timeline]\nsteps = 30\n").unwrap();
    let c = ddptop::config::Config::load(Some(&p)).unwrap();
    assert_eq!(c.timeline.steps, 30);
    std::fs::write(&p, "[timeline]\nsteps = 5\n").unwrap();
    let e = ddptop::config::Config::load(Some(&p))
        .unwrap_err()
        .to_string();
    assert!(e.contains("[timeline] steps = 5 is outside 20..="), "{e}");
    assert!(e.contains("config.toml:2:"), "names the line: {e}");
}

/// One run's prediction error reads the same, sign and base, on the Scaling pane, in `ddptop
/// run --json`'s `prediction`, and in the report's JSON and Markdown: (predicted − measured) /
/// measured, positive when the model over-predicts (the reports once printed the opposite).
#[test]
fn prediction_error_is_one_figure_on_screen_in_json_and_in_reports() {
    use ddptop::report::{build, json as report_json, markdown};
    let st = trust_state();
    let runs = st.state.runs.clone();
    let k2 = runs.iter().find(|r| r.id == id(2)).unwrap();
    let p = ddptop::app::predict::predict_run(k2, &runs).unwrap();
    let want = (p.predicted_sps - p.measured_sps) / p.measured_sps * 100.0;
    assert!(
        want.abs() > 0.05,
        "a zero error would not show a sign: {want}"
    );
    assert!((p.sps_error_pct - want).abs() < 1e-9, "{p:?}");
    let shown = format!("{want:+.1}%");

    // The screen: the model line under the k=2 point.
    let screen = text(&draw(&st, 200, 50));
    assert!(screen.contains(&shown), "{shown} not on screen:\n{screen}");

    // `ddptop run --json`.
    let head = ddptop::report::json::prediction(k2, &runs).unwrap();
    let e = head["samples_per_s"]["error_pct"].as_f64().unwrap();
    assert!((e - want).abs() < 1e-9, "{head}");

    // The report, JSON and Markdown, built from the same runs.
    let records = std::collections::HashMap::new();
    let src = build::Source {
        selected: runs.iter().collect(),
        history: &runs,
        records: &records,
    };
    let report = build::build("t".into(), &src, 0.0);
    let doc = report_json::document(&report);
    let point = doc["curves"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["points"].as_array().unwrap().iter())
        .find(|pt| pt["run_id"] == id(2).as_str())
        .unwrap_or_else(|| panic!("no k=2 point in {doc}"));
    let e = point["error_pct"].as_f64().unwrap();
    assert!((e - want).abs() < 1e-9, "{point}");
    let md = markdown::render(&report, &[]);
    assert!(
        md.contains(&format!("| {shown} |")),
        "{shown} not in:\n{md}"
    );
    assert!(md.contains("(predicted − measured) / measured"), "{md}");
}
