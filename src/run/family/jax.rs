//! `jax`: one JAX process drives all k devices, a jitted step over a Mesh (weak scaling, batch
//! per device), with the HLO receipt of the collectives XLA wrote.

use super::{Experiment, Family, FamilyArgs, FamilyKind, Worker, WorkerInput, flags};
use crate::protocol::Backend;
use serde_json::json;

pub struct Jax;

impl FamilyKind for Jax {
    fn experiment(&self) -> Experiment {
        Experiment::Jax
    }
    fn name(&self) -> &'static str {
        "jax"
    }
    fn help(&self) -> Option<&'static str> {
        Some(
            "One JAX process over k devices: the jitted step, its HLO receipt (collectives XLA wrote) and a k=1 equality check; needs jax, flax and optax",
        )
    }
    fn owns(&self, f: &Family) -> bool {
        matches!(f, Family::Jax { .. })
    }
    fn default_family(&self) -> Family {
        Family::Jax {
            sharding: Default::default(),
        }
    }
    fn family_for(&self, a: &FamilyArgs) -> Result<Family, String> {
        a.refuse_foreign(false, false)?;
        Ok(Family::Jax {
            sharding: a.sharding,
        })
    }
    fn one_process(&self) -> bool {
        true
    }
    fn cycle_position(&self) -> Option<u8> {
        Some(3)
    }
    fn switch_message(&self, _: Option<&crate::run::AttachTarget>) -> String {
        "next launch: jax (one process over k devices, batch 256 per device): \
         the Receipt pane shows the collectives XLA wrote"
            .into()
    }
    fn no_sim_worker(&self) -> Option<&'static str> {
        Some(
            "jax has no simulated worker: it needs Python with jax (--backend gloo on CPUs, nccl on GPUs)",
        )
    }
    fn settings(&self, f: &Family) -> Vec<(&'static str, serde_json::Value)> {
        vec![("sharding", json!(f.sharding()))]
    }
    fn title_part(&self, f: &Family) -> Option<String> {
        Some(format!("{} sharding", f.sharding().as_str()))
    }
    fn engine(&self) -> Option<(&'static str, &'static str)> {
        Some(("XLA", "XLA"))
    }
    fn batch_unit(&self) -> &'static str {
        " per device, one process"
    }
    /// A few memory reports per device, all kept.
    fn keeps_every_memory_report(&self) -> bool {
        true
    }
    fn has_receipt_pane(&self) -> bool {
        true
    }
    fn scaling_curves(&self) -> super::ScalingCurves {
        super::ScalingCurves::Beside
    }
    fn read_columns(&self, cols: &dyn super::StoredColumns) -> anyhow::Result<Family> {
        Ok(Family::Jax {
            sharding: super::known_column(cols, "sharding", |s| s.parse().ok())?,
        })
    }
    /// `python -m ddptop_worker jax …`: one process for all k devices, no torchrun.
    fn worker(&self, w: &WorkerInput) -> Worker {
        let mut v = vec!["jax".to_string()];
        v.extend(flags([
            ("--k", w.k.to_string()),
            ("--sharding", w.family.sharding().as_str().into()),
        ]));
        v.extend(w.train_flags());
        let platform = if w.backend == Backend::Nccl {
            "gpu"
        } else {
            "cpu"
        };
        v.extend(flags([("--platform", platform.into())]));
        v.extend(w.data_flags());
        Worker::Python(v)
    }
    fn worker_env(&self, w: &WorkerInput) -> Vec<(&'static str, String)> {
        if w.backend != Backend::Gloo {
            return Vec::new();
        }
        // XLA's CPU client has one device unless told: the mesh needs k of them.
        vec![
            (
                "XLA_FLAGS",
                format!("--xla_force_host_platform_device_count={}", w.k),
            ),
            ("JAX_PLATFORMS", "cpu".into()),
        ]
    }
}
