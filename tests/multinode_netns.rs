//! Two "nodes" on one machine: two network namespaces joined by a veth pair, each running a
//! torchrun agent with gloo. ddptop runs in namespace A (its TCP listener and the c10d
//! rendezvous on A's veth address); node A's agent is started directly, node B's through the
//! config's node template, `ip netns exec {host} sh -c {cmd}`, in place of ssh. So B's ranks
//! can reach ddptop only over TCP through the veth pair.
//!
//! Needs root (`ip netns add`). Skipped when not root and not on CI; under CI=1 a missing `ip`
//! or a failing `ip netns add` is a failure. The namespaces (and with them the veth pair) are
//! removed by a Drop guard, also when a test fails.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const IP_A: &str = "10.77.0.1";
const IP_B: &str = "10.77.0.2";

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces and the veth pair between them; removed on drop.
struct Nodes {
    a: String,
    b: String,
    veth: [String; 2],
}

impl Drop for Nodes {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the pair, and with it the pair; the explicit
        // link delete covers a failure before the ends were moved.
        let _ = ip(&["link", "del", &self.veth[0]]);
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Nodes {
    /// None: skipped (not root, not CI). Panics on CI when namespaces cannot be made.
    fn create() -> Option<Nodes> {
        let ci = std::env::var_os("CI").is_some();
        let root = nix::unistd::geteuid().is_root();
        if !root && !ci {
            eprintln!("SKIPPED: network namespaces need root (or run under CI=1 to fail instead)");
            return None;
        }
        // Unique per test process and test: names are global on the machine.
        let tag = format!(
            "{}{}",
            std::process::id() % 100_000,
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let n = Nodes {
            a: format!("ddptA{tag}"),
            b: format!("ddptB{tag}"),
            veth: [format!("dva{tag}"), format!("dvb{tag}")],
        };
        let setup = || -> Result<(), String> {
            ip(&["netns", "add", &n.a])?;
            ip(&["netns", "add", &n.b])?;
            ip(&[
                "link", "add", &n.veth[0], "type", "veth", "peer", "name", &n.veth[1],
            ])?;
            for (ns, dev, addr) in [(&n.a, &n.veth[0], IP_A), (&n.b, &n.veth[1], IP_B)] {
                ip(&["link", "set", dev, "netns", ns])?;
                // The same interface name on both nodes: one GLOO_SOCKET_IFNAME for all.
                ip(&["-n", ns, "link", "set", dev, "name", "ddp0"])?;
                ip(&[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{addr}/24"),
                    "dev",
                    "ddp0",
                ])?;
                ip(&["-n", ns, "link", "set", "ddp0", "up"])?;
                ip(&["-n", ns, "link", "set", "lo", "up"])?;
            }
            Ok(())
        };
        if let Err(e) = setup() {
            drop(n);
            assert!(!ci, "CI must be able to create network namespaces: {e}");
            eprintln!("SKIPPED: cannot create network namespaces: {e}");
            return None;
        }
        Some(n)
    }

    /// Pids in namespace `ns` (`ip netns pids`).
    fn pids(ns: &str) -> Vec<u32> {
        let out = Command::new("ip").args(["netns", "pids", ns]).output();
        out.map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .filter(|p| ddptop::supervisor::procs::alive(*p))
                .collect()
        })
        .unwrap_or_default()
    }

    /// `ddptop run|attach ARGS … --nodes A,B [-- SCRIPT…]` inside namespace A, JSON on stdout.
    fn ddptop(
        &self,
        data: &std::path::Path,
        py: &str,
        cmd: &str,
        args: &[&str],
        script: &[&str],
    ) -> Command {
        self.ddptop_with(data, py, cmd, args, script, "")
    }

