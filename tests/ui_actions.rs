//! What each action does, through the real engine with the simulated backend: toggles, k > max_k
//! refused, the one-run-at-a-time queue, navigation, freeze, help (the view is the test's own).
//!
//! The engine starts sim workers as `current_exe() worker sim …`; in a test that is this test
//! binary, which exits at once. So these tests check the controller (what is launched, queued,
//! stopped, focused), not the runs' figures: tests/e2e_tmux.rs runs the real binary for those.

use ddptop::app::{Action, Experiment, Freeze, HostInfo, Pane, State, View};
use ddptop::engine::{Engine, EngineOptions};
use ddptop::plan::Template;
use ddptop::protocol::Backend;
use ddptop::run::NcclVar;
use ddptop::tui::actions::{Controller, Flow};

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
    details_zoom_and_gloo_toggles().await;
    the_node_switch_takes_launches_through_the_engines_node_path().await;
}

/// `N` with `[nodes] hosts`: the engine's launches go across the nodes (a k that does not split
/// over them is refused by the multi-node plan, as `ddptop run --nodes` refuses it), k≤ counts
/// both nodes, the badge follows; `N` again brings launches back here. Without hosts: one line.
async fn the_node_switch_takes_launches_through_the_engines_node_path() {
    use ddptop::app::target::LaunchTarget;
    let d = tempfile::tempdir().unwrap();
    let mut opts = EngineOptions::new(d.path().to_path_buf());
    opts.history = 0;
    opts.sim_speed = 50.0;
    let mut nodes = ddptop::supervisor::nodes::NodesOptions::new(vec!["a".into(), "b".into()]);
    nodes.listen = Some("127.0.0.1:0".parse().unwrap());
    opts.nodes = Some(nodes);
    let mut st = State::new(HostInfo {
        hostname: "a".into(),
        backend: ddptop::run::HostBackend::Gloo,
        ..Default::default()
    });
    st.max_k = 2;
    let mut e = Engine::start(opts, st).unwrap();
    e.set_all_nodes(false);
    let mut c = Controller::new(Template::new(Backend::Sim, None));
    let mut v = View::default();

    c.handle(&mut e, &mut v, Action::ToggleNodes);
    assert!(last_msg(&e).starts_with("no other nodes: add hosts = [\"a\", \"OTHER-HOST\"]"));
    assert_eq!(e.state().max_k, 2);

    e.state_mut().next.target = LaunchTarget {
        hosts: vec!["a".into(), "b".into()],
        local_max_k: 2,
        ..Default::default()
    };
    c.handle(&mut e, &mut v, Action::ToggleNodes);
    assert!(e.state().next.target.all, "{}", last_msg(&e));
    assert_eq!(e.state().max_k, 4, "k≤ counts both nodes");
    assert_eq!(e.state().next.target.badge().as_deref(), Some("nodes: 2"));
    c.handle(&mut e, &mut v, Action::Launch { k: 1 });
    assert!(
        last_msg(&e).contains("k=1 does not split evenly over 2 nodes"),
        "the multi-node plan read the launch: {}",
        last_msg(&e)
    );
    assert!(e.state().runs.is_empty());

    c.handle(&mut e, &mut v, Action::ToggleNodes);
    assert_eq!(last_msg(&e), "next launches: this node only");
    assert_eq!(e.state().max_k, 2);
    c.handle(&mut e, &mut v, Action::Launch { k: 1 });
    assert_eq!(e.state().runs.len(), 1, "{}", last_msg(&e));
    let id = e.state().runs[0].id.clone();
    e.wait_final(&id).await;
    e.shutdown(false).await;
}

/// Enter opens the selected run's details and focuses it, Esc closes them (then the help, the
/// zoom); z toggles the zoom; on gloo an NCCL toggle changes nothing and says why.
async fn details_zoom_and_gloo_toggles() {
    let d = tempfile::tempdir().unwrap();
    let mut e = engine(d.path(), 0);
    let mut c = Controller::new(Template::new(Backend::Sim, None));
    let mut v = View::default();
    c.handle(&mut e, &mut v, Action::Launch { k: 1 });
    let id = e.state().runs[0].id.clone();
    v.focused = None;
    c.handle(&mut e, &mut v, Action::Focus);
    assert!(v.detail);
    assert_eq!(v.focused.as_deref(), Some(id.as_str()));
    c.handle(&mut e, &mut v, Action::Help);
    c.handle(&mut e, &mut v, Action::Close);
    assert!(!v.show_help && v.detail, "Esc closes the help first");
    c.handle(&mut e, &mut v, Action::Close);
    assert!(!v.detail);
    c.handle(&mut e, &mut v, Action::Zoom);
    assert!(v.zoom);
    c.handle(&mut e, &mut v, Action::Close);
    assert!(!v.zoom);
    e.state_mut().host.backend = ddptop::run::HostBackend::Gloo;
    let before = e.state().next.nccl.clone();
    c.handle(&mut e, &mut v, Action::Toggle(NcclVar::P2pDisable));
    assert_eq!(e.state().next.nccl, before);
    assert!(
        last_msg(&e).contains("gloo runs don't read it"),
        "{}",
        last_msg(&e)
    );
    e.wait_final(&id).await;
    e.shutdown(false).await;
}

