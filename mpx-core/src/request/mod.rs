//! Requests as futures, and MPI's completion functions as combinators.
//!
//! Every nonblocking operation ([`Comm::isend`](crate::Comm::isend),
//! [`Comm::irecv`](crate::Comm::irecv), ...) starts when it is called and
//! returns a [`Request`]: a future resolving to the operation's
//! [`Status`]. A receive keeps its buffer mutably borrowed until it
//! completes, so MPI's rule that a pending receive's buffer is not touched
//! is checked by the compiler (a send packs its data when it starts, so
//! its buffer is free at once and its request is `'static`):
//!
//! ```compile_fail
//! # async fn f(comm: mpx::Comm) {
//! let mut inbox = vec![0u32; 4];
//! let req = comm.irecv(&mut inbox, 1, 0);
//! println!("{}", inbox[0]); // error: `inbox` is borrowed by the pending receive
//! req.await.unwrap();
//! # }
//! ```
//!
//! # Completion
//!
//! * `req.await` is `MPI_Wait`; [`Request::test`] is `MPI_Test`.
//! * [`wait_all`] takes any collection of requests (a vector, an array, an
//!   iterator, or `&mut` of one; `None` entries are MPI's null requests)
//!   and returns each one's outcome, the borrows released. Each request
//!   reports its own result (MPI's error-in-status), never one error for
//!   the whole call.
//! * A [`RequestSet`] holds requests in slots, as MPI's arrays of requests
//!   do, for `wait_any`, `test_any`, `wait_some`, `test_some`, `wait_all`
//!   and `test_all`: a completed request's slot becomes empty (MPI's
//!   `MPI_REQUEST_NULL`), a server re-posts into it, and the work per call
//!   follows the number of requests that completed, not the number
//!   outstanding. Anything that is an [`Operation`] goes in: [`Request`]s,
//!   receives of one value ([`ValueRecv`](crate::ValueRecv)) and owned
//!   receives ([`OwnedRecv`](crate::OwnedRecv)).
//! * Requests are ordinary `Unpin` futures, so they also compose with
//!   `tokio::select!`, `futures::future::select_all`, `join_all` and
//!   `FuturesUnordered`:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mpx::Result<()> {
//! # mpx_net::loopback::launch(1, |world| async move {
//! use futures::stream::{FuturesUnordered, StreamExt};
//! let mut bufs = vec![[0u8; 1]; 3];
//! for tag in 0..3 {
//!     world.send(&[tag as u8], 0, tag).await?;
//! }
//! let mut pending: FuturesUnordered<_> = bufs.iter_mut().enumerate().map(|(tag, b)| world.irecv(b, 0, tag as i32)).collect();
//! while let Some(status) = pending.next().await {
//!     status?;
//! }
//! drop(pending);
//! assert_eq!(bufs, [[0], [1], [2]]);
//! # Ok(()) }).await?; Ok(()) }
//! ```
//!
//! With `tokio::select!` (the losing receive is withdrawn, losing nothing),
//! and with `join_all` and `select_all`:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mpx::Result<()> {
//! # mpx_net::loopback::launch(1, |world| async move {
//! use std::time::Duration;
//! let (mut a, mut b) = ([0u8], [0u8]);
//! world.send(&[1u8], 0, 1).await?;
//! let got = tokio::select! {
//!     r = world.irecv(&mut a, 0, 1) => r.map(|_| "tag 1"),
//!     _ = tokio::time::sleep(Duration::from_secs(5)) => Ok("timed out"),
//! }?;
//! assert_eq!(got, "tag 1");
//! let sends = vec![world.isend(&[2u8], 0, 2), world.isend(&[3u8], 0, 3)];
//! for r in futures::future::join_all(sends).await {
//!     r?;
//! }
//! let (first, _index, _rest) =
//!     futures::future::select_all(vec![world.irecv(&mut a, 0, 2), world.irecv(&mut b, 0, 3)]).await;
//! first?;
//! # Ok(()) }).await?; Ok(()) }
//! ```
//!
//! # Cancel safety
//!
//! Dropping a request at any point is sound and loses no message: see the
//! rules in [`crate::comm`]. [`Request::free`] is `MPI_Request_free`: a
//! send completes on its own (a failure is reported through `tracing`), a
//! receive stays posted and takes its message, whose data is dropped.
//! [`Request::cancel`] is `MPI_Cancel`.

