//! Hand-built `State`s for the screen tests (`mod common; use common::ui as fixtures;`) and the
//! one way they draw a screen. Everything is deterministic: no clock, no I/O.
#![allow(dead_code)]

use ddptop::app::{HostInfo, Level, Message, State, View};
use ddptop::gpu::{GpuSample, GpuView, ProcStat};
use ddptop::keys::KeyMap;
use ddptop::protocol::{
    Backend, Bench, BucketSpan, Buckets, Memory, Phase, Probe, ProbeMode, Step, Timing,
};
use ddptop::run::{
    Aggregate, Experiment, HostBackend, ModelName, NcclVar, RunSpec, RunStatus, RunView,
};
use ddptop::ui::{self, Theme};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::time::Instant;

/// A screen to draw: the data and what the user is looking at. Reads and writes of the data go
/// through `Deref` (`st.runs`); the view is `st.view`.
#[derive(Debug, Clone)]
pub struct Screen {
    pub state: State,
    pub view: View,
}

impl Screen {
    pub fn new(host: HostInfo) -> Screen {
        Screen {
            state: State::new(host),
            view: View::default(),
        }
    }
}

/// The whole dashboard of `st` at `w`×`h`, dark theme, default keys.
pub fn draw(st: &Screen, w: u16, h: u16) -> Terminal<TestBackend> {
    draw_with(st, w, h, &Theme::dark(), &KeyMap::default())
}

/// The whole dashboard of `st` at `w`×`h` with this theme and key map.
pub fn draw_with(
    st: &Screen,
    w: u16,
    h: u16,
    theme: &Theme,
    keys: &KeyMap,
) -> Terminal<TestBackend> {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    let ctx = ui::Ctx {
        state: &st.state,
        view: &st.view,
        theme,
        keys,
    };
    t.draw(|f| ui::draw(f, &ctx)).unwrap();
    t
}

