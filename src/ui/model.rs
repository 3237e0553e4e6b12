//! What the panes show, derived from `State` by pure functions (unit-tested without a terminal):
//! which run owns a GPU, the scaling curves of the selected run, the probe figures with their
//! control and model, the bench settings side by side.

use crate::app::summary::{self, ProbeSummary};
use crate::app::{State, View};
use crate::gpu::GpuView;
use crate::protocol::{Backend, Bench};
use crate::run::{
    Aggregate, CurveKey, Experiment, NcclSettings, RunSpec, RunStatus, RunView, ScalingCurves,
};
use std::collections::{BTreeMap, HashMap};

/// (run id, rank) of every rank of an active run whose worker pid is on this GPU (this node's
/// ranks only: a rank on another node has that node's pid).
pub fn gpu_owners<'a>(state: &'a State, gpu: &GpuView) -> Vec<(&'a str, u32)> {
    let mut v = Vec::new();
    for run in state.active_runs() {
        for r in run.ranks.values().filter(|r| !r.remote) {
            if let Some(pid) = r.pid
                && gpu.pids.contains(&pid)
            {
                v.push((run.id.as_str(), r.rank));
            }
        }
    }
    v
}

/// Processes on this GPU that belong to no rank ddptop knows.
pub fn foreign_pids(state: &State, gpu: &GpuView) -> usize {
    let ours: Vec<u32> = state
        .runs
        .iter()
        .filter(|r| !r.status.is_final())
        .flat_map(|r| r.ranks.values().filter(|k| !k.remote).filter_map(|k| k.pid))
        .collect();
    gpu.pids.iter().filter(|p| !ours.contains(p)).count()
}

/// The ranks the Ranks pane lists: every active run's, else the focused run's.
pub fn ranks_runs<'a>(state: &'a State, view: &View) -> Vec<&'a RunView> {
    let active: Vec<&RunView> = state.active_runs().collect();
    if !active.is_empty() {
        return active;
    }
    view.subject(state).into_iter().collect()
}

#[derive(Debug, Clone, PartialEq)]
pub struct CurvePoint {
    pub k: u32,
    pub run_id: String,
    pub sps: f64,
    /// Half the spread between the slowest and fastest rank, as % of the mean rank.
    pub spread_pct: f64,
    pub speedup: Option<f64>,
    pub efficiency: Option<f64>,
    /// The k=1 run the speedup and efficiency divide by.
    pub baseline: Option<String>,
    /// The cost model's prediction of this k>1 point, or why there is none.
    pub prediction: Option<Result<crate::app::predict::RunPrediction, String>>,
    /// Why this point's figures cannot be read as they stand: a k=1 point's own perturbation,
    /// a k>1 point's `summary::scaling_caveat`.
    pub caveat: Option<String>,
    /// An efficiency above 100% within the noise (`summary::about_ideal`): drawn as `≈100%`.
    pub about_ideal: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub key: CurveKey,
    pub simulated: bool,
    /// Latest completed run per k, ascending k.
    pub points: Vec<CurvePoint>,
    /// A run of this curve in progress: id, k, throughput samples.
    pub live: Option<(String, u32, Vec<f64>)>,
}

/// Spread of per-rank throughput as ± % of the mean rank.
pub fn spread_pct(agg: &Aggregate) -> f64 {
    summary::rank_spread_pct(agg)
}

