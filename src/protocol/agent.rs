//! Protocol v1 between `ddptop agent` (one per other node of a multi-node run) and ddptop, over
//! the run's TCP channel (docs/protocol.md, "Node agents"; docs/multinode.md).
//!
//! The same JSON Lines framing, line limit and token as a rank's connection: the agent's first
//! line is `agent_hello` (token, run, node name); ddptop answers `agent_welcome` (or the common
//! `error` and closes), then the agent sends one `node_sample` per tick and ddptop may send
//! `watch` (the pids of the run's ranks on that node, whose CPU % and RSS the agent samples).
//! Kept apart from `messages.rs`: an agent is not a rank and has none of a rank's fields.

use super::ProtocolError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most GPUs one node's sample may list (NVML's own limit is far below).
pub const MAX_NODE_GPUS: usize = 256;
/// Most processes one sample may list.
pub const MAX_NODE_PROCS: usize = 4096;
/// Longest name (node, GPU, error text) kept from an agent.
pub const MAX_NAME: usize = 256;

/// Where an agent's GPU figures come from. Serde and strum spell it alike (snake_case).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum GpuSourceKind {
    Nvml,
    /// NVIDIA's DCGM exporter (Prometheus text over HTTP).
    Dcgm,
    /// Made-up figures for tests (`DDPTOP_FAKE_GPUS`): shown as SIMULATED.
    Fake,
    /// No GPU source on the node (NVML not loadable): only process figures, and `note` says why.
    None,
}

impl GpuSourceKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The agent's first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentHello {
    pub token: String,
    pub run_id: String,
    /// The node's name as `--nodes` gave it.
    pub node: String,
    pub pid: u32,
    pub source: GpuSourceKind,
    /// GPUs the source sees.
    pub gpus: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Why the source is `none`, or a caveat of the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub t: f64,
}

/// One GPU in a node sample; absent fields are not supported or not read on that GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeGpu {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util_pct: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_used: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_c: Option<u32>,
    /// `NVLink` or `PCIe`: what `link_rx_kbs`/`link_tx_kbs` measure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_rx_kbs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_tx_kbs: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// CPU % (of one core) and RSS of one watched process on the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeProc {
    pub pid: u32,
    pub cpu_pct: f32,
    pub rss_bytes: u64,
}

/// One tick of a node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSample {
    pub t: f64,
    #[serde(default)]
    pub gpus: Vec<NodeGpu>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub procs: Vec<NodeProc>,
    /// The whole GPU read failed this tick (the agent keeps going).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Agent → ddptop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMsg {
    AgentHello(AgentHello),
    NodeSample(NodeSample),
}

/// ddptop → agent. Refusals use the common `error` message (`ControlMsg::Error`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToAgent {
    AgentWelcome {
        run_id: String,
        node: String,
    },
    /// Sample these pids' CPU % and RSS from now on (the run's ranks on this node).
    Watch {
        pids: Vec<u32>,
    },
}

fn versioned(v: Value) -> String {
    let mut v = v;
    if let Value::Object(m) = &mut v {
        m.insert("v".into(), Value::from(super::VERSION));
    }
    v.to_string()
}

impl AgentMsg {
    pub fn to_line(&self) -> String {
        versioned(serde_json::to_value(self).expect("agent messages always serialize"))
    }
    pub fn type_name(&self) -> &'static str {
        match self {
            AgentMsg::AgentHello(_) => "agent_hello",
            AgentMsg::NodeSample(_) => "node_sample",
        }
    }
}

impl ToAgent {
    pub fn to_line(&self) -> String {
        versioned(serde_json::to_value(self).expect("agent commands always serialize"))
    }
}

/// Whether a first line is an agent's (so the connection is served as one).
pub fn is_agent_hello(line: &str) -> bool {
    // Cheap before a full parse: a rank's hello never contains this type.
    line.contains("\"agent_hello\"")
        && matches!(
            serde_json::from_str::<Value>(line),
            Ok(Value::Object(m)) if m.get("type").and_then(Value::as_str) == Some("agent_hello")
        )
}

