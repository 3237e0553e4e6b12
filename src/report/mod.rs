//! Shareable reports of stored runs: Markdown, HTML, JSON and CSV text, and plots (SVG, PNG).
//!
//! Everything here is a pure function of the plain structs below, which the caller fills from
//! the store. That keeps each format testable without a database, and makes every format show
//! the same figures: derived ones (ideal line, prediction error, probe net of its control, bench
//! ratios) are computed once, in this module, never re-derived per format.

pub mod block;
pub mod build;
pub mod csv;
pub mod doc;
pub mod html;
pub mod json;
pub mod markdown;
pub mod phases;
pub mod plot;
pub mod run_doc;

use crate::protocol::Backend;
use crate::run::{Experiment, RunStatus, TorchSettings};
use std::collections::BTreeMap;
use std::fmt;

/// Version of the JSON documents' layout; bumped when a field changes meaning or goes away
/// (new optional fields do not bump it).
pub const SCHEMA_VERSION: u32 = 1;

/// A Unix time in seconds, shown as RFC 3339 UTC (`2026-11-30T01:15:00Z`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Timestamp(pub f64);

/// In JSON as it is shown: RFC 3339 UTC.
impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, mo, d, h, mi, s) = crate::util::utc_parts(self.0.floor() as i64);
        write!(f, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    }
}

/// Output formats of `ddptop report` (`--format md|html|json|csv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Markdown; with -o, the plots are written beside it as SVG (or PNG) and linked.
    #[value(name = "md")]
    Markdown,
    /// One self-contained HTML page with the plots inline.
    Html,
    /// One JSON document (schema in docs/report.md).
    Json,
    /// One row per run with its figures.
    Csv,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Markdown => "md",
            Format::Html => "html",
            Format::Json => "json",
            Format::Csv => "csv",
        }
    }
}

/// A report: a scaling curve, a set of runs, or a sweep, with everything needed to share it.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub title: String,
    pub generated: Timestamp,
    pub ddptop_version: String,
    pub environment: Environment,
    pub runs: Vec<RunInfo>,
    pub curves: Vec<Curve>,
    pub timelines: Vec<Timeline>,
    pub probes: Vec<ProbeRow>,
    pub bench: Vec<BenchRow>,
}

impl Report {
    /// True when any figure in the report comes from the simulated worker.
    pub fn simulated(&self) -> bool {
        self.runs.iter().any(RunInfo::simulated)
    }

    pub fn run(&self, id: &str) -> Option<&RunInfo> {
        self.runs.iter().find(|r| r.id == id)
    }

