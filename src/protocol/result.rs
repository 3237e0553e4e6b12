//! A worker's `result`: the figures every family sends, and what only its own family sends, typed
//! by the family (`experiment` is the serde tag, so an unknown family refuses the message).
//!
//! The wire is flat (docs/protocol.md, `result`): the family's fields sit beside the common ones.
//! `#[serde(flatten)]` keeps it so, while the program reads an attached script's instrumentation
//! only from an attach result and JAX's precision only from a JAX one. A key another family
//! sends (a `process_group` on a `weak` result) is ignored, as any unknown key is.

use serde::{Deserialize, Serialize};

use super::settings::{MatmulPrecision, Optimizer, Strategy};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultMsg {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub samples_per_s: Option<f64>,
    pub timed_epochs: u32,
    pub params: Option<u64>,
    pub grad_bytes: Option<u64>,
    pub bucket_bytes: Vec<u64>,
    /// The family that measured it (`experiment` on the wire) and what only it sends.
    #[serde(flatten)]
    pub family: FamilyResult,
}

/// One variant per family, named as the family is on the wire; `tests/protocol_fixtures.rs`
/// holds these names equal to `run::Experiment`'s and the Python client's `EXPERIMENTS`.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, strum::VariantNames, strum::IntoStaticStr,
)]
#[serde(tag = "experiment", rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum FamilyResult {
    Weak(TorchResult),
    Strong(TorchResult),
    Probe(TorchResult),
    /// The bandwidth sweep trains nothing: no settings to report.
    Allreduce {},
    Jax(JaxResult),
    Fsdp(ShardedResult),
    Attach(AttachResult),
    /// The tch worker (Rust), which reports the PyTorch settings tch applied.
    Handrolled(TorchResult),
    Zero1(ShardedResult),
}

/// The families a `result` may name, by their wire names, in `FamilyResult`'s order.
pub const EXPERIMENT_NAMES: &[&str] = <FamilyResult as strum::VariantNames>::VARIANTS;

/// What a PyTorch family saw in effect at the end of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TorchResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<Optimizer>,
    /// `torch.get_float32_matmul_precision()` at the end of the run (the book sets `high`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matmul_precision: Option<MatmulPrecision>,
    /// `torch.backends.cudnn.benchmark` at the end of the run (the book sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cudnn_benchmark: Option<bool>,
}

/// FSDP and ZeRO-1: the PyTorch settings and how the state was laid out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardedResult {
    #[serde(flatten)]
    pub torch: TorchResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JaxResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<Optimizer>,
    /// `jax_default_matmul_precision` (`tensorfloat32`, the book's "high", by default), as
    /// `jax.config` read it at the end of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jax_matmul_precision: Option<String>,
}

/// An attached script: what ddptop's hooks saw of it, beside its PyTorch settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AttachResult {
    #[serde(flatten)]
    pub torch: TorchResult,
    /// Whether the script's process group was initialized by the end (or at any step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_group: Option<bool>,
    /// Whether the script wrapped a model in DistributedDataParallel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddp_module: Option<bool>,
    /// Which of DDP's tuned constructor arguments the script passed itself, by keyword or
    /// position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddp_args: Option<Vec<DdpArg>>,
    /// Distinct `DistributedSampler.set_epoch` values (absent: never called).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs_seen: Option<u32>,
    /// A script that used torch.compile: seconds spent compiling (dynamo's compile callbacks),
    /// dynamo compiles, of which recompiles, and the steps that contained a compile (left out of
    /// `samples_per_s`, like warm-up steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiles: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompiles: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_steps: Option<u64>,
}

/// DDP's constructor arguments ddptop tunes (`run::ddp`), as an attached script may pass them
/// itself (`ddptop tune --attach` then leaves DDP's constructor alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum DdpArg {
    BucketCapMb,
    StaticGraph,
    GradientAsBucketView,
}

impl DdpArg {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl FamilyResult {
    /// The family's wire name (`experiment`).
    pub fn name(&self) -> &'static str {
        self.into()
    }

    /// The family named `name` with nothing of its own reported yet (the simulator's result);
    /// `None` for a name that is no family.
    pub fn empty(name: &str) -> Option<FamilyResult> {
        serde_json::from_value(serde_json::json!({ "experiment": name })).ok()
    }

    /// The PyTorch settings seen, for the families that run PyTorch (or tch).
    pub fn torch(&self) -> Option<&TorchResult> {
        match self {
            FamilyResult::Weak(t)
            | FamilyResult::Strong(t)
            | FamilyResult::Probe(t)
            | FamilyResult::Handrolled(t) => Some(t),
            FamilyResult::Fsdp(s) | FamilyResult::Zero1(s) => Some(&s.torch),
            FamilyResult::Attach(a) => Some(&a.torch),
            FamilyResult::Allreduce {} | FamilyResult::Jax(_) => None,
        }
    }

