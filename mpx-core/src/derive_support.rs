//! Support for `#[derive(MpiType)]` and generic [`MpiType`](crate::MpiType)
//! implementations. Not part of the stable API.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::any::TypeId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use crate::datatype::Datatype;
use crate::error::Result;

static CACHE: OnceLock<RwLock<HashMap<TypeId, Datatype>>> = OnceLock::new();

thread_local! {
    /// Each thread's copy of the entries it has used: every message of a
    /// generic type (an array) asks for its datatype, and this answers
    /// without touching the shared lock. (`TypeId`s are the compiler's own
    /// hashes, so the fast unkeyed hash is safe.)
    static LOCAL: RefCell<rustc_hash::FxHashMap<TypeId, Datatype>> = RefCell::default();
}

/// The datatype of `T`, built by `build` the first time it is asked for and
/// cached per `TypeId` (Rust has no generic statics). Safe to call from any
/// thread at any time; if two threads race on the first call, both build
/// and one result is kept, so every caller sees the same typemap.
///
/// # Safety
/// The first call for a given `T` decides `T`'s datatype for the whole
/// process, and [`MpiType`](crate::MpiType) implementations trust it: the
/// datatype `build` returns must satisfy the `MpiType` contract for `T`
/// (lb 0, extent `size_of::<T>()`, entries only on initialised bytes of `T`
/// with matching types). Only `MpiType` implementations of `T` itself may
/// call this.
///
/// # Panics
/// If `build` fails, which for a derived type would mean its layout does not
/// fit in 64-bit arithmetic; the derive only generates builders that cannot.
pub unsafe fn cached<T: 'static>(build: impl FnOnce() -> Result<Datatype>) -> Datatype {
    let id = TypeId::of::<T>();
    // (`try_with`: during a thread's teardown the local copy may be gone.)
    if let Ok(Some(t)) = LOCAL.try_with(|local| local.borrow().get(&id).cloned()) {
        return t;
    }
    let t = shared::<T>(id, build);
    let _ = LOCAL.try_with(|local| local.borrow_mut().insert(id, t.clone()));
    t
}

/// [`cached`]'s process-wide entry for `T` (`id`), built if missing.
fn shared<T: 'static>(id: TypeId, build: impl FnOnce() -> Result<Datatype>) -> Datatype {
    let cache = CACHE.get_or_init(Default::default);
    if let Some(t) = cache.read().unwrap_or_else(|e| e.into_inner()).get(&id) {
        return t.clone();
    }
    let built = match build() {
        Ok(t) => t.commit(),
        Err(e) => panic!("the datatype of {} cannot be built: {e}", std::any::type_name::<T>()),
    };
    cache.write().unwrap_or_else(|e| e.into_inner()).entry(id).or_insert(built).clone()
}

impl Datatype {
    /// [`cached`], as `#[derive(MpiType)]` calls it: an inherent function
    /// of the real `Datatype`, so that generated code cannot be pointed at
    /// another `cached` (through `#[mpx(crate = "...")]`, whose path names
    /// the `Datatype` the trait's signature pins down) that would hand out
    /// a datatype not built from the type's fields. Not part of the stable
    /// API.
    ///
    /// # Safety
    /// As [`cached`].
    #[doc(hidden)]
    pub unsafe fn __derive_cached<T: 'static>(build: impl FnOnce() -> Result<Datatype>) -> Datatype {
        // SAFETY: this function's contract is `cached`'s.
        unsafe { cached::<T>(build) }
    }

    /// Compiles only for the field types `#[derive(MpiType)]` leaves out
    /// of a datatype ([`NoBytes`]: `PhantomData<T>`, `()` and arrays of
    /// them); the derive calls it for each such field. The derive knows
    /// those fields by their spelling, and a spelling proves nothing (a
    /// `use std::convert::Infallible as PhantomData` spells the same), so
    /// the type itself is checked here. An inherent function of the real
    /// `Datatype`, as [`__derive_cached`](Datatype::__derive_cached) is,
    /// so generated code cannot be pointed at a check of another crate's.
    /// Not part of the stable API.
    #[doc(hidden)]
    pub const fn __derive_no_bytes<T: ?Sized + NoBytes>() {}
}

/// A type with no bytes and exactly one value, which a derived datatype
/// may leave out: writing a value's other fields makes the whole value.
/// Sealed: implemented here only, so no other type can claim it.
pub trait NoBytes: sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

impl<T: ?Sized> sealed::Sealed for std::marker::PhantomData<T> {}
impl<T: ?Sized> NoBytes for std::marker::PhantomData<T> {}
impl sealed::Sealed for () {}
impl NoBytes for () {}
impl<T: NoBytes, const N: usize> sealed::Sealed for [T; N] {}
impl<T: NoBytes, const N: usize> NoBytes for [T; N] {}
