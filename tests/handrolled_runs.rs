//! `ddptop run handrolled` on the CPU through the real binaries: ddptop launches the tch worker
//! (workers/handrolled) with torch/lib of its python on LD_LIBRARY_PATH, one process drives k
//! replicas over k connections, and the deficits table sets it beside DDP. Needs the
//! ddptop-handrolled binary beside ddptop (scripts/test builds it) and DDPTOP_PYTHON with torch;
//! on CI (CI=1) either missing is a failure, elsewhere the test says so and returns.

mod common;
use common::*;
use serde_json::Value;
use std::path::PathBuf;

/// (python with torch, the worker binary), or None when this machine cannot run the test.
fn prerequisites() -> Option<(String, PathBuf)> {
    let py = python_with("torch");
    let worker = std::path::Path::new(bin())
        .with_file_name("ddptop-handrolled")
        .canonicalize()
        .ok();
    match (py, worker) {
        (Some(py), Some(w)) => Some((py, w)),
        (py, w) => {
            let missing = match (py.is_none(), w.is_none()) {
                (true, true) => "DDPTOP_PYTHON with torch and the ddptop-handrolled binary",
                (true, false) => "DDPTOP_PYTHON with torch",
                _ => "the ddptop-handrolled binary (scripts/test builds it)",
            };
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must provide {missing}"
            );
            eprintln!("SKIPPED: this test needs {missing}");
            None
        }
    }
}

fn run(py: &str, args: &[&str]) -> (std::process::Output, Value) {
    let d = tempfile::tempdir().unwrap();
    let out = ddptop(d.path())
        .env("DDPTOP_PYTHON", py)
        .args(["run", "handrolled", "--backend", "gloo", "--model", "tiny"])
        .args([
            "--batch",
            "8",
            "--samples",
            "128",
            "--epochs",
            "2",
            "--json",
        ])
        .args(args)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, doc)
}

#[test]
fn k1_k2_on_cpu_complete_with_both_switches() {
    let Some((py, _)) = prerequisites() else {
        return;
    };
    for (dispatch, reduce) in [("single", "star"), ("threads", "ring")] {
        let (out, doc) = run(
            &py,
            &["--k", "1,2", "--dispatch", dispatch, "--reduce", reduce],
        );
        assert!(out.status.success(), "{doc:#}");
        assert_no_survivors(&doc);
        assert_eq!(doc["experiment"], "handrolled");
        let runs = doc["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        let label = format!("{dispatch}+{reduce}");
        for (r, k) in runs.iter().zip([1u64, 2]) {
            assert_eq!(r["status"], "completed", "{r:#}");
            assert_eq!(r["k"], k);
            assert_eq!(r["hand"], label.as_str());
            assert_eq!(r["bad_lines"], 0, "{r:#}");
            // One process, one connection per replica.
            let pids = r["worker_pids"].as_array().unwrap();
            assert_eq!(pids.len() as u64, k, "{r:#}");
            assert!(pids.iter().all(|p| *p == pids[0]), "{r:#}");
            let per_rank = r["per_rank_samples_per_s"].as_array().unwrap();
            assert_eq!(per_rank.len() as u64, k);
            assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
            // The one bucket is the whole gradient, and nothing overlaps it.
            let tl = &r["timeline"][0];
            assert_eq!(tl["buckets"].as_array().unwrap().len(), 1, "{r:#}");
            assert_eq!(tl["overlap_pct"].as_f64().unwrap_or(0.0), 0.0, "{r:#}");
        }
        let def = &doc["deficits"];
        assert_eq!(def["columns"][3], "ddp");
        let rows = def["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        for (row, run) in rows.iter().zip(runs) {
            assert_eq!(row["cells"][&label]["run_id"], run["run_id"]);
            assert!(
                row["cells"]["ddp"].is_null(),
                "no DDP run in this invocation"
            );
        }
    }
}

#[test]
fn an_injected_raise_fails_the_run_with_the_last_replicas_error() {
    let Some((py, _)) = prerequisites() else {
        return;
    };
    let (out, doc) = run(&py, &["--k", "2", "--inject", "raise:3"]);
    assert!(!out.status.success());
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "failed", "{r:#}");
    let why = r["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("RuntimeError: injected exception at step 3"),
        "{why}"
    );
    assert!(
        r["samples_per_s"].is_null(),
        "no throughput for a failed run"
    );
    assert_no_survivors(&doc);
}

#[test]
fn a_missing_worker_binary_is_one_line_naming_the_build_command() {
    let Some((py, _)) = prerequisites() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let out = ddptop(d.path())
        .env("DDPTOP_PYTHON", &py)
        .env("DDPTOP_HANDROLLED", d.path().join("not-built"))
        .args(["run", "handrolled", "--k", "1", "--backend", "gloo"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("hand-rolled worker is not built"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("cargo build --release -p ddptop-handrolled"),
        "{err}"
    );
}
