//! [`RequestSet`]: many outstanding requests, one poll per completion.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use super::completion::Tested;
use super::Operation;

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

    /// Number of slots woken and not taken yet.
    fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).ready.len()
    }

    /// Takes the slot woken first, if any.
    fn pop(&self) -> Option<usize> {
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let index = q.ready.pop_front()?;
        q.queued[index] = false;
        Some(index)
    }

    /// Takes every slot woken so far; slots woken from now on queue anew.
    fn take_all(&self) -> VecDeque<usize> {
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let ready = std::mem::take(&mut q.ready);
        for &i in &ready {
            q.queued[i] = false;
        }
        ready
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
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |world| async move {
/// use mpx::request::RequestSet;
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
    /// Slots whose requests `wait_all` or `test_all` found finished, in
    /// that order, their outcomes not taken (see
    /// [`Operation::poll_settled`]): dropped, they are undone as any
    /// request in a slot is. A slot emptied or refilled since stays listed
    /// until it comes up, and is passed over then (`is_settled` says
    /// which entries hold).
    settled: VecDeque<usize>,
    /// Per slot, whether its request is settled (listed in `settled`).
    is_settled: Vec<bool>,
    /// Slots whose `is_settled` holds.
    settled_count: usize,
    /// Slots holding an active request (not null nor inactive), kept as
    /// they change so that no call counts them.
    active: usize,
    /// The slot whose request's endpoint a test last progressed (see
    /// [`progress`](RequestSet::progress)).
    progress_from: usize,
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
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::RequestSet;
    /// let mut set = RequestSet::new();
    /// assert!(set.is_empty());
    /// set.push(world.recv::<u8>(0, 0)); // any Operation: here a receive of one value
    /// world.send(&9u8, 0, 0).await?; // to itself
    /// let (slot, outcome) = set.wait_any().await.unwrap();
    /// assert_eq!((slot, outcome?.0), (0, 9));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn new() -> RequestSet<R> {
        RequestSet { slots: Vec::new(), settled: VecDeque::new(), is_settled: Vec::new(), settled_count: 0, active: 0, progress_from: 0, wakers: Vec::new(), queue: Arc::default(), polls: 0 }
    }

    /// Adds a request in a new slot and returns the slot's index.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::request::RequestSet;
    /// let (mut a, mut b) = (0u8, 0u8);
    /// let mut set = RequestSet::new();
    /// assert_eq!(set.push(world.irecv(&mut a, 0, 0)), 0);
    /// assert_eq!(set.push(world.irecv(&mut b, 0, 1)), 1);
    /// world.send(&7u8, 0, 1).await?;
    /// let (slot, outcome) = set.wait_any().await.unwrap();
    /// assert_eq!((slot, outcome?.tag), (1, Some(1)));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn push(&mut self, request: R) -> usize {
        let index = self.slots.len();
        self.slots.push(None);
        self.is_settled.push(false);
        self.wakers.push(Waker::from(Arc::new(SlotWaker { index, queue: self.queue.clone() })));
        self.put(index, request);
        index
    }

    /// Puts `request` in slot `index` (which must exist), replacing and
    /// dropping what was there (a receive not returned yet is withdrawn,
    /// and its message, if it has one, goes back to the queue).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::RequestSet;
    /// let mut set = RequestSet::new();
    /// let slot = set.push(world.recv::<u32>(0, 0));
    /// for n in 1..=3u32 {
    ///     world.send(&n, 0, 0).await?; // to itself
    ///     let (done, outcome) = set.wait_any().await.unwrap();
    ///     assert_eq!((done, outcome?.0), (slot, n));
    ///     set.set(slot, world.recv::<u32>(0, 0))?; // re-post into the emptied slot
    /// }
    /// assert_eq!((set.len(), set.active()), (1, 1));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// A slot the set does not have is
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument), and
    /// `request` is dropped (a receive is withdrawn, a send completes on
    /// its own).
    pub fn set(&mut self, index: usize, request: R) -> crate::Result<()> {
        if index >= self.slots.len() {
            return Err(crate::ErrorKind::InvalidArgument(format!("slot {index} of a set of {}", self.slots.len())).into());
        }
        self.put(index, request);
        Ok(())
    }

    /// Puts `request` in slot `index`, which exists, and has it polled
    /// (an inactive request has nothing to poll: it waits for `wait_all`).
    fn put(&mut self, index: usize, request: R) {
        let active = !request.is_inactive();
        drop(self.take(index));
        self.slots[index] = Some(request);
        if active {
            self.active += 1;
            self.queue.push(index);
        }
    }

    /// Empties slot `index`, which exists, of a request that has finished
    /// and returns its outcome.
    fn take_finished(&mut self, index: usize) -> Option<R::Output> {
        let mut request = self.slots[index].take()?;
        self.active -= 1;
        Some(request.take_output())
    }

    /// Number of slots (active or not).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::request::RequestSet;
    /// let mut x = 0u8;
    /// let mut set = RequestSet::new();
    /// set.push(world.irecv(&mut x, 0, 0));
    /// world.send(&1u8, 0, 0).await?;
    /// set.wait_some().await;
    /// assert_eq!((set.len(), set.active()), (1, 0)); // the slot stays, empty
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the set has no slots.
    ///
    /// ```
    /// use mpx::{request::RequestSet, Request};
    /// let mut set = RequestSet::new();
    /// assert!(set.is_empty());
    /// set.push(Request::inactive());
    /// assert!(!set.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Number of active requests not yet returned (null and inactive
    /// ones, such as [`Request::inactive`](crate::Request::inactive), are
    /// not counted: `wait_any` and `wait_some` pass over them).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::RequestSet;
    /// let mut set: RequestSet<_> = (0..3).map(|tag| world.recv::<u8>(0, tag)).collect();
    /// assert_eq!(set.active(), 3);
    /// world.send(&1u8, 0, 0).await?; // to itself
    /// world.send(&2u8, 0, 1).await?;
    /// set.wait_any().await.unwrap().1?;
    /// assert_eq!(set.active(), 2); // tag 1's outcome is not returned yet
    /// set.wait_any().await.unwrap().1?;
    /// assert_eq!((set.active(), set.len()), (1, 3));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn active(&self) -> usize {
        self.active
    }

    /// Total number of request polls the set has made (a measure of the
    /// work its completion functions did).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::request::RequestSet;
    /// let mut bufs = [0u8; 10];
    /// let mut set = RequestSet::new();
    /// for (tag, b) in bufs.iter_mut().enumerate() {
    ///     set.push(world.irecv(b, 0, tag as i32));
    /// }
    /// let _ = set.test_some(); // polls each new request once
    /// assert_eq!(set.polls(), 10);
    /// world.send(&1u8, 0, 7).await?;
    /// set.wait_some().await;
    /// assert_eq!(set.polls(), 11); // only the woken request was polled again
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// Polls the woken slots (each with its slot's waker) and returns the
    /// ones that completed, their slots emptied, up to `most` of them
    /// (slots found finished by `wait_all` or `test_all` first): woken
    /// slots left when `most` have completed are not polled, and stay
    /// queued for the next call, their requests in their slots. Inactive
    /// requests stay in their slots, for `wait_all`.
    ///
    /// Each slot is polled at most once per call: a request that wakes
    /// itself while polled (an any-source receive that only this rank's
    /// own messages can still match, whose second poll in a row fails it)
    /// is polled again only after the calling task has yielded, so that
    /// whatever else it had ready to run (a send to itself) runs first.
    fn poll_woken(&mut self, most: usize) -> Vec<(usize, R::Output)> {
        let mut done = Vec::new();
        // Slots woken before this call: a settled slot polled below may
        // wake itself, and is polled again in the next call, not this one.
        let mut woken = self.queue.len();
        // Settled slots polled that did not complete (rare: see
        // `poll_all`), not to be polled again in this call.
        let mut still_pending = Vec::new();
        while done.len() < most {
            let Some(i) = self.settled.pop_front() else { break };
            if self.unsettle(i) && !self.poll_slot(i, &mut done) {
                still_pending.push(i);
            }
        }
        // One woken slot at a time, of those woken before this call (a
        // slot that wakes itself while polled comes after them): those not
        // polled stay queued.
        while done.len() < most && woken > 0 {
            woken -= 1;
            let Some(i) = self.queue.pop() else { break };
            if !self.is_settled[i] && !still_pending.contains(&i) {
                self.poll_slot(i, &mut done);
            }
        }
        done
    }

    /// Whether slot `i` was settled; it is not from now on.
    fn unsettle(&mut self, i: usize) -> bool {
        let was = std::mem::take(&mut self.is_settled[i]);
        self.settled_count -= usize::from(was);
        was
    }

    /// Polls slot `i`'s request, if it is active, and moves its outcome to
    /// `done` if it completed; whether nothing is left pending there.
    fn poll_slot(&mut self, i: usize, done: &mut Vec<(usize, R::Output)>) -> bool {
        let Some(r) = &mut self.slots[i] else { return true };
        if r.is_inactive() {
            return true;
        }
        self.polls += 1;
        if r.poll_complete(&mut Context::from_waker(&self.wakers[i])).is_pending() {
            return false;
        }
        if let Some(outcome) = self.take_finished(i) {
            done.push((i, outcome));
        }
        true
    }

    /// Arranges for `cx` to be woken when a slot is: at once if slots woke
    /// while they were polled (come back after yielding).
    fn park(&self, cx: &mut Context<'_>) {
        let mut q = self.queue.inner.lock().unwrap_or_else(|e| e.into_inner());
        if q.ready.is_empty() {
            let earlier = match &q.waiter {
                Some(w) if w.will_wake(cx.waker()) => None,
                _ => q.waiter.replace(cx.waker().clone()),
            };
            // A waker may be the last owner of its task, whose drop may
            // complete a request of this set: dropped once the lock is
            // released, since completing it wakes the set.
            drop(q);
            drop(earlier);
        } else {
            drop(q);
            cx.waker().wake_by_ref();
        }
    }

    /// Up to `most` completed slots, or `None` if no slot is active.
    fn poll_ready(&mut self, cx: &mut Context<'_>, most: usize) -> SetPoll<R> {
        let done = self.poll_woken(most);
        if !done.is_empty() {
            return Poll::Ready(Some(done));
        }
        if self.active == 0 {
            return Poll::Ready(None);
        }
        self.park(cx);
        Poll::Pending
    }

    /// Every outcome once every active request has finished, in slot
    /// order. Until then, requests that finish stay in their slots with
    /// their outcomes (see [`Operation::poll_settled`]), so that dropping
    /// the set, or replacing a slot's request, undoes them as it undoes
    /// the others.
    fn poll_all(&mut self, cx: &mut Context<'_>) -> Poll<Vec<(usize, R::Output)>> {
        for i in self.queue.take_all() {
            let Some(r) = &mut self.slots[i] else { continue };
            if r.is_inactive() || self.is_settled[i] {
                continue;
            }
            self.polls += 1;
            if r.poll_settled(&mut Context::from_waker(&self.wakers[i])).is_ready() {
                self.is_settled[i] = true;
                self.settled_count += 1;
                self.settled.push_back(i);
            }
        }
        if self.settled_count < self.active {
            self.park(cx);
            return Poll::Pending;
        }
        // Every active request has finished. Looked at again first (a test
        // does not settle what only a wait may, and a request settled by a
        // wait given up may be such), then completed, its outcome still in
        // it (an operation whose `poll_complete` does not find what its
        // `poll_settled` did is waited for again, woken by its own waker):
        // only once all are complete are the outcomes taken.
        if !self.each_settled(Operation::poll_settled) || !self.each_settled(Operation::poll_complete) {
            self.park(cx);
            return Poll::Pending;
        }
        let mut all = Vec::with_capacity(self.active);
        while let Some(i) = self.settled.pop_front() {
            if self.unsettle(i) {
                all.extend(self.take_finished(i).map(|outcome| (i, outcome)));
            }
        }
        // Null and inactive requests: an empty outcome each (MPI_Waitall),
        // where the kind of request has one to give.
        for (slot, request) in self.slots.iter_mut().enumerate() {
            if let Some(outcome) = request.take().and_then(|mut inactive| inactive.take_inactive()) {
                all.push((slot, outcome));
            }
        }
        all.sort_by_key(|(slot, _)| *slot);
        Poll::Ready(all)
    }

    /// Polls every settled request not complete yet with `poll` (each with
    /// its slot's waker); at the first that is pending, unsettles it and
    /// returns false.
    fn each_settled(&mut self, poll: impl Fn(&mut R, &mut Context<'_>) -> Poll<()>) -> bool {
        for i in 0..self.slots.len() {
            let Some(r) = &mut self.slots[i] else { continue };
            if !self.is_settled[i] || r.is_complete() {
                continue;
            }
            self.polls += 1;
            if poll(r, &mut Context::from_waker(&self.wakers[i])).is_pending() {
                self.unsettle(i);
                return false;
            }
        }
        true
    }

    /// `MPI_Waitsome` over the set: waits until at least one request
    /// completes and returns every completed one (slot index and outcome),
    /// in completion order; the slots become empty. `None` if no slot is
    /// active (as MPI, it passes over null and inactive requests, such as
    /// [`Request::inactive`](crate::Request::inactive): they stay in their
    /// slots, and `wait_all` returns them).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::request::RequestSet;
    /// let mut bufs = [0u8; 3];
    /// let mut set = RequestSet::new();
    /// for (tag, b) in bufs.iter_mut().enumerate() {
    ///     set.push(world.irecv(b, 0, tag as i32));
    /// }
    /// world.send(&10u8, 0, 0).await?;
    /// world.send(&12u8, 0, 2).await?;
    /// let done = set.wait_some().await.unwrap();
    /// assert_eq!(done.iter().map(|(slot, _)| *slot).collect::<Vec<_>>(), [0, 2]);
    /// assert_eq!(set.active(), 1);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe: requests stay in their slots until returned.
    pub async fn wait_some(&mut self) -> Option<Vec<(usize, R::Output)>> {
        std::future::poll_fn(|cx| self.poll_ready(cx, usize::MAX)).await
    }

    /// `MPI_Waitany` over the set: the first request to complete (in
    /// completion order; the others stay in their slots, those that woke
    /// first in line for the next call). `None` if no slot holds an active
    /// request (MPI_UNDEFINED: null and inactive requests are passed over,
    /// as in `wait_some`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::RequestSet;
    /// let mut set: RequestSet<_> = (0..2).map(|tag| world.recv::<u16>(0, tag)).collect();
    /// world.send(&7u16, 0, 1).await?; // to itself
    /// let (slot, outcome) = set.wait_any().await.unwrap();
    /// assert_eq!((slot, outcome?.0), (1, 7));
    /// world.send(&5u16, 0, 0).await?;
    /// let (slot, outcome) = set.wait_any().await.unwrap();
    /// assert_eq!((slot, outcome?.0), (0, 5));
    /// assert!(set.wait_any().await.is_none(), "no slot is active");
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe: requests stay in their slots until returned.
    pub async fn wait_any(&mut self) -> Option<(usize, R::Output)> {
        let done = std::future::poll_fn(|cx| self.poll_ready(cx, 1)).await?;
        done.into_iter().next()
    }

    /// `MPI_Testsome` over the set, processing arrived frames first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::{RequestSet, Tested};
    /// let mut set: RequestSet<_> = (0..3).map(|tag| world.recv::<u8>(0, tag)).collect();
    /// assert!(matches!(set.test_some(), Tested::Pending), "nothing sent yet");
    /// world.send(&10u8, 0, 0).await?; // to itself
    /// world.send(&12u8, 0, 2).await?;
    /// let mut got = Vec::new();
    /// while got.len() < 2 {
    ///     if let Tested::Done(done) = set.test_some() {
    ///         for (slot, outcome) in done {
    ///             got.push((slot, outcome?.0));
    ///         }
    ///     }
    /// }
    /// got.sort();
    /// assert_eq!(got, [(0, 10), (2, 12)]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn test_some(&mut self) -> Tested<Vec<(usize, R::Output)>> {
        self.test_up_to(usize::MAX)
    }

    /// Processes frames that have already arrived at the endpoint of an
    /// active request (the requests of one program share its endpoint;
    /// those of other endpoints move with their endpoints' drivers),
    /// looking from the slot that had one last time: a loop of tests that
    /// empties the slots in order does not look past the emptied ones on
    /// every call.
    fn progress(&mut self) {
        let n = self.slots.len();
        for k in 0..n {
            let i = (self.progress_from + k) % n;
            if self.slots[i].as_ref().and_then(Operation::progress).is_some() {
                self.progress_from = i;
                return;
            }
        }
    }

    /// `test_some` returning at most `most` outcomes.
    fn test_up_to(&mut self, most: usize) -> Tested<Vec<(usize, R::Output)>> {
        self.progress();
        match crate::runtime::looking(|| self.poll_ready(&mut Context::from_waker(Waker::noop()), most)) {
            Poll::Ready(None) => Tested::Inactive,
            Poll::Ready(Some(done)) => Tested::Done(done),
            Poll::Pending => Tested::Pending,
        }
    }

    /// `MPI_Testany` over the set: the first completed request, without
    /// waiting (the others stay in their slots for the next call).
    /// Processes arrived frames first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::{RequestSet, Tested};
    /// let mut set: RequestSet<_> = (0..2).map(|tag| world.recv::<u16>(0, tag)).collect();
    /// assert!(matches!(set.test_any(), Tested::Pending), "nothing sent yet");
    /// world.send(&500u16, 0, 1).await?;
    /// let (slot, outcome) = loop {
    ///     if let Tested::Done(done) = set.test_any() { break done; }
    /// };
    /// assert_eq!((slot, outcome?.0), (1, 500));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn test_any(&mut self) -> Tested<(usize, R::Output)> {
        match self.test_up_to(1) {
            Tested::Done(done) => done.into_iter().next().map_or(Tested::Pending, Tested::Done),
            Tested::Pending => Tested::Pending,
            Tested::Inactive => Tested::Inactive,
        }
    }

    /// `MPI_Waitall` over the set: waits until no slot holds an incomplete
    /// request and returns every outcome not returned yet, in slot order,
    /// null and inactive requests included (an empty outcome each, as
    /// MPI's empty status); every slot is empty afterwards (an empty vector
    /// if every slot was). For requests that need no slots, the free function
    /// [`wait_all`](crate::wait_all) does the same over any collection.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::RequestSet;
    /// let mut set: RequestSet<_> = (0..3).map(|tag| world.recv::<u8>(0, tag)).collect();
    /// for tag in [2, 0, 1] {
    ///     world.send(&(tag as u8 * 10), 0, tag).await?;
    /// }
    /// let all = set.wait_all().await;
    /// let got: Vec<(usize, u8)> = all.into_iter().map(|(slot, r)| (slot, r.unwrap().0)).collect();
    /// assert_eq!(got, [(0, 0), (1, 10), (2, 20)]);
    /// assert_eq!(set.active(), 0);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe: the requests stay in their slots, their outcomes not
    /// taken, until every one has finished.
    pub async fn wait_all(&mut self) -> Vec<(usize, R::Output)> {
        std::future::poll_fn(|cx| self.poll_all(cx)).await
    }

    /// `MPI_Testall` over the set: every outcome, in slot order, if no slot
    /// holds an incomplete request (then every slot is empty); otherwise
    /// `None`, and the requests stay in their slots, their outcomes not
    /// taken, so that dropping the set undoes them as it undoes the
    /// others. Processes arrived frames first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::RequestSet;
    /// let mut set: RequestSet<_> = (0..2).map(|tag| world.recv::<u8>(0, tag)).collect();
    /// world.send(&1u8, 0, 0).await?;
    /// assert!(set.test_all().is_none(), "tag 1 is not sent yet");
    /// world.send(&2u8, 0, 1).await?;
    /// let all = loop {
    ///     if let Some(all) = set.test_all() { break all; }
    /// };
    /// assert_eq!(all.len(), 2);
    /// assert_eq!(set.active(), 0);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn test_all(&mut self) -> Option<Vec<(usize, R::Output)>> {
        self.progress();
        match crate::runtime::looking(|| self.poll_all(&mut Context::from_waker(Waker::noop()))) {
            Poll::Ready(all) => Some(all),
            Poll::Pending => None,
        }
    }

    /// Takes the request out of slot `index`, leaving it empty; `None` if
    /// the slot is empty.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |world| async move {
    /// use mpx::request::RequestSet;
    /// let mut x = 0u8;
    /// let mut set = RequestSet::new();
    /// let slot = set.push(world.irecv(&mut x, 0, 0));
    /// let recv = set.take(slot).unwrap();
    /// assert!(set.take(slot).is_none()); // the slot is empty now
    /// world.send(&3u8, 0, 0).await?;
    /// recv.await?;
    /// drop(set);
    /// assert_eq!(x, 3);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn take(&mut self, index: usize) -> Option<R> {
        let request = self.slots.get_mut(index).and_then(Option::take)?;
        if !request.is_inactive() {
            self.active -= 1;
        }
        // Its entry in `settled`, if any, is passed over when it comes up;
        // such entries are cleared out before they outnumber the others.
        if self.unsettle(index) && self.settled.len() > 2 * self.settled_count + 16 {
            let (is_settled, mut listed) = (&self.is_settled, vec![false; self.slots.len()]);
            self.settled.retain(|&i| is_settled[i] && !std::mem::replace(&mut listed[i], true));
        }
        Some(request)
    }
}

/// A set of the requests of an iterator, one slot each, in order.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |world| async move {
/// use mpx::RequestSet;
/// let mut set: RequestSet<_> = (0..2).map(|tag| world.isend(&(tag as u8), 0, tag)).collect();
/// set.extend([world.isend(&2u8, 0, 2)]); // a third slot
/// assert_eq!(set.wait_all().await.len(), 3);
/// for tag in 0..3 {
///     assert_eq!(world.recv::<u8>(0, tag).await?.0, tag as u8);
/// }
/// # Ok(()) }).await?; Ok(()) }
/// ```
impl<R: Operation> FromIterator<R> for RequestSet<R> {
    fn from_iter<I: IntoIterator<Item = R>>(requests: I) -> RequestSet<R> {
        let mut set = RequestSet::new();
        set.extend(requests);
        set
    }
}

/// Adds the requests of an iterator, each in a new slot.
impl<R: Operation> Extend<R> for RequestSet<R> {
    fn extend<I: IntoIterator<Item = R>>(&mut self, requests: I) {
        for request in requests {
            self.push(request);
        }
    }
}
