//! Keep a tuning's winner: a named preset appended to the config file, with where it came from
//! in comments, usable as `--preset NAME`, with `e` in the dashboard and in reports' settings.

use super::driver::Tuning;
use crate::app::tune::Saved;
use crate::config::Config;
use std::path::Path;

/// A preset name's part for what was tuned: the experiment, or an attached script's file stem
/// in the characters a TOML bare key allows.
fn subject(t: &Tuning) -> String {
    let plan = t.plan();
    match plan.family.attach() {
        Some(a) => {
            let stem = a
                .script
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            let clean: String = stem
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            if clean.is_empty() {
                "attach".into()
            } else {
                clean
            }
        }
        None => plan.experiment().as_str().to_string(),
    }
}

/// Keep the tuning's recommendation as `[presets.tuned-SUBJECT-kK-DATE]` in the config at
/// `path` (the CLI after a tune, `S` in the dashboard); recorded on the board. `machine`: the
/// host and what ddptop found there, for the comment.
pub fn save(t: &mut Tuning, path: &Path, machine: &str) -> Result<Saved, String> {
    if t.cancelled() {
        return Err("the tuning was cancelled: nothing is recommended from part of it".into());
    }
    let (cand, gain_pct) = match t.board().recommended() {
        Some((row, gain)) => (row.cand.clone(), gain),
        None => {
            return Err("nothing is recommended: the default is as good as anything tried".into());
        }
    };
    if let Some(s) = &t.board().saved {
        return Err(format!("already saved as preset {} in {}", s.name, s.path));
    }
    let date = crate::report::Timestamp(crate::util::unix_now()).to_string();
    let date = date.get(..10).unwrap_or(&date).to_string();
    let config = Config::load(Some(path)).map_err(|e| e.to_string())?;
    let k = t.plan().k;
    let name = free_name(
        &config,
        &format!("tuned-{}-k{k}-{}", subject(t), date.replace('-', "")),
    );
    let target = t.target();
    let model = match target.attach() {
        Some(a) => format!("the script {} on {}", a.label(), target.backend.as_str()),
        None => format!(
            "{}, {} on {}",
            target.model.as_str(),
            target.batch_label(),
            target.backend.as_str()
        ),
    };
    let what = format!(
        "{}: {gain_pct:+.1}% samples/s over the default at k={k}",
        cand.name
    );
    let preset = text(
        &name,
        &cand.env,
        &Provenance {
            date: &date,
            machine,
            model: &model,
            what: &what,
        },
    );
    let saved = append(path, &name, &preset).map(|()| Saved {
        name,
        path: path.display().to_string(),
    });
    let board = t.board_mut();
    match &saved {
        Ok(s) => {
            board.saved = Some(s.clone());
            board.save_error = None;
        }
        Err(e) => board.save_error = Some(e.clone()),
    }
    saved
}

/// What the comment above the preset says.
pub struct Provenance<'a> {
    pub date: &'a str,
    pub machine: &'a str,
    pub model: &'a str,
    pub what: &'a str,
}

/// The TOML of one preset, comments first. The table and its values are written by the `toml`
/// serializer (keys quoted where a bare key cannot hold them, values escaped); the comment
/// lines are cut at a line break, so no text of a setting, a script or a host can end the
/// comment and add lines of its own.
pub fn text(name: &str, env: &[(String, String)], p: &Provenance) -> String {
    let one_line = |t: &str| t.replace(['\n', '\r'], " ");
    let mut vars = toml::map::Map::new();
    for (k, v) in env {
        vars.insert(k.clone(), toml::Value::String(v.clone()));
    }
    let mut presets = toml::map::Map::new();
    presets.insert(name.to_string(), toml::Value::Table(vars));
    let mut root = toml::map::Map::new();
    root.insert("presets".into(), toml::Value::Table(presets));
    let table = toml::to_string(&toml::Value::Table(root)).unwrap_or_default();
    format!(
        "\n# `ddptop tune` on {}, {}: {}\n# model {}. Use: ddptop run --preset {} …, or `e` in the dashboard.\n{table}",
        one_line(p.date),
        one_line(p.machine),
        one_line(p.what),
        one_line(p.model),
        one_line(name)
    )
}

