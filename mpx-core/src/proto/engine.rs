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
//! world size, this rank's native data representation, and the eager credit
//! and rendezvous slots it grants the peer. Nothing but a hello is accepted
//! from a peer before its hello, and a hello from another job is a protocol
//! error. A sender uses its native representation towards peers whose hello
//! says they share it and external32 otherwise (or always, when
//! [`Config::repr`] asks for it); the receiver converts.
//!
//! Frames to a rank's own self never leave the engine: they are handled as
//! they are produced, so a message to self is matched (or queued) before the
//! call that sent it returns.
//!
//! # Protocols
//!
//! * **Eager** (standard and buffered sends up to the eager threshold, when
//!   the sender holds enough *credit* for the destination): the data travels
//!   at once and the send completes locally. The receiver keeps it in its
//!   unexpected queue until a receive matches and consumes it, then returns
//!   the credit. Each message costs its length plus its header in credit,
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
//! * **Ready**: the data travels with a request for an answer; the receiver
//!   delivers it only if a matching receive is already posted and answers
//!   either way, so the sender learns whether it was erroneous
//!   ([`Error::NotReady`]) instead of the message going astray. Unmatched
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
//! [`Error::ProcessFailed`], and its later frames are dropped. A peer that
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
//! receive that owns one fails).
//!
//! An any-source receive is not failed when every other rank is gone: this
//! rank may still send to itself. The engine reports it as
//! [`Event::Orphaned`], and the runtime fails it only once it is still
//! unmatched on a second poll in a row (see [`crate::comm`]).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::matching::PostedQueue;
use super::wire::{Frame, Header, Kind, Repr, HEADER_LEN};
use crate::error::{Error, Result};

/// Identifies a send or receive operation within one engine.
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

/// Largest type description a message may carry (see
/// [`TypeSequence`](crate::pack::TypeSequence)): over a million runs of
/// basic types in one item.
pub const MAX_DESC_LEN: u32 = 16 << 20;

/// Most bytes reserved up front for gathering a rendezvous message's
/// chunks; a longer message's buffer grows as its data arrives.
const GATHER_RESERVE_CAP: u64 = 64 << 20;

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
    /// Bytes of unexpected eager data (headers included) this rank accepts
    /// from each sender before that sender falls back to rendezvous.
    pub eager_credit: u64,
    /// Unanswered rendezvous requests this rank accepts from each sender.
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

/// The layout of the C types whose representation varies between
/// platforms, as [`native_repr_id`] identifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NativeLayout {
    /// Whether integers are big-endian.
    big_endian: bool,
    /// Sizes of `short`, `int`, `long`, `long long` and `usize`.
    int_sizes: [usize; 5],
    /// Alignments of `f64` and `u64`.
    aligns: [usize; 2],
    /// Size and alignment of `wchar_t`.
    wchar: (usize, usize),
    /// Size and alignment of `long double`, and its format.
    long_double: (usize, usize, LongDoubleFormat),
}

/// The format of C `long double` on a platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LongDoubleFormat {
    /// A platform mpx does not know: only peers of the same architecture
    /// are assumed to share it (see [`NativeLayout::native`]).
    Unknown,
    /// The same as `double` (IEEE binary64): MSVC, 32-bit ARM, Apple arm64.
    Double,
    /// x87 80-bit extended precision, padded (x86 and x86-64 outside MSVC).
    X87,
    /// IEEE binary128 (64-bit ARM, RISC-V, LoongArch and s390x Linux).
    Binary128,
    /// IBM double-double (64-bit PowerPC).
    DoubleDouble,
}

impl NativeLayout {
    /// This target's layout.
    const fn native() -> NativeLayout {
        use std::ffi::{c_int, c_long, c_longlong, c_short};
        use std::mem::{align_of, size_of};
        use LongDoubleFormat::*;
        let long_double = if cfg!(target_env = "msvc") {
            (8, 8, Double)
        } else if cfg!(any(target_arch = "x86_64", all(target_arch = "x86", target_vendor = "apple"))) {
            (16, 16, X87)
        } else if cfg!(target_arch = "x86") {
            (12, 4, X87)
        } else if cfg!(all(target_arch = "aarch64", any(target_vendor = "apple", windows))) {
            (8, 8, Double)
        } else if cfg!(target_arch = "s390x") {
            (16, 8, Binary128)
        } else if cfg!(any(target_arch = "aarch64", target_arch = "riscv64", target_arch = "loongarch64")) {
            (16, 16, Binary128)
        } else if cfg!(target_arch = "powerpc64") {
            (16, 16, DoubleDouble)
        } else if cfg!(any(target_arch = "arm", target_arch = "wasm32")) {
            (8, 8, Double)
        } else {
            (0, 0, Unknown)
        };
        NativeLayout {
            big_endian: cfg!(target_endian = "big"),
            int_sizes: [size_of::<c_short>(), size_of::<c_int>(), size_of::<c_long>(), size_of::<c_longlong>(), size_of::<usize>()],
            aligns: [align_of::<f64>(), align_of::<u64>()],
            wchar: if cfg!(windows) { (2, 2) } else { (4, 4) },
            long_double,
        }
    }

    /// The identifier of this layout: equal layouts, equal identifiers.
    fn id(&self) -> u64 {
        let (ld_size, ld_align, format) = self.long_double;
        let mut words = vec![u64::from(self.big_endian) + 1];
        words.extend(self.int_sizes.iter().chain(&self.aligns).map(|&s| s as u64));
        words.extend([self.wchar.0 as u64, self.wchar.1 as u64, ld_size as u64, ld_align as u64, format as u64]);
        if format == LongDoubleFormat::Unknown {
            // Only the same architecture is assumed to share an unknown format.
            words.extend(std::env::consts::ARCH.bytes().map(u64::from));
        }
        words.into_iter().fold(0u64, |id, w| id.wrapping_mul(31).wrapping_add(w))
    }
}

/// An identifier of this machine's native data representation: byte order,
/// the sizes of the C integer types whose size varies between platforms,
/// and the sizes, alignments and formats of `wchar_t` and `long double`.
/// Peers with equal identifiers exchange native data.
pub fn native_repr_id() -> u64 {
    NativeLayout::native().id()
}

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

/// Credit an eager message of `len` bytes costs: its data plus its header,
/// so even empty messages are bounded.
fn eager_cost(len: usize) -> u64 {
    (len + HEADER_LEN) as u64
}

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatchSpec {
    /// Communicator context.
    pub context: u64,
    /// Source rank, or `None` for any source.
    pub source: Option<u32>,
    /// Tag, or `None` for any tag.
    pub tag: Option<i32>,
}

impl MatchSpec {
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
    /// The sender's per-pair sequence number: messages from one sender are
    /// matched in this order.
    pub seq: u64,
}

