//! The report as CSV: one row per run with its figures, for a spreadsheet or pandas.

use super::Report;

pub const HEADER: [&str; 28] = [
    "run_id",
    "experiment",
    "k",
    "backend",
    "simulated",
    "profile",
    "model",
    "per_rank_batch",
    "global_batch",
    "epochs",
    "samples",
    "data_path",
    "settings",
    "status",
    "started_at",
    "ended_at",
    "samples_per_s",
    "rank_min",
    "rank_max",
    "speedup",
    "efficiency",
    "baseline_run_id",
    "predicted_samples_per_s",
    "error_pct",
    "probe_diff_ms",
    "probe_net_of_control_ms",
    "busbw_peak_gbs",
    "transport",
];

/// RFC 4180 quoting: only when a field needs it.
pub fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A whole number, empty when unknown.
fn num_u(x: Option<u64>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

fn num(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => {
            // Enough digits to round-trip what was measured, none that were not.
            let s = format!("{v:.6}");
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        }
        _ => String::new(),
    }
}

pub fn render(r: &Report) -> String {
    let mut out = HEADER.join(",");
    out.push('\n');
    for run in &r.runs {
        let f = r.figures(&run.id);
        let p = f.point;
        let cells = [
            field(&run.id),
            field(run.experiment.as_str()),
            run.k.to_string(),
            field(run.backend.as_str()),
            run.simulated().to_string(),
            field(run.profile.as_deref().unwrap_or("")),
            // Unknown settings (an attached script's) are empty cells.
            field(run.model.as_deref().unwrap_or("")),
            num_u(run.per_rank_batch),
            num_u(run.global_batch),
            num_u(run.epochs.map(u64::from)),
            num_u(run.samples),
            field(run.data_path.as_deref().unwrap_or("")),
            field(&run.settings),
            field(run.status.as_str()),
            run.started.to_string(),
            run.ended.map(|t| t.to_string()).unwrap_or_default(),
            num(p.map(|p| p.samples_per_s)),
            num(p.map(|p| p.rank_min)),
            num(p.map(|p| p.rank_max)),
            num(p.and_then(|p| p.speedup)),
            num(p.and_then(|p| p.efficiency)),
            field(p.and_then(|p| p.baseline_run_id.as_deref()).unwrap_or("")),
            num(p.and_then(|p| p.predicted_samples_per_s)),
            num(p.and_then(|p| p.error_pct())),
            num(f.probe_diff_ms),
            num(f.probe_net_ms),
            num(f.busbw_peak_gbs),
            field(run.transport.as_deref().unwrap_or("")),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}
