//! The Scaling pane: throughput and efficiency against k for the selected run's curve (bars, with
//! the ideal-scaling mark), weak and strong side by side, and a live throughput sparkline for a
//! run of the curve in progress.

use super::fmt;
use super::layout::PaneId;
use super::model::{self, Curve};
use super::{Ctx, empty_note, frame_block, put_line};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};

pub fn render(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let curves = model::curves(ctx.state, ctx.view);
    let mut title = vec![Span::raw("Scaling")];
    // The curves shown are of one backend (`CurveKey::setting`): the title names it and its
    // device first, where a narrow pane does not cut it.
    let mut devices: Vec<String> = Vec::new();
    for d in curves.iter().filter_map(|c| {
        let mut spec = crate::run::RunSpec::new(c.key.experiment, 1, c.key.backend);
        spec.profile = c.key.profile.clone();
        fmt::backend_device(&spec)
    }) {
        if !devices.contains(&d) {
            devices.push(d);
        }
    }
    if !devices.is_empty() {
        title.push(Span::styled(format!(" · {} ·", devices.join(" + ")), t.dim));
    }
    title.push(Span::styled(" samples/s and efficiency vs k", t.dim));
    let inner = frame_block(ctx, PaneId::Scaling, title, area, buf);
    if inner.height == 0 {
        return;
    }
    if curves.is_empty() {
        empty_note(
            ctx,
            inner,
            "no weak/strong runs yet: press 1, 2, 4 (or a to sweep) to draw the scaling curve; s switches weak/strong",
            buf,
        );
        return;
    }
    if curves.len() == 2 && inner.width >= 70 {
        let cols = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
            .spacing(1)
            .split(inner);
        draw_curve(ctx, &curves[0], cols[0], buf);
        draw_curve(ctx, &curves[1], cols[1], buf);
    } else {
        let mut y = 0;
        for c in &curves {
            let h = curve_height(c).min(inner.height.saturating_sub(y));
            if h == 0 {
                break;
            }
            draw_curve(ctx, c, Rect::new(inner.x, inner.y + y, inner.width, h), buf);
            y += h;
        }
    }
}

fn curve_height(c: &Curve) -> u16 {
    let predictions = c.points.iter().filter(|p| p.prediction.is_some()).count() as u16;
    let caveats = c.points.iter().filter(|p| p.caveat.is_some()).count() as u16;
    2 + c.points.len().max(1) as u16 + predictions + caveats + u16::from(c.live.is_some())
}

/// The line under a k>1 point: the cost model's samples/s with its error against the measured
/// point, predicted/measured exposed comm, and where busbw came from.
fn prediction_line(
    ctx: &Ctx,
    p: &Result<crate::app::predict::RunPrediction, String>,
    w: usize,
) -> Line<'static> {
    let t = ctx.theme;
    let pad = "    ";
    match p {
        Ok(m) => {
            let err_style = if m.sps_error_pct.abs() <= 5.0 {
                t.good
            } else {
                t.warn
            };
            let bw = match &m.busbw.run_id {
                Some(id) => format!("bw {}", fmt::tiny_id(id)),
                None => "bw profile".to_string(),
            };
            let rest = format!(
                " · exposed {}/{} ms · {bw} · k=1 {}",
                fmt::ms_num(m.predicted_exposed_ms),
                m.measured_exposed_ms.map_or("n/a".into(), fmt::ms_num),
                fmt::tiny_id(&m.baseline)
            );
            Line::from(vec![
                Span::styled(pad, t.dim),
                Span::styled("model ", t.model),
                Span::styled(fmt::rate(m.predicted_sps), t.value),
                Span::styled(format!(" {:+.1}%", m.sps_error_pct), err_style),
                Span::styled(fmt::trunc(&rest, w.saturating_sub(22)), t.dim),
            ])
        }
        Err(why) => Line::from(vec![
            Span::styled(pad, t.dim),
            Span::styled("model ", t.model),
            Span::styled(fmt::trunc(why, w.saturating_sub(10)), t.dim),
        ]),
    }
}

