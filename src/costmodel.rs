//! The α-β cost model and the machine profiles the simulated worker runs on.
//!
//! `t_comm(bucket) = α + 2(k−1)/k · bytes / busbw(bytes)`; buckets serialize on one stream in
//! all-reduce order, each starting at `max(ready_i, done_{i−1})`. See docs/methods.md.

pub mod buckets;
pub mod predict;

use crate::run::{DEFAULT_PROFILE, NcclMode};
use std::collections::BTreeMap;

/// Busbw at a size, interpolated on log2(size) between measured points (GB/s, GB = 1e9).
#[derive(Debug, Clone, PartialEq)]
pub struct BusbwCurve {
    /// (bytes, busbw GB/s), sorted by bytes.
    pub points: Vec<(u64, f64)>,
}

impl BusbwCurve {
    pub fn new(mut points: Vec<(u64, f64)>) -> Self {
        points.retain(|(b, bw)| *b > 0 && bw.is_finite() && *bw > 0.0);
        points.sort_by_key(|p| p.0);
        points.dedup_by_key(|p| p.0);
        BusbwCurve { points }
    }

    pub fn at(&self, bytes: u64) -> Option<f64> {
        let pts = &self.points;
        let first = pts.first()?;
        let last = pts.last()?;
        if bytes <= first.0 {
            // Below the smallest size, time is latency-bound: keep the smallest point's time.
            return Some(first.1 * bytes as f64 / first.0 as f64);
        }
        if bytes >= last.0 {
            return Some(last.1);
        }
        let i = pts.iter().position(|p| p.0 >= bytes)?;
        let (b0, w0) = pts[i - 1];
        let (b1, w1) = pts[i];
        let f = ((bytes as f64).log2() - (b0 as f64).log2())
            / ((b1 as f64).log2() - (b0 as f64).log2());
        Some(w0 + f * (w1 - w0))
    }
}

/// Ring all-reduce time for one buffer at world size k, in ms. 0 at k=1.
pub fn allreduce_ms(bytes: u64, k: u32, busbw_gbs: f64, alpha_us: f64) -> f64 {
    if k <= 1 || busbw_gbs <= 0.0 {
        return 0.0;
    }
    let factor = 2.0 * (k as f64 - 1.0) / k as f64;
    alpha_us / 1e3 + factor * bytes as f64 / (busbw_gbs * 1e9) * 1e3
}

/// nccl-tests' formulas: (algbw, busbw) in GB/s for one all-reduce of `bytes` taking `time_us`.
pub fn bandwidths(bytes: u64, k: u32, time_us: f64) -> (f64, f64) {
    if time_us <= 0.0 {
        return (0.0, 0.0);
    }
    let algbw = bytes as f64 / (time_us * 1e-6) / 1e9;
    let busbw = if k > 1 {
        algbw * 2.0 * (k as f64 - 1.0) / k as f64
    } else {
        0.0
    };
    (algbw, busbw)
}

/// One bucket's span in a predicted timeline (ms from the start of backward).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanPrediction {
    pub bytes: u64,
    pub ready_ms: f64,
    pub start_ms: f64,
    pub done_ms: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TimelinePrediction {
    pub spans: Vec<SpanPrediction>,
    pub bwd_compute_ms: f64,
    /// done of the last bucket − end of backward compute (≥ 0).
    pub exposed_ms: f64,
}

/// Serialize buckets on one stream: start = max(ready_i, done_{i−1}).
pub fn predict_timeline(
    buckets: &[(u64, f64)],
    bwd_ms: f64,
    comm_ms: impl Fn(u64) -> f64,
) -> TimelinePrediction {
    let mut prev_done: f64 = 0.0;
    let mut spans = Vec::with_capacity(buckets.len());
    for &(bytes, ready_frac) in buckets {
        let ready = ready_frac.clamp(0.0, 1.0) * bwd_ms;
        let start = ready.max(prev_done);
        let done = start + comm_ms(bytes);
        prev_done = done;
        spans.push(SpanPrediction {
            bytes,
            ready_ms: ready,
            start_ms: start,
            done_ms: done,
        });
    }
    let last_ready = spans.last().map(|s| s.ready_ms).unwrap_or(bwd_ms);
    TimelinePrediction {
        exposed_ms: (prev_done - last_ready.max(bwd_ms)).max(0.0),
        bwd_compute_ms: bwd_ms,
        spans,
    }
}

