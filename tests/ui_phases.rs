//! The per-phase view of a run (issue 46; TraceML's view: the median rank beside the worst per
//! phase, worst ÷ median), drawn into ratatui's TestBackend: as a block of its own, among the
//! run's details (with the fault of a fault run), and the Runs pane's fault mark. The phase
//! histories are made up by hand (a data-wait straggler shaped like the gloo runs of
//! docs/stragglers.md), not recorded from a run.

mod common;
use common::ui as fixtures;

use ddptop::app::RunStatus;
use ddptop::keys::KeyMap;
use ddptop::protocol::Backend;
use ddptop::run::view::{PhaseSample, Straggler};
use ddptop::run::{Experiment, RunView};
use ddptop::ui::{self, Theme};
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

/// A k-rank gloo run with 40 timed steps per rank: data 1 ms, forward ~10, backward 20 + the
/// comm wait, optimizer 5; `slow` waits 19 ms for its data each step, so the others wait ~18 ms
/// for it in their backward's all-reduce and it waits 0.5 ms.
fn run_with(k: u32, slow: Option<u32>) -> RunView {
    let mut r = run(
        7,
        spec(Experiment::Weak, k, Backend::Gloo),
        RunStatus::Running,
    );
    for (id, rk) in r.ranks.iter_mut() {
        let is_slow = Some(*id) == slow;
        for step in 1..=40u64 {
            // A little deterministic jitter in the forward, as a real run has.
            let fwd = 10.0 + 0.1 * ((step * 7 + u64::from(*id) * 3) % 5) as f64;
            let comm = match (slow, is_slow) {
                (None, _) => 0.4,
                (Some(_), true) => 0.5,
                (Some(_), false) => 18.0,
            };
            rk.recent_phases.push_back(PhaseSample {
                step,
                data_ms: if is_slow { 19.0 } else { 1.0 },
                fwd_ms: fwd,
                bwd_ms: 20.0 + comm,
                opt_ms: 5.0,
                comm_ms: Some(comm),
                sync_ms: None,
            });
        }
        rk.step = 40;
    }
    r
}

fn named(rank: u32, active: bool) -> Straggler {
    Straggler {
        rank,
        score: 0.65,
        phase: "data wait".into(),
        evidence: format!(
            "rank {rank} at 0.65 of the others' pace: data wait 19.0 ms vs 1.0 ms median"
        ),
        since: 4.2,
        step: 41,
        active,
    }
}

fn block(run: &RunView, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    let theme = Theme::dark();
    t.draw(|f| ui::phases::render(&theme, run, f.area(), f.buffer_mut()))
        .unwrap();
    t
}

fn row<'a>(s: &'a str, phase: &str) -> &'a str {
    // A row starts with its phase (a straggler's line may name one in its evidence).
    s.lines()
        .find(|l| {
            l.trim_start_matches('│')
                .trim_start()
                .starts_with(&format!("{phase} "))
        })
        .unwrap_or_else(|| panic!("no {phase} row:\n{s}"))
}

#[test]
fn a_slow_ranks_data_wait_stands_out_beside_the_median_at_k4() {
    let mut r = run_with(4, Some(1));
    r.straggler.named.push(named(1, true));
    let t = block(&r, 110, 12);
    let s = text(&t);
    let data = row(&s, "data wait");
    assert!(data.contains("1.00 ms") && data.contains("19.0 ms"), "{s}");
    assert!(
        data.contains("r1") && data.contains("19.00×") && data.contains('◆'),
        "{s}"
    );
    // Compute and the optimizer are even: nobody marked there.
    for even in ["compute", "optimizer"] {
        assert!(!row(&s, even).contains('◆'), "{even}:\n{s}");
    }
    // At k=4 the median rank waits as long as the worst (the three that wait for rank 1).
    assert!(!row(&s, "exposed comm").contains("waiting"), "{s}");
    assert!(
        s.contains("◆ straggler rank 1 named at 4.2 s (step 41)"),
        "{s}"
    );
    assert!(s.contains("host sync not measured"), "{s}");
    assert!(
        s.contains("median rank vs worst rank, newest ≤30 timed steps"),
        "{s}"
    );
    insta::assert_snapshot!(t.backend());
}

