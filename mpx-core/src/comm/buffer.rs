//! Described buffers ([`SendBuf`], [`RecvBuf`]): memory, a count and a
//! datatype; packing a send, checking and unpacking a delivered message.

use bytes::Bytes;

use crate::datatype::Datatype;
use crate::error::{ErrorKind, Result};
use crate::mpi_type::MpiType;
use crate::pack::{covers_every_byte, Region, RegionMut, Repr, TypeSequence};
use crate::proto::engine::{Delivered, Envelope};
use crate::proto::wire::SERIALIZED_SIGNATURE;
use crate::request::Status;

/// A send buffer: memory, a count and a datatype.
///
/// ```
/// use mpx::{comm::SendBuf, Datatype, Region};
/// let m = vec![0.0f64; 16];
/// let column = Datatype::vector(4, 1, 4, &Datatype::double())?;
/// let buf = SendBuf::new(Region::of(&m), 1, &column);
/// let typed = SendBuf::typed(&[1u32, 2, 3]);
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SendBuf<'a> {
    pub(crate) region: Region<'a>,
    pub(crate) count: u64,
    pub(crate) datatype: Datatype,
}

impl<'a> SendBuf<'a> {
    /// `count` items of `datatype` in `region`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{Datatype, Region, SendBuf};
    /// let other = 1 - comm.rank();
    /// let m = [1.0f64, 2.0, 3.0, 4.0]; // 2×2, row-major
    /// let column = Datatype::vector(2, 1, 2, &Datatype::double())?;
    /// comm.isend(SendBuf::new(Region::of(&m), 1, &column), other, 0);
    /// assert_eq!(comm.recv::<[f64; 2]>(other, 0).await?.0, [1.0, 3.0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn new(region: Region<'a>, count: u64, datatype: &Datatype) -> SendBuf<'a> {
        SendBuf { region, count, datatype: datatype.clone() }
    }

    /// A typed slice with its own datatype.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::SendBuf;
    /// let other = 1 - comm.rank();
    /// let values = [comm.rank() as u32; 3];
    /// // The same message as `&values`, as a SendBuf (for APIs that take one).
    /// comm.send(SendBuf::typed(&values), other, 0).await?;
    /// assert_eq!(comm.recv_vec::<u32>(other, 0).await?.0, [other as u32; 3]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn typed<T: MpiType>(values: &'a [T]) -> SendBuf<'a> {
        // SAFETY: the region is read through `T`'s own datatype.
        SendBuf { region: unsafe { Region::typed(values) }, count: values.len() as u64, datatype: T::datatype() }
    }

    /// `count` items of a derived `datatype` laid over a typed slice (every
    /// other element, a field of each struct, ...). The datatype may only
    /// touch bytes that hold `T`'s data, never padding: that is checked
    /// here, element by element, and a violation is
    /// [`ErrorKind::InvalidDatatype`]. For plain-old-data types
    /// `SendBuf::new(Region::of(..), ..)` needs no check.
    ///
    /// ```
    /// use mpx::{comm::SendBuf, Datatype, MpiType};
    /// let pairs = [[1u32, 2], [3, 4], [5, 6]];
    /// // The first u32 of each pair.
    /// let firsts = Datatype::vector(3, 1, 2, &u32::datatype())?;
    /// SendBuf::typed_with(&pairs, 1, &firsts)?;
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn typed_with<T: MpiType>(values: &'a [T], count: u64, datatype: &Datatype) -> Result<SendBuf<'a>> {
        check_typemap_bytes::<T>(values.len(), count, datatype)?;
        // SAFETY: the datatype touches only bytes of `T`'s typemap (checked above).
        Ok(SendBuf { region: unsafe { Region::typed(values) }, count, datatype: datatype.clone() })
    }

    /// Raw bytes as MPI's `byte` type: untyped data that matches a receive
    /// of `byte`s ([`RecvBuf::bytes`]) or of `packed` bytes. (A `&[u8]`
    /// sent directly travels as `uint8_t` and matches `u8` receives; owned
    /// [`Bytes`] travel as `packed` and match any receive.)
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{RecvBuf, SendBuf};
    /// let other = 1 - comm.rank();
    /// comm.isend(SendBuf::bytes(b"hello"), other, 0);
    /// let mut inbox = [0u8; 8];
    /// let status = comm.recv_into(RecvBuf::bytes(&mut inbox), other, 0).await?;
    /// assert_eq!(&inbox[..status.bytes as usize], b"hello");
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn bytes(bytes: &'a [u8]) -> SendBuf<'a> {
        SendBuf { region: Region::new(bytes), count: bytes.len() as u64, datatype: Datatype::byte() }
    }

    /// Data made with the pack API, sent as `packed` (it carries no type
    /// signature and can be received with any type).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::SendBuf;
    /// let other = 1 - comm.rank();
    /// let mut packed = [0u8; 8];
    /// mpx::pack(&[7u32, 9], &mut packed, &mut 0)?;
    /// comm.isend(SendBuf::packed(&packed), other, 0);
    /// assert_eq!(comm.recv::<[u32; 2]>(other, 0).await?.0, [7, 9]); // received as u32s
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn packed(bytes: &'a [u8]) -> SendBuf<'a> {
        SendBuf { region: Region::new(bytes), count: bytes.len() as u64, datatype: Datatype::packed() }
    }

    /// Packs the buffer in `repr` (`packed` data always travels as it is).
    /// External32 typed data is led by its [`TypeSequence`], so that a
    /// receive as `packed` can convert it.
    pub(crate) fn pack(&self, repr: Repr) -> Result<Packed> {
        if self.datatype.is_packed() {
            return Ok(Packed::untyped(Bytes::from(self.datatype.pack_to_vec(self.region, self.count)?)));
        }
        let s = self.datatype.signature().repeat(self.count);
        let signature = Some((s.hash(), s.len()));
        Ok(match repr {
            Repr::Native => {
                let data = Bytes::from(self.datatype.pack_to_vec(self.region, self.count)?);
                Packed { data, repr, signature, desc_len: 0 }
            }
            Repr::External32 => {
                // The source, the data's size and its memory first: the
                // description walks an item's elements, which a type of
                // a few bytes (repeated at one place) can have billions of.
                crate::pack::check_span(&self.datatype, self.count, self.region.origin(), self.region.len())?;
                let size = self.datatype.pack_external_size(self.count)?;
                let mut out = Vec::new();
                crate::pack::reserve_packed(&mut out, size.saturating_add(1 << 10))?;
                let max_desc = crate::proto::engine::MAX_DESC_LEN as usize;
                let sequence = TypeSequence::within(&self.datatype, self.count, max_desc)
                    .ok_or_else(|| ErrorKind::InvalidDatatype("the type has too many runs of basic types to describe".into()))?;
                sequence.encode_into(&mut out);
                let desc_len = out.len() as u32;
                self.datatype.pack_external_append(self.region, self.count, &mut out)?;
                Packed { data: Bytes::from(out), repr, signature, desc_len }
            }
        })
    }
}

/// The most data bytes a receive of `count` items of `datatype` can hold,
/// in either representation (`None`: too many to count).
pub(crate) fn capacity(datatype: &Datatype, count: u64) -> Option<u64> {
    // The larger of `pack_size` and `pack_external_size`: if it is
    // countable, so is the other.
    let per_item = datatype.size().max(datatype.external32_size());
    per_item.checked_mul(count).filter(|&bytes| usize::try_from(bytes).is_ok())
}

/// Message data ready to send, made by [`SendData`](super::SendData)
/// (opaque: only mpx's own types make it).
pub struct Packed {
    /// The bytes, led by `desc_len` bytes of type description.
    pub(crate) data: Bytes,
    /// Their representation.
    pub(crate) repr: Repr,
    /// Their signature `(hash, elements)`, or `None` for `packed` data.
    pub(crate) signature: Option<(u64, u64)>,
    /// Bytes of [`TypeSequence`] leading the data.
    pub(crate) desc_len: u32,
}

impl Packed {
    /// `packed` bytes, sent as they are.
    pub(crate) fn untyped(data: Bytes) -> Packed {
        Packed { data, repr: Repr::Native, signature: None, desc_len: 0 }
    }

    /// `count` native values of a type without padding whose datatype is
    /// `datatype`: `data` holds their bytes as they lie in memory.
    pub(crate) fn native_values(data: Bytes, count: usize, datatype: &Datatype) -> Packed {
        let signature = datatype.signature().repeat(count as u64);
        Packed { data, repr: Repr::Native, signature: Some((signature.hash(), signature.len())), desc_len: 0 }
    }
}

/// A receive buffer: memory, a count and a datatype.
///
/// Every `RecvBuf` covers initialised memory wherever its datatype
/// reaches (its constructors take `&mut [u8]`, or `&mut [T]` with a
/// datatype checked to touch only `T`'s data): collectives rely on that to
/// pass on data a `RecvBuf` received. An internal constructor must keep it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(2, |comm| async move {
/// use mpx::{Datatype, MpiType, RecvBuf};
/// let other = 1 - comm.rank();
/// comm.isend(&[1u32, 3], other, 0);
/// let mut pairs = [[0u32; 2]; 2];
/// let firsts = Datatype::vector(2, 1, 2, &u32::datatype())?; // the first u32 of each pair
/// comm.recv_into(RecvBuf::typed_with(&mut pairs, 1, &firsts)?, other, 0).await?;
/// assert_eq!(pairs, [[1, 0], [3, 0]]);
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[derive(Debug)]
pub struct RecvBuf<'a> {
    pub(crate) region: RegionMut<'a>,
    pub(crate) count: u64,
    pub(crate) datatype: Datatype,
}

impl<'a> RecvBuf<'a> {
    /// Room for `count` items of `datatype` in `region`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{Datatype, RecvBuf, RegionMut};
    /// let other = 1 - comm.rank();
    /// comm.isend(&[1.0f64, 2.0], other, 0);
    /// let mut m = [0.0f64; 4]; // 2×2, row-major
    /// let column = Datatype::vector(2, 1, 2, &Datatype::double())?;
    /// comm.recv_into(RecvBuf::new(RegionMut::of(&mut m), 1, &column), other, 0).await?;
    /// assert_eq!(m, [1.0, 0.0, 2.0, 0.0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn new(region: RegionMut<'a>, count: u64, datatype: &Datatype) -> RecvBuf<'a> {
        RecvBuf { region, count, datatype: datatype.clone() }
    }

    /// Room for `count` items of a derived `datatype` laid over a typed
    /// slice. As for [`SendBuf::typed_with`], the datatype may only touch
    /// bytes of `T`'s data; and `T` must accept every bit pattern there
    /// (no `bool`, `char`, enums, ...), since values written through another
    /// datatype are not validated.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{Datatype, MpiType, RecvBuf};
    /// let other = 1 - comm.rank();
    /// comm.isend(&[1i32, 2, 3], other, 0);
    /// let mut v = [0i32; 6];
    /// let evens = Datatype::vector(3, 1, 2, &i32::datatype())?; // every other element
    /// comm.recv_into(RecvBuf::typed_with(&mut v, 1, &evens)?, other, 0).await?;
    /// assert_eq!(v, [1, 0, 2, 0, 3, 0]);
    /// assert!(RecvBuf::typed_with(&mut [false; 2], 2, &bool::datatype()).is_err(), "bool is validated");
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn typed_with<T: MpiType>(values: &'a mut [T], count: u64, datatype: &Datatype) -> Result<RecvBuf<'a>> {
        if T::NEEDS_VALIDATION {
            return Err(ErrorKind::InvalidDatatype(format!(
                "{} has invalid bit patterns: receive it with its own datatype",
                std::any::type_name::<T>()
            )).into());
        }
        check_typemap_bytes::<T>(values.len(), count, datatype)?;
        // SAFETY: every byte the datatype writes holds data of `T`, where
        // any bit pattern is valid (checked above).
        let view = unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<std::mem::MaybeUninit<T>>(), values.len()) };
        // SAFETY: as above: only typemap bytes of `T`, where any bit pattern
        // is valid, are written.
        Ok(RecvBuf { region: unsafe { RegionMut::typed(view) }, count, datatype: datatype.clone() })
    }

    pub(crate) fn check(&self) -> Result<()> {
        self.region.check(&self.datatype, self.count)
    }

    /// The same room, reborrowed (a persistent receive's buffer, lent to
    /// one start).
    pub(crate) fn reborrow(&mut self) -> RecvBuf<'_> {
        RecvBuf { region: self.region.reborrow(), count: self.count, datatype: self.datatype.clone() }
    }

    /// Packs what the buffer holds now, read through its own datatype (the
    /// outgoing half of a `sendrecv_replace`).
    pub(crate) fn pack_contents(&self, repr: Repr) -> Result<Packed> {
        self.pack_block(0, self.count, repr)
    }

    /// Packs `count` items of what the buffer holds, from `offset` bytes
    /// past its origin, read through its own datatype (packing checks that
    /// they lie in the buffer).
    pub(crate) fn pack_block(&self, offset: i128, count: u64, repr: Repr) -> Result<Packed> {
        // SAFETY: every `RecvBuf` covers initialised memory (its public
        // constructors take `&mut [u8]`, or `&mut [T]` with a datatype
        // checked to touch only `T`'s data), and it is read through its
        // own datatype.
        let region = unsafe { self.region.as_region() };
        SendBuf::new(region.shifted(offset)?, count, &self.datatype).pack(repr)
    }

    /// Room for `bytes.len()` raw bytes of MPI's `byte` type (see
    /// [`SendBuf::bytes`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{RecvBuf, SendBuf};
    /// let other = 1 - comm.rank();
    /// comm.isend(SendBuf::bytes(&[1, 2, 3]), other, 0);
    /// let mut inbox = [0u8; 4];
    /// let status = comm.recv_into(RecvBuf::bytes(&mut inbox), other, 0).await?;
    /// assert_eq!((status.bytes, inbox), (3, [1, 2, 3, 0]));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn bytes(bytes: &'a mut [u8]) -> RecvBuf<'a> {
        let count = bytes.len() as u64;
        RecvBuf { region: RegionMut::new(bytes), count, datatype: Datatype::byte() }
    }

    /// Room for `bytes.len()` bytes of `packed` data: receives any message
    /// as packed bytes, to unpack later with the pack API.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::RecvBuf;
    /// let other = 1 - comm.rank();
    /// comm.isend(&[5u16, 6], other, 0);
    /// let mut raw = [0u8; 16];
    /// let status = comm.recv_into(RecvBuf::packed(&mut raw), other, 0).await?;
    /// let mut values = [0u16; 2];
    /// mpx::unpack(&raw[..status.bytes as usize], &mut 0, &mut values)?;
    /// assert_eq!(values, [5, 6]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn packed(bytes: &'a mut [u8]) -> RecvBuf<'a> {
        let count = bytes.len() as u64;
        RecvBuf { region: RegionMut::new(bytes), count, datatype: Datatype::packed() }
    }
}

