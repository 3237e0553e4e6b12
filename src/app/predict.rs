//! Figures a user can check: the median bucket timeline over recent steps with its spread, and
//! the cost model's prediction of every completed k>1 weak run against what it measured
//! (docs/methods.md, "Predicting k ranks" and "The timeline"). Pure functions over `RunView`s.

use crate::costmodel::predict::{
    self, BucketPrediction, PredictInput, ReadyBucket, StepPrediction, error_pct,
};
use crate::costmodel::{BusbwCurve, Profile};
use crate::protocol::{Backend, BucketSpan, Buckets};
use crate::run::{RankView, RunSpec, RunStatus, RunView};
use crate::util::median;
use serde::Serialize;

/// Steps the timeline's median covers unless config.toml's `[timeline] steps` says otherwise.
pub use crate::run::view::DEFAULT_TIMELINE_STEPS;

/// Median of a quantity over steps, with its range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(xs: &[f64]) -> Option<Spread> {
        Some(Spread {
            median: median(xs)?,
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BucketStats {
    pub index: u32,
    pub bytes: u64,
    /// The NCCL kernel's own duration, when every step in the window measured it.
    pub kernel_ms: Option<Spread>,
    /// start − ready: waiting for the previous all-reduce or behind backward kernels.
    pub queue_ms: Spread,
    /// done − start.
    pub comm_ms: Spread,
}

/// The median step of a rank's recent bucket timelines.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineStats {
    /// A timeline made of per-bucket medians (ready, start, done), drawn like a single step.
    pub median: Buckets,
    pub steps: usize,
    pub first_step: u64,
    pub last_step: u64,
    pub exposed_ms: Spread,
    pub buckets: Vec<BucketStats>,
    /// Some step in the window inferred its starts (no kernel time measured).
    pub start_inferred: bool,
}

/// A rank's bucket timelines, oldest first: the live history, else the one a stored run kept.
pub fn bucket_history(rv: &RankView) -> Vec<&Buckets> {
    if rv.recent_buckets.is_empty() {
        rv.buckets.iter().collect()
    } else {
        rv.recent_buckets.iter().collect()
    }
}

fn layout(b: &Buckets) -> Vec<(u32, u64)> {
    b.buckets.iter().map(|s| (s.index, s.bytes)).collect()
}

/// Whether a step's start times are inferred: the worker says so, or (older workers) no bucket
/// carries a kernel time.
pub fn is_inferred(b: &Buckets) -> bool {
    b.start_inferred
        .unwrap_or_else(|| b.buckets.iter().any(|s| s.kernel_ms.is_none()))
}

/// Median over the last `n` timelines of the rank that share the latest one's bucket layout
/// (a rebuild changes the layout; steps before it are not comparable).
pub fn timeline_stats(rv: &RankView, n: usize) -> Option<TimelineStats> {
    let hist = bucket_history(rv);
    let latest = *hist.last()?;
    let lay = layout(latest);
    let window: Vec<&Buckets> = hist
        .iter()
        .rev()
        .filter(|b| layout(b) == lay)
        .take(n.max(1))
        .copied()
        .collect();
    let col = |f: &dyn Fn(&Buckets) -> f64| -> Vec<f64> { window.iter().map(|b| f(b)).collect() };
    let span_col = |i: usize, f: &dyn Fn(&BucketSpan) -> f64| -> Vec<f64> {
        window.iter().map(|b| f(&b.buckets[i])).collect()
    };
    let mut spans = Vec::with_capacity(lay.len());
    let mut stats = Vec::with_capacity(lay.len());
    for (i, &(index, bytes)) in lay.iter().enumerate() {
        let kernels: Vec<f64> = window
            .iter()
            .filter_map(|b| b.buckets[i].kernel_ms)
            .collect();
        let kernel = (kernels.len() == window.len())
            .then(|| Spread::of(&kernels))
            .flatten();
        let ready = median(&span_col(i, &|s| s.ready_ms))?;
        let start = median(&span_col(i, &|s| s.start_ms))?;
        let done = median(&span_col(i, &|s| s.done_ms))?;
        spans.push(BucketSpan {
            index,
            bytes,
            ready_ms: ready,
            start_ms: start.max(ready),
            done_ms: done.max(start),
            kernel_ms: kernel.map(|k| k.median),
        });
        stats.push(BucketStats {
            index,
            bytes,
            kernel_ms: kernel,
            queue_ms: Spread::of(&span_col(i, &|s| (s.start_ms - s.ready_ms).max(0.0)))?,
            comm_ms: Spread::of(&span_col(i, &|s| s.comm_ms()))?,
        });
    }
    let exposed = Spread::of(&col(&|b| b.exposed_ms))?;
    let inferred = window.iter().any(|b| is_inferred(b));
    let median_step = Buckets {
        rank: latest.rank,
        step: latest.step,
        t: latest.t,
        rebuilt: latest.rebuilt,
        bwd_compute_ms: median(&col(&|b| b.bwd_compute_ms))?,
        exposed_ms: exposed.median,
        buckets: spans,
        start_inferred: Some(inferred),
    };
    Some(TimelineStats {
        median: median_step,
        steps: window.len(),
        first_step: window.iter().map(|b| b.step).min().unwrap_or(0),
        last_step: latest.step,
        exposed_ms: exposed,
        buckets: stats,
        start_inferred: inferred,
    })
}

/// The timeline window the prediction reads (all the kept history).
const PREDICT_WINDOW: usize = crate::run::MAX_BUCKET_HISTORY;

/// Rank 0's timeline stats, else the lowest rank's.
fn rank_stats(run: &RunView) -> Option<TimelineStats> {
    run.ranks
        .values()
        .find_map(|rv| timeline_stats(rv, PREDICT_WINDOW))
}

/// Where the all-reduce times of a prediction came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BusbwSource {
    /// `allreduce run <id>` or `profile <name> (SIMULATED)`.
    pub label: String,
    /// The allreduce run's id, when a run supplied it.
    pub run_id: Option<String>,
}

