//! Protocol parsing + state reduction throughput, in events per second on one core.
//! `cargo bench --bench ingest` prints criterion's time per batch of 1,000 events and the
//! throughput in elements (= events) per second.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ddptop::app::reduce::apply_worker;
use ddptop::protocol::{Backend, parse_worker};
use ddptop::run::{Experiment, RunSpec, RunView};
use std::hint::black_box;
use std::time::Instant;

/// A realistic mix per rank and step: a step, a bucket timeline, a heartbeat now and then, an
/// epoch line rarely.
fn lines(n: usize) -> Vec<String> {
    let mut v = Vec::with_capacity(n);
    let mut step = 0u64;
    while v.len() < n {
        step += 1;
        for rank in 0..2u32 {
            v.push(format!(
                r#"{{"v":1,"type":"step","rank":{rank},"step":{step},"epoch":1,"t":{t},"warmup":false,"sync":true,"samples":256,"fwd_ms":14.2,"bwd_ms":28.9,"opt_ms":2.1,"data_ms":0.3,"step_ms":45.6,"timing":"cuda_events"}}"#,
                t = step as f64 * 0.0456
            ));
            v.push(format!(
                r#"{{"v":1,"type":"buckets","rank":{rank},"step":{step},"t":1.0,"rebuilt":true,"bwd_compute_ms":27.6,"exposed_ms":0.09,"buckets":[{{"index":2,"bytes":8740352,"ready_ms":4.1,"start_ms":4.1,"done_ms":4.18}},{{"index":1,"bytes":26501120,"ready_ms":15.3,"start_ms":15.3,"done_ms":15.5}},{{"index":0,"bytes":9461800,"ready_ms":27.6,"start_ms":27.6,"done_ms":27.69}}]}}"#
            ));
            if step.is_multiple_of(20) {
                v.push(format!(r#"{{"v":1,"type":"heartbeat","rank":{rank},"step":{step},"t":2.0,"phase":"train"}}"#));
            }
            if step.is_multiple_of(200) {
                v.push(format!(
                    r#"{{"v":1,"type":"epoch","rank":{rank},"step":{step},"epoch":1,"t":3.0,"warmup":false,"samples":30000,"seconds":5.36,"samples_per_s":5597.0,"data_wait_ms":12.5}}"#
                ));
            }
        }
    }
    v.truncate(n);
    v
}

fn run_view() -> RunView {
    let spec = RunSpec::new(Experiment::Weak, 2, Backend::Nccl);
    RunView::new("bench".into(), spec, Instant::now(), 0.0)
}

fn ingest(c: &mut Criterion) {
    let input = lines(1000);
    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(input.len() as u64));
    g.bench_function("parse+reduce 1000 events", |b| {
        let mut run = run_view();
        let now = Instant::now();
        b.iter(|| {
            for l in &input {
                let m = parse_worker(black_box(l)).expect("valid line");
                apply_worker(&mut run, &m, now);
            }
        })
    });
    g.bench_function("parse only 1000 events", |b| {
        b.iter(|| {
            for l in &input {
                black_box(parse_worker(black_box(l)).expect("valid line"));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, ingest);
criterion_main!(benches);
