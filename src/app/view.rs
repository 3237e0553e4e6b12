//! What the user is looking at, apart from the data: the selected and focused run, the page,
//! help, the timeline's rank and whether the timeline is frozen. Owned by the dashboard; the
//! engine and `ddptop run` never see it.

use super::state::{Pane, State};
use crate::protocol::Buckets;
use crate::run::{RankView, RunView};

/// A timeline step held still by `f`: what the pane draws while frozen.
#[derive(Debug, Clone, PartialEq)]
pub struct FrozenStep {
    pub run_id: String,
    pub rank: u32,
    pub buckets: Buckets,
    pub opt_ms: Option<f64>,
    pub data_ms: Option<f64>,
    pub source: crate::app::nccl_timeline::TimelineSource,
}

/// The timeline follows the run, or holds one step.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Freeze {
    #[default]
    Live,
    Frozen(Box<FrozenStep>),
}

#[derive(Debug, Clone, Default)]
pub struct View {
    /// The Runs pane's cursor: rows `0..queued` are the queued launches (the last to start
    /// first), then `State.runs`.
    pub selected: usize,
    /// The run the analysis panes talk about (Enter), by id.
    pub focused: Option<String>,
    pub pane: Pane,
    /// The focused pane within the page (`ui::layout::PaneId::slot`): Tab walks every pane.
    pub sub: u8,
    pub show_help: bool,
    pub timeline_rank: u32,
    pub freeze: Freeze,
    /// Steps the timeline's median covers (config.toml `[timeline] steps`; 0: the default).
    pub timeline_steps: usize,
    /// The Log pane's scroll: lines hidden below the window (0 follows the newest).
    pub log_scroll: usize,
    /// The focused pane fills the screen (`z`).
    pub zoom: bool,
    /// The selected run's details cover the screen (Enter; Esc closes).
    pub detail: bool,
    /// The tuning's table covers the screen (`T`; Esc cancels a running tuning, closes a
    /// finished one).
    pub tune: bool,
}

/// Lines a page key moves.
pub const PAGE: usize = 10;

impl View {
    /// Up/Down/PageUp/PageDown/Top/Bottom go to the focused pane: with the Log focused they
    /// scroll it, elsewhere they move the Runs cursor. Returns false for any other action.
    pub fn navigate(&mut self, state: &State, action: super::Action) -> bool {
        use super::Action as A;
        if self.pane == Pane::Log {
            // Lines the log can scroll: the longer of the run's output and the messages.
            let lines = self
                .subject(state)
                .map_or(0, |r| r.evidence.log_tail.len())
                .max(state.messages.len());
            let max = lines.saturating_sub(1);
            let cur = self.log_scroll.min(max);
            self.log_scroll = match action {
                A::Up => (cur + 1).min(max),
                A::Down => cur.saturating_sub(1),
                A::PageUp => (cur + PAGE).min(max),
                A::PageDown => cur.saturating_sub(PAGE),
                A::Top => max,
                A::Bottom => 0,
                _ => return false,
            };
            return true;
        }
        let last = state.rows().saturating_sub(1);
        self.selected = match action {
            A::Up => self.selected.saturating_sub(1),
            A::Down => (self.selected + 1).min(last),
            A::PageUp => self.selected.saturating_sub(PAGE),
            A::PageDown => (self.selected + PAGE).min(last),
            A::Top => 0,
            A::Bottom => last,
            _ => return false,
        };
        true
    }

