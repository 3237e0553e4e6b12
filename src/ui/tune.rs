//! The tuning's live table (`T`): every candidate's setting, predicted samples/s, measured
//! median and spread, runs done of planned, and state (predicting / predicted / measuring /
//! done / skipped / failed), then the verdict and how to keep it. Drawn over the panes like the
//! run details, from `State.tune` (`app::tune::Board`) alone.

use super::{Ctx, fmt};
use crate::app::Action;
use crate::app::tune::{Board, Phase, Row, RowState};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Clear, Paragraph, Widget, Wrap};

/// Width of the figures after the setting's column.
const FIGURES_W: usize = 52;

fn key(ctx: &Ctx, a: Action, fallback: &str) -> String {
    ctx.keys
        .first_key(a)
        .map_or(fallback.to_string(), |k| k.to_string())
}

fn phase_text(b: &Board) -> String {
    match &b.phase {
        Phase::Predicting { done, total } => format!("predicting: {done}/{total} runs"),
        Phase::Measuring { done, total } => {
            format!("measuring: {done}/{total} runs, interleaved")
        }
        Phase::Done => "done".into(),
        Phase::Cancelled => "cancelled".into(),
        Phase::Failed(_) => "failed".into(),
    }
}

fn state_style(ctx: &Ctx, s: RowState) -> Style {
    let t = ctx.theme;
    match s {
        RowState::Predicting | RowState::Predicted => t.dim,
        RowState::Measuring => t.running,
        RowState::Done => t.completed,
        RowState::Skipped => t.dim,
        RowState::Failed => t.failed,
    }
}

/// One candidate's line: setting, predicted, median, spread, vs default, runs, state.
fn row_line(ctx: &Ctx, b: &Board, r: &Row, name_w: usize, recommended: bool) -> Line<'static> {
    let t = ctx.theme;
    let pred = if !r.cand.modelled {
        "not modelled".to_string()
    } else {
        match (&r.predicted, r.state) {
            (_, RowState::Predicting) => "…".into(),
            (Ok(p), _) => fmt::rate(p.samples_per_s),
            (Err(_), _) => fmt::NA.into(),
        }
    };
    let m = &r.measured;
    let median = m.median().map_or("—".into(), fmt::rate);
    let spread = m
        .spread_pct()
        .filter(|_| m.repeats() > 1)
        .map_or(String::new(), |s| format!("±{s:.1}%"));
    let default_median = b.rows.first().and_then(|d| d.measured.median());
    let vs = match (m.median(), default_median) {
        (Some(x), Some(d)) if !r.cand.is_default() => format!("{:+.1}%", (x / d - 1.0) * 100.0),
        _ => String::new(),
    };
    let runs = if r.planned > 0 {
        format!("{}/{}", r.runs_done(), r.planned)
    } else {
        String::new()
    };
    let name_style = if recommended { t.good } else { t.text };
    let mark = if recommended { "★ " } else { "  " };
    Line::from(vec![
        Span::styled(mark.to_string(), t.good),
        Span::styled(
            format!("{:<name_w$}", fmt::trunc(&r.cand.name, name_w)),
            name_style,
        ),
        Span::styled(format!("{pred:>12} "), t.model),
        Span::styled(format!("{median:>9} "), t.measured),
        Span::styled(format!("{spread:<7}"), t.dim),
        Span::styled(format!("{vs:>7} "), t.value),
        Span::styled(format!("{runs:>5} "), t.text),
        Span::styled(r.state.as_str().to_string(), state_style(ctx, r.state)),
    ])
}

