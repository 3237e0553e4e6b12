//! Multi-node runs (docs/multinode.md): what `--nodes` asks for, the plan of one launch (the
//! rendezvous endpoint, where remote ranks report), and stopping a node's agent through the
//! channel that started it.

use super::launch::{NodePlan, node_stop_command};
use super::procs;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// The default node command template: ssh hands `{cmd}` to the node's shell.
pub const DEFAULT_REMOTE: &str = "ssh -o BatchMode=yes {host} -- {cmd}";

/// Environment variables of ddptop's own that every node's agent gets too (the network
/// interface and transport choices are per-cluster settings, usually exported once).
const FORWARD_PREFIXES: [&str; 3] = ["NCCL_", "GLOO_", "TP_SOCKET_IFNAME"];

/// `--nodes` and the config's `[nodes]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct NodesOptions {
    /// The first is this machine.
    pub hosts: Vec<String>,
    /// Each node's address when given (`--nodes name=addr`).
    pub addrs: Vec<Option<String>>,
    /// Default: k / number of nodes.
    pub nproc_per_node: Option<u32>,
    /// Where the TCP listener binds. Default: loopback when every node is this machine, else
    /// every interface.
    pub listen: Option<SocketAddr>,
    /// The host name or address ranks on other nodes connect to (default: the listen address,
    /// or this machine's host name when listening on every interface).
    pub advertise: Option<String>,
    /// `host:port` of the c10d rendezvous (default: the advertised host, a free port).
    pub rdzv_endpoint: Option<String>,
    pub remote: String,
    pub stop: Option<String>,
    /// Where other nodes' GPU figures come from: an agent per node, or DCGM exporters.
    pub gpu_source: NodeGpuSource,
    /// The agents' sample period: the dashboard's GPU sample rate.
    pub sample_ms: u64,
    /// Encrypt the TCP channel (`--tls`, `[nodes] tls`): a certificate made per listener, its
    /// fingerprint passed with the token.
    pub tls: bool,
}

/// `[nodes] gpu_source`: how ddptop gets other nodes' GPU figures.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NodeGpuSource {
    /// `ddptop agent` on each other node (NVML there), started through `remote`.
    #[default]
    Agent,
    /// Each node's DCGM exporter: the URL template with `{host}` (default
    /// `http://{host}:9400/metrics`); no agent is started.
    Dcgm(String),
    /// Neither: only this node's GPUs are shown.
    Off,
}

/// The DCGM exporter's default endpoint (its default port is 9400).
pub const DEFAULT_DCGM_URL: &str = "http://{host}:9400/metrics";

/// `[nodes] gpu_source` and `dcgm_url` as the config writes them.
pub fn parse_gpu_source(
    source: Option<&str>,
    dcgm_url: Option<&str>,
) -> Result<NodeGpuSource, String> {
    match source.unwrap_or("agent") {
        "agent" if dcgm_url.is_none() => Ok(NodeGpuSource::Agent),
        "off" if dcgm_url.is_none() => Ok(NodeGpuSource::Off),
        "dcgm" => {
            let url = dcgm_url.unwrap_or(DEFAULT_DCGM_URL);
            if !url.starts_with("http://") {
                return Err(format!(
                    "[nodes] dcgm_url = {url:?}: only http:// is read (e.g. \"{DEFAULT_DCGM_URL}\")"
                ));
            }
            Ok(NodeGpuSource::Dcgm(url.to_string()))
        }
        "agent" | "off" => Err("[nodes] dcgm_url is read only with gpu_source = \"dcgm\"".into()),
        other => Err(format!(
            "[nodes] gpu_source = {other:?}: use \"agent\", \"dcgm\" or \"off\""
        )),
    }
}

impl NodesOptions {
    /// From `--nodes` entries: `name` or `name=addr`.
    pub fn new(entries: Vec<String>) -> Self {
        let (hosts, addrs) = entries
            .into_iter()
            .map(|e| match e.split_once('=') {
                Some((h, a)) => (h.to_string(), Some(a.to_string())),
                None => (e, None),
            })
            .unzip();
        NodesOptions {
            hosts,
            addrs,
            nproc_per_node: None,
            listen: None,
            advertise: None,
            rdzv_endpoint: None,
            remote: DEFAULT_REMOTE.into(),
            stop: None,
            gpu_source: NodeGpuSource::Agent,
            sample_ms: 1000,
            tls: false,
        }
    }

