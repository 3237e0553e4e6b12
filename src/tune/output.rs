//! What `ddptop tune` prints: one JSON document (`--json`), and the table made from it.

use super::driver::Tuning;
use crate::app::tune::Phase;
use crate::app::tune::decide::Verdict;
use crate::protocol::Backend;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The document of a finished tuning: every candidate with its setting, prediction, measured
/// runs (median, min, max, spread, repeats) and state, and the recommendation (or null) with its
/// gain; `best` is the highest measured median beside the default's, recommended or not.
pub(super) fn document(t: &Tuning, note: &str, budget_s: f64) -> Value {
    let b = t.board();
    let plan = t.plan();
    let backend = plan.template.backend;
    let default_median = b.rows.first().and_then(|r| r.measured.median());
    let settings = |env: &[(String, String)]| env.iter().cloned().collect::<BTreeMap<_, _>>();
    let candidates: Vec<Value> = b
        .rows
        .iter()
        .map(|r| {
            let m = &r.measured;
            json!({
                "name": r.cand.name,
                "settings": settings(&r.cand.env),
                "modelled": r.cand.modelled,
                "state": r.state.as_str(),
                "predicted_samples_per_s": r.predicted_sps(),
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
                    "prediction_error_pct": r.predicted_sps().zip(m.median())
                        .and_then(|(p, x)| crate::costmodel::predict::error_pct(p, x)),
                })),
                "failed": r.failed,
            })
        })
        .collect();
    let recommendation = match (&b.verdict, b.recommended()) {
        (Some(Verdict::Recommend { .. }), Some((row, gain_pct))) => json!({
            "candidate": row.cand.name,
            "settings": settings(&row.cand.env),
            "gain_pct": gain_pct,
            "rule": "its slowest run beat the default's fastest",
            "preset": b.saved.as_ref().map(|s| s.name.clone()),
            "config": b.saved.as_ref().map(|s| s.path.clone()),
        }),
        _ => Value::Null,
    };
    let best = b
        .best_measured()
        .map(|(row, gain)| json!({"candidate": row.cand.name, "gain_pct": gain}));
    let attach = plan.family.attach().map(|a| {
        let ddp_note = b
            .notes
            .iter()
            .find(|n| n.starts_with("DDP settings not tuned"))
            .cloned();
        json!({
            "script": a.script.display().to_string(),
            "args": a.args,
            "ddp_settings_tuned": ddp_note.is_none() && b.base_run.is_some(),
            "ddp_settings_note": ddp_note,
        })
    });
    json!({
        "command": "tune",
        "backend": backend.as_str(),
        "simulated": backend == Backend::Sim,
        "note": note,
        "experiment": plan.experiment().as_str(),
        "attach": attach,
        "k": plan.k,
        "k1_run": b.base_run,
        "repeats": b.repeats,
        "interleaved": true,
        "budget_s": budget_s,
        "state": match b.phase { Phase::Cancelled => "cancelled", _ => "done" },
        "notes": b.notes,
        "candidates": candidates,
        "recommendation": recommendation,
        "best": best,
        "verdict": b.verdict_line(),
    })
}

fn fmt_sps(x: Option<f64>) -> String {
    x.map_or("—".into(), crate::report::fmt_rate)
}

/// The table `ddptop tune` prints, from its JSON document.
pub(super) fn text_table(doc: &Value) -> String {
    let what = match doc["attach"]["script"].as_str() {
        Some(script) => format!("the script {script}"),
        None => doc["experiment"].as_str().unwrap_or("?").to_string(),
    };
    let mut s = format!(
        "ddptop tune: {what} at k={} on {}{}: {} each, interleaved; samples/s of all ranks\n",
        doc["k"],
        doc["backend"].as_str().unwrap_or("?"),
        if doc["simulated"] == true {
            " (SIMULATED)"
        } else {
            ""
        },
        crate::util::count(doc["repeats"].as_u64().unwrap_or(0) as usize, "repeat")
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
    for n in doc["notes"].as_array().into_iter().flatten() {
        s.push_str(&format!("note: {}\n", n.as_str().unwrap_or("?")));
    }
    s.push_str(&format!(
        "verdict: {}\n",
        doc["verdict"]
            .as_str()
            .unwrap_or("none (cancelled before the default was measured)")
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_tables_first_line_counts_repeats_in_words() {
        let doc = |repeats: u32| {
            json!({"experiment": "weak", "k": 2, "backend": "sim", "simulated": true,
                   "repeats": repeats, "candidates": [], "notes": [], "verdict": null})
        };
        let first = |r| {
            super::text_table(&doc(r))
                .lines()
                .next()
                .unwrap()
                .to_string()
        };
        assert!(first(1).contains(": 1 repeat each,"), "{}", first(1));
        assert!(first(3).contains(": 3 repeats each,"), "{}", first(3));
    }
}
