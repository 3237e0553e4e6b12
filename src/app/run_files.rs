//! Where a run's files are, and why ddptop set each variable of an attached job's
//! environment: what the run detail lists, computed here so that `ui` reads no store,
//! supervisor or paths (docs/architecture.md: `ui` draws the view model only).

use std::path::{Path, PathBuf};

/// A run's folder under the data directory and the files in it the detail names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFiles {
    pub dir: PathBuf,
    pub output: PathBuf,
    pub command: PathBuf,
    /// The per-step archive, and what it holds.
    pub steps: PathBuf,
    pub steps_what: &'static str,
}

impl RunFiles {
    pub fn of(data_dir: &Path, run_id: &str) -> Self {
        let dir = crate::paths::runs_dir(data_dir).join(run_id);
        RunFiles {
            output: dir.join("output.log"),
            command: dir.join("command.txt"),
            steps: dir.join(crate::store::ARCHIVE_FILE),
            steps_what: crate::store::ARCHIVE_WHAT,
            dir,
        }
    }
}

/// Why ddptop added `var` to an attached job's environment (`None`: it did not).
pub fn why_set(var: &str) -> Option<&'static str> {
    crate::supervisor::launch::why_set(var)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_sit_in_the_runs_folder() {
        let f = RunFiles::of(Path::new("/d"), "r1");
        assert_eq!(f.dir, Path::new("/d/runs/r1"));
        assert_eq!(f.output, Path::new("/d/runs/r1/output.log"));
        assert_eq!(f.command, Path::new("/d/runs/r1/command.txt"));
        assert_eq!(
            f.steps,
            Path::new("/d/runs/r1").join(crate::store::ARCHIVE_FILE)
        );
        assert!(why_set("PYTHONPATH").is_some());
        assert!(why_set("HOME").is_none());
    }
}
