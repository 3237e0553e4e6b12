//! The Timeline pane for fsdp runs: one step's explicit collectives, one row per FSDP unit
//! (residual block or root), under a row of the step's phases (forward, backward, optimizer).
//! Forward and backward all-gathers and the reduce-scatter of each unit are drawn where they
//! ran, in ms from the step's start; DDP runs of the experiment show their bucket all-reduces.

use super::fmt;
use super::{Ctx, put_line};
use crate::protocol::{Backend, Collective, Comm, CommOp, Pass, Step};
use crate::run::RunView;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

pub const AG_FWD: char = '▓';
pub const AG_BWD: char = '▒';
pub const REDUCE: char = '█';
pub const PHASE: char = '━';

/// Units in the order their first collective ran (forward order for FSDP).
pub fn unit_order(c: &Comm) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for op in &c.ops {
        if !names.contains(&op.name.as_str()) {
            names.push(&op.name);
        }
    }
    names
}

fn glyph(op: &CommOp) -> char {
    match (op.op, op.pass) {
        (Collective::AllGather, Pass::Fwd) => AG_FWD,
        (Collective::AllGather, _) => AG_BWD,
        _ => REDUCE,
    }
}

/// Short row label: `resnet_block3.1` → `block3.1`.
fn short(name: &str) -> &str {
    name.strip_prefix("resnet_").unwrap_or(name)
}

/// Draw rank `rank`'s latest step of collectives into `r`.
pub fn render_step(ctx: &Ctx, run: &RunView, rank: u32, r: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let w = r.width as usize;
    let rv = run.ranks.get(&rank);
    let Some(c) = rv.and_then(|x| x.comm.as_ref()) else {
        let msg = no_comm_message(run, rank);
        put_line(
            buf,
            r,
            0,
            &Line::from(Span::styled(fmt::trunc(&msg, w), t.dim)),
        );
        return;
    };
    let step: Option<&Step> = rv
        .and_then(|x| x.last_step.as_ref())
        .filter(|s| s.step == c.step);
    put_line(buf, r, 0, &step_info(ctx, c, step));
    let mut y = 1u16;
    if y >= r.height {
        return;
    }

    let t_end = c
        .ops
        .iter()
        .map(CommOp::end_ms)
        .fold(step.map_or(0.0, |s| s.step_ms), f64::max)
        .max(1e-6);
    let label_w = 10usize;
    let right_w = if w >= 60 { 10 } else { 0 };
    let cw = w.saturating_sub(label_w + right_w).max(4);
    let x_of = |ms: f64| ((ms / t_end).clamp(0.0, 1.0) * cw as f64).round() as usize;
    let chart_x = r.x + label_w as u16;
    let paint = |buf: &mut Buffer, y: u16, a: f64, e: f64, ch: char, st: Style| {
        let (x0, x1) = (x_of(a), x_of(e).max(x_of(a) + 1).min(cw));
        for x in x0..x1 {
            if let Some(cell) = buf.cell_mut((chart_x + x as u16, r.y + y)) {
                cell.set_char(ch).set_style(st);
            }
        }
    };

    // The step's phases: forward, backward, optimizer (from the step message's marks).
    if let Some(s) = step {
        put_line(buf, r, y, &Line::from(Span::styled("phases", t.label)));
        let bwd_end = (s.step_ms - s.opt_ms).max(0.0);
        let bwd0 = (bwd_end - s.bwd_ms).max(0.0);
        let fwd0 = (bwd0 - s.fwd_ms).max(0.0);
        paint(buf, y, fwd0, bwd0, PHASE, t.compute);
        paint(buf, y, bwd0, bwd_end, PHASE, t.axis);
        paint(buf, y, bwd_end, s.step_ms, PHASE, t.optimizer);
        y += 1;
    }

    let units = unit_order(c);
    let legend = r.height.saturating_sub(y) as usize > units.len() + 1;
    let rows = (r.height.saturating_sub(y) as usize).saturating_sub(usize::from(legend));
    let shown = if units.len() > rows {
        rows.saturating_sub(1)
    } else {
        units.len()
    };
    for name in units.iter().take(shown) {
        put_line(
            buf,
            r,
            y,
            &Line::from(Span::styled(fmt::trunc(short(name), label_w - 1), t.label)),
        );
        let mut bytes = 0u64;
        for op in c.ops.iter().filter(|o| o.name == *name) {
            let st = match op.op {
                Collective::AllGather => t.comm,
                _ => t.exposed,
            };
            let st = if op.pass == Pass::Bwd && op.op == Collective::AllGather {
                t.comm_alt
            } else {
                st
            };
            paint(buf, y, op.start_ms, op.end_ms(), glyph(op), st);
            bytes = bytes.max(op.bytes);
        }
        if right_w > 0 {
            let txt = format!("{:>9}", crate::util::fmt_bytes(bytes));
            buf.set_string(
                r.x + (label_w + cw + 1) as u16,
                r.y + y,
                fmt::trunc(&txt, right_w - 1),
                t.dim,
            );
        }
        y += 1;
    }
    if shown < units.len() && y < r.height {
        put_line(
            buf,
            r,
            y,
            &Line::from(Span::styled(
                format!("… {} more units", units.len() - shown),
                t.dim,
            )),
        );
        y += 1;
    }
    if legend && y < r.height {
        put_line(buf, r, y, &legend_line(ctx, run, t_end));
    }
}

