//! The receiving side of a connection: a [`Reader`] per stream decodes
//! what arrives and hands the frames to the endpoint.
//!
//! The bulk stream's reader is a task of its own. The control stream's is
//! an [`Inlet`], read by whichever task gets there first: its own task, or
//! a program's task waiting on the endpoint (a receive, a send waiting for
//! its answer), which reads it from
//! [`Transport::poll_arrivals`](mpx_core::runtime::Transport::poll_arrivals).
//! A message then wakes the task that waits for it straight from quinn's
//! connection driver, with no task in between, as a program using quinn
//! directly would be woken.
//!
//! Progress never depends on a program waiting: a program task woken for
//! an arrival may have moved on to wait for something else. While
//! arrivals keep coming, the inlet's own task watches: every
//! [`WATCH_TICK`] it reads what nobody has read, so an arrival wakes only
//! the programs waiting (one task woken, as with quinn alone). Idle for a
//! tick, it stops watching, and the next arrival wakes it too. (Waking
//! two tasks for every arrival cost a thread per message on a
//! multi-thread runtime: tokio keeps one woken task to run next on the
//! waking thread and wakes another worker to take the one before it.)

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use mpx_core::proto::wire::{ChunkDecoder, Kind};
use mpx_core::{Error, ErrorKind};
use quinn::VarInt;

use super::connection::{code, Shared};
use super::link::Lane;

/// Chunks one call of [`Reader::poll_read`] takes before it lets other
/// tasks run.
const CHUNK_BUDGET: usize = 64;

/// Rounds of reading one call of [`Inlet::read`] makes while more keeps
/// arriving.
const READ_ROUNDS: usize = 4;

/// The largest chunk asked of quinn at once.
const MAX_CHUNK: usize = 1 << 20;

/// How often the inlet's task looks for arrivals nobody has read, while
/// it watches (see the module documentation): the longest an arrival waits
/// when every program task woken for it has moved on.
pub(crate) const WATCH_TICK: Duration = Duration::from_millis(1);

/// Why [`Reader::read_some`] stopped.
enum Read {
    /// quinn has nothing more; the context's waker is woken when it has.
    Idle,
    /// The chunk budget is spent: more may be waiting.
    Budget,
    /// The stream has ended or failed.
    Ended,
}

/// Decodes the frames arriving on one stream from `peer` and hands them to
/// the endpoint, rendezvous data a piece per chunk as quinn hands it over
/// (see [`ChunkDecoder`]). A malformed frame, or one the engine refuses,
/// closes the connection and fails the peer.
pub(crate) struct Reader {
    pub(crate) shared: Arc<Shared>,
    pub(crate) peer: u32,
    pub(crate) lane: Lane,
    pub(crate) conn: quinn::Connection,
    pub(crate) stream: quinn::RecvStream,
    pub(crate) decoder: ChunkDecoder,
    /// What was read with the hello, decoded first.
    pub(crate) start: Option<Bytes>,
}

