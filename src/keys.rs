//! Keys: parsing `p`, `Ctrl-c`, `F5` as the config writes them, matching terminal events, and the
//! key map (defaults, then the config's `[keys]` on top) behind the hint bar, help and scripts.

use crate::app::Action;
use crate::run::NcclVar;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::collections::BTreeMap;
use std::fmt;

/// A key as written in the config: a character, or a named key, with Ctrl/Alt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub code: KeyName,
    pub ctrl: bool,
    pub alt: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyName {
    Char(char),
    Tab,
    BackTab,
    Enter,
    Esc,
    Space,
    Backspace,
    Delete,
    Insert,
    Up,
    Down,
    Left,
    Right,
    PageUp,
    PageDown,
    Home,
    End,
    F(u8),
}

const NAMED: [(&str, KeyName); 16] = [
    ("Tab", KeyName::Tab),
    ("BackTab", KeyName::BackTab),
    ("Enter", KeyName::Enter),
    ("Esc", KeyName::Esc),
    ("Space", KeyName::Space),
    ("Backspace", KeyName::Backspace),
    ("Delete", KeyName::Delete),
    ("Insert", KeyName::Insert),
    ("Up", KeyName::Up),
    ("Down", KeyName::Down),
    ("Left", KeyName::Left),
    ("Right", KeyName::Right),
    ("PageUp", KeyName::PageUp),
    ("PageDown", KeyName::PageDown),
    ("Home", KeyName::Home),
    ("End", KeyName::End),
];

impl Key {
    pub const fn plain(code: KeyName) -> Key {
        Key {
            code,
            ctrl: false,
            alt: false,
        }
    }

    pub const fn ch(c: char) -> Key {
        Key::plain(KeyName::Char(c))
    }

    /// Parse `p`, `P`, `?`, `Tab`, `Shift-Tab`, `Ctrl-c`, `Alt-x`, `F5`, `Space`. Named keys and
    /// modifiers are case-insensitive and may be joined with `-` or `+`; a single character is
    /// taken as written (`p` and `P` differ).
    pub fn parse(s: &str) -> Result<Key, String> {
        // [ctrl, alt, shift]
        let mut mods = [false; 3];
        let mut rest = s;
        'strip: loop {
            let lower = rest.to_ascii_lowercase();
            for (prefix, m) in [
                ("ctrl-", 0),
                ("ctrl+", 0),
                ("c-", 0),
                ("alt-", 1),
                ("alt+", 1),
                ("m-", 1),
                ("shift-", 2),
                ("shift+", 2),
            ] {
                if lower.starts_with(prefix) && rest.len() > prefix.len() {
                    mods[m] = true;
                    rest = &rest[prefix.len()..];
                    continue 'strip;
                }
            }
            break;
        }
        let [ctrl, alt, shift] = mods;
        let mut chars = rest.chars();
        let code = match (chars.next(), chars.next()) {
            (None, _) => return Err("empty key".into()),
            (Some(c), None) => {
                if ctrl {
                    KeyName::Char(c.to_ascii_lowercase())
                } else if shift {
                    KeyName::Char(c.to_ascii_uppercase())
                } else {
                    KeyName::Char(c)
                }
            }
            _ => {
                let lower = rest.to_ascii_lowercase();
                if let Some((_, k)) = NAMED.iter().find(|(n, _)| n.to_ascii_lowercase() == lower) {
                    if *k == KeyName::Tab && shift {
                        KeyName::BackTab
                    } else {
                        *k
                    }
                } else if lower == "return" {
                    KeyName::Enter
                } else if lower == "escape" {
                    KeyName::Esc
                } else if let Some(n) = lower
                    .strip_prefix('f')
                    .and_then(|n| n.parse::<u8>().ok())
                    .filter(|n| (1..=24).contains(n))
                {
                    KeyName::F(n)
                } else {
                    return Err(format!(
                        "unknown key {s:?} (use a character, Tab, Enter, Esc, Space, Up, Down, Left, Right, PageUp, PageDown, Home, End, Backspace, Delete, Insert, F1..F24, with Ctrl-/Alt-/Shift- prefixes)"
                    ));
                }
            }
        };
        Ok(Key { code, ctrl, alt })
    }

    /// The key as an incoming terminal event maps it; `None` for releases and keys we don't name.
    pub fn from_event(ev: &KeyEvent) -> Option<Key> {
        if ev.kind == KeyEventKind::Release {
            return None;
        }
        let ctrl = ev.modifiers.contains(KeyModifiers::CONTROL);
        let alt = ev.modifiers.contains(KeyModifiers::ALT);
        let code = match ev.code {
            KeyCode::Char(' ') => KeyName::Space,
            KeyCode::Char(c) if ctrl => KeyName::Char(c.to_ascii_lowercase()),
            KeyCode::Char(c) => KeyName::Char(c),
            KeyCode::Tab if ev.modifiers.contains(KeyModifiers::SHIFT) => KeyName::BackTab,
            KeyCode::Tab => KeyName::Tab,
            KeyCode::BackTab => KeyName::BackTab,
            KeyCode::Enter => KeyName::Enter,
            KeyCode::Esc => KeyName::Esc,
            KeyCode::Backspace => KeyName::Backspace,
            KeyCode::Delete => KeyName::Delete,
            KeyCode::Insert => KeyName::Insert,
            KeyCode::Up => KeyName::Up,
            KeyCode::Down => KeyName::Down,
            KeyCode::Left => KeyName::Left,
            KeyCode::Right => KeyName::Right,
            KeyCode::PageUp => KeyName::PageUp,
            KeyCode::PageDown => KeyName::PageDown,
            KeyCode::Home => KeyName::Home,
            KeyCode::End => KeyName::End,
            KeyCode::F(n) => KeyName::F(n),
            _ => return None,
        };
        Some(Key { code, ctrl, alt })
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ctrl {
            f.write_str("Ctrl-")?;
        }
        if self.alt {
            f.write_str("Alt-")?;
        }
        match self.code {
            KeyName::Char(c) => write!(f, "{c}"),
            KeyName::F(n) => write!(f, "F{n}"),
            k => {
                let name = NAMED.iter().find(|(_, n)| *n == k).map_or("?", |(s, _)| *s);
                f.write_str(name)
            }
        }
    }
}

