//! `zero1`: DDP with `torch.distributed.optim.ZeroRedundancyOptimizer` (ZeRO stage 1) on the
//! weak experiment's model and per-rank batch, Adam by default: what each rank holds against a
//! prediction made from the model's shapes (workers/ddptop_worker/zero1.py, docs/zero1.md).
//!
//! Per rank, fp32: weights 4P and gradients 4P whole (DDP all-reduces every gradient; sharding
//! them would be ZeRO-2), and the optimizer's s bytes per parameter only for the P_r parameters
//! the rank owns in ZeroRedundancyOptimizer's partition (whole tensors, largest first to the
//! least-loaded rank): 8P + s·P_r, which is 8P + 8P/k with Adam when the tensors divide evenly.
//! The worker sends that figure as `predicted_bytes`; the run document adds, per rank, the
//! measured state against it and the closed forms it sits between: DDP's 16P and FSDP's 16P/k.

use super::{Experiment, Family, FamilyArgs, FamilyKind, Worker, WorkerInput, flags};
use crate::protocol::Memory;
use crate::run::spec::{OptimizerName, TorchStrategy};
use serde_json::{Value, json};

pub struct Zero1;

/// fp32 weights and gradients: 4 bytes each per parameter, on every rank.
const WHOLE_BYTES_PER_PARAM: u64 = 8;

/// The optimizer's state per parameter: Adam's two fp32 moments; plain SGD keeps none.
fn optim_bytes_per_param(o: OptimizerName) -> u64 {
    match o {
        OptimizerName::Adam => 8,
        OptimizerName::Sgd => 0,
    }
}

