//! `~/.config/ddptop/config.toml`: theme, key map, refresh rates, watchdog thresholds, launcher
//! paths and NCCL presets.
//!
//! The file is written as a commented default on first run. A broken file gives one error line
//! naming the file, the line and column, and the problem (`ConfigError`'s `Display`). Unknown keys
//! are errors too, so a typo never silently does nothing. docs/ui.md documents every field.

use crate::app::Action;
use crate::keys::{Key, KeyMap};
use crate::run::{EnvOverlay, NcclSettings};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The commented default config written on first run. Every setting in it is the built-in default.
pub const DEFAULT_CONFIG: &str = r##"# ddptop configuration (written on first run; every value below is the built-in default).
# Delete this file to get the defaults back. Reference: docs/ui.md in the ddptop sources.

# Colour theme: dark, light, high-contrast, monochrome, or NAME for themes/NAME.toml next to
# this file. `t` cycles themes at run time. NO_COLOR=1 in the environment forces monochrome.
theme = "dark"

# Mouse: click selects a run or focuses a pane, the wheel scrolls. false leaves the terminal's own
# mouse handling (text selection) alone; --no-mouse does the same for one session.
mouse = true

# The chapter's two PyTorch settings in ddptop's own PyTorch runs (weak, strong, probe, fsdp):
# torch.set_float32_matmul_precision("high") and torch.backends.cudnn.benchmark = True. false
# runs PyTorch's defaults (a separate curve); `ddptop run --no-book-settings` does it once.
# `attach` never changes a script's settings.
book_settings = true

# NCCL profiler plugin: every collective from NCCL itself (collectives view, which rank is inside
# which collective on a hang; docs/profiler.md). false launches NCCL without it; --no-nccl-profiler
# does the same for one session. $DDPTOP_NCCL_PROFILER names the library when it is not beside ddptop.
nccl_profiler = true

# Launchers (default: found on PATH).
# python = "/usr/bin/python3"
# torchrun = "/usr/local/bin/torchrun"

[refresh]
gpu_sample_ms = 1000   # NVML and worker CPU/RSS sampling period, ms (minimum 250; also other nodes' agents)
max_fps = 20           # redraws per second at most after a key or click (1..120); new data from
                       # the runs is drawn at most 4 times a second; nothing is redrawn while idle

[launch]
# Samples per epoch and epochs of the dashboard's launches (1/2/4, a sweep) and of `ddptop run`
# and `ddptop tune` without --samples/--epochs. Default: 60000 samples (8192 on gloo, where CPUs
# are slow) and 2 epochs, the first of them warm-up.
# samples = 8192
# epochs = 2

[store]
# The most MiB of per-step lines kept per run in runs/<id>/steps.jsonl (every step and timeline
# line, as received); 0 keeps them all. 1,024 ranks send ~13 MB/s. Default 4096.
# archive_max_mb = 4096

[timeline]
steps = 50             # the Timeline pane shows the median of the last N steps (20..=500); f freezes one

[watchdog]
hang_floor_s = 10.0    # a run is hung after at least this many seconds without step progress,
hang_factor = 10.0     # or this many times its median step time, whichever is larger
startup_s = 180.0      # time allowed from launch to the first step
first_steps_s = 120.0  # time each rank's first two steps may take (cudnn.benchmark autotuning,
                       # torch.compile, XLA, lazy NCCL set-up) unless communication hangs
stop_attached_on_hang = false  # `ddptop attach`: stop your job on a hang (else report and keep it)

[stragglers]
threshold = 0.9        # a rank whose busy time is below this fraction of the fastest rank's pace
window = 30            # over this many recent steps (and both halves of them) is named (4..=256)

[nodes]
# The dashboard's "all nodes" target (N switches to it; 1/2/4 then launch across them): this
# machine first, then the others, each `name` or `name=addr` as in --nodes.
# hosts = ["gpu-a", "gpu-b"]
# Multi-node runs (`--nodes HOST1,HOST2`, docs/multinode.md). How ddptop runs a command on
# another node: {host} is the node's name from --nodes, {cmd} one shell command line (ssh hands
# it to the node's shell; for an exec-style channel write `sh -c {cmd}`). Examples:
#   remote = "srun --overlap --nodes=1 --ntasks=1 -w {host} sh -c {cmd}"
#   remote = "kubectl exec {host} -- sh -c {cmd}"
# remote = "ssh -o BatchMode=yes {host} -- {cmd}"
# How ddptop signals a node's agent and ranks (default: `kill` through `remote`); {sig} is INT,
# TERM or KILL, {pids} the pids on that node, {slurm_step} JOB.STEP of a node started by srun:
#   stop = "scancel --signal={sig} {slurm_step}"
# Where ranks on other nodes report (default: every interface when --nodes names another host,
# else loopback; port 0 = any free port) and the name they connect to (default: this host name).
# listen = "0.0.0.0:0"
# advertise = "head-node.cluster"
# Other nodes' GPUs in the GPU pane: "agent" (`ddptop agent` on each node, started through
# `remote`, NVML there), "dcgm" (read each node's DCGM exporter, no agent), or "off".
# gpu_source = "agent"
# dcgm_url = "http://{host}:9400/metrics"   # {addr}: the node's =ADDR from --nodes
# Encrypt the TCP channel with TLS (a certificate made per run, its fingerprint passed to the
# nodes with the token); plain TCP with the token is the default on a trusted network.
# tls = false

