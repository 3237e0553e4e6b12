use std::fmt::Debug;
use std::hint::black_box;
use std::time::Instant;

use serde::de::DeserializeOwned;

#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    CudaEvents,
    Host,
    Xla,
}
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Step {
    pub rank: u32,
    pub step: u64,
    pub epoch: u32,
    pub t: f64,
    pub warmup: bool,
    pub sync: bool,
    pub samples: u64,
    pub fwd_ms: f64,
    pub bwd_ms: f64,
    pub opt_ms: f64,
    pub data_ms: f64,
    pub step_ms: f64,
    pub timing: Timing,
    #[serde(default)]
    pub loss: Option<f64>,
    #[serde(default)]
    pub fused: Option<bool>,
    #[serde(default)]
    pub every: Option<u32>,
    #[serde(default)]
    pub t_bwd: Option<f64>,
}
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct BucketSpan {
    pub index: u32,
    pub bytes: u64,
    pub ready_ms: f64,
    pub start_ms: f64,
    pub done_ms: f64,
    #[serde(default)]
    pub kernel_ms: Option<f64>,
}
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Buckets {
    pub rank: u32,
    pub step: u64,
    pub t: f64,
    pub rebuilt: bool,
    pub bwd_compute_ms: f64,
    pub exposed_ms: f64,
    pub buckets: Vec<BucketSpan>,
    #[serde(default)]
    pub start_inferred: Option<bool>,
}

// ---------------- parsers ----------------
fn p_serde<T: DeserializeOwned>(s: &str, _b: &mut Vec<u8>) -> Result<T, String> {
    serde_json::from_str::<T>(s).map_err(|e| e.to_string())
}
fn p_sonic<T: DeserializeOwned>(s: &str, _b: &mut Vec<u8>) -> Result<T, String> {
    sonic_rs::from_str::<T>(s).map_err(|e| e.to_string())
}
fn p_simd<T: DeserializeOwned>(s: &str, b: &mut Vec<u8>) -> Result<T, String> {
    b.clear();
    b.extend_from_slice(s.as_bytes());
    simd_json::serde::from_slice::<T>(b).map_err(|e| e.to_string())
}

