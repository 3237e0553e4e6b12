//! The Timeline pane: the focused run's latest complete step on the chosen rank, as a Gantt chart
//! drawn cell by cell into the buffer: backward compute, each bucket's all-reduce (hidden under
//! compute, or exposed after it, and the wait between a bucket being ready and its all-reduce
//! starting), then the optimizer. Overlap % and exposed comm ms on top.

use super::fmt;
use super::layout::PaneId;
use super::{Ctx, empty_note, frame_block, put_line};
use crate::app::predict::{self, TimelineStats};
use crate::app::summary::overlap_pct;
use crate::app::view::same_step;
use crate::protocol::Buckets;
use crate::run::RunView;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

pub const COMPUTE: char = '█';
pub const COMM_HIDDEN: char = '▓';
pub const COMM_HIDDEN_ALT: char = '▒';
pub const COMM_EXPOSED: char = '█';
pub const WAIT: char = '░';
pub const OPT: char = '█';
/// Without colour (`NO_COLOR`, the monochrome theme) exposed comm and the optimizer would look
/// like backward compute: they get glyphs of their own.
pub const MONO_EXPOSED: char = '▚';
pub const MONO_OPT: char = '▬';

/// (backward, exposed, optimizer) glyphs for `t`: distinct shapes when colour can't tell them apart.
pub fn bar_glyphs(t: &super::Theme) -> (char, char, char) {
    if t.name == "monochrome" {
        (COMPUTE, MONO_EXPOSED, MONO_OPT)
    } else {
        (COMPUTE, COMM_EXPOSED, OPT)
    }
}

/// The pane's title: backend and device, the run, rank, the bars' instrument, FROZEN.
fn title(ctx: &Ctx, run: Option<&RunView>) -> Vec<Span<'static>> {
    let t = ctx.theme;
    let v = ctx.view;
    let frozen = v.frozen();
    let mut title = vec![Span::raw("Timeline")];
    if let Some(r) = run {
        // The backend and device first, where a narrow pane does not cut them.
        if let Some(bd) = fmt::backend_device(&r.spec) {
            title.push(Span::styled(format!(" · {bd} ·"), t.dim));
        }
        title.push(Span::styled(
            format!(
                " {} k={} rank {}",
                fmt::tiny_id(&r.id),
                r.spec.k,
                v.timeline_rank(r)
            ),
            t.dim,
        ));
    }
    // The bars' instrument, always said (in the title, where it costs no figure its room): the
    // two differ in what "ready" and "start" are (docs/profiler.md). A simulated run's bars are
    // the simulator's (its SIMULATED badge says so).
    if let Some(r) = run.filter(|r| !r.is_simulated() && r.spec.kind().has_bucket_timeline()) {
        let source = match frozen.filter(|f| f.run_id == r.id) {
            Some(f) => f.source,
            None => crate::app::nccl_timeline::choose(r, v.timeline_rank(r)).source,
        };
        let label = source.label_on(r.spec.backend);
        title.push(Span::styled(format!(" · {label}"), t.label));
    }
    if frozen.is_some() {
        title.push(Span::raw(" "));
        title.push(Span::styled(" FROZEN ", t.frozen));
    }
    title
}

