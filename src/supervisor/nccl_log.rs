//! What NCCL's `NCCL_DEBUG=INFO` log files in the run directory say: the transport it chose, and
//! which of the run's `NCCL_*` variables it read.

use std::collections::{BTreeMap, BTreeSet};
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

/// The text of every `nccl*.log` in `dir` (each capped: what we look for comes at init).
fn logs_of_run(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("nccl")
            && name.ends_with(".log")
            && let Ok(bytes) = std::fs::read(e.path())
        {
            out.push(String::from_utf8_lossy(&bytes[..bytes.len().min(4 << 20)]).into_owned());
        }
    }
    out
}

/// The network NCCL chose between nodes and its interfaces, from its init lines:
/// `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>` and
/// `NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>`. Returns (`NET/IB` or
/// `NET/Socket`, interfaces) — IB devices as `mlx5_0:1`, socket interfaces by name.
pub fn networks_in(text: &str) -> BTreeSet<(String, Vec<String>)> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        for net in ["NET/IB", "NET/Socket"] {
            let Some(i) = line.find(&format!("{net} : Using ")) else {
                continue;
            };
            let rest = &line[i + net.len() + " : Using ".len()..];
            // The OOB (bootstrap) interface after `;` is not a data path.
            let list = rest.split(';').next().unwrap_or("");
            let ifaces: Vec<String> = list
                .split_whitespace()
                .filter_map(|w| {
                    let w = w.strip_prefix('[')?;
                    let w = &w[w.find(']')? + 1..];
                    Some(match net {
                        // mlx5_0:1/IB → mlx5_0:1
                        "NET/IB" => w.split('/').next().unwrap_or(w).to_string(),
                        // eth0:10.0.0.1<0> → eth0
                        _ => w.split(':').next().unwrap_or(w).to_string(),
                    })
                })
                .filter(|w| !w.is_empty())
                .collect();
            if !ifaces.is_empty() {
                out.insert((net.to_string(), ifaces));
            }
        }
    }
    out
}

/// Read every `nccl*.log` in `dir` and summarize, e.g. `P2P/CUMEM` or `SHM/CE+SHM/direct`; a
/// network between nodes adds its interfaces: `NET/IB+P2P/CUMEM (NET/IB: mlx5_0:1,mlx5_1:1)`.
pub fn transport_of_run(dir: &Path) -> Option<String> {
    let mut all = BTreeSet::new();
    let mut nets = BTreeSet::new();
    for text in logs_of_run(dir) {
        all.extend(transports_in(&text));
        nets.extend(networks_in(&text));
    }
    if all.is_empty() {
        return None;
    }
    let mut s = all.into_iter().collect::<Vec<_>>().join("+");
    // Only the networks the channels actually use (NCCL loads IB, then falls back to sockets).
    let used: Vec<String> = nets
        .into_iter()
        .filter(|(n, _)| s.contains(n.as_str()))
        .map(|(n, ifaces)| format!("{n}: {}", ifaces.join(",")))
        .collect();
    if !used.is_empty() {
        s.push_str(&format!(" ({})", used.join("; ")));
    }
    Some(s)
}

/// Variables NCCL reports taking from the environment, with the value it logged:
/// `… NCCL INFO NCCL_P2P_DISABLE set by environment to 1`.
pub fn env_reads_in(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(i) = line.find(" set by environment to ") else {
            continue;
        };
        let Some(name) = line[..i].split_whitespace().last() else {
            continue;
        };
        if name.starts_with("NCCL_") {
            let value = line[i + " set by environment to ".len()..].trim();
            out.insert(name.to_string(), value.trim_end_matches('.').to_string());
        }
    }
    out
}

/// Variables ddptop sets for its own use, not toggles: NCCL never logs reading them.
const INTERNAL: [&str; 3] = ["NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS"];

