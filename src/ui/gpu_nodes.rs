//! The GPU pane of a multi-node run (docs/multinode.md): rows grouped by node, this machine
//! first, each group under a `node NAME` line, with the run·rank column across nodes. When the
//! rows do not fit, one line per node instead: utilisation min/median/max, memory, power and
//! the worst GPU named (an unreadable GPU first, else the least utilised; ties: the hotter).
//! A node whose agent is lost keeps its last rows, greyed, with the reason. Pure drawing.

use super::fmt::{self, NA};
use super::gpu_row::{Cols, gpu_cols, gpu_head, gpu_row, lpad, rpad};
use super::{Ctx, model, put_line};
use crate::app::nodes::{NodeGpus, node_gpu_owners};
use crate::gpu::GpuView;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// One node's figures in a line (the summary mode).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSummary {
    pub gpus: usize,
    /// Utilisation (min, median, max) over the GPUs that report it.
    pub util: Option<(u32, u32, u32)>,
    pub mem_used: Option<u64>,
    pub mem_total: Option<u64>,
    /// Summed over the GPUs that report power.
    pub power_w: Option<f64>,
    /// The worst GPU's index and what makes it so.
    pub worst: Option<(u32, String)>,
}

fn sum<T: std::iter::Sum<T>>(v: Vec<T>) -> Option<T> {
    (!v.is_empty()).then(|| v.into_iter().sum())
}

/// Pure: the summary line's figures of one node's GPUs.
pub fn summarize(gpus: &[GpuView]) -> NodeSummary {
    let mut utils: Vec<u32> = gpus.iter().filter_map(|g| g.util_pct).collect();
    utils.sort_unstable();
    let util = (!utils.is_empty()).then(|| {
        let n = utils.len();
        // The lower middle for an even count: a figure some GPU really shows.
        (utils[0], utils[(n - 1) / 2], utils[n - 1])
    });
    let worst = gpus
        .iter()
        .find(|g| g.error.is_some())
        .map(|g| (g.index, "unreadable".to_string()))
        .or_else(|| {
            gpus.iter()
                .filter(|g| g.util_pct.is_some())
                .min_by_key(|g| (g.util_pct, std::cmp::Reverse(g.temp_c)))
                .map(|g| (g.index, format!("{}%", g.util_pct.unwrap_or(0))))
        });
    NodeSummary {
        gpus: gpus.len(),
        util,
        mem_used: sum(gpus.iter().filter_map(|g| g.mem_used).collect()),
        mem_total: sum(gpus.iter().filter_map(|g| g.mem_total).collect()),
        power_w: sum(gpus.iter().filter_map(|g| g.power_w).collect()),
        worst,
    }
}

/// One node's group: this machine (`agent` None) or another node from its agent.
struct Group<'a> {
    name: String,
    gpus: &'a [GpuView],
    agent: Option<&'a NodeGpus>,
}

