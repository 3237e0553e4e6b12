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
