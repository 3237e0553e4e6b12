//! Applying worker messages to a run. Pure apart from the `now` it is given.

use super::summary;
use crate::protocol::{Instrument, WorkerMsg};
use crate::run::{Aggregate, Caveat, RunStatus, RunView};
use std::time::Instant;

const RECENT_STEPS: usize = 64;
const RECENT_GAPS: usize = 32;

/// Fold one validated message into its run. Messages for a finished run change nothing: a
/// failed, hung or stopped run keeps what it had when it ended.
pub fn apply_worker(run: &mut RunView, msg: &WorkerMsg, now: Instant) {
    if run.status.is_final() {
        return;
    }
    let rank_id = msg.rank();
    let Some(rank) = run.ranks.get_mut(&rank_id) else {
        return;
    };
    // The profiler plugin's thread is not the worker: the watchdog judges the worker alone.
    if !matches!(msg, WorkerMsg::Nccl(_) | WorkerMsg::NcclHello(_)) {
        rank.last_seen = Some(now);
    }
    if let Some(step) = msg.step()
        && step > rank.step
    {
        rank.step = step;
        if let Some(prev) = rank.last_progress {
            run.clock
                .progress_gaps
                .push_back(now.duration_since(prev).as_secs_f64());
            while run.clock.progress_gaps.len() > RECENT_GAPS {
                run.clock.progress_gaps.pop_front();
            }
        }
        rank.last_progress = Some(now);
        run.clock.last_progress = Some(now);
    }
    // The first rank's pace (worker clock), for the ETA.
    let pace = match msg {
        WorkerMsg::Heartbeat(m) => Some((m.t, m.step)),
        WorkerMsg::Step(m) => Some((m.t, m.step)),
        WorkerMsg::Probe(m) => Some((m.t, m.step)),
        WorkerMsg::Bench(m) => Some((m.t, m.step)),
        _ => None,
    };
    if let Some((t, step)) = pace.filter(|_| rank_id == 0)
        && run
            .clock
            .step_clock
            .back()
            .is_none_or(|&(t0, s0)| t > t0 && step >= s0)
    {
        run.clock.step_clock.push_back((t, step));
        while run.clock.step_clock.len() > crate::run::view::STEP_CLOCK {
            run.clock.step_clock.pop_front();
        }
    }
    match msg {
        WorkerMsg::Hello(h) => on_hello(run, rank_id, h, now),
        WorkerMsg::Heartbeat(hb) => on_heartbeat(run, rank_id, hb, now),
        WorkerMsg::Step(s) => on_step(run, rank_id, s, now),
        WorkerMsg::Buckets(b) => on_buckets(run, rank_id, b),
        WorkerMsg::Epoch(e) => {
            rank.epochs.push((e.epoch, e.samples_per_s, e.warmup));
            run.figures.aggregate = Aggregate::of(run);
        }
        WorkerMsg::Probe(p) => {
            // A live probe inside a training run's timed epoch adds its blocks to the epoch's
            // time: the run's samples/s is no longer its own (as a k=1 run, no baseline).
            let timed = rank.last_step.as_ref().is_some_and(|s| !s.warmup);
            if p.live == Some(true) && timed && run.spec.experiment().has_throughput() {
                run.add_caveat(Caveat::perturbed(
                    "the live probe ran during its timed epoch",
                ));
            }
            run.figures.probe.push(p.clone());
        }
        WorkerMsg::Bench(b) => {
            if b.rank == 0 {
                run.figures.bench.retain(|x| x.bytes != b.bytes);
                run.figures.bench.push(b.clone());
                run.figures.bench.sort_by_key(|x| x.bytes);
            }
        }
        WorkerMsg::Memory(m) => {
            if let Some(d) = m.device {
                run.figures.device_memory.insert(d, m.clone());
            }
            rank.record_memory(m);
        }
        WorkerMsg::Comm(c) => rank.record_comm(c),
        WorkerMsg::Hlo(h) => run.figures.hlo = Some(h.clone()),
        WorkerMsg::Check(c) => run.figures.checks.push(c.clone()),
        WorkerMsg::NcclHello(h) => crate::app::collectives::apply_hello(run, h, now),
        WorkerMsg::Nccl(b) => crate::app::coll_ingest::apply_batch(run, b, now),
        WorkerMsg::Plan(p) => on_plan(run, rank_id, p),
        WorkerMsg::Log(l) => on_log(run, rank_id, l),
        WorkerMsg::Result(r) => on_result(run, rank_id, r),
        WorkerMsg::Bye(b) => {
            if b.reason == crate::protocol::ByeReason::Error && rank.error.is_none() {
                rank.error = Some("ended with an error".into());
            }
            rank.said_bye = true;
            rank.bye = Some(b.reason);
            rank.phase = Some(crate::protocol::Phase::Done);
        }
    }
}

