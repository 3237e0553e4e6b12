//! Number and label formatting shared by the panes. Missing values print as `n/a`.

use crate::protocol::Backend;
use crate::run::RunSpec;

pub const NA: &str = "n/a";

/// Samples/s: `812`, `3112`, `12.3k`, `1.25M`.
pub fn rate(x: f64) -> String {
    if !x.is_finite() {
        return NA.into();
    }
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// Milliseconds with 3 significant digits: `0.42 ms`, `41.2 ms`, `312 ms`.
pub fn ms(x: f64) -> String {
    format!("{} ms", ms_num(x))
}

pub fn ms_num(x: f64) -> String {
    if !x.is_finite() {
        NA.into()
    } else if x.abs() < 10.0 {
        format!("{x:.2}")
    } else if x.abs() < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// GiB with one decimal, no unit: `70.1`.
pub fn gib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1u64 << 30) as f64)
}

/// Bytes compactly: `512M`, `2.1G`, `900K` (binary units).
pub fn bytes_short(b: u64) -> String {
    let b = b as f64;
    const K: f64 = 1024.0;
    if b >= K * K * K {
        format!("{:.1}G", b / (K * K * K))
    } else if b >= K * K {
        format!("{:.0}M", b / (K * K))
    } else if b >= K {
        format!("{:.0}K", b / K)
    } else {
        format!("{b:.0}B")
    }
}

/// KB/s as NVML reports link throughput → `12.3 GB/s` style (decimal).
pub fn kbs(x: u64) -> String {
    let b = x as f64 * 1e3;
    if b >= 1e9 {
        format!("{:.1}G", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.0}M", b / 1e6)
    } else {
        format!("{:.0}K", b / 1e3)
    }
}

pub fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| NA.to_string(), f)
}

/// The run id's tail: `r20261130-011500-3f2a` → `011500-3f2a`.
pub fn short_id(id: &str) -> &str {
    let n = id.chars().count();
    if n > 11 {
        let skip = id.char_indices().nth(n - 11).map_or(0, |(i, _)| i);
        &id[skip..]
    } else {
        id
    }
}

/// The last 4 characters of a run id: `3f2a`.
pub fn tiny_id(id: &str) -> &str {
    let n = id.chars().count();
    if n > 4 {
        let skip = id.char_indices().nth(n - 4).map_or(0, |(i, _)| i);
        &id[skip..]
    } else {
        id
    }
}

/// `SIM h200-nvlink`, `nccl`, `gloo`.
pub fn backend(spec: &RunSpec) -> String {
    let device = if spec.backend == Backend::Nccl {
        "GPU"
    } else {
        "CPU"
    };
    match (spec.kind().engine(), spec.backend) {
        (_, Backend::Sim) => match &spec.profile {
            Some(p) => format!("SIM {p}"),
            None => "SIM".into(),
        },
        // What really runs: no gloo or NCCL process group (jax's XLA, the tch loop's copies).
        (Some((engine, _)), _) => format!("{engine} {device}"),
        (None, b) => b.as_str().to_string(),
    }
}

/// Where a pane's figures were measured, for its title: `gloo CPU`, `nccl GPU`, `XLA GPU`;
/// `None` for a simulated run (its SIMULATED badge says so).
pub fn backend_device(spec: &RunSpec) -> Option<String> {
    match (spec.kind().engine(), spec.backend) {
        (_, Backend::Sim) => None,
        // `backend` already names the device of these.
        (Some(_), _) => Some(backend(spec)),
        (None, Backend::Nccl) => Some(format!("{} GPU", backend(spec))),
        (None, Backend::Gloo) => Some(format!("{} CPU", backend(spec))),
    }
}

/// `backend` in four cells (the Runs pane's narrow column).
pub fn backend_short(spec: &RunSpec) -> String {
    match (spec.kind().engine(), spec.backend) {
        (_, Backend::Sim) => "SIM".into(),
        (Some((_, short)), _) => short.into(),
        (None, b) => b.as_str().to_string(),
    }
}

