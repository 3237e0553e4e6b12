//! What each `Action` does to the engine and the state. Shared by the interactive loop and
//! `--script`, so a script does exactly what the keys do.
//!
//! Launches go through `plan::Queue`: one measurement at a time. A launch while a run is active
//! waits for it (the message says so); a sweep (k = 1, 2, 4) and a probe (the probe, then its
//! k=1 control) are queue entries that share a sweep id. What to launch comes from `plan`, the
//! same planner `ddptop run` uses.

use crate::app::{Action, Freeze, Level, Queued, State, View};
use crate::engine::Engine;
use crate::plan::{self, Queue, Template};
use crate::protocol::Command;
use crate::run::{AttachTarget, Experiment, Family, NcclVar, RunSpec};
use crate::ui::layout::PAGES;
use std::collections::HashSet;

/// The loop's side of actions: the launch queue, probe toggles, and what the loop itself must do.
#[derive(Debug)]
pub struct Controller {
    /// Backend, profile, model, epochs, samples of dashboard launches; the experiment, data path
    /// and NCCL settings come from `State.next`.
    pub template: Template,
    /// The script `--attach` names: the attach family's target, and a step of the `s` cycle.
    pub attach: Option<AttachTarget>,
    pub queue: Queue,
    /// Runs whose live probe is on (Command::ProbeOn sent).
    probing: HashSet<String>,
    /// The tuning `T` started (running, or finished with its table).
    pub tune: Option<super::tune::DashTune>,
}

/// What the loop has to do after an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Cycle the theme (the loop owns the theme set).
    NextTheme,
    /// Apply the next config preset to the next launch (the loop owns the config).
    NextPreset,
    /// Keep the tuning's winner as a preset (the loop owns the config and its path).
    SaveTuned,
    Quit,
}

impl Controller {
    pub fn new(template: Template) -> Self {
        Controller {
            template,
            attach: None,
            queue: Queue::default(),
            probing: HashSet::new(),
            tune: None,
        }
    }

    /// The template with the next launch's preferences from the state.
    fn next(&self, state: &State) -> Template {
        Template {
            nccl: state.next.nccl.clone(),
            data_path: state.next.data_path,
            ..self.template.clone()
        }
    }

    fn enqueue(&mut self, state: &mut State, specs: Vec<RunSpec>, sweep: Option<String>) {
        if specs.is_empty() {
            return;
        }
        let busy = state.active_runs().next().is_some() || !self.queue.is_empty();
        if busy {
            let what: Vec<String> = specs
                .iter()
                .map(|s| format!("{} k={}", s.experiment().as_str(), s.k))
                .collect();
            state.push_message(
                Level::Info,
                None,
                format!(
                    "queued {}: starts when the active run ends (x stops it)",
                    what.join(", ")
                ),
            );
        }
        self.queue.push(specs, sweep);
    }

    /// What the dashboard launches for `experiment`: the family's defaults, and the script
    /// for attach.
    fn family(&self, experiment: Experiment) -> Family {
        Family::with_script(experiment, self.attach.clone())
    }

    /// Plan `ks` of `experiment` and queue it, or say why not. A sweep of handrolled is the
    /// deficits set (DDP and the three hand-rolled variants at each k).
    fn plan(&mut self, state: &mut State, experiment: Experiment, ks: &[u32], sweep: bool) {
        let mut template = self.next(state);
        template.deficits = sweep && experiment.kind().deficit_columns().is_some();
        let planned = plan::request(&template, self.family(experiment), ks, state.max_k);
        match planned {
            Ok(p) => {
                for n in &p.notes {
                    state.push_message(Level::Warn, None, format!("not launched: {n}"));
                }
                let id = (sweep || p.specs.len() > 1).then(|| self.queue.sweep_id());
                self.enqueue(state, p.specs, id);
            }
            Err(why) => state.push_message(Level::Warn, None, format!("not launched: {why}")),
        }
    }

