//! `ddptop --script "2,wait-run,p,sleep:3,q" [--screen-dump FILE]`: the dashboard without a
//! terminal, for tests, docs and CI. Each step is an action name (`launch-k2`), a key as the
//! config writes it (`2`, `Tab`, `Enter`), `wait-run` (until no run is active or queued),
//! `sleep:S` (seconds) or `dump:FILE` (write the screen as it is now). Frames are drawn into an
//! in-memory buffer as the engine runs; at the end runs are stopped (unless `--detach`) and the
//! final screen is written to FILE as plain text (or to stdout). The screen is 120×40 unless
//! `DDPTOP_SCREEN=WxH` says otherwise.

use super::App;
use super::actions::Controller;
use crate::app::{Action, gpus};
use crate::engine::Engine;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest a `wait-run` waits.
const WAIT_RUN_MAX: Duration = Duration::from_secs(30 * 60);

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Act(Action),
    WaitRun,
    Sleep(Duration),
    /// Write the screen as it is now to this file.
    Dump(std::path::PathBuf),
}

/// Parse a script; an unknown step is an error naming it.
pub fn parse(script: &str, keys: &crate::keys::KeyMap) -> anyhow::Result<Vec<Step>> {
    script
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            if s == "wait-run" {
                return Ok(Step::WaitRun);
            }
            if let Some(path) = s.strip_prefix("dump:") {
                if path.is_empty() {
                    anyhow::bail!("script step `{s}`: dump:FILE needs a file");
                }
                return Ok(Step::Dump(path.into()));
            }
            if let Some(sec) = s.strip_prefix("sleep:") {
                let v: f64 = sec
                    .parse()
                    .map_err(|_| anyhow::anyhow!("script step `{s}`: sleep:S needs seconds"))?;
                if !(v.is_finite() && v >= 0.0) {
                    anyhow::bail!("script step `{s}`: seconds must be ≥ 0");
                }
                return Ok(Step::Sleep(Duration::from_secs_f64(v)));
            }
            Action::from_name(s)
                .or_else(|| keys.resolve_str(s))
                .map(Step::Act)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "unknown script step `{s}` (use an action name such as launch-k2, a bound key such as 2, wait-run, or sleep:S)"
                    )
                })
        })
        .collect()
}

fn screen_size() -> (u16, u16) {
    std::env::var("DDPTOP_SCREEN")
        .ok()
        .and_then(|s| {
            let (w, h) = s.split_once('x')?;
            Some((w.trim().parse().ok()?, h.trim().parse().ok()?))
        })
        .unwrap_or((120, 40))
}

/// The buffer as text, one line per row, trailing blanks trimmed.
pub fn screen_text(t: &Terminal<TestBackend>) -> String {
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Drive the engine until `deadline` or until `done` holds, folding in GPU samples and
/// starting queued launches as the dashboard does.
async fn drive(app: &mut App, deadline: Instant, done: impl Fn(&Controller, &Engine) -> bool) {
    let (ctrl, view, sampler, gpu_rx) = (
        &mut app.ctrl,
        &mut app.view,
        &mut app.sampler,
        &mut app.gpu_rx,
    );
    app.engine
        .drive(Some(deadline), |e| {
            while let Ok(u) = gpu_rx.try_recv() {
                gpus::apply_update(e.state_mut(), u);
            }
            sampler.watch(gpus::worker_pids(e.state()));
            ctrl.pump(e, view);
            done(ctrl, e)
        })
        .await;
}

pub async fn run(mut app: App, script: &str, dump: Option<&Path>) -> anyhow::Result<i32> {
    let steps = parse(script, &app.config.keys)?;
    let (w, h) = screen_size();
    let mut term = Terminal::new(TestBackend::new(w, h))?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let body = async {
        for step in &steps {
            match step {
                Step::Act(a) => {
                    if app.act(*a) {
                        break;
                    }
                    // Let the launch or command take effect before the next step.
                    drive(
                        &mut app,
                        Instant::now() + Duration::from_millis(50),
                        |_, _| false,
                    )
                    .await;
                }
                Step::WaitRun => {
                    drive(&mut app, Instant::now() + WAIT_RUN_MAX, |c, e| c.idle(e)).await;
                }
                Step::Sleep(d) => drive(&mut app, Instant::now() + *d, |_, _| false).await,
                Step::Dump(p) => {
                    term.draw(|f| app.draw(f))?;
                    std::fs::write(p, screen_text(&term))?;
                }
            }
            term.draw(|f| app.draw(f))?;
        }
        anyhow::Ok(())
    };
    let interrupted = tokio::select! {
        r = body => { r?; false }
        _ = sigterm.recv() => true,
        _ = sigint.recv() => true,
    };
    app.engine.shutdown(app.detach).await;
    term.draw(|f| app.draw(f))?;
    let text = screen_text(&term);
    match dump {
        Some(p) => std::fs::write(p, &text)?,
        None => print!("{text}"),
    }
    // Not joined: a stalled NVML call must not hold up the exit.
    drop(app.sampler);
    Ok(if interrupted { 130 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeyMap;

    #[test]
    fn parses_names_keys_waits_and_sleeps() {
        let k = KeyMap::default();
        let s = parse(
            "2, wait-run,p,sleep:1.5,launch-k4,Tab,dump:/tmp/x.txt,q",
            &k,
        )
        .unwrap();
        assert_eq!(
            s,
            vec![
                Step::Act(Action::Launch { k: 2 }),
                Step::WaitRun,
                Step::Act(Action::Probe),
                Step::Sleep(Duration::from_millis(1500)),
                Step::Act(Action::Launch { k: 4 }),
                Step::Act(Action::NextPane),
                Step::Dump("/tmp/x.txt".into()),
                Step::Act(Action::Quit),
            ]
        );
        assert!(
            parse("2,jump", &k)
                .unwrap_err()
                .to_string()
                .contains("`jump`")
        );
        assert!(parse("sleep:x", &k).is_err());
    }
}
