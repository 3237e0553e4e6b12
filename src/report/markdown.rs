//! The report as Markdown: what a person pastes into an issue or a lab notebook.

use super::Report;
use super::doc::{Align, Block, PlotSlot};

/// A plot file written beside the report, linked from where its slot is.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub slot: PlotSlot,
    pub alt: String,
    pub path: String,
}

/// A table cell: a pipe would split the cell, a newline the row.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
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
            Block::Heading(level, text) => {
                o.push_str(&"#".repeat(level as usize));
                o.push(' ');
                o.push_str(&cell(&text));
                o.push('\n');
            }
            Block::Para(text) => {
                o.push_str(&text);
                o.push('\n');
            }
            Block::Warning(text) => {
                o.push_str(&format!("**{text}**\n"));
            }
            Block::Plot(slot) => {
                for img in images.iter().filter(|i| i.slot == slot) {
                    o.push_str(&format!("![{}]({})\n", img.alt, img.path));
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
                    o.push_str(&format!("- {}\n", it.replace('\n', " ")));
                }
            }
            Block::Code(text) => {
                o.push_str("```sh\n");
                o.push_str(&text);
                o.push_str("\n```\n");
            }
        }
    }
    o
}
