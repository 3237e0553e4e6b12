//! ddptop's end of a node agent's connection (`ddptop agent` on another node of a multi-node
//! run; docs/multinode.md). Reached from `socket::handshake` when the first line is an
//! `agent_hello`: the run's token checked as for a rank, one agent per node, then each
//! `node_sample` forwarded to the engine and `watch` commands written back. The connection
//! closing (the agent killed, its node gone, keepalive) is reported at once: the node's GPU
//! rows are greyed from that moment, and the run goes on.

use super::SupEvent;
use super::registry::Registry;
use super::reply::{Via, refuse, write_line};
use crate::protocol::agent::{AgentHello, AgentMsg, NodeSample, ToAgent, parse_agent};
use crate::protocol::{ControlMsg, ErrorCode, LineReader, ReadOutcome};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Node samples are small (a few hundred bytes a GPU): far below a rank's 1 MiB.
const MAX_SAMPLE_BYTES: usize = 256 << 10;
/// Bad lines answered before the connection is closed: an agent is ddptop's own program, so a
/// stream of bad lines means a version mismatch or a stranger with the token.
const MAX_BAD: u32 = 16;

/// What an agent connection tells the engine.
#[derive(Debug)]
pub enum AgentEvent {
    /// Admitted (the token is cleared).
    Hello {
        hello: AgentHello,
        peer: Option<std::net::SocketAddr>,
    },
    Sample {
        node: String,
        sample: Box<NodeSample>,
    },
    /// The connection closed; `why` when ddptop closed it for bad lines.
    Gone { node: String, why: Option<String> },
    /// The agent's channel process (ssh, srun, …) ended.
    Exited { node: String, exit: super::Exit },
    /// The node's GPUs could not be read at all (its DCGM exporter): said once.
    Failed { node: String, why: String },
}

pub(crate) async fn serve_agent<R, W>(
    first: &str,
    mut lines: LineReader<BufReader<R>>,
    mut wr: W,
    via: Via,
    reg: Registry,
    events: mpsc::Sender<SupEvent>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let from = via.suffix();
    let err = |code: ErrorCode, msg: String| ControlMsg::Error { code, msg };
    let mut hello = match parse_agent(first) {
        Ok(AgentMsg::AgentHello(h)) => h,
        Ok(_) | Err(_) => {
            let detail = format!("first line is not a valid agent_hello{from}");
            let _ = write_line(&mut wr, &err(ErrorCode::ExpectedHello, detail.clone())).await;
            let _ = events.send(SupEvent::Rejected { run: None, detail }).await;
            return;
        }
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    if let Err((code, msg)) = reg.admit_agent(&hello, tx) {
        let detail = format!("agent of node {}: {msg}{from}", hello.node);
        refuse(&mut wr, &events, &hello.run_id, (code, msg), detail).await;
        return;
    }
    hello.token.clear();
    let (run, node) = (hello.run_id.clone(), hello.node.clone());
    let welcome = ToAgent::AgentWelcome {
        run_id: run.clone(),
        node: node.clone(),
    };
    if write_agent(&mut wr, &welcome).await.is_err() {
        reg.drop_agent(&run, &node);
        return;
    }
    lines.set_max(MAX_SAMPLE_BYTES);
    let peer = match via {
        Via::Tcp(a) => Some(a),
        Via::Unix => None,
    };
    let send = |ev: AgentEvent| {
        events.send(SupEvent::Agent {
            run: run.clone(),
            ev,
        })
    };
    let _ = send(AgentEvent::Hello { hello, peer }).await;
    let mut bad = 0u32;
    let mut why = None;
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(msg) => if write_agent(&mut wr, &msg).await.is_err() { break },
                // The run was closed: hang up; the agent exits when its connection ends.
                None => break,
            },
            line = lines.next_line() => {
                let line = match line {
                    Ok(ReadOutcome::Line(l)) => l,
                    Ok(ReadOutcome::TooLong) => { why = Some("a line over 256 KiB".to_string()); break }
                    Ok(ReadOutcome::BadUtf8) => { why = Some("invalid UTF-8".to_string()); break }
                    Ok(ReadOutcome::Eof) | Err(_) => break,
                };
                match parse_agent(&line) {
                    Ok(AgentMsg::NodeSample(s)) => {
                        if send(AgentEvent::Sample { node: node.clone(), sample: Box::new(s) }).await.is_err() {
                            break;
                        }
                    }
                    other => {
                        let detail = match other {
                            Ok(m) => format!("unexpected `{}`", m.type_name()),
                            Err(e) => e.to_string(),
                        };
                        bad += 1;
                        let _ = write_line(&mut wr, &err(ErrorCode::BadMessage, detail.clone())).await;
                        if bad >= MAX_BAD {
                            why = Some(format!("{bad} bad lines, the last: {detail}"));
                            break;
                        }
                    }
                }
            }
        }
    }
    reg.drop_agent(&run, &node);
    let _ = wr.shutdown().await;
    let _ = send(AgentEvent::Gone { node, why }).await;
}

