//! Folding the NCCL profiler plugin's messages into a run (`RunView::collectives`) and what is
//! derived from them (docs/profiler.md): which rank is inside which collective when progress
//! stops, DDP's bucket all-reduces matched to NCCL's collectives by order and size, the
//! collectives XLA executed per step against the HLO receipt, and the collectives view's model.
//! Pure apart from the `now` it is given.

use crate::protocol::{NcclColl, NcclHello};
use crate::run::collectives::{CollTotals, CommView, SizeClass};
use crate::run::{Caveat, RunView};
use std::collections::BTreeMap;
use std::time::Instant;

/// What a k=1 run says instead of a collectives view (NCCL short-circuits a one-rank
/// communicator's collectives: it calls the plugin's `init` but fires no collective events).
pub const NO_COLLECTIVES_K1: &str = "no collectives at k=1: NCCL's profiler plugin loaded, but NCCL runs a one-rank communicator's collectives without collective events";

/// How old an in-flight collective must be before the view calls the ranks stuck in it
/// (the watchdog's own threshold decides when a run is hung; this only names where).
pub const STUCK_AFTER_S: f64 = 2.0;

pub fn apply_hello(run: &mut RunView, h: &NcclHello, now: Instant) {
    let r = run.collectives.ranks.entry(h.rank).or_default();
    r.abi = h.abi.clone();
    r.plugin = h.plugin.clone();
    r.pid = h.pid;
    r.last_msg = Some(now);
    run.push_tail(format!(
        "[rank {}] NCCL profiler plugin {} loaded by NCCL ({})",
        h.rank, h.plugin, h.abi
    ));
    if run.spec.k == 1 {
        run.add_caveat(Caveat::note(NO_COLLECTIVES_K1));
    }
}

/// A worker's `hello` names the NCCL library it mapped and the profiler interfaces that library
/// looks up: one line on the run when the plugin was set on the launch but that NCCL cannot load
/// it (by symbol, not by version number: `supervisor::nccl_profiler::cannot_load`).
pub fn note_nccl_interfaces(run: &mut RunView, h: &crate::protocol::Hello) {
    let on = plugin_on(run);
    if let Some(line) = h
        .nccl_lib
        .as_ref()
        .filter(|_| on)
        .and_then(crate::supervisor::nccl_profiler::cannot_load)
    {
        run.add_caveat(Caveat::note(line));
    }
    if on
        && h.backend == crate::protocol::CommBackend::Nccl
        && let Some(line) = crate::app::comm_source::tls_line(run)
    {
        run.add_caveat(Caveat::note(line));
    }
}

/// log2 of a size, the class it is shown in (1 MiB covers [1 MiB, 2 MiB)).
pub fn size_class(bytes: u64) -> u32 {
    63 - bytes.max(1).leading_zeros()
}

/// nccl-tests' bus bandwidth factor for `func` over `n` ranks, and the bytes its formula counts
/// (NCCL's `count` for all_gather and reduce_scatter is one rank's part: × n for the total).
pub fn busbw_factor(func: &str, n: u32) -> (f64, f64) {
    let n = f64::from(n.max(1));
    match func {
        "all_reduce" => (2.0 * (n - 1.0) / n, 1.0),
        // NCCL's `count` for gather and scatter is one rank's part too.
        "all_gather" | "reduce_scatter" | "gather" | "scatter" => ((n - 1.0) / n, n),
        "all_to_all" => ((n - 1.0) / n, 1.0),
        _ => (1.0, 1.0),
    }
}

/// Bus bandwidth (GB/s, 1e9 bytes) of a size class.
pub fn busbw_gbs(func: &str, nranks: u32, s: &SizeClass) -> Option<f64> {
    let (factor, mult) = busbw_factor(func, nranks);
    (s.kernel_us > 0.0 && s.n > 0)
        .then(|| s.bytes as f64 * mult / (s.kernel_us * 1e-6) / 1e9 * factor)
}

/// A communicator across everything that reported it, by rank in the communicator (the
/// global rank for DDP's default group, the device for a one-process JAX run).
fn comm_across<'a>(run: &'a RunView, comm: &str) -> BTreeMap<u32, &'a CommView> {
    run.collectives
        .ranks
        .values()
        .flat_map(|p| p.comms.values())
        .filter(|c| c.comm == comm)
        .map(|c| (c.comm_rank, c))
        .collect()
}

fn age(c: &CommView, age_s: f64, now: Instant) -> f64 {
    age_s
        + c.inflight_at
            .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64())
}

fn ranks_text(ranks: &[u32]) -> String {
    let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
    match ranks.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(", ")),
    }
}

