//! The Deficits pane and the hand-rolled curve on the Scaling pane, drawn from a hand-built state
//! (DDP and the three hand-rolled variants at k = 1, 2 on two GPUs), kept as an insta snapshot.

mod common;
use common::ui as fixtures;

use ddptop::app::Pane;
use ddptop::protocol::Backend;
use ddptop::run::{Experiment, HandRolled};
use fixtures::{Screen, completed, host_gpubox, id, spec};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// DDP as the deficits sweep runs it: without the book's settings, as the tch loop runs.
fn plain_weak(k: u32) -> ddptop::run::RunSpec {
    let mut s = spec(Experiment::Weak, k, Backend::Nccl);
    s.torch = ddptop::run::TorchSettings::Off;
    s
}

/// Figures are illustrative (shaped like the chapter's claim, not measured).
fn deficits_state() -> Screen {
    let mut st = Screen::new(host_gpubox(2));
    let hand = |n: u32, i: usize, k: u32, sps: f64| {
        let mut s = spec(Experiment::Handrolled, k, Backend::Nccl);
        s.family = ddptop::run::Family::Handrolled {
            hand: HandRolled::DEFICITS[i],
        };
        completed(n, s, &vec![sps; k as usize])
    };
    st.runs = vec![
        completed(1, plain_weak(1), &[5_602.0]),
        hand(2, 0, 1, 5_410.0),
        hand(3, 1, 1, 5_430.0),
        hand(4, 2, 1, 5_420.0),
        completed(5, plain_weak(2), &[5_480.0, 5_479.0]),
        hand(6, 0, 2, 4_300.0),
        hand(7, 1, 2, 4_900.0),
        hand(8, 2, 2, 5_150.0),
    ];
    st.view.focused = Some(id(8));
    st.view.selected = 7;
    st.view.pane = Pane::Timeline;
    st
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

#[test]
fn deficits_pane_sets_each_variant_beside_ddp() {
    let st = deficits_state();
    let t = fixtures::draw(&st, 120, 40);
    let s = text(&t);
    assert!(s.contains("Deficits"), "{s}");
    // k=2: 8,600 / 10,959 = 78% for the book's loop, 94% with both fixes.
    assert!(s.contains("78% of DDP"), "{s}");
    assert!(s.contains("94% of DDP"), "{s}");
    assert!(s.contains("threads+ring"), "{s}");
    // The Scaling pane: the hand-rolled curve, titled by its switches, beside DDP's weak curve.
    assert!(s.contains("handrolled"), "{s}");
    assert!(s.contains("weak"), "{s}");
    insta::assert_snapshot!(t.backend());
}
