//! Pure drawing: `draw(frame, &Ctx)` paints one frame from the state, the view, the theme and the
//! key map and nothing else (no clock, no I/O), so every screen can be tested with ratatui's
//! `TestBackend`.
//!
//! `layout` decides where panes go from the terminal size and GPU count; each pane module renders
//! into a `Buffer` rect; `model` derives what the panes show; `theme` loads the colour themes.

pub mod bench;
pub mod collectives;
pub mod comm;
pub mod deficits;
pub mod detail;
pub mod fmt;
pub mod gpu_nodes;
pub mod gpu_row;
pub mod gpus;
pub mod layout;
pub mod log;
pub mod memory;
pub mod model;
pub mod phases;
pub mod probe;
pub mod receipt;
pub mod runs;
pub mod scaling;
pub mod splash;
pub mod theme;
pub mod timeline;
pub mod tune;

use crate::app::{Action, State, View};
use crate::keys::KeyMap;
use crate::run::{HostBackend, NcclVar};
use layout::{Mode, PaneId};
use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Clear, Paragraph, Widget, Wrap};
pub use theme::{Theme, ThemeSet};

/// Everything a pane needs to draw: the data, what the user is looking at, the colours and the
/// key map (for the hint bar and help).
pub struct Ctx<'a> {
    pub state: &'a State,
    pub view: &'a View,
    pub theme: &'a Theme,
    pub keys: &'a KeyMap,
}

/// Draw one frame.
pub fn draw(frame: &mut Frame, ctx: &Ctx) {
    let area = frame.area();
    render(ctx, area, frame.buffer_mut());
}

/// Draw the whole screen into `buf` at `area`.
pub fn render(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let theme = ctx.theme;
    buf.set_style(area, theme.base);
    let l = layout::compute(area, gpu_nodes::rows_wanted(ctx.state));
    if l.mode == Mode::TooSmall {
        too_small(ctx, area, buf);
        return;
    }
    header(ctx, l.header, buf);
    if let Some(t) = l.tabs {
        tabs(ctx, t, buf);
    }
    let visible = deficits::swap_in(ctx, &memory::swap_in(ctx, l.visible(ctx.view.pane)));
    match zoomed(ctx, &visible) {
        Some((id, r)) => pane(ctx, id, r, buf),
        None => {
            for (id, r) in visible {
                pane(ctx, id, r, buf);
            }
        }
    }
    hints(ctx, l.hints, buf);
    if ctx.view.detail
        && let Some(run) = ctx.view.selected_run(ctx.state)
    {
        let top = l.tabs.map_or(l.header.bottom(), |t| t.bottom());
        let r = Rect::new(area.x, top, area.width, l.hints.y.saturating_sub(top));
        detail::render(ctx, run, r, buf);
    }
    if ctx.view.tune
        && let Some(board) = &ctx.state.tune
    {
        let top = l.tabs.map_or(l.header.bottom(), |t| t.bottom());
        let r = Rect::new(area.x, top, area.width, l.hints.y.saturating_sub(top));
        tune::render(ctx, board, r, buf);
    }
    if ctx.view.show_help {
        // Everything but the hint bar: the help must fit 80×24 in one column.
        let r = Rect::new(area.x, area.y, area.width, area.height.saturating_sub(1));
        help(ctx, r, buf);
    }
}

/// With `z`, the focused pane over the whole body (the union of the visible panes' rects).
pub fn zoomed(ctx: &Ctx, visible: &[(PaneId, Rect)]) -> Option<(PaneId, Rect)> {
    if !ctx.view.zoom {
        return None;
    }
    let (id, _) = layout::focused(visible, ctx.view.pane, ctx.view.sub)?;
    let body = visible.iter().map(|(_, r)| *r).reduce(|a, b| a.union(b))?;
    Some((id, body))
}

