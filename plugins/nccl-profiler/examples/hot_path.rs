//! What the plugin costs NCCL's threads per collective, on the CPU: the built `.so` loaded as
//! NCCL loads it, one `Coll` event and two `KernelCh` events (start, KernelChStop, stop) per
//! collective, ROUNDS × N collectives from one thread, against a socket that reads and discards
//! (a stand-in for ddptop that never applies backpressure). Prints ns per collective per round
//! and the median. Run: `cargo run --release -p ddptop-nccl-profiler --example hot_path`
//! (after `cargo build --release -p ddptop-nccl-profiler`).

use nccl_profiler_ddptop::abi::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::time::Instant;

const N: u64 = 200_000;
const ROUNDS: usize = 7;

fn main() {
    let dir = std::env::temp_dir().join(format!("ddptop-hot-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("s.sock");
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut hello = String::new();
                r.read_line(&mut hello).unwrap();
                let mut w = c;
                w.write_all(b"{\"v\":1,\"type\":\"welcome\",\"run_id\":\"bench\",\"rank\":0,\"heartbeat_s\":1.0}\n")
                    .unwrap();
                let mut sink = [0u8; 1 << 16];
                while r.read(&mut sink).is_ok_and(|n| n > 0) {}
            });
        }
    });
    // SAFETY: setting the environment before any other thread reads it (the plugin reads it at
    // its first init, below).
    unsafe {
        std::env::set_var("DDPTOP_SOCKET", &sock);
        std::env::set_var("DDPTOP_TOKEN", "0".repeat(64));
        std::env::set_var("DDPTOP_RUN_ID", "bench");
        // Room for every record of every round: what is timed is the path that records, not the
        // cheaper one that drops.
        std::env::set_var("DDPTOP_NCCL_QUEUE", (1u64 << 22).to_string());
    }
    let exe = std::env::current_exe().unwrap();
    let so = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libnccl_profiler_ddptop.so");
    // SAFETY: our own plugin, kept loaded for the whole process.
    let lib = unsafe { libloading::Library::new(&so) }
        .unwrap_or_else(|e| panic!("{}: {e}", so.display()));
    let p: &ProfilerV5 = unsafe { &**lib.get::<*const ProfilerV5>(b"ncclProfiler_v5").unwrap() };
    let mut ctx = std::ptr::null_mut();
    let mut mask = 0;
    unsafe { (p.init)(&mut ctx, 0xbe, &mut mask, c"bench".as_ptr(), 1, 2, 0, None) };
    assert_ne!(mask, 0, "the plugin is off");
    let mut seq = 0u64;
    let mut per_round = Vec::new();
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        for _ in 0..N {
            // SAFETY: descriptors as NCCL fills them; handles the plugin gave out.
            unsafe {
                let mut d: EventDescrV5 = std::mem::zeroed();
                d.kind = event::COLL;
                d.u.coll.seq_number = seq;
                d.u.coll.func = c"AllReduce".as_ptr();
                d.u.coll.count = 1 << 20;
                d.u.coll.datatype = c"ncclFloat32".as_ptr();
                d.u.coll.n_channels = 2;
                d.u.coll.algo = c"RING".as_ptr();
                d.u.coll.proto = c"SIMPLE".as_ptr();
                let mut h = std::ptr::null_mut();
                (p.start_event)(ctx, &mut h, &mut d);
                for ch in 0..2u8 {
                    let mut k: EventDescrV5 = std::mem::zeroed();
                    k.kind = event::KERNEL_CH;
                    k.parent_obj = h;
                    k.u.kernel_ch = KernelChDescr {
                        channel_id: ch,
                        p_timer: seq * 1000,
                    };
                    let mut kh = std::ptr::null_mut();
                    (p.start_event)(ctx, &mut kh, &mut k);
                    let mut a = EventStateArgs {
                        kernel_ch_p_timer: seq * 1000 + 500,
                    };
                    (p.record_event_state)(kh, state::KERNEL_CH_STOP, &mut a);
                    (p.stop_event)(kh);
                }
                (p.stop_event)(h);
            }
            seq += 1;
        }
        per_round.push(t0.elapsed().as_nanos() as f64 / N as f64);
    }
    let mut sorted = per_round.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "ns per collective (1 Coll + 2 KernelCh, one thread), {ROUNDS} rounds of {N}: {}",
        per_round
            .iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("median {:.0} ns", sorted[ROUNDS / 2]);
    unsafe { (p.finalize)(ctx) };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = std::fs::remove_dir_all(&dir);
}