pub fn render(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let s = ctx.state;
    let t = ctx.theme;
    let v = ctx.view;
    let frozen = v.frozen();
    let run = match frozen {
        Some(f) => s.run(&f.run_id).or_else(|| v.subject(s)),
        None => v.subject(s),
    };
    let title = title(ctx, run);
    let inner = frame_block(ctx, PaneId::Timeline, title, area, buf);
    if inner.height == 0 {
        return;
    }
    let Some(run) = run else {
        empty_note(
            ctx,
            inner,
            "no run focused: select a run and press Enter; the timeline shows its latest complete step",
            buf,
        );
        return;
    };
    let mut y = 0u16;
    if !run.status.shows_results() {
        let why = run.reason.as_deref().unwrap_or("no reason recorded");
        let prefix = format!("{}: ", run.status.as_str());
        let why = why.strip_prefix(prefix.as_str()).unwrap_or(why);
        put_line(
            buf,
            inner,
            y,
            &Line::from(vec![
                Span::styled(
                    format!(" {} ", run.status.as_str().to_uppercase()),
                    t.status(run.status),
                ),
                Span::styled(format!(" {why}"), t.text),
            ]),
        );
        y += 1;
        for l in run.evidence.hang_report.iter().take(2) {
            put_line(
                buf,
                inner,
                y,
                &Line::from(Span::styled(fmt::trunc(l, inner.width as usize), t.dim)),
            );
            y += 1;
        }
    }
    if run.spec.kind().sweeps_allreduce() {
        put_line(
            buf,
            inner,
            y,
            &Line::from(Span::styled(
                "an all-reduce bench has no training step: see the Bench pane",
                t.dim,
            )),
        );
        return;
    }
    if !run.spec.kind().has_bucket_timeline() {
        let sub = Rect::new(inner.x, inner.y + y, inner.width, inner.height - y);
        super::comm::render_step(ctx, run, v.timeline_rank(run), sub, buf);
        return;
    }
    if let Some(f) = frozen.filter(|f| f.run_id == run.id) {
        let sub = Rect::new(inner.x, inner.y + y, inner.width, inner.height - y);
        gantt(
            ctx, run, &f.buckets, None, f.opt_ms, f.data_ms, None, sub, buf,
        );
        return;
    }
    let rank = v.timeline_rank(run);
    let rv = run.ranks.get(&rank);
    let choice = crate::app::nccl_timeline::choose(run, rank);
    let fallback = choice.fallback.as_deref();
    if let Some(pb) = &choice.buckets {
        // NCCL's collectives matched a step: that step, not a median of the hook's steps.
        let step = rv.and_then(|r| same_step(r, pb));
        let sub = Rect::new(inner.x, inner.y + y, inner.width, inner.height - y);
        let (opt_ms, data_ms) = (step.map(|s| s.0), step.map(|s| s.1));
        gantt(ctx, run, pb, None, opt_ms, data_ms, None, sub, buf);
        return;
    }
    let Some(b) = rv.and_then(|r| r.buckets.as_ref()) else {
        let msg = if let Some(f) = fallback {
            format!("rank {rank}: no bucket timeline ({f})")
        } else if run.status.is_final() {
            format!("rank {rank} reported no bucket timeline")
        } else {
            format!("rank {rank}: waiting for the first complete step (] picks another rank)")
        };
        put_line(buf, inner, y, &Line::from(Span::styled(msg, t.dim)));
        return;
    };
    let step = rv.and_then(|r| same_step(r, b));
    let (opt_ms, data_ms) = (step.map(|st| st.0), step.map(|st| st.1));
    let sub = Rect::new(inner.x, inner.y + y, inner.width, inner.height - y);
    // The median over the last N steps (one step is noise); `f` freezes a single step instead.
    let stats = rv.and_then(|r| predict::timeline_stats(r, v.timeline_window()));
    match &stats {
        Some(st) => gantt(
            ctx,
            run,
            &st.median,
            Some(st),
            opt_ms,
            data_ms,
            fallback,
            sub,
            buf,
        ),
        None => gantt(ctx, run, b, None, opt_ms, data_ms, fallback, sub, buf),
    }
}

