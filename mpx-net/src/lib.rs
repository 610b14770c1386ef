//! Transports for mpx.
//!
//! This crate will hold the in-memory `loopback` transport (N ranks in one
//! process, so `cargo test` needs nothing else), the QUIC transport built on
//! quinn, bootstrap from the environment of `mpxrun`, Open MPI's `mpirun`,
//! MPICH's `mpiexec` or Slurm, and the `mpxrun` launcher. Both transports
//! implement the `Transport` trait of `mpx-core`, which drives its sans-IO
//! matching engine. Today it re-exports the datatype layer it builds on.

pub use mpx_core;
