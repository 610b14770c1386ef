//! Packing and unpacking (MPI_Pack, MPI_Unpack, MPI_Pack_size and their
//! external32 forms).
//!
//! Memory goes in one of three ways:
//! * typed slices of an [`MpiType`] with that type's own datatype
//!   ([`pack()`], [`unpack()`]): only the typemap bytes are read or written, so
//!   padded structs are fine, and unpacking validates values (`bool`,
//!   `char`, ...) before writing anything;
//! * byte regions ([`Region`], [`RegionMut`]) with any datatype: a byte
//!   slice plus the position of the datatype's origin inside it, so types with
//!   negative displacements work. Slices of plain-old-data (`&[f64]`, ...)
//!   convert with [`Region::of`];
//! * absolute addresses (`MPI_BOTTOM`): [`Datatype::pack_from_bottom`] and
//!   [`Datatype::unpack_to_bottom`], `unsafe`.
//!
//! The safe entry points check, before touching anything, that the bytes
//! `count` items of the datatype touch lie inside the region (an
//! [`ErrorKind::OutOfBounds`] otherwise) and that the output has room (an
//! [`ErrorKind::Truncate`] that leaves the output, including data packed there
//! earlier, untouched).
//!
//! # Position semantics
//!
//! As in MPI, `position` is an in/out cursor into the packed buffer: several
//! packs append to one buffer, several unpacks consume it in order.
//!
//! ```
//! use mpx::{pack, unpack, Datatype, Region};
//! let mut buf = vec![0u8; 64];
//! let mut pos = 0;
//! pack(&[1u32, 2], &mut buf, &mut pos)?;
//! pack(&[3.5f64], &mut buf, &mut pos)?;
//! assert_eq!(pos, 16);
//!
//! let (mut ints, mut x) = ([0u32; 2], [0f64]);
//! let mut pos = 0;
//! unpack(&buf, &mut pos, &mut ints)?;
//! unpack(&buf, &mut pos, &mut x)?;
//! assert_eq!((ints, x), ([1, 2], [3.5]));
//! # Ok::<(), mpx::Error>(())
//! ```
//!
//! # The engine
//!
//! A datatype is compiled once, the first time it packs (or when
//! [`Datatype::commit`] is called), into two programs (`program.rs`):
//! 1. its constructor tree becomes a tree of `Leaf` (a run of bytes),
//!    `Repeat` (a strided loop) and `Seq` (children at displacements) nodes,
//!    normalised as it is built: adjacent runs merge, a repeat whose stride
//!    is its run's length becomes one longer run, nested repeats with
//!    composable strides fuse. A contiguous type is one run, a vector one
//!    loop, a subarray face one loop. This *typed* program, whose runs keep
//!    their basic type, drives external32 conversion and typemap walks;
//! 2. the *native* program erases type boundaries (an `int` next to a
//!    `char` is one run) and turns each small subtree into a *gather*: the
//!    list of its runs, plus a copy plan chosen once for that list, so that
//!    inner loops never test lengths. A plan is a loop specialised for one
//!    run length, a fixed sequence of load/store moves per item (structs),
//!    a branch-free cover of many similar runs (irregular indexed types),
//!    or bulk copies for long runs.
//!
//! Packing walks the native tree (`exec.rs`): loops and sequences above,
//! and at each gather one tight kernel over all the items of the enclosing
//! loop, monomorphised for the plan's widths and counts and for the
//! direction. Every kernel moves exactly the typemap's bytes. The README's
//! "Performance" section compares the result with MPICH, Open MPI and
//! hand-written C loops.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub(crate) mod copy;
pub(crate) mod disjoint;
pub(crate) mod exec;
pub(crate) mod external32;
pub(crate) mod program;
mod sequence;
pub(crate) mod spare;
mod typemap;

pub use sequence::TypeSequence;

/// Whether `datatype`, `T`'s own, covers every byte of a `T` (no
/// padding): a slice of `T` is then, byte for byte, its packed native data.
pub(crate) fn covers_every_byte<T: MpiType>(datatype: &Datatype) -> bool {
    datatype.is_contiguous() && datatype.size() == std::mem::size_of::<T>() as u64
}

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use crate::datatype::Datatype;
use crate::error::{ErrorKind, Result};
use crate::mpi_type::MpiType;

/// Memory a datatype is read from: bytes plus the offset of the datatype's
/// origin (displacement 0) within them.
///
/// ```
/// use mpx::{Datatype, Region};
/// // A type whose only entry is 8 bytes *before* its origin.
/// let t = Datatype::hindexed(&[1], &[-8], &Datatype::double())?;
/// let mem = [0u8; 16];
/// let region = Region::with_origin(&mem, 8)?;
/// assert_eq!(t.pack_to_vec(region, 1)?.len(), 8);
/// assert!(t.pack_to_vec(Region::new(&mem), 1).is_err()); // would read before the buffer
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Region<'a> {
    ptr: *const u8,
    len: usize,
    origin: usize,
    _borrow: PhantomData<&'a [u8]>,
}

// SAFETY: a Region is a shared borrow of bytes (`&[u8]`), which is Send.
unsafe impl Send for Region<'_> {}
// SAFETY: and Sync: it only reads the bytes.
unsafe impl Sync for Region<'_> {}

