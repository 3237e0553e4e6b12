//! The collectives view (NCCL profiler plugin), drawn into ratatui's TestBackend from runs fed
//! with plugin messages (tests/fixtures/nccl/*.jsonl: hand-written in the plugin's format, not
//! captured on a GPU) and kept as insta snapshots.

mod common;

use ddptop::app::reduce::apply_worker;
use ddptop::protocol::{Backend, parse_worker};
use ddptop::run::{Experiment, RunSpec, RunView};
use ddptop::ui::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::time::Instant;

fn fed(k: u32, fixtures: &[&str]) -> RunView {
    let now = Instant::now();
    let spec = RunSpec::new(Experiment::Weak, k, Backend::Nccl);
    let mut r = RunView::new("r20261201-1200-ab12".into(), spec, now, 0.0);
    r.launch.env.insert(
        "NCCL_PROFILER_PLUGIN".into(),
        Some("/opt/ddptop/libnccl_profiler_ddptop.so".into()),
    );
    for text in fixtures {
        for line in text.lines().filter(|l| !l.is_empty()) {
            apply_worker(&mut r, &parse_worker(line).unwrap(), now);
        }
    }
    r
}

fn draw(run: &RunView, w: u16, h: u16) -> (Terminal<TestBackend>, String) {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    let theme = Theme::dark();
    t.draw(|f| ddptop::ui::collectives::render(&theme, run, f.area(), f.buffer_mut()))
        .unwrap();
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
fn a_hang_names_the_rank_that_never_entered() {
    let run = fed(4, &[include_str!("fixtures/nccl/hang_k4.jsonl")]);
    let (t, s) = draw(&run, 120, 14);
    assert!(
        s.contains("ranks 0, 2, 3 inside all_reduce #1234 for 12.0 s; rank 1 last completed #1233"),
        "{s}"
    );
    assert!(s.contains("dropped 12 · lost 3"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn buckets_busbw_and_algorithms_of_a_healthy_k2_run() {
    let run = fed(2, &[include_str!("fixtures/nccl/buckets_k2.jsonl")]);
    let (t, s) = draw(&run, 120, 16);
    assert!(s.contains("ring/simple 5"), "{s}");
    assert!(s.contains("150.1 GB/s"), "{s}");
    assert!(
        s.contains("all_reduce #1232") && s.contains("GPU 0.177 ms"),
        "{s}"
    );
    assert!(!s.contains("stuck"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn the_k1_run_says_no_collectives_at_k1() {
    let hello = r#"{"v":1,"type":"nccl_hello","token":"ab","run_id":"r1","rank":0,"world_size":1,"pid":7,"host":"h","plugin":"0.1.0","abi":"v5","t":1.0}"#;
    let run = fed(1, &[hello]);
    let (t, s) = draw(&run, 100, 5);
    assert!(s.contains("no collectives at k=1"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn a_run_without_the_plugin_says_how_it_was_launched() {
    let mut run = fed(2, &[]);
    run.launch.env.clear();
    let (_, s) = draw(&run, 130, 4);
    assert!(
        s.contains("launched without the NCCL profiler plugin"),
        "{s}"
    );
}

/// Issue 45: which instrument timed an attached run's communication, in its details while it
/// runs (the source switches live), and a tls:// run's missing plugin as one line on the Runs
/// pane. Plan and hello lines as an attached rank sends them (workers/ddptop_worker/attach.py).
#[test]
fn the_details_say_the_communication_source_live_and_a_tls_run_what_it_lacks() {
    use common::ui::{Screen, draw, host_gpubox};
    let now = Instant::now();
    let mut r = RunView::new(
        "r20261205-0100-ab12".into(),
        RunSpec::new(Experiment::Attach, 2, Backend::Nccl),
        now,
        0.0,
    );
    r.launch.env.insert(
        "NCCL_PROFILER_PLUGIN".into(),
        Some("/opt/ddptop/libnccl_profiler_ddptop.so".into()),
    );
    r.launch
        .env
        .insert("DDPTOP_SOCKET".into(), Some("tls://10.0.0.1:4000".into()));
    let feed = |r: &mut RunView, line: &str| apply_worker(r, &parse_worker(line).unwrap(), now);
    let off = "plugin not reporting: off: DDPTOP_SOCKET=tls://10.0.0.1:4000 is a TLS listener and the plugin speaks no TLS";
    for rank in 0..2 {
        feed(
            &mut r,
            &format!(
                r#"{{"v":1,"type":"hello","token":"ab","run_id":"r1","rank":{rank},"world_size":2,"local_rank":{rank},"pid":1,"host":"h","device":"cuda:{rank}","backend":"nccl","worker":"attach","torch":"2.11.0","nccl":"2.28.9","cuda":"13.0","t":1.0,"nccl_lib":{{"path":"/v/libnccl.so.2","profiler":[5,4,3,2,1]}}}}"#
            ),
        );
        feed(
            &mut r,
            &format!(
                r#"{{"v":1,"type":"plan","rank":{rank},"step":0,"t":2.0,"total_steps":null,"comm_timing":"comm_hook","comm_why":"{off}"}}"#
            ),
        );
    }
    let mut st = Screen::new(host_gpubox(2));
    st.state.runs = vec![r];
    let details = |st: &Screen| -> String {
        let keys = ddptop::keys::KeyMap::default();
        let theme = Theme::dark();
        let ctx = ddptop::ui::Ctx {
            state: &st.state,
            view: &st.view,
            theme: &theme,
            keys: &keys,
        };
        ddptop::ui::detail::lines(&ctx, &st.state.runs[0])
            .iter()
            .map(|l| {
                l.spans
                    .iter()
                    .map(|s| s.content.as_ref())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let d = details(&st);
    assert!(
        d.contains(&format!("communication Python comm hook ({off})")),
        "{d}"
    );
    // The tls:// line, on the dashboard itself (the Runs pane's notes), not only in a log.
    let t = draw(&st, 200, 40);
    let buf = t.backend().buffer();
    let screen: String = (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n");
    // The Runs pane's note column shows its start; the details the whole line.
    assert!(screen.contains("⚠ no NCCL via TLS"), "{screen}");
    assert!(
        d.contains("no NCCL via TLS: the NCCL profiler plugin speaks no TLS, so no collectives view, no NCCL hang evidence, no bus bandwidth; buckets timed by ddptop's Python comm hook"),
        "{d}"
    );
    // A plain-TCP run whose plugins then report: the details switch, live.
    let r = &mut st.state.runs[0];
    for rank in 0..2 {
        feed(
            r,
            &format!(
                r#"{{"v":1,"type":"plan","rank":{rank},"step":9,"t":3.0,"total_steps":null,"comm_timing":"nccl_profiler"}}"#
            ),
        );
    }
    let d = details(&st);
    assert!(
        d.contains("communication NCCL profiler plugin; the Python comm hook until step 9, before it was confirmed"),
        "{d}"
    );
}
