//! Receives that own their buffer ([`OwnedRecv`]), and the raw receive
//! every receive is built on.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::incoming::Receivable;
use super::selectors::{Source, TagSel};
use super::{Comm, Status};
use crate::error::{Error, ErrorKind, Result};
use crate::proto::engine::{Delivered, ReqId};
use crate::request::Operation;
use crate::runtime::{Completion, Shared};

/// A failed receive into an owned buffer: the buffer comes back with the error.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |comm| async move {
/// use mpx::ErrorKind;
/// comm.send(&[1u8, 2, 3], 0, 0).await?; // to itself
/// let failed = comm.irecv_owned(vec![0u8; 2], 0, 0).await.unwrap_err();
/// assert!(matches!(failed.error.kind(), ErrorKind::Truncate { needed: 3, available: 2, message: Some((0, 0)) }));
/// assert_eq!(failed.buffer, [0, 0]); // the buffer comes back
/// # Ok(()) }).await?; Ok(()) }
/// ```
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

impl<B> From<RecvError<B>> for Error {
    /// The error, without the buffer.
    fn from(e: RecvError<B>) -> Error {
        e.error
    }
}

/// A posted receive that resolves to the delivered message itself.
pub(crate) struct RawRecv {
    shared: Arc<Shared>,
    id: ReqId,
    finished: bool,
    /// The entries of the communicator it was posted on (see
    /// [`Comm::keep_alive`]), for a receive that may outlive its handles.
    _keep: Option<Arc<super::Registration>>,
}

impl RawRecv {
    /// A receive whose communicator outlives it (the caller holds a handle).
    pub(crate) fn new(shared: Arc<Shared>, id: ReqId) -> RawRecv {
        RawRecv { shared, id, finished: false, _keep: None }
    }

    /// A receive that keeps its communicator's entries, `keep`, while it
    /// is under way.
    pub(crate) fn kept(shared: Arc<Shared>, id: ReqId, keep: Option<Arc<super::Registration>>) -> RawRecv {
        RawRecv { shared, id, finished: false, _keep: keep }
    }

