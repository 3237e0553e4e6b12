//! The sampler thread: GPUs (NVML calls block, sometimes for long) and worker CPU/RSS, off the UI
//! task, at a fixed period, sent on a tokio channel. With neither GPUs nor pids to watch it sleeps
//! on its command channel and uses no CPU at all.

use super::procs::ProcSampler;
use super::{GpuError, GpuSource, Update};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::mpsc as tmpsc;

enum Cmd {
    Pids(Vec<u32>),
    Stop,
}

/// Handle to the sampler thread; dropping it stops the thread.
pub struct Sampler {
    cmd: Sender<Cmd>,
    thread: Option<JoinHandle<()>>,
    watched: Vec<u32>,
}

impl Sampler {
    /// Start sampling `source` (if any) every `period`; updates go to `tx`.
    pub fn spawn(
        source: Option<Box<dyn GpuSource>>,
        period: Duration,
        tx: tmpsc::Sender<Update>,
    ) -> Sampler {
        let (cmd, rx) = channel();
        let thread = std::thread::Builder::new()
            .name("ddptop-sampler".into())
            .spawn(move || run(source, period.max(Duration::from_millis(50)), rx, tx))
            .expect("spawn sampler thread");
        Sampler {
            cmd,
            thread: Some(thread),
            watched: Vec::new(),
        }
    }

    /// Watch these worker pids (CPU %, RSS) from now on. Cheap to call every tick: only a change
    /// is sent to the thread.
    pub fn watch(&mut self, pids: Vec<u32>) {
        if pids != self.watched {
            self.watched = pids.clone();
            let _ = self.cmd.send(Cmd::Pids(pids));
        }
    }

    /// Stop the thread and wait for it (at most one sample's duration).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.cmd.send(Cmd::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        let _ = self.cmd.send(Cmd::Stop);
        // Don't join on drop: a stalled NVML call must not hold up an exit.
        self.thread.take();
    }
}

fn run(
    mut source: Option<Box<dyn GpuSource>>,
    period: Duration,
    rx: Receiver<Cmd>,
    tx: tmpsc::Sender<Update>,
) {
    let mut procs = ProcSampler::new();
    let mut pids: Vec<u32> = Vec::new();
    let mut had_pids = false;
    let mut next = Instant::now();
    loop {
        let idle = source.is_none() && pids.is_empty() && !had_pids;
        let got = if idle {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(next.saturating_duration_since(Instant::now()))
        };
        match got {
            Ok(Cmd::Pids(p)) => {
                pids = p;
                if idle {
                    next = Instant::now();
                }
                continue;
            }
            Ok(Cmd::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Some(src) = source.as_mut() {
            let s = src.sample();
            let gone = matches!(s, Err(GpuError::Unavailable(_)));
            if tx.blocking_send(Update::Gpus(s)).is_err() {
                return;
            }
            if gone {
                source = None;
            }
        }
        if !pids.is_empty() || had_pids {
            let stats = procs.sample(&pids);
            had_pids = !pids.is_empty();
            if tx.blocking_send(Update::Procs(stats)).is_err() {
                return;
            }
        }
        next += period;
        let now = Instant::now();
        if next < now {
            next = now + period;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::fake::FakeGpus;

    #[test]
    fn sends_gpu_samples_and_stops() {
        let (tx, mut rx) = tmpsc::channel(8);
        let s = Sampler::spawn(
            Some(Box::new(FakeGpus::h200(2))),
            Duration::from_millis(20),
            tx,
        );
        let first = rx.blocking_recv().unwrap();
        match first {
            Update::Gpus(Ok(v)) => assert_eq!(v.len(), 2),
            other => panic!("{other:?}"),
        }
        s.stop();
    }

    #[test]
    fn samples_watched_pids_then_clears_them() {
        let (tx, mut rx) = tmpsc::channel(8);
        let mut s = Sampler::spawn(None, Duration::from_millis(20), tx);
        let me = std::process::id();
        s.watch(vec![me]);
        loop {
            if let Update::Procs(p) = rx.blocking_recv().unwrap() {
                assert!(p.contains_key(&me));
                break;
            }
        }
        s.watch(vec![]);
        loop {
            if let Update::Procs(p) = rx.blocking_recv().unwrap()
                && p.is_empty()
            {
                break;
            }
        }
        s.stop();
    }

    #[test]
    fn unavailable_source_is_dropped() {
        let (tx, mut rx) = tmpsc::channel(8);
        let mut f = FakeGpus::h200(1);
        f.fail_next = Some(GpuError::Unavailable("gone".into()));
        let s = Sampler::spawn(Some(Box::new(f)), Duration::from_millis(10), tx);
        assert!(matches!(rx.blocking_recv(), Some(Update::Gpus(Err(_)))));
        // No more GPU samples after that: the thread is idle on its command channel.
        std::thread::sleep(Duration::from_millis(60));
        assert!(rx.try_recv().is_err());
        s.stop();
    }
}
