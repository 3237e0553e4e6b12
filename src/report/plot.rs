//! Report plots with `plotters`: scaling (samples/s and efficiency vs k, with the ideal line and
//! the prediction), all-reduce busbw vs message size per setting (log x), and one step's bucket
//! timeline. Each is drawn once, generically over the backend, and rendered as SVG or PNG.
//!
//! Text is laid out with DejaVu Sans embedded in the binary, so a plot looks the same on a
//! machine without fonts; SVG readers substitute their own sans-serif.

use super::{BenchSetting, Curve, Timeline};
use crate::protocol::validate::limits::{GBS, MS, SAMPLES_PER_S};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::sync::Once;

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Okabe–Ito colours: distinguishable with the common colour-vision deficiencies.
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
];
const GREY: RGBColor = RGBColor(110, 110, 110);
const LIGHT: RGBColor = RGBColor(200, 200, 200);
const HIDDEN: RGBColor = PALETTE[0];
const EXPOSED: RGBColor = PALETTE[5];
const BACKWARD: RGBColor = PALETTE[2];
const OPTIMIZER: RGBColor = PALETTE[3];
const FONT: &str = "sans-serif";

pub const SCALING_SIZE: (u32, u32) = (1000, 440);
pub const BENCH_SIZE: (u32, u32) = (820, 460);
pub const TIMELINE_WIDTH: u32 = 900;

fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // A static font from the `dejavu` crate cannot fail to parse; if it ever did, drawing
        // reports the missing font as an error instead of panicking here.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Which plot, with the data it needs.
pub enum Plot<'a> {
    Scaling(&'a [Curve]),
    Bench(&'a [BenchSetting<'a>]),
    Timeline(&'a Timeline),
}

impl Plot<'_> {
    pub fn size(&self) -> (u32, u32) {
        match self {
            Plot::Scaling(_) => SCALING_SIZE,
            Plot::Bench(_) => BENCH_SIZE,
            Plot::Timeline(t) => (
                TIMELINE_WIDTH,
                170 + 36 * (t.buckets.len() as u32 + 1 + u32::from(t.optimizer_ms.is_some())),
            ),
        }
    }

    /// The plot's title: what, and SIMULATED when any of it is.
    pub fn title(&self) -> String {
        let (what, sim) = match self {
            Plot::Scaling(c) => (
                "Scaling: samples/s and efficiency vs k".to_string(),
                c.iter().any(|c| c.simulated),
            ),
            Plot::Bench(s) => (
                "All-reduce bus bandwidth vs message size".to_string(),
                s.iter().any(|s| s.simulated),
            ),
            Plot::Timeline(t) => (
                format!(
                    "Bucket timeline: run {} k={} rank {} step {}",
                    t.run_id, t.k, t.rank, t.step
                ),
                t.simulated,
            ),
        };
        if sim {
            format!("SIMULATED — {what}")
        } else {
            what
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Plot::Scaling(c) => c.iter().all(|c| c.points.is_empty()),
            Plot::Bench(s) => s.iter().all(|s| s.rows.is_empty()),
            Plot::Timeline(_) => false,
        }
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        root.fill(&WHITE)?;
        let area = root.titled(&self.title(), (FONT, 22))?;
        match self {
            Plot::Scaling(c) => scaling(&area, c),
            Plot::Bench(s) => bench(&area, s),
            Plot::Timeline(t) => timeline(&area, t),
        }
    }

    pub fn svg(&self) -> anyhow::Result<String> {
        if self.is_empty() {
            anyhow::bail!("nothing to plot");
        }
        fonts();
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, self.size()).into_drawing_area();
            self.draw(&root)
                .map_err(|e| anyhow::anyhow!("drawing the plot: {e}"))?;
            root.present()
                .map_err(|e| anyhow::anyhow!("drawing the plot: {e}"))?;
        }
        Ok(out)
    }

    pub fn png(&self) -> anyhow::Result<Vec<u8>> {
        if self.is_empty() {
            anyhow::bail!("nothing to plot");
        }
        fonts();
        let (w, h) = self.size();
        let mut rgb = vec![0u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
            self.draw(&root)
                .map_err(|e| anyhow::anyhow!("drawing the plot: {e}"))?;
            root.present()
                .map_err(|e| anyhow::anyhow!("drawing the plot: {e}"))?;
        }
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header()?;
        writer.write_image_data(&rgb)?;
        writer.finish()?;
        Ok(out)
    }
}

