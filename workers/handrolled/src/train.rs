//! The epoch loop and its reports to ddptop: `plan`, then per step `step` (every rank),
//! `buckets` (the one whole-gradient bucket) and `comm` (the all-reduce and the buffer
//! broadcast as explicit collectives), `epoch` per epoch (epoch 0 is warm-up), `result`.
//!
//! Sampled timing, as the Python workers do it (`DDPTOP_TIME_EVERY`, workers/ddptop_worker/
//! train.py): after warm-up only every `time_every`-th step is timed (devices drained at each
//! phase boundary) and reported; the others run without any drain (`Group::step_untimed`) and
//! their samples ride on the next `step` message (`samples`, `every`). Each `step` carries
//! replica 0's loss.
//!
//! `bwd_ms` in `step` is backward plus the all-reduce, as DDP's `loss.backward()` measures it
//! (it returns after the reducer's all-reduces); `buckets` splits it into compute and exposed
//! communication, which here is all of it: nothing overlaps.

use anyhow::Result;
use serde_json::json;
use std::time::Instant;

use crate::client::Client;
use crate::data::Data;
use crate::fault::Fault;
use crate::replica::{Group, StepTimes};

pub struct Settings {
    pub epochs: i64,
    pub buckets_every: u64,
    /// Time (drain, measure, report) every N-th step after warm-up; warm-up times every step.
    pub time_every: u64,
    /// BatchNorm in training mode (the default); eval mode only for equivalence checks.
    pub bn_train: bool,
    pub fault: Option<Fault>,
}

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Per-replica samples/s of each timed epoch.
    pub timed: Vec<f64>,
    pub steps: u64,
    pub stopped: bool,
    pub last_loss: f64,
}

fn finite(x: f64) -> f64 {
    if x.is_finite() { x.max(0.0) } else { 0.0 }
}

pub fn grad_bytes(group: &Group) -> i64 {
    group.replicas[0].grad_numel() * 4
}

/// Where a step sits in the run, for its messages.
#[derive(Clone, Copy)]
struct StepInfo {
    step: u64,
    epoch: i64,
    warmup: bool,
    samples: i64,
    data_ms: f64,
    buckets: bool,
    every: u64,
}

fn emit_step(client: &Client, group: &Group, st: &StepTimes, info: &StepInfo) {
    let StepInfo {
        step,
        epoch,
        warmup,
        samples,
        data_ms,
        buckets,
        every,
    } = *info;
    let nbytes = grad_bytes(group);
    let comm_end = st.comm_start_ms + st.comm_ms;
    for r in 0..group.k() {
        client.send(
            r,
            "step",
            json!({
                "step": step, "epoch": epoch, "warmup": warmup, "sync": true, "samples": samples,
                "fwd_ms": finite(st.fwd_ms[r]),
                "bwd_ms": finite(comm_end - st.bwd_start_ms[r]),
                "opt_ms": finite(st.opt_ms), "data_ms": finite(data_ms),
                "step_ms": finite(st.step_ms), "timing": "host", "every": every,
                "loss": st.loss.is_finite().then_some(st.loss),
            }),
        );
        if group.k() > 1 {
            let mut ops = vec![json!({
                "op": "all_reduce", "name": format!("grads ({})", group.reduce.as_str()),
                "pass": "bwd", "bytes": nbytes, "start_ms": finite(st.comm_start_ms),
                "dur_ms": finite(st.comm_ms),
            })];
            if !group.replicas[0].buffers.is_empty() {
                ops.insert(
                    0,
                    json!({
                        "op": "broadcast", "name": "bn buffers", "pass": "fwd",
                        "bytes": group.replicas[0].buffers.iter().map(|b| b.numel() * 4).sum::<usize>(),
                        "start_ms": 0.0, "dur_ms": finite(st.bcast_ms),
                    }),
                );
            }
            client.send(
                r,
                "comm",
                json!({"step": step, "timing": "host", "ops": ops}),
            );
        }
        if buckets {
            // ms from this replica's backward start: ready when its backward is done, started
            // when the last replica's is (the copies wait for everyone), done after the copies.
            let b0 = st.bwd_start_ms[r];
            let ready = finite(st.bwd_ms[r]);
            let start = finite(st.comm_start_ms - b0).max(ready);
            let done = finite(comm_end - b0).max(start);
            client.send(
                r,
                "buckets",
                json!({
                    "step": step, "rebuilt": true, "bwd_compute_ms": ready,
                    "exposed_ms": finite(done - ready), "start_inferred": false,
                    "buckets": [{"index": 0, "bytes": nbytes, "ready_ms": ready,
                                 "start_ms": start, "done_ms": done}],
                }),
            );
        }
    }
}

