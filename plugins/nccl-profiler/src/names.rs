//! NCCL's names for functions, data types, algorithms and protocols, as one-byte codes: the hot
//! path compares a short C string against a fixed table (no allocation) and stores the code; the
//! sender thread turns codes back into the protocol's names.

use std::ffi::{CStr, c_char};

/// Every function NCCL's `ncclFuncToString` names (its exact spelling: `AlltoAll`, not
/// `AllToAll`), as ddptop's protocol names it. `Send` and `Recv` come as `P2p` events, the rest as
/// `Coll` events; the signal functions are NCCL 2.28's one-sided operations. A new name NCCL adds
/// is reported as `other` until it is listed here. Codes are indices: append, never reorder.
pub const FUNCS: [(&str, &str); 15] = [
    ("", "other"),
    ("AllReduce", "all_reduce"),
    ("Broadcast", "broadcast"),
    ("Reduce", "reduce"),
    ("AllGather", "all_gather"),
    ("ReduceScatter", "reduce_scatter"),
    ("SendRecv", "send_recv"),
    ("Send", "send"),
    ("Recv", "recv"),
    ("AlltoAll", "all_to_all"),
    ("Gather", "gather"),
    ("Scatter", "scatter"),
    ("PutSignal", "put_signal"),
    ("Signal", "signal"),
    ("WaitSignal", "wait_signal"),
];

/// Data types: NCCL's name, ddptop's name, bytes per element.
pub const DTYPES: [(&str, &str, u64); 13] = [
    ("", "other", 0),
    ("ncclInt8", "int8", 1),
    ("ncclUint8", "uint8", 1),
    ("ncclInt32", "int32", 4),
    ("ncclUint32", "uint32", 4),
    ("ncclInt64", "int64", 8),
    ("ncclUint64", "uint64", 8),
    ("ncclFloat16", "float16", 2),
    ("ncclFloat32", "float32", 4),
    ("ncclFloat64", "float64", 8),
    ("ncclBfloat16", "bfloat16", 2),
    ("ncclFloat8e4m3", "float8_e4m3", 1),
    ("ncclFloat8e5m2", "float8_e5m2", 1),
];

/// Algorithms; NCCL versions spell them `RING` or `Ring`, `NVLS_TREE` or `NVLSTree`, so the
/// match ignores case and underscores.
pub const ALGOS: [(&str, &str); 8] = [
    ("", "other"),
    ("tree", "tree"),
    ("ring", "ring"),
    ("collnetdirect", "collnet_direct"),
    ("collnetchain", "collnet_chain"),
    ("nvls", "nvls"),
    ("nvlstree", "nvls_tree"),
    ("pat", "pat"),
];

pub const PROTOS: [(&str, &str); 4] = [
    ("", "other"),
    ("ll", "ll"),
    ("ll128", "ll128"),
    ("simple", "simple"),
];

/// The bytes of a C string, at most 32 (longer ones match nothing); empty for NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn bytes<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        return &[];
    }
    // SAFETY: the caller's promise.
    let b = unsafe { CStr::from_ptr(p) }.to_bytes();
    if b.len() > 32 { &[] } else { b }
}

/// # Safety
/// As [`bytes`].
pub unsafe fn func_code(p: *const c_char) -> u8 {
    let b = unsafe { bytes(p) };
    FUNCS
        .iter()
        .skip(1)
        .position(|(n, _)| n.as_bytes() == b)
        .map_or(0, |i| i as u8 + 1)
}

/// # Safety
/// As [`bytes`].
pub unsafe fn dtype_code(p: *const c_char) -> u8 {
    let b = unsafe { bytes(p) };
    DTYPES
        .iter()
        .skip(1)
        .position(|(n, _, _)| n.as_bytes() == b)
        .map_or(0, |i| i as u8 + 1)
}

/// Case- and underscore-blind comparison of `b` with a lower-case name.
fn loose_eq(b: &[u8], name: &str) -> bool {
    let mut it = b.iter().filter(|c| **c != b'_').map(u8::to_ascii_lowercase);
    name.bytes().all(|c| it.next() == Some(c)) && it.next().is_none()
}

