//! How far a run is and how long it has left: the workers' `plan` (total steps) against the
//! first rank's step counter, the ETA from that rank's own pace (worker clock, so pure).

use crate::protocol::Phase;
use crate::run::RunView;

#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub step: u64,
    /// `None`: the worker did not say how long the run is (attach mode, an old worker).
    pub total: Option<u64>,
    /// Seconds left at the recent pace; `None` until the pace is known.
    pub eta_s: Option<f64>,
    pub phase: Option<Phase>,
}

impl Progress {
    /// Done share, 0..=1, when the length is known.
    pub fn frac(&self) -> Option<f64> {
        self.total
            .filter(|t| *t > 0)
            .map(|t| (self.step as f64 / t as f64).clamp(0.0, 1.0))
    }
}

/// Progress of a run that is still going; `None` for a finished one.
pub fn progress(run: &RunView) -> Option<Progress> {
    if run.status.is_final() {
        return None;
    }
    let first = run.ranks.values().next()?;
    let step = first.step;
    let total = run.total_steps;
    let eta_s = match (total, run.step_clock.front(), run.step_clock.back()) {
        (Some(total), Some(&(t0, s0)), Some(&(t1, s1))) if s1 > s0 && t1 > t0 => {
            let rate = (s1 - s0) as f64 / (t1 - t0);
            Some(total.saturating_sub(step) as f64 / rate)
        }
        _ => None,
    };
    Some(Progress {
        step,
        total,
        eta_s,
        phase: first.phase,
    })
}

/// `45s`, `3m07s`, `1h02m`.
pub fn eta_label(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// A phase as the screens say it.
pub fn phase_label(p: Phase) -> &'static str {
    match p {
        Phase::Init => "starting",
        Phase::DdpInit => "DDP init",
        Phase::Train => "training",
        Phase::Probe => "probing",
        Phase::Bench => "benchmarking",
        Phase::Compile => "compiling",
        Phase::Autotune => "autotuning",
        Phase::Done => "finishing",
    }
}

/// A text bar `width` cells wide: `█` done, `░` to go (eighths for the partial cell).
pub fn bar(frac: f64, width: usize) -> String {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let cells = frac.clamp(0.0, 1.0) * width as f64;
    let full = cells.floor() as usize;
    let mut s: String = "█".repeat(full.min(width));
    if full < width {
        let part = ((cells - full as f64) * 8.0).floor() as usize;
        s.push(if part == 0 { '░' } else { PARTS[part] });
        s.push_str(&"░".repeat(width - full - 1));
    }
    s
}

/// One line for `ddptop run`'s progress on a terminal: `r…-ab12 k=2 step 120/470 (26%) ETA 1m05s`.
pub fn line(run: &RunView) -> Option<String> {
    let p = progress(run)?;
    let mut s = format!("ddptop: {} k={} step {}", run.id, run.spec.k, p.step);
    if let Some(t) = p.total {
        s.push_str(&format!("/{t}"));
    }
    if let Some(f) = p.frac() {
        s.push_str(&format!(" ({:.0}%)", f * 100.0));
    }
    if let Some(e) = p.eta_s {
        s.push_str(&format!(" ETA {}", eta_label(e)));
    }
    if let Some(ph) = p.phase {
        s.push_str(&format!(" · {}", phase_label(ph)));
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Backend;
    use crate::run::{Experiment, RunSpec, RunStatus};

    #[test]
    fn eta_from_the_first_ranks_pace_and_the_plan() {
        let spec = RunSpec::new(Experiment::Weak, 2, Backend::Sim);
        let mut r = RunView::new("r1".into(), spec, std::time::Instant::now(), 0.0);
        r.status = RunStatus::Running;
        assert_eq!(progress(&r).unwrap().total, None);
        r.total_steps = Some(400);
        r.ranks.get_mut(&0).unwrap().step = 100;
        r.step_clock.extend([(10.0, 50), (20.0, 100)]); // 5 steps/s
        let p = progress(&r).unwrap();
        assert_eq!(p.frac(), Some(0.25));
        assert_eq!(p.eta_s, Some(60.0));
        assert_eq!(eta_label(60.0), "1m00s");
        assert_eq!(eta_label(3725.0), "1h02m");
        assert_eq!(
            line(&r).unwrap(),
            "ddptop: r1 k=2 step 100/400 (25%) ETA 1m00s"
        );
        assert_eq!(bar(0.5, 4), "██░░");
        assert_eq!(bar(1.0, 3), "███");
        assert_eq!(bar(0.0, 3), "░░░");
        assert_eq!(bar(0.3, 10).chars().count(), 10);
        r.status = RunStatus::Completed;
        assert!(progress(&r).is_none());
    }
}
