//! Two ddptops on the same GPUs: the second launch is refused and names the first, unless
//! `--shared-gpus`. Through the real engine; the other ddptop's lock is held by this test (NVML's
//! half of the check needs a GPU: scripts/device/reliability.sh runs it on one).

use ddptop::app::{Experiment, HostInfo, State};
use ddptop::engine::{Engine, EngineOptions};
use ddptop::protocol::Backend;
use ddptop::run::RunSpec;
use ddptop::supervisor::gpu_guard;

fn engine(dir: &std::path::Path, shared: bool) -> Engine {
    let mut opts = EngineOptions::new(dir.to_path_buf());
    opts.history = 0;
    opts.shared_gpus = shared;
    let mut st = State::new(HostInfo::default());
    st.max_k = 2;
    Engine::start(opts, st).unwrap()
}

// One engine per process at a time (its socket directory is per pid): the cases run in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_on_locked_gpus_is_refused_naming_the_holder() {
    let locks = tempfile::tempdir().unwrap();
    // SAFETY: set before any engine or thread of this test reads it; this file has one test.
    unsafe { std::env::set_var("DDPTOP_GPU_LOCK_DIR", locks.path()) };
    let other = gpu_guard::lock(
        locks.path(),
        &[1],
        "4242\nrun r20261201-000000-aaaa: ddptop run weak --k 2",
    )
    .unwrap();

    let d = tempfile::tempdir().unwrap();
    let mut e = engine(d.path(), false);
    let err = e
        .launch(RunSpec::new(Experiment::Weak, 2, Backend::Nccl), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("GPU 1 is locked by ddptop pid 4242")
            && err.contains("ddptop run weak --k 2")
            && err.contains("--shared-gpus"),
        "{err}"
    );
    assert!(e.state().runs.is_empty(), "a refused launch records no run");
    // GPU 0 was not left locked by the refused launch.
    assert!(gpu_guard::lock(locks.path(), &[0], "1\nprobe").is_ok());
    // Gloo and the simulation use no GPU: nothing to refuse.
    let sim = e.launch(RunSpec::new(Experiment::Weak, 2, Backend::Sim), None);
    assert!(
        sim.as_ref()
            .is_err_and(|e| !e.to_string().contains("locked"))
            || sim.is_ok(),
        "{sim:?}"
    );
    drop(e);

    // --shared-gpus: the guard lets the launch through (here it then fails for want of a
    // python with torch, which is a different error).
    let d2 = tempfile::tempdir().unwrap();
    let mut e = engine(d2.path(), true);
    let err = e
        .launch(RunSpec::new(Experiment::Weak, 2, Backend::Nccl), None)
        .map(|_| String::new())
        .unwrap_or_else(|e| e.to_string());
    assert!(!err.contains("is locked by"), "{err}");
    drop(other);
}
