//! The watchdog's side of the engine: when to wake next (a watchdog or teardown deadline),
//! judging every run at that instant, and turning a hang verdict into a report with evidence
//! (flight-recorder dumps, stacks) before the run is stopped, or only reported for an attached
//! job. Kept apart because it is policy (what counts as hung, what is left running) over the stop
//! machinery, and it changes for other reasons than the stop path does.

use super::Engine;
use crate::app::Level;
use crate::protocol::{Command, ControlMsg};
use crate::run::RunStatus;
use crate::store::EventRow;
use crate::supervisor::SupEvent;
use crate::supervisor::watchdog::{self, Verdict};
use std::time::{Duration, Instant};

/// How long a hung run's workers get to write their flight-recorder dumps.
pub(super) const EVIDENCE_WAIT: Duration = Duration::from_secs(3);

impl Engine {
    /// The earliest instant a launched, still undecided run becomes hung (watchdog) or overdue
    /// in its teardown, if no message arrives before it.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for (id, l) in &self.launches {
            if l.ending.is_some() {
                continue;
            }
            let Some(view) = self.state.run(id) else {
                continue;
            };
            let teardown = l
                .all_bye_at
                .filter(|_| l.exit.is_none())
                .map(|t| t + Duration::from_secs_f64(self.opts.watchdog.teardown_s.max(0.0)));
            // A deadline that already fired and changed nothing is left to the periodic tick,
            // so the loop never spins on it.
            let fired = self.last_deadline;
            let wd = watchdog::next_deadline(view, &self.opts.watchdog, fired);
            for t in [wd, teardown.filter(|t| fired.is_none_or(|l| *t > l))]
                .into_iter()
                .flatten()
            {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        // A rank that never joins the rendezvous is named within the stall threshold.
        match (next, self.next_join_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Judge every launched run at `now`: hung (watchdog) or overdue in teardown.
    pub(super) fn check_deadlines(&mut self, now: Instant) {
        let ids: Vec<String> = self.state.active_runs().map(|r| r.id.clone()).collect();
        for id in &ids {
            let Some(view) = self.state.run(id) else {
                continue;
            };
            let verdict = watchdog::check(view, now, &self.opts.watchdog);
            let note = watchdog::live_note(view, now, &self.opts.watchdog);
            self.set_watch_note(id, note);
            match verdict {
                Some(verdict) => self.declare_hung(id, verdict, now),
                None => self.maybe_resumed(id, now),
            }
            self.check_teardown(id, now);
        }
        self.check_joins(now);
    }

    /// The watchdog's live word on a run (warming up, a slow step waited out): kept on the
    /// run for the screens, and logged when it starts saying something new.
    fn set_watch_note(&mut self, run: &str, note: Option<String>) {
        let stalled = self
            .launches
            .get(run)
            .is_some_and(|l| l.hung_at.is_some() && l.ending.is_none());
        let Some(v) = self.state.run_mut(run) else {
            return;
        };
        if stalled {
            return; // the reported stall's note stays until progress resumes
        }
        let kind = |n: &Option<String>| {
            n.as_deref()
                .map(|s| s.split(':').next().unwrap_or(s).to_string())
        };
        let fresh = note.is_some() && kind(&note) != kind(&v.evidence.watch_note);
        v.evidence.watch_note = note.clone();
        if fresh && let Some(n) = note {
            self.state.push_message(Level::Info, Some(run), n);
        }
    }

    /// An attached job whose stall was reported (not stopped) and that made progress since.
    fn maybe_resumed(&mut self, run: &str, now: Instant) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        let Some(at) = l.hung_at.filter(|_| l.ending.is_none()) else {
            return;
        };
        let moved = self
            .state
            .run(run)
            .and_then(|v| v.clock.last_progress)
            .is_some_and(|p| p > at);
        if !moved {
            return;
        }
        l.hung_at = None;
        let text = format!(
            "{run}: progress resumed {:.1} s after the stall was reported; the stall stays in the run's evidence",
            now.duration_since(at).as_secs_f64()
        );
        self.pending.push(EventRow::note(run, &text));
        if let Some(v) = self.state.run_mut(run) {
            v.evidence.watch_note = None;
            v.evidence.hang_report.push(text.clone());
            if v.status == RunStatus::Stalled {
                v.status = RunStatus::Running;
            }
        }
        self.persist_live(run);
        self.state.push_message(Level::Info, Some(run), text);
    }

    /// The verdicts that need every rank's state (`app::diagnose`), judged when the run is
    /// found hung or failing: each new one to the screen, the log and the store.
    pub(super) fn diagnose_run(&mut self, run: &str) {
        // The ranks' own last lines (a rank killed by gloo's size check says why only there):
        // read here when the exit has not read them yet.
        let tails = match (self.state.run(run), self.launches.get(run)) {
            (Some(v), _) if !v.evidence.rank_tails.is_empty() => v.evidence.rank_tails.clone(),
            (_, Some(l)) => crate::supervisor::output::rank_tails(&l.run_dir),
            _ => Vec::new(),
        };
        let wait = crate::app::diagnose::JoinWait {
            idle_s: 0.0,
            busy_s: 0.0,
        };
        let now = Instant::now();
        // Only once the watchdog called the run hung: a run stopped, or crashed, during its
        // start-up has ranks that did not reach init yet, for no fault of theirs.
        let hung = self.launches.get(run).is_some_and(|l| l.hung_at.is_some());
        let Some(v) = self.state.run_mut(run) else {
            return;
        };
        let found = [
            crate::app::diagnose::uneven_inputs(v),
            crate::app::diagnose::collective_mismatch(v, &tails),
            // The watchdog's start-up verdict: a rank that never came is named with the rest.
            crate::app::diagnose::never_joined(v, now, wait, true).filter(|_| hung),
        ];
        let mut any = false;
        for d in found.into_iter().flatten() {
            let line = d.line();
            let Some(v) = self.state.run_mut(run) else {
                return;
            };
            if crate::app::diagnose::add(v, d) {
                v.push_tail(format!("ddptop: {line}"));
                self.pending.push(EventRow::note(run, &line));
                self.state
                    .push_message(Level::Error, Some(run), format!("{run}: {line}"));
                any = true;
            }
        }
        if any {
            self.persist_live(run);
        }
    }

    /// The run's live status and hang evidence into the store at once: another process
    /// (`ddptop show`, a script polling it) sees a stall while the job still runs.
    pub(super) fn persist_live(&self, run: &str) {
        if let Some(v) = self.state.run(run).filter(|v| !v.status.is_final()) {
            let _ = self.store.set_live(v);
        }
    }

    fn declare_hung(&mut self, run: &str, verdict: Verdict, now: Instant) {
        let keep_running = !self.opts.stop_attached_on_hang
            && self
                .state
                .run(run)
                .is_some_and(|v| v.spec.kind().runs_user_script());
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if l.hung_at.is_some() || l.ending.is_some() {
            return;
        }
        l.hung_at = Some(now);
        let why = verdict.to_string();
        self.diagnose_run(run);
        // A named failure leads the reason, as on a failing exit: it says what to fix.
        let named = self
            .state
            .run(run)
            .and_then(|v| {
                v.evidence
                    .diagnoses
                    .first()
                    .map(|d| format!("{}; ", d.line()))
            })
            .unwrap_or_default();
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if !keep_running {
            // A rank that reported its own failure and left its peers blocked in a collective
            // made the run fail; the hang is the consequence, not the cause.
            let failed_rank = self.state.run(run).and_then(|v| {
                v.ranks
                    .values()
                    .find_map(|r| r.error.as_ref().map(|e| (r.rank, e.clone())))
            });
            l.ending = Some(match &failed_rank {
                Some((rank, err)) => (
                    RunStatus::Failed,
                    Some(format!(
                        "{named}rank {rank} failed: {err}; the other ranks then hung ({why})"
                    )),
                ),
                None => (RunStatus::Hung, Some(format!("{named}{why}"))),
            });
        }
        let report = self
            .state
            .run(run)
            .map(|v| {
                // Beside the watchdog's verdict, and before any flight-recorder dump: where each
                // rank stands in NCCL's own collectives, when the profiler plugin is on.
                let mut r = watchdog::hang_report(v, now, &verdict);
                r.extend(
                    crate::app::collectives::stuck(v, now, 0.0)
                        .map(|s| format!("NCCL profiler: {s}")),
                );
                r.extend(crate::app::collectives::evidence_age(v, now));
                r
            })
            .unwrap_or_default();
        self.pending.push(EventRow::note(run, &report.join(" | ")));
        if let Some(v) = self.state.run_mut(run) {
            // An attached job may stall, resume and stall again: each report is kept.
            v.evidence.hang_report.extend(report);
            if keep_running {
                v.evidence.watch_note = Some(format!("stalled, reported, not stopped: {why}"));
                v.status = RunStatus::Stalled;
            }
        }
        self.persist_live(run);
        let text = if keep_running {
            format!(
                "{run} looks hung: {why}; collecting evidence and leaving your job running (x stops it; attach --stop-on-hang stops it next time)"
            )
        } else {
            format!("{run} HUNG: {why}; collecting evidence, then stopping it")
        };
        self.state.push_message(Level::Error, Some(run), text);
        self.collect_hang_evidence(run);
        if !keep_running {
            // The dump gets its moment before the tree goes.
            self.spawn_stop(run, EVIDENCE_WAIT + Duration::from_millis(300));
        }
    }

    /// Ask for a flight-recorder dump and the ranks' stacks two ways (the worker's own thread,
    /// and torch's pipe), give them a moment, then add their summary to the run's evidence.
    pub(super) fn collect_hang_evidence(&mut self, run: &str) {
        let Some(l) = self.launches.get(run) else {
            return;
        };
        let run_dir = l.run_dir.clone();
        // py-spy reads this machine's ranks only (a remote rank's pid is another node's).
        let pids: Vec<(u32, u32)> = self
            .state
            .run(run)
            .map(|v| {
                v.ranks
                    .values()
                    .filter(|r| !r.remote)
                    .filter_map(|r| r.pid.map(|p| (r.rank, p)))
                    .collect()
            })
            .unwrap_or_default();
        let _ = self.server.registry.command(
            run,
            ControlMsg::Command {
                cmd: Command::DumpFr,
            },
        );
        crate::supervisor::flight::request_dump(&run_dir);
        // Ranks on other nodes dump there, into the same path (the dump command reached them
        // over their TCP connection): say where, since this machine cannot read them.
        let elsewhere: Vec<String> = l
            .plan
            .iter()
            .flat_map(|p| p.hosts.iter().skip(1))
            .map(|h| {
                format!(
                    "node {h}: flight-recorder dumps are written on {h} in {} (fr_rank*); copy them here to read them",
                    run_dir.display()
                )
            })
            .collect();
        let tx = self.tx.clone();
        let rid = run.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(EVIDENCE_WAIT).await;
            let mut lines = tokio::task::spawn_blocking(move || {
                let mut v = crate::supervisor::flight::summarize(&run_dir);
                v.extend(crate::supervisor::flight::stacks(&run_dir, &pids));
                v
            })
            .await
            .unwrap_or_default();
            lines.extend(elsewhere);
            let _ = tx
                .send(SupEvent::Evidence {
                    run: rid.clone(),
                    lines,
                })
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Launch;
    use crate::engine::tests::engine;
    use crate::protocol::Backend;
    use crate::run::{Experiment, RunSpec, RunView};
    use crate::supervisor::Exit;

    /// A launched run whose view the watchdog has nothing to say about (no start instant), so
    /// only its teardown deadline counts; its launcher is still there.
    fn add_run(e: &mut Engine, id: &str, dir: &std::path::Path, all_bye_at: Option<Instant>) {
        let mut view = RunView::new(
            id.into(),
            RunSpec::new(Experiment::Weak, 2, Backend::Sim),
            Instant::now(),
            0.0,
        );
        view.clock.started = None;
        e.state.runs.push(view);
        e.launches.insert(
            id.into(),
            Launch {
                all_bye_at,
                ..Launch::new(None, dir.to_path_buf())
            },
        );
    }

    /// The earliest teardown deadline wins; a run already decided, or whose launcher is gone,
    /// sets none; and a deadline that already fired is not returned again (the loop would spin).
    #[tokio::test]
    async fn next_deadline_is_the_earliest_undecided_teardown() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = engine(dir.path());
        e.opts.watchdog.teardown_s = 30.0;
        assert_eq!(e.next_deadline(), None, "no launch, no deadline");
        let t0 = Instant::now();
        add_run(&mut e, "a", dir.path(), Some(t0));
        add_run(&mut e, "b", dir.path(), Some(t0 - Duration::from_secs(10)));
        add_run(&mut e, "c", dir.path(), None);
        assert_eq!(e.next_deadline(), Some(t0 + Duration::from_secs(20)));
        e.launches.get_mut("b").unwrap().ending = Some((RunStatus::Failed, None));
        assert_eq!(e.next_deadline(), Some(t0 + Duration::from_secs(30)));
        e.last_deadline = Some(t0 + Duration::from_secs(30));
        assert_eq!(e.next_deadline(), None, "fired and changed nothing");
        e.last_deadline = None;
        e.launches.get_mut("a").unwrap().exit = Some(Exit::Code(0));
        assert_eq!(
            e.next_deadline(),
            None,
            "the launcher exited: no teardown to wait for"
        );
    }
}
