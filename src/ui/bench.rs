//! The Bench pane: all-reduce bus bandwidth (and algorithm bandwidth when there is room) by
//! message size for each env setting that was run, with the transport NCCL chose and the ratio
//! of the last setting to the first.

use super::fmt;
use super::layout::PaneId;
use super::model;
use super::{Ctx, empty_note, frame_block, put_line};
use crate::app::Action;
use crate::run::{HostBackend, NcclVar};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use std::collections::BTreeSet;

/// At most this many settings side by side: the first (defaults) and the latest ones.
const MAX_SETTINGS: usize = 3;

/// What to press for a first bench, with the keys as bound. The NCCL toggle to compare against
/// is offered only where the launches use NCCL: on gloo `n` is refused, so suggesting it
/// would send the user into an error.
fn empty_hint(ctx: &Ctx) -> String {
    let key = |a: Action| ctx.keys.first_key(a).map(|k| k.to_string());
    let Some(b) = key(Action::Bench) else {
        return "no all-reduce bench yet".into();
    };
    let mut s = format!("no all-reduce bench yet: {b} sweeps message sizes");
    if ctx.state.host.backend != HostBackend::Gloo
        && let Some(n) = key(Action::Toggle(NcclVar::ShmUseCudaMemcpy))
    {
        s.push_str(&format!(
            "; {n} toggles NCCL_SHM_USE_CUDA_MEMCPY, then {b} again to compare"
        ));
    }
    s
}

pub fn render(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let mut settings = model::bench_settings(ctx.state);
    if settings.len() > MAX_SETTINGS {
        let first = settings.remove(0);
        let keep = settings.split_off(settings.len() - (MAX_SETTINGS - 1));
        settings = std::iter::once(first).chain(keep).collect();
    }
    let title = title(ctx, &settings);
    let inner = frame_block(ctx, PaneId::Bench, title, area, buf);
    if inner.height == 0 {
        return;
    }
    if settings.is_empty() {
        empty_note(ctx, inner, &empty_hint(ctx), buf);
        return;
    }
    let w = inner.width as usize;
    let n = settings.len();
    let size_w = 6usize;
    let ratio_w = if n >= 2 { 9 } else { 0 };
    let col_w = ((w.saturating_sub(size_w + ratio_w)) / n).max(6);
    let show_alg = col_w >= 14;
    let mut y = 0u16;
    // Header: setting labels, then transports / status.
    let mut h1 = vec![Span::styled(format!("{:<size_w$}", "size"), t.label)];
    let mut h2 = vec![Span::styled(format!("{:<size_w$}", ""), t.label)];
    for s in &settings {
        h1.push(Span::styled(
            format!("{:>col_w$}", fmt::trunc(&s.label, col_w - 1)),
            if s.run.spec.nccl.is_default() {
                t.label
            } else {
                t.badge
            },
        ));
        let (sub, st) = column_sub(ctx, s, show_alg);
        h2.push(Span::styled(
            format!("{:>col_w$}", fmt::trunc(&sub, col_w - 1)),
            st,
        ));
    }
    if ratio_w > 0 {
        h1.push(Span::styled(format!("{:>ratio_w$}", "ratio"), t.label));
        h2.push(Span::styled(format!("{:>ratio_w$}", "last/1st"), t.dim));
    }
    put_line(buf, inner, y, &Line::from(h1));
    y += 1;
    // Transports / status under the labels, when there is room for sizes as well.
    if inner.height >= 5 {
        put_line(buf, inner, y, &Line::from(h2));
        y += 1;
    }
    let sizes: BTreeSet<u64> = settings
        .iter()
        .flat_map(|s| s.rows.keys().copied())
        .collect();
    if sizes.is_empty() {
        put_line(
            buf,
            inner,
            y,
            &Line::from(Span::styled("no sizes measured yet", t.dim)),
        );
        return;
    }
    let rows = inner.height.saturating_sub(y) as usize;
    let sizes: Vec<u64> = sizes.into_iter().collect();
    // Too many sizes for the pane: keep the largest (where bandwidth matters) and say so.
    let skip = if sizes.len() > rows {
        sizes.len() - rows.saturating_sub(1)
    } else {
        0
    };
    if skip > 0 && rows > 0 {
        put_line(
            buf,
            inner,
            y,
            &Line::from(Span::styled(format!("… {skip} smaller sizes"), t.dim)),
        );
        y += 1;
    }
    for &size in &sizes[skip..] {
        let mut spans = vec![Span::styled(
            format!("{:<size_w$}", crate::util::fmt_size_pow2(size)),
            t.label,
        )];
        for s in &settings {
            let cell = match s.rows.get(&size) {
                Some((bus, alg)) if show_alg => format!("{bus:.1} / {alg:.1}"),
                Some((bus, _)) => format!("{bus:.1}"),
                None => "-".to_string(),
            };
            spans.push(Span::styled(format!("{cell:>col_w$}"), t.value));
        }
        if ratio_w > 0 {
            let (txt, st) = ratio(ctx, &settings, size);
            spans.push(Span::styled(format!("{txt:>ratio_w$}"), st));
        }
        put_line(buf, inner, y, &Line::from(spans));
        y += 1;
    }
}

