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
