//! The TCP listener for ranks on other nodes (multi-node runs, docs/multinode.md).
//!
//! Everything after `accept` is the Unix socket's per-connection code (`socket::handshake`, then
//! the paced reader, `supervisor::reader`; a TLS connection keeps its task, `socket::serve_conn`):
//! the same protocol v1 lines, 1 MiB line limit, `hello` within 10 s, the run's token compared in
//! constant time, duplicate ranks refused and bad lines counted. TCP has no SO_PEERCRED, so the
//! token is the only credential; the listener additionally caps concurrent connections, in all
//! and per peer address, so a flood of idle sockets cannot exhaust ddptop's file descriptors or
//! memory (a connection holds at most `socket::MAX_HELLO_BYTES` until its `hello` is admitted).
//! It binds the advertised address by default (`NodesOptions::listen_addr`) and the engine drops
//! it when no multi-node run is left. With TLS (`supervisor::tls`) the handshake comes first
//! and everything after it is the same.

use super::SupEvent;
use super::reader::Stream;
use super::socket::{Registry, Via, hand_off, handshake, serve_conn, stream_lines};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};

/// Connections open at once; more are accepted and closed at once (each rank needs one).
pub const MAX_TCP_CONNECTIONS: usize = 4096;
/// Connections open at once from one peer address: a node runs one rank per GPU (or CPU
/// process), far fewer than this; one stranger cannot take every slot.
pub const MAX_PER_PEER: usize = 128;

/// Open connections per peer address; a `PeerSlot` gives its place back on drop.
#[derive(Clone, Default)]
struct PeerCounts(Arc<Mutex<HashMap<IpAddr, usize>>>);

struct PeerSlot {
    counts: PeerCounts,
    ip: IpAddr,
}