/// The pane's title: every backend and device its columns are of, SIMULATED.
fn title(ctx: &Ctx, settings: &[model::BenchSetting]) -> Vec<Span<'static>> {
    let t = ctx.theme;
    let mut title = vec![Span::raw("Bench")];
    // Every backend and device its columns are of (they name theirs when several), first.
    let mut devices: Vec<String> = Vec::new();
    for d in settings
        .iter()
        .filter_map(|s| fmt::backend_device(&s.run.spec))
    {
        if !devices.contains(&d) {
            devices.push(d);
        }
    }
    if !devices.is_empty() {
        title.push(Span::styled(format!(" · {} ·", devices.join(" + ")), t.dim));
    }
    title.push(Span::styled(" all-reduce GB/s", t.dim));
    if settings.iter().any(|s| s.run.is_simulated()) {
        title.push(Span::raw(" "));
        title.push(Span::styled(" SIMULATED ", t.sim));
    }
    title
}

/// What a column says under its label, and its style: the status of a run without results, a
/// setting NCCL ignored or shared GPUs, else the transport (or what the cells hold).
fn column_sub(ctx: &Ctx, s: &model::BenchSetting, show_alg: bool) -> (String, Style) {
    let t = ctx.theme;
    let ignored: Vec<&str> = s
        .run
        .launch
        .nccl_read
        .iter()
        .filter(|(_, taken)| !**taken)
        .map(|(k, _)| k.trim_start_matches("NCCL_"))
        .collect();
    // A setting NCCL did not read makes this column the default in disguise: say so first.
    let warning = if !ignored.is_empty() {
        Some(format!("⚠ ignored {}", ignored.join(",")))
    } else {
        s.run
            .launch
            .gpus_shared
            .as_ref()
            .map(|_| "⚠ GPUs shared".to_string())
    };
    let sub = if !s.run.status.shows_results() {
        s.run.status.as_str().to_string()
    } else if let Some(w) = &warning {
        w.clone()
    } else if let Some(tr) = s.run.transport() {
        tr.to_string()
    } else if show_alg {
        "bus / alg".to_string()
    } else {
        "busbw".to_string()
    };
    let st = if warning.is_some() && s.run.status.shows_results() {
        t.warn
    } else if s.run.status.shows_results() {
        t.dim
    } else {
        t.status(s.run.status)
    };
    (sub, st)
}

/// The last setting's bus bandwidth over the first's at `size`, styled good, bad or neither.
fn ratio(ctx: &Ctx, settings: &[model::BenchSetting], size: u64) -> (String, Style) {
    let t = ctx.theme;
    let first = settings
        .first()
        .and_then(|s| s.rows.get(&size))
        .map(|r| r.0);
    let last = settings.last().and_then(|s| s.rows.get(&size)).map(|r| r.0);
    match (first, last) {
        (Some(a), Some(b)) if a > 0.0 => {
            let r = b / a;
            (
                format!("{r:.2}×"),
                if r >= 1.2 {
                    t.good
                } else if r <= 0.8 {
                    t.bad
                } else {
                    t.text
                },
            )
        }
        _ => ("-".into(), t.dim),
    }
}
