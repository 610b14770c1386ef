//! The endpoint: one rank's engine behind a lock, with its transport, and
//! the bookkeeping that turns engine completions into woken requests.

use bytes::{Bytes, BytesMut};

// The maps here are keyed by this process's own request ids and receive
// specs, never by values a peer chooses, so a fast unkeyed hash (Fx) is
// safe from collision flooding; SipHash cost a quarter of a small
// message's cycles.
use rustc_hash::FxHashMap as HashMap;
use std::collections::hash_map::Entry;
use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::transport::{SendError, Transport};
use crate::error::{Error, ErrorKind, Result};
use crate::pack::Repr;
use crate::proto::engine::{Arrived, Config, Delivered, Engine, Envelope, Event, LocalArrival, LocalMessage, Outgoing, ReqId, SendMode};
use crate::proto::wire::Frame;

pub(crate) enum Completion {
    Send(Result<()>),
    Recv(Result<Delivered>),
    /// A receive withdrawn by `MPI_Cancel`.
    Cancelled,
}

/// What the endpoint keeps for a request the engine has not finished, or
/// whose completion waits to be taken: one map entry per request, so a
/// message costs a few lookups of one map.
pub(crate) enum Tracked {
    /// Waiting: the task to wake when it completes, whether an orphaned
    /// any-source receive (see [`Event::Orphaned`]) was already polled once
    /// without a match, and whether data of its message arrived that it
    /// may take now (see [`Event::DataArrived`]).
    Waiting { waker: Option<Waker>, orphan_polled: bool, data_arrived: bool },
    /// Finished: the completion, until the request takes it.
    Done(Completion),
    /// A send whose request was dropped or freed before completing, or a
    /// receive whose request was freed (`MPI_Request_free`): its
    /// completion is discarded (a send's failure is traced, a received
    /// message's credit given back).
    Abandoned,
    /// A buffered send in flight, holding this many bytes of the attached
    /// buffer.
    Buffered(usize),
}

/// State of the attached buffer for buffered sends.
#[derive(Default)]
pub(crate) struct BsendBuffer {
    pub(crate) attached: Option<Vec<u8>>,
    pub(crate) used: usize,
    /// Buffered sends in flight (each [`Tracked::Buffered`]).
    pub(crate) in_flight: usize,
    pub(crate) detach_waiters: Vec<Waker>,
}

pub(crate) struct State {
    pub(crate) engine: Engine,
    /// The requests being waited for, finished but not taken, abandoned
    /// or buffered; a request nobody has polled yet has no entry.
    pub(crate) requests: HashMap<ReqId, Tracked>,
    /// A send being started under this lock: a completion it gets before
    /// the lock is released (an eager send's) goes to `started`, with its
    /// id, for the starting call to take, rather than through `requests`
    /// (see [`Shared::start_send`]).
    pub(crate) starting: Option<ReqId>,
    pub(crate) started: Option<(ReqId, Completion)>,
    /// The members of each communicator context over a subgroup of the
    /// world: a delivered message's sender is renumbered into its
    /// communicator's numbering as its receive takes it.
    pub(crate) groups: HashMap<u64, Arc<crate::comm::Members>>,
    /// Woken whenever a data frame arrives: the probes waiting, each
    /// with the key it listed itself under (see
    /// [`list_probe`](State::list_probe)).
    pub(crate) arrival_wakers: Vec<(u64, Waker)>,
    /// The key of the next probe to wait.
    pub(crate) next_probe: u64,
    /// Woken when the engine has flushed (finalize) or connected.
    pub(crate) state_wakers: Vec<(Waker, Awaited)>,
    /// Wakers to call once the lock is released (see [`Locked`]).
    pub(crate) to_wake: Vec<Waker>,
    /// Wakers replaced or left behind under the lock, dropped once it is
    /// released (see [`Locked`]): a waker may be the last owner of its
    /// task, whose future's drop may take this lock again.
    pub(crate) displaced: Vec<Waker>,
    /// Frames went to the transport under this hold of the lock: it is
    /// told once the lock is released ([`Transport::deliver_offered`]).
    pub(crate) offered: bool,
    pub(crate) bsend: BsendBuffer,
    /// This rank's sends to ranks of this process whose messages wait at
    /// their receivers for a match ([`LocalArrival::AwaitsMatch`]), with
    /// their destinations: completed when the receiver says so, or failed
    /// with the destination.
    pub(crate) local_sends: HashMap<ReqId, u32>,
    /// Sends of ranks of this process whose messages waited here and are
    /// now done ([`Event::LocalSendDone`]): (rank, send, outcome), told to
    /// their endpoints once the lock is released.
    pub(crate) local_done: Vec<(u32, ReqId, Result<()>)>,
}

/// A communicator's collectives on this endpoint, shared by every handle
/// of the communicator (the world's kept by the endpoint, another's by
/// its registration, gone with its last handle or the last receive
/// started on it): numbering a call takes no lock.
#[derive(Default)]
pub(crate) struct CommCollectives {
    /// The next call's number, which its messages' tags carry.
    pub(crate) next: AtomicU32,
    /// Where its collectives meet, if every member lives in this process
    /// (see [`LocalWorld`](super::LocalWorld)); looked up at its first call.
    pub(crate) local: OnceLock<Option<super::local::LocalMember>>,
}

/// What a task waits for in [`Endpoint::connected`] or
/// [`Endpoint::finalize`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Awaited {
    /// Every peer's hello (or its failure).
    Connected,
    /// Every started send delivered or failed.
    Flushed,
}

impl Awaited {
    fn reached(self, st: &State) -> bool {
        let engine = &st.engine;
        engine.is_closed()
            || match self {
                Awaited::Connected => engine.is_connected(),
                // Sends whose messages wait at ranks of this process count
                // too: their receivers complete or fail them.
                Awaited::Flushed => engine.is_flushed() && st.local_sends.is_empty(),
            }
    }
}

pub(crate) struct Shared {
    pub(crate) rank: u32,
    pub(crate) size: u32,
    /// The representation to send typed data to each peer in (a
    /// [`Repr`] as `u8`), read without the lock when packing a send.
    pub(crate) reprs: Vec<AtomicU8>,
    pub(crate) transport: Box<dyn Transport>,
    pub(crate) state: Mutex<State>,
    /// What the endpoint keeps alive for its transport (its driver's abort
    /// guard): dropped with the endpoint's last handle.
    pub(crate) owned: Mutex<Vec<Box<dyn Send>>>,
    /// How many times the world communicator has been duplicated (or
    /// split), through any of its handles: every [`Endpoint::world`] shares
    /// it, so two handles never derive the same context.
    pub(crate) world_dups: Arc<AtomicU64>,
    /// The world communicator's collectives, shared by its handles (see
    /// [`CommCollectives`]).
    pub(crate) world_collectives: CommCollectives,
    /// Contexts of communicators whose last handle went while the state
    /// was locked: their entries in `state` go at the next hold of the
    /// lock (see `comm::group::Registration`). Its lock is taken either
    /// alone or under the state's, never the other way round.
    pub(crate) retired: Mutex<Vec<u64>>,
    /// Whether `retired` may hold contexts: looked at, without its lock,
    /// at every hold of the state's lock.
    pub(crate) any_retired: AtomicBool,
    /// Where collectives meet when every rank of the world lives in this
    /// process ([`Transport::local_world`]).
    pub(crate) local: Option<Arc<super::LocalWorld>>,
    /// Per world rank, whether this rank has sent it a message as frames:
    /// from then on it sends it nothing another way, so that its messages
    /// to that rank keep their order (see [`Shared::local_receiver`]).
    pub(crate) framed_to: Box<[AtomicBool]>,
}