    /// Bench rows grouped by setting, in first-seen order, each group sorted by size.
    pub fn bench_settings(&self) -> Vec<BenchSetting<'_>> {
        let mut out: Vec<BenchSetting> = Vec::new();
        for row in &self.bench {
            match out
                .iter_mut()
                .find(|s| s.setting == row.setting && s.run_id == row.run_id)
            {
                Some(s) => s.rows.push(row),
                None => out.push(BenchSetting {
                    setting: &row.setting,
                    run_id: &row.run_id,
                    k: row.k,
                    transport: row.transport.as_deref(),
                    simulated: row.simulated,
                    rows: vec![row],
                }),
            }
        }
        for s in &mut out {
            s.rows.sort_by_key(|r| r.bytes);
        }
        out
    }

    /// Busbw of every other setting against the first, at the largest size all of them measured.
    pub fn bench_ratios(&self) -> Vec<BenchRatio> {
        let settings = self.bench_settings();
        let Some(base) = settings.first() else {
            return Vec::new();
        };
        settings
            .iter()
            .skip(1)
            .filter_map(|s| {
                let bytes = s
                    .rows
                    .iter()
                    .map(|r| r.bytes)
                    .filter(|b| base.rows.iter().any(|r| r.bytes == *b))
                    .max()?;
                fn at<'a>(set: &BenchSetting<'a>, bytes: u64) -> Option<&'a BenchRow> {
                    set.rows.iter().copied().find(|r| r.bytes == bytes)
                }
                let (a, b) = (at(s, bytes)?, at(base, bytes)?);
                (b.busbw_gbs > 0.0).then(|| BenchRatio {
                    setting: s.setting.to_string(),
                    baseline: base.setting.to_string(),
                    bytes,
                    ratio: a.busbw_gbs / b.busbw_gbs,
                })
            })
            .collect()
    }

    /// The figures of one run, wherever in the report they are.
    pub fn figures(&self, run_id: &str) -> RunFigures<'_> {
        let point = self
            .curves
            .iter()
            .flat_map(|c| c.points.iter())
            .find(|p| p.run_id == run_id);
        let probe = self.probes.iter().find(|p| p.run_id == run_id);
        let net = probe.and_then(|p| Some(p.diff_ms() - self.control_for(p)?.diff_ms()));
        let busbw_peak_gbs = self
            .bench
            .iter()
            .filter(|b| b.run_id == run_id)
            .map(|b| b.busbw_gbs)
            .fold(None, |m, x| Some(m.map_or(x, |m: f64| m.max(x))));
        RunFigures {
            point,
            probe_diff_ms: probe.map(ProbeRow::diff_ms),
            probe_net_ms: net,
            busbw_peak_gbs,
        }
    }

    /// The probe's k=1 control for a k>1 probe row: the one of the same sweep when the runs say
    /// so, else the latest control in the report.
    pub fn control_for(&self, row: &ProbeRow) -> Option<&ProbeRow> {
        if row.control {
            return None;
        }
        let sweep = self.run(&row.run_id).and_then(|r| r.sweep.as_deref());
        let controls = self.probes.iter().filter(|p| p.control);
        let same_sweep = controls.clone().find(|p| {
            sweep.is_some() && self.run(&p.run_id).and_then(|r| r.sweep.as_deref()) == sweep
        });
        same_sweep.or_else(|| {
            controls.max_by(|a, b| {
                let t = |p: &ProbeRow| self.run(&p.run_id).map_or(0.0, |r| r.started.0);
                t(a).total_cmp(&t(b))
            })
        })
    }
}

/// A run's headline figures, gathered from the report's tables.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFigures<'a> {
    pub point: Option<&'a CurvePoint>,
    pub probe_diff_ms: Option<f64>,
    /// Δ of the probe minus Δ of its k=1 control.
    pub probe_net_ms: Option<f64>,
    pub busbw_peak_gbs: Option<f64>,
}

/// Where the runs ran: one machine's description and its software versions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Environment {
    pub host: String,
    pub os: String,
    pub cpus: Option<u32>,
    pub gpus: Vec<String>,
    /// torch, nccl, cuda, python … as the workers reported them.
    pub versions: BTreeMap<String, String>,
}