/// A rank's hello: its process, device and versions; the run is running.
fn on_hello(run: &mut RunView, rank_id: u32, h: &crate::protocol::Hello, now: Instant) {
    let Some(rank) = run.ranks.get_mut(&rank_id) else {
        return;
    };
    rank.pid = Some(h.pid);
    rank.device = Some(h.device.clone());
    rank.node = Some(h.node_name().to_string());
    rank.connected = true;
    rank.hello_at.get_or_insert(now);
    if run.status == RunStatus::Starting {
        run.status = RunStatus::Running;
    }
    for (k, v) in [("torch", &h.torch), ("nccl", &h.nccl), ("cuda", &h.cuda)] {
        if let Some(v) = v {
            run.launch.versions.insert(k.into(), v.clone());
        }
    }
    run.launch.versions.insert("host".into(), h.host.clone());
    crate::app::collectives::note_nccl_interfaces(run, h);
    if let Some(i) = h.instrument {
        lower_instrument(run, i);
    }
}

/// A heartbeat: CPU time, the collective in flight, rendezvous and phase.
fn on_heartbeat(run: &mut RunView, rank_id: u32, hb: &crate::protocol::Heartbeat, now: Instant) {
    let Some(rank) = run.ranks.get_mut(&rank_id) else {
        return;
    };
    if let Some(c) = hb.cpu_s {
        rank.cpu.push_back((now, c));
        while rank.cpu.len() > crate::run::view::CPU_SAMPLES {
            rank.cpu.pop_front();
        }
    }
    if let Some(c) = &hb.coll {
        rank.coll = Some((now, c.clone()));
    }
    if let Some(r) = &hb.rendezvous {
        match r.state {
            crate::protocol::RendezvousState::Entered => {
                rank.init_entered = Some((now, r.clone()));
            }
            crate::protocol::RendezvousState::Joined => {
                rank.init_joined.get_or_insert(now);
            }
        }
    }
    if hb.phase.is_some() && hb.phase != rank.phase {
        // Entering a phase is progress: a rank that hangs in its very first collective
        // (DDP's parameter broadcast) is then judged by the step threshold from here,
        // not by the long start-up allowance.
        rank.phase = hb.phase;
        rank.last_progress = Some(now);
        run.clock.last_progress = Some(now);
    }
}

/// A step: the rank's recent step, data and backward times and samples.
fn on_step(run: &mut RunView, rank_id: u32, s: &crate::protocol::Step, now: Instant) {
    let Some(rank) = run.ranks.get_mut(&rank_id) else {
        return;
    };
    rank.recent_step_ms.push_back(s.step_ms);
    rank.recent_data_ms.push_back(s.data_ms);
    while rank.recent_step_ms.len() > RECENT_STEPS {
        rank.recent_step_ms.pop_front();
        rank.recent_data_ms.pop_front();
    }
    if !s.warmup {
        rank.recent_samples.push_back((now, s.samples));
        while rank.recent_samples.len() > RECENT_STEPS {
            rank.recent_samples.pop_front();
        }
    }
    if let Some(t) = s.t_bwd {
        rank.recent_bwd.push_back((s.step, t));
        while rank.recent_bwd.len() > crate::run::view::BWD_MARKS {
            rank.recent_bwd.pop_front();
        }
    }
    rank.last_step = Some(s.clone());
    crate::app::straggler::record_step(rank, s);
    if run.spec.kind().runs_user_script() {
        // The script's batch as its steps showed it (ddptop sets none of its settings).
        if let Some(batch) = one_step_samples(s) {
            *run.seen.observed.step_samples.entry(batch).or_default() += 1;
        }
        run.seen.observed.steps = run.seen.observed.steps.max(s.step);
    }
}

