//! Other nodes' GPUs from NVIDIA's DCGM exporter (`[nodes] gpu_source = "dcgm"`;
//! docs/multinode.md): where a cluster already runs dcgm-exporter on each node, ddptop reads its
//! Prometheus text endpoint (default `http://{host}:9400/metrics`) at the dashboard's rate
//! instead of starting an agent: a GET with `ureq` (no new daemon), its answer bounded in size
//! and its figures in range (`plausible`), through the same path as an agent's samples.
//!
//! Read from the exporter's default counters (per GPU, label `gpu="N"`): `DCGM_FI_DEV_GPU_UTIL`
//! (%), `DCGM_FI_DEV_FB_USED` and `DCGM_FI_DEV_FB_FREE` (+ `DCGM_FI_DEV_FB_RESERVED` when
//! exported; MiB: total = used + free + reserved), `DCGM_FI_DEV_POWER_USAGE` (W),
//! `DCGM_FI_DEV_GPU_TEMP` (°C); the name from the `modelName` label and the driver from
//! `DCGM_FI_DRIVER_VERSION`. No process figures: the exporter does not list pids.

use super::SupEvent;
use super::agent_conn::AgentEvent;
use crate::protocol::agent::{AgentHello, GpuSourceKind, NodeGpu, NodeSample};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The most of an answer read (a node's full exporter page is tens of KiB).
const MAX_BODY: usize = 4 << 20;
/// One GET's time limit.
const GET_TIMEOUT: Duration = Duration::from_secs(3);
/// GPU indices read from a page (a node has 8 or 16): a page naming more is not a GPU node's.
const MAX_GPU_INDEX: u32 = 256;
/// Label text kept (a model name, a driver version).
const MAX_LABEL: usize = 96;

/// Whether `v` of counter `name` is a value a GPU can report; anything else (a broken or
/// hostile exporter) is left out, never shown.
fn plausible(name: &str, v: f64) -> bool {
    const MIB_16_TIB: f64 = 16.0 * 1024.0 * 1024.0;
    let max = match name {
        "DCGM_FI_DEV_GPU_UTIL" => 100.0,
        "DCGM_FI_DEV_POWER_USAGE" => 10_000.0,
        "DCGM_FI_DEV_GPU_TEMP" => 200.0,
        "DCGM_FI_DEV_FB_USED" | "DCGM_FI_DEV_FB_FREE" | "DCGM_FI_DEV_FB_RESERVED" => MIB_16_TIB,
        _ => return true,
    };
    (0.0..=max).contains(&v)
}

fn label(s: &str) -> String {
    crate::util::printable(s).chars().take(MAX_LABEL).collect()
}

/// One sample line: metric name, labels, value.
fn parse_line(line: &str) -> Option<(&str, BTreeMap<&str, &str>, f64)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, rest) = match line.find('{') {
        Some(i) => (&line[..i], &line[i..]),
        None => {
            let (n, r) = line.split_once(char::is_whitespace)?;
            (n, r)
        }
    };
    let mut labels = BTreeMap::new();
    let value_part = if let Some(body) = rest.strip_prefix('{') {
        let end = body.find('}')?;
        let mut s = &body[..end];
        while !s.is_empty() {
            let (k, r) = s.split_once("=\"")?;
            // Label values here never hold escaped quotes (names, UUIDs, versions).
            let (v, r) = r.split_once('"')?;
            labels.insert(k.trim().trim_start_matches(',').trim(), v);
            s = r.trim_start_matches(',').trim();
        }
        &body[end + 1..]
    } else {
        rest
    };
    // A timestamp may follow the value.
    let value: f64 = value_part.split_whitespace().next()?.parse().ok()?;
    value.is_finite().then_some((name.trim(), labels, value))
}

