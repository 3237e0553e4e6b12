//! Sampled timing (`DDPTOP_TIME_EVERY`) and the loss in `step` messages: after warm-up only every
//! N-th step is drained, timed and reported, the others' samples ride on the next report, and
//! the reported loss falls as the model trains.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

/// Run the worker to completion; rank 0's `step` messages.
fn rank0_steps(args: &[&str], env: &[(&str, &str)]) -> Vec<Value> {
    let srv = FakeDdptop::start(0.2);
    let mut child = srv.spawn(args, env);
    let code = wait_exit(&mut child, Duration::from_secs(300));
    let out = child.wait_with_output().unwrap();
    assert_eq!(code, Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    srv.assert_all_valid();
    srv.of_type("step")
        .into_iter()
        .map(|l| l.msg)
        .filter(|m| m["rank"] == 0)
        .collect()
}

#[test]
fn only_every_nth_step_after_warm_up_is_timed_and_reported() {
    for dispatch in ["single", "threads"] {
        // 64 samples / 2 replicas / batch 4 = 8 steps per epoch; epoch 0 is warm-up.
        let steps = rank0_steps(
            &[
                "--k",
                "2",
                "--batch",
                "4",
                "--samples",
                "64",
                "--epochs",
                "3",
                "--dispatch",
                dispatch,
            ],
            &[("DDPTOP_TIME_EVERY", "3")],
        );
        let got: Vec<(u64, u64, u64)> = steps
            .iter()
            .map(|s| {
                let n = |k: &str| s[k].as_u64().unwrap();
                (n("step"), n("samples"), n("every"))
            })
            .collect();
        let mut want: Vec<(u64, u64, u64)> = (1..=8).map(|i| (i, 4, 1)).collect();
        // Epoch 1 (steps 9-16): 9 (its own 4 samples), 12 and 15 (3 steps each); 16's samples
        // are in the epoch message. Epoch 2 (17-24): 18 (17 and 18), 21, 24. `every` is the
        // steps a message's samples cover.
        want.extend([
            (9, 4, 1),
            (12, 12, 3),
            (15, 12, 3),
            (18, 8, 2),
            (21, 12, 3),
            (24, 12, 3),
        ]);
        assert_eq!(got, want, "{dispatch}");
        assert!(
            steps
                .iter()
                .all(|s| s["loss"].as_f64().is_some_and(f64::is_finite)),
            "{dispatch}: every report carries the loss"
        );
    }
}

#[test]
fn the_reported_loss_falls() {
    // 1024 samples / 2 replicas / batch 16 = 32 steps per epoch, every one reported.
    let steps = rank0_steps(
        &[
            "--k",
            "2",
            "--batch",
            "16",
            "--samples",
            "1024",
            "--epochs",
            "2",
        ],
        &[],
    );
    let losses: Vec<f64> = steps.iter().map(|s| s["loss"].as_f64().unwrap()).collect();
    assert_eq!(losses.len(), 64);
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let (first, last) = (mean(&losses[..8]), mean(&losses[56..]));
    assert!(
        last < 0.8 * first,
        "loss did not fall: first 8 steps {first:.3}, last 8 {last:.3}: {losses:?}"
    );
}
