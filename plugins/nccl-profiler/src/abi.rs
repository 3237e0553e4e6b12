//! Our own `repr(C)` mirror of NCCL's profiler plugin interface, versions 5 (NCCL ≥ 2.28.3) and 4
//! (NCCL 2.26–2.28.2), written from NVIDIA's published headers (`ext-profiler/example/nccl/
//! profiler_v5.h`, `profiler_v4.h`, `profiler.h`). Only what this plugin reads is typed; every
//! other union member is covered by `_pad`, so the layout (size and offsets) matches the C one.
//!
//! v4 and v5 share the layout of the descriptor except the width of `type` (`uint8_t` in v4,
//! `uint64_t` in v5; both sit at offset 0 and are followed by an 8-byte aligned pointer), and
//! v5's `coll` adds a trailing `parentGroup` pointer. The state arguments are the same.

use std::ffi::{c_char, c_int, c_ulong, c_void};

/// `ncclResult_t`: this plugin only ever returns `ncclSuccess`.
pub type NcclResult = c_int;
pub const NCCL_SUCCESS: NcclResult = 0;

/// `ncclDebugLogger_t`: NCCL's printf-like logger handed to `init`.
pub type NcclDebugLogger = Option<
    unsafe extern "C" fn(
        level: c_int,
        flags: c_ulong,
        file: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    ),
>;
/// `NCCL_LOG_INFO`, and the `NCCL_INIT` subsystem flag, for the logger.
pub const NCCL_LOG_INFO: c_int = 3;
pub const NCCL_INIT: c_ulong = 1;

/// Event types (`eActivationMask` bits and `eDescr->type`), from `profiler.h`.
pub mod event {
    pub const GROUP: u64 = 1 << 0;
    pub const COLL: u64 = 1 << 1;
    pub const P2P: u64 = 1 << 2;
    pub const PROXY_OP: u64 = 1 << 3;
    pub const PROXY_STEP: u64 = 1 << 4;
    pub const PROXY_CTRL: u64 = 1 << 5;
    pub const KERNEL_CH: u64 = 1 << 6;
    pub const NET_PLUGIN: u64 = 1 << 7;
    pub const GROUP_API: u64 = 1 << 8;
    pub const COLL_API: u64 = 1 << 9;
    pub const P2P_API: u64 = 1 << 10;
    pub const KERNEL_LAUNCH: u64 = 1 << 11;
}

/// `ncclProfilerEventState_t` values this plugin reacts to (the enum is a C `int`).
pub mod state {
    /// `ncclProfilerKernelChStop`: the channel's GPU stop timestamp is in `kernelCh.pTimer`.
    pub const KERNEL_CH_STOP: i32 = 22;
}

/// The `coll` member of the descriptor union (v4 layout; v5 appends `parent_group`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollDescr {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    /// v5 only ("for backward compatibility with v4"); never read.
    pub parent_group: *mut c_void,
}

/// The `p2p` member (v4 layout; v5 appends `parent_group`): a `Send` or `Recv` NCCL runs as its
/// own event type (`ncclProfileP2p`), without a sequence number.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pDescr {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    /// v5 only; never read.
    pub parent_group: *mut c_void,
}

/// The `kernelCh` member: a channel of a collective's kernel started, at GPU time `p_timer`
/// (ns of the GPU's globaltimer).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChDescr {
    pub channel_id: u8,
    pub p_timer: u64,
}

/// The descriptor union. Its largest C member is `coll` (88 bytes in v5, 80 in v4); `_pad` keeps
/// the size that of v5 whichever members are typed here. Fields are always read one at a time
/// through the pointer NCCL passes, never by copying the whole descriptor (a v4 one is 8 bytes
/// shorter).
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnion {
    pub coll: CollDescr,
    pub p2p: P2pDescr,
    pub kernel_ch: KernelChDescr,
    pub _pad: [u64; 11],
}

/// `ncclProfilerEventDescr_v5_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV5 {
    pub kind: u64,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnion,
}

/// `ncclProfilerEventDescr_v4_t`: the same but a one-byte `type`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV4 {
    pub kind: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnion,
}

/// `ncclProfilerEventStateArgs_v5_t` (and v4): a union whose `kernelCh.pTimer` is the channel's
/// GPU stop time for `KERNEL_CH_STOP`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union EventStateArgs {
    pub trans_size: usize,
    pub kernel_ch_p_timer: u64,
    pub _pad: [u64; 1],
}

