//! Helpers shared by the integration tests (`mod common;`): running the binary (here), hand-built
//! dashboard states and the one draw helper (`common::ui`), hand-built reports (`common::report`).
#![allow(dead_code)]

pub mod report;
pub mod ui;

use serde_json::Value;
use std::process::{Command, Output};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ddptop")
}

/// `ddptop` with an isolated data dir and config.
pub fn ddptop(data: &std::path::Path) -> Command {
    let mut c = Command::new(bin());
    c.env("DDPTOP_DATA_DIR", data)
        .env("DDPTOP_CONFIG", data.join("config.toml"))
        .env("XDG_RUNTIME_DIR", data)
        .env_remove("DDPTOP_PYTHON");
    c
}

pub fn run_json(data: &std::path::Path, args: &[&str]) -> (Output, Value) {
    let out = ddptop(data)
        .args(["run"])
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let doc = json_of(&out);
    (out, doc)
}

/// The JSON document ddptop printed, or a panic quoting what it printed instead (both streams).
pub fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `ddptop run ARGS --backend gloo --model tiny --json` with `py` as the workers' Python: the run
/// document, after checking that ddptop exited 0 and left no process behind.
pub fn gloo(data: &std::path::Path, py: &str, args: &[&str]) -> Value {
    let out = ddptop(data)
        .env("DDPTOP_PYTHON", py)
        .args(["run"])
        .args(args)
        .args(["--backend", "gloo", "--model", "tiny", "--json"])
        .output()
        .unwrap();
    let doc = json_of(&out);
    assert!(out.status.success(), "{doc:#}");
    assert_no_survivors(&doc);
    doc
}

/// `ddptop run ARGS --json` in the background, its JSON on a pipe (stderr dropped).
pub fn spawn_run(data: &std::path::Path, args: &[&str]) -> std::process::Child {
    ddptop(data)
        .arg("run")
        .args(args)
        .arg("--json")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// `ddptop run … --backend sim --sim-speed 20 --json`: the simulated worker, 20× faster than
/// the machine it models (its figures are unchanged).
pub fn sim_json(data: &std::path::Path, args: &[&str]) -> (Output, Value) {
    let mut all = args.to_vec();
    all.extend(["--backend", "sim", "--sim-speed", "20"]);
    run_json(data, &all)
}

/// Every worker pid of every run in a report, and their process groups, are gone.
pub fn assert_no_survivors(doc: &Value) {
    let pids: Vec<u32> = doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["worker_pids"].as_array().cloned().unwrap_or_default())
        .map(|p| p.as_u64().unwrap() as u32)
        .collect();
    let alive = ddptop::supervisor::procs::survivors(&pids, &pids);
    assert!(alive.is_empty(), "processes left behind: {alive:?}");
}

/// The python in DDPTOP_PYTHON when it has `{modules}` (comma-separated) installed. On CI (CI=1)
/// a missing one is a failure; elsewhere the test says it is skipped and gets None.
pub fn python_importing(modules: &str) -> Option<String> {
    let py = python_with(modules);
    if py.is_some() {
        return py;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must provide DDPTOP_PYTHON with {modules} (scripts/test does)"
    );
    eprintln!("SKIPPED: set DDPTOP_PYTHON to a python with {modules} to run this test");
    None
}

/// The python in DDPTOP_PYTHON when it has `{modules}` (comma-separated) installed, else None.
/// Found, not imported: importing torch costs 2 s of CPU, and every test that launches torch
/// asks.
pub fn python_with(modules: &str) -> Option<String> {
    let py = std::env::var("DDPTOP_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())?;
    let code = format!(
        "import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m.strip()) for m in {modules:?}.split(',')) else 1)"
    );
    Command::new(&py)
        .args(["-c", &code])
        .output()
        .is_ok_and(|o| o.status.success())
        .then_some(py)
}

/// Tests that time ranks against each other (stragglers) take this alone; the others of their
/// binary share it and still run in parallel. On CI's two cores, the ranks of tests running
/// beside a straggler test made a healthy rank 2x slower for a window: a real straggler to the
/// detector, and a flaky test.
static CPU: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Run beside other tests of this binary (not beside one holding `cpu_alone`).
#[allow(dead_code)]
pub fn cpu_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    CPU.read().unwrap_or_else(|e| e.into_inner())
}

/// Run with no other test of this binary at the same time.
#[allow(dead_code)]
pub fn cpu_alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    CPU.write().unwrap_or_else(|e| e.into_inner())
}

/// The last lines of every run's `output.log` in a run document, for a failure's message: the
/// log lives in the test's temporary directory, which is gone once the test has failed.
#[allow(dead_code)]
pub fn output_tails(doc: &Value) -> String {
    let mut out = String::new();
    for r in doc["runs"].as_array().into_iter().flatten() {
        let Some(path) = r["output_log"].as_str() else {
            continue;
        };
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({e})"));
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(40)..];
        out.push_str(&format!("--- {path} (last {} lines)\n", tail.len()));
        for l in tail {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// A test script of `tests/fixtures/scripts/` (scripts that really have a bug), by file name.
#[allow(dead_code)]
pub fn fixture_script(name: &str) -> String {
    format!(
        "{}/tests/fixtures/scripts/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}
