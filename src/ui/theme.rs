//! Colour themes: TOML files of named styles. Built-in themes (`themes/*.toml`) are embedded in
//! the binary; user themes are `themes/NAME.toml` in the config dir and may `extends` a built-in
//! one, overriding only some styles. `NO_COLOR` selects the monochrome theme.
//!
//! A style is `{ fg = "light-blue", bg = "#202020", add_modifier = "bold | reversed" }`; colours
//! use ratatui's `Color` names ("dark gray", "light-green", "#5fafff", or an index "208").

use crate::app::RunStatus;
use crate::config::{ConfigError, UserTheme};
use ratatui::style::{Color, Modifier, Style};
use serde::{Deserialize, Deserializer};
use std::path::Path;
use std::str::FromStr;

const BUILTIN: [(&str, &str); 4] = [
    ("dark", include_str!("../../themes/dark.toml")),
    ("light", include_str!("../../themes/light.toml")),
    (
        "high-contrast",
        include_str!("../../themes/high-contrast.toml"),
    ),
    ("monochrome", include_str!("../../themes/monochrome.toml")),
];

/// One style as written in a theme file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StyleSpec {
    #[serde(default, deserialize_with = "de_color")]
    fg: Option<Color>,
    #[serde(default, deserialize_with = "de_color")]
    bg: Option<Color>,
    #[serde(default, deserialize_with = "de_modifier")]
    add_modifier: Option<Modifier>,
    #[serde(default, deserialize_with = "de_modifier")]
    sub_modifier: Option<Modifier>,
}

impl StyleSpec {
    fn style(&self) -> Style {
        let mut s = Style::new();
        if let Some(c) = self.fg {
            s = s.fg(c);
        }
        if let Some(c) = self.bg {
            s = s.bg(c);
        }
        if let Some(m) = self.add_modifier {
            s = s.add_modifier(m);
        }
        if let Some(m) = self.sub_modifier {
            s = s.remove_modifier(m);
        }
        s
    }
}

fn de_color<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Color>, D::Error> {
    let s = String::deserialize(d)?;
    Color::from_str(&s).map(Some).map_err(|_| {
        serde::de::Error::custom(format!(
            "unknown colour {s:?} (use a name such as \"light-blue\" or \"dark gray\", \"#5fafff\", or an index \"0\"..\"255\")"
        ))
    })
}

const MODIFIERS: [(&str, Modifier); 9] = [
    ("bold", Modifier::BOLD),
    ("dim", Modifier::DIM),
    ("italic", Modifier::ITALIC),
    ("underlined", Modifier::UNDERLINED),
    ("slow_blink", Modifier::SLOW_BLINK),
    ("rapid_blink", Modifier::RAPID_BLINK),
    ("reversed", Modifier::REVERSED),
    ("hidden", Modifier::HIDDEN),
    ("crossed_out", Modifier::CROSSED_OUT),
];

fn de_modifier<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Modifier>, D::Error> {
    let s = String::deserialize(d)?;
    let mut m = Modifier::empty();
    for part in s.split(['|', ',', ' ']).filter(|p| !p.is_empty()) {
        let p = part.to_ascii_lowercase().replace('-', "_");
        let p = if p == "underline" {
            "underlined".into()
        } else {
            p
        };
        match MODIFIERS.iter().find(|(n, _)| *n == p) {
            Some((_, f)) => m |= *f,
            None => {
                return Err(serde::de::Error::custom(format!(
                    "unknown modifier {part:?} (use {})",
                    MODIFIERS.map(|(n, _)| n).join(", ")
                )));
            }
        }
    }
    Ok(Some(m))
}

