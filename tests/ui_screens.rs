//! Whole screens drawn from hand-built states into ratatui's TestBackend, kept as insta snapshots
//! (tests/snapshots/). `INSTA_UPDATE=always cargo test --test ui_screens` accepts changes.

mod common;
use common::ui as fixtures;

use ddptop::app::Pane;
use ddptop::keys::{Key, KeyMap};
use ddptop::protocol::Backend;
use ddptop::ui::Theme;
use fixtures::{Screen, draw, draw_with};
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

#[test]
fn laptop_no_gpu_sim_run_80x24() {
    let st = fixtures::laptop_sim_running();
    let t = draw(&st, 80, 24);
    let s = text(&t);
    assert!(s.contains("SIMULATED"), "{s}");
    assert!(s.contains("Runs·Scaling"), "tabs at 80x24: {s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn laptop_no_gpu_sim_run_gpus_tab() {
    let mut st = fixtures::laptop_sim_running();
    st.view.pane = Pane::Gpus;
    let t = draw(&st, 80, 24);
    let s = text(&t);
    assert!(s.contains("NVML not available"), "{s}");
    // Per-rank CPU % and RSS of the workers.
    assert!(s.contains("98") && s.contains("1.9G"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn laptop_no_gpu_sim_run_120x40_full() {
    let st = fixtures::laptop_sim_running();
    let t = draw(&st, 120, 40);
    let s = text(&t);
    assert!(s.contains("SIMULATED"));
    assert!(s.contains("Timeline") && s.contains("Probe") && s.contains("Bench"));
    insta::assert_snapshot!(t.backend());
}

#[test]
fn a_straggler_is_marked_on_its_rank_row_and_named_in_the_log() {
    let mut st = fixtures::laptop_sim_running();
    let evidence = "rank 1 at 0.66 of the fastest: data wait 23.6 ms vs 0.3 ms median; the \
                    others wait 23.4 ms for it in the all-reduce, it waits 0.2 ms";
    let run = &mut st.runs[0];
    run.straggler.named.push(ddptop::run::view::Straggler {
        rank: 1,
        score: 0.66,
        phase: "data wait".into(),
        evidence: evidence.into(),
        since: 1.6,
        step: 27,
        active: true,
    });
    run.push_tail(format!("ddptop: straggler: {evidence}"));
    let t = draw(&st, 120, 40);
    let s = text(&t);
    let row = s
        .lines()
        .find(|l| l.contains(" r1 "))
        .expect("rank 1's row");
    // The pane is narrow at 120 columns: the mark replaces the rank's phase, its cause may be
    // cut (the Log line below has it whole).
    assert!(row.contains("◆ straggler 0.66"), "{s}");
    let row0 = s
        .lines()
        .find(|l| l.contains(" r0 "))
        .expect("rank 0's row");
    assert!(!row0.contains("straggler"), "{s}");
    assert!(s.contains("ddptop: straggler: rank 1 at 0.66"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn eight_gpus_240x70() {
    let st = fixtures::gpubox_8();
    let t = draw(&st, 240, 70);
    let s = text(&t);
    assert!(s.contains("8× NVIDIA H200"));
    for i in 0..8 {
        assert!(
            s.contains(&format!("\n│{i}  H200")),
            "GPU row {i} missing:\n{s}"
        );
    }
    // GPU 0 runs rank 0 of the k=4 run; GPU 6 has a process that is not ours.
    assert!(s.contains("3f29 r0"), "{s}");
    assert!(s.contains("+1 other"), "{s}");
    assert!(!s.contains("SIMULATED"));
    insta::assert_snapshot!(t.backend());
}

#[test]
fn eight_gpus_80x24_gpus_tab() {
    let mut st = fixtures::gpubox_8();
    st.view.pane = Pane::Gpus;
    let t = draw(&st, 80, 24);
    insta::assert_snapshot!(t.backend());
}

#[test]
fn hung_run_shows_status_and_reason_not_figures() {
    let st = fixtures::hung_run();
    let t = draw(&st, 160, 45);
    let s = text(&t);
    assert!(s.contains("hung"), "{s}");
    assert!(s.contains("no step progress"), "{s}");
    assert!(
        !s.contains("10.0k"),
        "a hung run must not show its partial aggregate:\n{s}"
    );
    insta::assert_snapshot!(t.backend());
}

#[test]
fn failed_run_shows_no_stale_numbers() {
    let st = fixtures::failed_run();
    let t = draw(&st, 120, 40);
    let s = text(&t);
    assert!(s.contains("failed"));
    assert!(s.contains("out of memory"), "{s}");
    // Neither its own partial figures nor the older completed run's numbers on its row.
    assert!(!s.contains("15.6k") && !s.contains("15554"), "{s}");
    let row = s
        .lines()
        .find(|l| l.contains("011502"))
        .expect("failed run row");
    assert!(
        !row.contains("10.9k"),
        "failed row shows the other run's figure: {row}"
    );
    insta::assert_snapshot!(t.backend());
}

#[test]
fn failed_run_80x24() {
    let st = fixtures::failed_run();
    let t = draw(&st, 80, 24);
    let s = text(&t);
    assert!(s.contains("✗ failed"), "{s}");
    assert!(!s.contains("15.6k"));
    insta::assert_snapshot!(t.backend());
}

#[test]
fn probe_panel_real_backend() {
    let st = fixtures::probe_state(Backend::Nccl);
    let t = draw(&st, 80, 24);
    let s = text(&t);
    for want in [
        "synced",
        "no_sync",
        "difference",
        "k=1 ctrl",
        "predicted",
        "measured",
        "model",
    ] {
        assert!(s.contains(want), "{want} missing:\n{s}");
    }
    assert!(!s.contains("SIMULATED"));
    insta::assert_snapshot!(t.backend());
}

#[test]
fn probe_panel_simulated_is_labelled() {
    let mut st = fixtures::probe_state(Backend::Sim);
    st.view.pane = Pane::Timeline;
    // A simulated run ran no NCCL: a transport handed to it (as the fixture once did) is dropped.
    for r in &mut st.runs {
        r.set_transport(Some("via P2P/CUMEM".into()));
        assert_eq!(r.transport(), None);
    }
    let t = draw(&st, 100, 30);
    let s = text(&t);
    assert!(s.contains("SIMULATED"), "{s}");
    assert!(!s.contains("P2P/CUMEM"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn probe_without_bench_says_run_b_first() {
    let mut st = fixtures::probe_state(Backend::Nccl);
    st.runs
        .retain(|r| r.spec.experiment() != ddptop::app::Experiment::Allreduce);
    let t = draw(&st, 80, 24);
    let s = text(&t);
    assert!(
        s.contains("no allreduce run at k=2, these settings: press b"),
        "{s}"
    );
}

#[test]
fn bench_panel_two_settings_and_ratio() {
    let mut st = fixtures::bench_state();
    st.view.pane = Pane::Timeline;
    let t = draw(&st, 120, 32);
    let s = text(&t);
    assert!(s.contains("SHM_USE_CUDA_MEMCPY=1"), "{s}");
    assert!(s.contains("4.89×"), "ratio 22/4.5 missing:\n{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn help_screen_from_the_key_map() {
    let mut st = fixtures::laptop_sim_running();
    st.view.show_help = true;
    let t = draw(&st, 80, 24);
    let s = text(&t);
    assert!(s.contains("sweep k = 1, 2, 4"));
    // It fits 80×24: every line of the box whole (nothing cut with …), the hint bar below it.
    let boxed: Vec<&str> = s.lines().filter(|l| l.contains('║')).collect();
    assert!(boxed.len() >= 18, "{s}");
    for l in &boxed {
        assert!(!l.contains('…'), "cut help line: {l}");
    }
    for want in [
        "PageUp",
        "Enter / Esc",
        "z ",
        "cancel a queued launch",
        "q Ctrl-c",
    ] {
        assert!(s.contains(want), "{want} missing:\n{s}");
    }
    assert!(s.lines().last().unwrap().contains("help"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn help_shows_what_ddptop_itself_costs() {
    let mut st = fixtures::laptop_sim_running();
    st.view.show_help = true;
    let before = text(&draw(&st, 100, 30));
    assert!(
        !before.contains("ddptop: "),
        "no figure before the first read:\n{before}"
    );
    st.state.self_cost = Some(ddptop::selfcost::SelfCost {
        cpu_pct: 0.4,
        rss_mb: 31.2,
    });
    let s = text(&draw(&st, 100, 30));
    assert!(s.contains("ddptop: 0.4% CPU · 31 MB"), "{s}");
}

#[test]
fn help_follows_a_remapped_key() {
    let mut st = fixtures::laptop_sim_running();
    st.view.show_help = true;
    let mut keys = KeyMap::default();
    keys.unbind(&Key::parse("q").unwrap());
    keys.bind(Key::parse("F10").unwrap(), ddptop::app::Action::Quit);
    let t = draw_with(&st, 100, 30, &Theme::dark(), &keys);
    let s = text(&t);
    let quit = s.lines().find(|l| l.contains("quit (stops runs")).unwrap();
    assert!(quit.contains("F10") && !quit.contains(" q "), "{quit}");
    // The hint bar follows too.
    let last = s.lines().last().unwrap();
    assert!(last.contains("F10"), "{last}");
}

#[test]
fn too_small_terminal_gets_a_message() {
    let st = fixtures::gpubox_8();
    let t = draw(&st, 50, 12);
    let s = text(&t);
    assert!(s.contains("too small"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn empty_state_explains_what_to_press() {
    let st = Screen::new(fixtures::host_laptop());
    let t = draw(&st, 80, 24);
    let s = text(&t);
    assert!(s.contains("press 1, 2 or 4"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn every_theme_draws_every_fixture_at_every_size() {
    let states = [
        fixtures::laptop_sim_running(),
        fixtures::gpubox_8(),
        fixtures::hung_run(),
        fixtures::failed_run(),
        fixtures::probe_state(Backend::Sim),
        fixtures::bench_state(),
        fixtures::fsdp_state(Backend::Nccl),
        fixtures::fsdp_state(Backend::Gloo),
        Screen::new(fixtures::host_laptop()),
    ];
    let themes = ["dark", "light", "high-contrast", "monochrome"];
    for (w, h) in [
        (60, 16),
        (80, 24),
        (100, 30),
        (120, 40),
        (160, 50),
        (240, 70),
        (300, 90),
    ] {
        for st in &states {
            for pane in [Pane::Runs, Pane::Gpus, Pane::Timeline, Pane::Log] {
                for th in themes {
                    let mut s = st.clone();
                    s.view.pane = pane;
                    s.view.show_help = pane == Pane::Log;
                    draw_with(&s, w, h, &Theme::builtin(th).unwrap(), &KeyMap::default());
                }
            }
        }
    }
}

#[test]
fn memory_pane_fsdp_against_ddp_per_rank_on_gpus() {
    let mut st = fixtures::fsdp_state(Backend::Nccl);
    st.view.pane = Pane::Timeline;
    let t = draw(&st, 120, 36);
    let s = text(&t);
    // The Memory pane replaces Probe and Bench for an fsdp run.
    assert!(s.contains("Memory") && !s.contains("Probe"), "{s}");
    for want in [
        "r0 fsdp",
        "r0 zero1",
        "r0 ddp",
        "r1 fsdp",
        "r1 zero1",
        "r1 ddp",
        "peak",
        "predicted",
        "block4.1",
    ] {
        assert!(s.contains(want), "{want} missing:\n{s}");
    }
    // FSDP at k=2 holds 89.4 MB of the 178.8 MB DDP holds, ZeRO-1 134.1 MB (8P + 8P/2);
    // ResNet-18 with Adam.
    assert!(
        s.contains("89.4 MB") && s.contains("178.8 MB") && s.contains("134.1 MB"),
        "{s}"
    );
    assert!(
        s.contains("108.3 MB"),
        "16P/k + the largest gathered block:\n{s}"
    );
    insta::assert_snapshot!(t.backend());
}

/// `ddptop run fsdp --json` carries the Memory pane's FSDP, ZeRO-1 and DDP rows for each rank
/// (both front ends launch the three: plan::request).
#[test]
fn fsdp_json_has_the_memory_comparison_the_pane_shows() {
    let st = fixtures::fsdp_state(Backend::Nccl);
    let f2 = st.runs.iter().find(|r| r.id == fixtures::id(4)).unwrap();
    let d2 = st.runs.iter().find(|r| r.id == fixtures::id(3)).unwrap();
    let z2 = st.runs.iter().find(|r| r.id == fixtures::id(6)).unwrap();
    let doc = ddptop::headless::report(&[f2, z2, d2], &Default::default(), &st.state, &[], "", "s");
    let ids = |a: &[&ddptop::run::RunView]| {
        serde_json::json!(a.iter().map(|r| r.id.as_str()).collect::<Vec<_>>())
    };
    for (run, others) in [
        (&doc["runs"][0], ids(&[z2, d2])),
        (&doc["runs"][1], ids(&[f2, d2])),
        (&doc["runs"][2], ids(&[f2, z2])),
    ] {
        let c = &run["memory_comparison"];
        assert_eq!(c["other_run_ids"], others, "{c:#}");
        let rows = c["ranks"].as_array().unwrap();
        assert_eq!(rows.len(), 6, "2 ranks x 3 strategies: {c:#}");
        for rank in [0, 1] {
            let state = |strategy: &str| {
                rows.iter()
                    .find(|x| x["rank"] == rank && x["strategy"] == strategy)
                    .unwrap_or_else(|| panic!("rank {rank} {strategy}: {c:#}"))["state_bytes"]
                    .as_u64()
                    .unwrap()
            };
            // ResNet-18 with Adam at k=2: FSDP holds half of DDP's 16P (+ Adam's step counts).
            assert_eq!(state("ddp"), 16 * 11_175_818 + 248);
            assert_eq!(state("fsdp"), 8 * 11_175_818 + 248);
            // ZeRO-1: 8P whole + Adam's 8 bytes for the half each rank owns (+ its steps).
            assert_eq!(state("zero1"), 12 * 11_175_818 + 124);
        }
    }
    // Without the other strategy's run, the JSON says which launch supplies it.
    let alone = ddptop::headless::report(
        &[f2],
        &Default::default(),
        &ddptop::app::State::new(st.host.clone()),
        &[],
        "",
        "s",
    );
    let c = &alone["runs"][0]["memory_comparison"];
    assert_eq!(c["other_run_ids"], serde_json::json!([]), "{c:#}");
    let missing = c["missing"].as_str().unwrap();
    assert!(
        missing.contains("--strategy zero1") && missing.contains("--strategy ddp"),
        "{c:#}"
    );
}

#[test]
fn memory_pane_on_cpu_says_the_peak_is_unavailable() {
    let mut st = fixtures::fsdp_state(Backend::Gloo);
    st.view.pane = Pane::Timeline;
    let t = draw(&st, 120, 36);
    let s = text(&t);
    assert!(s.contains("peak unavailable on CPU"), "{s}");
    assert!(s.contains("RS(=AR on gloo)"), "{s}");
    insta::assert_snapshot!(t.backend());
}

#[test]
fn the_timeline_draws_nccls_collectives_and_names_its_source() {
    // A k=2 NCCL run fed the plugin's messages of two DDP steps (tests/fixtures/nccl/
    // ddp_steps_k2.jsonl, hand-written in the plugin's format) and no hook timeline.
    let mut st = fixtures::hung_run();
    let r = &mut st.runs[0];
    r.status = ddptop::app::RunStatus::Running;
    r.reason = None;
    r.evidence.hang_report.clear();
    for rv in r.ranks.values_mut() {
        rv.buckets = None;
        rv.recent_buckets.clear();
    }
    let now = std::time::Instant::now();
    for line in include_str!("fixtures/nccl/ddp_steps_k2.jsonl").lines() {
        let msg = ddptop::protocol::parse_worker(line).unwrap();
        ddptop::app::reduce::apply_worker(r, &msg, now);
    }
    let s = text(&draw(&st, 160, 45));
    assert!(s.contains("rank 0 · NCCL profiler"), "{s}");
    assert!(s.contains("step 12 · 3 buckets 44.7 MB"), "{s}");
    // Without the plugin's collectives the same pane has nothing to draw and says so.
    st.runs[0].collectives = Default::default();
    let s = text(&draw(&st, 160, 45));
    assert!(!s.contains("rank 0 · NCCL profiler"), "{s}");
    assert!(s.contains("rank 0 · comm hook (CUDA events)"), "{s}");
}
