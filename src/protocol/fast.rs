//! A hand-written reader for the two per-step messages, `step` and `buckets`: all but a few
//! lines of a run. serde_json spent ~1 µs on a step line and ~2.3 µs on a timeline of three
//! buckets on the 2-core test machine, the largest part of ddptop's CPU per line at 1,024
//! ranks (docs/performance.md).
//!
//! It reads only what it is sure serde reads the same: plain keys (no escapes), numbers,
//! booleans, the enum's names, `null` for an optional field, and keys it does not know with a
//! scalar value. Anything else (an escape, a nested unknown value, a duplicate or missing
//! field, a number out of range, trailing bytes) it hands back as `None`, and serde reads the
//! line: what is accepted, and how a rejection is worded, stays serde's. Floats are read by
//! `str::parse`, correctly rounded as serde_json's `float_roundtrip`. The tests hold both
//! readers to the same value on every line this one reads.

use super::messages::{BucketSpan, Buckets, Step, Timing};

/// A `step` line, or `None`: let serde read it.
pub fn step(line: &str) -> Option<Step> {
    let mut c = Cursor::new(line);
    let mut f = StepFields::default();
    c.object(|c, key| f.read(c, key))?;
    c.end()?;
    f.finish()
}

/// A `buckets` line, or `None`: let serde read it.
pub fn buckets(line: &str) -> Option<Buckets> {
    let mut c = Cursor::new(line);
    let mut f = BucketsFields::default();
    c.object(|c, key| f.read(c, key))?;
    c.end()?;
    f.finish()
}

/// Set a field once: a second value is serde's `duplicate field` error.
fn once<T>(slot: &mut Option<T>, v: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(v);
            Some(())
        }
    }
}

/// An optional field: absent, `null` or a value, once.
fn once_opt<T>(slot: &mut Option<Option<T>>, v: Option<T>) -> Option<()> {
    once(slot, v)
}

#[derive(Default)]
struct StepFields {
    rank: Option<u32>,
    step: Option<u64>,
    epoch: Option<u32>,
    t: Option<f64>,
    warmup: Option<bool>,
    sync: Option<bool>,
    samples: Option<u64>,
    fwd_ms: Option<f64>,
    bwd_ms: Option<f64>,
    opt_ms: Option<f64>,
    data_ms: Option<f64>,
    step_ms: Option<f64>,
    timing: Option<Timing>,
    loss: Option<Option<f64>>,
    fused: Option<Option<bool>>,
    every: Option<Option<u32>>,
    t_bwd: Option<Option<f64>>,
}

impl StepFields {
    fn read(&mut self, c: &mut Cursor<'_>, key: &[u8]) -> Option<()> {
        match key {
            b"rank" => once(&mut self.rank, c.u32()?),
            b"step" => once(&mut self.step, c.u64()?),
            b"epoch" => once(&mut self.epoch, c.u32()?),
            b"t" => once(&mut self.t, c.f64()?),
            b"warmup" => once(&mut self.warmup, c.boolean()?),
            b"sync" => once(&mut self.sync, c.boolean()?),
            b"samples" => once(&mut self.samples, c.u64()?),
            b"fwd_ms" => once(&mut self.fwd_ms, c.f64()?),
            b"bwd_ms" => once(&mut self.bwd_ms, c.f64()?),
            b"opt_ms" => once(&mut self.opt_ms, c.f64()?),
            b"data_ms" => once(&mut self.data_ms, c.f64()?),
            b"step_ms" => once(&mut self.step_ms, c.f64()?),
            b"timing" => once(&mut self.timing, timing(c.string()?)?),
            b"loss" => once_opt(&mut self.loss, c.nullable(Cursor::f64)?),
            b"fused" => once_opt(&mut self.fused, c.nullable(Cursor::boolean)?),
            b"every" => once_opt(&mut self.every, c.nullable(Cursor::u32)?),
            b"t_bwd" => once_opt(&mut self.t_bwd, c.nullable(Cursor::f64)?),
            _ => c.skip_scalar(),
        }
    }