impl Drop for Shared {
    /// A rank whose endpoint goes fails the collectives that wait for it,
    /// and answers the sends of ranks of this process whose messages wait
    /// here (they fail) or whose answers it has not passed on yet.
    fn drop(&mut self) {
        self.leave_local();
        let Some(world) = self.local.clone() else { return };
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let error = Error::process_failed(self.rank, "its endpoint was dropped");
        let mut answers = st.engine.take_local_answers(&error);
        answers.append(&mut st.local_done);
        if answers.is_empty() {
            return;
        }
        let answer = move || world.answer_senders(answers);
        // The senders' locks are taken on a thread of their own: this
        // endpoint may go while this thread holds one of them (a future
        // that held its last handle, dropped under another endpoint's lock).
        if let Err(e) = std::thread::Builder::new().name("mpx-local-answers".into()).spawn(answer) {
            tracing::error!(rank = self.rank, error = %e, "no thread to answer the sends waiting at a dropped endpoint: they wait on");
        }
    }
}

impl Shared {
    /// This rank takes part in no more collectives: those of its world's
    /// ranks in this process that wait for its part fail.
    pub(crate) fn leave_local(&self) {
        if let Some(world) = &self.local {
            world.leave(self.rank);
        }
    }
}

/// One rank's connection to the world; see the [module docs](super).
#[derive(Clone)]
pub struct Endpoint {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Endpoint(rank {} of {})", self.shared.rank, self.shared.size)
    }
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

/// A rank as the engine and the wire name it (32 bits); a rank beyond
/// that is outside every world, as `u32::MAX` is.
fn wire_rank(rank: usize) -> u32 {
    u32::try_from(rank).unwrap_or(u32::MAX)
}

