//! `handrolled`: the hand-rolled loop in Rust on tch (workers/handrolled): one process, k
//! replicas, the gradient all-reduce by tensor copies after the whole backward; weak scaling
//! like DDP's. `--deficits` runs DDP and all three variants at each k (the Deficits pane).

use super::{Experiment, Family, FamilyArgs, FamilyKind, Worker, WorkerInput};
use serde_json::json;

pub struct Handrolled;

impl FamilyKind for Handrolled {
    fn experiment(&self) -> Experiment {
        Experiment::Handrolled
    }
    fn name(&self) -> &'static str {
        "handrolled"
    }
    fn help(&self) -> Option<&'static str> {
        Some(
            "The hand-rolled loop in Rust on tch: one process drives k replicas and all-reduces their gradients by tensor copies after the backward (--dispatch, --reduce; --deficits runs all three variants beside DDP). Needs the ddptop-handrolled binary",
        )
    }
    fn owns(&self, f: &Family) -> bool {
        matches!(f, Family::Handrolled { .. })
    }
    fn default_family(&self) -> Family {
        Family::Handrolled {
            hand: Default::default(),
        }
    }
    fn family_for(&self, a: &FamilyArgs) -> Result<Family, String> {
        a.refuse_foreign(false, true)?;
        Ok(Family::Handrolled { hand: a.hand })
    }
    fn cycle_position(&self) -> Option<u8> {
        Some(4)
    }
    fn switch_message(&self, _: Option<&crate::run::AttachTarget>) -> String {
        "next launch: handrolled single+star (one Rust process, k replicas, gradients \
         all-reduced by tensor copies); a runs DDP and all three variants \
         at k = 1, 2, 4 for the Deficits pane"
            .into()
    }
    fn no_sim_worker(&self) -> Option<&'static str> {
        Some(
            "handrolled has no simulated worker: it runs libtorch through tch (--backend gloo on CPUs, nccl on GPUs)",
        )
    }
    fn settings(&self, f: &Family) -> Vec<(&'static str, serde_json::Value)> {
        vec![("hand", json!(f.hand().label()))]
    }
    fn title_part(&self, f: &Family) -> Option<String> {
        Some(f.hand().label())
    }
    /// One Rust process drives every replica: no torchrun, no Python.
    fn worker(&self, w: &WorkerInput) -> Worker {
        Worker::Handrolled(w.data_flags())
    }
}
