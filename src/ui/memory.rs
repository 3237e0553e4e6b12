//! The Memory pane (fsdp experiment): per rank, the bytes of parameters, gradients and optimizer
//! state the rank holds (exact shard sums), the prediction as a marker (16P/k FSDP, 8P + 8P/k
//! ZeRO-1, 16P DDP, with Adam), and the CUDA peak, for the subject run and the runs of the other
//! strategies at the same k and settings (FSDP, ZeRO-1 and DDP side by side). It takes the place of the Probe and Bench panes while an fsdp run is the subject: those
//! say nothing about it.

use super::fmt;
use super::layout::PaneId;
use super::{Ctx, empty_note, frame_block, put_line};
use crate::app::State;
use crate::protocol::{Backend, Collective, Memory};
use crate::run::{CommTotals, RunSpec, RunView, TorchStrategy};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

pub const PARAMS: char = '█';
pub const GRADS: char = '▓';
pub const OPTIM: char = '▒';
pub const PREDICTED: char = '│';

/// One bar: what one rank of one run held at its last reported phase.
#[derive(Debug, Clone, PartialEq)]
pub struct MemRow {
    pub strategy: TorchStrategy,
    pub run_id: String,
    pub rank: u32,
    pub phase: String,
    pub params: u64,
    pub grads: u64,
    pub optim: u64,
    pub predicted: Option<u64>,
    /// CUDA `max_memory_allocated` over the phase; `None` on CPU.
    pub peak: Option<u64>,
    pub reserved: Option<u64>,
}

impl MemRow {
    pub fn state(&self) -> u64 {
        self.params + self.grads + self.optim
    }
    fn of(strategy: TorchStrategy, run: &RunView, rank: u32, m: &Memory) -> MemRow {
        MemRow {
            strategy,
            run_id: run.id.clone(),
            rank,
            phase: m.phase.clone().unwrap_or_default(),
            params: m.param_bytes.unwrap_or(0),
            grads: m.grad_bytes.unwrap_or(0),
            optim: m.optim_bytes.unwrap_or(0),
            predicted: m.predicted_bytes,
            peak: m.peak_bytes,
            reserved: m.reserved_bytes,
        }
    }
}

/// Per-step means of one strategy's collectives (rank 0).
#[derive(Debug, Clone, PartialEq)]
pub struct CommLine {
    pub strategy: TorchStrategy,
    /// (op, calls, bytes, ms) per step.
    pub ops: Vec<(Collective, f64, f64, f64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemoryModel {
    pub k: u32,
    pub optimizer: &'static str,
    /// Subject rows and comparison rows, interleaved by rank (subject first).
    pub rows: Vec<MemRow>,
    /// The comparison runs (the other strategies) that reported memory, in `TorchStrategy::ALL`
    /// order.
    pub others: Vec<String>,
    /// How to get the comparisons that are missing.
    pub other_hint: Option<String>,
    /// gloo (CPU): no allocator counter, and reduce-scatters run as all-reduces.
    pub cpu: bool,
    pub comm: Vec<CommLine>,
}

/// The run of `strategy` at the same k whose settings otherwise match (the curve keys of both
/// with the strategy set aside), the most recent one that reported memory. A `zero1` run and
/// an fsdp run with `--strategy zero1` are the same side.
pub fn counterpart<'a>(
    state: &'a State,
    run: &RunView,
    strategy: TorchStrategy,
) -> Option<&'a RunView> {
    let settings = |r: &RunView| {
        RunSpec {
            family: r.spec.family.with_strategy(TorchStrategy::Fsdp),
            ..r.spec.clone()
        }
        .curve_key()
    };
    let want = settings(run);
    state
        .runs
        .iter()
        .filter(|r| {
            r.spec.kind().has_memory_pane()
                && r.spec.k == run.spec.k
                && r.spec.family.strategy() == Some(strategy)
                && settings(r) == want
                && r.status.shows_results()
                && r.ranks.values().any(|rv| rv.last_memory_phase().is_some())
        })
        .max_by(|a, b| a.clock.started_unix.total_cmp(&b.clock.started_unix))
}

/// The other strategies than `run`'s, each with its counterpart run if there is one.
fn counterparts<'a>(state: &'a State, run: &RunView) -> Vec<(TorchStrategy, Option<&'a RunView>)> {
    let own = run.spec.family.strategy().unwrap_or_default();
    TorchStrategy::ALL
        .into_iter()
        .filter(|s| *s != own)
        .map(|s| (s, counterpart(state, run, s)))
        .collect()
}