mod completion;
mod set;
mod status;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;

use crate::error::{ErrorKind, Result};
use crate::proto::engine::{Delivered, Envelope, ReqId};
use crate::runtime::{Completion, Shared, Tracked};

pub use completion::{wait_all, Tested, WaitAll};
pub use set::RequestSet;
pub use status::Status;

/// Turns a delivered message into the receive's status, unpacking it into
/// the receive's buffer: a typed slice held as it is (the common receive,
/// with nothing allocated), or any other unpacking step, boxed.
///
/// A slice receive of a large message in this rank's own representation
/// takes the message's data as it arrives ([`Finish::take_arrived`]), so
/// that copying it into the buffer overlaps the transfer rather than
/// following it, and the engine need not gather the whole message first.
pub(crate) struct Finish<'a>(FinishInto<'a>);

/// Unpacks a message into `len` values of a type at a pointer (see
/// [`Finish::slice`]).
type UnpackSlice = unsafe fn(std::ptr::NonNull<u8>, usize, &Delivered) -> Result<Status>;

/// Whether a message with this envelope is whole native values of the
/// slice's type, at most `len` of them: its bytes may then be copied into
/// the slice as they arrive.
type StreamsInto = fn(&Envelope, usize) -> bool;

/// Any other unpacking step.
type UnpackBoxed<'a> = Box<dyn FnOnce(&Delivered) -> Result<Status> + Send + 'a>;

enum FinishInto<'a> {
    /// `len` values of the type `unpack` was made for, at `ptr`: the
    /// `&'a mut [T]` the receive was given, its type erased.
    Slice {
        ptr: std::ptr::NonNull<u8>,
        len: usize,
        /// The slice's length in bytes.
        bytes: usize,
        unpack: UnpackSlice,
        streams: StreamsInto,
        /// Bytes of the message copied into the slice so far, as they
        /// arrived (its first `streamed` bytes).
        streamed: usize,
        /// The length of the message it takes so, once it takes one.
        message: usize,
        _borrow: std::marker::PhantomData<&'a mut [u8]>,
    },
    Boxed(UnpackBoxed<'a>),
}

// SAFETY: `Slice` stands for a `&'a mut [T]` with `T: MpiType`, which is
// `Send` (`MpiType: Send`); `Boxed` is `Send` itself.
unsafe impl Send for FinishInto<'_> {}

