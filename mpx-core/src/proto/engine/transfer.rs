//! Messages waiting to be received: the unexpected queue's entries and
//! rendezvous transfers whose data is arriving.

use super::*;
use crate::pack::spare;

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
    /// A rendezvous message whose receive was withdrawn after its CTS went
    /// out: its data, due under transfer `transfer`, belongs to whichever
    /// receive matches this entry next. It keeps the message's place.
    InFlight { transfer: ReqId },
}

/// A rendezvous transfer: CTS sent, data awaited.
pub(super) struct Transfer {
    pub(super) envelope: Envelope,
    /// The receive the data goes to, or `None` while the message waits in
    /// the unexpected queue (or in a matched probe's hands) as
    /// [`Body::InFlight`].
    pub(super) owner: Option<ReqId>,
    /// Chunks received so far: kept, or (for a message longer than a
    /// receive that matched it holds) counted and dropped.
    pub(super) received: Received,
    /// Whether every byte has arrived.
    pub(super) complete: bool,
    /// Bytes the data's buffer may take at once, before they arrive: the
    /// size of the receive that owns the transfer, which holds that much
    /// anyway (0 for a receive of any length: the buffer then grows with
    /// what arrives).
    pub(super) reserve: u64,
}

impl Transfer {
    /// A receive that holds at most `limit` bytes of data owns the
    /// transfer: if the message is longer, its data is dropped from now on
    /// (and what was kept so far too).
    pub(super) fn bound(&mut self, limit: Option<u64>) {
        match limit {
            Some(limit) if self.envelope.len > limit => self.received.discard(limit),
            Some(limit) => self.reserve = limit,
            None => {}
        }
    }

    /// Adds the next chunk of the data, gathering into a buffer of
    /// `pool`'s when one is needed.
    pub(super) fn push(&mut self, chunk: Bytes, pool: &mut BufferPool) {
        let total = self.envelope.wire_len();
        self.received.push(chunk, total, self.reserve, pool);
    }

    /// What the receive that owns the complete transfer gets: the message,
    /// or [`Error::Truncate`] if its data was dropped (never a message
    /// with part of its data missing).
    pub(super) fn into_result(self) -> Result<Delivered> {
        match self.received.into_kept() {
            Ok(data) => Ok(Delivered::new(self.envelope, data, 0)),
            Err(available) => Err(Error::Truncate { needed: self.envelope.len, available }),
        }
    }
}

/// The data of a rendezvous transfer as its chunks arrive.
pub(super) enum Received {
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
    pub(super) fn len(&self) -> u64 {
        match self {
            Received::Nothing => 0,
            Received::Discarded { counted, .. } => *counted,
            Received::One(b) => b.len() as u64,
            Received::Gathered(b) => b.len() as u64,
        }
    }

    /// Bytes kept in memory (counted bytes are not).
    pub(super) fn kept(&self) -> u64 {
        match self {
            Received::Discarded { .. } => 0,
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
    /// `reserve` bytes at once (see [`Transfer::reserve`]).
    fn push(&mut self, chunk: Bytes, total: u64, reserve: u64, pool: &mut BufferPool) {
        *self = match std::mem::replace(self, Received::Nothing) {
            Received::Discarded { counted, limit } => Received::Discarded { counted: counted + chunk.len() as u64, limit },
            Received::Nothing => Received::One(chunk),
            Received::One(first) => {
                // Room in proportion to what has really arrived (the length
                // is the sender's claim): a few times the first chunks, up
                // to the whole message and a cap; the buffer then doubles
                // as more arrives.
                let arrived = (first.len() + chunk.len()) as u64;
                let guess = total.min(GATHER_RESERVE_CAP).min(arrived.saturating_mul(8));
                let room = total.min(reserve).max(guess).max(arrived) as usize;
                let mut all = pool.take(room);
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
    pub(super) fn into_kept(self) -> std::result::Result<Bytes, u64> {
        match self {
            Received::Nothing => Ok(Bytes::new()),
            Received::Discarded { limit, .. } => Err(limit),
            Received::One(b) => Ok(b),
            Received::Gathered(b) => Ok(b.freeze()),
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
