//! GPU sources: fakes with an erroring GPU and NotSupported fields render as "n/a" rows, never a
//! crash; NVML absent gives one note; the sampler thread feeds `State` through `apply_update`.

mod common;
use common::ui as fixtures;

use ddptop::app::{Pane, gpus};
use ddptop::gpu::fake::FakeGpus;
use ddptop::gpu::sampler::Sampler;
use ddptop::gpu::{self, GpuError, GpuSource, Update};
use fixtures::Screen;
use std::time::Duration;

fn screen(st: &Screen, w: u16, h: u16) -> String {
    let t = fixtures::draw(st, w, h);
    let buf = t.backend().buffer().clone();
    (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn erroring_gpu_and_unsupported_fields_show_na() {
    let mut src = FakeGpus::h200(4);
    src.failing = Some(2);
    src.unsupported = true;
    let mut st = Screen::new(fixtures::host_gpubox(4));
    gpus::apply_info(&mut st, src.info());
    for _ in 0..3 {
        let s = src.sample();
        gpus::apply_gpu_sample(&mut st, s);
    }
    assert_eq!(st.gpus.len(), 4);
    assert!(st.gpus[2].error.is_some());
    assert_eq!(st.gpus[0].power_w, None);
    assert_eq!(st.gpus[0].util_history.len(), 3);
    st.view.pane = Pane::Gpus;
    let s = screen(&st, 140, 30);
    let row = |i: usize| {
        s.lines()
            .find(|l| l.starts_with(&format!("│{i}  H200")))
            .unwrap_or_else(|| panic!("row {i}:\n{s}"))
            .to_string()
    };
    assert!(row(2).contains("error: GPU is lost"), "{}", row(2));
    for i in [0, 1, 3] {
        let r = row(i);
        assert!(
            r.contains("n/a"),
            "power/temp not supported must read n/a: {r}"
        );
        assert!(r.contains('%'), "util is supported: {r}");
    }
    assert!(s.contains("4× NVIDIA H200"), "{s}");
}

#[test]
fn every_field_missing_still_draws() {
    let mut st = Screen::new(fixtures::host_gpubox(1));
    gpus::apply_gpu_sample(
        &mut st,
        Ok(vec![gpu::GpuSample {
            index: 0,
            ..Default::default()
        }]),
    );
    st.view.pane = Pane::Gpus;
    for (w, h) in [(60, 16), (80, 24), (200, 50)] {
        let s = screen(&st, w, h);
        assert!(s.contains("n/a"), "{w}x{h}:\n{s}");
    }
}

#[test]
fn no_nvml_is_one_note_line() {
    // This machine may or may not have a driver; either way nothing panics.
    match gpu::nvml::NvmlSource::new() {
        Ok(src) => assert!(!src.info().names.is_empty()),
        Err(why) => {
            let mut st = Screen::new(fixtures::host_laptop());
            gpus::apply_gpu_sample(&mut st, Err(GpuError::Unavailable(why.clone())));
            let note = st.gpu_note.clone().unwrap();
            assert!(note.starts_with("NVML not available: "), "{note}");
            assert!(
                note.ends_with("GPU rows off, everything else works"),
                "{note}"
            );
            st.view.pane = Pane::Gpus;
            let s = screen(&st, 100, 30);
            assert!(s.contains("NVML not available"), "{s}");
        }
    }
}

#[test]
fn a_failed_tick_keeps_the_rows_and_says_so() {
    let mut src = FakeGpus::h200(2);
    let mut st = Screen::new(fixtures::host_gpubox(2));
    gpus::apply_gpu_sample(&mut st, src.sample());
    gpus::apply_gpu_sample(&mut st, Err(GpuError::Failed("timeout".into())));
    assert_eq!(st.gpus.len(), 2);
    assert!(st.gpu_note.as_deref().unwrap().contains("last sample"));
    gpus::apply_gpu_sample(&mut st, src.sample());
    assert_eq!(st.gpu_note, None);
}

#[test]
fn sampler_thread_feeds_state_and_matches_ranks_to_gpus() {
    let mut st = fixtures::gpubox_8();
    st.gpus.clear();
    let mut src = FakeGpus::h200(8);
    src.pids[1] = vec![5101];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        let mut s = Sampler::spawn(Some(Box::new(src)), Duration::from_millis(10), tx);
        s.watch(gpus::worker_pids(&st));
        let mut got_gpus = 0;
        while got_gpus < 3 {
            let u = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap();
            if matches!(u, Update::Gpus(_)) {
                got_gpus += 1;
            }
            gpus::apply_update(&mut st, u);
        }
        drop(s);
    });
    assert_eq!(st.gpus.len(), 8);
    assert_eq!(st.gpus[1].pids, vec![5101]);
    let owners = ddptop::ui::model::gpu_owners(&st, &st.gpus[1]);
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].1, 1, "GPU 1 runs rank 1");
}

/// A two-node run: the Ranks pane groups ranks by node, this machine's first, and samples no
/// CPU/RSS for a rank on another node (its pid is that node's). The GPU rows stay this node's.
#[test]
fn ranks_of_a_two_node_run_are_grouped_by_node() {
    use ddptop::protocol::Backend;
    use ddptop::run::{Experiment, RunStatus};
    let mut st = Screen::new(fixtures::host_gpubox(2));
    st.gpus = fixtures::gpus(2, &[(0, 5000), (1, 5001)]);
    let mut run = fixtures::run(
        1,
        fixtures::spec(Experiment::Weak, 2, Backend::Nccl),
        RunStatus::Running,
    );
    fixtures::live_ranks(&mut run, 5000, true);
    for r in run.ranks.values_mut() {
        let remote = r.rank % 2 == 1;
        r.remote = remote;
        r.node = Some(if remote { "node-b" } else { "node-a" }.into());
    }
    st.runs.insert(0, run);
    st.view.pane = Pane::Gpus;
    let s = screen(&st, 140, 40);
    let a = s.find("node node-a").unwrap_or_else(|| panic!("{s}"));
    let b = s.find("node node-b").unwrap_or_else(|| panic!("{s}"));
    assert!(a < b, "this machine's node first:\n{s}");
    assert!(s.contains("reports over TCP"), "{s}");
    // r0 under node-a, r1 under node-b.
    let pos = |row: &str| s.find(row).unwrap_or_else(|| panic!("{row}:\n{s}"));
    assert!(pos("r0      5000") < b && pos("r1      5001") > b, "{s}");
}
