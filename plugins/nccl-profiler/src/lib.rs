//! ddptop's NCCL profiler plugin. NCCL (≥ 2.23 with `NCCL_PROFILER_PLUGIN` set to this library's
//! path) calls it for every collective; it asks for `Coll`, `P2p` and `KernelCh` events only, folds each
//! collective's channels into one record in a bounded lock-free pool, and a thread of its own
//! sends them to the ddptop that launched the process, over the run's authenticated socket, every
//! ≥ 100 ms (docs/profiler.md, docs/protocol.md `nccl_hello` / `nccl`).
//!
//! It never fails or slows NCCL: every callback returns `ncclSuccess`; when ddptop is not there
//! or refuses the token, the plugin logs one line and every callback returns at once from then
//! on; when ddptop stalls or the connection breaks mid-run it keeps recording and reconnects
//! (`sender`). Its state is exported for the attach bootstrap in the same process (`status`). On NCCL's threads it takes no lock and allocates nothing: a
//! collective takes a slot of the pool allocated at the first `init`, records go through a
//! bounded queue, and whatever does not fit is counted (`dropped`, `lost`), never waited for.
//!
//! Exports `ncclProfiler_v5` and `ncclProfiler_v4` (the same callbacks behind a one-byte event
//! type). NCCL picks the newest table it knows by symbol; the plugin reports the one it was called
//! through (`abi` in `nccl_hello`), so no NCCL version table is needed (tests/fake_nccl.rs).

pub mod abi;
pub mod agg;
pub mod conn;
pub mod names;
pub mod pool;
pub mod ring;
pub mod sender;
pub mod status;

use abi::*;
use pool::{CollStart, Handle, Shared};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

static SHARED: OnceLock<&'static Shared> = OnceLock::new();

/// Host time for every record: CLOCK_MONOTONIC in ns, the clock of Python's `time.monotonic()`,
/// so the plugin's times line up with the worker's `t` on the same host.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The process-wide state, set up by the first `init`: from the environment, with the sender
/// thread started. When the environment says ddptop is not there, a disabled state (one line
/// logged) so later calls return at once.
fn setup(abi: &str) -> &'static Shared {
    SHARED.get_or_init(|| {
        let cfg = conn::Config::from_env(|k| std::env::var(k).ok());
        let (slots, queue) = cfg.as_ref().map_or((1, 2), |c| (c.slots, c.queue));
        let shared: &'static Shared = Box::leak(Box::new(Shared::new(slots, queue)));
        match cfg {
            Err(why) => sender::disable(shared, &why),
            Ok(cfg) => {
                pin_in_memory();
                let hello = conn::hello_line(
                    &cfg,
                    std::process::id(),
                    &hostname(),
                    abi,
                    now_ns() as f64 / 1e9,
                );
                let spawned = std::thread::Builder::new()
                    .name("ddptop-nccl".into())
                    .spawn(move || sender::run(shared, cfg, hello));
                if let Err(e) = spawned {
                    sender::disable(shared, &format!("cannot start its thread: {e}"));
                }
            }
        }
        shared
    })
}

/// NCCL may `dlclose` the plugin after the last communicator is gone; the sender thread still
/// runs its code then. Re-opening ourselves with RTLD_NODELETE keeps the library mapped.
fn pin_in_memory() {
    // SAFETY: dladdr on one of our own functions; dlopen(RTLD_NOLOAD) only bumps the flags of an
    // already loaded object, and the handle is deliberately never closed.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(pin_in_memory as *const c_void, &mut info) != 0 && !info.dli_fname.is_null()
        {
            libc::dlopen(
                info.dli_fname,
                libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
            );
        }
    }
}

fn hostname() -> String {
    let mut b = [0u8; 256];
    // SAFETY: the buffer and its length.
    let r = unsafe { libc::gethostname(b.as_mut_ptr() as *mut c_char, b.len()) };
    if r != 0 {
        return "unknown".into();
    }
    let n = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

fn live() -> Option<&'static Shared> {
    SHARED
        .get()
        .copied()
        .filter(|s| !s.disabled.load(Ordering::Relaxed))
}