impl Envelope {
    /// The envelope of a data frame whose message (description included)
    /// is `total` bytes; checks that a type description comes only with
    /// external32 typed data and fits in the message.
    fn from_header(h: &Header, total: u64) -> Result<Envelope> {
        if h.desc_len > 0 && (h.untyped || h.repr != Repr::External32) {
            return Err(Error::Protocol(format!("rank {} sent a type description with untyped or native data", h.source)));
        }
        if h.desc_len > MAX_DESC_LEN {
            return Err(Error::Protocol(format!("rank {} sent a {}-byte type description", h.source, h.desc_len)));
        }
        if u64::from(h.desc_len) > total {
            return Err(Error::Protocol(format!(
                "rank {} sent a {}-byte type description in a {total}-byte message",
                h.source, h.desc_len
            )));
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
    /// data (empty otherwise).
    pub desc: Bytes,
    /// Eager credit the message holds; give it back with
    /// [`Engine::release_credit`] once the receive has consumed the data.
    pub credit: u64,
}

impl Delivered {
    /// Splits a message as it travelled (`payload`: description, then data).
    fn new(envelope: Envelope, payload: Bytes, credit: u64) -> Delivered {
        let at = (envelope.desc_len as usize).min(payload.len());
        Delivered { envelope, desc: payload.slice(..at), data: payload.slice(at..), credit }
    }

    /// The message as it travelled: description, then data.
    fn payload(&self) -> Bytes {
        if self.desc.is_empty() {
            return self.data.clone();
        }
        let mut all = BytesMut::with_capacity(self.desc.len() + self.data.len());
        all.extend_from_slice(&self.desc);
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
    /// rank's own messages (every other rank is gone); see
    /// [`Engine::orphaned`].
    Orphaned {
        /// The receive.
        id: ReqId,
    },
    /// Rank `rank`'s hello arrived: send it typed data in `repr`.
    Connected {
        /// The peer.
        rank: u32,
        /// The representation to send it typed data in.
        repr: Repr,
    },
}

#[derive(Debug)]
struct Unexpected {
    envelope: Envelope,
    body: Body,
}

#[derive(Debug)]
enum Body {
    /// Data, holding `credit` bytes of the sender's eager credit.
    Data { data: Bytes, credit: u64 },
    /// A rendezvous request from sender request `send_id`.
    Rts { send_id: u64 },
    /// A rendezvous message whose receive was withdrawn after its CTS went
    /// out: its data, due under transfer `transfer`, belongs to whichever
    /// receive matches this entry next. It keeps the message's place.
    InFlight { transfer: ReqId },
}

/// A rendezvous transfer: CTS sent, data awaited.
struct Transfer {
    envelope: Envelope,
    /// The receive the data goes to, or `None` while the message waits in
    /// the unexpected queue (or in a matched probe's hands) as
    /// [`Body::InFlight`].
    owner: Option<ReqId>,
    /// Chunks received so far: kept, or (for a message longer than a
    /// receive that matched it holds) counted and dropped.
    received: Received,
    /// Whether every byte has arrived.
    complete: bool,
}

impl Transfer {
    /// A receive that holds at most `limit` bytes of data owns the
    /// transfer: if the message is longer, its data is dropped from now on
    /// (and what was kept so far too).
    fn bound(&mut self, limit: Option<u64>) {
        if let Some(limit) = limit.filter(|&limit| self.envelope.len > limit) {
            self.received.discard(limit);
        }
    }

    /// What the receive that owns the complete transfer gets: the message,
    /// or [`Error::Truncate`] if its data was dropped (never a message
    /// with part of its data missing).
    fn into_result(self) -> Result<Delivered> {
        match self.received.into_kept() {
            Ok(data) => Ok(Delivered::new(self.envelope, data, 0)),
            Err(available) => Err(Error::Truncate { needed: self.envelope.len, available }),
        }
    }
}

/// The data of a rendezvous transfer as its chunks arrive.
enum Received {
    Nothing,
    /// `counted` bytes counted and dropped: the message is longer than
    /// `limit`, the most a receive that matched it holds. It is never
    /// delivered: whichever receive owns it when its last byte arrives
    /// fails with [`Error::Truncate`].
    Discarded { counted: u64, limit: u64 },
    /// One chunk, kept without a copy (the whole message, once complete).
    One(Bytes),
    /// Several chunks, gathered.
    Gathered(BytesMut),
}

impl Received {
    fn len(&self) -> u64 {
        match self {
            Received::Nothing => 0,
            Received::Discarded { counted, .. } => *counted,
            Received::One(b) => b.len() as u64,
            Received::Gathered(b) => b.len() as u64,
        }
    }

    /// Bytes kept in memory (counted bytes are not).
    fn kept(&self) -> u64 {
        match self {
            Received::Discarded { .. } => 0,
            other => other.len(),
        }
    }

    /// Drops what was kept and counts the rest without keeping it, for a
    /// receive that holds at most `limit` bytes.
    fn discard(&mut self, limit: u64) {
        let limit = match self {
            Received::Discarded { limit: earlier, .. } => limit.min(*earlier),
            _ => limit,
        };
        *self = Received::Discarded { counted: self.len(), limit };
    }

    /// Adds the next chunk of a `total`-byte message.
    fn push(&mut self, chunk: Bytes, total: u64) {
        *self = match std::mem::replace(self, Received::Nothing) {
            Received::Discarded { counted, limit } => Received::Discarded { counted: counted + chunk.len() as u64, limit },
            Received::Nothing => Received::One(chunk),
            Received::One(first) => {
                // Room in proportion to what has really arrived (the length
                // is the sender's claim): a few times the first chunks, up
                // to the whole message and a cap; the buffer then doubles
                // as more arrives.
                let arrived = (first.len() + chunk.len()) as u64;
                let room = total.min(GATHER_RESERVE_CAP).min(arrived.saturating_mul(8)).max(arrived) as usize;
                let mut all = BytesMut::with_capacity(room);
                all.extend_from_slice(&first);
                all.extend_from_slice(&chunk);
                Received::Gathered(all)
            }
            Received::Gathered(mut all) => {
                all.extend_from_slice(&chunk);
                Received::Gathered(all)
            }
        }
    }

    /// The data kept, or the limit of the receive for which it was
    /// discarded.
    fn into_kept(self) -> std::result::Result<Bytes, u64> {
        match self {
            Received::Nothing => Ok(Bytes::new()),
            Received::Discarded { limit, .. } => Err(limit),
            Received::One(b) => Ok(b),
            Received::Gathered(b) => Ok(b.freeze()),
        }
    }
}

enum PendingSend {
    /// Waiting for CTS, holding the data (`ready`: a ready-mode send,
    /// which may be answered "not ready" instead).
    Rendezvous { dest: u32, data: Bytes, ready: bool },
    /// Waiting for the answer to a ready send.
    Ready { dest: u32 },
}

impl PendingSend {
    fn dest(&self) -> u32 {
        match self {
            PendingSend::Rendezvous { dest, .. } | PendingSend::Ready { dest } => *dest,
        }
    }
}

/// A send waiting for credit (or for the peer's hello).
struct Held {
    id: ReqId,
    mode: SendMode,
    msg: Outgoing,
}

/// Rendezvous data being streamed to a peer in chunks.
struct Bulk {
    send_id: ReqId,
    recv_id: u64,
    data: Bytes,
    offset: usize,
}

/// What a peer said in its hello.
#[derive(Clone, Copy)]
struct PeerHello {
    /// Largest eager message it sends.
    eager_limit: u64,
    /// Largest frame payload it accepts.
    accepts: u64,
    /// It shares this rank's native representation.
    native: bool,
}

#[derive(Default)]
struct Peer {
    // Sending to the peer.
    next_seq: u64,
    /// Eager bytes this rank may still send to the peer.
    credit: u64,
    /// Rendezvous requests this rank may still send unanswered.
    slots: u64,
    /// Sends waiting for credit, a slot or the hello, in order.
    held: VecDeque<Held>,
    /// Frames ready to go, in order.
    queue: VecDeque<Frame>,
    /// Payload bytes in `queue`.
    queued_bytes: usize,
    /// Rendezvous data to stream, in chunks, after `queue`.
    bulk: VecDeque<Bulk>,
    /// Answers to the peer in `queue` (see [`MAX_QUEUED_FRAMES`]).
    answers: usize,
    /// The last frame for the peer, sent once its link can take it even
    /// though nothing else goes to it any more: why this rank failed it, or,
    /// once this rank is closed, its last goodbye.
    parting: Option<Frame>,
    /// Data frames this rank's last goodbye to the peer said it sends in
    /// all.
    announced: Option<u64>,
    /// In the engine's list of peers with output.
    scheduled: bool,
    /// The transport cannot take more for this peer for now.
    blocked: bool,
    /// Something went to the peer since the last timeout check.
    sent: bool,
    last_sent: Option<Instant>,

    // Receiving from the peer.
    hello: Option<PeerHello>,
    expected_seq: u64,
    /// Eager credit the peer has spent here and not been given back.
    credit_in_use: u64,
    /// Eager bytes consumed here that the peer has not been given back.
    owed: u64,
    /// The peer's rendezvous requests not yet answered with a CTS.
    slots_in_use: u64,
    /// Rendezvous slots granted to the peer beyond [`Config::rndv_slots`]
    /// after its goodbye (at most [`MAX_AFTER_GOODBYE`]).
    extra_slots: u64,
    /// Something came from the peer since the last timeout check.
    heard: bool,
    last_heard: Option<Instant>,

    /// The peer's program has returned; it posts no more receives.
    finished: bool,
    /// Data frames the peer sends in all, from its goodbye: after its
    /// goodbye, its sends that were waiting for credit still arrive.
    final_seq: Option<u64>,
    /// The peer failed, and why.
    failed: Option<String>,
}

/// The matching engine of one rank. See the [module docs](self).
pub struct Engine {
    rank: u32,
    config: Config,
    peers: Vec<Peer>,
    posted: PostedQueue,
    unexpected: VecDeque<Unexpected>,
    sends: HashMap<ReqId, PendingSend>,
    /// Rendezvous transfers waiting for their data, by the id in their CTS.
    transfers: HashMap<ReqId, Transfer>,
    /// Posted receives that hold at most this many bytes of data.
    limits: HashMap<ReqId, u64>,
    /// Peers with queued output, in the order they got it.
    writable: VecDeque<u32>,
    /// Frames this rank sent itself, handled before any call returns.
    local: VecDeque<Frame>,
    events: VecDeque<Event>,
    next_id: ReqId,
    /// This rank has said goodbye: it posts no more receives.
    finished: bool,
    /// This rank's goodbye said it failed: it serves no more rendezvous
    /// transfers.
    gave_up: bool,
    /// The endpoint is closed: every operation fails.
    closed: bool,
    /// When the engine next wants [`handle_timeout`](Engine::handle_timeout).
    next_tick: Option<Instant>,
}

impl Engine {
    /// An engine for `rank` of a world of `size` ranks. Its hellos are the
    /// first frames queued for every peer. A rank outside the world is
    /// [`Error::InvalidRank`].
    pub fn new(rank: u32, size: u32, config: Config) -> Result<Engine> {
        if rank >= size {
            return Err(Error::InvalidRank { rank: i64::from(rank), size });
        }
        let mut engine = Engine {
            rank,
            config,
            peers: (0..size).map(|_| Peer::default()).collect(),
            posted: PostedQueue::default(),
            unexpected: VecDeque::new(),
            sends: HashMap::new(),
            transfers: HashMap::new(),
            limits: HashMap::new(),
            writable: VecDeque::new(),
            local: VecDeque::new(),
            events: VecDeque::new(),
            next_id: 1,
            finished: false,
            gave_up: false,
            closed: false,
            next_tick: None,
        };
        let hello = Header {
            context: config.job,
            data_len: u64::from(size),
            sig_hash: native_repr_id(),
            sig_len: config.eager_credit,
            send_id: config.eager_threshold as u64,
            recv_id: config.rndv_slots,
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

    /// A fresh request id.
    pub fn next_id(&mut self) -> ReqId {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    // ----- output ---------------------------------------------------------------

    /// Queues `frame` for `dest`; frames to self are handled at once.
    fn push_frame(&mut self, dest: u32, frame: Frame) {
        if dest == self.rank {
            self.local.push_back(frame);
            return;
        }
        let p = &mut self.peers[dest as usize];
        if p.failed.is_some() {
            return;
        }
        p.queued_bytes += frame.payload.len();
        p.answers += usize::from(is_answer(frame.header.kind));
        p.queue.push_back(frame);
        let too_many = p.answers > MAX_QUEUED_FRAMES;
        self.schedule(dest);
        if too_many {
            self.fail_peer(dest, "it stopped reading: too many answers wait for it");
        }
    }

    fn schedule(&mut self, dest: u32) {
        let p = &mut self.peers[dest as usize];
        if !p.scheduled && !p.blocked {
            p.scheduled = true;
            self.writable.push_back(dest);
        }
    }

    /// Handles the frames this rank sent itself.
    fn handle_local(&mut self) {
        while let Some(frame) = self.local.pop_front() {
            // Frames the engine made itself cannot break the protocol.
            let _ = self.handle_peer_frame(self.rank, frame);
        }
    }

    /// The next peer with frames to transmit (skipping peers whose transport
    /// is blocked); call [`poll_transmit`](Engine::poll_transmit) for it
    /// until it returns `None`.
    pub fn poll_writable(&mut self) -> Option<u32> {
        while let Some(dest) = self.writable.pop_front() {
            let p = &mut self.peers[dest as usize];
            p.scheduled = false;
            if !p.blocked && (!p.queue.is_empty() || !p.bulk.is_empty() || p.parting.is_some()) {
                return Some(dest);
            }
        }
        None
    }

    /// The next frame for `dest`: queued frames first, then the next chunk
    /// of rendezvous data, from each of the peer's transfers in turn. A
    /// rendezvous send completes when its last chunk is taken.
    pub fn poll_transmit(&mut self, dest: u32) -> Option<Frame> {
        let closed = self.closed;
        let p = self.peers.get_mut(dest as usize)?;
        if p.blocked {
            return None;
        }
        if p.failed.is_some() || closed {
            return p.parting.take();
        }
        if let Some(frame) = p.queue.pop_front() {
            p.queued_bytes -= frame.payload.len();
            p.answers -= usize::from(is_answer(frame.header.kind));
            p.sent = true;
            return Some(frame);
        }
        let accepts = p.hello.map_or(u64::MAX, |h| h.accepts).max(1);
        let chunk = (self.config.rndv_chunk.max(1) as u64).min(accepts) as usize;
        let b = p.bulk.front_mut()?;
        let n = chunk.min(b.data.len() - b.offset);
        let header = Header {
            recv_id: b.recv_id,
            seq: b.offset as u64,
            data_len: b.data.len() as u64,
            ..Header::control(Kind::RndvData, self.rank)
        };
        let frame = Frame { header, payload: b.data.slice(b.offset..b.offset + n) };
        b.offset += n;
        p.sent = true;
        if b.offset == b.data.len() {
            let done = p.bulk.pop_front().expect("the front was just used");
            self.events.push_back(Event::SendDone { id: done.send_id, result: Ok(()) });
        } else {
            // Transfers to one peer take turns, a chunk each: a small one
            // waits for at most a chunk of each transfer ahead of it.
            p.bulk.rotate_left(1);
        }
        Some(frame)
    }

    /// Gives back a frame the transport could not take for `dest`: it goes
    /// out first once the transport calls [`writable`](Engine::writable).
    pub fn unsend(&mut self, dest: u32, frame: Frame) {
        let closed = self.closed;
        let Some(p) = self.peers.get_mut(dest as usize) else { return };
        if p.failed.is_some() || closed {
            // The last frame for the peer: it waits for the link again.
            p.parting = Some(frame);
            p.blocked = true;
            return;
        }
        p.queued_bytes += frame.payload.len();
        p.answers += usize::from(is_answer(frame.header.kind));
        p.queue.push_front(frame);
        p.blocked = true;
    }

    /// The transport can take frames for `dest` again.
    pub fn writable(&mut self, dest: u32) {
        let Some(p) = self.peers.get_mut(dest as usize) else { return };
        p.blocked = false;
        self.schedule(dest);
    }

    /// Payload bytes queued for `dest` (not counting rendezvous data not yet
    /// cut into chunks, which the sends own).
    pub fn queued_bytes(&self, dest: u32) -> usize {
        self.peers.get(dest as usize).map_or(0, |p| p.queued_bytes)
    }

    /// Whether nothing this rank started is still on its way: no send
    /// waits for an answer, credit or the transport, and no frame waits for
    /// a live peer.
    pub fn is_flushed(&self) -> bool {
        self.sends.is_empty()
            && self.peers.iter().all(|p| p.failed.is_some() || (p.held.is_empty() && p.queue.is_empty() && p.bulk.is_empty()))
    }

    /// The next completion.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // ----- time -----------------------------------------------------------------

    /// When the engine next wants [`handle_timeout`](Engine::handle_timeout)
    /// called; `None` when it keeps no timers (no idle timeout configured,
    /// or [`handle_timeout`](Engine::handle_timeout) never called yet).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_tick
    }

    /// The time is now `now`: fails peers silent for longer than the idle
    /// timeout and queues pings to peers this rank has been silent to for a
    /// third of it. Call it once at start, then whenever
    /// [`poll_timeout`](Engine::poll_timeout) comes due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(idle) = self.config.idle_timeout else { return };
        let tick = (idle / 3).max(Duration::from_millis(1));
        self.next_tick = Some(now + tick);
        if self.closed {
            self.next_tick = None;
            return;
        }
        let mut silent = Vec::new();
        let mut ping = Vec::new();
        for (r, p) in self.peers.iter_mut().enumerate() {
            if r as u32 == self.rank || p.failed.is_some() {
                continue;
            }
            // A finished peer is watched only while it still owes data; it
            // is pinged all the same, since it may be watching this rank.
            let owes = || {
                p.final_seq.is_some_and(|last| p.expected_seq < last)
                    || self.transfers.values().any(|t| t.envelope.source == r as u32 && !t.complete)
            };
            if std::mem::take(&mut p.heard) || p.last_heard.is_none() || (p.finished && !owes()) {
                p.last_heard = Some(now);
            } else if p.last_heard.is_some_and(|t| now.saturating_duration_since(t) >= idle) {
                silent.push(r as u32);
                continue;
            }
            if std::mem::take(&mut p.sent) || p.last_sent.is_none() {
                p.last_sent = Some(now);
            } else if p.last_sent.is_some_and(|t| now.saturating_duration_since(t) >= tick) {
                p.last_sent = Some(now);
                ping.push(r as u32);
            }
        }
        for r in silent {
            self.fail_peer(r, &format!("it sent nothing for {idle:?}"));
        }
        for r in ping {
            self.push_frame(r, Frame::control(Header::control(Kind::Ping, self.rank)));
        }
    }

    // ----- state --------------------------------------------------------------

    /// Number of messages waiting in the unexpected queue.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// Bytes of data waiting in the unexpected queue.
    pub fn unexpected_bytes(&self) -> u64 {
        self.unexpected
            .iter()
            .map(|u| match &u.body {
                Body::Data { data, .. } => data.len() as u64,
                Body::Rts { .. } | Body::InFlight { .. } => 0,
            })
            .sum()
    }

    /// Bytes of eager data, sent under credit, waiting in the unexpected
    /// queue: never above the credit this rank grants all ranks together.
    /// (The rest of [`unexpected_bytes`](Engine::unexpected_bytes) is
    /// rendezvous data given back by abandoned receives, which asked for
    /// it.)
    pub fn unexpected_eager_bytes(&self) -> u64 {
        self.unexpected
            .iter()
            .map(|u| match &u.body {
                Body::Data { data, credit } if *credit > 0 => data.len() as u64,
                _ => 0,
            })
            .sum()
    }

    /// Bytes of `source`'s message data (type descriptions left out) this
    /// engine holds outside its eager credit: data gathered for rendezvous
    /// transfers, and queued messages that hold no credit (rendezvous data
    /// whose receive was withdrawn, messages given back by abandoned
    /// receives). Never above what the receives that matched those
    /// messages hold (see [`post_recv_limited`](Engine::post_recv_limited)).
    pub fn rendezvous_bytes(&self, source: u32) -> u64 {
        let desc = |e: &Envelope| u64::from(e.desc_len);
        let gathered = self
            .transfers
            .values()
            .filter(|t| t.envelope.source == source)
            .map(|t| t.received.kept().saturating_sub(desc(&t.envelope)));
        let queued = self.unexpected.iter().filter(|u| u.envelope.source == source).map(|u| match &u.body {
            Body::Data { data, credit: 0 } => (data.len() as u64).saturating_sub(desc(&u.envelope)),
            _ => 0,
        });
        gathered.chain(queued).sum()
    }

    /// Eager credit (bytes, headers included) `source` has spent here and
    /// not been given back: never above [`Config::eager_credit`].
    pub fn credit_in_use(&self, source: u32) -> u64 {
        self.peers.get(source as usize).map_or(0, |p| p.credit_in_use)
    }

    /// Number of receives posted and not yet matched.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Whether receive `id` is posted and waits on `source` (for tests and
    /// fuzzing: no receive may wait on a failed peer).
    pub fn waits_on(&self, id: ReqId, source: u32) -> bool {
        self.posted.spec(id).is_some_and(|s| s.source == Some(source))
            || self.transfers.values().any(|t| t.owner == Some(id) && t.envelope.source == source)
    }

    /// Whether any receive waits on `source`: a posted receive naming it,
    /// or a rendezvous transfer from it with an owner.
    pub fn anything_waits_on(&self, source: u32) -> bool {
        !self.posted.ids_where(|s| s.source == Some(source)).is_empty()
            || self.transfers.values().any(|t| t.owner.is_some() && t.envelope.source == source && !t.complete)
    }

    /// Whether `rank` has failed.
    pub fn is_failed(&self, rank: u32) -> bool {
        self.peers.get(rank as usize).is_some_and(|p| p.failed.is_some())
    }

    /// Why `rank` can no longer take part: it failed, or (when the operation
    /// needs it to match) it finished.
    pub fn dead(&self, rank: u32, need_match: bool) -> Option<Error> {
        let p = self.peers.get(rank as usize)?;
        self.gone(rank).or_else(|| (need_match && p.finished).then(|| Self::returned(rank)))
    }

    /// The error of every operation once the engine is closed, or of one
    /// that depends on `rank` once it has failed.
    fn gone(&self, rank: u32) -> Option<Error> {
        if self.closed {
            return Some(Error::Finalized);
        }
        let reason = self.peers.get(rank as usize)?.failed.as_ref()?;
        Some(Error::ProcessFailed { rank, reason: reason.clone() })
    }

    fn returned(rank: u32) -> Error {
        Error::ProcessFailed { rank, reason: "its program returned".into() }
    }

    /// Whether `rank` will send nothing more: it failed, or it finished and
    /// every data frame it announced in its goodbye has arrived.
    fn sends_no_more(&self, rank: u32) -> bool {
        let p = &self.peers[rank as usize];
        p.failed.is_some() || (p.finished && p.final_seq.is_some_and(|last| p.expected_seq >= last))
    }

    /// Whether `rank` finished with more messages for this rank than this
    /// rank takes in unmatched (see [`MAX_AFTER_GOODBYE`]): the rest can
    /// arrive only as this rank receives those it holds.
    fn stalled(&self, rank: u32) -> bool {
        let p = &self.peers[rank as usize];
        p.finished
            && p.failed.is_none()
            && !self.sends_no_more(rank)
            && p.extra_slots >= MAX_AFTER_GOODBYE
            && p.slots_in_use >= self.config.rndv_slots.saturating_add(p.extra_slots)
    }

    /// Why a receive naming a [stalled](Engine::stalled) peer fails.
    fn stalled_reason() -> String {
        format!(
            "it finished with more messages for this rank than this rank takes in unmatched \
             ({MAX_AFTER_GOODBYE} rendezvous requests beyond its slots): receive those first"
        )
    }

    /// Why a receive naming `rank` can never be matched: it failed, or it
    /// finished and all it sent has arrived (or what it still sends cannot
    /// arrive before this rank receives what it holds of it).
    pub fn silent(&self, rank: u32) -> Option<Error> {
        self.peers.get(rank as usize)?;
        self.gone(rank)
            .or_else(|| self.sends_no_more(rank).then(|| Self::returned(rank)))
            .or_else(|| self.stalled(rank).then(|| Error::ProcessFailed { rank, reason: Self::stalled_reason() }))
    }

    /// When every other rank will send nothing more (and there is at least
    /// one), the error an any-source receive that stays unmatched gets: only
    /// this rank's own messages could still match it.
    pub fn others_gone(&self) -> Option<Error> {
        if self.closed {
            return Some(Error::Finalized);
        }
        let mut last = None;
        for r in 0..self.size() as usize {
            if r as u32 == self.rank {
                continue;
            }
            if !self.sends_no_more(r as u32) && !self.stalled(r as u32) {
                return None;
            }
            last = Some(r as u32);
        }
        last.map(|rank| Error::ProcessFailed { rank, reason: "every other rank has finished or failed".into() })
    }

    /// Whether posted receive `id` accepts any source while every other
    /// rank is gone: only this rank can still match it.
    pub fn orphaned(&self, id: ReqId) -> bool {
        self.posted.spec(id).is_some_and(|s| s.source.is_none()) && self.others_gone().is_some()
    }

    /// The representation to send typed data to `dest` in: native only to
    /// a peer whose hello said it shares this rank's representation.
    pub fn repr_for(&self, dest: u32) -> Repr {
        match self.peers.get(dest as usize).and_then(|p| p.hello) {
            Some(hello) if hello.native && self.config.repr == Repr::Native => Repr::Native,
            _ => Repr::External32,
        }
    }

    /// Whether every peer's hello has arrived (or the peer failed).
    pub fn is_connected(&self) -> bool {
        self.peers.iter().all(|p| p.hello.is_some() || p.failed.is_some())
    }

    // ----- sends --------------------------------------------------------------

    fn data_header(&mut self, kind: Kind, msg: &Outgoing, send_id: u64) -> Header {
        let peer = &mut self.peers[msg.dest as usize];
        let seq = peer.next_seq;
        peer.next_seq += 1;
        let (sig_hash, sig_len) = msg.signature.unwrap_or((0, 0));
        Header {
            kind,
            repr: msg.repr,
            untyped: msg.signature.is_none(),
            tag: msg.tag,
            context: msg.context,
            source: self.rank,
            desc_len: msg.desc_len,
            seq,
            sig_hash,
            sig_len,
            data_len: msg.data.len() as u64,
            send_id,
            recv_id: 0,
        }
    }

    /// Whether a send of `len` bytes in `mode` to `dest` would go eagerly
    /// with the credit held now.
    fn goes_eagerly(&self, mode: SendMode, dest: u32, len: usize) -> bool {
        matches!(mode, SendMode::Standard | SendMode::Buffered)
            && self.fits_one_frame(dest, len)
            && self.peers[dest as usize].credit >= eager_cost(len)
    }

    /// Whether a message of `len` bytes may travel whole in one frame to
    /// `dest`: within this rank's eager threshold and the payload `dest`
    /// accepts.
    fn fits_one_frame(&self, dest: u32, len: usize) -> bool {
        let accepts = self.peers[dest as usize].hello.map_or(u64::MAX, |h| h.accepts);
        len <= self.config.eager_threshold && len as u64 <= accepts
    }

    /// Starts send `id`; its completion arrives as [`Event::SendDone`] (at
    /// once for eager sends).
    pub fn post_send(&mut self, id: ReqId, mode: SendMode, msg: Outgoing) {
        tracing::trace!(rank = self.rank, id, dest = msg.dest, tag = msg.tag, len = msg.data.len(), ?mode, "send posted");
        if msg.dest >= self.size() {
            let error = Error::InvalidRank { rank: msg.dest as i64, size: self.size() };
            self.events.push_back(Event::SendDone { id, result: Err(error) });
            return;
        }
        if self.finished && msg.dest != self.rank {
            // The goodbye said how many messages follow it.
            self.events.push_back(Event::SendDone { id, result: Err(Error::Finalized) });
            return;
        }
        // A send that cannot go eagerly needs the peer to match it.
        let needs_peer = !self.goes_eagerly(mode, msg.dest, msg.data.len()) || !self.peers[msg.dest as usize].held.is_empty();
        if let Some(e) = self.dead(msg.dest, needs_peer) {
            self.events.push_back(Event::SendDone { id, result: Err(e) });
            return;
        }
        let dest = msg.dest;
        self.peers[dest as usize].held.push_back(Held { id, mode, msg });
        self.start_held(dest);
        self.handle_local();
    }

    /// Starts the sends held for `dest`, in order, while credit and slots
    /// allow.
    fn start_held(&mut self, dest: u32) {
        loop {
            let p = &self.peers[dest as usize];
            let Some(h) = p.held.front() else { return };
            if p.hello.is_none() {
                return;
            }
            let (mode, len, slots) = (h.mode, h.msg.data.len(), p.slots);
            let eager = self.goes_eagerly(mode, dest, len);
            // A ready message too large for one frame asks first, as a
            // rendezvous request the receiver answers "not ready" or CTS.
            let ready_whole = mode == SendMode::Ready && self.fits_one_frame(dest, len);
            let rendezvous = !eager && !ready_whole;
            if rendezvous && slots == 0 {
                return;
            }
            let Held { id, mode, msg } = self.peers[dest as usize].held.pop_front().expect("checked above");
            if eager {
                self.peers[dest as usize].credit -= eager_cost(msg.data.len());
                let header = self.data_header(Kind::Eager, &msg, id);
                self.push_frame(dest, Frame { header, payload: msg.data });
                self.events.push_back(Event::SendDone { id, result: Ok(()) });
            } else if ready_whole {
                let header = self.data_header(Kind::Ready, &msg, id);
                self.sends.insert(id, PendingSend::Ready { dest });
                self.push_frame(dest, Frame { header, payload: msg.data });
            } else {
                self.peers[dest as usize].slots -= 1;
                self.request_to_send(id, mode, msg);
            }
        }
    }

    /// Sends the rendezvous request of send `id` (a ready-mode one if
    /// `mode` says so) and keeps its data for the CTS.
    fn request_to_send(&mut self, id: ReqId, mode: SendMode, msg: Outgoing) {
        let ready = mode == SendMode::Ready;
        let dest = msg.dest;
        let header = Header { recv_id: u64::from(ready), ..self.data_header(Kind::Rts, &msg, id) };
        self.sends.insert(id, PendingSend::Rendezvous { dest, data: msg.data, ready });
        self.push_frame(dest, Frame::control(header));
    }

    // ----- receives -----------------------------------------------------------

    /// Posts receive `id`. If a queued message matches, it completes (or,
    /// for a rendezvous message, starts its data transfer) at once. An
    /// any-source receive stays posted when every other rank is gone (see
    /// [`Event::Orphaned`]).
    pub fn post_recv(&mut self, id: ReqId, spec: MatchSpec) {
        tracing::trace!(rank = self.rank, id, ?spec, "receive posted");
        if self.closed {
            self.events.push_back(Event::RecvDone { id, result: Err(Error::Finalized) });
            return;
        }
        if let Some(source) = spec.source.filter(|&s| s >= self.size()) {
            let error = Error::InvalidRank { rank: source as i64, size: self.size() };
            self.events.push_back(Event::RecvDone { id, result: Err(error) });
            return;
        }
        if let Some(pos) = self.unexpected.iter().position(|u| spec.accepts(&u.envelope)) {
            let u = self.unexpected.remove(pos).expect("position is in range");
            self.take_unexpected(id, u);
            self.handle_local();
            return;
        }
        if let Some(e) = spec.source.and_then(|s| self.silent(s)) {
            self.events.push_back(Event::RecvDone { id, result: Err(e) });
            return;
        }
        self.posted.push(id, spec);
        if spec.source.is_none() && self.others_gone().is_some() {
            self.events.push_back(Event::Orphaned { id });
        }
    }

    /// [`post_recv`](Engine::post_recv) for a receive that holds at most
    /// `limit` bytes of data: a longer rendezvous message is still
    /// answered (its sender completes, as MPI says), but its data is
    /// counted rather than kept, and the receive fails with
    /// [`Error::Truncate`]. Memory for a matched message then follows what
    /// the receive asked for, not what the sender claims, for the whole
    /// transfer, even if the receive is withdrawn (see
    /// [`withdraw_recv`](Engine::withdraw_recv)).
    pub fn post_recv_limited(&mut self, id: ReqId, spec: MatchSpec, limit: u64) {
        self.limits.insert(id, limit);
        self.post_recv(id, spec);
        if !self.posted.contains(id) && !self.transfers.contains_key(&id) {
            self.limits.remove(&id);
        }
    }

    /// Withdraws a posted receive that has not matched. Returns `false` if
    /// it is not posted (already matched or unknown).
    pub fn cancel_recv(&mut self, id: ReqId) -> bool {
        let withdrawn = self.posted.remove(id);
        self.limits.remove(&id);
        if withdrawn {
            tracing::trace!(rank = self.rank, id, "receive withdrawn");
        }
        withdrawn
    }

    /// Withdraws receive `id` whatever its state, for a receive whose owner
    /// is gone: unposts it if it has not matched, or, if it matched a
    /// rendezvous message whose data is still coming, puts that message back
    /// at the head of the queue (the data will go to the next receive that
    /// matches it). Returns `false` if the engine holds nothing for `id`
    /// (it completed: the caller gives back a delivered message with
    /// [`requeue`](Engine::requeue)).
    ///
    /// # Memory and truncation
    ///
    /// A rendezvous transfer's memory is bounded by the limit of the
    /// receive that matched it (see [`post_recv_limited`](Engine::post_recv_limited))
    /// for the whole transfer, whoever owns it later: a message whose data
    /// is being (or was) dropped because that receive could not hold it
    /// stays so after the receive is withdrawn, and can never be delivered
    /// whole. Whichever receive owns it when its last byte arrives, or
    /// takes it from the queue afterwards, fails with [`Error::Truncate`]
    /// (its `available` is the limit for which the data was dropped), never
    /// succeeds. A receive that takes over a message in flight bounds it by
    /// its own limit too.
    pub fn withdraw_recv(&mut self, id: ReqId) -> bool {
        if self.cancel_recv(id) {
            return true;
        }
        let Some((&transfer, t)) = self.transfers.iter_mut().find(|(_, t)| t.owner == Some(id)) else {
            return false;
        };
        t.owner = None;
        let u = Unexpected { envelope: t.envelope, body: Body::InFlight { transfer } };
        self.restore(u);
        self.handle_local();
        true
    }

    /// Offers a message returned to the queue to the posted receives, in
    /// order; if none takes it, it goes back in its sender's order: after
    /// the sender's earlier messages, ahead of its later ones and of
    /// everything else.
    fn restore(&mut self, u: Unexpected) {
        if let Some(id) = self.posted.take_match(&u.envelope) {
            self.take_unexpected(id, u);
            return;
        }
        let same = |q: &Unexpected| q.envelope.source == u.envelope.source;
        let pos = self
            .unexpected
            .iter()
            .position(|q| same(q) && q.envelope.seq > u.envelope.seq)
            .or_else(|| self.unexpected.iter().rposition(|q| same(q) && q.envelope.seq < u.envelope.seq).map(|i| i + 1))
            .unwrap_or(0);
        self.unexpected.insert(pos, u);
    }

    /// Puts a message taken by [`improbe`](Engine::improbe) back in the
    /// queue, unreceived (a rendezvous message stays unanswered).
    pub fn unmatch(&mut self, m: Matched) {
        self.restore(m.0);
        self.handle_local();
    }

    /// Puts a delivered message back in the unexpected queue as if it had
    /// not been matched (for a receive abandoned after matching): it is
    /// offered to posted receives first, then queued ahead of its sender's
    /// later messages.
    pub fn requeue(&mut self, msg: Delivered) {
        self.restore(Unexpected { envelope: msg.envelope, body: Body::Data { data: msg.payload(), credit: msg.credit } });
        self.handle_local();
    }

    /// The envelope of the first queued message `spec` matches
    /// (`MPI_Iprobe`), leaving it queued.
    pub fn iprobe(&self, spec: &MatchSpec) -> Option<Envelope> {
        self.unexpected.iter().find(|u| spec.accepts(&u.envelope)).map(|u| u.envelope)
    }

    /// Removes the first queued message `spec` matches (`MPI_Improbe`), so
    /// no other receive can take it.
    pub fn improbe(&mut self, spec: &MatchSpec) -> Option<Matched> {
        let pos = self.unexpected.iter().position(|u| spec.accepts(&u.envelope))?;
        self.unexpected.remove(pos).map(Matched)
    }

    /// Receives a message taken by [`improbe`](Engine::improbe) as receive
    /// `id` (`MPI_Mrecv`).
    pub fn mrecv(&mut self, id: ReqId, m: Matched) {
        self.take_unexpected(id, m.0);
        self.handle_local();
    }

    /// Delivers queued message `u` to receive `id`.
    fn take_unexpected(&mut self, id: ReqId, u: Unexpected) {
        // A rendezvous request keeps the limit for its clear-to-send.
        let limit = if matches!(u.body, Body::Rts { .. }) { None } else { self.limits.remove(&id) };
        tracing::trace!(rank = self.rank, id, source = u.envelope.source, tag = u.envelope.tag, "matched");
        match u.body {
            Body::Data { data, credit } => {
                self.events.push_back(Event::RecvDone { id, result: Ok(Delivered::new(u.envelope, data, credit)) });
            }
            Body::Rts { send_id } => self.clear_to_send(id, u.envelope, send_id),
            Body::InFlight { transfer } => match self.transfers.get_mut(&transfer) {
                Some(t) if t.complete => {
                    let t = self.transfers.remove(&transfer).expect("present");
                    self.events.push_back(Event::RecvDone { id, result: t.into_result() });
                }
                Some(t) => {
                    t.owner = Some(id);
                    t.bound(limit);
                }
                None => {
                    let rank = u.envelope.source;
                    let error = Error::ProcessFailed { rank, reason: "the message's data was lost with its sender".into() };
                    self.events.push_back(Event::RecvDone { id, result: Err(error) });
                }
            },
        }
    }

    fn clear_to_send(&mut self, recv_id: ReqId, envelope: Envelope, send_id: u64) {
        let source = envelope.source;
        if let Some(p) = self.peers.get_mut(source as usize) {
            p.slots_in_use = p.slots_in_use.saturating_sub(1);
        }
        if let Some(e) = self.dead(source, false) {
            self.events.push_back(Event::RecvDone { id: recv_id, result: Err(e) });
            return;
        }
        if self.finished && source != self.rank {
            // This rank's program has ended: the sender gives up on the
            // message when the goodbye reaches it, before any clear-to-send
            // sent now would.
            self.events.push_back(Event::RecvDone { id: recv_id, result: Err(Error::Finalized) });
            return;
        }
        let header = Header { send_id, recv_id, ..Header::control(Kind::Cts, self.rank) };
        let mut transfer = Transfer { envelope, owner: Some(recv_id), received: Received::Nothing, complete: false };
        transfer.bound(self.limits.remove(&recv_id));
        self.transfers.insert(recv_id, transfer);
        self.push_frame(source, Frame::control(header));
    }

    /// A receive has consumed a delivered message holding `bytes` of
    /// `source`'s credit: the credit goes back to the sender (in batches).
    pub fn release_credit(&mut self, source: u32, bytes: u64) {
        let quarter = self.config.eager_credit / 4;
        let Some(peer) = self.peers.get_mut(source as usize) else { return };
        if bytes == 0 || peer.failed.is_some() {
            return;
        }
        peer.owed += bytes;
        // Return credit in batches of a quarter of the budget.
        if peer.owed >= quarter {
            let header = Header { data_len: peer.owed, ..Header::control(Kind::Credit, self.rank) };
            peer.credit_in_use = peer.credit_in_use.saturating_sub(peer.owed);
            peer.owed = 0;
            self.push_frame(source, Frame::control(header));
            self.handle_local();
        }
    }

    // ----- incoming frames ----------------------------------------------------

    /// Processes one frame from `from`. A frame that breaks the protocol
    /// fails that peer (every operation depending on it completes with an
    /// error) and is returned as the error; frames from a peer that has
    /// already failed are dropped. A frame said to come from outside the
    /// world, or from this rank itself (whose frames never leave the
    /// engine), is refused with an [`Error::Protocol`] and changes nothing.
    pub fn handle_frame(&mut self, from: u32, frame: Frame) -> Result<()> {
        if from as usize >= self.peers.len() {
            return Err(Error::Protocol(format!("frame from rank {from}, outside a world of {}", self.peers.len())));
        }
        if from == self.rank {
            return Err(Error::Protocol(format!(
                "a {:?} frame from rank {from} came in through the transport, but rank {from} is this rank: \
                 frames to itself never leave the engine",
                frame.header.kind
            )));
        }
        self.handle_peer_frame(from, frame)
    }

    /// [`handle_frame`](Engine::handle_frame) for a rank inside the world,
    /// this one included.
    fn handle_peer_frame(&mut self, from: u32, frame: Frame) -> Result<()> {
        if self.peers[from as usize].failed.is_some() || self.closed {
            // A failed peer's frames, and everything once closed, are dropped.
            return Ok(());
        }
        self.peers[from as usize].heard = true;
        let result = self.process(from, frame);
        if let Err(e) = &result {
            self.fail_peer(from, &e.to_string());
        }
        self.handle_local();
        result
    }

    fn process(&mut self, from: u32, frame: Frame) -> Result<()> {
        let owed = self.peers[from as usize].finished && !self.sends_no_more(from);
        let stalled = self.stalled(from);
        let result = self.process_frame(from, frame);
        if self.peers[from as usize].failed.is_none() {
            if owed && self.sends_no_more(from) {
                // Its last data frame is in: what still waits for its messages never gets one.
                self.fail_recvs_from(from, "its program returned before sending a match");
            }
            self.grant_after_goodbye(from);
            if !stalled && self.stalled(from) {
                self.fail_recvs_from(from, &Self::stalled_reason());
            }
        }
        result
    }

    /// Grants a finished peer more rendezvous slots when what it still
    /// sends waits for them: its requests use every slot it has here (see
    /// [`MAX_AFTER_GOODBYE`]).
    fn grant_after_goodbye(&mut self, rank: u32) {
        if self.finished || self.closed || rank == self.rank {
            return;
        }
        let slots = self.config.rndv_slots;
        let p = &mut self.peers[rank as usize];
        let owed = p.final_seq.map_or(0, |last| last.saturating_sub(p.expected_seq));
        if !p.finished || owed == 0 || p.slots_in_use < slots.saturating_add(p.extra_slots) || p.extra_slots >= MAX_AFTER_GOODBYE {
            return;
        }
        let grant = owed.min(slots.max(1)).min(MAX_AFTER_GOODBYE - p.extra_slots);
        p.extra_slots += grant;
        let header = Header { recv_id: grant, ..Header::control(Kind::Credit, self.rank) };
        self.push_frame(rank, Frame::control(header));
    }

    fn process_frame(&mut self, from: u32, frame: Frame) -> Result<()> {
        let h = frame.header;
        if h.source != from {
            return Err(Error::Protocol(format!("frame from rank {from} claims source {}", h.source)));
        }
        let peer = &self.peers[from as usize];
        if peer.hello.is_none() && h.kind != Kind::Hello {
            return Err(Error::Protocol(format!("{:?} frame from rank {from} before its hello", h.kind)));
        }
        let data_frame = matches!(h.kind, Kind::Eager | Kind::Rts | Kind::Ready);
        let still_owed = data_frame && peer.final_seq.is_some_and(|last| h.seq < last);
        if peer.finished
            && !still_owed
            && !matches!(h.kind, Kind::Cts | Kind::RndvData | Kind::ReadyAck | Kind::Credit | Kind::Ping | Kind::Bye)
        {
            return Err(Error::Protocol(format!("{:?} frame from rank {from} after its goodbye", h.kind)));
        }
        if h.kind == Kind::Hello {
            return self.hello(from, h);
        }
        let peer = &mut self.peers[from as usize];
        match h.kind {
            Kind::Hello => unreachable!("handled above"),
            Kind::Eager | Kind::Rts | Kind::Ready => {
                if h.seq != peer.expected_seq {
                    return Err(Error::Protocol(format!(
                        "frame {} from rank {from} arrived when {} was due",
                        h.seq, peer.expected_seq
                    )));
                }
                peer.expected_seq += 1;
                match h.kind {
                    Kind::Eager => {
                        let limit = peer.hello.map_or(0, |p| p.eager_limit);
                        let cost = eager_cost(frame.payload.len());
                        if frame.payload.len() as u64 > limit {
                            return Err(Error::Protocol(format!(
                                "eager message of {} bytes from rank {from}, above its {limit}-byte limit",
                                frame.payload.len()
                            )));
                        }
                        if peer.credit_in_use + cost > self.config.eager_credit {
                            return Err(Error::Protocol(format!(
                                "rank {from} sent {} bytes of eager data beyond the {} granted",
                                peer.credit_in_use + cost - self.config.eager_credit,
                                self.config.eager_credit
                            )));
                        }
                        peer.credit_in_use += cost;
                        let envelope = Envelope::from_header(&h, frame.payload.len() as u64)?;
                        self.arrive(Unexpected { envelope, body: Body::Data { credit: cost, data: frame.payload } })
                    }
                    Kind::Rts => {
                        if !frame.payload.is_empty() {
                            return Err(Error::Protocol(format!("RTS from rank {from} carries a payload")));
                        }
                        let granted = self.config.rndv_slots.saturating_add(peer.extra_slots);
                        if peer.slots_in_use >= granted {
                            return Err(Error::Protocol(format!(
                                "rank {from} sent more than the {granted} rendezvous requests granted"
                            )));
                        }
                        let envelope = Envelope::from_header(&h, h.data_len)?;
                        self.peers[from as usize].slots_in_use += 1;
                        let u = Unexpected { envelope, body: Body::Rts { send_id: h.send_id } };
                        match h.recv_id {
                            0 => self.arrive(u),
                            1 => self.arrive_ready_request(u, h.send_id),
                            other => return Err(Error::Protocol(format!("RTS from rank {from} with mode {other}"))),
                        }
                    }
                    _ => self.arrive_ready(h, frame.payload)?,
                }
            }
            Kind::Cts => {
                match self.sends.get(&h.send_id) {
                    Some(PendingSend::Rendezvous { dest, .. }) if *dest == from => {}
                    Some(_) => return Err(Error::Protocol(format!("CTS from rank {from} for send {} it does not hold", h.send_id))),
                    None => return self.unknown_send(from, h.send_id),
                }
                let Some(PendingSend::Rendezvous { data, .. }) = self.sends.remove(&h.send_id) else {
                    unreachable!("checked above")
                };
                self.peers[from as usize].slots += 1;
                if from == self.rank {
                    // To itself: the whole data at once, never through a transport.
                    let header = Header {
                        recv_id: h.recv_id,
                        data_len: data.len() as u64,
                        ..Header::control(Kind::RndvData, self.rank)
                    };
                    self.local.push_back(Frame { header, payload: data });
                    self.events.push_back(Event::SendDone { id: h.send_id, result: Ok(()) });
                } else {
                    let p = &mut self.peers[from as usize];
                    p.bulk.push_back(Bulk { send_id: h.send_id, recv_id: h.recv_id, data, offset: 0 });
                    self.schedule(from);
                }
                self.start_held(from);
            }
            Kind::RndvData => self.rendezvous_data(from, h, frame.payload)?,
            Kind::ReadyAck => {
                match self.sends.get(&h.send_id) {
                    Some(PendingSend::Ready { dest }) if *dest == from => {}
                    Some(PendingSend::Rendezvous { dest, ready: true, .. }) if *dest == from && h.data_len == 0 => {
                        self.peers[from as usize].slots += 1;
                        self.sends.remove(&h.send_id);
                        self.events.push_back(Event::SendDone { id: h.send_id, result: Err(Error::NotReady) });
                        self.start_held(from);
                        return Ok(());
                    }
                    Some(_) => return Err(Error::Protocol(format!("ready answer from rank {from} for send {} it does not hold", h.send_id))),
                    None => return self.unknown_send(from, h.send_id),
                }
                self.sends.remove(&h.send_id);
                let result = if h.data_len == 1 { Ok(()) } else { Err(Error::NotReady) };
                self.events.push_back(Event::SendDone { id: h.send_id, result });
            }
            Kind::Credit => {
                peer.credit = peer.credit.saturating_add(h.data_len);
                peer.slots = peer.slots.saturating_add(h.recv_id);
                self.start_held(from);
            }
            Kind::Bye => match h.data_len {
                0 | 1 => self.peer_finished(from, h.data_len == 1, h.seq)?,
                _ => self.fail_peer(from, "it found this rank in breach of the protocol and cut it off"),
            },
            Kind::Ping => {}
        }
        Ok(())
    }

    fn hello(&mut self, from: u32, h: Header) -> Result<()> {
        let size = self.peers.len() as u64;
        let peer = &mut self.peers[from as usize];
        if peer.hello.is_some() {
            return Err(Error::Protocol(format!("a second hello from rank {from}")));
        }
        if h.context != self.config.job {
            return Err(Error::Protocol(format!("rank {from} belongs to job {:#x}, not {:#x}", h.context, self.config.job)));
        }
        if h.data_len != size {
            return Err(Error::Protocol(format!("rank {from} is in a world of {} ranks, not {size}", h.data_len)));
        }
        let accepts = u64::from(h.desc_len);
        if accepts < MIN_PAYLOAD as u64 {
            return Err(Error::Protocol(format!(
                "rank {from} accepts frames of {accepts} payload bytes, below the {MIN_PAYLOAD} every rank must accept"
            )));
        }
        let native = h.sig_hash == native_repr_id();
        // Its eager messages are refused above what this rank accepts in a
        // frame, whatever limit it announces for itself.
        let eager_limit = h.send_id.min(self.config.max_payload() as u64);
        peer.hello = Some(PeerHello { eager_limit, accepts, native });
        peer.credit = h.sig_len;
        peer.slots = h.recv_id;
        let repr = self.repr_for(from);
        self.events.push_back(Event::Connected { rank: from, repr });
        self.start_held(from);
        Ok(())
    }

    fn rendezvous_data(&mut self, from: u32, h: Header, payload: Bytes) -> Result<()> {
        let Some(t) = self.transfers.get_mut(&h.recv_id).filter(|t| t.envelope.source == from && !t.complete) else {
            return Err(Error::Protocol(format!("rank {from} sent data for receive {} it was not asked for", h.recv_id)));
        };
        let total = t.envelope.wire_len();
        if h.data_len != total || h.seq != t.received.len() || t.received.len() + payload.len() as u64 > total {
            return Err(Error::Protocol(format!(
                "rendezvous data from rank {from}: {} bytes at offset {} of {}, for a {total}-byte message with {} bytes in",
                payload.len(),
                h.seq,
                h.data_len,
                t.received.len()
            )));
        }
        t.received.push(payload, total);
        if t.received.len() < total {
            return Ok(());
        }
        t.complete = true;
        let transfer = h.recv_id;
        match t.owner {
            Some(id) => {
                let t = self.transfers.remove(&transfer).expect("present");
                self.events.push_back(Event::RecvDone { id, result: t.into_result() });
            }
            None => {
                // Its receive was withdrawn: the data takes the message's
                // place in the queue, or waits in the transfer while a
                // matched probe holds the message. Data that was dropped
                // (see `withdraw_recv`) stays so: the message stays in
                // flight, and whoever receives it gets `Error::Truncate`.
                if matches!(t.received, Received::Discarded { .. }) {
                    return Ok(());
                }
                let queued = self.unexpected.iter_mut().find(|u| matches!(u.body, Body::InFlight { transfer: x } if x == transfer));
                if let Some(u) = queued {
                    let t = self.transfers.remove(&transfer).expect("present");
                    if let Ok(data) = t.received.into_kept() {
                        u.body = Body::Data { data, credit: 0 };
                    }
                }
            }
        }
        Ok(())
    }

    /// An answer for a send that is not pending: harmless if the send was
    /// failed because the peer finished meanwhile, a protocol error otherwise.
    fn unknown_send(&self, from: u32, send_id: u64) -> Result<()> {
        if self.peers[from as usize].finished || self.gave_up {
            // Or this rank failed and dropped it (see `farewell`).
            return Ok(());
        }
        Err(Error::Protocol(format!("answer from rank {from} for unknown send {send_id}")))
    }

    /// A data message arrived: match it to the first posted receive that
    /// accepts it, or queue it.
    fn arrive(&mut self, u: Unexpected) {
        match self.posted.take_match(&u.envelope) {
            Some(id) => self.take_unexpected(id, u),
            None => {
                tracing::trace!(rank = self.rank, source = u.envelope.source, tag = u.envelope.tag, "queued unexpected");
                self.unexpected.push_back(u);
            }
        }
    }

    /// A ready-mode rendezvous request: answered at once, by a CTS if a
    /// receive is posted, "not ready" otherwise.
    fn arrive_ready_request(&mut self, u: Unexpected, send_id: u64) {
        match self.posted.take_match(&u.envelope) {
            Some(id) => self.take_unexpected(id, u),
            None => {
                let source = u.envelope.source;
                let p = &mut self.peers[source as usize];
                p.slots_in_use = p.slots_in_use.saturating_sub(1);
                let header = Header { send_id, data_len: 0, ..Header::control(Kind::ReadyAck, self.rank) };
                self.push_frame(source, Frame::control(header));
            }
        }
    }

    fn arrive_ready(&mut self, h: Header, data: Bytes) -> Result<()> {
        let envelope = Envelope::from_header(&h, data.len() as u64)?;
        let taken = match self.posted.take_match(&envelope) {
            Some(id) => {
                self.limits.remove(&id);
                self.events.push_back(Event::RecvDone { id, result: Ok(Delivered::new(envelope, data, 0)) });
                1
            }
            None => {
                tracing::debug!(rank = self.rank, source = h.source, tag = h.tag, "ready send found no posted receive");
                0
            }
        };
        let header = Header { send_id: h.send_id, data_len: taken, ..Header::control(Kind::ReadyAck, self.rank) };
        self.push_frame(h.source, Frame::control(header));
        Ok(())
    }

    // ----- the end ------------------------------------------------------------

    /// Says goodbye to every peer, at once: this rank posts no more
    /// receives, so the peers fail their sends that need it to match. The
    /// goodbye says how many data frames this rank sends in all: its sends
    /// still waiting for credit or slots follow it under the usual flow
    /// control (and if the peer finishes first, they fail and a second
    /// goodbye lowers the count). `failed` says the program failed rather
    /// than returned: this rank then serves nothing more, and its sends
    /// still waiting, or waiting for a clear-to-send, or streaming
    /// rendezvous data, fail with [`Error::Finalized`].
    pub fn farewell(&mut self, failed: bool) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.gave_up = failed;
        if failed {
            let mut dropped: Vec<ReqId> = Vec::new();
            for (r, p) in self.peers.iter_mut().enumerate() {
                if r as u32 != self.rank {
                    dropped.extend(p.held.drain(..).map(|h| h.id));
                    dropped.extend(p.bulk.drain(..).map(|b| b.send_id));
                }
            }
            let me = self.rank;
            let waiting = |s: &PendingSend| matches!(s, PendingSend::Rendezvous { dest, .. } if *dest != me);
            let rendezvous: Vec<ReqId> = self.sends.iter().filter(|(_, s)| waiting(s)).map(|(&id, _)| id).collect();
            for id in &rendezvous {
                self.sends.remove(id);
            }
            dropped.extend(rendezvous);
            for id in dropped {
                self.events.push_back(Event::SendDone { id, result: Err(Error::Finalized) });
            }
        }
        for dest in 0..self.size() {
            if dest != self.rank {
                let p = &self.peers[dest as usize];
                let last = p.next_seq + p.held.len() as u64;
                self.say_goodbye(dest, last);
            }
        }
    }

    /// Queues this rank's goodbye to `dest`, saying it sends `last` data
    /// frames in all.
    fn say_goodbye(&mut self, dest: u32, last: u64) {
        let header = Header { data_len: u64::from(self.gave_up), seq: last, ..Header::control(Kind::Bye, self.rank) };
        self.peers[dest as usize].announced = Some(last);
        self.push_frame(dest, Frame::control(header));
    }

    /// Closes the engine: every operation still waiting fails with
    /// [`Error::Finalized`], and every later one too, and the frames still
    /// queued are dropped. A live peer still gets this rank's last goodbye
    /// once its link can take it, even if an earlier one was among the
    /// frames dropped: it counts the data frames that did go to the peer,
    /// and says this rank failed if anything the peer could wait for was
    /// dropped (a message, rendezvous data, an answer to a request).
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        let me = self.rank;
        for dest in 0..self.size() {
            if dest == me || self.peers[dest as usize].failed.is_some() {
                continue;
            }
            let waits = self.sends.values().any(|s| matches!(s, PendingSend::Rendezvous { dest: d, .. } if *d == dest));
            let p = &mut self.peers[dest as usize];
            let is_data = |f: &&Frame| matches!(f.header.kind, Kind::Eager | Kind::Rts | Kind::Ready);
            // Data frames go in order: the first one still queued is the
            // first the peer will not get.
            let unsent = p.queue.iter().find(is_data).map(|f| f.header.seq);
            let sent = unsent.unwrap_or(p.next_seq);
            let dropped = unsent.is_some() || waits || !p.held.is_empty() || !p.bulk.is_empty();
            let goodbye_queued = p.queue.iter().any(|f| f.header.kind == Kind::Bye);
            if goodbye_queued || dropped || p.announced != Some(sent) {
                let failed = self.gave_up || dropped;
                let header = Header { data_len: u64::from(failed), seq: sent, ..Header::control(Kind::Bye, me) };
                p.parting = Some(Frame::control(header));
                p.announced = Some(sent);
            }
        }
        self.closed = true;
        self.next_tick = None;
        self.limits.clear();
        for id in self.posted.remove_where(|_| true) {
            self.events.push_back(Event::RecvDone { id, result: Err(Error::Finalized) });
        }
        for (_, t) in self.transfers.drain() {
            if let Some(id) = t.owner {
                self.events.push_back(Event::RecvDone { id, result: Err(Error::Finalized) });
            }
        }
        let mut failed: Vec<ReqId> = self.sends.drain().map(|(id, _)| id).collect();
        for p in &mut self.peers {
            failed.extend(p.held.drain(..).map(|h| h.id));
            failed.extend(p.bulk.drain(..).map(|b| b.send_id));
            p.queue.clear();
            p.queued_bytes = 0;
            p.answers = 0;
        }
        for id in failed {
            self.events.push_back(Event::SendDone { id, result: Err(Error::Finalized) });
        }
        self.unexpected.clear();
        for dest in 0..self.size() {
            if self.peers[dest as usize].parting.is_some() {
                self.schedule(dest);
            }
        }
    }

    /// Whether [`close`](Engine::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// `rank` has finished, after sending `last` data frames in all: fail
    /// what needs it to match now, and what waits for its messages once the
    /// last has arrived. A later goodbye may lower the count (some of its
    /// sends failed), never raise it. If it `failed`, it serves nothing
    /// more: its rendezvous requests are never answered and its data in
    /// flight never completes.
    fn peer_finished(&mut self, rank: u32, failed: bool, last: u64) -> Result<()> {
        let p = &mut self.peers[rank as usize];
        if let Some(announced) = p.final_seq.filter(|&announced| last > announced) {
            return Err(Error::Protocol(format!("rank {rank} raised the count in its goodbye from {announced} to {last}")));
        }
        let again = p.finished;
        p.finished = true;
        p.final_seq = Some(last.max(p.expected_seq));
        let reason = if failed { "it failed before matching" } else { "its program returned before matching" };
        if failed {
            self.drop_served_by(rank, reason);
        }
        if !again {
            self.fail_sends_to(rank, reason);
            // What this rank still held for it has failed: if this rank
            // already counted it in its own goodbye, the count goes down.
            let p = &self.peers[rank as usize];
            if p.announced.is_some_and(|announced| announced > p.next_seq) {
                let last = p.next_seq;
                self.say_goodbye(rank, last);
            }
            if self.sends_no_more(rank) {
                self.fail_recvs_from(rank, reason);
            }
        }
        Ok(())
    }

    /// Drops what only `rank` could complete: its unanswered rendezvous
    /// requests, and the transfers of its data still arriving (a receive
    /// that owns one fails).
    fn drop_served_by(&mut self, rank: u32, reason: &str) {
        let failed: Vec<ReqId> =
            self.transfers.iter().filter(|(_, t)| t.envelope.source == rank && !t.complete).map(|(id, _)| *id).collect();
        for transfer in failed {
            let t = self.transfers.remove(&transfer).expect("listed above");
            match t.owner {
                Some(id) => {
                    let error = Error::ProcessFailed { rank, reason: reason.to_string() };
                    self.events.push_back(Event::RecvDone { id, result: Err(error) });
                }
                None => self.unexpected.retain(|u| !matches!(u.body, Body::InFlight { transfer: x } if x == transfer)),
            }
        }
        self.unexpected.retain(|u| !(u.envelope.source == rank && matches!(u.body, Body::Rts { .. })));
    }

    /// `rank` has failed (its connection broke, it broke the protocol, or it
    /// went silent): every operation that depends on it fails, and its later
    /// frames are dropped.
    pub fn fail_peer(&mut self, rank: u32, reason: &str) {
        if rank == self.rank || rank as usize >= self.peers.len() || self.peers[rank as usize].failed.is_some() {
            return;
        }
        tracing::warn!(rank = self.rank, peer = rank, reason, "peer failed");
        let me = self.rank;
        let p = &mut self.peers[rank as usize];
        p.failed = Some(reason.to_string());
        p.queue.clear();
        p.queued_bytes = 0;
        p.answers = 0;
        let bulk: Vec<ReqId> = p.bulk.drain(..).map(|b| b.send_id).collect();
        // Tell it, so that it does not wait for this rank (best effort: the
        // transport may already have lost it).
        p.parting = Some(Frame::control(Header { data_len: 2, ..Header::control(Kind::Bye, me) }));
        self.schedule(rank);
        let error = || Error::ProcessFailed { rank, reason: reason.to_string() };
        for id in bulk {
            self.events.push_back(Event::SendDone { id, result: Err(error()) });
        }
        self.fail_sends_to(rank, reason);
        self.fail_recvs_from(rank, reason);
        self.drop_served_by(rank, reason);
    }

    /// Fails the sends that need `rank` to match or answer.
    fn fail_sends_to(&mut self, rank: u32, reason: &str) {
        let error = || Error::ProcessFailed { rank, reason: reason.to_string() };
        let failed_sends: Vec<ReqId> = self.sends.iter().filter(|(_, s)| s.dest() == rank).map(|(id, _)| *id).collect();
        for id in failed_sends {
            self.sends.remove(&id);
            self.events.push_back(Event::SendDone { id, result: Err(error()) });
        }
        let held: Vec<ReqId> = self.peers[rank as usize].held.drain(..).map(|h| h.id).collect();
        for id in held {
            self.events.push_back(Event::SendDone { id, result: Err(error()) });
        }
    }

    /// Fails the receives that name `rank`, and reports the any-source
    /// receives that only this rank can now match.
    fn fail_recvs_from(&mut self, rank: u32, reason: &str) {
        let error = || Error::ProcessFailed { rank, reason: reason.to_string() };
        for id in self.posted.remove_where(|spec| spec.source == Some(rank)) {
            self.limits.remove(&id);
            self.events.push_back(Event::RecvDone { id, result: Err(error()) });
        }
        if self.others_gone().is_some() {
            for id in self.posted.ids_where(|spec| spec.source.is_none()) {
                self.events.push_back(Event::Orphaned { id });
            }
        }
    }
}

#[cfg(test)]
mod tests;
