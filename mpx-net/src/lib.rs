//! Transports for mpx.
//!
//! * [`loopback`]: N ranks in one process, frames moved through in-memory
//!   channels, so `cargo test` needs nothing else;
//! * QUIC between processes and hosts (quinn), bootstrap from the
//!   environment of `mpxrun`, Open MPI's `mpirun`, MPICH's `mpiexec` or
//!   Slurm, and the `mpxrun` launcher: to come, behind the same
//!   [`Transport`](mpx_core::Transport) trait.

pub mod loopback;
