//! CPU % and RSS of the worker processes, from sysinfo, refreshing only the pids asked for.

use super::ProcStat;
use std::collections::BTreeMap;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

pub struct ProcSampler {
    sys: Option<System>,
}

impl Default for ProcSampler {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcSampler {
    pub fn new() -> ProcSampler {
        // One System for the whole session: CPU % is the difference to the previous refresh.
        ProcSampler {
            sys: System::new().ok(),
        }
    }

    /// CPU % (of one core; can exceed 100 with threads) and RSS of each live pid in `pids`. A
    /// process's first sample reads 0 % until sysinfo has two CPU readings of it.
    pub fn sample(&mut self, pids: &[u32]) -> BTreeMap<u32, ProcStat> {
        let Some(sys) = self.sys.as_mut() else {
            return BTreeMap::new();
        };
        if pids.is_empty() {
            return BTreeMap::new();
        }
        let ps: Vec<Pid> = pids.iter().map(|p| Pid::from_u32(*p)).collect();
        sys.refresh_processes_specifics(
            ProcessesToUpdate::Some(&ps),
            true,
            ProcessRefreshKind::nothing()
                .with_cpu()
                .with_memory()
                .without_tasks(),
        );
        pids.iter()
            .filter_map(|&pid| {
                sys.process(Pid::from_u32(pid)).map(|p| {
                    (
                        pid,
                        ProcStat {
                            cpu_pct: p.cpu_usage(),
                            rss_bytes: p.memory(),
                        },
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_has_rss_and_dead_pids_are_skipped() {
        let mut s = ProcSampler::new();
        let me = std::process::id();
        let m = s.sample(&[me, u32::MAX - 7]);
        assert!(m.get(&me).is_some_and(|p| p.rss_bytes > 0), "{m:?}");
        assert!(!m.contains_key(&(u32::MAX - 7)));
        assert!(s.sample(&[]).is_empty());
    }
}