/// Which rank is inside which collective: the oldest collective in flight (at least
/// `min_age_s`) on any communicator, and where every rank of that communicator stands with
/// respect to it. `None` while nothing is in flight that long.
pub fn stuck(run: &RunView, now: Instant, min_age_s: f64) -> Option<String> {
    // The oldest in-flight collective over all ranks and communicators.
    let mut oldest: Option<(f64, String, String, u64)> = None;
    for p in run.collectives.ranks.values() {
        for c in p.comms.values() {
            for f in &c.inflight {
                let a = age(c, f.age_s, now);
                if a >= min_age_s && oldest.as_ref().is_none_or(|o| a > o.0) {
                    oldest = Some((a, c.comm.clone(), f.func.clone(), f.seq));
                }
            }
        }
    }
    let (_, comm, func, seq) = oldest?;
    let across = comm_across(run, &comm);

    let nranks = across.values().map(|c| c.nranks).max().unwrap_or(0);
    let mut inside = Vec::new();
    let mut kernels = Vec::new();
    let mut max_age: f64 = 0.0;
    let mut clauses = Vec::new();
    let mut past = Vec::new();
    for (r, c) in &across {
        if let Some(f) = c.inflight.iter().find(|f| f.func == func && f.seq == seq) {
            inside.push(*r);
            kernels.push(f.kernel);
            max_age = max_age.max(age(c, f.age_s, now));
            continue;
        }
        let last = c.last_done.get(&func).copied();
        if last.is_some_and(|l| l >= seq) {
            past.push(*r);
            continue;
        }
        let done = last.map_or("no".to_string(), |l| format!("#{l}"));
        let elsewhere = c
            .inflight
            .iter()
            .map(|f| (age(c, f.age_s, now), f))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(a, f)| format!(", is inside {} #{} ({a:.1} s)", f.func, f.seq))
            .unwrap_or_default();
        let done = if done == "no" {
            format!("completed no {func}")
        } else {
            format!("last completed {done}")
        };
        clauses.push(format!(
            "rank {r} {done}{elsewhere} and never entered #{seq}"
        ));
    }
    // Ranks of the communicator that sent nothing on it (plugin off, not loaded, or the process
    // gone) cannot be placed.
    let silent: Vec<u32> = (0..nranks).filter(|r| !across.contains_key(r)).collect();
    if !silent.is_empty() {
        clauses.push(format!("{}: no profiler data", ranks_text(&silent)));
    }
    if !past.is_empty() {
        clauses.push(format!("{} already completed #{seq}", ranks_text(&past)));
    }
    let all_inside = clauses.is_empty() && inside.len() as u32 >= nranks.max(2);
    let head = if all_inside {
        let who = if inside.len() == 2 {
            "both ranks".to_string()
        } else {
            format!("all {} ranks", inside.len())
        };
        if kernels.iter().all(|k| *k) {
            format!(
                "{who} inside {func} #{seq} for {max_age:.1} s, kernels started, none finished: a transport stall, not a missing rank"
            )
        } else {
            let waiting: Vec<u32> = inside
                .iter()
                .zip(&kernels)
                .filter(|(_, k)| !**k)
                .map(|(r, _)| *r)
                .collect();
            format!(
                "{who} inside {func} #{seq} for {max_age:.1} s; its kernel has not started on {}",
                ranks_text(&waiting)
            )
        }
    } else {
        format!(
            "{} inside {func} #{seq} for {max_age:.1} s",
            ranks_text(&inside)
        )
    };
    Some(
        std::iter::once(head)
            .chain(clauses)
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// How old the NCCL evidence behind a `stuck` verdict is, and from which ranks: each rank's
/// latest plugin report on the communicator of the oldest collective in flight, and the
/// in-flight entries set aside as stale (issue 45). `None` when nothing is in flight.
pub fn evidence_age(run: &RunView, now: Instant) -> Option<String> {
    let (comm, _) = run
        .collectives
        .ranks
        .values()
        .flat_map(|p| p.comms.values())
        .flat_map(|c| c.inflight.iter().map(move |f| (c, age(c, f.age_s, now))))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, a)| (c.comm.clone(), a))?;
    let ages: Vec<String> = comm_across(run, &comm)
        .iter()
        .filter_map(|(r, c)| {
            let t = c.inflight_at?;
            Some(format!(
                "rank {r} {:.1} s ago",
                now.saturating_duration_since(t).as_secs_f64()
            ))
        })
        .collect();
    let stale: u64 = run.collectives.ranks.values().map(|p| p.loss.stale).sum();
    let mut text = format!("evidence: the plugin's last reports, {}", ages.join(", "));
    if stale > 0 {
        text.push_str(&format!(
            "; {stale} in-flight entr{} set aside as stale (completed later on their communicator)",
            if stale == 1 { "y" } else { "ies" }
        ));
    }
    Some(text)
}

/// A DDP bucket's all-reduce as NCCL ran it. Times are ms from the first bucket's call.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketColl {
    pub index: u32,
    pub bytes: u64,
    pub seq: u64,
    /// The host called NCCL (the bucket was ready and handed to NCCL).
    pub ready_ms: f64,
    /// The first channel of the kernel started, as NCCL's proxy thread saw it.
    pub start_ms: Option<f64>,
    pub done_ms: f64,
    /// GPU time, earliest channel start to latest channel stop.
    pub kernel_ms: Option<f64>,
}

