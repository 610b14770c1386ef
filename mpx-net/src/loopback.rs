//! The in-memory transport: every rank of the world runs in this process.
//!
//! With [`Options::local_messages`] (the default, [`Options::ranks`]),
//! point-to-point messages do not travel here at all: a send hands its
//! message to the receiving rank's engine itself, under that rank's lock
//! (see [`LocalWorld::meeting`] and
//! [`Engine::arrive_local`](mpx_core::proto::engine::Engine::arrive_local)),
//! and collectives meet in memory ([`Options::local_collectives`]). What
//! still travels as frames is what the engines say to each other (hellos,
//! goodbyes, pings), messages to or from a rank that has finalized,
//! closed or aborted, a sender's messages to a rank once it has sent that
//! rank a frame, and everything with [`Options::network_like`], whose
//! messages travel as a network would carry them.
//!
//! Sending a frame appends it to the destination's queue. The thread that
//! finds the queue undelivered takes it on (keeping the frame in hand if
//! the queue was empty: it goes first) and, once its own endpoint's lock
//! is released ([`Transport::deliver_offered`]), hands the frames to the
//! destination's endpoint itself: a message reaches its
//! receiver with no task switch between, and the receiving task is woken
//! once, by its completed receive. Whoever finds the queue taken only
//! appends, and the taker delivers what was appended before it lets go,
//! so frames between two ranks stay in order. Deliveries that make the
//! receiver send (a CTS, credit) leave those frames to the loop already
//! running on the thread, so delivery never recurses. Each rank's driver
//! task delivers only what was sent while the world was being made, and
//! runs the engine's timers.
//!
//! Each link (one sender, one receiver) carries at most
//! [`Options::link_capacity`] bytes that the receiver has not handled yet;
//! beyond that the link is full, the frame stays in the sender's engine,
//! and the receiver's deliverer tells the sender when the link drains, as
//! a network transport's flow control would. A receiver that stops reading
//! holds back only the frames to itself.
//!
//! Frames travel as values, payloads without copies. With
//! [`Options::wire`] they travel as bytes instead: each frame is encoded
//! (header, then payload as its own chunk) and the receiver decodes the
//! stream with a capped [`Decoder`], as a stream transport does.
//!
//! `test` calls deliver waiting queues too ([`Transport::progress`]), by
//! the same rule, so frames are never handled out of order.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mpx_core::Result<()> {
//! let sums = mpx_net::loopback::launch(4, |world| async move {
//!     let right = (world.rank() + 1) % world.size();
//!     let left = (world.rank() + world.size() - 1) % world.size();
//!     let mut got = [0u64];
//!     world.sendrecv(&[world.rank() as u64], right, 0, &mut got, left, 0).await?;
//!     Ok(got[0])
//! })
//! .await?;
//! assert_eq!(sums, [3, 0, 1, 2]);
//! # Ok(()) }
//! ```

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use mpx_core::proto::engine::Config;
use mpx_core::proto::wire::{Decoder, Frame};
use mpx_core::runtime::{LocalWorld, SendError, WeakEndpoint};
use mpx_core::{Comm, Endpoint, ErrorKind, Result, Transport};
use tokio::sync::Notify;

/// Options for [`launch_with`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// use mpx_net::loopback::{launch_with, Options};
/// // Frames encoded to bytes, small credit, external32: as over a network.
/// let options = Options { ranks: 2, ..Options::network_like(2) };
/// let got = launch_with(options, |comm| async move {
///     let other = 1 - comm.rank();
///     let (sent, got) = tokio::join!(comm.send(&vec![comm.rank() as u64; 10_000], other, 0), comm.recv_vec::<u64>(other, 0));
///     sent?;
///     Ok(got?.0[0])
/// })
/// .await?;
/// assert_eq!(got, [1, 0]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Number of ranks.
    pub ranks: usize,
    /// Protocol tunables (eager threshold, credit, chunk size, ...).
    pub engine: Config,
    /// Bytes a link carries before the receiver has handled them.
    pub link_capacity: usize,
    /// Frames travel as encoded bytes and are decoded on arrival.
    pub wire: bool,
    /// Collectives meet in memory, without messages (`barrier`, `bcast`,
    /// `allreduce`, `allgather`, `alltoall`: see
    /// [`LocalWorld`]); `false`: they
    /// exchange messages, as between processes (messages that meet their
    /// receivers with [`local_messages`](Options::local_messages)).
    pub local_collectives: bool,
    /// Point-to-point messages meet at their receivers: a send hands its
    /// message to the receiving rank's engine itself, without frames or
    /// links (see [`LocalWorld::meeting`]); `false`: messages travel as
    /// frames over the links, as between processes.
    pub local_messages: bool,
}