/// Memory a datatype is written to: bytes plus the offset of the datatype's
/// origin within them. See [`Region`].
///
/// ```
/// use mpx::{Datatype, RegionMut};
/// let every_other = Datatype::vector(3, 1, 2, &Datatype::double())?;
/// let packed: Vec<u8> = [1.0f64, 2.0, 3.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
/// let mut v = [-1.0f64; 5];
/// every_other.unpack_from(&packed, &mut 0, RegionMut::of(&mut v), 1)?;
/// assert_eq!(v, [1.0, -1.0, 2.0, -1.0, 3.0]); // the gaps are not written
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug)]
pub struct RegionMut<'a> {
    ptr: *mut u8,
    len: usize,
    origin: usize,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: a RegionMut is an exclusive borrow of bytes (`&mut [u8]`), which
// is Send.
unsafe impl Send for RegionMut<'_> {}
// SAFETY: and Sync: through a shared `&RegionMut` the bytes are only read
// (as through a `&&mut [u8]`), and `[u8]` is Sync.
unsafe impl Sync for RegionMut<'_> {}

fn check_origin(origin: usize, len: usize) -> Result<()> {
    if origin > len {
        return Err(ErrorKind::InvalidArgument(format!("origin {origin} is past the end of a {len}-byte region")).into());
    }
    Ok(())
}

impl<'a> Region<'a> {
    /// `bytes` with the origin at its first byte.
    ///
    /// ```
    /// use mpx::{Datatype, MpiType, Region};
    /// let bytes = [1u8, 2, 3, 4, 5];
    /// let every_other = Datatype::vector(3, 1, 2, &u8::datatype())?;
    /// assert_eq!(every_other.pack_to_vec(Region::new(&bytes), 1)?, [1, 3, 5]);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn new(bytes: &'a [u8]) -> Region<'a> {
        Region { ptr: bytes.as_ptr(), len: bytes.len(), origin: 0, _borrow: PhantomData }
    }

    /// `bytes` with the origin at `bytes[origin]` (`origin <= bytes.len()`).
    ///
    /// ```
    /// use mpx::{Datatype, Region};
    /// // One int, one element before the origin.
    /// let t = Datatype::indexed(&[1], &[-1], &Datatype::int())?;
    /// let mem: Vec<u8> = [7i32, 8].iter().flat_map(|x| x.to_ne_bytes()).collect();
    /// assert_eq!(t.pack_to_vec(Region::with_origin(&mem, 4)?, 1)?, 7i32.to_ne_bytes());
    /// assert!(Region::with_origin(&mem, 9).is_err()); // past the end
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn with_origin(bytes: &'a [u8], origin: usize) -> Result<Region<'a>> {
        check_origin(origin, bytes.len())?;
        Ok(Region { origin, ..Region::new(bytes) })
    }

    /// The bytes of a plain-old-data slice, origin at its start.
    ///
    /// ```
    /// use mpx::{Datatype, Region};
    /// let v = [1.0f64, 2.0, 3.0];
    /// let ends = Datatype::vector(2, 1, 2, &Datatype::double())?; // elements 0 and 2
    /// let packed = ends.pack_to_vec(Region::of(&v), 1)?;
    /// assert_eq!(packed, [1.0f64, 3.0].iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>());
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn of<T: bytemuck::Pod>(values: &'a [T]) -> Region<'a> {
        Region::new(bytemuck::cast_slice(values))
    }

    /// A slice of an [`MpiType`], as bytes.
    ///
    /// # Safety
    /// The region may only be read through `T`'s own datatype, or through a
    /// datatype checked to touch only bytes of `T`'s typemap: other bytes
    /// (padding) may be uninitialised.
    pub(crate) unsafe fn typed<T: MpiType>(values: &'a [T]) -> Region<'a> {
        Region { ptr: values.as_ptr().cast(), len: std::mem::size_of_val(values), origin: 0, _borrow: PhantomData }
    }

    /// The same bytes, the origin moved by `offset` bytes (it must stay
    /// inside them): where block `i` of a buffer of items starts.
    pub(crate) fn shifted(&self, offset: i128) -> Result<Region<'a>> {
        Ok(Region { origin: shift_origin(self.origin, offset, self.len)?, ..*self })
    }

    /// Bytes before the origin.
    pub(crate) fn origin(&self) -> usize {
        self.origin
    }

    /// Bytes in the region.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<'a> RegionMut<'a> {
    /// `bytes` with the origin at its first byte.
    ///
    /// ```
    /// use mpx::{Datatype, MpiType, RegionMut};
    /// let mut bytes = [0u8; 5];
    /// let every_other = Datatype::vector(3, 1, 2, &u8::datatype())?;
    /// every_other.unpack_from(&[7, 8, 9], &mut 0, RegionMut::new(&mut bytes), 1)?;
    /// assert_eq!(bytes, [7, 0, 8, 0, 9]); // the gaps are not written
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn new(bytes: &'a mut [u8]) -> RegionMut<'a> {
        RegionMut { ptr: bytes.as_mut_ptr(), len: bytes.len(), origin: 0, _borrow: PhantomData }
    }

    /// `bytes` with the origin at `bytes[origin]` (`origin <= bytes.len()`).
    ///
    /// ```
    /// use mpx::{Datatype, RegionMut};
    /// // One int, one element before the origin.
    /// let t = Datatype::indexed(&[1], &[-1], &Datatype::int())?;
    /// let mut mem = [0u8; 8];
    /// t.unpack_from(&5i32.to_ne_bytes(), &mut 0, RegionMut::with_origin(&mut mem, 4)?, 1)?;
    /// assert_eq!(mem[..4], 5i32.to_ne_bytes());
    /// assert!(t.unpack_from(&5i32.to_ne_bytes(), &mut 0, RegionMut::new(&mut mem), 1).is_err());
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn with_origin(bytes: &'a mut [u8], origin: usize) -> Result<RegionMut<'a>> {
        check_origin(origin, bytes.len())?;
        Ok(RegionMut { origin, ..RegionMut::new(bytes) })
    }

    /// The bytes of a plain-old-data slice (every bit pattern valid), origin
    /// at its start.
    ///
    /// ```
    /// use mpx::{MpiType, RegionMut};
    /// let packed: Vec<u8> = [7u32, 8, 9].iter().flat_map(|x| x.to_ne_bytes()).collect();
    /// let (mut v, mut position) = ([0u32; 3], 0);
    /// u32::datatype().unpack_from(&packed, &mut position, RegionMut::of(&mut v), 3)?;
    /// assert_eq!((v, position), ([7, 8, 9], 12));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn of<T: bytemuck::Pod>(values: &'a mut [T]) -> RegionMut<'a> {
        RegionMut::new(bytemuck::cast_slice_mut(values))
    }

    /// Checks that `count` items of `datatype` fit in the region, and
    /// write none of its bytes twice ([`disjoint::check_writes_once`]).
    pub(crate) fn check(&self, datatype: &Datatype, count: u64) -> Result<()> {
        check_span(datatype, count, self.origin, self.len)?;
        disjoint::check_writes_once(datatype, count, self.origin, self.len)
    }

    /// Bytes before the origin.
    pub(crate) fn origin(&self) -> usize {
        self.origin
    }

    /// Bytes in the region.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// [`check`](RegionMut::check) with the region's origin moved by
    /// `offset` bytes.
    pub(crate) fn check_at(&self, offset: i128, datatype: &Datatype, count: u64) -> Result<()> {
        let origin = shift_origin(self.origin, offset, self.len)?;
        check_span(datatype, count, origin, self.len)?;
        disjoint::check_writes_once(datatype, count, origin, self.len)
    }

    /// The same bytes and origin, reborrowed.
    pub(crate) fn reborrow(&mut self) -> RegionMut<'_> {
        RegionMut { ptr: self.ptr, len: self.len, origin: self.origin, _borrow: PhantomData }
    }

    /// The same bytes, reborrowed, the origin moved by `offset` bytes (it
    /// must stay inside them).
    pub(crate) fn shifted(&mut self, offset: i128) -> Result<RegionMut<'_>> {
        let origin = shift_origin(self.origin, offset, self.len)?;
        Ok(RegionMut { ptr: self.ptr, len: self.len, origin, _borrow: PhantomData })
    }

    /// The same bytes, to read.
    ///
    /// # Safety
    /// Whatever reads the region (a datatype's typemap) must read only
    /// initialised bytes: a `RegionMut` may cover uninitialised memory that
    /// a receive is about to fill.
    pub(crate) unsafe fn as_region(&self) -> Region<'_> {
        Region { ptr: self.ptr, len: self.len, origin: self.origin, _borrow: PhantomData }
    }

    /// A slice of possibly invalid values of an [`MpiType`], as bytes.
    ///
    /// # Safety
    /// The region may only be written through `T`'s own datatype, or
    /// through a datatype checked to touch only bytes of `T`'s typemap
    /// where every bit pattern is valid; values written so are validated
    /// before anything reads them as `T`.
    pub(crate) unsafe fn typed<T: MpiType>(values: &'a mut [MaybeUninit<T>]) -> RegionMut<'a> {
        RegionMut {
            ptr: values.as_mut_ptr().cast(),
            len: std::mem::size_of_val(values),
            origin: 0,
            _borrow: PhantomData,
        }
    }
}

