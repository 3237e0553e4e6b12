//! The experiment families, one file each: everything the rest of the program asks a family
//! (its name, its command-line flags, its defaults, its plans, the panes and columns it fills,
//! its worker's command line, its JSON record fields) is answered by that file through one trait,
//! [`FamilyKind`]. Code outside `run/family/` asks `experiment.kind()` (or `spec.kind()`) and
//! never matches on a variant: tests/layering.rs counts the lines that do (at most 10).
//!
//! # What a new family provides (docs/architecture.md, "Adding a family")
//! 1. `src/run/family/<name>.rs`: a unit struct implementing [`FamilyKind`]. Required:
//!    `experiment`, `name`, `help`, `owns`, `default_family`, `worker`; every other method has a
//!    default (a plain PyTorch training family under torchrun, per-rank batch, no memory pane,
//!    no own settings) that the file overrides where the family differs.
//! 2. Registration, in this file only: `mod <name>;`, the variant in [`Experiment`] (its serde
//!    name is the family's `name`), the variant in [`Family`] (with the settings only it has),
//!    and one line in [`Experiment::kind`] (`Experiment::X => &x::X,`). The compiler points at
//!    each: both enums are matched exhaustively here.
//! 3. Its worker (workers/ for Python) and its tests.

mod allreduce;
mod attach;
mod fsdp;
mod handrolled;
mod jax;
mod probe;
mod strong;
mod weak;
mod zero1;

use super::handrolled::{HandDispatch, HandReduce, HandRolled};
use super::spec::{
    AttachTarget, DataPath, DataSource, JaxSharding, ModelName, OptimizerName, TorchSettings,
    TorchStrategy,
};
use crate::protocol::Backend;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

/// A run's kind: the family's name alone (the command line's value, the protocol's and the
/// store's `experiment` column). Its behaviour is its [`FamilyKind`] (`kind()`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    Hash,
    PartialOrd,
    Ord,
    Default,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
pub enum Experiment {
    /// The dashboard's first family and `ddptop sim`'s default.
    #[default]
    Weak,
    Strong,
    Probe,
    Allreduce,
    Jax,
    Fsdp,
    Attach,
    Handrolled,
    Zero1,
}

impl Experiment {
    /// The family's answers. The registry: one line per family.
    pub fn kind(self) -> &'static dyn FamilyKind {
        match self {
            Experiment::Weak => &weak::Weak,
            Experiment::Strong => &strong::Strong,
            Experiment::Probe => &probe::Probe,
            Experiment::Allreduce => &allreduce::Allreduce,
            Experiment::Jax => &jax::Jax,
            Experiment::Fsdp => &fsdp::Fsdp,
            Experiment::Attach => &attach::Attach,
            Experiment::Handrolled => &handrolled::Handrolled,
            Experiment::Zero1 => &zero1::Zero1,
        }
    }
    /// Every family, in declaration order.
    pub fn all() -> &'static [Experiment] {
        static ALL: LazyLock<Vec<Experiment>> =
            LazyLock::new(|| <Experiment as strum::IntoEnumIterator>::iter().collect());
        &ALL
    }
    /// The first family whose answers satisfy `q` (`Experiment::find(|k| k.sweeps_allreduce())`:
    /// the all-reduce bench), for code that needs a family by what it does; the default family
    /// when none does.
    pub fn find(q: impl Fn(&dyn FamilyKind) -> bool) -> Experiment {
        let all = Experiment::all().iter().copied();
        all.into_iter().find(|e| q(e.kind())).unwrap_or_default()
    }
    /// The command line's, the protocol's and the store's name (`weak`, `fsdp`).
    pub fn as_str(self) -> &'static str {
        self.kind().name()
    }
    /// Default batch: per-rank for most families, global where the batch is split.
    pub fn default_batch(self) -> u32 {
        self.kind().default_batch()
    }
    /// Whether the family measures samples per second (a scaling curve).
    pub fn has_throughput(self) -> bool {
        self.kind().has_throughput()
    }
    /// Families without communication at k=1 need at least two ranks to mean anything.
    pub fn needs_two_ranks(self) -> bool {
        self.kind().needs_two_ranks()
    }
    /// The dashboard's `s` order (each family's `cycle_position`; a family that needs a script
    /// only when the dashboard has one); a family outside the cycle goes back to its start.
    pub fn next_in_cycle(self, with_attach: bool) -> Experiment {
        let mut cycle: Vec<(u8, Experiment)> = Experiment::all()
            .iter()
            .filter(|e| with_attach || !e.kind().runs_user_script())
            .filter_map(|&e| e.kind().cycle_position().map(|p| (p, e)))
            .collect();
        cycle.sort();
        let at = cycle.iter().position(|(_, e)| *e == self);
        match at {
            Some(i) if i + 1 < cycle.len() => cycle[i + 1].1,
            _ => cycle[0].1,
        }
    }
    /// What the dashboard says when `s` picks this family (`attach`: the script it runs).
    pub fn switch_message(self, attach: Option<&AttachTarget>) -> String {
        self.kind().switch_message(attach)
    }
    /// Why the simulated backend cannot run it (`None`: the simulator has a worker for it).
    pub fn no_sim_worker(self) -> Option<&'static str> {
        self.kind().no_sim_worker()
    }
    /// Worker processes (protocol connections) a run at k has: one process drives all k
    /// devices where the family says so, every other family has one rank per device.
    pub fn processes(self, k: u32) -> u32 {
        if self.kind().one_process() { 1 } else { k }
    }
    /// Whether ddptop applies the book's PyTorch settings to this family on `backend`: its own
    /// PyTorch workers do; the simulator, and families without a PyTorch model, have nothing to
    /// set.
    pub fn book_settings_apply(self, backend: Backend) -> bool {
        backend != Backend::Sim && self.kind().applies_book_settings()
    }
    /// The setting a launch on `backend` gets when the user asked for `asked`.
    pub fn torch_settings(self, asked: TorchSettings, backend: Backend) -> TorchSettings {
        if self.kind().runs_user_script() {
            TorchSettings::Script
        } else if self.book_settings_apply(backend) {
            asked
        } else {
            TorchSettings::Off
        }
    }
}