/// A simulated machine. Calibration sources are in docs/methods.md.
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: &'static str,
    pub description: &'static str,
    /// Per-step compute at per-rank batch 256 (ms); scaled linearly with the batch.
    pub fwd_ms: f64,
    pub bwd_ms: f64,
    pub opt_ms: f64,
    pub data_ms: f64,
    /// Fixed per-step cost that does not scale with batch (launch overhead).
    pub fixed_ms: f64,
    /// DDP reducer overhead per step at k > 1 (bucket copies, hook, finalize).
    pub ddp_overhead_ms: f64,
    pub alpha_us: f64,
    /// Bare all-reduce busbw by size, per NCCL mode (`NcclMode::DEFAULT` is always present).
    pub busbw: BTreeMap<NcclMode, Vec<(u64, f64)>>,
    /// Multiplier on busbw for all-reduces during backward (they share SMs and memory).
    pub in_backward_factor: f64,
    /// Extra multiplier on comm time per GPU beyond two (host-bridge contention on PCIe).
    pub contention_per_extra_gpu: f64,
    /// NCCL modes under which DDP training deadlocks on this machine (the book's warning).
    pub hangs_with: Vec<NcclMode>,
    pub noise: f64,
}

/// Gradient buckets of the book's ResNet-18 after the rebuild, in all-reduce order (= bucket
/// index order in torch 2.11: index 0 holds the last layers and is reduced first), with the
/// fraction of backward at which each becomes ready (measured on 2×H200; docs/methods.md).
pub const RESNET18_BUCKETS: [(u64, f64); 3] =
    [(9_461_800, 0.15), (26_501_120, 0.55), (8_740_352, 1.0)];
pub const RESNET18_PARAMS: u64 = 11_175_818;
pub const RESNET18_GRAD_BYTES: u64 = 44_703_272;

const MIB: u64 = 1 << 20;

impl Profile {
    pub fn names() -> [&'static str; 2] {
        [DEFAULT_PROFILE, "book-pcie"]
    }

    pub fn get(name: &str) -> Option<Profile> {
        match name {
            DEFAULT_PROFILE => Some(Self::h200_nvlink()),
            "book-pcie" => Some(Self::book_pcie()),
            _ => None,
        }
    }

    /// 2×H200 NV18, calibrated to plain-PyTorch runs of the book's model: k=1 ≈ 5.6k samples/s,
    /// ≈1.96× at k=2, buckets ≈ 110/195/80 µs, the busbw table by size and env.
    fn h200_nvlink() -> Profile {
        // Measured busbw (GB/s) at 1, 4, 16, 64 and 256 MiB per NCCL mode; below 1 MiB all
        // modes share the latency-bound small sizes.
        const SIZES: [u64; 5] = [MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB];
        const MEASURED: [(NcclMode, [f64; 5]); 4] = [
            (NcclMode::DEFAULT, [14.3, 68.4, 214.0, 261.0, 296.3]),
            (NcclMode::SHM_MEMCPY, [22.0, 87.6, 217.7, 262.3, 296.7]),
            (NcclMode::P2P_OFF, [16.0, 23.9, 26.3, 26.8, 26.0]),
            (NcclMode::P2P_OFF_SHM_MEMCPY, [4.7, 16.9, 25.6, 29.2, 30.8]),
        ];
        let small = [(1024, 0.05), (16 * 1024, 0.8), (256 * 1024, 5.0)];
        let busbw = MEASURED
            .iter()
            .map(|(mode, bw)| {
                let rows = small.iter().copied().chain(SIZES.into_iter().zip(*bw));
                (*mode, rows.collect())
            })
            .collect();
        Profile {
            name: DEFAULT_PROFILE,
            description: "2×H200 NV18 NVLink, calibrated to measured plain-PyTorch figures",
            fwd_ms: 14.2,
            bwd_ms: 28.9,
            opt_ms: 2.1,
            data_ms: 0.3,
            fixed_ms: 0.2,
            ddp_overhead_ms: 0.75,
            alpha_us: 5.0,
            busbw,
            in_backward_factor: 0.6,
            contention_per_extra_gpu: 0.0,
            hangs_with: vec![NcclMode::P2P_OFF_SHM_MEMCPY],
            noise: 0.01,
        }
    }

