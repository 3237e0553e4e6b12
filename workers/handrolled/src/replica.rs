//! k model replicas in one process and the hand-rolled data-parallel step over them:
//! forward and backward on each replica's shard, then the gradient all-reduce by tensor copies
//! (only after the whole backward: no overlap), then the same SGD step on every replica.
//!
//! Timing is `host`: tch exposes no CUDA events, so on a *timed* step (`step`) the devices are
//! synchronized at each phase boundary before the host clock is read; the drain between forward
//! and backward stalls the GPUs the single dispatching thread has not reached yet. Untimed steps
//! (`step_untimed`, the sampled-timing policy of `DDPTOP_TIME_EVERY`) issue the same work with no
//! drain at all: stream order and the cross-device copies order it.

use anyhow::{Context, Result, anyhow};
use std::time::Instant;
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Tensor};

use crate::model::{self, ModelKind};
use crate::reduce::{self, Reduce};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// One thread issues every replica's work in turn (the book's single Python thread).
    Single,
    /// One OS thread per replica issues that replica's forward, backward and optimizer step.
    Threads,
}

impl Dispatch {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "single" => Ok(Self::Single),
            "threads" => Ok(Self::Threads),
            _ => Err(format!("unknown dispatch {s:?} (single, threads)")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Threads => "threads",
        }
    }
}

pub struct Replica {
    pub device: Device,
    pub vs: nn::VarStore,
    net: nn::SequentialT,
    opt: nn::Optimizer,
    /// Trainable parameters in creation order (the same order on every replica).
    pub params: Vec<Tensor>,
    /// BN running statistics, sorted by name.
    pub buffers: Vec<Tensor>,
    pub loss: Option<Tensor>,
}

impl Replica {
    fn new(kind: ModelKind, device: Device, lr: f64) -> Result<Replica> {
        let vs = nn::VarStore::new(device);
        let net = model::build(kind, &vs.root());
        let opt = nn::Sgd::default().build(&vs, lr)?;
        let params = vs.trainable_variables();
        let mut named: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| !t.requires_grad())
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Replica {
            device,
            vs,
            net,
            opt,
            params,
            buffers: named.into_iter().map(|(_, t)| t).collect(),
            loss: None,
        })
    }

    fn forward(&mut self, x: &Tensor, y: &Tensor, train: bool) {
        self.opt.zero_grad();
        let logits = self.net.forward_t(x, train);
        self.loss = Some(logits.cross_entropy_for_logits(y));
    }

    fn backward(&mut self) -> Result<()> {
        self.loss
            .as_ref()
            .ok_or_else(|| anyhow!("backward before forward"))?
            .f_backward()?;
        Ok(())
    }

    /// This replica's gradients, concatenated into one flat buffer on its device.
    fn flat_grads(&self) -> Result<Tensor> {
        let views: Vec<Tensor> = self.params.iter().map(|p| p.grad().view(-1)).collect();
        Ok(Tensor::f_cat(&views, 0)?)
    }

    fn set_grads(&self, flat: &Tensor) -> Result<()> {
        let mut off = 0;
        for p in &self.params {
            let n = p.numel() as i64;
            p.grad().f_copy_(&flat.f_narrow(0, off, n)?.f_view_as(p)?)?;
            off += n;
        }
        Ok(())
    }

    fn sgd(&mut self) {
        self.opt.step();
    }

    pub fn grad_numel(&self) -> i64 {
        self.params.iter().map(|p| p.numel() as i64).sum()
    }
}

/// Wait for every queued kernel of `device` (no-op on CPU, where ops are synchronous).
pub fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

fn ms(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64() * 1e3
}

/// One step's measurements. Replica times are per replica; `comm`/`opt` are whole-group phases.
#[derive(Debug, Clone, Default)]
pub struct StepTimes {
    pub fwd_ms: Vec<f64>,
    pub bwd_ms: Vec<f64>,
    /// Start of each replica's backward, ms from the step start.
    pub bwd_start_ms: Vec<f64>,
    /// BN buffer broadcast from replica 0 (inside forward, as in DDP).
    pub bcast_ms: f64,
    /// Whole-gradient all-reduce: begins when the last replica's backward is done.
    pub comm_start_ms: f64,
    pub comm_ms: f64,
    pub opt_ms: f64,
    pub step_ms: f64,
    pub loss: f64,
}

