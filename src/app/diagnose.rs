//! Failures named, with the fix: the verdicts a user needs when DDP breaks rather than slows
//! (docs/troubleshooting.md). A rank reports what it can see alone (`protocol::Finding`:
//! parameters without a gradient); what needs every rank's state (one rank out of data while
//! the others wait) is judged here, from the ranks' last steps, byes and errors, when the run
//! is judged hung or fails. Pure functions over the run's view: the engine decides when.

use crate::protocol::{ByeReason, Finding, FindingKind};
use crate::run::{Diagnosis, DiagnosisKind, RunView};

/// Most parameter names quoted in a verdict's line (all are in its evidence).
const NAMES_IN_LINE: usize = 4;

/// A rank's own finding as a verdict. `step`: the rank's last finished step when it said it
/// (the finding is about the step under way, the next one).
pub fn from_finding(rank: u32, step: u64, f: &Finding) -> Diagnosis {
    let step = step + 1;
    match f.kind {
        FindingKind::UnusedParameters => unused_parameters(rank, step, f),
    }
}

fn unused_parameters(rank: u32, step: u64, f: &Finding) -> Diagnosis {
    let count = f
        .count
        .unwrap_or(f.names.len() as u64)
        .max(f.names.len() as u64);
    let mut shown: Vec<&str> = f
        .names
        .iter()
        .take(NAMES_IN_LINE)
        .map(String::as_str)
        .collect();
    if count > shown.len() as u64 {
        shown.push("…");
    }
    Diagnosis {
        kind: DiagnosisKind::UnusedParameters,
        rank: Some(rank),
        step: Some(step),
        since_unix: crate::util::unix_now(),
        text: format!(
            "{count} parameter{} got no gradient in step {step} ({}; first said by rank {rank}): DDP without \
             find_unused_parameters fails at the next forward (\"Expected to have finished \
             reduction in the prior iteration before starting a new one\")",
            if count == 1 { "" } else { "s" },
            shown.join(", ")
        ),
        fix: "use them in forward or delete them; if some steps really skip them, \
              DistributedDataParallel(..., find_unused_parameters=True) (one graph walk per \
              step), or static_graph=True when the same ones are skipped every step"
            .into(),
        evidence: f
            .names
            .iter()
            .map(|n| format!("no gradient after backward: {n}"))
            .collect(),
    }
}

/// One rank finished its loop (`bye` done, no error) while others did not: they wait, or
/// failed, in a collective it never joined. `None` for a run where every rank finished, or
/// none did, or the one that finished had taken more steps than a waiting one (that rank is
/// not the one short of data).
pub fn uneven_inputs(run: &RunView) -> Option<Diagnosis> {
    if run.ranks.len() < 2 {
        return None;
    }
    let done: Vec<_> = run
        .ranks
        .values()
        .filter(|r| r.bye == Some(ByeReason::Done) && r.error.is_none())
        .collect();
    let left: Vec<_> = run
        .ranks
        .values()
        .filter(|r| !(r.bye == Some(ByeReason::Done) && r.error.is_none()))
        .collect();
    if done.is_empty() || left.is_empty() {
        return None;
    }
    // The one short of data stopped first: its last step is the lowest, and the others are
    // stuck in the next one (they cannot run more than one step ahead of it).
    let short = done.iter().min_by_key(|r| r.step)?;
    if left.iter().any(|r| r.step < short.step) {
        return None;
    }
    let waiting: Vec<String> = left.iter().map(|r| r.rank.to_string()).collect();
    let what = left
        .iter()
        .find_map(|r| {
            let (_, c) = r.coll.as_ref()?;
            let op = c.op.as_deref()?;
            Some(match c.seq {
                Some(seq) => format!("{op} #{seq}"),
                None => op.to_string(),
            })
        })
        .unwrap_or_else(|| "the next step's all-reduce".into());
    let failed = left.iter().any(|r| r.error.is_some());
    let how = if !failed {
        format!("wait in {what}")
    } else {
        format!("failed in {what} when rank {} left", short.rank)
    };
    let evidence: Vec<String> = run
        .ranks
        .values()
        .map(|r| {
            let state = match (r.bye, &r.error) {
                (_, Some(e)) => format!("failed: {e}"),
                (Some(ByeReason::Done), None) => "finished its loop (bye: done)".into(),
                (Some(b), None) => format!("ended ({b:?})"),
                (None, None) => "still in training".into(),
            };
            format!("rank {}: last step {}, {state}", r.rank, r.step)
        })
        .collect();
    Some(Diagnosis {
        kind: DiagnosisKind::UnevenInputs,
        rank: Some(short.rank),
        step: Some(short.step),
        since_unix: crate::util::unix_now(),
        text: format!(
            "rank {} ran out of data after step {}; rank{} {} {how}",
            short.rank,
            short.step,
            if waiting.len() == 1 { "" } else { "s" },
            waiting.join(",")
        ),
        fix: "give every rank the same number of batches: DistributedSampler(..., \
              drop_last=True) and no per-rank data filtering, or wrap the loop in \
              torch.distributed.algorithms.Join([model])"
            .into(),
        evidence,
    })
}