    /// Where the TCP listener binds: `--listen`, else loopback when no node is another machine,
    /// else the address other nodes are told to connect to (`--advertise`, node 0's `ADDR`, or
    /// this machine's host name, resolved here). Never every interface unless asked
    /// (`--listen 0.0.0.0:0`): the listener is reachable before any token is checked.
    pub fn listen_addr(&self) -> anyhow::Result<SocketAddr> {
        if let Some(l) = self.listen {
            return Ok(l);
        }
        let me = crate::paths::hostname();
        let all_local = self
            .hosts
            .iter()
            .all(|h| h == "localhost" || h == "127.0.0.1" || h == "::1" || *h == me);
        if all_local {
            return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0));
        }
        let host = self
            .advertise
            .clone()
            .or_else(|| self.addrs.first().cloned().flatten())
            .unwrap_or(me);
        let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), 0))
                .map_err(|e| {
                    anyhow::anyhow!("cannot resolve {host} to choose where to listen: {e}; pass --listen IP:PORT")
                })?
                .map(|a| a.ip())
                .collect(),
        };
        pick_listen_ip(&host, &ips).map(|ip| SocketAddr::new(ip, 0))
    }

    /// The plan of one launch of world size `k`, given the TCP listener's bound address.
    pub fn plan(&self, k: u32, tcp: SocketAddr) -> anyhow::Result<NodePlan> {
        let n = self.hosts.len() as u32;
        if n == 0 {
            anyhow::bail!("--nodes names no node");
        }
        for (h, a) in self.hosts.iter().zip(&self.addrs) {
            check_host(h).map_err(anyhow::Error::msg)?;
            if let Some(a) = a {
                check_host(a).map_err(anyhow::Error::msg)?;
            }
        }
        let nproc = match self.nproc_per_node {
            Some(p) if p * n == k => p,
            Some(p) => anyhow::bail!("k={k} is not {n} nodes × --nproc-per-node {p}"),
            None if k.is_multiple_of(n) => k / n,
            None => anyhow::bail!("k={k} does not split evenly over {n} nodes"),
        };
        let host = self.advertise.clone().unwrap_or_else(|| {
            if tcp.ip().is_unspecified() {
                self.addrs[0].clone().unwrap_or_else(crate::paths::hostname)
            } else {
                tcp.ip().to_string()
            }
        });
        let rdzv = match &self.rdzv_endpoint {
            Some(e) => e.clone(),
            None => {
                // A free port on the address node 0's store will listen on.
                let probe = std::net::TcpListener::bind(SocketAddr::new(tcp.ip(), 0))?;
                host_port(&host, probe.local_addr()?.port())
            }
        };
        Ok(NodePlan {
            hosts: self.hosts.clone(),
            addrs: self.addrs.clone(),
            nproc_per_node: nproc,
            rdzv_endpoint: rdzv,
            tcp: host_port(&host, tcp.port()),
            remote: self.remote.clone(),
            stop: self.stop.clone(),
            tls_fingerprint: None,
            forward_env: std::env::vars()
                .filter(|(k, _)| FORWARD_PREFIXES.iter().any(|p| k.starts_with(p)))
                .collect(),
        })
    }
}

/// The first address of `host` other nodes can reach: not loopback (a host name mapped to
/// 127.0.1.1, as Debian does, would leave every remote rank unable to connect).
fn pick_listen_ip(host: &str, ips: &[IpAddr]) -> anyhow::Result<IpAddr> {
    ips.iter()
        .copied()
        .find(|ip| !ip.is_loopback())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{host} is a loopback address here, which other nodes cannot reach; pass \
                 --listen IP:PORT (or --advertise ADDR) with this machine's cluster address"
            )
        })
}

/// Host names reach ssh (or the node template) as arguments: one starting with `-` would be
/// read as an option (`-J…`, `-oProxyCommand=…`), so it is refused, as are spaces and
/// control characters.
pub fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("--nodes: an empty node name".into());
    }
    if host.starts_with('-') {
        return Err(format!(
            "--nodes: node name `{host}` starts with `-` and would be read as an option"
        ));
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "--nodes: node name {host:?} has a space or control character"
        ));
    }
    Ok(())
}

