//! Folding the GPU sampler's updates into `State` (pure): latest figures, a minute of
//! utilisation history per GPU, the note when sampling fails, the workers' CPU and RSS.

use super::state::State;
use crate::gpu::{GpuError, GpuInfo, GpuSample, GpuView, HISTORY, ProcStat, Update, nvml_note};
use std::collections::BTreeMap;

/// Fold one GPU sample (or a failed tick) into the state: latest figures, a minute of util
/// history per GPU (`HISTORY` points), the note when sampling fails. Returns whether to redraw
/// (always: a sample is new figures or a new note).
pub fn apply_gpu_sample(state: &mut State, sample: Result<Vec<GpuSample>, GpuError>) -> bool {
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
    true
}

/// Replace the worker processes' CPU % and RSS; returns whether anything changed.
pub fn apply_proc_stats(state: &mut State, stats: BTreeMap<u32, ProcStat>) -> bool {
    let same = state.proc_stats.len() == stats.len()
        && state
            .proc_stats
            .iter()
            .zip(stats.iter())
            .all(|((a, x), (b, y))| a == b && x.cpu_pct == y.cpu_pct && x.rss_bytes == y.rss_bytes);
    if !same {
        state.proc_stats = stats;
    }
    !same
}

/// Fold any update from the sampler; returns whether to redraw.
pub fn apply_update(state: &mut State, u: Update) -> bool {
    match u {
        Update::Gpus(s) => apply_gpu_sample(state, s),
        Update::Procs(p) => apply_proc_stats(state, p),
    }
}

/// Pids of every rank of every active run: what the sampler should watch.
pub fn worker_pids(state: &State) -> Vec<u32> {
    let mut v: Vec<u32> = state
        .active_runs()
        // A rank on another node has a pid of that node: nothing to sample here.
        .flat_map(|r| r.ranks.values().filter(|k| !k.remote).filter_map(|k| k.pid))
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
        let redraw = apply_gpu_sample(&mut st, Err(GpuError::Unavailable("driver gone".into())));
        assert!(st.gpus.is_empty());
        assert!(st.gpu_note.as_deref().unwrap().contains("GPU rows off"));
        assert!(redraw);
    }
}
