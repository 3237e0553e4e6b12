//! The details of one run (Enter; Esc closes): everything ddptop keeps about it — the spec, the
//! launch's command line and environment, versions, per-rank figures, transport, the watchdog's
//! evidence and where its files are.

use super::Ctx;
use super::fmt;
use super::theme::{Theme, status_glyph};
use crate::app::{RunView, summary};
use crate::util::median;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Clear, Paragraph, Widget, Wrap};

/// The lines of the details of `run` (pure; tested without a screen).
pub fn lines(ctx: &Ctx, run: &RunView) -> Vec<Line<'static>> {
    let mut out: Vec<Line<'static>> = Vec::new();
    head(ctx, run, &mut out);
    launch(ctx, run, &mut out);
    result(ctx, run, &mut out);
    ranks(ctx, run, &mut out);
    checks(ctx, run, &mut out);
    files(ctx, run, &mut out);
    out
}

/// One `key  value` line of the details.
fn kv_line(t: &Theme, k: &str, v: String) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{k:<10} "), t.label),
        Span::styled(v, t.text),
    ])
}

/// The spec line: what was launched (or, attached, what was seen of the script).
fn what(ctx: &Ctx, run: &RunView) -> String {
    let s = ctx.state;
    let spec = &run.spec;
    let mut what = match spec.attach() {
        // An attached script's settings are its own: only what was seen of them.
        Some(a) => {
            let set = run.settings();
            let q = |v: Option<String>| v.unwrap_or_else(|| "unknown".into());
            format!(
                "attach {} k={} · {} · batch {}/rank seen · {} epochs seen · model, samples and data unknown",
                a.label(),
                spec.k,
                fmt::backend(spec),
                q(set.per_rank_batch.map(|b| b.to_string())),
                q(set.epochs.map(|e| e.to_string())),
            )
        }
        None => format!(
            "{}{} k={} · {} · {} · {} · {} epochs · {} samples · {} data",
            spec.experiment().as_str(),
            if spec.control { " (k=1 control)" } else { "" },
            spec.k,
            fmt::backend(spec),
            spec.model.as_str(),
            spec.batch_label(),
            spec.epochs,
            spec.samples,
            spec.data_path.as_str(),
        ),
    };
    if let Some(w) = run.launch.sweep.as_deref()
        && let Some((p, n)) = s.sweep_position(w, Some(&run.id), None)
    {
        what.push_str(&format!(" · sweep {p}/{n}"));
    }
    what
}

/// Spec, status, fault, progress, start, versions, PyTorch settings.
fn head(ctx: &Ctx, run: &RunView, out: &mut Vec<Line<'static>>) {
    let t = ctx.theme;
    let spec = &run.spec;
    let kv = |k: &str, v: String| kv_line(t, k, v);
    let what = what(ctx, run);
    out.push(kv("spec", what));
    out.push(kv(
        "status",
        match &run.reason {
            Some(r) => format!("{} — {r}", run.status.as_str()),
            None => run.status.as_str().to_string(),
        },
    ));
    if let Some(f) = &spec.inject {
        // Issue 46: a fault run is a curve of its own, never a point or baseline of the clean one.
        out.push(kv(
            "fault",
            format!("{f} injected: off the clean curves, never a k=1 baseline"),
        ));
    }
    if let Some(p) = crate::app::progress::progress(run)
        && let Some(txt) = super::runs::progress_text(&p, 60)
    {
        out.push(kv("progress", format!("step {} · {txt}", p.step)));
    }
    let took = run
        .clock
        .ended_unix
        .map(|e| format!(" · took {:.1} s", e - run.clock.started_unix))
        .unwrap_or_default();
    out.push(kv(
        "started",
        format!("{}{took}", fmt::clock(run.clock.started_unix)),
    ));
    if !run.launch.versions.is_empty() {
        let v: Vec<String> = run
            .launch
            .versions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push(kv("versions", v.join(" · ")));
    }
    if let Some(t) = run.torch_label() {
        out.push(kv("pytorch", t));
    }
}