/// Checks that `count` items of `datatype` over `len` values of `T` touch
/// only bytes that belong to `T`'s own typemap (never padding), and stay in
/// the slice. Walks the entries of at most `size_of::<T>()` items: after
/// that, where items start within a `T` repeats.
pub(crate) fn check_typemap_bytes<T: MpiType>(len: usize, count: u64, datatype: &Datatype) -> Result<()> {
    let size = std::mem::size_of::<T>();
    crate::pack::check_span(datatype, count, 0, len * size)?;
    if datatype.size() == 0 || count == 0 {
        // Touches no byte at all, however many items.
        return Ok(());
    }
    let mut data_bytes = vec![false; size];
    T::datatype().for_each_entry(|b, disp| {
        for k in 0..b.size() {
            data_bytes[disp as usize + k] = true;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    if size == 0 || data_bytes.iter().all(|&d| d) {
        return Ok(());
    }
    let extent = datatype.extent() as i128;
    // Only where an item starts within a `T` matters, and that repeats
    // every `size / gcd(extent, size)` items: walk one period, not `count`.
    let step = extent.rem_euclid(size as i128) as u64;
    let period = if step == 0 { 1 } else { size as u64 / gcd(step, size as u64) };
    // The walk goes through every element of those items, and one item
    // can repeat a few bytes billions of times (a vector of stride 0): the
    // data of the items walked must fit in memory first, as sending or
    // receiving them would need.
    crate::pack::fits_in_memory(datatype.pack_size(count.min(period))?)?;
    for i in 0..count.min(period) as i128 {
        let bad = datatype.for_each_entry(|b, disp| {
            let start = disp as i128 + i * extent;
            match (0..b.size() as i128).find(|k| !data_bytes[(start + k).rem_euclid(size as i128) as usize]) {
                Some(k) => std::ops::ControlFlow::Break(start + k),
                None => std::ops::ControlFlow::Continue(()),
            }
        });
        if let Some(offset) = bad {
            return Err(ErrorKind::InvalidDatatype(format!(
                "the datatype touches byte {offset} of the slice, which is padding of {}",
                std::any::type_name::<T>()
            )).into());
        }
    }
    Ok(())
}

/// Checks a delivered message against a receive of `count` items of
/// `datatype` (truncation, type signature) and unpacks it into `region`.
pub(crate) fn deliver_into(msg: &Delivered, datatype: &Datatype, count: u64, region: RegionMut<'_>) -> Result<Status> {
    let env = &msg.envelope;
    if env.signature == Some(SERIALIZED_SIGNATURE) && !datatype.is_packed() {
        // Serde bytes have no datatype: a type mismatch whatever their length.
        return Err(ErrorKind::TypeMismatch.into());
    }
    let capacity = if env.repr == Repr::External32 {
        datatype.pack_external_size(count)?
    } else {
        datatype.pack_size(count)?
    };
    if msg.data.len() > capacity {
        return Err(ErrorKind::Truncate { needed: msg.data.len() as u64, available: capacity as u64, message: Some((env.source as usize, env.tag)) }.into());
    }
    if let Some((hash, elements)) = env.signature {
        // Every basic element takes at least one byte in either
        // representation: a message claiming more elements than bytes lies,
        // and must not make the receiver walk them.
        if elements > msg.data.len() as u64 {
            return Err(ErrorKind::TypeMismatch.into());
        }
        if !datatype.is_packed() {
            match datatype.signature_prefix(count, elements) {
                Some(prefix) if prefix.hash() == hash => {}
                _ => return Err(ErrorKind::TypeMismatch.into()),
            }
        }
    }
    let ext_size = datatype.external32_size();
    let partial_item = env.repr == Repr::External32 && ext_size > 0 && !(msg.data.len() as u64).is_multiple_of(ext_size);
    if datatype.is_packed() || partial_item {
        // Packed bytes are unpacked later with the native pack API, and
        // external32 data ending inside an item converts through its type
        // sequence: both take the message in this rank's native form.
        let native = native_packed(msg)?;
        if datatype.is_packed() && native.len() > capacity {
            return Err(ErrorKind::Truncate { needed: native.len() as u64, available: capacity as u64, message: Some((env.source as usize, env.tag)) }.into());
        }
        datatype.unpack_message(&native, Repr::Native, region, count)?;
        return Ok(Status::of(env.source as usize, env.tag, native.len() as u64));
    }
    datatype.unpack_message(&msg.data, env.repr, region, count)?;
    let mut status = status_of(msg);
    if env.repr == Repr::External32 && ext_size > 0 {
        // The status counts what landed in the buffer: whole items of the
        // native representation (unpack_message checked they are whole).
        status.bytes = msg.data.len() as u64 / ext_size * datatype.size();
    }
    Ok(status)
}

/// A message's data in this rank's native packed form: as it travelled,
/// unless it is typed external32 data, which is converted through the
/// type sequence that leads it (checked against the message's signature).
pub(crate) fn native_packed(msg: &Delivered) -> Result<Bytes> {
    let env = &msg.envelope;
    match env.signature {
        Some((hash, elements)) if env.repr == Repr::External32 => {
            let sequence = TypeSequence::decode(msg.type_desc())?;
            let s = sequence.signature();
            if s.hash() != hash || s.len() != elements {
                return Err(ErrorKind::Protocol("a type sequence that does not match its message's signature".into()).into());
            }
            Ok(Bytes::from(sequence.external32_to_native(&msg.data)?))
        }
        _ => Ok(msg.data.clone()),
    }
}

/// Unpacks a delivered message into a typed slice, validating values first.
pub(crate) fn unpack_typed_message<T: MpiType>(msg: &Delivered, buf: &mut [T]) -> Result<Status> {
    if let Some(values) = native_values::<T>(msg, &T::datatype_ref()) {
        if values <= buf.len() {
            // SAFETY: the message is `values` whole native values of `T`
            // (`native_values`), a type without padding that any bytes
            // make valid, and `buf` holds at least that many: copying its
            // bytes writes exactly what unpacking them would. The message
            // and the receive's buffer are distinct memory.
            unsafe { crate::pack::copy::copy_raw(msg.data.as_ptr(), buf.as_mut_ptr().cast::<u8>(), msg.data.len()) };
            return Ok(status_of(msg));
        }
    }
    let count = buf.len() as u64;
    let mut status = None;
    // SAFETY: the region is written through `T`'s own datatype.
    unsafe {
        crate::pack::unpack_typed(buf, |region| {
            status = Some(deliver_into(msg, &T::datatype(), count, region)?);
            Ok(())
        })?;
    }
    Ok(status.expect("set on success"))
}

/// Unpacks a delivered message into uninitialised values of `T`; returns
/// the status and how many values it wrote whole (and validated).
pub(crate) fn unpack_typed_message_uninit<T: MpiType>(msg: &Delivered, buf: &mut [std::mem::MaybeUninit<T>]) -> Result<(Status, usize)> {
    let count = buf.len() as u64;
    let size = T::datatype().size().max(1);
    let mut status = None;
    // SAFETY: the region is written through `T`'s own datatype, and the
    // status counts the native bytes that landed, so its whole items are
    // the values written whole.
    let whole = unsafe {
        crate::pack::unpack_typed_uninit(buf, |region| {
            let s = deliver_into(msg, &T::datatype(), count, region)?;
            let whole = s.bytes / size;
            status = Some(s);
            Ok(whole)
        })?
    };
    Ok((status.expect("set on success"), whole))
}

/// How many values of `T` `msg` holds, if it is exactly whole values of
/// `T` in this rank's native representation (by its signature and length)
/// and `T`, whose own datatype is `datatype`, has no padding and takes any
/// bytes: its bytes are then those values as they lie in memory. `None`
/// otherwise (the message is then checked and unpacked in full).
pub(crate) fn native_values<T: MpiType>(msg: &Delivered, datatype: &Datatype) -> Option<usize> {
    if msg.desc.is_some() {
        return None;
    }
    native_values_of::<T>(&msg.envelope, msg.data.len(), datatype)
}

/// [`native_values`] of a message with envelope `env` and `len` bytes of
/// data, and no type description, before its data is in.
pub(crate) fn native_values_of<T: MpiType>(env: &Envelope, len: usize, datatype: &Datatype) -> Option<usize> {
    if env.repr != Repr::Native || env.desc_len != 0 {
        return None;
    }
    native_values_in::<T>(env.signature, len, datatype)
}

/// [`native_values`] of `len` bytes of packed native data of type
/// signature `signature`, without a type description (a block left where
/// ranks meet, say).
pub(crate) fn native_values_in<T: MpiType>(signature: Option<(u64, u64)>, len: usize, datatype: &Datatype) -> Option<usize> {
    let size = std::mem::size_of::<T>();
    if T::NEEDS_VALIDATION || size == 0 || datatype.is_packed() || !covers_every_byte::<T>(datatype) || !len.is_multiple_of(size) {
        return None;
    }
    let (hash, elements) = signature.filter(|&s| s != SERIALIZED_SIGNATURE)?;
    let values = len / size;
    let signature = datatype.signature().repeat(values as u64);
    (signature.hash() == hash && signature.len() == elements).then_some(values)
}

/// `values` as the bytes they lie in, if `datatype`, `T`'s own, covers
/// every byte of a `T` (no padding): they are then, byte for byte, their
/// packed native data.
pub(crate) fn plain_bytes<'v, T: MpiType>(values: &'v [T], datatype: &Datatype) -> Option<&'v [u8]> {
    // SAFETY: every byte of every value is a typemap byte, hence
    // initialised (`MpiType`'s contract), and the bytes are those of
    // `values`, borrowed as long.
    covers_every_byte::<T>(datatype)
        .then(|| unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) })
}

