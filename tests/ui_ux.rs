//! The dashboard's navigation and labels (issue 17's UX items), drawn from hand-built states:
//! progress and ETA, the visible queue, the Log's scrolling, wrapping and zoom, the run details,
//! backend-aware labels, the header at 80 columns, run ids at 200, NO_COLOR glyphs.

mod common;
use common::ui as fixtures;

use ddptop::app::{Action, Freeze, FrozenStep, Level, Pane, Queued, RunStatus};
use ddptop::keys::KeyMap;
use ddptop::protocol::{Backend, Phase};
use ddptop::run::{Experiment, HostBackend, NcclSettings, NcclVar};
use ddptop::ui::{self, Theme};
use fixtures::*;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn text(t: &Terminal<TestBackend>) -> String {
    let buf = t.backend().buffer();
    let mut s = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            s.push_str(buf[(x, y)].symbol());
        }
        s.push('\n');
    }
    s
}

/// A sim sweep k=1,2,4: k=1 done, k=2 running at 25% with a known pace, k=4 queued, and a
/// probe queued behind it.
fn sweep_in_progress() -> Screen {
    let mut st = laptop_sim_running();
    let sweep = "s1-1".to_string();
    let mut k1 = completed(4, spec(Experiment::Weak, 1, Backend::Sim), &[5_580.0]);
    k1.launch.sweep = Some(sweep.clone());
    let mut k2 = run(
        5,
        spec(Experiment::Weak, 2, Backend::Sim),
        RunStatus::Running,
    );
    live_ranks(&mut k2, 5000, false);
    k2.launch.sweep = Some(sweep.clone());
    k2.clock.total_steps = Some(400);
    k2.ranks.get_mut(&0).unwrap().step = 100;
    k2.ranks.get_mut(&0).unwrap().phase = Some(Phase::Train);
    k2.clock.step_clock.extend([(10.0, 50), (20.0, 100)]); // 5 steps/s: 300 left, 60 s
    k2.figures.throughput = vec![(1.0, 10_400.0)];
    st.runs.retain(|r| r.status.is_final());
    st.runs.insert(0, k1);
    st.runs.insert(0, k2);
    st.queued = vec![
        Queued {
            spec: spec(Experiment::Weak, 4, Backend::Sim),
            sweep: Some(sweep),
        },
        Queued {
            spec: spec(Experiment::Probe, 2, Backend::Sim),
            sweep: None,
        },
    ];
    st.view.selected = 2; // the running k=2 (below two queued rows)
    st.view.focused = Some(id(5));
    st
}

#[test]
fn runs_pane_shows_the_queue_sweep_position_and_progress_with_eta() {
    let st = sweep_in_progress();
    let t = draw(&st, 80, 24);
    let s = text(&t);
    // The last to start on top; the next one just above the runs.
    let q2 = s.find("queued #2").expect("queued #2");
    let q1 = s.find("queued #1").expect("queued #1");
    assert!(q2 < q1, "{s}");
    assert!(s.contains("sweep 3/3") && s.contains("sweep 2/3"), "{s}");
    assert!(s.contains("2 queued"), "{s}");
    // The running k=2: a bar, its share and the ETA from the first rank's pace.
    assert!(s.contains("25%"), "{s}");
    assert!(s.contains("1m00s"), "{s}");
    insta::assert_snapshot!(t.backend());
    let wide = text(&draw(&st, 200, 50));
    assert!(wide.contains("sweep 2/3"), "{wide}");
    assert!(
        wide.contains("25% 1m00s") && wide.contains("sweep 2/3"),
        "{wide}"
    );
    assert!(wide.contains("x cancels"), "{wide}");
}