macro_rules! theme_styles {
    ($($(#[doc = $doc:literal])* $field:ident),* $(,)?) => {
        /// A resolved theme: one `Style` per role on screen.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Theme {
            pub name: String,
            $($(#[doc = $doc])* pub $field: Style,)*
        }

        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct ThemeFile {
            name: Option<String>,
            /// User themes: the built-in theme to start from (default "dark").
            extends: Option<String>,
            #[allow(dead_code)]
            description: Option<String>,
            $(#[serde(default)] $field: Option<StyleSpec>,)*
        }

        impl Theme {
            fn blank(name: &str) -> Theme {
                Theme { name: name.to_string(), $($field: Style::new(),)* }
            }

            fn overlay(&mut self, f: &ThemeFile) {
                $(if let Some(s) = &f.$field { self.$field = s.style(); })*
            }

            /// Every style role's name, for docs and tests.
            pub const ROLES: &'static [&'static str] = &[$(stringify!($field),)*];

            #[cfg(test)]
            fn missing_roles(f: &ThemeFile) -> Vec<&'static str> {
                let mut v = Vec::new();
                $(if f.$field.is_none() { v.push(stringify!($field)); })*
                v
            }
        }
    };
}

theme_styles! {
    /// Whole screen (usually only bg, or nothing for the terminal's own colours).
    base,
    border,
    /// Border of the pane that has focus (Tab).
    border_focus,
    title,
    title_focus,
    text,
    dim,
    /// Field names ("util", "mem").
    label,
    /// Numbers.
    value,
    /// The header's first line.
    header,
    /// Toggle badges in the header and runs table.
    badge,
    /// The SIMULATED badge and SIM backend cells.
    sim,
    /// The selected row in the runs table.
    selected,
    tab,
    tab_active,
    starting,
    running,
    completed,
    failed,
    hung,
    stopped,
    /// GPU utilisation sparklines.
    spark,
    /// Throughput bars (scaling pane).
    bar,
    /// The ideal-scaling marker on throughput bars.
    bar_ideal,
    /// Efficiency bars.
    eff_bar,
    /// Live throughput sparkline.
    throughput,
    /// Timeline: backward compute span.
    compute,
    /// Timeline: all-reduce spans (alternating with comm_alt).
    comm,
    comm_alt,
    /// Timeline: all-reduce time not hidden under compute.
    exposed,
    optimizer,
    axis,
    frozen,
    /// Probe labels.
    measured,
    control,
    model,
    good,
    warn,
    bad,
    hint_key,
    hint_text,
    log,
    msg_info,
    msg_warn,
    msg_error,
    help_key,
}

impl Theme {
    /// A built-in theme by name.
    pub fn builtin(name: &str) -> Option<Theme> {
        let (_, text) = BUILTIN.iter().find(|(n, _)| *n == name)?;
        let file: ThemeFile = toml::from_str(text).expect("built-in themes parse");
        let mut t = Theme::blank(name);
        t.overlay(&file);
        Some(t)
    }

    /// The default theme (dark).
    pub fn dark() -> Theme {
        Theme::builtin("dark").expect("dark theme is built in")
    }

    pub fn monochrome() -> Theme {
        Theme::builtin("monochrome").expect("monochrome theme is built in")
    }

    /// Parse a user theme file; `extends` (default "dark") supplies the styles it leaves out.
    pub fn from_toml(text: &str, path: &Path) -> Result<Theme, ConfigError> {
        let file: ThemeFile =
            toml::from_str(text).map_err(|e| ConfigError::at(path, text, e.span(), e.message()))?;
        let base_name = file.extends.as_deref().unwrap_or("dark");
        let mut t = Theme::builtin(base_name).ok_or_else(|| {
            ConfigError::at(
                path,
                text,
                text.find("extends").map(|i| i..i + 1),
                &format!(
                    "extends = {base_name:?}: not a built-in theme ({})",
                    BUILTIN.map(|(n, _)| n).join(", ")
                ),
            )
        })?;
        t.overlay(&file);
        t.name = file.name.clone().unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "user".into())
        });
        Ok(t)
    }

    /// Style for a run status. Colour is never the only cue: the status word and glyph are
    /// always drawn with it.
    pub fn status(&self, s: RunStatus) -> Style {
        match s {
            RunStatus::Starting => self.starting,
            RunStatus::Running => self.running,
            RunStatus::Completed => self.completed,
            RunStatus::Failed => self.failed,
            RunStatus::Hung | RunStatus::Stalled => self.hung,
            RunStatus::Stopped => self.stopped,
        }
    }
}

/// Glyph shown before a status word (so status never relies on colour alone).
pub fn status_glyph(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Starting => "·",
        RunStatus::Running => "▶",
        RunStatus::Completed => "✓",
        RunStatus::Failed => "✗",
        RunStatus::Hung => "⊘",
        RunStatus::Stalled => "!",
        RunStatus::Stopped => "■",
    }
}

