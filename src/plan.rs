//! From what the user asked for to the launches that do it, shared by the dashboard (`tui`) and
//! `ddptop run` (`headless`): the set-up (config, backend, profile, engine options), the one
//! way a `RunSpec` is built (`Template`), the one "does k fit" check, sweeps and the probe with
//! its k=1 control, and the one-measurement-at-a-time queue.

use crate::app::{HostInfo, State};
use crate::config::Config;
use crate::costmodel::Profile;
use crate::detect::{BackendChoice, Resolved};
use crate::engine::{Engine, EngineOptions};
use crate::protocol::Backend;
pub use crate::run::fits;
use crate::run::{
    DEFAULT_PROFILE, DataPath, DataSource, EnvOverlay, HostBackend, ModelName, NcclSettings,
    RunSpec,
};
use crate::run::{Family, TorchSettings};
use crate::util::BadInput;
use std::collections::VecDeque;
use std::path::PathBuf;

/// The global flags every front end takes (`cli::GlobalArgs` fills them): where the data and
/// the config are, which Python and workers to launch, whether busy GPUs may be shared.
#[derive(Debug, Clone, Default)]
pub struct Globals {
    pub data_dir: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub python: Option<PathBuf>,
    pub workers_dir: Option<PathBuf>,
    pub shared_gpus: bool,
    /// `--no-nccl-profiler`: launch NCCL without ddptop's profiler plugin.
    pub no_nccl_profiler: bool,
}

/// What the front ends share once set up.
pub struct Setup {
    pub config: Config,
    pub resolved: Resolved,
    /// The simulated backend's profile (`None` on real backends).
    pub profile: Option<String>,
    pub opts: EngineOptions,
}

/// How a front end treats a config file that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokenConfig {
    /// The dashboard and `ddptop run`: the error (file:line) is the answer, exit code 2.
    Fail,
    /// One warning line, then the built-in defaults.
    Warn,
}

/// Load the config, pick the backend, check the profile, fill the engine's options.
pub fn setup(
    g: &Globals,
    backend: BackendChoice,
    profile: Option<&str>,
    presets: &[String],
    broken: BrokenConfig,
) -> anyhow::Result<Setup> {
    let cfg_path = crate::paths::config_file(g.config.as_deref());
    let config = match (Config::load(Some(&cfg_path)), broken) {
        (Ok(c), _) => c,
        (Err(e), BrokenConfig::Fail) => {
            return Err(BadInput(format!("{e}; fix the file or point --config elsewhere")).into());
        }
        (Err(e), BrokenConfig::Warn) => {
            eprintln!("ddptop: {e}; continuing with the built-in defaults");
            Config::default()
        }
    };
    // Names are checked before the backend is resolved: probing torch takes seconds, and a
    // typo must not wait for it.
    for name in presets {
        config
            .preset(name)
            .ok_or_else(|| unknown_preset(g, &config, name))?;
    }
    if let Some(p) = profile.filter(|p| Profile::get(p).is_none()) {
        return Err(BadInput(format!(
            "unknown profile `{p}`; known: {}",
            Profile::names().join(", ")
        ))
        .into());
    }
    let python = g.python.clone().or_else(|| config.python.clone());
    let resolved = crate::detect::resolve(
        backend,
        python.as_deref(),
        g.workers_dir.as_deref(),
        config.torchrun.as_deref(),
    )?;
    let profile = profile_for(resolved.backend, profile)?;
    let mut opts = EngineOptions::new(crate::paths::data_dir(g.data_dir.as_deref()));
    opts.python = resolved.python.clone();
    opts.shared_gpus = g.shared_gpus;
    opts.watchdog.floor_s = config.watchdog.hang_floor_s;
    opts.watchdog.factor = config.watchdog.hang_factor;
    opts.watchdog.startup_s = config.watchdog.startup_s;
    opts.watchdog.first_steps_s = config.watchdog.first_steps_s;
    opts.stop_attached_on_hang = config.watchdog.stop_attached_on_hang;
    opts.stragglers = config.stragglers;
    opts.archive_limit = config.store.archive_limit();
    opts.nccl_profiler = (config.nccl_profiler && !g.no_nccl_profiler)
        .then(crate::supervisor::nccl_profiler::find)
        .flatten();
    Ok(Setup {
        config,
        resolved,
        profile,
        opts,
    })
}

