//! What is known before a launch to make its figures less than solid (said before it starts,
//! kept with the run as `Caveat`s): the engine, `ddptop run` and the dashboard share it.

use super::{Caveat, RunSpec};
use crate::protocol::Backend;

/// Fewer timed steps than this make a samples/s figure of a few noisy steps.
pub const MIN_TIMED_STEPS: u64 = 8;

/// What is known before a launch to make its figures less than solid, said before it starts
/// and kept with the run: more gloo ranks than CPU cores (they take turns on the cores), a
/// timed epoch of very few steps. `cores`: this machine's.
pub fn launch_caveats(spec: &RunSpec, cores: usize) -> Vec<Caveat> {
    let mut out = Vec::new();
    let procs = spec.processes() as usize;
    if spec.backend == Backend::Gloo && procs > cores {
        out.push(Caveat::note(format!(
            "cores oversubscribed: {procs} gloo ranks on {cores} CPU cores (ranks wait for a core: figures measure the machine's contention, not the scaling)"
        )));
    }
    if let Some(steps) = timed_steps(spec).filter(|s| *s < MIN_TIMED_STEPS) {
        out.push(Caveat::note(format!(
            "only {} (fewer than {MIN_TIMED_STEPS}: too few for a stable figure; raise --samples or --epochs)",
            crate::util::count(steps as usize, "timed step")
        )));
    }
    out
}

/// Steps of a launch's timed epochs, where ddptop's worker decides them (weak, strong, fsdp):
/// each rank gets samples/k samples in per-rank batches (the rest dropped), and the first
/// epoch is warm-up when another follows.
pub fn timed_steps(spec: &RunSpec) -> Option<u64> {
    if !spec.kind().times_steps() {
        return None;
    }
    let per_epoch =
        spec.samples / u64::from(spec.k.max(1)) / u64::from(spec.per_rank_batch().max(1));
    let timed_epochs = u64::from(if spec.epochs > 1 { spec.epochs - 1 } else { 1 });
    Some(per_epoch * timed_epochs)
}

/// This machine's CPU cores (1 when unknown).
pub fn cpu_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Experiment;

    #[test]
    fn oversubscribed_gloo_and_few_timed_steps_are_caveats() {
        let mut s = RunSpec::new(Experiment::Weak, 4, Backend::Gloo);
        s.samples = 8192;
        // 8192 / 4 ranks / 256 = 8 steps in the one timed epoch: enough; 4 ranks on 2 cores not.
        assert_eq!(timed_steps(&s), Some(8));
        let c = launch_caveats(&s, 2);
        assert_eq!(c.len(), 1);
        assert!(
            c[0].text.contains("4 gloo ranks on 2 CPU cores"),
            "{}",
            c[0].text
        );
        assert!(!c[0].perturbed, "a mark, not a disqualified baseline");
        assert!(launch_caveats(&s, 4).is_empty());
        s.samples = 4096;
        let c = launch_caveats(&s, 4);
        assert_eq!(c.len(), 1);
        assert!(c[0].text.contains("only 4 timed steps"), "{}", c[0].text);
        s.samples = 1024;
        let c = launch_caveats(&s, 4);
        assert!(
            c[0].text.starts_with("only 1 timed step ("),
            "{}",
            c[0].text
        );
        s.samples = 4096;
        // Three epochs: two are timed.
        s.epochs = 3;
        assert_eq!(timed_steps(&s), Some(8));
        // NCCL ranks have their own GPUs; the cores are not the limit.
        let n = RunSpec::new(Experiment::Weak, 4, Backend::Nccl);
        assert!(launch_caveats(&n, 2).is_empty());
        // An attached script's steps are its own.
        assert_eq!(
            timed_steps(&RunSpec::new(Experiment::Attach, 2, Backend::Gloo)),
            None
        );
    }
}