/// An axis' upper end that the plotting library can lay ticks out on: finite and at most the
/// protocol's plausible bound for the figure. A run stored before the bounds existed could
/// carry 1e308 samples/s, and an axis up to that (or to inf) kept the library busy for
/// minutes per report; points above the end are simply outside the chart.
fn axis_top(x: f64, cap: f64) -> f64 {
    if x.is_finite() { x.min(cap) } else { cap }
}

fn style(color: RGBColor, width: u32) -> ShapeStyle {
    ShapeStyle {
        color: color.to_rgba(),
        filled: false,
        stroke_width: width,
    }
}

/// Each k that was run, ascending.
fn k_values(curves: &[Curve]) -> Vec<u32> {
    let mut ks: Vec<u32> = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.k))
        .collect();
    ks.sort_unstable();
    ks.dedup();
    ks
}

/// k axis labels: the integers inside the plotted range, none at its padded ends.
fn k_label(k: &u32, kmax: u32) -> String {
    if *k == 0 || *k > kmax {
        String::new()
    } else {
        k.to_string()
    }
}

fn scaling<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, curves: &[Curve]) -> DrawResult<DB> {
    let (left, right) = area.split_horizontally(area.dim_in_pixel().0 * 55 / 100);
    let ks = k_values(curves);
    let kmax = ks.last().copied().unwrap_or(1);
    throughput_chart(&left, curves, &ks, kmax)?;
    efficiency_chart(&right, curves, kmax)
}

/// The left chart: each curve's samples/s against k with the rank range as whiskers, the
/// ideal line from its k=1 baseline and the cost model's prediction.
fn throughput_chart<DB: DrawingBackend>(
    left: &DrawingArea<DB, Shift>,
    curves: &[Curve],
    ks: &[u32],
    kmax: u32,
) -> DrawResult<DB> {
    let x_range = || 0u32..kmax + 1;
    let ymax = curves
        .iter()
        .flat_map(|c| {
            c.points.iter().map(move |p| {
                p.samples_per_s
                    .max(p.predicted_samples_per_s.unwrap_or(0.0))
                    .max(p.rank_max * p.k as f64)
                    .max(c.ideal(p.k).unwrap_or(0.0))
            })
        })
        .fold(1.0, f64::max)
        * 1.1;
    let ymax = axis_top(ymax, SAMPLES_PER_S);

    let mut chart = ChartBuilder::on(left)
        .caption("samples/s (sum over ranks)", (FONT, 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range(), 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("k (ranks)")
        .y_desc("samples/s")
        .x_labels(kmax as usize + 2)
        .x_label_formatter(&|k| k_label(k, kmax))
        .y_label_formatter(&|y| {
            if ymax >= 20.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.1}")
            }
        })
        .label_style((FONT, 13))
        .light_line_style(WHITE)
        .draw()?;
    for (i, c) in curves.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(u32, f64)> = c.points.iter().map(|p| (p.k, p.samples_per_s)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), style(color, 2)))?
            .label(format!("measured · {}", c.label))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style(color, 2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        // The slowest–fastest rank range, scaled to the aggregate, as a vertical whisker.
        chart.draw_series(
            c.points
                .iter()
                .filter(|p| p.rank_max > p.rank_min)
                .map(|p| {
                    let k = p.k as f64;
                    PathElement::new(
                        vec![(p.k, p.rank_min * k), (p.k, p.rank_max * k)],
                        style(color, 1),
                    )
                }),
        )?;
        if c.baseline_samples_per_s().is_some() {
            let ideal: Vec<(u32, f64)> = std::iter::once(1)
                .chain(ks.iter().copied())
                .filter_map(|k| Some((k, c.ideal(k)?)))
                .collect();
            chart
                .draw_series(DashedLineSeries::new(ideal, 8, 5, style(GREY, 2)))?
                .label("ideal: k × the k=1 baseline")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style(GREY, 2)));
        }
        let predicted: Vec<(u32, f64)> = c
            .points
            .iter()
            .filter_map(|p| Some((p.k, p.predicted_samples_per_s?)))
            .collect();
        if !predicted.is_empty() {
            chart
                .draw_series(DashedLineSeries::new(
                    predicted.clone(),
                    2,
                    3,
                    style(color, 2),
                ))?
                .label(format!("predicted (cost model) · {}", c.label))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 6, y)], style(color, 2)));
            chart.draw_series(predicted.iter().map(|&p| Cross::new(p, 4, style(color, 1))))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 12))
        .background_style(WHITE.mix(0.85))
        .border_style(LIGHT)
        .draw()?;
    Ok(())
}