impl Endpoint {
    /// An endpoint for `rank` of `size` ranks over `transport`. Its engine
    /// queues a hello to every peer at once. A rank outside the world
    /// (`rank >= size`) is [`ErrorKind::InvalidRank`](crate::ErrorKind::InvalidRank),
    /// and a transport whose [`LocalWorld`](Transport::local_world) has
    /// another number of ranks than `size` is
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument).
    pub fn new(rank: usize, size: usize, config: Config, transport: impl Transport) -> Result<Endpoint> {
        let local = transport.local_world();
        if let Some(world) = local.as_ref().filter(|w| w.ranks() != size) {
            return Err(crate::ErrorKind::InvalidArgument(format!("a transport's world of {} ranks in one process, for a world of {size}", world.ranks())).into());
        }
        let size = u32::try_from(size).map_err(|_| crate::ErrorKind::InvalidArgument(format!("a world of {size} ranks")))?;
        let rank = u32::try_from(rank).map_err(|_| crate::ErrorKind::InvalidRank { rank, size: size as usize })?;
        let state = State {
            engine: Engine::new(rank, size, config)?,
            requests: HashMap::default(),
            starting: None,
            started: None,
            groups: HashMap::default(),
            arrival_wakers: Vec::new(),
            next_probe: 0,
            state_wakers: Vec::new(),
            to_wake: Vec::new(),
            displaced: Vec::new(),
            offered: false,
            bsend: BsendBuffer::default(),
            local_sends: HashMap::default(),
            local_done: Vec::new(),
        };
        let shared = Arc::new(Shared {
            rank,
            size,
            local,
            framed_to: (0..size).map(|_| AtomicBool::new(false)).collect(),
            reprs: (0..size).map(|_| AtomicU8::new(Repr::External32 as u8)).collect(),
            transport: Box::new(transport),
            state: Mutex::new(state),
            owned: Mutex::new(Vec::new()),
            world_dups: Arc::new(AtomicU64::new(0)),
            world_collectives: CommCollectives::default(),
            retired: Mutex::new(Vec::new()),
            any_retired: AtomicBool::new(false),
        });
        if let Some(world) = &shared.local {
            world.join(rank, Arc::downgrade(&shared));
        }
        let mut st = shared.lock();
        shared.flush(&mut st);
        drop(st);
        Ok(Endpoint { shared })
    }

    /// Keeps `guard` for as long as the endpoint lives: a transport hands
    /// over its driver this way (a guard whose drop stops the driver), so the
    /// endpoint owns its driver, as quinn's connection owns its
    /// `ConnectionDriver`. Drivers hold only a [`WeakEndpoint`].
    pub fn own(&self, guard: impl Send + 'static) {
        self.shared.owned.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(guard));
    }

    /// This endpoint's rank.
    pub fn rank(&self) -> usize {
        self.shared.rank as usize
    }

    /// A weak handle on this endpoint.
    pub fn downgrade(&self) -> WeakEndpoint {
        WeakEndpoint { shared: Arc::downgrade(&self.shared) }
    }

    /// Gives a frame from rank `from` to the engine. A frame that breaks
    /// the protocol fails that peer, and comes back as the error (the
    /// transport may drop that peer's connection). A frame said to come
    /// from outside the world or from this rank itself (whose messages to
    /// itself never reach a transport) is refused with an
    /// [`ErrorKind::Protocol`](crate::ErrorKind::Protocol) and changes nothing.
    pub fn handle_frame(&self, from: usize, frame: Frame) -> Result<()> {
        self.shared.deliver(wire_rank(from), frame)
    }

    /// The transport can take frames for `dest` again (after it answered
    /// [`SendError::Full`](super::SendError::Full)).
    pub fn writable(&self, dest: usize) {
        let mut st = self.shared.lock();
        st.engine.writable(wire_rank(dest));
        self.shared.flush(&mut st);
    }

    /// The transport lost rank `rank` because of `cause` (typically an
    /// [`ErrorKind::Transport`] carrying the I/O or TLS error): everything
    /// that depends on it fails with [`ErrorKind::ProcessFailed`] naming the
    /// rank, whose [`source`](std::error::Error::source) is `cause`.
    pub fn peer_failed(&self, rank: usize, cause: Error) {
        let mut st = self.shared.lock();
        st.engine.fail_peer(wire_rank(rank), cause);
        st.wake_probes();
        self.shared.flush(&mut st);
    }

    /// Rank `rank`'s stream of frames has ended, every frame of it handed
    /// to [`handle_frame`](Endpoint::handle_frame): a peer that has not
    /// said goodbye fails, and so does one whose goodbye announced frames
    /// that did not come (a peer that ends its streams so would otherwise
    /// be waited for until the transport's idle timeout, and for ever
    /// where the connection stays alive).
    pub fn peer_ended(&self, rank: usize) {
        let mut st = self.shared.lock();
        st.engine.peer_ended(wire_rank(rank));
        st.wake_probes();
        self.shared.flush(&mut st);
    }

    /// Every stream of rank `rank`'s has ended (a transport that carries
    /// rendezvous data on a stream of its own calls this once both have),
    /// every frame handed to [`handle_frame`](Endpoint::handle_frame):
    /// beyond what [`peer_ended`](Endpoint::peer_ended) fails it for, a
    /// peer that still owes data of messages it started fails (see
    /// [`Engine::peer_streams_ended`]). A transport with one stream per
    /// peer calls this alone.
    pub fn peer_streams_ended(&self, rank: usize) {
        let mut st = self.shared.lock();
        st.engine.peer_streams_ended(wire_rank(rank));
        st.wake_probes();
        self.shared.flush(&mut st);
    }

    /// When the engine next wants [`handle_timeout`](Endpoint::handle_timeout)
    /// (see [`Engine::poll_timeout`]).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.shared.lock().engine.poll_timeout()
    }

    /// Gives the engine the time (see [`Engine::handle_timeout`]): the
    /// transport's driver calls it at start and whenever
    /// [`poll_timeout`](Endpoint::poll_timeout) comes due.
    pub fn handle_timeout(&self, now: Instant) {
        let mut st = self.shared.lock();
        st.engine.handle_timeout(now);
        st.wake_probes();
        self.shared.flush(&mut st);
    }

    /// Diagnostics: the requests this endpoint keeps state for: those
    /// polled and not finished, finished and not taken yet, and sends
    /// dropped while still in flight. It falls back to 0 once nothing is
    /// under way: a count that only grows is a leak.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # let sockets = [mpx::quic::bind("127.0.0.1:0".parse().unwrap()).unwrap(), mpx::quic::bind("127.0.0.1:0".parse().unwrap()).unwrap()];
    /// # let addrs: Vec<_> = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
    /// # let job = mpx::quic::JobCredential::generate(1)?;
    /// # let [s0, _s1] = sockets;
    /// let zero = mpx::quic::start(s0, &addrs, job.issue(0)?, &mpx::quic::Options::local())?;
    /// let mut got = 0u8;
    /// let mut recv = zero.world().irecv(&mut got, 0, 0);
    /// assert!(futures::poll!(&mut recv).is_pending());
    /// assert_eq!(zero.tracked_requests(), 1, "a polled receive waits with its waker");
    /// assert!(recv.cancel());
    /// assert!(recv.await?.test_cancelled());
    /// assert_eq!(zero.tracked_requests(), 0);
    /// # Ok(()) }
    /// ```
    pub fn tracked_requests(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// Diagnostics: payload bytes waiting in the engine for `dest`.
    pub fn queued_bytes(&self, dest: usize) -> usize {
        self.shared.lock().engine.queued_bytes(wire_rank(dest))
    }

    /// Waits until every peer's hello has arrived (or the peer failed), so
    /// that sends know each peer's representation.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # let sockets = [mpx::quic::bind("127.0.0.1:0".parse().unwrap()).unwrap(), mpx::quic::bind("127.0.0.1:0".parse().unwrap()).unwrap()];
    /// # let addrs: Vec<_> = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
    /// # let job = mpx::quic::JobCredential::generate(1)?;
    /// # let [s0, s1] = sockets;
    /// # let options = mpx::quic::Options::local();
    /// let zero = mpx::quic::start(s0, &addrs, job.issue(0)?, &options)?;
    /// let one = mpx::quic::start(s1, &addrs, job.issue(1)?, &options)?;
    /// // Both have their peer's hello: sends know its representation.
    /// tokio::join!(zero.connected(), one.connected());
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits.
    pub async fn connected(&self) {
        self.engine_state(Awaited::Connected).await
    }

    /// The ranks whose hello this endpoint still waits for (empty once
    /// [`connected`](Endpoint::connected) is ready): what to name when a
    /// start times out.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # let sockets = [mpx::quic::bind("127.0.0.1:0".parse().unwrap()).unwrap(), mpx::quic::bind("127.0.0.1:0".parse().unwrap()).unwrap()];
    /// # let addrs: Vec<_> = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
    /// # let job = mpx::quic::JobCredential::generate(1)?;
    /// # let [s0, _s1] = sockets;
    /// # let options = mpx::quic::Options::local();
    /// // Rank 1 never starts: rank 0 waits for its hello.
    /// let zero = mpx::quic::start(s0, &addrs, job.issue(0)?, &options)?;
    /// assert_eq!(zero.awaiting_hello(), [1]);
    /// # Ok(()) }
    /// ```
    pub fn awaiting_hello(&self) -> Vec<usize> {
        self.shared.lock().engine.awaiting_hello()
    }

    /// Waits until the engine reaches `awaited` (or is closed); the flush
    /// that reaches it wakes the waiter.
    async fn engine_state(&self, awaited: Awaited) {
        std::future::poll_fn(|cx| {
            let mut st = self.shared.lock();
            if awaited.reached(&st) {
                return Poll::Ready(());
            }
            // Polled again (in a select! loop): one entry per task.
            if !st.state_wakers.iter().any(|(w, a)| *a == awaited && w.will_wake(cx.waker())) {
                st.state_wakers.push((cx.waker().clone(), awaited));
            }
            Poll::Pending
        })
        .await
    }

    /// Ends this rank's part. Tells every peer this rank posts no more
    /// receives (so their sends to it that need a match fail instead of
    /// waiting), then waits until every send this rank started, including
    /// dropped and freed ones and buffered sends, has been delivered to the
    /// transport (or, to a rank of this process whose messages meet it,
    /// taken by a receive there) or failed. Then the endpoint closes
    /// (receives still posted fail, and every later operation on it fails with
    /// [`ErrorKind::Finalized`](crate::ErrorKind::Finalized)), its last goodbyes go
    /// to the transport, and it waits for the transport to flush
    /// everything it took. Over QUIC that includes waiting until every peer
    /// has finalized too (MPI's finalize is collective): a finished rank
    /// keeps reading what its peers still send it until they end.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # let sockets = [mpx::quic::bind("127.0.0.1:0".parse().unwrap()).unwrap(), mpx::quic::bind("127.0.0.1:0".parse().unwrap()).unwrap()];
    /// # let addrs: Vec<_> = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
    /// # let job = mpx::quic::JobCredential::generate(1)?;
    /// # let [s0, s1] = sockets;
    /// # let options = mpx::quic::Options::local();
    /// let zero = mpx::quic::start(s0, &addrs, job.issue(0)?, &options)?;
    /// let one = mpx::quic::start(s1, &addrs, job.issue(1)?, &options)?;
    /// // A send whose request is dropped still arrives: finalize waits for it.
    /// drop(zero.world().isend(vec![1u8; 100_000], 1, 0));
    /// let (done, got) = tokio::join!(zero.finalize(), async {
    ///     let got = one.world().recv_vec::<u8>(0, 0).await;
    ///     one.finalize().await?;
    ///     got
    /// });
    /// done?;
    /// assert_eq!(got?.0.len(), 100_000);
    /// assert_eq!(zero.world().send(&1u8, 1, 1).await.unwrap_err(), mpx::ErrorKind::Finalized);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping it after the farewell leaves the endpoint open; sends keep
    /// going in the background.
    pub async fn finalize(&self) -> Result<()> {
        // Gone from the meeting place first: a send of this rank's that
        // starts after the goodbye goes to the engine, which refuses it.
        self.shared.leave_local();
        {
            let mut st = self.shared.lock();
            st.engine.farewell(false);
            self.shared.flush(&mut st);
        }
        self.engine_state(Awaited::Flushed).await;
        self.close();
        std::future::poll_fn(|cx| self.shared.transport.poll_flush(cx)).await
    }

    /// Ends this rank's part at once, without waiting for its sends: for a
    /// program that failed or panicked. Peers learn it failed.
    pub fn abort(&self) {
        self.shared.leave_local();
        {
            let mut st = self.shared.lock();
            st.engine.farewell(true);
            self.shared.flush(&mut st);
            st.engine.close();
            self.shared.fail_own_waiting_sends(&mut st, |_| true);
            self.shared.flush(&mut st);
        }
        self.start_flush();
    }

    /// Starts the transport's flush without waiting for it (`finalize`
    /// waits), so that the goodbye goes out and peers waiting for this
    /// rank to end (a QUIC rank's finalize) see it end.
    fn start_flush(&self) {
        self.shared.transport.start_flush();
    }

    /// Closes the endpoint: every operation still waiting, and every later
    /// one, fails with [`ErrorKind::Finalized`](crate::ErrorKind::Finalized).
    /// Its goodbyes go out, and the transport starts to flush, so peers
    /// waiting for this rank to end (a QUIC rank's finalize) see it end
    /// while the endpoint is still held.
    pub fn close(&self) {
        self.shared.leave_local();
        {
            let mut st = self.shared.lock();
            st.engine.close();
            self.shared.fail_own_waiting_sends(&mut st, |_| true);
            st.wake_probes();
            let waiters = std::mem::take(&mut st.bsend.detach_waiters);
            st.to_wake.extend(waiters);
            self.shared.flush(&mut st);
        }
        self.start_flush();
    }
}

