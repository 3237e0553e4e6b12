//! The plugin loaded by a fake "NCCL": a loader that looks the plugin's table up by symbol, in
//! the order a real NCCL does (newest interface it knows first), then drives the table it found
//! with a fixed list of events (the fixture below). Three NCCLs:
//!
//! - one that knows `ncclProfiler_v5` and `ncclProfiler_v4` (NCCL 2.28): takes v5;
//! - one that knows only `ncclProfiler_v4` (NCCL 2.27): takes v4, whose descriptor has a one-byte
//!   type;
//! - one that knows only v3 and older (NCCL 2.26 and before): finds no table, so NCCL never
//!   loads this plugin and nothing reports (attach's fallback covers that: test_attach_plugin.py).
//!
//! Which interface NCCL used is found by symbol, never from a version table: the plugin reports
//! the table it was called through (`abi` in `nccl_hello`), and ddptop believes that. The same
//! file tests the plugin's recovery after a stall and the state the attach bootstrap reads
//! (`ddptop_nccl_profiler_state`). Each scenario runs in a child process (the plugin's state is
//! per process); the parent runs ddptop's real socket server.

use ddptop::protocol::{NcclBatch, WorkerMsg};
use ddptop::supervisor::SupEvent;
use ddptop::supervisor::socket::SocketServer;
use nccl_profiler_ddptop::abi::*;
use nccl_profiler_ddptop::status;
use std::ffi::{CStr, c_int, c_void};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const RUN: &str = "r-fake-nccl";
const TOKEN: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/// The fixture: what one rank's NCCL reports, in order (function, element count of float32,
/// channels). P2P kinds go through `ncclProfileP2p`, the rest through `ncclProfileColl`.
const FIXTURE: [(&CStr, usize, u8); 7] = [
    (c"AllReduce", 1024, 2),
    (c"AllReduce", 2048, 2),
    (c"AllGather", 256, 1),
    (c"Broadcast", 64, 1),
    (c"AlltoAll", 512, 1),
    (c"Send", 128, 1),
    (c"Recv", 128, 1),
];

fn plugin_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap();
    p.join("libnccl_profiler_ddptop.so")
}

