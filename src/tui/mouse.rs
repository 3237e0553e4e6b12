//! The mouse: a click focuses the pane under it (a tab in tabs mode) and, in the Runs pane,
//! selects the row; the wheel scrolls what the keys would (the Log's lines, else the runs).
//! Pure: the screen's layout is recomputed from its size, as `ui::render` lays it out.

use crate::app::{Action, State, View};
use crate::ui::layout::{self, Mode, PAGES, PaneId};
use crossterm::event::{MouseEvent, MouseEventKind};
use ratatui::layout::{Position, Rect};

/// Lines one wheel notch scrolls.
const WHEEL: usize = 3;

/// Apply one mouse event on a screen of `area`; `true` when the view changed.
pub fn apply(view: &mut View, state: &State, area: Rect, ev: &MouseEvent) -> bool {
    let at = Position::new(ev.column, ev.row);
    let l = layout::compute(area, state.gpus.len());
    if l.mode == Mode::TooSmall {
        return false;
    }
    match ev.kind {
        MouseEventKind::Down(crossterm::event::MouseButton::Left) => {
            if view.show_help || view.detail {
                view.show_help = false;
                view.detail = false;
                return true;
            }
            if let Some(t) = l.tabs.filter(|t| t.contains(at)) {
                return click_tab(view, t, at.x);
            }
            let Some((id, r)) = pane_at(view, &l, at) else {
                return false;
            };
            view.pane = id.pane();
            view.sub = id.slot();
            if id == PaneId::Runs && !view.zoom {
                select_row(view, state, r, at.y);
            } else if id == PaneId::Runs {
                select_row(view, state, body(view, &l).unwrap_or(r), at.y);
            }
            true
        }
        MouseEventKind::ScrollUp | MouseEventKind::ScrollDown => {
            let Some((id, _)) = pane_at(view, &l, at) else {
                return false;
            };
            let up = ev.kind == MouseEventKind::ScrollUp;
            let a = if up { Action::Up } else { Action::Down };
            // The wheel scrolls the pane under the pointer: the Log's lines, else the runs.
            let keep = view.pane;
            view.pane = if id == PaneId::Log {
                crate::app::Pane::Log
            } else {
                crate::app::Pane::Runs
            };
            let n = if id == PaneId::Log { WHEEL } else { 1 };
            for _ in 0..n {
                view.navigate(state, a);
            }
            view.pane = keep;
            true
        }
        _ => false,
    }
}

/// The whole body while a pane is zoomed.
fn body(view: &View, l: &layout::Layout) -> Option<Rect> {
    l.visible(view.pane)
        .iter()
        .map(|(_, r)| *r)
        .reduce(|a, b| a.union(b))
}

/// The pane under `at` (while zoomed: the zoomed pane anywhere in the body).
fn pane_at(view: &View, l: &layout::Layout, at: Position) -> Option<(PaneId, Rect)> {
    let visible = l.visible(view.pane);
    if view.zoom {
        let b = body(view, l)?;
        let (id, _) = layout::focused(visible, view.pane, view.sub)?;
        return b.contains(at).then_some((id, b));
    }
    visible.iter().find(|(_, r)| r.contains(at)).copied()
}

/// A click on the tab bar: the tab under it (the bar reads ` Runs·Scaling   GPUs·Ranks …`).
fn click_tab(view: &mut View, bar: Rect, x: u16) -> bool {
    let mut start = bar.x + 1;
    for p in PAGES {
        let w = layout::page_title(p).chars().count() as u16 + 2;
        if (start..start + w).contains(&x) {
            view.pane = p;
            view.sub = 0;
            return true;
        }
        start += w + 1;
    }
    false
}

/// A click on the Runs table (border, then the header row, then the rows, scrolled as ratatui
/// scrolls a table to keep the cursor in sight).
fn select_row(view: &mut View, state: &State, r: Rect, y: u16) {
    let first = r.y + 2;
    let shown = r.height.saturating_sub(3) as usize;
    if y < first || shown == 0 {
        return;
    }
    let offset = (view.selected + 1).saturating_sub(shown);
    let i = offset + (y - first) as usize;
    if i < state.rows() {
        view.selected = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{HostInfo, Pane, RunSpec, RunView};
    use crate::protocol::Backend;
    use crate::run::Experiment;
    use crossterm::event::{KeyModifiers, MouseButton};

    fn ev(kind: MouseEventKind, column: u16, row: u16) -> MouseEvent {
        MouseEvent {
            kind,
            column,
            row,
            modifiers: KeyModifiers::NONE,
        }
    }

    fn state(n: usize) -> State {
        let mut st = State::new(HostInfo::default());
        for i in 0..n {
            let spec = RunSpec::new(Experiment::Weak, 1, Backend::Sim);
            st.runs.push(RunView::new(
                format!("r{i}"),
                spec,
                std::time::Instant::now(),
                0.0,
            ));
        }
        for i in 0..30 {
            st.push_message(crate::app::Level::Info, None, format!("m{i}"));
        }
        st
    }

    #[test]
    fn click_selects_a_run_and_focuses_panes_the_wheel_scrolls() {
        let st = state(5);
        let area = Rect::new(0, 0, 120, 40);
        let l = layout::compute(area, 0);
        let runs = l.rect(Pane::Runs, PaneId::Runs).unwrap();
        let log = l.rect(Pane::Runs, PaneId::Log).unwrap();
        let mut v = View::default();
        // The third row of the table (border, header, rows 0, 1, 2).
        let down = MouseEventKind::Down(MouseButton::Left);
        assert!(apply(&mut v, &st, area, &ev(down, runs.x + 5, runs.y + 4)));
        assert_eq!(v.selected, 2);
        assert_eq!(v.pane, Pane::Runs);
        // A click on the Log focuses it; the wheel over it scrolls its lines, not the runs.
        apply(&mut v, &st, area, &ev(down, log.x + 3, log.y + 2));
        assert_eq!(v.pane, Pane::Log);
        apply(
            &mut v,
            &st,
            area,
            &ev(MouseEventKind::ScrollUp, log.x + 3, log.y + 2),
        );
        assert_eq!((v.log_scroll, v.selected), (WHEEL, 2));
        // The wheel over the runs moves the selection.
        apply(
            &mut v,
            &st,
            area,
            &ev(MouseEventKind::ScrollDown, runs.x + 3, runs.y + 3),
        );
        assert_eq!(v.selected, 3);
        assert_eq!(v.pane, Pane::Log, "the wheel does not move the focus");
    }

    #[test]
    fn click_on_a_tab_switches_the_page() {
        let st = state(1);
        let area = Rect::new(0, 0, 80, 24);
        let l = layout::compute(area, 0);
        let bar = l.tabs.unwrap();
        let mut v = View::default();
        // " Runs·Scaling   GPUs·Ranks   Timeline·Probe·Bench   Log"
        let x = bar.x + 1 + 14 + 1 + 3;
        apply(
            &mut v,
            &st,
            area,
            &ev(MouseEventKind::Down(MouseButton::Left), x, bar.y),
        );
        assert_eq!(v.pane, Pane::Gpus);
    }
}
