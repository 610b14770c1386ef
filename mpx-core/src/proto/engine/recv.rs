//! Receives and probes: posting, matching the unexpected queue, cancelling,
//! and giving credit back.

use super::*;

impl Engine {
    /// Posts receive `id`. If a queued message matches, it completes (or,
    /// for a rendezvous message, starts its data transfer) at once. An
    /// any-source receive stays posted when every other rank is gone (see
    /// [`Event::Orphaned`]).
    pub fn post_recv(&mut self, id: ReqId, spec: MatchSpec) {
        self.post(id, spec, self.config.max_message);
    }

    /// Posts receive `id`, holding at most `limit` bytes if given.
    fn post(&mut self, id: ReqId, spec: MatchSpec, limit: Option<u64>) {
        tracing::trace!(rank = self.rank, id, ?spec, "receive posted");
        if self.closed {
            self.events.push_back(Event::RecvDone { id, result: Err(ErrorKind::Finalized.into()) });
            return;
        }
        if let Some(source) = spec.source.filter(|&s| s >= self.size()) {
            let error = ErrorKind::InvalidRank { rank: source as usize, size: self.size() as usize }.into();
            self.events.push_back(Event::RecvDone { id, result: Err(error) });
            return;
        }
        if let Some(u) = self.unexpected.take_first(&spec) {
            self.take_unexpected(id, u, limit);
            self.handle_local();
            return;
        }
        if let Some(e) = spec.source.and_then(|s| self.silent(s)) {
            self.events.push_back(Event::RecvDone { id, result: Err(e) });
            return;
        }
        self.posted.push(id, spec, limit);
        if spec.source.is_none() && self.others_gone_in(spec.context).is_some() {
            self.events.push_back(Event::Orphaned { id });
        }
    }

