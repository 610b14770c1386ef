//! Collective operations over communicators, as futures.
//!
//! Every collective is a method of [`Comm`] that starts when called (its
//! first messages go out, and its receives are posted, before the future
//! is first polled) and finishes when its future is awaited; the blocking
//! form is the same call awaited at once. Like every request, a
//! collective moves data into the caller's memory only in the call itself
//! or in its future's polls, never from a background task: dropping the
//! future is sound, but leaves the collective unfinished on this rank. The
//! other ranks are told it gave up, and those whose parts wait for its
//! messages fail with [`ErrorKind::CollectiveMismatch`] naming it rather
//! than wait for ever (where ranks meet in this process, a rank's part is
//! left when its call starts, and the others finish: see below). A rank
//! whose call failed because a process failed passes that on: the others
//! fail with [`ErrorKind::ProcessFailed`] naming the process, as they
//! would had they waited for it themselves. Ranks that needed nothing
//! more from a rank that gave up take its word and drop it as a late
//! message of a call they have finished. A collective leaked rather than
//! dropped (`std::mem::forget`) tells nobody, and its posted receives keep
//! the eager credit of the messages they matched: a program should not
//! make a habit of dropping, let alone leaking, collectives.
//!
//! Over messages (between processes), a collective moves on only while
//! its future is polled (or, in [`wait_all`](crate::wait_all), while any
//! of a set's is): a rank that must pass data on (an inner rank of a
//! broadcast's tree, a step of a ring) does so in its own polls. A rank
//! that starts a nonblocking collective and then waits for a message
//! another rank sends only after that collective has finished there waits
//! for ever: await the collective first, or both together.
//!
//! Values go in and out as typed slices (or a single value, or a `Vec`:
//! [`CollRef`] and [`CollMut`]) of any [`MpiType`], derived ones (`#[derive(MpiType)]`)
//! included, or as buffers described by a datatype ([`SendBuf`] and
//! [`RecvBuf`]: columns of a matrix, faces of an array; see [`Described`]),
//! for every collective that moves data without combining it;
//! [`alltoallw`](Comm::alltoallw) gives each rank's block its own
//! datatype. Reductions take typed values. As in point-to-point, an array passed by reference is one
//! value (of `N` elements): where the other buffer is a slice or a `Vec`,
//! or where the count matters (`gather`, `alltoall`, ...), pass the
//! array's elements as a slice, `&mut a[..]`. Reductions take an [`Op`]: one of MPI's built-ins ([`SUM`],
//! [`MAX`], ...) on the types that implement [`Reducible`], or an
//! operation of the user's own ([`Op::user`]) on any type.
//!
//! Collectives match only collectives: their messages travel on the
//! communicator's collective context, never seen by point-to-point
//! receives (whatever their tags), and each call's messages carry the
//! call's number on that communicator, so two collectives in flight on
//! one communicator never take each other's messages. As in MPI, every
//! rank must call the same collectives on a communicator in the same
//! order, with matching arguments; a rank whose part does not match what
//! it receives (another count or type) fails with
//! [`ErrorKind::CollectiveMismatch`]. Calling different collectives at the
//! same point (say `allgather` on some ranks and `allgatherv` on others)
//! is not detected in general: those ranks may wait for each other
//! forever. The messages of `bcast`, `bcast_serde`, `reduce` and
//! `scatter` say which rank their sender takes as the root, so a rank
//! that takes another fails on the first it gets (in a `reduce`, rank 0
//! fails, and its word that it gave up reaches the ranks waiting for the
//! result). A broadcast's or scatter's root watches for data sent to
//! it while its own goes out (two ranks that both call themselves the
//! root fail, where their large data would wait for ever to be taken;
//! small data goes out, and both may finish), and every other rank, which
//! takes data from one rank only (its parent in the broadcast's tree, the
//! scatter's root), watches for data from any other: a rank whose root
//! sends it nothing, since the others take another root, fails on the data
//! the other root sends it. Ranks that each wait for another as the root
//! while no rank sends them anything (two ranks that each take the other
//! as a `bcast`'s root, or a `gather`'s) still wait for ever, as in MPI
//! libraries. An allreduce's ranks
//! that choose different algorithms from their own arguments (an array
//! value against a slice of its elements) fail rather than wait.
//!
//! | collective | algorithm |
//! |---|---|
//! | [`barrier`](Comm::barrier) | dissemination: ⌈log₂ n⌉ rounds |
//! | [`bcast`](Comm::bcast) | binomial tree from the root |
//! | [`reduce`](Comm::reduce) | binomial tree to rank 0 in rank order (then to the root) |
//! | [`allreduce`](Comm::allreduce) | 64 KiB and more per rank: reduce-scatter (block `r` to rank `r`, combined there in rank order), then a ring allgather; below that, power-of-two rank counts: recursive doubling (log₂ n exchanges); others: `reduce` to rank 0, then `bcast` |
//! | [`scan`](Comm::scan), [`exscan`](Comm::exscan) | a chain in rank order |
//! | [`gather`](Comm::gather), [`scatter`](Comm::scatter) and their `v` forms | direct to and from the root |
//! | [`allgather`](Comm::allgather) | up to 8 KiB per rank on 3 ranks or more: Bruck's algorithm (⌈log₂ n⌉ steps; at step k each rank sends the min(2^k, n − 2^k) blocks of the ranks just below it, its own last, to the rank 2^k above); larger blocks, and 1 or 2 ranks: the ring |
//! | [`allgatherv`](Comm::allgatherv) | a ring: n − 1 steps, each rank passing on what it got |
//! | [`alltoall`](Comm::alltoall), [`alltoallv`](Comm::alltoallv), [`alltoallw`](Comm::alltoallw) | every pair exchanges directly |
//! | [`reduce_scatter_block`](Comm::reduce_scatter_block), [`reduce_scatter`](Comm::reduce_scatter) | `reduce` to rank 0, then `scatter` |
//! | [`Cart::neighbor_allgather`], [`Cart::neighbor_alltoall`] | one message to and from each neighbour, tagged with its direction |
//!
//! Where every rank of the world lives in one process (the loopback,
//! `mpx_net::loopback`, unless its options turn `local_collectives` off:
//! see [`LocalWorld`](crate::runtime::LocalWorld)), `barrier`, `bcast`, `allreduce`,
//! `allgather` and `alltoall` (their in-place forms and `alltoallv` too;
//! `allgather` and `alltoall` of blocks under 256 KiB) send no messages:
//! each rank packs its part when the call starts and
//! leaves it where the others take it from, in their own polls, or in
//! their own calls where the parts they need are there already (see the
//! `local` module: at most one wake-up per rank and call). The results are those
//! of the algorithms above, bit for bit for reductions, and so are the
//! errors a legal program can meet, with two differences: every rank
//! checks every part it waits for (all of them but in a broadcast, whose
//! ranks take the root's part alone), so a disagreement fails every rank
//! that sees it (over messages, only the ranks that receive from the rank
//! that disagrees), and a rank that drops its future after the call
//! started leaves its part for the others (but for a large allreduce's
//! second round, which fails on the others).
//!
//! Topologies: [`dims_create`], [`Comm::cart_create`] and [`Cart`].
//!
//! Reductions combine contributions in rank order (rank 0's first), for
//! commutative operations too, and always in the same pattern for a given
//! rank count: a floating-point sum gives the same bits on every rank, and
//! the same bits from one run to the next (the pattern may change with
//! the size, where a collective's algorithm does).

