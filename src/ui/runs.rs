//! The Runs pane: this session's runs and stored history, one row each. Figures appear only for
//! runs that may show them: a completed run shows its aggregate, a running one its live rate, a
//! failed, hung or stopped one its status and reason and never a number.

use super::fmt;
use super::layout::PaneId;
use super::theme::status_glyph;
use super::{Ctx, empty_note, frame_block, model};
use crate::app::{RunStatus, RunView};
use crate::app::{progress, summary};
use crate::protocol::Backend;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row, StatefulWidget, Table, TableState};

/// What a run shows in the numbers columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// Samples/s column (or the experiment's headline figure).
    pub main: String,
    /// Efficiency column: speedup, efficiency and the k=1 run they divide by.
    pub eff: String,
    /// The same, shorter (speedup and the k=1 run), for a narrow table.
    pub eff_narrow: String,
    /// The main figure without its spread, for a narrow table.
    pub main_short: String,
    /// Reason, transport, sweep.
    pub note: String,
    /// The main figure is live (running), not final.
    pub live: bool,
}

/// A run's note: the marks that qualify its figure first (they must survive a narrow column),
/// then its transport, control, caveats and bad lines.
fn notes(run: &RunView) -> Vec<String> {
    let mut note = Vec::new();
    if let Some(shared) = &run.launch.gpus_shared {
        note.push(format!("⚠ {shared}"));
    }
    if let Some(f) = &run.spec.inject {
        note.push(format!("⚠ fault: {f}"));
    }
    if let Some(ignored) = crate::run::nccl::ignored_note(&run.launch.nccl_read) {
        note.push(format!("⚠ {ignored}"));
    }
    if let Some(tr) = run.transport() {
        note.push(tr.to_string());
    }
    if run.spec.control {
        note.push("k=1 control".into());
    }
    for c in &run.evidence.caveats {
        note.push(format!("⚠ {}", c.short()));
    }
    if run.bad_lines() + run.evidence.rejected > 0 {
        note.push(format!(
            "{} bad lines",
            run.bad_lines() + run.evidence.rejected
        ));
    }
    note
}

pub fn figures(run: &RunView, runs: &[RunView]) -> Figures {
    let dash = "—".to_string();
    match run.status {
        RunStatus::Failed | RunStatus::Hung | RunStatus::Stopped => {
            return Figures {
                main: dash.clone(),
                main_short: dash.clone(),
                eff: dash.clone(),
                eff_narrow: dash,
                note: run
                    .reason
                    .clone()
                    .unwrap_or_else(|| "no reason recorded".into()),
                live: false,
            };
        }
        _ => {}
    }
    let note = notes(run);
    let live = !run.status.is_final();
    let mut eff_narrow = None;
    let mut main_short = None;
    let (main, eff) = match (run.spec.experiment(), run.status) {
        (e, RunStatus::Completed) if e.has_throughput() => match &run.figures.aggregate {
            Some(agg) => {
                let main = format!(
                    "{} ±{:.1}%",
                    fmt::rate(agg.samples_per_s),
                    model::spread_pct(agg)
                );
                main_short = Some(fmt::rate(agg.samples_per_s));
                let eff = if run.spec.k == 1 && run.perturbation().is_some() {
                    "k=1 ⚠ no base".to_string()
                } else if run.spec.k == 1 {
                    "k=1 base".to_string()
                } else {
                    match summary::scaling(run, runs) {
                        Some(s) => {
                            let base = fmt::tiny_id(&s.baseline);
                            // Within the noise of ideal: "≈100%", not a gain of 0.2%.
                            let pct = match summary::about_ideal(run, &s, runs) {
                                Some(_) => "≈100%".to_string(),
                                None => format!("{:.0}%", s.efficiency * 100.0),
                            };
                            // Marked here; the details (Enter) say why.
                            let warn = if summary::scaling_caveat_for(run, &s, runs).is_some() {
                                "⚠"
                            } else {
                                ""
                            };
                            eff_narrow = Some(format!("{:.2}×{warn} vs {base}", s.speedup));
                            format!("{:.2}× {pct}{warn} vs {base}", s.speedup)
                        }
                        None => "no k=1".to_string(),
                    }
                };
                (main, eff)
            }
            None => ("no result".to_string(), dash.clone()),
        },
        (e, _) if e.has_throughput() => {
            let main = match run.figures.throughput.last() {
                Some((_, sps)) => format!("live {}", fmt::rate(*sps)),
                None => match run.ranks.values().map(|r| r.step).max() {
                    Some(s) if s > 0 => format!("step {s}"),
                    _ => "starting…".into(),
                },
            };
            (main, dash.clone())
        }
        (e, st) if e.kind().probes_no_sync() => {
            let main = match summary::probe_summary(&run.figures.probe) {
                Some(p) => format!("Δ {}", fmt::ms(p.diff_ms)),
                None if st == RunStatus::Completed => "no probe data".into(),
                None => format!(
                    "{} blocks",
                    run.figures.probe.iter().filter(|b| b.rank == 0).count()
                ),
            };
            (
                if live && main.starts_with('Δ') {
                    format!("live {main}")
                } else {
                    main
                },
                dash.clone(),
            )
        }
        (e, _) if e.kind().sweeps_allreduce() => {
            let peak = model::bench_table(&run.figures.bench)
                .values()
                .map(|(bus, _)| *bus)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
            let main = match peak {
                Some(p) => format!("{}{p:.1} GB/s bus", if live { "live " } else { "" }),
                None => "no sizes yet".into(),
            };
            (main, dash.clone())
        }
        _ => (dash.clone(), dash.clone()),
    };
    Figures {
        main_short: main_short.unwrap_or_else(|| main.clone()),
        main,
        eff_narrow: eff_narrow.unwrap_or_else(|| eff.clone()),
        eff,
        note: note.join(" · "),
        live,
    }
}

