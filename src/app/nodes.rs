//! Other nodes' GPUs and worker processes, as their agents report them (multi-node runs,
//! docs/multinode.md). Pure folding into `State::nodes`: an agent's hello opens a node, each
//! `node_sample` updates its rows (a minute of utilisation history per GPU, as for this node's),
//! and a node whose agent's connection closed, or that sent nothing for `stale_after`, is marked
//! lost: its rows stay on screen greyed, with the reason, and the run goes on.

pub use super::node_gpus::NodeGpus;
use super::state::State;
use crate::gpu::{GpuSample, GpuView, HISTORY, ProcStat};
use crate::protocol::agent::{AgentHello, NodeGpu, NodeSample};
use crate::run::RankView;
use crate::run::view::NodeGpuRow;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Least time without a sample before a node is greyed. With the dashboard's default 1 s rate a
/// node is greyed 2.5 s after its last sample at most (a closed connection greys it at once).
pub const STALE_MIN: Duration = Duration::from_millis(2500);

/// How long a node may stay silent at sample period `period`: 2.5 periods, at least `STALE_MIN`.
pub fn stale_after(period: Duration) -> Duration {
    (period * 5 / 2).max(STALE_MIN)
}

fn find<'a>(state: &'a mut State, run: &str, node: &str) -> Option<&'a mut NodeGpus> {
    state
        .nodes
        .iter_mut()
        .find(|n| n.run == run && n.node == node)
}

/// An agent was admitted: a fresh entry (a restarted agent replaces the lost one's).
pub fn agent_hello(state: &mut State, run: &str, h: &AgentHello) {
    state.nodes.retain(|n| !(n.run == run && n.node == h.node));
    state.nodes.push(NodeGpus {
        node: h.node.clone(),
        run: run.to_string(),
        source: h.source,
        driver: h.driver.clone(),
        note: h.note.clone(),
        gpus: Vec::new(),
        procs: BTreeMap::new(),
        last_sample: None,
        lost: None,
        error: None,
    });
    state
        .nodes
        .sort_by(|a, b| (&a.run, &a.node).cmp(&(&b.run, &b.node)));
}

fn link_name(l: Option<&str>) -> Option<&'static str> {
    match l {
        Some("NVLink") => Some("NVLink"),
        Some("PCIe") => Some("PCIe"),
        _ => None,
    }
}

fn to_sample(g: NodeGpu) -> GpuSample {
    GpuSample {
        index: g.index,
        link: link_name(g.link.as_deref()),
        name: g.name,
        util_pct: g.util_pct,
        mem_used: g.mem_used,
        mem_total: g.mem_total,
        power_w: g.power_w,
        // Not in an agent's compact sample: a straggler's GPU clause reads this node's GPUs.
        power_limit_w: None,
        sm_clock_mhz: None,
        temp_c: g.temp_c,
        link_rx_kbs: g.link_rx_kbs,
        link_tx_kbs: g.link_tx_kbs,
        pids: g.pids,
        error: g.error,
    }
}

/// Fold one sample of `node`; returns whether anything is shown differently (always, for a
/// known node). A sample of a node without an admitted agent is ignored.
pub fn apply_node_sample(
    state: &mut State,
    run: &str,
    node: &str,
    s: NodeSample,
    now: Instant,
) -> bool {
    let Some(n) = find(state, run, node) else {
        return false;
    };
    n.last_sample = Some(now);
    n.lost = None;
    n.error = s.error;
    for g in s.gpus {
        let s = to_sample(g);
        let view = match n.gpus.iter().position(|v| v.index == s.index) {
            Some(i) => &mut n.gpus[i],
            None => {
                n.gpus.push(GpuView::default());
                n.gpus.last_mut().expect("just pushed")
            }
        };
        view.util_history
            .push_back(u64::from(s.util_pct.unwrap_or(0)));
        while view.util_history.len() > HISTORY {
            view.util_history.pop_front();
        }
        let name = s.name.clone().or_else(|| view.latest.name.take());
        let mem_total = s.mem_total.or(view.latest.mem_total);
        view.latest = GpuSample {
            name,
            mem_total,
            ..s
        };
    }
    n.gpus.sort_by_key(|g| g.index);
    n.procs = s
        .procs
        .into_iter()
        .map(|p| {
            (
                p.pid,
                ProcStat {
                    cpu_pct: p.cpu_pct,
                    rss_bytes: p.rss_bytes,
                },
            )
        })
        .collect();
    true
}