mod barrier;
mod cart;
mod element;
mod local;
mod movement;
mod op;
mod reduce;
#[cfg(feature = "serde")]
mod serde;

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

pub use cart::{dims_create, Cart};
pub use element::{Described, Element};
pub use movement::Block;
pub use op::{Builtin, Loc, Op, Reducible, BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC, MIN, MINLOC, PROD, SUM};
pub use reduce::MAX_REDUCED_VALUE;

use crate::comm::data::Packed;
use crate::comm::{capacity, Comm, Peer, RawRecv, RecvBuf, SendBuf, SendData};
use crate::datatype::Datatype;
use crate::error::{Error, ErrorKind, Result};
use crate::mpi_type::MpiType;
use crate::pack::Repr;
use crate::proto::engine::{Delivered, Envelope, SendMode};
use crate::request::{Operation, Request};
use crate::runtime::{LocalComm, Shared};

/// Values a collective reads: `&T` (one value; an array `&[T; N]` is one
/// value of `N` elements), `&[T]` or `&Vec<T>` of an [`MpiType`], or a
/// [`SendBuf`] (items of a datatype: the element is then [`Described`]).
pub trait CollRef<'a, T: Element> {
    /// The values, as the collective's algorithms read them.
    fn values(self) -> T::Src<'a>;
}

impl<'a, T: MpiType> CollRef<'a, T> for &'a T {
    fn values(self) -> &'a [T] {
        std::slice::from_ref(self)
    }
}

impl<'a, T: MpiType> CollRef<'a, T> for &'a [T] {
    fn values(self) -> &'a [T] {
        self
    }
}

impl<'a, T: MpiType> CollRef<'a, T> for &'a Vec<T> {
    fn values(self) -> &'a [T] {
        self
    }
}

impl<'a> CollRef<'a, Described> for SendBuf<'a> {
    fn values(self) -> SendBuf<'a> {
        self
    }
}

/// Memory a collective writes: `&mut T` (one value), `&mut [T]` or
/// `&mut Vec<T>` (its length is the count; a collective never resizes it)
/// of an [`MpiType`], or a [`RecvBuf`] (its count is the count).
pub trait CollMut<'a, T: Element> {
    /// The memory, as the collective's algorithms write it.
    fn values(self) -> T::Dst<'a>;
}

impl<'a, T: MpiType> CollMut<'a, T> for &'a mut T {
    fn values(self) -> &'a mut [T] {
        std::slice::from_mut(self)
    }
}

impl<'a, T: MpiType> CollMut<'a, T> for &'a mut [T] {
    fn values(self) -> &'a mut [T] {
        self
    }
}

impl<'a, T: MpiType> CollMut<'a, T> for &'a mut Vec<T> {
    fn values(self) -> &'a mut [T] {
        self
    }
}

impl<'a> CollMut<'a, Described> for RecvBuf<'a> {
    fn values(self) -> RecvBuf<'a> {
        self
    }
}

/// A collective under way on this rank: a future that finishes this rank's
/// part. It borrows only the memory the collective writes (values it
/// reads are copied or sent when the call starts).
///
/// It is an [`Operation`] too, so collectives wait together with
/// [`wait_all`](crate::wait_all) or in a [`RequestSet`](crate::RequestSet),
/// and [`test`](Operation::test) asks whether one has finished without
/// waiting (MPI's `MPI_Test` on a nonblocking collective's request). Once
/// it has finished, it touches its memory no more.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx::launch(3, |comm| async move {
/// use mpx::coll::{MAX, SUM};
/// use mpx::Operation;
/// let (mut sum, mut max) = (0u64, 0u64);
/// let me = comm.rank() as u64;
/// // Two collectives in flight on one communicator, waited for together.
/// let outcomes = mpx::wait_all([comm.allreduce(&me, &mut sum, SUM), comm.allreduce(&me, &mut max, MAX)]).await;
/// assert!(outcomes.iter().all(Result::is_ok));
/// assert_eq!((sum, max), (3, 2));
/// // Polled by hand: a barrier finishes once every rank has entered it.
/// let mut barrier = comm.barrier();
/// let outcome = loop {
///     if let Some(outcome) = barrier.test() {
///         break outcome;
///     }
///     tokio::task::yield_now().await;
/// };
/// outcome?;
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[must_use = "a collective finishes only when awaited"]
pub struct Collective<'a> {
    state: Running<'a>,
}

/// Where a [`Collective`] is. (Three words: a collective is moved into
/// its caller's future, and often finished when made.)
enum Running<'a> {
    /// This rank's part of the call, under way.
    Part(Pin<Box<dyn Part + 'a>>),
    /// Finished: the outcome, until it is taken.
    Done(Option<Result<()>>),
}

/// This rank's part of a collective call, under way.
trait Part: Future<Output = Result<()>> + Send {
    /// The call, if it exchanges messages: its endpoint progresses, and
    /// the others are told if this rank's part fails. `None` for a call
    /// whose ranks meet in this process (see `local`: each rank left its
    /// part, which says whether it gave up, when the call started).
    fn call(&self) -> Option<&Call>;
}

