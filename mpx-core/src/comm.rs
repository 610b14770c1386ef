//! Communicators: MPI's point-to-point operations as async functions.
//!
//! An [`Endpoint`] is one rank's connection to the world: it owns the rank's
//! [`Engine`] behind a mutex and a [`Transport`] that carries frames to
//! peers. The transport's driver task feeds incoming frames to
//! [`Endpoint::handle_frame`], so matching and protocol replies progress
//! whether or not anyone is polling a particular operation. A [`Comm`] is a
//! communicator over an endpoint: a rank, a size and a matching context.
//!
//! # Buffers never escape to the background
//!
//! A send packs its data into an owned buffer before it returns from its
//! first poll, and a receive's data stays in engine-owned buffers until the
//! receive's own future unpacks it into the caller's memory. Nothing the
//! driver holds ever points into a caller's buffer, so dropping (or leaking)
//! a future is always sound.
//!
//! # Cancel safety
//!
//! Every operation here is cancel-safe in the sense that dropping its
//! future loses no message and leaves the engine consistent:
//! * a receive that has not matched is withdrawn;
//! * a receive whose message matched but was not yet unpacked gives the
//!   message back, at the head of the queue, ahead of every later message
//!   from any sender; a rendezvous message whose data is still in transit
//!   keeps its place the same way, and its data goes to the next receive
//!   that matches it. The one order this cannot restore: if a *later*
//!   message from the same sender was already delivered to a later receive
//!   before the first receive was dropped, the returned message now comes
//!   after it;
//! * a send whose data was handed to the engine completes in the background.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::datatype::Datatype;
use crate::engine::{Config, Delivered, Engine, Event, MatchSpec, Outgoing, ReqId, SendMode};
use crate::error::{Error, Result};
use crate::mpi_type::MpiType;
use crate::pack::{Region, RegionMut};
use crate::request::{Finish, Kind, Operation, Request};
use crate::wire::{Frame, Repr};

/// The largest user tag (`MPI_TAG_UB`). Tags are `0..=TAG_UB`.
pub const TAG_UB: i32 = i32::MAX;

/// Bytes of bookkeeping each buffered send takes from the attached buffer
/// besides its packed data (`MPI_BSEND_OVERHEAD`): size buffers as
/// `Σ (pack_size + BSEND_OVERHEAD)`.
pub const BSEND_OVERHEAD: usize = 96;

/// Carries frames between ranks. Implemented by the in-memory loopback and
/// the QUIC transport in `mpx-net`.
///
/// `send` is called with the endpoint's lock held, which keeps frames to
/// each peer in the order the engine produced them: it must not block and
/// must not call back into the endpoint. Frames that arrive are given to
/// [`Endpoint::handle_frame`] by the transport's own driver, in the order
/// the peer sent them.
pub trait Transport: Send + Sync + 'static {
    /// Queues `frame` for rank `dest` (which may be this rank). An error
    /// means the peer is unreachable; the engine then fails it.
    fn send(&self, dest: u32, frame: Frame) -> Result<()>;

    /// Hands every frame that has already arrived to `deliver`, in order,
    /// without waiting. `test` calls use it to progress where no driver
    /// task gets to run (a polling loop on a current-thread runtime).
    /// Implementations must not interleave this with their driver's
    /// deliveries (hold the inbox while delivering).
    fn progress(&self, deliver: &mut dyn FnMut(u32, Frame)) {
        let _ = deliver;
    }
}

/// Wildcard for a source rank or a tag (`MPI_ANY_SOURCE`, `MPI_ANY_TAG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Any;

/// The null process (`MPI_PROC_NULL`): sends to it and receives from it
/// complete at once and move no data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcNull;

/// `MPI_PROC_NULL`.
pub const PROC_NULL: ProcNull = ProcNull;

/// A destination: a rank or [`PROC_NULL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// A rank of the communicator.
    Rank(i64),
    /// The null process.
    Null,
}

/// A source selector: a rank, [`Any`] or [`PROC_NULL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A rank of the communicator.
    Rank(i64),
    /// Any source.
    Any,
    /// The null process.
    Null,
}

/// A tag selector: a tag or [`Any`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagSel {
    /// This tag.
    Tag(i64),
    /// Any tag.
    Any,
}

macro_rules! rank_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Dest { fn from(r: $t) -> Dest { Dest::Rank(r as i64) } }
        impl From<$t> for Source { fn from(r: $t) -> Source { Source::Rank(r as i64) } }
        impl From<$t> for TagSel { fn from(t: $t) -> TagSel { TagSel::Tag(t as i64) } }
    )*};
}
rank_from!(usize, u32, i32, i64);
impl From<ProcNull> for Dest {
    fn from(_: ProcNull) -> Dest {
        Dest::Null
    }
}
impl From<ProcNull> for Source {
    fn from(_: ProcNull) -> Source {
        Source::Null
    }
}
impl From<Any> for Source {
    fn from(_: Any) -> Source {
        Source::Any
    }
}
impl From<Any> for TagSel {
    fn from(_: Any) -> TagSel {
        TagSel::Any
    }
}

/// What a completed receive reports (`MPI_Status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The sender's rank, or `None` for the null process.
    pub source: Option<usize>,
    /// The message's tag, or `None` for the null process.
    pub tag: Option<i32>,
    /// Bytes received, in this rank's native representation. (A probe,
    /// which knows no datatype yet, reports the bytes as they travel; they
    /// differ only for external32 messages with `long` data.)
    pub bytes: u64,
    /// The receive was cancelled before it matched.
    pub cancelled: bool,
    /// The operation's error, for statuses that report a failed operation
    /// (MPI's `MPI_ERROR` field): see [`Status::from_outcome`]. Operations
    /// return `Result<Status>`, so a status they return has `None` here.
    pub error: Option<Error>,
}

impl Status {
    /// The status of an operation on the null process: no source, no tag,
    /// no data.
    pub fn empty() -> Status {
        Status { source: None, tag: None, bytes: 0, cancelled: false, error: None }
    }

    /// The status of a message from `source` with `tag` and `bytes` of data.
    pub fn of(source: u32, tag: i32, bytes: u64) -> Status {
        Status { source: Some(source as usize), tag: Some(tag), bytes, ..Status::empty() }
    }

    /// Folds an operation's outcome into one status, MPI style
    /// (`MPI_ERR_IN_STATUS`): a failure becomes an empty status whose
    /// `error` is set.
    ///
    /// ```
    /// use mpx_core::{Error, Status};
    /// let st = Status::from_outcome(Err(Error::TypeMismatch));
    /// assert_eq!(st.error, Some(Error::TypeMismatch));
    /// ```
    pub fn from_outcome(outcome: Result<Status>) -> Status {
        outcome.unwrap_or_else(|e| Status { error: Some(e), ..Status::empty() })
    }

    /// `MPI_Get_count`: whole items of `datatype` received, or `None` if a
    /// partial item arrived.
    pub fn get_count(&self, datatype: &Datatype) -> Option<u64> {
        datatype.get_count(self.bytes)
    }

