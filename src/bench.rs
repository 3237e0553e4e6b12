//! `ddptop bench-gpu`: where a dashboard second goes on this machine. Times NVML's start, each
//! NVML call of a sample (per GPU, averaged over the samples), and one full dashboard frame drawn
//! from those samples at 160×50, and prints a table. Measures the real calls the sampler thread
//! makes (`NvmlSource::sample`), not a copy of them.

use crate::app::{HostInfo, State, View};
use crate::cli::BenchGpuArgs;
use crate::gpu::nvml::NvmlSource;
use crate::gpu::{GpuSource, Update};
use crate::keys::KeyMap;
use crate::ui::{self, Theme};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::time::{Duration, Instant};

pub fn main(a: &BenchGpuArgs) -> anyhow::Result<i32> {
    let t0 = Instant::now();
    let mut src = NvmlSource::new().map_err(|e| anyhow::anyhow!("NVML: {e}"))?;
    let init = t0.elapsed();
    let gpus = src.info().count();
    let mut sample_times = Vec::new();
    let mut last = None;
    for _ in 0..a.samples {
        let t = Instant::now();
        let s = src.sample();
        sample_times.push(t.elapsed());
        last = Some(s);
        std::thread::sleep(Duration::from_millis(a.period_ms));
    }
    println!(
        "NVML init and static facts: {:.1} ms ({gpus} GPUs)",
        ms(init)
    );
    println!(
        "one sample (all GPUs): median {:.3} ms, p99 {:.3} ms over {} samples",
        ms(pct(&mut sample_times, 50)),
        ms(pct(&mut sample_times, 99)),
        a.samples
    );
    println!("{:<34} {:>8} {:>12}", "NVML call", "calls", "µs per call");
    for (call, (n, total)) in &src.calls.total {
        println!(
            "{:<34} {:>8} {:>12.1}",
            call.name(),
            n,
            total.as_secs_f64() * 1e6 / *n as f64
        );
    }
    for (gpu, call) in &src.calls.unsupported {
        println!(
            "GPU {gpu}: {} NotSupported, skipped after the first",
            call.name()
        );
    }

    // A dashboard frame with those GPUs, as the TUI draws one each second when idle.
    let mut state = State::new(HostInfo::default());
    crate::app::gpus::apply_info(&mut state, src.info());
    if let Some(s) = last {
        crate::app::gpus::apply_update(&mut state, Update::Gpus(s));
    }
    let view = View::default();
    let (theme, keys) = (Theme::dark(), KeyMap::default());
    let mut term = Terminal::new(TestBackend::new(160, 50))?;
    let mut frames = Vec::new();
    for _ in 0..a.frames {
        let t = Instant::now();
        term.draw(|f| {
            ui::draw(
                f,
                &ui::Ctx {
                    state: &state,
                    view: &view,
                    theme: &theme,
                    keys: &keys,
                },
            )
        })?;
        frames.push(t.elapsed());
    }
    println!(
        "dashboard frame 160x50 (draw into a buffer, no terminal I/O): median {:.3} ms, p99 {:.3} ms",
        ms(pct(&mut frames, 50)),
        ms(pct(&mut frames, 99))
    );
    Ok(0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pct(v: &mut [Duration], p: usize) -> Duration {
    v.sort();
    v[((v.len() - 1) * p) / 100]
}
