//! The authenticated socket server: private directory, one token per run, SO_PEERCRED check,
//! `hello` first, duplicate ranks refused. Connection tasks forward validated messages to the
//! engine and write commands back.

use super::{Received, SupEvent};
use crate::protocol::{ControlMsg, ErrorCode, LineReader, ReadOutcome, WorkerMsg, parse_worker};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

/// A run's admission record.
struct RunAuth {
    token: String,
    world_size: u32,
    open: bool,
    seen_ranks: HashSet<u32>,
    senders: HashMap<u32, mpsc::UnboundedSender<ControlMsg>>,
    /// Ranks that connected over TCP (another node): their pids are not this machine's.
    remote: HashMap<u32, std::net::SocketAddr>,
    /// NCCL profiler plugin connections (`supervisor::profiler_conn`): closed with the run.
    profilers: Vec<mpsc::UnboundedSender<ControlMsg>>,
    /// Node agents (`ddptop agent`) by node name: one each; closed with the run.
    agents: HashMap<String, mpsc::UnboundedSender<crate::protocol::agent::ToAgent>>,
    /// The nodes whose agents may connect (a multi-node run's other nodes); none by default.
    agent_nodes: Vec<String>,
}

#[derive(Clone, Default)]
pub struct Registry(Arc<Mutex<HashMap<String, RunAuth>>>);

impl Registry {
    pub fn open_run(&self, run: &str, token: &str, world_size: u32) {
        self.lock().insert(
            run.to_string(),
            RunAuth {
                token: token.to_string(),
                world_size,
                open: true,
                seen_ranks: HashSet::new(),
                senders: HashMap::new(),
                remote: HashMap::new(),
                profilers: Vec::new(),
                agents: HashMap::new(),
                agent_nodes: Vec::new(),
            },
        );
    }

    /// Refuse new connections and drop the command channels, which closes every connection of
    /// the run: the workers' dead-man switches fire.
    pub fn close_run(&self, run: &str) {
        if let Some(a) = self.lock().get_mut(run) {
            a.open = false;
            a.senders.clear();
            a.profilers.clear();
            a.agents.clear();
        }
    }

    /// Send a command to every connected rank of a run; returns how many got it.
    pub fn command(&self, run: &str, msg: ControlMsg) -> usize {
        let g = self.lock();
        let Some(a) = g.get(run) else { return 0 };
        a.senders
            .values()
            .filter(|s| s.send(msg.clone()).is_ok())
            .count()
    }