/// The launch: command line, environment (and why ddptop set each variable of an attached job), transport.
fn launch(ctx: &Ctx, run: &RunView, out: &mut Vec<Line<'static>>) {
    let t = ctx.theme;
    let spec = &run.spec;
    let kv = |k: &str, v: String| kv_line(t, k, v);
    out.push(kv(
        "command",
        run.launch
            .command
            .clone()
            .unwrap_or_else(|| "(not in this session: see command.txt below)".into()),
    ));
    let env: Vec<String> = if run.launch.env.is_empty() {
        spec.nccl
            .launch_env()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v}"),
                None => format!("unset {k}"),
            })
            .collect()
    } else {
        run.launch
            .env
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v}"),
                None => format!("unset {k}"),
            })
            .collect()
    };
    out.push(kv("env", env.join("  ")));
    if spec.kind().runs_user_script() {
        // The user's job: say why ddptop added each variable to its environment.
        for (k, _) in run.launch.env.iter() {
            if let Some(why) = crate::app::run_files::why_set(k) {
                out.push(kv("  adds", format!("{k}: {why}")));
            }
        }
    }
    out.push(kv(
        "transport",
        run.transport()
            .map_or_else(|| "not reported".into(), str::to_string),
    ));
}

/// The result line, its caveats, what an attached run measured.
fn result(ctx: &Ctx, run: &RunView, out: &mut Vec<Line<'static>>) {
    let t = ctx.theme;
    let s = ctx.state;
    let spec = &run.spec;
    let kv = |k: &str, v: String| kv_line(t, k, v);
    if let Some(agg) = &run.figures.aggregate {
        let mut v = format!(
            "{} samples/s (ranks {}..{})",
            fmt::rate(agg.samples_per_s),
            fmt::rate(agg.rank_min),
            fmt::rate(agg.rank_max)
        );
        if run.status.shows_results()
            && let Some(sc) = summary::scaling(run, &s.runs)
        {
            v.push_str(&format!(
                " · {:.2}× {:.0}% vs {}",
                sc.speedup,
                sc.efficiency * 100.0,
                sc.baseline
            ));
            if let Some(why) = summary::scaling_caveat(&sc, &s.runs) {
                out.push(kv("result", v.clone()));
                v = format!("⚠ {why}");
            }
        }
        out.push(kv("result", v));
    }
    for c in &run.evidence.caveats {
        out.push(Line::from(vec![
            Span::styled(format!("{:<10} ", "caveat"), t.label),
            Span::styled(format!("⚠ {}", c.text), t.warn),
        ]));
    }
    if spec.attach().is_some() && run.status.is_final() {
        out.push(kv("measured", summary::attach_note(run)));
    }
    // Live too: the source switches while the run goes on (issue 45).
    if let Some(w) = crate::app::comm_source::words(run) {
        out.push(kv("communication", w));
    }
}

/// Per-rank table, per-phase figures, exit codes.
fn ranks(ctx: &Ctx, run: &RunView, out: &mut Vec<Line<'static>>) {
    let t = ctx.theme;
    let kv = |k: &str, v: String| kv_line(t, k, v);
    out.push(Line::from(Span::styled(
        "rank  pid      device    step    step ms  samples/s  state",
        t.label,
    )));
    for r in run.ranks.values() {
        let ms: Vec<f64> = r.recent_step_ms.iter().copied().collect();
        let state = match (&r.error, r.phase) {
            (Some(e), _) => e.clone(),
            // A rank whose last phase was "done" is finished when its run is (a hung rank keeps
            // the phase it hung in).
            (None, Some(crate::protocol::Phase::Done)) if run.status.is_final() => {
                run.status.as_str().to_string()
            }
            (None, Some(p)) => crate::app::progress::phase_label(p).to_string(),
            (None, None) if r.said_bye => "bye".into(),
            _ => "—".into(),
        };
        out.push(Line::from(Span::styled(
            format!(
                "r{:<4} {:<8} {:<9} {:<7} {:>7}  {:>9}  {}",
                r.rank,
                r.pid.map_or("—".into(), |p| p.to_string()),
                r.device.clone().unwrap_or_else(|| "—".into()),
                r.step,
                median(&ms).map_or("—".into(), |m| format!("{m:.1}")),
                r.result_sps.map_or("—".into(), fmt::rate),
                state
            ),
            t.text,
        )));
    }
    if let Some(m) = super::phases::model_of(run) {
        out.extend(super::phases::lines(t, &m));
    }
    for (who, code) in &run.launch.exit_codes {
        out.push(kv("exit", format!("{who}: {code}")));
    }
}