impl std::ops::Deref for Screen {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl std::ops::DerefMut for Screen {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

pub fn host_laptop() -> HostInfo {
    HostInfo {
        hostname: "laptop".into(),
        gpu_summary: None,
        interconnect: None,
        backend: HostBackend::Sim {
            profile: Some("h200-nvlink".into()),
        },
        torch: None,
        nccl: None,
    }
}

pub fn host_gpubox(n: usize) -> HostInfo {
    HostInfo {
        hostname: "gpubox".into(),
        gpu_summary: Some(format!("{n}× NVIDIA H200")),
        interconnect: Some("NVLink (18 links/GPU)".into()),
        backend: HostBackend::Nccl,
        torch: Some("2.11.0+cu130".into()),
        nccl: Some("2.28.9".into()),
    }
}

pub fn spec(exp: Experiment, k: u32, backend: Backend) -> RunSpec {
    RunSpec {
        model: ModelName::Resnet18,
        ..RunSpec::new(exp, k, backend)
    }
}

/// A run id whose time part orders runs: `r20261130-0115SS-xxxx`.
pub fn id(n: u32) -> String {
    format!("r20261130-0115{:02}-{:04x}", n % 60, 0x3f20 + n)
}

pub fn run(n: u32, spec: RunSpec, status: RunStatus) -> RunView {
    let mut r = RunView::new(
        id(n),
        spec,
        Instant::now(),
        1_764_465_300.0 + n as f64 * 60.0,
    );
    r.status = status;
    if status.is_final() {
        r.clock.ended_unix = Some(r.clock.started_unix + 50.0);
    }
    r
}

/// A completed throughput run with `per_rank` samples/s on each of its k ranks.
pub fn completed(n: u32, spec: RunSpec, per_rank: &[f64]) -> RunView {
    let mut r = run(n, spec, RunStatus::Completed);
    set_aggregate(&mut r, per_rank);
    for rk in r.ranks.values_mut() {
        rk.said_bye = true;
        rk.step = 468;
    }
    r
}

pub fn set_aggregate(r: &mut RunView, per_rank: &[f64]) {
    let per_rank: Vec<f64> = per_rank.to_vec();
    r.figures.aggregate = Some(Aggregate {
        samples_per_s: per_rank.iter().sum(),
        rank_min: per_rank.iter().copied().fold(f64::INFINITY, f64::min),
        rank_max: per_rank.iter().copied().fold(0.0, f64::max),
        per_rank,
    });
}

pub fn step(rank: u32, step: u64) -> Step {
    Step {
        rank,
        step,
        epoch: 1,
        t: 10.0,
        warmup: false,
        sync: true,
        samples: 256,
        fwd_ms: 14.0,
        bwd_ms: 28.0,
        opt_ms: 2.4,
        data_ms: 0.3,
        step_ms: 45.1,
        timing: Timing::Model,
        fused: None,
        loss: None,
        every: None,
        t_bwd: None,
        sync_ms: None,
        exposed_ms: None,
    }
}

/// Three ResNet-18-like buckets: the first two hidden under backward, the last one exposed.
pub fn buckets(rank: u32, step: u64) -> Buckets {
    Buckets {
        rank,
        step,
        t: 10.0,
        rebuilt: false,
        bwd_compute_ms: 28.0,
        exposed_ms: 3.1,
        buckets: vec![
            BucketSpan {
                index: 0,
                bytes: 2_048_000,
                ready_ms: 6.0,
                start_ms: 6.0,
                done_ms: 7.2,
                kernel_ms: None,
            },
            BucketSpan {
                index: 1,
                bytes: 26_214_400,
                ready_ms: 15.0,
                start_ms: 15.0,
                done_ms: 22.5,
                kernel_ms: None,
            },
            BucketSpan {
                index: 2,
                bytes: 16_449_000,
                ready_ms: 26.5,
                start_ms: 26.5,
                done_ms: 31.1,
                kernel_ms: None,
            },
        ],
        start_inferred: None,
    }
}

/// Give every rank of `r` a pid, device, steps and a timeline.
pub fn live_ranks(r: &mut RunView, first_pid: u32, on_gpu: bool) {
    for (i, rk) in r.ranks.values_mut().enumerate() {
        rk.pid = Some(first_pid + i as u32);
        rk.device = Some(if on_gpu {
            format!("cuda:{i}")
        } else {
            "cpu".into()
        });
        rk.connected = true;
        rk.step = 120 + i as u64;
        rk.phase = Some(Phase::Train);
        rk.last_step = Some(step(rk.rank, 120));
        rk.recent_step_ms = [45.0, 45.2, 44.9, 45.1].into_iter().collect();
        rk.buckets = Some(buckets(rk.rank, 120));
        rk.memory = Some(Memory {
            rank: rk.rank,
            step: 120,
            t: 10.0,
            allocated_bytes: Some(3 << 30),
            reserved_bytes: Some(4 << 30),
            peak_bytes: Some(5 << 30),
            ..Default::default()
        });
    }
}

pub fn probe_blocks(run: &mut RunView, synced: &[f64], no_sync: &[f64]) {
    let mut b = 0;
    for (s, n) in synced.iter().zip(no_sync) {
        for (mode, ms) in [(ProbeMode::Synced, *s), (ProbeMode::NoSync, *n)] {
            run.figures.probe.push(Probe {
                rank: 0,
                step: 100 + b as u64,
                t: 5.0 + b as f64,
                block: b,
                mode,
                steps: 20,
                median_ms: ms,
                min_ms: ms - 0.3,
                max_ms: ms + 0.4,
                live: None,
            });
            b += 1;
        }
    }
}

/// nccl-tests-like busbw rows for sizes 1K..256M (powers of 4), peaking at `peak` GB/s.
pub fn bench_rows(k: u32, peak: f64) -> Vec<Bench> {
    let mut v = Vec::new();
    let mut bytes: u64 = 1024;
    while bytes <= 256 << 20 {
        let frac = (bytes as f64).log2() / 28.0;
        let bus = peak * frac.powi(4);
        let factor = 2.0 * (k as f64 - 1.0) / k as f64;
        let alg = bus / factor;
        v.push(Bench {
            rank: 0,
            step: 0,
            t: 1.0,
            op: "all_reduce".into(),
            bytes,
            dtype: "float32".into(),
            iters: 20,
            time_us: bytes as f64 / (alg * 1e3),
            algbw_gbs: alg,
            busbw_gbs: bus,
        });
        bytes *= 4;
    }
    v
}

pub fn gpus(n: usize, pids: &[(usize, u32)]) -> Vec<GpuView> {
    (0..n)
        .map(|i| {
            let util = ((i * 37 + 11) % 100) as u32;
            GpuView {
                latest: GpuSample {
                    index: i as u32,
                    name: Some("NVIDIA H200".into()),
                    util_pct: Some(util),
                    mem_used: Some((20 + i as u64 * 9) << 30),
                    mem_total: Some(143_771 << 20),
                    power_w: Some(120.0 + util as f64 * 5.0),
                    power_limit_w: Some(700.0),
                    sm_clock_mhz: Some(1_980),
                    temp_c: Some(35 + util / 3),
                    link_rx_kbs: Some(u64::from(util) * 1_200_000),
                    link_tx_kbs: Some(u64::from(util) * 1_190_000),
                    pids: pids
                        .iter()
                        .filter(|(g, _)| *g == i)
                        .map(|(_, p)| *p)
                        .collect(),
                    error: None,
                    link: Some("NVLink"),
                },
                util_history: (0..60u64).map(|t| (t * 7 + i as u64 * 13) % 101).collect(),
            }
        })
        .collect()
}

pub fn msg(level: Level, run: Option<&str>, text: &str) -> Message {
    Message {
        unix: 1_764_465_300.0,
        level,
        run: run.map(str::to_string),
        text: text.into(),
    }
}

/// Laptop, no NVML, a SIMULATED weak run at k=2 in progress plus two stored runs.
pub fn laptop_sim_running() -> Screen {
    let mut st = Screen::new(host_laptop());
    st.gpu_note = Some(
        "NVML not available: libnvidia-ml.so.1 not found (no NVIDIA driver) — GPU rows off, everything else works"
            .into(),
    );
    let mut running = run(
        3,
        spec(Experiment::Weak, 2, Backend::Sim),
        RunStatus::Running,
    );
    live_ranks(&mut running, 4242, false);
    running.figures.throughput = (0..40)
        .map(|t| (t as f64, 9_000.0 + (t as f64 * 40.0).min(1_900.0)))
        .collect();
    running.evidence.log_tail = [
        "[rank 0] Info: epoch 0 warm-up done (discarded)",
        "[rank 1] Info: epoch 0 warm-up done (discarded)",
        "[rank 0] Info: step 120 45.1 ms",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let mut k1 = completed(1, spec(Experiment::Weak, 1, Backend::Sim), &[5_580.0]);
    k1.live = false;
    let mut k2old = completed(
        2,
        spec(Experiment::Weak, 2, Backend::Sim),
        &[5_470.0, 5_452.0],
    );
    k2old.live = false;
    st.runs = vec![running, k2old, k1];
    st.view.selected = 0;
    st.view.focused = Some(id(3));
    st.proc_stats.insert(
        4242,
        ProcStat {
            cpu_pct: 97.5,
            rss_bytes: 1_900 << 20,
        },
    );
    st.proc_stats.insert(
        4243,
        ProcStat {
            cpu_pct: 95.0,
            rss_bytes: 1_880 << 20,
        },
    );
    st.messages.push_back(msg(
        Level::Info,
        Some(&id(3)),
        "launched weak k=2 on sim (SIMULATED)",
    ));
    st
}

/// 8 H200s, a weak k=4 run in progress on GPUs 0-3, a completed k=1/k=2 curve and a strong curve.
pub fn gpubox_8() -> Screen {
    let mut st = Screen::new(host_gpubox(8));
    st.max_k = 8;
    let mut running = run(
        9,
        spec(Experiment::Weak, 4, Backend::Nccl),
        RunStatus::Running,
    );
    live_ranks(&mut running, 5100, true);
    running.figures.throughput = (0..50)
        .map(|t| (t as f64, 21_000.0 + (t % 7) as f64 * 100.0))
        .collect();
    running
        .launch
        .versions
        .insert("torch".into(), "2.11.0+cu130".into());
    let k1 = completed(1, spec(Experiment::Weak, 1, Backend::Nccl), &[5_600.0]);
    let k2 = completed(
        2,
        spec(Experiment::Weak, 2, Backend::Nccl),
        &[5_490.0, 5_470.0],
    );
    let s1 = completed(3, spec(Experiment::Strong, 1, Backend::Nccl), &[5_610.0]);
    let s2 = completed(
        4,
        spec(Experiment::Strong, 2, Backend::Nccl),
        &[5_100.0, 5_080.0],
    );
    st.runs = vec![running, s2, s1, k2, k1];
    st.view.focused = Some(id(9));
    st.gpus = gpus(8, &[(0, 5100), (1, 5101), (2, 5102), (3, 5103), (6, 777)]);
    for (i, p) in (5100..5104).enumerate() {
        st.proc_stats.insert(
            p,
            ProcStat {
                cpu_pct: 100.0 + i as f32,
                rss_bytes: 6 << 30,
            },
        );
    }
    st
}

/// A hung NCCL run with the watchdog's report, focused.
pub fn hung_run() -> Screen {
    let mut st = gpubox_8();
    st.gpus = gpus(2, &[]);
    st.host = host_gpubox(2);
    st.max_k = 2;
    let mut h = run(
        10,
        spec(Experiment::Weak, 2, Backend::Nccl),
        RunStatus::Hung,
    );
    h.spec.nccl.toggle(NcclVar::ShmUseCudaMemcpy);
    live_ranks(&mut h, 6100, true);
    h.reason = Some(
        "hung: no step progress for 12.0 s (threshold 10.0 s); ranks alive (process tree stopped with SIGKILL)"
            .into(),
    );
    h.evidence.hang_report = vec![
        "hang detected: no step progress for 12.0 s (threshold 10.0 s)".into(),
        "rank 0: step 120, phase Some(Train), last progress 12.0 s ago".into(),
    ];
    // Figures it had before hanging must not show as results.
    set_aggregate(&mut h, &[5_000.0, 5_000.0]);
    st.runs = vec![h, st.runs[3].clone(), st.runs[4].clone()];
    st.view.selected = 0;
    st.view.focused = Some(id(10));
    st.messages.push_back(msg(
        Level::Error,
        Some(&id(10)),
        "HUNG: no step progress for 12.0 s; collecting evidence, then stopping it",
    ));
    st
}

/// A failed run that had partial figures, after a completed one at the same k.
pub fn failed_run() -> Screen {
    let mut st = Screen::new(host_gpubox(2));
    st.max_k = 2;
    st.gpus = gpus(2, &[]);
    let ok = completed(
        1,
        spec(Experiment::Weak, 2, Backend::Nccl),
        &[5_491.0, 5_473.0],
    );
    let mut bad = run(
        2,
        spec(Experiment::Weak, 2, Backend::Nccl),
        RunStatus::Failed,
    );
    bad.reason =
        Some("launcher exited with code 1; rank 1 exited with 3: CUDA error: out of memory".into());
    set_aggregate(&mut bad, &[7_777.0, 7_777.0]);
    bad.figures.throughput = vec![(1.0, 15_554.0)];
    bad.evidence.log_tail = ["[rank 1] Error: CUDA error: out of memory".to_string()]
        .into_iter()
        .collect();
    st.runs = vec![bad, ok];
    st.view.selected = 0;
    st.view.focused = Some(id(2));
    st
}

/// A probe run with a k=1 control and a bench run to predict from.
pub fn probe_state(backend: Backend) -> Screen {
    let mut st = if backend == Backend::Sim {
        Screen::new(host_laptop())
    } else {
        Screen::new(host_gpubox(2))
    };
    let mut p = completed(5, spec(Experiment::Probe, 2, backend), &[]);
    p.figures.aggregate = None;
    probe_blocks(&mut p, &[45.6, 45.9, 45.4], &[43.1, 43.3, 43.0]);
    p.figures.bucket_bytes = vec![2_048_000, 26_214_400, 16_449_000];
    let mut c = completed(4, spec(Experiment::Probe, 1, backend), &[]);
    c.figures.aggregate = None;
    c.spec.control = true;
    probe_blocks(&mut c, &[40.5, 40.6, 40.4], &[40.3, 40.4, 40.2]);
    let mut b = completed(3, spec(Experiment::Allreduce, 2, backend), &[]);
    b.figures.aggregate = None;
    b.figures.bench = bench_rows(2, 360.0);
    // NCCL's log names a transport; a simulated bench ran no NCCL and has none to show.
    if backend != Backend::Sim {
        b.set_transport(Some("via P2P/CUMEM".into()));
    }
    st.runs = vec![p, c, b];
    st.view.focused = Some(id(5));
    st
}

/// Two bench settings: defaults and NCCL_SHM_USE_CUDA_MEMCPY=1 on a P2P-less box.
pub fn bench_state() -> Screen {
    let mut st = Screen::new(host_gpubox(2));
    st.host.interconnect = Some("PCIe Gen4 x16".into());
    let mut a = completed(1, spec(Experiment::Allreduce, 2, Backend::Nccl), &[]);
    a.figures.aggregate = None;
    a.figures.bench = bench_rows(2, 4.5);
    a.set_transport(Some("via SHM".into()));
    let mut b = completed(2, spec(Experiment::Allreduce, 2, Backend::Nccl), &[]);
    b.figures.aggregate = None;
    b.spec.nccl.toggle(NcclVar::ShmUseCudaMemcpy);
    b.figures.bench = bench_rows(2, 22.0);
    b.set_transport(Some("via SHM/CE".into()));
    st.runs = vec![b, a];
    st.view.focused = Some(id(2));
    st.next.nccl.toggle(NcclVar::ShmUseCudaMemcpy);
    st
}

/// The fsdp experiment on 2 GPUs (or gloo CPUs): an FSDP, a ZeRO-1 and a DDP run at k=2 with Adam
/// on ResNet-18 (P = 11,175,818), their k=1 runs for the curves, and on the FSDP run the last
/// step's per-block collectives. Peaks are illustrative; state bytes are ResNet-18's exact ones.
pub fn fsdp_state(backend: Backend) -> Screen {
    use ddptop::protocol::{Collective, Comm, CommOp, Pass, Strategy};
    use ddptop::run::TorchStrategy;
    const P: u64 = 11_175_818;
    const ADAM_STEPS: u64 = 62 * 4; // Adam's scalar step per parameter tensor
    const LARGEST_UNIT: u64 = 4_721_664; // resnet_block4.1, gathered whole
    let gpu = backend == Backend::Nccl;
    let mut st = Screen::new(if gpu { host_gpubox(2) } else { host_laptop() });
    if !gpu {
        st.host.backend = HostBackend::Gloo;
    }
    let mk = |n: u32, strategy: TorchStrategy, k: u32, sps: f64| {
        let mut s = spec(Experiment::Fsdp, k, backend);
        s.family = ddptop::run::Family::Fsdp {
            strategy,
            optimizer: ddptop::run::OptimizerName::Adam,
        };
        let mut r = completed(n, s, &vec![sps; k as usize]);
        for (rank, rv) in r.ranks.iter_mut() {
            // ZeRO-1 keeps weights and gradients whole and Adam's moments for the half of the
            // parameters each rank owns (its partition, balanced by size: P/k here).
            let owned = P / k as u64;
            let (shard, optim, predicted, peak) = match strategy {
                TorchStrategy::Fsdp => (
                    P * 4 / k as u64,
                    8 * P / k as u64 + ADAM_STEPS,
                    16 * P / k as u64 + if k > 1 { 4 * LARGEST_UNIT } else { 0 },
                    5_800_000_000 - 90_000_000 * (k as u64 - 1),
                ),
                TorchStrategy::Zero1 => (
                    P * 4,
                    8 * owned + ADAM_STEPS / k as u64,
                    8 * P + 8 * owned,
                    5_850_000_000 - 45_000_000 * (k as u64 - 1),
                ),
                TorchStrategy::Ddp => (P * 4, 8 * P + ADAM_STEPS, 16 * P, 5_900_000_000),
            };
            rv.record_memory(&Memory {
                rank: *rank,
                step: 468,
                t: 30.0,
                allocated_bytes: gpu.then_some(1_200_000_000),
                reserved_bytes: gpu.then_some(7_000_000_000),
                peak_bytes: gpu.then_some(peak),
                strategy: Some(match strategy {
                    TorchStrategy::Fsdp => Strategy::Fsdp,
                    TorchStrategy::Zero1 => Strategy::Zero1,
                    TorchStrategy::Ddp => Strategy::Ddp,
                }),
                phase: Some("epoch1".into()),
                param_bytes: Some(shard),
                grad_bytes: Some(shard),
                optim_bytes: Some(optim),
                predicted_bytes: Some(predicted),
                ..Default::default()
            });
        }
        r
    };
    let mut f2 = mk(4, TorchStrategy::Fsdp, 2, 4_100.0);
    let d2 = mk(3, TorchStrategy::Ddp, 2, 4_400.0);
    let f1 = mk(2, TorchStrategy::Fsdp, 1, 4_300.0);
    let d1 = mk(1, TorchStrategy::Ddp, 1, 4_500.0);
    let z2 = mk(6, TorchStrategy::Zero1, 2, 4_300.0);
    let z1 = mk(5, TorchStrategy::Zero1, 1, 4_450.0);
    // One step of FSDP's collectives on each rank: 8 blocks + root, forward and backward.
    let units: [(&str, u64); 9] = [
        ("root", 16_458),
        ("resnet_block1.0", 74_112),
        ("resnet_block1.1", 74_112),
        ("resnet_block2.0", 230_272),
        ("resnet_block2.1", 295_680),
        ("resnet_block3.0", 920_320),
        ("resnet_block3.1", 1_181_184),
        ("resnet_block4.0", 3_673_600),
        ("resnet_block4.1", LARGEST_UNIT),
    ];
    let mut ops = Vec::new();
    let op = |op, name: &str, pass, numel: u64, start_ms, dur_ms| CommOp {
        op,
        name: name.into(),
        pass,
        bytes: 4 * numel,
        start_ms,
        dur_ms,
    };
    for (i, (name, n)) in units.iter().enumerate() {
        ops.push(op(
            Collective::AllGather,
            name,
            Pass::Fwd,
            *n,
            0.3 + 1.6 * i as f64,
            0.05 + *n as f64 / 4e7,
        ));
    }
    for (i, (name, n)) in units.iter().enumerate().rev() {
        let b = 16.0 + 2.8 * (8 - i) as f64;
        if *name != "root" {
            ops.push(op(
                Collective::AllGather,
                name,
                Pass::Bwd,
                *n,
                b,
                0.05 + *n as f64 / 4e7,
            ));
        }
        ops.push(op(
            Collective::ReduceScatter,
            name,
            Pass::Bwd,
            *n,
            b + 2.0,
            0.06 + *n as f64 / 3e7,
        ));
    }
    for rv in f2.ranks.values_mut() {
        let mut s = step(rv.rank, 468);
        s.timing = if gpu {
            Timing::CudaEvents
        } else {
            Timing::Host
        };
        s.fwd_ms = 14.0;
        s.bwd_ms = 29.0;
        s.opt_ms = 3.5;
        s.data_ms = 0.2;
        s.step_ms = 47.0;
        rv.last_step = Some(s);
        let c = Comm {
            rank: rv.rank,
            step: 468,
            t: 30.0,
            timing: if gpu {
                Timing::CudaEvents
            } else {
                Timing::Host
            },
            ops: ops.clone(),
        };
        for _ in 0..3 {
            rv.comm_totals.add(&c);
        }
        rv.comm = Some(c);
    }
    let mut d2 = d2;
    for rv in d2.ranks.values_mut() {
        // DDP's two bucket all-reduces of the 44.7 MB of gradients.
        let c = Comm {
            rank: rv.rank,
            step: 468,
            t: 30.0,
            timing: if gpu {
                Timing::CudaEvents
            } else {
                Timing::Host
            },
            ops: vec![
                op(
                    Collective::AllReduce,
                    "bucket0",
                    Pass::Bwd,
                    2_362_000,
                    22.0,
                    0.9,
                ),
                op(
                    Collective::AllReduce,
                    "bucket1",
                    Pass::Bwd,
                    8_813_818,
                    40.0,
                    1.4,
                ),
            ],
        };
        rv.comm_totals.add(&c);
        rv.comm = Some(c);
    }
    st.runs = vec![f2, z2, d2, f1, z1, d1];
    st.view.focused = Some(id(4));
    st
}
