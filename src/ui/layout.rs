//! Where each pane goes, as a pure function of the terminal size and the GPU count.
//!
//! Three modes:
//! - **Full** (wide and tall, e.g. 240×70 or 120×40): every pane at once — header; GPUs beside
//!   the ranks' processes; runs beside scaling; timeline beside probe and bench; log; key hints.
//! - **Tabs** (down to 60×16, e.g. 80×24 over ssh): a tab bar; each `Pane` value is a page:
//!   Runs (runs + a detail pane for the selected run's experiment: scaling, probe or bench),
//!   GPUs (GPUs + ranks), Timeline (timeline + probe + bench), Log.
//! - **TooSmall**: below 60×16 a message says how big the terminal must be.

use crate::app::Pane;
use ratatui::layout::{Constraint, Layout as RLayout, Rect};

pub const MIN_W: u16 = 60;
pub const MIN_H: u16 = 16;
/// Width from which every pane is shown at once (with enough height, see `full_min_h`).
pub const FULL_MIN_W: u16 = 120;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PaneId {
    Gpus,
    Ranks,
    Runs,
    Scaling,
    Timeline,
    Probe,
    Bench,
    Log,
    /// Tabs mode, Runs page: the selected run's scaling, probe or bench pane.
    Detail,
    /// An fsdp run's memory per rank: drawn where Probe and Bench are (`memory::swap_in`).
    Memory,
    /// A hand-rolled run's deficits table: drawn where Probe and Bench are (`deficits::swap_in`).
    Deficits,
}

impl PaneId {
    /// Which `State.pane` value this pane belongs to (for the focus border).
    pub fn pane(self) -> Pane {
        match self {
            PaneId::Gpus | PaneId::Ranks => Pane::Gpus,
            PaneId::Runs | PaneId::Scaling | PaneId::Detail => Pane::Runs,
            PaneId::Timeline
            | PaneId::Probe
            | PaneId::Bench
            | PaneId::Memory
            | PaneId::Deficits => Pane::Timeline,
            PaneId::Log => Pane::Log,
        }
    }

    /// Its place in its page in Tab order (`View.sub`): every pane can take the focus, so `z`
    /// can show any cut line whole.
    pub fn slot(self) -> u8 {
        match self {
            PaneId::Gpus | PaneId::Runs | PaneId::Timeline | PaneId::Log => 0,
            PaneId::Ranks
            | PaneId::Scaling
            | PaneId::Detail
            | PaneId::Probe
            | PaneId::Memory
            | PaneId::Deficits => 1,
            PaneId::Bench => 2,
        }
    }

    /// Whether this pane has the focus when its page's slot `sub` does: Memory and Deficits are
    /// drawn where Probe and Bench are, and take both their places.
    pub fn covers(self, sub: u8) -> bool {
        match self {
            PaneId::Memory | PaneId::Deficits => sub == 1 || sub == 2,
            id => id.slot() == sub,
        }
    }

    /// Has the focus: on the focused page, in the focused slot.
    pub fn focused(self, pane: Pane, sub: u8) -> bool {
        self.pane() == pane && self.covers(sub)
    }
}

/// The number of Tab stops on a page (its panes' slots).
pub fn page_len(p: Pane) -> u8 {
    match p {
        Pane::Runs | Pane::Gpus => 2,
        Pane::Timeline => 3,
        Pane::Log => 1,
    }
}

/// Of `visible`, the pane with the focus (the page's first when no pane covers the slot).
pub fn focused(visible: &[(PaneId, Rect)], pane: Pane, sub: u8) -> Option<(PaneId, Rect)> {
    visible
        .iter()
        .find(|(id, _)| id.focused(pane, sub))
        .or_else(|| visible.iter().find(|(id, _)| id.pane() == pane))
        .copied()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    TooSmall,
    Tabs,
    Full,
}

/// The pages of tabs mode, in tab order.
pub const PAGES: [Pane; 4] = [Pane::Runs, Pane::Gpus, Pane::Timeline, Pane::Log];

pub fn page_title(p: Pane) -> &'static str {
    match p {
        Pane::Runs => "Runs·Scaling",
        Pane::Gpus => "GPUs·Ranks",
        Pane::Timeline => "Timeline·Probe·Bench",
        Pane::Log => "Log",
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub area: Rect,
    pub mode: Mode,
    /// Two lines: host/GPUs/backend/versions, then the next launch.
    pub header: Rect,
    /// One line of key hints at the bottom.
    pub hints: Rect,
    /// Tabs mode only: the tab bar.
    pub tabs: Option<Rect>,
    /// Full mode: every pane. Tabs mode: empty (see `pages`).
    pub panes: Vec<(PaneId, Rect)>,
    /// Tabs mode: the panes of each page.
    pub pages: Vec<(Pane, Vec<(PaneId, Rect)>)>,
}