impl<'a> Finish<'a> {
    /// Unpacks into `buf`, checking the message against `T`'s datatype.
    pub(crate) fn slice<T: crate::mpi_type::MpiType>(buf: &'a mut [T]) -> Finish<'a> {
        /// # Safety
        /// `ptr` and `len` are those of a live `&mut [T]` no one else uses.
        unsafe fn unpack<T: crate::mpi_type::MpiType>(ptr: std::ptr::NonNull<u8>, len: usize, msg: &Delivered) -> Result<Status> {
            // SAFETY: by this function's contract, made in `Finish::slice`
            // from the slice borrowed for `'a`, which `Finish<'a>` keeps.
            let buf = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<T>().as_ptr(), len) };
            crate::comm::unpack_typed_message(msg, buf)
        }
        fn streams<T: crate::mpi_type::MpiType>(env: &Envelope, len: usize) -> bool {
            let bytes = usize::try_from(env.len).unwrap_or(usize::MAX);
            crate::comm::native_values_of::<T>(env, bytes, &T::datatype_ref()).is_some_and(|values| values <= len)
        }
        let (len, bytes) = (buf.len(), std::mem::size_of_val(buf));
        let ptr = std::ptr::NonNull::from(buf).cast::<u8>();
        Finish(FinishInto::Slice { ptr, len, bytes, unpack: unpack::<T>, streams: streams::<T>, streamed: 0, message: 0, _borrow: std::marker::PhantomData })
    }

    /// Runs `f` on the message.
    pub(crate) fn boxed(f: impl FnOnce(&Delivered) -> Result<Status> + Send + 'a) -> Finish<'a> {
        Finish(FinishInto::Boxed(Box::new(f)))
    }

    /// Unpacks `msg` into the receive's buffer: after the part taken as
    /// it arrived, if it took any.
    pub(crate) fn run(self, msg: &Delivered) -> Result<Status> {
        match self.0 {
            FinishInto::Slice { streamed: 0, ptr, len, unpack, .. } => {
                // SAFETY: `ptr` and `len` come from the `&'a mut [T]` given
                // to `Finish::slice` with this `unpack`, still borrowed
                // (`'a`).
                unsafe { unpack(ptr, len, msg) }
            }
            FinishInto::Slice { .. } => {
                let mut this = self;
                this.copy_in(&msg.data)?;
                let FinishInto::Slice { streamed, .. } = this.0 else { unreachable!("a slice") };
                let env = &msg.envelope;
                if streamed as u64 != env.len {
                    return Err(ErrorKind::Protocol(format!("a receive took {streamed} bytes of a {}-byte message", env.len)).into());
                }
                Ok(Status::of(env.source as usize, env.tag, env.len))
            }
            FinishInto::Boxed(f) => f(msg),
        }
    }

    /// Copies the data of its message that has arrived since it last
    /// looked into the slice, if it takes its message so (see
    /// [`Engine::take_arrived`](crate::proto::engine::Engine::take_arrived)).
    fn take_arrived(&mut self, shared: &Shared, id: ReqId) -> Result<()> {
        let FinishInto::Slice { len, streams, ref mut message, .. } = self.0 else { return Ok(()) };
        let accept = |env: &Envelope| {
            // Used only once `streams` accepts it: within the slice, so
            // within `usize`.
            *message = env.len as usize;
            streams(env, len)
        };
        let Some(arrived) = shared.take_arrived(id, accept) else { return Ok(()) };
        for chunk in &arrived.chunks {
            self.copy_in(chunk)?;
        }
        if let Some(first) = arrived.chunks.into_iter().next() {
            shared.recycle_data(first);
        }
        Ok(())
    }

    /// Copies the next `data` of the message into the slice, after what
    /// it holds already.
    fn copy_in(&mut self, data: &[u8]) -> Result<()> {
        let FinishInto::Slice { ptr, bytes: room, streamed, .. } = &mut self.0 else { return Ok(()) };
        let room = *room;
        if data.len() > room - *streamed {
            return Err(ErrorKind::Protocol(format!("{} bytes of data past a {room}-byte receive's {}", data.len(), *streamed)).into());
        }
        // SAFETY: the slice is the `&'a mut [T]` given to `Finish::slice`,
        // still borrowed (`'a`), `room` bytes long; `streamed + data.len()`
        // is within it (checked above). `T` takes any bytes (`streams`
        // accepted the message as whole native values of `T`, a type with
        // no padding that needs no validation), and `data` is the
        // message's, distinct memory.
        unsafe { crate::pack::copy::copy_raw(data.as_ptr(), ptr.as_ptr().add(*streamed), data.len()) };
        *streamed += data.len();
        Ok(())
    }

    /// A copy of what was taken into the slice as it arrived, to give
    /// back with the message when the receive is withdrawn: in a buffer
    /// with room for the whole message, so that the rest joins it without
    /// another copy.
    fn taken(&self) -> BytesMut {
        match &self.0 {
            FinishInto::Slice { ptr, streamed, message, .. } if *streamed > 0 => {
                let mut head = BytesMut::with_capacity((*message).max(*streamed));
                // SAFETY: the first `streamed` bytes of the slice, still
                // borrowed (`'a`), were written by `copy_in`.
                head.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *streamed) });
                head
            }
            _ => BytesMut::new(),
        }
    }
}