/// The communicator of a rank with the most all-reduces: DDP's default process group.
pub(crate) fn main_comm(run: &RunView, rank: u32) -> Option<&CommView> {
    let p = run.collectives.ranks.get(&rank)?;
    p.comms
        .values()
        .max_by_key(|c| c.totals.get("all_reduce").map_or(0, |t| t.count))
}

/// The latest step's bucket all-reduces of `rank`: the last run of consecutive all-reduces on
/// its main communicator whose sizes are the buckets' sizes in the buckets' all-reduce order
/// (its latest `buckets` message, else the run's `bucket_bytes`). `None` until one matches.
pub fn match_buckets(run: &RunView, rank: u32) -> Option<Vec<BucketColl>> {
    let (indices, sizes): (Vec<u32>, Vec<u64>) = match run.ranks.get(&rank)?.buckets.as_ref() {
        Some(b) => b.buckets.iter().map(|s| (s.index, s.bytes)).unzip(),
        None => run
            .figures
            .bucket_bytes
            .iter()
            .enumerate()
            .map(|(i, b)| (i as u32, *b))
            .unzip(),
    };
    if sizes.is_empty() {
        return None;
    }
    let c = main_comm(run, rank)?;
    let ars: Vec<&NcclColl> = c.recent.iter().filter(|x| x.func == "all_reduce").collect();
    let n = sizes.len();
    let start = (0..=ars.len().checked_sub(n)?).rev().find(|&i| {
        ars[i..i + n].iter().zip(&sizes).all(|(x, b)| x.bytes == *b)
            && ars[i..i + n].windows(2).all(|w| w[1].seq == w[0].seq + 1)
    })?;
    let window = &ars[start..start + n];
    let t0 = window[0].t_call;
    let ms = |t: f64| (t - t0) * 1e3;
    Some(
        window
            .iter()
            .zip(indices)
            .map(|(x, index)| BucketColl {
                index,
                bytes: x.bytes,
                seq: x.seq,
                ready_ms: ms(x.t_call),
                start_ms: x.t_kernel.map(ms),
                done_ms: ms(x.t_end),
                kernel_ms: x.kernel_us.map(|k| k / 1e3),
            })
            .collect(),
    )
}

/// One function's collectives per training step on one communicator, beside the HLO receipt.
#[derive(Debug, Clone, PartialEq)]
pub struct PerStep {
    pub func: String,
    pub count: f64,
    pub bytes: f64,
    /// Steps the figures are averaged over.
    pub steps: u64,
    /// The receipt's count and bytes for this function, when it has one.
    pub receipt: Option<(u64, u64)>,
}

impl PerStep {
    /// Whether the executed count per step is the receipt's (rounded: the window's edges fall
    /// between batches). `None` without a receipt.
    pub fn matches(&self) -> Option<bool> {
        self.receipt
            .map(|(n, _)| (self.count - n as f64).abs() < 0.5)
    }
}

/// Collectives per training step on the first rank's busiest communicator: the change in its
/// totals between the oldest and newest step marks, over the steps between them.
pub fn per_step(run: &RunView) -> Vec<PerStep> {
    let Some((_, p)) = run.collectives.ranks.iter().next() else {
        return Vec::new();
    };
    let Some(c) = p
        .comms
        .values()
        .max_by_key(|c| c.totals.values().map(|t| t.count).sum::<u64>())
    else {
        return Vec::new();
    };
    // Marks from step 1 on: collectives before the first step (parameter broadcast, sharding
    // of the initial state) are not the step's.
    let marks: Vec<&(u64, BTreeMap<String, CollTotals>)> =
        c.step_marks.iter().filter(|(s, _)| *s >= 1).collect();
    let (Some(a), Some(b)) = (marks.first(), marks.last()) else {
        return Vec::new();
    };
    let steps = b.0.saturating_sub(a.0);
    if steps == 0 {
        return Vec::new();
    }
    let receipt = |f: &str| {
        let ops = run.figures.hlo.as_ref()?.ops.as_ref()?;
        let s = match f {
            "all_reduce" => ops.all_reduce,
            "all_gather" => ops.all_gather,
            "reduce_scatter" => ops.reduce_scatter,
            _ => None,
        }?;
        Some((s.count, s.total_bytes))
    };
    let mut out: Vec<PerStep> =
        b.1.iter()
            .map(|(f, t)| {
                let before = a.1.get(f).copied().unwrap_or_default();
                PerStep {
                    func: f.clone(),
                    count: (t.count - before.count) as f64 / steps as f64,
                    bytes: (t.bytes - before.bytes) as f64 / steps as f64,
                    steps,
                    receipt: receipt(f),
                }
            })
            .filter(|p| p.count > 0.0 || p.receipt.is_some())
            .collect();
    // A kind the receipt lists that NCCL never ran is a mismatch too, not a missing line.
    for f in ["all_reduce", "all_gather", "reduce_scatter"] {
        if let Some(r) = receipt(f).filter(|r| r.0 > 0 && !b.1.contains_key(f)) {
            out.push(PerStep {
                func: f.to_string(),
                count: 0.0,
                bytes: 0.0,
                steps,
                receipt: Some(r),
            });
        }
    }
    out
}

