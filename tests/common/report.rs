//! Reports built by hand from figures shaped like real stored runs: a gloo weak-scaling curve
//! with its k=1 baseline and cost-model predictions, one step's bucket timeline, a probe with its
//! k=1 control, and an all-reduce sweep under two NCCL settings.

#![allow(dead_code)]

use ddptop::report::*;
use std::collections::BTreeMap;

const T0: f64 = 1_796_001_300.0; // 2026-11-30T01:15:00Z

fn versions() -> BTreeMap<String, String> {
    [
        ("python".to_string(), "3.12.3".to_string()),
        ("torch".to_string(), "2.11.0".to_string()),
    ]
    .into()
}

pub fn run(id: &str, experiment: &str, k: u32, backend: &str, offset: f64) -> RunInfo {
    RunInfo {
        id: id.into(),
        experiment: experiment.parse().unwrap(),
        k,
        backend: backend.parse().unwrap(),
        profile: (backend == "sim").then(|| "book-pcie".to_string()),
        model: Some("tiny".into()),
        per_rank_batch: Some(256),
        global_batch: Some(256 * u64::from(k)),
        epochs: Some(2),
        samples: Some(60_000),
        data_path: Some("device".into()),
        data_source: Some("synthetic".into()),
        control: false,
        caveats: Vec::new(),
        settings: "defaults".into(),
        nccl_read: BTreeMap::new(),
        torch: None,
        torch_settings: None,
        torch_seen: None,
        jax_matmul_precision: None,
        status: ddptop::run::RunStatus::Completed,
        reason: None,
        started: Timestamp(T0 + offset),
        ended: Some(Timestamp(T0 + offset + 30.5)),
        transport: None,
        gpus_shared: None,
        sweep: Some("s1".into()),
        command: format!(
            "python -m ddptop_worker.train --experiment {experiment} --world-size {k} --backend {backend}"
        ),
        versions: versions(),
        output_log: Some(format!("/data/runs/{id}/output.log")),
        stragglers: Vec::new(),
        phase_scores: Vec::new(),
        fault: None,
        evidence: Vec::new(),
        rank_tails: Vec::new(),
        diagnoses: Vec::new(),
        collectives: serde_json::Value::Null,
        figures: run_doc::RunFigures::default(),
        family: Default::default(),
        detail: None,
    }
}

fn point(k: u32, id: &str, sps: f64, min: f64, max: f64, predicted: Option<f64>) -> CurvePoint {
    let base = 1000.0;
    CurvePoint {
        k,
        run_id: id.into(),
        samples_per_s: sps,
        rank_min: min,
        rank_max: max,
        speedup: Some(sps / base),
        efficiency: Some(sps / base / k as f64),
        baseline_run_id: Some("r1".into()),
        predicted_samples_per_s: predicted,
        caveat: None,
    }
}

fn bench_rows(run_id: &str, setting: &str, transport: &str, scale: f64) -> Vec<BenchRow> {
    (0..5)
        .map(|i| {
            let bytes = 1024u64 << (4 * i);
            let busbw = scale * (1.0 - (-(i as f64 + 0.5)).exp());
            BenchRow {
                run_id: run_id.into(),
                k: 2,
                setting: setting.into(),
                transport: Some(transport.into()),
                simulated: false,
                bytes,
                time_us: bytes as f64 / (busbw * 1e3),
                algbw_gbs: busbw,
                busbw_gbs: busbw,
            }
        })
        .collect()
}

