//! Persistent requests (`MPI_Send_init`, `MPI_Recv_init`, `MPI_Start`,
//! `MPI_Startall`).
//!
//! A persistent request fixes the arguments of an operation once and starts
//! it as often as needed. Each [`start`](Persistent::start) returns an
//! ordinary [`Request`] that borrows the persistent request, so its buffer
//! is out of reach while that start is in flight and usable again
//! (readable, and writable for owned buffers) between starts:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mpx::Result<()> {
//! # mpx_net::loopback::launch(2, |comm| async move {
//! use mpx::comm::persistent::Persistent;
//! let other = 1 - comm.rank();
//! let mut send = comm.send_init(vec![0u32; 4], other, 0);
//! let mut recv = comm.recv_init(vec![0u32; 4], other, 0);
//! for step in 1..=3u32 {
//!     send.buffer_mut().fill(step);
//!     let r = recv.start();
//!     let s = send.start();
//!     s.await?;
//!     r.await?;
//!     assert_eq!(recv.buffer(), &[step; 4]);
//! }
//! # Ok(()) }).await?; Ok(()) }
//! ```
//!
//! An inactive persistent request (one not started, or whose start has
//! completed) is, for the completion functions, a `None` entry of
//! [`wait_all`](crate::wait_all), a [`Request::inactive`] (waiting on it
//! returns an empty status at once) or an empty slot of a
//! [`RequestSet`](crate::RequestSet), whose `wait_any`/`wait_some` over
//! only empty slots report that nothing is active, as MPI says.
//!
//! A start borrows its persistent request until it is dropped, so a
//! [`RequestSet`](crate::RequestSet) of starts holds every persistent
//! request it was built from while it lives: MPI's server loop (wait for
//! any, then restart the request that completed while the others stay in
//! flight) cannot restart one there. Wait for every start of a round
//! instead ([`wait_all`](crate::wait_all)), or, for such a loop, keep
//! [`irecv_owned`](Comm::irecv_owned) receives in the set: each owns its
//! buffer, hands it back with its status, and takes it again for the next
//! receive.
//!
//! Freeing a start ([`Request::free`]) lets that operation finish on its
//! own, as for any request; the persistent request itself stays, where
//! MPI's `MPI_Request_free` of an active persistent request frees it too.
//! A freed start of a receive stays posted and drops the data of the
//! message it takes (mpx never writes into a buffer whose borrow has
//! ended), so starting the same persistent receive again while that one
//! is posted leaves the first matching message to it: drop the start
//! (which withdraws it) or await it instead.

use super::data::{Packed, RecvData, RecvTarget};
use super::{Comm, Peer, RecvBuf, SendBuf, Source, TagSel};
use crate::coll::{Described, Element};
use crate::error::{Error, ErrorKind, Result};
use crate::mpi_type::MpiType;
use crate::pack::Repr;
use crate::proto::engine::SendMode;
use crate::request::Request;

/// An operation that can be started repeatedly.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |comm| async move {
/// use mpx::Persistent;
/// let mut inbox = [0u8; 2];
/// let mut recv = comm.recv_init(&mut inbox, 0, 0);
/// for round in 1..=2u8 {
///     comm.send(&[round; 2], 0, 0).await?; // to itself
///     recv.start().await?;
///     assert_eq!(recv.buffer(), &[round; 2]);
/// }
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub trait Persistent {
    /// `MPI_Start`: starts the operation; the returned request completes it
    /// and borrows `self` until then.
    fn start(&mut self) -> Request<'_>;
}