    fn finish(self) -> Option<Step> {
        Some(Step {
            rank: self.rank?,
            step: self.step?,
            epoch: self.epoch?,
            t: self.t?,
            warmup: self.warmup?,
            sync: self.sync?,
            samples: self.samples?,
            fwd_ms: self.fwd_ms?,
            bwd_ms: self.bwd_ms?,
            opt_ms: self.opt_ms?,
            data_ms: self.data_ms?,
            step_ms: self.step_ms?,
            timing: self.timing?,
            loss: self.loss.flatten(),
            fused: self.fused.flatten(),
            every: self.every.flatten(),
            t_bwd: self.t_bwd.flatten(),
        })
    }
}

#[derive(Default)]
struct BucketsFields {
    rank: Option<u32>,
    step: Option<u64>,
    t: Option<f64>,
    rebuilt: Option<bool>,
    bwd_compute_ms: Option<f64>,
    exposed_ms: Option<f64>,
    buckets: Option<Vec<BucketSpan>>,
    start_inferred: Option<Option<bool>>,
}

impl BucketsFields {
    fn read(&mut self, c: &mut Cursor<'_>, key: &[u8]) -> Option<()> {
        match key {
            b"rank" => once(&mut self.rank, c.u32()?),
            b"step" => once(&mut self.step, c.u64()?),
            b"t" => once(&mut self.t, c.f64()?),
            b"rebuilt" => once(&mut self.rebuilt, c.boolean()?),
            b"bwd_compute_ms" => once(&mut self.bwd_compute_ms, c.f64()?),
            b"exposed_ms" => once(&mut self.exposed_ms, c.f64()?),
            b"buckets" => once(&mut self.buckets, c.spans()?),
            b"start_inferred" => once_opt(&mut self.start_inferred, c.nullable(Cursor::boolean)?),
            _ => c.skip_scalar(),
        }
    }

    fn finish(self) -> Option<Buckets> {
        Some(Buckets {
            rank: self.rank?,
            step: self.step?,
            t: self.t?,
            rebuilt: self.rebuilt?,
            bwd_compute_ms: self.bwd_compute_ms?,
            exposed_ms: self.exposed_ms?,
            buckets: self.buckets?,
            start_inferred: self.start_inferred.flatten(),
        })
    }
}

#[derive(Default)]
struct SpanFields {
    index: Option<u32>,
    bytes: Option<u64>,
    ready_ms: Option<f64>,
    start_ms: Option<f64>,
    done_ms: Option<f64>,
    kernel_ms: Option<Option<f64>>,
}

impl SpanFields {
    fn read(&mut self, c: &mut Cursor<'_>, key: &[u8]) -> Option<()> {
        match key {
            b"index" => once(&mut self.index, c.u32()?),
            b"bytes" => once(&mut self.bytes, c.u64()?),
            b"ready_ms" => once(&mut self.ready_ms, c.f64()?),
            b"start_ms" => once(&mut self.start_ms, c.f64()?),
            b"done_ms" => once(&mut self.done_ms, c.f64()?),
            b"kernel_ms" => once_opt(&mut self.kernel_ms, c.nullable(Cursor::f64)?),
            _ => c.skip_scalar(),
        }
    }

    fn finish(self) -> Option<BucketSpan> {
        Some(BucketSpan {
            index: self.index?,
            bytes: self.bytes?,
            ready_ms: self.ready_ms?,
            start_ms: self.start_ms?,
            done_ms: self.done_ms?,
            kernel_ms: self.kernel_ms.flatten(),
        })
    }
}

