//! End to end: the real binary in a real terminal emulator (tmux, on a private server), with
//! the simulated backend, an isolated data dir and config. Keys in, screens out; afterwards no
//! process of the test may be left, checked by pid and process group (never by name).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ddptop");

struct Tmux {
    server: String,
    /// Every pid seen under the dashboard (to check and, on failure, to clean up).
    seen: BTreeSet<(u32, u64)>,
    pgids: BTreeSet<u32>,
}

impl Tmux {
    fn new(tag: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            // A test that skips where it must run is a test that passes vacuously.
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must provide tmux (the end-to-end tests need a real terminal)"
            );
            eprintln!("tmux not installed: skipping");
            return None;
        }
        Some(Tmux {
            server: format!("ddptop-e2e-{tag}-{}", std::process::id()),
            seen: BTreeSet::new(),
            pgids: BTreeSet::new(),
        })
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.server, "-f", "/dev/null"])
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("tmux runs")
    }

    fn start(&self, cmd: &str) {
        let o = self.run(&["new-session", "-d", "-s", "t", "-x", "120", "-y", "40", cmd]);
        assert!(o.status.success(), "tmux new-session: {o:?}");
    }

    fn keys(&self, k: &[&str]) {
        let mut a = vec!["send-keys", "-t", "t"];
        a.extend_from_slice(k);
        assert!(self.run(&a).status.success());
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    fn display(&self, fmt: &str) -> String {
        String::from_utf8_lossy(&self.run(&["display-message", "-p", "-t", "t", fmt]).stdout)
            .trim()
            .to_string()
    }

    /// Wait until `pred(screen)`; on timeout, fail showing the screen.
    fn wait_for(
        &mut self,
        what: &str,
        secs: u64,
        root: Option<u32>,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(r) = root {
                self.record_tree(r);
            }
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            if Instant::now() > end {
                panic!("timed out waiting for {what}; screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Remember `root`'s descendants (pid + start time) and their process groups.
    fn record_tree(&mut self, root: u32) {
        for p in descendants(root) {
            if let Some(st) = stat(p) {
                self.seen.insert((p, st.start));
                self.pgids.insert(st.pgrp);
            }
        }
    }

    /// Pids we saw that are still the same processes, plus anything left in their groups.
    fn leftovers(&self) -> Vec<u32> {
        let mut left: Vec<u32> = self
            .seen
            .iter()
            .filter(|(p, start)| stat(*p).is_some_and(|s| s.start == *start && s.state != 'Z'))
            .map(|(p, _)| *p)
            .collect();
        for p in all_pids() {
            if let Some(s) = stat(p)
                && self.pgids.contains(&s.pgrp)
                && s.state != 'Z'
                && !left.contains(&p)
            {
                left.push(p);
            }
        }
        left
    }

    fn assert_no_leftovers(&self, within: Duration) {
        let end = Instant::now() + within;
        loop {
            let left = self.leftovers();
            if left.is_empty() {
                return;
            }
            if Instant::now() > end {
                let info: Vec<String> = left
                    .iter()
                    .map(|p| format!("{p}: {}", cmdline(*p)))
                    .collect();
                panic!("processes left behind: {info:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
        // Only on failure is anything still here: clean up what this test started, by pid.
        for p in self.leftovers() {
            unsafe {
                libc::kill(p as i32, libc::SIGKILL);
            }
        }
    }
}

struct Stat {
    ppid: u32,
    pgrp: u32,
    start: u64,
    state: char,
}

fn stat(pid: u32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces: fields start after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
    })
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

fn descendants(root: u32) -> Vec<u32> {
    let table: Vec<(u32, u32)> = all_pids()
        .into_iter()
        .filter_map(|p| stat(p).map(|s| (p, s.ppid)))
        .collect();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            table
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    out
}

fn ddptop_cmd(dir: &Path, speed: &str) -> String {
    format!(
        "{BIN} --backend sim --sim-speed {speed} --data-dir {} --config {}",
        dir.join("data").display(),
        dir.join("config.toml").display()
    )
}

/// The pane's shell's child: the dashboard.
fn child_of(shell: u32) -> Option<u32> {
    all_pids()
        .into_iter()
        .find(|p| stat(*p).is_some_and(|s| s.ppid == shell))
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("ddptop-e2e-{}-{}", std::process::id(), rand_tag()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn rand_tag() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

#[test]
fn launch_probe_quit_restores_terminal_and_leaves_nothing() {
    let Some(mut t) = Tmux::new("main") else {
        return;
    };
    let dir = tempdir();
    t.start("sh");
    let shell: u32 = t.display("#{pane_pid}").parse().unwrap();
    t.keys(&[
        &format!("{}; echo EXIT=$?", ddptop_cmd(&dir, "20")),
        "Enter",
    ]);
    t.wait_for("the dashboard", 30, None, |s| {
        s.contains("Runs") && s.contains("SIMULATED")
    });
    let dash = child_of(shell).expect("ddptop runs under the shell");
    assert_eq!(
        t.display("#{alternate_on}"),
        "1",
        "fullscreen on the alternate screen"
    );

    // k=2 weak run: it completes with a number.
    t.keys(&["2"]);
    let s = t.wait_for("the k=2 run to complete", 120, Some(dash), |s| {
        s.lines().any(|l| {
            l.contains("✓ completed")
                && l.contains(" weak ")
                && l.split("completed")
                    .nth(1)
                    .is_some_and(|r| r.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        })
    });
    assert!(s.contains("SIMULATED"), "{s}");
    assert!(t.seen.len() > 2, "saw the workers: {:?}", t.seen);

    // The probe, then its k=1 control: figures with their labels.
    t.keys(&["p"]);
    let s = t.wait_for("probe figures", 120, Some(dash), |s| {
        s.contains("synced")
            && s.contains("no_sync")
            && s.contains("difference")
            && s.lines()
                .any(|l| l.contains("k=1 ctrl") && l.contains(" ms"))
    });
    assert!(
        s.lines().any(|l| l.contains("synced") && l.contains(" ms")),
        "{s}"
    );

    t.keys(&["q"]);
    t.wait_for("ddptop to exit", 60, None, |s| s.contains("EXIT=0"));
    assert_eq!(t.display("#{alternate_on}"), "0", "alternate screen left");
    // Cooked mode is back: the shell runs a typed command (no raw mode, CR→NL restored).
    t.keys(&["echo restored-$((40+2))", "Enter"]);
    t.wait_for("a working shell", 10, None, |s| s.contains("restored-42"));
    t.seen.retain(|(p, _)| *p != shell);
    t.pgids.remove(&stat(shell).map(|s| s.pgrp).unwrap_or(0));
    t.assert_no_leftovers(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kill_server_mid_run_leaves_no_process() {
    let Some(mut t) = Tmux::new("hup") else {
        return;
    };
    let dir = tempdir();
    // The dashboard is the pane's process itself: kill-server hangs up on it directly.
    t.start(&ddptop_cmd(&dir, "0.5"));
    let dash: u32 = t.display("#{pane_pid}").parse().unwrap();
    t.wait_for("the dashboard", 30, Some(dash), |s| s.contains("Runs"));
    t.keys(&["4"]);
    t.wait_for("ranks running", 60, Some(dash), |s| {
        s.contains("▶ running") && s.contains(" r3 ")
    });
    // Let the workers get going, then record the whole tree.
    std::thread::sleep(Duration::from_millis(500));
    t.record_tree(dash);
    assert!(
        t.seen.len() >= 5,
        "dashboard, launcher and 4 ranks: {:?}",
        t.seen
    );
    let o = t.run(&["kill-server"]);
    assert!(o.status.success());
    t.assert_no_leftovers(Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_tty_is_refused_with_one_line() {
    let o = Command::new(BIN)
        .args(["--backend", "sim"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ddptop needs a terminal; use `ddptop run …` for headless runs"),
        "{err}"
    );
}

#[test]
fn scripted_mode_dumps_the_final_screen() {
    let dir = tempdir();
    let dump = dir.join("screen.txt");
    let o = Command::new(BIN)
        .args(["--backend", "sim", "--sim-speed", "20", "--data-dir"])
        .arg(dir.join("data"))
        .arg("--config")
        .arg(dir.join("config.toml"))
        .args([
            "--script",
            "1,wait-run,2,wait-run,b,wait-run,q",
            "--screen-dump",
        ])
        .arg(&dump)
        .env("DDPTOP_SCREEN", "160x50")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let s = std::fs::read_to_string(&dump).unwrap();
    assert!(s.contains("SIMULATED"), "{s}");
    assert!(
        s.contains("1.9") && s.contains("× "),
        "speedup of the k=2 run: {s}"
    );
    assert!(s.contains("256M"), "bench sizes: {s}");
    assert_eq!(s.lines().count(), 50);
    assert!(dir.join("config.toml").is_file(), "default config written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_color_draws_without_colours() {
    let Some(mut t) = Tmux::new("nocolor") else {
        return;
    };
    let dir = tempdir();
    t.start(&format!("env NO_COLOR=1 {}", ddptop_cmd(&dir, "20")));
    let dash: u32 = t.display("#{pane_pid}").parse().unwrap();
    t.wait_for("the dashboard", 30, Some(dash), |s| s.contains("Runs"));
    t.keys(&["t"]);
    t.wait_for("the theme message", 10, Some(dash), |s| {
        s.contains("NO_COLOR")
    });
    let o = t.run(&["capture-pane", "-p", "-e", "-t", "t"]);
    let styled = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        styled.contains("\x1b["),
        "attributes (bold, reverse) are still used"
    );
    for sgr in styled.split("\x1b[").skip(1) {
        let params = sgr.split('m').next().unwrap_or("");
        for p in params.split(';') {
            let n: u32 = p.parse().unwrap_or(0);
            assert!(
                !((30..=38).contains(&n) || (40..=48).contains(&n) || (90..=107).contains(&n)),
                "colour SGR {params:?} with NO_COLOR"
            );
        }
    }
    t.keys(&["q"]);
    t.assert_no_leftovers(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sweep_shows_its_queue_and_the_log_scrolls_in_a_terminal() {
    let Some(mut t) = Tmux::new("queue") else {
        return;
    };
    let dir = tempdir();
    // Slow (a run takes about half a minute): everything below happens during the first run.
    t.start(&ddptop_cmd(&dir, "0.2"));
    let dash: u32 = t.display("#{pane_pid}").parse().unwrap();
    t.wait_for("the dashboard", 30, Some(dash), |s| s.contains("Runs"));
    // A sweep k = 1, 2, 4: the first runs, the other two wait on screen, greyed, numbered.
    t.keys(&["a"]);
    let s = t.wait_for("the queue on screen", 60, Some(dash), |s| {
        s.contains("▶ running") && s.contains("queued #1") && s.contains("queued #2")
    });
    assert!(s.contains("sweep 3/3"), "{s}");
    assert!(s.contains("2 queued"), "{s}");
    // Its progress with an ETA once the pace is known.
    t.wait_for("progress with an ETA", 60, Some(dash), |s| {
        s.lines()
            .any(|l| l.contains("▶ running") && l.contains("% ") && l.contains('░'))
    });
    // The Log focused (Tab walks Scaling, GPUs, Ranks, Timeline, Probe, Bench first): g goes to
    // its oldest line, Up/Down no longer move the run cursor.
    t.keys(&["Tab", "Tab", "Tab", "Tab", "Tab", "Tab", "Tab"]);
    t.keys(&["g"]);
    let s = t.wait_for("the log scrolled", 10, Some(dash), |s| {
        s.contains("scrolled ↑")
    });
    assert!(s.contains("queued #2"), "{s}");
    t.keys(&["G"]);
    t.wait_for("the log following again", 10, Some(dash), |s| {
        !s.contains("scrolled ↑")
    });
    // Back on the Runs pane: up onto the next queued launch, x cancels it (and only it).
    t.keys(&["Tab", "k", "x"]);
    let s = t.wait_for("the cancel", 20, Some(dash), |s| {
        s.contains("cancelled the queued") && !s.contains("queued #2")
    });
    assert!(s.contains("queued #1") || s.contains("▶ running"), "{s}");
    // z maximizes the Runs pane and toggles back.
    t.keys(&["z"]);
    t.wait_for("the zoomed runs pane", 10, Some(dash), |s| {
        !s.contains("Timeline")
    });
    t.keys(&["z"]);
    t.wait_for("the panes back", 10, Some(dash), |s| s.contains("Timeline"));
    t.record_tree(dash);
    t.keys(&["q"]);
    t.assert_no_leftovers(Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn headless_run_rewrites_one_progress_line_on_a_terminal() {
    let Some(mut t) = Tmux::new("progress") else {
        return;
    };
    let dir = tempdir();
    t.start("sh");
    t.keys(&[
        &format!(
            "{BIN} --data-dir {} --config {} run weak --k 1 --backend sim --sim-speed 2; echo EXIT=$?",
            dir.join("data").display(),
            dir.join("config.toml").display()
        ),
        "Enter",
    ]);
    let s = t.wait_for("a progress line", 60, None, |s| {
        s.lines()
            .any(|l| l.contains("k=1 step") && l.contains("ETA"))
    });
    let lines = |s: &str| s.lines().filter(|l| l.contains(" k=1 step ")).count();
    assert_eq!(lines(&s), 1, "one line, rewritten in place:\n{s}");
    let s = t.wait_for("the end", 120, None, |s| s.contains("EXIT=0"));
    assert_eq!(
        lines(&s),
        0,
        "the progress line is cleared before the table:\n{s}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_mouse_click_selects_a_run_in_a_terminal() {
    let Some(mut t) = Tmux::new("mouse") else {
        return;
    };
    let dir = tempdir();
    t.start(&ddptop_cmd(&dir, "20"));
    let dash: u32 = t.display("#{pane_pid}").parse().unwrap();
    t.wait_for("the dashboard", 30, Some(dash), |s| s.contains("Runs"));
    t.keys(&["1"]);
    t.wait_for("the first run", 120, Some(dash), |s| {
        s.contains("✓ completed")
    });
    t.keys(&["2"]);
    let s = t.wait_for("the second run", 120, Some(dash), |s| {
        s.matches("✓ completed").count() >= 2
    });
    // The older run is the second row of the table; its id as the table shows it.
    let row = |s: &str, i: usize| -> String {
        s.lines()
            .filter(|l| l.contains("✓ completed"))
            .nth(i)
            .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
            .unwrap()
    };
    let older = row(&s, 1);
    // A left click on that row (SGR mouse report, 1-based), then Enter: its details.
    let area = ratatui::layout::Rect::new(0, 0, 120, 40);
    let runs = ddptop::ui::layout::compute(area, 0)
        .rect(ddptop::app::Pane::Runs, ddptop::ui::layout::PaneId::Runs)
        .unwrap();
    let (x, y) = (runs.x + 5 + 1, runs.y + 2 + 1 + 1);
    t.keys(&["-l", &format!("\x1b[<0;{x};{y}M\x1b[<0;{x};{y}m")]);
    t.keys(&["Enter"]);
    let s = t.wait_for("the clicked run's details", 10, Some(dash), |s| {
        s.contains("╔ Run ")
    });
    let title = s.lines().find(|l| l.contains("╔ Run ")).unwrap();
    assert!(title.contains(&older), "clicked {older}: {title}");
    // Esc alone (Esc then q at once would read as Alt-q), then quit.
    t.keys(&["Escape"]);
    t.wait_for("the details closed", 10, Some(dash), |s| {
        !s.contains("╔ Run ")
    });
    t.keys(&["q"]);
    t.assert_no_leftovers(Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_first_frame_comes_before_the_backend_is_known() {
    let Some(mut t) = Tmux::new("splash") else {
        return;
    };
    let dir = tempdir();
    // A Python that takes 10 s to answer (one importing torch with CUDA takes a few).
    let slow = dir.join("slow-python");
    std::fs::write(&slow, "#!/bin/sh\nsleep 10\nexec python3 \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&slow, std::fs::Permissions::from_mode(0o755)).unwrap();
    t.start("sh");
    t.keys(&[
        &format!(
            "{BIN} --python {} --data-dir {} --config {}; echo EXIT=$?",
            slow.display(),
            dir.join("data").display(),
            dir.join("config.toml").display()
        ),
        "Enter",
    ]);
    // The splash while Python is still asleep, then the dashboard.
    let s = t.wait_for("the first frame", 8, None, |s| {
        s.contains("detecting the backend")
    });
    assert!(!s.contains("Runs"), "{s}");
    t.wait_for("the dashboard", 60, None, |s| s.contains("Runs"));
    t.keys(&["q"]);
    t.wait_for("ddptop to exit", 30, None, |s| s.contains("EXIT=0"));
    let _ = std::fs::remove_dir_all(&dir);
}
