//! A fault to inject into a run (`--inject`): what the simulated worker does, and what the
//! Python workers and the attach bootstrap read from `DDPTOP_INJECT`. Written as text
//! (`hang:5`, `slow:1:1.5`) on the command line, in the store and in the workers' argv; `Display`
//! writes what `FromStr` reads.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// One fault; STEP counts from 1 (a step is an optimizer step).
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The last rank exits with code 3 at STEP.
    Crash(u64),
    /// The last rank raises an exception at STEP (real workers: a Python exception; sim: the
    /// rank reports the error and stays blocked, its peers wait in the all-reduce, as on NCCL).
    Raise(u64),
    /// Every rank stops making progress at STEP; heartbeats continue.
    Hang(u64),
    /// The last rank stops at STEP and sends nothing more, heartbeats included.
    Silent(u64),
    /// Rank 0 sends N bad lines on its own connection (`garbage` alone: 4) and two intruder
    /// connections.
    Garbage(Option<u64>),
    /// Every rank sends its result and bye, then blocks instead of exiting (a teardown hang, as
    /// in NCCL's `destroy_process_group`): ddptop has every bye but the launcher never exits.
    /// Written `teardown:0` (the step is ignored, as by the Python workers).
    Teardown,
    /// The last rank stops at STEP and nothing of it runs any more: no heartbeat, no reader,
    /// no dead-man switch (Python: a C call holding the GIL). Only a signal ends it.
    Frozen(u64),
    /// Every rank's first step first burns SECONDS of CPU (wall time, whatever the speed-up), as
    /// cudnn.benchmark's autotuning or a compile does: slow, busy, healthy.
    SlowStart(u64),
    /// RANK becomes FACTOR times slower: it sleeps (FACTOR - 1) x its own step time in every
    /// step (a straggler). The other ranks wait for it at the collectives, as DDP makes them.
    /// Written `slow:RANK:FACTOR[:PHASE][@STEP]`: from step STEP on (`None`: from the first),
    /// inside the data wait (`data`, the default: a slow input pipeline) or at the end of the
    /// forward, after DDP's buffer broadcast (`compute`: a slower GPU).
    Slow {
        rank: u32,
        factor: f64,
        from: Option<u64>,
        phase: Option<SlowPhase>,
    },
    /// RANK stops its loop after STEPS optimizer steps, as a rank given fewer batches than its
    /// peers (a sampler without padding, per-rank filtering): it finishes cleanly and the others
    /// wait (NCCL) or fail (gloo) in the collective it never joins.
    Uneven { rank: u32, steps: u64 },
    /// The model gets a submodule named LAYER that its forward never calls (defined in
    /// `__init__`, never used): DDP without `find_unused_parameters` fails at the second step.
    Unused(String),
    /// RANK says hello, then never calls `init_process_group` (as a rank waiting for a file
    /// its peers write only after init): its peers wait in the rendezvous.
    NoJoin(u32),
    /// As step STEP begins, the last rank all-reduces one extra value (a metric reduced on one
    /// rank only): it meets its peers' gradient all-reduce, of another size.
    Mismatch(u64),
    /// Every rank's bucket all-reduces complete MS ms late (ddptop's comm hook waits that long
    /// once each is done), as over a slow interconnect: the exposed communication grows until
    /// k ranks do fewer samples/s than one (`slower_than_one_gpu`). ddptop's own loop only.
    SlowLink(u64),
}

/// Where a `slow` fault puts its sleep. Its name (`data`, `compute`) is the fault's spelling.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString, strum::VariantArray,
)]
#[strum(serialize_all = "lowercase")]
pub enum SlowPhase {
    /// In the data wait, before the batch is taken: a slow input pipeline.
    Data,
    /// In the forward+backward: a slower device (ddptop's own loop and the sim only).
    Compute,
}

