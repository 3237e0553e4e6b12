//! Serde types for every protocol v1 message, both directions.

use super::result::ResultMsg;
use super::settings::Strategy;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which collective backend a worker runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Sim,
    Gloo,
    Nccl,
}

crate::util::names!(Backend {
    Sim => "sim",
    Gloo => "gloo",
    Nccl => "nccl",
});

/// The collective library a worker's ranks talk through (`hello.backend`). A superset of the
/// launch [`Backend`]: JAX on CPU runs XLA's in-process collectives, which ddptop never launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum CommBackend {
    Nccl,
    Gloo,
    Sim,
    Xla,
    /// No collective library: the hand-rolled worker averages gradients with tensor copies
    /// (memcpy on CPU, CUDA peer copies on GPU).
    Copy,
}

impl From<Backend> for CommBackend {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Nccl => CommBackend::Nccl,
            Backend::Gloo => CommBackend::Gloo,
            Backend::Sim => CommBackend::Sim,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerKind {
    Train,
    Probe,
    Allreduce,
    Sim,
    Handrolled,
    Fsdp,
    Jax,
    /// A user's own training script with ddptop attached to it.
    Attach,
}

/// How much an attached worker instruments (`hello.instrument`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Instrument {
    Full,
    StepsOnly,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Init,
    /// Inside the DDP/FSDP constructor: the process group is up, parameters are being broadcast.
    DdpInit,
    Train,
    Probe,
    Bench,
    /// Compiling before its first steps (XLA, `torch.compile`): slow, busy, not hung.
    Compile,
    /// The first steps under `cudnn.benchmark`: every convolution's algorithms are tried.
    Autotune,
    Done,
}

/// How a step's numbers were obtained; `Model` means simulated by the cost model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    CudaEvents,
    Host,
    /// Read back from the torch profiler's trace.
    Profiler,
    Model,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeMode {
    Synced,
    NoSync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ByeReason {
    Done,
    Stopped,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub token: String,
    pub run_id: String,
    pub rank: u32,
    pub world_size: u32,
    pub local_rank: u32,
    pub pid: u32,
    pub host: String,
    pub device: String,
    pub backend: CommBackend,
    pub worker: WorkerKind,
    pub torch: Option<String>,
    pub nccl: Option<String>,
    pub cuda: Option<String>,
    pub t: f64,
    /// Devices this one process drives (a single-process JAX worker over k devices says k).
    #[serde(default = "one")]
    pub devices: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instrument: Option<Instrument>,
    /// Host name of the node for multi-node runs; absent means `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The NCCL library the rank mapped and the profiler interfaces it can look up
    /// (`ncclProfiler_vN` names in it; issue 45): whether ddptop's plugin can load there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_lib: Option<NcclLib>,
}

/// `hello.nccl_lib` (workers/ddptop_worker/nccl_lib.py).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclLib {
    pub path: String,
    /// N of every `ncclProfiler_vN` the library names, newest first.
    pub profiler: Vec<u32>,
}

fn one() -> u32 {
    1
}

impl Hello {
    /// A rank's hello with the facts every worker states, the rest unset (no library versions,
    /// one device, this process's pid, `t` 0, no instrument or node field): the
    /// one constructor of the Rust-side workers (the simulator, its intruder, the load
    /// generator). Fill `token`/`run_id` from the launch and set any other field after.
    pub fn new(
        rank: u32,
        world_size: u32,
        host: String,
        device: String,
        backend: CommBackend,
        worker: WorkerKind,
    ) -> Hello {
        Hello {
            token: String::new(),
            run_id: String::new(),
            rank,
            world_size,
            local_rank: rank,
            pid: std::process::id(),
            host,
            device,
            backend,
            worker,
            torch: None,
            nccl: None,
            cuda: None,
            t: 0.0,
            devices: 1,
            instrument: None,
            node: None,
            nccl_lib: None,
        }
    }

