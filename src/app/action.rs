//! The one enum behind key bindings, the help screen, the hint bar and `--script`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    LaunchK1,
    LaunchK2,
    LaunchK4,
    Sweep,
    SwitchExperiment,
    ToggleDataPath,
    Probe,
    Bench,
    ToggleShmMemcpy,
    ToggleP2pDisable,
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
    Help,
    Quit,
}

impl Action {
    pub const ALL: [Action; 22] = [
        Action::LaunchK1,
        Action::LaunchK2,
        Action::LaunchK4,
        Action::Sweep,
        Action::SwitchExperiment,
        Action::ToggleDataPath,
        Action::Probe,
        Action::Bench,
        Action::ToggleShmMemcpy,
        Action::ToggleP2pDisable,
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
        Action::Help,
        Action::Quit,
    ];

    /// Name used in the config's key map and in `--script`.
    pub fn name(self) -> &'static str {
        match self {
            Action::LaunchK1 => "launch-k1",
            Action::LaunchK2 => "launch-k2",
            Action::LaunchK4 => "launch-k4",
            Action::Sweep => "sweep",
            Action::SwitchExperiment => "switch-experiment",
            Action::ToggleDataPath => "toggle-data-path",
            Action::Probe => "probe",
            Action::Bench => "bench",
            Action::ToggleShmMemcpy => "toggle-shm-memcpy",
            Action::ToggleP2pDisable => "toggle-p2p-disable",
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
            Action::Help => "help",
            Action::Quit => "quit",
        }
    }

    pub fn from_name(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == s)
    }

    /// One line for the help screen.
    pub fn describe(self) -> &'static str {
        match self {
            Action::LaunchK1 => "launch the next experiment at k=1",
            Action::LaunchK2 => "launch the next experiment at k=2",
            Action::LaunchK4 => "launch the next experiment at k=4",
            Action::Sweep => "sweep k = 1, 2, 4 one after another",
            Action::SwitchExperiment => "switch weak/strong scaling for the next launch",
            Action::ToggleDataPath => {
                "switch device-resident data / DataLoader for the next launch"
            }
            Action::Probe => "no_sync probe: toggle it live on the running run, or launch it",
            Action::Bench => "all-reduce bandwidth sweep",
            Action::ToggleShmMemcpy => "toggle NCCL_SHM_USE_CUDA_MEMCPY=1 for the next launch",
            Action::ToggleP2pDisable => "toggle NCCL_P2P_DISABLE=1 for the next launch",
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
            Action::Help => "show / hide this help",
            Action::Quit => "quit (stops runs unless --detach)",
        }
    }

    /// Short label for the hint bar; `None` keeps it out of the bar (help still lists it).
    pub fn hint(self) -> Option<&'static str> {
        Some(match self {
            Action::LaunchK1 => "k=1",
            Action::LaunchK2 => "k=2",
            Action::LaunchK4 => "k=4",
            Action::Sweep => "sweep",
            Action::SwitchExperiment => "weak/strong",
            Action::Probe => "probe",
            Action::Bench => "bench",
            Action::ToggleShmMemcpy => "SHM memcpy",
            Action::ToggleP2pDisable => "P2P off",
            Action::Stop => "stop",
            Action::Help => "help",
            Action::Quit => "quit",
            _ => return None,
        })
    }

    /// The k this action launches at, if it is a launch.
    pub fn launch_k(self) -> Option<u32> {
        match self {
            Action::LaunchK1 => Some(1),
            Action::LaunchK2 => Some(2),
            Action::LaunchK4 => Some(4),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for a in Action::ALL {
            assert_eq!(Action::from_name(a.name()), Some(a));
            assert!(seen.insert(a.name()), "duplicate name {}", a.name());
            assert!(!a.describe().is_empty());
        }
    }
}
