//! The supervisor with the simulated worker, through the real binary: scaling on both profiles,
//! fault injection, rejected intruders, and no process left behind.

mod common;
use common::*;

fn speedups(doc: &serde_json::Value) -> Vec<f64> {
    doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["speedup"].as_f64().unwrap())
        .collect()
}

#[test]
fn weak_scaling_book_pcie_matches_the_book() {
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = run_json(
        d.path(),
        &[
            "weak",
            "--k",
            "1,2,4",
            "--backend",
            "sim",
            "--profile",
            "book-pcie",
            "--sim-speed",
            "20",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(doc["simulated"], true);
    for r in doc["runs"].as_array().unwrap() {
        assert_eq!(r["status"], "completed");
        assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
        assert_eq!(
            r["per_rank_samples_per_s"].as_array().unwrap().len() as u64,
            r["k"].as_u64().unwrap()
        );
    }
    let s = speedups(&doc);
    // Profile noise is 1% per step; means over an epoch are well inside these bands.
    assert!((s[0] - 1.0).abs() < 1e-9);
    assert!((s[1] - 1.8).abs() < 0.06, "k=2 speedup {}", s[1]);
    assert!((s[2] - 3.3).abs() < 0.1, "k=4 speedup {}", s[2]);
    assert_no_survivors(&doc);
}

#[test]
fn weak_scaling_h200_matches_baseline_and_shows_buckets() {
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = run_json(
        d.path(),
        &[
            "weak",
            "--k",
            "1,2",
            "--backend",
            "sim",
            "--profile",
            "h200-nvlink",
            "--sim-speed",
            "20",
        ],
    );
    assert!(out.status.success());
    let runs = doc["runs"].as_array().unwrap();
    let k1 = runs[0]["samples_per_s"].as_f64().unwrap();
    assert!((k1 - 5600.0).abs() < 250.0, "k=1 {k1}");
    let s = speedups(&doc);
    assert!((s[1] - 1.96).abs() < 0.05, "k=2 speedup {}", s[1]);
    let tl = runs[1]["timeline"]
        .as_array()
        .expect("k=2 has a bucket timeline");
    let buckets = tl[0]["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 3);
    for b in buckets {
        let ms = b["comm_ms"].as_f64().unwrap();
        assert!(
            ms > 0.03 && ms < 0.4,
            "bucket all-reduce {ms} ms is not tens-to-hundreds of µs"
        );
    }
    assert_no_survivors(&doc);
}

#[test]
fn strong_scaling_splits_the_global_batch() {
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = sim_json(d.path(), &["strong", "--k", "1,2", "--samples", "20000"]);
    assert!(out.status.success());
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs[0]["per_rank_batch"], 512);
    assert_eq!(runs[1]["per_rank_batch"], 256);
    assert_eq!(runs[1]["global_batch"], 512);
}

#[test]
fn hang_is_detected_within_the_threshold_and_stopped() {
    let d = tempfile::tempdir().unwrap();
    let t0 = std::time::Instant::now();
    let (out, doc) = sim_json(
        d.path(),
        &[
            "weak",
            "--k",
            "2",
            "--inject",
            "hang:20",
            "--hang-floor",
            "3",
        ],
    );
    let took = t0.elapsed().as_secs_f64();
    assert_eq!(out.status.code(), Some(1));
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "hung");
    assert!(
        r["samples_per_s"].is_null(),
        "a hung run shows no throughput"
    );
    let why = r["reason"].as_str().unwrap();
    assert!(why.contains("stuck at step 20"), "{why}");
    // Judged at the threshold (3 s) from the last progress, not later: "… for X s …".
    let stuck_s: f64 = why
        .split("stuck at step 20 for ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no stuck time in {why}"));
    assert!((3.0..=3.1).contains(&stuck_s), "{why}");
    // The sim's ranks sleep in the hang: idle, no collective pending.
    assert!(why.starts_with("stalled outside communication"), "{why}");
    assert!(r["hang_report"].as_array().unwrap().len() >= 3);
    // 3 s threshold + evidence collection + stop; generous bound for a loaded CI machine.
    assert!(took < 30.0, "took {took} s");
    assert_no_survivors(&doc);
}

