//! How the plugin reaches ddptop: the same environment and handshake as the Python workers
//! (`workers/ddptop_worker/client.py`, docs/protocol.md), with its own first line, `nccl_hello`,
//! since the rank's worker already holds the rank's connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Where and who, from the environment ddptop gives every process it launches.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `DDPTOP_SOCKET`: a Unix socket path, or `tcp://HOST:PORT`.
    pub socket: String,
    pub token: String,
    pub run_id: String,
    /// torchrun's `RANK` / `WORLD_SIZE` (0 / 1 when unset, as the workers default).
    pub rank: u32,
    pub world_size: u32,
    pub node: Option<String>,
    /// `DDPTOP_NCCL_BATCH_MS`: how often the sender writes (ms, at least 100).
    pub batch_ms: u64,
    /// `DDPTOP_NCCL_STALL_MS`: a write blocked this long is a stall (ms, at least 200).
    pub stall_ms: u64,
    /// `DDPTOP_NCCL_SLOTS` / `DDPTOP_NCCL_QUEUE`: collectives in flight at once, queued records.
    pub slots: usize,
    pub queue: usize,
}

impl Config {
    /// `Err` with the reason the plugin stays off (the one log line).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let socket = get("DDPTOP_SOCKET")
            .filter(|s| !s.is_empty())
            .ok_or("DDPTOP_SOCKET is not set (this process was not started by ddptop)")?;
        if socket.starts_with("tls://") {
            // The plugin links no TLS library; said in one line, and read by the attach bootstrap
            // (ddptop_nccl_profiler_why), which keeps ddptop's comm hook and says why on screen.
            return Err(format!(
                "DDPTOP_SOCKET={socket} is a TLS listener and the plugin speaks no TLS: this rank's NCCL collectives are not reported (no collectives view, no NCCL hang evidence; attach keeps ddptop's comm hook for the buckets)"
            ));
        }
        let token = get("DDPTOP_TOKEN")
            .filter(|t| !t.is_empty())
            .ok_or("DDPTOP_TOKEN is not set")?;
        let num = |k: &str, d: u64| {
            get(k)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(d)
        };
        Ok(Config {
            socket,
            token,
            run_id: get("DDPTOP_RUN_ID").unwrap_or_default(),
            rank: num("RANK", 0) as u32,
            world_size: num("WORLD_SIZE", 1).max(1) as u32,
            node: get("DDPTOP_NODE").filter(|n| !n.is_empty()),
            batch_ms: num("DDPTOP_NCCL_BATCH_MS", 200).max(100),
            stall_ms: num("DDPTOP_NCCL_STALL_MS", 5000).max(200),
            slots: num("DDPTOP_NCCL_SLOTS", 1024).clamp(16, 1 << 16) as usize,
            queue: num("DDPTOP_NCCL_QUEUE", 16384).clamp(64, 1 << 22) as usize,
        })
    }
}

/// A Unix or TCP stream.
pub enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    pub fn connect(addr: &str) -> std::io::Result<Conn> {
        match addr.strip_prefix("tcp://") {
            Some(hp) => {
                use std::net::ToSocketAddrs;
                let sa = hp.to_socket_addrs()?.next().ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address")
                })?;
                let s = TcpStream::connect_timeout(&sa, Duration::from_secs(5))?;
                s.set_nodelay(true)?;
                Ok(Conn::Tcp(s))
            }
            None => Ok(Conn::Unix(UnixStream::connect(addr)?)),
        }
    }

    pub fn set_timeouts(
        &self,
        read: Option<Duration>,
        write: Option<Duration>,
    ) -> std::io::Result<()> {
        match self {
            Conn::Unix(s) => {
                s.set_read_timeout(read)?;
                s.set_write_timeout(write)
            }
            Conn::Tcp(s) => {
                s.set_read_timeout(read)?;
                s.set_write_timeout(write)
            }
        }
    }

    pub fn try_clone(&self) -> std::io::Result<Conn> {
        Ok(match self {
            Conn::Unix(s) => Conn::Unix(s.try_clone()?),
            Conn::Tcp(s) => Conn::Tcp(s.try_clone()?),
        })
    }
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(b),
            Conn::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(b),
            Conn::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// JSON string contents (the values are ddptop's own ids and host names, but quote them right).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

