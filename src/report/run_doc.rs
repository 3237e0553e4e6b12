//! The parts of the one run document (`RunInfo`, serialized by `report::json::run`) that are
//! built from a stored run beyond its settings: its figures and, for the outputs about one run
//! (`ddptop run --json`, `ddptop show --json`), its per-rank sections. The family's own settings
//! come from `run::Family::settings`.
//! `build::run_info` is the one function that fills them; docs/report.md lists the fields.
//!
//! To add a section (say `collectives`): an `Option` field with
//! `#[serde(skip_serializing_if = "Option::is_none")]` on `RunDetail` (per-rank detail) or on
//! `RunInfo`, filled in `build::run_info`.

use crate::app::predict;
use crate::app::summary::{self, probe_summary};
use crate::run::{Experiment, RunStatus, RunView, Scaling};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// What the workers said they set (`torch_seen`): the matmul precision and cudnn.benchmark.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TorchSeen {
    pub matmul_precision: String,
    pub cudnn_benchmark: bool,
}

impl TorchSeen {
    pub fn of(run: &RunView) -> Option<Self> {
        run.seen.torch.map(|(m, c)| TorchSeen {
            matmul_precision: m.as_str().to_string(),
            cudnn_benchmark: c,
        })
    }
}

/// The slowest and fastest rank's samples/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MinMax {
    pub min: f64,
    pub max: f64,
}

/// A run's throughput and scaling figures: `null` where the run has none (not completed, no
/// throughput, no k=1 run of the same curve).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunFigures {
    pub samples_per_s: Option<f64>,
    pub per_rank_samples_per_s: Option<Vec<f64>>,
    pub spread: Option<MinMax>,
    pub speedup: Option<f64>,
    pub efficiency: Option<f64>,
    pub baseline_run_id: Option<String>,
    pub scaling_caveat: Option<String>,
    /// Median step and data-wait time (the loader data path's evidence), when reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_ms_median: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_wait_ms_median: Option<f64>,
    /// The cost model against the measurement (`report::json::prediction`), k>1 weak/strong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Value>,
    /// The probe's model ratio (probe runs that are not the control).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_model: Option<Value>,
}

impl RunFigures {
    /// `scaling`: as committed when the run ended, else recomputed from `history`.
    pub fn of(run: &RunView, scaling: Option<Scaling>, history: &[RunView]) -> Self {
        let agg = run
            .figures
            .aggregate
            .as_ref()
            .filter(|_| run.status == RunStatus::Completed);
        let (data_wait, step) = summary::data_wait(run).unzip();
        RunFigures {
            samples_per_s: agg.map(|a| a.samples_per_s),
            per_rank_samples_per_s: agg.map(|a| a.per_rank.clone()),
            spread: agg.map(|a| MinMax {
                min: a.rank_min,
                max: a.rank_max,
            }),
            speedup: scaling.as_ref().map(|s| s.speedup),
            efficiency: scaling.as_ref().map(|s| s.efficiency),
            baseline_run_id: scaling.as_ref().map(|s| s.baseline.clone()),
            scaling_caveat: scaling
                .as_ref()
                .and_then(|s| summary::scaling_caveat(s, history)),
            step_ms_median: step,
            data_wait_ms_median: data_wait,
            prediction: super::json::prediction(run, history),
            probe_model: probe_model(run, history),
        }
    }
}

/// Per-rank detail, only in the outputs about one run (`run --json`, `show --json`); the
/// lists (`runs --json`, the report) leave it out.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunDetail {
    pub worker_pids: Vec<u32>,
    /// Where each rank ran (multi-node runs: its node, and whether it reported over TCP).
    pub rank_nodes: Vec<Value>,
    pub bad_lines: u64,
    pub rejected_connections: u64,
    pub hang_report: Vec<String>,
    /// Every node's GPUs when the run ended (agents or DCGM; `app::nodes::nodes_json`); `[]`
    /// for a run on one node.
    pub node_gpus: Value,
    /// The probe's synced/no_sync medians (completed probe runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<Value>,
    /// The all-reduce sweep's rows (completed allreduce runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bench: Option<Value>,
    /// Each rank's last bucket timeline and the median over the steps that sent one (on GPUs 1
    /// timed step in 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline_median: Option<Value>,
    /// The family's own figures (fsdp: `memory`, `comm`; jax: `receipt`, `checks`, `equality`,
    /// `device_memory`, `devices`, `processes`; attach: `instrument`, `steps`, what was seen).
    #[serde(flatten)]
    pub family: Map<String, Value>,
}

