//! A run's record: its spec, status and everything its ranks reported. Plain data, filled by
//! `app::reduce` from worker messages and by the store from history.

use super::run_spec::RunSpec;
use super::spec::RunStatus;
use crate::protocol::{
    Backend, Bench, Buckets, Check, Collective, Comm, Hlo, Memory, Phase, Probe, Step,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

/// Lines of a run's output kept for the log pane.
pub const MAX_LOG_TAIL: usize = 200;
/// Bucket timelines kept per rank: the timeline's median window (`[timeline] steps`) reads at
/// most this many.
pub const MAX_BUCKET_HISTORY: usize = 500;
/// Bucket timelines kept over all ranks but rank 0 (whose full history the prediction reads):
/// a rank keeps `BUCKET_BUDGET / k`, at least the default timeline window and at most
/// `MAX_BUCKET_HISTORY`. At 1,024 ranks 500 timelines each were ~150 MB; now 64 each. A
/// `[timeline] steps` above that shows fewer steps for such a rank (the pane says how many).
pub const BUCKET_BUDGET: usize = 65_536;
/// The timeline's median window by default (`[timeline] steps`); the least any rank keeps.
pub const DEFAULT_TIMELINE_STEPS: usize = 50;

/// How many bucket timelines `rank` of a `k`-rank run keeps.
pub fn bucket_history_cap(rank: u32, k: u32) -> usize {
    if rank == 0 {
        return MAX_BUCKET_HISTORY;
    }
    (BUCKET_BUDGET / k.max(1) as usize).clamp(DEFAULT_TIMELINE_STEPS, MAX_BUCKET_HISTORY)
}

#[derive(Debug, Clone, Default)]
pub struct RankView {
    pub rank: u32,
    pub pid: Option<u32>,
    pub device: Option<String>,
    /// The node the rank runs on (its hello's `node`, else `host`).
    pub node: Option<String>,
    /// Connected over TCP from another node: its pid is not this machine's.
    pub remote: bool,
    pub connected: bool,
    pub said_bye: bool,
    pub last_seen: Option<Instant>,
    /// Highest step counter seen from this rank in any message.
    pub step: u64,
    /// Last time this rank's step counter advanced.
    pub last_progress: Option<Instant>,
    pub phase: Option<Phase>,
    pub last_step: Option<Step>,
    pub recent_step_ms: VecDeque<f64>,
    /// Time recent steps waited for their input batch (ms).
    pub recent_data_ms: VecDeque<f64>,
    /// (epoch, samples/s, warm-up)
    pub epochs: Vec<(u32, f64, bool)>,
    pub result_sps: Option<f64>,
    pub buckets: Option<Buckets>,
    /// The latest bucket timelines, oldest first (at most `MAX_BUCKET_HISTORY`).
    pub recent_buckets: VecDeque<Buckets>,
    pub memory: Option<Memory>,
    /// The fsdp experiment's `memory` reports, one per phase (`data`, `init`, `first_step`,
    /// `epoch<N>`), in order.
    pub memory_phases: Vec<Memory>,
    /// The last step's explicit collectives (FSDP's per-block all-gathers and reduce-scatters).
    pub comm: Option<Comm>,
    /// Those collectives added up over the timed (non-warm-up) steps.
    pub comm_totals: CommTotals,
    /// The rank's own report of a failure: an `error` log line or `bye` with reason `error`.
    pub error: Option<String>,
    /// Why the rank said `bye` (`done`: it finished its own loop), when it did.
    pub bye: Option<crate::protocol::ByeReason>,
    pub bad_lines: u64,
    /// Samples in recent steps, for the live throughput: (when, samples).
    pub recent_samples: VecDeque<(Instant, u64)>,
    /// The process's CPU seconds from recent heartbeats: (when, cpu_s), at most `CPU_SAMPLES`.
    pub cpu: VecDeque<(Instant, f64)>,
    /// The rank's collectives when last looked at, and when that report arrived.
    pub coll: Option<(Instant, crate::protocol::CollState)>,
    /// The phases of recent steps, oldest first (at most `PHASE_HISTORY`), for the straggler
    /// score: a step's comm wait arrives in the buckets message that follows it.
    pub recent_phases: VecDeque<PhaseSample>,
    /// (step, host time backward began) of recent timed steps, oldest first (at most
    /// `BWD_MARKS`): where each step's bucket all-reduces start among NCCL's collectives.
    pub recent_bwd: VecDeque<(u64, f64)>,
    /// When its hello arrived.
    pub hello_at: Option<Instant>,
    /// When it entered `init_process_group`, with the environment it called it with.
    pub init_entered: Option<(Instant, crate::protocol::Rendezvous)>,
    /// When its `init_process_group` returned (every rank had joined).
    pub init_joined: Option<Instant>,
    /// Its main thread's run-queue wait, sampled at the straggler assessments (local ranks on
    /// Linux only: `supervisor::schedstat`), oldest first, one sample per step seen: whether a
    /// slow rank is slow itself or waits for a CPU core.
    pub run_queue: VecDeque<RunQueueSample>,
}

/// A rank's cumulative run-queue wait (`/proc/<pid>/schedstat`'s 2nd field) when its step
/// counter stood at `step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunQueueSample {
    pub step: u64,
    pub wait_ns: u64,
}