/// # Safety
/// As [`bytes`].
pub unsafe fn algo_code(p: *const c_char) -> u8 {
    let b = unsafe { bytes(p) };
    ALGOS
        .iter()
        .skip(1)
        .position(|(n, _)| loose_eq(b, n))
        .map_or(0, |i| i as u8 + 1)
}

/// # Safety
/// As [`bytes`].
pub unsafe fn proto_code(p: *const c_char) -> u8 {
    let b = unsafe { bytes(p) };
    PROTOS
        .iter()
        .skip(1)
        .position(|(n, _)| loose_eq(b, n))
        .map_or(0, |i| i as u8 + 1)
}

pub fn func_name(c: u8) -> &'static str {
    FUNCS.get(c as usize).map_or("other", |f| f.1)
}
pub fn dtype_name(c: u8) -> &'static str {
    DTYPES.get(c as usize).map_or("other", |d| d.1)
}
/// Bytes per element; 0 for an unknown type (bytes are then unknown).
pub fn dtype_size(c: u8) -> u64 {
    DTYPES.get(c as usize).map_or(0, |d| d.2)
}
pub fn algo_name(c: u8) -> &'static str {
    ALGOS.get(c as usize).map_or("other", |a| a.1)
}
pub fn proto_name(c: u8) -> &'static str {
    PROTOS.get(c as usize).map_or("other", |p| p.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_spellings_map_to_ddptop_names() {
        unsafe {
            assert_eq!(func_name(func_code(c"AllReduce".as_ptr())), "all_reduce");
            assert_eq!(
                func_name(func_code(c"ReduceScatter".as_ptr())),
                "reduce_scatter"
            );
            assert_eq!(func_name(func_code(c"Foo".as_ptr())), "other");
            // NCCL's own spellings (ncclFuncToString), each to its own name.
            for (nccl, ours) in [
                (c"AlltoAll", "all_to_all"),
                (c"Gather", "gather"),
                (c"Scatter", "scatter"),
                (c"Send", "send"),
                (c"Recv", "recv"),
                (c"SendRecv", "send_recv"),
                (c"PutSignal", "put_signal"),
                (c"Signal", "signal"),
                (c"WaitSignal", "wait_signal"),
            ] {
                assert_eq!(func_name(func_code(nccl.as_ptr())), ours, "{nccl:?}");
            }
            assert_eq!(func_name(func_code(c"AllToAll".as_ptr())), "other");
            // ddptop's fixture of every kind (tests/fixtures/nccl/all_kinds_k2.jsonl, driving
            // its collectives view) names every function this table maps.
            let fixture = include_str!("../../../tests/fixtures/nccl/all_kinds_k2.jsonl");
            for (_, ours) in FUNCS.iter().skip(1) {
                assert!(fixture.contains(&format!(r#""func":"{ours}""#)), "{ours}");
            }
            assert_eq!(func_name(func_code(std::ptr::null())), "other");
            let f32 = dtype_code(c"ncclFloat32".as_ptr());
            assert_eq!((dtype_name(f32), dtype_size(f32)), ("float32", 4));
            assert_eq!(dtype_size(dtype_code(c"ncclBfloat16".as_ptr())), 2);
            assert_eq!(algo_name(algo_code(c"RING".as_ptr())), "ring");
            assert_eq!(algo_name(algo_code(c"NVLS_TREE".as_ptr())), "nvls_tree");
            assert_eq!(algo_name(algo_code(c"NVLSTree".as_ptr())), "nvls_tree");
            assert_eq!(algo_name(algo_code(c"NVLS".as_ptr())), "nvls");
            assert_eq!(proto_name(proto_code(c"LL128".as_ptr())), "ll128");
            assert_eq!(proto_name(proto_code(c"Simple".as_ptr())), "simple");
            assert_eq!(proto_name(proto_code(c"LL".as_ptr())), "ll");
        }
    }
}
