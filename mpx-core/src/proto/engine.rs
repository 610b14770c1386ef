//! The point-to-point matching engine: a deterministic state machine with no
//! I/O, no tasks and no clock (the quinn-proto model).
//!
//! One [`Engine`] serves one rank. Callers feed it operations
//! ([`post_send`](Engine::post_send), [`post_recv`](Engine::post_recv), ...)
//! and incoming frames ([`handle_frame`](Engine::handle_frame)); it answers
//! with frames to transmit ([`poll_transmit`](Engine::poll_transmit)) and
//! completions ([`poll_event`](Engine::poll_event)). The async layer
//! ([`crate::comm`]) drives it; tests can drive it by hand.
//!
//! # Protocols
//!
//! * **Eager** (standard and buffered sends up to the eager threshold, when
//!   the sender holds enough *credit* for the destination): the data travels
//!   at once and the send completes locally. The receiver keeps it in its
//!   unexpected queue until a receive matches and consumes it, then returns
//!   the credit. Each message costs its length plus its header in credit,
//!   and each sender-receiver pair starts with [`Config::eager_credit`]
//!   bytes of it, which bounds the receiver's memory for unexpected
//!   messages from each peer, empty ones included.
//! * **Rendezvous** (larger messages, standard sends without credit, every
//!   synchronous send): an RTS carries only the envelope; when a receive
//!   matches it the receiver answers CTS, and the data follows. The send
//!   completes when the data is handed to the transport, so a synchronous
//!   send completes only after the matching receive has started.
//! * **Ready**: the data travels with a request for an answer; the receiver
//!   delivers it only if a matching receive is already posted and answers
//!   either way, so the sender learns whether it was erroneous
//!   ([`Error::NotReady`]) instead of the message going astray.
//!
//! # Matching
//!
//! Posted receives are matched in the order they were posted (indexed by
//! what they accept, so matching does not scan them), unexpected
//! messages in the order they arrived, so messages from one sender on one
//! communicator never overtake each other (MPI's non-overtaking rule).
//! Every data frame carries a per-pair sequence number and frames must
//! arrive in order; a gap is a protocol error.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use crate::error::{Error, Result};
use super::wire::{Frame, Header, Kind, Repr};

/// Identifies a send or receive operation within one engine.
pub type ReqId = u64;

/// Tunables of the protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Largest message (bytes) sent eagerly; larger ones use rendezvous.
    pub eager_threshold: usize,
    /// Bytes of unexpected eager data a receiver accepts from each sender
    /// before that sender falls back to rendezvous.
    pub eager_credit: u64,
    /// The representation this rank sends typed data in: `Native` between
    /// peers that share the native representation, `External32` for
    /// heterogeneous ones. Every message says its representation and the
    /// receiver converts.
    pub repr: Repr,
}

impl Default for Config {
    fn default() -> Self {
        Config { eager_threshold: 64 * 1024, eager_credit: 1024 * 1024, repr: Repr::Native }
    }
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
    (len + super::wire::HEADER_LEN) as u64
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
    /// The packed data.
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
    fn accepts(&self, env: &Envelope) -> bool {
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
    /// Data length in bytes.
    pub len: u64,
    /// The sender's per-pair sequence number: messages from one sender are
    /// matched in this order.
    pub seq: u64,
}

impl Envelope {
    fn from_header(h: &Header, len: u64) -> Envelope {
        Envelope {
            context: h.context,
            source: h.source,
            tag: h.tag,
            signature: (!h.untyped).then_some((h.sig_hash, h.sig_len)),
            repr: h.repr,
            len,
            seq: h.seq,
        }
    }
}

/// A message delivered to a receive: its envelope and data.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The envelope.
    pub envelope: Envelope,
    /// The data.
    pub data: Bytes,
    /// Eager credit the message holds; give it back with
    /// [`Engine::release_credit`] once the receive has consumed the data.
    pub credit: u64,
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

/// A completion the engine reports.
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
    /// Data that arrived while the message had no owner and no place in
    /// the queue (a matched probe held it).
    data: Option<Bytes>,
}