/// `origin` moved by `offset` bytes, which must leave it inside `len`
/// bytes.
fn shift_origin(origin: usize, offset: i128, len: usize) -> Result<usize> {
    let moved = origin as i128 + offset;
    if moved < 0 || moved > len as i128 {
        return Err(ErrorKind::InvalidArgument(format!("an origin {moved} bytes into a {len}-byte region: past its ends")).into());
    }
    Ok(moved as usize)
}

impl Datatype {
    /// For a [contiguous](Datatype::is_contiguous) type whose `count` items
    /// lie within a region of `len` bytes from `origin`: the bytes they
    /// take. `None` for any other type, or items beyond the region (the
    /// general path then reports the error).
    fn contiguous_span(&self, count: u64, origin: usize, len: usize) -> Option<usize> {
        if !self.is_contiguous() {
            return None;
        }
        let bytes = usize::try_from(self.size().checked_mul(count)?).ok()?;
        (bytes <= len.checked_sub(origin)?).then_some(bytes)
    }
}

/// Checks that `count` items of `dt` at `origin` stay inside `len` bytes.
pub(crate) fn check_span(dt: &Datatype, count: u64, origin: usize, len: usize) -> Result<()> {
    let Some((lo, hi)) = dt.layout().data else { return Ok(()) };
    if count == 0 {
        return Ok(());
    }
    let last = (count as i128 - 1) * dt.extent() as i128;
    let low = origin as i128 + lo as i128 + last.min(0);
    let high = origin as i128 + hi as i128 + last.max(0);
    if low < 0 || high > len as i128 {
        return Err(ErrorKind::OutOfBounds { low, high, len }.into());
    }
    Ok(())
}

