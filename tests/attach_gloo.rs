//! `ddptop attach`: the unmodified tutorial-style scripts in examples/ under real torchrun and
//! PyTorch DDP over gloo, through the real binary. Needs a python with torch in DDPTOP_PYTHON
//! (scripts/test sets it up); on CI (CI=1) a missing torch is a failure.

mod common;
use common::*;
use serde_json::Value;

fn python() -> Option<String> {
    python_importing("torch")
}

fn example(name: &str) -> String {
    format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `ddptop attach FLAGS -- SCRIPT ARGS --json`: the report and whether ddptop exited 0.
fn attach(data: &std::path::Path, py: &str, flags: &[&str], script: &[&str]) -> (bool, Value) {
    let out = ddptop(data)
        .env("DDPTOP_PYTHON", py)
        .arg("attach")
        .args(flags)
        .args(["--backend", "gloo", "--json", "--"])
        .args(script)
        .output()
        .unwrap();
    let doc = json_of(&out);
    assert_no_survivors(&doc);
    (out.status.success(), doc)
}

#[test]
fn the_tutorial_script_unmodified_gives_steps_throughput_buckets_and_a_curve() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let script = example("train_ddp.py");
    let (ok, doc) = attach(
        d.path(),
        &py,
        &["--k", "1,2"],
        &[&script, "--samples", "1024"],
    );
    assert!(ok, "{doc:#}");
    assert_eq!(doc["experiment"], "attach");
    assert_eq!(doc["simulated"], false);
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        let k = r["k"].as_u64().unwrap() as usize;
        assert_eq!(r["status"], "completed", "{r:#}");
        // No false diagnosis (issue 44): the tutorial script is healthy. On 2 CPU cores,
        // though, its k=2 run is at best about as fast as its k=1 (0.97x in an idle CI, 0.94x
        // in a fresh-clone CI beside the other test lanes) and with more work on the cores
        // well below (issue 51's fourth hunt: 2,885 vs 6,443 samples/s, its exposed
        // all-reduce 9.2 of 22.2 ms): "slower than one GPU" is then true, judged on its first
        // steps past warm-up. So that one verdict is allowed where the whole runs agree: k=2
        // did fewer samples/s than its k=1 run. Any other verdict, or that one on a k=2 run
        // at least as fast, fails.
        let k1_sps = runs[0]["samples_per_s"].as_f64().unwrap();
        for d in r["diagnoses"].as_array().unwrap() {
            assert_eq!((k, &d["kind"]), (2, &"slower_than_one_gpu".into()), "{r:#}");
            let sps = r["samples_per_s"].as_f64().unwrap();
            assert!(
                sps < k1_sps,
                "k=2 {sps:.0} vs k=1 {k1_sps:.0} samples/s: {r:#}"
            );
        }
        assert_eq!(r["instrument"], "full");
        // gloo has no NCCL to profile: ddptop's comm hook timed the buckets, and the run says so.
        assert_eq!(r["collectives"]["comm_timing"], "comm_hook", "{r:#}");
        assert_eq!(r["script"], script.as_str());
        assert_eq!(r["args"], serde_json::json!(["--samples", "1024"]));
        // 1024 samples split k ways, batch 32, 2 epochs: every rank counts its optimizer steps.
        let steps = 2 * 1024 / k / 32;
        assert_eq!(r["steps"], serde_json::json!(vec![steps; k]));
        // What was seen of the script, and nothing ddptop did not see (never its own defaults).
        assert_eq!(r["per_rank_batch"], 32, "{r:#}");
        assert_eq!(r["global_batch"], 32 * k as u64);
        assert_eq!(r["epochs"], 2, "two set_epoch values");
        for unknown in ["model", "samples", "data_path", "data_source"] {
            assert_eq!(r[unknown], Value::Null, "{unknown}: {r:#}");
        }
        assert_eq!(r["process_group"], true);
        assert_eq!(r["ddp_module"], true);
        let per_rank = r["per_rank_samples_per_s"].as_array().unwrap();
        assert_eq!(per_rank.len(), k);
        assert!(per_rank.iter().all(|x| x.as_f64().unwrap() > 0.0));
        assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
        assert_eq!(
            r["versions"]["torch"].as_str().map(|v| v.starts_with("2.")),
            Some(true)
        );
    }
    let k2 = &runs[1];
    let tl = k2["timeline"].as_array().expect("a bucket timeline");
    assert_eq!(tl.len(), 2, "a timeline from each rank");
    for t in tl {
        let buckets = t["buckets"].as_array().unwrap();
        assert_eq!(
            buckets.len(),
            2,
            "the MLP's 1 MiB first bucket and the rest"
        );
        assert!(buckets.iter().all(|b| b["bytes"].as_u64().unwrap() > 0));
    }
    // Its `total += loss.item()` each step is a host sync, timed per rank (issue 46): the
    // per-phase table has a host-sync row (on a CPU tensor it waits for nothing: < 1 ms).
    let phases = k2["phase_scores"].as_array().expect("a per-phase table");
    let sync = phases
        .iter()
        .find(|p| p["phase"] == "host sync")
        .unwrap_or_else(|| panic!("no host-sync row: {k2:#}"));
    let per_rank = sync["ranks"].as_object().unwrap();
    assert_eq!(per_rank.len(), 2, "{sync:#}");
    assert!(
        per_rank
            .values()
            .all(|x| (0.0..1.0).contains(&x.as_f64().unwrap())),
        "{sync:#}"
    );
    // The same script with the same arguments is one curve: k=2 is measured against this k=1.
    assert_eq!(k2["baseline_run_id"], runs[0]["run_id"]);
    assert!(k2["speedup"].as_f64().unwrap() > 0.0);
    // The stored run says the same in `show` (text and JSON) and in reports.
    let id = k2["run_id"].as_str().unwrap();
    let show = ddptop(d.path()).args(["show", id]).output().unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success(), "{text}");
    for want in [
        "model       unknown",
        "batch       32/rank, 64 global",
        "epochs      2 (the first",
        "samples     unknown",
    ] {
        assert!(
            text.lines().any(|l| l.trim_end().starts_with(want)),
            "{want}:\n{text}"
        );
    }
    let show = ddptop(d.path())
        .args(["show", id, "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["run"]["model"], Value::Null);
    assert_eq!(v["run"]["per_rank_batch"], 32);
    assert_eq!(v["run"]["samples"], Value::Null);
    let report = ddptop(d.path())
        .args(["report", id, "--format", "md"])
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&report.stdout);
    assert!(
        md.contains("| unknown | 32 | 64 | 2 | unknown | unknown |"),
        "{md}"
    );
    assert!(md.contains("| host sync |"), "{md}");
}

