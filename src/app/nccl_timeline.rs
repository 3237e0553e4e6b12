//! The Timeline pane's bucket all-reduces from NCCL's own collectives (docs/profiler.md,
//! "Timeline from NCCL's kernels"): a DDP step's all-reduces on the rank's main communicator,
//! matched to DDP's buckets by order and element count, drawn on the rank's host clock from the
//! step's backward start. When nothing matches, the comm hook's CUDA-event timeline stays, and
//! the pane says which source it drew. Pure.

use crate::protocol::{BucketSpan, Buckets, NcclColl};
use crate::run::RunView;

/// Where the Timeline pane's bucket bars come from. Its name (`nccl_profiler`, `comm_hook`) is
/// the JSON and store spelling; `label` is the pane's.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString, strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
pub enum TimelineSource {
    /// NCCL's profiler plugin: DDP's own all-reduce, NCCL's call time and GPU kernel span.
    NcclProfiler,
    /// ddptop's comm hook around each bucket's all-reduce, CUDA events.
    CommHook,
}

impl TimelineSource {
    pub fn label(self) -> &'static str {
        match self {
            TimelineSource::NcclProfiler => "NCCL profiler",
            TimelineSource::CommHook => "comm hook (CUDA events)",
        }
    }

    /// The label for a run on `backend`: the hook times with host timers where there is no GPU
    /// (gloo), with CUDA events on NCCL.
    pub fn label_on(self, backend: crate::protocol::Backend) -> &'static str {
        match (self, backend) {
            (TimelineSource::CommHook, crate::protocol::Backend::Gloo) => "comm hook (host timers)",
            _ => self.label(),
        }
    }

    /// The JSON/store spelling.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What the Timeline pane draws for a rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub source: TimelineSource,
    /// The plugin's step, when it is the source (the hook's come from the rank's messages).
    pub buckets: Option<Buckets>,
    /// Why the plugin's collectives are not the source although the plugin reported some.
    pub fallback: Option<String>,
}

/// DDP's buckets of `rank` in all-reduce order, (index, bytes): the hook's latest `buckets`
/// message, else the layout the worker sent (`plan.bucket_bytes`) or its result.
fn layout(run: &RunView, rank: u32) -> Vec<(u32, u64)> {
    match run.ranks.get(&rank).and_then(|r| r.buckets.as_ref()) {
        Some(b) => b.buckets.iter().map(|s| (s.index, s.bytes)).collect(),
        None => (0u32..)
            .zip(run.figures.bucket_bytes.iter().copied())
            .collect(),
    }
}

/// Whether NCCL's collective carries a bucket of `bucket_bytes`: the same element count in the
/// collective's data type (a bucket is one flat gradient tensor of the parameters' type).
fn same_elements(c: &NcclColl, bucket_bytes: u64) -> bool {
    if c.count == 0 || !c.bytes.is_multiple_of(c.count) {
        return false;
    }
    let elem = c.bytes / c.count;
    bucket_bytes.is_multiple_of(elem) && bucket_bytes / elem == c.count
}

/// Match one step's all-reduces, in NCCL's order, to the buckets in their all-reduce order: each
/// bucket takes the next all-reduce of its element count; an all-reduce that is not the next
/// bucket's (the script's own, a loss average) is passed over. `None` unless every bucket found
/// one.
pub fn match_step<'a>(ars: &[&'a NcclColl], buckets: &[(u32, u64)]) -> Option<Vec<&'a NcclColl>> {
    if buckets.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(buckets.len());
    let mut it = ars.iter();
    for (_, bytes) in buckets {
        out.push(*it.find(|c| same_elements(c, *bytes))?);
    }
    Some(out)
}

