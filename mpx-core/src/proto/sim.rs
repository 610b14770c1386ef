//! A deterministic harness that drives one [`Engine`] from a script of
//! operations and raw incoming bytes, checking the engine's invariants
//! after every step: the fuzzers' target and the property tests' driver.
//!
//! A [`Script`] is a flat byte string, so a fuzzer can produce any one:
//! every byte string parses (missing arguments read as zero). It mixes
//! what a program does on the rank (sends, receives, cancels, probes,
//! consuming what arrived, collective calls ending), what its transport does (bytes arriving from a
//! peer, on its stream or, for rendezvous data, a second one that may
//! overtake it; frames leaving; a peer's link filling up), messages a peer
//! in this process hands over without frames ([`Engine::arrive_local`]),
//! time passing, and the end (goodbye, close). Bytes from a peer go through a capped
//! [`Decoder`] as a stream transport's would, so frames may be split
//! anywhere, and a peer may send anything.
//!
//! After every step [`Node::check`] asserts what must hold whatever the
//! peers send:
//!
//! * no sender holds more eager credit here than [`Config::eager_credit`],
//!   and the unexpected queue holds no more eager data than the credit of
//!   all ranks together;
//! * unsolicited data held for messages no receive has matched yet (or
//!   that came before its RTS) stays within the credit those messages
//!   hold, and that within [`Config::unsolicited_credit`];
//! * the rest of the message data the engine holds from a sender
//!   ([`Engine::rendezvous_bytes`]: rendezvous data gathered or queued) is
//!   bounded independently of what the sender claims: by the sum of the
//!   limits of the bounded receives that could have matched its messages
//!   (outstanding ones, and every one withdrawn, whose transfer may still
//!   run), the lengths of the messages the program gave back, and, for a
//!   matched probe's receive, the length the probe reported (type
//!   descriptions are left out: each is capped by
//!   [`MAX_DESC_LEN`](super::engine::MAX_DESC_LEN)); while an unbounded
//!   receive could match it, that sender is not checked;
//! * transfers of a sender's data kept only to drop it (late messages of
//!   a finished call, messages a truncated receive took) are no more than
//!   its rendezvous slots;
//! * a message delivered successfully is whole: its data and description
//!   have the lengths its envelope gives;
//! * a request fails with [`ProcessFailed`](crate::ErrorKind::ProcessFailed)
//!   only once the rank it names has failed or finished;
//! * no receive waits on a failed peer;
//! * every request completes at most once, and only requests that were
//!   started complete; a send handed over without frames that waits for
//!   its match is answered exactly once, and none is left waiting once
//!   the engine is closed; the credit such messages hold stays within
//!   the eager and unsolicited credit together;
//! * a receive never takes a message a peer handed over while an earlier
//!   one of that peer with the same context and tag waits in the queue
//!   (non-overtaking; for peers that sent no bytes, whose frames could
//!   claim any signature);
//! * a stream's undecoded bytes stay below one frame at the decoder's cap;
//! * once the engine is closed, nothing started is left waiting.
//!
//! Panics (from the engine or from these checks) are the failures a fuzzer
//! reports.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::engine::{Config, Delivered, Engine, Event, LocalArrival, LocalMessage, MatchSpec, Matched, Outgoing, ReqId, SendMode};
use super::wire::{ChunkDecoder, Decoder, Frame, Header, Kind, HEADER_LEN};
use crate::pack::Repr;

/// World size of a scripted run; the engine under test is rank 0.
pub const SIZE: u32 = 3;

/// The engine configuration scripts run under: small enough that a short
/// script reaches credit exhaustion, rendezvous chunking and slot limits.
pub fn config(repr: Repr) -> Config {
    Config {
        eager_threshold: 64,
        eager_credit: 4 * super::engine::EAGER_OVERHEAD + 512,
        rndv_slots: 4,
        rndv_chunk: 48,
        repr,
        idle_timeout: Some(Duration::from_secs(1)),
        job: 0x5eed,
        repr_id: None,
        stream_step: 40,
        unsolicited_credit: 3500,
        max_message: None,
    }
}

/// Longest message a scripted send carries.
pub const MAX_SEND_LEN: u16 = 600;

