//! The report as one JSON document, for scripts. Layout versioned by `schema_version`;
//! docs/report.md describes each field.

use super::{
    BenchRow, Curve, Environment, ProbeRow, Report, RunInfo, SCHEMA_VERSION, Timeline, Timestamp,
};
use crate::app::predict;
use crate::run::{RunStatus, RunView};
use serde_json::{Value, json};

/// The fields every ddptop JSON document starts with.
pub fn envelope(kind: &str, ddptop_version: &str, generated: Timestamp) -> Value {
    json!({
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "ddptop_version": ddptop_version,
        "generated_at": generated.to_string(),
    })
}

pub fn document(r: &Report) -> Value {
    let mut v = envelope("report", &r.ddptop_version, r.generated);
    v["title"] = json!(r.title);
    v["simulated"] = json!(r.simulated());
    v["environment"] = environment(&r.environment);
    v["runs"] = r
        .runs
        .iter()
        .map(|x| run(x, &RunExtras::default()))
        .collect();
    v["curves"] = r.curves.iter().map(curve).collect();
    v["timelines"] = r.timelines.iter().map(timeline).collect();
    v["probes"] = r.probes.iter().map(|p| probe(r, p)).collect();
    let settings: Vec<Value> = r
        .bench_settings()
        .iter()
        .map(|s| {
            json!({
                "setting": s.setting,
                "transport": s.transport,
                "run_id": s.run_id,
                "k": s.k,
                "simulated": s.simulated,
                "peak_busbw_gbs": s.peak_busbw(),
                "rows": s.rows.iter().map(|b| bench_row(b)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let ratios: Vec<Value> = r
        .bench_ratios()
        .iter()
        .map(|q| {
            json!({"setting": q.setting, "baseline": q.baseline, "bytes": q.bytes, "busbw_ratio": q.ratio})
        })
        .collect();
    v["bench"] = json!({ "settings": settings, "ratios": ratios });
    v
}

pub fn environment(e: &Environment) -> Value {
    json!({
        "host": e.host,
        "os": e.os,
        "cpus": e.cpus,
        "gpus": e.gpus,
        "versions": e.versions,
    })
}

/// What a front end knows of a run beyond the store, given to `run` with the run
/// document (before issue 49 each was patched into the finished JSON): none of it is stored.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RunExtras {
    /// `ddptop run`: the run's output.log in the engine's run folder, in place of the launch
    /// record's (which a run without a record lacks).
    #[serde(skip)]
    pub output_log: Option<String>,
    /// `ddptop runs --json`: what the report derives from the run's probe and bench.
    #[serde(flatten)]
    pub report_figures: Option<ReportFigures>,
    /// `ddptop run --json`, an fsdp run: the Memory pane's comparison with the other
    /// strategies' runs at the same k (it needs the engine's runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_comparison: Option<Value>,
}

/// The report's figures of one run (`Report::figures`), both keys present when given.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ReportFigures {
    pub probe_diff_ms: Option<f64>,
    pub busbw_peak_gbs: Option<f64>,
}

/// One run as every JSON output prints it (`run --json`, `runs --json`, `show --json`, `diff
/// --json`, the report): the run document `RunInfo`, with `simulated` and `duration_s`, and
/// what the front end adds (`RunExtras`, after them). The one place a run's JSON is made.
pub fn run(r: &RunInfo, extras: &RunExtras) -> Value {
    #[derive(serde::Serialize)]
    struct Doc<'a> {
        #[serde(flatten)]
        run: std::borrow::Cow<'a, RunInfo>,
        simulated: bool,
        duration_s: Option<f64>,
        #[serde(flatten)]
        extras: &'a RunExtras,
    }
    let run = match &extras.output_log {
        Some(path) => std::borrow::Cow::Owned(RunInfo {
            output_log: Some(path.clone()),
            ..r.clone()
        }),
        None => std::borrow::Cow::Borrowed(r),
    };
    let doc = Doc {
        run,
        simulated: r.simulated(),
        duration_s: r.ended.map(|t| t.0 - r.started.0),
        extras,
    };
    // Every key is a string and every number finite or null: serializing cannot fail.
    serde_json::to_value(doc).expect("a run document serializes")
}

fn curve(c: &Curve) -> Value {
    json!({
        "label": c.label,
        "simulated": c.simulated,
        "baseline_samples_per_s": c.baseline_samples_per_s(),
        "points": c.points.iter().map(|p| json!({
            "k": p.k,
            "run_id": p.run_id,
            "samples_per_s": p.samples_per_s,
            "rank_min": p.rank_min,
            "rank_max": p.rank_max,
            "spread_pct": p.spread_pct(),
            "speedup": p.speedup,
            "efficiency": p.efficiency,
            "baseline_run_id": p.baseline_run_id,
            "caveat": p.caveat,
            "ideal_samples_per_s": c.ideal(p.k),
            "predicted_samples_per_s": p.predicted_samples_per_s,
            "error_pct": p.error_pct(),
        })).collect::<Vec<_>>(),
    })
}

fn timeline(t: &Timeline) -> Value {
    json!({
        "run_id": t.run_id,
        "k": t.k,
        "rank": t.rank,
        "step": t.step,
        "simulated": t.simulated,
        "bwd_compute_ms": t.bwd_compute_ms,
        "comm_ms": t.comm_ms(),
        "exposed_ms": t.exposed_ms,
        "predicted_exposed_ms": t.predicted_exposed_ms,
        "overlap_pct": t.overlap_pct,
        "optimizer_ms": t.optimizer_ms,
        "start_inferred": t.start_inferred,
        "total_bytes": t.total_bytes(),
        "buckets": t.buckets.iter().map(|b| json!({
            "index": b.index,
            "bytes": b.bytes,
            "ready_ms": b.ready_ms,
            "start_ms": b.start_ms,
            "done_ms": b.done_ms,
            "comm_ms": b.comm_ms(),
            "exposed_ms": b.exposed_ms(t.bwd_compute_ms),
            "kernel_ms": b.kernel_ms,
        })).collect::<Vec<_>>(),
    })
}

fn probe(r: &Report, p: &ProbeRow) -> Value {
    let control = r.control_for(p);
    let side = |s: &super::Spread| json!({"median": s.median, "min": s.min, "max": s.max});
    json!({
        "run_id": p.run_id,
        "k": p.k,
        "control": p.control,
        "simulated": p.simulated,
        "blocks": p.blocks,
        "synced_ms": side(&p.synced_ms),
        "no_sync_ms": side(&p.no_sync_ms),
        "diff_ms": p.diff_ms(),
        "control_run_id": control.map(|c| c.run_id.clone()),
        "diff_net_of_control_ms": control.map(|c| p.diff_ms() - c.diff_ms()),
        "predicted_comm_ms": p.predicted_comm_ms,
    })
}

fn bench_row(b: &BenchRow) -> Value {
    json!({
        "bytes": b.bytes,
        "time_us": b.time_us,
        "algbw_gbs": b.algbw_gbs,
        "busbw_gbs": b.busbw_gbs,
    })
}

/// Predicted against measured for a completed k>1 run (`{"na": why}` when it cannot be).
pub fn prediction(r: &RunView, runs: &[RunView]) -> Option<Value> {
    if r.spec.k < 2 || r.status != RunStatus::Completed || !r.spec.kind().ddptop_loop() {
        return None;
    }
    Some(match predict::predict_run(r, runs) {
        Ok(p) => json!({
            "simulated": r.is_simulated(),
            "baseline_run_id": p.baseline,
            "busbw_source": p.busbw.label,
            "busbw_run_id": p.busbw.run_id,
            "control_run_id": p.control.as_ref().map(|c| c.0.clone()),
            "control_reducer_ms": p.control.as_ref().map(|c| c.1),
            "reducer_added": p.reducer_added,
            "reducer_note": p.reducer_note,
            "samples_per_s": {"predicted": p.predicted_sps, "measured": p.measured_sps, "error_pct": p.sps_error_pct},
            "step_ms_predicted": p.predicted_step_ms,
            "exposed_ms": {
                "predicted": p.predicted_exposed_ms,
                "measured": p.measured_exposed_ms,
                "error_pct": p.measured_exposed_ms.and_then(|m| crate::costmodel::predict::error_pct(p.predicted_exposed_ms, m)),
            },
            "buckets": p.buckets.iter().map(|b| json!({
                "index": b.index, "bytes": b.bytes, "predicted_ms": b.predicted_ms,
                "measured_ms": b.measured_ms, "measured_inferred": b.inferred, "error_pct": b.error_pct,
            })).collect::<Vec<_>>(),
        }),
        Err(why) => json!({"na": why}),
    })
}
