//! Parsing plus the checks serde cannot express. A line that passes here is safe to reduce.

use super::messages::{ControlMsg, WorkerMsg};
use serde_json::Value;

pub use super::bounds::{ProtocolError, limits, plausible};

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
    "nccl_hello",
    "nccl",
];
const CONTROL_TYPES: &[&str] = &["welcome", "error", "command"];

/// Parse and validate one worker → ddptop line.
pub fn parse_worker(line: &str) -> Result<WorkerMsg, ProtocolError> {
    let kind = match canonical_kind(line) {
        Some(k) => std::borrow::Cow::Borrowed(k),
        None => std::borrow::Cow::Owned(envelope(line, WORKER_TYPES)?),
    };
    // Straight from the text into the typed message: no intermediate `Value` tree.
    let msg = typed(&kind, line).map_err(|e| ProtocolError::BadFields {
        kind: kind.into_owned(),
        detail: e.to_string(),
    })?;
    check_numbers(&msg)?;
    Ok(msg)
}

/// The envelope of a line that starts the way every ddptop worker writes it,
/// `{"v":1,"type":"<kind>",` (Python's client and `WorkerMsg::to_line` put `v` and `type`
/// first): read from the prefix, so the line is parsed once instead of twice. Anything else
/// (other key orders, spaces) goes through [`envelope`]. Either way the first `v` and `type`
/// decide; the typed parse ignores keys it does not know, a repeated `type` included.
fn canonical_kind(line: &str) -> Option<&str> {
    let rest = line.strip_prefix(r#"{"v":1,"type":""#)?;
    let end = rest.find('"')?;
    let kind = &rest[..end];
    matches!(rest.as_bytes().get(end + 1), Some(b',' | b'}'))
        .then_some(kind)
        .filter(|k| WORKER_TYPES.contains(k))
}

/// The typed message of a line whose `type` is `kind`. The hot messages (a step, its buckets,
/// a heartbeat: all but a few lines of a run) go straight into their struct; serde's tagged
/// enum would first buffer every key and value of the line to find the tag.
fn typed(kind: &str, line: &str) -> serde_json::Result<WorkerMsg> {
    Ok(match kind {
        "step" => WorkerMsg::Step(serde_json::from_str(line)?),
        "buckets" => WorkerMsg::Buckets(serde_json::from_str(line)?),
        "heartbeat" => WorkerMsg::Heartbeat(serde_json::from_str(line)?),
        _ => serde_json::from_str(line)?,
    })
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

fn upto(name: &'static str, x: f64, max: f64) -> Result<(), ProtocolError> {
    if !(x.is_finite() && x >= 0.0) {
        Err(ProtocolError::BadNumber(name))
    } else if x > max {
        Err(ProtocolError::Implausible(name, max))
    } else {
        Ok(())
    }
}

fn finite(name: &'static str, x: f64) -> Result<(), ProtocolError> {
    if !x.is_finite() {
        Err(ProtocolError::NotFinite(name))
    } else if x.abs() > limits::VALUE {
        Err(ProtocolError::Implausible(name, limits::VALUE))
    } else {
        Ok(())
    }
}

fn count(name: &'static str, x: u64, max: u64) -> Result<(), ProtocolError> {
    if x > max {
        Err(ProtocolError::Implausible(name, max as f64))
    } else {
        Ok(())
    }
}

/// The range checks of one typed message (also applied to stored events when they are read
/// back, which may predate them).
pub fn check_numbers(msg: &WorkerMsg) -> Result<(), ProtocolError> {
    use limits::*;
    let t = |x: f64| upto("t", x, T_S);
    let ms = |name: &'static str, x: f64| upto(name, x, MS);
    match msg {
        WorkerMsg::Hello(h) => {
            t(h.t)?;
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
        WorkerMsg::Heartbeat(m) => check_heartbeat(m)?,
        WorkerMsg::Step(s) => check_step(s)?,
        WorkerMsg::Buckets(b) => {
            t(b.t)?;
            ms("bwd_compute_ms", b.bwd_compute_ms)?;
            ms("exposed_ms", b.exposed_ms)?;
            for s in &b.buckets {
                count("bytes", s.bytes, BYTES)?;
                ms("ready_ms", s.ready_ms)?;
                ms("start_ms", s.start_ms)?;
                ms("done_ms", s.done_ms)?;
                if let Some(k) = s.kernel_ms {
                    ms("kernel_ms", k)?;
                }
            }
        }
        WorkerMsg::Epoch(e) => {
            t(e.t)?;
            count("samples", e.samples, COUNT)?;
            upto("seconds", e.seconds, SECONDS)?;
            upto("samples_per_s", e.samples_per_s, SAMPLES_PER_S)?;
            ms("data_wait_ms", e.data_wait_ms)?;
        }
        WorkerMsg::Probe(p) => {
            t(p.t)?;
            for (n, x) in [
                ("median_ms", p.median_ms),
                ("min_ms", p.min_ms),
                ("max_ms", p.max_ms),
            ] {
                ms(n, x)?;
            }
        }
        WorkerMsg::Bench(b) => {
            t(b.t)?;
            count("bytes", b.bytes, BYTES)?;
            upto("time_us", b.time_us, US)?;
            upto("algbw_gbs", b.algbw_gbs, GBS)?;
            upto("busbw_gbs", b.busbw_gbs, GBS)?;
        }
        WorkerMsg::Memory(m) => check_memory(m)?,
        WorkerMsg::Hlo(m) => check_hlo(m)?,
        WorkerMsg::Log(m) => check_log(m)?,
        WorkerMsg::Result(r) => {
            t(r.t)?;
            if let Some(x) = r.samples_per_s {
                upto("samples_per_s", x, SAMPLES_PER_S)?;
            }
            if let Some(x) = r.family.attach().and_then(|a| a.compile_s) {
                upto("compile_s", x, SECONDS)?;
            }
            if r.family
                .jax()
                .and_then(|j| j.jax_matmul_precision.as_deref())
                == Some("")
            {
                return Err(ProtocolError::Empty("jax_matmul_precision"));
            }
        }
        WorkerMsg::Bye(m) => t(m.t)?,
        WorkerMsg::Plan(m) => {
            t(m.t)?;
            count("total_steps", m.total_steps.unwrap_or(0), COUNT)?;
            count("steps_per_epoch", m.steps_per_epoch.unwrap_or(0), COUNT)?;
            for b in m.bucket_bytes.iter().flatten() {
                count("bucket_bytes", *b, BYTES)?;
            }
        }
        WorkerMsg::Comm(c) => {
            t(c.t)?;
            for op in &c.ops {
                count("bytes", op.bytes, BYTES)?;
                ms("start_ms", op.start_ms)?;
                ms("dur_ms", op.dur_ms)?;
            }
        }
        WorkerMsg::Check(c) => {
            // `a` and `b` are whatever was compared (a loss may be negative); only bounded.
            t(c.t)?;
            finite("a", c.a)?;
            finite("b", c.b)?;
            upto("diff", c.diff, VALUE)?;
            upto("tol", c.tol, VALUE)?;
        }
        WorkerMsg::NcclHello(h) => h.check()?,
        WorkerMsg::Nccl(b) => b.check()?,
    }
    Ok(())
}

/// A memory report's byte counts.
fn check_memory(m: &super::Memory) -> Result<(), ProtocolError> {
    use limits::*;
    let t = |x: f64| upto("t", x, T_S);
    t(m.t)?;
    for (n, x) in [
        ("allocated_bytes", m.allocated_bytes),
        ("reserved_bytes", m.reserved_bytes),
        ("peak_bytes", m.peak_bytes),
        ("param_bytes", m.param_bytes),
        ("grad_bytes", m.grad_bytes),
        ("optim_bytes", m.optim_bytes),
        ("predicted_bytes", m.predicted_bytes),
    ] {
        count(n, x.unwrap_or(0), BYTES)?;
    }
    Ok(())
}

/// A log line's finding: a bounded list of names and a count.
fn check_log(m: &super::Log) -> Result<(), ProtocolError> {
    use limits::*;
    let t = |x: f64| upto("t", x, T_S);
    t(m.t)?;
    if let Some(f) = &m.finding {
        if f.names.len() > super::Finding::MAX_NAMES
            || f.names
                .iter()
                .any(|n| n.chars().count() > super::Finding::MAX_NAME_CHARS)
        {
            return Err(ProtocolError::TooMany("finding.names"));
        }
        count("count", f.count.unwrap_or(0), COUNT)?;
    }
    Ok(())
}

/// A heartbeat's counters, its collective's age and its rendezvous strings.
fn check_heartbeat(m: &super::Heartbeat) -> Result<(), ProtocolError> {
    use limits::*;
    let t = |x: f64| upto("t", x, T_S);
    t(m.t)?;
    count("step", m.step, COUNT)?;
    if let Some(c) = m.cpu_s {
        upto("cpu_s", c, SECONDS)?;
    }
    if let Some(c) = &m.coll {
        count("coll.pending", u64::from(c.pending), COUNT)?;
        if let Some(a) = c.age_s {
            upto("coll.age_s", a, SECONDS)?;
        }
    }
    if let Some(r) = &m.rendezvous {
        let long = |s: &Option<String>| {
            s.as_ref()
                .is_some_and(|s| s.chars().count() > super::Rendezvous::MAX_CHARS)
        };
        if r.interfaces.len() > super::Rendezvous::MAX_INTERFACES
            || r.interfaces
                .iter()
                .any(|i| i.chars().count() > super::Rendezvous::MAX_CHARS)
            || [
                &r.master_addr,
                &r.master_port,
                &r.gloo_socket_ifname,
                &r.nccl_socket_ifname,
            ]
            .into_iter()
            .any(long)
        {
            return Err(ProtocolError::TooMany("rendezvous"));
        }
    }
    Ok(())
}

/// A step's counts and phase times.
fn check_step(s: &super::Step) -> Result<(), ProtocolError> {
    use limits::*;
    let t = |x: f64| upto("t", x, T_S);
    let ms = |name: &'static str, x: f64| upto(name, x, MS);
    t(s.t)?;
    count("step", s.step, COUNT)?;
    count("samples", s.samples, COUNT)?;
    for (n, x) in [
        ("fwd_ms", s.fwd_ms),
        ("bwd_ms", s.bwd_ms),
        ("opt_ms", s.opt_ms),
        ("data_ms", s.data_ms),
        ("step_ms", s.step_ms),
    ] {
        ms(n, x)?;
    }
    if let Some(loss) = s.loss {
        finite("loss", loss)?;
    }
    if s.every == Some(0) {
        return Err(ProtocolError::ZeroEvery);
    }
    if let Some(x) = s.t_bwd {
        t(x)?;
    }
    if let Some(x) = s.sync_ms {
        ms("sync_ms", x)?;
    }
    if let Some(x) = s.exposed_ms {
        ms("exposed_ms", x)?;
    }
    Ok(())
}

/// An HLO summary's bytes and per-collective totals (the largest within the total).
fn check_hlo(m: &super::Hlo) -> Result<(), ProtocolError> {
    use limits::*;
    let t = |x: f64| upto("t", x, T_S);
    t(m.t)?;
    count("all_reduce_bytes", m.all_reduce_bytes, BYTES)?;
    if let Some(ops) = &m.ops {
        for (name, stats) in [
            ("all_reduce", ops.all_reduce),
            ("all_gather", ops.all_gather),
            ("reduce_scatter", ops.reduce_scatter),
        ] {
            if let Some(s) = stats {
                if s.largest_elems > s.total_elems {
                    return Err(ProtocolError::LargestAboveTotal(name));
                }
                count("total_elems", s.total_elems, COUNT)?;
                count("total_bytes", s.total_bytes, BYTES)?;
                count("count", s.count, COUNT)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::*;

    const TOKEN: &str = "9f2c5e0a7b1d4c3e8f6a2b9d0c1e7f3a5b8d2c4e6f0a1b3c5d7e9f2a4b6c8d0e";

    /// The one-pass read of `{"v":1,"type":...` and the envelope pass for any other key order
    /// give the same message and the same refusals.
    #[test]
    fn the_canonical_prefix_and_other_key_orders_read_the_same() {
        let fields = r#""rank":3,"step":7,"epoch":1,"t":2.5,"warmup":false,"sync":true,"samples":32,"fwd_ms":1.0,"bwd_ms":2.0,"opt_ms":0.5,"data_ms":0.1,"step_ms":3.6,"timing":"host""#;
        let canonical = format!(r#"{{"v":1,"type":"step",{fields}}}"#);
        let reordered = format!(r#"{{{fields},"type":"step","v":1}}"#);
        let spaced = format!(r#"{{ "v": 1, "type": "step", {fields}}}"#);
        let msg = parse_worker(&canonical).unwrap();
        assert!(matches!(&msg, WorkerMsg::Step(s) if s.rank == 3 && s.step == 7));
        assert_eq!(parse_worker(&reordered).unwrap(), msg);
        assert_eq!(parse_worker(&spaced).unwrap(), msg);
        // What `to_line` writes reads back on the one-pass path.
        let line = msg.to_line();
        assert!(line.starts_with(r#"{"v":1,"type":"step","#), "{line}");
        assert_eq!(parse_worker(&line).unwrap(), msg);
        // Refusals are the same on both paths.
        let bad = fields.replace(r#""fwd_ms":1.0"#, r#""fwd_ms":-1.0"#);
        for line in [
            format!(r#"{{"v":1,"type":"step",{bad}}}"#),
            format!(r#"{{{bad},"type":"step","v":1}}"#),
        ] {
            assert_eq!(
                parse_worker(&line),
                Err(ProtocolError::BadNumber("fwd_ms")),
                "{line}"
            );
        }
        assert_eq!(
            parse_worker(r#"{"v":1,"type":"stepx","rank":0}"#),
            Err(ProtocolError::UnknownType)
        );
        assert_eq!(
            parse_worker(&format!(r#"{{"v":2,"type":"step",{fields}}}"#)),
            Err(ProtocolError::BadVersion)
        );
        assert!(matches!(
            parse_worker(r#"{"v":1,"type":"buckets","rank":0}"#),
            Err(ProtocolError::BadFields { kind, .. }) if kind == "buckets"
        ));
    }

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
    fn huge_finite_numbers_are_refused_per_field() {
        let step = r#"{"v":1,"type":"step","rank":0,"step":3,"epoch":0,"t":5.0,"warmup":false,"sync":true,"samples":32,"fwd_ms":1.0,"bwd_ms":2.0,"opt_ms":0.5,"data_ms":0.1,"step_ms":3.6,"timing":"cuda_events","loss":2.5}"#;
        assert!(parse_worker(step).is_ok(), "{:?}", parse_worker(step));
        assert_eq!(
            parse_worker(&step.replace("3.6", "1.7e308")),
            Err(ProtocolError::Implausible("step_ms", limits::MS))
        );
        assert!(matches!(
            parse_worker(&step.replace("2.5", "-1e300")),
            Err(ProtocolError::Implausible("loss", _))
        ));
        assert!(matches!(
            parse_worker(&step.replace(r#""samples":32"#, r#""samples":18446744073709551615"#)),
            Err(ProtocolError::Implausible("samples", _))
        ));
        let result = r#"{"v":1,"type":"result","rank":0,"step":470,"t":45.0,"experiment":"weak","samples_per_s":5602.0,"timed_epochs":1,"params":1,"grad_bytes":4,"bucket_bytes":[4]}"#;
        assert!(parse_worker(result).is_ok());
        assert!(matches!(
            parse_worker(&result.replace("5602.0", "1e300")),
            Err(ProtocolError::Implausible("samples_per_s", _))
        ));
        assert_eq!(plausible(1.7e308, limits::MS), None);
        assert_eq!(plausible(f64::NAN, limits::MS), None);
        assert_eq!(plausible(3.0, limits::MS), Some(3.0));
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
