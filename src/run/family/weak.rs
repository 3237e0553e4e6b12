//! `weak`: weak scaling, the per-rank batch fixed (256), k ranks under torchrun.

use super::{Experiment, Family, FamilyKind, Worker, WorkerInput};

pub struct Weak;

impl FamilyKind for Weak {
    fn experiment(&self) -> Experiment {
        Experiment::Weak
    }
    fn name(&self) -> &'static str {
        "weak"
    }
    fn help(&self) -> Option<&'static str> {
        Some("Per-rank batch fixed (default 256), k ranks")
    }
    fn owns(&self, f: &Family) -> bool {
        matches!(f, Family::Weak)
    }
    fn default_family(&self) -> Family {
        Family::Weak
    }
    fn applies_book_settings(&self) -> bool {
        true
    }
    fn cycle_position(&self) -> Option<u8> {
        Some(0)
    }
    fn no_sim_worker(&self) -> Option<&'static str> {
        None
    }
    fn ddptop_loop(&self) -> bool {
        true
    }
    fn cost_model_predicts(&self) -> bool {
        true
    }
    fn times_steps(&self) -> bool {
        true
    }
    fn scaling_curves(&self) -> super::ScalingCurves {
        super::ScalingCurves::Beside
    }
    fn sim_worker(&self) -> Option<super::SimWorker> {
        Some(super::SimWorker::Train)
    }
    fn worker(&self, w: &WorkerInput) -> Worker {
        Worker::Torchrun(train_argv(self.name(), w))
    }
}

/// `train --experiment NAME` with the training and backend flags: weak's and strong's worker.
pub(super) fn train_argv(name: &str, w: &WorkerInput) -> Vec<String> {
    let mut v = vec!["train".to_string()];
    v.extend(super::flags([("--experiment", name.into())]));
    v.extend(w.train_flags());
    v.extend(w.backend_flags());
    v.extend(w.data_flags());
    v
}