    /// `MPI_Get_elements`: basic elements received.
    pub fn get_elements(&self, datatype: &Datatype) -> u64 {
        datatype.get_elements(self.bytes)
    }

    /// `MPI_Get_count` for the datatype of `T`.
    pub fn count<T: MpiType>(&self) -> Option<u64> {
        self.get_count(&T::datatype())
    }

    /// `MPI_Test_cancelled`.
    pub fn test_cancelled(&self) -> bool {
        self.cancelled
    }
}

/// A send buffer: memory, a count and a datatype.
///
/// ```
/// use mpx_core::{comm::SendBuf, Datatype, Region};
/// let m = vec![0.0f64; 16];
/// let column = Datatype::vector(4, 1, 4, &Datatype::double())?;
/// let buf = SendBuf::new(Region::of(&m), 1, &column);
/// let typed = SendBuf::typed(&[1u32, 2, 3]);
/// # Ok::<(), mpx_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SendBuf<'a> {
    region: Region<'a>,
    count: u64,
    datatype: Datatype,
}

impl<'a> SendBuf<'a> {
    /// `count` items of `datatype` in `region`.
    pub fn new(region: Region<'a>, count: u64, datatype: &Datatype) -> SendBuf<'a> {
        SendBuf { region, count, datatype: datatype.clone() }
    }

    /// A typed slice with its own datatype.
    pub fn typed<T: MpiType>(values: &'a [T]) -> SendBuf<'a> {
        SendBuf { region: Region::typed(values), count: values.len() as u64, datatype: T::datatype() }
    }

    /// `count` items of a derived `datatype` laid over a typed slice (every
    /// other element, a field of each struct, ...). The datatype may only
    /// touch bytes that hold `T`'s data, never padding: that is checked
    /// here, element by element, and a violation is
    /// [`Error::InvalidDatatype`]. For plain-old-data types
    /// `SendBuf::new(Region::of(..), ..)` needs no check.
    ///
    /// ```
    /// use mpx_core::{comm::SendBuf, Datatype, MpiType};
    /// let pairs = [[1u32, 2], [3, 4], [5, 6]];
    /// // The first u32 of each pair.
    /// let firsts = Datatype::vector(3, 1, 2, &u32::datatype())?;
    /// SendBuf::typed_with(&pairs, 1, &firsts)?;
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn typed_with<T: MpiType>(values: &'a [T], count: u64, datatype: &Datatype) -> Result<SendBuf<'a>> {
        check_typemap_bytes::<T>(values.len(), count, datatype)?;
        Ok(SendBuf { region: Region::typed(values), count, datatype: datatype.clone() })
    }

    /// Data made with the pack API, sent as `packed` (it carries no type
    /// signature and can be received with any type).
    pub fn packed(bytes: &'a [u8]) -> SendBuf<'a> {
        SendBuf { region: Region::new(bytes), count: bytes.len() as u64, datatype: Datatype::packed() }
    }

    /// Packs the buffer in `repr` (`packed` data always travels as it is);
    /// returns the data, its representation and its signature.
    fn pack(&self, repr: Repr) -> Result<Packed> {
        if self.datatype.is_packed() {
            return Ok((Bytes::from(self.datatype.pack_to_vec(self.region, self.count)?), Repr::Native, None));
        }
        let data = match repr {
            Repr::Native => self.datatype.pack_to_vec(self.region, self.count)?,
            Repr::External32 => {
                let mut out = vec![0u8; self.datatype.pack_external_size(self.count)?];
                self.datatype.pack_external(self.region, self.count, &mut out, &mut 0)?;
                out
            }
        };
        let s = self.datatype.signature().repeat(self.count);
        Ok((Bytes::from(data), repr, Some((s.hash(), s.len()))))
    }
}

/// Packed message data: bytes, their representation, their signature.
type Packed = (Bytes, Repr, Option<(u64, u64)>);

/// A receive buffer: memory, a count and a datatype.
#[derive(Debug)]
pub struct RecvBuf<'a> {
    region: RegionMut<'a>,
    count: u64,
    datatype: Datatype,
}

impl<'a> RecvBuf<'a> {
    /// Room for `count` items of `datatype` in `region`.
    pub fn new(region: RegionMut<'a>, count: u64, datatype: &Datatype) -> RecvBuf<'a> {
        RecvBuf { region, count, datatype: datatype.clone() }
    }

    /// Room for `count` items of a derived `datatype` laid over a typed
    /// slice. As for [`SendBuf::typed_with`], the datatype may only touch
    /// bytes of `T`'s data; and `T` must accept every bit pattern there
    /// (no `bool`, `char`, enums, ...), since values written through another
    /// datatype are not validated.
    pub fn typed_with<T: MpiType>(values: &'a mut [T], count: u64, datatype: &Datatype) -> Result<RecvBuf<'a>> {
        if T::NEEDS_VALIDATION {
            return Err(Error::InvalidDatatype(format!(
                "{} has invalid bit patterns: receive it with its own datatype",
                std::any::type_name::<T>()
            )));
        }
        check_typemap_bytes::<T>(values.len(), count, datatype)?;
        // SAFETY: every byte the datatype writes holds data of `T`, where
        // any bit pattern is valid (checked above).
        let view = unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<std::mem::MaybeUninit<T>>(), values.len()) };
        Ok(RecvBuf { region: RegionMut::typed(view), count, datatype: datatype.clone() })
    }

    fn check(&self) -> Result<()> {
        self.region.check(&self.datatype, self.count)
    }

    /// Room for `bytes.len()` bytes of `packed` data: receives any message
    /// as packed bytes, to unpack later with the pack API.
    pub fn packed(bytes: &'a mut [u8]) -> RecvBuf<'a> {
        let count = bytes.len() as u64;
        RecvBuf { region: RegionMut::new(bytes), count, datatype: Datatype::packed() }
    }
}

/// Checks that `count` items of `datatype` over `len` values of `T` touch
/// only bytes that belong to `T`'s own typemap (never padding), and stay in
/// the slice. Walks every element: its cost follows the data size.
fn check_typemap_bytes<T: MpiType>(len: usize, count: u64, datatype: &Datatype) -> Result<()> {
    let size = std::mem::size_of::<T>();
    crate::pack::check_span(datatype, count, 0, len * size)?;
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
    for i in 0..count as i128 {
        let bad = datatype.for_each_entry(|b, disp| {
            let start = disp as i128 + i * extent;
            match (0..b.size() as i128).find(|k| !data_bytes[((start + k) % size as i128) as usize]) {
                Some(k) => std::ops::ControlFlow::Break(start + k),
                None => std::ops::ControlFlow::Continue(()),
            }
        });
        if let Some(offset) = bad {
            return Err(Error::InvalidDatatype(format!(
                "the datatype touches byte {offset} of the slice, which is padding of {}",
                std::any::type_name::<T>()
            )));
        }
    }
    Ok(())
}

/// Checks a delivered message against a receive of `count` items of
/// `datatype` (truncation, type signature) and unpacks it into `region`.
fn deliver_into(msg: &Delivered, datatype: &Datatype, count: u64, region: RegionMut<'_>) -> Result<Status> {
    let env = &msg.envelope;
    let capacity = if env.repr == Repr::External32 {
        datatype.pack_external_size(count)?
    } else {
        datatype.pack_size(count)?
    };
    if msg.data.len() > capacity {
        return Err(Error::Truncate { needed: msg.data.len() as u64, available: capacity as u64 });
    }
    if let Some((hash, elements)) = env.signature {
        if !datatype.is_packed() {
            match datatype.signature_prefix(count, elements) {
                Some(prefix) if prefix.hash() == hash => {}
                _ => return Err(Error::TypeMismatch),
            }
        }
    }
    datatype.unpack_message(&msg.data, env.repr, region, count)?;
    let mut status = status_of(msg);
    if env.repr == Repr::External32 && datatype.external32_size() > 0 {
        // The status counts what landed in the buffer: whole items of the
        // native representation (unpack_message checked they are whole).
        status.bytes = msg.data.len() as u64 / datatype.external32_size() * datatype.size();
    }
    Ok(status)
}

/// Unpacks a delivered message into a typed slice, validating values first.
fn unpack_typed_message<T: MpiType>(msg: &Delivered, buf: &mut [T]) -> Result<Status> {
    let count = buf.len() as u64;
    let mut status = None;
    crate::pack::unpack_typed(buf, |region| {
        status = Some(deliver_into(msg, &T::datatype(), count, region)?);
        Ok(())
    })?;
    Ok(status.expect("set on success"))
}

/// A `Vec` whose element type is contiguous (no padding), viewed as the
/// bytes of a message.
struct ContiguousVec<T>(Vec<T>);

impl<T: MpiType> AsRef<[u8]> for ContiguousVec<T> {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: only built for types whose datatype is contiguous: every
        // byte of every value is a typemap byte, hence initialised.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), std::mem::size_of_val(&self.0[..])) }
    }
}

/// A failed receive into an owned buffer: the buffer comes back with the error.
#[derive(Debug)]
pub struct RecvError<B> {
    /// The buffer the receive was given.
    pub buffer: B,
    /// What went wrong.
    pub error: Error,
}

impl<B: std::fmt::Debug> std::fmt::Display for RecvError<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl<B: std::fmt::Debug> std::error::Error for RecvError<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// A posted receive that resolves to the delivered message itself.
pub(crate) struct RawRecv {
    shared: Arc<Shared>,
    id: ReqId,
    finished: bool,
}

impl RawRecv {
    fn new(shared: Arc<Shared>, id: ReqId) -> RawRecv {
        RawRecv { shared, id, finished: false }
    }

    /// Unposts the receive if it has not matched; then it is finished.
    fn cancel(&mut self) -> bool {
        let cancelled = self.shared.lock().engine.cancel_recv(self.id);
        self.finished |= cancelled;
        cancelled
    }
}

impl Future for RawRecv {
    type Output = Result<Delivered>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Delivered>> {
        let completion = std::task::ready!(self.shared.poll_done(self.id, cx));
        self.finished = true;
        Poll::Ready(match completion {
            Completion::Recv(r) => r,
            Completion::Cancelled => Err(Error::Cancelled),
            Completion::Send(_) => unreachable!("a receive completes as a receive"),
        })
    }
}

impl Drop for RawRecv {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.withdraw(self.id);
        }
    }
}

/// A receive into an owned buffer ([`Comm::irecv_vec`],
/// [`Comm::irecv_bytes`]): a `'static` future resolving to the buffer and
/// the status, or to the buffer and the error ([`RecvError`]). It is also an
/// [`Operation`], so it works with the completion functions and
/// [`RequestSet`](crate::RequestSet).
#[must_use = "a receive does nothing unless awaited; dropping it withdraws it"]
pub struct OwnedRecv<B> {
    state: OwnedState<B>,
    finish: fn(&mut B, Delivered) -> Result<Status>,
}

enum OwnedState<B> {
    Active(RawRecv, B),
    Complete(Option<std::result::Result<(B, Status), RecvError<B>>>),
}

impl<B> std::fmt::Debug for OwnedRecv<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_complete() { "OwnedRecv(complete)" } else { "OwnedRecv(active)" })
    }
}

