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

/// The profiler interfaces the plugin exports (`ncclProfiler_v5`, `ncclProfiler_v4`).
pub const INTERFACES: [u32; 2] = [5, 4];

/// Whether the NCCL a rank mapped can load the plugin, judged by symbol (issue 45): NCCL finds
/// a plugin's table with `dlsym("ncclProfiler_vN")`, newest it knows first, so the names in its
/// library (`hello.nccl_lib`, read by the worker) are the interfaces it can use, whatever its
/// version number. `Some(line)` when it names neither of the plugin's.
pub fn cannot_load(lib: &crate::protocol::NcclLib) -> Option<String> {
    if lib.profiler.iter().any(|v| INTERFACES.contains(v)) {
        return None;
    }
    let names = if lib.profiler.is_empty() {
        "no ncclProfiler_vN name at all".to_string()
    } else {
        let v: Vec<String> = lib.profiler.iter().map(|v| format!("v{v}")).collect();
        format!("ncclProfiler_{} only", v.join("/"))
    };
    Some(format!(
        "NCCL profiler plugin off: this rank's NCCL ({}) looks up {names}, not the plugin's ncclProfiler_v5/v4 (NCCL 2.27 and later); communication comes from ddptop's Python comm hook",
        lib.path
    ))
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
    fn whether_an_nccl_can_load_the_plugin_is_read_from_its_symbol_names() {
        let lib = |v: &[u32]| crate::protocol::NcclLib {
            path: "/x/libnccl.so.2".into(),
            profiler: v.to_vec(),
        };
        assert_eq!(cannot_load(&lib(&[5, 4, 3, 2, 1])), None, "NCCL 2.28: v5");
        assert_eq!(cannot_load(&lib(&[4, 3, 2, 1])), None, "NCCL 2.27: v4");
        let old = cannot_load(&lib(&[3, 2, 1])).unwrap();
        assert!(
            old.contains("(/x/libnccl.so.2) looks up ncclProfiler_v3/v2/v1 only"),
            "{old}"
        );
        assert!(
            cannot_load(&lib(&[]))
                .unwrap()
                .contains("no ncclProfiler_vN name")
        );
    }
}