fn pane(ctx: &Ctx, id: PaneId, r: Rect, buf: &mut Buffer) {
    match id {
        PaneId::Gpus => gpus::render_gpus(ctx, r, buf),
        PaneId::Ranks => gpus::render_ranks(ctx, r, buf),
        PaneId::Runs => runs::render(ctx, r, buf),
        PaneId::Scaling => scaling::render(ctx, r, buf),
        PaneId::Timeline => match ctx.view.subject(ctx.state) {
            // A JAX run has no bucket timeline: its receipt takes the place.
            Some(run) if run.spec.kind().has_receipt_pane() => receipt::render(ctx, run, r, buf),
            _ => timeline::render(ctx, r, buf),
        },
        PaneId::Probe => match ctx.view.subject(ctx.state) {
            Some(run) if run.spec.kind().has_receipt_pane() => {
                receipt::render_layout(ctx, run, r, buf)
            }
            _ => probe::render(ctx, r, buf),
        },
        PaneId::Bench => bench::render(ctx, r, buf),
        PaneId::Memory => memory::render(ctx, r, buf),
        PaneId::Deficits => deficits::render(ctx, r, buf),
        PaneId::Log => log::render(ctx, r, buf),
        PaneId::Detail => {
            let v = ctx.view;
            match v.selected_run(ctx.state).or_else(|| v.subject(ctx.state)) {
                Some(run) if !run.status.shows_results() => runs::render_status(ctx, run, r, buf),
                Some(run) if run.spec.kind().probes_no_sync() => probe::render(ctx, r, buf),
                Some(run) if run.spec.kind().sweeps_allreduce() => bench::render(ctx, r, buf),
                _ => scaling::render(ctx, r, buf),
            }
        }
    }
}

/// A view drawn as a block of its own (not a pane of the dashboard: no focus): rounded
/// border, `name` in the title colour and `tag` dimmed, then `body`, wrapped.
pub fn boxed_text(
    t: &Theme,
    name: &str,
    tag: String,
    body: Vec<Line<'_>>,
    area: Rect,
    buf: &mut Buffer,
) {
    let b = Block::default()
        .borders(Borders::ALL)
        .border_type(BorderType::Rounded)
        .border_style(t.border)
        .title(Line::from(vec![
            Span::styled(format!(" {name} "), t.title),
            Span::styled(tag, t.dim),
        ]));
    let inner = b.inner(area);
    b.render(area, buf);
    Paragraph::new(body)
        .wrap(Wrap { trim: false })
        .render(inner, buf);
}

/// A pane's frame: rounded border, title, focus colour when `View.pane` points at it. Returns
/// the inner rect.
pub fn frame_block(
    ctx: &Ctx,
    id: PaneId,
    title: Vec<Span<'static>>,
    r: Rect,
    buf: &mut Buffer,
) -> Rect {
    let t = ctx.theme;
    let focused = id.focused(ctx.view.pane, ctx.view.sub);
    let (bs, ts) = if focused {
        (t.border_focus, t.title_focus)
    } else {
        (t.border, t.title)
    };
    let mut spans = vec![Span::styled(" ", bs)];
    // A title wider than the pane is cut with `…`, never silently (issue 47); `z` shows the
    // pane, and its title, over the whole body.
    let mut room = usize::from(r.width).saturating_sub(4);
    let cut = title.iter().map(|s| s.width()).sum::<usize>() > room;
    if cut {
        room = room.saturating_sub(1);
    }
    for s in title {
        if room == 0 {
            break;
        }
        let style = if s.style == Style::default() {
            ts
        } else {
            s.style
        };
        let w = s.width();
        let text = if w > room {
            // What fits in `room` (`trunc` keeps `room` cells and its own `…`, dropped here).
            let mut x = fmt::trunc(&s.content, room + 1);
            x.pop();
            x
        } else {
            s.content.into_owned()
        };
        room = room.saturating_sub(w);
        spans.push(Span::styled(text, style));
    }
    if cut {
        spans.push(Span::styled("…", ts));
    }
    spans.push(Span::styled(" ", bs));
    let b = Block::default()
        .borders(Borders::ALL)
        .border_type(BorderType::Rounded)
        .border_style(bs)
        .title(Line::from(spans));
    let inner = b.inner(r);
    b.render(r, buf);
    inner
}

/// Write one line at row `y` of `area` (clipped), returning nothing; lines past the bottom are
/// dropped.
pub fn put_line(buf: &mut Buffer, area: Rect, y: u16, line: &Line) {
    if y >= area.height {
        return;
    }
    buf.set_line(area.x, area.y + y, line, area.width);
    // A line wider than its pane says so: its last cell becomes `…` (`z` shows the pane whole),
    // never a silent cut (issue 47).
    if area.width > 0 && line.width() > area.width as usize {
        let last = (area.x + area.width - 1, area.y + y);
        if let Some(cell) = buf.cell_mut(last) {
            cell.set_symbol("…");
        }
    }
}

