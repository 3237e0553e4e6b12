//! The Receipt and Layout panes of a JAX run, in the Timeline's and the Probe's places (a JAX run
//! has neither buckets nor a no_sync probe). Nobody wrote a collective, so the Receipt shows the
//! ones XLA wrote into the compiled step (count, largest and total size per kind, the passes that
//! merged them), the k=1 equality check and memory per device; the Layout shows the batch and one
//! weight as `jax.debug.visualize_array_sharding` drew them, before and after the step.

use super::layout::PaneId;
use super::{Ctx, empty_note, frame_block, put_line};
use crate::app::equality::{self, Equality, Verdict};
use crate::protocol::HloOpStats;
use crate::run::{RunStatus, RunView};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// One row of the op table.
#[derive(Debug, Clone, PartialEq)]
pub struct OpRow {
    pub name: &'static str,
    pub stats: Option<HloOpStats>,
}

/// One device's memory line.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceMemory {
    pub device: u32,
    pub param_bytes: Option<u64>,
    pub optim_bytes: Option<u64>,
    pub peak_bytes: Option<u64>,
}

/// What the pane shows, derived from the run alone (pure, unit-tested).
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptView {
    /// `k=2 · data sharding · cpu`
    pub heading: String,
    pub ops: Vec<OpRow>,
    pub combined_by: Vec<String>,
    /// The k=1 vs k verdict over every checked step and the parameters.
    pub equality: Option<Equality>,
    pub memory: Vec<DeviceMemory>,
    /// (name, drawing) of the arrays before the step, with blank rows dropped.
    pub layouts: Vec<(String, Vec<String>)>,
    /// Arrays whose layout after the step differs from before (empty: all unchanged).
    pub changed_after: Vec<String>,
    /// Whether an `after` layout was reported at all.
    pub has_after: bool,
    /// What NCCL's profiler plugin saw XLA execute per step, against the receipt (live, or as
    /// stored with the run); empty without the plugin.
    pub executed: Vec<crate::run::collectives::StepCount>,
}

/// One executed kind beside the receipt: `all_reduce 1.00/step · 44.7 MB · 10 steps: matches
/// the receipt (1 × 44.7 MB)`, and whether it matches (`None`: the receipt has no such kind).
pub fn executed_line(s: &crate::run::collectives::StepCount) -> (String, Option<bool>) {
    let head = format!(
        "{} {:.2}/step · {} · {} steps",
        s.func,
        s.count,
        mb(s.bytes as u64),
        s.steps
    );
    let tail = match (s.receipt, s.matches) {
        (Some((n, b)), Some(true)) => format!(": matches the receipt ({n} × {})", mb(b)),
        (Some((n, b)), _) => format!(": MISMATCH, the receipt says {n} × {}", mb(b)),
        (None, _) => ": not in the receipt".to_string(),
    };
    (head + &tail, s.matches)
}

pub fn view(run: &RunView) -> Option<ReceiptView> {
    let h = run.figures.hlo.as_ref()?;
    let ops = h.ops.unwrap_or_default();
    let mut heading = format!("k={}", h.k);
    if let Some(s) = h.sharding {
        heading.push_str(match s {
            crate::protocol::Sharding::Data => " · data sharding",
            crate::protocol::Sharding::Fsdp => " · fsdp sharding",
        });
    }
    if let Some(p) = &h.platform {
        heading.push_str(&format!(" · {p}"));
    }
    let all_reduce = ops.all_reduce.or(Some(HloOpStats {
        count: h.all_reduce_ops as u64,
        largest_elems: 0,
        total_elems: 0,
        total_bytes: h.all_reduce_bytes,
    }));
    let layout = h.layout.clone().unwrap_or_default();
    let mut layouts = Vec::new();
    let mut changed_after = Vec::new();
    let mut has_after = false;
    for (name, text) in &layout {
        if let Some(base) = name.strip_suffix(" (before)") {
            layouts.push((base.to_string(), compact(text)));
            if let Some(after) = layout.get(&format!("{base} (after)")) {
                has_after = true;
                if after != text {
                    changed_after.push(base.to_string());
                }
            }
        }
    }
    // The batch first, then the weights: the picture reads "split here, whole there".
    layouts.sort_by_key(|(n, _)| (!n.starts_with("batch"), n.clone()));
    let memory = run
        .figures
        .device_memory
        .iter()
        .map(|(d, m)| DeviceMemory {
            device: *d,
            param_bytes: m.param_bytes,
            optim_bytes: m.optim_bytes,
            peak_bytes: m.peak_bytes,
        })
        .collect();
    Some(ReceiptView {
        heading,
        ops: vec![
            OpRow {
                name: "all-reduce",
                stats: all_reduce,
            },
            OpRow {
                name: "all-gather",
                stats: ops.all_gather,
            },
            OpRow {
                name: "reduce-scatter",
                stats: ops.reduce_scatter,
            },
        ],
        combined_by: h.combined_by.clone().unwrap_or_default(),
        equality: equality::equality(&run.figures.checks),
        memory,
        layouts,
        changed_after,
        has_after,
        executed: crate::app::coll_store::summary(run)
            .map(|s| s.per_step)
            .unwrap_or_default(),
    })
}

