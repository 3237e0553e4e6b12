//! Ending runs: asking ranks to stop, signalling the process trees here and on other nodes,
//! deciding a run's final status from its exits, and finalizing it in the store. Kept apart
//! because every way a run ends (the stop key, the launcher's exit, a node's failure, a hung
//! teardown, a hang) funnels into `spawn_stop` and `on_stop_done`, and that funnel is easier to
//! audit when nothing else sits between its steps.

use super::ingest::nccl_reads;
use super::{Engine, agents};
use crate::app::reduce;
use crate::app::{Level, summary};
use crate::protocol::{Command, ControlMsg};
use crate::run::RunStatus;
use crate::store::EventRow;
use crate::supervisor::nodes::{self, RemoteStop};
use crate::supervisor::output;
use crate::supervisor::procs::Escalation;
use crate::supervisor::{Exit, SupEvent, nccl_log, procs};
use std::time::{Duration, Instant};

impl Engine {
    /// Ask a run to stop; it ends as `stopped` once no process of it is left.
    pub fn stop(&mut self, run_id: &str, why: &str) {
        if self.state.run(run_id).is_none_or(|r| r.status.is_final()) {
            return;
        }
        self.begin_stop(run_id, RunStatus::Stopped, Some(why.to_string()));
    }

    pub fn stop_all(&mut self, why: &str) {
        let ids: Vec<String> = self.state.active_runs().map(|r| r.id.clone()).collect();
        for id in ids {
            self.stop(&id, why);
        }
    }

