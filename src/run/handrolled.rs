//! The hand-rolled experiment's switches (workers/handrolled, issue 12): how the one process
//! issues its k replicas' work, and how it all-reduces their gradients by tensor copies. Each
//! pair is a curve of its own, and the deficits view sets them beside DDP.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Who issues each replica's forward, backward and optimizer step.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, Default, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum HandDispatch {
    /// One thread, every replica in turn (the book's single Python thread).
    #[default]
    #[value(
        help = "One thread issues every replica's work in turn (the book's single Python thread)"
    )]
    Single,
    /// One OS thread per replica.
    #[value(help = "One OS thread per replica")]
    Threads,
}

/// How the gradients are summed across replicas.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, Default, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum HandReduce {
    /// Everything to device 0, summed there, sent back (the book's hub).
    #[default]
    #[value(help = "Gather to device 0, sum, send back (the book's hub)")]
    Star,
    /// Chunked reduce-scatter then all-gather around a ring of device-to-device copies.
    #[value(
        help = "Chunked reduce-scatter then all-gather around a ring of device-to-device copies"
    )]
    Ring,
}

/// One hand-rolled variant: `single+star`, `threads+star`, `threads+ring`, …
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, Default)]
pub struct HandRolled {
    pub dispatch: HandDispatch,
    pub reduce: HandReduce,
}

crate::util::names!(HandDispatch {
    Single => "single",
    Threads => "threads",
});

crate::util::names!(HandReduce {
    Star => "star",
    Ring => "ring",
});

impl HandRolled {
    /// The deficits view's columns, from the book's loop to the one with both fixes.
    pub const DEFICITS: [HandRolled; 3] = [
        HandRolled {
            dispatch: HandDispatch::Single,
            reduce: HandReduce::Star,
        },
        HandRolled {
            dispatch: HandDispatch::Threads,
            reduce: HandReduce::Star,
        },
        HandRolled {
            dispatch: HandDispatch::Threads,
            reduce: HandReduce::Ring,
        },
    ];

    /// `single+star` (the store's column and every label).
    pub fn label(self) -> String {
        format!("{}+{}", self.dispatch.as_str(), self.reduce.as_str())
    }
    pub fn parse(s: &str) -> Option<Self> {
        let (d, r) = s.split_once('+')?;
        Some(HandRolled {
            dispatch: d.parse().ok()?,
            reduce: r.parse().ok()?,
        })
    }
}

impl fmt::Display for HandRolled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip() {
        for h in HandRolled::DEFICITS {
            assert_eq!(HandRolled::parse(&h.label()), Some(h));
        }
        assert_eq!(HandRolled::default().label(), "single+star");
        assert_eq!(
            HandRolled::parse("single+ring").map(|h| h.reduce),
            Some(HandReduce::Ring)
        );
        for bad in ["single", "star+single", "single+star+x", ""] {
            assert_eq!(HandRolled::parse(bad), None, "{bad}");
        }
    }
}