/// visualize_array_sharding pads each shard's box with blank rows to a fixed height; without
/// them a k=2 split takes 5 rows instead of 11 and still reads the same.
pub fn compact(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            let inner = l.trim_matches(|c| c == '│' || c == ' ');
            !(l.starts_with('│') && inner.is_empty())
        })
        .map(str::to_string)
        .collect()
}

/// `11.17M`, `5771`, `2.36M` elements.
pub fn elems(n: u64) -> String {
    let x = n as f64;
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else {
        n.to_string()
    }
}

/// Decimal megabytes, as the book counts floats and bytes: `44.8 MB`.
pub fn mb(b: u64) -> String {
    let x = b as f64 / 1e6;
    if x >= 10.0 {
        format!("{x:.1} MB")
    } else {
        format!("{x:.2} MB")
    }
}

pub fn render(ctx: &Ctx, run: &RunView, area: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let v = view(run);
    let mut title = vec![Span::raw("Receipt")];
    if let Some(v) = &v {
        title.push(Span::styled(format!(" {}", v.heading), t.value));
    }
    title.push(Span::styled(
        " collectives XLA wrote into the jitted step",
        t.dim,
    ));
    let inner = frame_block(ctx, PaneId::Timeline, title, area, buf);
    if inner.height == 0 {
        return;
    }
    let Some(v) = v else {
        empty_note(ctx, inner, waiting(run), buf);
        return;
    };
    let mut lines: Vec<Line> = Vec::new();
    lines.push(Line::from(Span::styled(
        format!(
            "{:<15}{:>5}  {:>9}  {:>9}",
            "collective", "ops", "largest", "total"
        ),
        t.label,
    )));
    for row in &v.ops {
        let (count, largest, total) = match &row.stats {
            Some(s) if s.count > 0 => (
                s.count.to_string(),
                if s.largest_elems > 0 {
                    elems(s.largest_elems)
                } else {
                    "n/a".into()
                },
                mb(s.total_bytes),
            ),
            Some(_) => ("0".into(), String::new(), String::new()),
            None => ("n/a".into(), String::new(), String::new()),
        };
        lines.push(Line::from(vec![
            Span::styled(format!("{:<15}", row.name), t.text),
            Span::styled(format!("{count:>5}  {largest:>9}  {total:>9}"), t.value),
        ]));
    }
    let combined = if v.combined_by.is_empty() {
        "none (no collective was merged)".to_string()
    } else {
        v.combined_by.join(", ")
    };
    lines.push(Line::from(vec![
        Span::styled("combined by ", t.label),
        Span::styled(combined, t.text),
    ]));
    // Beside what XLA wrote, what NCCL ran (its profiler plugin), one line per kind.
    for s in &v.executed {
        let (text, ok) = executed_line(s);
        let style = match ok {
            Some(true) => t.good,
            Some(false) => t.bad,
            None => t.text,
        };
        lines.push(Line::from(vec![
            Span::styled("executed (NCCL) ", t.label),
            Span::styled(text, style),
        ]));
    }
    match &v.equality {
        Some(e) => {
            let style = match e.verdict {
                Verdict::Ok => t.good,
                Verdict::Failed => t.bad,
                Verdict::Incomplete => t.warn,
            };
            lines.push(Line::from(vec![
                Span::styled(format!("k=1 vs k={} ", run.spec.k), t.label),
                Span::styled(e.verdict.as_str(), style),
                Span::styled(format!(" {}", e.detail()), t.text),
            ]));
            // The tolerance the verdict was decided with, as the worker stated it.
            let mut rule = e
                .rule
                .clone()
                .unwrap_or_else(|| "tolerance not stated".into());
            if e.test_switch {
                rule = format!("TEST SWITCH: reduction deliberately broken · {rule}");
            }
            lines.push(Line::from(Span::styled(rule, t.dim)));
        }
        None => lines.push(Line::from(Span::styled(
            "equality check: none (k=1, or --no-check)",
            t.dim,
        ))),
    }
    if !v.memory.is_empty() {
        let mut spans = vec![Span::styled("memory/device ", t.label)];
        for (i, m) in v.memory.iter().enumerate() {
            if i > 0 {
                spans.push(Span::styled(" · ", t.dim));
            }
            let mut s = format!(
                "dev{} params {}",
                m.device,
                super::fmt::opt(m.param_bytes, mb)
            );
            if m.optim_bytes.is_some_and(|o| o > 0) {
                s.push_str(&format!(" optim {}", super::fmt::opt(m.optim_bytes, mb)));
            }
            s.push_str(&format!(" peak {}", super::fmt::opt(m.peak_bytes, mb)));
            spans.push(Span::styled(s, t.value));
        }
        lines.push(Line::from(spans));
    }
    for (y, l) in lines.iter().enumerate() {
        put_line(buf, inner, y as u16, l);
    }
}