impl Options {
    /// `ranks` ranks with the default protocol configuration.
    ///
    /// Collectives and point-to-point messages meet in memory: a message
    /// of any size reaches its receiver without a copy. Where frames do
    /// travel (with `local_messages` off) they travel as values, so a
    /// rendezvous chunk costs a pointer move however large: chunks are
    /// 64 MiB.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx_core::Result<()> {
    /// use mpx_net::loopback::{launch_with, Options};
    /// let options = Options::ranks(3);
    /// assert!(!options.wire, "frames travel as values");
    /// assert!(options.local_collectives && options.local_messages);
    /// let ranks = launch_with(options, |comm| async move { Ok((comm.rank(), comm.size())) }).await?;
    /// assert_eq!(ranks, [(0, 3), (1, 3), (2, 3)]);
    /// # Ok(()) }
    /// ```
    pub fn ranks(ranks: usize) -> Options {
        let engine = Config { rndv_chunk: 64 << 20, ..Config::default() };
        Options { ranks, engine, link_capacity: 16 << 20, wire: false, local_collectives: true, local_messages: true }
    }

    /// `ranks` ranks behaving as a network would: frames encoded to bytes
    /// and decoded on arrival, small credit, rendezvous data in small chunks,
    /// links of 256 KiB, typed data in external32 as between heterogeneous
    /// peers, and a 30-second idle timeout, so idle links carry pings and
    /// the driver runs the engine's timers. Messages travel as frames, and
    /// collectives exchange them.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx_core::Result<()> {
    /// use mpx_net::loopback::{launch_with, Options};
    /// let options = Options::network_like(2);
    /// assert!(options.wire && options.engine.repr == mpx_core::Repr::External32);
    /// let got = launch_with(options, |comm| async move {
    ///     let other = 1 - comm.rank();
    ///     comm.send(&[comm.rank() as i64; 3], other, 0).await?;
    ///     Ok(comm.recv::<[i64; 3]>(other, 0).await?.0)
    /// })
    /// .await?;
    /// assert_eq!(got, [[1; 3], [0; 3]]);
    /// # Ok(()) }
    /// ```
    pub fn network_like(ranks: usize) -> Options {
        let engine = Config {
            eager_threshold: 4096,
            eager_credit: 64 * 1024,
            rndv_chunk: 16 * 1024,
            rndv_slots: 64,
            repr: mpx_core::Repr::External32,
            idle_timeout: Some(Duration::from_secs(30)),
            ..Config::default()
        };
        Options { ranks, engine, link_capacity: 256 * 1024, wire: true, local_collectives: false, local_messages: false }
    }
}

/// What travels on a link.
enum Packet {
    Frame(Frame),
    /// An encoded frame: header bytes, then the payload.
    Bytes([Bytes; 2]),
}

/// (sender, what it sent, bytes it occupies on the link)
type Delivery = (u32, Packet, usize);

/// A rank's incoming frames, and who is delivering them.
struct Queue {
    deliveries: VecDeque<Delivery>,
    /// What delivering the queue takes, here while nobody delivers it.
    /// Whoever takes it ([`Queue::claim`]) delivers the queue until it is
    /// empty and then puts it back; whoever finds it gone only appends.
    inbox: Option<Inbox>,
}

impl Queue {
    /// Takes on delivering this queue if nobody has: its inbox, if the
    /// caller must now deliver it ([`World::deliver_claimed`]).
    fn claim(&mut self) -> Option<Inbox> {
        self.inbox.take()
    }
}

/// A rank's queue, claimed by this thread (see [`Queue::claim`]).
struct Claim {
    world: Arc<World>,
    rank: u32,
    inbox: Inbox,
    /// The delivery that found the queue empty and claimed it: kept here
    /// rather than queued, since it goes first.
    first: Option<Delivery>,
}

impl Claim {
    /// Keeps the claim on this thread, for [`deliver_claims`].
    fn hold(self) {
        CLAIMED.with(|c| c.borrow_mut().push(self));
    }
}

