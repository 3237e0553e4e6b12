//! What each `Action` does to the engine and the state. Shared by the interactive loop and
//! `--script`, so a script does exactly what the keys do.
//!
//! Launches go through a queue: one measurement at a time, because two runs sharing GPUs or
//! CPU cores would spoil each other's numbers. A launch while a run is active waits for it (the
//! message says so); a sweep (k = 1, 2, 4) and a probe (the probe, then its k=1 control) are
//! queue entries that share a sweep id.

use crate::app::{Action, DataPath, Experiment, Level, ModelName, RunSpec, State};
use crate::engine::Engine;
use crate::protocol::{Backend, Command};
use crate::ui::layout::PAGES;
use std::collections::{HashSet, VecDeque};

/// What a launch from the dashboard uses besides `State.next`.
#[derive(Debug, Clone)]
pub struct LaunchDefaults {
    pub backend: Backend,
    /// Machine profile of the simulated backend.
    pub profile: Option<String>,
    pub model: ModelName,
    pub epochs: u32,
    pub samples: u64,
}

impl LaunchDefaults {
    pub fn new(backend: Backend, profile: Option<String>) -> Self {
        LaunchDefaults {
            backend,
            profile: (backend == Backend::Sim)
                .then(|| profile.unwrap_or_else(|| "h200-nvlink".into())),
            model: ModelName::default_for(backend),
            epochs: 2,
            samples: if backend == Backend::Gloo {
                8_192
            } else {
                60_000
            },
        }
    }
}

/// The loop's side of actions: the launch queue, probe toggles, and what the loop itself must do.
#[derive(Debug)]
pub struct Controller {
    pub defaults: LaunchDefaults,
    pub queue: VecDeque<(RunSpec, Option<String>)>,
    /// Runs whose live probe is on (Command::ProbeOn sent).
    probing: HashSet<String>,
    sweeps: u32,
}

/// What the loop has to do after an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Cycle the theme (the loop owns the theme set).
    NextTheme,
    /// Apply the next config preset to the next launch (the loop owns the config).
    NextPreset,
    /// Freeze was toggled on: capture the timeline now.
    Frozen,
    Quit,
}

impl Controller {
    pub fn new(defaults: LaunchDefaults) -> Self {
        Controller {
            defaults,
            queue: VecDeque::new(),
            probing: HashSet::new(),
            sweeps: 0,
        }
    }

    fn spec(&self, state: &State, experiment: Experiment, k: u32) -> RunSpec {
        RunSpec {
            experiment,
            k,
            backend: self.defaults.backend,
            profile: self.defaults.profile.clone(),
            model: self.defaults.model,
            batch: experiment.default_batch(),
            epochs: self.defaults.epochs,
            samples: self.defaults.samples,
            env: state.next.env.clone(),
            inject: None,
            control: false,
            data_path: state.next.data_path,
        }
    }

    fn sweep_id(&mut self) -> String {
        self.sweeps += 1;
        format!("s{}-{}", crate::util::unix_now() as u64, self.sweeps)
    }

    /// k=2 for experiments that need communication, when the machine has two GPUs (or runs on
    /// CPUs / simulated); otherwise a message saying why not.
    fn two_ranks(state: &mut State, why_not: &str) -> Option<u32> {
        let k = if state.max_k == 0 {
            2
        } else {
            state.max_k.min(2)
        };
        if k < 2 {
            state.push_message(Level::Warn, None, format!("not launched: {why_not}"));
            return None;
        }
        Some(k)
    }

    /// `k` fits this machine? (max_k = 0: CPU or simulated, no limit.) Says why not.
    fn fits(state: &mut State, k: u32, what: &str) -> bool {
        if state.max_k > 0 && k > state.max_k {
            state.push_message(
                Level::Warn,
                None,
                format!(
                    "not launched: {what} at k={k} needs {k} GPUs; this machine has {}",
                    state.max_k
                ),
            );
            return false;
        }
        true
    }

