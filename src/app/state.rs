//! Plain data: runs, ranks, GPUs, messages. No I/O here.

use crate::protocol::{Backend, Bench, Buckets, Memory, Phase, Probe, Step};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Experiment {
    Weak,
    Strong,
    Probe,
    Allreduce,
}

impl Experiment {
    pub fn as_str(self) -> &'static str {
        match self {
            Experiment::Weak => "weak",
            Experiment::Strong => "strong",
            Experiment::Probe => "probe",
            Experiment::Allreduce => "allreduce",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "weak" => Some(Self::Weak),
            "strong" => Some(Self::Strong),
            "probe" => Some(Self::Probe),
            "allreduce" => Some(Self::Allreduce),
            _ => None,
        }
    }
    /// Default batch: per-rank for weak and probe, global for strong.
    pub fn default_batch(self) -> u32 {
        match self {
            Experiment::Strong => 512,
            _ => 256,
        }
    }
    pub fn has_throughput(self) -> bool {
        matches!(self, Experiment::Weak | Experiment::Strong)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum ModelName {
    Resnet18,
    Tiny,
}

impl ModelName {
    /// The book's ResNet-18 on GPUs and in simulation; the tiny CNN for gloo on CPUs, where a
    /// ResNet-18 epoch takes many minutes.
    pub fn default_for(backend: Backend) -> Self {
        if backend == Backend::Gloo {
            ModelName::Tiny
        } else {
            ModelName::Resnet18
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ModelName::Resnet18 => "resnet18",
            ModelName::Tiny => "tiny",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Starting,
    Running,
    Completed,
    Failed,
    Hung,
    Stopped,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Starting => "starting",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Hung => "hung",
            RunStatus::Stopped => "stopped",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "starting" => Self::Starting,
            "running" => Self::Running,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "hung" => Self::Hung,
            "stopped" => Self::Stopped,
            _ => return None,
        })
    }
    pub fn is_final(self) -> bool {
        !matches!(self, RunStatus::Starting | RunStatus::Running)
    }
    /// Only a completed run may show its figures as results.
    pub fn shows_results(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Running | RunStatus::Starting
        )
    }
}

/// Where training batches come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, Default)]
#[serde(rename_all = "snake_case")]
pub enum DataPath {
    /// Tensors resident on the device, sliced per step: no input pipeline cost.
    #[default]
    Device,
    /// The book's DataLoader with a DistributedSampler and worker processes.
    Loader,
}

impl DataPath {
    pub fn as_str(self) -> &'static str {
        match self {
            DataPath::Device => "device",
            DataPath::Loader => "loader",
        }
    }
}

/// What to launch. Everything a run needs to be reproduced is here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub experiment: Experiment,
    pub k: u32,
    pub backend: Backend,
    /// Machine profile of the simulated backend (`h200-nvlink`, `book-pcie`).
    pub profile: Option<String>,
    pub model: ModelName,
    /// Per-rank batch for weak and probe, global batch for strong.
    pub batch: u32,
    pub epochs: u32,
    pub samples: u64,
    /// Environment toggles for this launch; `None` unsets the variable.
    pub env: BTreeMap<String, Option<String>>,
    pub inject: Option<String>,
    /// A k=1 control run launched alongside a probe.
    pub control: bool,
    #[serde(default)]
    pub data_path: DataPath,
}

impl RunSpec {
    /// A launch with the experiment's defaults: its default batch, 2 epochs (the first is
    /// warm-up), 60,000 samples, the backend's default model, no toggles.
    pub fn new(experiment: Experiment, k: u32, backend: Backend) -> RunSpec {
        RunSpec {
            experiment,
            k,
            backend,
            profile: None,
            model: ModelName::default_for(backend),
            batch: experiment.default_batch(),
            epochs: 2,
            samples: 60_000,
            env: BTreeMap::new(),
            inject: None,
            control: false,
            data_path: DataPath::Device,
        }
    }

