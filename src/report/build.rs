//! From stored runs to a [`Report`]: the one place that knows both the run model and the
//! report's plain structs. Figures are the ones the dashboard and `ddptop run` show: speedup
//! and efficiency as committed when the run ended (else recomputed against the same curve's
//! k=1 run), probe medians of block medians, the last bucket timeline of rank 0.

use super::run_doc::{RunDetail, RunFigures, TorchSeen};
use super::{
    BenchRow, BucketSpan, Curve, CurvePoint, Environment, ProbeRow, Report, RunInfo, Spread,
    Timeline, Timestamp,
};
use crate::app::predict;
use crate::app::summary;
use crate::run::{CurveKey, RunStatus, RunView, Scaling, TorchSettings};
use crate::store::LaunchRecord;
use std::collections::{BTreeMap, HashMap};

/// The stored runs a report is made of, with what the store knows about their launches.
pub struct Source<'a> {
    /// The runs to report, in the order given.
    pub selected: Vec<&'a RunView>,
    /// Every loaded run: where k=1 baselines and probe controls are found.
    pub history: &'a [RunView],
    pub records: &'a HashMap<String, LaunchRecord>,
}

/// `weak · batch 256/rank · gloo tiny` (+ what is not default, from `CurveKey::title`); an
/// attached run's batch is the one it was seen to use, as in the Runs table.
pub fn curve_label(run: &RunView) -> String {
    format!(
        "{} · {} · {}",
        run.spec.experiment().as_str(),
        run.batch_label(),
        CurveKey::of(&run.spec).title()
    )
}

pub fn settings_label(run: &RunView) -> String {
    let s = run.spec.nccl.short();
    let mut label = if s == "default" { "defaults".into() } else { s };
    // The setting as it took effect: a toggle NCCL never read did nothing.
    if let Some(n) = crate::run::nccl::ignored_note(&run.launch.nccl_read) {
        label.push_str(&format!(" ({n})"));
    }
    if run.launch.gpus_shared.is_some() {
        label.push_str(" (GPUs shared)");
    }
    // A fault run is not the `defaults` it would otherwise read as (issue 46).
    if let Some(f) = &run.spec.inject {
        label.push_str(&format!(" (fault: {f})"));
    }
    label
}

/// The one run document of a stored run (`RunInfo`): `history` is where its k=1 baseline,
/// busbw run and probe control are found; `detail`: with its per-rank sections (the outputs
/// about one run).
pub fn run_info(
    run: &RunView,
    rec: Option<&LaunchRecord>,
    history: &[RunView],
    detail: bool,
) -> RunInfo {
    let s = &run.spec;
    let set = run.settings();
    let run_dir = rec.map(|r| r.run_dir.clone());
    let scaling = rec
        .and_then(|r| r.scaling.clone())
        .or_else(|| summary::scaling(run, history));
    let asked = match s.torch {
        TorchSettings::Off if !s.experiment().book_settings_apply(s.backend) => None,
        t => Some(t),
    };
    RunInfo {
        id: run.id.clone(),
        experiment: s.experiment(),
        k: s.k,
        backend: s.backend,
        profile: s.profile.clone(),
        model: set.model,
        per_rank_batch: set.per_rank_batch,
        global_batch: set.global_batch,
        epochs: set.epochs,
        samples: set.samples,
        data_path: set.data_path,
        data_source: set.data_source,
        control: s.control,
        caveats: run
            .evidence
            .caveats
            .iter()
            .map(|c| c.text.clone())
            .collect(),
        settings: settings_label(run),
        nccl_read: run
            .launch
            .nccl_read
            .iter()
            .map(|(k, taken)| (k.clone(), if *taken { "taken" } else { "ignored" }))
            .collect(),
        torch: run.torch_label(),
        torch_settings: asked,
        torch_seen: TorchSeen::of(run),
        jax_matmul_precision: run.seen.jax_matmul_precision.clone(),
        status: run.status,
        reason: run.reason.clone(),
        started: Timestamp(run.clock.started_unix),
        ended: run.clock.ended_unix.map(Timestamp),
        transport: run.transport().map(str::to_string),
        gpus_shared: run.launch.gpus_shared.clone(),
        sweep: run.launch.sweep.clone(),
        command: rec.map(|r| r.command.clone()).unwrap_or_default(),
        versions: run.launch.versions.clone(),
        output_log: run_dir.map(|d| d.join("output.log").display().to_string()),
        stragglers: run.straggler.named.clone(),
        phase_scores: crate::app::straggler::phase_scores_of(run, &Default::default()),
        fault: run.spec.inject.as_ref().map(|f| f.to_string()),
        evidence: run.evidence.hang_report.clone(),
        rank_tails: run.evidence.rank_tails.clone(),
        diagnoses: run.evidence.diagnoses.clone(),
        collectives: crate::app::coll_store::collectives_json(run),
        figures: RunFigures::of(run, scaling, history),
        family: run.spec.family.settings(),
        detail: detail.then(|| RunDetail::of(run)),
    }
}

