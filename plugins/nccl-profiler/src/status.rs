//! What the plugin is doing, for the process it lives in: the attach bootstrap (same process,
//! `workers/ddptop_worker/attach_plugin.py`) reads it through two exported C functions and keeps
//! ddptop's own comm hook timing DDP's buckets until the plugin is `REPORTING`, and again while it
//! is not (docs/profiler.md "attach: never silently blind"). Written by the sender thread and by `disable`;
//! never touched on NCCL's threads.

use std::ffi::{c_char, c_int};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

/// NCCL has not called `init` yet (or not this library).
pub const NOT_STARTED: i32 = -1;
/// `init` ran; the sender is reaching ddptop.
pub const CONNECTING: i32 = 0;
/// ddptop welcomed the plugin; no collective reported yet.
pub const CONNECTED: i32 = 1;
/// At least one batch with a completed collective was written on the current connection: the
/// plugin is confirmed working for this run.
pub const REPORTING: i32 = 2;
/// The connection stalled or broke; records are still kept (bounded) and the sender is
/// reconnecting.
pub const RECONNECTING: i32 = 3;
/// Off for the rest of the process (ddptop absent, refused the plugin, or an unusable setting).
pub const OFF: i32 = 4;

static STATE: AtomicI32 = AtomicI32::new(NOT_STARTED);
static WHY: Mutex<String> = Mutex::new(String::new());

pub fn set(state: i32, why: Option<&str>) {
    if let Some(w) = why {
        let mut g = WHY.lock().unwrap_or_else(|e| e.into_inner());
        g.clear();
        g.push_str(w);
    }
    STATE.store(state, Ordering::SeqCst);
}

/// Moves `from` → `to` only if the state is still `from` (the sender's first report).
pub fn advance(from: i32, to: i32) {
    let _ = STATE.compare_exchange(from, to, Ordering::SeqCst, Ordering::SeqCst);
}

pub fn get() -> i32 {
    STATE.load(Ordering::SeqCst)
}

pub fn why() -> String {
    WHY.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The plugin's state (the constants above).
#[unsafe(no_mangle)]
pub extern "C" fn ddptop_nccl_profiler_state() -> c_int {
    get()
}

/// Copies the reason for the latest `RECONNECTING` or `OFF` (UTF-8, NUL-terminated, cut to
/// `len - 1` bytes) into `buf`; returns the reason's full length in bytes.
///
/// # Safety
/// `buf` NULL or writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ddptop_nccl_profiler_why(buf: *mut c_char, len: usize) -> usize {
    let w = why();
    if !buf.is_null() && len > 0 {
        let n = w.len().min(len - 1);
        // SAFETY: the caller's buffer of `len` bytes; n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(w.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
    }
    w.len()
}
