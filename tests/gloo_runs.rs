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

#[test]
fn gloo_slow_from_a_step_is_named_within_5_s_at_k2_and_k4_and_healthy_k4_names_nobody() {
    let _cpu = cpu_alone();
    let Some(py) = python() else { return };
    // Issue 46: from the instant rank 1 turns 1.5x slower mid-run (its worker logs "slowing
    // from now" at step 40, whose arrival ddptop stores) to the straggler record, at most 5 s.
    // Batch 8 of the tiny model: a few steps a second on a loaded 2-core host at k=4.
    let run = |k: u32, inject: Option<&str>| {
        let d = tempfile::tempdir().unwrap();
        // 50 steps an epoch at per-rank batch 8, 2 epochs: 60 steps after the slowdown.
        let samples = (50 * 8 * k).to_string();
        let mut c = ddptop(d.path());
        c.env("DDPTOP_PYTHON", &py)
            .env(
                "DDPTOP_WORKERS_DIR",
                concat!(env!("CARGO_MANIFEST_DIR"), "/workers"),
            )
            .args(["run", "weak", "--k", &k.to_string()])
            .args(["--samples", &samples, "--batch", "8"])
            .args(["--backend", "gloo", "--model", "tiny", "--json"]);
        if let Some(f) = inject {
            c.args(["--inject", f]);
        }
        let out = c.output().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert!(out.status.success(), "{doc:#}\n{}", output_tails(&doc));
        assert_no_survivors(&doc);
        (d, doc["runs"][0].clone())
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
        let s = r["stragglers"].as_array().unwrap();
        assert!(!s.is_empty(), "k={k} {fault}: nobody named\n{r:#}");
        assert_eq!(
            (&s[0]["rank"], &s[0]["phase"]),
            (&1.into(), &phase.into()),
            "k={k} {fault}: {s:#?}"
        );
        // Nobody else, ever: the ranks that wait for it are no stragglers.
        assert!(s.iter().all(|x| x["rank"] == 1), "k={k} {fault}: {s:#?}");
        let start = event_times(d.path(), "log", "slowing from now");
        assert_eq!(start.len(), 1, "k={k}: {start:?}");
        let named = event_times(d.path(), "straggler", "\"rank\":1");
        let latency = named[0].0 - start[0].0;
        measured.push((k, fault, latency, s[0]["step"].clone()));
        assert!(
            (0.0..=5.0).contains(&latency),
            "k={k} {fault}: named {latency:.2} s after the slowdown began (step {}): {s:#?}",
            s[0]["step"]
        );
    }
    eprintln!("latency (k, fault, s, step named): {measured:?}");
    let (_d, healthy) = run(4, None);
    assert_eq!(healthy["status"], "completed", "{healthy:#}");
    assert_eq!(healthy["stragglers"], serde_json::json!([]), "{healthy:#}");
}