#[test]
fn a_script_without_process_group_or_ddp_says_its_ranks_trained_independently() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let script = d.path().join("mlp.py");
    std::fs::write(
        &script,
        "import torch\nm = torch.nn.Linear(8, 2)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n\
         for _ in range(6):\n    loss = m(torch.randn(64, 8)).square().mean()\n    \
         opt.zero_grad()\n    loss.backward()\n    opt.step()\n",
    )
    .unwrap();
    let (ok, doc) = attach(d.path(), &py, &["--k", "2"], &[script.to_str().unwrap()]);
    assert!(ok, "{doc:#}");
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed");
    assert_eq!(r["independent_ranks"], true, "{r:#}");
    assert_eq!(r["process_group"], false);
    assert_eq!(r["ddp_module"], false);
    // Only what was measured: the steps. No samples/s, no batch, no epochs.
    assert_eq!(r["steps"], serde_json::json!([6, 6]));
    assert_eq!(r["samples_per_s"], Value::Null);
    assert_eq!(r["per_rank_batch"], Value::Null);
    assert_eq!(r["epochs"], Value::Null);
    let out = ddptop(d.path())
        .env("DDPTOP_PYTHON", &py)
        .args(["show", r["run_id"].as_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("no process group and no DDP module seen: the ranks trained independently"),
        "{text}"
    );
}

