//! `ddptop report`, `show`, `runs`, `diff`, `completions`, `man` through the binary, on runs of
//! the simulated worker stored by `ddptop run`; and strict input: every numeric flag checked at
//! parse time, unknown names and broken configs refused, exit 2 with one line.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

fn ok(data: &Path, args: &[&str]) -> String {
    let out = ddptop(data).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json_of(data: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&ok(data, args)).unwrap()
}

/// A weak k=1,2 sweep, a probe with its control and two bench settings, all SIMULATED.
fn history(data: &Path) -> (Value, Value, Value, Value) {
    let (_, weak) = sim_json(data, &["weak", "--k", "1,2", "--samples", "8000"]);
    let (_, probe) = sim_json(data, &["probe", "--k", "2"]);
    let (_, b0) = sim_json(data, &["allreduce", "--k", "2", "--profile", "book-pcie"]);
    let (_, b1) = sim_json(
        data,
        &[
            "allreduce",
            "--k",
            "2",
            "--profile",
            "book-pcie",
            "--env",
            "NCCL_SHM_USE_CUDA_MEMCPY=1",
        ],
    );
    (weak, probe, b0, b1)
}

#[test]
fn run_json_carries_the_envelope_model_and_timestamps() {
    let d = tempfile::tempdir().unwrap();
    let (_, doc) = sim_json(d.path(), &["weak", "--k", "1", "--samples", "2000"]);
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["kind"], "sweep");
    assert_eq!(doc["ddptop_version"], env!("CARGO_PKG_VERSION"));
    assert!(doc["generated_at"].as_str().unwrap().ends_with('Z'));
    let r = &doc["runs"][0];
    assert_eq!(r["model"], "resnet18");
    assert_eq!(r["epochs"], 2);
    assert_eq!(r["samples"], 2000);
    assert!(r["started_at"].as_str().unwrap().ends_with('Z'));
    assert!(r["ended_at"].as_str().unwrap() >= r["started_at"].as_str().unwrap());
    // One builder makes the whole record (issue 49): `simulated` and `duration_s` come last,
    // and the output.log is in the engine's run folder, as when they were patched in.
    let keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys[keys.len() - 2..], ["simulated", "duration_s"]);
    let id = r["run_id"].as_str().unwrap();
    let log = r["output_log"].as_str().unwrap();
    assert!(log.ends_with(&format!("/runs/{id}/output.log")), "{log}");
}

fn id(doc: &Value, i: usize) -> String {
    doc["runs"][i]["run_id"].as_str().unwrap().to_string()
}

