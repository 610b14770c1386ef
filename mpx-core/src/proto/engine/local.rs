//! Messages from ranks of this process, handed over without frames.
//!
//! Where every rank lives in one process (the loopback's
//! [`LocalWorld`](crate::runtime::LocalWorld) with messages meeting), a
//! sender hands its message to the receiver's engine itself
//! ([`Engine::arrive_local`]), under the receiver's lock: no frame, no
//! sequence number to check, no transport between. The message joins the
//! same queues as a frame's, so matching, probes, cancels, truncation and
//! the order of one sender's messages are those of every message; only
//! the way the sender learns that its send is done differs:
//!
//! * a standard or buffered send that frames would carry without a match
//!   (at most the eager threshold, or within the unsolicited credit) is
//!   done as it arrives, while the sender's messages held here stay
//!   within the eager and unsolicited credit this rank grants together;
//!   its credit comes back when a receive takes it, without a frame;
//! * a ready send is done as it arrives, or refused with
//!   [`ErrorKind::NotReady`] when no posted receive takes it;
//! * any other send (synchronous, larger, beyond the credit) waits in the
//!   queue as a [`Body::Waiting`] message, data in hand, and is done when a
//!   receive matches it: [`Event::LocalSendDone`] tells the runtime,
//!   which completes the send at its own endpoint. A rank that finishes or
//!   closes with such messages queued fails their sends.
//!
//! The data is already the sender's own copy (packed, or a `Vec` given
//! up), so a message of any size moves without a further copy, and the
//! receive copies it into its buffer in its own poll, as any other.

use super::*;

/// A message a rank of this process hands to its receiver's engine.
#[derive(Debug)]
pub struct LocalMessage {
    /// The message, as a send posts it (`dest` is the receiving rank).
    pub msg: Outgoing,
    /// Its send mode.
    pub mode: SendMode,
    /// The sender's id for the send, reported in [`Event::LocalSendDone`]
    /// if it waits for its match (0 when it may not wait: see
    /// [`Engine::arrive_local`]).
    pub send_id: ReqId,
}

/// What became of a [`LocalMessage`].
#[derive(Debug)]
pub enum LocalArrival {
    /// The send is done (or failed); nothing more comes of it.
    Done(Result<()>),
    /// The send waits for its match: [`Event::LocalSendDone`] follows.
    Waiting,
    /// The send would have to wait, and was handed over with `send_id` 0:
    /// nothing changed; here is the message back, to hand over again with
    /// an id its sender can be told about.
    Refused(LocalMessage),
}

impl Engine {
    /// Takes a message from `from`, a rank of this process, without a
    /// frame (see the [module docs](self)). With `send_id` 0 a send that
    /// would wait for its match is [`Refused`](LocalArrival::Refused)
    /// instead, unchanged, so that a sender pays for an id it can be told
    /// about only when it needs one.
    pub fn arrive_local(&mut self, from: u32, m: LocalMessage) -> LocalArrival {
        let LocalMessage { msg, mode, send_id } = m;
        if from as usize >= self.peers.len() || from == self.rank {
            return LocalArrival::Done(Err(ErrorKind::InvalidRank { rank: from as usize, size: self.peers.len() }.into()));
        }
        let me = self.rank;
        if self.closed || self.peers[from as usize].failed.is_some() {
            // As a frame would be: dropped; a send that needed a match
            // learns that none comes.
            let result = match mode {
                SendMode::Standard | SendMode::Buffered if msg.data.len() <= self.config.eager_threshold => Ok(()),
                _ => Err(Error::process_failed(me, "it closed its endpoint or gave up on this rank")),
            };
            return LocalArrival::Done(result);
        }
        let p = &mut self.peers[from as usize];
        p.local = true;
        let envelope = Envelope {
            context: msg.context,
            source: from,
            tag: msg.tag,
            signature: msg.signature,
            repr: msg.repr,
            len: (msg.data.len() as u64).saturating_sub(u64::from(msg.desc_len)),
            desc_len: msg.desc_len,
            seq: p.local_seq,
        };
        // What frames would carry without a match: an eager message, or
        // one within the unsolicited credit; and within both credits
        // together, which bound what this rank holds for the sender.
        let cost = eager_cost(msg.data.len());
        let (eager_credit, unsolicited_credit) = (self.config.eager_credit, self.config.unsolicited_credit);
        let eager = matches!(mode, SendMode::Standard | SendMode::Buffered)
            && (msg.data.len() <= self.config.eager_threshold || cost <= unsolicited_credit)
            && p.credit_in_use + cost <= eager_credit + unsolicited_credit;
        if eager {
            tracing::trace!(rank = me, source = from, tag = msg.tag, len = msg.data.len(), ?mode, "send posted, handed over within credit");
            p.local_seq += 1;
            p.credit_in_use += cost;
            self.arrive(Unexpected { envelope, body: Body::Data { data: msg.data, credit: cost } });
            return LocalArrival::Done(Ok(()));
        }
        // Everything else needs a receive: one posted now, or a later one.
        if self.finished {
            return LocalArrival::Done(Err(Self::returned(me)));
        }
        if mode == SendMode::Ready {
            // As a ready frame: delivered to a receive posted now, whatever
            // its size (the receive reports a truncation), or refused.
            let Some((id, _)) = self.posted.take_match(&envelope) else {
                return LocalArrival::Done(Err(ErrorKind::NotReady.into()));
            };
            self.peers[from as usize].local_seq += 1;
            self.events.push_back(Event::RecvDone { id, result: Ok(Delivered::new(envelope, msg.data, 0)) });
            return LocalArrival::Done(Ok(()));
        }
        if send_id == 0 {
            return LocalArrival::Refused(LocalMessage { msg, mode, send_id });
        }
        tracing::trace!(rank = me, source = from, send_id, tag = msg.tag, len = msg.data.len(), ?mode, "send posted, handed over to wait for its match");
        self.peers[from as usize].local_seq += 1;
        self.arrive(Unexpected { envelope, body: Body::Waiting { data: msg.data, send_id } });
        LocalArrival::Waiting
    }

    /// The sends of ranks of this process whose messages wait here for a
    /// match (see [`Body::Waiting`]), taken out of the queue: none will
    /// match them now. Each is reported failed with `error`
    /// ([`Event::LocalSendDone`]).
    pub(super) fn fail_waiting_sends(&mut self, error: &Error) {
        for (rank, id) in self.take_waiting_sends() {
            self.events.push_back(Event::LocalSendDone { rank, id, result: Err(error.clone()) });
        }
    }

    /// The sends of ranks of this process whose messages wait here for a
    /// match, as (sender, send id), taken out of the queue (and those
    /// held for a receive that failed as too short for them): for an
    /// endpoint that goes without closing, to fail them itself.
    pub fn take_waiting_sends(&mut self) -> Vec<(u32, ReqId)> {
        let waiting_id = |u: &Unexpected| match u.body {
            Body::Waiting { send_id, .. } => Some((u.envelope.source, send_id)),
            _ => None,
        };
        let mut waiting: Vec<(u32, ReqId)> = self.unexpected.iter().filter_map(waiting_id).collect();
        if !waiting.is_empty() {
            self.unexpected.retain(|u| !matches!(u.body, Body::Waiting { .. }));
        }
        let truncated: Vec<ReqId> = self.truncated.iter().filter(|(_, u)| matches!(u.body, Body::Waiting { .. })).map(|(&id, _)| id).collect();
        for id in truncated {
            waiting.extend(self.truncated.remove(&id).as_ref().and_then(waiting_id));
        }
        waiting
    }
}
