//! Requests as futures, and MPI's completion functions as combinators.
//!
//! Every nonblocking operation ([`Comm::isend`](crate::Comm::isend),
//! [`Comm::irecv`](crate::Comm::irecv), ...) starts when it is called and
//! returns a [`Request`]: a future resolving to the operation's
//! [`Status`]. A request that borrows a send buffer keeps it immutably
//! borrowed until it completes, and a receive keeps its buffer mutably
//! borrowed, so MPI's rules on buffer access are checked by the compiler:
//!
//! ```compile_fail
//! # async fn f(comm: mpx_core::Comm) {
//! let mut data = vec![1u32; 4];
//! let req = comm.isend(&data, 1, 0);
//! data[0] = 2; // error: `data` is borrowed by the pending send
//! req.await.unwrap();
//! # }
//! ```
//!
//! # Completion
//!
//! * `req.await` is `MPI_Wait`; [`Request::test`] is `MPI_Test`.
//! * [`wait_any`], [`test_any`], [`wait_all`], [`test_all`], [`wait_some`]
//!   and [`test_some`] take a slice of `Option<Request>`: `None` entries are
//!   MPI's null (or inactive persistent) requests, and completed entries are
//!   set to `None`, as MPI sets them to `MPI_REQUEST_NULL`. Each request
//!   reports its own result (MPI's error-in-status), never one error for
//!   the whole call. These look at every entry on each call; for many
//!   outstanding requests use a [`RequestSet`], whose work per call follows
//!   the number of requests that completed, not the number outstanding.
//! * Requests are ordinary `Unpin` futures, so they also compose with
//!   `tokio::select!`, `futures::future::select_all`, `join_all` and
//!   `FuturesUnordered`:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mpx_core::Result<()> {
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
//! # async fn main() -> mpx_core::Result<()> {
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
//! rules in [`crate::comm`]. [`Request::free`] is `MPI_Request_free` for
//! sends (the send completes on its own; a failure is reported through
//! `tracing`). [`Request::cancel`] is `MPI_Cancel`.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use crate::comm::{Completion, Shared, Status};
use crate::engine::{Delivered, ReqId};
use crate::error::Result;

/// Turns a delivered message into the receive's status, unpacking it into
/// the receive's buffer.
pub(crate) type Finish<'a> = Box<dyn FnOnce(Delivered) -> Result<Status> + Send + 'a>;

/// What a request does with its completion.
pub(crate) enum Kind<'a> {
    Send,
    Recv(Finish<'a>),
}

enum State<'a> {
    Active { shared: Arc<Shared>, id: ReqId, kind: Kind<'a> },
    /// Complete: the outcome, until it is taken.
    Complete(Option<Result<Status>>),
}

