//! Where data lives: XDG config, data and runtime directories, each overridable for tests.

use std::path::PathBuf;

/// `--data-dir` > `DDPTOP_DATA_DIR` > `$XDG_DATA_HOME/ddptop` > `~/.local/share/ddptop`.
pub fn data_dir(flag: Option<&std::path::Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("DDPTOP_DATA_DIR").filter(|s| !s.is_empty()) {
        return PathBuf::from(p);
    }
    base()
        .map(|b| b.data_dir().join("ddptop"))
        .unwrap_or_else(|| std::env::temp_dir().join("ddptop-data"))
}

/// Where the runs' directories live in a data directory: `<data dir>/runs`, one `<run id>`
/// directory each (output.log, command.txt, NCCL logs, flight-recorder dumps, steps.jsonl).
pub fn runs_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("runs")
}

/// `--config` > `DDPTOP_CONFIG` > `$XDG_CONFIG_HOME/ddptop/config.toml`.
pub fn config_file(flag: Option<&std::path::Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("DDPTOP_CONFIG").filter(|s| !s.is_empty()) {
        return PathBuf::from(p);
    }
    config_dir().join("config.toml")
}

pub fn config_dir() -> PathBuf {
    base()
        .map(|b| b.config_dir().join("ddptop"))
        .unwrap_or_else(|| std::env::temp_dir().join("ddptop-config"))
}

/// Parent of the private socket directory: `$XDG_RUNTIME_DIR`, else the temp dir. Socket paths
/// must stay under 108 bytes, so callers check the final length.
pub fn runtime_parent() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir)
}

use etcetera::BaseStrategy;

/// Create `dir` at mode 0700, or accept an existing one only when it is a real directory (not
/// a symlink) owned by this user; a group- or world-accessible one of ours is closed to 0700.
/// Directories in a shared temp dir can be planted by other users before ddptop runs: one they
/// own (or a symlink they placed) would let them swap what ddptop writes or binds there.
pub fn private_dir(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.file_type().is_dir() {
        return Err(format!("{} is not a directory (a symlink?)", dir.display()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "{} belongs to uid {}, not to this user (uid {me})",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
    }
    Ok(())
}

/// A directory inside a world-writable one (`/tmp`, where the data and config directories fall
/// back to without a home directory) must be this user's own, real directory: anyone can create
/// `/tmp/ddptop-data` or `/tmp/ddptop-config` first, and ddptop would then write its runs into,
/// or read its config (a launch environment) from, a place another user controls. Elsewhere
/// (a home directory, a directory the user named) nothing is checked here. A `dir` that does
/// not exist yet passes (whoever creates it then is this process).
pub fn not_planted(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    let shared = std::fs::metadata(parent).is_ok_and(|m| m.mode() & 0o002 != 0);
    if !shared {
        return Ok(());
    }
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Ok(());
    };
    if !meta.file_type().is_dir() {
        return Err(format!(
            "{} is not a directory (a symlink?) in the shared {}: refusing it; set DDPTOP_DATA_DIR / DDPTOP_CONFIG or HOME",
            dir.display(),
            parent.display()
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "{} in the shared {} belongs to uid {}, not to this user (uid {me}): refusing it; set DDPTOP_DATA_DIR / DDPTOP_CONFIG or HOME",
            dir.display(),
            parent.display(),
            meta.uid()
        ));
    }
    Ok(())
}

/// For tests of `not_planted` and its callers: a world-writable, sticky `tmp` under `root` (as
/// `/tmp` is) holding an empty directory `name`; with `nobody_owns` (root only), handed to uid
/// 65534 as another user's would be.
#[cfg(test)]
pub(crate) fn dir_in_a_shared_parent(
    root: &std::path::Path,
    name: &str,
    nobody_owns: bool,
) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let shared = root.join("tmp");
    if !shared.exists() {
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    let dir = shared.join(name);
    std::fs::create_dir(&dir).unwrap();
    if nobody_owns {
        std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
    }
    dir
}

fn base() -> Option<impl BaseStrategy> {
    etcetera::choose_base_strategy().ok()
}

/// The Python workers package directory (`workers/`, holding `ddptop_worker`).
/// `--workers-dir` > `DDPTOP_WORKERS_DIR` > next to the executable's repo > the source tree this
/// binary was built from. The current directory is never searched by itself: a `workers/` someone
/// left (or planted) where ddptop happens to be started would run as the user's own code; name
/// it with `--workers-dir ./workers` when that is wanted.
pub fn workers_dir(flag: Option<&std::path::Path>) -> Option<PathBuf> {
    let has_pkg = |p: &std::path::Path| p.join("ddptop_worker").join("__init__.py").is_file();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = flag {
        candidates.push(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("DDPTOP_WORKERS_DIR").filter(|s| !s.is_empty()) {
        candidates.push(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        for anc in exe.ancestors().skip(1).take(4) {
            candidates.push(anc.join("workers"));
        }
    }
    candidates.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workers"));
    // Absolute: the launcher runs in the run's directory, where `./workers` means nothing.
    candidates
        .into_iter()
        .find(|p| has_pkg(p))
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
}

/// This machine's name, for the header.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_dirs_are_created_0700_and_planted_ones_refused() {
        let parent = tempfile::tempdir().unwrap();
        let fresh = parent.path().join("a");
        private_dir(&fresh).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&fresh), 0o700);
        // One of ours left open by an older ddptop is closed.
        let open = parent.path().join("b");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&open).unwrap();
        assert_eq!(mode(&open), 0o700);
        // A symlink planted in its place (to a directory of ours) is not followed.
        let link = parent.path().join("c");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        let e = private_dir(&link).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
        // A directory of another user (root's /, seen from an unprivileged user, or nobody's
        // when root): refused.
        if nix::unistd::geteuid().is_root() {
            let theirs = parent.path().join("d");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let e = private_dir(&theirs).unwrap_err();
            assert!(e.contains("belongs to uid 65534"), "{e}");
        } else {
            assert!(private_dir(std::path::Path::new("/")).is_err());
        }
    }

    /// Issue 45: the data and config directories' fallbacks under a world-writable directory
    /// are refused when another user made them (or planted a symlink); ours, and any directory
    /// in a private parent, pass.
    #[test]
    fn a_data_or_config_dir_planted_in_a_shared_parent_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let shared = root.path().join("tmp");
        assert!(
            not_planted(&shared.join("ddptop-data")).is_ok(),
            "not there yet: whoever creates it is us"
        );
        let mine = dir_in_a_shared_parent(root.path(), "ddptop-data", false);
        assert!(not_planted(&mine).is_ok());
        let link = shared.join("ddptop-config");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        let e = not_planted(&link).unwrap_err();
        assert!(
            e.contains("not a directory") && e.contains("refusing"),
            "{e}"
        );
        // In a private parent nothing is second-guessed (a directory the user named).
        let private = root.path().join("home");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let named = private.join("link");
        std::os::unix::fs::symlink(&mine, &named).unwrap();
        assert!(not_planted(&named).is_ok());
        if nix::unistd::geteuid().is_root() {
            let theirs = dir_in_a_shared_parent(root.path(), "theirs", true);
            let e = not_planted(&theirs).unwrap_err();
            assert!(e.contains("belongs to uid 65534"), "{e}");
        }
    }
}