/// This machine's load when its local ranks' run-queue waits were last sampled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostLoad {
    /// The 1-minute load average (`/proc/loadavg`), when it could be read.
    pub load1: Option<f64>,
    pub cores: usize,
}

/// Steps of backward starts kept per rank (the plugin's batches lag the steps by ≤ 1 s).
pub const BWD_MARKS: usize = 32;

/// Steps of phase figures kept per rank: more than any straggler window reads.
pub const PHASE_HISTORY: usize = 256;

/// One step of one rank, split by where its time went (ms).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PhaseSample {
    pub step: u64,
    pub data_ms: f64,
    pub fwd_ms: f64,
    /// Backward as the step message timed it: DDP's wait for the other ranks is inside it.
    pub bwd_ms: f64,
    pub opt_ms: f64,
    /// Backward time after the last bucket was ready (the buckets message's `exposed_ms`):
    /// the all-reduce tail plus the wait for slower ranks. `None`: no buckets for this step.
    pub comm_ms: Option<f64>,
    /// Host ms blocked in host syncs (`step.sync_ms`; attached scripts only).
    pub sync_ms: Option<f64>,
}

/// One phase of the step over a run's newest window, per rank (medians, ms), with the median
/// rank and the worst (TraceML's view; `app::straggler::phase_scores`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseScore {
    /// `data wait`, `compute`, `exposed comm` or `optimizer` (`straggler::SCORED_PHASES`).
    pub phase: String,
    /// Each rank's median over the window (ms).
    pub ranks: BTreeMap<u32, f64>,
    /// The median of the ranks' medians.
    pub median_ms: f64,
    pub worst_rank: u32,
    pub worst_ms: f64,
    /// worst ÷ median (1.0: the worst rank is at the others' pace).
    pub worst_vs_median: f64,
}

/// One GPU of a multi-node run's node as it was when the run ended (`app::nodes::gpu_rows`):
/// kept with the run (`node_gpus` event) for `run --json` and `show --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeGpuRow {
    pub node: String,
    pub gpu: u32,
    pub name: Option<String>,
    pub util_pct: Option<u32>,
    pub mem_used_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    pub power_w: Option<f64>,
    /// The run's ranks whose pid is on this GPU (this machine's pids for this machine's GPUs,
    /// the node's own for another node's).
    pub ranks: Vec<u32>,
    /// `local` (this machine, sampled here), `live` (its agent or exporter reporting) or
    /// `greyed` (lost: the figures are its last ones).
    pub agent: String,
    /// Why a greyed node is greyed.
    pub lost: Option<String>,
    /// Where the figures come from: `nvml`, `dcgm`, or `fake` (made up for tests, SIMULATED).
    pub source: String,
}

/// A rank named as a straggler: its score, the phase its time goes to, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Straggler {
    pub rank: u32,
    /// The fastest rank's median busy time over the window divided by this rank's (the latest).
    pub score: f64,
    /// The phase its extra time goes to: data wait, forward, backward, optimizer.
    pub phase: String,
    pub evidence: String,
    /// Seconds from the run's start when it was first named.
    pub since: f64,
    /// The step it was named at.
    pub step: u64,
    /// Still below the threshold at the latest assessment.
    pub active: bool,
}

impl Straggler {
    /// `at 4.2 s (step 41): EVIDENCE`, as `show` and the reports print it.
    pub fn when_and_why(&self) -> String {
        format!(
            "at {:.1} s (step {}): {}",
            self.since, self.step, self.evidence
        )
    }
}

/// Heartbeats whose CPU time a rank keeps: enough to judge busy vs idle over a few seconds.
pub const CPU_SAMPLES: usize = 8;

/// Memory reports kept per rank: a run has a handful of phases; this bounds a misbehaving worker.
pub const MAX_MEMORY_PHASES: usize = 64;

/// One kind of collective over the timed steps of a rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct OpTotal {
    pub count: u64,
    pub bytes: u64,
    pub ms: f64,
}

/// A rank's explicit collectives over its timed steps, by kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CommTotals {
    pub steps: u64,
    pub by_op: BTreeMap<String, OpTotal>,
}

