//! What the engine keeps per peer: its output queues, credit and slots
//! both ways, what its hello said, and how it ended.

use super::*;

pub(super) enum PendingSend {
    /// Waiting for CTS, holding the data (`ready`: a ready-mode send,
    /// which may be answered "not ready" instead).
    Rendezvous { dest: u32, data: Bytes, ready: bool },
    /// Waiting for the answer to a ready send.
    Ready { dest: u32 },
}

impl PendingSend {
    pub(super) fn dest(&self) -> u32 {
        match self {
            PendingSend::Rendezvous { dest, .. } | PendingSend::Ready { dest } => *dest,
        }
    }
}

/// A send waiting for credit (or for the peer's hello).
pub(super) struct Held {
    pub(super) id: ReqId,
    pub(super) mode: SendMode,
    pub(super) msg: Outgoing,
}

/// Rendezvous data being streamed to a peer in chunks.
pub(super) struct Bulk {
    pub(super) send_id: ReqId,
    pub(super) recv_id: u64,
    pub(super) data: Bytes,
    pub(super) offset: usize,
}

/// Frames an emptied [`FrameQueue`] keeps room for.
const SHRINK_ABOVE: usize = 256;

/// Frames ready to go to a peer, in order, with what they hold.
#[derive(Default)]
pub(super) struct FrameQueue {
    frames: VecDeque<Frame>,
    /// Payload bytes in `frames`.
    bytes: usize,
    /// Answers to the peer among them (see [`MAX_QUEUED_FRAMES`]).
    answers: usize,
    /// The eager credit their messages spent: credit the peer cannot give
    /// back, since they have not left this rank.
    eager_credit: u64,
}

impl FrameQueue {
    pub(super) fn push_back(&mut self, frame: Frame) {
        self.count(&frame, true);
        self.frames.push_back(frame);
    }

    /// Puts back a frame the transport refused: it goes first.
    pub(super) fn push_front(&mut self, frame: Frame) {
        self.count(&frame, true);
        self.frames.push_front(frame);
    }

    pub(super) fn pop_front(&mut self) -> Option<Frame> {
        let frame = self.frames.pop_front()?;
        self.count(&frame, false);
        if self.frames.is_empty() && self.frames.capacity() > SHRINK_ABOVE {
            // A peer that made this rank queue many answers (it did not
            // read) does not keep their memory once they have gone.
            self.frames.shrink_to(SHRINK_ABOVE);
        }
        Some(frame)
    }

    pub(super) fn clear(&mut self) {
        *self = FrameQueue::default();
    }

