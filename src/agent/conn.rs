//! The agent's connection to ddptop: TCP with keepalive, and TLS pinned to the fingerprint
//! ddptop passed when the address is `tls://`. A listener that presents another certificate is
//! refused (the handshake is aborted, which ddptop counts as a rejected connection).

use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};

/// How long the agent keeps trying to reach the listener (it is up before any node starts;
/// this covers a slow network coming up).
const CONNECT_FOR: Duration = Duration::from_secs(20);

pub trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

/// `tcp://HOST:PORT` or `tls://HOST:PORT` → (tls, "HOST:PORT").
pub fn parse_url(url: &str) -> anyhow::Result<(bool, &str)> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("tls://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("tcp://") {
        (false, r)
    } else {
        anyhow::bail!("--connect {url}: expected tcp://HOST:PORT or tls://HOST:PORT");
    };
    if rest
        .rsplit_once(':')
        .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
    {
        anyhow::bail!("--connect {url}: expected tcp://HOST:PORT or tls://HOST:PORT");
    }
    Ok((tls, rest))
}

pub async fn connect(url: &str, fingerprint: Option<&str>) -> anyhow::Result<Box<dyn Conn>> {
    let (tls, addr) = parse_url(url)?;
    let until = Instant::now() + CONNECT_FOR;
    let tcp = loop {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(s) => break s,
            Err(e) if Instant::now() >= until => {
                anyhow::bail!("cannot reach ddptop at {addr}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    };
    let _ = tcp.set_nodelay(true);
    // Keepalive: when ddptop's machine vanishes, the connection ends and so does the agent.
    let _ = nix::sys::socket::setsockopt(&tcp, nix::sys::socket::sockopt::KeepAlive, &true);
    if !tls {
        return Ok(Box::new(tcp));
    }
    let fp = fingerprint.ok_or_else(|| {
        anyhow::anyhow!("{url} is TLS but stdin had no certificate fingerprint after the token")
    })?;
    let cfg = crate::supervisor::tls::pinned_client(fp)?;
    let name = rustls::pki_types::ServerName::try_from(crate::supervisor::tls::CERT_NAME)
        .expect("a valid DNS name");
    let t = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_rustls::TlsConnector::from(cfg).connect(name, tcp),
    )
    .await
    .map_err(|_| anyhow::anyhow!("TLS handshake with {addr} timed out"))?
    .map_err(|e| {
        anyhow::anyhow!(
            "refusing {addr}: its TLS certificate is not the one ddptop named ({e}); is another \
             process listening there?"
        )
    })?;
    Ok(Box::new(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_the_transport() {
        assert_eq!(
            parse_url("tcp://10.0.0.1:5").unwrap(),
            (false, "10.0.0.1:5")
        );
        assert_eq!(parse_url("tls://[::1]:5").unwrap(), (true, "[::1]:5"));
        assert!(parse_url("http://a:1").is_err());
        assert!(parse_url("tcp://a").is_err());
    }
}