/// The bucket timeline of one step from its matched collectives, in ms from `t_bwd` (the host
/// time backward began), all on the rank's host clock (CLOCK_MONOTONIC):
/// - ready: NCCL's call (DDP handed the bucket to NCCL);
/// - start: the kernel's first channel start as NCCL's proxy thread saw it, so the GPU's
///   globaltimer is taken onto the host clock at that moment;
/// - done: start + the GPU span (latest channel stop − earliest channel start, on the GPU's own
///   clock), or NCCL's completion on the host when the span is missing.
///
/// Backward compute ends at the last bucket's call, as in the hook's timeline; exposed comm is
/// what runs after it.
pub fn timeline(step: u64, t_bwd: f64, colls: &[&NcclColl], buckets: &[(u32, u64)]) -> Buckets {
    let ms = |t: f64| ((t - t_bwd) * 1e3).max(0.0);
    let spans: Vec<BucketSpan> = colls
        .iter()
        .zip(buckets)
        .map(|(c, (index, bytes))| {
            let ready_ms = ms(c.t_call);
            let start_ms = c.t_kernel.map_or(ready_ms, |k| ms(k).max(ready_ms));
            let kernel_ms = c.kernel_us.map(|k| k / 1e3);
            let done_ms = match kernel_ms {
                Some(k) => start_ms + k,
                None => ms(c.t_end).max(start_ms),
            };
            BucketSpan {
                index: *index,
                bytes: *bytes,
                ready_ms,
                start_ms,
                done_ms,
                kernel_ms,
            }
        })
        .collect();
    let last_ready = spans.last().map_or(0.0, |s| s.ready_ms);
    let last_done = spans.iter().map(|s| s.done_ms).fold(0.0, f64::max);
    Buckets {
        rank: 0,
        step,
        t: t_bwd,
        rebuilt: true,
        bwd_compute_ms: last_ready,
        exposed_ms: (last_done - last_ready).max(0.0),
        start_inferred: Some(colls.iter().any(|c| c.t_kernel.is_none())),
        buckets: spans,
    }
}

/// A rank's marked steps against its main communicator's recent all-reduces: the steps'
/// backward starts (`step.t_bwd`) cut the all-reduces into steps, matched to the buckets.
struct MarkedSteps<'a> {
    rank: u32,
    buckets: Vec<(u32, u64)>,
    ars: Vec<&'a NcclColl>,
    marks: Vec<(u64, f64)>,
}

impl<'a> MarkedSteps<'a> {
    fn of(run: &'a RunView, rank: u32) -> Option<Self> {
        let rv = run.ranks.get(&rank)?;
        let comm = super::collectives::main_comm(run, rank)?;
        Some(MarkedSteps {
            rank,
            buckets: layout(run, rank),
            ars: comm
                .recent
                .iter()
                .filter(|c| c.func == "all_reduce")
                .collect(),
            marks: rv.recent_bwd.iter().copied().collect(),
        })
    }

    /// Whether mark `i` has a successor: the step's all-reduces are then all in.
    fn complete(&self, i: usize) -> bool {
        i + 1 < self.marks.len()
    }

    /// Mark `i`'s bucket timeline, when its all-reduces match the buckets.
    fn timeline(&self, i: usize) -> Option<Buckets> {
        let (step, t0) = self.marks[i];
        let t1 = self.marks.get(i + 1).map_or(f64::INFINITY, |m| m.1);
        let in_step: Vec<&NcclColl> = self
            .ars
            .iter()
            .copied()
            .filter(|c| c.t_call >= t0 && c.t_call < t1)
            .collect();
        let m = match_step(&in_step, &self.buckets)?;
        let mut b = timeline(step, t0, &m, &self.buckets);
        b.rank = self.rank;
        Some(b)
    }
}

/// The latest step of `rank` whose all-reduces NCCL reported and match its buckets, newest
/// first (the newest step's may not have arrived yet).
pub fn plugin_step(run: &RunView, rank: u32) -> Option<Buckets> {
    let s = MarkedSteps::of(run, rank)?;
    (0..s.marks.len()).rev().find_map(|i| s.timeline(i))
}

/// The comm wait NCCL's collectives show for each of `steps` of `rank` that matched its buckets:
/// (step, exposed ms), the time from its last bucket's call to the last all-reduce's end, as
/// the hook's `buckets` message gives it. A rank that waits for a slow peer waits there; the
/// slow rank hardly does. Steps without a mark or whose all-reduces have not all arrived are
/// left out.
pub fn plugin_comm_waits(run: &RunView, rank: u32, steps: &[u64]) -> Vec<(u64, f64)> {
    let Some(s) = MarkedSteps::of(run, rank) else {
        return Vec::new();
    };
    (0..s.marks.len())
        .filter(|&i| s.complete(i) && steps.contains(&s.marks[i].0))
        .filter_map(|i| s.timeline(i))
        .map(|b| (b.step, b.exposed_ms))
        .collect()
}

