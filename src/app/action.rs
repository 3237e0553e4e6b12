//! The one enum behind key bindings, the help screen, the hint bar and `--script`. Variants carry
//! their data (`Launch { k }`, `Toggle(NcclVar)`); names, help lines and hints are generated
//! from them, so a new toggle or k is one entry in `ALL`. A unit variant's name is derived from
//! the variant (strum, kebab-case: `NextPane` is `next-pane`); only the two variants carrying
//! data spell theirs out in `name`.

use crate::run::NcclVar;
use std::borrow::Cow;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum Action {
    Launch {
        k: u32,
    },
    Sweep,
    SwitchExperiment,
    ToggleDataPath,
    Probe,
    Bench,
    Tune,
    SaveTuned,
    Toggle(NcclVar),
    /// This node or all nodes of `[nodes] hosts` for the next launches.
    ToggleNodes,
    Rerun,
    Stop,
    NextPane,
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    Focus,
    Close,
    Zoom,
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
    pub const ALL: [Action; 33] = [
        Action::Launch { k: 1 },
        Action::Launch { k: 2 },
        Action::Launch { k: 4 },
        Action::Sweep,
        Action::SwitchExperiment,
        Action::ToggleDataPath,
        Action::Probe,
        Action::Bench,
        Action::Tune,
        Action::SaveTuned,
        Action::Toggle(NcclVar::TOGGLES[0]),
        Action::Toggle(NcclVar::TOGGLES[1]),
        Action::Toggle(NcclVar::TOGGLES[2]),
        Action::ToggleNodes,
        Action::Rerun,
        Action::Stop,
        Action::NextPane,
        Action::Up,
        Action::Down,
        Action::PageUp,
        Action::PageDown,
        Action::Top,
        Action::Bottom,
        Action::Focus,
        Action::Close,
        Action::Zoom,
        Action::NextRank,
        Action::Freeze,
        Action::NextTheme,
        Action::NextPreset,
        Action::WriteReport,
        Action::Help,
        Action::Quit,
    ];

    /// Name used in the config's key map and in `--script`: `launch-k2`, `toggle-p2p-disable`,
    /// `next-pane`.
    pub fn name(self) -> Cow<'static, str> {
        match self {
            Action::Launch { k } => format!("launch-k{k}").into(),
            Action::Toggle(v) => format!("toggle-{}", v.slug()).into(),
            unit => Cow::Borrowed(unit.into()),
        }
    }

    pub fn from_name(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == s)
    }

    /// One line for the help screen (at most 56 columns: the help fits 80×24).
    pub fn describe(self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Action::Launch { k } => return format!("launch the next experiment at k={k}").into(),
            Action::Toggle(NcclVar::NvlsEnable) => "toggle NCCL_NVLS_ENABLE=0 (ddptop's default)",
            Action::Toggle(v) => {
                return format!("toggle {}={} (next launch)", v.name(), v.toggle_value()).into();
            }
            Action::Sweep => "sweep k = 1, 2, 4 one after another",
            Action::SwitchExperiment => "next experiment: weak, strong, fsdp, jax, handrolled",
            Action::ToggleDataPath => "device data, book's or fast DataLoader (next launch)",
            Action::Probe => "no_sync probe: live on the running run, or launch it",
            Action::Bench => "all-reduce bandwidth sweep",
            Action::Tune => "tune DDP/NCCL settings (live table; again: hide)",
            Action::SaveTuned => "save the tuning's winner as a config preset",
            Action::ToggleNodes => "launch on this node / all [nodes] hosts",
            Action::Rerun => "re-run the selected run with its settings",
            Action::Stop => "stop the selected run, or cancel a queued launch",
            Action::NextPane => "focus the next pane (tabs on small screens)",
            Action::Up => "select the previous run; Log focused: scroll up",
            Action::Down => "select the next run; Log focused: scroll down",
            Action::PageUp => "a page up (runs or log)",
            Action::PageDown => "a page down (runs or log)",
            Action::Top => "first run; Log focused: the oldest line",
            Action::Bottom => "last run; Log focused: follow the newest",
            Action::Focus => "details of the selected run (and focus it)",
            Action::Close => "close the details or the help",
            Action::Zoom => "maximize the focused pane / back",
            Action::NextRank => "timeline: show the next rank",
            Action::Freeze => "freeze / unfreeze the timeline",
            Action::NextTheme => "next colour theme",
            Action::NextPreset => "next NCCL preset of the config (next launch)",
            Action::WriteReport => "HTML report of the selected run's scaling curve",
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
            Action::SwitchExperiment => "experiment",
            Action::Zoom => "zoom",
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

    /// Every name as the hand-written table spelled it before names were derived (issue 49):
    /// they are the config's key map and `--script`'s words, so none may change.
    const OLD_NAMES: [&str; 33] = [
        "launch-k1",
        "launch-k2",
        "launch-k4",
        "sweep",
        "switch-experiment",
        "toggle-data-path",
        "probe",
        "bench",
        "tune",
        "save-tuned",
        "toggle-shm-memcpy",
        "toggle-p2p-disable",
        "toggle-nvls",
        "toggle-nodes",
        "rerun",
        "stop",
        "next-pane",
        "up",
        "down",
        "page-up",
        "page-down",
        "top",
        "bottom",
        "focus",
        "close",
        "zoom",
        "next-rank",
        "freeze",
        "next-theme",
        "next-preset",
        "write-report",
        "help",
        "quit",
    ];

    #[test]
    fn names_are_the_old_names_and_round_trip() {
        let names: Vec<String> = Action::ALL.iter().map(|a| a.name().into_owned()).collect();
        assert_eq!(names, OLD_NAMES);
        for (a, old) in Action::ALL.into_iter().zip(OLD_NAMES) {
            assert_eq!(Action::from_name(old), Some(a));
        }
        assert_eq!(Action::from_name("next_pane"), None);
        assert_eq!(Action::from_name("launch-k3"), None);
    }

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
            "toggle NCCL_SHM_USE_CUDA_MEMCPY=1 (next launch)"
        );
        for a in Action::ALL {
            assert!(a.describe().chars().count() <= 56, "{}", a.describe());
        }
    }
}
