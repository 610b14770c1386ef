//! The core of mpx: MPI datatypes and the pack engine, the error type, and
//! the [`MpiType`] trait.
//!
//! * [`datatype`]: predefined types and every MPI constructor, with bounds,
//!   decoding and status counting computed from the constructor tree;
//! * [`mod@pack`]: pack/unpack (native and external32) driven by a program
//!   compiled per datatype;
//! * [`MpiType`]: Rust types that have a datatype, implemented for
//!   primitives and arrays, derived for `#[repr(C)]` structs by
//!   `mpx-derive`;
//! * [`engine`]: the sans-IO point-to-point matching engine, and [`wire`],
//!   the frames it exchanges;
//! * [`comm`]: communicators, with MPI's point-to-point operations as async
//!   functions over any [`Transport`];
//! * [`Error`]: the one error type of mpx.
//!
//! ```
//! use mpx_core::{Datatype, Region};
//! // Pack one column of a 4x4 row-major matrix.
//! let m: Vec<f64> = (0..16).map(f64::from).collect();
//! let col = Datatype::vector(4, 1, 4, &Datatype::double())?.commit();
//! let packed = col.pack_to_vec(Region::of(&m[1..]), 1)?;
//! assert_eq!(packed.len(), 32);
//! # Ok::<(), mpx_core::Error>(())
//! ```

#![warn(missing_docs)]

pub mod comm;
pub mod datatype;
#[doc(hidden)]
pub mod derive_support;
pub mod engine;
mod error;
mod mpi_type;
pub mod pack;
pub mod persistent;
pub mod request;
pub mod wire;

pub use datatype::{
    address_of, consts, Basic, Combiner, Contents, Datatype, DistArg, Distribution, Envelope, Order,
    Predefined, Signature,
};
pub use comm::{
    Any, Comm, Endpoint, Message, OwnedRecv, RecvBuf, RecvError, SendBuf, Status, Transport, BSEND_OVERHEAD, PROC_NULL, TAG_UB,
};
pub use persistent::{start_all, Persistent, PersistentRecv, PersistentSend};
pub use request::{test_all, test_any, test_some, wait_all, wait_any, wait_some, Operation, Request, RequestSet, Tested};
pub use error::{Error, Result};
pub use mpi_type::MpiType;
pub use pack::{pack, unpack, Region, RegionMut};
