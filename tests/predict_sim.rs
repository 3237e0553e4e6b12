//! The cost model's prediction against the simulator, through the real binary: the simulator
//! charges exactly what the model composes (k=1 step + exposed comm + reducer), so the predictor
//! must land within 1% of it. A disagreement means the predictor reads the wrong k=1 run, the
//! wrong ready times, the wrong busbw or the wrong reducer.

mod common;
use common::*;
use serde_json::Value;

fn run_of(doc: &Value, k: u32, control: bool) -> &Value {
    doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["k"] == k && r["control"] == control)
        .unwrap_or_else(|| panic!("no k={k} run in {doc:#}"))
}

fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn simulator_and_predictor_agree_to_one_percent() {
    let d = tempfile::tempdir().unwrap();
    // The k=1 control of a probe measures the reducer; the weak sweep then has what it needs.
    let (out, _) = sim_json(d.path(), &["probe", "--k", "2"]);
    assert_ok(&out);
    let (out, doc) = sim_json(d.path(), &["weak", "--k", "1,2", "--samples", "30000"]);
    assert_ok(&out);
    let k1 = run_of(&doc, 1, false);
    assert!(
        k1.get("prediction").is_none(),
        "k=1 is the input, not predicted"
    );
    let k2 = run_of(&doc, 2, false);
    let p = &k2["prediction"];
    assert!(p.get("na").is_none(), "no prediction: {p:#}");
    assert_eq!(p["simulated"], true);
    assert_eq!(p["baseline_run_id"], k1["run_id"]);
    assert_eq!(p["busbw_source"], "profile h200-nvlink (SIMULATED)");
    assert_eq!(p["reducer_added"], true);
    assert!(p["control_run_id"].is_string());
    let sps = &p["samples_per_s"];
    let err = sps["error_pct"].as_f64().unwrap();
    assert!(err.abs() < 1.0, "samples/s off by {err}%: {sps}");
    assert_eq!(sps["measured"], k2["samples_per_s"]);
    let exposed = &p["exposed_ms"];
    let e = exposed["error_pct"].as_f64().unwrap();
    assert!(e.abs() < 1.0, "exposed comm off by {e}%: {exposed}");
    let buckets = p["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 3);
    for b in buckets {
        let e = b["error_pct"].as_f64().unwrap();
        assert!(e.abs() < 1.0, "bucket all-reduce off by {e}%: {b}");
        // The simulator reports no kernel time: the measured figure is done − start, inferred.
        assert_eq!(b["measured_inferred"], true);
    }
    // And it is not a tautology: the prediction differs from the k=1 throughput times k.
    let naive = 2.0 * k1["samples_per_s"].as_f64().unwrap();
    assert!(sps["predicted"].as_f64().unwrap() < naive * 0.995);

    // `ddptop runs --json` reads the same figures back from the store.
    let out = ddptop(d.path()).args(["runs", "--json"]).output().unwrap();
    assert_ok(&out);
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stored = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == k2["run_id"])
        .unwrap();
    let e = stored["prediction"]["samples_per_s"]["error_pct"]
        .as_f64()
        .unwrap();
    assert!(e.abs() < 1.0, "stored prediction off by {e}%");
    assert_eq!(stored["baseline_run_id"], k1["run_id"]);
}

#[test]
fn probe_ratio_subtracts_the_control_and_divides_by_the_prediction() {
    let d = tempfile::tempdir().unwrap();
    // Noise off: the quantity is a 0.1 ms difference of 43 ms steps, below the default noise.
    let quiet = ["--sim-noise", "0"];
    let (out, _) = sim_json(
        d.path(),
        &[&["weak", "--k", "1", "--samples", "20000"][..], &quiet].concat(),
    );
    assert_ok(&out);
    let (out, doc) = sim_json(d.path(), &[&["probe", "--k", "2"][..], &quiet].concat());
    assert_ok(&out);
    let probe = run_of(&doc, 2, false);
    let m = &probe["probe_model"];
    assert!(m.get("na").is_none(), "no probe model: {m:#}");
    let control = run_of(&doc, 1, true);
    assert_eq!(m["control_run_id"], control["run_id"]);
    // The simulated difference is exposed comm + reducer, the control the reducer alone.
    let ratio = m["ratio"].as_f64().unwrap();
    assert!((ratio - 1.0).abs() < 0.01, "ratio {ratio}: {m:#}");
    let diff = probe["probe"]["difference_ms"].as_f64().unwrap();
    let naive = diff / m["predicted_exposed_ms"].as_f64().unwrap();
    assert!(naive > 1.2, "the old ratio (no control) would read {naive}");
}

#[test]
fn a_run_without_busbw_says_what_to_run() {
    let d = tempfile::tempdir().unwrap();
    let (out, doc) = sim_json(d.path(), &["strong", "--k", "1,2", "--samples", "20000"]);
    assert_ok(&out);
    let na = run_of(&doc, 2, false)["prediction"]["na"].as_str().unwrap();
    assert!(na.contains("strong scaling"), "{na}");
}
