//! `ddptop tune`: measure the settings that matter on this machine and this model, and
//! recommend one only when it beats the default outside the noise (docs/methods.md, "Tuning").
//!
//! 1. **Predict**: one k=1 run of the default (bucket-ready times, step time) and, on real
//!    backends, one all-reduce sweep at k per distinct NCCL setting give every candidate
//!    (`space`) a predicted samples/s (`predict`).
//! 2. **Measure**: the default and the best few (`--finalists`) interleaved, A B C A B C …,
//!    `--repeats` times each, the run's settings otherwise the same.
//! 3. **Decide** (`decide`) and **keep** the winner as a preset in the config (`preset`).

pub mod decide;
mod output;
pub mod predict;
pub mod preset;
pub mod space;

use crate::cli::{GlobalArgs, TuneArgs, TuneExperiment};
use crate::engine::Engine;
use crate::plan::{self, BrokenConfig};
use crate::protocol::Backend;
use crate::run::{Experiment, RunSpec, RunStatus};
use crate::util::BadInput;
use decide::{Measured, Verdict};
use space::Candidate;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// One candidate's row: its setting, prediction and measurements.
#[derive(Debug, Clone)]
struct Row {
    cand: Candidate,
    predicted: Result<predict::Prediction, String>,
    finalist: bool,
    measured: Measured,
    /// A measured run that did not complete (status: reason).
    failed: Vec<String>,
}

/// The all-reduce sweep at k with the run's settings and `nccl` on top: what times a
/// candidate's buckets.
fn sweep_spec(template: &plan::Template, nccl: &[(String, String)], k: u32) -> RunSpec {
    let mut t = template.clone();
    for (name, value) in nccl {
        t.nccl.set(name, Some(value.clone()));
    }
    t.spec(Experiment::Allreduce, k)
}

/// The NCCL settings and bucket sizes of a predicted layout.
type Layout = (Vec<(String, String)>, Vec<u64>);

/// A bucket size that cuts the model as a smaller one does is the same run: keep the first.
fn dedupe_layouts(rows: &mut Vec<Row>) {
    let mut seen: Vec<Layout> = Vec::new();
    rows.retain(|r| {
        let (Some(_), Ok(p)) = (r.cand.cap_mb(), &r.predicted) else {
            return true;
        };
        let key = (r.cand.nccl_env(), p.bucket_bytes.clone());
        let dup = seen.contains(&key);
        seen.push(key);
        !dup
    });
}

/// Run the launches in order, one at a time; their ids, in order (fewer when interrupted or a
/// launch was refused).
async fn run_all(
    engine: &mut Engine,
    specs: Vec<RunSpec>,
    interrupted: &AtomicBool,
    quiet: bool,
    what: &str,
) -> Vec<String> {
    let mut queue = plan::Queue::default();
    let sweep = queue.sweep_id();
    let total = specs.len();
    queue.push(specs, Some(sweep));
    let mut ids = Vec::new();
    engine
        .drive(None, |e| {
            if interrupted.load(Ordering::SeqCst) {
                return true;
            }
            if let Some((id, spec)) = queue.pump(e) {
                ids.push(id.clone());
                if !quiet {
                    eprintln!(
                        "ddptop tune: {what} {}/{total}: {} k={} as {id}",
                        ids.len(),
                        spec.experiment().as_str(),
                        spec.k
                    );
                }
            }
            queue.idle(e)
        })
        .await;
    ids
}

fn sps_of(engine: &Engine, id: &str) -> Result<f64, String> {
    let r = engine.state().run(id).ok_or("run not found")?;
    if r.status != RunStatus::Completed {
        return Err(format!(
            "{id} {}: {}",
            r.status.as_str(),
            r.reason.as_deref().unwrap_or("no reason given")
        ));
    }
    r.aggregate
        .as_ref()
        .map(|a| a.samples_per_s)
        .ok_or_else(|| format!("{id} measured no throughput"))
}

