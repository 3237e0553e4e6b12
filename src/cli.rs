//! Command-line interface: `ddptop` (dashboard), `ddptop run`, `ddptop runs`, `report`, `show`,
//! `diff`, `completions`, `man`, and the hidden `ddptop worker sim`. Only the arguments:
//! `main.rs` dispatches them to the front ends.
//!
//! Exit codes have one meaning each: 0 success, 1 a run failed or hung (or ddptop itself
//! failed), 2 bad input (flags, names, a broken config: a one-line message says what to fix),
//! 130 interrupted. Numeric flags are checked here, at parse time.

use crate::detect::BackendChoice;
use crate::plan::Globals;
use crate::protocol::Backend;
use crate::report::Format;
use crate::run::Fault;
use crate::run::{DataPath, Experiment, ModelName};
use crate::util::BadInput;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "ddptop",
    version,
    about = "A terminal dashboard for multi-GPU data-parallel training",
    long_about = "ddptop launches PyTorch DDP experiments on this machine (k = 1, 2, 4 GPUs) and shows \
                  per-GPU utilization, per-rank throughput, scaling efficiency, the gradient-bucket \
                  all-reduce timeline, the no_sync probe, an all-reduce bandwidth sweep and hangs. \
                  Without GPUs or PyTorch it runs on gloo (CPU) or on the built-in SIMULATED worker."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(flatten)]
    pub tui: TuiArgs,
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Data directory (database, run logs). Default: $DDPTOP_DATA_DIR or ~/.local/share/ddptop.
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Config file. Default: $DDPTOP_CONFIG or ~/.config/ddptop/config.toml.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Python interpreter that has torch (default: $DDPTOP_PYTHON, the config, python3).
    #[arg(long, global = true, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Directory holding the Python workers (the ddptop_worker package), for an installed
    /// ddptop away from its source tree. Default: $DDPTOP_WORKERS_DIR, else ./workers, a
    /// workers/ folder above the binary, or the source tree it was built from.
    #[arg(long, global = true, value_name = "DIR")]
    pub workers_dir: Option<PathBuf>,
    /// Launch on GPUs that another ddptop or process is using (refused by default); the run's
    /// figures are marked "GPUs shared".
    #[arg(long, global = true)]
    pub shared_gpus: bool,
    /// Launch NCCL without ddptop's NCCL profiler plugin (config: nccl_profiler = false). On by
    /// default: NCCL_PROFILER_PLUGIN names the plugin built beside ddptop (docs/profiler.md).
    #[arg(long, global = true)]
    pub no_nccl_profiler: bool,
}