    /// `ddptop`, with more lines for the config's `[nodes]` table.
    fn ddptop_with(
        &self,
        data: &std::path::Path,
        py: &str,
        cmd: &str,
        args: &[&str],
        script: &[&str],
        nodes_cfg: &str,
    ) -> Command {
        std::fs::write(
            data.join("config.toml"),
            format!("[nodes]\nremote = \"ip netns exec {{host}} sh -c {{cmd}}\"\n{nodes_cfg}"),
        )
        .unwrap();
        let nodes = format!("{}={IP_A},{}={IP_B}", self.a, self.b);
        let listen = format!("{IP_A}:0");
        let mut c = Command::new("ip");
        c.env("DDPTOP_DATA_DIR", data)
            .env("DDPTOP_CONFIG", data.join("config.toml"))
            .env("XDG_RUNTIME_DIR", data)
            .env("DDPTOP_PYTHON", py)
            // Passed on to node B by ddptop (GLOO_* is forwarded to every node).
            .env("GLOO_SOCKET_IFNAME", "ddp0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .args(["netns", "exec", &self.a, bin(), cmd])
            .args(args)
            .args(["--backend", "gloo", "--json", "--startup-timeout", "60"])
            .args(["--nodes", &nodes, "--listen", &listen]);
        if cmd == "run" {
            c.args(["--model", "tiny"]);
        }
        if !script.is_empty() {
            c.arg("--").args(script);
        }
        c
    }

    /// Nothing of the run is left in either namespace.
    fn assert_empty(&self) {
        let t0 = Instant::now();
        loop {
            let (a, b) = (Nodes::pids(&self.a), Nodes::pids(&self.b));
            if a.is_empty() && b.is_empty() {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "survivors: node A {a:?}, node B {b:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn parse(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn nodes_of(run: &serde_json::Value) -> Vec<(String, bool)> {
    let mut v: Vec<(String, bool)> = run["rank_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["node"].as_str().unwrap().to_string(),
                r["remote"].as_bool().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn two_node_gloo_run_completes() {
    let Some(py) = python_importing("torch") else {
        return;
    };
    let Some(nodes) = Nodes::create() else { return };
    let d = tempfile::tempdir().unwrap();
    let out = nodes
        .ddptop(
            d.path(),
            &py,
            "run",
            &["weak", "--k", "2", "--samples", "256", "--batch", "32"],
            &[],
        )
        .output()
        .unwrap();
    let doc = parse(&out);
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    assert!(out.status.success());
    assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(
        nodes_of(r),
        vec![(nodes.a.clone(), false), (nodes.b.clone(), true)],
        "one rank per node; node B's over TCP"
    );
    assert_no_survivors(&doc);
    nodes.assert_empty();
}

/// `ddptop attach --nodes`: the unmodified tutorial script, one rank per node, both reporting
/// (node B's through the bootstrap over TCP).
#[test]
fn two_node_attach_of_an_unmodified_script_completes() {
    let Some(py) = python_importing("torch") else {
        return;
    };
    let Some(nodes) = Nodes::create() else { return };
    let d = tempfile::tempdir().unwrap();
    let script = format!("{}/examples/train_ddp.py", env!("CARGO_MANIFEST_DIR"));
    let out = nodes
        .ddptop(
            d.path(),
            &py,
            "attach",
            &["--k", "2"],
            &[&script, "--samples", "512"],
        )
        .output()
        .unwrap();
    let doc = parse(&out);
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    assert_eq!(r["instrument"], "full");
    assert!(r["samples_per_s"].as_f64().unwrap() > 0.0, "{r:#}");
    assert_eq!(
        nodes_of(r),
        vec![(nodes.a.clone(), false), (nodes.b.clone(), true)]
    );
    assert_no_survivors(&doc);
    nodes.assert_empty();
}

/// Connect to ddptop's TCP listener in namespace A from this thread (setns on the thread only).
fn connect_in(ns: &str, addr: &str) -> TcpStream {
    let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    let mut c = None;
    std::thread::scope(|s| {
        s.spawn(|| {
            use std::os::fd::AsRawFd;
            // SAFETY: setns on this short-lived thread only; the fd is valid for the call.
            let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            c = Some(TcpStream::connect(addr).unwrap());
        });
    });
    c.unwrap()
}

/// The run's token and id from a local rank's environment (as a rank on the node would have).
fn token_and_run(ns_a: &str) -> Option<(String, String)> {
    for pid in Nodes::pids(ns_a) {
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let vars: Vec<String> = env
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        let get = |k: &str| {
            vars.iter()
                .find_map(|v| v.strip_prefix(&format!("{k}=")).map(str::to_string))
        };
        if get("LOCAL_RANK").is_some()
            && let (Some(t), Some(r)) = (get("DDPTOP_TOKEN"), get("DDPTOP_RUN_ID"))
        {
            return Some((t, r));
        }
    }
    None
}

/// A worker (LOCAL_RANK set by torchrun) of node `ns` that has said hello to ddptop.
fn connected_worker(ns: &str, data: &std::path::Path) -> Option<u32> {
    let conn = rusqlite::Connection::open_with_flags(
        data.join("runs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .ok()?;
    let known: Vec<u32> = conn
        .query_row("SELECT pids_json FROM runs LIMIT 1", [], |r| {
            r.get::<_, String>(0)
        })
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    Nodes::pids(ns).into_iter().find(|p| known.contains(p))
}

#[test]
fn remote_rank_killed_stops_everything_and_tcp_intruders_are_refused() {
    let Some(py) = python_importing("torch") else {
        return;
    };
    let Some(nodes) = Nodes::create() else { return };
    let d = tempfile::tempdir().unwrap();
    // Long enough to be killed mid-run (it never gets to finish).
    let child = nodes
        .ddptop(
            d.path(),
            &py,
            "run",
            &["weak", "--k", "2", "--samples", "200000", "--batch", "32"],
            &[],
        )
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let victim = loop {
        if let Some(p) = connected_worker(&nodes.b, d.path()) {
            break p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "node B's rank never connected"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The socket directory is `ddptop-<pid>.<random>`.
    let prefix = format!("ddptop-{}.", child.id());
    let addr_file = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .expect("ddptop's socket directory")
        .path()
        .join("tcp.addr");
    let addr = std::fs::read_to_string(&addr_file).expect("ddptop writes its TCP address");
    let (token, run) = token_and_run(&nodes.a).expect("a local rank with the run's token");

    // A wrong token over TCP: refused, counted on the run.
    let s = connect_in(&nodes.a, &addr);
    let hello = format!(
        r#"{{"v":1,"type":"hello","token":"{}","run_id":"{run}","rank":0,"world_size":2,"local_rank":0,"pid":1,"host":"x","device":"cpu","backend":"gloo","worker":"train","torch":null,"nccl":null,"cuda":null,"t":0.0}}"#,
        "0".repeat(64)
    );
    (&s).write_all(format!("{hello}\n").as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut answer = String::new();
    let _ = BufReader::new(&s).read_line(&mut answer);
    assert!(answer.contains("bad_token"), "{answer}");
    assert_ne!(token, "0".repeat(64));

    // A garbage flood: 50 connections of garbage lines, one of them 100k lines; each is refused
    // at its first line and counted, the rest is never read.
    for i in 0..50 {
        let s = connect_in(&nodes.a, &addr);
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let lines = if i == 0 { 100_000 } else { 10 };
        for _ in 0..lines {
            if (&s).write_all(b"garbage \x01 garbage {\"v\":1\n").is_err() {
                break; // refused and closed: the rest cannot even be delivered
            }
        }
    }

    // Kill the rank on the "remote" node: the whole run must stop, on both nodes.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let doc = parse(&out);
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "failed", "{r:#}");
    let reason = r["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains(&format!("node 1 ({})", nodes.b)),
        "the failed node is named: {reason}"
    );
    assert_eq!(r["rejected_connections"], 1, "the wrong token: {r:#}");
    assert_eq!(
        doc["rejected_strangers"], 50,
        "every garbage connection counted"
    );
    assert_eq!(r["bad_lines"], 0, "no garbage reached the run");
    assert!(
        t0.elapsed() < Duration::from_secs(120),
        "stopping took too long"
    );
    assert_no_survivors(&doc);
    nodes.assert_empty();
}

/// The `node_agent` events stored for a run: (node, state, gpus), in order.
fn node_events(data: &std::path::Path) -> Vec<(String, String, Option<u64>)> {
    let Ok(conn) = rusqlite::Connection::open_with_flags(
        data.join("runs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    ) else {
        return Vec::new();
    };
    let Ok(mut q) = conn.prepare("SELECT body FROM events WHERE type = 'node_agent' ORDER BY seq")
    else {
        return Vec::new();
    };
    q.query_map([], |r| r.get::<_, String>(0))
        .map(|rows| {
            rows.flatten()
                .filter_map(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
                .map(|v| {
                    (
                        v["node"].as_str().unwrap_or("").to_string(),
                        v["state"].as_str().unwrap_or("").to_string(),
                        v["gpus"].as_u64(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Pids in `ns` whose command line is `ddptop agent … --node=NODE`.
fn agent_pids(ns: &str, node: &str) -> Vec<u32> {
    Nodes::pids(ns)
        .into_iter()
        .filter(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let args: Vec<String> = cmd
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            args.iter().any(|a| a == "agent") && args.iter().any(|a| *a == format!("--node={node}"))
        })
        .collect()
}

/// Node B's GPU agent (started through the node template, two made-up GPUs) reports over the
/// run's channel; killed mid-run, its node is marked lost while the run goes on to complete;
/// nothing of the run or its agent is left on either node. Once in plain TCP, once with TLS.
fn agent_run(tls: bool) {
    let Some(py) = python_importing("torch") else {
        return;
    };
    let Some(nodes) = Nodes::create() else { return };
    let d = tempfile::tempdir().unwrap();
    let mut args = vec!["weak", "--k", "2", "--samples", "2048", "--batch", "32"];
    if tls {
        args.push("--tls");
    }
    let child = nodes
        .ddptop(d.path(), &py, "run", &args, &[])
        .env("DDPTOP_FAKE_GPUS", "2")
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    // The agent's first sample: node B's two GPUs have rows.
    while !node_events(d.path()).contains(&(nodes.b.clone(), "sampled".into(), Some(2))) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "node B's agent never sent a sample: {:?}",
            node_events(d.path())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let agents = agent_pids(&nodes.b, &nodes.b);
    assert_eq!(agents.len(), 1, "one agent on node B");
    assert!(
        agent_pids(&nodes.a, &nodes.a).is_empty(),
        "none for this node"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agents[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let intruders = if tls {
        refused_without_the_certificate(&nodes, d.path(), child.id())
    } else {
        0
    };
    while !node_events(d.path()).contains(&(nodes.b.clone(), "lost".into(), None)) {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "node B never marked lost: {:?}",
            node_events(d.path())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let doc = parse(&out);
    let r = &doc["runs"][0];
    assert_eq!(
        r["status"], "completed",
        "a lost agent does not stop the run: {r:#}"
    );
    assert_eq!(
        nodes_of(r),
        vec![(nodes.a.clone(), false), (nodes.b.clone(), true)]
    );
    let ev = node_events(d.path());
    assert_eq!(
        ev.iter().filter(|e| e.1 == "connected").count(),
        1,
        "{ev:?}"
    );
    assert_eq!(
        doc["rejected_strangers"], intruders,
        "each connection that failed the TLS handshake is counted"
    );
    // Node B's two made-up GPUs, greyed (its agent was killed), in the run's JSON and in
    // `show --json` from the store.
    let greyed_b = |rows: &serde_json::Value| {
        rows.as_array()
            .unwrap_or_else(|| panic!("node_gpus: {rows:#}"))
            .iter()
            .filter(|g| g["node"] == nodes.b.as_str())
            .map(|g| {
                (
                    g["gpu"].as_u64().unwrap(),
                    g["agent"].as_str().unwrap().to_string(),
                    g["source"].as_str().unwrap().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let want = vec![
        (0, "greyed".to_string(), "fake".to_string()),
        (1, "greyed".into(), "fake".into()),
    ];
    assert_eq!(greyed_b(&r["node_gpus"]), want, "{r:#}");
    let show = Command::new(bin())
        .args(["show", "--json", r["run_id"].as_str().unwrap()])
        .env("DDPTOP_DATA_DIR", d.path())
        .env("DDPTOP_CONFIG", d.path().join("config.toml"))
        .output()
        .unwrap();
    assert_eq!(greyed_b(&parse(&show)["run"]["node_gpus"]), want);
    assert_no_survivors(&doc);
    nodes.assert_empty();
}

/// With TLS on: an agent given the run's token but another certificate's fingerprint refuses
/// the listener and sends nothing, and a plain-TCP client gets no further than the handshake.
/// Returns how many connections ddptop should have counted as refused.
fn refused_without_the_certificate(nodes: &Nodes, data: &std::path::Path, pid: u32) -> u64 {
    let prefix = format!("ddptop-{pid}.");
    let t0 = Instant::now();
    let (addr, (token, run)) = loop {
        let addr = std::fs::read_dir(data)
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .and_then(|e| std::fs::read_to_string(e.path().join("tcp.addr")).ok());
        if let (Some(a), Some(t)) = (addr, token_and_run(&nodes.a)) {
            break (a, t);
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no local rank");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut agent = Command::new("ip")
        .args(["netns", "exec", &nodes.b, bin(), "agent"])
        .arg(format!("--connect=tls://{addr}"))
        .args([
            &format!("--run-id={run}"),
            "--node=intruder",
            "--fake-gpus=1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let wrong = "ab".repeat(32);
    agent
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{token}\n{wrong}\n").as_bytes())
        .unwrap();
    let out = agent.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the agent must refuse: {err}");
    assert!(
        err.contains("refusing") && err.lines().count() == 1,
        "{err}"
    );
    // Plain TCP to the TLS listener: a hello in clear text is never read as one.
    let s = connect_in(&nodes.a, &addr);
    let hello = format!(
        r#"{{"v":1,"type":"hello","token":"{token}","run_id":"{run}","rank":0,"world_size":2,"local_rank":0,"pid":1,"host":"x","device":"cpu","backend":"gloo","worker":"train","torch":null,"nccl":null,"cuda":null,"t":0.0}}"#
    );
    let _ = (&s).write_all(format!("{hello}\n").as_bytes());
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut answer = String::new();
    let _ = BufReader::new(&s).read_line(&mut answer);
    assert!(!answer.contains("welcome"), "{answer}");
    2
}

#[test]
fn each_other_node_reports_its_gpus_and_a_killed_agent_only_greys_its_node() {
    agent_run(false);
}

#[test]
fn the_same_over_tls() {
    agent_run(true);
}

/// A fixture DCGM exporter: answers every GET on `IP_B:9400` in namespace `ns` with a page of
/// two GPUs (the exporter's text format) until `stop` is set. Returns the pages served.
fn fixture_exporter(
    ns: &str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u32> {
    let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        // SAFETY: setns on this thread only; the fd is valid for the call.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        let l = std::net::TcpListener::bind(format!("{IP_B}:9400")).unwrap();
        l.set_nonblocking(true).unwrap();
        let page = "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n\
            # TYPE DCGM_FI_DEV_GPU_UTIL gauge\n\
            DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",modelName=\"NVIDIA H200\",DCGM_FI_DRIVER_VERSION=\"570.86.15\"} 87\n\
            DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",modelName=\"NVIDIA H200\"} 12\n\
            DCGM_FI_DEV_FB_USED{gpu=\"0\",modelName=\"NVIDIA H200\"} 1024\n\
            DCGM_FI_DEV_FB_FREE{gpu=\"0\",modelName=\"NVIDIA H200\"} 3072\n";
        let mut served = 0;
        while !stop.load(Ordering::SeqCst) && served < 10_000 {
            match l.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    let mut req = [0u8; 2048];
                    let _ = std::io::Read::read(&mut s, &mut req);
                    let _ = s.write_all(
                        format!("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{page}")
                            .as_bytes(),
                    );
                    served += 1;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        served
    })
}

/// `[nodes] gpu_source = "dcgm"`: node B's GPUs come from its (fixture) DCGM exporter, read
/// over HTTP from ddptop; no agent is started on either node.
#[test]
fn dcgm_exporters_stand_in_for_agents() {
    let Some(py) = python_importing("torch") else {
        return;
    };
    let Some(nodes) = Nodes::create() else { return };
    let d = tempfile::tempdir().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let exporter = fixture_exporter(&nodes.b, stop.clone());
    let child = nodes
        .ddptop_with(
            d.path(),
            &py,
            "run",
            &["weak", "--k", "2", "--samples", "2048", "--batch", "32"],
            &[],
            "gpu_source = \"dcgm\"\ndcgm_url = \"http://{addr}:9400/metrics\"\n",
        )
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !node_events(d.path()).contains(&(nodes.b.clone(), "sampled".into(), Some(2))) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "node B's exporter never read: {:?}",
            node_events(d.path())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        agent_pids(&nodes.b, &nodes.b).is_empty(),
        "no agent with dcgm"
    );
    let out = child.wait_with_output().unwrap();
    stop.store(true, Ordering::SeqCst);
    let served = exporter.join().unwrap();
    assert!(served >= 1);
    let doc = parse(&out);
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    assert!(
        node_events(d.path()).contains(&(nodes.b.clone(), "connected".into(), Some(2))),
        "{:?}",
        node_events(d.path())
    );
    // The exporter's two GPUs in the run's JSON: read over DCGM, no pids (no ranks named).
    let rows: Vec<(u64, &str, &str, usize)> = r["node_gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["gpu"].as_u64().unwrap(),
                g["source"].as_str().unwrap(),
                g["node"].as_str().unwrap(),
                g["ranks"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (0, "dcgm", nodes.b.as_str(), 0),
            (1, "dcgm", nodes.b.as_str(), 0)
        ],
        "{r:#}"
    );
    assert_eq!(r["node_gpus"][0]["util_pct"], 87);
    assert_no_survivors(&doc);
    nodes.assert_empty();
}

/// The dashboard's `N`: with `[nodes] hosts` naming both namespaces, `N` then `2` launches k=2
/// across them through the same engine path as `ddptop run --nodes` (one rank per node, node
/// B's started through the template and reporting over TCP); the screen shows the badge; `N`
/// again brings launches back to this node. Driven by `--script` inside namespace A.
#[test]
fn the_dashboard_launches_across_the_configured_nodes() {
    let Some(py) = python_importing("torch") else {
        return;
    };
    let Some(nodes) = Nodes::create() else { return };
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("config.toml"),
        format!(
            // A quarter of gloo's default run: the test is where the ranks run, not how long.
            "[launch]\nsamples = 2048\n[nodes]\nremote = \"ip netns exec {{host}} sh -c {{cmd}}\"\nhosts = [\"{}={IP_A}\", \"{}={IP_B}\"]\nlisten = \"{IP_A}:0\"\n",
            nodes.a, nodes.b
        ),
    )
    .unwrap();
    let dump = d.path().join("screen.txt");
    let during = d.path().join("during.txt");
    let out = Command::new("ip")
        .args(["netns", "exec", &nodes.a, bin()])
        .args(["--backend", "gloo", "--no-mouse", "--script"])
        .arg(format!("N,2,sleep:1,dump:{},wait-run,N", during.display()))
        .arg("--screen-dump")
        .arg(&dump)
        .env("DDPTOP_DATA_DIR", d.path())
        .env("DDPTOP_CONFIG", d.path().join("config.toml"))
        .env("XDG_RUNTIME_DIR", d.path())
        .env("DDPTOP_PYTHON", &py)
        .env("GLOO_SOCKET_IFNAME", "ddp0")
        .env("DDPTOP_SCREEN", "160x40")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let during = std::fs::read_to_string(&during).unwrap();
    assert!(
        during.contains(" nodes: 2 "),
        "the badge while launching:\n{during}"
    );
    let end = std::fs::read_to_string(&dump).unwrap();
    assert!(
        end.contains(" this node "),
        "N again: back to this node:\n{end}"
    );
    assert!(
        end.contains("next launches: this node only"),
        "the Log says so:\n{end}"
    );

    let conn = rusqlite::Connection::open_with_flags(
        d.path().join("runs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let (id, status, k, samples): (String, String, u32, i64) = conn
        .query_row("SELECT id, status, k, samples FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap();
    assert_eq!((status.as_str(), k), ("completed", 2), "{end}");
    assert_eq!(samples, 2048, "the config's [launch] samples");
    // Each rank said which node it is on: one per namespace.
    let mut hello_nodes: Vec<String> = conn
        .prepare("SELECT body FROM events WHERE type = 'hello'")
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .flatten()
        .filter_map(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .filter_map(|v| v["node"].as_str().map(str::to_string))
        .collect();
    hello_nodes.sort();
    assert_eq!(hello_nodes, [nodes.a.clone(), nodes.b.clone()]);
    // The recorded command is the multi-node one: node B's through the template.
    let cmd = std::fs::read_to_string(d.path().join("runs").join(&id).join("command.txt")).unwrap();
    assert!(
        cmd.contains("--nnodes=2") && cmd.contains(&format!("ip netns exec {}", nodes.b)),
        "{cmd}"
    );
    nodes.assert_empty();
}
