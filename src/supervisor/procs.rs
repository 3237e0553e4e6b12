//! Process liveness and signalling by pid and process group, read from /proc.
//! Never by name: ddptop only touches processes it started or that said `hello` to it.

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// (pid, pgid, state) of a process, from /proc/PID/stat.
pub fn stat(pid: u32) -> Option<(u32, u32, char)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parens: split after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    let _ppid = it.next()?;
    let pgid = it.next()?.parse().ok()?;
    Some((pid, pgid, state))
}

/// (parent pid, start time in clock ticks since boot) of a process, from /proc/PID/stat.
fn parent_and_start(pid: u32) -> Option<(u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After comm: state(0) ppid(1) … starttime is field 22 of the line, index 19 here.
    Some((fields.get(1)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

/// A process that may be signalled: a pid together with its start time, so that a pid the
/// kernel has since given to another process is recognised as someone else's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub pid: u32,
    start: u64,
}

impl Known {
    /// `pid` when it is `ancestor` or descends from it (the /proc parent chain), as it is now.
    /// A rank's `hello` names its pid; that claim is only believed for a process of the run's
    /// own tree, or a rank could have ddptop signal any process of the user's at stop.
    pub fn descendant(pid: u32, ancestor: u32) -> Option<Known> {
        if pid <= 1 {
            return None;
        }
        let (_, start) = parent_and_start(pid)?;
        let mut p = pid;
        // Bounded: a parent chain is never deeper than this, and a race must not loop.
        for _ in 0..256 {
            if p == ancestor {
                return Some(Known { pid, start });
            }
            if p <= 1 {
                return None;
            }
            p = parent_and_start(p)?.0;
        }
        None
    }

    /// Still the same process (not gone, not a reused pid).
    pub fn current(&self) -> bool {
        parent_and_start(self.pid).is_some_and(|(_, s)| s == self.start)
    }
}

/// Alive = exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    matches!(stat(pid), Some((_, _, st)) if st != 'Z' && st != 'X')
}

/// Live (non-zombie) pids whose process group is one of `pgids`.
pub fn members(pgids: &[u32]) -> Vec<u32> {
    if pgids.is_empty() {
        return Vec::new();
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .filter(|(_, pg, st)| pgids.contains(pg) && *st != 'Z' && *st != 'X')
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Every live process of the run: members of its groups plus the worker pids themselves.
pub fn survivors(pgids: &[u32], pids: &[u32]) -> Vec<u32> {
    let mut v = members(pgids);
    v.extend(pids.iter().copied().filter(|p| alive(*p)));
    v.sort_unstable();
    v.dedup();
    v
}

/// Signal a group when `pgid` really leads one, else just the pid (it may have been reused or
/// may not lead a group).
pub fn signal_group_or_pid(pid: u32, sig: Signal) {
    match stat(pid) {
        Some((_, pgid, _)) if pgid == pid => {
            let _ = killpg(Pid::from_raw(pid as i32), sig);
        }
        Some(_) => {
            let _ = kill(Pid::from_raw(pid as i32), sig);
        }
        None => {}
    }
}

/// The last signal a stop needed: `none`, `SIGINT`, `SIGTERM`, `SIGKILL` (also its `Display`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    strum::IntoStaticStr,
    strum::Display,
    strum::EnumString,
    strum::VariantArray,
)]
#[strum(serialize_all = "UPPERCASE")]
pub enum Escalation {
    /// Nothing was left to signal.
    #[strum(serialize = "none")]
    None,
    Sigint,
    Sigterm,
    Sigkill,
}

impl Escalation {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Stop a run's process tree: SIGINT → grace → SIGTERM → grace → SIGKILL, to the launcher's
/// group and to every worker's own group. Returns the last signal needed and any survivors.
pub async fn stop_tree(
    launcher_pgid: Option<u32>,
    worker_pids: &[u32],
    graces: [Duration; 2],
) -> (Escalation, Vec<u32>) {
    let mut groups: Vec<u32> = launcher_pgid.into_iter().collect();
    groups.extend(worker_pids.iter().copied());
    groups.sort_unstable();
    groups.dedup();
    let steps = [
        (Signal::SIGINT, Escalation::Sigint, graces[0]),
        (Signal::SIGTERM, Escalation::Sigterm, graces[1]),
        (Signal::SIGKILL, Escalation::Sigkill, Duration::from_secs(3)),
    ];
    // The signal sent before this one: what it took when the tree is found gone.
    let mut sent = Escalation::None;
    for (sig, level, grace) in steps {
        if survivors(&groups, worker_pids).is_empty() {
            return (sent, Vec::new());
        }
        for &g in &groups {
            signal_group_or_pid(g, sig);
        }
        sent = level;
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if survivors(&groups, worker_pids).is_empty() {
                return (level, Vec::new());
            }
        }
    }
    (Escalation::Sigkill, survivors(&groups, worker_pids))
}

/// Raise the soft open-files limit to the hard one, so bursts of connections do not hit EMFILE.
pub fn raise_nofile_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard.min(65_536), hard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names as the hand-written table spelled them (issue 49), both ways and as Display.
    #[test]
    fn escalation_names_are_the_old_names_and_round_trip() {
        use strum::VariantArray;
        let names: Vec<&str> = Escalation::VARIANTS.iter().map(|e| e.as_str()).collect();
        assert_eq!(names, ["none", "SIGINT", "SIGTERM", "SIGKILL"]);
        for e in Escalation::VARIANTS {
            assert_eq!(e.as_str().parse::<Escalation>(), Ok(*e));
            assert_eq!(e.to_string(), e.as_str());
        }
    }

    #[test]
    fn only_the_launchers_own_tree_is_known() {
        // A "launcher" with a child of its own, and an unrelated process beside it.
        let mut launcher = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(launcher.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let child: u32 = line.trim().parse().unwrap();
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let lp = launcher.id();
        let k = Known::descendant(child, lp).expect("the launcher's child");
        assert!(k.current());
        assert!(Known::descendant(lp, lp).is_some(), "the launcher itself");
        assert_eq!(
            Known::descendant(other.id(), lp),
            None,
            "an unrelated process"
        );
        assert_eq!(Known::descendant(1, lp), None);
        assert_eq!(
            Known::descendant(std::process::id(), lp),
            None,
            "an ancestor"
        );
        let _ = nix::sys::signal::kill(Pid::from_raw(child as i32), Signal::SIGKILL);
        let _ = launcher.wait();
        let t0 = Instant::now();
        while k.current() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!k.current(), "a gone process is not current");
        let _ = other.kill();
        let _ = other.wait();
    }
}
