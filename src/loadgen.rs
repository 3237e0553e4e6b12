//! The scale benchmark (`cargo bench --bench scale`, docs/performance.md): a real engine (socket
//! server, token check, validation, state reduction, store) with a dashboard drawn into a
//! `TestBackend` the way the TUI draws new data (when something changed, at most `max_fps` and
//! at most every `tui::DATA_GAP`), fed by a load
//! generator that opens N authenticated rank connections over the real Unix socket and streams
//! `step`, `buckets` (3 buckets) and `heartbeat` lines at a fixed rate.
//!
//! The generator is [`generate`]: blocking, one thread, paced rounds. The bench runs it as a
//! separate process so that the engine process's CPU (`getrusage(RUSAGE_SELF)`) is ddptop's alone;
//! tests may run it as a thread.

use crate::app::{HostInfo, State, View};
use crate::engine::{Engine, EngineOptions};
use crate::protocol::{
    Backend, BucketSpan, Buckets, CommBackend, Heartbeat, Hello, Phase, Step, Timing, WorkerKind,
    WorkerMsg,
};
use crate::run::{Experiment, RunSpec, RunStatus};
use crate::supervisor::SupEvent;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What one measurement does.
#[derive(Debug, Clone)]
pub struct Options {
    pub ranks: u32,
    /// Steps per second per rank (each step: one `step` and one `buckets` line).
    pub steps_per_s: f64,
    pub duration: Duration,
    /// The dashboard's size in cells.
    pub width: u16,
    pub height: u16,
    /// Redraws per second at most (the dashboard's `refresh.max_fps`, default 20).
    pub max_fps: u32,
    /// The engine's data directory (runs.db); created, and left for the caller to remove.
    pub data_dir: PathBuf,
}

impl Options {
    pub fn new(ranks: u32, data_dir: PathBuf) -> Options {
        Options {
            ranks,
            steps_per_s: 20.0,
            duration: Duration::from_secs(10),
            width: 160,
            height: 50,
            max_fps: 20,
            data_dir,
        }
    }
}

/// Where the generator runs.
pub enum Generator {
    /// A thread of this process (its CPU then counts in this process's figures).
    Thread,
    /// A child process given `DDPTOP_SOCKET`, `DDPTOP_TOKEN`, `DDPTOP_RUN_ID` in its environment,
    /// which runs [`generate`] and prints its [`GenStats`] as one JSON line on stdout.
    Command(std::process::Command),
}

/// What the generator sent (hello lines excluded).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenStats {
    pub ranks: u32,
    pub steps: u64,
    pub buckets: u64,
    pub heartbeats: u64,
    /// Every rank's last step number (every rank sends the same steps).
    pub last_step: u64,
    /// Seconds from the first to the last line sent.
    pub seconds: f64,
}

impl GenStats {
    pub fn sent(&self) -> u64 {
        self.steps + self.buckets + self.heartbeats
    }
}

/// One measurement.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub ranks: u32,
    pub sent: GenStats,
    /// Worker messages (hello excluded) the engine took from its socket server and applied.
    pub received: u64,
    pub received_steps: u64,
    pub received_buckets: u64,
    pub received_heartbeats: u64,
    /// `step` rows the engine wrote to its store for the run.
    pub stored_steps: u64,
    /// Ranks whose step counter in the engine's state ended at the generator's last step.
    pub ranks_at_last_step: u32,
    /// Seconds of the measured window: generator start to every message applied.
    pub wall_s: f64,
    /// CPU time of this process over the window (user + system), in % of one core.
    pub cpu_pct: f64,
    /// Resident set size at the end of the window, and the peak, in bytes.
    pub rss_bytes: u64,
    pub rss_peak_bytes: u64,
    pub frames: u64,
    pub frame_p50_ms: f64,
    pub frame_p99_ms: f64,
    pub frame_max_ms: f64,
    /// Where the engine loop's time went (ms over the window): `Engine::apply`, `Engine::tick`,
    /// drawing. The rest of the CPU is the socket server's connection tasks (reading, parsing,
    /// validating) and the runtime.
    pub apply_ms: f64,
    pub tick_ms: f64,
    pub draw_ms: f64,
    /// The last frame drawn while the generator streamed, as text (`--screen` prints it).
    #[serde(default)]
    pub screen: String,
}

impl Report {
    pub fn dropped(&self) -> i64 {
        self.sent.sent() as i64 - self.received as i64
    }
}