/// A dim one-line hint centred vertically, for empty panes.
pub fn empty_note(ctx: &Ctx, area: Rect, text: &str, buf: &mut Buffer) {
    let p = Paragraph::new(text.to_string())
        .style(ctx.theme.dim)
        .wrap(Wrap { trim: true });
    p.render(area, buf);
}

/// Join segments with separators; when the line is too wide, drop the least important segments
/// (highest `prio`, rightmost first).
fn fit_segments(
    mut segs: Vec<(u8, Vec<Span<'static>>)>,
    width: usize,
    sep: Span<'static>,
) -> Line<'static> {
    let total = |segs: &[(u8, Vec<Span<'static>>)]| -> usize {
        segs.iter()
            .map(|(_, sp)| sp.iter().map(Span::width).sum::<usize>())
            .sum::<usize>()
            + sep.width() * segs.len().saturating_sub(1)
    };
    while total(&segs) > width {
        let Some(worst) = segs.iter().map(|s| s.0).max().filter(|p| *p > 0) else {
            break;
        };
        let pos = segs.iter().rposition(|s| s.0 == worst).expect("exists");
        segs.remove(pos);
    }
    let mut spans = Vec::new();
    for (i, (_, sp)) in segs.into_iter().enumerate() {
        if i > 0 {
            spans.push(sep.clone());
        }
        spans.extend(sp);
    }
    Line::from(spans)
}

fn header(ctx: &Ctx, r: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let w = r.width as usize;
    let sep = Span::styled(" │ ", t.dim);
    put_line(buf, r, 0, &fit_segments(host_segments(ctx), w, sep.clone()));
    put_line(buf, r, 1, &fit_segments(next_segments(ctx, w), w, sep));
}

/// The header's first line, by priority: the host, its GPUs, backend, interconnect and the
/// versions it runs.
fn host_segments(ctx: &Ctx) -> Vec<(u8, Vec<Span<'static>>)> {
    let s = ctx.state;
    let t = ctx.theme;
    let mut l1: Vec<(u8, Vec<Span<'static>>)> = vec![(
        0,
        vec![
            Span::styled(" ddptop ", t.title_focus),
            Span::styled(" host ", t.label),
            Span::styled(
                if s.host.hostname.is_empty() {
                    "?".to_string()
                } else {
                    s.host.hostname.clone()
                },
                t.header,
            ),
        ],
    )];
    let gpus = match (&s.host.gpu_summary, s.gpus.len()) {
        (Some(g), _) => Span::styled(g.clone(), t.header),
        (None, 0) => Span::styled("no GPU", t.dim),
        (None, n) => Span::styled(format!("{n} GPUs"), t.header),
    };
    l1.push((1, vec![gpus]));
    // The host's backend; without one (listings, tests), a running simulation still says so.
    let backend = match &s.host.backend {
        HostBackend::Unknown
            if s.runs
                .iter()
                .any(|r| r.is_simulated() && !r.status.is_final()) =>
        {
            Span::styled(" SIMULATED ", t.sim)
        }
        HostBackend::Unknown => Span::styled("backend ?", t.dim),
        b if b.is_simulated() => Span::styled(format!(" {b} "), t.sim),
        b => Span::styled(b.to_string(), t.header),
    };
    l1.push((0, vec![backend]));
    if let Some(ic) = &s.host.interconnect {
        l1.insert(2, (3, vec![Span::styled(ic.clone(), t.text)]));
    }
    // Versions: the host's, else what the latest run of this session reported (a stored run's
    // torch may be long gone from this machine: it is not this host's).
    let latest = s
        .runs
        .iter()
        .filter(|r| r.live && !r.launch.versions.is_empty())
        .max_by(|a, b| a.clock.started_unix.total_cmp(&b.clock.started_unix));
    let ver = |host: &Option<String>, key: &str| {
        host.clone()
            .or_else(|| latest.and_then(|r| r.launch.versions.get(key).cloned()))
    };
    let mut vers = Vec::new();
    if let Some(v) = ver(&s.host.torch, "torch") {
        vers.push(format!("torch {v}"));
    }
    if let Some(v) = ver(&s.host.nccl, "nccl") {
        vers.push(format!("NCCL {v}"));
    }
    if !vers.is_empty() {
        l1.push((2, vec![Span::styled(vers.join(" · "), t.text)]));
    }
    l1
}

