//! `fsdp`: PyTorch FSDP2, ZeRO-1 or DDP (`TorchStrategy`) on the weak experiment's model and
//! batch, with Adam by default: memory per rank and the per-block all-gathers and
//! reduce-scatters. Without `--strategy` the plan pairs all three at each k.

use super::{Experiment, Family, FamilyArgs, FamilyKind, Worker, WorkerInput, flags};
use crate::run::spec::{OptimizerName, TorchStrategy};
use serde_json::json;

pub struct Fsdp;

impl FamilyKind for Fsdp {
    fn experiment(&self) -> Experiment {
        Experiment::Fsdp
    }
    fn name(&self) -> &'static str {
        "fsdp"
    }
    fn help(&self) -> Option<&'static str> {
        Some(
            "PyTorch FSDP2, ZeRO-1 and DDP (or one, --strategy) with Adam: memory per rank (exact shard bytes, the 16P/k, 8P+8P/k, 16P predictions, the CUDA peak) and each block's all-gathers and reduce-scatters",
        )
    }
    fn owns(&self, f: &Family) -> bool {
        matches!(f, Family::Fsdp { .. })
    }
    fn default_family(&self) -> Family {
        Family::Fsdp {
            strategy: Default::default(),
            optimizer: OptimizerName::Adam,
        }
    }
    fn family_for(&self, a: &FamilyArgs) -> Result<Family, String> {
        a.refuse_foreign(true, false)?;
        Ok(Family::Fsdp {
            strategy: a.strategy.unwrap_or_default(),
            optimizer: a.optimizer.unwrap_or(OptimizerName::Adam),
        })
    }
    fn applies_book_settings(&self) -> bool {
        true
    }
    fn cycle_position(&self) -> Option<u8> {
        Some(2)
    }
    fn switch_message(&self, _: Option<&crate::run::AttachTarget>) -> String {
        "next launch: fsdp (batch 256 per rank, Adam): FSDP then DDP at each k, \
         memory per rank in the Memory pane"
            .into()
    }
    fn no_sim_worker(&self) -> Option<&'static str> {
        Some(
            "fsdp has no simulated worker: it runs real PyTorch FSDP2 (--backend gloo on CPUs, nccl on GPUs)",
        )
    }
    fn optimizer(&self, f: &Family) -> Option<OptimizerName> {
        match f {
            Family::Fsdp { optimizer, .. } => Some(*optimizer),
            _ => None,
        }
    }
    fn strategy(&self, f: &Family) -> Option<TorchStrategy> {
        match f {
            Family::Fsdp { strategy, .. } => Some(*strategy),
            _ => None,
        }
    }
    fn with_strategy(&self, f: &Family, strategy: TorchStrategy) -> Option<Family> {
        match f {
            Family::Fsdp { optimizer, .. } => Some(Family::Fsdp {
                strategy,
                optimizer: *optimizer,
            }),
            _ => None,
        }
    }
    fn settings(&self, f: &Family) -> Vec<(&'static str, serde_json::Value)> {
        match f {
            Family::Fsdp {
                strategy,
                optimizer,
            } => vec![
                ("strategy", json!(strategy)),
                ("optimizer", json!(optimizer)),
            ],
            _ => Vec::new(),
        }
    }
    fn title_part(&self, f: &Family) -> Option<String> {
        f.strategy().map(|s| s.as_str().to_string())
    }
    fn times_steps(&self) -> bool {
        true
    }
    fn has_memory_pane(&self) -> bool {
        true
    }
    /// Its Timeline pane shows the per-block step (all-gathers, reduce-scatters) instead.
    fn has_bucket_timeline(&self) -> bool {
        false
    }
    fn scaling_curves(&self) -> super::ScalingCurves {
        super::ScalingCurves::EachStrategy
    }
    /// The ZeRO-1 and DDP sides (queued after the FSDP run at each k) say so.
    fn runs_label(&self, f: &Family) -> String {
        match f.strategy() {
            Some(TorchStrategy::Ddp) => "fsdp:DDP".into(),
            Some(TorchStrategy::Zero1) => "fsdp:ZeRO".into(),
            _ => self.name().into(),
        }
    }
    /// At each k, FSDP, ZeRO-1 then DDP with the same settings, so that the Memory pane (and
    /// `--json`'s `memory_comparison`) has every side and the curves grow together.
    fn strategy_pairs(&self, f: &Family) -> Option<Vec<Family>> {
        Some(TorchStrategy::ALL.map(|s| f.with_strategy(s)).to_vec())
    }
    fn read_columns(&self, cols: &dyn super::StoredColumns) -> anyhow::Result<Family> {
        Ok(Family::Fsdp {
            strategy: super::known_column(cols, "strategy", |s| s.parse().ok())?,
            optimizer: super::known_column(cols, "optimizer", |s| s.parse().ok())?,
        })
    }
    fn worker(&self, w: &WorkerInput) -> Worker {
        let mut v = vec!["fsdp".to_string()];
        let strategy = w.family.strategy().unwrap_or_default();
        v.extend(flags([
            ("--strategy", strategy.as_str().into()),
            ("--optimizer", w.family.optimizer().as_str().into()),
        ]));
        v.extend(w.train_flags());
        v.extend(w.backend_flags());
        v.extend(w.data_flags());
        Worker::Torchrun(v)
    }
}
