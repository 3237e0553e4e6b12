//! The plugin's own thread: handshake with ddptop, then drain the record queue continuously and
//! write one `nccl` message per communicator with news every batch (≥ 100 ms). NCCL never sees an
//! error. When ddptop is not there at the start, or refuses the plugin, the plugin turns itself off
//! for the rest of the process after one line on stderr. When an established connection stalls
//! (ddptop not reading for `DDPTOP_NCCL_STALL_MS`, default 5 s) or breaks, the plugin does not stay
//! off: it keeps recording (bounded, as always), says so in one line, and reconnects with a growing
//! pause (0.25 s doubling to 10 s); the collectives of the batch that could not be written are
//! counted as `lost`. A reconnect that ddptop refuses (the run is over) turns it off.

use crate::agg::{Agg, CommInfo, Loss};
use crate::conn::{Config, Conn, Handshake, handshake};
use crate::pool::{COMM_FINAL, COMM_FREE, COMM_LIVE, Shared};
use crate::status;
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often the queue is drained between batches: keeps the queue short without waking often.
const DRAIN_EVERY: Duration = Duration::from_millis(10);
/// First and longest pause between reconnect attempts.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(10);

/// Turn the plugin off with its one log line (only the first caller logs).
pub fn disable(shared: &Shared, why: &str) {
    status::set(status::OFF, Some(why));
    if !shared.disabled.swap(true, Ordering::SeqCst) {
        eprintln!("ddptop NCCL profiler: off for this process: {why}");
    }
}

pub fn run(shared: &'static Shared, cfg: Config, hello: String) {
    status::set(status::CONNECTING, None);
    let mut conn = match handshake(&cfg, &hello) {
        Ok(c) => c,
        Err(Handshake::Refused(why) | Handshake::Unreachable(why)) => {
            return disable(shared, &why);
        }
    };
    let mut agg = Agg::default();
    loop {
        status::set(status::CONNECTED, None);
        let why = serve(shared, &cfg, &mut agg, &mut conn);
        status::set(status::RECONNECTING, Some(&why));
        eprintln!("ddptop NCCL profiler: {why}; still recording, reconnecting");
        let t0 = Instant::now();
        match reconnect(shared, &cfg, &hello, &mut agg) {
            Ok(c) => {
                conn = c;
                eprintln!(
                    "ddptop NCCL profiler: reconnected after {:.1} s",
                    t0.elapsed().as_secs_f64()
                );
            }
            Err(refused) => return disable(shared, &format!("{why}, then {refused}")),
        }
    }
}

/// Batches on one connection until it stalls or breaks; returns why.
fn serve(shared: &Shared, cfg: &Config, agg: &mut Agg, conn: &mut Conn) -> String {
    // Reads only look for ddptop closing the connection (or an `error` line before it does).
    let _ = conn.set_timeouts(
        Some(Duration::from_millis(1)),
        Some(Duration::from_millis(cfg.stall_ms)),
    );
    let batch = Duration::from_millis(cfg.batch_ms);
    let mut last_batch = Instant::now();
    loop {
        while let Some(r) = shared.ring.pop() {
            agg.ingest(r);
        }
        if last_batch.elapsed() >= batch {
            last_batch = Instant::now();
            if let Err(why) = send_batch(shared, agg, conn, cfg) {
                return why;
            }
            if let Some(why) = closed(conn) {
                return why;
            }
        }
        std::thread::sleep(DRAIN_EVERY);
    }
}

/// Handshake again until ddptop answers, draining the queue meanwhile so NCCL's records keep
/// their bounded place. `Err` when ddptop refuses the plugin.
fn reconnect(shared: &Shared, cfg: &Config, hello: &str, agg: &mut Agg) -> Result<Conn, String> {
    let mut pause = RETRY_FIRST;
    loop {
        let until = Instant::now() + pause;
        while Instant::now() < until {
            while let Some(r) = shared.ring.pop() {
                agg.ingest(r);
            }
            std::thread::sleep(DRAIN_EVERY);
        }
        match handshake(cfg, hello) {
            Ok(c) => return Ok(c),
            Err(Handshake::Refused(why)) => return Err(why),
            Err(Handshake::Unreachable(why)) => status::set(status::RECONNECTING, Some(&why)),
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

fn send_batch(shared: &Shared, agg: &mut Agg, conn: &mut Conn, cfg: &Config) -> Result<(), String> {
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
    // Completed collectives in this batch: lost if it cannot be written.
    let mut completed = 0u64;
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
        completed += agg.completed(i);
        if let Some(m) = agg.message(i, info, cfg.rank, now, loss, last) {
            out.push_str(&m);
            out.push('\n');
        }
        if last {
            finished.push(i);
        }
    }
    if !out.is_empty() {
        if let Err(e) = conn.write_all(out.as_bytes()) {
            shared.counters.lost.fetch_add(completed, Ordering::Relaxed);
            // A communicator whose final message was cut is freed all the same.
            for i in finished {
                shared.comms[i].state.store(COMM_FREE, Ordering::Release);
            }
            return Err(match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                    format!(
                        "ddptop stopped reading for {:.1} s",
                        cfg.stall_ms as f64 / 1e3
                    )
                }
                _ => format!("ddptop went away ({e})"),
            });
        }
        if completed > 0 {
            status::advance(status::CONNECTED, status::REPORTING);
        }
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
