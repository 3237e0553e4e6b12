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

fn check_numbers(msg: &WorkerMsg) -> Result<(), ProtocolError> {
    match msg {
        WorkerMsg::Hello(h) => {
            nonneg("t", h.t)?;
            if h.world_size == 0 {
                return Err(ProtocolError::ZeroWorld);
            }
            if h.rank >= h.world_size {
                return Err(ProtocolError::RankOutOfRange {
                    rank: h.rank,
                    world_size: h.world_size,
                });
            }
        }
        WorkerMsg::Heartbeat(m) => nonneg("t", m.t)?,
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
        }
        WorkerMsg::Buckets(b) => {
            nonneg("t", b.t)?;
            nonneg("bwd_compute_ms", b.bwd_compute_ms)?;
            nonneg("exposed_ms", b.exposed_ms)?;
            for s in &b.buckets {
                nonneg("ready_ms", s.ready_ms)?;
                nonneg("start_ms", s.start_ms)?;
                nonneg("done_ms", s.done_ms)?;
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
        WorkerMsg::Hlo(m) => nonneg("t", m.t)?,
        WorkerMsg::Log(m) => nonneg("t", m.t)?,
        WorkerMsg::Result(r) => {
            nonneg("t", r.t)?;
            if let Some(x) = r.samples_per_s {
                nonneg("samples_per_s", x)?;
            }
        }
        WorkerMsg::Bye(m) => nonneg("t", m.t)?,
    }
    Ok(())
}
