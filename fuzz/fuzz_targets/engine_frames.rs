//! One engine fed arbitrary frame streams from its peers, interleaved with
//! its program's operations, time and its transport's stalls: see
//! `mpx_core::proto::sim` for the script format and the invariants checked
//! after every step.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpx_core::proto::sim::Node::run(data));
