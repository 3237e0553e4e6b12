//! Fault injection for ddptop's fault matrix, as in workers/ddptop_worker/faults.py:
//! `DDPTOP_INJECT=KIND:STEP`, applied on the last rank (replica k-1) at the first step >= STEP.
//!
//!   crash   exit at once with code 3 (no cleanup, no bye)
//!   raise   fail with "RuntimeError: injected exception at step N" reported by rank k-1
//!   hang    stop making progress; heartbeats keep going (alive but stuck)
//!   silent  stop making progress, and rank k-1 stops its heartbeats too
//!
//! One process drives every replica, so a stuck replica stalls them all, just as DDP's other
//! ranks block in their next all-reduce.

use crate::client::Client;

pub const KINDS: [&str; 4] = ["crash", "raise", "hang", "silent"];
pub const CRASH_EXIT_CODE: i32 = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: String,
    pub step: u64,
}

/// A replica's own failure, to be reported on that rank's connection.
#[derive(Debug)]
pub struct RankError {
    pub rank: usize,
    pub msg: String,
}

impl std::fmt::Display for RankError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.msg)
    }
}

impl std::error::Error for RankError {}

impl Fault {
    pub fn parse(spec: &str) -> Result<Option<Fault>, String> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Ok(None);
        }
        let (kind, step) = spec.split_once(':').unwrap_or((spec, ""));
        match step.parse::<u64>() {
            // Digits only, like Python's str.isdigit() in faults.py (no sign).
            Ok(n) if KINDS.contains(&kind) && step.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(Some(Fault {
                    kind: kind.into(),
                    step: n,
                }))
            }
            _ => Err(format!(
                "DDPTOP_INJECT={spec:?}: expected one of {} as KIND:STEP",
                KINDS.join(", ")
            )),
        }
    }

    pub fn from_env() -> Result<Option<Fault>, String> {
        Self::parse(&std::env::var("DDPTOP_INJECT").unwrap_or_default())
    }

    pub fn due(&self, step: u64) -> bool {
        step >= self.step
    }

    /// Apply the fault on `rank`; only `raise` returns (with the error to report).
    pub fn fire(&self, client: &Client, rank: usize) -> RankError {
        client.log(
            rank,
            "warn",
            &format!("injected fault {}:{}", self.kind, self.step),
        );
        match self.kind.as_str() {
            "crash" => {
                // SAFETY: an immediate exit without cleanup is the fault being injected.
                unsafe { libc::_exit(CRASH_EXIT_CODE) }
            }
            "raise" => {
                return RankError {
                    rank,
                    msg: format!("RuntimeError: injected exception at step {}", self.step),
                };
            }
            "silent" => client.silence(rank),
            _ => {}
        }
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_the_python_workers() {
        assert_eq!(Fault::parse("").unwrap(), None);
        assert_eq!(
            Fault::parse("hang:5").unwrap(),
            Some(Fault {
                kind: "hang".into(),
                step: 5
            })
        );
        for bad in ["explode:3", "hang", "hang:x", "hang:-1", "hang:+1", ":4"] {
            let e = Fault::parse(bad).unwrap_err();
            assert!(e.contains("KIND:STEP"), "{bad}: {e}");
        }
    }
}
