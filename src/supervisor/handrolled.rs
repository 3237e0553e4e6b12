//! Launching the hand-rolled worker (`ddptop-handrolled`, workers/handrolled): a Rust binary on
//! libtorch, so no torchrun and no Python on its command line, but it loads torch's shared
//! libraries at run time: ddptop points LD_LIBRARY_PATH at `torch/lib` of the python it uses.

use crate::protocol::Backend;
use crate::run::{DataPath, RunSpec};
use std::path::{Path, PathBuf};
use std::process::Stdio;

pub const BINARY: &str = "ddptop-handrolled";

/// The one line that says how to build the worker (it needs libtorch, so `cargo build` at the
/// repository root leaves it out). It builds against the torch of the python ddptop uses,
/// wherever that lives (a repository .venv or not); with none known, any python with torch.
pub fn build_hint(python: Option<&Path>) -> String {
    let path = python.and_then(Path::parent).map_or_else(
        || "/path/to/a/python-with-torch/bin".to_string(),
        |d| d.display().to_string(),
    );
    format!(
        "the hand-rolled worker is not built: run `PATH={path}:$PATH LIBTORCH_USE_PYTORCH=1 cargo build --release -p ddptop-handrolled` in the ddptop repository (its python must have torch; or set DDPTOP_HANDROLLED to a built worker)"
    )
}

/// Where the worker binary is: `$DDPTOP_HANDROLLED`, else beside this executable (how the
/// release binaries are carried together), else `target/{release,debug}` of the repository
/// this executable or the current directory is in.
pub fn find_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DDPTOP_HANDROLLED").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let exe = std::env::current_exe().ok();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = exe.as_deref().and_then(Path::parent) {
        candidates.push(dir.join(BINARY));
    }
    let roots = exe
        .iter()
        .flat_map(|e| e.ancestors().skip(1).take(4).map(Path::to_path_buf))
        .chain(std::env::current_dir().ok());
    for root in roots {
        for profile in ["release", "debug"] {
            candidates.push(root.join("target").join(profile).join(BINARY));
        }
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// `torch/lib` of `python`'s torch, found without importing torch (which takes seconds).
pub fn torch_lib_dir(python: &Path) -> Result<PathBuf, String> {
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import importlib.util, os; s = importlib.util.find_spec('torch'); print(os.path.join(os.path.dirname(s.origin), 'lib') if s else '')",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !dir.join("libtorch_cpu.so").is_file() {
        return Err(format!(
            "{} has no torch with its libraries (the hand-rolled worker loads torch/lib at run time; pip install torch==2.11.0)",
            python.display()
        ));
    }
    Ok(dir)
}

/// Check what the launch needs and set its environment: the worker binary must exist (else the
/// build line), torch/lib goes first on LD_LIBRARY_PATH.
pub fn prepare(
    spec: &RunSpec,
    python: &Path,
    set: &mut impl FnMut(&str, String),
) -> anyhow::Result<()> {
    if spec.data_path != DataPath::Device {
        anyhow::bail!(
            "the hand-rolled worker keeps its data on the device: use --data-path device with handrolled"
        );
    }
    if find_binary().is_none() {
        anyhow::bail!("{}", build_hint(Some(python)));
    }
    let lib = torch_lib_dir(python).map_err(anyhow::Error::msg)?;
    let mut path = lib.display().to_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(':');
        path.push_str(&old.to_string_lossy());
    }
    set("LD_LIBRARY_PATH", path);
    Ok(())
}

/// `ddptop-handrolled --k K --device cpu|cuda --dispatch … --reduce … …`: one process for all k.
pub fn argv(spec: &RunSpec, data_flags: Vec<String>) -> Vec<String> {
    let bin = find_binary().unwrap_or_else(|| PathBuf::from(BINARY));
    let device = if spec.backend == Backend::Nccl {
        "cuda"
    } else {
        "cpu"
    };
    let mut v = vec![bin.display().to_string()];
    for (flag, value) in [
        ("--k", spec.k.to_string()),
        ("--device", device.to_string()),
        (
            "--dispatch",
            spec.family.hand().dispatch.as_str().to_string(),
        ),
        ("--reduce", spec.family.hand().reduce.as_str().to_string()),
        ("--model", spec.model.as_str().to_string()),
        ("--batch", spec.batch.to_string()),
        ("--epochs", spec.epochs.to_string()),
        ("--samples", spec.samples.to_string()),
    ] {
        v.push(flag.to_string());
        v.push(value);
    }
    v.extend(data_flags);
    v
}