fn total(per_item: u64, count: u64) -> Result<usize> {
    per_item
        .checked_mul(count)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| ErrorKind::Overflow("packed size").into())
}

/// Reserves room for `bytes` more packed bytes in `out`, or fails with
/// [`ErrorKind::Overflow`] if memory cannot hold them.
pub(crate) fn reserve_packed(out: &mut Vec<u8>, bytes: usize) -> Result<()> {
    out.try_reserve_exact(bytes).map_err(|_| ErrorKind::Overflow("packed buffer allocation").into())
}

/// Fails with [`ErrorKind::Overflow`] unless memory can hold `bytes` of packed
/// data: a bound, before work that grows with the data (walking a type's
/// elements), that sending or receiving that data would meet anyway.
pub(crate) fn fits_in_memory(bytes: usize) -> Result<()> {
    reserve_packed(&mut Vec::new(), bytes)
}

/// Checks `position` and that `needed` bytes fit after it; returns the room.
fn room(buf_len: usize, position: usize, needed: usize, reading: bool) -> Result<()> {
    if position > buf_len {
        return Err(ErrorKind::InvalidArgument(format!("position {position} is past the end of a {buf_len}-byte buffer")).into());
    }
    let available = buf_len - position;
    if needed > available {
        let (n, a) = (needed as u64, available as u64);
        return Err(if reading {
            ErrorKind::ShortInput { requested: n, available: a }.into()
        } else {
            ErrorKind::Truncate { needed: n, available: a, message: None }.into()
        });
    }
    Ok(())
}

/// A data representation: what packed bytes are laid out as.
///
/// Every message says its representation (see [`crate::proto::wire`]), and
/// the receiver converts.
///
/// ```
/// use mpx::Repr;
/// assert_eq!(Repr::default(), Repr::Native);
/// assert_eq!(Repr::External32 as u8, 1); // its byte on the wire
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Repr {
    /// The sender's native representation, which the receiver shares.
    #[default]
    Native = 0,
    /// MPI's external32 (big-endian, fixed sizes).
    External32 = 1,
}