/// What a request does with its completion.
pub(crate) enum Kind<'a> {
    Send,
    Recv(Finish<'a>),
}

enum State<'a> {
    /// `_keep` holds a receive's communicator's entries in the endpoint
    /// (see [`Comm::keep_alive`](crate::comm::Comm::keep_alive)).
    Active { shared: Arc<Shared>, id: ReqId, kind: Kind<'a>, _keep: Option<Arc<crate::comm::Registration>> },
    /// Complete: the outcome, until it is taken.
    Complete(Option<Result<Status>>),
}

/// A nonblocking operation in flight (`MPI_Request`): a future resolving to
/// its [`Status`]. See the [module docs](self).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(2, |comm| async move {
/// let other = 1 - comm.rank();
/// let mut got = 0u32;
/// let recv = comm.irecv(&mut got, other, 0); // posted now
/// let send = comm.isend(&(comm.rank() as u32 + 10), other, 0);
/// send.await?;
/// let status = recv.await?;
/// assert_eq!((got, status.source), (other as u32 + 10, Some(other)));
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[must_use = "a request does nothing useful unless awaited or tested; dropping it withdraws a receive"]
pub struct Request<'a> {
    state: State<'a>,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.state {
            State::Active { id, kind, .. } => {
                let what = if matches!(kind, Kind::Send) { "send" } else { "receive" };
                write!(f, "Request({what} {id}, active)")
            }
            State::Complete(outcome) => write!(f, "Request(complete: {outcome:?})"),
        }
    }
}

impl<'a> Request<'a> {
    pub(crate) fn active(shared: Arc<Shared>, id: ReqId, kind: Kind<'a>, keep: Option<Arc<crate::comm::Registration>>) -> Request<'a> {
        Request { state: State::Active { shared, id, kind, _keep: keep } }
    }

    /// A request that is already complete with `outcome` (an operation on
    /// `PROC_NULL`, a buffered send, or one that failed as it started).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// use mpx::{ErrorKind, Request, Status};
    /// let done: Request<'static> = Request::completed(Ok(Status::of(0, 3, 8)));
    /// assert!(done.is_complete());
    /// assert_eq!(done.await?.tag, Some(3));
    /// let failed = Request::completed(Err(ErrorKind::InvalidArgument("no such peer".into()).into()));
    /// assert!(matches!(failed.await, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))));
    /// # Ok(()) }
    /// ```
    pub fn completed(outcome: Result<Status>) -> Request<'a> {
        Request { state: State::Complete(Some(outcome)) }
    }

