//! Figures derived from a run: aggregate throughput with spread, speedup and efficiency against
//! k=1, probe medians, timeline overlap. Pure functions; docs/methods.md explains each.

use crate::protocol::{Buckets, Probe, ProbeMode};
use crate::run::{Aggregate, RunStatus, RunView, Scaling};
use crate::util::median;

/// Speedup and efficiency of `run` against a k=1 run of the same curve (`CurveKey`: never a
/// run timed differently): the same sweep's when there is one, else the most recent completed one.
pub fn scaling(run: &RunView, runs: &[RunView]) -> Option<Scaling> {
    let agg = run.figures.aggregate.as_ref()?;
    if run.status != RunStatus::Completed {
        return None;
    }
    let key = run.spec.curve_key();
    let base = runs
        .iter()
        .filter(|b| b.spec.k == 1 && b.status == RunStatus::Completed && b.spec.curve_key() == key)
        .max_by_key(|b| {
            (
                // A k=1 run disturbed during its timed epoch is a baseline only when there is
                // no other (and then every figure from it says so: `scaling_caveat`).
                b.perturbation().is_none(),
                b.launch.sweep.is_some() && b.launch.sweep == run.launch.sweep,
                (b.clock.started_unix * 1000.0) as i64,
            )
        })?;
    let base_sps = base.figures.aggregate.as_ref()?.samples_per_s;
    if base_sps <= 0.0 {
        return None;
    }
    let speedup = agg.samples_per_s / base_sps;
    Some(Scaling {
        speedup,
        efficiency: speedup / run.spec.k as f64,
        baseline: base.id.clone(),
    })
}

/// Why a speedup and efficiency cannot be read as they stand: the k=1 baseline was perturbed
/// during its timed epoch, or the efficiency is above 100% (with its likely cause). `None`: they
/// can.
pub fn scaling_caveat(sc: &Scaling, runs: &[RunView]) -> Option<String> {
    let base = runs.iter().find(|b| b.id == sc.baseline);
    if let Some(why) = base.and_then(RunView::perturbation) {
        return Some(format!(
            "k=1 baseline {} is no baseline: {why}",
            sc.baseline
        ));
    }
    // Rounding noise aside, k ranks cannot do more than k times one rank's work.
    if sc.efficiency > 1.005 {
        let cause = base
            .and_then(|b| b.evidence.caveats.first())
            .map(|c| format!("its k=1 baseline is marked: {}", c.text))
            .unwrap_or_else(|| {
                "likely a k=1 baseline slowed by something else on the machine (or a cold start); rerun k=1"
                    .into()
            });
        return Some(format!(
            "efficiency above 100% cannot be a real speedup: {cause}"
        ));
    }
    None
}

/// Half the spread between the slowest and fastest rank, as % of the mean rank.
pub fn rank_spread_pct(agg: &Aggregate) -> f64 {
    let n = agg.per_rank.len().max(1) as f64;
    let mean = agg.samples_per_s / n;
    if mean <= 0.0 {
        0.0
    } else {
        (agg.rank_max - agg.rank_min) / 2.0 / mean * 100.0
    }
}

/// Rounding of per-rank figures alone can move an efficiency this much (%).
const ROUNDING_NOISE_PCT: f64 = 0.5;

/// The noise (%) `run`'s efficiency is read against: the spread between its ranks plus its
/// k=1 baseline's (the relative errors of a ratio add), never below rounding noise.
pub fn efficiency_noise_pct(run: &RunView, sc: &Scaling, runs: &[RunView]) -> f64 {
    let spread = |r: &RunView| r.figures.aggregate.as_ref().map_or(0.0, rank_spread_pct);
    let base = runs
        .iter()
        .find(|b| b.id == sc.baseline)
        .map_or(0.0, spread);
    (spread(run) + base).max(ROUNDING_NOISE_PCT)
}