    /// Start the next queued launch when nothing is running, and focus it. Call after every
    /// event.
    pub fn pump(&mut self, engine: &mut Engine, view: &mut View) {
        // Twice at most: a tuning that just queued its next batch must start it now, as no
        // other event may come while nothing runs.
        for _ in 0..2 {
            let before = view.focused.clone();
            if let Some((id, spec)) = self.queue.pump(engine) {
                // A probe's k=1 control runs after it; the screens stay on the probe.
                let stay = before.filter(|_| spec.control);
                view.focus(engine.state(), stay.as_deref().unwrap_or(&id));
                if stay.is_none() {
                    view.timeline_rank = 0;
                }
                if let Some(t) = &mut self.tune {
                    super::tune::launched(t, engine.state_mut(), &id, &spec);
                }
            }
            let queued_more = match &mut self.tune {
                Some(t) => super::tune::poll(t, engine, &mut self.queue),
                None => false,
            };
            if !queued_more {
                break;
            }
        }
        self.sync_queue(engine.state_mut(), view);
    }

    /// A tuning is running (started and not over).
    pub fn tuning(&self) -> bool {
        self.tune.as_ref().is_some_and(|t| t.running())
    }

    /// `T`: show or hide a running tuning's table, else start one.
    fn tune_key(&mut self, engine: &mut Engine, view: &mut View) {
        if self.tuning() {
            view.tune = !view.tune;
            return;
        }
        let template = self.next(engine.state());
        let state = engine.state_mut();
        match super::tune::start(template, state, view, &mut self.queue) {
            Ok(t) => self.tune = Some(t),
            Err(why) => state.push_message(Level::Warn, None, format!("not tuned: {why}")),
        }
    }

    /// Whether `x` is about the tuning: its table is shown, or the run `x` would stop (or the
    /// queued launch under the cursor) is one of its.
    fn stop_cancels_tune(&self, state: &State, view: &View) -> bool {
        let Some(t) = self.tune.as_ref().filter(|t| t.running()) else {
            return false;
        };
        if view.tune {
            return true;
        }
        if let Some(i) = view.selected_queued(state) {
            return state.queued.get(i).and_then(|q| q.sweep.as_deref()) == Some(t.sweep.as_str());
        }
        let target = view
            .selected_run(state)
            .filter(|r| !r.status.is_final())
            .or_else(|| state.active_runs().next());
        target.is_some_and(|r| t.owns(state, &r.id))
    }

    /// `S` (from the loop, which holds the config's path).
    pub fn save_tuned(
        &mut self,
        state: &mut State,
        path: &std::path::Path,
    ) -> Result<crate::app::tune::Saved, String> {
        match &mut self.tune {
            Some(t) => super::tune::save(t, state, path),
            None => Err("no tuning yet: T starts one".into()),
        }
    }

    /// Copy the queue into the state for the Runs pane; the cursor stays on its run.
    fn sync_queue(&self, state: &mut State, view: &mut View) {
        let queued: Vec<Queued> = self
            .queue
            .items()
            .map(|(spec, sweep)| Queued {
                spec: spec.clone(),
                sweep: sweep.map(str::to_string),
            })
            .collect();
        let before = state.queued.len();
        if view.selected >= before {
            view.selected = view.selected - before + queued.len();
        } else {
            view.selected = view.selected.min(queued.len().saturating_sub(1));
        }
        state.queued = queued;
    }