impl<B> OwnedRecv<B> {
    fn start(comm: &Comm, buffer: B, source: Source, tag: TagSel, finish: fn(&mut B, Delivered) -> Result<Status>) -> OwnedRecv<B> {
        let state = match comm.post_recv(source, tag, comm.context) {
            Ok(Some(id)) => OwnedState::Active(RawRecv::new(comm.shared.clone(), id), buffer),
            Ok(None) => OwnedState::Complete(Some(Ok((buffer, Status::empty())))),
            Err(error) => OwnedState::Complete(Some(Err(RecvError { buffer, error }))),
        };
        OwnedRecv { state, finish }
    }

    fn is_complete(&self) -> bool {
        matches!(self.state, OwnedState::Complete(_))
    }

    /// `MPI_Cancel`: withdraws the receive if it has not matched; it then
    /// completes with the buffer and a status whose
    /// [`Status::test_cancelled`] is true. Returns whether it was cancelled.
    pub fn cancel(&mut self) -> bool {
        let OwnedState::Active(raw, _) = &mut self.state else { return false };
        if !raw.cancel() {
            return false;
        }
        let OwnedState::Active(raw, buffer) = std::mem::replace(&mut self.state, OwnedState::Complete(None)) else {
            unreachable!("checked above")
        };
        drop(raw);
        self.state = OwnedState::Complete(Some(Ok((buffer, Status { cancelled: true, ..Status::empty() }))));
        true
    }
}

impl<B: Unpin> Operation for OwnedRecv<B> {
    type Output = std::result::Result<(B, Status), RecvError<B>>;

    fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let OwnedState::Active(raw, _) = &mut self.state else { return Poll::Ready(()) };
        let outcome = std::task::ready!(Pin::new(raw).poll(cx));
        let OwnedState::Active(_, mut buffer) = std::mem::replace(&mut self.state, OwnedState::Complete(None)) else {
            unreachable!("checked above")
        };
        let result = outcome.and_then(|msg| (self.finish)(&mut buffer, msg));
        self.state = OwnedState::Complete(Some(match result {
            Ok(status) => Ok((buffer, status)),
            Err(error) => Err(RecvError { buffer, error }),
        }));
        Poll::Ready(())
    }

    fn is_complete(&self) -> bool {
        OwnedRecv::is_complete(self)
    }

    fn take_output(&mut self) -> Self::Output {
        match &mut self.state {
            OwnedState::Complete(out) => out.take().expect("the outcome of an owned receive is taken once"),
            OwnedState::Active(..) => panic!("take_output on an active receive"),
        }
    }

    fn progress(&self) -> Option<usize> {
        match &self.state {
            OwnedState::Active(raw, _) => {
                raw.shared.progress();
                Some(Arc::as_ptr(&raw.shared) as usize)
            }
            OwnedState::Complete(_) => None,
        }
    }
}

impl<B: Unpin> Future for OwnedRecv<B> {
    type Output = std::result::Result<(B, Status), RecvError<B>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        std::task::ready!(self.poll_complete(cx));
        Poll::Ready(self.take_output())
    }
}

