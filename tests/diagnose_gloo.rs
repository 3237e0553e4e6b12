//! Failures named with their fix (issue 44), through the real binary on real gloo DDP: each
//! injected into ddptop's own training loop (`--inject`), and each in an unmodified script that
//! really has the bug, attached. The verdict is the stable tagged `diagnoses[].kind` of
//! `--json` and leads the failure's reason; a healthy run carries none.

mod common;
use common::*;
use serde_json::Value;

fn python() -> Option<String> {
    python_importing("torch")
}

fn run(data: &std::path::Path, py: &str, args: &[&str]) -> Value {
    // No verdict here depends on the batch; the default (256) only made each CPU step ~8x
    // longer (the suite-time goal, issue 51).
    let batch: &[&str] = if args.contains(&"--batch") {
        &[]
    } else {
        &["--batch", "32"]
    };
    let out = ddptop(data)
        .env("DDPTOP_PYTHON", py)
        .args(args)
        .args(batch)
        .args(["--backend", "gloo", "--hang-floor", "5", "--json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_no_survivors(&doc);
    doc["runs"][0].clone()
}

fn attach(data: &std::path::Path, py: &str, k: &str, script: &str) -> Value {
    attach_with(data, py, k, &[], script)
}

fn attach_with(data: &std::path::Path, py: &str, k: &str, extra: &[&str], script: &str) -> Value {
    let out = ddptop(data)
        .env("DDPTOP_PYTHON", py)
        .args(["attach", "--k", k, "--backend", "gloo", "--hang-floor", "5"])
        .args(extra)
        .args(["--json", "--", script])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_no_survivors(&doc);
    doc["runs"][0].clone()
}

/// The one verdict of `r`, of `kind`, naming `rank`.
fn verdict<'a>(r: &'a Value, kind: &str) -> &'a Value {
    let all = r["diagnoses"].as_array().unwrap();
    assert_eq!(all.len(), 1, "{r:#}\n{}", output_tails_of(r));
    let d = &all[0];
    assert_eq!(d["kind"], kind, "{d:#}");
    d
}

fn output_tails_of(r: &Value) -> String {
    output_tails(&serde_json::json!({ "runs": [r] }))
}

#[test]
fn uneven_inputs_name_the_rank_that_ran_out_injected_at_k2_and_k4_and_in_a_real_script() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    for (k, rank) in [("2", 1), ("4", 2)] {
        let fault = format!("uneven:{rank}:5");
        let r = run(
            d.path(),
            &py,
            &[
                "run",
                "weak",
                "--k",
                k,
                "--samples",
                "4096",
                "--inject",
                &fault,
            ],
        );
        assert_ne!(r["status"], "completed", "{r:#}");
        let v = verdict(&r, "uneven_inputs");
        assert_eq!((&v["rank"], &v["step"]), (&rank.into(), &5.into()), "{v:#}");
        let text = v["text"].as_str().unwrap();
        assert!(
            text.starts_with(&format!("rank {rank} ran out of data after step 5")),
            "{text}"
        );
        assert!(v["fix"].as_str().unwrap().contains("drop_last=True"));
        let reason = r["reason"].as_str().unwrap();
        assert!(reason.starts_with("uneven inputs: rank"), "{reason}");
    }
    // The bug itself: the last rank's hand-made slice has 3 batches, its peer's 8.
    let r = attach(d.path(), &py, "2", &fixture_script("uneven_data.py"));
    let v = verdict(&r, "uneven_inputs");
    assert_eq!((&v["rank"], &v["step"]), (&1.into(), &3.into()), "{v:#}");
}

#[test]
fn unused_parameters_are_named_injected_and_in_a_real_script() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let r = run(
        d.path(),
        &py,
        &[
            "run",
            "weak",
            "--k",
            "2",
            "--samples",
            "2048",
            "--inject",
            "unused:aux_head",
        ],
    );
    assert_eq!(r["status"], "failed", "{r:#}");
    let v = verdict(&r, "unused_parameters");
    assert_eq!(v["step"], 1, "{v:#}");
    let evidence: Vec<&str> = v["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(
        evidence,
        [
            "no gradient after backward: aux_head.weight",
            "no gradient after backward: aux_head.bias"
        ]
    );
    assert!(
        v["fix"]
            .as_str()
            .unwrap()
            .contains("find_unused_parameters=True")
    );
    // DDP's own error came after, and the reason leads with the names.
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("unused parameters: 2 parameters got no gradient in step 1")
            && reason.contains("Expected to have finished reduction"),
        "{reason}"
    );

    let r = attach(d.path(), &py, "2", &fixture_script("unused_layer.py"));
    assert_eq!(r["status"], "failed", "{r:#}");
    let v = verdict(&r, "unused_parameters");
    assert!(
        v["text"]
            .as_str()
            .unwrap()
            .contains("(aux_head.weight, aux_head.bias;"),
        "{v:#}"
    );
}