/// What the Timeline pane draws for `rank`: the plugin's step when one matched, else the hook's
/// data (with why, when the plugin did report collectives).
pub fn choose(run: &RunView, rank: u32) -> Choice {
    if let Some(b) = plugin_step(run, rank) {
        return Choice {
            source: TimelineSource::NcclProfiler,
            buckets: Some(b),
            fallback: None,
        };
    }
    let reported = run
        .collectives
        .ranks
        .get(&rank)
        .is_some_and(|p| !p.comms.is_empty());
    // Said only where the plugin was to be the source (an attached rank chose it, or the worker
    // marks its steps): ddptop's own workers keep their hook and send no marks.
    let expected = run.seen.comm_timing == Some(crate::protocol::CommTiming::NcclProfiler)
        || run
            .ranks
            .get(&rank)
            .is_some_and(|r| !r.recent_bwd.is_empty());
    let fallback = (reported && expected).then(|| {
        let why = if run.ranks.get(&rank).is_none_or(|r| r.recent_bwd.is_empty()) {
            "no step marks from the worker"
        } else if layout(run, rank).is_empty() {
            "no bucket layout yet"
        } else {
            "no step's all-reduces matched the buckets' element counts"
        };
        format!("NCCL profiler: {why}")
    });
    Choice {
        source: TimelineSource::CommHook,
        buckets: None,
        fallback,
    }
}

#[cfg(test)]
mod tests {
    //! Driven by recorded-format plugin messages (tests/fixtures/nccl/ddp_steps_k2.jsonl: two
    //! steps of three buckets, hand-written in the plugin's exact format, see the fixture's
    //! README.md), fed through the same reducer as live messages.
    use super::*;
    use crate::app::reduce::apply_worker;
    use crate::protocol::{Backend, parse_worker};
    use crate::run::{Experiment, RunSpec};
    use std::time::Instant;

    /// The sources' JSON/store names as the hand-written table spelled them (issue 49).
    #[test]
    fn source_names_are_the_old_names_and_round_trip() {
        use strum::VariantArray;
        let names: Vec<&str> = TimelineSource::VARIANTS
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(names, ["nccl_profiler", "comm_hook"]);
        for s in TimelineSource::VARIANTS {
            assert_eq!(s.as_str().parse::<TimelineSource>(), Ok(*s));
        }
    }

    fn feed(text: &str) -> RunView {
        let now = Instant::now();
        let mut r = RunView::new(
            "r1".into(),
            RunSpec::new(Experiment::Attach, 2, Backend::Nccl),
            now,
            0.0,
        );
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let msg = parse_worker(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            apply_worker(&mut r, &msg, now);
        }
        r
    }

    const FIXTURE: &str = include_str!("../../tests/fixtures/nccl/ddp_steps_k2.jsonl");

    #[test]
    fn the_latest_steps_all_reduces_become_the_buckets_in_order() {
        let r = feed(FIXTURE);
        let c = choose(&r, 0);
        assert_eq!(c.source, TimelineSource::NcclProfiler);
        let b = c.buckets.unwrap();
        // Step 12's collectives arrived; step 13 has a backward start and no collectives yet.
        assert_eq!(b.step, 12);
        assert_eq!(
            b.buckets
                .iter()
                .map(|s| (s.index, s.bytes))
                .collect::<Vec<_>>(),
            [(0, 9461800), (1, 26501120), (2, 8740352)]
        );
        // Step 12's backward began at 40.100 s; bucket 1 was called at 40.111, its kernel's
        // first channel seen at 40.1112, GPU span 176.512 µs.
        let s = &b.buckets[1];
        assert!((s.ready_ms - 11.0).abs() < 1e-6, "{}", s.ready_ms);
        assert!((s.start_ms - 11.2).abs() < 1e-6, "{}", s.start_ms);
        assert!((s.done_ms - 11.376512).abs() < 1e-6, "{}", s.done_ms);
        assert_eq!(s.kernel_ms, Some(0.176512));
        assert!((b.bwd_compute_ms - 22.0).abs() < 1e-6);
        // The last bucket: called at 22.0, kernel 22.3 + 0.07004 ms.
        assert!((b.exposed_ms - 0.37004).abs() < 1e-6, "{}", b.exposed_ms);
        assert_eq!(b.start_inferred, Some(false));
    }