impl Datatype {
    /// `MPI_Pack_size`: an upper bound (here exact) on the bytes `count`
    /// items occupy when packed.
    ///
    /// ```
    /// let t = mpx::Datatype::named("short_int").unwrap();
    /// assert_eq!(t.pack_size(3)?, 18);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn pack_size(&self, count: u64) -> Result<usize> {
        total(self.size(), count)
    }

    /// `MPI_Pack_external_size` for `"external32"`.
    ///
    /// ```
    /// // A `long` is 8 bytes here and 4 in external32.
    /// let t = mpx::Datatype::named("long").unwrap();
    /// assert_eq!((t.pack_size(3)?, t.pack_external_size(3)?), (24, 12));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn pack_external_size(&self, count: u64) -> Result<usize> {
        total(self.external32_size(), count)
    }

    fn pack_impl(&self, repr: Repr, src: Region<'_>, count: u64, out: &mut [u8], position: &mut usize) -> Result<()> {
        let needed = total(if repr == Repr::Native { self.size() } else { self.external32_size() }, count)?;
        room(out.len(), *position, needed, false)?;
        check_span(self, count, src.origin, src.len)?;
        // SAFETY: check_span proved every byte read lies in `src`, and `room`
        // that `needed` bytes fit at `position`.
        unsafe {
            let mem = src.ptr.wrapping_add(src.origin) as *mut u8;
            self.pack_raw(repr, mem, count, out.as_mut_ptr().add(*position))?;
        }
        *position += needed;
        Ok(())
    }

    fn unpack_impl(&self, repr: Repr, inbuf: &[u8], position: &mut usize, dst: RegionMut<'_>, count: u64) -> Result<()> {
        let needed = total(if repr == Repr::Native { self.size() } else { self.external32_size() }, count)?;
        room(inbuf.len(), *position, needed, true)?;
        check_span(self, count, dst.origin, dst.len)?;
        disjoint::check_writes_once(self, count, dst.origin, dst.len)?;
        // SAFETY: as in pack_impl, with the roles of the buffers swapped.
        unsafe {
            let mem = dst.ptr.wrapping_add(dst.origin);
            self.unpack_raw(repr, inbuf.as_ptr().add(*position), mem, count)?;
        }
        *position += needed;
        Ok(())
    }

    /// Packs `count` items, item `i` at `mem + i * extent`, into `stream`.
    /// External32 can fail (a value out of range); native packing cannot.
    unsafe fn pack_raw(&self, repr: Repr, mem: *mut u8, count: u64, stream: *mut u8) -> Result<()> {
        // SAFETY: the caller guarantees the bytes of `count` items at `mem` (item
        // `i` at `i * extent`) and their packed size (native or external32, as
        // `repr` says) at `stream`; the programs touch exactly those.
        unsafe {
            if self.size() == 0 {
                // Nothing to move, however many items (the loops below would
                // still visit each one).
                return Ok(());
            }
            match repr {
                Repr::Native => {
                    exec::repeat::<exec::Pack>(&self.programs().native, count, self.extent(), mem, stream);
                    Ok(())
                }
                Repr::External32 => self.external32_items::<external32::Encode>(mem, count, stream),
            }
        }
    }

    /// Unpacks `count` items from `stream` into memory, item `i` at `mem +
    /// i * extent`. External32 can fail (a `long double` this machine
    /// cannot hold exactly), and then writes nothing: types whose elements
    /// can fail are checked whole before the first write.
    unsafe fn unpack_raw(&self, repr: Repr, stream: *const u8, mem: *mut u8, count: u64) -> Result<()> {
        // SAFETY: as in `pack_raw`, reading the stream and writing memory.
        unsafe {
            if self.size() == 0 {
                return Ok(()); // as in pack_raw
            }
            let stream = stream as *mut u8; // only read in this direction
            match repr {
                Repr::Native => {
                    exec::repeat::<exec::Unpack>(&self.programs().native, count, self.extent(), mem, stream);
                    Ok(())
                }
                Repr::External32 => {
                    if self.programs().external32_checked {
                        self.external32_items::<external32::CheckDecode>(mem, count, stream)?;
                    }
                    self.external32_items::<external32::Decode>(mem, count, stream)
                }
            }
        }
    }

    /// Runs an external32 conversion over `count` items, item `i` at `mem +
    /// i * extent`, and their external32 bytes at `stream`.
    ///
    /// # Safety
    /// As for [`external32::run`], for every item.
    unsafe fn external32_items<C: external32::Convert>(&self, mem: *mut u8, count: u64, stream: *mut u8) -> Result<()> {
        let (typed, ext) = (&self.programs().typed, self.extent() as isize);
        let (mut m, mut s) = (mem, stream);
        for _ in 0..count {
            // SAFETY: the caller guarantees item `i`'s bytes at `mem + i *
            // extent` and its external32 bytes where the stream has reached.
            s = unsafe { external32::run::<C>(typed, m, s)? };
            m = m.wrapping_offset(ext);
        }
        Ok(())
    }

    /// `MPI_Pack`: appends `count` items read from `src` to `out` at
    /// `*position`, and advances `*position`.
    ///
    /// ```
    /// use mpx::{Datatype, Region};
    /// let column = Datatype::vector(3, 1, 3, &Datatype::double())?;
    /// let matrix: Vec<f64> = (0..9).map(f64::from).collect();
    /// let mut out = vec![0u8; column.pack_size(1)?];
    /// let mut pos = 0;
    /// column.pack_into(Region::of(&matrix), 1, &mut out, &mut pos)?;
    /// let col: Vec<f64> = out.chunks(8).map(|c| f64::from_ne_bytes(c.try_into().unwrap())).collect();
    /// assert_eq!(col, [0.0, 3.0, 6.0]);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn pack_into(&self, src: Region<'_>, count: u64, out: &mut [u8], position: &mut usize) -> Result<()> {
        self.pack_impl(Repr::Native, src, count, out, position)
    }

    /// Packs `count` items from `src` into a new buffer.
    ///
    /// ```
    /// use mpx::{unpack, Datatype, Region};
    /// let matrix: Vec<i32> = (0..6).collect(); // 2 rows of 3
    /// let column = Datatype::vector(2, 1, 3, &Datatype::int())?;
    /// let packed = column.pack_to_vec(Region::of(&matrix[1..]), 1)?; // column 1
    /// let mut values = [0i32; 2];
    /// unpack(&packed, &mut 0, &mut values)?;
    /// assert_eq!(values, [1, 4]);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn pack_to_vec(&self, src: Region<'_>, count: u64) -> Result<Vec<u8>> {
        if let Some(bytes) = self.contiguous_span(count, src.origin, src.len) {
            // One run of bytes (a slice of a primitive, say): copied as it
            // is, without the packing program.
            let mut out = spare::take(bytes).unwrap_or_default();
            reserve_packed(&mut out, bytes)?;
            // SAFETY: `contiguous_span` proved `origin..origin + bytes`
            // lies within the region's `len` bytes.
            copy::extend_from(&mut out, unsafe { std::slice::from_raw_parts(src.ptr.add(src.origin), bytes) });
            return Ok(out);
        }
        // Check the source first: a count the region cannot hold must not
        // allocate anything.
        check_span(self, count, src.origin, src.len)?;
        let size = self.pack_size(count)?;
        let mut out = spare::take(size).unwrap_or_default();
        reserve_packed(&mut out, size)?;
        // Packed straight into the new buffer's spare capacity: zero-filling
        // it first would write every byte twice.
        // SAFETY: check_span proved every byte read lies in `src`; the
        // buffer has room for `size` bytes; native packing cannot fail, and
        // writes every one of the `size` bytes (a native packed stream is
        // the items' typemap bytes back to back, with no gaps), so they are
        // initialised when the length is set.
        unsafe {
            let mem = src.ptr.wrapping_add(src.origin) as *mut u8;
            self.pack_raw(Repr::Native, mem, count, out.as_mut_ptr())?;
            out.set_len(size);
        }
        Ok(out)
    }

    /// Appends `count` items from `src` in external32 to `out`, checking
    /// the source before allocating anything.
    pub(crate) fn pack_external_append(&self, src: Region<'_>, count: u64, out: &mut Vec<u8>) -> Result<()> {
        check_span(self, count, src.origin, src.len)?;
        let size = self.pack_external_size(count)?;
        reserve_packed(out, size)?;
        let start = out.len();
        out.resize(start + size, 0);
        self.pack_external(src, count, &mut out[start..], &mut 0)
    }

    /// `MPI_Unpack`: reads `count` items from `inbuf` at `*position` into
    /// `dst`, and advances `*position`. Only the typemap's bytes of `dst` are
    /// written.
    ///
    /// ```
    /// use mpx::{pack, Datatype, RegionMut};
    /// let mut buf = [0u8; 12];
    /// let mut pos = 0;
    /// pack(&[7i32], &mut buf, &mut pos)?;
    /// pack(&[0.5f64], &mut buf, &mut pos)?;
    /// let (mut n, mut x, mut pos) = ([0i32], [0f64], 0);
    /// Datatype::int().unpack_from(&buf, &mut pos, RegionMut::of(&mut n), 1)?;
    /// Datatype::double().unpack_from(&buf, &mut pos, RegionMut::of(&mut x), 1)?;
    /// assert_eq!((n, x, pos), ([7], [0.5], 12));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn unpack_from(&self, inbuf: &[u8], position: &mut usize, dst: RegionMut<'_>, count: u64) -> Result<()> {
        self.unpack_impl(Repr::Native, inbuf, position, dst, count)
    }

    /// `MPI_Pack_external("external32", ...)`: like
    /// [`pack_into`](Datatype::pack_into) in the big-endian external32
    /// representation. A value that external32 cannot hold (a `long` beyond
    /// 32 bits) is an [`ErrorKind::Conversion`], found as the values are
    /// converted: `position` does not move, but the output from `position`
    /// on may hold the values converted before it.
    ///
    /// ```
    /// use mpx::{Datatype, Region};
    /// let t = Datatype::named("int").unwrap();
    /// let mut out = [0u8; 4];
    /// t.pack_external(Region::of(&[0x01020304i32]), 1, &mut out, &mut 0)?;
    /// assert_eq!(out, [1, 2, 3, 4]);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn pack_external(&self, src: Region<'_>, count: u64, out: &mut [u8], position: &mut usize) -> Result<()> {
        self.pack_impl(Repr::External32, src, count, out, position)
    }

    /// `MPI_Unpack_external("external32", ...)`.
    ///
    /// ```
    /// use mpx::{Datatype, RegionMut};
    /// let int = Datatype::named("int").unwrap();
    /// let external = [0x00, 0x00, 0x01, 0x02, 0xff, 0xff, 0xff, 0xfe]; // big-endian
    /// let (mut values, mut pos) = ([0i32; 2], 0);
    /// int.unpack_external(&external, &mut pos, RegionMut::of(&mut values), 2)?;
    /// assert_eq!((values, pos), ([0x0102, -2], 8));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn unpack_external(&self, inbuf: &[u8], position: &mut usize, dst: RegionMut<'_>, count: u64) -> Result<()> {
        self.unpack_impl(Repr::External32, inbuf, position, dst, count)
    }

    /// Unpacks a received message of `data.len()` bytes into `dst`, which
    /// holds `count` items: whole items first, then the part of the last
    /// item that arrived (a message may be shorter than the receive buffer,
    /// and may end inside an item). A message longer than `count` items is
    /// an [`ErrorKind::Truncate`] that writes nothing.
    pub(crate) fn unpack_message(&self, data: &[u8], repr: Repr, dst: RegionMut<'_>, count: u64) -> Result<()> {
        if repr == Repr::Native {
            if let Some(bytes) = self.contiguous_span(count, dst.origin, dst.len) {
                // Native data of one run of bytes, a partial last item
                // included: the packed stream is the memory's image.
                if data.len() > bytes {
                    return Err(ErrorKind::Truncate { needed: data.len() as u64, available: bytes as u64, message: None }.into());
                }
                // SAFETY: `contiguous_span` proved `origin..origin + bytes`
                // lies within the region, which is borrowed mutably (no
                // other reference overlaps it, `data` included).
                unsafe { copy::copy_raw(data.as_ptr(), dst.ptr.add(dst.origin), data.len()) };
                return Ok(());
            }
        }
        check_span(self, count, dst.origin, dst.len)?;
        disjoint::check_writes_once(self, count, dst.origin, dst.len)?;
        let per_item = if repr == Repr::External32 { self.external32_size() } else { self.size() };
        let capacity = per_item as u128 * count as u128;
        if data.len() as u128 > capacity {
            return Err(ErrorKind::Truncate { needed: data.len() as u64, available: capacity.min(u64::MAX as u128) as u64, message: None }.into());
        }
        let mem = dst.ptr.wrapping_add(dst.origin);
        if repr == Repr::External32 {
            let size = self.external32_size().max(1);
            if !(data.len() as u64).is_multiple_of(size) || data.len() as u64 / size > count {
                return Err(ErrorKind::Protocol("external32 message does not hold whole items".into()).into());
            }
            // SAFETY: check_span covers all `count` items, and the stream's
            // `data.len()` bytes are whole items, at most `count` of them.
            return unsafe { self.unpack_raw(Repr::External32, data.as_ptr(), mem, data.len() as u64 / size) };
        }
        let size = self.size();
        let whole = (data.len() as u64).checked_div(size).unwrap_or(0);
        // SAFETY: as above: `data` holds at most `count` items, so `whole`
        // items fit, and a partial one (`rest > 0`) is item `whole <
        // count`; the bounded walk copies only its `rest` bytes.
        unsafe {
            self.unpack_raw(Repr::Native, data.as_ptr(), mem, whole)?;
            let mut rest = data.len() - (whole * size) as usize;
            if rest > 0 {
                // (Modulo 2^64, like the pointer arithmetic: see `program`.)
                let item = mem.wrapping_offset((whole as isize).wrapping_mul(self.extent() as isize));
                let stream = data.as_ptr().add((whole * size) as usize) as *mut u8;
                exec::run_bounded::<exec::Unpack>(&self.programs().native, item, stream, &mut rest);
            }
        }
        Ok(())
    }

    /// Packs `count` items whose displacements are absolute addresses
    /// (built with [`crate::address_of`]), as MPI does with `MPI_BOTTOM`.
    ///
    /// # Safety
    /// Every byte of every basic entry of the `count` items, taken as an
    /// absolute address, must be readable for the duration of the call and
    /// must not be written concurrently, nor lie in `out`; the entries must
    /// be initialised; and each address must have been exposed
    /// ([`crate::address_of`]) from a reference or pointer to memory that
    /// covers the bytes read there.
    ///
    /// ```
    /// use mpx::{address_of, Datatype};
    /// let (a, b) = (7i32, 2.5f64);
    /// let t = Datatype::structure(&[1, 1], &[address_of(&a), address_of(&b)],
    ///                             &[Datatype::int(), Datatype::double()])?;
    /// let mut out = vec![0u8; t.pack_size(1)?];
    /// unsafe { t.pack_from_bottom(1, &mut out, &mut 0)? };
    /// assert_eq!(&out[..4], &7i32.to_ne_bytes());
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub unsafe fn pack_from_bottom(&self, count: u64, out: &mut [u8], position: &mut usize) -> Result<()> {
        // SAFETY: `room` proved that `needed` bytes fit at `*position` in `out`,
        // and the elements copied are exactly the `count` items' basic entries,
        // `needed` bytes in all, whose addresses the caller guarantees readable.
        unsafe {
            let needed = self.pack_size(count)?;
            room(out.len(), *position, needed, false)?;
            let mut stream = out.as_mut_ptr().add(*position);
            self.for_each_absolute(count, |addr, len| {
                std::ptr::copy_nonoverlapping(std::ptr::with_exposed_provenance::<u8>(addr), stream, len);
                stream = stream.add(len);
            });
            *position += needed;
            Ok(())
        }
    }

    /// Calls `f(address, len)` for every basic element of `count` items at
    /// absolute addresses, in typemap order. Each address gets its own
    /// pointer (with the provenance [`crate::address_of`] exposed), since
    /// the elements may lie in different allocations; this path therefore
    /// goes element by element.
    fn for_each_absolute(&self, count: u64, mut f: impl FnMut(usize, usize)) {
        if self.size() == 0 {
            return; // no elements, however many items
        }
        let extent = self.extent() as i128;
        for i in 0..count as i128 {
            self.for_each_entry(|b, disp| {
                f((disp as i128 + i * extent) as usize, b.size());
                std::ops::ControlFlow::<()>::Continue(())
            });
        }
    }

    /// Unpacks `count` items to absolute addresses (`MPI_BOTTOM`).
    ///
    /// # Safety
    /// Every byte of every basic entry of the `count` items, taken as an
    /// absolute address, must be writable for the duration of the call,
    /// not accessed concurrently, nor lie in `inbuf` (which is borrowed
    /// as shared), and any bit pattern must be valid there;
    /// and each address must have been exposed for writing
    /// ([`crate::address_of_mut`], or `expose_provenance` of a `*mut`) from
    /// a pointer to memory that covers the bytes written there, not used
    /// through any other reference since. An address from
    /// [`crate::address_of`] (a shared reference) may only be read through.
    pub unsafe fn unpack_to_bottom(&self, inbuf: &[u8], position: &mut usize, count: u64) -> Result<()> {
        // SAFETY: `room` proved that `needed` bytes can be read at `*position`,
        // and the elements written are exactly the `count` items' basic entries,
        // `needed` bytes in all, whose addresses the caller guarantees writable.
        unsafe {
            let needed = self.pack_size(count)?;
            room(inbuf.len(), *position, needed, true)?;
            let mut stream = inbuf.as_ptr().add(*position);
            self.for_each_absolute(count, |addr, len| {
                std::ptr::copy_nonoverlapping(stream, std::ptr::with_exposed_provenance_mut::<u8>(addr), len);
                stream = stream.add(len);
            });
            *position += needed;
            Ok(())
        }
    }
}

