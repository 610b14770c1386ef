//! The point-to-point matching engine: a deterministic state machine with no
//! I/O, no tasks and no clock (the quinn-proto model).
//!
//! One [`Engine`] serves one rank. Callers feed it operations
//! ([`post_send`](Engine::post_send), [`post_recv`](Engine::post_recv), ...),
//! incoming frames ([`handle_frame`](Engine::handle_frame)) and the time
//! ([`handle_timeout`](Engine::handle_timeout)); it answers with frames to
//! transmit, per peer ([`poll_transmit`](Engine::poll_transmit)), completions
//! ([`poll_event`](Engine::poll_event)) and when it next wants the time
//! ([`poll_timeout`](Engine::poll_timeout)). The [runtime](crate::runtime)
//! drives it; tests and fuzzers drive it by hand.
//!
//! # Connections
//!
//! The first frame to every peer is a hello: the job id, this rank and the
//! world size, this rank's native data representation, and the eager
//! credit, unsolicited credit and rendezvous slots it grants the peer.
//! Nothing but a hello is accepted from a peer before its hello (but for
//! unsolicited rendezvous data, which may overtake it on a connection of
//! its own and waits for its RTS, which cannot), and a hello from another
//! job is a protocol error. A sender uses its native representation towards peers whose hello
//! says they share it and external32 otherwise (or always, when
//! [`Config::repr`] asks for it); the receiver converts.
//!
//! Frames to a rank's own self never leave the engine: they are handled as
//! they are produced, so a message to self is matched (or queued) before the
//! call that sent it returns. Messages of other ranks of this process may
//! come without frames at all ([`arrive_local`](Engine::arrive_local),
//! see the `local` module): they join the same queues, in their
//! sender's order.
//!
//! # Protocols
//!
//! * **Eager** (standard and buffered sends up to the eager threshold, when
//!   the sender holds enough *credit* for the destination): the data travels
//!   at once and the send completes locally. The receiver keeps it in its
//!   unexpected queue until a receive matches and consumes it, then returns
//!   the credit. Each message costs its length plus [`EAGER_OVERHEAD`] in credit,
//!   and each receiver grants each sender [`Config::eager_credit`] bytes of
//!   it, which bounds the receiver's memory for unexpected messages from
//!   each peer, empty ones included.
//! * **Rendezvous** (larger messages, standard sends without credit, every
//!   synchronous send): an RTS carries only the envelope; when a receive
//!   matches it the receiver answers CTS, and the data follows in chunks of
//!   at most [`Config::rndv_chunk`] bytes. The send completes when its last
//!   chunk has been handed to the transport, so a synchronous send completes
//!   only after the matching receive has started. Each receiver grants each
//!   sender [`Config::rndv_slots`] unanswered RTSs; a CTS gives one back.
//!   A standard or buffered send may instead start its data at once,
//!   without waiting for the CTS, while it holds enough *unsolicited
//!   credit* for the destination ([`Config::unsolicited_credit`], which the
//!   receiver grants in its hello; none by default; each message costs its
//!   length plus [`UNSOLICITED_OVERHEAD`]): the RTS still fixes
//!   the message's place in the matching order, and the data, addressed by
//!   the send's id, may arrive before or after it (a transport may carry
//!   data on a connection of its own). The receiver holds such data for a
//!   message no receive has matched yet, within that credit, and gives the
//!   credit back when a receive matches the message, from which point the
//!   receive bounds its memory as for any transfer. This saves the round
//!   trip of the handshake where a network's latency is large beside a
//!   message's transfer time.
//!   The receiver gathers the chunks for its receive, or, if the receive
//!   takes the data as it arrives ([`Engine::take_arrived`], told by an
//!   [`Event::DataArrived`] every [`Config::stream_step`] bytes), queues
//!   them for it until it does: the runtime's request copies them into its
//!   buffer in its own polls, and the engine never holds a caller's buffer.
//! * **Ready**: the data travels with a request for an answer; the receiver
//!   delivers it only if a matching receive is already posted and answers
//!   either way, so the sender learns whether it was erroneous
//!   ([`ErrorKind::NotReady`]) instead of the message going astray. Unmatched
//!   ready data is dropped at once, so it needs no credit.
//!
//! A send that finds no credit or slot waits in its peer's order (later
//! sends to that peer wait behind it) until credit comes back.
//!
//! # Output, per peer
//!
//! Frames queue per peer. Control frames and messages go first; rendezvous
//! data is cut into chunks only as the transport asks for frames, so a large
//! transfer holds back a small message or a control frame to the same peer
//! for at most one chunk, and queued data never exceeds the credit granted
//! plus the frames of operations this rank has started. The transfers to
//! one peer take turns, a chunk each, so a small rendezvous message waits
//! for at most one chunk of each transfer ahead of it, not for their ends.
//! A transport that cannot take more for a peer gives the frame back
//! ([`unsend`](Engine::unsend)); other peers are not held up.
//!
//! # Matching
//!
//! Posted receives are matched in the order they were posted (indexed by
//! what they accept, so matching does not scan them), unexpected
//! messages in the order they arrived, so messages from one sender on one
//! communicator never overtake each other (MPI's non-overtaking rule).
//! Every data frame carries a per-pair sequence number and frames must
//! arrive in order; a gap is a protocol error.
//!
//! # Failures
//!
//! Everything a peer sends is untrusted. A frame that breaks the protocol
//! (out of order, beyond the credit granted, above the announced eager
//! limit, answering nothing, rendezvous data of the wrong length) fails
//! that peer: every operation that depends on it completes with
//! [`ErrorKind::ProcessFailed`], and its later frames are dropped. A peer that
//! lets more than [`MAX_QUEUED_FRAMES`] answers pile up (it stopped
//! reading) fails too. With [`Config::idle_timeout`] set, a peer that
//! sends nothing for that long fails too; idle connections carry pings
//! often enough that a live peer never looks silent.
//!
//! # Goodbyes
//!
//! A rank whose program has ended ([`farewell`](Engine::farewell)) says
//! goodbye to every peer at once, with the number of data frames it sends
//! that peer in all: its sends still waiting for credit or slots follow
//! under the usual flow control. The peer fails at once what needs the
//! finished rank to match, and what waits for its messages once the last
//! has arrived. While the finished rank's remaining sends wait for slots
//! that its unmatched requests hold, the peer grants it more, up to
//! [`MAX_AFTER_GOODBYE`] beyond the usual, so that all of them arrive
//! whatever the peer's program receives first; past that bound, a receive
//! naming the finished rank that finds no match fails until the peer's
//! program has received some of what it holds. If the peer finishes too
//! before those sends go, they fail, and a second goodbye lowers the count.
//! A goodbye that says the rank failed means it serves nothing more: its
//! unanswered rendezvous requests and its data in flight are dropped (a
//! receive that owns one fails), unsolicited data included, whose credit
//! is freed, and its data that still arrives is dropped. Such a goodbye
//! counts only the data frames that went ahead of it (a failing rank
//! drops what it had not sent), so one that leaves any still to come
//! breaks the protocol. Unsolicited data
//! that no RTS can claim any more (its sender finished and all its
//! messages have arrived) is dropped too.
//!
//! An any-source receive is not failed when every other rank is gone (of
//! its communicator's, on a context the runtime named the members of:
//! [`Engine::set_members`]): this rank may still send to itself. The
//! engine reports it as [`Event::Orphaned`], and the runtime fails it only
//! once it is still unmatched on a second poll in a row (see
//! [`crate::comm`]).
//!
//! # Layout
//!
//! This file holds the engine's public types and its state; its methods
//! live by concern: `send` and `recv` (what the program starts),
//! `incoming` (frames from peers), `local` (messages of ranks of this
//! process, handed over without frames), `output` (frames to peers, per
//! peer), `time` (idle timeouts and pings), `end` (goodbyes and failures)
//! and `queries`; `peer` and `transfer` hold the per-peer and per-message
//! state, `native` the native data representation.

