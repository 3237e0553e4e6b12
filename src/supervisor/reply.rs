//! How ddptop answers on a connection: one control line with a time limit (`write_line`), a
//! refusal that says the same to every stranger (`refuse`, `REFUSED`), and where the peer is
//! (`Via`). Shared by every connection kind, apart from `socket` for the same reason as
//! `registry`.

use super::SupEvent;
use crate::protocol::{ControlMsg, ErrorCode};
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// The one answer to an unknown run, a wrong token or a finished run.
pub(crate) const REFUSED: &str = "no such run, or the token does not match";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Unix,
    Tcp(std::net::SocketAddr),
}

impl Via {
    pub(crate) fn suffix(self) -> String {
        match self {
            Via::Unix => String::new(),
            Via::Tcp(a) => format!(" (tcp from {a})"),
        }
    }
}

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
