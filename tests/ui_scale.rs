//! The Ranks pane with 256 ranks: more ranks than lines, so a summary over every rank (count,
//! lost, min/median/max of step and step time), then lost ranks, then the slowest first.

mod common;
use common::ui as fixtures;

use ddptop::app::Pane;
use ddptop::protocol::Backend;
use ddptop::run::{Experiment, RunStatus};
use fixtures::*;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// A running 256-rank NCCL run: step times spread by rank, ranks 77 and 200 the slowest, rank 13
/// lost (its connection gone, behind in steps).
fn ranks_256() -> Screen {
    let mut st = Screen::new(host_gpubox(8));
    st.max_k = 256;
    let mut r = run(
        9,
        spec(Experiment::Weak, 256, Backend::Nccl),
        RunStatus::Running,
    );
    live_ranks(&mut r, 6000, true);
    for rk in r.ranks.values_mut() {
        let i = rk.rank;
        let ms = match i {
            77 => 61.5,
            200 => 58.25,
            _ => 45.0 + f64::from(i * 37 % 101) / 20.0,
        };
        rk.recent_step_ms = [ms, ms + 0.2, ms - 0.1].into_iter().collect();
        rk.step = 1200 + u64::from(i % 3);
        rk.device = Some(format!("cuda:{}", i % 8));
    }
    let lost = r.ranks.get_mut(&13).unwrap();
    lost.connected = false;
    lost.step = 1190;
    st.runs = vec![r];
    // This node's 8 GPUs (the other ranks run on other nodes).
    st.gpus = gpus(8, &[(0, 6000), (1, 6001), (2, 6002), (3, 6003)]);
    st.view.focused = Some(id(9));
    st.view.pane = Pane::Gpus;
    st
}

fn text(t: &Terminal<TestBackend>) -> String {
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

#[test]
fn ranks_pane_aggregates_256_ranks() {
    let st = ranks_256();
    let t = draw(&st, 120, 40);
    let s = text(&t);
    assert!(s.contains("256 ranks · 1 lost · slowest first"), "{s}");
    assert!(
        s.contains("min/med/max step 1190/1201/1202, ms 45.0/47.5/61.5"),
        "{s}"
    );
    // The lost rank first, then the slowest: rank 77, then rank 200.
    let r13 = s.find(" r13 ").expect("lost rank 13 listed");
    let r77 = s.find(" r77 ").expect("rank 77 listed");
    let r200 = s.find(" r200").expect("rank 200 listed");
    assert!(r13 < r77 && r77 < r200, "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn a_few_ranks_still_list_in_rank_order() {
    let mut st = ranks_256();
    let r = &mut st.runs[0];
    r.ranks.retain(|k, _| *k < 4);
    let s = text(&draw(&st, 120, 40));
    assert!(!s.contains("min/med/max"), "{s}");
    let pos: Vec<usize> = (0..4)
        .map(|i| s.find(&format!(" r{i} ")).unwrap())
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "{s}");
}
