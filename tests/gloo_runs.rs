//! Real PyTorch DDP over gloo on the CPU, through the real binary: weak k=1,2, probe and the
//! all-reduce sweep at k=2. Needs a python with torch in DDPTOP_PYTHON (scripts/test sets it up);
//! on CI (CI=1) a missing torch is a failure, elsewhere the tests say so and return.

mod common;
use common::*;

fn python() -> Option<String> {
    python_importing("torch")
}

#[test]
fn gloo_weak_probe_and_allreduce() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();

    let weak = gloo(
        d.path(),
        &py,
        &["weak", "--k", "1,2", "--samples", "1024", "--batch", "32"],
    );
    assert_eq!(weak["backend"], "gloo");
    assert_eq!(weak["simulated"], false);
    for r in weak["runs"].as_array().unwrap() {
        assert_eq!(r["status"], "completed");
        // No false diagnosis (issue 44): a healthy run names no failure.
        assert_eq!(r["diagnoses"], serde_json::json!([]), "{r:#}");
        assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
        assert_eq!(
            r["versions"]["torch"].as_str().map(|v| v.starts_with("2.")),
            Some(true)
        );
    }
    let k2 = &weak["runs"][1];
    let tl = k2["timeline"]
        .as_array()
        .expect("k=2 gloo run reports bucket spans");
    assert_eq!(tl.len(), 2, "a timeline from each rank");
    let buckets = tl[0]["buckets"].as_array().unwrap();
    assert!(
        buckets.len() >= 2,
        "tiny model with a small bucket cap has several buckets"
    );
    assert!(buckets.iter().all(|b| b["bytes"].as_u64().unwrap() > 0));
    // The log starts with the run's own lines: no torch warning about a deprecated flight
    // recorder variable (ddptop sets the current TORCH_FR_* names).
    let log = std::fs::read_to_string(k2["output_log"].as_str().unwrap()).unwrap();
    assert!(!log.contains("is deprecated"), "{log}");

    // 4 blocks per mode instead of 15: the shape of the probe, in a quarter of its steps.
    let probe = gloo(
        d.path(),
        &py,
        &[
            "probe",
            "--k",
            "2",
            "--batch",
            "16",
            "--env",
            "DDPTOP_PROBE_BLOCKS=4",
        ],
    );
    let runs = probe["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "k=2 plus the k=1 control");
    assert_eq!(runs[1]["control"], true);
    for r in runs {
        assert!(r["probe"]["synced_ms"]["median"].as_f64().unwrap() > 0.0);
        assert_eq!(
            r["probe"]["no_sync_ms"]["blocks"].as_u64(),
            Some(4),
            "{r:#}"
        );
    }

    let ar = gloo(d.path(), &py, &["allreduce", "--k", "2"]);
    let rows = ar["runs"][0]["bench"].as_array().unwrap();
    // 1 KiB … 16 MiB in ×4 steps on gloo: 1K 4K 16K 64K 256K 1M 4M 16M.
    let sizes: Vec<u64> = rows.iter().map(|r| r["bytes"].as_u64().unwrap()).collect();
    assert_eq!(
        sizes,
        vec![1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20]
    );
    assert!(rows.iter().all(|r| r["busbw_gbs"].as_f64().unwrap() > 0.0));
}