impl Setup {
    /// The state the engine starts with: the host, and how many GPUs launches may use.
    pub fn state(&self, hostname: String) -> State {
        let mut state = State::new(HostInfo {
            hostname,
            backend: HostBackend::new(self.resolved.backend, self.profile.clone()),
            torch: self.resolved.torch.clone(),
            ..HostInfo::default()
        });
        state.max_k = max_k(self.resolved.backend, self.resolved.gpus);
        state
    }

    /// The launch template for this backend and profile, sized by the config's `[launch]`,
    /// everything else at its default.
    pub fn template(&self) -> Template {
        let mut t = Template::new(self.resolved.backend, self.profile.clone());
        if !self.config.book_settings {
            t.torch = TorchSettings::Off;
        }
        t.size(self.config.launch.samples, self.config.launch.epochs);
        t
    }

    /// The template of a command-line launch (`ddptop run`, `ddptop tune`): [`Self::template`]
    /// with the command line's model, batch and size on top.
    pub fn template_with(
        &self,
        model: Option<ModelName>,
        batch: Option<u32>,
        samples: Option<u64>,
        epochs: Option<u32>,
    ) -> Result<Template, BadInput> {
        let mut t = self.template();
        if let Some(m) = model {
            t.model = m;
        }
        if t.backend == Backend::Sim && t.model != ModelName::Resnet18 {
            return Err(BadInput(crate::run::SIM_MODEL_ONLY.into()));
        }
        t.batch = batch;
        t.size(samples, epochs);
        Ok(t)
    }
}

/// `--preset NAME` that the config does not have: the error, with the known names.
pub fn unknown_preset(g: &Globals, config: &Config, name: &str) -> BadInput {
    let known: Vec<&str> = config.presets.keys().map(|k| k.as_str()).collect();
    BadInput(format!(
        "unknown preset `{name}`; known: {} (add one under [presets] in {})",
        known.join(", "),
        crate::paths::config_file(g.config.as_deref()).display()
    ))
}

/// NCCL settings asked for on a gloo launch (beyond ddptop's own default): gloo runs no NCCL,
/// so a comparison of them would compare noise. The one-line refusal, or `None`.
pub fn nccl_on_gloo(backend: Backend, nccl: &NcclSettings) -> Option<String> {
    if backend != Backend::Gloo {
        return None;
    }
    let defaults = NcclSettings::default();
    let asked: Vec<String> = nccl
        .normalized()
        .launch_env()
        .filter(|(k, v)| {
            k.starts_with("NCCL_") && defaults.as_map().get(*k).map(|d| d.as_deref()) != Some(*v)
        })
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => format!("-{k}"),
        })
        .collect();
    (!asked.is_empty()).then(|| {
        format!(
            "{} on a gloo run: gloo runs no NCCL, so NCCL settings change nothing (use --backend nccl on GPUs, or drop them)",
            asked.join(", ")
        )
    })
}

/// The profile of a simulated backend (named, else the default), checked; `None` elsewhere.
pub fn profile_for(backend: Backend, named: Option<&str>) -> anyhow::Result<Option<String>> {
    if backend != Backend::Sim {
        return Ok(None);
    }
    let p = named.unwrap_or(DEFAULT_PROFILE);
    if Profile::get(p).is_none() {
        return Err(BadInput(format!(
            "unknown profile `{p}`; known: {}",
            Profile::names().join(", ")
        ))
        .into());
    }
    Ok(Some(p.to_string()))
}

/// GPUs a launch may use: torch's count on NCCL; 0 (no limit) on CPUs and in simulation.
pub fn max_k(backend: Backend, gpus: u32) -> u32 {
    if backend == Backend::Nccl { gpus } else { 0 }
}

