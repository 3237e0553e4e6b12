//! The one enum behind key bindings, the help screen, the hint bar and `--script`. Variants carry
//! their data (`Launch { k }`, `Toggle(NcclVar)`); names, help lines and hints are generated
//! from them, so a new toggle or k is one entry in `ALL`.

use crate::run::NcclVar;
use std::borrow::Cow;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Launch { k: u32 },
    Sweep,
    SwitchExperiment,
    ToggleDataPath,
    Probe,
    Bench,
    Toggle(NcclVar),
    Rerun,
    Stop,
    NextPane,
    Up,
    Down,
    Focus,
    NextRank,
    Freeze,
    NextTheme,
    NextPreset,
    WriteReport,
    Help,
    Quit,
}

impl Action {
    /// Every action, in the order the help and the hint bar list them.
    pub const ALL: [Action; 24] = [
        Action::Launch { k: 1 },
        Action::Launch { k: 2 },
        Action::Launch { k: 4 },
        Action::Sweep,
        Action::SwitchExperiment,
        Action::ToggleDataPath,
        Action::Probe,
        Action::Bench,
        Action::Toggle(NcclVar::TOGGLES[0]),
        Action::Toggle(NcclVar::TOGGLES[1]),
        Action::Toggle(NcclVar::TOGGLES[2]),
        Action::Rerun,
        Action::Stop,
        Action::NextPane,
        Action::Up,
        Action::Down,
        Action::Focus,
        Action::NextRank,
        Action::Freeze,
        Action::NextTheme,
        Action::NextPreset,
        Action::WriteReport,
        Action::Help,
        Action::Quit,
    ];

    /// Name used in the config's key map and in `--script`: `launch-k2`, `toggle-p2p-disable`.
    pub fn name(self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Action::Launch { k } => return format!("launch-k{k}").into(),
            Action::Toggle(v) => return format!("toggle-{}", v.slug()).into(),
            Action::Sweep => "sweep",
            Action::SwitchExperiment => "switch-experiment",
            Action::ToggleDataPath => "toggle-data-path",
            Action::Probe => "probe",
            Action::Bench => "bench",
            Action::Rerun => "rerun",
            Action::Stop => "stop",
            Action::NextPane => "next-pane",
            Action::Up => "up",
            Action::Down => "down",
            Action::Focus => "focus",
            Action::NextRank => "next-rank",
            Action::Freeze => "freeze",
            Action::NextTheme => "next-theme",
            Action::NextPreset => "next-preset",
            Action::WriteReport => "write-report",
            Action::Help => "help",
            Action::Quit => "quit",
        })
    }

    pub fn from_name(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == s)
    }

    /// One line for the help screen.
    pub fn describe(self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Action::Launch { k } => return format!("launch the next experiment at k={k}").into(),
            Action::Toggle(NcclVar::NvlsEnable) => {
                "toggle NCCL_NVLS_ENABLE=0 (ddptop's default: NVLink multicast off)"
            }
            Action::Toggle(v) => {
                return format!(
                    "toggle {}={} for the next launch",
                    v.name(),
                    v.toggle_value()
                )
                .into();
            }
            Action::Sweep => "sweep k = 1, 2, 4 one after another",
            Action::SwitchExperiment => {
                "switch weak/strong/fsdp/jax/handrolled for the next launch"
            }
            Action::ToggleDataPath => {
                "switch device-resident data / DataLoader for the next launch"
            }
            Action::Probe => "no_sync probe: toggle it live on the running run, or launch it",
            Action::Bench => "all-reduce bandwidth sweep",
            Action::Rerun => "re-run the selected run with its toggles",
            Action::Stop => "stop the selected run",
            Action::NextPane => "move focus to the next pane",
            Action::Up => "select the previous run",
            Action::Down => "select the next run",
            Action::Focus => "focus the selected run (timeline, probe, bench, log)",
            Action::NextRank => "timeline: show the next rank",
            Action::Freeze => "freeze / unfreeze the timeline",
            Action::NextTheme => "next colour theme",
            Action::NextPreset => "apply the next NCCL preset of the config to the next launch",
            Action::WriteReport => "write an HTML report of the selected run's scaling curve",
            Action::Help => "show / hide this help",
            Action::Quit => "quit (stops runs unless --detach)",
        })
    }

    /// Short label for the hint bar; `None` keeps it out of the bar (help still lists it).
    pub fn hint(self) -> Option<Cow<'static, str>> {
        Some(Cow::Borrowed(match self {
            Action::Launch { k } => return Some(format!("k={k}").into()),
            Action::Toggle(v) => v.hint(),
            Action::Sweep => "sweep",
            Action::SwitchExperiment => "weak/strong",
            Action::Probe => "probe",
            Action::Bench => "bench",
            Action::Stop => "stop",
            Action::Help => "help",
            Action::Quit => "quit",
            _ => return None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for a in Action::ALL {
            assert_eq!(Action::from_name(&a.name()), Some(a));
            assert!(seen.insert(a.name()), "duplicate name {}", a.name());
            assert!(!a.describe().is_empty());
        }
        assert_eq!(Action::Launch { k: 2 }.name(), "launch-k2");
        assert_eq!(
            Action::Toggle(NcclVar::P2pDisable).name(),
            "toggle-p2p-disable"
        );
        assert_eq!(
            Action::Toggle(NcclVar::ShmUseCudaMemcpy).describe(),
            "toggle NCCL_SHM_USE_CUDA_MEMCPY=1 for the next launch"
        );
    }
}