/// One stored run, as much as a reader needs to reproduce it: the one run document. Every
/// JSON output prints a run as this struct (`report::json::run`, which adds `simulated` and
/// `duration_s`), built by one function from a stored run (`build::run_info`); the text formats
/// read the same fields. docs/report.md lists them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunInfo {
    #[serde(rename = "run_id")]
    pub id: String,
    pub experiment: Experiment,
    pub k: u32,
    pub backend: Backend,
    pub profile: Option<String>,
    /// The run's settings; `None`: not known (an attached script's own, where ddptop did not
    /// see them: never ddptop's defaults).
    pub model: Option<String>,
    pub per_rank_batch: Option<u64>,
    pub global_batch: Option<u64>,
    pub epochs: Option<u32>,
    pub samples: Option<u64>,
    pub data_path: Option<String>,
    pub data_source: Option<String>,
    /// A probe's k=1 control run.
    pub control: bool,
    /// What makes the run's own figures less than solid (`RunView::evidence.caveats`).
    pub caveats: Vec<String>,
    /// The launch's environment toggles as one label (`defaults`, `NCCL_P2P_DISABLE=1`).
    pub settings: String,
    /// NCCL's own word on each variable it was given: `taken` or `ignored`.
    pub nccl_read: BTreeMap<String, &'static str>,
    /// The book's PyTorch settings, applied and seen, as one line for the text formats (`None`
    /// without a PyTorch model); JSON has them as `torch_settings` and `torch_seen`.
    #[serde(skip)]
    pub torch: Option<String>,
    /// What ddptop asked for: `book`, `off` or `script` (an attached script's own); `None`
    /// where the run has no PyTorch model to set (the simulator, JAX, all-reduce, tch).
    pub torch_settings: Option<TorchSettings>,
    /// What the workers reported they ran with.
    pub torch_seen: Option<run_doc::TorchSeen>,
    /// The JAX worker's `jax_default_matmul_precision` (its counterpart of `torch_seen`);
    /// left out of JSON for every other run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jax_matmul_precision: Option<String>,
    pub status: RunStatus,
    pub reason: Option<String>,
    #[serde(rename = "started_at")]
    pub started: Timestamp,
    #[serde(rename = "ended_at")]
    pub ended: Option<Timestamp>,
    pub transport: Option<String>,
    /// `--shared-gpus` beside other processes: who they were.
    pub gpus_shared: Option<String>,
    pub sweep: Option<String>,
    /// The exact command line the run was launched with.
    pub command: String,
    pub versions: BTreeMap<String, String>,
    /// Path of the run's output.log, for failed runs above all.
    pub output_log: Option<String>,
    /// Ranks named as holding the others back, in the order named (`app::straggler`).
    pub stragglers: Vec<crate::run::view::Straggler>,
    /// Per phase (data wait, compute, exposed comm, optimizer), each rank's median over the
    /// newest window with the median rank and the worst (`app::straggler::phase_scores_of`:
    /// live, else as stored at the run's end); empty below 2 ranks.
    pub phase_scores: Vec<crate::run::view::PhaseScore>,
    /// The fault injected into the run (`--inject`, as written), if any: such a run is a curve
    /// of its own, never a point or k=1 baseline of the clean one.
    pub fault: Option<String>,
    /// The watchdog's hang evidence (a stall of an attached job that went on, a hung run's
    /// verdict and dumps), in the order it came.
    pub evidence: Vec<String>,
    /// Ranks torchrun reported failed, each with its own last output lines.
    pub rank_tails: Vec<crate::run::RankTail>,
    /// Failures named with their fix (`app::diagnose`; `kind` is the stable tag).
    pub diagnoses: Vec<crate::run::Diagnosis>,
    /// NCCL's profiler plugin's collectives and what timed the buckets
    /// (`app::coll_store::collectives_json`; null without either).
    pub collectives: serde_json::Value,
    #[serde(flatten)]
    pub figures: run_doc::RunFigures,
    /// The family's own settings (`Family::settings`: fsdp `strategy`, `optimizer`; jax
    /// `sharding`; handrolled `hand`; attach `script`, `args`, `cwd`).
    #[serde(flatten)]
    pub family: serde_json::Map<String, serde_json::Value>,
    /// Per-rank sections: only where one run is shown (`run --json`, `show --json`).
    #[serde(flatten)]
    pub detail: Option<run_doc::RunDetail>,
}

/// A setting for a table: its value, or `unknown`.
pub fn known<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "unknown".to_string(), |x| x.to_string())
}

impl RunInfo {
    pub fn simulated(&self) -> bool {
        self.backend == Backend::Sim
    }

    /// `SIMULATED` for the simulated worker, else the backend as stored.
    pub fn backend_label(&self) -> String {
        if self.simulated() {
            "SIMULATED".into()
        } else {
            self.backend.to_string()
        }
    }
}

/// One scaling curve: runs with the same settings at different k.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// e.g. `weak · batch 256/rank · gloo tiny · defaults`.
    pub label: String,
    pub simulated: bool,
    pub points: Vec<CurvePoint>,
}