    /// An inactive request (MPI's null or inactive persistent request):
    /// awaiting it gives an empty status at once, as does
    /// [`wait_all`]; in a [`RequestSet`], `wait_any`,
    /// `wait_some`, `test_any` and `test_some` pass over it, as MPI's do.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// use mpx::{Request, Status};
    /// let mut slot = Request::inactive(); // as MPI_REQUEST_NULL
    /// assert!(slot.is_complete());
    /// assert_eq!(slot.test().unwrap()?, Status::empty());
    /// assert_eq!(Request::inactive().await?, Status::empty());
    /// # Ok(()) }
    /// ```
    pub fn inactive() -> Request<'a> {
        Request { state: State::Complete(None) }
    }

    /// Whether the operation has completed (its outcome may not be taken yet).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::{wait_all, PROC_NULL};
    /// let null = comm.isend(&1u8, PROC_NULL, 0);
    /// assert!(null.is_complete(), "nothing to send: complete at once");
    /// let mut x = 0u8;
    /// let mut recv = comm.irecv(&mut x, 0, 0);
    /// assert!(!recv.is_complete(), "nothing sent yet");
    /// comm.send(&2u8, 0, 0).await?; // to itself
    /// for outcome in wait_all([&mut recv]).await {
    ///     outcome?;
    /// }
    /// assert!(recv.is_complete()); // left with its owner, complete
    /// drop((null, recv));
    /// assert_eq!(x, 2);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::Complete(_))
    }

    fn shared(&self) -> Option<&Arc<Shared>> {
        match &self.state {
            State::Active { shared, .. } => Some(shared),
            State::Complete(_) => None,
        }
    }

    /// Moves the request to `Complete` if the engine has finished it;
    /// otherwise registers `cx`'s waker.
    fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let State::Active { .. } = self.state {
            let outcome = std::task::ready!(self.poll_active(cx));
            self.state = State::Complete(Some(outcome));
        }
        Poll::Ready(())
    }

    /// The outcome once the engine has finished the active request (which
    /// is then left complete, its outcome taken); otherwise registers
    /// `cx`'s waker. Awaiting a request takes its outcome from here
    /// directly, without keeping it in the request first.
    fn poll_active(&mut self, cx: &mut Context<'_>) -> Poll<Result<Status>> {
        let State::Active { shared, id, .. } = &mut self.state else { unreachable!("called on active requests") };
        let mut data_arrived = false;
        let completion = match shared.poll_recv(*id, cx, &mut data_arrived) {
            Poll::Ready(completion) => completion,
            Poll::Pending => {
                if let Err(e) = self.take_arrived_data(data_arrived) {
                    self.state = State::Complete(None);
                    return Poll::Ready(Err(e));
                }
                return Poll::Pending;
            }
        };
        let State::Active { kind, shared, .. } = std::mem::replace(&mut self.state, State::Complete(None)) else {
            unreachable!("checked above")
        };
        let outcome = match (kind, completion) {
            (Kind::Send, Completion::Send(r)) => r.map(|()| Status::empty()),
            (Kind::Recv(finish), Completion::Recv(r)) => r.and_then(|msg| {
                let status = finish.run(&msg);
                shared.recycle(msg);
                status
            }),
            (Kind::Recv(_), Completion::Cancelled) => Ok(Status { cancelled: true, ..Status::empty() }),
            _ => unreachable!("a request completes as its own kind"),
        };
        Poll::Ready(outcome)
    }

    /// Ready once the operation has finished, leaving its outcome in the
    /// engine: a receive's message is not unpacked yet (but for the data
    /// it took as it arrived, see [`Finish`]), and dropping the request
    /// still gives it back. Otherwise registers `cx`'s waker.
    pub(crate) fn poll_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let State::Active { shared, id, .. } = &mut self.state else { return Poll::Ready(()) };
        let mut data_arrived = false;
        if shared.poll_settled(*id, cx, &mut data_arrived).is_ready() {
            return Poll::Ready(());
        }
        if let Err(e) = self.take_arrived_data(data_arrived) {
            self.state = State::Complete(Some(Err(e)));
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// For a receive still waiting whose poll found that data arrived
    /// (`data_arrived`), takes it into its buffer now. More data than its
    /// envelope says (the engine refuses such data before it gets here)
    /// fails the receive: its message goes back with what it took, or (if
    /// that is not all it was handed) can only fail the next receive; the
    /// caller completes the request with the error.
    fn take_arrived_data(&mut self, data_arrived: bool) -> Result<()> {
        let State::Active { shared, id, kind: Kind::Recv(finish), .. } = &mut self.state else { return Ok(()) };
        if !data_arrived {
            return Ok(());
        }
        finish.take_arrived(shared, *id).inspect_err(|_| shared.withdraw_streamed(*id, finish.taken()))
    }

    /// `MPI_Test`: the outcome if the operation has completed, without
    /// waiting. It first processes frames that have already arrived, so a
    /// loop of `test` calls makes progress even where no driver task runs.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// let mut got = [0u32];
    /// let mut recv = comm.irecv(&mut got, 0, 0);
    /// assert!(recv.test().is_none(), "nothing sent yet");
    /// comm.send(&[7u32], 0, 0).await?;
    /// let status = loop {
    ///     if let Some(outcome) = recv.test() {
    ///         break outcome?;
    ///     }
    /// };
    /// assert_eq!(status.bytes, 4);
    /// drop(recv);
    /// assert_eq!(got, [7]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn test(&mut self) -> Option<Result<Status>> {
        Operation::test(self)
    }

    /// The request, unless it failed as it started (its data could not be
    /// packed, its peer had failed): then its error, so that what was to
    /// start with it need not.
    pub(crate) fn failed_at_start(mut self) -> Result<Request<'a>> {
        match &mut self.state {
            State::Complete(Some(Err(_))) => self.take_outcome().map(|_| self),
            _ => Ok(self),
        }
    }

    fn take_outcome(&mut self) -> Result<Status> {
        match &mut self.state {
            // Taken already: like MPI's null request, an empty status.
            State::Complete(outcome) => outcome.take().unwrap_or_else(|| Ok(Status::empty())),
            State::Active { .. } => Err(ErrorKind::InvalidArgument("the outcome of a request that has not completed".into()).into()),
        }
    }

    /// `MPI_Cancel`: withdraws a receive that has not matched; it then
    /// completes with a status whose [`Status::test_cancelled`] is true.
    /// A receive that has matched, and any send, are not affected (MPI
    /// allows a cancel to fail). Returns whether the request was cancelled.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// let mut buf = [0u8; 4];
    /// let mut recv = comm.irecv(&mut buf, 0, 0);
    /// assert!(recv.cancel(), "nothing has matched it");
    /// assert!(recv.await?.test_cancelled());
    /// let mut send = comm.isend(&1u8, 0, 1);
    /// assert!(!send.cancel(), "a send is not cancelled");
    /// send.await?;
    /// # comm.recv::<u8>(0, 1).await?;
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn cancel(&mut self) -> bool {
        let State::Active { shared, id, kind: Kind::Recv(_), .. } = &self.state else { return false };
        let mut st = shared.lock();
        if st.engine.cancel_recv(*id) {
            st.finish_outside_engine(*id);
            st.requests.insert(*id, Tracked::Done(Completion::Cancelled));
            true
        } else {
            false
        }
    }

    /// Bytes of its message a receive has put in its buffer as they
    /// arrived, before completing (see [`Finish`]); 0 for a send. For
    /// tests of what dropping such a receive gives back.
    #[doc(hidden)]
    pub fn bytes_taken_early(&self) -> usize {
        match &self.state {
            State::Active { kind: Kind::Recv(Finish(FinishInto::Slice { streamed, .. })), .. } => *streamed,
            _ => 0,
        }
    }

    /// `MPI_Request_free`: lets the operation finish on its own. A send
    /// still delivers its message (its data is already owned by the
    /// engine), and a failure is reported through `tracing`. A receive
    /// stays posted and takes the message it matches, as MPI has it, but
    /// that message's data is dropped: mpx never writes into a buffer after
    /// its borrow has ended. (Dropping a receive instead withdraws it, as
    /// a cancel does: the message waits for the next receive.)
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// comm.isend(&[1u8, 2], 0, 0).free(); // to itself: still delivered
    /// assert_eq!(comm.recv::<[u8; 2]>(0, 0).await?.0, [1, 2]);
    /// let mut buf = [0u8; 2];
    /// comm.irecv(&mut buf, 0, 1).free(); // still posted
    /// comm.send(&[3u8, 4], 0, 1).await?; // taken by the freed receive
    /// comm.send(&[5u8, 6], 0, 1).await?;
    /// assert_eq!(comm.recv::<[u8; 2]>(0, 1).await?.0, [5, 6]);
    /// assert_eq!(buf, [0, 0]); // never written there
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn free(mut self) {
        if let State::Active { shared, id, kind: Kind::Recv(_), .. } = &self.state {
            shared.free_recv(*id);
            // Given up: nothing is left for the drop to withdraw.
            self.state = State::Complete(None);
        }
    }
}