use std::collections::VecDeque;

// The maps here are keyed by this process's own request ids and receive
// specs, so a fast unkeyed hash (Fx) is safe from collision flooding;
// SipHash cost a quarter of a small message's cycles. The two keyed by
// send ids a peer chooses (unsolicited data) use std's keyed SipHash.
use rustc_hash::FxHashMap as HashMap;
use std::collections::HashMap as KeyedHashMap;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::matching::{PostedQueue, Queued, UnexpectedQueue};
use super::wire::{Frame, Header, Kind, Repr};
use crate::error::{Error, ErrorKind, Result};

/// Identifies a send or receive operation within one engine: one
/// [`Engine::next_id`] gave out. Ids start at 1 and stay below 2^63: id 0
/// means "no receive" on the wire (the receive id of unsolicited data),
/// and ids from 2^63 up name the engine's own transfers of unsolicited
/// data, so an id made up by the caller could be taken for either.
pub type ReqId = u64;

/// Most answers (clear-to-sends, ready answers, credit, pings) that may
/// wait for one peer before it is failed for not reading them: they are
/// what a peer's own frames make this rank queue. This rank's own messages
/// are bounded by the credit and slots the peer grants, and by the
/// operations this rank's program started, and do not count.
pub const MAX_QUEUED_FRAMES: usize = 1 << 16;