/// Draw the chart for one step (or, with `stats`, the median step of a window) into `r`.
#[allow(clippy::too_many_arguments)]
pub fn gantt(
    ctx: &Ctx,
    run: &RunView,
    b: &Buckets,
    stats: Option<&TimelineStats>,
    opt_ms: Option<f64>,
    data_ms: Option<f64>,
    fallback: Option<&str>,
    r: Rect,
    buf: &mut Buffer,
) {
    let t = ctx.theme;
    let mut y = 0u16;
    let comm_total: f64 = b.buckets.iter().map(|s| s.comm_ms()).sum();
    let inferred = predict::is_inferred(b);
    let info = info_line(ctx, run, b, stats, data_ms, fallback);
    put_line(buf, r, y, &info);
    y += 1;
    if y >= r.height {
        return;
    }

    let bwd_end = b.bwd_compute_ms.max(0.0);
    let comm_end = b.buckets.iter().map(|s| s.done_ms).fold(0.0, f64::max);
    let opt_start = bwd_end.max(comm_end);
    let t_end = (opt_start + opt_ms.unwrap_or(0.0)).max(1e-6);

    // Rows available for bars: info 1 already used; bwd 1, opt 1, axis 1, legend 1 (optional).
    let avail = r.height.saturating_sub(y) as usize;
    let n = b.buckets.len();
    let per_bucket = avail >= n + 3;
    let legend = avail > n + 3 || (!per_bucket && avail >= 5);

    let c = Chart::new(r, t_end);
    let (chart_x, cw, right_w) = (c.chart_x, c.cw, c.right_w);

    // Backward compute.
    c.label(buf, y, "bwd", t.label);
    c.paint(buf, y, 0.0, bwd_end, bar_glyphs(t).0, t.compute);
    c.right(buf, y, format!("{} compute", fmt::ms(bwd_end)), t.dim);
    y += 1;

    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| b.buckets[i].start_ms.total_cmp(&b.buckets[j].start_ms));
    if per_bucket {
        for (k, &i) in order.iter().enumerate() {
            let s = &b.buckets[i];
            c.label(buf, y, &format!("b{}", s.index), t.label);
            draw_bucket(&c, t, b, bwd_end, buf, y, k, i);
            c.right(buf, y, bucket_figure(s, stats, right_w), t.dim);
            y += 1;
        }
    } else if n > 0 {
        c.label(buf, y, "comm", t.label);
        for (k, &i) in order.iter().enumerate() {
            draw_bucket(&c, t, b, bwd_end, buf, y, k, i);
        }
        c.right(
            buf,
            y,
            format!("{n} buckets {}", fmt::ms(comm_total)),
            t.dim,
        );
        y += 1;
    }
    if y < r.height {
        c.label(buf, y, "opt", t.label);
        match opt_ms {
            Some(o) => {
                c.paint(
                    buf,
                    y,
                    opt_start,
                    opt_start + o,
                    bar_glyphs(t).2,
                    t.optimizer,
                );
                c.right(buf, y, format!("{} optimizer", fmt::ms(o)), t.dim);
            }
            None => {
                buf.set_stringn(chart_x, r.y + y, "n/a", cw, t.dim);
            }
        }
        y += 1;
    }
    if y < r.height {
        c.axis(buf, y, bwd_end, t.axis);
        y += 1;
    }
    legend_lines(
        ctx,
        run,
        b,
        inferred,
        per_bucket && right_w > 0,
        legend,
        r,
        y,
        buf,
    );
}

/// The chart's first line: which step, buckets, overlap, exposed communication, data wait and
/// the source's caveats.
fn info_line(
    ctx: &Ctx,
    run: &RunView,
    b: &Buckets,
    stats: Option<&TimelineStats>,
    data_ms: Option<f64>,
    fallback: Option<&str>,
) -> Line<'static> {
    let t = ctx.theme;
    let comm_total: f64 = b.buckets.iter().map(|s| s.comm_ms()).sum();
    let total_bytes: u64 = b.buckets.iter().map(|s| s.bytes).sum();
    let what = match stats {
        Some(st) if st.steps > 1 => format!(
            "median of {} steps ({}–{})",
            st.steps, st.first_step, st.last_step
        ),
        _ => format!("step {}", b.step),
    };
    // The bars' instrument, always said and said first: the two differ in what "ready" and
    // "start" are (docs/profiler.md).
    let mut info = vec![Span::styled(what, t.value)];
    info.extend([
        Span::styled(
            format!(
                " · {} buckets {} · ",
                b.buckets.len(),
                crate::util::fmt_bytes(total_bytes)
            ),
            t.dim,
        ),
        Span::styled("overlap ", t.label),
        Span::styled(fmt::opt(overlap_pct(b), |p| format!("{p:.0}%")), t.value),
        Span::styled(" · exposed comm ", t.label),
        Span::styled(
            fmt::ms(b.exposed_ms),
            if b.exposed_ms > 0.05 * b.bwd_compute_ms.max(1e-9) {
                t.warn
            } else {
                t.good
            },
        ),
        Span::styled(
            match stats {
                Some(st) if st.steps > 1 => format!(
                    " [{}–{}] of {}",
                    fmt::ms_num(st.exposed_ms.min),
                    fmt::ms_num(st.exposed_ms.max),
                    fmt::ms(comm_total)
                ),
                _ => format!(" of {}", fmt::ms(comm_total)),
            },
            t.dim,
        ),
    ]);
    let inferred = predict::is_inferred(b);
    if inferred {
        info.push(Span::styled(" · start inferred", t.warn));
    }
    if let Some(d) = data_ms {
        info.push(Span::styled(" · data wait ", t.label));
        info.push(Span::styled(fmt::ms(d), t.value));
    }
    if run.is_simulated() {
        info.push(Span::raw(" "));
        info.push(Span::styled(" SIMULATED ", t.sim));
    }
    if b.rebuilt {
        info.push(Span::styled(" · buckets rebuilt", t.dim));
    }
    // Why NCCL's profiler is not the source although it reported (the title names the source).
    if let Some(f) = fallback {
        info.push(Span::styled(format!(" · {f}"), t.warn));
    }
    Line::from(info)
}