fn typed<T: serde::de::DeserializeOwned>(line: &str, types: &[&str]) -> Result<T, ProtocolError> {
    let v: Value = serde_json::from_str(line).map_err(|e| ProtocolError::NotJson(e.to_string()))?;
    let Value::Object(m) = &v else {
        return Err(ProtocolError::NotObject);
    };
    if m.get("v").and_then(Value::as_u64) != Some(u64::from(super::VERSION)) {
        return Err(ProtocolError::BadVersion);
    }
    let kind = m.get("type").and_then(Value::as_str).unwrap_or_default();
    if !types.contains(&kind) {
        return Err(ProtocolError::UnknownType);
    }
    let kind = kind.to_string();
    serde_json::from_value(v).map_err(|e| ProtocolError::BadFields {
        kind,
        detail: e.to_string(),
    })
}

fn bad(kind: &str, detail: impl Into<String>) -> ProtocolError {
    ProtocolError::BadFields {
        kind: kind.into(),
        detail: detail.into(),
    }
}

fn finite_nonneg(x: f64, field: &'static str) -> Result<(), ProtocolError> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        Err(ProtocolError::BadNumber(field))
    }
}

/// Text an agent sends is drawn on the dashboard: bounded, and no control characters (a
/// terminal escape sequence in a node or GPU name would reach the screen).
fn short(s: &Option<String>, kind: &str, field: &str) -> Result<(), ProtocolError> {
    match s {
        Some(s) if s.len() > MAX_NAME => Err(bad(kind, format!("{field} over {MAX_NAME} bytes"))),
        Some(s) if s.chars().any(char::is_control) => {
            Err(bad(kind, format!("{field} has a control character")))
        }
        _ => Ok(()),
    }
}

/// Parse and validate one agent → ddptop line.
pub fn parse_agent(line: &str) -> Result<AgentMsg, ProtocolError> {
    let msg: AgentMsg = typed(line, &["agent_hello", "node_sample"])?;
    match &msg {
        AgentMsg::AgentHello(h) => {
            finite_nonneg(h.t, "t")?;
            if h.node.is_empty() {
                return Err(bad("agent_hello", "node is empty"));
            }
            short(&Some(h.node.clone()), "agent_hello", "node")?;
            short(&h.driver, "agent_hello", "driver")?;
            short(&h.note, "agent_hello", "note")?;
        }
        AgentMsg::NodeSample(s) => {
            finite_nonneg(s.t, "t")?;
            if s.gpus.len() > MAX_NODE_GPUS {
                return Err(bad("node_sample", format!("over {MAX_NODE_GPUS} gpus")));
            }
            if s.procs.len() > MAX_NODE_PROCS {
                return Err(bad("node_sample", format!("over {MAX_NODE_PROCS} procs")));
            }
            short(&s.error, "node_sample", "error")?;
            for g in &s.gpus {
                if let Some(p) = g.power_w {
                    finite_nonneg(p, "power_w")?;
                }
                if g.util_pct.is_some_and(|u| u > 100) {
                    return Err(bad("node_sample", "util_pct above 100"));
                }
                if g.pids.len() > MAX_NODE_PROCS {
                    return Err(bad("node_sample", "too many pids on one GPU"));
                }
                short(&g.name, "node_sample", "name")?;
                short(&g.link, "node_sample", "link")?;
                short(&g.error, "node_sample", "error")?;
            }
            for p in &s.procs {
                finite_nonneg(f64::from(p.cpu_pct), "cpu_pct")?;
            }
        }
    }
    Ok(msg)
}

