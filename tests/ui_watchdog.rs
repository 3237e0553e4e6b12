//! The watchdog's live word in the Ranks pane: a run in its first steps says it is warming up
//! (and with what allowance), a slow step it waits out says so, instead of a silent kill.

mod common;
use common::ui as fixtures;

use ddptop::app::Pane;
use ddptop::protocol::{Backend, Phase};
use ddptop::run::{Experiment, RunStatus};
use ddptop::supervisor::watchdog::{self, WatchdogConfig};
use fixtures::*;
use std::time::{Duration, Instant};

fn text(st: &Screen, w: u16, h: u16) -> String {
    let t = fixtures::draw(st, w, h);
    let buf = t.backend().buffer();
    (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A 2-rank NCCL run whose ranks entered training `secs` ago and completed `steps` steps.
fn stopped(secs: u64, steps: u64) -> (Screen, Instant) {
    let mut st = Screen::new(host_gpubox(2));
    let mut r = run(
        4,
        spec(Experiment::Weak, 2, Backend::Nccl),
        RunStatus::Running,
    );
    live_ranks(&mut r, 7000, true);
    let t0 = Instant::now();
    let now = t0 + Duration::from_secs(secs);
    r.clock.started = Some(t0);
    for rk in r.ranks.values_mut() {
        rk.step = steps;
        rk.phase = Some(Phase::Train);
        rk.last_progress = Some(t0);
        rk.last_seen = Some(now);
    }
    st.runs = vec![r];
    st.view.focused = Some(id(4));
    st.view.pane = Pane::Gpus;
    (st, now)
}

#[test]
fn the_ranks_pane_says_a_run_is_warming_up_in_its_first_step() {
    let (mut st, now) = stopped(30, 0);
    let cfg = WatchdogConfig::default();
    assert!(watchdog::check(&st.runs[0], now, &cfg).is_none());
    st.runs[0].evidence.watch_note = watchdog::live_note(&st.runs[0], now, &cfg);
    let s = text(&st, 160, 40);
    assert!(s.contains("warming up: first step"), "{s}");
}

#[test]
fn a_flowing_run_has_no_watchdog_word() {
    let (mut st, _) = stopped(0, 50);
    let cfg = WatchdogConfig::default();
    let now = st.runs[0].clock.started.unwrap() + Duration::from_secs(1);
    st.runs[0].evidence.watch_note = watchdog::live_note(&st.runs[0], now, &cfg);
    assert_eq!(st.runs[0].evidence.watch_note, None);
    let s = text(&st, 160, 40);
    assert!(!s.contains("warming up"), "{s}");
}

/// Issue 43: an attached job judged stalled (reported, not stopped) reads `stalled` in the
/// Runs list and its note in the Ranks pane; a diagnosis reads on its details.
#[test]
fn a_stalled_attached_job_reads_stalled_with_its_note() {
    let (mut st, _) = stopped(30, 12);
    st.runs[0].status = RunStatus::Stalled;
    st.runs[0].evidence.watch_note =
        Some("stalled, reported, not stopped: rank 1 alive but stuck at step 12 for 3.0 s".into());
    let s = text(&st, 160, 40);
    // The Runs row: the status word with its own glyph (never colour alone).
    assert!(s.contains("nccl ! stalled"), "{s}");
    assert!(
        !s.contains("▶ running"),
        "a stalled run does not read running: {s}"
    );
    assert!(s.contains("stalled, reported, not stopped"), "{s}");
}