/// The GPUs of one exporter page, by index, and the driver version when exported.
pub fn parse_metrics(text: &str) -> (Vec<NodeGpu>, Option<String>) {
    let mut gpus: BTreeMap<u32, NodeGpu> = BTreeMap::new();
    let mut fb: BTreeMap<u32, [Option<f64>; 3]> = BTreeMap::new();
    let mut driver = None;
    for (name, labels, v) in text.lines().filter_map(parse_line) {
        let Some(i) = labels
            .get("gpu")
            .and_then(|g| g.parse::<u32>().ok())
            .filter(|i| *i < MAX_GPU_INDEX)
        else {
            continue;
        };
        if !plausible(name, v) {
            continue;
        }
        if driver.is_none() {
            driver = labels.get("DCGM_FI_DRIVER_VERSION").map(|d| label(d));
        }
        let g = gpus.entry(i).or_insert_with(|| NodeGpu {
            index: i,
            ..Default::default()
        });
        if g.name.is_none() {
            g.name = labels.get("modelName").map(|m| label(m));
        }
        let nonneg = v.max(0.0);
        match name {
            "DCGM_FI_DEV_GPU_UTIL" => g.util_pct = Some(nonneg.round() as u32),
            "DCGM_FI_DEV_POWER_USAGE" => g.power_w = Some(nonneg),
            "DCGM_FI_DEV_GPU_TEMP" => g.temp_c = Some(nonneg.round() as u32),
            "DCGM_FI_DEV_FB_USED" => fb.entry(i).or_default()[0] = Some(nonneg),
            "DCGM_FI_DEV_FB_FREE" => fb.entry(i).or_default()[1] = Some(nonneg),
            "DCGM_FI_DEV_FB_RESERVED" => fb.entry(i).or_default()[2] = Some(nonneg),
            _ => {}
        }
    }
    const MIB: f64 = 1024.0 * 1024.0;
    for (i, [used, free, reserved]) in fb {
        if let Some(g) = gpus.get_mut(&i) {
            g.mem_used = used.map(|u| (u * MIB) as u64);
            if let (Some(u), Some(f)) = (used, free) {
                g.mem_total = Some(((u + f + reserved.unwrap_or(0.0)) * MIB) as u64);
            }
        }
    }
    (gpus.into_values().collect(), driver)
}

/// A node's exporter URL from the `[nodes] dcgm_url` template: `{host}` is the node's name from
/// `--nodes`, `{addr}` its `=ADDR` when given (else the name).
pub fn node_url(template: &str, host: &str, addr: Option<&str>) -> String {
    template
        .replace("{host}", host)
        .replace("{addr}", addr.unwrap_or(host))
}

/// `http://HOST[:PORT]/PATH` → (host:port, path).
pub fn split_url(url: &str) -> anyhow::Result<(String, String)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("{url}: only http:// URLs are read"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if hostport.is_empty() {
        anyhow::bail!("{url}: no host");
    }
    let hostport = if hostport
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && (!hostport.contains('[') || hostport.contains("]:"))
    {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    Ok((hostport, path.to_string()))
}

/// GET `url` and return the body of a 200 answer, at most `MAX_BODY` bytes, within
/// `GET_TIMEOUT`. `ureq` speaks the HTTP (status, chunked bodies, the limits); it blocks, so it
/// runs on tokio's blocking pool.
pub async fn http_get(url: &str) -> anyhow::Result<String> {
    split_url(url)?; // only http:// URLs, with a host: said the same way as before
    let owned = url.to_string();
    tokio::task::spawn_blocking(move || get_blocking(&owned))
        .await
        .map_err(|e| anyhow::anyhow!("{url}: {e}"))?
}

fn get_blocking(url: &str) -> anyhow::Result<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(GET_TIMEOUT))
        .max_redirects(0)
        .user_agent("ddptop")
        .build()
        .into();
    let mut answer = agent
        .get(url)
        .header("Accept", "text/plain")
        .call()
        .map_err(|e| match e {
            ureq::Error::StatusCode(code) => anyhow::anyhow!("{url}: HTTP {code}"),
            ureq::Error::Timeout(_) => {
                anyhow::anyhow!("{url}: no answer within {}s", GET_TIMEOUT.as_secs())
            }
            e => anyhow::anyhow!("{url}: {e}"),
        })?;
    answer
        .body_mut()
        .with_config()
        .limit(MAX_BODY as u64)
        .read_to_string()
        .map_err(|e| match e {
            ureq::Error::BodyExceedsLimit(_) => {
                anyhow::anyhow!("{url}: answer over {} MiB", MAX_BODY >> 20)
            }
            e => anyhow::anyhow!("{url}: {e}"),
        })
}

