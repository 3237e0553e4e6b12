//! The experiment a run belongs to, with the settings only that family has: the one place a
//! family's data lives (`RunSpec::family`, the curve key, the store's `family_json` column).
//! `Experiment` is its name alone (the command line's value, the protocol's and the store's
//! `experiment` column): `Family::experiment` maps one to the other.

use super::handrolled::HandRolled;
use super::spec::{AttachTarget, Experiment, JaxSharding, OptimizerName, TorchStrategy};
use serde::{Deserialize, Serialize};

/// A run's experiment and the settings that belong to it alone. Stored as JSON
/// (`{"experiment":"fsdp","strategy":"ddp","optimizer":"adam"}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "experiment", rename_all = "snake_case")]
pub enum Family {
    Weak,
    Strong,
    Probe,
    Allreduce,
    /// The parameters' layout on the mesh.
    Jax {
        sharding: JaxSharding,
    },
    /// FSDP2 or DDP (two curves), and the optimizer (Adam by default: memory is the point).
    Fsdp {
        strategy: TorchStrategy,
        optimizer: OptimizerName,
    },
    /// The user's script; `None` only in a plan made without one, which `plan::sweep` refuses.
    Attach {
        target: Option<AttachTarget>,
    },
    /// The tch loop's dispatch and reduce.
    Handrolled {
        hand: HandRolled,
    },
}

/// An experiment with its family's defaults (`Family::of`).
impl From<Experiment> for Family {
    fn from(e: Experiment) -> Family {
        Family::of(e)
    }
}

impl Family {
    /// `experiment` with its default settings (attach: no script yet).
    pub fn of(experiment: Experiment) -> Family {
        match experiment {
            Experiment::Weak => Family::Weak,
            Experiment::Strong => Family::Strong,
            Experiment::Probe => Family::Probe,
            Experiment::Allreduce => Family::Allreduce,
            Experiment::Jax => Family::Jax {
                sharding: JaxSharding::default(),
            },
            Experiment::Fsdp => Family::Fsdp {
                strategy: TorchStrategy::default(),
                optimizer: OptimizerName::Adam,
            },
            Experiment::Attach => Family::Attach { target: None },
            Experiment::Handrolled => Family::Handrolled {
                hand: HandRolled::default(),
            },
        }
    }

    /// The family's name.
    pub fn experiment(&self) -> Experiment {
        match self {
            Family::Weak => Experiment::Weak,
            Family::Strong => Experiment::Strong,
            Family::Probe => Experiment::Probe,
            Family::Allreduce => Experiment::Allreduce,
            Family::Jax { .. } => Experiment::Jax,
            Family::Fsdp { .. } => Experiment::Fsdp,
            Family::Attach { .. } => Experiment::Attach,
            Family::Handrolled { .. } => Experiment::Handrolled,
        }
    }

    /// The optimizer the run trains with: fsdp's setting, the book's SGD elsewhere.
    pub fn optimizer(&self) -> OptimizerName {
        match self {
            Family::Fsdp { optimizer, .. } => *optimizer,
            _ => OptimizerName::Sgd,
        }
    }

    /// fsdp's strategy (`None` for every other family).
    pub fn strategy(&self) -> Option<TorchStrategy> {
        match self {
            Family::Fsdp { strategy, .. } => Some(*strategy),
            _ => None,
        }
    }

    /// jax's parameter layout (`Data`, unused, for every other family).
    pub fn sharding(&self) -> JaxSharding {
        match self {
            Family::Jax { sharding } => *sharding,
            _ => JaxSharding::default(),
        }
    }

    /// The tch loop's variant (`single+star`, unused, for every other family).
    pub fn hand(&self) -> HandRolled {
        match self {
            Family::Handrolled { hand } => *hand,
            _ => HandRolled::default(),
        }
    }

