//! What comes in while runs go: supervisor events, worker messages folded into the runs' views,
//! output-log tails and NCCL's logs, and the store rows they produce (batched, then flushed).
//! Kept apart because this is the hot path (a fast sim sends thousands of messages a second):
//! its cost is reviewed on its own, away from the rarer launch and stop paths.

use super::Engine;
use crate::app::Level;
use crate::app::reduce::apply_worker;
use crate::protocol::WorkerMsg;
use crate::run::{RunSpec, RunStatus};
use crate::store::EventRow;
use crate::supervisor::{SupEvent, nccl_log, procs};
use std::time::{Duration, Instant};

impl Engine {
    /// Apply one supervisor event; returns whether the screen should be redrawn (a heartbeat
    /// that changes nothing shown does not need it).
    pub fn apply(&mut self, ev: SupEvent) -> bool {
        let now = Instant::now();
        match ev {
            SupEvent::Worker { run, msg } => return self.on_worker(&run, &msg, None, now),
            SupEvent::Lines { run, lines } => {
                let mut redraw = false;
                for r in lines {
                    redraw |= self.on_worker(&run, &r.msg, Some(r.line), now);
                }
                return redraw;
            }
            SupEvent::BadLines {
                run,
                rank,
                count,
                last_error,
            } => {
                if let Some(v) = self.state.run_mut(&run)
                    && let Some(r) = v.ranks.get_mut(&rank)
                {
                    r.bad_lines += count;
                }
                let text = format!("rank {rank}: dropped {count} bad line(s); last: {last_error}");
                self.pending.push(EventRow::note(&run, &text));
                self.state.push_message(Level::Warn, Some(&run), text);
            }
            SupEvent::Rejected { run, detail } => {
                if run.is_none() {
                    self.state.rejected_strangers += 1;
                }
                if let Some(id) = &run
                    && let Some(v) = self.state.run_mut(id)
                {
                    v.evidence.rejected += 1;
                    // The count is kept in full; the rows only while they are few.
                    if crate::supervisor::socket::worth_a_row(v.evidence.rejected) {
                        self.pending.push(EventRow::note(
                            id,
                            &format!("connection rejected: {detail}"),
                        ));
                    }
                }
                self.state.push_message(
                    Level::Warn,
                    run.as_deref(),
                    format!("connection rejected: {detail}"),
                );
            }
            SupEvent::Disconnected { run, rank } => {
                if let Some(v) = self.state.run_mut(&run)
                    && let Some(r) = v.ranks.get_mut(&rank)
                {
                    r.connected = false;
                }
            }
            SupEvent::Exited { run, exit } => self.on_exit(&run, exit),
            SupEvent::NodeExited { run, node, exit } => self.on_node_exit(&run, node, exit),
            SupEvent::StopDone {
                run,
                escalated_to,
                survivors,
            } => self.on_stop_done(&run, escalated_to, survivors),
            SupEvent::Deadline => self.check_deadlines(now),
            SupEvent::Agent { run, ev } => self.on_agent(&run, ev),
            SupEvent::Evidence { run, lines } => {
                if let Some(v) = self.state.run_mut(&run) {
                    v.evidence.hang_report.extend(lines.iter().cloned());
                }
                self.persist_live(&run);
                for l in lines {
                    self.state.push_message(Level::Warn, Some(&run), l);
                }
            }
        }
        true
    }

