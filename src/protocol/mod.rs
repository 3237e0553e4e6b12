//! Protocol v1: the JSON Lines messages between workers and ddptop (see docs/protocol.md).
//!
//! `messages` holds the serde types (a `result` in `result`, the setting words in `settings`),
//! `validate` the rules serde cannot express (ranges, finiteness), `framing` the newline framing
//! with its hard line limit.

pub mod agent;
pub mod bounds;
pub mod framing;
pub mod messages;
pub mod nccl;
pub mod result;
pub mod settings;
pub mod validate;

pub use bounds::ProtocolError;
pub use framing::{LineReader, LineSplitter, MAX_LINE_BYTES, ReadOutcome};
pub use messages::*;
pub use nccl::{NcclBatch, NcclColl, NcclFuncSum, NcclHello, NcclInflight};
pub use result::{
    AttachResult, DdpArg, EXPERIMENT_NAMES, FamilyResult, JaxResult, ResultMsg, ShardedResult,
    TorchResult,
};
pub use settings::{MatmulPrecision, Optimizer, Strategy};
pub use validate::{parse_control, parse_worker};

/// The only protocol version this build speaks.
pub const VERSION: u32 = 1;
