//! `ddptop run` and `ddptop runs`: the same engine as the dashboard, printing a table or JSON.

use crate::app::deficits;
use crate::app::summary::{self, probe_summary};
use crate::app::{Level, State};
use crate::cli::{AttachArgs, GlobalArgs, RunArgs};
use crate::detect::BackendChoice;
use crate::engine::Engine;
use crate::plan::{self, BrokenConfig};
use crate::report::build::run_info;
use crate::run::{AttachTarget, DataSource, EnvOverlay, Family, NcclVar, RunStatus, RunView};
use crate::store::LaunchRecord;
use crate::util::BadInput;
use serde_json::{Value, json};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

pub async fn run(g: &GlobalArgs, a: RunArgs) -> anyhow::Result<i32> {
    let experiment = a.experiment;
    // The config supplies python/torchrun paths, watchdog thresholds and presets. A broken file
    // is refused as the dashboard refuses it (file:line, exit 2): a run must not silently use
    // other settings than the ones the user wrote down.
    let setup = plan::setup(
        &g.globals(),
        a.backend,
        a.profile.as_deref(),
        &a.preset,
        BrokenConfig::Fail,
    )?;
    let note = setup.resolved.note.clone();
    eprintln!("ddptop: {note}");
    let mut template = setup.template_with(a.model, a.batch, a.samples, a.epochs)?;
    template.data_path = a.data_path;
    // No --strategy: FSDP and DDP at each k, as the dashboard launches them (plan::request).
    template.fsdp_pairs = a.family.strategy.is_none();
    // The experiment with its own flags (each family reads only its own, and refuses the
    // others').
    let family = experiment
        .kind()
        .family_for(&a.family)
        .map_err(anyhow::Error::msg)?;
    template.deficits = a.family.deficits;
    template.inject = a.inject;
    if a.no_book_settings {
        template.torch = crate::run::TorchSettings::Off;
    }
    environment(g, &mut template, &setup, &a.preset, &a.env, a.nvls)?;
    // A worker that is not built is bad set-up (exit 2, with the command that builds it), not a
    // failed run.
    if (experiment.kind().needs_built_binary() || a.family.deficits)
        && template.backend != crate::protocol::Backend::Sim
        && crate::supervisor::handrolled::find_binary().is_none()
    {
        return Err(BadInput(crate::supervisor::handrolled::build_hint(
            setup.resolved.python.as_ref().map(|p| p.python.as_path()),
        ))
        .into());
    }
    if let Some(dir) = &a.dataset_dir {
        template.data_source = DataSource::Real(dir.clone());
    }
    let drive = Drive {
        ks: a.k.clone(),
        json: a.json,
        sim_speed: a.sim_speed,
        sim_noise: a.sim_noise,
        hang_floor: a.hang_floor,
        startup_timeout: a.startup_timeout,
        ddp_init_timeout: a.ddp_init_timeout,
        first_steps_timeout: a.first_steps_timeout,
        stop_on_hang: true,
        teardown_timeout: a.teardown_timeout,
        nodes: a.nodes.options(&setup.config.nodes)?,
    };
    execute(g, setup, template, family, &note, drive).await
}

/// `ddptop attach [--k …] -- SCRIPT.py ARGS`: the user's own script, one launch per k.
pub async fn attach(g: &GlobalArgs, a: AttachArgs) -> anyhow::Result<i32> {
    if a.backend == BackendChoice::Sim {
        return Err(BadInput(
            "attach runs your script with real PyTorch: use --backend gloo (CPU) or nccl (GPUs)"
                .into(),
        )
        .into());
    }
    let (script, args) = a
        .command
        .split_first()
        .ok_or_else(|| BadInput("no script: ddptop attach -- train.py ARGS".into()))?;
    let cwd = std::env::current_dir()?;
    let target =
        AttachTarget::new(std::path::Path::new(script), args.to_vec(), &cwd).map_err(BadInput)?;
    let setup = plan::setup(&g.globals(), a.backend, None, &a.preset, BrokenConfig::Fail)?;
    let note = setup.resolved.note.clone();
    eprintln!("ddptop: {note}");
    let mut template = setup.template();
    template.inject = a.inject;
    environment(g, &mut template, &setup, &a.preset, &a.env, a.nvls)?;
    let ks = if a.k.is_empty() {
        // Every GPU by default (one launch of the user's job, not a sweep); two ranks on CPUs.
        match setup.resolved.backend {
            crate::protocol::Backend::Nccl => vec![setup.resolved.gpus.max(1)],
            _ => vec![2],
        }
    } else {
        a.k.clone()
    };
    let drive = Drive {
        ks,
        json: a.json,
        sim_speed: 1.0,
        sim_noise: None,
        hang_floor: a.hang_floor,
        startup_timeout: a.startup_timeout,
        ddp_init_timeout: None,
        first_steps_timeout: a.first_steps_timeout,
        stop_on_hang: a.stop_on_hang,
        teardown_timeout: None,
        nodes: a.nodes.options(&setup.config.nodes)?,
    };
    let family = Family::script(target);
    execute(g, setup, template, family, &note, drive).await
}

