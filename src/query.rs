//! The commands that read the store: `ddptop report`, `show`, `runs`, `diff`, and the shell
//! completions and man page (their arguments are `cli`'s). Each returns its exit code; bad input (an unknown run, a bad
//! `--since`) is a [`BadInput`] error, which `main` turns into exit 2.

use crate::cli::{
    Cli, CompletionsArgs, DiffArgs, GlobalArgs, ImageArg, ManArgs, ReportArgs, RunsArgs, ShowArgs,
};
use crate::report::build::{self, Source};
use crate::report::doc::PlotSlot;
use crate::report::markdown::Image;
use crate::report::plot::Plot;
use crate::report::{Format, Report, Timestamp, json};
use crate::run::{RunStatus, RunView};
use crate::store::{LaunchRecord, Store};
use crate::util::BadInput;
use clap::CommandFactory;
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Stored runs read per command: far more than a person compares, few enough to load at once.
const HISTORY: usize = 5000;

/// The store's runs, newest first, with their launch records.
struct Loaded {
    runs: Vec<RunView>,
    records: HashMap<String, LaunchRecord>,
}

fn load(g: &GlobalArgs) -> anyhow::Result<Loaded> {
    let path = crate::paths::data_dir(g.data_dir.as_deref()).join("runs.db");
    if !path.exists() {
        // Opening would create an empty database; say where runs would be instead.
        return Ok(Loaded {
            runs: Vec::new(),
            records: HashMap::new(),
        });
    }
    load_store(&Store::open(&path)?)
}

fn load_store(store: &Store) -> anyhow::Result<Loaded> {
    let runs = store.load_runs(HISTORY)?;
    let mut records = HashMap::new();
    for r in &runs {
        if let Some(rec) = store.launch_record(&r.id)? {
            records.insert(r.id.clone(), rec);
        }
    }
    Ok(Loaded { runs, records })
}

