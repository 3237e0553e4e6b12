//! Flight-recorder evidence for hung runs: trigger a dump through torch's debug pipe, then
//! summarize whatever dumps landed in the run directory (last collective per rank).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Write to every `fr_pipe_<rank>.pipe` torch created (TORCH_NCCL_DEBUG_INFO_PIPE_FILE). A pipe
/// with no reader is skipped (non-blocking open fails with ENXIO).
pub fn request_dump(run_dir: &Path) -> usize {
    let Ok(dir) = std::fs::read_dir(run_dir) else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("fr_pipe_") && name.ends_with(".pipe") {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(e.path());
            if let Ok(mut f) = f
                && f.write_all(b"1\n").is_ok()
            {
                n += 1;
            }
        }
    }
    n
}

/// Dump files in the run directory: torch's `fr_rank<N>` and the worker's `fr_dump_rank<N>.pkl`.
pub fn dump_files(run_dir: &Path) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(run_dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = dir
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (n.starts_with("fr_rank") || n.starts_with("fr_dump_rank")) && !n.ends_with(".pipe")
        })
        .collect();
    v.sort();
    v
}

/// The ranks' Python stacks at a hang: each worker's own faulthandler dump
/// (`stacks_rank<N>.txt`, written with its flight-recorder dump), and py-spy's view of every
/// local rank when py-spy is installed (`pyspy_rank<N>.txt`). One line per rank: where its
/// main thread is, and the file with the whole dump.
pub fn stacks(run_dir: &Path, pids: &[(u32, u32)]) -> Vec<String> {
    let mut lines = Vec::new();
    let pyspy = which("py-spy");
    for &(rank, pid) in pids {
        let Some(py_spy) = &pyspy else { break };
        let out = std::process::Command::new(py_spy)
            .args(["dump", "--pid", &pid.to_string()])
            .stdin(std::process::Stdio::null())
            .output();
        if let Ok(o) = out {
            let path = run_dir.join(format!("pyspy_rank{rank}.txt"));
            let mut text = o.stdout;
            text.extend_from_slice(&o.stderr);
            if std::fs::write(&path, &text).is_ok() {
                let top = String::from_utf8_lossy(&text)
                    .lines()
                    .find(|l| {
                        l.trim_start().starts_with(|c: char| c.is_alphabetic()) && l.contains('(')
                    })
                    .map(|l| l.trim().to_string())
                    .unwrap_or_default();
                lines.push(format!("rank {rank} py-spy: {top} ({})", path.display()));
            }
        }
    }
    let Ok(dir) = std::fs::read_dir(run_dir) else {
        return lines;
    };
    let mut files: Vec<PathBuf> = dir
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().starts_with("stacks_rank"))
                .unwrap_or(false)
        })
        .collect();
    files.sort();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let rank = f
            .file_stem()
            .map(|n| {
                n.to_string_lossy()
                    .trim_start_matches("stacks_rank")
                    .to_string()
            })
            .unwrap_or_default();
        let top = main_thread_top(&text).unwrap_or_else(|| "no main-thread frame".into());
        lines.push(format!("rank {rank} stack: {top} ({})", f.display()));
    }
    lines
}

/// The innermost frame of the main thread in a worker's faulthandler dump, whose first line
/// names the main thread's id (`main thread 0x…`).
pub fn main_thread_top(dump: &str) -> Option<String> {
    let main = dump
        .lines()
        .next()?
        .strip_prefix("main thread ")?
        .trim()
        .to_string();
    let mut in_main = false;
    for line in dump.lines().skip(1) {
        let t = line.trim();
        if t.starts_with("Thread ") || t.starts_with("Current thread ") {
            in_main = t.contains(&main);
            continue;
        }
        if in_main && t.starts_with("File ") {
            return Some(t.to_string());
        }
    }
    None
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

const SUMMARIZE_PY: &str = r#"
import pickle, re, sys
SIZE = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Long": 8, "Int": 4, "Byte": 1, "Char": 1, "Bool": 1}
for path in sys.argv[1:]:
    name = path.rsplit('/', 1)[-1]
    try:
        with open(path, 'rb') as f:
            d = pickle.load(f)
    except Exception as e:
        print(f"{name}: unreadable dump ({type(e).__name__})"); continue
    entries = d.get('entries', []) if isinstance(d, dict) else []
    m = re.search(r'rank_?(\d+)', name)
    who = f"rank {m.group(1)}" if m else name
    if not entries:
        print(f"{who} ({name}): no collectives recorded"); continue
    e = entries[-1]
    nbytes = 0
    for shape, dt in zip(e.get('input_sizes') or [], e.get('input_dtypes') or []):
        n = 1
        for x in shape: n *= int(x)
        nbytes += n * SIZE.get(dt, 4)
    st = (d.get('pg_status') or {}).get(str(e.get('pg_id', 0)), {})
    done = e.get('state') == 'completed'
    print(f"{who} ({name}): last collective {e.get('profiling_name')} #{e.get('collective_seq_id')} "
          f"({nbytes:,} B) {e.get('state')}{'' if done else ', not completed'}; "
          f"last completed #{st.get('last_completed_collective')}, last started #{st.get('last_started_collective')}")
"#;

/// One line per dump; a note when there is none.
pub fn summarize(run_dir: &Path) -> Vec<String> {
    let files = dump_files(run_dir);
    if files.is_empty() {
        return vec![
            "no flight-recorder dump was written (simulated runs have none; gloo records none)"
                .into(),
        ];
    }
    let python = std::env::var("DDPTOP_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(SUMMARIZE_PY)
        .args(&files)
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| format!("flight recorder {l}"))
            .collect(),
        _ => files
            .iter()
            .map(|f| format!("flight-recorder dump kept at {}", f.display()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_main_threads_innermost_frame_is_named() {
        let dump = "main thread 0x00007f0000000001\n\
Current thread 0x00007f0000000002 (most recent call first):\n  File \"/w/client.py\", line 12 in dump_stacks\n\n\
Thread 0x00007f0000000001 (most recent call first):\n  File \"/w/train.py\", line 40 in load_batch\n  File \"/w/train.py\", line 90 in main\n";
        assert_eq!(
            super::main_thread_top(dump).as_deref(),
            Some("File \"/w/train.py\", line 40 in load_batch")
        );
        assert_eq!(super::main_thread_top("no header"), None);
    }
}
