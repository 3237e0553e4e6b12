//! Predicting a k-rank DDP step from a k=1 run (issue 10; docs/methods.md, "Predicting k ranks").
//!
//! Inputs are measurements only: when each bucket's gradients were ready during the k=1 run's
//! backward, the k=1 step time, and an all-reduce time per bucket size (from a measured busbw
//! curve, or the simulated profile). The all-reduces serialize on one stream in bucket order:
//! `start_i = max(ready_i, done_{i−1})`, `done_i = start_i + t(bytes_i)`. What ends after
//! backward is exposed and adds to the step; nothing else changes.

/// One bucket of the k=1 run, in all-reduce order.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadyBucket {
    pub index: u32,
    pub bytes: u64,
    /// When its gradients were ready, ms from the start of backward.
    pub ready_ms: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PredictInput {
    pub k: u32,
    pub buckets: Vec<ReadyBucket>,
    /// End of backward compute at k=1, ms from the start of backward.
    pub bwd_end_ms: f64,
    /// The k=1 run's step time (ms), everything included.
    pub k1_step_ms: f64,
    /// Samples per step on one rank (weak scaling: the same at every k).
    pub samples_per_step: f64,
    /// Reducer cost to add on top of the k=1 step (0 when the k=1 step already holds it).
    pub reducer_ms: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BucketPrediction {
    pub index: u32,
    pub bytes: u64,
    pub ready_ms: f64,
    pub start_ms: f64,
    pub done_ms: f64,
    /// The all-reduce's own duration, done − start.
    pub comm_ms: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StepPrediction {
    pub k: u32,
    pub buckets: Vec<BucketPrediction>,
    /// End of the last all-reduce − end of backward (≥ 0).
    pub exposed_ms: f64,
    pub reducer_ms: f64,
    pub step_ms: f64,
    /// All k ranks together.
    pub samples_per_s: f64,
}

/// Simulate the k-rank step; `comm_ms(bytes)` is one all-reduce's duration at world size k.
pub fn predict_step(input: &PredictInput, comm_ms: impl Fn(u64) -> f64) -> StepPrediction {
    let mut prev_done = 0.0f64;
    let mut buckets = Vec::with_capacity(input.buckets.len());
    for b in &input.buckets {
        let ready = b.ready_ms.max(0.0);
        let start = ready.max(prev_done);
        let dur = if input.k > 1 {
            comm_ms(b.bytes).max(0.0)
        } else {
            0.0
        };
        let done = start + dur;
        prev_done = done;
        buckets.push(BucketPrediction {
            index: b.index,
            bytes: b.bytes,
            ready_ms: ready,
            start_ms: start,
            done_ms: done,
            comm_ms: dur,
        });
    }
    let exposed_ms = if input.k > 1 {
        (prev_done - input.bwd_end_ms).max(0.0)
    } else {
        0.0
    };
    let reducer_ms = if input.k > 1 { input.reducer_ms } else { 0.0 };
    let step_ms = input.k1_step_ms + exposed_ms + reducer_ms;
    let samples_per_s = if step_ms > 0.0 {
        input.k as f64 * input.samples_per_step / (step_ms / 1e3)
    } else {
        0.0
    };
    StepPrediction {
        k: input.k,
        buckets,
        exposed_ms,
        reducer_ms,
        step_ms,
        samples_per_s,
    }
}

/// Measured all-reduce time of `bytes` at world size k from a busbw curve, in ms:
/// 2(k−1)/k · bytes / busbw(bytes). No separate α: busbw at each measured size already holds the
/// latency of that size (nccl-tests' busbw is computed from the whole operation's time).
pub fn measured_comm_ms(curve: &super::BusbwCurve, bytes: u64, k: u32) -> Option<f64> {
    let bw = curve.at(bytes)?;
    Some(super::allreduce_ms(bytes, k, bw, 0.0))
}

/// The one definition of a prediction's error, for every figure and every format (screen,
/// `--json`, reports): (predicted − measured) / measured in percent, so positive means the model
/// over-predicts. `None` when `measured` is not positive.
pub fn error_pct(predicted: f64, measured: f64) -> Option<f64> {
    (measured > 0.0 && predicted.is_finite()).then(|| (predicted - measured) / measured * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(k: u32, ready: &[(u64, f64)], bwd_end: f64) -> PredictInput {
        PredictInput {
            k,
            buckets: ready
                .iter()
                .enumerate()
                .map(|(i, &(bytes, ready_ms))| ReadyBucket {
                    index: i as u32,
                    bytes,
                    ready_ms,
                })
                .collect(),
            bwd_end_ms: bwd_end,
            k1_step_ms: 40.0,
            samples_per_step: 256.0,
            reducer_ms: 0.5,
        }
    }

    #[test]
    fn buckets_queue_behind_each_other_and_only_the_tail_is_exposed() {
        // Bucket 1 is ready at 3 ms but waits for bucket 0 (done at 2 + 4 = 6).
        let p = predict_step(&input(2, &[(1, 2.0), (1, 3.0), (1, 9.0)], 10.0), |_| 4.0);
        let starts: Vec<f64> = p.buckets.iter().map(|b| b.start_ms).collect();
        assert_eq!(starts, vec![2.0, 6.0, 10.0]);
        assert_eq!(p.exposed_ms, 4.0); // last done 14 − backward end 10
        assert_eq!(p.step_ms, 40.0 + 4.0 + 0.5);
        assert!((p.samples_per_s - 2.0 * 256.0 / 0.0445).abs() < 1e-6);
    }

    #[test]
    fn all_reduce_hidden_under_backward_adds_nothing() {
        let p = predict_step(&input(2, &[(1, 1.0), (1, 2.0)], 10.0), |_| 1.0);
        assert_eq!(p.exposed_ms, 0.0);
        assert_eq!(p.step_ms, 40.5);
    }

    #[test]
    fn k1_predicts_the_k1_run_itself() {
        let p = predict_step(&input(1, &[(1, 1.0)], 10.0), |_| 100.0);
        assert_eq!(p.exposed_ms, 0.0);
        assert_eq!(p.step_ms, 40.0);
    }

    #[test]
    fn measured_comm_uses_the_ring_factor_without_alpha() {
        let c = super::super::BusbwCurve::new(vec![(1 << 20, 10.0), (1 << 24, 100.0)]);
        // 2(k−1)/k = 1 at k=2: 16 MiB at 100 GB/s.
        let ms = measured_comm_ms(&c, 1 << 24, 2).unwrap();
        assert!((ms - (1u64 << 24) as f64 / 100e9 * 1e3).abs() < 1e-12);
        // 1.5 at k=4.
        let ms4 = measured_comm_ms(&c, 1 << 24, 4).unwrap();
        assert!((ms4 / ms - 1.5).abs() < 1e-12);
        assert_eq!(error_pct(110.0, 100.0), Some(10.0));
        assert_eq!(error_pct(1.0, 0.0), None);
    }
}