/// Where the bars go: the rows' area, the chart's first column and width, the label and
/// right-hand figure widths, and the time at the right edge.
struct Chart {
    r: Rect,
    chart_x: u16,
    cw: usize,
    label_w: usize,
    right_w: usize,
    t_end: f64,
}

impl Chart {
    fn new(r: Rect, t_end: f64) -> Chart {
        let w = r.width as usize;
        let label_w = 5usize;
        // Right-hand labels for bucket rows when there is room (with the window's range when
        // wide).
        let right_w = if w >= 86 {
            36
        } else if w >= 60 {
            24
        } else {
            0
        };
        Chart {
            r,
            chart_x: r.x + label_w as u16,
            cw: w.saturating_sub(label_w + right_w).max(4),
            label_w,
            right_w,
            t_end,
        }
    }

    /// Axis: 0 … end, with the end of backward marked.
    fn axis(&self, buf: &mut Buffer, y: u16, bwd_end: f64, style: Style) {
        let (r, cw) = (self.r, self.cw);
        let mut axis: Vec<char> = vec!['─'; cw];
        let xb = self.x_of(bwd_end).min(cw.saturating_sub(1));
        axis[xb] = '┴';
        let s: String = axis.into_iter().collect();
        buf.set_stringn(self.chart_x, r.y + y, &s, cw, style);
        buf.set_stringn(r.x, r.y + y, "0", self.label_w, style);
        self.right(buf, y, fmt::ms(self.t_end), style);
    }

    fn x_of(&self, ms: f64) -> usize {
        ((ms / self.t_end).clamp(0.0, 1.0) * self.cw as f64).round() as usize
    }

    /// Paint one span [a, e) ms on row y with glyph and style; at least one cell when a < e.
    fn paint(&self, buf: &mut Buffer, y: u16, a: f64, e: f64, glyph: char, style: Style) {
        if e <= a || y >= self.r.height {
            return;
        }
        let x0 = self.x_of(a);
        let x1 = self.x_of(e).max(x0 + 1).min(self.cw);
        for x in x0..x1 {
            let cell = &mut buf[(self.chart_x + x as u16, self.r.y + y)];
            cell.set_char(glyph).set_style(style);
        }
    }

    fn label(&self, buf: &mut Buffer, y: u16, s: &str, style: Style) {
        if y < self.r.height {
            buf.set_stringn(self.r.x, self.r.y + y, s, self.label_w, style);
        }
    }

    /// The right-hand figure of a row, when there is room for it.
    fn right(&self, buf: &mut Buffer, y: u16, text: String, style: Style) {
        if self.right_w > 0 {
            let x = self.chart_x + self.cw as u16 + 1;
            buf.set_stringn(x, self.r.y + y, text, self.right_w - 1, style);
        }
    }
}

/// One bucket's bar on row `y`: queued (ready → start), hidden under backward, exposed after it.
#[allow(clippy::too_many_arguments)]
fn draw_bucket(
    c: &Chart,
    t: &super::Theme,
    b: &Buckets,
    bwd_end: f64,
    buf: &mut Buffer,
    y: u16,
    k: usize,
    i: usize,
) {
    let s = &b.buckets[i];
    let (glyph, style) = if k.is_multiple_of(2) {
        (COMM_HIDDEN, t.comm)
    } else {
        (COMM_HIDDEN_ALT, t.comm_alt)
    };
    if s.ready_ms < s.start_ms {
        c.paint(buf, y, s.ready_ms, s.start_ms, WAIT, t.dim);
    }
    c.paint(
        buf,
        y,
        s.start_ms,
        s.done_ms.min(bwd_end).max(s.start_ms),
        glyph,
        style,
    );
    c.paint(
        buf,
        y,
        s.start_ms.max(bwd_end),
        s.done_ms,
        bar_glyphs(t).1,
        t.exposed,
    );
}