    /// [`post_recv`](Engine::post_recv) for a receive that holds at most
    /// `limit` bytes of data. A longer rendezvous message that it matches
    /// fails it at once with [`ErrorKind::Truncate`], before any of the data
    /// moves, and waits unanswered for what the receive's owner does: once
    /// the error is taken ([`consume_truncated`](Engine::consume_truncated))
    /// the message counts as received, as MPI says (its sender completes;
    /// its data is counted, not kept); if the receive is dropped unread
    /// ([`restore_truncated`](Engine::restore_truncated)) the message goes
    /// back to its place in the queue, whole, as a delivered eager message
    /// given back does. A [`farewell`](Engine::farewell) takes every such
    /// error still held: nothing receives after it. Memory for a matched message follows what a
    /// receive asked for, never what the sender claims.
    pub fn post_recv_limited(&mut self, id: ReqId, spec: MatchSpec, limit: u64) {
        self.post(id, spec, Some(limit));
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
    /// [`requeue`](Engine::requeue)). A receive that took data as it
    /// arrived ([`take_arrived`](Engine::take_arrived)) gives it back with
    /// [`give_back`](Engine::give_back) first; if it does not, the message
    /// can never be delivered whole, and whoever takes it fails with
    /// [`ErrorKind::Truncate`].
    ///
    /// A rendezvous transfer's memory is bounded by the limit of the
    /// receive that matched it (see [`post_recv_limited`](Engine::post_recv_limited)),
    /// which holds the whole message, for the whole transfer, whoever owns
    /// it later; a receive that takes over a message in flight bounds it by
    /// its own limit too.
    pub fn withdraw_recv(&mut self, id: ReqId) -> bool {
        if self.cancel_recv(id) {
            return true;
        }
        let Some((transfer, t)) = self.transfer_owned_by(id) else {
            return false;
        };
        t.owner = None;
        if matches!(t.received, Received::Streaming { .. }) {
            // The receive took data and did not give it back (it failed
            // taking it): whoever takes the message next must not get it
            // with its start missing, and fails as truncated.
            t.received.discard(0);
        }
        let u = Unexpected { envelope: t.envelope, body: Body::InFlight { transfer } };
        self.restore(u);
        self.handle_local();
        true
    }

    /// Whether receive `id` is still the engine's: posted, or owning a
    /// rendezvous message whose data is coming.
    pub fn receiving(&self, id: ReqId) -> bool {
        self.posted.spec(id).is_some() || self.transfers.values().any(|t| t.owner == Some(id))
    }

    /// The data of receive `id`'s rendezvous message that has arrived
    /// since it last took some, for the receive to put in its buffer
    /// itself while the rest arrives, rather than all of it once the last
    /// byte is in (the engine never writes into a receive's buffer). The
    /// first call asks `accept` whether the receive takes the message so
    /// (its data is then handed over from the start); after a `None` the
    /// receive is not told of its data again. A receive told so by an
    /// [`Event::DataArrived`] calls this; its completion then holds only
    /// the data it did not take. Withdrawing such a receive, it gives
    /// what it took back with [`give_back`](Engine::give_back) first.
    /// Messages with a type description never stream.
    pub fn take_arrived(&mut self, id: ReqId, accept: impl FnOnce(&Envelope) -> bool) -> Option<Arrived> {
        self.transfer_owned_by(id)?.1.take_arrived(accept)
    }

    /// Receive `id`, about to be withdrawn, gives back the data it took
    /// with [`take_arrived`](Engine::take_arrived): `head`, the first
    /// bytes of the message. Nothing happens if it took nothing.
    pub fn give_back(&mut self, id: ReqId, head: BytesMut) {
        if let Some((_, t)) = self.transfer_owned_by(id) {
            t.give_back(head);
        }
    }

    /// The transfer receive `id` owns, with its id: one whose data is
    /// still coming (a transfer leaves its owner when its last byte
    /// arrives).
    fn transfer_owned_by(&mut self, id: ReqId) -> Option<(ReqId, &mut Transfer)> {
        self.transfers.iter_mut().find(|(_, t)| t.owner == Some(id)).map(|(&transfer, t)| (transfer, t))
    }

    /// Offers a message returned to the queue to the posted receives, in
    /// order; if none takes it, it goes back at the head of the queue, or,
    /// if some of its sender's earlier messages are still queued, right
    /// behind the last of them: ahead of its sender's later messages, as
    /// sent.
    pub(super) fn restore(&mut self, u: Unexpected) {
        let source = u.envelope.source;
        let lost = match u.body {
            // Its sender failed: the data never comes (as when the failure,
            // or the goodbye that said so, dropped the requests queued then).
            Body::Rts { .. } => self.gone(source).is_some() || self.peers.get(source as usize).is_some_and(Peer::gave_up),
            // Its data went with its sender.
            Body::InFlight { transfer } => !self.transfers.contains_key(&transfer),
            Body::Data { .. } | Body::Local { .. } => false,
        };
        if lost {
            return;
        }
        if let Some((id, limit)) = self.posted.take_match(&u.envelope) {
            self.take_unexpected(id, u, limit);
            return;
        }
        if self.is_late(&u.envelope) {
            // Given back by a receive of a call this rank has finished.
            self.drop_unexpected(u);
            return;
        }
        if let Body::Local { send_id, credit, .. } = u.body {
            if send_id != 0 && (self.finished || self.closed || self.peers[source as usize].failed.is_some()) {
                // Given back once no receive comes (a matched probe's
                // message, a receive dropped after this rank's program
                // returned): the send waiting for one fails.
                self.local_message_left(source, send_id, credit, Err(self.local_sends_end()));
                return;
            }
        }
        // At the head of the queue, but behind its sender's earlier
        // messages still queued (they stay ahead of it, as sent): ahead of
        // every later message from its sender, and of other senders'
        // messages that came after it.
        let (source, seq) = (u.envelope.source, u.envelope.seq);
        self.unexpected.put_back(u, |_| false, |q| q.envelope.source == source && q.envelope.seq < seq);
    }

    /// Puts a message taken by [`improbe`](Engine::improbe) back in the
    /// queue, unreceived (a rendezvous message stays unanswered).
    pub fn unmatch(&mut self, mut m: Matched) {
        self.unprobe(&mut m);
        self.restore(m.0);
        self.handle_local();
    }

    /// Puts a delivered message back in the unexpected queue as if it had
    /// not been matched (for a receive abandoned after matching): it is
    /// offered to posted receives first, then queued ahead of its sender's
    /// later messages. A message without all its data (a streaming
    /// receive's completion without the part it took) is dropped, never
    /// queued.
    pub fn requeue(&mut self, msg: Delivered) {
        if msg.data.len() as u64 != msg.envelope.len {
            tracing::error!(rank = self.rank, len = msg.envelope.len, data = msg.data.len(), "a message given back with part of its data missing is dropped");
            return;
        }
        self.restore(Unexpected { envelope: msg.envelope, body: Body::Data { data: msg.payload(), credit: msg.credit } });
        self.handle_local();
    }

    /// The envelope of the message held for receive `id`, which failed
    /// as too short for it (see
    /// [`consume_truncated`](Engine::consume_truncated)), while it is held.
    pub fn truncated_envelope(&self, id: ReqId) -> Option<&Envelope> {
        self.truncated.get(&id).map(|u| &u.envelope)
    }

    /// Receive `id` took its error: if it failed because its message was
    /// too long for it (see [`post_recv_limited`](Engine::post_recv_limited)),
    /// the message counts as received now. A rendezvous request is
    /// answered, so that its sender completes, and its data is counted and
    /// dropped as it arrives; unsolicited data is dropped, and its credit
    /// goes back to the sender once the last of it is in.
    /// Returns the message's envelope, if the receive failed so.
    ///
    /// What a sender is asked for only to be dropped stays within what it
    /// was granted until its data is in: a rendezvous request holds its
    /// slot, unanswered, while [`Config::rndv_slots`] of the sender's
    /// transfers are being dropped already, and unsolicited data holds its
    /// credit. A sender that never sends the data (a hostile one, asked
    /// for the late messages of every finished collective call, see
    /// [`discard_call`](Engine::discard_call)) so never holds more of this
    /// rank's memory than it was granted.
    pub fn consume_truncated(&mut self, id: ReqId) -> Option<Envelope> {
        let u = self.truncated.remove(&id)?;
        let envelope = u.envelope;
        match u.body {
            Body::Rts { send_id } => self.answer_to_drop(id, envelope, send_id, false),
            Body::InFlight { transfer } => match self.transfers.get_mut(&transfer) {
                Some(t) if t.complete => self.end_dropped(transfer),
                Some(t) => {
                    t.dropped = true;
                    t.received.discard(0);
                }
                None => {}
            },
            Body::Local { send_id, credit, .. } => {
                // Received: its data dropped, its send done.
                self.local_message_left(envelope.source, send_id, credit, Ok(()));
            }
            Body::Data { .. } => unreachable!("eager messages are delivered, never held as truncated"),
        }
        self.handle_local();
        Some(envelope)
    }

    /// Answers the rendezvous request of send `send_id` for `envelope`'s
    /// message, to drop its data as it arrives, under receive id `id`
    /// (which nothing else uses from now on): at once, or once fewer than
    /// [`Config::rndv_slots`] of its sender's transfers are being dropped
    /// (see [`consume_truncated`](Engine::consume_truncated)); `at_once`
    /// answers it whatever the transfers being dropped already.
    pub(super) fn answer_to_drop(&mut self, id: ReqId, envelope: Envelope, send_id: u64, at_once: bool) {
        let source = envelope.source;
        let gone = self.dead(source, false).is_some() || self.peers.get(source as usize).is_some_and(Peer::gave_up);
        let Some(p) = self.peers.get_mut(source as usize) else { return };
        if gone || (self.finished && source != self.rank) {
            // Nobody sends the data (or this rank's goodbye tells the
            // sender to give up on it).
            p.slots_in_use = p.slots_in_use.saturating_sub(1);
            return;
        }
        if !at_once && p.drops_in_flight >= self.config.rndv_slots.max(1) {
            p.to_drop.push_back((id, envelope, send_id));
            return;
        }
        p.slots_in_use = p.slots_in_use.saturating_sub(1);
        p.drops_in_flight += 1;
        let mut transfer = Transfer::new(envelope, id);
        transfer.owner = None;
        transfer.dropped = true;
        transfer.drop_in_flight = true;
        transfer.received.discard(0);
        self.transfers.insert(id, transfer);
        let header = Header { send_id, recv_id: id, ..Header::control(Kind::Cts, self.rank) };
        self.push_frame(source, Frame::control(header));
    }

    /// Ends `transfer`, whose data is dropped (see
    /// [`consume_truncated`](Engine::consume_truncated)), once the last of
    /// it is in: its unsolicited credit, held while the data came, goes
    /// back, and if it was asked for only to drop its data, its sender's
    /// next such request waiting is answered.
    pub(super) fn end_dropped(&mut self, transfer: ReqId) {
        self.take_unsolicited_credit(transfer);
        let Some(t) = self.transfers.remove(&transfer) else { return };
        if t.drop_in_flight {
            self.drop_ended(t.envelope.source);
        }
    }

    /// A transfer `source` was asked for only to drop its data has ended
    /// (see [`answer_to_drop`](Engine::answer_to_drop)): the next request
    /// of its kind waiting is answered.
    fn drop_ended(&mut self, source: u32) {
        let Some(p) = self.peers.get_mut(source as usize) else { return };
        p.drops_in_flight = p.drops_in_flight.saturating_sub(1);
        if let Some((id, envelope, send_id)) = p.to_drop.pop_front() {
            self.answer_to_drop(id, envelope, send_id, false);
        }
    }

    /// Receive `id` was dropped without taking its error: if it failed
    /// because its message was too long for it, the message goes back to
    /// its place in the queue, unanswered and whole, for the next receive
    /// that matches it.
    pub fn restore_truncated(&mut self, id: ReqId) {
        if let Some(u) = self.truncated.remove(&id) {
            self.restore(u);
            self.handle_local();
        }
    }

    /// The envelope of the first queued message `spec` matches
    /// (`MPI_Iprobe`), leaving it queued.
    pub fn iprobe(&self, spec: &MatchSpec) -> Option<Envelope> {
        self.unexpected.first(spec).map(|u| u.envelope)
    }

    /// Removes the first queued message `spec` matches (`MPI_Improbe`), so
    /// no other receive can take it.
    pub fn improbe(&mut self, spec: &MatchSpec) -> Option<Matched> {
        let u = self.unexpected.take_first(spec)?;
        if let Some(waiting) = waiting_local_send(&u) {
            self.probed_local.insert(waiting);
        }
        Some(Matched(u))
    }

    /// Receives a message taken by [`improbe`](Engine::improbe) as receive
    /// `id` (`MPI_Mrecv`).
    pub fn mrecv(&mut self, id: ReqId, mut m: Matched) {
        self.unprobe(&mut m);
        self.take_unexpected(id, m.0, self.config.max_message);
        self.handle_local();
    }

    /// A message [`improbe`](Engine::improbe) took leaves its handle. A
    /// send whose message waited, answered already as this rank ended (see
    /// `probed_local`), is told nothing more: the message no longer waits.
    fn unprobe(&mut self, m: &mut Matched) {
        if let Some(waiting) = waiting_local_send(&m.0) {
            if !self.probed_local.remove(&waiting) {
                if let Body::Local { send_id, .. } = &mut m.0.body {
                    *send_id = 0;
                }
            }
        }
    }

    /// [`mrecv`](Engine::mrecv) for a receive that holds at most `limit`
    /// bytes of data, as [`post_recv_limited`](Engine::post_recv_limited):
    /// a longer rendezvous message fails it at once.
    pub fn mrecv_limited(&mut self, id: ReqId, mut m: Matched, limit: u64) {
        self.unprobe(&mut m);
        self.take_unexpected(id, m.0, Some(limit));
        self.handle_local();
    }

    /// Delivers queued message `u` to receive `id`, which holds at most
    /// `limit` bytes if given. A rendezvous message longer than that fails
    /// the receive at once and waits in [`Engine::truncated`] (see
    /// [`post_recv_limited`](Engine::post_recv_limited)); an eager one is
    /// delivered, and the receive finds it too long when it takes it.
    pub(super) fn take_unexpected(&mut self, id: ReqId, u: Unexpected, limit: Option<u64>) {
        tracing::trace!(rank = self.rank, id, source = u.envelope.source, tag = u.envelope.tag, "matched");
        if let Some(available) = limit.filter(|&l| u.envelope.len > l && !matches!(u.body, Body::Data { .. })) {
            let needed = u.envelope.len;
            // Its sender as the world numbers it; the runtime renumbers it
            // for the receive's communicator as the error reaches it.
            let message = Some((u.envelope.source as usize, u.envelope.tag));
            self.events.push_back(Event::RecvDone { id, result: Err(ErrorKind::Truncate { needed, available, message }.into()) });
            self.truncated.insert(id, u);
            return;
        }
        match u.body {
            Body::Data { data, credit } => {
                self.events.push_back(Event::RecvDone { id, result: Ok(Delivered::new(u.envelope, data, credit)) });
            }
            Body::Local { data, send_id, credit } => {
                let rank = u.envelope.source;
                self.events.push_back(Event::RecvDone { id, result: Ok(Delivered::new(u.envelope, data, 0)) });
                self.local_message_left(rank, send_id, credit, Ok(()));
            }
            Body::Rts { send_id } => self.clear_to_send(id, u.envelope, send_id, limit),
            Body::InFlight { transfer } => {
                let cap = self.config.max_message;
                match self.take_unsolicited_credit(transfer) {
                    Some(t) if t.complete => {
                        // An unsolicited message may have come whole before
                        // any receive bounded it.
                        t.bound(limit, cap);
                        let t = self.transfers.remove(&transfer).expect("present");
                        self.events.push_back(Event::RecvDone { id, result: t.into_result(&mut self.pool) });
                    }
                    Some(t) => {
                        t.owner = Some(id);
                        t.nudged = false;
                        t.bound(limit, cap);
                    }
                    None => {
                        let rank = u.envelope.source;
                        let error = Error::process_failed(rank, "the message's data was lost with its sender");
                        self.events.push_back(Event::RecvDone { id, result: Err(error) });
                    }
                }
            }
        }
    }

    /// The transfer `transfer`, once a receive has matched its message:
    /// an unsolicited message's credit goes back to its sender, since the
    /// receive now bounds what its data may take.
    pub(super) fn take_unsolicited_credit(&mut self, transfer: ReqId) -> Option<&mut Transfer> {
        let t = self.transfers.get_mut(&transfer)?;
        let credit = std::mem::take(&mut t.credit);
        let source = t.envelope.source;
        if credit > 0 {
            self.peers[source as usize].free_unsolicited(credit);
            let header = Header { seq: credit, ..Header::control(Kind::Credit, self.rank) };
            self.push_frame(source, Frame::control(header));
        }
        self.transfers.get_mut(&transfer)
    }

    pub(super) fn clear_to_send(&mut self, recv_id: ReqId, envelope: Envelope, send_id: u64, limit: Option<u64>) {
        let source = envelope.source;
        if let Some(p) = self.peers.get_mut(source as usize) {
            p.slots_in_use = p.slots_in_use.saturating_sub(1);
        }
        if let Some(e) = self.dead(source, false) {
            self.events.push_back(Event::RecvDone { id: recv_id, result: Err(e) });
            return;
        }
        if self.peers.get(source as usize).is_some_and(Peer::gave_up) {
            self.events.push_back(Event::RecvDone { id: recv_id, result: Err(Self::gave_up_error(source)) });
            return;
        }
        if self.finished && source != self.rank {
            // This rank's program has ended: the sender gives up on the
            // message when the goodbye reaches it, before any clear-to-send
            // sent now would.
            self.events.push_back(Event::RecvDone { id: recv_id, result: Err(ErrorKind::Finalized.into()) });
            return;
        }
        let header = Header { send_id, recv_id, ..Header::control(Kind::Cts, self.rank) };
        let mut transfer = Transfer::new(envelope, recv_id);
        transfer.bound(limit, self.config.max_message);
        self.transfers.insert(recv_id, transfer);
        self.push_frame(source, Frame::control(header));
    }

    /// Messages shorter than this are not worth [`recycle`](Engine::recycle)-ing
    /// here: the size from which a buffer is worth keeping for a
    /// transfer's data (smaller ones, from 64 KiB, go straight to the
    /// thread's spare buffers for packs).
    pub const RECYCLE_MIN: usize = crate::pack::spare::LARGE;

    /// A receive is done with `data`, a delivered message's or what it
    /// took as it arrived ([`take_arrived`](Engine::take_arrived)): its
    /// buffer, if large and held by nothing else, is kept for a later
    /// transfer's data (at most two such buffers are kept).
    pub fn recycle(&mut self, data: Bytes) {
        self.pool.give(data);
    }

    /// A receive has consumed a delivered message holding `bytes` of
    /// `source`'s credit: the credit goes back to the sender (in batches).
    pub fn release_credit(&mut self, source: u32, bytes: u64) {
        let quarter = self.config.eager_credit / 4;
        let Some(peer) = self.peers.get_mut(source as usize) else { return };
        if bytes == 0 || peer.failed.is_some() {
            return;
        }
        if bytes & LOCAL_CREDIT != 0 {
            // A rank of this process: no frame, no batch.
            peer.local_credit_in_use = peer.local_credit_in_use.saturating_sub(bytes & !LOCAL_CREDIT);
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
}

/// The sender and send of `u`, if it is a message of a rank of this
/// process whose send waits for its match.
fn waiting_local_send(u: &Unexpected) -> Option<(u32, ReqId)> {
    match u.body {
        Body::Local { send_id, .. } if send_id != 0 => Some((u.envelope.source, send_id)),
        _ => None,
    }
}
