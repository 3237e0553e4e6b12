//! What the panes show, derived from `State` by pure functions (unit-tested without a terminal):
//! which run owns a GPU, the scaling curves of the selected run, the probe figures with their
//! control and model, the bench settings side by side.

use crate::app::summary::{self, ProbeSummary};
use crate::app::{Experiment, GpuView, RunSpec, RunStatus, RunView, State};
use crate::protocol::{Backend, Bench};
use std::collections::BTreeMap;

/// The run the analysis panes talk about: the focused run, else the selected one.
pub fn subject(state: &State) -> Option<&RunView> {
    state.focused_run()
}

/// The run selected in the runs table (the table's cursor).
pub fn selected(state: &State) -> Option<&RunView> {
    state.runs.get(state.selected)
}

/// (run id, rank) of every rank of an active run whose worker pid is on this GPU.
pub fn gpu_owners<'a>(state: &'a State, gpu: &GpuView) -> Vec<(&'a str, u32)> {
    let mut v = Vec::new();
    for run in state.active_runs() {
        for r in run.ranks.values() {
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
        .flat_map(|r| r.ranks.values().filter_map(|k| k.pid))
        .collect();
    gpu.pids.iter().filter(|p| !ours.contains(p)).count()
}

/// The ranks the Ranks pane lists: every active run's, else the focused run's.
pub fn ranks_runs(state: &State) -> Vec<&RunView> {
    let active: Vec<&RunView> = state.active_runs().collect();
    if !active.is_empty() {
        return active;
    }
    subject(state).into_iter().collect()
}

/// Key of "the same setting, either experiment": backend, profile, model, toggles.
fn setting_key(spec: &RunSpec) -> String {
    format!(
        "{}|{}|{}|{}",
        spec.backend.as_str(),
        spec.profile.as_deref().unwrap_or("-"),
        spec.model.as_str(),
        spec.toggle_badges().join(",")
    )
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
}

#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub experiment: Experiment,
    pub curve_key: String,
    pub batch: u32,
    pub simulated: bool,
    /// Latest completed run per k, ascending k.
    pub points: Vec<CurvePoint>,
    /// A run of this curve in progress: id, k, throughput samples.
    pub live: Option<(String, u32, Vec<f64>)>,
}

/// Spread of per-rank throughput as ± % of the mean rank.
pub fn spread_pct(agg: &crate::app::Aggregate) -> f64 {
    let n = agg.per_rank.len().max(1) as f64;
    let mean = agg.samples_per_s / n;
    if mean <= 0.0 {
        0.0
    } else {
        (agg.rank_max - agg.rank_min) / 2.0 / mean * 100.0
    }
}

fn curve(state: &State, key: &str, exp: Experiment, batch: u32, sim: bool) -> Curve {
    let mut by_k: BTreeMap<u32, &RunView> = BTreeMap::new();
    for r in state.runs.iter().filter(|r| {
        r.status == RunStatus::Completed
            && r.aggregate.is_some()
            && !r.spec.control
            && r.spec.curve_key() == key
    }) {
        let e = by_k.entry(r.spec.k).or_insert(r);
        if r.started_unix >= e.started_unix {
            *e = r;
        }
    }
    let points = by_k
        .values()
        .map(|r| {
            let agg = r.aggregate.as_ref().expect("filtered");
            let sc = summary::scaling(r, &state.runs);
            CurvePoint {
                k: r.spec.k,
                run_id: r.id.clone(),
                sps: agg.samples_per_s,
                spread_pct: spread_pct(agg),
                speedup: sc.map(|s| s.0),
                efficiency: sc.map(|s| s.1),
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
                r.throughput.iter().map(|(_, s)| *s).collect(),
            )
        });
    Curve {
        experiment: exp,
        curve_key: key.to_string(),
        batch,
        simulated: sim,
        points,
        live,
    }
}

/// The scaling curves to draw: the subject run's curve (or the latest weak/strong run's when the
/// subject is a probe or bench), plus the other experiment's curve at the same setting.
pub fn curves(state: &State) -> Vec<Curve> {
    // The selected run (arrows browse curves), else the focused one, else the latest.
    let anchor = [selected(state), subject(state)]
        .into_iter()
        .flatten()
        .find(|r| r.spec.experiment.has_throughput() && !r.spec.control)
        .or_else(|| {
            state
                .runs
                .iter()
                .filter(|r| r.spec.experiment.has_throughput() && !r.spec.control)
                .max_by(|a, b| a.started_unix.total_cmp(&b.started_unix))
        });
    let Some(anchor) = anchor else {
        return Vec::new();
    };
    let setting = setting_key(&anchor.spec);
    let mut out = Vec::new();
    for exp in [Experiment::Weak, Experiment::Strong] {
        let spec = if exp == anchor.spec.experiment {
            Some(&anchor.spec)
        } else {
            // The other experiment at the same setting: its most recent run picks the batch.
            state
                .runs
                .iter()
                .filter(|r| r.spec.experiment == exp && setting_key(&r.spec) == setting)
                .max_by(|a, b| a.started_unix.total_cmp(&b.started_unix))
                .map(|r| &r.spec)
        };
        if let Some(spec) = spec {
            out.push(curve(
                state,
                &spec.curve_key(),
                exp,
                spec.batch,
                spec.backend == Backend::Sim,
            ));
        }
    }
    out
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
pub fn probe_run(state: &State) -> Option<&RunView> {
    // The selected run when it is a probe (or carries live probe blocks), else the focused one,
    // else the latest probe run.
    [selected(state), subject(state)]
        .into_iter()
        .flatten()
        .find(|r| {
            !r.spec.control && (r.spec.experiment == Experiment::Probe || !r.probe.is_empty())
        })
        .or_else(|| {
            state
                .runs
                .iter()
                .filter(|r| r.spec.experiment == Experiment::Probe && !r.spec.control)
                .max_by(|a, b| a.started_unix.total_cmp(&b.started_unix))
        })
}

pub fn probe_view(state: &State) -> Option<ProbeView<'_>> {
    let run = probe_run(state)?;
    let summary = if run.status.shows_results() {
        summary::probe_summary(&run.probe)
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
            (a.sweep.is_some() && a.sweep == run.sweep, a.started_unix)
                .partial_cmp(&(b.sweep.is_some() && b.sweep == run.sweep, b.started_unix))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .map(|c| {
            let s = if c.status.shows_results() {
                summary::probe_summary(&c.probe)
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

fn control_matches(c: &RunSpec, run: &RunSpec, key: &str) -> bool {
    if c.curve_key() == key {
        return true;
    }
    // The control may carry control-specific toggles; fall back to the same setting.
    c.experiment == run.experiment && setting_key(c) == setting_key(run)
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

/// Predicted all-reduce time of one step: Σ 2(k−1)/k · bytes / busbw(bytes), from bench rows of
/// the run itself, else of the latest completed bench run at the same backend, profile, toggles
/// and k.
pub fn predict_comm(state: &State, run: &RunView) -> Prediction {
    let k = run.spec.k;
    let buckets: Vec<u64> = if !run.bucket_bytes.is_empty() {
        run.bucket_bytes.clone()
    } else if let Some(b) = run
        .ranks
        .values()
        .find_map(|r| r.buckets.as_ref())
        .filter(|b| !b.buckets.is_empty())
    {
        b.buckets.iter().map(|s| s.bytes).collect()
    } else if let Some(g) = run.grad_bytes {
        vec![g]
    } else {
        return Prediction::Na("n/a (gradient size not reported yet)".into());
    };
    if k <= 1 {
        return Prediction::Ms {
            ms: 0.0,
            source: "k=1: no communication".into(),
        };
    }
    let (table, source) = if !run.bench.is_empty() {
        (bench_table(&run.bench), run.id.clone())
    } else {
        let b = state
            .runs
            .iter()
            .filter(|b| {
                b.spec.experiment == Experiment::Allreduce
                    && b.status == RunStatus::Completed
                    && b.spec.k == k
                    && b.spec.backend == run.spec.backend
                    && b.spec.profile == run.spec.profile
                    && b.spec.env == run.spec.env
                    && !b.bench.is_empty()
            })
            .max_by(|a, b| a.started_unix.total_cmp(&b.started_unix));
        match b {
            Some(b) => (bench_table(&b.bench), b.id.clone()),
            None => return Prediction::Na("n/a (run `b` first)".into()),
        }
    };
    // The project's cost model: Σ 2(k−1)/k · bytes / busbw(bytes), busbw interpolated from the
    // measured sweep (α left out: the sweep's small sizes already carry the latency).
    let curve =
        crate::costmodel::BusbwCurve::new(table.iter().map(|(b, (bus, _))| (*b, *bus)).collect());
    match crate::costmodel::predicted_comm_ms(&buckets, k, &curve, 0.0) {
        Some(ms) => Prediction::Ms { ms, source },
        None => Prediction::Na("n/a (run `b` first)".into()),
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
    let mut latest: BTreeMap<String, &RunView> = BTreeMap::new();
    for r in state
        .runs
        .iter()
        .filter(|r| r.spec.experiment == Experiment::Allreduce)
    {
        let key = format!(
            "{}|{}|{}|{}",
            r.spec.backend.as_str(),
            r.spec.profile.as_deref().unwrap_or("-"),
            r.spec.k,
            r.spec.toggle_badges().join(",")
        );
        let e = latest.entry(key).or_insert(r);
        if r.started_unix >= e.started_unix {
            *e = r;
        }
    }
    let mut v: Vec<&RunView> = latest.into_values().collect();
    v.sort_by(|a, b| {
        (!a.spec.env.is_empty(), a.spec.k, a.started_unix)
            .partial_cmp(&(!b.spec.env.is_empty(), b.spec.k, b.started_unix))
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
            let mut label = super::fmt::toggles_short(&r.spec);
            if many_backends {
                label = format!("{} k={} {label}", super::fmt::backend(&r.spec), r.spec.k);
            }
            let rows = if r.status.shows_results() {
                bench_table(&r.bench)
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

/// Latest complete step of the timeline's rank on `run`: (rank shown, buckets, last step).
pub fn timeline_rank(state: &State, run: &RunView) -> u32 {
    let ranks: Vec<u32> = run.ranks.keys().copied().collect();
    if ranks.contains(&state.timeline_rank) {
        state.timeline_rank
    } else {
        ranks.first().copied().unwrap_or(0)
    }
}

/// Whether a run may show figures: completed ones always, running ones as "live".
pub fn shows_numbers(run: &RunView) -> bool {
    run.status.shows_results()
}
