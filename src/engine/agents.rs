//! The engine's side of other nodes' GPUs (docs/multinode.md): starting `ddptop agent` on each
//! other node through the node template (or polling their DCGM exporters), folding what they
//! send into `State::nodes`, telling each agent which pids are the run's ranks there, and
//! making sure no agent channel outlives its run. An agent's failure never touches the run.

use super::Engine;
use crate::app::{Level, nodes};
use crate::store::EventRow;
use crate::supervisor::agent_conn::AgentEvent;
use crate::supervisor::launch::{self, CommandLine, NodePlan, shell_quote};
use crate::supervisor::nodes::NodeGpuSource;
use crate::supervisor::{Exit, SupEvent, procs};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Test hook: `DDPTOP_FAKE_GPUS=N` in ddptop's environment starts the agents with N made-up
/// GPUs (`ddptop agent --fake-gpus N`, shown as SIMULATED).
pub const FAKE_GPUS_ENV: &str = "DDPTOP_FAKE_GPUS";

/// An agent's channel process on this machine (ssh, srun, `ip netns exec`), or the task that
/// polls a node's DCGM exporter.
pub(super) struct AgentProc {
    pub pgid: Option<u32>,
    pub poller: Option<tokio::task::JoinHandle<()>>,
}

/// The command that starts node `node`'s agent through the node template: the agent reads the
/// token (and the TLS fingerprint) from stdin itself, so neither is on a command line or in its
/// environment.
pub fn agent_command(
    plan: &NodePlan,
    run_id: &str,
    node: usize,
    sample_ms: u64,
    exe: &std::path::Path,
    fake_gpus: Option<u32>,
) -> anyhow::Result<CommandLine> {
    let host = &plan.hosts[node];
    let scheme = if plan.tls_fingerprint.is_some() {
        "tls"
    } else {
        "tcp"
    };
    let mut argv = vec![
        exe.display().to_string(),
        "agent".into(),
        format!("--connect={scheme}://{}", plan.tcp),
        format!("--run-id={run_id}"),
        format!("--node={host}"),
        format!("--period-ms={}", sample_ms.clamp(50, 60_000)),
    ];
    if let Some(n) = fake_gpus {
        argv.push(format!("--fake-gpus={n}"));
    }
    let line: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
    let cmd = format!("sh -c {}", shell_quote(&format!("exec {}", line.join(" "))));
    let argv = launch::fill_template(&plan.remote, &[("host", host), ("cmd", &cmd)])
        .map_err(|e| anyhow::anyhow!("[nodes] remote: {e}"))?;
    Ok(CommandLine {
        argv,
        env: BTreeMap::new(),
        cwd: std::env::temp_dir(),
    })
}

/// What a node's wrapper reads from stdin: the token, then the fingerprint when TLS is on.
pub fn node_secret(token: &str, plan: &NodePlan) -> String {
    match &plan.tls_fingerprint {
        Some(fp) => format!("{token}\n{fp}"),
        None => token.to_string(),
    }
}

