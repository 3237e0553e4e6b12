//! The authenticated socket server: private directory, one token per run, SO_PEERCRED check,
//! `hello` first, duplicate ranks refused. Connection tasks forward validated messages to the
//! engine and write commands back.

use super::lines::{LineCheck, Verdict};
use super::reader::{Handoff, Reader, Stream};
pub use super::registry::Registry;
pub use super::reply::Via;
use super::reply::{refuse, write_line};
use super::{Received, SupEvent};
use crate::protocol::{ControlMsg, ErrorCode, LineReader, ReadOutcome, WorkerMsg, parse_worker};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

/// Whether the `nth` refused connection of a run gets a row in the store: the first ten, then
/// the 16th, 32nd, 64th, … (a flood of bad hellos must not grow the database by a row each; the
/// run's `rejected` count still counts every one).
pub fn worth_a_row(nth: u64) -> bool {
    nth <= 10 || nth.is_power_of_two()
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
        if let Some(r) = self.registry.reader() {
            r.stop();
        }
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
        let on_close = move |run: &str, rank: u32| reg.drop_sender(run, rank);
        let reader = Reader::start(Box::new(on_close), events.clone())?;
        registry.set_reader(reader.clone());
        let task = tokio::spawn(accept_loop(listener, registry.clone(), events, reader));
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

async fn accept_loop(
    listener: UnixListener,
    reg: Registry,
    events: mpsc::Sender<SupEvent>,
    reader: Reader,
) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve(stream, reg.clone(), events.clone(), reader.clone()));
            }
            // EMFILE and friends: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

pub const MAX_HELLO_BYTES: usize = 8 << 10;

const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines a TLS connection's task hands the engine per event at most.
const MAX_BATCH: usize = 4;

async fn serve(stream: UnixStream, reg: Registry, events: mpsc::Sender<SupEvent>, reader: Reader) {
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
    let Some(a) = handshake(rd, wr, Via::Unix, &reg, &events).await else {
        return;
    };
    let (rd, rest) = a.lines.into_parts();
    let stream = rd
        .reunite(a.wr)
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|s| s.into_std());
    let stream = stream.map(|s| Stream::Unix(mio::net::UnixStream::from_std(s)));
    hand_off(
        stream,
        rest,
        (a.check, a.rx),
        Box::new(()),
        &reg,
        &events,
        &reader,
    )
    .await;
}

/// Give an admitted connection's socket to the paced reader (`reader`), with the bytes its
/// handshake read past the hello; a socket that cannot be moved ends the connection.
pub(crate) async fn hand_off(
    stream: std::io::Result<Stream>,
    rest: Vec<u8>,
    (check, control): (LineCheck, mpsc::UnboundedReceiver<ControlMsg>),
    guard: Box<dyn Send>,
    reg: &Registry,
    events: &mpsc::Sender<SupEvent>,
    reader: &Reader,
) {
    match stream {
        Ok(stream) => reader.hand_off(Handoff {
            stream,
            rest,
            check,
            control,
            guard,
        }),
        Err(_) => {
            reg.drop_sender(&check.run, check.rank);
            let (run, rank) = (check.run, check.rank);
            let _ = events.send(SupEvent::Disconnected { run, rank }).await;
        }
    }
}

/// A worker connection past its handshake: admitted to its run, welcomed, its hello given to
/// the engine.
pub(crate) struct Admitted<R, W> {
    pub lines: LineReader<BufReader<R>>,
    pub wr: W,
    pub check: LineCheck,
    pub rx: mpsc::UnboundedReceiver<ControlMsg>,
}

/// The first line decides what the connection is: a node agent's or the NCCL profiler
/// plugin's connection is served here to its end (`None`); a worker's hello is checked against
/// its run and welcomed (`Some`); anything else is refused (`None`).
pub(crate) async fn handshake<R, W>(
    rd: R,
    mut wr: W,
    via: Via,
    reg: &Registry,
    events: &mpsc::Sender<SupEvent>,
) -> Option<Admitted<R, W>>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let reject = |code: ErrorCode, msg: String| ControlMsg::Error { code, msg };
    let from = via.suffix();
    let mut lines = LineReader::with_max(BufReader::new(rd), MAX_HELLO_BYTES);
    let first = tokio::time::timeout(HELLO_TIMEOUT, lines.next_line()).await;
    let (reg, events) = (reg.clone(), events.clone());
    let hello = match first {
        Ok(Ok(ReadOutcome::Line(l))) if crate::protocol::agent::is_agent_hello(&l) => {
            super::agent_conn::serve_agent(&l, lines, wr, via, reg, events).await;
            return None;
        }
        Ok(Ok(ReadOutcome::Line(l))) => match parse_worker(&l) {
            Ok(WorkerMsg::Hello(h)) => h,
            Ok(WorkerMsg::NcclHello(h)) => {
                super::profiler_conn::serve(h, lines, wr, via, reg, events).await;
                return None;
            }
            Ok(other) => {
                let detail = format!("first line was `{}`, not hello{from}", other.type_name());
                let _ =
                    write_line(&mut wr, &reject(ErrorCode::ExpectedHello, detail.clone())).await;
                let _ = events.send(SupEvent::Rejected { run: None, detail }).await;
                return None;
            }
            Err(e) => {
                let detail = format!("first line is not a valid hello: {e}{from}");
                let _ =
                    write_line(&mut wr, &reject(ErrorCode::ExpectedHello, detail.clone())).await;
                let _ = events.send(SupEvent::Rejected { run: None, detail }).await;
                return None;
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
            return None;
        }
        _ => return None,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    if let Err((code, msg)) = reg.admit(&hello, tx, via) {
        let detail = format!("rank {}: {msg}{from}", hello.rank);
        refuse(&mut wr, &events, &hello.run_id, (code, msg), detail).await;
        return None;
    }
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
        return None;
    }
    let _ = events
        .send(SupEvent::Worker {
            run: run.clone(),
            msg: Box::new(WorkerMsg::Hello(hello)),
        })
        .await;
    Some(Admitted {
        lines,
        wr,
        check: LineCheck::new(run, rank),
        rx,
    })
}