fn status_of(msg: &Delivered) -> Status {
    Status::of(msg.envelope.source, msg.envelope.tag, msg.data.len() as u64)
}

// ----- the endpoint -----------------------------------------------------------

pub(crate) enum Completion {
    Send(Result<()>),
    Recv(Result<Delivered>),
    /// A receive withdrawn by `MPI_Cancel`.
    Cancelled,
}

/// State of the attached buffer for buffered sends.
#[derive(Default)]
struct BsendBuffer {
    attached: Option<Vec<u8>>,
    used: usize,
    /// Buffered sends in flight: request id -> bytes they hold.
    in_flight: HashMap<ReqId, usize>,
    detach_waiters: Vec<Waker>,
}

pub(crate) struct State {
    pub(crate) engine: Engine,
    pub(crate) done: HashMap<ReqId, Completion>,
    pub(crate) wakers: HashMap<ReqId, Waker>,
    /// Sends whose requests were dropped or freed before completing: their
    /// completions are discarded (failures are traced).
    abandoned: HashSet<ReqId>,
    /// Woken whenever a data frame arrives (probe).
    arrival_wakers: Vec<Waker>,
    /// Wakers to call once the lock is released (see [`Locked`]).
    to_wake: Vec<Waker>,
    bsend: BsendBuffer,
}

pub(crate) struct Shared {
    rank: u32,
    /// The representation this rank sends typed data in.
    repr: Repr,
    size: u32,
    transport: Box<dyn Transport>,
    state: Mutex<State>,
}

/// One rank's connection to the world; see the [module docs](self).
#[derive(Clone)]
pub struct Endpoint {
    shared: Arc<Shared>,
}

/// A weak handle on an [`Endpoint`], for transports that must reach
/// endpoints without keeping them alive.
#[derive(Clone)]
pub struct WeakEndpoint {
    shared: std::sync::Weak<Shared>,
}

impl WeakEndpoint {
    /// The endpoint, if it still exists.
    pub fn upgrade(&self) -> Option<Endpoint> {
        self.shared.upgrade().map(|shared| Endpoint { shared })
    }
}

impl Endpoint {
    /// An endpoint for `rank` of `size` ranks over `transport`.
    pub fn new(rank: u32, size: u32, config: Config, transport: impl Transport) -> Endpoint {
        let state = State {
            engine: Engine::new(rank, size, config),
            done: HashMap::new(),
            wakers: HashMap::new(),
            abandoned: HashSet::new(),
            arrival_wakers: Vec::new(),
            to_wake: Vec::new(),
            bsend: BsendBuffer::default(),
        };
        Endpoint {
            shared: Arc::new(Shared {
                rank,
                repr: config.repr,
                size,
                transport: Box::new(transport),
                state: Mutex::new(state),
            }),
        }
    }

    /// A weak handle on this endpoint.
    pub fn downgrade(&self) -> WeakEndpoint {
        WeakEndpoint { shared: Arc::downgrade(&self.shared) }
    }

    /// The world communicator over this endpoint.
    pub fn world(&self) -> Comm {
        Comm { shared: self.shared.clone(), context: WORLD_CONTEXT, dups: Arc::new(AtomicU64::new(0)) }
    }

    /// Gives a frame from rank `from` to the engine. A frame that breaks
    /// the protocol fails that peer.
    pub fn handle_frame(&self, from: u32, frame: Frame) {
        self.shared.deliver(from, frame);
    }

    /// The transport lost rank `rank`: everything that depends on it fails.
    pub fn peer_failed(&self, rank: u32, reason: &str) {
        let mut st = self.shared.lock();
        st.engine.fail_peer(rank, reason);
        st.wake_probes();
        self.shared.flush(&mut st);
    }

    /// Ends this rank's part: waits for buffered sends to be delivered, then
    /// tells every peer this rank will post no more receives.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping it before completion sends no farewell.
    pub async fn finalize(&self) {
        let mut st = std::future::poll_fn(|cx| self.shared.poll_bsend_drained(cx)).await;
        st.engine.farewell();
        self.shared.flush(&mut st);
    }

    /// Tells every peer at once that this rank will post no more receives
    /// (what [`finalize`](Endpoint::finalize) does after its wait).
    pub fn farewell(&self) {
        let mut st = self.shared.lock();
        st.engine.farewell();
        self.shared.flush(&mut st);
    }
}

const WORLD_CONTEXT: u64 = 0;

/// The endpoint's state, locked. Wakers queued in `to_wake` while it is
/// held run after the lock is released, so a waker that calls back into
/// mpx (a custom `Wake`, an executor that polls inline) cannot deadlock.
pub(crate) struct Locked<'a> {
    guard: Option<MutexGuard<'a, State>>,
}

impl Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.guard.as_ref().expect("held until drop")
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.guard.as_mut().expect("held until drop")
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let wakers = self.guard.as_mut().map(|g| std::mem::take(&mut g.to_wake)).unwrap_or_default();
        drop(self.guard.take());
        for w in wakers {
            w.wake();
        }
    }
}

impl State {
    /// Probes wait for messages to appear in the queue: wake them.
    fn wake_probes(&mut self) {
        let probes = std::mem::take(&mut self.arrival_wakers);
        self.to_wake.extend(probes);
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> Locked<'_> {
        // A panic while holding the lock cannot leave the engine half-updated
        // in a way that matters more than the panic itself.
        Locked { guard: Some(self.state.lock().unwrap_or_else(|e| e.into_inner())) }
    }

    /// Hands queued frames to the transport and dispatches completions.
    pub(crate) fn flush(&self, st: &mut State) {
        loop {
            let mut progressed = false;
            while let Some((dest, frame)) = st.engine.poll_transmit() {
                progressed = true;
                if let Err(e) = self.transport.send(dest, frame) {
                    st.engine.fail_peer(dest, &e.to_string());
                }
            }
            while let Some(ev) = st.engine.poll_event() {
                progressed = true;
                let (id, completion) = match ev {
                    Event::SendDone { id, result } => (id, Completion::Send(result)),
                    Event::RecvDone { id, result } => (id, Completion::Recv(result)),
                };
                self.complete(st, id, completion);
            }
            if !progressed {
                break;
            }
        }
    }