/// A nonblocking operation in flight (`MPI_Request`): a future resolving to
/// its [`Status`]. See the [module docs](self).
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
    pub(crate) fn active(shared: Arc<Shared>, id: ReqId, kind: Kind<'a>) -> Request<'a> {
        Request { state: State::Active { shared, id, kind } }
    }

    /// A request that is already complete with `outcome` (an operation on
    /// `PROC_NULL`, a buffered send, or one that failed as it started).
    pub fn completed(outcome: Result<Status>) -> Request<'a> {
        Request { state: State::Complete(Some(outcome)) }
    }

    /// An inactive request (MPI's null or inactive persistent request):
    /// awaiting it gives an empty status at once.
    pub fn inactive() -> Request<'a> {
        Request { state: State::Complete(None) }
    }

    /// Whether the operation has completed (its outcome may not be taken yet).
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
        let State::Active { shared, id, .. } = &self.state else { return Poll::Ready(()) };
        let completion = std::task::ready!(shared.poll_done(*id, cx));
        let State::Active { kind, .. } = std::mem::replace(&mut self.state, State::Complete(None)) else {
            unreachable!("checked above")
        };
        let outcome = match (kind, completion) {
            (Kind::Send, Completion::Send(r)) => r.map(|()| Status::empty()),
            (Kind::Recv(finish), Completion::Recv(r)) => r.and_then(finish),
            (Kind::Recv(_), Completion::Cancelled) => Ok(Status { cancelled: true, ..Status::empty() }),
            _ => unreachable!("a request completes as its own kind"),
        };
        self.state = State::Complete(Some(outcome));
        Poll::Ready(())
    }

    /// `MPI_Test`: the outcome if the operation has completed, without
    /// waiting. It first processes frames that have already arrived, so a
    /// loop of `test` calls makes progress even where no driver task runs.
    pub fn test(&mut self) -> Option<Result<Status>> {
        if let Some(shared) = self.shared() {
            shared.progress();
        }
        match self.poll_complete(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(()) => Some(self.take_outcome()),
            Poll::Pending => None,
        }
    }

    fn take_outcome(&mut self) -> Result<Status> {
        match &mut self.state {
            // Taken already: like MPI's null request, an empty status.
            State::Complete(outcome) => outcome.take().unwrap_or_else(|| Ok(Status::empty())),
            State::Active { .. } => unreachable!("only called on complete requests"),
        }
    }

    /// `MPI_Cancel`: withdraws a receive that has not matched; it then
    /// completes with a status whose [`Status::test_cancelled`] is true.
    /// A receive that has matched, and any send, are not affected (MPI
    /// allows a cancel to fail). Returns whether the request was cancelled.
    pub fn cancel(&mut self) -> bool {
        let State::Active { shared, id, kind: Kind::Recv(_) } = &self.state else { return false };
        let mut st = shared.lock();
        if st.engine.cancel_recv(*id) {
            st.done.insert(*id, Completion::Cancelled);
            true
        } else {
            false
        }
    }

    /// `MPI_Request_free`: lets the operation finish on its own. A send
    /// still delivers its message (its data is already owned by the
    /// engine), and a failure is reported through `tracing`. A receive is
    /// withdrawn, as when it is dropped: mpx never writes into a buffer
    /// after its borrow has ended.
    pub fn free(self) {
        drop(self)
    }
}

impl Future for Request<'_> {
    type Output = Result<Status>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Status>> {
        match self.poll_complete(cx) {
            Poll::Ready(()) => Poll::Ready(self.take_outcome()),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        match &self.state {
            State::Active { shared, id, .. } => shared.withdraw(*id),
            State::Complete(Some(Err(e))) => tracing::warn!(error = %e, "request dropped with its error untaken"),
            State::Complete(_) => {}
        }
    }
}

// ----- the operation trait -------------------------------------------------------

/// What the completion functions work on: a nonblocking operation that can
/// be polled to completion and whose outcome can then be taken. Implemented
/// by [`Request`] and by owned receives ([`OwnedRecv`](crate::OwnedRecv)),
/// so a server can keep one owned receive per client in a slice or a
/// [`RequestSet`] and re-post into a slot.
pub trait Operation: Unpin {
    /// The outcome.
    type Output;

    /// Moves the operation to its completed state if it has finished,
    /// otherwise registers the waker. Does not take the outcome.
    fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// Whether the operation has completed.
    fn is_complete(&self) -> bool;

    /// Takes the outcome of a completed operation.
    ///
    /// # Panics
    /// If the operation is not complete or its outcome was already taken.
    fn take_output(&mut self) -> Self::Output;

    /// Processes frames that have already arrived at the operation's
    /// endpoint, returning an identity for that endpoint (so callers
    /// progress each endpoint once), or `None` for completed operations.
    fn progress(&self) -> Option<usize>;
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
}

// ----- combinators over slices --------------------------------------------------

/// A random index below `n`, where a scan starts so that no request is
/// favoured whatever the shape of the caller's loop.
fn random_start(n: usize) -> usize {
    use std::cell::Cell;
    use std::hash::{BuildHasher, RandomState};
    thread_local! {
        static STATE: Cell<u64> = Cell::new(RandomState::new().hash_one(0u8) | 1);
    }
    STATE.with(|s| {
        // xorshift64
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x % n as u64) as usize
    })
}