impl Reader {
    /// Reads and delivers what has arrived. Pending once the stream has
    /// nothing more (`cx` is woken when it has) or after
    /// [`CHUNK_BUDGET`] chunks (`cx` is woken at once); ready once the
    /// stream has ended or failed, the peer told or failed accordingly.
    pub(crate) fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.read_some(cx) {
            Read::Idle => Poll::Pending,
            Read::Budget => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Read::Ended => Poll::Ready(()),
        }
    }

    /// What [`poll_read`](Reader::poll_read) does, saying why it stopped.
    fn read_some(&mut self, cx: &mut Context<'_>) -> Read {
        for _ in 0..CHUNK_BUDGET {
            let chunk = match self.start.take() {
                Some(start) => start,
                None => match std::pin::pin!(self.stream.read_chunk(MAX_CHUNK, true)).poll(cx) {
                    Poll::Pending => return Read::Idle,
                    Poll::Ready(Ok(Some(c))) => c.bytes,
                    Poll::Ready(Ok(None)) if self.decoder.is_idle() => {
                        let both = self.shared.outboxes[self.peer as usize].ended(self.lane);
                        if let Some(ep) = self.shared.endpoint.upgrade() {
                            if self.lane == Lane::Control {
                                // Its goodbye travels here: without it, the
                                // peer fails.
                                ep.peer_ended(self.peer as usize);
                            }
                            if both {
                                // Rendezvous data it owes can come no more.
                                ep.peer_streams_ended(self.peer as usize);
                            }
                        }
                        return Read::Ended;
                    }
                    // The peer is failed, and told so by the connection's
                    // close (its reason first: the close makes the other
                    // readers fail the peer too, for the connection's loss).
                    Poll::Ready(Ok(None)) => {
                        let peer = self.peer;
                        self.shared.fail(peer, ErrorKind::Protocol(format!("rank {peer}'s stream ended inside a frame")).into());
                        self.conn.close(VarInt::from_u32(code::PROTOCOL), b"a stream ended inside a frame");
                        return Read::Ended;
                    }
                    Poll::Ready(Err(e)) => {
                        self.shared.fail(self.peer, Error::transport(format!("reading from rank {}", self.peer), e));
                        self.conn.close(VarInt::from_u32(code::PROTOCOL), b"a stream failed");
                        return Read::Ended;
                    }
                },
            };
            if !self.deliver(chunk) {
                return Read::Ended;
            }
        }
        Read::Budget
    }

    /// Decodes `chunk` and hands its frames to the endpoint; false once the
    /// peer is cut off (or the endpoint gone).
    fn deliver(&mut self, chunk: Bytes) -> bool {
        let Some(ep) = self.shared.endpoint.upgrade() else { return false };
        let peer = self.peer;
        // Set when the engine refused a frame (rather than the decoder).
        let mut refused = None;
        let lane = self.lane;
        let outbox = &self.shared.outboxes[peer as usize];
        let pushed = self.decoder.push(chunk, &mut |frame| {
            // An honest peer sends each kind of frame in its own lane
            // ([`Lane::of`]): rendezvous data in the bulk stream, every
            // other frame in the control stream.
            if Lane::of(&frame) != lane {
                return Err(ErrorKind::Protocol(format!("rank {peer} sent a {:?} frame in its {lane:?} stream", frame.header.kind)).into());
            }
            let goodbye = frame.header.kind == Kind::Bye;
            ep.handle_frame(peer as usize, frame).inspect_err(|e| refused = Some(e.clone()))?;
            if goodbye {
                outbox.said_goodbye();
            }
            Ok(())
        });
        drop(ep);
        match (pushed, refused) {
            (Ok(()), _) => true,
            (Err(e), Some(_)) => {
                // The engine has failed the peer: cut it off.
                self.shared.outboxes[peer as usize].fail(e);
                self.conn.close(VarInt::from_u32(code::PROTOCOL), b"protocol violation");
                false
            }
            (Err(e), None) => {
                // The reason first: closing makes the other readers fail
                // the peer too, for the connection's loss.
                self.shared.fail(peer, e);
                self.conn.close(VarInt::from_u32(code::PROTOCOL), b"malformed frame");
                false
            }
        }
    }
}

/// Whom an arrival on a control stream wakes: the inlet's own task and the
/// program tasks that read it last. quinn keeps one waker per stream; this
/// is the one it gets.
#[derive(Default)]
struct Hub {
    /// Something arrived since the last read began.
    notified: AtomicBool,
    /// Arrivals so far: the inlet's task watches while this moves.
    arrivals: AtomicU64,
    /// The inlet's task is watching (see [`Watch`]): an arrival with
    /// program tasks to wake need not wake it.
    watching: AtomicBool,
    task: Mutex<Option<Waker>>,
    waiters: Mutex<Vec<Waker>>,
}