    /// The node this rank runs on (`node`, else `host`).
    pub fn node_name(&self) -> &str {
        self.node.as_deref().unwrap_or(&self.host)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The process's CPU seconds so far (all threads): whether a rank whose steps stopped is
    /// still computing or idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<f64>,
    /// The rank's collectives as torch's flight recorder sees them, sent only while its step
    /// counter is not moving (absent: not looked at, or no recorder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coll: Option<CollState>,
    /// Sent twice per rank, around `init_process_group`: as it enters (with the bootstrap
    /// environment it calls it with) and once it returns. A rank that said hello and never
    /// entered, while its peers wait inside, is the one that never joins
    /// (`app::diagnose::never_joined`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendezvous: Option<Rendezvous>,
}

/// A rank at `init_process_group`: what it calls it with, as its environment says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rendezvous {
    pub state: RendezvousState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_addr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gloo_socket_ifname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_socket_ifname: Option<String>,
    /// The host's network interfaces with their IPv4 address, e.g. `eth0 10.0.0.5` (at most
    /// `Rendezvous::MAX_INTERFACES`, each at most `Rendezvous::MAX_CHARS`).
    #[serde(default)]
    pub interfaces: Vec<String>,
}

impl Rendezvous {
    pub const MAX_INTERFACES: usize = 32;
    pub const MAX_CHARS: usize = 200;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RendezvousState {
    /// Calling `init_process_group`: from here it waits for every rank.
    Entered,
    /// `init_process_group` returned: every rank joined.
    Joined,
}

/// A rank's collectives when it was last looked at: how many are started and not completed,
/// and the oldest of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollState {
    pub pending: u32,
    /// The oldest pending collective, e.g. `nccl:all_reduce`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Its sequence number in the process group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// How long it has been pending (s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_s: Option<f64>,
    /// The last completed collective's sequence number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_done: Option<u64>,
    /// The oldest pending collective's input size in bytes (ranks that wait in the same
    /// collective number with different sizes called different collectives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub rank: u32,
    pub step: u64,
    pub epoch: u32,
    pub t: f64,
    pub warmup: bool,
    pub sync: bool,
    pub samples: u64,
    pub fwd_ms: f64,
    pub bwd_ms: f64,
    pub opt_ms: f64,
    pub data_ms: f64,
    pub step_ms: f64,
    pub timing: Timing,
    /// This rank's loss on the step, when the worker reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// True when forward, backward and optimizer run as one compiled program (JAX `jit`): only
    /// `step_ms` is measured and the three parts are sent as 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused: Option<bool>,
    /// Steps since the previous step message, this one included (sampled timing: `--time-every
    /// N` or `auto`); `samples` then counts every sample in them, so throughput from step
    /// messages stays right.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u32>,
    /// Host time (the clock of `t`, CLOCK_MONOTONIC) at which the DDP module's forward returned
    /// and backward began on the host: the origin of the step's bucket timeline when its
    /// all-reduces come from NCCL's profiler plugin (docs/profiler.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_bwd: Option<f64>,
    /// Host ms the rank's training thread spent blocked in host syncs during the step
    /// (`.item()`, `.tolist()`, `.cpu()`, `float()` of a tensor, `torch.cuda.synchronize()`):
    /// attached scripts only (workers/ddptop_worker/attach_sync.py). Overlaps the step's other
    /// phases, which CUDA events time on the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_ms: Option<f64>,
    /// The rank's exposed communication in this step (ms): the wait from its last gradient
    /// bucket being ready to the backward's end, as in a `buckets` message. Sent on timed steps
    /// whose buckets were marked at their ready point only, without the full timeline (whose
    /// completion marks cost ~1 ms of GPU time a step, docs/stragglers.md); the straggler
    /// score's comm wait then comes from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exposed_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketSpan {
    pub index: u32,
    pub bytes: u64,
    pub ready_ms: f64,
    pub start_ms: f64,
    pub done_ms: f64,
    /// The NCCL kernel's own duration, when it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_ms: Option<f64>,
}

