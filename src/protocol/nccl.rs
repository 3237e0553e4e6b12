//! The NCCL profiler plugin's messages (plugins/nccl-profiler, docs/profiler.md): its own
//! handshake, `nccl_hello`, on a connection of its own beside the rank's worker connection, and
//! `nccl`, one communicator's collectives since the previous batch.

use super::bounds::{ProtocolError, limits};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The plugin's first line. Admitted like a `hello` (token, open run, world size) but not as the
/// rank's connection: a rank may have its worker and its plugin connected at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclHello {
    pub token: String,
    pub run_id: String,
    /// The process's global rank (torchrun's `RANK`; 0 when unset, as in a one-process JAX run).
    pub rank: u32,
    pub world_size: u32,
    pub pid: u32,
    pub host: String,
    /// The plugin's version and the interface NCCL loaded it through (`v5`, `v4`).
    pub plugin: String,
    pub abi: String,
    pub t: f64,
    #[serde(default)]
    pub node: Option<String>,
}

/// A collective NCCL started and has not completed, as of the message's `t`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclInflight {
    pub func: String,
    pub seq: u64,
    pub bytes: u64,
    /// Host time of the call (the plugin's `t` clock).
    pub t_call: f64,
    pub age_s: f64,
    /// Whether a channel of its kernel has started on the GPU.
    pub kernel: bool,
}

/// A completed collective, its channels folded into one span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclColl {
    pub func: String,
    /// NCCL's sequence number of this function on this communicator.
    pub seq: u64,
    pub count: u64,
    pub bytes: u64,
    pub dtype: String,
    pub algo: String,
    pub proto: String,
    pub channels: u32,
    /// Host times (seconds): the call, the first channel's start as NCCL's proxy thread saw it
    /// (`null`: none seen), completion.
    pub t_call: f64,
    pub t_kernel: Option<f64>,
    pub t_end: f64,
    /// GPU time from the earliest channel start to the latest channel stop (globaltimer).
    pub kernel_us: Option<f64>,
    /// Completed without all its channel events (see docs/profiler.md).
    #[serde(default)]
    pub partial: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclFuncSum {
    pub count: u64,
    pub bytes: u64,
    pub kernel_us: f64,
}

/// One communicator's batch (`type: "nccl"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclBatch {
    pub rank: u32,
    pub t: f64,
    /// NCCL's communicator id, 16 hex digits.
    pub comm: String,
    pub comm_rank: u32,
    pub nranks: u32,
    pub nnodes: u32,
    /// Per function, the latest completed sequence number.
    pub last_done: BTreeMap<String, u64>,
    pub inflight: Vec<NcclInflight>,
    pub colls: Vec<NcclColl>,
    /// Collectives of this batch beyond the listed ones (counted in `funcs` only).
    pub more: u64,
    pub funcs: BTreeMap<String, NcclFuncSum>,
    /// Process-wide, cumulative: events not recorded, collectives never to be reported, calls
    /// that made no sense (stop without start, …).
    pub dropped: u64,
    pub lost: u64,
    pub bad: u64,
    /// Process-wide, cumulative, counted apart from `bad` (absent from plugins before them):
    /// events of a type the plugin did not ask NCCL for, and in-flight collectives it stopped
    /// tracking to stay bounded (their completion, if it comes, is still counted).
    #[serde(default)]
    pub unrequested: u64,
    #[serde(default)]
    pub evicted: u64,
    /// The communicator was destroyed; this is its last message.
    #[serde(rename = "final")]
    pub last: bool,
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

fn count(name: &'static str, x: u64, max: u64) -> Result<(), ProtocolError> {
    if x > max {
        Err(ProtocolError::Implausible(name, max as f64))
    } else {
        Ok(())
    }
}

fn short(name: &'static str, s: &str) -> Result<(), ProtocolError> {
    if s.len() > 64 {
        Err(ProtocolError::BadFields {
            kind: "nccl".into(),
            detail: format!("`{name}` is longer than 64 bytes"),
        })
    } else {
        Ok(())
    }
}

impl NcclHello {
    pub fn check(&self) -> Result<(), ProtocolError> {
        upto("t", self.t, limits::T_S)?;
        if self.world_size == 0 {
            return Err(ProtocolError::ZeroWorld);
        }
        if self.rank >= self.world_size {
            return Err(ProtocolError::RankOutOfRange {
                rank: self.rank,
                world_size: self.world_size,
            });
        }
        Ok(())
    }
}

impl NcclBatch {
    pub fn check(&self) -> Result<(), ProtocolError> {
        use limits::*;
        upto("t", self.t, T_S)?;
        short("comm", &self.comm)?;
        for f in self.last_done.keys().chain(self.funcs.keys()) {
            short("func", f)?;
        }
        for i in &self.inflight {
            short("func", &i.func)?;
            count("bytes", i.bytes, BYTES)?;
            upto("t_call", i.t_call, T_S)?;
            upto("age_s", i.age_s, SECONDS)?;
        }
        for c in &self.colls {
            for (n, s) in [
                ("func", &c.func),
                ("dtype", &c.dtype),
                ("algo", &c.algo),
                ("proto", &c.proto),
            ] {
                short(n, s)?;
            }
            count("bytes", c.bytes, BYTES)?;
            count("count", c.count, COUNT)?;
            upto("t_call", c.t_call, T_S)?;
            upto("t_end", c.t_end, T_S)?;
            if let Some(k) = c.t_kernel {
                upto("t_kernel", k, T_S)?;
            }
            if let Some(k) = c.kernel_us {
                upto("kernel_us", k, US)?;
            }
        }
        for s in self.funcs.values() {
            count("count", s.count, COUNT)?;
            count("bytes", s.bytes, BYTES)?;
            upto("kernel_us", s.kernel_us, US)?;
        }
        Ok(())
    }

    /// The communicator's id as a number (`None` when it is not 16 hex digits).
    pub fn comm_id(&self) -> Option<u64> {
        u64::from_str_radix(&self.comm, 16).ok()
    }
}