/// One node as `--nodes` and `[nodes] hosts` write it: `name` or `name=addr`, each a host
/// name or address (letters, digits, `-_.:@[]`), not starting with `-`.
pub fn check_entry(entry: &str) -> Result<(), String> {
    let ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:@[]".contains(c))
    };
    let (host, addr) = match entry.split_once('=') {
        Some((h, a)) => (h, Some(a)),
        None => (entry, None),
    };
    if !ok(host) || !addr.is_none_or(ok) {
        return Err(format!("`{entry}` is not a host name"));
    }
    check_host(host)?;
    addr.map_or(Ok(()), check_host)
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `ddptop-node N pid=PID slurm=JOB.STEP`, the first line a node's wrapper prints on its
/// channel. The pid is signalled on the node and the step handed to the stop template, so
/// both are checked: pid 1 (or 0) would make the stop `kill -- -1`, and the step must be
/// Slurm's `digits.digits` (anything else, such as `.` outside Slurm, is no step).
pub fn parse_node_line(line: &str) -> Option<(usize, u32, Option<String>)> {
    let rest = line.trim().strip_prefix("ddptop-node ")?;
    let mut it = rest.split_whitespace();
    let node = it.next()?.parse().ok()?;
    let pid: u32 = it.next()?.strip_prefix("pid=")?.parse().ok()?;
    if pid <= 1 || pid > i32::MAX as u32 {
        return None;
    }
    let slurm = it
        .next()
        .and_then(|s| s.strip_prefix("slurm="))
        .filter(|s| is_slurm_step(s))
        .map(str::to_string);
    Some((node, pid, slurm))
}

fn is_slurm_step(s: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.len() <= 20 && p.bytes().all(|b| b.is_ascii_digit());
    s.split_once('.')
        .is_some_and(|(j, st)| digits(j) && digits(st))
}

/// What stopping one remote node needs.
#[derive(Debug, Clone)]
pub struct RemoteStop {
    pub node: usize,
    /// The local process of the channel (ssh, `ip netns exec`, srun): its own process group.
    pub channel_pgid: Option<u32>,
    /// The agent's pid on the node (from its wrapper's first line on the channel).
    pub agent: Option<u32>,
    /// The pids the node's ranks claimed in `hello`: signalled only when the node finds them
    /// under the agent.
    pub pids: Vec<u32>,
    pub slurm_step: Option<String>,
}

