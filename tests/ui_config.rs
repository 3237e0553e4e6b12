//! Config: the commented default is written on first run and reloads to the defaults; a broken
//! file gives one error line naming the file and line; key remaps resolve terminal key events;
//! user themes load; NO_COLOR selects the monochrome theme.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyEventState, KeyModifiers};
use ddptop::app::Action;
use ddptop::config::{Config, DEFAULT_CONFIG};
use ddptop::ui::ThemeSet;
use std::path::Path;

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent {
        code,
        modifiers: KeyModifiers::NONE,
        kind: KeyEventKind::Press,
        state: KeyEventState::NONE,
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn default_is_written_on_first_run_and_reloads() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("sub/dir/config.toml");
    let c = Config::load(Some(&p)).unwrap();
    assert!(c.created, "first run writes the file");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), DEFAULT_CONFIG);
    let again = Config::load(Some(&p)).unwrap();
    assert!(!again.created);
    let expect = Config {
        path: Some(p.clone()),
        ..Config::default()
    };
    assert_eq!(again, expect);
    assert_eq!(again.refresh.gpu_sample_ms, 1000);
    assert_eq!(again.refresh.max_fps, 20);
    assert_eq!(again.watchdog.hang_floor_s, 10.0);
    assert_eq!(again.watchdog.hang_factor, 10.0);
    assert_eq!(again.watchdog.startup_s, 180.0);
    // The default file is commented: every section says what it is for.
    assert!(
        DEFAULT_CONFIG
            .lines()
            .filter(|l| l.trim_start().starts_with('#'))
            .count()
            > 30
    );
}

#[test]
fn broken_files_name_the_file_line_and_problem() {
    let d = tempfile::tempdir().unwrap();
    let cases: [(&str, usize, &str); 7] = [
        ("theme = dark\n", 1, ""),
        (
            "theme = \"dark\"\n\n[refresh]\ngpu_sample_ms = \"fast\"\n",
            4,
            "invalid type",
        ),
        (
            "[refresh]\nmax_fps = 20\ngpu_sample_ms = 10\n",
            3,
            "minimum of 250",
        ),
        (
            "[keys]\n\"1\" = \"launch-k1\"\n\"x\" = \"lanch-k2\"\n",
            3,
            "unknown action \"lanch-k2\"",
        ),
        ("[keys]\n\"Hyper-x\" = \"quit\"\n", 2, "unknown key"),
        ("thme = \"dark\"\n", 1, "thme"),
        ("[watchdog]\nhang_floor_s = -1.0\n", 2, "positive"),
    ];
    for (i, (text, line, needle)) in cases.iter().enumerate() {
        let p = write(d.path(), &format!("c{i}.toml"), text);
        let e = Config::load(Some(&p)).expect_err(text);
        let msg = e.to_string();
        assert_eq!(e.line, Some(*line), "{text:?} → {msg}");
        assert!(msg.contains(&p.display().to_string()), "{msg}");
        assert!(msg.contains(&format!(":{line}:")), "{msg}");
        assert!(msg.contains(needle), "{text:?}: {msg}");
        assert_eq!(msg.lines().count(), 1, "one line: {msg}");
        assert!(msg.starts_with("config error: "), "{msg}");
    }
}

#[test]
fn unknown_theme_is_an_error_with_its_line() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "config.toml", "# mine\ntheme = \"solarized\"\n");
    let e = Config::load(Some(&p)).unwrap_err();
    assert_eq!(e.line, Some(2));
    assert!(e.to_string().contains("solarized"));
}

