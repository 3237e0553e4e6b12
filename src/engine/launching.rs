//! Starting runs: checking that a spec fits, locking its GPUs, planning the nodes, writing the
//! command down and spawning the process trees (and opening the external runs the scale
//! benchmark drives). Kept apart because this is the one path that creates a `Launch`: the rest
//! of the engine only reads or retires one, so what a launch owns is decided here alone.

use super::{Engine, Launch, RemoteNode, agents};
use crate::app::Level;
use crate::app::reduce;
use crate::run::{RunSpec, RunStatus, RunView};
use crate::store::NewRun;
use crate::supervisor::gpu_guard;
use crate::supervisor::launch::{self, LaunchContext, NodePlan};
use crate::supervisor::nodes::NodesOptions;
use crate::supervisor::socket::new_token;
use crate::supervisor::tcp::TcpServer;
use crate::supervisor::{Exit, SupEvent};
use std::time::Instant;

impl Engine {
    /// Start a run. Errors (no python, k too large) are returned and also shown as a message.
    pub fn launch(&mut self, spec: RunSpec, sweep: Option<String>) -> anyhow::Result<String> {
        let r = self.try_launch(spec, sweep);
        if let Err(e) = &r {
            self.state
                .push_message(Level::Error, None, format!("not launched: {e}"));
        }
        r
    }