/// `MPI_Startall`: starts every request, returning their requests in order,
/// ready for [`wait_all`](crate::request::wait_all).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(2, |comm| async move {
/// use mpx::{start_all, wait_all, Persistent};
/// let other = 1 - comm.rank();
/// let mut send = comm.send_init(vec![comm.rank() as u8; 2], other, 0);
/// let mut recv = comm.recv_init(vec![0u8; 2], other, 0);
/// for outcome in wait_all(start_all([&mut recv as &mut dyn Persistent, &mut send])).await {
///     outcome?;
/// }
/// assert_eq!(recv.buffer(), &[other as u8; 2]);
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub fn start_all<'b, P: Persistent + ?Sized + 'b>(requests: impl IntoIterator<Item = &'b mut P>) -> Vec<Request<'b>> {
    requests.into_iter().map(|p| p.start()).collect()
}

/// The buffer of a persistent send: borrowed (`&[T]`, `&Vec<T>`, `&[T; N]`),
/// owned (`Vec<T>`, writable between starts), or a [`SendBuf`] of a
/// derived datatype (the element is then [`Described`]).
#[derive(Debug)]
pub enum SendStorage<'a, T> {
    /// A borrowed slice.
    Borrowed(&'a [T]),
    /// An owned vector.
    Owned(Vec<T>),
    /// Items of a datatype over memory (made by `From<SendBuf>`, for
    /// `T` = [`Described`]).
    #[non_exhaustive]
    Described(SendBuf<'a>),
}

impl<'a, T> From<&'a [T]> for SendStorage<'a, T> {
    fn from(b: &'a [T]) -> Self {
        SendStorage::Borrowed(b)
    }
}

impl<'a, T> From<&'a Vec<T>> for SendStorage<'a, T> {
    fn from(b: &'a Vec<T>) -> Self {
        SendStorage::Borrowed(b)
    }
}

impl<'a, T, const N: usize> From<&'a [T; N]> for SendStorage<'a, T> {
    fn from(b: &'a [T; N]) -> Self {
        SendStorage::Borrowed(b)
    }
}

impl<T> From<Vec<T>> for SendStorage<'static, T> {
    fn from(v: Vec<T>) -> Self {
        SendStorage::Owned(v)
    }
}

impl<'a> From<SendBuf<'a>> for SendStorage<'a, Described> {
    fn from(b: SendBuf<'a>) -> Self {
        SendStorage::Described(b)
    }
}

/// The buffer of a persistent receive: borrowed (`&mut [T]`, `&mut [T; N]`),
/// owned (`Vec<T>`), or a [`RecvBuf`] of a derived datatype (the element
/// is then [`Described`]).
#[derive(Debug)]
pub enum RecvStorage<'a, T> {
    /// A borrowed slice.
    Borrowed(&'a mut [T]),
    /// An owned vector.
    Owned(Vec<T>),
    /// Room for items of a datatype (made by `From<RecvBuf>`, for `T` =
    /// [`Described`]).
    #[non_exhaustive]
    Described(RecvBuf<'a>),
}

impl<'a, T> From<&'a mut [T]> for RecvStorage<'a, T> {
    fn from(b: &'a mut [T]) -> Self {
        RecvStorage::Borrowed(b)
    }
}

impl<'a, T, const N: usize> From<&'a mut [T; N]> for RecvStorage<'a, T> {
    fn from(b: &'a mut [T; N]) -> Self {
        RecvStorage::Borrowed(b)
    }
}

impl<T> From<Vec<T>> for RecvStorage<'static, T> {
    fn from(v: Vec<T>) -> Self {
        RecvStorage::Owned(v)
    }
}

impl<'a> From<RecvBuf<'a>> for RecvStorage<'a, Described> {
    fn from(b: RecvBuf<'a>) -> Self {
        RecvStorage::Described(b)
    }
}

pub(crate) mod sealed {
    use super::*;

    /// How a persistent request uses its storage, by element (a detail of
    /// mpx). A storage whose variant does not fit its element cannot be
    /// made outside mpx (the `Described` variants are non-exhaustive and
    /// made only for [`Described`]); it is refused rather than trusted.
    pub trait Stored: Sized {
        /// Packs the send buffer's current contents.
        fn pack_stored(buf: &SendStorage<'_, Self>, repr: Repr) -> Result<Packed>;
        /// The receive buffer, lent to one start.
        fn target_stored<'b>(buf: &'b mut RecvStorage<'_, Self>) -> Result<RecvTarget<'b>>;
    }