/// Train `settings.epochs` epochs; returns what the `result` message needs.
pub fn run(
    client: &Client,
    group: &mut Group,
    data: &Data,
    settings: &Settings,
) -> Result<Outcome> {
    let k = group.k();
    let spe = data.steps_per_epoch;
    client.set_phase("train");
    client.send_all(
        "plan",
        json!({"total_steps": settings.epochs * spe, "epochs": settings.epochs,
               "steps_per_epoch": spe, "phase": "train"}),
    );
    let mut out = Outcome::default();
    let every = settings.buckets_every.max(1);
    for epoch in 0..settings.epochs {
        let warmup = epoch == 0 && settings.epochs > 1;
        let time_every = if warmup {
            1
        } else {
            settings.time_every.max(1)
        };
        // Samples and steps since the last step message (this epoch's: an epoch reports its own).
        let (mut unreported, mut untimed) = (0i64, 0u64);
        let perms = data.permutations(epoch);
        for d in group.devices() {
            crate::replica::sync(d);
        }
        let t_epoch = Instant::now();
        let (mut steps, mut data_wait_ms) = (0i64, 0.0);
        for i in 0..spe {
            if client.stop_requested() {
                out.stopped = true;
                break;
            }
            if let Some(f) = &settings.fault
                && f.due(out.steps)
            {
                return Err(f.fire(client, k - 1).into());
            }
            let t_data = Instant::now();
            let batches: Vec<_> = (0..k).map(|r| data.batch(r, &perms[r], i)).collect();
            let data_ms = t_data.elapsed().as_secs_f64() * 1e3;
            out.steps += 1;
            steps += 1;
            data_wait_ms += data_ms;
            if out.steps % time_every == 0 {
                let st = group.step(&batches, settings.bn_train)?;
                client.set_step(out.steps);
                let info = StepInfo {
                    step: out.steps,
                    epoch,
                    warmup,
                    samples: unreported + data.batch,
                    data_ms,
                    buckets: out.steps % every == 0,
                    every: untimed + 1, // the steps its samples cover
                };
                (unreported, untimed) = (0, 0);
                emit_step(client, group, &st, &info);
            } else {
                group.step_untimed(&batches, settings.bn_train)?;
                client.set_step(out.steps);
                unreported += data.batch;
                untimed += 1;
            }
        }
        // Untimed steps may still be running: the epoch ends when the devices are done.
        group.drain();
        let seconds = t_epoch.elapsed().as_secs_f64();
        if steps > 0 {
            out.last_loss = group.last_loss();
        }
        if steps > 0 {
            let samples = steps * data.batch;
            let sps = samples as f64 / seconds.max(1e-9);
            if !warmup {
                out.timed.push(sps);
            }
            client.send_all(
                "epoch",
                json!({"epoch": epoch, "warmup": warmup, "samples": samples, "seconds": seconds,
                       "samples_per_s": sps, "data_wait_ms": finite(data_wait_ms)}),
            );
            client.log(
                0,
                "info",
                &format!(
                    "epoch {epoch}{}: {steps} steps, {sps:.1} samples/s per replica \
                     ({:.1} over {k}), last loss {:.4}",
                    if warmup { " (warm-up)" } else { "" },
                    sps * k as f64,
                    out.last_loss
                ),
            );
        }
        if out.stopped {
            client.log(0, "info", &format!("stop received at step {}", out.steps));
            break;
        }
    }
    Ok(out)
}