/// The endpoint's state, locked. Wakers queued in `to_wake` while it is
/// held run after the lock is released, and wakers it lets go of
/// (`displaced`) are dropped then, so a waker that calls back into mpx (a
/// custom `Wake`, an executor that polls inline), or whose drop drops its
/// task's future, cannot deadlock; then, if it was offered frames
/// meanwhile, the transport may deliver them
/// ([`Transport::deliver_offered`]).
pub(crate) struct Locked<'a> {
    guard: Option<MutexGuard<'a, State>>,
    transport: &'a dyn Transport,
    /// The ranks of this process, to tell of their sends done here
    /// ([`State::local_done`]).
    local: Option<&'a super::LocalWorld>,
}

impl Deref for Locked<'_> {
    type Target = State;
    #[inline]
    fn deref(&self) -> &State {
        self.guard.as_ref().expect("held until drop")
    }
}

impl DerefMut for Locked<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut State {
        self.guard.as_mut().expect("held until drop")
    }
}

thread_local! {
    /// The memory of the last list of wakers woken on this thread, handed
    /// back to the next endpoint that wakes some: waking a task allocates
    /// nothing.
    static SPARE_WAKERS: Cell<Vec<Waker>> = const { Cell::new(Vec::new()) };

    /// The endpoint (its [`Shared`]'s address) and request whose poll is
    /// having the transport deliver arrivals on this thread (see
    /// [`Shared::poll_arrivals`]).
    static POLLING: Cell<Option<(usize, ReqId)>> = const { Cell::new(None) };
}

impl Drop for Locked<'_> {
    #[inline]
    fn drop(&mut self) {
        match self.guard.as_ref() {
            // Most holds wake nobody and offer nothing: only the unlock.
            Some(g) if g.to_wake.is_empty() && !g.offered && g.local_done.is_empty() && g.displaced.is_empty() => drop(self.guard.take()),
            Some(_) => self.release_and_wake(),
            None => {}
        }
    }
}

impl Locked<'_> {
    /// Releases the lock, then wakes what the hold queued to wake and has
    /// the transport deliver what it was offered.
    #[inline(never)]
    fn release_and_wake(&mut self) {
        let offered = self.guard.as_mut().is_some_and(|g| std::mem::take(&mut g.offered));
        let wakers = match self.guard.as_mut() {
            Some(g) if !g.to_wake.is_empty() => {
                let spare = SPARE_WAKERS.try_with(Cell::take).unwrap_or_default();
                Some(std::mem::replace(&mut g.to_wake, spare))
            }
            _ => None,
        };
        let local_done = match self.guard.as_mut() {
            Some(g) if !g.local_done.is_empty() => std::mem::take(&mut g.local_done),
            _ => Vec::new(),
        };
        let displaced = match self.guard.as_mut() {
            Some(g) if !g.displaced.is_empty() => std::mem::take(&mut g.displaced),
            _ => Vec::new(),
        };
        drop(self.guard.take());
        drop(displaced);
        if let Some(world) = self.local.filter(|_| !local_done.is_empty()) {
            world.answer_senders(local_done);
        }
        if let Some(mut wakers) = wakers {
            for w in wakers.drain(..) {
                w.wake();
            }
            let _ = SPARE_WAKERS.try_with(|spare| spare.set(wakers));
        }
        if offered {
            self.transport.deliver_offered();
        }
    }
}

impl State {
    /// Takes request `id`'s entry out of `requests`; a waker it held goes
    /// to [`displaced`](State::displaced), to be dropped once the lock is
    /// released.
    pub(crate) fn take_request(&mut self, id: ReqId) -> Option<Tracked> {
        let mut tracked = self.requests.remove(&id)?;
        if let Tracked::Waiting { waker, .. } = &mut tracked {
            self.displaced.extend(waker.take());
        }
        Some(tracked)
    }

    /// Request `id` finished outside the engine (a cancel): its entry goes,
    /// and a task that polled it is woken once the lock is released, to
    /// find it finished (a task of its own may be waiting on it while
    /// another cancels it).
    pub(crate) fn finish_outside_engine(&mut self, id: ReqId) {
        if let Some(Tracked::Waiting { waker: Some(waker), .. }) = self.requests.remove(&id) {
            self.to_wake.push(waker);
        }
    }

    /// Buffered send `id` is done (gone, or failed): its room in the
    /// attached buffer is free again, and a detach waiting for it looks
    /// again.
    pub(crate) fn release_bsend(&mut self, id: ReqId) {
        let Entry::Occupied(entry) = self.requests.entry(id) else { return };
        let Tracked::Buffered(bytes) = *entry.get() else { return };
        entry.remove();
        self.bsend.used -= bytes;
        self.bsend.in_flight -= 1;
        let waiters = std::mem::take(&mut self.bsend.detach_waiters);
        self.to_wake.extend(waiters);
    }

    /// Why the engine would refuse a send of `len` bytes to `dest` in
    /// `mode` as it starts, if it would: this rank has said goodbye or
    /// closed ([`ErrorKind::Finalized`]), or `dest` has failed, or has
    /// finished where the send needs a match (by its mode and length;
    /// the engine may find more, a lack of credit). A send to a rank of
    /// this process, which does not go through the engine, asks first, and
    /// so does a buffered send, before it takes room in the buffer.
    pub(crate) fn refuses_send(&self, dest: u32, mode: SendMode, len: usize) -> Option<Error> {
        if self.engine.is_closed() || self.engine.is_finished() {
            return Some(ErrorKind::Finalized.into());
        }
        let needs_match = !matches!(mode, SendMode::Standard | SendMode::Buffered) || len > self.engine.config().eager_threshold;
        self.engine.dead(dest, needs_match)
    }

    /// Reserves `need` bytes of the attached buffer for buffered send
    /// `id`, until it is done; [`ErrorKind::BufferExhausted`] if they are
    /// not free.
    pub(crate) fn reserve_bsend(&mut self, id: ReqId, need: usize) -> Result<()> {
        let b = &mut self.bsend;
        let capacity = b.attached.as_ref().map_or(0, Vec::len);
        if b.used + need > capacity {
            let available = capacity.saturating_sub(b.used) as u64;
            return Err(ErrorKind::BufferExhausted { needed: need as u64, available }.into());
        }
        b.used += need;
        b.in_flight += 1;
        self.requests.insert(id, Tracked::Buffered(need));
        Ok(())
    }

    /// Removes the entries of the communicator with `context`, and closes
    /// its collective context: the late messages of its collectives,
    /// queued or still to come, are dropped (see
    /// [`Engine::close_context`]). A point-to-point message that arrives
    /// on it later waits unmatched, as on any context no receive names
    /// (its sender keeps its world rank).
    pub(crate) fn forget_communicator(&mut self, context: u64) {
        self.groups.remove(&context);
        self.groups.remove(&(context | 1));
        self.engine.forget_members(context);
        self.engine.forget_members(context | 1);
        self.engine.close_context(context | 1);
    }