    fn count(&mut self, frame: &Frame, added: bool) {
        let bytes = frame.payload.len();
        let answer = usize::from(is_answer(frame.header.kind));
        let credit = if frame.header.kind == Kind::Eager { eager_cost(bytes) } else { 0 };
        if added {
            self.bytes += bytes;
            self.answers += answer;
            self.eager_credit += credit;
        } else {
            self.bytes -= bytes;
            self.answers -= answer;
            self.eager_credit -= credit;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.frames.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Frame> {
        self.frames.iter()
    }

    /// Payload bytes queued.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Answers to the peer queued (see [`MAX_QUEUED_FRAMES`]).
    pub(super) fn answers(&self) -> usize {
        self.answers
    }

    /// Eager credit the queued messages spent.
    pub(super) fn eager_credit(&self) -> u64 {
        self.eager_credit
    }
}

/// What a peer said in its hello.
#[derive(Clone, Copy)]
pub(super) struct PeerHello {
    /// Largest eager message it sends.
    pub(super) eager_limit: u64,
    /// Largest frame payload it accepts.
    pub(super) accepts: u64,
    /// It shares this rank's native representation.
    pub(super) native: bool,
}

#[derive(Default)]
pub(super) struct Peer {
    // Sending to the peer.
    pub(super) next_seq: u64,
    /// Eager bytes this rank may still send to the peer.
    pub(super) credit: u64,
    /// Rendezvous requests this rank may still send unanswered.
    pub(super) slots: u64,
    /// The credit the peer granted in its hello (at most
    /// [`MAX_GRANTED_CREDIT`](super::MAX_GRANTED_CREDIT)): what it gives
    /// back never takes `credit` above it.
    pub(super) credit_granted: u64,
    /// The slots the peer granted in its hello (at most
    /// [`MAX_GRANTED_SLOTS`](super::MAX_GRANTED_SLOTS)); with those it may
    /// grant after this rank's goodbye, the most `slots` can be.
    pub(super) slots_granted: u64,
    /// Unsolicited bytes (see [`Config::unsolicited_credit`]) this rank
    /// may still send the peer ahead of a match.
    pub(super) unsolicited: u64,
    /// The unsolicited credit the peer granted in its hello (at most
    /// [`MAX_GRANTED_CREDIT`](super::MAX_GRANTED_CREDIT)).
    pub(super) unsolicited_granted: u64,
    /// Sends waiting for credit, a slot or the hello, in order.
    pub(super) held: VecDeque<Held>,
    /// Frames ready to go, in order.
    pub(super) queue: FrameQueue,
    /// Rendezvous data to stream, in chunks, after `queue`.
    pub(super) bulk: VecDeque<Bulk>,
    /// The last frame for the peer, sent once its link can take it even
    /// though nothing else goes to it any more: why this rank failed it, or,
    /// once this rank is closed, its last goodbye.
    pub(super) parting: Option<Frame>,
    /// Data frames this rank's last goodbye to the peer said it sends in
    /// all.
    pub(super) announced: Option<u64>,
    /// In the engine's list of peers with output.
    pub(super) scheduled: bool,
    /// The transport cannot take more for this peer for now.
    pub(super) blocked: bool,
    /// The transport cannot take more rendezvous data for this peer for
    /// now (its control frames may still go: a transport with a separate
    /// stream for bulk data refuses only that).
    pub(super) bulk_blocked: bool,
    /// A chunk of rendezvous data the transport refused: the first to go
    /// once it can take more.
    pub(super) bulk_back: Option<Frame>,
    /// Something went to the peer since the last timeout check.
    pub(super) sent: bool,
    pub(super) last_sent: Option<Instant>,

    // Receiving from the peer.
    pub(super) hello: Option<PeerHello>,
    pub(super) expected_seq: u64,
    /// Eager credit the peer has spent here and not been given back.
    pub(super) credit_in_use: u64,
    /// Eager bytes consumed here that the peer has not been given back.
    pub(super) owed: u64,
    /// Unsolicited credit the peer has spent here on messages no receive
    /// has matched yet: never above [`Config::unsolicited_credit`].
    pub(super) unsolicited_in_use: u64,
    /// The peer's rendezvous requests not yet answered with a CTS.
    pub(super) slots_in_use: u64,
    /// Rendezvous slots granted to the peer beyond [`Config::rndv_slots`]
    /// after its goodbye (at most [`MAX_AFTER_GOODBYE`]).
    pub(super) extra_slots: u64,
    /// Messages the peer, a rank of this process, handed over without
    /// frames ([`Engine::arrive_local`]): every message's place in its
    /// sender's order counts them (see [`Envelope::seq`]).
    pub(super) local_arrivals: u64,
    /// Eager credit such messages hold here, apart from the credit of the
    /// peer's frames: given back without a frame (see [`LOCAL_CREDIT`]).
    pub(super) local_credit_in_use: u64,
    /// Something came from the peer since the last timeout check.
    pub(super) heard: bool,
    pub(super) last_heard: Option<Instant>,

    /// The peer's program has returned; it posts no more receives.
    pub(super) finished: bool,
    /// Data frames the peer sends in all, from its goodbye: after its
    /// goodbye, its sends that were waiting for credit still arrive.
    pub(super) final_seq: Option<u64>,
    /// The peer failed: the error of every operation that depends on it.
    pub(super) failed: Option<Error>,
    /// The peer said in a goodbye that it failed, and what only it could
    /// complete was dropped then. Such a goodbye counts every data frame
    /// already here (nothing follows it), so nothing of the peer's needs
    /// dropping again: a further such goodbye costs nothing.
    pub(super) said_it_failed: bool,
    /// Rendezvous transfers from the peer answered only to drop their
    /// data (see [`Engine::consume_truncated`]), whose data is still to
    /// come: at most [`Config::rndv_slots`]. Beyond that the peer's
    /// requests of that kind wait in `to_drop`, each holding its slot, so
    /// that a peer that never sends the data it was asked for gains no
    /// more room than its slots.
    pub(super) drops_in_flight: u64,
    /// Rendezvous requests of the peer's to answer once one of its
    /// `drops_in_flight` ends: the receive id the transfer goes under,
    /// the message's envelope and the peer's send id.
    pub(super) to_drop: VecDeque<(ReqId, Envelope, u64)>,
}

impl Peer {
    /// Whether the peer said in a goodbye that it failed: it serves
    /// nothing more (its rendezvous requests are never answered).
    pub(super) fn gave_up(&self) -> bool {
        self.said_it_failed
    }

    /// Frees `credit` bytes of the unsolicited credit the peer spent here.
    pub(super) fn free_unsolicited(&mut self, credit: u64) {
        self.unsolicited_in_use = self.unsolicited_in_use.saturating_sub(credit);
    }

    /// Whether a frame to the peer may go straight to the transport: the
    /// peer is alive and has said hello, and no send or frame waits for it
    /// that would have to go first, nor is its link blocked.
    pub(super) fn clear_to_send(&self) -> bool {
        self.failed.is_none() && self.hello.is_some() && self.held.is_empty() && self.queue.is_empty() && !self.blocked
    }
}