/// Speedup and efficiency: as committed, else recomputed from history.
pub fn scaling_of(run: &RunView, src: &Source) -> Option<Scaling> {
    src.records
        .get(&run.id)
        .and_then(|r| r.scaling.clone())
        .or_else(|| summary::scaling(run, src.history))
}

/// The cost model's prediction of a k>1 run from its curve's k=1 run and the measured busbw
/// (`app::predict`, as `ddptop run --json` shows it); `None` where it cannot predict.
fn prediction(run: &RunView, src: &Source) -> Option<predict::RunPrediction> {
    predict::predict_run(run, src.history).ok()
}

fn curves(src: &Source) -> Vec<Curve> {
    let mut order: Vec<CurveKey> = Vec::new();
    let mut groups: HashMap<CurveKey, Vec<&RunView>> = HashMap::new();
    for run in src.selected.iter().copied().filter(|r| {
        r.spec.experiment().has_throughput()
            && r.status == RunStatus::Completed
            && r.figures.aggregate.is_some()
    }) {
        let key = run.spec.curve_key();
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups.entry(key).or_default().push(run);
    }
    order
        .into_iter()
        .filter_map(|key| {
            let mut runs = groups.remove(&key)?;
            runs.sort_by(|a, b| {
                (a.spec.k, a.clock.started_unix)
                    .partial_cmp(&(b.spec.k, b.clock.started_unix))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            let first = runs[0];
            Some(Curve {
                label: curve_label(first),
                simulated: first.is_simulated(),
                points: runs
                    .iter()
                    .map(|r| {
                        let agg = r.figures.aggregate.as_ref().expect("filtered on aggregate");
                        let sc = scaling_of(r, src);
                        CurvePoint {
                            k: r.spec.k,
                            run_id: r.id.clone(),
                            samples_per_s: agg.samples_per_s,
                            rank_min: agg.rank_min,
                            rank_max: agg.rank_max,
                            speedup: sc.as_ref().map(|s| s.speedup),
                            efficiency: sc.as_ref().map(|s| s.efficiency),
                            caveat: sc
                                .as_ref()
                                .and_then(|s| summary::scaling_caveat_for(r, s, src.history)),
                            baseline_run_id: sc.map(|s| s.baseline),
                            predicted_samples_per_s: prediction(r, src).map(|p| p.predicted_sps),
                        }
                    })
                    .collect(),
            })
        })
        .collect()
}

/// Rank 0's last bucket timeline (the lowest rank that has one).
pub fn timeline(run: &RunView, predicted_exposed_ms: Option<f64>) -> Option<Timeline> {
    let b = run.ranks.values().find_map(|r| r.buckets.as_ref())?;
    if b.buckets.is_empty() {
        return None;
    }
    let optimizer_ms = run
        .ranks
        .get(&b.rank)
        .and_then(|r| r.last_step.as_ref())
        .map(|s| s.opt_ms)
        .filter(|o| *o > 0.0);
    Some(Timeline {
        run_id: run.id.clone(),
        k: run.spec.k,
        rank: b.rank,
        step: b.step,
        simulated: run.is_simulated(),
        bwd_compute_ms: b.bwd_compute_ms,
        exposed_ms: b.exposed_ms,
        overlap_pct: summary::overlap_pct(b),
        optimizer_ms,
        start_inferred: b.start_inferred.unwrap_or(false),
        buckets: b
            .buckets
            .iter()
            .map(|s| BucketSpan {
                index: s.index,
                bytes: s.bytes,
                ready_ms: s.ready_ms,
                start_ms: s.start_ms,
                done_ms: s.done_ms,
                kernel_ms: s.kernel_ms,
            })
            .collect(),
        predicted_exposed_ms,
    })
}

/// One timeline per curve: its largest k (where overlap matters most).
fn timelines(src: &Source, curves: &[Curve]) -> Vec<Timeline> {
    curves
        .iter()
        .filter_map(|c| {
            let id = &c.points.iter().max_by_key(|p| p.k)?.run_id;
            let run = src.selected.iter().find(|r| &r.id == id)?;
            timeline(run, prediction(run, src).map(|p| p.predicted_exposed_ms))
        })
        .collect()
}

pub fn probe_row(run: &RunView, history: &[RunView]) -> Option<ProbeRow> {
    if run.status != RunStatus::Completed {
        return None;
    }
    let p = summary::probe_summary(&run.figures.probe)?;
    let spread = |s: &summary::ProbeSide| Spread {
        median: s.median_ms,
        min: s.min_ms,
        max: s.max_ms,
    };
    Some(ProbeRow {
        run_id: run.id.clone(),
        k: run.spec.k,
        control: run.spec.control || run.spec.k == 1,
        simulated: run.is_simulated(),
        synced_ms: spread(&p.synced),
        no_sync_ms: spread(&p.no_sync),
        blocks: p.synced.blocks.min(p.no_sync.blocks),
        // The exposed communication the cost model predicts for this k (none at k=1).
        predicted_comm_ms: (run.spec.k > 1)
            .then(|| predict::predicted_exposed(&run.spec, history).ok())
            .flatten()
            .map(|(ms, _)| ms),
    })
}

fn probes(src: &Source) -> Vec<ProbeRow> {
    let mut rows: Vec<ProbeRow> = src
        .selected
        .iter()
        .filter_map(|r| probe_row(r, src.history))
        .collect();
    // A k>1 probe without its control in the selection: bring the control in from history
    // (the same sweep's), so Δ − control can be shown.
    let missing: Vec<&RunView> = src
        .selected
        .iter()
        .filter(|r| r.spec.kind().probes_no_sync() && r.spec.k > 1 && r.launch.sweep.is_some())
        .filter_map(|r| {
            src.history.iter().find(|c| {
                c.launch.sweep == r.launch.sweep
                    && c.spec.kind().probes_no_sync()
                    && c.spec.k == 1
                    && !rows.iter().any(|p| p.run_id == c.id)
            })
        })
        .collect();
    rows.extend(
        missing
            .into_iter()
            .filter_map(|r| probe_row(r, src.history)),
    );
    rows
}

/// Rank 0's rows (the lowest rank reporting) of each completed all-reduce sweep.
pub fn bench_rows(run: &RunView) -> Vec<BenchRow> {
    if run.status != RunStatus::Completed {
        return Vec::new();
    }
    let Some(rank) = run.figures.bench.iter().map(|b| b.rank).min() else {
        return Vec::new();
    };
    run.figures
        .bench
        .iter()
        .filter(|b| b.rank == rank)
        .map(|b| BenchRow {
            run_id: run.id.clone(),
            k: run.spec.k,
            setting: settings_label(run),
            transport: run.transport().map(str::to_string),
            simulated: run.is_simulated(),
            bytes: b.bytes,
            time_us: b.time_us,
            algbw_gbs: b.algbw_gbs,
            busbw_gbs: b.busbw_gbs,
        })
        .collect()
}

/// Where the runs ran: this host, and the versions the workers reported (first seen wins;
/// `host` is left to `environment.host`).
fn environment(runs: &[&RunView]) -> Environment {
    let mut versions = BTreeMap::new();
    let mut devices: Vec<String> = Vec::new();
    for r in runs {
        for (k, v) in &r.launch.versions {
            if k != "host" {
                versions.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        for d in r.ranks.values().filter_map(|x| x.device.clone()) {
            if d.starts_with("cuda") && !devices.contains(&d) {
                devices.push(d);
            }
        }
    }
    let host = runs
        .iter()
        .find_map(|r| r.launch.versions.get("host").cloned())
        .unwrap_or_else(crate::paths::hostname);
    Environment {
        host,
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        cpus: std::thread::available_parallelism()
            .ok()
            .map(|n| n.get() as u32),
        gpus: devices,
        versions,
    }
}

pub fn build(title: String, src: &Source, now: f64) -> Report {
    let curves = curves(src);
    let timelines = timelines(src, &curves);
    let probes = probes(src);
    let bench = src.selected.iter().flat_map(|r| bench_rows(r)).collect();
    let mut ids: Vec<&str> = src.selected.iter().map(|r| r.id.as_str()).collect();
    // Controls brought in for the probe are runs of the report too.
    let extra: Vec<&RunView> = probes
        .iter()
        .filter(|p| !ids.contains(&p.run_id.as_str()))
        .filter_map(|p| src.history.iter().find(|r| r.id == p.run_id))
        .collect();
    ids.extend(extra.iter().map(|r| r.id.as_str()));
    let all: Vec<&RunView> = src.selected.iter().copied().chain(extra).collect();
    Report {
        title,
        generated: Timestamp(now),
        ddptop_version: env!("CARGO_PKG_VERSION").into(),
        environment: environment(&all),
        runs: all
            .iter()
            .map(|r| run_info(r, src.records.get(&r.id), src.history, false))
            .collect(),
        curves,
        timelines,
        probes,
        bench,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Backend;
    use crate::run::{Aggregate, Experiment, RunSpec};

    /// An attached script with the spec's default batch (256) that was seen to step 32 samples
    /// per rank: the curve's title and the Runs table say 32, and nothing says 256.
    #[test]
    fn an_attached_runs_report_says_the_batch_it_observed_in_title_and_table() {
        let mut run = RunView::new(
            "r-attach".into(),
            RunSpec::new(Experiment::Attach, 1, Backend::Gloo),
            std::time::Instant::now(),
            1_764_465_300.0,
        );
        assert_eq!(run.spec.batch, 256);
        run.status = RunStatus::Completed;
        run.clock.ended_unix = Some(run.clock.started_unix + 50.0);
        run.figures.aggregate = Some(Aggregate {
            samples_per_s: 640.0,
            rank_min: 640.0,
            rank_max: 640.0,
            per_rank: vec![640.0],
        });
        run.seen.observed.step_samples.insert(32, 40);
        run.seen.observed.step_samples.insert(8, 1); // the last, partial batch
        assert_eq!(run.batch_label(), "batch 32/rank");
        let history = vec![run.clone()];
        let records = HashMap::new();
        let src = Source {
            selected: vec![&history[0]],
            history: &history,
            records: &records,
        };
        let report = build("attached".into(), &src, 1_764_465_400.0);
        assert_eq!(report.curves.len(), 1);
        assert!(
            report.curves[0]
                .label
                .starts_with("attach · batch 32/rank · gloo"),
            "{}",
            report.curves[0].label
        );
        assert_eq!(report.runs[0].per_rank_batch, Some(32));
        let md = super::super::render(&report, super::super::Format::Markdown, &[]);
        assert!(md.contains("batch 32/rank"), "{md}");
        assert!(!md.contains("256"), "{md}");
        // Before any step said its batch, the title does not fall back to the default.
        let fresh = RunView::new(
            "r-fresh".into(),
            RunSpec::new(Experiment::Attach, 1, Backend::Gloo),
            std::time::Instant::now(),
            0.0,
        );
        assert_eq!(fresh.batch_label(), "batch ?/rank");
    }
}