/// One step of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Starts a send of `len % (MAX_SEND_LEN + 1)` bytes to rank
    /// `to % SIZE` in mode `mode % 4` (standard, buffered, synchronous,
    /// ready), on context `context % 2` with tag `tag % 4`.
    Send {
        /// Destination (modulo the world size; may be this rank).
        to: u8,
        /// Send mode selector.
        mode: u8,
        /// Context selector.
        context: u8,
        /// Tag selector.
        tag: u8,
        /// Length selector.
        len: u16,
    },
    /// Posts a receive: `source` 255 is any source, `tag` 255 any tag;
    /// `limit` below 65535 bounds the data it holds.
    Recv {
        /// Source selector (255: any).
        source: u8,
        /// Tag selector (255: any).
        tag: u8,
        /// Context selector.
        context: u8,
        /// Capacity in bytes (65535: unbounded).
        limit: u16,
    },
    /// Cancels the `which`-th outstanding receive.
    Cancel {
        /// Which outstanding receive.
        which: u8,
    },
    /// Withdraws the `which`-th outstanding receive (its owner is gone).
    Withdraw {
        /// Which outstanding receive.
        which: u8,
    },
    /// A matched probe (`improbe`); a message it takes is held.
    Probe {
        /// Source selector (255: any).
        source: u8,
        /// Tag selector (255: any).
        tag: u8,
        /// Context selector.
        context: u8,
    },
    /// Receives the `which`-th held probed message (`mrecv`).
    Mrecv {
        /// Which held message.
        which: u8,
    },
    /// Puts the `which`-th held probed message back.
    Unmatch {
        /// Which held message.
        which: u8,
    },
    /// The program takes the `which`-th delivered message (giving its
    /// credit back), or, with `requeue`, abandons it to the queue; past
    /// the delivered messages, `which` picks a receive that failed as
    /// truncated, whose error the program takes (or, with `requeue`,
    /// which it drops unread).
    Consume {
        /// Which delivered message.
        which: u8,
        /// Abandon it instead of taking it.
        requeue: bool,
    },
    /// Bytes arrive on the stream from peer `from` (modulo the peers).
    Bytes {
        /// Peer selector.
        from: u8,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Bytes arrive on a second stream from peer `from`, which carries its
    /// rendezvous data apart from the rest, as the QUIC transport's bulk
    /// connection does: that data may overtake the frames sent before it.
    BulkBytes {
        /// Peer selector.
        from: u8,
        /// The bytes.
        data: Vec<u8>,
    },
    /// The transport takes up to `frames` frames.
    Transmit {
        /// How many frames at most.
        frames: u8,
    },
    /// The link to `dest` is full: the next frame for it is given back.
    Block {
        /// Destination selector.
        dest: u8,
    },
    /// The link to `dest` can take frames again.
    Writable {
        /// Destination selector.
        dest: u8,
    },
    /// `millis` milliseconds pass.
    Advance {
        /// Milliseconds.
        millis: u16,
    },
    /// The program ends (`failed`: with an error).
    Farewell {
        /// Whether the program failed.
        failed: bool,
    },
    /// The endpoint closes.
    Close,
    /// The transport reports peer `peer` broken.
    FailPeer {
        /// Peer selector.
        peer: u8,
    },
    /// A collective call is over on this rank: the messages of tags
    /// `tag % 4` and its neighbour (a block of 2) on context `context % 2`
    /// are dropped from now on ([`Engine::discard_call`]); `tag` 255 closes
    /// the context whole ([`Engine::close_context`]).
    Discard {
        /// Context selector.
        context: u8,
        /// Tag selector (255: the whole context).
        tag: u8,
    },
    /// Peer `from`, a rank of this process, hands over a message of
    /// `len % (MAX_SEND_LEN + 1)` bytes without frames, in mode `mode % 4`,
    /// on context `context % 2` with tag `tag % 4`
    /// ([`Engine::arrive_local`]; every other one first without an id, as
    /// the runtime does, and again with one if refused).
    Local {
        /// Peer selector.
        from: u8,
        /// Send mode selector.
        mode: u8,
        /// Context selector.
        context: u8,
        /// Tag selector.
        tag: u8,
        /// Length selector.
        len: u16,
    },
}

/// A script: the engine's representation and its steps, as bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    /// Whether the engine under test sends external32.
    pub external32: bool,
    /// The steps.
    pub ops: Vec<Op>,
}

/// Reads a byte string as arguments; missing bytes read as zero.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.bytes.split_first() else { return 0 };
        self.bytes = rest;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let (taken, rest) = self.bytes.split_at(n.min(self.bytes.len()));
        self.bytes = rest;
        taken
    }
}

impl Script {
    /// Parses any byte string into a script.
    pub fn parse(bytes: &[u8]) -> Script {
        let mut r = Reader { bytes };
        let external32 = r.u8() & 1 == 1;
        let mut ops = Vec::new();
        while !r.bytes.is_empty() {
            let op = match r.u8() % 19 {
                0 => Op::Send { to: r.u8(), mode: r.u8(), context: r.u8(), tag: r.u8(), len: r.u16() },
                1 => Op::Recv { source: r.u8(), tag: r.u8(), context: r.u8(), limit: r.u16() },
                2 => Op::Cancel { which: r.u8() },
                3 => Op::Withdraw { which: r.u8() },
                4 => Op::Probe { source: r.u8(), tag: r.u8(), context: r.u8() },
                5 => Op::Mrecv { which: r.u8() },
                6 => Op::Unmatch { which: r.u8() },
                7 => Op::Consume { which: r.u8(), requeue: r.u8() & 1 == 1 },
                8 => {
                    let from = r.u8();
                    let len = r.u16() as usize;
                    Op::Bytes { from, data: r.take(len).to_vec() }
                }
                9 => Op::Transmit { frames: r.u8() },
                10 => Op::Block { dest: r.u8() },
                11 => Op::Writable { dest: r.u8() },
                12 => Op::Advance { millis: r.u16() },
                13 => Op::Farewell { failed: r.u8() & 1 == 1 },
                14 => Op::Close,
                15 => Op::FailPeer { peer: r.u8() },
                17 => Op::Discard { context: r.u8(), tag: r.u8() },
                18 => Op::Local { from: r.u8(), mode: r.u8(), context: r.u8(), tag: r.u8(), len: r.u16() },
                _ => {
                    let from = r.u8();
                    let len = r.u16() as usize;
                    Op::BulkBytes { from, data: r.take(len).to_vec() }
                }
            };
            ops.push(op);
        }
        Script { external32, ops }
    }