pub fn render(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let s = ctx.state;
    let t = ctx.theme;
    let inner = frame_block(ctx, PaneId::Runs, title(ctx), area, buf);
    if inner.height == 0 {
        return;
    }
    if s.rows() == 0 {
        let note = match &s.next.unavailable {
            Some(why) => why.clone(),
            None => "no runs yet: press 1, 2 or 4 to launch the next experiment at k GPUs, a to sweep k=1,2,4, p for the no_sync probe, b for the all-reduce bench".into(),
        };
        empty_note(ctx, inner, &note, buf);
        return;
    }
    let g = Geometry::of(inner.width as usize);
    // Queued launches first (the last to start on top, so the next one sits just above the runs
    // and a started launch keeps its row), greyed, with their place in the queue.
    let queued_rows = s
        .queued
        .iter()
        .enumerate()
        .rev()
        .map(|(i, q)| queued_row(ctx, i, q, g.wide));
    let run_rows = s.runs.iter().map(|r| run_row(ctx, r, &g));
    let rows: Vec<Row> = queued_rows.chain(run_rows).collect();
    let (header, widths): (Vec<&str>, Vec<Constraint>) = columns(s, &g).into_iter().unzip();
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(t.label))
        .column_spacing(1)
        .row_highlight_style(t.selected);
    let mut ts = TableState::default().with_selected(Some(ctx.view.selected.min(s.rows() - 1)));
    StatefulWidget::render(table, inner, buf, &mut ts);
}

/// The pane's title: runs of this session and earlier ones, the queue, an unbuilt next launch.
fn title(ctx: &Ctx) -> Vec<Span<'static>> {
    let s = ctx.state;
    let t = ctx.theme;
    let live = s.runs.iter().filter(|r| r.live).count();
    let hist = s.runs.len() - live;
    let mut title = vec![Span::raw("Runs")];
    if !s.runs.is_empty() {
        title.push(Span::styled(
            format!(" {live} this session, {hist} from earlier sessions"),
            t.dim,
        ));
    }
    if !s.queued.is_empty() {
        title.push(Span::styled(format!(" · {} queued", s.queued.len()), t.dim));
    }
    if s.next.unavailable.is_some() {
        title.push(Span::styled(
            format!(" · next {} (not built)", s.next.experiment.as_str()),
            t.warn,
        ));
    }
    title
}

/// The table's width and the layout it picks.
struct Geometry {
    w: usize,
    id_w: usize,
    /// The wide table (backend and NCCL columns, a note).
    wide: bool,
    /// Cells the wide table has beyond its fixed columns.
    spare: usize,
}

