//! What `ddptop tune` tries: DDP's bucket size, its static-graph and bucket-view switches, and
//! the NCCL settings the backend honours, each as environment variables on top of the run's own
//! settings (so a winner is a preset like any other, and reaches an attached script too).

use crate::costmodel::Profile;
use crate::protocol::Backend;
use crate::run::{BucketCapMb, DdpSettings, NcclSettings};

/// `bucket_cap_mb` values tried besides DDP's default 25 (1024: everything after the first
/// bucket in one).
pub const BUCKET_CAPS_MB: [f64; 6] = [1.0, 5.0, 10.0, 50.0, 100.0, 1024.0];

/// The NCCL settings tried on real GPUs: algorithm, protocol, channels, buffer size, and the
/// transport toggles ddptop already has (each measured by an all-reduce sweep first).
pub const NCCL_SETTINGS: [(&str, &str); 8] = [
    ("NCCL_ALGO", "Ring"),
    ("NCCL_ALGO", "Tree"),
    ("NCCL_PROTO", "Simple"),
    ("NCCL_PROTO", "LL128"),
    ("NCCL_MIN_NCHANNELS", "16"),
    ("NCCL_BUFFSIZE", "8388608"),
    ("NCCL_SHM_USE_CUDA_MEMCPY", "1"),
    ("NCCL_P2P_DISABLE", "1"),
];

/// The NCCL toggles the simulator's profiles model (its busbw tables are per transport mode).
const SIM_NCCL: [(&str, &str); 2] = [("NCCL_SHM_USE_CUDA_MEMCPY", "1"), ("NCCL_P2P_DISABLE", "1")];

/// One setting to try, as the variables it adds to the run's environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// `default`, `bucket_cap_mb=5`, `NCCL_ALGO=Tree`, `static_graph+bucket_view`.
    pub name: String,
    pub env: Vec<(String, String)>,
    /// The cost model predicts it (bucket sizes, NCCL settings through a measured sweep); the
    /// DDP switches change the reducer's own work, which it does not model.
    pub modelled: bool,
}

impl Candidate {
    pub fn default_one() -> Candidate {
        Candidate {
            name: "default".into(),
            env: Vec::new(),
            modelled: true,
        }
    }

    fn one(name: &str, value: &str, label: String) -> Candidate {
        Candidate {
            name: label,
            env: vec![(name.to_string(), value.to_string())],
            modelled: true,
        }
    }

    /// DDP settings, spelled as the workers read them (`DdpSettings::env`).
    fn ddp(d: DdpSettings, label: String, modelled: bool) -> Candidate {
        Candidate {
            name: label,
            env: d.env(),
            modelled,
        }
    }

    /// `bucket_cap_mb=MB`.
    pub fn bucket_cap(mb: BucketCapMb) -> Candidate {
        let d = DdpSettings {
            bucket_cap_mb: Some(mb),
            ..Default::default()
        };
        Candidate::ddp(d, cap_label(mb.mb()), true)
    }

    pub fn is_default(&self) -> bool {
        self.env.is_empty()
    }

    /// Its `bucket_cap_mb`, when it sets one.
    pub fn cap_mb(&self) -> Option<f64> {
        let d = DdpSettings::from_vars(|k| self.get(k)).ok()?;
        d.bucket_cap_mb.map(BucketCapMb::mb)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The NCCL part of its settings (what an all-reduce sweep measures).
    pub fn nccl_env(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .filter(|(k, _)| k.starts_with("NCCL_"))
            .cloned()
            .collect()
    }

    /// The run's settings with this candidate's on top.
    pub fn settings(&self, base: &NcclSettings) -> NcclSettings {
        let mut s = base.clone();
        for (k, v) in &self.env {
            s.set(k, Some(v.clone()));
        }
        s
    }

    /// Two candidates' settings together (the best bucket size with the best NCCL setting).
    pub fn combine(&self, other: &Candidate) -> Candidate {
        let mut env = self.env.clone();
        env.extend(other.env.iter().cloned());
        Candidate {
            name: format!("{} + {}", self.name, other.name),
            env,
            modelled: self.modelled && other.modelled,
        }
    }
}

fn cap_label(mb: f64) -> String {
    format!("bucket_cap_mb={mb}")
}

/// The bucket sizes tried: the fixed ones and, from the model's gradient bytes, a sixteenth and
/// a quarter of them (two significant digits), so that a small model gets sizes that split it.
pub fn caps_mb(grad_bytes: Option<u64>) -> Vec<f64> {
    let mut caps = BUCKET_CAPS_MB.to_vec();
    if let Some(g) = grad_bytes.filter(|g| *g > 0) {
        let mib = g as f64 / f64::from(1u32 << 20);
        for part in [mib / 16.0, mib / 4.0] {
            let digits = 10f64.powf(part.log10().floor() - 1.0);
            let rounded = (part / digits).round() * digits;
            if rounded > 0.0 && (rounded - crate::costmodel::buckets::DEFAULT_CAP_MB).abs() > 1e-9 {
                caps.push(rounded);
            }
        }
    }
    caps.sort_by(f64::total_cmp);
    caps.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    caps
}

/// Every candidate for a backend, the default first. `base`: the run's own settings (a setting
/// it already has is not tried again); `grad_bytes`: the model's, from its k=1 run. On the
/// simulator, transport modes its profile says deadlock DDP are left out (as they would hang,
/// not measure).
pub fn space(
    backend: Backend,
    profile: Option<&Profile>,
    base: &NcclSettings,
    grad_bytes: Option<u64>,
) -> Vec<Candidate> {
    let mut v = vec![Candidate::default_one()];
    // `caps_mb` makes sizes above 0 only: none is dropped here.
    v.extend(
        caps_mb(grad_bytes)
            .into_iter()
            .filter_map(BucketCapMb::new)
            .map(Candidate::bucket_cap),
    );
    if backend != Backend::Sim {
        // The simulator models neither: it would measure noise.
        let both = DdpSettings {
            static_graph: Some(true),
            grad_as_bucket_view: Some(true),
            ..Default::default()
        };
        v.push(Candidate::ddp(
            both,
            "static_graph+bucket_view".into(),
            false,
        ));
    }
    let nccl: Vec<(&str, &str)> = match backend {
        // gloo runs no NCCL: its knobs would be ignored (and ddptop refuses them there).
        Backend::Gloo => Vec::new(),
        Backend::Sim => SIM_NCCL
            .iter()
            .copied()
            .filter(|(k, val)| {
                let mut s = base.clone();
                s.set(k, Some(val.to_string()));
                profile.is_none_or(|p| !p.training_hangs(s.mode()))
            })
            .collect(),
        Backend::Nccl => NCCL_SETTINGS.to_vec(),
    };
    v.extend(
        nccl.into_iter()
            .filter(|(k, val)| base.get(k) != Some(val))
            .map(|(k, val)| Candidate::one(k, val, format!("{k}={val}"))),
    );
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[Candidate]) -> Vec<String> {
        v.iter().map(|c| c.name.clone()).collect()
    }