fn curve(state: &State, key: CurveKey) -> Curve {
    let mut by_k: BTreeMap<u32, &RunView> = BTreeMap::new();
    for r in state.runs.iter().filter(|r| {
        r.status == RunStatus::Completed
            && r.figures.aggregate.is_some()
            && !r.spec.control
            && r.spec.curve_key() == key
    }) {
        // The latest run per k, a clean one before a perturbed one (a k=1 run perturbed in
        // its timed epoch is no baseline: shown only when there is no other, and marked).
        let e = by_k.entry(r.spec.k).or_insert(r);
        let rank = |x: &RunView| (x.perturbation().is_none(), x.clock.started_unix);
        if rank(r) >= rank(e) {
            *e = r;
        }
    }
    let points = by_k
        .values()
        .map(|r| {
            let agg = r.figures.aggregate.as_ref().expect("filtered");
            let sc = summary::scaling(r, &state.runs);
            let caveat = match &sc {
                Some(s) if r.spec.k > 1 => summary::scaling_caveat_for(r, s, &state.runs),
                _ => r
                    .perturbation()
                    .map(|p| format!("not a clean baseline: {p}")),
            };
            CurvePoint {
                caveat,
                about_ideal: sc
                    .as_ref()
                    .is_some_and(|s| summary::about_ideal(r, s, &state.runs).is_some()),
                k: r.spec.k,
                run_id: r.id.clone(),
                sps: agg.samples_per_s,
                spread_pct: spread_pct(agg),
                speedup: sc.as_ref().map(|s| s.speedup),
                efficiency: sc.as_ref().map(|s| s.efficiency),
                baseline: sc.map(|s| s.baseline),
                // The cost model predicts DDP weak scaling (docs/methods.md).
                prediction: (r.spec.k > 1 && r.spec.kind().cost_model_predicts())
                    .then(|| crate::app::predict::predict_run(r, &state.runs)),
            }
        })
        .collect();
    let live = state
        .runs
        .iter()
        .rev()
        .find(|r| !r.status.is_final() && r.spec.curve_key() == key)
        .map(|r| {
            (
                r.id.clone(),
                r.spec.k,
                r.figures.throughput.iter().map(|(_, s)| *s).collect(),
            )
        });
    Curve {
        simulated: key.backend == Backend::Sim,
        key,
        points,
        live,
    }
}

/// The scaling curves to draw: the subject run's curve (or the latest weak/strong/jax run's when
/// the subject is a probe or bench), plus the other experiments' curves at the same setting.
pub fn curves(state: &State, view: &View) -> Vec<Curve> {
    // The selected run (arrows browse curves), else the focused one, else the latest.
    let anchor = [view.selected_run(state), view.subject(state)]
        .into_iter()
        .flatten()
        .find(|r| r.spec.experiment().has_throughput() && !r.spec.control)
        .or_else(|| {
            state
                .runs
                .iter()
                .filter(|r| r.spec.experiment().has_throughput() && !r.spec.control)
                .max_by(|a, b| a.clock.started_unix.total_cmp(&b.clock.started_unix))
        });
    let Some(anchor) = anchor else {
        return Vec::new();
    };
    match anchor.spec.kind().scaling_curves() {
        ScalingCurves::EachStrategy => return fsdp_curves(state, &anchor.spec),
        ScalingCurves::Deficits => return handrolled_curves(state, &anchor.spec),
        // The user's own job: one curve per script and arguments, nothing beside it.
        ScalingCurves::Alone => return vec![curve(state, anchor.spec.curve_key())],
        ScalingCurves::Beside | ScalingCurves::OwnThenBeside => {}
    }
    let setting = anchor.spec.curve_key().setting();
    let mut out = Vec::new();
    // JAX's one-process curve sits beside DDP's at the same setting (backend, model, data); a
    // family of its own (none today) shows its curve first, with those beside it.
    let beside: Vec<Experiment> = (Experiment::all().iter().copied())
        .filter(|e| e.kind().scaling_curves() == ScalingCurves::Beside)
        .collect();
    if !beside.contains(&anchor.spec.experiment()) {
        out.push(curve(state, anchor.spec.curve_key()));
    }
    for exp in beside {
        let spec = if exp == anchor.spec.experiment() {
            Some(&anchor.spec)
        } else {
            // The other experiment at the same setting: its most recent run picks the batch.
            state
                .runs
                .iter()
                .filter(|r| r.spec.experiment() == exp && r.spec.curve_key().setting() == setting)
                .max_by(|a, b| a.clock.started_unix.total_cmp(&b.clock.started_unix))
                .map(|r| &r.spec)
        };
        if let Some(spec) = spec {
            out.push(curve(state, spec.curve_key()));
        }
    }
    out
}

