//! The NCCL (and other environment) settings of a launch, as one type: what the header's badges,
//! the curve key, the recorded environment, the cost model's table and the toggles all read.
//!
//! ddptop's own default is `NCCL_NVLS_ENABLE=0` (NVLink multicast off: it changes busbw on
//! NVSwitch machines and is not wanted on shared ones); it is a visible setting like any other and
//! the user can turn it off (`v`, `--nvls on`). A variable set to `None` is removed from the
//! launch's environment; for a variable ddptop does not set by default that is the same run as
//! leaving it out, so it does not change the curve.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The NCCL variables ddptop knows by name (toggles, presets, the cost model). `name` (the
/// environment variable) is derived from the variant: `P2pDisable` is `NCCL_P2P_DISABLE`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE", prefix = "NCCL_")]
pub enum NcclVar {
    ShmUseCudaMemcpy,
    P2pDisable,
    NvlsEnable,
    ShmDisable,
    Algo,
    Proto,
}

impl NcclVar {
    /// The variables a key toggles, in the order the help lists them.
    pub const TOGGLES: [NcclVar; 3] = [
        NcclVar::ShmUseCudaMemcpy,
        NcclVar::P2pDisable,
        NcclVar::NvlsEnable,
    ];
    pub const ALL: [NcclVar; 6] = [
        NcclVar::ShmUseCudaMemcpy,
        NcclVar::P2pDisable,
        NcclVar::NvlsEnable,
        NcclVar::ShmDisable,
        NcclVar::Algo,
        NcclVar::Proto,
    ];

    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The value its toggle sets (`1` for the switches, `0` for NVLS: the toggle turns it off).
    pub fn toggle_value(self) -> &'static str {
        match self {
            NcclVar::NvlsEnable => "0",
            _ => "1",
        }
    }

    /// Kebab-case name, as in `toggle-p2p-disable` (shorter than the variant's: a second
    /// spelling, so a table of its own).
    pub fn slug(self) -> &'static str {
        match self {
            NcclVar::ShmUseCudaMemcpy => "shm-memcpy",
            NcclVar::P2pDisable => "p2p-disable",
            NcclVar::NvlsEnable => "nvls",
            NcclVar::ShmDisable => "shm-disable",
            NcclVar::Algo => "algo",
            NcclVar::Proto => "proto",
        }
    }

    pub fn from_slug(s: &str) -> Option<NcclVar> {
        NcclVar::ALL.into_iter().find(|v| v.slug() == s)
    }

    /// Short label for the hint bar.
    pub fn hint(self) -> &'static str {
        match self {
            NcclVar::ShmUseCudaMemcpy => "SHM memcpy",
            NcclVar::P2pDisable => "P2P off",
            NcclVar::NvlsEnable => "NVLS off",
            NcclVar::ShmDisable => "SHM off",
            NcclVar::Algo => "algo",
            NcclVar::Proto => "proto",
        }
    }
}

/// Which of the switches the cost model's bandwidth tables distinguish are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct NcclMode {
    pub p2p_disable: bool,
    pub shm_memcpy: bool,
}

impl NcclMode {
    pub const DEFAULT: NcclMode = NcclMode {
        p2p_disable: false,
        shm_memcpy: false,
    };
    pub const P2P_OFF: NcclMode = NcclMode {
        p2p_disable: true,
        shm_memcpy: false,
    };
    pub const SHM_MEMCPY: NcclMode = NcclMode {
        p2p_disable: false,
        shm_memcpy: true,
    };
    pub const P2P_OFF_SHM_MEMCPY: NcclMode = NcclMode {
        p2p_disable: true,
        shm_memcpy: true,
    };
}

impl fmt::Display for NcclMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.p2p_disable {
            parts.push("NCCL_P2P_DISABLE=1");
        }
        if self.shm_memcpy {
            parts.push("NCCL_SHM_USE_CUDA_MEMCPY=1");
        }
        if parts.is_empty() {
            f.write_str("defaults")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

/// A partial set of variables (a config preset, `--env`): `None` removes the variable.
pub type EnvOverlay = BTreeMap<String, Option<String>>;

/// The environment settings of one launch, on top of ddptop's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NcclSettings {
    vars: BTreeMap<String, Option<String>>,
}

/// ddptop's own settings, applied unless the user changes them.
const DEFAULTS: [(NcclVar, &str); 1] = [(NcclVar::NvlsEnable, "0")];

impl Default for NcclSettings {
    fn default() -> Self {
        NcclSettings {
            vars: DEFAULTS
                .iter()
                .map(|(v, val)| (v.name().to_string(), Some(val.to_string())))
                .collect(),
        }
    }
}

impl NcclSettings {
    /// ddptop's defaults with `overlay` on top.
    pub fn with(overlay: &EnvOverlay) -> Self {
        let mut s = NcclSettings::default();
        s.apply(overlay);
        s
    }