/// The agent's connection closed: grey the node, or forget it when its run is over.
pub fn agent_gone(state: &mut State, run: &str, node: &str, why: &str) -> bool {
    let finished = state.run(run).is_none_or(|r| r.status.is_final());
    if finished {
        let before = state.nodes.len();
        state.nodes.retain(|n| !(n.run == run && n.node == node));
        return before != state.nodes.len();
    }
    match find(state, run, node) {
        Some(n) => {
            n.lost = Some(why.to_string());
            true
        }
        None => false,
    }
}

/// Grey nodes silent for longer than `stale`, and drop the nodes of finished runs. Returns the
/// nodes newly greyed (to say so once) and whether anything changed.
pub fn check_nodes(state: &mut State, now: Instant, stale: Duration) -> (Vec<String>, bool) {
    let before = state.nodes.len();
    let active: Vec<String> = state.active_runs().map(|r| r.id.clone()).collect();
    state.nodes.retain(|n| active.contains(&n.run));
    let mut greyed = Vec::new();
    for n in &mut state.nodes {
        let since = n.last_sample.map(|t| now.saturating_duration_since(t));
        if n.lost.is_none() && since.is_some_and(|d| d > stale) {
            n.lost = Some(format!(
                "no sample for {:.0} s",
                since.unwrap_or_default().as_secs_f64()
            ));
            greyed.push(n.node.clone());
        }
    }
    let changed = !greyed.is_empty() || before != state.nodes.len();
    (greyed, changed)
}

/// CPU % and RSS of a rank: this machine's sampler for a local rank, its node's agent for a
/// remote one (pids are per node).
pub fn rank_proc<'a>(state: &'a State, run: &str, r: &RankView) -> Option<&'a ProcStat> {
    let pid = r.pid?;
    if !r.remote {
        return state.proc_stats.get(&pid);
    }
    let node = r.node.as_deref()?;
    state
        .nodes
        .iter()
        .find(|n| n.run == run && n.node == node && n.lost.is_none())?
        .procs
        .get(&pid)
}

/// Whether a remote rank's node has an agent (its CPU % and RSS are sampled there).
pub fn has_agent(state: &State, node: &str) -> bool {
    state.nodes.iter().any(|n| n.node == node)
}