/// Measured runs only: nothing in it may say SIMULATED.
pub fn measured() -> Report {
    let mut runs = vec![
        run("r1", "weak", 1, "gloo", 0.0),
        run("r2", "weak", 2, "gloo", 40.0),
        run("r4", "weak", 4, "gloo", 80.0),
        run("p2", "probe", 2, "gloo", 120.0),
        run("p1", "probe", 1, "gloo", 160.0),
        run("b0", "allreduce", 2, "nccl", 200.0),
        run("b1", "allreduce", 2, "nccl", 240.0),
        run("f2", "weak", 2, "gloo", 280.0),
    ];
    runs[5].transport = Some("P2P/CUMEM".into());
    runs[6].settings = "NCCL_SHM_USE_CUDA_MEMCPY=1".into();
    runs[6].transport = Some("SHM/CE".into());
    runs[7].status = ddptop::run::RunStatus::Failed;
    runs[7].reason = Some("rank 1 exited with status 1 | RuntimeError: boom".into());
    runs[7].ended = Some(Timestamp(T0 + 290.0));
    let mut bench = bench_rows("b0", "defaults", "P2P/CUMEM", 2.2);
    bench.extend(bench_rows(
        "b1",
        "NCCL_SHM_USE_CUDA_MEMCPY=1",
        "SHM/CE",
        11.0,
    ));
    Report {
        title: "weak scaling, gloo, tiny".into(),
        generated: Timestamp(T0 + 600.0),
        ddptop_version: "0.1.0-test".into(),
        environment: Environment {
            host: "box".into(),
            os: "Linux 6.1".into(),
            cpus: Some(16),
            gpus: vec!["NVIDIA H200".into(), "NVIDIA H200".into()],
            versions: versions(),
        },
        runs,
        curves: vec![Curve {
            label: "weak · batch 256/rank · gloo tiny · defaults".into(),
            simulated: false,
            points: vec![
                point(1, "r1", 1000.0, 1000.0, 1000.0, Some(1000.0)),
                point(2, "r2", 1800.0, 880.0, 920.0, Some(1900.0)),
                point(4, "r4", 3200.0, 780.0, 820.0, Some(3600.0)),
            ],
        }],
        timelines: vec![Timeline {
            run_id: "r2".into(),
            k: 2,
            rank: 0,
            step: 116,
            simulated: false,
            bwd_compute_ms: 30.0,
            exposed_ms: 6.0,
            overlap_pct: Some(70.0),
            optimizer_ms: Some(2.0),
            start_inferred: false,
            buckets: vec![
                BucketSpan {
                    index: 1,
                    bytes: 26_500_000,
                    ready_ms: 12.0,
                    start_ms: 12.0,
                    done_ms: 28.0,
                    kernel_ms: Some(15.5),
                },
                BucketSpan {
                    index: 0,
                    bytes: 9_500_000,
                    ready_ms: 30.0,
                    start_ms: 30.0,
                    done_ms: 36.0,
                    kernel_ms: None,
                },
            ],
            predicted_exposed_ms: Some(5.5),
        }],
        probes: vec![
            ProbeRow {
                run_id: "p2".into(),
                k: 2,
                control: false,
                simulated: false,
                synced_ms: Spread {
                    median: 50.7,
                    min: 50.3,
                    max: 51.0,
                },
                no_sync_ms: Spread {
                    median: 45.5,
                    min: 45.3,
                    max: 45.7,
                },
                blocks: 15,
                predicted_comm_ms: Some(4.0),
            },
            ProbeRow {
                run_id: "p1".into(),
                k: 1,
                control: true,
                simulated: false,
                synced_ms: Spread {
                    median: 40.2,
                    min: 40.0,
                    max: 40.5,
                },
                no_sync_ms: Spread {
                    median: 39.1,
                    min: 39.0,
                    max: 39.3,
                },
                blocks: 15,
                predicted_comm_ms: None,
            },
        ],
        bench,
    }
}

/// A simulated curve: every format must say so.
pub fn simulated() -> Report {
    let mut r = measured();
    r.title = "weak scaling, sim".into();
    r.runs.truncate(3);
    for run in &mut r.runs {
        run.backend = ddptop::protocol::Backend::Sim;
        run.profile = Some("book-pcie".into());
    }
    r.curves[0].simulated = true;
    r.curves[0].label = "weak · batch 256/rank · sim book-pcie tiny · defaults".into();
    r.timelines[0].simulated = true;
    r.probes.clear();
    r.bench.clear();
    r
}
