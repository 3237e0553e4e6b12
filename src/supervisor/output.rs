//! A run's `output.log` (launcher and ranks' stdout/stderr): new whole lines as they arrive, and
//! the ranks' exit lines the launcher printed when it ended.

use crate::run::RankTail;
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

/// Most lines kept of a failed rank's own output.
pub const RANK_TAIL_LINES: usize = 30;

/// The ranks torchrun's failure summary lists (`rank : 0 (local_rank: 0)` then
/// `exitcode : -6 (pid: …)`), each with its own last lines: from `output.log`, where torchrun's
/// `--tee` prefixed them `[default<local rank>]:`, else from the rank's own file under
/// `ranks/` (`--log-dir`; stderr first: that is where an abort's last words go).
pub fn rank_tails(run_dir: &Path) -> Vec<RankTail> {
    let Ok(text) = std::fs::read_to_string(run_dir.join("output.log")) else {
        return Vec::new();
    };
    let mut out: Vec<RankTail> = Vec::new();
    let mut pending: Option<(u32, u32)> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("rank").map(str::trim_start)
            && let Some(rest) = rest.strip_prefix(':')
        {
            pending = parse_rank_field(rest);
        } else if let Some(rest) = t.strip_prefix("exitcode").map(str::trim_start)
            && let Some(rest) = rest.strip_prefix(':')
            && let Some((rank, local_rank)) = pending.take()
            && let Some(code) = rest.split_whitespace().next().and_then(|c| c.parse().ok())
            && !out.iter().any(|r| r.rank == rank)
        {
            out.push(RankTail {
                rank,
                local_rank,
                exitcode: code,
                lines: Vec::new(),
            });
        }
    }
    for r in &mut out {
        let prefix = format!("[default{}]:", r.local_rank);
        let mine: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix(prefix.as_str()))
            .filter(|l| !l.trim().is_empty())
            .collect();
        r.lines = last_lines(&mine);
        if r.lines.is_empty() {
            r.lines = from_rank_files(run_dir, r.local_rank);
        }
    }
    out.sort_by_key(|r| r.rank);
    out
}

/// The rank that died first among `tails`: a non-zero exit, the ranks torchrun stopped with
/// SIGTERM because a peer had failed taken only when no other did.
pub fn first_failed(tails: &[RankTail]) -> Option<&RankTail> {
    tails
        .iter()
        .filter(|t| t.exitcode != 0)
        .min_by_key(|t| t.exitcode == -15)
}

/// `0 (local_rank: 0)` → (0, 0).
fn parse_rank_field(s: &str) -> Option<(u32, u32)> {
    let mut words = s.split_whitespace();
    let rank = words.next()?.parse().ok()?;
    let local = s
        .split("local_rank:")
        .nth(1)
        .and_then(|r| r.trim().trim_end_matches(')').trim().parse().ok())
        .unwrap_or(rank);
    Some((rank, local))
}

fn last_lines(lines: &[&str]) -> Vec<String> {
    lines[lines.len().saturating_sub(RANK_TAIL_LINES)..]
        .iter()
        .map(|l| l.chars().take(LINE_CHARS).collect())
        .collect()
}

/// The newest attempt's `stderr.log` (else `stdout.log`) of local rank `local`.
fn from_rank_files(run_dir: &Path, local: u32) -> Vec<String> {
    let root = run_dir.join(super::launch::RANK_LOG_DIR);
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in walk(&root, 3) {
        if entry.file_name().and_then(|n| n.to_str()) != Some(&local.to_string()) {
            continue;
        }
        let m = std::fs::metadata(&entry).and_then(|m| m.modified());
        if let Ok(t) = m
            && newest.as_ref().is_none_or(|(n, _)| t > *n)
        {
            newest = Some((t, entry));
        }
    }
    let Some((_, dir)) = newest else {
        return Vec::new();
    };
    for name in ["stderr.log", "stdout.log"] {
        if let Ok(t) = std::fs::read_to_string(dir.join(name)) {
            let lines: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
            if !lines.is_empty() {
                return last_lines(&lines);
            }
        }
    }
    Vec::new()
}

