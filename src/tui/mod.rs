//! `ddptop` with no subcommand: the dashboard.
//!
//! One tokio task owns the engine (and through it `State`) and `select!`s over the terminal's
//! key events, the engine's supervisor events, the GPU sampler's channel, a 250 ms tick (only
//! while runs are active: watchdog, throughput samples, log tails) and SIGTERM/SIGHUP/SIGINT. It
//! redraws only when `State.generation` changed (or the terminal was resized), at most
//! `max_fps` times a second, so an idle dashboard does no work.
//!
//! Leaving — `q`, Ctrl-C, SIGTERM, SIGHUP (terminal closed), a panic — stops every run first
//! (unless `--detach`) and restores the terminal last, with `try_restore` (a dead tty must not
//! turn cleanup into a second panic).
//!
//! `--script STEPS [--screen-dump FILE]` runs the same actions without a terminal and writes the
//! final screen as text (see `script`).

pub mod actions;
pub mod script;

use crate::app::{HostInfo, Level, State};
use crate::cli::{GlobalArgs, TuiArgs};
use crate::config::{Config, no_color_env};
use crate::engine::{Engine, EngineOptions};
use crate::gpu::{self, GpuSource, Update, nvml::NvmlSource, sampler::Sampler};
use crate::protocol::Backend;
use crate::ui::{self, ThemeSet, timeline::FrozenStep};
use actions::{Controller, Flow, LaunchDefaults};
use crossterm::event::{Event, EventStream, KeyCode, KeyEventKind};
use futures::{FutureExt, StreamExt};
use std::io::IsTerminal;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

/// What `main` prints when there is no terminal.
pub const NO_TTY: &str = "ddptop needs a terminal; use `ddptop run …` for headless runs";

/// Everything the loop owns.
pub struct App {
    pub engine: Engine,
    pub ctrl: Controller,
    pub config: Config,
    pub themes: ThemeSet,
    pub sampler: Sampler,
    pub gpu_rx: mpsc::Receiver<Update>,
    pub frozen: Option<FrozenStep>,
    pub detach: bool,
    /// Index of the last preset applied with `next-preset` (starts before the first).
    pub preset_idx: usize,
}

impl App {
    /// Apply an action from a key or a script step; `true` = quit.
    pub fn act(&mut self, a: crate::app::Action) -> bool {
        match self.ctrl.handle(&mut self.engine, a) {
            Flow::Quit => return true,
            Flow::NextTheme => {
                let name = self.themes.cycle().name.clone();
                let st = self.engine.state_mut();
                let note = if no_color_env() {
                    " (NO_COLOR is set: monochrome only)"
                } else {
                    ""
                };
                st.push_message(Level::Info, None, format!("theme {name}{note}"));
            }
            Flow::NextPreset => {
                let names: Vec<&String> = self.config.presets.keys().collect();
                let st = self.engine.state_mut();
                if names.is_empty() {
                    st.push_message(Level::Info, None, "no presets in the config");
                } else {
                    self.preset_idx = self.preset_idx.wrapping_add(1) % names.len();
                    let name = names[self.preset_idx].clone();
                    let preset = self.config.presets[&name].clone();
                    // `None` entries unset the variable; a preset replaces the toggles.
                    st.next.env = preset.clone();
                    let desc: Vec<String> = preset
                        .iter()
                        .map(|(k, v)| match v {
                            Some(v) => format!("{k}={v}"),
                            None => format!("-{k}"),
                        })
                        .collect();
                    st.push_message(
                        Level::Info,
                        None,
                        format!("next launch: preset {name} ({})", desc.join(" ")),
                    );
                }
            }
            Flow::Frozen => {
                self.frozen = ui::timeline::capture(self.engine.state());
                let st = self.engine.state_mut();
                if self.frozen.is_none() {
                    st.push_message(Level::Info, None, "frozen (no timeline step to hold yet)");
                }
            }
            Flow::Continue => {}
        }
        if !self.engine.state().frozen {
            self.frozen = None;
        }
        false
    }

    /// After any engine event: watch the workers' pids, start queued launches.
    pub fn after_event(&mut self) {
        self.sampler.watch(gpu::worker_pids(self.engine.state()));
        self.ctrl.pump(&mut self.engine);
    }