/// A preset name not yet in `config`: `base`, else `base-2`, `base-3`, …
pub fn free_name(config: &Config, base: &str) -> String {
    (1..)
        .map(|i| {
            if i == 1 {
                base.to_string()
            } else {
                format!("{base}-{i}")
            }
        })
        .find(|n| config.preset(n).is_none())
        .unwrap_or_else(|| base.to_string())
}

/// Append `preset` to the config file at `path` (created when missing) and check that the
/// result still loads and holds `name`; on any failure the file is left as it was.
pub fn append(path: &Path, name: &str, preset: &str) -> Result<(), String> {
    let before = match std::fs::read_to_string(path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut after = before.clone().unwrap_or_default();
    if !after.is_empty() && !after.ends_with('\n') {
        after.push('\n');
    }
    after.push_str(preset);
    let parsed = Config::parse(&after, path).map_err(|e| e.to_string())?;
    if parsed.preset(name).is_none() {
        return Err(format!("the preset {name} did not read back"));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    // Written beside and renamed over: a crash mid-write leaves the old file whole. The new
    // file gets the old one's mode (a config kept 0600 stays 0600), or 0600 when it is new.
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o600);
    let tmp = path.with_extension("toml.tuning");
    let _ = std::fs::remove_file(&tmp);
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(after.as_bytes())?;
        // The umask may have narrowed the mode given at creation.
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()
    };
    write().map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot replace {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preset_is_appended_reads_back_and_keeps_what_was_there() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("config.toml");
        std::fs::write(&path, "[presets.mine]\nNCCL_ALGO = \"Ring\"").unwrap();
        let env = vec![("DDPTOP_DDP_BUCKET_CAP_MB".to_string(), "5".to_string())];
        let p = Provenance {
            date: "2026-12-01",
            machine: "host (2× NVIDIA H200)",
            model: "resnet18, batch 256/rank",
            what: "bucket_cap_mb=5, +3.1% samples/s over the default at k=2",
        };
        let t = text("tuned-weak-k2", &env, &p);
        append(&path, "tuned-weak-k2", &t).unwrap();
        let cfg = Config::load(Some(&path)).unwrap();
        assert_eq!(
            cfg.preset("tuned-weak-k2")
                .and_then(|p| p.get("DDPTOP_DDP_BUCKET_CAP_MB").cloned().flatten())
                .as_deref(),
            Some("5")
        );
        assert!(cfg.preset("mine").is_some());
        assert_eq!(free_name(&cfg, "tuned-weak-k2"), "tuned-weak-k2-2");
        assert_eq!(free_name(&cfg, "other"), "other");
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(written.contains("# `ddptop tune` on 2026-12-01, host (2× NVIDIA H200)"));
        // A name that would break the file is refused and the file stays as it was.
        assert!(append(&path, "bad name\n[x]", "\n[presets.x\n").is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
    }

    /// Issue 45: values with quotes, backslashes and line breaks are written escaped and read
    /// back exactly; text in the comments cannot add lines; the file keeps its mode.
    #[test]
    fn values_are_escaped_comments_stay_comments_and_the_mode_is_kept() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("config.toml");
        std::fs::write(&path, "# mine\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let nasty = "a\"b\\c\n[presets.evil]\nNCCL_ALGO = \"Tree\"";
        let env = vec![("NCCL_SOCKET_IFNAME".to_string(), nasty.to_string())];
        let p = Provenance {
            date: "2026-12-04",
            machine: "host\n[presets.evil2]",
            model: "m",
            what: "w",
        };
        append(&path, "tuned-x", &text("tuned-x", &env, &p)).unwrap();
        let cfg = Config::load(Some(&path)).unwrap();
        let preset = cfg.preset("tuned-x").unwrap();
        assert_eq!(
            preset
                .get("NCCL_SOCKET_IFNAME")
                .cloned()
                .flatten()
                .as_deref(),
            Some(nasty)
        );
        assert!(cfg.preset("evil").is_none() && cfg.preset("evil2").is_none());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