/// Most rendezvous slots this rank grants a finished peer beyond
/// [`Config::rndv_slots`]. A peer's sends still waiting for credit or slots
/// when it says goodbye follow under the usual flow control; while they
/// wait for slots its unmatched requests hold here, this rank grants more,
/// so that all it still sends arrives and a receive naming it can fail once
/// none is left, whatever this rank's program receives first. This bounds
/// the requests a finished peer makes this rank hold, whatever it announced.
pub const MAX_AFTER_GOODBYE: u64 = 1 << 16;

/// Most eager credit this rank takes from a peer's hello, whatever it
/// grants: this rank's messages for one peer that have completed but wait
/// for its link stay below this (a peer that grants more and never reads
/// cannot make this rank queue without bound).
pub const MAX_GRANTED_CREDIT: u64 = 64 << 20;

/// Most rendezvous slots this rank takes from a peer's hello, whatever it
/// grants (twice [`MAX_QUEUED_FRAMES`]: this rank's own requests never
/// count as the peer not reading).
pub const MAX_GRANTED_SLOTS: u64 = 2 * MAX_QUEUED_FRAMES as u64;

/// Largest type description a message may carry (see
/// [`TypeSequence`](crate::pack::TypeSequence)): over a million runs of
/// basic types in one item.
pub const MAX_DESC_LEN: u32 = 16 << 20;

/// Most bytes reserved up front for gathering a rendezvous message's
/// chunks; a longer message's buffer grows as its data arrives.
const GATHER_RESERVE_CAP: u64 = 64 << 20;

/// Keys of the transfers of unsolicited messages (see
/// [`Config::unsolicited_credit`]) have this bit set: apart from the
/// receive ids that key the others, which the runtime counts up from 1.
const UNSOLICITED_KEYS: u64 = 1 << 63;

/// What an unsolicited message costs in unsolicited credit beyond its
/// data: the receiver's bookkeeping of a message no receive has matched
/// (its transfer, queue entry and index entries: up to about 1,400 bytes
/// on x86-64, with the slack of the indexes' growth), so that a peer
/// sending many small messages unsolicited cannot make it hold several
/// times the credit.
pub const UNSOLICITED_OVERHEAD: u64 = 1536;

/// What a message of `len` bytes (type description included) costs in
/// unsolicited credit.
fn unsolicited_cost(len: u64) -> u64 {
    len.saturating_add(UNSOLICITED_OVERHEAD)
}

/// The mode of an RTS (its `recv_id`) whose data follows without waiting
/// for a CTS (see [`Config::unsolicited_credit`]); 0 is a standard RTS, 1
/// a ready-mode one.
const RTS_UNSOLICITED: u64 = 2;

/// Smallest frame payload every rank accepts: a hello announcing less fails
/// its peer (frames that small would carry less data than header, and a
/// large transfer would take millions of them). [`Config::max_payload`] is
/// never below it.
pub const MIN_PAYLOAD: usize = 64;