async fn toggles_navigation_and_limits() {
    let d = tempfile::tempdir().unwrap();
    let mut e = engine(d.path(), 2);
    let mut c = Controller::new(Template::new(Backend::Sim, None));
    let mut v = View::default();

    c.handle(&mut e, &mut v, Action::Toggle(NcclVar::ShmUseCudaMemcpy));
    assert_eq!(
        e.state().next.nccl.get("NCCL_SHM_USE_CUDA_MEMCPY"),
        Some("1")
    );
    c.handle(&mut e, &mut v, Action::Toggle(NcclVar::ShmUseCudaMemcpy));
    assert!(e.state().next.nccl.is_default());
    c.handle(&mut e, &mut v, Action::Toggle(NcclVar::P2pDisable));
    assert_eq!(e.state().next.nccl.get("NCCL_P2P_DISABLE"), Some("1"));
    // NVLink multicast: off by default (a visible setting), the key turns it on for NCCL.
    assert_eq!(e.state().next.nccl.get("NCCL_NVLS_ENABLE"), Some("0"));
    c.handle(&mut e, &mut v, Action::Toggle(NcclVar::NvlsEnable));
    assert_eq!(e.state().next.nccl.get("NCCL_NVLS_ENABLE"), None);
    assert!(
        last_msg(&e).contains("NCCL_NVLS_ENABLE unset"),
        "{}",
        last_msg(&e)
    );
    c.handle(&mut e, &mut v, Action::Toggle(NcclVar::NvlsEnable));
    assert_eq!(e.state().next.nccl.get("NCCL_NVLS_ENABLE"), Some("0"));

    c.handle(&mut e, &mut v, Action::SwitchExperiment);
    assert_eq!(e.state().next.experiment, Experiment::Strong);
    c.handle(&mut e, &mut v, Action::SwitchExperiment);
    assert_eq!(e.state().next.experiment, Experiment::Fsdp);
    c.handle(&mut e, &mut v, Action::SwitchExperiment);
    assert_eq!(e.state().next.experiment, Experiment::Jax);
    assert!(last_msg(&e).contains("Receipt"), "{}", last_msg(&e));
    c.handle(&mut e, &mut v, Action::SwitchExperiment);
    assert_eq!(e.state().next.experiment, Experiment::Handrolled);
    assert!(last_msg(&e).contains("Deficits pane"), "{}", last_msg(&e));
    c.handle(&mut e, &mut v, Action::SwitchExperiment);
    assert_eq!(e.state().next.experiment, Experiment::Zero1);
    assert!(last_msg(&e).contains("Memory pane"), "{}", last_msg(&e));
    c.handle(&mut e, &mut v, Action::SwitchExperiment);
    assert_eq!(e.state().next.experiment, Experiment::Weak);

    // k=4 on a 2-GPU machine: a clear message, no launch.
    c.handle(&mut e, &mut v, Action::Launch { k: 4 });
    assert!(e.state().runs.is_empty());
    assert!(
        last_msg(&e).contains("needs 4 GPUs; this machine has 2"),
        "{}",
        last_msg(&e)
    );

    // Tab walks every pane of a page (Runs, Scaling; GPUs, Ranks; Timeline, Probe, Bench; Log),
    // then the next page.
    let pages: Vec<(Pane, u8)> = (0..8)
        .map(|_| {
            c.handle(&mut e, &mut v, Action::NextPane);
            (v.pane, v.sub)
        })
        .collect();
    assert_eq!(
        pages,
        [
            (Pane::Runs, 1),
            (Pane::Gpus, 0),
            (Pane::Gpus, 1),
            (Pane::Timeline, 0),
            (Pane::Timeline, 1),
            (Pane::Timeline, 2),
            (Pane::Log, 0),
            (Pane::Runs, 0),
        ]
    );

    c.handle(&mut e, &mut v, Action::Up);
    assert_eq!(v.selected, 0);
    c.handle(&mut e, &mut v, Action::Down);
    assert_eq!(v.selected, 0, "no runs: stays");
    assert_eq!(c.handle(&mut e, &mut v, Action::Help), Flow::Continue);
    assert!(v.show_help);
    c.handle(&mut e, &mut v, Action::Help);
    assert!(!v.show_help);
    // Nothing to freeze yet: the timeline stays live and says why.
    c.handle(&mut e, &mut v, Action::Freeze);
    assert_eq!(v.freeze, Freeze::Live);
    assert!(
        last_msg(&e).contains("nothing to freeze"),
        "{}",
        last_msg(&e)
    );
    assert_eq!(c.handle(&mut e, &mut v, Action::NextTheme), Flow::NextTheme);
    c.handle(&mut e, &mut v, Action::Stop);
    assert!(last_msg(&e).contains("nothing to stop"));
    assert_eq!(c.handle(&mut e, &mut v, Action::Quit), Flow::Quit);
    e.shutdown(false).await;
}