#[test]
fn key_remap_resolves_events() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "config.toml",
        "[keys]\n\"l\" = \"launch-k1\"\n\"q\" = \"none\"\n\"F10\" = \"quit\"\n\"Ctrl-p\" = \"probe\"\n",
    );
    let c = Config::load(Some(&p)).unwrap();
    let k = &c.keys;
    assert_eq!(
        k.resolve(&key(KeyCode::Char('l'))),
        Some(Action::Launch { k: 1 })
    );
    assert_eq!(
        k.resolve(&key(KeyCode::Char('1'))),
        Some(Action::Launch { k: 1 }),
        "defaults stay"
    );
    assert_eq!(
        k.resolve(&key(KeyCode::Char('q'))),
        None,
        "\"none\" unbinds"
    );
    assert_eq!(k.resolve(&key(KeyCode::F(10))), Some(Action::Quit));
    let mut ctrl_p = key(KeyCode::Char('p'));
    ctrl_p.modifiers = KeyModifiers::CONTROL;
    assert_eq!(k.resolve(&ctrl_p), Some(Action::Probe));
    assert_eq!(k.first_key(Action::Quit).unwrap().to_string(), "F10");
    // --script accepts keys as written in the config.
    assert_eq!(k.resolve_str("l"), Some(Action::Launch { k: 1 }));
}

#[test]
fn presets_and_launcher_paths() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "config.toml",
        "python = \"/opt/py/bin/python3\"\n[presets.book]\nNCCL_SHM_USE_CUDA_MEMCPY = \"1\"\nNCCL_P2P_DISABLE = false\n",
    );
    let c = Config::load(Some(&p)).unwrap();
    assert_eq!(c.python.as_deref(), Some(Path::new("/opt/py/bin/python3")));
    let b = c.preset("book").unwrap();
    assert_eq!(b["NCCL_SHM_USE_CUDA_MEMCPY"].as_deref(), Some("1"));
    assert_eq!(b["NCCL_P2P_DISABLE"], None);
}

#[test]
fn user_themes_load_from_the_config_dir() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "themes/mine.toml",
        "extends = \"light\"\nbar = { fg = \"#ff8800\" }\n",
    );
    let p = write(d.path(), "config.toml", "theme = \"mine\"\n");
    let c = Config::load(Some(&p)).unwrap();
    assert_eq!(c.theme, "mine");
    let mut set = ThemeSet::load(
        &c.theme,
        &ddptop::config::user_themes(c.themes_dir().as_deref()).unwrap(),
        false,
    )
    .unwrap();
    assert_eq!(set.current().name, "mine");
    assert!(set.names().contains(&"high-contrast"));
    let first = set.current().name.clone();
    let mut seen = vec![first.clone()];
    loop {
        let n = set.cycle().name.clone();
        if n == first {
            break;
        }
        seen.push(n);
    }
    assert_eq!(seen.len(), 5, "4 built in + 1 user: {seen:?}");
    // A broken user theme is a config error naming its file and line.
    write(d.path(), "themes/bad.toml", "\nbar = { fg = \"purpel\" }\n");
    let e = ThemeSet::load(
        "dark",
        &ddptop::config::user_themes(c.themes_dir().as_deref()).unwrap(),
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("bad.toml:2:"), "{e}");
}

#[test]
fn no_color_means_monochrome_only() {
    let mut set = ThemeSet::load("dark", &[], true).unwrap();
    assert_eq!(set.current().name, "monochrome");
    assert_eq!(set.cycle().name, "monochrome", "t cannot bring colour back");
    let t = set.current();
    for style in [t.failed, t.completed, t.sim, t.bar, t.comm, t.exposed] {
        assert_eq!((style.fg, style.bg), (None, None));
    }
}

#[test]
fn mouse_is_on_by_default_and_the_config_turns_it_off() {
    assert!(Config::default().mouse);
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "config.toml", "mouse = false\n");
    assert!(!Config::load(Some(&p)).unwrap().mouse);
    let p = write(d.path(), "bad.toml", "mouse = \"off\"\n");
    let e = Config::load(Some(&p)).unwrap_err().to_string();
    assert!(e.contains("bad.toml:1"), "{e}");
    // The default file names the key, and every default binding's action is in its comment.
    assert!(DEFAULT_CONFIG.contains("mouse = true"));
    for a in Action::ALL {
        assert!(
            DEFAULT_CONFIG.contains(&format!("\"{}\"", a.name())),
            "{} missing from the default config's key list",
            a.name()
        );
    }
}