    /// Settings as stored: a run stored before ddptop's defaults were recorded ran with them, so
    /// a default variable that is missing gets its default value.
    pub fn from_stored(vars: EnvOverlay) -> Self {
        let mut s = NcclSettings { vars };
        for (v, val) in DEFAULTS {
            s.vars
                .entry(v.name().to_string())
                .or_insert_with(|| Some(val.to_string()));
        }
        s
    }

    pub fn apply(&mut self, overlay: &EnvOverlay) {
        for (k, v) in overlay {
            self.vars.insert(k.clone(), v.clone());
        }
    }

    pub fn set(&mut self, name: &str, value: Option<String>) {
        self.vars.insert(name.to_string(), value);
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).and_then(|v| v.as_deref())
    }

    /// Whether `var` holds its toggle's value (`NCCL_P2P_DISABLE=1`, `NCCL_NVLS_ENABLE=0`).
    pub fn is_on(&self, var: NcclVar) -> bool {
        self.get(var.name()) == Some(var.toggle_value())
    }

    /// Flip a toggle; returns whether it is now on. Off means "not set by ddptop" (NCCL decides).
    pub fn toggle(&mut self, var: NcclVar) -> bool {
        let on = !self.is_on(var);
        self.vars.insert(
            var.name().to_string(),
            on.then(|| var.toggle_value().to_string()),
        );
        on
    }

    /// The settings that make a difference: unsets of variables ddptop does not set are dropped.
    pub fn normalized(&self) -> NcclSettings {
        let defaults: Vec<&str> = DEFAULTS.iter().map(|(v, _)| v.name()).collect();
        let mut s = NcclSettings::from_stored(self.vars.clone());
        s.vars
            .retain(|k, v| v.is_some() || defaults.contains(&k.as_str()));
        s
    }

    /// True when the launch is the same as with ddptop's defaults.
    pub fn is_default(&self) -> bool {
        self.normalized() == NcclSettings::default()
    }

    /// Every variable of the launch, in name order: set (`Some`) or removed (`None`).
    pub fn launch_env(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_deref()))
    }

    /// As stored (`toggles_json`): every variable, `None` for removed ones.
    pub fn as_map(&self) -> &EnvOverlay {
        &self.vars
    }

    /// The settings a launch on `backend` can use. gloo's collectives never touch NCCL, so on
    /// gloo every `NCCL_` variable goes (ddptop's own NVLS default included): neither the
    /// launch's environment nor a label of the run then speaks of NCCL. DDP's settings
    /// (`DDPTOP_DDP_*`) stay.
    pub fn for_backend(&self, backend: crate::protocol::Backend) -> NcclSettings {
        let mut s = self.clone();
        if backend == crate::protocol::Backend::Gloo {
            s.vars.retain(|k, _| !k.starts_with("NCCL_"));
        }
        s
    }

    /// `badges`, as a run on `backend` shows them: on gloo without NCCL's (see `for_backend`;
    /// `badges` itself puts ddptop's defaults back, as a stored run ran with them).
    pub fn badges_for(&self, backend: crate::protocol::Backend) -> Vec<String> {
        let gloo = backend == crate::protocol::Backend::Gloo;
        self.badges()
            .into_iter()
            .filter(|b| !(gloo && b.trim_start_matches('-').starts_with("NCCL_")))
            .collect()
    }

    /// `NCCL_NVLS_ENABLE=0`, `-NCCL_ALGO` for the effective settings.
    pub fn badges(&self) -> Vec<String> {
        self.normalized()
            .vars
            .iter()
            .map(|(k, v)| badge(k, v.as_deref()))
            .collect()
    }

    /// The badges without the `NCCL_` prefix: `NVLS_ENABLE=0 P2P_DISABLE=1`.
    pub fn short_badges(&self) -> Vec<String> {
        self.normalized()
            .vars
            .iter()
            .map(|(k, v)| badge(k.strip_prefix("NCCL_").unwrap_or(k), v.as_deref()))
            .collect()
    }

    /// What differs from ddptop's defaults, short: `default`, `P2P_DISABLE=1`, `-NVLS_ENABLE`.
    pub fn short(&self) -> String {
        let base = NcclSettings::default();
        let diff: Vec<String> = self
            .normalized()
            .vars
            .iter()
            .filter(|(k, v)| base.vars.get(*k) != Some(*v))
            .map(|(k, v)| badge(k.strip_prefix("NCCL_").unwrap_or(k), v.as_deref()))
            .collect();
        if diff.is_empty() {
            "default".into()
        } else {
            diff.join(",")
        }
    }

    /// The switches the cost model tells apart.
    pub fn mode(&self) -> NcclMode {
        NcclMode {
            p2p_disable: self.is_on(NcclVar::P2pDisable),
            shm_memcpy: self.is_on(NcclVar::ShmUseCudaMemcpy),
        }
    }

    /// The built-in presets (the config may add its own and override these).
    pub fn builtin_presets() -> BTreeMap<String, EnvOverlay> {
        let one = |v: NcclVar| EnvOverlay::from([(v.name().to_string(), Some("1".to_string()))]);
        BTreeMap::from([
            ("shm-memcpy".to_string(), one(NcclVar::ShmUseCudaMemcpy)),
            ("no-p2p".to_string(), one(NcclVar::P2pDisable)),
            (
                "defaults".to_string(),
                [
                    NcclVar::ShmUseCudaMemcpy,
                    NcclVar::P2pDisable,
                    NcclVar::ShmDisable,
                    NcclVar::Algo,
                    NcclVar::Proto,
                ]
                .iter()
                .map(|v| (v.name().to_string(), None))
                .collect(),
            ),
        ])
    }
}

