//! What a run keeps of NCCL's profiler plugin once it ends (docs/profiler.md "What is stored"),
//! and the one JSON object `run --json`, `show --json` and the report put it in. Pure.

use super::collectives::{busbw_gbs, per_step};
use crate::run::RunView;
use crate::run::coll_bounds::{self, OverCap};
use crate::run::collectives::{BusbwClass, CollSummary, RankSummary, SizeClass, StepCount};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The compact aggregate of a live run's plugin data; `None` when no plugin reported.
pub fn summarize(run: &RunView) -> Option<CollSummary> {
    if run.collectives.is_empty() {
        return None;
    }
    let mut out = CollSummary::default();
    for (rank, p) in &run.collectives.ranks {
        let mut r = RankSummary {
            loss: p.loss,
            over_cap: p.over_cap,
            ..RankSummary::default()
        };
        let mut sizes: BTreeMap<(String, u32), (SizeClass, u32)> = BTreeMap::new();
        for c in p.comms.values() {
            for (f, t) in &c.totals {
                let e = r.funcs.entry(f.clone()).or_default();
                e.count += t.count;
                e.bytes += t.bytes;
                e.kernel_ms += t.kernel_us / 1e3;
            }
            for ((a, pr), n) in &c.algos {
                *r.algos.entry(format!("{a}/{pr}")).or_default() += n;
            }
            for ((f, class), s) in &c.sizes {
                let e = sizes
                    .entry((f.clone(), *class))
                    .or_insert((SizeClass::default(), c.nranks));
                e.0.n += s.n;
                e.0.bytes += s.bytes;
                e.0.kernel_us += s.kernel_us;
            }
            for (f, s) in &c.last_done {
                let e = r.last_seq.entry(f.clone()).or_insert(*s);
                *e = (*e).max(*s);
            }
        }
        r.busbw = sizes
            .into_iter()
            .map(|((func, class), (s, n))| BusbwClass {
                busbw_gbs: busbw_gbs(&func, n, &s),
                func,
                from_bytes: 1u64 << class,
                n: s.n,
            })
            .collect();
        out.ranks.insert(*rank, r);
    }
    out.timeline_source = timeline_source(run);
    out.per_step = per_step(run)
        .into_iter()
        .map(|p| StepCount {
            matches: p.matches(),
            func: p.func,
            count: p.count,
            bytes: p.bytes,
            steps: p.steps,
            receipt: p.receipt,
        })
        .collect();
    Some(out)
}

/// The run's summary: derived from the live data while there is any, else as stored.
pub fn summary(run: &RunView) -> Option<CollSummary> {
    summarize(run).or_else(|| run.figures.coll_summary.clone())
}

/// The `collectives` field of a run's JSON document: the stored aggregate, the bucket timeline's
/// source and what timed the buckets. `Value::Null` for a run without the plugin and without a
/// recorded instrument.
pub fn collectives_json(run: &RunView) -> Value {
    let s = summary(run);
    if s.is_none() && run.seen.comm_timing.is_none() {
        return Value::Null;
    }
    let ranks: serde_json::Map<String, Value> = s
        .as_ref()
        .map(|s| {
            s.ranks
                .iter()
                .map(|(r, v)| (r.to_string(), json!(v)))
                .collect()
        })
        .unwrap_or_default();
    let source = match &s {
        Some(s) => s.timeline_source.clone(),
        None => timeline_source(run),
    };
    let over = over_cap(s.as_ref());
    json!({
        "comm_timing": run.seen.comm_timing.map(|c| c.as_str()),
        // Which instrument timed the buckets, in words, and per rank (issue 45).
        "comm_source": super::comm_source::line(run),
        "comm_sources": super::comm_source::per_rank_json(run),
        "timeline_source": source,
        "ranks": ranks,
        "per_step": s.map(|s| s.per_step).unwrap_or_default(),
        "over_cap": {
            "records": over.total(),
            "keys": over.keys,
            "comms": over.comms,
            "inflight": over.inflight,
            "note": over.note(),
            "caps": {
                "keys": coll_bounds::MAX_KEYS,
                "comms_per_rank": coll_bounds::MAX_COMMS_PER_RANK,
                "inflight_per_comm": coll_bounds::MAX_INFLIGHT,
            },
        },
    })
}