    fn begin_stop(&mut self, run: &str, status: RunStatus, why: Option<String>) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if l.ending.is_none() {
            l.ending = Some((status, why));
        }
        // Ask nicely first: a worker finishing its step sends result and bye.
        let _ = self
            .server
            .registry
            .command(run, ControlMsg::Command { cmd: Command::Stop });
        self.spawn_stop(run, Duration::ZERO);
    }

    /// Stop the run's process tree after `delay`, once; `StopDone` reports the outcome.
    pub(super) fn spawn_stop(&mut self, run: &str, delay: Duration) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if l.stopping {
            return;
        }
        l.stopping = true;
        let pgid = if l.exit.is_some() { None } else { l.pgid };
        let view = self.state.run(run);
        // Only this machine's pids are signalled here, and only those found in the run's own
        // tree at `hello` and still the same process; another node's go through its channel.
        let pids: Vec<u32> = view
            .map(|v| {
                v.ranks
                    .values()
                    .filter(|r| !r.remote)
                    .filter_map(|r| r.pid)
                    .filter(|p| l.known_pids.get(p).is_some_and(|k| k.current()))
                    .collect()
            })
            .unwrap_or_default();
        let remote: Vec<RemoteStop> = l
            .remote
            .iter()
            .enumerate()
            .filter(|(_, n)| n.exit.is_none())
            .map(|(i, n)| {
                let host = l.plan.as_ref().map(|p| p.hosts[i + 1].as_str());
                let agent = n
                    .first_line
                    .get()
                    .and_then(|line| nodes::parse_node_line(line))
                    .filter(|(node, _, _)| *node == i + 1);
                // The ranks' pids are their own claims: the node's stop script signals only
                // those it finds under the agent.
                let pids = view
                    .into_iter()
                    .flat_map(|v| {
                        v.ranks
                            .values()
                            .filter(|r| r.remote && r.node.as_deref() == host)
                            .filter_map(|r| r.pid)
                    })
                    .collect();
                RemoteStop {
                    node: i + 1,
                    channel_pgid: n.pgid,
                    agent: agent.as_ref().map(|a| a.1),
                    pids,
                    slurm_step: agent.and_then(|a| a.2),
                }
            })
            .collect();
        let plan = l.plan.clone();
        let graceful = matches!(l.ending, Some((RunStatus::Completed, _)));
        let graces = self.opts.stop_grace;
        let tx = self.tx.clone();
        let rid = run.to_string();
        tokio::spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let remote_stops = async {
                let Some(plan) = plan.as_ref() else {
                    return Vec::new();
                };
                futures::future::join_all(
                    remote
                        .iter()
                        .map(|s| nodes::stop_remote(plan, s, graces, graceful)),
                )
                .await
            };
            let ((escalated_to, survivors), notes) =
                tokio::join!(procs::stop_tree(pgid, &pids, graces), remote_stops);
            let notes: Vec<String> = notes.into_iter().flatten().collect();
            if !notes.is_empty() {
                let _ = tx
                    .send(SupEvent::Evidence {
                        run: rid.clone(),
                        lines: notes,
                    })
                    .await;
            }
            let _ = tx
                .send(SupEvent::StopDone {
                    run: rid,
                    escalated_to,
                    survivors,
                })
                .await;
        });
    }

    pub(super) fn on_exit(&mut self, run: &str, exit: Exit) {
        if exit != Exit::Code(0) {
            self.diagnose_run(run);
        }
        // A named failure leads the reason: it says what to fix, the exit codes say how it ended.
        let named = self
            .state
            .run(run)
            .and_then(|v| v.evidence.diagnoses.first().map(|d| d.line()));
        let detail = self
            .launches
            .get(run)
            .and_then(|l| output::exit_details(&l.run_dir));
        // What the failing rank itself said, when it managed to say something.
        let rank_error = self.state.run(run).and_then(|v| {
            let errors: Vec<String> = v
                .ranks
                .values()
                .filter_map(|r| r.error.as_ref().map(|e| format!("rank {}: {e}", r.rank)))
                .collect();
            (!errors.is_empty()).then(|| errors.join("; "))
        });
        let finished = self.finished_before_exit(run);
        // The ranks' own last lines, read once: the reason quotes the first to fail, and the run
        // keeps them all (`on_stop_done` finalizes them).
        let tails = match self.launches.get(run) {
            Some(l) if exit != Exit::Code(0) => output::rank_tails(&l.run_dir),
            _ => Vec::new(),
        };
        let first = output::first_failed(&tails).cloned();
        if let Some(v) = self.state.run_mut(run) {
            v.evidence.rank_tails = tails;
        }
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        l.exit = Some(exit);
        if l.ending.is_none() {
            let ending = match exit {
                Exit::Code(0) => {
                    let view = self.state.run(run);
                    let missing: Vec<u32> = view
                        .map(|v| {
                            v.ranks
                                .values()
                                .filter(|r| !r.said_bye)
                                .map(|r| r.rank)
                                .collect()
                        })
                        .unwrap_or_default();
                    if missing.is_empty() {
                        (RunStatus::Completed, None)
                    } else {
                        (
                            RunStatus::Failed,
                            Some(format!(
                                "launcher exited 0 but rank(s) {missing:?} sent no result"
                            )),
                        )
                    }
                }
                failed if finished => {
                    // Every rank finished its loop, sent its result and said `bye: done`; only
                    // the exit failed (a rank aborted in its teardown, issue 51). The figures
                    // are whole: the run completed, and the teardown failure is its caveat,
                    // with the rank's own last words.
                    let own = first.as_ref().map(|t| {
                        let why = t.why_with_place().unwrap_or_else(|| "no output".into());
                        format!("rank {} ({}): {why}", t.rank, t.exit_words())
                    });
                    let text = format!(
                        "every rank finished and reported, then the job failed at exit ({failed}{}): the figures are complete; the teardown failure is in the ranks' last lines",
                        own.map(|o| format!("; {o}")).unwrap_or_default()
                    );
                    (RunStatus::Completed, Some(text))
                }
                failed => {
                    let mut why = match named {
                        Some(line) => format!("{line}; {failed}"),
                        None => failed.to_string(),
                    };
                    // The rank that died first, in its own words: a signal's cause is only in
                    // its output, never in torchrun's summary.
                    let own = first.as_ref().and_then(|t| {
                        let why = t.why_with_place()?;
                        Some(format!(
                            "rank {} ({}) last wrote: {why}",
                            t.rank,
                            t.exit_words()
                        ))
                    });
                    for part in [detail, rank_error, own].into_iter().flatten() {
                        why.push_str("; ");
                        why.push_str(&part);
                    }
                    (RunStatus::Failed, Some(why))
                }
            };
            l.ending = Some(ending);
        }
        self.spawn_stop(run, Duration::ZERO);
    }

    /// Whether every rank of `run` finished its own loop before the launcher exited: each said
    /// `bye` with reason `done`, none reported an error, and every result arrived.
    fn finished_before_exit(&self, run: &str) -> bool {
        let (Some(v), Some(l)) = (self.state.run(run), self.launches.get(run)) else {
            return false;
        };
        !v.ranks.is_empty()
            && v.ranks
                .values()
                .all(|r| r.bye == Some(crate::protocol::ByeReason::Done) && r.error.is_none())
            && v.ranks.keys().all(|r| l.results.contains(r))
    }

    /// Another node's channel process ended. A failure fails the run and stops every node (its
    /// peers would otherwise wait in the rendezvous or a collective); a clean exit waits for the
    /// rest.
    pub(super) fn on_node_exit(&mut self, run: &str, node: usize, exit: Exit) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if let Some(n) = l.remote.get_mut(node - 1) {
            n.exit = Some(exit);
        }
        if exit == Exit::Code(0) || l.ending.is_some() {
            return;
        }
        let host = l
            .plan
            .as_ref()
            .and_then(|p| p.hosts.get(node).cloned())
            .unwrap_or_default();
        let why = format!("node {node} ({host}): {exit}");
        l.ending = Some((RunStatus::Failed, Some(why.clone())));
        self.state.push_message(
            Level::Warn,
            Some(run),
            format!("{run}: {why}; stopping every node"),
        );
        self.pending.push(EventRow::note(run, &why));
        self.spawn_stop(run, Duration::ZERO);
    }

    pub(super) fn on_stop_done(
        &mut self,
        run: &str,
        escalated_to: Escalation,
        survivors: Vec<u32>,
    ) {
        let Some(l) = self.launches.get(run) else {
            return;
        };
        // The launcher (and other nodes' channels) may still be ours to reap; wait for their
        // exits before finalizing.
        let channel_left = l
            .remote
            .iter()
            .any(|n| n.exit.is_none() && n.pgid.is_some_and(procs::alive));
        if (l.exit.is_none() && l.pgid.is_some_and(procs::alive)) || channel_left {
            if let Some(l) = self.launches.get_mut(run) {
                l.stopping = false;
            }
            self.spawn_stop(run, Duration::ZERO);
            return;
        }
        let (status, mut reason) = l
            .ending
            .clone()
            .unwrap_or((RunStatus::Failed, Some("ended".into())));
        if escalated_to != Escalation::None && status != RunStatus::Completed {
            let r = reason.get_or_insert_with(String::new);
            r.push_str(&format!(" (process tree stopped with {escalated_to})"));
        }
        if !survivors.is_empty() {
            let r = reason.get_or_insert_with(String::new);
            r.push_str(&format!("; WARNING: pids {survivors:?} survived SIGKILL"));
        }
        let run_dir = l.run_dir.clone();
        let exited_badly = l.exit.is_some_and(|e| e != Exit::Code(0));
        self.pull_output(run);
        self.keep_node_gpus(run);
        self.latest.take_run(run, &mut self.pending);
        self.flush_events();
        let transport = nccl_log::transport_of_run(&run_dir);
        let unix = crate::util::unix_now();
        // The k=1 run a "slower than one GPU" was judged against, to check it on the whole run.
        let one = self.state.run(run).and_then(|v| {
            v.evidence
                .diagnoses
                .iter()
                .any(|d| d.kind == crate::run::DiagnosisKind::SlowerThanOneGpu)
                .then(|| crate::app::diagnose::measured_one(v, &self.state.runs))
                .flatten()
        });
        let Some(view) = self.state.run_mut(run) else {
            return;
        };
        let known = view.transport().map(str::to_string);
        view.set_transport(transport.or(known));
        if let Some(read) = nccl_reads(&view.spec, &run_dir) {
            view.launch.nccl_read = read;
        }
        // `on_exit` read them when the launcher exited; a run finalized without that exit seen
        // reads them here.
        if (status != RunStatus::Completed || exited_badly) && view.evidence.rank_tails.is_empty() {
            view.evidence.rank_tails = output::rank_tails(&run_dir);
        }
        if status == RunStatus::Completed
            && let Some(r) = reason.take()
        {
            // A completed run has no failure reason: what went wrong at its end (a teardown
            // that hung or aborted after every result arrived) is its caveat, whether the
            // launcher exited by itself or was stopped.
            view.add_caveat(crate::run::Caveat::note(r));
        }
        // The phase history is not stored: its per-phase table is, as of the end (issue 46).
        view.straggler.phase_scores =
            crate::app::straggler::phase_scores(&view.ranks, &self.opts.stragglers);
        if status == RunStatus::Completed {
            crate::app::diagnose::recheck_at_end(view, one.as_ref());
        }
        reduce::finish(view, status, reason, unix);
        let view_snapshot = view.clone();
        let scaling = summary::scaling(&view_snapshot, &self.state.runs);
        // The store first: a result is durable before anything reports it as final.
        if let Err(e) = self.store.finalize(&view_snapshot, scaling.as_ref()) {
            self.state.push_message(
                Level::Error,
                Some(run),
                format!("could not store the result: {e}"),
            );
        }
        self.server.registry.close_run(run);
        if let Some(l) = self.launches.remove(run) {
            // Closing the run closed the agents' connections: they exit by themselves.
            agents::reap_agents(l.agents, Duration::from_secs(5));
        }
        // The finished run's nodes leave the GPU pane.
        crate::app::nodes::check_nodes(&mut self.state, Instant::now(), Duration::MAX);
        self.close_unused_tcp();
        let level = if status == RunStatus::Completed {
            Level::Info
        } else {
            Level::Warn
        };
        let mut text = format!("{run} {}", status.as_str());
        if let Some(r) = &view_snapshot.reason {
            text.push_str(&format!(": {r}"));
        }
        if status == RunStatus::Completed
            && let Some(a) = &view_snapshot.figures.aggregate
        {
            text.push_str(&format!(" — {:.0} samples/s", a.samples_per_s));
        }
        self.state.push_message(level, Some(run), text);
    }

    /// The TCP listener is open to the network before any token is checked: only while a
    /// multi-node run needs it.
    fn close_unused_tcp(&mut self) {
        if self.tcp.is_some() && !self.launches.values().any(|l| l.plan.is_some()) {
            self.tcp = None;
            self.tls_fingerprint = None;
            let _ = std::fs::remove_file(
                self.server
                    .dir
                    .join(crate::supervisor::socket::TCP_ADDR_FILE),
            );
        }
    }

    /// Every rank said `bye` but the launcher is still there past the teardown deadline (NCCL's
    /// `destroy_process_group` is a known hang point): stop the tree; the results are final, so
    /// the run completes with a warning, or fails if a rank's result is missing.
    pub(super) fn check_teardown(&mut self, run: &str, now: Instant) {
        let limit = self.opts.watchdog.teardown_s;
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        let Some(since) = l.all_bye_at else {
            return;
        };
        if l.ending.is_some()
            || l.exit.is_some()
            || now < since + Duration::from_secs_f64(limit.max(0.0))
        {
            return;
        }
        let missing: Vec<u32> = self
            .state
            .run(run)
            .map(|v| {
                v.ranks
                    .keys()
                    .copied()
                    .filter(|r| !l.results.contains(r))
                    .collect()
            })
            .unwrap_or_default();
        let why = format!(
            "teardown hung: the launcher was still running {limit:.0} s after every rank's bye"
        );
        l.ending = Some(if missing.is_empty() {
            (
                RunStatus::Completed,
                Some(format!("{why}; results kept (process tree stopped)")),
            )
        } else {
            (
                RunStatus::Failed,
                Some(format!("{why}; rank(s) {missing:?} sent no result")),
            )
        });
        self.state.push_message(
            Level::Warn,
            Some(run),
            format!("{run}: {why}; stopping its process tree"),
        );
        self.pending.push(EventRow::note(run, &why));
        self.spawn_stop(run, Duration::ZERO);
    }
}
