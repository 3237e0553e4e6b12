//! The report as one self-contained HTML page: tables plus the plots inlined as SVG, so the
//! file can be mailed or attached without its images getting lost.

use super::Report;
use super::block::{Align, Block, PlotSlot};
use super::plot::Plot;

pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1em}th,td{border:1px solid #ccc;padding:.25em .6em}\
th{background:#f3f3f3}td.r,th.r{text-align:right}.warn{background:#fff3cd;border:1px solid #e0c060;padding:.5em .8em;font-weight:bold}\
pre{background:#f6f6f6;padding:.6em;overflow-x:auto}figure{margin:1em 0}svg{max-width:100%;height:auto}";

/// The SVG of a slot's plot; a plot that cannot be drawn is left out (the table below it says
/// the same in numbers).
fn plot_svg(r: &Report, slot: PlotSlot) -> Option<String> {
    let svg = match slot {
        PlotSlot::Scaling => Plot::Scaling(&r.curves).svg(),
        PlotSlot::Bench => Plot::Bench(&r.bench_settings()).svg(),
        PlotSlot::Timeline(i) => Plot::Timeline(r.timelines.get(i)?).svg(),
    };
    svg.ok()
}

pub fn render(r: &Report) -> String {
    let mut o =
        String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    o.push_str(&format!("<title>{}</title>\n", escape(&r.title)));
    o.push_str(&format!(
        "<meta name=\"generator\" content=\"ddptop {}\">\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(&r.ddptop_version)
    ));
    for b in super::doc::build(r) {
        match b {
            Block::Heading(level, text) => {
                o.push_str(&format!("<h{level}>{}</h{level}>\n", escape(&text)));
            }
            Block::Para(text) => o.push_str(&format!("<p>{}</p>\n", escape(&text))),
            Block::Warning(text) => {
                o.push_str(&format!("<p class=\"warn\">{}</p>\n", escape(&text)));
            }
            Block::Plot(slot) => {
                if let Some(svg) = plot_svg(r, slot) {
                    // The SVG's own XML declaration is not allowed inside HTML.
                    let body = svg.trim_start_matches(|c| c != '<');
                    let body = match body.strip_prefix("<?xml") {
                        Some(rest) => rest.split_once("?>").map_or(body, |(_, b)| b),
                        None => body,
                    };
                    o.push_str("<figure>\n");
                    o.push_str(body.trim());
                    o.push_str("\n</figure>\n");
                }
            }
            Block::Table { header, rows } => {
                let class = |a: &Align| match a {
                    Align::Left => "",
                    Align::Right => " class=\"r\"",
                };
                o.push_str("<table>\n<tr>");
                for (h, a) in &header {
                    o.push_str(&format!("<th{}>{}</th>", class(a), escape(h)));
                }
                o.push_str("</tr>\n");
                for row in rows {
                    o.push_str("<tr>");
                    for (c, (_, a)) in row.iter().zip(&header) {
                        o.push_str(&format!("<td{}>{}</td>", class(a), escape(c)));
                    }
                    o.push_str("</tr>\n");
                }
                o.push_str("</table>\n");
            }
            Block::List(items) => {
                o.push_str("<ul>\n");
                for it in items {
                    o.push_str(&format!("<li>{}</li>\n", escape(&it)));
                }
                o.push_str("</ul>\n");
            }
            Block::Code(text) => {
                o.push_str(&format!("<pre><code>{}</code></pre>\n", escape(&text)))
            }
        }
    }
    o.push_str("</body>\n</html>\n");
    o
}