/// The themes `t` cycles through, and which one is showing.
#[derive(Debug, Clone)]
pub struct ThemeSet {
    themes: Vec<Theme>,
    current: usize,
}

impl ThemeSet {
    /// Built-in themes plus the user's theme files (`config::user_themes` reads them: ui does
    /// no I/O), starting at `initial`. With `no_color`, only the monochrome theme (NO_COLOR is
    /// the user's standing request).
    pub fn load(
        initial: &str,
        user_themes: &[UserTheme],
        no_color: bool,
    ) -> Result<ThemeSet, ConfigError> {
        if no_color {
            return Ok(ThemeSet {
                themes: vec![Theme::monochrome()],
                current: 0,
            });
        }
        let mut themes: Vec<Theme> = BUILTIN
            .iter()
            .map(|(n, _)| Theme::builtin(n).expect("built in"))
            .collect();
        for user in user_themes {
            let mut t = Theme::from_toml(&user.text, &user.path)?;
            // The file name is the theme's name in config.toml.
            t.name = user
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or(t.name);
            match themes.iter_mut().find(|x| x.name == t.name) {
                Some(slot) => *slot = t,
                None => themes.push(t),
            }
        }
        let current = themes.iter().position(|t| t.name == initial).unwrap_or(0);
        Ok(ThemeSet { themes, current })
    }

    /// Only the given theme (tests, scripted mode).
    pub fn single(theme: Theme) -> ThemeSet {
        ThemeSet {
            themes: vec![theme],
            current: 0,
        }
    }

    pub fn current(&self) -> &Theme {
        &self.themes[self.current]
    }

    /// Switch to the next theme and return it.
    pub fn cycle(&mut self) -> &Theme {
        self.current = (self.current + 1) % self.themes.len();
        self.current()
    }

    pub fn names(&self) -> Vec<&str> {
        self.themes.iter().map(|t| t.name.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_themes_define_every_role() {
        for (name, text) in BUILTIN {
            let file: ThemeFile = toml::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(file.name.as_deref(), Some(name));
            assert!(
                Theme::missing_roles(&file).is_empty(),
                "{name} lacks {:?}",
                Theme::missing_roles(&file)
            );
        }
    }

    #[test]
    fn monochrome_has_no_colours() {
        let t = Theme::monochrome();
        let dbg = format!("{t:?}");
        assert!(!dbg.contains("fg(") && !dbg.contains("bg("), "{dbg}");
        // Styles still distinguish statuses through modifiers.
        assert_ne!(t.failed, t.completed);
    }

    #[test]
    fn high_contrast_statuses_differ_beyond_red_green() {
        let t = Theme::builtin("high-contrast").unwrap();
        // Failed and completed must differ in something other than hue (modifiers).
        assert_ne!(t.failed.add_modifier, t.completed.add_modifier);
        assert_ne!(t.hung.add_modifier, t.completed.add_modifier);
    }

    #[test]
    fn user_theme_extends_and_reports_bad_colour_with_line() {
        let ok = "extends = \"light\"\nbar = { fg = \"#ff8800\" }\n";
        let t = Theme::from_toml(ok, Path::new("/x/themes/mine.toml")).unwrap();
        assert_eq!(t.name, "mine");
        assert_eq!(t.bar.fg, Some(Color::Rgb(0xff, 0x88, 0)));
        assert_eq!(t.border, Theme::builtin("light").unwrap().border);

        let bad = "extends = \"dark\"\n\nbar = { fg = \"purpel\" }\n";
        let e = Theme::from_toml(bad, Path::new("/x/themes/mine.toml")).unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.to_string().contains("purpel"), "{e}");
        let bad_mod = "bar = { add_modifier = \"blink-twice\" }\n";
        let e = Theme::from_toml(bad_mod, Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains("blink-twice"), "{e}");
    }

    #[test]
    fn theme_set_cycles_and_honours_no_color() {
        let mut s = ThemeSet::load("light", &[], false).unwrap();
        assert_eq!(s.current().name, "light");
        assert_eq!(s.cycle().name, "high-contrast");
        assert_eq!(s.cycle().name, "monochrome");
        assert_eq!(s.cycle().name, "dark");
        let mut m = ThemeSet::load("light", &[], true).unwrap();
        assert_eq!(m.current().name, "monochrome");
        assert_eq!(m.cycle().name, "monochrome");
    }
}