/// Presets, then `--env` on top, then `--nvls`.
pub(crate) fn environment(
    g: &GlobalArgs,
    template: &mut plan::Template,
    setup: &plan::Setup,
    presets: &[String],
    env: &[(String, String)],
    nvls: Option<bool>,
) -> anyhow::Result<()> {
    for name in presets {
        let p = setup
            .config
            .preset(name)
            .ok_or_else(|| plan::unknown_preset(&g.globals(), &setup.config, name))?;
        template.apply_env(p);
    }
    let env: EnvOverlay = env
        .iter()
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect();
    template.apply_env(&env);
    // `--nvls on` lets NCCL use NVLink multicast (ddptop turns it off by default).
    if let Some(nvls) = nvls
        && template.nccl.is_on(NcclVar::NvlsEnable) == nvls
    {
        template.nccl.toggle(NcclVar::NvlsEnable);
    }
    if let Some(why) = plan::nccl_on_gloo(template.backend, &template.nccl) {
        return Err(BadInput(why).into());
    }
    Ok(())
}

/// `ddptop run`'s progress on a terminal: one line on stderr, rewritten in place (`\r`), at most
/// four times a second, cleared before anything else is printed.
struct ProgressLine {
    on: bool,
    shown: bool,
    last: Option<std::time::Instant>,
    text: String,
}

impl ProgressLine {
    fn new(on: bool) -> Self {
        ProgressLine {
            on,
            shown: false,
            last: None,
            text: String::new(),
        }
    }

    fn show(&mut self, line: Option<&str>) {
        let Some(line) = line.filter(|_| self.on) else {
            return;
        };
        let now = std::time::Instant::now();
        if line == self.text
            || self
                .last
                .is_some_and(|t| now - t < Duration::from_millis(250))
        {
            return;
        }
        // Never wider than the terminal: a wrapped line can't be rewritten with \r.
        let cols = terminal_columns().unwrap_or(80).saturating_sub(1);
        let text: String = line.chars().take(cols).collect();
        eprint!("\r\x1b[K{text}");
        let _ = std::io::Write::flush(&mut std::io::stderr());
        self.text = line.to_string();
        self.last = Some(now);
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            let _ = std::io::Write::flush(&mut std::io::stderr());
            self.shown = false;
            self.text.clear();
        }
    }
}

/// stderr's terminal width.
fn terminal_columns() -> Option<usize> {
    crossterm::terminal::size().ok().map(|(w, _)| w as usize)
}

/// How the planned launches are driven and reported.
struct Drive {
    ks: Vec<u32>,
    json: bool,
    sim_speed: f64,
    sim_noise: Option<f64>,
    hang_floor: Option<f64>,
    startup_timeout: Option<f64>,
    ddp_init_timeout: Option<f64>,
    first_steps_timeout: Option<f64>,
    /// Stop an attached job the watchdog calls hung (ddptop's own runs are always stopped).
    stop_on_hang: bool,
    teardown_timeout: Option<f64>,
    /// `--nodes`: one torchrun agent per node.
    nodes: Option<crate::supervisor::nodes::NodesOptions>,
}