/// Key → action. Built from the defaults, then the config's `[keys]` table on top.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyMap {
    map: BTreeMap<Key, Action>,
}

/// The default bindings, in the order the help screen lists them.
pub const DEFAULT_KEYS: [(&str, Action); 38] = [
    ("1", Action::Launch { k: 1 }),
    ("2", Action::Launch { k: 2 }),
    ("4", Action::Launch { k: 4 }),
    ("a", Action::Sweep),
    ("s", Action::SwitchExperiment),
    ("d", Action::ToggleDataPath),
    ("p", Action::Probe),
    ("b", Action::Bench),
    ("T", Action::Tune),
    ("S", Action::SaveTuned),
    ("n", Action::Toggle(NcclVar::ShmUseCudaMemcpy)),
    ("P", Action::Toggle(NcclVar::P2pDisable)),
    ("v", Action::Toggle(NcclVar::NvlsEnable)),
    ("N", Action::ToggleNodes),
    ("r", Action::Rerun),
    ("x", Action::Stop),
    ("Tab", Action::NextPane),
    ("Up", Action::Up),
    ("k", Action::Up),
    ("Down", Action::Down),
    ("j", Action::Down),
    ("PageUp", Action::PageUp),
    ("PageDown", Action::PageDown),
    ("Home", Action::Top),
    ("g", Action::Top),
    ("End", Action::Bottom),
    ("G", Action::Bottom),
    ("Enter", Action::Focus),
    ("Esc", Action::Close),
    ("z", Action::Zoom),
    ("]", Action::NextRank),
    ("f", Action::Freeze),
    ("t", Action::NextTheme),
    ("e", Action::NextPreset),
    ("w", Action::WriteReport),
    ("?", Action::Help),
    ("q", Action::Quit),
    ("Ctrl-c", Action::Quit),
];

impl Default for KeyMap {
    fn default() -> Self {
        let map = DEFAULT_KEYS
            .iter()
            .map(|(k, a)| (Key::parse(k).expect("default keys parse"), *a))
            .collect();
        KeyMap { map }
    }
}

impl KeyMap {
    pub fn empty() -> Self {
        KeyMap {
            map: BTreeMap::new(),
        }
    }

    pub fn bind(&mut self, key: Key, action: Action) {
        self.map.insert(key, action);
    }

    pub fn unbind(&mut self, key: &Key) {
        self.map.remove(key);
    }

    pub fn get(&self, key: &Key) -> Option<Action> {
        self.map.get(key).copied()
    }