    /// Launches waiting for the active run.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Apply one action. Navigation changes the view, toggles the next launch's settings;
    /// launches, stops and probe commands go to the engine. The screen is redrawn after any.
    pub fn handle(&mut self, engine: &mut Engine, view: &mut View, action: Action) -> Flow {
        let tuning = self.tuning();
        let flow = match action {
            Action::WriteReport => {
                write_report(engine, view);
                Flow::Continue
            }
            Action::Tune => {
                self.tune_key(engine, view);
                Flow::Continue
            }
            Action::SaveTuned => Flow::SaveTuned,
            // Esc on the tuning's table: cancel a running one, close a finished one.
            Action::Close if view.tune && !view.show_help => {
                match &mut self.tune {
                    Some(t) if tuning => super::tune::cancel(t, engine, &mut self.queue),
                    _ => view.tune = false,
                }
                Flow::Continue
            }
            Action::Stop if self.stop_cancels_tune(engine.state(), view) => {
                if let Some(t) = &mut self.tune {
                    super::tune::cancel(t, engine, &mut self.queue);
                }
                Flow::Continue
            }
            _ => self.handle_inner(engine, view, action),
        };
        self.pump(engine, view);
        flow
    }

    fn handle_inner(&mut self, engine: &mut Engine, view: &mut View, action: Action) -> Flow {
        if action == Action::ToggleNodes {
            self.toggle_nodes(engine);
            return Flow::Continue;
        }
        let python = engine.python().map(std::path::Path::to_path_buf);
        let state = engine.state_mut();
        match action {
            Action::Launch { k } => {
                let exp = state.next.experiment;
                self.plan(state, exp, &[k], false);
            }
            Action::Sweep => {
                let exp = state.next.experiment;
                self.plan(state, exp, &[1, 2, 4], true);
            }
            Action::SwitchExperiment => self.switch_experiment(state, python.as_deref()),
            Action::ToggleDataPath => toggle_data_path(state),
            Action::Probe => self.probe(engine),
            Action::Bench => match plan::two_ranks(state.max_k, "an all-reduce bench") {
                Ok(k) => {
                    let bench = Experiment::find(|f| f.sweeps_allreduce());
                    self.plan(state, bench, &[k], false)
                }
                Err(why) => state.push_message(Level::Warn, None, format!("not launched: {why}")),
            },
            Action::Toggle(var) if state.host.backend == crate::run::HostBackend::Gloo => state
                .push_message(
                    Level::Info,
                    None,
                    format!("{} is an NCCL setting: gloo runs don't read it", var.name()),
                ),
            Action::Toggle(var) => toggle(state, var),
            // Handled above: it holds the engine's switch.
            Action::ToggleNodes => {}
            Action::Rerun => self.rerun(state, view),
            Action::Stop if view.selected_queued(state).is_some() => {
                let i = view.selected_queued(state).expect("checked");
                if let Some(spec) = self.queue.remove(i) {
                    state.push_message(
                        Level::Info,
                        None,
                        format!(
                            "cancelled the queued {} k={} (it had not started)",
                            spec.experiment().as_str(),
                            spec.k
                        ),
                    );
                }
            }
            Action::Stop => self.stop(engine, view),
            Action::NextPane => {
                // Every pane of the page in turn, then the next page.
                if view.sub + 1 < crate::ui::layout::page_len(view.pane) {
                    view.sub += 1;
                } else {
                    let i = PAGES.iter().position(|p| *p == view.pane).unwrap_or(0);
                    view.pane = PAGES[(i + 1) % PAGES.len()];
                    view.sub = 0;
                }
            }
            Action::Up
            | Action::Down
            | Action::PageUp
            | Action::PageDown
            | Action::Top
            | Action::Bottom => {
                view.navigate(state, action);
            }
            Action::Focus => {
                if let Some(r) = view.selected_run(state) {
                    if view.focused.as_deref() != Some(r.id.as_str()) {
                        view.log_scroll = 0;
                    }
                    view.focused = Some(r.id.clone());
                    view.timeline_rank = 0;
                    view.detail = true;
                }
            }
            Action::Close => {
                if view.show_help {
                    view.show_help = false;
                } else if view.detail {
                    view.detail = false;
                } else {
                    view.zoom = false;
                }
            }
            Action::Zoom => view.zoom = !view.zoom,
            Action::NextRank => {
                if let Some(k) = view.subject(state).map(|r| r.spec.k.max(1)) {
                    view.timeline_rank = (view.timeline_rank + 1) % k;
                }
            }
            Action::Freeze => match view.freeze {
                Freeze::Frozen(_) => view.freeze = Freeze::Live,
                Freeze::Live => {
                    if !view.freeze(state) {
                        state.push_message(
                            Level::Info,
                            None,
                            "nothing to freeze: the timeline has no step yet",
                        );
                    }
                }
            },
            Action::NextTheme => return Flow::NextTheme,
            Action::NextPreset => return Flow::NextPreset,
            // Handled in `handle`, which holds the engine (the store's path, the tuning).
            Action::WriteReport | Action::Tune | Action::SaveTuned => {}
            Action::Help => view.show_help = !view.show_help,
            Action::Quit => return Flow::Quit,
        }
        Flow::Continue
    }

