//! The transport NCCL chose, parsed from its `NCCL_DEBUG=INFO` log files in the run directory.

use std::collections::BTreeSet;
use std::path::Path;

/// Distinct transports from lines like `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`,
/// reduced to the first two components (`P2P/CUMEM`, `SHM/CE`, `NET/Socket`).
pub fn transports_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let Some(i) = line.find(" via ") else {
            continue;
        };
        let rest = &line[i + 5..];
        let word = rest.split_whitespace().next().unwrap_or("");
        let kind = word.split('/').next().unwrap_or("");
        if matches!(kind, "P2P" | "SHM" | "NET" | "COLLNET") {
            let two: Vec<&str> = word.split('/').take(2).collect();
            out.insert(two.join("/"));
        }
    }
    out
}

/// Read every `nccl*.log` in `dir` and summarize, e.g. `P2P/CUMEM` or `SHM/CE+SHM/direct`.
pub fn transport_of_run(dir: &Path) -> Option<String> {
    let mut all = BTreeSet::new();
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("nccl") && name.ends_with(".log") {
            // Cap the read: transport lines come at init, near the top.
            if let Ok(bytes) = std::fs::read(e.path()) {
                let text = String::from_utf8_lossy(&bytes[..bytes.len().min(4 << 20)]);
                all.extend(transports_in(&text));
            }
        }
    }
    (!all.is_empty()).then(|| all.into_iter().collect::<Vec<_>>().join("+"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_transports() {
        let log = "gpu:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n\
                   gpu:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n\
                   x NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/CE/direct\n\
                   x NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n\
                   x NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE";
        let t: Vec<String> = transports_in(log).into_iter().collect();
        assert_eq!(t, vec!["NET/Socket", "P2P/CUMEM", "SHM/CE"]);
    }
}