impl std::fmt::Display for Experiment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Experiment {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let all = Experiment::all();
        all.iter()
            .copied()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = all.iter().map(|e| e.as_str()).collect();
                format!("`{s}` is not one of: {}", names.join(", "))
            })
    }
}

/// `ddptop run <family>`: the families with a `help` (attach has its own command).
impl clap::ValueEnum for Experiment {
    fn value_variants<'a>() -> &'a [Self] {
        static RUN: LazyLock<Vec<Experiment>> = LazyLock::new(|| {
            let all = Experiment::all().iter().copied();
            all.filter(|e| e.kind().help().is_some()).collect()
        });
        &RUN
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let k = self.kind();
        k.help()
            .map(|h| clap::builder::PossibleValue::new(k.name()).help(h))
    }
}

/// A run's experiment and the settings that belong to it alone. Stored as JSON
/// (`{"experiment":"fsdp","strategy":"ddp","optimizer":"adam"}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "experiment", rename_all = "snake_case")]
pub enum Family {
    Weak,
    Strong,
    Probe,
    Allreduce,
    /// The parameters' layout on the mesh.
    Jax {
        sharding: JaxSharding,
    },
    /// FSDP2, ZeRO-1 or DDP (three curves), and the optimizer (Adam by default: memory is the
    /// point).
    Fsdp {
        strategy: TorchStrategy,
        optimizer: OptimizerName,
    },
    /// The user's script; `None` only in a plan made without one, which `plan::sweep` refuses.
    Attach {
        target: Option<AttachTarget>,
    },
    /// The tch loop's dispatch and reduce.
    Handrolled {
        hand: HandRolled,
    },
    /// DDP with ZeroRedundancyOptimizer, and its optimizer (Adam by default, as fsdp's).
    Zero1 {
        optimizer: OptimizerName,
    },
}

