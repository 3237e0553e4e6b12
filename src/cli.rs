//! Command-line interface: `ddptop` (dashboard), `ddptop run`, `ddptop runs`, `report`, `show`,
//! `diff`, `completions`, `man`, and the hidden `ddptop worker sim`. Only the arguments:
//! `main.rs` dispatches them to the front ends.
//!
//! Exit codes have one meaning each: 0 success, 1 a run failed or hung (or ddptop itself
//! failed), 2 bad input (flags, names, a broken config: a one-line message says what to fix),
//! 130 interrupted. Numeric flags are checked here, at parse time.

use crate::run::{DataPath, Experiment, JaxSharding, ModelName, OptimizerName, TorchStrategy};
use crate::run::{HandDispatch, HandReduce};
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
}

#[derive(Debug, Clone, Args)]
pub struct TuiArgs {
    /// Colour theme (dark, light, high-contrast, or a file name in the config dir).
    #[arg(long)]
    pub theme: Option<String>,
    /// Backend for launches from the dashboard.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
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
    /// List stored runs with their figures (speedup, efficiency, probe Δ, busbw).
    Runs(crate::report::cmd::RunsArgs),
    /// Write a report of a sweep, a scaling curve or runs: Markdown, HTML, JSON or CSV, with plots.
    Report(crate::report::cmd::ReportArgs),
    /// Everything stored about one run.
    Show(crate::report::cmd::ShowArgs),
    /// Two runs side by side: settings, figures, versions.
    Diff(crate::report::cmd::DiffArgs),
    /// Shell completions: `ddptop completions bash > ~/.local/share/bash-completion/completions/ddptop`.
    Completions(crate::report::cmd::CompletionsArgs),
    /// The man page (roff): `ddptop man | man -l -`.
    Man(crate::report::cmd::ManArgs),
    /// Where a dashboard second goes: NVML start, each NVML call, one frame (a table).
    #[command(hide = true)]
    BenchGpu(crate::gpu::bench::BenchGpuArgs),
    /// A multi-node run's GPU agent on another node (started by ddptop; docs/multinode.md).
    #[command(hide = true)]
    Agent(crate::agent::AgentArgs),
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
    /// One JAX process over k devices: the jitted step, its HLO receipt (collectives XLA wrote)
    /// and a k=1 equality check; needs jax, flax and optax.
    Jax,
    /// PyTorch FSDP2 (or DDP, --strategy) with Adam: memory per rank (exact shard bytes, the
    /// 16P/k prediction, the CUDA peak) and each block's all-gathers and reduce-scatters.
    Fsdp,
    /// The hand-rolled loop in Rust on tch: one process drives k replicas and all-reduces their
    /// gradients by tensor copies after the backward (--dispatch, --reduce; --deficits runs all
    /// three variants beside DDP). Needs the ddptop-handrolled binary.
    Handrolled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DispatchArg {
    /// One thread issues every replica's work in turn (the book's single Python thread).
    Single,
    /// One OS thread per replica.
    Threads,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReduceArg {
    /// Gather to device 0, sum, send back (the book's hub).
    Star,
    /// Chunked reduce-scatter then all-gather around a ring of device-to-device copies.
    Ring,
}

impl From<DispatchArg> for HandDispatch {
    fn from(a: DispatchArg) -> Self {
        match a {
            DispatchArg::Single => HandDispatch::Single,
            DispatchArg::Threads => HandDispatch::Threads,
        }
    }
}

impl From<ReduceArg> for HandReduce {
    fn from(a: ReduceArg) -> Self {
        match a {
            ReduceArg::Star => HandReduce::Star,
            ReduceArg::Ring => HandReduce::Ring,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StrategyArg {
    /// fully_shard on each residual block, then the root: state sharded over the k ranks.
    Fsdp,
    /// DistributedDataParallel: every rank holds the whole state.
    Ddp,
}

impl From<StrategyArg> for TorchStrategy {
    fn from(a: StrategyArg) -> Self {
        match a {
            StrategyArg::Fsdp => TorchStrategy::Fsdp,
            StrategyArg::Ddp => TorchStrategy::Ddp,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OptimizerArg {
    /// The book's plain SGD: no optimizer state.
    Sgd,
    /// Adam: two fp32 moments per parameter (16P bytes of state in all).
    Adam,
}

impl From<OptimizerArg> for OptimizerName {
    fn from(a: OptimizerArg) -> Self {
        match a {
            OptimizerArg::Sgd => OptimizerName::Sgd,
            OptimizerArg::Adam => OptimizerName::Adam,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShardingArg {
    /// Parameters and optimizer state replicated on every device.
    Data,
    /// Parameters and optimizer state split along the mesh (FSDP-style).
    Fsdp,
}

impl From<ShardingArg> for JaxSharding {
    fn from(a: ShardingArg) -> Self {
        match a {
            ShardingArg::Data => JaxSharding::Data,
            ShardingArg::Fsdp => JaxSharding::Fsdp,
        }
    }
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

impl From<ExperimentArg> for Experiment {
    fn from(a: ExperimentArg) -> Self {
        match a {
            ExperimentArg::Weak => Experiment::Weak,
            ExperimentArg::Strong => Experiment::Strong,
            ExperimentArg::Probe => Experiment::Probe,
            ExperimentArg::Allreduce => Experiment::Allreduce,
            ExperimentArg::Jax => Experiment::Jax,
            ExperimentArg::Fsdp => Experiment::Fsdp,
            ExperimentArg::Handrolled => Experiment::Handrolled,
        }
    }
}

impl From<ModelArg> for ModelName {
    fn from(a: ModelArg) -> Self {
        match a {
            ModelArg::Resnet18 => ModelName::Resnet18,
            ModelArg::Tiny => ModelName::Tiny,
        }
    }
}

impl From<DataPathArg> for DataPath {
    fn from(a: DataPathArg) -> Self {
        match a {
            DataPathArg::Device => DataPath::Device,
            DataPathArg::Loader => DataPath::Loader,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[arg(value_enum)]
    pub experiment: ExperimentArg,
    /// World sizes to run, one launch each, in order.
    #[arg(long, value_delimiter = ',', default_value = "1,2", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub k: Vec<u32>,
    /// auto: nccl when torch sees CUDA, gloo when torch imports, else the SIMULATED worker.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
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
    /// warm-up included: such runs form a curve of their own).
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = count_u32)]
    pub epochs: u32,
    /// Samples per epoch, split across ranks [default: 60000; 8192 on gloo].
    #[arg(long, allow_negative_numbers = true, value_parser = count_u64)]
    pub samples: Option<u64>,
    /// Model: the book's ResNet-18, or a tiny CNN (default on gloo, where ResNet-18 is slow).
    #[arg(long, value_enum)]
    pub model: Option<ModelArg>,
    /// Where training batches come from.
    #[arg(long, value_enum, default_value_t = DataPathArg::Device)]
    pub data_path: DataPathArg,
    /// jax: how parameters are laid out on the mesh (the batch is always split).
    #[arg(long, value_enum, default_value_t = ShardingArg::Data)]
    pub sharding: ShardingArg,
    /// fsdp: run only this strategy [default: FSDP then DDP at each k, as the dashboard does].
    #[arg(long, value_enum)]
    pub strategy: Option<StrategyArg>,
    /// Optimizer of PyTorch runs [default: adam for fsdp, sgd (the book's) elsewhere].
    #[arg(long, value_enum)]
    pub optimizer: Option<OptimizerArg>,
    /// handrolled: who issues the replicas' work.
    #[arg(long, value_enum, default_value_t = DispatchArg::Single)]
    pub dispatch: DispatchArg,
    /// handrolled: how the gradients are all-reduced.
    #[arg(long, value_enum, default_value_t = ReduceArg::Star)]
    pub reduce: ReduceArg,
    /// handrolled: at each k run DDP (weak) and the hand-rolled loop as single+star,
    /// threads+star and threads+ring, interleaved, then print the deficits table.
    #[arg(long)]
    pub deficits: bool,
    /// Train on the real FashionMNIST raw files in DIR (nothing is downloaded; default: synthetic
    /// FashionMNIST-shaped images). `--env DDPTOP_DATASET_DIR=DIR` does the same.
    #[arg(long, value_name = "DIR")]
    pub dataset_dir: Option<PathBuf>,
    /// NVLink multicast (NCCL_NVLS_ENABLE): ddptop turns it off by default (it changes busbw on
    /// NVSwitch machines); `on` leaves the choice to NCCL.
    #[arg(long, value_enum)]
    pub nvls: Option<Switch>,
    /// Fault injection: crash:STEP, raise:STEP, hang:STEP, silent:STEP, frozen:STEP, teardown:0,
    /// slowstart:SECONDS (sim and real workers), garbage[:LINES] (sim only).
    #[arg(long, value_parser = parse_fault)]
    pub inject: Option<String>,
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
    /// The engine's node options, the config's `[nodes]` under the flags; `None` without --nodes.
    pub fn options(
        &self,
        cfg: &crate::config::NodesCfg,
    ) -> Option<crate::supervisor::nodes::NodesOptions> {
        if self.nodes.is_empty() {
            return None;
        }
        let mut o = crate::supervisor::nodes::NodesOptions::new(self.nodes.clone());
        o.nproc_per_node = self.nproc_per_node;
        o.listen = self.listen.or(cfg.listen);
        o.advertise = self.advertise.clone().or_else(|| cfg.advertise.clone());
        o.rdzv_endpoint = self.rdzv_endpoint.clone();
        o.remote = cfg.remote.clone();
        o.stop = cfg.stop.clone();
        o.tls = self.tls || cfg.tls;
        o.gpu_source = cfg.gpu_source.clone();
        o.sample_ms = cfg.sample_ms;
        Some(o)
    }
}

fn node_name(s: &str) -> Result<String, String> {
    let ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:@[]".contains(c))
    };
    if s.split_once('=').map_or(ok(s), |(h, a)| ok(h) && ok(a)) {
        Ok(s.to_string())
    } else {
        Err(format!("`{s}` is not a host name"))
    }
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
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Environment setting for the launch, e.g. NCCL_P2P_DISABLE=1 (repeatable).
    #[arg(long = "env", value_name = "KEY=VAL", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// A named set of environment variables from the config's [presets] (repeatable).
    #[arg(long, value_name = "NAME")]
    pub preset: Vec<String>,
    /// NVLink multicast (NCCL_NVLS_ENABLE): off by default; `on` leaves it to NCCL.
    #[arg(long, value_enum)]
    pub nvls: Option<Switch>,
    /// Fault injection on the script's last rank: crash:STEP, raise:STEP, hang:STEP,
    /// silent:STEP (a step is an optimizer step); slowstart:SECONDS on every rank.
    #[arg(long, value_parser = parse_fault)]
    pub inject: Option<String>,
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

/// Input ddptop refuses: a one-line message saying what to do; exit code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// The exit code of an error: 2 when the input was at fault, else 1.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    if e.chain().any(|c| c.downcast_ref::<BadInput>().is_some()) {
        2
    } else {
        1
    }
}

fn count_u32(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a positive whole number (1 or more)".into()),
    }
}

fn count_u64(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a positive whole number (1 or more)".into()),
    }
}

fn speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 1000.0 => Ok(x),
        _ => Err("must be a number > 0 and ≤ 1000 (1 = real time, 5 = five times faster)".into()),
    }
}

fn fraction(s: &str) -> Result<f64, String> {
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

fn profile(s: &str) -> Result<String, String> {
    match crate::costmodel::Profile::get(s) {
        Some(_) => Ok(s.to_string()),
        None => Err(format!(
            "unknown profile; known: {}",
            crate::costmodel::Profile::names().join(", ")
        )),
    }
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
