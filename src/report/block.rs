//! The report's content types: a block (heading, paragraph, table, code, a plot's place), what
//! `doc` builds and the Markdown and HTML writers render; apart from `doc` so that a section
//! built in a file of its own (`phases`) and `doc`, which places it, do not import each other.

#[derive(Debug, Clone, PartialEq)]
pub enum Align {
    Left,
    Right,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Heading(u8, String),
    Para(String),
    /// A sentence a reader must not miss (SIMULATED data).
    Warning(String),
    /// Where a plot goes, when the writer has one for this slot.
    Plot(PlotSlot),
    Table {
        header: Vec<(String, Align)>,
        rows: Vec<Vec<String>>,
    },
    List(Vec<String>),
    Code(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotSlot {
    Scaling,
    Bench,
    /// The n-th timeline of the report.
    Timeline(usize),
}