/// The posted receives, matched in posting order, indexed by what they
/// accept.
///
/// A receive accepts a message exactly when its [`MatchSpec`] is one of
/// four specs made from the message's envelope: its source and tag, any
/// source with its tag, its source with any tag, or any source and tag (in
/// its context). Receives are queued per spec in posting order, each with
/// its posting number, so the first receive posted that accepts a message
/// is the earliest of at most four queue heads: matching costs the same
/// with ten or ten thousand receives posted.
#[derive(Default)]
struct PostedQueue {
    /// Receives per spec: (posting number, receive), in posting order.
    queues: HashMap<MatchSpec, VecDeque<(u64, ReqId)>>,
    /// The spec of every posted receive.
    specs: HashMap<ReqId, MatchSpec>,
    /// The next posting number.
    next: u64,
}

impl PostedQueue {
    fn len(&self) -> usize {
        self.specs.len()
    }

    fn push(&mut self, id: ReqId, spec: MatchSpec) {
        self.queues.entry(spec).or_default().push_back((self.next, id));
        self.specs.insert(id, spec);
        self.next += 1;
    }

    /// Removes and returns the first receive posted that accepts `env`.
    fn take_match(&mut self, env: &Envelope) -> Option<ReqId> {
        let (context, source, tag) = (env.context, Some(env.source), Some(env.tag));
        let (_, id) = [(source, tag), (None, tag), (source, None), (None, None)]
            .into_iter()
            .filter_map(|(source, tag)| self.queues.get(&MatchSpec { context, source, tag })?.front().copied())
            .min_by_key(|&(number, _)| number)?;
        self.remove(id);
        Some(id)
    }

    /// Removes receive `id`; `false` if it is not posted.
    fn remove(&mut self, id: ReqId) -> bool {
        let Some(spec) = self.specs.remove(&id) else { return false };
        let queue = self.queues.get_mut(&spec).expect("every posted receive is queued");
        // The head, when matching: found at once.
        let at = queue.iter().position(|&(_, x)| x == id).expect("every posted receive is queued");
        queue.remove(at);
        if queue.is_empty() {
            self.queues.remove(&spec);
        }
        true
    }

    /// Removes and returns, in posting order, the receives whose spec
    /// satisfies `pred`.
    fn remove_where(&mut self, pred: impl Fn(&MatchSpec) -> bool) -> Vec<ReqId> {
        let specs: Vec<MatchSpec> = self.queues.keys().filter(|spec| pred(spec)).copied().collect();
        let mut removed = Vec::new();
        for spec in specs {
            for (number, id) in self.queues.remove(&spec).expect("a key just listed") {
                self.specs.remove(&id);
                removed.push((number, id));
            }
        }
        removed.sort_unstable_by_key(|&(number, _)| number);
        removed.into_iter().map(|(_, id)| id).collect()
    }
}

enum PendingSend {
    /// Waiting for CTS, holding the data.
    Rendezvous { dest: u32, data: Bytes },
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

#[derive(Default, Clone)]
struct Peer {
    next_seq: u64,
    expected_seq: u64,
    /// Eager bytes this rank may still send to the peer.
    credit: u64,
    /// Eager bytes consumed here that the peer has not been given back.
    owed: u64,
    /// The peer's program has returned; it posts no more receives.
    finished: bool,
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
    outbox: VecDeque<(u32, Frame)>,
    events: VecDeque<Event>,
    next_id: ReqId,
}

impl Engine {
    /// An engine for `rank` of a world of `size` ranks.
    pub fn new(rank: u32, size: u32, config: Config) -> Engine {
        let peer = Peer { credit: config.eager_credit, ..Default::default() };
        Engine {
            rank,
            config,
            peers: vec![peer; size as usize],
            posted: PostedQueue::default(),
            unexpected: VecDeque::new(),
            sends: HashMap::new(),
            transfers: HashMap::new(),
            outbox: VecDeque::new(),
            events: VecDeque::new(),
            next_id: 1,
        }
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

    /// The next frame to hand to the transport, with its destination.
    pub fn poll_transmit(&mut self) -> Option<(u32, Frame)> {
        self.outbox.pop_front()
    }

    /// The next completion.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Number of messages waiting in the unexpected queue.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// Bytes of eager data waiting in the unexpected queue.
    pub fn unexpected_bytes(&self) -> u64 {
        self.unexpected
            .iter()
            .map(|u| match &u.body {
                Body::Data { data, .. } => data.len() as u64,
                Body::Rts { .. } | Body::InFlight { .. } => 0,
            })
            .sum()
    }

    /// Number of receives posted and not yet matched.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Why `rank` can no longer take part: it failed, or (when the operation
    /// needs it to match) it finished.
    pub fn dead(&self, rank: u32, need_match: bool) -> Option<Error> {
        let p = self.peers.get(rank as usize)?;
        if let Some(reason) = &p.failed {
            return Some(Error::ProcessFailed { rank, reason: reason.clone() });
        }
        (need_match && p.finished)
            .then(|| Error::ProcessFailed { rank, reason: "its program returned".into() })
    }

    /// When every other rank has finished or failed (and there is at least
    /// one), the error an any-source receive gets: only this rank's own
    /// messages could still match it.
    pub fn others_gone(&self) -> Option<Error> {
        let mut last = None;
        for (r, p) in self.peers.iter().enumerate() {
            if r as u32 == self.rank {
                continue;
            }
            if p.failed.is_none() && !p.finished {
                return None;
            }
            last = Some(r as u32);
        }
        last.map(|rank| Error::ProcessFailed { rank, reason: "every other rank has finished or failed".into() })
    }

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
            seq,
            sig_hash,
            sig_len,
            data_len: msg.data.len() as u64,
            send_id,
            recv_id: 0,
        }
    }

