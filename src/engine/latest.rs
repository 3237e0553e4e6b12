//! Each rank's latest timeline (`buckets` line), held back from the database between writes.
//!
//! Every timeline goes to the run's archive (`store::StepArchive`); of the ranks other than 0
//! the database keeps only what `load_details` reads back, each rank's latest. Writing it at
//! every flush was a row per rank twice a second (1,023 inserts a flush at 1,024 ranks), so
//! it is written every `EVERY` and when the run ends: a ddptop that dies mid-run leaves them
//! at most that old, and the archive has every one.

use crate::store::EventRow;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often a run's held timelines are written.
pub(super) const EVERY: Duration = Duration::from_secs(5);

#[derive(Default)]
pub(super) struct LatestTimelines {
    /// By run (a handful at most: searched in order).
    runs: Vec<Held>,
}

struct Held {
    run: String,
    /// The rank's latest line and when it came (Unix seconds, the row's time).
    lines: HashMap<u32, (f64, String)>,
    written: Instant,
}

impl LatestTimelines {
    /// `line` is `rank`'s newest timeline: it replaces the one held.
    pub(super) fn hold(&mut self, run: &str, rank: u32, line: String, now: Instant) {
        let unix = crate::util::unix_now();
        let i = match self.runs.iter().position(|h| h.run == run) {
            Some(i) => i,
            None => {
                self.runs.push(Held {
                    run: run.to_string(),
                    lines: HashMap::new(),
                    written: now,
                });
                self.runs.len() - 1
            }
        };
        self.runs[i].lines.insert(rank, (unix, line));
    }

    /// The rows of the runs last written `EVERY` ago or longer.
    pub(super) fn take_due(&mut self, now: Instant, out: &mut Vec<EventRow>) {
        // A run that sent no timeline for a whole period is forgotten (it may have ended).
        self.runs
            .retain(|h| !h.lines.is_empty() || now.duration_since(h.written) < EVERY);
        for h in &mut self.runs {
            if now.duration_since(h.written) >= EVERY {
                h.written = now;
                rows(h, out);
            }
        }
    }

    /// Every row held for `run`, which is ending.
    pub(super) fn take_run(&mut self, run: &str, out: &mut Vec<EventRow>) {
        if let Some(i) = self.runs.iter().position(|h| h.run == run) {
            rows(&mut self.runs.swap_remove(i), out);
        }
    }

    /// Every row held (ddptop is exiting).
    pub(super) fn take_all(&mut self, out: &mut Vec<EventRow>) {
        for mut h in self.runs.drain(..) {
            rows(&mut h, out);
        }
    }
}

fn rows(h: &mut Held, out: &mut Vec<EventRow>) {
    let mut lines: Vec<(u32, (f64, String))> = h.lines.drain().collect();
    lines.sort_unstable_by_key(|(rank, _)| *rank);
    out.extend(lines.into_iter().map(|(rank, (unix, body))| EventRow {
        run_id: h.run.clone(),
        unix,
        rank: Some(rank),
        kind: "buckets".into(),
        body,
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_line_per_rank_is_written_every_period_and_at_the_runs_end() {
        let t0 = Instant::now();
        let mut l = LatestTimelines::default();
        let mut out = Vec::new();
        for step in 1..=3 {
            for rank in [2, 1] {
                l.hold("r", rank, format!("r{rank}s{step}"), t0);
            }
        }
        l.hold("q", 1, "q1".into(), t0);
        l.take_due(t0 + EVERY / 2, &mut out);
        assert!(out.is_empty(), "not due yet");
        l.take_due(t0 + EVERY, &mut out);
        let bodies: Vec<&str> = out.iter().map(|r| r.body.as_str()).collect();
        assert_eq!(
            bodies,
            ["r1s3", "r2s3", "q1"],
            "each rank's newest, by rank"
        );
        assert!(out.iter().all(|r| r.kind == "buckets" && r.unix > 0.0));
        out.clear();
        l.hold("r", 1, "r1s4".into(), t0 + EVERY);
        l.take_due(t0 + EVERY + EVERY / 2, &mut out);
        assert!(
            out.is_empty(),
            "written at t0 + EVERY: the next one is due a period later"
        );
        l.take_run("r", &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].run_id.as_str(), out[0].rank), ("r", Some(1)));
        out.clear();
        l.take_run("r", &mut out);
        assert!(out.is_empty(), "taken once");
        // "q" was written at t0 + EVERY and sent nothing since: forgotten a period later.
        l.take_due(t0 + 2 * EVERY, &mut out);
        assert!(out.is_empty() && l.runs.is_empty());
        l.hold("q", 3, "q3".into(), t0);
        l.take_all(&mut out);
        assert_eq!(out.len(), 1);
        assert!(l.runs.is_empty());
    }
}
