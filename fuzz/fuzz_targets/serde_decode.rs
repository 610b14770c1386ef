//! The serde decoder on arbitrary bytes, as a few types a hostile peer
//! would aim at: see `mpx_core::comm::check_serde_decode` for what it
//! asserts.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpx_core::comm::check_serde_decode(data));
