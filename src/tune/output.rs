//! What `ddptop tune` prints: one JSON document (`--json`), and the table made from it.

use super::Row;
use super::decide::Verdict;
use crate::protocol::Backend;
use crate::run::Experiment;
use serde_json::{Value, json};

#[allow(clippy::too_many_arguments)]
pub(super) fn document(
    a: &super::TuneArgs,
    note: &str,
    backend: Backend,
    experiment: Experiment,
    base: &str,
    rows: &[Row],
    repeats: usize,
    verdict: &Verdict,
    saved: Option<&(String, String)>,
    budget_note: Option<&str>,
) -> Value {
    let default_median = rows[0].measured.median();
    let candidates: Vec<Value> = rows
        .iter()
        .map(|r| {
            let m = &r.measured;
            json!({
                "name": r.cand.name,
                "settings": r.cand.env.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
                "modelled": r.cand.modelled,
                "predicted_samples_per_s": r.predicted.as_ref().ok().map(|p| p.samples_per_s),
                "predicted_buckets": r.predicted.as_ref().ok().map(|p| p.buckets),
                "predicted_exposed_ms": r.predicted.as_ref().ok().map(|p| p.exposed_ms),
                "prediction_source": r.predicted.as_ref().ok().map(|p| p.busbw.clone()),
                "prediction_error": r.predicted.as_ref().err(),
                "finalist": r.finalist || r.cand.is_default(),
                "measured": (m.repeats() > 0).then(|| json!({
                    "run_ids": m.run_ids,
                    "samples_per_s": m.samples_per_s,
                    "median": m.median(),
                    "min": m.min(),
                    "max": m.max(),
                    "spread_pct": m.spread_pct(),
                    "repeats": m.repeats(),
                    "vs_default_pct": m.median().zip(default_median).map(|(x, d)| (x / d - 1.0) * 100.0),
                    "prediction_error_pct": r.predicted.as_ref().ok().zip(m.median())
                        .and_then(|(p, x)| crate::costmodel::predict::error_pct(p.samples_per_s, x)),
                })),
                "failed": r.failed,
            })
        })
        .collect();
    let recommendation = match verdict {
        Verdict::Recommend {
            candidate,
            gain_pct,
        } => json!({
            "candidate": rows[*candidate].cand.name,
            "settings": rows[*candidate].cand.env.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "gain_pct": gain_pct,
            "rule": "its slowest run beat the default's fastest",
            "preset": saved.map(|s| s.0.clone()),
            "config": saved.map(|s| s.1.clone()),
        }),
        Verdict::DefaultIsAsGood { .. } => Value::Null,
    };
    let verdict_line = match verdict {
        Verdict::Recommend {
            candidate,
            gain_pct,
        } => format!(
            "{}: {gain_pct:+.1}% samples/s over the default (its slowest run beat the default's fastest)",
            rows[*candidate].cand.name
        ),
        Verdict::DefaultIsAsGood { best, why } => format!(
            "the default is as good as anything tried ({why}{})",
            best.map(|i| format!("; highest median: {}", rows[i].cand.name))
                .unwrap_or_default()
        ),
    };
    json!({
        "command": "tune",
        "backend": backend.as_str(),
        "simulated": backend == Backend::Sim,
        "note": note,
        "experiment": experiment.as_str(),
        "k": a.k,
        "k1_run": base,
        "repeats": repeats,
        "interleaved": true,
        "budget_s": a.budget,
        "budget_note": budget_note,
        "candidates": candidates,
        "recommendation": recommendation,
        "verdict": verdict_line,
    })
}

fn fmt_sps(x: Option<f64>) -> String {
    x.map_or("—".into(), crate::report::fmt_rate)
}

/// The table `ddptop tune` prints, from its JSON document.
pub(super) fn text_table(doc: &Value) -> String {
    let mut s = format!(
        "ddptop tune: {} at k={} on {}{}: {} repeats each, interleaved; samples/s of all ranks\n",
        doc["experiment"].as_str().unwrap_or("?"),
        doc["k"],
        doc["backend"].as_str().unwrap_or("?"),
        if doc["simulated"] == true {
            " (SIMULATED)"
        } else {
            ""
        },
        doc["repeats"]
    );
    s.push_str(&format!(
        "{:<44} {:>12} {:>26} {:>10}\n",
        "candidate", "predicted", "measured median (min–max)", "vs default"
    ));
    let mut skipped = Vec::new();
    for c in doc["candidates"].as_array().into_iter().flatten() {
        let name = c["name"].as_str().unwrap_or("?");
        let pred = c["predicted_samples_per_s"].as_f64();
        let pred_s = if c["modelled"] == false {
            "not modelled".into()
        } else {
            fmt_sps(pred)
        };
        if c["measured"].is_null() {
            if c["failed"].as_array().is_none_or(|f| f.is_empty()) {
                skipped.push(format!("{name} ({pred_s})"));
            }
            for f in c["failed"].as_array().into_iter().flatten() {
                s.push_str(&format!(
                    "{name:<44} failed: {}\n",
                    f.as_str().unwrap_or("?")
                ));
            }
            continue;
        }
        let m = &c["measured"];
        let range = format!(
            "{} ({}–{})",
            fmt_sps(m["median"].as_f64()),
            fmt_sps(m["min"].as_f64()),
            fmt_sps(m["max"].as_f64())
        );
        let vs = if name == "default" {
            "—".into()
        } else {
            m["vs_default_pct"]
                .as_f64()
                .map_or("—".into(), |p| format!("{p:+.1}%"))
        };
        s.push_str(&format!("{name:<44} {pred_s:>12} {range:>26} {vs:>10}\n"));
    }
    if !skipped.is_empty() {
        s.push_str(&format!(
            "not measured (predicted lower): {}\n",
            skipped.join(", ")
        ));
    }
    if let Some(b) = doc["budget_note"].as_str() {
        s.push_str(&format!("note: {b}\n"));
    }
    s.push_str(&format!(
        "verdict: {}\n",
        doc["verdict"].as_str().unwrap_or("?")
    ));
    if let Some(p) = doc["recommendation"]["preset"].as_str() {
        s.push_str(&format!(
            "saved as preset {p} in {} (ddptop run --preset {p} …)\n",
            doc["recommendation"]["config"]
                .as_str()
                .unwrap_or("the config")
        ));
    }
    s
}