    fn try_launch(&mut self, spec: RunSpec, sweep: Option<String>) -> anyhow::Result<String> {
        crate::run::fits(spec.k, self.state.max_k).map_err(|e| anyhow::anyhow!(e))?;
        let id = new_run_id();
        let (gpus_lease, gpus_shared) = self.guard_gpus(&spec, &id)?;
        if let Some(note) = gpus_lease.as_ref().and_then(|l| l.unlocked.clone()) {
            self.state.push_message(Level::Warn, Some(&id), note);
        }
        let run_dir = crate::paths::runs_dir(&self.opts.data_dir).join(&id);
        std::fs::create_dir_all(&run_dir)?;
        let token = new_token();
        let plan = self.node_plan(spec.k)?;
        let ctx = LaunchContext {
            run_id: &id,
            token: &token,
            socket: &self.server.path,
            run_dir: &run_dir,
            python: self.opts.python.as_ref(),
            sim_speed: self.opts.sim_speed,
            sim_noise: self.opts.sim_noise,
            nodes: plan.as_ref(),
            nccl_profiler: self.opts.nccl_profiler.as_deref(),
        };
        let cmd = launch::command_for(&spec, &ctx)?;
        let node_cmds = match &plan {
            Some(p) => (1..p.hosts.len())
                .map(|i| launch::node_command(&cmd, &id, p, i))
                .collect::<anyhow::Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        let started_unix = crate::util::unix_now();
        self.store.insert_run(&NewRun {
            id: &id,
            spec: &spec,
            sweep: sweep.as_deref(),
            command: &cmd,
            started_unix,
            run_dir: &run_dir,
        })?;
        let mut recorded = cmd.shell() + "\n";
        for (i, c) in node_cmds.iter().enumerate() {
            recorded.push_str(&format!("# node {}:\n{}\n", i + 1, c.shell()));
        }
        std::fs::write(run_dir.join("command.txt"), recorded)?;
        self.server.registry.open_run(&id, &token, spec.processes());
        let mut child = match launch::spawn(&cmd, &run_dir) {
            Ok(c) => c,
            Err(e) => {
                self.server.registry.close_run(&id);
                let mut run = RunView::new(id.clone(), spec, Instant::now(), started_unix);
                reduce::finish(
                    &mut run,
                    RunStatus::Failed,
                    Some(e.to_string()),
                    crate::util::unix_now(),
                );
                let _ = self.store.finalize(&run, None);
                self.state.runs.insert(0, run);
                return Err(e);
            }
        };
        let pgid = child.id();
        let tx = self.tx.clone();
        let rid = id.clone();
        tokio::spawn(async move {
            let exit = Exit::of(child.wait().await);
            let _ = tx.send(SupEvent::Exited { run: rid, exit }).await;
        });
        let secret = plan
            .as_ref()
            .map(|p| agents::node_secret(&token, p))
            .unwrap_or_default();
        let remote = self.spawn_remote_nodes(&id, &node_cmds, &run_dir, &secret);
        let node_agents = match &plan {
            Some(p) => self.start_node_gpus(&id, p, &run_dir, &token),
            None => Vec::new(),
        };
        let mut run = RunView::new(id.clone(), spec, Instant::now(), started_unix);
        run.launch.sweep = sweep;
        run.launch.gpus_shared = gpus_shared;
        self.describe_launch(&mut run, &cmd, plan.is_some());
        let label = format!(
            "launched {} {} k={} on {}{}",
            id,
            run.spec.experiment().as_str(),
            run.spec.k,
            run.spec.backend.as_str(),
            if run.is_simulated() {
                " (SIMULATED)"
            } else {
                ""
            }
        );
        self.state.runs.insert(0, run);
        self.state.push_message(Level::Info, Some(&id), label);
        self.launches.insert(
            id.clone(),
            Launch {
                _gpus: gpus_lease,
                plan,
                remote,
                agents: node_agents,
                ..Launch::new(pgid, run_dir)
            },
        );
        if let Some(i) = self
            .launches
            .get(&id)
            .and_then(|l| l.remote.iter().position(|n| n.exit.is_some()))
        {
            self.on_node_exit(&id, i + 1, Exit::Unknown);
        }
        Ok(id)
    }

    /// What a new run carries from its launch: the launch caveats (said as it starts: its
    /// figures carry them) and its command line and environment for the details view.
    fn describe_launch(&mut self, run: &mut RunView, cmd: &launch::CommandLine, multinode: bool) {
        // Said as the run starts and kept with it: its figures carry them. Ranks on other
        // nodes bring their own cores.
        let cores = if multinode {
            usize::MAX
        } else {
            crate::run::checks::cpu_cores()
        };
        for c in crate::run::checks::launch_caveats(&run.spec, cores) {
            self.state.push_message(
                Level::Warn,
                Some(&run.id),
                format!("k={}: {}", run.spec.k, c.text),
            );
            run.add_caveat(c);
        }
        // For the details view (the token stays out of sight, as in command.txt).
        run.launch.command = Some(
            cmd.argv
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        );
        run.launch.env = cmd
            .env
            .iter()
            .filter(|(k, _)| !k.starts_with("DDPTOP_TOKEN"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
    }

    /// Nodes 1.. of a multi-node launch, each spawned with the node secret; one that fails to
    /// start is recorded as exited (node 0 is already up) and said.
    fn spawn_remote_nodes(
        &mut self,
        id: &str,
        node_cmds: &[launch::CommandLine],
        run_dir: &std::path::Path,
        secret: &str,
    ) -> Vec<RemoteNode> {
        let mut remote = Vec::new();
        for (i, c) in node_cmds.iter().enumerate() {
            let node = i + 1;
            match launch::spawn_with_secret(c, run_dir, secret) {
                Ok((mut child, first_line)) => {
                    let tx = self.tx.clone();
                    let rid = id.to_string();
                    remote.push(RemoteNode {
                        pgid: child.id(),
                        exit: None,
                        first_line,
                    });
                    tokio::spawn(async move {
                        let exit = Exit::of(child.wait().await);
                        let _ = tx
                            .send(SupEvent::NodeExited {
                                run: rid,
                                node,
                                exit,
                            })
                            .await;
                    });
                }
                Err(e) => {
                    // Node 0 is already up: record the failure and stop what was started.
                    remote.push(RemoteNode {
                        pgid: None,
                        exit: Some(Exit::Unknown),
                        first_line: Default::default(),
                    });
                    self.state
                        .push_message(Level::Error, Some(id), format!("node {node}: {e}"));
                }
            }
        }
        remote
    }

    /// Open a run whose ranks connect on their own, without launching anything (the scale
    /// benchmark's load generator, `benches/scale.rs`): stored, registered with the socket under
    /// a fresh token and shown like any run; its messages take the same path as a launched run's.
    /// Returns the run id and its token. No watchdog or process supervision applies to it.
    #[doc(hidden)]
    pub fn open_external(&mut self, spec: RunSpec) -> anyhow::Result<(String, String)> {
        let id = new_run_id();
        let run_dir = crate::paths::runs_dir(&self.opts.data_dir).join(&id);
        std::fs::create_dir_all(&run_dir)?;
        let token = new_token();
        let started_unix = crate::util::unix_now();
        let command = launch::CommandLine {
            argv: vec!["(external)".into()],
            env: Default::default(),
            cwd: run_dir.clone(),
        };
        self.store.insert_run(&NewRun {
            id: &id,
            spec: &spec,
            sweep: None,
            command: &command,
            started_unix,
            run_dir: &run_dir,
        })?;
        self.server.registry.open_run(&id, &token, spec.processes());
        let run = RunView::new(id.clone(), spec, Instant::now(), started_unix);
        self.state.runs.insert(0, run);
        Ok((id, token))
    }

    /// End a run opened by `open_external`: its connections close and it is stored as final.
    #[doc(hidden)]
    pub fn close_external(&mut self, run: &str, status: RunStatus) {
        self.server.registry.close_run(run);
        self.latest.take_run(run, &mut self.pending);
        self.flush_events();
        let unix = crate::util::unix_now();
        if let Some(view) = self.state.run_mut(run) {
            reduce::finish(view, status, None, unix);
            let _ = self.store.finalize(view, None);
        }
    }

    /// Before an NCCL launch: lock the run's GPUs and ask NVML who else computes on them. Another
    /// holder refuses the launch, naming it, unless `--shared-gpus` (then the run carries the mark).
    fn guard_gpus(
        &self,
        spec: &RunSpec,
        id: &str,
    ) -> anyhow::Result<(Option<gpu_guard::GpuLease>, Option<String>)> {
        if spec.backend != crate::protocol::Backend::Nccl {
            return Ok((None, None));
        }
        let visible = spec
            .nccl
            .get("CUDA_VISIBLE_DEVICES")
            .map(str::to_string)
            .or_else(|| std::env::var("CUDA_VISIBLE_DEVICES").ok());
        // This machine's share of a multi-node run: its torchrun agent's processes only.
        let local_k = match self.launch_nodes() {
            Some(n) => n
                .nproc_per_node
                .unwrap_or(spec.k / n.hosts.len().max(1) as u32)
                .max(1),
            None => spec.k,
        };
        let gpus = gpu_guard::gpus_for(local_k, visible.as_deref());
        let mut holders = Vec::new();
        let lease = match gpu_guard::lock(&gpu_guard::lock_dir(), &gpus, &gpu_guard::who_am_i(id)) {
            Ok(l) => Some(l),
            Err(h) => {
                holders.extend(h);
                None
            }
        };
        // No NVML (no driver): the locks are the only guard, and the launch will say why it fails.
        // A process that just exited (the previous run of a sweep) can stay in NVML's list for a
        // moment: look again for up to 2 s before calling it another user's.
        let mut seen = gpu_guard::nvml_holders(&gpus).unwrap_or_default();
        if holders.is_empty() {
            for _ in 0..8 {
                if seen.is_empty() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(250));
                seen = gpu_guard::nvml_holders(&gpus).unwrap_or_default();
            }
        }
        holders.extend(seen);
        if holders.is_empty() {
            return Ok((lease, None));
        }
        if !self.opts.shared_gpus {
            anyhow::bail!("{}", gpu_guard::refusal(&holders));
        }
        Ok((lease, Some(gpu_guard::shared_mark(&holders))))
    }

    /// The nodes the next launch goes across, if any.
    fn launch_nodes(&self) -> Option<&NodesOptions> {
        self.opts.nodes.as_ref().filter(|_| self.all_nodes)
    }

    /// Start the TCP listener (once) and plan a multi-node launch of world size `k`.
    fn node_plan(&mut self, k: u32) -> anyhow::Result<Option<NodePlan>> {
        let Some(o) = self.launch_nodes().cloned() else {
            return Ok(None);
        };
        if self.tcp.is_none() {
            // A fresh certificate per listener: it lives as long as the multi-node runs do.
            let cert = if o.tls {
                Some(crate::supervisor::tls::generate()?)
            } else {
                None
            };
            let t = TcpServer::start_with(
                o.listen_addr()?,
                self.server.registry.clone(),
                self.tx.clone(),
                cert.as_ref().map(|c| c.server.clone()),
            )?;
            self.tls_fingerprint = cert.map(|c| c.fingerprint);
            // Beside the Unix socket, for people and tests: where remote ranks connect.
            let _ = std::fs::write(
                self.server
                    .dir
                    .join(crate::supervisor::socket::TCP_ADDR_FILE),
                t.addr.to_string(),
            );
            self.state.push_message(
                Level::Info,
                None,
                format!(
                    "listening for ranks on other nodes on {} {}",
                    if o.tls { "tls" } else { "tcp" },
                    t.addr
                ),
            );
            self.tcp = Some(t);
        }
        let addr = self.tcp.as_ref().map(|t| t.addr).expect("started above");
        let mut plan = o.plan(k, addr)?;
        plan.tls_fingerprint = self.tls_fingerprint.clone();
        Ok(Some(plan))
    }
}

fn new_run_id() -> String {
    use rand::Rng;
    let secs = crate::util::unix_now() as i64;
    let (y, mo, d, h, mi, s) = crate::util::utc_parts(secs);
    format!(
        "r{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}-{:04x}",
        rand::rng().random::<u16>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tests::engine;
    use crate::protocol::Backend;
    use crate::run::{Experiment, ModelName};
    use crate::store::Store;
    use std::collections::HashSet;

    /// The launch path refuses, with the reason on screen, what cannot run: a k beyond the
    /// machine and a model the simulator does not have. Nothing is stored or left running.
    #[tokio::test]
    async fn launch_refuses_with_a_message_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = engine(dir.path());
        e.state_mut().max_k = 2;
        let too_big = RunSpec::new(Experiment::Weak, 4, Backend::Sim);
        assert!(e.launch(too_big, None).is_err());
        let mut tiny = RunSpec::new(Experiment::Weak, 1, Backend::Sim);
        tiny.model = ModelName::Tiny;
        let err = e.launch(tiny, None).unwrap_err().to_string();
        assert!(err.contains("models ResNet-18 only"), "{err}");
        assert!(e.state().runs.is_empty());
        assert!(!e.has_active_runs());
        let said: Vec<&str> = e.state().messages.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said.iter().all(|m| m.starts_with("not launched: ")),
            "{said:?}"
        );
        let stored = Store::open(&dir.path().join("runs.db"))
            .unwrap()
            .load_runs(10)
            .unwrap();
        assert!(stored.is_empty());
    }

    /// `rYYYYMMDD-HHMMSS-xxxx` in UTC: ids sort by start time, and the hex tail keeps two
    /// launches in the same second apart.
    #[test]
    fn run_ids_are_utc_stamps_that_sort_by_time() {
        let stamp = |secs: f64| {
            let (y, mo, d, h, mi, s) = crate::util::utc_parts(secs as i64);
            format!("r{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
        };
        let before = stamp(crate::util::unix_now());
        let ids: Vec<String> = (0..64).map(|_| new_run_id()).collect();
        let after = stamp(crate::util::unix_now());
        for id in &ids {
            assert_eq!(id.len(), 21, "{id}");
            let (time, tail) = id.split_at(16);
            assert!(
                before.as_str() <= time && time <= after.as_str(),
                "{id} not between {before} and {after}"
            );
            assert_eq!(&tail[..1], "-", "{id}");
            assert!(
                tail[1..]
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
                "{id}"
            );
        }
        let distinct: HashSet<&String> = ids.iter().collect();
        assert!(
            distinct.len() > 1,
            "64 ids in one second all alike: {ids:?}"
        );
    }
}
