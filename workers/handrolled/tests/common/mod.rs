//! A small stand-in for ddptop's socket: it accepts the worker's k connections, answers each
//! `hello` with `welcome`, and records every line, parsed by ddptop's own protocol parser.
#![allow(dead_code)]

use ddptop::protocol::parse_worker;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "9f2c5e0a7b1d4c3e8f6a2b9d0c1e7f3a5b8d2c4e6f0a1b3c5d7e9f2a4b6c8d0e";
pub const RUN_ID: &str = "r20261130-011500-3f2a";

/// One received line: the connection it came on, the raw JSON, and the time it arrived.
#[derive(Debug, Clone)]
pub struct Line {
    pub conn: usize,
    pub msg: Value,
    pub at: Instant,
}

pub struct FakeDdptop {
    pub dir: tempfile::TempDir,
    pub lines: Arc<Mutex<Vec<Line>>>,
    /// Lines ddptop's parser rejected, with the reason.
    pub invalid: Arc<Mutex<Vec<String>>>,
    pub streams: Arc<Mutex<Vec<UnixStream>>>,
}

impl FakeDdptop {
    pub fn start(heartbeat_s: f64) -> FakeDdptop {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join("ddptop.sock")).unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let invalid = Arc::new(Mutex::new(Vec::new()));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let (l, inv, st) = (lines.clone(), invalid.clone(), streams.clone());
        std::thread::spawn(move || {
            for (conn, s) in listener.incoming().enumerate() {
                let Ok(s) = s else { return };
                st.lock().unwrap().push(s.try_clone().unwrap());
                let (l, inv) = (l.clone(), inv.clone());
                std::thread::spawn(move || serve(conn, s, heartbeat_s, l, inv));
            }
        });
        FakeDdptop {
            dir,
            lines,
            invalid,
            streams,
        }
    }

    pub fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("ddptop.sock")
    }

    /// The worker binary, connected to this server.
    pub fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ddptop-handrolled"));
        c.args(["--device", "cpu", "--model", "tiny", "--data", "synthetic"])
            .args(args)
            .env("DDPTOP_SOCKET", self.socket())
            .env("DDPTOP_TOKEN", TOKEN)
            .env("DDPTOP_RUN_ID", RUN_ID)
            .env("OMP_NUM_THREADS", "1")
            .env_remove("DDPTOP_INJECT")
            // Every step timed unless a test asks for sampled timing.
            .env_remove("DDPTOP_TIME_EVERY")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        c.spawn().unwrap()
    }

    pub fn of_type(&self, t: &str) -> Vec<Line> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.msg["type"] == t)
            .cloned()
            .collect()
    }

    pub fn wait_for(&self, what: &str, timeout: Duration, mut f: impl FnMut(&[Line]) -> bool) {
        let t0 = Instant::now();
        while !f(&self.lines.lock().unwrap()) {
            assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Close ddptop's end of every connection (ddptop gone: the dead-man switch must fire).
    pub fn close_all(&self) {
        for s in self.streams.lock().unwrap().iter() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn send_all(&self, msg: &Value) {
        for s in self.streams.lock().unwrap().iter_mut() {
            let mut line = serde_json::to_vec(msg).unwrap();
            line.push(b'\n');
            let _ = s.write_all(&line);
        }
    }

    pub fn assert_all_valid(&self) {
        let inv = self.invalid.lock().unwrap();
        assert!(inv.is_empty(), "lines ddptop would reject: {inv:#?}");
    }
}

fn serve(
    conn: usize,
    s: UnixStream,
    heartbeat_s: f64,
    lines: Arc<Mutex<Vec<Line>>>,
    invalid: Arc<Mutex<Vec<String>>>,
) {
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut buf = String::new();
    let mut first = true;
    loop {
        buf.clear();
        match r.read_line(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let raw = buf.trim_end_matches('\n');
        if let Err(e) = parse_worker(raw) {
            invalid.lock().unwrap().push(format!("{e}: {raw}"));
        }
        let msg: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
        let rank = msg["rank"].clone();
        // Recorded before the welcome goes out: the next rank connects only after it.
        lines.lock().unwrap().push(Line {
            conn,
            msg,
            at: Instant::now(),
        });
        if first {
            first = false;
            let welcome = json!({"v": 1, "type": "welcome", "run_id": RUN_ID,
                                 "rank": rank, "heartbeat_s": heartbeat_s});
            let mut line = serde_json::to_vec(&welcome).unwrap();
            line.push(b'\n');
            let _ = w.write_all(&line);
        }
    }
}

/// Wait for the child to exit, at most `timeout`; kill it (our own child) if it does not.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<i32> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st.code().unwrap_or(-1));
        }
        if t0.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
