//! The tuning's live table (`T`), drawn from hand-built boards: while it measures, and at the
//! end with a recommendation; kept as insta snapshots. Figures are illustrative, shaped like a
//! simulated book-pcie tuning (not measured).

mod common;
use common::ui as fixtures;

use ddptop::app::tune::decide::Verdict;
use ddptop::app::tune::predict::Prediction;
use ddptop::app::tune::space::Candidate;
use ddptop::app::tune::{Board, Phase, Row, RowState, Saved};
use fixtures::{Screen, host_laptop};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// A bucket size of the fixture (all above 0).
fn cap(mb: f64) -> ddptop::run::BucketCapMb {
    ddptop::run::BucketCapMb::new(mb).unwrap()
}

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

fn predicted(sps: f64) -> Result<Prediction, String> {
    Ok(Prediction {
        samples_per_s: sps,
        step_ms: 512.0 / sps * 1e3,
        exposed_ms: 5.0,
        buckets: 3,
        bucket_bytes: vec![],
        busbw: "profile book-pcie (SIMULATED)".into(),
    })
}

fn row(c: Candidate, pred: f64, runs: &[f64], planned: usize, state: RowState) -> Row {
    let mut r = Row::new(c, predicted(pred));
    for (i, x) in runs.iter().enumerate() {
        r.measured.push(format!("r{i}"), *x);
    }
    r.planned = planned;
    r.finalist = planned > 0;
    r.state = state;
    r
}

/// Mid-way: the default and bucket_cap_mb=1 have two runs each, the others wait or were left out.
fn measuring() -> Board {
    let mut b = Board::new("weak at k=2 on sim (book-pcie)".into(), true, 2, 1);
    b.base_run = Some("r20261201-211927-4af8".into());
    b.repeats = 3;
    b.rows = vec![
        row(
            Candidate::default_one(),
            9_754.0,
            &[9_530.0, 9_544.0],
            3,
            RowState::Measuring,
        ),
        row(
            Candidate::bucket_cap(cap(1.0)),
            10_459.0,
            &[10_216.0, 10_230.0],
            3,
            RowState::Measuring,
        ),
        row(
            Candidate::bucket_cap(cap(5.0)),
            10_380.0,
            &[10_120.0],
            3,
            RowState::Measuring,
        ),
        row(
            Candidate::bucket_cap(cap(50.0)),
            7_538.0,
            &[],
            0,
            RowState::Skipped,
        ),
    ];
    b.phase = Phase::Measuring { done: 5, total: 9 };
    b.running = Some((
        "r20261201-212001-77aa".into(),
        "measure 6/9: bucket_cap_mb=5 at k=2".into(),
    ));
    b
}

fn screen(b: Board) -> Screen {
    let mut st = Screen::new(host_laptop());
    st.tune = Some(b);
    st.view.tune = true;
    st
}

#[test]
fn the_live_table_shows_each_candidate_as_it_is_predicted_and_measured() {
    let t = fixtures::draw(&screen(measuring()), 110, 20);
    let s = text(&t);
    assert!(s.contains("measuring: 5/9 runs, interleaved"), "{s}");
    assert!(s.contains("SIMULATED"), "{s}");
    assert!(s.contains("2/3 measuring"), "{s}");
    assert!(s.contains("skipped"), "{s}");
    assert!(s.contains("measure 6/9: bucket_cap_mb=5"), "{s}");
    assert!(s.contains("Esc or x cancels"), "{s}");
    insta::assert_snapshot!("tune_measuring", s);
}

#[test]
fn the_finished_table_names_the_winner_and_how_to_keep_it() {
    let mut b = measuring();
    for r in b.rows.iter_mut().take(3) {
        let last = r.measured.samples_per_s[0];
        while r.measured.repeats() < 3 {
            r.measured.push("rx".into(), last + 4.0);
        }
        r.state = RowState::Done;
    }
    b.phase = Phase::Done;
    b.running = None;
    b.verdict = Some(Verdict::Recommend {
        candidate: 1,
        gain_pct: 7.2,
    });
    let s = text(&fixtures::draw(&screen(b.clone()), 110, 20));
    assert!(s.contains("★ bucket_cap_mb=1"), "{s}");
    assert!(s.contains("S saves it as a preset"), "{s}");
    assert!(s.contains("Esc closes"), "{s}");
    insta::assert_snapshot!("tune_done", s);
    // Kept: the table says where.
    b.saved = Some(Saved {
        name: "tuned-weak-k2-20261201".into(),
        path: "/home/me/.config/ddptop/config.toml".into(),
    });
    let s = text(&fixtures::draw(&screen(b), 110, 20));
    assert!(s.contains("preset tuned-weak-k2-20261201 in /home"), "{s}");
    assert!(!s.contains("S saves it"), "{s}");
}

#[test]
fn a_flat_landscape_says_the_default_is_as_good_and_a_hidden_table_is_not_drawn() {
    let mut b = measuring();
    b.phase = Phase::Done;
    b.running = None;
    b.verdict = Some(Verdict::DefaultIsAsGood {
        best: Some(1),
        why: "no candidate's slowest run beat the default's fastest".into(),
    });
    let s = text(&fixtures::draw(&screen(b.clone()), 110, 20));
    assert!(
        s.contains("the default is as good as anything tried"),
        "{s}"
    );
    assert!(!s.contains("★"), "{s}");
    let mut hidden = screen(b);
    hidden.view.tune = false;
    let s = text(&fixtures::draw(&hidden, 110, 20));
    assert!(!s.contains("Tune weak"), "{s}");
}