// ---------------- data generation ----------------
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn f(&mut self) -> f64 {
        (self.next() as f64) / ((1u64 << 53) as f64)
    }
    fn range(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.f()
    }
    fn u(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
/// Python-repr-like float formatting (shortest round trip, ".0" for integral, e-05 exponents).
fn py(x: f64) -> String {
    let s = format!("{:?}", x);
    if let Some(p) = s.find('e') {
        let (m, e) = s.split_at(p);
        let e = &e[1..];
        let (sign, digits) = if let Some(d) = e.strip_prefix('-') { ("-", d) } else { ("+", e) };
        format!("{}e{}{:0>2}", m.trim_end_matches(".0"), sign, digits)
    } else {
        s
    }
}
fn ms(r: &mut Lcg, a: f64, b: f64) -> f64 {
    // mix: f32-widened (cuda events), full f64, rounded to 1-2 decimals, tiny (exponent form)
    match r.u(10) {
        0..=3 => r.range(a, b) as f32 as f64,
        4..=6 => r.range(a, b),
        7 => (r.range(a, b) * 10.0).round() / 10.0,
        8 => (r.range(a, b) * 100.0).round() / 100.0,
        _ => r.range(1e-6, 9e-5),
    }
}
fn gen_step(r: &mut Lcg, i: u64) -> (String, Step) {
    let timing = [Timing::CudaEvents, Timing::Host, Timing::Xla][r.u(3) as usize].clone();
    let t = 1733140000.0 + i as f64 * 0.05 + r.f() * 0.01;
    let mut st = Step {
        rank: r.u(64) as u32, step: i, epoch: (i / 500) as u32, t, warmup: i < 20, sync: r.u(2) == 0,
        samples: [32, 64, 128, 256][r.u(4) as usize], fwd_ms: ms(r, 5.0, 30.0), bwd_ms: ms(r, 10.0, 60.0),
        opt_ms: ms(r, 0.5, 5.0), data_ms: ms(r, 0.01, 2.0), step_ms: r.range(20.0, 100.0), timing,
        loss: None, fused: None, every: None, t_bwd: None,
    };
    if r.u(10) < 7 { st.loss = Some(r.range(0.5, 3.0)); }
    if r.u(10) < 2 { st.fused = Some(r.u(2) == 0); }
    if r.u(10) < 2 { st.every = Some(1 + r.u(10) as u32); }
    if r.u(10) < 3 { st.t_bwd = Some(t + r.range(0.01, 0.05)); }
    let tm = match st.timing { Timing::CudaEvents => "cuda_events", Timing::Host => "host", Timing::Xla => "xla" };
    let mut s = format!(
        "{{\"v\":1,\"type\":\"step\",\"rank\":{},\"step\":{},\"epoch\":{},\"t\":{},\"warmup\":{},\"sync\":{},\"samples\":{},\"fwd_ms\":{},\"bwd_ms\":{},\"opt_ms\":{},\"data_ms\":{},\"step_ms\":{},\"timing\":\"{}\"",
        st.rank, st.step, st.epoch, py(st.t), st.warmup, st.sync, st.samples, py(st.fwd_ms), py(st.bwd_ms),
        py(st.opt_ms), py(st.data_ms), py(st.step_ms), tm
    );
    if let Some(x) = st.loss { s += &format!(",\"loss\":{}", py(x)); }
    if let Some(x) = st.fused { s += &format!(",\"fused\":{}", x); }
    if let Some(x) = st.every { s += &format!(",\"every\":{}", x); }
    if let Some(x) = st.t_bwd { s += &format!(",\"t_bwd\":{}", py(x)); }
    s.push('}');
    (s, st)
}
fn gen_buckets(r: &mut Lcg, i: u64) -> (String, Buckets) {
    let t = 1733140000.0 + i as f64 * 0.05 + r.f() * 0.01;
    let n = 1 + r.u(8);
    let mut spans = Vec::new();
    let mut cur = r.range(1.0, 5.0);
    for k in 0..n {
        let ready = cur;
        let start = if r.u(2) == 0 { ready } else { ready + r.range(0.0, 1.0) };
        let done = start + r.range(0.05, 3.0);
        let bytes = 1_000_000 + r.u(30_000_000);
        let kernel_ms = if r.u(4) == 0 { Some(r.range(0.01, 2.0) as f32 as f64) } else { None };
        spans.push(BucketSpan { index: k as u32, bytes, ready_ms: ready, start_ms: start, done_ms: done, kernel_ms });
        cur = done + r.range(0.5, 10.0);
    }
    let b = Buckets {
        rank: r.u(64) as u32, step: i, t, rebuilt: r.u(5) == 0, bwd_compute_ms: ms(r, 10.0, 60.0),
        exposed_ms: ms(r, 0.0, 1.0), buckets: spans, start_inferred: if r.u(3) == 0 { Some(r.u(2) == 0) } else { None },
    };
    let bs: Vec<String> = b.buckets.iter().map(|x| {
        let mut o = format!("{{\"index\":{},\"bytes\":{},\"ready_ms\":{},\"start_ms\":{},\"done_ms\":{}",
            x.index, x.bytes, py(x.ready_ms), py(x.start_ms), py(x.done_ms));
        if let Some(k) = x.kernel_ms { o += &format!(",\"kernel_ms\":{}", py(k)); }
        o.push('}');
        o
    }).collect();
    let mut s = format!(
        "{{\"v\":1,\"type\":\"buckets\",\"rank\":{},\"step\":{},\"t\":{},\"rebuilt\":{},\"bwd_compute_ms\":{},\"exposed_ms\":{},\"buckets\":[{}]",
        b.rank, b.step, py(b.t), b.rebuilt, py(b.bwd_compute_ms), py(b.exposed_ms), bs.join(",")
    );
    if let Some(x) = b.start_inferred { s += &format!(",\"start_inferred\":{}", x); }
    s.push('}');
    (s, b)
}

// ---------------- bench ----------------
type PFn<T> = fn(&str, &mut Vec<u8>) -> Result<T, String>;
const PASSES: usize = 5;
fn measure<T>(lines: &[String], f: PFn<T>) -> f64 {
    let mut buf = Vec::with_capacity(4096);
    let t0 = Instant::now();
    for _ in 0..PASSES {
        for l in lines {
            let v = f(black_box(l.as_str()), &mut buf);
            black_box(&v);
        }
    }
    t0.elapsed().as_nanos() as f64 / (PASSES * lines.len()) as f64
}
fn measure_simd_buffers<T: DeserializeOwned>(lines: &[String]) -> f64 {
    let mut buf = Vec::with_capacity(4096);
    let mut bufs = simd_json::Buffers::new(4096);
    let t0 = Instant::now();
    for _ in 0..PASSES {
        for l in lines {
            buf.clear();
            buf.extend_from_slice(black_box(l.as_str()).as_bytes());
            let v = simd_json::serde::from_slice_with_buffers::<T>(&mut buf, &mut bufs);
            black_box(&v);
        }
    }
    t0.elapsed().as_nanos() as f64 / (PASSES * lines.len()) as f64
}

fn show<T: Debug>(r: &Result<T, String>) -> String {
    match r {
        Ok(v) => format!("Ok({:?})", v),
        Err(e) => format!("Err({})", e),
    }
}
/// Bit-exact equality: Debug of f64 is shortest-round-trip and distinguishes -0.0.
fn same<T: Debug>(a: &Result<T, String>, b: &Result<T, String>) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => format!("{:?}", x) == format!("{:?}", y),
        (Err(_), Err(_)) => true,
        _ => false,
    }
}
fn short(s: &str) -> String {
    if s.len() > 150 { format!("{}…", &s[..s.char_indices().nth(150).map(|c| c.0).unwrap_or(s.len())]) } else { s.to_string() }
}