/// Every replica plus the switches of the hand-rolled loop.
pub struct Group {
    pub replicas: Vec<Replica>,
    pub dispatch: Dispatch,
    pub reduce: Reduce,
}

impl Group {
    /// Replica 0 is built from `seed`; the others start as exact copies of it (DDP broadcasts
    /// rank 0's parameters at construction, to the same effect).
    pub fn new(
        kind: ModelKind,
        devices: &[Device],
        seed: i64,
        lr: f64,
        dispatch: Dispatch,
        reduce: Reduce,
    ) -> Result<Group> {
        tch::manual_seed(seed);
        let mut replicas = Vec::with_capacity(devices.len());
        for &d in devices {
            let mut r = Replica::new(kind, d, lr)?;
            if let Some(first) = replicas.first() {
                let first: &Replica = first;
                tch::no_grad(|| r.vs.copy(&first.vs)).context("copying replica 0's weights")?;
            }
            replicas.push(r);
        }
        Ok(Group {
            replicas,
            dispatch,
            reduce,
        })
    }

    pub fn k(&self) -> usize {
        self.replicas.len()
    }

    pub fn devices(&self) -> Vec<Device> {
        self.replicas.iter().map(|r| r.device).collect()
    }

    fn sync_all(&self) {
        for r in &self.replicas {
            sync(r.device);
        }
    }

    /// Replica 0's BN running statistics to every other replica (DDP's `broadcast_buffers`).
    fn broadcast_buffers(&self) -> Result<()> {
        let (first, rest) = self.replicas.split_first().expect("k >= 1");
        if rest.is_empty() || first.buffers.is_empty() {
            return Ok(());
        }
        let flat0 = Tensor::f_cat(
            &first.buffers.iter().map(|b| b.view(-1)).collect::<Vec<_>>(),
            0,
        )?;
        for r in rest {
            let flat = flat0.f_to_device(r.device)?;
            let mut off = 0;
            for b in &r.buffers {
                let n = b.numel() as i64;
                b.shallow_clone()
                    .f_copy_(&flat.f_narrow(0, off, n)?.f_view_as(b)?)?;
                off += n;
            }
        }
        Ok(())
    }

    /// The whole-gradient all-reduce: flatten, reduce across replicas, write back.
    pub fn all_reduce_grads(&self) -> Result<()> {
        if self.k() < 2 {
            return Ok(());
        }
        let mut flats = self
            .replicas
            .iter()
            .map(Replica::flat_grads)
            .collect::<Result<Vec<_>>>()?;
        reduce::all_reduce_mean(&mut flats, self.reduce)?;
        for (r, f) in self.replicas.iter().zip(&flats) {
            r.set_grads(f)?;
        }
        Ok(())
    }