/// Why there is no step of collectives to draw for `rank` (yet).
fn no_comm_message(run: &RunView, rank: u32) -> String {
    if run.spec.k == 1 {
        "k=1: FSDP shards nothing and sends nothing (no collectives to draw)".to_string()
    } else if run.status.is_final() {
        format!("rank {rank} reported no collectives")
    } else {
        format!("rank {rank}: waiting for the first step's collectives (] picks another rank)")
    }
}

/// The step's headline: its number, how many collectives, bytes and time per kind of
/// collective, and the step's length.
fn step_info(ctx: &Ctx, c: &Comm, step: Option<&Step>) -> Line<'static> {
    let t = ctx.theme;
    let sum = |op: Collective| -> (u64, f64) {
        c.ops
            .iter()
            .filter(|o| o.op == op)
            .fold((0, 0.0), |(b, ms), o| (b + o.bytes, ms + o.dur_ms))
    };
    let mut info = vec![
        Span::styled(format!("step {}", c.step), t.value),
        Span::styled(format!(" · {} collectives", c.ops.len()), t.dim),
    ];
    for (op, name) in [
        (Collective::AllGather, "all-gather"),
        (Collective::ReduceScatter, "reduce-scatter"),
        (Collective::AllReduce, "all-reduce"),
    ] {
        let (b, ms) = sum(op);
        if b > 0 {
            info.push(Span::styled(format!(" · {name} "), t.label));
            info.push(Span::styled(
                format!("{} {}", crate::util::fmt_bytes(b), fmt::ms(ms)),
                t.value,
            ));
        }
    }
    if let Some(s) = step {
        info.push(Span::styled(format!(" of {}", fmt::ms(s.step_ms)), t.dim));
    }
    Line::from(info)
}

/// What each glyph is (gloo runs its reduce-scatter as a full all-reduce) and the time axis.
fn legend_line(ctx: &Ctx, run: &RunView, t_end: f64) -> Line<'static> {
    let t = ctx.theme;
    let gloo = run.spec.backend != Backend::Nccl;
    let mut spans = vec![
        Span::styled(AG_FWD.to_string(), t.comm),
        Span::styled(" all-gather fwd  ", t.dim),
        Span::styled(AG_BWD.to_string(), t.comm_alt),
        Span::styled(" all-gather bwd  ", t.dim),
        Span::styled(REDUCE.to_string(), t.exposed),
        Span::styled(
            if gloo {
                " reduce-scatter/all-reduce (gloo: RS runs as a full all-reduce)"
            } else {
                " reduce-scatter/all-reduce"
            },
            t.dim,
        ),
    ];
    spans.push(Span::styled(format!("  0–{}", fmt::ms(t_end)), t.axis));
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Timing;

    fn op(op: Collective, name: &str, pass: Pass, start: f64) -> CommOp {
        CommOp {
            op,
            name: name.into(),
            pass,
            bytes: 100,
            start_ms: start,
            dur_ms: 1.0,
        }
    }

    #[test]
    fn units_are_ordered_by_their_first_collective() {
        let c = Comm {
            rank: 0,
            step: 5,
            t: 1.0,
            timing: Timing::Host,
            ops: vec![
                op(Collective::AllGather, "root", Pass::Fwd, 0.0),
                op(Collective::AllGather, "resnet_block1.0", Pass::Fwd, 1.0),
                op(Collective::AllGather, "resnet_block1.0", Pass::Bwd, 5.0),
                op(Collective::ReduceScatter, "resnet_block1.0", Pass::Bwd, 7.0),
                op(Collective::ReduceScatter, "root", Pass::Bwd, 9.0),
            ],
        };
        assert_eq!(unit_order(&c), ["root", "resnet_block1.0"]);
        assert_eq!(short("resnet_block1.0"), "block1.0");
        assert_eq!(glyph(&c.ops[2]), AG_BWD);
        assert_eq!(glyph(&c.ops[3]), REDUCE);
    }
}