#[test]
fn the_cursor_on_a_queued_row_is_not_a_run() {
    let mut st = sweep_in_progress();
    st.view.selected = 0;
    assert_eq!(st.view.selected_queued(&st.state), Some(1));
    assert!(st.view.selected_run(&st.state).is_none());
    st.view.selected = 2;
    assert_eq!(st.view.selected_run(&st.state).unwrap().id, id(5));
    // The sweep's members: k=1 ran first, k=2 runs, k=4 waits.
    assert_eq!(
        st.state.sweep_position("s1-1", Some(&id(4)), None),
        Some((1, 3))
    );
    assert_eq!(st.state.sweep_position("s1-1", None, Some(0)), Some((3, 3)));
}

fn long_log() -> Screen {
    let mut st = laptop_sim_running();
    let r = &mut st.runs[0];
    r.evidence.log_tail = (0..60).map(|i| format!("[rank 0] line {i:02}")).collect();
    r.evidence.log_tail.push_back(format!(
        "[rank 1] a long line that does not fit the pane: {} END",
        "x".repeat(120)
    ));
    st.view.pane = Pane::Log;
    st
}

#[test]
fn log_focused_keys_scroll_it_and_long_lines_wrap() {
    let mut st = long_log();
    // Follows the newest: the long line whole (wrapped), its end on screen.
    let s = text(&draw(&st, 120, 40));
    assert!(s.contains("END"), "{s}");
    assert!(!s.contains("line 05"), "{s}");
    // Up/PageUp with the Log focused scroll it, not the run selection.
    let sel = st.view.selected;
    let state = st.state.clone();
    assert!(st.view.navigate(&state, Action::PageUp));
    assert!(st.view.navigate(&state, Action::Up));
    assert_eq!(st.view.log_scroll, 11);
    assert_eq!(st.view.selected, sel);
    let s = text(&draw(&st, 120, 40));
    assert!(s.contains("scrolled ↑11"), "{s}");
    assert!(
        s.contains("line 49") && !s.contains("line 50") && !s.contains("END"),
        "{s}"
    );
    // g / Home: the oldest line; G / End: following again.
    st.view.navigate(&state, Action::Top);
    let s = text(&draw(&st, 120, 40));
    assert!(s.contains("line 00"), "{s}");
    st.view.navigate(&state, Action::Bottom);
    assert_eq!(st.view.log_scroll, 0);
    // With the Runs pane focused the same keys move the cursor.
    st.view.pane = Pane::Runs;
    st.view.navigate(&state, Action::Down);
    assert_eq!(st.view.selected, sel + 1);
    st.view.navigate(&state, Action::Bottom);
    assert_eq!(st.view.selected, state.rows() - 1);
}

#[test]
fn z_maximizes_the_focused_log() {
    let mut st = long_log();
    st.view.zoom = true;
    st.view.log_scroll = 3;
    let t = draw(&st, 80, 24);
    let s = text(&t);
    assert!(
        !s.contains("Runs·Scaling   GPUs") || s.contains("Log"),
        "{s}"
    );
    insta::assert_snapshot!(t.backend());
}

#[test]
fn enter_opens_the_runs_details_with_command_env_ranks_and_files() {
    let mut st = hung_run();
    st.state.data_dir = Some("/data/ddptop".into());
    let i = st.view.selected;
    let r = &mut st.state.runs[i];
    r.launch.command = Some(
        "/usr/bin/python3 -m torch.distributed.run --nproc-per-node 2 -m ddptop_worker train"
            .into(),
    );
    r.launch.env = [
        ("NCCL_NVLS_ENABLE".to_string(), Some("0".to_string())),
        ("NCCL_P2P_DISABLE".to_string(), None),
    ]
    .into_iter()
    .collect();
    r.launch
        .versions
        .insert("torch".into(), "2.11.0+cu130".into());
    st.view.detail = true;
    let t = draw(&st, 120, 40);
    let s = text(&t);
    let id = st.state.runs[i].id.clone();
    for want in [
        id.as_str(),
        "torch.distributed.run",
        "NCCL_NVLS_ENABLE=0",
        "unset NCCL_P2P_DISABLE",
        "torch 2.11.0+cu130",
        "rank  pid",
        "evidence",
        &format!("/data/ddptop/runs/{id}/output.log"),
        "Esc closes",
    ] {
        assert!(s.contains(want), "{want} missing:\n{s}");
    }
    insta::assert_snapshot!(t.backend());
}