/// What the claimant of a rank's queue uses while delivering.
struct Inbox {
    /// Per sender, bytes of a frame not yet whole (wire mode).
    streams: Vec<BytesMut>,
    /// The emptied queue of the last batch, kept for its memory.
    spare: VecDeque<Delivery>,
}

/// One rank's receiving side.
struct Station {
    queue: Mutex<Queue>,
    /// Wakes the rank's driver: frames arrived before the endpoints were
    /// all made, or a claimant found the endpoint not ready.
    driver: Notify,
}

/// Flow control of one link. Each counter has one writer (the sender's
/// endpoint, under its lock; the receiver's deliverer, holding its inbox),
/// so the common path takes no read-modify-write on a shared cache line.
#[derive(Default)]
struct Link {
    /// Bytes the sender has put on the link (written by the sender only).
    sent: Padded<AtomicUsize>,
    /// Bytes the receiver has handled (written by the receiver only).
    consumed: Padded<AtomicUsize>,
    /// The sender was refused and waits for [`Endpoint::writable`].
    blocked: AtomicBool,
}

/// A value on a cache line of its own.
#[derive(Default)]
#[repr(align(64))]
struct Padded<T>(T);

/// What every rank's transport shares: the stations, the links, and
/// (weakly) the endpoints, so a sender can deliver into its receiver and a
/// draining link can wake its sender.
struct World {
    ranks: usize,
    stations: Vec<Station>,
    links: Vec<Link>,
    endpoints: OnceLock<Vec<WeakEndpoint>>,
    capacity: usize,
    wire: bool,
    decoder: Decoder,
    /// Where collectives meet, if they do in memory.
    local: Option<Arc<LocalWorld>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// Queues this thread has claimed and not delivered yet.
    static CLAIMED: RefCell<Vec<Claim>> = const { RefCell::new(Vec::new()) };
    /// This thread is delivering: a delivery that makes the receiver send
    /// (a CTS, credit, a reply's data) leaves its claims for the loop
    /// already running, so delivery never recurses.
    static DELIVERING: Cell<bool> = const { Cell::new(false) };
}

impl World {
    fn link(&self, from: u32, to: u32) -> &Link {
        &self.links[from as usize * self.ranks + to as usize]
    }

    fn endpoint(&self, rank: u32) -> Option<Endpoint> {
        self.endpoints.get()?.get(rank as usize)?.upgrade()
    }

    /// Delivers `first`, then `rank`'s queue, which the caller has
    /// claimed (taking `inbox`), until it is empty, then lets go of it.
    fn deliver_claimed(&self, rank: u32, mut inbox: Inbox, first: Option<Delivery>) {
        let station = &self.stations[rank as usize];
        let endpoint = match self.endpoints.get() {
            None => {
                // Frames sent while the world is being made (the hellos):
                // the driver delivers them once it runs.
                let mut queue = lock(&station.queue);
                if let Some(first) = first {
                    queue.deliveries.push_front(first);
                }
                queue.inbox = Some(inbox);
                drop(queue);
                station.driver.notify_one();
                return;
            }
            Some(_) => self.endpoint(rank),
        };
        if let (Some(delivery), Some(endpoint)) = (first, &endpoint) {
            self.deliver(rank, &mut inbox, delivery, endpoint);
        }
        loop {
            let mut batch = {
                let mut queue = lock(&station.queue);
                if queue.deliveries.is_empty() {
                    queue.inbox = Some(inbox);
                    return;
                }
                let spare = std::mem::take(&mut inbox.spare);
                std::mem::replace(&mut queue.deliveries, spare)
            };
            match &endpoint {
                Some(endpoint) => {
                    for delivery in batch.drain(..) {
                        self.deliver(rank, &mut inbox, delivery, endpoint);
                    }
                }
                // The rank has ended: what is sent to it is dropped.
                None => batch.clear(),
            }
            inbox.spare = batch;
        }
    }