/// Tunables of the protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Largest message (bytes) sent eagerly; larger ones use rendezvous.
    pub eager_threshold: usize,
    /// Bytes of unexpected eager data (each message counted with
    /// [`EAGER_OVERHEAD`]) this rank accepts
    /// from each sender before that sender falls back to rendezvous (at
    /// most [`MAX_GRANTED_CREDIT`]: more is taken as that).
    pub eager_credit: u64,
    /// Unanswered rendezvous requests this rank accepts from each sender
    /// (1 to [`MAX_GRANTED_SLOTS`]: 0 is taken as 1, more as the most).
    pub rndv_slots: u64,
    /// Largest chunk of rendezvous data in one frame.
    pub rndv_chunk: usize,
    /// `Native`: send typed data in this rank's native representation to
    /// peers that share it, external32 to the others. `External32`: always
    /// external32 (as heterogeneous peers would).
    pub repr: Repr,
    /// Fail a peer that sends nothing for this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// The job this rank belongs to: peers of another job are refused.
    pub job: u64,
    /// The data representation this rank announces in its hello (see
    /// [`native_repr_id`]); `None`: this machine's. A rank announcing
    /// another representation behaves towards its peers as a machine of
    /// that representation would: they send it typed data in external32,
    /// and it sends them external32 (for tests of heterogeneous peers; see
    /// [`repr_id_with`]).
    pub repr_id: Option<u64>,
    /// Bytes of a rendezvous message's data between two words
    /// ([`Event::DataArrived`]) to a receive that takes the data as it
    /// arrives ([`Engine::take_arrived`]); messages shorter than 8 steps
    /// are not taken so.
    pub stream_step: u64,
    /// Bytes of rendezvous data (each message counted with
    /// [`UNSOLICITED_OVERHEAD`]) this rank accepts from each sender for
    /// messages no receive has matched yet, sent without waiting for a
    /// clear-to-send: a sender holding
    /// enough of it starts a standard or buffered send's data with its RTS
    /// (see the [module docs](self)). 0 (the default): every rendezvous
    /// message waits for its CTS. At most [`MAX_GRANTED_CREDIT`]: more is
    /// taken as that. The QUIC transport grants some, where the handshake
    /// costs a network round trip.
    pub unsolicited_credit: u64,
    /// The longest rendezvous message a receive without a limit of its
    /// own keeps (`recv_vec`, `irecv_bytes`, serde receives, a matched
    /// probe's receive): a longer one fails the receive with
    /// [`ErrorKind::Truncate`] before its data moves (see
    /// [`Engine::post_recv_limited`]). `None` (the default): any
    /// length, as MPI's receives of a probed size. A service that takes
    /// messages of any size from peers it does not trust bounds its memory
    /// with this.
    pub max_message: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            eager_threshold: 64 * 1024,
            eager_credit: 1024 * 1024,
            rndv_slots: 1024,
            rndv_chunk: 1024 * 1024,
            repr: Repr::Native,
            idle_timeout: None,
            job: 0,
            repr_id: None,
            stream_step: 256 * 1024,
            unsolicited_credit: 0,
            max_message: None,
        }
    }
}

impl Config {
    /// The largest frame payload this configuration produces or accepts:
    /// the cap for a stream decoder, and what its hello announces. At least
    /// [`MIN_PAYLOAD`].
    pub fn max_payload(&self) -> usize {
        self.eager_threshold.max(self.rndv_chunk).max(MIN_PAYLOAD)
    }
}

mod end;
mod finished_calls;
mod incoming;
mod local;
mod native;
mod output;
mod peer;
mod queries;
mod recv;
mod send;
mod time;
mod transfer;

pub use native::{native_repr_id, repr_id_with};
pub use finished_calls::{REMEMBERED_CALLS, REMEMBERED_CLOSED};
pub use transfer::Arrived;
pub use local::{LocalArrival, LocalMessage};
use peer::*;
use transfer::*;

/// The four MPI send modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendMode {
    /// `MPI_Send`: may buffer; waits for a match when the receiver's budget is spent.
    Standard,
    /// `MPI_Bsend`: the caller has already buffered the data (the engine
    /// treats it as a standard send that nobody waits for).
    Buffered,
    /// `MPI_Ssend`: completes only once a matching receive has started.
    Synchronous,
    /// `MPI_Rsend`: only valid if a matching receive is already posted.
    Ready,
}