#[test]
fn gloo_says_nothing_about_nccl_and_offers_no_nccl_keys() {
    let mut st = laptop_sim_running();
    st.state.host.backend = HostBackend::Gloo;
    let s = text(&draw(&st, 160, 45));
    let hints = s.lines().last().unwrap().to_string();
    let header: String = s.lines().take(2).collect::<Vec<_>>().join("\n");
    assert!(!header.contains("NCCL"), "{header}");
    assert!(header.contains("ranks are CPU processes"), "{header}");
    assert!(
        !hints.contains("SHM") && !hints.contains("P2P") && !hints.contains("NVLS"),
        "{hints}"
    );
    assert!(
        !hints.contains("weak/strong") && hints.contains("experiment"),
        "{hints}"
    );
    // Nor does any pane: the Bench pane's first hint offers `b` alone, not a toggle that gloo
    // refuses.
    assert!(!s.contains("NCCL"), "{s}");
    assert!(s.contains("b sweeps message sizes"), "{s}");
    // The simulated backend models NCCL: it says so.
    let sim = laptop_sim_running();
    let s = text(&draw(&sim, 160, 45));
    assert!(s.lines().nth(1).unwrap().contains("sim NCCL"), "{s}");
    assert!(s.contains("b sweeps message sizes; n toggles"), "{s}");
    assert!(
        !s.contains("NCCL's defaults") && !s.contains("CPU/sim"),
        "{s}"
    );
}

#[test]
fn the_defaults_preset_shows_its_name_and_keeps_the_curve() {
    let mut st = laptop_sim_running();
    let presets = NcclSettings::builtin_presets();
    st.state.next.nccl = NcclSettings::with(&presets["defaults"]);
    st.state.next.preset = Some("defaults".into());
    let s = text(&draw(&st, 120, 40));
    let line = s.lines().nth(1).unwrap();
    assert!(line.contains("preset defaults"), "{line}");
    assert!(!line.contains("-P2P") && !line.contains("unset"), "{line}");
    // Unsetting variables that are not set is no change: the same curve as plain defaults.
    let mut a = spec(Experiment::Weak, 2, Backend::Nccl);
    let b = a.clone();
    a.nccl = NcclSettings::with(&presets["defaults"]);
    assert_eq!(a.curve_key(), b.curve_key());
    let mut c = b.clone();
    c.nccl.toggle(NcclVar::P2pDisable);
    c.nccl.toggle(NcclVar::P2pDisable); // on, then off again: unset
    assert_eq!(c.curve_key(), b.curve_key());
    assert_eq!(c.nccl.short(), "default");
}

#[test]
fn header_keeps_frozen_and_the_settings_at_80_columns() {
    let mut st = gpubox_8();
    for v in [NcclVar::P2pDisable, NcclVar::ShmUseCudaMemcpy] {
        st.state.next.nccl.toggle(v);
    }
    let rid = st.state.runs[0].id.clone();
    st.view.freeze = Freeze::Frozen(Box::new(FrozenStep {
        run_id: rid,
        rank: 0,
        buckets: buckets(0, 120),
        opt_ms: None,
        data_ms: None,
        source: ddptop::app::nccl_timeline::TimelineSource::CommHook,
    }));
    let s = text(&draw(&st, 80, 24));
    let line = s.lines().nth(1).unwrap();
    assert!(line.contains("FROZEN"), "{line}");
    assert!(line.contains("NCCL"), "{line}");
    // The Runs table at 80 columns: ids and status words whole.
    for r in &st.state.runs {
        let short = &r.id[r.id.len() - 11..];
        assert!(s.contains(short), "{short} cut:\n{s}");
    }
    assert!(s.contains("▶ running") && s.contains("✓ completed"), "{s}");
}

