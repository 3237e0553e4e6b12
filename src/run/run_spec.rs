//! What to launch: `RunSpec`, everything a run needs to be reproduced (its family, k, backend,
//! model, batch, NCCL settings, fault). Apart from the names it is made of (`spec`) so that
//! `family`, which uses those names, and `RunSpec`, which holds a `Family`, do not import each
//! other; its curve key is `curve`'s (`RunSpec::curve_key`).

use super::family::{Experiment, Family, FamilyKind, WorkerInput};
use super::fault::Fault;
use super::nccl::NcclSettings;
use super::spec::{AttachTarget, DEFAULT_PROFILE, DataPath, DataSource, ModelName, TorchSettings};
use crate::protocol::Backend;
use serde::{Deserialize, Serialize};

/// What to launch. Everything a run needs to be reproduced is here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The experiment and the settings that belong to it alone (fsdp's strategy, jax's
    /// sharding, the attached script, the tch loop's variant).
    pub family: Family,
    pub k: u32,
    pub backend: Backend,
    /// Machine profile of the simulated backend (`h200-nvlink`, `book-pcie`); `None` elsewhere.
    pub profile: Option<String>,
    pub model: ModelName,
    /// Per-rank batch for weak and probe, global batch for strong.
    pub batch: u32,
    pub epochs: u32,
    pub samples: u64,
    /// NCCL (and other) environment settings of the launch.
    pub nccl: NcclSettings,
    pub inject: Option<Fault>,
    /// A k=1 control run launched alongside a probe.
    pub control: bool,
    #[serde(default)]
    pub data_path: DataPath,
    #[serde(default)]
    pub data_source: DataSource,
    /// The book's TF32/cudnn.benchmark settings (`Off` where there is no PyTorch model).
    #[serde(default)]
    pub torch: TorchSettings,
}

impl RunSpec {
    /// A launch with the experiment's defaults: its default batch, 2 epochs (the first is
    /// warm-up), 60,000 samples, the backend's default model and profile, ddptop's NCCL defaults.
    pub fn new(experiment: Experiment, k: u32, backend: Backend) -> RunSpec {
        RunSpec {
            family: Family::of(experiment),
            k,
            backend,
            profile: (backend == Backend::Sim).then(|| DEFAULT_PROFILE.to_string()),
            model: ModelName::default_for(backend),
            batch: experiment.default_batch(),
            epochs: 2,
            samples: 60_000,
            nccl: NcclSettings::default(),
            inject: None,
            control: false,
            data_path: DataPath::Device,
            data_source: DataSource::Synthetic,
            torch: experiment.torch_settings(TorchSettings::Book, backend),
        }
    }

    /// The family's name (`Family::experiment`).
    pub fn experiment(&self) -> Experiment {
        self.family.experiment()
    }
    /// The family's answers (`run::family`).
    pub fn kind(&self) -> &'static dyn FamilyKind {
        self.experiment().kind()
    }
    /// What the family's worker command line is made of.
    pub fn worker_input(&self) -> WorkerInput<'_> {
        WorkerInput {
            family: &self.family,
            k: self.k,
            backend: self.backend,
            model: self.model,
            batch: self.batch,
            epochs: self.epochs,
            samples: self.samples,
            data_path: self.data_path,
            data_source: &self.data_source,
            torch: self.torch,
        }
    }
    /// An attached run's script.
    pub fn attach(&self) -> Option<&AttachTarget> {
        self.family.attach()
    }
    pub fn per_rank_batch(&self) -> u32 {
        if self.kind().global_batch() {
            (self.batch / self.k.max(1)).max(1)
        } else {
            self.batch
        }
    }
    pub fn global_batch(&self) -> u32 {
        self.per_rank_batch() * self.k
    }
    /// Worker processes of this run (see `Experiment::processes`).
    pub fn processes(&self) -> u32 {
        self.experiment().processes(self.k)
    }
    /// `batch 256/rank` or `global batch 512`.
    pub fn batch_label(&self) -> String {
        if self.kind().global_batch() {
            format!("global batch {}", self.batch)
        } else {
            format!("batch {}/rank", self.batch)
        }
    }
}