fn comm_line(run: &RunView) -> Option<CommLine> {
    let totals: &CommTotals = &run.ranks.values().next()?.comm_totals;
    let ops: Vec<_> = [
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllReduce,
    ]
    .into_iter()
    .filter_map(|op| totals.per_step(op).map(|(n, b, ms)| (op, n, b, ms)))
    .collect();
    (!ops.is_empty()).then_some(CommLine {
        strategy: run.spec.family.strategy().unwrap_or_default(),
        ops,
    })
}

/// What the Memory pane shows for `run` (an fsdp run), with its counterparts from `state`.
pub fn model(state: &State, run: &RunView) -> MemoryModel {
    let others = counterparts(state, run);
    let found: Vec<&RunView> = others.iter().filter_map(|(_, o)| *o).collect();
    let mut rows = Vec::new();
    for (rank, rv) in &run.ranks {
        if let Some(m) = rv.last_memory_phase() {
            rows.push(MemRow::of(
                run.spec.family.strategy().unwrap_or_default(),
                run,
                *rank,
                m,
            ));
        }
        for o in &found {
            if let Some(m) = o.ranks.get(rank).and_then(|x| x.last_memory_phase()) {
                rows.push(MemRow::of(
                    o.spec.family.strategy().unwrap_or_default(),
                    o,
                    *rank,
                    m,
                ));
            }
        }
    }
    let missing: Vec<&str> = others
        .iter()
        .filter(|(_, o)| o.is_none())
        .map(|(s, _)| s.as_str())
        .collect();
    let other_hint = (!missing.is_empty()).then(|| {
        let k = run.spec.k;
        let cmds: Vec<String> = missing
            .iter()
            .map(|s| format!("ddptop run fsdp --k {k} --strategy {s}"))
            .collect();
        format!(
            "no {} run at k={k} with these settings to compare: {}",
            missing.join(" or "),
            cmds.join("; ")
        )
    });
    let comm = std::iter::once(run)
        .chain(found.iter().copied())
        .filter_map(comm_line)
        .collect();
    MemoryModel {
        k: run.spec.k,
        optimizer: run.spec.family.optimizer().as_str(),
        rows,
        others: found.iter().map(|o| o.id.clone()).collect(),
        other_hint,
        cpu: run.spec.backend != Backend::Nccl,
        comm,
    }
}

/// While an fsdp run is the subject, the Memory pane takes the Probe and Bench panes' place
/// (their union: they are always adjacent).
pub fn swap_in(ctx: &Ctx, panes: &[(PaneId, Rect)]) -> Vec<(PaneId, Rect)> {
    let fsdp = ctx
        .view
        .subject(ctx.state)
        .is_some_and(|r| r.spec.kind().has_memory_pane());
    if !fsdp {
        return panes.to_vec();
    }
    let mut out = Vec::with_capacity(panes.len());
    let mut mem: Option<Rect> = None;
    for (id, r) in panes {
        if matches!(id, PaneId::Probe | PaneId::Bench) {
            mem = Some(mem.map_or(*r, |m| m.union(*r)));
        } else {
            out.push((*id, *r));
        }
    }
    if let Some(r) = mem {
        out.push((PaneId::Memory, r));
    }
    out
}

pub fn render(ctx: &Ctx, area: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let run = ctx
        .view
        .subject(ctx.state)
        .filter(|r| r.spec.kind().has_memory_pane());
    let mut title = vec![Span::raw("Memory")];
    if let Some(r) = run {
        title.push(Span::styled(
            format!(
                " {} {} k={} {}",
                fmt::tiny_id(&r.id),
                r.spec.family.strategy().unwrap_or_default().as_str(),
                r.spec.k,
                r.spec.family.optimizer().as_str()
            ),
            t.dim,
        ));
    }
    let inner = frame_block(ctx, PaneId::Memory, title, area, buf);
    if inner.height == 0 {
        return;
    }
    let Some(run) = run else {
        empty_note(ctx, inner, "memory per rank is reported by fsdp runs", buf);
        return;
    };
    let m = model(ctx.state, run);
    draw(ctx, &m, inner, buf);
}

