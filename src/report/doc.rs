//! The report's content as a list of blocks (headings, paragraphs, tables, code), built once and
//! rendered by both the Markdown and the HTML writer, so the two never show different figures.

pub use super::block::{Align, Block, PlotSlot};
use super::{Report, fmt_ms, fmt_rate, fmt_signed_pct};
use crate::util::{fmt_bytes, fmt_size_pow2};

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "—".into())
}

fn cols(spec: &[(&str, Align)]) -> Vec<(String, Align)> {
    spec.iter()
        .map(|(h, a)| (h.to_string(), a.clone()))
        .collect()
}

use Align::{Left as L, Right as R};

pub fn build(r: &Report) -> Vec<Block> {
    let mut d = Vec::new();
    let sim = if r.simulated() { " (SIMULATED)" } else { "" };
    d.push(Block::Heading(1, format!("{}{sim}", r.title)));
    d.push(Block::Para(format!(
        "Generated {} by ddptop {} · {} run{}.",
        r.generated,
        r.ddptop_version,
        r.runs.len(),
        if r.runs.len() == 1 { "" } else { "s" }
    )));
    if r.simulated() {
        d.push(Block::Warning(
            "SIMULATED: figures marked SIMULATED come from ddptop's cost model plus noise, not \
             from a measurement."
                .into(),
        ));
    }
    scaling(&mut d, r);
    timelines(&mut d, r);
    probes(&mut d, r);
    bench(&mut d, r);
    runs(&mut d, r);
    environment(&mut d, r);
    d
}

fn scaling(d: &mut Vec<Block>, r: &Report) {
    if r.curves.is_empty() {
        return;
    }
    d.push(Block::Heading(2, "Scaling".into()));
    d.push(Block::Para(
        "speedup = samples/s(k) / samples/s of the baseline k=1 run; efficiency = speedup / k; \
         spread = half the slowest-to-fastest rank range as % of the mean rank; error = \
         (predicted − measured) / measured, positive when the model over-predicts."
            .into(),
    ));
    d.push(Block::Plot(PlotSlot::Scaling));
    for c in &r.curves {
        let sim = if c.simulated { " — SIMULATED" } else { "" };
        d.push(Block::Heading(3, format!("{}{sim}", c.label)));
        let predicted = c.points.iter().any(|p| p.predicted_samples_per_s.is_some());
        let mut header = cols(&[
            ("k", R),
            ("run", L),
            ("samples/s", R),
            ("spread", R),
            ("speedup", R),
            ("efficiency", R),
            ("baseline", L),
        ]);
        if predicted {
            header.extend(cols(&[("predicted", R), ("error", R)]));
        }
        let rows = c
            .points
            .iter()
            .map(|p| {
                let mut row = vec![
                    p.k.to_string(),
                    p.run_id.clone(),
                    fmt_rate(p.samples_per_s),
                    format!("±{:.1}%", p.spread_pct()),
                    // A figure with a caveat is marked where it is read; the note says why.
                    opt(p.speedup, |s| format!("{s:.2}×{}", mark(p))),
                    opt(p.efficiency, |e| efficiency_cell(p, e)),
                    opt(p.baseline_run_id.as_deref(), |b| {
                        if b == p.run_id {
                            "itself".into()
                        } else {
                            b.to_string()
                        }
                    }),
                ];
                if predicted {
                    row.push(opt(p.predicted_samples_per_s, fmt_rate));
                    row.push(opt(p.error_pct(), fmt_signed_pct));
                }
                row
            })
            .collect();
        d.push(Block::Table { header, rows });
        for p in &c.points {
            if let Some(why) = &p.caveat {
                d.push(Block::Para(format!("⚠ k={} ({}): {why}", p.k, p.run_id)));
            }
        }
    }
}

