//! Who else uses the GPUs a run is about to use. Two ddptops (or a ddptop and someone's training
//! job) on the same GPUs spoil each other's figures without an error, so before an NCCL launch
//! ddptop takes a machine-wide lock per GPU and asks NVML for the compute processes on them.
//!
//! The lock is an advisory `flock` on `<runtime dir>/ddptop-gpu-locks/gpu-N.lock`, held by an
//! open file for the run's lifetime: the kernel drops it when ddptop exits, however it exits, so
//! a crashed ddptop never leaves a stale lock. The file's text names the holder (pid, run id,
//! command) so a refusal can say who.
//!
//! The directory is this user's own (0700, owner checked, `ddptop-gpu-locks-<uid>`): a shared
//! one in /tmp let another user plant `gpu-N.lock -> victim` and have ddptop overwrite the victim,
//! and the first user's 0755 directory silently locked everyone else out. Lock files are opened
//! with `O_NOFOLLOW` all the same. Other users' ddptops are then seen through NVML's process list
//! rather than their locks. When no lock can be taken the lease says so in one line.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Locks held for one run; dropping it releases them.
#[derive(Debug)]
pub struct GpuLease {
    _files: Vec<File>,
    /// Why some or all GPUs could not be locked (the launch goes on, guarded by NVML only).
    pub unlocked: Option<String>,
}

/// Another process found on a GPU the run wants.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub gpu: u32,
    pub pid: u32,
    /// The holder's command line (from /proc), or what its lock file says.
    pub command: String,
    /// Which check found it.
    pub seen_by: SeenBy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeenBy {
    /// Another ddptop's GPU lock.
    Lock,
    /// NVML's list of compute processes on the GPU.
    Nvml,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.seen_by {
            SeenBy::Lock => write!(
                f,
                "GPU {} is locked by ddptop pid {} ({})",
                self.gpu, self.pid, self.command
            ),
            SeenBy::Nvml => write!(
                f,
                "GPU {} runs pid {} ({})",
                self.gpu, self.pid, self.command
            ),
        }
    }
}

/// The directory of the per-GPU lock files.
pub fn lock_dir() -> PathBuf {
    std::env::var_os("DDPTOP_GPU_LOCK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let uid = nix::unistd::geteuid().as_raw();
            crate::paths::runtime_parent().join(format!("ddptop-gpu-locks-{uid}"))
        })
}

/// Physical GPU indices a run of `k` devices uses: the first `k` of `CUDA_VISIBLE_DEVICES` when
/// it lists indices (from the run's own environment first, then ddptop's), else `0..k`.
pub fn gpus_for(k: u32, visible: Option<&str>) -> Vec<u32> {
    let listed: Option<Vec<u32>> = visible
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| v.split(',').map(|s| s.trim().parse().ok()).collect());
    match listed {
        Some(l) => l.into_iter().take(k as usize).collect(),
        None => (0..k).collect(),
    }
}

/// Take the lock of every GPU in `gpus`, writing `who` into each. On a conflict nothing is held
/// and the holders (as their lock files name them) are returned.
pub fn lock(dir: &Path, gpus: &[u32], who: &str) -> Result<GpuLease, Vec<Holder>> {
    let unlocked = |why: String| {
        Some(format!(
            "GPU locks not taken ({why}); only NVML's process list guards the GPUs"
        ))
    };
    if let Err(e) = crate::paths::private_dir(dir) {
        return Ok(GpuLease {
            _files: Vec::new(),
            unlocked: unlocked(e),
        });
    }
    let mut files = Vec::new();
    let mut held_by_others = Vec::new();
    let mut problem = None;
    for &gpu in gpus {
        let path = dir.join(format!("gpu-{gpu}.lock"));
        let file = match open_lock_file(&path, true) {
            Ok(f) => f,
            Err(e) => {
                problem = Some(format!("{}: {e}", path.display()));
                continue;
            }
        };
        match file.try_lock() {
            Ok(()) => {
                let _ = file.set_len(0);
                let _ = (&file).write_all(who.as_bytes());
                files.push(file);
            }
            Err(TryLockError::WouldBlock) => held_by_others.push(holder_of(gpu, &path)),
            // A file system without flock: nothing to hold, NVML's check still runs.
            Err(TryLockError::Error(e)) => problem = Some(format!("{}: {e}", path.display())),
        }
    }
    if held_by_others.is_empty() {
        Ok(GpuLease {
            _files: files,
            unlocked: problem.and_then(unlocked),
        })
    } else {
        Err(held_by_others)
    }
}

