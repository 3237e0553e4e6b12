//! The GPUs pane (a row per GPU with a minute of utilisation, and which run/rank is on it) and the
//! Ranks pane (each worker process: pid, step, step time, CPU %, RSS, torch memory).

use super::fmt;
use super::gpu_row::{gpu_cols, gpu_head, gpu_row, lpad, rpad};
use super::layout::PaneId;
use super::{Ctx, empty_note, frame_block, model, put_line};
use crate::run::{RankView, RunView};
use crate::util::min_median_max;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget, Wrap};

pub fn render_gpus(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let s = ctx.state;
    let t = ctx.theme;
    // Other nodes' GPUs count too (multi-node runs with agents).
    let all = s.gpus.len() + s.nodes.iter().map(|n| n.gpus.len()).sum::<usize>();
    let title = vec![
        Span::raw("GPUs"),
        Span::styled(
            if all == 0 {
                String::new()
            } else {
                format!(" ({all})")
            },
            t.dim,
        ),
    ];
    let inner = frame_block(ctx, PaneId::Gpus, title, area, buf);
    if inner.height == 0 {
        return;
    }
    if !s.nodes.is_empty() {
        super::gpu_nodes::render_by_node(ctx, inner, buf);
        return;
    }
    if s.gpus.is_empty() {
        let note = s
            .gpu_note
            .clone()
            .unwrap_or_else(|| "no GPU samples yet".to_string());
        let mut lines = vec![Line::from(Span::styled(note, t.warn))];
        if s.active_runs().next().is_some() {
            lines.push(Line::from(Span::styled(
                "Workers run on the CPU: Ranks shows their CPU % and memory.",
                t.dim,
            )));
        }
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .render(inner, buf);
        return;
    }
    let w = inner.width as usize;
    let c = gpu_cols(w);
    put_line(
        buf,
        inner,
        0,
        &Line::from(Span::styled(gpu_head(&c, &s.gpus), t.label)),
    );
    let rows = inner.height.saturating_sub(1) as usize;
    let n = s.gpus.len();
    let shown = if n > rows { rows.saturating_sub(1) } else { n };
    for (i, g) in s.gpus.iter().take(shown).enumerate() {
        let owners = model::gpu_owners(s, g);
        let foreign = model::foreign_pids(s, g);
        put_line(
            buf,
            inner,
            (i + 1) as u16,
            &gpu_row(ctx, g, &c, w, &owners, foreign),
        );
    }
    if shown < n {
        put_line(
            buf,
            inner,
            (shown + 1) as u16,
            &Line::from(Span::styled(
                format!("+{} more GPUs (a taller terminal shows them)", n - shown),
                t.dim,
            )),
        );
    }
}

/// One line of the Ranks pane: a node's header (multi-node runs) or a rank.
enum RankRow<'a> {
    Node {
        name: String,
        ranks: usize,
        remote: bool,
    },
    Rank(&'a RankView),
}

/// A run's rank lines: in rank order on one node; grouped by node (local first) otherwise.
fn rank_rows(run: &RunView) -> Vec<RankRow<'_>> {
    let node = |r: &RankView| r.node.clone().unwrap_or_default();
    let mut names: Vec<(bool, String)> = run.ranks.values().map(|r| (r.remote, node(r))).collect();
    names.sort();
    names.dedup();
    if names.len() <= 1 {
        return run.ranks.values().map(RankRow::Rank).collect();
    }
    let mut out = Vec::new();
    for (remote, name) in names {
        let ranks: Vec<&RankView> = run
            .ranks
            .values()
            .filter(|r| r.remote == remote && node(r) == name)
            .collect();
        out.push(RankRow::Node {
            name: if name.is_empty() { "?".into() } else { name },
            ranks: ranks.len(),
            remote,
        });
        out.extend(ranks.into_iter().map(RankRow::Rank));
    }
    out
}

