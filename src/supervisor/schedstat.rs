//! How long each local rank's main thread waited for a CPU core: `/proc/<pid>/schedstat`
//! (time on the CPU, time waiting on a run queue, timeslices; ns), read at each straggler
//! assessment, so that a rank slow only because the host is oversubscribed is told apart from
//! a rank slow by itself (`app::straggler::cpu_starvation`). One read of ~30 bytes per local
//! rank per assessment and one of `/proc/loadavg`; nothing for ranks on other nodes (their pid
//! is not this machine's) nor off Linux.

use crate::run::view::{HostLoad, RunQueueSample, RunView};

/// Samples kept per rank besides those the phase history reaches back to: a bound for a rank
/// whose phase history is empty (a JAX fused step, a run that has not stepped yet).
const MAX_SAMPLES: usize = crate::run::view::PHASE_HISTORY + 1;

/// The 2nd field of a `schedstat` text: ns spent waiting on a run queue.
pub fn parse_run_delay(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

/// The 1-minute load average of a `/proc/loadavg` text.
pub fn parse_load1(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The main thread's run-queue wait so far (ns): `/proc/<pid>/schedstat` is the thread group
/// leader's, the thread a training loop runs on (the other threads, gloo's and the
/// DataLoader's, would each be one more read).
fn run_delay_ns(pid: u32) -> Option<u64> {
    parse_run_delay(&std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?)
}

/// Sample every local rank of `run` with a pid: its run-queue wait at its current step, one
/// sample per step (a newer sample at the same step replaces the older), trimmed to the steps
/// its phase history still holds; and the host's load with it.
pub fn sample(run: &mut RunView) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let mut any = false;
    for r in run
        .ranks
        .values_mut()
        .filter(|r| !r.remote && r.connected && !r.said_bye)
    {
        let Some(wait_ns) = r.pid.and_then(run_delay_ns) else {
            continue;
        };
        any = true;
        let s = RunQueueSample {
            step: r.step,
            wait_ns,
        };
        match r.run_queue.back_mut() {
            Some(last) if last.step == s.step => *last = s,
            _ => r.run_queue.push_back(s),
        }
        // A window starts no earlier than the oldest phase sample: one sample at or before it
        // is all the oldest window needs.
        let oldest = r.recent_phases.front().map_or(0, |p| p.step);
        while r.run_queue.len() > MAX_SAMPLES
            || (r.run_queue.len() > 1 && r.run_queue[1].step <= oldest)
        {
            r.run_queue.pop_front();
        }
    }
    if any {
        let cores = run
            .straggler
            .host_load
            .map_or_else(crate::run::checks::cpu_cores, |h| h.cores);
        let load1 = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| parse_load1(&t));
        run.straggler.host_load = Some(HostLoad { load1, cores });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_run_queue_wait_and_the_load() {
        assert_eq!(
            parse_run_delay("1181360591 25499931 2104\n"),
            Some(25_499_931)
        );
        assert_eq!(parse_run_delay("12\n"), None);
        assert_eq!(parse_load1("8.12 7.54 6.90 3/412 26858\n"), Some(8.12));
    }

    #[test]
    fn samples_this_process_once_per_step_and_skips_remote_ranks() {
        use crate::run::view::RankView;
        let spec = crate::run::RunSpec::new(
            crate::run::Experiment::Weak,
            2,
            crate::protocol::Backend::Gloo,
        );
        let mut run = RunView::new("r".into(), spec, std::time::Instant::now(), 0.0);
        for (rank, remote) in [(0, false), (1, true)] {
            run.ranks.insert(
                rank,
                RankView {
                    rank,
                    pid: Some(std::process::id()),
                    connected: true,
                    remote,
                    step: 5,
                    ..Default::default()
                },
            );
        }
        sample(&mut run);
        sample(&mut run);
        if cfg!(target_os = "linux") {
            assert_eq!(run.ranks[&0].run_queue.len(), 1);
            assert!(run.straggler.host_load.is_some_and(|h| h.cores >= 1));
        }
        assert!(run.ranks[&1].run_queue.is_empty());
        run.ranks.get_mut(&0).unwrap().step = 6;
        sample(&mut run);
        if cfg!(target_os = "linux") {
            let q = &run.ranks[&0].run_queue;
            assert_eq!(q.iter().map(|s| s.step).collect::<Vec<_>>(), [5, 6]);
            assert!(q[1].wait_ns >= q[0].wait_ns);
        }
    }
}
