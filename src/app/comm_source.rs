//! Which instrument an attached run's communication figures came from (issue 45, docs/profiler.md
//! "Never silently blind"): ddptop's Python comm hook, or NCCL's profiler plugin once it reports
//! for the run, and back. Each rank says it in `plan` (`comm_timing`, `comm_why`) whenever it
//! changes; the run keeps the latest per rank (`Observed::comm_sources`, stored with the run) and
//! says it in one line in the run details, `show` (text and `--json`) and the report. Pure.

use crate::protocol::CommTiming;
use crate::run::RunView;
use crate::run::view::CommSourceSeen;

/// Fold one rank's `plan.comm_timing` (and its reason) into the run. The run's own
/// `comm_timing` (stored, and read by the Timeline's "expected" test) is the weakest of the
/// ranks': the hook while any rank's hook times, the plugin only once every rank's reports.
pub fn apply(run: &mut RunView, rank: u32, step: u64, timing: CommTiming, why: Option<&str>) {
    let seen = run.seen.observed.comm_sources.entry(rank).or_default();
    if seen.timing.is_some_and(|t| t != timing) {
        seen.switches += 1;
        seen.since_step = step;
    } else if seen.timing.is_none() {
        seen.since_step = step;
    }
    seen.timing = Some(timing);
    seen.why = why.map(|w| w.chars().take(400).collect());
    run.seen.comm_timing = weakest(run.seen.observed.comm_sources.values());
}

fn weakest<'a>(seen: impl Iterator<Item = &'a CommSourceSeen>) -> Option<CommTiming> {
    let rank = |t: CommTiming| match t {
        CommTiming::CommHook => 0,
        CommTiming::Untimed => 1,
        CommTiming::NcclProfiler => 2,
    };
    seen.filter_map(|s| s.timing).min_by_key(|t| rank(*t))
}

fn name(t: CommTiming) -> &'static str {
    match t {
        CommTiming::CommHook => "Python comm hook",
        CommTiming::NcclProfiler => "NCCL profiler plugin",
        CommTiming::Untimed => "not timed",
    }
}

fn ranks_text(ranks: &[u32]) -> String {
    let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
    match ranks.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(", ")),
    }
}

/// What timed the run's communication (DDP's buckets), after `communication: `:
/// `NCCL profiler plugin`, `Python comm hook (plugin not reporting: …)`, `not timed (the
/// script's own comm hook …)`; ranks named where they differ. `None` for a run that never said
/// (ddptop's own workers, a script without DDP).
pub fn words(run: &RunView) -> Option<String> {
    let seen = &run.seen.observed.comm_sources;
    if seen.is_empty() {
        // Stored before issue 45: the run-level instrument only.
        return run.seen.comm_timing.map(|t| name(t).to_string());
    }
    let worst = weakest(seen.values())?;
    let (these, rest): (Vec<(&u32, &CommSourceSeen)>, Vec<_>) =
        seen.iter().partition(|(_, s)| s.timing == Some(worst));
    let mut out = name(worst).to_string();
    let whys: Vec<&str> = these.iter().filter_map(|(_, s)| s.why.as_deref()).collect();
    if let Some(why) = whys.first() {
        out.push_str(&format!(" ({why})"));
    }
    let stood_in: u32 = seen.values().map(|s| s.switches / 2).sum();
    if worst == CommTiming::NcclProfiler {
        if stood_in > 0 {
            out.push_str(&format!(
                "; it stopped reporting {stood_in} time{} and the Python comm hook stood in",
                if stood_in == 1 { "" } else { "s" }
            ));
        }
        let since = these.iter().map(|(_, s)| s.since_step).max().unwrap_or(0);
        if since > 0 && stood_in == 0 {
            out.push_str(&format!(
                "; the Python comm hook until step {since}, before it was confirmed"
            ));
        }
    } else if !rest.is_empty() {
        let on: Vec<u32> = these.iter().map(|(r, _)| **r).collect();
        let others: Vec<String> = rest
            .iter()
            .filter_map(|(r, s)| {
                s.timing
                    .map(|t| format!("{}: {}", ranks_text(&[**r]), name(t)))
            })
            .collect();
        out.push_str(&format!(" on {}; {}", ranks_text(&on), others.join("; ")));
    }
    Some(out)
}

/// `communication: …` (`words`), the one line the details pane, `show` and the report print.
pub fn line(run: &RunView) -> Option<String> {
    words(run).map(|w| format!("communication: {w}"))
}

/// The plugin times `rank`'s buckets now (its latest `plan.comm_timing`): the straggler score
/// takes that rank's comm wait from NCCL's all-reduces for the steps the hook did not time.
pub fn plugin_times(run: &RunView, rank: u32) -> bool {
    run.seen
        .observed
        .comm_sources
        .get(&rank)
        .is_some_and(|s| s.timing == Some(CommTiming::NcclProfiler))
}

