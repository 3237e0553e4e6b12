//! Folding one `nccl` message into a run (`RunView::collectives`), within the run's bounds
//! (`run::coll_bounds`, docs/protocol.md "Bounds on NCCL evidence"): a record is kept only when
//! its communicator and every name it needs are admitted; the rest is counted per rank and shown,
//! never kept. Pure apart from the `now` it is given.

use super::collectives::size_class;
use crate::protocol::NcclBatch;
use crate::run::RunView;
use crate::run::coll_bounds::{Key, MAX_COMMS_PER_RANK, MAX_INFLIGHT};
use crate::run::collectives::{RECENT_COLLS, STEP_MARKS};
use std::time::Instant;

/// Records in a message: what a refused message drops.
fn records(b: &NcclBatch) -> u64 {
    (b.last_done.len() + b.inflight.len() + b.colls.len() + b.funcs.len()) as u64
}

pub fn apply_batch(run: &mut RunView, b: &NcclBatch, now: Instant) {
    let step = run.ranks.get(&b.rank).map_or(0, |r| r.step);
    let world = run.spec.k;
    let cs = &mut run.collectives;
    let budget = &mut cs.budget;
    let r = cs.ranks.entry(b.rank).or_default();
    // Cumulative in the plugin: a lost message loses nothing.
    r.loss.dropped = r.loss.dropped.max(b.dropped);
    r.loss.lost = r.loss.lost.max(b.lost);
    r.loss.bad = r.loss.bad.max(b.bad);
    r.loss.unrequested = r.loss.unrequested.max(b.unrequested);
    r.loss.evicted = r.loss.evicted.max(b.evicted);
    r.last_msg = Some(now);
    // A communicator this run cannot have (more ranks than the run, or a position outside
    // it) is not this run's evidence: refused and counted, never kept (issue 45).
    if b.nranks == 0 || b.comm_rank >= b.nranks || b.nranks > world {
        r.loss.foreign += records(b).max(1);
        return;
    }
    let id = format!("{}/{}", b.comm, b.comm_rank);
    if !r.comms.contains_key(&id) && r.comms.len() >= MAX_COMMS_PER_RANK {
        r.over_cap.comms += records(b);
        return;
    }
    r.loss.unlisted = r.loss.unlisted.saturating_add(b.more);
    let over = &mut r.over_cap;
    let c = r.comms.entry(id).or_default();
    c.comm = b.comm.clone();
    c.comm_rank = b.comm_rank;
    c.nranks = b.nranks;
    c.nnodes = b.nnodes;
    for (f, s) in &b.last_done {
        if !budget.admit(&[Key::Func(f)]) {
            over.keys += 1;
            continue;
        }
        let e = c.last_done.entry(f.clone()).or_insert(*s);
        *e = (*e).max(*s);
    }
    c.inflight.clear();
    for i in &b.inflight {
        // Stale: a collective of the same function and communicator at or after it completed,
        // so its own end event was lost (or the entry outlived it in the plugin's table). It is
        // not in flight, and a hang verdict must never name it (issue 45).
        if c.last_done.get(&i.func).is_some_and(|done| *done >= i.seq) {
            r.loss.stale += 1;
            continue;
        }
        if budget.admit(&[Key::Func(&i.func)]) {
            c.inflight.push(i.clone());
        } else {
            over.keys += 1;
        }
    }
    if c.inflight.len() > MAX_INFLIGHT {
        // The oldest are the ones a stuck verdict names.
        c.inflight.sort_by(|x, y| y.age_s.total_cmp(&x.age_s));
        over.inflight += (c.inflight.len() - MAX_INFLIGHT) as u64;
        c.inflight.truncate(MAX_INFLIGHT);
    }
    c.inflight_at = Some(now);
    for (f, s) in &b.funcs {
        if !budget.admit(&[Key::Func(f)]) {
            over.keys += 1;
            continue;
        }
        let t = c.totals.entry(f.clone()).or_default();
        t.count += s.count;
        t.bytes += s.bytes;
        t.kernel_us += s.kernel_us;
    }
    for coll in &b.colls {
        let timed = coll.kernel_us.filter(|k| *k > 0.0);
        let class = size_class(coll.bytes);
        let size = Key::Size(&coll.func, class);
        let keys = [
            Key::Func(&coll.func),
            Key::Algo(&coll.algo, &coll.proto),
            size,
        ];
        // The size class is a key only when the record lands in one (it was timed).
        let n = if timed.is_some() { 3 } else { 2 };
        if !budget.admit(&keys[..n]) {
            over.keys += 1;
            continue;
        }
        *c.algos
            .entry((coll.algo.clone(), coll.proto.clone()))
            .or_default() += 1;
        if let Some(k) = timed {
            let s = c.sizes.entry((coll.func.clone(), class)).or_default();
            s.n += 1;
            s.bytes += coll.bytes;
            s.kernel_us += k;
        }
        c.recent.push_back(coll.clone());
        while c.recent.len() > RECENT_COLLS {
            c.recent.pop_front();
        }
    }
    if c.step_marks.back().is_none_or(|(s, _)| *s != step) {
        c.step_marks.push_back((step, c.totals.clone()));
        while c.step_marks.len() > STEP_MARKS {
            c.step_marks.pop_front();
        }
    }
    if b.last {
        c.finished = true;
        c.inflight.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::collectives::model;
    use crate::app::reduce::apply_worker;
    use crate::protocol::{Backend, parse_worker};
    use crate::run::coll_bounds::{MAX_FUNCS, MAX_KEYS, thousands};
    use crate::run::{Experiment, RunSpec};

    fn run() -> (RunView, Instant) {
        let now = Instant::now();
        let mut r = RunView::new(
            "r1".into(),
            RunSpec::new(Experiment::Attach, 2, Backend::Nccl),
            now,
            0.0,
        );
        for rank in 0..2 {
            r.ranks.entry(rank).or_default();
        }
        (r, now)
    }

    /// A batch on communicator `comm` whose `funcs` and `last_done` name `names`, with one
    /// timed listed collective per name and the given counters.
    fn batch(comm: u64, names: &[String], extra: &str) -> String {
        let done: Vec<String> = names.iter().map(|n| format!(r#""{n}":1"#)).collect();
        let sums: Vec<String> = names
            .iter()
            .map(|n| format!(r#""{n}":{{"count":1,"bytes":4,"kernel_us":1.0}}"#))
            .collect();
        let colls: Vec<String> = names
            .iter()
            .map(|n| format!(r#"{{"func":"{n}","seq":1,"count":1,"bytes":4,"dtype":"float32","algo":"ring","proto":"ll","channels":1,"t_call":1.0,"t_kernel":1.0,"t_end":1.1,"kernel_us":1.0}}"#))
            .collect();
        format!(
            r#"{{"v":1,"type":"nccl","rank":0,"t":2.0,"comm":"{comm:016x}","comm_rank":0,"nranks":2,"nnodes":1,"last_done":{{{}}},"inflight":[],"colls":[{}],"more":0,"funcs":{{{}}},"dropped":0,"lost":0,"bad":0{extra},"final":false}}"#,
            done.join(","),
            colls.join(","),
            sums.join(",")
        )
    }

    fn apply(r: &mut RunView, line: &str, now: Instant) {
        apply_worker(r, &parse_worker(line).unwrap(), now);
    }

    #[test]
    fn a_flood_of_made_up_names_keeps_the_cap_and_counts_the_rest() {
        let (mut r, now) = run();
        // 20 messages of 500 distinct names each: 10,000 names, 4 records per name.
        for line in 0..20 {
            let names: Vec<String> = (0..500).map(|i| format!("f{line}_{i}")).collect();
            apply(&mut r, &batch(1, &names, ""), now);
        }
        let cs = &r.collectives;
        let c = cs.ranks[&0].comms.values().next().unwrap();
        // The first 64 names are kept, with their size class and the one algo/proto pair.
        assert_eq!(c.totals.len(), MAX_FUNCS);
        assert_eq!(c.last_done.len(), MAX_FUNCS);
        assert_eq!(c.sizes.len(), MAX_FUNCS);
        assert_eq!(c.recent.len(), MAX_FUNCS);
        assert_eq!(cs.budget.len(), 2 * MAX_FUNCS + 1);
        assert!(c.step_marks.iter().all(|(_, t)| t.len() <= MAX_FUNCS));
        // Every record of a name that found no place is counted: its last_done entry, funcs
        // sum and listed collective.
        let over = cs.over_cap();
        assert_eq!(over.keys, 3 * (10_000 - MAX_FUNCS as u64), "{over:?}");
        assert_eq!((over.comms, over.inflight), (0, 0));
        let m = model(&r, now).unwrap();
        assert_eq!(
            m.bounds.as_deref(),
            Some(
                format!(
                    "{} collective records dropped: over the 256-key cap",
                    thousands(over.keys)
                )
                .as_str()
            )
        );
        assert!(m.funcs.len() < MAX_KEYS);
        // The stored form carries the count, and the view of a stored run says it too.
        let s = crate::app::coll_store::summarize(&r).unwrap();
        assert_eq!(s.ranks[&0].over_cap, over);
        assert!(serde_json::to_string(&s).unwrap().len() < 64 << 10);
        let j = crate::app::coll_store::collectives_json(&r);
        assert_eq!(j["over_cap"]["records"], over.total());
        assert_eq!(j["over_cap"]["caps"]["keys"], MAX_KEYS);
    }

    #[test]
    fn communicators_past_the_cap_are_refused_whole() {
        let (mut r, now) = run();
        let names = vec!["all_reduce".to_string()];
        for comm in 0..(MAX_COMMS_PER_RANK as u64 + 10) {
            apply(&mut r, &batch(comm + 1, &names, ""), now);
        }
        let p = &r.collectives.ranks[&0];
        assert_eq!(p.comms.len(), MAX_COMMS_PER_RANK);
        // 10 messages of 3 records each.
        assert_eq!(p.over_cap.comms, 30);
        // A communicator already kept still takes news.
        apply(&mut r, &batch(1, &names, ""), now);
        assert_eq!(r.collectives.ranks[&0].over_cap.comms, 30);
    }

    #[test]
    fn a_communicator_this_run_cannot_have_is_refused_and_counted() {
        let (mut r, now) = run();
        let names = vec!["AllReduce".to_string()];
        // The run has k=2: a 4-rank communicator, and a position past its own size, are not
        // this run's; a 2-rank one is.
        let four = batch(7, &names, "").replace(r#""nranks":2"#, r#""nranks":4"#);
        let outside = batch(8, &names, "").replace(r#""comm_rank":0"#, r#""comm_rank":2"#);
        apply(&mut r, &four, now);
        apply(&mut r, &outside, now);
        let p = &r.collectives.ranks[&0];
        assert!(p.comms.is_empty(), "{:?}", p.comms.keys());
        // 3 records each: last_done, funcs, one listed collective.
        assert_eq!(p.loss.foreign, 6);
        apply(&mut r, &batch(9, &names, ""), now);
        assert_eq!(r.collectives.ranks[&0].comms.len(), 1);
        let m = model(&r, now).unwrap();
        let loss = m.ranks[0].loss.as_deref().unwrap_or_default();
        assert!(loss.contains("not this run's 6"), "{loss}");
        // Kept in the stored form, and said by the view of a stored run.
        let s = crate::app::coll_store::summarize(&r).unwrap();
        assert_eq!(s.ranks[&0].loss.foreign, 6);
        let j = crate::app::coll_store::collectives_json(&r);
        assert_eq!(j["ranks"]["0"]["foreign"], 6);
    }

    #[test]
    fn a_real_runs_batches_fit_the_caps() {
        let (mut r, now) = run();
        for line in include_str!("../../tests/fixtures/nccl/ddp_steps_k2.jsonl")
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            apply(&mut r, line, now);
        }
        assert_eq!(r.collectives.over_cap().total(), 0);
        assert_eq!(model(&r, now).unwrap().bounds, None);
    }

    #[test]
    fn the_plugins_counters_are_kept_apart() {
        let (mut r, now) = run();
        let names = vec!["all_reduce".to_string()];
        let line = batch(1, &names, r#","unrequested":4,"evicted":2"#)
            .replace(r#""more":0"#, r#""more":7"#)
            .replace(r#""bad":0"#, r#""bad":1"#);
        apply(&mut r, &line, now);
        apply(&mut r, &line, now);
        let p = &r.collectives.ranks[&0];
        // Cumulative counters are the latest; `more` is per message, so summed.
        assert_eq!(
            (
                p.loss.bad,
                p.loss.unrequested,
                p.loss.evicted,
                p.loss.unlisted
            ),
            (1, 4, 2, 14)
        );
        assert_eq!(
            model(&r, now).unwrap().ranks[0].loss.as_deref(),
            Some("bad 1 · unrequested 4 · evicted 2 · unlisted 14")
        );
    }
}