impl Future for Request<'_> {
    type Output = Result<Status>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Status>> {
        match self.state {
            State::Active { .. } => self.poll_active(cx),
            State::Complete(_) => Poll::Ready(self.take_outcome()),
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        match &self.state {
            State::Active { shared, id, kind: Kind::Recv(finish), .. } => shared.withdraw_streamed(*id, finish.taken()),
            State::Active { shared, id, kind: Kind::Send, .. } => shared.withdraw(*id),
            State::Complete(Some(Err(e))) => tracing::warn!(error = %e, "request dropped with its error untaken"),
            State::Complete(_) => {}
        }
    }
}

/// What the completion functions work on: a nonblocking operation that can
/// be polled to completion and whose outcome can then be taken. Implemented
/// by [`Request`], by receives of one value ([`ValueRecv`](crate::ValueRecv)),
/// by owned receives ([`OwnedRecv`](crate::OwnedRecv)) and by collectives
/// ([`Collective`](crate::coll::Collective)), so a server can keep one
/// receive per client in a [`RequestSet`] and re-post into a slot, and
/// collectives in flight wait together.
pub trait Operation: Unpin {
    /// The outcome.
    type Output;

    /// Moves the operation to its completed state if it has finished,
    /// otherwise registers the waker. Does not take the outcome.
    fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// Whether the operation has completed.
    fn is_complete(&self) -> bool;