/// Everything of a launch but the experiment and k.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub backend: Backend,
    pub profile: Option<String>,
    pub model: ModelName,
    /// `None`: the experiment's default batch.
    pub batch: Option<u32>,
    pub epochs: u32,
    pub samples: u64,
    pub nccl: NcclSettings,
    pub data_path: DataPath,
    pub data_source: DataSource,
    pub inject: Option<crate::run::Fault>,
    /// fsdp: at each k launch FSDP then DDP with the same settings (the Memory comparison), as
    /// both front ends do by default; off: the family's strategy alone (`ddptop run fsdp
    /// --strategy …`).
    pub fsdp_pairs: bool,
    /// handrolled: at each k DDP and the three hand-rolled variants (the Deficits pane; the
    /// dashboard's sweep, `ddptop run handrolled --deficits`) instead of the family's alone.
    pub deficits: bool,
    /// The book's TF32/cudnn.benchmark settings for PyTorch experiments (`--no-book-settings`).
    pub torch: TorchSettings,
}

impl Template {
    /// 2 epochs (the first is warm-up), 60,000 samples (8,192 on gloo, where CPUs are slow),
    /// the backend's default model, ddptop's NCCL defaults.
    pub fn new(backend: Backend, profile: Option<String>) -> Self {
        Template {
            backend,
            profile: profile.or_else(|| (backend == Backend::Sim).then(|| DEFAULT_PROFILE.into())),
            model: ModelName::default_for(backend),
            batch: None,
            epochs: 2,
            samples: if backend == Backend::Gloo {
                8_192
            } else {
                60_000
            },
            nccl: NcclSettings::default(),
            data_path: DataPath::Device,
            data_source: DataSource::Synthetic,
            inject: None,
            fsdp_pairs: true,
            deficits: false,
            torch: TorchSettings::Book,
        }
    }

    /// Samples per epoch and epochs, where given (the config's `[launch]`, a command line).
    pub fn size(&mut self, samples: Option<u64>, epochs: Option<u32>) {
        if let Some(n) = samples {
            self.samples = n;
        }
        if let Some(e) = epochs {
            self.epochs = e;
        }
    }

    /// The one way a `RunSpec` is built: `family` at k with this template's settings (an
    /// `Experiment` stands for its family's defaults).
    pub fn spec(&self, family: impl Into<Family>, k: u32) -> RunSpec {
        let family = family.into();
        let experiment = family.experiment();
        RunSpec {
            family,
            k,
            backend: self.backend,
            profile: self.profile.clone(),
            model: self.model,
            batch: self.batch.unwrap_or(experiment.default_batch()),
            epochs: self.epochs.max(1),
            samples: self.samples,
            nccl: self.nccl.clone(),
            inject: self.inject.clone(),
            control: false,
            data_path: self.data_path,
            data_source: self.data_source.clone(),
            torch: experiment.torch_settings(self.torch, self.backend),
        }
    }

    /// Apply environment settings (`--env`, a preset): `DDPTOP_DATASET_DIR` names the dataset
    /// folder (the real data), every other variable goes to the launch's environment.
    pub fn apply_env(&mut self, overlay: &EnvOverlay) {
        let mut rest = overlay.clone();
        if let Some(dir) = rest.remove(DataSource::ENV) {
            self.data_source = match dir {
                Some(d) if !d.is_empty() => DataSource::Real(d.into()),
                _ => DataSource::Synthetic,
            };
        }
        self.nccl.apply(&rest);
    }
}

/// The launches of one request, in order, sharing a sweep id when there are several.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub specs: Vec<RunSpec>,
    /// What was left out and why (k beyond this machine), for the user.
    pub notes: Vec<String>,
}

/// Launches at each k of `ks` that fits; probes get a k=1 control (where there is no
/// communication at all) unless k=1 is among them. `Err` when nothing fits.
pub fn sweep(
    t: &Template,
    family: impl Into<Family>,
    ks: &[u32],
    max_k: u32,
) -> Result<Planned, String> {
    let family = family.into();
    let experiment = family.experiment();
    let kind = family.kind();
    if kind.runs_user_script() && family.attach().is_none() {
        return Err("attach needs a script: ddptop attach -- train.py ARGS".into());
    }
    if let Some(why) = experiment
        .no_sim_worker()
        .filter(|_| t.backend == Backend::Sim)
    {
        return Err(why.into());
    }
    if let Some(f) = &t.inject {
        for &k in ks {
            f.fits_k(k)?;
        }
        if kind.runs_user_script()
            && let Some(why) = f.attach_refusal()
        {
            return Err(why);
        }
        if f.torch_only() && (t.backend == Backend::Sim || !kind.ddptop_loop()) {
            return Err(format!(
                "fault `{f}` changes ddptop's own PyTorch training loop: use it with `run weak` or `run strong` on --backend gloo or nccl (an attached script has that bug in its own code, or not)"
            ));
        }
    }
    let mut notes = Vec::new();
    let mut specs = Vec::new();
    for &k in ks {
        match fits(k, max_k) {
            Ok(()) => specs.push(t.spec(family.clone(), k)),
            Err(why) => notes.push(format!("{} at {why}", experiment.as_str())),
        }
    }
    if specs.is_empty() {
        return Err(notes.join("; "));
    }
    if kind.k1_control() && !ks.contains(&1) {
        let mut control = t.spec(family.clone(), 1);
        control.control = true;
        specs.push(control);
    }
    Ok(Planned { specs, notes })
}

