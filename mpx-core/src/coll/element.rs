//! What a collective moves, item by item: values of an [`MpiType`] in
//! typed slices, or items of a [`Datatype`] laid over memory
//! ([`Described`]: a [`SendBuf`] to read, a [`RecvBuf`] to write).
//!
//! The collectives' algorithms cut their buffers into blocks of items
//! (rank `r`'s block of a gather, the pieces of an alltoall) and move each
//! block as one message; [`Element`] is what they need of a buffer to do
//! that, whatever describes it.

use std::ops::Range;

use crate::comm::data::{small_native_values, Packed, SendData};
use crate::comm::{native_values_in, unpack_typed_message, RecvBuf, SendBuf};
use crate::datatype::Datatype;
use crate::error::{ErrorKind, Result};
use crate::mpi_type::MpiType;
use crate::pack::Repr;
use crate::proto::engine::Delivered;
use crate::request::Status;
use sealed::{AnyBytes, PlainItems};

/// The items of a collective's or a persistent request's buffers: every
/// [`MpiType`] (typed slices, single values and `Vec`s), and [`Described`]
/// (buffers described by a datatype). Sealed: mpx implements it, and only
/// for these.
pub trait Element: sealed::Blocks + crate::comm::persistent::sealed::Stored + 'static {}

impl<T: MpiType> Element for T {}

impl Element for Described {}

/// The element of collectives over described buffers: a [`SendBuf`] to
/// read and a [`RecvBuf`] to write, each `count` items of a [`Datatype`]
/// (derived ones included: a column of a matrix, a face of a 3-D array,
/// a struct's fields). A collective's blocks are runs of items: block `r`
/// of a gather's receive is its items `r·c .. (r+1)·c`, starting
/// `r·c·extent` bytes after the buffer's origin, as in MPI (resize a
/// datatype to choose where successive items start).
///
/// Senders and receivers may use different datatypes as long as the type
/// signatures agree, as in MPI: a rank may gather columns sent as vectors
/// into rows received as contiguous doubles. Each buffer's count says its
/// own side's blocks: a gather's receive of `n·c` items has blocks of `c`
/// items of its datatype, whatever the senders' datatypes; the `v` forms'
/// counts and displacements are in items of the buffer they describe.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(3, |comm| async move {
/// use mpx::{Datatype, Region, RegionMut, RecvBuf, SendBuf};
/// // Each rank owns column `rank` of a 4x3 matrix of doubles (row-major).
/// let me = comm.rank();
/// let matrix: Vec<f64> = (0..12).map(|i| if i % 3 == me { i as f64 } else { -1.0 }).collect();
/// let column = Datatype::vector(4, 1, 3, &Datatype::double())?;
/// let mine = SendBuf::new(Region::with_origin(bytemuck::cast_slice(&matrix), me * 8)?, 1, &column);
/// // Rank 0 gathers the columns as rows of its transposed copy.
/// let mut transposed = [0.0f64; 12];
/// let rows = RecvBuf::new(RegionMut::of(&mut transposed), 3 * 4, &Datatype::double());
/// comm.gather(mine, rows, 0).await?;
/// if me == 0 {
///     assert_eq!(transposed[4..8], [1.0, 4.0, 7.0, 10.0]);
/// }
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Described {}

pub(crate) mod sealed {
    use super::*;

