//! The hang watchdog: alive (messages arrive) but no step progress past a threshold derived from
//! observed step times. Pure: it looks at a `RunView` and a time, and says why a run is hung
//! (`Verdict`) and what each rank was doing (`hang_report`).

use crate::protocol::Phase;
use crate::run::{RankView, RunStatus, RunView};
use crate::util::median;
use std::fmt;
use std::time::{Duration, Instant};

/// What a rank whose steps stopped was doing at its last heartbeat.
#[derive(Debug, Clone, PartialEq)]
pub enum Activity {
    /// A collective started and not completed (torch's flight recorder, read in the process).
    InComm {
        op: String,
        seq: Option<u64>,
        age_s: f64,
    },
    /// Using at least `BUSY_CORES` of CPU with no collective pending (or no recorder to ask):
    /// computing (autotuning, compiling, a long step), or spinning in a GPU wait.
    Computing { cores: f64 },
    /// Using almost no CPU and no collective pending: waiting on something outside
    /// communication (a data loader, a lock, a sleep).
    Idle { cores: f64 },
    /// The worker reports neither its CPU time nor its collectives.
    Unknown,
}

/// CPU use (cores) from which a rank counts as computing.
pub const BUSY_CORES: f64 = 0.25;
/// CPU time is judged over heartbeats at least this far apart (s).
const CPU_WINDOW_S: f64 = 2.0;
/// A collectives report older than this many heartbeat periods (before the rank's last message)
/// is no longer evidence.
const COLL_FRESH_BEATS: f64 = 3.0;

impl Activity {
    /// The rank's activity from its last heartbeats, judged against its own last message (so
    /// the answer depends only on what the rank sent).
    pub fn of(r: &RankView, heartbeat_s: f64) -> Activity {
        let Some(seen) = r.last_seen else {
            return Activity::Unknown;
        };
        let fresh = r.coll.as_ref().filter(|(at, _)| {
            seen.saturating_duration_since(*at).as_secs_f64() <= heartbeat_s * COLL_FRESH_BEATS
        });
        if let Some((_, c)) = fresh
            && c.pending > 0
        {
            return Activity::InComm {
                op: c.op.clone().unwrap_or_else(|| "collective".into()),
                seq: c.seq,
                age_s: c.age_s.unwrap_or(0.0),
            };
        }
        match r.cpu_cores(CPU_WINDOW_S) {
            Some(cores) if cores >= BUSY_CORES => Activity::Computing { cores },
            Some(cores) => Activity::Idle { cores },
            None => Activity::Unknown,
        }
    }

    fn computing(&self) -> bool {
        matches!(self, Activity::Computing { .. })
    }
}

impl fmt::Display for Activity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Activity::InComm { op, seq, age_s } => {
                write!(f, "inside {op}")?;
                if let Some(s) = seq {
                    write!(f, " #{s}")?;
                }
                write!(f, " for {age_s:.1} s (started, not completed)")
            }
            Activity::Computing { cores } => write!(
                f,
                "computing ({:.0}% of a core), no collective pending",
                cores * 100.0
            ),
            Activity::Idle { cores } => write!(
                f,
                "process idle ({:.0}% of a core), no collective pending",
                cores * 100.0
            ),
            Activity::Unknown => f.write_str("no evidence from the worker"),
        }
    }
}

/// Why progress stopped, as far as the evidence says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
pub enum Cause {
    /// A collective started and not completed on some rank, and no rank is computing.
    #[strum(serialize = "communication hang")]
    Communication,
    /// No collective pending and the process idle: a data loader, a lock, a sleep.
    #[strum(serialize = "stalled outside communication")]
    Stalled,
    /// Busy with no collective pending for longer than the first-steps allowance.
    #[strum(serialize = "no progress while computing")]
    Computing,
    /// The worker gave no evidence; judged by the step threshold alone.
    #[strum(serialize = "no step progress")]
    NoEvidence,
}