    /// Starts send `id`; its completion arrives as [`Event::SendDone`] (at
    /// once for eager sends).
    pub fn post_send(&mut self, id: ReqId, mode: SendMode, msg: Outgoing) {
        let needs_match = matches!(mode, SendMode::Synchronous | SendMode::Ready);
        if let Some(e) = self.dead(msg.dest, needs_match) {
            self.events.push_back(Event::SendDone { id, result: Err(e) });
            return;
        }
        if msg.dest >= self.size() {
            let error = Error::InvalidRank { rank: msg.dest as i64, size: self.size() };
            self.events.push_back(Event::SendDone { id, result: Err(error) });
            return;
        }
        let len = msg.data.len() as u64;
        let cost = eager_cost(msg.data.len());
        let eager = matches!(mode, SendMode::Standard | SendMode::Buffered)
            && msg.data.len() <= self.config.eager_threshold
            && self.peers[msg.dest as usize].credit >= cost;
        tracing::trace!(rank = self.rank, id, dest = msg.dest, tag = msg.tag, len, ?mode, eager, "send posted");
        let dest = msg.dest;
        if eager {
            self.peers[dest as usize].credit -= cost;
            let header = self.data_header(Kind::Eager, &msg, id);
            self.outbox.push_back((dest, Frame { header, payload: msg.data }));
            self.events.push_back(Event::SendDone { id, result: Ok(()) });
        } else if mode == SendMode::Ready {
            let header = self.data_header(Kind::Ready, &msg, id);
            self.sends.insert(id, PendingSend::Ready { dest });
            self.outbox.push_back((dest, Frame { header, payload: msg.data }));
        } else {
            let header = self.data_header(Kind::Rts, &msg, id);
            self.sends.insert(id, PendingSend::Rendezvous { dest, data: msg.data });
            self.outbox.push_back((dest, Frame { header, payload: Bytes::new() }));
        }
    }

    /// Posts receive `id`. If a queued message matches, it completes (or,
    /// for a rendezvous message, starts its data transfer) at once.
    pub fn post_recv(&mut self, id: ReqId, spec: MatchSpec) {
        tracing::trace!(rank = self.rank, id, ?spec, "receive posted");
        if let Some(source) = spec.source.filter(|&s| s >= self.size()) {
            let error = Error::InvalidRank { rank: source as i64, size: self.size() };
            self.events.push_back(Event::RecvDone { id, result: Err(error) });
            return;
        }
        if let Some(pos) = self.unexpected.iter().position(|u| spec.accepts(&u.envelope)) {
            let u = self.unexpected.remove(pos).expect("position is in range");
            self.take_unexpected(id, u);
            return;
        }
        let dead = match spec.source {
            Some(s) => self.dead(s, true),
            None => self.others_gone(),
        };
        if let Some(e) = dead {
            self.events.push_back(Event::RecvDone { id, result: Err(e) });
            return;
        }
        self.posted.push(id, spec);
    }

    /// Withdraws a posted receive that has not matched. Returns `false` if
    /// it is not posted (already matched or unknown).
    pub fn cancel_recv(&mut self, id: ReqId) -> bool {
        let withdrawn = self.posted.remove(id);
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
    }