pub async fn tune(g: &GlobalArgs, a: TuneArgs) -> anyhow::Result<i32> {
    let t0 = Instant::now();
    let experiment = match a.experiment {
        TuneExperiment::Weak => Experiment::Weak,
        TuneExperiment::Strong => Experiment::Strong,
    };
    let setup = plan::setup(
        &g.globals(),
        a.backend,
        a.profile.as_deref(),
        &a.preset,
        BrokenConfig::Fail,
    )?;
    let note = setup.resolved.note.clone();
    if !a.json {
        eprintln!("ddptop: {note}");
    }
    let mut template = setup.template();
    if let Some(m) = a.model {
        template.model = m;
    }
    if template.backend == Backend::Sim && template.model != crate::run::ModelName::Resnet18 {
        return Err(BadInput(crate::headless::SIM_MODEL_ONLY.into()).into());
    }
    template.batch = a.batch;
    template.epochs = a.epochs.max(1);
    if let Some(n) = a.samples {
        template.samples = n;
    }
    crate::headless::environment(g, &mut template, &setup, &a.preset, &a.env, None)?;
    let backend = template.backend;
    let profile = template
        .profile
        .as_deref()
        .and_then(crate::costmodel::Profile::get);
    let mut state = setup.state(crate::paths::hostname());
    // The k to tune must fit this machine (the same check `ddptop run` makes).
    plan::sweep(&template, experiment, &[a.k], state.max_k)
        .map_err(|e| BadInput(format!("{e}; use a smaller --k")))?;
    state.max_k = state.max_k.max(a.k);
    let target = template.spec(experiment, a.k);
    // The k=1 run whose compute the k-rank step keeps: weak at the target's per-rank batch
    // (for strong scaling, the global batch split k ways).
    let mut base_t = template.clone();
    base_t.batch = Some(target.per_rank_batch());
    let base_spec = base_t.spec(Experiment::Weak, 1);
    let cores = crate::run::checks::cpu_cores();
    for c in crate::run::checks::launch_caveats(&target, cores) {
        eprintln!("ddptop tune: warning: k={}: {}", a.k, c.text);
    }
    // The NCCL settings to sweep do not depend on the model; the bucket sizes do (below).
    let candidates = space::space(backend, profile.as_ref(), &template.nccl, None);

    let mut opts = setup.opts;
    opts.sim_speed = a.sim_speed;
    opts.sim_noise = a.sim_noise;
    opts.history = 0;
    let mut engine = Engine::start(opts, state)?;
    let interrupted = Arc::new(AtomicBool::new(false));
    let watcher = {
        let flag = interrupted.clone();
        let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut sigterm =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = sigint.recv() => {}
                _ = sigterm.recv() => {}
            }
            flag.store(true, Ordering::SeqCst);
        })
    };

    // 1. Predict: the default at k=1, and an all-reduce sweep per NCCL setting (real backends).
    let mut first = vec![base_spec.clone()];
    let mut nccl_envs: Vec<Vec<(String, String)>> = Vec::new();
    if backend != Backend::Sim {
        for c in &candidates {
            let e = c.nccl_env();
            if !nccl_envs.contains(&e) {
                nccl_envs.push(e);
            }
        }
        for e in &nccl_envs {
            first.push(sweep_spec(&template, e, a.k));
        }
    }
    let ids = run_all(&mut engine, first, &interrupted, a.json, "predict").await;
    let base_id = ids.first().cloned();
    let base = base_id
        .as_deref()
        .and_then(|id| engine.state().run(id))
        .cloned();
    let base = match base {
        Some(b) if b.status == RunStatus::Completed => b,
        other => {
            engine.shutdown(false).await;
            watcher.abort();
            anyhow::bail!(
                "the default k=1 run did not complete ({}); nothing to predict from",
                other
                    .and_then(|r| r.reason)
                    .unwrap_or_else(|| "interrupted".into())
            );
        }
    };
    let base_wall = (base.ended_unix.unwrap_or(base.started_unix) - base.started_unix).max(1.0);
    let runs = engine.state().runs.clone();
    let grad_bytes = crate::app::predict::ready_times(&base)
        .ok()
        .map(|(b, _)| b.iter().map(|x| x.bytes).sum());
    let mut candidates = space::space(backend, profile.as_ref(), &template.nccl, grad_bytes);
    if !a.bucket_caps.is_empty() {
        candidates.retain(|c| c.cap_mb().is_none());
        candidates.extend(
            a.bucket_caps
                .iter()
                .map(|mb| space::Candidate::bucket_cap(*mb)),
        );
    }
    // A candidate's row with its prediction: its buckets timed by its NCCL setting's sweep.
    let predicted_row = |cand: Candidate| {
        let predicted = predict::predict(
            &base,
            &sweep_spec(&template, &cand.nccl_env(), a.k),
            target.per_rank_batch(),
            cand.cap_mb(),
            &runs,
        );
        Row {
            cand,
            predicted,
            finalist: false,
            measured: Measured::default(),
            failed: Vec::new(),
        }
    };
    let mut rows: Vec<Row> = candidates.into_iter().map(predicted_row).collect();
    dedupe_layouts(&mut rows);
    let pred = |r: &Row| r.predicted.as_ref().map_or(f64::NAN, |p| p.samples_per_s);
    // The best bucket size with the best NCCL setting, when each is predicted to help alone.
    let default_pred = pred(&rows[0]);
    let best_of = |f: &dyn Fn(&Candidate) -> bool| {
        rows.iter()
            .filter(|r| f(&r.cand) && r.cand.modelled && pred(r) > default_pred)
            .max_by(|x, y| pred(x).total_cmp(&pred(y)))
            .map(|r| r.cand.clone())
    };
    if let (Some(cap), Some(nccl)) = (
        best_of(&|c| c.cap_mb().is_some()),
        best_of(&|c| !c.nccl_env().is_empty()),
    ) {
        rows.push(predicted_row(cap.combine(&nccl)));
    }

    // 2. Finalists: the best predicted, then what the model cannot predict; cut to the budget.
    let mut order: Vec<usize> = (1..rows.len())
        .filter(|&i| rows[i].cand.modelled && rows[i].predicted.is_ok())
        .collect();
    order.sort_by(|&x, &y| pred(&rows[y]).total_cmp(&pred(&rows[x])));
    order.truncate(a.finalists as usize);
    order.extend((1..rows.len()).filter(|&i| !rows[i].cand.modelled));
    let mut repeats = a.repeats as usize;
    let left = a.budget - t0.elapsed().as_secs_f64();
    let cost = |n: usize, r: usize| (n + 1) as f64 * r as f64 * base_wall;
    while order.len() > 1 && cost(order.len(), repeats) > left {
        order.pop();
    }
    let mut budget_note = None;
    while repeats > 1 && cost(order.len(), repeats) > left {
        repeats -= 1;
        budget_note = Some(format!(
            "the budget ({:.0} s left, about {:.0} s per run) allows {repeats} repeats; raise --budget for {}",
            left, base_wall, a.repeats
        ));
    }
    for &i in &order {
        rows[i].finalist = true;
    }
    let mut measured_order = vec![0usize];
    measured_order.extend(order.iter().copied());

    // 3. Measure, interleaved: default, finalist 1, finalist 2, …, then again.
    let mut specs = Vec::new();
    let mut owner = Vec::new();
    for _ in 0..repeats {
        for &i in &measured_order {
            let mut t = template.clone();
            t.nccl = rows[i].cand.settings(&template.nccl);
            specs.push(t.spec(experiment, a.k));
            owner.push(i);
        }
    }
    let ids = run_all(&mut engine, specs, &interrupted, a.json, "measure").await;
    for (id, &i) in ids.iter().zip(&owner) {
        match sps_of(&engine, id) {
            Ok(s) => rows[i].measured.push(id.clone(), s),
            Err(e) => rows[i].failed.push(e),
        }
    }
    let was_interrupted = interrupted.load(Ordering::SeqCst);
    engine.shutdown(false).await;
    watcher.abort();

    // 4. Decide; keep the winner.
    let finalists: Vec<(usize, &Measured)> = order
        .iter()
        .filter(|&&i| rows[i].failed.is_empty())
        .map(|&i| (i, &rows[i].measured))
        .collect();
    let verdict = decide::decide(&rows[0].measured, &finalists, a.min_gain);
    let mut saved = None;
    let mut save_error = None;
    if let Verdict::Recommend {
        candidate,
        gain_pct,
    } = &verdict
        && !a.no_save
        && !was_interrupted
    {
        let c = &rows[*candidate].cand;
        let date = crate::report::Timestamp(crate::util::unix_now()).to_string();
        let date = date.get(..10).unwrap_or(&date).to_string();
        let cfg_path = crate::paths::config_file(g.config.as_deref());
        let config = crate::config::Config::load(Some(&cfg_path)).unwrap_or_default();
        let name = preset::free_name(
            &config,
            &format!(
                "tuned-{}-k{}-{}",
                experiment.as_str(),
                a.k,
                date.replace('-', "")
            ),
        );
        let machine = format!("{} ({})", crate::paths::hostname(), note);
        let model = format!(
            "{}, {} on {}",
            target.model.as_str(),
            target.batch_label(),
            backend.as_str()
        );
        let what = format!(
            "{}: {gain_pct:+.1}% samples/s over the default at k={}",
            c.name, a.k
        );
        let text = preset::text(
            &name,
            &c.env,
            &preset::Provenance {
                date: &date,
                machine: &machine,
                model: &model,
                what: &what,
            },
        );
        match preset::append(&cfg_path, &name, &text) {
            Ok(()) => saved = Some((name, cfg_path.display().to_string())),
            Err(e) => save_error = Some(e),
        }
    }

    let doc = output::document(
        &a,
        &note,
        backend,
        experiment,
        &base.id,
        &rows,
        repeats,
        &verdict,
        saved.as_ref(),
        budget_note.as_deref(),
    );
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", output::text_table(&doc));
    }
    if let Some(e) = save_error {
        eprintln!("ddptop tune: the preset was not saved: {e}");
    }
    Ok(if was_interrupted {
        130
    } else if rows.iter().any(|r| !r.failed.is_empty()) {
        1
    } else {
        0
    })
}
