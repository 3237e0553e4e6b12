//! Small helpers with no better home.

use std::time::{SystemTime, UNIX_EPOCH};

/// One way to name an enum's values: `ALL`, `as_str`, `FromStr` (exactly these names; the error
/// lists them) and `Display` (the name) from one table, so that the store, the protocol, the
/// command line and the screens spell a value the same way. Serde and clap derive their own
/// names from the variants; `tests` in `run` check that they agree.
macro_rules! names {
    ($t:ident { $($v:ident => $s:literal),+ $(,)? }) => {
        impl $t {
            pub const ALL: [$t; [$($s),+].len()] = [$($t::$v),+];
            pub fn as_str(self) -> &'static str {
                match self {
                    $($t::$v => $s,)+
                }
            }
        }
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($s => Ok($t::$v),)+
                    _ => Err(format!("`{s}` is not one of: {}", [$($s),+].join(", "))),
                }
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use names;

/// Input ddptop refuses: a one-line message saying what to do; exit code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Bytes in decimal units (`26.5 MB`, MB = 1e6), as NCCL and nccl-tests print them.
pub fn fmt_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

/// Power-of-two sizes as nccl-tests prints them: 1K, 64M, 256M.
pub fn fmt_size_pow2(b: u64) -> String {
    const K: u64 = 1024;
    if b >= K * K * K && b.is_multiple_of(K * K * K) {
        format!("{}G", b / (K * K * K))
    } else if b >= K * K && b.is_multiple_of(K * K) {
        format!("{}M", b / (K * K))
    } else if b >= K && b.is_multiple_of(K) {
        format!("{}K", b / K)
    } else {
        format!("{b}")
    }
}

/// Median of a slice (NaN-free input); `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The median of a slice in linear time, reordering it in place; `None` when empty.
pub fn median_in_place(v: &mut [f64]) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let (below, mid, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    let mid = *mid;
    Some(if n % 2 == 1 {
        mid
    } else {
        (below.iter().copied().fold(f64::NEG_INFINITY, f64::max) + mid) / 2.0
    })
}

/// (min, median, max) of a NaN-free slice in linear time (it is reordered); `None` when empty.
/// The Ranks pane's summary takes this over every rank on each frame.
pub fn min_median_max(v: &mut [f64]) -> Option<(f64, f64, f64)> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (below, mid, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    let mid = *mid;
    let median = if n % 2 == 1 {
        mid
    } else {
        // The other middle value is the largest of the lower half.
        let left = below.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (left + mid) / 2.0
    };
    Some((lo, median, hi))
}

/// The tokio runtime of the front ends: two workers are plenty for one loop and its tasks.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_median_in_place_is_the_sorted_median() {
        for n in 0..40usize {
            let v: Vec<f64> = (0..n).map(|i| ((i * 37 + 11) % 23) as f64 * 0.5).collect();
            let mut w = v.clone();
            assert_eq!(super::median_in_place(&mut w), super::median(&v), "n={n}");
        }
    }

    #[test]
    fn min_median_max_matches_a_full_sort() {
        for n in 1..40usize {
            let mut v: Vec<f64> = (0..n).map(|i| ((i * 37 + 11) % 23) as f64 * 0.5).collect();
            let mut sorted = v.clone();
            sorted.sort_by(f64::total_cmp);
            let got = min_median_max(&mut v).unwrap();
            assert_eq!(
                got,
                (sorted[0], median(&sorted).unwrap(), sorted[n - 1]),
                "n={n}"
            );
        }
        assert_eq!(min_median_max(&mut []), None);
    }

    use super::*;
    #[test]
    fn sizes() {
        assert_eq!(fmt_size_pow2(1024), "1K");
        assert_eq!(fmt_size_pow2(64 << 20), "64M");
        assert_eq!(fmt_size_pow2(1000), "1000");
        assert_eq!(fmt_bytes(26_501_120), "26.5 MB");
    }
}

/// (year, month, day, hour, minute, second) in UTC for a unix time (civil-from-days).
pub fn utc_parts(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

/// Days since 1970-01-01 of a civil date (the inverse of `util::utc_parts`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod time_tests {
    #[test]
    fn utc_parts_known_date() {
        // 2026-11-30 01:15:00 UTC
        assert_eq!(super::utc_parts(1_796_001_300), (2026, 11, 30, 1, 15, 0));
    }

    #[test]
    fn civil_days_invert_utc_parts() {
        for secs in [0i64, 951_782_400, 1_796_001_300, 4_102_444_800] {
            let (y, m, d, ..) = super::utc_parts(secs);
            assert_eq!(super::days_from_civil(y, m, d), secs.div_euclid(86_400));
        }
    }
}

