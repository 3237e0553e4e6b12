//! The plugin's own thread: handshake with ddptop, then drain the record queue continuously and
//! write one `nccl` message per communicator with news every batch (≥ 100 ms). Any failure —
//! ddptop unreachable, a refused token, ddptop gone or not reading for 5 s — turns the plugin off
//! for the rest of the process after one line on stderr; NCCL never sees an error.

use crate::agg::{Agg, CommInfo, Loss};
use crate::conn::{Config, Conn, handshake};
use crate::pool::{COMM_FINAL, COMM_FREE, COMM_LIVE, Shared};
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often the queue is drained between batches: keeps the queue short without waking often.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// Turn the plugin off with its one log line (only the first caller logs).
pub fn disable(shared: &Shared, why: &str) {
    if !shared.disabled.swap(true, Ordering::SeqCst) {
        eprintln!("ddptop NCCL profiler: off for this process: {why}");
    }
}

pub fn run(shared: &'static Shared, cfg: Config, hello: String) {
    let mut conn = match handshake(&cfg, &hello) {
        Ok(c) => c,
        Err(why) => return disable(shared, &why),
    };
    // Reads only look for ddptop closing the connection (or an `error` line before it does).
    let _ = conn.set_timeouts(Some(Duration::from_millis(1)), Some(Duration::from_secs(5)));
    let mut agg = Agg::default();
    let batch = Duration::from_millis(cfg.batch_ms);
    let mut last_batch = std::time::Instant::now();
    loop {
        while let Some(r) = shared.ring.pop() {
            agg.ingest(r);
        }
        if last_batch.elapsed() >= batch {
            last_batch = std::time::Instant::now();
            if let Err(why) = send_batch(shared, &mut agg, &mut conn, cfg.rank) {
                return disable(shared, &why);
            }
            if let Some(why) = closed(&mut conn) {
                return disable(shared, &why);
            }
        }
        std::thread::sleep(DRAIN_EVERY);
    }
}

fn send_batch(shared: &Shared, agg: &mut Agg, conn: &mut Conn, rank: u32) -> Result<(), String> {
    let now = crate::now_ns();
    shared.reap(&agg.done_after(), now);
    while let Some(r) = shared.ring.pop() {
        agg.ingest(r);
    }
    let loss = Loss {
        dropped: shared.counters.dropped.load(Ordering::Relaxed),
        lost: shared.counters.lost.load(Ordering::Relaxed),
        bad: shared.counters.bad.load(Ordering::Relaxed),
        unrequested: shared.counters.unrequested.load(Ordering::Relaxed),
        evicted: agg.evicted,
    };
    let mut out = String::new();
    let mut finished = Vec::new();
    for (i, c) in shared.comms.iter().enumerate() {
        let state = c.state.load(Ordering::Acquire);
        if state != COMM_LIVE && state != COMM_FINAL {
            continue;
        }
        let info = CommInfo {
            id: c.id.load(Ordering::Relaxed),
            rank: c.rank.load(Ordering::Relaxed),
            nranks: c.nranks.load(Ordering::Relaxed),
            nnodes: c.nnodes.load(Ordering::Relaxed),
        };
        let last = state == COMM_FINAL;
        if let Some(m) = agg.message(i, info, rank, now, loss, last) {
            out.push_str(&m);
            out.push('\n');
        }
        if last {
            finished.push(i);
        }
    }
    if !out.is_empty() {
        conn.write_all(out.as_bytes()).map_err(|e| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                "ddptop stopped reading for 5 s".to_string()
            }
            _ => format!("ddptop went away ({e})"),
        })?;
    }
    for i in finished {
        shared.comms[i].state.store(COMM_FREE, Ordering::Release);
    }
    Ok(())
}

/// `Some(why)` when ddptop has closed the connection or sent an error.
fn closed(conn: &mut Conn) -> Option<String> {
    let mut buf = [0u8; 512];
    match conn.read(&mut buf) {
        Ok(0) => Some("ddptop closed the connection".into()),
        Ok(n) => {
            let text = String::from_utf8_lossy(&buf[..n]);
            text.contains(r#""type":"error""#)
                .then(|| format!("ddptop answered: {}", text.trim()))
        }
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
        Err(e) => Some(format!("ddptop went away ({e})")),
    }
}
