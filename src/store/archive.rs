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

/// What the archive holds, as the run details and `ddptop show` describe it.
pub const WHAT: &str = "every step and timeline line, as received";

pub struct StepArchive {
    runs_dir: PathBuf,
    /// Bytes a run's archive may grow to (`[store] archive_max_mb`); `None`: no limit.
    limit: Option<u64>,
    /// Lines waiting for the next flush, by run. A handful of runs at most: searched in order.
    pending: Vec<RunLines>,
}

struct RunLines {
    run: String,
    /// Newline-terminated lines.
    buf: Vec<u8>,
    /// The file's size, once read (at the run's first flush).
    size: Option<u64>,
    /// The limit was reached: nothing more is kept for this run.
    full: bool,
}

/// A run's archive reached its limit at this flush.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveFull {
    pub run: String,
    pub limit: u64,
}

impl StepArchive {
    /// The archive of the runs whose directories are under `runs_dir` (`<data dir>/runs`).
    pub fn new(runs_dir: PathBuf) -> StepArchive {
        StepArchive {
            runs_dir,
            limit: None,
            pending: Vec::new(),
        }
    }

    /// The most bytes one run's archive may hold (`None`: no limit). At 1,024 ranks the lines
    /// come at ~13 MB/s, ~45 GB an hour: a bound keeps a long large job from filling the disk
    /// ddptop and the job share.
    pub fn set_limit(&mut self, bytes: Option<u64>) {
        self.limit = bytes;
    }

    /// The archive file of `run`; `None` for an id that is not a plain directory name (ids
    /// are ddptop's own, `r20261202-…`: this only keeps a path out of anything else).
    pub fn path(&self, run: &str) -> Option<PathBuf> {
        plain_name(run).then(|| self.runs_dir.join(run).join(FILE))
    }

    /// Keep `line` (one message, no newline) for the next flush.
    pub fn push(&mut self, run: &str, line: &str) {
        let i = match self.pending.iter().position(|r| r.run == run) {
            Some(i) => i,
            None => {
                self.pending.push(RunLines {
                    run: run.to_string(),
                    buf: Vec::new(),
                    size: None,
                    full: false,
                });
                self.pending.len() - 1
            }
        };
        let r = &mut self.pending[i];
        if !r.full {
            r.buf.extend_from_slice(line.as_bytes());
            r.buf.push(b'\n');
        }
    }

    /// Append what waits to each run's file, one write each, whole lines up to the limit.
    /// A run with nothing new since the last flush gives its buffer back (a 1,024-rank run's
    /// holds ~7 MB between flushes; kept while the run sends, so it is not regrown every
    /// flush); a full run is remembered. Every run is tried; the runs that reached the limit at
    /// this flush are returned, or the first error.
    pub fn flush(&mut self) -> anyhow::Result<Vec<ArchiveFull>> {
        let mut first_err = None;
        let mut filled = Vec::new();
        self.pending.retain(|r| r.full || !r.buf.is_empty());
        for r in &mut self.pending {
            if r.buf.is_empty() {
                continue;
            }
            let dir = self.runs_dir.join(r.run.as_str());
            let size = *r
                .size
                .get_or_insert_with(|| std::fs::metadata(dir.join(FILE)).map_or(0, |m| m.len()));
            let room = self.limit.map_or(u64::MAX, |l| l.saturating_sub(size));
            let take = if (r.buf.len() as u64) <= room {
                r.buf.len()
            } else {
                // Whole lines only: up to the last newline that fits.
                let fits = &r.buf[..room as usize];
                r.full = true;
                filled.push(ArchiveFull {
                    run: r.run.clone(),
                    limit: self.limit.unwrap_or(0),
                });
                memchr::memrchr(b'\n', fits).map_or(0, |i| i + 1)
            };
            let written = match plain_name(&r.run) {
                true if take == 0 => Ok(()),
                true => append(&dir, &r.buf[..take]),
                false => Err(anyhow::anyhow!(
                    "run id {:?} is not a directory name",
                    r.run
                )),
            };
            r.buf.clear();
            match written {
                Ok(()) => r.size = Some(size + take as u64),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(filled), Err)
    }

    /// How many `kind` lines the run's archive holds (`None`: the run has no archive, as runs
    /// stored before it existed).
    pub fn count(&self, run: &str, kind: &str) -> anyhow::Result<Option<u64>> {
        let Some(path) = self.path(run).filter(|p| p.exists()) else {
            return Ok(None);
        };
        // Line by line: an archive can be gigabytes.
        use std::io::BufRead;
        let mut n = 0;
        for line in std::io::BufReader::new(std::fs::File::open(&path)?).lines() {
            if kind_of(&line?).as_deref() == Some(kind) {
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
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    leave_page_cache(&f);
    Ok(())
}

/// Tell the kernel that nothing will read the archive's pages soon: it starts writing back
/// what was just appended and drops what earlier flushes wrote (written back by now, half a
/// second later).
///
/// Why: at 1,024 ranks the archive grows by ~45 GB an hour. Left to the page cache, it would
/// fill the machine's memory with pages nobody reads, pushing out the cached files of the
/// job and of the other users of a login node, and each flush's `write` would take fresh
/// pages instead of reusing freed ones: on the 2-core VM that was 3-4x the `write`'s system
/// time (docs/performance.md, the session of 2026-12-03). Advice only: an error (a file system
/// that ignores it) changes nothing, the lines are written.
fn leave_page_cache(f: &std::fs::File) {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};
        // Offset 0, length 0: the whole file.
        let _ = posix_fadvise(f, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    let _ = f;
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
        assert_eq!(a.flush().unwrap(), vec![], "no limit: never full");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&a.path("r1").unwrap()), 0o600);
        assert_eq!(mode(&dir.path().join("runs/r1")), 0o700);
    }

    #[test]
    fn a_run_stops_at_its_limit_on_a_whole_line_and_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = StepArchive::new(dir.path().join("runs"));
        let line = r#"{"v":1,"type":"step","rank":0}"#; // 30 bytes + newline
        a.set_limit(Some(100));
        a.push("r1", line);
        a.push("r1", line);
        assert_eq!(a.flush().unwrap(), vec![]);
        for _ in 0..3 {
            a.push("r1", line);
        }
        let full = a.flush().unwrap();
        assert_eq!(
            full,
            vec![ArchiveFull {
                run: "r1".into(),
                limit: 100
            }]
        );
        let text = std::fs::read_to_string(a.path("r1").unwrap()).unwrap();
        assert_eq!(text.len(), 93, "three whole lines of 31 bytes fit in 100");
        assert!(text.lines().all(|l| l == line));
        a.push("r1", line);
        assert_eq!(a.flush().unwrap(), vec![], "reported once");
        assert_eq!(
            a.count("r1", "step").unwrap(),
            Some(3),
            "nothing after the limit"
        );
        // A new ddptop on the same data directory counts what the file already holds.
        let mut b = StepArchive::new(dir.path().join("runs"));
        b.set_limit(Some(100));
        b.push("r1", line);
        assert_eq!(b.flush().unwrap().len(), 1);
        assert_eq!(b.count("r1", "step").unwrap(), Some(3));
    }

