//! MPI's completion functions: [`wait_all`] over any collection of
//! requests, and the slot functions `wait_any`, `test_any`, `test_all`,
//! `wait_some`, `test_some` over `&mut [Option<R>]`, where `None` is MPI's
//! null request and a completed request's slot becomes `None` (for many
//! requests, [`RequestSet`](super::RequestSet) does the same at a cost
//! that follows what completed).

use std::task::{Context, Poll, Waker};

use super::Operation;

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
pub(crate) fn progress_endpoint<'r, R: Operation + 'r>(requests: impl IntoIterator<Item = &'r Option<R>>) {
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
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// # mpx_net::loopback::launch(1, |world| async move {
/// use mpx_core::wait_any;
/// let (mut a, mut b) = (0u8, 0u8);
/// let mut reqs = [Some(world.irecv(&mut a, 0, 0)), Some(world.irecv(&mut b, 0, 1))];
/// world.send(&9u8, 0, 1).await?;
/// let (index, status) = wait_any(&mut reqs).await.expect("two are active");
/// assert_eq!((index, status?.tag), (1, Some(1)));
/// assert!(reqs[1].is_none() && reqs[0].is_some());
/// drop(reqs);
/// assert_eq!(b, 9);
/// # Ok(()) }).await?; Ok(()) }
/// ```
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
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// # mpx_net::loopback::launch(1, |world| async move {
/// use mpx_core::{test_any, Tested};
/// let mut got = 0u8;
/// let mut reqs = [None, Some(world.irecv(&mut got, 0, 0))];
/// assert!(matches!(test_any(&mut reqs), Tested::Pending), "nothing sent yet");
/// world.send(&3u8, 0, 0).await?;
/// let (index, status) = loop {
///     if let Tested::Done(done) = test_any(&mut reqs) { break done; }
/// };
/// assert_eq!((index, status?.bytes), (1, 1));
/// assert!(matches!(test_any(&mut reqs), Tested::Inactive), "every entry is None now");
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub fn test_any<R: Operation>(requests: &mut [Option<R>]) -> Tested<(usize, R::Output)> {
    progress_endpoint(requests.iter());
    match poll_entries(requests, &mut Context::from_waker(Waker::noop())) {
        None => Tested::Inactive,
        Some(done) if done.is_empty() => Tested::Pending,
        Some(done) => Tested::Done((done[0], take(requests, done[0]))),
    }
}

/// `MPI_Waitall`: waits for every request of a vector, an array or any
/// iterator, and returns each one's outcome in order. The requests are
/// consumed, so the buffers they borrowed are free again when it returns.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// # mpx_net::loopback::launch(2, |comm| async move {
/// use mpx_core::wait_all;
/// let other = 1 - comm.rank();
/// let mut inbox = [[0u8; 2]; 3];
/// let recvs = inbox.iter_mut().enumerate().map(|(tag, b)| comm.irecv(b, other, tag as i32));
/// let recvs: Vec<_> = recvs.collect();
/// let sends = (0..3).map(|tag| comm.isend(&[tag as u8; 2], other, tag));
/// for outcome in wait_all(sends).await {
///     outcome?;
/// }
/// for outcome in wait_all(recvs).await {
///     outcome?;
/// }
/// assert_eq!(inbox, [[0, 0], [1, 1], [2, 2]]); // the borrows have ended
/// # Ok(()) }).await?; Ok(()) }
/// ```
///
/// # Cancel safety
/// Dropping the future drops the requests (each as its own drop says:
/// sends complete in the background, receives are withdrawn or give their
/// message back).
pub async fn wait_all<R: Operation>(requests: impl IntoIterator<Item = R>) -> Vec<R::Output> {
    let mut requests: Vec<Option<R>> = requests.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let _ = poll_entries(&mut requests, cx);
        if requests.iter().flatten().all(R::is_complete) {
            Poll::Ready(take_all(&mut requests).into_iter().flatten().collect())
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
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// # mpx_net::loopback::launch(1, |world| async move {
/// use mpx_core::test_all;
/// let (mut a, mut b) = (0u8, 0u8);
/// let mut reqs = [Some(world.irecv(&mut a, 0, 0)), Some(world.irecv(&mut b, 0, 1))];
/// world.send(&1u8, 0, 0).await?;
/// assert!(test_all(&mut reqs).is_none(), "tag 1 is not sent yet");
/// world.send(&2u8, 0, 1).await?;
/// let outcomes = loop {
///     if let Some(outcomes) = test_all(&mut reqs) { break outcomes; }
/// };
/// assert!(outcomes.into_iter().all(|o| o.is_some_and(|r| r.is_ok())) && reqs.iter().all(Option::is_none));
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub fn test_all<R: Operation>(requests: &mut [Option<R>]) -> Option<Vec<Option<R::Output>>> {
    progress_endpoint(requests.iter());
    let _ = poll_entries(requests, &mut Context::from_waker(Waker::noop()));
    requests.iter().flatten().all(R::is_complete).then(|| take_all(requests))
}

/// `MPI_Waitsome`: waits until at least one active request completes and
/// returns *every* completed one (index and outcome), setting their entries
/// to `None`; `None` if no entry is active.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// # mpx_net::loopback::launch(1, |world| async move {
/// use mpx_core::wait_some;
/// let (mut a, mut b) = (0u8, 0u8);
/// let mut reqs = [Some(world.irecv(&mut a, 0, 0)), None, Some(world.irecv(&mut b, 0, 1))];
/// world.send(&5u8, 0, 1).await?;
/// let done = wait_some(&mut reqs).await.unwrap();
/// assert_eq!(done.len(), 1);
/// assert_eq!(done[0].0, 2);
/// assert!(reqs[2].is_none() && reqs[0].is_some());
/// # Ok(()) }).await?; Ok(()) }
/// ```
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
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// # mpx_net::loopback::launch(1, |world| async move {
/// use mpx_core::{test_some, Tested};
/// let (mut a, mut b) = (0u8, 0u8);
/// let mut reqs = [Some(world.irecv(&mut a, 0, 0)), Some(world.irecv(&mut b, 0, 1))];
/// world.send(&1u8, 0, 1).await?;
/// let done = loop {
///     if let Tested::Done(done) = test_some(&mut reqs) { break done; }
/// };
/// assert_eq!((done.len(), done[0].0), (1, 1));
/// assert!(matches!(test_some(&mut reqs), Tested::Pending), "tag 0 is not sent");
/// # Ok(()) }).await?; Ok(()) }
/// ```
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