impl CommTotals {
    pub fn add(&mut self, c: &Comm) {
        self.steps += 1;
        for op in &c.ops {
            let t = self.by_op.entry(op.op.as_str().to_string()).or_default();
            t.count += 1;
            t.bytes += op.bytes;
            t.ms += op.dur_ms;
        }
    }
    /// Per-step means of one kind: (calls, bytes, ms).
    pub fn per_step(&self, op: Collective) -> Option<(f64, f64, f64)> {
        let t = self.by_op.get(op.as_str())?;
        let n = self.steps.max(1) as f64;
        Some((t.count as f64 / n, t.bytes as f64 / n, t.ms / n))
    }
}

impl RankView {
    /// Cores this rank's process used since its newest heartbeat at least `min_s` before the
    /// last one (the shortest window that long: what it does now), or `None` without two.
    pub fn cpu_cores(&self, min_s: f64) -> Option<f64> {
        let (t1, c1) = *self.cpu.back()?;
        let (t0, c0) = self
            .cpu
            .iter()
            .rev()
            .find(|(t, _)| t1.saturating_duration_since(*t).as_secs_f64() >= min_s)?;
        let wall = t1.saturating_duration_since(*t0).as_secs_f64();
        Some(((c1 - c0) / wall).max(0.0))
    }
    /// The last `memory` report that names a phase (the fsdp experiment's), if any.
    pub fn last_memory_phase(&self) -> Option<&Memory> {
        self.memory_phases.last()
    }
    /// The fsdp worker sends a step before that step's `comm`: count the collectives of timed
    /// steps only, as throughput counts only timed epochs.
    pub fn record_comm(&mut self, c: &Comm) {
        let timed = self
            .last_step
            .as_ref()
            .is_some_and(|s| s.step == c.step && !s.warmup);
        if timed {
            self.comm_totals.add(c);
        }
        self.comm = Some(c.clone());
    }
    pub fn record_memory(&mut self, m: &Memory) {
        if m.phase.is_some() && self.memory_phases.len() < MAX_MEMORY_PHASES {
            self.memory_phases.push(m.clone());
        }
        self.memory = Some(m.clone());
    }
}

/// The figures of a finished (or running) run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    pub samples_per_s: f64,
    pub per_rank: Vec<f64>,
    pub rank_min: f64,
    pub rank_max: f64,
}

/// A run as the screens, reports and store see it: its identity and state at the top, the rest
/// in groups by what they hold (`clock`, `figures`, `launch`, `seen`, `evidence`, `straggler`).
#[derive(Debug, Clone)]
pub struct RunView {
    pub id: String,
    pub spec: RunSpec,
    pub status: RunStatus,
    /// Why it ended as it did (exit codes, hang verdict, who stopped it).
    pub reason: Option<String>,
    pub ranks: BTreeMap<u32, RankView>,
    /// From this session (false: loaded from the store).
    pub live: bool,
    pub clock: RunClock,
    pub figures: Figures,
    pub launch: Launch,
    pub seen: Seen,
    pub evidence: Evidence,
    pub straggler: StragglerState,
    /// What NCCL's profiler plugin reported (`app::collectives`); live only, not stored. Kept out
    /// of the groups: large live state (`figures.coll_summary` is what a stored run keeps of it).
    pub collectives: super::collectives::Collectives,
}

/// When the run started and ended, and its pace: the watchdog's progress gaps, the plan's
/// length and the first rank's step clock for the ETA.
#[derive(Debug, Clone, Default)]
pub struct RunClock {
    /// Unix seconds.
    pub started_unix: f64,
    pub ended_unix: Option<f64>,
    pub started: Option<Instant>,
    /// Last time any rank's step counter advanced.
    pub last_progress: Option<Instant>,
    /// Recent wall-clock gaps (s) between step advances, for the watchdog's threshold.
    pub progress_gaps: VecDeque<f64>,
    /// The run's length from the workers' `plan` message (`None`: not sent, or unknown).
    pub total_steps: Option<u64>,
    /// `(t, step)` of the first rank's recent messages: its pace, for the ETA.
    pub step_clock: VecDeque<(f64, u64)>,
    /// The first rank's step when the plan's length last changed (a live probe adds steps):
    /// the ETA is re-estimated from the pace after it.
    pub replanned_at: Option<u64>,
}

/// What the run measured: its aggregate and throughput, probes and benches, gradient and bucket
/// sizes, device memory, the worker's checks, the JAX receipt, the stored collectives' summary
/// and the nodes' GPUs.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub aggregate: Option<Aggregate>,
    /// (seconds since start, aggregate samples/s), sampled about once a second.
    pub throughput: Vec<(f64, f64)>,
    pub probe: Vec<Probe>,
    pub bench: Vec<Bench>,
    pub grad_bytes: Option<u64>,
    pub bucket_bytes: Vec<u64>,
    /// Latest memory report per device, for a process that drives several (JAX).
    pub device_memory: BTreeMap<u32, Memory>,
    /// Equality checks the worker made (JAX: the first-step loss at k=1 against k).
    pub checks: Vec<Check>,
    /// The JAX receipt: the collectives in the compiled step and the arrays' layouts.
    pub hlo: Option<Hlo>,
    /// The NCCL profiler plugin's collectives as stored with a finished run (a live run derives
    /// it from `collectives`: `app::coll_store::summary`).
    pub coll_summary: Option<crate::run::collectives::CollSummary>,
    /// A multi-node run's GPUs on every node when it ended (empty for one-node runs).
    pub node_gpus: Vec<NodeGpuRow>,
}