/// `init`, both versions.
///
/// # Safety
/// NCCL's pointers: `context` and `mask` writable, `logfn` NULL or NCCL's logger.
#[allow(clippy::too_many_arguments)]
unsafe fn init(
    abi: &str,
    context: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: NcclDebugLogger,
) -> NcclResult {
    // SAFETY: NCCL passes writable pointers; NULL is tolerated.
    unsafe {
        if !context.is_null() {
            *context = std::ptr::null_mut();
        }
        if !mask.is_null() {
            *mask = 0;
        }
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let shared = setup(abi);
        if shared.disabled.load(Ordering::Relaxed) {
            return;
        }
        let Some(i) = shared.open_comm(comm_id, rank, nranks, n_nodes) else {
            shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // SAFETY: as above.
        unsafe {
            if !context.is_null() {
                *context = &shared.comms[i] as *const _ as *mut c_void;
            }
            if !mask.is_null() {
                *mask = (event::COLL | event::P2P | event::KERNEL_CH) as c_int;
            }
            if let Some(log) = logfn {
                log(
                    NCCL_LOG_INFO,
                    NCCL_INIT,
                    c"ddptop".as_ptr(),
                    0,
                    c"ddptop profiler plugin: init comm %lx rank %d of %d".as_ptr(),
                    comm_id as libc::c_ulong,
                    rank,
                    nranks,
                );
            }
        }
    }));
    NCCL_SUCCESS
}

/// `startEvent`, both versions: `kind` is the descriptor's event type, `descr` its address.
///
/// # Safety
/// `descr` NULL or a descriptor laid out as [`EventDescrV5`] up to its union (v4 differs only in
/// the width of `type`, passed here as `kind`).
unsafe fn start(
    context: *mut c_void,
    handle: *mut *mut c_void,
    kind: u64,
    descr: *const EventDescrV5,
) -> NcclResult {
    if !handle.is_null() {
        // SAFETY: NCCL's out-pointer.
        unsafe { *handle = std::ptr::null_mut() };
    }
    let Some(shared) = live() else {
        return NCCL_SUCCESS;
    };
    if handle.is_null() || descr.is_null() {
        shared.counters.bad.fetch_add(1, Ordering::Relaxed);
        return NCCL_SUCCESS;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's promise; fields are read one at a time, never the whole union.
        let h: *mut c_void = unsafe {
            match kind {
                event::COLL => {
                    let Some(comm) = shared.comm_of(context as *const u8) else {
                        shared.counters.bad.fetch_add(1, Ordering::Relaxed);
                        return;
                    };
                    let c = std::ptr::addr_of!((*descr).u.coll);
                    let s = CollStart {
                        comm: comm as u16,
                        func: names::func_code((*c).func),
                        seq: (*c).seq_number,
                        count: (*c).count as u64,
                        dtype: names::dtype_code((*c).datatype),
                        algo: names::algo_code((*c).algo),
                        proto: names::proto_code((*c).proto),
                        nch: (*c).n_channels,
                    };
                    shared
                        .start_coll(&s, now_ns())
                        .map_or(std::ptr::null_mut(), |s| s as *const _ as *mut c_void)
                }
                // A Send or Recv: a collective of its own to the rest of the plugin, numbered by
                // the plugin (NCCL gives P2P events no sequence number); its kernel's channels
                // come as KernelCh events like a collective's.
                event::P2P => {
                    let Some(comm) = shared.comm_of(context as *const u8) else {
                        shared.counters.bad.fetch_add(1, Ordering::Relaxed);
                        return;
                    };
                    let d = std::ptr::addr_of!((*descr).u.p2p);
                    let func = names::func_code((*d).func);
                    let s = CollStart {
                        comm: comm as u16,
                        func,
                        seq: shared.comms[comm].next_p2p_seq(func),
                        count: (*d).count as u64,
                        dtype: names::dtype_code((*d).datatype),
                        algo: 0,
                        proto: 0,
                        nch: (*d).n_channels,
                    };
                    shared
                        .start_coll(&s, now_ns())
                        .map_or(std::ptr::null_mut(), |s| s as *const _ as *mut c_void)
                }
                event::KERNEL_CH => {
                    let parent = (*descr).parent_obj as *const u8;
                    let k = std::ptr::addr_of!((*descr).u.kernel_ch);
                    match shared.handle(parent) {
                        Some(Handle::Coll(slot)) => shared
                            .start_chan(slot, (*k).channel_id as usize, (*k).p_timer, now_ns())
                            .map_or(std::ptr::null_mut(), |c| c as *const _ as *mut c_void),
                        // A channel of a collective we dropped (no slot): nothing to add it to.
                        _ if parent.is_null() => std::ptr::null_mut(),
                        _ => {
                            shared.counters.bad.fetch_add(1, Ordering::Relaxed);
                            std::ptr::null_mut()
                        }
                    }
                }
                _ => {
                    shared.counters.unrequested.fetch_add(1, Ordering::Relaxed);
                    std::ptr::null_mut()
                }
            }
        };
        // SAFETY: checked non-null above.
        unsafe { *handle = h };
    }));
    NCCL_SUCCESS
}