fn waiting(run: &RunView) -> &'static str {
    match run.status {
        RunStatus::Starting | RunStatus::Running | RunStatus::Stalled => {
            "compiling the step: the receipt comes with the first step"
        }
        _ => "this run reported no receipt (it ended before its first step)",
    }
}

/// The Layout pane of a JAX run, in the Probe's place: the batch and one weight as
/// `jax.debug.visualize_array_sharding` drew them before the step, side by side, and whether
/// the step changed them.
pub fn render_layout(ctx: &Ctx, run: &RunView, area: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let v = view(run).filter(|v| !v.layouts.is_empty());
    let when = match &v {
        Some(v) if !v.has_after => " before the step".to_string(),
        Some(v) if v.changed_after.is_empty() => " before the step = after it".to_string(),
        Some(v) => format!(
            " before the step; changed after it: {}",
            v.changed_after.join(", ")
        ),
        None => String::new(),
    };
    let title = vec![
        Span::raw("Layout"),
        Span::styled(when, t.value),
        Span::styled(" jax.debug.visualize_array_sharding", t.dim),
    ];
    let inner = frame_block(ctx, PaneId::Probe, title, area, buf);
    if inner.height == 0 {
        return;
    }
    let Some(v) = v else {
        empty_note(ctx, inner, waiting(run), buf);
        return;
    };
    let w = inner.width as usize;
    let mut x = 0usize;
    for (name, rows) in &v.layouts {
        let rows = named(name, rows);
        let bw = rows.iter().map(|r| r.chars().count()).max().unwrap_or(0);
        if x + bw > w {
            break;
        }
        let col = Rect::new(inner.x + x as u16, inner.y, bw as u16, inner.height);
        for (i, r) in rows.iter().enumerate() {
            put_line(
                buf,
                col,
                i as u16,
                &Line::from(Span::styled(r.clone(), t.value)),
            );
        }
        x += bw + 2;
    }
}

/// The drawing with the array's name set into its top border (`┌batch───┐`), or above it when
/// the box is narrower than the name.
pub fn named(name: &str, rows: &[String]) -> Vec<String> {
    let mut out = rows.to_vec();
    let Some(top) = out.first_mut() else {
        return vec![name.to_string()];
    };
    let width = top.chars().count();
    let n = name.chars().count();
    if top.starts_with('┌') && n + 2 <= width {
        *top = format!("┌{name}{}", top.chars().skip(n + 1).collect::<String>());
    } else {
        out.insert(0, name.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_rows_of_a_drawing_go() {
        let text = "┌───────┐\n│       │\n│ CPU 0 │\n│       │\n├───────┤\n│ CPU 1 │\n│       │\n└───────┘";
        assert_eq!(
            compact(text),
            [
                "┌───────┐",
                "│ CPU 0 │",
                "├───────┤",
                "│ CPU 1 │",
                "└───────┘"
            ]
        );
    }

    #[test]
    fn the_name_goes_into_the_top_border() {
        let rows: Vec<String> = ["┌───────┐", "│CPU 0,1│", "└───────┘"]
            .map(String::from)
            .to_vec();
        assert_eq!(named("batch", &rows)[0], "┌batch──┐");
        assert_eq!(named("fc.kernel", &rows)[..2], ["fc.kernel", "┌───────┐"]);
    }

    #[test]
    fn executed_collectives_read_beside_the_receipt() {
        use crate::run::collectives::StepCount;
        let mut s = StepCount {
            func: "all_reduce".into(),
            count: 1.0,
            bytes: 44703272.0,
            steps: 10,
            receipt: Some((1, 44703272)),
            matches: Some(true),
        };
        assert_eq!(
            executed_line(&s),
            (
                "all_reduce 1.00/step · 44.7 MB · 10 steps: matches the receipt (1 × 44.7 MB)"
                    .to_string(),
                Some(true)
            )
        );
        s.receipt = Some((2, 44703272));
        s.matches = Some(false);
        assert!(
            executed_line(&s)
                .0
                .ends_with("MISMATCH, the receipt says 2 × 44.7 MB")
        );
    }

    #[test]
    fn sizes_read_like_the_book() {
        assert_eq!(elems(11_166_144), "11.17M");
        assert_eq!(elems(5771), "5771");
        assert_eq!(elems(394_891), "394.9k");
        assert_eq!(mb(44_750_124), "44.8 MB");
        assert_eq!(mb(1_589_484), "1.59 MB");
    }
}
