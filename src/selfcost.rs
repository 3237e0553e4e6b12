//! ddptop's own CPU and memory, shown on the help screen so users can see what watching costs.
//! Read from /proc/self (utime + stime, VmRSS); CPU is the share of one core between two reads.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelfCost {
    /// Percent of one core since the previous read.
    pub cpu_pct: f64,
    pub rss_mb: f64,
}

/// Reads /proc/self at most every `every`.
#[derive(Debug)]
pub struct Meter {
    every: Duration,
    last: Option<(Instant, u64)>,
}

impl Meter {
    pub fn new(every: Duration) -> Meter {
        Meter { every, last: None }
    }

    /// A new figure when the last read is at least `every` old (the first call only sets the
    /// baseline), else `None`.
    pub fn poll(&mut self, now: Instant) -> Option<SelfCost> {
        if self
            .last
            .is_some_and(|(t, _)| now.duration_since(t) < self.every)
        {
            return None;
        }
        let ticks = cpu_ticks()?;
        let prev = self.last.replace((now, ticks));
        let (t0, k0) = prev?;
        let secs = now.duration_since(t0).as_secs_f64();
        let hz = clock_ticks_per_s();
        Some(SelfCost {
            cpu_pct: 100.0 * (ticks.saturating_sub(k0)) as f64 / hz / secs.max(1e-3),
            rss_mb: rss_bytes().unwrap_or(0) as f64 / 1e6,
        })
    }
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

/// utime + stime of this process, in clock ticks (fields 14 and 15 of /proc/self/stat, counted
/// after the parenthesised command name, which may hold spaces).
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_after_a_baseline() {
        let mut m = Meter::new(Duration::from_millis(0));
        let t0 = Instant::now();
        assert_eq!(m.poll(t0), None, "the first read is the baseline");
        // Burn CPU until the kernel has charged at least two ticks (a loaded machine may
        // deschedule us: wait for the charge, not for a time).
        let base = cpu_ticks().unwrap();
        let mut x = 0u64;
        while cpu_ticks().unwrap() < base + 2 && t0.elapsed() < Duration::from_secs(20) {
            for _ in 0..100_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
        }
        std::hint::black_box(x);
        let c = m.poll(Instant::now()).expect("a figure");
        assert!(c.cpu_pct > 0.0 && c.cpu_pct <= 100.0 * 64.0, "{c:?}");
        assert!(c.rss_mb > 1.0, "{c:?}");
        // Within `every`, nothing new.
        let mut slow = Meter::new(Duration::from_secs(3600));
        let now = Instant::now();
        slow.poll(now);
        assert_eq!(slow.poll(now), None);
    }
}