/// "… never reached init_process_group after 5.3 s; …" → 5.3.
fn waited_s(text: &str) -> f64 {
    let after = text
        .split("after ")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    after.split(" s").next().unwrap().parse().unwrap()
}

#[test]
fn a_rank_that_never_joins_is_named_in_time_injected_at_k2_and_k4_and_in_a_real_script() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    // At k=4 the others are named as waiting.
    let r = run(
        d.path(),
        &py,
        &[
            "run",
            "weak",
            "--k",
            "4",
            "--samples",
            "2048",
            "--model",
            "tiny",
            "--inject",
            "nojoin:2",
        ],
    );
    let v = verdict(&r, "never_joined");
    assert_eq!(v["rank"], 2, "{v:#}");
    let text = v["text"].as_str().unwrap();
    assert!(
        text.contains("ranks 0,1,3 wait in rendezvous/init"),
        "{text}"
    );
    let r = run(
        d.path(),
        &py,
        &[
            "run",
            "weak",
            "--k",
            "2",
            "--samples",
            "2048",
            "--model",
            "tiny",
            "--inject",
            "nojoin:1",
        ],
    );
    assert_eq!(r["status"], "hung", "{r:#}");
    let v = verdict(&r, "never_joined");
    assert_eq!(v["rank"], 1, "{v:#}");
    let text = v["text"].as_str().unwrap();
    assert!(
        text.starts_with("rank 1 (pid ")
            && text.contains("never reached init_process_group after")
            && text.contains("rank 0 waits in rendezvous/init")
            && text.contains("MASTER_PORT=")
            && text.contains("GLOO_SOCKET_IFNAME unset")
            && text.contains("interfaces seen: lo 127.0.0.1"),
        "{text}"
    );
    // Named within the stall threshold (the 5 s floor: no step yet) + 1 s of the later of rank
    // 0's entry into init and rank 1's hello.
    let waited = waited_s(text);
    assert!((5.0..=6.0).contains(&waited), "{text}");
    let evidence = v["evidence"].as_array().unwrap();
    assert!(
        evidence[1]
            .as_str()
            .unwrap()
            .starts_with("rank 1: hello at +")
            && evidence[1]
                .as_str()
                .unwrap()
                .contains("never entered init_process_group"),
        "{v:#}"
    );
    assert!(v["fix"].as_str().unwrap().contains("MASTER_ADDR"));
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.starts_with("never joined: rank 1"), "{reason}");

    // The bug itself: the other ranks wait for a file rank 0 writes after its init.
    let r = attach_with(
        d.path(),
        &py,
        "2",
        &["--stop-on-hang"],
        &fixture_script("never_joins.py"),
    );
    assert_eq!(r["status"], "hung", "{r:#}");
    let v = verdict(&r, "never_joined");
    assert_eq!(v["rank"], 1, "{v:#}");
    let waited = waited_s(v["text"].as_str().unwrap());
    assert!((5.0..=6.0).contains(&waited), "{v:#}");
}

