//! The engine: one loop that owns `State`. Supervisor events, launches, stops and the watchdog
//! all go through here, so the TUI, the headless runner and the tests run the same code.

use crate::app::reduce::{self, apply_worker};
use crate::app::{Level, State, summary};
use crate::protocol::{Command, ControlMsg, WorkerMsg};
use crate::run::{RunSpec, RunStatus, RunView};
use crate::store::{EventRow, NewRun, Store};
use crate::supervisor::gpu_guard;
use crate::supervisor::launch::{self, LaunchContext, NodePlan, PythonEnv};
use crate::supervisor::nodes::{self, NodesOptions, RemoteStop};
use crate::supervisor::output::{self, OutputTail};
use crate::supervisor::procs::Escalation;
use crate::supervisor::socket::{SocketServer, new_token};
use crate::supervisor::tcp::TcpServer;
use crate::supervisor::watchdog::{self, Verdict, WatchdogConfig};
use crate::supervisor::{Exit, SupEvent, nccl_log, procs};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

mod agents;

/// How long a hung run's workers get to write their flight-recorder dumps.
const EVIDENCE_WAIT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub data_dir: PathBuf,
    pub python: Option<PythonEnv>,
    pub watchdog: WatchdogConfig,
    /// Wall-clock speed-up of the simulated worker (figures are unchanged).
    pub sim_speed: f64,
    pub sim_noise: Option<f64>,
    /// SIGINT → SIGTERM and SIGTERM → SIGKILL grace periods.
    pub stop_grace: [Duration; 2],
    /// How many stored runs to load as history.
    pub history: usize,
    /// Launch on GPUs other processes use (`--shared-gpus`); the runs are marked "GPUs shared".
    pub shared_gpus: bool,
    /// Run across these nodes (`--nodes`): torchrun's c10d rendezvous, one agent per node.
    pub nodes: Option<NodesOptions>,
    /// Stop an attached job (the user's own) that the watchdog calls hung. Off: the hang is
    /// reported with its evidence and the job keeps running; ddptop's own runs always stop.
    pub stop_attached_on_hang: bool,
    /// `[stragglers]`: when a rank is named as holding the others back.
    pub stragglers: crate::app::straggler::StragglerConfig,
    /// ddptop's NCCL profiler plugin for NCCL launches (`None`: off).
    pub nccl_profiler: Option<PathBuf>,
}

impl EngineOptions {
    pub fn new(data_dir: PathBuf) -> Self {
        EngineOptions {
            data_dir,
            python: None,
            watchdog: WatchdogConfig::default(),
            sim_speed: 1.0,
            sim_noise: None,
            stop_grace: [Duration::from_secs(3), Duration::from_secs(5)],
            history: 200,
            shared_gpus: false,
            stragglers: Default::default(),
            nodes: None,
            stop_attached_on_hang: false,
            nccl_profiler: None,
        }
    }
}

/// Bookkeeping for a run this engine launched.
struct Launch {
    pgid: Option<u32>,
    run_dir: PathBuf,
    output: OutputTail,
    exit: Option<Exit>,
    /// The status the run gets once its processes are gone, and why.
    ending: Option<(RunStatus, Option<String>)>,
    stopping: bool,
    hung_at: Option<Instant>,
    /// When the NCCL logs were last read for the transport (while the run is going).
    transport_read: Option<Instant>,
    /// Ranks that sent their `result`.
    results: HashSet<u32>,
    /// When the last rank said `bye`: the launcher's teardown deadline runs from here.
    all_bye_at: Option<Instant>,
    /// This run's GPU locks, released when the launch is forgotten (the run is final).
    _gpus: Option<gpu_guard::GpuLease>,
    /// A multi-node run: the plan and the agents started on the other nodes (index = node - 1).
    plan: Option<NodePlan>,
    remote: Vec<RemoteNode>,
    /// The GPU agents (or DCGM pollers) of the other nodes (`engine::agents`).
    agents: Vec<agents::AgentProc>,
    /// Local rank pids from `hello` that are processes of this run's tree: only these are
    /// signalled at stop (a rank may claim any pid).
    known_pids: HashMap<u32, procs::Known>,
}

/// Another node's torchrun agent, started through the node template.
struct RemoteNode {
    /// The local channel process (ssh, `ip netns exec`, srun) leads its own process group.
    pgid: Option<u32>,
    exit: Option<Exit>,
    /// The wrapper's first line on the channel's own stdout (`ddptop-node N pid=P slurm=S`):
    /// the agent's pid on its node and its Slurm step. Never read from output.log, where a
    /// rank's stdout could forge it.
    first_line: std::sync::Arc<std::sync::OnceLock<String>>,
}

pub struct Engine {
    state: State,
    opts: EngineOptions,
    store: Store,
    server: SocketServer,
    tx: mpsc::Sender<SupEvent>,
    rx: mpsc::Receiver<SupEvent>,
    launches: HashMap<String, Launch>,
    pending: Vec<EventRow>,
    last_flush: Instant,
    /// The last watchdog/teardown deadline the engine woke for.
    last_deadline: Option<Instant>,
    /// The TCP listener for ranks on other nodes, started at the first multi-node launch.
    tcp: Option<TcpServer>,
    /// Its certificate's fingerprint when the channel is TLS (`--tls`).
    tls_fingerprint: Option<String>,
    /// Launches go across `opts.nodes` (when it names nodes) or on this machine only: the
    /// dashboard's launch target (`set_all_nodes`); always on for `ddptop run --nodes`.
    all_nodes: bool,
}