    fn mismatched() -> Error {
        ErrorKind::InvalidArgument("a persistent buffer that does not hold its element type".into()).into()
    }

    impl<T: MpiType> Stored for T {
        fn pack_stored(buf: &SendStorage<'_, T>, repr: Repr) -> Result<Packed> {
            match buf {
                SendStorage::Borrowed(b) => SendBuf::typed(b).pack(repr),
                SendStorage::Owned(v) => SendBuf::typed(v).pack(repr),
                SendStorage::Described(_) => Err(mismatched()),
            }
        }

        fn target_stored<'b>(buf: &'b mut RecvStorage<'_, T>) -> Result<RecvTarget<'b>> {
            match buf {
                RecvStorage::Borrowed(b) => (&mut **b).into_target(),
                RecvStorage::Owned(v) => v.as_mut_slice().into_target(),
                RecvStorage::Described(_) => Err(mismatched()),
            }
        }
    }

    impl Stored for Described {
        fn pack_stored(buf: &SendStorage<'_, Described>, repr: Repr) -> Result<Packed> {
            match buf {
                SendStorage::Described(b) => b.pack(repr),
                SendStorage::Borrowed(_) | SendStorage::Owned(_) => Err(mismatched()),
            }
        }

        fn target_stored<'b>(buf: &'b mut RecvStorage<'_, Described>) -> Result<RecvTarget<'b>> {
            match buf {
                RecvStorage::Described(b) => b.reborrow().into_target(),
                RecvStorage::Borrowed(_) | RecvStorage::Owned(_) => Err(mismatched()),
            }
        }
    }
}

/// A persistent send (`MPI_Send_init`, `MPI_Bsend_init`, `MPI_Ssend_init`,
/// `MPI_Rsend_init`). Each start packs the buffer's current contents.
pub struct PersistentSend<'a, T> {
    comm: Comm,
    buf: SendStorage<'a, T>,
    dest: Peer,
    tag: i32,
    mode: SendMode,
}

impl<T: MpiType> PersistentSend<'_, T> {
    /// The buffer.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::Persistent;
    /// let data = [1u16, 2, 3];
    /// let mut send = comm.send_init(&data, 0, 0); // borrowed: read-only
    /// assert_eq!(send.buffer(), &[1, 2, 3]);
    /// send.start().await?; // to itself
    /// assert_eq!(comm.recv::<[u16; 3]>(0, 0).await?.0, [1, 2, 3]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn buffer(&self) -> &[T] {
        match &self.buf {
            SendStorage::Borrowed(b) => b,
            SendStorage::Owned(v) => v,
            SendStorage::Described(_) => &[],
        }
    }
}

impl<T: MpiType> PersistentSend<'static, T> {
    /// The owned buffer, to fill between starts (a `'static` borrowed
    /// buffer is copied into an owned one first).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::Persistent;
    /// static ZEROS: [u32; 2] = [0; 2];
    /// let mut send = comm.send_init(&ZEROS, 0, 0); // to itself
    /// send.buffer_mut()[0] = 7; // copies ZEROS into an owned Vec first
    /// send.buffer_mut().push(8); // a Vec: it can grow between starts
    /// send.start().await?;
    /// assert_eq!(comm.recv_vec::<u32>(0, 0).await?.0, [7, 0, 8]);
    /// assert_eq!(ZEROS, [0, 0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn buffer_mut(&mut self) -> &mut Vec<T> {
        if !matches!(self.buf, SendStorage::Owned(_)) {
            let owned = match self.buf {
                SendStorage::Borrowed(b) => b.to_vec(),
                _ => Vec::new(),
            };
            self.buf = SendStorage::Owned(owned);
        }
        match &mut self.buf {
            SendStorage::Owned(v) => v,
            SendStorage::Borrowed(_) | SendStorage::Described(_) => unreachable!("made owned above"),
        }
    }

    /// Gives the owned buffer back.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::Persistent;
    /// let mut send = comm.send_init(vec![0u8; 4], 0, 0); // to itself
    /// send.buffer_mut().fill(9);
    /// send.start().await?;
    /// assert_eq!(comm.recv::<[u8; 4]>(0, 0).await?.0, [9; 4]);
    /// let buffer: Vec<u8> = send.into_buffer(); // done: the Vec is free to reuse
    /// assert_eq!(buffer, [9; 4]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn into_buffer(self) -> Vec<T> {
        match self.buf {
            SendStorage::Owned(v) => v,
            SendStorage::Borrowed(b) => b.to_vec(),
            SendStorage::Described(_) => Vec::new(),
        }
    }
}

