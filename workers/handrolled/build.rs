//! torch-sys asks for `-ltorch_cuda`, but the linker's `--as-needed` drops it (nothing refers to
//! it by symbol), so libtorch would see no GPU at run time. Keep it linked when the libtorch we
//! build against has it, and record that libtorch's version for the `hello` message.

use std::path::PathBuf;
use std::process::Command;

/// The interpreter torch-sys asks with LIBTORCH_USE_PYTORCH=1 (`python` in a venv, else `python3`).
fn python() -> &'static str {
    if std::env::var_os("VIRTUAL_ENV").is_some() {
        "python"
    } else {
        "python3"
    }
}

/// (torch/lib directory, torch.__version__) from LIBTORCH or the python on PATH.
fn torch_info() -> Option<(PathBuf, String)> {
    if let Ok(dir) = std::env::var("LIBTORCH") {
        return Some((PathBuf::from(dir).join("lib"), String::new()));
    }
    let out = Command::new(python())
        .args([
            "-c",
            "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib')); print(torch.__version__)",
        ])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut lines = text.lines();
    Some((PathBuf::from(lines.next()?), lines.next()?.to_string()))
}

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_USE_PYTORCH");
    println!("cargo:rerun-if-env-changed=VIRTUAL_ENV");
    let (lib, version) = torch_info().unwrap_or_default();
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg-bins=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
    println!("cargo:rustc-env=DDPTOP_TORCH_VERSION={version}");
}
