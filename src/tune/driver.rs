//! The one tuning procedure, for `ddptop tune` and the dashboard's `T` alike. It runs nothing
//! itself: it hands out batches of launches (`take_launches`), is told which run each became
//! (`launched`), reads the runs when they end (`poll`), and keeps the table (`board`) that both
//! front ends show. A front end owns the engine and its queue; it pushes each batch into the
//! queue under one sweep id and calls `poll` after every event.
//!
//! 1. **Predict**: the default at k=1 and, on real backends, an all-reduce sweep at k per
//!    distinct NCCL setting; each candidate is predicted as soon as its sweep is in.
//! 2. **Measure**: the default and the finalists interleaved, A B C A B C …
//! 3. **Decide** (`app::tune::decide`).

use crate::app::progress::eta_label;
use crate::app::tune::decide::{self, Verdict};
use crate::app::tune::space::{self, Candidate};
use crate::app::tune::{Board, Phase, Row, RowState, predict};
use crate::costmodel::Profile;
use crate::plan::Template;
use crate::protocol::Backend;
use crate::run::{Experiment, Family, RunSpec, RunStatus, RunView};
use crate::util::count;
use std::time::Instant;

/// What to tune.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Everything of the runs but the candidate's settings (presets and `--env` applied; for
    /// an attached script, `attach` set).
    pub template: Template,
    /// `Weak`, `Strong` or `Attach` (with the script).
    pub family: Family,
    pub k: u32,
    /// Bucket sizes to try instead of the built-in ones (empty: those).
    pub bucket_caps: Vec<crate::run::BucketCapMb>,
    pub repeats: u32,
    pub finalists: u32,
    pub min_gain_pct: f64,
    pub budget_s: f64,
}

impl Plan {
    /// The family's plain name.
    pub fn experiment(&self) -> Experiment {
        self.family.experiment()
    }

    /// `--repeats 3 --finalists 3 --min-gain 1 --budget 10m`, the command's defaults.
    pub fn new(template: Template, family: impl Into<Family>, k: u32) -> Plan {
        Plan {
            template,
            family: family.into(),
            k,
            bucket_caps: Vec::new(),
            repeats: 3,
            finalists: 3,
            min_gain_pct: decide::MIN_GAIN_PCT,
            budget_s: 600.0,
        }
    }
}

/// What a launch of the tuning is for.
#[derive(Debug, Clone, PartialEq)]
enum Purpose {
    Base,
    Sweep(Vec<(String, String)>),
    Measure(usize),
}

/// Something a front end may say (the CLI on stderr, the dashboard in its log).
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A line about the tuning (what a run is for, a setting left alone, the verdict).
    Note(String),
    /// The tuning is over (done, cancelled or failed): the board says how.
    Finished,
}

pub struct Tuning {
    plan: Plan,
    target: RunSpec,
    base_spec: RunSpec,
    profile: Option<Profile>,
    board: Board,
    /// The current batch's purposes, in launch order, and how many of them have been launched
    /// and read back.
    batch: Vec<Purpose>,
    launched: Vec<String>,
    read: usize,
    /// Handed out by `take_launches`.
    pending: Vec<RunSpec>,
    sweeps_done: Vec<Vec<(String, String)>>,
    base: Option<RunView>,
    base_wall: f64,
    /// Whether DDP's constructor may be changed (always on ddptop's own workers); why not.
    ddp_ok: Result<(), String>,
    started: Instant,
    cancelled: bool,
    /// Stopped because `plan.budget_s` ran out (then `cancelled` too: nothing more launches),
    /// which ends the tuning as done with what was measured, not as cancelled by the user.
    budget_spent: bool,
}