/// Processes arrived frames at the endpoint of the first request still
/// active (the requests of one program share its endpoint).
fn progress_endpoint<'r, R: Operation + 'r>(requests: impl IntoIterator<Item = &'r Option<R>>) {
    let _ = requests.into_iter().flatten().find_map(Operation::progress);
}

/// Polls every active entry; returns the indices that are complete, or
/// `None` if there is no active entry.
fn poll_entries<R: Operation>(requests: &mut [Option<R>], cx: &mut Context<'_>) -> Option<Vec<usize>> {
    let n = requests.len();
    let start = if n == 0 { 0 } else { random_start(n) };
    let mut any = false;
    let mut done = Vec::new();
    for k in 0..n {
        let i = (start + k) % n;
        if let Some(r) = &mut requests[i] {
            any = true;
            if r.poll_complete(cx).is_ready() {
                done.push(i);
            }
        }
    }
    any.then_some(done)
}

fn take<R: Operation>(requests: &mut [Option<R>], i: usize) -> R::Output {
    let mut r = requests[i].take().expect("index of a complete request");
    r.take_output()
}

/// `MPI_Waitany`: waits until one active request completes and returns its
/// index and outcome, setting its entry to `None`; `None` if no entry is
/// active (MPI's `MPI_UNDEFINED`). The scan starts at a random index, so
/// no request is favoured.
///
/// # Cancel safety
/// Cancel-safe: dropping the future leaves every request in the slice.
pub async fn wait_any<R: Operation>(requests: &mut [Option<R>]) -> Option<(usize, R::Output)> {
    std::future::poll_fn(|cx| match poll_entries(requests, cx) {
        None => Poll::Ready(None),
        Some(done) if done.is_empty() => Poll::Pending,
        Some(done) => Poll::Ready(Some((done[0], take(requests, done[0])))),
    })
    .await
}

/// The result of a nonblocking completion test over several requests.
#[derive(Debug)]
pub enum Tested<T> {
    /// No entry is active (MPI's `MPI_UNDEFINED` index or count).
    Inactive,
    /// Nothing has completed yet.
    Pending,
    /// Completed: the outcome.
    Done(T),
}

/// `MPI_Testany`: like [`wait_any`] without waiting. Processes frames that
/// have already arrived first.
pub fn test_any<R: Operation>(requests: &mut [Option<R>]) -> Tested<(usize, R::Output)> {
    progress_endpoint(requests.iter());
    match poll_entries(requests, &mut Context::from_waker(Waker::noop())) {
        None => Tested::Inactive,
        Some(done) if done.is_empty() => Tested::Pending,
        Some(done) => Tested::Done((done[0], take(requests, done[0]))),
    }
}

/// `MPI_Waitall`: waits for every request; returns each one's outcome in
/// order (`None` for `None` entries: MPI's empty status) and sets every
/// entry to `None`.
///
/// # Cancel safety
/// Cancel-safe: completed outcomes stay in their requests until all are done.
pub async fn wait_all<R: Operation>(requests: &mut [Option<R>]) -> Vec<Option<R::Output>> {
    std::future::poll_fn(|cx| {
        let _ = poll_entries(requests, cx);
        if requests.iter().flatten().all(R::is_complete) {
            Poll::Ready(take_all(requests))
        } else {
            Poll::Pending
        }
    })
    .await
}

fn take_all<R: Operation>(requests: &mut [Option<R>]) -> Vec<Option<R::Output>> {
    requests.iter_mut().map(|r| r.take().map(|mut r| r.take_output())).collect()
}