/// The closed forms for P parameters at k ranks, in bytes: ZeRO-1 with evenly divisible tensors
/// (8P + sP/k), DDP (everything replicated, (8 + s)P), FSDP (everything sharded, (8 + s)P/k)
/// and the issue's 4P + 12P/k (what fp32 ZeRO-2, gradients sharded too, would hold with Adam).
pub fn closed_forms(params: u64, k: u32, o: OptimizerName) -> [(&'static str, f64); 4] {
    let (p, k, s) = (
        params as f64,
        f64::from(k.max(1)),
        optim_bytes_per_param(o) as f64,
    );
    let w = WHOLE_BYTES_PER_PARAM as f64;
    [
        ("zero1_balanced_bytes", w * p + s * p / k),
        ("ddp_bytes", (w + s) * p),
        ("fsdp_bytes", (w + s) * p / k),
        ("zero2_bytes", 4.0 * p + (4.0 + s) * p / k),
    ]
}

fn state(m: &Memory) -> u64 {
    [m.param_bytes, m.grad_bytes, m.optim_bytes]
        .into_iter()
        .map(|b| b.unwrap_or(0))
        .sum()
}

/// Per rank, its last phase's measured state against the worker's prediction and the closed
/// forms (P from the rank's whole fp32 weights, `param_bytes` / 4).
fn per_rank(memory: &[&Memory], k: u32, o: OptimizerName) -> Vec<Value> {
    let mut last: std::collections::BTreeMap<u32, &Memory> = Default::default();
    for m in memory {
        last.insert(m.rank, m);
    }
    last.values()
        .map(|m| {
            let st = state(m);
            let p = m.param_bytes.unwrap_or(0) / 4;
            let mut v = json!({
                "rank": m.rank, "phase": m.phase, "params": p, "state_bytes": st,
                "predicted_bytes": m.predicted_bytes,
                "error_pct": m.predicted_bytes.filter(|&b| b > 0)
                    .map(|b| (st as f64 - b as f64) / b as f64 * 100.0),
            });
            for (name, bytes) in closed_forms(p, k, o) {
                v[name] = json!(bytes.round());
            }
            v
        })
        .collect()
}

impl FamilyKind for Zero1 {
    fn experiment(&self) -> Experiment {
        Experiment::Zero1
    }
    fn name(&self) -> &'static str {
        "zero1"
    }
    fn help(&self) -> Option<&'static str> {
        Some(
            "DDP with ZeroRedundancyOptimizer (ZeRO-1), Adam: per-rank state (exact bytes) against 8P + 8P_r, beside DDP's 16P and FSDP's 16P/k",
        )
    }
    fn owns(&self, f: &Family) -> bool {
        matches!(f, Family::Zero1 { .. })
    }
    fn default_family(&self) -> Family {
        Family::Zero1 {
            optimizer: OptimizerName::Adam,
        }
    }
    fn family_for(&self, a: &FamilyArgs) -> Result<Family, String> {
        a.refuse_foreign(true, false)?;
        if a.strategy.is_some() {
            return Err("--strategy applies to fsdp only (zero1 is one strategy)".into());
        }
        Ok(Family::Zero1 {
            optimizer: a.optimizer.unwrap_or(OptimizerName::Adam),
        })
    }
    fn applies_book_settings(&self) -> bool {
        true
    }
    /// Last in the dashboard's `s` cycle (after attach when a script is given).
    fn cycle_position(&self) -> Option<u8> {
        Some(6)
    }
    fn switch_message(&self, _: Option<&crate::run::AttachTarget>) -> String {
        "next launch: zero1 (batch 256 per rank, Adam): DDP + ZeroRedundancyOptimizer, \
         memory per rank in the Memory pane beside fsdp's FSDP and DDP runs"
            .into()
    }
    /// fsdp's trainer: its steps are known before it runs, as fsdp's.
    fn times_steps(&self) -> bool {
        true
    }
    /// The Memory pane, its `--json` comparison and the table's note: beside fsdp's DDP and FSDP
    /// runs at the same k and settings (`Family::with_strategy`).
    fn has_memory_pane(&self) -> bool {
        true
    }
    fn no_sim_worker(&self) -> Option<&'static str> {
        Some(
            "zero1 has no simulated worker: it runs real PyTorch ZeroRedundancyOptimizer (--backend gloo on CPUs, nccl on GPUs)",
        )
    }
    fn optimizer(&self, f: &Family) -> Option<OptimizerName> {
        match f {
            Family::Zero1 { optimizer } => Some(*optimizer),
            _ => None,
        }
    }
    /// ZeRO-1, one of fsdp's three strategies as a family of its own: the Memory pane sets a
    /// zero1 run beside fsdp's DDP and FSDP runs.
    fn strategy(&self, f: &Family) -> Option<TorchStrategy> {
        matches!(f, Family::Zero1 { .. }).then_some(TorchStrategy::Zero1)
    }
    /// Its DDP and FSDP sides are fsdp runs with its optimizer.
    fn with_strategy(&self, f: &Family, strategy: TorchStrategy) -> Option<Family> {
        match f {
            Family::Zero1 { optimizer } if strategy != TorchStrategy::Zero1 => Some(Family::Fsdp {
                strategy,
                optimizer: *optimizer,
            }),
            _ => None,
        }
    }
    fn settings(&self, f: &Family) -> Vec<(&'static str, Value)> {
        vec![("optimizer", json!(f.optimizer()))]
    }
    fn title_part(&self, f: &Family) -> Option<String> {
        Some(f.optimizer().as_str().to_string())
    }
    fn record(&self, f: &Family, k: u32, memory: &[&Memory]) -> Vec<(&'static str, Value)> {
        let phases: Vec<Value> = memory
            .iter()
            .map(|m| {
                json!({
                    "rank": m.rank, "phase": m.phase, "param_bytes": m.param_bytes,
                    "grad_bytes": m.grad_bytes, "optim_bytes": m.optim_bytes,
                    "state_bytes": state(m), "predicted_bytes": m.predicted_bytes,
                    "peak_bytes": m.peak_bytes, "reserved_bytes": m.reserved_bytes,
                    "allocated_bytes": m.allocated_bytes,
                })
            })
            .collect();
        vec![
            ("memory", Value::Array(phases)),
            (
                "memory_prediction",
                Value::Array(per_rank(memory, k, f.optimizer())),
            ),
        ]
    }
    fn worker(&self, w: &WorkerInput) -> Worker {
        let mut v = vec!["zero1".to_string()];
        v.extend(flags([(
            "--optimizer",
            w.family.optimizer().as_str().into(),
        )]));
        v.extend(w.train_flags());
        v.extend(w.backend_flags());
        v.extend(w.data_flags());
        Worker::Torchrun(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(rank: u32, phase: &str, optim: u64, predicted: u64) -> Memory {
        Memory {
            rank,
            phase: Some(phase.into()),
            param_bytes: Some(400),
            grad_bytes: Some(400),
            optim_bytes: Some(optim),
            predicted_bytes: Some(predicted),
            ..Memory::default()
        }
    }

    #[test]
    fn closed_forms_sit_between_ddp_and_fsdp_and_meet_at_k1() {
        let p = 11_175_818;
        let at = |k| closed_forms(p, k, OptimizerName::Adam).map(|(_, b)| b);
        let [z1, ddp, fsdp, z2] = at(1);
        assert_eq!([z1, ddp, fsdp, z2], [16.0 * p as f64; 4]); // k=1: all 16P
        let [z1, ddp, fsdp, z2] = at(4);
        assert_eq!(z1, 10.0 * p as f64); // 8P + 8P/4
        assert_eq!(z2, 7.0 * p as f64); // 4P + 12P/4
        assert!(fsdp < z2 && z2 < z1 && z1 < ddp);
        let [z1, ..] = closed_forms(p, 4, OptimizerName::Sgd).map(|(_, b)| b);
        assert_eq!(z1, 8.0 * p as f64); // nothing to shard
    }

    #[test]
    fn the_record_gives_each_ranks_last_phase_against_its_prediction() {
        let ms = [
            mem(0, "init", 0, 1600),
            mem(0, "epoch1", 808, 1600),
            mem(1, "epoch1", 404, 1200),
        ];
        let refs: Vec<&Memory> = ms.iter().collect();
        let rec = Zero1.record(&Zero1.default_family(), 2, &refs);
        assert_eq!(rec[0].0, "memory");
        assert_eq!(rec[0].1.as_array().unwrap().len(), 3);
        let pred = rec[1].1.as_array().unwrap();
        assert_eq!(pred.len(), 2);
        assert_eq!(pred[0]["phase"], "epoch1");
        assert_eq!(pred[0]["state_bytes"], 1608);
        assert_eq!(pred[0]["params"], 100);
        assert!((pred[0]["error_pct"].as_f64().unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(pred[1]["zero1_balanced_bytes"], 1200.0); // 8·100 + 8·100/2
        assert_eq!(pred[1]["ddp_bytes"], 1600.0);
        assert_eq!(pred[1]["fsdp_bytes"], 800.0);
    }

    #[test]
    fn the_worker_is_zero1_with_its_optimizer_and_strategy_is_refused() {
        let a = FamilyArgs {
            optimizer: Some(OptimizerName::Sgd),
            ..FamilyArgs::default()
        };
        assert_eq!(
            Zero1.family_for(&a).unwrap(),
            Family::Zero1 {
                optimizer: OptimizerName::Sgd
            }
        );
        let a = FamilyArgs {
            strategy: Some(crate::run::TorchStrategy::Ddp),
            ..FamilyArgs::default()
        };
        assert!(Zero1.family_for(&a).unwrap_err().contains("--strategy"));
        assert_eq!(
            serde_json::to_string(&Zero1.default_family()).unwrap(),
            r#"{"experiment":"zero1","optimizer":"adam"}"#
        );
    }
}
