//! `ddptop run` and `ddptop runs`: the same engine as the dashboard, printing a table or JSON.

use crate::app::summary::{self, probe_summary};
use crate::app::{DataPath, Experiment, HostInfo, ModelName, RunSpec, RunStatus, RunView, State};
use crate::cli::{DataPathArg, ExperimentArg, GlobalArgs, ModelArg, RunArgs, RunsArgs};
use crate::engine::{Engine, EngineOptions};
use crate::protocol::Backend;
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};

pub async fn run(g: &GlobalArgs, a: RunArgs) -> anyhow::Result<i32> {
    let experiment = match a.experiment {
        ExperimentArg::Weak => Experiment::Weak,
        ExperimentArg::Strong => Experiment::Strong,
        ExperimentArg::Probe => Experiment::Probe,
        ExperimentArg::Allreduce => Experiment::Allreduce,
    };
    // The config supplies python/torchrun paths, watchdog thresholds and presets. A broken file
    // costs one warning line here, not the run: flags and defaults still work.
    let config =
        match crate::config::Config::load(Some(&crate::paths::config_file(g.config.as_deref()))) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("ddptop: {e}; continuing with the built-in defaults");
                crate::config::Config::default()
            }
        };
    let python = g.python.clone().or_else(|| config.python.clone());
    let resolved = crate::detect::resolve(
        a.backend,
        python.as_deref(),
        g.workers_dir.as_deref(),
        config.torchrun.as_deref(),
    )?;
    eprintln!("ddptop: {}", resolved.note);
    if resolved.backend == Backend::Nccl
        && let Some(&k) = a.k.iter().find(|&&k| k > resolved.gpus)
    {
        anyhow::bail!("k={k} needs {k} GPUs; torch sees {}", resolved.gpus);
    }
    let profile = match resolved.backend {
        Backend::Sim => {
            let p = a.profile.clone().unwrap_or_else(|| "h200-nvlink".into());
            if crate::costmodel::Profile::get(&p).is_none() {
                anyhow::bail!(
                    "unknown profile `{p}`; known: {}",
                    crate::costmodel::Profile::names().join(", ")
                );
            }
            Some(p)
        }
        _ => None,
    };
    let data_dir = crate::paths::data_dir(g.data_dir.as_deref());
    let mut opts = EngineOptions::new(data_dir);
    opts.python = resolved.python.clone();
    opts.sim_speed = a.sim_speed;
    opts.sim_noise = a.sim_noise;
    opts.history = 0;
    opts.watchdog.floor_s = config.watchdog.hang_floor_s;
    opts.watchdog.factor = config.watchdog.hang_factor;
    opts.watchdog.startup_s = config.watchdog.startup_s;
    if let Some(f) = a.hang_floor {
        opts.watchdog.floor_s = f;
    }
    if let Some(s) = a.startup_timeout {
        opts.watchdog.startup_s = s;
    }
    let mut state = State::new(HostInfo::default());
    state.max_k = resolved.gpus;
    let mut engine = Engine::start(opts, state)?;
    let base = RunSpec {
        experiment,
        k: 1,
        backend: resolved.backend,
        profile: profile.clone(),
        model: match a.model {
            Some(ModelArg::Resnet18) => ModelName::Resnet18,
            Some(ModelArg::Tiny) => ModelName::Tiny,
            None => ModelName::default_for(resolved.backend),
        },
        batch: a.batch.unwrap_or(experiment.default_batch()),
        epochs: a.epochs.max(1),
        samples: a.samples,
        env: launch_env(&config, &a)?,
        inject: a.inject.clone(),
        control: false,
        data_path: match a.data_path {
            DataPathArg::Device => DataPath::Device,
            DataPathArg::Loader => DataPath::Loader,
        },
    };
    let sweep = format!("s{}", crate::util::unix_now() as u64);
    let mut plan: Vec<RunSpec> = a.k.iter().map(|&k| RunSpec { k, ..base.clone() }).collect();
    // The probe's control: the same probe at k=1, where there is no communication at all.
    if experiment == Experiment::Probe && !a.k.contains(&1) {
        plan.insert(
            0,
            RunSpec {
                k: 1,
                control: true,
                ..base.clone()
            },
        );
    }
    let mut ids = Vec::new();
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let mut interrupted = false;
    for spec in plan {
        if interrupted {
            break;
        }
        let k = spec.k;
        let id = match engine.launch(spec, Some(sweep.clone())) {
            Ok(id) => id,
            Err(e) => anyhow::bail!("k={k}: {e}"),
        };
        if !a.json {
            eprintln!("ddptop: k={k} running as {id}");
        }
        ids.push(id.clone());
        tokio::select! {
            _ = engine.wait_final(&id) => {}
            _ = sigint.recv() => interrupted = true,
            _ = sigterm.recv() => interrupted = true,
            _ = sighup.recv() => interrupted = true,
        }
        if interrupted {
            engine.shutdown(false).await;
        }
    }
    engine.shutdown(false).await;
    let runs: Vec<&RunView> = ids.iter().filter_map(|id| engine.state().run(id)).collect();
    let doc = report(&runs, engine.state(), &resolved.note, &sweep);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", table(&runs, engine.state(), &resolved.note));
        for r in &runs {
            if r.status != RunStatus::Completed
                && let Some(why) = &r.reason
            {
                println!("  {} k={}: {}", r.status.as_str(), r.spec.k, why);
                for l in &r.hang_report {
                    println!("    {l}");
                }
            }
        }
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