/// The flags of `ddptop run` that belong to one family each (flattened into `cli::RunArgs`, in
/// this order in its `--help`); a family reads its own and refuses the others'
/// (`FamilyKind::family_for`). A new family's flag is a field here.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FamilyArgs {
    /// jax: how parameters are laid out on the mesh (the batch is always split).
    #[arg(long, value_enum, default_value_t = JaxSharding::Data)]
    pub sharding: JaxSharding,
    /// fsdp: run only this strategy [default: FSDP then DDP at each k, as the dashboard does].
    #[arg(long, value_enum)]
    pub strategy: Option<TorchStrategy>,
    /// Optimizer of PyTorch runs [default: adam for fsdp, sgd (the book's) elsewhere].
    #[arg(long, value_enum)]
    pub optimizer: Option<OptimizerName>,
    /// handrolled: who issues the replicas' work.
    #[arg(long, value_enum, default_value_t = HandDispatch::Single)]
    pub dispatch: HandDispatch,
    /// handrolled: how the gradients are all-reduced.
    #[arg(long, value_enum, default_value_t = HandReduce::Star)]
    pub reduce: HandReduce,
    /// handrolled: at each k run DDP (weak) and the hand-rolled loop as single+star,
    /// threads+star and threads+ring, interleaved, then print the deficits table.
    #[arg(long)]
    pub deficits: bool,
}

impl FamilyArgs {
    /// The tch loop's variant the flags name (`--dispatch`, `--reduce`).
    pub fn hand(&self) -> HandRolled {
        HandRolled {
            dispatch: self.dispatch,
            reduce: self.reduce,
        }
    }
    /// The one-line refusals of flags that belong to fsdp or handrolled, for every other family.
    pub fn refuse_foreign(&self, optimizer_ok: bool, hand_ok: bool) -> Result<(), String> {
        if self.optimizer.is_some() && !optimizer_ok {
            return Err(
                "--optimizer applies to fsdp only (weak and strong use the book's SGD)".into(),
            );
        }
        if !hand_ok && (self.deficits || self.hand() != HandRolled::default()) {
            return Err("--dispatch, --reduce and --deficits apply to handrolled only".into());
        }
        Ok(())
    }
}

/// What a worker needs of a run to be started (`RunSpec::worker_input`).
#[derive(Debug, Clone, Copy)]
pub struct WorkerInput<'a> {
    pub family: &'a Family,
    pub k: u32,
    pub backend: Backend,
    pub model: ModelName,
    pub batch: u32,
    pub epochs: u32,
    pub samples: u64,
    pub data_path: DataPath,
    pub data_source: &'a DataSource,
    pub torch: TorchSettings,
}

impl WorkerInput<'_> {
    /// `--data synthetic` or `--data real --data-dir DIR`.
    pub fn data_flags(&self) -> Vec<String> {
        match self.data_source {
            DataSource::Synthetic => flags([("--data", "synthetic".into())]),
            DataSource::Real(dir) => flags([
                ("--data", "real".into()),
                ("--data-dir", dir.display().to_string()),
            ]),
        }
    }
    /// The training flags every training worker takes: batch, epochs, samples, model, data
    /// path (the data source's come apart: `data_flags`).
    pub fn train_flags(&self) -> Vec<String> {
        flags([
            ("--batch", self.batch.to_string()),
            ("--epochs", self.epochs.to_string()),
            ("--samples", self.samples.to_string()),
            ("--model", self.model.as_str().into()),
            ("--data-path", self.data_path.as_str().into()),
        ])
    }
    /// `--backend B --torch-settings T`.
    pub fn backend_flags(&self) -> Vec<String> {
        flags([
            ("--backend", self.backend.as_str().into()),
            ("--torch-settings", self.torch.as_str().into()),
        ])
    }
}

/// `[("--a", x), ("--b", y)]` as `--a x --b y`.
pub fn flags<const N: usize>(pairs: [(&str, String); N]) -> Vec<String> {
    pairs
        .into_iter()
        .flat_map(|(f, v)| [f.to_string(), v])
        .collect()
}

/// How a family's worker is started; the supervisor turns it into a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Worker {
    /// `torchrun … -m ddptop_worker ARGS`: one rank per device.
    Torchrun(Vec<String>),
    /// `python -m ddptop_worker ARGS`: one process drives all k devices.
    Python(Vec<String>),
    /// `torchrun … SCRIPT ARGS`: the user's own script, unchanged.
    Script,
    /// The tch loop's Rust binary (one process, k replicas); its data flags.
    Handrolled(Vec<String>),
}