    /// The book's P2P-less PCIe box: ≈1.8× at k=2, ≈3.3× at k=4, effective β ≈ 4.5 GB/s
    /// (2·algbw), ≈5× all-reduce bandwidth with NCCL_SHM_USE_CUDA_MEMCPY=1, and DDP training
    /// deadlocks in that mode.
    fn book_pcie() -> Profile {
        let mut busbw = BTreeMap::new();
        let base = vec![
            (1024, 0.02),
            (16 * 1024, 0.3),
            (256 * 1024, 1.2),
            (MIB, 1.8),
            (4 * MIB, 2.15),
            (16 * MIB, 2.25),
            (64 * MIB, 2.25),
            (256 * MIB, 2.25),
        ];
        let memcpy: Vec<(u64, f64)> = base
            .iter()
            .map(|&(b, w)| (b, if b >= MIB { w * 5.0 } else { w }))
            .collect();
        busbw.insert(NcclMode::DEFAULT, base.clone());
        busbw.insert(NcclMode::P2P_OFF, base);
        busbw.insert(NcclMode::SHM_MEMCPY, memcpy.clone());
        busbw.insert(NcclMode::P2P_OFF_SHM_MEMCPY, memcpy);
        Profile {
            name: "book-pcie",
            description: "the book's P2P-less PCIe box: 1.8× at k=2, 3.3× at k=4, β_eff ≈ 4.5 GB/s",
            fwd_ms: 15.0,
            bwd_ms: 30.0,
            opt_ms: 2.0,
            data_ms: 1.0,
            fixed_ms: 0.5,
            ddp_overhead_ms: 1.2,
            alpha_us: 30.0,
            busbw,
            in_backward_factor: 1.0,
            contention_per_extra_gpu: -0.03,
            hangs_with: vec![NcclMode::SHM_MEMCPY, NcclMode::P2P_OFF_SHM_MEMCPY],
            noise: 0.01,
        }
    }

    pub fn curve(&self, mode: NcclMode) -> BusbwCurve {
        let pts = self
            .busbw
            .get(&mode)
            .or_else(|| self.busbw.get(&NcclMode::DEFAULT))
            .cloned()
            .unwrap_or_default();
        BusbwCurve::new(pts)
    }

    pub fn training_hangs(&self, mode: NcclMode) -> bool {
        self.hangs_with.contains(&mode)
    }

    /// Compute times of one step at a per-rank batch (fwd, bwd, opt, data), in ms.
    pub fn compute_ms(&self, per_rank_batch: u32) -> (f64, f64, f64, f64) {
        let s = per_rank_batch as f64 / 256.0;
        (
            self.fwd_ms * s + self.fixed_ms,
            self.bwd_ms * s,
            self.opt_ms,
            self.data_ms * s,
        )
    }

    /// Bucket all-reduce time during backward, ms.
    pub fn bucket_comm_ms(&self, bytes: u64, k: u32, curve: &BusbwCurve) -> f64 {
        let bw = curve.at(bytes).unwrap_or(1.0) * self.in_backward_factor;
        let contention = 1.0 + self.contention_per_extra_gpu * (k.saturating_sub(2)) as f64;
        allreduce_ms(bytes, k, bw, self.alpha_us) * contention.max(0.1)
    }

    /// Noise-free model of one synced training step at world size k.
    pub fn step(&self, per_rank_batch: u32, k: u32, mode: NcclMode) -> ModelStep {
        self.step_with(per_rank_batch, k, mode, &RESNET18_BUCKETS)
    }

    /// `step` with another bucket layout ((bytes, ready fraction of backward), in all-reduce
    /// order): `buckets::rebucket` of the book's at another `bucket_cap_mb`.
    pub fn step_with(
        &self,
        per_rank_batch: u32,
        k: u32,
        mode: NcclMode,
        layout: &[(u64, f64)],
    ) -> ModelStep {
        let (fwd, bwd, opt, data) = self.compute_ms(per_rank_batch);
        let curve = self.curve(mode);
        let tl = predict_timeline(layout, bwd, |b| self.bucket_comm_ms(b, k, &curve));
        let overhead = if k > 1 { self.ddp_overhead_ms } else { 0.0 };
        let bwd_total = bwd + tl.exposed_ms + overhead;
        ModelStep {
            fwd_ms: fwd,
            bwd_ms: bwd_total,
            opt_ms: opt,
            data_ms: data,
            step_ms: fwd + bwd_total + opt + data,
            timeline: tl,
        }
    }