/// The launch environment: presets in the order given (later ones win), then `--env` on top.
fn launch_env(
    config: &crate::config::Config,
    a: &RunArgs,
) -> anyhow::Result<std::collections::BTreeMap<String, Option<String>>> {
    let mut env = std::collections::BTreeMap::new();
    for name in &a.preset {
        let p = config.preset(name).ok_or_else(|| {
            let known: Vec<&String> = config.presets.keys().collect();
            anyhow::anyhow!("unknown preset `{name}`; the config has {known:?}")
        })?;
        env.extend(p.clone());
    }
    for (k, v) in &a.env {
        env.insert(k.clone(), Some(v.clone()));
    }
    Ok(env)
}

fn run_json(r: &RunView, state: &State) -> Value {
    let agg = r
        .aggregate
        .as_ref()
        .filter(|_| r.status == RunStatus::Completed);
    let scaling = summary::scaling(r, &state.runs);
    let mut v = json!({
        "k": r.spec.k,
        "run_id": r.id,
        "status": r.status.as_str(),
        "reason": r.reason,
        "control": r.spec.control,
        "per_rank_batch": r.spec.per_rank_batch(),
        "data_path": r.spec.data_path.as_str(),
        "global_batch": r.spec.global_batch(),
        "samples_per_s": agg.map(|a| a.samples_per_s),
        "per_rank_samples_per_s": agg.map(|a| a.per_rank.clone()),
        "spread": agg.map(|a| json!({"min": a.rank_min, "max": a.rank_max})),
        "speedup": scaling.map(|s| s.0),
        "efficiency": scaling.map(|s| s.1),
        "transport": r.transport,
        "versions": r.versions,
        "worker_pids": r.ranks.values().filter_map(|x| x.pid).collect::<Vec<_>>(),
        "bad_lines": r.bad_lines(),
        "rejected_connections": r.rejected,
        "hang_report": r.hang_report,
    });
    if let Some((data, step)) = summary::data_wait(r) {
        v["step_ms_median"] = json!(step);
        v["data_wait_ms_median"] = json!(data);
    }
    if r.status == RunStatus::Completed {
        if let Some(p) = probe_summary(&r.probe) {
            v["probe"] = json!({
                "synced_ms": {"median": p.synced.median_ms, "min": p.synced.min_ms, "max": p.synced.max_ms, "blocks": p.synced.blocks},
                "no_sync_ms": {"median": p.no_sync.median_ms, "min": p.no_sync.min_ms, "max": p.no_sync.max_ms, "blocks": p.no_sync.blocks},
                "difference_ms": p.diff_ms,
            });
        }
        if !r.bench.is_empty() {
            v["bench"] = r
                .bench
                .iter()
                .map(|b| json!({"bytes": b.bytes, "time_us": b.time_us, "algbw_gbs": b.algbw_gbs, "busbw_gbs": b.busbw_gbs}))
                .collect();
        }
        let timeline: Vec<Value> = r
            .ranks
            .values()
            .filter_map(|x| x.buckets.as_ref())
            .map(|b| {
                json!({
                    "rank": b.rank, "step": b.step, "bwd_compute_ms": b.bwd_compute_ms, "exposed_ms": b.exposed_ms,
                    "overlap_pct": summary::overlap_pct(b),
                    "buckets": b.buckets.iter().map(|s| json!({"index": s.index, "bytes": s.bytes, "comm_ms": s.comm_ms()})).collect::<Vec<_>>(),
                })
            })
            .collect();
        if !timeline.is_empty() {
            v["timeline"] = Value::Array(timeline);
        }
    }
    v
}

pub fn report(runs: &[&RunView], state: &State, note: &str, sweep: &str) -> Value {
    let first = runs.first();
    json!({
        "experiment": first.map(|r| r.spec.experiment.as_str()),
        "backend": first.map(|r| r.spec.backend.as_str()),
        "simulated": first.is_some_and(|r| r.is_simulated()),
        "profile": first.and_then(|r| r.spec.profile.clone()),
        "toggles": first.map(|r| r.spec.toggle_badges()),
        "backend_note": note,
        "sweep": sweep,
        "runs": runs.iter().map(|r| run_json(r, state)).collect::<Vec<_>>(),
    })
}