    /// The peer address of a rank that connected over TCP; `None` for a local (Unix) rank.
    pub fn remote_peer(&self, run: &str, rank: u32) -> Option<std::net::SocketAddr> {
        self.lock().get(run)?.remote.get(&rank).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunAuth>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admit a `hello`, or say why not.
    fn admit(
        &self,
        h: &crate::protocol::Hello,
        tx: mpsc::UnboundedSender<ControlMsg>,
        via: Via,
    ) -> Result<(), (ErrorCode, String)> {
        let mut g = self.lock();
        let a = open_run(&mut g, &h.run_id, &h.token)?;
        if h.world_size != a.world_size {
            return Err((
                ErrorCode::BadMessage,
                format!(
                    "world_size {} but run {} has k={}",
                    h.world_size, h.run_id, a.world_size
                ),
            ));
        }
        if !a.seen_ranks.insert(h.rank) {
            return Err((
                ErrorCode::DuplicateRank,
                format!("rank {} is already connected", h.rank),
            ));
        }
        a.senders.insert(h.rank, tx);
        if let Via::Tcp(peer) = via {
            a.remote.insert(h.rank, peer);
        }
        Ok(())
    }

    /// Admit an NCCL profiler plugin's `nccl_hello`: the run's token, an open run, its world
    /// size. Not a rank's connection: no duplicate check, no commands.
    pub(crate) fn admit_profiler(
        &self,
        h: &crate::protocol::NcclHello,
        tx: mpsc::UnboundedSender<ControlMsg>,
    ) -> Result<(), (ErrorCode, String)> {
        let mut g = self.lock();
        let a = open_run(&mut g, &h.run_id, &h.token)?;
        if h.world_size != a.world_size {
            return Err((
                ErrorCode::BadMessage,
                format!(
                    "world_size {} but run {} has k={}",
                    h.world_size, h.run_id, a.world_size
                ),
            ));
        }
        a.profilers.retain(|s| !s.is_closed());
        a.profilers.push(tx);
        Ok(())
    }

    /// Admit a node agent's `agent_hello`: the run's token, the run still open, one agent per
    /// node name. A refusal's reason is for ddptop's record only (the peer gets `REFUSED`).
    pub(crate) fn admit_agent(
        &self,
        h: &crate::protocol::agent::AgentHello,
        tx: mpsc::UnboundedSender<crate::protocol::agent::ToAgent>,
    ) -> Result<(), (ErrorCode, String)> {
        let mut g = self.lock();
        let a = open_run(&mut g, &h.run_id, &h.token)?;
        if !a.agent_nodes.contains(&h.node) {
            return Err((
                ErrorCode::BadMessage,
                format!("{} is not one of this run's other nodes", h.node),
            ));
        }
        if a.agents.get(&h.node).is_some_and(|s| !s.is_closed()) {
            return Err((
                ErrorCode::DuplicateRank,
                format!("node {} already has an agent", h.node),
            ));
        }
        a.agents.insert(h.node.clone(), tx);
        Ok(())
    }

    /// Let the agents of these nodes connect to `run` (its other nodes).
    pub fn allow_agents(&self, run: &str, nodes: &[String]) {
        if let Some(a) = self.lock().get_mut(run) {
            a.agent_nodes = nodes.to_vec();
        }
    }

    /// Send a command to a run's agent on `node`; whether it was sent.
    pub fn agent_command(
        &self,
        run: &str,
        node: &str,
        msg: crate::protocol::agent::ToAgent,
    ) -> bool {
        let g = self.lock();
        g.get(run)
            .and_then(|a| a.agents.get(node))
            .is_some_and(|s| s.send(msg).is_ok())
    }

    pub(crate) fn drop_agent(&self, run: &str, node: &str) {
        if let Some(a) = self.lock().get_mut(run) {
            a.agents.remove(node);
        }
    }

    fn drop_sender(&self, run: &str, rank: u32) {
        if let Some(a) = self.lock().get_mut(run) {
            a.senders.remove(&rank);
        }
    }
}

/// Whether the `nth` refused connection of a run gets a row in the store: the first ten, then
/// the 16th, 32nd, 64th, … (a flood of bad hellos must not grow the database by a row each; the
/// run's `rejected` count still counts every one).
pub fn worth_a_row(nth: u64) -> bool {
    nth <= 10 || nth.is_power_of_two()
}

/// The run a connection's first line names, when its token matches and the run is still open.
/// An unknown run, a wrong token and a finished run get the same answer (`REFUSED`), so a
/// stranger cannot tell which run ids exist; the reason is only recorded here.
fn open_run<'a>(
    runs: &'a mut HashMap<String, RunAuth>,
    run_id: &str,
    token: &str,
) -> Result<&'a mut RunAuth, (ErrorCode, String)> {
    let refused = |why: String| (ErrorCode::BadToken, why);
    let a = runs
        .get_mut(run_id)
        .ok_or_else(|| refused(format!("no run `{run_id}` here")))?;
    if !constant_time_eq(a.token.as_bytes(), token.as_bytes()) {
        return Err(refused(format!("token does not match run {run_id}")));
    }
    if !a.open {
        return Err(refused(format!("run {run_id} has finished")));
    }
    Ok(a)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh 256-bit token, hex.
pub fn new_token() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The listening socket and its private directory; both are removed on drop.
pub struct SocketServer {
    pub dir: PathBuf,
    pub path: PathBuf,
    pub registry: Registry,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SocketServer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
        // Written beside the socket by a multi-node run; the directory only goes when empty.
        let _ = std::fs::remove_file(self.dir.join(TCP_ADDR_FILE));
        let _ = std::fs::remove_dir(&self.dir);
    }
}