    /// Takes request `id`'s completion, or registers `cx`'s waker for it.
    /// A receive's message counts as consumed once taken here: its eager
    /// credit goes back to the sender.
    pub(crate) fn poll_done(&self, id: ReqId, cx: &mut Context<'_>) -> Poll<Completion> {
        let mut st = self.lock();
        match st.done.remove(&id) {
            Some(c) => {
                if let Completion::Recv(Ok(msg)) = &c {
                    if msg.credit > 0 {
                        st.engine.release_credit(msg.envelope.source, msg.credit);
                        self.flush(&mut st);
                    }
                }
                Poll::Ready(c)
            }
            None => {
                st.wakers.insert(id, cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// Processes frames that have already arrived (see [`Transport::progress`]).
    pub(crate) fn progress(&self) {
        self.transport.progress(&mut |from, frame| self.deliver(from, frame));
    }

    fn deliver(&self, from: u32, frame: Frame) {
        let mut st = self.lock();
        if let Err(e) = st.engine.handle_frame(from, frame) {
            st.engine.fail_peer(from, &e.to_string());
        }
        st.wake_probes();
        self.flush(&mut st);
    }

    /// The request `id` was dropped before completing: a receive is
    /// withdrawn or, if it matched, its message goes back to the head of
    /// the queue; a send completes in the background.
    pub(crate) fn withdraw(&self, id: ReqId) {
        let mut st = self.lock();
        st.wakers.remove(&id);
        match st.done.remove(&id) {
            Some(Completion::Recv(Ok(msg))) => {
                st.engine.requeue(msg);
                st.wake_probes();
                self.flush(&mut st);
            }
            Some(Completion::Send(Err(e))) => {
                tracing::warn!(rank = self.rank, id, error = %e, "dropped or freed send failed");
            }
            Some(_) => {}
            None => {
                if st.engine.withdraw_recv(id) {
                    st.wake_probes();
                    self.flush(&mut st);
                } else {
                    // A send still in flight: it completes in the background.
                    st.abandoned.insert(id);
                }
            }
        }
    }

    fn complete(&self, st: &mut State, id: ReqId, completion: Completion) {
        if let Some(bytes) = st.bsend.in_flight.remove(&id) {
            st.bsend.used -= bytes;
            if let Completion::Send(Err(e)) = &completion {
                tracing::error!(rank = self.rank, id, error = %e, "buffered send failed");
            }
            let waiters = std::mem::take(&mut st.bsend.detach_waiters);
            st.to_wake.extend(waiters);
            return;
        }
        if st.abandoned.remove(&id) {
            if let Completion::Send(Err(e)) = completion {
                tracing::warn!(rank = self.rank, id, error = %e, "dropped or freed send failed");
            }
            return;
        }
        tracing::trace!(rank = self.rank, id, "completed");
        st.done.insert(id, completion);
        if let Some(w) = st.wakers.remove(&id) {
            st.to_wake.push(w);
        }
    }
}

impl Shared {
    /// Ready, with the state still locked, once no buffered send is in
    /// flight: what follows (detaching, saying farewell) happens under the
    /// same lock, so no buffered send can slip in between.
    fn poll_bsend_drained(&self, cx: &mut Context<'_>) -> Poll<Locked<'_>> {
        let mut st = self.lock();
        if st.bsend.in_flight.is_empty() {
            Poll::Ready(st)
        } else {
            st.bsend.detach_waiters.push(cx.waker().clone());
            Poll::Pending
        }
    }
}

// ----- the communicator ---------------------------------------------------------

/// A communicator: a group of ranks and a matching context of its own.
///
/// Messages sent on one communicator are received only on that communicator
/// (or a handle to it), so a library can [`dup`](Comm::dup) the world and
/// never see the application's messages.
///
/// Operations take destinations and sources as plain numbers, [`Any`] or
/// [`PROC_NULL`], and tags as numbers or [`Any`].
#[derive(Clone)]
pub struct Comm {
    shared: Arc<Shared>,
    context: u64,
    dups: Arc<AtomicU64>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Comm(rank {} of {}, context {:#x})", self.rank(), self.size(), self.context)
    }
}

/// Mixes `parent` and `n` into a new context id (even: odd ids are the
/// collective contexts of their even neighbours).
fn derive_context(parent: u64, n: u64) -> u64 {
    let mut x = parent ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xd1b5_4a32_d192_ed03;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) & !1
}

impl Comm {
    /// This rank's number in the communicator.
    pub fn rank(&self) -> usize {
        self.shared.rank as usize
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.shared.size as usize
    }

    /// `MPI_Comm_dup`: the same ranks with a new matching context. Every
    /// rank must call `dup` on the communicator the same number of times in
    /// the same order (as in MPI, it is collective), which is what makes the
    /// new context agree everywhere without messages.
    pub fn dup(&self) -> Comm {
        let n = self.dups.fetch_add(1, Ordering::Relaxed);
        Comm { shared: self.shared.clone(), context: derive_context(self.context, n), dups: Arc::new(AtomicU64::new(0)) }
    }

    fn check_rank(&self, r: i64) -> Result<u32> {
        if r < 0 || r >= self.size() as i64 {
            return Err(Error::InvalidRank { rank: r, size: self.shared.size });
        }
        Ok(r as u32)
    }

    fn dest(&self, d: impl Into<Dest>) -> Result<Option<u32>> {
        match d.into() {
            Dest::Rank(r) => self.check_rank(r).map(Some),
            Dest::Null => Ok(None),
        }
    }

    fn tag(t: impl Into<TagSel>) -> Result<Option<i32>> {
        match t.into() {
            TagSel::Tag(t) if (0..=TAG_UB as i64).contains(&t) => Ok(Some(t as i32)),
            TagSel::Tag(t) => Err(Error::InvalidTag(t)),
            TagSel::Any => Ok(None),
        }
    }

    /// Resolves a source and tag into a match spec, or `None` for PROC_NULL.
    fn spec(&self, source: impl Into<Source>, tag: impl Into<TagSel>, context: u64) -> Result<Option<MatchSpec>> {
        let tag = Comm::tag(tag)?;
        let source = match source.into() {
            Source::Rank(r) => Some(self.check_rank(r)?),
            Source::Any => None,
            Source::Null => return Ok(None),
        };
        Ok(Some(MatchSpec { context, source, tag }))
    }

    /// Diagnostics: messages that have arrived at this rank and wait
    /// unmatched (over all communicators), and their data bytes. Eager data
    /// from each sender is bounded by the engine's credit.
    pub fn queued(&self) -> (usize, u64) {
        let st = self.shared.lock();
        (st.engine.unexpected_len(), st.engine.unexpected_bytes())
    }

    // ----- sends ------------------------------------------------------------------

    /// Packs `data` (or takes it as is) and posts it: the start of every send.
    fn start_send<'a>(&self, data: Result<Packed>, dest: Dest, tag: i32, mode: SendMode, context: u64) -> Request<'a> {
        let posted = (|| {
            let tag = Comm::tag(tag)?.expect("a concrete tag");
            let Some(dest) = self.dest(dest)? else { return Ok(None) };
            let (data, repr, signature) = data?;
            let mut st = self.shared.lock();
            let id = st.engine.next_id();
            if mode == SendMode::Buffered {
                let need = data.len() + BSEND_OVERHEAD;
                let b = &mut st.bsend;
                let capacity = b.attached.as_ref().map_or(0, Vec::len);
                if b.used + need > capacity {
                    let available = capacity.saturating_sub(b.used) as u64;
                    return Err(Error::BufferExhausted { needed: need as u64, available });
                }
                b.used += need;
                b.in_flight.insert(id, need);
            }
            let msg = Outgoing { dest, context, tag, signature, repr, data };
            st.engine.post_send(id, mode, msg);
            self.shared.flush(&mut st);
            Ok((mode != SendMode::Buffered).then_some(id))
        })();
        match posted {
            Ok(Some(id)) => Request::active(self.shared.clone(), id, Kind::Send),
            Ok(None) => Request::completed(Ok(Status::empty())),
            Err(e) => Request::completed(Err(e)),
        }
    }

    pub(crate) fn start_send_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32, mode: SendMode) -> Request<'a> {
        self.start_send(buf.pack(self.shared.repr), dest.into(), tag, mode, self.context)
    }

    /// `MPI_Isend` of a typed slice: starts a standard-mode send now and
    /// returns its request. The slice stays borrowed until the request
    /// completes, as MPI requires, though mpx has already copied the data.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx_core::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// let other = 1 - comm.rank();
    /// let (outbox, mut inbox) = ([comm.rank() as u64; 3], [0u64; 3]);
    /// let recv = comm.irecv(&mut inbox, other, 0); // posted now
    /// let send = comm.isend(&outbox, other, 0);
    /// send.await?;
    /// recv.await?;
    /// assert_eq!(inbox, [other as u64; 3]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the request lets the send complete in the background.
    pub fn isend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(SendBuf::typed(buf), dest, tag, SendMode::Standard)
    }

    /// `MPI_Isend` of any buffer (a derived datatype, packed bytes).
    ///
    /// # Cancel safety
    /// As [`isend`](Comm::isend).
    pub fn isend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(buf, dest, tag, SendMode::Standard)
    }

    /// `MPI_Ibsend`: copies the data into the attached buffer; the request is
    /// complete at once (or failed with [`Error::BufferExhausted`]).
    ///
    /// # Cancel safety
    /// The request is complete when returned; dropping it changes nothing.
    pub fn ibsend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(SendBuf::typed(buf), dest, tag, SendMode::Buffered)
    }

