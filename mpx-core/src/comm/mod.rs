//! Communicators: MPI's point-to-point operations as async functions.
//!
//! A [`Comm`] is a communicator over an [`Endpoint`] (one rank's
//! connection to the world, see [`crate::runtime`]): a rank, a size and a
//! matching context. The operations live in one file each:
//!
//! | file | what |
//! |---|---|
//! | [`data`] | what sends and receives take: [`SendData`], [`RecvData`] |
//! | `send.rs` | the four send modes, blocking and nonblocking |
//! | `recv.rs`, `recv_owned.rs` | receives into any [`RecvData`], of one value, into vectors, as bytes |
//! | `probe.rs` | probes and matched probes ([`Message`]) |
//! | `sendrecv.rs` | `sendrecv`, `sendrecv_replace` |
//! | `exchange.rs` | [`Comm::exchange`]: many sends and receives over one buffer; [`ExchangeBuf::split`] |
//! | `incoming.rs` | incoming messages as a `Stream` ([`Comm::incoming`], [`Receivable`]) |
//! | `serde.rs` | serde messages ([`Serde`], the `serde` feature) |
//! | `bsend.rs` | the buffer for buffered sends |
//! | `buffer.rs` | [`SendBuf`], [`RecvBuf`]: packing sends, checking and unpacking deliveries |
//! | `selectors.rs` | [`Peer`] (a rank or [`PROC_NULL`]), [`Source`], [`Any`], tags |
//! | `group.rs` | [`Group`] and communicators over subgroups ([`Comm::split`], [`Comm::create`]) |
//! | [`persistent`] | persistent requests |
//!
//! # Representation
//!
//! A send packs typed data in the representation its destination takes
//! (native to peers that share this rank's, external32 otherwise); external32
//! typed data is led by its [`TypeSequence`](crate::pack::TypeSequence).
//! A receive converts: into a typed buffer through its datatype, and into
//! `packed` bytes by converting to this rank's native packed form, so the
//! bytes unpack to the values sent.
//!
//! # Serde messages
//!
//! With the `serde` feature (on by default in the `mpx` facade, off in
//! `mpx-core`), any `Serialize` value travels as a serde message in
//! postcard's format (`send(Serde(&value), ..)`, in every mode), and arrives
//! as any `DeserializeOwned` type ([`Comm::recv`]`::<`[`Serde<T>`]`>`, or a
//! stream of them, [`Comm::incoming`]`::<`[`Serde<T>`]`>`). Such messages are marked on the
//! wire, so they never pass for typed data nor typed data for them; see
//! [`Serde`] for the rules, the limits on hostile bytes, and the measurements
//! behind the format.
//!
//! # Any-source receives when every other rank is gone
//!
//! Every other rank of the receive's communicator, that is: ranks outside
//! it cannot send on it. Only this rank's own messages can still match
//! such a receive, and a send
//! to self is matched before the call that sent it returns. So the receive
//! fails ([`ErrorKind::ProcessFailed`]) only when
//! it is still unmatched on the second poll in a row that finds no match and
//! no live sender: the first such poll wakes the task again, so everything
//! else it (or the runtime) had ready to run, a send to self among it, runs
//! in between. Probes follow the same rule. A send to self started only
//! after a further wait (a sleep, a `yield_now`, another message) comes too
//! late: the receive has failed by then. `join!`, `select!` and
//! [`RequestSet`](crate::request::RequestSet) poll each request at most once
//! per poll of the task; a combinator that re-polls a future that woke
//! itself within one poll (`FuturesUnordered` may, when it holds three or
//! more) counts as two polls in a row. A send to self from another task of
//! the same rank, spawned separately, is not "ready to run" in this sense
//! on a multi-thread runtime: it may come after the second poll. A rank
//! alone in its communicator is in this state from the start. Tests
//! ([`Request::test`](crate::Request::test), the `test_*` calls of a
//! [`RequestSet`](crate::request::RequestSet)) only look, as `MPI_Test`
//! does: they neither fail such a receive nor count as polls.
//!
//! # When operations start
//!
//! Every operation starts when it is called, before its future is first
//! polled: a send has packed and posted its data, a receive is posted (so
//! it matches the next message even if nobody polls it), a `sendrecv`
//! has done both, a collective has sent its first messages. The `i`
//! forms return a [`Request`](crate::Request) (test, cancel, free, keep in
//! a [`RequestSet`](crate::RequestSet)); the others a plain future. The
//! exceptions are the probes, which take nothing: `probe` and `mprobe`
//! check their arguments when called but look at the queue when polled, so
//! a receive posted in between may take the message they would have seen.
//!
//! # Buffers never escape to the background
//!
//! A send packs its data into an owned buffer when it is called (before
//! its future is first polled), and a receive's data stays in engine-owned
//! buffers until the receive's own future unpacks it into the caller's
//! memory (a large message into a slice: in the polls while it arrives,
//! see below). Nothing the driver holds ever points into a caller's
//! buffer, so dropping (or leaking) a future is always sound.
//!
//! A receive into a slice of a type that takes any bytes (integers,
//! floats, arrays and derived structs of them without padding) copies a
//! large rendezvous message in this rank's own representation into the
//! slice as its data arrives, in the request's own polls, so that the
//! copy overlaps the transfer (see
//! [`Config::stream_step`](crate::proto::engine::Config::stream_step)).
//! Such a receive dropped part way gives the data it took back with the
//! message, which the next receive gets whole; its slice may then hold the
//! start of that message, as a receive that fails part way (its peer
//! failed) may: MPI leaves a receive buffer's contents undefined unless
//! the receive succeeds.
//!
//! # Cancel safety
//!
//! Every point-to-point operation here is cancel-safe in the sense that
//! dropping its future loses no message and leaves the engine consistent
//! (`split` and `create`, collective over the communicator, are not: see
//! their docs):
//! * a receive that has not matched is withdrawn;
//! * a receive whose message matched but was not yet unpacked gives the
//!   message back, at the head of the queue (or, if earlier messages of
//!   its sender are still queued, right behind the last of them), ahead
//!   of every later message from its sender; a rendezvous message whose data is still in transit
//!   keeps its place the same way, and its data goes to the next receive
//!   that matches it. The one order this cannot restore: if a *later*
//!   message from the same sender was already delivered to a later receive
//!   before the first receive was dropped, the returned message now comes
//!   after it;
//! * a receive that failed because its message is too long for it
//!   ([`ErrorKind::Truncate`]), dropped before the error was taken, gives the
//!   message back the same way, whole, small or large; once the error is
//!   taken, the message counts as received (as in MPI): its sender
//!   completes, and its data is dropped;
//! * a send whose data was handed to the engine completes in the background.

