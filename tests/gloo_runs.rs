//! Real PyTorch DDP over gloo on the CPU, through the real binary: weak k=1,2, probe and the
//! all-reduce sweep at k=2. Needs a python with torch in DDPTOP_PYTHON (scripts/test sets it up);
//! on CI (CI=1) a missing torch is a failure, elsewhere the tests say so and return.

mod common;
use common::*;

fn python() -> Option<String> {
    let py = std::env::var("DDPTOP_PYTHON")
        .ok()
        .filter(|p| !p.is_empty());
    let ok = py.as_ref().is_some_and(|p| {
        std::process::Command::new(p)
            .args(["-c", "import torch"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if ok {
        return py;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must provide DDPTOP_PYTHON with torch (scripts/test does)"
    );
    eprintln!("SKIPPED: set DDPTOP_PYTHON to a python with torch to run the gloo tests");
    None
}

fn gloo(data: &std::path::Path, py: &str, args: &[&str]) -> serde_json::Value {
    let out = ddptop(data)
        .env("DDPTOP_PYTHON", py)
        .args(["run"])
        .args(args)
        .args(["--backend", "gloo", "--model", "tiny", "--json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(out.status.success(), "{doc:#}");
    assert_no_survivors(&doc);
    doc
}

#[test]
fn gloo_weak_probe_and_allreduce() {
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

    let probe = gloo(d.path(), &py, &["probe", "--k", "2", "--batch", "16"]);
    let runs = probe["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "the k=1 control plus k=2");
    assert_eq!(runs[0]["control"], true);
    for r in runs {
        assert!(r["probe"]["synced_ms"]["median"].as_f64().unwrap() > 0.0);
        assert!(r["probe"]["no_sync_ms"]["blocks"].as_u64().unwrap() >= 2);
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