/// Plan the launches, run them one at a time, print the table or JSON; the exit code.
async fn execute(
    g: &GlobalArgs,
    setup: plan::Setup,
    template: plan::Template,
    family: Family,
    note: &str,
    a: Drive,
) -> anyhow::Result<i32> {
    let mut state = setup.state(crate::paths::hostname());
    if let Some(n) = &a.nodes {
        // Each node brings its own devices (as many as this one: the planner's check is per
        // node, k ≤ nodes × this machine's).
        state.max_k = state.max_k.saturating_mul(n.hosts.len() as u32);
    }
    let planned = plan_sweep(&template, family, &a.ks, state.max_k)?;
    let said = say_caveats(&planned.specs, a.nodes.is_some());
    let mut opts = setup.opts;
    drive_options(&mut opts, &a);
    opts.nodes = a.nodes;
    let mut engine = Engine::start(opts, state)?;
    let mut queue = plan::Queue::default();
    let sweep = queue.sweep_id();
    let expected = planned.specs.len();
    queue.push(planned.specs, Some(sweep.clone()));

    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    let watcher = watch_signals(flag)?;
    let mut ids = Vec::new();
    let json = a.json;
    // One line rewritten in place on a terminal; nothing when stderr is piped or with --json.
    let mut progress = ProgressLine::new(!json && std::io::stderr().is_terminal());
    let mut streamed = 0u64;
    engine
        .drive(None, |e| {
            if interrupted.load(Ordering::SeqCst) {
                return true;
            }
            if json {
                streamed = stream_verdicts(e.state(), streamed, &said);
            }
            if let Some((id, spec)) = queue.pump(e) {
                if !json {
                    progress.clear();
                    eprintln!("ddptop: k={} running as {id}", spec.k);
                }
                ids.push(id);
            }
            let line = e
                .state()
                .active_runs()
                .next()
                .and_then(crate::app::progress::line);
            progress.show(line.as_deref());
            queue.idle(e)
        })
        .await;
    progress.clear();
    watcher.abort();
    let interrupted = interrupted.load(Ordering::SeqCst);
    engine.shutdown(false).await;
    if !interrupted && ids.len() < expected {
        // A launch was refused (the engine said why); the rest of the sweep went with it.
        let why = refused_why(engine.state());
        anyhow::bail!("{why}");
    }
    let runs: Vec<&RunView> = ids.iter().filter_map(|id| engine.state().run(id)).collect();
    // Predictions read earlier runs too (the allreduce run that measured busbw, the probe's
    // control): this sweep's runs first, then the stored history.
    let context = with_history(engine.state(), g);
    let records = launch_records(engine.store_path(), &runs);
    // Where each run's launcher and ranks wrote their stdout/stderr: the first place to look
    // when a run failed.
    let runs_dir = engine
        .store_path()
        .parent()
        .map(crate::paths::runs_dir)
        .unwrap_or_default();
    let input = SweepInput {
        records: &records,
        state: engine.state(),
        context: &context,
        runs_dir: Some(&runs_dir),
    };
    let mut doc = sweep_doc(&runs, &input, note, &sweep);
    let all = &engine.state().runs;
    let hand = deficits::anchor(all, None).map(|r| deficits::table(all, &r.spec));
    if a.json {
        if let Some(d) = &hand {
            doc["deficits"] = deficits_json(d);
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", table(&runs, engine.state(), note));
        if let Some(d) = &hand {
            print!("{}", deficits::text(d));
        }
        print_failures(&runs, &runs_dir);
    }
    let ok = runs.iter().all(|r| r.status == RunStatus::Completed);
    Ok(if interrupted {
        130
    } else if ok {
        0
    } else {
        1
    })
}

/// The sweep's launches, or why not: a k that does not fit says to use a smaller --k.
fn plan_sweep(
    template: &plan::Template,
    family: Family,
    ks: &[u32],
    max_k: u32,
) -> anyhow::Result<plan::Planned> {
    let planned = plan::request(template, family, ks, max_k)
        // Only a k that does not fit is fixed by a smaller --k.
        .map_err(|e| {
            anyhow::anyhow!(
                "{e}{}",
                if e.contains(" GPUs") {
                    "; use a smaller --k"
                } else {
                    ""
                }
            )
        })?;
    if !planned.notes.is_empty() {
        anyhow::bail!("{}; use a smaller --k", planned.notes.join("; "));
    }
    Ok(planned)
}

/// Why a launch of the sweep was refused: the engine's last error, else a plain word.
fn refused_why(state: &State) -> String {
    state
        .messages
        .iter()
        .rev()
        .find(|m| m.level == Level::Error)
        .map_or_else(|| "a launch failed".to_string(), |m| m.text.clone())
}

/// The launch records (command line, run folder) the engine stored for each run.
fn launch_records(
    store_path: &std::path::Path,
    runs: &[&RunView],
) -> std::collections::HashMap<String, LaunchRecord> {
    crate::store::Store::open(store_path)
        .map(|store| {
            runs.iter()
                .filter_map(|r| Some((r.id.clone(), store.launch_record(&r.id).ok()??)))
                .collect()
        })
        .unwrap_or_default()
}

/// Before anything starts: what will make these runs' figures weak (kept with each run),
/// said on stderr; the lines said, for `--json`'s live stream.
fn say_caveats(specs: &[crate::run::RunSpec], multinode: bool) -> Vec<String> {
    let cores = if multinode {
        usize::MAX
    } else {
        crate::run::checks::cpu_cores()
    };
    // The engine logs the same caveats as each run starts; `said` keeps `--json`'s live
    // stream from saying them a second time.
    let mut said = Vec::new();
    for s in specs {
        for c in crate::run::checks::launch_caveats(s, cores) {
            eprintln!(
                "ddptop: warning: {} k={}: {}",
                s.experiment().as_str(),
                s.k,
                c.text
            );
            said.push(format!("k={}: {}", s.k, c.text));
        }
    }
    said
}

/// The engine options `ddptop run`'s flags set: simulation speed and noise, the watchdog's
/// limits, and whether a hung attached job is stopped.
fn drive_options(opts: &mut crate::engine::EngineOptions, a: &Drive) {
    opts.sim_speed = a.sim_speed;
    opts.sim_noise = a.sim_noise;
    opts.history = 0;
    if let Some(f) = a.hang_floor {
        opts.watchdog.floor_s = f;
    }
    if let Some(s) = a.startup_timeout {
        opts.watchdog.startup_s = s;
    }
    if let Some(s) = a.ddp_init_timeout {
        opts.watchdog.ddp_init_s = s;
    }
    if let Some(s) = a.teardown_timeout {
        opts.watchdog.teardown_s = s;
    }
    if let Some(s) = a.first_steps_timeout {
        opts.watchdog.first_steps_s = s;
    }
    opts.stop_attached_on_hang = a.stop_on_hang;
}

/// SIGINT, SIGTERM or SIGHUP sets `flag`: the sweep stops between runs' checks.
fn watch_signals(flag: Arc<AtomicBool>) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        tokio::select! {
            _ = sigint.recv() => {}
            _ = sigterm.recv() => {}
            _ = sighup.recv() => {}
        }
        flag.store(true, Ordering::SeqCst);
    }))
}