impl Worker {
    /// Whether the launch goes through torchrun (which `--nodes` and `OMP_NUM_THREADS` need).
    pub fn uses_torchrun(&self) -> bool {
        matches!(self, Worker::Torchrun(_) | Worker::Script)
    }
}

/// The columns of a run stored before `family_json`, when each family's settings had columns of
/// their own (`store`): each family reads its own (`FamilyKind::read_columns`).
pub trait StoredColumns {
    /// A column's text (`None`: NULL).
    fn text(&self, col: &str) -> anyhow::Result<Option<String>>;
    /// A column's text, which must not be NULL.
    fn value(&self, col: &str) -> anyhow::Result<String>;
    /// The error for a column whose value this ddptop does not know, naming the run.
    fn unknown(&self, col: &str, value: &str) -> anyhow::Error;
    /// The error for a column that cannot be read, naming the run.
    fn unreadable(&self, col: &str, why: &dyn std::fmt::Display) -> anyhow::Error;
}

/// A column of `cols` that must name one of ddptop's values.
pub fn known_column<T>(
    cols: &dyn StoredColumns,
    col: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> anyhow::Result<T> {
    let v = cols.value(col)?;
    parse(&v).ok_or_else(|| cols.unknown(col, &v))
}

/// Which curves the Scaling pane draws for an anchor run of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalingCurves {
    /// One per strategy (fsdp).
    EachStrategy,
    /// DDP and the tch loop's variants (handrolled).
    Deficits,
    /// Its own curve alone (the user's script).
    Alone,
    /// One of the families drawn side by side at one setting (weak, strong, jax).
    Beside,
    /// Its own curve first, then the side-by-side ones.
    OwnThenBeside,
}

/// The simulated worker's loops (`sim::rank`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimWorker {
    Train,
    Probe,
    Allreduce,
}

/// Everything the program asks a family. One unit struct per file implements it; code outside
/// `run/family/` reaches it through `Experiment::kind` (or `RunSpec::kind`).
pub trait FamilyKind: Sync {
    // ---- identity and command line
    /// Its name as an enum value.
    fn experiment(&self) -> Experiment;
    /// Its name (`weak`): the command line's, the protocol's, the store's.
    fn name(&self) -> &'static str;
    /// `ddptop run`'s help for it; `None`: not a value of `ddptop run` (attach has its command).
    fn help(&self) -> Option<&'static str>;
    /// Whether `f` is this family's.
    fn owns(&self, f: &Family) -> bool;
    /// The family with its default settings (attach: no script yet).
    fn default_family(&self) -> Family;
    /// The family from `ddptop run`'s flags: its own read, the other families' refused.
    fn family_for(&self, a: &FamilyArgs) -> Result<Family, String> {
        a.refuse_foreign(false, false)?;
        Ok(self.default_family())
    }

    // ---- shape of a run
    /// Default batch (per rank unless `global_batch`).
    fn default_batch(&self) -> u32 {
        256
    }
    /// Whether the batch is the global one, split k ways (strong scaling).
    fn global_batch(&self) -> bool {
        false
    }
    /// Whether it measures samples per second (a scaling curve).
    fn has_throughput(&self) -> bool {
        true
    }
    /// Whether it needs two ranks to mean anything (no communication at k=1).
    fn needs_two_ranks(&self) -> bool {
        false
    }
    /// Whether one process drives all k devices (one protocol connection).
    fn one_process(&self) -> bool {
        false
    }
    /// Whether it runs the user's own script (attach): ddptop owns neither its loop nor its
    /// settings, and the script's own record (hooks, phases) stands for the worker's messages.
    fn runs_user_script(&self) -> bool {
        false
    }
    /// Whether ddptop's own PyTorch worker applies the book's settings to it.
    fn applies_book_settings(&self) -> bool {
        false
    }
    /// Where the dashboard's `s` key puts it (`None`: outside the cycle).
    fn cycle_position(&self) -> Option<u8> {
        None
    }
    /// What the dashboard says when `s` picks it.
    fn switch_message(&self, _attach: Option<&AttachTarget>) -> String {
        let per = if self.global_batch() {
            " global"
        } else {
            " per rank"
        };
        format!(
            "next launch: {} scaling (batch {}{per})",
            self.name(),
            self.default_batch()
        )
    }
    /// Why the simulated backend cannot run it (`None`: the simulator has a worker for it).
    fn no_sim_worker(&self) -> Option<&'static str>;