/// What the run's NCCL log showed of its toggles (`RunView::launch.nccl_read`, filled by
/// `supervisor::nccl_log::toggles_read`), for a screen or report:
/// `NCCL_SHM_USE_CUDA_MEMCPY=1 ignored by NCCL` for each toggle NCCL did not read.
pub fn ignored_note(read: &BTreeMap<String, bool>) -> Option<String> {
    let ignored: Vec<&str> = read
        .iter()
        .filter(|(_, taken)| !**taken)
        .map(|(k, _)| k.as_str())
        .collect();
    (!ignored.is_empty()).then(|| format!("NCCL ignored {}", ignored.join(", ")))
}

fn badge(name: &str, v: Option<&str>) -> String {
    match v {
        Some(v) => format!("{name}={v}"),
        None => format!("-{name}"),
    }
}

impl fmt::Display for NcclSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.badges().join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names as the hand-written tables spelled them before they were derived (issue 49):
    /// environment variables, and the toggles' words in the config and `--script`.
    #[test]
    fn names_are_the_old_names() {
        let names: Vec<&str> = NcclVar::ALL.iter().map(|v| v.name()).collect();
        assert_eq!(
            names,
            [
                "NCCL_SHM_USE_CUDA_MEMCPY",
                "NCCL_P2P_DISABLE",
                "NCCL_NVLS_ENABLE",
                "NCCL_SHM_DISABLE",
                "NCCL_ALGO",
                "NCCL_PROTO",
            ]
        );
        for v in NcclVar::ALL {
            assert_eq!(NcclVar::from_slug(v.slug()), Some(v));
        }
    }

    #[test]
    fn a_gloo_launch_keeps_ddps_settings_and_no_nccl_variable() {
        let mut s = NcclSettings::default();
        s.set("DDPTOP_DDP_BUCKET_CAP_MB", Some("5".into()));
        let gloo = s.for_backend(crate::protocol::Backend::Gloo);
        assert_eq!(
            s.badges_for(crate::protocol::Backend::Gloo),
            ["DDPTOP_DDP_BUCKET_CAP_MB=5"]
        );
        assert_eq!(
            s.badges_for(crate::protocol::Backend::Nccl),
            ["DDPTOP_DDP_BUCKET_CAP_MB=5", "NCCL_NVLS_ENABLE=0"]
        );
        assert_eq!(
            gloo.launch_env().collect::<Vec<_>>(),
            [("DDPTOP_DDP_BUCKET_CAP_MB", Some("5"))]
        );
        let nccl = s.for_backend(crate::protocol::Backend::Nccl);
        assert_eq!(nccl, s, "NCCL launches keep everything");
        assert_eq!(s.for_backend(crate::protocol::Backend::Sim), s);
    }

    #[test]
    fn nvls_off_is_a_visible_default_the_user_can_turn_off() {
        let mut s = NcclSettings::default();
        assert!(s.is_on(NcclVar::NvlsEnable));
        assert_eq!(s.badges(), ["NCCL_NVLS_ENABLE=0"]);
        assert_eq!(s.short(), "default");
        assert!(!s.toggle(NcclVar::NvlsEnable));
        assert_eq!(
            s.launch_env().collect::<Vec<_>>(),
            [("NCCL_NVLS_ENABLE", None)]
        );
        assert_eq!(s.short(), "-NVLS_ENABLE");
        assert_ne!(s.normalized(), NcclSettings::default());
    }

    #[test]
    fn the_defaults_preset_is_no_change() {
        let presets = NcclSettings::builtin_presets();
        let d = NcclSettings::with(&presets["defaults"]);
        assert!(d.is_default());
        assert_eq!(d.normalized(), NcclSettings::default());
        // The explicit unsets still reach the launch (they clear the parent's environment).
        assert!(d.launch_env().any(|(k, v)| k == "NCCL_ALGO" && v.is_none()));
        let p = NcclSettings::with(&presets["no-p2p"]);
        assert_eq!(p.mode(), NcclMode::P2P_OFF);
        assert_eq!(p.short(), "P2P_DISABLE=1");
    }

    #[test]
    fn stored_runs_without_the_default_ran_with_it() {
        let old = NcclSettings::from_stored(EnvOverlay::from([(
            "NCCL_P2P_DISABLE".to_string(),
            Some("1".to_string()),
        )]));
        assert_eq!(old.badges(), ["NCCL_NVLS_ENABLE=0", "NCCL_P2P_DISABLE=1"]);
    }
}
