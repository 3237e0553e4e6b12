//! The engine: one loop that owns `State`. Supervisor events, launches, stops and the watchdog
//! all go through here, so the TUI, the headless runner and the tests run the same code.

use crate::app::reduce::{self, apply_worker};
use crate::app::{Level, RunSpec, RunStatus, RunView, State, summary};
use crate::protocol::{Backend, Command, ControlMsg, WorkerMsg};
use crate::store::{EventRow, NewRun, Store};
use crate::supervisor::launch::{self, LaunchContext, PythonEnv};
use crate::supervisor::socket::{SocketServer, new_token};
use crate::supervisor::watchdog::{self, WatchdogConfig};
use crate::supervisor::{SupEvent, nccl_log, procs};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

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
        }
    }
}

/// Bookkeeping for a run this engine launched.
struct Launch {
    pgid: Option<u32>,
    run_dir: PathBuf,
    log_pos: u64,
    exit: Option<(Option<i32>, Option<i32>)>,
    /// The status the run gets once its processes are gone, and why.
    ending: Option<(RunStatus, Option<String>)>,
    stopping: bool,
    hung_at: Option<Instant>,
    /// When the NCCL logs were last read for the transport (while the run is going).
    transport_read: Option<Instant>,
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
}

impl Engine {
    pub fn start(opts: EngineOptions, state: State) -> anyhow::Result<Engine> {
        procs::raise_nofile_limit();
        std::fs::create_dir_all(&opts.data_dir)?;
        let store = Store::open(&opts.data_dir.join("runs.db"))?;
        let (tx, rx) = mpsc::channel(8192);
        let server = SocketServer::start(&crate::paths::runtime_parent(), tx.clone())?;
        let mut engine = Engine {
            state,
            store,
            server,
            tx,
            rx,
            launches: HashMap::new(),
            pending: Vec::new(),
            last_flush: Instant::now(),
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
    pub fn socket_path(&self) -> &std::path::Path {
        &self.server.path
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
        if spec.k == 0 {
            anyhow::bail!("k must be at least 1");
        }
        if spec.backend == Backend::Nccl && self.state.max_k > 0 && spec.k > self.state.max_k {
            anyhow::bail!(
                "k={} needs {} GPUs; this machine has {}",
                spec.k,
                spec.k,
                self.state.max_k
            );
        }
        let id = new_run_id();
        let run_dir = self.opts.data_dir.join("runs").join(&id);
        std::fs::create_dir_all(&run_dir)?;
        let token = new_token();
        let ctx = LaunchContext {
            run_id: &id,
            token: &token,
            socket: &self.server.path,
            run_dir: &run_dir,
            python: self.opts.python.as_ref(),
            sim_speed: self.opts.sim_speed,
            sim_noise: self.opts.sim_noise,
        };
        let cmd = launch::command_for(&spec, &ctx)?;
        let started_unix = crate::util::unix_now();
        self.store.insert_run(&NewRun {
            id: &id,
            spec: &spec,
            sweep: sweep.as_deref(),
            command: &cmd,
            started_unix,
            run_dir: &run_dir,
        })?;
        std::fs::write(run_dir.join("command.txt"), cmd.shell() + "\n")?;
        self.server.registry.open_run(&id, &token, spec.k);
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
            let st = child.wait().await;
            let (code, signal) = match st {
                Ok(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    (s.code(), s.signal())
                }
                Err(_) => (None, None),
            };
            let _ = tx
                .send(SupEvent::Exited {
                    run: rid,
                    code,
                    signal,
                })
                .await;
        });
        let mut run = RunView::new(id.clone(), spec, Instant::now(), started_unix);
        run.sweep = sweep;
        let label = format!(
            "launched {} {} k={} on {}{}",
            id,
            run.spec.experiment.as_str(),
            run.spec.k,
            run.spec.backend.as_str(),
            if run.is_simulated() {
                " (SIMULATED)"
            } else {
                ""
            }
        );
        self.state.runs.insert(0, run);
        self.state.selected = 0;
        self.state.focused = Some(id.clone());
        self.state.push_message(Level::Info, Some(&id), label);
        self.launches.insert(
            id.clone(),
            Launch {
                pgid,
                run_dir,
                log_pos: 0,
                exit: None,
                ending: None,
                stopping: false,
                hung_at: None,
                transport_read: None,
            },
        );
        Ok(id)
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
            format!("sent {cmd:?} to {n} rank(s)"),
        );
        Ok(())
    }

    /// The next supervisor event; cancel-safe, for `select!`.
    pub async fn next_event(&mut self) -> SupEvent {
        // The engine holds a sender, so the channel never closes.
        self.rx.recv().await.expect("engine holds a sender")
    }

    pub fn apply(&mut self, ev: SupEvent) {
        let now = Instant::now();
        self.state.generation += 1;
        match ev {
            SupEvent::Worker { run, msg } => {
                if let Some(row) = EventRow::from_msg(&run, &msg) {
                    self.pending.push(row);
                }
                let Some(view) = self.state.run_mut(&run) else {
                    return;
                };
                let was_starting = view.status == RunStatus::Starting;
                apply_worker(view, &msg, now);
                if let WorkerMsg::Hello(h) = &msg {
                    let pids: Vec<u32> = view.ranks.values().filter_map(|r| r.pid).collect();
                    let versions = view.versions.clone();
                    if was_starting {
                        self.state.push_message(
                            Level::Info,
                            Some(&run),
                            format!("rank {} connected (pid {}, {})", h.rank, h.pid, h.device),
                        );
                    }
                    let _ = self.store.set_running(&run, &pids, &versions);
                }
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
                if let Some(id) = &run
                    && let Some(v) = self.state.run_mut(id)
                {
                    v.rejected += 1;
                    self.pending.push(EventRow::note(
                        id,
                        &format!("connection rejected: {detail}"),
                    ));
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
            SupEvent::Exited { run, code, signal } => self.on_exit(&run, code, signal),
            SupEvent::StopDone {
                run,
                escalated_to,
                survivors,
            } => self.on_stop_done(&run, escalated_to, survivors),
            SupEvent::Evidence { run, lines } => {
                if let Some(v) = self.state.run_mut(&run) {
                    v.hang_report.extend(lines.iter().cloned());
                }
                for l in lines {
                    self.state.push_message(Level::Warn, Some(&run), l);
                }
            }
        }
    }

    fn on_exit(&mut self, run: &str, code: Option<i32>, signal: Option<i32>) {
        let detail = self.exit_details(run);
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
        l.exit = Some((code, signal));
        if l.ending.is_none() {
            let ending = match (code, signal) {
                (Some(0), _) => {
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
                (c, s) => {
                    let mut why = match (c, s) {
                        (Some(c), _) => format!("launcher exited with code {c}"),
                        (None, Some(s)) => format!("launcher killed by signal {s}"),
                        _ => "launcher ended".into(),
                    };
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

    /// Rank exit codes as the launcher logged them (sim launcher and torchrun formats).
    fn exit_details(&self, run: &str) -> Option<String> {
        let l = self.launches.get(run)?;
        let text = std::fs::read_to_string(l.run_dir.join("output.log")).ok()?;
        let mut found: Vec<String> = Vec::new();
        for line in text.lines().rev().take(400) {
            let t = line.trim();
            if t.contains("exited with")
                || t.starts_with("exitcode")
                || t.starts_with("rank ") && t.contains("exitcode")
            {
                found.push(t.chars().take(160).collect());
            }
            if found.len() >= 4 {
                break;
            }
        }
        found.reverse();
        (!found.is_empty()).then(|| found.join("; "))
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
        let pids: Vec<u32> = self
            .state
            .run(run)
            .map(|v| v.ranks.values().filter_map(|r| r.pid).collect())
            .unwrap_or_default();
        let graces = self.opts.stop_grace;
        let tx = self.tx.clone();
        let rid = run.to_string();
        tokio::spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let (escalated_to, survivors) = procs::stop_tree(pgid, &pids, graces).await;
            let _ = tx
                .send(SupEvent::StopDone {
                    run: rid,
                    escalated_to,
                    survivors,
                })
                .await;
        });
    }

    fn on_stop_done(&mut self, run: &str, escalated_to: &'static str, survivors: Vec<u32>) {
        let Some(l) = self.launches.get(run) else {
            return;
        };
        // The launcher may still be ours to reap; wait for its exit before finalizing.
        if l.exit.is_none() && l.pgid.is_some_and(procs::alive) {
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
        if escalated_to != "none" && status != RunStatus::Completed {
            let r = reason.get_or_insert_with(String::new);
            r.push_str(&format!(" (process tree stopped with {escalated_to})"));
        }
        if !survivors.is_empty() {
            let r = reason.get_or_insert_with(String::new);
            r.push_str(&format!("; WARNING: pids {survivors:?} survived SIGKILL"));
        }
        let run_dir = l.run_dir.clone();
        self.pull_output(run);
        self.flush_events();
        let transport = nccl_log::transport_of_run(&run_dir);
        let unix = crate::util::unix_now();
        let Some(view) = self.state.run_mut(run) else {
            return;
        };
        view.transport = transport.or(view.transport.take());
        reduce::finish(view, status, reason, unix);
        let view_snapshot = view.clone();
        let scaling = summary::scaling(&view_snapshot, &self.state.runs);
        // The store first: a result is durable before anything reports it as final.
        if let Err(e) = self.store.finalize(&view_snapshot, scaling) {
            self.state.push_message(
                Level::Error,
                Some(run),
                format!("could not store the result: {e}"),
            );
        }
        self.server.registry.close_run(run);
        self.launches.remove(run);
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
    pub fn tick(&mut self) {
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
            let verdict = watchdog::check(view, now, &self.opts.watchdog);
            if let Some(why) = verdict {
                self.declare_hung(id, why, now);
            }
        }
        if now.duration_since(self.last_flush) > Duration::from_millis(500) {
            self.flush_events();
        }
        if !ids.is_empty() {
            self.state.generation += 1;
        }
    }

    fn declare_hung(&mut self, run: &str, why: String, now: Instant) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if l.hung_at.is_some() || l.ending.is_some() {
            return;
        }
        l.hung_at = Some(now);
        // A rank that reported its own failure and left its peers blocked in a collective made
        // the run fail; the hang is the consequence, not the cause.
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
        let run_dir = l.run_dir.clone();
        let mut report = vec![format!("hang detected: {why}")];
        if let Some(v) = self.state.run(run) {
            for r in v.ranks.values() {
                let last = r
                    .last_progress
                    .map(|p| format!("{:.1} s ago", now.duration_since(p).as_secs_f64()))
                    .unwrap_or_else(|| "never".into());
                report.push(format!(
                    "rank {}: step {}, phase {}, last progress {last}",
                    r.rank,
                    r.step,
                    r.phase
                        .map(|p| format!("{p:?}").to_lowercase())
                        .unwrap_or_else(|| "unknown".into())
                ));
            }
        }
        self.pending.push(EventRow::note(run, &report.join(" | ")));
        if let Some(v) = self.state.run_mut(run) {
            v.hang_report = report.clone();
        }
        self.state.push_message(
            Level::Error,
            Some(run),
            format!("{run} HUNG: {why}; collecting evidence, then stopping it"),
        );
        // Ask for a flight-recorder dump two ways (the worker's own thread, and torch's pipe),
        // give it a moment, then stop the tree.
        let _ = self.server.registry.command(
            run,
            ControlMsg::Command {
                cmd: Command::DumpFr,
            },
        );
        crate::supervisor::flight::request_dump(&run_dir);
        let tx = self.tx.clone();
        let rid = run.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(EVIDENCE_WAIT).await;
            let lines =
                tokio::task::spawn_blocking(move || crate::supervisor::flight::summarize(&run_dir))
                    .await
                    .unwrap_or_default();
            let _ = tx
                .send(SupEvent::Evidence {
                    run: rid.clone(),
                    lines,
                })
                .await;
        });
        // The dump gets its moment before the tree goes.
        self.spawn_stop(run, EVIDENCE_WAIT + Duration::from_millis(300));
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
            && v.transport.is_none()
        {
            v.transport = nccl_log::transport_of_run(&dir);
        }
    }

    /// Append new lines of the run's output.log to its log tail.
    fn pull_output(&mut self, run: &str) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        let Ok(mut f) = std::fs::File::open(l.run_dir.join("output.log")) else {
            return;
        };
        if f.seek(SeekFrom::Start(l.log_pos)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        let Ok(n) = f.take(256 * 1024).read_to_end(&mut buf) else {
            return;
        };
        // Only whole lines; a partial last line waits for the next tick.
        let end = buf
            .iter()
            .rposition(|&b| b == b'\n')
            .map(|i| i + 1)
            .unwrap_or(if n >= 256 * 1024 { n } else { 0 });
        l.log_pos += end as u64;
        if end == 0 {
            return;
        }
        let text = String::from_utf8_lossy(&buf[..end]).into_owned();
        if let Some(v) = self.state.run_mut(run) {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                reduce::push_tail(v, line.chars().take(400).collect());
            }
            self.state.generation += 1;
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
        if detach {
            self.flush_events();
            return;
        }
        self.stop_all("ddptop is exiting");
        let deadline = Instant::now()
            + self.opts.stop_grace[0]
            + self.opts.stop_grace[1]
            + Duration::from_secs(10);
        while self.has_active_runs() && Instant::now() < deadline {
            if let Ok(ev) =
                tokio::time::timeout(Duration::from_millis(100), self.next_event()).await
            {
                self.apply(ev);
            }
        }
        self.flush_events();
    }

    /// Drive the engine until `run` is final (headless runs and tests).
    pub async fn wait_final(&mut self, run: &str) -> RunStatus {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            if let Some(v) = self.state.run(run)
                && v.status.is_final()
            {
                return v.status;
            }
            tokio::select! {
                ev = self.next_event() => self.apply(ev),
                _ = tick.tick() => self.tick(),
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
