//! Everything that touches processes and the socket: launching runs in process groups, the
//! authenticated socket server, stopping process trees, the hang watchdog, NCCL log parsing.

pub mod flight;
pub mod launch;
pub mod nccl_log;
pub mod procs;
pub mod socket;
pub mod watchdog;

use crate::protocol::WorkerMsg;

/// What the supervisor reports to the engine loop.
#[derive(Debug)]
pub enum SupEvent {
    /// A validated message from an authenticated connection (including its `hello`).
    Worker { run: String, msg: WorkerMsg },
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
    Exited {
        run: String,
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// A stop sequence finished: no process of the run is left.
    StopDone {
        run: String,
        escalated_to: &'static str,
        survivors: Vec<u32>,
    },
    /// A flight-recorder collection finished (hang evidence).
    Evidence { run: String, lines: Vec<String> },
}
