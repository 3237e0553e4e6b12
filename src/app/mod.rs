//! Application state: what the screen and the headless table show, and how events change it.
//!
//! `state` holds plain data, `reduce` applies engine events to it, `action` is the one enum behind
//! keys, help and scripting, `summary` derives the figures (aggregates, speedups, probe medians).

pub mod action;
pub mod reduce;
pub mod state;
pub mod summary;

pub use action::Action;
pub use state::*;