pin_project_lite::pin_project! {
    /// A part over messages: `run`, which tells every other rank when it
    /// fails, or when it is dropped before it finished (see
    /// [`Collective::new`]; [`guarded`] runs one that yields a value).
    struct OverMessages<F> {
        call: Call,
        // Set once `run` has finished: nothing more to tell the others.
        finished: bool,
        // The error of a call that failed at once (see `guarded`), which
        // the first poll returns: `run` never runs.
        failed_at_once: Option<Error>,
        #[pin]
        run: F,
    }

    impl<F> PinnedDrop for OverMessages<F> {
        /// A part dropped unfinished may owe other ranks messages (a
        /// broadcast's inner rank has not passed the data on): they are
        /// told it gave up, rather than wait for ever. A rank that did
        /// not need this one's messages never takes the word: its engine
        /// drops it as a late message of a call it has finished (see
        /// [`Call::over`]), and this rank's engine drops the messages
        /// still to come for the dropped call.
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if !*this.finished {
                this.call.give_up();
                this.call.over();
            }
        }
    }
}

impl<F> OverMessages<F> {
    fn new(call: Call, run: F) -> OverMessages<F> {
        OverMessages { call, finished: false, failed_at_once: None, run }
    }
}

impl<T, F: Future<Output = Result<T>>> Future for OverMessages<F> {
    type Output = Result<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = self.project();
        if let Some(e) = this.failed_at_once.take() {
            return Poll::Ready(Err(e));
        }
        let outcome = std::task::ready!(this.run.poll(cx));
        *this.finished = true;
        if let Err(e) = &outcome {
            this.call.give_up_for(e);
        }
        this.call.over();
        Poll::Ready(outcome)
    }
}

impl<F: Future<Output = Result<()>> + Send> Part for OverMessages<F> {
    fn call(&self) -> Option<&Call> {
        Some(&self.call)
    }
}

pin_project_lite::pin_project! {
    /// A part whose ranks meet in this process.
    struct Met<F> {
        #[pin]
        run: F,
    }
}

impl<F: Future<Output = Result<()>>> Future for Met<F> {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.project().run.poll(cx)
    }
}

impl<F: Future<Output = Result<()>> + Send> Part for Met<F> {
    fn call(&self) -> Option<&Call> {
        None
    }
}

impl<'a> Collective<'a> {
    /// The collective `call` runs as `run`. If this rank's part fails, it
    /// tells every other rank, so that none waits in vain for what this
    /// rank would have sent: each gets
    /// [`ErrorKind::CollectiveMismatch`] naming this rank, and tells the others
    /// in turn.
    pub(crate) fn new(call: Call, run: impl Future<Output = Result<()>> + Send + 'a) -> Collective<'a> {
        if let Some(e) = call.failed_at_once() {
            call.over();
            return Collective::finished(Err(e));
        }
        Collective { state: Running::Part(Box::pin(OverMessages::new(call, run))) }
    }

    /// A collective whose ranks meet in this process (see `local`) runs
    /// as `run`: this rank left its part when the call started, so a
    /// failure needs no word to the others (`run` tells those whose call
    /// exchanges messages itself), and no endpoint needs to progress for
    /// it.
    pub(crate) fn met(run: impl Future<Output = Result<()>> + Send + 'a) -> Collective<'a> {
        Collective { state: Running::Part(Box::pin(Met { run })) }
    }

    /// A collective whose ranks meet in this process, finished on this
    /// rank when the call started, its part left for the others: a rank
    /// that found every part it needs there already (it completed the
    /// round, or, in a broadcast, the root's part was there), a
    /// broadcast's root that ran ahead, an alltoall rank whose block for
    /// itself could not be copied. `outcome` is how it finished.
    pub(crate) fn finished(outcome: Result<()>) -> Collective<'a> {
        Collective { state: Running::Done(Some(outcome)) }
    }
}

impl Operation for Collective<'_> {
    type Output = Result<()>;

    fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Running::Part(part) = &mut self.state {
            let outcome = std::task::ready!(part.as_mut().poll(cx));
            // Dropping the part releases the memory it borrowed.
            self.state = Running::Done(Some(outcome));
        }
        Poll::Ready(())
    }

    fn is_complete(&self) -> bool {
        matches!(self.state, Running::Done(_))
    }

    /// The outcome; taken already, `Ok(())` (as a null request's); not
    /// finished, [`ErrorKind::InvalidArgument`].
    fn take_output(&mut self) -> Result<()> {
        match &mut self.state {
            Running::Done(outcome) => outcome.take().unwrap_or(Ok(())),
            Running::Part(..) => Err(ErrorKind::InvalidArgument("the outcome of a collective that has not finished".into()).into()),
        }
    }

    fn progress(&self) -> Option<usize> {
        let Running::Part(part) = &self.state else { return None };
        let call = part.call()?;
        call.shared().progress();
        Some(Arc::as_ptr(call.shared()) as usize)
    }

    fn moves_when_polled(&self) -> bool {
        true
    }

    /// A collective whose outcome was taken is inactive: a set passes over
    /// it.
    fn is_inactive(&self) -> bool {
        matches!(self.state, Running::Done(None))
    }
}

impl Future for Collective<'_> {
    type Output = Result<()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        std::task::ready!(self.poll_complete(cx));
        Poll::Ready(self.take_output())
    }
}

impl std::fmt::Debug for Collective<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Collective")
    }
}

/// Runs this rank's part of `call`; if it fails, or is dropped
/// unfinished (polled or not), tells every other rank (see
/// [`Collective::new`]).
pub(crate) fn guarded<T, F: Future<Output = Result<T>>>(call: Call, run: F) -> impl Future<Output = Result<T>> {
    let failed_at_once = call.failed_at_once();
    if failed_at_once.is_some() {
        call.over();
    }
    OverMessages { call, finished: failed_at_once.is_some(), failed_at_once, run }
}

/// A collective call as it starts: numbered on its communicator, which it
/// borrows, with the place where its ranks meet if they all live in this
/// process. A rank that finishes a call that meets inside the call that
/// starts it needs nothing more (no handle cloned, no reference count
/// touched); a call that exchanges messages, or a rank that waits for the
/// others, holds a [`Call`] ([`Starting::call`]).
#[derive(Clone, Copy)]
pub(crate) struct Starting<'c> {
    pub(crate) comm: &'c Comm,
    number: u32,
    local: Option<&'c Arc<LocalComm>>,
}