impl Curve {
    /// Samples/s of the k=1 baseline the speedups are measured against.
    pub fn baseline_samples_per_s(&self) -> Option<f64> {
        self.points.iter().find_map(|p| {
            let s = p.speedup?;
            (s > 0.0).then(|| p.samples_per_s / s)
        })
    }

    /// The ideal line: k times the baseline.
    pub fn ideal(&self, k: u32) -> Option<f64> {
        Some(self.baseline_samples_per_s()? * k as f64)
    }
}

/// One k of a scaling curve.
#[derive(Debug, Clone, PartialEq)]
pub struct CurvePoint {
    pub k: u32,
    pub run_id: String,
    /// Aggregate (sum over ranks) of the timed epochs.
    pub samples_per_s: f64,
    /// Slowest and fastest rank's samples/s.
    pub rank_min: f64,
    pub rank_max: f64,
    pub speedup: Option<f64>,
    pub efficiency: Option<f64>,
    /// The k=1 run the speedup is measured against.
    pub baseline_run_id: Option<String>,
    /// The cost model's prediction for this k, when one was made.
    pub predicted_samples_per_s: Option<f64>,
    /// Why speedup and efficiency cannot be read as they stand (`summary::scaling_caveat`).
    pub caveat: Option<String>,
}

impl CurvePoint {
    /// Half the slowest-to-fastest rank spread as % of the mean rank (as the dashboard shows it).
    pub fn spread_pct(&self) -> f64 {
        let mean = self.samples_per_s / self.k.max(1) as f64;
        if mean <= 0.0 {
            0.0
        } else {
            (self.rank_max - self.rank_min) / 2.0 / mean * 100.0
        }
    }

    /// The cost model's error at this point, as the dashboard and `ddptop run --json` give it
    /// (`costmodel::predict::error_pct`: positive = the model over-predicts).
    pub fn error_pct(&self) -> Option<f64> {
        crate::costmodel::predict::error_pct(self.predicted_samples_per_s?, self.samples_per_s)
    }
}

/// One bucket of one step's timeline, ms from the step's start.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketSpan {
    pub index: u32,
    pub bytes: u64,
    pub ready_ms: f64,
    pub start_ms: f64,
    pub done_ms: f64,
    /// The NCCL kernel's own duration, when measured.
    pub kernel_ms: Option<f64>,
}

impl BucketSpan {
    pub fn comm_ms(&self) -> f64 {
        (self.done_ms - self.start_ms).max(0.0)
    }

    /// The part of the all-reduce that ran after backward compute ended.
    pub fn exposed_ms(&self, bwd_compute_ms: f64) -> f64 {
        (self.done_ms - self.start_ms.max(bwd_compute_ms)).max(0.0)
    }
}

/// One rank's bucket timeline of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub run_id: String,
    pub k: u32,
    pub rank: u32,
    pub step: u64,
    pub simulated: bool,
    pub bwd_compute_ms: f64,
    pub exposed_ms: f64,
    pub overlap_pct: Option<f64>,
    pub optimizer_ms: Option<f64>,
    /// Start times inferred as max(ready, previous done) rather than measured.
    pub start_inferred: bool,
    pub buckets: Vec<BucketSpan>,
    pub predicted_exposed_ms: Option<f64>,
}

impl Timeline {
    pub fn total_bytes(&self) -> u64 {
        self.buckets.iter().map(|b| b.bytes).sum()
    }

    pub fn comm_ms(&self) -> f64 {
        self.buckets.iter().map(BucketSpan::comm_ms).sum()
    }

    /// Where the plotted step ends: the later of backward, the last all-reduce and the optimizer.
    pub fn end_ms(&self) -> f64 {
        let comm_end = self.buckets.iter().map(|b| b.done_ms).fold(0.0, f64::max);
        self.bwd_compute_ms.max(comm_end) + self.optimizer_ms.unwrap_or(0.0)
    }
}