    /// Puts a delivered message back in the unexpected queue as if it had
    /// not been matched (for a receive abandoned after matching): it is
    /// offered to posted receives first, then queued ahead of its sender's
    /// later messages.
    pub fn requeue(&mut self, msg: Delivered) {
        self.restore(Unexpected { envelope: msg.envelope, body: Body::Data { data: msg.data, credit: msg.credit } });
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
    }

    /// Delivers queued message `u` to receive `id`.
    fn take_unexpected(&mut self, id: ReqId, u: Unexpected) {
        tracing::trace!(rank = self.rank, id, source = u.envelope.source, tag = u.envelope.tag, "matched");
        match u.body {
            Body::Data { data, credit } => {
                self.events.push_back(Event::RecvDone { id, result: Ok(Delivered { envelope: u.envelope, data, credit }) });
            }
            Body::Rts { send_id } => self.clear_to_send(id, u.envelope, send_id),
            Body::InFlight { transfer } => match self.transfers.get_mut(&transfer) {
                Some(t) if t.data.is_some() => {
                    let t = self.transfers.remove(&transfer).expect("present");
                    let delivered = Delivered { envelope: t.envelope, data: t.data.expect("checked"), credit: 0 };
                    self.events.push_back(Event::RecvDone { id, result: Ok(delivered) });
                }
                Some(t) => t.owner = Some(id),
                None => {
                    let rank = u.envelope.source;
                    let error = Error::ProcessFailed { rank, reason: "the message's data was lost with its sender".into() };
                    self.events.push_back(Event::RecvDone { id, result: Err(error) });
                }
            },
        }
    }

    fn clear_to_send(&mut self, recv_id: ReqId, envelope: Envelope, send_id: u64) {
        if let Some(e) = self.dead(envelope.source, false) {
            self.events.push_back(Event::RecvDone { id: recv_id, result: Err(e) });
            return;
        }
        let header = Header { send_id, recv_id, ..Header::control(Kind::Cts, self.rank) };
        self.outbox.push_back((envelope.source, Frame { header, payload: Bytes::new() }));
        self.transfers.insert(recv_id, Transfer { envelope, owner: Some(recv_id), data: None });
    }

    /// A receive has consumed a delivered message holding `bytes` of
    /// `source`'s credit: the credit goes back to the sender (in batches).
    pub fn release_credit(&mut self, source: u32, bytes: u64) {
        let Some(peer) = self.peers.get_mut(source as usize) else { return };
        if bytes == 0 {
            return;
        }
        peer.owed += bytes;
        // Return credit in batches of a quarter of the budget.
        if peer.owed > 0 && peer.owed >= self.config.eager_credit / 4 {
            let header = Header { data_len: peer.owed, ..Header::control(Kind::Credit, self.rank) };
            peer.owed = 0;
            self.outbox.push_back((source, Frame { header, payload: Bytes::new() }));
        }
    }