    pub fn jax(&self) -> Option<&JaxResult> {
        match self {
            FamilyResult::Jax(j) => Some(j),
            _ => None,
        }
    }

    pub fn attach(&self) -> Option<&AttachResult> {
        match self {
            FamilyResult::Attach(a) => Some(a),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::WorkerMsg;

    fn parse(fields: &str) -> Result<ResultMsg, serde_json::Error> {
        serde_json::from_str(&format!(
            r#"{{"rank":1,"step":9,"t":2.0,"samples_per_s":5.0,"timed_epochs":1,"params":3,"grad_bytes":12,"bucket_bytes":[12],{fields}}}"#
        ))
    }

    /// Each family's own fields land in its own record, and a result goes back onto the wire as
    /// it came (flat, `experiment` beside the figures).
    #[test]
    fn each_family_reads_its_own_fields_and_writes_the_flat_wire() {
        let a = parse(
            r#""experiment":"attach","process_group":true,"ddp_module":true,"ddp_args":["static_graph"],"epochs_seen":2,"compile_s":1.5,"compiles":3,"recompiles":1,"compile_steps":2,"matmul_precision":"high","cudnn_benchmark":true"#,
        )
        .unwrap();
        let at = a.family.attach().expect("an attach record");
        assert_eq!(
            (at.process_group, at.ddp_module, at.epochs_seen, at.compiles),
            (Some(true), Some(true), Some(2), Some(3))
        );
        assert_eq!(at.ddp_args.as_deref(), Some(&[DdpArg::StaticGraph][..]));
        let torch = a.family.torch().unwrap();
        assert_eq!(
            (torch.matmul_precision, torch.cudnn_benchmark),
            (Some(MatmulPrecision::High), Some(true))
        );
        assert_eq!((a.rank, a.step, a.grad_bytes), (1, 9, Some(12)));

        let z = parse(r#""experiment":"zero1","optimizer":"adam","strategy":"zero1""#).unwrap();
        assert_eq!(
            z.family,
            FamilyResult::Zero1(ShardedResult {
                torch: TorchResult {
                    optimizer: Some(Optimizer::Adam),
                    ..TorchResult::default()
                },
                strategy: Some(Strategy::Zero1),
            })
        );

        let j = parse(r#""experiment":"jax","optimizer":"sgd","jax_matmul_precision":"tensorfloat32","sharding":"data","devices":2"#)
            .unwrap();
        assert_eq!(
            j.family.jax().unwrap().jax_matmul_precision.as_deref(),
            Some("tensorfloat32")
        );
        assert_eq!(j.family.torch(), None, "JAX reports no PyTorch settings");

        let all = parse(r#""experiment":"allreduce""#).unwrap();
        assert_eq!(all.family, FamilyResult::Allreduce {});
        for m in [a, z, j, all] {
            let wire = serde_json::to_value(&m).unwrap();
            assert_eq!(wire["experiment"], m.family.name(), "{wire}");
            assert!(wire.get("family").is_none(), "flat on the wire: {wire}");
            let back: ResultMsg = serde_json::from_value(wire).unwrap();
            assert_eq!(back, m);
            // And as a worker line, inside `WorkerMsg`'s own tag, through the real parser.
            let line = WorkerMsg::Result(m.clone()).to_line();
            match crate::protocol::parse_worker(line.trim_end()) {
                Ok(WorkerMsg::Result(back)) => assert_eq!(back, m, "{line}"),
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    /// The experiment is the tag: missing or unknown refuses the message; another family's key
    /// is not read into this family's record.
    #[test]
    fn the_experiment_is_required_and_a_family_reads_no_other_familys_fields() {
        let err = parse(r#""experiment":"weakk""#).unwrap_err().to_string();
        assert!(err.contains("unknown variant `weakk`"), "{err}");
        assert!(err.contains("zero1"), "lists the families: {err}");
        let err = parse(r#""optimizer":"sgd""#).unwrap_err().to_string();
        assert!(err.contains("missing field `experiment`"), "{err}");

        let w =
            parse(r#""experiment":"weak","process_group":true,"jax_matmul_precision":"highest""#)
                .unwrap();
        assert_eq!(w.family, FamilyResult::Weak(TorchResult::default()));
        assert_eq!((w.family.attach(), w.family.jax()), (None, None));
        // A wrong type in a family's own field refuses the message, as it did when flat.
        assert!(parse(r#""experiment":"attach","process_group":"yes""#).is_err());
    }

    #[test]
    fn every_family_name_makes_an_empty_record_of_that_family() {
        for name in EXPERIMENT_NAMES {
            let f = FamilyResult::empty(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(f.name(), *name);
        }
        assert_eq!(FamilyResult::empty("nope"), None);
    }
}
