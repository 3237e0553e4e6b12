//! Protocol v1 client (docs/protocol.md), the Rust twin of workers/ddptop_worker/client.py, for a
//! process that drives k replicas: one connection per replica (rank = replica index, same pid),
//! one heartbeat thread for all of them, one reader thread per connection. When ddptop's end of
//! any connection closes while we are still running, the process exits at once (dead-man switch).

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const DEADMAN_EXIT_CODE: i32 = 70;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_LINE_BYTES: usize = 1 << 20;

/// Seconds on CLOCK_MONOTONIC, the clock Python's `time.monotonic()` reads.
pub fn monotonic() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// What every replica's `hello` carries besides its rank and device.
#[derive(Debug, Clone)]
pub struct HelloInfo {
    pub world_size: usize,
    pub backend: &'static str,
    pub torch: Option<String>,
    pub cuda: Option<String>,
    /// `device` string per rank, e.g. `cuda:1` or `cpu`.
    pub devices: Vec<String>,
}

struct Conn {
    rank: usize,
    writer: Mutex<UnixStream>,
    silent: AtomicBool,
}

struct Shared {
    conns: Vec<Conn>,
    step: AtomicU64,
    phase: Mutex<&'static str>,
    closing: AtomicBool,
    closed: AtomicBool,
    stop_requested: AtomicBool,
    /// Exit the process when ddptop's end closes (off only in tests).
    deadman: bool,
    /// Every command received, in order (tests, logs).
    commands: Mutex<Vec<String>>,
}

/// The k connections of this process; a disabled client (no `DDPTOP_SOCKET`) does nothing.
pub struct Client {
    shared: Option<Arc<Shared>>,
    heartbeat_stop: Mutex<Option<mpsc::Sender<()>>>,
}

fn write_line(w: &Mutex<UnixStream>, msg: &Value) {
    let mut line = match serde_json::to_vec(msg) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ddptop-handrolled: dropped a message: {e}");
            return;
        }
    };
    if line.len() > MAX_LINE_BYTES {
        eprintln!("ddptop-handrolled: dropped a message over 1 MiB");
        return;
    }
    line.push(b'\n');
    let mut s = w.lock().unwrap_or_else(|p| p.into_inner());
    // A failed write means ddptop's end is gone: the reader thread sees it too and fires the
    // dead-man switch, so the error itself needs no handling here.
    let _ = s.write_all(&line);
}

fn handshake(stream: &UnixStream, hello: &Value) -> anyhow::Result<f64> {
    let mut w = stream;
    let mut line = serde_json::to_vec(hello)?;
    line.push(b'\n');
    w.write_all(&line).context("sending hello to ddptop")?;
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let reply = read_one_line(stream).context("waiting for ddptop's welcome")?;
    stream.set_read_timeout(None)?;
    if reply.is_empty() {
        bail!("handshake with ddptop failed: ddptop closed the connection before its welcome");
    }
    let v: Value = serde_json::from_str(reply.trim_end())
        .context("handshake with ddptop failed: its reply to hello is not JSON")?;
    match v["type"].as_str() {
        Some("welcome") => Ok(v["heartbeat_s"]
            .as_f64()
            .filter(|h| *h > 0.0)
            .unwrap_or(1.0)),
        Some("error") => bail!(
            "ddptop refused the connection: {}: {}",
            v["code"].as_str().unwrap_or("?"),
            v["msg"].as_str().unwrap_or("")
        ),
        other => bail!("handshake with ddptop failed: expected welcome, got {other:?}"),
    }
}