#[test]
fn a_slow_first_step_is_not_a_hang() {
    // Every rank's first step burns 8 s of CPU (as cudnn.benchmark's autotuning does), well
    // past the 3 s steady threshold (`--hang-floor 3`): the first-steps allowance (120 s)
    // waits it out.
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = sim_json(
        d.path(),
        &[
            "weak",
            "--k",
            "2",
            "--samples",
            "20000",
            "--inject",
            "slowstart:8",
            "--hang-floor",
            "3",
        ],
    );
    assert!(out.status.success(), "{doc:#}");
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    assert!(r["hang_report"].as_array().unwrap().is_empty(), "{r:#}");
    assert_no_survivors(&doc);
}

#[test]
fn silent_rank_is_hung() {
    let d = tempfile::tempdir().unwrap();
    let (_, doc) = sim_json(
        d.path(),
        &[
            "weak",
            "--k",
            "2",
            "--inject",
            "silent:10",
            "--hang-floor",
            "3",
        ],
    );
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "hung");
    assert!(
        r["reason"].as_str().unwrap().contains("rank 1 silent"),
        "{}",
        r["reason"]
    );
    assert_no_survivors(&doc);
}

#[test]
fn crash_fails_the_run_with_the_exit_code() {
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = sim_json(d.path(), &["weak", "--k", "2", "--inject", "crash:15"]);
    assert_eq!(out.status.code(), Some(1));
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "failed");
    assert!(r["samples_per_s"].is_null());
    let why = r["reason"].as_str().unwrap();
    assert!(why.contains("exit status: 3"), "{why}");
    assert_no_survivors(&doc);
}

#[test]
fn garbage_and_intruders_are_rejected_while_the_run_completes() {
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = sim_json(
        d.path(),
        &[
            "weak",
            "--k",
            "2",
            "--inject",
            "garbage",
            "--samples",
            "20000",
        ],
    );
    assert!(out.status.success());
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed");
    assert_eq!(r["bad_lines"], 4);
    // One wrong-token and one duplicate-rank connection.
    assert_eq!(r["rejected_connections"], 2);
    assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
    assert_no_survivors(&doc);
}

#[test]
fn probe_runs_with_a_k1_control() {
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = sim_json(d.path(), &["probe", "--k", "2"]);
    assert!(out.status.success());
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    // The probe first, then its k=1 control (one planner for `ddptop run` and the dashboard).
    assert_eq!(
        (&runs[0]["control"], &runs[0]["k"]),
        (&false.into(), &2.into())
    );
    assert_eq!(
        (&runs[1]["control"], &runs[1]["k"]),
        (&true.into(), &1.into())
    );
    for r in runs {
        let p = &r["probe"];
        assert_eq!(p["synced_ms"]["blocks"], 15);
        assert!(
            p["synced_ms"]["median"].as_f64().unwrap()
                > p["no_sync_ms"]["median"].as_f64().unwrap()
        );
    }
}

#[test]
fn allreduce_sweep_has_a_row_per_size_and_the_memcpy_ratio() {
    let d = tempfile::tempdir().unwrap();
    let (_, base) = run_json(
        d.path(),
        &[
            "allreduce",
            "--k",
            "2",
            "--backend",
            "sim",
            "--profile",
            "book-pcie",
            "--sim-speed",
            "20",
        ],
    );
    let (_, memcpy) = run_json(
        d.path(),
        &[
            "allreduce",
            "--k",
            "2",
            "--backend",
            "sim",
            "--profile",
            "book-pcie",
            "--sim-speed",
            "20",
            "--env",
            "NCCL_SHM_USE_CUDA_MEMCPY=1",
            "--sim-noise",
            "0",
        ],
    );
    let rows = base["runs"][0]["bench"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        10,
        "1 KiB … 256 MiB ×4 is 10 sizes; 64 MiB is among them"
    );
    let at = |doc: &serde_json::Value, bytes: u64| {
        doc["runs"][0]["bench"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["bytes"] == bytes)
            .unwrap()["busbw_gbs"]
            .as_f64()
            .unwrap()
    };
    let ratio = at(&memcpy, 64 << 20) / at(&base, 64 << 20);
    assert!((ratio - 5.0).abs() < 0.4, "memcpy ratio {ratio}");
}