/// What an eager message costs in eager credit beyond its data: the
/// receiver's bookkeeping of a message no receive has matched (its queue
/// entry, its place in the indexes, a lane of its own for a new tag),
/// which a peer sending empty messages would otherwise make it hold several
/// times over. A queued message takes 270-370 bytes of the receiver's heap
/// beyond its data on x86-64, up to 630 when every message has a tag of
/// its own, and up to about 890 when every message names a context of its
/// own (a peer chooses the context it names): its entries in the queue's
/// indexes, with the slack of their growth. Test
/// `queued_messages_take_no_more_heap_than_their_credit` counts the first
/// two.
pub const EAGER_OVERHEAD: u64 = 1024;

/// Credit an eager message of `len` bytes costs: its data plus
/// [`EAGER_OVERHEAD`], so even empty messages are bounded.
pub(crate) fn eager_cost(len: usize) -> u64 {
    (len as u64).saturating_add(EAGER_OVERHEAD)
}

/// Set in a message's [`Delivered::credit`] when the message came from a
/// rank of this process without frames ([`Engine::arrive_local`]): its
/// credit is kept apart from the credit of the sender's frames, and goes
/// back without a frame.
pub const LOCAL_CREDIT: u64 = 1 << 63;

/// Whether a frame of `kind` answers the peer's own frames (rather than
/// carrying this rank's messages or its hello and goodbye).
fn is_answer(kind: Kind) -> bool {
    matches!(kind, Kind::Cts | Kind::ReadyAck | Kind::Credit | Kind::Ping)
}

/// The envelope and data of an outgoing message.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// Destination rank.
    pub dest: u32,
    /// Communicator context.
    pub context: u64,
    /// Tag.
    pub tag: i32,
    /// Type signature `(hash, elements)`, or `None` for `packed` data.
    pub signature: Option<(u64, u64)>,
    /// Representation of `data`.
    pub repr: Repr,
    /// Bytes at the start of `data` that describe the type sequence (for
    /// external32 typed data), 0 otherwise.
    pub desc_len: u32,
    /// The packed data, led by its type description if any.
    pub data: Bytes,
}

/// Which messages a receive or probe accepts.
///
/// A context with its lowest bit set is a collective context (`Comm`'s
/// collectives use their communicator's context `| 1`), where the engine
/// expects every spec to name its tag: it indexes the messages queued
/// there by exact source and tag, and by tag, only, so a spec with any
/// tag on such a context is still answered correctly, but by looking at
/// every queued message.
///
/// (Laid out as declared, context first: built field by field right before
/// each lookup, it is then read back whole by the hash, and with Rust's own
/// layout that read waited on the writes.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct MatchSpec {
    /// Communicator context.
    pub context: u64,
    /// Source rank, or `None` for any source.
    pub source: Option<u32>,
    /// Tag, or `None` for any tag.
    pub tag: Option<i32>,
}

/// Two words per spec, rather than a word per field and option: the
/// matching queues look specs up several times per message.
impl std::hash::Hash for MatchSpec {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // The "any" flags folded into the context's top bits, source and
        // tag side by side in the second word. (Equal specs hash alike; a
        // collision of unequal ones costs a probe, never a wrong match.)
        let flags = u64::from(self.source.is_none()) << 63 | u64::from(self.tag.is_none()) << 62;
        let source = u64::from(self.source.unwrap_or(0));
        let tag = u64::from(self.tag.unwrap_or(0) as u32);
        state.write_u64(self.context ^ flags);
        state.write_u64(source << 32 | tag);
    }
}

impl MatchSpec {
    /// Whether a receive with this spec accepts a message with envelope
    /// `env`.
    pub(crate) fn accepts(&self, env: &Envelope) -> bool {
        self.context == env.context
            && self.source.is_none_or(|s| s == env.source)
            && self.tag.is_none_or(|t| t == env.tag)
    }
}

