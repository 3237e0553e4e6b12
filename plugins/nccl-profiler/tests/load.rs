//! The built plugin, loaded as NCCL loads it (dlopen, the `ncclProfiler_v5` table), driven with
//! synthetic v5 (and v4) descriptors from several threads, against ddptop's real socket server.
//!
//! Each scenario runs the plugin in a child process (this test binary, `child` test, told what
//! to do by environment): the plugin's state is per process, as in a training rank, and a
//! plugin that turned itself off stays off. The parent runs the server and checks what arrived.

use ddptop::protocol::{NcclBatch, WorkerMsg};
use ddptop::supervisor::SupEvent;
use ddptop::supervisor::socket::SocketServer;
use nccl_profiler_ddptop::abi::*;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const RUN: &str = "r-plugin-test";
const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// Collectives per communicator in the threaded part.
const N: u64 = 2000;

fn plugin_path() -> PathBuf {
    // target/<profile>/deps/load-<hash> → target/<profile>/libnccl_profiler_ddptop.so
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libnccl_profiler_ddptop.so");
    assert!(
        p.exists(),
        "{} not built (cargo build -p ddptop-nccl-profiler)",
        p.display()
    );
    p
}

// ---------------------------------------------------------------- the child: NCCL's side

struct Plugin {
    _lib: libloading::Library,
    v5: &'static ProfilerV5,
    v4: &'static ProfilerV4,
}

fn load() -> Plugin {
    // SAFETY: our own plugin; its tables are statics that live as long as the library, which
    // is never unloaded here.
    unsafe {
        let lib = libloading::Library::new(plugin_path()).unwrap();
        let v5: &'static ProfilerV5 = &**lib.get::<*const ProfilerV5>(b"ncclProfiler_v5").unwrap();
        let v4: &'static ProfilerV4 = &**lib.get::<*const ProfilerV4>(b"ncclProfiler_v4").unwrap();
        Plugin { _lib: lib, v5, v4 }
    }
}

fn zeroed_descr(kind: u64, parent: *mut c_void) -> EventDescrV5 {
    // SAFETY: plain data; NULL pointers and zeros are valid for every field.
    let mut d: EventDescrV5 = unsafe { std::mem::zeroed() };
    d.kind = kind;
    d.parent_obj = parent;
    d
}

fn coll_descr(seq: u64, count: usize, nch: u8) -> EventDescrV5 {
    let mut d = zeroed_descr(event::COLL, std::ptr::null_mut());
    d.u.coll = CollDescr {
        seq_number: seq,
        func: c"AllReduce".as_ptr(),
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count,
        root: 0,
        datatype: c"ncclFloat32".as_ptr(),
        n_channels: nch,
        n_warps: 16,
        algo: c"RING".as_ptr(),
        proto: c"SIMPLE".as_ptr(),
        parent_group: std::ptr::null_mut(),
    };
    d
}

fn chan_descr(parent: *mut c_void, ch: u8, gpu: u64) -> EventDescrV5 {
    let mut d = zeroed_descr(event::KERNEL_CH, parent);
    d.u.kernel_ch = KernelChDescr {
        channel_id: ch,
        p_timer: gpu,
    };
    d
}

/// GPU times the synthetic channels report: start at `seq` µs, channel `ch` stops 500 + 10·ch
/// ns later, so a two-channel collective's kernel span is 510 ns.
fn gpu_start(seq: u64) -> u64 {
    1_000_000 + seq * 1000
}

#[derive(Clone, Copy)]
struct P(*mut c_void);
unsafe impl Send for P {}

fn init(p: &Plugin, id: u64, rank: c_int) -> (P, c_int) {
    let mut ctx = std::ptr::null_mut();
    let mut mask: c_int = -1;
    // SAFETY: the v5 init contract; NULL logger.
    let r = unsafe { (p.v5.init)(&mut ctx, id, &mut mask, c"test".as_ptr(), 1, 2, rank, None) };
    assert_eq!(r, NCCL_SUCCESS);
    (P(ctx), mask)
}

