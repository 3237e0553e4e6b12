//! Which backend to use: `auto` picks nccl when torch sees CUDA, gloo when torch imports, sim
//! otherwise, and says which it picked and why.

use crate::protocol::Backend;
use crate::supervisor::launch::{PythonEnv, find_python, probe_torch, probe_torch_installed};
use std::path::Path;

/// The backend asked for (`--backend`): one of the three, or `auto` to pick by what torch sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    Auto,
    Sim,
    Gloo,
    Nccl,
}

#[derive(Debug, Clone)]
pub struct Resolved {
    pub backend: Backend,
    pub python: Option<PythonEnv>,
    pub torch: Option<String>,
    /// GPUs torch sees (0 without CUDA).
    pub gpus: u32,
    /// One line for the user: what was picked and why.
    pub note: String,
}

pub fn resolve(
    arg: BackendChoice,
    python: Option<&Path>,
    workers: Option<&Path>,
    torchrun: Option<&Path>,
) -> anyhow::Result<Resolved> {
    if arg == BackendChoice::Sim {
        return Ok(Resolved {
            backend: Backend::Sim,
            python: None,
            torch: None,
            gpus: 0,
            note: "backend sim: SIMULATED (cost model + noise)".into(),
        });
    }
    // An explicit gloo asks torch nothing about CUDA: finding it installed is enough, and
    // saves each `ddptop run --backend gloo` the seconds of importing it.
    let probe = match arg {
        BackendChoice::Gloo => probe_torch_installed,
        _ => probe_torch,
    };
    let torch =
        find_python(python, workers, torchrun).and_then(|py| probe(&py.python).map(|t| (py, t)));
    match (arg, torch) {
        (BackendChoice::Auto, Err(why)) => Ok(Resolved {
            backend: Backend::Sim,
            python: None,
            torch: None,
            gpus: 0,
            note: format!("backend auto → sim (SIMULATED): {why}"),
        }),
        (_, Err(why)) => anyhow::bail!("backend {arg:?} is not available: {why}"),
        (arg, Ok((py, (version, gpus)))) => {
            let backend = match arg {
                BackendChoice::Nccl if gpus == 0 => {
                    anyhow::bail!(
                        "backend nccl needs CUDA, but torch {version} sees no GPU; use --backend gloo"
                    )
                }
                BackendChoice::Nccl => Backend::Nccl,
                BackendChoice::Gloo => Backend::Gloo,
                _ if gpus > 0 => Backend::Nccl,
                _ => Backend::Gloo,
            };
            let note = match (arg, backend) {
                (BackendChoice::Auto, Backend::Nccl) => {
                    format!("backend auto → nccl: torch {version} sees {gpus} GPU(s)")
                }
                (BackendChoice::Auto, _) => {
                    format!("backend auto → gloo (CPU): torch {version} sees no GPU")
                }
                (_, Backend::Gloo) => format!("backend gloo (CPU): torch {version}"),
                _ => format!(
                    "backend {}: torch {version}, {gpus} GPU(s)",
                    backend.as_str()
                ),
            };
            Ok(Resolved {
                backend,
                python: Some(py),
                torch: Some(version),
                gpus,
                note,
            })
        }
    }
}