impl GlobalArgs {
    /// The flags as the plain values `plan::setup` takes.
    pub fn globals(&self) -> Globals {
        Globals {
            data_dir: self.data_dir.clone(),
            config: self.config.clone(),
            python: self.python.clone(),
            workers_dir: self.workers_dir.clone(),
            shared_gpus: self.shared_gpus,
            no_nccl_profiler: self.no_nccl_profiler,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct TuiArgs {
    /// Colour theme (dark, light, high-contrast, or a file name in the config dir).
    #[arg(long)]
    pub theme: Option<String>,
    /// Backend for launches from the dashboard.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Machine profile of the simulated backend [default: h200-nvlink].
    #[arg(long, value_parser = profile)]
    pub profile: Option<String>,
    /// Leave runs going when ddptop quits.
    #[arg(long)]
    pub detach: bool,
    /// Leave the mouse to the terminal (no click or wheel in the dashboard; config: mouse = false).
    #[arg(long)]
    pub no_mouse: bool,
    /// Run without a terminal: comma-separated actions (names or keys), `wait-run`, `sleep:S`.
    #[arg(long, value_name = "STEPS")]
    pub script: Option<String>,
    /// Your own DDP training script and its arguments (last on the command line): `1`/`2`/`4`
    /// launch it at that k under torchrun, unchanged (docs/attach.md).
    #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "SCRIPT.py [ARGS]")]
    pub attach: Vec<String>,
    /// With --script: write the final screen as text to FILE.
    #[arg(long, value_name = "FILE", requires = "script")]
    pub screen_dump: Option<PathBuf>,
    /// Wall-clock speed-up of the simulated worker (its figures are unchanged).
    #[arg(long, default_value_t = 1.0, hide = true, allow_negative_numbers = true, value_parser = speed)]
    pub sim_speed: f64,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run an experiment headless, one launch per k, and print a table or JSON.
    Run(RunArgs),
    /// Run your own DDP training script under ddptop, unchanged: `ddptop attach --k 2 -- train.py
    /// ARGS` (torchrun per k, steps/samples/buckets through torch's hooks; docs/attach.md).
    Attach(AttachArgs),
    /// Measure DDP's bucket size and the NCCL settings on this machine and model, and
    /// recommend one only when it beats the default outside the noise (docs/methods.md).
    Tune(TuneArgs),
    /// List stored runs with their figures (speedup, efficiency, probe Δ, busbw).
    Runs(RunsArgs),
    /// Write a report of a sweep, a scaling curve or runs: Markdown, HTML, JSON or CSV, with plots.
    Report(ReportArgs),
    /// Everything stored about one run.
    Show(ShowArgs),
    /// Two runs side by side: settings, figures, versions.
    Diff(DiffArgs),
    /// Shell completions: `ddptop completions bash > ~/.local/share/bash-completion/completions/ddptop`.
    Completions(CompletionsArgs),
    /// The man page (roff): `ddptop man | man -l -`.
    Man(ManArgs),
    /// Where a dashboard second goes: NVML start, each NVML call, one frame (a table).
    #[command(hide = true)]
    BenchGpu(BenchGpuArgs),
    /// A multi-node run's GPU agent on another node (started by ddptop; docs/multinode.md).
    #[command(hide = true)]
    Agent(AgentArgs),
    /// Worker processes started by ddptop itself.
    #[command(hide = true)]
    Worker {
        #[command(subcommand)]
        kind: WorkerCmd,
    },
}

// The store-reading commands' arguments (`query` runs them).

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImageArg {
    Svg,
    Png,
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Runs to report: a full id or its end (`023011-9e4a`, `9e4a`). Default: the last sweep.
    #[arg(value_name = "RUN")]
    pub runs: Vec<String>,
    /// The most recent sweep (or run, when it was not part of one).
    #[arg(long, conflicts_with_all = ["runs", "sweep", "curve"])]
    pub last: bool,
    /// Every run of one sweep (its id, or the id of any of its runs).
    #[arg(long, value_name = "ID", conflicts_with_all = ["runs", "curve"])]
    pub sweep: Option<String>,
    /// The scaling curve RUN belongs to: the latest completed run per k with the same settings.
    #[arg(long, value_name = "RUN", conflicts_with = "runs")]
    pub curve: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Write the report to FILE (Markdown: its plots beside it) instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Image format of a Markdown report's plots.
    #[arg(long, value_enum, default_value_t = ImageArg::Svg)]
    pub images: ImageArg,
}

#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// The run: a full id or its end (`023011-9e4a`, `9e4a`).
    pub run: String,
    /// One JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RunsArgs {
    /// Only runs of this experiment.
    #[arg(long, value_enum)]
    pub experiment: Option<Experiment>,
    /// Only runs on this backend.
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Only runs started since: a date (2026-11-30), an RFC 3339 time, or an age (90m, 6h, 7d).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<f64>,
    /// At most this many runs, newest first.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// One JSON document.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// CSV, one row per run with its figures.
    #[arg(long)]
    pub csv: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    pub run_a: String,
    pub run_b: String,
    /// One JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell to write completions for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// Write ddptop.1 and one page per subcommand into DIR instead of printing ddptop.1.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// `ddptop bench-gpu` (run by `bench::main`).
#[derive(Debug, clap::Args)]
pub struct BenchGpuArgs {
    /// Samples to take.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub samples: u32,
    /// Pause between samples, ms (NVML's utilization window is its own).
    #[arg(long, default_value_t = 100)]
    pub period_ms: u64,
    /// Frames to draw for the frame-time figure.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub frames: u32,
}

#[derive(Debug, Subcommand)]
pub enum WorkerCmd {
    /// The simulated worker (cost model + noise).
    Sim(crate::sim::SimArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[arg(value_enum)]
    pub experiment: Experiment,
    /// World sizes to run, one launch each, in order.
    #[arg(long, value_delimiter = ',', default_value = "1,2", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub k: Vec<u32>,
    /// auto: nccl when torch sees CUDA, gloo when torch imports, else the SIMULATED worker.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Machine profile of the simulated backend: h200-nvlink or book-pcie.
    #[arg(long, value_parser = profile)]
    pub profile: Option<String>,
    /// Environment toggle for the launch, e.g. NCCL_P2P_DISABLE=1 (repeatable).
    #[arg(long = "env", value_name = "KEY=VAL", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// A named set of environment variables from the config's [presets] (repeatable; `--env`
    /// entries are applied on top).
    #[arg(long, value_name = "NAME")]
    pub preset: Vec<String>,
    /// Batch: per rank for weak and probe (default 256), global for strong (default 512).
    #[arg(long, allow_negative_numbers = true, value_parser = count_u32)]
    pub batch: Option<u32>,
    /// Epochs; the first is warm-up and never counted (with 1, the only epoch is timed,
    /// warm-up included: such runs form a curve of their own) [default: 2, or the config's
    /// `[launch] epochs`].
    #[arg(long, allow_negative_numbers = true, value_parser = count_u32)]
    pub epochs: Option<u32>,
    /// Samples per epoch, split across ranks [default: 60000; 8192 on gloo; or the config's
    /// `[launch] samples`].
    #[arg(long, allow_negative_numbers = true, value_parser = count_u64)]
    pub samples: Option<u64>,
    /// Model: the book's ResNet-18, or a tiny CNN (default on gloo, where ResNet-18 is slow).
    #[arg(long, value_enum)]
    pub model: Option<ModelName>,
    /// Where training batches come from.
    #[arg(long, value_enum, default_value_t = DataPath::Device)]
    pub data_path: DataPath,
    /// The flags that belong to one family each (`run::FamilyArgs`, in run/family/).
    #[command(flatten)]
    pub family: crate::run::FamilyArgs,
    /// Train on the real FashionMNIST raw files in DIR (nothing is downloaded; default: synthetic
    /// FashionMNIST-shaped images). `--env DDPTOP_DATASET_DIR=DIR` does the same.
    #[arg(long, value_name = "DIR")]
    pub dataset_dir: Option<PathBuf>,
    /// NVLink multicast (NCCL_NVLS_ENABLE): ddptop turns it off by default (it changes busbw on
    /// NVSwitch machines); `on` leaves the choice to NCCL.
    #[arg(long, value_name = "NVLS", value_parser = on_off())]
    pub nvls: Option<bool>,
    /// Fault injection: crash:STEP, raise:STEP, hang:STEP, silent:STEP, frozen:STEP, teardown:0,
    /// slowstart:SECONDS (sim and real workers), garbage[:LINES] (sim only); PyTorch workers
    /// only: uneven:RANK:STEPS, unused:LAYER, nojoin:RANK (RANK never calls
    /// init_process_group), mismatch:STEP (the last rank issues an extra all-reduce at STEP),
    /// slowlink:MS (every bucket all-reduce ends MS ms late: slower than one rank).
    #[arg(long)]
    pub inject: Option<Fault>,
    /// Run PyTorch's defaults instead of the chapter's two settings (float32 matmul precision
    /// "high", cudnn.benchmark on), which ddptop's PyTorch experiments apply by default.
    #[arg(long)]
    pub no_book_settings: bool,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Wall-clock speed-up of the simulated worker (its figures are unchanged).
    #[arg(long, default_value_t = 5.0, allow_negative_numbers = true, value_parser = speed)]
    pub sim_speed: f64,
    /// Relative noise of the simulated worker, 0 to 1 (default: the profile's).
    #[arg(long, allow_negative_numbers = true, value_parser = fraction)]
    pub sim_noise: Option<f64>,
    /// Watchdog: no hang threshold is shorter than this (seconds).
    #[arg(long, allow_negative_numbers = true, value_parser = seconds)]
    pub hang_floor: Option<f64>,
    /// Watchdog: time allowed from launch while a rank is in `init` (seconds).
    #[arg(long, allow_negative_numbers = true, value_parser = seconds)]
    pub startup_timeout: Option<f64>,
    /// Watchdog: time allowed in DDP's constructor, `ddp_init` (seconds; default 20).
    #[arg(long, allow_negative_numbers = true, value_parser = seconds)]
    pub ddp_init_timeout: Option<f64>,
    /// Watchdog: time a rank's first steps (cudnn autotuning, compiling, NCCL set-up) may take
    /// without progress (seconds; default 120).
    #[arg(long, value_parser = seconds)]
    pub first_steps_timeout: Option<f64>,
    /// Time the launcher gets to exit after every rank said bye (seconds; default 30); past it
    /// the tree is stopped and the run keeps its results with a warning.
    #[arg(long, allow_negative_numbers = true, value_parser = seconds)]
    pub teardown_timeout: Option<f64>,
    #[command(flatten)]
    pub nodes: NodeArgs,
}

/// Multi-node runs on torchrun's c10d rendezvous (docs/multinode.md).
#[derive(Debug, Clone, Default, Args)]
pub struct NodeArgs {
    /// Run across these nodes, one torchrun agent each: the first is this machine, the others
    /// are started through the config's [nodes] remote template (ssh by default). `HOST=ADDR`
    /// gives a node's address for torchrun's --local-addr (when its host name does not resolve
    /// to the interface the other nodes reach).
    #[arg(long, value_delimiter = ',', value_name = "HOST1,HOST2", value_parser = node_name)]
    pub nodes: Vec<String>,
    /// Processes per node [default: k / number of nodes].
    #[arg(long, requires = "nodes", allow_negative_numbers = true, value_parser = count_u32)]
    pub nproc_per_node: Option<u32>,
    /// Where ranks on other nodes report (TCP) [default: the config's, else every interface
    /// when another host is named, loopback otherwise; port 0 = any free port].
    #[arg(long, requires = "nodes", value_name = "IP:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// The name or address other nodes reach this machine by [default: the listen address,
    /// or this host name].
    #[arg(long, requires = "nodes", value_name = "HOST")]
    pub advertise: Option<String>,
    /// The c10d rendezvous endpoint [default: the advertised host, a free port].
    #[arg(long, requires = "nodes", value_name = "HOST:PORT")]
    pub rdzv_endpoint: Option<String>,
    /// Encrypt the TCP channel to the other nodes (TLS, a certificate made for the run; also
    /// `[nodes] tls = true`).
    #[arg(long, requires = "nodes")]
    pub tls: bool,
}

impl NodeArgs {
    /// The engine's node options: the config's `[nodes]` (`NodesCfg::options`, the dashboard's
    /// path too) under the flags; `None` without --nodes. A broken `[nodes]` table fails a
    /// `--nodes` run with its line, and is one warning line without `--nodes`.
    pub fn options(
        &self,
        cfg: &crate::config::NodesCfg,
    ) -> anyhow::Result<Option<crate::supervisor::nodes::NodesOptions>> {
        if self.nodes.is_empty() {
            if let Some(b) = &cfg.broken {
                eprintln!("ddptop: warning: {b} (only --nodes reads [nodes])");
            }
            return Ok(None);
        }
        let mut o = cfg.options(self.nodes.clone()).map_err(|b| {
            crate::util::BadInput(format!("{b}; fix the file or point --config elsewhere"))
        })?;
        o.nproc_per_node = self.nproc_per_node;
        o.listen = self.listen.or(o.listen);
        o.advertise = self.advertise.clone().or(o.advertise);
        o.rdzv_endpoint = self.rdzv_endpoint.clone();
        o.tls = self.tls || o.tls;
        Ok(Some(o))
    }
}

fn node_name(s: &str) -> Result<String, String> {
    crate::supervisor::nodes::check_entry(s).map(|()| s.to_string())
}

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Example: ddptop attach --k 1,2 --backend gloo -- examples/train_ddp.py --epochs 3"
)]
pub struct AttachArgs {
    /// World sizes, one launch of the script each, in order [default: every GPU; 2 on CPUs].
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub k: Vec<u32>,
    /// nccl: one GPU per rank; gloo: the CPU (GPUs hidden, so a script that picks its backend by
    /// torch.cuda.is_available() picks gloo); auto: nccl when torch sees CUDA, else gloo.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Environment setting for the launch, e.g. NCCL_P2P_DISABLE=1 (repeatable).
    #[arg(long = "env", value_name = "KEY=VAL", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// A named set of environment variables from the config's [presets] (repeatable).
    #[arg(long, value_name = "NAME")]
    pub preset: Vec<String>,
    /// NVLink multicast (NCCL_NVLS_ENABLE): off by default; `on` leaves it to NCCL.
    #[arg(long, value_name = "NVLS", value_parser = on_off())]
    pub nvls: Option<bool>,
    /// Fault injection on the script's last rank: crash:STEP, raise:STEP, hang:STEP,
    /// silent:STEP (a step is an optimizer step); slowstart:SECONDS on every rank;
    /// slow:RANK:FACTOR makes one rank FACTOR times slower (a straggler); nojoin:RANK (RANK
    /// never calls init_process_group), mismatch:STEP (an extra all-reduce after step STEP-1).
    #[arg(long)]
    pub inject: Option<Fault>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Watchdog: no hang threshold is shorter than this (seconds).
    #[arg(long, allow_negative_numbers = true, value_parser = seconds)]
    pub hang_floor: Option<f64>,
    /// Watchdog: time allowed from launch to the first step (seconds).
    #[arg(long, allow_negative_numbers = true, value_parser = seconds)]
    pub startup_timeout: Option<f64>,
    /// Watchdog: time the script's first steps (cudnn autotuning, torch.compile, NCCL set-up)
    /// may take without progress (seconds; default 120).
    #[arg(long, value_parser = seconds)]
    pub first_steps_timeout: Option<f64>,
    /// Stop the job when the watchdog calls it hung (default: report the hang with its
    /// evidence and leave your job running).
    #[arg(long)]
    pub stop_on_hang: bool,
    #[command(flatten)]
    pub nodes: NodeArgs,
    /// The training script and its arguments, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "SCRIPT.py [ARGS]"
    )]
    pub command: Vec<String>,
}