#[test]
fn run_ids_are_never_squeezed_at_200_columns() {
    let mut st = gpubox_8();
    for r in st.state.runs.iter_mut() {
        r.spec.nccl.toggle(NcclVar::ShmUseCudaMemcpy);
        r.spec.nccl.toggle(NcclVar::P2pDisable);
        r.spec.profile = Some("a-long-profile-name".into());
    }
    for w in [200u16, 160, 130] {
        let s = text(&draw(&st, w, 50));
        for r in &st.state.runs {
            let short = &r.id[r.id.len() - 11..];
            assert!(s.contains(short), "{short} cut at {w} columns:\n{s}");
        }
    }
}

#[test]
fn no_color_timeline_bars_have_glyphs_of_their_own_in_the_legend() {
    let st = gpubox_8();
    let s = text(&draw_with(
        &st,
        240,
        70,
        &Theme::monochrome(),
        &KeyMap::default(),
    ));
    let legend = s
        .lines()
        .find(|l| l.contains("backward") && l.contains("optimizer"))
        .expect("legend");
    let glyph = |word: &str| {
        let i = legend.find(word).unwrap();
        legend[..i].trim_end().chars().last().unwrap()
    };
    let (bwd, exposed, opt) = (glyph(" backward"), glyph(" exposed"), glyph(" optimizer"));
    assert!(bwd != exposed && exposed != opt && bwd != opt, "{legend}");
    assert!(
        s.contains(exposed) && s.contains(opt),
        "glyphs drawn in the bars too"
    );
}

#[test]
fn probe_messages_and_sweep_labels_use_plain_words() {
    let st = sweep_in_progress();
    let s = text(&draw(&st, 200, 50));
    assert!(!s.contains("ProbeOn") && !s.contains("s1-1"), "{s}");
    let _ = Level::Info;
}

/// Issue 23: a k=1 baseline with the live probe on in its timed epoch makes k=2 read 2.38×,
/// 119%; every figure from it is marked, and the Scaling pane says why.
fn perturbed_baseline() -> Screen {
    let mut host = host_laptop();
    host.backend = HostBackend::Gloo;
    let mut st = Screen::new(host);
    let mut k1 = completed(1, spec(Experiment::Weak, 1, Backend::Gloo), &[42.0]);
    k1.add_caveat(ddptop::run::Caveat::perturbed(
        "the live probe ran during its timed epoch",
    ));
    let k2 = completed(2, spec(Experiment::Weak, 2, Backend::Gloo), &[50.0, 50.0]);
    st.state.runs = vec![k2, k1];
    st.view.selected = 0;
    st.view.focused = Some(id(2));
    st
}

#[test]
fn figures_from_a_perturbed_baseline_are_marked_with_the_reason() {
    let s = text(&draw(&perturbed_baseline(), 160, 40));
    assert!(
        s.contains("2.38× 119%⚠"),
        "Runs pane marks the figure:\n{s}"
    );
    assert!(
        s.contains("k=1 ⚠ no base"),
        "the baseline row says it is none:\n{s}"
    );
    assert!(
        s.contains("119%⚠"),
        "Scaling pane marks the efficiency:\n{s}"
    );
    assert!(
        s.contains(&format!("⚠ k=1 baseline {} is no baseline", id(1))),
        "and says why:\n{s}"
    );
}

/// A k=1 run and a k=2 run whose ranks did `per_rank` samples/s, on gloo.
fn k2_against(per_rank: &[f64]) -> String {
    let mut host = host_laptop();
    host.backend = HostBackend::Gloo;
    let mut st = Screen::new(host);
    let k1 = completed(1, spec(Experiment::Weak, 1, Backend::Gloo), &[100.0]);
    let k2 = completed(2, spec(Experiment::Weak, 2, Backend::Gloo), per_rank);
    st.state.runs = vec![k2, k1];
    st.view.selected = 0;
    st.view.focused = Some(id(2));
    text(&draw(&st, 160, 40))
}

