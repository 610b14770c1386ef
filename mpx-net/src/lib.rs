//! Transports for mpx, each behind the [`Transport`](mpx_core::Transport)
//! boundary of `mpx_core::runtime`.
//!
//! * [`loopback`]: N ranks in one process, so `cargo test` needs nothing
//!   else: messages handed to their receivers' engines without frames
//!   and collectives meeting in memory, or messages as frames moved
//!   through in-memory links with flow control, as values or
//!   (network-like) as encoded bytes;
//! * [`quic`]: ranks in separate processes or hosts over QUIC, with mutual
//!   TLS under a per-job credential.
//!
//! Where the rest goes:
//!
//! | path | what |
//! |---|---|
//! | `src/bootstrap/` | how a process learns its rank and peers: `mpxrun`'s implementation (`mpxrun.rs`), PMI (hydra, Slurm), Open MPI |
//! | `src/bin/mpx-credential.rs` | makes a job's credential |
//!
//! The `mpxrun` binary is the `mpx` crate's `src/bin/mpxrun.rs`.

#![deny(missing_docs)]

pub mod bootstrap;
pub mod loopback;
pub mod quic;
mod run;