/// A hand-rolled run's curve (titled by its dispatch+reduce) and, beside it, DDP's weak-scaling
/// curve at the same model, batch and data: what DDP's fixes are worth.
fn handrolled_curves(state: &State, spec: &RunSpec) -> Vec<Curve> {
    // The deficits table's first column (`FamilyKind::deficit_columns`): DDP.
    let columns = spec.kind().deficit_columns().unwrap_or_default();
    let ddp = RunSpec {
        family: columns
            .into_iter()
            .next()
            .unwrap_or_else(|| spec.family.clone()),
        ..spec.clone()
    };
    vec![
        curve(state, spec.curve_key()),
        curve(state, ddp.curve_key()),
    ]
}

/// An fsdp run's curve and, beside it, the other strategy's with the same settings (FSDP against
/// DDP), each with speedup and efficiency against its own k=1 run.
fn fsdp_curves(state: &State, spec: &RunSpec) -> Vec<Curve> {
    use crate::run::TorchStrategy;
    TorchStrategy::ALL
        .into_iter()
        .map(|strategy| {
            curve(
                state,
                RunSpec {
                    family: spec.family.with_strategy(strategy),
                    ..spec.clone()
                }
                .curve_key(),
            )
        })
        .collect()
}

/// The cost-model prediction of a probe's comm time.
#[derive(Debug, Clone, PartialEq)]
pub enum Prediction {
    Ms {
        ms: f64,
        /// Where busbw came from (a run id).
        source: String,
    },
    Na(String),
}

#[derive(Debug, Clone)]
pub struct ProbeView<'a> {
    pub run: &'a RunView,
    pub summary: Option<ProbeSummary>,
    pub control: Option<(&'a RunView, Option<ProbeSummary>)>,
    pub prediction: Prediction,
}

/// The run the probe pane shows.
pub fn probe_run<'a>(state: &'a State, view: &View) -> Option<&'a RunView> {
    // The selected run when it is a probe (or carries live probe blocks), else the focused one,
    // else the latest probe run.
    [view.selected_run(state), view.subject(state)]
        .into_iter()
        .flatten()
        .find(|r| {
            !r.spec.control && (r.spec.kind().probes_no_sync() || !r.figures.probe.is_empty())
        })
        .or_else(|| {
            state
                .runs
                .iter()
                .filter(|r| r.spec.kind().probes_no_sync() && !r.spec.control)
                .max_by(|a, b| a.clock.started_unix.total_cmp(&b.clock.started_unix))
        })
}