/// The first line: `nccl_hello` (docs/protocol.md).
pub fn hello_line(cfg: &Config, pid: u32, host: &str, abi: &str, t: f64) -> String {
    let node = cfg
        .node
        .as_deref()
        .map_or("null".to_string(), |n| format!("\"{}\"", esc(n)));
    format!(
        r#"{{"v":1,"type":"nccl_hello","token":"{}","run_id":"{}","rank":{},"world_size":{},"pid":{pid},"host":"{}","plugin":"{}","abi":"{abi}","t":{t:.6},"node":{node}}}"#,
        esc(&cfg.token),
        esc(&cfg.run_id),
        cfg.rank,
        cfg.world_size,
        esc(host),
        env!("CARGO_PKG_VERSION"),
    )
}

/// Why a handshake failed: ddptop answered no (the token, or a run that is over), or could not be
/// reached or answered nothing (worth another try once the plugin has been connected).
#[derive(Debug, Clone, PartialEq)]
pub enum Handshake {
    Refused(String),
    Unreachable(String),
}

/// Connect, say hello, wait for `welcome`. `Err` holds the one line the plugin logs.
pub fn handshake(cfg: &Config, hello: &str) -> Result<Conn, Handshake> {
    use Handshake::Unreachable;
    let mut c = Conn::connect(&cfg.socket).map_err(|e| {
        Unreachable(format!(
            "cannot reach ddptop at DDPTOP_SOCKET={}: {e}",
            cfg.socket
        ))
    })?;
    c.set_timeouts(Some(Duration::from_secs(5)), Some(Duration::from_secs(5)))
        .map_err(|e| Unreachable(format!("socket setup failed: {e}")))?;
    c.write_all(format!("{hello}\n").as_bytes()).map_err(|e| {
        Unreachable(format!(
            "ddptop closed the connection during the handshake: {e}"
        ))
    })?;
    let mut line = String::new();
    let mut rd =
        BufReader::new(c.try_clone().map_err(|e| Unreachable(e.to_string()))?).take(64 << 10);
    rd.read_line(&mut line).map_err(|e| {
        Unreachable(format!(
            "no answer from ddptop to the profiler's hello: {e}"
        ))
    })?;
    if line.contains(r#""type":"welcome""#) {
        Ok(c)
    } else if line.is_empty() {
        // ddptop closes a refused connection after its error line, or without one: a refusal.
        Err(Handshake::Refused(
            "ddptop closed the connection without an answer".into(),
        ))
    } else {
        Err(Handshake::Refused(format!(
            "ddptop refused the profiler: {}",
            line.trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_of_a_ddptop_launch() {
        let env = |k: &str| {
            match k {
                "DDPTOP_SOCKET" => Some("tcp://10.0.0.1:4000"),
                "DDPTOP_TOKEN" => Some("ab"),
                "DDPTOP_RUN_ID" => Some("r1"),
                "RANK" => Some("3"),
                "WORLD_SIZE" => Some("4"),
                "DDPTOP_NCCL_BATCH_MS" => Some("20"),
                _ => None,
            }
            .map(str::to_string)
        };
        let c = Config::from_env(env).unwrap();
        assert_eq!(
            (c.rank, c.world_size, c.batch_ms),
            (3, 4, 100),
            "batches are at least 100 ms"
        );
        let h = hello_line(&c, 7, "gpu\"box", "v5", 1.5);
        let v: serde_json::Value = serde_json::from_str(&h).unwrap();
        assert_eq!(v["host"], "gpu\"box");
        assert_eq!(v["node"], serde_json::Value::Null);
        assert_eq!(c.stall_ms, 5000);
        let e = Config::from_env(|_| None).unwrap_err();
        assert!(e.contains("DDPTOP_SOCKET is not set"), "{e}");
        // A TLS listener: the plugin says what is missing instead of failing to connect.
        let tls = Config::from_env(|k| match k {
            "DDPTOP_SOCKET" => Some("tls://10.0.0.1:4000".into()),
            _ => env(k),
        })
        .unwrap_err();
        assert!(tls.contains("speaks no TLS"), "{tls}");
    }
}