/// `MPI_Pack` of a typed slice with its own datatype: appends all of `src`
/// to `out` at `*position`. Only the typemap's bytes are read (padding is
/// never touched).
///
/// ```
/// let mut out = [0u8; 8];
/// mpx::pack(&[1u16, 2, 3, 4], &mut out, &mut 0)?;
/// # Ok::<(), mpx::Error>(())
/// ```
pub fn pack<T: MpiType>(src: &[T], out: &mut [u8], position: &mut usize) -> Result<()> {
    // SAFETY: read through `T`'s own datatype.
    T::datatype().pack_into(unsafe { Region::typed(src) }, src.len() as u64, out, position)
}

/// `MPI_Unpack` into a typed slice with its own datatype: fills all of `dst`
/// from `inbuf` at `*position`. Values are validated first: if any is
/// invalid for `T` (a `bool` byte other than 0 or 1, ...) the result is
/// [`ErrorKind::InvalidValue`] and `dst` is unchanged.
///
/// ```
/// let bytes = [1u8, 0, 7];
/// let mut flags = [false; 3];
/// let err = mpx::unpack(&bytes, &mut 0, &mut flags).unwrap_err();
/// assert!(matches!(err.kind(), mpx::ErrorKind::InvalidValue { item: 2, .. }));
/// assert_eq!(flags, [false; 3]);
/// ```
pub fn unpack<T: MpiType>(inbuf: &[u8], position: &mut usize, dst: &mut [T]) -> Result<()> {
    let count = dst.len() as u64;
    // The position moves only once the values are valid too: an error
    // leaves it, as it leaves `dst`.
    let mut at = *position;
    // SAFETY: the region is written through `T`'s own datatype.
    unsafe { unpack_typed(dst, |region| T::datatype().unpack_from(inbuf, &mut at, region, count)) }?;
    *position = at;
    Ok(())
}

