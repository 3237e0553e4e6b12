//! The Probe pane: the no_sync probe done right. Synced and no_sync step time (median of block
//! medians and their range), their difference, the k=1 control and the cost-model prediction,
//! each labelled with where it comes from.

use super::fmt;
use super::layout::PaneId;
use super::model::{self, Prediction};
use super::{Ctx, empty_note, frame_block, put_line};
use crate::app::summary::ProbeSide;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// The figure rows' name and value columns.
const NAME_W: usize = 10;
const VAL_W: usize = 9;

pub fn render(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let s = ctx.state;
    let t = ctx.theme;
    let view = model::probe_view(s, ctx.view);
    let title = title(ctx, view.as_ref());
    let inner = frame_block(ctx, PaneId::Probe, title, area, buf);
    if inner.height == 0 {
        return;
    }
    let Some(v) = view else {
        empty_note(
            ctx,
            inner,
            "no probe yet: p launches the no_sync probe (interleaved synced / no_sync blocks, with a k=1 control), or toggles it live on a running run",
            buf,
        );
        return;
    };
    let w = inner.width as usize;
    let run = v.run;
    let mut y = 0u16;
    if is_live(run) {
        // Not comparable with the standalone probe: say what these blocks ran inside.
        put_line(
            buf,
            inner,
            y,
            &Line::from(Span::styled(
                fmt::trunc("live (training DDP, buffers broadcast, timing hook on)", w),
                t.warn,
            )),
        );
        y += 1;
    }
    if !run.status.shows_results() {
        not_done(ctx, run, inner, y, buf);
        return;
    }
    let src = if run.is_simulated() {
        "SIMULATED"
    } else {
        "measured"
    };
    let src_style = if run.is_simulated() {
        t.sim
    } else {
        t.measured
    };
    let Some(sum) = &v.summary else {
        let blocks = run.figures.probe.iter().filter(|b| b.rank == 0).count();
        put_line(
            buf,
            inner,
            y,
            &Line::from(Span::styled(
                fmt::trunc(
                    &format!(
                        "{}: waiting for synced and no_sync blocks ({blocks} so far)",
                        run.status.as_str()
                    ),
                    w,
                ),
                t.dim,
            )),
        );
        y += 1;
        model_line(ctx, &v.prediction, inner, y, buf);
        return;
    };
    let wide = w >= 52;
    let (name_w, val_w) = (NAME_W, VAL_W);
    let side = |name: &str, p: &ProbeSide| side_line(ctx, name, p, wide, (src, src_style));
    let header = if wide {
        format!("{:<name_w$}{:>val_w$}  [block range] blocks", "", "median")
    } else {
        format!("{:<name_w$}{:>val_w$}", "", "median")
    };
    // The column header only when the five figures still fit under it.
    if inner.height >= 6 {
        put_line(buf, inner, y, &Line::from(Span::styled(header, t.label)));
        y += 1;
    }
    put_line(buf, inner, y, &side("synced", &sum.synced));
    y += 1;
    put_line(buf, inner, y, &side("no_sync", &sum.no_sync));
    y += 1;
    let diff_style = if sum.diff_ms < 0.0 { t.warn } else { t.value };
    let mut diff = vec![
        Span::styled(format!("{:<name_w$}", "difference"), t.label),
        Span::styled(format!("{:>val_w$}", fmt::ms(sum.diff_ms)), diff_style),
        Span::raw("  "),
        Span::styled(src.to_string(), src_style),
    ];
    if wide {
        diff.push(Span::styled(" ≈ exposed comm + reducer", t.dim));
    }
    put_line(buf, inner, y, &Line::from(diff));
    y += 1;
    // k=1 control.
    let ctrl = control_line(ctx, &v, wide);
    put_line(buf, inner, y, &ctrl);
    y += 1;
    model_line(ctx, &v.prediction, inner, y, buf);
    y += 1;
    // (difference − control) / predicted exposed comm: 1.0 when the difference is exactly the
    // reducer plus what the model predicts is exposed.
    if y < inner.height {
        ratio_line(ctx, &v, sum.diff_ms, wide, inner, y, buf);
    }
}

