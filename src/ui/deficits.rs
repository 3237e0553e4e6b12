//! The Deficits pane: while a hand-rolled run is the subject it takes the Probe and Bench panes'
//! place and lists, at each k, samples/s of the hand-rolled loop as the book wrote it and with
//! each of DDP's fixes, beside DDP itself (app::deficits), with a bar against DDP.

use super::layout::PaneId;
use super::{Ctx, empty_note, fmt, frame_block, put_line};
use crate::app::deficits::{self, Column};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// Whether the subject run is hand-rolled (the pane shows only then).
fn active(ctx: &Ctx) -> bool {
    ctx.view
        .subject(ctx.state)
        .is_some_and(|r| r.spec.kind().has_deficits_pane())
}

/// Probe and Bench (always adjacent) give their union to the Deficits pane.
pub fn swap_in(ctx: &Ctx, panes: &[(PaneId, Rect)]) -> Vec<(PaneId, Rect)> {
    if !active(ctx) {
        return panes.to_vec();
    }
    let mut out = Vec::with_capacity(panes.len());
    let mut area: Option<Rect> = None;
    for (id, r) in panes {
        if matches!(id, PaneId::Probe | PaneId::Bench) {
            area = Some(area.map_or(*r, |a| a.union(*r)));
        } else {
            out.push((*id, *r));
        }
    }
    if let Some(r) = area {
        out.push((PaneId::Deficits, r));
    }
    out
}

pub fn render(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let runs = &ctx.state.runs;
    let anchor = deficits::anchor(runs, ctx.view.subject(ctx.state));
    let table = anchor.map(|a| deficits::table(runs, &a.spec));
    let mut title = vec![Span::raw("Deficits")];
    if let Some(d) = &table {
        title.push(Span::styled(
            format!(" samples/s vs DDP · {}", d.title),
            t.dim,
        ));
    }
    let inner = frame_block(ctx, PaneId::Deficits, title, area, buf);
    if inner.height == 0 {
        return;
    }
    let Some(d) = table.filter(|d| !d.rows.is_empty()) else {
        empty_note(
            ctx,
            inner,
            "no completed hand-rolled run yet: with handrolled as the next experiment (s), a runs DDP and the hand-rolled loop (single+star, threads+star, threads+ring) at k = 1, 2, 4",
            buf,
        );
        return;
    };
    let w = inner.width as usize;
    let mut y = 0u16;
    for row in &d.rows {
        put_line(
            buf,
            inner,
            y,
            &Line::from(Span::styled(format!("k={}", row.k), t.header)),
        );
        y += 1;
        let ddp = row.cells[3].as_ref().map(|c| c.samples_per_s);
        let scale = row
            .cells
            .iter()
            .flatten()
            .map(|c| c.samples_per_s)
            .fold(0.0, f64::max)
            .max(1e-9);
        // "  threads+ring " + bar + " 10.4k  95% of DDP"
        let label_w = 15usize;
        let right_w = 20usize;
        let bar_w = w.saturating_sub(label_w + right_w + 2).max(1);
        for (i, (col, cell)) in Column::ALL.iter().zip(&row.cells).enumerate() {
            let mut spans = vec![Span::styled(
                format!("  {:<w$}", col.label(), w = label_w - 2),
                t.label,
            )];
            match cell {
                Some(c) => {
                    let style = if *col == Column::Ddp {
                        t.throughput
                    } else {
                        t.bar
                    };
                    spans.push(Span::styled(
                        format!("{:<bar_w$}", fmt::hbar(c.samples_per_s / scale, bar_w)),
                        style,
                    ));
                    spans.push(Span::styled(
                        format!(" {:>7}", fmt::rate(c.samples_per_s)),
                        t.value,
                    ));
                    let rel = match (row.of_ddp(i), ddp) {
                        (Some(f), _) if i < 3 => format!("  {:>3.0}% of DDP", f * 100.0),
                        (_, Some(_)) if i == 3 => "  DDP".into(),
                        _ => String::new(),
                    };
                    spans.push(Span::styled(rel, t.dim));
                }
                None => spans.push(Span::styled("no completed run", t.dim)),
            }
            put_line(buf, inner, y, &Line::from(spans));
            y += 1;
        }
    }
}