/// `MPI_Testall`: the outcomes of all requests if all have completed (then
/// every entry is set to `None`), or `None`, leaving them all in place.
pub fn test_all<R: Operation>(requests: &mut [Option<R>]) -> Option<Vec<Option<R::Output>>> {
    progress_endpoint(requests.iter());
    let _ = poll_entries(requests, &mut Context::from_waker(Waker::noop()));
    requests.iter().flatten().all(R::is_complete).then(|| take_all(requests))
}

/// `MPI_Waitsome`: waits until at least one active request completes and
/// returns *every* completed one (index and outcome), setting their entries
/// to `None`; `None` if no entry is active.
///
/// # Cancel safety
/// Cancel-safe: dropping the future leaves every request in the slice.
pub async fn wait_some<R: Operation>(requests: &mut [Option<R>]) -> Option<Vec<(usize, R::Output)>> {
    std::future::poll_fn(|cx| match poll_entries(requests, cx) {
        None => Poll::Ready(None),
        Some(done) if done.is_empty() => Poll::Pending,
        Some(mut done) => {
            done.sort_unstable();
            Poll::Ready(Some(done.into_iter().map(|i| (i, take(requests, i))).collect()))
        }
    })
    .await
}

/// `MPI_Testsome`: like [`wait_some`] without waiting
/// (`Tested::Done` always holds at least one completion).
pub fn test_some<R: Operation>(requests: &mut [Option<R>]) -> Tested<Vec<(usize, R::Output)>> {
    progress_endpoint(requests.iter());
    match poll_entries(requests, &mut Context::from_waker(Waker::noop())) {
        None => Tested::Inactive,
        Some(done) if done.is_empty() => Tested::Pending,
        Some(mut done) => {
            done.sort_unstable();
            Tested::Done(done.into_iter().map(|i| (i, take(requests, i))).collect())
        }
    }
}

// ----- request sets ----------------------------------------------------------------

/// Slots that have been woken and need a poll.
#[derive(Default)]
struct ReadyQueue {
    inner: Mutex<ReadyInner>,
}

#[derive(Default)]
struct ReadyInner {
    ready: VecDeque<usize>,
    queued: Vec<bool>,
    waiter: Option<Waker>,
}

impl ReadyQueue {
    fn push(&self, index: usize) {
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if q.queued.len() <= index {
            q.queued.resize(index + 1, false);
        }
        if !q.queued[index] {
            q.queued[index] = true;
            q.ready.push_back(index);
        }
        let waiter = q.waiter.take();
        drop(q);
        if let Some(w) = waiter {
            w.wake();
        }
    }

    fn pop(&self) -> Option<usize> {
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let i = q.ready.pop_front()?;
        q.queued[i] = false;
        Some(i)
    }
}

/// The waker a set gives one slot's request: waking it queues the slot.
struct SlotWaker {
    index: usize,
    queue: Arc<ReadyQueue>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.queue.push(self.index);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.queue.push(self.index);
    }
}

/// What polling a [`RequestSet`] yields: the completed slots with their
/// outputs, or `None` when no slot is active.
type SetPoll<R> = Poll<Option<Vec<(usize, <R as Operation>::Output)>>>;

/// A collection of requests whose completion functions cost in proportion
/// to what completed, not to how many are outstanding: each request is
/// polled with a waker of its own slot, and only woken slots are polled
/// again (the approach of `FuturesUnordered`), while slots keep stable
/// indices so a server can re-post into slot `i` as MPI programs do.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// # mpx_net::loopback::launch(1, |world| async move {
/// use mpx_core::request::RequestSet;
/// let (mut a, mut b) = ([0u32], [0u32]);
/// let mut set = RequestSet::new();
/// set.push(world.irecv(&mut a, 0, 1));
/// set.push(world.irecv(&mut b, 0, 2));
/// world.send(&[20u32], 0, 2).await?;
/// let done = set.wait_some().await.unwrap();
/// assert_eq!(done.len(), 1);
/// assert_eq!(done[0].0, 1);
/// drop(set);
/// assert_eq!(b, [20]);
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub struct RequestSet<R: Operation> {
    slots: Vec<Option<R>>,
    /// Completed outcomes not yet returned (by `wait_any`).
    finished: VecDeque<(usize, R::Output)>,
    wakers: Vec<Waker>,
    queue: Arc<ReadyQueue>,
    polls: u64,
}

