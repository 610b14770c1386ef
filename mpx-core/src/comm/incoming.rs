//! Incoming messages as a [`Stream`] ([`Comm::incoming`]), and what a
//! receive can turn one message into ([`Receivable`]).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::{FusedStream, Stream};

use super::buffer::{capacity, unpack_typed_message_uninit};
use super::recv_owned::RawRecv;
use super::selectors::{Source, TagSel};
use super::{Comm, Status};
use crate::error::{Error, ErrorKind, Result};
use crate::mpi_type::MpiType;
use crate::proto::engine::Delivered;

pub(super) mod sealed {
    /// Keeps [`Receivable`](super::Receivable) implemented by mpx alone.
    pub trait Sealed {}
}

/// What one received message becomes: a single value of an [`MpiType`]
/// (`T` itself), or a serde value ([`Serde<T>`](crate::comm::Serde), with
/// the `serde` feature). The type parameter of [`Comm::recv`] and
/// [`Comm::incoming`].
///
/// * `T: MpiType` yields a `T`. The message must hold exactly one
///   `T`: a longer one is [`ErrorKind::Truncate`], one with less is
///   [`ErrorKind::ShortInput`], one of another type [`ErrorKind::TypeMismatch`];
/// * `Serde<T>` yields a `T: DeserializeOwned` from a serde message of any
///   length (see the [module docs](super)).
///
/// ```
/// use mpx::comm::Receivable;
/// fn yields<R: Receivable<Value = V>, V>() {}
/// yields::<u64, u64>();
/// yields::<[f32; 3], [f32; 3]>();
/// ```
pub trait Receivable: sealed::Sealed + 'static {
    /// The value a message becomes.
    type Value: Send + 'static;

    /// The most data bytes a message can hold (`None`: any length).
    #[doc(hidden)]
    fn limit() -> Option<u64>;

    /// Turns a delivered message into its value and status.
    #[doc(hidden)]
    fn decode(msg: &Delivered) -> Result<(Self::Value, Status)>;
}

impl<T: MpiType> sealed::Sealed for T {}

impl<T: MpiType> Receivable for T {
    type Value = T;

    fn limit() -> Option<u64> {
        capacity(&T::datatype_ref(), 1)
    }

    fn decode(msg: &Delivered) -> Result<(T, Status)> {
        let mut value = std::mem::MaybeUninit::<T>::uninit();
        let (status, whole) = unpack_typed_message_uninit(msg, std::slice::from_mut(&mut value))?;
        if whole == 0 && std::mem::size_of::<T>() > 0 {
            return Err(ErrorKind::ShortInput { requested: T::datatype().size(), available: status.bytes }.into());
        }
        // SAFETY: the unpack succeeded and wrote every typemap byte of one
        // value, which it validated (or `T` has no bytes to write): by
        // `MpiType`'s contract that makes a valid `T`, its padding left
        // uninitialised (and `T` has values at all).
        Ok((unsafe { value.assume_init() }, status))
    }
}

impl Comm {
    /// Posts a receive of one `R` now: `Ok(None)` for the null process.
    pub(super) fn post_one<R: Receivable>(&self, source: Source, tag: TagSel) -> Result<Option<RawRecv>> {
        let posted = self.post_recv(source, tag, self.context, R::limit())?;
        Ok(posted.map(|id| RawRecv::new(self.shared.clone(), id)))
    }

