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
    /// The plan's length changed (a live probe adds steps) and the pace since is not known yet:
    /// the screens say "re-estimating" rather than an ETA that jumps.
    pub re_estimating: bool,
    pub phase: Option<Phase>,
}

/// Points of the pace after a change of plan before an ETA is given again.
pub const REESTIMATE_POINTS: usize = 3;

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
    let total = run.clock.total_steps;
    // After a change of plan, only the pace since counts (probe steps are not training steps).
    let since = run.clock.replanned_at.unwrap_or(0);
    let clock: Vec<(f64, u64)> = run
        .clock
        .step_clock
        .iter()
        .copied()
        .filter(|&(_, s)| s >= since)
        .collect();
    let re_estimating = run.clock.replanned_at.is_some() && clock.len() < REESTIMATE_POINTS;
    let eta_s = match (total, clock.first(), clock.last()) {
        (Some(total), Some(&(t0, s0)), Some(&(t1, s1))) if !re_estimating && s1 > s0 && t1 > t0 => {
            let rate = (s1 - s0) as f64 / (t1 - t0);
            Some(total.saturating_sub(step) as f64 / rate)
        }
        _ => None,
    };
    Some(Progress {
        step,
        total,
        eta_s,
        re_estimating,
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
    } else if p.re_estimating {
        s.push_str(" ETA re-estimating");
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
        r.clock.total_steps = Some(400);
        r.ranks.get_mut(&0).unwrap().step = 100;
        r.clock.step_clock.extend([(10.0, 50), (20.0, 100)]); // 5 steps/s
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

    /// A live probe adds steps to a long CPU run: the plan grows from 400 to 520 steps at step
    /// 200, and the probe's steps are slower. The ETA is not recomputed from a pace that mixes
    /// the two: until 3 points of the new pace are in, it says "re-estimating"; then it is the
    /// steps left at the pace since the change. At a steady pace with noise the ETA never rises
    /// by more than that noise.
    #[test]
    fn a_live_probe_that_adds_steps_re_estimates_the_eta_instead_of_jumping() {
        use crate::protocol::Plan;
        let spec = RunSpec::new(Experiment::Weak, 2, Backend::Gloo);
        let mut r = RunView::new("r1".into(), spec, std::time::Instant::now(), 0.0);
        r.status = RunStatus::Running;
        r.clock.total_steps = Some(400);
        // 2 steps/s with ±5% jitter on the step times.
        let mut t = 0.0;
        let mut etas = Vec::new();
        for s in (10..=200).step_by(10) {
            t += 5.0 * if s % 20 == 0 { 1.05 } else { 0.95 };
            r.ranks.get_mut(&0).unwrap().step = s;
            r.clock.step_clock.push_back((t, s));
            while r.clock.step_clock.len() > crate::run::view::STEP_CLOCK {
                r.clock.step_clock.pop_front();
            }
            etas.extend(progress(&r).unwrap().eta_s);
        }
        // Each 5 s of wall time, the ETA falls by ~5 s; never rises more than the 5% noise.
        for w in etas.windows(2) {
            assert!(w[1] <= w[0] * 1.05, "ETA rose beyond the noise: {etas:?}");
        }
        assert!((etas.last().unwrap() - 100.0).abs() < 5.0, "{etas:?}");
        // The live probe: a second plan, 120 more steps.
        let plan: Plan =
            serde_json::from_str(r#"{"rank":0,"step":200,"t":0.0,"total_steps":520}"#).unwrap();
        let now = std::time::Instant::now();
        crate::app::reduce::apply_worker(&mut r, &crate::protocol::WorkerMsg::Plan(plan), now);
        assert_eq!(
            (r.clock.total_steps, r.clock.replanned_at),
            (Some(520), Some(200))
        );
        let p = progress(&r).unwrap();
        assert_eq!(p.eta_s, None);
        assert!(p.re_estimating);
        assert_eq!(
            line(&r).unwrap(),
            "ddptop: r1 k=2 step 200/520 (38%) ETA re-estimating"
        );
        // The probe's steps are half as fast: 1 step/s. The point at the change and one more
        // are not a pace yet; at the third there is one.
        t += 10.0;
        r.ranks.get_mut(&0).unwrap().step = 210;
        r.clock.step_clock.push_back((t, 210));
        assert!(progress(&r).unwrap().re_estimating);
        t += 10.0;
        r.ranks.get_mut(&0).unwrap().step = 220;
        r.clock.step_clock.push_back((t, 220));
        let p = progress(&r).unwrap();
        assert!(!p.re_estimating);
        // 300 steps left at 1 step/s (the pace since the change, not the mix).
        assert_eq!(p.eta_s, Some(300.0));
    }
}
