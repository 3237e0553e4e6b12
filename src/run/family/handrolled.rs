//! `handrolled`: the hand-rolled loop in Rust on tch (workers/handrolled): one process, k
//! replicas, the gradient all-reduce by tensor copies after the whole backward; weak scaling
//! like DDP's. `--deficits` runs DDP and all three variants at each k (the Deficits pane).

use super::{Experiment, Family, FamilyArgs, FamilyKind, Worker, WorkerInput};
use crate::run::HandRolled;
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
        Ok(Family::Handrolled { hand: a.hand() })
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
    fn engine(&self) -> Option<(&'static str, &'static str)> {
        Some(("copies", "copy"))
    }
    fn own_book_settings(&self) -> Option<&'static str> {
        Some(
            "the book's cudnn.benchmark on; tch has no matmul-precision setting \
             (libtorch's default, highest)",
        )
    }
    fn needs_built_binary(&self) -> bool {
        true
    }
    fn has_deficits_pane(&self) -> bool {
        true
    }
    fn scaling_curves(&self) -> super::ScalingCurves {
        super::ScalingCurves::Deficits
    }
    /// The switches name a hand-rolled curve first: they are what tells curves apart.
    fn curve_name(&self, f: &Family) -> String {
        format!("handrolled {}", f.hand())
    }
    /// DDP (weak), then the loop as the book wrote it (single+star) and with each fix.
    fn deficit_columns(&self) -> Option<Vec<Family>> {
        let hands = HandRolled::DEFICITS.map(|hand| Family::Handrolled { hand });
        Some([Family::Weak].into_iter().chain(hands).collect())
    }
    fn read_columns(&self, cols: &dyn super::StoredColumns) -> anyhow::Result<Family> {
        Ok(Family::Handrolled {
            hand: super::known_column(cols, "hand", HandRolled::parse)?,
        })
    }
    /// One Rust process drives every replica: no torchrun, no Python.
    fn worker(&self, w: &WorkerInput) -> Worker {
        Worker::Handrolled(w.data_flags())
    }
}