/// The header's second line, by priority: what the next launch will be (experiment, data
/// path, NCCL settings, nodes, k limit), the active runs, FROZEN and the theme.
fn next_segments(ctx: &Ctx, w: usize) -> Vec<(u8, Vec<Span<'static>>)> {
    let s = ctx.state;
    let t = ctx.theme;
    let exp = s.next.experiment;
    let batch = match (&s.next.attach, exp) {
        (Some(label), e) if e.kind().runs_user_script() => label.clone(),
        _ => crate::run::RunSpec::new(exp, 1, crate::protocol::Backend::Sim).batch_label(),
    };
    let mut l2: Vec<(u8, Vec<Span<'static>>)> = vec![(
        0,
        vec![
            Span::styled(" next ", t.label),
            Span::styled(exp.as_str().to_string(), t.value),
            match &s.next.unavailable {
                Some(_) => Span::styled(" (not built)", t.bad),
                None => Span::styled(format!(" ({batch})"), t.dim),
            },
        ],
    )];
    if let Some(badge) = s.next.data_path.badge() {
        l2.push((1, vec![Span::styled(badge, t.value)]));
    }
    // Every setting the launch will carry, ddptop's own default (NVLS off) included; a config
    // preset by its name. gloo has no NCCL settings at all: nothing is said about them.
    let gloo = s.host.backend == HostBackend::Gloo;
    let sim = s.host.backend.is_simulated();
    if !gloo {
        let label = if sim { "sim NCCL " } else { "NCCL " };
        let badges = s.next.nccl.short_badges();
        let full = nccl_segment(ctx, label, &badges);
        let compact = {
            let mut v = vec![Span::styled(label, t.label)];
            if let Some(p) = &s.next.preset {
                v.push(Span::styled(format!(" preset {p} "), t.badge));
            } else {
                v.push(Span::styled(format!("{} set", badges.len()), t.value));
            }
            v
        };
        l2.push((0, full));
        // The next launch, the NCCL settings and FROZEN always stay: when they don't fit,
        // the settings shrink to a count (or the preset's name).
        let fixed: usize = l2
            .iter()
            .filter(|(p, _)| *p == 0)
            .map(|(_, sp)| sp.iter().map(Span::width).sum::<usize>() + 3)
            .sum::<usize>()
            + if ctx.view.frozen().is_some() { 11 } else { 0 };
        if fixed > w {
            let last = l2.len() - 1;
            l2[last].1 = compact;
        }
    }
    // Where 1/2/4 launch: shown once the config names other nodes (`N` switches).
    if let Some(b) = s.next.target.badge() {
        let style = if s.next.target.broken.is_some() {
            t.bad
        } else if s.next.target.all {
            t.badge
        } else {
            t.text
        };
        l2.push((1, vec![Span::styled(format!(" {b} "), style)]));
    }
    l2.push((
        2,
        vec![if s.max_k > 0 {
            Span::styled(format!("k≤{}", s.max_k), t.text)
        } else if gloo {
            Span::styled("ranks are CPU processes", t.dim)
        } else if sim {
            Span::styled("simulated GPUs", t.dim)
        } else {
            Span::styled("no GPUs", t.dim)
        }],
    ));
    let active = s.active_runs().count();
    if active > 0 {
        l2.push((1, vec![Span::styled(format!("{active} active"), t.running)]));
    }
    if ctx.view.frozen().is_some() {
        l2.push((0, vec![Span::styled(" FROZEN ", t.frozen)]));
    }
    l2.push((3, vec![Span::styled(format!("theme {}", t.name), t.dim)]));
    l2
}

/// `NCCL  NVLS_ENABLE=0  P2P_DISABLE=1 `, or `NCCL  preset defaults ` for a config preset.
fn nccl_segment(ctx: &Ctx, label: &'static str, badges: &[String]) -> Vec<Span<'static>> {
    let t = ctx.theme;
    let mut v = vec![Span::styled(label, t.label)];
    if let Some(p) = &ctx.state.next.preset {
        v.push(Span::styled(format!(" preset {p} "), t.badge));
        return v;
    }
    if badges.is_empty() {
        v.push(Span::styled("nothing set", t.dim));
    }
    for (i, b) in badges.iter().enumerate() {
        if i > 0 {
            v.push(Span::raw(" "));
        }
        v.push(Span::styled(format!(" {b} "), t.badge));
    }
    v
}

fn tabs(ctx: &Ctx, r: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let mut spans = vec![Span::raw(" ")];
    for (i, p) in layout::PAGES.iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(" ", t.dim));
        }
        let style = if *p == ctx.view.pane {
            t.tab_active
        } else {
            t.tab
        };
        spans.push(Span::styled(format!(" {} ", layout::page_title(*p)), style));
    }
    if let Some(k) = ctx.keys.first_key(Action::NextPane) {
        spans.push(Span::styled(format!("  {k}: next"), t.dim));
    }
    put_line(buf, r, 0, &Line::from(spans));
}

