//! The scaling curve a run belongs to. Speedup and efficiency divide a run's throughput by the
//! k=1 run of the same curve, so the key holds everything that changes the figure.

use super::family::Experiment;
use super::family::Family;
use super::nccl::NcclSettings;
use super::run_spec::RunSpec;
use super::spec::{DataPath, DataSource, ModelName, TorchSettings};
use crate::protocol::Backend;
use std::fmt;

/// The batch a curve holds fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Batch {
    /// Weak scaling (and the probe): each rank's batch.
    PerRank(u32),
    /// Strong scaling: the global batch, split k ways.
    Global(u32),
}

impl fmt::Display for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Batch::PerRank(b) => write!(f, "batch {b}/rank"),
            Batch::Global(b) => write!(f, "global batch {b}"),
        }
    }
}

/// Which epochs are timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Warmup {
    /// The first epoch is warm-up and never counted.
    FirstEpochExcluded,
    /// `--epochs 1`: the only epoch is timed, warm-up included.
    Included,
}

impl Warmup {
    pub fn of(epochs: u32) -> Self {
        if epochs <= 1 {
            Warmup::Included
        } else {
            Warmup::FirstEpochExcluded
        }
    }
}

/// Everything that changes a run's samples/s besides k.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CurveKey {
    pub experiment: Experiment,
    pub model: ModelName,
    pub batch: Batch,
    pub samples: u64,
    pub epochs: u32,
    pub warmup: Warmup,
    pub data_path: DataPath,
    pub data_source: DataSource,
    pub backend: Backend,
    pub profile: Option<String>,
    /// Normalized: unsets that change nothing are left out.
    pub nccl: NcclSettings,
    /// The family's own settings (`Family::for_curve`): jax's sharding, fsdp's strategy and
    /// optimizer (DDP and FSDP are two curves), an attached script and its arguments, the tch
    /// loop's variant.
    pub family: Family,
    /// The book's TF32/cudnn.benchmark settings: with and without are two curves.
    pub torch: TorchSettings,
    /// An injected fault (`--inject`, as written): a fault run is never a point of a clean
    /// curve, nor the k=1 baseline a clean run is divided by.
    pub fault: Option<String>,
}

/// The same machine and settings, either experiment (weak and strong side by side).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Setting {
    pub backend: Backend,
    pub profile: Option<String>,
    pub model: ModelName,
    pub data_path: DataPath,
    pub data_source: DataSource,
    pub nccl: NcclSettings,
}

impl RunSpec {
    /// The scaling curve this run is a point of: runs are comparable only when it matches.
    pub fn curve_key(&self) -> CurveKey {
        CurveKey::of(self)
    }
}

impl CurveKey {
    pub fn of(s: &RunSpec) -> CurveKey {
        CurveKey {
            experiment: s.experiment(),
            model: s.model,
            batch: if s.kind().global_batch() {
                Batch::Global(s.batch)
            } else {
                Batch::PerRank(s.batch)
            },
            samples: s.samples,
            epochs: s.epochs,
            warmup: Warmup::of(s.epochs),
            data_path: s.data_path,
            data_source: s.data_source.clone(),
            backend: s.backend,
            profile: s.profile.clone(),
            nccl: s.nccl.normalized(),
            family: s.family.for_curve(),
            torch: s.torch,
            fault: s.inject.as_ref().map(|f| f.to_string()),
        }
    }

    pub fn setting(&self) -> Setting {
        Setting {
            backend: self.backend,
            profile: self.profile.clone(),
            model: self.model,
            data_path: self.data_path,
            data_source: self.data_source.clone(),
            nccl: self.nccl.clone(),
        }
    }

