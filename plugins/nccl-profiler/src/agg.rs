//! The sender thread's view of each communicator, built from the queue's records, and the `nccl`
//! protocol message made from it (docs/protocol.md). Aggregated per collective, never per channel:
//! a collective's channels are folded into one kernel span (earliest GPU start, latest GPU stop).
//! Allocation is fine here: this runs on the plugin's own thread, never on NCCL's.

use crate::names;
use crate::pool::{Done, Key, MAX_COMMS, Rec};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Collectives listed one by one per message; beyond that they are only counted (`more`) and
/// summed per function (`funcs`), so nothing is lost from the counts.
pub const MAX_LISTED: usize = 256;
/// In-flight collectives remembered per communicator (their `Done` may have been dropped).
const MAX_INFLIGHT: usize = 1024;
/// While nothing changes but something is in flight, the in-flight list is resent this often
/// (ns), so ddptop sees a stuck collective age.
const INFLIGHT_RESEND_NS: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy)]
struct Flight {
    bytes: u64,
    t_call: u64,
    kernel: bool,
}

#[derive(Debug, Default, Clone, Copy)]
struct FuncSum {
    count: u64,
    bytes: u64,
    kernel_ns: u64,
}

/// One communicator's state.
#[derive(Debug, Default)]
pub struct CommAgg {
    inflight: BTreeMap<Key, Flight>,
    last_done: BTreeMap<u8, u64>,
    listed: Vec<Done>,
    more: u64,
    funcs: BTreeMap<u8, FuncSum>,
    changed: bool,
    last_sent: Option<u64>,
    /// Call time of the latest completed collective (for the pool's reaper).
    pub latest_done_call: u64,
}

/// What the message says about the communicator itself.
#[derive(Debug, Clone, Copy)]
pub struct CommInfo {
    pub id: u64,
    pub rank: i32,
    pub nranks: i32,
    pub nnodes: i32,
}

/// Counters of the whole process, as in every message.
#[derive(Debug, Clone, Copy, Default)]
pub struct Loss {
    pub dropped: u64,
    pub lost: u64,
    pub bad: u64,
    pub unrequested: u64,
    pub evicted: u64,
}

/// All communicators.
pub struct Agg {
    pub comms: Vec<CommAgg>,
    /// In-flight entries forgotten to keep each communicator's list bounded (their `Done`, if
    /// it comes, is still counted); the sender adds it to the process's `evicted`.
    pub evicted: u64,
}

impl Default for Agg {
    fn default() -> Self {
        Agg {
            comms: (0..MAX_COMMS).map(|_| CommAgg::default()).collect(),
            evicted: 0,
        }
    }
}

impl Agg {
    pub fn ingest(&mut self, r: Rec) {
        let comm = match r {
            Rec::Start(k, ..) | Rec::Kernel(k, _) => k.comm,
            Rec::Done(d) => d.key.comm,
        };
        let evicted = &mut self.evicted;
        let Some(c) = self.comms.get_mut(comm as usize) else {
            return;
        };
        c.changed = true;
        match r {
            Rec::Start(k, bytes, t) => {
                if c.inflight.len() >= MAX_INFLIGHT {
                    c.inflight.pop_first();
                    *evicted += 1;
                }
                c.inflight.insert(
                    k,
                    Flight {
                        bytes,
                        t_call: t,
                        kernel: false,
                    },
                );
            }
            Rec::Kernel(k, _) => {
                if let Some(f) = c.inflight.get_mut(&k) {
                    f.kernel = true;
                }
            }
            Rec::Done(d) => {
                c.inflight.remove(&d.key);
                // One communicator's collectives run in order: whatever was called before this
                // one is no longer running, even if its own Done was lost.
                c.inflight.retain(|_, f| f.t_call >= d.t_call);
                let last = c.last_done.entry(d.key.func).or_insert(d.key.seq);
                *last = (*last).max(d.key.seq);
                c.latest_done_call = c.latest_done_call.max(d.t_call);
                let s = c.funcs.entry(d.key.func).or_default();
                s.count += 1;
                s.bytes += d.count.saturating_mul(names::dtype_size(d.dtype));
                s.kernel_ns += kernel_ns(&d).unwrap_or(0);
                if c.listed.len() < MAX_LISTED {
                    c.listed.push(d);
                } else {
                    c.more += 1;
                }
            }
        }
    }

    /// Completed collectives of communicator `i` not yet in a message.
    pub fn completed(&self, i: usize) -> u64 {
        self.comms
            .get(i)
            .map_or(0, |c| c.funcs.values().map(|f| f.count).sum())
    }

