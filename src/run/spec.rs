//! What a run is made of: the experiment, its settings, its status (`RunSpec`, in `run_spec`,
//! puts them together).

use crate::protocol::Backend;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// The simulated backend's machine profile when none is named.
pub const DEFAULT_PROFILE: &str = "h200-nvlink";

/// How the JAX experiment lays out parameters and optimizer state on its mesh (the batch is
/// always split along the mesh axis): the PartitionSpec changes, the training step does not.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, Default, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum JaxSharding {
    /// Replicated on every device (data parallelism).
    #[default]
    #[value(help = "Parameters and optimizer state replicated on every device")]
    Data,
    /// Split along the mesh axis (FSDP-style): XLA gathers them where they are used.
    #[value(help = "Parameters and optimizer state split along the mesh (FSDP-style)")]
    Fsdp,
}

crate::util::names!(JaxSharding {
    Data => "data",
    Fsdp => "fsdp",
});

/// The chapter's two PyTorch settings: float32 matmul precision "high" (TF32 on tensor cores)
/// and `torch.backends.cudnn.benchmark = True`. They change the figure (about 1% on one H200), so
/// they are a setting of the run and part of its curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, Default)]
#[serde(rename_all = "snake_case")]
pub enum TorchSettings {
    /// Applied by the worker (the default for ddptop's PyTorch experiments).
    Book,
    /// PyTorch's own defaults (`--no-book-settings`); also every run stored before ddptop
    /// applied them, and experiments without a PyTorch model (all-reduce, JAX, the simulator).
    #[default]
    Off,
    /// An attached script's own choice: ddptop changes nothing and reports what it saw.
    Script,
}

crate::util::names!(TorchSettings {
    Book => "book",
    Off => "off",
    Script => "script",
});

impl TorchSettings {
    /// What a screen or report says of it.
    pub fn label(self) -> &'static str {
        match self {
            TorchSettings::Book => "book settings (matmul precision high, cudnn.benchmark on)",
            TorchSettings::Off => {
                "PyTorch defaults (matmul precision highest, cudnn.benchmark off)"
            }
            TorchSettings::Script => "the script's own settings",
        }
    }
}

/// How the `fsdp` experiment holds the training state: sharded over the k ranks, or replicated.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, Default, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum TorchStrategy {
    /// `fully_shard` on each residual block, then the root: 16P/k bytes of state per rank.
    #[default]
    #[value(
        help = "fully_shard on each residual block, then the root: state sharded over the k ranks"
    )]
    Fsdp,
    /// DistributedDataParallel with `ZeroRedundancyOptimizer` (ZeRO stage 1): weights and
    /// gradients whole, the optimizer state of the parameters each rank owns: 8P + 8P/k with Adam.
    #[value(
        help = "DDP with ZeroRedundancyOptimizer (ZeRO-1): only the optimizer state is sharded over the k ranks"
    )]
    Zero1,
    /// DistributedDataParallel: every rank holds all 16P bytes.
    #[value(help = "DistributedDataParallel: every rank holds the whole state")]
    Ddp,
}

crate::util::names!(TorchStrategy {
    Fsdp => "fsdp",
    Zero1 => "zero1",
    Ddp => "ddp",
});

/// The optimizer of a PyTorch run: the book's plain SGD (no state), or Adam (8 bytes of state
/// per parameter, which makes the 16P of the memory rule real).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, Default, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerName {
    #[default]
    #[value(help = "The book's plain SGD: no optimizer state")]
    Sgd,
    #[value(help = "Adam: two fp32 moments per parameter (16P bytes of state in all)")]
    Adam,
}

crate::util::names!(OptimizerName {
    Sgd => "sgd",
    Adam => "adam",
});

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ModelName {
    Resnet18,
    Tiny,
}

crate::util::names!(ModelName {
    Resnet18 => "resnet18",
    Tiny => "tiny",
});

/// Why the simulated backend refuses any model but ResNet-18: its cost model is ResNet-18's, and
/// a curve labelled with another model would be a lie.
pub const SIM_MODEL_ONLY: &str = "the simulated backend models ResNet-18 only (its buckets and step times come from the book's measurements); drop --model or use --backend gloo/nccl";

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Starting,
    Running,
    /// An attached job the watchdog judged hung and left running (attach reports, it does not
    /// kill): live, not final; back to `Running` when a step arrives.
    Stalled,
    Completed,
    Failed,
    Hung,
    Stopped,
}

crate::util::names!(RunStatus {
    Starting => "starting",
    Running => "running",
    Stalled => "stalled",
    Completed => "completed",
    Failed => "failed",
    Hung => "hung",
    Stopped => "stopped",
});