    /// The same fsdp run with the other `strategy` (the Memory pane's and the Scaling pane's
    /// comparison); every other family unchanged.
    pub fn with_strategy(&self, strategy: TorchStrategy) -> Family {
        match self {
            Family::Fsdp { optimizer, .. } => Family::Fsdp {
                strategy,
                optimizer: *optimizer,
            },
            f => f.clone(),
        }
    }

    /// The family's own settings as its JSON fields, for the run document (docs/report.md):
    /// fsdp `strategy`, `optimizer`; jax `sharding`; handrolled `hand` (`single+star`); attach
    /// `script`, `args`, `cwd`. Empty for the plain families.
    pub fn settings(&self) -> serde_json::Map<String, serde_json::Value> {
        use serde_json::json;
        let pairs = match self {
            Family::Jax { sharding } => vec![("sharding", json!(sharding))],
            Family::Fsdp {
                strategy,
                optimizer,
            } => vec![
                ("strategy", json!(strategy)),
                ("optimizer", json!(optimizer)),
            ],
            Family::Handrolled { hand } => vec![("hand", json!(hand.label()))],
            Family::Attach { target: Some(t) } => vec![
                ("script", json!(t.script)),
                ("args", json!(t.args)),
                ("cwd", json!(t.cwd)),
            ],
            _ => Vec::new(),
        };
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// An attached run's script.
    pub fn attach(&self) -> Option<&AttachTarget> {
        match self {
            Family::Attach { target } => target.as_ref(),
            _ => None,
        }
    }

    /// What of the family splits a curve, as the curve key holds it: an attached script's
    /// working folder is not part of it (the same command line from two folders is one curve).
    pub fn for_curve(&self) -> Family {
        match self {
            Family::Attach { target: Some(t) } => Family::Attach {
                target: Some(AttachTarget {
                    cwd: Default::default(),
                    ..t.clone()
                }),
            },
            f => f.clone(),
        }
    }

    /// What a curve's title adds for the family's settings (`fsdp sharding`, `ddp`,
    /// `threads+ring`); `None` for the plain families.
    pub fn title_part(&self) -> Option<String> {
        match self {
            Family::Jax { sharding } => Some(format!("{} sharding", sharding.as_str())),
            Family::Fsdp { strategy, .. } => Some(strategy.as_str().to_string()),
            Family::Handrolled { hand } => Some(hand.label()),
            _ => None,
        }
    }

    /// fsdp's optimizer when it is not the family's default Adam (a title's last word).
    pub fn optimizer_part(&self) -> Option<String> {
        Some(self.optimizer())
            .filter(|o| matches!(self, Family::Fsdp { .. }) && *o != OptimizerName::Adam)
            .map(|o| o.as_str().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_experiment_has_a_family_and_round_trips_through_json() {
        for e in Experiment::ALL {
            let f = Family::of(e);
            assert_eq!(f.experiment(), e);
            let json = serde_json::to_string(&f).unwrap();
            assert!(
                json.contains(&format!("\"experiment\":\"{}\"", e.as_str())),
                "{json}"
            );
            assert_eq!(serde_json::from_str::<Family>(&json).unwrap(), f);
        }
        let f = Family::Fsdp {
            strategy: TorchStrategy::Ddp,
            optimizer: OptimizerName::Sgd,
        };
        assert_eq!(
            serde_json::to_string(&f).unwrap(),
            r#"{"experiment":"fsdp","strategy":"ddp","optimizer":"sgd"}"#
        );
        assert_eq!(f.title_part().as_deref(), Some("ddp"));
        assert_eq!(f.optimizer_part().as_deref(), Some("sgd"));
        assert_eq!(f.optimizer(), OptimizerName::Sgd);
        assert_eq!(Family::Weak.optimizer(), OptimizerName::Sgd);
        assert_eq!(
            serde_json::Value::Object(f.settings()),
            serde_json::json!({"strategy": "ddp", "optimizer": "sgd"})
        );
        assert!(Family::Weak.settings().is_empty());
    }
}