impl Engine {
    pub fn start(opts: EngineOptions, state: State) -> anyhow::Result<Engine> {
        procs::raise_nofile_limit();
        std::fs::create_dir_all(&opts.data_dir)?;
        let store = Store::open(&opts.data_dir.join("runs.db"))?;
        let (tx, rx) = mpsc::channel(8192);
        let server = SocketServer::start(&crate::paths::runtime_parent(), tx.clone())?;
        let mut state = state;
        state.data_dir = Some(opts.data_dir.clone());
        let mut engine = Engine {
            state,
            store,
            server,
            tx,
            rx,
            launches: HashMap::new(),
            pending: Vec::new(),
            last_flush: Instant::now(),
            last_deadline: None,
            tcp: None,
            tls_fingerprint: None,
            all_nodes: true,
            opts,
        };
        if engine.opts.history > 0 {
            match engine.store.load_runs(engine.opts.history) {
                Ok(runs) => engine.state.runs = runs,
                Err(e) => {
                    engine
                        .state
                        .push_message(Level::Warn, None, format!("history not loaded: {e}"))
                }
            }
        }
        Ok(engine)
    }

    pub fn state(&self) -> &State {
        &self.state
    }
    pub fn state_mut(&mut self) -> &mut State {
        &mut self.state
    }
    /// The python launches use (`None`: none with torch was found).
    pub fn python(&self) -> Option<&std::path::Path> {
        self.opts.python.as_ref().map(|p| p.python.as_path())
    }
    pub fn socket_path(&self) -> &std::path::Path {
        &self.server.path
    }
    /// The TCP listener's address, once a multi-node launch started it.
    pub fn tcp_addr(&self) -> Option<std::net::SocketAddr> {
        self.tcp.as_ref().map(|t| t.addr)
    }

