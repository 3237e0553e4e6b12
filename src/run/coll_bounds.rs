//! Bounds on what a run keeps of NCCL profiler messages (docs/protocol.md "Bounds on NCCL
//! evidence"). Anything holding the run's token can send `nccl` lines, and every function name,
//! algorithm/protocol pair, size class and communicator in them used to become a map key kept
//! for the run's life, cloned into every step mark and stored with the run: 100 lines of 5,000
//! made-up names grew ddptop by 125 MiB and made `show` of that run take 6 s. Here a run admits
//! a fixed number of distinct keys; a record that would need one more is counted, never kept.
//! Data and pure bookkeeping only; `app::collectives` asks before it keeps anything.

use std::collections::BTreeSet;

/// Distinct keys per run, all ranks together: function names, algorithm/protocol pairs and
/// (function, size class) pairs, each kind with a share of its own so that a flood of one kind
/// cannot crowd out the others. NCCL has 13 functions, 8 × 4 algorithm/protocol names and ~40
/// size classes a function can fall in; a real run uses a few dozen keys.
pub const MAX_FUNCS: usize = 64;
pub const MAX_ALGOS: usize = 64;
pub const MAX_SIZES: usize = 128;
pub const MAX_KEYS: usize = MAX_FUNCS + MAX_ALGOS + MAX_SIZES;
/// Communicators kept per process rank (the plugin itself profiles at most 64 at once; a rank
/// of a DDP or FSDP job has a handful, a JAX process one per device it drives).
pub const MAX_COMMS_PER_RANK: usize = 32;
/// In-flight collectives kept per communicator: as many as the plugin lists in one message, so
/// only a made-up message loses any (the oldest are kept: they are the stuck ones).
pub const MAX_INFLIGHT: usize = 256;

/// One key a record needs before it may be kept.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key<'a> {
    Func(&'a str),
    Algo(&'a str, &'a str),
    Size(&'a str, u32),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Owned {
    Func(String),
    Algo(String, String),
    Size(String, u32),
}

impl Key<'_> {
    /// The share of the budget this kind of key draws on.
    fn kind(&self) -> usize {
        match self {
            Key::Func(_) => 0,
            Key::Algo(..) => 1,
            Key::Size(..) => 2,
        }
    }

    fn owned(&self) -> Owned {
        match *self {
            Key::Func(f) => Owned::Func(f.into()),
            Key::Algo(a, p) => Owned::Algo(a.into(), p.into()),
            Key::Size(f, c) => Owned::Size(f.into(), c),
        }
    }
}

/// Records of `nccl` messages not kept, by the cap they ran into. A record is one entry of a
/// message: a listed collective, an in-flight one, a `funcs` sum, a `last_done` entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OverCap {
    /// Needed a key beyond [`MAX_KEYS`].
    pub keys: u64,
    /// Came on a communicator beyond [`MAX_COMMS_PER_RANK`] of its rank.
    pub comms: u64,
    /// In-flight entries beyond [`MAX_INFLIGHT`] of one message.
    pub inflight: u64,
}

impl OverCap {
    pub fn total(&self) -> u64 {
        self.keys + self.comms + self.inflight
    }

    /// What the user is told: `3,412 collective records dropped: over the 256-key cap`, one
    /// clause per cap that was hit; `None` when nothing was dropped.
    pub fn note(&self) -> Option<String> {
        let parts: Vec<String> = [
            (self.keys, format!("over the {MAX_KEYS}-key cap")),
            (
                self.comms,
                format!("over the {MAX_COMMS_PER_RANK}-communicator cap per rank"),
            ),
            (
                self.inflight,
                format!("over the {MAX_INFLIGHT} in-flight cap per communicator"),
            ),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, why)| format!("{} {why}", thousands(n)))
        .collect();
        // With one cap hit its count is the total's: said once.
        let parts: Vec<String> = match parts.as_slice() {
            [one] => vec![one.split_once(' ').map_or(one.clone(), |x| x.1.to_string())],
            _ => parts,
        };
        (!parts.is_empty()).then(|| {
            format!(
                "{} collective records dropped: {}",
                thousands(self.total()),
                parts.join(", ")
            )
        })
    }
}

/// `3412` → `3,412`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The run's admitted keys and what was refused.
#[derive(Debug, Clone, Default)]
pub struct KeyBudget {
    keys: BTreeSet<Owned>,
    /// Keys admitted per kind (`Key::kind`).
    used: [usize; 3],
}

const SHARES: [usize; 3] = [MAX_FUNCS, MAX_ALGOS, MAX_SIZES];

impl KeyBudget {
    /// Whether every one of `keys` is admitted: each is already known or takes a free place
    /// in its kind's share. All or nothing: a refused record takes no place (the caller counts
    /// the record it drops).
    pub fn admit(&mut self, keys: &[Key<'_>]) -> bool {
        let mut fresh: Vec<(usize, Owned)> = Vec::new();
        let mut need = [0usize; 3];
        for k in keys {
            let o = k.owned();
            if !self.keys.contains(&o) && !fresh.iter().any(|(_, f)| *f == o) {
                need[k.kind()] += 1;
                fresh.push((k.kind(), o));
            }
        }
        if (0..3).any(|i| self.used[i] + need[i] > SHARES[i]) {
            return false;
        }
        for (kind, o) in fresh {
            self.used[kind] += 1;
            self.keys.insert(o);
        }
        true
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_past_the_cap_are_refused_and_known_ones_still_pass() {
        let mut b = KeyBudget::default();
        let names: Vec<String> = (0..MAX_KEYS + 100).map(|i| format!("f{i}")).collect();
        let admitted = names.iter().filter(|n| b.admit(&[Key::Func(n)])).count();
        assert_eq!(admitted, MAX_FUNCS, "the cap holds");
        assert_eq!(b.len(), MAX_FUNCS);
        // A name admitted before the share filled keeps passing; a new one fails, and so does
        // a record needing one.
        assert!(b.admit(&[Key::Func("f0")]));
        assert!(!b.admit(&[Key::Func("new")]));
        assert!(!b.admit(&[Key::Func("new"), Key::Size("f0", 20)]));
        // The other kinds keep their own shares: a flood of names does not crowd them out.
        assert!(b.admit(&[Key::Algo("ring", "simple")]));
        let sizes = (0..200)
            .filter(|c| b.admit(&[Key::Func("f1"), Key::Size("f1", *c)]))
            .count();
        assert_eq!(sizes, MAX_SIZES);
        let algos = (0..200)
            .map(|i| format!("a{i}"))
            .filter(|a| b.admit(&[Key::Algo(a, "ll")]))
            .count();
        assert_eq!(algos, MAX_ALGOS - 1);
        assert_eq!(b.len(), MAX_KEYS);
    }

    #[test]
    fn the_note_says_how_many_and_which_cap() {
        assert_eq!(OverCap::default().note(), None);
        let o = OverCap {
            keys: 3412,
            ..OverCap::default()
        };
        assert_eq!(
            o.note().unwrap(),
            "3,412 collective records dropped: over the 256-key cap"
        );
        let o = OverCap {
            keys: 2,
            comms: 1000,
            inflight: 0,
        };
        assert_eq!(
            o.note().unwrap(),
            "1,002 collective records dropped: 2 over the 256-key cap, 1,000 over the 32-communicator cap per rank"
        );
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }
}