/// One line, read byte by byte so that nothing after the welcome is buffered here and lost
/// before the reader thread takes the stream over.
fn read_one_line(mut stream: &UnixStream) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    let mut b = [0u8; 1];
    while stream.read(&mut b)? == 1 && b[0] != b'\n' && bytes.len() <= MAX_LINE_BYTES {
        bytes.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl Client {
    pub fn disabled() -> Client {
        Client {
            shared: None,
            heartbeat_stop: Mutex::new(None),
        }
    }

    /// Connect every rank to `$DDPTOP_SOCKET` (hello, then welcome); disabled when unset.
    pub fn from_env(info: &HelloInfo) -> anyhow::Result<Client> {
        match std::env::var("DDPTOP_SOCKET") {
            Ok(path) if !path.is_empty() => Self::connect(&path, info, true),
            _ => Ok(Client::disabled()),
        }
    }

    pub fn connect(path: &str, info: &HelloInfo, deadman: bool) -> anyhow::Result<Client> {
        let token = std::env::var("DDPTOP_TOKEN").unwrap_or_default();
        let run_id = std::env::var("DDPTOP_RUN_ID").unwrap_or_default();
        let host = hostname();
        let mut conns = Vec::new();
        let mut readers = Vec::new();
        let mut heartbeat_s: f64 = 1.0;
        for rank in 0..info.world_size {
            let stream = UnixStream::connect(path).with_context(|| {
                format!("handshake with ddptop failed: cannot connect to DDPTOP_SOCKET={path}")
            })?;
            let hello = json!({
                "v": 1, "type": "hello", "token": token, "run_id": run_id, "rank": rank,
                "world_size": info.world_size, "local_rank": rank, "pid": std::process::id(),
                "host": host, "device": info.devices[rank], "backend": info.backend,
                "worker": "handrolled", "torch": info.torch, "nccl": null, "cuda": info.cuda,
                "t": monotonic(), "devices": info.world_size,
            });
            heartbeat_s = handshake(&stream, &hello)?;
            readers.push(stream.try_clone()?);
            conns.push(Conn {
                rank,
                writer: Mutex::new(stream),
                silent: AtomicBool::new(false),
            });
        }
        let shared = Arc::new(Shared {
            conns,
            step: AtomicU64::new(0),
            phase: Mutex::new("init"),
            closing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            stop_requested: AtomicBool::new(false),
            deadman,
            commands: Mutex::new(Vec::new()),
        });
        for (rank, stream) in readers.into_iter().enumerate() {
            let sh = shared.clone();
            std::thread::Builder::new()
                .name(format!("ddptop-reader-{rank}"))
                .spawn(move || reader_loop(sh, rank, stream))?;
        }
        let (tx, rx) = mpsc::channel::<()>();
        let sh = shared.clone();
        let period = Duration::from_secs_f64(heartbeat_s);
        std::thread::Builder::new()
            .name("ddptop-heartbeat".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(period) {
                    if sh.closing.load(Ordering::SeqCst) {
                        return;
                    }
                    let phase = *sh.phase.lock().unwrap_or_else(|p| p.into_inner());
                    for c in sh.conns.iter().filter(|c| !c.silent.load(Ordering::SeqCst)) {
                        send_on(&sh, c, "heartbeat", json!({ "phase": phase }));
                    }
                }
            })?;
        Ok(Client {
            shared: Some(shared),
            heartbeat_stop: Mutex::new(Some(tx)),
        })
    }

    pub fn enabled(&self) -> bool {
        self.shared.is_some()
    }

    pub fn set_step(&self, step: u64) {
        if let Some(sh) = &self.shared {
            sh.step.store(step, Ordering::SeqCst);
        }
    }

    pub fn set_phase(&self, phase: &'static str) {
        if let Some(sh) = &self.shared {
            *sh.phase.lock().unwrap_or_else(|p| p.into_inner()) = phase;
        }
    }

    pub fn stop_requested(&self) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|sh| sh.stop_requested.load(Ordering::SeqCst))
    }

    pub fn commands(&self) -> Vec<String> {
        self.shared
            .as_ref()
            .map(|sh| {
                sh.commands
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
            })
            .unwrap_or_default()
    }

    /// Stop heartbeats of `rank` while staying connected (fault injection: a silent rank).
    pub fn silence(&self, rank: usize) {
        if let Some(c) = self.shared.as_ref().and_then(|sh| sh.conns.get(rank)) {
            c.silent.store(true, Ordering::SeqCst);
        }
    }

    /// Send one message on `rank`'s connection; `fields` (an object) follow v/type/rank/step/t,
    /// and a `step` among them overrides the current one.
    pub fn send(&self, rank: usize, mtype: &str, fields: Value) {
        if let Some(sh) = &self.shared
            && let Some(c) = sh.conns.get(rank)
            && !sh.closed.load(Ordering::SeqCst)
        {
            send_on(sh, c, mtype, fields);
        }
    }

    /// The same message on every rank's connection.
    pub fn send_all(&self, mtype: &str, fields: Value) {
        if let Some(sh) = &self.shared {
            for r in 0..sh.conns.len() {
                self.send(r, mtype, fields.clone());
            }
        }
    }

    pub fn log(&self, rank: usize, level: &str, msg: &str) {
        let msg: String = msg.chars().take(8000).collect();
        self.send(rank, "log", json!({ "level": level, "msg": msg }));
    }

    /// `bye` on every connection, then close them without firing the dead-man switch.
    pub fn close(&self, reason: &str) {
        let Some(sh) = &self.shared else { return };
        if sh.closing.swap(true, Ordering::SeqCst) {
            return;
        }
        self.set_phase("done");
        drop(
            self.heartbeat_stop
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        for c in &sh.conns {
            send_on(sh, c, "bye", json!({ "reason": reason }));
        }
        sh.closed.store(true, Ordering::SeqCst);
        for c in &sh.conns {
            let s = c.writer.lock().unwrap_or_else(|p| p.into_inner());
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(sh) = &self.shared {
            // Never left open: without a bye ddptop would wait for the process to exit.
            if !sh.closing.load(Ordering::SeqCst) {
                self.close("error");
            }
        }
    }
}

fn send_on(sh: &Shared, c: &Conn, mtype: &str, fields: Value) {
    let mut msg = Map::new();
    msg.insert("v".into(), json!(1));
    msg.insert("type".into(), json!(mtype));
    msg.insert("rank".into(), json!(c.rank));
    msg.insert("step".into(), json!(sh.step.load(Ordering::SeqCst)));
    msg.insert("t".into(), json!(monotonic()));
    if let Value::Object(f) = fields {
        msg.extend(f);
    }
    write_line(&c.writer, &Value::Object(msg));
}

fn reader_loop(sh: Arc<Shared>, rank: usize, stream: UnixStream) {
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Ok(msg) = serde_json::from_str::<Value>(line.trim_end()) else {
            eprintln!("ddptop-handrolled: ignoring a bad line from ddptop on rank {rank}");
            continue;
        };
        match msg["type"].as_str() {
            Some("command") => {
                let cmd = msg["cmd"].as_str().unwrap_or("").to_string();
                let unsupported = match cmd.as_str() {
                    "stop" => {
                        sh.stop_requested.store(true, Ordering::SeqCst);
                        None
                    }
                    "probe_on" | "probe_off" => Some("it has no no_sync probe"),
                    "dump_fr" => Some("it uses no NCCL, so there is no flight recorder"),
                    _ => Some("unknown command"),
                };
                if let Some(why) = unsupported {
                    let msg = format!("{cmd} ignored by the hand-rolled worker: {why}");
                    send_on(
                        &sh,
                        &sh.conns[rank],
                        "log",
                        json!({"level": "warn", "msg": msg}),
                    );
                }
                sh.commands
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(cmd);
            }
            Some("error") => eprintln!(
                "ddptop-handrolled: ddptop reported {}: {}",
                msg["code"].as_str().unwrap_or("?"),
                msg["msg"].as_str().unwrap_or("")
            ),
            _ => {}
        }
    }
    if !sh.closing.load(Ordering::SeqCst) && sh.deadman {
        eprintln!("ddptop-handrolled: ddptop closed the connection; exiting (dead-man switch)");
        // SAFETY: _exit ends the process without running destructors, on purpose: the training
        // thread may be inside libtorch, and ddptop is gone.
        unsafe { libc::_exit(DEADMAN_EXIT_CODE) };
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