/// How the run was launched and what its processes made of it: the command, its environment and
/// versions, what NCCL read of its variables and the transport it chose, GPUs shared with others,
/// the sweep it belongs to and the processes' exit codes.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// The launch's program and arguments (this session's runs; stored runs: `command.txt`).
    pub command: Option<String>,
    /// Variables the launch set (`None`: removed), without the socket token.
    pub env: BTreeMap<String, Option<String>>,
    pub versions: BTreeMap<String, String>,
    /// Each NCCL variable the run set, and whether NCCL logged reading it (`true`: taken).
    pub nccl_read: BTreeMap<String, bool>,
    /// Set when the run was launched with `--shared-gpus` beside other processes: who they were.
    pub gpus_shared: Option<String>,
    /// NCCL's transport as its log reported it. Private: a simulated run has no NCCL, so
    /// `set_transport` drops one and `transport()` never shows one (ui_fixtures once did).
    transport: Option<String>,
    pub sweep: Option<String>,
    pub exit_codes: Vec<(String, i32)>,
}

/// What was observed of the job's own settings: the PyTorch and JAX settings in effect, how much
/// an attached script is measured and what timed its all-reduces, its observed settings and
/// torch.compile's counters.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// The PyTorch settings in effect at the end, as rank 0's `result` reported them: float32
    /// matmul precision and cudnn.benchmark (for an attached script, the script's own).
    pub torch: Option<(crate::protocol::MatmulPrecision, bool)>,
    /// The JAX worker's `jax_default_matmul_precision` as its `result` reported it.
    pub jax_matmul_precision: Option<String>,
    /// How much an attached script is measured (`hello.instrument`, then the bootstrap's
    /// `instrument: steps_only` / `instrumentation off` log lines); `None` for ddptop's workers.
    pub instrument: Option<crate::protocol::Instrument>,
    /// What timed DDP's bucket all-reduces (an attached rank's `plan.comm_timing`): ddptop's
    /// comm hook, or DDP's own all-reduce seen through NCCL's profiler plugin.
    pub comm_timing: Option<crate::protocol::CommTiming>,
    /// An attached script's settings as ddptop saw them (its spec's model, batch, epochs and
    /// samples are not the script's: ddptop sets none of them).
    pub observed: Observed,
    /// torch.compile's latest counters from a rank (`FindingKind::CompileRegression`) and the
    /// step its steady state began at: the compile-regression verdict reads them.
    pub compile_counters: Option<(u64, crate::protocol::Finding)>,
}

/// What explains how the run went: its log tail and rejected lines, a hang's report, failed
/// ranks' own output, diagnoses, caveats on its figures and the watchdog's note.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    pub log_tail: VecDeque<String>,
    pub rejected: u64,
    /// Evidence collected when a run hung (flight recorder summary, last steps).
    pub hang_report: Vec<String>,
    /// Ranks torchrun reported failed, each with its own last output lines (a rank killed by
    /// a signal says why only there).
    pub rank_tails: Vec<RankTail>,
    /// What went wrong, by name, with the fix (`app::diagnose`): at most one per kind and rank.
    pub diagnoses: Vec<Diagnosis>,
    /// What makes this run's figures less than a clean measurement (stored with the run).
    pub caveats: Vec<Caveat>,
    /// What the watchdog says of the live run now (warming up, a slow step it waits out, a
    /// reported stall of an attached job); `None` while steps flow.
    pub watch_note: Option<String>,
}