impl RunStatus {
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            RunStatus::Starting | RunStatus::Running | RunStatus::Stalled
        )
    }
    /// Whether the run's figures may be shown: a completed run's as results, a starting or
    /// running one's as live figures; a failed, hung or stopped run shows none.
    pub fn shows_results(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Running | RunStatus::Starting | RunStatus::Stalled
        )
    }
}

/// Where training batches come from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, Default, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum DataPath {
    /// Tensors resident on the device, sliced per step: no input pipeline cost.
    #[default]
    #[value(help = "Batches sliced from tensors already on the device (no input pipeline)")]
    Device,
    /// The book's pipeline exactly: PIL images through torchvision's `Resize(64)` and
    /// `ToTensor`, a `DataLoader` with a `DistributedSampler` and 2 workers, no pinning, workers
    /// started afresh each epoch.
    #[value(
        help = "The book's torchvision pipeline (PIL images, Resize + ToTensor, DataLoader with 2 workers and a DistributedSampler): shows when input limits scaling"
    )]
    Loader,
    /// ddptop's faster DataLoader: tensor resize; on GPUs pinned memory and 2 persistent
    /// workers (on the CPU the rank loads its own batches).
    #[value(
        help = "ddptop's faster DataLoader (tensor resize; on GPUs pinned memory and persistent workers): the gap to `loader` is the book's pipeline cost"
    )]
    #[serde(rename = "fast-loader")]
    FastLoader,
}

crate::util::names!(DataPath {
    Device => "device",
    Loader => "loader",
    FastLoader => "fast-loader",
});

impl DataPath {
    /// The next one in the dashboard's `d` cycle: device, the book's loader, the fast loader.
    pub fn toggled(self) -> Self {
        match self {
            DataPath::Device => DataPath::Loader,
            DataPath::Loader => DataPath::FastLoader,
            DataPath::FastLoader => DataPath::Device,
        }
    }
    /// What a screen's badge or a curve's title says of it (nothing for device data).
    pub fn badge(self) -> Option<&'static str> {
        match self {
            DataPath::Device => None,
            DataPath::Loader => Some("book DataLoader"),
            DataPath::FastLoader => Some("fast DataLoader"),
        }
    }
}

/// What the training data is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash, Default)]
#[serde(rename_all = "snake_case")]
pub enum DataSource {
    /// FashionMNIST-shaped synthetic images (deterministic).
    #[default]
    Synthetic,
    /// The real FashionMNIST raw files in this folder (nothing is downloaded).
    Real(PathBuf),
}

impl DataSource {
    /// The environment variable `--env` used to name the dataset folder before `--dataset-dir`.
    pub const ENV: &'static str = "DDPTOP_DATASET_DIR";

    /// `synthetic` or `real:/path` (the store's column).
    pub fn to_stored(&self) -> String {
        match self {
            DataSource::Synthetic => "synthetic".into(),
            DataSource::Real(p) => format!("real:{}", p.display()),
        }
    }
    pub fn from_stored(s: &str) -> Option<Self> {
        match s {
            "synthetic" => Some(DataSource::Synthetic),
            _ => s
                .strip_prefix("real:")
                .map(|p| DataSource::Real(PathBuf::from(p))),
        }
    }
}

impl fmt::Display for DataSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataSource::Synthetic => f.write_str("synthetic"),
            DataSource::Real(p) => write!(f, "real FashionMNIST ({})", p.display()),
        }
    }
}

/// The script an attached run starts (`torchrun … SCRIPT ARGS`, in the folder ddptop was
/// started from). Script and arguments are part of the curve key: `1`/`2`/`4` of the same
/// command line form one scaling curve.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttachTarget {
    /// Absolute path of the script.
    pub script: PathBuf,
    pub args: Vec<String>,
    /// The script's working directory (relative paths in its arguments mean what they meant).
    pub cwd: PathBuf,
}

impl AttachTarget {
    /// Check the script (an existing file, `.py`) and make its path absolute against `cwd`.
    pub fn new(
        script: &std::path::Path,
        args: Vec<String>,
        cwd: &std::path::Path,
    ) -> Result<Self, String> {
        let abs = if script.is_absolute() {
            script.to_path_buf()
        } else {
            cwd.join(script)
        };
        if !abs.is_file() {
            return Err(format!(
                "{}: no such script (ddptop attach runs a Python training script: ddptop attach -- train.py ARGS)",
                script.display()
            ));
        }
        if abs.extension().and_then(|e| e.to_str()) != Some("py") {
            return Err(format!(
                "{}: not a .py file (ddptop attach starts it as `torchrun SCRIPT.py ARGS`)",
                script.display()
            ));
        }
        Ok(AttachTarget {
            script: abs,
            args,
            cwd: cwd.to_path_buf(),
        })
    }

