//! Issue 31 through the binary: worker-supplied text cannot drive the terminal (`ddptop show`)
//! or inject HTML into a Markdown report, and a `workers/` in the current directory is not
//! run unless named. The unit tests of each mechanism live beside it (docs/reliability.md,
//! "Security").

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;

/// A stored run whose failure reason a hostile worker chose (it reaches the store through the
/// launcher's output and the run's `reason`).
#[test]
fn worker_text_is_inert_in_show_and_markdown() {
    let d = tempfile::tempdir().unwrap();
    let (_, doc) = sim_json(d.path(), &["weak", "--k", "1", "--samples", "2000"]);
    let id = doc["runs"][0]["run_id"].as_str().unwrap().to_string();
    let evil = "boom\u{1b}]0;pwned\u{7}\u{1b}[2J<script>alert(1)</script>";
    let conn = rusqlite::Connection::open(d.path().join("runs.db")).unwrap();
    conn.execute("UPDATE runs SET reason=?1", [evil]).unwrap();
    drop(conn);

    let out = ddptop(d.path()).args(["show", &id]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("boom]0;pwned[2J"), "{text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "escape sequences reached the terminal: {text:?}"
    );

    let out = ddptop(d.path())
        .args(["report", &id, "--format", "md"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(md.contains("&lt;script&gt;"), "{md}");
    assert!(!md.contains("<script>") && !md.contains('\u{1b}'), "{md}");
}

/// `./workers/ddptop_worker/__init__.py` in the directory ddptop is started from is not what
/// the ranks import unless `--workers-dir` names it. The "python" here is a script that answers
/// the torch probe and records the PYTHONPATH its launch was given.
#[test]
fn workers_in_the_current_directory_run_only_when_named() {
    let d = tempfile::tempdir().unwrap();
    let cwd = d.path().join("cwd");
    let planted = cwd.join("workers").join("ddptop_worker");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(planted.join("__init__.py"), "raise SystemExit('planted')\n").unwrap();
    let mark = d.path().join("pythonpath.txt");
    let py = d.path().join("bin").join("python3");
    std::fs::create_dir_all(py.parent().unwrap()).unwrap();
    std::fs::write(
        &py,
        format!(
            "#!/bin/sh\nif [ \"$1\" = -c ]; then echo 2.11.0; echo 0; exit 0; fi\n\
             echo \"$PYTHONPATH\" >> '{}'\nexit 3\n",
            mark.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = d.path().join("data");
    let launch = |extra: &[&str]| {
        let _ = std::fs::remove_file(&mark);
        ddptop(&data)
            .current_dir(&cwd)
            .env("DDPTOP_PYTHON", &py)
            .env_remove("DDPTOP_WORKERS_DIR")
            .args(["run", "weak", "--k", "1", "--backend", "gloo", "--json"])
            .args(extra)
            .output()
            .unwrap();
        std::fs::read_to_string(&mark).unwrap_or_default()
    };
    let planted_dir = std::fs::canonicalize(cwd.join("workers")).unwrap();
    let seen = launch(&[]);
    assert!(!seen.is_empty(), "the launcher never ran");
    assert!(
        !seen.contains(planted_dir.to_str().unwrap()),
        "the current directory's workers were used unasked: {seen}"
    );
    let seen = launch(&["--workers-dir", "./workers"]);
    assert!(
        seen.contains(planted_dir.to_str().unwrap()),
        "--workers-dir ./workers was not used: {seen}"
    );
}