/// The plugin speaks no TLS (it links no TLS library): a run whose ranks reach ddptop over
/// `tls://` (multi-node `--tls`) says on screen, in one line, exactly what it lacks. `None`
/// on a Unix socket or plain TCP.
pub fn tls_line(run: &RunView) -> Option<String> {
    let socket = run.launch.env.get("DDPTOP_SOCKET").cloned().flatten()?;
    socket.starts_with("tls://").then(|| {
        "no NCCL via TLS: the NCCL profiler plugin speaks no TLS, so no collectives view, no NCCL hang evidence, no bus bandwidth; buckets timed by ddptop's Python comm hook".to_string()
    })
}

/// Per rank, for `show --json` / the report's JSON (`collectives.comm_sources`).
pub fn per_rank_json(run: &RunView) -> serde_json::Value {
    serde_json::json!(run.seen.observed.comm_sources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Backend;
    use crate::run::{Experiment, RunSpec};
    use std::time::Instant;

    fn run(k: u32) -> RunView {
        RunView::new(
            "r1".into(),
            RunSpec::new(Experiment::Attach, k, Backend::Nccl),
            Instant::now(),
            0.0,
        )
    }

    const NOT_LOADED: &str = "plugin not reporting: NCCL never loaded it (/x/libnccl_profiler_ddptop.so); an NCCL without the ncclProfiler_v5/v4 interface ignores it";

    #[test]
    fn a_run_whose_plugin_never_reports_says_the_hook_and_why() {
        let mut r = run(2);
        for rank in 0..2 {
            apply(&mut r, rank, 0, CommTiming::CommHook, Some(NOT_LOADED));
        }
        assert_eq!(
            line(&r).unwrap(),
            format!("communication: Python comm hook ({NOT_LOADED})")
        );
        assert_eq!(r.seen.comm_timing, Some(CommTiming::CommHook));
    }

    #[test]
    fn the_plugin_is_the_source_once_every_rank_confirmed_it_and_says_when() {
        let mut r = run(2);
        for rank in 0..2 {
            apply(
                &mut r,
                rank,
                0,
                CommTiming::CommHook,
                Some("plugin not reporting: connecting to ddptop"),
            );
        }
        apply(&mut r, 0, 2, CommTiming::NcclProfiler, None);
        // One rank still on the hook: the run says the hook, and which rank.
        let w = words(&r).unwrap();
        assert!(w.starts_with("Python comm hook (plugin not reporting: connecting to ddptop) on rank 1; rank 0: NCCL profiler plugin"), "{w}");
        assert_eq!(r.seen.comm_timing, Some(CommTiming::CommHook));
        apply(&mut r, 1, 3, CommTiming::NcclProfiler, None);
        assert_eq!(
            line(&r).unwrap(),
            "communication: NCCL profiler plugin; the Python comm hook until step 3, before it was confirmed"
        );
        assert_eq!(r.seen.comm_timing, Some(CommTiming::NcclProfiler));
    }

    #[test]
    fn a_plugin_that_stalls_hands_back_to_the_hook_live_and_is_counted_once_back() {
        let mut r = run(1);
        apply(&mut r, 0, 0, CommTiming::NcclProfiler, None);
        assert_eq!(line(&r).unwrap(), "communication: NCCL profiler plugin");
        let stalled =
            "plugin not reporting: stalled, reconnecting: ddptop stopped reading for 5.0 s";
        apply(&mut r, 0, 40, CommTiming::CommHook, Some(stalled));
        assert_eq!(
            line(&r).unwrap(),
            format!("communication: Python comm hook ({stalled})")
        );
        apply(&mut r, 0, 52, CommTiming::NcclProfiler, None);
        let l = line(&r).unwrap();
        assert!(
            l.starts_with("communication: NCCL profiler plugin; it stopped reporting 1 time and the Python comm hook stood in"),
            "{l}"
        );
    }

    #[test]
    fn the_scripts_own_hook_without_the_plugin_is_not_timed_and_a_stored_run_keeps_its_word() {
        let mut r = run(2);
        let why = "the script's own comm hook (fp16_compress_hook) runs; plugin not reporting: off: DDPTOP_SOCKET=tls://h:1 is a TLS listener and the plugin speaks no TLS";
        apply(&mut r, 0, 0, CommTiming::Untimed, Some(why));
        assert_eq!(
            line(&r).unwrap(),
            format!("communication: not timed ({why})")
        );
        // The per-rank sources travel in the stored `observed` document.
        let text = serde_json::to_string(&r.seen.observed).unwrap();
        let back: crate::run::view::Observed = serde_json::from_str(&text).unwrap();
        assert_eq!(back.comm_sources, r.seen.observed.comm_sources);
        // A run stored before the per-rank sources: the run's instrument alone.
        let mut old = run(2);
        old.seen.comm_timing = Some(CommTiming::NcclProfiler);
        assert_eq!(line(&old).unwrap(), "communication: NCCL profiler plugin");
        assert_eq!(line(&run(2)), None);
    }
}