/// One bucket's predicted all-reduce time against the measured one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BucketCompare {
    pub index: u32,
    pub bytes: u64,
    pub predicted_ms: f64,
    /// The measured kernel time's median, else done − start's (then `inferred`).
    pub measured_ms: Option<f64>,
    pub inferred: bool,
    pub error_pct: Option<f64>,
}

/// The prediction of a completed k>1 weak run, with the measurement beside it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunPrediction {
    pub run_id: String,
    pub k: u32,
    /// The k=1 run whose bucket-ready times and step time the prediction starts from.
    pub baseline: String,
    pub busbw: BusbwSource,
    /// The probe's k=1 control that measured the reducer, and its figure (ms).
    pub control: Option<(String, f64)>,
    /// Whether the reducer's cost is added to the k=1 step (`reducer_note` says why).
    pub reducer_added: bool,
    pub reducer_note: String,
    pub predicted_sps: f64,
    pub measured_sps: f64,
    pub sps_error_pct: f64,
    pub predicted_step_ms: f64,
    pub predicted_exposed_ms: f64,
    /// Median of the run's own exposed comm (rank 0).
    pub measured_exposed_ms: Option<f64>,
    pub buckets: Vec<BucketCompare>,
}

/// One all-reduce's duration (ms) by size, at the world size it was made for.
pub type CommFn = Box<dyn Fn(u64) -> f64>;

/// Why the prediction of a run is not available.
pub type Na = String;

/// k=1 runs compute without DDP's reducer only on the simulated backend (its profile charges the
/// reducer at k>1); a real k=1 run wraps the model in DDP at world size 1, so its step already
/// pays bucket copies, the comm hook and the finalize, and adding the control would count it twice.
fn reducer_added(base: &RunView) -> bool {
    base.spec.backend == Backend::Sim
}

/// The k=1 run of `run`'s curve that scaling divides by.
fn baseline<'a>(run: &RunView, runs: &'a [RunView]) -> Option<&'a RunView> {
    let sc = super::summary::scaling(run, runs)?;
    runs.iter().find(|r| r.id == sc.baseline)
}

