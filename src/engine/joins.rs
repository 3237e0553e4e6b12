//! The never-joined verdict's side of the engine: a rank that said hello and never entered
//! `init_process_group` while its peers wait there (`app::diagnose::never_joined`). Without it
//! the peers wait out the process group's timeout (30 minutes by default) and the watchdog,
//! which allows start-up minutes, calls the run hung with no word on which rank is missing.
//! Named within the run's stall threshold, then stopped as a hang is (or, for an attached job,
//! only reported unless `--stop-on-hang`). Kept apart from `hangs`: its clock starts at the
//! rendezvous, not at the last step.

use super::Engine;
use crate::app::Level;
use crate::app::diagnose::{self, JoinWait};
use crate::run::RunStatus;
use crate::store::EventRow;
use std::time::{Duration, Instant};

impl Engine {
    /// The never-joined verdict's allowances for `run`: its stall threshold for a rank that
    /// said hello and idles, the start-up allowance for one still busy (or not yet connected).
    fn join_wait(&self, run: &crate::run::RunView) -> JoinWait {
        let wd = &self.opts.watchdog;
        JoinWait {
            idle_s: wd.threshold_s(run),
            busy_s: wd.startup_s,
        }
    }

    /// The earliest instant a launched, undecided run's missing rank is due to be named.
    pub(super) fn next_join_deadline(&self) -> Option<Instant> {
        let fired = self.last_deadline;
        self.launches
            .iter()
            .filter(|(_, l)| l.ending.is_none() && l.hung_at.is_none())
            .filter_map(|(id, _)| {
                let v = self.state.run(id)?;
                diagnose::join_due(v, self.join_wait(v))
            })
            // A deadline that fired and changed nothing is left to the periodic tick.
            .filter(|t| fired.is_none_or(|f| *t > f))
            .min()
    }

    /// Name, and stop, the runs whose ranks wait at the rendezvous for one that never came.
    pub(super) fn check_joins(&mut self, now: Instant) {
        let due: Vec<_> = self
            .state
            .active_runs()
            .filter(|v| {
                self.launches
                    .get(&v.id)
                    .is_some_and(|l| l.ending.is_none() && l.hung_at.is_none())
            })
            .filter_map(|v| {
                diagnose::never_joined(v, now, self.join_wait(v), false).map(|d| (v.id.clone(), d))
            })
            .collect();
        for (run, d) in due {
            self.declare_never_joined(&run, d, now);
        }
    }

    fn declare_never_joined(&mut self, run: &str, d: crate::run::Diagnosis, now: Instant) {
        let keep_running = !self.opts.stop_attached_on_hang
            && self
                .state
                .run(run)
                .is_some_and(|v| v.spec.kind().runs_user_script());
        let line = d.line();
        let evidence = d.evidence.clone();
        let Some(v) = self.state.run_mut(run) else {
            return;
        };
        if !diagnose::add(v, d) {
            return;
        }
        v.push_tail(format!("ddptop: {line}"));
        // The run's hang evidence: the verdict and each rank's hello/init times, then the
        // ranks' stacks (where the missing one is) when they arrive.
        v.evidence.hang_report.push(line.clone());
        v.evidence.hang_report.extend(evidence);
        if keep_running {
            v.evidence.watch_note = Some(format!("stalled in init, reported, not stopped: {line}"));
            v.status = RunStatus::Stalled;
        }
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        l.hung_at = Some(now);
        if !keep_running {
            l.ending = Some((RunStatus::Hung, Some(line.clone())));
        }
        self.pending.push(EventRow::note(run, &line));
        self.persist_live(run);
        let how = if keep_running {
            "leaving your job running (x stops it; attach --stop-on-hang stops it next time)"
        } else {
            "collecting stacks, then stopping it"
        };
        self.state
            .push_message(Level::Error, Some(run), format!("{run}: {line} ({how})"));
        self.collect_hang_evidence(run);
        if !keep_running {
            self.spawn_stop(
                run,
                super::hangs::EVIDENCE_WAIT + Duration::from_millis(300),
            );
        }
    }
}