async fn write_agent<W: AsyncWrite + Unpin>(wr: &mut W, msg: &ToAgent) -> std::io::Result<()> {
    let mut line = msg.to_line();
    line.push('\n');
    tokio::time::timeout(
        std::time::Duration::from_secs(2),
        wr.write_all(line.as_bytes()),
    )
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "agent not reading"))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::agent::GpuSourceKind;
    use crate::supervisor::tcp::TcpServer;
    use std::time::Duration;
    use tokio::io::AsyncBufReadExt;

    fn hello(token: &str, node: &str) -> String {
        AgentMsg::AgentHello(AgentHello {
            token: token.into(),
            run_id: "r1".into(),
            node: node.into(),
            pid: 9,
            source: GpuSourceKind::Fake,
            gpus: 1,
            driver: None,
            note: None,
            t: 0.0,
        })
        .to_line()
            + "\n"
    }

    async fn agent(
        addr: std::net::SocketAddr,
        token: &str,
        node: &str,
    ) -> (String, tokio::io::BufReader<tokio::net::TcpStream>) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(hello(token, node).as_bytes()).await.unwrap();
        let mut r = tokio::io::BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        (line, r)
    }

    async fn next_agent_event(rx: &mut mpsc::Receiver<SupEvent>) -> AgentEvent {
        loop {
            match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
                Ok(Some(SupEvent::Agent { ev, .. })) => return ev,
                Ok(Some(_)) => continue,
                other => panic!("no agent event: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn agents_are_admitted_by_token_one_per_node_and_closed_with_the_run() {
        let reg = Registry::default();
        reg.open_run("r1", &"a".repeat(64), 2);
        reg.allow_agents("r1", &["b".to_string()]);
        let (tx, mut rx) = mpsc::channel(64);
        let server = TcpServer::start("127.0.0.1:0".parse().unwrap(), reg.clone(), tx).unwrap();
        let (wrong, _s) = agent(server.addr, &"b".repeat(64), "b").await;
        assert!(wrong.contains("bad_token"), "{wrong}");
        let (stranger, _s) = agent(server.addr, &"a".repeat(64), "zz").await;
        assert!(
            stranger.contains("not one of this run's other nodes"),
            "{stranger}"
        );
        let (ok, mut conn) = agent(server.addr, &"a".repeat(64), "b").await;
        assert!(ok.contains("agent_welcome"), "{ok}");
        let AgentEvent::Hello { hello, peer } = next_agent_event(&mut rx).await else {
            panic!("hello first");
        };
        assert!(hello.token.is_empty(), "the token is not passed on");
        assert!(peer.is_some());
        let (dup, _d) = agent(server.addr, &"a".repeat(64), "b").await;
        assert!(dup.contains("duplicate_rank"), "{dup}");
        // A sample goes to the engine; a bad line is answered and dropped.
        let s = AgentMsg::NodeSample(NodeSample {
            t: 1.0,
            ..Default::default()
        });
        conn.get_mut()
            .write_all(format!("{}\nnot json\n", s.to_line()).as_bytes())
            .await
            .unwrap();
        assert!(matches!(
            next_agent_event(&mut rx).await,
            AgentEvent::Sample { .. }
        ));
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        assert!(line.contains("bad_message"), "{line}");
        // `watch` reaches the agent; closing the run closes its connection.
        assert!(reg.agent_command("r1", "b", ToAgent::Watch { pids: vec![7] }));
        line.clear();
        conn.read_line(&mut line).await.unwrap();
        assert!(line.contains("\"watch\"") && line.contains("[7]"), "{line}");
        reg.close_run("r1");
        line.clear();
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read_line(&mut line))
            .await
            .expect("closed promptly")
            .unwrap();
        assert_eq!(n, 0, "EOF: the agent exits on it");
        assert!(matches!(
            next_agent_event(&mut rx).await,
            AgentEvent::Gone { .. }
        ));
    }
}