#[test]
fn a_stalled_step_is_reported_not_killed_and_the_job_ends_with_its_own_status() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    // Rank 1 sleeps 15 s inside step 4 (idle, no collective pending); the threshold is 3 s.
    let (ok, doc) = attach(
        d.path(),
        &py,
        &["--k", "2", "--hang-floor", "3"],
        &[&example("train_ddp_stalls.py"), "--stall-s", "15"],
    );
    assert!(ok, "{doc:#}");
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    let report: Vec<String> = r["hang_report"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect();
    assert!(
        report
            .iter()
            .any(|l| l.contains("stuck at step 4") && l.contains("process idle")),
        "{report:#?}"
    );
    assert!(
        report.iter().any(|l| l.contains("progress resumed")),
        "{report:#?}"
    );
    assert!(
        report
            .iter()
            .any(|l| l.contains("rank 1 stack:") && l.contains("in stall_on_last_rank")),
        "{report:#?}"
    );
}

#[test]
fn a_hang_is_caught_and_stopped_a_raise_fails_with_its_last_line_an_own_hook_times_steps() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let script = example("train_ddp.py");

    // The last rank stops after optimizer step 4, heartbeats going; the other waits in gloo.
    // Asked to (--stop-on-hang), ddptop stops the user's job; the evidence names the idle
    // rank 1 (stalled outside communication) and rank 0 waiting for it in its all-reduce.
    let (ok, doc) = attach(
        d.path(),
        &py,
        &[
            "--k",
            "2",
            "--inject",
            "hang:4",
            "--hang-floor",
            "3",
            "--stop-on-hang",
        ],
        &[&script],
    );
    assert!(!ok);
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "hung", "{r:#}");
    let report = r["hang_report"].as_array().unwrap();
    let text: Vec<&str> = report.iter().map(|l| l.as_str().unwrap()).collect();
    assert!(
        text.iter().any(|l| l.contains("alive but stuck at step 4")),
        "{report:#?}"
    );
    assert!(
        text.iter()
            .any(|l| l.contains("stalled outside communication")
                && l.contains("inside gloo:all_reduce")
                && l.contains("rank 1 alive but stuck at step 4")
                && l.contains("process idle")),
        "{report:#?}"
    );
    assert!(
        text.iter()
            .any(|l| l.contains("rank 1 stack:") && l.contains("in block_forever")),
        "{report:#?}"
    );
    assert_eq!(r["worker_pids"].as_array().unwrap().len(), 2);

    // A script that raises on its last rank: failed, with its traceback's last line.
    let (ok, doc) = attach(
        d.path(),
        &py,
        &["--k", "2"],
        &[&example("train_ddp_raises.py")],
    );
    assert!(!ok);
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "failed");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.contains("rank 1: ValueError: label out of range in batch 5 (example failure)"),
        "{reason}"
    );

    // Its own comm hook: kept, steps timed, no bucket timeline; another script, another curve.
    let (ok, doc) = attach(
        d.path(),
        &py,
        &["--k", "2"],
        &[&example("train_ddp_own_hook.py"), "--epochs", "1"],
    );
    assert!(ok, "{doc:#}");
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed");
    assert_eq!(r["instrument"], "steps_only");
    assert_eq!(r["steps"], serde_json::json!([32, 32]));
    assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
    assert!(r.get("timeline").is_none(), "{r:#}");
    assert!(r["speedup"].is_null(), "no k=1 run of this command line");
}

#[test]
fn a_slow_rank_of_an_attached_script_is_named_and_a_healthy_one_is_not() {
    let _cpu = cpu_alone();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let script = example("train_ddp.py");
    // 4096 samples, batch 32, k=2, 2 epochs: 128 optimizer steps per rank, several windows.
    let run = |flags: &[&str]| {
        let (ok, doc) = attach(
            d.path(),
            &py,
            &[&["--k", "2"], flags].concat(),
            &[&script, "--samples", "4096", "--hidden", "256"],
        );
        assert!(ok, "{doc:#}\n{}", output_tails(&doc));
        let r = doc["runs"][0].clone();
        assert_eq!(r["status"], "completed", "{r:#}");
        r
    };
    // Through the bootstrap: the script is not changed; rank 1 sleeps half its step time
    // after each optimizer step, inside the next step's data wait.
    let slow = run(&["--inject", "slow:1:1.5"]);
    let s = slow["stragglers"].as_array().unwrap();
    assert_eq!(s.len(), 1, "{s:#?}");
    assert_eq!(
        (&s[0]["rank"], &s[0]["phase"]),
        (&1.into(), &"data wait".into()),
        "{s:#?}"
    );
    assert!(s[0]["score"].as_f64().unwrap() < 0.9, "{s:#?}");
    let healthy = run(&[]);
    assert_eq!(healthy["stragglers"], serde_json::json!([]), "{healthy:#}");
}