impl Engine {
    /// Start the GPU agents of a multi-node run's other nodes (or the DCGM pollers). A node
    /// whose agent cannot start is said and skipped: its GPUs are simply not shown.
    pub(super) fn start_node_gpus(
        &mut self,
        run: &str,
        plan: &NodePlan,
        run_dir: &std::path::Path,
        token: &str,
    ) -> Vec<AgentProc> {
        let Some(o) = self.opts.nodes.clone() else {
            return Vec::new();
        };
        match &o.gpu_source {
            NodeGpuSource::Off => return Vec::new(),
            NodeGpuSource::Dcgm(url) => {
                let period = Duration::from_millis(o.sample_ms.max(50));
                return plan
                    .hosts
                    .iter()
                    .zip(&plan.addrs)
                    .skip(1)
                    .map(|(host, addr)| AgentProc {
                        pgid: None,
                        poller: Some(tokio::spawn(crate::supervisor::dcgm::poll_node(
                            run.to_string(),
                            host.clone(),
                            crate::supervisor::dcgm::node_url(url, host, addr.as_deref()),
                            period,
                            self.tx.clone(),
                        ))),
                    })
                    .collect();
            }
            NodeGpuSource::Agent => {}
        }
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                self.state.push_message(
                    Level::Warn,
                    Some(run),
                    format!("other nodes' GPUs not shown: ddptop's own path is unknown ({e})"),
                );
                return Vec::new();
            }
        };
        self.server
            .registry
            .allow_agents(run, plan.hosts.get(1..).unwrap_or_default());
        let fake = std::env::var(FAKE_GPUS_ENV)
            .ok()
            .and_then(|v| v.parse().ok());
        let secret = node_secret(token, plan);
        let mut out = Vec::new();
        for node in 1..plan.hosts.len() {
            let started = agent_command(plan, run, node, o.sample_ms, &exe, fake)
                .and_then(|c| launch::spawn_with_secret(&c, run_dir, &secret));
            match started {
                Ok((mut child, _first)) => {
                    out.push(AgentProc {
                        pgid: child.id(),
                        poller: None,
                    });
                    let (tx, rid) = (self.tx.clone(), run.to_string());
                    let host = plan.hosts[node].clone();
                    tokio::spawn(async move {
                        let exit = Exit::of(child.wait().await);
                        let ev = AgentEvent::Exited { node: host, exit };
                        let _ = tx.send(SupEvent::Agent { run: rid, ev }).await;
                    });
                }
                Err(e) => self.state.push_message(
                    Level::Warn,
                    Some(run),
                    format!("node {}: GPU agent not started: {e}", plan.hosts[node]),
                ),
            }
        }
        out
    }

    /// Fold one agent event in; the run itself is never changed by it.
    pub(super) fn on_agent(&mut self, run: &str, ev: AgentEvent) {
        let now = Instant::now();
        match ev {
            AgentEvent::Hello { hello, peer } => {
                let from = peer.map(|p| format!(" from {p}")).unwrap_or_default();
                let sim = if hello.source == crate::protocol::agent::GpuSourceKind::Fake {
                    " (SIMULATED)"
                } else {
                    ""
                };
                let text = format!(
                    "node {}: GPU agent connected{from}, {} GPU(s) via {}{sim}",
                    hello.node,
                    hello.gpus,
                    hello.source.as_str()
                );
                self.node_event(run, &hello.node, "connected", Some(hello.gpus));
                self.state.push_message(Level::Info, Some(run), text);
                if let Some(n) = &hello.note {
                    self.state.push_message(
                        Level::Warn,
                        Some(run),
                        format!("node {}: {n}", hello.node),
                    );
                }
                nodes::agent_hello(&mut self.state, run, &hello);
                self.watch_node(run, &hello.node);
            }
            AgentEvent::Sample { node, sample } => {
                let first = self
                    .state
                    .nodes
                    .iter()
                    .any(|n| n.run == run && n.node == node && n.last_sample.is_none());
                let gpus = sample.gpus.len() as u32;
                nodes::apply_node_sample(&mut self.state, run, &node, *sample, now);
                if first {
                    self.node_event(run, &node, "sampled", Some(gpus));
                }
            }
            AgentEvent::Gone { node, why } => {
                let active = self.state.run(run).is_some_and(|r| !r.status.is_final());
                let why = why.unwrap_or_else(|| "its connection closed".into());
                if nodes::agent_gone(&mut self.state, run, &node, &why) && active {
                    self.node_event(run, &node, "lost", None);
                    self.state.push_message(
                        Level::Warn,
                        Some(run),
                        format!("node {node}: GPU agent lost ({why}); its GPU rows are greyed, the run goes on"),
                    );
                }
            }
            AgentEvent::Failed { node, why } => {
                self.state
                    .push_message(Level::Warn, Some(run), format!("node {node}: {why}"));
            }
            AgentEvent::Exited { node, exit } => {
                let active = self.state.run(run).is_some_and(|r| !r.status.is_final());
                if active && exit != Exit::Code(0) {
                    self.state.push_message(
                        Level::Warn,
                        Some(run),
                        format!("node {node}: GPU agent ended ({exit}); its output is in the run's output.log"),
                    );
                }
            }
        }
    }

    /// A multi-node run's GPU rows on every node as it ends, kept with the run (`node_gpus`)
    /// before its nodes leave the GPU pane: what `run --json` and `show --json` list.
    pub(super) fn keep_node_gpus(&mut self, run: &str) {
        let rows = nodes::gpu_rows(&self.state, run);
        if rows.is_empty() {
            return;
        }
        self.pending.push(EventRow {
            run_id: run.to_string(),
            unix: crate::util::unix_now(),
            rank: None,
            kind: "node_gpus".into(),
            body: serde_json::to_string(&rows).unwrap_or_default(),
        });
        if let Some(v) = self.state.run_mut(run) {
            v.figures.node_gpus = rows;
        }
    }

    /// Stored with the run: `node_agent` events (connected, sampled, lost), for reports and
    /// tests of a headless run.
    fn node_event(&mut self, run: &str, node: &str, state: &str, gpus: Option<u32>) {
        self.pending.push(EventRow {
            run_id: run.to_string(),
            unix: crate::util::unix_now(),
            rank: None,
            kind: "node_agent".into(),
            body: serde_json::json!({"node": node, "state": state, "gpus": gpus}).to_string(),
        });
    }

    /// Tell `node`'s agent which pids are this run's ranks there.
    pub(super) fn watch_node(&mut self, run: &str, node: &str) {
        let pids = nodes::node_pids(&self.state, run, node);
        self.server.registry.agent_command(
            run,
            node,
            crate::protocol::agent::ToAgent::Watch { pids },
        );
    }

    /// Grey silent nodes (called from `tick`); returns whether anything changed.
    pub(super) fn check_node_gpus(&mut self, now: Instant) -> bool {
        let period = Duration::from_millis(self.opts.nodes.as_ref().map_or(1000, |o| o.sample_ms));
        let (greyed, changed) =
            nodes::check_nodes(&mut self.state, now, nodes::stale_after(period));
        for node in greyed {
            let runs: Vec<String> = self
                .state
                .nodes
                .iter()
                .filter(|n| n.node == node)
                .map(|n| n.run.clone())
                .collect();
            for run in runs {
                self.node_event(&run, &node, "lost", None);
                self.state.push_message(
                    Level::Warn,
                    Some(&run),
                    format!("node {node}: no GPU sample from its agent; its GPU rows are greyed"),
                );
            }
        }
        changed
    }
}