    /// The endpoint the receive is posted on.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Unposts the receive if it has not matched; then it is finished.
    pub(crate) fn cancel(&mut self) -> bool {
        let mut st = self.shared.lock();
        let cancelled = st.engine.cancel_recv(self.id);
        if cancelled {
            // What the endpoint kept for it goes too: it will not be polled
            // through the endpoint again. The task of its last poll (another
            // than this caller's, if the receive is shared) is woken to find
            // it finished.
            st.finish_outside_engine(self.id);
        }
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
            Completion::Cancelled => Err(ErrorKind::Cancelled.into()),
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

/// A posted receive and, once it completes, its outcome `O` until taken:
/// the state machine of every receive future that is an [`Operation`]
/// ([`OwnedRecv`], [`ValueRecv`]), each with its own way of turning the
/// delivered message into `O`.
enum Posted<O> {
    Active(RawRecv),
    Complete(Option<O>),
}

impl<O> Posted<O> {
    /// Posts a receive of at most `limit` bytes now; the null process (no
    /// receive posted) or an argument error completes it at once with
    /// what `at_once` makes of that.
    fn start(comm: &Comm, source: Source, tag: TagSel, limit: Option<u64>, at_once: impl FnOnce(Result<()>) -> O) -> Posted<O> {
        match comm.post_recv(source, tag, comm.context, limit) {
            Ok(Some(id)) => Posted::Active(RawRecv::kept(comm.shared.clone(), id, comm.keep_alive())),
            Ok(None) => Posted::Complete(Some(at_once(Ok(())))),
            Err(error) => Posted::Complete(Some(at_once(Err(error)))),
        }
    }

    fn is_complete(&self) -> bool {
        matches!(self, Posted::Complete(_))
    }

    /// Whether its outcome was taken: nothing is left to wait for or take.
    fn is_spent(&self) -> bool {
        matches!(self, Posted::Complete(None))
    }

    /// Ready once the receive has finished, leaving its message with the
    /// endpoint (see [`Operation::poll_settled`]).
    fn poll_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self {
            Posted::Active(raw) => raw.shared.poll_settled(raw.id, cx, &mut false),
            Posted::Complete(_) => Poll::Ready(()),
        }
    }

    /// Once the receive has completed, makes its outcome with `finish`.
    fn poll_with(&mut self, cx: &mut Context<'_>, finish: impl FnOnce(&Arc<Shared>, Result<Delivered>) -> O) -> Poll<()> {
        let Posted::Active(raw) = self else { return Poll::Ready(()) };
        let delivered = std::task::ready!(Pin::new(&mut *raw).poll(cx));
        let outcome = finish(&raw.shared, delivered);
        *self = Posted::Complete(Some(outcome));
        Poll::Ready(())
    }

    /// Unposts the receive if it has not matched, completing it with what
    /// `cancelled` makes; whether it was cancelled.
    fn cancel(&mut self, cancelled: impl FnOnce() -> O) -> bool {
        let Posted::Active(raw) = self else { return false };
        if !raw.cancel() {
            return false;
        }
        *self = Posted::Complete(Some(cancelled()));
        true
    }

    fn take(&mut self) -> O {
        match self {
            Posted::Complete(out) => out.take().expect("the outcome of a receive is taken once"),
            Posted::Active(_) => panic!("take_output on an active receive"),
        }
    }

    fn progress(&self) -> Option<usize> {
        match self {
            Posted::Active(raw) => {
                raw.shared.progress();
                Some(Arc::as_ptr(&raw.shared) as usize)
            }
            Posted::Complete(_) => None,
        }
    }
}

/// A receive into an owned buffer ([`Comm::irecv_owned`],
/// [`Comm::irecv_bytes`]): a `'static` future resolving to the buffer and
/// the status, or to the buffer and the error ([`RecvError`]). It is also an
/// [`Operation`], so it works with the completion functions and
/// [`RequestSet`](crate::RequestSet).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(2, |comm| async move {
/// use mpx::OwnedRecv;
/// let other = 1 - comm.rank();
/// let recv: OwnedRecv<Vec<u32>> = comm.irecv_owned(vec![0; 3], other, 0); // posted now
/// comm.send(&[comm.rank() as u32; 3], other, 0).await?;
/// let (v, status) = recv.await?;
/// assert_eq!((v, status.source), (vec![other as u32; 3], Some(other)));
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[must_use = "a receive does nothing unless awaited; dropping it withdraws it"]
pub struct OwnedRecv<B> {
    posted: Posted<std::result::Result<(B, Status), RecvError<B>>>,
    /// The buffer, while the receive is active.
    buffer: Option<B>,
    finish: fn(&mut B, Delivered) -> Result<Status>,
}

impl<B> std::fmt::Debug for OwnedRecv<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.posted.is_complete() { "OwnedRecv(complete)" } else { "OwnedRecv(active)" })
    }
}

// The buffer is never pinned: it is moved out when the receive completes.
impl<B> Unpin for OwnedRecv<B> {}

impl<B> OwnedRecv<B> {
    pub(crate) fn start(
        comm: &Comm,
        buffer: B,
        source: Source,
        tag: TagSel,
        limit: Option<u64>,
        finish: fn(&mut B, Delivered) -> Result<Status>,
    ) -> OwnedRecv<B> {
        let mut buffer = Some(buffer);
        let posted = Posted::start(comm, source, tag, limit, |now| {
            let buffer = buffer.take().expect("the buffer is given once");
            match now {
                Ok(()) => Ok((buffer, Status::empty())),
                Err(error) => Err(RecvError { buffer, error }),
            }
        });
        OwnedRecv { posted, buffer, finish }
    }


    /// `MPI_Cancel`: withdraws the receive if it has not matched; it then
    /// completes with the buffer and a status whose
    /// [`Status::test_cancelled`] is true. Returns whether it was cancelled.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// let mut recv = comm.irecv_owned(vec![0u32; 4], 0, 0);
    /// assert!(recv.cancel(), "nothing has matched it");
    /// let (buffer, status) = recv.await?;
    /// assert!(status.test_cancelled());
    /// assert_eq!(buffer, [0; 4]); // the buffer comes back, untouched
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn cancel(&mut self) -> bool {
        let buffer = &mut self.buffer;
        self.posted.cancel(|| {
            let buffer = buffer.take().expect("an active receive holds its buffer");
            Ok((buffer, Status { cancelled: true, ..Status::empty() }))
        })
    }
}

impl<B> Operation for OwnedRecv<B> {
    type Output = std::result::Result<(B, Status), RecvError<B>>;

    fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let (buffer, finish) = (&mut self.buffer, self.finish);
        self.posted.poll_with(cx, |_, delivered| {
            let mut buffer = buffer.take().expect("an active receive holds its buffer");
            match delivered.and_then(|msg| finish(&mut buffer, msg)) {
                Ok(status) => Ok((buffer, status)),
                Err(error) => Err(RecvError { buffer, error }),
            }
        })
    }

    fn is_complete(&self) -> bool {
        self.posted.is_complete()
    }

    fn take_output(&mut self) -> Self::Output {
        self.posted.take()
    }

    fn progress(&self) -> Option<usize> {
        self.posted.progress()
    }

    /// A receive whose outcome was taken (it returned its buffer) is
    /// inactive: a set passes over it.
    fn is_inactive(&self) -> bool {
        self.posted.is_spent()
    }

    /// Nothing: its outcome, with its buffer, was taken.
    fn take_inactive(&mut self) -> Option<Self::Output> {
        None
    }

    fn poll_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.posted.poll_settled(cx)
    }
}

impl<B> Future for OwnedRecv<B> {
    type Output = std::result::Result<(B, Status), RecvError<B>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        std::task::ready!(self.poll_complete(cx));
        Poll::Ready(self.take_output())
    }
}

/// A receive of one value ([`Comm::recv`]): a `'static` future resolving to
/// the value and the status. It is posted when `recv` is called and is an
/// [`Operation`], so many of them can wait in a
/// [`RequestSet`](crate::RequestSet) or go to
/// [`wait_all`](crate::wait_all).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(2, |comm| async move {
/// use mpx::ValueRecv;
/// let other = 1 - comm.rank();
/// let recv: ValueRecv<f64> = comm.recv(other, 0); // posted now
/// comm.send(&(comm.rank() as f64 + 0.5), other, 0).await?;
/// let (x, status) = recv.await?;
/// assert_eq!((x, status.source), (other as f64 + 0.5, Some(other)));
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[must_use = "a receive does nothing unless awaited; dropping it withdraws it"]
pub struct ValueRecv<R: Receivable> {
    posted: Posted<Result<(R::Value, Status)>>,
}

impl<R: Receivable> std::fmt::Debug for ValueRecv<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.posted.is_complete() { "ValueRecv(complete)" } else { "ValueRecv(active)" })
    }
}

// The value is never pinned: it is moved out when the receive completes.
impl<R: Receivable> Unpin for ValueRecv<R> {}

impl<R: Receivable> ValueRecv<R> {
    pub(crate) fn start(comm: &Comm, source: Source, tag: TagSel) -> ValueRecv<R> {
        let posted = Posted::start(comm, source, tag, R::limit(), |now| {
            now.and(Err(ErrorKind::InvalidArgument("a receive of one value from PROC_NULL has no value to return".into()).into()))
        });
        ValueRecv { posted }
    }

    /// `MPI_Cancel`: withdraws the receive if it has not matched; it then
    /// completes with [`ErrorKind::Cancelled`] (there is no value). Returns
    /// whether it was cancelled.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// let mut recv = comm.recv::<u32>(0, 0);
    /// assert!(recv.cancel());
    /// assert!(matches!(recv.await, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::Cancelled)));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn cancel(&mut self) -> bool {
        self.posted.cancel(|| Err(ErrorKind::Cancelled.into()))
    }
}

impl<R: Receivable> Operation for ValueRecv<R> {
    type Output = Result<(R::Value, Status)>;

    fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.posted.poll_with(cx, |shared, delivered| {
            delivered.and_then(|msg| {
                let value = R::decode(&msg);
                shared.recycle(msg);
                value
            })
        })
    }

    fn is_complete(&self) -> bool {
        self.posted.is_complete()
    }

    /// The value and status; an error if they were taken already, or the
    /// receive has not completed.
    fn take_output(&mut self) -> Self::Output {
        if self.posted.is_spent() {
            return Err(ErrorKind::InvalidArgument("the outcome of this receive was taken already".into()).into());
        }
        if !self.posted.is_complete() {
            return Err(ErrorKind::InvalidArgument("the outcome of a receive that has not completed".into()).into());
        }
        self.posted.take()
    }

    fn progress(&self) -> Option<usize> {
        self.posted.progress()
    }

    /// A receive whose outcome was taken is inactive: a set passes over it.
    fn is_inactive(&self) -> bool {
        self.posted.is_spent()
    }

    /// Nothing: its outcome was taken.
    fn take_inactive(&mut self) -> Option<Self::Output> {
        None
    }

    fn poll_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.posted.poll_settled(cx)
    }
}

impl<R: Receivable> Future for ValueRecv<R> {
    type Output = Result<(R::Value, Status)>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        std::task::ready!(self.poll_complete(cx));
        Poll::Ready(self.take_output())
    }
}