/// Records refused over the caps, all ranks of a summary together.
pub fn over_cap(s: Option<&CollSummary>) -> OverCap {
    crate::run::collectives::sum_over(
        s.into_iter()
            .flat_map(|s| s.ranks.values().map(|r| r.over_cap)),
    )
}

/// What the Timeline pane draws for the first rank: `nccl_profiler` when NCCL's collectives
/// matched a step, `comm_hook` when the hook's buckets are all there is, `None` without either.
pub fn timeline_source(run: &RunView) -> Option<String> {
    let rank = *run.ranks.keys().next()?;
    let c = super::nccl_timeline::choose(run, rank);
    let hook = run.ranks.get(&rank).is_some_and(|r| r.buckets.is_some());
    (c.buckets.is_some() || hook).then(|| c.source.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::reduce::apply_worker;
    use crate::protocol::{Backend, parse_worker};
    use crate::run::{Experiment, RunSpec};
    use std::time::Instant;

    pub(crate) fn fed(exp: Experiment, fixture: &str) -> RunView {
        let now = Instant::now();
        let mut r = RunView::new("r1".into(), RunSpec::new(exp, 2, Backend::Nccl), now, 0.0);
        for line in fixture.lines().filter(|l| !l.trim().is_empty()) {
            if line.starts_with('#') {
                continue;
            }
            apply_worker(&mut r, &parse_worker(line).unwrap(), now);
        }
        r
    }

    #[test]
    fn the_aggregate_adds_up_the_batches() {
        let r = fed(
            Experiment::Attach,
            include_str!("../../tests/fixtures/nccl/ddp_steps_k2.jsonl"),
        );
        let s = summarize(&r).unwrap();
        let r0 = &s.ranks[&0];
        let ar = r0.funcs["all_reduce"];
        assert_eq!(ar.count, 7);
        assert_eq!(ar.bytes, 2 * (9461800 + 26501120 + 8740352) + 4);
        assert_eq!(r0.algos["ring/simple"], 7);
        assert_eq!(r0.last_seq["all_reduce"], 2064);
        // 26501120 B in 176 and 176.512 µs at k=2: one class, 2 collectives.
        let big = r0.busbw.iter().find(|b| b.from_bytes == 16 << 20).unwrap();
        assert_eq!(big.n, 2);
        let bw = big.busbw_gbs.unwrap();
        assert!(
            (bw - 2.0 * 26501120.0 / (352.512e-6) / 1e9).abs() < 0.01,
            "{bw}"
        );
        let j = collectives_json(&r);
        assert_eq!(j["comm_timing"], "nccl_profiler");
        assert_eq!(j["timeline_source"], "nccl_profiler");
        assert_eq!(j["ranks"]["0"]["funcs"]["all_reduce"]["count"], 7);
    }

    #[test]
    fn a_stored_run_shows_its_aggregate_in_the_collectives_view() {
        let live = fed(
            Experiment::Attach,
            include_str!("../../tests/fixtures/nccl/ddp_steps_k2.jsonl"),
        );
        let mut stored = fed(Experiment::Attach, "");
        stored.figures.coll_summary = summarize(&live);
        stored.status = crate::run::RunStatus::Completed;
        let m = crate::app::collectives::model(&stored, Instant::now()).unwrap();
        assert_eq!(
            m.note.as_deref(),
            Some("as stored with the run: totals, no in-flight collectives")
        );
        assert_eq!(m.ranks[0].last_done, "all_reduce #2064");
        assert_eq!(
            (m.funcs[0].func.as_str(), m.funcs[0].count),
            ("all_reduce", 7)
        );
        assert_eq!(m.algos, "ring/simple 7");
        // The stored run's JSON carries the live run's per-rank aggregate.
        assert_eq!(
            collectives_json(&stored)["ranks"],
            collectives_json(&live)["ranks"]
        );
    }

    #[test]
    fn a_run_without_the_plugin_has_no_collectives() {
        let r = fed(Experiment::Weak, "");
        assert_eq!(summarize(&r), None);
        assert_eq!(collectives_json(&r), Value::Null);
    }
}
