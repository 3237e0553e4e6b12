//! DDP's constructor settings a launch asks for (`ddptop tune`'s candidates, saved presets):
//! typed here, checked once, and carried to the workers as environment variables, which
//! `DdpSettings::env` alone spells and `DdpSettings::from_vars` alone reads. Environment
//! variables (not worker arguments) because they reach an attached, unmodified script's DDP too;
//! the worker reads them in one place, `workers/ddptop_worker/ddp_knobs.py`.

use super::nccl::{EnvOverlay, NcclSettings};
use crate::util::BadInput;

/// `bucket_cap_mb` (MiB).
pub const CAP_ENV: &str = "DDPTOP_DDP_BUCKET_CAP_MB";
/// `static_graph=True` (1) or not (0).
pub const STATIC_GRAPH_ENV: &str = "DDPTOP_DDP_STATIC_GRAPH";
/// `gradient_as_bucket_view=True` (1) or not (0).
pub const GRAD_VIEW_ENV: &str = "DDPTOP_DDP_GRAD_AS_BUCKET_VIEW";

/// The largest `bucket_cap_mb` accepted (1 TiB of gradients: past any model; the worker's
/// bound too).
pub const MAX_CAP_MB: f64 = 1e6;

/// DDP's `bucket_cap_mb`: MiB, above 0 and at most `MAX_CAP_MB`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct BucketCapMb(f64);

impl BucketCapMb {
    pub fn new(mb: f64) -> Option<BucketCapMb> {
        (mb > 0.0 && mb <= MAX_CAP_MB).then_some(BucketCapMb(mb))
    }

    pub fn mb(self) -> f64 {
        self.0
    }
}

impl std::str::FromStr for BucketCapMb {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse::<f64>()
            .ok()
            .and_then(BucketCapMb::new)
            .ok_or_else(|| format!("`{s}` is not a bucket size in MiB above 0"))
    }
}

/// As the worker reads it: `5`, `0.5`, `1024`.
impl std::fmt::Display for BucketCapMb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The DDP settings of one launch; `None`: the constructor's own (DDP's default, or what an
/// attached script passes).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DdpSettings {
    pub bucket_cap_mb: Option<BucketCapMb>,
    pub static_graph: Option<bool>,
    pub grad_as_bucket_view: Option<bool>,
}

impl DdpSettings {
    /// Read from a launch's variables (`get`: a variable's value, `None` when unset). A bad
    /// value is a one-line error naming the variable.
    pub fn from_vars<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<DdpSettings, BadInput> {
        let flag = |name: &str| -> Result<Option<bool>, BadInput> {
            match get(name).map(str::trim) {
                None | Some("") => Ok(None),
                Some("1" | "true") => Ok(Some(true)),
                Some("0" | "false") => Ok(Some(false)),
                Some(v) => Err(BadInput(format!("{name}={v}: expected 1 or 0"))),
            }
        };
        let bucket_cap_mb = match get(CAP_ENV).map(str::trim) {
            None | Some("") => None,
            Some(v) => Some(v.parse::<BucketCapMb>().map_err(|_| {
                BadInput(format!(
                    "{CAP_ENV}={v}: expected MiB above 0 (at most {MAX_CAP_MB})"
                ))
            })?),
        };
        Ok(DdpSettings {
            bucket_cap_mb,
            static_graph: flag(STATIC_GRAPH_ENV)?,
            grad_as_bucket_view: flag(GRAD_VIEW_ENV)?,
        })
    }

    /// The DDP settings of a launch's settings.
    pub fn of(s: &NcclSettings) -> Result<DdpSettings, BadInput> {
        DdpSettings::from_vars(|k| s.get(k))
    }

    /// The DDP settings of a preset (`[presets.…]`, a tuning's winner).
    pub fn of_overlay(o: &EnvOverlay) -> Result<DdpSettings, BadInput> {
        DdpSettings::from_vars(|k| o.get(k).and_then(|v| v.as_deref()))
    }

    /// The variables that carry them to the workers; unset ones are left out.
    pub fn env(&self) -> Vec<(String, String)> {
        let flag = |b: bool| if b { "1" } else { "0" }.to_string();
        let mut out = Vec::new();
        if let Some(mb) = self.bucket_cap_mb {
            out.push((CAP_ENV.to_string(), mb.to_string()));
        }
        if let Some(b) = self.static_graph {
            out.push((STATIC_GRAPH_ENV.to_string(), flag(b)));
        }
        if let Some(b) = self.grad_as_bucket_view {
            out.push((GRAD_VIEW_ENV.to_string(), flag(b)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_through_the_environment() {
        let d = DdpSettings {
            bucket_cap_mb: BucketCapMb::new(5.0),
            static_graph: Some(true),
            grad_as_bucket_view: Some(false),
        };
        let env = d.env();
        assert_eq!(
            env,
            [
                (CAP_ENV.to_string(), "5".to_string()),
                (STATIC_GRAPH_ENV.to_string(), "1".to_string()),
                (GRAD_VIEW_ENV.to_string(), "0".to_string()),
            ]
        );
        let mut s = NcclSettings::default();
        for (k, v) in &env {
            s.set(k, Some(v.clone()));
        }
        assert_eq!(DdpSettings::of(&s), Ok(d));
        assert_eq!(
            DdpSettings::of(&NcclSettings::default()),
            Ok(DdpSettings::default())
        );
        let half = DdpSettings {
            bucket_cap_mb: BucketCapMb::new(0.5),
            ..Default::default()
        };
        assert_eq!(half.env()[0].1, "0.5");
    }

    #[test]
    fn bad_values_are_one_line_errors_naming_the_variable() {
        for (var, v) in [
            (CAP_ENV, "0"),
            (CAP_ENV, "-3"),
            (CAP_ENV, "lots"),
            (CAP_ENV, "NaN"),
            (CAP_ENV, "2e6"),
            (STATIC_GRAPH_ENV, "yes"),
        ] {
            let o = EnvOverlay::from([(var.to_string(), Some(v.to_string()))]);
            let e = DdpSettings::of_overlay(&o).unwrap_err().0;
            assert!(e.starts_with(&format!("{var}={v}: expected")), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert_eq!(
            "x".parse::<BucketCapMb>().unwrap_err(),
            "`x` is not a bucket size in MiB above 0"
        );
    }
}