impl Cause {
    /// How the verdict names it (`hung: communication hang …`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Why the watchdog calls a run hung.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Ranks that never said hello within the start-up allowance.
    NeverConnected { ranks: usize, startup_s: f64 },
    /// Ranks whose messages stopped: (rank, seconds quiet, last step).
    Silent(Vec<(u32, f64, u64)>),
    /// Ranks that heartbeat but make no step progress: (rank, step, seconds idle, activity).
    Stuck {
        ranks: Vec<(u32, u64, f64, Activity)>,
        threshold_s: f64,
        cause: Cause,
    },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::NeverConnected { ranks, startup_s } => {
                write!(f, "{ranks} rank(s) never connected within {startup_s:.0} s")
            }
            Verdict::Silent(v) => {
                let parts: Vec<String> = v
                    .iter()
                    .map(|(rank, quiet, step)| {
                        format!("rank {rank} silent for {quiet:.1} s (no heartbeat) at step {step}")
                    })
                    .collect();
                f.write_str(&parts.join("; "))
            }
            Verdict::Stuck {
                ranks,
                threshold_s,
                cause,
            } => {
                let parts: Vec<String> = ranks
                    .iter()
                    .map(|(rank, step, idle, act)| match act {
                        Activity::Unknown => {
                            format!("rank {rank} alive but stuck at step {step} for {idle:.1} s")
                        }
                        a => format!(
                            "rank {rank} alive but stuck at step {step} for {idle:.1} s: {a}"
                        ),
                    })
                    .collect();
                write!(
                    f,
                    "{}: {} (threshold {threshold_s:.3} s)",
                    cause.as_str(),
                    parts.join("; ")
                )
            }
        }
    }
}

/// The evidence recorded when a run hangs: the verdict, then each rank's step, phase and last
/// progress (the flight recorder's summary is appended when it arrives).
pub fn hang_report(run: &RunView, now: Instant, verdict: &Verdict) -> Vec<String> {
    let mut report = vec![format!("hang detected: {verdict}")];
    for r in run.ranks.values() {
        let last = r
            .last_progress
            .map(|p| {
                format!(
                    "{:.3} s ago",
                    now.saturating_duration_since(p).as_secs_f64()
                )
            })
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
    report
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchdogConfig {
    /// No step threshold is shorter than this (s).
    pub floor_s: f64,
    /// Threshold = factor × median gap between step advances.
    pub factor: f64,
    /// Allowed time from launch while a rank is in `init` (imports, process group, data, model).
    pub startup_s: f64,
    /// Allowed time in `ddp_init` (DDP's constructor and its parameter broadcast: a deadlock
    /// there, as in the book's PCIe machine, must be caught fast).
    pub ddp_init_s: f64,
    /// Until a rank has completed `first_steps` steps (the first, and the one after DDP's
    /// bucket rebuild), or while it says it compiles or autotunes, progress may stop this long
    /// (cudnn.benchmark, torch.compile, XLA, lazy NCCL set-up, a cold loader) unless the
    /// evidence says communication hangs.
    pub first_steps_s: f64,
    pub first_steps: u64,
    /// The heartbeat period ddptop asks workers for (`welcome.heartbeat_s`).
    pub heartbeat_s: f64,
    /// A rank is silent after this many heartbeat periods without any message.
    pub silent_beats: f64,
    /// After every rank said `bye`, how long the launcher gets to exit (teardown).
    pub teardown_s: f64,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig {
            floor_s: 10.0,
            factor: 10.0,
            startup_s: 180.0,
            ddp_init_s: 20.0,
            first_steps_s: 120.0,
            first_steps: 2,
            heartbeat_s: 1.0,
            silent_beats: 10.0,
            teardown_s: 30.0,
        }
    }
}

impl WatchdogConfig {
    pub fn threshold_s(&self, run: &RunView) -> f64 {
        let gaps: Vec<f64> = run.clock.progress_gaps.iter().copied().collect();
        match median(&gaps) {
            Some(m) => (m * self.factor).max(self.floor_s),
            None => self.floor_s,
        }
    }

    pub fn silent_s(&self) -> f64 {
        self.heartbeat_s * self.silent_beats
    }

    /// Whether a rank is still in its first steps (or says it compiles or autotunes).
    pub fn warming_up(&self, r: &RankView) -> bool {
        matches!(r.phase, Some(Phase::Compile | Phase::Autotune))
            || (r.step < self.first_steps
                && matches!(r.phase, Some(Phase::Train | Phase::Probe | Phase::Bench)))
    }
}

fn after(t: Instant, s: f64) -> Instant {
    t + Duration::from_secs_f64(s.clamp(0.0, 1e9))
}

/// One rank's stuck deadline: from `since`, `base` seconds by the step threshold (or its
/// phase's allowance), `extended` seconds when the evidence says wait.
struct StuckDue {
    since: Instant,
    base: f64,
    extended: f64,
    warm: bool,
}

/// The stuck deadline of one connected rank that has not said bye; `None` when it has, and the
/// silence deadline beside it.
fn rank_dues(
    r: &RankView,
    started: Instant,
    threshold: f64,
    cfg: &WatchdogConfig,
) -> Option<(Instant, Instant, StuckDue)> {
    if r.said_bye || r.phase == Some(Phase::Done) {
        return None;
    }
    let seen = r.last_seen?;
    let silent_at = after(seen, cfg.silent_s());
    let stuck = match r.phase {
        // Start-up (imports, process group, data, model) is measured from the launch.
        None | Some(Phase::Init) => StuckDue {
            since: started,
            base: cfg.startup_s,
            extended: cfg.startup_s,
            warm: false,
        },
        Some(Phase::DdpInit) => StuckDue {
            since: r.last_progress.unwrap_or(started),
            base: cfg.ddp_init_s,
            extended: cfg.ddp_init_s,
            warm: false,
        },
        Some(_) => StuckDue {
            since: r.last_progress.unwrap_or(started),
            base: threshold,
            extended: threshold.max(cfg.first_steps_s),
            warm: cfg.warming_up(r),
        },
    };
    Some((seen, silent_at, stuck))
}

/// One stuck-candidate rank: past its base deadline, with what it was doing.
struct Candidate<'a> {
    rank: &'a RankView,
    due: StuckDue,
    activity: Activity,
}