impl Group<'_> {
    fn lost(&self) -> Option<&str> {
        self.agent.and_then(|a| a.lost.as_deref())
    }

    /// `node NAME · N GPUs · how they are read`, and the lost reason.
    fn header(&self, ctx: &Ctx) -> Line<'static> {
        let t = ctx.theme;
        let how = match self.agent {
            None => "this machine".to_string(),
            Some(a) => format!("agent · {}", a.source.as_str()),
        };
        let mut spans = vec![
            Span::styled(format!("node {}", self.name), t.label),
            Span::styled(
                format!(
                    " · {} GPU{} · {how}",
                    self.gpus.len(),
                    plural(self.gpus.len())
                ),
                t.dim,
            ),
        ];
        if self.agent.is_some_and(NodeGpus::simulated) {
            spans.push(Span::styled(" · SIMULATED", t.warn));
        }
        if let Some(why) = self.lost() {
            spans.push(Span::styled(format!(" · LOST: {why}"), t.warn));
        } else if let Some(e) = self.agent.and_then(|a| a.error.as_deref()) {
            spans.push(Span::styled(format!(" · {e}"), t.warn));
        }
        Line::from(spans)
    }

    /// Why a group has no rows (this machine without NVML, an agent without GPUs).
    fn empty_note(&self, ctx: &Ctx) -> String {
        match self.agent {
            None => ctx
                .state
                .gpu_note
                .clone()
                .unwrap_or_else(|| "no GPU samples yet".into()),
            Some(a) => a
                .note
                .clone()
                .unwrap_or_else(|| "no GPU samples yet".into()),
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// This machine's name in the run: what its ranks call their node, else the host name.
fn local_name(ctx: &Ctx) -> String {
    let s = ctx.state;
    s.active_runs()
        .flat_map(|r| r.ranks.values())
        .find(|k| !k.remote && k.node.is_some())
        .and_then(|k| k.node.clone())
        .or_else(|| (!s.host.hostname.is_empty()).then(|| s.host.hostname.clone()))
        .unwrap_or_else(|| "this machine".into())
}

fn groups<'a>(ctx: &'a Ctx) -> Vec<Group<'a>> {
    let s = ctx.state;
    let mut v = vec![Group {
        name: local_name(ctx),
        gpus: &s.gpus,
        agent: None,
    }];
    v.extend(s.nodes.iter().map(|n| Group {
        name: n.node.clone(),
        gpus: &n.gpus,
        agent: Some(n),
    }));
    v
}

fn grey(mut line: Line<'static>, style: Style) -> Line<'static> {
    for s in &mut line.spans {
        s.style = style;
    }
    line
}

/// GPU lines the pane would like (the layout sizes it from this): one per GPU, plus a header
/// line per node when other nodes report.
pub fn rows_wanted(s: &crate::app::State) -> usize {
    if s.nodes.is_empty() {
        return s.gpus.len();
    }
    1 + s.gpus.len().max(1)
        + s.nodes
            .iter()
            .map(|n| 1 + n.gpus.len().max(1))
            .sum::<usize>()
}

/// Every node's rows when they fit, else a line per node.
pub fn render_by_node(ctx: &Ctx, inner: Rect, buf: &mut Buffer) {
    let groups = groups(ctx);
    let rows = inner.height as usize;
    let full: usize = 1 + groups
        .iter()
        .map(|g| 1 + g.gpus.len().max(1))
        .sum::<usize>();
    if full <= rows {
        render_rows(ctx, &groups, inner, buf);
    } else {
        render_summary(ctx, &groups, inner, buf);
    }
}

fn render_rows(ctx: &Ctx, groups: &[Group], inner: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let s = ctx.state;
    let w = inner.width as usize;
    let c: Cols = gpu_cols(w.saturating_sub(2));
    let indent = |line: Line<'static>| {
        let mut spans = vec![Span::raw("  ")];
        spans.extend(line.spans);
        Line::from(spans)
    };
    put_line(
        buf,
        inner,
        0,
        &Line::from(Span::styled(
            format!("  {}", gpu_head(&c, &s.gpus)),
            t.label,
        )),
    );
    let mut y = 1u16;
    for g in groups {
        put_line(buf, inner, y, &g.header(ctx));
        y += 1;
        if g.gpus.is_empty() {
            let note = fmt::trunc(&format!("  {}", g.empty_note(ctx)), w);
            put_line(buf, inner, y, &Line::from(Span::styled(note, t.dim)));
            y += 1;
        }
        for gpu in g.gpus {
            let (owners, foreign) = match g.agent {
                None => (model::gpu_owners(s, gpu), model::foreign_pids(s, gpu)),
                Some(a) => (node_gpu_owners(s, a, gpu), 0),
            };
            let mut line = indent(gpu_row(ctx, gpu, &c, w.saturating_sub(2), &owners, foreign));
            if g.lost().is_some() {
                line = grey(line, t.dim);
            }
            put_line(buf, inner, y, &line);
            y += 1;
        }
    }
}