    /// The dashboard's launch target: the next launches go across `EngineOptions::nodes` (the
    /// same path as `ddptop run --nodes`) or stay on this machine. Runs already going keep
    /// their own plan.
    pub fn set_all_nodes(&mut self, on: bool) {
        self.all_nodes = on;
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

    pub fn store_path(&self) -> &std::path::Path {
        &self.store.path
    }
    pub fn has_active_runs(&self) -> bool {
        self.state.active_runs().next().is_some()
    }

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
        let run_dir = self.opts.data_dir.join("runs").join(&id);
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
        let mut remote = Vec::new();
        let secret = plan
            .as_ref()
            .map(|p| agents::node_secret(&token, p))
            .unwrap_or_default();
        for (i, c) in node_cmds.iter().enumerate() {
            let node = i + 1;
            match launch::spawn_with_secret(c, &run_dir, &secret) {
                Ok((mut child, first_line)) => {
                    let tx = self.tx.clone();
                    let rid = id.clone();
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
                        .push_message(Level::Error, Some(&id), format!("node {node}: {e}"));
                }
            }
        }
        let node_agents = match &plan {
            Some(p) => self.start_node_gpus(&id, p, &run_dir, &token),
            None => Vec::new(),
        };
        let mut run = RunView::new(id.clone(), spec, Instant::now(), started_unix);
        run.sweep = sweep;
        run.gpus_shared = gpus_shared;
        // Said as the run starts and kept with it: its figures carry them. Ranks on other
        // nodes bring their own cores.
        let cores = if plan.is_some() {
            usize::MAX
        } else {
            crate::run::checks::cpu_cores()
        };
        for c in crate::run::checks::launch_caveats(&run.spec, cores) {
            self.state.push_message(
                Level::Warn,
                Some(&id),
                format!("k={}: {}", run.spec.k, c.text),
            );
            run.add_caveat(c);
        }
        // For the details view (the token stays out of sight, as in command.txt).
        run.command = Some(
            cmd.argv
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        );
        run.env = cmd
            .env
            .iter()
            .filter(|(k, _)| !k.starts_with("DDPTOP_TOKEN"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
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
                pgid,
                output: OutputTail::new(&run_dir),
                run_dir,
                exit: None,
                ending: None,
                stopping: false,
                hung_at: None,
                transport_read: None,
                results: HashSet::new(),
                all_bye_at: None,
                _gpus: gpus_lease,
                plan,
                remote,
                agents: node_agents,
                known_pids: HashMap::new(),
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

    /// Open a run whose ranks connect on their own, without launching anything (the scale
    /// benchmark's load generator, `benches/scale.rs`): stored, registered with the socket under
    /// a fresh token and shown like any run; its messages take the same path as a launched run's.
    /// Returns the run id and its token. No watchdog or process supervision applies to it.
    #[doc(hidden)]
    pub fn open_external(&mut self, spec: RunSpec) -> anyhow::Result<(String, String)> {
        let id = new_run_id();
        let run_dir = self.opts.data_dir.join("runs").join(&id);
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

    /// Ask a run to stop; it ends as `stopped` once no process of it is left.
    pub fn stop(&mut self, run_id: &str, why: &str) {
        if self.state.run(run_id).is_none_or(|r| r.status.is_final()) {
            return;
        }
        self.begin_stop(run_id, RunStatus::Stopped, Some(why.to_string()));
    }

    pub fn stop_all(&mut self, why: &str) {
        let ids: Vec<String> = self.state.active_runs().map(|r| r.id.clone()).collect();
        for id in ids {
            self.stop(&id, why);
        }
    }

    /// Send a command to every rank of a running run.
    pub fn command(&mut self, run_id: &str, cmd: Command) -> anyhow::Result<()> {
        let n = self
            .server
            .registry
            .command(run_id, ControlMsg::Command { cmd });
        if n == 0 {
            anyhow::bail!("run {run_id} has no connected ranks");
        }
        self.state.push_message(
            Level::Info,
            Some(run_id),
            format!(
                "asked {n} {} to {}",
                if n == 1 { "rank" } else { "ranks" },
                match cmd {
                    Command::ProbeOn => "start the no_sync probe",
                    Command::ProbeOff => "stop the no_sync probe",
                    Command::DumpFr => "write a flight-recorder dump",
                    Command::Stop => "stop",
                }
            ),
        );
        Ok(())
    }

    /// The next supervisor event; cancel-safe, for `select!`. When a watchdog or teardown
    /// deadline comes first, `SupEvent::Deadline` at that very instant (not at the next tick).
    pub async fn next_event(&mut self) -> SupEvent {
        // The engine holds a sender, so the channel never closes.
        match self.next_deadline() {
            Some(at) => tokio::select! {
                ev = self.rx.recv() => ev.expect("engine holds a sender"),
                _ = tokio::time::sleep_until(at.into()) => {
                    self.last_deadline = Some(at);
                    SupEvent::Deadline
                }
            },
            None => self.rx.recv().await.expect("engine holds a sender"),
        }
    }

    /// The earliest instant a launched, still undecided run becomes hung (watchdog) or overdue
    /// in its teardown, if no message arrives before it.
    fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for (id, l) in &self.launches {
            if l.ending.is_some() {
                continue;
            }
            let Some(view) = self.state.run(id) else {
                continue;
            };
            let teardown = l
                .all_bye_at
                .filter(|_| l.exit.is_none())
                .map(|t| t + Duration::from_secs_f64(self.opts.watchdog.teardown_s.max(0.0)));
            // A deadline that already fired and changed nothing is left to the periodic tick,
            // so the loop never spins on it.
            let fired = self.last_deadline;
            let wd = watchdog::next_deadline(view, &self.opts.watchdog, fired);
            for t in [wd, teardown.filter(|t| fired.is_none_or(|l| *t > l))]
                .into_iter()
                .flatten()
            {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }

    /// Judge every launched run at `now`: hung (watchdog) or overdue in teardown.
    fn check_deadlines(&mut self, now: Instant) {
        let ids: Vec<String> = self.state.active_runs().map(|r| r.id.clone()).collect();
        for id in &ids {
            let Some(view) = self.state.run(id) else {
                continue;
            };
            let verdict = watchdog::check(view, now, &self.opts.watchdog);
            let note = watchdog::live_note(view, now, &self.opts.watchdog);
            self.set_watch_note(id, note);
            match verdict {
                Some(verdict) => self.declare_hung(id, verdict, now),
                None => self.maybe_resumed(id, now),
            }
            self.check_teardown(id, now);
        }
    }

    /// Every rank said `bye` but the launcher is still there past the teardown deadline (NCCL's
    /// `destroy_process_group` is a known hang point): stop the tree; the results are final, so
    /// the run completes with a warning, or fails if a rank's result is missing.
    fn check_teardown(&mut self, run: &str, now: Instant) {
        let limit = self.opts.watchdog.teardown_s;
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        let Some(since) = l.all_bye_at else {
            return;
        };
        if l.ending.is_some()
            || l.exit.is_some()
            || now < since + Duration::from_secs_f64(limit.max(0.0))
        {
            return;
        }
        let missing: Vec<u32> = self
            .state
            .run(run)
            .map(|v| {
                v.ranks
                    .keys()
                    .copied()
                    .filter(|r| !l.results.contains(r))
                    .collect()
            })
            .unwrap_or_default();
        let why = format!(
            "teardown hung: the launcher was still running {limit:.0} s after every rank's bye"
        );
        l.ending = Some(if missing.is_empty() {
            (
                RunStatus::Completed,
                Some(format!("{why}; results kept (process tree stopped)")),
            )
        } else {
            (
                RunStatus::Failed,
                Some(format!("{why}; rank(s) {missing:?} sent no result")),
            )
        });
        self.state.push_message(
            Level::Warn,
            Some(run),
            format!("{run}: {why}; stopping its process tree"),
        );
        self.pending.push(EventRow::note(run, &why));
        self.spawn_stop(run, Duration::ZERO);
    }

    /// Apply one supervisor event; returns whether the screen should be redrawn (a heartbeat
    /// that changes nothing shown does not need it).
    pub fn apply(&mut self, ev: SupEvent) -> bool {
        let now = Instant::now();
        match ev {
            SupEvent::Worker { run, msg } => return self.on_worker(&run, &msg, None, now),
            SupEvent::Lines { run, lines } => {
                let mut redraw = false;
                for r in lines {
                    redraw |= self.on_worker(&run, &r.msg, Some(r.line), now);
                }
                return redraw;
            }
            SupEvent::BadLines {
                run,
                rank,
                count,
                last_error,
            } => {
                if let Some(v) = self.state.run_mut(&run)
                    && let Some(r) = v.ranks.get_mut(&rank)
                {
                    r.bad_lines += count;
                }
                let text = format!("rank {rank}: dropped {count} bad line(s); last: {last_error}");
                self.pending.push(EventRow::note(&run, &text));
                self.state.push_message(Level::Warn, Some(&run), text);
            }
            SupEvent::Rejected { run, detail } => {
                if run.is_none() {
                    self.state.rejected_strangers += 1;
                }
                if let Some(id) = &run
                    && let Some(v) = self.state.run_mut(id)
                {
                    v.rejected += 1;
                    // The count is kept in full; the rows only while they are few.
                    if crate::supervisor::socket::worth_a_row(v.rejected) {
                        self.pending.push(EventRow::note(
                            id,
                            &format!("connection rejected: {detail}"),
                        ));
                    }
                }
                self.state.push_message(
                    Level::Warn,
                    run.as_deref(),
                    format!("connection rejected: {detail}"),
                );
            }
            SupEvent::Disconnected { run, rank } => {
                if let Some(v) = self.state.run_mut(&run)
                    && let Some(r) = v.ranks.get_mut(&rank)
                {
                    r.connected = false;
                }
            }
            SupEvent::Exited { run, exit } => self.on_exit(&run, exit),
            SupEvent::NodeExited { run, node, exit } => self.on_node_exit(&run, node, exit),
            SupEvent::StopDone {
                run,
                escalated_to,
                survivors,
            } => self.on_stop_done(&run, escalated_to, survivors),
            SupEvent::Deadline => self.check_deadlines(now),
            SupEvent::Agent { run, ev } => self.on_agent(&run, ev),
            SupEvent::Evidence { run, lines } => {
                if let Some(v) = self.state.run_mut(&run) {
                    v.hang_report.extend(lines.iter().cloned());
                }
                for l in lines {
                    self.state.push_message(Level::Warn, Some(&run), l);
                }
            }
        }
        true
    }

    /// One validated worker message (`line`: as received, for the store); returns whether the
    /// screen should be redrawn.
    fn on_worker(
        &mut self,
        run: &str,
        msg: &WorkerMsg,
        line: Option<String>,
        now: Instant,
    ) -> bool {
        // A heartbeat that changes nothing shown needs no redraw and no store row.
        if let WorkerMsg::Heartbeat(hb) = msg {
            let shown = self
                .state
                .run(run)
                .and_then(|v| v.ranks.get(&hb.rank))
                .is_some_and(|r| {
                    r.connected && hb.step <= r.step && (hb.phase.is_none() || hb.phase == r.phase)
                });
            if shown {
                if let Some(v) = self.state.run_mut(run) {
                    apply_worker(v, msg, now);
                }
                return false;
            }
        }
        let row = match line {
            Some(line) => EventRow::from_line(run, msg, line),
            None => EventRow::from_msg(run, msg),
        };
        if let Some(row) = row {
            self.pending.push(row);
        }
        // The runs and the GPU rows are borrowed apart: a straggler's evidence quotes its GPU's
        // row.
        let gpus = &self.state.gpus;
        let Some(view) = self.state.runs.iter_mut().find(|v| v.id == run) else {
            return true;
        };
        let was_starting = view.status == RunStatus::Starting;
        apply_worker(view, msg, now);
        // Only a step or its buckets message changes a rank's phase history. Assessed
        // a few times a second, not per message: a fast sim sends thousands a second,
        // and a window of tens of steps moves little in 200 ms.
        if matches!(msg, WorkerMsg::Step(_) | WorkerMsg::Buckets(_))
            && view
                .stragglers_assessed
                .is_none_or(|t| now.duration_since(t) >= crate::app::straggler::ASSESS_EVERY)
        {
            view.stragglers_assessed = Some(now);
            let since = view
                .started
                .map_or(0.0, |t| now.duration_since(t).as_secs_f64());
            let before = view.stragglers.len();
            let named = crate::app::straggler::update(view, &self.opts.stragglers, since, gpus);
            let records: Vec<_> = view.stragglers[before..].to_vec();
            for (line, rec) in named.iter().zip(records) {
                view.push_tail(format!("ddptop: {line}"));
                self.pending.push(EventRow::straggler(run, &rec));
                self.pending.push(EventRow::note(run, line));
            }
            for line in named {
                self.state.push_message(Level::Warn, Some(run), line);
            }
        }
        let Some(view) = self.state.run_mut(run) else {
            return true;
        };
        let all_bye = view.ranks.values().all(|r| r.said_bye);
        if let Some(l) = self.launches.get_mut(run) {
            if let WorkerMsg::Result(r) = msg {
                l.results.insert(r.rank);
            }
            if all_bye && l.all_bye_at.is_none() {
                l.all_bye_at = Some(now);
            }
        }
        if let WorkerMsg::Hello(h) = msg
            && self.server.registry.remote_peer(run, h.rank).is_none()
            && let Some(l) = self.launches.get_mut(run)
        {
            match l.pgid.and_then(|pg| procs::Known::descendant(h.pid, pg)) {
                Some(k) => {
                    l.known_pids.insert(h.pid, k);
                }
                None => {
                    let text = format!(
                        "rank {} claims pid {}, which is not a process of this run; it \
                         will not be signalled at stop",
                        h.rank, h.pid
                    );
                    self.pending.push(EventRow::note(run, &text));
                    self.state.push_message(Level::Warn, Some(run), text);
                }
            }
        }
        if let WorkerMsg::Hello(h) = msg
            && let Some(peer) = self.server.registry.remote_peer(run, h.rank)
            && let Some(r) = self
                .state
                .run_mut(run)
                .and_then(|v| v.ranks.get_mut(&h.rank))
        {
            r.remote = true;
            let node = h.node_name().to_string();
            self.watch_node(run, &node);
            self.pending.push(EventRow::note(
                run,
                &format!(
                    "rank {} on node {} connected over tcp from {peer}",
                    h.rank,
                    h.node_name()
                ),
            ));
        }
        let Some(view) = self.state.run_mut(run) else {
            return true;
        };
        if let WorkerMsg::Hello(h) = msg {
            let pids: Vec<u32> = view.ranks.values().filter_map(|r| r.pid).collect();
            let versions = view.versions.clone();
            if was_starting {
                self.state.push_message(
                    Level::Info,
                    Some(run),
                    format!("rank {} connected (pid {}, {})", h.rank, h.pid, h.device),
                );
            }
            let _ = self.store.set_running(run, &pids, &versions);
        }
        true
    }

    fn on_exit(&mut self, run: &str, exit: Exit) {
        let detail = self
            .launches
            .get(run)
            .and_then(|l| output::exit_details(&l.run_dir));
        // What the failing rank itself said, when it managed to say something.
        let rank_error = self.state.run(run).and_then(|v| {
            let errors: Vec<String> = v
                .ranks
                .values()
                .filter_map(|r| r.error.as_ref().map(|e| format!("rank {}: {e}", r.rank)))
                .collect();
            (!errors.is_empty()).then(|| errors.join("; "))
        });
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        l.exit = Some(exit);
        if l.ending.is_none() {
            let ending = match exit {
                Exit::Code(0) => {
                    let view = self.state.run(run);
                    let missing: Vec<u32> = view
                        .map(|v| {
                            v.ranks
                                .values()
                                .filter(|r| !r.said_bye)
                                .map(|r| r.rank)
                                .collect()
                        })
                        .unwrap_or_default();
                    if missing.is_empty() {
                        (RunStatus::Completed, None)
                    } else {
                        (
                            RunStatus::Failed,
                            Some(format!(
                                "launcher exited 0 but rank(s) {missing:?} sent no result"
                            )),
                        )
                    }
                }
                failed => {
                    let mut why = failed.to_string();
                    for part in [detail, rank_error].into_iter().flatten() {
                        why.push_str("; ");
                        why.push_str(&part);
                    }
                    (RunStatus::Failed, Some(why))
                }
            };
            l.ending = Some(ending);
        }
        self.spawn_stop(run, Duration::ZERO);
    }

    /// Another node's channel process ended. A failure fails the run and stops every node (its
    /// peers would otherwise wait in the rendezvous or a collective); a clean exit waits for the
    /// rest.
    fn on_node_exit(&mut self, run: &str, node: usize, exit: Exit) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if let Some(n) = l.remote.get_mut(node - 1) {
            n.exit = Some(exit);
        }
        if exit == Exit::Code(0) || l.ending.is_some() {
            return;
        }
        let host = l
            .plan
            .as_ref()
            .and_then(|p| p.hosts.get(node).cloned())
            .unwrap_or_default();
        let why = format!("node {node} ({host}): {exit}");
        l.ending = Some((RunStatus::Failed, Some(why.clone())));
        self.state.push_message(
            Level::Warn,
            Some(run),
            format!("{run}: {why}; stopping every node"),
        );
        self.pending.push(EventRow::note(run, &why));
        self.spawn_stop(run, Duration::ZERO);
    }

    fn begin_stop(&mut self, run: &str, status: RunStatus, why: Option<String>) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if l.ending.is_none() {
            l.ending = Some((status, why));
        }
        // Ask nicely first: a worker finishing its step sends result and bye.
        let _ = self
            .server
            .registry
            .command(run, ControlMsg::Command { cmd: Command::Stop });
        self.spawn_stop(run, Duration::ZERO);
    }

    /// Stop the run's process tree after `delay`, once; `StopDone` reports the outcome.
    fn spawn_stop(&mut self, run: &str, delay: Duration) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if l.stopping {
            return;
        }
        l.stopping = true;
        let pgid = if l.exit.is_some() { None } else { l.pgid };
        let view = self.state.run(run);
        // Only this machine's pids are signalled here, and only those found in the run's own
        // tree at `hello` and still the same process; another node's go through its channel.
        let pids: Vec<u32> = view
            .map(|v| {
                v.ranks
                    .values()
                    .filter(|r| !r.remote)
                    .filter_map(|r| r.pid)
                    .filter(|p| l.known_pids.get(p).is_some_and(|k| k.current()))
                    .collect()
            })
            .unwrap_or_default();
        let remote: Vec<RemoteStop> = l
            .remote
            .iter()
            .enumerate()
            .filter(|(_, n)| n.exit.is_none())
            .map(|(i, n)| {
                let host = l.plan.as_ref().map(|p| p.hosts[i + 1].as_str());
                let agent = n
                    .first_line
                    .get()
                    .and_then(|line| nodes::parse_node_line(line))
                    .filter(|(node, _, _)| *node == i + 1);
                // The ranks' pids are their own claims: the node's stop script signals only
                // those it finds under the agent.
                let pids = view
                    .into_iter()
                    .flat_map(|v| {
                        v.ranks
                            .values()
                            .filter(|r| r.remote && r.node.as_deref() == host)
                            .filter_map(|r| r.pid)
                    })
                    .collect();
                RemoteStop {
                    node: i + 1,
                    channel_pgid: n.pgid,
                    agent: agent.as_ref().map(|a| a.1),
                    pids,
                    slurm_step: agent.and_then(|a| a.2),
                }
            })
            .collect();
        let plan = l.plan.clone();
        let graceful = matches!(l.ending, Some((RunStatus::Completed, _)));
        let graces = self.opts.stop_grace;
        let tx = self.tx.clone();
        let rid = run.to_string();
        tokio::spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let remote_stops = async {
                let Some(plan) = plan.as_ref() else {
                    return Vec::new();
                };
                futures::future::join_all(
                    remote
                        .iter()
                        .map(|s| nodes::stop_remote(plan, s, graces, graceful)),
                )
                .await
            };
            let ((escalated_to, survivors), notes) =
                tokio::join!(procs::stop_tree(pgid, &pids, graces), remote_stops);
            let notes: Vec<String> = notes.into_iter().flatten().collect();
            if !notes.is_empty() {
                let _ = tx
                    .send(SupEvent::Evidence {
                        run: rid.clone(),
                        lines: notes,
                    })
                    .await;
            }
            let _ = tx
                .send(SupEvent::StopDone {
                    run: rid,
                    escalated_to,
                    survivors,
                })
                .await;
        });
    }