/// Directories under `root` down to `depth` levels (torchrun: `<id>/attempt_N/<local rank>`).
fn walk(root: &Path, depth: usize) -> Vec<PathBuf> {
    let mut level = vec![root.to_path_buf()];
    for _ in 0..depth {
        level = level
            .iter()
            .filter_map(|d| std::fs::read_dir(d).ok())
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
    }
    level
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

    /// torchrun's summary of a run whose rank 0 aborted after its peer was told to stop, as
    /// torch 2.11 writes it with `--tee=3`.
    const ABORTED: &str = "\
[default0]:epoch 1: mean loss 0.5
[default1]:epoch 1: mean loss 0.5
[default0]:done
[default0]:terminate called after throwing an instance of 'gloo::IoException'
[default0]:  what():  [pair.cc:589] Connection closed by peer
[default1]:still here
E1204 12:10:58.152000 11587 api.py:986] failed (exitcode: -6) local_rank: 0 (pid: 11698)
Failures:
[1]:
  time      : 2026-12-04_12:10:58
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 11699)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 11699
Root Cause (first observed failure):
[0]:
  time      : 2026-12-04_12:10:58
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 11698)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 11698
";

    #[test]
    fn a_rank_killed_by_a_signal_keeps_its_own_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("output.log"), ABORTED).unwrap();
        let tails = rank_tails(dir.path());
        assert_eq!(tails.len(), 2, "{tails:#?}");
        let r0 = &tails[0];
        assert_eq!((r0.rank, r0.local_rank, r0.exitcode), (0, 0, -6));
        assert_eq!(r0.exit_words(), "exit -6 (SIGABRT)");
        assert_eq!(
            r0.lines,
            [
                "epoch 1: mean loss 0.5",
                "done",
                "terminate called after throwing an instance of 'gloo::IoException'",
                "  what():  [pair.cc:589] Connection closed by peer",
            ]
        );
        assert_eq!(
            r0.why(),
            Some("  what():  [pair.cc:589] Connection closed by peer")
        );
        assert_eq!(tails[1].lines, ["epoch 1: mean loss 0.5", "still here"]);
        assert_eq!(tails[1].exit_words(), "exit -15 (SIGTERM)");
    }

    /// Python's fault handler dump after the abort: the rank's own words before it are the
    /// reason, and the frame the dying (or main) thread was in is the place.
    #[test]
    fn a_fault_handler_dump_gives_the_place_and_leaves_the_words() {
        let tail = |lines: &[&str]| crate::run::RankTail {
            rank: 1,
            local_rank: 1,
            exitcode: -6,
            lines: lines.iter().map(|l| l.to_string()).collect(),
        };
        let dump = [
            "done",
            "terminate called without an active exception",
            "Fatal Python error: Aborted",
            "",
            "Thread 0x00007f0000000002 (most recent call first):",
            "  File \"/w/client.py\", line 120 in _heartbeat_loop",
            "",
            "Thread 0x00007f0000000001 (most recent call first):",
            "  File \"/s/distributed_c10d.py\", line 2347 in destroy_process_group",
            "  File \"/s/train.py\", line 95 in main",
            "",
            "Extension modules: numpy, torch._C (total: 2)",
        ];
        let t = tail(&dump);
        assert_eq!(
            t.why(),
            Some("terminate called without an active exception")
        );
        assert_eq!(
            t.died_at(),
            Some("File \"/s/distributed_c10d.py\", line 2347 in destroy_process_group"),
            "no current thread: the main thread, listed last"
        );
        assert_eq!(
            t.why_with_place().unwrap(),
            "terminate called without an active exception (Python was at: File \"/s/distributed_c10d.py\", line 2347 in destroy_process_group)"
        );
        // The thread that raised the signal, when Python knows it.
        let mut current = dump.to_vec();
        current[4] = "Current thread 0x00007f0000000002 (most recent call first):";
        assert_eq!(
            tail(&current).died_at(),
            Some("File \"/w/client.py\", line 120 in _heartbeat_loop")
        );
        // Nothing of its own before the dump: the fault handler's line is the reason.
        let bare = tail(&dump[2..]);
        assert_eq!(bare.why(), Some("Fatal Python error: Aborted"));
        // No dump: as before, and no place.
        let plain = tail(&dump[..2]);
        assert_eq!(plain.died_at(), None);
        assert_eq!(
            plain.why_with_place().unwrap(),
            "terminate called without an active exception"
        );
    }

    /// Without the tee'd lines (an older log), the rank's own file under `ranks/` speaks.
    #[test]
    fn the_rank_file_is_read_when_output_log_has_no_prefixed_lines() {
        let dir = tempfile::tempdir().unwrap();
        let summary: String = ABORTED
            .lines()
            .filter(|l| !l.starts_with("[default"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(dir.path().join("output.log"), summary).unwrap();
        let rank0 = dir.path().join("ranks/abc_x/attempt_0/0");
        std::fs::create_dir_all(&rank0).unwrap();
        std::fs::write(rank0.join("stderr.log"), "Fatal Python error: Aborted\n\n").unwrap();
        let tails = rank_tails(dir.path());
        assert_eq!(tails[0].lines, ["Fatal Python error: Aborted"]);
        assert!(tails[1].lines.is_empty());
    }
}
