//! The paced reader: one thread reads every admitted worker connection that is a plain socket
//! (the Unix socket, and TCP without TLS) and hands the engine what each had.
//!
//! Why a thread of its own, and why paced: at 1,024 ranks × 20 steps/s, a task per connection
//! meant 20,000 task wake-ups, scheduler hand-offs and channel sends a second, each for one
//! step's two lines; that, not parsing, was most of ddptop's CPU (docs/performance.md). Here
//! the thread waits in epoll, reads every connection that is ready, then sleeps out the rest
//! of a round (`PACE`, longer from 24 connections: `pace`) before it waits again, so one
//! wake-up serves every rank that wrote meanwhile, and a large run's rank has written several
//! steps when it is read (four at 256 ranks × 20 steps/s, eight from 480 ranks). A line is at
//! most one round (10–400 ms) later on screen; the dashboard draws new data every 250 ms at most,
//! and the watchdog's thresholds are seconds.
//!
//! The handshake (hello, token, welcome) stays in the connection's tokio task, which then
//! hands the socket over with whatever it had read past the hello. TLS connections keep their
//! task (`socket::stream_lines`): the TLS state lives there.

use super::lines::{LineCheck, Verdict};
use super::{Received, SupEvent};
use crate::protocol::{ControlMsg, LineSplitter, MAX_LINE_BYTES};
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// After a round that read something, the thread waits this long from the round's start
/// before it reads again.
pub const PACE: Duration = Duration::from_millis(10);
/// The round for `open` connections: `PACE`, and from 24 connections longer in proportion (10 ms
/// per 12 connections, at most 400 ms, from 480), so that a large run's ranks have written more
/// than one step by the time they are read: one `recv` and one `epoll` event then carry several
/// (at 20 steps/s: two from 60 ranks, four from 240, eight from 480).
///
/// Why this long (docs/performance.md, the session of 2026-12-03): on the 2-core VM, 400 ms at most
/// cost 19 % less CPU than 200 ms at 1,024 ranks, and 10 ms per 12 connections 14 % less than
/// per 25 at 256. A line is then at most 0.4 s late (the dashboard draws new data every 250 ms),
/// and a rank's writes only wait if it writes more than its socket buffer (~208 KiB by default)
/// in a round, ~500 KB/s, where a training rank at 20-40 steps/s writes ~20-40 KB/s.
fn pace(open: usize) -> Duration {
    (PACE * (open / 12).max(1) as u32).min(MAX_ROUND)
}

/// The longest round (`pace`).
const MAX_ROUND: Duration = Duration::from_millis(400);

/// A connection whose worker does not take ddptop's lines for this long is closed (as the
/// task-per-connection code did).
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// While some connection has unsent bytes, the thread looks again this often.
const RETRY_WRITES: Duration = Duration::from_millis(50);
const READ_CHUNK: usize = 64 << 10;
/// Full reads of one connection per round at most (1 MiB, the longest line). The unit tests
/// take one: a Unix socket's buffer (~200 KiB) never holds more than 16 reads, and the
/// carry-over to the next round must be tested over one.
pub(crate) const READS_PER_ROUND: usize = if cfg!(test) { 1 } else { 16 };
const WAKE: Token = Token(usize::MAX);

/// An admitted connection's socket.
pub(crate) enum Stream {
    Unix(mio::net::UnixStream),
    Tcp(mio::net::TcpStream),
}

impl Stream {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Unix(s) => s,
            Stream::Tcp(s) => s,
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }

    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
}

/// A connection handed over after its handshake.
pub(crate) struct Handoff {
    pub stream: Stream,
    /// Bytes the handshake read past the hello line (the worker may write at once).
    pub rest: Vec<u8>,
    pub check: LineCheck,
    /// ddptop's lines to this worker (`Registry::command`).
    pub control: mpsc::UnboundedReceiver<ControlMsg>,
    /// Held while the connection is open (a TCP connection's slots).
    pub guard: Box<dyn Send>,
}

struct Shared {
    handoffs: Mutex<Vec<Handoff>>,
    waker: Waker,
    stop: AtomicBool,
}

/// What the reader calls with (run, rank) when a rank's connection closes. A callback, not the
/// registry itself, so that the reader does not import the socket code that starts it.
pub(crate) type OnClose = Box<dyn Fn(&str, u32) + Send>;

/// The handle kept by the socket servers and the registry.
#[derive(Clone)]
pub(crate) struct Reader(Arc<Shared>);

impl Reader {
    /// Start the thread. It delivers to `events` and tells `on_close` (run, rank) of each
    /// closed rank (the registry drops its sender: `Registry::drop_sender`).
    pub fn start(on_close: OnClose, events: mpsc::Sender<SupEvent>) -> std::io::Result<Reader> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKE)?;
        let shared = Arc::new(Shared {
            handoffs: Mutex::new(Vec::new()),
            waker,
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("ddptop-reader".into())
            .spawn(move || Thread::new(poll, s, on_close, events).run())?;
        Ok(Reader(shared))
    }

    pub fn hand_off(&self, h: Handoff) {
        self.0
            .handoffs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(h);
        self.wake();
    }

    /// Look at the connections' control channels now (a command was queued, a run closed).
    pub fn wake(&self) {
        let _ = self.0.waker.wake();
    }

    /// End the thread; its connections close.
    pub fn stop(&self) {
        self.0.stop.store(true, Ordering::Release);
        self.wake();
    }
}