impl Geometry {
    fn of(w: usize) -> Geometry {
        let id_w = if w >= 150 { 21 } else { 11 };
        // The wide table's fixed columns (id, exp, k, status, figures, a note, the spaces
        // between): it is used only when they and the backend and NCCL columns fit, so no
        // column (the run id above all) is ever squeezed.
        let fixed = 1 + id_w + 9 + 2 + 11 + 16 + 17 + 4 + 9;
        Geometry {
            w,
            id_w,
            wide: w >= 100 && w >= fixed + 7 + 12,
            spare: w.saturating_sub(fixed + 7 + 12),
        }
    }
}

/// A queued launch's row, greyed, with its place in the queue.
fn queued_row(ctx: &Ctx, i: usize, q: &crate::app::Queued, wide: bool) -> Row<'static> {
    let s = ctx.state;
    let t = ctx.theme;
    let st = t.dim;
    let be = if wide {
        fmt::backend(&q.spec)
    } else {
        fmt::backend_short(&q.spec)
    };
    let exp = fmt::experiment(&q.spec);
    let mut note = vec![];
    if let Some((p, n)) = q
        .sweep
        .as_deref()
        .and_then(|w| s.sweep_position(w, None, Some(i)))
    {
        note.push(format!("sweep {p}/{n}"));
    }
    if let Some(k) = ctx.keys.first_key(crate::app::Action::Stop) {
        note.push(format!("{k} cancels"));
    }
    if wide {
        note.push("starts when the active run ends".into());
    }
    let mut cells = vec![
        Cell::from(Span::styled(" ", st)),
        Cell::from(Span::styled("—", st)),
        Cell::from(Span::styled(exp, st)),
        Cell::from(Span::styled(q.spec.k.to_string(), st)),
        Cell::from(Span::styled(be, st)),
    ];
    let status = Cell::from(Span::styled(format!("◌ queued #{}", i + 1), st));
    if wide {
        cells.extend([
            Cell::from(Span::styled(q.spec.nccl.short(), st)),
            status,
            Cell::from(Span::styled("—", st)),
            Cell::from(Span::styled("—", st)),
            Cell::from(Span::styled(note.join(" · "), st)),
        ]);
    } else {
        cells.extend([status, Cell::from(Span::styled(note.join(" · "), st))]);
    }
    Row::new(cells)
}

/// A run's row: mark, id, experiment, k, backend, then the wide or the narrow figures.
fn run_row(ctx: &Ctx, r: &RunView, g: &Geometry) -> Row<'static> {
    let s = ctx.state;
    let t = ctx.theme;
    let (id_w, wide) = (g.id_w, g.wide);
    let focused = ctx.view.focused.as_deref();
    let mut f = figures(r, &s.runs);
    if let Some((p, n)) = r
        .launch
        .sweep
        .as_deref()
        .and_then(|w| s.sweep_position(w, Some(&r.id), None))
    {
        let sw = format!("sweep {p}/{n}");
        f.note = if f.note.is_empty() {
            sw
        } else {
            format!("{sw} · {}", f.note)
        };
    }
    let prog = progress::progress(r);
    let mark = if Some(r.id.as_str()) == focused {
        "●"
    } else {
        " "
    };
    let id = if id_w >= 21 {
        r.id.clone()
    } else {
        fmt::short_id(&r.id).to_string()
    };
    let id_style = if r.live { t.text } else { t.dim };
    let be_style = if r.spec.backend == Backend::Sim {
        t.sim
    } else {
        t.text
    };
    let be = if wide {
        fmt::backend(&r.spec)
    } else {
        fmt::backend_short(&r.spec)
    };
    let status = Span::styled(
        format!("{} {}", status_glyph(r.status), r.status.as_str()),
        t.status(r.status),
    );
    let main_style = if f.live {
        t.running
    } else if r.status == RunStatus::Completed {
        t.value
    } else {
        t.dim
    };
    let exp = fmt::experiment(&r.spec);
    let mut cells = vec![
        Cell::from(Span::styled(mark, t.running)),
        Cell::from(Span::styled(id, id_style)),
        Cell::from(Span::styled(exp, t.text)),
        Cell::from(Span::styled(r.spec.k.to_string(), t.value)),
        Cell::from(Span::styled(be, be_style)),
    ];
    if wide {
        cells.extend(wide_cells(ctx, r, f, prog, status, main_style));
    } else {
        let result = narrow_result(ctx, r, f, prog, main_style, g.w.saturating_sub(33 + id_w));
        cells.extend([Cell::from(status), Cell::from(result)]);
    }
    Row::new(cells)
}