/// Pids of `run`'s ranks on `node`: what that node's agent should watch.
pub fn node_pids(state: &State, run: &str, node: &str) -> Vec<u32> {
    let mut v: Vec<u32> = state
        .run(run)
        .map(|r| {
            r.ranks
                .values()
                .filter(|k| k.remote && k.node.as_deref() == Some(node))
                .filter_map(|k| k.pid)
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// (run id, rank) of each rank on `node` whose pid is on this GPU of that node.
pub fn node_gpu_owners<'a>(state: &'a State, n: &NodeGpus, gpu: &GpuView) -> Vec<(&'a str, u32)> {
    let Some(run) = state.run(&n.run) else {
        return Vec::new();
    };
    run.ranks
        .values()
        .filter(|r| r.remote && r.node.as_deref() == Some(n.node.as_str()))
        .filter(|r| r.pid.is_some_and(|p| gpu.pids.contains(&p)))
        .map(|r| (run.id.as_str(), r.rank))
        .collect()
}

/// Every node's GPU rows of `run`, when it has other nodes' GPUs (agents or DCGM): this
/// machine's GPUs first (`local`), then each node's, `live` or `greyed`, with the ranks on each.
/// Empty for a run on one node.
pub fn gpu_rows(state: &State, run: &str) -> Vec<NodeGpuRow> {
    let others: Vec<&NodeGpus> = state.nodes.iter().filter(|n| n.run == run).collect();
    let Some(view) = state.run(run).filter(|_| !others.is_empty()) else {
        return Vec::new();
    };
    let row =
        |node: &str, g: &GpuView, ranks: Vec<u32>, agent: &str, lost, source: &str| NodeGpuRow {
            node: node.to_string(),
            gpu: g.index,
            name: g.name.clone(),
            util_pct: g.util_pct,
            mem_used_bytes: g.mem_used,
            mem_total_bytes: g.mem_total,
            power_w: g.power_w,
            ranks,
            agent: agent.to_string(),
            lost,
            source: source.to_string(),
        };
    // This machine's node name as the run's ranks give it (`--nodes`), else the host name.
    let here = view
        .ranks
        .values()
        .find(|r| !r.remote)
        .and_then(|r| r.node.clone())
        .unwrap_or_else(|| state.host.hostname.clone());
    let mut rows: Vec<NodeGpuRow> = state
        .gpus
        .iter()
        .map(|g| {
            let ranks = view
                .ranks
                .values()
                .filter(|r| !r.remote && r.pid.is_some_and(|p| g.pids.contains(&p)))
                .map(|r| r.rank)
                .collect();
            row(&here, g, ranks, "local", None, "nvml")
        })
        .collect();
    for n in others {
        let agent = if n.lost.is_some() { "greyed" } else { "live" };
        for g in &n.gpus {
            let ranks = node_gpu_owners(state, n, g)
                .into_iter()
                .map(|(_, r)| r)
                .collect();
            rows.push(row(
                &n.node,
                g,
                ranks,
                agent,
                n.lost.clone(),
                n.source.as_str(),
            ));
        }
    }
    rows
}

/// The run document's `node_gpus` (`run --json`, `show --json`): the rows kept when the run
/// ended, an empty list for a one-node run.
pub fn nodes_json(run: &crate::run::RunView) -> serde_json::Value {
    serde_json::to_value(&run.figures.node_gpus).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::HostInfo;
    use crate::protocol::agent::GpuSourceKind;
    use crate::run::{RunSpec, RunView};

    fn hello(node: &str) -> AgentHello {
        AgentHello {
            token: String::new(),
            run_id: "r1".into(),
            node: node.into(),
            pid: 9,
            source: GpuSourceKind::Fake,
            gpus: 2,
            driver: None,
            note: None,
            t: 0.0,
        }
    }

    fn gpu(i: u32, util: u32) -> NodeGpu {
        NodeGpu {
            index: i,
            name: Some("NVIDIA H200".into()),
            util_pct: Some(util),
            mem_total: Some(100),
            link: Some("NVLink".into()),
            ..Default::default()
        }
    }

    fn state_with_run() -> State {
        let mut st = State::new(HostInfo::default());
        st.runs.push(RunView::new(
            "r1".into(),
            RunSpec::new(
                crate::run::Experiment::Weak,
                2,
                crate::protocol::Backend::Gloo,
            ),
            Instant::now(),
            0.0,
        ));
        st
    }

    #[test]
    fn samples_fold_into_the_nodes_rows_with_history() {
        let mut st = state_with_run();
        let t0 = Instant::now();
        assert!(!apply_node_sample(
            &mut st,
            "r1",
            "b",
            NodeSample::default(),
            t0
        ));
        agent_hello(&mut st, "r1", &hello("b"));
        for u in [10, 20, 30] {
            let s = NodeSample {
                t: 1.0,
                gpus: vec![gpu(1, u), gpu(0, u + 1)],
                ..Default::default()
            };
            assert!(apply_node_sample(&mut st, "r1", "b", s, t0));
        }
        let n = &st.nodes[0];
        assert_eq!(n.gpus.len(), 2);
        assert_eq!(n.gpus[0].index, 0, "sorted by index");
        assert_eq!(n.gpus[1].util_history, [10, 20, 30]);
        assert_eq!(n.gpus[1].link, Some("NVLink"));
        assert!(n.simulated());
    }

    #[test]
    fn a_silent_or_closed_agent_greys_its_node_and_the_run_goes_on() {
        let mut st = state_with_run();
        let t0 = Instant::now();
        agent_hello(&mut st, "r1", &hello("b"));
        agent_hello(&mut st, "r1", &hello("c"));
        for n in ["b", "c"] {
            apply_node_sample(&mut st, "r1", n, NodeSample::default(), t0);
        }
        let stale = stale_after(Duration::from_secs(1));
        assert_eq!(stale, STALE_MIN);
        let (greyed, _) = check_nodes(&mut st, t0 + Duration::from_secs(2), stale);
        assert!(greyed.is_empty());
        assert!(agent_gone(&mut st, "r1", "c", "connection closed"));
        apply_node_sample(&mut st, "r1", "c", NodeSample::default(), t0);
        assert!(st.nodes[1].lost.is_none(), "a sample revives a node");
        let (greyed, changed) = check_nodes(&mut st, t0 + Duration::from_secs(3), stale);
        assert_eq!(greyed, ["b", "c"]);
        assert!(changed);
        assert!(st.nodes[0].lost.as_deref().unwrap().contains("no sample"));
        assert!(!st.runs[0].status.is_final(), "the run is untouched");
        // Said once.
        let (again, _) = check_nodes(&mut st, t0 + Duration::from_secs(4), stale);
        assert!(again.is_empty());
        // A finished run's nodes are dropped.
        st.runs[0].status = crate::run::RunStatus::Completed;
        let (_, changed) = check_nodes(&mut st, t0 + Duration::from_secs(5), stale);
        assert!(changed && st.nodes.is_empty());
    }

    #[test]
    fn remote_ranks_take_their_figures_from_their_nodes_agent() {
        let mut st = state_with_run();
        let r = RankView {
            rank: 1,
            pid: Some(42),
            remote: true,
            node: Some("b".into()),
            ..Default::default()
        };
        st.runs[0].ranks.insert(1, r.clone());
        // Pid 42 on this machine is someone else's process: never taken for the remote rank.
        st.proc_stats.insert(
            42,
            ProcStat {
                cpu_pct: 1.0,
                rss_bytes: 1,
            },
        );
        assert!(rank_proc(&st, "r1", &r).is_none());
        agent_hello(&mut st, "r1", &hello("b"));
        let s = NodeSample {
            t: 1.0,
            gpus: vec![NodeGpu {
                pids: vec![42],
                ..gpu(0, 50)
            }],
            procs: vec![crate::protocol::agent::NodeProc {
                pid: 42,
                cpu_pct: 97.0,
                rss_bytes: 7,
            }],
            error: None,
        };
        apply_node_sample(&mut st, "r1", "b", s, Instant::now());
        assert_eq!(rank_proc(&st, "r1", &r).unwrap().rss_bytes, 7);
        assert_eq!(node_pids(&st, "r1", "b"), [42]);
        let n = st.nodes[0].clone();
        assert_eq!(node_gpu_owners(&st, &n, &n.gpus[0]), [("r1", 1)]);
    }

    #[test]
    fn gpu_rows_list_every_nodes_gpus_with_their_ranks_and_agent_state() {
        let mut st = state_with_run();
        assert!(gpu_rows(&st, "r1").is_empty(), "no other node: no rows");
        st.host.hostname = "host-a".into();
        let mut here = GpuView::default();
        here.latest.index = 0;
        here.latest.util_pct = Some(77);
        here.latest.pids = vec![10];
        st.gpus.push(here);
        for (rank, pid, node, remote) in [(0, 10, "a", false), (1, 42, "b", true)] {
            st.runs[0].ranks.insert(
                rank,
                RankView {
                    rank,
                    pid: Some(pid),
                    node: Some(node.into()),
                    remote,
                    ..Default::default()
                },
            );
        }
        agent_hello(&mut st, "r1", &hello("b"));
        agent_hello(&mut st, "r1", &hello("c"));
        let s = |pids: Vec<u32>| NodeSample {
            t: 1.0,
            gpus: vec![NodeGpu {
                pids,
                power_w: Some(300.5),
                mem_used: Some(5),
                ..gpu(0, 50)
            }],
            ..Default::default()
        };
        apply_node_sample(&mut st, "r1", "b", s(vec![42]), Instant::now());
        apply_node_sample(&mut st, "r1", "c", s(vec![]), Instant::now());
        agent_gone(&mut st, "r1", "c", "its connection closed");
        let rows = gpu_rows(&st, "r1");
        let brief: Vec<(&str, u32, &[u32], &str)> = rows
            .iter()
            .map(|r| (r.node.as_str(), r.gpu, r.ranks.as_slice(), r.agent.as_str()))
            .collect();
        assert_eq!(
            brief,
            [
                ("a", 0, &[0u32][..], "local"),
                ("b", 0, &[1u32][..], "live"),
                ("c", 0, &[][..], "greyed"),
            ]
        );
        assert_eq!(rows[0].util_pct, Some(77));
        assert_eq!(
            (rows[1].power_w, rows[1].mem_used_bytes),
            (Some(300.5), Some(5))
        );
        assert_eq!(rows[1].source, "fake");
        assert_eq!(rows[2].lost.as_deref(), Some("its connection closed"));
        // Kept with the run and written as the document's `node_gpus`.
        st.runs[0].figures.node_gpus = rows;
        let v = nodes_json(&st.runs[0]);
        assert_eq!(v[1]["node"], "b");
        assert_eq!(v[1]["ranks"], serde_json::json!([1]));
        assert_eq!(v[2]["agent"], "greyed");
        assert_eq!(
            nodes_json(&RunView::new(
                "r2".into(),
                RunSpec::new(
                    crate::run::Experiment::Weak,
                    1,
                    crate::protocol::Backend::Gloo
                ),
                Instant::now(),
                0.0,
            )),
            serde_json::json!([])
        );
    }
}
