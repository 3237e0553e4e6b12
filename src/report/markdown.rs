//! The report as Markdown: what a person pastes into an issue or a lab notebook.

use super::Report;
use super::block::{Align, Block, PlotSlot};

/// A plot file written beside the report, linked from where its slot is.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub slot: PlotSlot,
    pub alt: String,
    pub path: String,
}

/// Text from the report, some of it a worker's or a script's (a failure reason, a device or
/// host name): without control characters, and with `&`, `<` and `>` as entities, since
/// Markdown passes raw HTML (`<script>`, `<img onerror>`) through to whatever renders it.
fn text(s: &str) -> String {
    crate::util::printable(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A table cell: a pipe would split the cell, a newline the row.
fn cell(s: &str) -> String {
    text(s).replace('|', "\\|")
}

/// A fence longer than any run of backticks in `code`, so the code cannot close it.
fn fence(code: &str) -> String {
    let longest = code.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

pub fn render(r: &Report, images: &[Image]) -> String {
    let mut o = String::new();
    let has_image = |slot: &PlotSlot| images.iter().any(|i| i.slot == *slot);
    let blocks = super::doc::build(r)
        .into_iter()
        .filter(|b| !matches!(b, Block::Plot(slot) if !has_image(slot)));
    for b in blocks {
        if !o.is_empty() {
            o.push('\n');
        }
        match b {
            Block::Heading(level, t) => {
                o.push_str(&"#".repeat(level as usize));
                o.push(' ');
                o.push_str(&cell(&t));
                o.push('\n');
            }
            Block::Para(t) => {
                o.push_str(&text(&t));
                o.push('\n');
            }
            Block::Warning(t) => {
                o.push_str(&format!("**{}**\n", text(&t)));
            }
            Block::Plot(slot) => {
                for img in images.iter().filter(|i| i.slot == slot) {
                    o.push_str(&format!("![{}]({})\n", text(&img.alt), img.path));
                }
            }
            Block::Table { header, rows } => {
                let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
                o.push_str(&line(header.iter().map(|(h, _)| cell(h)).collect()));
                o.push_str(&line(
                    header
                        .iter()
                        .map(|(_, a)| match a {
                            Align::Left => "---".to_string(),
                            Align::Right => "---:".to_string(),
                        })
                        .collect(),
                ));
                for row in rows {
                    o.push_str(&line(row.iter().map(|c| cell(c)).collect()));
                }
            }
            Block::List(items) => {
                for it in items {
                    o.push_str(&format!("- {}\n", text(&it)));
                }
            }
            Block::Code(code) => {
                let code: String = code
                    .lines()
                    .map(crate::util::printable)
                    .collect::<Vec<_>>()
                    .join("\n");
                let f = fence(&code);
                o.push_str(&format!("{f}sh\n{code}\n{f}\n"));
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_text_cannot_inject_html_or_close_a_code_fence() {
        assert_eq!(
            cell("boom\u{1b}[2J<script>alert(1)</script> a|b"),
            "boom[2J&lt;script&gt;alert(1)&lt;/script&gt; a\\|b"
        );
        assert_eq!(fence("ddptop run weak"), "```");
        assert_eq!(fence("echo ```\n<b>"), "````");
    }
}