    /// Samples/s of all k ranks together for weak scaling at a per-rank batch.
    pub fn weak_samples_per_s(&self, per_rank_batch: u32, k: u32, mode: NcclMode) -> f64 {
        let s = self.step(per_rank_batch, k, mode);
        k as f64 * per_rank_batch as f64 / (s.step_ms / 1e3)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelStep {
    pub fwd_ms: f64,
    pub bwd_ms: f64,
    pub opt_ms: f64,
    pub data_ms: f64,
    pub step_ms: f64,
    pub timeline: TimelinePrediction,
}

/// Predicted exposed communication of a no_sync probe: Σ 2(k−1)/k·n_i/busbw(n_i) (= N/algbw),
/// from a measured busbw curve. `None` without a curve.
pub fn predicted_comm_ms(
    bucket_bytes: &[u64],
    k: u32,
    curve: &BusbwCurve,
    alpha_us: f64,
) -> Option<f64> {
    if curve.points.is_empty() {
        return None;
    }
    Some(
        bucket_bytes
            .iter()
            .map(|&b| allreduce_ms(b, k, curve.at(b).unwrap_or(1.0), alpha_us))
            .sum(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speedups(p: &Profile) -> (f64, f64, f64) {
        let k1 = p.weak_samples_per_s(256, 1, NcclMode::DEFAULT);
        (
            k1,
            p.weak_samples_per_s(256, 2, NcclMode::DEFAULT) / k1,
            p.weak_samples_per_s(256, 4, NcclMode::DEFAULT) / k1,
        )
    }

    #[test]
    fn h200_profile_matches_baseline() {
        let p = Profile::get(DEFAULT_PROFILE).unwrap();
        let (k1, s2, _) = speedups(&p);
        assert!((k1 - 5600.0).abs() < 150.0, "k1 {k1}");
        assert!((s2 - 1.96).abs() < 0.02, "speedup {s2}");
        let curve = p.curve(NcclMode::DEFAULT);
        let us: Vec<f64> = RESNET18_BUCKETS
            .iter()
            .map(|(b, _)| p.bucket_comm_ms(*b, 2, &curve) * 1e3)
            .collect();
        // measured 112 / 195 / 78 µs (all-reduce order); the last, smallest bucket ran faster in
        // the measurement than a single in-backward factor predicts, hence the 40% band.
        for (got, want) in us.iter().zip([111.6, 195.0, 78.1]) {
            assert!((got / want - 1.0).abs() < 0.40, "bucket {got} µs vs {want}");
        }
    }

    #[test]
    fn book_profile_matches_book() {
        let p = Profile::get("book-pcie").unwrap();
        let (_, s2, s4) = speedups(&p);
        assert!((s2 - 1.8).abs() < 0.05, "k=2 speedup {s2}");
        assert!((s4 - 3.3).abs() < 0.08, "k=4 speedup {s4}");
        let c0 = p.curve(NcclMode::DEFAULT);
        let c1 = p.curve(NcclMode::SHM_MEMCPY);
        let ratio = c1.at(64 * MIB).unwrap() / c0.at(64 * MIB).unwrap();
        assert!((ratio - 5.0).abs() < 0.01);
        assert!(p.training_hangs(NcclMode::SHM_MEMCPY));
        assert!(!p.training_hangs(NcclMode::DEFAULT));
    }

    #[test]
    fn interpolation_is_monotone_between_points() {
        let c = BusbwCurve::new(vec![(MIB, 10.0), (4 * MIB, 40.0)]);
        assert_eq!(c.at(MIB), Some(10.0));
        assert_eq!(c.at(2 * MIB), Some(25.0));
        assert_eq!(c.at(8 * MIB), Some(40.0));
        assert!(c.at(1024).unwrap() < 0.1);
    }

    #[test]
    fn nccl_tests_formulas() {
        let (alg, bus) = bandwidths(64 * MIB, 2, 257.1);
        assert!((alg - 261.0).abs() < 0.1 && (bus - alg).abs() < 1e-9);
        let (alg4, bus4) = bandwidths(1_000_000_000, 4, 1e6);
        assert!((alg4 - 1.0).abs() < 1e-9 && (bus4 - 1.5).abs() < 1e-9);
    }

    #[test]
    fn timeline_serializes_buckets() {
        let tl = predict_timeline(&[(1, 0.1), (1, 0.2)], 10.0, |_| 5.0);
        assert_eq!(tl.spans[1].start_ms, 6.0); // waits for bucket 0 (1 + 5)
        assert_eq!(tl.exposed_ms, 1.0); // done 11 − backward end 10
    }
}
