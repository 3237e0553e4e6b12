//! The NVML source. NVML is loaded at run time (dlopen of libnvidia-ml.so.1), once; every metric
//! is read on its own so that a `NotSupported` answer costs only that field.
//!
//! Link throughput: NVLink data counters (cumulative KiB, summed over the active links, as a rate
//! between two ticks) when the GPU has active NVLinks, else NVML's PCIe throughput (KB/s over a
//! 20 ms window), for one GPU per sample in turn (`pcie::PcieRotation`).

use super::{GpuError, GpuInfo, GpuSample, GpuSource};
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
};
use std::time::Instant;

/// Most NVLinks a GPU has (NVML_NVLINK_MAX_LINKS).
const MAX_LINKS: u32 = 18;

pub struct NvmlSource {
    nvml: Nvml,
    info: GpuInfo,
    /// Active NVLink indices per GPU (empty: PCIe).
    links: Vec<Vec<u32>>,
    /// Previous NVLink counters per GPU: (when, rx KiB, tx KiB).
    prev: Vec<Option<(Instant, u64, u64)>>,
    /// Time spent in each NVML call, and the calls a GPU does not support (skipped from then on).
    pub calls: CallStats,
    /// Which GPU's PCIe throughput the next sample reads (NVML waits 20 ms per call).
    pcie: super::pcie::PcieRotation,
}

/// The NVML calls of one sample, for timing and for remembering `NotSupported`.
/// Its name is how `ddptop bench-gpu`'s NVML timing table and the notes name the call.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "lowercase")]
pub enum Call {
    #[strum(serialize = "device handle")]
    Handle,
    Utilization,
    #[strum(serialize = "memory info")]
    Memory,
    Power,
    #[strum(serialize = "enforced power limit")]
    PowerLimit,
    #[strum(serialize = "SM clock")]
    SmClock,
    Temperature,
    #[strum(serialize = "compute processes")]
    ComputeProcesses,
    #[strum(serialize = "NVLink field values (all links)")]
    NvlinkCounters,
    #[strum(serialize = "PCIe rx throughput")]
    PcieRx,
    #[strum(serialize = "PCIe tx throughput")]
    PcieTx,
}

impl Call {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// Cumulative time per call over all samples, and per-GPU calls answered `NotSupported` once
/// (a GPU never starts supporting a field: asking again each second is pure cost).
#[derive(Debug, Default)]
pub struct CallStats {
    pub samples: u64,
    pub total: std::collections::BTreeMap<Call, (u64, std::time::Duration)>,
    pub unsupported: std::collections::BTreeSet<(u32, Call)>,
}

impl CallStats {
    fn record(&mut self, call: Call, took: std::time::Duration) {
        let e = self.total.entry(call).or_default();
        e.0 += 1;
        e.1 += took;
    }

