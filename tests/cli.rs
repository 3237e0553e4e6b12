//! The command line: help, version, bad flags, the --json schema, `runs`, and a SIGKILLed ddptop
//! leaving a database that opens with its finished runs intact.

mod common;
use common::*;

#[test]
fn help_and_version() {
    let d = tempfile::tempdir().unwrap();
    let out = ddptop(d.path()).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("run") && help.contains("runs"));
    assert!(
        !help.lines().any(|l| l.trim_start().starts_with("worker")),
        "the worker subcommand is hidden"
    );
    let out = ddptop(d.path()).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ddptop "));
    let out = ddptop(d.path()).args(["run", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("--inject"));
    // The dashboard leaves the mouse to the terminal with --no-mouse; scripts take it too.
    assert!(help.contains("--no-mouse"), "{help}");
    let out = ddptop(d.path())
        .args(["--backend", "sim", "--no-mouse", "--script", "z,Esc,q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn bad_flags_exit_2_with_a_clear_message() {
    let d = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (vec!["--bogus"], "--bogus"),
        (vec!["run", "sideways"], "sideways"),
        (vec!["run", "weak", "--k", "0"], "0"),
        (vec!["run", "weak", "--env", "NOEQUALS"], "KEY=VAL"),
        (
            vec!["run", "weak", "--inject", "explode:3"],
            "unknown fault",
        ),
        (vec!["run", "weak", "--backend", "mpi"], "mpi"),
    ] {
        let out = ddptop(d.path()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn unknown_profile_is_a_one_line_error() {
    let d = tempfile::tempdir().unwrap();
    let out = ddptop(d.path())
        .args(["run", "weak", "--backend", "sim", "--profile", "tpu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "bad input: exit 2");
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.contains("'tpu'") && first.contains("unknown profile") && first.contains("book-pcie"),
        "{err}"
    );
}

#[test]
fn json_schema_and_runs_listing() {
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = sim_json(d.path(), &["weak", "--k", "1,2", "--samples", "20000"]);
    assert!(out.status.success());
    for key in [
        "experiment",
        "backend",
        "simulated",
        "profile",
        "toggles",
        "sweep",
        "runs",
    ] {
        assert!(doc.get(key).is_some(), "missing {key}");
    }
    // NVLink multicast off is a recorded, visible default of every launch.
    assert_eq!(doc["toggles"], serde_json::json!(["NCCL_NVLS_ENABLE=0"]));
    for r in doc["runs"].as_array().unwrap() {
        for key in [
            "k",
            "run_id",
            "status",
            "samples_per_s",
            "per_rank_samples_per_s",
            "spread",
            "speedup",
            "efficiency",
            "baseline_run_id",
            "worker_pids",
        ] {
            assert!(r.get(key).is_some(), "run missing {key}");
        }
        // Every speedup names the k=1 run it divides by: here the sweep's own k=1 run.
        assert_eq!(r["baseline_run_id"], doc["runs"][0]["run_id"]);
        assert!(r["spread"]["min"].as_f64().unwrap() <= r["spread"]["max"].as_f64().unwrap());
    }
    let out = ddptop(d.path()).args(["runs", "--json"]).output().unwrap();
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs["schema_version"], 1);
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2);
    assert!(
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "completed" && r["simulated"] == true)
    );
}

#[test]
fn sigkill_mid_run_leaves_an_intact_database() {
    let d = tempfile::tempdir().unwrap();
    // One finished run first.
    let (_, first) = sim_json(d.path(), &["weak", "--k", "1", "--samples", "10000"]);
    let done_id = first["runs"][0]["run_id"].as_str().unwrap().to_string();
    // Then a long run, SIGKILLed while going.
    let mut child = spawn_run(
        d.path(),
        &["weak", "--k", "2", "--backend", "sim", "--sim-speed", "1"],
    );
    std::thread::sleep(std::time::Duration::from_secs(3));
    child.kill().unwrap();
    child.wait().unwrap();
    // The orphaned sim ranks exit by their dead-man switch once the socket closes.
    let out = ddptop(d.path()).args(["runs", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = runs["runs"].as_array().unwrap();
    let done = runs
        .iter()
        .find(|r| r["run_id"] == done_id.as_str())
        .unwrap();
    assert_eq!(done["status"], "completed");
    assert!(done["samples_per_s"].as_f64().unwrap() > 0.0);
    let killed = runs
        .iter()
        .find(|r| r["run_id"] != done_id.as_str())
        .unwrap();
    assert_eq!(
        killed["status"], "failed",
        "a run whose ddptop died is not left 'running'"
    );
    assert!(killed["samples_per_s"].is_null());
}

#[test]
fn presets_from_the_config_and_a_broken_config_is_refused() {
    let d = tempfile::tempdir().unwrap();
    // First run writes the commented default config, with its presets.
    let (out, doc) = run_json(
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
            "--preset",
            "shm-memcpy",
        ],
    );
    assert!(out.status.success());
    assert!(
        d.path().join("config.toml").exists(),
        "default config written on first run"
    );
    assert_eq!(
        doc["toggles"],
        serde_json::json!(["NCCL_NVLS_ENABLE=0", "NCCL_SHM_USE_CUDA_MEMCPY=1"])
    );
    // `--nvls on` lifts ddptop's NVLS default: the launch unsets the variable, and says so.
    let (out, doc) = sim_json(
        d.path(),
        &["weak", "--k", "1", "--samples", "2000", "--nvls", "on"],
    );
    assert!(out.status.success());
    assert_eq!(doc["toggles"], serde_json::json!(["-NCCL_NVLS_ENABLE"]));
    let out = ddptop(d.path())
        .args(["run", "weak", "--backend", "sim", "--preset", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "bad input: exit 2");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown preset `nope`"));
    // A broken config: one line naming file and line, and nothing runs (as in the dashboard).
    std::fs::write(
        d.path().join("config.toml"),
        "theme = \"dark\"\n[watchdog]\nhang_floor_s = \"ten\"\n",
    )
    .unwrap();
    let out = ddptop(d.path())
        .args(["run", "weak", "--k", "1", "--backend", "sim", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing ran");
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("config.toml"))
        .expect("a config error line");
    assert!(line.contains(":3"), "names the line: {line}");
}