    /// Takes the outcome of a completed operation: for a [`Request`], a
    /// receive of one value ([`ValueRecv`](crate::ValueRecv)) or a
    /// collective that has not completed, [`ErrorKind::InvalidArgument`].
    ///
    /// # Panics
    /// For an owned receive ([`OwnedRecv`](crate::OwnedRecv)), whose
    /// outcome holds its buffer, if it has not completed or its outcome
    /// was taken already.
    fn take_output(&mut self) -> Self::Output;

    /// Processes frames that have already arrived at the operation's
    /// endpoint, returning an identity for that endpoint (so callers
    /// progress each endpoint once), or `None` for completed operations.
    fn progress(&self) -> Option<usize>;

    /// Whether the operation moves on only while it is polled (a
    /// collective sends its later steps from its own polls), rather than
    /// being completed by its endpoint whichever request is polled:
    /// [`wait_all`] then polls it whenever it wakes, not only once the
    /// operations before it are complete, since ranks may wait for their
    /// collectives in different orders. A detail of mpx.
    #[doc(hidden)]
    fn moves_when_polled(&self) -> bool {
        false
    }

    /// Whether this is MPI's null or an inactive persistent request
    /// ([`Request::inactive`], a `None` slot, a [`Request`] whose outcome
    /// was taken): the completion functions that return one request, or some,
    /// pass over it ([`RequestSet::wait_any`] and the others), while the
    /// ones that return all give it an empty status, as MPI-4.1 §3.7.3 and
    /// §3.7.5 have them. A detail of mpx.
    #[doc(hidden)]
    fn is_inactive(&self) -> bool {
        false
    }