impl<'c> Starting<'c> {
    /// Numbers a new collective on `comm`: one that meets where the
    /// communicator's ranks meet in this process ([`Starting::local`]),
    /// and exchanges messages elsewhere.
    pub(crate) fn new(comm: &'c Comm) -> Starting<'c> {
        let collectives = comm.collectives();
        // Wraps around after four billion calls; the tags, 64 a call in
        // 31 bits, every 2^25 calls.
        let number = collectives.next.fetch_add(1, Ordering::Relaxed);
        let member = collectives.local.get_or_init(|| comm.shared.local.as_ref().filter(|world| world.collectives_meet()).map(|world| world.comm(comm.context | 1, comm.group().world_ranks(), comm.rank())));
        Starting { comm, number, local: member.as_ref().map(|member| &member.comm) }
    }

    /// Where the call's ranks meet, if they all live in this process.
    pub(crate) fn local(&self) -> Option<&'c Arc<LocalComm>> {
        self.local
    }

    /// The call, holding its communicator (for its messages, or for a
    /// future that outlives the borrow).
    pub(crate) fn call(&self) -> Call {
        // Each call has 64 tags to itself: its messages' sub-tags (a
        // neighbour collective's directions) never meet another call's.
        let tag = ((u64::from(self.number) * Call::SUBTAGS) & 0x7fff_ffff) as i32;
        Call { comm: self.comm.clone(), tag, subtags: 1, salt: 0, number: self.number, local: self.local.cloned(), fails_with: None }
    }

    pub(crate) fn number(&self) -> u32 {
        self.number
    }

    pub(crate) fn rank(&self) -> usize {
        self.comm.rank()
    }

    pub(crate) fn size(&self) -> usize {
        self.comm.size()
    }

    /// Checks a root argument.
    pub(crate) fn check_root(&self, root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(ErrorKind::InvalidRank { rank: root, size: self.size() }.into());
        }
        Ok(())
    }

    /// Tells every other rank that this one gave up on the call's first
    /// `subtags` sub-tags (see [`Call::give_up_on`]).
    pub(crate) fn give_up_on(&self, subtags: usize) {
        self.call().give_up_on(subtags);
    }
}

/// One collective call on a communicator: its messages go on the
/// collective context with a tag of the call's number.
#[derive(Clone)]
pub(crate) struct Call {
    pub(crate) comm: Comm,
    tag: i32,
    /// Sub-tags the call's receives use (1 but for neighbour collectives).
    pub(crate) subtags: usize,
    /// Mixed into the signature of every message the call sends, and
    /// expected in every message it receives (0: none). An algorithm that
    /// ranks choose from their own arguments, and a broadcast by its root,
    /// salts its messages its own way ([`Call::salted`]), so that ranks
    /// that chose differently (the
    /// call is then erroneous) fail with a type mismatch on each other's
    /// messages rather than take them for their own where the sizes
    /// happen to agree. Give-ups carry no signature, and stay as they are.
    salt: u64,
    /// The call's number on its communicator.
    number: u32,
    /// Where the communicator's ranks meet, if they all live in this
    /// process (see `local`).
    local: Option<Arc<LocalComm>>,
    /// Set if the call fails at once, saying why: a rank that meets in this
    /// process came first to the call, where this rank's collective
    /// exchanges messages, and may be done with it, so that nobody is left
    /// to tell this one (see `Call::mark_messages`). That rank called a
    /// collective that meets, or gave up on the call.
    fails_with: Option<Error>,
}

impl Call {
    /// Numbers a new collective on `comm` that exchanges messages. Where
    /// the communicator's ranks meet in this process (see `local`), it
    /// leaves a part there that says so, which a rank that called a
    /// collective that meets at this point and comes later reports as a
    /// mismatch (and tells this rank of, by message); if such a rank came
    /// first, this call fails at once (see `Call::mark_messages`).
    pub(crate) fn start(comm: &Comm) -> Call {
        let mut call = Call::begin(comm);
        call.mark_messages();
        call
    }

    /// Numbers a new collective on `comm`: one that meets where the
    /// communicator's ranks meet in this process ([`Starting::local`]), and
    /// exchanges messages elsewhere.
    pub(crate) fn begin(comm: &Comm) -> Call {
        Starting::new(comm).call()
    }