unsafe extern "C" fn init_v5(
    context: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    _comm_name: *const c_char,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: NcclDebugLogger,
) -> NcclResult {
    // SAFETY: NCCL's arguments, passed on.
    unsafe { init("v5", context, comm_id, mask, n_nodes, nranks, rank, logfn) }
}

unsafe extern "C" fn init_v4(
    context: *mut *mut c_void,
    mask: *mut c_int,
    _comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: NcclDebugLogger,
) -> NcclResult {
    // SAFETY: NCCL's arguments, passed on.
    unsafe { init("v4", context, comm_hash, mask, n_nodes, nranks, rank, logfn) }
}

unsafe extern "C" fn start_v5(
    context: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut EventDescrV5,
) -> NcclResult {
    // SAFETY: a v5 descriptor from NCCL (or NULL).
    unsafe {
        let kind = if descr.is_null() { 0 } else { (*descr).kind };
        start(context, handle, kind, descr)
    }
}

unsafe extern "C" fn start_v4(
    context: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut EventDescrV4,
) -> NcclResult {
    // SAFETY: a v4 descriptor: same offsets as v5 past the one-byte type.
    unsafe {
        let kind = if descr.is_null() {
            0
        } else {
            (*descr).kind as u64
        };
        start(context, handle, kind, descr as *const EventDescrV5)
    }
}

unsafe extern "C" fn stop(handle: *mut c_void) -> NcclResult {
    let Some(shared) = live() else {
        return NCCL_SUCCESS;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        match shared.handle(handle as *const u8) {
            Some(Handle::Coll(slot)) => shared.stop_coll(slot, now_ns()),
            Some(Handle::Chan(slot, ch)) => shared.stop_chan(slot, ch, now_ns()),
            None => {
                shared.counters.bad.fetch_add(1, Ordering::Relaxed);
            }
        }
    }));
    NCCL_SUCCESS
}

unsafe extern "C" fn record(
    handle: *mut c_void,
    state: c_int,
    args: *mut EventStateArgs,
) -> NcclResult {
    let Some(shared) = live() else {
        return NCCL_SUCCESS;
    };
    if state != abi::state::KERNEL_CH_STOP {
        return NCCL_SUCCESS;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        match shared.handle(handle as *const u8) {
            // SAFETY: NCCL's state arguments for KernelChStop carry the GPU stop time.
            Some(Handle::Chan(slot, ch)) if !args.is_null() => {
                shared.chan_stop_time(slot, ch, unsafe { (*args).kernel_ch_p_timer })
            }
            _ => {
                shared.counters.bad.fetch_add(1, Ordering::Relaxed);
            }
        }
    }));
    NCCL_SUCCESS
}

unsafe extern "C" fn finalize(context: *mut c_void) -> NcclResult {
    let Some(shared) = SHARED.get() else {
        return NCCL_SUCCESS;
    };
    match shared.comm_of(context as *const u8) {
        // The sender reports the communicator one last time (`final`) and frees its slot.
        Some(i) => {
            let _ = shared.comms[i].state.compare_exchange(
                pool::COMM_LIVE,
                pool::COMM_FINAL,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
        None if context.is_null() => {}
        None => {
            shared.counters.bad.fetch_add(1, Ordering::Relaxed);
        }
    }
    NCCL_SUCCESS
}

/// The table NCCL ≥ 2.28.3 looks up.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclProfiler_v5: ProfilerV5 = ProfilerV5 {
    name: c"ddptop".as_ptr(),
    init: init_v5,
    start_event: start_v5,
    stop_event: stop,
    record_event_state: record,
    finalize,
};

/// The table NCCL 2.26–2.28.2 looks up.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclProfiler_v4: ProfilerV4 = ProfilerV4 {
    name: c"ddptop".as_ptr(),
    init: init_v4,
    start_event: start_v4,
    stop_event: stop,
    record_event_state: record,
    finalize,
};
