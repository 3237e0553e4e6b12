//! The layout is a pure function of the terminal size and GPU count: every combination from the
//! minimum to 300×90, with 0, 1, 2 and 8 GPUs (and 16), gives panes that lie inside the screen,
//! never overlap and are never empty.

use ddptop::app::Pane;
use ddptop::ui::layout::{self, MIN_H, MIN_W, Mode, PaneId};
use ratatui::layout::Rect;

fn overlaps(a: Rect, b: Rect) -> bool {
    !a.intersection(b).is_empty()
}

fn inside(r: Rect, area: Rect) -> bool {
    r.x >= area.x && r.y >= area.y && r.right() <= area.right() && r.bottom() <= area.bottom()
}

fn check(w: u16, h: u16, n: usize) {
    let area = Rect::new(0, 0, w, h);
    let l = layout::compute(area, n);
    let ctx = format!("{w}x{h} gpus={n}");
    if w < MIN_W || h < MIN_H {
        assert_eq!(l.mode, Mode::TooSmall, "{ctx}");
        return;
    }
    assert_ne!(l.mode, Mode::TooSmall, "{ctx}");
    let mut fixed = vec![("header", l.header), ("hints", l.hints)];
    if let Some(t) = l.tabs {
        fixed.push(("tabs", t));
    }
    let pages: Vec<Vec<(PaneId, Rect)>> = match l.mode {
        Mode::Full => vec![l.panes.clone()],
        _ => l.pages.iter().map(|(_, v)| v.clone()).collect(),
    };
    assert!(!pages.is_empty(), "{ctx}");
    for panes in pages {
        assert!(!panes.is_empty(), "{ctx}: empty page");
        let mut all: Vec<(String, Rect)> = fixed.iter().map(|(n, r)| (n.to_string(), *r)).collect();
        all.extend(panes.iter().map(|(id, r)| (format!("{id:?}"), *r)));
        for (name, r) in &all {
            assert!(!r.is_empty(), "{ctx}: {name} is empty: {r:?}");
            assert!(inside(*r, area), "{ctx}: {name} {r:?} outside {area:?}");
        }
        for (id, r) in &panes {
            // Bordered panes need room for at least one line of content.
            assert!(
                r.height >= 3 && r.width >= 20,
                "{ctx}: {id:?} too small: {r:?}"
            );
        }
        for i in 0..all.len() {
            for j in i + 1..all.len() {
                assert!(
                    !overlaps(all[i].1, all[j].1),
                    "{ctx}: {} {:?} overlaps {} {:?}",
                    all[i].0,
                    all[i].1,
                    all[j].0,
                    all[j].1
                );
            }
        }
    }
}

#[test]
fn sweep_sizes_and_gpu_counts() {
    let widths = [
        40, 59, 60, 72, 80, 81, 99, 100, 119, 120, 139, 140, 159, 160, 199, 200, 240, 300,
    ];
    let heights = [
        10, 15, 16, 20, 24, 25, 30, 34, 35, 36, 39, 40, 45, 50, 60, 70, 90,
    ];
    for n in [0, 1, 2, 4, 8, 16] {
        for w in widths {
            for h in heights {
                check(w, h, n);
            }
        }
    }
}

#[test]
fn every_pane_reachable_at_80x24() {
    for n in [0, 1, 2, 8] {
        let l = layout::compute(Rect::new(0, 0, 80, 24), n);
        assert_eq!(l.mode, Mode::Tabs);
        let mut seen: Vec<PaneId> = l
            .pages
            .iter()
            .flat_map(|(_, v)| v.iter().map(|p| p.0))
            .collect();
        seen.sort();
        seen.dedup();
        for id in [
            PaneId::Gpus,
            PaneId::Ranks,
            PaneId::Runs,
            PaneId::Timeline,
            PaneId::Probe,
            PaneId::Bench,
            PaneId::Log,
        ] {
            assert!(seen.contains(&id), "{id:?} unreachable with {n} GPUs");
        }
        // Each page is one Pane value, so Tab reaches all of them.
        let pages: Vec<Pane> = l.pages.iter().map(|(p, _)| *p).collect();
        assert_eq!(pages, layout::PAGES.to_vec());
    }
}

#[test]
fn big_screens_show_everything_and_every_gpu() {
    for n in [0, 1, 2, 8] {
        let l = layout::compute(Rect::new(0, 0, 240, 70), n);
        assert_eq!(l.mode, Mode::Full, "240x70 with {n} GPUs");
        let g = l.rect(Pane::Runs, PaneId::Gpus).unwrap();
        assert!(g.height as usize >= n.max(1) + 3, "{n} GPU rows fit");
    }
}

#[test]
fn layout_is_pure() {
    let a = layout::compute(Rect::new(0, 0, 133, 41), 8);
    let b = layout::compute(Rect::new(0, 0, 133, 41), 8);
    assert_eq!(a, b);
}