    /// Rerun: the selected run's spec again (without its injected fault), if it fits.
    fn rerun(&mut self, state: &mut State, view: &View) {
        match view.selected_run(state) {
            Some(r) => {
                let mut spec = r.spec.clone();
                spec.inject = None;
                match plan::fits(spec.k, state.max_k) {
                    Ok(()) => self.enqueue(state, vec![spec], None),
                    Err(why) => state.push_message(
                        Level::Warn,
                        None,
                        format!("not launched: {} at {why}", spec.experiment().as_str()),
                    ),
                }
            }
            None => state.push_message(Level::Info, None, "nothing to rerun: no run selected"),
        }
    }

    /// Switch experiment: the next one in the cycle, said with why (and whether it can run).
    fn switch_experiment(&self, state: &mut State, python: Option<&std::path::Path>) {
        let e = state.next.experiment.next_in_cycle(self.attach.is_some());
        state.next.experiment = e;
        // Said when it is chosen, not only when 1 fails: the worker must be built.
        state.next.unavailable = (e.kind().needs_built_binary()
            && crate::supervisor::handrolled::find_binary().is_none())
        .then(|| crate::supervisor::handrolled::build_hint(python));
        if let Some(why) = state.next.unavailable.clone() {
            state.push_message(Level::Warn, None, format!("handrolled (not built): {why}"));
        }
        let msg = e.switch_message(self.attach.as_ref());
        state.push_message(Level::Info, None, msg);
    }

    /// Probe: the live probe toggled on the active training run, or a probe run launched.
    fn probe(&mut self, engine: &mut Engine) {
        let state = engine.state_mut();
        // A training run is active: toggle the live probe on it.
        let target = state
            .active_runs()
            .find(|r| r.spec.experiment().has_throughput())
            .map(|r| r.id.clone());
        if let Some(id) = target {
            let on = !self.probing.contains(&id);
            let cmd = if on {
                Command::ProbeOn
            } else {
                Command::ProbeOff
            };
            match engine.command(&id, cmd) {
                Ok(()) => {
                    if on {
                        self.probing.insert(id.clone());
                    } else {
                        self.probing.remove(&id);
                    }
                    engine.state_mut().push_message(
                        Level::Info,
                        Some(&id),
                        format!(
                            "no_sync probe {} (live, interleaved blocks)",
                            if on { "on" } else { "off" }
                        ),
                    );
                }
                Err(e) => engine.state_mut().push_message(
                    Level::Warn,
                    Some(&id),
                    format!("probe not toggled: {e}"),
                ),
            }
            return;
        }
        match plan::two_ranks(state.max_k, "the no_sync probe") {
            Ok(k) => {
                let probe = Experiment::find(|f| f.probes_no_sync());
                self.plan(state, probe, &[k], true)
            }
            Err(why) => state.push_message(Level::Warn, None, format!("not launched: {why}")),
        }
    }

