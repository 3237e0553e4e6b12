//! Command-line interface: `ddptop` (dashboard), `ddptop run`, `ddptop runs`, and the hidden
//! `ddptop worker sim`.

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
    /// Directory holding the ddptop_worker package.
    #[arg(long, global = true, value_name = "DIR", hide = true)]
    pub workers_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct TuiArgs {
    /// Colour theme (dark, light, high-contrast, or a file name in the config dir).
    #[arg(long)]
    pub theme: Option<String>,
    /// Backend for launches from the dashboard.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Machine profile of the simulated backend.
    #[arg(long, default_value = "h200-nvlink")]
    pub profile: String,
    /// Leave runs going when ddptop quits.
    #[arg(long)]
    pub detach: bool,
    /// Run without a terminal: comma-separated actions (names or keys), `wait-run`, `sleep:S`.
    #[arg(long, value_name = "STEPS")]
    pub script: Option<String>,
    /// With --script: write the final screen as text to FILE.
    #[arg(long, value_name = "FILE", requires = "script")]
    pub screen_dump: Option<PathBuf>,
    /// Wall-clock speed-up of the simulated worker (its figures are unchanged).
    #[arg(long, default_value_t = 1.0, hide = true)]
    pub sim_speed: f64,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run an experiment headless, one launch per k, and print a table or JSON.
    Run(RunArgs),
    /// List stored runs.
    Runs(RunsArgs),
    /// Worker processes started by ddptop itself.
    #[command(hide = true)]
    Worker {
        #[command(subcommand)]
        kind: WorkerCmd,
    },
}

#[derive(Debug, Subcommand)]
pub enum WorkerCmd {
    /// The simulated worker (cost model + noise).
    Sim(crate::sim::SimArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Auto,
    Sim,
    Gloo,
    Nccl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExperimentArg {
    /// Per-rank batch fixed (default 256), k ranks.
    Weak,
    /// Global batch fixed (default 512) split k ways.
    Strong,
    /// The no_sync probe (interleaved synced/no_sync blocks, plus a k=1 control).
    Probe,
    /// All-reduce bandwidth sweep by size.
    Allreduce,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DataPathArg {
    /// Batches sliced from tensors already on the device (no input pipeline).
    Device,
    /// The book's DataLoader (DistributedSampler, worker processes): shows when input limits scaling.
    Loader,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelArg {
    Resnet18,
    Tiny,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[arg(value_enum)]
    pub experiment: ExperimentArg,
    /// World sizes to run, one launch each, in order.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub k: Vec<u32>,
    /// auto: nccl when torch sees CUDA, gloo when torch imports, else the SIMULATED worker.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Machine profile of the simulated backend: h200-nvlink or book-pcie.
    #[arg(long)]
    pub profile: Option<String>,
    /// Environment toggle for the launch, e.g. NCCL_P2P_DISABLE=1 (repeatable).
    #[arg(long = "env", value_name = "KEY=VAL", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// A named set of environment variables from the config's [presets] (repeatable; `--env`
    /// entries are applied on top).
    #[arg(long, value_name = "NAME")]
    pub preset: Vec<String>,
    /// Batch: per rank for weak and probe (default 256), global for strong (default 512).
    #[arg(long)]
    pub batch: Option<u32>,
    /// Epochs; the first is warm-up and never counted (with 1, the only epoch is timed).
    #[arg(long, default_value_t = 2)]
    pub epochs: u32,
    /// Samples per epoch, split across ranks.
    #[arg(long, default_value_t = 60_000)]
    pub samples: u64,
    /// Model: the book's ResNet-18, or a tiny CNN (default on gloo, where ResNet-18 is slow).
    #[arg(long, value_enum)]
    pub model: Option<ModelArg>,
    /// Where training batches come from.
    #[arg(long, value_enum, default_value_t = DataPathArg::Device)]
    pub data_path: DataPathArg,
    /// Fault injection: crash:STEP, raise:STEP, hang:STEP, silent:STEP (sim and real workers),
    /// garbage[:LINES] (sim only).
    #[arg(long, value_parser = parse_fault)]
    pub inject: Option<String>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Wall-clock speed-up of the simulated worker (its figures are unchanged).
    #[arg(long, default_value_t = 5.0)]
    pub sim_speed: f64,
    /// Relative noise of the simulated worker (default: the profile's).
    #[arg(long)]
    pub sim_noise: Option<f64>,
    /// Watchdog: no hang threshold is shorter than this (seconds).
    #[arg(long)]
    pub hang_floor: Option<f64>,
    /// Watchdog: time allowed from launch to the first step (seconds).
    #[arg(long)]
    pub startup_timeout: Option<f64>,
}

#[derive(Debug, Clone, Args)]
pub struct RunsArgs {
    #[arg(long)]
    pub json: bool,
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not KEY=VAL (e.g. NCCL_P2P_DISABLE=1)"))?;
    if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("`{k}` is not a valid environment variable name"));
    }
    Ok((k.to_string(), v.to_string()))
}

fn parse_fault(s: &str) -> Result<String, String> {
    crate::sim::Fault::parse(s).map(|_| s.to_string())
}

/// Parse, dispatch, return the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Cmd::Worker {
            kind: WorkerCmd::Sim(a),
        }) => crate::sim::main(a),
        Some(Cmd::Run(a)) => {
            runtime().and_then(|rt| rt.block_on(crate::headless::run(&cli.global, a)))
        }
        Some(Cmd::Runs(a)) => crate::headless::list_runs(&cli.global, &a),
        None => crate::tui::main(&cli.global, &cli.tui),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ddptop: {e:#}");
            1
        }
    }
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
