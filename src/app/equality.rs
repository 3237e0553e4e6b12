//! The JAX experiment's k=1 vs k equality verdict, from the worker's `check` messages: one per
//! step's loss (`k1_vs_k<K>_loss`, steps 1..=STEPS) and one for the parameters after step 1
//! (`k1_vs_k<K>_params`), each with its own tolerance (workers/ddptop_worker/jax_check.py).
//!
//! The first step's loss comes from the initial weights, before any reduced gradient is applied,
//! so on its own it cannot fail for a wrong reduction: the verdict is `Ok` only when every check
//! passed *and* they cover STEPS steps and the parameters; a run that reported less (stopped
//! early, or an older worker that checked the first step only) is `Incomplete`, never ok.

use crate::protocol::Check;

/// Loss checks a complete verdict needs: step 1 and 3 steps after updates.
pub const STEPS: usize = 4;

/// Its name (`ok`, `FAILED`, `incomplete`) is what the run document and the screens print.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString, strum::VariantArray,
)]
#[strum(serialize_all = "lowercase")]
pub enum Verdict {
    Ok,
    /// Upper case: it should stand out in a table.
    #[strum(serialize = "FAILED")]
    Failed,
    Incomplete,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Equality {
    pub verdict: Verdict,
    /// Steps whose loss was compared, in order.
    pub loss_steps: Vec<u64>,
    /// The loss check closest to (or furthest past) its tolerance.
    pub worst_loss: Option<Check>,
    /// The parameters after step 1.
    pub params: Option<Check>,
    /// The tolerance rule as the worker stated it ("tol (cpu): loss …").
    pub rule: Option<String>,
    /// The worker ran with its test-only broken reduction (its notes say so).
    pub test_switch: bool,
}

fn ratio(c: &Check) -> f64 {
    if c.tol > 0.0 {
        c.diff / c.tol
    } else if c.diff > 0.0 {
        f64::INFINITY
    } else {
        0.0
    }
}

/// The verdict over `checks`; `None` when the run made no equality check (k=1, `--no-check`).
pub fn equality(checks: &[Check]) -> Option<Equality> {
    let losses: Vec<&Check> = checks
        .iter()
        .filter(|c| c.name.ends_with("_loss"))
        .collect();
    let params = checks.iter().find(|c| c.name.ends_with("_params")).cloned();
    if losses.is_empty() && params.is_none() {
        return None;
    }
    let mut loss_steps: Vec<u64> = losses.iter().map(|c| c.step).collect();
    loss_steps.sort_unstable();
    loss_steps.dedup();
    let verdict = if checks.iter().any(|c| !c.ok) {
        Verdict::Failed
    } else if loss_steps.len() >= STEPS && params.is_some() {
        Verdict::Ok
    } else {
        Verdict::Incomplete
    };
    let worst_loss = losses
        .iter()
        .max_by(|a, b| ratio(a).total_cmp(&ratio(b)))
        .map(|c| (*c).clone());
    let notes = || checks.iter().filter_map(|c| c.note.as_deref());
    let rule = notes().find_map(|n| n.find("tol (").map(|i| n[i..].to_string()));
    let test_switch = notes().any(|n| n.contains("TEST SWITCH"));
    Some(Equality {
        verdict,
        loss_steps,
        worst_loss,
        params,
        rule,
        test_switch,
    })
}

impl Equality {
    /// What was compared and how far apart, in one line (the verdict is shown beside it).
    pub fn detail(&self) -> String {
        let mut parts = Vec::new();
        if let (Some(first), Some(last)) = (self.loss_steps.first(), self.loss_steps.last()) {
            let mut s = format!("steps {first}–{last}: loss");
            if let Some(w) = &self.worst_loss {
                s.push_str(&format!(" |diff| {:.1e} (tol {:.1e})", w.diff, w.tol));
            }
            parts.push(s);
        }
        match &self.params {
            Some(p) => parts.push(format!(
                "params after step 1 |diff| {:.1e} (tol {:.1e})",
                p.diff, p.tol
            )),
            None => parts.push("params not compared".into()),
        }
        if self.verdict == Verdict::Incomplete {
            parts.push(format!("needs {STEPS} loss steps and the params"));
        }
        parts.join(" · ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verdicts' names as the hand-written table spelled them (issue 49), both ways.
    #[test]
    fn verdict_names_are_the_old_names_and_round_trip() {
        use strum::VariantArray;
        let names: Vec<&str> = Verdict::VARIANTS.iter().map(|v| v.as_str()).collect();
        assert_eq!(names, ["ok", "FAILED", "incomplete"]);
        for v in Verdict::VARIANTS {
            assert_eq!(v.as_str().parse::<Verdict>(), Ok(*v));
        }
    }

    fn check(name: &str, step: u64, diff: f64, tol: f64) -> Check {
        Check {
            rank: 0,
            step,
            t: 1.0,
            name: name.into(),
            a: 2.0,
            b: 2.0 + diff,
            diff,
            tol,
            ok: diff <= tol,
            note: Some("loss at step 1; tol (cpu): loss x max(1,|loss|) 1e-06 …".into()),
        }
    }

    fn full(later_diff: f64, params_diff: f64) -> Vec<Check> {
        let mut c: Vec<Check> = (1..=4)
            .map(|s| {
                let diff = if s == 1 { 0.0 } else { later_diff };
                check("k1_vs_k2_loss", s, diff, 1e-3)
            })
            .collect();
        c.push(check("k1_vs_k2_params", 1, params_diff, 1e-4));
        c
    }

    #[test]
    fn ok_needs_every_step_and_the_parameters() {
        let e = equality(&full(2e-7, 5e-8)).unwrap();
        assert_eq!(e.verdict, Verdict::Ok);
        assert_eq!(e.loss_steps, [1, 2, 3, 4]);
        assert_eq!(
            e.rule.as_deref(),
            Some("tol (cpu): loss x max(1,|loss|) 1e-06 …")
        );
        assert!(
            e.detail().contains("params after step 1 |diff| 5.0e-8"),
            "{}",
            e.detail()
        );
        assert!(equality(&[]).is_none());
    }

    #[test]
    fn a_first_step_alone_is_incomplete_never_ok() {
        // What the worker used to send: the first-step loss only.
        let first = vec![check("k1_vs_k2_loss", 1, 0.0, 1e-6)];
        let e = equality(&first).unwrap();
        assert_eq!(e.verdict, Verdict::Incomplete);
        assert!(e.detail().contains("needs 4 loss steps"), "{}", e.detail());
        let mut no_params = full(0.0, 0.0);
        no_params.pop();
        assert_eq!(equality(&no_params).unwrap().verdict, Verdict::Incomplete);
    }

    #[test]
    fn a_later_step_or_the_parameters_past_tolerance_fail_it() {
        let e = equality(&full(0.18, 5e-8)).unwrap();
        assert_eq!(e.verdict, Verdict::Failed);
        assert_eq!(e.worst_loss.as_ref().map(|c| c.diff), Some(0.18));
        assert_eq!(equality(&full(0.0, 1e-2)).unwrap().verdict, Verdict::Failed);
    }
}