struct Conn {
    stream: Stream,
    split: LineSplitter,
    check: LineCheck,
    control: mpsc::UnboundedReceiver<ControlMsg>,
    /// Lines read this round, delivered at its end.
    lines: Vec<Received>,
    /// ddptop's bytes not yet taken by the worker, and since when.
    out: Vec<u8>,
    out_since: Option<Instant>,
    closing: bool,
    /// Bytes may be left after this round's reads (`Some(hung_up)`): read again next round.
    more: Option<bool>,
    _guard: Box<dyn Send>,
}

impl Conn {
    /// Read what the socket has. One short read drains it: with edge-triggered epoll, bytes
    /// that come after the read raise a new event. A hang-up seen with the event is read to
    /// its end (no later event would say so).
    ///
    /// At most `READS_PER_ROUND` full reads a round: one worker that writes without pause does
    /// not hold up the others. What is left is read next round (`more`), without an event.
    fn read(&mut self, scratch: &mut [u8], hung_up: bool) {
        self.more = None;
        for _ in 0..READS_PER_ROUND {
            match self.stream.read(scratch) {
                Ok(0) => {
                    let last = self.split.finish();
                    self.judge(last);
                    self.closing = true;
                    return;
                }
                Ok(n) => {
                    self.take(&scratch[..n]);
                    if self.closing || (n < scratch.len() && !hung_up) {
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closing = true;
                    return;
                }
            }
        }
        self.more = Some(hung_up);
    }

    fn take(&mut self, bytes: &[u8]) {
        let Conn {
            split,
            check,
            lines,
            out,
            closing,
            ..
        } = self;
        split.push(bytes, |o| match check.judge(o) {
            Verdict::Keep(r) => {
                lines.push(r);
                true
            }
            Verdict::Drop(reply) => {
                queue(out, reply);
                true
            }
            Verdict::Close(reply) => {
                queue(out, reply);
                *closing = true;
                false
            }
        });
    }

    fn judge(&mut self, outcome: crate::protocol::ReadOutcome) {
        match self.check.judge(outcome) {
            Verdict::Keep(r) => self.lines.push(r),
            Verdict::Drop(reply) => queue(&mut self.out, reply),
            Verdict::Close(reply) => {
                queue(&mut self.out, reply);
                self.closing = true;
            }
        }
    }

    /// Queue what ddptop has for this worker; a closed channel (the run ended, or the rank
    /// was dropped) closes the connection.
    fn take_control(&mut self) {
        loop {
            match self.control.try_recv() {
                Ok(m) => queue(&mut self.out, Some(m)),
                Err(mpsc::error::TryRecvError::Empty) => return,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.closing = true;
                    return;
                }
            }
        }
    }

    /// Write what is queued, as far as the socket takes it now.
    fn flush(&mut self, now: Instant) {
        while !self.out.is_empty() {
            match self.stream.write(&self.out) {
                Ok(0) => {
                    self.closing = true;
                    return;
                }
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    let since = *self.out_since.get_or_insert(now);
                    if now.duration_since(since) >= WRITE_TIMEOUT {
                        self.closing = true;
                    }
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closing = true;
                    return;
                }
            }
        }
        self.out_since = None;
    }
}

fn queue(out: &mut Vec<u8>, msg: Option<ControlMsg>) {
    if let Some(m) = msg {
        out.extend_from_slice(m.to_line().as_bytes());
        out.push(b'\n');
    }
}

struct Thread {
    poll: Poll,
    shared: Arc<Shared>,
    on_close: OnClose,
    events: mpsc::Sender<SupEvent>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections read or written this round.
    touched: Vec<usize>,
    /// The most lines one run had in the last round.
    round_lines: usize,
}

impl Thread {
    fn new(
        poll: Poll,
        shared: Arc<Shared>,
        on_close: OnClose,
        events: mpsc::Sender<SupEvent>,
    ) -> Thread {
        Thread {
            poll,
            shared,
            on_close,
            events,
            conns: Vec::new(),
            free: Vec::new(),
            touched: Vec::new(),
            round_lines: 0,
        }
    }

