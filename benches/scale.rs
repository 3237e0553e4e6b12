//! The scale benchmark: ddptop's cost against the number of ranks (docs/performance.md).
//!
//! `cargo bench --bench scale -- [--ranks 8,64,256,1024] [--rate 20] [--seconds 10] [--json]`
//!
//! For each N, a fresh process of this binary (`--one N`) runs a real engine and draws the
//! dashboard at 160x50 into a ratatui `TestBackend` (new data at most every 250 ms, as the
//! dashboard draws it),
//! and starts the load generator as another process (`--generate`), which connects N ranks over
//! the engine's Unix socket with the run's token and streams step + buckets (3 buckets) at
//! `--rate` steps/s per rank and a heartbeat per rank per second. CPU (getrusage) and RSS are the
//! engine process's alone. The parent prints one table (or JSON lines with `--json`; `--screen`
//! also prints each N's last frame). Run without `--bench` (as `cargo test --all-targets` does), it
//! only makes a one-second smoke run with 8 ranks.

use ddptop::loadgen::{self, Generator, Options, Report};
use std::time::Duration;

struct Args {
    ranks: Vec<u32>,
    rate: f64,
    seconds: f64,
    json: bool,
    screen: bool,
    /// Given by `cargo bench`; without it (`cargo test --all-targets`) a short smoke run.
    bench: bool,
    one: Option<u32>,
    generate: Option<u32>,
}

fn args() -> Args {
    let mut a = Args {
        ranks: vec![8, 64, 256, 1024],
        rate: 20.0,
        seconds: 10.0,
        json: false,
        screen: false,
        bench: false,
        one: None,
        generate: None,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let val = |i: usize| v.get(i + 1).cloned().unwrap_or_default();
    while i < v.len() {
        match v[i].as_str() {
            "--ranks" => {
                a.ranks = val(i)
                    .split(',')
                    .map(|n| n.trim().parse().expect("--ranks 8,64,256"))
                    .collect();
                i += 1;
            }
            "--rate" => {
                a.rate = val(i).parse().expect("--rate STEPS_PER_S");
                i += 1;
            }
            "--seconds" => {
                a.seconds = val(i).parse().expect("--seconds S");
                i += 1;
            }
            "--one" => {
                a.one = Some(val(i).parse().expect("--one N"));
                i += 1;
            }
            "--generate" => {
                a.generate = Some(val(i).parse().expect("--generate N"));
                i += 1;
            }
            "--json" => a.json = true,
            "--bench" => a.bench = true,
            "--screen" => a.screen = true,
            // Anything else is meant for criterion or libtest.
            _ => {}
        }
        i += 1;
    }
    a
}

fn passthrough(a: &Args) -> Vec<String> {
    vec![
        "--rate".into(),
        a.rate.to_string(),
        "--seconds".into(),
        a.seconds.to_string(),
    ]
}

fn main() -> anyhow::Result<()> {
    let a = args();
    let exe = std::env::current_exe()?;
    if let Some(n) = a.generate {
        let env = |k: &str| std::env::var(k).unwrap_or_default();
        let st = loadgen::generate(
            std::path::Path::new(&env("DDPTOP_SOCKET")),
            &env("DDPTOP_TOKEN"),
            &env("DDPTOP_RUN_ID"),
            n,
            a.rate,
            Duration::from_secs_f64(a.seconds),
        )?;
        println!("{}", serde_json::to_string(&st)?);
        return Ok(());
    }
    if let Some(n) = a.one {
        let dir = std::env::temp_dir().join(format!("ddptop-scale-{}", std::process::id()));
        let mut o = Options::new(n, dir.clone());
        o.steps_per_s = a.rate;
        o.duration = Duration::from_secs_f64(a.seconds);
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("--generate")
            .arg(n.to_string())
            .args(passthrough(&a));
        let rt = ddptop::util::runtime()?;
        let r = rt.block_on(loadgen::measure(&o, Generator::Command(cmd)));
        let _ = std::fs::remove_dir_all(&dir);
        println!("{}", serde_json::to_string(&r?)?);
        return Ok(());
    }
    let mut a = a;
    if !a.bench {
        // `cargo test --all-targets` runs this binary without --bench: 8 ranks for a second.
        a.ranks = vec![8];
        a.seconds = 1.0;
    }
    let mut reports: Vec<Report> = Vec::new();
    for n in &a.ranks {
        let out = std::process::Command::new(&exe)
            .arg("--one")
            .arg(n.to_string())
            .args(passthrough(&a))
            .stderr(std::process::Stdio::inherit())
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let r: Report = serde_json::from_str(text.trim())
            .map_err(|e| anyhow::anyhow!("N={n}: {} said {text:?}: {e}", out.status))?;
        if a.screen {
            eprintln!("N={n}, last frame:\n{}", r.screen);
        }
        if !a.bench && r.dropped() != 0 {
            anyhow::bail!("smoke run lost {} lines: {r:?}", r.dropped());
        }
        if a.json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            eprintln!("N={n} done");
        }
        reports.push(r);
    }
    if !a.json {
        println!(
            "scale: {} steps/s per rank (step + buckets), heartbeat 1/s per rank, {} s, dashboard 160x50 at <= 20 fps",
            a.rate, a.seconds
        );
        print!("{}", loadgen::table(&reports));
    }
    Ok(())
}