    #[test]
    fn gloo_gets_ddp_settings_only_and_nccl_gets_its_knobs_too() {
        let base = NcclSettings::default();
        let gloo = space(Backend::Gloo, None, &base, None);
        assert_eq!(gloo[0], Candidate::default_one());
        assert!(
            gloo.iter().all(|c| c.nccl_env().is_empty()),
            "{:?}",
            names(&gloo)
        );
        assert!(names(&gloo).contains(&"bucket_cap_mb=5".to_string()));
        assert!(names(&gloo).contains(&"static_graph+bucket_view".to_string()));
        let nccl = space(Backend::Nccl, None, &base, None);
        assert_eq!(nccl.len(), gloo.len() + NCCL_SETTINGS.len());
        let algo = nccl.iter().find(|c| c.name == "NCCL_ALGO=Tree").unwrap();
        assert_eq!(algo.nccl_env(), [("NCCL_ALGO".into(), "Tree".into())]);
        // A setting the run already has is not a candidate.
        let mut p2p = NcclSettings::default();
        p2p.set("NCCL_P2P_DISABLE", Some("1".into()));
        assert!(
            !names(&space(Backend::Nccl, None, &p2p, None)).contains(&"NCCL_P2P_DISABLE=1".into())
        );
    }

    #[test]
    fn the_simulator_leaves_out_what_it_does_not_model_and_what_deadlocks() {
        let base = NcclSettings::default();
        let pcie = Profile::get("book-pcie").unwrap();
        let sim = space(Backend::Sim, Some(&pcie), &base, None);
        let n = names(&sim);
        assert!(!n.contains(&"static_graph+bucket_view".into()));
        // The book's PCIe box deadlocks DDP with SHM memcpy: not tried.
        assert!(!n.contains(&"NCCL_SHM_USE_CUDA_MEMCPY=1".into()), "{n:?}");
        assert!(n.contains(&"NCCL_P2P_DISABLE=1".into()), "{n:?}");
        let c = sim.iter().find(|c| c.name == "bucket_cap_mb=5").unwrap();
        assert_eq!(c.cap_mb(), Some(5.0));
        let both = c.combine(sim.last().unwrap());
        assert_eq!(both.name, "bucket_cap_mb=5 + NCCL_P2P_DISABLE=1");
        assert_eq!(both.settings(&base).get("NCCL_P2P_DISABLE"), Some("1"));
        assert_eq!(
            both.settings(&base).get(crate::run::ddp::CAP_ENV),
            Some("5")
        );
    }

    #[test]
    fn a_small_model_gets_bucket_sizes_that_split_it() {
        assert_eq!(caps_mb(None), BUCKET_CAPS_MB);
        // 0.8 MiB of gradients: 0.05 and 0.2 MiB join the fixed sizes.
        let caps = caps_mb(Some(838_861));
        assert_eq!(caps[..2], [0.05, 0.2]);
        assert_eq!(caps.len(), BUCKET_CAPS_MB.len() + 2);
        // ResNet-18's 42.6 MiB: 2.7 and 11 MiB.
        let caps = caps_mb(Some(crate::costmodel::RESNET18_GRAD_BYTES));
        assert!(caps.contains(&2.7) && caps.contains(&11.0), "{caps:?}");
    }
}