    /// Hands one delivery to `me`'s endpoint, then frees its room on the
    /// link and wakes the sender if it was refused.
    fn deliver(&self, me: u32, inbox: &mut Inbox, (from, packet, size): Delivery, endpoint: &Endpoint) {
        // A frame the endpoint refuses has failed its sender there (or
        // names no peer); the endpoint traces it, and drops that sender's
        // later frames.
        match packet {
            Packet::Frame(frame) => {
                let _ = endpoint.handle_frame(from as usize, frame);
            }
            Packet::Bytes(chunks) => {
                let stream = &mut inbox.streams[from as usize];
                for chunk in chunks {
                    stream.extend_from_slice(&chunk);
                }
                loop {
                    match self.decoder.decode(stream) {
                        Ok(Some(frame)) => {
                            let _ = endpoint.handle_frame(from as usize, frame);
                        }
                        Ok(None) => break,
                        Err(e) => {
                            stream.clear();
                            endpoint.peer_failed(from as usize, e);
                            break;
                        }
                    }
                }
            }
        }
        let link = self.link(from, me);
        let consumed = link.consumed.0.load(Ordering::Relaxed);
        link.consumed.0.store(consumed.wrapping_add(size), Ordering::Release);
        // Pairs with the sender's store of `blocked` and load of `consumed`:
        // either it sees the room just freed, or this sees its flag.
        std::sync::atomic::fence(Ordering::SeqCst);
        if link.blocked.load(Ordering::Relaxed) && link.blocked.swap(false, Ordering::SeqCst) {
            if let Some(sender) = self.endpoint(from) {
                sender.writable(me as usize);
            }
        }
    }
}

/// Delivers every queue this thread has claimed, and those the deliveries
/// make it claim, unless a loop doing so already runs on this thread
/// (further up its stack), which then takes them.
fn deliver_claims() {
    // A delivery that made this thread send (a CTS, credit) calls this
    // too, as a lock hold that offered frames; nothing may be claimed.
    if CLAIMED.with(|c| c.borrow().is_empty()) || DELIVERING.with(|d| d.replace(true)) {
        return;
    }
    // Cleared however the loop ends (a panic in a waker included).
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            DELIVERING.with(|d| d.set(false));
        }
    }
    let _done = Done;
    while let Some(Claim { world, rank, inbox, first }) = CLAIMED.with(|c| c.borrow_mut().pop()) {
        world.deliver_claimed(rank, inbox, first);
    }
}

/// Claims `rank`'s queue for this thread if it has frames and nobody
/// delivers it, then delivers what this thread has claimed.
fn deliver_waiting(world: &Arc<World>, rank: u32) {
    let claimed = {
        let mut queue = lock(&world.stations[rank as usize].queue);
        if queue.deliveries.is_empty() { None } else { queue.claim() }
    };
    if let Some(inbox) = claimed {
        Claim { world: world.clone(), rank, inbox, first: None }.hold();
    }
    deliver_claims();
}

struct Loopback {
    world: Arc<World>,
    me: u32,
}

impl Transport for Loopback {
    /// Appends the frame to the receiver's queue. If nobody is delivering
    /// that queue, this thread takes it on, and delivers it into the
    /// receiving endpoint once the sending endpoint's lock is released
    /// ([`Transport::deliver_offered`]): a message reaches its receiver
    /// with no task switch between.
    fn send(&self, dest: usize, frame: Frame) -> std::result::Result<(), SendError> {
        let world = &*self.world;
        let (Some(station), Ok(dest)) = (world.stations.get(dest), u32::try_from(dest)) else {
            return Err(SendError::Failed(ErrorKind::InvalidRank { rank: dest, size: world.ranks }.into()));
        };
        let link = world.link(self.me, dest);
        let size = frame.wire_len();
        let full = |in_flight: usize| in_flight > 0 && in_flight + size > world.capacity;
        let sent = link.sent.0.load(Ordering::Relaxed);
        if full(sent.wrapping_sub(link.consumed.0.load(Ordering::Acquire))) {
            // Ask to be woken, then look again: the receiver frees room
            // before it checks the flag, so one of the two sees the other.
            link.blocked.store(true, Ordering::SeqCst);
            if full(sent.wrapping_sub(link.consumed.0.load(Ordering::SeqCst))) {
                return Err(SendError::Full(frame));
            }
        }
        link.sent.0.store(sent.wrapping_add(size), Ordering::Relaxed);
        let packet = if world.wire {
            Packet::Bytes([Bytes::copy_from_slice(&frame.encode_header()), frame.payload])
        } else {
            Packet::Frame(frame)
        };
        let delivery = (self.me, packet, size);
        let claim = {
            let mut queue = lock(&station.queue);
            match queue.claim() {
                // Nothing waits and nobody delivers: this thread takes the
                // queue on, and this delivery goes first, from the claim.
                Some(inbox) if queue.deliveries.is_empty() => Some((inbox, Some(delivery))),
                claimed => {
                    queue.deliveries.push_back(delivery);
                    claimed.map(|inbox| (inbox, None))
                }
            }
        };
        if let Some((inbox, first)) = claim {
            Claim { world: self.world.clone(), rank: dest, inbox, first }.hold();
        }
        Ok(())
    }