#[test]
fn a_rank_starved_of_cpu_is_a_caveat_of_the_run_not_a_straggler() {
    let _cpu = cpu_alone();
    let Some(py) = python() else { return };
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: /proc/<pid>/schedstat and sched_setaffinity are Linux's");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // train_ddp.py with rank 0 pinned to core 0 beside two busy loops (a third of a core),
    // rank 1 at nice -19: rank 0 lags 2-3x, nearly all of it waiting on a run queue. 8192
    // samples, batch 64, hidden 1024, k=2: 128 steps of ~40 ms unstarved, several windows.
    let (ok, doc) = attach(
        d.path(),
        &py,
        &["--k", "2"],
        &[
            &format!(
                "{}/tests/fixtures/scripts/starved_rank.py",
                env!("CARGO_MANIFEST_DIR")
            ),
            "--samples",
            "8192",
            "--batch-size",
            "64",
            "--hidden",
            "1024",
        ],
    );
    assert!(ok, "{doc:#}\n{}", output_tails(&doc));
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    assert_eq!(r["stragglers"], serde_json::json!([]), "{r:#}");
    let caveats: Vec<&str> = r["caveats"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let starved: Vec<&&str> = caveats
        .iter()
        .filter(|c| c.starts_with("CPU starvation, not a straggler: rank 0 waited "))
        .collect();
    assert_eq!(starved.len(), 1, "{caveats:#?}\n{r:#}");
    assert!(
        starved[0].ends_with("cores): the host is oversubscribed, not the rank"),
        "{}",
        starved[0]
    );
}

#[test]
fn ddp_settings_from_the_environment_reach_an_unmodified_scripts_ddp() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let script = example("train_ddp.py");
    // `ddptop tune` and its presets set DDP's bucket size this way: the bootstrap puts it into
    // the script's own DistributedDataParallel(...) call and says so in the run's log. (The
    // example's MLP cannot show it in its buckets: DDP's 1 MiB first bucket holds its two last
    // layers and the first is one tensor, at any size.)
    let (ok, doc) = attach(
        d.path(),
        &py,
        &["--k", "1", "--env", "DDPTOP_DDP_BUCKET_CAP_MB=0.05"],
        &[&script, "--samples", "512"],
    );
    assert!(ok, "{doc:#}");
    let id = doc["runs"][0]["run_id"].as_str().unwrap();
    let store = ddptop::store::Store::open(&d.path().join("runs.db")).unwrap();
    let run = store
        .load_runs(10)
        .unwrap()
        .into_iter()
        .find(|r| r.id == id)
        .unwrap();
    assert!(
        run.evidence
            .log_tail
            .iter()
            .any(|l| l.ends_with("DDP settings from the environment: bucket_cap_mb=0.05")),
        "{:#?}",
        run.evidence.log_tail
    );
}

#[test]
fn bad_attach_input_is_one_clear_line() {
    let _cpu = cpu_shared();
    let d = tempfile::tempdir().unwrap();
    for (args, want) in [
        (vec!["attach", "--", "no/such/train.py"], "no such script"),
        (
            vec!["attach", "--", env!("CARGO_MANIFEST_DIR")],
            "no such script",
        ),
        (
            vec!["attach", "--backend", "sim", "--", "train.py"],
            "real PyTorch",
        ),
    ] {
        let out = ddptop(d.path()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(
            lines[0].starts_with("ddptop: ") && lines[0].contains(want),
            "{err}"
        );
    }
    let out = ddptop(d.path()).arg("attach").output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap's usage error: the script is required"
    );
}