/// The pane's title: backend and device, the run, SIMULATED, LIVE or in-run.
fn title(ctx: &Ctx, view: Option<&model::ProbeView>) -> Vec<Span<'static>> {
    let t = ctx.theme;
    let mut title = vec![Span::raw("Probe")];
    // The backend and device first, where a narrow pane does not cut them.
    if let Some(bd) = view.and_then(|v| fmt::backend_device(&v.run.spec)) {
        title.push(Span::styled(format!(" · {bd} ·"), t.dim));
    }
    title.push(Span::styled(" no_sync", t.dim));
    if let Some(v) = view {
        title.push(Span::styled(
            format!(" · {} k={}", fmt::tiny_id(&v.run.id), v.run.spec.k),
            t.dim,
        ));
        if v.run.is_simulated() {
            title.push(Span::raw(" "));
            title.push(Span::styled(" SIMULATED ", t.sim));
        }
        if probing_now(v.run) {
            title.push(Span::raw(" "));
            title.push(Span::styled(" LIVE ", t.warn));
        } else if is_live(v.run) {
            // Blocks from inside a training run, but the probe is off (or the run is over).
            title.push(Span::styled(" · in-run, off", t.dim));
        }
    }
    title
}

/// A probe that did not complete: its status and reason, and no figures.
fn not_done(ctx: &Ctx, run: &crate::run::RunView, inner: Rect, y: u16, buf: &mut Buffer) {
    let t = ctx.theme;
    let w = inner.width as usize;
    put_line(
        buf,
        inner,
        y,
        &Line::from(vec![
            Span::styled(
                format!(" {} ", run.status.as_str().to_uppercase()),
                t.status(run.status),
            ),
            Span::styled(
                fmt::trunc(
                    &format!(" {}", run.reason.as_deref().unwrap_or("no reason recorded")),
                    w.saturating_sub(10),
                ),
                t.text,
            ),
        ]),
    );
    put_line(
        buf,
        inner,
        y + 1,
        &Line::from(Span::styled(
            "no figures from a run that did not complete",
            t.dim,
        )),
    );
}

/// A synced or no_sync row: median, with room its block range and count, and the source.
fn side_line(
    ctx: &Ctx,
    name: &str,
    p: &ProbeSide,
    wide: bool,
    (src, src_style): (&str, Style),
) -> Line<'static> {
    let t = ctx.theme;
    let (name_w, val_w) = (NAME_W, VAL_W);
    let mut spans = vec![
        Span::styled(format!("{name:<name_w$}"), t.label),
        Span::styled(format!("{:>val_w$}", fmt::ms(p.median_ms)), t.value),
    ];
    if wide {
        spans.push(Span::styled(
            format!(
                "  [{}–{}] {:>2} blk  ",
                fmt::ms_num(p.min_ms),
                fmt::ms_num(p.max_ms),
                p.blocks
            ),
            t.dim,
        ));
    } else {
        spans.push(Span::raw("  "));
    }
    spans.push(Span::styled(src.to_string(), src_style));
    Line::from(spans)
}

/// The k=1 control's difference (or why there is none yet).
fn control_line(ctx: &Ctx, v: &model::ProbeView, wide: bool) -> Line<'static> {
    let t = ctx.theme;
    let run = v.run;
    let (name_w, val_w) = (NAME_W, VAL_W);
    match &v.control {
        None => Line::from(vec![
            Span::styled(format!("{:<name_w$}", "k=1 ctrl"), t.label),
            Span::styled(format!("{:>val_w$}", "none"), t.dim),
            Span::styled("  k=1 control", t.control),
        ]),
        Some((c, _)) if !c.status.shows_results() => Line::from(vec![
            Span::styled(format!("{:<name_w$}", "k=1 ctrl"), t.label),
            Span::styled(format!("{:>val_w$}", c.status.as_str()), t.status(c.status)),
            Span::styled("  k=1 control", t.control),
        ]),
        Some((_, None)) => Line::from(vec![
            Span::styled(format!("{:<name_w$}", "k=1 ctrl"), t.label),
            Span::styled(format!("{:>val_w$}", "pending"), t.dim),
            Span::styled("  k=1 control", t.control),
        ]),
        Some((c, Some(cs))) => Line::from(vec![
            Span::styled(format!("{:<name_w$}", "k=1 ctrl"), t.label),
            Span::styled(format!("{:>val_w$}", fmt::ms(cs.diff_ms)), t.value),
            Span::styled("  k=1 control", t.control),
            Span::styled(
                match (wide, ran_before(c, run)) {
                    (true, true) => " ran before, not interleaved (reducer only)",
                    (true, false) => " (Δ without comm: reducer only)",
                    (false, true) => " ran before",
                    (false, false) => "",
                },
                t.dim,
            ),
        ]),
    }
}

