//! The plugin's fixed memory, allocated once at the first `init`: a table of communicators (the
//! `context` NCCL hands back), a pool of collective slots (the event handles), each with one slot
//! per channel, and the record queue to the sender thread. Handles are pointers into this memory
//! and are checked against its bounds before use, so a stray, stale or foreign handle is counted
//! and ignored rather than followed.
//!
//! Life of a collective: `start_coll` takes a free slot and queues `Start`; the first channel
//! start queues `Kernel`; the collective is complete when NCCL has stopped its `Coll` event and
//! every channel it said it would use (`nChannels`) has stopped, and then `Done` is queued and the
//! slot freed. Everything is atomics: NCCL calls from user threads and its proxy thread.

use crate::ring::Ring;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU32, AtomicU64, Ordering};

/// Channels per collective (`channelId` is a `uint8_t`; NCCL uses at most 64 today).
pub const MAX_CHANNELS: usize = 128;
/// Communicators one process may profile at once (more are left unprofiled and counted).
pub const MAX_COMMS: usize = 64;
/// How many free slots `start_coll` tries before it drops the collective.
const ALLOC_TRIES: usize = 64;

const FREE: u8 = 0;
const LIVE: u8 = 1;

/// A record for the sender thread. `Copy` and fixed-size: it goes through the lock-free queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rec {
    /// NCCL started a collective: its bytes (0 when the type is unknown) and the host time of
    /// the call (ns of CLOCK_MONOTONIC).
    Start(Key, u64, u64),
    /// The first channel of its kernel started (host time the proxy saw it).
    Kernel(Key, u64),
    Done(Done),
}

/// Which collective: communicator (table index), function code, NCCL's per-function sequence
/// number on that communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub comm: u16,
    pub func: u8,
    pub seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Done {
    pub key: Key,
    pub count: u64,
    pub dtype: u8,
    pub algo: u8,
    pub proto: u8,
    pub channels: u8,
    /// Host times (ns, CLOCK_MONOTONIC): the call, the first channel's start as the proxy saw
    /// it (0: none seen), completion.
    pub t_call: u64,
    pub t_kernel: u64,
    pub t_end: u64,
    /// GPU globaltimer ns: earliest channel start, latest channel stop (0: none).
    pub gpu_start: u64,
    pub gpu_stop: u64,
    /// Completed by the sender's reaper (a later collective of its communicator finished while
    /// some of its channel events never came): its kernel times are partial or missing.
    pub partial: bool,
}

#[derive(Default)]
pub struct CommSlot {
    /// 0 free, 1 live, 2 finalized (the sender reports it one last time and frees it).
    pub state: AtomicU8,
    pub id: AtomicU64,
    pub rank: AtomicI32,
    pub nranks: AtomicI32,
    pub nnodes: AtomicI32,
    /// NCCL numbers a communicator's collectives but not its point-to-point operations: the
    /// plugin counts those itself, per function (`names::FUNCS` code), from 0 at `init`.
    pub p2p_seq: [AtomicU64; crate::names::FUNCS.len()],
}

impl CommSlot {
    /// The next sequence number of a point-to-point function on this communicator.
    pub fn next_p2p_seq(&self, func: u8) -> u64 {
        self.p2p_seq
            .get(func as usize)
            .map_or(0, |s| s.fetch_add(1, Ordering::Relaxed))
    }
}

pub const COMM_FREE: u8 = 0;
pub const COMM_LIVE: u8 = 1;
pub const COMM_FINAL: u8 = 2;

#[derive(Default)]
#[repr(C)]
pub struct ChanSlot {
    /// 0 idle, 1 started, 2 stopped.
    state: AtomicU8,
    gpu_stop: AtomicU64,
}

/// `repr(C)`: `chans` must come after the header, so no channel handle equals a slot's address.
#[repr(C)]
pub struct CollSlot {
    state: AtomicU8,
    comm: AtomicU32,
    func: AtomicU8,
    dtype: AtomicU8,
    algo: AtomicU8,
    proto: AtomicU8,
    nch: AtomicU8,
    seq: AtomicU64,
    count: AtomicU64,
    t_call: AtomicU64,
    t_kernel: AtomicU64,
    gpu_start: AtomicU64,
    gpu_stop: AtomicU64,
    ch_started: AtomicU32,
    ch_stopped: AtomicU32,
    coll_stopped: AtomicBool,
    completed: AtomicBool,
    chans: [ChanSlot; MAX_CHANNELS],
}

