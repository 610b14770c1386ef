//! Messages waiting to be received: the unexpected queue's entries and
//! rendezvous transfers whose data is arriving.

use super::*;
use crate::pack::spare;
use crate::pack::copy::{bytes_of, extend_bytes};

#[derive(Debug)]
pub(super) struct Unexpected {
    pub(super) envelope: Envelope,
    pub(super) body: Body,
}

#[derive(Debug)]
pub(super) enum Body {
    /// Data, holding `credit` bytes of the sender's eager credit.
    Data { data: Bytes, credit: u64 },
    /// A rendezvous request from sender request `send_id`.
    Rts { send_id: u64 },
    /// A rendezvous message whose data is coming under transfer
    /// `transfer` with no receive to take it: its receive was withdrawn
    /// after its CTS went out, or it came unsolicited and nothing has
    /// matched it yet. The data belongs to whichever receive matches this
    /// entry next. It keeps the message's place.
    InFlight { transfer: ReqId },
    /// A message of a rank of this process, larger than eager data or
    /// waiting for its match, its data in hand (see [`local`](super::local)):
    /// `send_id` is its sender's send, which the receive that takes the
    /// message completes (0: done already), and `credit` the local credit
    /// it holds until a receive takes it (0: none). As a rendezvous
    /// message, it is held to the limit of the receive that matches it.
    Local { data: Bytes, send_id: ReqId, credit: u64 },
}

/// A rendezvous transfer: CTS sent (or the data coming unsolicited), data
/// awaited.
pub(super) struct Transfer {
    pub(super) envelope: Envelope,
    /// The receive the data goes to, or `None` while the message waits in
    /// the unexpected queue (or in a matched probe's hands) as
    /// [`Body::InFlight`].
    pub(super) owner: Option<ReqId>,
    /// Chunks received so far: kept, counted and dropped (for a message
    /// longer than a receive that matched it holds), or, past those the
    /// owning receive has taken as they arrived, queued for it.
    pub(super) received: Received,
    /// Whether every byte has arrived.
    pub(super) complete: bool,
    /// Bytes the data's buffer may take at once, before they arrive: the
    /// size of the receive that owns the transfer, which holds that much
    /// anyway (0 for a receive of any length: the buffer then grows with
    /// what arrives), or the length of an unsolicited message, which its
    /// credit covers.
    pub(super) reserve: u64,
    /// Whether the owner was told ([`Event::DataArrived`]) of data it has
    /// not taken yet: it is told once per [`Config::stream_step`] taken,
    /// and a receive that does not take its data as it arrives only once.
    pub(super) nudged: bool,
    /// For a message whose data came unsolicited (see
    /// [`Config::unsolicited_credit`]): the sender's send id, which its
    /// data frames carry instead of a receive id.
    pub(super) send_id: Option<u64>,
    /// Unsolicited credit the message holds until a receive matches it.
    pub(super) credit: u64,
    /// The message was received by a receive too small for it (which
    /// failed as truncated): its data is counted and dropped, and the
    /// transfer ends with its last byte.
    pub(super) dropped: bool,
    /// The transfer was asked for only to drop its data, and counts among
    /// its sender's [`Peer::drops_in_flight`] until its last byte.
    pub(super) drop_in_flight: bool,
}

/// Unsolicited data that arrived before its message's RTS.
pub(super) struct Early {
    /// The message's data length (description included), from its frames.
    pub(super) total: u64,
    pub(super) received: Received,
    /// Unsolicited credit it holds.
    pub(super) credit: u64,
}

impl Transfer {
    /// A receive that holds at most `limit` bytes of data owns the
    /// transfer: if the message is longer, its data is dropped from now on
    /// (and what was kept so far too). A receive of a buffer that size
    /// holds that much anyway, so the data may take it at once; the limit
    /// of every receive without one (`cap`, [`Config::max_message`]) is
    /// no such promise: the data's buffer still grows with what arrives.
    pub(super) fn bound(&mut self, limit: Option<u64>, cap: Option<u64>) {
        match limit {
            Some(limit) if self.envelope.len > limit => self.received.discard(limit),
            Some(limit) if Some(limit) != cap => self.reserve = limit,
            _ => {}
        }
    }

    /// A transfer of `envelope`'s data to receive `owner`, nothing in yet.
    pub(super) fn new(envelope: Envelope, owner: ReqId) -> Transfer {
        Transfer {
            envelope,
            owner: Some(owner),
            received: Received::Nothing,
            complete: false,
            reserve: 0,
            nudged: false,
            send_id: None,
            credit: 0,
            dropped: false,
            drop_in_flight: false,
        }
    }