/// Poll one node's exporter every `period` until the task is aborted (the run ended). The
/// first good page opens the node (as an agent's hello would), each page is a sample, and a
/// failed read greys the node until the next good one.
pub async fn poll_node(
    run: String,
    node: String,
    url: String,
    period: Duration,
    tx: mpsc::Sender<SupEvent>,
) {
    let t0 = Instant::now();
    let mut open = false;
    let mut said_error = false;
    let send = |ev: AgentEvent| {
        tx.send(SupEvent::Agent {
            run: run.clone(),
            ev,
        })
    };
    loop {
        let tick = Instant::now();
        match http_get(&url).await {
            Ok(body) => {
                let (gpus, driver) = parse_metrics(&body);
                if !open {
                    let hello = AgentHello {
                        token: String::new(),
                        run_id: run.clone(),
                        node: node.clone(),
                        pid: 0,
                        source: GpuSourceKind::Dcgm,
                        gpus: gpus.len() as u32,
                        driver,
                        note: gpus
                            .is_empty()
                            .then(|| format!("{url} lists no DCGM_FI_DEV_* GPU metrics")),
                        t: 0.0,
                    };
                    if send(AgentEvent::Hello { hello, peer: None }).await.is_err() {
                        return;
                    }
                    open = true;
                    said_error = false;
                }
                let s = NodeSample {
                    t: t0.elapsed().as_secs_f64(),
                    gpus,
                    procs: Vec::new(),
                    error: None,
                };
                let ev = AgentEvent::Sample {
                    node: node.clone(),
                    sample: Box::new(s),
                };
                if send(ev).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                if open {
                    open = false;
                    let ev = AgentEvent::Gone {
                        node: node.clone(),
                        why: Some(e.to_string()),
                    };
                    if send(ev).await.is_err() {
                        return;
                    }
                } else if !said_error {
                    said_error = true;
                    let ev = AgentEvent::Failed {
                        node: node.clone(),
                        why: format!("DCGM exporter not read: {e}"),
                    };
                    if send(ev).await.is_err() {
                        return;
                    }
                }
            }
        }
        tokio::time::sleep(period.saturating_sub(tick.elapsed())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape dcgm-exporter writes (HELP/TYPE comments, labels, one value per line).
    pub const PAGE: &str = r#"# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aa",device="nvidia0",modelName="NVIDIA H200",Hostname="gpu-b",DCGM_FI_DRIVER_VERSION="570.86.15"} 87
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-bb",device="nvidia1",modelName="NVIDIA H200",Hostname="gpu-b",DCGM_FI_DRIVER_VERSION="570.86.15"} 12
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aa",device="nvidia0",modelName="NVIDIA H200",Hostname="gpu-b"} 1024
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-aa",device="nvidia0",modelName="NVIDIA H200",Hostname="gpu-b"} 3072
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-aa",device="nvidia0",modelName="NVIDIA H200",Hostname="gpu-b"} 612.25
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-bb",device="nvidia1",modelName="NVIDIA H200",Hostname="gpu-b"} 61 1700000000000
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-bb"} NaN
go_goroutines 12
"#;

    #[test]
    fn exporter_pages_become_gpu_rows() {
        let (gpus, driver) = parse_metrics(PAGE);
        assert_eq!(driver.as_deref(), Some("570.86.15"));
        assert_eq!(gpus.len(), 2);
        let g = &gpus[0];
        assert_eq!(g.name.as_deref(), Some("NVIDIA H200"));
        assert_eq!(g.util_pct, Some(87));
        assert_eq!(g.mem_used, Some(1 << 30));
        assert_eq!(g.mem_total, Some(4 << 30));
        assert_eq!(g.power_w, Some(612.25));
        assert_eq!(gpus[1].temp_c, Some(61), "a trailing timestamp is skipped");
        assert_eq!(gpus[1].mem_total, None, "no FB figures: unknown, not 0");
        assert!(parse_metrics("garbage {\n}}} 1\n").0.is_empty());
    }

    #[test]
    fn urls_are_split_for_a_plain_get() {
        let t = "http://{addr}:9400/metrics";
        assert_eq!(
            node_url(t, "b", Some("10.0.0.2")),
            "http://10.0.0.2:9400/metrics"
        );
        assert_eq!(node_url(t, "b", None), "http://b:9400/metrics");
        assert_eq!(
            split_url("http://gpu-b:9400/metrics").unwrap(),
            ("gpu-b:9400".into(), "/metrics".into())
        );
        assert_eq!(split_url("http://h").unwrap(), ("h:80".into(), "/".into()));
        assert!(split_url("https://h/").is_err());
    }

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot HTTP server on loopback answering `answer`.
    async fn serve_once(answer: String) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(answer.as_bytes()).await;
        });
        format!("http://{addr}/metrics")
    }

    /// Issue 45: a hostile page cannot put implausible figures on screen or grow the GPU list.
    #[test]
    fn implausible_figures_and_gpu_indices_are_left_out() {
        let mut page = String::from(
            "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 1e300\n\
             DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} -5\n\
             DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",modelName=\"X\u{1b}[2J\"} 250\n\
             DCGM_FI_DEV_FB_USED{gpu=\"0\"} 1e30\n\
             DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"} 55\n",
        );
        for i in 0..10_000 {
            page.push_str(&format!(
                "DCGM_FI_DEV_GPU_TEMP{{gpu=\"{}\"}} 40\n",
                1000 + i
            ));
        }
        let (gpus, _) = parse_metrics(&page);
        assert_eq!(gpus.len(), 1, "{gpus:?}");
        assert_eq!((gpus[0].index, gpus[0].temp_c), (1, Some(55)));
    }

    #[tokio::test]
    async fn an_oversized_or_chunked_answer_is_bounded_and_read() {
        let big = "x".repeat(MAX_BODY + 10);
        let url = serve_once(format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{big}",
            big.len()
        ))
        .await;
        let e = http_get(&url).await.unwrap_err().to_string();
        assert!(e.contains("over 4 MiB"), "{e}");
        let chunked = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{PAGE}\r\n0\r\n\r\n",
            PAGE.len()
        );
        let url = serve_once(chunked).await;
        let body = http_get(&url).await.unwrap();
        assert_eq!(parse_metrics(&body).0.len(), 2);
    }

    #[tokio::test]
    async fn a_fixture_exporter_is_read_over_http() {
        let url = serve_once(format!(
            "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{PAGE}"
        ))
        .await;
        let body = http_get(&url).await.unwrap();
        assert_eq!(parse_metrics(&body).0.len(), 2);
        let url = serve_once("HTTP/1.0 404 Not Found\r\n\r\n".into()).await;
        let e = http_get(&url).await.unwrap_err().to_string();
        assert!(e.contains("404"), "{e}");
    }

    #[tokio::test]
    async fn polling_opens_the_node_and_sends_samples() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let a = format!("HTTP/1.0 200 OK\r\n\r\n{PAGE}");
                let _ = s.write_all(a.as_bytes()).await;
            }
        });
        let (tx, mut rx) = mpsc::channel(8);
        let task = tokio::spawn(poll_node(
            "r1".into(),
            "b".into(),
            format!("http://{addr}/metrics"),
            Duration::from_millis(20),
            tx,
        ));
        let Some(SupEvent::Agent {
            ev: AgentEvent::Hello { hello, .. },
            ..
        }) = rx.recv().await
        else {
            panic!("first a hello");
        };
        assert_eq!(hello.source, GpuSourceKind::Dcgm);
        assert_eq!(hello.gpus, 2);
        let Some(SupEvent::Agent {
            ev: AgentEvent::Sample { sample, .. },
            ..
        }) = rx.recv().await
        else {
            panic!("then samples");
        };
        assert_eq!(sample.gpus[0].util_pct, Some(87));
        task.abort();
    }
}