    /// Stop: the selected (or the first active) run stopped with the rest of its sweep's
    /// queue, or the queue cleared when nothing runs.
    fn stop(&mut self, engine: &mut Engine, view: &View) {
        let state = engine.state_mut();
        let selected = view
            .selected_run(state)
            .filter(|r| !r.status.is_final())
            .map(|r| (r.id.clone(), r.launch.sweep.clone()));
        let target = selected.or_else(|| {
            state
                .active_runs()
                .next()
                .map(|r| (r.id.clone(), r.launch.sweep.clone()))
        });
        match target {
            Some((id, sweep)) => {
                if let Some(s) = sweep {
                    let dropped = self.queue.drop_sweep(&s);
                    if dropped > 0 {
                        state.push_message(
                            Level::Info,
                            Some(&id),
                            format!("dropped {dropped} queued launch(es) of the same sweep"),
                        );
                    }
                }
                engine.stop(&id, "stopped from the dashboard");
                engine.state_mut().push_message(
                    Level::Info,
                    Some(&id),
                    "stopping (SIGINT, then SIGTERM, then SIGKILL to the process groups)",
                );
            }
            None if !self.queue.is_empty() => {
                let n = self.queue.clear();
                state.push_message(Level::Info, None, format!("cleared {n} queued launch(es)"));
            }
            None => state.push_message(Level::Info, None, "nothing to stop: no run is active"),
        }
    }

    /// `N`: this node or all of `[nodes] hosts` for the next launches. The engine takes the
    /// switch (its launches then take the path of `ddptop run --nodes`), the state the badge and
    /// the k limit; a refusal is one line and changes nothing.
    fn toggle_nodes(&mut self, engine: &mut Engine) {
        let queued = self.queue.len();
        let state = engine.state_mut();
        let simulated = state.host.backend.is_simulated();
        let host = state.host.hostname.clone();
        match state.next.target.toggle(&host, queued, simulated) {
            Ok(msg) => {
                state.max_k = state.next.target.max_k();
                let all = state.next.target.all;
                state.push_message(Level::Info, None, msg);
                engine.set_all_nodes(all);
            }
            Err(why) => state.push_message(Level::Warn, None, why),
        }
    }

    /// Nothing running and nothing queued (for `--script`'s `wait-run`).
    pub fn idle(&self, engine: &Engine) -> bool {
        self.queue.idle(engine) && !self.tuning()
    }
}

/// The report of the selected run's curve, into the data dir's `reports/`; the log says where.
fn write_report(engine: &mut Engine, view: &View) {
    let store = engine.store_path().to_path_buf();
    let dir = store
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join("reports");
    let id = view.selected_run(engine.state()).map(|r| r.id.clone());
    let state = engine.state_mut();
    let Some(id) = id else {
        state.push_message(Level::Info, None, "no report: no run selected");
        return;
    };
    match crate::query::write_curve_report(&store, &dir, &id) {
        Ok(path) => state.push_message(
            Level::Info,
            Some(&id),
            format!("report of its curve written to {}", path.display()),
        ),
        Err(e) => state.push_message(Level::Warn, Some(&id), format!("no report: {e:#}")),
    }
}

fn toggle(state: &mut State, var: NcclVar) {
    state.next.preset = None;
    let on = state.next.nccl.toggle(var);
    let what = if on {
        format!("{}={}", var.name(), var.toggle_value())
    } else {
        format!("{} unset", var.name())
    };
    state.push_message(
        Level::Info,
        None,
        format!("{what} for the next launch (NCCL reads it at communicator init)"),
    );
}

/// Toggle data path: the next launch's, said.
fn toggle_data_path(state: &mut State) {
    state.next.data_path = state.next.data_path.toggled();
    let msg = match state.next.data_path {
        crate::run::DataPath::Loader => {
            "next launch: the book's DataLoader, PIL + torchvision transforms (watch the data wait)"
        }
        crate::run::DataPath::FastLoader => {
            "next launch: ddptop's fast DataLoader (tensor resize, pinned, persistent workers)"
        }
        crate::run::DataPath::Device => "next launch: device-resident data",
    };
    state.push_message(Level::Info, None, msg);
}
