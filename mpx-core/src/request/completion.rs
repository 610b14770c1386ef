//! MPI's `MPI_Waitall` over any collection of requests ([`wait_all`]),
//! and what the slot functions of [`RequestSet`](super::RequestSet)
//! return ([`Tested`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Operation;

/// The result of a nonblocking completion test over several requests.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |world| async move {
/// use mpx::{RequestSet, Tested};
/// let mut set = RequestSet::new();
/// assert!(matches!(set.test_some(), Tested::Inactive), "no request in the set");
/// set.push(world.recv::<u8>(0, 0));
/// assert!(matches!(set.test_some(), Tested::Pending), "nothing sent yet");
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[derive(Debug)]
pub enum Tested<T> {
    /// No request is active (MPI's `MPI_UNDEFINED` index or count).
    Inactive,
    /// Nothing has completed yet.
    Pending,
    /// Completed: the outcome.
    Done(T),
}

/// `MPI_Waitall`: waits for every request of a vector, an array or any
/// iterator, and returns each one's outcome in order. The requests are
/// taken (the iterator is run to its end) when `wait_all` is called, so
/// requests an iterator creates start then, not when the future is first
/// polled. They are consumed, so the buffers they borrowed are free again
/// when it returns.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(2, |comm| async move {
/// use mpx::wait_all;
/// let other = 1 - comm.rank();
/// let mut inbox = [[0u8; 2]; 3];
/// let recvs = wait_all(inbox.iter_mut().enumerate().map(|(tag, b)| comm.irecv(b, other, tag as i32)));
/// let sends = wait_all((0..3).map(|tag| comm.isend(&[tag as u8; 2], other, tag))); // started here
/// for outcome in sends.await {
///     outcome?;
/// }
/// for outcome in recvs.await {
///     outcome?;
/// }
/// assert_eq!(inbox, [[0, 0], [1, 1], [2, 2]]); // the borrows have ended
/// # Ok(()) }).await?; Ok(()) }
/// ```
///
/// `None` entries are MPI's null requests (no outcome), and `&mut`
/// requests are waited for in place (their outcomes are taken: awaiting a
/// [`Request`](crate::Request) again gives an empty status, as MPI's null
/// request does, a single-value receive an error; an owned receive's
/// outcome, its buffer, cannot be taken twice, and doing so panics, but
/// an owned receive held in an `Option` gives `None` once taken):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |world| async move {
/// use mpx::wait_all;
/// let mut slots = [None, Some(world.isend(&1u8, 0, 0))];
/// let outcomes = wait_all(&mut slots).await;
/// assert!(outcomes[0].is_none() && outcomes[1].as_ref().is_some_and(|r| r.is_ok()));
/// assert_eq!(world.recv::<u8>(0, 0).await?.0, 1);
/// # Ok(()) }).await?; Ok(()) }
/// ```
///
/// # Panics
/// When it completes, if it holds an owned receive
/// ([`OwnedRecv`](crate::OwnedRecv)) whose outcome was taken already
/// (one lent by `&mut`, or tested first): it has no buffer left to give.
pub fn wait_all<R: Operation>(requests: impl IntoIterator<Item = R>) -> WaitAll<R> {
    let requests: Vec<R> = requests.into_iter().collect();
    let movers = requests.iter().enumerate().filter(|(_, r)| r.moves_when_polled()).map(|(i, _)| i).collect();
    WaitAll { requests, finished: 0, movers }
}

/// The future of [`wait_all`].
///
/// # Cancel safety
/// Dropping it drops the requests (each as its own drop says: sends
/// complete in the background, receives are withdrawn or give their
/// message back).
#[must_use = "wait_all does nothing unless awaited; dropping it drops the requests"]
pub struct WaitAll<R: Operation> {
    requests: Vec<R>,
    /// Requests before this index have finished, their outcomes not taken
    /// yet (see [`Operation::poll_settled`]).
    finished: usize,
    /// The requests that move on only while polled (collectives), by index.
    movers: Vec<usize>,
}

impl<R: Operation> std::fmt::Debug for WaitAll<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WaitAll({} of {} finished)", self.finished, self.requests.len())
    }
}

impl<R: Operation> Future for WaitAll<R> {
    type Output = Vec<R::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<R::Output>> {
        let this = &mut *self;
        // Waiting on the first unfinished request is enough for requests:
        // every one is needed, and the endpoint completes them whichever is
        // polled. Collectives move on only while polled, and ranks may wait
        // for theirs in other orders: those after it are polled too. No
        // outcome is taken before all have finished, so that dropping this
        // future undoes every request alike (a receive gives its message
        // back).
        while let Some(r) = this.requests.get_mut(this.finished) {
            if r.poll_settled(cx).is_pending() {
                let later = this.movers.iter().skip_while(|&&i| i <= this.finished);
                for &i in later {
                    let r = &mut this.requests[i];
                    if !r.is_complete() {
                        let _ = r.poll_settled(cx);
                    }
                }
                return Poll::Pending;
            }
            this.finished += 1;
        }
        // Every request has finished: each completes when polled now.
        for r in &mut this.requests {
            if !r.is_inactive() && r.poll_complete(cx).is_pending() {
                return Poll::Pending;
            }
        }
        let outcome = |mut r: R| match r.is_inactive() {
            true => r.take_inactive().unwrap_or_else(|| r.take_output()),
            false => r.take_output(),
        };
        Poll::Ready(std::mem::take(&mut this.requests).into_iter().map(outcome).collect())
    }
}
