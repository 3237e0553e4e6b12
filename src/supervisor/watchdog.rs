//! The hang watchdog: alive (messages arrive) but no step progress past a threshold derived from
//! observed step times. Pure: it looks at a `RunView` and a time.

use crate::app::{RunStatus, RunView, summary::median};
use crate::protocol::{Backend, Phase};
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchdogConfig {
    /// No threshold is shorter than this (s).
    pub floor_s: f64,
    /// Threshold = factor × median gap between step advances.
    pub factor: f64,
    /// Allowed time from launch to the first step (imports, NCCL init, data).
    pub startup_s: f64,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig {
            floor_s: 10.0,
            factor: 10.0,
            startup_s: 180.0,
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
}

/// `Some(reason)` when the run is hung now.
pub fn check(run: &RunView, now: Instant, cfg: &WatchdogConfig) -> Option<String> {
    if run.status != RunStatus::Running && run.status != RunStatus::Starting {
        return None;
    }
    let started = run.started?;
    let threshold = cfg.threshold_s(run);
    let mut stuck = Vec::new();
    let mut silent = Vec::new();
    for r in run.ranks.values() {
        if r.said_bye || r.phase == Some(Phase::Done) {
            continue;
        }
        let Some(seen) = r.last_seen else {
            // Never connected: covered by the startup limit below.
            continue;
        };
        let quiet = now.saturating_duration_since(seen).as_secs_f64();
        if quiet > threshold {
            silent.push(format!(
                "rank {} silent for {quiet:.0} s (no heartbeat) at step {}",
                r.rank, r.step
            ));
            continue;
        }
        match r.last_progress {
            Some(p) => {
                let idle = now.saturating_duration_since(p).as_secs_f64();
                // Before its first step a rank has only entered a phase. On GPUs the first step
                // takes seconds at most (so a hang in DDP's first broadcast is caught by the
                // normal threshold); on CPUs one step of a real model can take longer than that.
                let allowed = if r.step == 0 && run.spec.backend == Backend::Gloo {
                    threshold.max(cfg.startup_s)
                } else {
                    threshold
                };
                if idle > allowed {
                    stuck.push((r.rank, r.step, idle));
                }
            }
            None => {
                let idle = now.saturating_duration_since(started).as_secs_f64();
                if idle > cfg.startup_s {
                    stuck.push((r.rank, r.step, idle));
                }
            }
        }
    }
    let unconnected = run.ranks.values().filter(|r| r.last_seen.is_none()).count();
    if unconnected > 0 && now.saturating_duration_since(started).as_secs_f64() > cfg.startup_s {
        return Some(format!(
            "{unconnected} rank(s) never connected within {:.0} s",
            cfg.startup_s
        ));
    }
    if !silent.is_empty() {
        return Some(silent.join("; "));
    }
    if !stuck.is_empty() {
        let parts: Vec<String> = stuck
            .iter()
            .map(|(rank, step, idle)| {
                format!("rank {rank} alive but stuck at step {step} for {idle:.1} s")
            })
            .collect();
        return Some(format!("{} (threshold {threshold:.1} s)", parts.join("; ")));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{Experiment, RunSpec};
    use crate::protocol::Backend;
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
        }
        let cfg = WatchdogConfig::default();
        assert!(check(&r, t0 + Duration::from_secs(9), &cfg).is_none());
        let why = check(&r, t0 + Duration::from_millis(11_500), &cfg).unwrap();
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
        let why = check(&r, t0 + Duration::from_secs(12), &WatchdogConfig::default()).unwrap();
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
}