/// The straggler verdict's state (`app::straggler`): the ranks named, those pending and
/// recovering, when it was last assessed, the per-phase scores kept at the end, this host's
/// load and the ranks found starved of a CPU core.
#[derive(Debug, Clone, Default)]
pub struct StragglerState {
    /// Ranks named as stragglers during the run, in the order named (`app::straggler`).
    pub named: Vec<Straggler>,
    /// Per phase, the ranks' medians over the last window as they were when the run ended
    /// (`app::straggler::phase_scores`): what a stored run keeps of its phase history, which
    /// is not stored (reports, `show`). Empty while it runs and below 2 ranks.
    pub phase_scores: Vec<PhaseScore>,
    /// When the straggler score was last assessed (at most a few times a second).
    pub assessed: Option<Instant>,
    /// Ranks found slow but not yet named: the window's end step when first found slow
    /// (`app::straggler::update` names a rank once it stays slow for `CONFIRM` of a window).
    pub pending: BTreeMap<u32, u64>,
    /// Named ranks back at pace but not yet un-named: the window's end step when first found at
    /// pace (un-named once at pace for as long as naming takes, so a burst on the others does
    /// not end and restart the episode).
    pub recovering: BTreeMap<u32, u64>,
    /// This machine's load at the latest run-queue sample (`None`: no local rank sampled).
    pub host_load: Option<HostLoad>,
    /// Ranks found slow from waiting for a CPU core, not named: said once each as a caveat.
    pub cpu_starved: std::collections::BTreeSet<u32>,
}

/// Something that happened to a run, or was true of it, that its figures must carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caveat {
    /// The run's own throughput was disturbed during its timed epoch (a live probe, GPUs shared
    /// with another process, an injected fault): as a k=1 run it is no baseline.
    pub perturbed: bool,
    pub text: String,
}

impl Caveat {
    pub fn perturbed(text: impl Into<String>) -> Self {
        Caveat {
            perturbed: true,
            text: text.into(),
        }
    }
    pub fn note(text: impl Into<String>) -> Self {
        Caveat {
            perturbed: false,
            text: text.into(),
        }
    }
    /// The text up to its explanation (`cores oversubscribed`), for narrow places.
    pub fn short(&self) -> &str {
        self.text
            .split([':', '('])
            .next()
            .unwrap_or(&self.text)
            .trim()
    }
}

/// An attached script's settings as its ranks showed them; `None`: not seen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// Steps per size: samples of one training step on one rank (the DDP module's forward
    /// inputs), counted over every rank's steps.
    pub step_samples: BTreeMap<u64, u64>,
    /// The most optimizer steps any rank made.
    pub steps: u64,
    /// Distinct `DistributedSampler.set_epoch` values (`None`: the script never called it).
    pub epochs: Option<u32>,
    /// Whether a rank's process group was initialized (`None`: no rank said).
    pub process_group: Option<bool>,
    /// Whether a rank wrapped a model in DistributedDataParallel (`None`: no rank said).
    pub ddp_module: Option<bool>,
    /// DDP constructor arguments `ddptop tune` would set that the script passed itself (any
    /// rank; empty: none, or not said).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ddp_args: Vec<String>,
    /// torch.compile as the ranks measured it (the slowest rank's); `None`: no compile seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile: Option<Compiled>,
    /// What timed each rank's buckets as it last said (`plan.comm_timing`, `plan.comm_why`),
    /// switched live (issue 45); `app::comm_source` words it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub comm_sources: BTreeMap<u32, CommSourceSeen>,
}

/// One rank's source of its bucket timings (`app::comm_source`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommSourceSeen {
    pub timing: Option<crate::protocol::CommTiming>,
    /// Why the plugin is not the source, in the worker's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The rank's step when it said so.
    pub since_step: u64,
    /// How often the source changed after the first.
    pub switches: u32,
}

/// An attached script's torch.compile cost: kept out of its samples/s (docs/attach.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compiled {
    /// Time spent compiling, in ms.
    pub ms: u64,
    pub compiles: u64,
    pub recompiles: u64,
    /// Steps that contained a compile (left out of samples/s).
    pub steps: u64,
}

impl Compiled {
    /// One attached rank's `result`; `None` when it compiled nothing. `compile_s` was range-
    /// checked when the line was read (`protocol::validate::check_numbers`, stored lines too).
    pub fn of(r: &crate::protocol::AttachResult) -> Option<Compiled> {
        let s = r.compile_s?;
        Some(Compiled {
            ms: (s * 1000.0).round() as u64,
            compiles: r.compiles.unwrap_or(0),
            recompiles: r.recompiles.unwrap_or(0),
            steps: r.compile_steps.unwrap_or(0),
        })
    }

    /// The larger of two ranks' figures, field by field.
    pub fn max(self, o: Compiled) -> Compiled {
        Compiled {
            ms: self.ms.max(o.ms),
            compiles: self.compiles.max(o.compiles),
            recompiles: self.recompiles.max(o.recompiles),
            steps: self.steps.max(o.steps),
        }
    }

    /// `compile 41.2 s, 2 recompiles (3 steps left out of samples/s)`.
    pub fn describe(&self) -> String {
        let plural = |n: u64, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        format!(
            "compile {:.1} s, {} ({} left out of samples/s)",
            self.ms as f64 / 1000.0,
            plural(self.recompiles, "recompile"),
            plural(self.steps, "step")
        )
    }
}

