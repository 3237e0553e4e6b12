//! The words workers use for the settings they ran with: shared by several messages (`memory`
//! says its `strategy`, `result` its optimizer, strategy and matmul precision).

use serde::{Deserialize, Serialize};

/// How a rank's parameters, gradients and optimizer state are laid out (`memory.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    Ddp,
    /// DDP with `ZeroRedundancyOptimizer`: the optimizer state sharded over the ranks.
    Zero1,
    Fsdp,
    JaxData,
    JaxFsdp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatmulPrecision {
    Highest,
    High,
    Medium,
}

impl MatmulPrecision {
    pub fn as_str(self) -> &'static str {
        match self {
            MatmulPrecision::Highest => "highest",
            MatmulPrecision::High => "high",
            MatmulPrecision::Medium => "medium",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    Sgd,
    Adam,
}