fn edge<T: DeserializeOwned + Debug>(name: &str, input: &str, fails: &mut Vec<String>) {
    let mut b = Vec::new();
    let a = p_serde::<T>(input, &mut b);
    let so = p_sonic::<T>(input, &mut b);
    let si = p_simd::<T>(input, &mut b);
    let acc = |r: &Result<T, String>| if r.is_ok() { "ok " } else { "ERR" };
    let ps = |r: &Result<T, String>| if same(&a, r) { "PASS" } else { "FAIL" };
    println!(
        "{:<34} serde_json={}  sonic={} {}  simd={} {}",
        name, acc(&a), acc(&so), ps(&so), acc(&si), ps(&si)
    );
    for (pn, r) in [("sonic-rs", &so), ("simd-json", &si)] {
        if !same(&a, r) {
            fails.push(format!(
                "[{}] {}\n   input:      {}\n   serde_json: {}\n   {:<11} {}",
                pn, name, short(input), short(&show(&a)), format!("{}:", pn), short(&show(r))
            ));
        }
    }
    if std::env::var("VERBOSE").is_ok() {
        println!("   serde_json: {}\n   sonic:      {}\n   simd:       {}", short(&show(&a)), short(&show(&so)), short(&show(&si)));
    }
}

fn main() {
    let mut r = Lcg(0x5eed_1234_abcd_ef01);
    let (steps, step_truth): (Vec<String>, Vec<Step>) = (0..10_000).map(|i| gen_step(&mut r, i)).unzip();
    let (buckets, buckets_truth): (Vec<String>, Vec<Buckets>) = (0..10_000).map(|i| gen_buckets(&mut r, i)).unzip();
    println!("serde_json float_roundtrip feature: {}", cfg!(feature = "rt"));
    let avg = |v: &[String]| v.iter().map(|s| s.len()).sum::<usize>() as f64 / v.len() as f64;
    println!("sample step:    {}", steps[1234]);
    println!("sample buckets: {}", buckets[1234]);
    println!("avg bytes/line: step {:.0}, buckets {:.0}", avg(&steps), avg(&buckets));

    // ---- bulk semantic check ----
    println!("\n== bulk check (bit-exact vs serde_json) ==");
    let mut b = Vec::new();
    let bulk = |name: &str, n: usize| println!("{:<40} {}  (mismatching lines: {})", name, if n == 0 { "PASS" } else { "FAIL" }, n);
    macro_rules! bulkcheck {
        ($T:ty, $lines:expr, $truth:expr, $label:expr) => {{
            let (mut m_sj_truth, mut mso, mut msi, mut mso_t, mut msi_t) = (0, 0, 0, 0, 0);
            let mut shown = 0;
            for (l, tr) in $lines.iter().zip($truth.iter()) {
                let tr: Result<$T, String> = Ok(tr.clone());
                let a = p_serde::<$T>(l, &mut b);
                let so = p_sonic::<$T>(l, &mut b);
                let si = p_simd::<$T>(l, &mut b);
                if !same(&a, &tr) || a.is_err() { m_sj_truth += 1; if shown < 1 { shown += 1; println!("  e.g. serde_json != exact value:\n   line:  {}\n   sj:    {}\n   exact: {}", l, show(&a), show(&tr)); } }
                if !same(&a, &so) || a.is_err() { mso += 1; }
                if !same(&a, &si) || a.is_err() { msi += 1; }
                if !same(&tr, &so) { mso_t += 1; }
                if !same(&tr, &si) { msi_t += 1; }
            }
            bulk(&format!("{} serde_json == exact generated value", $label), m_sj_truth);
            bulk(&format!("{} sonic-rs == serde_json", $label), mso);
            bulk(&format!("{} simd-json == serde_json", $label), msi);
            bulk(&format!("{} sonic-rs == exact generated value", $label), mso_t);
            bulk(&format!("{} simd-json == exact generated value", $label), msi_t);
        }};
    }
    bulkcheck!(Step, steps, step_truth, "Step");
    bulkcheck!(Buckets, buckets, buckets_truth, "Buckets");
    println!("(exact generated value: lines are written with shortest-round-trip repr of known f64s; std str::parse check below)");
    let mut stdbad = 0;
    for (l, tr) in steps.iter().zip(step_truth.iter()) {
        let k = l.find("\"fwd_ms\":").unwrap() + 9;
        let e = k + l[k..].find(',').unwrap();
        if l[k..e].parse::<f64>().unwrap().to_bits() != tr.fwd_ms.to_bits() { stdbad += 1; }
    }
    bulk("std f64::from_str(fwd_ms literal) == exact", stdbad);
    let (mut maxulp, mut nbad, mut ntot) = (0i64, 0, 0);
    for (l, tr) in steps.iter().zip(step_truth.iter()) {
        let a: Step = serde_json::from_str(l).unwrap();
        let mut pairs = vec![(a.t, tr.t), (a.fwd_ms, tr.fwd_ms), (a.bwd_ms, tr.bwd_ms), (a.opt_ms, tr.opt_ms), (a.data_ms, tr.data_ms), (a.step_ms, tr.step_ms)];
        if let (Some(x), Some(y)) = (a.loss, tr.loss) { pairs.push((x, y)); }
        if let (Some(x), Some(y)) = (a.t_bwd, tr.t_bwd) { pairs.push((x, y)); }
        for (x, y) in pairs { ntot += 1; let d = (x.to_bits() as i64 - y.to_bits() as i64).abs(); if d > 0 { nbad += 1; } maxulp = maxulp.max(d); }
    }
    println!("serde_json Step f64 fields: {}/{} values differ from exact, max error {} ulp", nbad, ntot, maxulp);

    // ---- edge cases ----
    println!("\n== edge cases (accept/reject + value vs serde_json) ==");
    let base = r#"{"v":1,"type":"step","rank":17,"step":1234,"epoch":1,"t":1733140000.1234567,"warmup":false,"sync":true,"samples":256,"fwd_ms":14.213409423828125,"bwd_ms":28.93231201171875,"opt_ms":2.1,"data_ms":0.3,"step_ms":45.53919219970703,"timing":"cuda_events","loss":2.3025850929940455}"#;
    let bb = r#"{"v":1,"type":"buckets","rank":17,"step":1234,"t":1733140000.1234567,"rebuilt":true,"bwd_compute_ms":27.6,"exposed_ms":0.09,"buckets":[{"index":0,"bytes":9461800,"ready_ms":4.1,"start_ms":4.1,"done_ms":4.21},{"index":1,"bytes":26501120,"ready_ms":15.3,"start_ms":15.3,"done_ms":15.5},{"index":2,"bytes":8740352,"ready_ms":27.6,"start_ms":27.6,"done_ms":27.69}]}"#;
    let rep = |a: &str, b: &str| {
        assert!(base.contains(a), "{}", a);
        base.replacen(a, b, 1)
    };
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let deep100 = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let step_cases: Vec<(&str, String)> = vec![
        ("baseline", base.to_string()),
        ("dup key rank (17 then 99)", rep("\"rank\":17,", "\"rank\":17,\"rank\":99,")),
        ("dup key unknown (v twice)", rep("\"v\":1,", "\"v\":1,\"v\":2,")),
        ("dup key optional loss", rep("\"loss\":2.3025850929940455", "\"loss\":1.5,\"loss\":2.5")),
        ("missing required samples", rep("\"samples\":256,", "")),
        ("rank 4294967296 (>u32)", rep("\"rank\":17", "\"rank\":4294967296")),
        ("step 18446744073709551616 (>u64)", rep("\"step\":1234", "\"step\":18446744073709551616")),
        ("step u64::MAX", rep("\"step\":1234", "\"step\":18446744073709551615")),
        ("fwd_ms 1e400", rep("14.213409423828125", "1e400")),
        ("fwd_ms -1e400", rep("14.213409423828125", "-1e400")),
        ("fwd_ms 1e-400 (underflow)", rep("14.213409423828125", "1e-400")),
        ("samples -5", rep("\"samples\":256", "\"samples\":-5")),
        ("rank -0", rep("\"rank\":17", "\"rank\":-0")),
        ("fwd_ms -0.0", rep("14.213409423828125", "-0.0")),
        ("fwd_ms -0", rep("14.213409423828125", "-0")),
        ("fwd_ms 1E-7", rep("14.213409423828125", "1E-7")),
        ("fwd_ms 1e+2", rep("14.213409423828125", "1e+2")),
        ("fwd_ms 2.5e-05", rep("14.213409423828125", "2.5e-05")),
        ("fwd_ms 1.5E3", rep("14.213409423828125", "1.5E3")),
        ("samples 5.0 (float for u64)", rep("\"samples\":256", "\"samples\":5.0")),
        ("samples 5e2 (exp for u64)", rep("\"samples\":256", "\"samples\":5e2")),
        ("t integer 1733140000", rep("1733140000.1234567", "1733140000")),
        ("t 1e21-ish big int 123456789012345678901234", rep("1733140000.1234567", "123456789012345678901234")),
        ("fwd_ms 5e-324 (min subnormal)", rep("14.213409423828125", "5e-324")),
        ("fwd_ms 2.2250738585072011e-308", rep("14.213409423828125", "2.2250738585072011e-308")),
        ("fwd_ms 1.7976931348623157e308", rep("14.213409423828125", "1.7976931348623157e308")),
        ("fwd_ms halfway 1.000..0011102230246251565404236316680908203125", rep("14.213409423828125", "1.00000000000000011102230246251565404236316680908203125")),
        ("fwd_ms 60-digit mantissa", rep("14.213409423828125", "0.123456789012345678901234567890123456789012345678901234567890")),
        ("fwd_ms 9007199254740993 (2^53+1)", rep("14.213409423828125", "9007199254740993")),
        ("fwd_ms leading zero 01.5", rep("14.213409423828125", "01.5")),
        ("fwd_ms .5", rep("14.213409423828125", ".5")),
        ("fwd_ms 1.", rep("14.213409423828125", "1.")),
        ("fwd_ms +1", rep("14.213409423828125", "+1")),
        ("fwd_ms NaN", rep("14.213409423828125", "NaN")),
        ("fwd_ms Infinity", rep("14.213409423828125", "Infinity")),
        ("fwd_ms \"1.5\" (string)", rep("14.213409423828125", "\"1.5\"")),
        ("timing escaped \"cuda\\u005fevents\"", rep("\"cuda_events\"", r#""cuda\u005fevents""#)),
        ("timing escaped \"\\u0068ost\"", rep("\"cuda_events\"", r#""\u0068ost""#)),
        ("timing \"host\\n\"", rep("\"cuda_events\"", r#""host\n""#)),
        ("timing \"CudaEvents\"", rep("\"cuda_events\"", "\"CudaEvents\"")),
        ("timing invalid escape \\x", rep("\"cuda_events\"", r#""cuda\xevents""#)),
        ("trailing garbage ' x'", format!("{} x", base)),
        ("trailing second object", format!("{}{}", base, base)),
        ("trailing comma inside", rep(",\"loss\":2.3025850929940455}", ",\"loss\":2.3025850929940455,}")),
        ("trailing '\\n' / whitespace", format!("{}\n  \r\n\t", base)),
        ("leading whitespace", format!(" \n\t{}", base)),
        ("whitespace/newlines inside", base.replace(",", " ,\n\t ").replace(":", "\r\n: ")),
        ("UTF-8 non-ASCII in unknown value", rep("\"v\":1,", "\"note\":\"héllo — 日本語 🚀 ü\",")),
        ("UTF-8 non-ASCII unknown key name", rep("\"v\":1,", "\"clé_日本\":1,")),
        ("escaped surrogate pair in unknown", rep("\"v\":1,", r#""note":"\ud83d\ude80","#)),
        ("lone surrogate \\ud800 in unknown", rep("\"v\":1,", r#""note":"\ud800","#)),
        ("raw control char (tab) in unknown str", rep("\"v\":1,", "\"note\":\"a\tb\",")),
        ("raw control char in timing", rep("\"cuda_events\"", "\"cuda\u{1}events\"")),
        ("unknown nested obj/array", rep("\"v\":1,", "\"extra\":{\"a\":[1,{\"b\":null,\"c\":[true,false,-1.5e3]}],\"d\":\"x\"},\"arr\":[[],{}],")),
        ("unknown nested depth 100", rep("\"v\":1,", &format!("\"deep\":{},", deep100))),
        ("unknown nested depth 200", rep("\"v\":1,", &format!("\"deep\":{},", deep))),
        ("unknown key invalid JSON value", rep("\"v\":1,", "\"v\":tru,")),
        ("loss null", rep("2.3025850929940455", "null")),
        ("rank null", rep("\"rank\":17", "\"rank\":null")),
        ("warmup 0 (int for bool)", rep("\"warmup\":false", "\"warmup\":0")),
        ("every 7.0 (float for Option<u32>)", rep("\"v\":1,", "\"every\":7.0,")),
        ("empty object", "{}".to_string()),
        ("top-level array []", "[]".to_string()),
        ("top-level array positional", "[17,1234,1,1733140000.1234567,false,true,256,14.2,28.9,2.1,0.3,45.5,\"cuda_events\",2.3,null,null,null]".to_string()),
        ("top-level array positional short", "[17,1234,1,1733140000.1234567,false,true,256,14.2,28.9,2.1,0.3,45.5,\"cuda_events\"]".to_string()),
        ("empty string", "".to_string()),
        ("UTF-8 BOM prefix", format!("\u{feff}{}", base)),
        ("top-level null", "null".to_string()),
    ];
    let mut fails = Vec::new();
    for (n, s) in &step_cases {
        edge::<Step>(n, s, &mut fails);
    }
    let brep = |a: &str, b: &str| {
        assert!(bb.contains(a), "{}", a);
        bb.replacen(a, b, 1)
    };
    let bcases: Vec<(&str, String)> = vec![
        ("B baseline", bb.to_string()),
        ("B empty buckets []", brep(r#"[{"index":0"#, r#"[],"x":[{"index":0"#)),
        ("B kernel_ms null/present", brep("\"done_ms\":4.21}", "\"done_ms\":4.21,\"kernel_ms\":null}").replacen("\"done_ms\":15.5}", "\"done_ms\":15.5,\"kernel_ms\":0.11}", 1)),
        ("B bytes u64::MAX", brep("9461800", "18446744073709551615")),
        ("B bytes 1e7 (exp int)", brep("9461800", "1e7")),
        ("B index -1", brep("\"index\":0", "\"index\":-1")),
        ("B dup key in span", brep("\"index\":0,", "\"index\":0,\"index\":5,")),
        ("B buckets null", brep(r#""buckets":[{"index":0"#, r#""buckets":null,"y":[{"index":0"#)),
        ("B span unknown key nested", brep("\"done_ms\":4.21}", "\"done_ms\":4.21,\"meta\":{\"k\":[1,2,{\"z\":\"é\"}]}}")),
        ("B trailing comma in array", brep("27.69}]", "27.69},]")),
        ("B start_inferred true", brep("]}", "],\"start_inferred\":true}")),
    ];
    for (n, s) in &bcases {
        edge::<Buckets>(n, s, &mut fails);
    }
    println!("\n== semantic differences ({}) ==", fails.len());
    for f in &fails {
        println!("{}", f);
    }

    // ---- benchmark ----
    println!("\n== benchmark: ns/line, {} reps interleaved, {} passes x 10000 lines per rep ==", 5, PASSES);
    // warmup
    measure::<Step>(&steps, p_serde::<Step>);
    measure::<Step>(&steps, p_sonic::<Step>);
    measure::<Step>(&steps, p_simd::<Step>);
    measure::<Buckets>(&buckets, p_serde::<Buckets>);
    measure::<Buckets>(&buckets, p_sonic::<Buckets>);
    measure::<Buckets>(&buckets, p_simd::<Buckets>);
    let names = [
        "Step    serde_json",
        "Step    sonic-rs",
        "Step    simd-json",
        "Step    simd-json+Buffers*",
        "Buckets serde_json",
        "Buckets sonic-rs",
        "Buckets simd-json",
        "Buckets simd-json+Buffers*",
    ];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for rep in 0..5 {
        for k in 0..names.len() {
            let j = (k + rep) % names.len(); // rotate order
            let v = match j {
                0 => measure::<Step>(&steps, p_serde::<Step>),
                1 => measure::<Step>(&steps, p_sonic::<Step>),
                2 => measure::<Step>(&steps, p_simd::<Step>),
                3 => measure_simd_buffers::<Step>(&steps),
                4 => measure::<Buckets>(&buckets, p_serde::<Buckets>),
                5 => measure::<Buckets>(&buckets, p_sonic::<Buckets>),
                6 => measure::<Buckets>(&buckets, p_simd::<Buckets>),
                _ => measure_simd_buffers::<Buckets>(&buckets),
            };
            res[j].push(v);
        }
    }
    let stats = |v: &Vec<f64>| {
        let mut s = v.clone();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (s[0], s[s.len() / 2])
    };
    println!("{:<28} {:>9} {:>9} {:>14}   all reps", "parser", "min", "median", "speedup(med)");
    for (i, n) in names.iter().enumerate() {
        let (mn, md) = stats(&res[i]);
        let base = stats(&res[if i < 4 { 0 } else { 4 }]).1;
        let basemin = stats(&res[if i < 4 { 0 } else { 4 }]).0;
        println!(
            "{:<28} {:>9.1} {:>9.1} {:>6.2}x/{:.2}x   {:?}",
            n, mn, md, base / md, basemin / mn,
            res[i].iter().map(|x| (x * 10.0).round() / 10.0).collect::<Vec<_>>()
        );
    }
    println!("(speedup = serde_json median / parser median, then min/min; * = simd_json::serde::from_slice_with_buffers, informational)");
}
