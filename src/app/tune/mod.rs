//! `ddptop tune`'s table as every front end shows it (the CLI's text and JSON, the dashboard's
//! live Tune table): each candidate's setting, prediction, measured runs and where it stands,
//! and the verdict. `tune::driver` fills it; nothing here runs anything.
//!
//! `space` is what is tried, `predict` what the cost model expects of each, `decide` the rule
//! that recommends one (docs/methods.md, "Tuning").

pub mod decide;
pub mod predict;
pub mod space;

use crate::protocol::Instrument;
use crate::run::RunView;
use decide::{Measured, Verdict};
use space::Candidate;

/// Where one candidate stands; its name (snake_case: `predicting`) is the table's and JSON's.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString, strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
pub enum RowState {
    /// Waiting for its all-reduce sweep (or the k=1 run).
    Predicting,
    /// Predicted; not (yet) chosen to be measured.
    Predicted,
    /// A finalist with runs still to go.
    Measuring,
    /// A finalist with all its runs.
    Done,
    /// Not measured: predicted lower than the finalists, or cut by the budget.
    Skipped,
    /// A measured run of it did not complete.
    Failed,
}

impl RowState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One candidate's row.
#[derive(Debug, Clone)]
pub struct Row {
    pub cand: Candidate,
    pub predicted: Result<predict::Prediction, String>,
    pub state: RowState,
    /// Chosen to be measured (the default always is).
    pub finalist: bool,
    /// Runs planned for it (0 until the finalists are chosen).
    pub planned: usize,
    pub measured: Measured,
    /// Its measured runs that did not complete (`ID STATUS: reason`).
    pub failed: Vec<String>,
}

impl Row {
    pub fn new(cand: Candidate, predicted: Result<predict::Prediction, String>) -> Row {
        Row {
            cand,
            predicted,
            state: RowState::Predicting,
            finalist: false,
            planned: 0,
            measured: Measured::default(),
            failed: Vec::new(),
        }
    }

    pub fn predicted_sps(&self) -> Option<f64> {
        self.predicted.as_ref().ok().map(|p| p.samples_per_s)
    }

    /// Runs that ended, completed or not.
    pub fn runs_done(&self) -> usize {
        self.measured.repeats() + self.failed.len()
    }
}

/// Where the whole tuning stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// The k=1 run of the default and the all-reduce sweeps: `done` of `total` runs ended.
    Predicting {
        done: usize,
        total: usize,
    },
    /// The interleaved runs of the default and the finalists.
    Measuring {
        done: usize,
        total: usize,
    },
    Done,
    /// Stopped by the user (Esc, x, Ctrl-C): the figures so far, nothing kept.
    Cancelled,
    /// It could not go on (the k=1 run of the default failed): why.
    Failed(String),
}

impl Phase {
    pub fn finished(&self) -> bool {
        matches!(self, Phase::Done | Phase::Cancelled | Phase::Failed(_))
    }
}

/// A preset written from the recommendation.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    pub name: String,
    pub path: String,
}

/// The whole table.
#[derive(Debug, Clone)]
pub struct Board {
    /// `weak at k=2 on sim (book-pcie)`, `train.py at k=2 on gloo`.
    pub title: String,
    pub simulated: bool,
    pub k: u32,
    pub phase: Phase,
    /// The default first.
    pub rows: Vec<Row>,
    /// Runs of each finalist and of the default.
    pub repeats: usize,
    /// The k=1 run predictions come from.
    pub base_run: Option<String>,
    /// The run going now, the line saying what it is for.
    pub running: Option<(String, String)>,
    /// What the user must know about the figures (budget cuts, DDP settings left alone).
    pub notes: Vec<String>,
    pub verdict: Option<Verdict>,
    pub saved: Option<Saved>,
    /// The recommendation was not kept: why (a config that did not read back, …).
    pub save_error: Option<String>,
}

impl Board {
    pub fn new(title: String, simulated: bool, k: u32, total: usize) -> Board {
        Board {
            title,
            simulated,
            k,
            phase: Phase::Predicting { done: 0, total },
            rows: Vec::new(),
            repeats: 0,
            base_run: None,
            running: None,
            notes: Vec::new(),
            verdict: None,
            saved: None,
            save_error: None,
        }
    }

    /// The recommended row and its gain of medians over the default (%).
    pub fn recommended(&self) -> Option<(&Row, f64)> {
        match &self.verdict {
            Some(Verdict::Recommend {
                candidate,
                gain_pct,
            }) => Some((&self.rows[*candidate], *gain_pct)),
            _ => None,
        }
    }