/// Add `d` unless the run already has a verdict of its kind for its rank (unused parameters:
/// of its kind at all, as every rank builds the same model and says the same); true when
/// added.
pub fn add(run: &mut RunView, d: Diagnosis) -> bool {
    let once_per_run = d.kind == DiagnosisKind::UnusedParameters;
    if run
        .diagnoses
        .iter()
        .any(|x| x.kind == d.kind && (once_per_run || x.rank == d.rank))
    {
        return false;
    }
    run.diagnoses.push(d);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Backend;
    use crate::run::{Experiment, RunSpec};

    fn run(k: u32) -> RunView {
        RunView::new(
            "r".into(),
            RunSpec::new(Experiment::Weak, k, Backend::Gloo),
            std::time::Instant::now(),
            0.0,
        )
    }

    #[test]
    fn the_rank_that_finished_first_is_named_and_the_waiting_ones_with_it() {
        let mut r = run(4);
        for (id, rank) in r.ranks.iter_mut() {
            rank.step = 13;
            if *id == 2 {
                rank.step = 12;
                rank.bye = Some(ByeReason::Done);
            }
        }
        let d = uneven_inputs(&r).unwrap();
        assert_eq!(
            (d.kind, d.rank, d.step),
            (DiagnosisKind::UnevenInputs, Some(2), Some(12))
        );
        assert_eq!(
            d.text,
            "rank 2 ran out of data after step 12; ranks 0,1,3 wait in the next step's all-reduce"
        );
        assert!(d.fix.contains("drop_last=True") && d.fix.contains("Join"));
        assert!(d.line().starts_with("uneven inputs: rank 2 ran out"));
    }

    #[test]
    fn healthy_crashed_and_hung_runs_are_not_uneven() {
        let mut r = run(2);
        assert!(uneven_inputs(&r).is_none(), "nobody finished yet");
        for rank in r.ranks.values_mut() {
            rank.step = 40;
            rank.bye = Some(ByeReason::Done);
        }
        assert!(uneven_inputs(&r).is_none(), "everybody finished");
        // The last rank raised: its bye says error; its peer waits. Not a data problem.
        let mut r = run(2);
        r.ranks.get_mut(&1).unwrap().bye = Some(ByeReason::Error);
        r.ranks.get_mut(&1).unwrap().error = Some("RuntimeError: boom".into());
        assert!(uneven_inputs(&r).is_none());
        // A rank that finished ahead of one still behind it is not short of data.
        let mut r = run(2);
        r.ranks.get_mut(&0).unwrap().step = 20;
        r.ranks.get_mut(&0).unwrap().bye = Some(ByeReason::Done);
        r.ranks.get_mut(&1).unwrap().step = 5;
        assert!(uneven_inputs(&r).is_none());
    }

    #[test]
    fn unused_parameters_are_named_and_counted() {
        let f = Finding {
            kind: FindingKind::UnusedParameters,
            names: (0..6).map(|i| format!("head.{i}.weight")).collect(),
            count: Some(6),
        };
        let d = from_finding(1, 0, &f);
        assert_eq!((d.rank, d.step), (Some(1), Some(1)));
        assert!(
            d.text.contains("6 parameters got no gradient in step 1")
                && d.text
                    .contains("head.0.weight, head.1.weight, head.2.weight, head.3.weight, …"),
            "{}",
            d.text
        );
        assert_eq!(d.evidence.len(), 6);
        assert!(d.fix.contains("find_unused_parameters=True") && d.fix.contains("static_graph"));
        let mut r = run(2);
        assert!(add(&mut r, d.clone()));
        let other = from_finding(0, 0, &f);
        assert!(!add(&mut r, other), "every rank says the same: one verdict");
    }
}
