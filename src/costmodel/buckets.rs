//! DDP's gradient buckets at another `bucket_cap_mb`, from a measured layout (`ddptop tune`).
//!
//! Gradients become ready in all-reduce order. Within a measured bucket its bytes are taken to
//! become ready at an even rate, from the previous bucket's ready time to its own (the first from
//! 0). A new layout closes a bucket once it holds at least the cap (the first at least DDP's
//! 1 MiB first bucket), and the bucket is ready when its last byte is. Bytes are continuous here:
//! DDP closes buckets between whole gradient tensors, so a cap below the model's largest tensors
//! makes buckets here that DDP cannot make (docs/methods.md, "Tuning").

/// DDP's first bucket (`torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`).
pub const FIRST_BUCKET_BYTES: u64 = 1 << 20;
/// DDP's default `bucket_cap_mb`.
pub const DEFAULT_CAP_MB: f64 = 25.0;

/// `bucket_cap_mb` in bytes (MiB, as DDP reads it).
pub fn cap_bytes(mb: f64) -> u64 {
    (mb * (1u64 << 20) as f64).round().max(1.0) as u64
}

/// The layout `layout` (bytes, ready) would have at `cap` bytes per bucket.
pub fn rebucket(layout: &[(u64, f64)], cap: u64) -> Vec<(u64, f64)> {
    let total: u64 = layout.iter().map(|b| b.0).sum();
    if total == 0 {
        return Vec::new();
    }
    // The ready curve: (cumulative bytes, ready) at each measured bucket's end.
    let mut knots = vec![(0u64, 0.0f64)];
    let mut acc = 0u64;
    for &(bytes, ready) in layout {
        acc += bytes;
        let prev = knots.last().map_or(0.0, |k| k.1);
        knots.push((acc, ready.max(prev)));
    }
    let ready_at = |x: u64| -> f64 {
        let i = knots
            .iter()
            .position(|k| k.0 >= x)
            .unwrap_or(knots.len() - 1);
        if i == 0 {
            return knots[0].1;
        }
        let (x0, r0) = knots[i - 1];
        let (x1, r1) = knots[i];
        if x1 == x0 {
            r1
        } else {
            r0 + (r1 - r0) * (x - x0) as f64 / (x1 - x0) as f64
        }
    };
    let mut out = Vec::new();
    let mut start = 0u64;
    while start < total {
        let want = if out.is_empty() {
            FIRST_BUCKET_BYTES.min(cap.max(1))
        } else {
            cap.max(1)
        };
        let end = (start + want).min(total);
        out.push((end - start, ready_at(end)));
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_cap_cuts_the_bytes_and_interpolates_ready_times() {
        // 8 MiB ready at 10 ms, then 8 MiB ready at 30 ms.
        let layout = [(8 * MIB, 10.0), (8 * MIB, 30.0)];
        let b = rebucket(&layout, 4 * MIB);
        let bytes: Vec<u64> = b.iter().map(|x| x.0).collect();
        assert_eq!(bytes, [MIB, 4 * MIB, 4 * MIB, 4 * MIB, 3 * MIB]);
        let ready: Vec<f64> = b.iter().map(|x| x.1).collect();
        // 1 MiB of the first 8 at 10 ms/8 MiB; 5 MiB; 9 MiB: 10 + 20·1/8; 13: 10 + 20·5/8; 16: 30.
        assert_eq!(ready, [1.25, 6.25, 12.5, 22.5, 30.0]);
        assert_eq!(b.iter().map(|x| x.0).sum::<u64>(), 16 * MIB);
    }

    #[test]
    fn a_cap_above_the_model_is_the_first_bucket_and_one_more() {
        let layout = [(3 * MIB, 5.0), (5 * MIB, 20.0)];
        let b = rebucket(&layout, 1024 * MIB);
        assert_eq!(b, [(MIB, 5.0 / 3.0), (7 * MIB, 20.0)]);
        assert_eq!(rebucket(&[], MIB), []);
        assert_eq!(cap_bytes(DEFAULT_CAP_MB), 25 * MIB);
    }

    #[test]
    fn ready_times_never_go_back() {
        // A measured layout whose medians are not monotone still gives an ordered one.
        let layout = [(2 * MIB, 10.0), (2 * MIB, 8.0), (2 * MIB, 12.0)];
        let b = rebucket(&layout, MIB);
        assert!(b.windows(2).all(|w| w[0].1 <= w[1].1), "{b:?}");
    }
}
