//! Serde types for every protocol v1 message, both directions.

use serde::{Deserialize, Serialize};

/// Which collective backend a worker runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Nccl,
    Gloo,
    Sim,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Nccl => "nccl",
            Backend::Gloo => "gloo",
            Backend::Sim => "sim",
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Init,
    Train,
    Probe,
    Bench,
    Done,
}

/// How a step's numbers were obtained; `Model` means simulated by the cost model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    CudaEvents,
    Host,
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
    pub backend: Backend,
    pub worker: WorkerKind,
    pub torch: Option<String>,
    pub nccl: Option<String>,
    pub cuda: Option<String>,
    pub t: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketSpan {
    pub index: u32,
    pub bytes: u64,
    pub ready_ms: f64,
    pub start_ms: f64,
    pub done_ms: f64,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    pub peak_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hlo {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub k: u32,
    pub all_reduce_ops: u32,
    pub all_reduce_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Log {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub level: LogLevel,
    pub msg: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultMsg {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub experiment: String,
    pub samples_per_s: Option<f64>,
    pub timed_epochs: u32,
    pub params: Option<u64>,
    pub grad_bytes: Option<u64>,
    pub bucket_bytes: Vec<u64>,
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
        }
    }

    /// The rank's step counter; `hello` has none.
    pub fn step(&self) -> Option<u64> {
        match self {
            WorkerMsg::Hello(_) => None,
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

fn with_version(mut v: serde_json::Value) -> String {
    if let serde_json::Value::Object(map) = &mut v {
        map.insert("v".into(), serde_json::Value::from(super::VERSION));
    }
    v.to_string()
}