    pub fn per_rank_batch(&self) -> u32 {
        match self.experiment {
            Experiment::Strong => (self.batch / self.k.max(1)).max(1),
            _ => self.batch,
        }
    }
    pub fn global_batch(&self) -> u32 {
        self.per_rank_batch() * self.k
    }
    /// Set toggles as `KEY=VAL` badges, sorted.
    pub fn toggle_badges(&self) -> Vec<String> {
        self.env
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v}"),
                None => format!("-{k}"),
            })
            .collect()
    }
    /// Runs are comparable (same scaling curve) when this key matches.
    pub fn curve_key(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}|{}|{}",
            self.experiment.as_str(),
            self.backend.as_str(),
            self.profile.as_deref().unwrap_or("-"),
            self.model.as_str(),
            self.batch,
            self.data_path.as_str(),
            self.toggle_badges().join(",")
        )
    }
}

#[derive(Debug, Clone, Default)]
pub struct RankView {
    pub rank: u32,
    pub pid: Option<u32>,
    pub device: Option<String>,
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
    pub memory: Option<Memory>,
    /// The rank's own report of a failure: an `error` log line or `bye` with reason `error`.
    pub error: Option<String>,
    pub bad_lines: u64,
    /// Samples in recent steps, for the live throughput: (when, samples).
    pub recent_samples: VecDeque<(Instant, u64)>,
}

/// The figures of a finished (or running) run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    pub samples_per_s: f64,
    pub per_rank: Vec<f64>,
    pub rank_min: f64,
    pub rank_max: f64,
}

#[derive(Debug, Clone)]
pub struct RunView {
    pub id: String,
    pub spec: RunSpec,
    pub status: RunStatus,
    /// Why it ended as it did (exit codes, hang verdict, who stopped it).
    pub reason: Option<String>,
    /// Unix seconds.
    pub started_unix: f64,
    pub ended_unix: Option<f64>,
    pub started: Option<Instant>,
    /// Last time any rank's step counter advanced.
    pub last_progress: Option<Instant>,
    /// Recent wall-clock gaps (s) between step advances, for the watchdog's threshold.
    pub progress_gaps: VecDeque<f64>,
    pub ranks: BTreeMap<u32, RankView>,
    pub aggregate: Option<Aggregate>,
    /// (seconds since start, aggregate samples/s), sampled about once a second.
    pub throughput: Vec<(f64, f64)>,
    pub probe: Vec<Probe>,
    pub bench: Vec<Bench>,
    pub transport: Option<String>,
    pub versions: BTreeMap<String, String>,
    pub rejected: u64,
    pub log_tail: VecDeque<String>,
    /// Evidence collected when a run hung (flight recorder summary, last steps).
    pub hang_report: Vec<String>,
    pub exit_codes: Vec<(String, i32)>,
    pub grad_bytes: Option<u64>,
    pub bucket_bytes: Vec<u64>,
    /// From this session (false: loaded from the store).
    pub live: bool,
    pub sweep: Option<String>,
}

impl RunView {
    pub fn new(id: String, spec: RunSpec, now: Instant, unix: f64) -> Self {
        let ranks = (0..spec.k)
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
            started_unix: unix,
            ended_unix: None,
            started: Some(now),
            last_progress: None,
            progress_gaps: VecDeque::new(),
            ranks,
            aggregate: None,
            throughput: Vec::new(),
            probe: Vec::new(),
            bench: Vec::new(),
            transport: None,
            versions: BTreeMap::new(),
            rejected: 0,
            log_tail: VecDeque::new(),
            hang_report: Vec::new(),
            exit_codes: Vec::new(),
            grad_bytes: None,
            bucket_bytes: Vec::new(),
            live: true,
            sweep: None,
        }
    }

    pub fn is_simulated(&self) -> bool {
        self.spec.backend == Backend::Sim
    }

    pub fn bad_lines(&self) -> u64 {
        self.ranks.values().map(|r| r.bad_lines).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone)]
pub struct Message {
    pub unix: f64,
    pub level: Level,
    pub run: Option<String>,
    pub text: String,
}