[keys]
# "key" = "action". Keys: a character ("p" and "P" differ), Tab, Enter, Esc, Space, Up, Down,
# Left, Right, PageUp, PageDown, Home, End, Backspace, Delete, Insert, F1..F24, with Ctrl-, Alt-
# or Shift- in front ("Ctrl-c"). Entries here are added to the defaults; "none" removes a default.
# Actions and their default keys:
# "1" = "launch-k1"
# "2" = "launch-k2"
# "4" = "launch-k4"
# "a" = "sweep"
# "s" = "switch-experiment"
# "d" = "toggle-data-path"
# "p" = "probe"
# "b" = "bench"
# "T" = "tune"           # tune the next experiment's DDP/NCCL settings (live table)
# "S" = "save-tuned"     # keep the tuning's winner as a preset here
# "n" = "toggle-shm-memcpy"
# "P" = "toggle-p2p-disable"
# "v" = "toggle-nvls"
# "N" = "toggle-nodes"
# "r" = "rerun"
# "x" = "stop"
# "Tab" = "next-pane"
# "Up" = "up"            # also "k"
# "Down" = "down"        # also "j"
# "PageUp" = "page-up"
# "PageDown" = "page-down"
# "Home" = "top"         # also "g"
# "End" = "bottom"       # also "G"
# "Enter" = "focus"      # opens the run's details
# "Esc" = "close"
# "z" = "zoom"
# "]" = "next-rank"
# "f" = "freeze"
# "t" = "next-theme"
# "e" = "next-preset"
# "w" = "write-report"
# "?" = "help"
# "q" = "quit"           # also "Ctrl-c"

# NCCL presets: named sets of environment variables for a launch. A value is a string; false
# (or the string "unset") removes the variable from the launch's environment. NCCL reads these
# once, at communicator init, so they apply to the next launch.
[presets.shm-memcpy]
NCCL_SHM_USE_CUDA_MEMCPY = "1"

[presets.no-p2p]
NCCL_P2P_DISABLE = "1"

[presets.defaults]
NCCL_SHM_USE_CUDA_MEMCPY = false
NCCL_P2P_DISABLE = false
NCCL_SHM_DISABLE = false
NCCL_ALGO = false
NCCL_PROTO = false
"##;

/// Names of the themes built into the binary (`themes/*.toml`).
pub const BUILTIN_THEMES: [&str; 4] = ["dark", "light", "high-contrast", "monochrome"];

/// One line: `config error: FILE:LINE:COL: problem`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// 1-based line and column, when the problem has a place in the file.
    pub line: Option<usize>,
    pub col: Option<usize>,
    pub msg: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "config error: {}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.col {
                write!(f, ":{col}")?;
            }
        }
        write!(f, ": {}", self.msg)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// An error at a byte span of `text` (the file's contents).
    pub fn at(path: &Path, text: &str, span: Option<std::ops::Range<usize>>, msg: &str) -> Self {
        let (line, col) = match span {
            Some(s) => {
                let (l, c) = line_col(text, s.start);
                (Some(l), Some(c))
            }
            None => (None, None),
        };
        ConfigError {
            path: path.to_path_buf(),
            line,
            col,
            msg: one_line(msg),
        }
    }

    fn whole(path: &Path, msg: impl Into<String>) -> Self {
        ConfigError {
            path: path.to_path_buf(),
            line: None,
            col: None,
            msg: one_line(&msg.into()),
        }
    }

    fn from_toml(path: &Path, text: &str, e: &toml::de::Error) -> Self {
        ConfigError::at(path, text, e.span(), e.message())
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit_once('\n')
        .map_or(before, |(_, l)| l)
        .chars()
        .count()
        + 1;
    (line, col)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn one_line(s: &str) -> String {
    s.trim()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

// ------------------------------------------------------------------------------------------------
// Config

#[derive(Debug, Clone, PartialEq)]
pub struct Refresh {
    /// GPU (NVML) and worker CPU/RSS sampling period, ms. At least 250.
    pub gpu_sample_ms: u64,
    /// Redraws per second at most.
    pub max_fps: u32,
}

impl Default for Refresh {
    fn default() -> Self {
        Refresh {
            gpu_sample_ms: 1000,
            max_fps: 20,
        }
    }
}

/// `[launch]`: the size of a launch when the command line does not say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaunchCfg {
    /// Samples per epoch (`None`: the backend's default).
    pub samples: Option<u64>,
    /// Epochs, the first of them warm-up (`None`: 2).
    pub epochs: Option<u32>,
}

/// `[store]`: what the data directory keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreCfg {
    /// The most MiB one run's step archive (`runs/<id>/steps.jsonl`) may hold; 0: no limit.
    pub archive_max_mb: u64,
}

/// The default archive bound: ~5 minutes of a 1,024-rank job, ~20 hours of 8 ranks.
pub const ARCHIVE_MAX_MB: u64 = 4096;

impl Default for StoreCfg {
    fn default() -> Self {
        StoreCfg {
            archive_max_mb: ARCHIVE_MAX_MB,
        }
    }
}

