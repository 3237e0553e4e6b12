//! Parsing plus the checks serde cannot express. A line that passes here is safe to reduce.

use super::messages::{ControlMsg, WorkerMsg};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtocolError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a JSON object")]
    NotObject,
    #[error("missing or unsupported protocol version (want v=1)")]
    BadVersion,
    #[error("unknown or missing message type")]
    UnknownType,
    #[error("bad fields for `{kind}`: {detail}")]
    BadFields { kind: String, detail: String },
    #[error("field `{0}` must be a finite number >= 0")]
    BadNumber(&'static str),
    #[error("rank {rank} is not below world_size {world_size}")]
    RankOutOfRange { rank: u32, world_size: u32 },
    #[error("world_size must be at least 1")]
    ZeroWorld,
    #[error("devices must be at least 1")]
    ZeroDevices,
    #[error("step.every must be at least 1")]
    ZeroEvery,
    #[error("field `{0}` must be a finite number")]
    NotFinite(&'static str),
    #[error("hlo.ops.{0}: largest_elems is above total_elems")]
    LargestAboveTotal(&'static str),
}

const WORKER_TYPES: &[&str] = &[
    "hello",
    "heartbeat",
    "step",
    "buckets",
    "epoch",
    "probe",
    "bench",
    "memory",
    "hlo",
    "log",
    "result",
    "bye",
    "plan",
    "comm",
    "check",
];
const CONTROL_TYPES: &[&str] = &["welcome", "error", "command"];

/// Parse and validate one worker → ddptop line.
pub fn parse_worker(line: &str) -> Result<WorkerMsg, ProtocolError> {
    let kind = envelope(line, WORKER_TYPES)?;
    // Straight from the text into the typed message: no intermediate `Value` tree.
    let msg: WorkerMsg = serde_json::from_str(line).map_err(|e| ProtocolError::BadFields {
        kind,
        detail: e.to_string(),
    })?;
    check_numbers(&msg)?;
    Ok(msg)
}

/// Parse and validate one ddptop → worker line (used by the sim worker and the tests).
pub fn parse_control(line: &str) -> Result<ControlMsg, ProtocolError> {
    let kind = envelope(line, CONTROL_TYPES)?;
    serde_json::from_str(line).map_err(|e| ProtocolError::BadFields {
        kind,
        detail: e.to_string(),
    })
}

/// Only the envelope fields; serde skips the rest of the object without building it.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    v: Option<Value>,
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
}

/// Checks shared by both directions: a JSON object, `v == 1`, a known `type`. Returns the type.
fn envelope(line: &str, types: &[&str]) -> Result<String, ProtocolError> {
    let env: Envelope = match serde_json::from_str(line) {
        Ok(e) => e,
        Err(e) if e.is_data() => {
            // Valid JSON of the wrong shape (array, string, number…) or a mistyped `type`.
            return match serde_json::from_str::<Value>(line) {
                Ok(Value::Object(_)) => Err(ProtocolError::UnknownType),
                Ok(_) => Err(ProtocolError::NotObject),
                Err(e) => Err(ProtocolError::NotJson(e.to_string())),
            };
        }
        Err(e) => return Err(ProtocolError::NotJson(e.to_string())),
    };
    if env.v.as_ref().and_then(Value::as_u64) != Some(u64::from(super::VERSION)) {
        return Err(ProtocolError::BadVersion);
    }
    match env.kind.as_deref() {
        Some(t) if types.contains(&t) => Ok(t.to_string()),
        _ => Err(ProtocolError::UnknownType),
    }
}

fn nonneg(name: &'static str, x: f64) -> Result<(), ProtocolError> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        Err(ProtocolError::BadNumber(name))
    }
}

fn finite(name: &'static str, x: f64) -> Result<(), ProtocolError> {
    if x.is_finite() {
        Ok(())
    } else {
        Err(ProtocolError::NotFinite(name))
    }
}

