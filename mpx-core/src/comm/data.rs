//! What sends and receives take: [`SendData`] and [`RecvData`].
//!
//! Every send (`send`, `bsend`, `ssend`, `rsend` and their nonblocking
//! `i` forms) takes any [`SendData`]:
//!
//! | data | travels as | matches a receive of |
//! |---|---|---|
//! | `&T` (one value; arrays `&[T; N]` too) | `T`'s datatype, once (N times) | the same type signature |
//! | `&[T]`, `&Vec<T>` | `T`'s datatype, `len` times | the same type signature (fewer elements fit a larger buffer) |
//! | `Vec<T>` | as `&[T]`, without a copy when `T` has no padding | as `&[T]` |
//! | [`SendBuf`] | its datatype, `count` times (a derived type over any memory; [`SendBuf::bytes`] for MPI's `byte`) | the same type signature |
//! | [`Bytes`] | `packed`: no type signature | any receive (as MPI's `packed`) |
//! | `Serde(value)` (the `serde` feature) | the value's postcard bytes, marked as serde | a serde receive (`recv::<Serde<T>>`, `incoming::<Serde<T>>`) |
//!
//! and every receive into memory (`irecv`, `recv_into`) any [`RecvData`]:
//! `&mut T` (one value), `&mut [T]` and `&mut Vec<T>` (up to `len`
//! values), or a [`RecvBuf`].
//!
//! The data of a send is packed (copied) when the send starts, so a
//! borrowed buffer is free again as soon as the call returns, and the
//! request is `'static`.

use bytes::Bytes;

use super::buffer::{capacity, deliver_into, plain_bytes, ContiguousVec, RecvBuf, SendBuf};
use crate::error::Result;
use crate::mpi_type::MpiType;
use crate::pack::Repr;
use crate::request::Finish;

pub use super::buffer::Packed;

/// Data a send can take: a value, a slice, a `Vec`, a [`SendBuf`] or
/// packed [`Bytes`] (see the [module docs](self) for what each matches).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(2, |comm| async move {
/// use mpx::{comm::SendBuf, Datatype, MpiType, Region};
/// if comm.rank() == 0 {
///     comm.send(&42u64, 1, 0).await?;                 // one value
///     comm.send(&[1.0f64, 2.0], 1, 1).await?;         // an array
///     comm.send(vec![7i32; 3], 1, 2).await?;          // an owned Vec, not copied
///     let m = [0u8, 1, 2, 3, 4, 5];
///     let evens = Datatype::vector(3, 1, 2, &u8::datatype())?;
///     comm.send(SendBuf::new(Region::of(&m), 1, &evens), 1, 3).await?; // a derived type
/// } else {
///     let (x, _) = comm.recv::<u64>(0, 0).await?;
///     let (pair, _) = comm.recv::<[f64; 2]>(0, 1).await?;
///     let (v, _) = comm.recv_vec::<i32>(0, 2).await?;
///     let (evens, _) = comm.recv_vec::<u8>(0, 3).await?;
///     assert_eq!((x, pair, v, evens), (42, [1.0, 2.0], vec![7; 3], vec![0, 2, 4]));
/// }
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub trait SendData {
    /// Packs the data in `repr` for a send (a detail of mpx: [`Packed`]
    /// has no public constructor, so only mpx's own types implement this).
    #[doc(hidden)]
    fn into_packed(self, repr: Repr) -> Result<Packed>;
}

impl<T: MpiType> SendData for &T {
    fn into_packed(self, repr: Repr) -> Result<Packed> {
        std::slice::from_ref(self).into_packed(repr)
    }
}

impl<T: MpiType> SendData for &[T] {
    /// Native data of a type without padding is copied as it lies.
    fn into_packed(self, repr: Repr) -> Result<Packed> {
        let datatype = T::datatype_ref();
        if repr == Repr::Native && !datatype.is_packed() {
            if let Some(bytes) = plain_bytes(self, &datatype) {
                return Ok(Packed::native_values(Bytes::from(crate::pack::spare::copy_of(bytes)?), self.len(), &datatype));
            }
        }
        SendBuf::typed(self).pack(repr)
    }
}

/// Plain values as the bytes they lie in, and the type signature (hash
/// and length) of their packed native data.
pub(crate) type PlainBytes<'b> = (&'b [u8], Option<(u64, u64)>);

/// `values` as the bytes they lie in and the type signature of their
/// packed native data, if they are plain values (no padding) of at most
/// `max` bytes; `None` otherwise.
pub(crate) fn small_native_values<T: MpiType>(values: &[T], max: usize) -> Option<PlainBytes<'_>> {
    if std::mem::size_of_val(values) > max {
        return None;
    }
    let datatype = T::datatype_ref();
    if datatype.is_packed() {
        return None;
    }
    let bytes = plain_bytes(values, &datatype)?;
    let signature = datatype.signature().repeat(values.len() as u64);
    Some((bytes, Some((signature.hash(), signature.len()))))
}

impl<T: MpiType> SendData for &Vec<T> {
    fn into_packed(self, repr: Repr) -> Result<Packed> {
        self.as_slice().into_packed(repr)
    }
}

impl<T: MpiType> SendData for Vec<T> {
    /// Native data of a type without padding becomes the message as it is.
    fn into_packed(self, repr: Repr) -> Result<Packed> {
        if repr != Repr::Native {
            return self.as_slice().into_packed(repr);
        }
        match ContiguousVec::new(self) {
            Ok(values) => {
                let count = values.len();
                Ok(Packed::native_values(Bytes::from_owner(values), count, &T::datatype_ref()))
            }
            Err(values) => values.as_slice().into_packed(repr),
        }
    }
}