/// Each run that did not complete: why, its hang report, and where its output went.
fn print_failures(runs: &[&RunView], runs_dir: &std::path::Path) {
    let output_log = |id: &str| runs_dir.join(id).join("output.log");
    for r in runs {
        if r.status != RunStatus::Completed
            && let Some(why) = &r.reason
        {
            println!("  {} k={}: {}", r.status.as_str(), r.spec.k, why);
            for l in &r.evidence.hang_report {
                println!("    {l}");
            }
            println!("    output: {}", output_log(&r.id).display());
        }
    }
}

/// What the sweep's run documents are built from besides the runs themselves.
struct SweepInput<'a> {
    records: &'a std::collections::HashMap<String, LaunchRecord>,
    state: &'a State,
    context: &'a [RunView],
    /// The engine's run folders (`ddptop run`): each run's output.log is there, record or not.
    runs_dir: Option<&'a std::path::Path>,
}

/// A run of this sweep as the one run document (`report::build::run_info`, with its per-rank
/// sections), plus its output.log in the engine's folder and, for an fsdp run, the Memory
/// pane's DDP-beside-FSDP comparison: inputs of `report::json::run`, nothing patched after.
fn run_json(r: &RunView, input: &SweepInput) -> Value {
    // The run document has `phase_scores` (issue 46) and `fault` as every JSON output does.
    let info = run_info(r, input.records.get(&r.id), input.context, true);
    let extras = crate::report::json::RunExtras {
        output_log: input
            .runs_dir
            .map(|d| d.join(&r.id).join("output.log").display().to_string()),
        memory_comparison: r
            .spec
            .kind()
            .has_memory_pane()
            .then(|| memory_comparison(r, input.state)),
        ..Default::default()
    };
    crate::report::json::run(&info, &extras)
}