#[test]
fn mismatched_collectives_name_rank_and_calls_injected_at_k2_and_k4_and_in_a_real_script() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    // The last rank's extra one-value all-reduce meets rank 0's next collective: DDP's buffer
    // broadcast at the forward of step 3. Both wait; their recorders say what each called.
    let r = run(
        d.path(),
        &py,
        &[
            "run",
            "weak",
            "--k",
            "4",
            "--samples",
            "2048",
            "--model",
            "tiny",
            "--batch",
            "32",
            "--inject",
            "mismatch:3",
        ],
    );
    let v = verdict(&r, "collective_mismatch");
    assert_eq!(v["rank"], 3, "{v:#}");
    assert!(
        v["text"]
            .as_str()
            .unwrap()
            .starts_with("rank 3 called gloo:all_reduce (4 B)"),
        "{v:#}"
    );
    let r = run(
        d.path(),
        &py,
        &[
            "run",
            "weak",
            "--k",
            "2",
            "--samples",
            "2048",
            "--model",
            "tiny",
            "--batch",
            "32",
            "--inject",
            "mismatch:3",
        ],
    );
    assert_ne!(r["status"], "completed", "{r:#}");
    let v = verdict(&r, "collective_mismatch");
    assert_eq!((&v["rank"], &v["step"]), (&1.into(), &3.into()), "{v:#}");
    let text = v["text"].as_str().unwrap();
    assert!(
        text.starts_with("rank 1 called gloo:all_reduce (4 B) as collective #")
            && text.contains("while rank 0 called gloo:"),
        "{text}"
    );
    assert!(v["fix"].as_str().unwrap().contains("if rank =="));
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("collective mismatch: rank 1"),
        "{reason}"
    );

    // The bug itself: rank 0 all-reduces its loss for a log line, alone; gloo's size check
    // aborts it.
    let r = attach(
        d.path(),
        &py,
        "2",
        &fixture_script("mismatched_collective.py"),
    );
    assert_eq!(r["status"], "failed", "{r:#}");
    let v = verdict(&r, "collective_mismatch");
    assert_eq!(v["rank"], 0, "{v:#}");
    let text = v["text"].as_str().unwrap();
    assert!(
        text.starts_with("rank 0's collective received ")
            && text.contains("where it expected at most 4"),
        "{text}"
    );
}

/// The one `slower_than_one_gpu` verdict of `r`, its estimated throughputs checked against
/// each other: (samples/s at k, one rank alone).
fn slower(r: &Value, k: u64) -> &Value {
    assert_eq!(r["status"], "completed", "{r:#}");
    let v = verdict(r, "slower_than_one_gpu");
    let text = v["text"].as_str().unwrap();
    let num = |s: &str| s.split_whitespace().next().unwrap().parse::<f64>().unwrap();
    let at_k = num(text);
    let alone = num(text.split("one rank alone ").nth(1).unwrap());
    assert!(
        at_k <= alone && text.contains(&format!("samples/s at k={k}")),
        "{text}"
    );
    assert!(text.contains("exposed all-reduce"), "{text}");
    let evidence = v["evidence"].as_array().unwrap();
    // Every rank's split, then k=1's.
    assert!(
        evidence.len() as u64 > k && evidence[k as usize].as_str().unwrap().starts_with("k=1 ("),
        "{v:#}"
    );
    v
}

