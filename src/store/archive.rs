//! The per-step archive: every `step` and `buckets` line of a run, as received, appended to
//! `runs/<id>/steps.jsonl` in the data directory at each store flush.
//!
//! Why a file and not database rows: at 1,024 ranks these lines come at ~15 MB/s, and in
//! SQLite each byte went through the WAL and again through its checkpoint (the flush was a
//! sixth of the engine's CPU, docs/performance.md), while nothing of ddptop reads them back:
//! reports and `show` read the run's own rows (rank 0's timelines and each rank's latest stay
//! rows). Here they cost one `write` per run and flush. The file is JSON lines, the lines as
//! the worker sent them (validated; keys ddptop does not know kept), for whoever wants every
//! step of a run: `jq`, pandas, DuckDB.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The archive's file name in a run's directory.
pub const FILE: &str = "steps.jsonl";

pub struct StepArchive {
    runs_dir: PathBuf,
    /// Lines waiting for the next flush, newline-terminated, by run. A handful of runs at
    /// most: searched in order.
    pending: Vec<(String, Vec<u8>)>,
}

impl StepArchive {
    /// The archive of the runs whose directories are under `runs_dir` (`<data dir>/runs`).
    pub fn new(runs_dir: PathBuf) -> StepArchive {
        StepArchive {
            runs_dir,
            pending: Vec::new(),
        }
    }

    /// The archive file of `run`; `None` for an id that is not a plain directory name (ids
    /// are ddptop's own, `r20261202-…`: this only keeps a path out of anything else).
    pub fn path(&self, run: &str) -> Option<PathBuf> {
        plain_name(run).then(|| self.runs_dir.join(run).join(FILE))
    }

    /// Keep `line` (one message, no newline) for the next flush.
    pub fn push(&mut self, run: &str, line: &str) {
        let i = match self.pending.iter().position(|(r, _)| r == run) {
            Some(i) => i,
            None => {
                self.pending.push((run.to_string(), Vec::new()));
                self.pending.len() - 1
            }
        };
        let buf = &mut self.pending[i].1;
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
    }

    /// Append what waits to each run's file, one write each. A run with nothing new since the
    /// last flush gives its buffer back (a 1,024-rank run's holds ~7 MB between flushes; kept
    /// while the run sends, so it is not regrown every flush). Every run is tried; the first
    /// error is returned.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        let mut first_err = None;
        self.pending.retain(|(_, buf)| !buf.is_empty());
        for (run, buf) in &mut self.pending {
            let written = match plain_name(run) {
                true => append(&self.runs_dir.join(run.as_str()), buf),
                false => Err(anyhow::anyhow!("run id {run:?} is not a directory name")),
            };
            buf.clear();
            if let Err(e) = written {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// How many `kind` lines the run's archive holds (`None`: the run has no archive, as runs
    /// stored before it existed).
    pub fn count(&self, run: &str, kind: &str) -> anyhow::Result<Option<u64>> {
        let Some(path) = self.path(run).filter(|p| p.exists()) else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(&path)?;
        let mut n = 0;
        for line in text.lines() {
            if kind_of(line).as_deref() == Some(kind) {
                n += 1;
            }
        }
        Ok(Some(n))
    }
}

/// The `type` of an archived line (the typed parse already accepted it when it came in).
fn kind_of(line: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Kind {
        #[serde(rename = "type")]
        kind: String,
    }
    serde_json::from_str::<Kind>(line).ok().map(|k| k.kind)
}

fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Append `bytes` to `dir/FILE`: the directory 0700 and the file 0600 when created, as the
/// rest of the data directory.
fn append(dir: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let path = dir.join(FILE);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
    f.write_all(bytes)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn lines_are_appended_per_run_in_order_and_counted_by_type() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = StepArchive::new(dir.path().join("runs"));
        assert_eq!(a.count("r1", "step").unwrap(), None, "no archive yet");
        a.push(
            "r1",
            r#"{"v":1,"type":"step","rank":0,"step":1,"extra":"kept"}"#,
        );
        a.push("r2", r#"{"v":1,"type":"step","rank":0,"step":1}"#);
        a.push("r1", r#"{"type":"buckets","v":1,"rank":1,"step":1}"#);
        a.flush().unwrap();
        a.push("r1", r#"{"v":1,"type":"step","rank":0,"step":2}"#);
        a.flush().unwrap();
        let text = std::fs::read_to_string(a.path("r1").unwrap()).unwrap();
        let steps: Vec<&str> = text.lines().collect();
        assert_eq!(steps.len(), 3);
        assert!(steps[0].ends_with(r#""extra":"kept"}"#), "as received");
        assert!(steps[2].contains(r#""step":2"#), "appended in order");
        assert_eq!(a.count("r1", "step").unwrap(), Some(2));
        assert_eq!(a.count("r1", "buckets").unwrap(), Some(1));
        assert_eq!(a.count("r2", "step").unwrap(), Some(1));
        // r2 sent nothing in the second flush: its buffer is given back.
        assert_eq!(a.pending.len(), 1);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&a.path("r1").unwrap()), 0o600);
        assert_eq!(mode(&dir.path().join("runs/r1")), 0o700);
    }

    #[test]
    fn an_id_that_is_not_a_plain_name_gets_no_file_and_the_others_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = StepArchive::new(dir.path().join("runs"));
        for bad in ["../x", "", ".hidden", "a/b"] {
            assert_eq!(a.path(bad), None, "{bad:?}");
        }
        a.push("../x", r#"{"v":1,"type":"step"}"#);
        a.push("r1", r#"{"v":1,"type":"step"}"#);
        let err = a.flush().unwrap_err().to_string();
        assert!(err.contains("not a directory name"), "{err}");
        assert_eq!(a.count("r1", "step").unwrap(), Some(1));
        assert!(!dir.path().join("x").exists());
    }
}