/// What `ks` of `experiment` launch: the one plan of the dashboard (`tui/actions.rs`) and of
/// `ddptop run` (`headless.rs`), so that both make the same comparisons. The pairing rules live
/// here and nowhere else: fsdp is paired with DDP at each k unless the template asks for one
/// strategy (`fsdp_pairs`); handrolled with `deficits` runs DDP and the three variants at each
/// k; a probe gets its k=1 control (`sweep`); everything else is one launch per k.
pub fn request(
    t: &Template,
    family: impl Into<Family>,
    ks: &[u32],
    max_k: u32,
) -> Result<Planned, String> {
    let family = family.into();
    let kind = family.kind();
    if t.fsdp_pairs && kind.strategy_pairs(&family).is_some() {
        fsdp_pairs(t, &family, ks, max_k)
    } else if t.deficits && kind.deficit_columns().is_some() {
        deficits_sweep(t, &family, ks, max_k)
    } else {
        sweep(t, family, ks, max_k)
    }
}

/// fsdp's launches: at each k, FSDP, ZeRO-1 then DDP with the same settings, so that the Memory
/// pane (and `--json`'s `memory_comparison`) has every side and the curves grow together.
pub fn fsdp_pairs(
    t: &Template,
    family: &Family,
    ks: &[u32],
    max_k: u32,
) -> Result<Planned, String> {
    let mut specs = Vec::new();
    let mut notes = Vec::new();
    let pairs = family.kind().strategy_pairs(family);
    let pairs = pairs.unwrap_or_else(|| vec![family.clone()]);
    for &k in ks {
        for side in &pairs {
            let p = sweep(t, side.clone(), &[k], max_k)?;
            specs.extend(p.specs);
            notes.extend(p.notes);
        }
    }
    Ok(Planned { specs, notes })
}

/// The deficits table's launches of `family` (`FamilyKind::deficit_columns`): at each k that
/// fits, DDP (weak) then the hand-rolled loop as the book wrote it (single+star) and with each
/// fix (threads+star, threads+ring), interleaved so that a drift of the machine spreads over
/// all four.
///
/// The tch loop cannot apply the book's PyTorch settings, so its DDP column runs without them
/// too: the four columns differ only in the loop.
pub fn deficits_sweep(
    t: &Template,
    family: &Family,
    ks: &[u32],
    max_k: u32,
) -> Result<Planned, String> {
    let columns = family.kind().deficit_columns().unwrap_or_default();
    let Some((ddp_column, loops)) = columns.split_first() else {
        return Err(format!("{} has no deficits table", family.experiment()));
    };
    let mut plain = t.clone();
    plain.torch = family.experiment().torch_settings(t.torch, t.backend);
    let ddp = sweep(&plain, ddp_column.clone(), ks, max_k)?;
    let mut specs = Vec::new();
    for weak in ddp.specs {
        let k = weak.k;
        specs.push(weak);
        for hand in loops {
            specs.push(t.spec(hand.clone(), k));
        }
    }
    if t.backend == Backend::Sim {
        return Err(
            "the deficits table needs the hand-rolled worker, which has no simulated version (--backend gloo or nccl)"
                .into(),
        );
    }
    Ok(Planned {
        specs,
        notes: ddp.notes,
    })
}