    /// A transfer of unsolicited data for `envelope`'s message from send
    /// `send_id`, no receive yet, with what arrived before the RTS.
    pub(super) fn unsolicited(envelope: Envelope, send_id: u64, early: Early) -> Transfer {
        let complete = early.received.len() == envelope.wire_len();
        Transfer {
            envelope,
            owner: None,
            received: early.received,
            complete,
            // The credit it holds covers the whole message.
            reserve: envelope.wire_len(),
            nudged: false,
            send_id: Some(send_id),
            credit: early.credit,
            dropped: false,
            drop_in_flight: false,
        }
    }

    /// Adds the next chunk of the data, gathering into a buffer of
    /// `pool`'s when one is needed. Returns the receive to tell of data
    /// it may take now ([`Engine::take_arrived`]), if one is due a word.
    pub(super) fn push(&mut self, chunk: Bytes, pool: &mut BufferPool, step: u64) -> Option<ReqId> {
        let total = self.envelope.wire_len();
        self.received.push(chunk, total, self.reserve, self.owner.is_none(), pool);
        let due = match &self.received {
            Received::Streaming { queued, .. } => *queued >= step,
            Received::One(_) | Received::Gathered(_) => self.received.len() >= step && self.envelope.desc_len == 0,
            Received::Nothing | Received::Discarded { .. } => false,
        };
        if !due || self.nudged || self.received.len() == total || total < step.saturating_mul(STREAM_MIN_STEPS) {
            return None;
        }
        self.nudged = true;
        self.owner
    }

    /// Hands the data arrived so far to the owning receive, to put in its
    /// buffer itself, if it streams (or, the first time, if `accept` says
    /// it will): see [`Engine::take_arrived`].
    pub(super) fn take_arrived(&mut self, accept: impl FnOnce(&Envelope) -> bool) -> Option<Arrived> {
        let arrived = match &mut self.received {
            Received::Streaming { taken, chunks, tail, queued } => {
                let offset = *taken;
                *taken += std::mem::take(queued);
                close_tail(chunks, tail);
                Arrived { offset, chunks: std::mem::take(chunks) }
            }
            Received::Discarded { .. } => return None,
            _ if self.envelope.desc_len != 0 || !accept(&self.envelope) => return None,
            received => {
                let taken = received.len();
                let streaming = Received::Streaming { taken, chunks: VecDeque::new(), tail: BytesMut::new(), queued: 0 };
                let chunks = match std::mem::replace(received, streaming) {
                    Received::One(b) => VecDeque::from([b]),
                    Received::Gathered(b) => VecDeque::from([b.freeze()]),
                    _ => VecDeque::new(),
                };
                Arrived { offset: 0, chunks }
            }
        };
        self.nudged = false;
        Some(arrived)
    }

    /// The owning receive, withdrawn, gives back `head`: the data it took
    /// (the first bytes of the message), so that the transfer holds all of
    /// it again for whichever receive takes the message next.
    pub(super) fn give_back(&mut self, mut head: BytesMut) {
        let Received::Streaming { taken, chunks, tail, queued } = &mut self.received else { return };
        if head.len() as u64 != *taken {
            // Not what it took: the message can no longer be delivered
            // whole, and fails whoever takes it as truncated.
            tracing::error!(gave = head.len(), took = *taken, "a receive gave back other data than it took");
            self.received.discard(0);
            return;
        }
        head.reserve(*queued as usize);
        for chunk in chunks.drain(..) {
            extend_bytes(&mut head, &chunk);
        }
        extend_bytes(&mut head, tail);
        self.received = Received::Gathered(head);
        self.nudged = false;
    }

    /// What the receive that owns the complete transfer gets: the message
    /// (only the part it did not take, if it streamed), or
    /// [`ErrorKind::Truncate`] if its data was dropped (never a message with
    /// part of its data missing).
    pub(super) fn into_result(self, pool: &mut BufferPool) -> Result<Delivered> {
        match self.received.into_kept(pool) {
            Ok(data) => Ok(Delivered::new(self.envelope, data, 0)),
            Err(available) => Err(ErrorKind::Truncate { needed: self.envelope.len, available, message: None }.into()),
        }
    }
}

/// Messages shorter than this many [`Config::stream_step`]s are not taken
/// as they arrive: waking the receive's task a few times during a short
/// transfer cost more than the copy it saved (a megabyte over QUIC in one
/// process: 5-8 % slower at a 256 KiB step).
const STREAM_MIN_STEPS: u64 = 8;

/// Pieces of a streaming transfer's data below this size are copied
/// rather than kept (see [`Received::Streaming`]). A kept piece holds the
/// buffer its transport received it in: over QUIC a datagram's, at most
/// 6.5 KiB with mpx's settings, so from this size up a piece holds at most
/// a few times its own bytes. QUIC hands data over a packet's worth at a
/// time (about 1.2-6.5 KiB), so legitimate pieces are rarely smaller.
const SMALL_PIECE: usize = 1024;