#[test]
fn an_efficiency_just_above_100_percent_reads_as_ideal_and_beyond_the_spread_is_flagged() {
    // 100.2% with ranks ±1.6% apart: ideal within the noise, not a measured gain.
    let s = k2_against(&[98.6, 101.8]);
    assert!(s.contains("2.00× ≈100% vs"), "Runs pane:\n{s}");
    assert!(s.contains("≈100%"), "Scaling pane:\n{s}");
    assert!(
        !s.contains("100.2%") && !s.contains("⚠"),
        "neither shown plainly nor flagged:\n{s}"
    );
    // 103% with ranks equal: beyond the noise, shown as it is and flagged with why.
    let s = k2_against(&[103.0, 103.0]);
    assert!(s.contains("2.06× 103%⚠"), "Runs pane:\n{s}");
    assert!(s.contains("above 100% cannot be a real speedup"), "{s}");
}

#[test]
fn run_labels_say_what_runs_and_finished_ranks_are_not_finishing() {
    let mut st = Screen::new(host_laptop());
    let mut jax = completed(1, spec(Experiment::Jax, 2, Backend::Gloo), &[10.0]);
    jax.ranks
        .values_mut()
        .for_each(|r| r.phase = Some(Phase::Done));
    let hand = completed(2, spec(Experiment::Handrolled, 2, Backend::Gloo), &[10.0]);
    let mut ddp = spec(Experiment::Fsdp, 2, Backend::Gloo);
    ddp.family = ddptop::run::Family::Fsdp {
        strategy: ddptop::run::TorchStrategy::Ddp,
        optimizer: ddptop::run::OptimizerName::Adam,
    };
    let ddp = completed(3, ddp, &[5.0, 5.0]);
    let fsdp = completed(4, spec(Experiment::Fsdp, 2, Backend::Gloo), &[5.0, 5.0]);
    st.state.runs = vec![fsdp, ddp, hand, jax];
    let s = text(&draw(&st, 200, 50));
    assert!(
        s.contains("XLA CPU"),
        "jax runs XLA's CPU devices, not gloo:\n{s}"
    );
    assert!(
        s.contains("copies CPU"),
        "the hand-rolled loop copies:\n{s}"
    );
    assert!(
        s.contains("fsdp:DDP"),
        "the DDP side of the fsdp pair:\n{s}"
    );
    // The details of the finished jax run: its ranks are completed, not "finishing".
    st.view.selected = 3;
    let run = &st.state.runs[3];
    let keys = KeyMap::default();
    let theme = Theme::dark();
    let ctx = ui::Ctx {
        state: &st.state,
        view: &st.view,
        theme: &theme,
        keys: &keys,
    };
    let lines: Vec<String> = ui::detail::lines(&ctx, run)
        .iter()
        .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
        .collect();
    assert!(!lines.iter().any(|l| l.contains("finishing")), "{lines:#?}");
}

#[test]
fn the_probe_title_says_live_only_while_the_live_probe_is_on() {
    let mut host = host_laptop();
    host.backend = HostBackend::Gloo;
    let mut st = Screen::new(host);
    let mut r = run(
        1,
        spec(Experiment::Weak, 2, Backend::Gloo),
        RunStatus::Running,
    );
    live_ranks(&mut r, 4000, false);
    probe_blocks(&mut r, &[40.0, 41.0], &[35.0, 35.5]);
    r.figures.probe.iter_mut().for_each(|b| b.live = Some(true));
    // The last live block was at step 103 (blocks of 20 steps): on while training is near it.
    r.ranks.get_mut(&0).unwrap().step = 110;
    st.state.runs = vec![r];
    st.view.focused = Some(id(1));
    let s = text(&draw(&st, 160, 40));
    assert!(s.contains(" LIVE "), "{s}");
    // `p` turned it off: training went on past it, the title no longer says LIVE.
    st.state.runs[0].ranks.get_mut(&0).unwrap().step = 300;
    let s = text(&draw(&st, 160, 40));
    assert!(!s.contains(" LIVE "), "{s}");
    assert!(s.contains("in-run, off"), "{s}");
}

