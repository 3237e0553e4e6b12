//! The engine's cost of the straggler assessment (issue 46; docs/stragglers.md, Overhead).
//!
//! `cargo bench --bench straggler` times one `app::straggler::update` (the call the engine
//! makes every `assess_every(k)`: the plugin fill-in, `assess` over every rank's window and the
//! quick test, the bookkeeping of the run's record) and one `phase_scores` (what the dashboard,
//! `--json` and the report's per-phase table read) at k = 4, 64, 256 and 1,024 ranks, each rank
//! holding a full phase history (`PHASE_HISTORY` = 256 samples, as in a long run), 10% noise on
//! every phase and rank 1 slowed 1.5x in its data wait (so a straggler is named and kept: the
//! path of a run that has one). The share of one core the engine spends on it is the time per
//! call ÷ `assess_every(k)`; the bench prints that beside criterion's figures.
//!
//! The input is made up (seeded noise), not a recorded run: the cost depends on the number of
//! ranks and samples, not on their values.

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use ddptop::app::gpu_evidence::RankGpus;
use ddptop::app::straggler::{StragglerConfig, assess_every, phase_scores, update};
use ddptop::protocol::Backend;
use ddptop::run::view::{PhaseSample, RankView};
use ddptop::run::{Experiment, RunSpec, RunView};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::hint::black_box;
use std::time::{Duration, Instant};

const KS: [u32; 4] = [4, 64, 256, 1024];

/// A run of `k` ranks with `PHASE_HISTORY` samples each: data 2 ms, fwd 10, bwd 20 + comm,
/// opt 5, ±10% noise; rank 1's data wait 1.5x the others' whole step more (it lags, they wait).
fn run_of(k: u32) -> RunView {
    let mut rng = StdRng::seed_from_u64(46);
    let spec = RunSpec::new(Experiment::Weak, k, Backend::Gloo);
    let mut run = RunView::new("bench".into(), spec, Instant::now(), 0.0);
    let steps = ddptop::run::view::PHASE_HISTORY as u64;
    for id in 0..k {
        let mut r = RankView {
            rank: id,
            ..Default::default()
        };
        for step in 1..=steps {
            let mut j = |x: f64| x * (1.0 + 0.1 * rng.random_range(-1.0..1.0));
            let (data, comm) = if id == 1 {
                (j(20.0), j(0.5))
            } else {
                (j(2.0), j(18.0))
            };
            r.recent_phases.push_back(PhaseSample {
                step,
                data_ms: data,
                fwd_ms: j(10.0),
                bwd_ms: j(20.0) + comm,
                opt_ms: j(5.0),
                comm_ms: Some(comm),
                sync_ms: None,
            });
        }
        run.ranks.insert(id, r);
    }
    run
}

/// `run_of(k)` after rank 1 was found slow 16 steps back and named now: the steady state of a
/// run with a straggler (each later call only keeps its score).
fn named(k: u32, cfg: &StragglerConfig) -> RunView {
    let mut run = run_of(k);
    let full = run.ranks.clone();
    for r in run.ranks.values_mut() {
        r.recent_phases.truncate(r.recent_phases.len() - 16);
    }
    update(&mut run, cfg, 0.0, &RankGpus::default());
    run.ranks = full;
    update(&mut run, cfg, 1.0, &RankGpus::default());
    let names: Vec<u32> = run.straggler.named.iter().map(|s| s.rank).collect();
    assert_eq!(names, [1], "k={k}: the bench's input names rank 1 alone");
    run
}

fn straggler(c: &mut Criterion) {
    let cfg = StragglerConfig::default();
    let mut g = c.benchmark_group("straggler");
    for k in KS {
        let run = named(k, &cfg);
        g.bench_with_input(BenchmarkId::new("update", k), &run, |b, run| {
            b.iter_batched(
                || run.clone(),
                // Returned, so that the copy is dropped outside the timing (criterion drops
                // outputs after it): the engine updates its one run in place.
                |mut r| {
                    black_box(update(&mut r, &cfg, 1.0, &RankGpus::default()));
                    r
                },
                BatchSize::LargeInput,
            )
        });
        g.bench_with_input(BenchmarkId::new("phase_scores", k), &run, |b, run| {
            b.iter(|| black_box(phase_scores(black_box(&run.ranks), &cfg)))
        });
    }
    g.finish();
}

/// Criterion's figures are per call; the engine's share of a core is per call ÷ the
/// assessment period. Timed here again over a few calls (the median), printed once per k.
fn share(_: &mut Criterion) {
    let cfg = StragglerConfig::default();
    let bench = std::env::args().any(|a| a == "--bench");
    for k in KS {
        let run = named(k, &cfg);
        let reps = if bench { 21 } else { 1 };
        let mut t: Vec<Duration> = (0..reps)
            .map(|_| {
                let mut r = run.clone();
                let at = Instant::now();
                black_box(update(&mut r, &cfg, 1.0, &RankGpus::default()));
                at.elapsed()
            })
            .collect();
        t.sort();
        let per = t[t.len() / 2];
        let every = assess_every(k as usize);
        println!(
            "k={k}: update {:.3} ms (median of {reps}) every {} ms: {:.2}% of one core",
            per.as_secs_f64() * 1e3,
            every.as_millis(),
            100.0 * per.as_secs_f64() / every.as_secs_f64()
        );
    }
}

criterion_group!(benches, straggler, share);
criterion_main!(benches);
