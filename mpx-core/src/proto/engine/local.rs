//! Messages from ranks of this process, handed over without frames.
//!
//! Where every rank lives in one process (the loopback's
//! [`LocalWorld`](crate::runtime::LocalWorld) with messages meeting), a
//! sender hands its message to the receiver's engine itself
//! ([`Engine::arrive_local`]), under the receiver's lock: no frame, no
//! sequence number to check, no transport between. The message joins the
//! same queues as a frame's, numbered in its sender's order among the
//! sender's frames too ([`Envelope::seq`]), so matching, probes, cancels
//! and the order of one sender's messages are those of every message; only
//! the way the sender learns that its send is done differs:
//!
//! * a standard or buffered send that frames would carry without a match
//!   is done as it arrives: one of at most the eager threshold while what
//!   the sender's messages hold here stays within the eager credit this
//!   rank grants, a larger one within the unsolicited credit while it
//!   stays within both together (kept apart from the credit of the
//!   sender's frames: [`LOCAL_CREDIT`]); the credit comes back, without a
//!   frame, when a receive takes the message;
//! * a ready send is delivered to a receive posted now, or refused with
//!   [`ErrorKind::NotReady`];
//! * any other send (synchronous, larger, beyond the credit) waits in the
//!   queue as a [`Body::Local`] message, data in hand, and is done when a
//!   receive matches it: [`Event::LocalSendDone`] tells the runtime,
//!   which completes the send at its own endpoint. A rank that finishes,
//!   closes or fails the sender with such messages queued fails their
//!   sends. (A sender that closes fails its own waiting sends; their
//!   messages stay here, whole, for a receive to take.)
//!
//! The data is already the sender's own copy (packed, or a `Vec` given
//! up), so a message of any size moves without a further copy, and the
//! receive copies it into its buffer in its own poll, as any other. A
//! [`Body::Local`] message is held to the limit of the receive that
//! matches it ([`Engine::post_recv_limited`]), as a rendezvous message
//! is: a receive too short for it fails with [`ErrorKind::Truncate`]
//! before taking it in, and the message counts as received once the
//! receive's owner takes the error.
//!
//! A sender uses either this way or frames towards one receiver, never
//! both at once: the runtime hands messages over only between ranks whose
//! endpoints have both joined the world and neither has gone, and falls
//! back to frames for good once it has sent a pair a frame (see
//! [`Shared::local_receiver`](crate::runtime::Shared)).

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
#[must_use]
pub enum LocalArrival {
    /// The send is done (or failed); nothing more comes of it.
    Done(Result<()>),
    /// The send waits for its match: [`Event::LocalSendDone`] follows.
    AwaitsMatch,
    /// The send would have to wait, and was handed over with `send_id` 0:
    /// nothing changed; here is the message back, to hand over again with
    /// an id its sender can be told about.
    Refused(LocalMessage),
}

impl Engine {
    /// Takes a message from `from`, a rank of this process, without a
    /// frame (see the engine's `local` module). With `send_id` 0 a send that
    /// would wait for its match is [`Refused`](LocalArrival::Refused)
    /// instead, unchanged, so that a sender pays for an id it can be told
    /// about only when it needs one. A sender outside the world, or this
    /// rank itself, is refused with [`ErrorKind::InvalidRank`] (messages to
    /// itself stay in the engine: [`post_send`](Engine::post_send)).
    pub fn arrive_local(&mut self, from: u32, m: LocalMessage) -> LocalArrival {
        let LocalMessage { msg, mode, send_id } = m;
        if from as usize >= self.peers.len() || from == self.rank {
            return LocalArrival::Done(Err(ErrorKind::InvalidRank { rank: from as usize, size: self.peers.len() }.into()));
        }
        let me = self.rank;
        if self.peers[from as usize].finished {
            // After its goodbye (a send racing its own finalize): as its
            // engine would, refuse it.
            return LocalArrival::Done(Err(ErrorKind::Finalized.into()));
        }
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
        let envelope = Envelope {
            context: msg.context,
            source: from,
            tag: msg.tag,
            signature: msg.signature,
            repr: msg.repr,
            len: (msg.data.len() as u64).saturating_sub(u64::from(msg.desc_len)),
            desc_len: msg.desc_len,
            seq: p.expected_seq + p.local_arrivals,
        };
        // What frames would carry without a match: an eager message, or
        // one within the unsolicited credit; and within both credits
        // together, which bound what this rank holds for the sender.
        let cost = eager_cost(msg.data.len());
        let (eager_credit, unsolicited_credit) = (self.config.eager_credit, self.config.unsolicited_credit);
        let eager = msg.data.len() <= self.config.eager_threshold;
        let budget = if eager { eager_credit } else { eager_credit + unsolicited_credit };
        let at_once = matches!(mode, SendMode::Standard | SendMode::Buffered)
            && (eager || cost <= unsolicited_credit)
            && p.local_credit_in_use + cost <= budget;
        if at_once {
            tracing::trace!(rank = me, source = from, tag = msg.tag, len = msg.data.len(), ?mode, "send posted, handed over within credit");
            p.local_arrivals += 1;
            p.local_credit_in_use += cost;
            let body = match eager {
                true => Body::Data { data: msg.data, credit: cost | LOCAL_CREDIT },
                // Held to its receive's limit, as a rendezvous message.
                false => Body::Local { data: msg.data, send_id: 0, credit: cost },
            };
            self.arrive(Unexpected { envelope, body });
            return LocalArrival::Done(Ok(()));
        }
        // Everything else needs a receive: one posted now, or a later one.
        // A rank that has said goodbye takes none (as a ready frame, which
        // its sender fails on the goodbye it has first).
        if self.finished {
            return LocalArrival::Done(Err(Self::returned(me)));
        }
        if mode == SendMode::Ready {
            // As a ready frame: taken by a receive posted now (a large one
            // held to the receive's limit, as a ready rendezvous request
            // is), or refused.
            let Some((id, limit)) = self.posted.take_match(&envelope) else {
                return LocalArrival::Done(Err(ErrorKind::NotReady.into()));
            };
            tracing::trace!(rank = me, source = from, id, tag = msg.tag, len = msg.data.len(), "ready send handed over to its receive");
            self.peers[from as usize].local_arrivals += 1;
            let body = match msg.data.len() <= self.config.eager_threshold {
                true => Body::Data { data: msg.data, credit: 0 },
                false => Body::Local { data: msg.data, send_id: 0, credit: 0 },
            };
            self.take_unexpected(id, Unexpected { envelope, body }, limit);
            return LocalArrival::Done(Ok(()));
        }
        if send_id == 0 {
            return LocalArrival::Refused(LocalMessage { msg, mode, send_id });
        }
        tracing::trace!(rank = me, source = from, send_id, tag = msg.tag, len = msg.data.len(), ?mode, "send posted, handed over to wait for its match");
        self.peers[from as usize].local_arrivals += 1;
        self.arrive(Unexpected { envelope, body: Body::Local { data: msg.data, send_id, credit: 0 } });
        LocalArrival::AwaitsMatch
    }