/// The wide table's cells after the backend: NCCL toggles, status, figures (or progress), note.
fn wide_cells(
    ctx: &Ctx,
    r: &RunView,
    f: Figures,
    prog: Option<progress::Progress>,
    status: Span<'static>,
    main_style: Style,
) -> [Cell<'static>; 5] {
    let t = ctx.theme;
    let note_style = if r.status.shows_results() {
        t.dim
    } else {
        t.status(r.status)
    };
    // A running run has no efficiency yet: its progress takes that column, its
    // phase leads the note.
    let (eff, note) = match &prog {
        Some(p) => {
            let bar = progress_text(
                &progress::Progress {
                    phase: None,
                    ..p.clone()
                },
                17,
            )
            .unwrap_or_default();
            let phase = p.phase.map(progress::phase_label).unwrap_or_default();
            let note = [f.note, phase.to_string()]
                .into_iter()
                .filter(|x| !x.is_empty())
                .collect::<Vec<_>>()
                .join(" · ");
            (bar, note)
        }
        None => (f.eff, f.note),
    };
    [
        Cell::from(Span::styled(
            r.spec.nccl.short(),
            if r.spec.nccl.is_default() {
                t.dim
            } else {
                t.text
            },
        )),
        Cell::from(status),
        Cell::from(Span::styled(f.main, main_style)),
        Cell::from(Span::styled(
            eff,
            if prog.is_some() { t.running } else { t.value },
        )),
        Cell::from(Span::styled(note, note_style)),
    ]
}

/// The narrow table's result: the longest figures that fit in `avail` cells and the progress,
/// or the status's reason.
fn narrow_result(
    ctx: &Ctx,
    r: &RunView,
    f: Figures,
    prog: Option<progress::Progress>,
    main_style: Style,
    avail: usize,
) -> Line<'static> {
    let t = ctx.theme;
    if r.status.shows_results() {
        // The longest form that fits the column: the speedup always keeps its k=1 run.
        let len = |a: &str, b: &str| a.chars().count() + 2 + b.chars().count();
        let (main, eff) = if len(&f.main, &f.eff) <= avail {
            (f.main, f.eff)
        } else if len(&f.main, &f.eff_narrow) <= avail {
            (f.main, f.eff_narrow)
        } else {
            (f.main_short, f.eff_narrow)
        };
        let mut v = vec![Span::styled(main.clone(), main_style)];
        if eff != "—" {
            v.push(Span::styled(format!("  {eff}"), t.value));
        }
        if let Some(p) = &prog {
            // The progress, and the sweep position when there is room for both.
            let room = avail.saturating_sub(main.chars().count() + 1);
            let sweep = f.note.split(" · ").find(|x| x.starts_with("sweep "));
            let with_sweep = sweep.and_then(|sw| {
                progress_text(p, room.saturating_sub(sw.chars().count() + 3))
                    .map(|txt| format!(" {txt} · {sw}"))
            });
            if let Some(txt) =
                with_sweep.or_else(|| progress_text(p, room).map(|txt| format!(" {txt}")))
            {
                v.push(Span::styled(txt, t.running));
            }
        }
        Line::from(v)
    } else {
        Line::from(Span::styled(f.note, t.status(r.status)))
    }
}

/// (header, width) of each column; the first four are the same in both layouts.
fn columns(s: &crate::app::State, g: &Geometry) -> Vec<(&'static str, Constraint)> {
    let (id_w, wide, spare) = (g.id_w, g.wide, g.spare);
    let id_w = id_w as u16;
    let mut cols: Vec<(&str, Constraint)> = vec![
        ("", Constraint::Length(1)),
        ("run", Constraint::Length(id_w)),
        ("exp", Constraint::Length(9)),
        // Two digits, three from k=100 (hundreds of ranks on several nodes).
        (
            "k",
            Constraint::Length(if s.runs.iter().any(|r| r.spec.k >= 100) {
                3
            } else {
                2
            }),
        ),
    ];
    if wide {
        let widest = |f: &dyn Fn(&RunView) -> String, lo: u16, hi: u16| {
            s.runs
                .iter()
                .map(|r| f(r).chars().count() as u16)
                .max()
                .unwrap_or(lo)
                .clamp(lo, hi)
        };
        let be_w = widest(&|r| fmt::backend(&r.spec), 7, 18).min(7 + spare as u16);
        let spare = spare as u16 - (be_w - 7);
        cols.extend([
            ("backend", Constraint::Length(be_w)),
            (
                "NCCL toggles",
                Constraint::Length(widest(&|r| r.spec.nccl.short(), 12, 28).min(12 + spare)),
            ),
            ("status", Constraint::Length(11)),
            ("samples/s ±rank", Constraint::Length(16)),
            ("speedup eff vs", Constraint::Length(17)),
            ("note", Constraint::Min(4)),
        ]);
    } else {
        cols.extend([
            ("be", Constraint::Length(4)),
            ("status", Constraint::Length(11)),
            ("samples/s · eff / reason", Constraint::Min(8)),
        ]);
    }
    cols
}