    /// `train.py --epochs 3`: the script's file name and its arguments.
    pub fn label(&self) -> String {
        let name = self.script.file_name().map_or_else(
            || self.script.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        std::iter::once(name)
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The one "does k fit" check (`max_k` = 0: CPUs or simulation, no limit); `Err` says why not.
pub fn fits(k: u32, max_k: u32) -> Result<(), String> {
    if k == 0 {
        return Err("k must be at least 1".into());
    }
    if max_k > 0 && k > max_k {
        return Err(format!("k={k} needs {k} GPUs; this machine has {max_k}"));
    }
    Ok(())
}

/// The backend the host launches on, as the header shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HostBackend {
    /// Not known (headless listings, tests).
    #[default]
    Unknown,
    Sim {
        profile: Option<String>,
    },
    Gloo,
    Nccl,
}

impl HostBackend {
    pub fn new(backend: Backend, profile: Option<String>) -> Self {
        match backend {
            Backend::Sim => HostBackend::Sim { profile },
            Backend::Gloo => HostBackend::Gloo,
            Backend::Nccl => HostBackend::Nccl,
        }
    }
    pub fn is_simulated(&self) -> bool {
        matches!(self, HostBackend::Sim { .. })
    }
}

impl fmt::Display for HostBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostBackend::Unknown => Ok(()),
            HostBackend::Sim { profile: Some(p) } => write!(f, "SIMULATED {p}"),
            HostBackend::Sim { profile: None } => f.write_str("SIMULATED"),
            HostBackend::Gloo => f.write_str("gloo (CPU)"),
            HostBackend::Nccl => f.write_str("NCCL"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{Experiment, HandDispatch, HandReduce, RunSpec};
    use clap::ValueEnum;

    /// The names table (`util::names!`), serde's snake_case names and clap's value names are
    /// three derivations of one spelling: they must agree, or the store, the protocol and the
    /// command line would spell a value differently.
    fn agree<T>(all: &[T])
    where
        T: Copy + Serialize + ValueEnum + std::fmt::Display + std::str::FromStr + PartialEq,
        T: std::fmt::Debug,
    {
        for v in all {
            let name = v.to_string();
            assert_eq!(serde_json::to_value(v).unwrap(), name.as_str(), "{v:?}");
            if let Some(p) = v.to_possible_value() {
                assert_eq!(p.get_name(), name, "{v:?}");
            }
            assert!(name.parse::<T>().ok() == Some(*v), "{name} round-trips");
        }
        assert!("no-such-name".parse::<T>().is_err());
    }

    #[test]
    fn names_serde_and_clap_agree() {
        agree(Experiment::all());
        agree(&JaxSharding::ALL);
        agree(&TorchStrategy::ALL);
        agree(&OptimizerName::ALL);
        agree(&ModelName::ALL);
        agree(&DataPath::ALL);
        agree(&HandDispatch::ALL);
        agree(&HandReduce::ALL);
        agree(&Backend::ALL);
        for s in RunStatus::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for t in TorchSettings::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
    }

    /// Issue 48: the tch and JAX workers' settings are listed like the DDP workers'.
    #[test]
    fn the_tch_and_jax_workers_list_their_settings() {
        let result = |json: &str| -> crate::protocol::ResultMsg {
            serde_json::from_str(&format!(
                r#"{{"rank":0,"step":4,"t":1.0,"samples_per_s":10.0,"timed_epochs":1,"bucket_bytes":[],{json}}}"#
            ))
            .unwrap()
        };
        let now = std::time::Instant::now();
        let view =
            |e| super::super::RunView::new("r".into(), RunSpec::new(e, 1, Backend::Gloo), now, 0.0);

        let mut hand = view(Experiment::Handrolled);
        hand.note_torch_seen(&result(
            r#""experiment":"handrolled","matmul_precision":"highest","cudnn_benchmark":true"#,
        ));
        let label = hand.torch_label().unwrap();
        assert!(
            label.starts_with("the book's cudnn.benchmark on; tch has no matmul-precision setting"),
            "{label}"
        );
        assert!(
            label.ends_with("seen: matmul precision highest, cudnn.benchmark on"),
            "{label}"
        );

        let mut jax = view(Experiment::Jax);
        assert_eq!(jax.torch_label(), None, "nothing said before its result");
        jax.note_torch_seen(&result(
            r#""experiment":"jax","jax_matmul_precision":"tensorfloat32""#,
        ));
        assert_eq!(
            jax.torch_label().as_deref(),
            Some("jax_default_matmul_precision tensorfloat32 (the book's matmul precision high)")
        );
        // The simulator has no settings at all.
        let sim = super::super::RunView::new(
            "s".into(),
            RunSpec::new(Experiment::Handrolled, 1, Backend::Sim),
            now,
            0.0,
        );
        assert_eq!(sim.torch_label(), None);
    }
}
