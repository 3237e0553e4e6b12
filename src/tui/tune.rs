//! The dashboard's `T`: the same tuning as `ddptop tune` (`tune::driver::Tuning`), its launches
//! going through the dashboard's one queue under one sweep id like any sweep (so they show in
//! the Runs pane and one measurement runs at a time), its table copied into `State.tune` for
//! `ui::tune` to draw. Esc or `x` cancels it: the queued launches are dropped and the active one
//! is stopped with its process tree, as `x` stops any run.

use crate::app::tune::Saved;
use crate::app::{Level, State, View};
use crate::engine::Engine;
use crate::plan::{self, Queue, Template};
use crate::run::{Experiment, RunSpec};
use crate::tune::driver::{Plan, Progress, Tuning};

/// A tuning and the sweep id its launches carry.
pub struct DashTune {
    pub tuning: Tuning,
    pub sweep: String,
}

impl std::fmt::Debug for DashTune {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashTune")
            .field("sweep", &self.sweep)
            .field("phase", &self.tuning.board().phase)
            .finish()
    }
}

impl DashTune {
    pub fn running(&self) -> bool {
        !self.tuning.finished()
    }

    fn waiting(&self, queue: &Queue) -> usize {
        queue
            .items()
            .filter(|(_, s)| *s == Some(self.sweep.as_str()))
            .count()
    }

    /// Whether run `id` is one of this tuning's.
    pub fn owns(&self, state: &State, id: &str) -> bool {
        state
            .run(id)
            .is_some_and(|r| r.launch.sweep.as_deref() == Some(self.sweep.as_str()))
    }
}

/// The k to tune: the selected run's when it is a run of the experiment at k ≥ 2 (the
/// dashboard's current k), else the two ranks the probe and the bench use.
fn tune_k(state: &State, view: &View, experiment: Experiment) -> Result<u32, String> {
    let selected = view
        .selected_run(state)
        .filter(|r| r.spec.experiment() == experiment && r.spec.k >= 2)
        .map(|r| r.spec.k);
    match selected {
        Some(k) => plan::fits(k, state.max_k).map(|()| k),
        None => plan::two_ranks(state.max_k, "a tuning"),
    }
}

/// Start a tuning of the next experiment with the next launch's settings; its first launches
/// in `queue`. `Err`: why not, in one line.
pub fn start(
    template: Template,
    state: &mut State,
    view: &mut View,
    queue: &mut Queue,
) -> Result<DashTune, String> {
    let experiment = state.next.experiment;
    if !(experiment.kind().ddptop_loop() || experiment.kind().runs_user_script()) {
        return Err(format!(
            "tune measures weak, strong or the attached script, not {experiment}: pick one with s"
        ));
    }
    let k = tune_k(state, view, experiment)?;
    let mut tuning = Tuning::new(Plan::new(template, experiment, k))?;
    let sweep = queue.sweep_id();
    queue.push(tuning.take_launches(), Some(sweep.clone()));
    state.tune = Some(tuning.board().clone());
    state.push_message(
        Level::Info,
        None,
        format!(
            "tuning {}: a k=1 run and the all-reduce sweeps predict every candidate, then the best are measured interleaved (Esc or x cancels, T hides the table)",
            tuning.board().title
        ),
    );
    state.push_message(Level::Info, None, tuning.start_line());
    view.tune = true;
    Ok(DashTune { tuning, sweep })
}

/// After the queue started `id` (`spec`): note it when it is the tuning's.
pub fn launched(t: &mut DashTune, state: &mut State, id: &str, spec: &RunSpec) {
    if !t.owns(state, id) {
        return;
    }
    let line = t.tuning.launched(id, spec);
    state.push_message(Level::Info, Some(id), line);
    state.tune = Some(t.tuning.board().clone());
}

/// Read back the tuning's ended runs and queue what comes next; `true` when launches were
/// queued (the caller pumps the queue again: nothing else may wake it between batches).
pub fn poll(t: &mut DashTune, engine: &mut Engine, queue: &mut Queue) -> bool {
    if !t.running() {
        return false;
    }
    if let Some(line) = t.tuning.check_budget() {
        engine.state_mut().push_message(Level::Info, None, line);
        stop_rest(t, engine, queue, "the tuning's budget is spent");
    }
    let (said, changed) = t.tuning.poll(&engine.state().runs, t.waiting(queue));
    let more = t.tuning.take_launches();
    let pushed = !more.is_empty();
    queue.push(more, Some(t.sweep.clone()));
    for p in said {
        match p {
            Progress::Note(line) => engine.state_mut().push_message(Level::Info, None, line),
            // Over early (the k=1 run failed): what else it queued or started goes.
            Progress::Finished => {
                stop_rest(t, engine, queue, "the tuning is over");
            }
        }
    }
    if changed || pushed {
        engine.state_mut().tune = Some(t.tuning.board().clone());
    }
    pushed
}

/// Drop the tuning's queued launches and stop its active runs.
fn stop_rest(t: &DashTune, engine: &mut Engine, queue: &mut Queue, why: &str) -> usize {
    let dropped = queue.drop_sweep(&t.sweep);
    let active: Vec<String> = engine
        .state()
        .active_runs()
        .filter(|r| r.launch.sweep.as_deref() == Some(t.sweep.as_str()))
        .map(|r| r.id.clone())
        .collect();
    for id in &active {
        engine.stop(id, why);
    }
    dropped
}

/// Esc / `x` on a running tuning: nothing more is launched, the active run is stopped; the
/// table keeps what ended and says "cancelled" once the stopped run is down.
pub fn cancel(t: &mut DashTune, engine: &mut Engine, queue: &mut Queue) {
    t.tuning.cancel();
    let dropped = stop_rest(t, engine, queue, "tuning cancelled from the dashboard");
    engine.state_mut().push_message(
        Level::Info,
        None,
        format!(
            "tuning cancelled: its run is stopping (SIGINT, then SIGTERM, then SIGKILL to the process groups){}",
            if dropped > 0 {
                format!("; {dropped} queued launch(es) dropped")
            } else {
                String::new()
            }
        ),
    );
    poll(t, engine, queue);
}

/// `S`: keep the recommendation as a preset in the config at `path` (the writer `ddptop tune`
/// uses).
pub fn save(t: &mut DashTune, state: &mut State, path: &std::path::Path) -> Result<Saved, String> {
    if t.running() {
        return Err("the tuning is still running: its verdict comes at the end".into());
    }
    let machine = format!(
        "{} ({})",
        state.host.hostname,
        state
            .host
            .gpu_summary
            .clone()
            .unwrap_or_else(|| state.host.backend.to_string())
    );
    let saved = crate::tune::preset::save(&mut t.tuning, path, &machine);
    state.tune = Some(t.tuning.board().clone());
    saved
}