    /// The measured finalist with the highest median and its gain over the default's median
    /// (%), recommended or not; `None` before anything besides the default was measured.
    pub fn best_measured(&self) -> Option<(&Row, f64)> {
        let def = self.rows.first()?.measured.median()?;
        self.rows
            .iter()
            .skip(1)
            .filter_map(|r| Some((r, r.measured.median()?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(r, m)| (r, (m / def - 1.0) * 100.0))
    }

    /// The verdict in one sentence (`None` until there is one).
    pub fn verdict_line(&self) -> Option<String> {
        Some(match self.verdict.as_ref()? {
            Verdict::Recommend {
                candidate,
                gain_pct,
            } => format!(
                "{}: {gain_pct:+.1}% samples/s over the default (its slowest run beat the default's fastest)",
                self.rows[*candidate].cand.name
            ),
            Verdict::DefaultIsAsGood { best, why } => format!(
                "the default is as good as anything tried ({why}{})",
                best.map(|i| format!("; highest median: {}", self.rows[i].cand.name))
                    .unwrap_or_default()
            ),
            Verdict::NotCompared { why } => format!("no recommendation: {why}"),
        })
    }
}

/// Whether `ddptop tune --attach` may put DDP settings into the script's own DDP constructor,
/// judged from its k=1 run; `Err`: why not, in one line (then only environment knobs are tuned).
///
/// The rule (docs/tune.md, "Attached scripts"): ddptop changes DDP's constructor only where it
/// saw exactly what it changes — a DDP module built by the script with none of the three tuned
/// arguments of its own, and the gradients reduced by DDP's all-reduce (no comm hook of the
/// script's). An argument the script passes is its author's choice (`static_graph=False` or
/// `gradient_as_bucket_view=False` may be there because the script needs it); a comm hook of the
/// script's (compression, PowerSGD keeping state per bucket) sees the buckets, and ddptop times
/// none of them to predict from.
pub fn ddp_adjustable(base: &RunView) -> Result<(), String> {
    match base.seen.observed.ddp_module {
        Some(true) => {}
        Some(false) => return Err("its k=1 run built no DistributedDataParallel module".into()),
        None => return Err("its k=1 run did not say whether it built a DDP module".into()),
    }
    if !base.seen.observed.ddp_args.is_empty() {
        return Err(format!(
            "the script passes {} to DDP itself",
            base.seen.observed.ddp_args.join(", ")
        ));
    }
    if matches!(base.seen.instrument, Some(Instrument::StepsOnly)) {
        return Err("the script registers its own comm hook".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{Experiment, RunSpec};

    /// The row states' names as the hand-written table spelled them (issue 49), both ways.
    #[test]
    fn row_state_names_are_the_old_names_and_round_trip() {
        use strum::VariantArray;
        let names: Vec<&str> = RowState::VARIANTS.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            [
                "predicting",
                "predicted",
                "measuring",
                "done",
                "skipped",
                "failed"
            ]
        );
        for s in RowState::VARIANTS {
            assert_eq!(s.as_str().parse::<RowState>(), Ok(*s));
        }
    }

    fn run() -> RunView {
        let spec = RunSpec::new(Experiment::Attach, 1, crate::protocol::Backend::Gloo);
        let mut r = RunView::new("r1".into(), spec, std::time::Instant::now(), 0.0);
        r.seen.observed.ddp_module = Some(true);
        r.seen.instrument = Some(Instrument::Full);
        r
    }

    #[test]
    fn ddp_settings_are_tuned_only_where_the_script_left_them_to_ddp() {
        assert_eq!(ddp_adjustable(&run()), Ok(()));
        let mut none = run();
        none.seen.observed.ddp_module = Some(false);
        assert!(
            ddp_adjustable(&none)
                .unwrap_err()
                .contains("no DistributedDataParallel")
        );
        let mut own = run();
        own.seen.observed.ddp_args = vec!["bucket_cap_mb".into()];
        assert_eq!(
            ddp_adjustable(&own),
            Err("the script passes bucket_cap_mb to DDP itself".into())
        );
        let mut hook = run();
        hook.seen.instrument = Some(Instrument::StepsOnly);
        assert!(ddp_adjustable(&hook).unwrap_err().contains("comm hook"));
    }

    #[test]
    fn the_best_measured_and_the_verdict_read_from_the_rows() {
        let mut b = Board::new("weak at k=2".into(), true, 2, 1);
        let mut rows = vec![
            Row::new(Candidate::default_one(), Err("x".into())),
            Row::new(
                Candidate::bucket_cap(crate::run::BucketCapMb::new(5.0).unwrap()),
                Err("x".into()),
            ),
        ];
        for (r, xs) in rows
            .iter_mut()
            .zip([[100.0, 101.0, 99.0], [110.0, 111.0, 109.0]])
        {
            for (i, x) in xs.iter().enumerate() {
                r.measured.push(format!("r{i}"), *x);
            }
        }
        b.rows = rows;
        let (best, gain) = b.best_measured().unwrap();
        assert_eq!(best.cand.name, "bucket_cap_mb=5");
        assert!((gain - 10.0).abs() < 1e-9);
        b.verdict = Some(Verdict::Recommend {
            candidate: 1,
            gain_pct: gain,
        });
        assert!(
            b.verdict_line()
                .unwrap()
                .starts_with("bucket_cap_mb=5: +10.0%")
        );
        assert_eq!(b.recommended().unwrap().0.cand.name, "bucket_cap_mb=5");
    }
}