/// Under the bars: the glyphs' legend and, with per-bucket rows and their figures, what `k`,
/// `~` and `q` mean for this run's source.
#[allow(clippy::too_many_arguments)]
fn legend_lines(
    ctx: &Ctx,
    run: &RunView,
    b: &Buckets,
    inferred: bool,
    figures: bool,
    legend: bool,
    r: Rect,
    mut y: u16,
    buf: &mut Buffer,
) {
    let t = ctx.theme;
    let w = r.width as usize;
    if legend && y < r.height {
        let l = Line::from(vec![
            Span::styled(bar_glyphs(t).0.to_string(), t.compute),
            Span::styled(" backward  ", t.dim),
            Span::styled(COMM_HIDDEN.to_string(), t.comm),
            Span::styled(" all-reduce hidden  ", t.dim),
            Span::styled(bar_glyphs(t).1.to_string(), t.exposed),
            Span::styled(" exposed  ", t.dim),
            Span::styled(WAIT.to_string(), t.dim),
            Span::styled(" queued  ", t.dim),
            Span::styled(bar_glyphs(t).2.to_string(), t.optimizer),
            Span::styled(" optimizer", t.dim),
        ]);
        put_line(buf, r, y, &l);
        y += 1;
    }
    if legend && figures && y < r.height {
        // Only NCCL reports a kernel's own time; gloo, CPU and the hand-rolled loop's copies
        // have none, and their legend does not claim it.
        let kernel = b.buckets.iter().any(|s| s.kernel_ms.is_some());
        let nccl = run.spec.backend == crate::protocol::Backend::Nccl
            && run.spec.kind().engine().is_none();
        let key = match (kernel, inferred) {
            (true, true) if nccl => {
                "k NCCL kernel time · ~ done − start (start inferred) · q queued: start − ready"
            }
            (true, false) if nccl => "k NCCL kernel time (measured) · q queued: start − ready",
            (true, _) => "k kernel time (measured) · ~ done − start · q queued: start − ready",
            (false, _) => {
                "~ all-reduce time: done − start (start inferred) · q queued: start − ready"
            }
        };
        put_line(
            buf,
            r,
            y,
            &Line::from(Span::styled(fmt::trunc(key, w), t.dim)),
        );
    }
}

/// A bucket row's right-hand figure: size, all-reduce time (`k`: the kernel's own, measured;
/// `~`: done − start with an inferred start) and queueing `q` = start − ready; with a window and
/// room, the all-reduce time's min–max over it.
fn bucket_figure(
    s: &crate::protocol::BucketSpan,
    stats: Option<&TimelineStats>,
    right_w: usize,
) -> String {
    let bs = stats.and_then(|st| {
        st.buckets
            .iter()
            .find(|x| x.index == s.index && x.bytes == s.bytes)
    });
    let (mark, ms, range) = match (s.kernel_ms, bs) {
        (Some(k), Some(b)) => ('k', k, b.kernel_ms.map(|k| (k.min, k.max))),
        (Some(k), None) => ('k', k, None),
        (None, Some(b)) => ('~', b.comm_ms.median, Some((b.comm_ms.min, b.comm_ms.max))),
        (None, None) => ('~', s.comm_ms(), None),
    };
    let queue = bs.map_or((s.start_ms - s.ready_ms).max(0.0), |b| b.queue_ms.median);
    // Units on both times (a bare "k6.14 q0.00" reads as anything).
    let mut out = format!(
        "{} {mark}{}ms q{}ms",
        crate::util::fmt_bytes(s.bytes),
        fmt::ms_num(ms),
        fmt::ms_num(queue)
    );
    if right_w >= 36
        && let Some((lo, hi)) = range.filter(|_| stats.is_some_and(|st| st.steps > 1))
    {
        out.push_str(&format!(" [{}–{}]", fmt::ms_num(lo), fmt::ms_num(hi)));
    }
    out
}