impl SlowPhase {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// `slow:RANK:FACTOR[:PHASE][@STEP]`'s argument (after `slow:`).
fn parse_slow(s: &str, arg: &str) -> Result<Fault, String> {
    let bad = |why: &str| {
        format!(
            "fault `{s}`: expected slow:RANK:FACTOR[:PHASE][@STEP], FACTOR above 1 (1.5: 1.5x slower), PHASE data or compute, STEP the first slowed step (from 1){why}"
        )
    };
    let (body, from) = match arg.split_once('@') {
        Some((body, step)) => {
            let step = step
                .parse::<u64>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| bad(""))?;
            (body, Some(step))
        }
        None => (arg, None),
    };
    let mut parts = body.split(':');
    let (Some(rank), Some(factor)) = (parts.next(), parts.next()) else {
        return Err(bad(""));
    };
    let phase = match parts.next() {
        None => None,
        Some(p) => Some(
            p.parse::<SlowPhase>()
                .map_err(|_| bad(&format!(": `{p}` is no phase")))?,
        ),
    };
    if parts.next().is_some() {
        return Err(bad(""));
    }
    let rank = rank.parse::<u32>().map_err(|_| bad(""))?;
    let factor = factor.parse::<f64>().map_err(|_| bad(""))?;
    // Up to 100x: a bigger factor is a hang, which has its own fault.
    if !(factor > 1.0 && factor <= 100.0) {
        return Err(bad(""));
    }
    Ok(Fault::Slow {
        rank,
        factor,
        from,
        phase,
    })
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Fault, String> {
        let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
        let step = || {
            arg.parse::<u64>()
                .map_err(|_| format!("fault `{s}`: expected {kind}:STEP with STEP a number"))
        };
        match kind {
            "crash" => Ok(Fault::Crash(step()?)),
            "raise" => Ok(Fault::Raise(step()?)),
            "hang" => Ok(Fault::Hang(step()?)),
            "silent" => Ok(Fault::Silent(step()?)),
            "frozen" => Ok(Fault::Frozen(step()?)),
            "teardown" => {
                step()?;
                Ok(Fault::Teardown)
            }
            "slowstart" => arg.parse::<u64>().map(Fault::SlowStart).map_err(|_| {
                format!("fault `{s}`: expected slowstart:SECONDS with SECONDS a whole number")
            }),
            "slow" => parse_slow(s, arg),
            "uneven" => {
                let bad = || {
                    format!(
                        "fault `{s}`: expected uneven:RANK:STEPS (RANK stops after STEPS steps)"
                    )
                };
                let (rank, steps) = arg.split_once(':').ok_or_else(bad)?;
                let rank = rank.parse::<u32>().map_err(|_| bad())?;
                let steps = steps.parse::<u64>().map_err(|_| bad())?;
                Ok(Fault::Uneven { rank, steps })
            }
            "unused" => {
                let ok = !arg.is_empty()
                    && arg.len() <= 64
                    && arg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !arg.starts_with(|c: char| c.is_ascii_digit());
                if !ok {
                    return Err(format!(
                        "fault `{s}`: expected unused:LAYER, LAYER a Python identifier (the name of the layer the model defines and never uses)"
                    ));
                }
                Ok(Fault::Unused(arg.to_string()))
            }
            "nojoin" => arg.parse::<u32>().map(Fault::NoJoin).map_err(|_| {
                format!(
                    "fault `{s}`: expected nojoin:RANK (RANK never calls init_process_group)"
                )
            }),
            "mismatch" => arg
                .parse::<u64>()
                .ok()
                .filter(|n| *n >= 1)
                .map(Fault::Mismatch)
                .ok_or_else(|| {
                    format!(
                        "fault `{s}`: expected mismatch:STEP, STEP from 1 (the last rank issues an extra all-reduce as step STEP begins)"
                    )
                }),
            "slowlink" => arg
                .parse::<u64>()
                .ok()
                .filter(|n| (1..=60_000).contains(n))
                .map(Fault::SlowLink)
                .ok_or_else(|| {
                    format!(
                        "fault `{s}`: expected slowlink:MS, MS from 1 to 60000 (each bucket's all-reduce ends MS milliseconds late)"
                    )
                }),
            "garbage" if arg.is_empty() => Ok(Fault::Garbage(None)),
            "garbage" => Ok(Fault::Garbage(Some(step()?))),
            _ => Err(format!(
                "unknown fault `{s}`: use crash:STEP, raise:STEP, hang:STEP, silent:STEP, frozen:STEP, teardown:0, garbage[:LINES], slowstart:SECONDS, slow:RANK:FACTOR[:PHASE][@STEP], uneven:RANK:STEPS, unused:LAYER, nojoin:RANK, mismatch:STEP or slowlink:MS"
            )),
        }
    }
}