/// Runs `fill` on a view of `dst` that may hold invalid values of `T`, then
/// validates them; `dst` is changed only if every item is valid.
///
/// # Safety
/// `fill` may write the region only through `T`'s own datatype (see
/// [`RegionMut::typed`]).
pub(crate) unsafe fn unpack_typed<T: MpiType>(dst: &mut [T], fill: impl FnOnce(RegionMut<'_>) -> Result<()>) -> Result<()> {
    let n = dst.len();
    if !T::NEEDS_VALIDATION || std::mem::size_of::<T>() == 0 {
        // (A zero-sized `T` has no typemap bytes: nothing is written, so
        // nothing needs validating, and a slice of them may be
        // `usize::MAX` long.)
        // SAFETY: every bit pattern of the typemap bytes is a valid T (or
        // there are none).
        let view = unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<MaybeUninit<T>>(), n) };
        // SAFETY: our caller writes through `T`'s own datatype.
        return fill(unsafe { RegionMut::typed(view) });
    }
    let mut scratch: Vec<MaybeUninit<T>> = dst.iter().map(|v| MaybeUninit::new(*v)).collect();
    // SAFETY: our caller writes through `T`'s own datatype; the scratch
    // values are validated below before `dst` sees them.
    fill(unsafe { RegionMut::typed(&mut scratch) })?;
    for (i, item) in scratch.iter().enumerate() {
        // SAFETY: each item's typemap bytes are initialised (from a valid T
        // or from the unpack).
        if !unsafe { T::is_valid(item.as_ptr().cast()) } {
            return Err(ErrorKind::InvalidValue { type_name: std::any::type_name::<T>(), item: i }.into());
        }
    }
    for (d, s) in dst.iter_mut().zip(&scratch) {
        // SAFETY: validated above.
        *d = unsafe { s.assume_init() };
    }
    Ok(())
}