fn hello(rank: u32, ranks: u32, token: &str, run: &str) -> WorkerMsg {
    WorkerMsg::Hello(Hello {
        token: token.to_string(),
        run_id: run.to_string(),
        local_rank: rank % 8,
        ..Hello::new(
            rank,
            ranks,
            "loadgen".into(),
            format!("cuda:{}", rank % 8),
            CommBackend::Nccl,
            WorkerKind::Train,
        )
    })
}

/// A step of `rank`: times vary a little by rank and step, so medians and the slowest ranks mean
/// something on screen.
fn step_msg(rank: u32, step: u64, t: f64) -> WorkerMsg {
    let slow = f64::from(rank % 7) * 0.4 + (step % 5) as f64 * 0.1;
    WorkerMsg::Step(Step {
        rank,
        step,
        epoch: 1,
        t,
        warmup: false,
        sync: true,
        samples: 256,
        fwd_ms: 14.2,
        bwd_ms: 28.9 + slow,
        opt_ms: 2.1,
        data_ms: 0.3,
        step_ms: 45.5 + slow,
        timing: Timing::CudaEvents,
        loss: None,
        fused: None,
        every: None,
        t_bwd: None,
        sync_ms: None,
        exposed_ms: None,
    })
}

fn buckets_msg(rank: u32, step: u64, t: f64) -> WorkerMsg {
    let span = |index: u32, bytes: u64, ready: f64, done: f64| BucketSpan {
        index,
        bytes,
        ready_ms: ready,
        start_ms: ready,
        done_ms: done,
        kernel_ms: None,
    };
    WorkerMsg::Buckets(Buckets {
        rank,
        step,
        t,
        rebuilt: true,
        bwd_compute_ms: 27.6,
        exposed_ms: 0.09,
        buckets: vec![
            span(0, 9_461_800, 4.1, 4.21),
            span(1, 26_501_120, 15.3, 15.5),
            span(2, 8_740_352, 27.6, 27.69),
        ],
        start_inferred: None,
    })
}

fn heartbeat_msg(rank: u32, step: u64, t: f64) -> WorkerMsg {
    WorkerMsg::Heartbeat(Heartbeat {
        rank,
        step,
        t,
        phase: Some(Phase::Train),
        cpu_s: None,
        coll: None,
        rendezvous: None,
    })
}

/// `msgs` in one write, as the Python client sends a step and its buckets (`send_many`).
fn send(w: &mut UnixStream, msgs: &[WorkerMsg]) -> std::io::Result<()> {
    let mut lines = String::new();
    for m in msgs {
        lines.push_str(&m.to_line());
        lines.push('\n');
    }
    w.write_all(lines.as_bytes())
}

/// The load generator: connect `ranks` ranks to `socket` with the run's token, then every
/// 1/`steps_per_s` s send each rank's `step` and `buckets` (one write, as the client sends
/// them), and each rank a `heartbeat` once a second (spread over the ranks), for `duration`.
/// Writes block when ddptop reads slower than this sends (nothing is dropped on the way: the
/// socket is a stream).
pub fn generate(
    socket: &Path,
    token: &str,
    run: &str,
    ranks: u32,
    steps_per_s: f64,
    duration: Duration,
) -> anyhow::Result<GenStats> {
    let mut conns = Vec::with_capacity(ranks as usize);
    for rank in 0..ranks {
        let mut s = UnixStream::connect(socket)?;
        send(&mut s, &[hello(rank, ranks, token, run)])?;
        let mut answer = String::new();
        BufReader::new(s.try_clone()?).read_line(&mut answer)?;
        if !answer.contains("\"welcome\"") {
            anyhow::bail!("rank {rank} not admitted: {}", answer.trim_end());
        }
        conns.push(s);
    }
    let period = Duration::from_secs_f64(1.0 / steps_per_s.max(0.1));
    let rounds = (duration.as_secs_f64() * steps_per_s.max(0.1))
        .round()
        .max(1.0) as u64;
    let per_s = steps_per_s.max(1.0).round() as u64;
    let mut st = GenStats {
        ranks,
        ..GenStats::default()
    };
    let start = Instant::now();
    for round in 0..rounds {
        let due = start + period * round as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let step = round + 1;
        let t = start.elapsed().as_secs_f64();
        for (rank, c) in (0u32..).zip(conns.iter_mut()) {
            send(c, &[step_msg(rank, step, t), buckets_msg(rank, step, t)])?;
            st.steps += 1;
            st.buckets += 1;
            // Once a second per rank, the ranks spread over the second's rounds.
            if round % per_s == u64::from(rank) % per_s {
                // Its own write: the client's heartbeat thread sends it.
                send(c, &[heartbeat_msg(rank, step, t)])?;
                st.heartbeats += 1;
            }
        }
        st.last_step = step;
    }
    st.seconds = start.elapsed().as_secs_f64();
    Ok(st)
}