/// The envelope of a message: what matching looks at, and what the receiver
/// needs to check and convert the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    /// Communicator context.
    pub context: u64,
    /// Sender's rank.
    pub source: u32,
    /// Tag.
    pub tag: i32,
    /// Type signature `(hash, elements)`, or `None` for `packed` data.
    pub signature: Option<(u64, u64)>,
    /// Representation of the data.
    pub repr: Repr,
    /// Data length in bytes (not counting a type description).
    pub len: u64,
    /// Bytes of type description that lead the data on the wire.
    pub desc_len: u32,
    /// The message's place among its sender's messages to this rank, in
    /// the order they arrived: messages from one sender are matched in
    /// this order. (For frames, their per-pair sequence number, plus the
    /// messages the sender handed over without frames before it: see
    /// [`Engine::arrive_local`].)
    pub seq: u64,
}

impl Envelope {
    /// The envelope of a data frame whose message (description included)
    /// is `total` bytes; checks that a type description comes only with
    /// external32 typed data and fits in the message.
    fn from_header(h: &Header, total: u64) -> Result<Envelope> {
        if h.desc_len > 0 && (h.untyped || h.repr != Repr::External32) {
            return Err(ErrorKind::Protocol(format!("rank {} sent a type description with untyped or native data", h.source)).into());
        }
        if h.desc_len > MAX_DESC_LEN {
            return Err(ErrorKind::Protocol(format!("rank {} sent a {}-byte type description", h.source, h.desc_len)).into());
        }
        if u64::from(h.desc_len) > total {
            return Err(ErrorKind::Protocol(format!(
                "rank {} sent a {}-byte type description in a {total}-byte message",
                h.source, h.desc_len
            )).into());
        }
        // A description longer than its data needs would let a small
        // message (and a receive that asked for little) hold a large one.
        let data = total - u64::from(h.desc_len);
        if h.desc_len > 0 && u64::from(h.desc_len) > crate::pack::TypeSequence::max_encoded_len(data) {
            return Err(ErrorKind::Protocol(format!(
                "rank {} sent a {}-byte type description for {data} bytes of data",
                h.source, h.desc_len
            )).into());
        }
        Ok(Envelope {
            context: h.context,
            source: h.source,
            tag: h.tag,
            signature: (!h.untyped).then_some((h.sig_hash, h.sig_len)),
            repr: h.repr,
            len: total - u64::from(h.desc_len),
            desc_len: h.desc_len,
            seq: h.seq,
        })
    }

    /// Bytes of the whole message on the wire: description and data.
    fn wire_len(&self) -> u64 {
        self.len + u64::from(self.desc_len)
    }
}

/// A message delivered to a receive: its envelope and data.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The envelope.
    pub envelope: Envelope,
    /// The data.
    pub data: Bytes,
    /// The description of the data's type sequence, for external32 typed
    /// data (`None` otherwise; see [`type_desc`](Delivered::type_desc)).
    /// Boxed, so that a delivered message stays small enough to move
    /// without a call to `memmove`: it moves several times on its way.
    pub desc: Option<Box<Bytes>>,
    /// Eager credit the message holds; give it back with
    /// [`Engine::release_credit`] once the receive has consumed the data.
    /// (With [`LOCAL_CREDIT`] set, the credit of a message a rank of this
    /// process handed over without frames, which goes back without one.)
    pub credit: u64,
}

impl Delivered {
    /// Splits a message as it travelled (`payload`: description, then data).
    fn new(envelope: Envelope, payload: Bytes, credit: u64) -> Delivered {
        let at = (envelope.desc_len as usize).min(payload.len());
        if at == 0 {
            // No description (all but external32 typed data): the payload
            // moves as it is. Slicing a `Bytes` made from a `Vec` would
            // allocate its shared header.
            return Delivered { envelope, desc: None, data: payload, credit };
        }
        Delivered { envelope, desc: Some(Box::new(payload.slice(..at))), data: payload.slice(at..), credit }
    }

    /// The description of the data's type sequence (empty unless the data
    /// is external32 typed data).
    pub fn type_desc(&self) -> &[u8] {
        self.desc.as_deref().map_or(&[], |desc| &desc[..])
    }

    /// The message as it travelled: description, then data.
    fn payload(&self) -> Bytes {
        let desc = self.type_desc();
        if desc.is_empty() {
            return self.data.clone();
        }
        let mut all = BytesMut::with_capacity(desc.len() + self.data.len());
        all.extend_from_slice(desc);
        all.extend_from_slice(&self.data);
        all.freeze()
    }
}