    /// `MPI_Ibsend` of any buffer.
    ///
    /// # Cancel safety
    /// As [`ibsend`](Comm::ibsend).
    pub fn ibsend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(buf, dest, tag, SendMode::Buffered)
    }

    /// `MPI_Issend`: completes once a matching receive has started, even if
    /// its owner has not waited on it yet.
    ///
    /// # Cancel safety
    /// Dropping the request lets the send complete in the background.
    pub fn issend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(SendBuf::typed(buf), dest, tag, SendMode::Synchronous)
    }

    /// `MPI_Issend` of any buffer.
    ///
    /// # Cancel safety
    /// As [`issend`](Comm::issend).
    pub fn issend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(buf, dest, tag, SendMode::Synchronous)
    }

    /// `MPI_Irsend`: fails with [`Error::NotReady`] if no matching receive
    /// was posted when the message arrived.
    ///
    /// # Cancel safety
    /// Dropping the request lets the send complete in the background; a
    /// failure is then reported through `tracing`.
    pub fn irsend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(SendBuf::typed(buf), dest, tag, SendMode::Ready)
    }

    /// `MPI_Irsend` of any buffer.
    ///
    /// # Cancel safety
    /// As [`irsend`](Comm::irsend).
    pub fn irsend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(buf, dest, tag, SendMode::Ready)
    }

    /// A standard send of an owned `Vec`, as a `'static` request that can be
    /// spawned. When `T`'s datatype is contiguous (no padding) the vector
    /// becomes the message without a copy.
    ///
    /// # Cancel safety
    /// As [`isend`](Comm::isend).
    pub fn isend_vec<T: MpiType>(&self, buf: Vec<T>, dest: impl Into<Dest>, tag: i32) -> Request<'static> {
        let datatype = T::datatype();
        let data = if datatype.is_contiguous() && self.shared.repr == Repr::Native {
            let signature = datatype.signature().repeat(buf.len() as u64);
            Ok((Bytes::from_owner(ContiguousVec(buf)), Repr::Native, Some((signature.hash(), signature.len()))))
        } else {
            SendBuf::typed(&buf).pack(self.shared.repr)
        };
        self.start_send(data, dest.into(), tag, SendMode::Standard, self.context)
    }

    /// A standard send of owned `packed` bytes, without a copy, as a
    /// `'static` request. The message carries no type signature: receive it
    /// with any type.
    ///
    /// # Cancel safety
    /// As [`isend`](Comm::isend).
    pub fn isend_bytes(&self, data: Bytes, dest: impl Into<Dest>, tag: i32) -> Request<'static> {
        self.start_send(Ok((data, Repr::Native, None)), dest.into(), tag, SendMode::Standard, self.context)
    }

    /// `MPI_Send` of a typed slice: a standard-mode send. It may complete as
    /// soon as the data is buffered at the receiver, or wait for a matching
    /// receive when the receiver's budget for unexpected data from this rank
    /// is spent (which throttles a producer that outpaces its consumer).
    ///
    /// # Cancel safety
    /// Like every operation, the send starts when `send` is called, before
    /// the future is first polled: dropping the future at any point lets the
    /// send complete in the background.
    pub fn send<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.isend(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Send` of any buffer (a derived datatype, packed bytes).
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send).
    pub fn send_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.isend_buf(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Bsend`: copies the data into the attached buffer and returns at
    /// once. A send that does not fit (or with no buffer attached) is
    /// [`Error::BufferExhausted`] and sends nothing.
    ///
    /// # Cancel safety
    /// Completes on its first poll.
    pub fn bsend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.ibsend(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Bsend` of any buffer.
    ///
    /// # Cancel safety
    /// Completes on its first poll.
    pub fn bsend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.ibsend_buf(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Ssend`: completes only once a matching receive has started.
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send): a dropped synchronous send is still matched
    /// and delivered.
    pub fn ssend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.issend(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Ssend` of any buffer.
    ///
    /// # Cancel safety
    /// As [`ssend`](Comm::ssend).
    pub fn ssend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.issend_buf(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Rsend`: valid only if the matching receive is already posted.
    /// If it is not, the message is not delivered and the result is
    /// [`Error::NotReady`] (MPI leaves this undefined; mpx reports it).
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send).
    pub fn rsend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.irsend(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Rsend` of any buffer.
    ///
    /// # Cancel safety
    /// As [`rsend`](Comm::rsend).
    pub fn rsend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.irsend_buf(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    // ----- receives ----------------------------------------------------------------

    /// Posts a receive now; `Ok(None)` for the null process.
    fn post_recv(&self, source: impl Into<Source>, tag: impl Into<TagSel>, context: u64) -> Result<Option<ReqId>> {
        let Some(spec) = self.spec(source, tag, context)? else { return Ok(None) };
        let mut st = self.shared.lock();
        let id = st.engine.next_id();
        st.engine.post_recv(id, spec);
        self.shared.flush(&mut st);
        Ok(Some(id))
    }

    fn start_recv<'a>(&self, source: impl Into<Source>, tag: impl Into<TagSel>, finish: Finish<'a>) -> Request<'a> {
        match self.post_recv(source, tag, self.context) {
            Ok(Some(id)) => Request::active(self.shared.clone(), id, Kind::Recv(finish)),
            Ok(None) => Request::completed(Ok(Status::empty())),
            Err(e) => Request::completed(Err(e)),
        }
    }

    /// `MPI_Irecv` into a typed slice: posts the receive now (a message that
    /// arrives before anyone polls the request still matches it) and
    /// returns its request. The slice stays mutably borrowed until the
    /// request completes; the data is written into it only when the request
    /// is polled, never by a background task. A longer message is
    /// [`Error::Truncate`], a message of another type
    /// [`Error::TypeMismatch`], and values invalid for `T` are
    /// [`Error::InvalidValue`]; in each case the slice is left unchanged.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the request withdraws the receive, or gives its
    /// message back to the head of the queue (see the [module docs](self)).
    pub fn irecv<'a, T: MpiType>(&self, buf: &'a mut [T], source: impl Into<Source>, tag: impl Into<TagSel>) -> Request<'a> {
        self.start_recv(source, tag, Box::new(move |msg| unpack_typed_message(&msg, buf)))
    }

    /// `MPI_Irecv` into any buffer (a derived datatype, or packed bytes with
    /// [`RecvBuf::packed`]).
    ///
    /// # Cancel safety
    /// As [`irecv`](Comm::irecv).
    pub fn irecv_buf<'a>(&self, buf: RecvBuf<'a>, source: impl Into<Source>, tag: impl Into<TagSel>) -> Request<'a> {
        // A buffer that cannot hold `count` items fails before the receive
        // is posted, so no message is consumed by it.
        if let Err(e) = buf.check() {
            return Request::completed(Err(e));
        }
        self.start_recv(source, tag, Box::new(move |msg| deliver_into(&msg, &buf.datatype, buf.count, buf.region)))
    }

    /// A receive into an owned `Vec` (room for `buf.len()` values), as a
    /// `'static` future that can be spawned. It resolves to the vector and
    /// the status; on failure the vector comes back with the error.
    ///
    /// # Cancel safety
    /// As [`irecv`](Comm::irecv).
    pub fn irecv_vec<T: MpiType>(&self, buf: Vec<T>, source: impl Into<Source>, tag: impl Into<TagSel>) -> OwnedRecv<Vec<T>> {
        OwnedRecv::start(self, buf, source.into(), tag.into(), |buf, msg| unpack_typed_message(&msg, buf))
    }

    /// A receive of a message of any length as owned bytes, taken from the
    /// transport without a copy (`packed`: no type check), as a `'static`
    /// future.
    ///
    /// # Cancel safety
    /// As [`irecv`](Comm::irecv).
    pub fn irecv_bytes(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> OwnedRecv<Bytes> {
        OwnedRecv::start(self, Bytes::new(), source.into(), tag.into(), |buf, msg| {
            let status = status_of(&msg);
            *buf = msg.data;
            Ok(status)
        })
    }

    /// `MPI_Recv` into a typed slice: receives up to `buf.len()` values from
    /// `source` (a rank, [`Any`] or [`PROC_NULL`]) with `tag` (or [`Any`]).
    /// Errors as for [`irecv`](Comm::irecv), of which this is the blocking
    /// spelling: the receive is posted when called.
    ///
    /// # Cancel safety
    /// Cancel-safe: if the future is dropped, the receive is withdrawn, or
    /// its message, if one had matched, is given back (see the
    /// [module docs](self)).
    pub fn recv_into<'a, T: MpiType>(&self, buf: &'a mut [T], source: impl Into<Source>, tag: impl Into<TagSel>) -> Request<'a> {
        self.irecv(buf, source, tag)
    }

    /// `MPI_Recv` of a message of any length into a new `Vec`.
    ///
    /// # Cancel safety
    /// As [`recv_into`](Comm::recv_into).
    pub fn recv<T: MpiType + Default>(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> impl Future<Output = Result<(Vec<T>, Status)>> + Send + 'static {
        let posted = self.post_recv(source, tag, self.context).map(|id| id.map(|id| RawRecv::new(self.shared.clone(), id)));
        async move {
            let Some(raw) = posted? else { return Ok((Vec::new(), Status::empty())) };
            let msg = raw.await?;
            let size = match msg.envelope.repr {
                Repr::Native => T::datatype().size(),
                Repr::External32 => T::datatype().external32_size(),
            }
            .max(1) as usize;
            let mut out = vec![T::default(); msg.data.len().div_ceil(size)];
            let status = unpack_typed_message(&msg, &mut out)?;
            Ok((out, status))
        }
    }

    /// `MPI_Recv` into any buffer (a derived datatype, or packed bytes with
    /// [`RecvBuf::packed`]).
    ///
    /// # Cancel safety
    /// As [`recv_into`](Comm::recv_into).
    pub fn recv_buf<'a>(&self, buf: RecvBuf<'a>, source: impl Into<Source>, tag: impl Into<TagSel>) -> Request<'a> {
        self.irecv_buf(buf, source, tag)
    }

    // ----- probes --------------------------------------------------------------------

    /// `MPI_Iprobe`: the status of the first queued message matching
    /// `source` and `tag`, without receiving it.
    pub fn iprobe(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> Result<Option<Status>> {
        let Some(spec) = self.spec(source, tag, self.context)? else { return Ok(Some(Status::empty())) };
        let st = self.shared.lock();
        Ok(st.engine.iprobe(&spec).map(|e| Status::of(e.source, e.tag, e.len)))
    }

    /// `MPI_Probe`: waits until a matching message is queued and returns its
    /// status. With several tasks receiving, another may take the message
    /// first: use [`mprobe`](Comm::mprobe) then.
    ///
    /// # Cancel safety
    /// Cancel-safe: a probe takes nothing.
    pub async fn probe(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> Result<Status> {
        let Some(spec) = self.spec(source, tag, self.context)? else { return Ok(Status::empty()) };
        self.wait_for_arrival(spec, |engine, spec| engine.iprobe(spec).map(|e| Status::of(e.source, e.tag, e.len)))
            .await
    }

    /// Retries `attempt` on the engine whenever a message may have appeared,
    /// until it finds something; fails if the messages `spec` names can no
    /// longer come. The attempt, the check and the waker registration happen
    /// under one lock, so a message that arrives just before its sender's
    /// farewell is never missed.
    async fn wait_for_arrival<T>(&self, spec: MatchSpec, mut attempt: impl FnMut(&mut Engine, &MatchSpec) -> Option<T>) -> Result<T> {
        std::future::poll_fn(|cx| {
            let mut st = self.shared.lock();
            if let Some(found) = attempt(&mut st.engine, &spec) {
                return Poll::Ready(Ok(found));
            }
            let dead = match spec.source {
                Some(r) => st.engine.dead(r, true),
                None => st.engine.others_gone(),
            };
            if let Some(e) = dead {
                return Poll::Ready(Err(e));
            }
            st.arrival_wakers.push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// `MPI_Improbe`: takes the first queued matching message out of the
    /// queue, so no other receive can match it; receive it with
    /// [`Message::recv_into`].
    pub fn improbe(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> Result<Option<Message>> {
        let Some(spec) = self.spec(source, tag, self.context)? else { return Ok(Some(Message::null(self))) };
        let mut st = self.shared.lock();
        Ok(st.engine.improbe(&spec).map(|m| Message { comm: self.clone(), matched: Some(m) }))
    }

    /// `MPI_Mprobe`: waits for a matching message and takes it.
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing is taken until it resolves.
    pub async fn mprobe(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> Result<Message> {
        let Some(spec) = self.spec(source, tag, self.context)? else { return Ok(Message::null(self)) };
        let matched = self.wait_for_arrival(spec, |engine, spec| engine.improbe(spec)).await?;
        Ok(Message { comm: self.clone(), matched: Some(matched) })
    }

    // ----- combined -------------------------------------------------------------------

    /// `MPI_Sendrecv`: sends `send` to `dest` and receives into `recv` from
    /// `source` at the same time, so pairwise exchanges cannot deadlock.
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send) and [`recv_into`](Comm::recv_into).
    #[allow(clippy::too_many_arguments)]
    pub async fn sendrecv<S: MpiType, R: MpiType>(
        &self,
        send: &[S],
        dest: impl Into<Dest>,
        send_tag: i32,
        recv: &mut [R],
        source: impl Into<Source>,
        recv_tag: impl Into<TagSel>,
    ) -> Result<Status> {
        let sent = self.isend(send, dest, send_tag);
        let status = self.recv_into(recv, source, recv_tag).await?;
        sent.await?;
        Ok(status)
    }

    /// `MPI_Sendrecv_replace`: sends `buf` and receives into the same
    /// buffer (the outgoing data is packed before the receive starts).
    ///
    /// # Cancel safety
    /// As [`sendrecv`](Comm::sendrecv).
    pub async fn sendrecv_replace<T: MpiType>(
        &self,
        buf: &mut [T],
        dest: impl Into<Dest>,
        send_tag: i32,
        source: impl Into<Source>,
        recv_tag: impl Into<TagSel>,
    ) -> Result<Status> {
        // The outgoing data is packed when the send starts, so the buffer is
        // free for the receive at once.
        let packed = SendBuf::typed(buf).pack(self.shared.repr);
        let sent = self.start_send(packed, dest.into(), send_tag, SendMode::Standard, self.context);
        let status = self.recv_into(buf, source, recv_tag).await?;
        sent.await?;
        Ok(status)
    }

    // ----- buffered-send buffer ----------------------------------------------------------

    /// `MPI_Buffer_attach`: gives mpx `buffer.len()` bytes for buffered
    /// sends. Only one buffer can be attached per process.
    ///
    /// mpx accounts buffered messages against this capacity (each takes its
    /// packed size plus [`BSEND_OVERHEAD`]) and keeps their data in owned
    /// buffers of its own; the attached memory is returned untouched by
    /// [`buffer_detach`](Comm::buffer_detach).
    pub fn buffer_attach(&self, buffer: Vec<u8>) -> Result<()> {
        let mut st = self.shared.lock();
        if st.bsend.attached.is_some() {
            return Err(Error::BufferState("a buffer is already attached"));
        }
        st.bsend.attached = Some(buffer);
        Ok(())
    }

    /// `MPI_Buffer_detach`: waits until every buffered message has been
    /// delivered to the transport, then returns the attached buffer.
    ///
    /// # Cancel safety
    /// Cancel-safe: the buffer stays attached until the call completes.
    pub async fn buffer_detach(&self) -> Result<Vec<u8>> {
        // With no buffer attached nothing is in flight, so this returns at once.
        let mut st = std::future::poll_fn(|cx| self.shared.poll_bsend_drained(cx)).await;
        st.bsend.attached.take().ok_or(Error::BufferState("no buffer is attached"))
    }

    // ----- barrier --------------------------------------------------------------------------

    /// `MPI_Barrier`: returns once every rank of the communicator has
    /// entered it (a dissemination barrier over point-to-point messages on
    /// the communicator's collective context).
    ///
    /// # Cancel safety
    /// Not cancel-safe: a barrier dropped half-way leaves its messages in
    /// flight, and the next barrier on this communicator will be confused.
    pub async fn barrier(&self) -> Result<()> {
        let n = self.size();
        let me = self.rank();
        let context = self.context | 1;
        let mut step = 1;
        let mut round = 0;
        while step < n {
            let to = (me + step) % n;
            let from = (me + n - step) % n;
            let empty = Ok((Bytes::new(), Repr::Native, None));
            let sent = self.start_send(empty, Dest::Rank(to as i64), round, SendMode::Standard, context);
            if let Some(id) = self.post_recv(from, round, context)? {
                RawRecv::new(self.shared.clone(), id).await?;
            }
            sent.await?;
            step *= 2;
            round += 1;
        }
        Ok(())
    }
}

/// A message taken by [`Comm::improbe`] or [`Comm::mprobe`]; it can only
/// be received through this handle (`MPI_Mrecv`). Dropping the handle
/// without receiving gives the message back to the queue.
pub struct Message {
    comm: Comm,
    matched: Option<crate::engine::Matched>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message").field("status", &self.status()).finish()
    }
}

impl Message {
    fn null(comm: &Comm) -> Message {
        Message { comm: comm.clone(), matched: None }
    }

    /// The message's status (source, tag, length); empty for PROC_NULL.
    pub fn status(&self) -> Status {
        match &self.matched {
            None => Status::empty(),
            Some(m) => {
                let e = m.envelope();
                Status::of(e.source, e.tag, e.len)
            }
        }
    }

    /// Starts receiving the message as a request that runs `finish` on it.
    fn start<'a>(mut self, finish: Finish<'a>) -> Request<'a> {
        let Some(m) = self.matched.take() else { return Request::completed(Ok(Status::empty())) };
        let shared = self.comm.shared.clone();
        let mut st = shared.lock();
        let id = st.engine.next_id();
        st.engine.mrecv(id, m);
        shared.flush(&mut st);
        drop(st);
        Request::active(shared, id, Kind::Recv(finish))
    }

    /// `MPI_Imrecv` into a typed slice.
    ///
    /// # Cancel safety
    /// As [`Comm::irecv`]: if dropped, the message goes back to the head of
    /// the queue.
    pub fn irecv<T: MpiType>(self, buf: &mut [T]) -> Request<'_> {
        self.start(Box::new(move |msg| unpack_typed_message(&msg, buf)))
    }

    /// `MPI_Mrecv` into a typed slice.
    ///
    /// # Cancel safety
    /// As [`Message::irecv`].
    pub async fn recv_into<T: MpiType>(self, buf: &mut [T]) -> Result<Status> {
        self.irecv(buf).await
    }

    /// `MPI_Mrecv` into any buffer.
    ///
    /// # Cancel safety
    /// As [`Message::irecv`].
    pub async fn recv_buf(self, buf: RecvBuf<'_>) -> Result<Status> {
        // On a bad buffer the message goes back to the queue (when `self` drops).
        buf.check()?;
        self.start(Box::new(move |msg| deliver_into(&msg, &buf.datatype, buf.count, buf.region))).await
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if let Some(m) = self.matched.take() {
            let mut st = self.comm.shared.lock();
            st.engine.unmatch(m);
            st.wake_probes();
            self.comm.shared.flush(&mut st);
        }
    }
}