/// ` ⚠` after a figure that carries a caveat.
/// An efficiency above 100% within the point's rank spread reads as ideal, so that 100.2% is
/// not taken for a measured gain (the k=1 baseline is one rank: no spread of its own).
fn efficiency_cell(p: &super::CurvePoint, e: f64) -> String {
    match crate::app::summary::within_noise_of_ideal(e, p.spread_pct()) {
        Some(noise) if p.caveat.is_none() => crate::app::summary::about_ideal_words(noise),
        _ => format!("{:.0}%{}", e * 100.0, mark(p)),
    }
}

fn mark(p: &super::CurvePoint) -> &'static str {
    if p.caveat.is_some() { " ⚠" } else { "" }
}

fn timelines(d: &mut Vec<Block>, r: &Report) {
    for (i, t) in r.timelines.iter().enumerate() {
        let sim = if t.simulated { " — SIMULATED" } else { "" };
        d.push(Block::Heading(
            2,
            format!(
                "Bucket timeline: run {}, k={}, rank {}, step {}{sim}",
                t.run_id, t.k, t.rank, t.step
            ),
        ));
        let mut s = format!(
            "{} bucket{} · {} · backward compute {} ms · all-reduce {} ms · overlap {} · exposed comm {} ms",
            t.buckets.len(),
            if t.buckets.len() == 1 { "" } else { "s" },
            fmt_bytes(t.total_bytes()),
            fmt_ms(t.bwd_compute_ms),
            fmt_ms(t.comm_ms()),
            opt(t.overlap_pct, |p| format!("{p:.0}%")),
            fmt_ms(t.exposed_ms),
        );
        if let Some(p) = t.predicted_exposed_ms {
            s.push_str(&format!(" (predicted {} ms)", fmt_ms(p)));
        }
        if let Some(o) = t.optimizer_ms {
            s.push_str(&format!(" · optimizer {} ms", fmt_ms(o)));
        }
        s.push('.');
        if t.start_inferred {
            s.push_str(
                " Start times are inferred as max(ready, previous bucket done), not measured.",
            );
        }
        d.push(Block::Para(s));
        d.push(Block::Plot(PlotSlot::Timeline(i)));
        let kernel = t.buckets.iter().any(|b| b.kernel_ms.is_some());
        let mut header = cols(&[
            ("bucket", R),
            ("bytes", R),
            ("ready ms", R),
            ("start ms", R),
            ("done ms", R),
            ("all-reduce ms", R),
            ("exposed ms", R),
        ]);
        if kernel {
            header.extend(cols(&[("kernel ms", R)]));
        }
        let rows = t
            .buckets
            .iter()
            .map(|b| {
                let mut row = vec![
                    b.index.to_string(),
                    fmt_bytes(b.bytes),
                    fmt_ms(b.ready_ms),
                    fmt_ms(b.start_ms),
                    fmt_ms(b.done_ms),
                    fmt_ms(b.comm_ms()),
                    fmt_ms(b.exposed_ms(t.bwd_compute_ms)),
                ];
                if kernel {
                    row.push(opt(b.kernel_ms, fmt_ms));
                }
                row
            })
            .collect();
        d.push(Block::Table { header, rows });
    }
}

fn probes(d: &mut Vec<Block>, r: &Report) {
    if r.probes.is_empty() {
        return;
    }
    d.push(Block::Heading(2, "no_sync probe".into()));
    d.push(Block::Para(
        "Medians of block medians [range of block medians]; Δ = synced − no_sync ≈ exposed \
         communication plus the reducer's cost; the k=1 control has no communication, so \
         Δ − control isolates communication; predicted exposed = the cost model's exposed all-reduce time \
         for this k."
            .into(),
    ));
    let header = cols(&[
        ("run", L),
        ("k", R),
        ("synced ms", R),
        ("no_sync ms", R),
        ("blocks", R),
        ("Δ ms", R),
        ("Δ − control ms", R),
        ("predicted exposed ms", R),
    ]);
    let rows = r
        .probes
        .iter()
        .map(|p| {
            let net = r.control_for(p).map(|c| p.diff_ms() - c.diff_ms());
            vec![
                format!(
                    "{}{}{}",
                    p.run_id,
                    if p.control { " (k=1 control)" } else { "" },
                    if p.simulated { " SIMULATED" } else { "" }
                ),
                p.k.to_string(),
                format!(
                    "{} [{}–{}]",
                    fmt_ms(p.synced_ms.median),
                    fmt_ms(p.synced_ms.min),
                    fmt_ms(p.synced_ms.max)
                ),
                format!(
                    "{} [{}–{}]",
                    fmt_ms(p.no_sync_ms.median),
                    fmt_ms(p.no_sync_ms.min),
                    fmt_ms(p.no_sync_ms.max)
                ),
                p.blocks.to_string(),
                fmt_ms(p.diff_ms()),
                opt(net, fmt_ms),
                opt(p.predicted_comm_ms, fmt_ms),
            ]
        })
        .collect();
    d.push(Block::Table { header, rows });
}