/// A message taken out of the unexpected queue by a matched probe
/// (`MPI_Mprobe`); receive it with [`Engine::mrecv`].
#[derive(Debug)]
pub struct Matched(Unexpected);

impl Matched {
    /// The message's envelope.
    pub fn envelope(&self) -> &Envelope {
        &self.0.envelope
    }
}

/// A completion, or something the runtime must act on.
#[derive(Debug)]
pub enum Event {
    /// A send finished: its data is with the transport, or it failed.
    SendDone {
        /// The send.
        id: ReqId,
        /// Its outcome.
        result: Result<()>,
    },
    /// A receive finished.
    RecvDone {
        /// The receive.
        id: ReqId,
        /// The message, or why there is none.
        result: Result<Delivered>,
    },
    /// Posted any-source receive `id` can now be matched only by this
    /// rank's own messages (every other rank of its communicator is
    /// gone); see [`Engine::orphaned`].
    Orphaned {
        /// The receive.
        id: ReqId,
    },
    /// Data of receive `id`'s rendezvous message has arrived that the
    /// receive may take now, while the rest arrives
    /// ([`Engine::take_arrived`]).
    DataArrived {
        /// The receive.
        id: ReqId,
    },
    /// Rank `rank` has failed (see [`Engine::fail_peer`]): nothing more
    /// is owed to it or awaited from it. Its parting goodbye, if it can
    /// still have one, is queued for it before this event (and offered to
    /// the transport first, unless the transport is full).
    PeerFailed {
        /// The peer.
        rank: u32,
    },
    /// Send `id` of rank `rank`, a rank of this process whose message
    /// waited here for its match ([`Engine::arrive_local`]), is done: a
    /// receive took the message, or none will.
    LocalSendDone {
        /// The sending rank.
        rank: u32,
        /// Its send.
        id: ReqId,
        /// The send's outcome.
        result: Result<()>,
    },
    /// Rank `rank`'s hello arrived: send it typed data in `repr`.
    Connected {
        /// The peer.
        rank: u32,
        /// The representation to send it typed data in.
        repr: Repr,
    },
}



/// The matching engine of one rank. See the [module docs](self).
pub struct Engine {
    rank: u32,
    config: Config,
    peers: Vec<Peer>,
    posted: PostedQueue,
    unexpected: UnexpectedQueue<Unexpected>,
    sends: HashMap<ReqId, PendingSend>,
    /// Rendezvous transfers waiting for their data, by the id in their CTS
    /// (or, for unsolicited data, an id of [`UNSOLICITED_KEYS`]).
    transfers: HashMap<ReqId, Transfer>,
    /// Rendezvous messages that receives matched but cannot hold, by
    /// receive: each receive has failed ([`ErrorKind::Truncate`]), and its
    /// message waits here unanswered until the receive's owner takes the
    /// error ([`consume_truncated`](Engine::consume_truncated): the message
    /// is then received, its data dropped) or drops the receive unread
    /// ([`restore_truncated`](Engine::restore_truncated): the message goes
    /// back to the queue, whole).
    truncated: HashMap<ReqId, Unexpected>,
    /// The messages of ranks of this process whose sends wait for their
    /// match ([`Body::Local`]) taken by [`improbe`](Engine::improbe) and
    /// not received or put back yet, as (sender, send): their sends fail
    /// once this rank ends, whatever becomes of the [`Matched`] handles.
    probed_local: rustc_hash::FxHashSet<(u32, ReqId)>,
    /// Collective calls this rank has finished, by context: their late
    /// messages are dropped (see [`discard_call`](Engine::discard_call)).
    finished_calls: finished_calls::Finished,
    /// The transfers of unsolicited messages whose RTS has come and whose
    /// data is still arriving, by sender and send id.
    unsolicited: KeyedHashMap<(u32, u64), ReqId>,
    /// Unsolicited data that arrived before its RTS, by sender and send id.
    early: KeyedHashMap<(u32, u64), Early>,
    /// The last unsolicited transfer's key, below [`UNSOLICITED_KEYS`].
    next_unsolicited: u64,
    /// Buffers of large messages already consumed, for the next transfer.
    pool: BufferPool,
    /// Peers with queued output, in the order they got it.
    writable: VecDeque<u32>,
    /// Frames this rank sent itself, handled before any call returns.
    local: VecDeque<Frame>,
    /// [`handle_local`](Engine::handle_local) is taking them: a frame
    /// whose handling sends this rank more (a clear-to-send that releases
    /// held sends) leaves them to that loop rather than nest a call per
    /// frame.
    handling_local: bool,
    /// A message this rank sent itself has arrived since the runtime last
    /// asked ([`Engine::take_local_arrival`]): no frame came with it.
    local_arrival: bool,
    events: VecDeque<Event>,
    next_id: ReqId,
    /// This rank has said goodbye: it posts no more receives.
    finished: bool,
    /// This rank's goodbye said it failed: it serves no more rendezvous
    /// transfers.
    gave_up: bool,
    /// The endpoint is closed: every operation fails.
    closed: bool,
    /// The world ranks of each context over a subgroup of the world
    /// ([`set_members`](Engine::set_members)): an any-source receive there
    /// can no longer be matched once they are gone, whatever the ranks
    /// outside it do.
    members: HashMap<u64, std::sync::Arc<[u32]>>,
    /// When the engine next wants [`handle_timeout`](Engine::handle_timeout).
    next_tick: Option<Instant>,
}