/// `getrusage(RUSAGE_SELF)`: user + system CPU seconds of this process.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// (VmRSS, VmHWM) of this process, bytes.
fn rss() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Run one measurement: start an engine, open a run of `opts.ranks` ranks, start the generator,
/// drive the engine and redraw as the dashboard does until the generator is done and every line
/// it sent was applied (or 30 s more have passed), then count what arrived.
pub async fn measure(opts: &Options, generator: Generator) -> anyhow::Result<Report> {
    let mut eo = EngineOptions::new(opts.data_dir.clone());
    eo.history = 0;
    let mut state = State::new(HostInfo {
        hostname: "loadgen".into(),
        ..HostInfo::default()
    });
    state.max_k = opts.ranks;
    let mut engine = Engine::start(eo, state)?;
    let spec = RunSpec::new(Experiment::default(), opts.ranks, Backend::Nccl);
    let (run, token) = engine.open_external(spec)?;
    let view = View::default();
    let theme = crate::ui::Theme::dark();
    let keys = crate::keys::KeyMap::default();
    let mut term =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(opts.width, opts.height))?;

    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<anyhow::Result<GenStats>>();
    let socket = engine.socket_path().to_path_buf();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    start_generator(generator, opts, socket, token.clone(), run.clone(), done_tx)?;

    // As the dashboard draws new data: when something changed, no more often than max_fps and
    // `tui::DATA_GAP` (only a key press is drawn at max_fps; the generator presses none).
    let frame_gap =
        Duration::from_secs_f64(1.0 / f64::from(opts.max_fps.max(1))).max(crate::tui::DATA_GAP);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_draw = Instant::now() - frame_gap;
    let mut dirty = true;
    let mut frames: Vec<f64> = Vec::new();
    let mut rep = Report {
        ranks: opts.ranks,
        ..Report::default()
    };
    let mut sent: Option<GenStats> = None;
    let mut drain_deadline = None;
    let mut gen_done = false;
    let draw = |term: &mut Term, engine: &Engine, frames: &mut Vec<f64>| -> anyhow::Result<()> {
        let ctx = crate::ui::Ctx {
            state: engine.state(),
            view: &view,
            theme: &theme,
            keys: &keys,
        };
        let f0 = Instant::now();
        term.draw(|f| crate::ui::draw(f, &ctx))?;
        frames.push(f0.elapsed().as_secs_f64() * 1e3);
        Ok(())
    };
    loop {
        if let Some(s) = &sent
            && rep.received >= s.sent()
        {
            break;
        }
        if drain_deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let mut next_frame = None;
        if dirty {
            let due = last_draw + frame_gap;
            if Instant::now() >= due {
                draw(&mut term, &engine, &mut frames)?;
                last_draw = Instant::now();
                dirty = false;
            } else {
                next_frame = Some(due);
            }
        }
        tokio::select! {
            ev = engine.next_event() => {
                let mut count = |m: &WorkerMsg| count_received(&mut rep, m);
                match &ev {
                    SupEvent::Worker { msg, .. } => count(msg),
                    SupEvent::Lines { lines, .. } => lines.iter().for_each(|r| count(&r.msg)),
                    _ => {}
                }
                let a0 = Instant::now();
                dirty |= engine.apply(ev);
                rep.apply_ms += a0.elapsed().as_secs_f64() * 1e3;
            }
            _ = tick.tick() => {
                let k0 = Instant::now();
                dirty |= engine.tick();
                rep.tick_ms += k0.elapsed().as_secs_f64() * 1e3;
            }
            r = &mut done_rx, if !gen_done => {
                gen_done = true;
                // The screen while every rank streamed (the generator's ranks hang up next).
                rep.screen = screen_text(&term);
                sent = Some(r.map_err(|_| anyhow::anyhow!("generator thread died"))??);
                drain_deadline = Some(Instant::now() + Duration::from_secs(30));
            }
            _ = sleep_until(next_frame), if next_frame.is_some() => {}
        }
    }
    // The last state on screen too.
    draw(&mut term, &engine, &mut frames)?;
    rep.wall_s = t0.elapsed().as_secs_f64();
    rep.cpu_pct = (cpu_seconds() - cpu0) / rep.wall_s * 100.0;
    (rep.rss_bytes, rep.rss_peak_bytes) = rss();
    rep.sent = sent.unwrap_or_default();
    frame_stats(&mut rep, frames);
    if let Some(v) = engine.state().run(&run) {
        rep.ranks_at_last_step = v
            .ranks
            .values()
            .filter(|r| r.step == rep.sent.last_step)
            .count() as u32;
    }
    engine.close_external(&run, RunStatus::Completed);
    rep.stored_steps =
        crate::store::Store::open(engine.store_path())?.stored_messages(&run, "step")?;
    Ok(rep)
}