    /// The run under the table's cursor (`None` on a queued launch).
    pub fn selected_run<'a>(&self, state: &'a State) -> Option<&'a RunView> {
        state
            .runs
            .get(self.selected.checked_sub(state.queued.len())?)
    }

    /// The queued launch under the cursor, as its index in `State.queued` (0 starts next).
    pub fn selected_queued(&self, state: &State) -> Option<usize> {
        let n = state.queued.len();
        (self.selected < n).then(|| n - 1 - self.selected)
    }

    /// The run the analysis panes talk about: the focused run, else the selected one.
    pub fn subject<'a>(&self, state: &'a State) -> Option<&'a RunView> {
        self.focused
            .as_deref()
            .and_then(|id| state.run(id))
            .or_else(|| self.selected_run(state))
    }

    /// The rank the timeline shows on `run`: the chosen one when the run has it, else its first.
    pub fn timeline_rank(&self, run: &RunView) -> u32 {
        if run.ranks.contains_key(&self.timeline_rank) {
            self.timeline_rank
        } else {
            run.ranks.keys().next().copied().unwrap_or(0)
        }
    }

    /// The timeline's median window.
    pub fn timeline_window(&self) -> usize {
        if self.timeline_steps == 0 {
            super::predict::DEFAULT_TIMELINE_STEPS
        } else {
            self.timeline_steps
        }
    }

    pub fn frozen(&self) -> Option<&FrozenStep> {
        match &self.freeze {
            Freeze::Live => None,
            Freeze::Frozen(f) => Some(f),
        }
    }

    /// Point the cursor and the focus at `id` (a run just launched, or one to stay on).
    pub fn focus(&mut self, state: &State, id: &str) {
        if let Some(i) = state.runs.iter().position(|r| r.id == id) {
            self.selected = i + state.queued.len();
            self.focused = Some(id.to_string());
        }
    }

    /// Freeze the step the timeline shows now; `false` when there is none yet.
    pub fn freeze(&mut self, state: &State) -> bool {
        let Some(run) = self.subject(state) else {
            return false;
        };
        let rank = self.timeline_rank(run);
        let Some(rv) = run.ranks.get(&rank) else {
            return false;
        };
        // The step the pane draws: NCCL's when its collectives matched, else the hook's.
        let choice = crate::app::nccl_timeline::choose(run, rank);
        let Some(b) = choice.buckets.or_else(|| rv.buckets.clone()) else {
            return false;
        };
        self.freeze = Freeze::Frozen(Box::new(FrozenStep {
            run_id: run.id.clone(),
            rank,
            opt_ms: same_step(rv, &b).map(|(opt, _)| opt),
            data_ms: same_step(rv, &b).map(|(_, data)| data),
            source: choice.source,
            buckets: b,
        }));
        true
    }
}

/// The optimizer and data wait (ms) of the timeline's step, drawn beside its buckets: that
/// step's own phase record (on GPUs only 1 timed step in 4 sends its timeline, so the rank's
/// last step message is mostly a later step), else the last step message when it is the step
/// or its neighbour (NCCL's collectives matched to a step).
pub fn same_step(rv: &RankView, b: &Buckets) -> Option<(f64, f64)> {
    if let Some(s) = rv.recent_phases.iter().rev().find(|s| s.step == b.step) {
        return Some((s.opt_ms, s.data_ms));
    }
    rv.last_step
        .as_ref()
        .filter(|st| st.step.abs_diff(b.step) <= 1)
        .map(|st| (st.opt_ms, st.data_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::view::PhaseSample;

    fn phase(step: u64, opt_ms: f64, data_ms: f64) -> PhaseSample {
        PhaseSample {
            step,
            data_ms,
            fwd_ms: 10.0,
            bwd_ms: 20.0,
            opt_ms,
            comm_ms: Some(1.0),
            sync_ms: None,
        }
    }

    fn buckets_of(step: u64) -> Buckets {
        Buckets {
            rank: 0,
            step,
            t: 0.0,
            rebuilt: true,
            bwd_compute_ms: 15.0,
            exposed_ms: 1.0,
            buckets: vec![],
            start_inferred: None,
        }
    }

    #[test]
    fn the_timelines_own_step_gives_its_optimizer_and_data_wait() {
        // Steps 8..=14 timed, the timeline only at 8: the last step message is 14's.
        let mut rv = RankView::default();
        for step in 8..=14 {
            rv.recent_phases
                .push_back(phase(step, step as f64, 0.1 * step as f64));
        }
        assert_eq!(same_step(&rv, &buckets_of(8)), Some((8.0, 0.8)));
        assert_eq!(same_step(&rv, &buckets_of(30)), None);
    }
}