/// The table a fake NCCL found.
#[derive(Clone, Copy)]
enum Table {
    V5(&'static ProfilerV5),
    V4(&'static ProfilerV4),
}

/// NCCL's loader: `dlsym` each name it knows, newest first; the first one found is used.
fn nccl_load(lib: &'static libloading::Library, knows: &[&str]) -> Option<(String, Table)> {
    for name in knows {
        // SAFETY: the plugin's tables are statics of the right types, alive while `lib` is.
        let t = unsafe {
            match *name {
                "ncclProfiler_v5" => lib
                    .get::<*const ProfilerV5>(b"ncclProfiler_v5")
                    .ok()
                    .map(|s| Table::V5(&**s)),
                "ncclProfiler_v4" => lib
                    .get::<*const ProfilerV4>(b"ncclProfiler_v4")
                    .ok()
                    .map(|s| Table::V4(&**s)),
                // Older tables: the plugin must not export them (their layouts differ).
                other => lib
                    .get::<*const c_void>(other.as_bytes())
                    .ok()
                    .map(|_| panic!("{other} is exported")),
            }
        };
        if let Some(t) = t {
            return Some((name.to_string(), t));
        }
    }
    None
}

#[derive(Clone, Copy)]
struct P(*mut c_void);
unsafe impl Send for P {}

impl Table {
    fn init(self, id: u64, rank: c_int) -> (P, c_int) {
        let (mut ctx, mut mask) = (std::ptr::null_mut(), 0);
        // SAFETY: the init contracts of each version (argument order differs).
        let r = unsafe {
            match self {
                Table::V5(t) => (t.init)(&mut ctx, id, &mut mask, c"f".as_ptr(), 1, 2, rank, None),
                Table::V4(t) => (t.init)(&mut ctx, &mut mask, c"f".as_ptr(), id, 1, 2, rank, None),
            }
        };
        assert_eq!(r, NCCL_SUCCESS);
        (P(ctx), mask)
    }

    /// startEvent with a v5 descriptor, or its v4 form (a one-byte type, the same union).
    fn start(self, ctx: P, d: &mut EventDescrV5) -> P {
        let mut h = std::ptr::null_mut();
        // SAFETY: startEvent's contract; the v4 descriptor copies the v5 one's fields.
        let r = unsafe {
            match self {
                Table::V5(t) => (t.start_event)(ctx.0, &mut h, d),
                Table::V4(t) => {
                    let mut d4 = EventDescrV4 {
                        kind: d.kind as u8,
                        parent_obj: d.parent_obj,
                        rank: d.rank,
                        u: d.u,
                    };
                    (t.start_event)(ctx.0, &mut h, &mut d4)
                }
            }
        };
        assert_eq!(r, NCCL_SUCCESS);
        P(h)
    }

    fn funcs(self) -> (StopEvent, RecordEventState, Finalize) {
        match self {
            Table::V5(t) => (t.stop_event, t.record_event_state, t.finalize),
            Table::V4(t) => (t.stop_event, t.record_event_state, t.finalize),
        }
    }
}

fn descr(kind: u64, parent: *mut c_void) -> EventDescrV5 {
    // SAFETY: plain data; zeros and NULLs are valid.
    let mut d: EventDescrV5 = unsafe { std::mem::zeroed() };
    d.kind = kind;
    d.parent_obj = parent;
    d
}

/// One fixture event as NCCL drives it: the call, each channel's start, KernelChStop and stop,
/// then the call's stop.
fn drive_one(t: Table, ctx: P, i: u64, (func, count, nch): (&CStr, usize, u8), seq: u64) {
    let p2p = func == c"Send" || func == c"Recv";
    let mut d = descr(
        if p2p { event::P2P } else { event::COLL },
        std::ptr::null_mut(),
    );
    if p2p {
        d.u.p2p = P2pDescr {
            func: func.as_ptr(),
            buff: std::ptr::null_mut(),
            datatype: c"ncclFloat32".as_ptr(),
            count,
            peer: 0,
            n_channels: nch,
            parent_group: std::ptr::null_mut(),
        };
    } else {
        d.u.coll = CollDescr {
            seq_number: seq,
            func: func.as_ptr(),
            send_buff: std::ptr::null(),
            recv_buff: std::ptr::null_mut(),
            count,
            root: 0,
            datatype: c"ncclFloat32".as_ptr(),
            n_channels: nch,
            n_warps: 8,
            algo: c"RING".as_ptr(),
            proto: c"SIMPLE".as_ptr(),
            parent_group: std::ptr::null_mut(),
        };
    }
    let h = t.start(ctx, &mut d);
    assert!(!h.0.is_null(), "fixture event {i} got no handle");
    let (stop, record, _) = t.funcs();
    for ch in 0..nch {
        let mut c = descr(event::KERNEL_CH, h.0);
        c.u.kernel_ch = KernelChDescr {
            channel_id: ch,
            p_timer: 1_000_000 + i * 1000,
        };
        let hc = t.start(P(std::ptr::null_mut()), &mut c);
        let mut a = EventStateArgs {
            kernel_ch_p_timer: 1_000_000 + i * 1000 + 400,
        };
        // SAFETY: NCCL's recordEventState and stopEvent contracts.
        unsafe {
            assert_eq!(record(hc.0, state::KERNEL_CH_STOP, &mut a), NCCL_SUCCESS);
            assert_eq!(stop(hc.0), NCCL_SUCCESS);
        }
    }
    // SAFETY: as above.
    assert_eq!(unsafe { stop(h.0) }, NCCL_SUCCESS);
}

/// The fixture's sequence numbers: NCCL's per function and communicator.
fn fixture_seqs() -> Vec<u64> {
    let mut seen = std::collections::HashMap::new();
    FIXTURE
        .iter()
        .map(|(f, ..)| {
            let n = seen.entry(*f).or_insert(0u64);
            *n += 1;
            *n - 1
        })
        .collect()
}

fn state_fn(lib: &'static libloading::Library) -> extern "C" fn() -> c_int {
    // SAFETY: the plugin's exported `int ddptop_nccl_profiler_state(void)`.
    unsafe {
        *lib.get::<extern "C" fn() -> c_int>(b"ddptop_nccl_profiler_state")
            .unwrap()
    }
}

fn child_fixture(lib: &'static libloading::Library, knows: &[&str]) {
    let state = state_fn(lib);
    assert_eq!(state(), status::NOT_STARTED, "nothing before NCCL's init");
    let (abi, t) = nccl_load(lib, knows).expect("this NCCL finds a table");
    let (ctx, mask) = t.init(0x5eed, 1);
    assert_eq!(mask as u64, event::COLL | event::P2P | event::KERNEL_CH);
    for (i, (ev, seq)) in FIXTURE.iter().zip(fixture_seqs()).enumerate() {
        drive_one(t, ctx, i as u64, *ev, seq);
    }
    let t0 = Instant::now();
    while state() != status::REPORTING {
        assert!(t0.elapsed() < Duration::from_secs(10), "state {}", state());
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: finalize's contract.
    assert_eq!(unsafe { (t.funcs().2)(ctx.0) }, NCCL_SUCCESS);
    println!("CHILD took {abi} state={}", state());
}

/// Collectives for `PLUGIN_DRIVE_MS` while ddptop stalls; prints each state change seen.
fn child_stall(lib: &'static libloading::Library) {
    let state = state_fn(lib);
    let (_, t) = nccl_load(lib, &["ncclProfiler_v5"]).unwrap();
    let (ctx, _) = t.init(0x57a1, 1);
    let ms: u64 = std::env::var("PLUGIN_DRIVE_MS").unwrap().parse().unwrap();
    let t0 = Instant::now();
    let (mut seq, mut seen) = (0u64, vec![state()]);
    while t0.elapsed() < Duration::from_millis(ms) {
        for _ in 0..50 {
            drive_one(t, ctx, seq, (c"AllReduce", 4096, 1), seq);
            seq += 1;
        }
        if *seen.last().unwrap() != state() {
            seen.push(state());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let t1 = Instant::now();
    while state() != status::REPORTING && t1.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    seen.push(state());
    // SAFETY: finalize's contract.
    assert_eq!(unsafe { (t.funcs().2)(ctx.0) }, NCCL_SUCCESS);
    println!("CHILD drove {seq} states={seen:?}");
}

#[test]
#[ignore = "run by the other tests in a child process"]
fn child() {
    let lib: &'static libloading::Library = Box::leak(Box::new(
        // SAFETY: our own plugin, never unloaded.
        unsafe { libloading::Library::new(plugin_path()).unwrap() },
    ));
    match std::env::var("FAKE_NCCL").as_deref() {
        Ok("2.28") => child_fixture(lib, &["ncclProfiler_v5", "ncclProfiler_v4"]),
        Ok("2.27") => child_fixture(lib, &["ncclProfiler_v4"]),
        Ok("stall") => child_stall(lib),
        other => panic!("unknown fake NCCL {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(400));
}

// ---------------------------------------------------------------- ddptop's side

struct Server {
    _dir: tempfile::TempDir,
    server: SocketServer,
    rx: mpsc::Receiver<SupEvent>,
}

fn server(capacity: usize) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = mpsc::channel(capacity);
    let server = SocketServer::start(dir.path(), tx).unwrap();
    server.registry.open_run(RUN, TOKEN, 2);
    Server {
        _dir: dir,
        server,
        rx,
    }
}

fn child_cmd(s: &Server, nccl: &str, extra: &[(&str, &str)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["child", "--exact", "--ignored", "--nocapture"])
        .env("FAKE_NCCL", nccl)
        .env("RANK", "1")
        .env("WORLD_SIZE", "2")
        .env("DDPTOP_SOCKET", s.server.path.display().to_string())
        .env("DDPTOP_TOKEN", TOKEN)
        .env("DDPTOP_RUN_ID", RUN)
        .env("DDPTOP_NCCL_BATCH_MS", "100");
    for (k, v) in extra {
        c.env(k, v);
    }
    c
}

/// The child's output and every event, reading none for `pause` first (a stalled ddptop).
async fn run(mut s: Server, mut cmd: Command, pause: Duration) -> (Output, Vec<SupEvent>) {
    let child = tokio::task::spawn_blocking(move || cmd.output().unwrap());
    tokio::time::sleep(pause).await;
    let mut events = Vec::new();
    let mut child = Box::pin(child);
    let out = loop {
        tokio::select! {
            Some(ev) = s.rx.recv() => events.push(ev),
            out = &mut child => break out.unwrap(),
        }
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    while let Ok(ev) = s.rx.try_recv() {
        events.push(ev);
    }
    assert!(
        out.status.success(),
        "child failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, events)
}

fn hellos_and_batches(events: &[SupEvent]) -> (Vec<String>, Vec<NcclBatch>) {
    let (mut abis, mut bs) = (Vec::new(), Vec::new());
    for e in events {
        if let SupEvent::Worker { msg, .. } = e {
            match msg.as_ref() {
                WorkerMsg::NcclHello(h) => abis.push(h.abi.clone()),
                WorkerMsg::Nccl(b) => bs.push(b.clone()),
                _ => {}
            }
        }
    }
    (abis, bs)
}

async fn fixture_through(nccl: &str, want_abi: &str) {
    let s = server(256);
    let cmd = child_cmd(&s, nccl, &[]);
    let (out, events) = run(s, cmd, Duration::ZERO).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("CHILD took ncclProfiler_{want_abi} state=2")),
        "{stdout}"
    );
    let (abis, bs) = hellos_and_batches(&events);
    assert_eq!(abis, vec![want_abi.to_string()], "the table NCCL called");
    // Every fixture event arrives once, under NCCL's name, with its bytes and its kernel span.
    let colls: Vec<_> = bs.iter().flat_map(|b| b.colls.iter()).collect();
    let got: Vec<(String, u64, u64)> = colls
        .iter()
        .map(|c| (c.func.clone(), c.seq, c.bytes))
        .collect();
    let want: Vec<(String, u64, u64)> = FIXTURE
        .iter()
        .zip(fixture_seqs())
        .map(|((f, n, _), seq)| {
            // SAFETY: a NUL-terminated name, as NCCL passes it.
            let code = unsafe { nccl_profiler_ddptop::names::func_code(f.as_ptr()) };
            let name = nccl_profiler_ddptop::names::func_name(code);
            (name.to_string(), seq, *n as u64 * 4)
        })
        .collect();
    let mut sorted = got.clone();
    sorted.sort();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(sorted, want_sorted, "{nccl}: the fixture's events");
    assert!(colls.iter().all(|c| c.kernel_us == Some(0.4)), "{colls:?}");
    assert!(
        bs.iter()
            .all(|b| b.bad == 0 && b.unrequested == 0 && b.lost == 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nccl_228_takes_the_v5_table() {
    fixture_through("2.28", "v5").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nccl_227_takes_the_v4_table() {
    fixture_through("2.27", "v4").await;
}

#[test]
fn an_nccl_that_knows_only_older_tables_finds_none() {
    let lib: &'static libloading::Library = Box::leak(Box::new(
        // SAFETY: our own plugin; loading it runs no constructor of note.
        unsafe { libloading::Library::new(plugin_path()).unwrap() },
    ));
    let old = ["ncclProfiler_v3", "ncclProfiler_v2", "ncclProfiler_v1"];
    assert!(nccl_load(lib, &old).is_none());
}

/// ddptop stops reading for 1.6 s with a stall limit of 0.4 s: the plugin says it stalled, keeps
/// recording, reconnects, and the collectives driven after the stall still arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_stall_the_plugin_reconnects_and_reports_again() {
    let s = server(1);
    let extra = [("DDPTOP_NCCL_STALL_MS", "400"), ("PLUGIN_DRIVE_MS", "3000")];
    let cmd = child_cmd(&s, "stall", &extra);
    let (out, events) = run(s, cmd, Duration::from_millis(1600)).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout.lines().find(|l| l.contains("CHILD drove")).unwrap();
    let driven: u64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(
        line.contains(", 3") && line.ends_with(", 2]"),
        "stalled, then reporting: {line}"
    );
    assert!(
        stderr.contains("stopped reading for 0.4 s; still recording, reconnecting"),
        "{stderr}"
    );
    assert!(stderr.contains("reconnected after"), "{stderr}");
    assert!(!stderr.contains("off for this process"), "{stderr}");
    let (abis, bs) = hellos_and_batches(&events);
    assert!(abis.len() >= 2, "a second nccl_hello: {abis:?}");
    let last = bs
        .iter()
        .filter_map(|b| b.last_done.get("all_reduce"))
        .max()
        .copied()
        .unwrap();
    assert_eq!(
        last,
        driven - 1,
        "the last collective, driven after the stall"
    );
    let counted: u64 = bs
        .iter()
        .flat_map(|b| b.funcs.values())
        .map(|f| f.count)
        .sum();
    let lost = bs.iter().map(|b| b.lost).max().unwrap_or(0);
    assert!(lost > 0, "the batch cut by the stall is counted as lost");
    assert!(
        counted <= driven && counted + lost >= driven,
        "counted {counted} + lost {lost} vs driven {driven}"
    );
}