/// An efficiency above 100% by no more than the noise: `Some(noise %)`, to be read as ideal
/// scaling ("≈ 100%"), not as a superlinear speedup nor as an error.
pub fn about_ideal(run: &RunView, sc: &Scaling, runs: &[RunView]) -> Option<f64> {
    within_noise_of_ideal(sc.efficiency, efficiency_noise_pct(run, sc, runs))
}

/// `about_ideal` from the figures alone (a report's point): `Some(noise %)` when `efficiency`
/// is above 1 by no more than `spread_pct` (or rounding noise, whichever is larger).
pub fn within_noise_of_ideal(efficiency: f64, spread_pct: f64) -> Option<f64> {
    let noise = spread_pct.max(ROUNDING_NOISE_PCT);
    (efficiency > 1.0 && (efficiency - 1.0) * 100.0 <= noise).then_some(noise)
}

/// "≈ 100% (within ±1.4% spread)": how a figure within the noise of ideal is written out.
pub fn about_ideal_words(noise_pct: f64) -> String {
    format!("≈ 100% (within ±{noise_pct:.1}% spread)")
}

/// `scaling_caveat` knowing the run: an efficiency above 100% within its own spread is no
/// caveat (it reads "≈ 100%"); a perturbed baseline still is.
pub fn scaling_caveat_for(run: &RunView, sc: &Scaling, runs: &[RunView]) -> Option<String> {
    let perturbed = runs
        .iter()
        .find(|b| b.id == sc.baseline)
        .is_some_and(|b| b.perturbation().is_some());
    if !perturbed && about_ideal(run, sc, runs).is_some() {
        return None;
    }
    scaling_caveat(sc, runs)
}

/// The efficiency as a sentence reads it: `83%`, or `≈ 100% (within ±1.4% spread)` for a
/// figure above 100% within the noise, so that 100.2% is not taken for a measured gain.
pub fn efficiency_words(run: &RunView, sc: &Scaling, runs: &[RunView]) -> String {
    match about_ideal(run, sc, runs) {
        Some(noise) => about_ideal_words(noise),
        None => format!("{:.0}%", sc.efficiency * 100.0),
    }
}

/// What an attached run measured, in one line: optimizer steps, then what was instrumented;
/// a script with neither a process group nor a DDP module is said to be one that trained its
/// ranks independently, and nothing more is claimed of it.
pub fn attach_note(r: &RunView) -> String {
    // A stored run's ranks carry no step counter; what was observed of them does.
    let steps = r
        .ranks
        .values()
        .map(|x| x.step)
        .max()
        .unwrap_or(0)
        .max(r.seen.observed.steps);
    if steps == 0 && r.seen.observed.independent() {
        // A script that ended before its first step (a bad argument, an import error) trained
        // nothing, independently or not.
        return "no optimizer step ran: the script ended before training (no process group or DDP module seen)".into();
    }
    if r.seen.observed.independent() {
        return format!(
            "no process group and no DDP module seen: the ranks trained independently ({steps} optimizer steps each, no samples or buckets measured)"
        );
    }
    let what = match r.seen.instrument {
        // FSDP2 (fully_shard): no DDP module, samples from the sharded root's forwards.
        Some(crate::protocol::Instrument::Full)
            if r.seen.observed.ddp_module == Some(false)
                && r.seen.observed.per_rank_batch().is_some() =>
        {
            "steps and samples measured; no DDP module, so no buckets (FSDP2: samples from the fully_shard root's forwards, its all-gathers and reduce-scatters not timed)"
        }
        Some(crate::protocol::Instrument::Full) if r.seen.observed.ddp_module == Some(false) => {
            "steps only (no DDP module: no samples or buckets)"
        }
        Some(crate::protocol::Instrument::Full) => match r.seen.comm_timing {
            Some(crate::protocol::CommTiming::NcclProfiler) => {
                "steps and samples measured, buckets by ddptop's NCCL profiler plugin (DDP's own all-reduce)"
            }
            Some(crate::protocol::CommTiming::Untimed) => {
                "steps and samples measured, buckets not timed (the script's own comm hook, the NCCL profiler plugin not reporting)"
            }
            Some(crate::protocol::CommTiming::CommHook) => {
                "steps, samples and buckets measured (buckets: ddptop's comm hook)"
            }
            None => "steps, samples and buckets measured",
        },
        Some(crate::protocol::Instrument::StepsOnly) => "steps only (the script's own comm hook)",
        Some(crate::protocol::Instrument::Off) => "instrumentation off (see the log)",
        None => "no rank connected",
    };
    let batch = r
        .seen
        .observed
        .per_rank_batch()
        .map(|b| format!(", batch {b}/rank seen"))
        .unwrap_or_default();
    // torch.compile's cost, kept out of samples/s (issue 43).
    let compile = r
        .seen
        .observed
        .compile
        .map(|c| format!("; {}", c.describe()))
        .unwrap_or_default();
    format!("{steps} optimizer steps{batch}, {what}{compile}")
}

