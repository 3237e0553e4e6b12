//! torch.compile regressions (`compile_regression`, docs/troubleshooting.md): a compiled run
//! that recompiles in a storm (a frame recompiled up to dynamo's `recompile_limit`, after which
//! it runs eagerly: every one of those steps paid a compile), or whose steady state is slower
//! than the same script eager in the store. The evidence is the ranks' dynamo counters (graph
//! breaks by reason, compiles, recompiles: `workers/ddptop_worker/attach_compile.py`).

use crate::protocol::Finding;
use crate::run::{Diagnosis, DiagnosisKind, RunStatus, RunView};
use crate::util::median;

/// torch._dynamo.config.recompile_limit's default: compiles of one frame past which dynamo
/// gives up and runs it eagerly. Its first compile and 7 recompiles reach it.
pub const RECOMPILE_LIMIT: u64 = 8;
/// Steady-state steps read for the throughput against eager.
pub const WINDOW: usize = 6;
/// How much slower than eager a compiled run must be to be named (the machine's step-to-step
/// spread on a shared host is a few %).
pub const SLOWER_BY: f64 = 1.10;

const FIX: &str = "keep the compiled inputs' shapes and the guarded Python values stable (pad or bucket lengths, DataLoader(drop_last=True), no changing Python scalars), or torch.compile(..., dynamic=True) / torch._dynamo.mark_dynamic for a dimension that really varies; TORCH_LOGS=recompiles,graph_breaks names each failed guard and break; if it stays slower, leave that module eager";

