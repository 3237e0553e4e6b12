//! One simulated rank: the cost model stepped in (scaled) real time, spoken as protocol v1.

use super::SimArgs;
use super::client::Client;
use crate::costmodel::{self, Profile, RESNET18_BUCKETS};
use crate::protocol::*;
use crate::run::NcclMode;
use crate::run::{EnvOverlay, NcclSettings};
use crate::run::{Fault, SimWorker};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Steps in one block of the no_sync probe (synced or no_sync).
const PROBE_STEPS: u32 = 10;

struct Sim<'a> {
    args: &'a SimArgs,
    rank: u32,
    k: u32,
    profile: Profile,
    mode: NcclMode,
    /// Gradient buckets (bytes, ready fraction of backward), in all-reduce order.
    layout: Vec<(u64, f64)>,
    noise: f64,
    rng: StdRng,
    client: Client,
    fault: Option<Fault>,
    step: u64,
    /// This step's wait for a slow rank (`slow` fault), for its buckets message.
    waited_ms: f64,
}

pub fn run(args: &SimArgs, rank: u32) -> anyhow::Result<i32> {
    let profile = Profile::get(&args.profile).expect("checked by sim::main");
    let env: EnvOverlay = args
        .env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), Some(v.to_string())))
        .collect();
    let settings = NcclSettings::with(&env);
    let mode = settings.mode();
    // `ddptop tune`'s bucket size (DDPTOP_DDP_BUCKET_CAP_MB): the book's buckets re-cut.
    let ddp = crate::run::DdpSettings::of(&settings)?;
    let layout = match ddp.bucket_cap_mb {
        Some(cap) => {
            costmodel::buckets::rebucket(&RESNET18_BUCKETS, costmodel::buckets::cap_bytes(cap.mb()))
        }
        None => RESNET18_BUCKETS.to_vec(),
    };
    let client = Client::connect(rank, args.world_size)?;
    let mut sim = Sim {
        args,
        rank,
        k: args.world_size.max(1),
        noise: args.noise.unwrap_or(profile.noise),
        profile,
        mode,
        layout,
        rng: StdRng::seed_from_u64(
            args.seed ^ (u64::from(rank) << 32) ^ u64::from(std::process::id()),
        ),
        client,
        fault: args.inject.clone(),
        step: 0,
        waited_ms: 0.0,
    };
    if let Some(Fault::Garbage(n)) = sim.fault
        && rank == 0
    {
        sim.send_garbage(n.unwrap_or(Fault::GARBAGE_LINES));
    }
    let code = match args.experiment.kind().sim_worker() {
        Some(SimWorker::Train) => sim.train(),
        Some(SimWorker::Probe) => sim.probe_only(),
        Some(SimWorker::Allreduce) => sim.allreduce(),
        None => anyhow::bail!("the simulated worker has no {} experiment", args.experiment),
    };
    Ok(code)
}