    /// The sender of `envelope` as the communicator of its context numbers
    /// it (as the world does, for the world's contexts).
    #[inline]
    /// Names the sender of a message too long for receive `id` as the
    /// receive's communicator numbers it, in the `Truncate` error the
    /// engine gives (which names it as the world does), while the engine
    /// still holds the message: it lets go of it when this rank finishes
    /// or closes, which may come before the receive's owner takes the
    /// error.
    fn name_truncated_sender(&self, id: ReqId, result: &mut Result<Delivered>) {
        let Err(e) = result else { return };
        let ErrorKind::Truncate { message: Some((source, _)), .. } = e.kind_mut() else { return };
        if let Some(envelope) = self.engine.truncated_envelope(id) {
            *source = self.sender_in_its_communicator(envelope) as usize;
        }
    }

    fn sender_in_its_communicator(&self, envelope: &Envelope) -> u32 {
        if self.groups.is_empty() {
            return envelope.source;
        }
        self.groups.get(&envelope.context).map_or(envelope.source, |members| members.rank_of_sender(envelope.source))
    }

    /// Probes wait for messages to appear in the queue: wake them.
    pub(crate) fn wake_probes(&mut self) {
        let probes = std::mem::take(&mut self.arrival_wakers);
        for (_, waker) in probes {
            // The probes of one task list themselves one after another as
            // it polls them: one wake for them all.
            match self.to_wake.last() {
                Some(last) if last.will_wake(&waker) => self.displaced.push(waker),
                _ => self.to_wake.push(waker),
            }
        }
    }

    /// Lists `cx`'s waker to be woken at the next arrival for the probe
    /// listed under `key` (given one now if it has none), in place of
    /// the waker it listed before, if that is still listed.
    pub(crate) fn list_probe(&mut self, key: &mut Option<u64>, cx: &Context<'_>) {
        let key = *key.get_or_insert_with(|| {
            self.next_probe += 1;
            self.next_probe
        });
        match self.arrival_wakers.iter_mut().find(|(listed, _)| *listed == key) {
            Some((_, waker)) => register_waker(waker, cx, &mut self.displaced),
            None => self.arrival_wakers.push((key, cx.waker().clone())),
        }
    }

    /// Takes the probe listed under `key`, if any, off the list: its wait
    /// is over, or dropped.
    pub(crate) fn unlist_probe(&mut self, key: Option<u64>) {
        let Some(key) = key else { return };
        if let Some(at) = self.arrival_wakers.iter().position(|(listed, _)| *listed == key) {
            let (_, waker) = self.arrival_wakers.swap_remove(at);
            self.displaced.push(waker);
        }
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> Locked<'_> {
        // A panic while holding the lock cannot leave the engine half-updated
        // in a way that matters more than the panic itself.
        let mut locked = Locked {
            guard: Some(self.state.lock().unwrap_or_else(|e| e.into_inner())),
            transport: &*self.transport,
            local: self.local.as_deref(),
        };
        if self.any_retired.load(Ordering::Relaxed) {
            self.sweep_retired_now(&mut locked);
            // Late messages dropped with a context may answer senders, or
            // give credit back.
            self.flush(&mut locked);
        }
        locked
    }

    /// What forgetting a communicator queued (frames, answers to senders)
    /// while the state was locked without [`lock`](Shared::lock) goes at
    /// the lock's next hold, which sweeps and flushes.
    pub(crate) fn flush_at_next_hold(&self) {
        self.any_retired.store(true, Ordering::Release);
    }

    /// A communicator's last handle went while the state was locked:
    /// `context`'s entries go at the next hold of the lock.
    pub(crate) fn retire(&self, context: u64) {
        self.retired.lock().unwrap_or_else(|e| e.into_inner()).push(context);
        self.any_retired.store(true, Ordering::Release);
    }

    /// Removes the entries of the communicators retired while the state
    /// was locked (see [`retire`](Shared::retire)), if any, the state
    /// locked: a look at a flag, at every hold of the lock.
    #[inline]
    pub(crate) fn sweep_retired(&self, st: &mut State) {
        if self.any_retired.load(Ordering::Relaxed) {
            self.sweep_retired_now(st);
        }
    }