#[test]
fn an_attached_scripts_host_syncs_are_a_row_of_their_own_and_the_blocking_rank_is_marked() {
    // Rank 0 logs its loss with .item() every step and blocks 6 ms for its GPU; the others
    // 0.1 ms (what attach_sync.py measures as `step.sync_ms`).
    let mut r = run_with(4, None);
    for (id, rk) in r.ranks.iter_mut() {
        for s in rk.recent_phases.iter_mut() {
            s.sync_ms = Some(if *id == 0 { 6.0 } else { 0.1 });
        }
    }
    let s = text(&block(&r, 110, 12));
    let sync = row(&s, "host sync");
    assert!(
        sync.contains("0.10 ms") && sync.contains("6.00 ms") && sync.contains("r0"),
        "{s}"
    );
    assert!(sync.contains("60.00×") && sync.contains('◆'), "{s}");
    assert!(s.contains("host ms blocked in .item()"), "{s}");
    assert!(!s.contains("host sync not measured"), "{s}");
    // Everything else is even: the host sync is not added into the step.
    for even in ["data wait", "compute", "exposed comm", "optimizer"] {
        assert!(!row(&s, even).contains('◆'), "{even}:\n{s}");
    }
}

#[test]
fn at_k2_the_rank_that_waits_longest_is_said_to_wait_not_to_be_slow() {
    let r = run_with(2, Some(1));
    let m = ui::phases::model_of(&r).expect("two ranks, 40 shared steps");
    let names: Vec<&str> = m.rows.iter().map(|p| p.phase.as_str()).collect();
    assert_eq!(names, ["data wait", "compute", "exposed comm", "optimizer"]);
    let comm = &m.rows[2];
    assert_eq!(comm.worst_rank, 0, "{comm:?}");
    let s = text(&block(&r, 110, 12));
    let line = row(&s, "exposed comm");
    assert!(
        line.contains("r0") && line.contains("waiting for a slower rank, not slow"),
        "{s}"
    );
}

#[test]
fn a_healthy_run_marks_no_phase() {
    let s = text(&block(&run_with(4, None), 110, 12));
    for phase in ["data wait", "compute", "exposed comm", "optimizer"] {
        let line = row(&s, phase);
        assert!(!line.contains('◆') && !line.contains("waiting"), "{s}");
    }
    assert!(!s.contains("straggler"), "{s}");
}

#[test]
fn a_stored_fault_run_shows_its_table_as_of_its_end_in_the_details_with_its_fault() {
    // As a run loaded from the store: its table kept at the end, no phase history.
    let live = run_with(2, Some(1));
    let table = ui::phases::model_of(&live).unwrap().rows;
    let mut sp = spec(Experiment::Weak, 2, Backend::Gloo);
    sp.inject = Some("slow:1:1.5@40".parse().unwrap());
    let mut r = completed(8, sp, &[900.0, 900.0]);
    r.straggler.phase_scores = table;
    r.straggler.named.push(named(1, false));
    let mut st = Screen::new(host_laptop());
    st.state.runs = vec![r];
    let keys = KeyMap::default();
    let theme = Theme::dark();
    let ctx = ui::Ctx {
        state: &st.state,
        view: &st.view,
        theme: &theme,
        keys: &keys,
    };
    let lines: Vec<String> = ui::detail::lines(&ctx, &st.state.runs[0])
        .iter()
        .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
        .collect();
    let all = lines.join("\n");
    for want in [
        "fault      slow:1:1.5@40 injected: off the clean curves, never a k=1 baseline",
        "per phase median rank vs worst rank, as of the run's end",
        "was straggler rank 1 named at 4.2 s (step 41)",
        "host sync not measured",
    ] {
        assert!(all.contains(want), "{want} missing:\n{all}");
    }
    // At k=2 the median rank is the mean of the two: 19 ms against (1 + 19) / 2.
    let data = row(&all, "data wait");
    assert!(data.contains("10.0 ms") && data.contains("1.90×"), "{all}");
    // The Runs pane marks the fault beside the result.
    st.view.detail = false;
    let s = text(&draw(&st, 240, 40));
    assert!(s.contains("⚠ fault: slow:1:1.5@40"), "{s}");
}

#[test]
fn nothing_to_compare_draws_no_table() {
    // One rank; two ranks that have not shared 2 timed steps.
    let one = run_with(1, None);
    assert!(ui::phases::model_of(&one).is_none());
    let mut two = run_with(2, None);
    for rk in two.ranks.values_mut() {
        rk.recent_phases.truncate(4); // steps 1-3 are warm-up, never scored
    }
    assert!(ui::phases::model_of(&two).is_none());
    let s = text(&block(&two, 110, 5));
    assert!(s.contains("no per-phase figures"), "{s}");
}