/// Stop one node: wait a moment when the run ended well (its agent is exiting by itself),
/// then INT, TERM, KILL through the channel, each followed by its grace while the channel
/// command (which ends with the agent) is still running; finally the local channel process
/// itself. Returns what happened, for the run's reason when it was not clean.
pub async fn stop_remote(
    plan: &NodePlan,
    s: &RemoteStop,
    graces: [Duration; 2],
    graceful: bool,
) -> Option<String> {
    let alive = || s.channel_pgid.is_some_and(procs::alive);
    let wait_gone = |d: Duration| async move {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if !alive() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        !alive()
    };
    if graceful && wait_gone(Duration::from_secs(15)).await {
        return None;
    }
    let host = &plan.hosts[s.node];
    for (sig, grace) in [
        ("INT", graces[0]),
        ("TERM", graces[1]),
        ("KILL", Duration::from_secs(3)),
    ] {
        if !alive() {
            return None;
        }
        if s.agent.is_none() && plan.stop.is_none() {
            break; // nothing known to signal on the node: only the channel is left
        }
        let argv =
            match node_stop_command(plan, s.node, sig, s.agent, &s.pids, s.slurm_step.as_deref()) {
                Ok(a) => a,
                Err(e) => return Some(format!("node {host}: {e}")),
            };
        let out = tokio::time::timeout(
            Duration::from_secs(15),
            tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .status(),
        )
        .await;
        if !matches!(out, Ok(Ok(_))) {
            return Some(format!(
                "node {host}: the stop command `{}` failed or timed out",
                argv.join(" ")
            ));
        }
        if wait_gone(grace).await {
            return (sig == "KILL").then(|| format!("node {host} stopped with SIGKILL"));
        }
    }
    if let Some(pg) = s.channel_pgid.filter(|p| procs::alive(*p)) {
        procs::signal_group_or_pid(pg, nix::sys::signal::Signal::SIGKILL);
        return Some(format!(
            "node {host}: its agent did not end; the local channel process was killed (the \
             ranks' dead-man switches end them when ddptop closes their connections)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_split_k_and_point_remote_ranks_at_the_listener() {
        let mut o = NodesOptions::new(vec!["a".into(), "b=10.0.0.2".into()]);
        assert_eq!(o.hosts, ["a", "b"]);
        assert_eq!(o.addrs, [None, Some("10.0.0.2".to_string())]);
        o.rdzv_endpoint = Some("a:29400".into());
        let p = o.plan(4, "10.0.0.1:5000".parse().unwrap()).unwrap();
        assert_eq!(p.nproc_per_node, 2);
        assert_eq!(p.tcp, "10.0.0.1:5000");
        assert_eq!(p.rdzv_endpoint, "a:29400");
        assert!(o.plan(3, "10.0.0.1:5000".parse().unwrap()).is_err());
        o.advertise = Some("head".into());
        let p = o.plan(2, "0.0.0.0:7".parse().unwrap()).unwrap();
        assert_eq!(p.tcp, "head:7");
        assert_eq!(
            NodesOptions::new(vec!["localhost".into()])
                .listen_addr()
                .unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
    }

    #[test]
    fn the_listener_binds_the_advertised_address_not_every_interface() {
        let mut o = NodesOptions::new(vec!["a".into(), "b=10.0.0.2".into()]);
        o.advertise = Some("10.0.0.1".into());
        assert_eq!(o.listen_addr().unwrap(), "10.0.0.1:0".parse().unwrap());
        let o = NodesOptions::new(vec!["a=10.0.0.7".into(), "b=10.0.0.2".into()]);
        assert_eq!(o.listen_addr().unwrap(), "10.0.0.7:0".parse().unwrap());
        // Asked for explicitly, every interface is still possible.
        let mut o = NodesOptions::new(vec!["a".into(), "b".into()]);
        o.listen = Some("0.0.0.0:0".parse().unwrap());
        assert!(o.listen_addr().unwrap().ip().is_unspecified());
        let lo: IpAddr = "127.0.1.1".parse().unwrap();
        let lan: IpAddr = "10.0.0.9".parse().unwrap();
        assert_eq!(pick_listen_ip("h", &[lo, lan]).unwrap(), lan);
        let e = pick_listen_ip("h", &[lo]).unwrap_err().to_string();
        assert!(e.contains("--listen"), "{e}");
    }

    #[test]
    fn node_names_that_look_like_options_are_refused() {
        let o = NodesOptions::new(vec!["localhost".into(), "-J127.0.0.1:1".into()]);
        let e = o
            .plan(2, "127.0.0.1:1".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("starts with `-`") && !e.contains('\n'), "{e}");
        let o = NodesOptions::new(vec!["a".into(), "b=-oProxyCommand=x".into()]);
        assert!(o.plan(2, "127.0.0.1:1".parse().unwrap()).is_err());
        assert!(check_host("node-1.cluster").is_ok());
        assert!(check_host("a b").is_err());
    }

    /// Node 1 started and stopped through a channel that is a plain local `sh -c {cmd}`: the
    /// wrapper reads the token from stdin, names the agent's pid, and the stop reaches it.
    #[tokio::test]
    async fn a_node_is_started_and_stopped_through_its_channel() {
        use crate::supervisor::launch::{CommandLine, node_command, spawn_with_secret};
        let dir = tempfile::tempdir().unwrap();
        let mut o = NodesOptions::new(vec!["a".into(), "b=10.0.0.2".into()]);
        o.remote = "sh -c {cmd}".into();
        o.rdzv_endpoint = Some("a:29400".into());
        let plan = o.plan(2, "127.0.0.1:4000".parse().unwrap()).unwrap();
        // Node 0's "torchrun": a shell that checks its token and sleeps; the rendezvous flags
        // after the script are its $0, $1, … (unused).
        let mut argv: Vec<String> = vec![
            "sh".into(),
            "-c".into(),
            "test \"${#DDPTOP_TOKEN}\" = 6 && echo \"node=$DDPTOP_NODE at $DDPTOP_SOCKET\" && exec sleep 30".into(),
        ];
        argv.extend(super::super::launch::rendezvous_flags("r1", &plan, 0));
        let mut env = std::collections::BTreeMap::new();
        env.insert("DDPTOP_TOKEN".to_string(), Some("s3cr3t".to_string()));
        env.insert("DDPTOP_SOCKET".to_string(), Some("/run/x.sock".to_string()));
        let local = CommandLine {
            argv,
            env,
            cwd: dir.path().to_path_buf(),
        };
        let cmd = node_command(&local, "r1", &plan, 1).unwrap();
        let line = cmd.argv.join(" ");
        assert!(
            !line.contains("s3cr3t"),
            "the token is never on a command line: {line}"
        );
        assert!(
            line.contains("--node-rank=1") && line.contains("is_host=0"),
            "{line}"
        );
        assert!(line.contains("--local-addr=10.0.0.2"), "{line}");
        assert!(
            line.contains("DDPTOP_SOCKET=tcp://127.0.0.1:4000"),
            "{line}"
        );
        let (mut child, first_line) = spawn_with_secret(&cmd, dir.path(), "s3cr3t").unwrap();
        let log = dir.path().join("output.log");
        let t0 = Instant::now();
        let (pid, text) = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(p) = first_line
                .get()
                .and_then(|l| parse_node_line(l))
                .map(|(_, p, _)| p)
                && text.contains("node=b at tcp://127.0.0.1:4000")
            {
                break (p, text);
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no node line: {text}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(procs::alive(pid), "{text}");
        // The channel's output still reaches output.log, the node line included.
        assert!(text.contains(&format!("ddptop-node 1 pid={pid}")), "{text}");
        let stop = RemoteStop {
            node: 1,
            channel_pgid: child.id(),
            agent: Some(pid),
            pids: vec![],
            slurm_step: None,
        };
        let note = stop_remote(
            &plan,
            &stop,
            [Duration::from_secs(2), Duration::from_secs(2)],
            false,
        )
        .await;
        assert_eq!(
            note, None,
            "stopped by the first signal through the channel"
        );
        assert!(!procs::alive(pid));
        child.wait().await.unwrap();
    }

    #[test]
    fn node_lines_are_parsed() {
        assert_eq!(
            parse_node_line("ddptop-node 1 pid=4242 slurm=."),
            Some((1, 4242, None))
        );
        assert_eq!(
            parse_node_line("ddptop-node 2 pid=7 slurm=991.3"),
            Some((2, 7, Some("991.3".into())))
        );
        assert_eq!(parse_node_line("[rank0]: hello"), None);
    }

    #[test]
    fn node_lines_cannot_name_init_or_a_made_up_step() {
        assert_eq!(parse_node_line("ddptop-node 1 pid=1 slurm=."), None);
        assert_eq!(parse_node_line("ddptop-node 1 pid=0 slurm=."), None);
        assert_eq!(
            parse_node_line("ddptop-node 1 pid=77 slurm=1;rm"),
            Some((1, 77, None))
        );
        assert_eq!(
            parse_node_line("ddptop-node 1 pid=77 slurm=12."),
            Some((1, 77, None))
        );
        assert_eq!(
            parse_node_line("ddptop-node 1 pid=77 slurm=-1.2"),
            Some((1, 77, None))
        );
    }

    /// A rank's stdout goes to output.log as before, but a `ddptop-node` line there is not the
    /// channel's first line and is never taken for the agent.
    #[tokio::test]
    async fn only_the_channels_first_line_names_the_agent() {
        use crate::supervisor::launch::{CommandLine, spawn_with_secret};
        let dir = tempfile::tempdir().unwrap();
        let cmd = CommandLine {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "read t; echo \"ddptop-node 1 pid=$$ slurm=.\"; echo 'ddptop-node 1 pid=1 slurm=.'"
                    .into(),
            ],
            env: Default::default(),
            cwd: dir.path().to_path_buf(),
        };
        let (mut child, first) = spawn_with_secret(&cmd, dir.path(), "x").unwrap();
        let pid = child.id().unwrap();
        child.wait().await.unwrap();
        let t0 = Instant::now();
        while first.get().is_none() && t0.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            first.get().and_then(|l| parse_node_line(l)),
            Some((1, pid, None))
        );
        // A forged line written to output.log by someone else changes nothing either.
        let log = dir.path().join("output.log");
        let t0 = Instant::now();
        while !std::fs::read_to_string(&log).unwrap().contains("pid=1 ")
            && t0.elapsed() < Duration::from_secs(5)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(std::fs::read_to_string(&log).unwrap().contains("pid=1 "));
    }

    /// The node's stop script signals a claimed rank pid only when it descends from the agent.
    #[tokio::test]
    async fn the_node_stop_script_checks_descent_from_the_agent() {
        let mut o = NodesOptions::new(vec!["a".into(), "b".into()]);
        o.remote = "sh -c {cmd}".into();
        o.rdzv_endpoint = Some("a:1".into());
        let plan = o.plan(2, "127.0.0.1:4000".parse().unwrap()).unwrap();
        // The "agent" with a child, and an unrelated process a rank claims as its pid.
        let mut agent = tokio::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let mut victim = tokio::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let (a, v) = (agent.id().unwrap(), victim.id().unwrap());
        let argv =
            crate::supervisor::launch::node_stop_command(&plan, 1, "TERM", Some(a), &[v], None)
                .unwrap();
        let st = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .status()
            .await
            .unwrap();
        assert!(st.success());
        agent.wait().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            procs::alive(v),
            "an unrelated pid a rank claimed was signalled"
        );
        let _ = victim.kill().await;
    }
}