    /// The script as bytes; [`parse`](Script::parse) gives it back (a
    /// [`Op::Bytes`] longer than 65535 bytes is cut in several).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![u8::from(self.external32)];
        for op in &self.ops {
            match op {
                Op::Send { to, mode, context, tag, len } => {
                    b.extend([0, *to, *mode, *context, *tag]);
                    b.extend(len.to_le_bytes());
                }
                Op::Recv { source, tag, context, limit } => {
                    b.extend([1, *source, *tag, *context]);
                    b.extend(limit.to_le_bytes());
                }
                Op::Cancel { which } => b.extend([2, *which]),
                Op::Withdraw { which } => b.extend([3, *which]),
                Op::Probe { source, tag, context } => b.extend([4, *source, *tag, *context]),
                Op::Mrecv { which } => b.extend([5, *which]),
                Op::Unmatch { which } => b.extend([6, *which]),
                Op::Consume { which, requeue } => b.extend([7, *which, u8::from(*requeue)]),
                Op::Bytes { from, data } | Op::BulkBytes { from, data } => {
                    let code = if matches!(op, Op::Bytes { .. }) { 8 } else { 16 };
                    for piece in data.chunks(usize::from(u16::MAX)) {
                        b.extend([code, *from]);
                        b.extend((piece.len() as u16).to_le_bytes());
                        b.extend_from_slice(piece);
                    }
                }
                Op::Transmit { frames } => b.extend([9, *frames]),
                Op::Block { dest } => b.extend([10, *dest]),
                Op::Writable { dest } => b.extend([11, *dest]),
                Op::Advance { millis } => {
                    b.push(12);
                    b.extend(millis.to_le_bytes());
                }
                Op::Farewell { failed } => b.extend([13, u8::from(*failed)]),
                Op::Close => b.push(14),
                Op::FailPeer { peer } => b.extend([15, *peer]),
                Op::Discard { context, tag } => b.extend([17, *context, *tag]),
                Op::Local { from, mode, context, tag, len } => {
                    b.extend([18, *from, *mode, *context, *tag]);
                    b.extend(len.to_le_bytes());
                }
            }
        }
        b
    }
}

/// The data a scripted send carries: its `n`-th message from `rank`,
/// recognisable by the receiver (see [`Node::received`]).
pub fn pattern(rank: u32, n: u64, len: usize) -> Bytes {
    (0..len).map(|i| (u64::from(rank) * 31 + n * 7 + i as u64) as u8).collect::<Vec<u8>>().into()
}

/// A message the program on this rank took: the signature hash names its
/// sender and number (`rank << 32 | n`).
#[derive(Debug, Clone)]
pub struct Received {
    /// The message's envelope.
    pub envelope: super::engine::Envelope,
    /// Its data.
    pub data: Bytes,
}

/// A frame a [`Node`] transmitted, encoded.
#[derive(Debug)]
pub struct Sent {
    /// Its destination.
    pub dest: u32,
    /// Whether it is rendezvous data, which a transport may carry on a
    /// stream of its own ([`Op::BulkBytes`]).
    pub bulk: bool,
    /// The frame.
    pub bytes: Bytes,
}

/// One rank: an engine, the streams from its peers, the requests its
/// program started, and a clock.
pub struct Node {
    engine: Engine,
    config: Config,
    streams: Vec<BytesMut>,
    /// The second stream from each peer ([`Op::BulkBytes`]).
    bulk_streams: Vec<BytesMut>,
    decoder: Decoder,
    /// Links that refuse the next frame.
    full: Vec<bool>,
    start: Instant,
    now: Instant,
    /// Outstanding sends, with their destinations.
    sends: HashMap<ReqId, u32>,
    /// Outstanding receives, in the order they started, with the source
    /// they name.
    recvs: Vec<(ReqId, Option<u32>)>,
    /// The most data bytes each outstanding receive holds (`None`:
    /// unbounded).
    limits: HashMap<ReqId, Option<u64>>,
    /// Every receive withdrawn, with the source it named and its limit: a
    /// transfer it matched may still run, bounded by that limit.
    withdrawn: Vec<(Option<u32>, Option<u64>)>,
    /// Data bytes of every message the program gave back, by sender.
    requeued: Vec<u64>,
    /// Outstanding any-source receives the engine reported orphaned.
    orphans: HashSet<ReqId>,
    /// What outstanding receives took of their messages' data as it
    /// arrived ([`Engine::take_arrived`]): every receive with an even id
    /// takes it so when told of it.
    streamed: HashMap<ReqId, Vec<u8>>,
    matched: Vec<Matched>,
    inbox: Vec<Delivered>,
    /// Receives that failed as truncated, whose error the program has not
    /// taken yet (their message waits in the engine).
    truncated: Vec<ReqId>,
    sent: u64,
    /// Messages peers handed over without frames so far.
    handed_over: u64,
    /// Sends handed over without frames that wait for their match, as
    /// (sender, send id).
    local_waiting: HashSet<(u32, ReqId)>,
    /// Peers that sent bytes: their frames may claim any signature, so
    /// the order of the messages they handed over is not checked (a
    /// runtime never mixes the two ways from one sender anyway).
    framed_from: Vec<bool>,
    /// Outstanding receives of messages a probe matched (`mrecv`).
    probed: HashSet<ReqId>,
    /// Messages the program took, in order.
    pub received: Vec<Received>,
    /// Failed completions, with the request.
    pub errors: Vec<(ReqId, crate::Error)>,
    /// Every step applied, when recording.
    pub recording: Option<Script>,
}