    /// One data-parallel step on `batches[r]` for replica r. `train` is BatchNorm's mode.
    pub fn step(&mut self, batches: &[(Tensor, Tensor)], train: bool) -> Result<StepTimes> {
        let k = self.k();
        assert_eq!(batches.len(), k, "one batch per replica");
        let mut st = StepTimes {
            fwd_ms: vec![0.0; k],
            bwd_ms: vec![0.0; k],
            bwd_start_ms: vec![0.0; k],
            ..Default::default()
        };
        let t0 = Instant::now();
        tch::no_grad(|| self.broadcast_buffers())?;
        if k > 1 {
            self.sync_all();
        }
        st.bcast_ms = ms(t0, Instant::now());
        match self.dispatch {
            Dispatch::Single => {
                for (r, (x, y)) in self.replicas.iter_mut().zip(batches) {
                    r.forward(x, y, train);
                }
                self.sync_all();
                let t1 = Instant::now();
                for r in self.replicas.iter_mut() {
                    r.backward()?;
                }
                self.sync_all();
                let t2 = Instant::now();
                st.fwd_ms.fill(ms(t0, t1));
                st.bwd_ms.fill(ms(t1, t2));
                st.bwd_start_ms.fill(ms(t0, t1));
            }
            Dispatch::Threads => {
                let marks = std::thread::scope(|s| {
                    let handles: Vec<_> = self
                        .replicas
                        .iter_mut()
                        .zip(batches)
                        .map(|(r, (x, y))| {
                            // Tensors are Send but not Sync: each thread gets its own handles.
                            let (x, y) = (x.shallow_clone(), y.shallow_clone());
                            s.spawn(move || -> Result<(Instant, Instant)> {
                                r.forward(&x, &y, train);
                                sync(r.device);
                                let t1 = Instant::now();
                                r.backward()?;
                                sync(r.device);
                                Ok((t1, Instant::now()))
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().map_err(panic_message)?)
                        .collect::<Result<Vec<_>>>()
                })?;
                for (r, (t1, t2)) in marks.into_iter().enumerate() {
                    st.fwd_ms[r] = ms(t0, t1);
                    st.bwd_ms[r] = ms(t1, t2);
                    st.bwd_start_ms[r] = ms(t0, t1);
                }
            }
        }
        let t2 = Instant::now();
        st.comm_start_ms = ms(t0, t2);
        tch::no_grad(|| self.all_reduce_grads())?;
        self.sync_all();
        let t3 = Instant::now();
        st.comm_ms = ms(t2, t3);
        match self.dispatch {
            Dispatch::Single => {
                for r in self.replicas.iter_mut() {
                    r.sgd();
                }
                self.sync_all();
            }
            Dispatch::Threads => std::thread::scope(|s| {
                for r in self.replicas.iter_mut() {
                    s.spawn(move || {
                        r.sgd();
                        sync(r.device);
                    });
                }
            }),
        }
        let t4 = Instant::now();
        st.opt_ms = ms(t3, t4);
        st.step_ms = ms(t0, t4);
        st.loss = self.last_loss();
        Ok(st)
    }
}

impl Group {
    /// The same step as `step` without a single synchronize or clock read: every replica's
    /// forward, then every backward, the all-reduce and the SGD step are issued back to back and
    /// the devices run them as their streams allow. Nothing is measured; the loss is not read
    /// (that would drain device 0).
    pub fn step_untimed(&mut self, batches: &[(Tensor, Tensor)], train: bool) -> Result<()> {
        assert_eq!(batches.len(), self.k(), "one batch per replica");
        tch::no_grad(|| self.broadcast_buffers())?;
        match self.dispatch {
            Dispatch::Single => {
                for (r, (x, y)) in self.replicas.iter_mut().zip(batches) {
                    r.forward(x, y, train);
                }
                for r in self.replicas.iter_mut() {
                    r.backward()?;
                }
            }
            Dispatch::Threads => std::thread::scope(|s| {
                let handles: Vec<_> = self
                    .replicas
                    .iter_mut()
                    .zip(batches)
                    .map(|(r, (x, y))| {
                        let (x, y) = (x.shallow_clone(), y.shallow_clone());
                        s.spawn(move || -> Result<()> {
                            r.forward(&x, &y, train);
                            r.backward()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .try_for_each(|h| h.join().map_err(panic_message)?)
            })?,
        }
        tch::no_grad(|| self.all_reduce_grads())?;
        match self.dispatch {
            Dispatch::Single => self.replicas.iter_mut().for_each(Replica::sgd),
            Dispatch::Threads => std::thread::scope(|s| {
                for r in self.replicas.iter_mut() {
                    s.spawn(move || r.sgd());
                }
            }),
        }
        Ok(())
    }

    /// Replica 0's loss of the last step (waits for device 0).
    pub fn last_loss(&self) -> f64 {
        self.replicas[0]
            .loss
            .as_ref()
            .map(|l| l.double_value(&[]))
            .unwrap_or(f64::NAN)
    }

    /// Wait for every device (the end of an epoch, before its clock is read).
    pub fn drain(&self) {
        self.sync_all();
    }
}

/// A panic inside libtorch (tch panics on C++ exceptions) as an error with its message.
pub fn panic_message(p: Box<dyn std::any::Any + Send>) -> anyhow::Error {
    let msg = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    anyhow!("{msg}")
}
