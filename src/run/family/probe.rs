//! `probe`: the no_sync probe (interleaved synced and no_sync blocks), with a k=1 control.

use super::{Experiment, Family, FamilyKind, Worker, WorkerInput, flags};

pub struct Probe;

impl FamilyKind for Probe {
    fn experiment(&self) -> Experiment {
        Experiment::Probe
    }
    fn name(&self) -> &'static str {
        "probe"
    }
    fn help(&self) -> Option<&'static str> {
        Some("The no_sync probe (interleaved synced/no_sync blocks, plus a k=1 control)")
    }
    fn owns(&self, f: &Family) -> bool {
        matches!(f, Family::Probe)
    }
    fn default_family(&self) -> Family {
        Family::Probe
    }
    fn has_throughput(&self) -> bool {
        false
    }
    fn needs_two_ranks(&self) -> bool {
        true
    }
    fn applies_book_settings(&self) -> bool {
        true
    }
    fn no_sim_worker(&self) -> Option<&'static str> {
        None
    }
    fn probes_no_sync(&self) -> bool {
        true
    }
    fn k1_control(&self) -> bool {
        true
    }
    fn sim_worker(&self) -> Option<super::SimWorker> {
        Some(super::SimWorker::Probe)
    }
    fn worker(&self, w: &WorkerInput) -> Worker {
        let mut v = vec!["probe".to_string()];
        v.extend(flags([
            ("--batch", w.batch.to_string()),
            ("--model", w.model.as_str().into()),
        ]));
        v.extend(w.backend_flags());
        Worker::Torchrun(v)
    }
}