/// The hint bar: the bound key of every action that has a hint, in `Action::ALL` order; when it
/// doesn't fit, the least important hints go first (help and quit always stay).
fn hints(ctx: &Ctx, r: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let mut items: Vec<(u8, String, String)> = Vec::new();
    for a in Action::ALL {
        let (Some(h), Some(k)) = (a.hint(), ctx.keys.first_key(a)) else {
            continue;
        };
        // gloo has no NCCL: its toggles would do nothing there.
        if matches!(a, Action::Toggle(_)) && ctx.state.host.backend == HostBackend::Gloo {
            continue;
        }
        let prio = match a {
            Action::Help | Action::Quit => 0,
            Action::Launch { .. } | Action::Probe | Action::Stop => 1,
            Action::Bench | Action::Sweep => 2,
            Action::Toggle(_) | Action::SwitchExperiment => 3,
            _ => 4,
        };
        let mut label = h.to_string();
        // Show a toggle's current state (NVLS is off by default: its hint says how to turn it on).
        match a {
            Action::Toggle(NcclVar::NvlsEnable)
                if !ctx.state.next.nccl.is_on(NcclVar::NvlsEnable) =>
            {
                label = "NVLS on".into()
            }
            Action::Toggle(NcclVar::NvlsEnable) => {}
            Action::Toggle(v) if ctx.state.next.nccl.is_on(v) => label.push_str(" ON"),
            _ => {}
        }
        items.push((prio, k.to_string(), label));
    }
    let width = |items: &[(u8, String, String)]| -> usize {
        items
            .iter()
            .map(|(_, k, l)| fmt::unicode_width_shim::width(k) + l.chars().count() + 5)
            .sum::<usize>()
    };
    while width(&items) > r.width as usize {
        let Some(worst) = items.iter().map(|i| i.0).max().filter(|p| *p > 0) else {
            break;
        };
        let pos = items.iter().rposition(|i| i.0 == worst).expect("exists");
        items.remove(pos);
    }
    let mut spans = Vec::new();
    for (_, k, l) in items {
        spans.push(Span::styled(format!(" {k} "), t.hint_key));
        spans.push(Span::styled(format!(" {l}  "), t.hint_text));
    }
    put_line(buf, r, 0, &Line::from(spans));
}

/// Actions the help screen lists on one line, with the line's description: siblings whose keys
/// read best together (and keep the screen inside 80×24: at most 21 lines of at most 78 columns).
const HELP_GROUPS: [(&[Action], &str); 8] = [
    (
        &[
            Action::Launch { k: 1 },
            Action::Launch { k: 2 },
            Action::Launch { k: 4 },
        ],
        "launch the next experiment at k = 1, 2, 4",
    ),
    (
        &[
            Action::Toggle(NcclVar::TOGGLES[0]),
            Action::Toggle(NcclVar::TOGGLES[1]),
            Action::Toggle(NcclVar::TOGGLES[2]),
        ],
        "NCCL toggles for the next launch: SHM memcpy, P2P, NVLS",
    ),
    (
        &[Action::Up, Action::Down],
        "select a run; with the Log focused: scroll it",
    ),
    (
        &[
            Action::PageUp,
            Action::PageDown,
            Action::Top,
            Action::Bottom,
        ],
        "page / first / last (runs, or the Log's lines)",
    ),
    (
        &[Action::Focus, Action::Close],
        "details of the selected run / close (details, help)",
    ),
    (
        &[Action::NextTheme, Action::NextPreset],
        "next colour theme / next NCCL preset (config)",
    ),
    (
        &[Action::Tune, Action::SaveTuned],
        "tune DDP/NCCL settings (live table) / keep the winner",
    ),
    (
        &[Action::Help, Action::Quit],
        "this help / quit (stops runs unless --detach)",
    ),
];