const SUN_PATH_MAX: usize = 107;

/// Where a multi-node run notes its TCP listener's address, beside the socket.
pub const TCP_ADDR_FILE: &str = "tcp.addr";

impl SocketServer {
    /// Bind in a fresh private dir under `parent` (0700, socket 0600), named
    /// `ddptop-<pid>.<random>`: the pid lets a later ddptop clean up after a dead one, the random
    /// part keeps another user from creating the directory first, and creating it must succeed
    /// (an existing directory of that name is refused, never reused).
    pub fn start(parent: &Path, events: mpsc::Sender<SupEvent>) -> anyhow::Result<SocketServer> {
        remove_stale_dirs(parent);
        let name = format!("ddptop-{}.{}", std::process::id(), &new_token()[..12]);
        let mut dir = parent.join(&name);
        if dir.join("s.sock").as_os_str().len() > SUN_PATH_MAX {
            dir = std::env::temp_dir().join(&name);
        }
        if dir.join("s.sock").as_os_str().len() > SUN_PATH_MAX {
            anyhow::bail!(
                "socket path {} is longer than 107 bytes; set XDG_RUNTIME_DIR or TMPDIR to a shorter directory",
                dir.display()
            );
        }
        create_private_dir(&dir)?;
        let path = dir.join("s.sock");
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let registry = Registry::default();
        let reg = registry.clone();
        let task = tokio::spawn(accept_loop(listener, reg, events));
        Ok(SocketServer {
            dir,
            path,
            registry,
            task,
        })
    }
}

/// Create `dir` at 0700; it must not exist yet, and must then be this user's real directory.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            anyhow::anyhow!("cannot create the socket directory {}: {e}", dir.display())
        })?;
    let meta = std::fs::symlink_metadata(dir)?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        anyhow::bail!(
            "the socket directory {} is not a private directory of uid {me}",
            dir.display()
        );
    }
    Ok(())
}

/// Socket directories of ddptops that died without cleaning up (SIGKILL): `ddptop-<pid>` or
/// `ddptop-<pid>.<random>` whose pid is gone. Only our own directories (same owner) are touched.
fn remove_stale_dirs(parent: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let uid = nix::unistd::geteuid().as_raw();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("ddptop-")
            .map(|p| p.split_once('.').map_or(p, |(pid, _)| pid))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if ours && pid != std::process::id() && !super::procs::alive(pid) {
            let _ = std::fs::remove_file(e.path().join("s.sock"));
            let _ = std::fs::remove_file(e.path().join(TCP_ADDR_FILE));
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

async fn accept_loop(listener: UnixListener, reg: Registry, events: mpsc::Sender<SupEvent>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve(stream, reg.clone(), events.clone()));
            }
            // EMFILE and friends: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The one answer to an unknown run, a wrong token or a finished run.
pub(crate) const REFUSED: &str = "no such run, or the token does not match";
/// Longest line before `hello` is admitted: a hello is a few hundred bytes, and until the
/// token is checked a stranger must not make ddptop hold the 1 MiB a rank's line may take.
pub const MAX_HELLO_BYTES: usize = 8 << 10;

/// How long a connection may sit before sending its `hello`.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines read per wake-up, and so handed to the engine in one event, at most. The engine's
/// channel is bounded in events (8192), so this bounds what can wait in it, in lines, when the
/// engine falls behind (at 16, 1,024 ranks on an overloaded machine held 70 MB more); a rank's
/// usual burst is its step, its buckets and sometimes a heartbeat.
const MAX_BATCH: usize = 4;
/// Error answers per connection; later bad lines are only counted.
pub(crate) const MAX_ERROR_REPLIES: u64 = 16;

async fn serve(stream: UnixStream, reg: Registry, events: mpsc::Sender<SupEvent>) {
    let (rd, mut wr) = stream.into_split();
    let peer_uid = wr.as_ref().peer_cred().map(|c| c.uid()).ok();
    if peer_uid != Some(nix::unistd::getuid().as_raw()) {
        let m = ControlMsg::Error {
            code: ErrorCode::PeerUid,
            msg: "peer runs as another user".into(),
        };
        let _ = write_line(&mut wr, &m).await;
        let _ = events
            .send(SupEvent::Rejected {
                run: None,
                detail: format!("connection from uid {peer_uid:?} refused"),
            })
            .await;
        return;
    }
    serve_conn(rd, wr, Via::Unix, reg, events).await;
}

/// How a connection reached ddptop: the local Unix socket, or TCP from another node (its peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Unix,
    Tcp(std::net::SocketAddr),
}