fn render_summary(ctx: &Ctx, groups: &[Group], inner: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let w = inner.width as usize;
    let name_w = groups
        .iter()
        .map(|g| fmt::unicode_width_shim::width(&g.name))
        .max()
        .unwrap_or(4)
        .clamp(4, 16);
    let head = format!(
        "{} {} {} {} {} {}",
        rpad("node", name_w),
        lpad("GPUs", 4),
        lpad("util min/med/max", 16),
        lpad("mem GiB", 13),
        lpad("power", 7),
        "worst GPU",
    );
    put_line(
        buf,
        inner,
        0,
        &Line::from(Span::styled(fmt::trunc(&head, w), t.label)),
    );
    let rows = inner.height.saturating_sub(1) as usize;
    let n = groups.len();
    let shown = if n > rows { rows.saturating_sub(1) } else { n };
    for (i, g) in groups.iter().take(shown).enumerate() {
        let sm = summarize(g.gpus);
        let util = sm
            .util
            .map_or_else(|| NA.to_string(), |(a, m, b)| format!("{a}/{m}/{b}%"));
        let mem = match (sm.mem_used, sm.mem_total) {
            (Some(u), Some(tot)) => format!("{}/{}", fmt::gib(u), fmt::gib(tot)),
            (Some(u), None) => format!("{}/{NA}", fmt::gib(u)),
            _ => NA.to_string(),
        };
        let power = sm.power_w.map_or_else(
            || NA.to_string(),
            |p| {
                if p >= 1000.0 {
                    format!("{:.1}kW", p / 1000.0)
                } else {
                    format!("{p:.0}W")
                }
            },
        );
        let worst = sm
            .worst
            .map_or_else(|| NA.to_string(), |(i, why)| format!("#{i} {why}"));
        let mut spans = vec![
            Span::styled(rpad(&g.name, name_w), t.text),
            Span::raw(" "),
            Span::styled(lpad(&sm.gpus.to_string(), 4), t.value),
            Span::raw(" "),
            Span::styled(lpad(&util, 16), t.value),
            Span::raw(" "),
            Span::styled(lpad(&mem, 13), t.text),
            Span::raw(" "),
            Span::styled(lpad(&power, 7), t.text),
            Span::raw(" "),
            Span::styled(worst, t.warn),
        ];
        if g.agent.is_some_and(NodeGpus::simulated) {
            spans.push(Span::styled(" SIMULATED", t.warn));
        }
        let mut line = Line::from(spans);
        if let Some(why) = g.lost() {
            line = grey(line, t.dim);
            line.spans
                .push(Span::styled(format!(" LOST: {why}"), t.warn));
        }
        put_line(buf, inner, (i + 1) as u16, &line);
    }
    if shown < n {
        put_line(
            buf,
            inner,
            (shown + 1) as u16,
            &Line::from(Span::styled(
                format!("+{} more nodes (a taller terminal shows them)", n - shown),
                t.dim,
            )),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuSample;

    fn g(i: u32, util: Option<u32>, temp: u32) -> GpuView {
        GpuView {
            latest: GpuSample {
                index: i,
                util_pct: util,
                temp_c: Some(temp),
                mem_used: Some(1 << 30),
                mem_total: Some(4 << 30),
                power_w: Some(500.0),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_node_summary_names_its_worst_gpu() {
        let v = vec![
            g(0, Some(90), 60),
            g(1, Some(12), 50),
            g(2, Some(12), 70),
            g(3, None, 40),
        ];
        let s = summarize(&v);
        assert_eq!(s.util, Some((12, 12, 90)), "median of 12, 12, 90");
        assert_eq!(s.worst, Some((2, "12%".into())), "ties: the hotter");
        assert_eq!(s.mem_used, Some(4 << 30));
        assert_eq!(s.power_w, Some(2000.0));
        let mut broken = v.clone();
        broken[3].latest.error = Some("lost".into());
        assert_eq!(summarize(&broken).worst, Some((3, "unreadable".into())));
        let e = summarize(&[]);
        assert_eq!((e.util, e.worst, e.power_w), (None, None, None));
    }
}
