//! `ddptop` with no subcommand: the dashboard.
//!
//! One tokio task owns the engine (and through it `State`) and `select!`s over the terminal's
//! key events, the engine's supervisor events, the GPU sampler's channel, a 250 ms tick (only
//! while runs are active: watchdog, throughput samples, log tails) and SIGTERM/SIGHUP/SIGINT. It
//! redraws only when a handler said something shown changed (or the terminal was resized), at most
//! `max_fps` times a second, so an idle dashboard does no work.
//!
//! Leaving — `q`, Ctrl-C, SIGTERM, SIGHUP (terminal closed), a panic — stops every run first
//! (unless `--detach`) and restores the terminal last, with `try_restore` (a dead tty must not
//! turn cleanup into a second panic).
//!
//! `--script STEPS [--screen-dump FILE]` runs the same actions without a terminal and writes the
//! final screen as text (see `script`).

pub mod actions;
pub mod mouse;
pub mod script;
pub mod tune;

use crate::app::{self as model, Level, View};
use crate::cli::{GlobalArgs, TuiArgs};
use crate::config::{Config, no_color_env};
use crate::engine::Engine;
use crate::gpu::{GpuSource, Update, nvml::NvmlSource, sampler::Sampler};
use crate::plan::{self, BrokenConfig};
use crate::run::NcclSettings;
use crate::ui::{self, ThemeSet};
use actions::{Controller, Flow};
use crossterm::event::{Event, EventStream, KeyEventKind};
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
    /// What the user is looking at (the engine holds the data).
    pub view: View,
    pub detach: bool,
    /// Index of the last preset applied with `next-preset` (starts before the first).
    pub preset_idx: usize,
    /// Mouse capture on (config `mouse`, off with `--no-mouse`).
    pub mouse: bool,
}

impl App {
    /// Apply an action from a key or a script step; `true` = quit.
    pub fn act(&mut self, a: crate::app::Action) -> bool {
        match self.ctrl.handle(&mut self.engine, &mut self.view, a) {
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
                let st = self.engine.state_mut();
                let gloo = st.host.backend == crate::run::HostBackend::Gloo;
                // NCCL settings are not offered on gloo (no NCCL runs there), as `n`/`P` are not.
                let names: Vec<&String> = self
                    .config
                    .presets
                    .iter()
                    .filter(|(_, env)| {
                        !gloo
                            || plan::nccl_on_gloo(
                                crate::protocol::Backend::Gloo,
                                &NcclSettings::with(env),
                            )
                            .is_none()
                    })
                    .map(|(name, _)| name)
                    .collect();
                if names.is_empty() && gloo && !self.config.presets.is_empty() {
                    st.push_message(
                        Level::Info,
                        None,
                        "presets set NCCL variables: not offered on gloo, which runs no NCCL",
                    );
                } else if names.is_empty() {
                    st.push_message(Level::Info, None, "no presets in the config");
                } else {
                    self.preset_idx = self.preset_idx.wrapping_add(1) % names.len();
                    let name = names[self.preset_idx].clone();
                    // A preset replaces the toggles, on top of ddptop's defaults.
                    st.next.nccl = NcclSettings::with(&self.config.presets[&name]);
                    st.next.preset = Some(name.clone());
                    let desc = st.next.nccl.short();
                    st.push_message(
                        Level::Info,
                        None,
                        format!("next launch: preset {name} ({desc})"),
                    );
                }
            }
            Flow::SaveTuned => {
                let path = self
                    .config
                    .path
                    .clone()
                    .unwrap_or_else(|| crate::paths::config_file(None));
                let st = self.engine.state_mut();
                match self.ctrl.save_tuned(st, &path) {
                    Ok(s) => {
                        // Re-read so that `e` offers the new preset at once.
                        if let Ok(c) = Config::load(Some(&path)) {
                            self.config.presets = c.presets;
                        }
                        st.push_message(
                            Level::Info,
                            None,
                            format!(
                                "saved preset {} in {} (e cycles presets; ddptop run --preset {} …)",
                                s.name, s.path, s.name
                            ),
                        );
                    }
                    Err(e) => st.push_message(Level::Warn, None, format!("not saved: {e}")),
                }
            }
            Flow::Continue => {}
        }
        false
    }

    /// After any engine event: watch the workers' pids, start queued launches.
    pub fn after_event(&mut self) {
        self.sampler
            .watch(model::gpus::worker_pids(self.engine.state()));
        self.ctrl.pump(&mut self.engine, &mut self.view);
    }

    pub fn draw(&self, f: &mut ratatui::Frame) {
        let ctx = ui::Ctx {
            state: self.engine.state(),
            view: &self.view,
            theme: self.themes.current(),
            keys: &self.config.keys,
        };
        ui::draw(f, &ctx);
    }
}