mod bsend;
mod buffer;
pub mod data;
mod exchange;
mod group;
mod incoming;
pub mod persistent;
mod probe;
mod recv;
mod recv_owned;
mod selectors;
mod send;
mod sendrecv;
#[cfg(feature = "serde")]
mod serde;
#[cfg(feature = "serde")]
mod serde_bound;
/// The serde decoder's fuzz target (see the `serde_decode` target).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use serde::check_decode as check_serde_decode;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{ErrorKind, Result};
use crate::proto::engine::MatchSpec;
use crate::runtime::{Endpoint, Shared};

pub use bsend::BSEND_OVERHEAD;
pub use incoming::{Incoming, Receivable};
pub use buffer::{RecvBuf, SendBuf};
pub use data::{RecvData, SendData};
pub use exchange::{Exchange, ExchangeBuf, Transfer};
pub use group::{CommRelation, Group, GroupRelation};
pub(crate) use group::Members;
pub(crate) use group::Registration;
pub use crate::request::Status;
pub use persistent::{start_all, Persistent, PersistentRecv, PersistentSend, RecvStorage, SendStorage};
pub use probe::Message;
pub use recv_owned::{OwnedRecv, RecvError, ValueRecv};
pub use selectors::{Any, Peer, ProcNull, Source, TagSel, PROC_NULL, TAG_UB};
#[cfg(feature = "serde")]
pub use self::serde::Serde;
#[cfg(feature = "serde")]
pub(crate) use self::serde::{deserialize, serialize, serialized};

pub(crate) use buffer::{capacity, deliver_into, native_values, native_values_in, native_values_of, unpack_typed_message};
pub(crate) use recv_owned::RawRecv;

/// The context id of the world communicator.
const WORLD_CONTEXT: u64 = 0;

impl Endpoint {
    /// The world communicator over this endpoint.
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
    /// let (a, b) = (zero.world(), one.world());
    /// assert_eq!((a.rank(), b.rank(), a.size()), (0, 1, 2));
    /// let (sent, got) = tokio::join!(a.send(&3u8, 1, 0), b.recv::<u8>(0, 0));
    /// sent?;
    /// assert_eq!(got?.0, 3);
    /// // Every handle is the same communicator: `dup`s through different
    /// // handles are different communicators, as two `dup`s of one are.
    /// let (first, second) = (zero.world().dup(), zero.world().dup());
    /// let (first_there, second_there) = (one.world().dup(), one.world().dup());
    /// let sends = [second.isend(&2u8, 1, 0), first.isend(&1u8, 1, 0)];
    /// assert_eq!(first_there.recv::<u8>(0, 0).await?.0, 1);
    /// assert_eq!(second_there.recv::<u8>(0, 0).await?.0, 2);
    /// for sent in sends { sent.await?; }
    /// # Ok(()) }
    /// ```
    pub fn world(&self) -> Comm {
        Comm { shared: self.shared.clone(), context: WORLD_CONTEXT, dups: self.shared.world_dups.clone(), members: None, registration: None }
    }
}