/// A run named by its id or the end of it (the dashboard shows `023011-9e4a`, `9e4a`).
pub fn resolve<'a>(runs: &'a [RunView], query: &str) -> Result<&'a RunView, BadInput> {
    if let Some(r) = runs.iter().find(|r| r.id == query) {
        return Ok(r);
    }
    let hits: Vec<&RunView> = runs.iter().filter(|r| r.id.ends_with(query)).collect();
    match hits.as_slice() {
        [one] => Ok(one),
        [] => Err(BadInput(format!(
            "no stored run matches `{query}`; `ddptop runs` lists them"
        ))),
        many => Err(BadInput(format!(
            "`{query}` matches {} runs ({}…); give more of the id",
            many.len(),
            many.iter()
                .take(3)
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn no_runs(g: &GlobalArgs) -> BadInput {
    BadInput(format!(
        "no stored runs in {}; run some first (`ddptop run weak --k 1,2`)",
        crate::paths::data_dir(g.data_dir.as_deref()).display()
    ))
}

/// The scaling curve `anchor` belongs to: the latest completed run per k with its `CurveKey`
/// (the anchor alone when none has completed), and the report's title.
fn curve<'a>(runs: &'a [RunView], anchor: &'a RunView) -> (String, Vec<&'a RunView>) {
    let key = anchor.spec.curve_key();
    // Newest first in the store: the first completed run seen per k is the latest.
    let mut sel: Vec<&RunView> = Vec::new();
    for r in runs
        .iter()
        .filter(|r| r.status == RunStatus::Completed && r.spec.curve_key() == key)
    {
        if !sel.iter().any(|s| s.spec.k == r.spec.k) {
            sel.push(r);
        }
    }
    if sel.is_empty() {
        sel.push(anchor);
    }
    sel.sort_by_key(|r| r.spec.k);
    (
        format!("ddptop scaling curve: {}", build::curve_label(anchor)),
        sel,
    )
}

/// The dashboard's report key: the HTML report of the curve of run `run_id`, written into
/// `dir` as `curve-RUN.html`; its path.
pub fn write_curve_report(store_path: &Path, dir: &Path, run_id: &str) -> anyhow::Result<PathBuf> {
    let store = Store::open(store_path)?;
    let l = load_store(&store)?;
    let anchor = l.runs.iter().find(|r| r.id == run_id).ok_or_else(|| {
        anyhow::anyhow!("run {run_id} is not stored yet: a report covers finished runs")
    })?;
    let (title, sel) = curve(&l.runs, anchor);
    let r = build_report(title, sel, &l);
    let path = dir.join(format!("curve-{run_id}.html"));
    write_report(&r, Format::Html, &path, ImageArg::Svg)?;
    Ok(path)
}

/// The runs a report covers, and its title.
fn select<'a>(a: &ReportArgs, runs: &'a [RunView]) -> Result<(String, Vec<&'a RunView>), BadInput> {
    if !a.runs.is_empty() {
        let mut sel = Vec::new();
        for q in &a.runs {
            let r = resolve(runs, q)?;
            if !sel.iter().any(|s: &&RunView| s.id == r.id) {
                sel.push(r);
            }
        }
        let title = if sel.len() == 1 {
            format!("ddptop run {}", sel[0].id)
        } else {
            format!(
                "ddptop runs {}",
                sel.iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        return Ok((title, sel));
    }
    if let Some(q) = &a.curve {
        let anchor = resolve(runs, q)?;
        return Ok(curve(runs, anchor));
    }
    let sweep: Option<String> = match &a.sweep {
        Some(q)
            if runs
                .iter()
                .any(|r| r.launch.sweep.as_deref() == Some(q.as_str())) =>
        {
            Some(q.clone())
        }
        Some(q) => Some(resolve(runs, q)?.launch.sweep.clone().ok_or_else(|| {
            BadInput(format!(
                "run `{q}` was not part of a sweep; report it by id"
            ))
        })?),
        None => runs.first().and_then(|r| r.launch.sweep.clone()),
    };
    let sel: Vec<&RunView> = match &sweep {
        Some(s) => {
            let mut v: Vec<&RunView> = runs
                .iter()
                .filter(|r| r.launch.sweep.as_ref() == Some(s))
                .collect();
            v.reverse(); // launch order
            v
        }
        None => runs.first().into_iter().collect(),
    };
    let title = match (&sweep, sel.first()) {
        (Some(s), Some(r)) => format!("ddptop sweep {s}: {}", build::curve_label(r)),
        (_, Some(r)) => format!("ddptop run {}", r.id),
        _ => "ddptop report".into(),
    };
    Ok((title, sel))
}

fn build_report(title: String, selected: Vec<&RunView>, l: &Loaded) -> Report {
    build::build(
        title,
        &Source {
            selected,
            history: &l.runs,
            records: &l.records,
        },
        crate::util::unix_now(),
    )
}

/// Write the report's plots beside `out` (`out.scaling.svg`, …) and return their links.
fn write_images(r: &Report, out: &Path, kind: ImageArg) -> anyhow::Result<Vec<Image>> {
    let ext = match kind {
        ImageArg::Svg => "svg",
        ImageArg::Png => "png",
    };
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "report".into());
    let dir = out.parent().unwrap_or(Path::new(""));
    let settings = r.bench_settings();
    let mut plots: Vec<(PlotSlot, String, Plot)> = Vec::new();
    if !r.curves.is_empty() {
        plots.push((
            PlotSlot::Scaling,
            "scaling".into(),
            Plot::Scaling(&r.curves),
        ));
    }
    if !settings.is_empty() {
        plots.push((PlotSlot::Bench, "bench".into(), Plot::Bench(&settings)));
    }
    for (i, t) in r.timelines.iter().enumerate() {
        let name = if r.timelines.len() == 1 {
            "timeline".to_string()
        } else {
            format!("timeline-{}", i + 1)
        };
        plots.push((PlotSlot::Timeline(i), name, Plot::Timeline(t)));
    }
    let mut images = Vec::new();
    for (slot, name, plot) in plots {
        let file = format!("{stem}.{name}.{ext}");
        let bytes = match kind {
            ImageArg::Svg => plot.svg()?.into_bytes(),
            ImageArg::Png => plot.png()?,
        };
        let path = dir.join(&file);
        std::fs::write(&path, bytes)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        images.push(Image {
            slot,
            alt: plot.title(),
            path: file,
        });
    }
    Ok(images)
}

/// The directory `out` goes into when it does not exist yet: `-o` creates it, and says so, so a
/// mistyped path does not quietly become a new folder.
fn missing_parent(out: &Path) -> Option<PathBuf> {
    out.parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
}

/// Write a report to `out` (with a Markdown report's plots beside it); the paths written.
pub fn write_report(
    r: &Report,
    format: Format,
    out: &Path,
    images: ImageArg,
) -> anyhow::Result<Vec<PathBuf>> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    let imgs = if format == Format::Markdown {
        write_images(r, out, images)?
    } else {
        Vec::new()
    };
    let text = crate::report::render(r, format, &imgs);
    std::fs::write(out, text)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
    let dir = out.parent().unwrap_or(Path::new(""));
    Ok(std::iter::once(out.to_path_buf())
        .chain(imgs.iter().map(|i| dir.join(&i.path)))
        .collect())
}

pub fn report(g: &GlobalArgs, a: &ReportArgs) -> anyhow::Result<i32> {
    let l = load(g)?;
    if l.runs.is_empty() {
        return Err(no_runs(g).into());
    }
    let (title, selected) = select(a, &l.runs)?;
    let r = build_report(title, selected, &l);
    let format = a.format;
    match &a.output {
        Some(out) => {
            let missing = missing_parent(out);
            let written = write_report(&r, format, out, a.images)?;
            if let Some(dir) = missing {
                eprintln!(
                    "ddptop: created the directory {} for the report (it did not exist)",
                    dir.display()
                );
            }
            let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
            eprintln!("ddptop: wrote {}", names.join(", "));
        }
        None => print!("{}", crate::report::render(&r, format, &[])),
    }
    Ok(0)
}

fn opt_f(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "—".into())
}

pub fn show(g: &GlobalArgs, a: &ShowArgs) -> anyhow::Result<i32> {
    let l = load(g)?;
    if l.runs.is_empty() {
        return Err(no_runs(g).into());
    }
    let run = resolve(&l.runs, &a.run)?;
    let r = build_report(format!("ddptop run {}", run.id), vec![run], &l);
    let rec = l.records.get(&run.id);
    let info = &r.runs[0];
    let f = r.figures(&run.id);
    let sc = build::scaling_of(
        run,
        &Source {
            selected: vec![run],
            history: &l.runs,
            records: &l.records,
        },
    );
    if a.json {
        return show_json(&r, &l, run, rec, &f);
    }
    let mut rows = run_rows(run, info);
    figure_rows(&mut rows, &r, &f, info, run, sc.as_ref(), &l.runs);
    source_rows(&mut rows, run, info, rec);
    for (k, v) in rows {
        // Reasons, devices, hosts and versions come from workers: no escape sequences.
        println!("{k:<11} {}", crate::util::printable(&v));
    }
    if info.simulated() {
        println!(
            "SIMULATED: figures come from the cost model of the profile, not from a measurement."
        );
    }
    Ok(0)
}

/// `ddptop show --json`: the run document, the figures the report derives for it and its
/// launch (environment, why each variable was set, run directory).
fn show_json(
    r: &Report,
    l: &Loaded,
    run: &RunView,
    rec: Option<&LaunchRecord>,
    f: &crate::report::RunFigures,
) -> anyhow::Result<i32> {
    let mut v = json::envelope("run", &r.ddptop_version, r.generated);
    // The run document with its per-rank sections; `figures` adds what the report derives
    // from the run's curve, probe and bench (not a property of the run alone).
    v["run"] = json::run(
        &build::run_info(run, rec, &l.runs, true),
        &Default::default(),
    );
    v["figures"] = json!({
        "predicted_samples_per_s": f.point.and_then(|p| p.predicted_samples_per_s),
        "probe_diff_ms": f.probe_diff_ms,
        "probe_net_of_control_ms": f.probe_net_ms,
        "busbw_peak_gbs": f.busbw_peak_gbs,
    });
    v["ranks"] = run
        .ranks
        .values()
        .map(|x| json!({"rank": x.rank, "pid": x.pid, "device": x.device, "samples_per_s": x.result_sps}))
        .collect();
    let full = json::document(r);
    v["timelines"] = full["timelines"].clone();
    v["probes"] = full["probes"].clone();
    v["bench"] = full["bench"].clone();
    v["environ"] = json!(rec.map(|r| &r.environ));
    v["environ_why"] = json!(rec.map(|r| {
        r.environ
            .keys()
            .filter_map(|k| crate::supervisor::launch::why_set(k).map(|w| (k.clone(), w)))
            .collect::<std::collections::BTreeMap<_, _>>()
    }));
    v["run_dir"] = json!(rec.map(|r| r.run_dir.display().to_string()));
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(0)
}

/// What the run was: its identity, status, workload and settings.
fn run_rows(run: &RunView, info: &crate::report::RunInfo) -> Vec<(&'static str, String)> {
    let mut rows: Vec<(&'static str, String)> = vec![
        ("run", info.id.clone()),
        ("status", info.status.to_string()),
    ];
    if let Some(why) = &info.reason {
        rows.push(("reason", why.clone()));
    }
    rows.extend([
        ("experiment", info.experiment.to_string()),
        ("k", info.k.to_string()),
        (
            "backend",
            match &info.profile {
                Some(p) if info.simulated() => format!("SIMULATED (profile {p})"),
                _ => info.backend.to_string(),
            },
        ),
        ("model", crate::report::known(&info.model)),
        (
            "batch",
            format!(
                "{}/rank, {} global",
                crate::report::known(&info.per_rank_batch),
                crate::report::known(&info.global_batch)
            ),
        ),
        (
            "epochs",
            match info.epochs {
                Some(e) => format!("{e} (the first is warm-up when > 1)"),
                None => "unknown".into(),
            },
        ),
        (
            "samples",
            match info.samples {
                Some(n) => format!("{n} per epoch"),
                None => "unknown".into(),
            },
        ),
        (
            "data",
            match (&info.data_path, run.settings().data_source) {
                (Some(p), Some(src)) => format!("{p} · {src}"),
                _ => "unknown".into(),
            },
        ),
        (
            "settings",
            run.spec.nccl.badges_for(run.spec.backend).join(" "),
        ),
        ("started", info.started.to_string()),
        (
            "ended",
            opt_f(info.ended.map(|t| t.0), |t| Timestamp(t).to_string()),
        ),
    ]);
    if let Some(sweep) = &info.sweep {
        rows.push(("sweep", sweep.clone()));
    }
    rows
}

/// What the run measured or is predicted to: throughput, scaling, caveats, probe, timeline.
fn figure_rows(
    rows: &mut Vec<(&'static str, String)>,
    r: &Report,
    f: &crate::report::RunFigures,
    info: &crate::report::RunInfo,
    run: &RunView,
    sc: Option<&crate::run::Scaling>,
    history: &[RunView],
) {
    if let Some(agg) = run
        .figures
        .aggregate
        .as_ref()
        .filter(|_| run.status == RunStatus::Completed)
    {
        rows.push((
            "samples/s",
            format!(
                "{} (ranks {}–{})",
                crate::report::fmt_rate(agg.samples_per_s),
                crate::report::fmt_rate(agg.rank_min),
                crate::report::fmt_rate(agg.rank_max)
            ),
        ));
    }
    if let Some(s) = sc {
        rows.push((
            "speedup",
            format!(
                "{:.2}× · efficiency {} · vs k=1 run {}",
                s.speedup,
                crate::app::summary::efficiency_words(run, s, history),
                s.baseline
            ),
        ));
        if let Some(why) = crate::app::summary::scaling_caveat_for(run, s, history) {
            rows.push(("caveat", format!("⚠ {why}")));
        }
    }
    if let Some(f) = &info.fault {
        rows.push(("fault", format!("⚠ {f} injected: off the clean curves")));
    }
    for c in &info.caveats {
        rows.push(("caveat", format!("⚠ {c}")));
    }
    if run.spec.attach().is_some() {
        rows.push(("measured", crate::app::summary::attach_note(run)));
    }
    if let Some(w) = crate::app::comm_source::words(run) {
        rows.push(("communication", w));
    }
    if let Some(p) = f.point.and_then(|p| p.predicted_samples_per_s) {
        rows.push((
            "predicted",
            format!("{} samples/s (cost model)", crate::report::fmt_rate(p)),
        ));
    }
    if let Some(p) = r.probes.iter().find(|p| p.run_id == run.id) {
        rows.push((
            "probe",
            format!(
                "synced {} ms, no_sync {} ms, Δ {} ms{}",
                crate::report::fmt_ms(p.synced_ms.median),
                crate::report::fmt_ms(p.no_sync_ms.median),
                crate::report::fmt_ms(p.diff_ms()),
                f.probe_net_ms
                    .map(|n| format!(", Δ − control {} ms", crate::report::fmt_ms(n)))
                    .unwrap_or_default()
            ),
        ));
    }
    if let Some(b) = f.busbw_peak_gbs {
        rows.push(("peak busbw", format!("{b:.2} GB/s")));
    }
    if let Some(t) = r.timelines.first() {
        rows.push((
            "timeline",
            format!(
                "rank {} step {}: {} buckets, backward {} ms, overlap {}, exposed {} ms",
                t.rank,
                t.step,
                t.buckets.len(),
                crate::report::fmt_ms(t.bwd_compute_ms),
                opt_f(t.overlap_pct, |p| format!("{p:.0}%")),
                crate::report::fmt_ms(t.exposed_ms)
            ),
        ));
    }
}

/// Where the figures come from: ranks, versions, the launch, logs, diagnoses and exits.
fn source_rows(
    rows: &mut Vec<(&'static str, String)>,
    run: &RunView,
    info: &crate::report::RunInfo,
    rec: Option<&LaunchRecord>,
) {
    if let Some(t) = &info.transport {
        rows.push(("transport", t.clone()));
    }
    for s in &run.straggler.named {
        rows.push(("straggler", s.when_and_why()));
    }
    for x in run.ranks.values() {
        rows.push((
            "rank",
            format!(
                "{}: pid {} · {} · {}",
                x.rank,
                x.pid.map_or("—".into(), |p| p.to_string()),
                x.device.as_deref().unwrap_or("—"),
                opt_f(x.result_sps, |s| format!(
                    "{} samples/s",
                    crate::report::fmt_rate(s)
                ))
            ),
        ));
    }
    for (k, v) in &info.versions {
        if k == "host" {
            rows.push(("host", v.clone()));
        } else {
            rows.push(("version", format!("{k} {v}")));
        }
    }
    if let Some(t) = &info.torch {
        rows.push(("pytorch", t.clone()));
    }
    if let Some(rec) = rec.filter(|_| run.spec.kind().runs_user_script()) {
        // The user's job: every variable ddptop added to its environment, and why.
        for (k, v) in &rec.environ {
            if let Some(why) = crate::supervisor::launch::why_set(k) {
                let v = v.as_deref().unwrap_or("(unset)");
                rows.push(("adds", format!("{k}={v} — {why}")));
            }
        }
    }
    if let Some(rec) = rec {
        rows.push(("command", rec.command.clone()));
        rows.push(("run dir", rec.run_dir.display().to_string()));
    }
    if let Some(log) = &info.output_log {
        rows.push(("output log", log.clone()));
    }
    if let Some(steps) = rec
        .map(|r| r.run_dir.join(crate::store::ARCHIVE_FILE))
        .filter(|p| p.exists())
    {
        let what = crate::store::ARCHIVE_WHAT;
        rows.push(("steps", format!("{} ({what})", steps.display())));
    }
    for d in &run.evidence.diagnoses {
        rows.push(("diagnosis", d.line()));
        for e in &d.evidence {
            rows.push(("  seen", e.clone()));
        }
    }
    for l in &run.evidence.hang_report {
        rows.push(("evidence", l.clone()));
    }
    for t in &run.evidence.rank_tails {
        rows.push(("rank exit", format!("rank {} {}", t.rank, t.exit_words())));
        for l in &t.lines {
            rows.push(("  said", format!("[rank {}] {l}", t.rank)));
        }
    }
}

pub fn runs(g: &GlobalArgs, a: &RunsArgs) -> anyhow::Result<i32> {
    let l = load(g)?;
    let selected: Vec<&RunView> = l
        .runs
        .iter()
        .filter(|r| a.experiment.is_none_or(|e| r.spec.experiment() == e))
        .filter(|r| a.backend.is_none_or(|b| r.spec.backend == b))
        .filter(|r| a.since.is_none_or(|t| r.clock.started_unix >= t))
        .take(a.limit as usize)
        .collect();
    let r = build_report("ddptop runs".into(), selected, &l);
    if a.csv {
        print!("{}", crate::report::csv::render(&r));
        return Ok(0);
    }
    if a.json {
        let mut v = json::envelope("runs", &r.ddptop_version, r.generated);
        v["runs"] = r
            .runs
            .iter()
            .map(|info| {
                let f = r.figures(&info.id);
                // The run document (figures and prediction included) and what the report
                // derives from the run's probe and bench.
                let extras = crate::report::json::RunExtras {
                    report_figures: Some(crate::report::json::ReportFigures {
                        probe_diff_ms: f.probe_diff_ms,
                        busbw_peak_gbs: f.busbw_peak_gbs,
                    }),
                    ..Default::default()
                };
                json::run(info, &extras)
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    if r.runs.is_empty() {
        println!(
            "no stored runs{}",
            if l.runs.is_empty() {
                ""
            } else {
                " match these filters"
            }
        );
        return Ok(0);
    }
    print!("{}", runs_table(&r));
    if r.simulated() {
        println!("SIM: SIMULATED runs (cost model plus noise), not measurements.");
    }
    Ok(0)
}

/// `ddptop runs`' table: one row per run, columns sized to their content.
fn runs_table(r: &Report) -> String {
    use crate::util::Align::{Left, Right};
    let header = [
        ("run", Left),
        ("experiment", Left),
        ("k", Right),
        ("backend", Left),
        ("status", Left),
        ("samples/s", Right),
        ("speedup", Right),
        ("eff", Right),
        ("Δ probe", Right),
        ("busbw GB/s", Right),
        ("settings", Left),
    ];
    let rows: Vec<Vec<String>> = r
        .runs
        .iter()
        .map(|info| {
            let f = r.figures(&info.id);
            let backend = if info.simulated() {
                "SIM"
            } else {
                info.backend.as_str()
            };
            vec![
                info.id.clone(),
                info.experiment.to_string(),
                info.k.to_string(),
                backend.to_string(),
                info.status.to_string(),
                opt_f(f.point.map(|p| p.samples_per_s), crate::report::fmt_rate),
                opt_f(f.point.and_then(|p| p.speedup), |s| format!("{s:.2}×")),
                opt_f(f.point.and_then(|p| p.efficiency), |e| {
                    format!("{:.0}%", e * 100.0)
                }),
                opt_f(f.probe_diff_ms, |d| {
                    format!("{} ms", crate::report::fmt_ms(d))
                }),
                opt_f(f.busbw_peak_gbs, |b| format!("{b:.2}")),
                info.settings.to_string(),
            ]
        })
        .collect();
    crate::util::text_table(&header, &rows)
}

pub fn diff(g: &GlobalArgs, a: &DiffArgs) -> anyhow::Result<i32> {
    let l = load(g)?;
    if l.runs.is_empty() {
        return Err(no_runs(g).into());
    }
    let ra = resolve(&l.runs, &a.run_a)?;
    let rb = resolve(&l.runs, &a.run_b)?;
    let r = build_report(format!("ddptop diff {} {}", ra.id, rb.id), vec![ra, rb], &l);
    let (ia, ib) = (&r.runs[0], &r.runs[1]);
    let (fa, fb) = (r.figures(&ia.id), r.figures(&ib.id));
    let text = diff_fields(ia, ib);
    let nums: Vec<(&str, Option<f64>, Option<f64>)> = vec![
        (
            "samples/s",
            fa.point.map(|p| p.samples_per_s),
            fb.point.map(|p| p.samples_per_s),
        ),
        (
            "speedup",
            fa.point.and_then(|p| p.speedup),
            fb.point.and_then(|p| p.speedup),
        ),
        (
            "efficiency",
            fa.point.and_then(|p| p.efficiency),
            fb.point.and_then(|p| p.efficiency),
        ),
        ("probe Δ ms", fa.probe_diff_ms, fb.probe_diff_ms),
        ("peak busbw GB/s", fa.busbw_peak_gbs, fb.busbw_peak_gbs),
    ];
    let mut keys: Vec<&String> = ia.versions.keys().chain(ib.versions.keys()).collect();
    keys.sort();
    keys.dedup();
    if a.json {
        let mut v = json::envelope("diff", &r.ddptop_version, r.generated);
        v["a"] = json::run(ia, &Default::default());
        v["b"] = json::run(ib, &Default::default());
        v["fields"] = text
            .iter()
            .map(|(k, x, y)| json!({"field": k, "a": x, "b": y, "same": x == y}))
            .collect();
        v["figures"] = nums
            .iter()
            .map(|(k, x, y)| {
                json!({"figure": k, "a": x, "b": y,
                       "b_over_a": match (x, y) { (Some(x), Some(y)) if *x != 0.0 => Some(y / x), _ => None }})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let w = ia.id.len().max(ib.id.len()).max(12);
    println!("{:<16} {:<w$} {:<w$}", "", ia.id, ib.id);
    for (k, x, y) in &text {
        let mark = if x == y { ' ' } else { '*' };
        println!("{mark}{k:<15} {x:<w$} {y:<w$}");
    }
    for (k, x, y) in &nums {
        let show = |v: &Option<f64>| opt_f(*v, |v| format!("{v:.3}"));
        let ratio = match (x, y) {
            (Some(x), Some(y)) if *x != 0.0 => format!("B/A {:.3}×", y / x),
            _ => String::new(),
        };
        println!(" {k:<15} {:<w$} {:<w$} {ratio}", show(x), show(y));
    }
    for k in keys {
        let (x, y) = (
            ia.versions.get(k).cloned().unwrap_or_default(),
            ib.versions.get(k).cloned().unwrap_or_default(),
        );
        let mark = if x == y { ' ' } else { '*' };
        println!("{mark}{:<15} {x:<w$} {y:<w$}", k);
    }
    println!("* differs");
    if r.simulated() {
        println!("SIMULATED: at least one of these runs is simulated (cost model plus noise).");
    }
    Ok(0)
}

/// The fields `ddptop diff` sets side by side as text (a `*` marks those that differ).
fn diff_fields(
    ia: &crate::report::RunInfo,
    ib: &crate::report::RunInfo,
) -> Vec<(&'static str, String, String)> {
    vec![
        (
            "experiment",
            ia.experiment.to_string(),
            ib.experiment.to_string(),
        ),
        ("k", ia.k.to_string(), ib.k.to_string()),
        ("backend", ia.backend_label(), ib.backend_label()),
        (
            "profile",
            ia.profile.clone().unwrap_or_default(),
            ib.profile.clone().unwrap_or_default(),
        ),
        (
            "model",
            crate::report::known(&ia.model),
            crate::report::known(&ib.model),
        ),
        (
            "batch/rank",
            crate::report::known(&ia.per_rank_batch),
            crate::report::known(&ib.per_rank_batch),
        ),
        (
            "epochs",
            crate::report::known(&ia.epochs),
            crate::report::known(&ib.epochs),
        ),
        (
            "samples",
            crate::report::known(&ia.samples),
            crate::report::known(&ib.samples),
        ),
        (
            "data",
            crate::report::known(&ia.data_path),
            crate::report::known(&ib.data_path),
        ),
        ("settings", ia.settings.clone(), ib.settings.clone()),
        ("status", ia.status.to_string(), ib.status.to_string()),
        (
            "transport",
            ia.transport.clone().unwrap_or_default(),
            ib.transport.clone().unwrap_or_default(),
        ),
        ("started", ia.started.to_string(), ib.started.to_string()),
    ]
}

pub fn completions(a: &CompletionsArgs) -> anyhow::Result<i32> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "ddptop", &mut out);
    write_stdout(&out)
}

/// Write to stdout; a closed pipe (`ddptop man | head`) is not an error.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<i32> {
    use std::io::Write;
    match std::io::stdout().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(0),
    }
}

pub fn man(a: &ManArgs) -> anyhow::Result<i32> {
    let cmd = Cli::command();
    match &a.out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            clap_mangen::generate_to(cmd, dir)?;
            eprintln!("ddptop: wrote man pages into {}", dir.display());
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            return write_stdout(&out);
        }
    }
    Ok(0)
}