impl Node {
    /// Rank `rank` of a world of [`SIZE`], sending in `repr`.
    pub fn new(rank: u32, repr: Repr) -> Node {
        let config = config(repr);
        let start = Instant::now();
        let mut engine = Engine::new(rank, SIZE, config).expect("scripted ranks are in the world");
        engine.handle_timeout(start);
        let mut node = Node {
            engine,
            config,
            streams: (0..SIZE).map(|_| BytesMut::new()).collect(),
            bulk_streams: (0..SIZE).map(|_| BytesMut::new()).collect(),
            decoder: Decoder::new(config.max_payload()),
            full: vec![false; SIZE as usize],
            start,
            now: start,
            sends: HashMap::new(),
            recvs: Vec::new(),
            limits: HashMap::new(),
            withdrawn: Vec::new(),
            requeued: vec![0; SIZE as usize],
            orphans: HashSet::new(),
            streamed: HashMap::new(),
            matched: Vec::new(),
            inbox: Vec::new(),
            truncated: Vec::new(),
            sent: 0,
            handed_over: 0,
            local_waiting: HashSet::new(),
            framed_from: vec![false; SIZE as usize],
            probed: HashSet::new(),
            received: Vec::new(),
            errors: Vec::new(),
            recording: None,
        };
        node.drain_events();
        node
    }

    /// Runs `script` on rank 0, checking after every step; frames the
    /// engine transmits are dropped. The fuzz target.
    pub fn run(script: &[u8]) {
        let script = Script::parse(script);
        let mut node = Node::new(0, if script.external32 { Repr::External32 } else { Repr::Native });
        for op in &script.ops {
            node.apply(op);
            node.check();
        }
        node.engine.close();
        node.drain_events();
        node.check();
    }

