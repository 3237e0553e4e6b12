//! GPU and worker-process telemetry: a `GpuSource` (NVML, or fakes for tests), sysinfo CPU % and
//! RSS of the workers' pids, and a sampler thread that sends both on a channel about once a
//! second. `app::gpus` folds what it sends into `State`.
//!
//! Every field is optional: NVML answers `NotSupported` per metric and per device, and one GPU
//! that cannot be read at all becomes a row with an error, never a failed tick.

pub mod fake;
pub mod nvml;
pub mod pcie;
pub mod procs;
pub mod sampler;

use std::collections::{BTreeMap, VecDeque};

/// Points of utilisation history kept per GPU (a minute at the default 1 Hz).
pub const HISTORY: usize = 60;

/// One GPU at one moment. `None` = not supported / not available on this device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSample {
    pub index: u32,
    pub name: Option<String>,
    pub util_pct: Option<u32>,
    pub mem_used: Option<u64>,
    pub mem_total: Option<u64>,
    pub power_w: Option<f64>,
    /// The enforced power limit (W): a GPU at its cap is throttled.
    pub power_limit_w: Option<f64>,
    /// The SM clock now (MHz): a GPU slower than its peers shows here first.
    pub sm_clock_mhz: Option<u32>,
    pub temp_c: Option<u32>,
    /// NVLink (summed over active links) or PCIe throughput, KB/s.
    pub link_rx_kbs: Option<u64>,
    pub link_tx_kbs: Option<u64>,
    /// "NVLink" or "PCIe": what `link_*` measure. PCIe figures are read for one GPU per sample,
    /// in turn (`pcie::PcieRotation`); the others show their last reading.
    pub link: Option<&'static str>,
    pub pids: Vec<u32>,
    /// The device could not be read at all (lost, invalid): why.
    pub error: Option<String>,
}

/// One GPU's latest sample plus a minute of utilisation history. Reads of the sample's fields go
/// through `Deref` (`gpu.util_pct`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuView {
    pub latest: GpuSample,
    pub util_history: VecDeque<u64>,
}

impl std::ops::Deref for GpuView {
    type Target = GpuSample;
    fn deref(&self) -> &GpuSample {
        &self.latest
    }
}

#[derive(Debug, Clone, Default)]
pub struct ProcStat {
    pub cpu_pct: f32,
    pub rss_bytes: u64,
}

/// What does not change while ddptop runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuInfo {
    pub names: Vec<String>,
    /// e.g. "NVLink (18 links/GPU)", "PCIe Gen5 x16".
    pub interconnect: Option<String>,
    pub driver: Option<String>,
}

impl GpuInfo {
    pub fn count(&self) -> usize {
        self.names.len()
    }

    /// "8× NVIDIA H200", "NVIDIA A100 + NVIDIA T4", or `None` without GPUs.
    pub fn summary(&self) -> Option<String> {
        if self.names.is_empty() {
            return None;
        }
        let mut groups: Vec<(String, usize)> = Vec::new();
        for n in &self.names {
            match groups.iter_mut().find(|(g, _)| g == n) {
                Some((_, c)) => *c += 1,
                None => groups.push((n.clone(), 1)),
            }
        }
        Some(
            groups
                .into_iter()
                .map(|(n, c)| if c > 1 { format!("{c}× {n}") } else { n })
                .collect::<Vec<_>>()
                .join(" + "),
        )
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuError {
    /// The whole source is unusable (NVML gone, driver unloaded).
    #[error("{0}")]
    Unavailable(String),
    /// This tick failed; the next may work.
    #[error("GPU sampling failed: {0}")]
    Failed(String),
}

/// Where GPU samples come from.
pub trait GpuSource: Send {
    fn info(&self) -> &GpuInfo;
    /// One sample per GPU, in index order. A GPU that cannot be read gives a sample with `error`.
    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError>;
}

/// The note shown instead of GPU rows when NVML cannot be used.
pub fn nvml_note(reason: &str) -> String {
    format!("NVML not available: {reason} — GPU rows off, everything else works")
}

/// What the sampler thread sends each tick.
#[derive(Debug, Clone)]
pub enum Update {
    Gpus(Result<Vec<GpuSample>, GpuError>),
    Procs(BTreeMap<u32, ProcStat>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_groups_names() {
        let i = GpuInfo {
            names: vec!["NVIDIA H200".into(); 8],
            ..Default::default()
        };
        assert_eq!(i.summary().unwrap(), "8× NVIDIA H200");
        let j = GpuInfo {
            names: vec!["A".into(), "B".into(), "A".into()],
            ..Default::default()
        };
        assert_eq!(j.summary().unwrap(), "2× A + B");
        assert_eq!(GpuInfo::default().summary(), None);
    }
}