/// The right chart: each curve's efficiency (speedup / k) in % against the ideal 100%.
fn efficiency_chart<DB: DrawingBackend>(
    right: &DrawingArea<DB, Shift>,
    curves: &[Curve],
    kmax: u32,
) -> DrawResult<DB> {
    let x_range = || 0u32..kmax + 1;
    let emax = curves
        .iter()
        .flat_map(|c| c.points.iter().filter_map(|p| p.efficiency))
        .fold(1.0, f64::max)
        * 110.0;
    // Efficiency in %: a speedup of k×1000 is already absurd.
    let emax = axis_top(emax, 1e5);
    let mut eff = ChartBuilder::on(right)
        .caption("efficiency = speedup / k", (FONT, 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(x_range(), 0.0..emax)?;
    eff.configure_mesh()
        .x_desc("k (ranks)")
        .y_desc("efficiency %")
        .x_labels(kmax as usize + 2)
        .x_label_formatter(&|k| k_label(k, kmax))
        .y_label_formatter(&|y| format!("{y:.0}%"))
        .label_style((FONT, 13))
        .light_line_style(WHITE)
        .draw()?;
    eff.draw_series(DashedLineSeries::new(
        vec![(0, 100.0), (kmax + 1, 100.0)],
        8,
        5,
        style(GREY, 2),
    ))?
    .label("ideal 100%")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style(GREY, 2)));
    for (i, c) in curves.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(u32, f64)> = c
            .points
            .iter()
            .filter_map(|p| Some((p.k, p.efficiency? * 100.0)))
            .collect();
        eff.draw_series(LineSeries::new(pts.clone(), style(color, 2)))?
            .label(format!("efficiency · {}", c.label))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style(color, 2)));
        eff.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        eff.draw_series(pts.iter().map(|&(k, e)| {
            Text::new(
                format!("{e:.0}%"),
                (k, e),
                (FONT, 12)
                    .into_font()
                    .color(&color)
                    .pos(Pos::new(HPos::Left, VPos::Bottom)),
            )
        }))?;
    }
    eff.configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .label_font((FONT, 12))
        .background_style(WHITE.mix(0.85))
        .border_style(LIGHT)
        .draw()?;
    Ok(())
}

fn bench<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    settings: &[BenchSetting],
) -> DrawResult<DB> {
    let rows = settings.iter().flat_map(|s| s.rows.iter());
    let (lo, hi) = rows
        .clone()
        .map(|r| (r.bytes.max(1) as f64).log2())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
    let (lo, hi) = (lo.floor(), hi.ceil().max(lo.floor() + 1.0));
    let ymax = axis_top(
        rows.map(|r| r.busbw_gbs).fold(0.0, f64::max).max(1e-3) * 1.15,
        GBS,
    );
    // Sizes are powers of two: the axis is log2(bytes), labelled every other power (1K, 4K, …)
    // as nccl-tests prints them.
    let step = if hi - lo > 16.0 { 4.0 } else { 2.0 };
    let labels = ((hi - lo) / step) as usize + 1;
    let mut chart = ChartBuilder::on(area)
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(lo - 0.3..hi + 0.3, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes, log scale)")
        .y_desc("busbw GB/s")
        .x_labels(labels)
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 {
                crate::util::fmt_size_pow2(2f64.powf(x.round()) as u64)
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y:.1}"))
        .label_style((FONT, 13))
        .light_line_style(WHITE)
        .draw()?;
    for (i, s) in settings.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s
            .rows
            .iter()
            .map(|r| ((r.bytes.max(1) as f64).log2(), r.busbw_gbs))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), style(color, 2)))?
            .label(format!("{} (k={})", s.label(), s.k))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style(color, 2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(LIGHT)
        .draw()?;
    Ok(())
}