/// Small pieces are gathered up to this many bytes before they join the
/// chunks.
const TAIL_MAX: usize = 64 << 10;

/// Moves the small pieces gathered in `tail` to the end of `chunks`.
fn close_tail(chunks: &mut VecDeque<Bytes>, tail: &mut BytesMut) {
    if !tail.is_empty() {
        chunks.push_back(tail.split().freeze());
    }
}

/// The data of a rendezvous transfer as its chunks arrive.
pub(super) enum Received {
    Nothing,
    /// `counted` bytes counted and dropped: the message is longer than
    /// `limit`, the most a receive that matched it holds. It is never
    /// delivered: whichever receive owns it when its last byte arrives
    /// fails with [`ErrorKind::Truncate`].
    Discarded { counted: u64, limit: u64 },
    /// One chunk, kept without a copy if it is large (the whole message,
    /// once complete).
    One(Bytes),
    /// Several chunks, gathered.
    Gathered(BytesMut),
    /// Data the owning receive takes as it arrives
    /// ([`Engine::take_arrived`]): it has taken the first `taken` bytes;
    /// `chunks`, then `tail`, `queued` bytes in all, came after. Pieces
    /// below [`SMALL_PIECE`] are copied into `tail` rather than kept: a
    /// piece kept as it came keeps the whole buffer its transport
    /// received it in alive (a datagram), and a peer sending a byte per
    /// datagram would make its data hold a thousand times its size.
    Streaming { taken: u64, chunks: VecDeque<Bytes>, tail: BytesMut, queued: u64 },
}

/// Data of a rendezvous message that its receive takes as it arrives
/// ([`Engine::take_arrived`]).
#[derive(Debug)]
pub struct Arrived {
    /// Where in the message's data the chunks start.
    pub offset: u64,
    /// The data, in order.
    pub chunks: VecDeque<Bytes>,
}

impl Received {
    pub(super) fn len(&self) -> u64 {
        match self {
            Received::Nothing => 0,
            Received::Discarded { counted, .. } => *counted,
            Received::One(b) => b.len() as u64,
            Received::Gathered(b) => b.len() as u64,
            Received::Streaming { taken, queued, .. } => taken + queued,
        }
    }

    /// Bytes kept in memory (counted bytes are not, nor those a receive
    /// took as they arrived).
    pub(super) fn kept(&self) -> u64 {
        match self {
            Received::Discarded { .. } => 0,
            Received::Streaming { queued, .. } => *queued,
            other => other.len(),
        }
    }

    /// Drops what was kept and counts the rest without keeping it, for a
    /// receive that holds at most `limit` bytes.
    pub(super) fn discard(&mut self, limit: u64) {
        let limit = match self {
            Received::Discarded { limit: earlier, .. } => limit.min(*earlier),
            _ => limit,
        };
        *self = Received::Discarded { counted: self.len(), limit };
    }

    /// Adds the next chunk of a `total`-byte message, reserving up to
    /// `reserve` bytes at once (see [`Transfer::reserve`]). `unclaimed`:
    /// no receive owns the message yet, so what is kept may wait long.
    pub(super) fn push(&mut self, chunk: Bytes, total: u64, reserve: u64, unclaimed: bool, pool: &mut BufferPool) {
        *self = match std::mem::replace(self, Received::Nothing) {
            Received::Discarded { counted, limit } => Received::Discarded { counted: counted + chunk.len() as u64, limit },
            // A first piece is copied if small or unclaimed: kept as it
            // came, it would keep the whole buffer its transport received
            // it in alive, beyond the credit it was charged.
            Received::Nothing if unclaimed => Received::One(bytes_of(&chunk)),
            Received::Nothing => Received::One(crate::proto::wire::kept(&chunk, || chunk.clone())),
            Received::One(first) => {
                // Room in proportion to what has really arrived (the length
                // is the sender's claim): a few times the first chunks, up
                // to the whole message and a cap; the buffer then doubles
                // as more arrives.
                let arrived = (first.len() + chunk.len()) as u64;
                let guess = total.min(GATHER_RESERVE_CAP).min(arrived.saturating_mul(8));
                let room = total.min(reserve).max(guess).max(arrived) as usize;
                let mut all = pool.take(room);
                extend_bytes(&mut all, &first);
                extend_bytes(&mut all, &chunk);
                Received::Gathered(all)
            }
            Received::Gathered(mut all) => {
                extend_bytes(&mut all, &chunk);
                Received::Gathered(all)
            }
            Received::Streaming { taken, mut chunks, mut tail, queued } => {
                let queued = queued + chunk.len() as u64;
                if chunk.len() < SMALL_PIECE {
                    extend_bytes(&mut tail, &chunk);
                    if tail.len() >= TAIL_MAX {
                        close_tail(&mut chunks, &mut tail);
                    }
                } else {
                    close_tail(&mut chunks, &mut tail);
                    chunks.push_back(chunk);
                }
                Received::Streaming { taken, chunks, tail, queued }
            }
        }
    }