    fn deliver_offered(&self) {
        deliver_claims();
    }

    /// Delivers what waits in this rank's queue, then in every other
    /// rank's: all ranks live in this process, and a peer's replies (a CTS,
    /// its data) must move too for a polling loop to finish.
    fn progress(&self, deliver: &mut dyn FnMut(usize, Frame)) {
        let _ = deliver;
        let world = &self.world;
        for round in 0..2 {
            for rank in 0..world.ranks as u32 {
                if round == 0 || rank == self.me {
                    deliver_waiting(world, rank);
                }
            }
        }
    }

    fn local_world(&self) -> Option<Arc<LocalWorld>> {
        self.world.local.clone()
    }

    fn poll_flush(&self, _cx: &mut std::task::Context<'_>) -> Poll<Result<()>> {
        // Frames are in the receivers' queues as soon as `send` returns.
        Poll::Ready(Ok(()))
    }
}

/// Delivers the frames nobody else delivers (those sent while the world
/// was being made), and the time when the engine keeps timers, until the
/// endpoint is gone (the endpoint owns this task and aborts it).
async fn drive(endpoint: WeakEndpoint, world: Arc<World>, me: u32, timers: bool) {
    let station = &world.stations[me as usize];
    if timers {
        let Some(ep) = endpoint.upgrade() else { return };
        // tokio's clock, so that a paused test clock drives the engine's timers.
        ep.handle_timeout(tokio::time::Instant::now().into_std());
    }
    loop {
        deliver_waiting(&world, me);
        let deadline = if timers {
            let Some(ep) = endpoint.upgrade() else { return };
            ep.poll_timeout()
        } else {
            None
        };
        match deadline {
            None => station.driver.notified().await,
            Some(at) => tokio::select! {
                () = station.driver.notified() => {}
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {
                    let Some(ep) = endpoint.upgrade() else { return };
                    ep.handle_timeout(tokio::time::Instant::now().into_std());
                }
            },
        }
    }
}