/// A step's bucket timeline: the latest, and a bounded history.
fn on_buckets(run: &mut RunView, rank_id: u32, b: &crate::protocol::Buckets) {
    let Some(rank) = run.ranks.get_mut(&rank_id) else {
        return;
    };
    crate::app::straggler::record_buckets(rank, b);
    match &mut rank.buckets {
        Some(latest) => assign_buckets(latest, b),
        None => rank.buckets = Some(b.clone()),
    }
    let cap = crate::run::view::bucket_history_cap(rank.rank, run.spec.k);
    // A full history recycles its oldest timeline's buffer for the newest.
    if rank.recent_buckets.len() >= cap
        && let Some(mut oldest) = rank.recent_buckets.pop_front()
    {
        assign_buckets(&mut oldest, b);
        rank.recent_buckets.push_back(oldest);
    } else {
        rank.recent_buckets.push_back(b.clone());
    }
    while rank.recent_buckets.len() > cap {
        rank.recent_buckets.pop_front();
    }
}

/// The run's length (the probe's extra steps arrive as a second plan): progress and ETA.
/// Its `phase` is left to the heartbeats: entering a phase is progress for the watchdog,
/// and only the heartbeat thread says when a rank really is in it.
fn on_plan(run: &mut RunView, rank_id: u32, p: &crate::protocol::Plan) {
    if rank_id == 0 {
        if run.clock.total_steps.is_some() && run.clock.total_steps != p.total_steps {
            run.clock.replanned_at = Some(p.step);
        }
        run.clock.total_steps = p.total_steps;
    }
    if let Some(c) = p.comm_timing {
        // Switched live per rank (issue 45): the run's is the weakest rank's.
        crate::app::comm_source::apply(run, rank_id, p.step, c, p.comm_why.as_deref());
    }
    if let Some(b) = p.bucket_bytes.as_ref().filter(|b| !b.is_empty()) {
        run.figures.bucket_bytes = b.clone();
    }
}

/// A log line: errors, a lowered instrument level, the tail, and findings.
fn on_log(run: &mut RunView, rank_id: u32, l: &crate::protocol::Log) {
    let Some(rank) = run.ranks.get_mut(&rank_id) else {
        return;
    };
    if l.level == crate::protocol::LogLevel::Error {
        rank.error = Some(l.msg.chars().take(300).collect());
    }
    if l.level == crate::protocol::LogLevel::Warn {
        // The attach bootstrap learns after hello that it measures less (docs/attach.md).
        if l.msg.starts_with("instrument: steps_only") {
            lower_instrument(run, Instrument::StepsOnly);
        } else if l.msg.starts_with("instrumentation off") {
            lower_instrument(run, Instrument::Off);
        }
    }
    run.push_tail(format!("[rank {rank_id}] {:?}: {}", l.level, l.msg));
    if let Some(f) = &l.finding {
        if f.kind == crate::protocol::FindingKind::CompileRegression {
            run.seen.compile_counters = Some((l.step, f.clone()));
        }
        if let Some(d) = crate::app::diagnose::from_finding(rank_id, l.step, f) {
            crate::app::diagnose::add(run, d);
        }
    }
}

/// A rank's result: its samples/s and what the run was seen to use.
fn on_result(run: &mut RunView, rank_id: u32, r: &crate::protocol::ResultMsg) {
    let Some(rank) = run.ranks.get_mut(&rank_id) else {
        return;
    };
    rank.result_sps = r.samples_per_s;
    if run.figures.grad_bytes.is_none() {
        run.figures.grad_bytes = r.grad_bytes;
    }
    if run.figures.bucket_bytes.is_empty() {
        run.figures.bucket_bytes = r.bucket_bytes.clone();
    }
    run.note_torch_seen(r);
    let o = &mut run.seen.observed;
    if let Some(a) = r.family.attach() {
        // A run used a process group / a DDP module when any rank did.
        let any = |a: Option<bool>, b: Option<bool>| match (a, b) {
            (None, x) | (x, None) => x,
            (Some(x), Some(y)) => Some(x || y),
        };
        o.process_group = any(o.process_group, a.process_group);
        o.ddp_module = any(o.ddp_module, a.ddp_module);
        for arg in a.ddp_args.iter().flatten().map(|a| a.as_str()) {
            if !o.ddp_args.iter().any(|x| x == arg) {
                o.ddp_args.push(arg.to_string());
            }
        }
        o.epochs = o.epochs.max(a.epochs_seen);
        if let Some(c) = crate::run::view::Compiled::of(a) {
            o.compile = Some(o.compile.map_or(c, |x| x.max(c)));
        }
    }
    o.steps = o.steps.max(r.step);
    run.figures.aggregate = Aggregate::of(run);
}

