//! A run's `output.log` (launcher and ranks' stdout/stderr): new whole lines as they arrive, and
//! the ranks' exit lines the launcher printed when it ended.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Most bytes read per call, so one chatty run cannot stall the loop.
const CHUNK: u64 = 256 * 1024;
/// Longest line kept.
const LINE_CHARS: usize = 400;

/// Reads `output.log` from where the last call stopped.
#[derive(Debug, Clone)]
pub struct OutputTail {
    path: PathBuf,
    pos: u64,
}

impl OutputTail {
    pub fn new(run_dir: &Path) -> Self {
        OutputTail {
            path: run_dir.join("output.log"),
            pos: 0,
        }
    }

    /// Whole non-blank lines written since the last call (a partial last line waits, unless a
    /// full chunk has no newline at all), each cut to `LINE_CHARS`.
    pub fn new_lines(&mut self) -> Vec<String> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        if f.seek(SeekFrom::Start(self.pos)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        let Ok(n) = f.take(CHUNK).read_to_end(&mut buf) else {
            return Vec::new();
        };
        let end = buf
            .iter()
            .rposition(|&b| b == b'\n')
            .map(|i| i + 1)
            .unwrap_or(if n as u64 >= CHUNK { n } else { 0 });
        self.pos += end as u64;
        String::from_utf8_lossy(&buf[..end])
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.chars().take(LINE_CHARS).collect())
            .collect()
    }
}

/// Rank exit codes as the launcher logged them (sim launcher and torchrun formats), last four.
pub fn exit_details(run_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(run_dir.join("output.log")).ok()?;
    let mut found: Vec<String> = Vec::new();
    for line in text.lines().rev().take(400) {
        let t = line.trim();
        if t.contains("exited with")
            || t.starts_with("exitcode")
            || t.starts_with("rank ") && t.contains("exitcode")
        {
            found.push(t.chars().take(160).collect());
        }
        if found.len() >= 4 {
            break;
        }
    }
    found.reverse();
    (!found.is_empty()).then(|| found.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn tail_returns_whole_lines_once_and_exit_lines_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = std::fs::File::create(dir.path().join("output.log")).unwrap();
        let mut tail = OutputTail::new(dir.path());
        write!(f, "a\n\nb\npart").unwrap();
        assert_eq!(tail.new_lines(), ["a", "b"]);
        assert!(tail.new_lines().is_empty());
        writeln!(f, "ial\nrank 1 exited with code 3").unwrap();
        assert_eq!(tail.new_lines(), ["partial", "rank 1 exited with code 3"]);
        assert_eq!(
            exit_details(dir.path()).as_deref(),
            Some("rank 1 exited with code 3")
        );
    }
}
