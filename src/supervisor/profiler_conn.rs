//! A connection from NCCL's profiler plugin (plugins/nccl-profiler): admitted on its
//! `nccl_hello` with the run's token like a rank's `hello`, but beside the rank's own connection
//! rather than as it. Only `nccl` lines of the hello's rank are forwarded; ddptop never sends it
//! commands, and its closing says nothing about the rank (the worker's connection does).

use super::SupEvent;
use super::lines::MAX_ERROR_REPLIES;
use super::registry::Registry;
use super::reply::{Via, refuse, write_line};
use crate::protocol::{
    ControlMsg, ErrorCode, LineReader, NcclHello, ReadOutcome, WorkerMsg, parse_worker,
};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;

pub(crate) async fn serve<R, W>(
    hello: NcclHello,
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
    let (tx, mut rx) = mpsc::unbounded_channel();
    if let Err((code, msg)) = reg.admit_profiler(&hello, tx) {
        let detail = format!("NCCL profiler of rank {}: {msg}{from}", hello.rank);
        refuse(&mut wr, &events, &hello.run_id, (code, msg), detail).await;
        return;
    }
    lines.set_max(crate::protocol::MAX_LINE_BYTES);
    let (run, rank) = (hello.run_id.clone(), hello.rank);
    let welcome = ControlMsg::Welcome {
        run_id: run.clone(),
        rank,
        heartbeat_s: 1.0,
    };
    if write_line(&mut wr, &welcome).await.is_err() {
        return;
    }
    let _ = events
        .send(SupEvent::Worker {
            run: run.clone(),
            msg: Box::new(WorkerMsg::NcclHello(hello)),
        })
        .await;
    let mut bad: u64 = 0;
    let mut last_error = String::new();
    loop {
        tokio::select! {
            out = rx.recv() => if out.is_none() { break },
            line = lines.next_line() => {
                let line = match line {
                    Ok(ReadOutcome::Line(l)) => l,
                    Ok(ReadOutcome::TooLong) => { bad += 1; last_error = "line over 1 MiB".into(); break; }
                    Ok(ReadOutcome::BadUtf8) => { bad += 1; last_error = "invalid UTF-8".into(); break; }
                    Ok(ReadOutcome::Eof) | Err(_) => break,
                };
                match parse_worker(&line) {
                    Ok(msg @ WorkerMsg::Nccl(_)) if msg.rank() == rank => {
                        if events.send(SupEvent::Worker { run: run.clone(), msg: Box::new(msg) }).await.is_err() { break; }
                    }
                    other => {
                        let detail = match other {
                            Ok(m) => format!("`{}` for rank {} on rank {rank}'s NCCL profiler connection", m.type_name(), m.rank()),
                            Err(e) => e.to_string(),
                        };
                        bad += 1;
                        if bad <= MAX_ERROR_REPLIES {
                            let _ = write_line(&mut wr, &ControlMsg::Error { code: ErrorCode::BadMessage, msg: detail.clone() }).await;
                        }
                        last_error = detail;
                    }
                }
            }
        }
    }
    if bad > 0 {
        let _ = events
            .send(SupEvent::BadLines {
                run,
                rank,
                count: bad,
                last_error,
            })
            .await;
    }
}