/// The generator's ranks, on a thread of this process or as a command given the socket,
/// token and run id; what it sent comes back through `done`.
fn start_generator(
    generator: Generator,
    opts: &Options,
    socket: std::path::PathBuf,
    token: String,
    run: String,
    done_tx: tokio::sync::oneshot::Sender<anyhow::Result<GenStats>>,
) -> anyhow::Result<()> {
    let (ranks, rate, duration) = (opts.ranks, opts.steps_per_s, opts.duration);
    match generator {
        Generator::Thread => {
            std::thread::spawn(move || {
                let _ = done_tx.send(generate(&socket, &token, &run, ranks, rate, duration));
            });
        }
        Generator::Command(mut cmd) => {
            let child = cmd
                .env("DDPTOP_SOCKET", &socket)
                .env("DDPTOP_TOKEN", &token)
                .env("DDPTOP_RUN_ID", &run)
                .stdout(std::process::Stdio::piped())
                .spawn()?;
            std::thread::spawn(move || {
                let r = child
                    .wait_with_output()
                    .map_err(anyhow::Error::from)
                    .and_then(|o| {
                        let text = String::from_utf8_lossy(&o.stdout);
                        serde_json::from_str::<GenStats>(text.trim()).map_err(|e| {
                            anyhow::anyhow!("generator ({}) said {text:?}: {e}", o.status)
                        })
                    });
                let _ = done_tx.send(r);
            });
        }
    }
    Ok(())
}

/// One message the engine received, counted by kind (hellos are not the load).
fn count_received(rep: &mut Report, m: &WorkerMsg) {
    match m {
        WorkerMsg::Hello(_) => return,
        WorkerMsg::Step(_) => rep.received_steps += 1,
        WorkerMsg::Buckets(_) => rep.received_buckets += 1,
        WorkerMsg::Heartbeat(_) => rep.received_heartbeats += 1,
        _ => {}
    }
    rep.received += 1;
}

/// How many frames were drawn, their total time and their median, p99 and longest.
fn frame_stats(rep: &mut Report, mut frames: Vec<f64>) {
    rep.frames = frames.len() as u64;
    rep.draw_ms = frames.iter().sum();
    frames.sort_by(f64::total_cmp);
    rep.frame_p50_ms = percentile(&frames, 0.5);
    rep.frame_p99_ms = percentile(&frames, 0.99);
    rep.frame_max_ms = frames.last().copied().unwrap_or(0.0);
}

type Term = ratatui::Terminal<ratatui::backend::TestBackend>;

fn screen_text(term: &Term) -> String {
    let buf = term.backend().buffer();
    (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn sleep_until(t: Option<Instant>) {
    if let Some(t) = t {
        tokio::time::sleep_until(t.into()).await;
    }
}

/// The table `cargo bench --bench scale` prints.
pub fn table(reports: &[Report]) -> String {
    let mut out = String::from(
        "ranks  lines/s sent  sent      received  dropped  steps stored  CPU % core  RSS MiB (peak)  frame p50 ms  frame p99 ms  apply ms  tick ms  draw ms\n",
    );
    for r in reports {
        let rate = r.sent.sent() as f64 / r.sent.seconds.max(1e-9);
        out.push_str(&format!(
            "{:>5}  {:>12.0}  {:>8}  {:>8}  {:>7}  {:>12}  {:>10.1}  {:>7.1} ({:>5.1})  {:>12.2}  {:>12.2}  {:>8.0}  {:>7.0}  {:>7.0}\n",
            r.ranks,
            rate,
            r.sent.sent(),
            r.received,
            r.dropped(),
            r.stored_steps,
            r.cpu_pct,
            r.rss_bytes as f64 / 1048576.0,
            r.rss_peak_bytes as f64 / 1048576.0,
            r.frame_p50_ms,
            r.frame_p99_ms,
            r.apply_ms,
            r.tick_ms,
            r.draw_ms,
        ));
    }
    out
}
