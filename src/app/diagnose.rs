//! Failures named, with the fix: the verdicts a user needs when DDP breaks rather than slows
//! (docs/troubleshooting.md). A rank reports what it can see alone (`protocol::Finding`:
//! parameters without a gradient); what needs every rank's state (one rank out of data while
//! the others wait) is judged here, from the ranks' last steps, byes and errors, when the run
//! is judged hung or fails. Pure functions over the run's view: the engine decides when.

use crate::protocol::{ByeReason, Finding, FindingKind};
use crate::run::{Diagnosis, DiagnosisKind, RankTail, RankView, RunView};
use std::time::Instant;

mod compile;
mod slower;
pub use compile::{eager_run, slower_than_eager};
pub use slower::{
    HOST_BOUND, One, Slower, judge, measured_one, recheck_at_end, slower_than_one_gpu,
};

/// Most parameter names quoted in a verdict's line (all are in its evidence).
const NAMES_IN_LINE: usize = 4;

/// A rank's own finding as a verdict. `step`: the rank's last finished step when it said it
/// (the finding is about the step under way, the next one).
/// `None`: a finding that is no verdict by itself (compile counters below a storm).
pub fn from_finding(rank: u32, step: u64, f: &Finding) -> Option<Diagnosis> {
    match f.kind {
        FindingKind::UnusedParameters => Some(unused_parameters(rank, step + 1, f)),
        FindingKind::CompileRegression => compile::recompile_storm(rank, step, f),
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

/// The allowances of the never-joined verdict (`never_joined`), in seconds.
#[derive(Debug, Clone, Copy)]
pub struct JoinWait {
    /// How long ranks may wait in `init_process_group` for a rank that said hello and is idle
    /// (the run's stall threshold).
    pub idle_s: f64,
    /// For a rank that is busy before its `init_process_group` (loading data, compiling), or
    /// has not said hello yet (still importing): the start-up allowance.
    pub busy_s: f64,
}

/// Ranks waiting inside `init_process_group`, since when (the first to enter), and the ranks
/// that never entered; `None` when the judge has nothing to say (fewer than two ranks, no rank
/// reported its rendezvous, every rank entered, or one returned: all had joined).
fn join_state(run: &RunView) -> Option<(Vec<&RankView>, Instant, Vec<&RankView>)> {
    if run.ranks.len() < 2 || run.status.is_final() {
        return None;
    }
    // A rank past its init (returned, or stepping) means every rank joined: the process group
    // is made by all of them or by none.
    if run
        .ranks
        .values()
        .any(|r| r.init_joined.is_some() || r.step > 0)
    {
        return None;
    }
    let waiting: Vec<&RankView> = run
        .ranks
        .values()
        .filter(|r| r.init_entered.is_some())
        .collect();
    let since = waiting
        .iter()
        .filter_map(|r| r.init_entered.as_ref())
        .map(|(t, _)| *t)
        .min()?;
    let absent: Vec<&RankView> = run
        .ranks
        .values()
        .filter(|r| r.init_entered.is_none())
        .collect();
    (!absent.is_empty()).then_some((waiting, since, absent))
}

/// When one absent rank becomes "never joined": its peers waited `idle_s` since the later of
/// their first entry and its hello (its imports are not lateness), or `busy_s` when it is
/// computing or has not said hello.
fn absent_due(r: &RankView, since: Instant, w: JoinWait) -> Instant {
    let after = |t: Instant, s: f64| t + std::time::Duration::from_secs_f64(s.max(0.0));
    match r.hello_at {
        Some(h) => {
            let busy = r
                .cpu_cores(2.0)
                .is_some_and(|c| c >= crate::supervisor::watchdog::BUSY_CORES);
            after(since.max(h), if busy { w.busy_s } else { w.idle_s })
        }
        None => after(since, w.busy_s),
    }
}

/// The instant the never-joined verdict is due if nothing changes (the engine wakes then).
pub fn join_due(run: &RunView, w: JoinWait) -> Option<Instant> {
    let (_, since, absent) = join_state(run)?;
    absent.iter().map(|r| absent_due(r, since, w)).min()
}

/// Ranks wait in `init_process_group` for one that said hello and never called it (or never
/// said hello): named at `join_due`, or at once (`at_once`) when the run was already judged
/// hung by the watchdog's start-up verdict. The waiting ranks' bootstrap environment (what
/// they rendezvous at, the interface switches, the host's interfaces) is in the line: a rank
/// that calls init elsewhere, or cannot reach MASTER_ADDR, looks the same from here.
pub fn never_joined(run: &RunView, now: Instant, w: JoinWait, at_once: bool) -> Option<Diagnosis> {
    let (waiting, since, absent) = join_state(run)?;
    let due = absent.iter().map(|r| absent_due(r, since, w)).min()?;
    if !at_once && now < due {
        return None;
    }
    // How long the first missing rank has been late: since the later of its hello and its
    // peers' first entry (the instant its allowance counts from).
    let waited = now
        .saturating_duration_since(absent[0].hello_at.map_or(since, |h| h.max(since)))
        .as_secs_f64();
    let at = |t: Instant| {
        run.clock.started.map_or(String::new(), |s| {
            format!(" at +{:.1} s", t.saturating_duration_since(s).as_secs_f64())
        })
    };
    let who = |r: &RankView| {
        let mut facts = Vec::new();
        if let Some(p) = r.pid {
            facts.push(format!("pid {p}"));
        }
        if let Some(n) = &r.node {
            facts.push(format!("host {n}"));
        }
        if facts.is_empty() {
            facts.push("no hello".into());
        }
        format!("rank {} ({})", r.rank, facts.join(", "))
    };
    let names: Vec<String> = absent.iter().map(|r| who(r)).collect();
    let waiting_ids: Vec<String> = waiting.iter().map(|r| r.rank.to_string()).collect();
    let env = waiting
        .iter()
        .find_map(|r| r.init_entered.as_ref().map(|(_, e)| e))?;
    let or_unset = |v: &Option<String>| v.clone().unwrap_or_else(|| "unset".into());
    let ifs = if env.interfaces.is_empty() {
        "none reported".to_string()
    } else {
        env.interfaces.join(", ")
    };
    let mut text = format!(
        "{} never reached init_process_group after {waited:.1} s; rank{} {} wait{} in rendezvous/init. \
         MASTER_ADDR={}, MASTER_PORT={}, GLOO_SOCKET_IFNAME {}, NCCL_SOCKET_IFNAME {}, interfaces seen: {ifs}",
        names.join(", "),
        if waiting_ids.len() == 1 { "" } else { "s" },
        waiting_ids.join(","),
        if waiting_ids.len() == 1 { "s" } else { "" },
        or_unset(&env.master_addr),
        or_unset(&env.master_port),
        env.gloo_socket_ifname
            .as_ref()
            .map_or("unset".into(), |v| format!("={v}")),
        env.nccl_socket_ifname
            .as_ref()
            .map_or("unset".into(), |v| format!("={v}")),
    );
    // Waiting ranks that rendezvous at different places wait for each other forever too.
    let other = waiting.iter().find_map(|r| {
        let (_, e) = r.init_entered.as_ref()?;
        (e.master_addr != env.master_addr || e.master_port != env.master_port).then(|| {
            format!(
                "; rank {} rendezvous at {}:{} instead",
                r.rank,
                or_unset(&e.master_addr),
                or_unset(&e.master_port)
            )
        })
    });
    text.push_str(other.as_deref().unwrap_or(""));
    let mut evidence = Vec::new();
    for r in run.ranks.values() {
        let hello = r
            .hello_at
            .map_or("no hello".to_string(), |h| format!("hello{}", at(h)));
        let state = match &r.init_entered {
            Some((t, e)) => format!(
                "entered init_process_group{} (MASTER_ADDR={}, MASTER_PORT={}), waiting {:.1} s",
                at(*t),
                or_unset(&e.master_addr),
                or_unset(&e.master_port),
                now.saturating_duration_since(*t).as_secs_f64()
            ),
            None => {
                let cpu = r.cpu_cores(2.0).map_or(String::new(), |c| {
                    format!("; process using {:.0}% of a core", c * 100.0)
                });
                format!("never entered init_process_group{cpu}")
            }
        };
        evidence.push(format!("rank {}: {hello}, {state}", r.rank));
    }
    let first = absent[0].rank;
    Some(Diagnosis {
        kind: DiagnosisKind::NeverJoined,
        rank: Some(first),
        step: None,
        since_unix: crate::util::unix_now(),
        text,
        fix: format!(
            "see where rank {first} is before init_process_group (its stack is in the evidence): \
             every rank must call it, with the same MASTER_ADDR:MASTER_PORT (no wait for a file \
             or barrier its peers reach only after init, no rank-dependent early exit); across \
             nodes set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the interface that reaches \
             MASTER_ADDR"
        ),
        evidence,
    })
}

/// One rank's collective as an error message describes it.
#[derive(Debug, Clone, PartialEq)]
struct Called {
    rank: u32,
    op: String,
    seq: Option<u64>,
    /// Tensor shape as written (`[1000]`), where known.
    shape: Option<String>,
    elems: Option<u64>,
    /// Input bytes (the flight recorder's), where known.
    bytes: Option<u64>,
}

impl Called {
    fn describe(&self) -> String {
        let mut s = self.op.clone();
        if let Some(shape) = &self.shape {
            s.push_str(&format!(" of shape {shape}"));
        }
        if let Some(b) = self.bytes {
            s.push_str(&format!(" ({})", crate::util::fmt_bytes(b)));
        }
        if let Some(seq) = self.seq {
            s.push_str(&format!(" as collective #{seq}"));
        }
        s
    }
}

/// `key=value` in a fingerprint, up to the next `,` or `)` (a shape's brackets kept whole).
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text.find(key)? + key.len();
    let rest = &text[at..];
    let end = if rest.starts_with('[') {
        rest.find(']')? + 1
    } else {
        rest.find([',', ')']).unwrap_or(rest.len())
    };
    Some(&rest[..end])
}

/// TORCH_DISTRIBUTED_DEBUG=DETAIL's words: "Rank 0 is running collective:
/// CollectiveFingerPrint(SequenceNumber=3, OpType=ALLREDUCE, TensorShape=[10], …), but Rank 1
/// is running collective: CollectiveFingerPrint(…)". Either side may be cut off.
fn fingerprints(text: &str) -> Vec<Called> {
    let mut out = Vec::new();
    for part in text.split("Rank ").skip(1) {
        let Some((rank, rest)) = part.split_once(" is running collective: ") else {
            continue;
        };
        let (Ok(rank), Some(op)) = (rank.trim().parse::<u32>(), field(rest, "OpType=")) else {
            continue;
        };
        let shape = field(rest, "TensorShape=").map(str::to_string);
        let elems = shape.as_deref().and_then(|s| {
            s.trim_matches(['[', ']'])
                .split(',')
                .map(|d| d.trim().parse::<u64>().ok())
                .try_fold(1u64, |acc, d| Some(acc.saturating_mul(d?)))
        });
        out.push(Called {
            rank,
            op: op.to_lowercase(),
            seq: field(rest, "SequenceNumber=").and_then(|s| s.parse().ok()),
            shape,
            elems,
            bytes: None,
        });
    }
    out
}

/// The rank to name among the collectives seen: the one whose (op, shape) the fewest ranks
/// share; between two sides as large (k=2), the smaller collective (the usual bug: one rank
/// reduces a metric, or a tensor, the others do not). `None` when nothing tells them apart.
fn odd_one(calls: &[Called]) -> Option<&Called> {
    let key = |c: &Called| (c.op.clone(), c.shape.clone(), c.bytes);
    let share = |c: &Called| calls.iter().filter(|d| key(d) == key(c)).count();
    let fewest = calls.iter().map(share).min()?;
    let odd: Vec<&Called> = calls.iter().filter(|c| share(c) == fewest).collect();
    if odd.len() == 1 {
        return odd.first().copied();
    }
    let size = |c: &Called| c.elems.or(c.bytes);
    let smallest = odd.iter().filter_map(|c| size(c)).min()?;
    let small: Vec<&&Called> = odd.iter().filter(|c| size(c) == Some(smallest)).collect();
    (small.len() == 1).then(|| *small[0])
}

/// gloo's own size check: "op.preamble.length <= op.nbytes. 2000 vs 1000. Received data size
/// doesn't match expected size." → (received, expected) bytes.
fn gloo_sizes(line: &str) -> Option<(u64, u64)> {
    let rest = &line[line.find("op.preamble.length <= op.nbytes.")? + 32..];
    let (a, rest) = rest.trim_start().split_once(" vs ")?;
    let b: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((a.trim().parse().ok()?, b.parse().ok()?))
}

/// Ranks that called different collectives, or one of different sizes, at the same point:
/// from TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprints (in a rank's error or its last lines),
/// gloo's size check (a rank aborted: "Received data size doesn't match expected size"), or
/// the flight recorder's pending collectives of hung ranks (the same sequence number, another
/// op).
pub fn collective_mismatch(run: &RunView, tails: &[RankTail]) -> Option<Diagnosis> {
    // Every line a rank said about its failure: its error, then its last output lines.
    let mut said: Vec<(u32, &str)> = Vec::new();
    for r in run.ranks.values() {
        if let Some(e) = &r.error {
            said.push((r.rank, e));
        }
    }
    for t in tails {
        said.extend(t.lines.iter().map(|l| (t.rank, l.as_str())));
    }
    let others = |named: Option<u32>| -> Vec<String> {
        run.ranks
            .values()
            .filter(|r| Some(r.rank) != named)
            .filter_map(|r| r.error.as_ref().map(|e| format!("rank {}: {e}", r.rank)))
            .collect()
    };
    let fix = "make every rank issue the same collectives in the same order with the same \
               sizes: no collective under `if rank == …`, no per-rank shapes (pad, or \
               all_gather the sizes first); TORCH_DISTRIBUTED_DEBUG=DETAIL names both sides \
               of the first mismatch"
        .to_string();
    let diag = |rank: Option<u32>, text: String, mut evidence: Vec<String>| {
        evidence.extend(others(rank));
        Diagnosis {
            kind: DiagnosisKind::CollectiveMismatch,
            rank,
            step: rank.and_then(|r| run.ranks.get(&r)).map(|r| r.step + 1),
            since_unix: crate::util::unix_now(),
            text,
            fix: fix.clone(),
            evidence,
        }
    };
    // DETAIL's words name both sides.
    let mut calls: Vec<Called> = Vec::new();
    let mut quoted = Vec::new();
    for (rank, line) in &said {
        let found = fingerprints(line);
        if !found.is_empty() {
            quoted.push(format!("rank {rank} said: {line}"));
        }
        for c in found {
            if !calls.iter().any(|d| d.rank == c.rank) {
                calls.push(c);
            }
        }
    }
    if calls.len() >= 2 {
        let odd = odd_one(&calls);
        let text = mismatch_text(&calls, odd, "");
        return Some(diag(odd.map(|o| o.rank), text, quoted));
    }
    // gloo's size check fired on the rank whose buffer was the smaller.
    if let Some((rank, line, (got, want))) = said
        .iter()
        .find_map(|(r, l)| gloo_sizes(l).map(|s| (*r, *l, s)))
    {
        let peers: Vec<String> = run
            .ranks
            .keys()
            .filter(|r| **r != rank)
            .map(|r| r.to_string())
            .collect();
        let text = format!(
            "rank {rank}'s collective received {got} bytes where it expected at most {want}: \
             it called a collective of another size (or another one) than rank{} {} at the same \
             point (gloo: \"Received data size doesn't match expected size\")",
            if peers.len() == 1 { "" } else { "s" },
            peers.join(",")
        );
        return Some(diag(
            Some(rank),
            text,
            vec![format!("rank {rank} said: {}", line.trim())],
        ));
    }
    // Hung ranks whose recorders show different collectives (op or size) pending at the same
    // sequence number.
    let pending = pending_calls(run);
    for a in &pending {
        let same: Vec<Called> = pending.iter().filter(|c| c.seq == a.seq).cloned().collect();
        let differ = same.iter().any(|c| {
            c.op != a.op || (c.bytes.is_some() && a.bytes.is_some() && c.bytes != a.bytes)
        });
        if !differ {
            continue;
        }
        let odd = odd_one(&same);
        let text = mismatch_text(&same, odd, "; each waits for the other");
        let evidence = same
            .iter()
            .map(|c| {
                format!(
                    "rank {}: pending {} (flight recorder)",
                    c.rank,
                    c.describe()
                )
            })
            .collect();
        return Some(diag(odd.map(|o| o.rank), text, evidence));
    }
    None
}

/// "rank o called X while rank p called Y…" (`then` follows), or every call when no rank is
/// the odd one out.
fn mismatch_text(calls: &[Called], odd: Option<&Called>, then: &str) -> String {
    match odd {
        Some(o) => {
            let rest: Vec<String> = calls
                .iter()
                .filter(|c| c.rank != o.rank)
                .map(|c| format!("rank {} called {}", c.rank, c.describe()))
                .collect();
            format!(
                "rank {} called {} while {}{then}",
                o.rank,
                o.describe(),
                rest.join(", ")
            )
        }
        None => {
            let all: Vec<String> = calls
                .iter()
                .map(|c| format!("rank {} called {}", c.rank, c.describe()))
                .collect();
            format!("ranks called different collectives: {}", all.join("; "))
        }
    }
}

/// The collective each rank's flight recorder shows pending (op, sequence number, bytes).
fn pending_calls(run: &RunView) -> Vec<Called> {
    run.ranks
        .values()
        .filter_map(|r| {
            let (_, c) = r.coll.as_ref()?;
            Some(Called {
                rank: r.rank,
                op: c.op.clone()?,
                seq: Some(c.seq?),
                shape: None,
                elems: None,
                bytes: c.bytes,
            })
        })
        .collect()
}

/// Add `d` unless the run already has a verdict of its kind for its rank (other kinds than
/// uneven inputs: of its kind at all, as every rank says the same); true when added.
pub fn add(run: &mut RunView, d: Diagnosis) -> bool {
    // One story per run but for uneven inputs, where each short rank is its own.
    let once_per_run = d.kind != DiagnosisKind::UnevenInputs;
    if run
        .evidence
        .diagnoses
        .iter()
        .any(|x| x.kind == d.kind && (once_per_run || x.rank == d.rank))
    {
        return false;
    }
    run.evidence.diagnoses.push(d);
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

    fn rdzv(port: &str) -> crate::protocol::Rendezvous {
        crate::protocol::Rendezvous {
            state: crate::protocol::RendezvousState::Entered,
            master_addr: Some("10.0.0.1".into()),
            master_port: Some(port.into()),
            gloo_socket_ifname: None,
            nccl_socket_ifname: Some("eth1".into()),
            interfaces: vec!["lo 127.0.0.1".into(), "eth0 10.0.0.2".into()],
        }
    }

    const WAIT: JoinWait = JoinWait {
        idle_s: 5.0,
        busy_s: 180.0,
    };

    #[test]
    fn a_rank_that_said_hello_and_never_entered_init_is_named_at_the_threshold() {
        let t0 = Instant::now();
        let s = |x: f64| t0 + std::time::Duration::from_secs_f64(x);
        let mut r = run(3);
        r.clock.started = Some(t0);
        for (id, rank) in r.ranks.iter_mut() {
            rank.hello_at = Some(s(1.0));
            rank.pid = Some(100 + id);
            rank.node = Some("node-a".into());
            if *id != 2 {
                rank.init_entered = Some((s(1.5), rdzv("29500")));
            }
        }
        // Rank 2 said hello at 1.0; its peers entered at 1.5: due 5 s after 1.5.
        assert_eq!(join_due(&r, WAIT), Some(s(6.5)));
        assert!(never_joined(&r, s(6.4), WAIT, false).is_none(), "not yet");
        let d = never_joined(&r, s(6.6), WAIT, false).unwrap();
        assert_eq!(
            (d.kind, d.rank, d.step),
            (DiagnosisKind::NeverJoined, Some(2), None)
        );
        assert_eq!(
            d.text,
            "rank 2 (pid 102, host node-a) never reached init_process_group after 5.1 s; ranks \
             0,1 wait in rendezvous/init. MASTER_ADDR=10.0.0.1, MASTER_PORT=29500, \
             GLOO_SOCKET_IFNAME unset, NCCL_SOCKET_IFNAME =eth1, interfaces seen: lo \
             127.0.0.1, eth0 10.0.0.2"
        );
        assert_eq!(
            d.evidence[2],
            "rank 2: hello at +1.0 s, never entered init_process_group"
        );
        assert!(d.line().starts_with("never joined: rank 2 (pid 102"));
        // Peers that rendezvous elsewhere are said too.
        r.ranks.get_mut(&1).unwrap().init_entered = Some((s(1.5), rdzv("29501")));
        let d = never_joined(&r, s(6.6), WAIT, false).unwrap();
        assert!(
            d.text
                .ends_with("; rank 1 rendezvous at 10.0.0.1:29501 instead"),
            "{}",
            d.text
        );
    }

    #[test]
    fn late_busy_or_unconnected_ranks_get_the_start_up_allowance_and_joined_runs_none() {
        let t0 = Instant::now();
        let s = |x: f64| t0 + std::time::Duration::from_secs_f64(x);
        let mut r = run(2);
        r.clock.started = Some(t0);
        r.ranks.get_mut(&0).unwrap().hello_at = Some(s(1.0));
        r.ranks.get_mut(&0).unwrap().init_entered = Some((s(1.0), rdzv("29500")));
        // Rank 1 has not said hello (still importing): the start-up allowance.
        assert_eq!(join_due(&r, WAIT), Some(s(181.0)));
        // It says hello late: the threshold counts from its hello, not from rank 0's wait.
        r.ranks.get_mut(&1).unwrap().hello_at = Some(s(30.0));
        assert_eq!(join_due(&r, WAIT), Some(s(35.0)));
        // Busy before its init (loading data, 1.5 cores): the start-up allowance again.
        let one = r.ranks.get_mut(&1).unwrap();
        one.cpu.push_back((s(30.0), 1.0));
        one.cpu.push_back((s(33.0), 5.5));
        assert_eq!(join_due(&r, WAIT), Some(s(210.0)));
        // Every rank entered: nobody is missing.
        r.ranks.get_mut(&1).unwrap().init_entered = Some((s(40.0), rdzv("29500")));
        assert_eq!(join_due(&r, WAIT), None);
        assert!(never_joined(&r, s(500.0), WAIT, true).is_none());
        // One returned: all had joined, whatever came after.
        r.ranks.get_mut(&1).unwrap().init_entered = None;
        r.ranks.get_mut(&0).unwrap().init_joined = Some(s(41.0));
        assert!(never_joined(&r, s(500.0), WAIT, true).is_none());
        // Workers that do not report their rendezvous (sim, JAX): nothing to judge.
        assert!(never_joined(&run(2), s(500.0), WAIT, true).is_none());
    }

    fn tail(rank: u32, lines: &[&str]) -> RankTail {
        RankTail {
            rank,
            local_rank: rank,
            exitcode: -6,
            lines: lines.iter().map(|l| l.to_string()).collect(),
        }
    }

    #[test]
    fn gloos_size_check_names_the_aborted_rank() {
        let mut r = run(2);
        r.ranks.get_mut(&0).unwrap().step = 3;
        r.ranks.get_mut(&1).unwrap().error =
            Some("RuntimeError: [pair.cc:538] Read error: Connection reset by peer".into());
        let tails = [tail(
            0,
            &[
                "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
                "  what():  [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 2372 vs 4. Received data size doesn't match expected size. Is there a distributed collective mismatch in your code?",
            ],
        )];
        let d = collective_mismatch(&r, &tails).unwrap();
        assert_eq!(
            (d.kind, d.rank, d.step),
            (DiagnosisKind::CollectiveMismatch, Some(0), Some(4))
        );
        assert!(
            d.text
                .starts_with("rank 0's collective received 2372 bytes where it expected at most 4"),
            "{}",
            d.text
        );
        assert!(
            d.evidence[0].starts_with("rank 0 said: what():"),
            "{:?}",
            d.evidence
        );
        assert!(
            d.evidence[1].starts_with("rank 1: RuntimeError"),
            "{:?}",
            d.evidence
        );
        // A rank that only lost its peer is no mismatch.
        assert!(collective_mismatch(&r, &[]).is_none());
    }

    #[test]
    fn detail_fingerprints_name_the_odd_rank_and_both_calls() {
        let fp = |op: &str, shape: &str| {
            format!(
                "CollectiveFingerPrint(SequenceNumber=57, OpType={op}, TensorShape={shape}, TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu))"
            )
        };
        let mut r = run(4);
        for (id, rank) in r.ranks.iter_mut() {
            let (me, mine) = if *id == 1 {
                (1, fp("ALLGATHER", "[1024]"))
            } else {
                (*id, fp("ALLREDUCE", "[25690112]"))
            };
            let other = if *id == 1 {
                fp("ALLREDUCE", "[25690112]")
            } else {
                fp("ALLGATHER", "[1024]")
            };
            let other_rank = if *id == 1 { 0 } else { 1 };
            rank.error = Some(format!(
                "RuntimeError: Detected mismatch between collectives on ranks. Rank {me} is running collective: {mine}, but Rank {other_rank} is running collective: {other}"
            ));
        }
        let d = collective_mismatch(&r, &[]).unwrap();
        assert_eq!(d.rank, Some(1));
        assert!(
            d.text.starts_with(
                "rank 1 called allgather of shape [1024] as collective #57 while rank 0 called allreduce of shape [25690112] as collective #57"
            ),
            "{}",
            d.text
        );
        // At k=2 the two sides are as many: the smaller collective is named.
        let mut r2 = run(2);
        r2.ranks.get_mut(&0).unwrap().error = r.ranks[&0].error.clone();
        let d = collective_mismatch(&r2, &[]).unwrap();
        assert_eq!(d.rank, Some(1), "{}", d.text);
    }

    #[test]
    fn recorders_at_the_same_number_with_another_collective_are_a_mismatch() {
        let now = Instant::now();
        let coll = |op: &str, seq: u64, bytes: u64| {
            (
                now,
                crate::protocol::CollState {
                    pending: 1,
                    op: Some(op.into()),
                    seq: Some(seq),
                    age_s: Some(9.0),
                    last_done: Some(seq - 1),
                    bytes: Some(bytes),
                },
            )
        };
        let mut r = run(2);
        r.ranks.get_mut(&0).unwrap().coll = Some(coll("gloo:broadcast", 15, 4000));
        r.ranks.get_mut(&1).unwrap().coll = Some(coll("gloo:all_reduce", 15, 4));
        let d = collective_mismatch(&r, &[]).unwrap();
        assert_eq!(d.rank, Some(1));
        assert_eq!(
            d.text,
            "rank 1 called gloo:all_reduce (4 B) as collective #15 while rank 0 called \
             gloo:broadcast (4.0 kB) as collective #15; each waits for the other"
        );
        // A plain hang: the same collective pending everywhere, or at different numbers.
        r.ranks.get_mut(&1).unwrap().coll = Some(coll("gloo:broadcast", 15, 4000));
        assert!(collective_mismatch(&r, &[]).is_none());
        r.ranks.get_mut(&1).unwrap().coll = Some(coll("gloo:all_reduce", 16, 4));
        assert!(collective_mismatch(&r, &[]).is_none());
    }

    #[test]
    fn unused_parameters_are_named_and_counted() {
        let f = Finding {
            kind: FindingKind::UnusedParameters,
            names: (0..6).map(|i| format!("head.{i}.weight")).collect(),
            count: Some(6),
            recompiles: None,
            compiles: None,
        };
        let d = from_finding(1, 0, &f).unwrap();
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
        let other = from_finding(0, 0, &f).unwrap();
        assert!(!add(&mut r, other), "every rank says the same: one verdict");
    }
}