fn bench(d: &mut Vec<Block>, r: &Report) {
    let settings = r.bench_settings();
    if settings.is_empty() {
        return;
    }
    d.push(Block::Heading(2, "All-reduce bench".into()));
    d.push(Block::Para(
        "algbw = bytes / time; busbw = algbw · 2(k−1)/k (nccl-tests' definitions); fp32.".into(),
    ));
    d.push(Block::Plot(PlotSlot::Bench));
    for s in &settings {
        d.push(Block::Heading(
            3,
            format!(
                "{} — run {}, k={}{}",
                s.label(),
                s.run_id,
                s.k,
                if s.simulated { " — SIMULATED" } else { "" }
            ),
        ));
        let header = cols(&[
            ("size", R),
            ("time µs", R),
            ("algbw GB/s", R),
            ("busbw GB/s", R),
        ]);
        let rows = s
            .rows
            .iter()
            .map(|row| {
                vec![
                    fmt_size_pow2(row.bytes),
                    format!("{:.1}", row.time_us),
                    format!("{:.2}", row.algbw_gbs),
                    format!("{:.2}", row.busbw_gbs),
                ]
            })
            .collect();
        d.push(Block::Table { header, rows });
    }
    let ratios: Vec<String> = r
        .bench_ratios()
        .iter()
        .map(|q| {
            format!(
                "{} vs {} at {}: {:.2}× busbw",
                q.setting,
                q.baseline,
                fmt_size_pow2(q.bytes),
                q.ratio
            )
        })
        .collect();
    if !ratios.is_empty() {
        d.push(Block::List(ratios));
    }
}

fn runs(d: &mut Vec<Block>, r: &Report) {
    if r.runs.is_empty() {
        return;
    }
    d.push(Block::Heading(2, "Runs".into()));
    let header = cols(&[
        ("run", L),
        ("experiment", L),
        ("k", R),
        ("backend", L),
        ("model", L),
        ("batch/rank", R),
        ("global batch", R),
        ("epochs", R),
        ("samples", R),
        ("data", L),
        ("settings", L),
        ("status", L),
        ("started", L),
        ("ended", L),
    ]);
    let rows = r
        .runs
        .iter()
        .map(|run| {
            let backend = match &run.profile {
                Some(p) if run.simulated() => format!("SIMULATED {p}"),
                _ => run.backend_label(),
            };
            vec![
                run.id.clone(),
                run.experiment.to_string(),
                run.k.to_string(),
                backend,
                super::known(&run.model),
                super::known(&run.per_rank_batch),
                super::known(&run.global_batch),
                super::known(&run.epochs),
                super::known(&run.samples),
                super::known(&run.data_path),
                run.settings.clone(),
                run.status.to_string(),
                run.started.to_string(),
                opt(run.ended, |t| t.to_string()),
            ]
        })
        .collect();
    d.push(Block::Table { header, rows });
    let notes: Vec<String> = r
        .runs
        .iter()
        .filter_map(|run| {
            let mut parts = Vec::new();
            if let Some(t) = &run.torch {
                parts.push(format!("PyTorch: {t}"));
            }
            if let Some(shared) = &run.gpus_shared {
                parts.push(format!("WARNING {shared}"));
            }
            for c in &run.caveats {
                parts.push(format!("WARNING {c}"));
            }
            if let Some(f) = &run.fault {
                parts.push(format!("fault: {f} (injected: off the clean curves)"));
            }
            for s in &run.stragglers {
                parts.push(format!("straggler {}", s.when_and_why()));
            }
            if let Some(t) = &run.transport {
                parts.push(format!("transport {t}"));
            }
            if let Some(l) = run.collectives.get("comm_source").and_then(|v| v.as_str()) {
                parts.push(l.to_string());
            }
            if let Some(reason) = &run.reason {
                parts.push(format!("{}: {}", run.status, reason.replace('\n', " ")));
            }
            for d in &run.diagnoses {
                parts.push(format!("DIAGNOSIS {}", d.line()));
            }
            for e in &run.evidence {
                parts.push(format!("evidence: {e}"));
            }
            for t in &run.rank_tails {
                let said = t.lines.iter().rev().take(4).rev().cloned();
                let said: Vec<String> = said.collect();
                parts.push(format!(
                    "rank {} {}, its last lines: {}",
                    t.rank,
                    t.exit_words(),
                    if said.is_empty() {
                        "(none)".into()
                    } else {
                        said.join(" ⏎ ")
                    }
                ));
            }
            if run.status != crate::run::RunStatus::Completed
                && let Some(log) = &run.output_log
            {
                parts.push(format!("output log {log}"));
            }
            (!parts.is_empty()).then(|| format!("{}: {}", run.id, parts.join(" · ")))
        })
        .collect();
    if !notes.is_empty() {
        d.push(Block::List(notes));
    }
    for run in &r.runs {
        d.extend(super::phases::blocks(run));
    }
}