/// Issue 51: a rank that dies by a signal keeps its own last lines (the abort's message), in
/// the run's record (`run --json`, `show --json`), `show` and the failure reason; not only
/// torchrun's summary.
#[test]
fn a_rank_killed_by_a_signal_keeps_its_own_last_lines() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let script = fixture_script("rank0_aborts.py");
    let (ok, doc) = attach(d.path(), &py, &["--k", "2"], &[&script]);
    assert!(!ok);
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "failed", "{r:#}");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.contains("rank 0 (exit -6 (SIGABRT)) last wrote:")
            && reason.contains("rank 0 aborts on purpose"),
        "{reason}"
    );
    let tails = r["rank_tails"].as_array().unwrap();
    let r0 = tails
        .iter()
        .find(|t| t["rank"] == 0)
        .expect("rank 0's tail");
    assert_eq!(r0["exitcode"], -6, "{tails:#?}");
    let lines: Vec<&str> = r0["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        lines.iter().any(|l| l.starts_with("terminate called"))
            && lines.contains(&"rank 0: 6 steps done"),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("rank 1")),
        "rank 1's lines are not rank 0's: {lines:#?}"
    );
    // The record, read back by another process.
    let id = r["run_id"].as_str().unwrap();
    let out = ddptop(d.path()).args(["show", id]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("rank 0 exit -6 (SIGABRT)")
            && text.contains("[rank 0] terminate called after throwing"),
        "{text}"
    );
}

/// Issue 43: while an attached job stalls, a second process reading the store (`show --json`)
/// sees the status `stalled` and the watchdog's evidence, before the job ends; once it
/// resumes and completes, the stall stays in the evidence.
#[test]
fn a_stalled_job_is_seen_stalled_by_show_while_it_runs() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let mut child = ddptop(d.path())
        .env("DDPTOP_PYTHON", &py)
        .args(["attach", "--k", "2", "--hang-floor", "3"])
        .args(["--backend", "gloo", "--json", "--"])
        .args([&example("train_ddp_stalls.py"), "--stall-s", "12"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let mut seen: Option<(f64, Value)> = None;
    while t0.elapsed() < std::time::Duration::from_secs(120) {
        std::thread::sleep(std::time::Duration::from_millis(500));
        if child.try_wait().unwrap().is_some() {
            break;
        }
        let out = ddptop(d.path()).args(["runs", "--json"]).output().unwrap();
        let Ok(list) = serde_json::from_slice::<Value>(&out.stdout) else {
            continue;
        };
        let Some(id) = list["runs"][0]["run_id"].as_str().map(str::to_string) else {
            continue;
        };
        let out = ddptop(d.path())
            .args(["show", &id, "--json"])
            .output()
            .unwrap();
        let Ok(doc) = serde_json::from_slice::<Value>(&out.stdout) else {
            continue;
        };
        if doc["run"]["status"] == "stalled" {
            seen = Some((t0.elapsed().as_secs_f64(), doc));
            break;
        }
    }
    let (at, doc) = seen.expect("show --json never said `stalled` while the job ran");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the job ended before `stalled` was seen"
    );
    let evidence: Vec<&str> = doc["run"]["hang_report"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        evidence.iter().any(|l| l.contains("stuck at step 4")),
        "seen at {at:.1} s: {evidence:#?}"
    );
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    // `--json` streams the live verdict on stderr, one JSON object per line, as it happens.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let live: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "live")
        .collect();
    assert!(
        live.iter()
            .any(|v| v["level"] == "error" && v["text"].as_str().unwrap().contains("looks hung")),
        "{stderr}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    assert!(
        r["hang_report"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("progress resumed")),
        "{r:#}"
    );
}

/// Issue 51: every rank finishes, reports its result and says `bye: done`, then one aborts at
/// exit. The run completed (its figures are whole); the teardown failure is its caveat, with
/// the rank's own last words, never hidden.
#[test]
fn a_rank_that_aborts_after_its_bye_leaves_a_completed_run_with_the_failure_as_caveat() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let script = fixture_script("aborts_at_exit.py");
    let (ok, doc) = attach(d.path(), &py, &["--k", "2"], &[&script]);
    let r = &doc["runs"][0];
    assert!(ok, "{r:#}");
    assert_eq!(r["status"], "completed", "{r:#}");
    assert_eq!(r["steps"], serde_json::json!([8, 8]), "{r:#}");
    let caveats = serde_json::to_string(&r["caveats"]).unwrap();
    assert!(
        caveats.contains("failed at exit")
            && caveats.contains(
                "rank 1 (exit -6 (SIGABRT)): terminate called without an active exception"
            ),
        "{caveats}"
    );
    let tails = r["rank_tails"].as_array().unwrap();
    assert!(
        tails.iter().any(|t| t["rank"] == 1 && t["exitcode"] == -6),
        "{tails:#?}"
    );
}