/// The k for an experiment that needs communication: 2 where the machine has two GPUs (or runs
/// on CPUs / simulated).
pub fn two_ranks(max_k: u32, what: &str) -> Result<u32, String> {
    fits(2, max_k).map(|()| 2).map_err(|_| {
        format!(
            "{what} needs 2 GPUs (k=1 has no communication to measure); this machine has {max_k}"
        )
    })
}

/// Launches waiting their turn: one measurement at a time, because two runs sharing GPUs or CPU
/// cores would spoil each other's numbers.
#[derive(Debug, Default)]
pub struct Queue {
    items: VecDeque<(RunSpec, Option<String>)>,
    sweeps: u32,
}

impl Queue {
    /// A sweep id for launches that belong together.
    pub fn sweep_id(&mut self) -> String {
        self.sweeps += 1;
        format!("s{}-{}", crate::util::unix_now() as u64, self.sweeps)
    }

    pub fn push(&mut self, specs: Vec<RunSpec>, sweep: Option<String>) {
        self.items
            .extend(specs.into_iter().map(|s| (s, sweep.clone())));
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The waiting launches, the next one first, with their sweep ids.
    pub fn items(&self) -> impl Iterator<Item = (&RunSpec, Option<&str>)> {
        self.items.iter().map(|(s, w)| (s, w.as_deref()))
    }

    /// Take the `i`-th waiting launch (0 starts next) out of the queue.
    pub fn remove(&mut self, i: usize) -> Option<RunSpec> {
        self.items.remove(i).map(|(s, _)| s)
    }

    /// Drop the queued launches of a sweep; how many went.
    pub fn drop_sweep(&mut self, sweep: &str) -> usize {
        let before = self.items.len();
        self.items.retain(|(_, w)| w.as_deref() != Some(sweep));
        before - self.items.len()
    }

    pub fn clear(&mut self) -> usize {
        let n = self.items.len();
        self.items.clear();
        n
    }

    /// Start the next launch when nothing is running; call after every event. Returns the id
    /// and spec of what it started. A launch that fails takes the rest of its sweep with it (the
    /// engine said why; they would fail the same way).
    pub fn pump(&mut self, engine: &mut Engine) -> Option<(String, RunSpec)> {
        if engine.has_active_runs() {
            return None;
        }
        while let Some((spec, sweep)) = self.items.pop_front() {
            match engine.launch(spec.clone(), sweep.clone()) {
                Ok(id) => return Some((id, spec)),
                Err(_) => {
                    if let Some(s) = sweep {
                        self.drop_sweep(&s);
                    }
                }
            }
        }
        None
    }

    /// Nothing running and nothing queued.
    pub fn idle(&self, engine: &Engine) -> bool {
        self.items.is_empty() && !engine.has_active_runs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{AttachTarget, Experiment, JaxSharding, OptimizerName, TorchStrategy};

    #[test]
    fn the_configs_launch_table_sizes_the_template() {
        let setup = |launch: crate::config::LaunchCfg| Setup {
            config: Config {
                launch,
                ..Config::default()
            },
            resolved: Resolved {
                backend: Backend::Gloo,
                python: None,
                torch: None,
                gpus: 0,
                note: String::new(),
            },
            profile: None,
            opts: EngineOptions::new(std::path::PathBuf::from("/nonexistent")),
        };
        let t = setup(Default::default()).template();
        assert_eq!((t.samples, t.epochs), (8_192, 2), "gloo's defaults");
        let t = setup(crate::config::LaunchCfg {
            samples: Some(2048),
            epochs: Some(3),
        })
        .template();
        assert_eq!((t.samples, t.epochs), (2048, 3));
        let spec = t.spec(Experiment::Weak, 2);
        assert_eq!(
            (spec.samples, spec.epochs),
            (2048, 3),
            "and every launch of it"
        );
    }

    #[test]
    fn k_beyond_the_gpus_is_left_out_with_a_reason() {
        let t = Template::new(Backend::Nccl, None);
        let p = sweep(&t, Experiment::Weak, &[1, 2, 4], 2).unwrap();
        assert_eq!(p.specs.iter().map(|s| s.k).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(p.notes, ["weak at k=4 needs 4 GPUs; this machine has 2"]);
        assert!(sweep(&t, Experiment::Weak, &[4], 2).is_err());
        assert!(fits(64, 0).is_ok(), "CPUs and simulation: no limit");
    }

    #[test]
    fn jax_sweeps_carry_their_sharding_and_refuse_simulation() {
        let t = Template::new(Backend::Gloo, None);
        let fsdp = Family::Jax {
            sharding: JaxSharding::Fsdp,
        };
        let p = sweep(&t, fsdp, &[1, 2, 4], 0).unwrap();
        assert!(
            p.specs
                .iter()
                .all(|s| s.family.sharding() == JaxSharding::Fsdp)
        );
        assert_eq!(
            p.specs[2].processes(),
            1,
            "one process drives all k devices"
        );
        let err = sweep(&Template::new(Backend::Sim, None), Experiment::Jax, &[2], 0).unwrap_err();
        assert!(err.contains("no simulated worker"), "{err}");
    }

    #[test]
    fn fsdp_pairs_interleave_the_strategies_at_each_k() {
        let t = Template::new(Backend::Nccl, None);
        let fsdp = Family::of(Experiment::Fsdp);
        let p = fsdp_pairs(&t, &fsdp, &[1, 2], 2).unwrap();
        let got: Vec<(u32, TorchStrategy)> = p
            .specs
            .iter()
            .map(|s| (s.k, s.family.strategy().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                (1, TorchStrategy::Fsdp),
                (1, TorchStrategy::Zero1),
                (1, TorchStrategy::Ddp),
                (2, TorchStrategy::Fsdp),
                (2, TorchStrategy::Zero1),
                (2, TorchStrategy::Ddp)
            ]
        );
        assert!(fsdp_pairs(&t, &fsdp, &[4], 2).is_err());
    }

    #[test]
    fn requests_run_every_fsdp_strategy_for_both_front_ends_unless_one_is_asked() {
        let mut t = Template::new(Backend::Gloo, None);
        let strategies = |p: &Planned| -> Vec<(u32, TorchStrategy)> {
            p.specs
                .iter()
                .map(|s| (s.k, s.family.strategy().unwrap()))
                .collect()
        };
        // The default template (the dashboard's and `ddptop run fsdp`'s): every strategy.
        let p = request(&t, Experiment::Fsdp, &[1, 2], 0).unwrap();
        assert_eq!(
            strategies(&p),
            strategies(&fsdp_pairs(&t, &Family::of(Experiment::Fsdp), &[1, 2], 0).unwrap())
        );
        assert_eq!(p.specs.len(), 6, "FSDP, ZeRO-1 and DDP at each k");
        // `--strategy ddp`: that strategy alone.
        t.fsdp_pairs = false;
        let ddp = Family::Fsdp {
            strategy: TorchStrategy::Ddp,
            optimizer: OptimizerName::Adam,
        };
        let p = request(&t, ddp, &[1, 2], 0).unwrap();
        assert_eq!(
            strategies(&p),
            [(1, TorchStrategy::Ddp), (2, TorchStrategy::Ddp)]
        );
        // Other experiments are their sweep (a probe still gets its control).
        let t = Template::new(Backend::Sim, None);
        let p = request(&t, Experiment::Probe, &[2], 0).unwrap();
        assert_eq!(
            p.specs,
            sweep(&t, Experiment::Probe, &[2], 0).unwrap().specs
        );
    }

    #[test]
    fn fsdp_sweeps_default_to_adam_carry_the_strategy_and_refuse_simulation() {
        let t = Template::new(Backend::Gloo, None);
        let p = sweep(&t, Experiment::Fsdp, &[1, 2], 0).unwrap();
        assert!(p.specs.iter().all(|s| s.family
            == Family::Fsdp {
                strategy: TorchStrategy::Fsdp,
                optimizer: OptimizerName::Adam
            }));
        // Another experiment carries none of fsdp's settings (its optimizer is the book's SGD).
        let weak = t.spec(Experiment::Weak, 1);
        assert_eq!(
            (weak.family.optimizer(), weak.family.strategy()),
            (OptimizerName::Sgd, None)
        );
        let err = sweep(
            &Template::new(Backend::Sim, None),
            Experiment::Fsdp,
            &[2],
            0,
        )
        .unwrap_err();
        assert!(err.contains("no simulated worker"), "{err}");
    }

    #[test]
    fn the_deficits_sweep_interleaves_ddp_and_each_hand_rolled_variant_per_k() {
        let t = Template::new(Backend::Nccl, None);
        let p = deficits_sweep(&t, &Family::of(Experiment::Handrolled), &[1, 2, 4], 2).unwrap();
        let shape: Vec<(u32, &str, String)> = p
            .specs
            .iter()
            .map(|s| (s.k, s.experiment().as_str(), s.family.hand().label()))
            .collect();
        let row = |k: u32| {
            vec![
                (k, "weak", "single+star".to_string()),
                (k, "handrolled", "single+star".to_string()),
                (k, "handrolled", "threads+star".to_string()),
                (k, "handrolled", "threads+ring".to_string()),
            ]
        };
        assert_eq!(shape, [row(1), row(2)].concat());
        assert_eq!(p.notes, ["weak at k=4 needs 4 GPUs; this machine has 2"]);
        let weak = &p.specs[0];
        assert_eq!(weak.curve_key().setting(), p.specs[3].curve_key().setting());
        // DDP without the book's settings, as the tch loop: the columns differ in the loop only.
        assert_eq!(weak.torch, TorchSettings::Off);
        assert_eq!(weak.torch, p.specs[3].torch);
        let hand = Family::of(Experiment::Handrolled);
        let err = deficits_sweep(&Template::new(Backend::Sim, None), &hand, &[2], 0).unwrap_err();
        assert!(err.contains("no simulated version"), "{err}");
        let err = sweep(
            &Template::new(Backend::Sim, None),
            Experiment::Handrolled,
            &[2],
            0,
        );
        assert!(err.unwrap_err().contains("no simulated worker"));
    }

    #[test]
    fn attach_needs_its_script_and_real_torch() {
        let mut t = Template::new(Backend::Gloo, None);
        let err = sweep(&t, Experiment::Attach, &[2], 0).unwrap_err();
        assert!(err.contains("needs a script"), "{err}");
        let target = AttachTarget {
            script: "/u/train.py".into(),
            args: vec![],
            cwd: "/u".into(),
        };
        let attach = Family::Attach {
            target: Some(target.clone()),
        };
        let p = sweep(&t, attach.clone(), &[1, 2], 0).unwrap();
        assert!(p.specs.iter().all(|s| s.attach() == Some(&target)));
        // The bootstrap cannot slow an unmodified script's forward: refused before the launch;
        // a data-wait slowdown from a step applies.
        t.inject = Some("slow:1:1.5:compute".parse().unwrap());
        let err = sweep(&t, attach.clone(), &[2], 0).unwrap_err();
        assert!(err.contains("under attach"), "{err}");
        t.inject = Some("slow:1:1.5:data@30".parse().unwrap());
        assert!(sweep(&t, attach.clone(), &[2], 0).is_ok());
        t.inject = None;
        t.backend = Backend::Sim;
        let err = sweep(&t, attach, &[2], 0).unwrap_err();
        assert!(err.contains("real PyTorch"), "{err}");
    }

    #[test]
    fn a_probe_gets_its_k1_control_last() {
        let t = Template::new(Backend::Sim, None);
        let p = sweep(&t, Experiment::Probe, &[2], 0).unwrap();
        let shape: Vec<(u32, bool)> = p.specs.iter().map(|s| (s.k, s.control)).collect();
        assert_eq!(shape, [(2, false), (1, true)]);
        assert_eq!(p.specs[0].profile.as_deref(), Some(DEFAULT_PROFILE));
        assert!(two_ranks(1, "the probe").is_err());
    }

    #[test]
    fn the_dataset_folder_is_a_data_source_not_an_nccl_setting() {
        let mut t = Template::new(Backend::Nccl, None);
        t.apply_env(&EnvOverlay::from([
            (
                DataSource::ENV.to_string(),
                Some("/data/fmnist".to_string()),
            ),
            ("NCCL_P2P_DISABLE".to_string(), Some("1".to_string())),
        ]));
        let s = t.spec(Experiment::Weak, 1);
        assert_eq!(s.data_source, DataSource::Real("/data/fmnist".into()));
        assert_eq!(
            s.nccl.badges(),
            ["NCCL_NVLS_ENABLE=0", "NCCL_P2P_DISABLE=1"]
        );
    }
}