    /// The engine under test.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn rank(&self) -> u32 {
        self.engine.rank()
    }

    /// The peer a selector names.
    fn peer(&self, selector: u8) -> u32 {
        let k = u32::from(selector) % (SIZE - 1);
        if k >= self.rank() {
            k + 1
        } else {
            k
        }
    }

    fn spec(source: u8, tag: u8, context: u8) -> MatchSpec {
        MatchSpec {
            context: u64::from(context % 2),
            source: (source != 255).then_some(u32::from(source) % SIZE),
            tag: (tag != 255).then_some(i32::from(tag % 4)),
        }
    }

    /// Applies one step; returns the frames transmitted.
    pub fn apply(&mut self, op: &Op) -> Vec<Sent> {
        if let Some(script) = &mut self.recording {
            script.ops.push(op.clone());
        }
        let mut out = Vec::new();
        match *op {
            Op::Send { to, mode, context, tag, len } => {
                let id = self.engine.next_id();
                let mode = [SendMode::Standard, SendMode::Buffered, SendMode::Synchronous, SendMode::Ready][usize::from(mode % 4)];
                let len = usize::from(len % (MAX_SEND_LEN + 1));
                let n = self.sent;
                self.sent += 1;
                let dest = u32::from(to) % SIZE;
                let msg = Outgoing {
                    dest,
                    context: u64::from(context % 2),
                    tag: i32::from(tag % 4),
                    signature: Some((u64::from(self.rank()) << 32 | n, len as u64)),
                    repr: self.config.repr,
                    desc_len: 0,
                    data: pattern(self.rank(), n, len),
                };
                self.sends.insert(id, dest);
                // Every other send is started as an endpoint starts sends:
                // straight to the transport when it can go so.
                if n.is_multiple_of(2) {
                    match self.engine.send_eager_now(id, mode, msg) {
                        Ok(frame) => {
                            assert_eq!(self.sends.remove(&id), Some(dest), "a send went at once to another rank");
                            self.hand_over(dest, frame, &mut out);
                        }
                        Err(msg) => self.engine.post_send(id, mode, msg),
                    }
                } else {
                    self.engine.post_send(id, mode, msg);
                }
            }
            Op::Recv { source, tag, context, limit } => {
                let id = self.engine.next_id();
                let spec = Self::spec(source, tag, context);
                self.recvs.push((id, spec.source));
                let limit = (limit != u16::MAX).then_some(u64::from(limit));
                self.limits.insert(id, limit);
                match limit {
                    None => self.engine.post_recv(id, spec),
                    Some(limit) => self.engine.post_recv_limited(id, spec, limit),
                }
            }
            Op::Cancel { which } => {
                if let Some(id) = pick(&self.recvs, which) {
                    if self.engine.cancel_recv(id) {
                        self.recvs.retain(|&(r, _)| r != id);
                        self.limits.remove(&id);
                    }
                }
            }
            Op::Withdraw { which } => {
                if let Some(id) = pick(&self.recvs, which) {
                    if let Some(head) = self.streamed.remove(&id) {
                        self.engine.give_back(id, BytesMut::from(&head[..]));
                    }
                    if self.engine.withdraw_recv(id) {
                        let at = self.recvs.iter().position(|&(r, _)| r == id).expect("picked from the list");
                        let (_, source) = self.recvs.remove(at);
                        self.withdrawn.push((source, self.limits.remove(&id).flatten()));
                    }
                }
            }
            Op::Probe { source, tag, context } => {
                if let Some(m) = self.engine.improbe(&Self::spec(source, tag, context)) {
                    self.check_order("a probe", m.envelope());
                    self.matched.push(m);
                }
            }
            Op::Mrecv { which } => {
                if !self.matched.is_empty() {
                    let m = self.matched.remove(usize::from(which) % self.matched.len());
                    let id = self.engine.next_id();
                    // Its message was matched by the probe, and checked then.
                    self.probed.insert(id);
                    self.recvs.push((id, Some(m.envelope().source)));
                    // The program sized it by the length the probe reported.
                    self.limits.insert(id, Some(m.envelope().len));
                    self.engine.mrecv(id, m);
                }
            }
            Op::Unmatch { which } => {
                if !self.matched.is_empty() {
                    let m = self.matched.remove(usize::from(which) % self.matched.len());
                    self.engine.unmatch(m);
                }
            }
            Op::Consume { which, requeue } => {
                let which = usize::from(which) % (self.inbox.len() + self.truncated.len()).max(1);
                if let Some(&id) = which.checked_sub(self.inbox.len()).and_then(|t| self.truncated.get(t)) {
                    self.truncated.retain(|&t| t != id);
                    if requeue {
                        self.engine.restore_truncated(id);
                    } else {
                        self.engine.consume_truncated(id);
                    }
                } else if !self.inbox.is_empty() {
                    let d = self.inbox.remove(which);
                    if requeue {
                        self.requeued[d.envelope.source as usize] += d.data.len() as u64;
                        self.engine.requeue(d);
                    } else {
                        self.engine.release_credit(d.envelope.source, d.credit);
                        self.received.push(Received { envelope: d.envelope, data: d.data });
                    }
                }
            }
            Op::Bytes { from, ref data } => {
                let from = self.peer(from);
                self.arrive(from, data, false);
            }
            Op::BulkBytes { from, ref data } => {
                let from = self.peer(from);
                self.arrive(from, data, true);
            }
            Op::Transmit { frames } => self.transmit(usize::from(frames), &mut out),
            Op::Block { dest } => {
                let dest = self.peer(dest);
                self.full[dest as usize] = true;
            }
            Op::Writable { dest } => {
                let dest = self.peer(dest);
                self.full[dest as usize] = false;
                self.engine.writable(dest);
            }
            Op::Advance { millis } => {
                self.now += Duration::from_millis(u64::from(millis));
                if self.engine.poll_timeout().is_some_and(|t| t <= self.now) {
                    self.engine.handle_timeout(self.now);
                }
            }
            Op::Farewell { failed } => self.engine.farewell(failed),
            Op::Close => self.engine.close(),
            Op::FailPeer { peer } => self.engine.fail_peer(self.peer(peer), crate::Error::process_failed(self.peer(peer), "its connection broke")),
            Op::Discard { context, tag: 255 } => self.engine.close_context(u64::from(context % 2)),
            Op::Discard { context, tag } => self.engine.discard_call(u64::from(context % 2), i32::from(tag % 4) & !1, 2),
            Op::Local { from, mode, context, tag, len } => {
                let from = self.peer(from);
                let mode = [SendMode::Standard, SendMode::Buffered, SendMode::Synchronous, SendMode::Ready][usize::from(mode % 4)];
                let len = usize::from(len % (MAX_SEND_LEN + 1));
                self.handed_over += 1;
                let n = self.handed_over;
                let msg = Outgoing {
                    dest: self.rank(),
                    context: u64::from(context % 2),
                    tag: i32::from(tag % 4),
                    signature: Some((u64::from(from) << 32 | 1 << 31 | n, len as u64)),
                    repr: self.config.repr,
                    desc_len: 0,
                    data: pattern(from, n, len),
                };
                // Send ids of their own, from 2^62, apart from the engine's.
                let send_id = 1 << 62 | n;
                let first = if n.is_multiple_of(2) { 0 } else { send_id };
                let mut arrival = self.engine.arrive_local(from, LocalMessage { msg, mode, send_id: first });
                if let LocalArrival::Refused(m) = arrival {
                    assert_eq!(first, 0, "a message handed over with an id was refused");
                    arrival = self.engine.arrive_local(from, LocalMessage { send_id, ..m });
                }
                match arrival {
                    LocalArrival::Done(_) => {}
                    LocalArrival::AwaitsMatch => {
                        self.local_waiting.insert((from, send_id));
                    }
                    LocalArrival::Refused(_) => panic!("a message handed over with an id was refused"),
                }
            }
        }
        self.drain_events();
        out
    }

    /// Feeds bytes from `from`'s stream through the decoder, as a stream
    /// transport does: a stream that does not decode fails its peer.
    fn arrive(&mut self, from: u32, data: &[u8], bulk: bool) {
        self.framed_from[from as usize] = true;
        let stream = if bulk { &mut self.bulk_streams[from as usize] } else { &mut self.streams[from as usize] };
        stream.extend_from_slice(data);
        loop {
            match self.decoder.decode(stream) {
                Ok(Some(frame)) => {
                    // A frame that breaks the protocol fails its peer
                    // inside the engine; later frames are dropped there.
                    let _ = self.engine.handle_frame(from, frame);
                }
                Ok(None) => break,
                Err(e) => {
                    self.engine.fail_peer(from, e);
                    stream.clear();
                    break;
                }
            }
        }
        assert!(
            stream.len() < HEADER_LEN + self.decoder.max_payload(),
            "{} undecoded bytes held: more than one frame at the cap",
            stream.len()
        );
    }

    /// Takes up to `budget` frames from the engine, as a transport would.
    fn transmit(&mut self, mut budget: usize, out: &mut Vec<Sent>) {
        while budget > 0 {
            let Some(dest) = self.engine.poll_writable() else { return };
            while budget > 0 {
                let Some(frame) = self.engine.poll_transmit(dest) else { break };
                if !self.hand_over(dest, frame, out) {
                    break;
                }
                budget -= 1;
            }
            if budget == 0 && !self.full[dest as usize] {
                // More may wait for `dest`: keep it scheduled.
                self.engine.writable(dest);
            }
        }
    }

    /// Takes `frame` for `dest` as a transport would, or refuses it (gives
    /// it back to the engine) while `dest`'s link is full: false then.
    fn hand_over(&mut self, dest: u32, frame: Frame, out: &mut Vec<Sent>) -> bool {
        if self.full[dest as usize] {
            self.engine.unsend(dest, frame);
            return false;
        }
        let bytes = frame.to_bytes();
        assert!(matches!(Frame::decode(bytes.clone()), Ok(f) if f == frame), "a transmitted frame does not decode to itself");
        out.push(Sent { dest, bulk: frame.header.kind == Kind::RndvData, bytes });
        true
    }

    /// The sender and number of a message a peer handed over (see
    /// [`Op::Local`]), from its signature, if it came so.
    fn handed_over_as(&self, envelope: &super::engine::Envelope) -> Option<(u32, u64)> {
        let (hash, _) = envelope.signature?;
        let from = (hash >> 32) as u32;
        let marked = hash & 1 << 31 != 0 && from == envelope.source;
        (marked && !self.framed_from.get(from as usize).is_none_or(|&framed| framed)).then_some((from, hash & 0x7fff_ffff))
    }

    /// Non-overtaking, for messages handed over: `taker` (a receive, as it
    /// completes, or a probe, as it matches: a receive completes as it
    /// matches such a message, but for one a probe matched before) took a
    /// message with `envelope` while no earlier message of its sender with
    /// the same context and tag (which whatever accepts the one accepts
    /// too) waits in the queue.
    fn check_order(&self, taker: &str, envelope: &super::engine::Envelope) {
        let Some((from, n)) = self.handed_over_as(envelope) else { return };
        for queued in self.engine.unexpected_envelopes() {
            if queued.context != envelope.context || queued.tag != envelope.tag {
                continue;
            }
            if let Some((_, earlier)) = self.handed_over_as(queued).filter(|&(f, m)| f == from && m < n) {
                panic!("{taker} took message {n} of rank {from} while its earlier message {earlier} with the same envelope waits");
            }
        }
    }

    fn drain_events(&mut self) {
        while let Some(event) = self.engine.poll_event() {
            match event {
                Event::LocalSendDone { rank, id, .. } => {
                    assert!(self.local_waiting.remove(&(rank, id)), "send {id} of rank {rank} answered twice, or never handed over to wait");
                }
                Event::SendDone { id, result } => {
                    assert!(self.sends.remove(&id).is_some(), "send {id} completed twice, or was never started");
                    if let Err(e) = result {
                        self.check_blame(id, &e);
                        self.errors.push((id, e));
                    }
                }
                Event::RecvDone { id, result } => {
                    let at = self.recvs.iter().position(|&(r, _)| r == id);
                    let at = at.unwrap_or_else(|| panic!("receive {id} completed twice, or was never started"));
                    self.recvs.remove(at);
                    self.limits.remove(&id);
                    self.orphans.remove(&id);
                    let streamed = self.streamed.remove(&id);
                    let probed = self.probed.remove(&id);
                    match result {
                        Ok(mut d) => {
                            if let Some(mut head) = streamed {
                                head.extend_from_slice(&d.data);
                                d.data = head.into();
                            }
                            assert_eq!(d.data.len() as u64, d.envelope.len, "receive {id} got a message with part of its data missing");
                            assert_eq!(d.type_desc().len(), d.envelope.desc_len as usize, "receive {id} got a message with part of its description missing");
                            if !probed {
                                self.check_order(&format!("receive {id}"), &d.envelope);
                            }
                            self.inbox.push(d);
                        }
                        Err(e) => {
                            self.check_blame(id, &e);
                            if matches!(e.kind(), crate::ErrorKind::Truncate { .. }) {
                                self.truncated.push(id);
                            }
                            self.errors.push((id, e));
                        }
                    }
                }
                Event::Orphaned { id } => {
                    assert!(self.recvs.iter().any(|&(r, _)| r == id), "orphaned receive {id} is not outstanding");
                    self.orphans.insert(id);
                }
                Event::DataArrived { id } => {
                    assert!(self.recvs.iter().any(|&(r, _)| r == id), "data arrived for receive {id}, which is not outstanding");
                    if let Some(arrived) = self.engine.take_arrived(id, |_| id.is_multiple_of(2)) {
                        let head = self.streamed.entry(id).or_default();
                        assert_eq!(arrived.offset, head.len() as u64, "receive {id} took data out of order");
                        for chunk in arrived.chunks {
                            head.extend_from_slice(&chunk);
                        }
                    }
                }
                Event::Connected { .. } | Event::PeerFailed { .. } => {}
            }
        }
    }

    /// A request fails because of rank `r` only once `r` has failed or
    /// finished (or the engine closed); this rank itself, once it has said
    /// farewell.
    fn check_blame(&self, id: ReqId, e: &crate::Error) {
        if let crate::ErrorKind::ProcessFailed { rank, reason, .. } = e.kind() {
            let gone = if *rank == self.rank() as usize { self.engine.is_finished() } else { self.engine.dead(*rank as u32, true).is_some() };
            assert!(gone, "request {id} failed for rank {rank}, which is alive: {reason}");
        }
    }

    /// Asserts the invariants listed in the [module docs](self).
    pub fn check(&self) {
        let e = &self.engine;
        for source in 0..SIZE {
            assert!(
                e.credit_in_use(source) <= self.config.eager_credit,
                "rank {source} holds {} bytes of credit, above {}",
                e.credit_in_use(source),
                self.config.eager_credit
            );
            if e.is_failed(source) {
                assert!(!e.anything_waits_on(source), "a receive waits on failed rank {source}");
            }
            let (held, credit) = e.unsolicited_bytes(source);
            assert!(
                held <= credit && credit <= self.config.unsolicited_credit,
                "{held} bytes of rank {source}'s unsolicited data held on {credit} bytes of credit, granted {}",
                self.config.unsolicited_credit
            );
            // At its goodbye a rank answers every request it counted as
            // received, each of which held one of the slots the sender
            // was granted.
            let dropping = e.transfers_to_drop(source);
            let most = match e.is_finished() {
                true => self.config.rndv_slots.max(1) + e.rendezvous_slots_granted(source),
                false => self.config.rndv_slots.max(1),
            };
            assert!(dropping <= most, "{dropping} transfers of rank {source}'s kept only to drop their data, above {most}");
            if let Some(budget) = self.rendezvous_budget(source) {
                let held = e.rendezvous_bytes(source);
                assert!(held <= budget, "{held} bytes of rank {source}'s rendezvous data held, above the {budget} its receives hold");
            }
        }
        for source in 0..SIZE {
            let local = e.local_credit_in_use(source);
            let granted = self.config.eager_credit + self.config.unsolicited_credit;
            assert!(local <= granted, "rank {source}'s messages handed over hold {local} bytes of credit, above {granted}");
        }
        let cap = u64::from(SIZE) * self.config.eager_credit;
        let eager = e.unexpected_eager_bytes();
        assert!(eager <= cap, "{eager} bytes of unexpected eager data queued, above {cap}");
        if e.is_closed() {
            // But for those whose messages the program holds, taken by a
            // matched probe (answered when it receives or gives them back).
            let held: HashSet<(u32, ReqId)> = self
                .matched
                .iter()
                .filter_map(|m| m.envelope().signature.filter(|(hash, _)| hash & 1 << 31 != 0).map(|(hash, _)| (m.envelope().source, 1 << 62 | (hash & 0x7fff_ffff))))
                .collect();
            let waiting: Vec<_> = self.local_waiting.difference(&held).collect();
            assert!(waiting.is_empty(), "sends handed over {waiting:?} still wait on a closed engine");
            assert!(self.sends.is_empty(), "sends {:?} still wait on a closed engine", self.sends.keys());
            assert!(self.recvs.is_empty(), "receives {:?} still wait on a closed engine", self.recvs);
        }
    }

    /// The most rendezvous data (type descriptions left out) the engine
    /// may hold from `source`, from what the program asked for alone (see
    /// the [module docs](self)); `None` while an unbounded receive could
    /// match its messages.
    fn rendezvous_budget(&self, source: u32) -> Option<u64> {
        let names = |named: Option<u32>| named.is_none_or(|s| s == source);
        let outstanding = self.recvs.iter().filter(|&&(_, named)| names(named)).map(|(id, _)| self.limits.get(id).copied().flatten());
        let withdrawn = self.withdrawn.iter().filter(|&&(named, _)| names(named)).map(|&(_, limit)| limit);
        outstanding.chain(withdrawn).try_fold(self.requeued[source as usize], |total, limit| total.checked_add(limit?))
    }

    /// Requests still outstanding that do not wait on this rank alone: a
    /// send to another rank, a receive naming another rank, an any-source
    /// receive the engine has not reported orphaned (a runtime fails
    /// those). Once every rank has said goodbye and all bytes have
    /// arrived, none may be left.
    pub fn waiting_on_others(&self) -> Vec<ReqId> {
        let me = self.rank();
        let sends = self.sends.iter().filter(|&(_, &dest)| dest != me).map(|(&id, _)| id);
        let recvs = self.recvs.iter().filter(|&&(id, source)| match source {
            Some(s) => s != me,
            None => !(self.orphans.contains(&id) && self.engine.orphaned(id)),
        });
        let mut ids: Vec<ReqId> = sends.chain(recvs.map(|&(id, _)| id)).collect();
        ids.sort_unstable();
        ids
    }

    /// Messages delivered and not yet taken, and probed messages held.
    pub fn held(&self) -> (usize, usize) {
        (self.inbox.len(), self.matched.len())
    }

    /// Time since the node started.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }
}