impl<T: Element> Persistent for PersistentSend<'_, T> {
    fn start(&mut self) -> Request<'_> {
        let buf = &self.buf;
        self.comm.start_send(|repr| T::pack_stored(buf, repr), self.dest, self.tag, self.mode, self.comm.context)
    }
}

/// A persistent receive (`MPI_Recv_init`).
pub struct PersistentRecv<'a, T> {
    comm: Comm,
    buf: RecvStorage<'a, T>,
    source: Source,
    tag: TagSel,
}

impl<T: MpiType> PersistentRecv<'_, T> {
    /// The buffer, holding what the last completed start received (after
    /// a start dropped part way through a large message, it may hold the
    /// start of that message: see the module docs of
    /// [`comm`](crate::comm) on buffers of dropped receives).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::Persistent;
    /// let mut recv = comm.recv_init(vec![0i32; 2], 0, 3);
    /// assert_eq!(recv.buffer(), &[0, 0]); // nothing received yet
    /// comm.send(&[-1i32, 1], 0, 3).await?; // to itself
    /// recv.start().await?;
    /// assert_eq!(recv.buffer(), &[-1, 1]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn buffer(&self) -> &[T] {
        match &self.buf {
            RecvStorage::Borrowed(b) => b,
            RecvStorage::Owned(v) => v,
            RecvStorage::Described(_) => &[],
        }
    }

    /// The buffer, writable between starts.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::Persistent;
    /// let mut recv = comm.recv_init(vec![0u8; 3], 0, 0);
    /// comm.send(&[1u8, 2, 3], 0, 0).await?; // to itself
    /// recv.start().await?;
    /// recv.buffer_mut().fill(0); // clear it between starts
    /// comm.send(&[4u8], 0, 0).await?; // a shorter message
    /// recv.start().await?;
    /// assert_eq!(recv.buffer(), &[4, 0, 0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn buffer_mut(&mut self) -> &mut [T] {
        match &mut self.buf {
            RecvStorage::Borrowed(b) => b,
            RecvStorage::Owned(v) => v,
            RecvStorage::Described(_) => &mut [],
        }
    }
}

impl<T: Element> Persistent for PersistentRecv<'_, T> {
    fn start(&mut self) -> Request<'_> {
        match T::target_stored(&mut self.buf) {
            Ok(RecvTarget { limit, finish }) => self.comm.start_recv(self.source, self.tag, limit, finish),
            Err(e) => Request::completed(Err(e)),
        }
    }
}