impl Default for CollSlot {
    fn default() -> Self {
        CollSlot {
            state: AtomicU8::new(FREE),
            comm: AtomicU32::new(0),
            func: AtomicU8::new(0),
            dtype: AtomicU8::new(0),
            algo: AtomicU8::new(0),
            proto: AtomicU8::new(0),
            nch: AtomicU8::new(0),
            seq: AtomicU64::new(0),
            count: AtomicU64::new(0),
            t_call: AtomicU64::new(0),
            t_kernel: AtomicU64::new(0),
            gpu_start: AtomicU64::new(u64::MAX),
            gpu_stop: AtomicU64::new(0),
            ch_started: AtomicU32::new(0),
            ch_stopped: AtomicU32::new(0),
            coll_stopped: AtomicBool::new(false),
            completed: AtomicBool::new(false),
            chans: std::array::from_fn(|_| ChanSlot::default()),
        }
    }
}

/// What a handle points at.
pub enum Handle<'a> {
    Coll(&'a CollSlot),
    Chan(&'a CollSlot, usize),
}

/// A collective as `startEvent` describes it.
pub struct CollStart {
    pub comm: u16,
    pub func: u8,
    pub seq: u64,
    pub count: u64,
    pub dtype: u8,
    pub algo: u8,
    pub proto: u8,
    pub nch: u8,
}

/// Counters the sender reports; all only grow.
#[derive(Default)]
pub struct Counters {
    /// Records that did not fit the queue, collectives or channels that found no slot.
    pub dropped: AtomicU64,
    /// Collectives that will never be reported (their `Done` was dropped or they had no slot).
    pub lost: AtomicU64,
    /// Calls that made no sense and were ignored: stop without start, a double stop, an unknown
    /// handle or context.
    pub bad: AtomicU64,
    /// Events of a type this plugin did not ask NCCL for (ignored): counted apart from `bad`
    /// because they say something about the NCCL, not about the calls' order.
    pub unrequested: AtomicU64,
}

pub struct Shared {
    pub comms: Box<[CommSlot]>,
    pub slots: Box<[CollSlot]>,
    pub ring: Ring<Rec>,
    pub counters: Counters,
    /// Set once ddptop is unreachable, refused us, or went away: every callback returns at once.
    pub disabled: AtomicBool,
    /// Whether NCCL was asked for KernelCh events (else a collective is done at its `Coll` stop).
    pub kernel_events: AtomicBool,
    cursor: AtomicU32,
}

impl Shared {
    pub fn new(slots: usize, queue: usize) -> Shared {
        Shared {
            comms: (0..MAX_COMMS).map(|_| CommSlot::default()).collect(),
            slots: (0..slots.max(1)).map(|_| CollSlot::default()).collect(),
            ring: Ring::new(queue),
            counters: Counters::default(),
            disabled: AtomicBool::new(false),
            kernel_events: AtomicBool::new(true),
            cursor: AtomicU32::new(0),
        }
    }

    fn push(&self, r: Rec) {
        if self.ring.push(r).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            if matches!(r, Rec::Done(_)) {
                self.counters.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Take a communicator slot; `None` when all are in use.
    pub fn open_comm(&self, id: u64, rank: i32, nranks: i32, nnodes: i32) -> Option<usize> {
        let i = self.comms.iter().position(|c| {
            c.state
                .compare_exchange(COMM_FREE, 9, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        let c = &self.comms[i];
        c.id.store(id, Ordering::Relaxed);
        c.rank.store(rank, Ordering::Relaxed);
        c.nranks.store(nranks, Ordering::Relaxed);
        c.nnodes.store(nnodes, Ordering::Relaxed);
        for s in &c.p2p_seq {
            s.store(0, Ordering::Relaxed);
        }
        c.state.store(COMM_LIVE, Ordering::Release);
        Some(i)
    }

    /// The communicator index of a `context` pointer we gave out, if it is one.
    pub fn comm_of(&self, p: *const u8) -> Option<usize> {
        let base = self.comms.as_ptr() as usize;
        let size = std::mem::size_of::<CommSlot>();
        let off = (p as usize).checked_sub(base)?;
        (off % size == 0 && off / size < self.comms.len()).then_some(off / size)
    }

    /// Resolve an event handle, if it is one of ours.
    pub fn handle(&self, p: *const u8) -> Option<Handle<'_>> {
        let base = self.slots.as_ptr() as usize;
        let size = std::mem::size_of::<CollSlot>();
        let off = (p as usize).checked_sub(base)?;
        let (i, within) = (off / size, off % size);
        let slot = self.slots.get(i)?;
        if within == 0 {
            return Some(Handle::Coll(slot));
        }
        let chans = std::mem::offset_of!(CollSlot, chans);
        let csize = std::mem::size_of::<ChanSlot>();
        let c = within.checked_sub(chans)?;
        (c % csize == 0 && c / csize < MAX_CHANNELS).then(|| Handle::Chan(slot, c / csize))
    }

    /// A collective started: a slot for it (its handle), or `None` (dropped and counted).
    pub fn start_coll(&self, s: &CollStart, now: u64) -> Option<&CollSlot> {
        let n = self.slots.len();
        let slot = (0..ALLOC_TRIES.min(n)).find_map(|_| {
            let i = self.cursor.fetch_add(1, Ordering::Relaxed) as usize % n;
            let slot = &self.slots[i];
            slot.state
                .compare_exchange(FREE, LIVE, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
                .then_some(slot)
        });
        let Some(slot) = slot else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            self.counters.lost.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        for c in &slot.chans[..(s.nch as usize).min(MAX_CHANNELS)] {
            c.state.store(0, Ordering::Relaxed);
            c.gpu_stop.store(0, Ordering::Relaxed);
        }
        slot.comm.store(s.comm as u32, Ordering::Relaxed);
        slot.func.store(s.func, Ordering::Relaxed);
        slot.dtype.store(s.dtype, Ordering::Relaxed);
        slot.algo.store(s.algo, Ordering::Relaxed);
        slot.proto.store(s.proto, Ordering::Relaxed);
        slot.nch.store(s.nch, Ordering::Relaxed);
        slot.seq.store(s.seq, Ordering::Relaxed);
        slot.count.store(s.count, Ordering::Relaxed);
        slot.t_call.store(now, Ordering::Relaxed);
        slot.t_kernel.store(0, Ordering::Relaxed);
        slot.gpu_start.store(u64::MAX, Ordering::Relaxed);
        slot.gpu_stop.store(0, Ordering::Relaxed);
        slot.ch_started.store(0, Ordering::Relaxed);
        slot.ch_stopped.store(0, Ordering::Relaxed);
        slot.completed.store(false, Ordering::Relaxed);
        slot.coll_stopped.store(false, Ordering::SeqCst);
        self.push(Rec::Start(
            key(slot),
            s.count.saturating_mul(crate::names::dtype_size(s.dtype)),
            now,
        ));
        Some(slot)
    }

    /// A channel of `slot`'s kernel started at GPU time `gpu`: its handle, or `None`.
    pub fn start_chan<'a>(
        &self,
        slot: &'a CollSlot,
        ch: usize,
        gpu: u64,
        now: u64,
    ) -> Option<&'a ChanSlot> {
        if slot.state.load(Ordering::Acquire) != LIVE || slot.completed.load(Ordering::Acquire) {
            self.counters.bad.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let Some(c) = slot.chans.get(ch) else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if c.state
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            self.counters.bad.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        slot.gpu_start.fetch_min(gpu, Ordering::Relaxed);
        if slot.ch_started.fetch_add(1, Ordering::AcqRel) == 0 {
            slot.t_kernel.store(now, Ordering::Relaxed);
            self.push(Rec::Kernel(key(slot), now));
        }
        Some(c)
    }

    /// `recordEventState(KernelChStop)`: the channel's GPU stop time.
    pub fn chan_stop_time(&self, slot: &CollSlot, ch: usize, gpu: u64) {
        match slot.chans.get(ch) {
            Some(c) if c.state.load(Ordering::Acquire) == 1 => {
                c.gpu_stop.store(gpu, Ordering::Relaxed);
                slot.gpu_stop.fetch_max(gpu, Ordering::Relaxed);
            }
            _ => {
                self.counters.bad.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn stop_chan(&self, slot: &CollSlot, ch: usize, now: u64) {
        let ok = slot.chans.get(ch).is_some_and(|c| {
            c.state
                .compare_exchange(1, 2, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if !ok {
            self.counters.bad.fetch_add(1, Ordering::Relaxed);
            return;
        }
        slot.ch_stopped.fetch_add(1, Ordering::SeqCst);
        self.maybe_complete(slot, now);
    }

    pub fn stop_coll(&self, slot: &CollSlot, now: u64) {
        if slot.state.load(Ordering::Acquire) != LIVE
            || slot.coll_stopped.swap(true, Ordering::SeqCst)
        {
            self.counters.bad.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.maybe_complete(slot, now);
    }

    /// Complete `slot` once its `Coll` event and all its expected channels have stopped. Both
    /// stops may race (user thread and proxy thread): the SeqCst counters let at least one of
    /// them see both, and `completed` lets only one of them report.
    fn maybe_complete(&self, slot: &CollSlot, now: u64) {
        if !slot.coll_stopped.load(Ordering::SeqCst) {
            return;
        }
        let want = if self.kernel_events.load(Ordering::Relaxed) {
            slot.nch.load(Ordering::Relaxed) as u32
        } else {
            0
        };
        if slot.ch_stopped.load(Ordering::SeqCst) < want {
            return;
        }
        self.complete(slot, now, false);
    }

    fn complete(&self, slot: &CollSlot, now: u64, partial: bool) {
        if slot.completed.swap(true, Ordering::AcqRel) {
            return;
        }
        let gs = slot.gpu_start.load(Ordering::Relaxed);
        let done = Done {
            key: key(slot),
            count: slot.count.load(Ordering::Relaxed),
            dtype: slot.dtype.load(Ordering::Relaxed),
            algo: slot.algo.load(Ordering::Relaxed),
            proto: slot.proto.load(Ordering::Relaxed),
            channels: slot.nch.load(Ordering::Relaxed),
            t_call: slot.t_call.load(Ordering::Relaxed),
            t_kernel: slot.t_kernel.load(Ordering::Relaxed),
            t_end: now,
            gpu_start: if gs == u64::MAX { 0 } else { gs },
            gpu_stop: slot.gpu_stop.load(Ordering::Relaxed),
            partial,
        };
        self.push(Rec::Done(done));
        slot.state.store(FREE, Ordering::Release);
    }

    /// The sender's sweep: a collective whose `Coll` event stopped but fewer of whose channels
    /// reported than it announced (`nChannels`) would hold its slot forever and look in flight.
    /// NCCL runs one communicator's collectives in order on its stream, so this one is over once
    /// a later one of the same communicator has completed (`done_after[comm]`: the latest call
    /// time of a completed one), or once a later one's kernel has started while none of this
    /// one's channels is still running. It is reported as `partial`.
    pub fn reap(&self, done_after: &[u64; MAX_COMMS], now: u64) -> usize {
        let mut kernel_after = [0u64; MAX_COMMS];
        for slot in self.slots.iter() {
            if slot.state.load(Ordering::Acquire) == LIVE
                && slot.ch_started.load(Ordering::Acquire) > 0
                && let Some(k) = kernel_after.get_mut(slot.comm.load(Ordering::Relaxed) as usize)
            {
                *k = (*k).max(slot.t_call.load(Ordering::Relaxed));
            }
        }
        let mut n = 0;
        for slot in self.slots.iter() {
            if slot.state.load(Ordering::Acquire) != LIVE
                || !slot.coll_stopped.load(Ordering::SeqCst)
                || slot.completed.load(Ordering::Acquire)
            {
                continue;
            }
            let comm = slot.comm.load(Ordering::Relaxed) as usize;
            let t = slot.t_call.load(Ordering::Relaxed);
            let idle =
                slot.ch_started.load(Ordering::SeqCst) == slot.ch_stopped.load(Ordering::SeqCst);
            let later_done = done_after.get(comm).is_some_and(|&d| t < d);
            let later_kernel = idle && kernel_after.get(comm).is_some_and(|&k| t < k);
            if later_done || later_kernel {
                self.complete(slot, now, true);
                n += 1;
            }
        }
        n
    }

    /// Slots in use (for tests and the final report).
    pub fn live(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state.load(Ordering::Relaxed) == LIVE)
            .count()
    }
}

fn key(slot: &CollSlot) -> Key {
    Key {
        comm: slot.comm.load(Ordering::Relaxed) as u16,
        func: slot.func.load(Ordering::Relaxed),
        seq: slot.seq.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(seq: u64, nch: u8) -> CollStart {
        CollStart {
            comm: 0,
            func: 1,
            seq,
            count: 256,
            dtype: 8,
            algo: 2,
            proto: 3,
            nch,
        }
    }

    fn drain(s: &Shared) -> Vec<Rec> {
        std::iter::from_fn(|| s.ring.pop()).collect()
    }

    #[test]
    fn a_collective_completes_after_its_coll_stop_and_every_channel() {
        let s = Shared::new(4, 64);
        let slot = s.start_coll(&start(7, 2), 100).unwrap();
        let h = slot as *const CollSlot as *const u8;
        assert!(matches!(s.handle(h), Some(Handle::Coll(_))));
        s.stop_coll(slot, 110);
        let c0 = s.start_chan(slot, 0, 5_000, 120).unwrap();
        let c1 = s.start_chan(slot, 1, 5_010, 121).unwrap();
        assert!(matches!(
            s.handle(c1 as *const ChanSlot as *const u8),
            Some(Handle::Chan(_, 1))
        ));
        assert!(matches!(
            s.handle(c0 as *const ChanSlot as *const u8),
            Some(Handle::Chan(_, 0))
        ));
        s.chan_stop_time(slot, 0, 6_000);
        s.stop_chan(slot, 0, 130);
        assert_eq!(s.live(), 1, "one channel still running");
        s.chan_stop_time(slot, 1, 6_500);
        s.stop_chan(slot, 1, 140);
        assert_eq!(s.live(), 0);
        let recs = drain(&s);
        let k = Key {
            comm: 0,
            func: 1,
            seq: 7,
        };
        assert_eq!(recs[0], Rec::Start(k, 1024, 100), "256 float32");
        assert_eq!(recs[1], Rec::Kernel(k, 120));
        let Rec::Done(d) = recs[2] else {
            panic!("{recs:?}")
        };
        assert_eq!(
            (d.gpu_start, d.gpu_stop, d.t_kernel, d.t_end, d.partial),
            (5_000, 6_500, 120, 140, false)
        );
        // A second stop of either is counted and changes nothing.
        s.stop_coll(slot, 150);
        s.stop_chan(slot, 1, 150);
        assert_eq!(s.counters.bad.load(Ordering::Relaxed), 2);
        assert!(drain(&s).is_empty());
    }

    #[test]
    fn foreign_pointers_are_not_handles() {
        let s = Shared::new(2, 8);
        let x = 5u64;
        assert!(s.handle(&x as *const u64 as *const u8).is_none());
        assert!(s.handle(std::ptr::null()).is_none());
        let inside = (s.slots.as_ptr() as *const u8).wrapping_add(3);
        assert!(
            s.handle(inside).is_none(),
            "a pointer into the middle of a slot"
        );
        assert!(s.comm_of(std::ptr::null()).is_none());
    }

    #[test]
    fn a_full_pool_and_a_full_queue_are_counted() {
        let s = Shared::new(2, 2);
        let a = s.start_coll(&start(1, 0), 1).unwrap();
        let _b = s.start_coll(&start(2, 0), 2).unwrap();
        assert!(s.start_coll(&start(3, 0), 3).is_none());
        assert_eq!(s.counters.lost.load(Ordering::Relaxed), 1);
        // The queue holds the two starts; the Done of `a` finds it full.
        s.stop_coll(a, 4);
        assert_eq!(s.counters.dropped.load(Ordering::Relaxed), 2);
        assert_eq!(s.counters.lost.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_reaper_ends_a_collective_whose_channels_never_came() {
        let s = Shared::new(4, 64);
        let old = s.start_coll(&start(1, 2), 10).unwrap();
        s.stop_coll(old, 11);
        let mut after = [0u64; MAX_COMMS];
        assert_eq!(s.reap(&after, 20), 0, "nothing later has completed");
        after[0] = 15;
        assert_eq!(s.reap(&after, 20), 1);
        let Some(Rec::Done(d)) = drain(&s).pop() else {
            panic!()
        };
        assert!(d.partial && d.gpu_start == 0);
    }

    #[test]
    fn a_later_kernel_ends_a_collective_with_fewer_channels_than_announced() {
        let s = Shared::new(4, 64);
        let none = [0u64; MAX_COMMS];
        // Announced 4 channels, ran 1.
        let a = s.start_coll(&start(1, 4), 10).unwrap();
        s.stop_coll(a, 11);
        s.start_chan(a, 0, 100, 12).unwrap();
        assert_eq!(s.reap(&none, 13), 0, "nothing later yet");
        s.chan_stop_time(a, 0, 150);
        s.stop_chan(a, 0, 14);
        let b = s.start_coll(&start(2, 4), 20).unwrap();
        s.stop_coll(b, 21);
        assert_eq!(
            s.reap(&none, 22),
            0,
            "the later one's kernel has not started"
        );
        s.start_chan(b, 0, 200, 23).unwrap();
        assert_eq!(s.reap(&none, 24), 1);
        let done: Vec<Done> = drain(&s)
            .into_iter()
            .filter_map(|r| if let Rec::Done(d) = r { Some(d) } else { None })
            .collect();
        assert_eq!(done.len(), 1);
        assert_eq!(
            (
                done[0].key.seq,
                done[0].gpu_start,
                done[0].gpu_stop,
                done[0].partial
            ),
            (1, 100, 150, true)
        );
        // A channel still running is never cut short by a later kernel.
        let c = s.start_coll(&start(3, 1), 30).unwrap();
        s.start_chan(c, 0, 300, 31).unwrap();
        assert_eq!(s.reap(&none, 32), 0, "b's channel 0 is still running");
    }
}