#[test]
fn report_show_runs_and_diff_read_the_store() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path();
    let (weak, probe, b0, b1) = history(data);
    let (k1, k2) = (id(&weak, 0), id(&weak, 1));

    // The scaling curve of the k=2 run, named by the end of its id as the dashboard shows it.
    let md = ok(data, &["report", "--curve", &k2[k2.len() - 4..]]);
    assert!(
        md.starts_with("# ddptop scaling curve: weak · batch 256/rank"),
        "{md}"
    );
    assert!(md.contains("(SIMULATED)"));
    assert!(md.contains(&format!("| 2 | {k2} |")), "{md}");
    assert!(
        md.contains(&format!("| {k1} |")),
        "baseline id in the table: {md}"
    );
    assert!(md.contains("## Bucket timeline"));

    // JSON: the envelope, timestamps, model/epochs/samples, figures equal to `ddptop run`'s.
    let doc = json_of(data, &["report", &k1, &k2, "--format", "json"]);
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["kind"], "report");
    assert!(doc["generated_at"].as_str().unwrap().ends_with('Z'));
    let run = &doc["runs"][1];
    let report_run = run.clone();
    assert_eq!(run["model"], "resnet18");
    assert_eq!(run["epochs"], 2);
    assert_eq!(run["samples"], 8000);
    assert!(run["started_at"].as_str().unwrap().contains('T'));
    let p = &doc["curves"][0]["points"][1];
    assert_eq!(p["speedup"], weak["runs"][1]["speedup"]);
    assert_eq!(p["baseline_run_id"], k1.as_str());
    assert!(p["predicted_samples_per_s"].as_f64().unwrap() > 0.0);

    // The probe's report brings in its k=1 control.
    let doc = json_of(data, &["report", &id(&probe, 0), "--format", "json"]);
    assert_eq!(doc["probes"].as_array().unwrap().len(), 2);
    assert_eq!(
        doc["probes"][0]["control_run_id"],
        probe["runs"][1]["run_id"]
    );

    // A bench report of both settings: a ratio, and plots written beside the Markdown file.
    let out = data.join("out/bench.md");
    let o = ddptop(data)
        .args(["report", &id(&b0, 0), &id(&b1, 0), "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bench.bench.svg"));
    // `out/` did not exist: created, and said in one line; the next report there says nothing.
    let created = format!(
        "ddptop: created the directory {} for the report (it did not exist)",
        data.join("out").display()
    );
    assert_eq!(err.matches(&created).count(), 1, "{err}");
    let again = ddptop(data)
        .args(["report", &id(&b0, 0), "-o"])
        .arg(data.join("out/again.md"))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&again.stderr).contains("created"));
    let md = std::fs::read_to_string(&out).unwrap();
    assert!(
        md.contains("![SIMULATED — All-reduce bus bandwidth vs message size](bench.bench.svg)")
    );
    assert!(
        md.contains("SHM_USE_CUDA_MEMCPY=1 vs defaults at 256M"),
        "{md}"
    );
    let svg = std::fs::read_to_string(data.join("out/bench.bench.svg")).unwrap();
    assert!(svg.contains("SHM_USE_CUDA_MEMCPY=1"));
    let html = ok(data, &["report", "--last", "--format", "html"]);
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<svg"));

    // show: table and JSON.
    let text = ok(data, &["show", &k2]);
    assert!(text.contains(&format!("vs k=1 run {k1}")), "{text}");
    assert!(text.contains("output log") && text.contains("output.log"));
    // Every step line the sim's ranks sent, in the run's archive.
    let steps = text
        .lines()
        .find_map(|l| l.strip_prefix("steps"))
        .and_then(|l| l.trim().split(' ').next())
        .unwrap_or_else(|| panic!("no steps row: {text}"));
    let archived = std::fs::read_to_string(steps).unwrap();
    assert!(
        archived.lines().any(|l| l.contains(r#""type":"step""#)),
        "{steps}"
    );
    let doc = json_of(data, &["show", &k2, "--json"]);
    assert_eq!(doc["kind"], "run");
    assert_eq!(doc["run"]["run_id"], k2.as_str());
    assert_eq!(doc["run"]["baseline_run_id"], k1.as_str());
    assert!(doc["figures"]["predicted_samples_per_s"].as_f64().unwrap() > 0.0);
    // One run document: `ddptop run --json`, `show --json`, `runs --json` and the report print
    // the same object for the same run; the outputs about one run add its per-rank sections.
    let listed = json_of(data, &["runs", "--json"])["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == k2.as_str())
        .unwrap()
        .clone();
    let (shown, swept) = (&doc["run"], &weak["runs"][1]);
    let core = report_run.as_object().unwrap();
    assert!(core.contains_key("torch_settings") && core.contains_key("speedup"));
    for (key, value) in core {
        assert_eq!(&listed[key], value, "runs --json: {key}");
        assert_eq!(&shown[key], value, "show --json: {key}");
        // The prediction reads the history of its time: the probe's k=1 control (its reducer
        // figure) was stored after the sweep printed.
        if key != "prediction" {
            assert_eq!(&swept[key], value, "run --json: {key}");
        }
    }
    for detail in ["worker_pids", "hang_report", "timeline"] {
        assert!(swept.get(detail).is_some(), "run --json has {detail}");
        assert!(shown.get(detail).is_some(), "show --json has {detail}");
        assert!(
            core.get(detail).is_none(),
            "the report's run has no {detail}"
        );
    }
    assert!(
        doc["run"]["command"]
            .as_str()
            .unwrap()
            .contains("worker sim")
    );

    // runs: figures, filters, CSV.
    let text = ok(data, &["runs"]);
    assert!(text.lines().next().unwrap().contains("Δ probe"));
    assert_eq!(
        text.lines().filter(|l| l.starts_with("r20")).count(),
        6,
        "{text}"
    );
    let doc = json_of(data, &["runs", "--experiment", "weak", "--json"]);
    assert_eq!(doc["runs"].as_array().unwrap().len(), 2);
    // The report's figures of each run come after the run document's keys (issue 49).
    let keys: Vec<&str> = doc["runs"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys[keys.len() - 4..],
        ["simulated", "duration_s", "probe_diff_ms", "busbw_peak_gbs"]
    );
    assert!(doc["runs"][0]["efficiency"].as_f64().unwrap() > 0.5);
    let csv = ok(data, &["runs", "--experiment", "allreduce", "--csv"]);
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.lines().skip(1).all(|l| l.contains(",sim,true,")));
    assert_eq!(
        ok(data, &["runs", "--backend", "gloo"]).trim(),
        "no stored runs match these filters"
    );
    assert_eq!(
        json_of(data, &["runs", "--since", "1d", "--json"])["runs"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    assert!(
        json_of(data, &["runs", "--since", "2999-01-01", "--json"])["runs"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // diff: the settings differ, the figures carry B/A.
    let text = ok(data, &["diff", &id(&b0, 0), &id(&b1, 0)]);
    assert!(text.contains("*settings"), "{text}");
    assert!(text.contains("B/A"), "{text}");
    let doc = json_of(data, &["diff", &id(&b0, 0), &id(&b1, 0), "--json"]);
    let busbw = doc["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["figure"] == "peak busbw GB/s")
        .unwrap();
    assert!(
        busbw["b_over_a"].as_f64().unwrap() > 2.0,
        "SHM memcpy is faster on book-pcie"
    );
}

#[test]
fn unknown_runs_and_an_empty_store_exit_2_with_one_line() {
    let d = tempfile::tempdir().unwrap();
    for args in [vec!["report"], vec!["show", "abcd"], vec!["diff", "a", "b"]] {
        let out = ddptop(d.path()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("no stored runs"), "{err}");
    }
    sim_json(d.path(), &["weak", "--k", "1", "--samples", "2000"]);
    let out = ddptop(d.path()).args(["show", "zzzz"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no stored run matches `zzzz`"));
    let out = ddptop(d.path())
        .args(["runs", "--since", "yesterday"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("90m, 6h, 7d"));
}

#[test]
fn completions_and_man_page() {
    let d = tempfile::tempdir().unwrap();
    for (shell, needle) in [
        ("bash", "_ddptop()"),
        ("zsh", "#compdef ddptop"),
        ("fish", "complete -c ddptop -n"),
    ] {
        let text = ok(d.path(), &["completions", shell]);
        assert!(text.contains(needle), "{shell}");
        assert!(
            text.contains("report") && text.contains("sim-speed"),
            "{shell}"
        );
    }
    let man = ok(d.path(), &["man"]);
    assert!(
        man.starts_with(".ie") || man.contains(".TH ddptop"),
        "{man}"
    );
    assert!(man.contains("report"));
    let dir = d.path().join("man");
    let out = ddptop(d.path())
        .args(["man", "--out-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(dir.join("ddptop.1").exists() && dir.join("ddptop-report.1").exists());
}

#[test]
fn numeric_flags_are_checked_at_parse_time() {
    let d = tempfile::tempdir().unwrap();
    for (args, range) in [
        (vec!["--batch", "0"], "a positive whole number"),
        (vec!["--batch", "many"], "a positive whole number"),
        // A negative number is the flag's value, refused as such (not clap's "use '-- -1'").
        (vec!["--batch", "-1"], "a positive whole number"),
        (vec!["--epochs", "0"], "a positive whole number"),
        (vec!["--samples", "-5"], "a positive whole number"),
        (vec!["--sim-speed", "-1"], "> 0"),
        (vec!["--sim-speed", "0"], "> 0"),
        (vec!["--sim-speed", "nan"], "> 0"),
        (vec!["--sim-noise", "2"], "from 0 to 1"),
        (vec!["--hang-floor", "0"], "> 0"),
        (vec!["--startup-timeout", "0"], "> 0"),
        (vec!["--profile", "nope"], "known: h200-nvlink, book-pcie"),
    ] {
        let out = ddptop(d.path())
            .args(["run", "weak", "--backend", "sim"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or_default();
        assert!(first.starts_with("error: invalid value"), "{args:?}: {err}");
        assert!(
            first.contains(args[0]) && first.contains(range),
            "{args:?}: {first}"
        );
        assert!(
            !err.contains("18446744073709551615") && !err.contains("'-- "),
            "{err}"
        );
    }
    // The dashboard's flags too.
    let out = ddptop(d.path())
        .args(["--profile", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = ddptop(d.path())
        .args(["--sim-speed", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn unknown_presets_and_broken_configs_are_refused_with_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let out = ddptop(d.path())
        .args(["run", "weak", "--backend", "sim", "--preset", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown preset `nosuch`; known: ") && err.contains("shm-memcpy"),
        "{err}"
    );
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("ddptop: unknown"))
            .count(),
        1
    );
    std::fs::write(
        d.path().join("config.toml"),
        "theme = \"dark\"\n[watchdog]\nhang_floor_s = \"ten\"\n",
    )
    .unwrap();
    let out = ddptop(d.path())
        .args(["run", "weak", "--backend", "sim", "--k", "1"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a broken config is refused, as by the dashboard"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("config.toml:3"), "file:line in {err}");
    assert!(out.stdout.is_empty(), "nothing ran");
    // The dashboard refuses the same file the same way.
    let out = ddptop(d.path())
        .args(["--backend", "sim", "--script", "q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("config.toml:3"));
}

#[test]
fn a_failed_run_prints_the_path_of_its_output_log() {
    let d = tempfile::tempdir().unwrap();
    let out = ddptop(d.path())
        .args([
            "run",
            "weak",
            "--k",
            "2",
            "--backend",
            "sim",
            "--sim-speed",
            "20",
            "--samples",
            "20000",
            "--inject",
            "crash:3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("output: "))
        .unwrap_or_else(|| panic!("no output line in {text}"));
    let path = line.trim_start().trim_start_matches("output: ");
    assert!(
        path.ends_with("output.log") && Path::new(path).exists(),
        "{path}"
    );
    let (_, doc) = sim_json(
        d.path(),
        &[
            "weak",
            "--k",
            "2",
            "--samples",
            "20000",
            "--inject",
            "crash:3",
        ],
    );
    assert!(
        doc["runs"][0]["output_log"]
            .as_str()
            .unwrap()
            .ends_with("output.log")
    );
}

#[test]
fn the_dashboards_report_key_writes_the_selected_curve_and_says_where() {
    let d = tempfile::tempdir().unwrap();
    let dump = d.path().join("screen.txt");
    let out = ddptop(d.path())
        .args(["--backend", "sim", "--sim-speed", "20", "--script"])
        .arg("1,wait-run,2,wait-run,w,q")
        .arg("--screen-dump")
        .arg(&dump)
        .env("DDPTOP_SCREEN", "160x50")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let reports: Vec<_> = std::fs::read_dir(d.path().join("reports"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(reports.len(), 1, "{reports:?}");
    let html = std::fs::read_to_string(&reports[0]).unwrap();
    assert!(html.contains("ddptop scaling curve: weak"));
    // Both k of the curve, with the scaling plot inline.
    assert!(html.contains("<td class=\"r\">1</td>") && html.contains("<td class=\"r\">2</td>"));
    assert!(html.contains("SIMULATED — Scaling"));
    let screen = std::fs::read_to_string(&dump).unwrap();
    assert!(
        screen.contains("report of its curve written to"),
        "{screen}"
    );
}