    #[cold]
    #[inline(never)]
    fn sweep_retired_now(&self, st: &mut State) {
        // Cleared before the list is taken: a context retired meanwhile
        // sets it again.
        self.any_retired.store(false, Ordering::Relaxed);
        let contexts = std::mem::take(&mut *self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        for context in contexts {
            st.forget_communicator(context);
        }
    }

    /// A receive is done with `msg` (see [`Engine::recycle`]).
    pub(crate) fn recycle(&self, msg: Delivered) {
        self.recycle_data(msg.data);
    }

    /// A receive is done with `data` (see [`Engine::recycle`]); medium
    /// data goes to this thread's spare buffers for the next pack
    /// ([`spare`](crate::pack::spare)), small data is simply dropped, both
    /// without taking the lock.
    pub(crate) fn recycle_data(&self, data: Bytes) {
        if data.len() >= Engine::RECYCLE_MIN {
            self.lock().engine.recycle(data);
        } else {
            crate::runtime::recycle_bytes(data);
        }
    }

    /// Hands queued frames to the transport, peer by peer, and dispatches
    /// the engine's events. Called after every change to the engine, most
    /// often with nothing to do: that check is inlined into the caller.
    #[inline]
    pub(crate) fn flush(&self, st: &mut State) {
        if st.engine.has_output() || !st.state_wakers.is_empty() {
            self.flush_output(st);
        }
    }

    /// [`flush`](Shared::flush) with something to do.
    #[inline(never)]
    fn flush_output(&self, st: &mut State) {
        if st.engine.take_local_arrival() {
            // A message to this rank itself: probes wait for arrivals, and
            // no frame came with it.
            st.wake_probes();
        }
        loop {
            let mut progressed = false;
            while let Some(dest) = st.engine.poll_writable() {
                while let Some(frame) = st.engine.poll_transmit(dest) {
                    progressed = true;
                    if !self.transmit(st, dest, frame) {
                        break;
                    }
                }
            }
            while let Some(ev) = st.engine.poll_event() {
                progressed = true;
                match ev {
                    Event::SendDone { id, result } => self.complete(st, id, Completion::Send(result)),
                    Event::RecvDone { id, mut result } => {
                        st.name_truncated_sender(id, &mut result);
                        self.complete(st, id, Completion::Recv(result))
                    }
                    Event::Orphaned { id } => {
                        if let Some(Tracked::Waiting { waker, .. }) = st.requests.get_mut(&id) {
                            if let Some(w) = waker.take() {
                                st.to_wake.push(w);
                            }
                        }
                        st.wake_probes();
                    }
                    Event::DataArrived { id } => {
                        // A receive not polled yet takes its data at the end.
                        if let Some(Tracked::Waiting { waker, data_arrived, .. }) = st.requests.get_mut(&id) {
                            *data_arrived = true;
                            if let Some(w) = waker.take() {
                                // The polling task finds the data itself;
                                // its waker is dropped once the lock is
                                // released, as every other (see
                                // `State::displaced`).
                                match self.polling(id) {
                                    true => st.displaced.push(w),
                                    false => st.to_wake.push(w),
                                }
                            }
                        }
                    }
                    Event::Connected { rank, repr } => {
                        self.reprs[rank as usize].store(repr as u8, Ordering::Relaxed);
                    }
                    Event::LocalSendDone { rank, id, result } => st.local_done.push((rank, id, result)),
                    Event::PeerFailed { rank } => {
                        // Through the engine from now on, which refuses
                        // what needs the failed rank.
                        if let Some(framed) = self.framed_to.get(rank as usize) {
                            framed.store(true, Ordering::Relaxed);
                        }
                        self.fail_own_waiting_sends(st, |dest| dest == rank);
                        self.transport.peer_lost(rank as usize)
                    }
                }
            }
            if !progressed {
                break;
            }
        }
        if !st.state_wakers.is_empty() {
            let (ready, waiting): (Vec<_>, Vec<_>) =
                std::mem::take(&mut st.state_wakers).into_iter().partition(|(_, awaited)| awaited.reached(st));
            st.state_wakers = waiting;
            st.to_wake.extend(ready.into_iter().map(|(w, _)| w));
        }
    }

    /// Hands `frame` to the transport for `dest`; false if the transport
    /// refused it (given back to the engine) or failed (the peer failed).
    fn transmit(&self, st: &mut State, dest: u32, frame: Frame) -> bool {
        st.offered = true;
        match self.transport.send(dest as usize, frame) {
            Ok(()) => true,
            Err(SendError::Full(frame)) => {
                st.engine.unsend(dest, frame);
                false
            }
            Err(SendError::Failed(e)) => {
                st.engine.fail_peer(dest, e);
                st.wake_probes();
                false
            }
        }
    }

    /// The representation to send typed data to `dest` in.
    pub(crate) fn repr_for(&self, dest: u32) -> Repr {
        match self.reprs.get(dest as usize).map(|r| r.load(Ordering::Relaxed)) {
            Some(0) => Repr::Native,
            _ => Repr::External32,
        }
    }

    /// Whether [`poll_done`](Shared::poll_done) would complete request `id`
    /// now, without taking its completion: a receive's message stays with
    /// the request, so withdrawing it still gives the message back.
    /// Otherwise registers `cx`'s waker. An orphaned any-source receive is
    /// settled on the second poll that finds it so, as in `poll_done`, which
    /// then fails it at once (a test neither settles it nor counts, as
    /// there). Pending, it sets `data_arrived` as
    /// [`poll_recv`](Shared::poll_recv) does. A settled receive's message
    /// keeps its eager credit until it is taken: given back, it goes back
    /// to the queue under that credit, which bounds what its sender holds
    /// here.
    pub(crate) fn poll_settled(&self, id: ReqId, cx: &mut Context<'_>, data_arrived: &mut bool) -> Poll<()> {
        self.poll_arrivals(id, cx);
        let mut st = self.lock();
        let State { engine, requests, to_wake, displaced, .. } = &mut *st;
        let tracked = requests.entry(id).or_insert(Tracked::Waiting { waker: None, orphan_polled: false, data_arrived: false });
        match wait(tracked, || engine.orphaned(id), cx, to_wake, displaced, data_arrived) {
            Waited::Pending => Poll::Pending,
            // Done, or an orphaned receive that fails when completed.
            Waited::NotWaiting | Waited::Orphaned => Poll::Ready(()),
        }
    }

    /// Has the transport deliver what has arrived, from the task polling
    /// request `id` (see [`Transport::poll_arrivals`]). If that completes
    /// `id` itself, its waker is not woken ([`Shared::complete`]): the poll
    /// finds it done right after. Woken, the running task would be polled
    /// again once it next waits, and on a multi-thread runtime tokio
    /// reschedules a task woken while it runs by waking another worker to
    /// steal it: a thread woken per message.
    fn poll_arrivals(&self, id: ReqId, cx: &mut Context<'_>) {
        struct Polling(Option<(usize, ReqId)>);
        impl Drop for Polling {
            fn drop(&mut self) {
                let _ = POLLING.try_with(|p| p.set(self.0));
            }
        }
        let me = (self as *const Shared as usize, id);
        let _restore = Polling(POLLING.try_with(|p| p.replace(Some(me))).ok().flatten());
        self.transport.poll_arrivals(cx);
    }

    /// Whether this thread is in [`Shared::poll_arrivals`] for request `id`.
    fn polling(&self, id: ReqId) -> bool {
        POLLING.try_with(Cell::get).ok().flatten() == Some((self as *const Shared as usize, id))
    }

    /// Takes request `id`'s completion, or registers `cx`'s waker for it.
    /// A receive's message counts as consumed once taken here: its eager
    /// credit goes back to the sender.
    pub(crate) fn poll_done(&self, id: ReqId, cx: &mut Context<'_>) -> Poll<Completion> {
        self.poll_recv(id, cx, &mut false)
    }

    /// [`poll_done`](Shared::poll_done) for a receive that takes its data
    /// as it arrives: pending, it sets `data_arrived` if data arrived that
    /// it may take now ([`take_arrived`](Shared::take_arrived)).
    pub(crate) fn poll_recv(&self, id: ReqId, cx: &mut Context<'_>, data_arrived: &mut bool) -> Poll<Completion> {
        self.poll_arrivals(id, cx);
        let mut st = self.lock();
        let st = &mut *st;
        let entry = match st.requests.entry(id) {
            Entry::Occupied(entry) if matches!(entry.get(), Tracked::Done(_)) => {
                let Tracked::Done(mut c) = entry.remove() else { unreachable!("matched above") };
                if let Completion::Recv(Err(e)) = &c {
                    if matches!(e.kind(), ErrorKind::Truncate { .. }) && st.engine.consume_truncated(id).is_some() {
                        // A message too long for it counts as received
                        // now (its sender was named as the receive's
                        // communicator numbers it when the error came:
                        // see `State::name_truncated_sender`).
                        self.flush(st);
                    }
                }
                if let Completion::Recv(Ok(msg)) = &mut c {
                    if msg.credit > 0 {
                        st.engine.release_credit(msg.envelope.source, msg.credit);
                        self.flush(st);
                    }
                    // From here on the sender is named as its communicator
                    // numbers it (statuses are made from the envelope).
                    msg.envelope.source = st.sender_in_its_communicator(&msg.envelope);
                }
                return Poll::Ready(c);
            }
            entry => entry,
        };
        let tracked = entry.or_insert(Tracked::Waiting { waker: None, orphan_polled: false, data_arrived: false });
        match wait(tracked, || st.engine.orphaned(id), cx, &mut st.to_wake, &mut st.displaced, data_arrived) {
            Waited::Pending => Poll::Pending,
            Waited::NotWaiting => {
                // Abandoned and buffered sends have no request left to poll
                // (request ids are never reused).
                debug_assert!(false, "request {id} polled after its request was given up");
                Poll::Pending
            }
            Waited::Orphaned => {
                let error = st.engine.orphan_error(id).unwrap_or_else(|| ErrorKind::Finalized.into());
                st.take_request(id);
                st.engine.cancel_recv(id);
                Poll::Ready(Completion::Recv(Err(error)))
            }
        }
    }

    /// Starts send `id` and flushes, the state locked; returns its
    /// completion if it completed meanwhile (an eager send usually does),
    /// so its request needs no second look at the endpoint. Otherwise its
    /// completion comes through `requests` as any other's. A send that
    /// goes at once as one eager frame goes straight to the transport
    /// ([`Engine::send_eager_now`]).
    pub(crate) fn start_send(&self, st: &mut State, id: ReqId, mode: SendMode, msg: Outgoing) -> Option<Completion> {
        let dest = msg.dest;
        let msg = match st.engine.send_eager_now(id, mode, msg) {
            Ok(frame) => {
                self.transmit(st, dest, frame);
                // A failure (the peer's) may have completed other requests.
                self.flush(st);
                return Some(Completion::Send(Ok(())));
            }
            Err(msg) => msg,
        };
        /// Clears `starting` however the start ends (a transport that
        /// panics in `send` included), so no later completion is taken
        /// for this send's.
        struct Started<'s>(&'s mut State);
        impl Drop for Started<'_> {
            fn drop(&mut self) {
                self.0.starting = None;
            }
        }
        st.started = None;
        st.starting = Some(id);
        let guard = Started(st);
        guard.0.engine.post_send(id, mode, msg);
        self.flush(guard.0);
        let st = &mut *guard.0;
        match st.started.take() {
            Some((done, completion)) if done == id => Some(completion),
            Some((other, completion)) => {
                // Not this send's: stored as any completion is.
                self.complete(st, other, completion);
                None
            }
            None => None,
        }
    }

    /// The endpoint of rank `dest`, if it lives in this process and
    /// messages to it meet it there ([`LocalWorld::meeting`](super::LocalWorld::meeting)):
    /// sends to it go through [`send_local`](Shared::send_local). Never
    /// once this rank has sent `dest` a message as frames
    /// ([`sent_frames_to`](Shared::sent_frames_to)): a message handed over
    /// would overtake those still on their way.
    #[inline]
    pub(crate) fn local_receiver(&self, dest: u32) -> Option<Arc<Shared>> {
        let world = self.local.as_ref()?;
        if self.framed_to.get(dest as usize).is_none_or(|framed| framed.load(Ordering::Relaxed)) {
            return None;
        }
        world.receiver(self.rank, dest)
    }

    /// This rank is sending `dest` a message as frames (see
    /// [`local_receiver`](Shared::local_receiver)).
    #[inline]
    pub(crate) fn sent_frames_to(&self, dest: u32) {
        if let Some(framed) = self.framed_to.get(dest as usize) {
            if self.local.is_some() && dest != self.rank && !framed.load(Ordering::Relaxed) {
                framed.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Starts a send to `receiver`, a rank of this process (see
    /// [`local_receiver`](Shared::local_receiver)), by handing its
    /// message to the receiver's engine ([`Engine::arrive_local`]):
    /// the send's id while it is under way, `None` if it completed as it
    /// started. `bsend`: the attached buffer's bytes a buffered send
    /// holds until it is done.
    ///
    /// A send that is done as it arrives (most small ones) takes no lock
    /// but the receiver's. One that waits for its match gets an id first,
    /// listed in [`State::local_sends`], so that the receiver can complete
    /// it from then on.
    pub(crate) fn send_local(&self, receiver: &Shared, mode: SendMode, msg: Outgoing, bsend: Option<usize>) -> Result<Option<ReqId>> {
        let dest = msg.dest;
        // A buffered send takes its room in the buffer first; a synchronous
        // one always waits for its match.
        let msg = match (bsend, mode) {
            (Some(_), _) | (_, SendMode::Synchronous) => msg,
            _ => match receiver.arrive_local(self.rank, LocalMessage { msg, mode, send_id: 0 }) {
                LocalArrival::Done(result) => return result.map(|()| None),
                LocalArrival::Refused(m) => m.msg,
                LocalArrival::AwaitsMatch => unreachable!("a send without an id never waits"),
            },
        };
        let id = {
            let mut st = self.lock();
            if let Some(e) = st.refuses_send(dest, mode, msg.data.len()) {
                return Err(e);
            }
            let id = st.engine.next_id();
            if let Some(need) = bsend {
                st.reserve_bsend(id, need)?;
            }
            st.local_sends.insert(id, dest);
            id
        };
        let result = match receiver.arrive_local(self.rank, LocalMessage { msg, mode, send_id: id }) {
            LocalArrival::AwaitsMatch => return Ok(bsend.is_none().then_some(id)),
            LocalArrival::Done(result) => result,
            LocalArrival::Refused(_) => unreachable!("a send with an id is never refused"),
        };
        let mut st = self.lock();
        if st.local_sends.remove(&id).is_none() {
            // Failed meanwhile (its receiver failed, or this rank closed):
            // the request finds that.
            return Ok(bsend.is_none().then_some(id));
        }
        // A finalize may wait for it.
        self.flush(&mut st);
        if bsend.is_some() {
            st.release_bsend(id);
        }
        result.map(|()| None)
    }

    /// Takes a message from `from`, a rank of this process (see
    /// [`send_local`](Shared::send_local)), into this endpoint's engine.
    fn arrive_local(&self, from: u32, m: LocalMessage) -> LocalArrival {
        let mut st = self.lock();
        let arrival = st.engine.arrive_local(from, m);
        if !matches!(arrival, LocalArrival::Refused(_)) {
            st.wake_probes();
        }
        self.flush(&mut st);
        arrival
    }

    /// Send `id` of this rank, whose message waited at a rank of this
    /// process, is done (see [`Event::LocalSendDone`]).
    pub(crate) fn local_send_done(&self, id: ReqId, result: Result<()>) {
        let mut st = self.lock();
        if st.local_sends.remove(&id).is_some() {
            self.complete(&mut st, id, Completion::Send(result));
            // A finalize may wait for it.
            self.flush(&mut st);
        }
    }

    /// Fails this rank's sends to ranks of this process that wait for
    /// their match at destinations `to` accepts, each with what its
    /// destination's failure (or this rank's closing) says.
    fn fail_own_waiting_sends(&self, st: &mut State, to: impl Fn(u32) -> bool) {
        if st.local_sends.is_empty() {
            return;
        }
        let failed: Vec<(ReqId, u32)> = st.local_sends.iter().filter(|&(_, &dest)| to(dest)).map(|(&id, &dest)| (id, dest)).collect();
        for (id, dest) in failed {
            st.local_sends.remove(&id);
            let error = st.engine.dead(dest, true).unwrap_or_else(|| ErrorKind::Finalized.into());
            self.complete(st, id, Completion::Send(Err(error)));
        }
    }

    /// Processes frames that have already arrived (see [`Transport::progress`]).
    pub(crate) fn progress(&self) {
        self.transport.progress(&mut |from, frame| {
            // Refused frames are traced in `deliver`.
            let _ = self.deliver(wire_rank(from), frame);
        });
    }

    /// Hands a frame from `from` to the engine; see [`Endpoint::handle_frame`].
    pub(crate) fn deliver(&self, from: u32, frame: Frame) -> Result<()> {
        let mut st = self.lock();
        let result = st.engine.handle_frame(from, frame);
        if let Err(e) = &result {
            if st.engine.is_failed(from) {
                tracing::warn!(rank = self.rank, peer = from, error = %e, "protocol violation: peer failed");
            } else {
                tracing::warn!(rank = self.rank, peer = from, error = %e, "frame refused");
            }
        }
        st.wake_probes();
        self.flush(&mut st);
        result
    }

    /// The data of receive `id`'s message that has arrived since it last
    /// took some (see [`Engine::take_arrived`]).
    pub(crate) fn take_arrived(&self, id: ReqId, accept: impl FnOnce(&Envelope) -> bool) -> Option<Arrived> {
        self.lock().engine.take_arrived(id, accept)
    }

    /// The request `id` was dropped before completing: a receive is
    /// withdrawn or, if it matched, its message goes back to the head of
    /// the queue; a send completes in the background.
    pub(crate) fn withdraw(&self, id: ReqId) {
        self.withdraw_streamed(id, BytesMut::new())
    }

    /// `MPI_Request_free` of receive `id`: unlike a withdrawal, the receive
    /// stays posted and takes the message it matches (or has matched), as
    /// MPI has it, but that message's data is dropped: the buffer's borrow
    /// ended with the request, and mpx never writes into it afterwards.
    /// Data it took as it arrived is dropped with it.
    pub(crate) fn free_recv(&self, id: ReqId) {
        let mut st = self.lock();
        match st.take_request(id) {
            Some(Tracked::Done(Completion::Recv(received))) => {
                Self::discard_received(&mut st, id, received);
                self.flush(&mut st);
            }
            Some(Tracked::Done(_)) => {}
            Some(kept @ (Tracked::Abandoned | Tracked::Buffered(_))) => {
                st.requests.insert(id, kept);
            }
            Some(Tracked::Waiting { .. }) | None => {
                if st.engine.receiving(id) {
                    st.requests.insert(id, Tracked::Abandoned);
                }
            }
        }
    }

    /// Consumes what freed receive `id` got, as a receive that takes it
    /// would: a message's eager credit goes back to its sender, a message
    /// too long for it counts as received.
    fn discard_received(st: &mut State, id: ReqId, received: Result<Delivered>) {
        match received {
            Ok(msg) => st.engine.release_credit(msg.envelope.source, msg.credit),
            Err(e) if matches!(e.kind(), ErrorKind::Truncate { .. }) => {
                st.engine.consume_truncated(id);
            }
            Err(_) => {}
        }
    }

    /// [`withdraw`](Shared::withdraw) for a receive that took the first
    /// bytes of its message, `head`, as they arrived
    /// ([`take_arrived`](Shared::take_arrived)): they go back with the
    /// message.
    pub(crate) fn withdraw_streamed(&self, id: ReqId, mut head: BytesMut) {
        let mut st = self.lock();
        if !head.is_empty() {
            match st.requests.get_mut(&id) {
                Some(Tracked::Done(Completion::Recv(Ok(msg)))) => {
                    head.extend_from_slice(&msg.data);
                    msg.data = head.freeze();
                }
                _ => st.engine.give_back(id, head),
            }
        }
        match st.take_request(id) {
            Some(Tracked::Done(Completion::Recv(Ok(msg)))) => {
                st.engine.requeue(msg);
                st.wake_probes();
                self.flush(&mut st);
            }
            Some(Tracked::Done(Completion::Send(Err(e)))) => {
                tracing::warn!(rank = self.rank, id, error = %e, "dropped or freed send failed");
            }
            Some(Tracked::Done(Completion::Recv(Err(e)))) if matches!(e.kind(), ErrorKind::Truncate { .. }) => {
                // Its message, too long for it, goes back unread.
                st.engine.restore_truncated(id);
                st.wake_probes();
                self.flush(&mut st);
            }
            Some(Tracked::Done(_)) => {}
            Some(kept @ (Tracked::Abandoned | Tracked::Buffered(_))) => {
                // Not a request's own entry: the background owns it.
                st.requests.insert(id, kept);
            }
            Some(Tracked::Waiting { .. }) | None => {
                if st.engine.withdraw_recv(id) {
                    st.wake_probes();
                    self.flush(&mut st);
                } else {
                    // A send still in flight: it completes in the background.
                    st.requests.insert(id, Tracked::Abandoned);
                }
            }
        }
    }

    pub(crate) fn complete(&self, st: &mut State, id: ReqId, completion: Completion) {
        if st.starting == Some(id) {
            st.started = Some((id, completion));
            return;
        }
        match st.requests.entry(id) {
            Entry::Vacant(entry) => {
                entry.insert(Tracked::Done(completion));
            }
            Entry::Occupied(mut entry) => match entry.get_mut() {
                Tracked::Waiting { waker, .. } => {
                    if let Some(w) = waker.take() {
                        if self.polling(id) {
                            st.displaced.push(w);
                        } else {
                            st.to_wake.push(w);
                        }
                    }
                    entry.insert(Tracked::Done(completion));
                }
                Tracked::Done(_) => {
                    entry.insert(Tracked::Done(completion));
                }
                Tracked::Abandoned => {
                    entry.remove();
                    match completion {
                        Completion::Send(Err(e)) => tracing::warn!(rank = self.rank, id, error = %e, "dropped or freed send failed"),
                        Completion::Recv(received) => Self::discard_received(st, id, received),
                        Completion::Send(Ok(())) | Completion::Cancelled => {}
                    }
                }
                Tracked::Buffered(_) => {
                    if let Completion::Send(Err(e)) = &completion {
                        tracing::error!(rank = self.rank, id, error = %e, "buffered send failed");
                    }
                    st.release_bsend(id);
                }
            },
        }
        tracing::trace!(rank = self.rank, id, "completed");
    }
}

thread_local! {
    /// Whether this thread is testing requests (see [`looking`]).
    static ONLY_LOOKING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `test` as a test of requests (`MPI_Test`, the tests of a request
/// set): its polls only look. An orphaned any-source receive (see
/// [`Shared::poll_recv`]) is neither failed by them nor counts them.
pub(crate) fn looking<R>(test: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ONLY_LOOKING.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(ONLY_LOOKING.with(|l| l.replace(true)));
    test()
}

/// Whether the polls now under way are a test's (see [`looking`]).
fn only_looking() -> bool {
    ONLY_LOOKING.with(Cell::get)
}

/// What [`wait`] found of a request not done when polled.
enum Waited {
    /// Still waiting: the poller is woken when it finishes.
    Pending,
    /// Not waiting: done (its completion still there), abandoned, or a
    /// buffered send.
    NotWaiting,
    /// An any-source receive that only this rank can still match, polled a
    /// second time while waiting: it fails now.
    Orphaned,
}

/// The part of [`Shared::poll_recv`] and [`Shared::poll_settled`] for a
/// request not done: takes whether data arrived for it since its last poll
/// into `data_arrived`, and registers `cx`'s waker (one it replaces goes
/// to `displaced`). An `orphaned` receive (only this rank can still match
/// it): the first poll that waits and finds it so lets everything else
/// this rank has ready run (a send to itself may be among it), and the
/// second is [`Waited::Orphaned`]; a test (see `looking`) neither fails it
/// nor counts, as MPI_Test only looks. Either way the poller is woken
/// once the lock is released (`to_wake`), so that a set whose test found
/// it so polls it again when it waits.
#[inline]
fn wait(tracked: &mut Tracked, orphaned: impl FnOnce() -> bool, cx: &Context<'_>, to_wake: &mut Vec<Waker>, displaced: &mut Vec<Waker>, data_arrived: &mut bool) -> Waited {
    let Tracked::Waiting { waker, orphan_polled, data_arrived: arrived } = tracked else { return Waited::NotWaiting };
    *data_arrived = std::mem::take(arrived);
    if orphaned() {
        if only_looking() || !std::mem::replace(orphan_polled, true) {
            to_wake.push(cx.waker().clone());
            return Waited::Pending;
        }
        return Waited::Orphaned;
    }
    register(waker, cx, displaced);
    Waited::Pending
}

/// Keeps `cx`'s waker in `slot` (cloning it only if it changed); one it
/// replaces goes to `displaced` (see [`State::displaced`]).
fn register(slot: &mut Option<Waker>, cx: &Context<'_>, displaced: &mut Vec<Waker>) {
    match slot {
        Some(w) => register_waker(w, cx, displaced),
        None => *slot = Some(cx.waker().clone()),
    }
}

/// [`register`] of a slot that holds a waker.
fn register_waker(slot: &mut Waker, cx: &Context<'_>, displaced: &mut Vec<Waker>) {
    if !slot.will_wake(cx.waker()) {
        displaced.push(std::mem::replace(slot, cx.waker().clone()));
    }
}

impl Shared {
    /// Ready, with the state still locked, once no buffered send is in
    /// flight: what follows (detaching, saying farewell) happens under the
    /// same lock, so no buffered send can slip in between.
    pub(crate) fn poll_bsend_drained(&self, cx: &mut Context<'_>) -> Poll<Locked<'_>> {
        let mut st = self.lock();
        if st.bsend.in_flight == 0 {
            Poll::Ready(st)
        } else {
            // One entry per waiting task, however often it polls.
            if !st.bsend.detach_waiters.iter().any(|w| w.will_wake(cx.waker())) {
                st.bsend.detach_waiters.push(cx.waker().clone());
            }
            Poll::Pending
        }
    }
}

