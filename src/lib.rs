//! # mpx: async-native message passing for Rust
//!
//! mpx brings MPI's point-to-point semantics and derived-datatype engine to
//! async Rust. This crate is the facade: it re-exports the datatype engine
//! of [`mpx_core`], the transports of [`mpx_net`] and `#[derive(MpiType)]`.
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

pub use mpx_core::*;
pub use mpx_derive::MpiType;

/// The names most programs need.
pub mod prelude {
    pub use mpx_core::{
        pack, unpack, Basic, Datatype, DistArg, Distribution, Error, MpiType, Order, Region, RegionMut, Result,
    };
}
