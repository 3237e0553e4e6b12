//! Report plots: the SVGs carry their series, labels and SIMULATED titles; the PNGs decode to
//! the advertised size with more than a blank canvas on them.

mod common;
use common::report as fixture;

use ddptop::report::plot::{BENCH_SIZE, Plot, SCALING_SIZE};

fn decode(png_bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let dec = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = dec.read_info().expect("a PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// The text of every <text> element of an SVG, in order.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

fn has(svg: &str, label: &str) -> bool {
    texts(svg).iter().any(|t| t == label)
}

/// Distinct colours in an RGB buffer: a blank or text-only canvas has few.
fn colours(rgb: &[u8]) -> usize {
    let mut set = std::collections::HashSet::new();
    for px in rgb.chunks(3) {
        set.insert((px[0], px[1], px[2]));
    }
    set.len()
}

#[test]
fn scaling_svg_has_measured_ideal_and_predicted_series_and_both_panels() {
    let r = fixture::measured();
    let svg = Plot::Scaling(&r.curves).svg().unwrap();
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"));
    for label in [
        "Scaling: samples/s and efficiency vs k",
        "samples/s (sum over ranks)",
        "efficiency = speedup / k",
        "measured · weak · batch 256/rank · gloo tiny · defaults",
        "ideal: k × the k=1 baseline",
        "predicted (cost model) · weak · batch 256/rank · gloo tiny · defaults",
        "ideal 100%",
        "k (ranks)",
        "90%",
        "80%",
    ] {
        assert!(has(&svg, label), "missing {label:?} in {:?}", texts(&svg));
    }
    assert!(!svg.contains("SIMULATED"));
    // The dashed ideal line and the measured polyline are both drawn.
    assert!(svg.matches("<polyline").count() >= 2);
}

#[test]
fn simulated_plots_say_so_in_the_title() {
    let r = fixture::simulated();
    let svg = Plot::Scaling(&r.curves).svg().unwrap();
    assert!(has(
        &svg,
        "SIMULATED — Scaling: samples/s and efficiency vs k"
    ));
    let svg = Plot::Timeline(&r.timelines[0]).svg().unwrap();
    assert!(has(
        &svg,
        "SIMULATED — Bucket timeline: run r2 k=2 rank 0 step 116"
    ));
}

#[test]
fn bench_svg_has_one_series_per_setting_with_transport_on_a_log_size_axis() {
    let r = fixture::measured();
    let settings = r.bench_settings();
    let svg = Plot::Bench(&settings).svg().unwrap();
    assert!(has(&svg, "defaults via P2P/CUMEM (k=2)"));
    assert!(has(&svg, "NCCL_SHM_USE_CUDA_MEMCPY=1 via SHM/CE (k=2)"));
    assert!(has(&svg, "message size (bytes, log scale)"));
    // Power-of-two size labels as nccl-tests prints them, every other power of two.
    for size in ["1K", "4K", "64K", "4M", "64M"] {
        assert!(has(&svg, size), "missing {size} in {:?}", texts(&svg));
    }
}

#[test]
fn timeline_svg_names_each_row_and_the_hidden_and_exposed_parts() {
    let r = fixture::measured();
    let svg = Plot::Timeline(&r.timelines[0]).svg().unwrap();
    for label in [
        "Bucket timeline: run r2 k=2 rank 0 step 116",
        "backward",
        "bucket 1 · 26.5 MB",
        "bucket 0 · 9.5 MB",
        "optimizer",
        "all-reduce hidden under backward",
        "all-reduce exposed (6.00 ms in all)",
    ] {
        assert!(has(&svg, label), "missing {label:?} in {:?}", texts(&svg));
    }
    assert!(svg.matches("<rect").count() >= 5);
}

#[test]
fn pngs_decode_at_the_plot_size_with_the_series_colours() {
    let r = fixture::measured();
    let settings = r.bench_settings();
    for (plot, size) in [
        (Plot::Scaling(&r.curves), SCALING_SIZE),
        (Plot::Bench(&settings), BENCH_SIZE),
    ] {
        let (w, h, rgb) = decode(&plot.png().unwrap());
        assert_eq!((w, h), size);
        assert!(colours(&rgb) > 20, "a nearly blank PNG");
    }
    let t = Plot::Timeline(&r.timelines[0]);
    let (w, h, rgb) = decode(&t.png().unwrap());
    assert_eq!((w, h), t.size());
    // The exposed all-reduce colour (Okabe–Ito vermillion) is on the canvas.
    assert!(rgb.chunks(3).any(|p| p == [213, 94, 0]));
}

#[test]
fn an_empty_plot_is_an_error_not_a_blank_image() {
    let err = Plot::Scaling(&[]).svg().unwrap_err();
    assert_eq!(err.to_string(), "nothing to plot");
    assert!(Plot::Bench(&[]).png().is_err());
}

#[test]
fn a_timeline_without_optimizer_timing_has_no_optimizer_row() {
    let mut t = fixture::measured().timelines.remove(0);
    t.optimizer_ms = None;
    let plot = Plot::Timeline(&t);
    let svg = plot.svg().unwrap();
    assert!(!has(&svg, "optimizer"));
    assert!(!texts(&svg).iter().any(|s| s.starts_with("optimizer ")));
    assert!(has(&svg, "bucket 0 · 9.5 MB"));
    let mut with = fixture::measured().timelines.remove(0);
    with.optimizer_ms = Some(2.0);
    assert!(Plot::Timeline(&with).size().1 > plot.size().1);
}

/// Figures an older ddptop stored from a hostile worker (1.7e308 samples/s, NaN efficiency, a
/// 1e300 GB/s bench row) draw in well under a second instead of spinning in the plotting library.
#[test]
fn absurd_stored_figures_do_not_hang_the_plots() {
    let r = fixture::measured();
    let mut curves = r.curves.clone();
    let p = &mut curves[0].points[0];
    p.samples_per_s = 1.7e308;
    p.rank_max = 1.7e308;
    p.efficiency = Some(f64::NAN);
    curves[0].points[1].efficiency = Some(f64::INFINITY);
    let t0 = std::time::Instant::now();
    let svg = Plot::Scaling(&curves).svg().unwrap();
    assert!(has(&svg, "samples/s (sum over ranks)"));
    let mut bench = r.clone();
    if let Some(b) = bench.bench.first_mut() {
        b.busbw_gbs = 1e300;
    }
    let settings = bench.bench_settings();
    assert!(!settings.is_empty(), "the fixture has bench rows");
    Plot::Bench(&settings).svg().unwrap();
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t0.elapsed()
    );
}