fn start(p: &Plugin, ctx: P, d: &mut EventDescrV5) -> P {
    let mut h = std::ptr::null_mut();
    // SAFETY: the v5 startEvent contract.
    assert_eq!(
        unsafe { (p.v5.start_event)(ctx.0, &mut h, d) },
        NCCL_SUCCESS
    );
    P(h)
}

fn stop(p: &Plugin, h: P) {
    // SAFETY: any pointer: the plugin must not follow one it did not give out.
    assert_eq!(unsafe { (p.v5.stop_event)(h.0) }, NCCL_SUCCESS);
}

fn record_stop(p: &Plugin, h: P, gpu: u64) {
    let mut a = EventStateArgs {
        kernel_ch_p_timer: gpu,
    };
    // SAFETY: as NCCL records KernelChStop.
    assert_eq!(
        unsafe { (p.v5.record_event_state)(h.0, state::KERNEL_CH_STOP, &mut a) },
        NCCL_SUCCESS
    );
}

/// The channels of one collective, as NCCL's proxy thread drives them.
fn run_channels(p: &Plugin, coll: P, seq: u64, nch: u8) {
    if coll.0.is_null() {
        return; // dropped by the plugin: NCCL then has no parent to pass
    }
    let chans: Vec<P> = (0..nch)
        .map(|c| {
            start(
                p,
                P(std::ptr::null_mut()),
                &mut chan_descr(coll.0, c, gpu_start(seq) + c as u64),
            )
        })
        .collect();
    for (c, h) in chans.iter().enumerate() {
        record_stop(p, *h, gpu_start(seq) + 500 + 10 * c as u64);
        stop(p, *h);
    }
}

/// One communicator driven like NCCL does: a user thread starts and stops each collective's
/// `Coll` event, a proxy thread runs its channels, racing the user thread's stop.
fn split_threads(p: &'static Plugin, ctx: P, count: usize) {
    let (tx, rx) = std::sync::mpsc::sync_channel::<(P, u64)>(8);
    let proxy = std::thread::spawn(move || {
        for (h, seq) in rx {
            run_channels(p, h, seq, 2);
        }
    });
    for seq in 0..N {
        let h = start(p, ctx, &mut coll_descr(seq, count, 2));
        tx.send((h, seq)).unwrap();
        if !h.0.is_null() {
            stop(p, h);
        }
    }
    drop(tx);
    proxy.join().unwrap();
}

/// One communicator from a single thread, channels before the `Coll` stop.
fn one_thread(p: &'static Plugin, ctx: P, count: usize) {
    for seq in 0..N {
        let h = start(p, ctx, &mut coll_descr(seq, count, 2));
        run_channels(p, h, seq, 2);
        if !h.0.is_null() {
            stop(p, h);
        }
    }
}

fn finalize(p: &Plugin, ctx: P) {
    // SAFETY: the finalize contract.
    assert_eq!(unsafe { (p.v5.finalize)(ctx.0) }, NCCL_SUCCESS);
}