/// The all-reduce sweep at k with the run's settings and `nccl` on top: what times a
/// candidate's buckets.
fn sweep_spec(template: &Template, nccl: &[(String, String)], k: u32) -> RunSpec {
    let mut t = template.clone();
    for (name, value) in nccl {
        t.nccl.set(name, Some(value.clone()));
    }
    t.spec(Experiment::find(|f| f.sweeps_allreduce()), k)
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

/// The figure a measured run gives, or why it gives none.
fn sps_of(r: &RunView) -> Result<f64, String> {
    if r.status != RunStatus::Completed {
        return Err(format!(
            "{} {}: {}",
            r.id,
            r.status.as_str(),
            r.reason.as_deref().unwrap_or("no reason given")
        ));
    }
    r.figures
        .aggregate
        .as_ref()
        .map(|a| a.samples_per_s)
        .filter(|s| *s > 0.0)
        .ok_or_else(|| format!("{} measured no throughput", r.id))
}

impl Tuning {
    /// Check the plan and hand out the prediction runs (`take_launches`).
    pub fn new(plan: Plan) -> Result<Tuning, String> {
        let t = &plan.template;
        let kind = plan.family.kind();
        if !(kind.ddptop_loop() || kind.runs_user_script() && plan.family.attach().is_some()) {
            return Err(format!(
                "tune measures weak or strong scaling or an attached script, not {}",
                plan.experiment()
            ));
        }
        if plan.k < 2 {
            return Err("tune needs k ≥ 2: at k=1 nothing communicates".into());
        }
        let target = t.spec(plan.family.clone(), plan.k);
        // The k=1 run whose compute the k-rank step keeps: weak at the target's per-rank
        // batch (for strong scaling, the global batch split k ways); the script itself at k=1.
        let base_spec = if kind.runs_user_script() {
            t.spec(plan.family.clone(), 1)
        } else {
            let mut b = t.clone();
            b.batch = Some(target.per_rank_batch());
            b.spec(Experiment::find(|f| f.cost_model_predicts()), 1)
        };
        let profile = t.profile.as_deref().and_then(Profile::get);
        // The NCCL settings to sweep do not depend on the model; the bucket sizes do.
        let mut sweeps = Vec::new();
        if t.backend != Backend::Sim {
            for c in space::space(t.backend, profile.as_ref(), &t.nccl, None) {
                let e = c.nccl_env();
                if !sweeps.contains(&e) {
                    sweeps.push(e);
                }
            }
        }
        let what = match plan.family.attach() {
            Some(a) => a.label(),
            None => plan.experiment().as_str().to_string(),
        };
        let on = match &t.profile {
            Some(p) if t.backend == Backend::Sim => format!("sim ({p})"),
            _ => t.backend.as_str().to_string(),
        };
        let board = Board::new(
            format!("{what} at k={} on {on}", plan.k),
            t.backend == Backend::Sim,
            plan.k,
            1 + sweeps.len(),
        );
        let mut board = board;
        // The repeats asked for, until the finalists are chosen: a tuning stopped before then
        // still says what it would have run.
        board.repeats = plan.repeats as usize;
        if (plan.repeats as usize) < decide::MIN_REPEATS {
            board.notes.push(format!(
                "--repeats {}: fewer than {} interleaved runs each, so these are measurements only, with no recommendation",
                plan.repeats,
                decide::MIN_REPEATS
            ));
        }
        let mut batch = vec![Purpose::Base];
        let mut pending = vec![base_spec.clone()];
        for e in &sweeps {
            batch.push(Purpose::Sweep(e.clone()));
            pending.push(sweep_spec(t, e, plan.k));
        }
        Ok(Tuning {
            target,
            base_spec,
            profile,
            board,
            batch,
            launched: Vec::new(),
            read: 0,
            pending,
            sweeps_done: Vec::new(),
            base: None,
            base_wall: 1.0,
            ddp_ok: Ok(()),
            started: Instant::now(),
            cancelled: false,
            budget_spent: false,
            plan,
        })
    }

    pub fn board(&self) -> &Board {
        &self.board
    }

    pub fn board_mut(&mut self) -> &mut Board {
        &mut self.board
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The k-rank run being tuned.
    pub fn target(&self) -> &RunSpec {
        &self.target
    }

    pub fn finished(&self) -> bool {
        self.board.phase.finished()
    }

    pub fn cancelled(&self) -> bool {
        self.cancelled
    }

    /// The plan as far as it is known before anything ran: what predicts, and how the rest is
    /// fitted to the budget (a run's time is known only once the k=1 run has ended).
    pub fn start_line(&self) -> String {
        let sweeps = self.pending.len().saturating_sub(1);
        format!(
            "tune: {} budget: first the default at k=1{} to predict from; then the measuring, estimated from the k=1 run's time and cut to what is left",
            eta_label(self.plan.budget_s),
            if sweeps > 0 {
                format!(" and {}", count(sweeps, "all-reduce sweep"))
            } else {
                String::new()
            }
        )
    }

    /// Seconds of the budget still left, never below zero.
    pub fn budget_left_s(&self) -> f64 {
        (self.plan.budget_s - self.started.elapsed().as_secs_f64()).max(0.0)
    }

    /// Call after every event: once the budget is spent, nothing more is handed out and the
    /// line to say is returned (once); the front end then drops the tuning's queued launches
    /// and stops its active run, as for a cancel, and the tuning ends as done with what was
    /// measured. The budget is a promise, so a run going past it is stopped, not waited for.
    pub fn check_budget(&mut self) -> Option<String> {
        if self.finished() || self.budget_spent || self.budget_left_s() > 0.0 {
            return None;
        }
        self.budget_spent = true;
        self.cancel();
        let measured: usize = self.board.rows.iter().map(|r| r.measured.repeats()).sum();
        let note = format!(
            "the {} budget is spent: stopped after {}, with what was measured",
            eta_label(self.plan.budget_s),
            count(measured, "measured run")
        );
        self.board.notes.push(note.clone());
        Some(format!("tune: {note}"))
    }

    /// The launches to queue now, in order (empty between batches).
    pub fn take_launches(&mut self) -> Vec<RunSpec> {
        std::mem::take(&mut self.pending)
    }

    /// The front end's queue started the next launch of this tuning as run `id`: the line
    /// that says what it is for.
    pub fn launched(&mut self, id: &str, spec: &RunSpec) -> String {
        let i = self.launched.len();
        self.launched.push(id.to_string());
        let n = self.batch.len();
        let what = match self.batch.get(i) {
            Some(Purpose::Base) => format!("predict 1/{n}: the default at k=1"),
            Some(Purpose::Sweep(e)) => format!(
                "predict {}/{n}: all-reduce sweep at k={}{}",
                i + 1,
                spec.k,
                if e.is_empty() {
                    String::new()
                } else {
                    format!(
                        " with {}",
                        e.iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    )
                }
            ),
            Some(Purpose::Measure(r)) => format!(
                "measure {}/{n}: {} at k={}",
                i + 1,
                self.board.rows[*r].cand.name,
                spec.k
            ),
            None => format!("an extra launch at k={}", spec.k),
        };
        let line = format!("tune: {what} as {id}");
        self.board.running = Some((id.to_string(), what));
        line
    }

    /// Stop after what has ended: nothing more is handed out; the front end drops the queued
    /// launches and stops the active one, and `poll` then finishes with the figures so far.
    pub fn cancel(&mut self) {
        self.cancelled = true;
        self.pending.clear();
    }

    /// Finish with what ended, whatever is still going (the CLI after an interrupted loop: its
    /// runs were stopped by the engine's shutdown).
    pub fn close(&mut self, runs: &[RunView]) {
        self.cancel();
        let _ = self.poll(runs, 0);
        if !self.finished() {
            self.read = self.launched.len();
            self.finish();
        }
    }

    /// Read the runs that ended. `runs`: every run the front end knows (sweeps are found
    /// there); `waiting`: this tuning's launches still in the front end's queue. Returns what to
    /// say; `true` in the second place when the board changed.
    pub fn poll(&mut self, runs: &[RunView], waiting: usize) -> (Vec<Progress>, bool) {
        let mut said = Vec::new();
        let mut changed = false;
        while self.read < self.launched.len() {
            let id = self.launched[self.read].clone();
            let Some(run) = runs.iter().find(|r| r.id == id) else {
                break;
            };
            if !run.status.is_final() {
                break;
            }
            self.read += 1;
            changed = true;
            if self.board.running.as_ref().is_some_and(|(r, _)| *r == id) {
                self.board.running = None;
            }
            let purpose = self.batch.get(self.read - 1).cloned();
            match purpose {
                Some(Purpose::Base) => self.base_done(run, runs, &mut said),
                Some(Purpose::Sweep(e)) => {
                    self.sweeps_done.push(e);
                    self.predict_rows(runs);
                }
                Some(Purpose::Measure(i)) => self.measure_done(i, run, &mut said),
                None => {}
            }
            if self.board.phase.finished() {
                said.push(Progress::Finished);
                return (said, true);
            }
            self.count();
        }
        let over = self.read == self.launched.len() && waiting == 0 && self.pending.is_empty();
        if !over || self.board.phase.finished() {
            return (said, changed);
        }
        // The batch is over (or ended short: a launch refused, the tuning cancelled).
        match self.board.phase {
            Phase::Predicting { .. } if !self.cancelled && self.base.is_some() => {
                self.choose_finalists(runs, &mut said);
            }
            Phase::Predicting { .. } if !self.cancelled => {
                self.board.phase = Phase::Failed(
                    "the default k=1 run was not launched; nothing to predict from".into(),
                );
            }
            _ => self.finish(),
        }
        if self.board.phase.finished() {
            if let Some(v) = self.board.verdict_line() {
                said.push(Progress::Note(format!("tune: {v}")));
            }
            said.push(Progress::Finished);
        }
        (said, true)
    }

    /// A measured run of row `i` ended: its figure, or its failure (retried once).
    fn measure_done(&mut self, i: usize, run: &RunView, said: &mut Vec<Progress>) {
        // A run this tuning stopped itself (cancel, budget) says nothing about the setting.
        if self.cancelled && run.status == RunStatus::Stopped {
            return;
        }
        let row = &mut self.board.rows[i];
        let mut retry = false;
        match sps_of(run) {
            Ok(s) => row.measured.push(run.id.clone(), s),
            Err(e) => {
                // One failed run may be the machine's (a rank killed, a port taken): the
                // candidate gets one more run, and the failure stays in its record. A second
                // failure is the setting's.
                retry = row.failed.is_empty() && !self.cancelled;
                said.push(Progress::Note(format!(
                    "tune: {} did not measure: {e}{}",
                    row.cand.name,
                    if retry {
                        "; measuring it once more"
                    } else {
                        ""
                    }
                )));
                row.failed.push(e);
            }
        }
        if retry {
            row.planned += 1;
        }
        row.state = if row.failed.len() >= 2 || (!row.failed.is_empty() && !retry && self.cancelled)
        {
            RowState::Failed
        } else if row.runs_done() >= row.planned {
            RowState::Done
        } else {
            RowState::Measuring
        };
        if retry {
            let spec = self.measure_spec(i);
            self.pending.push(spec);
            self.batch.push(Purpose::Measure(i));
        }
    }

    /// Runs ended of the current batch, on the board.
    fn count(&mut self) {
        let (done, total) = (self.read, self.batch.len());
        match &mut self.board.phase {
            Phase::Predicting { done: d, total: t } | Phase::Measuring { done: d, total: t } => {
                *d = done;
                *t = total;
            }
            _ => {}
        }
    }

    fn base_done(&mut self, run: &RunView, runs: &[RunView], said: &mut Vec<Progress>) {
        if run.status != RunStatus::Completed && self.cancelled {
            self.finish();
            return;
        }
        if run.status != RunStatus::Completed {
            self.board.phase = Phase::Failed(format!(
                "the default k=1 run did not complete ({}: {}); nothing to predict from",
                run.status.as_str(),
                run.reason.as_deref().unwrap_or("no reason given")
            ));
            return;
        }
        self.board.base_run = Some(run.id.clone());
        self.base_wall = (run.clock.ended_unix.unwrap_or(run.clock.started_unix)
            - run.clock.started_unix)
            .max(1.0);
        if self.plan.family.kind().runs_user_script() {
            self.ddp_ok = crate::app::tune::ddp_adjustable(run);
            if let Err(why) = &self.ddp_ok {
                let line = format!(
                    "DDP settings not tuned: {why}; only environment knobs are{}",
                    if self.plan.template.backend == Backend::Nccl {
                        " (NCCL's)"
                    } else {
                        " (none on gloo)"
                    }
                );
                said.push(Progress::Note(format!("tune: {line}")));
                self.board.notes.push(line);
            }
        }
        self.base = Some(run.clone());
        let t = &self.plan.template;
        let grad_bytes = crate::app::predict::ready_times(run)
            .ok()
            .map(|(b, _)| b.iter().map(|x| x.bytes).sum())
            .or(run.figures.grad_bytes);
        let mut cands = space::space(t.backend, self.profile.as_ref(), &t.nccl, grad_bytes);
        if !self.plan.bucket_caps.is_empty() {
            cands.retain(|c| c.cap_mb().is_none());
            cands.extend(
                self.plan
                    .bucket_caps
                    .iter()
                    .map(|mb| Candidate::bucket_cap(*mb)),
            );
        }
        if self.ddp_ok.is_err() {
            cands.retain(|c| c.is_default() || c.env.iter().all(|(k, _)| k.starts_with("NCCL_")));
        }
        self.board.rows = cands
            .into_iter()
            .map(|c| Row::new(c, Err(String::new())))
            .collect();
        self.predict_rows(runs);
    }

    /// The per-rank samples of one step at k: the target's, or what the script's k=1 run
    /// showed.
    fn per_rank(&self, base: &RunView) -> Result<u32, String> {
        if !self.plan.family.kind().runs_user_script() {
            return Ok(self.target.per_rank_batch());
        }
        base.seen
            .observed
            .per_rank_batch()
            .and_then(|b| u32::try_from(b).ok())
            .ok_or_else(|| format!("k=1 run {} showed no batch size", base.id))
    }

    /// Predict every row whose sweep is in (all of them on the simulator).
    fn predict_rows(&mut self, runs: &[RunView]) {
        let Some(base) = self.base.clone() else {
            return;
        };
        let sim = self.plan.template.backend == Backend::Sim;
        let per_rank = self.per_rank(&base);
        for r in &mut self.board.rows {
            let env = r.cand.nccl_env();
            if !sim && !self.sweeps_done.contains(&env) {
                r.state = RowState::Predicting;
                continue;
            }
            r.predicted = per_rank.clone().and_then(|per_rank| {
                predict::predict(
                    &base,
                    &sweep_spec(&self.plan.template, &env, self.plan.k),
                    per_rank,
                    r.cand.cap_mb(),
                    runs,
                )
            });
            r.state = RowState::Predicted;
        }
    }

    /// All predictions are in: add the best bucket size with the best NCCL setting, choose
    /// the finalists within the budget and hand out the interleaved runs.
    fn choose_finalists(&mut self, runs: &[RunView], said: &mut Vec<Progress>) {
        // A sweep that never ran leaves its candidates unpredicted: say so in their row.
        for r in &mut self.board.rows {
            if r.state == RowState::Predicting {
                r.predicted = Err("its all-reduce sweep did not complete".into());
                r.state = RowState::Predicted;
            }
        }
        dedupe_layouts(&mut self.board.rows);
        let pred = |r: &Row| r.predicted_sps().unwrap_or(f64::NAN);
        let rows = &self.board.rows;
        let default_pred = rows.first().map_or(f64::NAN, pred);
        let best_of = |f: &dyn Fn(&Candidate) -> bool| {
            rows.iter()
                .filter(|r| f(&r.cand) && r.cand.modelled && pred(r) > default_pred)
                .max_by(|x, y| pred(x).total_cmp(&pred(y)))
                .map(|r| r.cand.clone())
        };
        let combined = match (
            best_of(&|c| c.cap_mb().is_some()),
            best_of(&|c| !c.nccl_env().is_empty()),
        ) {
            (Some(cap), Some(nccl)) => Some(cap.combine(&nccl)),
            _ => None,
        };
        if let Some(c) = combined {
            self.board.rows.push(Row::new(c, Err(String::new())));
            self.predict_rows(runs);
        }
        let rows = &self.board.rows;
        // The best predicted, then what the model cannot predict; cut to the budget.
        let mut order: Vec<usize> = (1..rows.len())
            .filter(|&i| rows[i].cand.modelled && rows[i].predicted.is_ok())
            .collect();
        order.sort_by(|&x, &y| pred(&rows[y]).total_cmp(&pred(&rows[x])));
        order.truncate(self.plan.finalists as usize);
        order.extend((1..rows.len()).filter(|&i| !rows[i].cand.modelled));
        // Where nothing could be predicted (no bucket timeline: an attached script's own comm
        // hook), the candidates are measured blind, in order, as far as the budget goes.
        if rows.iter().all(|r| r.predicted.is_err()) {
            order.extend((1..rows.len()).filter(|&i| rows[i].cand.modelled));
        }
        let repeats = self.plan.repeats as usize;
        self.board.repeats = repeats;
        if self.board.rows.len() <= 1 {
            self.board.verdict = Some(Verdict::DefaultIsAsGood {
                best: None,
                why: "nothing to try besides it".into(),
            });
            self.board.phase = Phase::Done;
            return;
        }
        let fits = self.fit_to_budget(&mut order, repeats, said);
        for r in &mut self.board.rows {
            r.state = RowState::Skipped;
        }
        if !fits {
            self.board.verdict = Some(Verdict::NotCompared {
                why: format!(
                    "the budget does not fit {} of the default and of one setting",
                    count(repeats.max(decide::MIN_REPEATS), "interleaved run")
                ),
            });
            self.board.phase = Phase::Done;
            return;
        }
        let mut measured = vec![0usize];
        measured.extend(order.iter().copied());
        for &i in &measured {
            let r = &mut self.board.rows[i];
            r.finalist = true;
            r.planned = repeats;
            r.state = RowState::Measuring;
        }
        // Interleaved: default, finalist 1, finalist 2, …, then again.
        self.batch.clear();
        self.launched.clear();
        self.read = 0;
        for _ in 0..repeats {
            for &i in &measured {
                let spec = self.measure_spec(i);
                self.pending.push(spec);
                self.batch.push(Purpose::Measure(i));
            }
        }
        self.board.phase = Phase::Measuring {
            done: 0,
            total: self.batch.len(),
        };
    }

    /// Estimate the measuring (runs × the k=1 run's wall time, which a k-rank run of the same
    /// samples does not exceed by much) and cut `order` to what the budget has left, best
    /// predicted first. Repeats are never cut: fewer than `decide::MIN_REPEATS` of each cannot
    /// be compared, so more settings at fewer repeats would only end in no recommendation.
    /// `false`: not even the default and one setting fit (nothing is measured).
    fn fit_to_budget(
        &mut self,
        order: &mut Vec<usize>,
        repeats: usize,
        said: &mut Vec<Progress>,
    ) -> bool {
        let left = self.budget_left_s();
        let wall = self.base_wall;
        let cost = |settings: usize| (settings + 1) as f64 * repeats as f64 * wall;
        let asked = order.len();
        let fit = (0..=asked).rev().find(|&n| cost(n) <= left).unwrap_or(0);
        let estimate = format!(
            "measuring the default and {} at {}: ≈ {} (≈ {} a run)",
            count(asked, "setting"),
            count(repeats, "repeat"),
            eta_label(cost(asked)),
            eta_label(wall)
        );
        let budget = format!(
            "your {} budget ({} left)",
            eta_label(self.plan.budget_s),
            eta_label(left)
        );
        let (note, cut) = if fit == asked {
            (format!("{estimate}, within {budget}"), false)
        } else if fit >= 1 {
            order.truncate(fit);
            (
                format!(
                    "{estimate}, over {budget}: measuring {}, best predicted first",
                    count(fit, "setting")
                ),
                true,
            )
        } else {
            order.clear();
            let needed = self.started.elapsed().as_secs_f64() + cost(1);
            (
                format!(
                    "{estimate}, over {budget}, which does not fit even the default and one setting (≈ {}): nothing measured; --budget {} would fit them",
                    eta_label(cost(1)),
                    eta_label(needed)
                ),
                true,
            )
        };
        said.push(Progress::Note(format!("tune: {note}")));
        if cut {
            self.board.notes.push(note);
        }
        fit >= 1
    }

    /// A measured run of row `i`'s candidate at the tuning's k.
    fn measure_spec(&self, i: usize) -> RunSpec {
        let mut t = self.plan.template.clone();
        t.nccl = self.board.rows[i].cand.settings(&self.plan.template.nccl);
        t.spec(self.plan.family.clone(), self.plan.k)
    }

    /// Decide from what was measured.
    fn finish(&mut self) {
        let rows = &self.board.rows;
        let finalists: Vec<(usize, &decide::Measured)> = (1..rows.len())
            .filter(|&i| rows[i].finalist && rows[i].state != RowState::Failed)
            .map(|i| (i, &rows[i].measured))
            .collect();
        // Cancelled before the default was measured: there is nothing to say.
        self.board.verdict = match rows.first() {
            Some(d) if !(self.cancelled && d.measured.repeats() == 0) => Some(decide::decide(
                &d.measured,
                &finalists,
                self.plan.min_gain_pct,
            )),
            _ if self.budget_spent => Some(Verdict::NotCompared {
                why: "the budget was spent before the default was measured".into(),
            }),
            _ => None,
        };
        for r in &mut self.board.rows {
            if r.state == RowState::Measuring && r.runs_done() < r.planned {
                // Cancelled or cut short: what it has is what there is.
                r.state = if r.runs_done() == 0 {
                    RowState::Skipped
                } else {
                    RowState::Done
                };
            }
        }
        self.board.running = None;
        self.board.phase = if self.cancelled && !self.budget_spent {
            Phase::Cancelled
        } else {
            Phase::Done
        };
    }

    /// The k=1 spec predictions come from (for tests and the CLI's caveats).
    pub fn base_spec(&self) -> &RunSpec {
        &self.base_spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished_run(spec: RunSpec, id: &str, sps: Option<f64>) -> RunView {
        let mut r = RunView::new(id.into(), spec, Instant::now(), 100.0);
        r.status = if sps.is_some() {
            RunStatus::Completed
        } else {
            RunStatus::Failed
        };
        r.clock.ended_unix = Some(110.0);
        r.figures.aggregate = sps.map(|s| crate::run::Aggregate {
            samples_per_s: s,
            per_rank: vec![s],
            rank_min: s,
            rank_max: s,
        });
        r
    }

    #[test]
    fn a_failed_k1_run_ends_the_tuning_with_why() {
        let t = Template::new(Backend::Sim, None);
        let mut tu = Tuning::new(Plan::new(t, Experiment::Weak, 2)).unwrap();
        let specs = tu.take_launches();
        assert_eq!(specs.len(), 1, "the simulator needs no sweep");
        assert_eq!(specs[0].k, 1);
        let line = tu.launched("r1", &specs[0]);
        assert!(line.contains("predict 1/1"), "{line}");
        let runs = vec![finished_run(specs[0].clone(), "r1", None)];
        let (said, changed) = tu.poll(&runs, 0);
        assert!(changed && tu.finished());
        assert_eq!(said.last(), Some(&Progress::Finished));
        match &tu.board().phase {
            Phase::Failed(why) => assert!(why.contains("did not complete"), "{why}"),
            p => panic!("{p:?}"),
        }
    }

    /// A simulated tuning whose k=1 run measured 1,000 samples/s: its measured runs are next.
    fn past_the_k1_run() -> (Tuning, Vec<RunView>) {
        let (tu, runs, _) = past_the_k1_run_within(600.0);
        (tu, runs)
    }

    /// The same with a budget of `budget_s`; what the tuning said after its k=1 run (which
    /// took 10 s).
    fn past_the_k1_run_within(budget_s: f64) -> (Tuning, Vec<RunView>, Vec<String>) {
        let t = Template::new(Backend::Sim, None);
        let mut plan = Plan::new(t, Experiment::Weak, 2);
        plan.budget_s = budget_s;
        let mut tu = Tuning::new(plan).unwrap();
        let base = tu.take_launches().remove(0);
        tu.launched("r0", &base);
        let runs = vec![finished_run(base, "r0", Some(1000.0))];
        let (said, _) = tu.poll(&runs, 0);
        let said = said
            .into_iter()
            .filter_map(|p| match p {
                Progress::Note(l) => Some(l),
                Progress::Finished => None,
            })
            .collect();
        (tu, runs, said)
    }

    #[test]
    fn the_measuring_is_estimated_and_cut_to_the_budget_never_its_repeats() {
        // 10 s a run, 3 repeats: the default and one setting take 60 s, each one more 30 s.
        let (mut tu, _, said) = past_the_k1_run_within(600.0);
        assert!(
            said.iter().any(|l| l.contains(
                "8 settings at 3 repeats: ≈ 4m30s (≈ 10s a run), within your 10m00s budget"
            )),
            "{said:?}"
        );
        // Unpredicted (this k=1 run has no buckets): every setting, blind, in order.
        assert_eq!(tu.take_launches().len(), 9 * 3);

        let (mut tu, _, said) = past_the_k1_run_within(75.0);
        let line = said.iter().find(|l| l.contains("over your")).unwrap();
        assert!(
            line.contains(
                "over your 1m15s budget (1m15s left): measuring 1 setting, best predicted first"
            ),
            "{line}"
        );
        assert_eq!(tu.board().repeats, 3);
        assert_eq!(tu.take_launches().len(), 2 * 3);
        assert!(!tu.finished());

        // Not even the default and one setting three times each: nothing is measured.
        let (mut tu, _, said) = past_the_k1_run_within(50.0);
        assert!(tu.finished() && tu.take_launches().is_empty());
        assert!(
            said.iter()
                .any(|l| l.contains("nothing measured; --budget 1m00s would fit them")),
            "{said:?}"
        );
        let v = tu.board().verdict_line().unwrap();
        assert_eq!(
            v,
            "no recommendation: the budget does not fit 3 interleaved runs of the default and of one setting"
        );
        assert!(
            said.iter().all(|l| !l.contains("(-")),
            "no negative time: {said:?}"
        );
    }

    #[test]
    fn a_spent_budget_stops_the_tuning_as_done_with_what_was_measured() {
        let (mut tu, mut runs) = past_the_k1_run();
        let measure = tu.take_launches();
        tu.launched("m0", &measure[0]);
        tu.launched("m1", &measure[1]);
        runs.push(finished_run(measure[0].clone(), "m0", Some(2000.0)));
        assert_eq!(tu.check_budget(), None, "within the budget");
        tu.started -= std::time::Duration::from_secs(700);
        assert_eq!(tu.budget_left_s(), 0.0);
        let line = tu.check_budget().unwrap();
        assert_eq!(
            line,
            "tune: the 10m00s budget is spent: stopped after 0 measured runs, with what was measured"
        );
        assert_eq!(tu.check_budget(), None, "said once");
        assert!(tu.take_launches().is_empty());
        // The front end stopped the run going past the budget: not the setting's failure.
        let mut stopped = finished_run(measure[1].clone(), "m1", None);
        stopped.status = RunStatus::Stopped;
        runs.push(stopped);
        let (said, _) = tu.poll(&runs, 0);
        assert!(tu.finished(), "{said:?}");
        assert_eq!(tu.board().phase, Phase::Done);
        assert!(tu.board().rows.iter().all(|r| r.failed.is_empty()));
        assert_eq!(
            tu.board().verdict_line().unwrap(),
            "no recommendation: the default ran 1 time; 3 interleaved runs each are needed to compare"
        );
    }

    #[test]
    fn a_failed_measurement_is_run_once_more_and_a_second_failure_is_the_settings() {
        let (mut tu, mut runs) = past_the_k1_run();
        let measure = tu.take_launches();
        assert!(
            measure.len() >= 2,
            "the default and a finalist: {}",
            measure.len()
        );
        // The default measures; the finalist's run fails once, then measures.
        for (i, spec) in measure.iter().enumerate() {
            let id = format!("m{i}");
            tu.launched(&id, spec);
            let sps = if i == 1 { None } else { Some(2000.0) };
            runs.push(finished_run(spec.clone(), &id, sps));
        }
        let (said, _) = tu.poll(&runs, 0);
        assert!(
            said.iter()
                .any(|p| matches!(p, Progress::Note(l) if l.ends_with("measuring it once more"))),
            "{said:?}"
        );
        let retry = tu.take_launches();
        assert_eq!(retry.len(), 1);
        assert!(!tu.finished());
        tu.launched("again", &retry[0]);
        runs.push(finished_run(retry[0].clone(), "again", Some(2100.0)));
        tu.poll(&runs, 0);
        assert!(tu.finished());
        let row = tu
            .board()
            .rows
            .iter()
            .find(|r| r.failed.len() == 1)
            .unwrap();
        assert_eq!(row.state, RowState::Done);
        // Every planned repeat measured, plus the failed run that was made up for.
        assert_eq!(row.measured.repeats() + 1, row.planned);
        assert_eq!(row.runs_done(), row.planned);

        // The same tuning where the second run fails too: the candidate failed.
        let (mut tu, mut runs) = past_the_k1_run();
        for (i, spec) in tu.take_launches().iter().enumerate() {
            let id = format!("m{i}");
            tu.launched(&id, spec);
            runs.push(finished_run(spec.clone(), &id, (i != 1).then_some(2000.0)));
        }
        tu.poll(&runs, 0);
        let retry = tu.take_launches();
        tu.launched("again", &retry[0]);
        runs.push(finished_run(retry[0].clone(), "again", None));
        let (said, _) = tu.poll(&runs, 0);
        assert!(tu.finished(), "{said:?}");
        let row = tu
            .board()
            .rows
            .iter()
            .find(|r| !r.failed.is_empty())
            .unwrap();
        assert_eq!((row.state, row.failed.len()), (RowState::Failed, 2));
    }

    #[test]
    fn a_cancelled_tuning_stops_handing_out_runs_and_keeps_what_ended() {
        let t = Template::new(Backend::Gloo, None);
        let mut tu = Tuning::new(Plan::new(t, Experiment::Weak, 2)).unwrap();
        assert_eq!(
            tu.start_line(),
            "tune: 10m00s budget: first the default at k=1 and 1 all-reduce sweep to predict from; then the measuring, estimated from the k=1 run's time and cut to what is left"
        );
        let specs = tu.take_launches();
        // gloo: the k=1 run and one all-reduce sweep (no NCCL settings to sweep).
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[1].experiment(), Experiment::Allreduce);
        tu.launched("r1", &specs[0]);
        let (_, _) = tu.poll(&[], 1);
        assert!(!tu.finished());
        tu.cancel();
        let runs = vec![finished_run(specs[0].clone(), "r1", None)];
        tu.poll(&runs, 0);
        assert!(tu.finished());
        assert!(tu.take_launches().is_empty());
    }

    #[test]
    fn a_script_with_its_own_comm_hook_keeps_its_ddp_settings_and_says_why() {
        let t = Template::new(Backend::Gloo, None);
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let target = crate::run::AttachTarget::new(
            &dir.join("examples/train_ddp_own_hook.py"),
            Vec::new(),
            dir,
        )
        .unwrap();
        let family = Family::Attach {
            target: Some(target),
        };
        let mut tu = Tuning::new(Plan::new(t, family, 2)).unwrap();
        let specs = tu.take_launches();
        assert_eq!(specs[0].experiment(), Experiment::Attach);
        assert_eq!(specs[0].k, 1);
        let mut base = finished_run(specs[0].clone(), "r1", Some(1000.0));
        base.seen.observed.ddp_module = Some(true);
        base.seen.instrument = Some(crate::protocol::Instrument::StepsOnly);
        let sweep = finished_run(specs[1].clone(), "r2", None);
        tu.launched("r1", &specs[0]);
        let (said, _) = tu.poll(std::slice::from_ref(&base), 1);
        let note = said
            .iter()
            .find_map(|p| match p {
                Progress::Note(l) => Some(l.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            note,
            "tune: DDP settings not tuned: the script registers its own comm hook; only environment knobs are (none on gloo)"
        );
        tu.launched("r2", &specs[1]);
        let (said, _) = tu.poll(&[base, sweep], 0);
        // On gloo nothing is left to try: the tuning ends without measuring.
        assert!(tu.finished() && said.contains(&Progress::Finished));
        assert!(tu.take_launches().is_empty());
        assert_eq!(tu.board().rows.len(), 1);
        assert!(
            tu.board()
                .verdict_line()
                .unwrap()
                .contains("nothing to try besides it")
        );
    }

    #[test]
    fn other_experiments_and_k1_are_refused() {
        let t = Template::new(Backend::Sim, None);
        assert!(
            Tuning::new(Plan::new(t.clone(), Experiment::Probe, 2))
                .err()
                .unwrap()
                .contains("not probe")
        );
        assert!(
            Tuning::new(Plan::new(t.clone(), Experiment::Attach, 2))
                .err()
                .unwrap()
                .contains("attached script")
        );
        assert!(Tuning::new(Plan::new(t, Experiment::Weak, 1)).is_err());
    }
}