impl PeerCounts {
    fn take(&self, ip: IpAddr) -> Option<PeerSlot> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= MAX_PER_PEER {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            counts: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut m = self.counts.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// A TLS handshake must finish within this (the same bound as a `hello`).
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// A listening TCP socket; the accept loop ends on drop.
pub struct TcpServer {
    /// The bound address (the real port when asked for port 0).
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TcpServer {
    /// Bind `bind` (port 0: any free port) and serve connections into the same registry and
    /// event channel as the Unix socket. Must be called inside the tokio runtime.
    pub fn start(
        bind: SocketAddr,
        registry: Registry,
        events: mpsc::Sender<SupEvent>,
    ) -> anyhow::Result<TcpServer> {
        Self::start_with(bind, registry, events, None)
    }

    /// `start`, with TLS when `tls` is given: every connection's handshake first (within
    /// `HELLO_TIMEOUT`), a failed one (a client that refused the certificate, a plain-TCP
    /// client) counted as a rejected connection.
    pub fn start_with(
        bind: SocketAddr,
        registry: Registry,
        events: mpsc::Sender<SupEvent>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> anyhow::Result<TcpServer> {
        let std_listener = std::net::TcpListener::bind(bind)
            .map_err(|e| anyhow::anyhow!("cannot listen on tcp {bind}: {e}"))?;
        std_listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(std_listener)?;
        let addr = listener.local_addr()?;
        let tls = tls.map(tokio_rustls::TlsAcceptor::from);
        let task = tokio::spawn(accept_loop(listener, registry, events, tls));
        Ok(TcpServer { addr, task })
    }
}

async fn accept_loop(
    listener: TcpListener,
    reg: Registry,
    events: mpsc::Sender<SupEvent>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let slots = Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS));
    let per_peer = PeerCounts::default();
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let Some(peer_slot) = per_peer.take(peer.ip()) else {
                    drop(stream);
                    continue;
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                // Keepalive: a node that vanishes (power, cable) ends its connections, so its
                // ranks show as lost instead of connected forever.
                let _ = nix::sys::socket::setsockopt(
                    &stream,
                    nix::sys::socket::sockopt::KeepAlive,
                    &true,
                );
                let (reg, events) = (reg.clone(), events.clone());
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        // The slots go with the socket: they are given back when it closes.
                        None => {
                            return serve_plain(
                                stream,
                                peer,
                                reg,
                                events,
                                Box::new((permit, peer_slot)),
                            )
                            .await;
                        }
                        Some(acceptor) => {
                            let shake =
                                tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(stream)).await;
                            match shake {
                                Ok(Ok(t)) => {
                                    let (rd, wr) = tokio::io::split(t);
                                    serve_conn(rd, wr, Via::Tcp(peer), reg, events).await;
                                }
                                Ok(Err(e)) => {
                                    let detail = format!("tls handshake from {peer} failed: {e}");
                                    let _ =
                                        events.send(SupEvent::Rejected { run: None, detail }).await;
                                }
                                Err(_) => {
                                    let detail = format!("tls handshake from {peer} timed out");
                                    let _ =
                                        events.send(SupEvent::Rejected { run: None, detail }).await;
                                }
                            }
                        }
                    }
                    drop((permit, peer_slot));
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A plain TCP worker connection: the handshake in this task, then the socket (and `slots`,
/// held until it closes) to the paced reader, as the Unix socket's connections.
async fn serve_plain(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    reg: Registry,
    events: mpsc::Sender<SupEvent>,
    slots: Box<dyn Send>,
) {
    let (rd, wr) = stream.into_split();
    let Some(a) = handshake(rd, wr, Via::Tcp(peer), &reg, &events).await else {
        return;
    };
    let Some(reader) = reg.reader().cloned() else {
        // No Unix socket server (and so no reader) in this process: serve it here.
        return stream_lines(a, reg, events).await;
    };
    let (rd, rest) = a.lines.into_parts();
    let stream = rd
        .reunite(a.wr)
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|s| s.into_std());
    let stream = stream.map(|s| Stream::Tcp(mio::net::TcpStream::from_std(s)));
    hand_off(stream, rest, (a.check, a.rx), slots, &reg, &events, &reader).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    fn hello(token: &str, rank: u32) -> String {
        format!(
            r#"{{"v":1,"type":"hello","token":"{token}","run_id":"r1","rank":{rank},"world_size":2,"local_rank":0,"pid":1,"host":"h","device":"cpu","backend":"gloo","worker":"train","torch":null,"nccl":null,"cuda":null,"t":0.0,"node":"b"}}"#
        ) + "\n"
    }

    async fn answer(token: &str, rank: u32, addr: SocketAddr) -> (String, tokio::net::TcpStream) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(hello(token, rank).as_bytes()).await.unwrap();
        let (rd, _) = s.split();
        let mut line = String::new();
        BufReader::new(rd).read_line(&mut line).await.unwrap();
        (line, s)
    }

    #[tokio::test]
    async fn tcp_ranks_use_the_same_admission_as_the_unix_socket() {
        let reg = Registry::default();
        reg.open_run("r1", &"a".repeat(64), 2);
        let (tx, mut rx) = mpsc::channel(64);
        let server = TcpServer::start("127.0.0.1:0".parse().unwrap(), reg.clone(), tx).unwrap();
        assert_ne!(server.addr.port(), 0);
        let (wrong, _s) = answer(&"b".repeat(64), 0, server.addr).await;
        assert!(wrong.contains("bad_token"), "{wrong}");
        // A made-up run id gets the very same answer: no one learns which runs exist.
        let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        let made_up = hello(&"b".repeat(64), 0).replace("\"r1\"", "\"r9\"");
        s.write_all(made_up.as_bytes()).await.unwrap();
        let mut unknown = String::new();
        BufReader::new(&mut s)
            .read_line(&mut unknown)
            .await
            .unwrap();
        assert_eq!(unknown, wrong);
        let (ok, _conn) = answer(&"a".repeat(64), 1, server.addr).await;
        assert!(ok.contains("welcome"), "{ok}");
        assert!(reg.remote_peer("r1", 1).is_some(), "a TCP rank is remote");
        assert!(reg.remote_peer("r1", 0).is_none());
        let mut saw_reject = false;
        let mut saw_hello = false;
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
            match ev {
                SupEvent::Rejected { detail, .. } => {
                    saw_reject = true;
                    assert!(detail.contains("tcp from 127.0.0.1"), "{detail}");
                }
                SupEvent::Worker { .. } => saw_hello = true,
                _ => {}
            }
            if saw_reject && saw_hello {
                break;
            }
        }
        assert!(saw_reject && saw_hello);
    }

    /// Strangers cannot make ddptop buffer much: a line before `hello` is cut at a few KiB, and
    /// one peer address gets `MAX_PER_PEER` connections at most.
    #[tokio::test]
    async fn unauthenticated_peers_are_held_to_small_buffers_and_few_connections() {
        let reg = Registry::default();
        reg.open_run("r1", &"a".repeat(64), 2);
        let (tx, _rx) = mpsc::channel(64);
        let server = TcpServer::start("127.0.0.1:0".parse().unwrap(), reg.clone(), tx).unwrap();
        let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        // 64 KiB without a newline: refused long before the old 1 MiB.
        let _ = s.write_all(&vec![b'x'; 64 << 10]).await;
        let mut line = String::new();
        let (rd, _wr) = s.split();
        tokio::time::timeout(
            Duration::from_secs(5),
            BufReader::new(rd).read_line(&mut line),
        )
        .await
        .expect("answered before 1 MiB arrived")
        .unwrap();
        assert!(line.contains("line_too_long"), "{line}");

        let mut held = Vec::new();
        for _ in 0..MAX_PER_PEER {
            held.push(tokio::net::TcpStream::connect(server.addr).await.unwrap());
        }
        // One more from the same address is closed at once, without an answer.
        let mut extra = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), extra.read(&mut buf))
            .await
            .expect("closed at once");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        // Slots come back when connections close: a rank can still connect.
        drop(held);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (ok, _c) = answer(&"a".repeat(64), 0, server.addr).await;
        assert!(ok.contains("welcome"), "{ok}");
    }
}
