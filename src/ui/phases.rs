//! Per-phase scores of a run (issue 46; TraceML's view): for each phase of the step, the median
//! rank's time beside the worst rank's and worst ÷ median, over the run's newest window. Lines
//! in the run's details (Enter) and a block of its own (`render`). Pure: it draws
//! `app::straggler::phase_scores_of`, nothing else.

use crate::app::straggler::{
    HOST_SYNC, PhaseScore, StragglerConfig, host_sync_note, phase_scores_of,
};
use crate::run::RunView;
use crate::ui::Theme;
use crate::ui::fmt;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// A worst rank this far above the median is marked: the straggler threshold (0.9 of the
/// others' pace) read the other way round, 1 ÷ 0.9.
pub const MARK_RATIO: f64 = 1.0 / 0.9;
/// ... and only where the gap is at least this share of the median step (the phases' medians
/// added up): 0.05 ms of data wait against 0.01 ms is 5× and says nothing.
pub const MARK_SHARE: f64 = 0.05;

/// What the view draws of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct PhasesModel {
    pub rows: Vec<PhaseScore>,
    /// Read from the ranks' history (a live run), or as kept at its end.
    pub live: bool,
    /// Steps in the window (`[stragglers] window`; the view reads the default).
    pub window: usize,
    /// The ranks named during the run, in the order named: (still named, `when_and_why`).
    pub named: Vec<(bool, u32, String)>,
}

/// The model of `run`; `None` where there is nothing to show: below 2 ranks, or before every
/// rank shared 2 timed steps (or stored before ddptop kept the table) with nobody named.
pub fn model_of(run: &RunView) -> Option<PhasesModel> {
    let cfg = StragglerConfig::default();
    let m = PhasesModel {
        rows: phase_scores_of(run, &cfg),
        live: run.straggler.phase_scores.is_empty(),
        window: cfg.window,
        named: run
            .straggler
            .named
            .iter()
            .map(|s| (s.active, s.rank, s.when_and_why()))
            .collect(),
    };
    (!m.rows.is_empty() || !m.named.is_empty()).then_some(m)
}

/// Whether a row's worst rank stands out: `MARK_RATIO` above the median and `MARK_SHARE` of
/// the step (`step_ms`: the medians of all phases added up).
pub fn marked(p: &PhaseScore, step_ms: f64) -> bool {
    p.worst_vs_median >= MARK_RATIO && p.worst_ms - p.median_ms >= MARK_SHARE * step_ms
}

/// The view's lines, under a `per phase` heading.
pub fn lines(t: &Theme, m: &PhasesModel) -> Vec<Line<'static>> {
    let when = if m.live {
        format!("newest ≤{} timed steps every rank shares", m.window)
    } else {
        "as of the run's end".to_string()
    };
    let mut out = vec![Line::from(vec![
        Span::styled("per phase ", t.label),
        Span::styled(format!("median rank vs worst rank, {when}"), t.dim),
    ])];
    for (active, rank, why) in &m.named {
        out.push(Line::from(vec![
            Span::styled(
                if *active {
                    format!("  ◆ straggler rank {rank} ")
                } else {
                    format!("  was straggler rank {rank} ")
                },
                if *active { t.warn } else { t.dim },
            ),
            Span::styled(format!("named {why}"), t.text),
        ]));
    }
    if m.rows.is_empty() {
        out.push(Line::from(Span::styled(
            "  no per-phase figures yet: fewer than 2 timed steps every rank shared",
            t.dim,
        )));
        return out;
    }
    out.push(Line::from(Span::styled(
        format!(
            "  {:<13} {:>10} {:>10} {:<6} {:>8}",
            "phase", "median", "worst", "rank", "worst÷med"
        ),
        t.label,
    )));
    // Host sync overlaps the other phases (the device is busy while the host waits): not a
    // part of the step they add up to.
    let step_ms: f64 = m
        .rows
        .iter()
        .filter(|p| p.phase != HOST_SYNC)
        .map(|p| p.median_ms)
        .sum();
    for p in &m.rows {
        let hot = marked(p, step_ms);
        let mut spans = vec![
            Span::styled(format!("  {:<13} ", p.phase), t.text),
            Span::styled(format!("{:>10} ", fmt::ms(p.median_ms)), t.value),
            Span::styled(
                format!("{:>10} ", fmt::ms(p.worst_ms)),
                if hot { t.warn } else { t.value },
            ),
            Span::styled(format!("{:<6} ", format!("r{}", p.worst_rank)), t.text),
            Span::styled(
                format!("{:>8.2}×", p.worst_vs_median),
                if hot { t.warn } else { t.value },
            ),
        ];
        // The ranks that wait longest at the collectives wait *for* a slow rank: high exposed
        // comm marks the others, the slow rank waits least.
        if p.phase == "exposed comm" && hot {
            spans.push(Span::styled("  waiting for a slower rank, not slow", t.dim));
        } else if hot {
            spans.push(Span::styled("  ◆", t.warn));
        }
        out.push(Line::from(spans));
    }
    out.push(Line::from(Span::styled(
        format!("  {}", host_sync_note(&m.rows)),
        t.dim,
    )));
    out
}

/// The view as a block of its own at `area` (the details draw `lines` among theirs).
pub fn render(t: &Theme, run: &RunView, area: Rect, buf: &mut Buffer) {
    let body = match model_of(run) {
        Some(m) => lines(t, &m),
        None => vec![Line::from(Span::styled(
            "no per-phase figures: fewer than 2 ranks, or fewer than 2 timed steps every rank shared",
            t.dim,
        ))],
    };
    crate::ui::boxed_text(t, "Phases", format!("{} ", run.id), body, area, buf);
}
