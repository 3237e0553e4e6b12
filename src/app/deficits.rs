//! The deficits table: at each k, samples/s of the hand-rolled loop as the book wrote it
//! (single+star), with one thread per replica (threads+star), with a ring all-reduce as well
//! (threads+ring), and DDP (weak scaling, same model, batch and data) — so each fix's worth on
//! this machine is read off one row. Each cell is the latest completed run of its curve.

use crate::run::{HandRolled, RunSpec, RunStatus, RunView};
use std::collections::BTreeMap;

/// The table's columns, in order: the three hand-rolled variants, then DDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Hand(HandRolled),
    Ddp,
}

impl Column {
    pub const ALL: [Column; 4] = [
        Column::Hand(HandRolled::DEFICITS[0]),
        Column::Hand(HandRolled::DEFICITS[1]),
        Column::Hand(HandRolled::DEFICITS[2]),
        Column::Ddp,
    ];

    /// `single+star`, …, `ddp`.
    pub fn label(self) -> String {
        match self {
            Column::Hand(h) => h.label(),
            Column::Ddp => "ddp".into(),
        }
    }

    /// The spec of this column's curve at the anchor's setting (k is not part of a curve).
    fn spec(self, anchor: &RunSpec) -> RunSpec {
        let mut s = anchor.clone();
        match self {
            Column::Hand(hand) => s.family = anchor.family.with_hand(hand),
            // The table's first column (`FamilyKind::deficit_columns`): DDP.
            Column::Ddp => {
                let columns = anchor.kind().deficit_columns().unwrap_or_default();
                if let Some(ddp) = columns.into_iter().next() {
                    s.family = ddp;
                }
            }
        }
        s
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub run_id: String,
    pub samples_per_s: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub k: u32,
    /// One per `Column::ALL`.
    pub cells: [Option<Cell>; 4],
}

impl Row {
    /// A hand-rolled cell as a fraction of DDP's samples/s at the same k.
    pub fn of_ddp(&self, i: usize) -> Option<f64> {
        let ddp = self.cells[3].as_ref()?.samples_per_s;
        let x = self.cells[i].as_ref()?.samples_per_s;
        (ddp > 0.0).then(|| x / ddp)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Deficits {
    /// `nccl resnet18 · batch 256/rank` — what every cell shares.
    pub title: String,
    pub rows: Vec<Row>,
}

/// The table at `anchor`'s setting (any run of the four curves will do as the anchor).
pub fn table(runs: &[RunView], anchor: &RunSpec) -> Deficits {
    let keys: Vec<_> = Column::ALL
        .iter()
        .map(|c| c.spec(anchor).curve_key())
        .collect();
    let mut rows: BTreeMap<u32, [Option<(f64, Cell)>; 4]> = BTreeMap::new();
    for r in runs.iter().filter(|r| {
        r.status == RunStatus::Completed && !r.spec.control && r.figures.aggregate.is_some()
    }) {
        let key = r.spec.curve_key();
        let Some(col) = keys.iter().position(|k| *k == key) else {
            continue;
        };
        let sps = r
            .figures
            .aggregate
            .as_ref()
            .map_or(0.0, |a| a.samples_per_s);
        let slot = &mut rows.entry(r.spec.k).or_default()[col];
        if slot
            .as_ref()
            .is_none_or(|(t, _)| r.clock.started_unix >= *t)
        {
            *slot = Some((
                r.clock.started_unix,
                Cell {
                    run_id: r.id.clone(),
                    samples_per_s: sps,
                },
            ));
        }
    }
    let ddp = Column::Ddp.spec(anchor).curve_key();
    Deficits {
        title: format!("{} · {}", ddp.title(), ddp.batch),
        rows: rows
            .into_iter()
            .map(|(k, cells)| Row {
                k,
                cells: cells.map(|c| c.map(|(_, cell)| cell)),
            })
            .collect(),
    }
}

/// The run whose setting the deficits view shows: `run` if it is hand-rolled, else the latest
/// hand-rolled run.
pub fn anchor<'a>(runs: &'a [RunView], run: Option<&'a RunView>) -> Option<&'a RunView> {
    run.filter(|r| r.spec.kind().has_deficits_pane())
        .or_else(|| {
            runs.iter()
                .filter(|r| r.spec.kind().has_deficits_pane())
                .max_by(|a, b| a.clock.started_unix.total_cmp(&b.clock.started_unix))
        })
}

/// The table as text (`ddptop run handrolled`), one line per k.
pub fn text(d: &Deficits) -> String {
    let mut out = format!("deficits — samples/s (% of DDP) — {}\n", d.title);
    out.push_str(&format!("{:>3}", "k"));
    for c in Column::ALL {
        out.push_str(&format!("  {:>20}", c.label()));
    }
    out.push('\n');
    for row in &d.rows {
        out.push_str(&format!("{:>3}", row.k));
        for (i, cell) in row.cells.iter().enumerate() {
            let v = match (cell, row.of_ddp(i).filter(|_| i < 3)) {
                (Some(c), Some(f)) => format!("{:.1} ({:.0}%)", c.samples_per_s, f * 100.0),
                (Some(c), None) => format!("{:.1}", c.samples_per_s),
                (None, _) => "—".into(),
            };
            out.push_str(&format!("  {v:>20}"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Backend;
    use crate::run::{Aggregate, Experiment, Family};

    fn done(id: &str, spec: RunSpec, t: f64, sps: f64) -> RunView {
        let mut r = RunView::new(id.into(), spec, std::time::Instant::now(), t);
        r.status = RunStatus::Completed;
        r.figures.aggregate = Some(Aggregate {
            samples_per_s: sps,
            per_rank: vec![sps],
            rank_min: sps,
            rank_max: sps,
        });
        r
    }

    fn hand(k: u32, i: usize) -> RunSpec {
        let mut s = RunSpec::new(Experiment::Handrolled, k, Backend::Nccl);
        s.family = Family::Handrolled {
            hand: HandRolled::DEFICITS[i],
        };
        s
    }

    #[test]
    fn each_cell_is_the_latest_run_of_its_curve_and_ddp_is_weak_at_the_same_setting() {
        // The deficits sweep runs DDP without the book's settings, as the tch loop runs.
        let weak = |k| {
            let mut s = RunSpec::new(Experiment::Weak, k, Backend::Nccl);
            s.torch = crate::run::TorchSettings::Off;
            s
        };
        let mut other_batch = weak(2);
        other_batch.batch = 128;
        let runs = vec![
            done("w1", weak(1), 1.0, 5600.0),
            done("w2old", weak(2), 2.0, 9000.0),
            done("w2", weak(2), 3.0, 11000.0),
            done("x", other_batch, 4.0, 1.0),
            done("h1", hand(1, 0), 5.0, 5000.0),
            done("h2a", hand(2, 0), 6.0, 8800.0),
            done("h2c", hand(2, 2), 7.0, 9900.0),
        ];
        let d = table(&runs, &runs[4].spec);
        assert_eq!(d.title, "nccl resnet18 PyTorch defaults · batch 256/rank");
        assert_eq!(d.rows.len(), 2);
        let ids = |row: &Row| -> Vec<Option<String>> {
            row.cells
                .iter()
                .map(|c| c.as_ref().map(|c| c.run_id.clone()))
                .collect()
        };
        assert_eq!(
            ids(&d.rows[0]),
            [Some("h1".into()), None, None, Some("w1".into())]
        );
        assert_eq!(
            ids(&d.rows[1]),
            [
                Some("h2a".into()),
                None,
                Some("h2c".into()),
                Some("w2".into())
            ]
        );
        assert_eq!(d.rows[1].of_ddp(0), Some(0.8));
        let text = text(&d);
        assert!(text.contains("8800.0 (80%)"), "{text}");
        assert!(text.contains("11000.0"), "{text}");
    }

    #[test]
    fn runs_that_did_not_complete_leave_their_cell_empty() {
        let mut failed = done("f", hand(2, 1), 1.0, 123.0);
        failed.status = RunStatus::Failed;
        let d = table(&[failed], &hand(2, 1));
        assert!(d.rows.is_empty());
    }
}