/// Program tasks an inlet remembers to wake; beyond them, a waiting task
/// is woken by its request's completion, after another task has read.
const MAX_WAITERS: usize = 8;

impl Wake for Hub {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.notified.store(true, Ordering::SeqCst);
        self.arrivals.fetch_add(1, Ordering::Relaxed);
        let waiters = std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|e| e.into_inner()));
        // Read by `Watch::stop` in the other order: either it sees this
        // arrival or this sees it stopped.
        let watched = !waiters.is_empty() && self.watching.load(Ordering::SeqCst);
        // The programs first, then the inlet's task if it does not watch:
        // a program task may have moved on to wait for something else, and
        // progress must not depend on it. (Woken the other way round, the
        // inlet's task would run first on this thread, and a small message
        // waits longer behind a bulk transfer.)
        for w in waiters {
            w.wake();
        }
        if !watched {
            self.wake_task();
        }
    }
}

impl Hub {
    fn wake_task(&self) {
        if let Some(task) = &*self.task.lock().unwrap_or_else(|e| e.into_inner()) {
            task.wake_by_ref();
        }
    }
}

/// The inlet's task watching for arrivals nobody reads (see the module
/// documentation): a timer of [`WATCH_TICK`] kept while arrivals come.
#[derive(Default)]
struct Watch {
    tick: Option<Pin<Box<tokio::time::Sleep>>>,
    /// [`Hub::arrivals`] at the last tick.
    seen: u64,
}

impl Watch {
    /// After the task has read: starts watching, or at a tick goes on
    /// while arrivals came since the last, or stops. `read` reads what an
    /// arrival that found the watch still on left.
    fn poll(&mut self, hub: &Hub, cx: &mut Context<'_>, read: impl FnOnce()) {
        let arrivals = hub.arrivals.load(Ordering::Relaxed);
        match &mut self.tick {
            None => {
                hub.watching.store(true, Ordering::SeqCst);
                self.tick = Some(Box::pin(tokio::time::sleep(WATCH_TICK)));
            }
            Some(tick) => {
                if tick.as_mut().poll(cx).is_pending() {
                    return;
                }
                if arrivals == self.seen {
                    hub.watching.store(false, Ordering::SeqCst);
                    self.tick = None;
                    if hub.notified.load(Ordering::SeqCst) {
                        read();
                    }
                    return;
                }
                tick.as_mut().reset(tokio::time::Instant::now() + WATCH_TICK);
            }
        }
        self.seen = arrivals;
        if let Some(tick) = &mut self.tick {
            // Registers the task's waker with the timer.
            let _ = tick.as_mut().poll(cx);
        }
    }
}

/// Keeps `waker` in `slot` unless it is there already.
fn remember(slot: &mut Vec<Waker>, waker: &Waker) {
    if !slot.iter().any(|w| w.will_wake(waker)) && slot.len() < MAX_WAITERS {
        slot.push(waker.clone());
    }
}

/// The receiving side of one peer's control stream, shared by its own task
/// and the program tasks that wait on the endpoint (see the module
/// documentation). Whoever holds the reader reads until quinn has nothing
/// more, so after every read quinn holds the hub's waker.
pub(crate) struct Inlet {
    /// The reader, once the connection is up and until its stream ends.
    reader: Mutex<Option<Reader>>,
    /// Set once the stream has ended or the inlet's task is gone.
    closed: AtomicBool,
    hub: Arc<Hub>,
    /// `hub` as the waker every read gives quinn.
    waker: Waker,
}

impl Default for Inlet {
    fn default() -> Inlet {
        let hub = Arc::new(Hub::default());
        Inlet { reader: Mutex::default(), closed: AtomicBool::new(false), waker: Waker::from(hub.clone()), hub }
    }
}

impl Inlet {
    /// Gives the inlet its reader, once the connection is up.
    pub(crate) fn attach(&self, reader: Reader) {
        *self.reader.lock().unwrap_or_else(|e| e.into_inner()) = Some(reader);
        // The first read is due (it decodes what came with the hello).
        self.hub.notified.store(true, Ordering::SeqCst);
    }