/// Every rank still judged by the stuck rule (connected, not finished), with its activity.
fn candidates<'a>(
    run: &'a RunView,
    started: Instant,
    threshold: f64,
    cfg: &WatchdogConfig,
) -> Vec<Candidate<'a>> {
    run.ranks
        .values()
        .filter_map(|r| {
            let (_, _, due) = rank_dues(r, started, threshold, cfg)?;
            Some(Candidate {
                rank: r,
                activity: Activity::of(r, cfg.heartbeat_s),
                due,
            })
        })
        .collect()
}

/// What the live ranks are doing together, which decides how long each of them may wait.
/// Computed once per look at a run: per candidate, it made every look quadratic in the ranks
/// (a million steps at 1,024 ranks, several times a second; docs/performance.md).
struct Peers {
    someone_computes: bool,
    /// Every live rank is inside a collective.
    comm_hangs: bool,
}

impl Peers {
    fn of(all: &[Candidate]) -> Peers {
        Peers {
            someone_computes: all.iter().any(|o| o.activity.computing()),
            comm_hangs: !all.is_empty()
                && all
                    .iter()
                    .all(|o| matches!(o.activity, Activity::InComm { .. })),
        }
    }
}

/// How long a candidate may go without progress, given what every live rank is doing: a rank
/// computing with nothing pending is a slow step, and its peers waiting in a collective for it
/// are not hung; a rank in its first steps waits unless every rank is inside a collective.
fn allowed_s(c: &Candidate, peers: &Peers) -> f64 {
    let wait = match c.activity {
        Activity::Computing { .. } => true,
        Activity::InComm { .. } => peers.someone_computes || (c.due.warm && !peers.comm_hangs),
        Activity::Idle { .. } | Activity::Unknown => c.due.warm && !peers.comm_hangs,
    };
    if wait { c.due.extended } else { c.due.base }
}

/// Why progress stopped, from every live rank's activity: a rank idle with nothing pending
/// while its peers wait inside a collective stalled outside communication (the peers are its
/// victims); every rank inside a collective is a communication hang.
fn cause_of(all: &[&Candidate]) -> Cause {
    let in_comm = |c: &&Candidate| matches!(c.activity, Activity::InComm { .. });
    let idle = |c: &&Candidate| matches!(c.activity, Activity::Idle { .. });
    if all.iter().any(|c| c.activity.computing()) {
        Cause::Computing
    } else if all.iter().any(idle) && all.iter().all(|c| idle(c) || in_comm(c)) {
        Cause::Stalled
    } else if all.iter().any(in_comm) {
        Cause::Communication
    } else {
        Cause::NoEvidence
    }
}

