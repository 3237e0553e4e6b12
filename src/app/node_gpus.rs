//! One other node's GPUs and ranks as its agent reports them: the row type `State::nodes` holds,
//! apart from `app::nodes` (which folds agent messages into the state), so that the state and
//! its folding do not import each other.

use crate::gpu::{GpuView, ProcStat};
use crate::protocol::agent::GpuSourceKind;
use std::collections::BTreeMap;
use std::time::Instant;

/// One other node's GPUs, from its agent.
#[derive(Debug, Clone)]
pub struct NodeGpus {
    pub node: String,
    pub run: String,
    pub source: GpuSourceKind,
    pub driver: Option<String>,
    /// The agent's caveat (no NVML there, and why).
    pub note: Option<String>,
    pub gpus: Vec<GpuView>,
    /// CPU % and RSS of the run's ranks on that node, by their pid there.
    pub procs: BTreeMap<u32, ProcStat>,
    pub last_sample: Option<Instant>,
    /// The agent is gone or silent: why. Its rows are greyed.
    pub lost: Option<String>,
    /// The last tick's failure, when the whole GPU read failed there.
    pub error: Option<String>,
}

impl NodeGpus {
    pub fn simulated(&self) -> bool {
        self.source == GpuSourceKind::Fake
    }
}
