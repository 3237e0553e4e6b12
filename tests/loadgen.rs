//! The scale benchmark's load generator against a real engine: 8 ranks over the authenticated
//! Unix socket for about a second. Every line sent is applied, every step stored, every rank's
//! step counter ends at the last step sent. Counts only, no timing.

use ddptop::loadgen::{Generator, Options, measure};
use std::time::Duration;

#[test]
fn eight_ranks_lose_nothing() {
    let d = tempfile::tempdir().unwrap();
    let mut o = Options::new(8, d.path().join("data"));
    o.duration = Duration::from_secs(1);
    let rt = ddptop::util::runtime().unwrap();
    let r = rt.block_on(measure(&o, Generator::Thread)).unwrap();
    let s = &r.sent;
    // 20 rounds of step + buckets for each of 8 ranks, and a heartbeat per rank per second.
    assert_eq!(s.last_step, 20, "{r:?}");
    assert_eq!(s.steps, 8 * 20, "{r:?}");
    assert_eq!(s.buckets, 8 * 20, "{r:?}");
    assert_eq!(s.heartbeats, 8, "{r:?}");
    assert_eq!(r.dropped(), 0, "{r:?}");
    assert_eq!(r.received_steps, s.steps, "{r:?}");
    assert_eq!(r.received_buckets, s.buckets, "{r:?}");
    assert_eq!(r.received_heartbeats, s.heartbeats, "{r:?}");
    assert_eq!(r.stored_steps, s.steps, "every step stored: {r:?}");
    assert_eq!(r.ranks_at_last_step, 8, "{r:?}");
    assert!(r.frames >= 1, "{r:?}");
    assert!(r.screen.contains("Ranks"), "{}", r.screen);
}