    /// What it runs its gradients through instead of a gloo or NCCL process group, as a
    /// backend column says it (long, short): jax `XLA`, handrolled `copies`/`copy`.
    fn engine(&self) -> Option<(&'static str, &'static str)> {
        None
    }
    /// The unit of its batch in `ddptop run`'s table (` per rank`, ` global`).
    fn batch_unit(&self) -> &'static str {
        if self.global_batch() {
            " global"
        } else {
            " per rank"
        }
    }
    /// The book's settings as its own worker applies them, where not through PyTorch (the tch
    /// loop): what the run's settings say instead of the asked ones.
    fn own_book_settings(&self) -> Option<&'static str> {
        None
    }
    /// Whether its worker is a separate binary that may not be built (`supervisor::handrolled`).
    fn needs_built_binary(&self) -> bool {
        false
    }

    // ---- what it measures: the panes, columns and report sections it fills
    /// ddptop's own PyTorch training loop (weak, strong): the faults that change that loop, the
    /// cost model's prediction and `tune` apply to it.
    fn ddptop_loop(&self) -> bool {
        false
    }
    /// Whether the cost model (`app::predict`) predicts it from its k=1 run and an all-reduce
    /// bench (weak scaling only: strong changes the per-rank batch).
    fn cost_model_predicts(&self) -> bool {
        false
    }
    /// Whether ddptop's worker decides its steps (samples/k in per-rank batches), so that the
    /// timed steps are known before it runs (`run::checks::timed_steps`).
    fn times_steps(&self) -> bool {
        false
    }
    /// The no_sync probe's blocks (the Probe pane and its report model).
    fn probes_no_sync(&self) -> bool {
        false
    }
    /// The all-reduce bandwidth table (the Bench pane, the prediction's bench).
    fn sweeps_allreduce(&self) -> bool {
        false
    }
    /// The Memory pane (per-rank state by strategy, its JSON comparison and report section).
    fn has_memory_pane(&self) -> bool {
        false
    }
    /// Whether every memory report is kept when the run is loaded (not one in 50 steps).
    fn keeps_every_memory_report(&self) -> bool {
        self.has_memory_pane()
    }
    /// The HLO receipt pane (in the Timeline's and Probe's places) and its report section.
    fn has_receipt_pane(&self) -> bool {
        false
    }
    /// The Deficits pane (the tch loop's variants beside DDP).
    fn has_deficits_pane(&self) -> bool {
        false
    }
    /// Whether the bucket timeline (DDP's hooks) is drawn for it.
    fn has_bucket_timeline(&self) -> bool {
        true
    }
    /// Which curves the Scaling pane draws when one of its runs is the anchor.
    fn scaling_curves(&self) -> ScalingCurves {
        ScalingCurves::OwnThenBeside
    }
    /// A curve's name in the Scaling pane's title.
    fn curve_name(&self, _f: &Family) -> String {
        self.name().to_string()
    }
    /// Its name in the Runs pane (fsdp's ZeRO-1 and DDP sides say so).
    fn runs_label(&self, _f: &Family) -> String {
        self.name().to_string()
    }

    // ---- plans (`plan::request`)
    /// Whether its plan adds a k=1 control run (the probe: k=1 has no communication).
    fn k1_control(&self) -> bool {
        false
    }
    /// The launches one of its runs stands for at each k when the template pairs them (fsdp:
    /// one per strategy); `None`: it has no pairs.
    fn strategy_pairs(&self, _f: &Family) -> Option<Vec<Family>> {
        None
    }
    /// The deficits table's columns (DDP first, then the loop's variants); `None`: no table.
    fn deficit_columns(&self) -> Option<Vec<Family>> {
        None
    }

    // ---- the simulator
    /// The simulated worker's loop for it (`None`: `no_sim_worker` says why).
    fn sim_worker(&self) -> Option<SimWorker> {
        None
    }

    // ---- its torch training settings (the Memory pane's sides)
    /// The optimizer a run of it trains with (`None`: the book's SGD).
    fn optimizer(&self, _f: &Family) -> Option<OptimizerName> {
        None
    }
    /// Its memory strategy, where the Memory pane sets runs of it beside DDP and FSDP.
    fn strategy(&self, _f: &Family) -> Option<TorchStrategy> {
        None
    }
    /// The run with the same settings and another `strategy` (a side of the Memory pane's
    /// comparison); `None`: the family has no such sides, the run stays itself.
    fn with_strategy(&self, _f: &Family, _strategy: TorchStrategy) -> Option<Family> {
        None
    }

    // ---- its settings, in a curve's key and title and in the run document
    /// Its own settings as JSON fields for the run document (docs/report.md).
    fn settings(&self, _f: &Family) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }
    /// What a curve's title adds for its settings (`fsdp sharding`, `ddp`, `threads+ring`).
    fn title_part(&self, _f: &Family) -> Option<String> {
        None
    }
    /// What of the family splits a curve.
    fn for_curve(&self, f: &Family) -> Family {
        f.clone()
    }

    /// A run stored before `family_json`: the family from the columns its settings had.
    fn read_columns(&self, _cols: &dyn StoredColumns) -> anyhow::Result<Family> {
        Ok(self.default_family())
    }

    // ---- its worker
    /// How its worker is started.
    fn worker(&self, w: &WorkerInput) -> Worker;
    /// Environment its worker needs beyond ddptop's common one.
    fn worker_env(&self, _w: &WorkerInput) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    // ---- its record
    /// Its own figures for the run document (the report and `--json`), from the memory reports
    /// of a run at k (every rank's phases, in order); none by default.
    fn record(
        &self,
        _f: &Family,
        _k: u32,
        _memory: &[&crate::protocol::Memory],
    ) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }
}

