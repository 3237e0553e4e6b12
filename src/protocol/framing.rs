//! Newline framing with a hard per-line limit, over any async byte stream.
//!
//! Hand-rolled instead of `LinesCodec` because we need to tell "line too long" and "bad UTF-8"
//! apart from EOF deterministically, and never buffer more than the limit.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Longest accepted line, excluding the newline.
pub const MAX_LINE_BYTES: usize = 1 << 20;

#[derive(Debug, PartialEq)]
pub enum ReadOutcome {
    Line(String),
    /// The line exceeded the limit; the connection should be closed.
    TooLong,
    /// The bytes were not UTF-8; the connection should be closed.
    BadUtf8,
    Eof,
}

pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(inner: R) -> Self {
        Self::with_max(inner, MAX_LINE_BYTES)
    }

    pub fn with_max(inner: R, max: usize) -> Self {
        Self {
            inner,
            buf: Vec::new(),
            max,
        }
    }

    /// Change the limit for the lines still to come (a connection is held to less before it
    /// authenticates).
    pub fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    /// Read the next line. Cancel-safe only between calls (partial lines are kept in `buf`).
    pub async fn next_line(&mut self) -> std::io::Result<ReadOutcome> {
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                // EOF: a trailing partial line without newline is still a line.
                if self.buf.is_empty() {
                    return Ok(ReadOutcome::Eof);
                }
                let line = std::mem::take(&mut self.buf);
                return Ok(finish(line));
            }
            let (consumed, out) = take_line(&mut self.buf, available, self.max);
            self.inner.consume(consumed);
            if let Some(out) = out {
                return Ok(out);
            }
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> LineReader<tokio::io::BufReader<R>> {
    /// The next line when it is already whole in the read buffer, without reading (no system
    /// call, no waiting): what a connection takes after a read before it waits again. A
    /// partial line moves into `buf`, as `next_line` would move it.
    pub fn next_buffered(&mut self) -> Option<ReadOutcome> {
        let available = self.inner.buffer();
        let (consumed, out) = take_line(&mut self.buf, available, self.max);
        std::pin::Pin::new(&mut self.inner).consume(consumed);
        out
    }
}

impl<R: tokio::io::AsyncRead + Unpin> LineReader<tokio::io::BufReader<R>> {
    /// The reader and every byte read from it but not yet returned as a line (the start of a
    /// partial line, then what the read buffer holds): how a connection moves on to another
    /// reader without losing what its peer sent right after the handshake.
    pub fn into_parts(self) -> (R, Vec<u8>) {
        let mut rest = self.buf;
        rest.extend_from_slice(self.inner.buffer());
        (self.inner.into_inner(), rest)
    }
}

/// Newline framing over bytes that come in chunks, without any reader (the paced reader
/// thread's connections): the same limit and outcomes as [`LineReader`].
pub struct LineSplitter {
    buf: Vec<u8>,
    max: usize,
}

impl LineSplitter {
    pub fn new(max: usize) -> LineSplitter {
        LineSplitter {
            buf: Vec::new(),
            max,
        }
    }

    /// Hand every outcome that `chunk` completes to `out`, in order, until `out` says stop
    /// (returns false). Returns whether it was told to stop.
    pub fn push(&mut self, mut chunk: &[u8], mut out: impl FnMut(ReadOutcome) -> bool) -> bool {
        while !chunk.is_empty() {
            let (consumed, outcome) = take_line(&mut self.buf, chunk, self.max);
            chunk = &chunk[consumed..];
            if let Some(o) = outcome
                && !out(o)
            {
                return true;
            }
        }
        false
    }

    /// At the end of the stream: a trailing partial line without newline is still a line.
    pub fn finish(&mut self) -> ReadOutcome {
        if self.buf.is_empty() {
            ReadOutcome::Eof
        } else {
            finish(std::mem::take(&mut self.buf))
        }
    }
}

/// Take bytes up to the next newline from `available` (after what `buf` holds of the line):
/// how many bytes to consume, and the line when it is complete (or too long).
fn take_line(buf: &mut Vec<u8>, available: &[u8], max: usize) -> (usize, Option<ReadOutcome>) {
    // memchr: a vectorized scan, not a byte-at-a-time loop over every line.
    let (take, found) = match memchr::memchr(b'\n', available) {
        Some(i) => (i, true),
        None => (available.len(), false),
    };
    let consumed = if found { take + 1 } else { take };
    if buf.len() + take > max {
        buf.clear();
        return (consumed, Some(ReadOutcome::TooLong));
    }
    if !found {
        buf.extend_from_slice(&available[..take]);
        return (consumed, None);
    }
    // A line whole in the read buffer is copied once, into a string of its size (taking
    // `buf` would leave it empty and regrow it, line after line).
    let line = if buf.is_empty() {
        available[..take].to_vec()
    } else {
        buf.extend_from_slice(&available[..take]);
        std::mem::take(buf)
    };
    (consumed, Some(finish(line)))
}