/// `on` or `off` (true for on).
fn on_off() -> impl clap::builder::TypedValueParser<Value = bool> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["on", "off"]).map(|s| s == "on")
}

/// The exit code of an error: 2 when the input was at fault, else 1.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    if e.chain().any(|c| c.downcast_ref::<BadInput>().is_some()) {
        2
    } else {
        1
    }
}

pub(crate) fn count_u32(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a positive whole number (1 or more)".into()),
    }
}

pub(crate) fn count_u64(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a positive whole number (1 or more)".into()),
    }
}

pub(crate) fn speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 1000.0 => Ok(x),
        _ => Err("must be a number > 0 and ≤ 1000 (1 = real time, 5 = five times faster)".into()),
    }
}

pub(crate) fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err("must be a number from 0 to 1 (0.02 = 2% noise)".into()),
    }
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 86_400.0 => Ok(x),
        _ => Err("must be a number of seconds > 0 and ≤ 86400".into()),
    }
}

pub(crate) fn profile(s: &str) -> Result<String, String> {
    match crate::costmodel::Profile::get(s) {
        Some(_) => Ok(s.to_string()),
        None => Err(format!(
            "unknown profile; known: {}",
            crate::costmodel::Profile::names().join(", ")
        )),
    }
}

pub(crate) fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not KEY=VAL (e.g. NCCL_P2P_DISABLE=1)"))?;
    if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("`{k}` is not a valid environment variable name"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// `--since`: an age (`90m`, `6h`, `7d`), a date (`2026-11-30`, UTC) or an RFC 3339 UTC time.
pub fn parse_since(s: &str) -> Result<f64, String> {
    let bad = || {
        format!(
            "`{s}` is not a time: use an age (90m, 6h, 7d), a date (2026-11-30) or 2026-11-30T08:00:00Z"
        )
    };
    let now = crate::util::unix_now();
    if let Some(unit) = s.chars().last().filter(|c| "smhd".contains(*c))
        && let Ok(n) = s[..s.len() - 1].parse::<f64>()
    {
        if !(n.is_finite() && n >= 0.0) {
            return Err(bad());
        }
        let secs = match unit {
            's' => 1.0,
            'm' => 60.0,
            'h' => 3600.0,
            _ => 86_400.0,
        };
        return Ok(now - n * secs);
    }
    let (date, time) = match s.split_once('T') {
        Some((d, t)) => (d, Some(t.trim_end_matches('Z'))),
        None => (s, None),
    };
    let mut it = date.split('-');
    let (Some(y), Some(m), Some(d), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return Err(bad());
    };
    let (y, m, d) = (
        y.parse::<i64>().map_err(|_| bad())?,
        m.parse::<u32>().map_err(|_| bad())?,
        d.parse::<u32>().map_err(|_| bad())?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    let mut secs = crate::util::days_from_civil(y, m, d) * 86_400;
    if let Some(t) = time {
        let parts: Vec<&str> = t.split(':').collect();
        if parts.len() < 2 || parts.len() > 3 {
            return Err(bad());
        }
        let num = |p: &str, max: u32| p.parse::<u32>().ok().filter(|v| *v <= max).ok_or_else(bad);
        secs += num(parts[0], 23)? as i64 * 3600 + num(parts[1], 59)? as i64 * 60;
        if let Some(sec) = parts.get(2) {
            secs += num(sec.split('.').next().unwrap_or(sec), 60)? as i64;
        }
    }
    Ok(secs as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_accepts_dates_times_and_ages() {
        assert_eq!(parse_since("2026-11-30"), Ok(1_795_996_800.0));
        assert_eq!(parse_since("2026-11-30T01:15:00Z"), Ok(1_796_001_300.0));
        let age = parse_since("2h").unwrap();
        assert!((crate::util::unix_now() - age - 7200.0).abs() < 5.0);
        for bad in ["yesterday", "2026-13-01", "2026-11-30T25:00", "-2h", "h"] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }
}

/// `ddptop agent`: started by ddptop on a multi-node run's other nodes (docs/multinode.md).
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// ddptop's listener: `tcp://HOST:PORT`, or `tls://HOST:PORT` (the certificate fingerprint
    /// is then the second line of stdin).
    #[arg(long, value_name = "URL")]
    pub connect: String,
    /// The run whose GPUs this agent reports.
    #[arg(long)]
    pub run_id: String,
    /// This node's name as `--nodes` gave it.
    #[arg(long)]
    pub node: String,
    /// Sample period (the dashboard's GPU rate).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub period_ms: u64,
    /// Made-up GPUs instead of NVML (tests; shown as SIMULATED).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub fake_gpus: Option<u32>,
}

/// The experiments `tune` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TuneExperiment {
    Weak,
    Strong,
}

#[derive(Debug, clap::Args)]
pub struct TuneArgs {
    /// World size to tune for (2 or more: at k=1 nothing communicates).
    #[arg(long, default_value_t = 2, value_parser = tune_k)]
    pub k: u32,
    #[arg(long, value_enum, default_value_t = TuneExperiment::Weak)]
    pub experiment: TuneExperiment,
    /// Wall-clock budget: `10m`, `90s`, `1h`. The finalists are cut to fit it.
    #[arg(long, default_value = "10m", value_parser = budget)]
    pub budget: f64,
    /// auto: nccl when torch sees CUDA, gloo when torch imports, else the SIMULATED worker.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Machine profile of the simulated backend: h200-nvlink or book-pcie.
    #[arg(long, value_parser = profile)]
    pub profile: Option<String>,
    /// Environment setting every candidate keeps, e.g. NCCL_P2P_DISABLE=1 (repeatable).
    #[arg(long = "env", value_name = "KEY=VAL", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// A preset from the config every candidate keeps (repeatable).
    #[arg(long, value_name = "NAME")]
    pub preset: Vec<String>,
    #[arg(long, value_enum)]
    pub model: Option<ModelName>,
    /// Batch: per rank for weak (default 256), global for strong (default 512).
    #[arg(long, value_parser = count_u32)]
    pub batch: Option<u32>,
    /// Epochs, the first of them warm-up [default: 2, or the config's `[launch] epochs`].
    #[arg(long, value_parser = count_u32)]
    pub epochs: Option<u32>,
    /// Samples per epoch, split across ranks [default: 60000; 8192 on gloo; or the config's
    /// `[launch] samples`].
    #[arg(long, value_parser = count_u64)]
    pub samples: Option<u64>,
    /// Bucket sizes to try (MiB, comma-separated) instead of 1, 5, 10, 50, 100, 1024 and a
    /// sixteenth and a quarter of the model's gradients.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(crate::run::BucketCapMb))]
    pub bucket_caps: Vec<crate::run::BucketCapMb>,
    /// Runs of the default and of each finalist (3 or more for a recommendation).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub repeats: u32,
    /// Candidates measured besides the default, best predicted first.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub finalists: u32,
    /// The smallest gain over the default (%, of medians) worth recommending.
    #[arg(long, default_value_t = 1.0, value_parser = gain)]
    pub min_gain: f64,
    /// Do not write the winner into the config file as a preset.
    #[arg(long)]
    pub no_save: bool,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Wall-clock speed-up of the simulated worker (its figures are unchanged).
    #[arg(long, default_value_t = 5.0, value_parser = speed)]
    pub sim_speed: f64,
    /// Relative noise of the simulated worker, 0 to 1 (default: the profile's).
    #[arg(long, value_parser = fraction)]
    pub sim_noise: Option<f64>,
    /// Tune your own script, given after `--`, through attach's bootstrap: DDP's settings go
    /// into the script's DDP constructor where that is safe (docs/tune.md), NCCL's into its
    /// environment.
    #[arg(long, requires = "command", conflicts_with_all = ["experiment", "model", "batch", "samples", "epochs", "profile"])]
    pub attach: bool,
    /// With --attach: the training script and its arguments, after `--`.
    #[arg(last = true, requires = "attach", value_name = "SCRIPT.py [ARGS]")]
    pub command: Vec<String>,
}

/// The k to tune: a k of 1 is refused with the reason, not only the range, because "1 is not
/// in 2..=64" reads as an arbitrary limit when it is the whole point of tuning.
fn tune_k(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(1) => Err("at k=1 nothing communicates, so there is nothing to tune: \
use --k 2 or more (the k=1 run is made anyway, to predict from)"
            .into()),
        Ok(k) if (2..=64).contains(&k) => Ok(k),
        _ => Err(format!("`{s}` is not a world size from 2 to 64")),
    }
}

