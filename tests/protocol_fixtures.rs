//! The shared protocol fixtures (also loaded by the Python tests) and fuzzing of the reader.

use ddptop::protocol::agent::{parse_agent, parse_to_agent};
use ddptop::protocol::{LineReader, ReadOutcome, parse_control, parse_worker};
use proptest::prelude::*;
use serde_json::Value;

/// The shared fixtures, then the node agents' (`agent.jsonl`: Rust only, no Python agent).
fn cases() -> Vec<Value> {
    ["cases.jsonl", "agent.jsonl"]
        .iter()
        .flat_map(|f| {
            let path = format!("{}/tests/fixtures/protocol/{f}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(path).unwrap();
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<Value>>()
        })
        .collect()
}

#[test]
fn every_fixture_is_accepted_or_rejected_as_it_says() {
    let cases = cases();
    assert!(cases.len() >= 30, "fixture file looks truncated");
    for c in &cases {
        let raw = c["raw"].as_str().unwrap();
        let name = c["name"].as_str().unwrap();
        let accepted_type = match c["dir"].as_str().unwrap() {
            "worker" => parse_worker(raw).map(|m| m.type_name().to_string()),
            "agent" => parse_agent(raw).map(|m| m.type_name().to_string()),
            "to_agent" => parse_to_agent(raw).map(|m| {
                serde_json::to_value(m.unwrap()).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }),
            _ => parse_control(raw).map(|m| {
                serde_json::to_value(&m).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }),
        };
        match c["expect"].as_str().unwrap() {
            "accept" => {
                let t = accepted_type.unwrap_or_else(|e| panic!("{name}: rejected: {e}"));
                assert_eq!(t, c["type"].as_str().unwrap(), "{name}");
            }
            "reject" => assert!(
                accepted_type.is_err(),
                "{name}: accepted but must be rejected"
            ),
            other => panic!("{name}: unknown expectation {other}"),
        }
    }
}

#[test]
fn every_example_in_the_docs_is_a_fixture() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/protocol.md")).unwrap();
    let raws: Vec<String> = cases()
        .iter()
        .map(|c| c["raw"].as_str().unwrap().to_string())
        .collect();
    let mut n = 0;
    for block in doc.split("```json\n").skip(1) {
        let example = block.split("\n```").next().unwrap();
        assert!(
            raws.iter().any(|r| r == example),
            "doc example is not a fixture: {example}"
        );
        n += 1;
    }
    assert!(n >= 15, "expected an example per message type, found {n}");
}

#[test]
fn serialized_messages_round_trip() {
    for c in cases()
        .iter()
        .filter(|c| c["expect"] == "accept" && c["dir"] == "worker")
    {
        let m = parse_worker(c["raw"].as_str().unwrap()).unwrap();
        assert_eq!(parse_worker(&m.to_line()).unwrap(), m);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let s = String::from_utf8_lossy(&bytes);
        let _ = parse_worker(&s);
        let _ = parse_control(&s);
        let _ = parse_agent(&s);
        let _ = parse_to_agent(&s);
    }

    #[test]
    fn mutated_valid_lines_never_panic(idx in 0usize..20, pos in 0usize..400, byte in any::<u8>(), cut in 0usize..400) {
        let cases = cases();
        let valid: Vec<&Value> = cases.iter().filter(|c| c["expect"] == "accept").collect();
        let raw = valid[idx % valid.len()]["raw"].as_str().unwrap().as_bytes().to_vec();
        let mut m = raw.clone();
        let p = pos % m.len();
        m[p] = byte;
        m.truncate(cut.max(1).min(m.len()));
        let _ = parse_worker(&String::from_utf8_lossy(&m));
        let _ = parse_agent(&String::from_utf8_lossy(&m));
    }

    #[test]
    fn reader_never_stalls_on_arbitrary_streams(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..20)) {
        let data: Vec<u8> = chunks.concat();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut r = LineReader::with_max(tokio::io::BufReader::with_capacity(16, &data[..]), 64);
            // Every call consumes input, so the stream ends within len+1 calls.
            for _ in 0..=data.len() + 1 {
                if r.next_line().await.unwrap() == ReadOutcome::Eof {
                    return;
                }
            }
            panic!("reader did not reach EOF");
        });
    }
}

/// What a worker's `result` may name is ddptop's families, in the same order, on both sides of
/// the wire: the Python client's `RESULT_FIELDS` (its `EXPERIMENTS` are their keys) and the
/// protocol's `EXPERIMENT_NAMES` (a family added to `run::Experiment` alone would have its
/// results refused).
#[test]
fn the_python_clients_experiments_are_the_families() {
    let path = format!(
        "{}/workers/ddptop_worker/protocol.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    // The keys of `RESULT_FIELDS = {`, one `    "name": fields,` line each, up to its `}`.
    let python: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("RESULT_FIELDS: "))
        .skip(1)
        .take_while(|l| *l != "}")
        .filter_map(|l| l.strip_prefix("    \"")?.split_once("\":"))
        .map(|(name, _)| name.to_string())
        .collect();
    let families: Vec<String> = <ddptop::run::Experiment as strum::IntoEnumIterator>::iter()
        .map(|e| e.as_str().to_string())
        .collect();
    let protocol: Vec<String> = ddptop::protocol::EXPERIMENT_NAMES
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        python, families,
        "workers/ddptop_worker/protocol.py RESULT_FIELDS"
    );
    assert_eq!(
        protocol, families,
        "src/protocol/result.rs EXPERIMENT_NAMES"
    );
}