    /// `sim h200-nvlink resnet18`, then what is not default: the NCCL settings, the DataLoader,
    /// the real dataset, a warm-up-included epoch.
    pub fn title(&self) -> String {
        let mut parts = vec![match (&self.backend, &self.profile) {
            (Backend::Sim, Some(p)) => format!("sim {p}"),
            (b, _) => b.as_str().to_string(),
        }];
        match self.family.attach() {
            // An attached script's model is its own: the command line names the curve.
            Some(a) => parts.push(a.label()),
            None => parts.push(self.model.as_str().to_string()),
        }
        if !self.nccl.is_default() {
            parts.push(self.nccl.short());
        }
        if let Some(badge) = self.data_path.badge() {
            parts.push(badge.into());
        }
        if let DataSource::Real(_) = self.data_source {
            parts.push("real data".into());
        }
        if self.warmup == Warmup::Included {
            parts.push("warm-up timed".into());
        }
        parts.extend(self.family.title_part());
        if self.torch == TorchSettings::Off && self.experiment.book_settings_apply(self.backend) {
            parts.push("PyTorch defaults".into());
        }
        parts.extend(self.family.optimizer_part());
        if let Some(f) = &self.fault {
            parts.push(format!("fault {f}"));
        }
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{AttachTarget, JaxSharding, NcclVar, OptimizerName, TorchStrategy};

    #[test]
    fn everything_that_changes_the_figure_is_in_the_key() {
        let base = RunSpec::new(Experiment::Weak, 1, Backend::Nccl);
        let k = base.curve_key();
        let changed: Vec<RunSpec> = vec![
            RunSpec {
                epochs: 1,
                ..base.clone()
            },
            RunSpec {
                samples: 8192,
                ..base.clone()
            },
            RunSpec {
                batch: 128,
                ..base.clone()
            },
            RunSpec {
                model: ModelName::Tiny,
                ..base.clone()
            },
            RunSpec {
                data_path: DataPath::Loader,
                ..base.clone()
            },
            RunSpec {
                data_path: DataPath::FastLoader,
                ..base.clone()
            },
            RunSpec {
                data_source: DataSource::Real("/d".into()),
                ..base.clone()
            },
            RunSpec {
                backend: Backend::Gloo,
                ..base.clone()
            },
            RunSpec {
                family: Family::Strong,
                ..base.clone()
            },
            {
                let mut s = base.clone();
                s.nccl.toggle(NcclVar::P2pDisable);
                s
            },
            {
                let mut s = base.clone();
                s.nccl.toggle(NcclVar::NvlsEnable);
                s
            },
            RunSpec {
                family: Family::of(Experiment::Jax),
                ..base.clone()
            },
            RunSpec {
                family: Family::Jax {
                    sharding: JaxSharding::Fsdp,
                },
                ..base.clone()
            },
            RunSpec {
                family: Family::of(Experiment::Fsdp),
                ..base.clone()
            },
            RunSpec {
                family: Family::Fsdp {
                    strategy: TorchStrategy::Ddp,
                    optimizer: OptimizerName::Adam,
                },
                ..base.clone()
            },
            RunSpec {
                family: Family::Fsdp {
                    strategy: TorchStrategy::Fsdp,
                    optimizer: OptimizerName::Sgd,
                },
                ..base.clone()
            },
            RunSpec {
                family: Family::Attach {
                    target: Some(AttachTarget {
                        script: "/home/u/train.py".into(),
                        args: vec!["--epochs".into(), "3".into()],
                        cwd: "/home/u".into(),
                    }),
                },
                ..base.clone()
            },
            RunSpec {
                family: Family::of(Experiment::Handrolled),
                ..base.clone()
            },
            RunSpec {
                family: Family::Handrolled {
                    hand: crate::run::HandRolled::DEFICITS[2],
                },
                ..base.clone()
            },
        ];
        // An attached script's working folder is not part of its curve.
        let attach = |cwd: &str| {
            RunSpec {
                family: Family::Attach {
                    target: Some(AttachTarget {
                        script: "/home/u/train.py".into(),
                        args: Vec::new(),
                        cwd: cwd.into(),
                    }),
                },
                ..base.clone()
            }
            .curve_key()
        };
        assert_eq!(attach("/home/u"), attach("/tmp"));
        for s in changed {
            assert_ne!(s.curve_key(), k, "{s:?}");
        }
        // k and the control flag are not part of the curve.
        let same = RunSpec {
            k: 2,
            control: true,
            ..base.clone()
        };
        assert_eq!(same.curve_key(), k);
        // A fault run is a curve of its own (issue 46): never a point, nor the baseline, of
        // the clean one.
        let faulted = RunSpec {
            k: 2,
            inject: Some("slow:1:1.5".parse().unwrap()),
            ..base.clone()
        };
        assert_ne!(faulted.curve_key(), k);
        assert!(
            faulted.curve_key().title().ends_with("fault slow:1:1.5"),
            "{}",
            faulted.curve_key().title()
        );
    }

    #[test]
    fn an_attached_script_names_its_curve() {
        let mut s = RunSpec::new(Experiment::Attach, 1, Backend::Gloo);
        s.family = Family::Attach {
            target: Some(AttachTarget {
                script: "/home/u/train.py".into(),
                args: vec!["--lr".into(), "0.1".into()],
                cwd: "/home/u".into(),
            }),
        };
        assert_eq!(s.curve_key().title(), "gloo train.py --lr 0.1");
    }

    #[test]
    fn a_p2p_off_curve_is_titled_by_its_settings() {
        let mut s = RunSpec::new(Experiment::Weak, 1, Backend::Nccl);
        assert_eq!(s.curve_key().title(), "nccl resnet18");
        s.nccl.toggle(NcclVar::P2pDisable);
        assert_eq!(s.curve_key().title(), "nccl resnet18 P2P_DISABLE=1");
    }

    #[test]
    fn hand_rolled_curves_are_titled_by_their_switches() {
        let mut s = RunSpec::new(Experiment::Handrolled, 2, Backend::Gloo);
        assert_eq!(s.curve_key().title(), "gloo tiny single+star");
        s.family = Family::Handrolled {
            hand: crate::run::HandRolled::DEFICITS[2],
        };
        assert_eq!(s.curve_key().title(), "gloo tiny threads+ring");
    }

    #[test]
    fn fsdp_curves_are_titled_by_strategy_and_a_non_default_optimizer() {
        let mut s = RunSpec::new(Experiment::Fsdp, 1, Backend::Nccl);
        assert_eq!(s.family.optimizer(), OptimizerName::Adam);
        assert_eq!(s.curve_key().title(), "nccl resnet18 fsdp");
        s.family = Family::Fsdp {
            strategy: TorchStrategy::Ddp,
            optimizer: OptimizerName::Sgd,
        };
        assert_eq!(s.curve_key().title(), "nccl resnet18 ddp sgd");
    }
}
