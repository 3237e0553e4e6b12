//! `ddptop run jax` on the CPU through the real binary: one python process per k drives k XLA
//! host devices (ddptop sets XLA_FLAGS), and the run carries the receipt, the k=1 equality check
//! and memory per device. Needs a python with jax, flax and optax in DDPTOP_PYTHON (scripts/test
//! installs them); on CI (CI=1) a missing jax is a failure, elsewhere the test says so and returns.

mod common;
use common::*;

fn python_with_jax() -> Option<String> {
    python_importing("torch, jax, flax, optax")
}

#[test]
fn jax_k1_k2_on_cpu_with_receipt_and_equality_check() {
    let Some(py) = python_with_jax() else { return };
    let d = tempfile::tempdir().unwrap();
    let out = ddptop(d.path())
        .env("DDPTOP_PYTHON", &py)
        .args([
            "run",
            "jax",
            "--k",
            "1,2",
            "--backend",
            "gloo",
            "--model",
            "tiny",
        ])
        .args(["--samples", "64", "--batch", "8", "--epochs", "1", "--json"])
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
    assert_eq!(doc["experiment"], "jax");
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for (r, k) in runs.iter().zip([1u64, 2]) {
        assert_eq!(r["status"], "completed", "{r:#}");
        assert_eq!(r["k"], k);
        assert_eq!(r["devices"], k);
        // One process, whatever k: no torchrun.
        assert_eq!(r["processes"], 1);
        assert_eq!(r["worker_pids"].as_array().unwrap().len(), 1);
        assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
        // The book's matmul precision, in JAX's terms, recorded like torch_seen (issue 48).
        assert_eq!(r["jax_matmul_precision"], "tensorfloat32", "{r:#}");
        assert_eq!(r["global_batch"], 8 * k);
        let rc = &r["receipt"];
        assert_eq!(rc["k"], k);
        assert_eq!(rc["platform"], "cpu");
        assert_eq!(rc["sharding"], "data");
        let layout = rc["layout"].as_object().unwrap();
        assert_eq!(
            layout.len(),
            4,
            "batch and weight, before and after: {rc:#}"
        );
        assert_eq!(
            layout["fc.kernel (before)"], layout["fc.kernel (after)"],
            "weights stay replicated"
        );
        let mem = r["device_memory"].as_array().unwrap();
        assert_eq!(mem.len() as u64, k, "a memory report per device");
        assert!(
            mem.iter()
                .all(|m| m["param_bytes"].as_u64() == Some(4 * 395_882))
        );
    }
    let (k1, k2) = (&runs[0], &runs[1]);
    assert_eq!(
        k1["receipt"]["all_reduce_ops"], 0,
        "k=1 has nothing to reduce"
    );
    assert_eq!(k1["checks"].as_array().unwrap().len(), 0);
    let ar = &k2["receipt"]["ops"]["all_reduce"];
    assert!(ar["count"].as_u64().unwrap() >= 1);
    assert!(
        ar["total_elems"].as_u64().unwrap() >= 395_882,
        "every gradient is summed"
    );
    let combined = k2["receipt"]["combined_by"].as_array().unwrap();
    assert!(
        combined
            .iter()
            .any(|p| p.as_str().unwrap().contains("all-reduce-combiner")),
        "{combined:?}"
    );
    let batch = k2["receipt"]["layout"]["batch (before)"].as_str().unwrap();
    assert!(batch.contains("CPU 0") && batch.contains("CPU 1") && !batch.contains("CPU 0,1"));
    // The loss at steps 1-4 and the parameters after step 1, each within its tolerance.
    let checks = k2["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 5, "{checks:#?}");
    assert!(checks.iter().all(|c| c["ok"] == true), "{checks:#?}");
    let first = &checks[0];
    assert_eq!(
        (first["name"].as_str(), first["step"].as_u64()),
        (Some("k1_vs_k2_loss"), Some(1))
    );
    // Step 1: 1e-6 relative to the loss (floored at 1), a few float32 ulps.
    let a = first["a"].as_f64().unwrap();
    let tol = first["tol"].as_f64().unwrap();
    assert!((tol - 1e-6 * a.abs().max(1.0)).abs() < 1e-12, "{first:#}");
    let eq = &k2["equality"];
    assert_eq!(eq["verdict"], "ok", "{eq:#}");
    assert_eq!(eq["loss_steps"], serde_json::json!([1, 2, 3, 4]));
    assert_eq!(eq["params_after_step_1"]["ok"], true, "{eq:#}");
    assert!(
        eq["tolerance"]
            .as_str()
            .unwrap()
            .starts_with("tol (cpu): loss"),
        "{eq:#}"
    );
    assert!(k1["equality"].is_null());
    // The k=2 point of the jax curve divides by its own k=1 run.
    assert_eq!(k2["baseline_run_id"], k1["run_id"]);
    assert!(k2["speedup"].as_f64().unwrap() > 0.0);

    // What the panes need comes back from the store: the receipt, the check, memory per device.
    let store = ddptop::store::Store::open(&d.path().join("runs.db")).unwrap();
    let runs = store.load_runs(10).unwrap();
    let stored = runs
        .iter()
        .find(|r| r.id == k2["run_id"].as_str().unwrap())
        .expect("the k=2 run is stored");
    assert_eq!(
        stored.spec.family.sharding(),
        ddptop::run::JaxSharding::Data
    );
    assert_eq!(stored.spec.processes(), 1);
    let h = stored.figures.hlo.as_ref().expect("receipt reloaded");
    assert_eq!(h.all_reduce_ops as u64, ar["count"].as_u64().unwrap());
    assert_eq!(h.layout.as_ref().map(|l| l.len()), Some(4));
    assert_eq!(stored.figures.checks.len(), 5);
    assert_eq!(
        ddptop::app::equality::equality(&stored.figures.checks).map(|e| e.verdict),
        Some(ddptop::app::equality::Verdict::Ok)
    );
    assert_eq!(
        stored
            .figures
            .device_memory
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [0, 1]
    );
}