impl Comm {
    fn persistent_send<'a, T>(&self, buf: impl Into<SendStorage<'a, T>>, dest: impl Into<Peer>, tag: i32, mode: SendMode) -> PersistentSend<'a, T> {
        PersistentSend { comm: self.clone(), buf: buf.into(), dest: dest.into(), tag, mode }
    }

    /// `MPI_Send_init`: a persistent standard send of a borrowed slice, an
    /// owned `Vec` or a [`SendBuf`] of any datatype (see [`SendStorage`]; an
    /// owned buffer is writable between starts, see the [module
    /// docs](self)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::Persistent;
    /// let mut send = comm.send_init(vec![0u32; 2], 0, 7); // to itself
    /// for step in 1..=2u32 {
    ///     send.buffer_mut().fill(step); // an owned buffer is writable between starts
    ///     send.start().await?;
    ///     assert_eq!(comm.recv::<[u32; 2]>(0, 7).await?.0, [step; 2]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn send_init<'a, T: Element>(&self, buf: impl Into<SendStorage<'a, T>>, dest: impl Into<Peer>, tag: i32) -> PersistentSend<'a, T> {
        self.persistent_send(buf, dest, tag, SendMode::Standard)
    }

    /// `MPI_Bsend_init`: as [`send_init`](Comm::send_init), buffered.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::{ErrorKind, Persistent, BSEND_OVERHEAD};
    /// let mut send = comm.bsend_init(vec![0u64; 2], 0, 0); // to itself
    /// assert!(matches!(send.start().await, Err(ref e) if matches!(e.kind(), ErrorKind::BufferExhausted { .. })), "no buffer attached");
    /// comm.buffer_attach(vec![0; 64 + BSEND_OVERHEAD])?;
    /// for step in 1..=2u64 {
    ///     send.buffer_mut().fill(step);
    ///     send.start().await?; // copied into the attached buffer: complete at once
    ///     assert_eq!(comm.recv::<[u64; 2]>(0, 0).await?.0, [step; 2]);
    /// }
    /// comm.buffer_detach().await?;
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn bsend_init<'a, T: Element>(&self, buf: impl Into<SendStorage<'a, T>>, dest: impl Into<Peer>, tag: i32) -> PersistentSend<'a, T> {
        self.persistent_send(buf, dest, tag, SendMode::Buffered)
    }

    /// `MPI_Ssend_init`: as [`send_init`](Comm::send_init), synchronous.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::Persistent;
    /// if comm.rank() == 0 {
    ///     let mut send = comm.ssend_init(vec![0u8; 2], 1, 0);
    ///     for step in 1..=2u8 {
    ///         send.buffer_mut().fill(step);
    ///         send.start().await?; // returns once rank 1's receive has matched it
    ///     }
    /// } else {
    ///     for step in 1..=2u8 {
    ///         assert_eq!(comm.recv::<[u8; 2]>(0, 0).await?.0, [step; 2]);
    ///     }
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn ssend_init<'a, T: Element>(&self, buf: impl Into<SendStorage<'a, T>>, dest: impl Into<Peer>, tag: i32) -> PersistentSend<'a, T> {
        self.persistent_send(buf, dest, tag, SendMode::Synchronous)
    }

    /// `MPI_Rsend_init`: as [`send_init`](Comm::send_init), ready mode.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::Persistent;
    /// if comm.rank() == 0 {
    ///     let mut send = comm.rsend_init(&[5i32, 6], 1, 0);
    ///     comm.recv::<u8>(1, 1).await?; // rank 1's receive is posted
    ///     send.start().await?;
    /// } else {
    ///     let recv = comm.recv::<[i32; 2]>(0, 0);
    ///     comm.send(&0u8, 0, 1).await?; // tell rank 0 it is ready
    ///     assert_eq!(recv.await?.0, [5, 6]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn rsend_init<'a, T: Element>(&self, buf: impl Into<SendStorage<'a, T>>, dest: impl Into<Peer>, tag: i32) -> PersistentSend<'a, T> {
        self.persistent_send(buf, dest, tag, SendMode::Ready)
    }

    /// `MPI_Recv_init`: a persistent receive into a borrowed slice, an
    /// owned `Vec` or a [`RecvBuf`] of any datatype (see [`RecvStorage`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::{Any, Persistent};
    /// let mut recv = comm.recv_init(vec![0i64; 3], Any, 1);
    /// for step in 0..2i64 {
    ///     let pending = recv.start();
    ///     comm.send(&[step; 3], 0, 1).await?; // to itself
    ///     let status = pending.await?;
    ///     assert_eq!((recv.buffer(), status.source), (&[step; 3][..], Some(0)));
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn recv_init<'a, T: Element>(&self, buf: impl Into<RecvStorage<'a, T>>, source: impl Into<Source>, tag: impl Into<TagSel>) -> PersistentRecv<'a, T> {
        PersistentRecv { comm: self.clone(), buf: buf.into(), source: source.into(), tag: tag.into() }
    }
}