/// Live aggregate throughput over the last `window_s` seconds of steps (all ranks).
pub fn live_throughput(run: &RunView, now: std::time::Instant, window_s: f64) -> Option<f64> {
    let mut total = 0.0;
    let mut any = false;
    for r in run.ranks.values() {
        let recent: Vec<_> = r
            .recent_samples
            .iter()
            .filter(|(t, _)| now.duration_since(*t).as_secs_f64() <= window_s)
            .collect();
        if recent.len() >= 2 {
            let span = recent
                .last()?
                .0
                .duration_since(recent.first()?.0)
                .as_secs_f64();
            if span > 0.0 {
                let samples: u64 = recent.iter().skip(1).map(|(_, s)| *s).sum();
                total += samples as f64 / span;
                any = true;
            }
        }
    }
    any.then_some(total)
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProbeSide {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub blocks: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProbeSummary {
    pub synced: ProbeSide,
    pub no_sync: ProbeSide,
    /// synced − no_sync median: exposed communication plus reducer overhead.
    pub diff_ms: f64,
}

/// Median of block medians per mode (rank 0), with the range of block medians as spread.
pub fn probe_summary(blocks: &[Probe]) -> Option<ProbeSummary> {
    let side = |mode: ProbeMode| -> Option<ProbeSide> {
        let meds: Vec<f64> = blocks
            .iter()
            .filter(|b| b.mode == mode && b.rank == 0)
            .map(|b| b.median_ms)
            .collect();
        Some(ProbeSide {
            median_ms: median(&meds)?,
            min_ms: meds.iter().copied().fold(f64::INFINITY, f64::min),
            max_ms: meds.iter().copied().fold(0.0, f64::max),
            blocks: meds.len(),
        })
    };
    let synced = side(ProbeMode::Synced)?;
    let no_sync = side(ProbeMode::NoSync)?;
    let diff_ms = synced.median_ms - no_sync.median_ms;
    Some(ProbeSummary {
        synced,
        no_sync,
        diff_ms,
    })
}

/// Median data wait and median step time over the ranks' recent steps (ms): when the first
/// is a large share of the second, the input pipeline, not the GPUs, limits throughput.
pub fn data_wait(run: &RunView) -> Option<(f64, f64)> {
    let data: Vec<f64> = run
        .ranks
        .values()
        .flat_map(|r| r.recent_data_ms.iter().copied())
        .collect();
    let step: Vec<f64> = run
        .ranks
        .values()
        .flat_map(|r| r.recent_step_ms.iter().copied())
        .collect();
    Some((median(&data)?, median(&step)?))
}

/// Overlap % of a bucket timeline: the share of all-reduce time hidden under backward compute.
pub fn overlap_pct(b: &Buckets) -> Option<f64> {
    let comm: f64 = b.buckets.iter().map(|s| s.comm_ms()).sum();
    if comm <= 0.0 {
        return None;
    }
    let hidden: f64 = b
        .buckets
        .iter()
        .map(|s| (s.done_ms.min(b.bwd_compute_ms) - s.start_ms.min(b.bwd_compute_ms)).max(0.0))
        .sum();
    Some((hidden / comm * 100.0).clamp(0.0, 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::BucketSpan;

    fn done(id: &str, spec: crate::run::RunSpec, sps: f64, started: f64) -> RunView {
        let mut r = RunView::new(id.into(), spec, std::time::Instant::now(), started);
        r.status = RunStatus::Completed;
        r.figures.aggregate = Some(crate::run::Aggregate {
            samples_per_s: sps,
            per_rank: vec![sps],
            rank_min: sps,
            rank_max: sps,
        });
        r
    }

    #[test]
    fn a_perturbed_baseline_is_avoided_and_else_marked_and_over_100_percent_is_flagged() {
        use crate::protocol::Backend;
        use crate::run::{Caveat, Experiment, RunSpec};
        let one = RunSpec::new(Experiment::Weak, 1, Backend::Gloo);
        let two = RunSpec::new(Experiment::Weak, 2, Backend::Gloo);
        // The k=1 run had the live probe on in its timed epoch: slow, so k=2 reads 2.38×.
        let mut probed = done("probed", one.clone(), 42.0, 3.0);
        probed.add_caveat(Caveat::perturbed(
            "the live probe ran during its timed epoch",
        ));
        let k2 = done("k2", two, 100.0, 4.0);
        let runs = vec![probed.clone(), k2.clone()];
        let sc = scaling(&k2, &runs).unwrap();
        assert_eq!(sc.baseline, "probed", "the only k=1 run: used, but marked");
        let why = scaling_caveat(&sc, &runs).unwrap();
        assert!(
            why.contains("probed is no baseline") && why.contains("live probe"),
            "{why}"
        );
        // An older clean k=1 run is preferred to a newer perturbed one.
        let clean = done("clean", one.clone(), 60.0, 1.0);
        let runs = vec![clean, probed, k2.clone()];
        let sc = scaling(&k2, &runs).unwrap();
        assert_eq!(sc.baseline, "clean");
        assert_eq!(scaling_caveat(&sc, &runs), None, "83% is plausible");
        // Shared GPUs and injected faults perturb as well.
        let mut shared = done("shared", one.clone(), 60.0, 5.0);
        shared.launch.gpus_shared = Some("pid 7 python".into());
        assert!(shared.perturbation().unwrap().contains("GPUs shared"));
        let injected = done(
            "inj",
            RunSpec {
                inject: Some("hang:5".parse().unwrap()),
                ..one.clone()
            },
            60.0,
            5.0,
        );
        assert!(injected.perturbation().unwrap().contains("fault injected"));
        // A clean baseline that still gives > 100% gets the caveat with its likely cause.
        let slow = done("slow", one, 40.0, 1.0);
        let runs = vec![slow, k2.clone()];
        let sc = scaling(&k2, &runs).unwrap();
        assert!(sc.efficiency > 1.0);
        let why = scaling_caveat(&sc, &runs).unwrap();
        assert!(
            why.contains("above 100%") && why.contains("rerun k=1"),
            "{why}"
        );
    }

    #[test]
    fn an_efficiency_just_above_100_percent_reads_as_ideal_within_its_spread_and_beyond_is_flagged()
    {
        use crate::protocol::Backend;
        use crate::run::{Experiment, RunSpec};
        let base = done(
            "base",
            RunSpec::new(Experiment::Weak, 1, Backend::Gloo),
            100.0,
            1.0,
        );
        // Two ranks 98.6 and 101.8 samples/s: ±1.6% between them; 100.2% efficiency.
        let mut k2 = done(
            "k2",
            RunSpec::new(Experiment::Weak, 2, Backend::Gloo),
            200.4,
            2.0,
        );
        k2.figures.aggregate = Some(crate::run::Aggregate {
            samples_per_s: 200.4,
            per_rank: vec![98.6, 101.8],
            rank_min: 98.6,
            rank_max: 101.8,
        });
        let runs = vec![base.clone(), k2.clone()];
        let sc = scaling(&k2, &runs).unwrap();
        assert!((sc.efficiency - 1.002).abs() < 1e-9);
        let noise = about_ideal(&k2, &sc, &runs).unwrap();
        assert!((noise - 1.6 / 100.2 * 100.0).abs() < 1e-9, "{noise}");
        assert_eq!(
            efficiency_words(&k2, &sc, &runs),
            "≈ 100% (within ±1.6% spread)"
        );
        assert_eq!(scaling_caveat_for(&k2, &sc, &runs), None);
        // 103% with the same spread is beyond the noise: shown as it is, and flagged.
        let mut fast = k2.clone();
        fast.figures.aggregate.as_mut().unwrap().samples_per_s = 206.0;
        let sc = scaling(&fast, &runs).unwrap();
        assert_eq!(about_ideal(&fast, &sc, &runs), None);
        assert_eq!(efficiency_words(&fast, &sc, &runs), "103%");
        assert!(
            scaling_caveat_for(&fast, &sc, &runs)
                .unwrap()
                .contains("above 100%")
        );
        // Tight ranks: rounding noise (0.5%) is the floor, and 90% is just 90%.
        let tight = done(
            "t",
            RunSpec::new(Experiment::Weak, 2, Backend::Gloo),
            180.0,
            3.0,
        );
        let alone = std::slice::from_ref(&base);
        let sc = scaling(&tight, alone).unwrap();
        assert_eq!(efficiency_words(&tight, &sc, alone), "90%");
    }

    #[test]
    fn speedup_never_divides_by_a_run_of_another_curve() {
        use crate::protocol::Backend;
        use crate::run::{Experiment, RunSpec};
        let timed = RunSpec::new(Experiment::Weak, 1, Backend::Nccl);
        // A newer k=1 run timed with its warm-up (--epochs 1) is not the baseline of a k=2 run
        // timed without it, nor is one with fewer samples.
        let warm = RunSpec {
            epochs: 1,
            ..timed.clone()
        };
        let small = RunSpec {
            samples: 8192,
            ..timed.clone()
        };
        let k2 = RunSpec {
            k: 2,
            ..timed.clone()
        };
        let runs = vec![
            done("base", timed, 5000.0, 1.0),
            done("warm", warm, 4000.0, 2.0),
            done("small", small, 4500.0, 3.0),
            done("k2", k2, 9800.0, 4.0),
        ];
        let s = scaling(&runs[3], &runs).unwrap();
        assert_eq!(s.baseline, "base");
        assert!((s.speedup - 1.96).abs() < 1e-9 && (s.efficiency - 0.98).abs() < 1e-9);
        // Without a k=1 run of its own curve there is no speedup at all.
        assert!(scaling(&runs[3], &runs[1..]).is_none());
    }

    #[test]
    fn median_odd_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn overlap_counts_only_comm_before_backward_end() {
        let b = Buckets {
            rank: 0,
            step: 1,
            t: 0.0,
            rebuilt: true,
            bwd_compute_ms: 10.0,
            exposed_ms: 1.0,
            buckets: vec![
                BucketSpan {
                    index: 1,
                    bytes: 1,
                    ready_ms: 2.0,
                    start_ms: 2.0,
                    done_ms: 4.0,
                    kernel_ms: None,
                },
                BucketSpan {
                    index: 0,
                    bytes: 1,
                    ready_ms: 10.0,
                    start_ms: 10.0,
                    done_ms: 12.0,
                    kernel_ms: None,
                },
            ],
            start_inferred: None,
        };
        // 2 ms hidden of 4 ms total.
        assert_eq!(overlap_pct(&b), Some(50.0));
    }
}

#[cfg(test)]
mod attach_note_tests {
    use super::attach_note;
    use crate::protocol::Backend;
    use crate::run::{Experiment, RunSpec, RunView};

    #[test]
    fn a_script_that_never_stepped_is_not_said_to_have_trained() {
        let spec = RunSpec::new(Experiment::Attach, 2, Backend::Gloo);
        let mut r = RunView::new("r".into(), spec, std::time::Instant::now(), 0.0);
        r.seen.observed.process_group = Some(false);
        r.seen.observed.ddp_module = Some(false);
        assert!(
            attach_note(&r).starts_with("no optimizer step ran"),
            "{}",
            attach_note(&r)
        );
        for rank in r.ranks.values_mut() {
            rank.step = 50;
        }
        assert!(attach_note(&r).contains("trained independently (50 optimizer steps each"));
    }

    /// FSDP2 (issue 43): no DDP module, yet the root's forwards gave the samples.
    #[test]
    fn a_script_without_ddp_whose_samples_were_seen_is_not_said_to_be_steps_only() {
        let spec = RunSpec::new(Experiment::Attach, 2, Backend::Gloo);
        let mut r = RunView::new("r".into(), spec, std::time::Instant::now(), 0.0);
        r.seen.observed.process_group = Some(true);
        r.seen.observed.ddp_module = Some(false);
        r.seen.instrument = Some(crate::protocol::Instrument::Full);
        assert!(
            attach_note(&r).contains("steps only (no DDP module"),
            "{}",
            attach_note(&r)
        );
        r.seen.observed.step_samples.insert(64, 37);
        let note = attach_note(&r);
        assert!(
            note.contains("steps and samples measured; no DDP module"),
            "{note}"
        );
        assert!(note.contains("FSDP2"), "{note}");
    }

    #[test]
    fn the_instrument_that_timed_the_buckets_is_named() {
        let spec = RunSpec::new(Experiment::Attach, 2, Backend::Nccl);
        let mut r = RunView::new("r".into(), spec, std::time::Instant::now(), 0.0);
        r.seen.observed.process_group = Some(true);
        r.seen.observed.ddp_module = Some(true);
        r.seen.instrument = Some(crate::protocol::Instrument::Full);
        r.seen.comm_timing = Some(crate::protocol::CommTiming::NcclProfiler);
        assert!(
            attach_note(&r).contains("buckets by ddptop's NCCL profiler plugin"),
            "{}",
            attach_note(&r)
        );
        r.seen.comm_timing = Some(crate::protocol::CommTiming::CommHook);
        assert!(attach_note(&r).contains("buckets: ddptop's comm hook)"));
    }

    #[test]
    fn torch_compile_time_is_said_apart_from_the_figures() {
        let spec = RunSpec::new(Experiment::Attach, 2, Backend::Gloo);
        let mut r = RunView::new("r".into(), spec, std::time::Instant::now(), 0.0);
        r.seen.instrument = Some(crate::protocol::Instrument::Full);
        assert!(!attach_note(&r).contains("compile"), "{}", attach_note(&r));
        let c = crate::run::view::Compiled {
            ms: 41_230,
            compiles: 7,
            recompiles: 2,
            steps: 3,
        };
        r.seen.observed.compile = Some(c);
        assert!(
            attach_note(&r)
                .ends_with("; compile 41.2 s, 2 recompiles (3 steps left out of samples/s)"),
            "{}",
            attach_note(&r)
        );
        // Ranks' figures combine field by field (the slowest rank's time).
        let one = crate::run::view::Compiled {
            ms: 900,
            compiles: 1,
            recompiles: 0,
            steps: 1,
        };
        assert_eq!(c.max(one), c);
        assert_eq!(
            one.describe(),
            "compile 0.9 s, 0 recompiles (1 step left out of samples/s)"
        );
    }
}