impl Layout {
    /// The panes to draw when `State.pane` is `current`.
    pub fn visible(&self, current: Pane) -> &[(PaneId, Rect)] {
        match self.mode {
            Mode::Full => &self.panes,
            Mode::Tabs => self
                .pages
                .iter()
                .find(|(p, _)| *p == current)
                .map_or(&[][..], |(_, v)| v.as_slice()),
            Mode::TooSmall => &[],
        }
    }

    pub fn rect(&self, current: Pane, id: PaneId) -> Option<Rect> {
        self.visible(current)
            .iter()
            .find(|(p, _)| *p == id)
            .map(|(_, r)| *r)
    }
}

/// Rows the GPU pane wants: borders, a column header, one row per GPU (or the note line).
pub fn gpu_pane_h(n_gpus: usize) -> u16 {
    (n_gpus.clamp(1, 16) as u16) + 3
}

/// Full mode: the GPU pane and the Ranks pane beside it (at least 4 ranks visible).
fn gpu_band_h(n_gpus: usize) -> u16 {
    gpu_pane_h(n_gpus).max(7)
}

/// Height needed for full mode with `n_gpus`.
pub fn full_min_h(n_gpus: usize) -> u16 {
    // header 2 + hints 1 + GPU band + runs 7 + analysis 14 + log 5
    3 + gpu_band_h(n_gpus) + 7 + 14 + 5
}

pub fn compute(area: Rect, n_gpus: usize) -> Layout {
    let empty = Layout {
        area,
        mode: Mode::TooSmall,
        header: Rect::default(),
        hints: Rect::default(),
        tabs: None,
        panes: Vec::new(),
        pages: Vec::new(),
    };
    if area.width < MIN_W || area.height < MIN_H {
        return empty;
    }
    let full = area.width >= FULL_MIN_W && area.height >= full_min_h(n_gpus);
    if full {
        full_layout(area, n_gpus)
    } else {
        tabs_layout(area, n_gpus)
    }
}

fn split_v(r: Rect, c: &[Constraint]) -> Vec<Rect> {
    RLayout::vertical(c.to_vec()).split(r).to_vec()
}

fn split_h(r: Rect, c: &[Constraint]) -> Vec<Rect> {
    RLayout::horizontal(c.to_vec()).split(r).to_vec()
}

fn full_layout(area: Rect, n_gpus: usize) -> Layout {
    use Constraint::{Length, Min, Percentage};
    let gh = gpu_band_h(n_gpus);
    let rem = area.height - 3 - gh;
    let runs_h = (rem * 32 / 100).max(7);
    let log_h = (rem * 22 / 100).max(5);
    let analysis_h = rem - runs_h - log_h;
    let rows = split_v(
        area,
        &[
            Length(2),
            Length(gh),
            Length(runs_h),
            Length(analysis_h),
            Length(log_h),
            Min(0),
        ],
    );
    let (header, gpu_band, runs_band, analysis, log) =
        (rows[0], rows[1], rows[2], rows[3], rows[4]);
    let hints = Rect::new(area.x, area.bottom() - 1, area.width, 1);
    let g = if n_gpus == 0 {
        // No GPU rows: the note needs little room, the workers more.
        split_h(gpu_band, &[Percentage(45), Min(0)])
    } else {
        split_h(
            gpu_band,
            &[Min(0), Length((area.width * 40 / 100).clamp(52, 90))],
        )
    };
    let r = split_h(runs_band, &[Percentage(58), Min(0)]);
    let mut panes = vec![
        (PaneId::Gpus, g[0]),
        (PaneId::Ranks, g[1]),
        (PaneId::Runs, r[0]),
        (PaneId::Scaling, r[1]),
    ];
    if area.width >= 200 {
        let a = split_h(analysis, &[Percentage(46), Percentage(24), Min(0)]);
        panes.extend([
            (PaneId::Timeline, a[0]),
            (PaneId::Probe, a[1]),
            (PaneId::Bench, a[2]),
        ]);
    } else {
        let a = split_h(analysis, &[Percentage(55), Min(0)]);
        let probe_h = if analysis_h >= 17 { 9 } else { 7 };
        let right = split_v(a[1], &[Length(probe_h), Min(0)]);
        panes.extend([
            (PaneId::Timeline, a[0]),
            (PaneId::Probe, right[0]),
            (PaneId::Bench, right[1]),
        ]);
    }
    panes.push((PaneId::Log, log));
    Layout {
        area,
        mode: Mode::Full,
        header,
        hints,
        tabs: None,
        panes,
        pages: Vec::new(),
    }
}

