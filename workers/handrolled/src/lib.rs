//! The hand-rolled data-parallel loop on tch (issue 12): k replicas in one process, gradients
//! all-reduced by tensor copies after the whole backward, reported to ddptop over protocol v1.

pub mod client;
pub mod data;
pub mod fault;
pub mod model;
pub mod reduce;
pub mod replica;
pub mod train;
