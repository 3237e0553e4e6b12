//! The GPU pane of a multi-node run: rows grouped by node with the run·rank column across nodes,
//! a per-node summary when many GPUs do not fit, and a lost agent's node greyed. Drawn from
//! hand-built states into ratatui's TestBackend; the screens are insta snapshots
//! (`INSTA_UPDATE=always cargo test --test ui_nodes` accepts changes).

use ddptop::app::{HostInfo, Pane, State, View, gpus, nodes};
use ddptop::gpu::GpuSource;
use ddptop::gpu::fake::FakeGpus;
use ddptop::keys::KeyMap;
use ddptop::protocol::Backend;
use ddptop::protocol::agent::{AgentHello, GpuSourceKind, NodeGpu, NodeSample};
use ddptop::run::{Experiment, RankView, RunSpec, RunView};
use ddptop::ui::{self, Theme};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::time::Instant;

const RUN: &str = "r20261201-120000-ab12";

fn hello(node: &str, gpus: u32) -> AgentHello {
    AgentHello {
        token: String::new(),
        run_id: RUN.into(),
        node: node.into(),
        pid: 7,
        source: GpuSourceKind::Nvml,
        gpus,
        driver: None,
        note: None,
        t: 0.0,
    }
}

/// `n` GPUs of one node: utilisation 90, 85, … with GPU `slow` at 20 %; `pids[i]` on GPU i.
fn sample(n: u32, slow: u32, pids: &[u32]) -> NodeSample {
    NodeSample {
        t: 1.0,
        gpus: (0..n)
            .map(|i| NodeGpu {
                index: i,
                name: Some("NVIDIA H200".into()),
                util_pct: Some(if i == slow { 20 } else { 90 - 5 * (i % 3) }),
                mem_used: Some(60 << 30),
                mem_total: Some(141 << 30),
                power_w: Some(600.0),
                temp_c: Some(60 + i),
                link: Some("NVLink".into()),
                link_rx_kbs: Some(1_000_000),
                link_tx_kbs: Some(1_000_000),
                pids: pids.get(i as usize).map(|p| vec![*p]).unwrap_or_default(),
                error: None,
            })
            .collect(),
        procs: Vec::new(),
        error: None,
    }
}

/// This machine (gpu-a) with `local` fake GPUs running rank 0, and `others` nodes with agents,
/// the first of which (gpu-b) runs rank 1 on its GPU 0.
fn multi_node(local: usize, others: &[(&str, u32)]) -> State {
    let mut st = State::new(HostInfo {
        hostname: "gpu-a".into(),
        ..Default::default()
    });
    let mut src = FakeGpus::h200(local);
    src.pids[0] = vec![100];
    gpus::apply_info(&mut st, src.info());
    for _ in 0..3 {
        let s = src.sample();
        gpus::apply_gpu_sample(&mut st, s);
    }
    let mut run = RunView::new(
        RUN.into(),
        RunSpec::new(Experiment::Weak, 2, Backend::Gloo),
        Instant::now(),
        0.0,
    );
    run.ranks.insert(
        0,
        RankView {
            rank: 0,
            pid: Some(100),
            node: Some("gpu-a".into()),
            connected: true,
            ..Default::default()
        },
    );
    run.ranks.insert(
        1,
        RankView {
            rank: 1,
            pid: Some(200),
            node: Some("gpu-b".into()),
            remote: true,
            connected: true,
            ..Default::default()
        },
    );
    st.runs.push(run);
    let now = Instant::now();
    for (i, (name, n)) in others.iter().enumerate() {
        nodes::agent_hello(&mut st, RUN, &hello(name, *n));
        let pids: &[u32] = if i == 0 { &[200] } else { &[] };
        for _ in 0..3 {
            nodes::apply_node_sample(&mut st, RUN, name, sample(*n, 3 % n, pids), now);
        }
    }
    st
}