fn draw(ctx: &Ctx, m: &MemoryModel, r: Rect, buf: &mut Buffer) {
    let t = ctx.theme;
    let w = r.width as usize;
    let mut y = 0u16;
    put_line(
        buf,
        r,
        y,
        &Line::from(vec![
            Span::styled(PARAMS.to_string(), t.compute),
            Span::styled("params ", t.label),
            Span::styled(GRADS.to_string(), t.comm),
            Span::styled("grads ", t.label),
            Span::styled(OPTIM.to_string(), t.optimizer),
            Span::styled("optim ", t.label),
            Span::styled(PREDICTED.to_string(), t.model),
            Span::styled("predicted", t.label),
            Span::styled(if m.cpu { "" } else { "  peak:" }, t.dim),
            Span::styled(if m.cpu { "" } else { " CUDA max" }, t.measured),
        ]),
    );
    y += 1;
    if m.rows.is_empty() {
        put_line(
            buf,
            r,
            y,
            &Line::from(Span::styled("waiting for the first memory report", t.dim)),
        );
        return;
    }
    // "r0 zero1 " + bar + "  89.4 MB/108.3 MB" + "  5.7 GB"
    let label_w = 9usize;
    let right_w = if m.cpu { 18 } else { 27 };
    let bar_w = w.saturating_sub(label_w + right_w).max(4);
    let scale = m
        .rows
        .iter()
        .map(|x| x.state().max(x.predicted.unwrap_or(0)))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    // Footer lines wanted below the bars: the comparison hint or CPU note, then comm lines.
    let footer = usize::from(m.other_hint.is_some()) + usize::from(m.cpu) + m.comm.len();
    let room = (r.height.saturating_sub(y) as usize).saturating_sub(footer.min(2));
    for row in m.rows.iter().take(room.max(1)) {
        put_line(buf, r, y, &row_line(ctx, m.cpu, row, bar_w, scale));
        y += 1;
    }
    if m.cpu {
        put_line(
            buf,
            r,
            y,
            &Line::from(Span::styled(
                fmt::trunc(
                    "peak unavailable on CPU: no allocator counter (RSS cannot tell DDP from FSDP)",
                    w,
                ),
                t.dim,
            )),
        );
        y += 1;
    }
    if let Some(h) = &m.other_hint {
        put_line(
            buf,
            r,
            y,
            &Line::from(Span::styled(fmt::trunc(h, w), t.dim)),
        );
        y += 1;
    }
    for c in &m.comm {
        let mut spans = vec![Span::styled(
            format!("{}/step", c.strategy.as_str()),
            t.label,
        )];
        for (op, n, bytes, ms) in &c.ops {
            let name = match op {
                Collective::AllGather => "AG",
                Collective::ReduceScatter if m.cpu => "RS(=AR on gloo)",
                Collective::ReduceScatter => "RS",
                Collective::AllReduce => "AR",
                Collective::Broadcast => "BC",
            };
            spans.push(Span::styled(format!(" {name} "), t.label));
            spans.push(Span::styled(
                format!(
                    "{n:.0}×{} {}",
                    crate::util::fmt_bytes(*bytes as u64),
                    fmt::ms(*ms)
                ),
                t.value,
            ));
        }
        put_line(buf, r, y, &Line::from(spans));
        y += 1;
    }
}