impl SendData for SendBuf<'_> {
    fn into_packed(self, repr: Repr) -> Result<Packed> {
        self.pack(repr)
    }
}

impl SendData for &SendBuf<'_> {
    fn into_packed(self, repr: Repr) -> Result<Packed> {
        self.pack(repr)
    }
}

impl SendData for Bytes {
    /// `packed` data, sent as it is.
    fn into_packed(self, _: Repr) -> Result<Packed> {
        Ok(Packed::untyped(self))
    }
}

/// Memory a receive writes into: `&mut T` (one value; an array `&mut [T; N]`
/// is one value of `N` elements, and like every buffer takes a message of
/// fewer), `&mut [T]` or `&mut Vec<T>` (up to its length), or a
/// [`RecvBuf`] (a derived type, `byte`s or `packed` bytes). To receive a
/// value that must arrive whole, use [`Comm::recv`](super::Comm::recv).
/// The memory stays borrowed by the request until it completes.
///
/// A `&mut` held in a variable moves into a receive, as into any generic
/// function: reborrow it (`&mut *buf`) to use it again afterwards.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(2, |comm| async move {
/// let other = 1 - comm.rank();
/// comm.isend(&[comm.rank() as u32; 4], other, 0);
/// comm.isend(&(comm.rank() as f64), other, 1);
/// let mut four = [0u32; 4];
/// let mut one = 0.0f64;
/// comm.recv_into(&mut four, other, 0).await?;
/// comm.recv_into(&mut one, other, 1).await?;
/// assert_eq!((four, one), ([other as u32; 4], other as f64));
///
/// comm.isend(&[7u8; 2], other, 2);
/// let mut storage = [0u8; 2];
/// let buf: &mut [u8] = &mut storage;
/// comm.recv_into(&mut *buf, other, 2).await?; // reborrowed: `buf` is still usable
/// assert_eq!(buf, [7, 7]);
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub trait RecvData<'a> {
    /// The receive's capacity and how it writes a delivered message (a
    /// detail of mpx: [`RecvTarget`] has no public constructor).
    #[doc(hidden)]
    fn into_target(self) -> Result<RecvTarget<'a>>;

    /// Packs what the memory holds now, as a send of it would (the
    /// outgoing half of [`sendrecv_replace`](super::Comm::sendrecv_replace);
    /// a detail of mpx).
    #[doc(hidden)]
    fn pack_contents(&self, repr: Repr) -> Result<Packed>;
}

/// How a receive writes what it gets: the most data bytes it holds
/// (`None`: too many to count) and the unpacking step.
#[doc(hidden)]
pub struct RecvTarget<'a> {
    pub(crate) limit: Option<u64>,
    pub(crate) finish: Finish<'a>,
}

impl<'a, T: MpiType> RecvData<'a> for &'a mut [T] {
    fn into_target(self) -> Result<RecvTarget<'a>> {
        let limit = capacity(&T::datatype_ref(), self.len() as u64);
        Ok(RecvTarget { limit, finish: Finish::slice(self) })
    }

    fn pack_contents(&self, repr: Repr) -> Result<Packed> {
        SendBuf::typed(self).pack(repr)
    }
}

impl<'a, T: MpiType> RecvData<'a> for &'a mut T {
    fn into_target(self) -> Result<RecvTarget<'a>> {
        std::slice::from_mut(self).into_target()
    }

    fn pack_contents(&self, repr: Repr) -> Result<Packed> {
        SendBuf::typed(std::slice::from_ref(&**self)).pack(repr)
    }
}

impl<'a, T: MpiType> RecvData<'a> for &'a mut Vec<T> {
    fn into_target(self) -> Result<RecvTarget<'a>> {
        self.as_mut_slice().into_target()
    }

    fn pack_contents(&self, repr: Repr) -> Result<Packed> {
        SendBuf::typed(self.as_slice()).pack(repr)
    }
}

impl<'a> RecvData<'a> for RecvBuf<'a> {
    fn into_target(self) -> Result<RecvTarget<'a>> {
        // A buffer that cannot hold `count` items fails before the receive
        // is posted, so no message is consumed by it.
        self.check()?;
        let limit = capacity(&self.datatype, self.count);
        Ok(RecvTarget { limit, finish: Finish::boxed(move |msg| deliver_into(msg, &self.datatype, self.count, self.region)) })
    }

    fn pack_contents(&self, repr: Repr) -> Result<Packed> {
        RecvBuf::pack_contents(self, repr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large borrowed slice is copied into a buffer this thread keeps
    /// (one a receive gave back), not into fresh memory: a one-way stream
    /// of 1 MiB sends faulted in every page of every message.
    #[test]
    fn a_large_borrowed_send_reuses_a_kept_buffer() {
        let values = vec![7u64; (1 << 20) / 8];
        let kept = Vec::<u8>::with_capacity(2 << 20);
        let at = kept.as_ptr();
        crate::pack::spare::give(kept);
        let packed = values[..].into_packed(Repr::Native).unwrap();
        assert_eq!(packed.data.as_ptr(), at, "packed into the kept buffer");
        assert_eq!(&packed.data[..], plain_bytes(&values[..], &u64::datatype_ref()).unwrap());
        let again = values[..].into_packed(Repr::Native).unwrap();
        assert_ne!(again.data.as_ptr(), at, "taken once");
    }
}