/// Load config and themes, pick the backend, start the engine and the sampler.
async fn setup(g: &GlobalArgs, a: &TuiArgs) -> anyhow::Result<App> {
    let setup = plan::setup(
        &g.globals(),
        a.backend,
        a.profile.as_deref(),
        &[],
        BrokenConfig::Fail,
    )?;
    let config = &setup.config;
    let theme_name = a.theme.clone().unwrap_or_else(|| config.theme.clone());
    if !crate::config::theme_exists(&theme_name, config.themes_dir().as_deref()) {
        anyhow::bail!(
            "unknown theme `{theme_name}` (built in: {})",
            crate::config::BUILTIN_THEMES.join(", ")
        );
    }
    let no_color = no_color_env();
    // With NO_COLOR no user theme is shown, so none is read.
    let user_themes = if no_color {
        Vec::new()
    } else {
        crate::config::user_themes(config.themes_dir().as_deref())
            .map_err(|e| anyhow::anyhow!("{e}"))?
    };
    let themes =
        ThemeSet::load(&theme_name, &user_themes, no_color).map_err(|e| anyhow::anyhow!("{e}"))?;
    let state = setup.state(crate::paths::hostname());
    let template = setup.template();
    let mut attach = None;
    if let Some((script, args)) = a.attach.split_first() {
        let cwd = std::env::current_dir()?;
        let target =
            crate::run::AttachTarget::new(std::path::Path::new(script), args.to_vec(), &cwd)
                .map_err(crate::util::BadInput)?;
        if template.backend == crate::protocol::Backend::Sim {
            return Err(crate::util::BadInput(
                "--attach runs your script with real PyTorch: use --backend gloo (CPU) or nccl (GPUs)"
                    .into(),
            )
            .into());
        }
        attach = Some(target);
    }
    let mut opts = setup.opts;
    opts.sim_speed = a.sim_speed;
    let config = setup.config;
    let mut state = state;
    state.next.target = launch_target(&config, state.max_k);
    // The config's nodes are the engine's; launches stay on this node until `N` says otherwise.
    opts.nodes = (!config.nodes.hosts.is_empty())
        .then(|| config.nodes.options(config.nodes.hosts.clone()).ok())
        .flatten();
    let mut engine = Engine::start(opts, state)?;
    engine.set_all_nodes(false);

    let st = engine.state_mut();
    st.push_message(Level::Info, None, setup.resolved.note.clone());
    if let Some(b) = &config.nodes.broken {
        st.push_message(
            Level::Warn,
            None,
            format!("{b}; launches stay on this node, the rest of the config applies"),
        );
    }
    if let Some(a) = &attach {
        st.next.experiment = crate::run::Experiment::find(|f| f.runs_user_script());
        st.next.attach = Some(a.label());
        st.push_message(
            Level::Info,
            None,
            format!("attached script: {} (1/2/4 run it at that k)", a.label()),
        );
    }
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
            model::gpus::apply_info(st, src.info());
            Some(Box::new(src))
        }
        Err(why) => {
            st.gpu_note = Some(crate::gpu::nvml_note(&why));
            None
        }
    };
    let (tx, gpu_rx) = mpsc::channel(16);
    let sampler = Sampler::spawn(
        source,
        Duration::from_millis(config.refresh.gpu_sample_ms),
        tx,
    );
    let mut ctrl = Controller::new(template);
    ctrl.attach = attach;
    let timeline_steps = config.timeline.steps;
    let config_mouse = config.mouse;
    Ok(App {
        engine,
        ctrl,
        config,
        themes,
        sampler,
        gpu_rx,
        view: View {
            timeline_steps,
            ..View::default()
        },
        detach: a.detach,
        preset_idx: usize::MAX,
        mouse: config_mouse && !a.no_mouse,
    })
}

/// The dashboard's launch target from the config's `[nodes]` (this node at first).
fn launch_target(config: &Config, local_max_k: u32) -> model::target::LaunchTarget {
    model::target::LaunchTarget {
        hosts: config.nodes.hosts.clone(),
        tls: config.nodes.tls,
        broken: config.nodes.broken.clone(),
        config: config.path.as_ref().map(|p| p.display().to_string()),
        all: false,
        local_max_k,
    }
}