impl Observed {
    /// The per-rank batch: the most common samples per step (the last, partial batch of an
    /// epoch is smaller); `None` when no step carried a batch size.
    pub fn per_rank_batch(&self) -> Option<u64> {
        self.step_samples
            .iter()
            .filter(|(n, _)| **n > 0)
            .max_by_key(|(n, count)| (**count, **n))
            .map(|(n, _)| *n)
    }
    /// Neither a process group nor a DDP module: each rank trained on its own.
    pub fn independent(&self) -> bool {
        self.process_group == Some(false) && self.ddp_module == Some(false)
    }
}

/// A run's settings as they may be claimed: ddptop's own for its experiments, what was observed
/// for an attached script (`None`: unknown, never a default).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub model: Option<String>,
    pub per_rank_batch: Option<u64>,
    pub global_batch: Option<u64>,
    pub epochs: Option<u32>,
    /// Samples per epoch.
    pub samples: Option<u64>,
    pub data_path: Option<String>,
    pub data_source: Option<String>,
    /// Optimizer steps (attached runs: the most any rank made).
    pub steps: Option<u64>,
}

impl Settings {
    /// `model tiny · batch 256/rank, 512 global · 2 epochs · 8192 samples`, with `?` for
    /// what is unknown.
    pub fn label(&self) -> String {
        let q = |v: Option<String>| v.unwrap_or_else(|| "?".into());
        let mut parts = vec![
            format!("model {}", q(self.model.clone())),
            format!(
                "batch {}/rank, {} global",
                q(self.per_rank_batch.map(|b| b.to_string())),
                q(self.global_batch.map(|b| b.to_string()))
            ),
            format!("{} epochs", q(self.epochs.map(|e| e.to_string()))),
            format!("{} samples", q(self.samples.map(|e| e.to_string()))),
        ];
        if let Some(s) = self.steps {
            parts.push(format!("{s} steps"));
        }
        parts.join(" · ")
    }
}

/// How many `(t, step)` points `RunView.step_clock` keeps.
pub const STEP_CLOCK: usize = 32;

impl RunView {
    /// The run's PyTorch settings as screens, JSON and reports say them: what ddptop applied
    /// and what the worker saw in effect; `None` where they mean nothing (no PyTorch model).
    /// Keep the PyTorch settings a `result` reports (rank 0's win; any rank's until then).
    /// The live reducer and the store's reload both record them here.
    pub fn note_torch_seen(&mut self, r: &crate::protocol::ResultMsg) {
        if let Some(t) = r.family.torch()
            && let (Some(m), Some(c)) = (t.matmul_precision, t.cudnn_benchmark)
            && (self.seen.torch.is_none() || r.rank == 0)
        {
            self.seen.torch = Some((m, c));
        }
        if let Some(p) = r.family.jax().and_then(|j| j.jax_matmul_precision.as_ref()) {
            self.seen.jax_matmul_precision = Some(p.clone());
        }
    }

    pub fn torch_label(&self) -> Option<String> {
        use super::spec::TorchSettings;
        if let Some(p) = &self.seen.jax_matmul_precision {
            return Some(format!(
                "jax_default_matmul_precision {p}{}",
                if p == "tensorfloat32" {
                    " (the book's matmul precision high)"
                } else {
                    ""
                }
            ));
        }
        // The tch worker applies what tch offers of the book's settings, always.
        let own = (self.spec.kind().own_book_settings())
            .filter(|_| self.spec.backend != crate::protocol::Backend::Sim);
        let asked = match self.spec.torch {
            _ if own.is_some() => own.map(str::to_string),
            TorchSettings::Off
                if !self
                    .spec
                    .experiment()
                    .book_settings_apply(self.spec.backend) =>
            {
                None
            }
            t => Some(t.label().to_string()),
        };
        let seen = self.seen.torch.map(|(m, c)| {
            format!(
                "seen: matmul precision {}, cudnn.benchmark {}",
                m.as_str(),
                if c { "on" } else { "off" }
            )
        });
        match (asked, seen) {
            (None, None) => None,
            (Some(a), None) => Some(a),
            (None, Some(s)) => Some(s),
            (Some(a), Some(s)) => Some(format!("{a}; {s}")),
        }
    }

    pub fn new(id: String, spec: RunSpec, now: Instant, unix: f64) -> Self {
        let ranks = (0..spec.processes())
            .map(|r| {
                (
                    r,
                    RankView {
                        rank: r,
                        ..Default::default()
                    },
                )
            })
            .collect();
        RunView {
            id,
            spec,
            status: RunStatus::Starting,
            reason: None,
            ranks,
            live: true,
            clock: RunClock {
                started_unix: unix,
                started: Some(now),
                ..Default::default()
            },
            figures: Figures::default(),
            launch: Launch::default(),
            seen: Seen::default(),
            evidence: Evidence::default(),
            straggler: StragglerState::default(),
            collectives: Default::default(),
        }
    }

