//! ddptop: a terminal dashboard for multi-GPU data-parallel training.
//!
//! Layers (see DESIGN.md): `protocol` (wire format) → `supervisor` (processes, socket, watchdog)
//! → `engine` (one loop that owns `app::State`) → `ui` (pure drawing) / `headless` (tables, JSON).
//! `sim` is the built-in simulated worker, `costmodel` the α-β model it and the screens use,
//! `store` the SQLite run database, `gpu` the NVML/sysinfo sampler.

pub mod app;
pub mod cli;
pub mod config;
pub mod costmodel;
pub mod detect;
pub mod engine;
pub mod gpu;
pub mod headless;
pub mod paths;
pub mod protocol;
pub mod sim;
pub mod store;
pub mod supervisor;
pub mod tui;
pub mod ui;
pub mod util;