/// Entry point for `ddptop` with no subcommand. Returns the exit code.
pub fn main(g: &GlobalArgs, a: &TuiArgs) -> anyhow::Result<i32> {
    if a.script.is_none() && !(std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        eprintln!("{NO_TTY}");
        return Ok(2);
    }
    let rt = crate::util::runtime()?;
    rt.block_on(async {
        let Some(s) = &a.script else {
            // The first frame at once: detecting the backend imports torch in a Python process
            // (seconds with CUDA), and a blank terminal meanwhile looks broken.
            let mut terminal = ratatui::try_init()?;
            let note = match a.backend {
                crate::detect::BackendChoice::Sim => "starting the simulated backend…",
                _ => "detecting the backend: asking Python for torch and CUDA…",
            };
            let _ = terminal.draw(|f| crate::ui::splash::draw(f, note));
            let app = match setup(g, a).await {
                Ok(app) => app,
                Err(e) => {
                    let _ = ratatui::try_restore();
                    return Err(e);
                }
            };
            return interactive(app, terminal).await;
        };
        let app = setup(g, a).await?;
        script::run(app, s, a.screen_dump.as_deref()).await
    })
}

/// The interactive dashboard: init the terminal, loop, then stop runs and restore.
/// The dashboard on `terminal` (already in raw mode on the alternate screen) until `q`.
pub async fn interactive(
    mut app: App,
    mut terminal: ratatui::DefaultTerminal,
) -> anyhow::Result<i32> {
    if app.mouse {
        let _ = crossterm::execute!(std::io::stdout(), crossterm::event::EnableMouseCapture);
    }
    let result = AssertUnwindSafe(event_loop(&mut app, &mut terminal))
        .catch_unwind()
        .await;
    // Runs first (their process trees must not outlive us), the terminal last.
    app.engine.shutdown(app.detach).await;
    // Not joined: a stalled NVML call must not hold up the exit.
    drop(app.sampler);
    if app.mouse {
        let _ = crossterm::execute!(std::io::stdout(), crossterm::event::DisableMouseCapture);
    }
    let _ = ratatui::try_restore();
    match result {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The shortest gap between two frames drawn for new data alone (see `urgent`; the scale
/// benchmark, `loadgen`, draws by the same rule).
pub const DATA_GAP: Duration = Duration::from_millis(250);

async fn event_loop(app: &mut App, terminal: &mut ratatui::DefaultTerminal) -> anyhow::Result<i32> {
    let fps = app.config.refresh.max_fps.max(1);
    let frame_gap = Duration::from_secs_f64(1.0 / f64::from(fps));
    let mut events = EventStream::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut last_draw = Instant::now() - frame_gap;
    // Set by every handler that changed what the screen shows.
    let mut dirty = true;
    // Set by the user's own input: drawn at max_fps. Data from the workers and the sampler
    // (every step of every rank) is drawn at most every DATA_GAP: a human reads live figures at
    // a few frames a second, and each frame costs CPU next to the training it watches.
    let mut urgent = true;
    // Read only when a frame is drawn anyway: measuring must not wake an idle dashboard.
    let mut self_meter = crate::selfcost::Meter::new(Duration::from_secs(2));
    loop {
        // Draw when something changed, no more often than max_fps.
        let mut next_frame = None;
        if dirty {
            if let Some(c) = self_meter.poll(Instant::now()) {
                app.engine.state_mut().self_cost = Some(c);
            }
            let gap = if urgent {
                frame_gap
            } else {
                frame_gap.max(DATA_GAP)
            };
            let due = last_draw + gap;
            if Instant::now() >= due {
                terminal.draw(|f| app.draw(f))?;
                last_draw = Instant::now();
                dirty = false;
                urgent = false;
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
                    if let Some(a) = app.config.keys.resolve(&k) {
                        if app.act(a) {
                            break;
                        }
                        dirty = true;
                        urgent = true;
                    }
                }
                Some(Ok(Event::Mouse(m))) => {
                    let size = terminal.size()?;
                    let area = ratatui::layout::Rect::new(0, 0, size.width, size.height);
                    let changed = mouse::apply(&mut app.view, app.engine.state(), area, &m);
                    dirty |= changed;
                    urgent |= changed;
                }
                Some(Ok(Event::Resize(..))) => {
                    dirty = true;
                    urgent = true;
                }
                Some(Ok(_)) => {}
                // The terminal went away (EIO): leave like SIGHUP.
                Some(Err(_)) | None => break,
            },
            ev = app.engine.next_event() => {
                dirty |= app.engine.apply(ev);
                app.after_event();
            }
            Some(u) = app.gpu_rx.recv() => {
                dirty |= model::gpus::apply_update(app.engine.state_mut(), u);
            }
            _ = tick.tick(), if active => {
                dirty |= app.engine.tick();
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