    /// The inlet's own task, until the stream ends; dropping it (aborted
    /// with the endpoint), polled or not, drops the reader, and with it
    /// the stream and the connection (the reader holds the transport's
    /// state, which holds the inlet: a task dropped before its first poll
    /// must break that cycle too).
    pub(crate) fn run(self: Arc<Self>) -> impl std::future::Future<Output = ()> + Send + 'static {
        struct Detach(Arc<Inlet>);
        impl Drop for Detach {
            fn drop(&mut self) {
                *self.0.reader.lock().unwrap_or_else(|e| e.into_inner()) = None;
                self.0.closed.store(true, Ordering::Relaxed);
            }
        }
        let inlet = Detach(self);
        async move {
            let mut watch = Watch::default();
            std::future::poll_fn(|cx| inlet.0.poll_task(cx, &mut watch)).await;
        }
    }

    /// Whether a program task may read here: the connection is up and its
    /// stream has not ended.
    fn is_open(&self) -> bool {
        !self.closed.load(Ordering::Relaxed)
    }

    /// A program task waiting on the endpoint: reads what has arrived,
    /// and has `cx` woken at the next arrival.
    pub(crate) fn poll_for_program(&self, cx: &mut Context<'_>) {
        if !self.is_open() {
            return;
        }
        if !cx.waker().will_wake(Waker::noop()) {
            remember(&mut self.hub.waiters.lock().unwrap_or_else(|e| e.into_inner()), cx.waker());
        }
        self.read();
    }

    /// The inlet's own task: reads what has arrived; ready once the stream
    /// has ended.
    fn poll_task(&self, cx: &mut Context<'_>, watch: &mut Watch) -> Poll<()> {
        {
            let mut task = self.hub.task.lock().unwrap_or_else(|e| e.into_inner());
            if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        self.read();
        if !self.is_open() {
            return Poll::Ready(());
        }
        watch.poll(&self.hub, cx, || self.read());
        Poll::Pending
    }

    /// Reads until quinn has nothing more, unless another task is reading
    /// (it then reads what arrives before it lets go, or is told to), or
    /// nothing has arrived since the last read. After [`READ_ROUNDS`]
    /// rounds of [`CHUNK_BUDGET`] chunks it hands on to the hub's tasks, so
    /// a steady stream of arrivals never keeps one task here.
    fn read(&self) {
        // quinn holds the hub's waker after every read, so without a wake
        // since, there is nothing to read: asking quinn again would only
        // take the connection's lock, which its driver holds while it
        // sends, and block this thread behind a bulk transfer.
        if !self.hub.notified.load(Ordering::SeqCst) {
            return;
        }
        let mut cx = Context::from_waker(&self.waker);
        for _ in 0..READ_ROUNDS {
            let mut guard = match self.reader.try_lock() {
                Ok(guard) => guard,
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => return,
            };
            let Some(reader) = guard.as_mut() else { return };
            self.hub.notified.store(false, Ordering::SeqCst);
            match reader.read_some(&mut cx) {
                Read::Idle => {}
                Read::Budget => {
                    // quinn holds no waker (its last read gave data): the
                    // hub's tasks read on, woken once the reader is free,
                    // so the one that runs first finds it so.
                    drop(guard);
                    self.waker.wake_by_ref();
                    return;
                }
                Read::Ended => {
                    *guard = None;
                    self.closed.store(true, Ordering::Relaxed);
                    drop(guard);
                    // Let the inlet's task see the end and finish.
                    self.hub.wake_task();
                    return;
                }
            }
            drop(guard);
            // Something arrived after the read began and its wake may have
            // found the reader taken: read again.
            if !self.hub.notified.load(Ordering::SeqCst) {
                return;
            }
        }
        // Still arriving: the hub's tasks read on.
        self.waker.wake_by_ref();
    }
}
