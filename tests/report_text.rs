//! The report's text formats: snapshots of Markdown, HTML, JSON and CSV from fixed inputs, and
//! the properties a reader relies on (SIMULATED labels, schema fields, parseable CSV).

mod common;
use common::report as fixture;

use ddptop::report::markdown::Image;
use ddptop::report::{Format, doc::PlotSlot, render};

#[test]
fn markdown_snapshot() {
    let images = [Image {
        slot: PlotSlot::Scaling,
        alt: "scaling".into(),
        path: "report.scaling.svg".into(),
    }];
    insta::assert_snapshot!(render(&fixture::measured(), Format::Markdown, &images));
}

#[test]
fn csv_snapshot() {
    insta::assert_snapshot!(render(&fixture::measured(), Format::Csv, &[]));
}

#[test]
fn json_snapshot() {
    insta::assert_snapshot!(render(&fixture::measured(), Format::Json, &[]));
}

#[test]
fn simulated_markdown_snapshot() {
    insta::assert_snapshot!(render(&fixture::simulated(), Format::Markdown, &[]));
}

#[test]
fn json_carries_schema_version_timestamps_model_epochs_samples() {
    let v: serde_json::Value =
        serde_json::from_str(&render(&fixture::measured(), Format::Json, &[])).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["ddptop_version"], "0.1.0-test");
    assert_eq!(v["generated_at"], "2026-11-30T01:25:00Z");
    let run = &v["runs"][0];
    assert_eq!(run["started_at"], "2026-11-30T01:15:00Z");
    assert_eq!(run["model"], "tiny");
    assert_eq!(run["epochs"], 2);
    assert_eq!(run["samples"], 60000);
    let p2 = &v["curves"][0]["points"][1];
    assert_eq!(p2["baseline_run_id"], "r1");
    assert_eq!(p2["ideal_samples_per_s"], 2000.0);
    // (predicted 1900 − measured 1800) / 1800: positive, the model over-predicts.
    assert!((p2["error_pct"].as_f64().unwrap() - 100.0 / 18.0).abs() < 1e-9);
    let probe = &v["probes"][0];
    assert_eq!(probe["control_run_id"], "p1");
    assert!((probe["diff_net_of_control_ms"].as_f64().unwrap() - (5.2 - 1.1)).abs() < 1e-9);
    assert_eq!(v["bench"]["ratios"][0]["bytes"], 1024u64 << 16);
    assert!(v["simulated"] == false);
}

#[test]
fn csv_has_one_row_per_run_with_a_constant_column_count() {
    let text = render(&fixture::measured(), Format::Csv, &[]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + fixture::measured().runs.len());
    // The failed run's reason is not in the CSV, but a field with a comma would be quoted; no
    // line here has quotes, so splitting on commas counts the fields.
    let n = lines[0].split(',').count();
    assert_eq!(n, ddptop::report::csv::HEADER.len());
    for l in &lines {
        assert_eq!(l.split(',').count(), n, "{l}");
    }
    assert!(lines[2].starts_with(
        "r2,weak,2,gloo,false,,tiny,256,512,2,60000,device,defaults,completed,2026-11-30T01:15:40Z,"
    ));
}

#[test]
fn csv_quotes_fields_that_need_it() {
    assert_eq!(ddptop::report::csv::field("a,b"), "\"a,b\"");
    assert_eq!(
        ddptop::report::csv::field("say \"hi\""),
        "\"say \"\"hi\"\"\""
    );
    assert_eq!(ddptop::report::csv::field("plain"), "plain");
}

#[test]
fn every_format_says_simulated_when_it_is() {
    let r = fixture::simulated();
    for f in [Format::Markdown, Format::Html, Format::Json, Format::Csv] {
        let text = render(&r, f, &[]);
        match f {
            Format::Json => assert!(text.contains("\"simulated\": true"), "{f:?}"),
            Format::Csv => assert!(text.lines().skip(1).all(|l| l.contains(",sim,true,"))),
            _ => assert!(text.contains("SIMULATED"), "{f:?}"),
        }
    }
    let measured = fixture::measured();
    for f in [Format::Markdown, Format::Html] {
        assert!(!render(&measured, f, &[]).contains("SIMULATED"), "{f:?}");
    }
}

#[test]
fn markdown_escapes_pipes_in_cells_and_shows_the_failed_runs_log() {
    let mut r = fixture::measured();
    r.runs[0].settings = "X=a|b".into();
    let md = render(&r, Format::Markdown, &[]);
    assert!(md.contains("| X=a\\|b |"));
    assert!(md.contains("f2: failed: rank 1 exited with status 1 | RuntimeError: boom"));
    assert!(md.contains("output log /data/runs/f2/output.log"));
    // Completed runs do not list their log.
    assert!(!md.contains("/data/runs/r1/output.log"));
}