    pub fn draw(&self, f: &mut ratatui::Frame) {
        ui::draw_view(
            f,
            self.engine.state(),
            self.themes.current(),
            &self.config.keys,
            self.frozen.as_ref(),
        );
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Load config and themes, pick the backend, start the engine and the sampler.
async fn setup(g: &GlobalArgs, a: &TuiArgs) -> anyhow::Result<App> {
    let cfg_path = crate::paths::config_file(g.config.as_deref());
    let config = Config::load(Some(&cfg_path)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let theme_name = a.theme.clone().unwrap_or_else(|| config.theme.clone());
    if !ui::theme::theme_exists(&theme_name, config.themes_dir().as_deref()) {
        anyhow::bail!(
            "unknown theme `{theme_name}` (built in: {})",
            crate::config::BUILTIN_THEMES.join(", ")
        );
    }
    let themes = ThemeSet::load(&theme_name, config.themes_dir().as_deref(), no_color_env())
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let python = g.python.clone().or_else(|| config.python.clone());
    let resolved = crate::detect::resolve(
        a.backend,
        python.as_deref(),
        g.workers_dir.as_deref(),
        config.torchrun.as_deref(),
    )?;
    let profile = (resolved.backend == Backend::Sim).then(|| a.profile.clone());
    if let Some(p) = &profile
        && crate::costmodel::Profile::get(p).is_none()
    {
        anyhow::bail!(
            "unknown profile `{p}`; known: {}",
            crate::costmodel::Profile::names().join(", ")
        );
    }

    let backend_label = match resolved.backend {
        Backend::Sim => format!("SIMULATED {}", profile.as_deref().unwrap_or("")),
        Backend::Gloo => "gloo (CPU)".to_string(),
        Backend::Nccl => "NCCL".to_string(),
    };
    let mut state = State::new(HostInfo {
        hostname: hostname(),
        gpu_summary: None,
        interconnect: None,
        backend_label: backend_label.trim().to_string(),
        torch: resolved.torch.clone(),
        nccl: None,
    });
    state.max_k = resolved.gpus;

    let mut opts = EngineOptions::new(crate::paths::data_dir(g.data_dir.as_deref()));
    opts.python = resolved.python.clone();
    opts.sim_speed = a.sim_speed;
    opts.watchdog.floor_s = config.watchdog.hang_floor_s;
    opts.watchdog.factor = config.watchdog.hang_factor;
    opts.watchdog.startup_s = config.watchdog.startup_s;
    let mut engine = Engine::start(opts, state)?;

    let st = engine.state_mut();
    st.push_message(Level::Info, None, resolved.note.clone());
    if config.created
        && let Some(p) = &config.path
    {
        st.push_message(
            Level::Info,
            None,
            format!("wrote the default config to {}", p.display()),
        );
    }
    let source: Option<Box<dyn GpuSource>> = match NvmlSource::new() {
        Ok(src) => {
            gpu::apply_info(st, src.info());
            Some(Box::new(src))
        }
        Err(why) => {
            st.gpu_note = Some(gpu::nvml_note(&why));
            None
        }
    };
    let (tx, gpu_rx) = mpsc::channel(16);
    let sampler = Sampler::spawn(
        source,
        Duration::from_millis(config.refresh.gpu_sample_ms),
        tx,
    );
    let ctrl = Controller::new(LaunchDefaults::new(resolved.backend, profile));
    Ok(App {
        engine,
        ctrl,
        config,
        themes,
        sampler,
        gpu_rx,
        frozen: None,
        detach: a.detach,
        preset_idx: usize::MAX,
    })
}

/// Entry point for `ddptop` with no subcommand. Returns the exit code.
pub fn main(g: &GlobalArgs, a: &TuiArgs) -> anyhow::Result<i32> {
    if a.script.is_none() && !(std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        eprintln!("{NO_TTY}");
        return Ok(2);
    }
    let rt = crate::cli::runtime()?;
    rt.block_on(async {
        let app = setup(g, a).await?;
        match &a.script {
            Some(s) => script::run(app, s, a.screen_dump.as_deref()).await,
            None => interactive(app).await,
        }
    })
}

/// The interactive dashboard: init the terminal, loop, then stop runs and restore.
pub async fn interactive(mut app: App) -> anyhow::Result<i32> {
    let mut terminal = ratatui::try_init()?;
    let result = AssertUnwindSafe(event_loop(&mut app, &mut terminal))
        .catch_unwind()
        .await;
    // Runs first (their process trees must not outlive us), the terminal last.
    app.engine.shutdown(app.detach).await;
    // Not joined: a stalled NVML call must not hold up the exit.
    drop(app.sampler);
    let _ = ratatui::try_restore();
    match result {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

async fn event_loop(app: &mut App, terminal: &mut ratatui::DefaultTerminal) -> anyhow::Result<i32> {
    let fps = app.config.refresh.max_fps.max(1);
    let frame_gap = Duration::from_secs_f64(1.0 / f64::from(fps));
    let mut events = EventStream::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut drawn_gen: Option<u64> = None;
    let mut last_draw = Instant::now() - frame_gap;
    let mut force = true;
    loop {
        // Draw when something changed, no more often than max_fps.
        let generation = app.engine.state().generation;
        let mut next_frame = None;
        if force || drawn_gen != Some(generation) {
            let due = last_draw + frame_gap;
            if Instant::now() >= due {
                terminal.draw(|f| app.draw(f))?;
                last_draw = Instant::now();
                drawn_gen = Some(generation);
                force = false;
            } else {
                next_frame = Some(due);
            }
        }
        let active = app.engine.has_active_runs();
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(Event::Key(k))) => {
                    if k.kind == KeyEventKind::Release {
                        continue;
                    }
                    if app.engine.state().show_help && k.code == KeyCode::Esc {
                        let st = app.engine.state_mut();
                        st.show_help = false;
                        st.generation += 1;
                        continue;
                    }
                    if let Some(a) = app.config.keys.resolve(&k)
                        && app.act(a)
                    {
                        break;
                    }
                    force = true;
                }
                Some(Ok(Event::Resize(..))) => force = true,
                Some(Ok(_)) => {}
                // The terminal went away (EIO): leave like SIGHUP.
                Some(Err(_)) | None => break,
            },
            ev = app.engine.next_event() => {
                app.engine.apply(ev);
                app.after_event();
            }
            Some(u) = app.gpu_rx.recv() => gpu::apply_update(app.engine.state_mut(), u),
            _ = tick.tick(), if active => {
                app.engine.tick();
                app.after_event();
            }
            _ = sleep_until(next_frame), if next_frame.is_some() => {}
            _ = sigterm.recv() => break,
            _ = sighup.recv() => break,
            _ = sigint.recv() => break,
        }
    }
    Ok(0)
}

async fn sleep_until(t: Option<Instant>) {
    if let Some(t) = t {
        tokio::time::sleep_until(t.into()).await;
    }
}
