//! Application state: what the screen and the headless table show, and how events change it.
//!
//! `state` holds the data, `view` what the user is looking at, `reduce` applies engine events to
//! the data, `gpus` folds the GPU sampler's updates into it, `action` is the one enum behind keys,
//! help and scripting, `summary` derives the figures (aggregates, speedups, probe medians).

pub mod action;
pub mod coll_ingest;
pub mod coll_store;
pub mod collectives;
pub mod comm_source;
pub mod deficits;
pub mod diagnose;
pub mod equality;
pub mod gpu_evidence;
pub mod gpus;
pub mod nccl_timeline;
pub mod node_gpus;
pub mod nodes;
pub mod predict;
pub mod progress;
pub mod reduce;
pub mod run_files;
pub mod state;
pub mod straggler;
pub mod summary;
pub mod target;
pub mod tune;
pub mod view;

pub use action::Action;
pub use state::*;
pub use view::{Freeze, FrozenStep, View};