    fn on_stop_done(&mut self, run: &str, escalated_to: Escalation, survivors: Vec<u32>) {
        let Some(l) = self.launches.get(run) else {
            return;
        };
        // The launcher (and other nodes' channels) may still be ours to reap; wait for their
        // exits before finalizing.
        let channel_left = l
            .remote
            .iter()
            .any(|n| n.exit.is_none() && n.pgid.is_some_and(procs::alive));
        if (l.exit.is_none() && l.pgid.is_some_and(procs::alive)) || channel_left {
            if let Some(l) = self.launches.get_mut(run) {
                l.stopping = false;
            }
            self.spawn_stop(run, Duration::ZERO);
            return;
        }
        let (status, mut reason) = l
            .ending
            .clone()
            .unwrap_or((RunStatus::Failed, Some("ended".into())));
        if escalated_to != Escalation::None && status != RunStatus::Completed {
            let r = reason.get_or_insert_with(String::new);
            r.push_str(&format!(" (process tree stopped with {escalated_to})"));
        }
        if !survivors.is_empty() {
            let r = reason.get_or_insert_with(String::new);
            r.push_str(&format!("; WARNING: pids {survivors:?} survived SIGKILL"));
        }
        let run_dir = l.run_dir.clone();
        self.pull_output(run);
        self.keep_node_gpus(run);
        self.flush_events();
        let transport = nccl_log::transport_of_run(&run_dir);
        let unix = crate::util::unix_now();
        let Some(view) = self.state.run_mut(run) else {
            return;
        };
        let known = view.transport().map(str::to_string);
        view.set_transport(transport.or(known));
        if let Some(read) = nccl_reads(&view.spec, &run_dir) {
            view.nccl_read = read;
        }
        reduce::finish(view, status, reason, unix);
        let view_snapshot = view.clone();
        let scaling = summary::scaling(&view_snapshot, &self.state.runs);
        // The store first: a result is durable before anything reports it as final.
        if let Err(e) = self.store.finalize(&view_snapshot, scaling.as_ref()) {
            self.state.push_message(
                Level::Error,
                Some(run),
                format!("could not store the result: {e}"),
            );
        }
        self.server.registry.close_run(run);
        if let Some(l) = self.launches.remove(run) {
            // Closing the run closed the agents' connections: they exit by themselves.
            agents::reap_agents(l.agents, Duration::from_secs(5));
        }
        // The finished run's nodes leave the GPU pane.
        crate::app::nodes::check_nodes(&mut self.state, Instant::now(), Duration::MAX);
        // The TCP listener is open to the network before any token is checked: only while a
        // multi-node run needs it.
        if self.tcp.is_some() && !self.launches.values().any(|l| l.plan.is_some()) {
            self.tcp = None;
            self.tls_fingerprint = None;
            let _ = std::fs::remove_file(
                self.server
                    .dir
                    .join(crate::supervisor::socket::TCP_ADDR_FILE),
            );
        }
        let level = if status == RunStatus::Completed {
            Level::Info
        } else {
            Level::Warn
        };
        let mut text = format!("{run} {}", status.as_str());
        if let Some(r) = &view_snapshot.reason {
            text.push_str(&format!(": {r}"));
        }
        if status == RunStatus::Completed
            && let Some(a) = &view_snapshot.aggregate
        {
            text.push_str(&format!(" — {:.0} samples/s", a.samples_per_s));
        }
        self.state.push_message(level, Some(run), text);
    }

