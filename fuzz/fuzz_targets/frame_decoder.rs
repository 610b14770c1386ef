//! The frame decoder on arbitrary byte streams, cut at arbitrary points:
//! see `mpx_core::proto::sim::check_decoder` for what it asserts.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mpx_core::proto::sim::check_decoder(data));