    /// The settings this run may claim: an attached script's are what its ranks showed
    /// (unknown where nothing was seen), every other run's are its spec's.
    /// The batch its figures were measured at, as titles say it: the spec's, or for an attached
    /// run the per-rank batch it was seen to use (`batch ?/rank` before a step said it): one
    /// source with `settings()`, never the spec's default.
    pub fn batch_label(&self) -> String {
        if self.spec.kind().runs_user_script() {
            let b = self.settings().per_rank_batch;
            return format!("batch {}/rank", b.map_or("?".into(), |b| b.to_string()));
        }
        self.spec.batch_label()
    }

    pub fn settings(&self) -> Settings {
        let s = &self.spec;
        if s.kind().runs_user_script() {
            let o = &self.seen.observed;
            let batch = o.per_rank_batch();
            return Settings {
                model: None,
                per_rank_batch: batch,
                global_batch: batch.map(|b| b * u64::from(s.k)),
                epochs: o.epochs,
                samples: None,
                data_path: None,
                data_source: None,
                steps: Some(o.steps),
            };
        }
        Settings {
            model: Some(s.model.as_str().to_string()),
            per_rank_batch: Some(u64::from(s.per_rank_batch())),
            global_batch: Some(u64::from(s.global_batch())),
            epochs: Some(s.epochs),
            samples: Some(s.samples),
            data_path: Some(s.data_path.as_str().to_string()),
            data_source: Some(s.data_source.to_string()),
            steps: None,
        }
    }

    /// Why this run is not a clean measurement of itself (the first such caveat), if it is not:
    /// the reason a k=1 run is no baseline.
    pub fn perturbation(&self) -> Option<String> {
        self.evidence
            .caveats
            .iter()
            .find(|c| c.perturbed)
            .map(|c| c.text.clone())
            .or_else(|| {
                self.launch
                    .gpus_shared
                    .as_ref()
                    .map(|w| format!("GPUs shared ({w})"))
            })
            .or_else(|| {
                self.spec
                    .inject
                    .as_ref()
                    .map(|f| format!("fault injected ({f})"))
            })
    }

    /// Add a caveat once.
    pub fn add_caveat(&mut self, c: Caveat) {
        if !self.evidence.caveats.contains(&c) {
            self.evidence.caveats.push(c);
        }
    }

    pub fn is_simulated(&self) -> bool {
        self.spec.backend == Backend::Sim
    }

    /// The transport NCCL chose ("via P2P/CUMEM"), when its log said; never for a simulated run.
    pub fn transport(&self) -> Option<&str> {
        self.launch
            .transport
            .as_deref()
            .filter(|_| !self.is_simulated())
    }

    /// Record the transport read from NCCL's log (or the store). A simulated run keeps none:
    /// nothing there ran NCCL, so no code path can make one show.
    pub fn set_transport(&mut self, transport: Option<String>) {
        self.launch.transport = transport.filter(|_| !self.is_simulated());
    }

    pub fn bad_lines(&self) -> u64 {
        self.ranks.values().map(|r| r.bad_lines).sum()
    }
}

impl Aggregate {
    /// Aggregate samples/s of a run from its ranks' timed (non-warm-up) figures: per rank the
    /// `result` mean when present, else the mean of its timed epochs; the aggregate is their sum.
    pub fn of(run: &RunView) -> Option<Aggregate> {
        let mut per_rank = Vec::new();
        for r in run.ranks.values() {
            let sps = r.result_sps.or_else(|| {
                let timed: Vec<f64> = r
                    .epochs
                    .iter()
                    .filter(|(_, _, warm)| !warm)
                    .map(|(_, s, _)| *s)
                    .collect();
                (!timed.is_empty()).then(|| timed.iter().sum::<f64>() / timed.len() as f64)
            })?;
            per_rank.push(sps);
        }
        if per_rank.is_empty() {
            return None;
        }
        let rank_min = per_rank.iter().copied().fold(f64::INFINITY, f64::min);
        let rank_max = per_rank.iter().copied().fold(0.0, f64::max);
        Some(Aggregate {
            samples_per_s: per_rank.iter().sum(),
            per_rank,
            rank_min,
            rank_max,
        })
    }
}

/// Speedup and efficiency of a run against the k=1 run of its curve, and which run that was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scaling {
    pub speedup: f64,
    pub efficiency: f64,
    /// The id of the k=1 run divided by.
    pub baseline: String,
}

impl RunView {
    /// Append a line to the log tail, keeping the last `MAX_LOG_TAIL`.
    pub fn push_tail(&mut self, line: String) {
        self.evidence.log_tail.push_back(line);
        while self.evidence.log_tail.len() > MAX_LOG_TAIL {
            self.evidence.log_tail.pop_front();
        }
    }
}