pub type InitV5 = unsafe extern "C" fn(
    context: *mut *mut c_void,
    comm_id: u64,
    e_activation_mask: *mut c_int,
    comm_name: *const c_char,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: NcclDebugLogger,
) -> NcclResult;
pub type InitV4 = unsafe extern "C" fn(
    context: *mut *mut c_void,
    e_activation_mask: *mut c_int,
    comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: NcclDebugLogger,
) -> NcclResult;
pub type StartEvent<D> = unsafe extern "C" fn(
    context: *mut c_void,
    e_handle: *mut *mut c_void,
    e_descr: *mut D,
) -> NcclResult;
pub type StopEvent = unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult;
pub type RecordEventState = unsafe extern "C" fn(
    e_handle: *mut c_void,
    e_state: c_int,
    e_state_args: *mut EventStateArgs,
) -> NcclResult;
pub type Finalize = unsafe extern "C" fn(context: *mut c_void) -> NcclResult;

/// `ncclProfiler_v5_t`: the exported symbol's type.
#[repr(C)]
pub struct ProfilerV5 {
    pub name: *const c_char,
    pub init: InitV5,
    pub start_event: StartEvent<EventDescrV5>,
    pub stop_event: StopEvent,
    pub record_event_state: RecordEventState,
    pub finalize: Finalize,
}

/// `ncclProfiler_v4_t`.
#[repr(C)]
pub struct ProfilerV4 {
    pub name: *const c_char,
    pub init: InitV4,
    pub start_event: StartEvent<EventDescrV4>,
    pub stop_event: StopEvent,
    pub record_event_state: RecordEventState,
    pub finalize: Finalize,
}

// The exported tables hold only function pointers and a pointer to a static string.
unsafe impl Sync for ProfilerV5 {}
unsafe impl Sync for ProfilerV4 {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Offsets and sizes as a C compiler lays out profiler_v5.h / v4.h on x86-64 and aarch64
    /// Linux (LP64): type 0, parentObj 8, rank 16, union 24; coll: seqNumber 0, func 8,
    /// sendBuff 16, recvBuff 24, count 32, root 40, datatype 48, nChannels 56, nWarps 57, algo
    /// 64, proto 72, parentGroup 80 (88 bytes, the largest member: 112 in all).
    #[test]
    fn the_mirror_has_the_c_layout() {
        assert_eq!(offset_of!(EventDescrV5, parent_obj), 8);
        assert_eq!(offset_of!(EventDescrV5, rank), 16);
        assert_eq!(offset_of!(EventDescrV5, u), 24);
        assert_eq!(offset_of!(EventDescrV4, u), 24);
        assert_eq!(offset_of!(CollDescr, func), 8);
        assert_eq!(offset_of!(CollDescr, count), 32);
        assert_eq!(offset_of!(CollDescr, root), 40);
        assert_eq!(offset_of!(CollDescr, datatype), 48);
        assert_eq!(offset_of!(CollDescr, n_channels), 56);
        assert_eq!(offset_of!(CollDescr, n_warps), 57);
        assert_eq!(offset_of!(CollDescr, algo), 64);
        assert_eq!(offset_of!(CollDescr, proto), 72);
        assert_eq!(offset_of!(CollDescr, parent_group), 80);
        assert_eq!(size_of::<CollDescr>(), 88);
        // p2p: func 0, buff 8, datatype 16, count 24, peer 32, nChannels 36, parentGroup 40.
        assert_eq!(offset_of!(P2pDescr, datatype), 16);
        assert_eq!(offset_of!(P2pDescr, count), 24);
        assert_eq!(offset_of!(P2pDescr, peer), 32);
        assert_eq!(offset_of!(P2pDescr, n_channels), 36);
        assert_eq!(offset_of!(P2pDescr, parent_group), 40);
        assert_eq!(size_of::<P2pDescr>(), 48);
        assert_eq!(offset_of!(KernelChDescr, p_timer), 8);
        assert_eq!(size_of::<DescrUnion>(), 88);
        assert_eq!(size_of::<EventDescrV5>(), 112);
        assert_eq!(size_of::<EventStateArgs>(), 8);
        assert_eq!(size_of::<ProfilerV5>(), 48);
    }
}
