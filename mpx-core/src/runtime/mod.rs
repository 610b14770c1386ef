//! The endpoint runtime: the thin layer between the sans-IO protocol
//! ([`crate::proto`]) and the user API ([`crate::comm`]).
//!
//! An [`Endpoint`] is one rank's connection to the world. It owns the rank's
//! [`Engine`](crate::proto::engine::Engine) behind one mutex and a
//! [`Transport`] that carries frames to peers; the transport's driver feeds
//! incoming frames to [`Endpoint::handle_frame`], so matching and protocol
//! replies progress whether or not anyone polls a particular operation.
//! Between ranks of one process whose messages meet ([`LocalWorld`]), a
//! send hands its message to the receiving endpoint's engine instead,
//! under that endpoint's lock, and is completed from there.
//! Completions the engine reports are kept here until the request that owns
//! them is polled, and its waker is called once the lock is released.

mod endpoint;
mod local;
#[cfg(test)]
mod local_messages_tests;
mod transport;

pub use endpoint::{Endpoint, WeakEndpoint};
pub use local::LocalWorld;
pub use transport::{SendError, Transport};

pub(crate) use endpoint::{looking, CommCollectives, Completion, Shared, Tracked};
pub(crate) use local::{block_list, one_block, recycle, recycle_bytes, Arrival, Block, BlockBytes, Glimpse, LocalComm, MemberParts, Mixed, Part, Parts, Seat, SmallPart, Want, INLINE, MESSAGES};
