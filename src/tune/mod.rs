//! `ddptop tune`: measure the settings that matter on this machine and this model, and
//! recommend one only when it beats the default outside the noise (docs/methods.md, "Tuning";
//! docs/tune.md).
//!
//! The procedure is `driver::Tuning`, which the dashboard's `T` drives too; this module is the
//! command: arguments to a `driver::Plan`, the engine loop, Ctrl-C, the table or JSON
//! (`output`), and keeping the winner as a preset (`preset`). What is tried, predicted and
//! decided lives in `app::tune` (the dashboard's drawing reads the same table).

pub mod driver;
mod output;
pub mod preset;

pub use crate::app::tune::{decide, predict, space};

use crate::cli::{GlobalArgs, TuneArgs, TuneExperiment};
use crate::engine::Engine;
use crate::plan::{self, BrokenConfig};
use crate::run::{AttachTarget, Experiment, Family};
use crate::util::BadInput;
use driver::{Plan, Progress, Tuning};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Drive `tuning` on `engine` until it is over or `interrupted`; progress lines on stderr
/// unless `quiet`. Runs still going when interrupted are stopped by the caller's shutdown.
async fn drive(engine: &mut Engine, tuning: &mut Tuning, interrupted: &AtomicBool, quiet: bool) {
    if !quiet {
        eprintln!("ddptop {}", tuning.start_line());
    }
    let mut queue = plan::Queue::default();
    let sweep = queue.sweep_id();
    queue.push(tuning.take_launches(), Some(sweep.clone()));
    engine
        .drive(None, |e| {
            if interrupted.load(Ordering::SeqCst) {
                return true;
            }
            // Out of budget: leave the loop; the caller's shutdown stops the run going now.
            if let Some(line) = tuning.check_budget() {
                if !quiet {
                    eprintln!("ddptop {line}");
                }
                return true;
            }
            if let Some((id, spec)) = queue.pump(e) {
                let line = tuning.launched(&id, &spec);
                if !quiet {
                    eprintln!("ddptop {line}");
                }
            }
            let (said, _) = tuning.poll(&e.state().runs, queue.len());
            for p in said {
                if let Progress::Note(line) = p
                    && !quiet
                {
                    eprintln!("ddptop {line}");
                }
            }
            queue.push(tuning.take_launches(), Some(sweep.clone()));
            tuning.finished()
        })
        .await;
}

/// The script of `--attach -- SCRIPT ARGS`, checked.
/// The family `tune --experiment` names: its value is the family's name (`weak`, `strong`).
fn tune_experiment(e: TuneExperiment) -> anyhow::Result<Experiment> {
    use clap::ValueEnum;
    let name = e.to_possible_value().map(|v| v.get_name().to_string());
    let name = name.unwrap_or_default();
    name.parse().map_err(anyhow::Error::msg)
}

fn attach_target(a: &TuneArgs) -> anyhow::Result<Option<AttachTarget>> {
    if !a.attach {
        return Ok(None);
    }
    let (script, args) = a
        .command
        .split_first()
        .ok_or_else(|| BadInput("no script: ddptop tune --attach -- train.py ARGS".into()))?;
    let cwd = std::env::current_dir()?;
    AttachTarget::new(std::path::Path::new(script), args.to_vec(), &cwd)
        .map(Some)
        .map_err(|e| BadInput(e).into())
}

pub async fn tune(g: &GlobalArgs, a: TuneArgs) -> anyhow::Result<i32> {
    let attach = attach_target(&a)?;
    if attach.is_some() && a.backend == crate::detect::BackendChoice::Sim {
        return Err(BadInput(
            "--attach runs your script with real PyTorch: use --backend gloo (CPU) or nccl (GPUs)"
                .into(),
        )
        .into());
    }
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
    let mut template = setup.template_with(a.model, a.batch, a.samples, a.epochs)?;
    crate::headless::environment(g, &mut template, &setup, &a.preset, &a.env, None)?;
    let mut state = setup.state(crate::paths::hostname());
    let family = match attach {
        Some(target) => Family::script(target),
        None => Family::of(tune_experiment(a.experiment)?),
    };
    // The k to tune must fit this machine (the same check `ddptop run` makes).
    plan::sweep(&template, family.clone(), &[a.k], state.max_k)
        .map_err(|e| BadInput(format!("{e}; use a smaller --k")))?;
    state.max_k = state.max_k.max(a.k);
    let mut p = Plan::new(template, family, a.k);
    p.bucket_caps = a.bucket_caps.clone();
    p.repeats = a.repeats;
    p.finalists = a.finalists;
    p.min_gain_pct = a.min_gain;
    p.budget_s = a.budget;
    let mut tuning = Tuning::new(p).map_err(BadInput)?;
    for n in &tuning.board().notes {
        eprintln!("ddptop tune: note: {n}");
    }
    let cores = crate::run::checks::cpu_cores();
    for c in crate::run::checks::launch_caveats(tuning.target(), cores) {
        eprintln!("ddptop tune: warning: k={}: {}", a.k, c.text);
    }

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
    drive(&mut engine, &mut tuning, &interrupted, a.json).await;
    let was_interrupted = interrupted.load(Ordering::SeqCst);
    // Stops whatever still runs (an interrupted tuning's run), with its whole process tree.
    engine.shutdown(false).await;
    watcher.abort();
    if !tuning.finished() {
        tuning.close(&engine.state().runs);
    }
    if let crate::app::tune::Phase::Failed(why) = &tuning.board().phase {
        anyhow::bail!("{why}");
    }

    if tuning.board().recommended().is_some() && !a.no_save && !was_interrupted {
        let cfg_path = crate::paths::config_file(g.config.as_deref());
        let machine = format!("{} ({})", crate::paths::hostname(), note);
        if let Err(e) = preset::save(&mut tuning, &cfg_path, &machine) {
            eprintln!("ddptop tune: the preset was not saved: {e}");
        }
    }
    let doc = output::document(&tuning, &note, a.budget);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", output::text_table(&doc));
    }
    // A candidate whose failed run was measured again on retry is not a failure.
    let failed = tuning
        .board()
        .rows
        .iter()
        .any(|r| r.state == crate::app::tune::RowState::Failed);
    Ok(if was_interrupted {
        130
    } else if failed {
        1
    } else {
        0
    })
}
