//! Plain data: runs, ranks, GPUs, messages. No I/O here.

use crate::gpu::{GpuView, ProcStat};
pub use crate::run::{
    Aggregate, DataPath, Experiment, HostBackend, MAX_LOG_TAIL, ModelName, NcclSettings, RankView,
    RunSpec, RunStatus, RunView,
};
use std::collections::{BTreeMap, VecDeque};

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

#[derive(Debug, Clone, Default)]
pub struct HostInfo {
    pub hostname: String,
    pub gpu_summary: Option<String>,
    pub interconnect: Option<String>,
    pub backend: HostBackend,
    pub torch: Option<String>,
    pub nccl: Option<String>,
}

/// Preferences for the next launch from the dashboard.
#[derive(Debug, Clone)]
pub struct LaunchPrefs {
    pub experiment: Experiment,
    pub data_path: DataPath,
    pub nccl: NcclSettings,
    /// The `--attach` script and its arguments, as the header names them.
    pub attach: Option<String>,
    /// The config preset `nccl` came from (`e`), until a toggle changes it.
    pub preset: Option<String>,
    /// Why the next experiment cannot launch on this machine, said where it is chosen (the
    /// hand-rolled worker not built: the command that builds it).
    pub unavailable: Option<String>,
    /// This node or all of `[nodes] hosts` (`N`; `app::target`).
    pub target: super::target::LaunchTarget,
}

/// A launch waiting its turn: the dashboard's copy of `plan::Queue` (which owns them), so the
/// Runs pane can show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    pub spec: RunSpec,
    pub sweep: Option<String>,
}

/// The dashboard's pages (tabs on small terminals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pane {
    #[default]
    Runs,
    Gpus,
    Timeline,
    Log,
}

/// The data every front end shows: the host, GPUs, runs, messages, the next launch's settings.
/// What the user is looking at is `View`'s.
#[derive(Debug, Clone)]
pub struct State {
    pub host: HostInfo,
    pub gpus: Vec<GpuView>,
    /// Why there are no GPU rows (no NVML, no driver), shown as one line.
    pub gpu_note: Option<String>,
    /// Other nodes' GPUs, from their agents (multi-node runs; `app::nodes`).
    pub nodes: Vec<super::node_gpus::NodeGpus>,
    /// ddptop's own CPU and RSS (the dashboard reads /proc/self every few seconds).
    pub self_cost: Option<crate::selfcost::SelfCost>,
    /// Newest first.
    pub runs: Vec<RunView>,
    pub messages: VecDeque<Message>,
    /// Messages pushed since start (the deque keeps the last `MAX_MESSAGES`): a reader that
    /// streams them (headless `--json`) takes the ones it has not seen.
    pub messages_pushed: u64,
    pub next: LaunchPrefs,
    pub proc_stats: BTreeMap<u32, ProcStat>,
    /// Number of GPUs usable for launches (0 = CPU / simulated only).
    pub max_k: u32,
    /// Launches waiting for the active run, the next one first.
    pub queued: Vec<Queued>,
    /// Where runs keep their files (`DATA_DIR/runs/ID/`); `None` in tests and listings.
    pub data_dir: Option<std::path::PathBuf>,
    /// Connections refused before they named a run (garbage, idle, oversized first line, a
    /// foreign uid): counted here, since no run is theirs.
    pub rejected_strangers: u64,
    /// The dashboard's tuning (`T`): its table, as the tuning left it last.
    pub tune: Option<super::tune::Board>,
}

pub const MAX_MESSAGES: usize = 500;

impl State {
    pub fn new(host: HostInfo) -> Self {
        State {
            host,
            gpus: Vec::new(),
            gpu_note: None,
            nodes: Vec::new(),
            self_cost: None,
            runs: Vec::new(),
            messages: VecDeque::new(),
            messages_pushed: 0,
            next: LaunchPrefs {
                experiment: Experiment::default(),
                data_path: DataPath::Device,
                nccl: NcclSettings::default(),
                attach: None,
                preset: None,
                unavailable: None,
                target: Default::default(),
            },
            proc_stats: BTreeMap::new(),
            max_k: 0,
            queued: Vec::new(),
            data_dir: None,
            rejected_strangers: 0,
            tune: None,
        }
    }

    /// Rows of the Runs pane: the queued launches (the last to start on top), then the runs.
    pub fn rows(&self) -> usize {
        self.queued.len() + self.runs.len()
    }

    /// Where a run or a queued launch stands in its sweep: `(position, size)`, 1-based, counting
    /// the sweep's runs (oldest first) and then its queued launches. `queue_index` picks a queued
    /// launch; otherwise `run_id` picks a run.
    pub fn sweep_position(
        &self,
        sweep: &str,
        run_id: Option<&str>,
        queue_index: Option<usize>,
    ) -> Option<(usize, usize)> {
        let ran: Vec<&str> = self
            .runs
            .iter()
            .rev()
            .filter(|r| r.launch.sweep.as_deref() == Some(sweep))
            .map(|r| r.id.as_str())
            .collect();
        let waiting: Vec<usize> = (0..self.queued.len())
            .filter(|i| self.queued[*i].sweep.as_deref() == Some(sweep))
            .collect();
        let size = ran.len() + waiting.len();
        let pos = match (queue_index, run_id) {
            (Some(q), _) => ran.len() + waiting.iter().position(|i| *i == q)? + 1,
            (None, Some(id)) => ran.iter().position(|r| *r == id)? + 1,
            (None, None) => return None,
        };
        Some((pos, size))
    }

    pub fn run(&self, id: &str) -> Option<&RunView> {
        self.runs.iter().find(|r| r.id == id)
    }

    pub fn run_mut(&mut self, id: &str) -> Option<&mut RunView> {
        self.runs.iter_mut().find(|r| r.id == id)
    }

    pub fn active_runs(&self) -> impl Iterator<Item = &RunView> {
        self.runs.iter().filter(|r| !r.status.is_final())
    }

    /// The messages pushed after the first `seen` ones (those still kept).
    pub fn messages_since(&self, seen: u64) -> impl Iterator<Item = &Message> {
        let new = self.messages_pushed.saturating_sub(seen) as usize;
        self.messages
            .iter()
            .skip(self.messages.len().saturating_sub(new))
    }

    pub fn push_message(&mut self, level: Level, run: Option<&str>, text: impl Into<String>) {
        self.messages.push_back(Message {
            unix: crate::util::unix_now(),
            level,
            run: run.map(str::to_string),
            text: text.into(),
        });
        self.messages_pushed += 1;
        while self.messages.len() > MAX_MESSAGES {
            self.messages.pop_front();
        }
    }
}