impl Via {
    /// Where it came from, for a log line's end: nothing for the local socket,
    /// ` (tcp from ADDR)` for another node.
    pub(crate) fn suffix(self) -> String {
        match self {
            Via::Unix => String::new(),
            Via::Tcp(a) => format!(" (tcp from {a})"),
        }
    }
}

/// One authenticated connection, whatever carries it (Unix socket or TCP): `hello` first within
/// `HELLO_TIMEOUT`, the token checked in constant time, then validated lines forwarded and
/// commands written back, with the same line limit and garbage counting on every transport.
pub(crate) async fn serve_conn<R, W>(
    rd: R,
    mut wr: W,
    via: Via,
    reg: Registry,
    events: mpsc::Sender<SupEvent>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let reject = |code: ErrorCode, msg: String| ControlMsg::Error { code, msg };
    let from = via.suffix();
    let mut lines = LineReader::with_max(BufReader::new(rd), MAX_HELLO_BYTES);
    let first = tokio::time::timeout(HELLO_TIMEOUT, lines.next_line()).await;
    let hello = match first {
        // A node agent (`ddptop agent`), not a rank: served by its own loop.
        Ok(Ok(ReadOutcome::Line(l))) if crate::protocol::agent::is_agent_hello(&l) => {
            return super::agent_conn::serve_agent(&l, lines, wr, via, reg, events).await;
        }
        Ok(Ok(ReadOutcome::Line(l))) => match parse_worker(&l) {
            Ok(WorkerMsg::Hello(h)) => h,
            Ok(WorkerMsg::NcclHello(h)) => {
                return super::profiler_conn::serve(h, lines, wr, via, reg, events).await;
            }
            Ok(other) => {
                let detail = format!("first line was `{}`, not hello{from}", other.type_name());
                let _ =
                    write_line(&mut wr, &reject(ErrorCode::ExpectedHello, detail.clone())).await;
                let _ = events.send(SupEvent::Rejected { run: None, detail }).await;
                return;
            }
            Err(e) => {
                let detail = format!("first line is not a valid hello: {e}{from}");
                let _ =
                    write_line(&mut wr, &reject(ErrorCode::ExpectedHello, detail.clone())).await;
                let _ = events.send(SupEvent::Rejected { run: None, detail }).await;
                return;
            }
        },
        Ok(Ok(ReadOutcome::TooLong)) => {
            let _ = write_line(
                &mut wr,
                &reject(ErrorCode::LineTooLong, "hello line over 8 KiB".into()),
            )
            .await;
            let _ = events
                .send(SupEvent::Rejected {
                    run: None,
                    detail: format!("first line over 8 KiB{from}"),
                })
                .await;
            return;
        }
        // Idle, EOF, bad UTF-8 or I/O error before hello: just close.
        _ => return,
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    if let Err((code, msg)) = reg.admit(&hello, tx, via) {
        let detail = format!("rank {}: {msg}{from}", hello.rank);
        refuse(&mut wr, &events, &hello.run_id, (code, msg), detail).await;
        return;
    }
    // Admitted: a rank's lines may be as long as the protocol allows.
    lines.set_max(crate::protocol::MAX_LINE_BYTES);
    let run = hello.run_id.clone();
    let rank = hello.rank;
    let welcome = ControlMsg::Welcome {
        run_id: run.clone(),
        rank,
        heartbeat_s: 1.0,
    };
    if write_line(&mut wr, &welcome).await.is_err() {
        reg.drop_sender(&run, rank);
        return;
    }
    let _ = events
        .send(SupEvent::Worker {
            run: run.clone(),
            msg: Box::new(WorkerMsg::Hello(hello)),
        })
        .await;

    let mut bad: u64 = 0;
    let mut pending_bad: u64 = 0;
    let mut last_error = String::new();
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(msg) => { if write_line(&mut wr, &msg).await.is_err() { break; } }
                // The run was closed: hang up, the worker's dead-man switch does the rest.
                None => break,
            },
            line = lines.next_line() => {
                // This line and the ones already buffered behind it go to the engine as one
                // event: one channel send and one engine wake-up per read, not per line.
                let mut batch: Vec<Received> = Vec::new();
                let mut next = Some(line);
                let mut close = false;
                // Bad lines count too: a flood of garbage returns to the select (and its
                // commands) as often as good lines do.
                let mut taken = 0;
                while let Some(line) = next.take() {
                    taken += 1;
                    let line = match line {
                        Ok(ReadOutcome::Line(l)) => l,
                        Ok(ReadOutcome::TooLong) => {
                            let _ = write_line(&mut wr, &reject(ErrorCode::LineTooLong, "line over 1 MiB; closing".into())).await;
                            pending_bad += 1;
                            last_error = "line over 1 MiB".into();
                            close = true;
                            break;
                        }
                        Ok(ReadOutcome::BadUtf8) => { pending_bad += 1; last_error = "invalid UTF-8".into(); close = true; break; }
                        Ok(ReadOutcome::Eof) | Err(_) => { close = true; break; }
                    };
                    match parse_worker(&line) {
                        Ok(msg) if msg.rank() == rank && !matches!(msg, WorkerMsg::Hello(_)) => {
                            batch.push(Received { msg, line });
                        }
                        other => {
                            let detail = match other {
                                Ok(WorkerMsg::Hello(_)) => "a second hello".to_string(),
                                Ok(m) => format!("rank {} on rank {rank}'s connection", m.rank()),
                                Err(e) => e.to_string(),
                            };
                            bad += 1;
                            pending_bad += 1;
                            if bad <= MAX_ERROR_REPLIES {
                                let _ = write_line(&mut wr, &reject(ErrorCode::BadMessage, detail.clone())).await;
                            }
                            last_error = detail;
                            if pending_bad >= 1024 {
                                flush_bad(&events, &run, rank, &mut pending_bad, &last_error).await;
                            }
                        }
                    }
                    if taken < MAX_BATCH {
                        // Only whole lines already read: no waiting, and no read that would
                        // find nothing (the next wake-up reads what comes).
                        next = lines.next_buffered().map(Ok);
                    }
                }
                if !batch.is_empty() {
                    if pending_bad > 0 {
                        flush_bad(&events, &run, rank, &mut pending_bad, &last_error).await;
                    }
                    if events.send(SupEvent::Lines { run: run.clone(), lines: batch }).await.is_err() { break; }
                }
                if close {
                    break;
                }
            }
        }
    }
    if pending_bad > 0 {
        flush_bad(&events, &run, rank, &mut pending_bad, &last_error).await;
    }
    reg.drop_sender(&run, rank);
    let _ = events.send(SupEvent::Disconnected { run, rank }).await;
}