/// A lock file, never through a symlink (`O_NOFOLLOW`), created 0600.
fn open_lock_file(path: &Path, write: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .read(true)
        .write(write)
        .create(write)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// What a lock file says of its holder: `pid\ncommand`.
fn holder_of(gpu: u32, path: &Path) -> Holder {
    let mut text = String::new();
    if let Ok(mut f) = open_lock_file(path, false) {
        use std::io::Read;
        let _ = f.read_to_string(&mut text);
    }
    let mut lines = text.lines();
    let pid = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    let command = lines.collect::<Vec<_>>().join(" ");
    Holder {
        gpu,
        pid,
        command: if command.is_empty() {
            "unknown".into()
        } else {
            command
        },
        seen_by: SeenBy::Lock,
    }
}

/// What this ddptop writes into the locks it holds.
pub fn who_am_i(run_id: &str) -> String {
    format!(
        "{}\nrun {run_id}: {}",
        std::process::id(),
        command_of(std::process::id())
    )
}

/// A process's command line from /proc, shortened for one line of text.
pub fn command_of(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let line = if words.is_empty() {
        "command unknown".to_string()
    } else {
        words.join(" ")
    };
    if line.chars().count() > 120 {
        let cut: String = line.chars().take(119).collect();
        format!("{cut}…")
    } else {
        line
    }
}

/// The compute processes NVML lists on `gpus`, as holders. `Err` when NVML is not there (no
/// driver): then only the locks guard the GPUs.
pub fn nvml_holders(gpus: &[u32]) -> Result<Vec<Holder>, String> {
    let per_gpu = crate::gpu::nvml::compute_pids(gpus)?;
    Ok(per_gpu
        .into_iter()
        .flat_map(|(gpu, pids)| {
            pids.into_iter().map(move |pid| Holder {
                gpu,
                pid,
                command: command_of(pid),
                seen_by: SeenBy::Nvml,
            })
        })
        .collect())
}

/// The one-line refusal: who holds what, and what the user can do.
pub fn refusal(holders: &[Holder]) -> String {
    let who: Vec<String> = holders.iter().map(|h| h.to_string()).collect();
    format!(
        "{}; wait for it to finish, pick other GPUs with --env CUDA_VISIBLE_DEVICES=…, or pass \
         --shared-gpus to run anyway (its figures are then marked \"GPUs shared\")",
        who.join("; ")
    )
}

/// The mark a run launched with `--shared-gpus` carries beside its figures.
pub fn shared_mark(holders: &[Holder]) -> String {
    let pids: Vec<String> = holders
        .iter()
        .map(|h| format!("GPU {} pid {}", h.gpu, h.pid))
        .collect();
    if pids.is_empty() {
        "GPUs shared (--shared-gpus)".into()
    } else {
        format!("GPUs shared with {}", pids.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_follow_cuda_visible_devices() {
        assert_eq!(gpus_for(2, None), vec![0, 1]);
        assert_eq!(gpus_for(2, Some("")), vec![0, 1]);
        assert_eq!(gpus_for(2, Some("3,5,6")), vec![3, 5]);
        // UUIDs: the indices cannot be known, the first k are assumed.
        assert_eq!(gpus_for(1, Some("GPU-abc")), vec![0]);
    }

    #[test]
    fn a_second_lock_names_the_first_holder_and_release_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock(dir.path(), &[0, 1], "4242\nrun r1: ddptop run weak --k 2").unwrap();
        let err = lock(dir.path(), &[1, 2], "77\nrun r2: other").unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!(err[0].gpu, 1);
        assert_eq!(err[0].pid, 4242);
        assert_eq!(err[0].command, "run r1: ddptop run weak --k 2");
        let line = refusal(&err);
        assert!(
            line.contains("GPU 1 is locked by ddptop pid 4242"),
            "{line}"
        );
        assert!(line.contains("--shared-gpus"), "{line}");
        // A refused lock holds nothing: GPU 2 stays free.
        assert!(lock(dir.path(), &[2], "78\nx").is_ok());
        drop(first);
        assert!(lock(dir.path(), &[0, 1], "79\ny").is_ok());
    }

    #[test]
    fn planted_symlinks_are_not_followed_and_the_refusal_is_said() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let locks = dir.path().join("locks");
        std::fs::create_dir(&locks).unwrap();
        std::os::unix::fs::symlink(&victim, locks.join("gpu-0.lock")).unwrap();
        let lease = lock(&locks, &[0, 1], "4242\nrun r1: ddptop").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let note = lease.unlocked.as_deref().unwrap_or_default();
        assert!(
            note.contains("gpu-0.lock") && note.contains("NVML"),
            "{note}"
        );
        // GPU 1 had no planted file: it is locked as usual.
        assert!(lock(&locks, &[1], "1\nx").is_err());

        // A lock directory that is a symlink (to a directory of the victim's) is not used.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let lease = lock(&link, &[0], "1\nx").unwrap();
        assert!(
            lease
                .unlocked
                .as_deref()
                .unwrap_or_default()
                .contains("not a directory"),
            "{:?}",
            lease.unlocked
        );
        assert!(!dir.path().join("gpu-0.lock").exists());
    }

    #[test]
    fn the_default_lock_dir_is_this_users() {
        if std::env::var_os("DDPTOP_GPU_LOCK_DIR").is_none() {
            let uid = nix::unistd::geteuid().as_raw();
            assert!(lock_dir().ends_with(format!("ddptop-gpu-locks-{uid}")));
        }
    }

    #[test]
    fn shared_mark_lists_the_other_processes() {
        let h = Holder {
            gpu: 0,
            pid: 9,
            command: "python train.py".into(),
            seen_by: SeenBy::Nvml,
        };
        assert_eq!(shared_mark(&[h]), "GPUs shared with GPU 0 pid 9");
        assert_eq!(shared_mark(&[]), "GPUs shared (--shared-gpus)");
    }
}