async fn launches_queue_one_at_a_time_and_stop_drops_the_sweep() {
    let d = tempfile::tempdir().unwrap();
    let mut e = engine(d.path(), 0);
    let mut c = Controller::new(Template::new(Backend::Sim, None));
    let mut v = View::default();
    c.handle(&mut e, &mut v, Action::Launch { k: 1 });
    assert_eq!(e.state().runs.len(), 1, "idle: launched at once");
    assert_eq!(e.state().runs[0].spec.k, 1);
    assert!(e.state().runs[0].is_simulated());
    c.handle(&mut e, &mut v, Action::Sweep);
    assert_eq!(e.state().runs.len(), 1, "busy: the sweep waits");
    assert_eq!(c.pending(), 3);
    assert!(last_msg(&e).contains("queued"), "{}", last_msg(&e));
    // Stopping the first run starts the queue; stopping a sweep run drops the rest of it.
    c.handle(&mut e, &mut v, Action::Stop);
    let id = e.state().runs[0].id.clone();
    e.wait_final(&id).await;
    c.pump(&mut e, &mut v);
    assert_eq!(e.state().runs.len(), 2, "next in the queue started");
    assert_eq!(c.pending(), 2);
    // The queue is on screen: rows 0 and 1 are the queued launches (the last to start on top).
    assert_eq!(e.state().queued.len(), 2);
    assert_eq!(e.state().queued[0].spec.k, 2);
    assert_eq!(v.selected_run(e.state()).map(|r| r.spec.k), Some(1));
    // x on a queued launch cancels it, and only it.
    v.selected = 0;
    assert_eq!(v.selected_queued(e.state()), Some(1));
    c.handle(&mut e, &mut v, Action::Stop);
    assert_eq!(c.pending(), 1, "the queued k=4 cancelled");
    assert!(
        last_msg(&e).contains("cancelled the queued weak k=4"),
        "{}",
        last_msg(&e)
    );
    assert_eq!(e.state().queued.len(), 1);
    let running = e.state().runs[0].id.clone();
    assert!(!e.state().runs[0].status.is_final());
    v.focus(e.state(), &running);
    assert_eq!(
        v.selected, 1,
        "the running run sits below the one queued launch"
    );
    c.handle(&mut e, &mut v, Action::Stop);
    assert_eq!(c.pending(), 0, "rest of the sweep dropped");
    let id = e.state().runs[0].id.clone();
    e.wait_final(&id).await;
    assert!(c.idle(&e));
    e.shutdown(false).await;
}

async fn probe_launches_the_probe_then_its_control_and_keeps_focus() {
    let d = tempfile::tempdir().unwrap();
    let mut e = engine(d.path(), 0);
    let mut c = Controller::new(Template::new(Backend::Sim, None));
    let mut v = View::default();
    c.handle(&mut e, &mut v, Action::Probe);
    let probe = e.state().runs[0].clone();
    assert_eq!(
        (probe.spec.experiment(), probe.spec.k, probe.spec.control),
        (Experiment::Probe, 2, false)
    );
    e.wait_final(&probe.id).await;
    c.pump(&mut e, &mut v);
    let control = e.state().runs[0].clone();
    assert!(control.spec.control && control.spec.k == 1);
    assert_eq!(control.launch.sweep, probe.launch.sweep);
    assert_eq!(
        v.focused.as_deref(),
        Some(probe.id.as_str()),
        "screens stay on the probe"
    );
    e.wait_final(&control.id).await;
    e.shutdown(false).await;
}