fn table(runs: &[&RunView], state: &State, note: &str) -> String {
    let mut out = String::new();
    let Some(first) = runs.first() else {
        return "no runs\n".into();
    };
    let s = &first.spec;
    out.push_str(&format!(
        "{} scaling — {}{}{} — batch {}{}\n",
        s.experiment.as_str(),
        note,
        s.profile
            .as_ref()
            .map(|p| format!(", profile {p}"))
            .unwrap_or_default(),
        if s.env.is_empty() {
            String::new()
        } else {
            format!(", env {}", s.toggle_badges().join(" "))
        },
        s.batch,
        if s.experiment == Experiment::Strong {
            " global"
        } else {
            " per rank"
        },
    ));
    out.push_str(&format!(
        "{:>3}  {:<24} {:<10} {:>12} {:>19} {:>8} {:>10}  {}\n",
        "k", "run", "status", "samples/s", "per-rank min–max", "speedup", "efficiency", "notes"
    ));
    for r in runs {
        let agg = r
            .aggregate
            .as_ref()
            .filter(|_| r.status == RunStatus::Completed);
        let sc = summary::scaling(r, &state.runs);
        let mut notes = Vec::new();
        if r.spec.control {
            notes.push("k=1 control".to_string());
        }
        if let Some(p) = probe_summary(&r.probe).filter(|_| r.status == RunStatus::Completed) {
            notes.push(format!(
                "probe synced {:.2} ms, no_sync {:.2} ms, diff {:.2} ms",
                p.synced.median_ms, p.no_sync.median_ms, p.diff_ms
            ));
        }
        if r.status == RunStatus::Completed && !r.bench.is_empty() {
            let best = r.bench.iter().map(|b| b.busbw_gbs).fold(0.0, f64::max);
            notes.push(format!(
                "{} sizes, peak busbw {best:.1} GB/s",
                r.bench.len()
            ));
        }
        if let Some(t) = &r.transport {
            notes.push(format!("via {t}"));
        }
        if let Some((data, step)) = summary::data_wait(r).filter(|(_, s)| *s > 0.0) {
            notes.push(format!(
                "step {step:.1} ms, data wait {data:.2} ms ({:.0}%)",
                data / step * 100.0
            ));
        }
        out.push_str(&format!(
            "{:>3}  {:<24} {:<10} {:>12} {:>19} {:>8} {:>10}  {}\n",
            r.spec.k,
            r.id,
            r.status.as_str(),
            agg.map(|a| format!("{:.1}", a.samples_per_s))
                .unwrap_or_else(|| "—".into()),
            agg.map(|a| format!("{:.1}–{:.1}", a.rank_min, a.rank_max))
                .unwrap_or_else(|| "—".into()),
            sc.map(|s| format!("{:.2}×", s.0))
                .unwrap_or_else(|| "—".into()),
            sc.map(|s| format!("{:.1}%", s.1 * 100.0))
                .unwrap_or_else(|| "—".into()),
            notes.join("; ")
        ));
        if r.status == RunStatus::Completed && !r.bench.is_empty() {
            out.push_str(&format!(
                "       {:>10} {:>12} {:>12} {:>12}\n",
                "size", "time µs", "algbw GB/s", "busbw GB/s"
            ));
            for b in &r.bench {
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

pub fn list_runs(g: &GlobalArgs, a: &RunsArgs) -> anyhow::Result<i32> {
    let path = crate::paths::data_dir(g.data_dir.as_deref()).join("runs.db");
    let store = crate::store::Store::open(&path)?;
    let runs = store.load_runs(a.limit)?;
    if a.json {
        let v: Vec<Value> = runs
            .iter()
            .map(|r| {
                json!({
                    "run_id": r.id, "experiment": r.spec.experiment.as_str(), "k": r.spec.k,
                    "backend": r.spec.backend.as_str(), "simulated": r.is_simulated(), "profile": r.spec.profile,
                    "toggles": r.spec.toggle_badges(), "status": r.status.as_str(), "reason": r.reason,
                    "started_unix": r.started_unix, "ended_unix": r.ended_unix,
                    "samples_per_s": r.aggregate.as_ref().filter(|_| r.status == RunStatus::Completed).map(|x| x.samples_per_s),
                    "transport": r.transport,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{:<24} {:<10} {:>2} {:<5} {:<10} {:>12}  toggles",
            "run", "experiment", "k", "back", "status", "samples/s"
        );
        for r in &runs {
            println!(
                "{:<24} {:<10} {:>2} {:<5} {:<10} {:>12}  {}",
                r.id,
                r.spec.experiment.as_str(),
                r.spec.k,
                if r.is_simulated() {
                    "SIM"
                } else {
                    r.spec.backend.as_str()
                },
                r.status.as_str(),
                r.aggregate
                    .as_ref()
                    .filter(|_| r.status == RunStatus::Completed)
                    .map(|x| format!("{:.1}", x.samples_per_s))
                    .unwrap_or_else(|| "—".into()),
                r.spec.toggle_badges().join(" ")
            );
        }
    }
    Ok(0)
}