/// A run's progress in at most `room` cells, the longest form that fits:
/// `███▍░░░░ 45% ETA 1m20s train`, then shorter; `None` when nothing fits.
pub fn progress_text(p: &progress::Progress, room: usize) -> Option<String> {
    let phase = p.phase.map(progress::phase_label);
    let eta = p
        .eta_s
        .map(progress::eta_label)
        .or_else(|| p.re_estimating.then(|| "re-estimating".to_string()));
    let mut forms: Vec<String> = Vec::new();
    match p.frac() {
        Some(f) => {
            let pct = format!("{:.0}%", f * 100.0);
            let tail = |eta_word: bool| -> String {
                match (&eta, eta_word) {
                    (Some(e), true) => format!("{pct} ETA {e}"),
                    (Some(e), false) => format!("{pct} {e}"),
                    (None, _) => pct.clone(),
                }
            };
            if let Some(ph) = phase {
                forms.push(format!("{} {} {ph}", progress::bar(f, 10), tail(true)));
            }
            forms.push(format!("{} {}", progress::bar(f, 10), tail(true)));
            forms.push(format!("{} {}", progress::bar(f, 6), tail(false)));
            forms.push(tail(false));
            forms.push(pct.clone());
        }
        None => {
            if let Some(ph) = phase {
                forms.push(format!("step {} {ph}", p.step));
            }
            forms.push(format!("step {}", p.step));
        }
    }
    forms.into_iter().find(|f| f.chars().count() <= room)
}

/// The detail pane for a run that did not complete: its status, the full reason, the watchdog's
/// evidence and its last output lines. Never a figure.
pub fn render_status(ctx: &Ctx, run: &RunView, area: Rect, buf: &mut Buffer) {
    use ratatui::widgets::{Paragraph, Widget, Wrap};
    let t = ctx.theme;
    let title = vec![
        Span::raw("Run "),
        Span::styled(fmt::short_id(&run.id).to_string(), t.text),
        Span::raw(" "),
        Span::styled(
            format!(
                " {} {} ",
                status_glyph(run.status),
                run.status.as_str().to_uppercase()
            ),
            t.status(run.status),
        ),
    ];
    let inner = frame_block(ctx, PaneId::Detail, title, area, buf);
    if inner.height == 0 {
        return;
    }
    let mut lines = vec![Line::from(vec![
        Span::styled(
            format!(
                "{} k={} {} ",
                run.spec.experiment().as_str(),
                run.spec.k,
                fmt::backend(&run.spec)
            ),
            t.label,
        ),
        Span::styled(run.spec.nccl.short(), t.dim),
    ])];
    lines.push(Line::from(vec![
        Span::styled("why: ", t.label),
        Span::styled(
            run.reason
                .clone()
                .unwrap_or_else(|| "no reason recorded".into()),
            t.text,
        ),
    ]));
    for l in run.evidence.hang_report.iter().skip(1) {
        lines.push(Line::from(Span::styled(l.clone(), t.dim)));
    }
    if !run.evidence.log_tail.is_empty() {
        lines.push(Line::from(Span::styled("last output:", t.label)));
        let room = (inner.height as usize).saturating_sub(lines.len()).max(1);
        let skip = run.evidence.log_tail.len().saturating_sub(room);
        for l in run.evidence.log_tail.iter().skip(skip) {
            lines.push(Line::from(Span::styled(l.clone(), t.log)));
        }
    }
    lines.push(Line::from(Span::styled(
        "no figures are shown for a run that did not complete; r reruns it",
        t.dim,
    )));
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .render(inner, buf);
}