/// A communicator: a group of ranks and a matching context of its own.
///
/// Messages sent on one communicator are received only on that communicator
/// (or a handle to it), so a library can [`dup`](Comm::dup) the world and
/// never see the application's messages.
///
/// Operations take ranks as `usize` (or a [`Peer`], which may be
/// [`PROC_NULL`]), sources also as [`Any`], and tags as `i32` (receives
/// also [`Any`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(3, |comm| async move {
/// // Each rank passes its number to its right neighbour on a ring.
/// let (rank, size) = (comm.rank(), comm.size());
/// let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
/// let mut from_left = 0usize;
/// comm.sendrecv(&rank, right, 0, &mut from_left, left, 0).await?;
/// assert_eq!(from_left, left);
/// # Ok(()) }).await?; Ok(()) }
/// ```
///
/// # Freeing
///
/// Dropping a communicator's last handle (every clone, and everything
/// that holds one: a collective in flight, a matched probe's [`Message`],
/// an [`Incoming`] stream, a persistent request) is `MPI_Comm_free`: the
/// endpoint forgets what it kept for it (its members) and its
/// collectives' state goes (their count, its hold on a meeting place), so
/// a program that makes and drops communicators in a loop keeps that
/// state bounded. A receive started on it keeps that state
/// until it completes, so its status names the sender in the
/// communicator's numbering even if every handle is gone by then. A
/// message that arrives for it later waits unmatched, as MPI leaves a
/// message no receive takes.
#[derive(Clone)]
pub struct Comm {
    pub(crate) shared: Arc<Shared>,
    pub(crate) context: u64,
    dups: Arc<AtomicU64>,
    /// The members, for a communicator over a subgroup of the world (or the
    /// world in another order); `None`: the world's ranks as they are.
    members: Option<Arc<Members>>,
    /// The communicator's entries in the endpoint and its collectives'
    /// state, removed when its last handle goes; `None` for the world,
    /// which keeps its entries (its collectives' state is the endpoint's).
    registration: Option<Arc<Registration>>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Comm(rank {} of {}, context {:#x})", self.rank(), self.size(), self.context)
    }
}

/// Mixes `parent` and `n` into a new context id (even: odd ids are the
/// collective contexts of their even neighbours).
pub(crate) fn derive_context(parent: u64, n: u64) -> u64 {
    let mut x = parent ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xd1b5_4a32_d192_ed03;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) & !1
}

impl Comm {
    /// This rank's number in the communicator.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// let ranks = mpx::launch(3, |comm| async move { Ok(comm.rank()) }).await?;
    /// assert_eq!(ranks, [0, 1, 2]);
    /// # Ok(()) }
    /// ```
    pub fn rank(&self) -> usize {
        match &self.members {
            Some(m) => m.rank as usize,
            None => self.shared.rank as usize,
        }
    }

    /// Number of ranks.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// let sizes = mpx::launch(3, |comm| async move { Ok(comm.size()) }).await?;
    /// assert_eq!(sizes, [3, 3, 3]);
    /// # Ok(()) }
    /// ```
    pub fn size(&self) -> usize {
        match &self.members {
            Some(m) => m.group.size(),
            None => self.shared.size as usize,
        }
    }