/// After a run is closed its agents exit by themselves (their connection ends); a channel still
/// there after `grace` (an agent that never connected) is ended with its process group.
pub(super) fn reap_agents(agents: Vec<AgentProc>, grace: Duration) {
    for p in agents.iter().filter_map(|a| a.poller.as_ref()) {
        p.abort();
    }
    let pgids: Vec<u32> = agents.into_iter().filter_map(|a| a.pgid).collect();
    if pgids.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let until = Instant::now() + grace;
        while Instant::now() < until && pgids.iter().any(|p| procs::alive(*p)) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for pg in pgids.into_iter().filter(|p| procs::alive(*p)) {
            procs::signal_group_or_pid(pg, nix::sys::signal::Signal::SIGTERM);
            tokio::time::sleep(Duration::from_millis(500)).await;
            if procs::alive(pg) {
                procs::signal_group_or_pid(pg, nix::sys::signal::Signal::SIGKILL);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(tls: bool) -> NodePlan {
        NodePlan {
            hosts: vec!["a".into(), "b".into()],
            addrs: vec![None, None],
            nproc_per_node: 1,
            rdzv_endpoint: "a:1".into(),
            tcp: "10.0.0.1:5000".into(),
            remote: "ssh {host} -- {cmd}".into(),
            stop: None,
            forward_env: vec![],
            tls_fingerprint: tls.then(|| "ab".repeat(32)),
        }
    }

    #[test]
    fn the_agent_is_started_through_the_node_template_without_secrets_on_its_line() {
        let p = plan(true);
        let c = agent_command(&p, "r1", 1, 1000, "/opt/ddptop".as_ref(), Some(2)).unwrap();
        assert_eq!(c.argv[..3], ["ssh", "b", "--"]);
        let line = c.argv.join(" ");
        assert!(
            line.contains("exec /opt/ddptop agent --connect=tls://10.0.0.1:5000 "),
            "{line}"
        );
        assert!(
            line.contains("--node=b") && line.contains("--fake-gpus=2"),
            "{line}"
        );
        assert!(
            !line.contains(&"ab".repeat(32)),
            "the fingerprint goes on stdin: {line}"
        );
        assert_eq!(node_secret("tok", &p), format!("tok\n{}", "ab".repeat(32)));
        assert_eq!(node_secret("tok", &plan(false)), "tok");
        let c = agent_command(&plan(false), "r1", 1, 1000, "/x".as_ref(), None).unwrap();
        assert!(c.argv.join(" ").contains("tcp://10.0.0.1:5000"));
    }
}