/// Issue 45, "never silently blind": an attached run where ddptop expects its NCCL profiler
/// plugin to report and the plugin cannot still reports steps and communication, and says which
/// instrument timed them. Real torchrun and PyTorch DDP over gloo on the CPU: gloo makes no NCCL
/// communicator, so NCCL never loads the plugin — the plugin-cannot-report case, for real.
///
/// ddptop itself never sets the plugin on a gloo launch (and refuses `--env NCCL_…` there), so
/// the test puts `DDPTOP_NCCL_PLUGIN=1` and `NCCL_PROFILER_PLUGIN=<the built plugin>` in ddptop's
/// own environment, which the ranks inherit: each rank's bootstrap then expects the plugin
/// exactly as on an NCCL launch, reads its state through ctypes, and finds it never loaded.
#[test]
fn an_attached_run_whose_plugin_never_reports_keeps_the_hook_and_says_so() {
    let _cpu = cpu_shared();
    let Some(py) = python_importing("torch") else {
        return;
    };
    let plugin = std::path::Path::new(env!("CARGO_BIN_EXE_ddptop"))
        .with_file_name("libnccl_profiler_ddptop.so");
    assert!(
        plugin.is_file(),
        "the plugin is built beside ddptop (cargo build -p ddptop-nccl-profiler): {}",
        plugin.display()
    );
    let d = tempfile::tempdir().unwrap();
    let script = format!("{}/examples/train_ddp.py", env!("CARGO_MANIFEST_DIR"));
    let out = ddptop(d.path())
        .env("DDPTOP_PYTHON", &py)
        .env("DDPTOP_NCCL_PLUGIN", "1")
        .env("NCCL_PROFILER_PLUGIN", &plugin)
        .args(["attach", "--k", "2", "--backend", "gloo", "--json", "--"])
        .args([
            script.as_str(),
            "--samples",
            "640",
            "--epochs",
            "1",
            "--hidden",
            "128",
        ])
        .output()
        .unwrap();
    let doc = json_of(&out);
    assert_no_survivors(&doc);
    assert!(out.status.success(), "{doc:#}");
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    // Steps on every rank and the hook's bucket timeline: not blind.
    let steps: Vec<u64> = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(steps.len(), 2);
    assert!(steps.iter().all(|&s| s >= 8), "{steps:?}");
    assert_eq!(r["instrument"], "full");
    let tl = &r["timeline"][0];
    assert!(
        tl["buckets"].as_array().is_some_and(|b| !b.is_empty()),
        "{:#}",
        r["timeline"]
    );
    assert!(tl["exposed_ms"].as_f64().is_some());
    // Which source, and why, on every rank.
    let c = &r["collectives"];
    assert_eq!(c["comm_timing"], "comm_hook");
    assert_eq!(c["timeline_source"], "comm_hook");
    let why = format!(
        "plugin not reporting: the process group is gloo, so NCCL never loaded it ({})",
        plugin.display()
    );
    assert_eq!(
        c["comm_source"],
        Value::String(format!("communication: Python comm hook ({why})"))
    );
    for rank in ["0", "1"] {
        assert_eq!(c["comm_sources"][rank]["timing"], "comm_hook", "{c:#}");
        assert_eq!(c["comm_sources"][rank]["why"], why.as_str(), "{c:#}");
    }
    // The stored run says it too (`show` reads the database).
    let id = r["run_id"].as_str().unwrap();
    let show = ddptop(d.path()).args(["show", id]).output().unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("communication")
                && l.ends_with(&format!("Python comm hook ({why})"))),
        "{text}"
    );
}
