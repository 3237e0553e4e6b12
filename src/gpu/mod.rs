//! GPU and worker-process telemetry: a `GpuSource` (NVML, or fakes for tests), sysinfo CPU % and
//! RSS of the workers' pids, and a sampler thread that sends both on a channel about once a
//! second. `apply_gpu_sample` folds a sample into `State` (pure).
//!
//! Every field is optional: NVML answers `NotSupported` per metric and per device, and one GPU
//! that cannot be read at all becomes a row with an error, never a failed tick.

pub mod fake;
pub mod nvml;
pub mod procs;
pub mod sampler;

use crate::app::{GpuView, ProcStat, State};
use std::collections::BTreeMap;

/// Points of utilisation history kept per GPU (a minute at the default 1 Hz).
pub const HISTORY: usize = 60;

pub use crate::app::GpuSample;

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

/// Fold one GPU sample (or a failed tick) into the state: latest figures, a minute of util
/// history per GPU (`HISTORY` points), the note when sampling fails. Bumps `generation`.
pub fn apply_gpu_sample(state: &mut State, sample: Result<Vec<GpuSample>, GpuError>) {
    match sample {
        Ok(samples) => {
            state.gpu_note = None;
            for s in samples {
                let pos = state.gpus.iter().position(|g| g.index == s.index);
                let g = match pos {
                    Some(i) => &mut state.gpus[i],
                    None => {
                        state.gpus.push(GpuView {
                            latest: GpuSample {
                                index: s.index,
                                ..Default::default()
                            },
                            ..Default::default()
                        });
                        state.gpus.sort_by_key(|g| g.index);
                        let i = state
                            .gpus
                            .iter()
                            .position(|g| g.index == s.index)
                            .expect("just pushed");
                        &mut state.gpus[i]
                    }
                };
                // A gap (no figure this tick) is recorded as 0 so the minute stays a minute.
                g.util_history.push_back(u64::from(s.util_pct.unwrap_or(0)));
                // Name and total memory do not change: keep them when a tick lacks them.
                let name = s.name.clone().or_else(|| g.latest.name.take());
                let mem_total = s.mem_total.or(g.latest.mem_total);
                g.latest = GpuSample {
                    name,
                    mem_total,
                    ..s
                };
                while g.util_history.len() > HISTORY {
                    g.util_history.pop_front();
                }
            }
        }
        Err(GpuError::Unavailable(why)) => {
            state.gpus.clear();
            state.gpu_note = Some(nvml_note(&why));
        }
        Err(e @ GpuError::Failed(_)) => {
            // Keep the last rows; say that they are stale.
            state.gpu_note = Some(format!("{e} (showing the last sample)"));
        }
    }
    state.generation += 1;
}

/// Replace the worker processes' CPU % and RSS. Bumps `generation` only when something changed.
pub fn apply_proc_stats(state: &mut State, stats: BTreeMap<u32, ProcStat>) {
    let same = state.proc_stats.len() == stats.len()
        && state
            .proc_stats
            .iter()
            .zip(stats.iter())
            .all(|((a, x), (b, y))| a == b && x.cpu_pct == y.cpu_pct && x.rss_bytes == y.rss_bytes);
    if !same {
        state.proc_stats = stats;
        state.generation += 1;
    }
}

/// Fold any update from the sampler.
pub fn apply_update(state: &mut State, u: Update) {
    match u {
        Update::Gpus(s) => apply_gpu_sample(state, s),
        Update::Procs(p) => apply_proc_stats(state, p),
    }
}

/// Pids of every rank of every active run: what the sampler should watch.
pub fn worker_pids(state: &State) -> Vec<u32> {
    let mut v: Vec<u32> = state
        .active_runs()
        .flat_map(|r| r.ranks.values().filter_map(|k| k.pid))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Fill the header's GPU fields from a source's static info.
pub fn apply_info(state: &mut State, info: &GpuInfo) {
    state.host.gpu_summary = info.summary();
    if info.interconnect.is_some() {
        state.host.interconnect = info.interconnect.clone();
    }
    state.generation += 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::HostInfo;

    #[test]
    fn history_keeps_a_minute_and_gaps_are_zero() {
        let mut st = State::new(HostInfo::default());
        for i in 0..70u32 {
            let s = GpuSample {
                index: 0,
                util_pct: (i % 2 == 0).then_some(50),
                ..Default::default()
            };
            apply_gpu_sample(&mut st, Ok(vec![s]));
        }
        let g = &st.gpus[0];
        assert_eq!(g.util_history.len(), HISTORY);
        assert_eq!(g.util_history.back(), Some(&0));
        assert_eq!(g.util_pct, None);
    }

    #[test]
    fn unavailable_clears_rows_and_sets_the_note() {
        let mut st = State::new(HostInfo::default());
        apply_gpu_sample(&mut st, Ok(vec![GpuSample::default()]));
        let g0 = st.generation;
        apply_gpu_sample(&mut st, Err(GpuError::Unavailable("driver gone".into())));
        assert!(st.gpus.is_empty());
        assert!(st.gpu_note.as_deref().unwrap().contains("GPU rows off"));
        assert!(st.generation > g0);
    }

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