    /// Processes one frame from `from`. A frame that breaks the protocol is
    /// an error; the caller should then [`fail_peer`](Engine::fail_peer).
    pub fn handle_frame(&mut self, from: u32, frame: Frame) -> Result<()> {
        let h = frame.header;
        if from as usize >= self.peers.len() || h.source != from {
            return Err(Error::Protocol(format!("frame from rank {from} claims source {}", h.source)));
        }
        match h.kind {
            Kind::Eager | Kind::Rts | Kind::Ready => {
                let peer = &mut self.peers[from as usize];
                if h.seq != peer.expected_seq {
                    return Err(Error::Protocol(format!(
                        "frame {} from rank {from} arrived when {} was due",
                        h.seq, peer.expected_seq
                    )));
                }
                peer.expected_seq += 1;
                match h.kind {
                    Kind::Eager => self.arrive(Unexpected {
                        envelope: Envelope::from_header(&h, frame.payload.len() as u64),
                        body: Body::Data { credit: eager_cost(frame.payload.len()), data: frame.payload },
                    }),
                    Kind::Rts => self.arrive(Unexpected {
                        envelope: Envelope::from_header(&h, h.data_len),
                        body: Body::Rts { send_id: h.send_id },
                    }),
                    _ => self.arrive_ready(h, frame.payload),
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
                let header = Header { recv_id: h.recv_id, data_len: data.len() as u64, ..Header::control(Kind::RndvData, self.rank) };
                self.outbox.push_back((from, Frame { header, payload: data }));
                self.events.push_back(Event::SendDone { id: h.send_id, result: Ok(()) });
            }
            Kind::RndvData => {
                match self.transfers.get(&h.recv_id) {
                    Some(t) if t.envelope.source == from => {}
                    _ => return Err(Error::Protocol(format!("rank {from} sent data for receive {} it was not asked for", h.recv_id))),
                }
                let Some(Transfer { envelope, owner, .. }) = self.transfers.remove(&h.recv_id) else {
                    unreachable!("checked above")
                };
                if frame.payload.len() as u64 != envelope.len {
                    return Err(Error::Protocol(format!(
                        "rendezvous data of {} bytes from rank {from} for a {}-byte message from rank {}",
                        frame.payload.len(),
                        envelope.len,
                        envelope.source
                    )));
                }
                match owner {
                    Some(id) => {
                        let delivered = Delivered { envelope, data: frame.payload, credit: 0 };
                        self.events.push_back(Event::RecvDone { id, result: Ok(delivered) })
                    }
                    None => {
                        // Its receive was withdrawn: the data takes the
                        // message's place in the queue, or waits in the
                        // transfer while a matched probe holds the message.
                        let transfer = h.recv_id;
                        let queued = self
                            .unexpected
                            .iter_mut()
                            .find(|u| matches!(u.body, Body::InFlight { transfer: t } if t == transfer));
                        match queued {
                            Some(u) => u.body = Body::Data { data: frame.payload, credit: 0 },
                            None => {
                                let t = Transfer { envelope, owner: None, data: Some(frame.payload) };
                                self.transfers.insert(transfer, t);
                            }
                        }
                    }
                }
            }
            Kind::ReadyAck => {
                match self.sends.get(&h.send_id) {
                    Some(PendingSend::Ready { dest }) if *dest == from => {}
                    Some(_) => return Err(Error::Protocol(format!("ready answer from rank {from} for send {} it does not hold", h.send_id))),
                    None => return self.unknown_send(from, h.send_id),
                }
                self.sends.remove(&h.send_id);
                let result = if h.data_len == 1 { Ok(()) } else { Err(Error::NotReady) };
                self.events.push_back(Event::SendDone { id: h.send_id, result });
            }
            Kind::Credit => {
                let peer = &mut self.peers[from as usize];
                peer.credit = peer.credit.saturating_add(h.data_len).min(self.config.eager_credit);
            }
            Kind::Bye => self.peer_finished(from),
        }
        Ok(())
    }

    /// An answer for a send that is not pending: harmless if the send was
    /// failed because the peer finished meanwhile, a protocol error otherwise.
    fn unknown_send(&self, from: u32, send_id: u64) -> Result<()> {
        if self.peers[from as usize].finished {
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

    fn arrive_ready(&mut self, h: Header, data: Bytes) {
        let envelope = Envelope::from_header(&h, data.len() as u64);
        let taken = match self.posted.take_match(&envelope) {
            Some(id) => {
                self.events.push_back(Event::RecvDone { id, result: Ok(Delivered { envelope, data, credit: 0 }) });
                1
            }
            None => {
                tracing::debug!(rank = self.rank, source = h.source, tag = h.tag, "ready send found no posted receive");
                0
            }
        };
        let header = Header { send_id: h.send_id, data_len: taken, ..Header::control(Kind::ReadyAck, self.rank) };
        self.outbox.push_back((h.source, Frame { header, payload: Bytes::new() }));
    }

    /// The frame announcing that this rank has finished, for every peer.
    pub fn farewell(&mut self) {
        for dest in 0..self.size() {
            if dest != self.rank {
                self.outbox.push_back((dest, Frame { header: Header::control(Kind::Bye, self.rank), payload: Bytes::new() }));
            }
        }
    }

    /// `rank` has finished: fail what waits for it to match.
    fn peer_finished(&mut self, rank: u32) {
        self.peers[rank as usize].finished = true;
        self.fail_waiting_on(rank, "its program returned before matching");
    }

    /// `rank` has failed (its connection broke, or it broke the protocol):
    /// every operation that depends on it fails.
    pub fn fail_peer(&mut self, rank: u32, reason: &str) {
        if rank as usize >= self.peers.len() || self.peers[rank as usize].failed.is_some() {
            return;
        }
        tracing::warn!(rank = self.rank, peer = rank, reason, "peer failed");
        self.peers[rank as usize].failed = Some(reason.to_string());
        self.fail_waiting_on(rank, reason);
        let failed: Vec<ReqId> = self
            .transfers
            .iter()
            .filter(|(_, t)| t.envelope.source == rank && t.data.is_none())
            .map(|(id, _)| *id)
            .collect();
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
    }

    /// Fails the receives that name `rank` and the sends that wait for it.
    fn fail_waiting_on(&mut self, rank: u32, reason: &str) {
        let error = || Error::ProcessFailed { rank, reason: reason.to_string() };
        for id in self.posted.remove_where(|spec| spec.source == Some(rank)) {
            self.events.push_back(Event::RecvDone { id, result: Err(error()) });
        }
        if let Some(error) = self.others_gone() {
            for id in self.posted.remove_where(|spec| spec.source.is_none()) {
                self.events.push_back(Event::RecvDone { id, result: Err(error.clone()) });
            }
        }
        let failed_sends: Vec<ReqId> =
            self.sends.iter().filter(|(_, s)| s.dest() == rank).map(|(id, _)| *id).collect();
        for id in failed_sends {
            self.sends.remove(&id);
            self.events.push_back(Event::SendDone { id, result: Err(error()) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The posted-receive index against a list scanned in posting order,
    /// over random posts (with wildcards), arrivals, withdrawals and peer
    /// failures.
    #[test]
    fn posted_index_matches_like_a_scan_in_posting_order() {
        let mut x = 0x9e37_79b9u32;
        let mut next = move |n: u32| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % n
        };
        for _ in 0..200 {
            // The reference: (receive, spec) in posting order.
            let (mut index, mut list) = (PostedQueue::default(), Vec::<(ReqId, MatchSpec)>::new());
            let mut id = 0;
            for _ in 0..300 {
                let wild = |v: u32, n: u32| (v < n).then_some(v);
                match next(10) {
                    0..=4 => {
                        let spec = MatchSpec {
                            context: next(2) as u64,
                            source: wild(next(4), 3),
                            tag: wild(next(4), 3).map(|t| t as i32),
                        };
                        index.push(id, spec);
                        list.push((id, spec));
                        id += 1;
                    }
                    5..=7 => {
                        let env = Envelope {
                            context: next(2) as u64,
                            source: next(3),
                            tag: next(3) as i32,
                            signature: None,
                            repr: Repr::Native,
                            len: 0,
                            seq: 0,
                        };
                        let want = list.iter().position(|(_, spec)| spec.accepts(&env)).map(|i| list.remove(i).0);
                        assert_eq!(index.take_match(&env), want);
                    }
                    8 => {
                        let victim = next(id.max(1) as u32) as u64;
                        let want = list.iter().position(|&(x, _)| x == victim).map(|i| list.remove(i)).is_some();
                        assert_eq!(index.remove(victim), want);
                    }
                    _ => {
                        let rank = wild(next(4), 3);
                        let pred = |spec: &MatchSpec| spec.source == rank;
                        let want: Vec<ReqId> = list.iter().filter(|(_, spec)| pred(spec)).map(|&(x, _)| x).collect();
                        list.retain(|(_, spec)| !pred(spec));
                        assert_eq!(index.remove_where(pred), want);
                    }
                }
                assert_eq!(index.len(), list.len());
            }
        }
    }

    fn msg(dest: u32, tag: i32, data: &'static [u8]) -> Outgoing {
        Outgoing { dest, context: 0, tag, signature: Some((7, data.len() as u64)), repr: Repr::Native, data: Bytes::from_static(data) }
    }

    fn spec(source: Option<u32>, tag: Option<i32>) -> MatchSpec {
        MatchSpec { context: 0, source, tag }
    }

    /// Moves every queued frame to its destination engine until all are quiet.
    fn pump(engines: &mut [Engine]) {
        loop {
            let mut moved = false;
            for i in 0..engines.len() {
                while let Some((dest, frame)) = engines[i].poll_transmit() {
                    engines[dest as usize].handle_frame(i as u32, frame).unwrap();
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn events(e: &mut Engine) -> Vec<Event> {
        std::iter::from_fn(|| e.poll_event()).collect()
    }

    /// The receives completed so far, with their data.
    fn deliveries(e: &mut Engine) -> Vec<(ReqId, Bytes)> {
        events(e)
            .into_iter()
            .map(|ev| match ev {
                Event::RecvDone { id, result } => (id, result.unwrap().data),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn pair(config: Config) -> Vec<Engine> {
        vec![Engine::new(0, 2, config), Engine::new(1, 2, config)]
    }

    #[test]
    fn eager_messages_match_in_arrival_order() {
        let mut e = pair(Config::default());
        e[0].post_send(1, SendMode::Standard, msg(1, 5, b"first"));
        e[0].post_send(2, SendMode::Standard, msg(1, 5, b"second"));
        pump(&mut e);
        assert_eq!(events(&mut e[0]).len(), 2);
        e[1].post_recv(10, spec(Some(0), None));
        e[1].post_recv(11, spec(None, Some(5)));
        let got = deliveries(&mut e[1]);
        assert_eq!(got, [(10, Bytes::from_static(b"first")), (11, Bytes::from_static(b"second"))]);
    }

    #[test]
    fn rendezvous_completes_the_send_only_after_a_match() {
        let mut e = pair(Config::default());
        e[0].post_send(1, SendMode::Synchronous, msg(1, 0, b"sync"));
        pump(&mut e);
        assert!(events(&mut e[0]).is_empty(), "no match yet");
        e[1].post_recv(7, spec(Some(0), Some(0)));
        pump(&mut e);
        assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 1, result: Ok(()) }]));
        assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 7, result: Ok(d) }] if d.data == "sync"));
    }

    #[test]
    fn credit_bounds_unexpected_data_then_falls_back_to_rendezvous() {
        let mut e = pair(Config { eager_threshold: 100, eager_credit: 150, ..Config::default() });
        e[0].post_send(1, SendMode::Standard, msg(1, 0, b"12345678"));
        e[0].post_send(2, SendMode::Standard, msg(1, 0, b"abcdefgh"));
        pump(&mut e);
        let done: Vec<_> = events(&mut e[0]).into_iter().map(|ev| matches!(ev, Event::SendDone { .. })).collect();
        assert_eq!(done, [true], "the second send waits: no credit left");
        e[1].post_recv(5, spec(None, None));
        e[1].post_recv(6, spec(None, None));
        pump(&mut e);
        assert_eq!(events(&mut e[0]).len(), 1, "second send completed after its match");
        assert_eq!(events(&mut e[1]).len(), 2);
    }

    #[test]
    fn ready_send_without_a_posted_receive_is_refused() {
        let mut e = pair(Config::default());
        e[0].post_send(1, SendMode::Ready, msg(1, 0, b"early"));
        pump(&mut e);
        assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 1, result: Err(Error::NotReady) }]));
        assert_eq!(e[1].unexpected_len(), 0, "not delivered");
        e[1].post_recv(3, spec(Some(0), Some(0)));
        e[0].post_send(2, SendMode::Ready, msg(1, 0, b"ok"));
        pump(&mut e);
        assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 2, result: Ok(()) }]));
    }

    #[test]
    fn out_of_order_and_forged_frames_are_protocol_errors() {
        let mut e = pair(Config::default());
        e[0].post_send(1, SendMode::Standard, msg(1, 0, b"a"));
        e[0].post_send(2, SendMode::Standard, msg(1, 0, b"b"));
        let (_, f1) = e[0].poll_transmit().unwrap();
        let (_, f2) = e[0].poll_transmit().unwrap();
        assert!(matches!(e[1].handle_frame(0, f2), Err(Error::Protocol(_))));
        assert!(matches!(e[1].handle_frame(1, f1.clone()), Err(Error::Protocol(_))), "source mismatch");
        let cts = Frame { header: Header { send_id: 99, ..Header::control(Kind::Cts, 0) }, payload: Bytes::new() };
        assert!(e[1].handle_frame(0, cts).is_err());
    }

    #[test]
    fn a_failed_peer_fails_what_depends_on_it() {
        let config = Config::default();
        let mut e = [Engine::new(0, 3, config), Engine::new(1, 3, config)];
        e[1].post_recv(1, spec(Some(0), None));
        e[1].post_recv(2, spec(None, None));
        e[1].post_send(3, SendMode::Synchronous, msg(0, 0, b"x"));
        e[1].fail_peer(0, "connection lost");
        let ev = events(&mut e[1]);
        assert_eq!(ev.len(), 2, "{ev:?}");
        assert_eq!(e[1].posted_len(), 1, "the any-source receive stays posted: rank 2 may still send");
        e[1].post_recv(4, spec(Some(0), None));
        assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 4, result: Err(Error::ProcessFailed { .. }) }]));
        // Once every other rank is gone, any-source receives fail too.
        e[1].fail_peer(2, "connection lost");
        assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 2, result: Err(Error::ProcessFailed { .. }) }]));
        e[1].post_recv(5, spec(Some(1), None));
        assert!(events(&mut e[1]).is_empty(), "a receive from itself can still match");
    }

    #[test]
    fn a_withdrawn_rendezvous_receive_keeps_the_message_in_place() {
        let mut e = pair(Config { eager_threshold: 2, eager_credit: 1024, ..Config::default() });
        e[0].post_send(1, SendMode::Standard, msg(1, 0, b"big one")); // rendezvous
        e[0].post_send(2, SendMode::Standard, msg(1, 0, b"s")); // eager, later
        e[1].post_recv(5, spec(None, None));
        // Deliver the RTS and the eager message, and the CTS, but not the data yet.
        let (_, rts) = e[0].poll_transmit().unwrap();
        let (_, eager) = e[0].poll_transmit().unwrap();
        e[1].handle_frame(0, rts).unwrap();
        e[1].handle_frame(0, eager).unwrap();
        assert!(e[1].withdraw_recv(5), "receive 5 was waiting for data");
        e[1].post_recv(6, spec(None, None));
        assert!(events(&mut e[1]).is_empty(), "receive 6 took the in-flight message, not the later one");
        pump(&mut e);
        assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 6, result: Ok(d) }] if d.data == "big one"));
    }

    #[test]
    fn data_of_a_withdrawn_receive_lands_in_the_messages_place() {
        let mut e = pair(Config { eager_threshold: 2, eager_credit: 1024, ..Config::default() });
        e[0].post_send(1, SendMode::Standard, msg(1, 0, b"big one"));
        e[0].post_send(2, SendMode::Standard, msg(1, 0, b"s"));
        e[1].post_recv(5, spec(None, None));
        let (_, rts) = e[0].poll_transmit().unwrap();
        let (_, eager) = e[0].poll_transmit().unwrap();
        e[1].handle_frame(0, rts).unwrap();
        e[1].handle_frame(0, eager).unwrap();
        assert!(e[1].withdraw_recv(5));
        pump(&mut e); // CTS out, data back: nobody owns it now
        assert_eq!(e[1].unexpected_bytes(), 8, "the data took its place in the queue");
        e[1].post_recv(9, spec(None, None));
        e[1].post_recv(10, spec(None, None));
        let got = deliveries(&mut e[1]);
        assert_eq!(got, [(9, Bytes::from_static(b"big one")), (10, Bytes::from_static(b"s"))]);
    }

    #[test]
    fn rendezvous_data_reaches_a_message_held_by_a_matched_probe() {
        let mut e = pair(Config { eager_threshold: 2, eager_credit: 1024, ..Config::default() });
        e[0].post_send(1, SendMode::Standard, msg(1, 0, b"held"));
        e[1].post_recv(5, spec(None, None));
        let (_, rts) = e[0].poll_transmit().unwrap();
        e[1].handle_frame(0, rts).unwrap();
        assert!(e[1].withdraw_recv(5));
        let held = e[1].improbe(&spec(None, None)).expect("the in-flight message");
        pump(&mut e); // the data arrives while the probe holds the message
        e[1].mrecv(6, held);
        assert_eq!(deliveries(&mut e[1]), [(6, Bytes::from_static(b"held"))]);
    }

    #[test]
    fn requeued_messages_go_ahead_of_later_ones() {
        let mut e = pair(Config::default());
        e[0].post_send(1, SendMode::Standard, msg(1, 0, b"one"));
        e[0].post_send(2, SendMode::Standard, msg(1, 0, b"two"));
        pump(&mut e);
        e[1].post_recv(5, spec(None, None));
        let Some(Event::RecvDone { result: Ok(first), .. }) = e[1].poll_event() else { panic!() };
        e[1].requeue(first);
        e[1].post_recv(6, spec(None, None));
        assert!(matches!(e[1].poll_event(), Some(Event::RecvDone { id: 6, result: Ok(d) }) if d.data == "one"));
    }
}