/// One rank's bar: params, grads and optimizer state to scale with the predicted mark, then
/// the measured state against the prediction and (on a GPU) the allocator's peak.
fn row_line(ctx: &Ctx, cpu: bool, row: &MemRow, bar_w: usize, scale: f64) -> Line<'static> {
    let t = ctx.theme;
    let cells = |b: u64| -> usize { ((b as f64 / scale) * bar_w as f64).round() as usize };
    let mut spans = vec![Span::styled(
        format!("r{:<2}{:<6}", row.rank, row.strategy.as_str()),
        t.label,
    )];
    let (p, g) = (cells(row.params), cells(row.params + row.grads));
    let o = cells(row.state());
    let mark = row.predicted.map(cells);
    let mut bar = String::new();
    let mut styles = Vec::new();
    for i in 0..bar_w {
        let (ch, st) = if Some(i) == mark.map(|x| x.min(bar_w - 1)) {
            (PREDICTED, t.model)
        } else if i < p {
            (PARAMS, t.compute)
        } else if i < g {
            (GRADS, t.comm)
        } else if i < o {
            (OPTIM, t.optimizer)
        } else {
            (' ', t.dim)
        };
        bar.push(ch);
        styles.push(st);
    }
    // One span per run of equal style keeps the line short.
    let mut start = 0;
    let chars: Vec<char> = bar.chars().collect();
    for i in 1..=chars.len() {
        if i == chars.len() || styles[i] != styles[start] {
            spans.push(Span::styled(
                chars[start..i].iter().collect::<String>(),
                styles[start],
            ));
            start = i;
        }
    }
    spans.push(Span::styled(
        format!(" {:>8}", crate::util::fmt_bytes(row.state())),
        t.value,
    ));
    spans.push(Span::styled(
        format!(
            "/{:<8}",
            row.predicted.map_or("?".into(), crate::util::fmt_bytes)
        ),
        t.model,
    ));
    if !cpu {
        spans.push(Span::styled(
            format!(" {:>8}", fmt::opt(row.peak, crate::util::fmt_bytes)),
            t.measured,
        ));
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::HostInfo;
    use crate::protocol::Strategy;
    use crate::run::Experiment;
    use std::time::Instant;

    fn fsdp_run(id: &str, strategy: TorchStrategy, k: u32, per_rank: u64) -> RunView {
        let spec = RunSpec {
            family: crate::run::Family::Fsdp {
                strategy,
                optimizer: crate::run::OptimizerName::Adam,
            },
            ..RunSpec::new(Experiment::Fsdp, k, Backend::Gloo)
        };
        let mut r = RunView::new(id.into(), spec, Instant::now(), 1.0);
        r.status = crate::run::RunStatus::Completed;
        for (rank, rv) in r.ranks.iter_mut() {
            rv.record_memory(&Memory {
                rank: *rank,
                phase: Some("epoch1".into()),
                strategy: Some(match strategy {
                    TorchStrategy::Fsdp => Strategy::Fsdp,
                    TorchStrategy::Zero1 => Strategy::Zero1,
                    TorchStrategy::Ddp => Strategy::Ddp,
                }),
                param_bytes: Some(per_rank / 4),
                grad_bytes: Some(per_rank / 4),
                optim_bytes: Some(per_rank / 2),
                predicted_bytes: Some(per_rank),
                ..Default::default()
            });
        }
        r
    }

    #[test]
    fn the_counterparts_are_the_other_strategies_at_the_same_k() {
        let mut s = State::new(HostInfo::default());
        s.runs.push(fsdp_run("a", TorchStrategy::Fsdp, 2, 100));
        s.runs.push(fsdp_run("b", TorchStrategy::Ddp, 4, 200));
        assert!(counterpart(&s, &s.runs[0], TorchStrategy::Ddp).is_none());
        s.runs.push(fsdp_run("c", TorchStrategy::Ddp, 2, 200));
        s.runs.push(fsdp_run("z", TorchStrategy::Zero1, 2, 160));
        assert_eq!(
            counterpart(&s, &s.runs[0], TorchStrategy::Ddp).map(|r| r.id.as_str()),
            Some("c")
        );
        assert_eq!(
            counterpart(&s, &s.runs[0], TorchStrategy::Zero1).map(|r| r.id.as_str()),
            Some("z")
        );
        let m = model(&s, &s.runs[0]);
        let rows: Vec<(u32, TorchStrategy, u64)> = m
            .rows
            .iter()
            .map(|r| (r.rank, r.strategy, r.state()))
            .collect();
        // Subject first, then the others in TorchStrategy::ALL order, rank by rank.
        assert_eq!(
            rows,
            [
                (0, TorchStrategy::Fsdp, 100),
                (0, TorchStrategy::Zero1, 160),
                (0, TorchStrategy::Ddp, 200),
                (1, TorchStrategy::Fsdp, 100),
                (1, TorchStrategy::Zero1, 160),
                (1, TorchStrategy::Ddp, 200)
            ]
        );
        assert_eq!(m.others, ["z", "c"]);
        assert!(m.cpu && m.other_hint.is_none());
        // k=4 has only a DDP run: both other strategies are missing, each with its command.
        let alone = model(&s, &s.runs[1]);
        let hint = alone.other_hint.unwrap();
        assert!(
            hint.contains("--k 4 --strategy fsdp") && hint.contains("--k 4 --strategy zero1"),
            "{hint}"
        );
    }

    /// `ddptop run zero1` (its own family) sits beside fsdp's FSDP and DDP runs, and is their
    /// ZeRO-1 side.
    #[test]
    fn a_zero1_run_is_the_zero1_side_of_fsdps_runs() {
        let mut s = State::new(HostInfo::default());
        s.runs.push(fsdp_run("f", TorchStrategy::Fsdp, 2, 100));
        s.runs.push(fsdp_run("d", TorchStrategy::Ddp, 2, 200));
        let mut z = fsdp_run("z", TorchStrategy::Zero1, 2, 160);
        z.spec = RunSpec {
            family: crate::run::Family::of(Experiment::Zero1),
            ..RunSpec::new(Experiment::Zero1, 2, Backend::Gloo)
        };
        s.runs.push(z);
        let m = model(&s, &s.runs[2]);
        let rows: Vec<(u32, TorchStrategy, u64)> = m
            .rows
            .iter()
            .map(|r| (r.rank, r.strategy, r.state()))
            .collect();
        assert_eq!(
            rows,
            [
                (0, TorchStrategy::Zero1, 160),
                (0, TorchStrategy::Fsdp, 100),
                (0, TorchStrategy::Ddp, 200),
                (1, TorchStrategy::Zero1, 160),
                (1, TorchStrategy::Fsdp, 100),
                (1, TorchStrategy::Ddp, 200)
            ]
        );
        assert_eq!(m.others, ["f", "d"]);
        assert_eq!(
            counterpart(&s, &s.runs[0], TorchStrategy::Zero1).map(|r| r.id.as_str()),
            Some("z"),
            "the fsdp run finds the zero1 run as its ZeRO-1 side"
        );
    }
}
