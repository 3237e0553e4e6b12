//! `attach`: a user's own DDP script under torchrun (`ddptop attach`), measured through torch's
//! hooks by the bootstrap in workers/ddptop_bootstrap (docs/attach.md).

use super::{Experiment, Family, FamilyKind, Worker, WorkerInput};
use crate::run::AttachTarget;
use serde_json::json;

pub struct Attach;

impl FamilyKind for Attach {
    fn experiment(&self) -> Experiment {
        Experiment::Attach
    }
    fn name(&self) -> &'static str {
        "attach"
    }
    /// Not a value of `ddptop run`: `ddptop attach -- SCRIPT ARGS` starts it.
    fn help(&self) -> Option<&'static str> {
        None
    }
    fn owns(&self, f: &Family) -> bool {
        matches!(f, Family::Attach { .. })
    }
    fn default_family(&self) -> Family {
        Family::Attach { target: None }
    }
    fn runs_user_script(&self) -> bool {
        true
    }
    fn cycle_position(&self) -> Option<u8> {
        Some(5)
    }
    fn switch_message(&self, attach: Option<&AttachTarget>) -> String {
        match attach {
            Some(a) => format!("next launch: attach {} (1/2/4 run it at that k)", a.label()),
            None => "next launch: attach scaling (batch 256 per rank)".into(),
        }
    }
    fn no_sim_worker(&self) -> Option<&'static str> {
        Some("attach runs your script with real PyTorch: use --backend gloo on CPUs, nccl on GPUs")
    }
    fn settings(&self, f: &Family) -> Vec<(&'static str, serde_json::Value)> {
        match f.attach() {
            Some(t) => vec![
                ("script", json!(t.script)),
                ("args", json!(t.args)),
                ("cwd", json!(t.cwd)),
            ],
            None => Vec::new(),
        }
    }
    /// An attached script's working folder is not part of its curve (the same command line
    /// from two folders is one curve).
    fn for_curve(&self, f: &Family) -> Family {
        match f.attach() {
            Some(t) => Family::Attach {
                target: Some(AttachTarget {
                    cwd: Default::default(),
                    ..t.clone()
                }),
            },
            None => f.clone(),
        }
    }
    fn scaling_curves(&self) -> super::ScalingCurves {
        super::ScalingCurves::Alone
    }
    fn read_columns(&self, cols: &dyn super::StoredColumns) -> anyhow::Result<Family> {
        let target = match cols.text("attach_json")? {
            None => None,
            Some(text) => {
                Some(serde_json::from_str(&text).map_err(|e| cols.unreadable("attach_json", &e))?)
            }
        };
        Ok(Family::Attach { target })
    }
    fn worker(&self, _: &WorkerInput) -> Worker {
        Worker::Script
    }
}