    fn enqueue(&mut self, state: &mut State, items: Vec<(RunSpec, Option<String>)>) {
        if items.is_empty() {
            return;
        }
        let busy = state.active_runs().next().is_some() || !self.queue.is_empty();
        if busy {
            let what: Vec<String> = items
                .iter()
                .map(|(s, _)| format!("{} k={}", s.experiment.as_str(), s.k))
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
        self.queue.extend(items);
    }

    /// Start the next queued launch when nothing is running. Call after every event.
    pub fn pump(&mut self, engine: &mut Engine) {
        if engine.has_active_runs() {
            return;
        }
        while let Some((spec, sweep)) = self.queue.pop_front() {
            let control = spec.control;
            let before = engine.state().focused.clone();
            if engine.launch(spec, sweep.clone()).is_ok() {
                // A probe's k=1 control runs after it; the screens stay on the probe.
                if control && let Some(id) = before {
                    let st = engine.state_mut();
                    if let Some(i) = st.runs.iter().position(|r| r.id == id) {
                        st.selected = i;
                        st.focused = Some(id);
                    }
                }
                return;
            }
            // The engine said why; the rest of the same sweep would fail the same way.
            if let Some(s) = sweep {
                self.queue.retain(|(_, w)| w.as_deref() != Some(s.as_str()));
            }
        }
    }

    /// Launches waiting for the active run.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Apply one action. Navigation and toggles change the state; launches, stops and probe
    /// commands go to the engine.
    pub fn handle(&mut self, engine: &mut Engine, action: Action) -> Flow {
        let flow = self.handle_inner(engine, action);
        engine.state_mut().generation += 1;
        self.pump(engine);
        flow
    }

    fn handle_inner(&mut self, engine: &mut Engine, action: Action) -> Flow {
        let state = engine.state_mut();
        match action {
            Action::LaunchK1 | Action::LaunchK2 | Action::LaunchK4 => {
                let k = action.launch_k().expect("launch action");
                let exp = state.next.experiment;
                if Self::fits(state, k, exp.as_str()) {
                    let spec = self.spec(state, exp, k);
                    self.enqueue(state, vec![(spec, None)]);
                }
            }
            Action::Sweep => {
                let exp = state.next.experiment;
                let ks: Vec<u32> = [1, 2, 4]
                    .into_iter()
                    .filter(|&k| state.max_k == 0 || k <= state.max_k)
                    .collect();
                if ks.len() < 3 {
                    state.push_message(
                        Level::Warn,
                        None,
                        format!(
                            "sweep: this machine has {} GPU(s); running k = {:?}",
                            state.max_k, ks
                        ),
                    );
                }
                let id = self.sweep_id();
                let items = ks
                    .into_iter()
                    .map(|k| (self.spec(state, exp, k), Some(id.clone())))
                    .collect();
                self.enqueue(state, items);
            }
            Action::SwitchExperiment => {
                state.next.experiment = match state.next.experiment {
                    Experiment::Weak => Experiment::Strong,
                    _ => Experiment::Weak,
                };
                let e = state.next.experiment;
                state.push_message(
                    Level::Info,
                    None,
                    format!(
                        "next launch: {} scaling (batch {}{})",
                        e.as_str(),
                        e.default_batch(),
                        if e == Experiment::Strong {
                            " global"
                        } else {
                            " per rank"
                        }
                    ),
                );
            }
            Action::ToggleDataPath => {
                state.next.data_path = match state.next.data_path {
                    DataPath::Device => DataPath::Loader,
                    DataPath::Loader => DataPath::Device,
                };
                let msg = match state.next.data_path {
                    DataPath::Loader => "next launch: the book's DataLoader (watch the data wait)",
                    DataPath::Device => "next launch: device-resident data",
                };
                state.push_message(Level::Info, None, msg);
            }
            Action::Probe => {
                // A training run is active: toggle the live probe on it.
                let target = state
                    .active_runs()
                    .find(|r| r.spec.experiment.has_throughput())
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
                    return Flow::Continue;
                }
                let Some(k) = Self::two_ranks(
                    state,
                    "the no_sync probe needs 2 GPUs (k=1 has no communication to measure)",
                ) else {
                    return Flow::Continue;
                };
                let id = self.sweep_id();
                let probe = self.spec(state, Experiment::Probe, k);
                let mut control = self.spec(state, Experiment::Probe, 1);
                control.control = true;
                self.enqueue(state, vec![(probe, Some(id.clone())), (control, Some(id))]);
            }
            Action::Bench => {
                let Some(k) = Self::two_ranks(state, "an all-reduce bench needs 2 GPUs") else {
                    return Flow::Continue;
                };
                let spec = self.spec(state, Experiment::Allreduce, k);
                self.enqueue(state, vec![(spec, None)]);
            }
            Action::ToggleShmMemcpy => toggle(state, "NCCL_SHM_USE_CUDA_MEMCPY"),
            Action::ToggleP2pDisable => toggle(state, "NCCL_P2P_DISABLE"),
            Action::Rerun => match state.runs.get(state.selected) {
                Some(r) => {
                    let mut spec = r.spec.clone();
                    spec.inject = None;
                    if Self::fits(state, spec.k, spec.experiment.as_str()) {
                        self.enqueue(state, vec![(spec, None)]);
                    }
                }
                None => state.push_message(Level::Info, None, "nothing to rerun: no run selected"),
            },
            Action::Stop => {
                let selected = state
                    .runs
                    .get(state.selected)
                    .filter(|r| !r.status.is_final())
                    .map(|r| (r.id.clone(), r.sweep.clone()));
                let target = selected.or_else(|| {
                    state
                        .active_runs()
                        .next()
                        .map(|r| (r.id.clone(), r.sweep.clone()))
                });
                match target {
                    Some((id, sweep)) => {
                        if let Some(s) = sweep {
                            let before = self.queue.len();
                            self.queue.retain(|(_, w)| w.as_deref() != Some(s.as_str()));
                            let dropped = before - self.queue.len();
                            if dropped > 0 {
                                state.push_message(
                                    Level::Info,
                                    Some(&id),
                                    format!(
                                        "dropped {dropped} queued launch(es) of the same sweep"
                                    ),
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
                        let n = self.queue.len();
                        self.queue.clear();
                        state.push_message(
                            Level::Info,
                            None,
                            format!("cleared {n} queued launch(es)"),
                        );
                    }
                    None => {
                        state.push_message(Level::Info, None, "nothing to stop: no run is active")
                    }
                }
            }
            Action::NextPane => {
                let i = PAGES.iter().position(|p| *p == state.pane).unwrap_or(0);
                state.pane = PAGES[(i + 1) % PAGES.len()];
            }
            Action::Up => {
                state.selected = state.selected.saturating_sub(1);
            }
            Action::Down => {
                if state.selected + 1 < state.runs.len() {
                    state.selected += 1;
                }
            }
            Action::Focus => {
                if let Some(r) = state.runs.get(state.selected) {
                    state.focused = Some(r.id.clone());
                    state.timeline_rank = 0;
                }
            }
            Action::NextRank => {
                if let Some(k) = state.focused_run().map(|r| r.spec.k.max(1)) {
                    state.timeline_rank = (state.timeline_rank + 1) % k;
                }
            }
            Action::Freeze => {
                state.frozen = !state.frozen;
                if state.frozen {
                    return Flow::Frozen;
                }
            }
            Action::NextTheme => return Flow::NextTheme,
            Action::NextPreset => return Flow::NextPreset,
            Action::Help => state.show_help = !state.show_help,
            Action::Quit => return Flow::Quit,
        }
        Flow::Continue
    }

    /// Nothing running and nothing queued (for `--script`'s `wait-run`).
    pub fn idle(&self, engine: &Engine) -> bool {
        self.queue.is_empty() && !engine.has_active_runs()
    }
}

fn toggle(state: &mut State, var: &str) {
    let on = state.next.env.get(var).is_some_and(|v| v.is_some());
    if on {
        state.next.env.remove(var);
    } else {
        state.next.env.insert(var.to_string(), Some("1".into()));
    }
    state.push_message(
        Level::Info,
        None,
        format!(
            "{var}={} for the next launch (NCCL reads it at communicator init)",
            if on { "unset" } else { "1" }
        ),
    );
}