fn timing(name: &[u8]) -> Option<Timing> {
    Some(match name {
        b"cuda_events" => Timing::CudaEvents,
        b"host" => Timing::Host,
        b"profiler" => Timing::Profiler,
        b"model" => Timing::Model,
        _ => return None,
    })
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn new(line: &'a str) -> Cursor<'a> {
        Cursor {
            b: line.as_bytes(),
            i: 0,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// JSON's whitespace.
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// Nothing but whitespace left.
    fn end(&mut self) -> Option<()> {
        self.ws();
        (self.i == self.b.len()).then_some(())
    }

    /// `{ "key": value, … }`, each value read by `field` (the cursor on the value).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            let key = self.string()?;
            self.eat(b':')?;
            self.ws();
            field(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `[ {span}, … ]`.
    fn spans(&mut self) -> Option<Vec<BucketSpan>> {
        self.eat(b'[')?;
        let mut out = Vec::new();
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(out);
        }
        loop {
            let mut f = SpanFields::default();
            self.object(|c, key| f.read(c, key))?;
            out.push(f.finish()?);
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(out);
                }
                _ => return None,
            }
        }
    }

    /// A string without escapes or control characters (the line is UTF-8 already).
    fn string(&mut self) -> Option<&'a [u8]> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.i + 1;
        let len = self.b[start..].iter().position(|&c| c == b'"')?;
        let s = &self.b[start..start + len];
        if s.iter().any(|&c| c == b'\\' || c < 0x20) {
            return None;
        }
        self.i = start + len + 1;
        Some(s)
    }

    /// The bytes of a JSON number (its grammar checked), and whether it is a plain integer.
    fn number(&mut self) -> Option<(&'a [u8], bool)> {
        let start = self.i;
        let digits = |c: &mut Self| {
            let from = c.i;
            while matches!(c.peek(), Some(b'0'..=b'9')) {
                c.i += 1;
            }
            c.i - from
        };
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let int_start = self.i;
        let n = digits(self);
        // JSON: no leading zero, no empty integer part.
        if n == 0 || (n > 1 && self.b[int_start] == b'0') {
            return None;
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.i += 1;
            if digits(self) == 0 {
                return None;
            }
            integer = false;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            // An exponent of more than 3 digits is beyond f64 either way; how serde words or
            // rounds that is left to it.
            if !(1..=3).contains(&digits(self)) {
                return None;
            }
            integer = false;
        }
        Some((&self.b[start..self.i], integer))
    }

    fn u64(&mut self) -> Option<u64> {
        let (text, integer) = self.number()?;
        // serde reads `-0`, `5.0` and `1e2` as floats, which no unsigned field takes.
        if !integer || text[0] == b'-' {
            return None;
        }
        std::str::from_utf8(text).ok()?.parse().ok()
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }

    fn f64(&mut self) -> Option<f64> {
        let (text, _) = self.number()?;
        let x: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
        // serde_json refuses a number beyond f64's range; `parse` would give infinity.
        x.is_finite().then_some(x)
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        let hit = self.b[self.i..].starts_with(word);
        if hit {
            self.i += word.len();
        }
        hit
    }

    fn boolean(&mut self) -> Option<bool> {
        if self.literal(b"true") {
            Some(true)
        } else if self.literal(b"false") {
            Some(false)
        } else {
            None
        }
    }

    /// `null` (the optional field's `None`) or a value.
    fn nullable<T>(&mut self, value: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.literal(b"null") {
            Some(None)
        } else {
            value(self).map(Some)
        }
    }

    /// The value of a key the message does not have: a string, number or literal (serde
    /// skips any value; a nested one is left to it).
    fn skip_scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'-' | b'0'..=b'9' => self.number().map(drop),
            _ if self.literal(b"true") || self.literal(b"false") || self.literal(b"null") => {
                Some(())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STEP: &str = r#"{"v":1,"type":"step","rank":17,"step":1234,"epoch":1,"t":1733140000.1234567,"warmup":false,"sync":true,"samples":256,"fwd_ms":14.213409423828125,"bwd_ms":28.93231201171875,"opt_ms":2.1,"data_ms":0.3,"step_ms":45.53919219970703,"timing":"cuda_events","loss":2.3025850929940455}"#;
    const BUCKETS: &str = r#"{"v":1,"type":"buckets","rank":17,"step":1234,"t":1733140000.1234567,"rebuilt":true,"bwd_compute_ms":27.6,"exposed_ms":0.09,"buckets":[{"index":0,"bytes":9461800,"ready_ms":4.1,"start_ms":4.1,"done_ms":4.21},{"index":1,"bytes":26501120,"ready_ms":15.3,"start_ms":15.3,"done_ms":15.5,"kernel_ms":0.2},{"index":2,"bytes":8740352,"ready_ms":27.6,"start_ms":27.6,"done_ms":27.69}]}"#;

    /// Whatever this reader reads, serde reads the same; `None` is always allowed.
    fn agrees(line: &str) -> (bool, bool) {
        let s = step(line);
        if let Some(s) = &s {
            let by_serde: Step = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("read a step serde refuses ({e}): {line}"));
            assert_eq!(*s, by_serde, "{line}");
            assert_eq!(s.t.to_bits(), by_serde.t.to_bits(), "{line}");
        }
        let b = buckets(line);
        if let Some(b) = &b {
            let by_serde: Buckets = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("read buckets serde refuses ({e}): {line}"));
            assert_eq!(*b, by_serde, "{line}");
        }
        (s.is_some(), b.is_some())
    }

    #[test]
    fn the_workers_lines_are_read_as_serde_reads_them() {
        assert_eq!(agrees(STEP), (true, false));
        assert_eq!(agrees(BUCKETS), (false, true));
        // Other key orders, whitespace, nulls, unknown scalar keys, an empty timeline.
        for line in [
            r#" { "rank" : 0 , "step":1,"epoch":0,"t":1,"warmup":true,"sync":false,"samples":0,"fwd_ms":0,"bwd_ms":-0.0,"opt_ms":1E-7,"data_ms":2.5e+3,"step_ms":0.5,"timing":"host","loss":null,"fused":true,"every":3,"t_bwd":12.5,"x":"é","y":null,"z":-1.5e-3,"w":false } "#,
            r#"{"rank":1,"step":2,"t":3.0,"rebuilt":false,"bwd_compute_ms":1,"exposed_ms":0,"buckets":[],"start_inferred":null}"#,
            r#"{"buckets":[ { "done_ms":1,"start_ms":1,"ready_ms":1,"bytes":18446744073709551615,"index":4294967295,"kernel_ms":null } ],"exposed_ms":0,"bwd_compute_ms":1,"rebuilt":true,"t":0,"step":0,"rank":4294967295}"#,
        ] {
            assert_ne!(agrees(line), (false, false), "read: {line}");
        }
        // The sim's and the load generator's own lines.
        let lines = [
            crate::protocol::WorkerMsg::Step(step(STEP).unwrap()).to_line(),
            crate::protocol::WorkerMsg::Buckets(buckets(BUCKETS).unwrap()).to_line(),
        ];
        for l in &lines {
            assert_ne!(agrees(l), (false, false), "read: {l}");
        }
    }

    #[test]
    fn what_serde_might_word_or_read_differently_is_left_to_it() {
        let cases = [
            STEP.replace(r#""rank":17"#, r#""rank":17,"rank":18"#), // duplicate field
            STEP.replace(r#""samples":256,"#, ""),                  // missing field
            STEP.replace(r#""rank":17"#, r#""rank":4294967296"#),   // out of u32
            STEP.replace(r#""samples":256"#, r#""samples":256.0"#), // float for an integer
            STEP.replace(r#""samples":256"#, r#""samples":2e2"#),
            STEP.replace(r#""samples":256"#, r#""samples":-0"#),
            STEP.replace(r#""samples":256"#, r#""samples":0256"#), // leading zero
            STEP.replace(r#""t":1733140000.1234567"#, r#""t":1e400"#), // beyond f64
            STEP.replace(r#""t":1733140000.1234567"#, r#""t":NaN"#),
            STEP.replace(r#""t":1733140000.1234567"#, r#""t":.5"#),
            STEP.replace(r#""t":1733140000.1234567"#, r#""t":1."#),
            STEP.replace(r#""t":1733140000.1234567"#, r#""t":"1.5""#),
            STEP.replace("cuda_events", "CudaEvents"), // not the enum's name
            STEP.replace("cuda_events", r"cuda\u005fevents"), // an escape
            STEP.replace(r#""rank""#, r#""ra\u006ek""#), // an escaped key
            STEP.replace(r#""warmup":false"#, r#""warmup":null"#), // null for a required field
            STEP.replace(r#""v":1"#, r#""v":{"a":[1]}"#), // a nested unknown value
            STEP.replace(r#""v":1"#, r#""v":[1]"#),
            format!("{STEP}x"), // trailing bytes
            format!("{STEP},"),
            STEP.trim_end_matches('}').to_string(), // truncated
            STEP.replace(",", ",,"),
            BUCKETS.replace(r#""index":0,"#, ""), // a span's missing field
            BUCKETS.replace(r#""bytes":9461800"#, r#""bytes":1e7"#),
            BUCKETS.replace("}]}", "},]}"), // trailing comma
            "{}".to_string(),
            "[]".to_string(),
            String::new(),
        ];
        for line in &cases {
            assert_eq!(agrees(line), (false, false), "left to serde: {line}");
        }
    }

    /// A float formatted as Python's `repr` and Rust's `Debug` do, or with an exponent.
    fn float_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(|x| format!("{x:?}")),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(|x| format!("{x:e}")),
            (0u64..1 << 53).prop_map(|n| n.to_string()),
            "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Random numbers in every float field and random integers: read exactly as serde.
        #[test]
        fn random_numbers_are_read_exactly_as_serde_reads_them(
            floats in proptest::collection::vec(float_text(), 6),
            ints in proptest::collection::vec(any::<u64>(), 3),
            small in 0u64..(1 << 33),
        ) {
            let line = format!(
                r#"{{"v":1,"type":"step","rank":{small},"step":{},"epoch":{small},"t":{},"warmup":false,"sync":true,"samples":{},"fwd_ms":{},"bwd_ms":{},"opt_ms":{},"data_ms":{},"step_ms":{},"timing":"host"}}"#,
                ints[0], floats[0], ints[1], floats[1], floats[2], floats[3], floats[4], floats[5]
            );
            agrees(&line);
            let line = format!(
                r#"{{"rank":{small},"step":{},"t":{},"rebuilt":true,"bwd_compute_ms":{},"exposed_ms":{},"buckets":[{{"index":{small},"bytes":{},"ready_ms":{},"start_ms":{},"done_ms":{}}}]}}"#,
                ints[0], floats[0], floats[1], floats[2], ints[2], floats[3], floats[4], floats[5]
            );
            agrees(&line);
        }

        /// Any line at all, and the worker's lines cut or with a byte changed: never a value
        /// serde would not give.
        #[test]
        fn mangled_lines_are_read_as_serde_or_left_to_it(
            cut in 0usize..400,
            at in 0usize..400,
            byte in prop_oneof![Just(b'"'), Just(b','), Just(b'}'), Just(b'\\'), Just(b'0'), Just(b' '), Just(b'e'), any::<u8>()],
            junk in ".{0,80}",
        ) {
            agrees(&junk);
            for base in [STEP, BUCKETS] {
                agrees(&base[..cut.min(base.len())]);
                let mut b = base.as_bytes().to_vec();
                let i = at % b.len();
                b[i] = byte;
                if let Ok(s) = String::from_utf8(b) {
                    agrees(&s);
                }
            }
        }
    }
}
