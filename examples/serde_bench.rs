//! Serde formats for mpx's serde messages, measured: postcard, bincode 2
//! in serde mode (standard configuration: varints, little endian) and, for
//! scale, JSON.
//!
//! ```text
//! cargo run --release --example serde_bench [rounds]
//! ```
//!
//! Prints one JSON line per format and message: the encoded size, and the
//! median over `rounds` (default 11) of the time to encode the value into a
//! new `Vec` and to decode it back (what a send and a receive do), each
//! timed over enough repetitions to last about a millisecond.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A client's request to a key-value service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Request {
    id: u64,
    op: Op,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Op {
    Get { key: String },
    Put { key: String, value: Vec<u8> },
}

/// The service's reply: text and an enum with data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reply {
    id: u64,
    text: String,
    outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Outcome {
    Values(Vec<f64>),
    Missing { key: String },
}

/// A tree-like record: strings, optional and nested data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Node {
    name: String,
    tags: Vec<String>,
    position: (f64, f64, f64),
    parent: Option<u32>,
    children: Vec<u32>,
}

/// A serde format as mpx would use it: bytes out, a value (or an error) back.
trait Format {
    const NAME: &'static str;
    /// Whether values come back bit for bit (JSON's floats may not).
    const EXACT: bool = true;
    fn encode<T: Serialize>(value: &T) -> Vec<u8>;
    fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<T>;
}

struct Postcard;
impl Format for Postcard {
    const NAME: &'static str = "postcard";
    fn encode<T: Serialize>(value: &T) -> Vec<u8> {
        postcard::to_allocvec(value).expect("encodes")
    }
    fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
        postcard::from_bytes(bytes).ok()
    }
}

struct Bincode2;
impl Format for Bincode2 {
    const NAME: &'static str = "bincode2";
    fn encode<T: Serialize>(value: &T) -> Vec<u8> {
        bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("encodes")
    }
    fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
        bincode::serde::decode_from_slice(bytes, bincode::config::standard()).ok().map(|(v, _)| v)
    }
}

struct Json;
impl Format for Json {
    const NAME: &'static str = "json";
    const EXACT: bool = false;
    fn encode<T: Serialize>(value: &T) -> Vec<u8> {
        serde_json::to_vec(value).expect("encodes")
    }
    fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
        serde_json::from_slice(bytes).ok()
    }
}

/// Median nanoseconds per call of `op` over `rounds` rounds.
fn median_ns(rounds: usize, mut op: impl FnMut()) -> f64 {
    // Repetitions per round: enough for about a millisecond.
    let start = Instant::now();
    op();
    let once = start.elapsed().as_nanos().max(1) as usize;
    let reps = (1_000_000 / once).clamp(1, 100_000);
    let mut times: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..reps {
                op();
            }
            start.elapsed().as_nanos() as f64 / reps as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[rounds / 2]
}

fn measure<F: Format, T: Serialize + DeserializeOwned + PartialEq>(message: &str, value: &T, rounds: usize) {
    let bytes = F::encode(value);
    let back = F::decode::<T>(&bytes).unwrap_or_else(|| panic!("{} decodes {message}", F::NAME));
    assert!(!F::EXACT || back == *value, "{} round trip of {message}", F::NAME);
    let encode_ns = median_ns(rounds, || {
        black_box(F::encode(black_box(value)));
    });
    let decode_ns = median_ns(rounds, || {
        black_box(F::decode::<T>(black_box(&bytes)));
    });
    println!(
        "{}",
        serde_json::json!({
            "bench": "serde", "format": F::NAME, "message": message, "bytes": bytes.len(),
            "encode_ns": encode_ns.round(), "decode_ns": decode_ns.round(), "rounds": rounds,
        })
    );
}

fn measure_all<T: Serialize + DeserializeOwned + PartialEq>(message: &str, value: &T, rounds: usize) {
    measure::<Postcard, T>(message, value, rounds);
    measure::<Bincode2, T>(message, value, rounds);
    measure::<Json, T>(message, value, rounds);
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(11);
    let request = Request { id: 42, op: Op::Put { key: "temperature/7".into(), value: (0..16).collect() } };
    let reply = Reply {
        id: 42,
        text: "stored under temperature/7 by rank 0".into(),
        outcome: Outcome::Values(vec![20.5, 21.0, 21.25, 19.75]),
    };
    let map: BTreeMap<String, u64> = (0..64u64).map(|i| (format!("counter-{i}"), i * i * 1000)).collect();
    let tree: Vec<Node> = (0..100u32)
        .map(|i| Node {
            name: format!("node {i}"),
            tags: vec!["mesh".into(), format!("level-{}", i % 4)],
            position: (f64::from(i), f64::from(i) * 0.5, -1.0),
            parent: i.checked_sub(1).map(|p| p / 2),
            children: vec![2 * i + 1, 2 * i + 2],
        })
        .collect();
    let floats: Vec<f64> = (0..10_000).map(|i| f64::from(i) * 0.1).collect();
    let small_ints: Vec<u32> = (0..10_000).map(|i| i % 100).collect();

    measure_all("request", &request, rounds);
    measure_all("reply", &reply, rounds);
    measure_all("map_64", &map, rounds);
    measure_all("nested_100", &tree, rounds);
    measure_all("f64_10k", &floats, rounds);
    measure_all("small_u32_10k", &small_ints, rounds);
}
