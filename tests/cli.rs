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
    // The table: runs of other widths (an allreduce with settings, a failed run) stay in their
    // columns, every row's settings and statuses starting where the header's do.
    let (out, _) = sim_json(
        d.path(),
        &["allreduce", "--k", "2", "--env", "NCCL_P2P_DISABLE=1"],
    );
    assert!(out.status.success());
    let (out, crashed) = sim_json(
        d.path(),
        &[
            "weak",
            "--k",
            "2",
            "--samples",
            "2000",
            "--inject",
            "crash:3",
        ],
    );
    assert!(!out.status.success());
    // A fault run is marked as one (issue 46): in `show` and in `runs`' settings (below).
    let id = crashed["runs"][0]["run_id"].as_str().unwrap();
    assert_eq!(crashed["runs"][0]["fault"], "crash:3");
    let shown = ddptop(d.path()).args(["show", id]).output().unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("⚠ crash:3 injected: off the clean curves"),
        "{shown}"
    );
    let out = ddptop(d.path()).arg("runs").output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = table.lines().filter(|l| l.starts_with('r')).collect();
    assert!(lines.len() >= 5, "{table}");
    let at = |line: &str, needle: &str| {
        line.find(needle)
            .map(|i| line[..i].chars().count())
            .unwrap_or_else(|| panic!("no {needle} in {line}\n{table}"))
    };
    let status = at(lines[0], "status");
    let settings = at(lines[0], "settings");
    for l in &lines[1..] {
        let st = ["completed", "failed"]
            .iter()
            .find(|s| l.contains(*s))
            .unwrap();
        assert_eq!(at(l, st), status, "{table}");
        // The settings cell (the last column) starts right at the header's offset.
        let c: Vec<char> = l.chars().collect();
        assert!(c[settings - 1] == ' ' && c[settings] != ' ', "{table}");
    }
    assert!(table.contains("P2P_DISABLE=1"), "{table}");
    assert!(table.contains("defaults (fault: crash:3)"), "{table}");
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

#[test]
fn preset_and_profile_names_are_checked_before_torch_is_probed() {
    let d = tempfile::tempdir().unwrap();
    // A "python" that leaves a mark when run: probing torch (seconds with a real torch) must
    // not come before a typo is refused.
    let mark = d.path().join("python-ran");
    let py = d.path().join("python");
    std::fs::write(
        &py,
        format!("#!/bin/sh\ntouch {}\nexit 1\n", mark.display()),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let script = d.path().join("x.py");
    std::fs::write(&script, "").unwrap();
    for cmd in [
        vec!["run", "weak", "--preset", "nosuch"],
        vec![
            "attach",
            "--preset",
            "nosuch",
            "--",
            script.to_str().unwrap(),
        ],
    ] {
        let out = ddptop(d.path())
            .env("DDPTOP_PYTHON", &py)
            .args(&cmd)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("unknown preset `nosuch`"), "{cmd:?}: {err}");
        assert!(
            !mark.exists(),
            "{cmd:?}: python was run before the name was checked"
        );
    }
}