/// One process rank's line in the collectives view.
#[derive(Debug, Clone, PartialEq)]
pub struct RankRow {
    pub rank: u32,
    /// `all_reduce #1233` per function, the latest completed.
    pub last_done: String,
    /// The oldest collective in flight: `all_reduce #1234 · 9.5 MB · 12.0 s · kernel started`.
    pub inflight: Option<String>,
    /// `dropped 12 · lost 3` when the plugin lost anything, with its other counters
    /// (`bad`, `unrequested`, `evicted`, `unlisted`) and ddptop's (`stale`, `not this run's`)
    /// when they are not 0.
    pub loss: Option<String>,
}

/// One rank's counters as the view shows them; `None` when all are 0.
pub fn loss_text(c: &crate::run::collectives::LossCounters) -> Option<String> {
    let mut parts = Vec::new();
    if c.dropped + c.lost > 0 {
        parts.push(format!("dropped {} · lost {}", c.dropped, c.lost));
    }
    parts.extend(
        c.named()
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(what, n)| format!("{what} {n}")),
    );
    (!parts.is_empty()).then(|| parts.join(" · "))
}

/// One function's line: totals over the run, NCCL's algorithm/protocol choices.
#[derive(Debug, Clone, PartialEq)]
pub struct FuncRow {
    pub func: String,
    pub count: u64,
    pub bytes: u64,
    pub kernel_ms: f64,
}

/// Bus bandwidth of one function's collectives of one size class.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeRow {
    pub func: String,
    /// Lower bound of the class, bytes (a power of two).
    pub from_bytes: u64,
    pub n: u64,
    pub busbw_gbs: Option<f64>,
}

/// What the collectives view shows (pure; `ui::collectives` draws it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CollectivesModel {
    /// In place of everything else: why there is nothing (k=1, plugin not loaded yet).
    pub note: Option<String>,
    /// Which rank is inside which collective, when one has been in flight ≥ `STUCK_AFTER_S`.
    pub verdict: Option<String>,
    pub ranks: Vec<RankRow>,
    pub funcs: Vec<FuncRow>,
    /// `ring/simple 1480 · tree/ll 2`
    pub algos: String,
    pub sizes: Vec<SizeRow>,
    /// The latest step's bucket all-reduces of the first rank, matched by order and size.
    pub buckets: Vec<BucketColl>,
    pub per_step: Vec<PerStep>,
    /// Records ddptop refused over its caps (`run::coll_bounds`): how many, which cap.
    pub bounds: Option<String>,
}

/// Whether the run was launched with the plugin (its recorded environment says so).
pub fn plugin_on(run: &RunView) -> bool {
    run.launch
        .env
        .get(crate::supervisor::nccl_profiler::ENV)
        .is_some_and(Option::is_some)
}