impl Engine {
    /// An engine for `rank` of a world of `size` ranks. Its hellos are the
    /// first frames queued for every peer. A rank outside the world is
    /// [`ErrorKind::InvalidRank`].
    pub fn new(rank: u32, size: u32, config: Config) -> Result<Engine> {
        if rank >= size {
            return Err(ErrorKind::InvalidRank { rank: rank as usize, size: size as usize }.into());
        }
        // A rank granting no slot could receive no large message at all; and
        // it grants no more than a peer takes (MAX_GRANTED_*), or the
        // peer, holding less, would never spend the quarter of the grant
        // that brings credit back, nor the slots that bring more after its
        // goodbye.
        let config = Config {
            rndv_slots: config.rndv_slots.clamp(1, MAX_GRANTED_SLOTS),
            eager_credit: config.eager_credit.min(MAX_GRANTED_CREDIT),
            unsolicited_credit: config.unsolicited_credit.min(MAX_GRANTED_CREDIT),
            ..config
        };
        let mut engine = Engine {
            rank,
            config,
            peers: (0..size).map(|_| Peer::default()).collect(),
            posted: PostedQueue::default(),
            unexpected: UnexpectedQueue::default(),
            sends: HashMap::default(),
            transfers: HashMap::default(),
            truncated: HashMap::default(),
            probed_local: rustc_hash::FxHashSet::default(),
            finished_calls: finished_calls::Finished::default(),
            unsolicited: KeyedHashMap::default(),
            early: KeyedHashMap::default(),
            next_unsolicited: 0,
            pool: BufferPool::default(),
            writable: VecDeque::new(),
            local: VecDeque::new(),
            handling_local: false,
            local_arrival: false,
            events: VecDeque::new(),
            next_id: 1,
            finished: false,
            gave_up: false,
            closed: false,
            members: HashMap::default(),
            next_tick: None,
        };
        let hello = Header {
            context: config.job,
            data_len: u64::from(size),
            sig_hash: config.repr_id.unwrap_or_else(native_repr_id),
            sig_len: config.eager_credit,
            send_id: config.eager_threshold as u64,
            recv_id: config.rndv_slots,
            seq: config.unsolicited_credit,
            desc_len: u32::try_from(config.max_payload()).unwrap_or(u32::MAX),
            ..Header::control(Kind::Hello, rank)
        };
        for dest in 0..size {
            engine.push_frame(dest, Frame::control(hello));
        }
        engine.handle_local();
        Ok(engine)
    }

    /// This engine's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.peers.len() as u32
    }

    /// The protocol configuration.
    pub fn config(&self) -> Config {
        self.config
    }

    /// A fresh request id, for the next send or receive this engine
    /// starts (see [`ReqId`]).
    pub fn next_id(&mut self) -> ReqId {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
}

#[cfg(test)]
mod tests;