/// The deficits table as JSON: per k, samples/s and run id of each column (null where no run).
fn deficits_json(d: &deficits::Deficits) -> Value {
    let rows: Vec<Value> = d
        .rows
        .iter()
        .map(|row| {
            let cells: serde_json::Map<String, Value> = deficits::Column::ALL
                .iter()
                .zip(&row.cells)
                .map(|(c, cell)| {
                    let v = cell.as_ref().map_or(
                        Value::Null,
                        |x| json!({"samples_per_s": x.samples_per_s, "run_id": x.run_id}),
                    );
                    (c.label(), v)
                })
                .collect();
            json!({"k": row.k, "cells": cells})
        })
        .collect();
    json!({
        "title": d.title,
        "columns": deficits::Column::ALL.iter().map(|c| c.label()).collect::<Vec<_>>(),
        "rows": rows,
    })
}

/// The Memory pane's comparison (`ui::memory::model`): per rank, what this run and the runs of
/// the other strategies at the same k and settings held at their last phase (FSDP, ZeRO-1, DDP).
fn memory_comparison(r: &RunView, state: &State) -> Value {
    let m = crate::ui::memory::model(state, r);
    json!({
        "other_run_ids": m.others,
        "missing": m.other_hint,
        "ranks": m.rows.iter().map(|x| json!({
            "rank": x.rank, "strategy": x.strategy.as_str(), "run_id": x.run_id,
            "phase": x.phase, "param_bytes": x.params, "grad_bytes": x.grads,
            "optim_bytes": x.optim, "state_bytes": x.state(),
            "predicted_bytes": x.predicted, "peak_bytes": x.peak,
        })).collect::<Vec<_>>(),
    })
}

/// One note for the table: rank 0's state at its last phase against the prediction, its peak,
/// and its collectives per step.
fn fsdp_note(r: &RunView) -> Option<String> {
    let x = r.ranks.values().next()?;
    let m = x.last_memory_phase()?;
    let state: u64 = [m.param_bytes, m.grad_bytes, m.optim_bytes]
        .into_iter()
        .map(|b| b.unwrap_or(0))
        .sum();
    let fmt = crate::util::fmt_bytes;
    let mut s = format!(
        "{} {}: rank 0 state {} (predicted {}), peak {}",
        r.spec.family.strategy().unwrap_or_default().as_str(),
        r.spec.family.optimizer().as_str(),
        fmt(state),
        m.predicted_bytes.map_or("?".into(), fmt),
        m.peak_bytes.map_or("unavailable on CPU".into(), fmt)
    );
    for (op, t) in &x.comm_totals.by_op {
        let n = x.comm_totals.steps.max(1) as f64;
        // gloo has no reduce-scatter: torch runs a full all-reduce in its place.
        let gloo = op == "reduce_scatter" && r.spec.backend == crate::protocol::Backend::Gloo;
        let op = if gloo {
            "reduce_scatter (an all_reduce on gloo)"
        } else {
            op.as_str()
        };
        s.push_str(&format!(
            ", {op} {:.0}×/step {} {:.2} ms",
            t.count as f64 / n,
            fmt((t.bytes as f64 / n) as u64),
            t.ms / n
        ));
    }
    Some(s)
}

/// One note for an attached run: optimizer steps per rank and what was measured.
fn attach_note(r: &RunView) -> String {
    crate::app::summary::attach_note(r)
}

/// One note for the table: the receipt's op counts and largest op, the merging passes, the check.
fn jax_note(r: &RunView) -> Option<String> {
    let h = r.figures.hlo.as_ref()?;
    let ops = h.ops.unwrap_or_default();
    let mut s = format!(
        "{} sharding: {} all-reduce",
        r.spec.family.sharding().as_str(),
        h.all_reduce_ops
    );
    if let Some(a) = ops.all_reduce.filter(|a| a.count > 0) {
        s.push_str(&format!(" (largest {} elems)", a.largest_elems));
    }
    for (name, st) in [
        ("all-gather", ops.all_gather),
        ("reduce-scatter", ops.reduce_scatter),
    ] {
        if let Some(st) = st.filter(|st| st.count > 0) {
            s.push_str(&format!(", {} {name}", st.count));
        }
    }
    if let Some(c) = h.combined_by.as_ref().filter(|c| !c.is_empty()) {
        s.push_str(&format!(", combined by {}", c.join("+")));
    }
    if let Some(e) = crate::app::equality::equality(&r.figures.checks) {
        s.push_str(&format!(
            ", k=1 vs k={} {} ({}; {})",
            r.spec.k,
            e.verdict.as_str(),
            e.detail(),
            e.rule.as_deref().unwrap_or("tolerance not stated")
        ));
    }
    Some(s)
}