    /// The action a terminal key event triggers, if any.
    pub fn resolve(&self, ev: &KeyEvent) -> Option<Action> {
        let key = Key::from_event(ev)?;
        if ev.kind == KeyEventKind::Repeat
            && !matches!(
                self.map.get(&key),
                Some(Action::Up | Action::Down | Action::PageUp | Action::PageDown)
            )
        {
            // Holding a key repeats navigation only, never launches.
            return None;
        }
        self.map.get(&key).copied()
    }

    /// Resolve a key written as in the config (`"p"`, `"Tab"`), for `--script`.
    pub fn resolve_str(&self, key: &str) -> Option<Action> {
        Key::parse(key).ok().and_then(|k| self.get(&k))
    }

    /// Every key bound to `action`, characters first, in a stable order.
    pub fn keys_for(&self, action: Action) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .map
            .iter()
            .filter(|(_, a)| **a == action)
            .map(|(k, _)| *k)
            .collect();
        // Prefer a plain key for the hint bar: no modifiers, then characters, then named keys.
        keys.sort_by_key(|k| (k.ctrl || k.alt, !matches!(k.code, KeyName::Char(_)), *k));
        keys
    }

    /// The key the hint bar shows for `action`.
    pub fn first_key(&self, action: Action) -> Option<Key> {
        self.keys_for(action).into_iter().next()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Action)> {
        self.map.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyEventState;

    fn ev(code: KeyCode, m: KeyModifiers) -> KeyEvent {
        KeyEvent {
            code,
            modifiers: m,
            kind: KeyEventKind::Press,
            state: KeyEventState::NONE,
        }
    }

    #[test]
    fn key_strings_round_trip() {
        for s in [
            "p", "P", "?", "]", "Tab", "Ctrl-c", "Alt-x", "F5", "Enter", "Up", "Space",
        ] {
            assert_eq!(Key::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(Key::parse("ctrl+C").unwrap(), Key::parse("Ctrl-c").unwrap());
        assert_eq!(Key::parse("shift-tab").unwrap().code, KeyName::BackTab);
        assert!(Key::parse("Hyper-q").is_err());
        assert!(Key::parse("").is_err());
    }

    #[test]
    fn default_map_resolves_events() {
        let km = KeyMap::default();
        let shift = KeyModifiers::SHIFT;
        assert_eq!(
            km.resolve(&ev(KeyCode::Char('P'), shift)),
            Some(Action::Toggle(NcclVar::P2pDisable))
        );
        assert_eq!(
            km.resolve(&ev(KeyCode::Char('p'), KeyModifiers::NONE)),
            Some(Action::Probe)
        );
        assert_eq!(
            km.resolve(&ev(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Action::Quit)
        );
        assert_eq!(
            km.resolve(&ev(KeyCode::Tab, KeyModifiers::NONE)),
            Some(Action::NextPane)
        );
        assert_eq!(
            km.resolve(&ev(KeyCode::Char('?'), shift)),
            Some(Action::Help)
        );
        assert_eq!(
            km.resolve(&ev(KeyCode::Char('z'), KeyModifiers::NONE)),
            Some(Action::Zoom)
        );
        assert_eq!(
            km.resolve(&ev(KeyCode::Char('Z'), KeyModifiers::SHIFT)),
            None
        );
        assert_eq!(
            km.resolve(&ev(KeyCode::End, KeyModifiers::NONE)),
            Some(Action::Bottom)
        );
        assert_eq!(
            km.resolve(&ev(KeyCode::Esc, KeyModifiers::NONE)),
            Some(Action::Close)
        );
        let mut rep = ev(KeyCode::Char('2'), KeyModifiers::NONE);
        rep.kind = KeyEventKind::Repeat;
        assert_eq!(km.resolve(&rep), None, "held keys never relaunch");
        let mut rel = ev(KeyCode::Char('q'), KeyModifiers::NONE);
        rel.kind = KeyEventKind::Release;
        assert_eq!(km.resolve(&rel), None);
    }

    #[test]
    fn every_action_has_a_default_key() {
        let km = KeyMap::default();
        for a in Action::ALL {
            assert!(km.first_key(a).is_some(), "{} unbound", a.name());
        }
        assert_eq!(km.first_key(Action::Up).unwrap().to_string(), "k");
        assert_eq!(km.first_key(Action::Quit).unwrap().to_string(), "q");
    }
}