impl Sim<'_> {
    fn jitter(&mut self, x: f64) -> f64 {
        if self.noise <= 0.0 {
            return x;
        }
        // Box-Muller normal, clamped so a time never goes negative.
        let u1: f64 = self.rng.random_range(1e-12..1.0);
        let u2: f64 = self.rng.random();
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        x * (1.0 + self.noise * z).max(0.5)
    }

    fn sleep_ms(&self, ms: f64) {
        let s = ms / 1e3 / self.args.speed.max(1e-3);
        std::thread::sleep(Duration::from_secs_f64(s.clamp(0.0, 60.0)));
    }

    fn set_phase(&self, p: Phase) {
        *self
            .client
            .shared
            .phase
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = p;
    }

    fn log(&self, level: LogLevel, msg: impl Into<String>) {
        self.client.send(&WorkerMsg::Log(Log {
            rank: self.rank,
            step: self.step,
            t: self.client.t(),
            level,
            msg: msg.into(),
            finding: None,
        }));
    }

    fn per_rank_batch(&self) -> u32 {
        if self.args.experiment.kind().global_batch() {
            (self.args.batch / self.k).max(1)
        } else {
            self.args.batch
        }
    }

    /// Apply the injected fault (or the profile's deadlock) at this step, if due.
    fn check_faults(&mut self) {
        let last_rank = self.rank == self.k - 1;
        match self.fault {
            Some(Fault::SlowStart(secs)) if self.step == 0 => {
                self.log(
                    LogLevel::Warn,
                    format!(
                        "injected fault slowstart:{secs}: the first step burns {secs} s of CPU"
                    ),
                );
                burn_cpu(Duration::from_secs(secs));
            }
            Some(Fault::Slow {
                rank,
                factor,
                from,
                phase,
            }) if self.step + 1 == from.unwrap_or(1) && rank == self.rank => {
                let where_ = match phase {
                    Some(crate::run::fault::SlowPhase::Compute) => "in its forward+backward",
                    _ => "for data",
                };
                let text = self
                    .fault
                    .as_ref()
                    .map(|f| f.to_string())
                    .unwrap_or_default();
                self.log(
                    LogLevel::Warn,
                    format!(
                        "injected fault {text}: slowing from now (step {}): every step waits {:.2}x its own time {where_}",
                        self.step + 1,
                        factor - 1.0
                    ),
                );
            }
            Some(Fault::Crash(s)) if self.step >= s && last_rank => {
                self.log(
                    LogLevel::Error,
                    format!("injected crash at step {}", self.step),
                );
                std::process::exit(3);
            }
            // As seen on NCCL: the raising rank reports its error but its exit stays blocked
            // behind the collectives in flight, and its peers wait in the next all-reduce.
            Some(Fault::Raise(s)) if self.step >= s && last_rank => {
                let msg = format!("RuntimeError: injected exception at step {}", self.step);
                eprintln!("Traceback (simulated): {msg}");
                self.log(LogLevel::Error, msg);
                self.client.send(&WorkerMsg::Bye(Bye {
                    rank: self.rank,
                    step: self.step,
                    t: self.client.t(),
                    reason: ByeReason::Error,
                }));
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            Some(Fault::Raise(s)) if self.step >= s => {
                self.hang_forever(&format!("waiting for rank {} in all_reduce", self.k - 1))
            }
            Some(Fault::Hang(s)) if self.step >= s => self.hang_forever("injected hang"),
            Some(Fault::Frozen(s)) if self.step >= s && last_rank => {
                self.client.shared.frozen.store(true, Ordering::Relaxed);
                self.client.shared.silent.store(true, Ordering::Relaxed);
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            Some(Fault::Silent(s)) if self.step >= s && last_rank => {
                self.client.shared.silent.store(true, Ordering::Relaxed);
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            _ => {}
        }
        if self.k > 1 && self.step >= 1 && self.profile.training_hangs(self.mode) {
            let why = format!(
                "simulated deadlock: on {} DDP's overlapped all-reduce never completes with {} (as the book reports)",
                self.profile.name, self.mode
            );
            *self
                .client
                .shared
                .blocked_in
                .lock()
                .unwrap_or_else(|e| e.into_inner()) =
                Some(("nccl:all_reduce".into(), std::time::Instant::now()));
            self.hang_forever(&why);
        }
    }

    /// Alive (heartbeats keep coming) but no step progress, like a rank stuck in a collective.
    fn hang_forever(&mut self, why: &str) -> ! {
        self.log(LogLevel::Warn, why.to_string());
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }

    /// How long the run is, for ddptop's progress and ETA.
    fn send_plan(&self, total: u64, epochs: Option<u32>, per_epoch: Option<u64>, phase: Phase) {
        self.client.send(&WorkerMsg::Plan(crate::protocol::Plan {
            rank: self.rank,
            step: self.step,
            t: self.client.t(),
            total_steps: Some(total),
            epochs,
            steps_per_epoch: per_epoch,
            phase: Some(phase),
            comm_timing: None,
            comm_why: None,
            bucket_bytes: None,
        }));
    }

    fn send_step(
        &mut self,
        epoch: u32,
        warmup: bool,
        sync: bool,
        m: &costmodel::ModelStep,
        batch: u32,
    ) -> f64 {
        let (mut fwd, mut bwd, opt, mut data) = (
            self.jitter(m.fwd_ms),
            self.jitter(m.bwd_ms),
            self.jitter(m.opt_ms),
            self.jitter(m.data_ms),
        );
        self.waited_ms = 0.0;
        if let Some(Fault::Slow {
            rank,
            factor,
            from,
            phase,
        }) = self.fault
            && rank < self.k
            && sync
            && self.step + 1 >= from.unwrap_or(1)
        {
            if rank == self.rank {
                let extra = (factor - 1.0) * (fwd + bwd + opt + data);
                if phase == Some(crate::run::fault::SlowPhase::Compute) {
                    let share = fwd / (fwd + bwd).max(1e-9);
                    fwd += extra * share;
                    bwd += extra * (1.0 - share);
                } else {
                    data += extra;
                }
            } else {
                // Each rank is a process of its own here, with no real all-reduce to block in:
                // the others model the wait DDP imposes on them, the slow rank's extra time
                // (from the model's step, as they cannot see its noise), inside backward.
                let wait =
                    self.jitter((factor - 1.0) * (m.fwd_ms + m.bwd_ms + m.opt_ms + m.data_ms));
                bwd += wait;
                self.waited_ms = wait;
            }
        }
        let step_ms = fwd + bwd + opt + data;
        self.sleep_ms(step_ms);
        self.step += 1;
        self.client.shared.step.store(self.step, Ordering::Relaxed);
        self.client.send(&WorkerMsg::Step(Step {
            rank: self.rank,
            step: self.step,
            epoch,
            t: self.client.t(),
            warmup,
            sync,
            samples: u64::from(batch),
            fwd_ms: fwd,
            bwd_ms: bwd,
            opt_ms: opt,
            data_ms: data,
            step_ms,
            timing: Timing::Model,
            fused: None,
            loss: None,
            every: None,
            t_bwd: None,
            sync_ms: None,
            exposed_ms: None,
        }));
        step_ms
    }

    /// At k=1 too, as the real worker does (DDP at world size 1 still runs its hook): the
    /// bucket-ready times of a k=1 run are what the cost model predicts k ranks from.
    fn send_buckets(&mut self, m: &costmodel::ModelStep) {
        let scale = self.jitter(1.0);
        let tl = &m.timeline;
        let buckets = tl
            .spans
            .iter()
            .enumerate()
            .map(|(i, s)| BucketSpan {
                index: i as u32,
                bytes: s.bytes,
                ready_ms: s.ready_ms * scale,
                // A slow rank's late buckets hold every all-reduce back by its delay.
                start_ms: s.start_ms * scale + self.waited_ms,
                done_ms: s.done_ms * scale + self.waited_ms,
                kernel_ms: None,
            })
            .collect();
        self.client.send(&WorkerMsg::Buckets(Buckets {
            rank: self.rank,
            step: self.step,
            t: self.client.t(),
            rebuilt: true,
            bwd_compute_ms: tl.bwd_compute_ms * scale,
            exposed_ms: tl.exposed_ms * scale + self.waited_ms,
            buckets,
            start_inferred: None,
        }));
    }

    fn train(&mut self) -> i32 {
        let batch = self.per_rank_batch();
        let steps_per_epoch = (self.args.samples / u64::from(self.k) / u64::from(batch)).max(1);
        let model = self
            .profile
            .step_with(batch, self.k, self.mode, &self.layout);
        self.set_phase(Phase::Train);
        self.log(
            LogLevel::Info,
            format!(
                "SIMULATED {} (cost model, profile {}): {} buckets, {} gradient bytes",
                self.args.experiment,
                self.profile.name,
                self.layout.len(),
                costmodel::RESNET18_GRAD_BYTES
            ),
        );
        let epochs = self.args.epochs.max(1);
        let mut total = steps_per_epoch * u64::from(epochs);
        self.send_plan(total, Some(epochs), Some(steps_per_epoch), Phase::Train);
        let mut timed = Vec::new();
        let mut probe_block = 0u32;
        for epoch in 0..self.args.epochs.max(1) {
            let warmup = epoch == 0 && self.args.epochs > 1;
            let mut ms_total = 0.0;
            let mut samples = 0u64;
            for _ in 0..steps_per_epoch {
                if self.client.shared.stop.load(Ordering::Relaxed) {
                    return self.finish(&timed, ByeReason::Stopped);
                }
                if self.client.shared.probe.load(Ordering::Relaxed) {
                    self.set_phase(Phase::Probe);
                    self.probe_pair(&mut probe_block, batch);
                    // The probe's steps extend the run.
                    total += 2 * u64::from(PROBE_STEPS);
                    self.send_plan(total, Some(epochs), Some(steps_per_epoch), Phase::Train);
                    self.set_phase(Phase::Train);
                    continue;
                }
                self.check_faults();
                ms_total += self.send_step(epoch, warmup, true, &model, batch);
                samples += u64::from(batch);
                if self.step > 2 {
                    self.send_buckets(&model);
                }
            }
            let seconds = ms_total / 1e3;
            let sps = samples as f64 / seconds.max(1e-9);
            if !warmup {
                timed.push(sps);
            }
            self.client.send(&WorkerMsg::Epoch(crate::protocol::Epoch {
                rank: self.rank,
                step: self.step,
                epoch,
                t: self.client.t(),
                warmup,
                samples,
                seconds,
                samples_per_s: sps,
                data_wait_ms: model.data_ms * steps_per_epoch as f64,
            }));
        }
        self.finish(&timed, ByeReason::Done)
    }

    /// One synced and one no_sync block of forward+backward steps (no optimizer step).
    fn probe_pair(&mut self, block: &mut u32, batch: u32) {
        const STEPS: u32 = PROBE_STEPS;
        let synced = self
            .profile
            .step_with(batch, self.k, self.mode, &self.layout);
        // DDP's reducer runs even at k=1 (the control): its overhead shows up as "comm".
        let reducer = self.profile.ddp_overhead_ms;
        let synced_ms = synced.fwd_ms + synced.bwd_ms + if self.k == 1 { reducer } else { 0.0 };
        let (fwd, bwd, _, _) = self.profile.compute_ms(batch);
        let nosync_ms = fwd + bwd;
        for (mode, base) in [
            (ProbeMode::Synced, synced_ms),
            (ProbeMode::NoSync, nosync_ms),
        ] {
            let mut xs: Vec<f64> = (0..STEPS).map(|_| self.jitter(base)).collect();
            self.sleep_ms(xs.iter().sum());
            self.step += u64::from(STEPS);
            self.client.shared.step.store(self.step, Ordering::Relaxed);
            xs.sort_by(|a, b| a.total_cmp(b));
            self.client.send(&WorkerMsg::Probe(crate::protocol::Probe {
                rank: self.rank,
                step: self.step,
                t: self.client.t(),
                block: *block,
                mode,
                steps: STEPS,
                median_ms: crate::util::median(&xs).unwrap_or(base),
                min_ms: xs[0],
                max_ms: xs[xs.len() - 1],
                live: Some(false),
            }));
            *block += 1;
        }
    }

    fn probe_only(&mut self) -> i32 {
        self.set_phase(Phase::Probe);
        self.log(
            LogLevel::Info,
            format!("SIMULATED no_sync probe (profile {})", self.profile.name),
        );
        let mut block = 0;
        let batch = self.per_rank_batch();
        self.send_plan(15 * 2 * u64::from(PROBE_STEPS), None, None, Phase::Probe);
        for _ in 0..15 {
            if self.client.shared.stop.load(Ordering::Relaxed) {
                return self.finish(&[], ByeReason::Stopped);
            }
            self.check_faults();
            self.probe_pair(&mut block, batch);
        }
        self.finish(&[], ByeReason::Done)
    }

    fn allreduce(&mut self) -> i32 {
        self.set_phase(Phase::Bench);
        let curve = self.profile.curve(self.mode);
        let mut sizes: Vec<u64> = std::iter::successors(Some(1024u64), |s| Some(s * 4))
            .take_while(|s| *s <= 256 << 20)
            .collect();
        sizes.push(64 << 20);
        sizes.sort_unstable();
        sizes.dedup();
        const ITERS: u32 = 20;
        self.send_plan(
            sizes.len() as u64 * u64::from(ITERS),
            None,
            None,
            Phase::Bench,
        );
        for bytes in sizes {
            if self.client.shared.stop.load(Ordering::Relaxed) {
                return self.finish(&[], ByeReason::Stopped);
            }
            self.check_bench_faults();
            let bw = self.jitter(curve.at(bytes).unwrap_or(1.0));
            let factor = if self.k > 1 {
                2.0 * (self.k as f64 - 1.0) / self.k as f64
            } else {
                1.0
            };
            let time_us = factor * bytes as f64 / (bw * 1e9) * 1e6;
            self.sleep_ms((time_us * f64::from(ITERS) / 1e3).max(20.0));
            self.step += u64::from(ITERS);
            self.client.shared.step.store(self.step, Ordering::Relaxed);
            if self.rank == 0 {
                let (algbw, busbw) = costmodel::bandwidths(bytes, self.k, time_us);
                self.client.send(&WorkerMsg::Bench(crate::protocol::Bench {
                    rank: 0,
                    step: self.step,
                    t: self.client.t(),
                    op: "all_reduce".into(),
                    bytes,
                    dtype: "float32".into(),
                    iters: ITERS,
                    time_us,
                    algbw_gbs: algbw,
                    busbw_gbs: busbw,
                }));
            }
        }
        self.finish(&[], ByeReason::Done)
    }

    /// The bare bench does not deadlock in the SHM memcpy mode; only injected faults apply.
    fn check_bench_faults(&mut self) {
        let hangs = self.profile.hangs_with.clone();
        self.profile.hangs_with.clear();
        self.check_faults();
        self.profile.hangs_with = hangs;
    }

    fn finish(&mut self, timed: &[f64], reason: ByeReason) -> i32 {
        self.set_phase(Phase::Done);
        let sps = (!timed.is_empty()).then(|| timed.iter().sum::<f64>() / timed.len() as f64);
        // Every family is a protocol name (tests/protocol_fixtures.rs checks the two lists).
        let family = crate::protocol::FamilyResult::empty(self.args.experiment.as_str())
            .expect("the family's name is in protocol::EXPERIMENT_NAMES");
        self.client.send(&WorkerMsg::Result(ResultMsg {
            rank: self.rank,
            step: self.step,
            t: self.client.t(),
            samples_per_s: sps,
            timed_epochs: timed.len() as u32,
            params: Some(costmodel::RESNET18_PARAMS),
            grad_bytes: Some(costmodel::RESNET18_GRAD_BYTES),
            bucket_bytes: self.layout.iter().map(|b| b.0).collect(),
            family,
        }));
        self.client.send(&WorkerMsg::Bye(Bye {
            rank: self.rank,
            step: self.step,
            t: self.client.t(),
            reason,
        }));
        if self.fault == Some(Fault::Teardown) {
            // Said bye, then never exits, as a rank stuck in NCCL's teardown.
            self.client.shared.silent.store(true, Ordering::Relaxed);
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        0
    }

    /// The `garbage` fault: bad lines on our own connection (dropped and counted, connection
    /// kept) and two intruder connections (wrong token, duplicate rank) that must be refused.
    fn send_garbage(&mut self, lines: u64) {
        const BAD: [&str; 4] = [
            "this is not json",
            "{\"v\":2,\"type\":\"step\"}",
            "{\"v\":1,\"type\":\"teleport\",\"rank\":0}",
            "[1,2,3]",
        ];
        for i in 0..lines {
            self.client.send_raw(BAD[(i % 4) as usize]);
        }
        let Some(path) = std::env::var_os("DDPTOP_SOCKET") else {
            return;
        };
        for (label, token) in [
            ("wrong token", "0".repeat(64)),
            (
                "duplicate rank",
                std::env::var("DDPTOP_TOKEN").unwrap_or_default(),
            ),
        ] {
            let answer = intrude(&path, &token, self.rank, self.k);
            self.log(
                LogLevel::Info,
                format!("intruder ({label}) was answered: {answer}"),
            );
        }
    }
}

fn intrude(path: &std::ffi::OsStr, token: &str, rank: u32, k: u32) -> String {
    use std::io::{BufRead, BufReader, Write};
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(path) else {
        return "connect failed".into();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let hello = WorkerMsg::Hello(Hello {
        token: token.into(),
        run_id: std::env::var("DDPTOP_RUN_ID").unwrap_or_default(),
        ..Hello::new(
            rank,
            k,
            super::client::hostname(),
            "sim:intruder".into(),
            CommBackend::Sim,
            WorkerKind::Sim,
        )
    });
    let _ = writeln!(s, "{}", hello.to_line());
    let mut line = String::new();
    let _ = BufReader::new(&s).read_line(&mut line);
    line.trim_end().to_string()
}

/// Busy this thread for `d` of wall time (its CPU time grows, as in autotuning).
fn burn_cpu(d: Duration) {
    let end = std::time::Instant::now() + d;
    let mut x = 0u64;
    while std::time::Instant::now() < end {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x ^ i);
        }
    }
}