fn draw_curve(ctx: &Ctx, c: &Curve, r: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let w = r.width as usize;
    let mut y = 0u16;
    put_line(buf, r, y, &curve_title(ctx, c));
    y += 1;
    if c.points.is_empty() {
        put_line(
            buf,
            r,
            y,
            &Line::from(Span::styled(
                fmt::trunc("no completed run on this curve yet", w),
                t.dim,
            )),
        );
        y += 1;
    } else {
        let base = c.points.iter().find(|p| p.k == 1).map(|p| p.sps);
        let scale = c
            .points
            .iter()
            .map(|p| p.sps.max(base.map_or(0.0, |b| b * p.k as f64)))
            .fold(0.0, f64::max)
            .max(1.0);
        // "k=4 " + bar + " 11.8k ±1.0% " + "eff 95% " + effbar + " vs 3f2a" (the k=1 run divided by)
        let val_w = 13usize;
        let eff_w = if w >= 44 { 9 } else { 0 };
        let base_w = if w >= 56 { 8 } else { 0 };
        let effbar_w = if w >= 60 { 10 } else { 0 };
        let bar_w = w
            .saturating_sub(4 + 1 + val_w + eff_w + effbar_w + base_w)
            .max(1);
        put_line(
            buf,
            r,
            y,
            &Line::from(Span::styled(
                fmt::trunc(
                    &format!(
                        "{:<4}{:<bar_w$} {:<val_w$}{}",
                        "k",
                        "samples/s (│ = ideal)",
                        "",
                        if eff_w > 0 { "eff" } else { "" }
                    ),
                    w,
                ),
                t.label,
            )),
        );
        y += 1;
        for p in &c.points {
            if y >= r.height {
                break;
            }
            let frac = p.sps / scale;
            let bar = fmt::hbar(frac, bar_w);
            let bar_len = bar.chars().count();
            let mut spans = vec![
                Span::styled(format!("{:<4}", format!("k={}", p.k)), t.value),
                Span::styled(bar, t.bar),
            ];
            let ideal_pos =
                base.map(|b| ((b * p.k as f64 / scale) * bar_w as f64).round() as usize);
            match ideal_pos {
                Some(pos) if p.k > 1 && pos > bar_len && pos <= bar_w => {
                    spans.push(Span::raw(" ".repeat(pos - 1 - bar_len.min(pos - 1))));
                    spans.push(Span::styled("│", t.bar_ideal));
                    spans.push(Span::raw(" ".repeat(bar_w - pos)));
                }
                _ => spans.push(Span::raw(" ".repeat(bar_w - bar_len))),
            }
            spans.push(Span::raw(" "));
            spans.push(Span::styled(
                format!(
                    "{:<val_w$}",
                    format!("{} ±{:.1}%", fmt::rate(p.sps), p.spread_pct)
                ),
                t.value,
            ));
            if eff_w > 0 {
                push_efficiency(ctx, &mut spans, p, eff_w, effbar_w, base_w);
            }
            put_line(buf, r, y, &Line::from(spans));
            y += 1;
            if let Some(why) = &p.caveat
                && y < r.height
            {
                put_line(
                    buf,
                    r,
                    y,
                    &Line::from(Span::styled(fmt::trunc(&format!("  ⚠ {why}"), w), t.warn)),
                );
                y += 1;
            }
            if let Some(pred) = &p.prediction
                && y < r.height
            {
                put_line(buf, r, y, &prediction_line(ctx, pred, w));
                y += 1;
            }
        }
    }
    if let Some((id, k, tp)) = &c.live
        && y < r.height
    {
        put_line(buf, r, y, &live_line(ctx, id, *k, tp, w));
    }
}

/// The curve's title: its name and switches, its batch and key, SIMULATED when it is.
fn curve_title<'a>(ctx: &Ctx, c: &'a Curve) -> Line<'a> {
    let t = ctx.theme;
    let mut title = vec![
        Span::styled(
            // A hand-rolled curve's switches come first: they tell its curves apart.
            c.key.experiment.kind().curve_name(&c.key.family),
            t.value,
        ),
        Span::styled(
            // An attached script's batch is its own: the title names the command line.
            if c.key.experiment.kind().runs_user_script() {
                format!(" · {}", c.key.title())
            } else {
                format!(" · {} · {}", c.key.batch, c.key.title())
            },
            t.dim,
        ),
    ];
    if c.simulated {
        title.push(Span::raw(" "));
        title.push(Span::styled(" SIMULATED ", t.sim));
    }
    Line::from(title)
}

/// A point's efficiency (coloured by how near ideal, marked when a caveat holds), its bar
/// and the k=1 run it divides by, as far as the widths allow.
fn push_efficiency(
    ctx: &Ctx,
    spans: &mut Vec<Span<'static>>,
    p: &model::CurvePoint,
    eff_w: usize,
    effbar_w: usize,
    base_w: usize,
) {
    let t = ctx.theme;
    let (txt, style) = match p.efficiency {
        // A figure with a caveat is marked where it is read; the next line says why.
        Some(e) if p.caveat.is_some() => (format!("{:>4.0}%⚠ ", e * 100.0), t.bad),
        Some(e) if p.k == 1 => (format!("{:>4.0}% ", e * 100.0), t.dim),
        // Above 100% by less than the spread: ideal, not a measured gain.
        Some(_) if p.about_ideal => ("≈100% ".to_string(), t.good),
        Some(e) => (
            format!("{:>4.0}% ", e * 100.0),
            if e >= 0.9 {
                t.good
            } else if e >= 0.7 {
                t.warn
            } else {
                t.bad
            },
        ),
        None => ("  n/a ".to_string(), t.dim),
    };
    spans.push(Span::styled(format!("{txt:<eff_w$}"), style));
    if effbar_w > 0
        && let Some(e) = p.efficiency
    {
        let bar = fmt::hbar(e.min(1.0), effbar_w);
        let pad = effbar_w - bar.chars().count();
        spans.push(Span::styled(bar, t.eff_bar));
        spans.push(Span::raw(" ".repeat(pad)));
    }
    if base_w > 0
        && p.k > 1
        && let Some(b) = &p.baseline
    {
        spans.push(Span::styled(format!(" vs {}", fmt::tiny_id(b)), t.dim));
    }
}

/// A run of the curve in progress: its id, k and throughput sparkline.
fn live_line(ctx: &Ctx, id: &str, k: u32, tp: &[f64], w: usize) -> Line<'static> {
    let t = ctx.theme;
    let label = format!("live {} k={k} ", fmt::tiny_id(id));
    let last = tp.last().copied();
    let tail = format!(" {}", fmt::opt(last, |x| format!("{}/s", fmt::rate(x))));
    let sw = w.saturating_sub(label.chars().count() + tail.chars().count());
    let vals: Vec<u64> = tp.iter().map(|x| x.max(0.0).round() as u64).collect();
    let max = vals.iter().copied().max().unwrap_or(1);
    let start = vals.len().saturating_sub(sw * 2);
    Line::from(vec![
        Span::styled(label, t.running),
        Span::styled(fmt::spark(&vals[start..], sw, max), t.throughput),
        Span::styled(tail, t.value),
    ])
}
