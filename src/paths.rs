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

fn base() -> Option<impl BaseStrategy> {
    etcetera::choose_base_strategy().ok()
}

/// The Python workers package directory (`workers/`, holding `ddptop_worker`).
/// `--workers-dir` > `DDPTOP_WORKERS_DIR` > `./workers` > next to the executable's repo > the
/// source tree this binary was built from.
pub fn workers_dir(flag: Option<&std::path::Path>) -> Option<PathBuf> {
    let has_pkg = |p: &std::path::Path| p.join("ddptop_worker").join("__init__.py").is_file();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = flag {
        candidates.push(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("DDPTOP_WORKERS_DIR").filter(|s| !s.is_empty()) {
        candidates.push(PathBuf::from(p));
    }
    if let Ok(cwd) = std::env::current_dir() {
        candidates.push(cwd.join("workers"));
    }
    if let Ok(exe) = std::env::current_exe() {
        for anc in exe.ancestors().skip(1).take(4) {
            candidates.push(anc.join("workers"));
        }
    }
    candidates.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workers"));
    candidates.into_iter().find(|p| has_pkg(p))
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