/// A median with the range it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// The no_sync probe of one run: medians of block medians, synced and under no_sync().
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRow {
    pub run_id: String,
    pub k: u32,
    /// The k=1 control (the reducer's cost without any communication).
    pub control: bool,
    pub simulated: bool,
    pub synced_ms: Spread,
    pub no_sync_ms: Spread,
    pub blocks: usize,
    /// The cost model's Σ 2(k−1)/k·bytes/busbw(bytes), when bandwidth was measured.
    pub predicted_comm_ms: Option<f64>,
}

impl ProbeRow {
    /// synced − no_sync: exposed communication plus the reducer's own cost.
    pub fn diff_ms(&self) -> f64 {
        self.synced_ms.median - self.no_sync_ms.median
    }
}

/// One size of an all-reduce sweep under one setting.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    pub run_id: String,
    pub k: u32,
    pub setting: String,
    pub transport: Option<String>,
    pub simulated: bool,
    pub bytes: u64,
    pub time_us: f64,
    pub algbw_gbs: f64,
    pub busbw_gbs: f64,
}

/// The rows of one setting's sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchSetting<'a> {
    pub setting: &'a str,
    pub run_id: &'a str,
    pub k: u32,
    pub transport: Option<&'a str>,
    pub simulated: bool,
    pub rows: Vec<&'a BenchRow>,
}

impl BenchSetting<'_> {
    /// `defaults via P2P/CUMEM`: the setting and the transport NCCL chose with it.
    pub fn label(&self) -> String {
        match self.transport {
            Some(t) => format!("{} via {t}", self.setting),
            None => self.setting.to_string(),
        }
    }

    pub fn peak_busbw(&self) -> Option<f64> {
        self.rows
            .iter()
            .map(|r| r.busbw_gbs)
            .fold(None, |m, x| Some(m.map_or(x, |m: f64| m.max(x))))
    }
}

/// Busbw of one setting over the first setting's, at one size.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRatio {
    pub setting: String,
    pub baseline: String,
    pub bytes: u64,
    pub ratio: f64,
}

/// Render the report's text in `format`; `images` are plot files written beside a Markdown
/// report (HTML embeds its plots; JSON and CSV carry none).
pub fn render(report: &Report, format: Format, images: &[markdown::Image]) -> String {
    match format {
        Format::Markdown => markdown::render(report, images),
        Format::Html => html::render(report),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&json::document(report))
                .unwrap_or_else(|_| "{}".into());
            s.push('\n');
            s
        }
        Format::Csv => csv::render(report),
    }
}

/// Numbers as reports print them: samples/s without false precision.
pub(crate) fn fmt_rate(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

pub(crate) fn fmt_ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

pub(crate) fn fmt_signed_pct(x: f64) -> String {
    // U+2212 would be prettier but breaks spreadsheet pastes of the Markdown table.
    format!("{x:+.1}%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_utc() {
        assert_eq!(
            Timestamp(1_796_001_300.7).to_string(),
            "2026-11-30T01:15:00Z"
        );
        assert_eq!(Timestamp(0.0).to_string(), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn error_and_spread() {
        let p = CurvePoint {
            k: 2,
            run_id: "r".into(),
            samples_per_s: 180.0,
            rank_min: 88.0,
            rank_max: 92.0,
            speedup: Some(1.8),
            efficiency: Some(0.9),
            baseline_run_id: Some("b".into()),
            predicted_samples_per_s: Some(200.0),
            caveat: None,
        };
        // predicted 200 against measured 180: the model over-predicts by 20/180.
        assert!((p.error_pct().unwrap() - 20.0 / 180.0 * 100.0).abs() < 1e-9);
        assert!((p.spread_pct() - 2.0 / 90.0 * 100.0).abs() < 1e-9);
        let c = Curve {
            label: "x".into(),
            simulated: false,
            points: vec![p],
        };
        assert!((c.ideal(4).unwrap() - 400.0).abs() < 1e-9);
    }
}