/// `src` into `dst`, reusing `dst`'s span buffer: every rank replaces its timelines at every
/// step, and at 1,024 ranks two allocations and two frees per message were measurable.
fn assign_buckets(dst: &mut crate::protocol::Buckets, src: &crate::protocol::Buckets) {
    let mut spans = std::mem::take(&mut dst.buckets);
    spans.clone_from(&src.buckets);
    *dst = crate::protocol::Buckets {
        buckets: spans,
        ..*src
    };
}

/// A run is measured as much as its least-measured rank.
fn lower_instrument(run: &mut RunView, i: Instrument) {
    let level = |i: Instrument| match i {
        Instrument::Full => 2,
        Instrument::StepsOnly => 1,
        Instrument::Off => 0,
    };
    if run.seen.instrument.is_none_or(|cur| level(i) < level(cur)) {
        run.seen.instrument = Some(i);
    }
}

/// Record the live aggregate throughput about once a second while the run is going. `scale`
/// converts wall-clock rates to the run's own time (1 except for a sped-up simulation).
pub fn sample_throughput(run: &mut RunView, now: Instant, scale: f64) {
    let Some(start) = run.clock.started else {
        return;
    };
    let t = now.duration_since(start).as_secs_f64();
    if run
        .figures
        .throughput
        .last()
        .is_some_and(|(last, _)| t - last < 1.0)
    {
        return;
    }
    if let Some(sps) = summary::live_throughput(run, now, 5.0) {
        run.figures.throughput.push((t, sps * scale));
        if run.figures.throughput.len() > 600 {
            run.figures.throughput.remove(0);
        }
    }
}

/// End a run: set its final status and reason. Clearing figures that a non-completed run must
/// not show is the caller's choice of status: `Aggregate` stays for the record, and the views
/// show it only when `status.shows_results()`.
pub fn finish(run: &mut RunView, status: RunStatus, reason: Option<String>, unix: f64) {
    if run.status.is_final() {
        return;
    }
    run.status = status;
    run.reason = reason;
    run.clock.ended_unix = Some(unix);
    // What is stored of NCCL's profiler plugin (the live batches are not).
    if let Some(s) = crate::app::coll_store::summarize(run) {
        run.figures.coll_summary = Some(s);
    }
    // Evidence refused over the caps is said with the run's caveats (stored, shown by `show`).
    if let Some(note) = run.collectives.over_cap().note() {
        run.add_caveat(Caveat::note(format!("NCCL profiler: {note}")));
    }
}