    #[test]
    fn an_interleaved_all_reduce_of_another_size_is_not_a_bucket() {
        // Step 12 has the script's own one-element all-reduce (a loss average) between buckets
        // 0 and 1: it is passed over, the buckets keep NCCL's sequence numbers 2061, 2063, 2064.
        let r = feed(FIXTURE);
        let rv = &r.ranks[&0];
        let comm = crate::app::collectives::main_comm(&r, 0).unwrap();
        let t0 = rv.recent_bwd.iter().find(|m| m.0 == 12).unwrap().1;
        let ars: Vec<&NcclColl> = comm
            .recent
            .iter()
            .filter(|c| c.func == "all_reduce" && c.t_call >= t0)
            .collect();
        let m = match_step(&ars, &layout(&r, 0)).unwrap();
        assert_eq!(
            m.iter().map(|c| c.seq).collect::<Vec<_>>(),
            [2061, 2063, 2064]
        );
        // A bucket whose element count never occurs matches nothing.
        assert_eq!(match_step(&ars, &[(0, 9461800), (1, 12)]), None);
        // The same bytes in another element count (bf16 where the bucket is fp32-sized) differ.
        let mut half = ars[0].clone();
        half.count *= 2;
        half.dtype = "bfloat16".into();
        assert!(!same_elements(&half, 9461800 * 2));
        assert!(same_elements(&half, 9461800));
    }

    #[test]
    fn missing_collectives_fall_back_to_the_hook_and_say_so() {
        // Bucket 2's all-reduce of step 12 never arrived (and step 11's are gone): no step
        // matches, the hook's timeline stays, and the pane says why.
        let cut: Vec<&str> = FIXTURE
            .lines()
            .filter(|l| !l.contains("\"t_call\":40.122"))
            .collect();
        let r = feed(&cut.join("\n").replace(
            r#""count":2185088,"bytes":8740352,"dtype":"float32","algo":"ring","proto":"simple","channels":2,"t_call":40.022"#,
            r#""count":7,"bytes":28,"dtype":"float32","algo":"ring","proto":"simple","channels":2,"t_call":40.022"#,
        ));
        let c = choose(&r, 0);
        assert_eq!(c.source, TimelineSource::CommHook);
        assert_eq!(c.buckets, None);
        assert_eq!(
            c.fallback.as_deref(),
            Some("NCCL profiler: no step's all-reduces matched the buckets' element counts")
        );
        // Without the plugin nothing is said: the hook is simply the source.
        let hook_only: Vec<&str> = FIXTURE
            .lines()
            .filter(|l| !l.contains("\"nccl\""))
            .collect();
        let c = choose(&feed(&hook_only.join("\n")), 0);
        assert_eq!((c.source, c.fallback), (TimelineSource::CommHook, None));
    }

    #[test]
    fn the_hooks_label_says_its_clock() {
        use crate::protocol::Backend;
        assert_eq!(
            TimelineSource::CommHook.label_on(Backend::Nccl),
            "comm hook (CUDA events)"
        );
        assert_eq!(
            TimelineSource::CommHook.label_on(Backend::Gloo),
            "comm hook (host timers)"
        );
        assert_eq!(
            TimelineSource::NcclProfiler.label_on(Backend::Nccl),
            "NCCL profiler"
        );
    }

    #[test]
    fn without_backward_marks_the_hook_stays() {
        let no_marks = FIXTURE.replace("\"t_bwd\"", "\"t_bwd_x\"");
        let c = choose(&feed(&no_marks), 0);
        assert_eq!(c.source, TimelineSource::CommHook);
        assert_eq!(
            c.fallback.as_deref(),
            Some("NCCL profiler: no step marks from the worker")
        );
        // A worker that keeps its hook (ddptop's own: no plan.comm_timing, no marks) is not
        // told off for it.
        let own_worker: Vec<&str> = no_marks
            .lines()
            .filter(|l| !l.contains("\"plan\""))
            .collect();
        let c = choose(&feed(&own_worker.join("\n")), 0);
        assert_eq!((c.source, c.fallback), (TimelineSource::CommHook, None));
    }
}
