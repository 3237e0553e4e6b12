//! The engine: one loop that owns `State`. Supervisor events, launches, stops and the watchdog
//! all go through here, so the TUI, the headless runner and the tests run the same code.
//!
//! The work is split by job (`launching`, `ingest`, `hangs`, `stopping`, `agents`), each an
//! `impl Engine` of its own; this file keeps the types, the accessors and the loop that drives
//! them, so what the engine owns reads in one place.

use crate::app::reduce;
use crate::app::{Level, State};
use crate::protocol::{Command, ControlMsg};
use crate::run::RunStatus;
use crate::store::{EventRow, Store};
use crate::supervisor::gpu_guard;
use crate::supervisor::launch::{NodePlan, PythonEnv};
use crate::supervisor::nodes::NodesOptions;
use crate::supervisor::output::OutputTail;
use crate::supervisor::socket::SocketServer;
use crate::supervisor::tcp::TcpServer;
use crate::supervisor::watchdog::WatchdogConfig;
use crate::supervisor::{Exit, SupEvent, procs};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The shortest time between two rounds of events taken from the engine's channel
/// (`Engine::next_event`).
const INGEST_GAP: Duration = Duration::from_millis(10);
/// Events taken in one round at most (the channel holds 8,192).
const ROUND_MAX: usize = 1024;

mod agents;
mod hangs;
mod ingest;
mod joins;
mod latest;
mod launching;
mod stopping;
mod verdicts;

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
    /// The most bytes of one run's step archive (`[store] archive_max_mb`; `None`: no limit).
    pub archive_limit: Option<u64>,
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
            archive_limit: crate::config::StoreCfg::default().archive_limit(),
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

impl Launch {
    /// A launch just started from `run_dir` (process group `pgid`), on this machine only and
    /// holding no GPU locks: nothing has exited, stopped or said `bye` yet.
    fn new(pgid: Option<u32>, run_dir: PathBuf) -> Launch {
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
            _gpus: None,
            plan: None,
            remote: Vec::new(),
            agents: Vec::new(),
            known_pids: HashMap::new(),
        }
    }
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
    /// Events taken from `rx` in the last round, handed out one at a time by `next_event`.
    round: std::collections::VecDeque<SupEvent>,
    round_buf: Vec<SupEvent>,
    /// When the engine last took a round of events from `rx` (`INGEST_GAP`).
    last_round: Option<Instant>,
    launches: HashMap<String, Launch>,
    pending: Vec<EventRow>,
    /// Each rank's latest timeline, written to the database every few seconds (`latest`).
    latest: latest::LatestTimelines,
    /// The archive's last write error, shown once until it changes.
    archive_error: Option<String>,
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
        let mut store = Store::open(&opts.data_dir.join("runs.db"))?;
        store.archive().set_limit(opts.archive_limit);
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
            round: std::collections::VecDeque::new(),
            round_buf: Vec::new(),
            last_round: None,
            launches: HashMap::new(),
            pending: Vec::new(),
            latest: latest::LatestTimelines::default(),
            archive_error: None,
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

    pub fn store_path(&self) -> &std::path::Path {
        &self.store.path
    }
    pub fn has_active_runs(&self) -> bool {
        self.state.active_runs().next().is_some()
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
    ///
    /// Events are taken from the channel in rounds, at most one round per `INGEST_GAP`: between
    /// rounds the connection tasks queue their lines without waking the engine, so 1,024 ranks
    /// sending 20 times a second wake it about 1/`INGEST_GAP` times a second, not 20,000 (each
    /// wake is a futex call and two context switches). An idle engine takes the first event at
    /// once; under load an event waits at most `INGEST_GAP`.
    pub async fn next_event(&mut self) -> SupEvent {
        if let Some(ev) = self.round.pop_front() {
            return ev;
        }
        let deadline = self.next_deadline();
        if let Some(due) = self
            .last_round
            .map(|t| t + INGEST_GAP)
            .filter(|d| *d > Instant::now())
        {
            match deadline {
                Some(at) if at <= due => return self.deadline_at(at).await,
                _ => tokio::time::sleep_until(due.into()).await,
            }
        }
        let taken = match deadline {
            Some(at) => tokio::select! {
                n = self.rx.recv_many(&mut self.round_buf, ROUND_MAX) => n,
                _ = tokio::time::sleep_until(at.into()) => {
                    self.last_deadline = Some(at);
                    return SupEvent::Deadline;
                }
            },
            None => self.rx.recv_many(&mut self.round_buf, ROUND_MAX).await,
        };
        // The engine holds a sender, so the channel never closes and a round is never empty.
        debug_assert!(taken > 0);
        self.last_round = Some(Instant::now());
        self.round.extend(self.round_buf.drain(..));
        self.round.pop_front().unwrap_or(SupEvent::Deadline)
    }

    /// `SupEvent::Deadline` at `at`, remembered as the last deadline woken for.
    async fn deadline_at(&mut self, at: Instant) -> SupEvent {
        tokio::time::sleep_until(at.into()).await;
        self.last_deadline = Some(at);
        SupEvent::Deadline
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
        self.latest.take_all(&mut self.pending);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::HostInfo;

    /// An engine on a scratch data dir with no history: the submodules' tests start from it.
    pub(super) fn engine(dir: &std::path::Path) -> Engine {
        let mut o = EngineOptions::new(dir.to_path_buf());
        o.history = 0;
        Engine::start(o, State::new(HostInfo::default())).unwrap()
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

    /// Events are taken in rounds: what waits in the channel comes in one round, in order, and
    /// what arrives during a round waits for the next, no sooner than `INGEST_GAP` after it.
    #[tokio::test]
    async fn events_come_in_rounds_at_most_one_per_gap() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = engine(dir.path());
        let ev = |rank| SupEvent::Disconnected {
            run: "r".into(),
            rank,
        };
        let rank_of = |ev: SupEvent| match ev {
            SupEvent::Disconnected { rank, .. } => rank,
            other => panic!("unexpected {other:?}"),
        };
        for rank in 0..3 {
            e.tx.send(ev(rank)).await.unwrap();
        }
        assert_eq!(rank_of(e.next_event().await), 0);
        let round_at = e.last_round.expect("a round was taken");
        assert_eq!(
            e.round.len(),
            2,
            "the waiting events came in the same round"
        );
        e.tx.send(ev(3)).await.unwrap();
        assert_eq!(rank_of(e.next_event().await), 1);
        assert_eq!(rank_of(e.next_event().await), 2);
        assert_eq!(rank_of(e.next_event().await), 3);
        assert!(
            e.last_round.unwrap() >= round_at + INGEST_GAP,
            "the next round came no sooner than the gap"
        );
    }
}
