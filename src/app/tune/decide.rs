//! Whether a tuned setting beats the default: measured samples/s of interleaved repeats, and a
//! rule that cannot be fooled by one lucky run.
//!
//! The rule (docs/methods.md, "Tuning"): with at least `MIN_REPEATS` runs each, a candidate wins
//! when its slowest run is faster than the default's fastest (the ranges do not overlap); among
//! the winners the highest median is recommended, with its gain of medians over the default's,
//! when that gain is at least `min_gain_pct` (default 1%: less is not worth a setting to carry
//! around, and is within the drift between interleaved repeats measured on real machines).
//! Otherwise the default is as good as anything tried.

use serde::Serialize;

/// Repeats each finalist and the default need before anything is recommended.
pub const MIN_REPEATS: usize = 3;
/// The smallest gain of medians recommended (`--min-gain`'s default, written there as 1.0:
/// arguments sit below `tune` in the layers).
pub const MIN_GAIN_PCT: f64 = 1.0;

/// One candidate's measured runs (samples/s of all ranks together, in run order).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Measured {
    pub run_ids: Vec<String>,
    pub samples_per_s: Vec<f64>,
}

impl Measured {
    pub fn push(&mut self, id: String, sps: f64) {
        self.run_ids.push(id);
        self.samples_per_s.push(sps);
    }
    pub fn repeats(&self) -> usize {
        self.samples_per_s.len()
    }
    pub fn median(&self) -> Option<f64> {
        let mut v = self.samples_per_s.clone();
        v.sort_by(f64::total_cmp);
        crate::util::median(&v)
    }
    pub fn min(&self) -> Option<f64> {
        self.samples_per_s.iter().copied().reduce(f64::min)
    }
    pub fn max(&self) -> Option<f64> {
        self.samples_per_s.iter().copied().reduce(f64::max)
    }
    /// Half the range as % of the median: the spread shown beside each figure.
    pub fn spread_pct(&self) -> Option<f64> {
        let m = self.median().filter(|m| *m > 0.0)?;
        Some((self.max()? - self.min()?) / 2.0 / m * 100.0)
    }
}

/// What the measurements say.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// `candidate` (an index into the finalists given) beats the default.
    Recommend { candidate: usize, gain_pct: f64 },
    /// Nothing beat the default outside its spread; `best` is the finalist with the highest
    /// median when that is above the default's (`None`: the default's is the highest).
    DefaultIsAsGood { best: Option<usize>, why: String },
    /// Nothing can be compared: fewer than `MIN_REPEATS` interleaved runs of the default or of
    /// every setting (asked for, cut by the budget or failed). Saying "the default is as good"
    /// here would claim a comparison that was not made.
    NotCompared { why: String },
}