/// All-reduce time per bucket size at world size k, and where it comes from: on the simulated
/// backend the profile (its in-backward bandwidth, which is what the simulator charges); else the
/// latest completed `allreduce` run at the same k, backend and NCCL settings.
pub fn comm_source(spec: &RunSpec, k: u32, runs: &[RunView]) -> Result<(BusbwSource, CommFn), Na> {
    if spec.backend == Backend::Sim {
        let name = spec
            .profile
            .as_deref()
            .unwrap_or(crate::run::DEFAULT_PROFILE);
        let p = Profile::get(name).ok_or_else(|| format!("unknown profile `{name}`"))?;
        let curve = p.curve(spec.nccl.mode());
        return Ok((
            BusbwSource {
                label: format!("profile {name} (SIMULATED)"),
                run_id: None,
            },
            Box::new(move |b| p.bucket_comm_ms(b, k, &curve)),
        ));
    }
    let bench = runs
        .iter()
        .filter(|b| {
            b.spec.kind().sweeps_allreduce()
                && b.status == RunStatus::Completed
                && b.spec.k == k
                && b.spec.backend == spec.backend
                && b.spec.nccl.normalized() == spec.nccl.normalized()
                && !b.figures.bench.is_empty()
        })
        .max_by(|a, b| a.clock.started_unix.total_cmp(&b.clock.started_unix))
        .ok_or_else(|| {
            format!(
                "no allreduce run at k={k}, these settings: press b (`ddptop run allreduce --k {k}`, {})",
                spec.nccl.short()
            )
        })?;
    // Rank 0's rows (the lowest rank present): the figure nccl-tests would print.
    let rank = bench
        .figures
        .bench
        .iter()
        .map(|b| b.rank)
        .min()
        .unwrap_or(0);
    let curve = BusbwCurve::new(
        bench
            .figures
            .bench
            .iter()
            .filter(|b| b.rank == rank)
            .map(|b| (b.bytes, b.busbw_gbs))
            .collect(),
    );
    Ok((
        BusbwSource {
            label: format!("allreduce run {}", bench.id),
            run_id: Some(bench.id.clone()),
        },
        Box::new(move |b| predict::measured_comm_ms(&curve, b, k).unwrap_or(f64::NAN)),
    ))
}

/// The latest completed k=1 probe control of this setting, and its synced − no_sync (ms).
pub fn reducer_control(spec: &RunSpec, runs: &[RunView]) -> Option<(String, f64)> {
    runs.iter()
        .filter(|c| {
            c.spec.control
                && c.spec.k == 1
                && c.status == RunStatus::Completed
                && c.spec.backend == spec.backend
                && c.spec.profile == spec.profile
                && c.spec.model == spec.model
                && c.spec.per_rank_batch() == spec.per_rank_batch()
                && c.spec.nccl.normalized() == spec.nccl.normalized()
        })
        .filter_map(|c| Some((c, super::summary::probe_summary(&c.figures.probe)?)))
        .max_by(|a, b| a.0.clock.started_unix.total_cmp(&b.0.clock.started_unix))
        .map(|(c, s)| (c.id.clone(), s.diff_ms))
}

/// The k=1 buckets (median ready times) of a run, in all-reduce order, and backward's end.
pub fn ready_times(base: &RunView) -> Result<(Vec<ReadyBucket>, f64), Na> {
    let st = rank_stats(base)
        .ok_or_else(|| format!("k=1 run {} reported no bucket timeline", base.id))?;
    let mut spans = st.median.buckets.clone();
    // All-reduce order is ready order (DDP launches a bucket's all-reduce when it is ready).
    spans.sort_by(|a, b| a.ready_ms.total_cmp(&b.ready_ms));
    let buckets = spans
        .iter()
        .map(|s| ReadyBucket {
            index: s.index,
            bytes: s.bytes,
            ready_ms: s.ready_ms,
        })
        .collect();
    Ok((buckets, st.median.bwd_compute_ms))
}

/// Predicted k-rank exposed comm for a spec (the probe's denominator): the k=1 ready times of the
/// latest completed weak k=1 run at the same setting and per-rank batch.
pub fn predicted_exposed(spec: &RunSpec, runs: &[RunView]) -> Result<(f64, String), Na> {
    exposed_prediction(spec, runs).map(|e| (e.ms, e.source()))
}

/// `predicted_exposed` with its inputs named: the k=1 run and the busbw source.
pub fn exposed_prediction(spec: &RunSpec, runs: &[RunView]) -> Result<ExposedPrediction, Na> {
    let (src, comm) = comm_source(spec, spec.k, runs)?;
    let base = runs
        .iter()
        .filter(|b| {
            b.spec.kind().cost_model_predicts()
                && b.spec.k == 1
                && !b.spec.control
                && b.status == RunStatus::Completed
                && b.spec.backend == spec.backend
                && b.spec.profile == spec.profile
                && b.spec.model == spec.model
                && b.spec.per_rank_batch() == spec.per_rank_batch()
                && b.spec.data_path == spec.data_path
                && b.spec.nccl.normalized() == spec.nccl.normalized()
        })
        .max_by(|a, b| a.clock.started_unix.total_cmp(&b.clock.started_unix))
        .ok_or_else(|| "n/a (no weak k=1 run at this setting yet)".to_string())?;
    let (buckets, bwd_end) = ready_times(base)?;
    let p = predict::predict_step(
        &PredictInput {
            k: spec.k,
            buckets,
            bwd_end_ms: bwd_end,
            k1_step_ms: 0.0,
            samples_per_step: 0.0,
            reducer_ms: 0.0,
        },
        comm,
    );
    if !p.exposed_ms.is_finite() {
        return Err("n/a (all-reduce sweep does not cover the bucket sizes)".into());
    }
    Ok(ExposedPrediction {
        ms: p.exposed_ms,
        k1_run: base.id.clone(),
        busbw: src,
    })
}