    /// One validated worker message (`line`: as received, for the store); returns whether the
    /// screen should be redrawn.
    fn on_worker(
        &mut self,
        run: &str,
        msg: &WorkerMsg,
        line: Option<String>,
        now: Instant,
    ) -> bool {
        // A heartbeat that changes nothing shown needs no redraw and no store row.
        if let WorkerMsg::Heartbeat(hb) = msg {
            let shown = self
                .state
                .run(run)
                .and_then(|v| v.ranks.get(&hb.rank))
                .is_some_and(|r| {
                    r.connected && hb.step <= r.step && (hb.phase.is_none() || hb.phase == r.phase)
                });
            if shown {
                if let Some(v) = self.state.run_mut(run) {
                    apply_worker(v, msg, now);
                }
                return false;
            }
        }
        let row = match line {
            Some(line) => self.keep_line(run, msg, line, now),
            None => EventRow::from_msg(run, msg),
        };
        if let Some(row) = row {
            self.pending.push(row);
        }
        // The runs and the GPU rows are borrowed apart: a straggler's evidence quotes its GPU's
        // row.
        let gpus = crate::app::gpu_evidence::RankGpus {
            local: &self.state.gpus,
            nodes: &self.state.nodes,
        };
        let Some(view) = self.state.runs.iter_mut().find(|v| v.id == run) else {
            return true;
        };
        let was_starting = view.status == RunStatus::Starting;
        let diagnosed = view.evidence.diagnoses.len();
        apply_worker(view, msg, now);
        // Only a step or its buckets message changes a rank's phase history. Assessed
        // a few times a second, not per message: a fast sim sends thousands a second,
        // and a window of tens of steps moves little in 200 ms.
        if matches!(msg, WorkerMsg::Step(_) | WorkerMsg::Buckets(_))
            && view.straggler.assessed.is_none_or(|t| {
                now.duration_since(t) >= crate::app::straggler::assess_every(view.ranks.len())
            })
        {
            view.straggler.assessed = Some(now);
            let since = view.clock.started.map_or(0.0, |t| (now - t).as_secs_f64());
            // The local ranks' run-queue waits at this window: a rank slow from waiting for
            // a core is a caveat of the run, not a straggler.
            crate::supervisor::schedstat::sample(view);
            let before = view.straggler.named.len();
            let noted = view.evidence.caveats.len();
            let named = crate::app::straggler::update(view, &self.opts.stragglers, since, &gpus);
            let records: Vec<_> = view.straggler.named[before..].to_vec();
            for (line, rec) in named.iter().zip(records) {
                view.push_tail(format!("ddptop: {line}"));
                self.pending.push(EventRow::straggler(run, &rec));
                self.pending.push(EventRow::note(run, line));
            }
            let notes: Vec<String> = view.evidence.caveats[noted..]
                .iter()
                .map(|c| c.text.clone())
                .collect();
            for line in &notes {
                view.push_tail(format!("ddptop: {line}"));
                self.pending.push(EventRow::note(run, line));
            }
            for line in named.into_iter().chain(notes) {
                self.state.push_message(Level::Warn, Some(run), line);
            }
        }
        if completes_split(msg) {
            self.judge_while_stepping(run);
        }
        // All but a few lines of a run: nothing below (byes, results, hellos) concerns them.
        if matches!(msg, WorkerMsg::Step(_) | WorkerMsg::Buckets(_)) {
            return true;
        }
        let Some(view) = self.state.run_mut(run) else {
            return true;
        };
        // A rank's own finding (unused parameters): on the main screen at once, and stored.
        let found: Vec<String> = view.evidence.diagnoses[diagnosed..]
            .iter()
            .map(|d| d.line())
            .collect();
        let any = !found.is_empty();
        for line in found {
            self.pending.push(EventRow::note(run, &line));
            self.state
                .push_message(Level::Error, Some(run), format!("{run}: {line}"));
        }
        if any {
            self.persist_live(run);
        }
        let Some(view) = self.state.run_mut(run) else {
            return true;
        };
        let all_bye = view.ranks.values().all(|r| r.said_bye);
        if let Some(l) = self.launches.get_mut(run) {
            if let WorkerMsg::Result(r) = msg {
                l.results.insert(r.rank);
            }
            if all_bye && l.all_bye_at.is_none() {
                l.all_bye_at = Some(now);
            }
        }
        if let WorkerMsg::Hello(h) = msg {
            self.on_hello(run, h, was_starting);
        }
        true
    }