/// Bad orders and foreign input; returns how many the plugin must count as `bad`.
fn bad_orders(p: &Plugin, ctx: P) -> u64 {
    let mut n = 0;
    let local = 7u64;
    let foreign = P(&local as *const u64 as *mut c_void);
    stop(p, foreign); // stop without start (a pointer that is not a handle)
    n += 1;
    record_stop(p, foreign, 1); // a state for a handle that does not exist
    n += 1;
    let h = start(p, ctx, &mut coll_descr(9_000_000, 16, 1));
    assert!(!h.0.is_null());
    record_stop(p, h, 5); // KernelChStop on a collective, not a channel
    n += 1;
    let ch = start(p, P(std::ptr::null_mut()), &mut chan_descr(h.0, 0, 10));
    record_stop(p, ch, 20);
    stop(p, ch);
    stop(p, ch); // double stop of a channel
    n += 1;
    stop(p, h);
    stop(p, h); // double stop of a collective (already complete and freed)
    n += 1;
    let orphan = start(
        p,
        P(std::ptr::null_mut()),
        &mut chan_descr(foreign.0, 0, 10),
    );
    assert!(orphan.0.is_null(), "a channel of a parent that is not ours");
    n += 1;
    // Event types it did not ask for are counted apart (`unrequested`, the child's line).
    for kind in [event::GROUP, event::PROXY_OP, 1 << 20] {
        let h = start(p, ctx, &mut zeroed_descr(kind, std::ptr::null_mut()));
        assert!(h.0.is_null(), "event type {kind} was not asked for");
    }
    let h = start(p, foreign, &mut coll_descr(1, 1, 0)); // a context that is not ours
    assert!(h.0.is_null());
    n += 1;
    finalize(p, foreign); // finalize of a context that is not ours
    n += 1;
    // NULL descriptor and handle pointers.
    // SAFETY: the plugin must tolerate them.
    unsafe {
        assert_eq!(
            (p.v5.start_event)(ctx.0, std::ptr::null_mut(), std::ptr::null_mut()),
            NCCL_SUCCESS
        );
    }
    n += 1;
    n
}

fn child_drive(p: &'static Plugin) {
    let rank: c_int = std::env::var("RANK").unwrap().parse().unwrap();
    let (a, mask) = init(p, 0xa11, rank);
    assert_eq!(
        mask as u64,
        event::COLL | event::P2P | event::KERNEL_CH,
        "asks for Coll, P2p and KernelCh only"
    );
    assert!(!a.0.is_null());
    let (b, _) = init(p, 0xb22, rank);
    let (c, _) = init(p, 0xc33, rank);
    let bad = bad_orders(p, c);
    let threads = [
        std::thread::spawn(move || split_threads(p, a, 1024)),
        std::thread::spawn(move || split_threads(p, b, 2048)),
        std::thread::spawn(move || one_thread(p, c, 4096)),
    ];
    for t in threads {
        t.join().unwrap();
    }
    // The v4 table: same callbacks behind a one-byte event type.
    let mut ctx4 = std::ptr::null_mut();
    let mut mask4: c_int = 0;
    // SAFETY: the v4 init and startEvent contracts.
    unsafe {
        assert_eq!(
            (p.v4.init)(
                &mut ctx4,
                &mut mask4,
                c"v4".as_ptr(),
                0xd44,
                1,
                2,
                rank,
                None
            ),
            NCCL_SUCCESS
        );
        for seq in 0..10u64 {
            let v5 = coll_descr(seq, 8, 0);
            let mut d4 = EventDescrV4 {
                kind: event::COLL as u8,
                parent_obj: std::ptr::null_mut(),
                rank,
                u: v5.u,
            };
            let mut h = std::ptr::null_mut();
            assert_eq!((p.v4.start_event)(ctx4, &mut h, &mut d4), NCCL_SUCCESS);
            assert!(!h.is_null());
            assert_eq!((p.v4.stop_event)(h), NCCL_SUCCESS);
        }
        assert_eq!((p.v4.finalize)(ctx4), NCCL_SUCCESS);
    }
    // Point-to-point: NCCL's `Send`/`Recv` as P2p events (no sequence number), each with one
    // channel, on a communicator of their own.
    let (e, _) = init(p, 0xe66, rank);
    for i in 0..5u64 {
        for func in [c"Send", c"Recv"] {
            let mut d = zeroed_descr(event::P2P, std::ptr::null_mut());
            d.u.p2p = P2pDescr {
                func: func.as_ptr(),
                buff: std::ptr::null_mut(),
                datatype: c"ncclFloat32".as_ptr(),
                count: 64,
                peer: 1 - rank,
                n_channels: 1,
                parent_group: std::ptr::null_mut(),
            };
            let h = start(p, e, &mut d);
            assert!(!h.0.is_null(), "a P2p event is a collective to the plugin");
            run_channels(p, h, i, 1);
            stop(p, h);
        }
    }
    finalize(p, e);
    for ctx in [a, b, c] {
        finalize(p, ctx);
    }
    println!("CHILD bad={bad}");
}