    /// The data kept (a streaming receive's: what it has not taken), or
    /// the limit of the receive for which it was discarded.
    pub(super) fn into_kept(self, pool: &mut BufferPool) -> std::result::Result<Bytes, u64> {
        match self {
            Received::Nothing => Ok(Bytes::new()),
            Received::Discarded { limit, .. } => Err(limit),
            Received::One(b) => Ok(b),
            Received::Gathered(b) => Ok(b.freeze()),
            Received::Streaming { mut chunks, mut tail, queued, .. } if chunks.len() + usize::from(!tail.is_empty()) <= 1 => {
                close_tail(&mut chunks, &mut tail);
                debug_assert_eq!(chunks.front().map_or(0, |c| c.len() as u64), queued);
                Ok(chunks.pop_front().unwrap_or_default())
            }
            Received::Streaming { chunks, tail, queued, .. } => {
                let mut rest = pool.take(queued as usize);
                for chunk in chunks {
                    extend_bytes(&mut rest, &chunk);
                }
                extend_bytes(&mut rest, &tail);
                Ok(rest.freeze())
            }
        }
    }
}

/// Gather buffers of large messages, kept once their receives have
/// consumed them ([`Engine::recycle`]) for the next large transfer: a fresh
/// buffer costs a page fault for every 4 KiB it fills, a quarter of the
/// time a transfer takes at a gigabyte a second. At most
/// [`BufferPool::KEEP`] buffers are kept, the largest offered.
#[derive(Debug)]
pub(super) struct BufferPool {
    kept: spare::Kept<BytesMut>,
}

impl Default for BufferPool {
    fn default() -> Self {
        BufferPool { kept: spare::Kept::new(Self::KEEP) }
    }
}

impl BufferPool {
    /// Buffers kept at most.
    pub(super) const KEEP: usize = 2;
    /// Smaller buffers are not worth keeping.
    pub(super) const MIN: usize = Engine::RECYCLE_MIN;

    /// An empty buffer with room for `room` bytes: a kept one if one is
    /// large enough.
    pub(super) fn take(&mut self, room: usize) -> BytesMut {
        let kept = if room >= Self::MIN { self.kept.take(room) } else { None };
        kept.unwrap_or_else(|| BytesMut::with_capacity(room))
    }

    /// Keeps `data`'s buffer if it is large, nothing else holds it, and it
    /// is larger than a kept one; a large buffer this pool does not keep
    /// goes to the thread's spare buffers for packing ([`spare`]).
    pub(super) fn give(&mut self, data: Bytes) {
        if data.len() < Self::MIN {
            return;
        }
        let Ok(buffer) = data.try_into_mut() else { return };
        if let Some(not_kept) = self.kept.offer(buffer) {
            spare::give(Vec::from(not_kept));
        }
    }
}

impl super::Queued for Unexpected {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small first piece is kept as a copy, not as a slice of the buffer
    /// it came in (which it would keep alive); a large one as it came, if a
    /// receive owns the message (it takes the data soon), copied too if
    /// none does (the data may wait long).
    #[test]
    fn a_small_or_unclaimed_first_piece_is_copied_out_of_its_buffer() {
        let mut pool = BufferPool::default();
        let datagram = Bytes::from(vec![7u8; 6550]);
        let within = |b: &Bytes| datagram.as_ptr_range().contains(&b.as_ptr());
        let mut small = Received::Nothing;
        small.push(datagram.slice(100..101), 1, 1, false, &mut pool);
        let Received::One(kept) = &small else { panic!("one piece") };
        assert!(!within(kept) && kept[..] == [7]);
        let large = Bytes::from(vec![8u8; 64 << 10]);
        let mut big = Received::Nothing;
        big.push(large.slice(..32 << 10), 64 << 10, 64 << 10, false, &mut pool);
        let Received::One(kept) = &big else { panic!("one piece") };
        assert_eq!(kept.as_ptr(), large.as_ptr(), "a large piece is kept as it came");
        let mut unclaimed = Received::Nothing;
        unclaimed.push(large.slice(..32 << 10), 64 << 10, 64 << 10, true, &mut pool);
        let Received::One(kept) = &unclaimed else { panic!("one piece") };
        assert!(!large.as_ptr_range().contains(&kept.as_ptr()) && kept.len() == 32 << 10, "an unclaimed piece is copied");
    }
}
