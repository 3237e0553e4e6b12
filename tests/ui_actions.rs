//! What each action does, through the real engine with the simulated backend: toggles, k > max_k
//! refused, the one-run-at-a-time queue, navigation, freeze, help.
//!
//! The engine starts sim workers as `current_exe() worker sim …`; in a test that is this test
//! binary, which exits at once. So these tests check the controller (what is launched, queued,
//! stopped, focused), not the runs' figures: tests/e2e_tmux.rs runs the real binary for those.

use ddptop::app::{Action, Experiment, HostInfo, Pane, State};
use ddptop::engine::{Engine, EngineOptions};
use ddptop::protocol::Backend;
use ddptop::tui::actions::{Controller, Flow, LaunchDefaults};

fn engine(dir: &std::path::Path, max_k: u32) -> Engine {
    let mut opts = EngineOptions::new(dir.to_path_buf());
    opts.history = 0;
    opts.sim_speed = 50.0;
    let mut st = State::new(HostInfo::default());
    st.max_k = max_k;
    Engine::start(opts, st).unwrap()
}

fn last_msg(e: &Engine) -> String {
    e.state()
        .messages
        .back()
        .map(|m| m.text.clone())
        .unwrap_or_default()
}

// One engine per process at a time (its socket directory is per pid): the scenarios run in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions() {
    toggles_navigation_and_limits().await;
    launches_queue_one_at_a_time_and_stop_drops_the_sweep().await;
    probe_launches_the_probe_then_its_control_and_keeps_focus().await;
}

async fn toggles_navigation_and_limits() {
    let d = tempfile::tempdir().unwrap();
    let mut e = engine(d.path(), 2);
    let mut c = Controller::new(LaunchDefaults::new(Backend::Sim, None));

    c.handle(&mut e, Action::ToggleShmMemcpy);
    assert_eq!(
        e.state().next.env["NCCL_SHM_USE_CUDA_MEMCPY"].as_deref(),
        Some("1")
    );
    c.handle(&mut e, Action::ToggleShmMemcpy);
    assert!(e.state().next.env.is_empty());
    c.handle(&mut e, Action::ToggleP2pDisable);
    assert_eq!(e.state().next.env["NCCL_P2P_DISABLE"].as_deref(), Some("1"));

    c.handle(&mut e, Action::SwitchExperiment);
    assert_eq!(e.state().next.experiment, Experiment::Strong);
    c.handle(&mut e, Action::SwitchExperiment);
    assert_eq!(e.state().next.experiment, Experiment::Weak);

    // k=4 on a 2-GPU machine: a clear message, no launch.
    let g = e.state().generation;
    c.handle(&mut e, Action::LaunchK4);
    assert!(e.state().runs.is_empty());
    assert!(
        last_msg(&e).contains("needs 4 GPUs; this machine has 2"),
        "{}",
        last_msg(&e)
    );
    assert!(e.state().generation > g);

    let pages: Vec<Pane> = (0..4)
        .map(|_| {
            c.handle(&mut e, Action::NextPane);
            e.state().pane
        })
        .collect();
    assert_eq!(pages, [Pane::Gpus, Pane::Timeline, Pane::Log, Pane::Runs]);

    c.handle(&mut e, Action::Up);
    assert_eq!(e.state().selected, 0);
    c.handle(&mut e, Action::Down);
    assert_eq!(e.state().selected, 0, "no runs: stays");
    assert_eq!(c.handle(&mut e, Action::Help), Flow::Continue);
    assert!(e.state().show_help);
    c.handle(&mut e, Action::Help);
    assert!(!e.state().show_help);
    assert_eq!(c.handle(&mut e, Action::Freeze), Flow::Frozen);
    assert!(e.state().frozen);
    c.handle(&mut e, Action::Freeze);
    assert!(!e.state().frozen);
    assert_eq!(c.handle(&mut e, Action::NextTheme), Flow::NextTheme);
    c.handle(&mut e, Action::Stop);
    assert!(last_msg(&e).contains("nothing to stop"));
    assert_eq!(c.handle(&mut e, Action::Quit), Flow::Quit);
    e.shutdown(false).await;
}

async fn launches_queue_one_at_a_time_and_stop_drops_the_sweep() {
    let d = tempfile::tempdir().unwrap();
    let mut e = engine(d.path(), 0);
    let mut c = Controller::new(LaunchDefaults::new(Backend::Sim, None));
    c.handle(&mut e, Action::LaunchK1);
    assert_eq!(e.state().runs.len(), 1, "idle: launched at once");
    assert_eq!(e.state().runs[0].spec.k, 1);
    assert!(e.state().runs[0].is_simulated());
    c.handle(&mut e, Action::Sweep);
    assert_eq!(e.state().runs.len(), 1, "busy: the sweep waits");
    assert_eq!(c.pending(), 3);
    assert!(last_msg(&e).contains("queued"), "{}", last_msg(&e));
    // Stopping the first run starts the queue; stopping a sweep run drops the rest of it.
    c.handle(&mut e, Action::Stop);
    let id = e.state().runs[0].id.clone();
    e.wait_final(&id).await;
    c.pump(&mut e);
    assert_eq!(e.state().runs.len(), 2, "next in the queue started");
    assert_eq!(c.pending(), 2);
    e.state_mut().selected = 0;
    c.handle(&mut e, Action::Stop);
    assert_eq!(c.pending(), 0, "rest of the sweep dropped");
    let id = e.state().runs[0].id.clone();
    e.wait_final(&id).await;
    assert!(c.idle(&e));
    e.shutdown(false).await;
}

async fn probe_launches_the_probe_then_its_control_and_keeps_focus() {
    let d = tempfile::tempdir().unwrap();
    let mut e = engine(d.path(), 0);
    let mut c = Controller::new(LaunchDefaults::new(Backend::Sim, None));
    c.handle(&mut e, Action::Probe);
    let probe = e.state().runs[0].clone();
    assert_eq!(
        (probe.spec.experiment, probe.spec.k, probe.spec.control),
        (Experiment::Probe, 2, false)
    );
    e.wait_final(&probe.id).await;
    c.pump(&mut e);
    let control = e.state().runs[0].clone();
    assert!(control.spec.control && control.spec.k == 1);
    assert_eq!(control.sweep, probe.sweep);
    assert_eq!(
        e.state().focused.as_deref(),
        Some(probe.id.as_str()),
        "screens stay on the probe"
    );
    e.wait_final(&control.id).await;
    e.shutdown(false).await;
}