/// A `Vec` whose element type is contiguous (no padding), viewed as the
/// bytes of a message.
pub(crate) struct ContiguousVec<T>(Vec<T>);

impl<T: MpiType> ContiguousVec<T> {
    /// `values`, if `T`'s datatype covers every byte of a `T` (no padding);
    /// otherwise `values` back.
    pub(crate) fn new(values: Vec<T>) -> std::result::Result<ContiguousVec<T>, Vec<T>> {
        if covers_every_byte::<T>(&T::datatype_ref()) {
            Ok(ContiguousVec(values))
        } else {
            Err(values)
        }
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

impl<T: MpiType> AsRef<[u8]> for ContiguousVec<T> {
    fn as_ref(&self) -> &[u8] {
        plain_bytes(&self.0, &T::datatype_ref()).expect("`new` admits only types without padding")
    }
}

/// The status of a delivered message, as it travelled.
pub(super) fn status_of(msg: &Delivered) -> Status {
    Status::of(msg.envelope.source as usize, msg.envelope.tag, msg.data.len() as u64)
}

/// The greatest common divisor of `a` and `b`.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receives_capacity_is_the_larger_of_its_two_packed_sizes() {
        for name in ["long", "int", "double", "long_double", "short_int", "wchar", "byte"] {
            let t = Datatype::named(name).expect("a predefined type");
            for count in [0u64, 1, 3, 1000] {
                let native = t.pack_size(count).unwrap() as u64;
                let external = t.pack_external_size(count).unwrap() as u64;
                assert_eq!(capacity(&t, count), Some(native.max(external)), "{name} × {count}");
            }
        }
        let long = Datatype::named("long").unwrap();
        assert_eq!(capacity(&long, 3), Some(24), "8 bytes native, 4 in external32");
        assert_eq!(capacity(&long, u64::MAX), None, "too many to count");
        assert_eq!(capacity(&long, u64::MAX / 8 + 1), None);
        assert_eq!(capacity(&Datatype::named("byte").unwrap(), u64::MAX).map(|n| n as usize), usize::try_from(u64::MAX).ok());
    }

    /// A buffer of values with padding, described by a type that reads one
    /// double 2^40 times (8 TiB of data): an error at once, not a walk of
    /// a trillion elements to look for padding; a few times over, it is
    /// checked as any other.
    #[test]
    fn a_typed_buffer_of_more_data_than_memory_holds_is_refused_at_once() {
        use crate::coll::Loc;
        let values = [Loc { value: 0.0f64, index: 0 }; 2];
        let d = Datatype::double();
        let huge = Datatype::hvector(1i64 << 40, 1, 0, &d).unwrap();
        assert!(matches!(SendBuf::typed_with(&values, 1, &huge), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
        let thrice = Datatype::hvector(3, 1, 0, &d).unwrap();
        assert!(SendBuf::typed_with(&values, 1, &thrice).is_ok());
        let into_padding = Datatype::hindexed(&[1], &[12], &Datatype::int()).unwrap();
        assert!(matches!(SendBuf::typed_with(&values, 1, &into_padding), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidDatatype(_))));
    }
}