impl BucketSpan {
    pub fn comm_ms(&self) -> f64 {
        (self.done_ms - self.start_ms).max(0.0)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Buckets {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub rebuilt: bool,
    pub bwd_compute_ms: f64,
    pub exposed_ms: f64,
    pub buckets: Vec<BucketSpan>,
    /// True when `start_ms` is the max(ready, previous done) inference, false when measured;
    /// absent from older workers, which always inferred it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_inferred: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Epoch {
    pub rank: u32,
    pub step: u64,
    pub epoch: u32,
    pub t: f64,
    pub warmup: bool,
    pub samples: u64,
    pub seconds: f64,
    pub samples_per_s: f64,
    pub data_wait_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub block: u32,
    pub mode: ProbeMode,
    pub steps: u32,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// True for the live probe inside a training run (training DDP, buffers broadcast, timing
    /// hook on), false for the standalone probe; absent from older workers (standalone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bench {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub op: String,
    pub bytes: u64,
    pub dtype: String,
    pub iters: u32,
    pub time_us: f64,
    pub algbw_gbs: f64,
    pub busbw_gbs: f64,
}

/// The allocator counters are required keys but null on CPU, where there is no allocator
/// counter (`Option::deserialize` keeps a missing key an error, unlike a plain `Option`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub allocated_bytes: Option<u64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub reserved_bytes: Option<u64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub peak_bytes: Option<u64>,
    /// Local device index, for a process that drives several devices and reports each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Exact bytes of parameters / gradients / optimizer state held by this rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optim_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_bytes: Option<u64>,
}

/// How a JAX program shards its batch and parameters (`hlo.sharding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sharding {
    Data,
    Fsdp,
}

/// One collective kind counted in compiled HLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HloOpStats {
    pub count: u64,
    pub largest_elems: u64,
    pub total_elems: u64,
    pub total_bytes: u64,
}

/// `hlo.ops`: other keys are ignored like any unknown field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HloOps {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_reduce: Option<HloOpStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_gather: Option<HloOpStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce_scatter: Option<HloOpStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hlo {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub k: u32,
    pub all_reduce_ops: u32,
    pub all_reduce_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<Sharding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<HloOps>,
    /// XLA passes that combined collectives (e.g. `all-reduce-combiner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combined_by: Option<Vec<String>>,
    /// Array name → text of `jax.debug.visualize_array_sharding`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
}

/// What the worker knows about the run's length, sent once after the data is built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    /// Null when unknown (attach mode); the key itself is required.
    #[serde(deserialize_with = "Option::deserialize")]
    pub total_steps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_per_epoch: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// What times DDP's bucket all-reduces on this rank (attach mode), sent again whenever it
    /// changes (issue 45: the hook until the plugin reports, and again when it stops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_timing: Option<CommTiming>,
    /// Why the plugin is not the source (`plugin not reporting: …`), when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_why: Option<String>,
    /// DDP's bucket sizes in all-reduce order, once rebuilt: sent when no comm hook reports them
    /// (the NCCL profiler plugin times the buckets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_bytes: Option<Vec<u64>>,
}

/// What times DDP's bucket all-reduces (`plan.comm_timing`; docs/profiler.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommTiming {
    /// ddptop's comm hook in place of DDP's all-reduce, CUDA events around each bucket.
    CommHook,
    /// DDP's own all-reduce, untouched; NCCL's profiler plugin reports each collective.
    NcclProfiler,
    /// Nothing of ddptop's: the script's own comm hook runs and the plugin is not reporting.
    Untimed,
}

impl CommTiming {
    pub fn as_str(self) -> &'static str {
        match self {
            CommTiming::CommHook => "comm_hook",
            CommTiming::NcclProfiler => "nccl_profiler",
            CommTiming::Untimed => "untimed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "comm_hook" => Some(CommTiming::CommHook),
            "nccl_profiler" => Some(CommTiming::NcclProfiler),
            "untimed" => Some(CommTiming::Untimed),
            _ => None,
        }
    }
}

