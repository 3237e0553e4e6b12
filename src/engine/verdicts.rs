//! Verdicts judged while steps flow (issue 44): a run at k ≥ 2 slower than one rank alone
//! (`app::diagnose::slower_than_one_gpu`), named at the first buckets message that completes
//! the evidence (every rank's split over its first steps past warm-up), and a compiled run
//! slower than the same script eager (`app::diagnose::slower_than_eager`), each once per run. Shown as
//! one line on the main screen, kept with the run (details, `show --json`, the report).

use super::Engine;
use crate::app::Level;
use crate::app::diagnose;
use crate::run::DiagnosisKind;
use crate::store::EventRow;

impl Engine {
    /// Judge `run` after one of its buckets messages, or a step message with its comm wait.
    pub(super) fn judge_while_stepping(&mut self, run: &str) {
        let Some(v) = self.state.run(run) else {
            return;
        };
        if v.status.is_final() || v.spec.backend == crate::protocol::Backend::Sim {
            return;
        }
        let named = |kind| v.evidence.diagnoses.iter().any(|d| d.kind == kind);
        let mut found = None;
        let mut host_bound = None;
        if v.spec.k >= 2 && !named(DiagnosisKind::SlowerThanOneGpu) {
            let one = diagnose::measured_one(v, &self.state.runs);
            match diagnose::judge(v, one.as_ref()) {
                Some(diagnose::Slower::Named(d)) => found = Some(d),
                // Said once; judged again at later steps, in case the host frees up.
                Some(diagnose::Slower::HostBound(line))
                    if !v
                        .evidence
                        .caveats
                        .iter()
                        .any(|c| c.text.starts_with(diagnose::HOST_BOUND)) =>
                {
                    host_bound = Some(line)
                }
                _ => {}
            }
        }
        // A compiled run's steady state against the same script eager, once its counters came.
        if found.is_none()
            && host_bound.is_none()
            && v.seen.compile_counters.is_some()
            && !named(DiagnosisKind::CompileRegression)
            && let Some(eager) = diagnose::eager_run(v, &self.state.runs)
        {
            found = diagnose::slower_than_eager(v, &eager);
        }
        if let Some(line) = host_bound {
            if let Some(v) = self.state.run_mut(run) {
                v.add_caveat(crate::run::Caveat::note(line.clone()));
                v.push_tail(format!("ddptop: {line}"));
            }
            self.pending.push(EventRow::note(run, &line));
            self.persist_live(run);
            return;
        }
        let Some(d) = found else {
            return;
        };
        let line = d.line();
        let Some(v) = self.state.run_mut(run) else {
            return;
        };
        if !diagnose::add(v, d) {
            return;
        }
        v.push_tail(format!("ddptop: {line}"));
        self.pending.push(EventRow::note(run, &line));
        self.persist_live(run);
        self.state
            .push_message(Level::Warn, Some(run), format!("{run}: {line}"));
    }
}
