//! Everything that touches processes and the socket: launching runs in process groups, the
//! authenticated socket server, stopping process trees, the hang watchdog, NCCL log parsing.

pub mod agent_conn;
pub mod dcgm;
pub mod flight;
pub mod gpu_guard;
pub mod handrolled;
pub mod launch;
pub mod lines;
pub mod nccl_log;
pub mod nccl_profiler;
pub mod nodes;
pub mod output;
pub mod procs;
pub mod profiler_conn;
pub mod reader;
pub mod registry;
pub mod reply;
pub mod schedstat;
pub mod socket;
pub mod tcp;
pub mod tls;
pub mod watchdog;

use crate::protocol::WorkerMsg;

/// How the launcher process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// The wait itself failed.
    Unknown,
}

impl Exit {
    pub fn of(status: std::io::Result<std::process::ExitStatus>) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(c), _) => Exit::Code(c),
                (None, Some(sig)) => Exit::Signal(sig),
                _ => Exit::Unknown,
            },
            Err(_) => Exit::Unknown,
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "launcher exited with code {c}"),
            Exit::Signal(s) => write!(f, "launcher killed by signal {s}"),
            Exit::Unknown => f.write_str("launcher ended"),
        }
    }
}

/// A validated worker message and the line it came as (without the newline).
#[derive(Debug)]
pub struct Received {
    pub msg: WorkerMsg,
    pub line: String,
}

/// What the supervisor reports to the engine loop.
#[derive(Debug)]
pub enum SupEvent {
    /// A validated message from an authenticated connection (including its `hello`).
    /// (Boxed: a worker message is far larger than the other events.)
    Worker { run: String, msg: Box<WorkerMsg> },
    /// Validated messages that authenticated connections of one run had ready at once (one
    /// connection's, or every rank's of a round of the paced reader), each rank's in order,
    /// each with its line as received (the store keeps the line instead of re-serializing it).
    Lines { run: String, lines: Vec<Received> },
    /// Bad lines dropped on an authenticated connection since the last report.
    BadLines {
        run: String,
        rank: u32,
        count: u64,
        last_error: String,
    },
    /// A connection refused during the handshake.
    Rejected { run: Option<String>, detail: String },
    /// An authenticated connection closed.
    Disconnected { run: String, rank: u32 },
    /// The launcher process exited.
    Exited { run: String, exit: Exit },
    /// The channel process (ssh, srun, …) of another node's agent exited (multi-node runs).
    NodeExited {
        run: String,
        node: usize,
        exit: Exit,
    },
    /// A stop sequence finished: no process of the run is left.
    StopDone {
        run: String,
        escalated_to: procs::Escalation,
        survivors: Vec<u32>,
    },
    /// A flight-recorder collection finished (hang evidence).
    Evidence { run: String, lines: Vec<String> },
    /// A watchdog or teardown deadline passed: judge the runs now.
    Deadline,
    /// A node agent (`ddptop agent`) was admitted, one sample came from it, or its connection
    /// closed (multi-node runs; `agent_conn`).
    Agent {
        run: String,
        ev: agent_conn::AgentEvent,
    },
}