pub fn render_ranks(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let s = ctx.state;
    let t = ctx.theme;
    let runs = model::ranks_runs(s, ctx.view);
    let mut title = vec![Span::raw("Ranks"), Span::styled(" worker processes", t.dim)];
    // The watchdog's live word (warming up, a slow step it waits out, a reported stall) is
    // where a user looks when steps stop.
    if let Some(note) = runs.iter().find_map(|r| r.evidence.watch_note.as_deref()) {
        title.push(Span::styled(format!(" · {note}"), t.warn));
    }
    let inner = frame_block(ctx, PaneId::Ranks, title, area, buf);
    if inner.height == 0 {
        return;
    }
    if runs.iter().all(|r| r.ranks.is_empty()) {
        empty_note(
            ctx,
            inner,
            "no workers: launch a run (1, 2, 4) to see each rank's pid, step time, CPU % and memory",
            buf,
        );
        return;
    }
    let w = inner.width as usize;
    let wide = w >= 72;
    let mut head = format!(
        "{} {} {} {} {} {} {}",
        rpad("run", 4),
        rpad("rank", 4),
        lpad("pid", 7),
        lpad("step", 6),
        lpad("step ms", 7),
        lpad("CPU%", 4),
        lpad("RSS", 5),
    );
    if wide {
        head.push_str(&format!(
            " {} {}",
            rpad("device", 7),
            lpad("alloc/peak", 11)
        ));
    }
    head.push_str(" state");
    put_line(
        buf,
        inner,
        0,
        &Line::from(Span::styled(fmt::trunc(&head, w), t.label)),
    );
    let mut y = 1u16;
    let rows = inner.height.saturating_sub(1) as usize;
    // Node headers only add lines: when the ranks alone do not fit, skip building the rows.
    let total_ranks: usize = runs.iter().map(|r| r.ranks.len()).sum();
    if total_ranks > rows {
        render_ranks_summary(ctx, &runs, inner, wide, buf);
        return;
    }
    // A multi-node run lists its ranks by node, this machine's first, each under a header.
    let listed: Vec<(&RunView, Vec<RankRow>)> = runs.iter().map(|r| (*r, rank_rows(r))).collect();
    let total: usize = listed.iter().map(|(_, rows)| rows.len()).sum();
    if total > rows {
        render_ranks_summary(ctx, &runs, inner, wide, buf);
        return;
    }
    // Everything fits here (`total <= rows`).
    for (run, list) in &listed {
        for row in list {
            let r = match row {
                &RankRow::Node {
                    ref name,
                    ranks,
                    remote,
                } => {
                    let how = if remote && crate::app::nodes::has_agent(s, name) {
                        "reports over TCP; CPU/RSS from its agent"
                    } else if remote {
                        "reports over TCP; CPU/RSS not sampled here"
                    } else {
                        "this machine"
                    };
                    put_line(
                        buf,
                        inner,
                        y,
                        &Line::from(vec![
                            Span::styled(fmt::trunc(&format!("node {name}"), w), t.label),
                            Span::styled(format!(" · {ranks} rank(s) · {how}"), t.dim),
                        ]),
                    );
                    y += 1;
                    continue;
                }
                RankRow::Rank(r) => *r,
            };
            put_line(buf, inner, y, &rank_line(ctx, run, r, wide));
            y += 1;
        }
    }
}

/// More ranks than lines (hundreds of ranks): a summary over every rank (how many, how many
/// lost, min/median/max of step and step time), on one line or two as the width allows, then
/// the ranks: lost ones first, then the slowest (by median step time; a rank behind in steps
/// first among equals).
fn render_ranks_summary(ctx: &Ctx, runs: &[&RunView], inner: Rect, wide: bool, buf: &mut Buffer) {
    let t = ctx.theme;
    let w = inner.width as usize;
    let mut ranks: Vec<(&RunView, &RankView, Option<f64>)> = runs
        .iter()
        .flat_map(|run| run.ranks.values().map(move |r| (*run, r, step_ms_of(r))))
        .collect();
    let n = ranks.len();
    let is_lost =
        |run: &RunView, r: &RankView| !run.status.is_final() && !r.connected && r.pid.is_some();
    let mut steps: Vec<f64> = ranks.iter().map(|(_, r, _)| r.step as f64).collect();
    let mut times: Vec<f64> = ranks.iter().filter_map(|(_, _, ms)| *ms).collect();
    // Linear-time selections, not sorts: this runs over every rank on each frame.
    let mmm = |v: &mut [f64], f: &dyn Fn(f64) -> String| match min_median_max(v) {
        Some((lo, mid, hi)) => format!("{}/{}/{}", f(lo), f(mid), f(hi)),
        None => "-".to_string(),
    };
    let lost = ranks.iter().filter(|(run, r, _)| is_lost(run, r)).count();
    let stats = vec![
        Span::styled("min/med/max ", t.dim),
        Span::styled(
            format!("step {}", mmm(&mut steps, &|x| format!("{x:.0}"))),
            t.text,
        ),
        Span::styled(", ", t.dim),
        Span::styled(format!("ms {}", mmm(&mut times, &fmt::ms_num)), t.value),
    ];
    let width = |spans: &[Span]| -> usize {
        spans
            .iter()
            .map(|s| fmt::unicode_width_shim::width(&s.content))
            .sum()
    };
    let head_of = |listed: usize| {
        let mut v = vec![Span::styled(format!("{n} ranks"), t.label)];
        if lost > 0 {
            v.push(Span::styled(format!(" · {lost} lost"), t.bad));
        }
        v.push(Span::styled(
            if listed < n {
                " · slowest first"
            } else {
                " · slowest first, all listed"
            },
            t.dim,
        ));
        v
    };
    // Below the column header: the summary (one line, or two when narrow), then ranks.
    let probe = head_of(n);
    let one_line = width(&probe) + 3 + width(&stats) <= w;
    let summary_lines = if one_line { 1 } else { 2 };
    let room = (inner.height as usize).saturating_sub(1 + summary_lines);
    let listed = room.min(n);
    let mut head = head_of(listed);
    let mut y = 1u16;
    if one_line {
        head.push(Span::styled(" · ", t.dim));
        head.extend(stats);
        put_line(buf, inner, y, &Line::from(head));
        y += 1;
    } else {
        put_line(buf, inner, y, &Line::from(head));
        if y + 1 < inner.height {
            put_line(buf, inner, y + 1, &Line::from(stats));
        }
        y += 2;
    }
    // Lost ranks first (no longer connected while the run goes), then the slowest: the
    // `listed` first selected in linear time, and only those sorted.
    let order = |a: &(&RunView, &RankView, Option<f64>), b: &(&RunView, &RankView, Option<f64>)| {
        let slow = |x: &Option<f64>| x.unwrap_or(f64::NEG_INFINITY);
        is_lost(b.0, b.1)
            .cmp(&is_lost(a.0, a.1))
            .then(slow(&b.2).total_cmp(&slow(&a.2)))
            .then(a.1.step.cmp(&b.1.step))
            .then(a.1.rank.cmp(&b.1.rank))
    };
    if listed > 0 && listed < n {
        ranks.select_nth_unstable_by(listed - 1, order);
    }
    ranks[..listed].sort_by(order);
    for (run, r, _) in ranks.iter().take(listed) {
        put_line(buf, inner, y, &rank_line(ctx, run, r, wide));
        y += 1;
    }
}