#[test]
fn book_deadlock_mode_hangs_training() {
    let d = tempfile::tempdir().unwrap();
    let (_, doc) = run_json(
        d.path(),
        &[
            "weak",
            "--k",
            "2",
            "--backend",
            "sim",
            "--profile",
            "book-pcie",
            "--sim-speed",
            "20",
            "--env",
            "NCCL_SHM_USE_CUDA_MEMCPY=1",
            "--hang-floor",
            "3",
        ],
    );
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "hung");
    // In its first steps, but the ranks are inside an all-reduce: a communication hang at the
    // threshold, not the first-steps allowance.
    let why = r["reason"].as_str().unwrap();
    assert!(why.starts_with("communication hang"), "{why}");
    assert!(why.contains("inside nccl:all_reduce"), "{why}");
    assert_no_survivors(&doc);
}

#[test]
fn a_rank_that_raises_and_blocks_its_peers_fails_the_run_with_its_error() {
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = sim_json(
        d.path(),
        &[
            "weak",
            "--k",
            "2",
            "--inject",
            "raise:12",
            "--hang-floor",
            "3",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "failed", "{r:#}");
    let why = r["reason"].as_str().unwrap();
    assert!(
        why.contains("rank 1 failed: RuntimeError: injected exception at step 12"),
        "{why}"
    );
    assert!(why.contains("the other ranks then hung"), "{why}");
    assert!(r["samples_per_s"].is_null());
    assert_no_survivors(&doc);
}

#[test]
fn a_slow_rank_is_named_with_its_phase_within_five_seconds() {
    // In real time (--sim-speed 1): the slowed run still makes >= 10 steps/s, the pace the
    // issue sets for naming a 1.5x rank within 5 s of its start.
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = run_json(
        d.path(),
        &[
            "weak",
            "--k",
            "4",
            "--backend",
            "sim",
            "--sim-speed",
            "1",
            "--inject",
            "slow:1:1.5",
        ],
    );
    assert!(out.status.success(), "{doc:#}");
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    let step_ms = r["step_ms_median"].as_f64().unwrap();
    assert!(step_ms < 100.0, "slower than 10 steps/s: {step_ms} ms");
    let s = r["stragglers"].as_array().unwrap();
    assert_eq!(s.len(), 1, "{s:#?}");
    assert_eq!(s[0]["rank"], 1, "{s:#?}");
    assert_eq!(s[0]["phase"], "data wait", "{s:#?}");
    let score = s[0]["score"].as_f64().unwrap();
    assert!((0.6..0.75).contains(&score), "1.5x slower: score {score}");
    let since = s[0]["since"].as_f64().unwrap();
    assert!(since < 5.0, "named {since} s after launch");
    let ev = s[0]["evidence"].as_str().unwrap();
    assert!(
        ev.starts_with("rank 1 at 0.") && ev.contains("the others wait"),
        "{ev}"
    );
    assert_no_survivors(&doc);
    // Stored with the run: `runs --json`, `show` and the report say the same.
    let id = r["run_id"].as_str().unwrap();
    let runs = ddptop(d.path()).args(["runs", "--json"]).output().unwrap();
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(runs["runs"][0]["stragglers"][0]["evidence"], ev, "{runs:#}");
    let show = ddptop(d.path()).args(["show", id]).output().unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.lines()
            .any(|l| l.starts_with("straggler") && l.ends_with(ev)),
        "{show}"
    );
    let md = d.path().join("report.md");
    let rep = ddptop(d.path())
        .args(["report", "--format", "md", "-o"])
        .arg(&md)
        .output()
        .unwrap();
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    let md = std::fs::read_to_string(md).unwrap();
    assert!(
        md.contains(&format!("(step {}): {ev}", s[0]["step"])),
        "{md}"
    );
}

#[test]
fn a_healthy_sim_run_of_ten_minutes_names_nobody() {
    // About 11,000 steps of 47 ms modelled (9 minutes of the profile's time) on 4 noisy ranks:
    // hundreds of windows, none of them may name a rank.
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = sim_json(
        d.path(),
        &["weak", "--k", "4", "--samples", "6000000", "--epochs", "2"],
    );
    assert!(out.status.success(), "{doc:#}");
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    assert_eq!(r["stragglers"], serde_json::json!([]), "{r:#}");
    assert_no_survivors(&doc);
}
