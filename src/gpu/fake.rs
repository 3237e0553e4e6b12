//! Fake GPU sources for tests and demos: N GPUs with deterministic figures, one that errors, and
//! devices that answer `NotSupported` for power, temperature and links.

use super::{GpuError, GpuInfo, GpuSample, GpuSource};

#[derive(Debug, Clone)]
pub struct FakeGpus {
    info: GpuInfo,
    tick: u64,
    /// This GPU index cannot be read (its sample carries an error).
    pub failing: Option<u32>,
    /// Power, temperature and link figures are "not supported".
    pub unsupported: bool,
    /// The next sample fails as a whole.
    pub fail_next: Option<GpuError>,
    /// Compute pids per GPU index.
    pub pids: Vec<Vec<u32>>,
    pub mem_total: u64,
}

impl FakeGpus {
    pub fn new(n: usize, name: &str) -> FakeGpus {
        FakeGpus {
            info: GpuInfo {
                names: vec![name.to_string(); n],
                interconnect: Some("NVLink (18 links/GPU)".into()),
                driver: Some("580.00".into()),
            },
            tick: 0,
            failing: None,
            unsupported: false,
            fail_next: None,
            pids: vec![Vec::new(); n],
            mem_total: 143_771 << 20,
        }
    }

    /// `n` H200s.
    pub fn h200(n: usize) -> FakeGpus {
        FakeGpus::new(n, "NVIDIA H200")
    }
}

impl GpuSource for FakeGpus {
    fn info(&self) -> &GpuInfo {
        &self.info
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        if let Some(e) = self.fail_next.take() {
            return Err(e);
        }
        self.tick += 1;
        let t = self.tick;
        Ok((0..self.info.names.len() as u32)
            .map(|i| {
                if self.failing == Some(i) {
                    return GpuSample {
                        index: i,
                        name: Some(self.info.names[i as usize].clone()),
                        error: Some("GPU is lost (fell off the bus)".into()),
                        ..Default::default()
                    };
                }
                let util = ((t * 7 + u64::from(i) * 13) % 101) as u32;
                GpuSample {
                    index: i,
                    name: Some(self.info.names[i as usize].clone()),
                    util_pct: Some(util),
                    mem_used: Some(self.mem_total / 100 * u64::from(util)),
                    mem_total: Some(self.mem_total),
                    power_w: (!self.unsupported).then_some(100.0 + f64::from(util) * 5.0),
                    power_limit_w: (!self.unsupported).then_some(700.0),
                    sm_clock_mhz: (!self.unsupported).then_some(1_980),
                    temp_c: (!self.unsupported).then_some(40 + util / 4),
                    link_rx_kbs: (!self.unsupported).then_some(u64::from(util) * 1_000_000),
                    link_tx_kbs: (!self.unsupported).then_some(u64::from(util) * 990_000),
                    link: (!self.unsupported).then_some("NVLink"),
                    pids: self.pids.get(i as usize).cloned().unwrap_or_default(),
                    error: None,
                }
            })
            .collect())
    }
}