    /// A [`Body::Local`] message of `rank`'s has left the queue: taken by
    /// a receive, dropped, or failed with `result`. Its credit goes back;
    /// its send, if it waits (`send_id` not 0), is done.
    pub(super) fn local_message_left(&mut self, rank: u32, send_id: ReqId, credit: u64, result: Result<()>) {
        if let Some(p) = self.peers.get_mut(rank as usize) {
            p.local_credit_in_use = p.local_credit_in_use.saturating_sub(credit);
        }
        if send_id != 0 {
            self.events.push_back(Event::LocalSendDone { rank, id: send_id, result });
        }
    }

    /// Fails the sends of ranks of this process whose messages wait here
    /// for a match (see [`Body::Local`]): none will match them now.
    pub(super) fn fail_sends_waiting_here(&mut self, error: &Error) {
        self.fail_sends_waiting_here_of(|_| true, error);
        self.answer_truncated_local_sends();
        self.fail_probed_local_sends(error);
    }

    /// Why a send of a rank of this process waiting here for a match gets
    /// none, once this rank has finished or closed.
    pub(super) fn local_sends_end(&self) -> Error {
        match (self.closed, self.gave_up) {
            (true, _) => Error::process_failed(self.rank, "it closed its endpoint"),
            (false, true) => Self::gave_up_error(self.rank),
            (false, false) => Self::returned(self.rank),
        }
    }

    /// Completes the sends of ranks of this process whose messages
    /// receives matched but were too short for (held for their owners to
    /// take the error): matched, they are done, whatever becomes of the
    /// receives now that this rank ends.
    fn answer_truncated_local_sends(&mut self) {
        let matched: Vec<ReqId> = self.truncated.iter().filter(|(_, u)| matches!(u.body, Body::Local { send_id, .. } if send_id != 0)).map(|(&id, _)| id).collect();
        for id in matched {
            if let Some(Unexpected { envelope, body: Body::Local { send_id, credit, .. } }) = self.truncated.remove(&id) {
                self.local_message_left(envelope.source, send_id, credit, Ok(()));
            }
        }
    }

    /// Fails the sends of ranks of this process whose messages a probe
    /// took ([`Engine::improbe`]) and whose handles are still out, as a
    /// rank that ends fails every send waiting for its receive: over
    /// frames their senders learn it from the goodbye. (A receive through
    /// such a handle later tells the sender again, who has forgotten the
    /// send by then.)
    fn fail_probed_local_sends(&mut self, error: &Error) {
        for (rank, send_id) in std::mem::take(&mut self.probed_local) {
            self.local_message_left(rank, send_id, 0, Err(error.clone()));
        }
    }

    /// Fails the sends of the ranks `from` accepts whose messages wait
    /// here for a match, taking those messages out of the queue.
    pub(super) fn fail_sends_waiting_here_of(&mut self, from: impl Fn(u32) -> bool, error: &Error) {
        for (rank, send_id, credit) in self.take_local_sends(from) {
            self.local_message_left(rank, send_id, credit, Err(error.clone()));
        }
    }

    /// Takes the messages of ranks `from` accepts whose sends wait here
    /// for a match out of the queue, as (sender, send id, credit).
    fn take_local_sends(&mut self, from: impl Fn(u32) -> bool) -> Vec<(u32, ReqId, u64)> {
        let waiting = |u: &Unexpected| matches!(u.body, Body::Local { send_id, .. } if send_id != 0) && from(u.envelope.source);
        self.unexpected
            .take_where(waiting)
            .into_iter()
            .filter_map(|u| match u.body {
                Body::Local { send_id, credit, .. } => Some((u.envelope.source, send_id, credit)),
                _ => None,
            })
            .collect()
    }

    /// For an endpoint that goes without closing: the sends of ranks of
    /// this process that still wait for an answer from this engine, as
    /// (sender, send id, outcome): those whose messages wait here for a
    /// match (failed with `error`), and those already answered in events
    /// not yet taken.
    pub fn take_local_answers(&mut self, error: &Error) -> Vec<(u32, ReqId, Result<()>)> {
        self.fail_sends_waiting_here(error);
        let mut answers = Vec::new();
        self.events.retain_mut(|event| match event {
            Event::LocalSendDone { rank, id, result } => {
                answers.push((*rank, *id, std::mem::replace(result, Ok(()))));
                false
            }
            _ => true,
        });
        answers
    }
}