/// Drive collectives until the plugin has turned itself off (or give up after 20 s), then show
/// that every callback still returns success and hands out nothing.
fn child_until_off(p: &'static Plugin) {
    let (ctx, _) = init(p, 0xe55, 0);
    let t0 = Instant::now();
    let mut seq = 0;
    loop {
        let h = start(p, ctx, &mut coll_descr(seq, 64, 1));
        if h.0.is_null() {
            let (again, mask) = init(p, 0xf66, 0);
            if mask == 0 {
                assert!(again.0.is_null());
                break;
            }
        }
        run_channels(p, h, seq, 1);
        if !h.0.is_null() {
            stop(p, h);
        }
        seq += 1;
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the plugin never turned itself off"
        );
    }
    // Off: callbacks on stale handles and new events are all no-ops.
    for s in 0..1000 {
        let h = start(p, ctx, &mut coll_descr(s, 64, 1));
        assert!(h.0.is_null());
        stop(p, h);
    }
    finalize(p, ctx);
    println!("CHILD off after {seq} collectives");
}

#[test]
#[ignore = "run by the other tests in a child process"]
fn child() {
    let p: &'static Plugin = Box::leak(Box::new(load()));
    match std::env::var("PLUGIN_SCENARIO").as_deref() {
        Ok("drive") => child_drive(p),
        Ok("until_off") => child_until_off(p),
        other => panic!("unknown scenario {other:?}"),
    }
    // Let the sender thread write the final batches (the process exiting would cut them).
    std::thread::sleep(Duration::from_millis(
        std::env::var("PLUGIN_LINGER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1500),
    ));
}

// ---------------------------------------------------------------- the parent: ddptop's side

fn child_cmd(scenario: &str, env: &[(&str, String)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("PLUGIN_SCENARIO", scenario)
    .env("RANK", "1")
    .env("WORLD_SIZE", "2")
    .env_remove("DDPTOP_SOCKET");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn off_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("ddptop NCCL profiler: off"))
        .map(str::to_string)
        .collect()
}

fn check_child(out: &Output) {
    assert!(
        out.status.success(),
        "child failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

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

fn env_for(s: &Server, token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("DDPTOP_SOCKET", s.server.path.display().to_string()),
        ("DDPTOP_TOKEN", token.to_string()),
        ("DDPTOP_RUN_ID", RUN.to_string()),
        ("DDPTOP_NCCL_BATCH_MS", "100".to_string()),
    ]
}

/// Run the child on a blocking thread while the server's events are collected.
async fn run_child(mut s: Server, cmd: Command, pause_ms: u64) -> (Output, Vec<SupEvent>, Server) {
    let mut cmd = cmd;
    let child = tokio::task::spawn_blocking(move || cmd.output().unwrap());
    // Not reading the events for a while blocks the server's connection task, which stops
    // reading the socket: backpressure all the way back to the plugin's queue.
    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    let mut events = Vec::new();
    let mut child = Box::pin(child);
    let out = loop {
        tokio::select! {
            Some(ev) = s.rx.recv() => events.push(ev),
            out = &mut child => break out.unwrap(),
        }
    };
    while let Ok(ev) = s.rx.try_recv() {
        events.push(ev);
    }
    (out, events, s)
}

fn batches(events: &[SupEvent]) -> Vec<NcclBatch> {
    events
        .iter()
        .filter_map(|e| match e {
            SupEvent::Worker { run, msg } if run == RUN => match msg.as_ref() {
                WorkerMsg::Nccl(b) => Some(b.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Per communicator: (collectives counted, listed, last completed, final seen, largest counters).
fn per_comm(bs: &[NcclBatch]) -> BTreeMap<String, (u64, u64, u64, bool, NcclBatch)> {
    let mut m: BTreeMap<String, (u64, u64, u64, bool, NcclBatch)> = BTreeMap::new();
    for b in bs {
        let e = m
            .entry(b.comm.clone())
            .or_insert((0, 0, 0, false, b.clone()));
        e.0 += b.funcs.values().map(|f| f.count).sum::<u64>();
        e.1 += b.colls.len() as u64 + b.more;
        e.2 = e.2.max(b.last_done.get("all_reduce").copied().unwrap_or(0));
        e.3 |= b.last;
        e.4 = b.clone();
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collectives_from_several_threads_arrive_aggregated_per_collective() {
    let s = server(1024);
    let mut env = env_for(&s, TOKEN);
    env.push(("DDPTOP_NCCL_QUEUE", "65536".into()));
    let (out, events, _s) = run_child(s, child_cmd("drive", &env), 0).await;
    check_child(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bad: u64 = stdout
        .lines()
        .find_map(|l| l.split_once("CHILD bad=").map(|(_, n)| n))
        .unwrap_or_else(|| panic!("no count of bad calls from the child: {stdout}"))
        .trim()
        .parse()
        .unwrap();
    assert!(off_lines(&out).is_empty(), "{:?}", off_lines(&out));
    let hello = events.iter().find_map(|e| match e {
        SupEvent::Worker { msg, .. } => match msg.as_ref() {
            WorkerMsg::NcclHello(h) => Some(h.clone()),
            _ => None,
        },
        _ => None,
    });
    let hello = hello.expect("nccl_hello reached ddptop");
    assert_eq!(
        (hello.rank, hello.world_size, hello.abi.as_str()),
        (1, 2, "v5")
    );
    let bs = batches(&events);
    assert!(bs.iter().all(|b| b.rank == 1));
    let comms = per_comm(&bs);
    // Three threaded communicators of N collectives, the v4 one of 10, the bad-order
    // collective on comm c33.
    for (id, want, bytes) in [
        ("0000000000000a11", N, 4096),
        ("0000000000000b22", N, 8192),
        ("0000000000000c33", N + 1, 16384),
    ] {
        let (counted, listed, last, fin, lastb) = &comms[id];
        assert_eq!(*counted, want, "{id}: every collective counted once");
        assert_eq!(listed, counted, "{id}: listed + more = counted");
        assert!(*fin, "{id}: its final message");
        assert_eq!(lastb.nranks, 2);
        if id != "0000000000000c33" {
            assert_eq!(*last, N - 1, "{id}");
        }
        // One entry per collective, its two channels folded into one span.
        let c = bs
            .iter()
            .filter(|b| b.comm == id)
            .flat_map(|b| b.colls.iter())
            .find(|c| c.seq == 7)
            .expect("collective #7 listed");
        assert_eq!(
            (c.channels, c.bytes, c.algo.as_str(), c.proto.as_str()),
            (2, bytes, "ring", "simple")
        );
        assert_eq!(
            c.kernel_us,
            Some(0.51),
            "{id}: latest stop − earliest start"
        );
        assert!(c.t_kernel.is_some() && c.t_end >= c.t_call && !c.partial);
    }
    // The P2P communicator: 5 sends and 5 receives, numbered 0..4 by the plugin, per function.
    let p2p: Vec<_> = bs
        .iter()
        .filter(|b| b.comm == "0000000000000e66")
        .flat_map(|b| b.colls.iter())
        .map(|c| (c.func.as_str(), c.seq, c.bytes, c.channels))
        .collect();
    for f in ["send", "recv"] {
        let mine: Vec<_> = p2p.iter().filter(|c| c.0 == f).collect();
        assert_eq!(mine.len(), 5, "{f}: {p2p:?}");
        assert!(
            mine.iter()
                .enumerate()
                .all(|(i, c)| c.1 == i as u64 && c.2 == 256 && c.3 == 1)
        );
    }
    let (counted, _, last, fin, _) = &comms["0000000000000d44"];
    assert_eq!(
        (*counted, *last, *fin),
        (10, 9, true),
        "the v4 communicator"
    );
    let last = bs.last().unwrap();
    assert_eq!(
        (last.dropped, last.lost),
        (0, 0),
        "a queue big enough loses nothing"
    );
    let max_bad = bs.iter().map(|b| b.bad).max().unwrap();
    assert_eq!(max_bad, bad, "every bad call counted, none crashed");
    let unrequested = bs.iter().map(|b| b.unrequested).max().unwrap();
    assert_eq!(
        unrequested, 3,
        "the 3 event types not asked for, apart from `bad`"
    );
    assert!(bs.iter().all(|b| b.inflight.len() <= 256));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_drops_are_counted_and_nothing_is_counted_twice() {
    // A one-slot event channel not read for 1.5 s: the server stops reading, the socket fills,
    // the plugin's sender blocks and its 64-record queue overflows.
    let s = server(1);
    let mut env = env_for(&s, TOKEN);
    env.push(("DDPTOP_NCCL_QUEUE", "64".into()));
    env.push(("PLUGIN_LINGER_MS", "3000".into()));
    let (out, events, _s) = run_child(s, child_cmd("drive", &env), 1500).await;
    check_child(&out);
    let bs = batches(&events);
    let last = bs
        .iter()
        .max_by_key(|b| b.dropped)
        .expect("batches arrived");
    assert!(last.dropped > 0, "records were dropped under backpressure");
    let comms = per_comm(&bs);
    let counted: u64 = comms.values().map(|c| c.0).sum();
    let lost = bs.iter().map(|b| b.lost).max().unwrap();
    // Every collective driven (3·N threaded, 10 on v4, 1 bad-order one, 10 P2P) is either
    // counted once or counted as lost.
    assert_eq!(counted + lost, 3 * N + 21, "counted {counted}, lost {lost}");
    assert!(
        off_lines(&out).is_empty(),
        "the plugin stayed on: {:?}",
        off_lines(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_turns_the_plugin_off_after_one_line() {
    let s = server(64);
    let env = env_for(&s, &"f".repeat(64));
    let (out, events, _s) = run_child(s, child_cmd("until_off", &env), 0).await;
    check_child(&out);
    let lines = off_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("ddptop refused the profiler"),
        "{}",
        lines[0]
    );
    assert!(batches(&events).is_empty());
    assert!(events.iter().any(
        |e| matches!(e, SupEvent::Rejected { detail, .. } if detail.contains("NCCL profiler"))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ddptop_the_plugin_is_off_from_the_first_init() {
    let out = tokio::task::spawn_blocking(|| child_cmd("until_off", &[]).output().unwrap())
        .await
        .unwrap();
    check_child(&out);
    let lines = off_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("DDPTOP_SOCKET is not set"),
        "{}",
        lines[0]
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("CHILD off after 0 collectives"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddptop_going_away_mid_run_turns_the_plugin_off_without_a_crash() {
    let mut s = server(1024);
    let env = env_for(&s, TOKEN);
    let mut cmd = child_cmd("until_off", &env);
    let child = tokio::task::spawn_blocking(move || cmd.output().unwrap());
    // Once batches flow, ddptop ends the run: the plugin's connection is closed under it.
    let t0 = Instant::now();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(20), s.rx.recv())
            .await
            .unwrap()
            .unwrap();
        if let SupEvent::Worker { msg, .. } = &ev
            && matches!(msg.as_ref(), WorkerMsg::Nccl(_))
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20));
    }
    s.server.registry.close_run(RUN);
    let out = child.await.unwrap();
    check_child(&out);
    let lines = off_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("ddptop closed the connection") || lines[0].contains("went away"),
        "{}",
        lines[0]
    );
}