#[test]
fn with_no_torch_the_header_shows_no_versions_from_stored_runs() {
    let mut host = host_laptop();
    host.torch = None;
    host.nccl = None;
    let mut st = Screen::new(host);
    let mut old = completed(1, spec(Experiment::Weak, 1, Backend::Sim), &[100.0]);
    old.live = false;
    old.launch.versions.insert("torch".into(), "2.4.1".into());
    st.state.runs = vec![old];
    let s = text(&draw(&st, 160, 40));
    let header: String = s.lines().take(2).collect();
    assert!(
        !header.contains("2.4.1"),
        "a stored run's torch is not this host's: {header}"
    );
    // A run of this session reports its workers' torch: that one is shown.
    st.state.runs[0].live = true;
    let s = text(&draw(&st, 160, 40));
    let header: String = s.lines().take(2).collect();
    assert!(header.contains("torch 2.4.1"), "{header}");
}

#[test]
fn every_pane_takes_the_focus_and_z_shows_it_whole() {
    let mut st = perturbed_baseline();
    // Scaling (the Runs page's second pane), Probe and Bench (the Timeline page's second and
    // third): each zooms over the whole body, its cut lines whole.
    for (pane, sub, title, gone) in [
        (Pane::Runs, 1, "╭ Scaling", "Runs 2 this session"),
        (Pane::Timeline, 1, "╭ Probe", "╭ Timeline "),
        (Pane::Timeline, 2, "╭ Bench", "╭ Probe"),
        (Pane::Gpus, 1, "╭ Ranks worker processes", "╭ GPUs "),
    ] {
        st.view.pane = pane;
        st.view.sub = sub;
        st.view.zoom = true;
        let s = text(&draw(&st, 160, 40));
        assert!(s.contains(title), "{title}:\n{s}");
        assert!(!s.contains(gone), "{title} zoomed hides {gone}:\n{s}");
    }
    // Zoomed, the Scaling pane's caveat line is no longer cut.
    st.view.pane = Pane::Runs;
    st.view.sub = 1;
    let s = text(&draw(&st, 160, 40));
    assert!(
        s.contains("not a clean baseline: the live probe ran during its timed epoch"),
        "{s}"
    );
}

#[test]
fn an_unbuilt_next_experiment_says_so_in_the_header_and_the_runs_pane() {
    let mut st = Screen::new(host_laptop());
    st.state.next.experiment = Experiment::Handrolled;
    st.state.next.unavailable = Some(
        "the hand-rolled worker is not built: run `PATH=/v/bin:$PATH LIBTORCH_USE_PYTORCH=1 cargo build --release -p ddptop-handrolled`".into(),
    );
    let s = text(&draw(&st, 160, 40));
    assert!(s.contains("next handrolled (not built)"), "header:\n{s}");
    assert!(
        s.contains("· next handrolled (not built)"),
        "Runs pane title:\n{s}"
    );
    assert!(
        s.contains("PATH=/v/bin:$PATH LIBTORCH_USE_PYTORCH=1 cargo"),
        "the build command in the Runs pane:\n{s}"
    );
}

