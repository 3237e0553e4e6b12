//! DDPTOP_INJECT as in the Python workers (faults.py), on the last replica, and the dead-man
//! switch: the worker exits promptly when ddptop's end of the socket closes.

mod common;
use common::*;
use std::time::{Duration, Instant};

const ARGS: [&str; 8] = [
    "--k",
    "2",
    "--batch",
    "4",
    "--samples",
    "4000",
    "--epochs",
    "3",
];

fn steps_of(srv: &FakeDdptop, rank: u64) -> Vec<u64> {
    srv.of_type("step")
        .iter()
        .filter(|l| l.msg["rank"] == rank)
        .map(|l| l.msg["step"].as_u64().unwrap())
        .collect()
}

#[test]
fn raise_is_reported_by_the_last_rank_and_fails_the_run() {
    let srv = FakeDdptop::start(0.2);
    let mut child = srv.spawn(&ARGS, &[("DDPTOP_INJECT", "raise:3")]);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(120)), Some(1));
    srv.assert_all_valid();
    let errors: Vec<_> = srv
        .of_type("log")
        .into_iter()
        .filter(|l| l.msg["level"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].msg["rank"], 1);
    assert_eq!(
        errors[0].msg["msg"],
        "RuntimeError: injected exception at step 3"
    );
    let byes = srv.of_type("bye");
    assert_eq!(byes.len(), 2);
    assert!(byes.iter().all(|b| b.msg["reason"] == "error"));
    assert_eq!(steps_of(&srv, 1), vec![1, 2, 3]);
    let err = String::from_utf8_lossy(&child.wait_with_output().unwrap().stderr).to_string();
    assert!(
        err.contains("(rank 1): error: RuntimeError: injected exception at step 3"),
        "{err}"
    );
}

#[test]
fn crash_exits_with_code_3_and_no_bye() {
    let srv = FakeDdptop::start(0.2);
    let mut child = srv.spawn(&ARGS, &[("DDPTOP_INJECT", "crash:2")]);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(120)), Some(3));
    srv.assert_all_valid();
    assert!(srv.of_type("bye").is_empty());
    assert_eq!(steps_of(&srv, 0), vec![1, 2]);
}

#[test]
fn hang_keeps_heartbeats_without_progress_until_ddptop_goes_away() {
    let srv = FakeDdptop::start(0.1);
    let mut child = srv.spawn(&ARGS, &[("DDPTOP_INJECT", "hang:2")]);
    let is_fault = |l: &common::Line| l.msg["msg"] == "injected fault hang:2";
    srv.wait_for("the injected fault", Duration::from_secs(120), |l| {
        l.iter().any(|l| l.msg["type"] == "log" && is_fault(l))
    });
    // The worker's own clock, not arrival: rank 0's connection is not rank 1's, and on a busy
    // machine a heartbeat rank 0 sent before the fault could be read after its log line.
    let t_fault = srv.of_type("log").into_iter().find(is_fault).unwrap().msg["t"]
        .as_f64()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let late: Vec<_> = srv
        .of_type("heartbeat")
        .into_iter()
        .filter(|h| h.msg["t"].as_f64().unwrap() > t_fault)
        .collect();
    for rank in 0..2u64 {
        let hb: Vec<_> = late.iter().filter(|h| h.msg["rank"] == rank).collect();
        assert!(
            hb.len() >= 3,
            "rank {rank}: {} heartbeats while hung",
            hb.len()
        );
        assert!(
            hb.iter().all(|h| h.msg["step"] == 2),
            "no progress while hung"
        );
    }
    assert_eq!(steps_of(&srv, 1), vec![1, 2]);
    // Dead-man switch: ddptop's end closes, the worker exits on its own, promptly.
    srv.close_all();
    let t0 = Instant::now();
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), Some(70));
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    srv.assert_all_valid();
}

#[test]
fn silent_stops_the_last_ranks_heartbeats_only() {
    let srv = FakeDdptop::start(0.1);
    let mut child = srv.spawn(&ARGS, &[("DDPTOP_INJECT", "silent:1")]);
    srv.wait_for("the injected fault", Duration::from_secs(120), |l| {
        l.iter()
            .any(|l| l.msg["type"] == "log" && l.msg["msg"] == "injected fault silent:1")
    });
    let t_fault = Instant::now();
    std::thread::sleep(Duration::from_millis(800));
    let late = srv.of_type("heartbeat");
    let count = |rank: u64| {
        late.iter()
            .filter(|h| h.at > t_fault && h.msg["rank"] == rank)
            .count()
    };
    assert!(count(0) >= 3, "rank 0 keeps heartbeating");
    assert_eq!(count(1), 0, "rank 1 is silent");
    srv.close_all();
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), Some(70));
}

#[test]
fn a_bad_fault_spec_is_a_one_line_error_reported_to_ddptop() {
    let srv = FakeDdptop::start(0.2);
    let mut child = srv.spawn(&ARGS, &[("DDPTOP_INJECT", "explode:3")]);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(60)), Some(1));
    srv.assert_all_valid();
    let errors = srv.of_type("log");
    assert!(errors.iter().any(|l| {
        l.msg["level"] == "error"
            && l.msg["msg"]
                .as_str()
                .unwrap()
                .contains("expected one of crash, raise, hang, silent")
    }));
    let err = String::from_utf8_lossy(&child.wait_with_output().unwrap().stderr).to_string();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
