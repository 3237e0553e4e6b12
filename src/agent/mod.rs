//! `ddptop agent`: a multi-node run's GPU agent on another node (docs/multinode.md). ddptop
//! starts one per other node through the `[nodes] remote` template, with the run's token (and,
//! with TLS, the listener's certificate fingerprint) on stdin. The agent connects to ddptop's
//! TCP listener, says `agent_hello`, then sends a `node_sample` (NVML, or made-up figures in
//! tests) plus the CPU % and RSS of the run's ranks on its node at the dashboard's rate. It
//! exits when the connection closes (the run ended, ddptop stopped or died) and writes no file.

mod conn;

use crate::cli::AgentArgs;
use crate::gpu::fake::FakeGpus;
use crate::gpu::nvml::NvmlSource;
use crate::gpu::sampler::Sampler;
use crate::gpu::{GpuError, GpuInfo, GpuSample, GpuSource, ProcStat, Update};
use crate::protocol::agent::{
    AgentHello, AgentMsg, GpuSourceKind, NodeGpu, NodeProc, NodeSample, ToAgent, parse_to_agent,
};
use crate::protocol::{LineReader, ReadOutcome};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::io::{AsyncWriteExt, BufReader};

/// Run the agent; exit code 0 when ddptop closed the connection.
pub fn main(a: AgentArgs) -> anyhow::Result<i32> {
    let secrets = read_secrets(std::io::stdin().lock())?;
    crate::util::runtime()?.block_on(run(a, secrets))
}

/// The token and, with TLS, the fingerprint: the first two lines of stdin.
#[derive(Debug, Clone, PartialEq)]
pub struct Secrets {
    pub token: String,
    pub fingerprint: Option<String>,
}

fn read_secrets(r: impl std::io::BufRead) -> anyhow::Result<Secrets> {
    use std::io::BufRead;
    let mut lines = r.take(1024).lines();
    let token = lines
        .next()
        .transpose()?
        .filter(|t| !t.is_empty())
        .ok_or_else(|| anyhow::anyhow!("no token on stdin (ddptop writes it there)"))?;
    let fingerprint = lines.next().transpose()?.filter(|f| !f.is_empty());
    Ok(Secrets { token, fingerprint })
}

/// No GPU source on this node: empty samples keep the node alive on the dashboard (its
/// processes' figures still come) and the hello's note says why.
struct NoGpus(GpuInfo);

impl GpuSource for NoGpus {
    fn info(&self) -> &GpuInfo {
        &self.0
    }
    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        Ok(Vec::new())
    }
}

fn source(a: &AgentArgs) -> (Box<dyn GpuSource>, GpuSourceKind, Option<String>) {
    if let Some(n) = a.fake_gpus {
        return (
            Box::new(FakeGpus::h200(n as usize)),
            GpuSourceKind::Fake,
            Some("SIMULATED GPUs (--fake-gpus)".into()),
        );
    }
    match NvmlSource::new() {
        Ok(s) => (Box::new(s), GpuSourceKind::Nvml, None),
        Err(why) => (
            Box::new(NoGpus(GpuInfo::default())),
            GpuSourceKind::None,
            Some(crate::gpu::nvml_note(&why)),
        ),
    }
}

fn node_gpu(s: GpuSample) -> NodeGpu {
    NodeGpu {
        index: s.index,
        name: s.name,
        util_pct: s.util_pct,
        mem_used: s.mem_used,
        mem_total: s.mem_total,
        power_w: s.power_w.filter(|p| p.is_finite() && *p >= 0.0),
        temp_c: s.temp_c,
        link: s.link.map(str::to_string),
        link_rx_kbs: s.link_rx_kbs,
        link_tx_kbs: s.link_tx_kbs,
        pids: s.pids,
        error: s.error,
    }
}