/// A rank's median recent step time, else its last step's (ms).
fn step_ms_of(r: &RankView) -> Option<f64> {
    // A selection in one copy, not a sort: the pane computes this for every rank on each
    // frame when it summarizes (1,024 ranks, docs/performance.md).
    let mut v: Vec<f64> = r.recent_step_ms.iter().copied().collect();
    crate::util::median_in_place(&mut v).or_else(|| r.last_step.as_ref().map(|st| st.step_ms))
}

/// One rank's row of the Ranks pane.
fn rank_line<'a>(ctx: &Ctx, run: &RunView, r: &RankView, wide: bool) -> Line<'a> {
    let s = ctx.state;
    let t = ctx.theme;
    // A rank on another node has that node's pid: its node's agent samples it, if any.
    let ps = crate::app::nodes::rank_proc(s, &run.id, r);
    let step_ms = step_ms_of(r).map_or_else(|| "-".to_string(), fmt::ms_num);
    let (state, st_style) = if run.status.is_final() {
        (run.status.as_str().to_string(), t.status(run.status))
    } else if r.said_bye {
        ("bye".to_string(), t.dim)
    } else if r.connected {
        (
            r.phase
                .map(|p| format!("{p:?}").to_lowercase())
                .unwrap_or_else(|| "ok".into()),
            t.good,
        )
    } else if r.pid.is_some() {
        ("lost".to_string(), t.bad)
    } else {
        ("waiting".to_string(), t.dim)
    };
    let mut spans = vec![
        Span::styled(rpad(fmt::tiny_id(&run.id), 4), t.dim),
        Span::raw(" "),
        Span::styled(rpad(&format!("r{}", r.rank), 4), t.value),
        Span::raw(" "),
        Span::styled(lpad(&fmt::opt(r.pid, |p| p.to_string()), 7), t.text),
        Span::raw(" "),
        Span::styled(lpad(&r.step.to_string(), 6), t.text),
        Span::raw(" "),
        Span::styled(lpad(&step_ms, 7), t.value),
        Span::raw(" "),
        Span::styled(
            lpad(
                &ps.map_or_else(|| "-".into(), |p| format!("{:.0}", p.cpu_pct)),
                4,
            ),
            t.text,
        ),
        Span::raw(" "),
        Span::styled(
            lpad(
                &ps.map_or_else(|| "-".into(), |p| fmt::bytes_short(p.rss_bytes)),
                5,
            ),
            t.text,
        ),
    ];
    if wide {
        let mem = r.memory.as_ref().map_or_else(
            || "-".to_string(),
            |m| {
                format!(
                    "{}/{}",
                    m.allocated_bytes.map_or("-".into(), fmt::bytes_short),
                    m.peak_bytes.map_or("-".into(), fmt::bytes_short)
                )
            },
        );
        spans.push(Span::raw(" "));
        spans.push(Span::styled(
            rpad(r.device.as_deref().unwrap_or("-"), 7),
            t.text,
        ));
        spans.push(Span::raw(" "));
        spans.push(Span::styled(lpad(&mem, 11), t.text));
    }
    spans.push(Span::raw(" "));
    // The rank that holds the run back, marked on its own row in place of its phase (a live
    // rank's state column is narrow): the Log line has the evidence.
    match model::straggler_mark(run, r.rank) {
        Some((mark, true)) if r.connected && !r.said_bye => {
            spans.push(Span::styled(mark, t.warn));
        }
        Some((mark, _)) => {
            spans.push(Span::styled(state, st_style));
            spans.push(Span::raw(" "));
            spans.push(Span::styled(mark, t.dim));
        }
        None => spans.push(Span::styled(state, st_style)),
    }
    Line::from(spans)
}