/// The engine's runs followed by the stored runs it does not hold (newest first).
fn with_history(state: &State, g: &GlobalArgs) -> Vec<RunView> {
    let mut all = state.runs.clone();
    let path = crate::paths::data_dir(g.data_dir.as_deref()).join("runs.db");
    if let Ok(stored) = crate::store::Store::open(&path).and_then(|s| s.load_runs(500)) {
        all.extend(stored.into_iter().filter(|r| state.run(&r.id).is_none()));
    }
    all
}

/// The sweep document `ddptop run --json` prints (without the run folders: see `sweep_doc`).
pub fn report(
    runs: &[&RunView],
    records: &std::collections::HashMap<String, LaunchRecord>,
    state: &State,
    context: &[RunView],
    note: &str,
    sweep: &str,
) -> Value {
    let input = SweepInput {
        records,
        state,
        context,
        runs_dir: None,
    };
    sweep_doc(runs, &input, note, sweep)
}

fn sweep_doc(runs: &[&RunView], input: &SweepInput, note: &str, sweep: &str) -> Value {
    let state = input.state;
    let first = runs.first();
    let mut doc = crate::report::json::envelope(
        "sweep",
        env!("CARGO_PKG_VERSION"),
        crate::report::Timestamp(crate::util::unix_now()),
    );
    let body = json!({
        "experiment": first.map(|r| r.spec.experiment().as_str()),
        "backend": first.map(|r| r.spec.backend.as_str()),
        "simulated": first.is_some_and(|r| r.is_simulated()),
        "profile": first.and_then(|r| r.spec.profile.clone()),
        "toggles": first.map(|r| r.spec.nccl.badges_for(r.spec.backend)),
        "backend_note": note,
        "sweep": sweep,
        "runs": runs.iter().map(|r| run_json(r, input)).collect::<Vec<_>>(),
        "rejected_strangers": state.rejected_strangers,
    });
    if let (Some(d), Value::Object(b)) = (doc.as_object_mut(), body) {
        d.extend(b);
    }
    doc
}

fn table(runs: &[&RunView], state: &State, note: &str) -> String {
    let mut out = String::new();
    let Some(first) = runs.first() else {
        return "no runs\n".into();
    };
    let s = &first.spec;
    if let Some(a) = s.attach() {
        out.push_str(&format!("attach {} — {note}, env {}\n", a.label(), s.nccl));
    } else {
        out.push_str(&format!(
            "{} scaling — {}{}, env {} — batch {}{}\n",
            s.experiment().as_str(),
            note,
            s.profile
                .as_ref()
                .map(|p| format!(", profile {p}"))
                .unwrap_or_default(),
            s.nccl,
            s.batch,
            s.kind().batch_unit(),
        ));
    }
    out.push_str(&format!(
        "{:>3}  {:<24} {:<10} {:>12} {:>19} {:>8} {:>10}  {:<22}  {}\n",
        "k",
        "run",
        "status",
        "samples/s",
        "per-rank min–max",
        "speedup",
        "efficiency",
        "straggler",
        "notes"
    ));
    for r in runs {
        let agg = r
            .figures
            .aggregate
            .as_ref()
            .filter(|_| r.status == RunStatus::Completed);
        let sc = summary::scaling(r, &state.runs);
        let notes = row_notes(r, &sc, state);
        out.push_str(&format!(
            "{:>3}  {:<24} {:<10} {:>12} {:>19} {:>8} {:>10}  {:<22}  {}\n",
            r.spec.k,
            r.id,
            r.status.as_str(),
            agg.map(|a| format!("{:.1}", a.samples_per_s))
                .unwrap_or_else(|| "—".into()),
            agg.map(|a| format!("{:.1}–{:.1}", a.rank_min, a.rank_max))
                .unwrap_or_else(|| "—".into()),
            sc.as_ref()
                .map(|s| format!("{:.2}×", s.speedup))
                .unwrap_or_else(|| "—".into()),
            sc.as_ref()
                .map(|s| format!("{:.1}%", s.efficiency * 100.0))
                .unwrap_or_else(|| "—".into()),
            straggler_cell(r),
            notes.join("; ")
        ));
        if r.status == RunStatus::Completed && !r.figures.bench.is_empty() {
            out.push_str(&format!(
                "       {:>10} {:>12} {:>12} {:>12}\n",
                "size", "time µs", "algbw GB/s", "busbw GB/s"
            ));
            for b in &r.figures.bench {
                out.push_str(&format!(
                    "       {:>10} {:>12.1} {:>12.2} {:>12.2}\n",
                    crate::util::fmt_size_pow2(b.bytes),
                    b.time_us,
                    b.algbw_gbs,
                    b.busbw_gbs
                ));
            }
        }
    }
    if runs.iter().any(|r| r.is_simulated()) {
        out.push_str(
            "SIMULATED: figures come from the cost model of the profile, not from a measurement.\n",
        );
    }
    out
}