async fn flush_bad(
    events: &mpsc::Sender<SupEvent>,
    run: &str,
    rank: u32,
    pending: &mut u64,
    last: &str,
) {
    let _ = events
        .send(SupEvent::BadLines {
            run: run.to_string(),
            rank,
            count: *pending,
            last_error: last.to_string(),
        })
        .await;
    *pending = 0;
}

/// Refuse an admission (a rank, an NCCL profiler or a node agent): the peer hears only
/// `REFUSED` for a token or run that does not match, so a guess learns nothing; ddptop's record
/// gets `detail`, the full reason.
pub(crate) async fn refuse<W: AsyncWrite + Unpin>(
    wr: &mut W,
    events: &mpsc::Sender<SupEvent>,
    run: &str,
    (code, msg): (ErrorCode, String),
    detail: String,
) {
    let msg = if code == ErrorCode::BadToken {
        REFUSED.to_string()
    } else {
        msg
    };
    let _ = write_line(wr, &ControlMsg::Error { code, msg }).await;
    let _ = events
        .send(SupEvent::Rejected {
            run: Some(run.to_string()),
            detail,
        })
        .await;
}

pub(crate) async fn write_line<W: AsyncWrite + Unpin>(
    wr: &mut W,
    msg: &ControlMsg,
) -> std::io::Result<()> {
    let mut line = msg.to_line();
    line.push('\n');
    // A peer that never reads must not stall this task forever.
    tokio::time::timeout(Duration::from_secs(2), wr.write_all(line.as_bytes()))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "peer not reading"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn private_dir_and_socket_modes_and_stale_dirs_removed() {
        let parent = tempfile::tempdir().unwrap();
        // A leftover from a dead ddptop (pid 2147483632 does not exist).
        let stale = parent.path().join("ddptop-2147483632");
        std::fs::create_dir(&stale).unwrap();
        std::fs::write(stale.join("s.sock"), b"").unwrap();
        let stale_multi = parent.path().join("ddptop-2147483631.0a1b");
        std::fs::create_dir(&stale_multi).unwrap();
        std::fs::write(stale_multi.join(TCP_ADDR_FILE), b"127.0.0.1:1").unwrap();
        let (tx, _rx) = mpsc::channel(8);
        let server = SocketServer::start(parent.path(), tx).unwrap();
        assert!(!stale.exists(), "stale socket dir left behind");
        assert!(
            !stale_multi.exists(),
            "stale multi-node socket dir left behind"
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&server.dir), 0o700);
        assert_eq!(mode(&server.path), 0o600);
        let (dir, path) = (server.dir.clone(), server.path.clone());
        // A multi-node run notes its TCP address there too.
        std::fs::write(dir.join(TCP_ADDR_FILE), b"127.0.0.1:1").unwrap();
        drop(server);
        assert!(
            !path.exists() && !dir.exists(),
            "socket not removed on exit"
        );
    }

    #[tokio::test]
    async fn the_socket_dir_name_is_unpredictable_and_never_reused() {
        let parent = tempfile::tempdir().unwrap();
        // Another user's guess at the old name `ddptop-<pid>`, made ahead of time.
        let guess = parent.path().join(format!("ddptop-{}", std::process::id()));
        std::fs::create_dir(&guess).unwrap();
        let (tx, _rx) = mpsc::channel(8);
        let a = SocketServer::start(parent.path(), tx.clone()).unwrap();
        let b = SocketServer::start(parent.path(), tx).unwrap();
        assert_ne!(a.dir, guess, "the planted directory was used");
        assert_ne!(a.dir, b.dir);
        assert!(std::fs::read_dir(&guess).unwrap().next().is_none());
        // Creating over an existing directory is refused, not reused.
        let e = create_private_dir(&guess).unwrap_err().to_string();
        assert!(e.contains("cannot create the socket directory"), "{e}");
    }

    #[test]
    fn a_flood_of_refusals_adds_few_rows() {
        let rows = (1..=300).filter(|n| worth_a_row(*n)).count();
        assert_eq!(rows, 15, "1..=10, 16, 32, 64, 128, 256");
        assert!(worth_a_row(1) && worth_a_row(10) && !worth_a_row(11) && worth_a_row(1024));
    }

    #[test]
    fn tokens_are_fresh_and_compared_exactly() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(constant_time_eq(a.as_bytes(), a.as_bytes()));
        assert!(!constant_time_eq(a.as_bytes(), b.as_bytes()));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
