//! The Log pane: the focused run's output tail and ddptop's own messages, newest at the bottom.

use super::fmt;
use super::layout::PaneId;
use super::{Ctx, frame_block, put_line};
use crate::app::{Level, RunView};
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

/// Split `text` into rows of at most `width` cells (by character width; a long line wraps, it is
/// never cut), at a space when there is one in the row's second half.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    use fmt::unicode_width_shim::width as w;
    if width == 0 {
        return vec![];
    }
    let mut rows = Vec::new();
    let mut cur = String::new();
    let mut used = 0;
    for c in text.chars() {
        let c = if c == '\t' { ' ' } else { c };
        let cw = w(c.encode_utf8(&mut [0; 4]));
        if used + cw > width && !cur.is_empty() {
            let half = cur.len() / 2;
            match cur.rfind(' ').filter(|i| *i >= half && *i + 1 < cur.len()) {
                Some(i) => {
                    let rest = cur.split_off(i + 1);
                    rows.push(std::mem::replace(&mut cur, rest));
                    used = w(&cur);
                }
                None => {
                    rows.push(std::mem::take(&mut cur));
                    used = 0;
                }
            }
        }
        cur.push(c);
        used += cw;
    }
    rows.push(cur);
    rows
}

/// The window of wrapped rows to draw: `items` (oldest first) wrapped to `width`, ending with
/// the line `scroll` lines above the newest, `height` rows; near the top, the first rows. Each
/// row carries its item's index.
pub fn window<T>(
    items: &[T],
    text: impl Fn(&T) -> String,
    width: usize,
    height: usize,
    scroll: usize,
) -> Vec<(usize, String)> {
    if items.is_empty() || height == 0 {
        return vec![];
    }
    let end = items.len() - scroll.min(items.len() - 1);
    let mut rows: Vec<(usize, String)> = Vec::new();
    // Wrap backwards from the last shown line until the window is full.
    let mut i = end;
    while i > 0 && rows.len() < height {
        i -= 1;
        let mut r: Vec<(usize, String)> = wrap(&text(&items[i]), width)
            .into_iter()
            .map(|l| (i, l))
            .collect();
        r.append(&mut rows);
        rows = r;
    }
    if rows.len() > height {
        rows.drain(..rows.len() - height);
    }
    // Scrolled to the top with room left: fill downwards with the lines after `end`.
    let mut j = end;
    while rows.len() < height && j < items.len() {
        for l in wrap(&text(&items[j]), width) {
            if rows.len() < height {
                rows.push((j, l));
            }
        }
        j += 1;
    }
    rows
}

pub fn render(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let s = ctx.state;
    let t = ctx.theme;
    let run = ctx.view.subject(s);
    let scroll = ctx.view.log_scroll;
    let mut title = vec![Span::raw("Log")];
    if let Some(r) = run {
        title.push(Span::styled(
            format!(" output of {}", fmt::short_id(&r.id)),
            t.dim,
        ));
    }
    title.push(Span::styled(" · ddptop messages", t.dim));
    if scroll > 0 {
        title.push(Span::styled(
            format!(" · scrolled ↑{scroll} · End follows"),
            t.label,
        ));
    }
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
        output(ctx, run, out_r, scroll, buf);
    }
    if msg_r.height > 0 {
        messages(ctx, msg_r, scroll, buf);
    }
}

/// The focused run's output, scrolled `scroll` rows up (or why there is none).
fn output(ctx: &Ctx, run: Option<&RunView>, out_r: Rect, scroll: usize, buf: &mut Buffer) {
    let t = ctx.theme;
    match run {
        Some(r) if !r.evidence.log_tail.is_empty() => {
            let lines: Vec<&String> = r.evidence.log_tail.iter().collect();
            let rows = window(
                &lines,
                |l| l.to_string(),
                out_r.width as usize,
                out_r.height as usize,
                scroll,
            );
            for (y, (i, row)) in rows.iter().enumerate() {
                put_line(
                    buf,
                    out_r,
                    y as u16,
                    &Line::from(Span::styled(row.clone(), line_style(ctx, lines[*i]))),
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

/// ddptop's messages, newest last, scrolled `scroll` rows up; a message's glyph and run id are
/// styled apart from its text.
fn messages(ctx: &Ctx, msg_r: Rect, scroll: usize, buf: &mut Buffer) {
    let s = ctx.state;
    let t = ctx.theme;
    if s.messages.is_empty() {
        put_line(
            buf,
            msg_r,
            0,
            &Line::from(Span::styled("(no messages; ? shows the keys)", t.dim)),
        );
    }
    let msgs: Vec<&crate::app::Message> = s.messages.iter().collect();
    let prefix = |m: &crate::app::Message| -> String {
        let glyph = match m.level {
            Level::Info => "·",
            Level::Warn => "!",
            Level::Error => "✗",
        };
        match &m.run {
            Some(r) => format!("{glyph} {} ", fmt::tiny_id(r)),
            None => format!("{glyph} "),
        }
    };
    let rows = window(
        &msgs,
        |m| format!("{}{}", prefix(m), m.text),
        msg_r.width as usize,
        msg_r.height as usize,
        scroll,
    );
    let mut prev = None;
    for (y, (i, row)) in rows.iter().enumerate() {
        let m = msgs[*i];
        let st = match m.level {
            Level::Info => t.msg_info,
            Level::Warn => t.msg_warn,
            Level::Error => t.msg_error,
        };
        // The first row of a message: its glyph and run id styled apart from the text.
        let first_row = prev != Some(*i) && row.starts_with(&prefix(m));
        prev = Some(*i);
        let line = if first_row {
            let p = prefix(m);
            let (glyph, rest) = p.split_at(p.find(' ').map_or(0, |x| x + 1));
            Line::from(vec![
                Span::styled(glyph.to_string(), st),
                Span::styled(rest.to_string(), t.dim),
                Span::styled(row[p.len()..].to_string(), st),
            ])
        } else {
            Line::from(Span::styled(row.clone(), st))
        };
        put_line(buf, msg_r, y as u16, &line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_wrap_and_the_window_scrolls_by_lines() {
        assert_eq!(wrap("abcdefg", 3), ["abc", "def", "g"]);
        assert_eq!(wrap("", 3), [""]);
        assert_eq!(wrap("launched on sim now", 10), ["launched ", "on sim now"]);
        let items = ["one", "two", "three-long", "four"];
        let w = |sc| window(&items, |s| s.to_string(), 5, 3, sc);
        // Newest at the bottom; the long line wraps.
        assert_eq!(
            w(0),
            [(2, "three".into()), (2, "-long".into()), (3, "four".into())]
        );
        assert_eq!(
            w(1),
            [(1, "two".into()), (2, "three".into()), (2, "-long".into())]
        );
        // At the top the window starts with the first line.
        assert_eq!(
            w(3),
            [(0, "one".into()), (1, "two".into()), (2, "three".into())]
        );
        assert_eq!(w(99), w(3));
    }
}