/// Runs `fill` on uninitialised values of `T`, then validates the first
/// `whole` of them, which `fill` must have written whole. On success those
/// are valid values: `fill` wrote every typemap byte of each, and the
/// typemap covers every byte of `T` that is not padding ([`MpiType`]'s
/// contract).
///
/// # Safety
/// `fill` may write the region only through `T`'s own datatype, and must
/// have written items `0..whole(..)` whole when it succeeds.
pub(crate) unsafe fn unpack_typed_uninit<T: MpiType>(
    dst: &mut [MaybeUninit<T>],
    fill: impl FnOnce(RegionMut<'_>) -> Result<u64>,
) -> Result<usize> {
    // SAFETY: our caller writes through `T`'s own datatype.
    let whole = fill(unsafe { RegionMut::typed(dst) })? as usize;
    if T::NEEDS_VALIDATION {
        for (i, item) in dst[..whole].iter().enumerate() {
            // SAFETY: the item was written whole by `fill` (our caller's
            // promise), so its typemap bytes are initialised.
            if !unsafe { T::is_valid(item.as_ptr().cast()) } {
                return Err(ErrorKind::InvalidValue { type_name: std::any::type_name::<T>(), item: i }.into());
            }
        }
    }
    Ok(whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpack_message_checks_the_message_length_itself() {
        let int = Datatype::int();
        let data: Vec<u8> = (1..=12).collect();
        for repr in [Repr::Native, Repr::External32] {
            // Room for two ints, a message of three: nothing is written.
            let mut mem = [0xa5u8; 8];
            let err = int.unpack_message(&data, repr, RegionMut::new(&mut mem), 2).unwrap_err();
            assert!(matches!(err.kind(), ErrorKind::Truncate { needed: 12, available: 8, message: None }), "{err:?}");
            assert_eq!(mem, [0xa5; 8]);
            // Two and a half ints into room for two: also too long.
            let mut mem = [0xa5u8; 8];
            assert!(int.unpack_message(&data[..10], repr, RegionMut::new(&mut mem), 2).is_err());
            assert_eq!(mem, [0xa5; 8]);
            // Exactly two fit.
            int.unpack_message(&data[..8], repr, RegionMut::new(&mut mem), 2).unwrap();
            assert_ne!(mem, [0xa5; 8]);
        }
        // Native data may end inside the last item.
        let mut mem = [0xa5u8; 8];
        int.unpack_message(&data[..6], Repr::Native, RegionMut::new(&mut mem), 2).unwrap();
        assert_eq!(mem, [1, 2, 3, 4, 5, 6, 0xa5, 0xa5]);
        // An empty type holds no data at all, however many items.
        let empty = Datatype::contiguous(0, &int).unwrap();
        for repr in [Repr::Native, Repr::External32] {
            assert!(matches!(empty.unpack_message(&data[..1], repr, RegionMut::new(&mut mem), u64::MAX),
                Err(ref e) if matches!(e.kind(), ErrorKind::Truncate { needed: 1, available: 0, message: None })));
            empty.unpack_message(&[], repr, RegionMut::new(&mut mem), u64::MAX).unwrap();
        }
    }
}