    fn run(mut self) {
        let mut evs = Events::with_capacity(1024);
        let mut scratch = vec![0u8; READ_CHUNK];
        loop {
            let waiting = self.conns.iter().flatten().any(|c| !c.out.is_empty());
            let again: Vec<(usize, bool)> = self
                .conns
                .iter()
                .enumerate()
                .filter_map(|(i, c)| Some((i, c.as_ref()?.more?)))
                .collect();
            let timeout = match (again.is_empty(), waiting) {
                (false, _) => Some(Duration::ZERO),
                (true, true) => Some(RETRY_WRITES),
                (true, false) => None,
            };
            if let Err(e) = self.poll.poll(&mut evs, timeout)
                && e.kind() != ErrorKind::Interrupted
            {
                return;
            }
            if self.shared.stop.load(Ordering::Acquire) {
                return;
            }
            let round = Instant::now();
            let mut woken = false;
            let mut read = false;
            for ev in evs.iter() {
                if ev.token() == WAKE {
                    woken = true;
                    continue;
                }
                let i = ev.token().0;
                if let Some(Some(c)) = self.conns.get_mut(i) {
                    c.read(&mut scratch, ev.is_read_closed() || ev.is_error());
                    self.touched.push(i);
                    read = true;
                }
            }
            for (i, hung_up) in again {
                if let Some(Some(c)) = self.conns.get_mut(i)
                    && c.more.is_some()
                {
                    c.read(&mut scratch, hung_up);
                    self.touched.push(i);
                    read = true;
                }
            }
            if woken {
                self.admit();
            }
            if woken || waiting {
                for (i, c) in self.conns.iter_mut().enumerate() {
                    if let Some(c) = c {
                        c.take_control();
                        if !c.out.is_empty() || c.closing {
                            self.touched.push(i);
                        }
                    }
                }
            }
            if !self.deliver(round) {
                return;
            }
            if read {
                let next = round + pace(self.conns.len() - self.free.len());
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
            }
        }
    }

    /// Register the connections handed over since the last round and take what their
    /// handshake read past the hello.
    fn admit(&mut self) {
        let new = std::mem::take(
            &mut *self
                .shared
                .handoffs
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for h in new {
            let i = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let mut c = Conn {
                stream: h.stream,
                split: LineSplitter::new(MAX_LINE_BYTES),
                check: h.check,
                control: h.control,
                lines: Vec::new(),
                out: Vec::new(),
                out_since: None,
                closing: false,
                more: None,
                _guard: h.guard,
            };
            if let Err(e) =
                self.poll
                    .registry()
                    .register(c.stream.source(), Token(i), Interest::READABLE)
            {
                // Said as a bad line, so the screen shows why the rank left.
                c.check
                    .count_bad(format!("cannot watch the connection: {e}"));
                c.closing = true;
            }
            c.take(&h.rest);
            self.conns[i] = Some(c);
            self.touched.push(i);
        }
    }

    /// Write what is queued, hand the engine what the touched connections had, close the
    /// connections that end. A run's lines of the round go as one event (one channel send and
    /// one wake-up of the engine for every rank that wrote); what a rank said about itself
    /// stays in order. False when the engine is gone.
    fn deliver(&mut self, now: Instant) -> bool {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        let mut by_run: Vec<(String, Vec<Received>)> = Vec::new();
        let mut after: Vec<SupEvent> = Vec::new();
        for &i in &touched {
            let Some(c) = self.conns[i].as_mut() else {
                continue;
            };
            if !c.out.is_empty() {
                c.flush(now);
            }
            let had_lines = !c.lines.is_empty();
            if had_lines {
                // Appended, not taken: the connection keeps its buffer, and the run's is sized
                // from the last round (no regrowth through ~2,000 lines at 1,024 ranks).
                let at = match by_run.iter().position(|(run, _)| *run == c.check.run) {
                    Some(at) => at,
                    None => {
                        by_run.push((c.check.run.clone(), Vec::with_capacity(self.round_lines)));
                        by_run.len() - 1
                    }
                };
                by_run[at].1.append(&mut c.lines);
            }
            if (had_lines || c.check.bad_report_due() || c.closing)
                && let Some(ev) = c.check.take_bad()
            {
                after.push(ev);
            }
            if c.closing {
                let mut c = self.conns[i].take().expect("checked above");
                let _ = self.poll.registry().deregister(c.stream.source());
                self.free.push(i);
                (self.on_close)(&c.check.run, c.check.rank);
                after.push(SupEvent::Disconnected {
                    run: std::mem::take(&mut c.check.run),
                    rank: c.check.rank,
                });
            }
        }
        self.round_lines = by_run.iter().map(|(_, l)| l.len()).max().unwrap_or(0);
        let lines = by_run
            .into_iter()
            .map(|(run, lines)| SupEvent::Lines { run, lines });
        let mut alive = true;
        for ev in lines.chain(after) {
            alive = alive && self.events.blocking_send(ev).is_ok();
        }
        touched.clear();
        self.touched = touched;
        alive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_round_is_10_ms_up_to_23_connections_and_grows_to_400_ms_at_480() {
        let ms = |n| pace(n).as_millis();
        assert_eq!((ms(0), ms(8), ms(23)), (10, 10, 10));
        assert_eq!((ms(24), ms(128), ms(256), ms(479)), (20, 100, 210, 390));
        assert_eq!(
            (ms(480), ms(1000), ms(1024), ms(4096)),
            (400, 400, 400, 400)
        );
    }
}
