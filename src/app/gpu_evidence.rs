//! What the GPU rows say about a straggler's GPU: a lower SM clock than its peers', a power cap
//! reached, another job's process on it. Local ranks are found in this machine's rows, remote
//! ranks (agent/TCP) in their node's rows as its agent reports them (issue 46), so a slow rank
//! on another node gets the same evidence as a local one.

use super::node_gpus::NodeGpus;
use crate::gpu::{GpuSample, GpuView};
use crate::run::view::{RankView, RunView};

/// A clock this far below its peers' median is a slower GPU (boost clocks move a few per cent
/// with temperature and load on healthy GPUs).
const CLOCK_LOWER: f64 = 0.95;
/// Power within this share of the enforced limit: the GPU is at its cap (and throttles).
const AT_CAP: f64 = 0.95;

/// Every GPU row a run's ranks can be on: this machine's, and each other node's from its agent.
#[derive(Debug, Clone, Copy, Default)]
pub struct RankGpus<'a> {
    pub local: &'a [GpuView],
    pub nodes: &'a [NodeGpus],
}

impl<'a> RankGpus<'a> {
    /// This machine's rows only (no agents).
    pub fn local(local: &'a [GpuView]) -> Self {
        RankGpus { local, nodes: &[] }
    }

    /// The rows of the node `r` runs on: this machine's for a local rank; for a remote one, its
    /// node's agent rows (none while that agent is lost: its rows are stale).
    fn rows_of(&self, r: &RankView) -> &'a [GpuView] {
        if !r.remote {
            return self.local;
        }
        let Some(node) = r.node.as_deref() else {
            return &[];
        };
        self.nodes
            .iter()
            .find(|n| n.node == node && n.lost.is_none())
            .map_or(&[], |n| n.gpus.as_slice())
    }

    /// The GPU row `r`'s process is on, with the node's name for a remote rank.
    fn of<'r>(&self, r: &'r RankView) -> Option<(Option<&'r str>, &'a GpuSample)> {
        let pid = r.pid?;
        let g = self
            .rows_of(r)
            .iter()
            .map(|g| &g.latest)
            .find(|g| g.pids.contains(&pid))?;
        Some((r.remote.then_some(r.node.as_deref()).flatten(), g))
    }
}

/// Ranks on the same node as `r` (both local, or both remote on one node): their pids are
/// comparable with the pids of `r`'s GPU row.
fn same_node(a: &RankView, b: &RankView) -> bool {
    a.remote == b.remote && (!a.remote || a.node == b.node)
}

/// What the GPU rows say about the straggler's GPU, against the GPUs of the run's other ranks
/// (on any node): a lower SM clock, a power cap reached, other processes on it (a job sharing
/// the GPU), or, when none of these, that it looks like the others (so the cause is not the
/// GPU's). `None` when the rank's process is on no GPU sampled here or by its node's agent (CPU
/// runs, a node without an agent).
pub fn gpu_evidence(run: &RunView, rank: u32, gpus: &RankGpus) -> Option<String> {
    let r = run.ranks.get(&rank)?;
    let (node, own) = gpus.of(r)?;
    let ours: Vec<u32> = run
        .ranks
        .values()
        .filter(|p| same_node(p, r))
        .filter_map(|p| p.pid)
        .collect();
    let peers: Vec<&GpuSample> = run
        .ranks
        .values()
        .filter(|p| p.rank != rank)
        .filter_map(|p| gpus.of(p))
        .filter(|(n, g)| (*n, g.index) != (node, own.index))
        .map(|(_, g)| g)
        .collect();
    let peer_median = |f: &dyn Fn(&GpuSample) -> Option<f64>| {
        let mut xs: Vec<f64> = peers.iter().filter_map(|g| f(g)).collect();
        crate::util::median_in_place(&mut xs)
    };
    let gpu = match node {
        Some(n) => format!("its GPU {} on {n}", own.index),
        None => format!("its GPU {}", own.index),
    };
    let mut found = Vec::new();
    let others = own.pids.iter().filter(|p| !ours.contains(p)).count();
    if others > 0 {
        let s = if others == 1 { "" } else { "es" };
        found.push(format!("{gpu} runs {others} other process{s}"));
    }
    let clock = own.sm_clock_mhz.map(f64::from);
    let peer_clock = peer_median(&|g| g.sm_clock_mhz.map(f64::from));
    if let (Some(c), Some(m)) = (clock, peer_clock)
        && c < CLOCK_LOWER * m
    {
        found.push(format!(
            "{gpu} is clocked lower: {} MHz vs {} MHz",
            thousands(c),
            thousands(m)
        ));
    }
    if let (Some(p), Some(cap)) = (own.power_w, own.power_limit_w)
        && p >= AT_CAP * cap
    {
        found.push(format!("at its power cap ({p:.0} W of {cap:.0} W)"));
    }
    if !found.is_empty() {
        return Some(found.join("; "));
    }
    let mut facts = Vec::new();
    if let Some(c) = clock {
        facts.push(format!("SM {} MHz", thousands(c)));
    }
    if let (Some(p), Some(cap)) = (own.power_w, own.power_limit_w) {
        facts.push(format!("{p:.0} W of {cap:.0} W"));
    }
    if let Some(t) = own.temp_c {
        facts.push(format!("{t} °C"));
    }
    let like = if peers.is_empty() {
        "no other GPU of the run to compare"
    } else {
        "like the others'"
    };
    Some(format!("{gpu} {like} ({})", facts.join(", ")))
}

