//! What NCCL's profiler plugin reported for a run (docs/profiler.md): per process rank and
//! communicator, the completed collectives (recent ones kept, all of them counted per function,
//! algorithm/protocol and size class), the ones in flight, and the plugin's loss counters.
//! Data only; `app::collectives` folds the messages in and derives the verdicts.

use super::coll_bounds::{KeyBudget, OverCap};
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

/// What one rank lost or set aside of its NCCL evidence: the plugin's counters (cumulative, as
/// its latest batch reported them) and ddptop's own. Live in [`PluginRank`], stored in
/// [`RankSummary`]; the collectives view lists them by [`LossCounters::named`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LossCounters {
    pub dropped: u64,
    pub lost: u64,
    /// Each counter past `lost` is absent from runs stored before it (`serde(default)`).
    #[serde(default)]
    pub bad: u64,
    /// Events of a type the plugin did not ask NCCL for (0 from a plugin that predates it).
    #[serde(default)]
    pub unrequested: u64,
    /// In-flight entries the plugin forgot to stay bounded.
    #[serde(default)]
    pub evicted: u64,
    /// In-flight entries ddptop set aside as stale: the communicator had already completed
    /// that function's collective of that sequence number or a later one.
    #[serde(default)]
    pub stale: u64,
    /// Records of a communicator this run cannot have (more ranks than the run's k, or a rank
    /// position outside it): refused, never kept.
    #[serde(default)]
    pub foreign: u64,
    /// Collectives counted in `funcs` but not listed (the messages' `more`, summed): not lost,
    /// only missing from the recent list and the size classes.
    #[serde(default)]
    pub unlisted: u64,
}

impl LossCounters {
    /// The counters past `dropped` and `lost`, with the words the collectives view uses.
    pub fn named(&self) -> [(&'static str, u64); 6] {
        [
            ("bad", self.bad),
            ("unrequested", self.unrequested),
            ("evicted", self.evicted),
            ("stale", self.stale),
            ("not this run's", self.foreign),
            ("unlisted", self.unlisted),
        ]
    }
}

/// One process's plugin.
#[derive(Debug, Clone, Default)]
pub struct PluginRank {
    pub abi: String,
    pub plugin: String,
    pub pid: u32,
    /// Keyed by `<communicator id>/<rank in it>`.
    pub comms: BTreeMap<String, CommView>,
    pub loss: LossCounters,
    /// What ddptop itself refused of this rank's messages (`coll_bounds`).
    pub over_cap: OverCap,
    pub last_msg: Option<Instant>,
}

/// A run's NCCL profiler data; empty when the plugin was off or never loaded.
#[derive(Debug, Clone, Default)]
pub struct Collectives {
    pub ranks: BTreeMap<u32, PluginRank>,
    /// The distinct names the run keeps, all ranks together.
    pub budget: KeyBudget,
}

impl Collectives {
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }

    /// Everything refused over the caps, all ranks together.
    pub fn over_cap(&self) -> OverCap {
        sum_over(self.ranks.values().map(|r| r.over_cap))
    }
}

pub fn sum_over(it: impl Iterator<Item = OverCap>) -> OverCap {
    it.fold(OverCap::default(), |a, b| OverCap {
        keys: a.keys + b.keys,
        comms: a.comms + b.comms,
        inflight: a.inflight + b.inflight,
    })
}

/// What is stored with a finished run of the plugin's collectives (docs/profiler.md "What is
/// stored"): per process rank a compact aggregate, and the collectives per step (JAX). The live
/// batches, the recent collectives and the in-flight lists are not stored.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CollSummary {
    pub ranks: BTreeMap<u32, RankSummary>,
    /// The first rank's collectives per training step, beside the HLO receipt.
    #[serde(default)]
    pub per_step: Vec<StepCount>,
    /// What the Timeline drew its buckets from at the end: `nccl_profiler` or `comm_hook`.
    #[serde(default)]
    pub timeline_source: Option<String>,
}

/// One process rank's collectives, all its communicators together.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RankSummary {
    /// Per function: count, bytes, summed GPU kernel time.
    pub funcs: BTreeMap<String, FuncSummary>,
    /// `ring/simple` → collectives (of those the plugin listed).
    pub algos: BTreeMap<String, u64>,
    /// Bus bandwidth per function and size class.
    pub busbw: Vec<BusbwClass>,
    /// Per function, the latest completed sequence number (the highest over communicators).
    pub last_seq: BTreeMap<String, u64>,
    /// Flattened: the stored JSON keeps one key per counter, as before the struct.
    #[serde(flatten)]
    pub loss: LossCounters,
    #[serde(default)]
    pub over_cap: OverCap,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FuncSummary {
    pub count: u64,
    pub bytes: u64,
    pub kernel_ms: f64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BusbwClass {
    pub func: String,
    /// Lower bound of the class, bytes (a power of two).
    pub from_bytes: u64,
    pub n: u64,
    pub busbw_gbs: Option<f64>,
}

/// One function's collectives per step, averaged over `steps`, with the receipt's figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepCount {
    pub func: String,
    pub count: f64,
    pub bytes: f64,
    pub steps: u64,
    /// The HLO receipt's (count, bytes) for this function, when it has one.
    pub receipt: Option<(u64, u64)>,
    /// The count per step rounds to the receipt's; `None` without a receipt.
    pub matches: Option<bool>,
}