    /// Items of a collective's buffer that are plain values of at most a
    /// few bytes ([`Blocks::plain_src`], [`Blocks::plain_dst`]): the bytes
    /// they lie in, which packed they would be, and the type signature of
    /// that packed data.
    pub struct PlainItems<'b, E> {
        pub(crate) bytes: &'b [u8],
        pub(crate) signature: Option<(u64, u64)>,
        /// Whether any bytes make valid values of the items' type (no
        /// `bool` or `char` in it): proof of it, for
        /// [`Blocks::copy_agreed`].
        pub(crate) any_bytes: Option<AnyBytes<E>>,
    }

    /// Proof that values of a collective's element `E` are plain (no
    /// padding, laid out as their packed native data) and that any bytes
    /// make valid values of them: made only by [`Blocks::plain_src`] and
    /// [`Blocks::plain_dst`], where both were checked, and asked for by
    /// [`Blocks::copy_agreed`], which then copies bytes into such values
    /// as they lie.
    pub struct AnyBytes<E>(pub(super) std::marker::PhantomData<fn() -> E>);

    impl<E> Clone for AnyBytes<E> {
        fn clone(&self) -> Self {
            *self
        }
    }

    impl<E> Copy for AnyBytes<E> {}

    /// What the algorithms do with a buffer of items (a detail of mpx).
    pub trait Blocks: Sized {
        /// Whether a collective's send and receive items are of one type
        /// (typed buffers), so that a block's count on one side is its
        /// count on the other; described buffers may use different
        /// datatypes on each side, each buffer's count then giving its
        /// own side's blocks.
        const ONE_TYPE: bool;
        /// Memory a collective reads.
        type Src<'s>: Sync;
        /// Memory a collective writes.
        type Dst<'d>: Send + Unpin;
        /// Items the source holds.
        fn src_len(src: &Self::Src<'_>) -> usize;
        /// Items the destination holds.
        fn dst_len(dst: &Self::Dst<'_>) -> usize;
        /// The datatype of one item of the destination.
        fn item_type(dst: &Self::Dst<'_>) -> Datatype;
        /// The datatype of one item of the source.
        fn src_item_type(src: &Self::Src<'_>) -> Datatype;
        /// Names the items, for error messages.
        fn name(dst: &Self::Dst<'_>) -> String;
        /// Checks that the source's items `items` lie in its memory.
        fn check_src(src: &Self::Src<'_>, items: Range<usize>) -> Result<()>;
        /// Checks that the destination's items `items` lie in its memory.
        fn check_dst(dst: &Self::Dst<'_>, items: Range<usize>) -> Result<()>;
        /// Packs the source's items `items` for a message.
        fn pack(src: &Self::Src<'_>, items: Range<usize>, repr: Repr) -> Result<Packed>;
        /// Packs the destination's items `items` (data it received, passed on).
        fn pack_dst(dst: &Self::Dst<'_>, items: Range<usize>, repr: Repr) -> Result<Packed>;
        /// The source's items `items` as the bytes they lie in and the
        /// type signature of their packed native data, if they are plain
        /// values (no padding) of at most `max` bytes: packed, they would
        /// be those bytes.
        fn plain_src<'b>(src: &'b Self::Src<'_>, items: Range<usize>, max: usize) -> Option<PlainItems<'b, Self>>;
        /// [`plain_src`](Blocks::plain_src) of the destination's items.
        fn plain_dst<'b>(dst: &'b Self::Dst<'_>, items: Range<usize>, max: usize) -> Option<PlainItems<'b, Self>>;
        /// Checks a delivered message against the destination's items
        /// `items` and unpacks it there.
        fn deliver(dst: &mut Self::Dst<'_>, items: Range<usize>, msg: &Delivered) -> Result<Status>;
        /// Copies the source's items `from` into the destination's items
        /// `to` (a rank's block to itself); the type signatures must agree.
        fn copy(src: &Self::Src<'_>, from: Range<usize>, dst: &mut Self::Dst<'_>, to: Range<usize>) -> Result<()>;
        /// Copies `data`, packed native data of type signature
        /// `signature`, into the destination's items `items` as it lies,
        /// if those items are plain values (a type without padding that
        /// any bytes make valid) and `data` is exactly their values;
        /// `false`, touching nothing, where it must be checked and
        /// unpacked as a message ([`deliver`](Blocks::deliver)).
        fn copy_native(dst: &mut Self::Dst<'_>, items: Range<usize>, signature: Option<(u64, u64)>, data: &[u8]) -> bool;
        /// Copies `data` into the destination's items `items` as it lies,
        /// if it is as long as they are: values of a type that any bytes
        /// make valid (the proof), `data` being packed native data of
        /// their type signature (a part that agreed with this rank's, of
        /// the same shape), so that no signature is compared here.
        /// `false`, touching nothing, if the lengths differ.
        fn copy_agreed(dst: &mut Self::Dst<'_>, items: Range<usize>, data: &[u8], proof: AnyBytes<Self>) -> bool;
    }
}

fn len_of(count: u64) -> usize {
    usize::try_from(count).unwrap_or(usize::MAX)
}

/// Block `items` of a typed slice, checked.
fn typed_block(len: usize, items: &Range<usize>) -> Result<()> {
    if items.start > items.end || items.end > len {
        return Err(ErrorKind::InvalidArgument(format!("items {items:?} of a buffer of {len}")).into());
    }
    Ok(())
}

impl<T: MpiType> sealed::Blocks for T {
    const ONE_TYPE: bool = true;
    type Src<'s> = &'s [T];
    type Dst<'d> = &'d mut [T];

    fn src_len(src: &&[T]) -> usize {
        src.len()
    }

    fn dst_len(dst: &&mut [T]) -> usize {
        dst.len()
    }

    fn item_type(_: &&mut [T]) -> Datatype {
        T::datatype()
    }

    fn src_item_type(_: &&[T]) -> Datatype {
        T::datatype()
    }

    fn name(_: &&mut [T]) -> String {
        std::any::type_name::<T>().to_string()
    }

    fn check_src(src: &&[T], items: Range<usize>) -> Result<()> {
        typed_block(src.len(), &items)
    }

    fn check_dst(dst: &&mut [T], items: Range<usize>) -> Result<()> {
        typed_block(dst.len(), &items)
    }

    fn pack(src: &&[T], items: Range<usize>, repr: Repr) -> Result<Packed> {
        (&src[items]).into_packed(repr)
    }

    fn pack_dst(dst: &&mut [T], items: Range<usize>, repr: Repr) -> Result<Packed> {
        (&dst[items]).into_packed(repr)
    }

    fn plain_src<'b>(src: &'b &[T], items: Range<usize>, max: usize) -> Option<PlainItems<'b, T>> {
        plain_values(src.get(items)?, max)
    }

    fn plain_dst<'b>(dst: &'b &mut [T], items: Range<usize>, max: usize) -> Option<PlainItems<'b, T>> {
        plain_values(dst.get(items)?, max)
    }

    fn deliver(dst: &mut &mut [T], items: Range<usize>, msg: &Delivered) -> Result<Status> {
        unpack_typed_message(msg, &mut dst[items])
    }

    fn copy(src: &&[T], from: Range<usize>, dst: &mut &mut [T], to: Range<usize>) -> Result<()> {
        if from.len() != to.len() {
            return Err(ErrorKind::InvalidArgument(format!("{} values copied into room for {}", from.len(), to.len())).into());
        }
        crate::pack::copy::copy_slice(&mut dst[to], &src[from]);
        Ok(())
    }

    fn copy_native(dst: &mut &mut [T], items: Range<usize>, signature: Option<(u64, u64)>, data: &[u8]) -> bool {
        let Some(out) = dst.get_mut(items) else { return false };
        if native_values_in::<T>(signature, data.len(), &T::datatype_ref()) != Some(out.len()) {
            return false;
        }
        // SAFETY: `data` is `out.len()` whole native values of `T`
        // (`native_values_in`), a type without padding that any bytes make
        // valid: copying its bytes writes exactly what unpacking them
        // would. `data` (a part left by a rank) and the destination are
        // distinct memory.
        unsafe { crate::pack::copy::copy_raw(data.as_ptr(), out.as_mut_ptr().cast::<u8>(), data.len()) };
        true
    }

    fn copy_agreed(dst: &mut &mut [T], items: Range<usize>, data: &[u8], _: AnyBytes<T>) -> bool {
        let Some(out) = dst.get_mut(items) else { return false };
        if std::mem::size_of_val(out) != data.len() {
            return false;
        }
        // SAFETY: `T` has no padding and any bytes make valid values of it
        // (the proof, made by `plain_values` only where both hold), and
        // `data` is exactly as many bytes as `out` holds (checked above):
        // writing them makes valid values. `data` (a part left by a rank)
        // and the destination are distinct memory.
        unsafe { crate::pack::copy::copy_raw(data.as_ptr(), out.as_mut_ptr().cast::<u8>(), data.len()) };
        true
    }
}

/// `values` as plain items (see [`PlainItems`]), if they are plain values
/// of at most `max` bytes, with proof that any bytes make valid values of
/// `T` where they do.
fn plain_values<T: MpiType>(values: &[T], max: usize) -> Option<PlainItems<'_, T>> {
    let (bytes, signature) = small_native_values(values, max)?;
    // `small_native_values` checked that `T` has no padding.
    let any_bytes = (!T::NEEDS_VALIDATION).then_some(AnyBytes(std::marker::PhantomData));
    Some(PlainItems { bytes, signature, any_bytes })
}

impl sealed::Blocks for Described {
    const ONE_TYPE: bool = false;
    type Src<'s> = SendBuf<'s>;
    type Dst<'d> = RecvBuf<'d>;

    fn src_len(src: &SendBuf<'_>) -> usize {
        len_of(src.count)
    }

    fn dst_len(dst: &RecvBuf<'_>) -> usize {
        len_of(dst.count)
    }

    fn item_type(dst: &RecvBuf<'_>) -> Datatype {
        dst.datatype.clone()
    }

    fn src_item_type(src: &SendBuf<'_>) -> Datatype {
        src.datatype.clone()
    }

    fn name(dst: &RecvBuf<'_>) -> String {
        format!("items of a {}-byte datatype", dst.datatype.size())
    }

    fn check_src(src: &SendBuf<'_>, items: Range<usize>) -> Result<()> {
        typed_only(&src.datatype)?;
        src.block(items).map(drop)
    }

    fn check_dst(dst: &RecvBuf<'_>, items: Range<usize>) -> Result<()> {
        typed_only(&dst.datatype)?;
        within(&items, dst.count)?;
        let (offset, count) = block_of(&dst.datatype, items);
        dst.region.check_at(offset, &dst.datatype, count)
    }

    fn pack(src: &SendBuf<'_>, items: Range<usize>, repr: Repr) -> Result<Packed> {
        src.block(items)?.pack(repr)
    }

    fn pack_dst(dst: &RecvBuf<'_>, items: Range<usize>, repr: Repr) -> Result<Packed> {
        within(&items, dst.count)?;
        let (offset, count) = block_of(&dst.datatype, items);
        dst.pack_block(offset, count, repr)
    }

    fn plain_src<'b>(_: &'b SendBuf<'_>, _: Range<usize>, _: usize) -> Option<PlainItems<'b, Described>> {
        // Described items are packed through their datatype.
        None
    }

    fn plain_dst<'b>(_: &'b RecvBuf<'_>, _: Range<usize>, _: usize) -> Option<PlainItems<'b, Described>> {
        None
    }

    fn deliver(dst: &mut RecvBuf<'_>, items: Range<usize>, msg: &Delivered) -> Result<Status> {
        within(&items, dst.count)?;
        let (offset, count) = block_of(&dst.datatype, items);
        let datatype = dst.datatype.clone();
        let block = dst.region.shifted(offset)?;
        block.check(&datatype, count)?;
        crate::comm::deliver_into(msg, &datatype, count, block)
    }

    fn copy(src: &SendBuf<'_>, from: Range<usize>, dst: &mut RecvBuf<'_>, to: Range<usize>) -> Result<()> {
        // Through a message to itself: the same checks of signature and
        // room as a message from another rank.
        let packed = Self::pack(src, from, Repr::Native)?;
        let msg = super::native_message(packed.data, packed.signature, 0);
        let status = Self::deliver(dst, to.clone(), &msg)?;
        let expected = dst.datatype.size().saturating_mul(to.len() as u64);
        if status.bytes != expected {
            return Err(ErrorKind::InvalidArgument(format!("{} bytes copied into room for {expected}", status.bytes)).into());
        }
        Ok(())
    }

    fn copy_native(_: &mut RecvBuf<'_>, _: Range<usize>, _: Option<(u64, u64)>, _: &[u8]) -> bool {
        // Described items are unpacked through their datatype.
        false
    }

    fn copy_agreed(_: &mut RecvBuf<'_>, _: Range<usize>, _: &[u8], _: AnyBytes<Described>) -> bool {
        // No proof is made for described items (`plain_dst` gives none).
        false
    }
}

/// Collectives check each message against the type the receiving rank
/// expects, and a message without a type signature is a rank giving up:
/// `packed` data (which has none) cannot take part.
fn typed_only(datatype: &Datatype) -> Result<()> {
    if datatype.is_packed() {
        return Err(ErrorKind::InvalidArgument("collectives move typed data: a packed buffer has no type signature to check".into()).into());
    }
    Ok(())
}

/// Blocks stay within their buffer's `count` items: a buffer split into
/// several (`ExchangeBuf::split`) spans its whole region, whose other
/// items another part may be using.
fn within(items: &Range<usize>, count: u64) -> Result<()> {
    if items.start > items.end || items.end as u64 > count {
        return Err(ErrorKind::InvalidArgument(format!("items {items:?} of a buffer of {count}")).into());
    }
    Ok(())
}

/// Where block `items` of a buffer of `datatype` starts (bytes from the
/// buffer's origin) and how many items it holds.
fn block_of(datatype: &Datatype, items: Range<usize>) -> (i128, u64) {
    (items.start as i128 * datatype.extent() as i128, items.len() as u64)
}

impl SendBuf<'_> {
    /// Items `items` of the buffer, as a buffer of their own.
    pub(crate) fn block(&self, items: Range<usize>) -> Result<SendBuf<'_>> {
        within(&items, self.count)?;
        let (offset, count) = block_of(&self.datatype, items);
        let region = self.region.shifted(offset)?;
        crate::pack::check_span(&self.datatype, count, region.origin(), region.len())?;
        Ok(SendBuf::new(region, count, &self.datatype))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proof that any bytes make valid values comes with plain values of
    /// types without `bool` or `char` in them, and with no others.
    #[test]
    fn only_values_that_take_any_bytes_come_with_the_proof() {
        assert!(plain_values(&[1.5f64, 2.0], 24).is_some_and(|p| p.any_bytes.is_some() && p.bytes.len() == 16));
        assert!(plain_values(&[[7u8; 3]], 24).is_some_and(|p| p.any_bytes.is_some()));
        assert!(plain_values(&[true, false], 24).is_some_and(|p| p.any_bytes.is_none()));
        assert!(plain_values(&['a'], 24).is_some_and(|p| p.any_bytes.is_none()));
        assert!(plain_values(&[[true; 2]], 24).is_some_and(|p| p.any_bytes.is_none()));
        assert!(plain_values(&[1.5f64; 4], 24).is_none(), "more than 24 bytes");
    }

    /// A block of a described buffer stays within its count of items,
    /// whatever room its region has beyond them.
    #[test]
    fn described_blocks_stay_within_their_count() {
        let double = Datatype::double();
        let mut room = [0.0f64; 4];
        let dst = RecvBuf::typed_with(&mut room[..], 2, &double).expect("two doubles");
        assert!(<Described as sealed::Blocks>::check_dst(&dst, 0..2).is_ok());
        assert!(<Described as sealed::Blocks>::check_dst(&dst, 2..3).is_err(), "item 2 lies past the buffer's two");
        assert!(<Described as sealed::Blocks>::pack_dst(&dst, 1..3, Repr::Native).is_err());
        let values = [1.0f64; 4];
        let src = SendBuf::typed_with(&values[..], 2, &double).expect("two doubles");
        assert!(src.block(0..2).is_ok());
        assert!(src.block(1..3).is_err());
    }
}