/// An experiment with its family's defaults (`Family::of`).
impl From<Experiment> for Family {
    fn from(e: Experiment) -> Family {
        Family::of(e)
    }
}

impl Family {
    /// `experiment` with its default settings (attach: no script yet).
    pub fn of(experiment: Experiment) -> Family {
        experiment.kind().default_family()
    }

    /// The family's name.
    pub fn experiment(&self) -> Experiment {
        match self {
            Family::Weak => Experiment::Weak,
            Family::Strong => Experiment::Strong,
            Family::Probe => Experiment::Probe,
            Family::Allreduce => Experiment::Allreduce,
            Family::Jax { .. } => Experiment::Jax,
            Family::Fsdp { .. } => Experiment::Fsdp,
            Family::Attach { .. } => Experiment::Attach,
            Family::Handrolled { .. } => Experiment::Handrolled,
            Family::Zero1 { .. } => Experiment::Zero1,
        }
    }

    /// The user's script's family (`ddptop attach`, the dashboard's `--attach`).
    pub fn script(target: AttachTarget) -> Family {
        Family::Attach {
            target: Some(target),
        }
    }

    /// `experiment` with its defaults, and `script` where the family runs the user's script.
    pub fn with_script(experiment: Experiment, script: Option<AttachTarget>) -> Family {
        match experiment.kind().default_family() {
            Family::Attach { .. } => Family::Attach { target: script },
            f => f,
        }
    }

