//! What NCCL's profiler plugin reported for a run (docs/profiler.md): per process rank and
//! communicator, the completed collectives (recent ones kept, all of them counted per function,
//! algorithm/protocol and size class), the ones in flight, and the plugin's loss counters.
//! Data only; `app::collectives` folds the messages in and derives the verdicts.

use crate::protocol::{NcclColl, NcclInflight};
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

/// Completed collectives kept per communicator (matching buckets, the view's recent list).
pub const RECENT_COLLS: usize = 512;
/// Step marks kept per communicator (collectives per step).
pub const STEP_MARKS: usize = 64;

/// Sums of one function's collectives.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CollTotals {
    pub count: u64,
    pub bytes: u64,
    pub kernel_us: f64,
}

/// Bus bandwidth over the listed collectives of one function and size class
/// (`bytes` rounded down to a power of two).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SizeClass {
    pub n: u64,
    pub bytes: u64,
    pub kernel_us: f64,
}

/// One communicator as one process sees it (a process driving several GPUs, as one JAX process,
/// holds one per device: the same `comm` id, different `comm_rank`s).
#[derive(Debug, Clone, Default)]
pub struct CommView {
    /// NCCL's communicator id (16 hex digits), the same on every rank of it.
    pub comm: String,
    pub comm_rank: u32,
    pub nranks: u32,
    pub nnodes: u32,
    pub last_done: BTreeMap<String, u64>,
    /// In flight as of `inflight_at` (their `age_s` is as of then).
    pub inflight: Vec<NcclInflight>,
    pub inflight_at: Option<Instant>,
    pub totals: BTreeMap<String, CollTotals>,
    /// (algorithm, protocol) → collectives.
    pub algos: BTreeMap<(String, String), u64>,
    /// (function, log2 of bytes) → kernel time sums, from the listed collectives.
    pub sizes: BTreeMap<(String, u32), SizeClass>,
    pub recent: VecDeque<NcclColl>,
    /// (rank's step counter, totals then) at each batch: collectives per training step.
    pub step_marks: VecDeque<(u64, BTreeMap<String, CollTotals>)>,
    /// The communicator was destroyed.
    pub finished: bool,
}

/// One process's plugin.
#[derive(Debug, Clone, Default)]
pub struct PluginRank {
    pub abi: String,
    pub plugin: String,
    pub pid: u32,
    /// Keyed by `<communicator id>/<rank in it>`.
    pub comms: BTreeMap<String, CommView>,
    pub dropped: u64,
    pub lost: u64,
    pub bad: u64,
    pub last_msg: Option<Instant>,
}

/// A run's NCCL profiler data; empty when the plugin was off or never loaded.
#[derive(Debug, Clone, Default)]
pub struct Collectives {
    pub ranks: BTreeMap<u32, PluginRank>,
}

impl Collectives {
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }
}
