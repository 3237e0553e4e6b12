//! Socket hardening during a live (simulated) run: 1,000 idle connections, a wrong token, a
//! duplicate rank with the real token, a 10 MB line, 100k garbage lines on a rank's own
//! connection and 100k more on a stranger's. The run still completes, with every intruder counted.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

fn socket_and_token(
    data: &std::path::Path,
    ddptop_pid: u32,
) -> (std::path::PathBuf, String, String) {
    // The socket directory is `ddptop-<pid>.<random>`.
    let prefix = format!("ddptop-{ddptop_pid}.");
    let t0 = Instant::now();
    loop {
        // A rank process of the run carries the token and run id in its environment.
        let conn = rusqlite::Connection::open_with_flags(
            data.join("runs.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        );
        let pids: Vec<u32> = conn
            .ok()
            .and_then(|c| {
                c.query_row("SELECT pids_json FROM runs LIMIT 1", [], |r| {
                    r.get::<_, String>(0)
                })
                .ok()
            })
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default();
        if let Some(pid) = pids.first()
            && let Ok(env) = std::fs::read(format!("/proc/{pid}/environ"))
        {
            let vars: Vec<String> = env
                .split(|b| *b == 0)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect();
            let get = |k: &str| {
                vars.iter()
                    .find_map(|v| v.strip_prefix(&format!("{k}=")).map(str::to_string))
            };
            let sock = std::fs::read_dir(data).ok().and_then(|d| {
                d.flatten()
                    .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .map(|e| e.path().join("s.sock"))
            });
            if let (Some(t), Some(r), Some(sock)) =
                (get("DDPTOP_TOKEN"), get("DDPTOP_RUN_ID"), sock)
            {
                return (sock, t, r);
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "run did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn hello(token: &str, run: &str, rank: u32) -> String {
    format!(
        r#"{{"v":1,"type":"hello","token":"{token}","run_id":"{run}","rank":{rank},"world_size":2,"local_rank":{rank},"pid":1,"host":"t","device":"cpu","backend":"sim","worker":"sim","torch":null,"nccl":null,"cuda":null,"t":0.0}}"#
    )
}

fn answer(s: &UnixStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut line = String::new();
    let _ = BufReader::new(s).read_line(&mut line);
    line
}

#[test]
fn intruders_do_not_disturb_a_run() {
    let d = tempfile::tempdir().unwrap();
    // A run of about 15 s wall time; rank 0 floods its own connection with 100k bad lines.
    let child = spawn_run(
        d.path(),
        &[
            "weak",
            "--k",
            "2",
            "--backend",
            "sim",
            "--sim-speed",
            "3",
            "--samples",
            "30000",
            "--inject",
            "garbage:100000",
        ],
    );
    let (sock, token, run) = socket_and_token(d.path(), child.id());

    let idle: Vec<UnixStream> = (0..1000)
        .map(|_| UnixStream::connect(&sock).expect("connect"))
        .collect();

    let s = UnixStream::connect(&sock).unwrap();
    (&s).write_all(format!("{}\n", hello(&"0".repeat(64), &run, 0)).as_bytes())
        .unwrap();
    assert!(answer(&s).contains("bad_token"));

    let s = UnixStream::connect(&sock).unwrap();
    (&s).write_all(format!("{}\n", hello(&token, &run, 1)).as_bytes())
        .unwrap();
    assert!(answer(&s).contains("duplicate_rank"));

    let s = UnixStream::connect(&sock).unwrap();
    let big = vec![b'x'; 10 << 20];
    let _ = (&s).write_all(&big); // ddptop may hang up before all 10 MB are written
    let _ = (&s).write_all(b"\n");
    assert!(answer(&s).contains("line_too_long"));

    let s = UnixStream::connect(&sock).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..100_000 {
        if (&s).write_all(b"garbage garbage garbage\n").is_err() {
            break; // refused at the first line and closed: the rest cannot even be delivered
        }
    }

    let out = child.wait_with_output().unwrap();
    drop(idle);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &doc["runs"][0];
    assert_eq!(r["status"], "completed", "{r:#}");
    assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(
        r["bad_lines"], 100_000,
        "every bad line on the rank's own connection is counted"
    );
    // The sim's own two intruders plus our wrong token and duplicate rank (the 10 MB line and
    // the garbage stranger are refused before they name a run, so they count only as messages).
    assert_eq!(r["rejected_connections"], 4, "{r:#}");
    assert_no_survivors(&doc);
}

/// Issue 45: a process holding the run's token speaks the NCCL profiler plugin's protocol and
/// sends 100 batches of 2,000 made-up function names each. The run keeps at most the cap of
/// names (docs/protocol.md "Bounds on NCCL evidence"), counts every refused record, and says so
/// in the run's document, in what `show --json` reads back from the store and in its caveats.
/// Counts only, no timing.
#[test]
fn an_nccl_flood_of_distinct_names_is_capped_and_counted() {
    const LINES: u64 = 100;
    const NAMES: u64 = 2_000;
    const MAX_FUNCS: u64 = 64; // ddptop::run::coll_bounds::MAX_FUNCS
    let d = tempfile::tempdir().unwrap();
    let child = spawn_run(
        d.path(),
        &[
            "weak",
            "--k",
            "2",
            "--backend",
            "sim",
            "--sim-speed",
            "1",
            "--samples",
            "1000000",
        ],
    );
    let (sock, token, run) = socket_and_token(d.path(), child.id());
    let s = UnixStream::connect(&sock).unwrap();
    (&s).write_all(
        format!(
            r#"{{"v":1,"type":"nccl_hello","token":"{token}","run_id":"{run}","rank":0,"world_size":2,"pid":1,"host":"t","plugin":"0.1.0","abi":"v5","t":0.0}}"#
        )
        .as_bytes(),
    )
    .unwrap();
    (&s).write_all(b"\n").unwrap();
    let mut rd = BufReader::new(s.try_clone().unwrap());
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut welcome = String::new();
    rd.read_line(&mut welcome).unwrap();
    assert!(welcome.contains("welcome"), "{welcome}");
    for line in 0..LINES {
        let names: Vec<String> = (0..NAMES).map(|i| format!("x{line}_{i}")).collect();
        let done: Vec<String> = names.iter().map(|n| format!(r#""{n}":1"#)).collect();
        let sums: Vec<String> = names
            .iter()
            .map(|n| format!(r#""{n}":{{"count":1,"bytes":4,"kernel_us":1.0}}"#))
            .collect();
        let msg = format!(
            r#"{{"v":1,"type":"nccl","rank":0,"t":1.0,"comm":"00000000000000aa","comm_rank":0,"nranks":2,"nnodes":1,"last_done":{{{}}},"inflight":[],"colls":[],"more":0,"funcs":{{{}}},"dropped":0,"lost":0,"bad":0,"final":false}}"#,
            done.join(","),
            sums.join(",")
        );
        (&s).write_all(msg.as_bytes()).unwrap();
        (&s).write_all(b"\n").unwrap();
    }
    // A line for another rank is answered with an error once every line before it has been
    // read and handed on: the flood is in the engine's queue ahead of the run's end.
    (&s).write_all(br#"{"v":1,"type":"nccl","rank":1,"t":1.0,"comm":"00000000000000aa","comm_rank":1,"nranks":2,"nnodes":1,"last_done":{},"inflight":[],"colls":[],"more":0,"funcs":{},"dropped":0,"lost":0,"bad":0,"final":false}"#).unwrap();
    (&s).write_all(b"\n").unwrap();
    let mut err = String::new();
    rd.read_line(&mut err).unwrap();
    assert!(err.contains("bad_message"), "{err}");

    // The run is long (its end must not race the flood); ^C stops it and stores what it kept.
    let mut child = child;
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    drop(s);
    // Two records (last_done, funcs) for each name; the first MAX_FUNCS names are kept.
    let refused = 2 * (LINES * NAMES - MAX_FUNCS);
    let shown = ddptop(d.path())
        .args(["show", &run, "--json"])
        .output()
        .unwrap();
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let r = &shown["run"];
    assert_eq!(r["status"], "stopped", "{r:#}");
    let c = &r["collectives"];
    assert_eq!(c["over_cap"]["keys"], refused, "{:#}", c["over_cap"]);
    assert_eq!(c["over_cap"]["records"], refused);
    assert_eq!(c["over_cap"]["caps"]["keys"], 256);
    let funcs = c["ranks"]["0"]["funcs"].as_object().unwrap();
    assert_eq!(funcs.len() as u64, MAX_FUNCS, "kept names");
    assert_eq!(
        c["ranks"]["0"]["last_seq"].as_object().unwrap().len() as u64,
        MAX_FUNCS
    );
    let note = c["over_cap"]["note"].as_str().unwrap();
    assert!(
        note.ends_with("collective records dropped: over the 256-key cap"),
        "{note}"
    );
    // The run's caveats (the `show` table's ⚠ lines) say it too.
    let caveats = r["caveats"].to_string();
    assert!(caveats.contains(note), "{caveats}");
}
