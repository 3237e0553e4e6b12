//! The simulated worker: `ddptop worker sim …` (hidden from the main help).
//!
//! Without `--rank` it acts as a launcher, like torchrun: it starts one rank process per GPU,
//! each in a session of its own, waits for them, and stops the rest when one fails. Each rank
//! speaks protocol v1 over the same socket as a real worker; its numbers come from the cost
//! model of a machine profile plus noise, and it says so (`backend: sim`, `timing: model`).

pub mod client;
pub mod launcher;
pub mod rank;

use crate::run::{Experiment, Fault};
use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Machine profile: h200-nvlink or book-pcie.
    #[arg(long, default_value = "h200-nvlink")]
    pub profile: String,
    /// weak, strong, probe or allreduce (the families the cost model has).
    #[arg(long, value_enum, default_value_t = Experiment::default())]
    pub experiment: Experiment,
    #[arg(long, default_value_t = 1)]
    pub world_size: u32,
    /// This process's rank; without it the process is the launcher.
    #[arg(long)]
    pub rank: Option<u32>,
    /// Per-rank batch (weak, probe) or global batch (strong).
    #[arg(long, default_value_t = 256)]
    pub batch: u32,
    #[arg(long, default_value_t = 2)]
    pub epochs: u32,
    #[arg(long, default_value_t = 60_000)]
    pub samples: u64,
    /// NCCL switches the run was launched with (KEY=VAL), which the profile models.
    #[arg(long = "env", value_name = "KEY=VAL")]
    pub env: Vec<String>,
    /// Fault injection: crash:STEP, raise:STEP, hang:STEP, silent:STEP, frozen:STEP, teardown:0,
    /// garbage[:LINES], slowstart:SECONDS, slow:RANK:FACTOR.
    #[arg(long)]
    pub inject: Option<Fault>,
    /// Wall-clock speed-up: 10 runs ten times faster than the modelled machine (figures unchanged).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Relative noise (σ) on every modelled time; default: the profile's.
    #[arg(long)]
    pub noise: Option<f64>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Entry point of `ddptop worker sim`.
pub fn main(args: SimArgs) -> anyhow::Result<i32> {
    if crate::costmodel::Profile::get(&args.profile).is_none() {
        anyhow::bail!(
            "unknown profile `{}`; known: {}",
            args.profile,
            crate::costmodel::Profile::names().join(", ")
        );
    }
    match args.rank {
        None => launcher::run(&args),
        Some(rank) => rank::run(&args, rank),
    }
}