impl Fault {
    /// Lines of a garbage flood (`garbage` alone: 4).
    pub const GARBAGE_LINES: u64 = 4;

    /// Only the simulated worker can send garbage lines.
    pub fn sim_only(&self) -> bool {
        matches!(self, Fault::Garbage(_))
    }

    /// Faults only a real PyTorch worker can apply (the simulated worker has no model or data).
    pub fn torch_only(&self) -> bool {
        matches!(
            self,
            Fault::Uneven { .. }
                | Fault::Unused(_)
                | Fault::NoJoin(_)
                | Fault::Mismatch(_)
                | Fault::SlowLink(_)
        )
    }

    /// Where the fault cannot apply to an attached script: the bootstrap sleeps after each
    /// optimizer step of the unmodified script, which lands in the next step's data wait; it has
    /// no hold on the script's forward, so `slow:…:compute` is refused there.
    pub fn attach_refusal(&self) -> Option<String> {
        match self {
            Fault::Slow {
                phase: Some(SlowPhase::Compute),
                ..
            } => Some(format!(
                "fault `{self}`: under attach the bootstrap can only slow a rank between optimizer steps (its data wait), not inside your script's forward/backward: use `slow:RANK:FACTOR` or `slow:RANK:FACTOR:data` (with `@STEP` if wanted), or `ddptop run weak` for `:compute`"
            )),
            Fault::SlowLink(_) => Some(format!(
                "fault `{self}`: slows the all-reduces of ddptop's own training loop (its comm hook); an attached script's collectives are its own: use `ddptop run weak --inject {self}`, or attach a script whose all-reduce really outweighs its compute"
            )),
            _ => None,
        }
    }

    /// A fault that names a rank must name one of the run's: `slow:5:1.5` at k=2 would slow
    /// nobody, and the run would pass for a fault run that showed nothing.
    pub fn fits_k(&self, k: u32) -> Result<(), String> {
        match *self {
            Fault::Slow { rank, .. } | Fault::Uneven { rank, .. } if rank >= k => Err(format!(
                "fault `{self}` names rank {rank}, but a run at k={k} has ranks 0..={}: pick a rank below {k}",
                k.saturating_sub(1)
            )),
            Fault::NoJoin(rank) if rank >= k => Err(format!(
                "fault `{self}` names rank {rank}, but a run at k={k} has ranks 0..={}: pick a rank below {k}",
                k.saturating_sub(1)
            )),
            // Alone, a rank has nobody to wait for it or to disagree with.
            Fault::NoJoin(_) | Fault::Mismatch(_) | Fault::SlowLink(_) if k < 2 => Err(format!(
                "fault `{self}` needs at least two ranks: use --k 2 or more"
            )),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Crash(s) => write!(f, "crash:{s}"),
            Fault::Raise(s) => write!(f, "raise:{s}"),
            Fault::Hang(s) => write!(f, "hang:{s}"),
            Fault::Silent(s) => write!(f, "silent:{s}"),
            Fault::Garbage(None) => f.write_str("garbage"),
            Fault::Garbage(Some(n)) => write!(f, "garbage:{n}"),
            Fault::Teardown => f.write_str("teardown:0"),
            Fault::Frozen(s) => write!(f, "frozen:{s}"),
            Fault::SlowStart(s) => write!(f, "slowstart:{s}"),
            Fault::Slow {
                rank,
                factor,
                from,
                phase,
            } => {
                write!(f, "slow:{rank}:{factor}")?;
                if let Some(p) = phase {
                    write!(f, ":{}", p.as_str())?;
                }
                if let Some(step) = from {
                    write!(f, "@{step}")?;
                }
                Ok(())
            }
            Fault::Uneven { rank, steps } => write!(f, "uneven:{rank}:{steps}"),
            Fault::Unused(layer) => write!(f, "unused:{layer}"),
            Fault::NoJoin(rank) => write!(f, "nojoin:{rank}"),
            Fault::Mismatch(step) => write!(f, "mismatch:{step}"),
            Fault::SlowLink(ms) => write!(f, "slowlink:{ms}"),
        }
    }
}