/// An explicit collective (`comm.ops[].op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    AllGather,
    ReduceScatter,
    AllReduce,
    Broadcast,
}

impl Collective {
    pub fn as_str(self) -> &'static str {
        match self {
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllReduce => "all_reduce",
            Collective::Broadcast => "broadcast",
        }
    }
}

/// The part of a step a collective belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Pass {
    Fwd,
    Bwd,
    Opt,
}

/// One collective of a step; times are ms from the step's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommOp {
    pub op: Collective,
    pub name: String,
    pub pass: Pass,
    pub bytes: u64,
    pub start_ms: f64,
    pub dur_ms: f64,
}

impl CommOp {
    pub fn end_ms(&self) -> f64 {
        self.start_ms + self.dur_ms
    }
}

/// The explicit collectives of one step (FSDP and other non-bucketed communication).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comm {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub timing: Timing,
    pub ops: Vec<CommOp>,
}

/// An equality check between two runs or settings (e.g. JAX loss at k=1 vs k=2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub name: String,
    pub a: f64,
    pub b: f64,
    pub diff: f64,
    pub tol: f64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Log {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub level: LogLevel,
    pub msg: String,
    /// What the rank found wrong with the script's training, machine-readable beside `msg`
    /// (docs/troubleshooting.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding: Option<Finding>,
}

/// A rank's own finding about the training it runs (the engine adds the verdicts that need
/// every rank, such as uneven inputs, itself: `app::diagnose`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: FindingKind,
    /// The parameters concerned, by name (at most `Finding::MAX_NAMES`, each at most
    /// `Finding::MAX_NAME_CHARS`).
    #[serde(default)]
    pub names: Vec<String>,
    /// How many there were in all (`names` may be cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// `compile_regression`: dynamo's recompiles so far (graph-break reasons are `names`, their
    /// total `count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompiles: Option<u64>,
    /// `compile_regression`: dynamo's compiles so far, first ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiles: Option<u64>,
}

impl Finding {
    pub const MAX_NAMES: usize = 64;
    pub const MAX_NAME_CHARS: usize = 200;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Parameters that took part in no loss at the first optimizer step of a DDP module built
    /// without `find_unused_parameters`: DDP fails at the next forward.
    UnusedParameters,
    /// torch.compile's counters as its steady state begins (after steps that compiled): graph
    /// breaks by reason and recompiles. A verdict when they are a storm, or the run is slower
    /// than the same script eager (`app::diagnose::compile`).
    CompileRegression,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bye {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub reason: ByeReason,
}

/// A message from a worker to ddptop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkerMsg {
    Hello(Hello),
    Heartbeat(Heartbeat),
    Step(Step),
    Buckets(Buckets),
    Epoch(Epoch),
    Probe(Probe),
    Bench(Bench),
    Memory(Memory),
    Hlo(Hlo),
    Log(Log),
    Result(ResultMsg),
    Bye(Bye),
    Plan(Plan),
    Comm(Comm),
    Check(Check),
    /// The NCCL profiler plugin's handshake and batches (`protocol::nccl`).
    NcclHello(super::nccl::NcclHello),
    Nccl(super::nccl::NcclBatch),
}