    /// A rank's hello: its pid known as one of the launch's processes (or said not to be), a
    /// remote rank's node watched, and the run marked running in the store.
    fn on_hello(&mut self, run: &str, h: &crate::protocol::Hello, was_starting: bool) {
        if self.server.registry.remote_peer(run, h.rank).is_none()
            && let Some(l) = self.launches.get_mut(run)
        {
            match l.pgid.and_then(|pg| procs::Known::descendant(h.pid, pg)) {
                Some(k) => {
                    l.known_pids.insert(h.pid, k);
                }
                None => {
                    let text = format!(
                        "rank {} claims pid {}, which is not a process of this run; it \
                         will not be signalled at stop",
                        h.rank, h.pid
                    );
                    self.pending.push(EventRow::note(run, &text));
                    self.state.push_message(Level::Warn, Some(run), text);
                }
            }
        }
        if let Some(peer) = self.server.registry.remote_peer(run, h.rank)
            && let Some(r) = self
                .state
                .run_mut(run)
                .and_then(|v| v.ranks.get_mut(&h.rank))
        {
            r.remote = true;
            let node = h.node_name().to_string();
            self.watch_node(run, &node);
            self.pending.push(EventRow::note(
                run,
                &format!(
                    "rank {} on node {} connected over tcp from {peer}",
                    h.rank,
                    h.node_name()
                ),
            ));
        }
        let Some(view) = self.state.run_mut(run) else {
            return;
        };
        let pids: Vec<u32> = view.ranks.values().filter_map(|r| r.pid).collect();
        let versions = view.launch.versions.clone();
        if was_starting {
            self.state.push_message(
                Level::Info,
                Some(run),
                format!("rank {} connected (pid {}, {})", h.rank, h.pid, h.device),
            );
        }
        let _ = self.store.set_running(run, &pids, &versions);
    }

    /// NCCL prints its transport lines at communicator init: read them early, so the screen shows
    /// the transport while the run goes (every 2 s until found; once more at the end).
    pub(super) fn read_transport(&mut self, run: &str, now: Instant) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        if l.transport_read
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(2))
        {
            return;
        }
        l.transport_read = Some(now);
        let dir = l.run_dir.clone();
        if let Some(v) = self.state.run_mut(run)
            && v.spec.backend == crate::protocol::Backend::Nccl
            && (v.transport().is_none() || v.launch.nccl_read.is_empty())
        {
            v.set_transport(nccl_log::transport_of_run(&dir));
            if let Some(read) = nccl_reads(&v.spec, &dir) {
                v.launch.nccl_read = read;
            }
        }
    }

    /// Append new lines of the run's output.log to its log tail.
    pub(super) fn pull_output(&mut self, run: &str) {
        let Some(l) = self.launches.get_mut(run) else {
            return;
        };
        let lines = l.output.new_lines();
        if lines.is_empty() {
            return;
        }
        if let Some(v) = self.state.run_mut(run) {
            for line in lines {
                v.push_tail(line);
            }
        }
    }

    /// Where a line as received is kept: every step and timeline in the run's archive
    /// (`store::StepArchive`); of the timelines, rank 0's also as rows (the Timeline pane's
    /// median window and the cost model read them back) and each other rank's latest every few
    /// seconds (`latest`); every other kind as a row.
    fn keep_line(
        &mut self,
        run: &str,
        msg: &WorkerMsg,
        line: String,
        now: Instant,
    ) -> Option<EventRow> {
        match msg {
            WorkerMsg::Step(_) => {
                self.store.archive().push(run, &line);
                None
            }
            WorkerMsg::Buckets(b) => {
                self.store.archive().push(run, &line);
                if b.rank == 0 {
                    EventRow::from_line(run, msg, line)
                } else {
                    self.latest.hold(run, b.rank, line, now);
                    None
                }
            }
            _ => EventRow::from_line(run, msg, line),
        }
    }

    pub(super) fn flush_events(&mut self) {
        self.last_flush = Instant::now();
        self.latest.take_due(self.last_flush, &mut self.pending);
        match self.store.archive().flush() {
            Ok(full) => {
                self.archive_error = None;
                for f in full {
                    let text = format!(
                        "the step archive reached {} MiB ([store] archive_max_mb): later step \
                         and timeline lines of this run are not archived",
                        f.limit >> 20
                    );
                    self.pending.push(EventRow::note(&f.run, &text));
                    self.state.push_message(Level::Warn, Some(&f.run), text);
                }
            }
            Err(e) => {
                let text = format!("step archive: {e}");
                if self.archive_error.as_ref() != Some(&text) {
                    self.state.push_message(Level::Error, None, text.clone());
                    self.archive_error = Some(text);
                }
            }
        }
        if self.pending.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.pending);
        if let Err(e) = self.store.add_events(&rows) {
            self.state
                .push_message(Level::Error, None, format!("store: {e}"));
        }
    }
}