    /// Of the pages of `path`'s first `len` bytes, how many are in the page cache, and how
    /// many there are (`mincore` over a mapping).
    #[cfg(target_os = "linux")]
    fn cached_pages(path: &Path, len: usize) -> (usize, usize) {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(path).unwrap();
        // SAFETY: a read-only shared mapping of a file this test owns, only given to
        // `mincore` (never read through) and unmapped before return.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED, "mmap");
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let mut v = vec![0u8; len.div_ceil(page)];
            assert_eq!(libc::mincore(p, len, v.as_mut_ptr()), 0, "mincore");
            libc::munmap(p, len);
            (v.iter().filter(|b| **b & 1 == 1).count(), v.len())
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn what_earlier_flushes_wrote_leaves_the_page_cache() {
        // Beside the test binary: the target directory is on a disk, where the page cache
        // can drop a file's pages (a tmpfs /tmp cannot: its pages are the file).
        let exe = std::env::current_exe().unwrap();
        let dir = tempfile::tempdir_in(exe.parent().unwrap()).unwrap();
        // The control: whether this file system drops a file's clean pages when told to at
        // all (tmpfs cannot). Only then does the archive's own file show what ddptop does.
        let control = dir.path().join("control");
        std::fs::write(&control, vec![b'x'; 1 << 20]).unwrap();
        let f = std::fs::File::open(&control).unwrap();
        f.sync_all().unwrap();
        leave_page_cache(&f);
        let (cached, pages) = cached_pages(&control, 1 << 20);
        if cached * 10 >= pages {
            let fs = nix::sys::statfs::statfs(dir.path()).map(|s| s.filesystem_type());
            eprintln!(
                "skipped: this file system ({fs:?}) keeps clean pages when told to drop them"
            );
            return;
        }
        let mut a = StepArchive::new(dir.path().join("runs"));
        let line = format!(
            r#"{{"v":1,"type":"step","rank":0,"pad":"{}"}}"#,
            "x".repeat(200)
        );
        for _ in 0..10_000 {
            a.push("r1", &line);
        }
        a.flush().unwrap();
        let path = a.path("r1").unwrap();
        let first = std::fs::metadata(&path).unwrap().len() as usize;
        // Written back, as half a second after a flush they are (the writeback the flush
        // started has had its time).
        std::fs::File::open(&path).unwrap().sync_all().unwrap();
        a.push("r1", &line);
        a.flush().unwrap();
        let (cached, pages) = cached_pages(&path, first);
        assert!(
            cached * 10 < pages,
            "{cached} of the first flush's {pages} pages still cached after the next flush"
        );
        assert_eq!(a.count("r1", "step").unwrap(), Some(10_001), "nothing lost");
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
