//! One GPU's row and its columns: shared by this node's GPU pane (`gpus`) and the per-node
//! one (`gpu_nodes`), apart from both so that neither imports the other. Pure drawing.

use super::Ctx;
use super::fmt::{self, NA};
use ratatui::text::{Line, Span};
pub fn lpad(s: &str, w: usize) -> String {
    let s = fmt::trunc(s, w);
    let n = fmt::unicode_width_shim::width(&s);
    format!("{}{s}", " ".repeat(w.saturating_sub(n)))
}

pub fn rpad(s: &str, w: usize) -> String {
    let s = fmt::trunc(s, w);
    let n = fmt::unicode_width_shim::width(&s);
    format!("{s}{}", " ".repeat(w.saturating_sub(n)))
}

/// "NVIDIA H200" → "H200", "NVIDIA GeForce RTX 4090" → "RTX 4090".
pub fn short_gpu_name(n: &str) -> String {
    n.trim()
        .trim_start_matches("NVIDIA ")
        .trim_start_matches("GeForce ")
        .to_string()
}

pub struct Cols {
    name: usize,
    spark: usize,
    link: bool,
    owner: usize,
}

pub fn gpu_cols(w: usize) -> Cols {
    // idx 2, name, util spark + " 100%", mem 12, power 5, temp 5, [link 22], owner.
    let base = 2 + 1 + 8 + 1 + 8 + 5 + 1 + 12 + 1 + 5 + 1 + 5 + 1 + 8;
    let link = w >= base + 23;
    let mut extra = w.saturating_sub(base + if link { 23 } else { 0 });
    let name = 8 + extra.min(8);
    extra -= extra.min(8);
    let spark = 8 + extra.min(22);
    extra -= extra.min(22);
    let owner = 8 + extra;
    Cols {
        name,
        spark,
        link,
        owner,
    }
}

/// The column header of GPU rows.
pub fn gpu_head(c: &Cols, gpus: &[crate::gpu::GpuView]) -> String {
    let mut head = format!(
        "{} {} {} {} {} {}",
        rpad("#", 2),
        rpad("name", c.name),
        rpad("util (last minute)", c.spark + 5),
        lpad("mem GiB", 12),
        lpad("power", 5),
        lpad("temp", 5),
    );
    if c.link {
        // Several PCIe GPUs are read one per sample (`gpu::pcie`): the header says so.
        let pcie = gpus.iter().filter(|g| g.link == Some("PCIe")).count();
        let label = if pcie > 1 {
            "link B/s·PCIe in turn"
        } else {
            "link ↓rx ↑tx B/s"
        };
        head.push_str(&format!(" {}", rpad(label, 22)));
    }
    head.push_str(&format!(" {}", rpad("run·rank", c.owner)));
    head
}

/// One GPU's row: index, name, a minute of utilisation, memory, power, temperature, link and
/// the run·rank on it (`owners`; `foreign` processes of no known rank). Shared by this node's
/// rows and other nodes' (`gpu_nodes`).
pub fn gpu_row(
    ctx: &Ctx,
    g: &crate::gpu::GpuView,
    c: &Cols,
    w: usize,
    owners: &[(&str, u32)],
    foreign: usize,
) -> Line<'static> {
    let t = ctx.theme;
    let mut spans = vec![
        Span::styled(rpad(&g.index.to_string(), 2), t.value),
        Span::raw(" "),
        Span::styled(
            rpad(
                &g.name
                    .as_deref()
                    .map(short_gpu_name)
                    .unwrap_or_else(|| NA.into()),
                c.name,
            ),
            t.text,
        ),
        Span::raw(" "),
    ];
    if let Some(err) = &g.error {
        spans.push(Span::styled(
            fmt::trunc(&format!("error: {err}"), w.saturating_sub(c.name + 4)),
            t.bad,
        ));
        return Line::from(spans);
    }
    let hist: Vec<u64> = g.util_history.iter().copied().collect();
    spans.push(Span::styled(fmt::spark(&hist, c.spark, 100), t.spark));
    spans.push(Span::styled(
        lpad(&fmt::opt(g.util_pct, |u| format!("{u}%")), 5),
        t.value,
    ));
    spans.push(Span::raw(" "));
    let mem = match (g.mem_used, g.mem_total) {
        (Some(u), Some(tot)) => format!("{}/{}", fmt::gib(u), fmt::gib(tot)),
        (Some(u), None) => format!("{}/{NA}", fmt::gib(u)),
        (None, Some(tot)) => format!("{NA}/{}", fmt::gib(tot)),
        (None, None) => NA.into(),
    };
    spans.push(Span::styled(lpad(&mem, 12), t.text));
    spans.push(Span::raw(" "));
    spans.push(Span::styled(
        lpad(&fmt::opt(g.power_w, |p| format!("{p:.0}W")), 5),
        t.text,
    ));
    spans.push(Span::raw(" "));
    let temp_style = match g.temp_c {
        Some(c) if c >= 85 => t.bad,
        Some(c) if c >= 75 => t.warn,
        _ => t.text,
    };
    spans.push(Span::styled(
        lpad(&fmt::opt(g.temp_c, |c| format!("{c}°C")), 5),
        temp_style,
    ));
    if c.link {
        let kind = g.link.unwrap_or("link");
        let l = match (g.link_rx_kbs, g.link_tx_kbs) {
            (None, None) => NA.to_string(),
            (rx, tx) => format!(
                "{kind} ↓{} ↑{}",
                fmt::opt(rx, fmt::kbs),
                fmt::opt(tx, fmt::kbs)
            ),
        };
        spans.push(Span::raw(" "));
        spans.push(Span::styled(rpad(&l, 22), t.text));
    }
    spans.push(Span::raw(" "));
    let mut own = owners
        .iter()
        .map(|(id, r)| format!("{} r{r}", fmt::tiny_id(id)))
        .collect::<Vec<_>>()
        .join(",");
    if foreign > 0 {
        if !own.is_empty() {
            own.push_str(", ");
        }
        own.push_str(&format!("+{foreign} other"));
    }
    let own_style = if owners.is_empty() { t.dim } else { t.running };
    if own.is_empty() {
        own = "idle".into();
    }
    spans.push(Span::styled(fmt::trunc(&own, c.owner), own_style));
    Line::from(spans)
}