fn finish(mut line: Vec<u8>) -> ReadOutcome {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    match String::from_utf8(line) {
        Ok(s) => ReadOutcome::Line(s),
        Err(_) => ReadOutcome::BadUtf8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(s: &mut LineSplitter, chunk: &[u8]) -> Vec<ReadOutcome> {
        let mut v = Vec::new();
        s.push(chunk, |o| {
            v.push(o);
            true
        });
        v
    }

    #[test]
    fn the_splitter_joins_lines_across_chunks_and_keeps_a_trailing_one_for_the_end() {
        let mut s = LineSplitter::new(16);
        assert_eq!(split_all(&mut s, b"ab"), vec![]);
        assert_eq!(
            split_all(&mut s, b"c\r\nd\ne"),
            vec![
                ReadOutcome::Line("abc".into()),
                ReadOutcome::Line("d".into())
            ]
        );
        assert_eq!(s.finish(), ReadOutcome::Line("e".into()));
        assert_eq!(s.finish(), ReadOutcome::Eof);
    }

    #[test]
    fn the_splitter_holds_lines_to_its_limit_and_stops_when_told() {
        let mut s = LineSplitter::new(4);
        assert_eq!(split_all(&mut s, b"abc"), vec![]);
        assert_eq!(split_all(&mut s, b"de\n"), vec![ReadOutcome::TooLong]);
        assert_eq!(split_all(&mut s, b"\xff\n"), vec![ReadOutcome::BadUtf8]);
        let mut seen = 0;
        let stopped = s.push(b"a\nb\nc\n", |_| {
            seen += 1;
            seen < 2
        });
        assert!(stopped);
        assert_eq!(seen, 2);
    }

    #[tokio::test]
    async fn into_parts_gives_back_what_was_read_but_not_taken() {
        let input: &[u8] = b"hello\nstep 1\nste";
        let mut r = LineReader::new(tokio::io::BufReader::new(input));
        assert_eq!(
            r.next_line().await.unwrap(),
            ReadOutcome::Line("hello".into())
        );
        let (_, rest) = r.into_parts();
        assert_eq!(rest, b"step 1\nste");
    }

    #[tokio::test]
    async fn buffered_lines_are_taken_without_reading_and_a_partial_one_waits() {
        let input: &[u8] = b"a\nb\nc";
        let mut r = LineReader::new(tokio::io::BufReader::new(input));
        // The first read fills the buffer with all three lines' bytes.
        assert_eq!(r.next_line().await.unwrap(), ReadOutcome::Line("a".into()));
        assert_eq!(r.next_buffered(), Some(ReadOutcome::Line("b".into())));
        // "c" has no newline yet: nothing whole, and it is kept for the next read.
        assert_eq!(r.next_buffered(), None);
        assert_eq!(r.next_line().await.unwrap(), ReadOutcome::Line("c".into()));
        assert_eq!(r.next_line().await.unwrap(), ReadOutcome::Eof);
    }

    async fn read_all(input: &[u8], max: usize) -> Vec<ReadOutcome> {
        let mut r = LineReader::with_max(tokio::io::BufReader::with_capacity(7, input), max);
        let mut out = Vec::new();
        loop {
            let o = r.next_line().await.unwrap();
            let eof = o == ReadOutcome::Eof;
            out.push(o);
            if eof || out.len() > 100 {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn splits_lines_across_small_buffers() {
        let out = read_all(b"abc\r\ndefghijkl\nxy", 64).await;
        assert_eq!(
            out,
            vec![
                ReadOutcome::Line("abc".into()),
                ReadOutcome::Line("defghijkl".into()),
                ReadOutcome::Line("xy".into()),
                ReadOutcome::Eof
            ]
        );
    }

    #[tokio::test]
    async fn too_long_line_is_reported_once() {
        let out = read_all(b"0123456789abcdef\nok\n", 8).await;
        assert_eq!(out[0], ReadOutcome::TooLong);
    }

    #[tokio::test]
    async fn bad_utf8_is_reported() {
        let out = read_all(b"\xff\xfe\n", 8).await;
        assert_eq!(out[0], ReadOutcome::BadUtf8);
    }
}
