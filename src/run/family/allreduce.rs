//! `allreduce`: the all-reduce bandwidth sweep by message size.

use super::{Experiment, Family, FamilyKind, Worker, WorkerInput, flags};
use crate::protocol::Backend;

pub struct Allreduce;

impl FamilyKind for Allreduce {
    fn experiment(&self) -> Experiment {
        Experiment::Allreduce
    }
    fn name(&self) -> &'static str {
        "allreduce"
    }
    fn help(&self) -> Option<&'static str> {
        Some("All-reduce bandwidth sweep by size")
    }
    fn owns(&self, f: &Family) -> bool {
        matches!(f, Family::Allreduce)
    }
    fn default_family(&self) -> Family {
        Family::Allreduce
    }
    fn has_throughput(&self) -> bool {
        false
    }
    fn needs_two_ranks(&self) -> bool {
        true
    }
    fn no_sim_worker(&self) -> Option<&'static str> {
        None
    }
    fn sweeps_allreduce(&self) -> bool {
        true
    }
    fn sim_worker(&self) -> Option<super::SimWorker> {
        Some(super::SimWorker::Allreduce)
    }
    fn worker(&self, w: &WorkerInput) -> Worker {
        let mut v = vec!["allreduce".to_string()];
        v.extend(flags([("--backend", w.backend.as_str().into())]));
        if w.backend == Backend::Gloo {
            // 256 MiB all-reduces over gloo on a laptop take minutes; stop at 16 MiB.
            v.extend(flags([("--max-bytes", (16u64 << 20).to_string())]));
        }
        Worker::Torchrun(v)
    }
}