/// The earliest instant at which `check` would call the run hung if no message arrives before
/// it: the engine wakes exactly then instead of on its next periodic tick.
///
/// Deadlines at or before `fired` (the last one the engine woke for) are left out, so a base
/// deadline that passed while the evidence said wait does not hide the later allowance.
pub fn next_deadline(
    run: &RunView,
    cfg: &WatchdogConfig,
    fired: Option<Instant>,
) -> Option<Instant> {
    if run.status != RunStatus::Running && run.status != RunStatus::Starting {
        return None;
    }
    let started = run.clock.started?;
    let threshold = cfg.threshold_s(run);
    let mut next: Option<Instant> = None;
    let mut consider = |t: Instant| {
        if fired.is_none_or(|f| t > f) {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
    };
    for r in run.ranks.values() {
        if r.last_seen.is_none() {
            consider(after(started, cfg.startup_s));
        }
        if let Some((_, silent_at, _)) = rank_dues(r, started, threshold, cfg) {
            consider(silent_at);
        }
    }
    // Until its base deadline a rank is judged by it; after, by what the evidence allows.
    let all = candidates(run, started, threshold, cfg);
    let peers = Peers::of(&all);
    for c in &all {
        let base = after(c.due.since, c.due.base);
        consider(base);
        consider(after(c.due.since, allowed_s(c, &peers)));
    }
    next
}

/// `Some(verdict)` when the run is hung now.
pub fn check(run: &RunView, now: Instant, cfg: &WatchdogConfig) -> Option<Verdict> {
    if run.status != RunStatus::Running && run.status != RunStatus::Starting {
        return None;
    }
    let started = run.clock.started?;
    let threshold = cfg.threshold_s(run);
    let mut silent = Vec::new();
    for r in run.ranks.values() {
        let Some((seen, silent_at, _)) = rank_dues(r, started, threshold, cfg) else {
            continue;
        };
        if now >= silent_at {
            silent.push((r.rank, now.duration_since(seen).as_secs_f64(), r.step));
        }
    }
    let unconnected = run.ranks.values().filter(|r| r.last_seen.is_none()).count();
    if unconnected > 0 && now >= after(started, cfg.startup_s) {
        return Some(Verdict::NeverConnected {
            ranks: unconnected,
            startup_s: cfg.startup_s,
        });
    }
    if !silent.is_empty() {
        return Some(Verdict::Silent(silent));
    }
    // Every live rank is the context (what its peers do decides how long a rank may wait);
    // the ones past their allowance make the verdict.
    let all = candidates(run, started, threshold, cfg);
    let peers = Peers::of(&all);
    let stuck: Vec<(&Candidate, f64)> = all
        .iter()
        .map(|c| (c, allowed_s(c, &peers)))
        .filter(|(c, allowed)| now >= after(c.due.since, *allowed))
        .collect();
    if stuck.is_empty() {
        return None;
    }
    let threshold_s = stuck.iter().map(|(_, a)| *a).fold(0.0, f64::max);
    // Name every rank that stopped too (a peer that stopped a moment later is the same event),
    // so the stalled rank is named beside the ones waiting for it.
    let who: Vec<&Candidate> = all
        .iter()
        .filter(|c| {
            now.duration_since(c.due.since).as_secs_f64() >= c.due.base.min(threshold_s) / 2.0
        })
        .collect();
    Some(Verdict::Stuck {
        cause: cause_of(&who),
        threshold_s,
        ranks: who
            .iter()
            .map(|c| {
                (
                    c.rank.rank,
                    c.rank.step,
                    now.duration_since(c.due.since).as_secs_f64(),
                    c.activity.clone(),
                )
            })
            .collect(),
    })
}

/// What the watchdog says of a live run now, for the Ranks pane and the log: warming up,
/// compiling, or a slow step it is waiting out, with the allowance. `None` when steps flow.
pub fn live_note(run: &RunView, now: Instant, cfg: &WatchdogConfig) -> Option<String> {
    if run.status != RunStatus::Running {
        return None;
    }
    let started = run.clock.started?;
    let threshold = cfg.threshold_s(run);
    let all = candidates(run, started, threshold, cfg);
    let peers = Peers::of(&all);
    let waited = |c: &&Candidate| now >= after(c.due.since, c.due.base);
    if let Some(c) = all
        .iter()
        .filter(waited)
        .find(|c| allowed_s(c, &peers) > c.due.base)
    {
        let idle = now.duration_since(c.due.since).as_secs_f64();
        let what = match (&c.activity, c.due.warm) {
            (Activity::Computing { .. }, false) => {
                "slow step: computing, no communication pending".to_string()
            }
            (Activity::InComm { op, .. }, false) => {
                format!("waiting in {op} for a rank that computes")
            }
            (a, _) => format!("warming up: {} ({a})", warm_label(c.rank)),
        };
        return Some(format!(
            "rank {}: {what}, {idle:.0} s of {:.0} s allowed",
            c.rank.rank, c.due.extended
        ));
    }
    let warm: Vec<&RankView> = run
        .ranks
        .values()
        .filter(|r| !r.said_bye && cfg.warming_up(r))
        .collect();
    let r = warm.first()?;
    Some(format!(
        "warming up: {} (hang threshold {:.0} s until step {})",
        warm_label(r),
        threshold.max(cfg.first_steps_s),
        cfg.first_steps
    ))
}

fn warm_label(r: &RankView) -> &'static str {
    match r.phase {
        Some(Phase::Compile) => "compiling",
        Some(Phase::Autotune) => "autotuning (cudnn.benchmark)",
        _ if r.step == 0 => "first step",
        _ => "first steps",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Backend, CollState};
    use crate::run::{Experiment, RunSpec};
    use std::time::Duration;

    /// The causes' words as the hand-written table spelled them (issue 49).
    #[test]
    fn cause_names_are_the_old_names() {
        use strum::VariantArray;
        let names: Vec<&str> = Cause::VARIANTS.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "communication hang",
                "stalled outside communication",
                "no progress while computing",
                "no step progress",
            ]
        );
    }

    fn run(now: Instant) -> RunView {
        let spec = RunSpec::new(Experiment::Weak, 2, Backend::Sim);
        let mut r = RunView::new("r".into(), spec, now, 0.0);
        r.status = RunStatus::Running;
        r
    }

    #[test]
    fn threshold_follows_step_times_with_a_floor() {
        let now = Instant::now();
        let mut r = run(now);
        let cfg = WatchdogConfig::default();
        assert_eq!(cfg.threshold_s(&r), 10.0);
        r.clock.progress_gaps.extend([0.05, 0.05, 0.06]);
        assert_eq!(cfg.threshold_s(&r), 10.0);
        r.clock.progress_gaps.clear();
        r.clock.progress_gaps.extend([2.0, 2.0, 3.0]);
        assert_eq!(cfg.threshold_s(&r), 20.0);
    }

    #[test]
    fn heartbeating_rank_without_progress_is_hung() {
        let t0 = Instant::now();
        let mut r = run(t0);
        for rank in r.ranks.values_mut() {
            rank.last_seen = Some(t0 + Duration::from_secs(11));
            rank.last_progress = Some(t0);
            rank.step = 5;
            rank.phase = Some(Phase::Train);
        }
        let cfg = WatchdogConfig::default();
        assert!(check(&r, t0 + Duration::from_secs(9), &cfg).is_none());
        let why = check(&r, t0 + Duration::from_millis(11_500), &cfg)
            .unwrap()
            .to_string();
        assert!(why.contains("stuck at step 5"), "{why}");
    }

    #[test]
    fn first_steps_get_the_first_steps_allowance_on_every_backend() {
        let t0 = Instant::now();
        let mut r = run(t0);
        let cfg = WatchdogConfig::default();
        for backend in [Backend::Gloo, Backend::Nccl, Backend::Sim] {
            r.spec.backend = backend;
            for rank in r.ranks.values_mut() {
                rank.last_seen = Some(t0 + Duration::from_secs(60));
                rank.last_progress = Some(t0); // entered phase train, no step yet
                rank.phase = Some(Phase::Train);
                rank.step = 0;
            }
            assert!(check(&r, t0 + Duration::from_secs(60), &cfg).is_none());
            assert!(
                live_note(&r, t0 + Duration::from_secs(60), &cfg)
                    .unwrap()
                    .contains("warming up: first step")
            );
            // Step 1 done, the step after the bucket rebuild still allowed.
            for rank in r.ranks.values_mut() {
                rank.step = 1;
            }
            assert!(check(&r, t0 + Duration::from_secs(60), &cfg).is_none());
            // Past the allowance it is a hang, named as one without evidence.
            for rank in r.ranks.values_mut() {
                rank.last_seen = Some(t0 + Duration::from_secs(120));
            }
            let v = check(&r, t0 + Duration::from_secs(120), &cfg).unwrap();
            assert!(v.to_string().contains("threshold 120.000 s"), "{v}");
            // After the first steps, the steady threshold.
            for rank in r.ranks.values_mut() {
                rank.step = 2;
                rank.last_seen = Some(t0 + Duration::from_secs(11));
            }
            assert!(check(&r, t0 + Duration::from_secs(11), &cfg).is_some());
        }
    }

    fn beat(r: &mut RunView, rank: u32, at: Instant, cpu: f64, coll: Option<CollState>) {
        let v = r.ranks.get_mut(&rank).unwrap();
        v.last_seen = Some(at);
        v.cpu.push_back((at, cpu));
        if let Some(c) = coll {
            v.coll = Some((at, c));
        }
    }

    fn pending(op: &str, seq: u64, age: f64) -> CollState {
        CollState {
            pending: 1,
            op: Some(op.into()),
            seq: Some(seq),
            age_s: Some(age),
            last_done: Some(seq - 1),
            bytes: None,
        }
    }

    fn nothing_pending() -> CollState {
        CollState {
            pending: 0,
            op: None,
            seq: None,
            age_s: None,
            last_done: Some(7),
            bytes: None,
        }
    }

    /// Two ranks past their first steps, stopped at step 5 since `t0`, heartbeating each
    /// second until `t0 + secs` with `cpu(rank, i)` CPU seconds and `coll(rank)`.
    fn stopped(
        secs: u64,
        cpu: impl Fn(u32, u64) -> f64,
        coll: impl Fn(u32) -> Option<CollState>,
    ) -> (RunView, Instant) {
        let t0 = Instant::now();
        let mut r = run(t0);
        r.spec.backend = Backend::Nccl;
        connected(&mut r, t0, t0, Phase::Train);
        for rank in r.ranks.values_mut() {
            rank.step = 5;
        }
        for i in 0..=secs {
            for rank in 0..2 {
                beat(
                    &mut r,
                    rank,
                    t0 + Duration::from_secs(i),
                    cpu(rank, i),
                    coll(rank),
                );
            }
        }
        (r, t0)
    }

    #[test]
    fn a_busy_rank_with_nothing_pending_is_a_slow_step_not_a_hang() {
        // Rank 0 computes (a whole core); rank 1 waits for it in an all-reduce.
        let (r, t0) = stopped(
            30,
            |rank, i| if rank == 0 { i as f64 } else { 0.01 * i as f64 },
            |rank| {
                Some(if rank == 0 {
                    nothing_pending()
                } else {
                    pending("nccl:all_reduce", 8, 29.0)
                })
            },
        );
        let cfg = WatchdogConfig::default();
        let now = t0 + Duration::from_secs(30);
        assert!(check(&r, now, &cfg).is_none());
        let note = live_note(&r, now, &cfg).unwrap();
        assert!(
            note.contains("slow step: computing, no communication pending"),
            "{note}"
        );
        // Next: the silence deadline (10 s after the last beat), then the allowance.
        assert_eq!(
            next_deadline(&r, &cfg, Some(t0 + Duration::from_secs(10))),
            Some(t0 + Duration::from_secs(40))
        );
        assert_eq!(
            next_deadline(&r, &cfg, Some(t0 + Duration::from_secs(40))),
            Some(t0 + Duration::from_secs(120))
        );
        // Heartbeating and busy all along, it is still hung at the allowance.
        let (r, t0) = stopped(
            120,
            |rank, i| if rank == 0 { i as f64 } else { 0.01 * i as f64 },
            |rank| {
                Some(if rank == 0 {
                    nothing_pending()
                } else {
                    pending("nccl:all_reduce", 8, 119.0)
                })
            },
        );
        assert!(check(&r, t0 + Duration::from_millis(119_900), &cfg).is_none());
        let v = check(&r, t0 + Duration::from_secs(120), &cfg).unwrap();
        assert!(
            v.to_string().starts_with("no progress while computing"),
            "{v}"
        );
    }

    #[test]
    fn every_rank_inside_a_collective_is_a_communication_hang_at_the_threshold() {
        // CPU spins in the GPU wait: busy, but a collective is pending on both ranks.
        let (r, t0) = stopped(
            10,
            |_, i| i as f64,
            |_| Some(pending("nccl:all_reduce", 8, 9.5)),
        );
        let cfg = WatchdogConfig::default();
        let v = check(&r, t0 + Duration::from_secs(10), &cfg).unwrap();
        let text = v.to_string();
        assert!(text.starts_with("communication hang"), "{text}");
        assert!(text.contains("inside nccl:all_reduce #8"), "{text}");
        assert!(text.contains("threshold 10.000 s"), "{text}");
    }

    #[test]
    fn an_idle_rank_with_nothing_pending_is_stalled() {
        let (r, t0) = stopped(10, |_, i| 0.001 * i as f64, |_| Some(nothing_pending()));
        let v = check(&r, t0 + Duration::from_secs(10), &WatchdogConfig::default()).unwrap();
        assert!(
            v.to_string().starts_with("stalled outside communication"),
            "{v}"
        );
        assert!(matches!(v, Verdict::Stuck { .. }));
    }

    #[test]
    fn an_idle_rank_whose_peer_waits_in_a_collective_is_named_as_the_stall() {
        // Rank 1 sleeps outside communication; rank 0 waits for it inside the all-reduce.
        let (r, t0) = stopped(
            10,
            |_, i| 0.001 * i as f64,
            |rank| {
                Some(if rank == 0 {
                    pending("gloo:all_reduce", 13, 9.0)
                } else {
                    nothing_pending()
                })
            },
        );
        let v = check(&r, t0 + Duration::from_secs(10), &WatchdogConfig::default()).unwrap();
        let text = v.to_string();
        assert!(text.starts_with("stalled outside communication"), "{text}");
        assert!(
            text.contains(
                "rank 0 alive but stuck at step 5 for 10.0 s: inside gloo:all_reduce #13"
            ),
            "{text}"
        );
        assert!(
            text.contains("rank 1 alive but stuck at step 5 for 10.0 s: process idle"),
            "{text}"
        );
    }

    #[test]
    fn activity_is_what_the_rank_does_now_not_over_its_whole_history() {
        // A whole core for 6 s of training, then 3 s asleep: idle now.
        let (r, _) = stopped(9, |_, i| i.min(6) as f64, |_| None);
        let act = Activity::of(&r.ranks[&0], 1.0);
        assert!(
            matches!(act, Activity::Idle { cores } if cores < 0.05),
            "{act:?}"
        );
        // And the other way round: asleep, then busy for the last 3 s.
        let (r, _) = stopped(9, |_, i| i.saturating_sub(6) as f64, |_| None);
        let act = Activity::of(&r.ranks[&0], 1.0);
        assert!(
            matches!(act, Activity::Computing { cores } if cores > 0.95),
            "{act:?}"
        );
    }

    #[test]
    fn a_communication_hang_in_the_first_steps_is_not_waited_out() {
        let (mut r, t0) = stopped(
            10,
            |_, i| i as f64,
            |_| Some(pending("nccl:all_reduce", 3, 9.5)),
        );
        for rank in r.ranks.values_mut() {
            rank.step = 0;
        }
        let cfg = WatchdogConfig::default();
        let v = check(&r, t0 + Duration::from_secs(10), &cfg).unwrap();
        assert!(v.to_string().starts_with("communication hang"), "{v}");
        // Without the recorder's word, the first step gets its allowance.
        for rank in r.ranks.values_mut() {
            rank.coll = None;
        }
        assert!(check(&r, t0 + Duration::from_secs(10), &cfg).is_none());
    }

    #[test]
    fn compiling_and_autotuning_get_the_allowance_after_the_first_steps_too() {
        let (mut r, t0) = stopped(30, |_, i| 0.001 * i as f64, |_| None);
        let cfg = WatchdogConfig::default();
        for phase in [Phase::Compile, Phase::Autotune] {
            for rank in r.ranks.values_mut() {
                rank.phase = Some(phase);
            }
            assert!(check(&r, t0 + Duration::from_secs(30), &cfg).is_none());
            let note = live_note(&r, t0 + Duration::from_secs(30), &cfg).unwrap();
            assert!(
                note.contains(if phase == Phase::Compile {
                    "compiling"
                } else {
                    "autotuning"
                }),
                "{note}"
            );
        }
    }

    #[test]
    fn silent_rank_is_reported_as_silent() {
        let t0 = Instant::now();
        let mut r = run(t0);
        for rank in r.ranks.values_mut() {
            rank.last_seen = Some(t0);
            rank.last_progress = Some(t0);
        }
        r.ranks.get_mut(&0).unwrap().last_seen = Some(t0 + Duration::from_secs(12));
        r.ranks.get_mut(&0).unwrap().last_progress = Some(t0 + Duration::from_secs(12));
        let why = check(&r, t0 + Duration::from_secs(12), &WatchdogConfig::default())
            .unwrap()
            .to_string();
        assert!(why.contains("rank 1 silent"), "{why}");
    }

    #[test]
    fn finished_runs_are_never_hung() {
        let t0 = Instant::now();
        let mut r = run(t0);
        r.status = RunStatus::Completed;
        assert!(
            check(
                &r,
                t0 + Duration::from_secs(1000),
                &WatchdogConfig::default()
            )
            .is_none()
        );
    }

    fn connected(r: &mut RunView, seen: Instant, progress: Instant, phase: Phase) {
        for rank in r.ranks.values_mut() {
            rank.last_seen = Some(seen);
            rank.last_progress = Some(progress);
            rank.phase = Some(phase);
        }
    }

    #[test]
    fn init_gets_the_startup_allowance_even_on_gpus() {
        let t0 = Instant::now();
        let mut r = run(t0);
        r.spec.backend = Backend::Nccl;
        r.clock.started = Some(t0);
        let cfg = WatchdogConfig::default();
        // Heartbeating in `init` for two minutes (process group, data, model) is not a hang.
        connected(&mut r, t0 + Duration::from_secs(120), t0, Phase::Init);
        assert!(check(&r, t0 + Duration::from_secs(120), &cfg).is_none());
        connected(&mut r, t0 + Duration::from_secs(181), t0, Phase::Init);
        let why = check(&r, t0 + Duration::from_secs(181), &cfg).unwrap();
        assert!(why.to_string().contains("stuck at step 0"), "{why}");
    }

    #[test]
    fn ddp_init_has_its_own_short_threshold() {
        let t0 = Instant::now();
        let mut r = run(t0);
        r.spec.backend = Backend::Nccl;
        r.clock.started = Some(t0);
        let cfg = WatchdogConfig::default();
        let entered = t0 + Duration::from_secs(40); // after a long init
        let now = entered + Duration::from_millis(19_990);
        connected(&mut r, now, entered, Phase::DdpInit);
        assert!(check(&r, now, &cfg).is_none());
        let deadline = next_deadline(&r, &cfg, None).unwrap();
        assert_eq!(deadline, entered + Duration::from_secs(20));
        let why = check(&r, deadline, &cfg).unwrap().to_string();
        assert!(why.contains("threshold 20.000 s"), "{why}");
    }

    #[test]
    fn step_threshold_starts_at_train_entry() {
        let t0 = Instant::now();
        let mut r = run(t0);
        r.spec.backend = Backend::Nccl;
        r.clock.started = Some(t0);
        let cfg = WatchdogConfig::default();
        let train = t0 + Duration::from_secs(100);
        connected(&mut r, train + Duration::from_secs(9), train, Phase::Train);
        assert!(check(&r, train + Duration::from_secs(9), &cfg).is_none());
        assert_eq!(
            next_deadline(&r, &cfg, None),
            Some(train + Duration::from_secs(10))
        );
    }

    #[test]
    fn a_silent_rank_is_judged_by_missed_heartbeats_not_the_step_threshold() {
        let t0 = Instant::now();
        let mut r = run(t0);
        r.clock.started = Some(t0);
        // 30 s steps (a CPU run): the step threshold is 300 s.
        r.clock.progress_gaps.extend([30.0, 30.0, 30.0]);
        let cfg = WatchdogConfig::default();
        assert_eq!(cfg.threshold_s(&r), 300.0);
        connected(&mut r, t0, t0, Phase::Train);
        r.ranks.get_mut(&0).unwrap().last_seen = Some(t0 + Duration::from_secs(10));
        assert!(check(&r, t0 + Duration::from_millis(9_999), &cfg).is_none());
        assert_eq!(
            next_deadline(&r, &cfg, None),
            Some(t0 + Duration::from_secs(10))
        );
        let why = check(&r, t0 + Duration::from_secs(10), &cfg)
            .unwrap()
            .to_string();
        assert!(why.contains("rank 1 silent for 10.0 s"), "{why}");
        assert!(!why.contains("rank 0"), "{why}");
    }

    #[test]
    fn the_deadline_is_the_instant_the_verdict_flips() {
        let t0 = Instant::now();
        let mut r = run(t0);
        r.clock.started = Some(t0);
        r.clock.progress_gaps.extend([0.31, 0.29, 0.3]);
        let cfg = WatchdogConfig {
            floor_s: 2.5,
            ..WatchdogConfig::default()
        };
        connected(&mut r, t0 + Duration::from_secs(2), t0, Phase::Train);
        for rank in r.ranks.values_mut() {
            rank.step = 7;
        }
        let d = next_deadline(&r, &cfg, None).unwrap();
        assert_eq!(d, t0 + Duration::from_secs(3));
        assert!(check(&r, d - Duration::from_millis(1), &cfg).is_none());
        assert!(check(&r, d, &cfg).is_some());
        r.status = RunStatus::Completed;
        assert_eq!(next_deadline(&r, &cfg, None), None);
    }
}
