//! The gradient all-reduce written by hand with tensor copies, on one flat buffer per replica
//! (the whole gradient: one bucket). Both variants leave every buffer holding the mean over
//! replicas, which is what DDP's all-reduce gives (each replica's loss is a mean over its shard).
//!
//! - `star`: the book's hub. Device 0 receives every other buffer, sums, divides, and sends the
//!   result back: 2(k-1) full-size transfers, all through device 0's links.
//! - `ring`: reduce-scatter then all-gather over k chunks; each step every replica sends one
//!   chunk to its successor, so 2(k-1) chunk transfers per replica, spread over all links.
//!
//! On CUDA every copy is a device-to-device `copy_`, which libtorch orders against both devices'
//! current streams; nothing here waits for the host.

use anyhow::Result;
use tch::Tensor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduce {
    Star,
    Ring,
}

impl Reduce {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "star" => Ok(Self::Star),
            "ring" => Ok(Self::Ring),
            _ => Err(format!("unknown reduce {s:?} (star, ring)")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Star => "star",
            Self::Ring => "ring",
        }
    }
}

/// Average `bufs` (1-D, equal length, `bufs[r]` on replica r's device) across replicas, in place.
pub fn all_reduce_mean(bufs: &mut [Tensor], how: Reduce) -> Result<()> {
    if bufs.len() < 2 {
        return Ok(());
    }
    match how {
        Reduce::Star => star(bufs),
        Reduce::Ring => ring(bufs),
    }
}

fn star(bufs: &mut [Tensor]) -> Result<()> {
    let k = bufs.len() as i64;
    let (hub, rest) = bufs.split_first_mut().expect("k >= 2");
    let dev0 = hub.device();
    for b in rest.iter() {
        let _ = hub.f_add_(&b.f_to_device(dev0)?)?;
    }
    let _ = hub.f_div_scalar_(k)?;
    for b in rest.iter_mut() {
        b.f_copy_(hub)?;
    }
    Ok(())
}

/// (offset, length) of chunk c when n elements are split into k chunks differing by at most 1.
pub fn chunk(n: i64, k: i64, c: i64) -> (i64, i64) {
    let (base, rem) = (n / k, n % k);
    (c * base + c.min(rem), base + i64::from(c < rem))
}

fn ring(bufs: &mut [Tensor]) -> Result<()> {
    let k = bufs.len() as i64;
    let n = bufs[0].size()[0];
    let ku = k as usize;
    let part = |r: usize, c: i64| -> Result<Tensor> {
        let (off, len) = chunk(n, k, c);
        Ok(bufs[r].f_narrow(0, off, len)?)
    };
    // One receive buffer per replica, as large as the largest chunk.
    let recv: Vec<Tensor> = bufs
        .iter()
        .map(|b| {
            b.f_empty_like()
                .and_then(|e| e.f_narrow(0, 0, chunk(n, k, 0).1))
        })
        .collect::<Result<_, _>>()?;
    // Reduce-scatter: at step s replica i sends chunk (i - s) mod k to i + 1, which adds it to its
    // own copy. All sends of a step are issued before its adds, so each link is busy at once.
    for s in 0..k - 1 {
        for i in 0..ku {
            let dst = (i + 1) % ku;
            let c = (i as i64 - s).rem_euclid(k);
            let len = chunk(n, k, c).1;
            recv[dst].f_narrow(0, 0, len)?.f_copy_(&part(i, c)?)?;
        }
        for i in 0..ku {
            let dst = (i + 1) % ku;
            let c = (i as i64 - s).rem_euclid(k);
            let len = chunk(n, k, c).1;
            let _ = part(dst, c)?.f_add_(&recv[dst].f_narrow(0, 0, len)?)?;
        }
    }
    // Replica i now holds the full sum of chunk (i + 1) mod k.
    for i in 0..ku {
        let _ = part(i, (i as i64 + 1).rem_euclid(k))?.f_div_scalar_(k)?;
    }
    // All-gather: at step s replica i sends chunk (i + 1 - s) mod k to i + 1, which overwrites.
    for s in 0..k - 1 {
        for i in 0..ku {
            let dst = (i + 1) % ku;
            let c = (i as i64 + 1 - s).rem_euclid(k);
            part(dst, c)?.f_copy_(&part(i, c)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_buffer_exactly() {
        for n in [1, 7, 10, 11, 1000] {
            for k in 1..6 {
                let mut next = 0;
                for c in 0..k {
                    let (off, len) = chunk(n, k, c);
                    assert_eq!(off, next, "n={n} k={k} c={c}");
                    next += len;
                }
                assert_eq!(next, n);
            }
        }
    }
}
