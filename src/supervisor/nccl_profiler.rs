//! Where ddptop's NCCL profiler plugin is, for `NCCL_PROFILER_PLUGIN` on its NCCL launches
//! (docs/profiler.md). NCCL accepts a path there; ddptop passes the absolute path of the library
//! it found, so nothing has to be on `LD_LIBRARY_PATH`.

use std::path::{Path, PathBuf};

/// The variable NCCL reads.
pub const ENV: &str = "NCCL_PROFILER_PLUGIN";
/// Set to `1` on a launch whose NCCL loads ddptop's plugin (not the user's own): the attach
/// bootstrap then leaves DDP's all-reduce alone on NCCL (workers/ddptop_worker/attach.py).
/// Not `DDPTOP_NCCL_PROFILER`, which names the plugin's file for ddptop itself.
pub const ON_ENV: &str = "DDPTOP_NCCL_PLUGIN";
/// The file `cargo build` makes (Cargo's library names cannot hold `-`), and the name NCCL
/// itself looks for when `NCCL_PROFILER_PLUGIN=ddptop` (`libnccl-profiler-<name>.so`).
pub const FILES: [&str; 2] = ["libnccl_profiler_ddptop.so", "libnccl-profiler-ddptop.so"];

/// The plugin: `$DDPTOP_NCCL_PROFILER` when set (a path), else beside the ddptop binary (where
/// `cargo build` puts both), else `None`.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DDPTOP_NCCL_PROFILER").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    beside(exe.parent()?)
}

/// The plugin in `dir`, by either of its names.
pub fn beside(dir: &Path) -> Option<PathBuf> {
    FILES.iter().map(|f| dir.join(f)).find(|p| p.is_file())
}

/// NCCL versions that can load the plugin: `ncclProfiler_v4` from 2.26, `v5` from 2.28.3.
/// `Some(line)` saying why the plugin stays off for an older NCCL (`major.minor.patch`).
pub fn too_old(nccl: &str) -> Option<String> {
    let v: Vec<u32> = nccl
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(3)
        .filter_map(|s| s.parse().ok())
        .collect();
    let (major, minor) = (*v.first()?, *v.get(1)?);
    ((major, minor) < (2, 26)).then(|| {
        format!(
            "NCCL profiler plugin off: NCCL {nccl} predates the profiler interfaces it exports (v4 from NCCL 2.26, v5 from 2.28.3); collectives come from the worker's hooks only"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_beside_the_binary_by_either_name() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(beside(d.path()), None);
        std::fs::write(d.path().join("libnccl-profiler-ddptop.so"), b"").unwrap();
        assert_eq!(
            beside(d.path()),
            Some(d.path().join("libnccl-profiler-ddptop.so"))
        );
    }

    #[test]
    fn versions_before_the_v4_interface_say_why_it_is_off() {
        assert!(too_old("2.25.1").unwrap().contains("NCCL 2.25.1 predates"));
        assert_eq!(too_old("2.26.2"), None);
        assert_eq!(too_old("2.28.9"), None);
        assert!(too_old("(2, 21, 5)").is_some(), "torch's tuple spelling");
        assert_eq!(too_old("unknown"), None);
    }
}