fn check_numbers(msg: &WorkerMsg) -> Result<(), ProtocolError> {
    match msg {
        WorkerMsg::Hello(h) => {
            nonneg("t", h.t)?;
            if h.world_size == 0 {
                return Err(ProtocolError::ZeroWorld);
            }
            if h.devices == 0 {
                return Err(ProtocolError::ZeroDevices);
            }
            if h.rank >= h.world_size {
                return Err(ProtocolError::RankOutOfRange {
                    rank: h.rank,
                    world_size: h.world_size,
                });
            }
        }
        WorkerMsg::Heartbeat(m) => {
            nonneg("t", m.t)?;
            if let Some(c) = m.cpu_s {
                nonneg("cpu_s", c)?;
            }
            if let Some(a) = m.coll.as_ref().and_then(|c| c.age_s) {
                nonneg("coll.age_s", a)?;
            }
        }
        WorkerMsg::Step(s) => {
            for (n, x) in [
                ("t", s.t),
                ("fwd_ms", s.fwd_ms),
                ("bwd_ms", s.bwd_ms),
                ("opt_ms", s.opt_ms),
                ("data_ms", s.data_ms),
                ("step_ms", s.step_ms),
            ] {
                nonneg(n, x)?;
            }
            if let Some(loss) = s.loss {
                finite("loss", loss)?;
            }
            if s.every == Some(0) {
                return Err(ProtocolError::ZeroEvery);
            }
        }
        WorkerMsg::Buckets(b) => {
            nonneg("t", b.t)?;
            nonneg("bwd_compute_ms", b.bwd_compute_ms)?;
            nonneg("exposed_ms", b.exposed_ms)?;
            for s in &b.buckets {
                nonneg("ready_ms", s.ready_ms)?;
                nonneg("start_ms", s.start_ms)?;
                nonneg("done_ms", s.done_ms)?;
                if let Some(k) = s.kernel_ms {
                    nonneg("kernel_ms", k)?;
                }
            }
        }
        WorkerMsg::Epoch(e) => {
            for (n, x) in [
                ("t", e.t),
                ("seconds", e.seconds),
                ("samples_per_s", e.samples_per_s),
                ("data_wait_ms", e.data_wait_ms),
            ] {
                nonneg(n, x)?;
            }
        }
        WorkerMsg::Probe(p) => {
            for (n, x) in [
                ("t", p.t),
                ("median_ms", p.median_ms),
                ("min_ms", p.min_ms),
                ("max_ms", p.max_ms),
            ] {
                nonneg(n, x)?;
            }
        }
        WorkerMsg::Bench(b) => {
            for (n, x) in [
                ("t", b.t),
                ("time_us", b.time_us),
                ("algbw_gbs", b.algbw_gbs),
                ("busbw_gbs", b.busbw_gbs),
            ] {
                nonneg(n, x)?;
            }
        }
        WorkerMsg::Memory(m) => nonneg("t", m.t)?,
        WorkerMsg::Hlo(m) => {
            nonneg("t", m.t)?;
            if let Some(ops) = &m.ops {
                for (name, stats) in [
                    ("all_reduce", ops.all_reduce),
                    ("all_gather", ops.all_gather),
                    ("reduce_scatter", ops.reduce_scatter),
                ] {
                    if stats.is_some_and(|s| s.largest_elems > s.total_elems) {
                        return Err(ProtocolError::LargestAboveTotal(name));
                    }
                }
            }
        }
        WorkerMsg::Log(m) => nonneg("t", m.t)?,
        WorkerMsg::Result(r) => {
            nonneg("t", r.t)?;
            if let Some(x) = r.samples_per_s {
                nonneg("samples_per_s", x)?;
            }
        }
        WorkerMsg::Bye(m) => nonneg("t", m.t)?,
        WorkerMsg::Plan(m) => nonneg("t", m.t)?,
        WorkerMsg::Comm(c) => {
            nonneg("t", c.t)?;
            for op in &c.ops {
                nonneg("start_ms", op.start_ms)?;
                nonneg("dur_ms", op.dur_ms)?;
            }
        }
        WorkerMsg::Check(c) => {
            // `a` and `b` are whatever was compared (a loss may be negative); only finite.
            nonneg("t", c.t)?;
            finite("a", c.a)?;
            finite("b", c.b)?;
            nonneg("diff", c.diff)?;
            nonneg("tol", c.tol)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::*;

    const TOKEN: &str = "9f2c5e0a7b1d4c3e8f6a2b9d0c1e7f3a5b8d2c4e6f0a1b3c5d7e9f2a4b6c8d0e";

    fn hello(extra: &str) -> String {
        format!(
            r#"{{"v":1,"type":"hello","token":"{TOKEN}","run_id":"r1","rank":0,"world_size":1,"local_rank":0,"pid":1,"host":"gpubox","device":"cuda:0","backend":"nccl","worker":"jax","torch":null,"nccl":null,"cuda":null,"t":1.0{extra}}}"#
        )
    }

    #[test]
    fn hello_defaults_keep_older_workers_valid() {
        let Ok(WorkerMsg::Hello(h)) = parse_worker(&hello("")) else {
            panic!("older hello rejected")
        };
        assert_eq!(
            (h.devices, h.instrument, h.node_name()),
            (1, None, "gpubox")
        );
        let Ok(WorkerMsg::Hello(h)) = parse_worker(&hello(
            r#","devices":2,"instrument":"steps_only","node":"node-b""#,
        )) else {
            panic!("extended hello rejected")
        };
        assert_eq!(h.devices, 2);
        assert_eq!(h.instrument, Some(Instrument::StepsOnly));
        assert_eq!(h.node_name(), "node-b");
        assert_eq!(
            parse_worker(&hello(r#","devices":0"#)),
            Err(ProtocolError::ZeroDevices)
        );
    }

    #[test]
    fn nullable_keys_are_still_required() {
        let mem = r#"{"v":1,"type":"memory","rank":0,"step":1,"t":1.0,"allocated_bytes":null,"reserved_bytes":null,"peak_bytes":null}"#;
        let Ok(WorkerMsg::Memory(m)) = parse_worker(mem) else {
            panic!("CPU memory rejected")
        };
        assert_eq!(
            (m.allocated_bytes, m.peak_bytes, m.strategy),
            (None, None, None)
        );
        let no_peak = mem.replace(r#","peak_bytes":null"#, "");
        assert!(matches!(
            parse_worker(&no_peak),
            Err(ProtocolError::BadFields { .. })
        ));
        let plan = r#"{"v":1,"type":"plan","rank":0,"step":0,"t":1.0,"total_steps":null}"#;
        assert!(matches!(
            parse_worker(plan),
            Ok(WorkerMsg::Plan(Plan {
                total_steps: None,
                ..
            }))
        ));
        assert!(parse_worker(&plan.replace(r#","total_steps":null"#, "")).is_err());
    }

    #[test]
    fn comm_ops_are_typed_and_range_checked() {
        let line = r#"{"v":1,"type":"comm","rank":0,"step":12,"t":9.0,"timing":"profiler","ops":[{"op":"reduce_scatter","name":"layer1.0","pass":"bwd","bytes":64,"start_ms":1.5,"dur_ms":0.25}]}"#;
        let Ok(WorkerMsg::Comm(c)) = parse_worker(line) else {
            panic!("comm rejected")
        };
        assert_eq!(c.timing, Timing::Profiler);
        assert_eq!(
            (c.ops[0].op, c.ops[0].pass),
            (Collective::ReduceScatter, Pass::Bwd)
        );
        assert_eq!(c.ops[0].end_ms(), 1.75);
        assert_eq!(
            parse_worker(&line.replace("0.25", "-0.25")),
            Err(ProtocolError::BadNumber("dur_ms"))
        );
    }

    #[test]
    fn check_values_may_be_negative_but_not_the_distance() {
        let line = r#"{"v":1,"type":"check","rank":0,"step":1,"t":5.0,"name":"bias","a":-0.5,"b":-0.5,"diff":0.0,"tol":1e-6,"ok":true}"#;
        assert!(matches!(
            parse_worker(line),
            Ok(WorkerMsg::Check(Check { ok: true, .. }))
        ));
        assert_eq!(
            parse_worker(&line.replace(r#""diff":0.0"#, r#""diff":-1.0"#)),
            Err(ProtocolError::BadNumber("diff"))
        );
    }

    #[test]
    fn hlo_ops_ignore_unknown_collectives_but_check_sizes() {
        let line = r#"{"v":1,"type":"hlo","rank":0,"step":0,"t":2.0,"k":2,"all_reduce_ops":1,"all_reduce_bytes":4,"ops":{"all_to_all":{},"all_gather":{"count":2,"largest_elems":3,"total_elems":5,"total_bytes":20}}}"#;
        let Ok(WorkerMsg::Hlo(h)) = parse_worker(line) else {
            panic!("hlo rejected")
        };
        let ops = h.ops.expect("ops parsed");
        assert_eq!(ops.all_gather.map(|s| s.count), Some(2));
        assert_eq!(ops.all_reduce, None);
        assert_eq!(
            parse_worker(&line.replace(r#""largest_elems":3"#, r#""largest_elems":6"#)),
            Err(ProtocolError::LargestAboveTotal("all_gather"))
        );
    }

    #[test]
    fn bucket_kernel_time_is_range_checked() {
        let line = r#"{"v":1,"type":"buckets","rank":0,"step":5,"t":3.0,"rebuilt":true,"bwd_compute_ms":2.0,"exposed_ms":0.0,"start_inferred":false,"buckets":[{"index":0,"bytes":1,"ready_ms":1.0,"start_ms":1.1,"done_ms":1.3,"kernel_ms":0.15}]}"#;
        let Ok(WorkerMsg::Buckets(b)) = parse_worker(line) else {
            panic!("buckets rejected")
        };
        assert_eq!(
            (b.start_inferred, b.buckets[0].kernel_ms),
            (Some(false), Some(0.15))
        );
        assert_eq!(
            parse_worker(&line.replace("0.15", "-0.15")),
            Err(ProtocolError::BadNumber("kernel_ms"))
        );
    }
}
