//! The fault matrix of docs/reliability.md on real PyTorch DDP over gloo (CPU): signals to ddptop
//! during a run, a worker SIGKILLed, a worker raising, a worker stuck while heartbeating, torchrun
//! SIGKILLed. After each cell: no process of the run alive (by pid and process group), the run's
//! status right in the store, and no throughput shown for a run that did not complete.
//! Needs DDPTOP_PYTHON with torch (scripts/test provides it; on CI its absence is a failure).

mod common;
use common::*;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

fn python() -> Option<String> {
    python_importing("torch")
}

struct Cell {
    dir: tempfile::TempDir,
    child: Child,
}

/// A gloo run long enough to be interrupted (tiny model, many small epochs).
fn start(py: &str, extra: &[&str]) -> Cell {
    let dir = tempfile::tempdir().unwrap();
    let child = ddptop(dir.path())
        .env("DDPTOP_PYTHON", py)
        .args([
            "run",
            "weak",
            "--k",
            "2",
            "--backend",
            "gloo",
            "--model",
            "tiny",
            "--batch",
            "16",
            "--samples",
            "1024",
            "--epochs",
            "40",
            "--json",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Cell { dir, child }
}

/// (run id, worker pids, status) of the only run in the store.
fn run_row(dir: &std::path::Path) -> Option<(String, Vec<u32>, String)> {
    let conn = rusqlite::Connection::open_with_flags(
        dir.join("runs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .ok()?;
    conn.query_row(
        "SELECT id, pids_json, status FROM runs ORDER BY started_unix DESC LIMIT 1",
        [],
        |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        },
    )
    .ok()
    .map(|(id, pids, st)| (id, serde_json::from_str(&pids).unwrap_or_default(), st))
}

/// Wait until both ranks said hello and have made some steps.
fn wait_running(cell: &Cell) -> (String, Vec<u32>) {
    let t0 = Instant::now();
    loop {
        if let Some((id, pids, st)) = run_row(cell.dir.path())
            && pids.len() == 2
            && st == "running"
        {
            std::thread::sleep(Duration::from_secs(2));
            return (id, pids);
        }
        assert!(t0.elapsed() < Duration::from_secs(90), "run never started");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The torchrun launcher: ddptop's child.
fn launcher_of(ddptop_pid: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (ppid == ddptop_pid).then_some(pid)
    })
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<i32> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        assert!(t0.elapsed() < limit, "ddptop did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn assert_gone(pids: &[u32], within: Duration) {
    let t0 = Instant::now();
    loop {
        let alive = ddptop::supervisor::procs::survivors(pids, pids);
        if alive.is_empty() {
            return;
        }
        assert!(t0.elapsed() < within, "processes left behind: {alive:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The store opens, the run has `status`, and shows no throughput unless it completed.
fn assert_stored(dir: &std::path::Path, id: &str, status: &str) -> serde_json::Value {
    let out = ddptop(dir).args(["runs", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "store did not open: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == id)
        .cloned()
        .expect("run in store");
    assert_eq!(run["status"], status, "{run:#}");
    if status != "completed" {
        assert!(
            run["samples_per_s"].is_null(),
            "stale numbers for a {status} run: {run:#}"
        );
    }
    run
}

fn signal_cell(py: &str, sig: i32, expect_code: i32) {
    let mut cell = start(py, &[]);
    let (id, pids) = wait_running(&cell);
    let launcher = launcher_of(cell.child.id()).expect("launcher");
    unsafe { libc::kill(cell.child.id() as i32, sig) };
    assert_eq!(
        wait_exit(&mut cell.child, Duration::from_secs(40)),
        Some(expect_code)
    );
    let mut all = pids.clone();
    all.push(launcher);
    assert_gone(&all, Duration::from_secs(5));
    assert_stored(cell.dir.path(), &id, "stopped");
}

#[test]
fn fault_matrix_gloo() {
    let Some(py) = python() else { return };

    // ^C, SIGTERM, SIGHUP to ddptop: the run is stopped, its tree killed, exit 130.
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_cell(&py, sig, 130);
    }

    // SIGKILL to ddptop: nothing can clean up from inside, so the workers' dead-man switch ends
    // them (their socket closes), torchrun follows, and the next ddptop marks the run failed.
    {
        let mut cell = start(&py, &[]);
        let (id, pids) = wait_running(&cell);
        let launcher = launcher_of(cell.child.id()).expect("launcher");
        cell.child.kill().unwrap();
        cell.child.wait().unwrap();
        let mut all = pids.clone();
        all.push(launcher);
        assert_gone(&all, Duration::from_secs(20));
        let run = assert_stored(cell.dir.path(), &id, "failed");
        assert!(
            run["reason"]
                .as_str()
                .unwrap()
                .contains("ended before this run finished"),
            "{run:#}"
        );
    }

    // A worker SIGKILLed: torchrun stops the other rank and exits non-zero; the run fails.
    {
        let mut cell = start(&py, &[]);
        let (id, pids) = wait_running(&cell);
        let launcher = launcher_of(cell.child.id()).expect("launcher");
        unsafe { libc::kill(pids[1] as i32, libc::SIGKILL) };
        assert_eq!(wait_exit(&mut cell.child, Duration::from_secs(60)), Some(1));
        let mut all = pids.clone();
        all.push(launcher);
        assert_gone(&all, Duration::from_secs(5));
        assert_stored(cell.dir.path(), &id, "failed");
    }

    // torchrun SIGKILLed: its workers (in sessions of their own) are orphaned; ddptop stops them
    // through the pids they reported in hello.
    {
        let mut cell = start(&py, &[]);
        let (id, pids) = wait_running(&cell);
        let launcher = launcher_of(cell.child.id()).expect("launcher");
        unsafe { libc::kill(launcher as i32, libc::SIGKILL) };
        assert_eq!(wait_exit(&mut cell.child, Duration::from_secs(60)), Some(1));
        assert_gone(&pids, Duration::from_secs(5));
        let run = assert_stored(cell.dir.path(), &id, "failed");
        assert!(
            run["reason"].as_str().unwrap().contains("signal 9"),
            "{run:#}"
        );
    }

    // A worker raising an exception: failed, with the launcher's exit code.
    {
        let mut cell = start(&py, &["--inject", "raise:5"]);
        let out = cell.child.stdout.take().unwrap();
        assert_eq!(wait_exit(&mut cell.child, Duration::from_secs(90)), Some(1));
        let doc: serde_json::Value = serde_json::from_reader(out).unwrap();
        let r = &doc["runs"][0];
        assert_eq!(r["status"], "failed");
        let why = r["reason"].as_str().unwrap();
        assert!(
            why.contains("rank 1: RuntimeError: injected exception at step 5"),
            "{why}"
        );
        assert!(r["samples_per_s"].is_null());
        assert_no_survivors(&doc);
        assert_stored(cell.dir.path(), r["run_id"].as_str().unwrap(), "failed");
    }

    // A worker stuck while heartbeating (the others block in the all-reduce): hung, then stopped.
    {
        let mut cell = start(&py, &["--inject", "hang:5", "--hang-floor", "4"]);
        let out = cell.child.stdout.take().unwrap();
        assert_eq!(wait_exit(&mut cell.child, Duration::from_secs(90)), Some(1));
        let doc: serde_json::Value = serde_json::from_reader(out).unwrap();
        let r = &doc["runs"][0];
        assert_eq!(r["status"], "hung", "{r:#}");
        assert!(r["reason"].as_str().unwrap().contains("stuck"), "{r:#}");
        assert!(r["samples_per_s"].is_null());
        assert_no_survivors(&doc);
        assert_stored(cell.dir.path(), r["run_id"].as_str().unwrap(), "hung");
    }
}