impl StoreCfg {
    /// The limit in bytes (`None`: none).
    pub fn archive_limit(&self) -> Option<u64> {
        (self.archive_max_mb > 0).then(|| self.archive_max_mb.saturating_mul(1 << 20))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TimelineCfg {
    /// Steps the Timeline pane's median covers (20..=500).
    pub steps: usize,
}

impl Default for TimelineCfg {
    fn default() -> Self {
        TimelineCfg {
            steps: crate::app::predict::DEFAULT_TIMELINE_STEPS,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Watchdog {
    /// A run is hung after at least this many seconds without step progress.
    pub hang_floor_s: f64,
    /// ... or this many times its recent median step time, whichever is larger.
    pub hang_factor: f64,
    /// Time allowed from launch to the first step (imports, NCCL init, dataset download).
    pub startup_s: f64,
    /// Time each rank's first steps may go without progress (autotuning, compiling).
    pub first_steps_s: f64,
    /// Stop an attached job the watchdog calls hung.
    pub stop_attached_on_hang: bool,
}

impl Default for Watchdog {
    fn default() -> Self {
        Watchdog {
            hang_floor_s: 10.0,
            hang_factor: 10.0,
            startup_s: 180.0,
            first_steps_s: 120.0,
            stop_attached_on_hang: false,
        }
    }
}

/// `[nodes]`: how multi-node runs reach the other nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct NodesCfg {
    /// `hosts`: the dashboard's "all nodes" launch target (`name` or `name=addr`, as
    /// `--nodes`; this machine first). Empty: the dashboard launches on this node only.
    pub hosts: Vec<String>,
    /// Why `[nodes]` could not be read (file:line and the problem): multi-node launches are
    /// refused with this line, the rest of the config applies.
    pub broken: Option<String>,
    /// Command template with `{host}` and `{cmd}`.
    pub remote: String,
    /// Signal template with `{host}`, `{sig}`, `{pids}`, `{slurm_step}`; `None`: `kill` via `remote`.
    pub stop: Option<String>,
    pub listen: Option<std::net::SocketAddr>,
    pub advertise: Option<String>,
    /// Other nodes' GPU figures: `agent` (default), `dcgm` or `off`.
    pub gpu_source: crate::supervisor::nodes::NodeGpuSource,
    /// TLS on the TCP channel.
    pub tls: bool,
    /// The other nodes' agents sample at the dashboard's GPU rate (`[refresh] gpu_sample_ms`).
    pub sample_ms: u64,
}

impl Default for NodesCfg {
    fn default() -> Self {
        NodesCfg {
            hosts: Vec::new(),
            broken: None,
            remote: crate::supervisor::nodes::DEFAULT_REMOTE.into(),
            stop: None,
            listen: None,
            advertise: None,
            gpu_source: Default::default(),
            tls: false,
            sample_ms: 1000,
        }
    }
}

impl NodesCfg {
    /// The engine's node options for `entries` (`--nodes`, or `hosts`) with this table's
    /// templates, listener and GPU source: the one path of `ddptop run --nodes` and the
    /// dashboard's all-nodes launches. `Err`: the table is broken (its one line).
    pub fn options(
        &self,
        entries: Vec<String>,
    ) -> Result<crate::supervisor::nodes::NodesOptions, String> {
        if let Some(b) = &self.broken {
            return Err(b.clone());
        }
        let mut o = crate::supervisor::nodes::NodesOptions::new(entries);
        o.listen = self.listen;
        o.advertise = self.advertise.clone();
        o.remote = self.remote.clone();
        o.stop = self.stop.clone();
        o.tls = self.tls;
        o.gpu_source = self.gpu_source.clone();
        o.sample_ms = self.sample_ms;
        Ok(o)
    }
}

/// One environment preset: variable → value, `None` removes the variable for the launch.
pub type Preset = EnvOverlay;

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub theme: String,
    /// Mouse capture (click, wheel) in the dashboard.
    pub mouse: bool,
    /// The book's TF32 matmul precision and cudnn.benchmark in ddptop's PyTorch runs.
    pub book_settings: bool,
    /// ddptop's NCCL profiler plugin on NCCL launches.
    pub nccl_profiler: bool,
    pub keys: KeyMap,
    pub refresh: Refresh,
    pub launch: LaunchCfg,
    pub store: StoreCfg,
    pub timeline: TimelineCfg,
    pub watchdog: Watchdog,
    pub stragglers: crate::app::straggler::StragglerConfig,
    pub python: Option<PathBuf>,
    pub torchrun: Option<PathBuf>,
    pub presets: BTreeMap<String, Preset>,
    pub nodes: NodesCfg,
    /// The file this came from (`None`: built-in defaults only).
    pub path: Option<PathBuf>,
    /// True when this load wrote the commented default file.
    pub created: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            theme: "dark".into(),
            mouse: true,
            book_settings: true,
            nccl_profiler: true,
            keys: KeyMap::default(),
            refresh: Refresh::default(),
            launch: LaunchCfg::default(),
            store: StoreCfg::default(),
            timeline: TimelineCfg::default(),
            watchdog: Watchdog::default(),
            stragglers: Default::default(),
            python: None,
            torchrun: None,
            presets: NcclSettings::builtin_presets(),
            nodes: NodesCfg::default(),
            path: None,
            created: false,
        }
    }
}

/// The directory holding config.toml and user themes: `$XDG_CONFIG_HOME/ddptop`, else
/// `~/.config/ddptop` (see `crate::paths`).
pub fn config_dir() -> Option<PathBuf> {
    Some(crate::paths::config_dir())
}

/// Where the config lives without `--config`: `$DDPTOP_CONFIG`, else
/// `~/.config/ddptop/config.toml` (see `crate::paths::config_file`).
pub fn default_path() -> Option<PathBuf> {
    Some(crate::paths::config_file(None))
}

/// A theme of that name is built in, or `dir/NAME.toml` exists.
pub fn theme_exists(name: &str, dir: Option<&Path>) -> bool {
    BUILTIN_THEMES.contains(&name) || dir.is_some_and(|d| d.join(format!("{name}.toml")).is_file())
}

/// A user theme file as read from the config dir's `themes/` (parsed by `ui::ThemeSet::load`).
#[derive(Debug, Clone, PartialEq)]
pub struct UserTheme {
    pub path: PathBuf,
    pub text: String,
}

/// Every `*.toml` in `dir`, by file name; none without a dir (or when it cannot be listed).
pub fn user_themes(dir: Option<&Path>) -> Result<Vec<UserTheme>, ConfigError> {
    let Some(dir) = dir else {
        return Ok(Vec::new());
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(|e| ConfigError {
                path: path.clone(),
                line: None,
                col: None,
                msg: format!("cannot read theme: {e}"),
            })?;
            Ok(UserTheme { path, text })
        })
        .collect()
}