/// Issue 47: a gloo (CPU) and an NCCL (GPU) curve of the same model and batch on one machine.
/// No curve ever holds runs of both backends; the Scaling pane shows the selected run's backend
/// alone and its title names backend and device, as do the Timeline's, the Probe's and the
/// Bench's (which, showing both, names both).
#[test]
fn each_pane_names_the_backend_and_device_of_its_figures_and_no_curve_mixes_backends() {
    let mut st = Screen::new(host_gpubox(2));
    let g1 = completed(1, spec(Experiment::Weak, 1, Backend::Gloo), &[900.0]);
    let g2 = completed(2, spec(Experiment::Weak, 2, Backend::Gloo), &[850.0, 860.0]);
    let n1 = completed(3, spec(Experiment::Weak, 1, Backend::Nccl), &[5000.0]);
    let n2 = completed(
        4,
        spec(Experiment::Weak, 2, Backend::Nccl),
        &[4900.0, 4950.0],
    );
    let mut ga = completed(5, spec(Experiment::Allreduce, 2, Backend::Gloo), &[]);
    ga.figures.aggregate = None;
    ga.figures.bench = bench_rows(2, 1.5);
    let mut na = completed(6, spec(Experiment::Allreduce, 2, Backend::Nccl), &[]);
    na.figures.aggregate = None;
    na.figures.bench = bench_rows(2, 22.0);
    st.runs = vec![na, ga, n2, n1, g2, g1];
    for (sel, backend, device, other) in [
        (2, Backend::Nccl, "nccl GPU", "gloo CPU"),
        (4, Backend::Gloo, "gloo CPU", "nccl GPU"),
    ] {
        st.view.selected = sel;
        st.view.focused = Some(st.runs[sel].id.clone());
        let curves = ui::model::curves(&st.state, &st.view);
        assert!(!curves.is_empty());
        for c in &curves {
            assert_eq!(c.key.backend, backend);
            for p in &c.points {
                let r = st.runs.iter().find(|r| r.id == p.run_id).unwrap();
                assert_eq!(
                    r.spec.backend, backend,
                    "{} on a {backend:?} curve",
                    p.run_id
                );
            }
        }
        let s = text(&draw(&st, 160, 45));
        let line_of = |pane: &str| {
            s.lines()
                .find(|l| l.contains(&format!("╭ {pane}")))
                .unwrap_or_else(|| panic!("no {pane} pane:\n{s}"))
                .to_string()
        };
        let scaling = line_of("Scaling");
        assert!(
            scaling.contains(&format!("Scaling · {device} · samples/s"))
                && !scaling.contains(other),
            "{scaling}"
        );
        assert!(
            line_of("Timeline").contains(&format!("Timeline · {device} · ")),
            "{}",
            line_of("Timeline")
        );
        // The Bench pane shows both settings' columns: it names both.
        let bench = line_of("Bench");
        assert!(
            bench.contains("Bench · gloo CPU + nccl GPU · all-reduce"),
            "{bench}"
        );
    }
}

/// Issue 47, layout: an NCCL run with a probe, drawn at 80×24 (tabs: the Timeline page, where
/// the Probe pane is half the width) and at 120×40 (every pane at once). A title too wide for
/// its pane ends in `…`, never a silent cut, and `z` on that pane shows it whole.
#[test]
fn at_80x24_a_cut_title_says_so_and_z_shows_it_whole_and_120x40_shows_every_pane() {
    let mut st = probe_state(Backend::Nccl);
    st.view.pane = Pane::Timeline;
    let t = draw(&st, 80, 24);
    let s = text(&t);
    let probe = s
        .lines()
        .find(|l| l.contains("╭ Probe"))
        .unwrap_or_else(|| panic!("{s}"))
        .to_string();
    assert!(
        probe.contains("Probe · nccl GPU · no_sync") && probe.contains("… ╮"),
        "{probe}"
    );
    insta::assert_snapshot!("main_screen_timeline_page_80x24", t.backend());
    st.view.sub = 1;
    st.view.zoom = true;
    let s = text(&draw(&st, 80, 24));
    let id5 = id(5);
    let whole = format!("Probe · nccl GPU · no_sync · {} k=2", &id5[id5.len() - 4..]);
    assert!(s.contains(&whole), "{whole}:\n{s}");
    st.view.zoom = false;
    st.view.sub = 0;
    let t = draw(&st, 120, 40);
    let s = text(&t);
    for pane in [
        "Runs", "Scaling", "Timeline", "Probe", "Bench", "Log", "GPUs", "Ranks",
    ] {
        assert!(s.contains(&format!("╭ {pane}")), "{pane}:\n{s}");
    }
    insta::assert_snapshot!("main_screen_120x40", t.backend());
}