impl Serialize for Fault {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Fault {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The phases' names as the hand-written table spelled them (issue 49), both ways.
    #[test]
    fn slow_phase_names_are_the_old_names_and_round_trip() {
        use strum::VariantArray;
        let names: Vec<&str> = SlowPhase::VARIANTS.iter().map(|p| p.as_str()).collect();
        assert_eq!(names, ["data", "compute"]);
        for p in SlowPhase::VARIANTS {
            assert_eq!(p.as_str().parse::<SlowPhase>(), Ok(*p));
        }
        assert!("Data".parse::<SlowPhase>().is_err());
    }

    fn parse(s: &str) -> Result<Fault, String> {
        s.parse()
    }

    #[test]
    fn faults_parse() {
        assert_eq!(parse("crash:5"), Ok(Fault::Crash(5)));
        assert_eq!(parse("hang:12"), Ok(Fault::Hang(12)));
        assert_eq!(parse("silent:3"), Ok(Fault::Silent(3)));
        assert_eq!(parse("garbage"), Ok(Fault::Garbage(None)));
        assert_eq!(parse("garbage:100000"), Ok(Fault::Garbage(Some(100_000))));
        assert_eq!(parse("raise:7"), Ok(Fault::Raise(7)));
        // The Python workers' DDPTOP_INJECT kinds, with the same spelling.
        assert_eq!(parse("teardown:0"), Ok(Fault::Teardown));
        assert_eq!(parse("frozen:4"), Ok(Fault::Frozen(4)));
        assert_eq!(parse("slowstart:25"), Ok(Fault::SlowStart(25)));
        assert_eq!(
            parse("uneven:1:12"),
            Ok(Fault::Uneven { rank: 1, steps: 12 })
        );
        assert_eq!(
            parse("unused:aux_head"),
            Ok(Fault::Unused("aux_head".into()))
        );
        for bad in [
            "uneven:1",
            "uneven:x:3",
            "unused",
            "unused:1x",
            "unused:a.b",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse("nojoin:1"), Ok(Fault::NoJoin(1)));
        assert_eq!(parse("mismatch:3"), Ok(Fault::Mismatch(3)));
        for bad in [
            "nojoin",
            "nojoin:x",
            "nojoin:-1",
            "mismatch",
            "mismatch:0",
            "mismatch:x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        for s in ["uneven:1:12", "unused:aux_head", "nojoin:1", "mismatch:3"] {
            assert_eq!(parse(s).unwrap().to_string(), s);
        }
        assert!(parse("slowstart").is_err());
        assert_eq!(
            parse("slow:1:1.5"),
            Ok(Fault::Slow {
                rank: 1,
                factor: 1.5,
                from: None,
                phase: None,
            })
        );
        assert_eq!(
            parse("slow:1:1.5@40"),
            Ok(Fault::Slow {
                rank: 1,
                factor: 1.5,
                from: Some(40),
                phase: None,
            })
        );
        assert_eq!(
            parse("slow:0:2:compute"),
            Ok(Fault::Slow {
                rank: 0,
                factor: 2.0,
                from: None,
                phase: Some(SlowPhase::Compute),
            })
        );
        assert_eq!(
            parse("slow:3:1.3:data@7"),
            Ok(Fault::Slow {
                rank: 3,
                factor: 1.3,
                from: Some(7),
                phase: Some(SlowPhase::Data),
            })
        );
        for bad in [
            "slow",
            "slow:1",
            "slow:x:1.5",
            "slow:1:1",
            "slow:1:0.5",
            "slow:1:nan",
            "slow:1:1.5@",
            "slow:1:1.5@0",
            "slow:1:1.5@x",
            "slow:1:1.5@3@4",
            "slow:1:1.5:gpu",
            "slow:1:1.5:data:x",
            "slow:1:1.5:",
            "slow:1@5:1.5",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("teardown").is_err());
        assert!(parse("frozen:x").is_err());
        assert!(parse("hang").is_err());
        assert!(parse("explode:1").is_err());
    }