fn thousands(x: f64) -> String {
    let n = x.round() as u64;
    if n >= 1000 {
        format!("{},{:03}", n / 1000, n % 1000)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// GPU rows 0..n (pid 100 + i), each at 1,980 MHz, 400 W of 700 W, 60 °C.
    pub(crate) fn gpus(n: u32) -> Vec<GpuView> {
        (0..n)
            .map(|i| GpuView {
                latest: GpuSample {
                    index: i,
                    sm_clock_mhz: Some(1_980),
                    power_w: Some(400.0),
                    power_limit_w: Some(700.0),
                    temp_c: Some(60),
                    pids: vec![100 + i],
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect()
    }

    /// Ranks 0..n, pid 100 + rank; `remote` names the node of each remote rank.
    fn run(n: u32, remote: &[(u32, &str)]) -> RunView {
        let mut ranks = BTreeMap::new();
        for r in 0..n {
            let node = remote
                .iter()
                .find(|(x, _)| *x == r)
                .map(|(_, n)| n.to_string());
            ranks.insert(
                r,
                RankView {
                    rank: r,
                    pid: Some(100 + r),
                    remote: node.is_some(),
                    node,
                    connected: true,
                    ..Default::default()
                },
            );
        }
        let spec = crate::run::RunSpec::new(
            crate::run::Experiment::Weak,
            n,
            crate::protocol::Backend::Nccl,
        );
        let mut run = RunView::new("r1".into(), spec, std::time::Instant::now(), 0.0);
        run.ranks = ranks;
        run
    }

    fn node(name: &str, gpus: Vec<GpuView>) -> NodeGpus {
        NodeGpus {
            node: name.into(),
            run: "r1".into(),
            source: crate::protocol::agent::GpuSourceKind::Nvml,
            driver: None,
            note: None,
            gpus,
            procs: BTreeMap::new(),
            last_sample: None,
            lost: None,
            error: None,
        }
    }

    #[test]
    fn a_local_gpu_is_named_for_a_lower_clock_a_power_cap_and_a_sharing_process() {
        let run = run(4, &[]);
        let mut rows = gpus(4);
        let ev = |rows: &[GpuView], rank| gpu_evidence(&run, rank, &RankGpus::local(rows));
        assert_eq!(
            ev(&rows, 1).as_deref(),
            Some("its GPU 1 like the others' (SM 1,980 MHz, 400 W of 700 W, 60 °C)")
        );
        rows[1].latest.sm_clock_mhz = Some(1_410);
        rows[1].latest.power_w = Some(699.0);
        assert_eq!(
            ev(&rows, 1).as_deref(),
            Some(
                "its GPU 1 is clocked lower: 1,410 MHz vs 1,980 MHz; at its power cap (699 W of 700 W)"
            )
        );
        // A second job on rank 3's GPU (as `--shared-gpus` allows): named, with its count.
        rows[3].latest.pids.push(4242);
        assert_eq!(
            ev(&rows, 3).as_deref(),
            Some("its GPU 3 runs 1 other process")
        );
        // A rank whose process is on no sampled GPU (a CPU run): nothing to say.
        assert_eq!(ev(&[], 1), None);
    }

    #[test]
    fn a_remote_rank_is_judged_from_its_nodes_agent_rows_against_every_other_rank() {
        // Ranks 0,1 here on GPUs 0,1; ranks 2,3 on node-b, whose agent reports its GPUs 0,1
        // with the remote pids 102,103 (pids of another machine: they may repeat local ones).
        let run = run(4, &[(2, "node-b"), (3, "node-b")]);
        let local = gpus(2);
        let mut b = gpus(4).split_off(2);
        b[0].latest.index = 0;
        b[1].latest.index = 1;
        b[1].latest.sm_clock_mhz = Some(1_500);
        let nodes = vec![node("node-b", b)];
        let all = RankGpus {
            local: &local,
            nodes: &nodes,
        };
        assert_eq!(
            gpu_evidence(&run, 3, &all).as_deref(),
            Some("its GPU 1 on node-b is clocked lower: 1,500 MHz vs 1,980 MHz")
        );
        // Rank 2's GPU 0 on node-b is not rank 0's GPU 0 here: it compares with three peers.
        assert_eq!(
            gpu_evidence(&run, 2, &all).as_deref(),
            Some("its GPU 0 on node-b like the others' (SM 1,980 MHz, 400 W of 700 W, 60 °C)")
        );
        // The local rank's clock is compared with the remote GPUs' too (median of 1,980,
        // 1,980, 1,500 MHz): like the others.
        assert!(
            gpu_evidence(&run, 0, &all)
                .unwrap()
                .contains("like the others'")
        );
        // Without that node's agent, or once it is lost (stale rows), nothing is said.
        assert_eq!(gpu_evidence(&run, 3, &RankGpus::local(&local)), None);
        let mut lost = nodes.clone();
        lost[0].lost = Some("agent silent for 10 s".into());
        let stale = RankGpus {
            local: &local,
            nodes: &lost,
        };
        assert_eq!(gpu_evidence(&run, 3, &stale), None);
    }
}