/// A legend under a chart, items left to right wrapping into rows: the timeline's rows fill
/// the whole plot area, so a legend inside it would cover bars.
fn legend_band<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    items: &[(RGBColor, String)],
) -> DrawResult<DB> {
    let (w, _) = area.dim_in_pixel();
    let col_w = (w as i32 - 40) / 2;
    for (i, (color, label)) in items.iter().enumerate() {
        let x = 20 + (i as i32 % 2) * col_w;
        let y = 8 + (i as i32 / 2) * 20;
        area.draw(&Rectangle::new([(x, y), (x + 14, y + 12)], color.filled()))?;
        area.draw(&Text::new(label.clone(), (x + 22, y), (FONT, 13)))?;
    }
    Ok(())
}

fn timeline<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, t: &Timeline) -> DrawResult<DB> {
    // Rows top to bottom: backward, each bucket in the order it was reduced, optimizer.
    let mut buckets: Vec<_> = t.buckets.iter().collect();
    buckets.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    // An optimizer row only when the worker timed the optimizer.
    let n = buckets.len() + 1 + usize::from(t.optimizer_ms.is_some());
    let names: Vec<String> = std::iter::once("backward".to_string())
        .chain(
            buckets
                .iter()
                .map(|b| format!("bucket {} · {}", b.index, crate::util::fmt_bytes(b.bytes))),
        )
        .chain(t.optimizer_ms.map(|_| "optimizer".to_string()))
        .collect();
    let mut legend = vec![
        (
            BACKWARD,
            format!("backward compute {} ms", super::fmt_ms(t.bwd_compute_ms)),
        ),
        (
            LIGHT,
            "queued: ready, waiting for the comm stream".to_string(),
        ),
        (HIDDEN, "all-reduce hidden under backward".to_string()),
        (
            EXPOSED,
            format!(
                "all-reduce exposed ({} ms in all)",
                super::fmt_ms(t.exposed_ms)
            ),
        ),
    ];
    if let Some(o) = t.optimizer_ms {
        legend.push((OPTIMIZER, format!("optimizer {} ms", super::fmt_ms(o))));
    }
    let band = 16 + 20 * legend.len().div_ceil(2) as u32;
    let h = area.dim_in_pixel().1;
    let (plot_area, legend_area) = area.split_vertically(h.saturating_sub(band));
    let end = axis_top(t.end_ms().max(1e-3) * 1.04, MS);
    let row = |i: usize| (n - 1 - i) as f64;
    let mut chart = ChartBuilder::on(&plot_area)
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(150)
        .build_cartesian_2d(0.0..end, -0.6..n as f64 - 0.4)?;
    chart
        .configure_mesh()
        .x_desc("ms from the step's start")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_labels(n)
        .y_label_formatter(&|y| {
            if (y - y.round()).abs() > 1e-6 {
                return String::new();
            }
            let i = n as i64 - 1 - y.round() as i64;
            usize::try_from(i)
                .ok()
                .and_then(|i| names.get(i).cloned())
                .unwrap_or_default()
        })
        .label_style((FONT, 13))
        .light_line_style(WHITE)
        .disable_y_mesh()
        .draw()?;
    let bar = |i: usize, a: f64, b: f64, color: RGBColor| {
        let y = row(i);
        Rectangle::new([(a, y - 0.32), (b.max(a), y + 0.32)], color.filled())
    };
    chart.draw_series(std::iter::once(bar(0, 0.0, t.bwd_compute_ms, BACKWARD)))?;
    chart.draw_series(
        buckets
            .iter()
            .enumerate()
            .map(|(i, b)| bar(i + 1, b.ready_ms, b.start_ms, LIGHT)),
    )?;
    chart.draw_series(buckets.iter().enumerate().map(|(i, b)| {
        let cut = b.done_ms.min(t.bwd_compute_ms).max(b.start_ms);
        bar(i + 1, b.start_ms, cut, HIDDEN)
    }))?;
    chart.draw_series(
        buckets
            .iter()
            .enumerate()
            .map(|(i, b)| bar(i + 1, b.start_ms.max(t.bwd_compute_ms), b.done_ms, EXPOSED)),
    )?;
    if let Some(o) = t.optimizer_ms {
        let start = t.end_ms() - o;
        chart.draw_series(std::iter::once(bar(n - 1, start, start + o, OPTIMIZER)))?;
    }
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(t.bwd_compute_ms, -0.5), (t.bwd_compute_ms, n as f64 - 0.5)],
        style(GREY, 1),
    )))?;
    legend_band(&legend_area, &legend)
}