/// Decide from the default's runs and each finalist's (index, runs).
pub fn decide(default: &Measured, finalists: &[(usize, &Measured)], min_gain_pct: f64) -> Verdict {
    if default.repeats() < MIN_REPEATS {
        return Verdict::NotCompared {
            why: format!(
                "the default ran {}; {MIN_REPEATS} interleaved runs each are needed to compare",
                crate::util::count(default.repeats(), "time")
            ),
        };
    }
    let most = finalists
        .iter()
        .map(|(_, m)| m.repeats())
        .max()
        .unwrap_or(0);
    if most < MIN_REPEATS {
        return Verdict::NotCompared {
            why: format!(
                "no setting ran more than {}; {MIN_REPEATS} interleaved runs each are needed to compare",
                crate::util::count(most, "time")
            ),
        };
    }
    let (Some(def_med), Some(def_max)) = (default.median(), default.max()) else {
        return Verdict::DefaultIsAsGood {
            best: None,
            why: "the default has no figure".into(),
        };
    };
    let best = finalists
        .iter()
        .filter_map(|(i, m)| Some((*i, m.median()?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .filter(|(_, med)| *med > def_med)
        .map(|(i, _)| i);
    let winner = finalists
        .iter()
        .filter(|(_, m)| m.repeats() >= MIN_REPEATS)
        .filter(|(_, m)| m.min().is_some_and(|lo| lo > def_max))
        .filter_map(|(i, m)| Some((*i, m.median()?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let gain = |med: f64| (med / def_med - 1.0) * 100.0;
    match winner {
        Some((candidate, med)) if gain(med) >= min_gain_pct => Verdict::Recommend {
            candidate,
            gain_pct: gain(med),
        },
        Some((_, med)) => Verdict::DefaultIsAsGood {
            best,
            why: format!(
                "the best gain outside the spread, {:+.2}%, is below the {min_gain_pct}% worth a setting",
                gain(med)
            ),
        },
        None => Verdict::DefaultIsAsGood {
            best,
            why: "no candidate's slowest run beat the default's fastest".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(xs: &[f64]) -> Measured {
        let mut m = Measured::default();
        for (i, x) in xs.iter().enumerate() {
            m.push(format!("r{i}"), *x);
        }
        m
    }

    #[test]
    fn a_candidate_above_the_defaults_range_is_recommended_with_its_gain() {
        let def = m(&[100.0, 102.0, 101.0]);
        let a = m(&[103.0, 104.0, 105.0]);
        let b = m(&[110.0, 95.0, 111.0]); // higher median, but its range overlaps
        match decide(&def, &[(1, &a), (2, &b)], MIN_GAIN_PCT) {
            Verdict::Recommend {
                candidate,
                gain_pct,
            } => {
                assert_eq!(candidate, 1);
                assert!(
                    (gain_pct - (104.0 / 101.0 - 1.0) * 100.0).abs() < 1e-9,
                    "{gain_pct}"
                );
            }
            v => panic!("{v:?}"),
        }
        assert_eq!(a.spread_pct(), Some(1.0 / 104.0 * 100.0));
    }

    #[test]
    fn overlapping_ranges_or_too_few_repeats_recommend_nothing() {
        let def = m(&[100.0, 103.0, 101.0]);
        let close = m(&[102.5, 104.0, 104.5]);
        let v = decide(&def, &[(1, &close)], MIN_GAIN_PCT);
        assert_eq!(
            v,
            Verdict::DefaultIsAsGood {
                best: Some(1),
                why: "no candidate's slowest run beat the default's fastest".into()
            }
        );
        // Fewer than three interleaved runs: no comparison, whatever the figures.
        let few = m(&[150.0, 151.0]);
        assert_eq!(
            decide(&def, &[(1, &few)], MIN_GAIN_PCT),
            Verdict::NotCompared {
                why: "no setting ran more than 2 times; 3 interleaved runs each are needed to compare"
                    .into()
            }
        );
        assert_eq!(
            decide(
                &m(&[100.0]),
                &[(1, &m(&[200.0, 200.0, 200.0]))],
                MIN_GAIN_PCT
            ),
            Verdict::NotCompared {
                why: "the default ran 1 time; 3 interleaved runs each are needed to compare".into()
            }
        );
        // Outside the spread but too small to be worth it (a flat landscape, tight runs).
        let flat = m(&[100.0, 100.2, 100.1]);
        let tiny = m(&[100.5, 100.6, 100.7]);
        assert_eq!(
            decide(&flat, &[(1, &tiny)], MIN_GAIN_PCT),
            Verdict::DefaultIsAsGood {
                best: Some(1),
                why: "the best gain outside the spread, +0.50%, is below the 1% worth a setting"
                    .into()
            }
        );
        assert!(matches!(
            decide(&flat, &[(1, &tiny)], 0.0),
            Verdict::Recommend { candidate: 1, .. }
        ));
        // The default being the fastest: nothing beats it, and it is named as the best.
        assert_eq!(
            decide(&def, &[(1, &m(&[90.0, 91.0, 92.0]))], MIN_GAIN_PCT),
            Verdict::DefaultIsAsGood {
                best: None,
                why: "no candidate's slowest run beat the default's fastest".into()
            }
        );
    }
}