/// The experiment as the Runs pane lists it: the fsdp experiment's ZeRO-1 and DDP sides (queued
/// after its FSDP run at each k) say so, a probe's k=1 control has a `*`.
pub fn experiment(spec: &RunSpec) -> String {
    let name = spec.kind().runs_label(&spec.family);
    if spec.control {
        format!("{name}*")
    } else {
        name
    }
}

/// Text sparkline of `values` (0..=max) squeezed or padded to `width` cells, newest on the right.
/// When there are more points than cells, neighbouring points are averaged.
pub fn spark(values: &[u64], width: usize, max: u64) -> String {
    const BARS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if width == 0 {
        return String::new();
    }
    let max = max.max(1) as f64;
    let pts: Vec<f64> = if values.len() > width {
        // Average into `width` buckets, aligned so the newest bucket ends at the newest value.
        (0..width)
            .map(|i| {
                let a = i * values.len() / width;
                let b = ((i + 1) * values.len() / width).max(a + 1);
                let s: u64 = values[a..b].iter().sum();
                s as f64 / (b - a) as f64
            })
            .collect()
    } else {
        values.iter().map(|v| *v as f64).collect()
    };
    let mut s: String = " ".repeat(width - pts.len());
    for v in pts {
        let i = ((v / max).clamp(0.0, 1.0) * 8.0).round() as usize;
        // A non-zero value always shows at least the lowest bar.
        let i = if v > 0.0 { i.max(1) } else { 0 };
        s.push(BARS[i]);
    }
    s
}

/// A horizontal bar of `frac` (0..1) of `width` cells with eighth-cell resolution.
pub fn hbar(frac: f64, width: usize) -> String {
    const PART: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let eighths = (frac.clamp(0.0, 1.0) * width as f64 * 8.0).round() as usize;
    let full = eighths / 8;
    let mut s = "█".repeat(full);
    if full < width && !eighths.is_multiple_of(8) {
        s.push(PART[eighths % 8]);
    }
    s
}

/// Cut `s` to `w` display cells, marking the cut with `…`.
pub fn trunc(s: &str, w: usize) -> String {
    use unicode_width_shim::width;
    if width(s) <= w {
        return s.to_string();
    }
    if w == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let cw = width(c.encode_utf8(&mut [0; 4]));
        if used + cw > w - 1 {
            break;
        }
        out.push(c);
        used += cw;
    }
    out.push('…');
    out
}

/// Display width via ratatui's own measure (spans use unicode-width).
pub mod unicode_width_shim {
    pub fn width(s: &str) -> usize {
        ratatui::text::Span::raw(s).width()
    }
}

/// A unix time as `2026-11-30 01:15:00 UTC`.
pub fn clock(unix: f64) -> String {
    let (y, mo, d, h, mi, s) = crate::util::utc_parts(unix as i64);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(rate(3112.4), "3112");
        assert_eq!(rate(12345.0), "12.3k");
        assert_eq!(rate(42.25), "42.2");
        assert_eq!(ms(0.4251), "0.43 ms");
        assert_eq!(ms(41.25), "41.2 ms");
        assert_eq!(ms(f64::NAN), "n/a ms");
        assert_eq!(short_id("r20261130-011500-3f2a"), "011500-3f2a");
        assert_eq!(tiny_id("r20261130-011500-3f2a"), "3f2a");
        assert_eq!(tiny_id("ab"), "ab");
    }

    #[test]
    fn sparkline_fits_width() {
        assert_eq!(spark(&[0, 50, 100], 5, 100), "   ▄█");
        let many: Vec<u64> = (0..60).collect();
        assert_eq!(spark(&many, 10, 60).chars().count(), 10);
        assert_eq!(spark(&[1], 1, 100), "▁");
    }

    #[test]
    fn bars_and_truncation() {
        assert_eq!(hbar(0.5, 4), "██");
        assert_eq!(hbar(1.0, 3), "███");
        assert_eq!(hbar(0.0, 3), "");
        assert_eq!(trunc("abcdef", 4), "abc…");
        assert_eq!(trunc("abc", 4), "abc");
    }
}
