//! The report's per-phase table of a run (issue 46; TraceML's view): for each phase of the
//! step, the median rank's time beside the worst rank's and worst ÷ median, as the dashboard's
//! details show them (`ui::phases`) and `--json` has them (`phase_scores`).

use super::RunInfo;
use super::block::{Align, Block};

/// A heading, what the figures are, and the table, for a run with per-phase figures; nothing
/// for one without (k=1, or stored before ddptop kept them).
pub fn blocks(run: &RunInfo) -> Vec<Block> {
    if run.phase_scores.is_empty() {
        return Vec::new();
    }
    let header = [
        ("phase", Align::Left),
        ("median rank (ms)", Align::Right),
        ("worst rank (ms)", Align::Right),
        ("worst rank", Align::Right),
        ("worst ÷ median", Align::Right),
    ]
    .iter()
    .map(|(h, a)| (h.to_string(), a.clone()))
    .collect();
    let rows = run
        .phase_scores
        .iter()
        .map(|p| {
            vec![
                p.phase.clone(),
                super::fmt_ms(p.median_ms),
                super::fmt_ms(p.worst_ms),
                p.worst_rank.to_string(),
                format!("{:.2}×", p.worst_vs_median),
            ]
        })
        .collect();
    vec![
        Block::Heading(3, format!("Per phase: {}", run.id)),
        Block::Para(format!(
            "Each rank's median over the run's newest window of timed steps as of its end \
             (`[stragglers] window`, 30 by default), then the median of the {} ranks and the \
             worst. Compute is forward + backward without the comm wait; exposed comm is the \
             wait after the last gradient bucket (the ranks that wait longest wait for a slower \
             one). {}.",
            run.phase_scores[0].ranks.len(),
            crate::app::straggler::host_sync_note(&run.phase_scores)
        )),
        Block::Table { header, rows },
    ]
}