impl RunDetail {
    pub fn of(r: &RunView) -> Self {
        let mut d = RunDetail {
            worker_pids: r.ranks.values().filter_map(|x| x.pid).collect(),
            rank_nodes: r
                .ranks
                .values()
                .filter(|x| x.node.is_some())
                .map(|x| json!({"rank": x.rank, "node": x.node, "remote": x.remote}))
                .collect(),
            bad_lines: r.bad_lines(),
            rejected_connections: r.evidence.rejected,
            hang_report: r.evidence.hang_report.clone(),
            node_gpus: crate::app::nodes::nodes_json(r),
            ..RunDetail::default()
        };
        match r.spec.experiment() {
            Experiment::Fsdp => fsdp(r, &mut d.family),
            Experiment::Jax => jax(r, &mut d.family),
            // A family's own record (FamilyKind::record), from its memory reports.
            _ => {
                let memory: Vec<_> = r.ranks.values().flat_map(|x| &x.memory_phases).collect();
                let k = r.spec.k;
                for (key, v) in r.spec.kind().record(&r.spec.family, k, &memory) {
                    d.family.insert(key.into(), v);
                }
            }
        }
        if r.spec.attach().is_some() {
            let f = &mut d.family;
            f.insert("instrument".into(), json!(r.seen.instrument));
            f.insert(
                "steps".into(),
                json!(r.ranks.values().map(|x| x.step).collect::<Vec<_>>()),
            );
            f.insert("process_group".into(), json!(r.seen.observed.process_group));
            f.insert("ddp_module".into(), json!(r.seen.observed.ddp_module));
            f.insert(
                "independent_ranks".into(),
                json!(r.seen.observed.independent()),
            );
            if let Some(c) = r.seen.observed.compile {
                f.insert(
                    "compile".into(),
                    json!({"seconds": c.ms as f64 / 1000.0, "compiles": c.compiles,
                           "recompiles": c.recompiles, "steps": c.steps, "text": c.describe()}),
                );
            }
        }
        if r.status != RunStatus::Completed {
            return d;
        }
        d.probe = probe_summary(&r.figures.probe).map(|p| {
            json!({
                "synced_ms": {"median": p.synced.median_ms, "min": p.synced.min_ms, "max": p.synced.max_ms, "blocks": p.synced.blocks},
                "no_sync_ms": {"median": p.no_sync.median_ms, "min": p.no_sync.min_ms, "max": p.no_sync.max_ms, "blocks": p.no_sync.blocks},
                "difference_ms": p.diff_ms,
            })
        });
        if !r.figures.bench.is_empty() {
            d.bench = Some(r
                .figures.bench
                .iter()
                .map(|b| json!({"bytes": b.bytes, "time_us": b.time_us, "algbw_gbs": b.algbw_gbs, "busbw_gbs": b.busbw_gbs}))
                .collect());
        }
        let timeline: Vec<Value> = r
            .ranks
            .values()
            .filter_map(|x| x.buckets.as_ref())
            .map(|b| {
                json!({
                    "rank": b.rank, "step": b.step, "bwd_compute_ms": b.bwd_compute_ms, "exposed_ms": b.exposed_ms,
                    "overlap_pct": summary::overlap_pct(b),
                    "start_inferred": predict::is_inferred(b),
                    "buckets": b.buckets.iter().map(|s| json!({
                        "index": s.index, "bytes": s.bytes, "comm_ms": s.comm_ms(),
                        "kernel_ms": s.kernel_ms, "queue_ms": (s.start_ms - s.ready_ms).max(0.0),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        d.timeline = (!timeline.is_empty()).then_some(Value::Array(timeline));
        let medians: Vec<Value> = r
            .ranks
            .values()
            .filter_map(|x| predict::timeline_stats(x, predict::DEFAULT_TIMELINE_STEPS))
            .map(|st| timeline_median(&st))
            .collect();
        d.timeline_median = (!medians.is_empty()).then_some(Value::Array(medians));
        d
    }
}

fn spread(s: &predict::Spread) -> Value {
    json!({"median": s.median, "min": s.min, "max": s.max})
}

fn timeline_median(st: &predict::TimelineStats) -> Value {
    json!({
        "rank": st.median.rank, "steps": st.steps, "first_step": st.first_step, "last_step": st.last_step,
        "start_inferred": st.start_inferred,
        "bwd_compute_ms": st.median.bwd_compute_ms,
        "exposed_ms": spread(&st.exposed_ms),
        "buckets": st.buckets.iter().map(|b| json!({
            "index": b.index, "bytes": b.bytes,
            "kernel_ms": b.kernel_ms.as_ref().map(spread),
            "queue_ms": spread(&b.queue_ms),
            "comm_ms": spread(&b.comm_ms),
        })).collect::<Vec<_>>(),
    })
}

/// The probe's model ratio: (difference − k=1 control) / predicted exposed comm.
fn probe_model(r: &RunView, runs: &[RunView]) -> Option<Value> {
    if !r.spec.kind().probes_no_sync() || r.spec.control || r.status != RunStatus::Completed {
        return None;
    }
    let p = probe_summary(&r.figures.probe)?;
    let ctrl = predict::reducer_control(&r.spec, runs);
    Some(match predict::exposed_prediction(&r.spec, runs) {
        Ok(e) => json!({
            "predicted_exposed_ms": e.ms, "source": e.source(),
            "k1_run_id": e.k1_run, "busbw_run_id": e.busbw.run_id,
            "control_run_id": ctrl.as_ref().map(|c| c.0.clone()),
            "control_ms": ctrl.as_ref().map(|c| c.1),
            "ratio": ctrl.as_ref().filter(|_| e.ms > 0.0).map(|c| (p.diff_ms - c.1) / e.ms),
        }),
        Err(why) => json!({"na": why}),
    })
}

/// The fsdp experiment's figures: what each rank held at each phase, and its collectives per
/// timed step by kind.
fn fsdp(r: &RunView, v: &mut Map<String, Value>) {
    let memory: Vec<Value> = r
        .ranks
        .values()
        .flat_map(|x| x.memory_phases.iter())
        .map(|m| {
            let state = [m.param_bytes, m.grad_bytes, m.optim_bytes]
                .into_iter()
                .map(|b| b.unwrap_or(0))
                .sum::<u64>();
            json!({
                "rank": m.rank, "phase": m.phase, "param_bytes": m.param_bytes,
                "grad_bytes": m.grad_bytes, "optim_bytes": m.optim_bytes, "state_bytes": state,
                "predicted_bytes": m.predicted_bytes, "peak_bytes": m.peak_bytes,
                "reserved_bytes": m.reserved_bytes, "allocated_bytes": m.allocated_bytes,
            })
        })
        .collect();
    v.insert("memory".into(), Value::Array(memory));
    let comm: Vec<Value> = r
        .ranks
        .values()
        .filter(|x| x.comm_totals.steps > 0)
        .map(|x| {
            let per_step: Map<String, Value> = x
                .comm_totals
                .by_op
                .iter()
                .map(|(op, t)| {
                    let n = x.comm_totals.steps as f64;
                    (
                        op.clone(),
                        json!({"calls": t.count as f64 / n, "bytes": t.bytes as f64 / n, "ms": t.ms / n}),
                    )
                })
                .collect();
            json!({"rank": x.rank, "timed_steps": x.comm_totals.steps, "per_step": per_step})
        })
        .collect();
    v.insert("comm".into(), Value::Array(comm));
}

/// The JAX experiment's figures: the receipt (collectives in the compiled step, the passes that
/// merged them, the layouts), the equality checks and memory per device.
fn jax(r: &RunView, v: &mut Map<String, Value>) {
    v.insert("devices".into(), json!(r.spec.k));
    v.insert("processes".into(), json!(r.spec.processes()));
    let receipt = r.figures.hlo.as_ref().map_or(Value::Null, |h| {
        json!({
            "k": h.k, "platform": h.platform, "sharding": h.sharding,
            "all_reduce_ops": h.all_reduce_ops, "all_reduce_bytes": h.all_reduce_bytes,
            "ops": h.ops, "combined_by": h.combined_by, "layout": h.layout,
        })
    });
    v.insert("receipt".into(), receipt);
    v.insert("checks".into(), json!(r.figures.checks));
    v.insert("equality".into(), equality(r));
    let mem: Vec<Value> = r
        .figures
        .device_memory
        .values()
        .map(|m| {
            json!({
                "device": m.device, "phase": m.phase, "param_bytes": m.param_bytes,
                "optim_bytes": m.optim_bytes, "predicted_bytes": m.predicted_bytes,
                "peak_bytes": m.peak_bytes, "allocated_bytes": m.allocated_bytes,
            })
        })
        .collect();
    v.insert("device_memory".into(), Value::Array(mem));
}

/// The k=1 vs k verdict over every checked step and the parameters, with the tolerance rule it
/// was decided by (`app::equality`); null when the run made no check.
fn equality(r: &RunView) -> Value {
    let Some(e) = crate::app::equality::equality(&r.figures.checks) else {
        return Value::Null;
    };
    let figure = |c: &crate::protocol::Check| json!({"step": c.step, "diff": c.diff, "tol": c.tol, "ok": c.ok});
    json!({
        "verdict": e.verdict.as_str(),
        "loss_steps": e.loss_steps,
        "worst_loss": e.worst_loss.as_ref().map(figure),
        "params_after_step_1": e.params.as_ref().map(figure),
        "tolerance": e.rule,
        "test_switch": e.test_switch,
    })
}
