//! # mpx: async-native message passing for Rust
//!
//! mpx brings MPI's point-to-point semantics, collectives and
//! derived-datatype engine to async Rust. This crate is the facade: it re-exports the datatype engine
//! and communicators of [`mpx_core`], the transports of [`mpx_net`] and
//! `#[derive(MpiType)]`.
//!
//! ```
//! use mpx::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mpx::Result<()> {
//! // Four ranks in this process, each passing its rank to the right.
//! let got = mpx::launch(4, |world| async move {
//!     let right = (world.rank() + 1) % world.size();
//!     let left = (world.rank() + world.size() - 1) % world.size();
//!     let mut inbox = [0u32];
//!     world.sendrecv(&[world.rank() as u32], right, 7, &mut inbox, left, 7).await?;
//!     Ok(inbox[0])
//! })
//! .await?;
//! assert_eq!(got, [3, 0, 1, 2]);
//! # Ok(()) }
//! ```
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mpx::Result<()> {
//! // Collectives: every rank gets the global sum, and rows of a 2x2 grid.
//! let sums = mpx::launch(4, |world| async move {
//!     let mut total = 0.0;
//!     world.allreduce(&(world.rank() as f64), &mut total, mpx::coll::SUM).await?;
//!     let grid = world.cart_create(&[2, 2], &[false, false], false).await?.expect("4 ranks");
//!     let row = grid.sub(&[false, true]).await?;
//!     assert_eq!(row.size(), 2);
//!     Ok(total)
//! })
//! .await?;
//! assert_eq!(sums, [6.0; 4]);
//! # Ok(()) }
//! ```
//!
//! ```
//! use mpx::prelude::*;
//!
//! // A face of a 3-D array, described once, packed without hand-written loops.
//! let face = Datatype::subarray(&[4, 4, 4], &[4, 4, 1], &[0, 0, 2], Order::C, &Datatype::double())?
//!     .commit();
//! let cube: Vec<f64> = (0..64).map(f64::from).collect();
//! let packed = face.pack_to_vec(Region::of(&cube), 1)?;
//! assert_eq!(packed.len(), 16 * 8);
//! # Ok::<(), mpx::Error>(())
//! ```
//!
//! # Cargo features
//!
//! * `num-complex`: [`MpiType`](trait@MpiType) for `num_complex::Complex<f32>`
//!   and `Complex<f64>`, as `c_float_complex` and `c_double_complex`.
//! * `serde` (on by default): serde messages, any `Serialize`/`Deserialize`
//!   value sent and received in postcard's format (see `Serde` and the
//!   [`comm`] module);
//!   `default-features = false` leaves serde and postcard out.

#![deny(missing_docs)]

pub use mpx_core::*;
pub use mpx_net::bootstrap::launch;
pub use mpx_net::loopback::{launch_with, Options as LaunchOptions};
/// The QUIC transport: ranks in separate processes and hosts, with per-job
/// mutual TLS (see `mpx::launch` for the launchers that start them).
pub use mpx_net::quic;
/// Owned, cheaply cloned bytes (the `bytes` crate's): sent as they are,
/// as `packed` data, without a copy (`comm.isend(Bytes::from(vec), ..)`),
/// and what `irecv_bytes` gives back.
pub use bytes::Bytes;
/// Derives [`MpiType`](trait@MpiType) for a `#[repr(C)]` struct (named or
/// tuple fields; `packed`, `align(N)` and `#[repr(transparent)]` newtypes
/// too) or a fieldless enum with an integer repr.
///
/// The datatype is a struct type of every field's datatype at its real
/// offset, resized to `size_of::<Self>()`, so slices pack and unpack
/// correctly and padding is never touched; it is built once per concrete
/// type. Fields of types with invalid bit patterns (`bool`, `char`,
/// `NonZero*`, derived enums) are validated on unpack. Generic structs get
/// an `MpiType` bound on each type parameter. Types whose memory cannot be
/// described (references, pointers, `String`, `Vec`, `Box`, trait objects,
/// unions, data-carrying enums, structs with neither `#[repr(C)]` nor
/// `#[repr(transparent)]`) are rejected
/// at compile time. `#[mpx(crate = "path")]` changes the path the generated
/// code uses to name mpx (default `::mpx`).
///
/// ```
/// use mpx::MpiType;
///
/// #[derive(Clone, Copy, Debug, PartialEq, MpiType)]
/// #[repr(C)]
/// struct Particle {
///     position: [f64; 3],
///     charge: i8, // followed by padding, which is never packed
///     species: Species,
/// }
///
/// #[derive(Clone, Copy, Debug, PartialEq, MpiType)]
/// #[repr(u32)]
/// enum Species { Electron = 1, Proton, Neutron }
///
/// let t = Particle::datatype();
/// assert_eq!(t.size(), 3 * 8 + 1 + 4);
/// assert_eq!(t.extent() as usize, std::mem::size_of::<Particle>());
///
/// let sent = [Particle { position: [0.0, 1.0, 2.0], charge: -1, species: Species::Electron }; 4];
/// let mut buf = vec![0u8; t.pack_size(4)?];
/// mpx::pack(&sent, &mut buf, &mut 0)?;
/// let mut received = [Particle { position: [0.0; 3], charge: 0, species: Species::Neutron }; 4];
/// mpx::unpack(&buf, &mut 0, &mut received)?;
/// assert_eq!(received, sent);
///
/// // 7 is not a declared `Species`: the unpack fails and changes nothing.
/// buf[25..29].copy_from_slice(&7u32.to_ne_bytes());
/// let err = mpx::unpack(&buf, &mut 0, &mut received).unwrap_err();
/// assert!(matches!(err.kind(), mpx::ErrorKind::InvalidValue { item: 0, .. }));
/// assert_eq!(received, sent);
/// # Ok::<(), mpx::Error>(())
/// ```
pub use mpx_derive::MpiType;

/// The names most programs need: `use mpx::prelude::*;`.
///
/// The communicator and its arguments ([`Comm`], [`Peer`], [`Any`],
/// [`PROC_NULL`]), buffers and datatypes, requests, [`wait_all`] and
/// [`RequestSet`], receives' futures, persistent requests, errors, the
/// Cartesian grid and the common reduction operations, [`launch`], and
/// `MpiType`, both the trait and its derive:
///
/// ```
/// use mpx::prelude::*;
///
/// #[derive(MpiType, Clone, Copy, Debug, PartialEq)]
/// #[repr(C)]
/// struct Point { x: f64, y: f64 }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// launch(2, |comm| async move {
///     let other = 1 - comm.rank();
///     let sends = [comm.isend(&Point { x: 1.0, y: 2.0 }, other, 0)];
///     let (p, _) = comm.recv::<Point>(other, 0).await?;
///     wait_all(sends).await.into_iter().collect::<Result<Vec<Status>>>()?;
///     assert_eq!(p, Point { x: 1.0, y: 2.0 });
///     Ok(())
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub mod prelude {
    pub use crate::MpiType;
    pub use mpx_core::{
        start_all, wait_all, Any, Basic, Comm, Datatype, DistArg, Distribution, Error, ErrorKind, ExchangeBuf, Incoming, Message,
        Order, OwnedRecv, Peer, Persistent, Receivable, RecvBuf, RecvData, RecvError, Region, RegionMut, Request,
        RequestSet, Result, SendBuf, SendData, Source, Status, Tested, Transfer, ValueRecv, PROC_NULL,
    };
    pub use mpx_core::coll::{Cart, Op, MAX, MIN, PROD, SUM};
    pub use bytes::Bytes;
    #[cfg(feature = "serde")]
    pub use mpx_core::Serde;
    /// Runs a program's ranks wherever the process was started: all of
    /// them in this process when started alone, this process's own under a
    /// launcher ([`crate::launch`]).
    pub use crate::launch;
}

/// The README's Rust examples, run as doc tests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeExamples;