/// One GPU at one moment. `None` = not supported / not available on this device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSample {
    pub index: u32,
    pub name: Option<String>,
    pub util_pct: Option<u32>,
    pub mem_used: Option<u64>,
    pub mem_total: Option<u64>,
    pub power_w: Option<f64>,
    pub temp_c: Option<u32>,
    /// NVLink (summed over active links) or PCIe throughput, KB/s.
    pub link_rx_kbs: Option<u64>,
    pub link_tx_kbs: Option<u64>,
    /// "NVLink" or "PCIe": what `link_*` measure.
    pub link: Option<&'static str>,
    pub pids: Vec<u32>,
    /// The device could not be read at all (lost, invalid): why.
    pub error: Option<String>,
}

/// One GPU's latest sample plus a minute of utilisation history. Reads of the sample's fields go
/// through `Deref` (`gpu.util_pct`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuView {
    pub latest: GpuSample,
    pub util_history: VecDeque<u64>,
}

impl std::ops::Deref for GpuView {
    type Target = GpuSample;
    fn deref(&self) -> &GpuSample {
        &self.latest
    }
}

#[derive(Debug, Clone, Default)]
pub struct HostInfo {
    pub hostname: String,
    pub gpu_summary: Option<String>,
    pub interconnect: Option<String>,
    pub backend_label: String,
    pub torch: Option<String>,
    pub nccl: Option<String>,
}

/// Preferences for the next launch from the dashboard.
#[derive(Debug, Clone)]
pub struct LaunchPrefs {
    pub experiment: Experiment,
    pub data_path: DataPath,
    pub env: BTreeMap<String, Option<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pane {
    #[default]
    Runs,
    Gpus,
    Timeline,
    Log,
}

#[derive(Debug, Clone, Default)]
pub struct ProcStat {
    pub cpu_pct: f32,
    pub rss_bytes: u64,
}

pub struct State {
    pub host: HostInfo,
    pub gpus: Vec<GpuView>,
    /// Why there are no GPU rows (no NVML, no driver), shown as one line.
    pub gpu_note: Option<String>,
    pub runs: Vec<RunView>,
    pub selected: usize,
    pub focused: Option<String>,
    pub timeline_rank: u32,
    pub frozen: bool,
    pub messages: VecDeque<Message>,
    pub next: LaunchPrefs,
    pub pane: Pane,
    pub show_help: bool,
    pub proc_stats: BTreeMap<u32, ProcStat>,
    /// Number of GPUs usable for launches (0 = CPU / simulated only).
    pub max_k: u32,
    /// Bumped by every change that should reach the screen.
    pub generation: u64,
}

pub const MAX_MESSAGES: usize = 500;
pub const MAX_LOG_TAIL: usize = 200;

impl State {
    pub fn new(host: HostInfo) -> Self {
        State {
            host,
            gpus: Vec::new(),
            gpu_note: None,
            runs: Vec::new(),
            selected: 0,
            focused: None,
            timeline_rank: 0,
            frozen: false,
            messages: VecDeque::new(),
            next: LaunchPrefs {
                experiment: Experiment::Weak,
                data_path: DataPath::Device,
                env: BTreeMap::new(),
            },
            pane: Pane::Runs,
            show_help: false,
            proc_stats: BTreeMap::new(),
            max_k: 0,
            generation: 0,
        }
    }

    pub fn run(&self, id: &str) -> Option<&RunView> {
        self.runs.iter().find(|r| r.id == id)
    }

    pub fn run_mut(&mut self, id: &str) -> Option<&mut RunView> {
        self.runs.iter_mut().find(|r| r.id == id)
    }

    /// The focused run, else the selected one.
    pub fn focused_run(&self) -> Option<&RunView> {
        self.focused
            .as_deref()
            .and_then(|id| self.run(id))
            .or_else(|| self.runs.get(self.selected))
    }

    pub fn active_runs(&self) -> impl Iterator<Item = &RunView> {
        self.runs.iter().filter(|r| !r.status.is_final())
    }

    pub fn push_message(&mut self, level: Level, run: Option<&str>, text: impl Into<String>) {
        self.messages.push_back(Message {
            unix: crate::util::unix_now(),
            level,
            run: run.map(str::to_string),
            text: text.into(),
        });
        while self.messages.len() > MAX_MESSAGES {
            self.messages.pop_front();
        }
        self.generation += 1;
    }
}