/// The table's lines (pure; tested without a screen).
pub fn lines(ctx: &Ctx, b: &Board, width: u16) -> Vec<Line<'static>> {
    let t = ctx.theme;
    let name_w = (width as usize).saturating_sub(FIGURES_W + 2).clamp(12, 44);
    let mut out = vec![Line::from(vec![
        Span::styled(format!("  {:<name_w$}", "setting"), t.header),
        Span::styled(
            format!(
                "{:>12} {:>9} {:<7}{:>7} {:>5} {}",
                "predicted", "measured", "spread", "vs def", "runs", "state"
            ),
            t.header,
        ),
    ])];
    let recommended = b.recommended().map(|(r, _)| r.cand.name.clone());
    if b.rows.is_empty() {
        let what = match &b.phase {
            Phase::Predicting { .. } => {
                "the candidates come from the k=1 run of the default (its gradient buckets)"
            }
            _ => "no candidate: the k=1 run of the default did not complete",
        };
        out.push(Line::from(Span::styled(format!("  {what}"), t.dim)));
    }
    for r in &b.rows {
        let rec = recommended.as_deref() == Some(r.cand.name.as_str());
        out.push(row_line(ctx, b, r, name_w, rec));
    }
    out.push(Line::from(Span::styled(
        format!(
            "  samples/s, all {} ranks{} · predicted: k=1 run{} + busbw · spread: ± half the range",
            b.k,
            if b.simulated { " (SIMULATED)" } else { "" },
            b.base_run
                .as_deref()
                .map_or(String::new(), |id| format!(" {}", fmt::short_id(id)))
        ),
        t.dim,
    )));
    if let Some((id, what)) = &b.running {
        out.push(Line::from(vec![
            Span::styled("  now      ".to_string(), t.label),
            Span::styled(format!("{what} ({})", fmt::short_id(id)), t.running),
        ]));
    }
    for n in &b.notes {
        out.push(Line::from(vec![
            Span::styled("  note     ".to_string(), t.label),
            Span::styled(n.clone(), t.warn),
        ]));
    }
    if let Phase::Failed(why) = &b.phase {
        out.push(Line::from(vec![
            Span::styled("  failed   ".to_string(), t.label),
            Span::styled(why.clone(), t.bad),
        ]));
    }
    if let Some(v) = b.verdict_line() {
        let style = if b.recommended().is_some() {
            t.good
        } else {
            t.text
        };
        let head = if b.phase == Phase::Cancelled {
            "  so far   "
        } else {
            "  verdict  "
        };
        out.push(Line::from(vec![
            Span::styled(head.to_string(), t.label),
            Span::styled(v, style),
        ]));
    }
    if let Some(s) = &b.saved {
        out.push(Line::from(vec![
            Span::styled("  kept     ".to_string(), t.label),
            Span::styled(
                format!(
                    "preset {} in {} ({} cycles presets)",
                    s.name,
                    s.path,
                    key(ctx, Action::NextPreset, "e")
                ),
                t.good,
            ),
        ]));
    } else if let Some(e) = &b.save_error {
        out.push(Line::from(vec![
            Span::styled("  not kept ".to_string(), t.label),
            Span::styled(e.clone(), t.bad),
        ]));
    } else if b.recommended().is_some() && b.phase == Phase::Done {
        out.push(Line::from(vec![
            Span::styled("  keep     ".to_string(), t.label),
            Span::styled(
                format!(
                    "{} saves it as a preset in the config",
                    key(ctx, Action::SaveTuned, "S")
                ),
                t.text,
            ),
        ]));
    }
    out
}

/// Draw the table over `area`.
pub fn render(ctx: &Ctx, b: &Board, area: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    Clear.render(area, buf);
    buf.set_style(area, t.base);
    let esc = key(ctx, Action::Close, "Esc");
    let hide = key(ctx, Action::Tune, "T");
    let bottom = if b.phase.finished() {
        format!(" {esc} closes · {hide} tunes again ")
    } else {
        format!(
            " {esc} or {} cancels · {hide} hides (it goes on) ",
            key(ctx, Action::Stop, "x")
        )
    };
    let mut title = vec![
        Span::styled(" Tune ", t.title_focus),
        Span::styled(format!("{} ", b.title), t.title_focus),
    ];
    if b.simulated {
        title.push(Span::styled(" SIMULATED ", t.sim));
    }
    title.push(Span::styled(format!(" {} ", phase_text(b)), t.dim));
    let block = Block::default()
        .borders(Borders::ALL)
        .border_type(BorderType::Double)
        .border_style(t.border_focus)
        .title(Line::from(title))
        .title_bottom(Line::from(Span::styled(bottom, t.dim)));
    let inner = block.inner(area);
    block.render(area, buf);
    Paragraph::new(lines(ctx, b, inner.width))
        .wrap(Wrap { trim: false })
        .render(inner, buf);
}
