//! The hang watchdog: alive (messages arrive) but no step progress past a threshold derived from
//! observed step times. Pure: it looks at a `RunView` and a time, and says why a run is hung
//! (`Verdict`) and what each rank was doing (`hang_report`).

use crate::protocol::{Backend, Phase};
use crate::run::{RankView, RunStatus, RunView};
use crate::util::median;
use std::fmt;
use std::time::{Duration, Instant};

/// Why the watchdog calls a run hung.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Ranks that never said hello within the start-up allowance.
    NeverConnected { ranks: usize, startup_s: f64 },
    /// Ranks whose messages stopped: (rank, seconds quiet, last step).
    Silent(Vec<(u32, f64, u64)>),
    /// Ranks that heartbeat but make no step progress: (rank, step, seconds idle).
    Stuck {
        ranks: Vec<(u32, u64, f64)>,
        threshold_s: f64,
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
            Verdict::Stuck { ranks, threshold_s } => {
                let parts: Vec<String> = ranks
                    .iter()
                    .map(|(rank, step, idle)| {
                        format!("rank {rank} alive but stuck at step {step} for {idle:.1} s")
                    })
                    .collect();
                write!(f, "{} (threshold {threshold_s:.3} s)", parts.join("; "))
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
            heartbeat_s: 1.0,
            silent_beats: 10.0,
            teardown_s: 30.0,
        }
    }
}

impl WatchdogConfig {
    pub fn threshold_s(&self, run: &RunView) -> f64 {
        let gaps: Vec<f64> = run.progress_gaps.iter().copied().collect();
        match median(&gaps) {
            Some(m) => (m * self.factor).max(self.floor_s),
            None => self.floor_s,
        }
    }

    pub fn silent_s(&self) -> f64 {
        self.heartbeat_s * self.silent_beats
    }
}

fn after(t: Instant, s: f64) -> Instant {
    t + Duration::from_secs_f64(s.clamp(0.0, 1e9))
}

/// What one rank is judged by now: the instant it becomes hung if nothing arrives, and how.
enum Due {
    Silent { at: Instant, seen: Instant },
    Stuck { at: Instant, since: Instant },
}

impl Due {
    fn at(&self) -> Instant {
        match self {
            Due::Silent { at, .. } | Due::Stuck { at, .. } => *at,
        }
    }
}

/// The deadlines of one connected rank that has not said bye: silence (missed heartbeats), and
/// no progress under the allowance of its phase.
fn rank_dues(
    r: &RankView,
    started: Instant,
    threshold: f64,
    cfg: &WatchdogConfig,
    backend: Backend,
) -> Option<[Due; 2]> {
    if r.said_bye || r.phase == Some(Phase::Done) {
        return None;
    }
    let seen = r.last_seen?;
    let silent = Due::Silent {
        at: after(seen, cfg.silent_s()),
        seen,
    };
    let stuck = match r.phase {
        // Start-up (imports, process group, data, model) is measured from the launch.
        None | Some(Phase::Init) => Due::Stuck {
            at: after(started, cfg.startup_s),
            since: started,
        },
        Some(Phase::DdpInit) => {
            let since = r.last_progress.unwrap_or(started);
            Due::Stuck {
                at: after(since, cfg.ddp_init_s),
                since,
            }
        }
        Some(_) => {
            let since = r.last_progress.unwrap_or(started);
            // Before its first step a rank has only entered the phase; on CPUs one step of a
            // real model can take longer than the threshold.
            let allowed = if r.step == 0 && backend == Backend::Gloo {
                threshold.max(cfg.startup_s)
            } else {
                threshold
            };
            Due::Stuck {
                at: after(since, allowed),
                since,
            }
        }
    };
    Some([silent, stuck])
}

/// The earliest instant at which `check` would call the run hung if no message arrives before
/// it: the engine wakes exactly then instead of on its next periodic tick.
pub fn next_deadline(run: &RunView, cfg: &WatchdogConfig) -> Option<Instant> {
    if run.status != RunStatus::Running && run.status != RunStatus::Starting {
        return None;
    }
    let started = run.started?;
    let threshold = cfg.threshold_s(run);
    let mut next: Option<Instant> = None;
    let mut consider = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
    for r in run.ranks.values() {
        if r.last_seen.is_none() {
            consider(after(started, cfg.startup_s));
        }
        for d in rank_dues(r, started, threshold, cfg, run.spec.backend)
            .into_iter()
            .flatten()
        {
            consider(d.at());
        }
    }
    next
}