    /// The family's answers.
    pub fn kind(&self) -> &'static dyn FamilyKind {
        self.experiment().kind()
    }

    /// The optimizer the run trains with: its family's setting (fsdp, zero1), the book's SGD
    /// elsewhere.
    pub fn optimizer(&self) -> OptimizerName {
        self.kind().optimizer(self).unwrap_or(OptimizerName::Sgd)
    }

    /// Its memory strategy (fsdp's setting; zero1's own): `None` for the other families.
    pub fn strategy(&self) -> Option<TorchStrategy> {
        self.kind().strategy(self)
    }

    /// jax's parameter layout (`Data`, unused, for every other family).
    pub fn sharding(&self) -> JaxSharding {
        match self {
            Family::Jax { sharding } => *sharding,
            _ => JaxSharding::default(),
        }
    }

    /// The tch loop's variant (`single+star`, unused, for every other family).
    pub fn hand(&self) -> HandRolled {
        match self {
            Family::Handrolled { hand } => *hand,
            _ => HandRolled::default(),
        }
    }

    /// The same run with another `strategy` (the Memory pane's and the Scaling pane's
    /// comparison), as its family says; a family without strategies: unchanged.
    pub fn with_strategy(&self, strategy: TorchStrategy) -> Family {
        self.kind()
            .with_strategy(self, strategy)
            .unwrap_or_else(|| self.clone())
    }

    /// The same handrolled run with another variant (the Deficits pane's columns); every other
    /// family unchanged.
    pub fn with_hand(&self, hand: HandRolled) -> Family {
        match self {
            Family::Handrolled { .. } => Family::Handrolled { hand },
            f => f.clone(),
        }
    }

    /// The family's own settings as its JSON fields, for the run document (docs/report.md):
    /// fsdp `strategy`, `optimizer`; jax `sharding`; handrolled `hand` (`single+star`); attach
    /// `script`, `args`, `cwd`. Empty for the plain families.
    pub fn settings(&self) -> serde_json::Map<String, serde_json::Value> {
        let pairs = self.kind().settings(self);
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// An attached run's script.
    pub fn attach(&self) -> Option<&AttachTarget> {
        match self {
            Family::Attach { target } => target.as_ref(),
            _ => None,
        }
    }

    /// What of the family splits a curve, as the curve key holds it: an attached script's
    /// working folder is not part of it (the same command line from two folders is one curve).
    pub fn for_curve(&self) -> Family {
        self.kind().for_curve(self)
    }

    /// What a curve's title adds for the family's settings (`fsdp sharding`, `ddp`,
    /// `threads+ring`); `None` for the plain families.
    pub fn title_part(&self) -> Option<String> {
        self.kind().title_part(self)
    }

    /// fsdp's optimizer when it is not the family's default Adam (a title's last word).
    pub fn optimizer_part(&self) -> Option<String> {
        Some(self.optimizer())
            .filter(|o| matches!(self, Family::Fsdp { .. }) && *o != OptimizerName::Adam)
            .map(|o| o.as_str().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn every_experiment_has_a_family_and_round_trips_through_json() {
        for &e in Experiment::all() {
            let k = e.kind();
            assert_eq!(
                k.experiment(),
                e,
                "{} registered under another name",
                k.name()
            );
            assert!(k.owns(&Family::of(e)));
            let f = Family::of(e);
            assert_eq!(f.experiment(), e);
            let json = serde_json::to_string(&f).unwrap();
            assert!(
                json.contains(&format!("\"experiment\":\"{}\"", e.as_str())),
                "{json}"
            );
            assert_eq!(serde_json::from_str::<Family>(&json).unwrap(), f);
            assert_eq!(
                serde_json::to_string(&e).unwrap(),
                format!("\"{}\"", k.name())
            );
            assert_eq!(k.name().parse::<Experiment>().unwrap(), e);
            for &other in Experiment::all() {
                assert_eq!(other.kind().owns(&f), other == e, "{e} and {other}");
            }
        }
        let f = Family::Fsdp {
            strategy: TorchStrategy::Ddp,
            optimizer: OptimizerName::Sgd,
        };
        assert_eq!(
            serde_json::to_string(&f).unwrap(),
            r#"{"experiment":"fsdp","strategy":"ddp","optimizer":"sgd"}"#
        );
        assert_eq!(f.title_part().as_deref(), Some("ddp"));
        assert_eq!(f.optimizer_part().as_deref(), Some("sgd"));
        assert_eq!(f.optimizer(), OptimizerName::Sgd);
        assert_eq!(Family::Weak.optimizer(), OptimizerName::Sgd);
        assert_eq!(
            serde_json::Value::Object(f.settings()),
            serde_json::json!({"strategy": "ddp", "optimizer": "sgd"})
        );
        assert!(Family::Weak.settings().is_empty());
    }

    /// The answers the program used to spell as matches on the variants (before issue 49), one
    /// row per family: moving them into the family files changed none.
    #[test]
    fn each_family_answers_as_the_matches_it_replaced_did() {
        let data = DataSource::Synthetic;
        let row = |e: Experiment| {
            let k = e.kind();
            let family = Family::of(e);
            let input = WorkerInput {
                family: &family,
                k: 4,
                backend: Backend::Gloo,
                model: ModelName::Tiny,
                batch: 256,
                epochs: 2,
                samples: 1000,
                data_path: DataPath::Device,
                data_source: &data,
                torch: TorchSettings::Off,
            };
            let flags = [
                ("throughput", k.has_throughput()),
                ("two-ranks", k.needs_two_ranks()),
                ("global", k.global_batch()),
                ("script", k.runs_user_script()),
                ("book", e.book_settings_apply(Backend::Gloo)),
                ("loop", k.ddptop_loop()),
                ("predicted", k.cost_model_predicts()),
                ("steps", k.times_steps()),
                ("probe", k.probes_no_sync()),
                ("bench", k.sweeps_allreduce()),
                ("memory", k.has_memory_pane()),
                ("receipt", k.has_receipt_pane()),
                ("deficits", k.has_deficits_pane()),
                ("control", k.k1_control()),
                ("binary", k.needs_built_binary()),
                ("torchrun", k.worker(&input).uses_torchrun()),
                ("sim", k.no_sim_worker().is_none()),
            ];
            let on: Vec<&str> = flags.iter().filter(|f| f.1).map(|f| f.0).collect();
            let (batch, procs) = (e.default_batch(), e.processes(4));
            format!("{e} {batch} {procs}: {}", on.join(" "))
        };
        let rows: Vec<String> = [
            Experiment::Weak,
            Experiment::Strong,
            Experiment::Probe,
            Experiment::Allreduce,
            Experiment::Jax,
            Experiment::Fsdp,
            Experiment::Attach,
            Experiment::Handrolled,
            Experiment::Zero1,
        ]
        .into_iter()
        .map(row)
        .collect();
        assert_eq!(
            rows,
            [
                "weak 256 4: throughput book loop predicted steps torchrun sim",
                "strong 512 4: throughput global book loop steps torchrun sim",
                "probe 256 4: two-ranks book probe control torchrun sim",
                "allreduce 256 4: two-ranks bench torchrun sim",
                "jax 256 1: throughput receipt",
                "fsdp 256 4: throughput book steps memory torchrun",
                "attach 256 4: throughput script torchrun",
                "handrolled 256 4: throughput deficits binary",
                "zero1 256 4: throughput book steps memory torchrun",
            ]
        );
        let attach = Experiment::Attach;
        assert_eq!(
            attach.torch_settings(TorchSettings::Book, Backend::Gloo),
            TorchSettings::Script
        );
        assert_eq!(
            Experiment::Jax.torch_settings(TorchSettings::Book, Backend::Gloo),
            TorchSettings::Off
        );
        assert_eq!(
            Experiment::Weak.torch_settings(TorchSettings::Book, Backend::Sim),
            TorchSettings::Off
        );
    }

    #[test]
    fn s_cycles_through_the_families_and_attach_only_with_a_script() {
        for with_attach in [false, true] {
            let mut seen = vec![Experiment::Weak];
            let mut e = Experiment::Weak.next_in_cycle(with_attach);
            while e != Experiment::Weak {
                seen.push(e);
                e = e.next_in_cycle(with_attach);
            }
            let names: Vec<&str> = seen.iter().map(|e| e.as_str()).collect();
            let want = if with_attach {
                vec![
                    "weak",
                    "strong",
                    "fsdp",
                    "jax",
                    "handrolled",
                    "attach",
                    "zero1",
                ]
            } else {
                vec!["weak", "strong", "fsdp", "jax", "handrolled", "zero1"]
            };
            assert_eq!(names, want);
        }
        assert_eq!(Experiment::Probe.next_in_cycle(false), Experiment::Weak);
    }

    #[test]
    fn names_serde_and_clap_agree() {
        for &e in Experiment::all() {
            if let Some(v) = e.to_possible_value() {
                assert_eq!(v.get_name(), e.as_str());
                assert_eq!(Experiment::from_str(e.as_str(), false).unwrap(), e);
            }
        }
        assert!(Experiment::Attach.to_possible_value().is_none());
        assert_eq!(
            "sideways".parse::<Experiment>().unwrap_err(),
            "`sideways` is not one of: weak, strong, probe, allreduce, jax, fsdp, attach, handrolled, zero1"
        );
    }
}