/// `12 graph breaks (reason (×8); reason (×4))`, or `no graph breaks`.
fn breaks(f: &Finding) -> String {
    match f.count.unwrap_or(0) {
        0 => "no graph breaks".into(),
        n => format!(
            "{n} graph break{} ({})",
            if n == 1 { "" } else { "s" },
            f.names
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

fn counters_evidence(rank: Option<u32>, f: &Finding) -> Vec<String> {
    let who = rank.map_or(String::new(), |r| format!("rank {r}: "));
    let mut e = vec![format!(
        "{who}dynamo: {} compiles, {} recompiles, {} graph breaks",
        f.compiles.unwrap_or(0),
        f.recompiles.unwrap_or(0),
        f.count.unwrap_or(0)
    )];
    e.extend(f.names.iter().map(|n| format!("graph break: {n}")));
    e
}

/// A rank's counters as a verdict when they are a storm: recompiles that brought a frame to
/// dynamo's limit. `step`: the rank's last finished step when it said them.
pub fn recompile_storm(rank: u32, step: u64, f: &Finding) -> Option<Diagnosis> {
    let recompiles = f.recompiles?;
    if recompiles + 1 < RECOMPILE_LIMIT {
        return None;
    }
    Some(Diagnosis {
        kind: DiagnosisKind::CompileRegression,
        rank: Some(rank),
        step: Some(step),
        since_unix: crate::util::unix_now(),
        text: format!(
            "recompile storm: rank {rank} recompiled {recompiles} times in its first {step} steps \
             (dynamo's recompile_limit is {RECOMPILE_LIMIT}: each of those steps paid a compile, \
             and past the limit the frame runs eager); {}",
            breaks(f)
        ),
        fix: FIX.into(),
        evidence: counters_evidence(Some(rank), f),
    })
}

/// The same script eager: a completed, unperturbed attached run of the same script path, k,
/// backend and per-rank batch that compiled nothing (its arguments may differ: a `--compile`
/// switch is how scripts usually choose).
#[derive(Debug, Clone, PartialEq)]
pub struct Eager {
    pub id: String,
    pub samples_per_s: f64,
}

pub fn eager_run(run: &RunView, runs: &[RunView]) -> Option<Eager> {
    let script = &run.spec.attach()?.script;
    let batch = run.seen.observed.per_rank_batch()?;
    let e = runs
        .iter()
        .filter(|b| {
            b.id != run.id
                && b.spec.attach().is_some_and(|a| &a.script == script)
                && b.spec.k == run.spec.k
                && b.spec.backend == run.spec.backend
                && b.status == RunStatus::Completed
                && b.perturbation().is_none()
                && b.seen.observed.compile.is_none()
                && b.seen.observed.per_rank_batch() == Some(batch)
        })
        .max_by_key(|b| (b.clock.started_unix * 1000.0) as i64)?;
    let sps = e.figures.aggregate.as_ref()?.samples_per_s;
    (sps > 0.0).then(|| Eager {
        id: e.id.clone(),
        samples_per_s: sps,
    })
}

/// The compiled run's steady state (steps after `since`, where its counters were said: no
/// compile after them) against the eager run: named when eager does `SLOWER_BY` more.
pub fn slower_than_eager(run: &RunView, eager: &Eager) -> Option<Diagnosis> {
    let (since, f) = run.seen.compile_counters.as_ref()?;
    let batch = run.seen.observed.per_rank_batch()? as f64;
    // Each rank's median step over its last WINDOW steps past `since`; the run goes at its
    // slowest rank's pace.
    let mut step_ms = Vec::new();
    for r in run.ranks.values() {
        let steps: Vec<f64> = r
            .recent_phases
            .iter()
            .rev()
            .zip(r.recent_step_ms.iter().rev().copied())
            .filter(|(p, _)| p.step > *since)
            .map(|(_, t)| t)
            .take(WINDOW)
            .collect();
        if steps.len() < WINDOW {
            return None;
        }
        step_ms.push(median(&steps)?);
    }
    let slowest = step_ms.iter().copied().fold(0.0, f64::max);
    if slowest <= 0.0 {
        return None;
    }
    let k = run.spec.k;
    let compiled = k as f64 * batch * 1000.0 / slowest;
    let ratio = eager.samples_per_s / compiled;
    if ratio < SLOWER_BY {
        return None;
    }
    let mut evidence = vec![
        format!(
            "compiled (this run): {compiled:.1} samples/s from its ranks' median steps after step {since} ({})",
            step_ms
                .iter()
                .map(|t| format!("{t:.1} ms"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!(
            "eager (run {}, same script, k={k}, batch {batch:.0} per rank): {:.1} samples/s",
            eager.id, eager.samples_per_s
        ),
    ];
    evidence.extend(counters_evidence(None, f));
    Some(Diagnosis {
        kind: DiagnosisKind::CompileRegression,
        rank: None,
        step: run.ranks.values().map(|r| r.step).min(),
        since_unix: crate::util::unix_now(),
        text: format!(
            "steady state {ratio:.1}× slower than eager at k={k} ({compiled:.0} vs {:.0} samples/s, eager run {}): {}, {} recompiles",
            eager.samples_per_s,
            eager.id,
            breaks(f),
            f.recompiles.unwrap_or(0)
        ),
        fix: FIX.into(),
        evidence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::FindingKind;

    fn counters(recompiles: u64, breaks: &[(&str, u64)]) -> Finding {
        Finding {
            kind: FindingKind::CompileRegression,
            names: breaks.iter().map(|(r, n)| format!("{r} (×{n})")).collect(),
            count: Some(breaks.iter().map(|(_, n)| n).sum()),
            recompiles: Some(recompiles),
            compiles: Some(recompiles + 1),
        }
    }

    #[test]
    fn a_frame_recompiled_to_the_limit_is_a_storm_and_fewer_recompiles_are_not() {
        let f = counters(7, &[("Tensor.item", 2)]);
        let d = recompile_storm(1, 9, &f).unwrap();
        assert_eq!(
            (d.kind, d.rank, d.step),
            (DiagnosisKind::CompileRegression, Some(1), Some(9))
        );
        assert!(
            d.text
                .starts_with("recompile storm: rank 1 recompiled 7 times in its first 9 steps")
                && d.text.ends_with("; 2 graph breaks (Tensor.item (×2))"),
            "{}",
            d.text
        );
        assert!(d.fix.contains("dynamic=True") && d.fix.contains("TORCH_LOGS=recompiles"));
        assert_eq!(
            d.evidence,
            [
                "rank 1: dynamo: 8 compiles, 7 recompiles, 2 graph breaks",
                "graph break: Tensor.item (×2)"
            ]
        );
        // A shape change or two (the last, short batch of an epoch) is no storm.
        assert!(recompile_storm(0, 9, &counters(2, &[])).is_none());
        assert!(recompile_storm(0, 9, &counters(6, &[("x", 40)])).is_none());
    }

    #[test]
    fn a_compiled_steady_state_slower_than_the_same_script_eager_is_named() {
        use crate::protocol::Backend;
        use crate::run::{Experiment, RunSpec};
        let mut r = RunView::new(
            "c".into(),
            RunSpec::new(Experiment::Attach, 2, Backend::Gloo),
            std::time::Instant::now(),
            0.0,
        );
        r.seen.observed.step_samples.insert(16, 40);
        r.seen.compile_counters = Some((5, counters(0, &[("Tensor.item", 14)])));
        for rank in r.ranks.values_mut() {
            for step in 1..=12 {
                rank.recent_phases.push_back(crate::run::view::PhaseSample {
                    step,
                    ..Default::default()
                });
                rank.recent_step_ms
                    .push_back(if step <= 5 { 900.0 } else { 8.0 });
                rank.step = step;
            }
        }
        // 2 x 16 / 8 ms = 4000 samples/s against eager's 8400: 2.1x slower.
        let eager = Eager {
            id: "e".into(),
            samples_per_s: 8400.0,
        };
        let d = slower_than_eager(&r, &eager).unwrap();
        assert_eq!(
            d.text,
            "steady state 2.1× slower than eager at k=2 (4000 vs 8400 samples/s, eager run e): \
             14 graph breaks (Tensor.item (×14)), 0 recompiles"
        );
        // Within the machine's spread of eager: nothing said; and no steady state yet.
        let close = Eager {
            samples_per_s: 4300.0,
            ..eager.clone()
        };
        assert!(slower_than_eager(&r, &close).is_none());
        r.seen.compile_counters = Some((8, counters(0, &[])));
        assert!(slower_than_eager(&r, &eager).is_none());
    }
}