/// `s` with control characters removed (newlines and tabs become spaces): text that came from
/// a worker or a user's script (a rank's device or host name, a failure reason, log lines) is
/// printed to a terminal, where ESC and BEL sequences could retitle it, hide lines or worse.
pub fn printable(s: &str) -> String {
    s.chars()
        .filter_map(|c| match c {
            '\n' | '\t' | '\r' => Some(' '),
            c if c.is_control() => None,
            c => Some(c),
        })
        .collect()
}

#[cfg(test)]
mod printable_tests {
    #[test]
    fn escape_sequences_are_removed() {
        assert_eq!(
            super::printable("a\u{1b}]0;pwned\u{7}b\u{1b}[2Jc\u{9b}d\ne"),
            "a]0;pwnedb[2Jcd e"
        );
        assert_eq!(super::printable("cuda:0 · 2×"), "cuda:0 · 2×");
    }
}

/// `1 repeat`, `3 repeats`: a count with its noun, so that a message built from a number
/// never reads "1 repeats" (nouns here take a plain `s`).
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod count_tests {
    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(super::count(1, "repeat"), "1 repeat");
        assert_eq!(super::count(0, "run"), "0 runs");
        assert_eq!(super::count(3, "setting"), "3 settings");
    }
}

/// How a column of `text_table` lines up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A plain-text table whose columns are as wide as their widest cell, header included, so that
/// ids, labels and statuses of any width stay in their columns; two spaces between columns,
/// none after the last (no trailing blanks). Widths count chars: the cells are ASCII and
/// single-width symbols (×, Δ, ≈, —).
pub fn text_table(header: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = header.iter().map(|(h, _)| width(h)).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(width(cell));
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, ((cell, (_, align)), w)) in cells.iter().zip(header).zip(&widths).enumerate() {
            let pad = " ".repeat(w - width(cell));
            match align {
                Align::Right => s.push_str(&format!("{pad}{cell}")),
                Align::Left if i == last => s.push_str(cell),
                Align::Left => s.push_str(&format!("{cell}{pad}")),
            }
            if i < last {
                s.push_str("  ");
            }
        }
        // Empty cells at the end of a row leave their padding behind.
        format!("{}\n", s.trim_end())
    };
    let mut out = line(header.iter().map(|(h, _)| *h).collect());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod text_table_tests {
    use super::{Align, text_table};

    #[test]
    fn columns_line_up_whatever_the_width_of_ids_and_labels() {
        let rows = vec![
            vec!["r1".into(), "weak".into(), "1.00×".into(), "default".into()],
            vec![
                "r20261204-123456-abcd-a-long-attach-id".into(),
                "handrolled".into(),
                "12.50×".into(),
                "NCCL_P2P_DISABLE=1".into(),
            ],
            vec!["r2".into(), "x".into(), "—".into(), "".into()],
        ];
        let t = text_table(
            &[
                ("run", Align::Left),
                ("experiment", Align::Left),
                ("speedup", Align::Right),
                ("settings", Align::Left),
            ],
            &rows,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        // The char offset where `needle` starts in `line`.
        let at = |line: &str, needle: &str| line[..line.find(needle).unwrap()].chars().count();
        let settings = at(lines[0], "settings");
        assert_eq!(at(lines[1], "default"), settings, "{t}");
        assert_eq!(at(lines[2], "NCCL_P2P"), settings, "{t}");
        let experiment = at(lines[0], "experiment");
        assert_eq!(at(lines[1], "weak"), experiment, "{t}");
        assert_eq!(at(lines[3], "x"), experiment, "{t}");
        // Right-aligned: the speedups end where the header does.
        let end = |line: &str, needle: &str| at(line, needle) + needle.chars().count();
        let speedup = end(lines[0], "speedup");
        assert_eq!(end(lines[1], "1.00×"), speedup, "{t}");
        assert_eq!(end(lines[2], "12.50×"), speedup, "{t}");
        assert_eq!(end(lines[3], "—"), speedup, "{t}");
        assert_eq!(
            lines[1],
            "r1                                      weak          1.00×  default"
        );
        assert!(
            lines.iter().all(|l| !l.ends_with(' ')),
            "no trailing blanks: {t}"
        );
    }
}
