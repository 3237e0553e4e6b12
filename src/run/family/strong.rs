//! `strong`: strong scaling, the global batch fixed (512) and split k ways.

use super::{Experiment, Family, FamilyKind, Worker, WorkerInput};

pub struct Strong;

impl FamilyKind for Strong {
    fn experiment(&self) -> Experiment {
        Experiment::Strong
    }
    fn name(&self) -> &'static str {
        "strong"
    }
    fn help(&self) -> Option<&'static str> {
        Some("Global batch fixed (default 512) split k ways")
    }
    fn owns(&self, f: &Family) -> bool {
        matches!(f, Family::Strong)
    }
    fn default_family(&self) -> Family {
        Family::Strong
    }
    fn default_batch(&self) -> u32 {
        512
    }
    fn global_batch(&self) -> bool {
        true
    }
    fn applies_book_settings(&self) -> bool {
        true
    }
    fn cycle_position(&self) -> Option<u8> {
        Some(1)
    }
    fn no_sim_worker(&self) -> Option<&'static str> {
        None
    }
    fn ddptop_loop(&self) -> bool {
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
        Worker::Torchrun(super::weak::train_argv(self.name(), w))
    }
}