#[test]
fn slower_than_one_gpu_is_named_injected_at_k2_and_k4_and_in_a_real_script() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    // The fault needs two ranks and ddptop's own loop: refused before anything starts.
    let out = ddptop(d.path())
        .env("DDPTOP_PYTHON", &py)
        .args([
            "run",
            "weak",
            "--k",
            "1",
            "--backend",
            "gloo",
            "--inject",
            "slowlink:50",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("needs at least two ranks"),
        "{err}"
    );
    // Each bucket's all-reduce ends MS ms late: the exposed communication outweighs the tiny
    // model's compute past the estimate's margin (1.5x), at k=2 and at k=4 (whose 4 ranks on
    // 2 cores compute slower: more delay), 12 steps each.
    for (k, ms) in [(2u64, 500), (4, 1500)] {
        let samples = (k * 48).to_string();
        let fault = format!("slowlink:{ms}");
        let r = run(
            d.path(),
            &py,
            &[
                "run",
                "weak",
                "--k",
                &k.to_string(),
                "--samples",
                &samples,
                "--batch",
                "8",
                "--model",
                "tiny",
                "--inject",
                &fault,
            ],
        );
        let v = slower(&r, k);
        // Named as soon as its evidence is in: 3 warm-up steps, then 6 steps' split.
        let step = v["step"].as_u64().unwrap();
        assert!((9..=12).contains(&step), "{v:#}");
        assert!(v["fix"].as_str().unwrap().contains("no_sync()"), "{v:#}");
        assert!(
            v["evidence"][k as usize]
                .as_str()
                .unwrap()
                .starts_with("k=1 (estimated)"),
            "{v:#}"
        );
    }
    // The bug itself: a small MLP on 8 samples per rank, all-reducing every step; its k=1 run
    // is the measured one rank alone.
    let out = ddptop(d.path())
        .env("DDPTOP_PYTHON", &py)
        .args(["attach", "--k", "1,2", "--backend", "gloo", "--json", "--"])
        .arg(fixture_script("tiny_model_small_batch.py"))
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_no_survivors(&doc);
    assert_eq!(
        doc["runs"][0]["diagnoses"],
        serde_json::json!([]),
        "{doc:#}"
    );
    // On a loaded 2-core CI host the k=1 run itself can be starved (seen once: k=1 605, k=2
    // 1,089 samples/s while a build ran): then k=2 is not slower than one rank and naming it
    // would be a false diagnosis. The verdict is asserted where the runs say it is true
    // (k=2 below 0.8x the k=1 run, ~4.8x below when measured quietly), its absence where k=2
    // is at least as fast; between the two either is right and the verdict, if any, is checked.
    let sps = |i: usize| doc["runs"][i]["samples_per_s"].as_f64().unwrap();
    let (k1, k2) = (sps(0), sps(1));
    let named = doc["runs"][1]["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["kind"] == "slower_than_one_gpu");
    if k2 >= k1 {
        assert!(
            !named,
            "k=2 {k2:.0} >= k=1 {k1:.0} samples/s, yet named: {doc:#}"
        );
        eprintln!("tiny_model_small_batch: k=1 {k1:.0}, k=2 {k2:.0} samples/s: not slower here");
        return;
    }
    if k2 > 0.8 * k1 && !named {
        return;
    }
    // Or the k=2 ranks waited for a CPU core over half the gap to the k=1 run (a loaded 2-core
    // host): the run carries that caveat instead of the verdict (issue 51's fourth hunt).
    let host_bound = doc["runs"][1]["caveats"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["text"].as_str().or(c.as_str()))
        .find(|c| c.starts_with("not judged slower than one GPU"));
    if let Some(c) = host_bound.filter(|_| !named) {
        eprintln!("tiny_model_small_batch: k=1 {k1:.0}, k=2 {k2:.0} samples/s, {c}");
        return;
    }
    let v = slower(&doc["runs"][1], 2);
    assert!(
        v["text"].as_str().unwrap().contains("(measured: k=1 run "),
        "{v:#}"
    );
    assert!(
        v["text"]
            .as_str()
            .unwrap()
            .contains("batch per rank 8 is too small"),
        "{v:#}"
    );
}

#[test]
fn a_recompile_storm_is_named_with_its_counts_in_a_real_script() {
    let _cpu = cpu_shared();
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    // torch.compile(dynamic=False) fed a new sequence length every step: a recompile per step
    // up to dynamo's limit. `eager`: dynamo's guards and recompiles without a compiler's time.
    let script = fixture_script("recompile_storm.py");
    let out = ddptop(d.path())
        .env("DDPTOP_PYTHON", &py)
        .args(["attach", "--k", "2", "--backend", "gloo", "--json", "--"])
        .args([
            script.as_str(),
            "--compile-backend",
            "eager",
            "--steps",
            "12",
        ])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_no_survivors(&doc);
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    let all = r["diagnoses"].as_array().unwrap();
    let v = all
        .iter()
        .find(|d| d["kind"] == "compile_regression")
        .unwrap_or_else(|| panic!("{r:#}"));
    let text = v["text"].as_str().unwrap();
    assert!(text.starts_with("recompile storm: rank "), "{text}");
    let recompiles: u64 = text
        .split("recompiled ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    // The frame reached the limit (its first compile and 7 recompiles at least), and the run's
    // own compile figures agree.
    assert!(recompiles >= 7, "{text}");
    assert!(
        r["compile"]["recompiles"].as_u64().unwrap() >= recompiles,
        "{r:#}"
    );
    // Named when the storm ended (the first step without a compile), not at the run's end.
    assert!(v["step"].as_u64().unwrap() < 12, "{v:#}");
    assert!(v["fix"].as_str().unwrap().contains("dynamic=True"), "{v:#}");
    // ddptop's own measuring hooks' graph breaks are not the script's.
    assert!(!text.contains("ddptop attach"), "{text}");
}

// No false diagnosis: the healthy runs of tests/gloo_runs.rs (weak k=1,2; fsdp and DDP k=2)
// and tests/attach_gloo.rs (the tutorial script at k=1,2) assert `diagnoses == []`: every
// rank there enters init_process_group within the threshold of the first, no collective
// differs, k=2 does more samples/s than k=1 (the k=1 run measured in the store), and nothing
// compiles; tests/attach_shapes.rs's compiled shapes recompile twice at most, no storm.