/// A rank that torchrun reported as failed, with its own last output lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankTail {
    pub rank: u32,
    pub local_rank: u32,
    /// torchrun's exit code for it: negative for a signal (-6: SIGABRT).
    pub exitcode: i32,
    pub lines: Vec<String>,
}

impl RankTail {
    /// "exit -6 (SIGABRT)" / "exit 1".
    pub fn exit_words(&self) -> String {
        match signal_name(-self.exitcode) {
            Some(sig) if self.exitcode < 0 => format!("exit {} ({sig})", self.exitcode),
            _ => format!("exit {}", self.exitcode),
        }
    }

    /// The line that most likely says why: the last one naming an error, else the last one.
    /// Python's fault handler (ranks run with PYTHONFAULTHANDLER=1) ends a rank killed by a
    /// signal with "Fatal Python error: Aborted" and every thread's stack: the rank's own words
    /// before that dump say more, so they win when there are any.
    pub fn why(&self) -> Option<&str> {
        const WORDS: [&str; 7] = [
            "terminate called",
            "Error",
            "error",
            "what():",
            "Fatal Python error",
            "Segmentation fault",
            "Aborted",
        ];
        let named = |lines: &[String]| -> Option<usize> {
            lines
                .iter()
                .rposition(|l| WORDS.iter().any(|w| l.contains(w)))
        };
        let own = match self.fault_dump_at() {
            Some(at) => named(&self.lines[..at]).or(Some(at)),
            None => named(&self.lines),
        };
        own.and_then(|i| self.lines.get(i))
            .or(self.lines.last())
            .map(String::as_str)
    }

    /// Where the fault handler's dump begins (its "Fatal Python error:" line), if it wrote one.
    fn fault_dump_at(&self) -> Option<usize> {
        self.lines
            .iter()
            .rposition(|l| l.starts_with("Fatal Python error:"))
    }

    /// The innermost Python frame of the thread that died (the fault handler's "Current
    /// thread"), or of the main thread when the signal came from a thread Python does not know
    /// (a C++ thread of torch calling std::terminate): the main thread is listed last.
    pub fn died_at(&self) -> Option<&str> {
        let dump = &self.lines[self.fault_dump_at()?..];
        let header = dump
            .iter()
            .position(|l| l.starts_with("Current thread "))
            .or_else(|| dump.iter().rposition(|l| l.starts_with("Thread 0x")))?;
        dump[header + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| l.starts_with("File "))
    }

    /// `why`, with the frame it died in when the fault handler said one.
    pub fn why_with_place(&self) -> Option<String> {
        let why = self.why()?.trim();
        Some(match self.died_at() {
            Some(at) if at != why => format!("{why} (Python was at: {at})"),
            _ => why.to_string(),
        })
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        7 => "SIGBUS",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// A failure named, on which rank, since when, with the evidence and the one-line fix
/// (`app::diagnose`, docs/troubleshooting.md). `kind` is the stable tag of `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub kind: DiagnosisKind,
    /// The rank that caused it, where one did.
    pub rank: Option<u32>,
    /// The step it became visible at (the culprit's last optimizer step).
    pub step: Option<u64>,
    /// Unix time it was named.
    pub since_unix: f64,
    /// What went wrong, one line.
    pub text: String,
    /// The fix, one line.
    pub fix: String,
    /// What it was judged by.
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagnosisKind {
    /// One rank ran out of batches before the others: they wait (NCCL) or fail (gloo) in a
    /// collective it never joins.
    UnevenInputs,
    /// Parameters that got no gradient under a DDP built without `find_unused_parameters`.
    UnusedParameters,
    /// A rank that said hello and never entered `init_process_group` while its peers wait
    /// there for it.
    NeverJoined,
    /// Ranks that called different collectives, or the same one with different sizes, at the
    /// same point.
    CollectiveMismatch,
    /// A run at k ≥ 2 doing no more samples/s than one rank alone, because of what DDP adds
    /// (exposed communication, data wait, host time).
    SlowerThanOneGpu,
    /// A torch.compile'd run slower than the same script eager, or recompiling in a storm.
    CompileRegression,
}

crate::util::names!(DiagnosisKind {
    UnevenInputs => "uneven_inputs",
    UnusedParameters => "unused_parameters",
    NeverJoined => "never_joined",
    CollectiveMismatch => "collective_mismatch",
    SlowerThanOneGpu => "slower_than_one_gpu",
    CompileRegression => "compile_regression",
});

impl Diagnosis {
    /// `uneven inputs: rank 1 ran out … Fix: …`, the line of the main screen and the log.
    pub fn line(&self) -> String {
        format!(
            "{}: {} Fix: {}",
            self.kind.as_str().replace('_', " "),
            self.text,
            self.fix
        )
    }
}