/// The notes column of a run's row: its baseline and control, probe and bench figures,
/// transport, every warning, and what its family adds.
fn row_notes(r: &RunView, sc: &Option<crate::run::Scaling>, state: &State) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(s) = sc.as_ref().filter(|s| s.baseline != r.id) {
        notes.push(format!("vs k=1 {}", s.baseline));
    }
    if r.spec.control {
        notes.push("k=1 control".to_string());
    }
    if let Some(p) = probe_summary(&r.figures.probe).filter(|_| r.status == RunStatus::Completed) {
        notes.push(format!(
            "probe synced {:.2} ms, no_sync {:.2} ms, diff {:.2} ms",
            p.synced.median_ms, p.no_sync.median_ms, p.diff_ms
        ));
    }
    if r.status == RunStatus::Completed && !r.figures.bench.is_empty() {
        let best = r
            .figures
            .bench
            .iter()
            .map(|b| b.busbw_gbs)
            .fold(0.0, f64::max);
        notes.push(format!(
            "{} sizes, peak busbw {best:.1} GB/s",
            r.figures.bench.len()
        ));
    }
    if let Some(t) = r.transport() {
        notes.push(format!("via {t}"));
    }
    if let Some(n) = crate::run::nccl::ignored_note(&r.launch.nccl_read) {
        notes.push(format!("WARNING {n}"));
    }
    if let Some(shared) = &r.launch.gpus_shared {
        notes.push(format!("WARNING {shared}"));
    }
    for c in &r.evidence.caveats {
        notes.push(format!("WARNING {}", c.text));
    }
    if let Some(why) = sc
        .as_ref()
        .and_then(|s| summary::scaling_caveat(s, &state.runs))
    {
        notes.push(format!("WARNING {why}"));
    }
    if r.spec.kind().has_memory_pane()
        && let Some(n) = fsdp_note(r)
    {
        notes.push(n);
    }
    if r.spec.kind().has_receipt_pane()
        && let Some(n) = jax_note(r)
    {
        notes.push(n);
    }
    if r.spec.kind().has_deficits_pane() {
        notes.push(format!("hand-rolled {}", r.spec.family.hand().label()));
    }
    if r.spec.attach().is_some() {
        notes.push(attach_note(r));
    }
    if let Some((data, step)) = summary::data_wait(r).filter(|(_, s)| *s > 0.0) {
        notes.push(format!(
            "step {step:.1} ms, data wait {data:.2} ms ({:.0}%)",
            data / step * 100.0
        ));
    }
    notes
}

/// The table's straggler column: each rank named, with its phase and score (`(was)` once it
/// recovered), or `—`.
fn straggler_cell(r: &RunView) -> String {
    let named: Vec<String> = r
        .straggler
        .named
        .iter()
        .map(|s| {
            format!(
                "rank {} {} {:.2}{}",
                s.rank,
                s.phase,
                s.score,
                if s.active { "" } else { " (was)" }
            )
        })
        .collect();
    if named.is_empty() {
        "—".into()
    } else {
        named.join(", ")
    }
}

/// `--json`: the run's live warnings and errors (a stall reported while the job goes on, a
/// failure) as one JSON object per line on stderr while the run lasts; stdout keeps the one
/// document written at the end. Returns how many messages have been looked at.
fn stream_verdicts(state: &State, seen: u64, said: &[String]) -> u64 {
    for m in state.messages_since(seen) {
        if matches!(m.level, Level::Warn | Level::Error) && !said.contains(&m.text) {
            let line = json!({
                "type": "live",
                "level": if m.level == Level::Error { "error" } else { "warn" },
                "run": m.run,
                "unix": m.unix,
                "text": m.text,
            });
            eprintln!("{line}");
        }
    }
    state.messages_pushed
}
