//! A small blocking protocol client for the sim worker (the Rust twin of ddptop_worker.client).

use crate::protocol::{Command, ControlMsg, Hello, WorkerMsg, parse_control};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub struct Shared {
    pub step: AtomicU64,
    pub probe: AtomicBool,
    pub stop: AtomicBool,
    /// Heartbeats stop when this is set (the `silent` fault).
    pub silent: AtomicBool,
    /// Nothing of the rank reacts any more, not even to ddptop closing the socket (the `frozen`
    /// fault): only a signal ends it.
    pub frozen: AtomicBool,
    pub phase: Mutex<crate::protocol::Phase>,
    /// The collective the modelled rank is blocked in (the profile's deadlock): the
    /// heartbeat reports it pending, as a real rank's flight recorder would.
    pub blocked_in: Mutex<Option<(String, std::time::Instant)>>,
}

pub struct Client {
    writer: Option<Arc<Mutex<UnixStream>>>,
    pub shared: Arc<Shared>,
    pub rank: u32,
    start: std::time::Instant,
}

impl Client {
    /// Connect from `DDPTOP_SOCKET`/`DDPTOP_TOKEN`/`DDPTOP_RUN_ID`; without them, a no-op client
    /// that prints events to stdout.
    pub fn connect(rank: u32, world_size: u32) -> anyhow::Result<Client> {
        let shared = Arc::new(Shared {
            step: AtomicU64::new(0),
            probe: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            silent: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
            blocked_in: Mutex::new(None),
            phase: Mutex::new(crate::protocol::Phase::Init),
        });
        let start = std::time::Instant::now();
        let Some(path) = std::env::var_os("DDPTOP_SOCKET") else {
            return Ok(Client {
                writer: None,
                shared,
                rank,
                start,
            });
        };
        let stream = UnixStream::connect(&path)?;
        let hello = WorkerMsg::Hello(Hello {
            token: std::env::var("DDPTOP_TOKEN").unwrap_or_default(),
            run_id: std::env::var("DDPTOP_RUN_ID").unwrap_or_default(),
            ..Hello::new(
                rank,
                world_size,
                hostname(),
                format!("sim:{rank}"),
                crate::protocol::CommBackend::Sim,
                crate::protocol::WorkerKind::Sim,
            )
        });
        let mut w = stream.try_clone()?;
        writeln!(w, "{}", hello.to_line())?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut first = String::new();
        reader.read_line(&mut first)?;
        match parse_control(first.trim_end()) {
            Ok(ControlMsg::Welcome { .. }) => {}
            Ok(ControlMsg::Error { code, msg }) => {
                anyhow::bail!("ddptop refused the connection ({code:?}): {msg}")
            }
            other => anyhow::bail!("unexpected answer to hello: {other:?}"),
        }
        let sh = shared.clone();
        std::thread::spawn(move || read_commands(reader, sh));
        let client = Client {
            writer: Some(Arc::new(Mutex::new(w))),
            shared,
            rank,
            start,
        };
        client.spawn_heartbeat();
        Ok(client)
    }

    pub fn t(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn send(&self, msg: &WorkerMsg) {
        self.send_raw(&msg.to_line());
    }

    /// Write one line; a write error means ddptop is gone: exit (dead-man switch).
    pub fn send_raw(&self, line: &str) {
        match &self.writer {
            None => println!("{line}"),
            Some(w) => {
                let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
                if writeln!(w, "{line}").is_err() {
                    std::process::exit(70);
                }
            }
        }
    }

    fn spawn_heartbeat(&self) {
        let Some(w) = self.writer.clone() else { return };
        let sh = self.shared.clone();
        let rank = self.rank;
        let start = self.start;
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_millis(500));
                if sh.silent.load(Ordering::Relaxed) {
                    continue;
                }
                let phase = *sh.phase.lock().unwrap_or_else(|e| e.into_inner());
                let hb = WorkerMsg::Heartbeat(crate::protocol::Heartbeat {
                    rank,
                    step: sh.step.load(Ordering::Relaxed),
                    t: start.elapsed().as_secs_f64(),
                    phase: Some(phase),
                    cpu_s: process_cpu_s(),
                    coll: sh
                        .blocked_in
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .as_ref()
                        .map(|(op, since)| crate::protocol::CollState {
                            pending: 1,
                            op: Some(op.clone()),
                            seq: None,
                            age_s: Some(since.elapsed().as_secs_f64()),
                            last_done: None,
                            bytes: None,
                        }),
                    rendezvous: None,
                });
                let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
                if writeln!(w, "{}", hb.to_line()).is_err() {
                    std::process::exit(70);
                }
            }
        });
    }
}

fn read_commands(mut reader: BufReader<UnixStream>, sh: Arc<Shared>) {
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) if sh.frozen.load(Ordering::Relaxed) => loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            },
            Ok(0) | Err(_) => {
                // ddptop closed our connection: it is gone or stopped the run.
                eprintln!("sim worker: ddptop closed the connection; exiting");
                std::process::exit(70);
            }
            Ok(_) if sh.frozen.load(Ordering::Relaxed) => {}
            Ok(_) => match parse_control(line.trim_end()) {
                Ok(ControlMsg::Command { cmd }) => match cmd {
                    Command::ProbeOn => sh.probe.store(true, Ordering::Relaxed),
                    Command::ProbeOff => sh.probe.store(false, Ordering::Relaxed),
                    Command::Stop => sh.stop.store(true, Ordering::Relaxed),
                    Command::DumpFr => eprintln!("sim worker: no flight recorder in simulation"),
                },
                Ok(other) => eprintln!("sim worker: ignoring {other:?}"),
                Err(e) => eprintln!("sim worker: bad control line: {e}"),
            },
        }
    }
}

pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

/// This process's CPU seconds (user + system, all threads), as the Python workers report it.
fn process_cpu_s() -> Option<f64> {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).ok()?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Some(secs(u.user_time()) + secs(u.system_time()))
}
