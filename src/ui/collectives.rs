//! The collectives view (docs/profiler.md): what NCCL's profiler plugin reported for a run, as
//! lines in the run's details (Enter) and as a block of its own (`render`). Pure: it draws
//! `app::collectives::model`, taken as of the latest batch's arrival, nothing else.

use crate::app::collectives::{CollectivesModel, model};
use crate::run::RunView;
use crate::ui::Theme;
use crate::util::fmt_bytes;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// The model as of the run's latest plugin batch (the UI has no clock of its own).
pub fn model_of(run: &RunView) -> Option<CollectivesModel> {
    let latest = run
        .collectives
        .ranks
        .values()
        .filter_map(|p| p.last_msg)
        .max()
        .or(run.clock.started)?;
    model(run, latest)
}

/// The view's lines, under a `collectives` heading.
pub fn lines(t: &Theme, m: &CollectivesModel) -> Vec<Line<'static>> {
    let mut out: Vec<Line<'static>> = vec![Line::from(vec![
        Span::styled("collectives ", t.label),
        Span::styled("from NCCL's profiler plugin", t.dim),
    ])];
    if let Some(n) = &m.note {
        out.push(Line::from(Span::styled(format!("  {n}"), t.dim)));
        if m.ranks.is_empty() {
            return out;
        }
    }
    if let Some(b) = &m.bounds {
        out.push(Line::from(vec![
            Span::styled("  not kept ", t.warn),
            Span::styled(b.clone(), t.text),
        ]));
    }
    if let Some(v) = &m.verdict {
        out.push(Line::from(vec![
            Span::styled("  stuck ", t.bad),
            Span::styled(v.clone(), t.text),
        ]));
    }
    for r in &m.ranks {
        let mut spans = vec![
            Span::styled(format!("  rank {:<3} ", r.rank), t.label),
            Span::styled("done ", t.dim),
            Span::styled(r.last_done.clone(), t.value),
        ];
        if let Some(f) = &r.inflight {
            spans.push(Span::styled("  in flight ", t.dim));
            spans.push(Span::styled(f.clone(), t.text));
        }
        if let Some(l) = &r.loss {
            spans.push(Span::styled(format!("  {l}"), t.warn));
        }
        out.push(Line::from(spans));
    }
    for f in &m.funcs {
        out.push(Line::from(vec![
            Span::styled(format!("  {:<15}", f.func), t.text),
            Span::styled(
                format!(
                    "{:>8} × · {:>9} · kernels {:.1} ms",
                    f.count,
                    fmt_bytes(f.bytes),
                    f.kernel_ms
                ),
                t.value,
            ),
        ]));
    }
    if !m.algos.is_empty() {
        out.push(Line::from(vec![
            Span::styled("  algo/proto ", t.label),
            Span::styled(m.algos.clone(), t.value),
        ]));
    }
    for s in &m.sizes {
        let bw = s
            .busbw_gbs
            .map_or("n/a".to_string(), |b| format!("{b:.1} GB/s"));
        out.push(Line::from(vec![
            Span::styled(format!("  busbw {:<15}", s.func), t.label),
            Span::styled(
                format!("≥{:>9} · {:>6} × · {bw}", fmt_bytes(s.from_bytes), s.n),
                t.value,
            ),
        ]));
    }
    if !m.buckets.is_empty() {
        out.push(Line::from(Span::styled(
            "  buckets (NCCL profiler: ms from the first bucket's call)",
            t.label,
        )));
        for b in &m.buckets {
            let opt = |x: Option<f64>| x.map_or("n/a".to_string(), |v| format!("{v:.3}"));
            out.push(Line::from(Span::styled(
                format!(
                    "    #{:<2} {:>9} · all_reduce #{} · ready {:.3} · kernel start {} · done {:.3} · GPU {} ms",
                    b.index,
                    fmt_bytes(b.bytes),
                    b.seq,
                    b.ready_ms,
                    opt(b.start_ms),
                    b.done_ms,
                    opt(b.kernel_ms)
                ),
                t.value,
            )));
        }
    }
    for p in &m.per_step {
        let receipt = match (p.receipt, p.matches()) {
            (Some((n, bytes)), Some(ok)) => format!(
                " · receipt {n} × {} {}",
                fmt_bytes(bytes),
                if ok { "✓" } else { "✗ differs" }
            ),
            _ => String::new(),
        };
        out.push(Line::from(vec![
            Span::styled(format!("  per step {:<12}", p.func), t.label),
            Span::styled(
                format!(
                    "{:.2} × · {} over {} steps{receipt}",
                    p.count,
                    fmt_bytes(p.bytes as u64),
                    p.steps
                ),
                if p.matches() == Some(false) {
                    t.warn
                } else {
                    t.value
                },
            ),
        ]));
    }
    out
}

/// The view as a block of its own.
pub fn render(t: &Theme, run: &RunView, area: Rect, buf: &mut Buffer) {
    let body = match model_of(run) {
        Some(m) => lines(t, &m),
        None => vec![Line::from(Span::styled(
            "launched without the NCCL profiler plugin (--no-nccl-profiler, nccl_profiler = false, or not built beside ddptop)",
            t.dim,
        ))],
    };
    let tag = format!("{} · NCCL profiler ", run.id);
    crate::ui::boxed_text(t, "Collectives", tag, body, area, buf);
}