/// The predicted exposed comm of a k-rank step, and what it was computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct ExposedPrediction {
    pub ms: f64,
    /// The weak k=1 run whose bucket-ready times were used.
    pub k1_run: String,
    pub busbw: BusbwSource,
}

impl ExposedPrediction {
    pub fn source(&self) -> String {
        format!(
            "ready times of {}, busbw from {}",
            self.k1_run, self.busbw.label
        )
    }
}

/// Predict a completed k>1 weak run from its curve's k=1 run and compare with what it measured.
pub fn predict_run(run: &RunView, runs: &[RunView]) -> Result<RunPrediction, Na> {
    if run.status != RunStatus::Completed || run.spec.k < 2 {
        return Err("only completed runs at k>1 are predicted".into());
    }
    if !run.spec.kind().cost_model_predicts() {
        return Err(
            "not predicted: strong scaling changes the per-rank batch, so the k=1 step's compute does not carry over"
                .into(),
        );
    }
    let measured_sps = run
        .figures
        .aggregate
        .as_ref()
        .map(|a| a.samples_per_s)
        .ok_or("no throughput measured")?;
    let base = baseline(run, runs).ok_or("no completed k=1 run on this curve")?;
    let base_sps = base
        .figures
        .aggregate
        .as_ref()
        .map(|a| a.samples_per_s)
        .filter(|s| *s > 0.0)
        .ok_or_else(|| format!("k=1 run {} has no throughput", base.id))?;
    let per_rank = run.spec.per_rank_batch() as f64;
    let (buckets, bwd_end) = ready_times(base)?;
    let (busbw, comm) = comm_source(&run.spec, run.spec.k, runs)?;
    let control = reducer_control(&run.spec, runs);
    let added = reducer_added(base);
    let reducer_note = match (&control, added) {
        (Some((id, ms)), true) => format!(
            "reducer {ms:.2} ms from k=1 control {id} added (the simulated k=1 step has no reducer)"
        ),
        (None, true) => "reducer not measured (no k=1 probe control): not added".into(),
        (Some((id, ms)), false) => format!(
            "reducer in the k=1 step (DDP at world size 1); k=1 control {id} measured {ms:.2} ms"
        ),
        (None, false) => "reducer in the k=1 step (DDP at world size 1)".into(),
    };
    let reducer_ms = if added {
        control.as_ref().map_or(0.0, |c| c.1)
    } else {
        0.0
    };
    let p: StepPrediction = predict::predict_step(
        &PredictInput {
            k: run.spec.k,
            buckets,
            bwd_end_ms: bwd_end,
            k1_step_ms: per_rank / base_sps * 1e3,
            samples_per_step: per_rank,
            reducer_ms,
        },
        comm,
    );
    if !p.samples_per_s.is_finite() || !p.exposed_ms.is_finite() {
        return Err(format!(
            "n/a ({} does not cover the bucket sizes)",
            busbw.label
        ));
    }
    let measured = rank_stats(run);
    let compare = |b: &BucketPrediction| -> BucketCompare {
        let m = measured.as_ref().and_then(|st| {
            st.buckets
                .iter()
                .find(|s| s.index == b.index && s.bytes == b.bytes)
        });
        let (ms, inferred) = match m {
            Some(s) => match s.kernel_ms {
                Some(k) => (Some(k.median), false),
                None => (Some(s.comm_ms.median), true),
            },
            None => (None, false),
        };
        BucketCompare {
            index: b.index,
            bytes: b.bytes,
            predicted_ms: b.comm_ms,
            measured_ms: ms,
            inferred,
            error_pct: ms.and_then(|m| error_pct(b.comm_ms, m)),
        }
    };
    Ok(RunPrediction {
        run_id: run.id.clone(),
        k: run.spec.k,
        baseline: base.id.clone(),
        busbw,
        control,
        reducer_added: added,
        reducer_note,
        predicted_sps: p.samples_per_s,
        measured_sps,
        sps_error_pct: error_pct(p.samples_per_s, measured_sps).unwrap_or(f64::NAN),
        predicted_step_ms: p.step_ms,
        predicted_exposed_ms: p.exposed_ms,
        measured_exposed_ms: measured.as_ref().map(|s| s.exposed_ms.median),
        buckets: p.buckets.iter().map(compare).collect(),
    })
}