    /// Make the call unless the GPU said `NotSupported` before; time it; remember a
    /// `NotSupported` answer. `None`: skipped.
    fn time<T>(
        &mut self,
        gpu: u32,
        call: Call,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<Result<T, NvmlError>> {
        if self.unsupported.contains(&(gpu, call)) {
            return None;
        }
        let t0 = Instant::now();
        let r = f();
        self.record(call, t0.elapsed());
        if matches!(r, Err(NvmlError::NotSupported)) {
            self.unsupported.insert((gpu, call));
        }
        Some(r)
    }
}

/// A one-line reason for an NVML init failure.
pub fn explain(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(l) => {
            let s = l.to_string();
            if s.contains("cannot open shared object") {
                "libnvidia-ml.so.1 not found (no NVIDIA driver)".into()
            } else {
                s
            }
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".into(),
        NvmlError::LibraryNotFound => "libnvidia-ml.so.1 not found".into(),
        NvmlError::NoPermission => "no permission to use the GPU driver".into(),
        other => other.to_string(),
    }
}

impl NvmlSource {
    /// Open NVML and read the static facts. `Err` carries a one-line reason.
    pub fn new() -> Result<NvmlSource, String> {
        let nvml = Nvml::init().map_err(|e| explain(&e))?;
        let count = nvml.device_count().map_err(|e| explain(&e))?;
        if count == 0 {
            return Err("NVML sees no GPU".into());
        }
        let mut names = Vec::new();
        let mut links = Vec::new();
        let mut pcie = None;
        for i in 0..count {
            match nvml.device_by_index(i) {
                Ok(d) => {
                    names.push(d.name().unwrap_or_else(|_| format!("GPU {i}")));
                    let mut active = Vec::new();
                    for l in 0..MAX_LINKS {
                        match d.link_wrapper_for(l).is_active() {
                            Ok(true) => active.push(l),
                            Ok(false) => {}
                            Err(_) => break,
                        }
                    }
                    links.push(active);
                    if pcie.is_none()
                        && let (Ok(g), Ok(w)) =
                            (d.current_pcie_link_gen(), d.current_pcie_link_width())
                    {
                        pcie = Some(format!("PCIe Gen{g} x{w}"));
                    }
                }
                Err(e) => {
                    names.push(format!("GPU {i} ({})", explain(&e)));
                    links.push(Vec::new());
                }
            }
        }
        let max_links = links.iter().map(Vec::len).max().unwrap_or(0);
        let interconnect = if max_links > 0 {
            Some(format!("NVLink ({max_links} links/GPU)"))
        } else {
            pcie
        };
        let driver = nvml.sys_driver_version().ok();
        let prev = vec![None; count as usize];
        Ok(NvmlSource {
            nvml,
            info: GpuInfo {
                names,
                interconnect,
                driver,
            },
            links,
            prev,
            calls: CallStats::default(),
            pcie: Default::default(),
        })
    }
}

/// Cumulative NVLink data counters (rx, tx) in KiB summed over `links`, read through the raw
/// field-values call so that each link can be named in `scopeId` (nvml-wrapper leaves it 0).
fn nvlink_counters(nvml: &Nvml, d: &nvml_wrapper::Device, links: &[u32]) -> Option<(u64, u64)> {
    if links.is_empty() {
        return None;
    }
    let lib = nvml.lib();
    // Old drivers lack the symbol; the generated wrapper would panic on calling it.
    if lib.nvmlDeviceGetFieldValues.is_err() {
        return None;
    }
    // SAFETY: the handle belongs to a live `Device` of this `Nvml`; the values array is
    // zero-initialised plain C data sized to the count we pass.
    unsafe {
        let handle = d.handle();
        let mut vals = Vec::with_capacity(links.len() * 2);
        for &l in links {
            for id in [
                NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
                NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            ] {
                let mut v = zeroed_arg(|p| lib.nvmlDeviceGetFieldValues(handle, 1, p));
                v.fieldId = id;
                v.scopeId = l;
                vals.push(v);
            }
        }
        let rc = lib.nvmlDeviceGetFieldValues(handle, vals.len() as i32, vals.as_mut_ptr());
        if rc != 0 {
            return None;
        }
        let (mut rx, mut tx) = (0u64, 0u64);
        for v in &vals {
            if v.nvmlReturn != 0 {
                return None;
            }
            // Counters are unsigned long long (valueType 5); read them as such.
            let x = v.value.ullVal;
            if v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX {
                rx = rx.saturating_add(x);
            } else {
                tx = tx.saturating_add(x);
            }
        }
        Some((rx, tx))
    }
}

/// A zeroed value of the pointee type of the closure's argument: lets us build NVML's C structs
/// without naming their type (it lives in nvml-wrapper-sys, which is not a direct dependency).
unsafe fn zeroed_arg<T, R>(_f: impl FnOnce(*mut T) -> R) -> T {
    // SAFETY: only used for plain-old-data C structs, for which all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

impl GpuSource for NvmlSource {
    fn info(&self) -> &GpuInfo {
        &self.info
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        let count = self.info.names.len() as u32;
        let mut out = Vec::with_capacity(count as usize);
        let calls = &mut self.calls;
        for i in 0..count {
            let d = match calls.time(i, Call::Handle, || self.nvml.device_by_index(i)) {
                Some(Ok(d)) => d,
                Some(Err(NvmlError::Uninitialized | NvmlError::DriverNotLoaded)) => {
                    return Err(GpuError::Unavailable("the NVIDIA driver went away".into()));
                }
                Some(Err(e)) => {
                    out.push(GpuSample {
                        index: i,
                        name: self.info.names.get(i as usize).cloned(),
                        error: Some(explain(&e)),
                        ..Default::default()
                    });
                    continue;
                }
                None => continue,
            };
            let mem = calls
                .time(i, Call::Memory, || d.memory_info())
                .and_then(Result::ok);
            let mut s = GpuSample {
                index: i,
                name: self.info.names.get(i as usize).cloned(),
                util_pct: calls
                    .time(i, Call::Utilization, || d.utilization_rates())
                    .and_then(Result::ok)
                    .map(|u| u.gpu),
                mem_used: mem.as_ref().map(|m| m.used),
                mem_total: mem.as_ref().map(|m| m.total),
                power_w: calls
                    .time(i, Call::Power, || d.power_usage())
                    .and_then(Result::ok)
                    .map(|mw| mw as f64 / 1000.0),
                power_limit_w: calls
                    .time(i, Call::PowerLimit, || d.enforced_power_limit())
                    .and_then(Result::ok)
                    .map(|mw| mw as f64 / 1000.0),
                sm_clock_mhz: calls
                    .time(i, Call::SmClock, || d.clock_info(Clock::SM))
                    .and_then(Result::ok),
                temp_c: calls
                    .time(i, Call::Temperature, || {
                        d.temperature(TemperatureSensor::Gpu)
                    })
                    .and_then(Result::ok),
                pids: calls
                    .time(i, Call::ComputeProcesses, || d.running_compute_processes())
                    .and_then(Result::ok)
                    .map(|ps| ps.into_iter().map(|p| p.pid).collect())
                    .unwrap_or_default(),
                ..Default::default()
            };
            let links = self.links.get(i as usize).cloned().unwrap_or_default();
            if !links.is_empty() {
                s.link = Some("NVLink");
                let now = Instant::now();
                let t0 = Instant::now();
                let counters = nvlink_counters(&self.nvml, &d, &links);
                calls.record(Call::NvlinkCounters, t0.elapsed());
                if let Some((rx, tx)) = counters {
                    if let Some((t0, rx0, tx0)) = self.prev[i as usize] {
                        let dt = now.duration_since(t0).as_secs_f64();
                        if dt > 0.0 {
                            // KiB → KB/s.
                            let rate =
                                |a: u64, b: u64| (a.saturating_sub(b) as f64 * 1.024 / dt) as u64;
                            s.link_rx_kbs = Some(rate(rx, rx0));
                            s.link_tx_kbs = Some(rate(tx, tx0));
                        }
                    }
                    self.prev[i as usize] = Some((now, rx, tx));
                }
            } else {
                // Read below, one GPU per sample.
                s.link = Some("PCIe");
            }
            out.push(s);
        }
        let nvml = &self.nvml;
        self.pcie.apply(&mut out, |i| {
            let Ok(d) = nvml.device_by_index(i) else {
                return (None, None);
            };
            let mut read = |call, counter| {
                calls
                    .time(i, call, || d.pcie_throughput(counter))
                    .and_then(Result::ok)
                    .map(u64::from)
            };
            (
                read(Call::PcieRx, PcieUtilCounter::Receive),
                read(Call::PcieTx, PcieUtilCounter::Send),
            )
        });
        self.calls.samples += 1;
        Ok(out)
    }
}

/// Compute processes NVML lists on each of `gpus` (a GPU NVML cannot open is skipped). Opens
/// NVML for the one question: used before a launch, not per sample.
pub fn compute_pids(gpus: &[u32]) -> Result<Vec<(u32, Vec<u32>)>, String> {
    let nvml = Nvml::init().map_err(|e| explain(&e))?;
    let mut out = Vec::new();
    for &i in gpus {
        if let Ok(d) = nvml.device_by_index(i) {
            let pids = d
                .running_compute_processes()
                .map(|ps| ps.into_iter().map(|p| p.pid).collect())
                .unwrap_or_default();
            out.push((i, pids));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calls' names as the hand-written table spelled them (issue 49).
    #[test]
    fn call_names_are_the_old_names() {
        use strum::VariantArray;
        let names: Vec<&str> = Call::VARIANTS.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "device handle",
                "utilization",
                "memory info",
                "power",
                "enforced power limit",
                "SM clock",
                "temperature",
                "compute processes",
                "NVLink field values (all links)",
                "PCIe rx throughput",
                "PCIe tx throughput",
            ]
        );
    }
}
