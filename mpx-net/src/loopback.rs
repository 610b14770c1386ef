//! The in-memory transport: every rank of the world runs in this process.
//!
//! Each rank has an inbox (an unbounded channel of frames) drained by a
//! driver task that feeds its [`Endpoint`]; sending a frame is pushing it
//! into the destination's inbox, so frames between two ranks stay in order
//! and payloads move without copies. `test` calls drain the inbox too
//! ([`Transport::progress`]), holding it while they deliver so frames are
//! never handled out of order. Memory is bounded by the engine's
//! credit-based flow control, not by the channels.
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

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Poll;

use mpx_core::proto::engine::Config;
use mpx_core::proto::wire::Frame;
use mpx_core::runtime::WeakEndpoint;
use mpx_core::{Comm, Endpoint, Error, Result, Transport};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// Options for [`launch_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Number of ranks.
    pub ranks: usize,
    /// Protocol tunables (eager threshold, credit).
    pub engine: Config,
}

impl Options {
    /// `ranks` ranks with the default protocol configuration.
    pub fn ranks(ranks: usize) -> Options {
        Options { ranks, engine: Config::default() }
    }
}

type Inbox = Arc<Mutex<UnboundedReceiver<(u32, Frame)>>>;

/// What every rank's transport shares: the inboxes, and (weakly) the
/// endpoints, so a `test` call can move any rank's frames along.
struct World {
    senders: Vec<UnboundedSender<(u32, Frame)>>,
    inboxes: Vec<Inbox>,
    endpoints: OnceLock<Vec<WeakEndpoint>>,
}

struct Loopback {
    world: Arc<World>,
    me: u32,
}

fn lock(inbox: &Inbox) -> MutexGuard<'_, UnboundedReceiver<(u32, Frame)>> {
    inbox.lock().unwrap_or_else(|e| e.into_inner())
}

/// Delivers the frames waiting in `inbox` unless another thread is already
/// delivering them (whoever holds the inbox keeps frames in order).
fn drain(inbox: &Inbox, deliver: &mut dyn FnMut(u32, Frame)) {
    let mut rx = match inbox.try_lock() {
        Ok(rx) => rx,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    while let Ok((from, frame)) = rx.try_recv() {
        deliver(from, frame);
    }
}

impl Transport for Loopback {
    fn send(&self, dest: u32, frame: Frame) -> Result<()> {
        let size = self.world.senders.len() as u32;
        let inbox = self.world.senders.get(dest as usize).ok_or(Error::InvalidRank { rank: dest as i64, size })?;
        inbox
            .send((self.me, frame))
            .map_err(|_| Error::Transport(format!("rank {dest}'s inbox is closed")))
    }

    /// Delivers what waits in this rank's inbox, then in every other rank's:
    /// all ranks live in this process, and a peer's replies (a CTS, its
    /// data) must move too for a polling loop to finish where no driver
    /// task gets to run.
    fn progress(&self, deliver: &mut dyn FnMut(u32, Frame)) {
        drain(&self.world.inboxes[self.me as usize], deliver);
        let Some(endpoints) = self.world.endpoints.get() else { return };
        for (rank, inbox) in self.world.inboxes.iter().enumerate() {
            if rank as u32 == self.me {
                continue;
            }
            if let Some(peer) = endpoints[rank].upgrade() {
                drain(inbox, &mut |from, frame| peer.handle_frame(from, frame));
            }
        }
        drain(&self.world.inboxes[self.me as usize], deliver);
    }
}

/// Feeds the inbox to the endpoint until every sender is gone.
async fn drive(endpoint: Endpoint, inbox: Inbox) {
    std::future::poll_fn(|cx| {
        let mut rx = lock(&inbox);
        loop {
            match rx.poll_recv(cx) {
                Poll::Ready(Some((from, frame))) => endpoint.handle_frame(from, frame),
                Poll::Ready(None) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

/// Runs `f` once per rank, each with its world communicator, as tasks on
/// the current tokio runtime, and returns every rank's result in rank order.
///
/// A rank whose closure returns an error or panics makes the whole launch
/// an error (the first one, by rank); the other ranks are told it has gone,
/// so operations that wait for it fail instead of hanging.
///
/// # Cancel safety
/// Dropping the returned future stops waiting but leaves the rank tasks
/// running on the runtime until they finish.
pub async fn launch<F, Fut, R>(ranks: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Fut,
    Fut: Future<Output = Result<R>> + Send + 'static,
    R: Send + 'static,
{
    launch_with(Options::ranks(ranks), f).await
}

/// [`launch`] with explicit [`Options`].
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
    if n == 0 || n > u32::MAX as usize {
        return Err(Error::InvalidArgument(format!("cannot launch {n} ranks")));
    }
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| unbounded_channel()).unzip();
    let inboxes: Vec<Inbox> = receivers.into_iter().map(|rx| Arc::new(Mutex::new(rx))).collect();
    let world = Arc::new(World { senders, inboxes, endpoints: OnceLock::new() });
    let endpoints: Vec<Endpoint> = (0..n)
        .map(|rank| {
            let transport = Loopback { world: world.clone(), me: rank as u32 };
            Endpoint::new(rank as u32, n as u32, options.engine, transport)
        })
        .collect();
    let _ = world.endpoints.set(endpoints.iter().map(Endpoint::downgrade).collect());
    let mut drivers = Vec::with_capacity(n);
    let mut tasks = Vec::with_capacity(n);
    for (rank, endpoint) in endpoints.into_iter().enumerate() {
        drivers.push(tokio::spawn(drive(endpoint.clone(), world.inboxes[rank].clone())));
        let program = f(endpoint.world());
        tasks.push(tokio::spawn(async move {
            // Says goodbye even if the program panics or is dropped.
            let farewell = Farewell(Some(endpoint));
            let result = program.await;
            farewell.finish().await;
            result
        }));
    }
    let mut results = Vec::with_capacity(n);
    let mut first_error = None;
    for (rank, task) in tasks.into_iter().enumerate() {
        match task.await {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(join) => {
                first_error.get_or_insert(Error::ProcessFailed { rank: rank as u32, reason: format!("rank panicked: {join}") });
            }
        }
    }
    for d in drivers {
        d.abort();
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(results),
    }
}

/// Finalizes a rank's endpoint when its program ends, however it ends.
struct Farewell(Option<Endpoint>);

impl Farewell {
    async fn finish(mut self) {
        if let Some(ep) = self.0.take() {
            ep.finalize().await;
        }
    }
}

impl Drop for Farewell {
    fn drop(&mut self) {
        if let Some(ep) = self.0.take() {
            // The program panicked: the farewell goes out without waiting
            // for its buffered sends.
            ep.farewell();
        }
    }
}