/// The help screen, generated from the key map and `Action::describe`.
pub fn help_lines(keys: &KeyMap) -> Vec<(String, String, String)> {
    let keys_of =
        |a: Action| -> Vec<String> { keys.keys_for(a).iter().map(|k| k.to_string()).collect() };
    let mut out = Vec::new();
    for a in Action::ALL {
        let group = HELP_GROUPS.iter().find(|(members, _)| members.contains(&a));
        let (ks, desc) = match group {
            // Later members are listed with the first one.
            Some((members, _)) if members[0] != a => continue,
            Some((members, desc)) => {
                // The first key of each (all of them where the group is small).
                let parts: Vec<String> = members
                    .iter()
                    .map(|m| {
                        let ks = keys_of(*m);
                        if members.len() > 2 {
                            ks.into_iter().take(1).collect::<Vec<_>>().join(" ")
                        } else {
                            ks.join(" ")
                        }
                    })
                    .filter(|s| !s.is_empty())
                    .collect();
                let sep = if members.len() > 2 { " " } else { " / " };
                (parts.join(sep), desc.to_string())
            }
            None => (keys_of(a).join(" "), a.describe().into_owned()),
        };
        let ks = if ks.is_empty() {
            "(unbound)".to_string()
        } else {
            ks
        };
        out.push((ks, a.name().into_owned(), desc));
    }
    out
}

fn help(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let lines = help_lines(ctx.keys);
    let key_w = lines
        .iter()
        .map(|(k, _, _)| fmt::unicode_width_shim::width(k))
        .max()
        .unwrap_or(4)
        .clamp(4, 20);
    let desc_max = lines
        .iter()
        .map(|(_, _, d)| d.chars().count())
        .max()
        .unwrap_or(40);
    let want_w = (key_w + 2 + desc_max + 2) as u16;
    let want_h = lines.len() as u16 + 2;
    let w = want_w.min(area.width);
    let h = want_h.min(area.height);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    Clear.render(r, buf);
    buf.set_style(r, t.base);
    let b = Block::default()
        .borders(Borders::ALL)
        .border_type(BorderType::Double)
        .border_style(t.border_focus)
        .title(Line::from(Span::styled(
            " Help: keys (from your key map) ",
            t.title_focus,
        )))
        .title_bottom(Line::from(Span::styled(
            " ? or Esc closes · keys are set in config.toml [keys] ",
            t.dim,
        )));
    // What watching costs, so users can check it (docs/performance.md).
    let b = match ctx.state.self_cost {
        Some(c) => b.title(
            Line::from(Span::styled(
                format!(" ddptop: {:.1}% CPU · {:.0} MB ", c.cpu_pct, c.rss_mb),
                t.dim,
            ))
            .right_aligned(),
        ),
        None => b,
    };
    let inner = b.inner(r);
    b.render(r, buf);
    if inner.height == 0 {
        return;
    }
    // One column when it fits, else as many as needed.
    let rows = inner.height as usize;
    let cols = lines.len().div_ceil(rows).max(1);
    let col_w = inner.width as usize / cols;
    let desc_w = col_w.saturating_sub(key_w + 2);
    for (i, (k, _name, d)) in lines.iter().enumerate() {
        let (c, y) = (i / rows, i % rows);
        let line = Line::from(vec![
            Span::styled(format!("{:>key_w$}  ", fmt::trunc(k, key_w)), t.help_key),
            Span::styled(fmt::trunc(d, desc_w), t.text),
        ]);
        let x = inner.x + (c * col_w) as u16;
        buf.set_line(x, inner.y + y as u16, &line, col_w as u16);
    }
}

fn too_small(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let msg = format!(
        "Terminal too small: {}×{}. ddptop needs at least {}×{} (80×24 or larger recommended). Enlarge the window, or press q to quit.",
        area.width,
        area.height,
        layout::MIN_W,
        layout::MIN_H
    );
    let h = 4.min(area.height);
    let r = Rect::new(
        area.x,
        area.y + (area.height.saturating_sub(h)) / 2,
        area.width,
        h,
    );
    Paragraph::new(msg)
        .style(ctx.theme.warn)
        .alignment(Alignment::Center)
        .wrap(Wrap { trim: true })
        .render(r, buf);
}
