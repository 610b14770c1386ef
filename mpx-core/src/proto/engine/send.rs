//! Starting sends: eager, rendezvous and ready, under credit and slots.

use super::*;

impl Engine {
    pub(super) fn data_header(&mut self, kind: Kind, msg: &Outgoing, send_id: u64) -> Header {
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
    pub(super) fn goes_eagerly(&self, mode: SendMode, dest: u32, len: usize) -> bool {
        matches!(mode, SendMode::Standard | SendMode::Buffered)
            && self.fits_one_frame(dest, len)
            && self.peers[dest as usize].credit >= eager_cost(len)
    }

    /// Whether a message of `len` bytes may travel whole in one frame to
    /// `dest`: within this rank's eager threshold and the payload `dest`
    /// accepts.
    pub(super) fn fits_one_frame(&self, dest: u32, len: usize) -> bool {
        let accepts = self.peers[dest as usize].hello.map_or(u64::MAX, |h| h.accepts);
        len <= self.config.eager_threshold && len as u64 <= accepts
    }

    /// Starts send `id`; its completion arrives as [`Event::SendDone`] (at
    /// once for eager sends).
    pub fn post_send(&mut self, id: ReqId, mode: SendMode, msg: Outgoing) {
        tracing::trace!(rank = self.rank, id, dest = msg.dest, tag = msg.tag, len = msg.data.len(), ?mode, "send posted");
        if msg.dest >= self.size() {
            let error = ErrorKind::InvalidRank { rank: msg.dest as usize, size: self.size() as usize }.into();
            self.events.push_back(Event::SendDone { id, result: Err(error) });
            return;
        }
        if self.finished && msg.dest != self.rank {
            // The goodbye said how many messages follow it.
            self.events.push_back(Event::SendDone { id, result: Err(ErrorKind::Finalized.into()) });
            return;
        }
        // A send that cannot go eagerly needs the peer to match it.
        let needs_peer = !self.goes_eagerly(mode, msg.dest, msg.data.len()) || !self.peers[msg.dest as usize].held.is_empty();
        if self.finished && needs_peer {
            // To itself, once its program has returned: no receive will come.
            self.events.push_back(Event::SendDone { id, result: Err(Self::own_match_lost(self.rank)) });
            return;
        }
        if let Some(e) = self.dead(msg.dest, needs_peer) {
            self.events.push_back(Event::SendDone { id, result: Err(e) });
            return;
        }
        let dest = msg.dest;
        self.peers[dest as usize].held.push_back(Held { id, mode, msg });
        self.start_held(dest);
        self.handle_local();
    }

    /// Starts standard-mode send `id` if it goes at once as one eager
    /// frame with nothing for `dest` ahead of it (the common small send),
    /// and returns that frame for the caller to hand to the transport now,
    /// or to give back with [`unsend`](Engine::unsend) if the transport
    /// refuses it. The send is then complete: no [`Event::SendDone`]
    /// follows. Otherwise, and for every other mode (a buffered send's
    /// caller waits for its `SendDone` to free its buffer space), nothing
    /// changes and the message comes back, for
    /// [`post_send`](Engine::post_send).
    pub fn send_eager_now(&mut self, id: ReqId, mode: SendMode, msg: Outgoing) -> std::result::Result<Frame, Outgoing> {
        let dest = msg.dest;
        let clear_to_go = mode == SendMode::Standard
            && dest < self.size()
            && dest != self.rank
            && !self.finished
            && !self.closed
            && self.peers[dest as usize].clear_to_send()
            && self.goes_eagerly(mode, dest, msg.data.len());
        if !clear_to_go {
            return Err(msg);
        }
        tracing::trace!(rank = self.rank, id, dest, tag = msg.tag, len = msg.data.len(), ?mode, "send posted, eager at once");
        self.peers[dest as usize].credit -= eager_cost(msg.data.len());
        let header = self.data_header(Kind::Eager, &msg, id);
        self.peers[dest as usize].sent = true;
        Ok(Frame { header, payload: msg.data })
    }

    /// Starts the sends held for `dest`, in order, while credit and slots
    /// allow.
    pub(super) fn start_held(&mut self, dest: u32) {
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
            let unsolicited = rendezvous && self.goes_unsolicited(mode, dest, len);
            if rendezvous && !unsolicited && slots == 0 {
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
            } else if unsolicited {
                self.send_unsolicited(id, msg);
            } else {
                self.peers[dest as usize].slots -= 1;
                self.request_to_send(id, mode, msg);
            }
        }
    }

    /// Whether a rendezvous send of `len` bytes in `mode` to `dest` starts
    /// its data without waiting for the CTS, with the unsolicited credit
    /// held now (see [`Config::unsolicited_credit`]): standard and buffered
    /// sends of some data to another rank only (a synchronous send waits
    /// for its match anyway, and a ready one must find its receive posted).
    fn goes_unsolicited(&self, mode: SendMode, dest: u32, len: usize) -> bool {
        matches!(mode, SendMode::Standard | SendMode::Buffered)
            && len > 0
            && dest != self.rank
            && self.peers[dest as usize].unsolicited >= unsolicited_cost(len as u64)
    }

    /// Sends the rendezvous request of send `id` with its data right
    /// behind it, under the destination's unsolicited credit: the data's
    /// frames carry the send's id, since no receive has answered. The send
    /// completes when its last chunk has been handed to the transport.
    fn send_unsolicited(&mut self, id: ReqId, msg: Outgoing) {
        let dest = msg.dest;
        let header = Header { recv_id: RTS_UNSOLICITED, ..self.data_header(Kind::Rts, &msg, id) };
        let p = &mut self.peers[dest as usize];
        p.unsolicited -= unsolicited_cost(msg.data.len() as u64);
        p.bulk.push_back(Bulk { send_id: id, recv_id: 0, data: msg.data, offset: 0 });
        self.push_frame(dest, Frame::control(header));
    }

    /// Sends the rendezvous request of send `id` (a ready-mode one if
    /// `mode` says so) and keeps its data for the CTS.
    pub(super) fn request_to_send(&mut self, id: ReqId, mode: SendMode, msg: Outgoing) {
        let ready = mode == SendMode::Ready;
        let dest = msg.dest;
        let header = Header { recv_id: u64::from(ready), ..self.data_header(Kind::Rts, &msg, id) };
        self.sends.insert(id, PendingSend::Rendezvous { dest, data: msg.data, ready });
        self.push_frame(dest, Frame::control(header));
    }
}