/// `Some(verdict)` when the run is hung now.
pub fn check(run: &RunView, now: Instant, cfg: &WatchdogConfig) -> Option<Verdict> {
    if run.status != RunStatus::Running && run.status != RunStatus::Starting {
        return None;
    }
    let started = run.started?;
    let threshold = cfg.threshold_s(run);
    let mut stuck = Vec::new();
    let mut silent = Vec::new();
    let mut stuck_allowed = threshold;
    for r in run.ranks.values() {
        let Some([quiet, idle]) = rank_dues(r, started, threshold, cfg, run.spec.backend) else {
            continue;
        };
        if let Due::Silent { at, seen } = quiet
            && now >= at
        {
            silent.push((r.rank, now.duration_since(seen).as_secs_f64(), r.step));
            continue;
        }
        if let Due::Stuck { at, since } = idle
            && now >= at
        {
            stuck_allowed = at.duration_since(since).as_secs_f64();
            stuck.push((r.rank, r.step, now.duration_since(since).as_secs_f64()));
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
    if !stuck.is_empty() {
        return Some(Verdict::Stuck {
            ranks: stuck,
            threshold_s: stuck_allowed,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{Experiment, RunSpec};
    use std::time::Duration;

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
        r.progress_gaps.extend([0.05, 0.05, 0.06]);
        assert_eq!(cfg.threshold_s(&r), 10.0);
        r.progress_gaps.clear();
        r.progress_gaps.extend([2.0, 2.0, 3.0]);
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
    fn first_step_on_cpu_gets_the_startup_allowance() {
        let t0 = Instant::now();
        let mut r = run(t0);
        r.spec.backend = Backend::Gloo;
        for rank in r.ranks.values_mut() {
            rank.last_seen = Some(t0 + Duration::from_secs(60));
            rank.last_progress = Some(t0); // entered phase train, no step yet
            rank.phase = Some(Phase::Train);
        }
        let cfg = WatchdogConfig::default();
        assert!(check(&r, t0 + Duration::from_secs(60), &cfg).is_none());
        // The same on the GPU (sim/nccl) path is a hang after the floor.
        r.spec.backend = Backend::Nccl;
        assert!(check(&r, t0 + Duration::from_secs(60), &cfg).is_some());
        // After the first step, CPU runs get the normal threshold too.
        r.spec.backend = Backend::Gloo;
        for rank in r.ranks.values_mut() {
            rank.step = 1;
        }
        assert!(check(&r, t0 + Duration::from_secs(60), &cfg).is_some());
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
        r.started = Some(t0);
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
        r.started = Some(t0);
        let cfg = WatchdogConfig::default();
        let entered = t0 + Duration::from_secs(40); // after a long init
        let now = entered + Duration::from_millis(19_990);
        connected(&mut r, now, entered, Phase::DdpInit);
        assert!(check(&r, now, &cfg).is_none());
        let deadline = next_deadline(&r, &cfg).unwrap();
        assert_eq!(deadline, entered + Duration::from_secs(20));
        let why = check(&r, deadline, &cfg).unwrap().to_string();
        assert!(why.contains("threshold 20.000 s"), "{why}");
    }

    #[test]
    fn step_threshold_starts_at_train_entry() {
        let t0 = Instant::now();
        let mut r = run(t0);
        r.spec.backend = Backend::Nccl;
        r.started = Some(t0);
        let cfg = WatchdogConfig::default();
        let train = t0 + Duration::from_secs(100);
        connected(&mut r, train + Duration::from_secs(9), train, Phase::Train);
        assert!(check(&r, train + Duration::from_secs(9), &cfg).is_none());
        assert_eq!(
            next_deadline(&r, &cfg),
            Some(train + Duration::from_secs(10))
        );
    }

    #[test]
    fn a_silent_rank_is_judged_by_missed_heartbeats_not_the_step_threshold() {
        let t0 = Instant::now();
        let mut r = run(t0);
        r.started = Some(t0);
        // 30 s steps (a CPU run): the step threshold is 300 s.
        r.progress_gaps.extend([30.0, 30.0, 30.0]);
        let cfg = WatchdogConfig::default();
        assert_eq!(cfg.threshold_s(&r), 300.0);
        connected(&mut r, t0, t0, Phase::Train);
        r.ranks.get_mut(&0).unwrap().last_seen = Some(t0 + Duration::from_secs(10));
        assert!(check(&r, t0 + Duration::from_millis(9_999), &cfg).is_none());
        assert_eq!(next_deadline(&r, &cfg), Some(t0 + Duration::from_secs(10)));
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
        r.started = Some(t0);
        r.progress_gaps.extend([0.31, 0.29, 0.3]);
        let cfg = WatchdogConfig {
            floor_s: 2.5,
            ..WatchdogConfig::default()
        };
        connected(&mut r, t0 + Duration::from_secs(2), t0, Phase::Train);
        for rank in r.ranks.values_mut() {
            rank.step = 7;
        }
        let d = next_deadline(&r, &cfg).unwrap();
        assert_eq!(d, t0 + Duration::from_secs(3));
        assert!(check(&r, d - Duration::from_millis(1), &cfg).is_none());
        assert!(check(&r, d, &cfg).is_some());
        r.status = RunStatus::Completed;
        assert_eq!(next_deadline(&r, &cfg), None);
    }
}