/// One tick's message from the sampler's GPU figures and the latest process figures.
pub fn node_sample(
    t: f64,
    gpus: Result<Vec<GpuSample>, GpuError>,
    procs: &BTreeMap<u32, ProcStat>,
) -> NodeSample {
    let (gpus, error) = match gpus {
        Ok(g) => (g.into_iter().map(node_gpu).collect(), None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    NodeSample {
        t,
        gpus,
        procs: procs
            .iter()
            .map(|(pid, p)| NodeProc {
                pid: *pid,
                cpu_pct: if p.cpu_pct.is_finite() {
                    p.cpu_pct.max(0.0)
                } else {
                    0.0
                },
                rss_bytes: p.rss_bytes,
            })
            .collect(),
        error,
    }
}

async fn run(a: AgentArgs, secrets: Secrets) -> anyhow::Result<i32> {
    let stream = conn::connect(&a.connect, secrets.fingerprint.as_deref()).await?;
    let (rd, mut wr) = tokio::io::split(stream);
    let mut lines = LineReader::new(BufReader::new(rd));
    let (src, kind, note) = source(&a);
    let info = src.info().clone();
    let t0 = Instant::now();
    let hello = AgentMsg::AgentHello(AgentHello {
        token: secrets.token,
        run_id: a.run_id.clone(),
        node: a.node.clone(),
        pid: std::process::id(),
        source: kind,
        gpus: info.count() as u32,
        driver: info.driver.clone(),
        note,
        t: 0.0,
    });
    write(&mut wr, &hello.to_line()).await?;
    let answer = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .map_err(|_| anyhow::anyhow!("ddptop did not answer the agent's hello within 10 s"))??;
    let ReadOutcome::Line(answer) = answer else {
        anyhow::bail!("ddptop closed the connection before welcoming the agent");
    };
    match parse_to_agent(&answer) {
        Ok(Ok(ToAgent::AgentWelcome { .. })) => {}
        Ok(Err(refusal)) => anyhow::bail!("ddptop refused the agent: {refusal}"),
        Ok(Ok(other)) => anyhow::bail!("expected agent_welcome, got {other:?}"),
        Err(e) => anyhow::bail!("ddptop's answer is not protocol v1: {e}"),
    }
    let (tx, mut updates) = tokio::sync::mpsc::channel(16);
    let mut sampler = Sampler::spawn(Some(src), Duration::from_millis(a.period_ms), tx);
    let mut procs: BTreeMap<u32, ProcStat> = BTreeMap::new();
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(ReadOutcome::Line(l)) => {
                    if let Ok(Ok(ToAgent::Watch { pids })) = parse_to_agent(&l) {
                        sampler.watch(pids);
                    }
                }
                // ddptop closed the connection (the run ended, or ddptop is gone): done.
                _ => break,
            },
            u = updates.recv() => match u {
                Some(Update::Procs(p)) => procs = p,
                Some(Update::Gpus(g)) => {
                    let s = node_sample(t0.elapsed().as_secs_f64(), g, &procs);
                    if write(&mut wr, &AgentMsg::NodeSample(s).to_line()).await.is_err() {
                        break;
                    }
                }
                None => break,
            },
        }
    }
    sampler.stop();
    Ok(0)
}

async fn write<W: tokio::io::AsyncWrite + Unpin>(wr: &mut W, line: &str) -> anyhow::Result<()> {
    let mut l = line.to_string();
    l.push('\n');
    tokio::time::timeout(Duration::from_secs(5), wr.write_all(l.as_bytes()))
        .await
        .map_err(|_| anyhow::anyhow!("ddptop is not reading"))??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One tick of an 8-GPU node with every field (NVLink, power, temperature, a pid per GPU)
    /// and its 8 ranks' CPU/RSS: the line each agent sends per period.
    #[test]
    fn an_eight_gpu_sample_is_compact() {
        let mut f = FakeGpus::h200(8);
        f.pids = (0..8).map(|i| vec![40_000 + i]).collect();
        f.sample().unwrap();
        let procs: BTreeMap<u32, ProcStat> = (0..8)
            .map(|i| {
                (
                    40_000 + i,
                    ProcStat {
                        cpu_pct: 101.5,
                        rss_bytes: 6 << 30,
                    },
                )
            })
            .collect();
        let line = AgentMsg::NodeSample(node_sample(1234.5, f.sample(), &procs)).to_line();
        eprintln!("node_sample, 8 GPUs + 8 procs: {} bytes", line.len() + 1);
        assert!(line.len() < 3 * 1024, "{} bytes", line.len());
    }

    #[test]
    fn secrets_are_the_first_two_lines_of_stdin() {
        let s = read_secrets(&b"tok\nabc\n"[..]).unwrap();
        assert_eq!(s.token, "tok");
        assert_eq!(s.fingerprint.as_deref(), Some("abc"));
        let s = read_secrets(&b"tok\n"[..]).unwrap();
        assert_eq!(s.fingerprint, None);
        let e = read_secrets(&b""[..]).unwrap_err().to_string();
        assert!(e.contains("no token"), "{e}");
    }

    #[test]
    fn a_failed_tick_is_said_and_figures_stay_plausible() {
        let mut procs = BTreeMap::new();
        procs.insert(
            7,
            ProcStat {
                cpu_pct: f32::NAN,
                rss_bytes: 9,
            },
        );
        let s = node_sample(1.0, Err(GpuError::Failed("x".into())), &procs);
        assert!(s.gpus.is_empty() && s.error.as_deref().unwrap().contains('x'));
        assert_eq!(s.procs[0].cpu_pct, 0.0);
        let line = AgentMsg::NodeSample(s).to_line();
        crate::protocol::agent::parse_agent(&line).unwrap();
        let mut f = FakeGpus::h200(2);
        let s = node_sample(2.0, f.sample(), &BTreeMap::new());
        assert_eq!(s.gpus.len(), 2);
        assert_eq!(s.gpus[0].link.as_deref(), Some("NVLink"));
    }
}
