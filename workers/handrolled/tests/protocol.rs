//! The worker speaks protocol v1 as ddptop parses it: every line it sends passes ddptop's own
//! parser (`ddptop::protocol::parse_worker`), one connection per replica, and the message
//! sequence hello → plan → step/comm/buckets → epoch → result → bye on each.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn a_run_sends_valid_lines_on_one_connection_per_replica() {
    for extra in [
        ["--dispatch", "single", "--reduce", "star"],
        ["--dispatch", "threads", "--reduce", "ring"],
    ] {
        let srv = FakeDdptop::start(0.2);
        let mut child = srv.spawn(
            &[
                &[
                    "--k",
                    "2",
                    "--batch",
                    "4",
                    "--samples",
                    "64",
                    "--epochs",
                    "2",
                ][..],
                &extra[..],
            ]
            .concat(),
            &[],
        );
        let code = wait_exit(&mut child, Duration::from_secs(300));
        let out = child.wait_with_output().unwrap();
        assert_eq!(code, Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        srv.assert_all_valid();

        let hellos = srv.of_type("hello");
        assert_eq!(hellos.len(), 2);
        let pid = hellos[0].msg["pid"].clone();
        for (r, h) in hellos.iter().enumerate() {
            let m = &h.msg;
            assert_eq!(m["rank"], r, "hello order follows rank");
            assert_eq!(m["world_size"], 2);
            assert_eq!(m["devices"], 2);
            assert_eq!(m["worker"], "handrolled");
            assert_eq!(m["device"], "cpu");
            assert_eq!(m["backend"], "copy");
            assert_eq!(m["token"], TOKEN);
            assert_eq!(m["pid"], pid, "one process drives every replica");
        }
        // 64 samples / 2 replicas / batch 4 = 8 steps per epoch, 2 epochs.
        for (rank, hello) in hellos.iter().enumerate() {
            let mine: Vec<_> = srv
                .lines
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.conn == hello.conn)
                .map(|l| l.msg.clone())
                .collect();
            assert!(
                mine.iter().all(|m| m["rank"] == rank),
                "rank {rank}: foreign rank"
            );
            let types: Vec<&str> = mine.iter().map(|m| m["type"].as_str().unwrap()).collect();
            assert_eq!(types.first(), Some(&"hello"));
            assert_eq!(types.last(), Some(&"bye"));
            assert_eq!(mine.last().unwrap()["reason"], "done");
            let plan = mine.iter().find(|m| m["type"] == "plan").unwrap();
            assert_eq!(plan["total_steps"], 16);
            assert_eq!(plan["steps_per_epoch"], 8);
            let steps: Vec<_> = mine.iter().filter(|m| m["type"] == "step").collect();
            assert_eq!(steps.len(), 16);
            for (i, s) in steps.iter().enumerate() {
                assert_eq!(s["step"], i as u64 + 1);
                assert_eq!(s["samples"], 4);
                assert_eq!(s["timing"], "host");
                assert_eq!(s["warmup"], i < 8);
                let total = s["step_ms"].as_f64().unwrap();
                let parts = ["fwd_ms", "bwd_ms", "opt_ms"].map(|k| s[k].as_f64().unwrap());
                assert!(parts.iter().all(|p| *p > 0.0), "{s}");
                assert!(parts.iter().sum::<f64>() <= total * 1.001 + 0.01, "{s}");
            }
            let buckets: Vec<_> = mine.iter().filter(|m| m["type"] == "buckets").collect();
            assert_eq!(buckets.len(), 16);
            let b = &buckets[0]["buckets"][0];
            let result = mine.iter().find(|m| m["type"] == "result").unwrap();
            assert_eq!(
                b["bytes"], result["grad_bytes"],
                "one bucket: the whole gradient"
            );
            assert!(
                b["start_ms"].as_f64() >= b["ready_ms"].as_f64(),
                "no overlap"
            );
            let comms: Vec<_> = mine.iter().filter(|m| m["type"] == "comm").collect();
            assert_eq!(comms.len(), 16);
            assert!(
                comms[0]["ops"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|o| o["op"] == "all_reduce")
            );
            let epochs: Vec<_> = mine.iter().filter(|m| m["type"] == "epoch").collect();
            assert_eq!(epochs.len(), 2);
            assert_eq!(epochs[0]["warmup"], true);
            assert_eq!(epochs[1]["warmup"], false);
            assert_eq!(result["experiment"], "handrolled");
            assert_eq!(result["timed_epochs"], 1);
            assert_eq!(result["samples_per_s"], epochs[1]["samples_per_s"]);
            assert!(types.contains(&"heartbeat"), "rank {rank}: no heartbeat");
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("samples/s"), "{stdout}");
    }
}

#[test]
fn stop_command_ends_with_result_and_bye_stopped() {
    let srv = FakeDdptop::start(0.2);
    let mut child = srv.spawn(
        &[
            "--k",
            "2",
            "--batch",
            "4",
            "--samples",
            "4000",
            "--epochs",
            "5",
        ],
        &[],
    );
    srv.wait_for("a few steps", Duration::from_secs(120), |l| {
        l.iter().filter(|l| l.msg["type"] == "step").count() >= 4
    });
    srv.send_all(&serde_json::json!({"v": 1, "type": "command", "cmd": "stop"}));
    assert_eq!(wait_exit(&mut child, Duration::from_secs(60)), Some(0));
    srv.assert_all_valid();
    let byes = srv.of_type("bye");
    assert_eq!(byes.len(), 2);
    assert!(byes.iter().all(|b| b.msg["reason"] == "stopped"));
    assert_eq!(srv.of_type("result").len(), 2);
    assert!(srv.of_type("step").len() < 2 * 5 * 500, "it stopped early");
}

#[test]
fn a_refused_hello_is_a_one_line_error() {
    // Nothing listens on the socket path: the worker says so in one line and exits 1.
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ddptop-handrolled"))
        .args(["--device", "cpu", "--model", "tiny"])
        .env("DDPTOP_SOCKET", dir.path().join("nobody.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("cannot connect to DDPTOP_SOCKET"), "{err}");
}

#[test]
fn bad_arguments_are_one_line_errors() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ddptop-handrolled"))
        .args(["--device", "cpu", "--k", "0"])
        .env_remove("DDPTOP_SOCKET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--k must be at least 1"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