    /// Periodic work while runs are active: watchdog, throughput samples, log tails, store flush.
    /// Returns whether a run is active (its live figures moved: redraw).
    pub fn tick(&mut self) -> bool {
        let now = Instant::now();
        let ids: Vec<String> = self.state.active_runs().map(|r| r.id.clone()).collect();
        for id in &ids {
            self.pull_output(id);
            self.read_transport(id, now);
            let Some(view) = self.state.run_mut(id) else {
                continue;
            };
            // A simulation sped up N× delivers steps N× faster than the machine it models.
            let scale = if view.is_simulated() {
                1.0 / self.opts.sim_speed.max(1e-3)
            } else {
                1.0
            };
            reduce::sample_throughput(view, now, scale);
        }
        self.check_deadlines(now);
        let nodes_changed = self.check_node_gpus(now);
        if now.duration_since(self.last_flush) > Duration::from_millis(500) {
            self.flush_events();
        }
        !ids.is_empty() || nodes_changed
    }

    /// The watchdog's live word on a run (warming up, a slow step waited out): kept on the
    /// run for the screens, and logged when it starts saying something new.
    fn set_watch_note(&mut self, run: &str, note: Option<String>) {
        let stalled = self
            .launches
            .get(run)
            .is_some_and(|l| l.hung_at.is_some() && l.ending.is_none());
        let Some(v) = self.state.run_mut(run) else {
            return;
        };
        if stalled {
            return; // the reported stall's note stays until progress resumes
        }
        let kind = |n: &Option<String>| {
            n.as_deref()
                .map(|s| s.split(':').next().unwrap_or(s).to_string())
        };
        let fresh = note.is_some() && kind(&note) != kind(&v.watch_note);
        v.watch_note = note.clone();
        if fresh && let Some(n) = note {
            self.state.push_message(Level::Info, Some(run), n);
        }
    }

