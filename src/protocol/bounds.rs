//! What a bad message is: `ProtocolError`, the plausible upper bound of each kind of field
//! (`limits`) and `plausible`. Apart from `validate` (which parses whole messages) so that the
//! message types that check themselves (`nccl`) need not import the parser that imports them.

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtocolError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a JSON object")]
    NotObject,
    #[error("missing or unsupported protocol version (want v=1)")]
    BadVersion,
    #[error("unknown or missing message type")]
    UnknownType,
    #[error("bad fields for `{kind}`: {detail}")]
    BadFields { kind: String, detail: String },
    #[error("field `{0}` must be a finite number >= 0")]
    BadNumber(&'static str),
    #[error("rank {rank} is not below world_size {world_size}")]
    RankOutOfRange { rank: u32, world_size: u32 },
    #[error("world_size must be at least 1")]
    ZeroWorld,
    #[error("devices must be at least 1")]
    ZeroDevices,
    #[error("step.every must be at least 1")]
    ZeroEvery,
    #[error("field `{0}` must be a finite number")]
    NotFinite(&'static str),
    #[error("hlo.ops.{0}: largest_elems is above total_elems")]
    LargestAboveTotal(&'static str),
    #[error("field `{0}` is above its plausible maximum {1:e}")]
    Implausible(&'static str, f64),
    #[error("field `{0}` has too many or too long entries")]
    TooMany(&'static str),
    #[error("field `{0}` must not be empty")]
    Empty(&'static str),
}

/// Plausible upper bounds per kind of field. Finite is not enough: a step time of 1.7e308 ms
/// passed as finite, printed as `inf ms (NaN%)`, and sent the report's plotting library into
/// a 10-minute loop on every later report. Anything above these is a broken or hostile worker.
pub mod limits {
    /// Timestamps `t`, seconds (Unix time up to the year 2286, or seconds since start).
    pub const T_S: f64 = 1e10;
    /// One step's phase times, bucket and collective offsets, probe times: 1e8 ms ≈ 28 h.
    pub const MS: f64 = 1e8;
    /// An epoch's wall time, seconds (≈ 116 days).
    pub const SECONDS: f64 = 1e7;
    /// Samples per second, one rank or the sum.
    pub const SAMPLES_PER_S: f64 = 1e10;
    /// A benchmark iteration, microseconds (≈ 28 h).
    pub const US: f64 = 1e11;
    /// Bus or algorithm bandwidth, GB/s (NVLink is ~1e3).
    pub const GBS: f64 = 1e6;
    /// Values compared or reported as they are (loss, check operands): |x| at most this.
    pub const VALUE: f64 = 1e30;
    /// Step, sample and element counts.
    pub const COUNT: u64 = 1 << 50;
    /// Byte sizes (1 PiB).
    pub const BYTES: u64 = 1 << 50;
}

/// `x` when it is finite, ≥ 0 and at most `max`: how stored figures from before these bounds
/// (or from any other source) are read, so one bad value cannot poison a report.
pub fn plausible(x: f64, max: f64) -> Option<f64> {
    (x.is_finite() && (0.0..=max).contains(&x)).then_some(x)
}