fn gain(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=100.0).contains(&x) => Ok(x),
        _ => Err("must be a percentage from 0 to 100".into()),
    }
}

/// `10m`, `90s`, `1h`, `600` (seconds).
fn budget(s: &str) -> Result<f64, String> {
    let (num, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c),
        _ => (s, 's'),
    };
    let mult = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        _ => {
            return Err(format!(
                "`{s}`: use seconds, or a number with s, m or h (10m)"
            ));
        }
    };
    match num.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x * mult),
        _ => Err(format!(
            "`{s}`: use seconds, or a number with s, m or h (10m)"
        )),
    }
}

#[cfg(test)]
mod tune_args_tests {
    use super::{budget, tune_k};

    #[test]
    fn tune_k_of_one_says_why_it_is_refused() {
        assert_eq!(tune_k("2"), Ok(2));
        assert_eq!(tune_k("64"), Ok(64));
        assert!(tune_k("1").unwrap_err().contains("nothing communicates"));
        assert!(tune_k("0").unwrap_err().contains("from 2 to 64"));
        assert!(tune_k("65").is_err() && tune_k("two").is_err());
    }

    #[test]
    fn budgets_read_as_seconds_minutes_and_hours() {
        assert_eq!(budget("10m"), Ok(600.0));
        assert_eq!(budget("90s"), Ok(90.0));
        assert_eq!(budget("1h"), Ok(3600.0));
        assert_eq!(budget("45"), Ok(45.0));
        assert!(budget("0m").is_err());
        assert!(budget("10d").unwrap_err().contains("10m"));
        assert!(budget("m").is_err());
    }
}