impl WorkerMsg {
    pub fn type_name(&self) -> &'static str {
        match self {
            WorkerMsg::Hello(_) => "hello",
            WorkerMsg::Heartbeat(_) => "heartbeat",
            WorkerMsg::Step(_) => "step",
            WorkerMsg::Buckets(_) => "buckets",
            WorkerMsg::Epoch(_) => "epoch",
            WorkerMsg::Probe(_) => "probe",
            WorkerMsg::Bench(_) => "bench",
            WorkerMsg::Memory(_) => "memory",
            WorkerMsg::Hlo(_) => "hlo",
            WorkerMsg::Log(_) => "log",
            WorkerMsg::Result(_) => "result",
            WorkerMsg::Bye(_) => "bye",
            WorkerMsg::Plan(_) => "plan",
            WorkerMsg::Comm(_) => "comm",
            WorkerMsg::Check(_) => "check",
            WorkerMsg::NcclHello(_) => "nccl_hello",
            WorkerMsg::Nccl(_) => "nccl",
        }
    }

    pub fn rank(&self) -> u32 {
        match self {
            WorkerMsg::Hello(m) => m.rank,
            WorkerMsg::Heartbeat(m) => m.rank,
            WorkerMsg::Step(m) => m.rank,
            WorkerMsg::Buckets(m) => m.rank,
            WorkerMsg::Epoch(m) => m.rank,
            WorkerMsg::Probe(m) => m.rank,
            WorkerMsg::Bench(m) => m.rank,
            WorkerMsg::Memory(m) => m.rank,
            WorkerMsg::Hlo(m) => m.rank,
            WorkerMsg::Log(m) => m.rank,
            WorkerMsg::Result(m) => m.rank,
            WorkerMsg::Bye(m) => m.rank,
            WorkerMsg::Plan(m) => m.rank,
            WorkerMsg::Comm(m) => m.rank,
            WorkerMsg::Check(m) => m.rank,
            WorkerMsg::NcclHello(m) => m.rank,
            WorkerMsg::Nccl(m) => m.rank,
        }
    }

    /// The rank's step counter; `hello` has none.
    pub fn step(&self) -> Option<u64> {
        match self {
            // The plugin knows nothing of training steps.
            WorkerMsg::Hello(_) | WorkerMsg::NcclHello(_) | WorkerMsg::Nccl(_) => None,
            WorkerMsg::Heartbeat(m) => Some(m.step),
            WorkerMsg::Step(m) => Some(m.step),
            WorkerMsg::Buckets(m) => Some(m.step),
            WorkerMsg::Epoch(m) => Some(m.step),
            WorkerMsg::Probe(m) => Some(m.step),
            WorkerMsg::Bench(m) => Some(m.step),
            WorkerMsg::Memory(m) => Some(m.step),
            WorkerMsg::Hlo(m) => Some(m.step),
            WorkerMsg::Log(m) => Some(m.step),
            WorkerMsg::Result(m) => Some(m.step),
            WorkerMsg::Bye(m) => Some(m.step),
            WorkerMsg::Plan(m) => Some(m.step),
            WorkerMsg::Comm(m) => Some(m.step),
            WorkerMsg::Check(m) => Some(m.step),
        }
    }

    /// One JSON line (without the newline), with the version field.
    pub fn to_line(&self) -> String {
        with_version(serde_json::to_value(self).expect("worker messages always serialize"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadToken,
    UnknownRun,
    DuplicateRank,
    ExpectedHello,
    PeerUid,
    LineTooLong,
    BadMessage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    ProbeOn,
    ProbeOff,
    DumpFr,
    Stop,
}

/// A message from ddptop to a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlMsg {
    Welcome {
        run_id: String,
        rank: u32,
        heartbeat_s: f64,
    },
    Error {
        code: ErrorCode,
        msg: String,
    },
    Command {
        cmd: Command,
    },
}

impl ControlMsg {
    pub fn to_line(&self) -> String {
        with_version(serde_json::to_value(self).expect("control messages always serialize"))
    }
}

/// `v` first, then `type` and the fields: the order Python's client writes, which
/// `validate::parse_worker` reads without a second pass.
fn with_version(v: serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(fields) => {
            let mut map = serde_json::Map::with_capacity(fields.len() + 1);
            map.insert("v".into(), serde_json::Value::from(super::VERSION));
            map.extend(fields);
            serde_json::Value::Object(map).to_string()
        }
        other => other.to_string(),
    }
}