#[test]
fn html_is_escaped_and_embeds_the_plots() {
    let mut r = fixture::measured();
    r.title = "<script>alert(1)</script>".into();
    let html = render(&r, Format::Html, &[]);
    assert!(!html.contains("<script>"));
    assert!(html.contains("&lt;script&gt;"));
    // Scaling, timeline and bench plots, inline, without XML declarations.
    assert_eq!(html.matches("<svg").count(), 3);
    assert!(!html.contains("<?xml"));
    assert!(html.contains("<td class=\"r\">1800</td>"));
}

#[test]
fn a_named_straggler_is_in_the_markdown_notes_and_the_json() {
    let mut r = fixture::measured();
    r.runs[1].stragglers.push(ddptop::run::view::Straggler {
        rank: 1,
        score: 0.66,
        phase: "data wait".into(),
        evidence: "rank 1 at 0.66 of the fastest: data wait 23.6 ms vs 0.3 ms median".into(),
        since: 4.25,
        step: 41,
        active: false,
    });
    let id = r.runs[1].id.clone();
    let md = render(&r, Format::Markdown, &[]);
    let line = md
        .lines()
        .find(|l| l.contains("straggler at 4.2 s (step 41): rank 1 at 0.66 of the fastest"))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(line.contains(&id), "{line}");
    let doc: serde_json::Value = serde_json::from_str(&render(&r, Format::Json, &[])).unwrap();
    let run = doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["run_id"] == id.as_str())
        .unwrap();
    assert_eq!(run["stragglers"][0]["rank"], 1);
    assert_eq!(run["stragglers"][0]["phase"], "data wait");
    assert_eq!(run["stragglers"][0]["since"], 4.25);
    // A run without one says so with an empty list, not a missing field.
    assert_eq!(doc["runs"][0]["stragglers"], serde_json::json!([]));
}

#[test]
fn a_runs_per_phase_table_and_its_fault_are_in_all_three_outputs() {
    // Figures shaped like a k=2 gloo run with rank 1 slowed in its data wait (made up here).
    let mut r = fixture::measured();
    let phase = |name: &str, r0: f64, r1: f64| ddptop::run::view::PhaseScore {
        phase: name.into(),
        ranks: [(0, r0), (1, r1)].into_iter().collect(),
        median_ms: (r0 + r1) / 2.0,
        worst_rank: if r1 >= r0 { 1 } else { 0 },
        worst_ms: r0.max(r1),
        worst_vs_median: r0.max(r1) / ((r0 + r1) / 2.0),
    };
    r.runs[1].phase_scores = vec![
        phase("data wait", 1.0, 19.0),
        phase("compute", 30.0, 30.2),
        phase("exposed comm", 18.2, 0.5),
        phase("optimizer", 5.0, 5.0),
    ];
    r.runs[1].fault = Some("slow:1:1.5@40".into());
    let id = r.runs[1].id.clone();
    let md = render(&r, Format::Markdown, &[]);
    assert!(md.contains(&format!("### Per phase: {id}")), "{md}");
    assert!(
        md.contains("| data wait | 10.00 | 19.00 | 1 | 1.90× |"),
        "{md}"
    );
    assert!(
        md.contains("| exposed comm | 9.35 | 18.20 | 0 | 1.95× |"),
        "{md}"
    );
    assert!(md.contains("host sync not measured"), "{md}");
    let note = md
        .lines()
        .find(|l| l.contains(&id) && l.starts_with("- "))
        .unwrap();
    assert!(
        note.contains("fault: slow:1:1.5@40 (injected: off the clean curves)"),
        "{note}"
    );
    // Only the run with figures has a table.
    assert_eq!(md.matches("### Per phase:").count(), 1, "{md}");
    let html = render(&r, Format::Html, &[]);
    assert!(html.contains(&format!("Per phase: {id}")), "{html}");
    assert!(
        html.contains("1.90×") && html.contains("fault: slow:1:1.5@40"),
        "{html}"
    );
    let doc: serde_json::Value = serde_json::from_str(&render(&r, Format::Json, &[])).unwrap();
    let run = &doc["runs"][1];
    assert_eq!(run["run_id"], id.as_str());
    assert_eq!(run["fault"], "slow:1:1.5@40");
    assert_eq!(run["phase_scores"][0]["phase"], "data wait");
    assert_eq!(run["phase_scores"][0]["worst_rank"], 1);
    assert_eq!(run["phase_scores"][0]["ranks"]["1"], 19.0);
    assert_eq!(doc["runs"][0]["phase_scores"], serde_json::json!([]));
    assert_eq!(doc["runs"][0]["fault"], serde_json::Value::Null);
}
