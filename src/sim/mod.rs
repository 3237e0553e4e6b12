//! The simulated worker: `ddptop worker sim …` (hidden from the main help).
//!
//! Without `--rank` it acts as a launcher, like torchrun: it starts one rank process per GPU,
//! each in a session of its own, waits for them, and stops the rest when one fails. Each rank
//! speaks protocol v1 over the same socket as a real worker; its numbers come from the cost
//! model of a machine profile plus noise, and it says so (`backend: sim`, `timing: model`).

pub mod client;
pub mod launcher;
pub mod rank;

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Machine profile: h200-nvlink or book-pcie.
    #[arg(long, default_value = "h200-nvlink")]
    pub profile: String,
    #[arg(long, default_value = "weak")]
    pub experiment: String,
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
    pub inject: Option<String>,
    /// Wall-clock speed-up: 10 runs ten times faster than the modelled machine (figures unchanged).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Relative noise (σ) on every modelled time; default: the profile's.
    #[arg(long)]
    pub noise: Option<f64>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// The last rank exits with code 3 at STEP.
    Crash(u64),
    /// The last rank raises an exception at STEP (real workers: a Python exception; sim: the
    /// rank reports the error and stays blocked, its peers wait in the all-reduce, as on NCCL).
    Raise(u64),
    /// Every rank stops making progress at STEP; heartbeats continue.
    Hang(u64),
    /// The last rank stops at STEP and sends nothing more, heartbeats included.
    Silent(u64),
    /// Rank 0 sends N bad lines on its own connection (default 4) and two intruder connections.
    Garbage(u64),
    /// Every rank sends its result and bye, then blocks instead of exiting (a teardown hang, as
    /// in NCCL's `destroy_process_group`): ddptop has every bye but the launcher never exits.
    /// Written `teardown:0` (the step is ignored, as by the Python workers).
    Teardown,
    /// The last rank stops at STEP and nothing of it runs any more: no heartbeat, no reader,
    /// no dead-man switch (Python: a C call holding the GIL). Only a signal ends it.
    Frozen(u64),
    /// Every rank's first step first burns SECONDS of CPU (wall time, whatever the speed-up), as
    /// cudnn.benchmark's autotuning or a compile does: slow, busy, healthy.
    SlowStart(u64),
    /// From the first step on, RANK sleeps (FACTOR - 1) x its own step time in every step's
    /// data wait (a slow input pipeline): a straggler. The other ranks wait for it in the
    /// all-reduce, inside their backward, as DDP makes them.
    Slow { rank: u32, factor: f64 },
}

impl Fault {
    pub fn parse(s: &str) -> Result<Fault, String> {
        let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
        let step = || {
            arg.parse::<u64>()
                .map_err(|_| format!("fault `{s}`: expected {kind}:STEP with STEP a number"))
        };
        match kind {
            "crash" => Ok(Fault::Crash(step()?)),
            "raise" => Ok(Fault::Raise(step()?)),
            "hang" => Ok(Fault::Hang(step()?)),
            "silent" => Ok(Fault::Silent(step()?)),
            "frozen" => Ok(Fault::Frozen(step()?)),
            "teardown" => {
                step()?;
                Ok(Fault::Teardown)
            }
            "slowstart" => arg.parse::<u64>().map(Fault::SlowStart).map_err(|_| {
                format!("fault `{s}`: expected slowstart:SECONDS with SECONDS a whole number")
            }),
            "slow" => {
                let bad = || {
                    format!(
                        "fault `{s}`: expected slow:RANK:FACTOR, FACTOR above 1 (1.5: 1.5x slower)"
                    )
                };
                let (rank, factor) = arg.split_once(':').ok_or_else(bad)?;
                let rank = rank.parse::<u32>().map_err(|_| bad())?;
                let factor = factor.parse::<f64>().map_err(|_| bad())?;
                // Up to 100x: a bigger factor is a hang, which has its own fault.
                if !(factor > 1.0 && factor <= 100.0) {
                    return Err(bad());
                }
                Ok(Fault::Slow { rank, factor })
            }
            "garbage" if arg.is_empty() => Ok(Fault::Garbage(4)),
            "garbage" => Ok(Fault::Garbage(step()?)),
            _ => Err(format!(
                "unknown fault `{s}`: use crash:STEP, raise:STEP, hang:STEP, silent:STEP, frozen:STEP, teardown:0, garbage[:LINES], slowstart:SECONDS or slow:RANK:FACTOR"
            )),
        }
    }
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
    if let Some(f) = &args.inject {
        Fault::parse(f).map_err(anyhow::Error::msg)?;
    }
    match args.rank {
        None => launcher::run(&args),
        Some(rank) => rank::run(&args, rank),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse() {
        assert_eq!(Fault::parse("crash:5"), Ok(Fault::Crash(5)));
        assert_eq!(Fault::parse("hang:12"), Ok(Fault::Hang(12)));
        assert_eq!(Fault::parse("silent:3"), Ok(Fault::Silent(3)));
        assert_eq!(Fault::parse("garbage"), Ok(Fault::Garbage(4)));
        assert_eq!(Fault::parse("garbage:100000"), Ok(Fault::Garbage(100_000)));
        assert_eq!(Fault::parse("raise:7"), Ok(Fault::Raise(7)));
        // The Python workers' DDPTOP_INJECT kinds, with the same spelling.
        assert_eq!(Fault::parse("teardown:0"), Ok(Fault::Teardown));
        assert_eq!(Fault::parse("frozen:4"), Ok(Fault::Frozen(4)));
        assert_eq!(Fault::parse("slowstart:25"), Ok(Fault::SlowStart(25)));
        assert!(Fault::parse("slowstart").is_err());
        assert_eq!(
            Fault::parse("slow:1:1.5"),
            Ok(Fault::Slow {
                rank: 1,
                factor: 1.5
            })
        );
        for bad in [
            "slow",
            "slow:1",
            "slow:x:1.5",
            "slow:1:1",
            "slow:1:0.5",
            "slow:1:nan",
        ] {
            assert!(Fault::parse(bad).is_err(), "{bad}");
        }
        assert!(Fault::parse("teardown").is_err());
        assert!(Fault::parse("frozen:x").is_err());
        assert!(Fault::parse("hang").is_err());
        assert!(Fault::parse("explode:1").is_err());
    }
}
