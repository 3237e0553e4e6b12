//! The Log pane: the focused run's output tail and ddptop's own messages, newest at the bottom.

use super::fmt;
use super::layout::PaneId;
use super::{Ctx, frame_block, put_line};
use crate::app::Level;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// Style for a worker output line: NCCL warnings, tracebacks and CUDA errors stand out.
fn line_style(ctx: &Ctx, l: &str) -> Style {
    let t = ctx.theme;
    if l.contains("Traceback")
        || l.contains("CUDA error")
        || l.contains("Error")
        || l.contains("ERROR")
    {
        t.msg_error
    } else if l.contains("NCCL WARN") || l.contains("WARN") || l.contains("Warning") {
        t.msg_warn
    } else {
        t.log
    }
}

pub fn render(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let s = ctx.state;
    let t = ctx.theme;
    let run = ctx.view.subject(s);
    let mut title = vec![Span::raw("Log")];
    if let Some(r) = run {
        title.push(Span::styled(
            format!(" output of {}", fmt::short_id(&r.id)),
            t.dim,
        ));
    }
    title.push(Span::styled(" · ddptop messages", t.dim));
    let inner = frame_block(ctx, PaneId::Log, title, area, buf);
    if inner.height == 0 {
        return;
    }
    let (out_r, msg_r) = if inner.width >= 100 {
        let c = Layout::horizontal([Constraint::Percentage(55), Constraint::Min(0)])
            .spacing(1)
            .split(inner);
        (c[0], c[1])
    } else if inner.height >= 4 {
        let c = Layout::vertical([Constraint::Percentage(50), Constraint::Min(0)]).split(inner);
        (c[0], c[1])
    } else {
        // Too short for both: messages only when there is no run.
        if run.is_some() {
            (inner, Rect::default())
        } else {
            (Rect::default(), inner)
        }
    };
    if out_r.height > 0 {
        match run {
            Some(r) if !r.log_tail.is_empty() => {
                let n = out_r.height as usize;
                let skip = r.log_tail.len().saturating_sub(n);
                for (i, l) in r.log_tail.iter().skip(skip).enumerate() {
                    put_line(
                        buf,
                        out_r,
                        i as u16,
                        &Line::from(Span::styled(
                            fmt::trunc(l, out_r.width as usize),
                            line_style(ctx, l),
                        )),
                    );
                }
            }
            Some(_) => put_line(
                buf,
                out_r,
                0,
                &Line::from(Span::styled("(no output from this run)", t.dim)),
            ),
            None => put_line(
                buf,
                out_r,
                0,
                &Line::from(Span::styled("(no run focused)", t.dim)),
            ),
        }
    }
    if msg_r.height > 0 {
        let n = msg_r.height as usize;
        let skip = s.messages.len().saturating_sub(n);
        if s.messages.is_empty() {
            put_line(
                buf,
                msg_r,
                0,
                &Line::from(Span::styled("(no messages; ? shows the keys)", t.dim)),
            );
        }
        for (i, m) in s.messages.iter().skip(skip).enumerate() {
            let (glyph, st) = match m.level {
                Level::Info => ("·", t.msg_info),
                Level::Warn => ("!", t.msg_warn),
                Level::Error => ("✗", t.msg_error),
            };
            let mut spans = vec![Span::styled(format!("{glyph} "), st)];
            if let Some(r) = &m.run {
                spans.push(Span::styled(format!("{} ", fmt::tiny_id(r)), t.dim));
            }
            let used: usize = spans.iter().map(|s| s.width()).sum();
            spans.push(Span::styled(
                fmt::trunc(&m.text, (msg_r.width as usize).saturating_sub(used)),
                st,
            ));
            put_line(buf, msg_r, i as u16, &Line::from(spans));
        }
    }
}