/// Which of the run's NCCL settings NCCL logged reading (see `nccl_log::toggles_read`).
pub(super) fn nccl_reads(
    spec: &RunSpec,
    dir: &std::path::Path,
) -> Option<std::collections::BTreeMap<String, bool>> {
    if spec.backend != crate::protocol::Backend::Nccl {
        return None;
    }
    let set: Vec<(&str, &str)> = spec
        .nccl
        .launch_env()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
    nccl_log::toggles_read(dir, &set)
}

/// Whether `msg` completes its step's split (busy time against comm wait), after which DDP
/// slower than one rank is judged (issue 44): a buckets message, or a step message that carries
/// its comm wait (3 timed steps in 4 on GPUs, docs/stragglers.md).
fn completes_split(msg: &WorkerMsg) -> bool {
    match msg {
        WorkerMsg::Buckets(_) => true,
        WorkerMsg::Step(s) => s.exposed_ms.is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tests::engine;
    use crate::protocol::{Backend, CommBackend, Heartbeat, Hello, Step, Timing, WorkerKind};
    use crate::run::Experiment;
    use crate::store::Store;

    fn worker(run: &str, msg: WorkerMsg) -> SupEvent {
        SupEvent::Worker {
            run: run.into(),
            msg: Box::new(msg),
        }
    }

    /// A sim rank's `hello` in a run of `k`.
    fn hello(rank: u32, k: u32) -> WorkerMsg {
        WorkerMsg::Hello(Hello::new(
            rank,
            k,
            "host".into(),
            format!("sim:{rank}"),
            CommBackend::Sim,
            WorkerKind::Sim,
        ))
    }

    fn step(rank: u32, step: u64) -> Step {
        Step {
            rank,
            step,
            epoch: 0,
            t: step as f64,
            warmup: false,
            sync: true,
            samples: 256,
            fwd_ms: 10.0,
            bwd_ms: 20.0,
            opt_ms: 1.0,
            data_ms: 0.5,
            step_ms: 32.0,
            timing: Timing::Model,
            loss: None,
            fused: None,
            every: None,
            t_bwd: None,
            sync_ms: None,
            exposed_ms: None,
        }
    }

    /// The apply path: hellos start the run, a step moves its rank, a heartbeat that shows
    /// nothing new asks for no redraw, and the run's end is stored.
    #[tokio::test]
    async fn apply_folds_messages_into_the_run_and_the_store_keeps_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = engine(dir.path());
        let spec = RunSpec::new(Experiment::Weak, 2, Backend::Sim);
        let (id, _token) = e.open_external(spec).unwrap();
        assert_eq!(e.state().run(&id).unwrap().status, RunStatus::Starting);
        for rank in 0..2 {
            assert!(e.apply(worker(&id, hello(rank, 2))));
        }
        let run = e.state().run(&id).unwrap();
        assert_eq!(run.status, RunStatus::Running);
        assert_eq!(run.ranks.len(), 2);
        assert!(run.ranks.values().all(|r| r.connected));
        assert!(e.apply(worker(&id, WorkerMsg::Step(step(0, 1)))));
        assert_eq!(e.state().run(&id).unwrap().ranks[&0].step, 1);
        let quiet = Heartbeat {
            rank: 0,
            step: 1,
            t: 1.5,
            phase: None,
            cpu_s: None,
            coll: None,
            rendezvous: None,
        };
        assert!(
            !e.apply(worker(&id, WorkerMsg::Heartbeat(quiet))),
            "a heartbeat that changes nothing on screen asks for no redraw"
        );
        assert!(e.apply(SupEvent::Disconnected {
            run: id.clone(),
            rank: 1
        }));
        assert!(!e.state().run(&id).unwrap().ranks[&1].connected);
        e.close_external(&id, RunStatus::Completed);
        let stored = Store::open(&dir.path().join("runs.db"))
            .unwrap()
            .load_runs(10)
            .unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].id, id);
        assert_eq!(stored[0].status, RunStatus::Completed);
    }

    /// Every step and timeline goes to the run's archive as received; the database keeps
    /// rank 0's every timeline and each other rank's latest (held, written at the run's end
    /// here), and what `load_runs` reads back is what it read when they were all rows.
    #[tokio::test]
    async fn per_step_lines_go_to_the_archive_and_the_database_keeps_what_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = engine(dir.path());
        let (id, _token) = e
            .open_external(RunSpec::new(Experiment::Weak, 3, Backend::Sim))
            .unwrap();
        for rank in 0..3 {
            e.apply(worker(&id, hello(rank, 3)));
        }
        let received = |line: String| crate::supervisor::Received {
            msg: crate::protocol::parse_worker(&line).unwrap(),
            line,
        };
        for n in 1..=25u64 {
            let mut lines = Vec::new();
            for rank in 0..3 {
                lines.push(received(format!(
                    r#"{{"v":1,"type":"step","rank":{rank},"step":{n},"epoch":1,"t":1.0,"warmup":false,"sync":true,"samples":8,"fwd_ms":1.0,"bwd_ms":2.0,"opt_ms":0.5,"data_ms":0.1,"step_ms":3.6,"timing":"host","extra":"kept"}}"#
                )));
                lines.push(received(format!(
                    r#"{{"v":1,"type":"buckets","rank":{rank},"step":{n},"t":1.0,"rebuilt":true,"bwd_compute_ms":2.0,"exposed_ms":0.1,"buckets":[{{"index":0,"bytes":64,"ready_ms":1.0,"start_ms":1.0,"done_ms":1.5}}]}}"#
                )));
            }
            e.apply(SupEvent::Lines {
                run: id.clone(),
                lines,
            });
            if n == 10 {
                e.flush_events();
            }
        }
        e.close_external(&id, RunStatus::Completed);
        let db = dir.path().join("runs.db");
        let store = Store::open(&db).unwrap();
        assert_eq!(store.stored_messages(&id, "step").unwrap(), 75);
        assert_eq!(store.stored_messages(&id, "buckets").unwrap(), 75);
        let archive = dir.path().join("runs").join(&id).join("steps.jsonl");
        let first = std::fs::read_to_string(&archive).unwrap();
        let first = first.lines().next().unwrap();
        assert!(
            first.contains(r#""step":1,"#) && first.ends_with(r#""extra":"kept"}"#),
            "as received: {first}"
        );
        let conn = rusqlite::Connection::open(&db).unwrap();
        let rows = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(rows("SELECT COUNT(*) FROM events WHERE type='step'"), 0);
        assert_eq!(
            rows("SELECT COUNT(*) FROM events WHERE type='buckets' AND rank=0"),
            25
        );
        // The mid-run flush came before the period: the others' latest, once, at the end.
        assert_eq!(
            rows("SELECT COUNT(*) FROM events WHERE type='buckets' AND rank>0"),
            2
        );
        let l = &store.load_runs(5).unwrap()[0];
        assert_eq!(l.ranks[&1].buckets.as_ref().unwrap().step, 25);
        assert_eq!(l.ranks[&2].buckets.as_ref().unwrap().step, 25);
        let history: Vec<u64> = l.ranks[&0].recent_buckets.iter().map(|b| b.step).collect();
        assert_eq!(
            history,
            (1..=25).collect::<Vec<u64>>(),
            "rank 0's every timeline"
        );
    }

    /// A run whose archive reaches `[store] archive_max_mb` is told so once, on screen and in
    /// the run's stored log, and keeps running.
    #[tokio::test]
    async fn a_full_step_archive_is_said_once_and_the_run_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = engine(dir.path());
        e.store.archive().set_limit(Some(1 << 20));
        let (id, _token) = e
            .open_external(RunSpec::new(Experiment::Weak, 1, Backend::Sim))
            .unwrap();
        e.apply(worker(&id, hello(0, 1)));
        for n in 1..=4000u64 {
            let line = format!(
                r#"{{"v":1,"type":"step","rank":0,"step":{n},"epoch":1,"t":1.0,"warmup":false,"sync":true,"samples":8,"fwd_ms":1.0,"bwd_ms":2.0,"opt_ms":0.5,"data_ms":0.1,"step_ms":3.6,"timing":"host","pad":"{}"}}"#,
                "x".repeat(200)
            );
            let msg = crate::protocol::parse_worker(&line).unwrap();
            e.apply(SupEvent::Lines {
                run: id.clone(),
                lines: vec![crate::supervisor::Received { msg, line }],
            });
            if n % 1000 == 0 {
                e.flush_events();
            }
        }
        let said = |e: &Engine| {
            e.state()
                .messages
                .iter()
                .filter(|m| m.text.contains("step archive reached 1 MiB"))
                .count()
        };
        assert_eq!(said(&e), 1);
        assert_eq!(
            e.state().run(&id).unwrap().ranks[&0].step,
            4000,
            "the run goes on"
        );
        e.close_external(&id, RunStatus::Completed);
        let archive = dir.path().join("runs").join(&id).join("steps.jsonl");
        let size = std::fs::metadata(&archive).unwrap().len();
        assert!(size <= 1 << 20 && size > (1 << 20) - 400, "{size}");
        let stored = Store::open(&dir.path().join("runs.db")).unwrap();
        assert!(stored.stored_messages(&id, "step").unwrap() < 4000);
    }

    /// Only the variables the run sets are judged: a removed one (`None`) is nothing NCCL could
    /// have read, and ddptop's own NCCL_DEBUG* are never toggles.
    #[test]
    fn nccl_reads_judges_the_variables_the_run_sets() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = RunSpec::new(Experiment::Weak, 2, Backend::Nccl);
        spec.nccl.set("NCCL_P2P_DISABLE", Some("1".into()));
        spec.nccl.set("NCCL_ALGO", None);
        spec.nccl.set("NCCL_DEBUG", Some("INFO".into()));
        assert_eq!(
            nccl_reads(&spec, dir.path()),
            None,
            "no communicator is up yet: nothing can be said"
        );
        std::fs::write(
            dir.path().join("nccl_rank0.log"),
            "h:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1\n\
             h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n",
        )
        .unwrap();
        let read = nccl_reads(&spec, dir.path()).expect("the communicator is up");
        assert_eq!(read.get("NCCL_P2P_DISABLE"), Some(&true));
        // ddptop's default, set but not logged as read.
        assert_eq!(read.get("NCCL_NVLS_ENABLE"), Some(&false));
        assert!(!read.contains_key("NCCL_ALGO"), "{read:?}");
        assert!(!read.contains_key("NCCL_DEBUG"), "{read:?}");
        // The same logs beside a run that is not NCCL say nothing about it.
        let sim = RunSpec::new(Experiment::Weak, 2, Backend::Sim);
        assert_eq!(nccl_reads(&sim, dir.path()), None);
    }
}