    /// `MPI_Comm_dup`: the same ranks with a new matching context. Every
    /// rank must call `dup` on the communicator the same number of times in
    /// the same order (as in MPI, it is collective), and in the same order
    /// as its [`split`](Comm::split), [`create`](Comm::create),
    /// [`cart_create`](Comm::cart_create) and [`Cart::sub`](crate::coll::Cart::sub)
    /// calls, which number their communicators from the same count: that is
    /// what makes the new context agree everywhere without messages. A
    /// later `split` or `create` whose members counted differently fails on
    /// them with [`ErrorKind::CollectiveMismatch`]; a `dup` made on some
    /// ranks only, and used before any, is not noticed (its messages wait
    /// for receives on a context the others never make).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// let other = 1 - comm.rank();
    /// let private = comm.dup(); // e.g. a library's own channel
    /// private.isend(&1u8, other, 0);
    /// comm.isend(&2u8, other, 0);
    /// assert_eq!(comm.recv::<u8>(other, 0).await?.0, 2); // same tag, but not `private`'s message
    /// assert_eq!(private.recv::<u8>(other, 0).await?.0, 1);
    /// assert_eq!((private.rank(), private.size()), (comm.rank(), comm.size()));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn dup(&self) -> Comm {
        let n = self.dups.fetch_add(1, Ordering::Relaxed);
        self.register(derive_context(self.context, n), self.members.clone())
    }

    /// Diagnostics: the entries this rank's endpoint keeps for its
    /// communicators (the members of each over a subgroup, under its
    /// context and its collective context). They go when a communicator's
    /// last handle is dropped (at the endpoint's next use, if it was busy
    /// then), so a count that only
    /// grows as communicators are made and dropped is a leak. (A
    /// communicator's collectives' state is its registration's, and goes
    /// with its last handle or the last receive started on it; a duplicate
    /// of the world, which has no members of its own, adds nothing here.)
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// comm.barrier().await?;
    /// let before = comm.kept_communicators();
    /// let half = comm.split(Some(0), 0).await?.expect("a color");
    /// half.barrier().await?;
    /// assert!(comm.kept_communicators() > before);
    /// drop(half);
    /// drop(comm.dup());
    /// assert_eq!(comm.kept_communicators(), before);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    #[doc(hidden)]
    pub fn kept_communicators(&self) -> usize {
        self.shared.lock().groups.len()
    }

    /// The communicator's collectives' state, shared by its handles.
    pub(crate) fn collectives(&self) -> &crate::runtime::CommCollectives {
        match &self.registration {
            Some(registration) => &registration.collectives,
            None => &self.shared.world_collectives,
        }
    }

    /// The world rank of communicator rank `r`.
    fn check_rank(&self, r: usize) -> Result<u32> {
        if r >= self.size() {
            return Err(ErrorKind::InvalidRank { rank: r, size: self.size() }.into());
        }
        Ok(match &self.members {
            Some(m) => m.group.world[r],
            None => r as u32,
        })
    }

    /// What keeps the endpoint's entries for this communicator (its
    /// members, by which statuses name senders) and its collectives' state
    /// while a receive started on it is under way, whatever becomes of the
    /// communicator's handles; `None` for the world's, which stay.
    pub(crate) fn keep_alive(&self) -> Option<Arc<Registration>> {
        self.registration.clone()
    }

    /// Whether every other member of the communicator will send this rank
    /// nothing more (failed, or finished with all its messages in), or the
    /// endpoint is closed.
    pub(crate) fn others_gone(&self) -> bool {
        self.shared.lock().engine.others_gone_in(self.context).is_some()
    }

    /// The communicator rank of the sender a matching engine names (by its
    /// world rank).
    pub(crate) fn rank_of_sender(&self, world: u32) -> u32 {
        match &self.members {
            Some(m) => m.rank_of_sender(world),
            None => world,
        }
    }

    /// The destination rank of a send, or `None` for the null process.
    fn dest(&self, peer: Peer) -> Result<Option<u32>> {
        peer.rank().map(|r| self.check_rank(r)).transpose()
    }

    fn tag(t: TagSel) -> Result<Option<i32>> {
        match t {
            TagSel::Tag(t) if t >= 0 => Ok(Some(t)),
            TagSel::Tag(t) => Err(ErrorKind::InvalidTag(t).into()),
            TagSel::Any => Ok(None),
        }
    }

    /// Resolves a source and tag into a match spec, or `None` for PROC_NULL.
    fn spec(&self, source: Source, tag: TagSel, context: u64) -> Result<Option<MatchSpec>> {
        let tag = Comm::tag(tag)?;
        let source = match source {
            Source::Rank(r) => Some(self.check_rank(r)?),
            Source::Any => None,
            Source::Null => return Ok(None),
        };
        Ok(Some(MatchSpec { context, source, tag }))
    }

    /// Diagnostics: messages that have arrived at this rank and wait
    /// unmatched (over all communicators), and their data bytes. Eager data
    /// from each sender is bounded by the engine's credit.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// assert_eq!(comm.queued(), (0, 0));
    /// comm.send(&[1u32, 2], 0, 0).await?; // to itself; nobody receives it yet
    /// comm.probe(0, 0).await?; // it has arrived
    /// assert_eq!(comm.queued(), (1, 8)); // one message of 8 data bytes
    /// comm.recv::<[u32; 2]>(0, 0).await?;
    /// assert_eq!(comm.queued(), (0, 0));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn queued(&self) -> (usize, u64) {
        let st = self.shared.lock();
        (st.engine.unexpected_len(), st.engine.unexpected_bytes())
    }
}