/// (difference − control) / predicted exposed comm: 1.0 when the difference is exactly the
/// reducer plus what the model predicts is exposed.
fn ratio_line(
    ctx: &Ctx,
    v: &model::ProbeView,
    diff_ms: f64,
    wide: bool,
    inner: Rect,
    y: u16,
    buf: &mut Buffer,
) {
    let t = ctx.theme;
    let (name_w, val_w) = (NAME_W, VAL_W);
    if let Prediction::Ms { ms, .. } = &v.prediction
        && *ms > 0.0
    {
        let ctrl = v.control.as_ref().and_then(|(_, cs)| cs.as_ref());
        let (txt, note) = match ctrl {
            Some(cs) => (
                format!("{:.2}×", (diff_ms - cs.diff_ms) / ms),
                " (difference − control) / model",
            ),
            None => ("n/a".to_string(), " needs the k=1 control"),
        };
        put_line(
            buf,
            inner,
            y,
            &Line::from(vec![
                Span::styled(format!("{:<name_w$}", "Δ−ctrl/mod"), t.label),
                Span::styled(format!("{txt:>val_w$}"), t.value),
                Span::styled(if wide { note } else { "" }, t.dim),
            ]),
        );
    }
}

/// Probe blocks from the live probe inside a training run, not the standalone probe.
fn is_live(run: &crate::run::RunView) -> bool {
    run.figures.probe.iter().any(|b| b.live == Some(true))
}

/// The live probe is on now: the run goes on, and rank 0 sent a live block within the last two
/// blocks' worth of steps (once `p` turns it off, training steps move past it).
fn probing_now(run: &crate::run::RunView) -> bool {
    if run.status.is_final() {
        return false;
    }
    let Some(last) = run
        .figures
        .probe
        .iter()
        .rev()
        .find(|b| b.rank == 0 && b.live == Some(true))
    else {
        return false;
    };
    let step = run.ranks.get(&0).map_or(0, |r| r.step);
    step <= last.step + 2 * u64::from(last.steps.max(1))
}

/// The control finished before the probe started: it was not interleaved with its blocks.
fn ran_before(c: &crate::run::RunView, run: &crate::run::RunView) -> bool {
    c.clock
        .ended_unix
        .is_some_and(|e| e <= run.clock.started_unix)
}

fn model_line(ctx: &Ctx, p: &Prediction, inner: Rect, y: u16, buf: &mut Buffer) {
    let t = ctx.theme;
    let w = inner.width as usize;
    let line = match p {
        Prediction::Ms { ms, source } => Line::from(vec![
            Span::styled(format!("{:<10}", "predicted"), t.label),
            Span::styled(format!("{:>9}", fmt::ms(*ms)), t.value),
            Span::styled("  model", t.model),
            Span::styled(
                fmt::trunc(&format!(" exposed comm; {source}"), w.saturating_sub(28)),
                t.dim,
            ),
        ]),
        Prediction::Na(why) => Line::from(vec![
            Span::styled(format!("{:<10}", "predicted"), t.label),
            Span::styled(fmt::trunc(&format!(" {why}"), w.saturating_sub(18)), t.dim),
            Span::styled("  model", t.model),
        ]),
    };
    put_line(buf, inner, y, &line);
}