    /// The messages from `source` (a rank or [`Any`](super::Any)) with `tag`
    /// (or [`Any`](super::Any)), as a [`Stream`] of values with their
    /// statuses, for servers: `while let Some(msg) = stream.next().await`.
    ///
    /// `T` says what each message becomes ([`Receivable`]): a single value of
    /// an [`MpiType`], or a serde value with [`Serde<T>`](crate::comm::Serde).
    /// The stream keeps exactly one receive posted, from this call until it
    /// ends or is dropped; like an [`irecv`](Comm::irecv) it matches the
    /// next message even while nobody polls the stream, and holds it until
    /// the next poll. A message that does not become a value (of another
    /// type, corrupt, too long) is yielded as its error and the stream goes
    /// on; when the messages it names can no longer come
    /// ([`ErrorKind::ProcessFailed`], [`ErrorKind::Finalized`]) it yields that error
    /// and ends. A stream from [`Any`](super::Any) source yields a failed
    /// sender's error and goes on while another rank may still send (a
    /// server outlives a client that dies part way through a message); it
    /// ends once no other member of the communicator can. From [`PROC_NULL`](super::PROC_NULL) it is empty.
    ///
    /// ```
    /// use futures::StreamExt;
    /// use mpx::Any;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// const REQUEST: i32 = 1;
    /// const REPLY: i32 = 2;
    /// if comm.rank() == 0 {
    ///     // Square one number from each other rank.
    ///     let mut requests = comm.incoming::<u64>(Any, REQUEST).take(comm.size() - 1);
    ///     while let Some(request) = requests.next().await {
    ///         let (n, status) = request?;
    ///         let client = status.source.expect("a message has a source");
    ///         comm.send(&(n * n), client, REPLY).await?;
    ///     }
    /// } else {
    ///     let n = comm.rank() as u64 + 10;
    ///     comm.send(&n, 0, REQUEST).await?;
    ///     let (square, _) = comm.recv::<u64>(0, REPLY).await?;
    ///     assert_eq!(square, n * n);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// Deadlines come from `tokio::time::timeout` (or any other timer):
    /// a `next()` that times out leaves the stream's receive posted, and the
    /// message it matches later is yielded by the next `next()`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// if comm.rank() == 0 {
    ///     let mut numbers = comm.incoming::<i32>(1, 0);
    ///     // Rank 1 sends only once it hears from us: nothing comes in time.
    ///     let early = tokio::time::timeout(Duration::from_millis(20), numbers.next()).await;
    ///     assert!(early.is_err());
    ///     comm.send(&0u8, 1, 9).await?;
    ///     let (n, _) = numbers.next().await.expect("the stream goes on")?;
    ///     assert_eq!(n, 42);
    /// } else {
    ///     comm.recv::<u8>(0, 9).await?;
    ///     comm.send(&42i32, 0, 0).await?;
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the stream (or a `next()` future) loses nothing: the
    /// pending receive is withdrawn, and a message it had matched but not
    /// yet yielded goes back to the head of the queue, so the next receive
    /// gets every message in order (see the [module docs](super) for the
    /// one order this cannot restore).
    pub fn incoming<T: Receivable>(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> Incoming<T> {
        let (source, tag) = (source.into(), tag.into());
        let mut stream = Incoming { comm: self.clone(), source, tag, state: State::Ended, values: PhantomData };
        stream.state = stream.post();
        stream
    }
}

/// The stream of [`Comm::incoming`]: each matching message as a value and
/// its status. It is `'static`, `Send` and `Unpin`, so it can be moved into
/// a spawned task or kept in a struct.
///
/// ```
/// fn assert_spawnable<S: futures::Stream + Send + Unpin + 'static>(_: &S) {}
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |comm| async move {
/// let requests = comm.incoming::<u32>(mpx::Any, 3);
/// assert_spawnable(&requests);
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[must_use = "a stream does nothing unless polled; dropping it withdraws its receive"]
pub struct Incoming<T: Receivable> {
    comm: Comm,
    source: Source,
    tag: TagSel,
    state: State,
    values: PhantomData<fn() -> T>,
}

/// Where an [`Incoming`] stands.
enum State {
    /// Its one receive is posted.
    Posted(RawRecv),
    /// Posting failed: the error is yielded next, then the stream ends.
    Failed(Error),
    /// Nothing more will come.
    Ended,
}

impl<T: Receivable> Incoming<T> {
    /// Posts the stream's next receive.
    fn post(&self) -> State {
        match self.comm.post_one::<T>(self.source, self.tag) {
            Ok(Some(raw)) => State::Posted(raw),
            Ok(None) => State::Ended,
            Err(e) => State::Failed(e),
        }
    }
}

impl<T: Receivable> std::fmt::Debug for Incoming<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Posted(_) => "posted",
            State::Failed(_) => "failed",
            State::Ended => "ended",
        };
        f.debug_struct("Incoming").field("source", &self.source).field("tag", &self.tag).field("state", &state).finish()
    }
}

impl<T: Receivable> Stream for Incoming<T> {
    type Item = Result<(T::Value, Status)>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let received = match std::mem::replace(&mut this.state, State::Ended) {
            State::Ended => return Poll::Ready(None),
            State::Failed(e) => return Poll::Ready(Some(Err(e))),
            State::Posted(mut raw) => match Pin::new(&mut raw).poll(cx) {
                Poll::Ready(received) => received,
                Poll::Pending => {
                    this.state = State::Posted(raw);
                    return Poll::Pending;
                }
            },
        };
        Poll::Ready(Some(match received {
            Ok(msg) => {
                this.state = this.post();
                T::decode(&msg)
            }
            // Errors that say the messages can no longer come end the
            // stream; others concern one message. A failed sender ends a
            // stream of one source; one of any source goes on while
            // another rank may still send.
            Err(e) if matches!(e.kind(), ErrorKind::Finalized) => Err(e),
            Err(e) if matches!(e.kind(), ErrorKind::ProcessFailed { .. }) && (this.source != Source::Any || this.comm.others_gone()) => Err(e),
            Err(e) => {
                this.state = this.post();
                Err(e)
            }
        }))
    }
}

impl<T: Receivable> FusedStream for Incoming<T> {
    fn is_terminated(&self) -> bool {
        matches!(self.state, State::Ended)
    }
}
