//! What an admitted worker connection does with each line it reads, wherever it is read (the
//! paced reader thread for Unix and plain TCP connections, a tokio task for TLS ones): parse and
//! validate it, check that it speaks for the connection's own rank, and count the bad ones
//! with the last reason, replying to the first few.

use super::{Received, SupEvent};
use crate::protocol::{ControlMsg, ErrorCode, ReadOutcome, WorkerMsg, parse_worker};

/// Error replies per connection: a worker that sends garbage in a loop gets the first few
/// explanations, then only the count.
pub(crate) const MAX_ERROR_REPLIES: u64 = 16;

/// Bad lines are reported to the engine at the latest every this many.
const BAD_REPORT_EVERY: u64 = 1024;

/// The line-level state of one admitted connection.
pub(crate) struct LineCheck {
    pub run: String,
    pub rank: u32,
    bad: u64,
    pending_bad: u64,
    last_error: String,
}

/// What to do with one outcome of the line reader.
// Returned and matched at once, never stored: boxing the kept message would allocate per line.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Verdict {
    /// A valid message of this rank.
    Keep(Received),
    /// Dropped; the connection goes on. `Some`: the error to write back.
    Drop(Option<ControlMsg>),
    /// Dropped, and the connection closes (after writing the error back, if any).
    Close(Option<ControlMsg>),
}

impl LineCheck {
    pub fn new(run: String, rank: u32) -> LineCheck {
        LineCheck {
            run,
            rank,
            bad: 0,
            pending_bad: 0,
            last_error: String::new(),
        }
    }

    pub fn judge(&mut self, outcome: ReadOutcome) -> Verdict {
        let line = match outcome {
            ReadOutcome::Line(l) => l,
            ReadOutcome::TooLong => {
                self.count_bad("line over 1 MiB".into());
                return Verdict::Close(Some(reject(
                    ErrorCode::LineTooLong,
                    "line over 1 MiB; closing".into(),
                )));
            }
            ReadOutcome::BadUtf8 => {
                self.count_bad("invalid UTF-8".into());
                return Verdict::Close(None);
            }
            ReadOutcome::Eof => return Verdict::Close(None),
        };
        let detail = match parse_worker(&line) {
            Ok(msg) if msg.rank() == self.rank && !matches!(msg, WorkerMsg::Hello(_)) => {
                return Verdict::Keep(Received { msg, line });
            }
            Ok(WorkerMsg::Hello(_)) => "a second hello".to_string(),
            Ok(m) => format!("rank {} on rank {}'s connection", m.rank(), self.rank),
            Err(e) => e.to_string(),
        };
        self.bad += 1;
        let reply =
            (self.bad <= MAX_ERROR_REPLIES).then(|| reject(ErrorCode::BadMessage, detail.clone()));
        self.count_bad(detail);
        Verdict::Drop(reply)
    }

    /// Count one bad line (or a failure said as one) and why.
    pub fn count_bad(&mut self, why: String) {
        self.pending_bad += 1;
        self.last_error = why;
    }

    /// Whether enough bad lines wait that they should be reported now, not with the next
    /// good ones (a connection that sends nothing but garbage still shows up).
    pub fn bad_report_due(&self) -> bool {
        self.pending_bad >= BAD_REPORT_EVERY
    }

    /// The report of the bad lines since the last one, if any.
    pub fn take_bad(&mut self) -> Option<SupEvent> {
        (self.pending_bad > 0).then(|| SupEvent::BadLines {
            run: self.run.clone(),
            rank: self.rank,
            count: std::mem::take(&mut self.pending_bad),
            last_error: self.last_error.clone(),
        })
    }
}

fn reject(code: ErrorCode, msg: String) -> ControlMsg {
    ControlMsg::Error { code, msg }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> ReadOutcome {
        ReadOutcome::Line(s.to_string())
    }

    const HB: &str = r#"{"v":1,"type":"heartbeat","rank":1,"t":1.0,"step":3}"#;

    #[test]
    fn a_valid_line_of_its_rank_is_kept_with_the_line_as_received() {
        let mut c = LineCheck::new("r".into(), 1);
        match c.judge(line(HB)) {
            Verdict::Keep(r) => {
                assert_eq!(r.line, HB);
                assert_eq!(r.msg.rank(), 1);
            }
            _ => panic!("a valid heartbeat was not kept"),
        }
        assert!(c.take_bad().is_none());
    }

    #[test]
    fn another_ranks_line_and_garbage_are_dropped_counted_and_answered_a_few_times() {
        let mut c = LineCheck::new("r".into(), 2);
        assert!(matches!(c.judge(line(HB)), Verdict::Drop(Some(_))));
        for _ in 0..20 {
            let _ = c.judge(line("not json"));
        }
        // 21 bad lines; the 17th and later get no reply.
        assert!(matches!(c.judge(line("{")), Verdict::Drop(None)));
        match c.take_bad() {
            Some(SupEvent::BadLines {
                count, last_error, ..
            }) => {
                assert_eq!(count, 22);
                assert!(!last_error.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert!(c.take_bad().is_none(), "the count is reported once");
    }

    #[test]
    fn a_line_too_long_closes_with_a_reply_and_bad_utf8_closes_without() {
        let mut c = LineCheck::new("r".into(), 0);
        match c.judge(ReadOutcome::TooLong) {
            Verdict::Close(Some(ControlMsg::Error { code, .. })) => {
                assert_eq!(code, ErrorCode::LineTooLong)
            }
            _ => panic!("too long must close with an error"),
        }
        assert!(matches!(
            c.judge(ReadOutcome::BadUtf8),
            Verdict::Close(None)
        ));
        assert!(matches!(c.judge(ReadOutcome::Eof), Verdict::Close(None)));
        assert!(matches!(
            c.take_bad(),
            Some(SupEvent::BadLines { count: 2, .. })
        ));
    }

    #[test]
    fn bad_lines_are_due_for_a_report_every_1024() {
        let mut c = LineCheck::new("r".into(), 0);
        for _ in 0..1023 {
            let _ = c.judge(line("x"));
        }
        assert!(!c.bad_report_due());
        let _ = c.judge(line("x"));
        assert!(c.bad_report_due());
    }
}