    #[test]
    fn every_fault_reads_back_what_it_writes() {
        for text in [
            "crash:3",
            "raise:2",
            "hang:5",
            "silent:4",
            "garbage",
            "garbage:100000",
            "teardown:0",
            "frozen:3",
            "slowstart:20",
            "slow:1:1.5",
            "slow:0:2",
            "slow:1:1.5@40",
            "slow:1:1.5:data",
            "slow:2:1.3:compute",
            "slow:2:1.3:compute@12",
        ] {
            let f: Fault = text.parse().unwrap();
            assert_eq!(f.to_string(), text);
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(serde_json::from_str::<Fault>(&json).unwrap(), f);
        }
        for bad in ["explode:3", "hang", "hang:x", "slow:1:0.5", "slow:1"] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
        assert!("garbage".parse::<Fault>().unwrap().sim_only());
        assert!(!"hang:1".parse::<Fault>().unwrap().sim_only());
    }

    #[test]
    fn a_fault_naming_a_rank_beyond_k_is_refused() {
        let f: Fault = "slow:5:1.5".parse().unwrap();
        let e = f.fits_k(2).unwrap_err();
        assert!(
            e.contains("names rank 5") && e.contains("ranks 0..=1"),
            "{e}"
        );
        assert!(f.fits_k(6).is_ok());
        assert!("slow:1:1.5".parse::<Fault>().unwrap().fits_k(1).is_err());
        assert!("hang:500".parse::<Fault>().unwrap().fits_k(1).is_ok());
        let e = "nojoin:2".parse::<Fault>().unwrap().fits_k(2).unwrap_err();
        assert!(e.contains("names rank 2"), "{e}");
        assert!("nojoin:1".parse::<Fault>().unwrap().fits_k(2).is_ok());
        let e = "nojoin:0".parse::<Fault>().unwrap().fits_k(1).unwrap_err();
        assert!(e.contains("at least two ranks"), "{e}");
        let e = "mismatch:3"
            .parse::<Fault>()
            .unwrap()
            .fits_k(1)
            .unwrap_err();
        assert!(e.contains("at least two ranks"), "{e}");
        assert!("mismatch:3".parse::<Fault>().unwrap().fits_k(2).is_ok());
        assert!(
            "slow:3:1.5@20"
                .parse::<Fault>()
                .unwrap()
                .fits_k(2)
                .unwrap_err()
                .contains("names rank 3")
        );
    }

    #[test]
    fn a_slow_link_parses_and_is_refused_alone_and_under_attach() {
        assert_eq!(parse("slowlink:80"), Ok(Fault::SlowLink(80)));
        assert_eq!(parse("slowlink:80").unwrap().to_string(), "slowlink:80");
        for bad in [
            "slowlink",
            "slowlink:0",
            "slowlink:x",
            "slowlink:60001",
            "slowlink:-5",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("expected slowlink:MS"), "{bad}: {e}");
        }
        let f = parse("slowlink:80").unwrap();
        assert!(f.torch_only());
        let e = f.fits_k(1).unwrap_err();
        assert!(e.contains("at least two ranks"), "{e}");
        assert!(f.fits_k(2).is_ok() && f.fits_k(4).is_ok());
        let why = f.attach_refusal().unwrap();
        assert!(
            why.contains("ddptop run weak --inject slowlink:80"),
            "{why}"
        );
    }

    #[test]
    fn a_compute_slowdown_is_refused_under_attach() {
        let why = parse("slow:1:1.5:compute@9")
            .unwrap()
            .attach_refusal()
            .unwrap();
        assert!(
            why.contains("slow:1:1.5:compute@9") && why.contains("data wait"),
            "{why}"
        );
        for ok in ["slow:1:1.5", "slow:1:1.5:data@9", "hang:3"] {
            assert_eq!(parse(ok).unwrap().attach_refusal(), None, "{ok}");
        }
    }
}