/// For each `NCCL_*` variable in `set` (the run's environment), whether NCCL logged reading it.
/// `None` while no log shows an initialized communicator (nothing can be said yet), or when the
/// run's `NCCL_DEBUG_SUBSYS` hides the ENV lines.
pub fn toggles_read(dir: &Path, set: &[(&str, &str)]) -> Option<BTreeMap<String, bool>> {
    let hidden = set.iter().any(|(k, v)| {
        *k == "NCCL_DEBUG_SUBSYS" && !v.split(',').any(|s| matches!(s.trim(), "ENV" | "ALL"))
    });
    let logs = logs_of_run(dir);
    if hidden || !logs.iter().any(|t| t.contains("Init COMPLETE")) {
        return None;
    }
    let mut read = BTreeMap::new();
    for t in &logs {
        read.extend(env_reads_in(t));
    }
    Some(
        set.iter()
            .filter(|(k, _)| k.starts_with("NCCL_") && !INTERNAL.contains(k))
            .map(|(k, _)| (k.to_string(), read.contains_key(*k)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::nccl::ignored_note;

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

    #[test]
    fn env_reads_name_each_variable_nccl_took() {
        let log = "gpu:9:9 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1\n\
                   gpu:9:9 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.\n\
                   gpu:9:9 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>\n";
        let r = env_reads_in(log);
        assert_eq!(r.get("NCCL_P2P_DISABLE").map(String::as_str), Some("1"));
        assert_eq!(r.get("NCCL_NVLS_ENABLE").map(String::as_str), Some("0"));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn a_toggle_absent_from_the_env_lines_is_ignored_once_init_completed() {
        let dir = tempfile::tempdir().unwrap();
        let set = [
            ("NCCL_P2P_DISABLE", "1"),
            ("NCCL_SHM_USE_CUDA_MEMCPY", "1"),
            ("NCCL_DEBUG", "INFO"),
        ];
        std::fs::write(
            dir.path().join("nccl.gpu.1.log"),
            "x NCCL INFO NCCL_P2P_DISABLE set by environment to 1\n",
        )
        .unwrap();
        // Before init completes nothing is judged.
        assert_eq!(toggles_read(dir.path(), &set), None);
        std::fs::write(
            dir.path().join("nccl.gpu.2.log"),
            "x NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 1 - Init COMPLETE\n",
        )
        .unwrap();
        let read = toggles_read(dir.path(), &set).unwrap();
        assert_eq!(read.get("NCCL_P2P_DISABLE"), Some(&true));
        assert_eq!(read.get("NCCL_SHM_USE_CUDA_MEMCPY"), Some(&false));
        assert!(!read.contains_key("NCCL_DEBUG"));
        assert_eq!(
            ignored_note(&read).as_deref(),
            Some("NCCL ignored NCCL_SHM_USE_CUDA_MEMCPY")
        );
        // A subsystem filter without ENV hides the lines: no verdict rather than a false one.
        let hidden = [("NCCL_P2P_DISABLE", "1"), ("NCCL_DEBUG_SUBSYS", "INIT")];
        assert_eq!(toggles_read(dir.path(), &hidden), None);
    }

    #[test]
    fn parses_networks_between_nodes() {
        let log = "n1:7:7 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>\n\
                   n1:7:7 [0] NCCL INFO Using network IB\n\
                   n1:7:7 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]ib0:10.1.0.1<0>\n\
                   n1:7:7 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA";
        let nets: Vec<_> = networks_in(log).into_iter().collect();
        assert_eq!(
            nets,
            vec![
                (
                    "NET/IB".to_string(),
                    vec!["mlx5_0:1".into(), "mlx5_1:1".into()]
                ),
                ("NET/Socket".to_string(), vec!["eth0".into(), "ib0".into()]),
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("nccl.n1.7.log"), log).unwrap();
        assert_eq!(
            transport_of_run(dir.path()).as_deref(),
            Some("NET/IB (NET/IB: mlx5_0:1,mlx5_1:1)"),
            "the socket interfaces NCCL listed but did not use are left out"
        );
        let sock = "x NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n\
                    x NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0";
        std::fs::write(dir.path().join("nccl.n1.7.log"), sock).unwrap();
        assert_eq!(
            transport_of_run(dir.path()).as_deref(),
            Some("NET/Socket (NET/Socket: eth0)")
        );
    }
}