fn environment(d: &mut Vec<Block>, r: &Report) {
    let e = &r.environment;
    d.push(Block::Heading(2, "Environment".into()));
    let mut items = vec![format!(
        "host: {}",
        if e.host.is_empty() { "—" } else { &e.host }
    )];
    if !e.os.is_empty() {
        items.push(format!("OS: {}", e.os));
    }
    if let Some(c) = e.cpus {
        items.push(format!("CPUs: {c}"));
    }
    items.push(format!(
        "GPUs: {}",
        if e.gpus.is_empty() {
            "none seen".to_string()
        } else {
            e.gpus.join(", ")
        }
    ));
    items.push(format!("ddptop {}", r.ddptop_version));
    items.extend(e.versions.iter().map(|(k, v)| format!("{k} {v}")));
    d.push(Block::List(items));
    let commands: Vec<String> = r
        .runs
        .iter()
        .filter(|run| !run.command.is_empty())
        .map(|run| format!("# {}\n{}", run.id, run.command))
        .collect();
    if !commands.is_empty() {
        d.push(Block::Heading(3, "Command lines".into()));
        d.push(Block::Code(commands.join("\n")));
    }
}

#[cfg(test)]
mod efficiency_tests {
    use super::efficiency_cell;
    use crate::report::CurvePoint;

    fn k2(rank_min: f64, rank_max: f64, efficiency: f64) -> CurvePoint {
        CurvePoint {
            k: 2,
            run_id: "r2".into(),
            samples_per_s: rank_min + rank_max,
            rank_min,
            rank_max,
            speedup: Some(efficiency * 2.0),
            efficiency: Some(efficiency),
            baseline_run_id: Some("r1".into()),
            predicted_samples_per_s: None,
            caveat: None,
        }
    }

    #[test]
    fn a_report_reads_100_point_2_percent_within_the_spread_as_ideal() {
        // Ranks 98.6 and 101.8: ±1.6%.
        assert_eq!(
            efficiency_cell(&k2(98.6, 101.8, 1.002), 1.002),
            "≈ 100% (within ±1.6% spread)"
        );
        assert_eq!(efficiency_cell(&k2(100.0, 100.0, 0.9), 0.9), "90%");
        let mut over = k2(103.0, 103.0, 1.03);
        over.caveat = Some("efficiency above 100%".into());
        assert_eq!(efficiency_cell(&over, 1.03), "103% ⚠");
    }
}