/// Decodes `input[1..]` as a frame stream twice, whole and cut in pieces
/// whose sizes `input[0]` seeds, and asserts that both give the same
/// frames and the same outcome, that every frame re-encodes to exactly the
/// bytes it came from, and that the decoder never holds more than one
/// frame at its cap. The frame decoder's fuzz target.
pub fn check_decoder(input: &[u8]) {
    let Some((&seed, stream)) = input.split_first() else { return };
    let decoder = Decoder::new(4096);
    let whole = decode_in_pieces(decoder, stream, &mut |_| stream.len());
    let mut state = u64::from(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let split = decode_in_pieces(decoder, stream, &mut |_| 1 + (xorshift(&mut state) % 97) as usize);
    assert_eq!(whole, split, "cutting the stream changed what it decodes to");
    let mut at = 0;
    for frame in &whole.0 {
        let bytes = frame.to_bytes();
        assert_eq!(&stream[at..at + bytes.len()], &bytes[..], "a frame does not re-encode to its bytes");
        at += bytes.len();
    }
    check_chunk_decoder(decoder.max_payload(), stream, &whole, &mut state);
}

/// The [`ChunkDecoder`] on the same stream, in other pieces: it never
/// panics, and gives what the [`Decoder`] gives, rendezvous data as pieces whose offsets follow on. Where the
/// decoder took the stream whole, so does it, unless some rendezvous data's
/// offset overflows (which only it checks).
fn check_chunk_decoder(max_payload: usize, stream: &[u8], whole: &(Vec<Frame>, Result<usize, ()>), state: &mut u64) {
    let mut decoder = ChunkDecoder::new(max_payload);
    let mut pieces = Vec::new();
    let mut at = 0;
    let mut result = Ok(());
    while at < stream.len() && result.is_ok() {
        let n = (1 + (xorshift(state) % 131) as usize).min(stream.len() - at);
        result = decoder.push(Bytes::copy_from_slice(&stream[at..at + n]), &mut |f| {
            pieces.push(f);
            Ok(())
        });
        at += n;
    }
    let (frames, outcome) = whole;
    if outcome.is_err() {
        return;
    }
    if result.is_err() {
        // Only an offset that overflows, in a whole frame or the one begun
        // after them, is refused by the chunk decoder alone.
        let overflows = |h: &Header, len: u64| h.kind == Kind::RndvData && len > 0 && h.seq.checked_add(len).is_none();
        let rest = &stream[frames.iter().map(|f| HEADER_LEN + f.payload.len()).sum::<usize>()..];
        let begun = Header::decode(rest).is_ok_and(|(h, len)| overflows(&h, len));
        assert!(begun || frames.iter().any(|f| overflows(&f.header, f.payload.len() as u64)), "the chunk decoder refused a stream the decoder took");
        return;
    }
    let mut pieces = pieces.into_iter().peekable();
    for frame in frames {
        if frame.header.kind == Kind::RndvData && !frame.payload.is_empty() {
            let mut data = Vec::new();
            while data.len() < frame.payload.len() {
                let piece = pieces.next().expect("a piece of the rendezvous data");
                let expected = Header { seq: frame.header.seq + data.len() as u64, ..frame.header };
                assert_eq!(piece.header, expected, "a piece's header");
                data.extend_from_slice(&piece.payload);
            }
            assert_eq!(&data[..], &frame.payload[..], "the pieces make up the data");
        } else {
            assert_eq!(pieces.next().as_ref(), Some(frame), "the chunk decoder gave another frame");
        }
    }
    // What is left: pieces of rendezvous data whose frame has not ended.
    for piece in pieces {
        assert_eq!(piece.header.kind, Kind::RndvData, "a frame beyond what the decoder took whole");
    }
}

/// The next number of a xorshift generator (piece sizes to cut a stream
/// into).
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The frames of `stream` fed to `decoder` in pieces `piece` sizes, and
/// whether it ended in an error (else the undecoded bytes left).
fn decode_in_pieces(decoder: Decoder, stream: &[u8], piece: &mut dyn FnMut(usize) -> usize) -> (Vec<Frame>, Result<usize, ()>) {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        let n = piece(at).min(stream.len() - at);
        buf.extend_from_slice(&stream[at..at + n]);
        at += n;
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    assert!(frame.payload.len() <= decoder.max_payload(), "a payload above the cap was accepted");
                    frames.push(frame);
                }
                Ok(None) => break,
                Err(_) => return (frames, Err(())),
            }
        }
        assert!(buf.len() < HEADER_LEN + decoder.max_payload(), "{} undecoded bytes held", buf.len());
    }
    (frames, Ok(buf.len()))
}

fn pick(recvs: &[(ReqId, Option<u32>)], which: u8) -> Option<ReqId> {
    (!recvs.is_empty()).then(|| recvs[usize::from(which) % recvs.len()].0)
}

#[cfg(test)]
mod tests;