/// Runs `f` once per rank, each with its world communicator, as tasks on
/// the current tokio runtime, and returns every rank's result in rank order.
///
/// Each rank's program is followed by its endpoint's
/// [`finalize`](Endpoint::finalize): `launch` returns once every rank's
/// sends, including dropped and freed ones, are delivered or failed. A
/// communicator kept past that point fails every operation with
/// [`ErrorKind::Finalized`].
///
/// If ranks fail, the error is the root cause: a rank's panic
/// ([`ErrorKind::RankPanicked`]) before any error, and an error of a rank's own
/// before a [`ErrorKind::ProcessFailed`] that may be its consequence (the
/// lowest rank's, among equals). Peers of a failed rank are told at once,
/// so operations that wait for it fail instead of hanging.
///
/// A rank's program returns [`mpx_core::Result`], so `?` works on every
/// mpx call without annotations. Its own errors of any type go in with
/// [`Error::user`](mpx_core::Error::user) (or `?` on a `Box<dyn Error + Send + Sync>`), and come
/// out of `launch` as [`ErrorKind::User`], from which the original error can
/// be downcast:
///
/// ```
/// use mpx_core::{Error, ErrorKind};
/// #[derive(Debug)]
/// struct NoReply;
/// impl std::fmt::Display for NoReply {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("no reply in time")
///     }
/// }
/// impl std::error::Error for NoReply {}
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let run = mpx_net::loopback::launch(2, |comm| async move {
///     if comm.rank() == 1 {
///         // A message from itself that never comes.
///         let late = tokio::time::timeout(std::time::Duration::from_millis(10), comm.recv::<u8>(1, 0));
///         late.await.map_err(|_| Error::user(NoReply))??;
///     }
///     Ok(())
/// });
/// match run.await.map_err(Error::into_kind) {
///     Err(ErrorKind::User(cause)) => assert!(cause.0.downcast_ref::<NoReply>().is_some()),
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
///
/// # Cancel safety
/// Dropping the returned future aborts every task it started (the rank
/// programs and the drivers).
pub async fn launch<F, Fut, R>(ranks: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Fut,
    Fut: Future<Output = Result<R>> + Send + 'static,
    R: Send + 'static,
{
    launch_with(Options::ranks(ranks), f).await
}

/// The most ranks one in-process world has: its links and queues take
/// memory in the square of its ranks (about 800 bytes per pair of ranks,
/// 13 GB at this count).
pub const MAX_RANKS: usize = 4096;

/// [`launch`] with explicit [`Options`]. More than [`MAX_RANKS`] ranks, or
/// fewer than one, is [`ErrorKind::InvalidArgument`]; memory for the world's
/// links that cannot be had is [`ErrorKind::Overflow`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// use mpx_net::loopback::{launch_with, Options};
/// // Messages as frames over links of 4 KiB: a large message moves under
/// // flow control.
/// let options = Options { link_capacity: 4096, local_messages: false, ..Options::ranks(2) };
/// let sums = launch_with(options, |comm| async move {
///     if comm.rank() == 0 {
///         comm.send(&vec![1u32; 100_000], 1, 0).await?;
///         return Ok(0);
///     }
///     Ok(comm.recv_vec::<u32>(0, 0).await?.0.iter().sum::<u32>())
/// })
/// .await?;
/// assert_eq!(sums, [0, 100_000]);
/// assert!(launch_with(Options::ranks(0), |_| async { Ok(()) }).await.is_err(), "no ranks");
/// assert!(launch_with(Options::ranks(100_000), |_| async { Ok(()) }).await.is_err(), "8 TB of links");
/// # Ok(()) }
/// ```
///
/// # Cancel safety
/// As [`launch`].
pub async fn launch_with<F, Fut, R>(options: Options, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Fut,
    Fut: Future<Output = Result<R>> + Send + 'static,
    R: Send + 'static,
{
    let n = options.ranks;
    if n == 0 || n > MAX_RANKS {
        return Err(ErrorKind::InvalidArgument(format!("cannot launch {n} ranks in one process (at most {MAX_RANKS})")).into());
    }
    let mut links = Vec::new();
    links.try_reserve_exact(n * n).map_err(|_| ErrorKind::Overflow("the links of an in-process world"))?;
    links.extend((0..n * n).map(|_| Link::default()));
    let stations = (0..n)
        .map(|_| Station {
            queue: Mutex::new(Queue {
                deliveries: VecDeque::new(),
                inbox: Some(Inbox { streams: (0..n).map(|_| BytesMut::new()).collect(), spare: VecDeque::new() }),
            }),
            driver: Notify::new(),
        })
        .collect();
    let world = Arc::new(World {
        ranks: n,
        stations,
        links,
        endpoints: OnceLock::new(),
        capacity: options.link_capacity.max(1),
        wire: options.wire,
        decoder: Decoder::new(options.engine.max_payload()),
        local: (options.local_collectives || options.local_messages)
            .then(|| LocalWorld::meeting(n, options.local_collectives, options.local_messages)),
    });
    let endpoints: Vec<Endpoint> = (0..n)
        .map(|rank| {
            let transport = Loopback { world: world.clone(), me: rank as u32 };
            Endpoint::new(rank, n, options.engine, transport)
        })
        .collect::<Result<_>>()?;
    let _ = world.endpoints.set(endpoints.iter().map(Endpoint::downgrade).collect());
    let mut tasks = crate::run::Tasks(Vec::with_capacity(2 * n));
    for (rank, endpoint) in endpoints.iter().enumerate() {
        let timers = options.engine.idle_timeout.is_some();
        let driver = tokio::spawn(drive(endpoint.downgrade(), world.clone(), rank as u32, timers));
        tasks.0.push(driver.abort_handle());
        // The endpoint owns its driver: it ends with the endpoint's last handle.
        endpoint.own(crate::run::Tasks(vec![driver.abort_handle()]));
    }
    crate::run::run_ranks(endpoints, tasks, crate::run::HELLO_TIMEOUT, f).await
}