impl<R: Operation> Default for RequestSet<R> {
    fn default() -> Self {
        RequestSet::new()
    }
}

impl<R: Operation> RequestSet<R> {
    /// An empty set.
    pub fn new() -> RequestSet<R> {
        RequestSet { slots: Vec::new(), finished: VecDeque::new(), wakers: Vec::new(), queue: Arc::default(), polls: 0 }
    }

    /// Adds a request in a new slot and returns the slot's index.
    pub fn push(&mut self, request: R) -> usize {
        let index = self.slots.len();
        self.slots.push(None);
        self.wakers.push(Waker::from(Arc::new(SlotWaker { index, queue: self.queue.clone() })));
        self.set(index, request);
        index
    }

    /// Puts `request` in slot `index` (which must exist), replacing and
    /// dropping what was there.
    ///
    /// # Panics
    /// If `index` is not a slot of the set.
    pub fn set(&mut self, index: usize, request: R) {
        self.slots[index] = Some(request);
        self.queue.push(index);
    }

    /// Number of slots (active or not).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the set has no slots.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Number of requests not yet returned.
    pub fn active(&self) -> usize {
        self.slots.iter().flatten().count() + self.finished.len()
    }

    /// Total number of request polls the set has made (a measure of the
    /// work its completion functions did).
    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// Polls the woken slots; returns the completed ones, or `None` if no
    /// slot is active.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> SetPoll<R> {
        loop {
            let mut done: Vec<_> = self.finished.drain(..).collect();
            while let Some(i) = self.queue.pop() {
                let Some(r) = &mut self.slots[i] else { continue };
                self.polls += 1;
                if r.poll_complete(&mut Context::from_waker(&self.wakers[i])).is_ready() {
                    let outcome = r.take_output();
                    self.slots[i] = None;
                    done.push((i, outcome));
                }
            }
            if !done.is_empty() {
                return Poll::Ready(Some(done));
            }
            if self.slots.iter().all(Option::is_none) {
                return Poll::Ready(None);
            }
            let mut q = self.queue.inner.lock().unwrap_or_else(|e| e.into_inner());
            if q.ready.is_empty() {
                q.waiter = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
    }

    /// `MPI_Waitsome` over the set: waits until at least one request
    /// completes and returns every completed one (slot index and outcome),
    /// in completion order; the slots become empty. `None` if no slot is
    /// active.
    ///
    /// # Cancel safety
    /// Cancel-safe: requests stay in their slots until returned.
    pub async fn wait_some(&mut self) -> Option<Vec<(usize, R::Output)>> {
        std::future::poll_fn(|cx| self.poll_ready(cx)).await
    }

    /// `MPI_Waitany` over the set: the first request to complete (in
    /// completion order; others that completed stay ready for the next
    /// call). `None` if no slot is active.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn wait_any(&mut self) -> Option<(usize, R::Output)> {
        // Completed requests not returned now are re-queued in order.
        let mut done = self.wait_some().await?;
        let first = done.remove(0);
        self.finished.extend(done);
        Some(first)
    }

    /// `MPI_Testsome` over the set, processing arrived frames first.
    pub fn test_some(&mut self) -> Tested<Vec<(usize, R::Output)>> {
        progress_endpoint(&self.slots);
        match self.poll_ready(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(None) => Tested::Inactive,
            Poll::Ready(Some(done)) => Tested::Done(done),
            Poll::Pending => Tested::Pending,
        }
    }

    /// Takes the request out of slot `index`, leaving it empty.
    pub fn take(&mut self, index: usize) -> Option<R> {
        self.slots.get_mut(index).and_then(Option::take)
    }
}