/// True when `NO_COLOR` is set to a non-empty value (https://no-color.org).
pub fn no_color_env() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    theme: Option<Spanned<String>>,
    mouse: Option<bool>,
    book_settings: Option<bool>,
    nccl_profiler: Option<bool>,
    python: Option<PathBuf>,
    torchrun: Option<PathBuf>,
    #[serde(default)]
    refresh: RawRefresh,
    #[serde(default)]
    launch: RawLaunch,
    #[serde(default)]
    store: RawStore,
    #[serde(default)]
    timeline: RawTimeline,
    #[serde(default)]
    watchdog: RawWatchdog,
    #[serde(default)]
    stragglers: RawStragglers,
    #[serde(default)]
    keys: BTreeMap<Spanned<String>, Spanned<String>>,
    /// Read on its own (`RawNodesDoc`): a broken `[nodes]` table costs multi-node launches only.
    #[serde(default, rename = "nodes")]
    _nodes: Option<toml::Value>,
    #[serde(default)]
    presets: BTreeMap<String, BTreeMap<String, Spanned<EnvValue>>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRefresh {
    gpu_sample_ms: Option<Spanned<u64>>,
    max_fps: Option<Spanned<u32>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLaunch {
    samples: Option<Spanned<i64>>,
    epochs: Option<Spanned<i64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStore {
    archive_max_mb: Option<Spanned<i64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTimeline {
    steps: Option<Spanned<usize>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWatchdog {
    hang_floor_s: Option<Spanned<f64>>,
    hang_factor: Option<Spanned<f64>>,
    startup_s: Option<Spanned<f64>>,
    first_steps_s: Option<Spanned<f64>>,
    stop_attached_on_hang: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStragglers {
    threshold: Option<Spanned<f64>>,
    window: Option<Spanned<usize>>,
}

/// The whole file read again for `[nodes]` alone (the other tables are `RawConfig`'s), so that
/// its errors keep their file:line.
#[derive(Deserialize)]
struct RawNodesDoc {
    #[serde(default)]
    nodes: RawNodes,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawNodes {
    hosts: Option<Spanned<Vec<Spanned<String>>>>,
    remote: Option<Spanned<String>>,
    stop: Option<Spanned<String>>,
    listen: Option<Spanned<String>>,
    advertise: Option<String>,
    gpu_source: Option<Spanned<String>>,
    dcgm_url: Option<Spanned<String>>,
    tls: Option<bool>,
}

/// `[nodes]` of the config text: the node list and how to reach the nodes. An error names the
/// file and line, as the rest of the file's do.
fn parse_nodes(text: &str, path: &Path, sample_ms: u64) -> Result<NodesCfg, ConfigError> {
    let raw = toml::from_str::<RawNodesDoc>(text)
        .map_err(|e| ConfigError::from_toml(path, text, &e))?
        .nodes;
    let err =
        |span: std::ops::Range<usize>, msg: String| ConfigError::at(path, text, Some(span), &msg);
    let mut n = NodesCfg::default();
    if let Some(hosts) = raw.hosts {
        let span = hosts.span();
        for h in hosts.into_inner() {
            crate::supervisor::nodes::check_entry(h.get_ref())
                .map_err(|m| err(h.span(), format!("[nodes] hosts: {m}")))?;
            n.hosts.push(h.into_inner());
        }
        if n.hosts.len() == 1 {
            return Err(err(
                span,
                "[nodes] hosts names one node: list this machine first, then the others".into(),
            ));
        }
    }
    if let Some(t) = raw.remote {
        let words =
            crate::supervisor::launch::split_template(t.get_ref()).map_err(|m| err(t.span(), m))?;
        if !words.iter().any(|w| w.contains("{cmd}")) {
            return Err(err(
                t.span(),
                "[nodes] remote needs {cmd} (and usually {host}), e.g. \"ssh {host} -- {cmd}\""
                    .into(),
            ));
        }
        n.remote = t.into_inner();
    }
    if let Some(t) = raw.stop {
        crate::supervisor::launch::split_template(t.get_ref()).map_err(|m| err(t.span(), m))?;
        n.stop = Some(t.into_inner());
    }
    if let Some(l) = raw.listen {
        n.listen = Some(l.get_ref().parse().map_err(|_| {
            err(
                l.span(),
                format!(
                    "[nodes] listen = {:?} is not IP:PORT (e.g. \"0.0.0.0:0\")",
                    l.get_ref()
                ),
            )
        })?);
    }
    n.advertise = raw.advertise;
    n.tls = raw.tls.unwrap_or(false);
    n.sample_ms = sample_ms;
    n.gpu_source = crate::supervisor::nodes::parse_gpu_source(
        raw.gpu_source.as_ref().map(|s| s.get_ref().as_str()),
        raw.dcgm_url.as_ref().map(|s| s.get_ref().as_str()),
    )
    .map_err(|m| {
        let span = raw
            .gpu_source
            .as_ref()
            .or(raw.dcgm_url.as_ref())
            .map(|s| s.span())
            .unwrap_or_default();
        err(span, m)
    })?;
    Ok(n)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum EnvValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl Config {
    /// Load `path`, or the default path when `None`. A missing file is created with the commented
    /// defaults (if that fails, e.g. a read-only home, the defaults are used all the same).
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => match default_path() {
                Some(p) => p,
                None => return Ok(Config::default()),
            },
        };
        if let Some(dir) = path.parent() {
            crate::paths::not_planted(dir).map_err(|e| ConfigError::whole(&path, e))?;
        }
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut cfg = Config::parse(&text, &path)?;
                cfg.path = Some(path);
                Ok(cfg)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let created = write_default(&path).is_ok();
                Ok(Config {
                    created,
                    path: Some(path),
                    ..Config::default()
                })
            }
            Err(e) => Err(ConfigError::whole(&path, format!("cannot read: {e}"))),
        }
    }

    /// Parse config text; `path` only names the file in errors and locates user themes.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| ConfigError::from_toml(path, text, &e))?;
        let err = |span: std::ops::Range<usize>, msg: String| {
            ConfigError::at(path, text, Some(span), &msg)
        };
        let mut cfg = Config::default();
        if let Some(m) = raw.mouse {
            cfg.mouse = m;
        }
        if let Some(b) = raw.book_settings {
            cfg.book_settings = b;
        }
        if let Some(theme) = raw.theme {
            let name = theme.get_ref().trim().to_string();
            let dir = path.parent().map(|d| d.join("themes"));
            if !theme_exists(&name, dir.as_deref()) {
                return Err(err(
                    theme.span(),
                    format!(
                        "unknown theme {name:?} (built in: {}; or put {name}.toml in {})",
                        BUILTIN_THEMES.join(", "),
                        dir.map_or("the config dir's themes/".into(), |d| d
                            .display()
                            .to_string())
                    ),
                ));
            }
            cfg.theme = name;
        }
        cfg.python = raw.python;
        if let Some(b) = raw.nccl_profiler {
            cfg.nccl_profiler = b;
        }
        cfg.torchrun = raw.torchrun;
        if let Some(v) = raw.refresh.gpu_sample_ms {
            if *v.get_ref() < 250 {
                return Err(err(
                    v.span(),
                    format!(
                        "gpu_sample_ms = {} is below the minimum of 250",
                        v.get_ref()
                    ),
                ));
            }
            cfg.refresh.gpu_sample_ms = v.into_inner();
        }
        if let Some(v) = raw.refresh.max_fps {
            if !(1..=120).contains(v.get_ref()) {
                return Err(err(
                    v.span(),
                    format!("max_fps = {} is outside 1..=120", v.get_ref()),
                ));
            }
            cfg.refresh.max_fps = v.into_inner();
        }
        let positive = |v: &Spanned<i64>, what: &str| {
            u64::try_from(*v.get_ref())
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    err(
                        v.span(),
                        format!(
                            "[launch] {what} = {} must be a positive whole number",
                            v.get_ref()
                        ),
                    )
                })
        };
        if let Some(v) = &raw.launch.samples {
            cfg.launch.samples = Some(positive(v, "samples")?);
        }
        if let Some(v) = &raw.launch.epochs {
            let n = positive(v, "epochs")?;
            cfg.launch.epochs = Some(u32::try_from(n).map_err(|_| {
                err(
                    v.span(),
                    format!("[launch] epochs = {n} is more than {}", u32::MAX),
                )
            })?);
        }
        if let Some(v) = &raw.store.archive_max_mb {
            cfg.store.archive_max_mb = u64::try_from(*v.get_ref()).map_err(|_| {
                err(
                    v.span(),
                    format!(
                        "[store] archive_max_mb = {} must be 0 (no limit) or a positive number \
                         of MiB",
                        v.get_ref()
                    ),
                )
            })?;
        }
        if let Some(v) = raw.timeline.steps {
            if !(20..=crate::run::MAX_BUCKET_HISTORY).contains(v.get_ref()) {
                return Err(err(
                    v.span(),
                    format!(
                        "[timeline] steps = {} is outside 20..={} (a median needs at least 20 steps)",
                        v.get_ref(),
                        crate::run::MAX_BUCKET_HISTORY
                    ),
                ));
            }
            cfg.timeline.steps = v.into_inner();
        }
        Self::read_watchdog(raw.watchdog, raw.stragglers, &mut cfg, &err)?;
        // A broken `[nodes]` is one line where it is used (the dashboard's log and its node
        // key, `--nodes`); everything else in the file still applies.
        match parse_nodes(text, path, cfg.refresh.gpu_sample_ms) {
            Ok(n) => cfg.nodes = n,
            Err(e) => cfg.nodes.broken = Some(e.to_string()),
        }
        Self::bind_keys(raw.keys, &mut cfg, &err)?;
        Self::read_presets(raw.presets, &mut cfg, &err)?;
        Ok(cfg)
    }

    /// `[watchdog]` and `[stragglers]`: positive times and factors, a threshold in (0, 1) and a
    /// window the phase history holds.
    fn read_watchdog(
        watchdog: RawWatchdog,
        stragglers: RawStragglers,
        cfg: &mut Config,
        err: &impl Fn(std::ops::Range<usize>, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        for (field, slot) in [
            (watchdog.hang_floor_s, &mut cfg.watchdog.hang_floor_s),
            (watchdog.hang_factor, &mut cfg.watchdog.hang_factor),
            (watchdog.startup_s, &mut cfg.watchdog.startup_s),
            (watchdog.first_steps_s, &mut cfg.watchdog.first_steps_s),
        ] {
            if let Some(v) = field {
                let x = *v.get_ref();
                if !x.is_finite() || x <= 0.0 {
                    return Err(err(v.span(), format!("{x} must be a positive number")));
                }
                *slot = x;
            }
        }
        if let Some(b) = watchdog.stop_attached_on_hang {
            cfg.watchdog.stop_attached_on_hang = b;
        }
        if let Some(v) = stragglers.threshold {
            let x = *v.get_ref();
            // 1.0 or more would name the fastest rank's equals: every run has a straggler.
            if !(x > 0.0 && x < 1.0) {
                return Err(err(
                    v.span(),
                    format!("[stragglers] threshold = {x} must be between 0 and 1"),
                ));
            }
            cfg.stragglers.threshold = x;
        }
        if let Some(v) = stragglers.window {
            let max = crate::run::view::PHASE_HISTORY;
            if !(4..=max).contains(v.get_ref()) {
                return Err(err(
                    v.span(),
                    format!("[stragglers] window = {} is outside 4..={max}", v.get_ref()),
                ));
            }
            cfg.stragglers.window = v.into_inner();
        }
        Ok(())
    }

    /// `[keys]`: each key bound to its action, or unbound by `"none"`.
    fn bind_keys(
        keys: BTreeMap<Spanned<String>, Spanned<String>>,
        cfg: &mut Config,
        err: &impl Fn(std::ops::Range<usize>, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        for (key, action) in keys {
            let k = Key::parse(key.get_ref()).map_err(|m| err(key.span(), m))?;
            let name = action.get_ref().trim();
            if name == "none" || name.is_empty() {
                cfg.keys.unbind(&k);
                continue;
            }
            let a = Action::from_name(name).ok_or_else(|| {
                err(
                    action.span(),
                    format!(
                        "unknown action {name:?} for key {:?} (actions: {}, or \"none\" to unbind)",
                        key.get_ref(),
                        Action::ALL.map(|a| a.name()).join(", ")
                    ),
                )
            })?;
            cfg.keys.bind(k, a);
        }
        Ok(())
    }

    /// `[presets.NAME]`: environment overlays, each variable named properly and DDP's typed
    /// settings checked here rather than by every rank of the next launch.
    fn read_presets(
        presets: BTreeMap<String, BTreeMap<String, Spanned<EnvValue>>>,
        cfg: &mut Config,
        err: &impl Fn(std::ops::Range<usize>, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        for (name, vars) in presets {
            let mut preset = Preset::new();
            for (var, val) in vars {
                let span = val.span();
                let v = match val.into_inner() {
                    EnvValue::Bool(false) => None,
                    EnvValue::Bool(true) => Some("1".to_string()),
                    EnvValue::Int(i) => Some(i.to_string()),
                    EnvValue::Float(f) => Some(f.to_string()),
                    EnvValue::Str(s) if s.eq_ignore_ascii_case("unset") => None,
                    EnvValue::Str(s) => Some(s),
                };
                if !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || var.is_empty() {
                    return Err(err(
                        span,
                        format!("{var:?} is not an environment variable name"),
                    ));
                }
                preset.insert(var, v);
                // DDP's settings (`DDPTOP_DDP_*`) are typed: a bad one is refused here, not
                // by every rank of the next launch.
                if let Err(e) = crate::run::DdpSettings::of_overlay(&preset) {
                    return Err(err(span, e.0));
                }
            }
            cfg.presets.insert(name, preset);
        }
        Ok(())
    }

    /// The directory user themes are read from: `themes/` next to the config file.
    pub fn themes_dir(&self) -> Option<PathBuf> {
        self.path
            .as_ref()
            .and_then(|p| p.parent())
            .map(|d| d.join("themes"))
            .or_else(|| config_dir().map(|d| d.join("themes")))
    }

    pub fn preset(&self, name: &str) -> Option<&Preset> {
        self.presets.get(name)
    }
}

/// Write the commented default config (creating the directory), never overwriting a file.
pub fn write_default(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(DEFAULT_CONFIG.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 45: a config directory another user made in a shared parent (the /tmp fallback)
    /// is refused: its config would set the environment of every launch.
    #[test]
    fn a_config_planted_by_another_user_in_a_shared_parent_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            return; // only root can make a directory of another user's here
        }
        let root = tempfile::tempdir().unwrap();
        let theirs = crate::paths::dir_in_a_shared_parent(root.path(), "ddptop-config", true);
        std::fs::write(
            theirs.join("config.toml"),
            "[presets.x]\nNCCL_ALGO = \"Ring\"\n",
        )
        .unwrap();
        let e = Config::load(Some(&theirs.join("config.toml")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("belongs to uid 65534"), "{e}");
    }

    #[test]
    fn default_file_parses_to_the_defaults() {
        let cfg = Config::parse(DEFAULT_CONFIG, Path::new("config.toml")).unwrap();
        assert_eq!(cfg, Config::default());
    }

    #[test]
    fn stragglers_table_sets_threshold_and_window_and_checks_them() {
        let cfg = Config::parse(
            "[stragglers]\nthreshold = 0.8\nwindow = 40\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!((cfg.stragglers.threshold, cfg.stragglers.window), (0.8, 40));
        for bad in [
            "threshold = 1.0",
            "threshold = 0.0",
            "window = 2",
            "window = 1000",
        ] {
            let text = format!("[stragglers]\n{bad}\n");
            assert!(Config::parse(&text, Path::new("c.toml")).is_err(), "{bad}");
        }
    }

    #[test]
    fn launch_table_sizes_launches_and_checks_them() {
        let cfg = Config::parse(
            "[launch]\nsamples = 2048\nepochs = 3\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(
            cfg.launch,
            LaunchCfg {
                samples: Some(2048),
                epochs: Some(3)
            }
        );
        assert_eq!(Config::default().launch, LaunchCfg::default());
        for (bad, says) in [
            ("samples = 0", "samples = 0 must be a positive whole number"),
            ("samples = -5", "samples = -5 must be"),
            ("epochs = 0", "epochs = 0 must be a positive whole number"),
            (
                "epochs = 5000000000",
                "epochs = 5000000000 is more than 4294967295",
            ),
            ("sample = 10", "sample"),
        ] {
            let e = Config::parse(&format!("[launch]\n{bad}\n"), Path::new("c.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says) && e.contains("c.toml:2:"), "{bad}: {e}");
        }
    }

    #[test]
    fn store_table_bounds_the_step_archive_and_checks_it() {
        let parse = |t: &str| Config::parse(t, Path::new("c.toml"));
        assert_eq!(
            Config::default().store.archive_limit(),
            Some(ARCHIVE_MAX_MB << 20)
        );
        let cfg = parse("[store]\narchive_max_mb = 10\n").unwrap();
        assert_eq!(cfg.store.archive_limit(), Some(10 << 20));
        let cfg = parse("[store]\narchive_max_mb = 0\n").unwrap();
        assert_eq!(cfg.store.archive_limit(), None, "0: no limit");
        for (bad, says) in [
            (
                "archive_max_mb = -1",
                "archive_max_mb = -1 must be 0 (no limit) or a positive",
            ),
            ("archive_mb = 1", "archive_mb"),
        ] {
            let e = parse(&format!("[store]\n{bad}\n")).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("c.toml:2:"), "{bad}: {e}");
        }
    }

    #[test]
    fn nodes_table_sets_the_templates_and_checks_them() {
        let text = "[nodes]\nremote = \"ip netns exec {host} sh -c {cmd}\"\nstop = \"scancel --signal={sig} {slurm_step}\"\nlisten = \"10.0.0.1:0\"\nadvertise = \"head\"\n";
        let cfg = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(cfg.nodes.remote, "ip netns exec {host} sh -c {cmd}");
        assert_eq!(
            cfg.nodes.stop.as_deref(),
            Some("scancel --signal={sig} {slurm_step}")
        );
        assert_eq!(cfg.nodes.listen, Some("10.0.0.1:0".parse().unwrap()));
        assert_eq!(cfg.nodes.advertise.as_deref(), Some("head"));
        assert_eq!(
            Config::default().nodes.remote,
            "ssh -o BatchMode=yes {host} -- {cmd}"
        );
        // A broken [nodes] is one line (file:line) kept for where nodes are used; the rest of
        // the file applies.
        let broken = |text: &str| {
            let cfg = Config::parse(text, Path::new("c.toml")).unwrap();
            assert_eq!(cfg.nodes.hosts, Vec::<String>::new());
            cfg.nodes.broken.expect("broken")
        };
        let e = broken("theme = \"light\"\n[nodes]\nremote = \"ssh {host}\"\n");
        assert!(e.contains("needs {cmd}") && e.contains("c.toml:3:"), "{e}");
        assert!(broken("[nodes]\nlisten = \"nowhere\"\n").contains("not IP:PORT"));
        assert!(broken("[nodes]\nremot = \"x\"\n").contains("remot"));
        assert!(broken("nodes = 3\n").contains("c.toml"));
        let cfg = Config::parse(
            "theme = \"light\"\n[nodes]\nremot = \"x\"\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(cfg.theme, "light", "the rest of the file applies");
        assert!(cfg.nodes.options(vec!["a".into(), "b".into()]).is_err());
        // Other tables' errors still fail the file.
        assert!(Config::parse("them = 1\n[nodes]\n", Path::new("c.toml")).is_err());
    }

    #[test]
    fn nodes_hosts_are_the_dashboards_all_nodes_target() {
        let text = "[nodes]\nhosts = [\"gpu-a\", \"gpu-b=10.0.0.2\"]\ntls = true\n";
        let cfg = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(cfg.nodes.hosts, ["gpu-a", "gpu-b=10.0.0.2"]);
        let o = cfg.nodes.options(cfg.nodes.hosts.clone()).unwrap();
        assert_eq!(o.hosts, ["gpu-a", "gpu-b"]);
        assert_eq!(o.addrs, [None, Some("10.0.0.2".into())]);
        assert!(o.tls);
        for (bad, says) in [
            ("hosts = [\"gpu-a\"]", "names one node"),
            ("hosts = [\"gpu-a\", \"-oProxyCommand=x\"]", "c.toml:2:"),
            ("hosts = [\"gpu-a\", \"b c\"]", "not a host name"),
            ("hosts = \"gpu-a,gpu-b\"", "c.toml:2:"),
        ] {
            let cfg = Config::parse(&format!("[nodes]\n{bad}\n"), Path::new("c.toml")).unwrap();
            let e = cfg.nodes.broken.unwrap_or_default();
            assert!(e.contains(says) && !e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn nodes_gpu_source_tls_and_the_agents_rate() {
        use crate::supervisor::nodes::NodeGpuSource;
        let text = "[refresh]\ngpu_sample_ms = 500\n[nodes]\ngpu_source = \"dcgm\"\ndcgm_url = \"http://{addr}:9401/metrics\"\ntls = true\n";
        let cfg = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(
            cfg.nodes.gpu_source,
            NodeGpuSource::Dcgm("http://{addr}:9401/metrics".into())
        );
        assert!(cfg.nodes.tls);
        assert_eq!(cfg.nodes.sample_ms, 500);
        let d = Config::default();
        assert_eq!(
            (d.nodes.gpu_source, d.nodes.tls),
            (NodeGpuSource::Agent, false)
        );
        for (bad, says) in [
            ("gpu_source = \"smi\"", "use \"agent\", \"dcgm\" or \"off\""),
            (
                "gpu_source = \"dcgm\"\ndcgm_url = \"https://h/\"",
                "only http://",
            ),
            (
                "dcgm_url = \"http://h/\"",
                "only with gpu_source = \"dcgm\"",
            ),
        ] {
            let cfg = Config::parse(&format!("[nodes]\n{bad}\n"), Path::new("c.toml")).unwrap();
            let e = cfg.nodes.broken.unwrap_or_default();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("é\nx", 3), (2, 1));
    }

    #[test]
    fn presets_unset_and_values() {
        let text = "[presets.mine]\nA = \"1\"\nB = false\nC = \"unset\"\nD = 4\n";
        let cfg = Config::parse(text, Path::new("c.toml")).unwrap();
        let p = cfg.preset("mine").unwrap();
        assert_eq!(p["A"], Some("1".into()));
        assert_eq!(p["B"], None);
        assert_eq!(p["C"], None);
        assert_eq!(p["D"], Some("4".into()));
        assert!(cfg.preset("shm-memcpy").is_some(), "built-in presets stay");
    }

    /// DDP's settings in a preset are typed (issue 49): a bucket size of 0 or a word is refused
    /// when the config is read, in one line naming the variable; a good one (a TOML number too)
    /// is kept as the workers read it.
    #[test]
    fn a_presets_ddp_settings_are_checked() {
        for bad in ["0", "\"lots\"", "-1"] {
            let text = format!("[presets.t]\nDDPTOP_DDP_BUCKET_CAP_MB = {bad}\n");
            let e = Config::parse(&text, Path::new("c.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("DDPTOP_DDP_BUCKET_CAP_MB="), "{e}");
            assert!(e.contains("expected MiB above 0"), "{e}");
        }
        let text = "[presets.t]\nDDPTOP_DDP_BUCKET_CAP_MB = 5\nDDPTOP_DDP_STATIC_GRAPH = true\n";
        let cfg = Config::parse(text, Path::new("c.toml")).unwrap();
        let p = cfg.preset("t").unwrap();
        assert_eq!(p["DDPTOP_DDP_BUCKET_CAP_MB"], Some("5".into()));
        assert_eq!(p["DDPTOP_DDP_STATIC_GRAPH"], Some("1".into()));
    }
}