/// The view of a run, as of `now` (the UI passes the latest batch's arrival: pure). `None` when
/// the run was launched without the plugin and nothing came from one.
pub fn model(run: &RunView, now: Instant) -> Option<CollectivesModel> {
    let cs = &run.collectives;
    if cs.is_empty() && !plugin_on(run) && run.figures.coll_summary.is_none() {
        return None;
    }
    let mut m = CollectivesModel::default();
    if run.spec.k == 1 {
        m.note = Some(NO_COLLECTIVES_K1.to_string());
        return Some(m);
    }
    if let Some(s) = run.figures.coll_summary.as_ref().filter(|_| cs.is_empty()) {
        return Some(stored_model(s));
    }
    if cs.is_empty() {
        m.note = Some(if run.status.is_final() {
            "NCCL profiler plugin set on the launch; no rank's plugin reported a collective".into()
        } else {
            "NCCL profiler plugin set on the launch; no rank's plugin has connected yet (NCCL loads it at its first communicator)".into()
        });
        return Some(m);
    }
    m.verdict = stuck(run, now, STUCK_AFTER_S);
    let mut funcs: BTreeMap<String, CollTotals> = BTreeMap::new();
    let mut algos: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut sizes: BTreeMap<(String, u32), (SizeClass, u32)> = BTreeMap::new();
    for (r, p) in &cs.ranks {
        let mut last: BTreeMap<&str, u64> = BTreeMap::new();
        let mut oldest: Option<(f64, String)> = None;
        for c in p.comms.values() {
            for (f, s) in &c.last_done {
                let e = last.entry(f).or_insert(*s);
                *e = (*e).max(*s);
            }
            for f in &c.inflight {
                let a = age(c, f.age_s, now);
                if oldest.as_ref().is_none_or(|o| a > o.0) {
                    let kernel = if f.kernel {
                        "kernel started"
                    } else {
                        "kernel not started"
                    };
                    oldest = Some((
                        a,
                        format!(
                            "{} #{} · {} · {a:.1} s · {kernel}",
                            f.func,
                            f.seq,
                            crate::util::fmt_bytes(f.bytes)
                        ),
                    ));
                }
            }
            // Rank 0's view for the run-wide sums (every rank ran the same collectives).
            if Some(r) == cs.ranks.keys().next() {
                for (f, t) in &c.totals {
                    let e = funcs.entry(f.clone()).or_default();
                    e.count += t.count;
                    e.bytes += t.bytes;
                    e.kernel_us += t.kernel_us;
                }
                for (k, n) in &c.algos {
                    *algos.entry(k.clone()).or_default() += n;
                }
                for (k, s) in &c.sizes {
                    let e = sizes
                        .entry(k.clone())
                        .or_insert((SizeClass::default(), c.nranks));
                    e.0.n += s.n;
                    e.0.bytes += s.bytes;
                    e.0.kernel_us += s.kernel_us;
                }
            }
        }
        let last_done = if last.is_empty() {
            "none completed".to_string()
        } else {
            last.iter()
                .map(|(f, s)| format!("{f} #{s}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let loss = loss_text(&p.loss);
        m.ranks.push(RankRow {
            rank: *r,
            last_done,
            inflight: oldest.map(|o| o.1),
            loss,
        });
    }
    m.funcs = funcs
        .into_iter()
        .map(|(func, t)| FuncRow {
            func,
            count: t.count,
            bytes: t.bytes,
            kernel_ms: t.kernel_us / 1e3,
        })
        .collect();
    m.algos = algos
        .iter()
        .map(|((a, p), n)| format!("{a}/{p} {n}"))
        .collect::<Vec<_>>()
        .join(" · ");
    m.sizes = sizes
        .into_iter()
        .map(|((func, class), (s, n))| SizeRow {
            busbw_gbs: busbw_gbs(&func, n, &s),
            func,
            from_bytes: 1u64 << class,
            n: s.n,
        })
        .collect();
    if let Some(r) = cs.ranks.keys().next() {
        m.buckets = match_buckets(run, *r).unwrap_or_default();
    }
    m.per_step = per_step(run);
    m.bounds = cs.over_cap().note();
    Some(m)
}

/// The view of a finished run from what was stored: the per-rank aggregate, without in-flight
/// collectives, verdicts or buckets (those are live only).
fn stored_model(s: &crate::run::collectives::CollSummary) -> CollectivesModel {
    let mut m = CollectivesModel {
        note: Some("as stored with the run: totals, no in-flight collectives".into()),
        ..CollectivesModel::default()
    };
    for (rank, r) in &s.ranks {
        m.ranks.push(RankRow {
            rank: *rank,
            last_done: r
                .last_seq
                .iter()
                .map(|(f, s)| format!("{f} #{s}"))
                .collect::<Vec<_>>()
                .join(", "),
            inflight: None,
            loss: loss_text(&r.loss),
        });
    }
    if let Some(r0) = s.ranks.values().next() {
        m.funcs = r0
            .funcs
            .iter()
            .map(|(f, x)| FuncRow {
                func: f.clone(),
                count: x.count,
                bytes: x.bytes,
                kernel_ms: x.kernel_ms,
            })
            .collect();
        m.algos = r0
            .algos
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(" · ");
        m.sizes = r0
            .busbw
            .iter()
            .map(|b| SizeRow {
                func: b.func.clone(),
                from_bytes: b.from_bytes,
                n: b.n,
                busbw_gbs: b.busbw_gbs,
            })
            .collect();
    }
    m.bounds = crate::run::collectives::sum_over(s.ranks.values().map(|r| r.over_cap)).note();
    m.per_step = s
        .per_step
        .iter()
        .map(|p| PerStep {
            func: p.func.clone(),
            count: p.count,
            bytes: p.bytes,
            steps: p.steps,
            receipt: p.receipt,
        })
        .collect();
    m
}

#[cfg(test)]
mod tests {
    //! Driven by plugin messages (tests/fixtures/nccl/*.jsonl): hand-written in the plugin's
    //! exact format (docs/protocol.md `nccl`) for situations a CPU machine cannot produce — a
    //! hung rank, a transport stall, DDP's buckets — not captured from a GPU run.
    use super::*;
    use crate::app::reduce::apply_worker;
    use crate::protocol::{Backend, parse_worker};
    use crate::run::{Experiment, RunSpec};
    use std::time::Duration;

    fn run(exp: Experiment, k: u32) -> (RunView, Instant) {
        let now = Instant::now();
        let mut spec = RunSpec::new(exp, k, Backend::Nccl);
        spec.k = k;
        let mut r = RunView::new("r1".into(), spec, now, 0.0);
        r.launch.env.insert(
            crate::supervisor::nccl_profiler::ENV.into(),
            Some("/x/libnccl_profiler_ddptop.so".into()),
        );
        (r, now)
    }

    /// Apply every line of a fixture; `# +S` lines move the clock S seconds on.
    fn feed(r: &mut RunView, mut now: Instant, text: &str) -> Instant {
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(s) = line.strip_prefix("# +") {
                now += Duration::from_secs_f64(s.trim().parse().unwrap());
                continue;
            }
            let msg = parse_worker(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            apply_worker(r, &msg, now);
        }
        now
    }

    #[test]
    fn the_rank_that_never_entered_is_named() {
        let (mut r, t0) = run(Experiment::Weak, 4);
        let now = feed(
            &mut r,
            t0,
            include_str!("../../tests/fixtures/nccl/hang_k4.jsonl"),
        );
        assert_eq!(
            stuck(&r, now, STUCK_AFTER_S).unwrap(),
            "ranks 0, 2, 3 inside all_reduce #1234 for 12.0 s; rank 1 last completed #1233 and never entered #1234"
        );
        // Ages go on between batches.
        let later = now + Duration::from_secs(3);
        assert!(
            stuck(&r, later, STUCK_AFTER_S)
                .unwrap()
                .contains("for 15.0 s")
        );
        let m = model(&r, now).unwrap();
        assert_eq!(m.ranks[1].inflight, None);
        assert_eq!(
            m.ranks[0].inflight.as_deref(),
            Some("all_reduce #1234 · 9.5 MB · 12.0 s · kernel started")
        );
        assert_eq!(m.ranks[1].loss.as_deref(), Some("dropped 12 · lost 3"));
        // Nothing is stuck before anything has been in flight long enough.
        assert_eq!(stuck(&r, now, 60.0), None);
    }

    #[test]
    fn a_rank_whose_plugin_sent_nothing_is_said_so() {
        let (mut r, t0) = run(Experiment::Weak, 4);
        let three: Vec<&str> = include_str!("../../tests/fixtures/nccl/hang_k4.jsonl")
            .lines()
            .filter(|l| !l.contains(r#""rank":1,"#))
            .collect();
        let now = feed(&mut r, t0, &three.join("\n"));
        assert_eq!(
            stuck(&r, now, STUCK_AFTER_S).unwrap(),
            "ranks 0, 2, 3 inside all_reduce #1234 for 12.0 s; rank 1: no profiler data"
        );
    }

    #[test]
    fn one_process_driving_two_gpus_is_two_ranks_of_its_communicator() {
        // A JAX process: one plugin connection (process rank 0), a communicator per device with
        // the same id; device 1 never entered the all-reduce device 0 is inside.
        let (mut r, t0) = run(Experiment::Jax, 2);
        let b = |comm_rank: u32, inflight: &str| {
            format!(
                r#"{{"v":1,"type":"nccl","rank":0,"t":9.0,"comm":"00000000000000aa","comm_rank":{comm_rank},"nranks":2,"nnodes":1,"last_done":{{"all_reduce":41}},"inflight":[{inflight}],"colls":[],"more":0,"funcs":{{}},"dropped":0,"lost":0,"bad":0,"final":false}}"#
            )
        };
        let f =
            r#"{"func":"all_reduce","seq":42,"bytes":4,"t_call":1.0,"age_s":8.0,"kernel":false}"#;
        let now = feed(&mut r, t0, &format!("{}\n{}", b(0, f), b(1, "")));
        assert_eq!(
            stuck(&r, now, STUCK_AFTER_S).unwrap(),
            "rank 0 inside all_reduce #42 for 8.0 s; rank 1 last completed #41 and never entered #42"
        );
    }

    /// Issue 45: a collective completes but its end event is lost (the plugin still lists it in
    /// flight); the communicator completes later ones; then the job stalls outside
    /// communication. The stale entry is set aside and counted, and no verdict names it.
    #[test]
    fn a_stale_in_flight_entry_is_never_named() {
        let (mut r, t0) = run(Experiment::Weak, 2);
        let b = |rank: u32, inflight: &str| {
            format!(
                r#"{{"v":1,"type":"nccl","rank":{rank},"t":9.0,"comm":"00000000000000aa","comm_rank":{rank},"nranks":2,"nnodes":1,"last_done":{{"all_reduce":45}},"inflight":[{inflight}],"colls":[],"more":0,"funcs":{{}},"dropped":0,"lost":0,"bad":0,"final":false}}"#
            )
        };
        let lost =
            r#"{"func":"all_reduce","seq":42,"bytes":4,"t_call":1.0,"age_s":30.0,"kernel":true}"#;
        let now = feed(&mut r, t0, &format!("{}\n{}", b(0, lost), b(1, "")));
        assert_eq!(stuck(&r, now, STUCK_AFTER_S), None, "outside communication");
        assert_eq!(evidence_age(&r, now), None);
        assert_eq!(r.collectives.ranks[&0].loss.stale, 1);
        // A real one beside it is still named, with how old the evidence is.
        let real =
            r#"{"func":"all_reduce","seq":46,"bytes":4,"t_call":1.0,"age_s":8.0,"kernel":false}"#;
        let now = feed(
            &mut r,
            now,
            &format!("{}\n{}", b(0, &format!("{lost},{real}")), b(1, "")),
        );
        assert_eq!(
            stuck(&r, now, STUCK_AFTER_S).unwrap(),
            "rank 0 inside all_reduce #46 for 8.0 s; rank 1 last completed #45 and never entered #46"
        );
        assert_eq!(
            evidence_age(&r, now).unwrap(),
            "evidence: the plugin's last reports, rank 0 0.0 s ago, rank 1 0.0 s ago; 2 in-flight entries set aside as stale (completed later on their communicator)"
        );
    }

    #[test]
    fn all_ranks_inside_with_kernels_started_is_a_transport_stall() {
        let (mut r, t0) = run(Experiment::Weak, 2);
        let now = feed(
            &mut r,
            t0,
            include_str!("../../tests/fixtures/nccl/stall_k2.jsonl"),
        );
        assert_eq!(
            stuck(&r, now, STUCK_AFTER_S).unwrap(),
            "both ranks inside broadcast #0 for 5.0 s, kernels started, none finished: a transport stall, not a missing rank"
        );
    }

    #[test]
    fn bucket_all_reduces_are_matched_by_order_and_size() {
        let (mut r, t0) = run(Experiment::Weak, 2);
        let now = feed(
            &mut r,
            t0,
            include_str!("../../tests/fixtures/nccl/buckets_k2.jsonl"),
        );
        let b = match_buckets(&r, 0).unwrap();
        assert_eq!(
            b.iter()
                .map(|x| (x.index, x.bytes, x.seq))
                .collect::<Vec<_>>(),
            [(0, 9461800, 1231), (1, 26501120, 1232), (2, 8740352, 1233)]
        );
        assert_eq!(b[0].ready_ms, 0.0);
        assert!((b[1].ready_ms - 11.372).abs() < 1e-6, "{}", b[1].ready_ms);
        assert!((b[1].start_ms.unwrap() - 11.44).abs() < 1e-6);
        assert_eq!(b[1].kernel_ms, Some(0.176512));
        // The earlier step's all-reduces of other sizes did not match; a step whose sizes never
        // occur matches nothing.
        let mut other = r.clone();
        other
            .ranks
            .get_mut(&0)
            .unwrap()
            .buckets
            .as_mut()
            .unwrap()
            .buckets[0]
            .bytes = 1;
        assert_eq!(match_buckets(&other, 0), None);
        let m = model(&r, now).unwrap();
        assert_eq!(m.buckets.len(), 3);
        assert_eq!(m.algos, "ring/simple 5");
        let ar = m.sizes.iter().find(|s| s.from_bytes == 16 << 20).unwrap();
        // 26501120 B in 176.512 µs at k=2: algbw = busbw = 150.1 GB/s.
        assert!(
            (ar.busbw_gbs.unwrap() - 150.137).abs() < 0.01,
            "{:?}",
            ar.busbw_gbs
        );
        assert_eq!(m.verdict, None);
    }

    #[test]
    fn jax_collectives_per_step_against_the_receipt() {
        let (mut r, t0) = run(Experiment::Jax, 2);
        feed(
            &mut r,
            t0,
            include_str!("../../tests/fixtures/nccl/jax_k2.jsonl"),
        );
        let p = per_step(&r);
        let ar = p.iter().find(|p| p.func == "all_reduce").unwrap();
        assert_eq!((ar.count, ar.bytes, ar.steps), (1.0, 44703272.0, 10));
        assert_eq!(ar.receipt, Some((1, 44703272)));
        assert_eq!(ar.matches(), Some(true));
        // The parameter broadcast before step 1 is not a step's.
        assert!(p.iter().all(|p| p.func != "broadcast"));
    }

    #[test]
    fn executed_collectives_that_differ_from_the_receipt_are_a_mismatch() {
        // The same executed step against a receipt of two all-reduces and one all-gather: the
        // all-reduce count differs, and the all-gather XLA wrote was never run.
        let (mut r, t0) = run(Experiment::Jax, 2);
        let fixture = include_str!("../../tests/fixtures/nccl/jax_k2.jsonl").replace(
            r#""ops":{"all_reduce":{"count":1,"largest_elems":11175818,"total_elems":11175818,"total_bytes":44703272}}"#,
            r#""ops":{"all_reduce":{"count":2,"largest_elems":11175818,"total_elems":11175818,"total_bytes":44703272},"all_gather":{"count":1,"largest_elems":8,"total_elems":8,"total_bytes":32}}"#,
        );
        feed(&mut r, t0, &fixture);
        let p = per_step(&r);
        let ar = p.iter().find(|p| p.func == "all_reduce").unwrap();
        assert_eq!(
            (ar.receipt, ar.matches()),
            (Some((2, 44703272)), Some(false))
        );
        let ag = p.iter().find(|p| p.func == "all_gather").unwrap();
        assert_eq!((ag.count, ag.matches()), (0.0, Some(false)));
    }

    #[test]
    fn a_k1_run_says_no_collectives_instead_of_failing() {
        let (mut r, t0) = run(Experiment::Weak, 1);
        let hello = r#"{"v":1,"type":"nccl_hello","token":"ab","run_id":"r1","rank":0,"world_size":1,"pid":7,"host":"h","plugin":"0.1.0","abi":"v5","t":1.0}"#;
        feed(&mut r, t0, hello);
        assert!(
            r.evidence
                .caveats
                .iter()
                .any(|c| c.text == NO_COLLECTIVES_K1)
        );
        assert_eq!(
            model(&r, t0).unwrap().note.as_deref(),
            Some(NO_COLLECTIVES_K1)
        );
        assert_eq!(stuck(&r, t0, 0.0), None);
    }

    #[test]
    fn an_nccl_without_the_plugins_interfaces_is_one_line_on_the_run_by_symbol() {
        let (mut r, t0) = run(Experiment::Weak, 2);
        // Its version number is new enough: the names in its library decide.
        let hello = r#"{"v":1,"type":"hello","token":"ab","run_id":"r1","rank":0,"world_size":2,"local_rank":0,"pid":1,"host":"h","device":"cuda:0","backend":"nccl","worker":"train","torch":"2.5.0","nccl":"2.28.9","cuda":"12.4","t":1.0,"nccl_lib":{"path":"/v/libnccl.so.2","profiler":[3,2,1]}}"#;
        feed(&mut r, t0, hello);
        assert!(
            r.evidence.caveats.iter().any(|c| c
                .text
                .contains("(/v/libnccl.so.2) looks up ncclProfiler_v3/v2/v1 only")),
            "{:?}",
            r.evidence.caveats
        );
        // One that names v4 (NCCL 2.27), and a worker that did not say: nothing said.
        let (mut r, t0) = run(Experiment::Weak, 2);
        feed(&mut r, t0, &hello.replace("[3,2,1]", "[4,3,2,1]"));
        feed(
            &mut r,
            t0,
            &hello
                .replace(
                    r#","nccl_lib":{"path":"/v/libnccl.so.2","profiler":[3,2,1]}"#,
                    "",
                )
                .replace(r#""rank":0"#, r#""rank":1"#),
        );
        assert!(
            r.evidence
                .caveats
                .iter()
                .all(|c| !c.text.contains("profiler plugin off")),
            "{:?}",
            r.evidence.caveats
        );
    }

    #[test]
    fn a_tls_run_with_the_plugin_says_on_screen_what_it_lacks() {
        let hello = r#"{"v":1,"type":"hello","token":"ab","run_id":"r1","rank":0,"world_size":2,"local_rank":0,"pid":1,"host":"h","device":"cuda:0","backend":"nccl","worker":"attach","torch":"2.11.0","nccl":"2.28.9","cuda":"13.0","t":1.0}"#;
        let lacks = |socket: &str, plugin: bool| {
            let (mut r, t0) = run(Experiment::Attach, 2);
            r.launch
                .env
                .insert("DDPTOP_SOCKET".into(), Some(socket.into()));
            let path = plugin.then(|| "/o/libnccl_profiler_ddptop.so".to_string());
            r.launch
                .env
                .insert(crate::supervisor::nccl_profiler::ENV.into(), path);
            feed(&mut r, t0, hello);
            r.evidence
                .caveats
                .iter()
                .filter(|c| c.text.starts_with("no NCCL via TLS: "))
                .count()
        };
        assert_eq!(lacks("tls://10.0.0.1:4000", true), 1);
        assert_eq!(lacks("tcp://10.0.0.1:4000", true), 0);
        assert_eq!(lacks("/run/ddptop-1/s.sock", true), 0);
        assert_eq!(
            lacks("tls://10.0.0.1:4000", false),
            0,
            "no plugin on the launch"
        );
    }

    #[test]
    fn every_function_nccl_reports_is_shown_by_its_name() {
        let (mut r, t0) = run(Experiment::Attach, 2);
        let text: Vec<&str> = include_str!("../../tests/fixtures/nccl/all_kinds_k2.jsonl")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect();
        let now = feed(&mut r, t0, &text.join("\n"));
        let m = model(&r, now).unwrap();
        let names: Vec<&str> = m.funcs.iter().map(|f| f.func.as_str()).collect();
        assert_eq!(
            names,
            [
                "all_gather",
                "all_reduce",
                "all_to_all",
                "broadcast",
                "gather",
                "put_signal",
                "recv",
                "reduce",
                "reduce_scatter",
                "scatter",
                "send",
                "send_recv",
                "signal",
                "wait_signal"
            ]
        );
        assert!(m.funcs.iter().all(|f| f.count == 1));
        assert!(m.sizes.iter().any(|s| s.func == "gather"));
        assert_eq!(m.bounds, None, "all of NCCL's kinds fit the caps");
        // A rank inside a point-to-point send is placed like one inside a collective.
        assert_eq!(
            stuck(&r, now, STUCK_AFTER_S).unwrap(),
            "rank 0 inside send #1 for 3.0 s; rank 1 last completed #0 and never entered #1"
        );
    }

    #[test]
    fn busbw_follows_nccl_tests() {
        let s = SizeClass {
            n: 1,
            bytes: 1_000_000_000,
            kernel_us: 1e6,
        };
        assert_eq!(busbw_gbs("all_reduce", 4, &s), Some(1.5));
        assert_eq!(
            busbw_gbs("all_gather", 4, &s),
            Some(3.0),
            "one rank's part × 4 × 3/4"
        );
        assert_eq!(busbw_gbs("broadcast", 4, &s), Some(1.0));
        assert_eq!(size_class(1 << 20), 20);
        assert_eq!(size_class((2 << 20) - 1), 20);
    }
}
