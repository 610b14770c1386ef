//! The sans-IO protocol: a deterministic state machine with no I/O, no
//! tasks and no clock (the quinn-proto model).
//!
//! * [`engine`]: one rank's matching engine (posted and unexpected queues,
//!   eager, rendezvous and ready protocols, credit, peers);
//! * [`wire`]: the frames engines exchange, and their byte encoding;
//! * `sim` (with the `fuzzing` feature): a scripted harness that drives one
//!   engine with arbitrary frames and checks its invariants, for fuzzers
//!   and property tests.
//!
//! Nothing here knows about tasks, locks or sockets; the
//! [runtime](crate::runtime) drives it.

pub mod engine;
mod matching;
#[cfg(any(test, feature = "fuzzing"))]
pub mod sim;
pub mod wire;
