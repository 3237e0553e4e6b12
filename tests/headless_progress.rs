//! `ddptop run`'s progress line is for terminals only: with stderr on a pipe nothing is
//! rewritten (no `\r`, no escape codes), so logs and CI output stay clean.

mod common;

#[test]
fn piped_stderr_gets_no_progress_line() {
    let d = tempfile::tempdir().unwrap();
    let out = common::ddptop(d.path())
        .args([
            "run",
            "weak",
            "--k",
            "1",
            "--samples",
            "20000",
            "--epochs",
            "2",
            "--backend",
            "sim",
            "--sim-speed",
            "5",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    assert!(err.contains("running as"), "{err}");
    assert!(!err.contains(" step "), "{err}");
}