    /// The call as [`Starting`] sees it (borrowed: nothing cloned).
    pub(crate) fn starting(&self) -> Starting<'_> {
        Starting { comm: &self.comm, number: self.number, local: self.local.as_ref() }
    }

    /// Tags each call has for its messages.
    pub(crate) const SUBTAGS: u64 = 64;

    /// Why the call fails at once, if it does (see `fails_with`): every
    /// other rank is then told that this one gave up.
    fn failed_at_once(&self) -> Option<Error> {
        let error = self.fails_at_once()?;
        self.give_up_for(&error);
        Some(error)
    }

    /// The error of a call that fails at once (see `fails_with`),
    /// without a word to the others. Such a call sends no data and posts
    /// no receive (its algorithm may try before [`Collective::new`] sees
    /// that it failed): nothing of it is left to hold a peer's memory.
    fn fails_at_once(&self) -> Option<Error> {
        self.fails_with.clone()
    }

    /// The call's number on its communicator.
    #[cfg(test)]
    pub(crate) fn number(&self) -> u32 {
        self.number
    }

    /// The call with its messages' signatures salted with `salt` (see
    /// [`Call::salt`]).
    pub(crate) fn salted(&self, salt: u64) -> Call {
        Call { salt, ..self.clone() }
    }

    pub(crate) fn rank(&self) -> usize {
        self.comm.rank()
    }

    pub(crate) fn size(&self) -> usize {
        self.comm.size()
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.comm.shared
    }

    /// Sends `values` to `to` (packed now: the request holds no borrow).
    pub(crate) fn send<T: MpiType>(&self, values: &[T], to: usize) -> Request<'static> {
        self.send_direction(values, to, 0)
    }

    /// Sends `values` to `to` under the call's sub-tag `sub` (below
    /// [`Call::SUBTAGS`]).
    pub(crate) fn send_direction<T: MpiType>(&self, values: &[T], to: usize, sub: usize) -> Request<'static> {
        self.send_packed(|repr| values.into_packed(repr), to, sub)
    }

    /// Sends items `items` of a source buffer to `to`.
    pub(crate) fn send_items<E: Element>(&self, src: &E::Src<'_>, items: Range<usize>, to: usize) -> Request<'static> {
        self.send_packed(|repr| E::pack(src, items, repr), to, 0)
    }

    /// Sends items `items` of a destination buffer (data it received) to `to`.
    pub(crate) fn forward_items<E: Element>(&self, dst: &E::Dst<'_>, items: Range<usize>, to: usize) -> Request<'static> {
        self.send_packed(|repr| E::pack_dst(dst, items, repr), to, 0)
    }

    /// Sends items `items` of a destination buffer to each rank of `to`,
    /// packed once for each representation they take: a root's data goes
    /// to all its children with one copy, not one each.
    pub(crate) fn forward_items_to<E: Element>(&self, dst: &E::Dst<'_>, items: Range<usize>, to: &[usize]) -> Vec<Request<'static>> {
        self.forward_packed_to::<E>([None, None], dst, items, to)
    }

    /// [`forward_items_to`](Call::forward_items_to), with `packed` holding
    /// the items already packed in each representation it has (native,
    /// external32).
    fn forward_packed_to<E: Element>(&self, mut packed: [Option<Packed>; 2], dst: &E::Dst<'_>, items: Range<usize>, to: &[usize]) -> Vec<Request<'static>> {
        to.iter()
            .map(|&child| {
                self.send_packed(
                    |repr| {
                        let slot = &mut packed[usize::from(repr == Repr::External32)];
                        if slot.is_none() {
                            *slot = Some(E::pack_dst(dst, items.clone(), repr)?);
                        }
                        let p = slot.as_ref().expect("packed above");
                        Ok(Packed { data: p.data.clone(), repr: p.repr, signature: p.signature, desc_len: p.desc_len })
                    },
                    child,
                    0,
                )
            })
            .collect()
    }

    /// Done with a message taken by [`Posted::take_items`].
    pub(crate) fn recycle(&self, msg: Delivered) {
        self.shared().recycle(msg);
    }

    /// Sends on to `to` what `msg` brought into items `items` of `dst`
    /// (see [`Posted::take_items`]): the message's own bytes, without a
    /// copy, when they are what packing those items for `to` would give
    /// (native data, and `to` takes native data); packed from `dst`
    /// otherwise. Native packed data is the sequence of the items' basic
    /// values whatever datatype describes them, and `msg`'s signature
    /// matched `dst`'s datatype, so the bytes and the signature are those
    /// of the items.
    pub(crate) fn forward_received<E: Element>(&self, msg: &Delivered, dst: &E::Dst<'_>, items: Range<usize>, to: usize) -> Request<'static> {
        self.forward_received_to::<E>(msg, dst, items, &[to]).pop().expect("one request for one rank")
    }

    /// [`forward_received`](Call::forward_received) to each rank of `to`,
    /// packing at most once for each representation (see
    /// [`forward_items_to`](Call::forward_items_to)).
    pub(crate) fn forward_received_to<E: Element>(&self, msg: &Delivered, dst: &E::Dst<'_>, items: Range<usize>, to: &[usize]) -> Vec<Request<'static>> {
        let envelope = &msg.envelope;
        let native = (envelope.repr == Repr::Native && msg.desc.is_none() && envelope.signature.is_some())
            .then(|| Packed { data: msg.data.clone(), repr: Repr::Native, signature: envelope.signature, desc_len: 0 });
        self.forward_packed_to::<E>([native, None], dst, items, to)
    }

    fn send_packed(&self, pack: impl FnOnce(Repr) -> Result<Packed>, to: usize, sub: usize) -> Request<'static> {
        debug_assert!((sub as u64) < Self::SUBTAGS);
        if let Some(e) = self.fails_at_once() {
            return Request::completed(Err(e));
        }
        let salt = self.salt;
        let salted = move |repr| {
            let mut packed = pack(repr)?;
            packed.signature = salt_signature(packed.signature, salt);
            Ok(packed)
        };
        self.comm.start_send(salted, Peer::Rank(to), self.tag + sub as i32, SendMode::Standard, self.comm.context | 1)
    }

    /// Tells every other rank that this rank gave up on the call: an
    /// empty message without a type signature (every message of a
    /// collective has one), sent in the background. A rank that has
    /// finished its part by then never takes it.
    pub(crate) fn give_up(&self) {
        self.tell_gave_up(self.subtags, None);
    }

    /// [`give_up`](Call::give_up), the call having failed with `error`: if
    /// a process failed ([`ErrorKind::ProcessFailed`]), the word names it
    /// (see [`GAVE_UP_FOR_FAILED`]), so that the ranks that took this
    /// rank's word fail with the same error, not with a mismatch naming
    /// this rank.
    pub(crate) fn give_up_for(&self, error: &Error) {
        let failed = match error.kind() {
            ErrorKind::ProcessFailed { rank, .. } => Some(*rank),
            _ => None,
        };
        self.tell_gave_up(self.subtags, failed);
    }

    /// [`give_up`](Call::give_up) on the call's first `subtags` sub-tags
    /// (another rank's call of the same number may use more than this
    /// one's).
    pub(crate) fn give_up_on(&self, subtags: usize) {
        self.tell_gave_up(subtags, None);
    }

    /// Sends the word that this rank gave up on the call, on its first
    /// `subtags` sub-tags, naming the world rank whose failure made it, if
    /// one did.
    fn tell_gave_up(&self, subtags: usize, failed: Option<usize>) {
        let signature = failed.map(|rank| (GAVE_UP_FOR_FAILED, rank as u64));
        for r in (0..self.size()).filter(|&r| r != self.rank()) {
            for sub in 0..subtags.min(Self::SUBTAGS as usize) {
                let quit = move |_| Ok(Packed { signature, ..Packed::untyped(bytes::Bytes::new()) });
                drop(self.comm.start_send(quit, Peer::Rank(r), self.tag + sub as i32, SendMode::Standard, self.comm.context | 1));
            }
        }
    }

    /// This rank's part of the call is over (finished, failed or
    /// dropped): messages of the call that still come, or wait unmatched,
    /// are received and dropped (see [`Engine::discard_call`]), so that
    /// they hold no credit or rendezvous slot of their senders', and the
    /// call 2^25 calls later, whose tags are the same, never takes them.
    ///
    /// [`Engine::discard_call`]: crate::proto::engine::Engine::discard_call
    pub(crate) fn over(&self) {
        let shared = &self.comm.shared;
        let mut st = shared.lock();
        st.engine.discard_call(self.comm.context | 1, self.tag, Self::SUBTAGS as u32);
        shared.flush(&mut st);
    }

    /// An empty message to `to`, carrying no data.
    pub(crate) fn signal(&self, to: usize) -> Request<'static> {
        self.send::<u8>(&[], to)
    }

    /// Posts the receive of `count` values of `T` from `from`.
    pub(crate) fn post<T: MpiType>(&self, from: usize, count: usize) -> Result<Posted> {
        self.post_direction::<T>(from, count, 0)
    }

    /// Posts the receive of `count` values of `T` from `from` under the
    /// call's sub-tag `sub`.
    pub(crate) fn post_direction<T: MpiType>(&self, from: usize, count: usize, sub: usize) -> Result<Posted> {
        self.post_typed(from, count, &T::datatype(), sub)
    }

    /// Posts the receive of `count` items of `datatype` from `from`.
    pub(crate) fn post_typed(&self, from: usize, count: usize, datatype: &Datatype, sub: usize) -> Result<Posted> {
        if let Some(e) = self.fails_at_once() {
            return Err(e);
        }
        let limit = capacity(datatype, count as u64);
        let id = self.comm.post_recv(from, self.tag + sub as i32, self.comm.context | 1, limit)?.expect("a rank, never the null process");
        Ok(Posted { raw: RawRecv::new(self.shared().clone(), id), from, count, salt: self.salt })
    }

    /// Waits for a message of the call that carries data, from any rank,
    /// without taking its data, and says who sent it: what a rank of a
    /// rooted `collective` watches for while its part is under way, the
    /// root (`from` is `None`) since it receives nothing, any other rank
    /// since it receives only from `from` (its parent in a broadcast's
    /// tree, the root in a scatter), whose message the receive posted for
    /// it, earlier than this watch's, takes. Its sender takes another rank
    /// as the root (it sent data down its own tree, or its parent's in
    /// this rank's). A message with data completes the receive as too
    /// long, and counts as received (a rendezvous sender is answered, its
    /// data dropped). Word that a rank gave up on the call is taken and
    /// passed over. Should the watch itself fail (every other rank gone,
    /// the endpoint closed), it waits for ever: the rank's own part
    /// decides then.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped, its receive is withdrawn.
    pub(crate) async fn stray_data(&self, collective: &str, from: Option<usize>) -> Error {
        let me = self.rank();
        let stray = |sender: usize| -> Error {
            let detail = match from {
                None => format!("it sent data of a {collective} to rank {me}, which called it as its root: the two take different ranks as the root"),
                Some(from) => format!(
                    "it sent data of a {collective} to rank {me}, which takes its data from rank {from} only: the two take different ranks as the root"
                ),
            };
            ErrorKind::CollectiveMismatch { rank: sender, detail }.into()
        };
        loop {
            let Ok(Some(id)) = self.comm.post_recv(crate::comm::Source::Any, self.tag, self.comm.context | 1, Some(0)) else { break };
            match RawRecv::new(self.shared().clone(), id).await {
                Ok(msg) if word_of_giving_up(&msg, msg.envelope.source as usize, self.shared().size).is_some() => continue,
                Ok(msg) => return stray(msg.envelope.source as usize),
                Err(e) => match e.kind() {
                    ErrorKind::Truncate { message: Some((source, _)), .. } => return stray(*source),
                    _ => break,
                },
            }
        }
        std::future::pending().await
    }

    /// A rank's part of a rooted `collective` (`work`), failing early
    /// should data of the call reach it from a rank it takes none from
    /// (see [`stray_data`](Call::stray_data); `from`: the one rank it
    /// takes data from, `None` at the root): a rank that takes another as
    /// the root sends it some. At the root, both would otherwise wait for
    /// ever for their large data to be taken; elsewhere, for data from a
    /// rank that sends none, since it takes another as the root. Only
    /// such data fails the rank; its own part decides otherwise. A call
    /// on one rank watches nothing.
    ///
    /// # Cancel safety
    /// As `work`: dropped, the watch's receive is withdrawn.
    pub(crate) async fn watching_for_stray_data<R>(&self, collective: &str, from: Option<usize>, work: impl Future<Output = Result<R>>) -> Result<R> {
        if self.size() == 1 {
            return work.await;
        }
        let mut work = std::pin::pin!(work);
        let mut stray = std::pin::pin!(self.stray_data(collective, from));
        std::future::poll_fn(|cx| match work.as_mut().poll(cx) {
            std::task::Poll::Pending => stray.as_mut().poll(cx).map(Err),
            finished => finished,
        })
        .await
    }

    /// Posts the receive of `count` items of a destination buffer's
    /// datatype from `from`.
    pub(crate) fn post_items<E: Element>(&self, dst: &E::Dst<'_>, from: usize, count: usize) -> Result<Posted> {
        self.post_typed(from, count, &E::item_type(dst), 0)
    }

    /// Checks a root argument.
    pub(crate) fn check_root(&self, root: usize) -> Result<()> {
        self.starting().check_root(root)
    }
}

/// A collective's posted receive: it holds no borrow of the caller's
/// memory; the data is unpacked when the collective's future takes it.
pub(crate) struct Posted {
    pub(crate) raw: RawRecv,
    pub(crate) from: usize,
    pub(crate) count: usize,
    /// The salt of the call's messages ([`Call::salt`]), taken off when
    /// the message arrives.
    pub(crate) salt: u64,
}

impl Posted {
    /// Waits for the message and unpacks it into `into`, which must be
    /// exactly the count posted: a message of another count or type is
    /// [`ErrorKind::CollectiveMismatch`].
    pub(crate) async fn into<T: MpiType>(self, mut into: &mut [T]) -> Result<()> {
        let items = 0..into.len();
        self.into_items::<T>(&mut into, items).await
    }

    /// Waits for the message and unpacks it into items `items` of `dst`,
    /// which must be exactly the count posted: a message of another count
    /// or type is [`ErrorKind::CollectiveMismatch`].
    pub(crate) async fn into_items<E: Element>(self, dst: &mut E::Dst<'_>, items: Range<usize>) -> Result<()> {
        let shared = self.raw.shared().clone();
        let msg = self.take_items::<E>(dst, items).await?;
        shared.recycle(msg);
        Ok(())
    }

    /// [`into_items`](Posted::into_items), giving back the message, for
    /// [`Call::forward_received`].
    pub(crate) async fn take_items<E: Element>(self, dst: &mut E::Dst<'_>, items: Range<usize>) -> Result<Delivered> {
        let Posted { raw, from, count, salt } = self;
        debug_assert_eq!(items.len(), count);
        let world = raw.shared().size;
        let msg = raw.await.map_err(|e| too_long(e, from, || format!("{count} of {}", E::name(dst))))?;
        if let Some(e) = word_of_giving_up(&msg, from, world) {
            return Err(e);
        }
        checked_into::<E>(unsalted(msg, salt), from, count, dst, items).map_err(|e| salted_mismatch(e, salt))
    }

    /// Waits for the message, `acc.len()` values of `T`, and combines them
    /// into `acc` with `op`, the message's values on the left:
    /// `acc[i] = theirs[i] op acc[i]`. For a fold in rank order, the sender
    /// must come before the ranks `acc` holds, or `op` must commute bit
    /// for bit ([`Op::commutes_exactly`]: then it is also `acc[i] op
    /// theirs[i]`). The values are read from the message's own
    /// bytes where they are native values of `T` at `T`'s alignment and `T`
    /// takes any bytes (no padding, no value to validate); otherwise
    /// unpacked into a buffer first.
    pub(crate) async fn fold_into<T: MpiType>(self, op: &Op<T>, acc: &mut [T]) -> Result<()> {
        let Posted { raw, from, count, salt } = self;
        debug_assert_eq!(acc.len(), count);
        let shared = raw.shared().clone();
        let msg = raw.await.map_err(|e| too_long(e, from, || format!("{count} of {}", std::any::type_name::<T>())))?;
        if let Some(e) = word_of_giving_up(&msg, from, shared.size) {
            return Err(e);
        }
        let msg = unsalted(msg, salt);
        if let Some(theirs) = values_in_place::<T>(&msg, count) {
            op.apply(theirs, acc)?;
            shared.recycle(msg);
            return Ok(());
        }
        let mut theirs = crate::pack::spare::Values::copy_of(acc);
        let items = 0..count;
        let msg = checked_into::<T>(msg, from, count, &mut &mut theirs[..], items).map_err(|e| salted_mismatch(e, salt))?;
        shared.recycle(msg);
        op.apply(&theirs, acc)
    }

    /// Waits for an empty message.
    pub(crate) async fn signal(self) -> Result<()> {
        self.into::<u8>(&mut []).await
    }
}

/// `signature` with `salt` mixed in (or taken out again: it is its own
/// inverse); 0 and untyped data leave it as it is.
pub(super) fn salt_signature(signature: Option<(u64, u64)>, salt: u64) -> Option<(u64, u64)> {
    signature.map(|(hash, elements)| (hash ^ salt, elements))
}

/// `msg` with the salt of its call's messages taken off its signature (see
/// [`Call::salt`]): a message of the same algorithm then has its own
/// signature again; any other has one that matches nothing.
pub(super) fn unsalted(mut msg: Delivered, salt: u64) -> Delivered {
    if salt != 0 {
        msg.envelope.signature = salt_signature(msg.envelope.signature, salt);
    }
    msg
}

/// `e`, a mismatch found in a message of a salted call (see
/// [`Call::salt`]) that is no word that its sender gave up (those are
/// told apart before), saying that its sender may have sent the very
/// types expected, under another salt: the call's ranks chose its root or
/// algorithm differently.
pub(super) fn salted_mismatch(e: Error, salt: u64) -> Error {
    match e.kind() {
        ErrorKind::CollectiveMismatch { rank, detail } if salt != 0 => {
            let detail = format!("{detail} (or took another root or algorithm for the call, whose messages are told apart so)");
            ErrorKind::CollectiveMismatch { rank: *rank, detail }.into()
        }
        _ => e,
    }
}

/// A collective's receive from `from` failed with `e`: a message too
/// long for it (a large one fails the receive before its data moves) is
/// [`ErrorKind::CollectiveMismatch`], as a short or long one that arrived is;
/// `expected` describes what the receive holds.
fn too_long(e: Error, from: usize, expected: impl FnOnce() -> String) -> Error {
    match e.kind() {
        ErrorKind::Truncate { needed, .. } => {
            ErrorKind::CollectiveMismatch { rank: from, detail: format!("it sent {needed} bytes where {} were expected", expected()) }.into()
        }
        _ => e,
    }
}

/// `msg`'s data as `count` values of `T`, read where they lie, if they
/// are exactly that: native values of a type that takes any bytes and has
/// no padding, `count` of them by the message's signature, at `T`'s
/// alignment. Otherwise `None` (the message is then unpacked).
fn values_in_place<T: MpiType>(msg: &Delivered, count: usize) -> Option<&[T]> {
    let readable = crate::comm::native_values::<T>(msg, &T::datatype_ref()) == Some(count)
        && msg.data.as_ptr().align_offset(std::mem::align_of::<T>()) == 0;
    // SAFETY: the bytes are `count` native values of `T` (the message's
    // signature is `count` of `T`'s, in this rank's representation, and
    // its length theirs), at `T`'s alignment; `T`'s datatype covers every
    // byte of a `T` and any bytes make a valid `T` (it needs no
    // validation); the slice borrows the message, which holds the bytes.
    readable.then(|| unsafe { std::slice::from_raw_parts(msg.data.as_ptr().cast::<T>(), count) })
}

/// The type signature hash of a collective's word that its sender gave
/// up on the call because a process failed, the signature's count of
/// elements naming that process's world rank (see [`Call::give_up_for`]):
/// a hash no datatype's signature has (theirs are below 2^61), beside
/// [`SERIALIZED_SIGNATURE`](crate::proto::wire::SERIALIZED_SIGNATURE).
/// The word carries no data, and is never salted.
pub(crate) const GAVE_UP_FOR_FAILED: u64 = u64::MAX - 1;

/// If `msg`, received from rank `from` of a communicator whose world has
/// `world` ranks, is word that its sender gave up on the call, what the
/// receiving rank's call fails with: [`ErrorKind::ProcessFailed`] naming
/// the failed process the word names (a world rank, checked: the word is
/// a peer's, and may name anything), or a mismatch naming `from`.
pub(super) fn word_of_giving_up(msg: &Delivered, from: usize, world: u32) -> Option<Error> {
    match msg.envelope.signature {
        None => Some(gave_up(from)),
        Some((GAVE_UP_FOR_FAILED, failed)) if msg.data.is_empty() => Some(match u32::try_from(failed).ok().filter(|&f| f < world) {
            Some(failed) => Error::process_failed(failed, format!("rank {from} of the communicator gave up on the collective when it failed")),
            None => gave_up(from),
        }),
        Some(_) => None,
    }
}

/// What a rank's call fails with where it receives rank `from`'s word
/// that it gave up (see [`Call::give_up`]).
fn gave_up(from: usize) -> Error {
    let detail = "it gave up on the collective: its call failed (its own error says why) or was dropped unfinished";
    ErrorKind::CollectiveMismatch { rank: from, detail: detail.into() }.into()
}

/// Unpacks the message a collective's receive from `from` took into items
/// `items` of `dst`, which must be exactly the `count` posted: a message of
/// another count or type is [`ErrorKind::CollectiveMismatch`].
fn checked_into<E: Element>(msg: Delivered, from: usize, count: usize, dst: &mut E::Dst<'_>, items: Range<usize>) -> Result<Delivered> {
    let mismatch = |detail: String| -> Error { ErrorKind::CollectiveMismatch { rank: from, detail }.into() };
    if msg.envelope.signature.is_none() {
        return Err(gave_up(from));
    }
    let status = match E::deliver(dst, items, &msg) {
        Ok(status) => status,
        Err(e) => {
            return Err(match e.kind() {
                ErrorKind::TypeMismatch => mismatch(format!("it sent other types than {count} of {}", E::name(dst))),
                ErrorKind::Truncate { needed, .. } => mismatch(format!("it sent {needed} bytes where {count} of {} were expected", E::name(dst))),
                _ => e,
            })
        }
    };
    let expected = E::item_type(dst).size().saturating_mul(count as u64);
    if status.bytes != expected {
        let sent = status.bytes;
        return Err(mismatch(format!("it sent {sent} bytes where {count} of {} ({expected} bytes) were expected", E::name(dst))));
    }
    Ok(msg)
}

/// Packed native `data` of `signature`, as a message from `source`: what
/// a collective's ranks pass each other without the engine (a rank's
/// block to itself, a part left where ranks meet), checked and unpacked as
/// a delivered message is.
pub(crate) fn native_message(data: bytes::Bytes, signature: Option<(u64, u64)>, source: usize) -> Delivered {
    let envelope = Envelope {
        context: 0,
        source: source as u32,
        tag: 0,
        signature,
        repr: Repr::Native,
        len: data.len() as u64,
        desc_len: 0,
        seq: 0,
    };
    Delivered { envelope, data, desc: None, credit: 0 }
}

/// Awaits every request in `sends`, reporting the first error.
pub(crate) async fn sent(sends: impl IntoIterator<Item = Request<'static>>) -> Result<()> {
    let mut first = Ok(());
    for s in sends {
        if let Err(e) = s.await {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

/// Awaits `first`, then every request in `later`, reporting the first
/// error: the sends of a collective whose first message goes out when it
/// starts and the others as it runs (one with a single send keeps no list).
pub(crate) async fn sent_after(first: Option<Request<'static>>, later: Vec<Request<'static>>) -> Result<()> {
    let first = match first {
        Some(request) => request.await.map(drop),
        None => Ok(()),
    };
    first.and(sent(later).await)
}

/// Checks that a buffer holds `want` values.
pub(crate) fn check_len(what: impl std::fmt::Display, have: usize, want: usize) -> Result<()> {
    if have != want {
        return Err(ErrorKind::InvalidArgument(format!("{what} holds {have} values, where the collective needs {want}")).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{values_in_place, Loc};
    use crate::mpi_type::MpiType;
    use crate::pack::Repr;
    use crate::proto::engine::{Delivered, Envelope};
    use bytes::Bytes;

    /// A delivered message of `data`, whose envelope says `count` values of
    /// `T` in `repr`.
    fn message<T: MpiType>(data: Bytes, count: u64, repr: Repr) -> Delivered {
        let signature = T::datatype().signature().repeat(count);
        let envelope = Envelope {
            context: 1,
            source: 0,
            tag: 0,
            signature: Some((signature.hash(), signature.len())),
            repr,
            len: data.len() as u64,
            desc_len: 0,
            seq: 0,
        };
        Delivered { envelope, data, desc: None, credit: 0 }
    }

    fn bytes_of(values: &[f64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    /// A reduction reads a message's values where they lie only when they
    /// are exactly `count` native values of a plain type at its alignment;
    /// anything else (unaligned bytes, another type or count, external32,
    /// a type description, padding, values that need validating) is
    /// unpacked.
    #[test]
    fn values_are_read_in_place_only_when_they_are_plain_aligned_and_whole() {
        let values = [1.5f64, -2.0, 1e16, 0.25];
        let aligned = Bytes::from(bytes_of(&values));
        assert_eq!(aligned.as_ptr().align_offset(8), 0, "a Vec<u8> of 32 bytes from the allocator is 8-aligned");
        let msg = message::<f64>(aligned.clone(), 4, Repr::Native);
        assert_eq!(values_in_place::<f64>(&msg, 4), Some(&values[..]));
        // The same bytes one byte into a buffer: not at f64's alignment.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&aligned);
        let unaligned = Bytes::from(shifted).slice(1..);
        assert_ne!(unaligned.as_ptr().align_offset(8), 0);
        assert_eq!(values_in_place::<f64>(&message::<f64>(unaligned, 4, Repr::Native), 4), None, "unaligned");
        assert_eq!(values_in_place::<f64>(&message::<f64>(aligned.clone(), 4, Repr::External32), 4), None, "external32");
        assert_eq!(values_in_place::<f64>(&message::<i64>(aligned.clone(), 4, Repr::Native), 4), None, "another type");
        assert_eq!(values_in_place::<f64>(&message::<f64>(aligned.slice(..24), 3, Repr::Native), 4), None, "another count");
        let mut described = message::<f64>(aligned.clone(), 4, Repr::Native);
        described.desc = Some(Box::new(Bytes::from_static(b"d")));
        assert_eq!(values_in_place::<f64>(&described, 4), None, "a type description");
        // Loc<f64> has padding; bool needs its values validated.
        let padded = Bytes::from(vec![0u8; 2 * std::mem::size_of::<Loc<f64>>()]);
        assert!(values_in_place::<Loc<f64>>(&message::<Loc<f64>>(padded, 2, Repr::Native), 2).is_none(), "padding");
        let flags = Bytes::from(vec![1u8; 4]);
        assert!(values_in_place::<bool>(&message::<bool>(flags, 4, Repr::Native), 4).is_none(), "validated values");
    }
}
