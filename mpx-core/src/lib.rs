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
//! * [`proto`]: the sans-IO protocol: the point-to-point matching engine
//!   and the wire format of its frames;
//! * [`runtime`]: the endpoint that drives the engine, and the
//!   [`Transport`] boundary a network sits behind;
//! * [`comm`]: communicators, with MPI's point-to-point operations as async
//!   functions, persistent requests, and communicators over subgroups
//!   (`split`, `create`, [`Group`]);
//! * [`request`]: requests as futures, and MPI's completion functions;
//! * [`coll`]: collective operations and Cartesian topologies;
//! * [`Error`]: the one error type of mpx.
//!
//! ```
//! use mpx::{Datatype, Region};
//! // Pack one column of a 4x4 row-major matrix.
//! let m: Vec<f64> = (0..16).map(f64::from).collect();
//! let col = Datatype::vector(4, 1, 4, &Datatype::double())?.commit();
//! let packed = col.pack_to_vec(Region::of(&m[1..]), 1)?;
//! assert_eq!(packed.len(), 32);
//! # Ok::<(), mpx::Error>(())
//! ```

#![deny(missing_docs)]

pub mod coll;
pub mod comm;
pub mod datatype;
#[doc(hidden)]
pub mod derive_support;
mod error;
mod mpi_type;
pub mod pack;
pub mod proto;
pub mod request;
pub mod runtime;

pub use datatype::{
    address_of, address_of_mut, consts, Basic, Combiner, Contents, Datatype, DistArg, Distribution, Envelope, Integer, Order,
    Predefined, Signature,
};
pub use comm::{
    start_all, Any, Comm, CommRelation, Exchange, ExchangeBuf, Group, GroupRelation, Message, OwnedRecv, Peer, Persistent, PersistentRecv, PersistentSend,
    RecvBuf, RecvData, RecvError, SendBuf, ValueRecv, SendData, Source, TagSel, Transfer, BSEND_OVERHEAD, PROC_NULL, TAG_UB,
};
pub use comm::{Incoming, Receivable};
#[cfg(feature = "serde")]
pub use comm::Serde;
pub use request::{
    wait_all, Operation, Request, RequestSet, Status, Tested, WaitAll,
};
pub use runtime::{Endpoint, Transport};
pub use error::{Cause, Error, ErrorKind, Result};
pub use mpi_type::MpiType;
/// The `bytemuck` crate, whose `Pod` bound [`Region::of`] and
/// [`RegionMut::of`] take and whose casts (`bytemuck::cast_slice`) give a
/// region's bytes an origin inside a typed array.
pub use bytemuck;
pub use pack::{pack, unpack, Region, RegionMut, Repr};