    /// Ready once the operation has finished, as
    /// [`poll_complete`](Operation::poll_complete), but leaving its outcome
    /// where dropping the operation still undoes it (a receive's message
    /// goes back to the queue): what a completion function polls while it
    /// cannot return the outcome yet ([`RequestSet::wait_all`] and
    /// [`wait_all`] until every request has finished). By default, the
    /// same as `poll_complete`. A detail of mpx.
    #[doc(hidden)]
    fn poll_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_complete(cx)
    }

    /// The outcome [`wait_all`] and [`RequestSet::wait_all`] give an
    /// inactive request: its [`take_output`](Operation::take_output) (an
    /// empty status for a [`Request`]), or nothing for a kind of request
    /// that has no empty outcome (a receive of a value, or into an owned
    /// buffer, whose outcome was taken): the set leaves it out. A detail of
    /// mpx.
    #[doc(hidden)]
    fn take_inactive(&mut self) -> Option<Self::Output> {
        Some(self.take_output())
    }

    /// `MPI_Test`: the outcome if the operation has completed, without
    /// waiting (processing arrived frames first), for every kind of
    /// request: [`Request::test`] does the same for a [`Request`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::Operation;
    /// let mut recv = comm.recv::<u16>(0, 0);
    /// assert!(recv.test().is_none(), "nothing sent yet");
    /// comm.send(&7u16, 0, 0).await?;
    /// let (x, _) = loop {
    ///     if let Some(outcome) = recv.test() { break outcome?; }
    /// };
    /// assert_eq!(x, 7);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Panics
    /// For an owned receive ([`OwnedRecv`](crate::OwnedRecv)) whose
    /// outcome was taken already (a receive of a value gives an error
    /// then, a collective `Ok(())`, a [`Request`] an empty status).
    fn test(&mut self) -> Option<Self::Output>
    where
        Self: Sized,
    {
        let _ = self.progress();
        match crate::runtime::looking(|| self.poll_complete(&mut Context::from_waker(std::task::Waker::noop()))) {
            Poll::Ready(()) => Some(self.take_output()),
            Poll::Pending => None,
        }
    }
}

/// A borrowed operation: [`wait_all`] takes `&mut` requests too
/// (`wait_all(&mut requests)`), leaving the requests with their owner,
/// complete.
impl<R: Operation + ?Sized> Operation for &mut R {
    type Output = R::Output;

    fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        (**self).poll_complete(cx)
    }

    fn is_complete(&self) -> bool {
        (**self).is_complete()
    }

    fn take_output(&mut self) -> R::Output {
        (**self).take_output()
    }

    fn progress(&self) -> Option<usize> {
        (**self).progress()
    }

    fn moves_when_polled(&self) -> bool {
        (**self).moves_when_polled()
    }

    fn is_inactive(&self) -> bool {
        (**self).is_inactive()
    }

    fn poll_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        (**self).poll_settled(cx)
    }

    fn take_inactive(&mut self) -> Option<R::Output> {
        (**self).take_inactive()
    }
}

/// A slot that may hold MPI's null request (`None`): complete at once with
/// no outcome. Taking a held request's outcome empties the slot.
impl<R: Operation> Operation for Option<R> {
    type Output = Option<R::Output>;

    fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.as_mut().map_or(Poll::Ready(()), |r| r.poll_complete(cx))
    }

    fn is_complete(&self) -> bool {
        self.as_ref().is_none_or(R::is_complete)
    }

    fn take_output(&mut self) -> Option<R::Output> {
        self.take().map(|mut r| r.take_output())
    }

    fn progress(&self) -> Option<usize> {
        self.as_ref().and_then(R::progress)
    }

    fn moves_when_polled(&self) -> bool {
        self.as_ref().is_some_and(R::moves_when_polled)
    }

    fn is_inactive(&self) -> bool {
        self.as_ref().is_none_or(R::is_inactive)
    }

    fn poll_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.as_mut().map_or(Poll::Ready(()), |r| r.poll_settled(cx))
    }

    /// `None` for an empty slot, and for a request with no outcome left
    /// to give.
    fn take_inactive(&mut self) -> Option<Option<R::Output>> {
        Some(self.take().and_then(|mut r| r.take_inactive()))
    }
}

impl Operation for Request<'_> {
    type Output = Result<Status>;

    fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        Request::poll_complete(self, cx)
    }

    fn is_complete(&self) -> bool {
        Request::is_complete(self)
    }

    fn take_output(&mut self) -> Result<Status> {
        self.take_outcome()
    }

    fn progress(&self) -> Option<usize> {
        self.shared().map(|s| {
            s.progress();
            Arc::as_ptr(s) as usize
        })
    }

    fn is_inactive(&self) -> bool {
        matches!(self.state, State::Complete(None))
    }

    fn poll_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        Request::poll_settled(self, cx)
    }
}