#[test]
fn nccl_settings_on_a_gloo_run_are_refused_in_one_line() {
    let Some(py) = python_importing("torch") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    for extra in [
        vec!["--env", "NCCL_P2P_DISABLE=1"],
        vec!["--preset", "no-p2p"],
    ] {
        let out = ddptop(d.path())
            .env("DDPTOP_PYTHON", &py)
            .args(["run", "allreduce", "--k", "2", "--backend", "gloo"])
            .args(&extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        // The backend note, then the refusal: one line.
        let last = err.lines().last().unwrap_or_default();
        assert_eq!(err.lines().count(), 2, "{err}");
        assert!(
            last.contains("NCCL_P2P_DISABLE=1 on a gloo run"),
            "{extra:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "nothing ran");
    }
}

#[test]
fn too_few_timed_steps_are_said_before_the_launch_and_kept_with_the_run() {
    let d = tempfile::tempdir().unwrap();
    // 2048 samples over 2 ranks in batches of 256: 4 steps in the one timed epoch.
    let (out, doc) = sim_json(d.path(), &["weak", "--k", "2", "--samples", "2048"]);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let warning = err
        .lines()
        .find(|l| l.starts_with("ddptop: warning: weak k=2: only 4 timed steps"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(warning.contains("too few for a stable figure"), "{warning}");
    // Said once: `--json`'s live stream of warnings does not repeat what was said at start.
    assert_eq!(err.matches("only 4 timed steps").count(), 1, "{err}");
    let caveats = &doc["runs"][0]["caveats"];
    assert!(
        caveats[0]
            .as_str()
            .unwrap()
            .starts_with("only 4 timed steps"),
        "{caveats}"
    );
    // And the stored run says it in `show`.
    let id = doc["runs"][0]["run_id"].as_str().unwrap();
    let out = ddptop(d.path()).args(["show", id]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("caveat      ⚠ only 4 timed steps"), "{text}");
}

#[test]
fn an_unbuilt_handrolled_worker_is_bad_setup_with_a_build_line_for_this_python() {
    let Some(py) = python_importing("torch") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let out = ddptop(d.path())
        .env("DDPTOP_PYTHON", &py)
        .env("DDPTOP_HANDROLLED", d.path().join("not-built"))
        .args(["run", "handrolled", "--k", "1", "--backend", "gloo"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "bad setup, not a failed run");
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    // The torch ddptop found, wherever it lives (not a .venv assumed inside the repository).
    let bin = std::path::Path::new(&py)
        .parent()
        .unwrap()
        .display()
        .to_string();
    assert!(
        last.contains(&format!("PATH={bin}:$PATH"))
            && last.contains("cargo build --release -p ddptop-handrolled"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
}

/// A broken `[nodes]` table alone: the dashboard starts and says it in one Log line, a run
/// without `--nodes` goes on with one warning line, a `--nodes` run is refused with the line
/// (exit 2). Other tables' errors still refuse everything.
#[test]
fn a_broken_nodes_table_is_one_line_and_the_rest_works() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("config.toml"),
        "theme = \"light\"\n[nodes]\nhosts = [\"here\", \"there\"]\nlisten = \"nowhere\"\n",
    )
    .unwrap();
    let out = ddptop(d.path())
        .env("DDPTOP_SCREEN", "200x60")
        .args(["--backend", "sim", "--no-mouse", "--script", "N"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        screen.contains("theme light"),
        "the rest applies:\n{screen}"
    );
    assert!(screen.contains("nodes: config error"), "{screen}");
    assert!(
        screen.contains("config.toml:4:") && screen.contains("not IP:PORT"),
        "{screen}"
    );

    let (out, doc) = sim_json(d.path(), &["weak", "--k", "1", "--epochs", "1"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(doc["runs"][0]["node_gpus"], serde_json::json!([]));
    let err = String::from_utf8_lossy(&out.stderr);
    let warned: Vec<&str> = err.lines().filter(|l| l.contains("[nodes]")).collect();
    assert_eq!(warned.len(), 1, "{err}");
    assert!(warned[0].contains("config.toml:4:"), "{err}");

    let out = ddptop(d.path())
        .args([
            "run",
            "weak",
            "--k",
            "2",
            "--backend",
            "sim",
            "--nodes",
            "a,b",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("config error")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].contains("config.toml:4:10") && said[0].contains("not IP:PORT"),
        "{err}"
    );
}

#[test]
fn the_configs_launch_table_sizes_runs_and_the_command_line_wins() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("config.toml"),
        "[launch]\nsamples = 3000\nepochs = 3\n",
    )
    .unwrap();
    let (out, doc) = sim_json(d.path(), &["weak", "--k", "1"]);
    assert!(out.status.success(), "{doc:#}");
    let r = &doc["runs"][0];
    assert_eq!(
        (&r["samples"], &r["epochs"]),
        (&3000.into(), &3.into()),
        "{r:#}"
    );
    let (out, doc) = sim_json(
        d.path(),
        &["weak", "--k", "1", "--samples", "2000", "--epochs", "2"],
    );
    assert!(out.status.success(), "{doc:#}");
    let r = &doc["runs"][0];
    assert_eq!(
        (&r["samples"], &r["epochs"]),
        (&2000.into(), &2.into()),
        "{r:#}"
    );
    // A bad value is the config's one line, naming the file and line.
    std::fs::write(d.path().join("config.toml"), "[launch]\nsamples = 0\n").unwrap();
    let out = ddptop(d.path())
        .args(["run", "weak", "--k", "1", "--backend", "sim"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("config.toml:2:") && err.contains("[launch] samples = 0"),
        "{err}"
    );
}

/// Issue 46: a fault that names a rank the run does not have is refused before anything runs,
/// in one line that says which ranks there are.
#[test]
fn a_fault_naming_a_rank_beyond_k_is_refused_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    let out = ddptop(d.path())
        .args(["run", "weak", "--k", "1,2", "--backend", "sim"])
        .args(["--inject", "slow:5:1.5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    // The backend note, then the refusal: one line.
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(
        err.lines()
            .last()
            .unwrap()
            .contains("names rank 5, but a run at k=1 has ranks 0..=0"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
}