pub fn probe_view<'a>(state: &'a State, view: &View) -> Option<ProbeView<'a>> {
    let run = probe_run(state, view)?;
    let summary = if run.status.shows_results() {
        summary::probe_summary(&run.figures.probe)
    } else {
        None
    };
    let key = run.spec.curve_key();
    let control = state
        .runs
        .iter()
        .filter(|r| r.spec.control && r.id != run.id && control_matches(&r.spec, &run.spec, &key))
        .max_by(|a, b| {
            // Same sweep first, then the most recent.
            (
                a.launch.sweep.is_some() && a.launch.sweep == run.launch.sweep,
                a.clock.started_unix,
            )
                .partial_cmp(&(
                    b.launch.sweep.is_some() && b.launch.sweep == run.launch.sweep,
                    b.clock.started_unix,
                ))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .map(|c| {
            let s = if c.status.shows_results() {
                summary::probe_summary(&c.figures.probe)
            } else {
                None
            };
            (c, s)
        });
    Some(ProbeView {
        run,
        summary,
        control,
        prediction: predict_comm(state, run),
    })
}

fn control_matches(c: &RunSpec, run: &RunSpec, key: &CurveKey) -> bool {
    if c.curve_key() == *key {
        return true;
    }
    // The control may carry control-specific toggles; fall back to the same setting.
    c.experiment() == run.experiment() && c.curve_key().setting() == key.setting()
}

/// Bench rows of rank 0 (or the lowest rank present), keyed by size: (busbw, algbw).
pub fn bench_table(rows: &[Bench]) -> BTreeMap<u64, (f64, f64)> {
    let Some(rank) = rows.iter().map(|b| b.rank).min() else {
        return BTreeMap::new();
    };
    rows.iter()
        .filter(|b| b.rank == rank)
        .map(|b| (b.bytes, (b.busbw_gbs, b.algbw_gbs)))
        .collect()
}

/// The cost model's exposed comm at the probe's k (docs/methods.md, "Predicting k ranks"): from
/// the bucket-ready times of the latest weak k=1 run at the same setting and per-rank batch, and
/// busbw from the latest allreduce run at the same k and NCCL settings (the profile on sim).
pub fn predict_comm(state: &State, run: &RunView) -> Prediction {
    if run.spec.k <= 1 {
        return Prediction::Ms {
            ms: 0.0,
            source: "k=1: no communication".into(),
        };
    }
    match crate::app::predict::exposed_prediction(&run.spec, &state.runs) {
        Ok(e) => Prediction::Ms {
            ms: e.ms,
            source: format!(
                "k=1 {}, bw {}",
                super::fmt::tiny_id(&e.k1_run),
                e.busbw
                    .run_id
                    .as_deref()
                    .map_or("profile", super::fmt::tiny_id)
            ),
        },
        Err(why) if why.starts_with("n/a") => Prediction::Na(why),
        Err(why) => Prediction::Na(format!("n/a ({why})")),
    }
}

/// One env setting's bench results.
#[derive(Debug, Clone)]
pub struct BenchSetting<'a> {
    pub run: &'a RunView,
    pub label: String,
    pub rows: BTreeMap<u64, (f64, f64)>,
}

/// The latest all-reduce bench run per setting (backend, profile, k, toggles), defaults first.
pub fn bench_settings(state: &State) -> Vec<BenchSetting<'_>> {
    type Key = (Backend, Option<String>, u32, NcclSettings);
    let mut latest: HashMap<Key, &RunView> = HashMap::new();
    for r in state
        .runs
        .iter()
        .filter(|r| r.spec.kind().sweeps_allreduce())
    {
        let key = (
            r.spec.backend,
            r.spec.profile.clone(),
            r.spec.k,
            r.spec.nccl.normalized(),
        );
        let e = latest.entry(key).or_insert(r);
        if r.clock.started_unix >= e.clock.started_unix {
            *e = r;
        }
    }
    let mut v: Vec<&RunView> = latest.into_values().collect();
    v.sort_by(|a, b| {
        (!a.spec.nccl.is_default(), a.spec.k, a.clock.started_unix)
            .partial_cmp(&(!b.spec.nccl.is_default(), b.spec.k, b.clock.started_unix))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let many_backends = v
        .iter()
        .map(|r| (r.spec.backend, r.spec.profile.clone(), r.spec.k))
        .collect::<std::collections::HashSet<_>>()
        .len()
        > 1;
    v.into_iter()
        .map(|r| {
            let mut label = r.spec.nccl.short();
            if many_backends {
                label = format!("{} k={} {label}", super::fmt::backend(&r.spec), r.spec.k);
            }
            let rows = if r.status.shows_results() {
                bench_table(&r.figures.bench)
            } else {
                BTreeMap::new()
            };
            BenchSetting {
                run: r,
                label,
                rows,
            }
        })
        .collect()
}

/// A rank's straggler mark for the Ranks pane: `◆ straggler 0.66 · data wait` while named,
/// `was straggler` once it recovered (or when the run ended); whether it is still named.
pub fn straggler_mark(run: &RunView, rank: u32) -> Option<(String, bool)> {
    let s = run.straggler.named.iter().rev().find(|s| s.rank == rank)?;
    if s.active && !run.status.is_final() {
        Some((format!("◆ straggler {:.2} · {}", s.score, s.phase), true))
    } else {
        Some((format!("was straggler ({:.2} {})", s.score, s.phase), false))
    }
}
