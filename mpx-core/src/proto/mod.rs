//! The sans-IO protocol: a deterministic state machine with no I/O, no
//! tasks and no clock (the quinn-proto model).
//!
//! * [`engine`]: one rank's matching engine (posted and unexpected queues,
//!   eager, rendezvous and ready protocols, credit, peers);
//! * [`wire`]: the frames engines exchange, and their byte encoding.
//!
//! Nothing here knows about tasks, locks or sockets; the
//! [runtime](crate::runtime) drives it.

pub mod engine;
mod matching;
pub mod wire;