fn draw(st: &State, w: u16, h: u16) -> Terminal<TestBackend> {
    let view = View {
        pane: Pane::Gpus,
        ..Default::default()
    };
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    let ctx = ui::Ctx {
        state: st,
        view: &view,
        theme: &Theme::dark(),
        keys: &KeyMap::default(),
    };
    t.draw(|f| ui::draw(f, &ctx)).unwrap();
    t
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
fn rows_are_grouped_by_node_with_run_and_rank_across_nodes() {
    let st = multi_node(2, &[("gpu-b", 2)]);
    let t = draw(&st, 140, 50);
    let s = text(&t);
    let a = s.find("node gpu-a · 2 GPUs · this machine").expect(&s);
    let b = s.find("node gpu-b · 2 GPUs · agent · nvml").expect(&s);
    assert!(a < b, "this machine first:\n{s}");
    assert!(s.contains("GPUs (4)"), "every node's GPUs counted:\n{s}");
    // Rank 0 on this machine's GPU 0, rank 1 on gpu-b's GPU 0: the same run across nodes.
    let owners: Vec<&str> = s
        .lines()
        .filter(|l| l.contains("H200") && l.contains("ab12 r"))
        .collect();
    assert_eq!(owners.len(), 2, "{s}");
    assert!(
        owners[0].contains("ab12 r0") && owners[1].contains("ab12 r1"),
        "{s}"
    );
    insta::assert_snapshot!(t.backend());
}

#[test]
fn many_gpus_are_summarized_per_node_with_the_worst_named() {
    let st = multi_node(8, &[("gpu-b", 8), ("gpu-c", 8), ("gpu-d", 8)]);
    let t = draw(&st, 120, 24);
    let s = text(&t);
    assert!(
        s.contains("util min/med/max") && s.contains("worst GPU"),
        "{s}"
    );
    let line = |n: &str| {
        s.lines()
            .find(|l| l.contains(&format!("│{n} ")))
            .unwrap_or_else(|| panic!("{n}:\n{s}"))
            .to_string()
    };
    // gpu-b: 8 GPUs, GPU 3 at 20 %, the others 80–90 %.
    let b = line("gpu-b");
    assert!(b.contains("20/85/90%") && b.contains("#3 20%"), "{b}");
    assert!(b.contains("480.0/1128.0") && b.contains("4.8kW"), "{b}");
    assert!(line("gpu-a").contains("   8 "), "{}", line("gpu-a"));
    insta::assert_snapshot!(t.backend());
}

#[test]
fn a_lost_agent_greys_its_node_and_says_why() {
    let mut st = multi_node(1, &[("gpu-b", 2), ("gpu-c", 1)]);
    assert!(nodes::agent_gone(
        &mut st,
        RUN,
        "gpu-c",
        "its connection closed"
    ));
    let t = draw(&st, 140, 50);
    let s = text(&t);
    assert!(
        s.contains("node gpu-c · 1 GPU · agent · nvml · LOST: its connection closed"),
        "{s}"
    );
    let buf = t.backend().buffer();
    let y = (0..buf.area.height)
        .find(|y| {
            let row: String = (0..buf.area.width).map(|x| buf[(x, *y)].symbol()).collect();
            row.contains("LOST")
        })
        .unwrap()
        + 1;
    let dim = Theme::dark().dim;
    // The lost node's GPU row: every cell in the dim style.
    let styled: Vec<_> = (3..60).map(|x| buf[(x, y)].style()).collect();
    assert!(
        styled
            .iter()
            .all(|st| st.add_modifier == dim.add_modifier && st.fg == dim.fg),
        "row {y} not greyed"
    );
    // gpu-b's row is not.
    let yb = y - 5;
    assert!(
        (3..60).any(|x| buf[(x, yb)].style().fg != dim.fg),
        "row {yb} greyed"
    );
    // The run is untouched.
    assert!(!st.runs[0].status.is_final());
    insta::assert_snapshot!(t.backend());
}

/// The header's second line says where `1`/`2`/`4` launch once the config names other nodes:
/// `this node`, then after `N` `nodes: 3 (tls)` (and k≤ across them); nothing without hosts.
#[test]
fn the_header_badge_says_where_launches_go() {
    use ddptop::app::target::LaunchTarget;
    let mut st = State::new(HostInfo {
        hostname: "gpu-a".into(),
        ..Default::default()
    });
    st.max_k = 8;
    let header = |st: &State| {
        text(&draw(st, 120, 30))
            .lines()
            .take(2)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let none = header(&st);
    assert!(
        !none.contains("this node") && !none.contains("nodes:"),
        "{none}"
    );
    st.next.target = LaunchTarget {
        hosts: vec!["gpu-a".into(), "gpu-b".into(), "gpu-c=10.0.0.3".into()],
        tls: true,
        local_max_k: 8,
        ..Default::default()
    };
    let here = header(&st);
    assert!(
        here.contains(" this node ") && here.contains("k≤8"),
        "{here}"
    );
    st.next.target.toggle("gpu-a", 0, false).unwrap();
    st.max_k = st.next.target.max_k();
    let all = header(&st);
    assert!(
        all.contains(" nodes: 3 (tls) ") && all.contains("k≤24"),
        "{all}"
    );
    insta::assert_snapshot!(format!("{here}\n---\n{all}"));
}