/// Parse one ddptop → agent line: a `ToAgent`, or the common `error` (as `Err` text).
pub fn parse_to_agent(line: &str) -> Result<Result<ToAgent, String>, ProtocolError> {
    if let Ok(super::ControlMsg::Error { code, msg }) = super::parse_control(line) {
        return Ok(Err(format!(
            "{}: {msg}",
            serde_json::to_value(code)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        )));
    }
    typed(line, &["agent_welcome", "watch"]).map(Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sources' names as the hand-written table spelled them (issue 49): strum's, and
    /// serde's on the wire, both ways.
    #[test]
    fn gpu_source_names_are_the_old_names_and_round_trip() {
        use strum::VariantArray;
        let names: Vec<&str> = GpuSourceKind::VARIANTS.iter().map(|s| s.as_str()).collect();
        assert_eq!(names, ["nvml", "dcgm", "fake", "none"]);
        for s in GpuSourceKind::VARIANTS {
            assert_eq!(s.as_str().parse::<GpuSourceKind>(), Ok(*s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::from(s.as_str())
            );
        }
    }

    fn sample() -> NodeSample {
        NodeSample {
            t: 3.0,
            gpus: vec![NodeGpu {
                index: 0,
                name: Some("NVIDIA H200".into()),
                util_pct: Some(87),
                mem_used: Some(1 << 30),
                mem_total: Some(141 << 30),
                power_w: Some(612.5),
                temp_c: Some(61),
                link: Some("NVLink".into()),
                link_rx_kbs: Some(12),
                link_tx_kbs: Some(13),
                pids: vec![5151],
                error: None,
            }],
            procs: vec![NodeProc {
                pid: 5151,
                cpu_pct: 98.5,
                rss_bytes: 1 << 30,
            }],
            error: None,
        }
    }

    #[test]
    fn messages_round_trip_with_the_version() {
        let m = AgentMsg::NodeSample(sample());
        let line = m.to_line();
        assert!(
            line.contains("\"v\":1") && line.contains("\"node_sample\""),
            "{line}"
        );
        assert_eq!(parse_agent(&line).unwrap(), m);
        let w = ToAgent::Watch { pids: vec![1, 2] };
        assert_eq!(parse_to_agent(&w.to_line()).unwrap().unwrap(), w);
        let e = crate::protocol::ControlMsg::Error {
            code: crate::protocol::ErrorCode::BadToken,
            msg: "no".into(),
        };
        assert_eq!(
            parse_to_agent(&e.to_line()).unwrap().unwrap_err(),
            "bad_token: no"
        );
    }

    #[test]
    fn implausible_samples_are_refused() {
        let mut s = sample();
        s.gpus[0].util_pct = Some(101);
        assert!(parse_agent(&AgentMsg::NodeSample(s).to_line()).is_err());
        let line = AgentMsg::NodeSample(sample())
            .to_line()
            .replace("612.5", "-1");
        assert!(matches!(
            parse_agent(&line),
            Err(ProtocolError::BadNumber("power_w"))
        ));
        let line = AgentMsg::NodeSample(sample())
            .to_line()
            .replace("\"v\":1", "\"v\":2");
        assert!(matches!(parse_agent(&line), Err(ProtocolError::BadVersion)));
        assert!(matches!(
            parse_agent(r#"{"v":1,"type":"hello"}"#),
            Err(ProtocolError::UnknownType)
        ));
        let mut s = sample();
        s.gpus[0].name = Some("H200\u{1b}[2J".into());
        let e = parse_agent(&AgentMsg::NodeSample(s).to_line()).unwrap_err();
        assert!(e.to_string().contains("control character"), "{e}");
    }

    #[test]
    fn only_an_agent_hello_is_taken_for_one() {
        let h = AgentMsg::AgentHello(AgentHello {
            token: "a".repeat(64),
            run_id: "r1".into(),
            node: "b".into(),
            pid: 7,
            source: GpuSourceKind::Fake,
            gpus: 2,
            driver: None,
            note: None,
            t: 0.0,
        });
        assert!(is_agent_hello(&h.to_line()));
        assert!(!is_agent_hello(
            r#"{"v":1,"type":"hello","msg":"agent_hello"}"#
        ));
        assert!(!is_agent_hello("agent_hello"));
    }
}
