//! ddptop: a terminal dashboard for multi-GPU data-parallel training.
//!
//! Layers, bottom up (docs/architecture.md draws them): `run` (what a run is: spec, NCCL
//! settings, curve key, record) and `protocol` (wire format) → `supervisor` (processes, socket,
//! watchdog, logs), `store` (SQLite), `gpu` (NVML sampler), `costmodel`, `sim` (simulated worker)
//! → `app` (state, view, reducers, actions) → `engine` (one loop owning the state) → `plan` (what
//! to launch) → `ui` (pure drawing) and the front ends `tui` (dashboard) and `headless`.

pub mod agent;
pub mod app;
pub mod bench;
pub mod cli;
pub mod config;
pub mod costmodel;
pub mod detect;
pub mod engine;
pub mod gpu;
pub mod headless;
pub mod keys;
pub mod loadgen;
pub mod paths;
pub mod plan;
pub mod protocol;
pub mod query;
pub mod report;
pub mod run;
pub mod selfcost;
pub mod sim;
pub mod store;
pub mod supervisor;
pub mod tui;
pub mod tune;
pub mod ui;
pub mod util;