/// Samples of one step of a `step` message: `every` (absent: 1) is the number of steps its
/// `samples` cover (docs/protocol.md; sampled timing), so one step's is their quotient; `None`
/// where that is not one batch size (a partial batch among them). Not the step numbers' gap
/// since the previous message: at an epoch's start the gap spans the previous epoch's untimed
/// steps, whose samples went into its epoch message.
fn one_step_samples(s: &crate::protocol::Step) -> Option<u64> {
    let covered = u64::from(s.every.unwrap_or(1).max(1));
    s.samples
        .is_multiple_of(covered)
        .then(|| s.samples / covered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{Experiment, RunSpec};
    use crate::protocol::*;

    fn spec() -> RunSpec {
        RunSpec {
            samples: 1000,
            ..RunSpec::new(Experiment::Weak, 2, Backend::Sim)
        }
    }

    fn epoch(rank: u32, e: u32, sps: f64, warmup: bool) -> WorkerMsg {
        WorkerMsg::Epoch(Epoch {
            rank,
            step: 10 * (e as u64 + 1),
            epoch: e,
            t: 1.0,
            warmup,
            samples: 100,
            seconds: 1.0,
            samples_per_s: sps,
            data_wait_ms: 0.0,
        })
    }

    #[test]
    fn aggregate_ignores_warmup_and_sums_ranks() {
        let now = Instant::now();
        let mut run = RunView::new("r".into(), spec(), now, 0.0);
        for m in [
            epoch(0, 0, 1.0, true),
            epoch(1, 0, 1.0, true),
            epoch(0, 1, 100.0, false),
            epoch(1, 1, 90.0, false),
        ] {
            apply_worker(&mut run, &m, now);
        }
        let a = run.figures.aggregate.clone().unwrap();
        assert_eq!(a.samples_per_s, 190.0);
        assert_eq!((a.rank_min, a.rank_max), (90.0, 100.0));
    }

    #[test]
    fn finished_runs_ignore_late_messages() {
        let now = Instant::now();
        let mut run = RunView::new("r".into(), spec(), now, 0.0);
        finish(
            &mut run,
            RunStatus::Failed,
            Some("rank 1 exited with 3".into()),
            1.0,
        );
        apply_worker(&mut run, &epoch(0, 1, 100.0, false), now);
        assert!(run.figures.aggregate.is_none());
        assert_eq!(run.status, RunStatus::Failed);
    }

    #[test]
    fn entering_a_phase_counts_as_progress() {
        let t0 = Instant::now();
        let mut run = RunView::new("r".into(), spec(), t0, 0.0);
        let hb = |phase| {
            WorkerMsg::Heartbeat(Heartbeat {
                rank: 0,
                step: 0,
                t: 1.0,
                phase: Some(phase),
                cpu_s: None,
                coll: None,
                rendezvous: None,
            })
        };
        apply_worker(&mut run, &hb(Phase::Init), t0);
        let t1 = t0 + std::time::Duration::from_secs(5);
        apply_worker(&mut run, &hb(Phase::Train), t1);
        assert_eq!(run.ranks[&0].last_progress, Some(t1));
        // The same phase again is not progress.
        apply_worker(
            &mut run,
            &hb(Phase::Train),
            t1 + std::time::Duration::from_secs(5),
        );
        assert_eq!(run.ranks[&0].last_progress, Some(t1));
    }

    #[test]
    fn a_rank_reporting_an_error_is_remembered() {
        let now = Instant::now();
        let mut run = RunView::new("r".into(), spec(), now, 0.0);
        let log = WorkerMsg::Log(Log {
            rank: 1,
            step: 3,
            t: 1.0,
            level: LogLevel::Error,
            msg: "RuntimeError: boom".into(),
            finding: None,
        });
        apply_worker(&mut run, &log, now);
        assert_eq!(run.ranks[&1].error.as_deref(), Some("RuntimeError: boom"));
        let bye = WorkerMsg::Bye(Bye {
            rank: 0,
            step: 3,
            t: 1.0,
            reason: ByeReason::Error,
        });
        apply_worker(&mut run, &bye, now);
        assert!(run.ranks[&0].error.is_some() && run.ranks[&0].said_bye);
    }

    #[test]
    fn a_live_probe_in_the_timed_epoch_perturbs_the_run_and_in_warm_up_does_not() {
        let now = Instant::now();
        let msg = |json: &str| crate::protocol::parse_worker(json).unwrap();
        let step = |warmup: bool| {
            msg(&format!(
                r#"{{"v":1,"type":"step","rank":0,"step":5,"epoch":1,"t":3.0,"warmup":{warmup},"sync":true,"samples":256,"fwd_ms":1,"bwd_ms":1,"opt_ms":1,"data_ms":0.1,"step_ms":3,"timing":"host"}}"#
            ))
        };
        let probe = msg(
            r#"{"v":1,"type":"probe","rank":0,"step":6,"t":4.0,"block":1,"mode":"synced","steps":20,"median_ms":41.2,"min_ms":40.8,"max_ms":43.0,"live":true}"#,
        );
        let mut run = RunView::new("r".into(), spec(), now, 0.0);
        apply_worker(&mut run, &step(true), now);
        apply_worker(&mut run, &probe, now);
        assert_eq!(run.perturbation(), None, "warm-up is not timed");
        apply_worker(&mut run, &step(false), now);
        apply_worker(&mut run, &probe, now);
        apply_worker(&mut run, &probe, now);
        assert_eq!(run.evidence.caveats.len(), 1, "said once");
        assert!(run.perturbation().unwrap().contains("live probe"));
    }

    #[test]
    fn an_attached_runs_steps_give_its_batch_and_its_result_what_it_used() {
        let now = Instant::now();
        let mut run = RunView::new(
            "r".into(),
            RunSpec::new(Experiment::Attach, 2, Backend::Gloo),
            now,
            0.0,
        );
        let msg = |json: String| crate::protocol::parse_worker(&json).unwrap();
        for (i, samples) in [64, 64, 64, 16].into_iter().enumerate() {
            apply_worker(
                &mut run,
                &msg(format!(
                    r#"{{"v":1,"type":"step","rank":0,"step":{},"epoch":0,"t":3.0,"warmup":false,"sync":true,"samples":{samples},"fwd_ms":1,"bwd_ms":1,"opt_ms":1,"data_ms":0.1,"step_ms":3,"timing":"host"}}"#,
                    i + 1
                )),
                now,
            );
        }
        // The most common step size is the batch (the last, partial one is smaller).
        assert_eq!(run.seen.observed.per_rank_batch(), Some(64));
        assert_eq!(run.settings().global_batch, Some(128));
        assert_eq!(run.settings().model, None, "never ddptop's default model");
        assert_eq!(run.seen.observed.steps, 4);
        let result = |rank: u32, pg: bool| {
            msg(format!(
                r#"{{"v":1,"type":"result","rank":{rank},"step":4,"t":5.0,"experiment":"attach","samples_per_s":null,"timed_epochs":0,"params":null,"grad_bytes":null,"bucket_bytes":[],"process_group":{pg},"ddp_module":false}}"#
            ))
        };
        apply_worker(&mut run, &result(0, false), now);
        assert!(run.seen.observed.independent());
        assert_eq!(
            run.seen.observed.epochs, None,
            "set_epoch never called: unknown"
        );
        apply_worker(&mut run, &result(1, true), now);
        assert!(
            !run.seen.observed.independent(),
            "one rank had a process group"
        );
    }

    #[test]
    fn an_attached_runs_batch_from_sampled_steps_is_their_samples_over_every() {
        // Seen on an H200 (attach sets DDPTOP_TIME_EVERY=10 on GPUs): a batch of 32 was shown
        // as 320, the samples of the ten steps one message covers.
        let now = Instant::now();
        let mut run = RunView::new(
            "r".into(),
            RunSpec::new(Experiment::Attach, 1, Backend::Nccl),
            now,
            0.0,
        );
        let step = |step: u64, samples: u64, every: &str| {
            crate::protocol::parse_worker(&format!(
                r#"{{"v":1,"type":"step","rank":0,"step":{step},"epoch":0,"t":3.0,"warmup":false,"sync":true,"samples":{samples},"fwd_ms":1,"bwd_ms":1,"opt_ms":1,"data_ms":0.1,"step_ms":3,"timing":"host"{every}}}"#
            ))
            .unwrap()
        };
        // Warm-up steps 1-3 one message each, then steps 4-10 in one (`every`: the 7 steps its
        // samples cover), then 11-20, 21-30; a new epoch's first message covers its own 4 steps
        // (41-44) though the previous message was step 30's, and one message has a partial batch.
        for (n, samples, every) in [
            (1, 32, ""),
            (2, 32, ""),
            (3, 32, ""),
            (10, 224, r#","every":7"#),
            (20, 320, r#","every":10"#),
            (30, 320, r#","every":10"#),
            (44, 128, r#","every":4"#),
            (54, 308, r#","every":10"#),
        ] {
            apply_worker(&mut run, &step(n, samples, every), now);
        }
        assert_eq!(run.seen.observed.per_rank_batch(), Some(32));
        assert_eq!(run.seen.observed.step_samples.get(&32), Some(&7));
        assert_eq!(
            run.seen.observed.step_samples.len(),
            1,
            "no 320, 224/10, 128/14 or 308/10"
        );
        // A first message with `every` and nothing before it says its batch too.
        let mut fresh = RunView::new(
            "s".into(),
            RunSpec::new(Experiment::Attach, 1, Backend::Nccl),
            now,
            0.0,
        );
        apply_worker(&mut fresh, &step(10, 320, r#","every":10"#), now);
        assert_eq!(fresh.seen.observed.per_rank_batch(), Some(32));
    }

    #[test]
    fn an_attached_run_is_measured_as_much_as_its_least_measured_rank() {
        let now = Instant::now();
        let mut run = RunView::new("r".into(), spec(), now, 0.0);
        let hello = |rank: u32| {
            crate::protocol::parse_worker(&format!(
                r#"{{"v":1,"type":"hello","token":"t","run_id":"r","rank":{rank},"world_size":2,"local_rank":{rank},"pid":7,"host":"h","device":"cpu","backend":"gloo","worker":"attach","torch":"2.11.0","nccl":null,"cuda":null,"t":1.0,"instrument":"full"}}"#
            ))
            .unwrap()
        };
        apply_worker(&mut run, &hello(0), now);
        apply_worker(&mut run, &hello(1), now);
        assert_eq!(run.seen.instrument, Some(Instrument::Full));
        let warn = |rank: u32, msg: &str| {
            WorkerMsg::Log(Log {
                rank,
                step: 0,
                t: 1.0,
                level: LogLevel::Warn,
                msg: msg.into(),
                finding: None,
            })
        };
        apply_worker(
            &mut run,
            &warn(
                1,
                "instrument: steps_only - the script registers its own DDP comm hook (allreduce_hook)",
            ),
            now,
        );
        assert_eq!(run.seen.instrument, Some(Instrument::StepsOnly));
        apply_worker(&mut run, &warn(0, "some other warning"), now);
        assert_eq!(run.seen.instrument, Some(Instrument::StepsOnly));
        apply_worker(
            &mut run,
            &warn(0, "instrumentation off: bad DDPTOP_INJECT"),
            now,
        );
        assert_eq!(run.seen.instrument, Some(Instrument::Off));
        apply_worker(&mut run, &hello(1), now);
        assert_eq!(
            run.seen.instrument,
            Some(Instrument::Off),
            "never raised again"
        );
    }

    #[test]
    fn a_ranks_timelines_are_the_newest_ones_in_order_when_their_buffers_are_recycled() {
        let now = Instant::now();
        let spec = RunSpec::new(Experiment::Weak, 1024, Backend::Gloo);
        let mut run = RunView::new("r".into(), spec, now, 0.0);
        let cap = crate::run::view::bucket_history_cap(5, 1024);
        let span = |i: u64| BucketSpan {
            index: 0,
            bytes: i,
            ready_ms: i as f64,
            start_ms: i as f64,
            done_ms: i as f64 + 1.0,
            kernel_ms: None,
        };
        for step in 1..=(cap as u64 + 7) {
            // Timelines of one, then three, then two spans: a recycled buffer takes any length.
            let spans = (0..[1, 3, 2][step as usize % 3])
                .map(|j| span(step * 10 + j))
                .collect();
            let msg = WorkerMsg::Buckets(Buckets {
                rank: 5,
                step,
                t: step as f64,
                rebuilt: step > 1,
                bwd_compute_ms: 1.0,
                exposed_ms: step as f64,
                buckets: spans,
                start_inferred: (step % 2 == 0).then_some(true),
            });
            apply_worker(&mut run, &msg, now);
            let WorkerMsg::Buckets(sent) = &msg else {
                unreachable!()
            };
            let r = &run.ranks[&5];
            assert_eq!(r.buckets.as_ref(), Some(sent));
            assert_eq!(r.recent_buckets.back(), Some(sent));
        }
        let r = &run.ranks[&5];
        assert_eq!(r.recent_buckets.len(), cap);
        let steps: Vec<u64> = r.recent_buckets.iter().map(|b| b.step).collect();
        assert_eq!(steps, (8..=(cap as u64 + 7)).collect::<Vec<_>>());
    }

    #[test]
    fn unknown_ranks_are_ignored() {
        let now = Instant::now();
        let mut run = RunView::new("r".into(), spec(), now, 0.0);
        apply_worker(&mut run, &epoch(7, 1, 100.0, false), now);
        assert!(run.figures.aggregate.is_none());
    }
}