/// A worker connection served by its own task, from handshake to end (TLS connections: their
/// TLS state lives in the task; every plain socket goes to the paced reader instead).
pub(crate) async fn serve_conn<R, W>(
    rd: R,
    wr: W,
    via: Via,
    reg: Registry,
    events: mpsc::Sender<SupEvent>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if let Some(a) = handshake(rd, wr, via, &reg, &events).await {
        stream_lines(a, reg, events).await;
    }
}

pub(crate) async fn stream_lines<R, W>(
    a: Admitted<R, W>,
    reg: Registry,
    events: mpsc::Sender<SupEvent>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let Admitted {
        mut lines,
        mut wr,
        mut check,
        mut rx,
    } = a;
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(msg) => { if write_line(&mut wr, &msg).await.is_err() { break; } }
                None => break,
            },
            line = lines.next_line() => {
                let mut batch: Vec<Received> = Vec::new();
                let mut next = Some(line);
                let mut close = false;
                let mut taken = 0;
                while let Some(line) = next.take() {
                    taken += 1;
                    match check.judge(line.unwrap_or(ReadOutcome::Eof)) {
                        Verdict::Keep(r) => batch.push(r),
                        Verdict::Drop(reply) => {
                            if let Some(m) = reply {
                                let _ = write_line(&mut wr, &m).await;
                            }
                            if check.bad_report_due()
                                && let Some(ev) = check.take_bad()
                            {
                                let _ = events.send(ev).await;
                            }
                        }
                        Verdict::Close(reply) => {
                            if let Some(m) = reply {
                                let _ = write_line(&mut wr, &m).await;
                            }
                            close = true;
                            break;
                        }
                    }
                    if taken < MAX_BATCH {
                        next = lines.next_buffered().map(Ok);
                    }
                }
                if !batch.is_empty() {
                    if let Some(ev) = check.take_bad() {
                        let _ = events.send(ev).await;
                    }
                    let run = check.run.clone();
                    if events.send(SupEvent::Lines { run, lines: batch }).await.is_err() { break; }
                }
                if close {
                    break;
                }
            }
        }
    }
    if let Some(ev) = check.take_bad() {
        let _ = events.send(ev).await;
    }
    reg.drop_sender(&check.run, check.rank);
    let _ = events
        .send(SupEvent::Disconnected {
            run: check.run,
            rank: check.rank,
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::registry::constant_time_eq;

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

    use crate::protocol::{CommBackend, Heartbeat, Hello, WorkerKind};
    use crate::supervisor::reader::READS_PER_ROUND;
    use std::io::{BufRead, Write};

    fn hello_line(rank: u32, token: &str) -> String {
        let h = WorkerMsg::Hello(Hello {
            token: token.to_string(),
            run_id: "r1".into(),
            ..Hello::new(
                rank,
                2,
                "h".into(),
                "cpu".into(),
                CommBackend::Gloo,
                WorkerKind::Train,
            )
        });
        h.to_line() + "\n"
    }

    fn beat_line(rank: u32, step: u64) -> String {
        let m = WorkerMsg::Heartbeat(Heartbeat {
            rank,
            step,
            t: step as f64,
            phase: None,
            cpu_s: None,
            coll: None,
            rendezvous: None,
        });
        m.to_line() + "\n"
    }

    /// A worker of run `r1` connected over the real socket and welcomed (its hello event
    /// taken), and the server's event channel.
    async fn admitted(
        rank: u32,
        first: &str,
    ) -> (
        SocketServer,
        mpsc::Receiver<SupEvent>,
        std::io::BufReader<std::os::unix::net::UnixStream>,
        tempfile::TempDir,
    ) {
        let parent = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        let server = SocketServer::start(parent.path(), tx).unwrap();
        server.registry.open_run("r1", "tok", 2);
        let mut s = std::os::unix::net::UnixStream::connect(&server.path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // The hello and whatever the worker writes right after it, in one write: what the
        // handshake reads past the hello must reach the engine too.
        s.write_all(format!("{}{first}", hello_line(rank, "tok")).as_bytes())
            .unwrap();
        let mut r = std::io::BufReader::new(s);
        let mut welcome = String::new();
        r.read_line(&mut welcome).unwrap();
        assert!(welcome.contains("welcome"), "{welcome}");
        match next(&mut rx).await {
            SupEvent::Worker { msg, .. } => assert_eq!(msg.type_name(), "hello"),
            other => panic!("{other:?}"),
        }
        (server, rx, r, parent)
    }

    async fn next(rx: &mut mpsc::Receiver<SupEvent>) -> SupEvent {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("no event within 5 s")
            .expect("channel closed")
    }

    /// The steps of every `Lines` event until `n` have come.
    async fn steps(rx: &mut mpsc::Receiver<SupEvent>, n: usize) -> Vec<u64> {
        let mut got = Vec::new();
        while got.len() < n {
            match next(rx).await {
                SupEvent::Lines { run, lines } => {
                    assert_eq!(run, "r1");
                    got.extend(lines.iter().map(|r| r.msg.step().unwrap()));
                }
                other => panic!("{other:?}"),
            }
        }
        got
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lines_sent_with_the_hello_and_after_it_arrive_in_order_then_the_hang_up() {
        let (_server, mut rx, r, _dir) = admitted(1, &beat_line(1, 1)).await;
        let mut s = r.into_inner();
        s.write_all(format!("{}{}", beat_line(1, 2), beat_line(1, 3)).as_bytes())
            .unwrap();
        // A last line without its newline is still a line when the worker hangs up.
        s.write_all(beat_line(1, 4).trim_end().as_bytes()).unwrap();
        assert_eq!(steps(&mut rx, 3).await, vec![1, 2, 3]);
        drop(s);
        assert_eq!(steps(&mut rx, 1).await, vec![4]);
        match next(&mut rx).await {
            SupEvent::Disconnected { run, rank } => assert_eq!((run.as_str(), rank), ("r1", 1)),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn more_than_a_rounds_reads_at_once_all_arrive_while_the_worker_stays_quiet() {
        let (_server, mut rx, r, _dir) = admitted(1, "").await;
        let mut s = r.into_inner();
        // ~3 MiB in one go, then nothing: what one round leaves unread has no event to come.
        let n = 40_000;
        let all: String = (1..=n).map(|i| beat_line(1, i)).collect();
        assert!(all.len() > 16 * READS_PER_ROUND * (64 << 10));
        let w = std::thread::spawn(move || {
            s.write_all(all.as_bytes()).unwrap();
            s
        });
        assert_eq!(
            steps(&mut rx, n as usize).await,
            (1..=n).collect::<Vec<_>>()
        );
        drop(w.join().unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commands_reach_the_worker_and_closing_the_run_hangs_up() {
        let (server, mut rx, mut r, _dir) = admitted(0, "").await;
        let stop = ControlMsg::Command {
            cmd: crate::protocol::Command::Stop,
        };
        assert_eq!(server.registry.command("r1", stop), 1);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.contains("\"stop\""), "{line}");
        server.registry.close_run("r1");
        line.clear();
        assert_eq!(r.read_line(&mut line).unwrap(), 0, "still open: {line}");
        match next(&mut rx).await {
            SupEvent::Disconnected { rank, .. } => assert_eq!(rank, 0),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_lines_are_answered_counted_and_the_good_ones_still_arrive() {
        let (_server, mut rx, mut r, _dir) = admitted(1, "").await;
        let bad = format!("not json\n{}", beat_line(0, 1));
        r.get_mut()
            .write_all(format!("{bad}{}", beat_line(1, 7)).as_bytes())
            .unwrap();
        for _ in 0..2 {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert!(line.contains("bad_message"), "{line}");
        }
        assert_eq!(steps(&mut rx, 1).await, vec![7]);
        match next(&mut rx).await {
            SupEvent::BadLines {
                count, last_error, ..
            } => {
                assert_eq!(count, 2);
                assert!(last_error.contains("rank 0 on rank 1"), "{last_error}");
            }
            other => panic!("{other:?}"),
        }
        // A line over the limit: told why, then closed.
        let long = vec![b'x'; crate::protocol::MAX_LINE_BYTES + 10];
        let _ = r.get_mut().write_all(&long);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.contains("line_too_long"), "{line}");
        loop {
            match next(&mut rx).await {
                SupEvent::BadLines { .. } => {}
                SupEvent::Disconnected { rank, .. } => break assert_eq!(rank, 1),
                other => panic!("{other:?}"),
            }
        }
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