/// The equality verdict, its checks, diagnoses, hang evidence, failed ranks' last lines.
fn checks(ctx: &Ctx, run: &RunView, out: &mut Vec<Line<'static>>) {
    let t = ctx.theme;
    let kv = |k: &str, v: String| kv_line(t, k, v);
    if let Some(e) = crate::app::equality::equality(&run.figures.checks) {
        out.push(kv(
            "equality",
            format!(
                "k=1 vs k={} {}: {}; {}",
                run.spec.k,
                e.verdict.as_str(),
                e.detail(),
                e.rule.as_deref().unwrap_or("tolerance not stated")
            ),
        ));
    }
    for c in &run.figures.checks {
        out.push(kv(
            "check",
            format!(
                "{} {} (|{} − {}| = {:.3e}, tol {:.1e})",
                c.name,
                if c.ok { "ok" } else { "FAILED" },
                c.a,
                c.b,
                c.diff,
                c.tol
            ),
        ));
    }
    for d in &run.evidence.diagnoses {
        out.push(kv("diagnosis", d.line()));
        for e in &d.evidence {
            out.push(kv("  seen", e.clone()));
        }
    }
    for l in &run.evidence.hang_report {
        out.push(kv("evidence", l.clone()));
    }
    for t in &run.evidence.rank_tails {
        out.push(kv(
            "rank exit",
            format!("rank {} {}", t.rank, t.exit_words()),
        ));
        for l in &t.lines {
            out.push(kv("  said", format!("[rank {}] {l}", t.rank)));
        }
    }
}

/// Where the run's files are, and its collectives.
fn files(ctx: &Ctx, run: &RunView, out: &mut Vec<Line<'static>>) {
    let t = ctx.theme;
    let s = ctx.state;
    let kv = |k: &str, v: String| kv_line(t, k, v);
    match s
        .data_dir
        .as_ref()
        .map(|d| crate::app::run_files::RunFiles::of(d, &run.id))
    {
        Some(f) => {
            out.push(kv("output", f.output.display().to_string()));
            out.push(kv("command", f.command.display().to_string()));
            out.push(kv(
                "steps",
                format!("{} ({})", f.steps.display(), f.steps_what),
            ));
            out.push(kv(
                "dumps",
                format!(
                    "{} (flight-recorder fr_rank*, written when a run hangs)",
                    f.dir.display()
                ),
            ));
        }
        None => out.push(kv("files", "DATA_DIR/runs/ID/output.log".into())),
    }
    if let Some(m) = super::collectives::model_of(run) {
        out.extend(super::collectives::lines(t, &m));
    }
}

/// The details over the screen (all but the hint bar).
pub fn render(ctx: &Ctx, run: &RunView, area: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    Clear.render(area, buf);
    buf.set_style(area, t.base);
    let closer = ctx
        .keys
        .first_key(crate::app::Action::Close)
        .map_or("Enter".to_string(), |k| k.to_string());
    let b = Block::default()
        .borders(Borders::ALL)
        .border_type(BorderType::Double)
        .border_style(t.border_focus)
        .title(Line::from(vec![
            Span::styled(" Run ", t.title_focus),
            Span::styled(format!("{} ", run.id), t.title_focus),
            Span::styled(
                format!(" {} {} ", status_glyph(run.status), run.status.as_str()),
                t.status(run.status),
            ),
        ]))
        .title_bottom(Line::from(Span::styled(
            format!(" {closer} closes · ↑/↓ other runs "),
            t.dim,
        )));
    let inner = b.inner(area);
    b.render(area, buf);
    Paragraph::new(lines(ctx, run))
        .wrap(Wrap { trim: false })
        .render(inner, buf);
}
