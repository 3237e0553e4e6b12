//! Predicted samples/s of a candidate from one k=1 run and the all-reduce bandwidth of its
//! NCCL setting (`app::predict`'s model, docs/methods.md "Predicting k ranks"), with the k=1
//! run's gradient buckets re-cut at the candidate's `bucket_cap_mb` (`costmodel::buckets`).

use crate::app::predict::{comm_source, ready_times};
use crate::costmodel::buckets::{cap_bytes, rebucket};
use crate::costmodel::predict::{PredictInput, ReadyBucket, predict_step};
use crate::run::{RunSpec, RunView};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    pub samples_per_s: f64,
    pub step_ms: f64,
    pub exposed_ms: f64,
    pub buckets: usize,
    /// The predicted layout: two bucket sizes with the same layout are the same candidate.
    #[serde(skip)]
    pub bucket_bytes: Vec<u64>,
    /// Where the all-reduce times came from (`allreduce run …`, `profile … (SIMULATED)`).
    pub busbw: String,
}

/// Predict the candidate's run at `comm.k` from the k=1 run `base` of the default setting.
/// `comm`: a spec with the candidate's NCCL settings only (whose all-reduce sweep times the
/// buckets); `per_rank`: the per-rank batch at k; `cap_mb`: the candidate's bucket size
/// (`None`: the buckets `base` measured).
pub fn predict(
    base: &RunView,
    comm: &RunSpec,
    per_rank: u32,
    cap_mb: Option<f64>,
    runs: &[RunView],
) -> Result<Prediction, String> {
    let base_sps = base
        .figures
        .aggregate
        .as_ref()
        .map(|a| a.samples_per_s)
        .filter(|s| *s > 0.0)
        .ok_or_else(|| format!("k=1 run {} has no throughput", base.id))?;
    let (mut buckets, bwd_end) = ready_times(base)?;
    if let Some(mb) = cap_mb {
        let layout: Vec<(u64, f64)> = buckets.iter().map(|b| (b.bytes, b.ready_ms)).collect();
        buckets = rebucket(&layout, cap_bytes(mb))
            .into_iter()
            .enumerate()
            .map(|(i, (bytes, ready_ms))| ReadyBucket {
                index: i as u32,
                bytes,
                ready_ms,
            })
            .collect();
    }
    let k = comm.k;
    let (src, comm) = comm_source(comm, k, runs)?;
    let per_rank = f64::from(per_rank);
    let n = buckets.len();
    let bucket_bytes = buckets.iter().map(|b| b.bytes).collect();
    let p = predict_step(
        &PredictInput {
            k,
            buckets,
            bwd_end_ms: bwd_end,
            k1_step_ms: per_rank / base_sps * 1e3,
            samples_per_step: per_rank,
            // The same for every candidate (a real k=1 run already holds it): it cannot
            // change their order.
            reducer_ms: 0.0,
        },
        comm,
    );
    if !p.samples_per_s.is_finite() {
        return Err(format!("{} does not cover the bucket sizes", src.label));
    }
    Ok(Prediction {
        samples_per_s: p.samples_per_s,
        step_ms: p.step_ms,
        exposed_ms: p.exposed_ms,
        buckets: n,
        bucket_bytes,
        busbw: src.label,
    })
}