    /// An attached job whose stall was reported (not stopped) and that made progress since.
    fn maybe_resumed(&mut self, run: &str, now: Instant) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        let Some(at) = l.hung_at.filter(|_| l.ending.is_none()) else {
            return;
        };
        let moved = self
            .state
            .run(run)
            .and_then(|v| v.last_progress)
            .is_some_and(|p| p > at);
        if !moved {
            return;
        }
        l.hung_at = None;
        let text = format!(
            "{run}: progress resumed {:.1} s after the stall was reported; the stall stays in the run's evidence",
            now.duration_since(at).as_secs_f64()
        );
        self.pending.push(EventRow::note(run, &text));
        if let Some(v) = self.state.run_mut(run) {
            v.watch_note = None;
            v.hang_report.push(text.clone());
        }
        self.state.push_message(Level::Info, Some(run), text);
    }

    fn declare_hung(&mut self, run: &str, verdict: Verdict, now: Instant) {
        let keep_running = !self.opts.stop_attached_on_hang
            && self
                .state
                .run(run)
                .is_some_and(|v| v.spec.experiment() == crate::run::Experiment::Attach);
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if l.hung_at.is_some() || l.ending.is_some() {
            return;
        }
        l.hung_at = Some(now);
        let why = verdict.to_string();
        if !keep_running {
            // A rank that reported its own failure and left its peers blocked in a collective
            // made the run fail; the hang is the consequence, not the cause.
            let failed_rank = self.state.run(run).and_then(|v| {
                v.ranks
                    .values()
                    .find_map(|r| r.error.as_ref().map(|e| (r.rank, e.clone())))
            });
            l.ending = Some(match &failed_rank {
                Some((rank, err)) => (
                    RunStatus::Failed,
                    Some(format!(
                        "rank {rank} failed: {err}; the other ranks then hung ({why})"
                    )),
                ),
                None => (RunStatus::Hung, Some(why.clone())),
            });
        }
        let report = self
            .state
            .run(run)
            .map(|v| {
                // Beside the watchdog's verdict, and before any flight-recorder dump: where each
                // rank stands in NCCL's own collectives, when the profiler plugin is on.
                let mut r = watchdog::hang_report(v, now, &verdict);
                r.extend(
                    crate::app::collectives::stuck(v, now, 0.0)
                        .map(|s| format!("NCCL profiler: {s}")),
                );
                r
            })
            .unwrap_or_default();
        self.pending.push(EventRow::note(run, &report.join(" | ")));
        if let Some(v) = self.state.run_mut(run) {
            // An attached job may stall, resume and stall again: each report is kept.
            v.hang_report.extend(report);
            if keep_running {
                v.watch_note = Some(format!("stalled, reported, not stopped: {why}"));
            }
        }
        let text = if keep_running {
            format!(
                "{run} looks hung: {why}; collecting evidence and leaving your job running (x stops it; attach --stop-on-hang stops it next time)"
            )
        } else {
            format!("{run} HUNG: {why}; collecting evidence, then stopping it")
        };
        self.state.push_message(Level::Error, Some(run), text);
        self.collect_hang_evidence(run);
        if !keep_running {
            // The dump gets its moment before the tree goes.
            self.spawn_stop(run, EVIDENCE_WAIT + Duration::from_millis(300));
        }
    }

    /// Ask for a flight-recorder dump and the ranks' stacks two ways (the worker's own thread,
    /// and torch's pipe), give them a moment, then add their summary to the run's evidence.
    fn collect_hang_evidence(&mut self, run: &str) {
        let Some(l) = self.launches.get(run) else {
            return;
        };
        let run_dir = l.run_dir.clone();
        // py-spy reads this machine's ranks only (a remote rank's pid is another node's).
        let pids: Vec<(u32, u32)> = self
            .state
            .run(run)
            .map(|v| {
                v.ranks
                    .values()
                    .filter(|r| !r.remote)
                    .filter_map(|r| r.pid.map(|p| (r.rank, p)))
                    .collect()
            })
            .unwrap_or_default();
        let _ = self.server.registry.command(
            run,
            ControlMsg::Command {
                cmd: Command::DumpFr,
            },
        );
        crate::supervisor::flight::request_dump(&run_dir);
        // Ranks on other nodes dump there, into the same path (the dump command reached them
        // over their TCP connection): say where, since this machine cannot read them.
        let elsewhere: Vec<String> = l
            .plan
            .iter()
            .flat_map(|p| p.hosts.iter().skip(1))
            .map(|h| {
                format!(
                    "node {h}: flight-recorder dumps are written on {h} in {} (fr_rank*); copy them here to read them",
                    run_dir.display()
                )
            })
            .collect();
        let tx = self.tx.clone();
        let rid = run.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(EVIDENCE_WAIT).await;
            let mut lines = tokio::task::spawn_blocking(move || {
                let mut v = crate::supervisor::flight::summarize(&run_dir);
                v.extend(crate::supervisor::flight::stacks(&run_dir, &pids));
                v
            })
            .await
            .unwrap_or_default();
            lines.extend(elsewhere);
            let _ = tx
                .send(SupEvent::Evidence {
                    run: rid.clone(),
                    lines,
                })
                .await;
        });
    }

    /// NCCL prints its transport lines at communicator init: read them early, so the screen shows
    /// the transport while the run goes (every 2 s until found; once more at the end).
    fn read_transport(&mut self, run: &str, now: Instant) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if l.transport_read
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(2))
        {
            return;
        }
        l.transport_read = Some(now);
        let dir = l.run_dir.clone();
        if let Some(v) = self.state.run_mut(run)
            && v.spec.backend == crate::protocol::Backend::Nccl
            && (v.transport().is_none() || v.nccl_read.is_empty())
        {
            v.set_transport(nccl_log::transport_of_run(&dir));
            if let Some(read) = nccl_reads(&v.spec, &dir) {
                v.nccl_read = read;
            }
        }
    }

    /// Append new lines of the run's output.log to its log tail.
    fn pull_output(&mut self, run: &str) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        let lines = l.output.new_lines();
        if lines.is_empty() {
            return;
        }
        if let Some(v) = self.state.run_mut(run) {
            for line in lines {
                v.push_tail(line);
            }
        }
    }

    fn flush_events(&mut self) {
        self.last_flush = Instant::now();
        if self.pending.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.pending);
        if let Err(e) = self.store.add_events(&rows) {
            self.state
                .push_message(Level::Error, None, format!("store: {e}"));
        }
    }

    /// Stop every active run (unless detaching) and wait until they are final.
    pub async fn shutdown(&mut self, detach: bool) {
        if !detach {
            self.stop_all("ddptop is exiting");
            let deadline = Instant::now()
                + self.opts.stop_grace[0]
                + self.opts.stop_grace[1]
                + Duration::from_secs(10);
            self.drive(Some(deadline), |e| !e.has_active_runs()).await;
        }
        self.flush_events();
    }

    /// Drive the engine until `run` is final (headless runs and tests).
    pub async fn wait_final(&mut self, run: &str) -> RunStatus {
        self.drive(None, |e| {
            e.state.run(run).is_none_or(|v| v.status.is_final())
        })
        .await;
        self.state.run(run).map_or(RunStatus::Failed, |v| v.status)
    }

    /// The one loop that drives the engine without a terminal: apply supervisor events, tick
    /// every 250 ms while runs are active, until `done` (called after every event and tick; it
    /// may also start queued launches) says so or the deadline passes.
    pub async fn drive(
        &mut self,
        deadline: Option<Instant>,
        mut done: impl FnMut(&mut Engine) -> bool,
    ) {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
        let until = deadline.unwrap_or(far);
        while !done(self) && Instant::now() < until {
            tokio::select! {
                ev = self.next_event() => {
                    self.apply(ev);
                }
                _ = tick.tick() => {
                    if self.has_active_runs() {
                        self.tick();
                    }
                }
                _ = tokio::time::sleep_until(until.into()) => {}
            }
        }
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

/// Which of the run's NCCL settings NCCL logged reading (see `nccl_log::toggles_read`).
fn nccl_reads(
    spec: &RunSpec,
    dir: &std::path::Path,
) -> Option<std::collections::BTreeMap<String, bool>> {
    if spec.backend != crate::protocol::Backend::Nccl {
        return None;
    }
    let set: Vec<(&str, &str)> = spec
        .nccl
        .launch_env()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
    nccl_log::toggles_read(dir, &set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::HostInfo;
    use crate::protocol::{
        Backend, CommBackend, Heartbeat, Hello, Step, Timing, WorkerKind, WorkerMsg,
    };
    use crate::run::{Experiment, ModelName};

    fn engine(dir: &std::path::Path) -> Engine {
        let mut o = EngineOptions::new(dir.to_path_buf());
        o.history = 0;
        Engine::start(o, State::new(HostInfo::default())).unwrap()
    }

    fn worker(run: &str, msg: WorkerMsg) -> SupEvent {
        SupEvent::Worker {
            run: run.into(),
            msg: Box::new(msg),
        }
    }

    fn step(rank: u32, step: u64) -> Step {
        Step {
            rank,
            step,
            epoch: 0,
            t: step as f64,
            warmup: false,
            sync: true,
            samples: 256,
            fwd_ms: 10.0,
            bwd_ms: 20.0,
            opt_ms: 1.0,
            data_ms: 0.5,
            step_ms: 32.0,
            timing: Timing::Model,
            loss: None,
            fused: None,
            every: None,
            t_bwd: None,
        }
    }

    /// The apply path: hellos start the run, a step moves its rank, a heartbeat that shows
    /// nothing new asks for no redraw, and the run's end is stored.
    #[tokio::test]
    async fn apply_folds_messages_into_the_run_and_the_store_keeps_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = engine(dir.path());
        let spec = RunSpec::new(Experiment::Weak, 2, Backend::Sim);
        let (id, _token) = e.open_external(spec).unwrap();
        assert_eq!(e.state().run(&id).unwrap().status, RunStatus::Starting);
        for rank in 0..2 {
            let hello = Hello::new(
                rank,
                2,
                "host".into(),
                format!("sim:{rank}"),
                CommBackend::Sim,
                WorkerKind::Sim,
            );
            assert!(e.apply(worker(&id, WorkerMsg::Hello(hello))));
        }
        let run = e.state().run(&id).unwrap();
        assert_eq!(run.status, RunStatus::Running);
        assert_eq!(run.ranks.len(), 2);
        assert!(run.ranks.values().all(|r| r.connected));
        assert!(e.apply(worker(&id, WorkerMsg::Step(step(0, 1)))));
        assert_eq!(e.state().run(&id).unwrap().ranks[&0].step, 1);
        let quiet = Heartbeat {
            rank: 0,
            step: 1,
            t: 1.5,
            phase: None,
            cpu_s: None,
            coll: None,
        };
        assert!(
            !e.apply(worker(&id, WorkerMsg::Heartbeat(quiet))),
            "a heartbeat that changes nothing on screen asks for no redraw"
        );
        assert!(e.apply(SupEvent::Disconnected {
            run: id.clone(),
            rank: 1
        }));
        assert!(!e.state().run(&id).unwrap().ranks[&1].connected);
        e.close_external(&id, RunStatus::Completed);
        let stored = Store::open(&dir.path().join("runs.db"))
            .unwrap()
            .load_runs(10)
            .unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].id, id);
        assert_eq!(stored[0].status, RunStatus::Completed);
    }

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

    /// The tick path: with no run, a tick has nothing to judge and nothing to redraw.
    #[tokio::test]
    async fn a_tick_without_runs_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = engine(dir.path());
        let before = e.state().messages.len();
        assert!(!e.tick());
        assert_eq!(e.state().messages.len(), before);
    }
}