/// `ddptop run fsdp --k 2` with each strategy: FSDP2 shards hold half of what DDP holds on each
/// rank, ZeRO-1 holds weights and gradients whole and half of Adam's moments (8P + 8P/k), all
/// report memory per rank (no peak on CPU) and their collectives per timed step.
#[test]
fn gloo_fsdp_against_ddp_at_k2() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let run = |strategy: &str| {
        let doc = gloo(
            d.path(),
            &py,
            &[
                "fsdp",
                "--k",
                "2",
                "--strategy",
                strategy,
                "--samples",
                "256",
                "--batch",
                "32",
            ],
        );
        assert_eq!(doc["experiment"], "fsdp");
        let r = doc["runs"][0].clone();
        assert_eq!(r["status"], "completed", "{r:#}");
        assert_eq!(r["diagnoses"], serde_json::json!([]), "{r:#}");
        assert_eq!(r["strategy"], strategy);
        assert_eq!(r["optimizer"], "adam", "fsdp defaults to Adam");
        assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
        r
    };
    let fsdp = run("fsdp");
    let zero1 = run("zero1");
    let ddp = run("ddp");
    let last = |r: &serde_json::Value, rank: u64| -> serde_json::Value {
        r["memory"]
            .as_array()
            .unwrap()
            .iter()
            .rfind(|m| m["rank"] == rank)
            .cloned()
            .expect("a memory report per rank")
    };
    for rank in [0, 1] {
        let (f, g) = (last(&fsdp, rank), last(&ddp, rank));
        assert_eq!(f["phase"], "epoch1");
        assert!(
            f["peak_bytes"].is_null() && g["peak_bytes"].is_null(),
            "no peak on CPU"
        );
        let (fp, dp) = (
            f["param_bytes"].as_u64().unwrap(),
            g["param_bytes"].as_u64().unwrap(),
        );
        assert_eq!(2 * fp, dp, "the tiny CNN's rows are all even: exactly half");
        let (fs, ds) = (
            f["state_bytes"].as_u64().unwrap(),
            g["state_bytes"].as_u64().unwrap(),
        );
        assert!(fs < ds * 51 / 100 && fs > ds * 49 / 100, "{fs} vs {ds}");
        assert_eq!(
            g["predicted_bytes"].as_u64().unwrap(),
            4 * dp,
            "16P with Adam"
        );
        // ZeRO-1: the same 8P of weights and gradients as DDP, Adam's moments for its share.
        let z = last(&zero1, rank);
        let num = |m: &serde_json::Value, k: &str| m[k].as_u64().unwrap();
        assert_eq!(num(&z, "param_bytes"), dp);
        assert_eq!(num(&z, "grad_bytes"), num(&g, "grad_bytes"));
        let (zs, zp) = (num(&z, "state_bytes"), num(&z, "predicted_bytes"));
        assert!(
            zs.abs_diff(zp) * 100 <= zp,
            "state {zs} within 1% of the prediction {zp}"
        );
        assert!(
            num(&z, "optim_bytes") < num(&g, "optim_bytes"),
            "{z:#} vs {g:#}"
        );
    }
    // The ranks' moments partition DDP's: 8P over both ranks (Adam's step scalars aside).
    let moments: u64 = (0..2)
        .map(|r| {
            last(&zero1, r)["predicted_bytes"].as_u64().unwrap()
                - 2 * last(&ddp, r)["param_bytes"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(moments, 2 * last(&ddp, 0)["param_bytes"].as_u64().unwrap());
    let per_step = |r: &serde_json::Value, op: &str| r["comm"][0]["per_step"][op].clone();
    // tiny: 6 conv/linear units + root; forward gathers 7, backward 6; 7 reduce-scatters.
    assert_eq!(per_step(&fsdp, "all_gather")["calls"].as_f64(), Some(13.0));
    assert_eq!(
        per_step(&fsdp, "reduce_scatter")["calls"].as_f64(),
        Some(7.0)
    );
    assert_eq!(
        per_step(&fsdp, "reduce_scatter")["bytes"].as_f64().unwrap() as u64,
        2 * last(&fsdp, 0)["param_bytes"].as_u64().unwrap(),
        "one reduce-scatter of every gradient per step"
    );
    assert!(per_step(&ddp, "all_reduce")["bytes"].as_f64().unwrap() > 0.0);
    assert!(per_step(&ddp, "all_gather").is_null());
}

#[test]
fn gloo_slow_first_step_completes_without_a_hang_verdict() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    // Each rank's first step burns 8 s of CPU before it trains, past the 3 s steady threshold
    // (`--hang-floor 3`) and inside the first-steps allowance: not a hang.
    let doc = gloo(
        d.path(),
        &py,
        &[
            "weak",
            "--k",
            "2",
            "--samples",
            "256",
            "--batch",
            "32",
            "--inject",
            "slowstart:8",
            "--hang-floor",
            "3",
        ],
    );
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    assert!(r["hang_report"].as_array().unwrap().is_empty(), "{r:#}");
}

#[test]
fn gloo_slow_rank_is_named_and_a_healthy_run_names_nobody() {
    let _cpu = cpu_alone();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    // Real DDP on the CPU: rank 1 waits half its own step time for each batch; rank 0 waits
    // for it at the collectives (the forward's buffer broadcast and the all-reduce).
    let run = |inject: Option<&str>| {
        let mut c = ddptop(d.path());
        // This tree's workers, whichever target directory the binary was built in.
        c.env("DDPTOP_PYTHON", &py)
            .env(
                "DDPTOP_WORKERS_DIR",
                concat!(env!("CARGO_MANIFEST_DIR"), "/workers"),
            )
            .args([
                "run",
                "weak",
                "--k",
                "2",
                "--samples",
                "3072",
                "--batch",
                "32",
            ])
            .args(["--backend", "gloo", "--model", "tiny", "--json"]);
        if let Some(f) = inject {
            c.args(["--inject", f]);
        }
        let out = c.output().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert!(out.status.success(), "{doc:#}\n{}", output_tails(&doc));
        assert_no_survivors(&doc);
        doc["runs"][0].clone()
    };
    let slow = run(Some("slow:1:1.5"));
    assert_eq!(slow["status"], "completed", "{slow:#}");
    let s = slow["stragglers"].as_array().unwrap();
    assert_eq!(s.len(), 1, "{s:#?}");
    assert_eq!(
        (&s[0]["rank"], &s[0]["phase"]),
        (&1.into(), &"data wait".into()),
        "{s:#?}"
    );
    let healthy = run(None);
    assert_eq!(healthy["stragglers"], serde_json::json!([]), "{healthy:#}");
}

/// The wall-clock instants (unix seconds) of a run's first event whose type is `kind` and
/// whose body holds `text`, from the store ddptop wrote.
fn event_times(data: &std::path::Path, kind: &str, text: &str) -> Vec<(f64, String)> {
    let conn = rusqlite::Connection::open_with_flags(
        data.join("runs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT unix, body FROM events WHERE type = ?1 AND instr(body, ?2) > 0 ORDER BY seq",
        )
        .unwrap();
    stmt.query_map([kind, text], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// `uptime`'s three load averages (1, 5 and 15 minutes), for a timing test's failure message.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<&str> = text.split_whitespace().take(3).collect();
    format!("load average: {}", v.join(", "))
}

/// `ddptop run weak --k K` of the tiny model over gloo in a fresh data directory: `steps` steps
/// an epoch at per-rank batch `batch` (2 epochs, the first warm-up), `extra` arguments and `env`
/// set (each step timed unless `env` sets DDPTOP_TIME_EVERY). The data directory (its store)
/// and the run's document, once ddptop exited 0 and left no process behind.
fn weak_tiny_run(
    py: &str,
    k: u32,
    batch: u32,
    steps: u32,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (tempfile::TempDir, serde_json::Value) {
    let d = tempfile::tempdir().unwrap();
    let samples = (steps * batch * k).to_string();
    let mut c = ddptop(d.path());
    // This tree's workers, whichever target directory the binary was built in.
    c.env("DDPTOP_PYTHON", py)
        .env(
            "DDPTOP_WORKERS_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/workers"),
        )
        .env_remove("DDPTOP_TIME_EVERY")
        .envs(env.iter().copied())
        .args(["run", "weak", "--k", &k.to_string()])
        .args(["--samples", &samples, "--batch", &batch.to_string()])
        .args(["--epochs", "2", "--backend", "gloo"])
        .args(["--model", "tiny", "--json"])
        .args(extra);
    let out = c.output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(
        out.status.success(),
        "{doc:#}\n{}\n{}",
        output_tails(&doc),
        load_average()
    );
    assert_no_survivors(&doc);
    (d, doc["runs"][0].clone())
}

/// A `slow:1:…@STEP` run's verdict: rank 1 named first, in `phase`, and nobody else ever (the
/// ranks that wait for it are no stragglers); the seconds from its worker's "slowing from now"
/// event to its straggler record (both stored in `data`'s runs.db), and the step it was named
/// at. `ctx` heads every failure message.
fn rank_1_named_after(
    data: &std::path::Path,
    r: &serde_json::Value,
    phase: &str,
    ctx: &str,
) -> (f64, serde_json::Value) {
    let s = r["stragglers"].as_array().unwrap();
    assert!(!s.is_empty(), "{ctx}: nobody named\n{r:#}");
    assert_eq!(
        (&s[0]["rank"], &s[0]["phase"]),
        (&1.into(), &phase.into()),
        "{ctx}: {s:#?}"
    );
    assert!(s.iter().all(|x| x["rank"] == 1), "{ctx}: {s:#?}");
    let start = event_times(data, "log", "slowing from now");
    assert_eq!(start.len(), 1, "{ctx}: {start:?}");
    let named = event_times(data, "straggler", "\"rank\":1");
    (named[0].0 - start[0].0, s[0]["step"].clone())
}

#[test]
fn gloo_slow_from_a_step_is_named_within_5_s_at_k2_and_k4_and_healthy_k4_names_nobody() {
    let _cpu = cpu_alone();
    let Some(py) = python() else { return };
    // Issue 46: from the instant rank 1 turns 1.5x slower mid-run (its worker logs "slowing
    // from now" at step 40, whose arrival ddptop stores) to the straggler record, at most 5 s.
    // Batch 8 of the tiny model: a few steps a second on a loaded 2-core host at k=4.
    // 50 steps an epoch at per-rank batch 8, 2 epochs: 60 steps after the slowdown.
    let run = |k: u32, inject: Option<&str>| {
        let extra: Vec<&str> = inject.map_or(vec![], |f| vec!["--inject", f]);
        weak_tiny_run(&py, k, 8, 50, &extra, &[])
    };
    let mut measured = Vec::new();
    // The slowdown in the data wait at k=2 and k=4. (`slow:1:1.5:compute@40` at k=2 was named
    // in 1.0 and 1.5 s twice, and not at all once under other builds' load: not asserted here,
    // docs/stragglers.md.)
    for (k, fault, phase) in [
        (2u32, "slow:1:1.5@40", "data wait"),
        (4, "slow:1:1.5@40", "data wait"),
    ] {
        let (d, r) = run(k, Some(fault));
        assert_eq!(r["status"], "completed", "{r:#}");
        let (latency, step) = rank_1_named_after(d.path(), &r, phase, &format!("k={k} {fault}"));
        measured.push((k, fault, latency, step.clone()));
        assert!(
            (0.0..=5.0).contains(&latency),
            "k={k} {fault}: named {latency:.2} s after the slowdown began (step {step}): {:#?}",
            r["stragglers"]
        );
    }
    eprintln!("latency (k, fault, s, step named): {measured:?}");
    let (_d, healthy) = run(4, None);
    assert_eq!(healthy["status"], "completed", "{healthy:#}");
    assert_eq!(healthy["stragglers"], serde_json::json!([]), "{healthy:#}");
}

/// Issue 46, "no false stragglers": 10 healthy runs at k=2 and 10 at k=4 (the latency test's run
/// without its fault: tiny model, batch 8 per rank, 100 steps, each step timed) name nobody.
/// In the late lane (`slow` in its name): the runs time ranks against each other.
#[test]
fn gloo_ten_healthy_runs_at_k2_and_k4_name_no_slow_rank() {
    let _cpu = cpu_alone();
    let Some(py) = python() else { return };
    // 100 steps is no more than the detector needs: it scores nothing before a full window
    // (30 samples after the first 3 steps), then names a rank only after confirmation, so a run
    // is assessed over its last ~67 steps (~2 s at k=2, ~4 s at k=4 on 2 cores); each run's
    // wall time is mostly its start (torch imports: ~5 s at k=2, ~12 s at k=4).
    let t0 = std::time::Instant::now();
    let (mut lines, mut failed) = (Vec::new(), Vec::new());
    for k in [2u32, 4] {
        for i in 1..=10 {
            let before = load_average();
            let (_d, r) = weak_tiny_run(&py, k, 8, 50, &[], &[]);
            let named = r["stragglers"].as_array().cloned().unwrap_or_default();
            let starved = r["caveats"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c.as_str().is_some_and(|c| c.contains("CPU starvation")))
                .count();
            let mut line = format!(
                "k={k} run {i}: {}, {:.1} ms/step, named {}, {starved} CPU-starvation caveat(s); \
                 before: {before}; after: {}",
                r["status"],
                r["step_ms_median"].as_f64().unwrap_or(f64::NAN),
                named.len(),
                load_average()
            );
            for s in &named {
                line.push_str(&format!(
                    "\n    rank {} `{}` score {:.2} at step {} ({}): {}",
                    s["rank"],
                    s["phase"].as_str().unwrap_or("?"),
                    s["score"].as_f64().unwrap_or(f64::NAN),
                    s["step"],
                    if s["active"] == true {
                        "still named"
                    } else {
                        "un-named"
                    },
                    s["evidence"].as_str().unwrap_or("?")
                ));
            }
            if r["status"] != "completed" || !named.is_empty() {
                failed.push(format!("{line}\n    caveats: {}", r["caveats"]));
            }
            lines.push(line);
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    eprintln!("{}\n20 healthy runs in {wall:.0} s", lines.join("\n"));
    assert!(
        failed.is_empty(),
        "{} of 20 healthy runs named a straggler or did not complete:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// Issue 46's 5 s on the sampled path: NCCL runs time one step every 0.2-0.45 s of run time
/// after warm-up (`DDPTOP_TIME_EVERY=auto`, set by src/supervisor/launch.rs, the cadence of
/// workers/ddptop_worker/cadence.py); the gloo worker honours it too. k=2 at batch 2 (~35-85
/// steps/s on 2 cores: 1 in 8 or 16) and k=4 at batch 8 (~10-16 steps/s: 1 in 2 or 4), where
/// the old fixed 1 in 10 named the rank 3.3-6.3 s late at 16 steps/s and 10.5-11.7 s at 10
/// (docs/stragglers.md, "Sampling by run time"; raw docs/results/raw/2026-12-05h-cadence). The
/// bucket timeline is sampled as on CUDA too (`DDPTOP_TIMELINE_EVERY=4`): the comm wait the
/// score subtracts comes from the step messages on 3 timed steps in 4.
#[test]
fn gloo_slow_rank_sampled_by_run_time_is_named_within_5_s_at_k2_and_k4() {
    let _cpu = cpu_alone();
    let Some(py) = python() else { return };
    // Two epochs: the warm-up epoch (every step timed) fills the window; the slowdown begins
    // 105 steps into the sampled epoch, between two timed steps as it may on NCCL, with ~7 s
    // left at k=2 (at ~80 steps/s `auto` times 1 in 32: 300 steps an epoch ended ~3.5 s after
    // the slowdown, before the 5 + 3 samples, and named nobody in 2 of 4 runs).
    for (k, batch, per_epoch, fault) in [
        (2u32, 2, 500, "slow:1:1.5@605"),
        (4, 8, 200, "slow:1:1.5@305"),
    ] {
        let (d, r) = weak_tiny_run(
            &py,
            k,
            batch,
            per_epoch,
            &["--inject", fault],
            // As on CUDA: 3 timed steps in 4 send their comm wait in the step message (ready
            // marks only), the 4th a whole bucket timeline.
            &[
                ("DDPTOP_TIME_EVERY", "auto"),
                ("DDPTOP_TIMELINE_EVERY", "4"),
            ],
        );
        let load = load_average();
        assert_eq!(r["status"], "completed", "k={k}: {r:#}");
        let sampled = event_times(d.path(), "log", "one step timed every ");
        assert!(!sampled.is_empty(), "k={k}: not sampled: {r:#}");
        let lines = event_times(d.path(), "log", "bucket timeline on 1 timed step in 4");
        assert!(!lines.is_empty(), "k={k}: the timeline not sampled: {r:#}");
        let steps_per_s = 1e3 / r["step_ms_median"].as_f64().unwrap_or(f64::NAN);
        let ctx = format!("k={k} {fault}, sampled by run time ({steps_per_s:.0} steps/s, {load})");
        let (latency, step) = rank_1_named_after(d.path(), &r, "data wait", &ctx);
        eprintln!("{ctx}: named {latency:.2} s after the slowdown began (step {step})");
        assert!(
            (0.0..=5.0).contains(&latency),
            "{ctx}: named {latency:.2} s after the slowdown began (step {step}): {:#?}",
            r["stragglers"]
        );
    }
}