fn tabs_layout(area: Rect, n_gpus: usize) -> Layout {
    use Constraint::{Length, Min, Percentage};
    let rows = split_v(area, &[Length(2), Length(1), Min(0), Length(1)]);
    let (header, tabs, body, hints) = (rows[0], rows[1], rows[2], rows[3]);
    let w = body.width;
    let h = body.height;

    let runs_page = if w >= 140 {
        let c = split_h(body, &[Percentage(60), Min(0)]);
        vec![(PaneId::Runs, c[0]), (PaneId::Detail, c[1])]
    } else {
        let runs_h = (h / 2).max(5);
        let c = split_v(body, &[Length(runs_h), Min(0)]);
        vec![(PaneId::Runs, c[0]), (PaneId::Detail, c[1])]
    };

    let gpus_page = if w >= 160 {
        let c = split_h(body, &[Min(0), Length((w * 40 / 100).clamp(52, 90))]);
        vec![(PaneId::Gpus, c[0]), (PaneId::Ranks, c[1])]
    } else {
        let gh = gpu_pane_h(n_gpus).max(5).min(h.saturating_sub(5));
        let c = split_v(body, &[Length(gh), Min(0)]);
        vec![(PaneId::Gpus, c[0]), (PaneId::Ranks, c[1])]
    };

    let timeline_page = if w >= 160 {
        let c = split_h(body, &[Percentage(46), Percentage(24), Min(0)]);
        vec![
            (PaneId::Timeline, c[0]),
            (PaneId::Probe, c[1]),
            (PaneId::Bench, c[2]),
        ]
    } else {
        let th = (h * 55 / 100).max(6);
        let c = split_v(body, &[Length(th), Min(0)]);
        let b = split_h(c[1], &[Percentage(50), Min(0)]);
        vec![
            (PaneId::Timeline, c[0]),
            (PaneId::Probe, b[0]),
            (PaneId::Bench, b[1]),
        ]
    };

    Layout {
        area,
        mode: Mode::Tabs,
        header,
        hints,
        tabs: Some(tabs),
        panes: Vec::new(),
        pages: vec![
            (Pane::Runs, runs_page),
            (Pane::Gpus, gpus_page),
            (Pane::Timeline, timeline_page),
            (Pane::Log, vec![(PaneId::Log, body)]),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_by_size() {
        assert_eq!(compute(Rect::new(0, 0, 59, 30), 0).mode, Mode::TooSmall);
        assert_eq!(compute(Rect::new(0, 0, 80, 15), 0).mode, Mode::TooSmall);
        assert_eq!(compute(Rect::new(0, 0, 80, 24), 8).mode, Mode::Tabs);
        assert_eq!(compute(Rect::new(0, 0, 240, 70), 8).mode, Mode::Full);
        assert_eq!(compute(Rect::new(0, 0, 120, 40), 8).mode, Mode::Full);
        assert_eq!(compute(Rect::new(0, 0, 120, 39), 8).mode, Mode::Tabs);
        assert_eq!(compute(Rect::new(0, 0, 120, 36), 0).mode, Mode::Full);
        assert_eq!(compute(Rect::new(0, 0, 120, 35), 0).mode, Mode::Tabs);
    }

    #[test]
    fn full_mode_has_every_pane() {
        let l = compute(Rect::new(0, 0, 240, 70), 8);
        let ids: Vec<PaneId> = l.panes.iter().map(|(p, _)| *p).collect();
        for id in [
            PaneId::Gpus,
            PaneId::Ranks,
            PaneId::Runs,
            PaneId::Scaling,
            PaneId::Timeline,
            PaneId::Probe,
            PaneId::Bench,
            PaneId::Log,
        ] {
            assert!(ids.contains(&id), "{id:?} missing");
        }
        // 8 GPU rows fit.
        let g = l.rect(Pane::Runs, PaneId::Gpus).unwrap();
        assert!(g.height >= 11);
    }
}