    /// The latest completed call time per communicator, for [`crate::pool::Shared::reap`].
    pub fn done_after(&self) -> [u64; MAX_COMMS] {
        std::array::from_fn(|i| self.comms[i].latest_done_call)
    }

    /// The message for communicator `i` if it has anything to say (news, a stuck collective
    /// due a resend, or its end), and resets its per-batch part.
    #[allow(clippy::too_many_arguments)]
    pub fn message(
        &mut self,
        i: usize,
        info: CommInfo,
        rank: u32,
        now: u64,
        loss: Loss,
        last: bool,
    ) -> Option<String> {
        let c = self.comms.get_mut(i)?;
        let due = !c.inflight.is_empty()
            && c.last_sent
                .is_none_or(|t| now.saturating_sub(t) >= INFLIGHT_RESEND_NS);
        if !(c.changed || due || last) {
            return None;
        }
        let mut m = String::with_capacity(256 + 200 * c.listed.len());
        let _ = write!(
            m,
            r#"{{"v":1,"type":"nccl","rank":{rank},"t":{},"comm":"{:016x}","comm_rank":{},"nranks":{},"nnodes":{},"last_done":{{"#,
            secs(now),
            info.id,
            info.rank.max(0),
            info.nranks.max(0),
            info.nnodes.max(0)
        );
        for (n, (f, seq)) in c.last_done.iter().enumerate() {
            let sep = if n > 0 { "," } else { "" };
            let _ = write!(m, r#"{sep}"{}":{seq}"#, names::func_name(*f));
        }
        m.push_str(r#"},"inflight":["#);
        for (n, (k, f)) in c.inflight.iter().take(MAX_LISTED).enumerate() {
            let sep = if n > 0 { "," } else { "" };
            let _ = write!(
                m,
                r#"{sep}{{"func":"{}","seq":{},"bytes":{},"t_call":{},"age_s":{},"kernel":{}}}"#,
                names::func_name(k.func),
                k.seq,
                f.bytes,
                secs(f.t_call),
                secs(now.saturating_sub(f.t_call)),
                f.kernel
            );
        }
        m.push_str(r#"],"colls":["#);
        for (n, d) in c.listed.iter().enumerate() {
            let sep = if n > 0 { "," } else { "" };
            let _ = write!(
                m,
                r#"{sep}{{"func":"{}","seq":{},"count":{},"bytes":{},"dtype":"{}","algo":"{}","proto":"{}","channels":{},"t_call":{},"t_kernel":{},"t_end":{},"kernel_us":{}"#,
                names::func_name(d.key.func),
                d.key.seq,
                d.count,
                d.count.saturating_mul(names::dtype_size(d.dtype)),
                names::dtype_name(d.dtype),
                names::algo_name(d.algo),
                names::proto_name(d.proto),
                d.channels,
                secs(d.t_call),
                opt_secs(d.t_kernel),
                secs(d.t_end),
                kernel_ns(d).map_or("null".to_string(), |ns| format!("{:.3}", ns as f64 / 1e3)),
            );
            if d.partial {
                m.push_str(r#","partial":true"#);
            }
            m.push('}');
        }
        let _ = write!(m, r#"],"more":{},"funcs":{{"#, c.more);
        for (n, (f, s)) in c.funcs.iter().enumerate() {
            let sep = if n > 0 { "," } else { "" };
            let _ = write!(
                m,
                r#"{sep}"{}":{{"count":{},"bytes":{},"kernel_us":{:.3}}}"#,
                names::func_name(*f),
                s.count,
                s.bytes,
                s.kernel_ns as f64 / 1e3
            );
        }
        let _ = write!(
            m,
            r#"}},"dropped":{},"lost":{},"bad":{},"unrequested":{},"evicted":{},"final":{last}}}"#,
            loss.dropped, loss.lost, loss.bad, loss.unrequested, loss.evicted
        );
        c.listed.clear();
        c.funcs.clear();
        c.more = 0;
        c.changed = false;
        c.last_sent = Some(now);
        if last {
            *c = CommAgg::default();
        }
        Some(m)
    }
}

/// A collective's kernel time: latest channel stop − earliest channel start, GPU clock.
fn kernel_ns(d: &Done) -> Option<u64> {
    (d.gpu_start > 0 && d.gpu_stop >= d.gpu_start).then(|| d.gpu_stop - d.gpu_start)
}

fn secs(ns: u64) -> String {
    format!("{:.6}", ns as f64 / 1e9)
}

fn opt_secs(ns: u64) -> String {
    if ns == 0 { "null".into() } else { secs(ns) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(seq: u64, t_call: u64, gpu: (u64, u64)) -> Done {
        Done {
            key: Key {
                comm: 0,
                func: 1,
                seq,
            },
            count: 1000,
            dtype: 8,
            algo: 2,
            proto: 3,
            channels: 2,
            t_call,
            t_kernel: t_call + 10,
            t_end: t_call + 100,
            gpu_start: gpu.0,
            gpu_stop: gpu.1,
            partial: false,
        }
    }

    const INFO: CommInfo = CommInfo {
        id: 0xabc,
        rank: 1,
        nranks: 2,
        nnodes: 1,
    };

    #[test]
    fn one_entry_per_collective_with_its_kernel_span_and_the_in_flight_one() {
        let mut a = Agg::default();
        let k = |seq| Key {
            comm: 0,
            func: 1,
            seq,
        };
        a.ingest(Rec::Start(k(1), 4000, 1_000_000_000));
        a.ingest(Rec::Kernel(k(1), 1_000_000_010));
        a.ingest(Rec::Done(done(1, 1_000_000_000, (5_000, 85_000))));
        a.ingest(Rec::Start(k(2), 4000, 2_000_000_000));
        let m = a
            .message(0, INFO, 3, 2_500_000_000, Loss::default(), false)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&m).unwrap();
        assert_eq!(v["type"], "nccl");
        assert_eq!(v["rank"], 3);
        assert_eq!(v["comm"], "0000000000000abc");
        assert_eq!(v["last_done"]["all_reduce"], 1);
        assert_eq!(v["colls"].as_array().unwrap().len(), 1);
        assert_eq!(v["colls"][0]["kernel_us"], 80.0);
        assert_eq!(v["colls"][0]["bytes"], 4000);
        assert_eq!(v["colls"][0]["algo"], "ring");
        assert_eq!(v["inflight"][0]["seq"], 2);
        assert_eq!(v["inflight"][0]["age_s"], 0.5);
        assert_eq!(v["inflight"][0]["kernel"], false);
        assert_eq!(v["funcs"]["all_reduce"]["count"], 1);
        // Nothing new and the in-flight one was just sent: no message until the resend is due.
        assert!(
            a.message(0, INFO, 3, 2_600_000_000, Loss::default(), false)
                .is_none()
        );
        let m = a
            .message(0, INFO, 3, 3_600_000_000, Loss::default(), false)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&m).unwrap();
        assert_eq!(v["colls"].as_array().unwrap().len(), 0);
        assert_eq!(v["inflight"][0]["age_s"], 1.6);
    }

    #[test]
    fn beyond_the_listed_ones_collectives_are_counted_not_lost() {
        let mut a = Agg::default();
        for s in 0..(MAX_LISTED as u64 + 10) {
            a.ingest(Rec::Done(done(s, s * 1000 + 1, (0, 0))));
        }
        let m = a
            .message(
                0,
                INFO,
                0,
                1_000_000_000,
                Loss {
                    dropped: 4,
                    lost: 1,
                    bad: 2,
                    unrequested: 3,
                    evicted: 5,
                },
                true,
            )
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&m).unwrap();
        assert_eq!(v["colls"].as_array().unwrap().len(), MAX_LISTED);
        assert_eq!(v["more"], 10);
        assert_eq!(v["funcs"]["all_reduce"]["count"], MAX_LISTED as u64 + 10);
        assert_eq!(v["colls"][0]["kernel_us"], serde_json::Value::Null);
        assert_eq!(
            (
                v["dropped"].as_u64(),
                v["lost"].as_u64(),
                v["final"].as_bool()
            ),
            (Some(4), Some(1), Some(true))
        );
        assert_eq!(
            (
                v["bad"].as_u64(),
                v["unrequested"].as_u64(),
                v["evicted"].as_u64()
            ),
            (Some(2), Some(3), Some(5)),
            "each counter in its own field"
        );
    }

    #[test]
    fn in_flight_entries_past_the_bound_are_evicted_and_counted() {
        let mut a = Agg::default();
        for seq in 0..(MAX_INFLIGHT as u64 + 3) {
            let k = Key {
                comm: 0,
                func: 1,
                seq,
            };
            a.ingest(Rec::Start(k, 8, seq + 1));
        }
        assert_eq!(a.comms[0].inflight.len(), MAX_INFLIGHT);
        assert_eq!(a.evicted, 3);
    }

    #[test]
    fn a_done_clears_older_in_flight_entries_whose_done_was_lost() {
        let mut a = Agg::default();
        let k = |seq| Key {
            comm: 0,
            func: 1,
            seq,
        };
        a.ingest(Rec::Start(k(1), 8, 10));
        a.ingest(Rec::Start(k(2), 8, 20));
        a.ingest(Rec::Done(done(2, 20, (0, 0))));
        assert!(a.comms[0].inflight.is_empty());
        assert_eq!(a.done_after()[0], 20);
    }
}
