//! A bounded multi-producer queue of fixed-size records (Dmitry Vyukov's bounded MPMC array
//! queue): NCCL's user threads and its proxy thread push, the sender thread pops. No lock, no
//! allocation after construction; a push into a full queue fails at once (the caller counts it
//! as dropped) instead of waiting.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Cell<T> {
    seq: AtomicUsize,
    val: UnsafeCell<MaybeUninit<T>>,
}

pub struct Ring<T> {
    cells: Box<[Cell<T>]>,
    mask: usize,
    head: AtomicUsize,
    tail: AtomicUsize,
}

// Each cell's value is handed from exactly one producer to exactly one consumer through its
// `seq` (release on publish, acquire on take).
unsafe impl<T: Send> Sync for Ring<T> {}
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// A queue of `capacity` records, rounded up to a power of two (at least 2).
    pub fn new(capacity: usize) -> Self {
        let cap = capacity.max(2).next_power_of_two();
        let cells = (0..cap)
            .map(|i| Cell {
                seq: AtomicUsize::new(i),
                val: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Ring {
            cells,
            mask: cap - 1,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Push, or give the record back when the queue is full.
    pub fn push(&self, v: T) -> Result<(), T> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as isize - pos as isize;
            if diff == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the CAS on `tail` at `pos` gives this thread the cell
                        // until it publishes `seq = pos + 1`.
                        unsafe { (*cell.val.get()).write(v) };
                        cell.seq.store(pos + 1, Ordering::Release);
                        return Ok(());
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return Err(v);
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Pop the oldest record, if any.
    pub fn pop(&self) -> Option<T> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as isize - (pos + 1) as isize;
            if diff == 0 {
                match self.head.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the producer published this cell (`seq == pos + 1`) and the
                        // CAS on `head` makes this thread its only reader.
                        let v = unsafe { (*cell.val.get()).assume_init() };
                        cell.seq.store(pos + self.mask + 1, Ordering::Release);
                        return Some(v);
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return None;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn fifo_bounded_and_full_pushes_fail() {
        let r = Ring::new(3);
        assert_eq!(r.capacity(), 4);
        for i in 0..4 {
            r.push(i).unwrap();
        }
        assert_eq!(r.push(9), Err(9));
        assert_eq!(r.pop(), Some(0));
        r.push(4).unwrap();
        assert_eq!(
            (1..=4).map(|_| r.pop().unwrap()).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        assert_eq!(r.pop(), None);
    }

    #[test]
    fn many_producers_lose_nothing_that_was_accepted() {
        let r = Arc::new(Ring::<u64>::new(1024));
        let accepted: Vec<_> = (0..4u64)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    let mut ok = Vec::new();
                    for i in 0..5000u64 {
                        let v = t * 1_000_000 + i;
                        if r.push(v).is_ok() {
                            ok.push(v);
                        }
                    }
                    ok
                })
            })
            .collect();
        let mut got = Vec::new();
        let mut want: Vec<u64> = Vec::new();
        let mut live = accepted;
        while !live.is_empty() {
            while let Some(v) = r.pop() {
                got.push(v);
            }
            let (done, rest): (Vec<_>, Vec<_>) = live.into_iter().partition(|h| h.is_finished());
            for h in done {
                want.extend(h.join().unwrap());
            }
            live = rest;
        }
        while let Some(v) = r.pop() {
            got.push(v);
        }
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
    }
}
