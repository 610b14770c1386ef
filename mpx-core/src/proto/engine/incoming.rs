//! Frames from peers: checking them against the protocol and acting on them.

use super::*;

impl Engine {
    /// Processes one frame from `from`. A frame that breaks the protocol
    /// fails that peer (every operation depending on it completes with an
    /// error) and is returned as the error; frames from a peer that has
    /// already failed are dropped. A frame said to come from outside the
    /// world, or from this rank itself (whose frames never leave the
    /// engine), is refused with an [`ErrorKind::Protocol`] and changes nothing.
    pub fn handle_frame(&mut self, from: u32, frame: Frame) -> Result<()> {
        if from as usize >= self.peers.len() {
            return Err(ErrorKind::Protocol(format!("frame from rank {from}, outside a world of {}", self.peers.len())).into());
        }
        if from == self.rank {
            return Err(ErrorKind::Protocol(format!(
                "a {:?} frame from rank {from} came in through the transport, but rank {from} is this rank: \
                 frames to itself never leave the engine",
                frame.header.kind
            )).into());
        }
        self.handle_peer_frame(from, frame)
    }

    /// [`handle_frame`](Engine::handle_frame) for a rank inside the world,
    /// this one included.
    pub(super) fn handle_peer_frame(&mut self, from: u32, frame: Frame) -> Result<()> {
        if self.peers[from as usize].failed.is_some() {
            // A failed peer's frames are dropped.
            return Ok(());
        }
        if self.closed {
            // Everything is dropped once closed, but for a peer's hello,
            // taken still (a closed rank is connected to it then, not
            // waiting for it: a transport that fails a peer whose hello
            // does not come in time must not fail this one).
            if frame.header.kind == Kind::Hello && self.peers[from as usize].hello.is_none() {
                let _ = self.hello(from, frame.header);
            }
            return Ok(());
        }
        self.peers[from as usize].heard = true;
        let result = self.process(from, frame);
        if let Err(e) = &result {
            self.fail_peer(from, e.clone());
        }
        self.handle_local();
        result
    }

    pub(super) fn process(&mut self, from: u32, frame: Frame) -> Result<()> {
        let owed = self.peers[from as usize].finished && !self.sends_no_more(from);
        let stalled = self.stalled(from);
        let result = self.process_frame(from, frame);
        if self.peers[from as usize].failed.is_none() {
            if owed && self.sends_no_more(from) {
                // Its last data frame is in: what still waits for its messages never gets one.
                self.fail_recvs_from(from, &Error::process_failed(from, "its program returned before sending a match"));
                // Nor can unsolicited data that came without its RTS.
                self.forget_early(from);
            }
            self.grant_after_goodbye(from);
            if !stalled && self.stalled(from) {
                self.fail_recvs_from(from, &Error::process_failed(from, Self::stalled_reason()));
            }
        }
        result
    }

    /// Grants a finished peer more rendezvous slots when what it still
    /// sends waits for them: its requests use every slot it has here (see
    /// [`MAX_AFTER_GOODBYE`]).
    pub(super) fn grant_after_goodbye(&mut self, rank: u32) {
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

    pub(super) fn process_frame(&mut self, from: u32, frame: Frame) -> Result<()> {
        let h = frame.header;
        if h.source != from {
            return Err(ErrorKind::Protocol(format!("frame from rank {from} claims source {}", h.source)).into());
        }
        if !frame.payload.is_empty() && !matches!(h.kind, Kind::Eager | Kind::Ready | Kind::RndvData) {
            // A payload nothing reads would still be held while the frame
            // is handled, and by a transport that kept it as a slice.
            return Err(ErrorKind::Protocol(format!("{:?} frame from rank {from} carries a payload", h.kind)).into());
        }
        let peer = &self.peers[from as usize];
        // Unsolicited data may overtake the hello, on a connection of its
        // own; it waits for its RTS, which cannot.
        let unsolicited_data = h.kind == Kind::RndvData && h.recv_id == 0;
        if peer.hello.is_none() && h.kind != Kind::Hello && !unsolicited_data {
            return Err(ErrorKind::Protocol(format!("{:?} frame from rank {from} before its hello", h.kind)).into());
        }
        let data_frame = matches!(h.kind, Kind::Eager | Kind::Rts | Kind::Ready);
        let still_owed = data_frame && peer.final_seq.is_some_and(|last| h.seq < last);
        if peer.finished
            && !still_owed
            && !matches!(h.kind, Kind::Cts | Kind::RndvData | Kind::ReadyAck | Kind::Credit | Kind::Ping | Kind::Bye)
        {
            return Err(ErrorKind::Protocol(format!("{:?} frame from rank {from} after its goodbye", h.kind)).into());
        }
        if h.kind == Kind::Hello {
            return self.hello(from, h);
        }
        let peer = &mut self.peers[from as usize];
        match h.kind {
            Kind::Hello => unreachable!("handled above"),
            Kind::Eager | Kind::Rts | Kind::Ready => {
                if h.seq != peer.expected_seq {
                    return Err(ErrorKind::Protocol(format!(
                        "frame {} from rank {from} arrived when {} was due",
                        h.seq, peer.expected_seq
                    )).into());
                }
                peer.expected_seq += 1;
                match h.kind {
                    Kind::Eager => {
                        let limit = peer.hello.map_or(0, |p| p.eager_limit);
                        let cost = eager_cost(frame.payload.len());
                        if frame.payload.len() as u64 > limit {
                            return Err(ErrorKind::Protocol(format!(
                                "eager message of {} bytes from rank {from}, above its {limit}-byte limit",
                                frame.payload.len()
                            )).into());
                        }
                        if peer.credit_in_use + cost > self.config.eager_credit {
                            return Err(ErrorKind::Protocol(format!(
                                "rank {from} sent {} bytes of eager data beyond the {} granted",
                                peer.credit_in_use + cost - self.config.eager_credit,
                                self.config.eager_credit
                            )).into());
                        }
                        peer.credit_in_use += cost;
                        let envelope = self.frame_envelope(&h, frame.payload.len() as u64)?;
                        self.arrive(Unexpected { envelope, body: Body::Data { credit: cost, data: frame.payload } })
                    }
                    Kind::Rts => {
                        if h.recv_id == RTS_UNSOLICITED {
                            let envelope = self.frame_envelope(&h, h.data_len)?;
                            return self.arrive_unsolicited(from, h.send_id, envelope);
                        }
                        let granted = self.config.rndv_slots.saturating_add(peer.extra_slots);
                        if peer.slots_in_use >= granted {
                            return Err(ErrorKind::Protocol(format!(
                                "rank {from} sent more than the {granted} rendezvous requests granted"
                            )).into());
                        }
                        let envelope = self.frame_envelope(&h, h.data_len)?;
                        self.peers[from as usize].slots_in_use += 1;
                        let u = Unexpected { envelope, body: Body::Rts { send_id: h.send_id } };
                        match h.recv_id {
                            0 => self.arrive(u),
                            1 => self.arrive_ready_request(u, h.send_id),
                            other => return Err(ErrorKind::Protocol(format!("RTS from rank {from} with mode {other}")).into()),
                        }
                    }
                    _ => {
                        // A ready message is sent whole only up to its
                        // sender's eager threshold (larger ones ask first),
                        // as eager messages are.
                        let limit = peer.hello.map_or(0, |p| p.eager_limit);
                        if frame.payload.len() as u64 > limit {
                            return Err(ErrorKind::Protocol(format!(
                                "ready message of {} bytes from rank {from}, above its {limit}-byte limit",
                                frame.payload.len()
                            )).into());
                        }
                        self.arrive_ready(h, frame.payload)?
                    }
                }
            }
            Kind::Cts => {
                match self.sends.get(&h.send_id) {
                    Some(PendingSend::Rendezvous { dest, .. }) if *dest == from => {}
                    Some(_) => return Err(ErrorKind::Protocol(format!("CTS from rank {from} for send {} it does not hold", h.send_id)).into()),
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
            Kind::RndvData if h.recv_id == 0 => self.unsolicited_data(from, h, frame.payload)?,
            Kind::RndvData => {
                let solicited = self.transfers.get(&h.recv_id).is_some_and(|t| t.send_id.is_none());
                if !solicited && peer.gave_up() {
                    // Data it had sent when it said it failed, for a
                    // transfer dropped then.
                    return Ok(());
                }
                if !solicited {
                    return Err(ErrorKind::Protocol(format!("rank {from} sent data for receive {} it was not asked for", h.recv_id)).into());
                }
                self.rendezvous_data(from, h.recv_id, h, frame.payload)?;
            }
            Kind::ReadyAck => {
                match self.sends.get(&h.send_id) {
                    Some(PendingSend::Ready { dest }) if *dest == from => {}
                    Some(PendingSend::Rendezvous { dest, ready: true, .. }) if *dest == from && h.data_len == 0 => {
                        self.peers[from as usize].slots += 1;
                        self.sends.remove(&h.send_id);
                        self.events.push_back(Event::SendDone { id: h.send_id, result: Err(ErrorKind::NotReady.into()) });
                        self.start_held(from);
                        return Ok(());
                    }
                    Some(_) => return Err(ErrorKind::Protocol(format!("ready answer from rank {from} for send {} it does not hold", h.send_id)).into()),
                    None => return self.unknown_send(from, h.send_id),
                }
                self.sends.remove(&h.send_id);
                let result = if h.data_len == 1 { Ok(()) } else { Err(ErrorKind::NotReady.into()) };
                self.events.push_back(Event::SendDone { id: h.send_id, result });
            }
            Kind::Credit => {
                // Credit comes back only for messages that have left this
                // rank (not for those still queued: a peer that gave those
                // back could make the queue grow without bound); slots
                // only for what this rank spent, and a finished rank may be
                // granted a bounded number more (see `grant_after_goodbye`).
                let credit = peer.credit.checked_add(h.data_len).filter(|&c| c.saturating_add(peer.queue.eager_credit()) <= peer.credit_granted);
                let most_slots = peer.slots_granted.saturating_add(MAX_AFTER_GOODBYE);
                let slots = peer.slots.checked_add(h.recv_id).filter(|&s| s <= most_slots);
                let unsolicited = peer.unsolicited.checked_add(h.seq).filter(|&u| u <= peer.unsolicited_granted);
                let (Some(credit), Some(slots), Some(unsolicited)) = (credit, slots, unsolicited) else {
                    return Err(ErrorKind::Protocol(format!(
                        "rank {from} gave back {} bytes of credit, {} of unsolicited credit and {} slots, \
                         more than this rank spent",
                        h.data_len, h.seq, h.recv_id
                    )).into());
                };
                peer.credit = credit;
                peer.slots = slots;
                peer.unsolicited = unsolicited;
                self.start_held(from);
            }
            Kind::Bye => match h.data_len {
                0 | 1 => self.peer_finished(from, h.data_len == 1, h.seq)?,
                _ => self.fail_peer(
                    from,
                    Error::process_failed(from, "it found this rank in breach of the protocol and cut it off"),
                ),
            },
            Kind::Ping => {}
        }
        Ok(())
    }

    pub(super) fn hello(&mut self, from: u32, h: Header) -> Result<()> {
        let size = self.peers.len() as u64;
        let peer = &mut self.peers[from as usize];
        if peer.hello.is_some() {
            return Err(ErrorKind::Protocol(format!("a second hello from rank {from}")).into());
        }
        if h.context != self.config.job {
            return Err(ErrorKind::Protocol(format!("rank {from} belongs to job {:#x}, not {:#x}", h.context, self.config.job)).into());
        }
        if h.data_len != size {
            return Err(ErrorKind::Protocol(format!("rank {from} is in a world of {} ranks, not {size}", h.data_len)).into());
        }
        let accepts = u64::from(h.desc_len);
        if accepts < MIN_PAYLOAD as u64 {
            return Err(ErrorKind::Protocol(format!(
                "rank {from} accepts frames of {accepts} payload bytes, below the {MIN_PAYLOAD} every rank must accept"
            )).into());
        }
        let native = h.sig_hash == self.config.repr_id.unwrap_or_else(native_repr_id);
        // Its eager messages are refused above what this rank accepts in a
        // frame, whatever limit it announces for itself.
        let eager_limit = h.send_id.min(self.config.max_payload() as u64);
        peer.hello = Some(PeerHello { eager_limit, accepts, native });
        if h.recv_id == 0 {
            return Err(ErrorKind::Protocol(format!("rank {from} grants no rendezvous slot: no large message could reach it")).into());
        }
        peer.credit_granted = h.sig_len.min(MAX_GRANTED_CREDIT);
        peer.slots_granted = h.recv_id.min(MAX_GRANTED_SLOTS);
        peer.credit = peer.credit_granted;
        peer.slots = peer.slots_granted;
        peer.unsolicited_granted = h.seq.min(MAX_GRANTED_CREDIT);
        peer.unsolicited = peer.unsolicited_granted;
        let repr = self.repr_for(from);
        self.events.push_back(Event::Connected { rank: from, repr });
        self.start_held(from);
        Ok(())
    }

    /// A chunk of the data of `transfer`, which came from `from`.
    pub(super) fn rendezvous_data(&mut self, from: u32, transfer: ReqId, h: Header, payload: Bytes) -> Result<()> {
        let Some(t) = self.transfers.get_mut(&transfer).filter(|t| t.envelope.source == from && !t.complete) else {
            return Err(ErrorKind::Protocol(format!("rank {from} sent data for a message it was not asked for")).into());
        };
        let total = t.envelope.wire_len();
        check_next_chunk(from, &h, payload.len(), total, t.received.len())?;
        if let Some(owner) = t.push(payload, &mut self.pool, self.config.stream_step) {
            self.events.push_back(Event::DataArrived { id: owner });
        }
        if t.received.len() < total {
            return Ok(());
        }
        t.complete = true;
        match t.owner {
            Some(id) => {
                let t = self.transfers.remove(&transfer).expect("present");
                self.events.push_back(Event::RecvDone { id, result: t.into_result(&mut self.pool) });
            }
            None if t.dropped => self.end_dropped(transfer),
            None => {
                // Its receive was withdrawn: the data takes the message's
                // place in the queue, or waits in the transfer while a
                // matched probe holds the message. Data that was dropped
                // (see `withdraw_recv`) stays so: the message stays in
                // flight, and whoever receives it gets `ErrorKind::Truncate`.
                // So does the data of an unsolicited message that no
                // receive has matched yet, which holds its credit until one
                // does.
                if matches!(t.received, Received::Discarded { .. }) || t.credit > 0 {
                    return Ok(());
                }
                let queued = self.unexpected.find_mut(|u| matches!(u.body, Body::InFlight { transfer: x } if x == transfer));
                if let Some(u) = queued {
                    let t = self.transfers.remove(&transfer).expect("present");
                    if let Ok(data) = t.received.into_kept(&mut self.pool) {
                        u.body = Body::Data { data, credit: 0 };
                    }
                }
            }
        }
        Ok(())
    }

    /// The RTS of a message whose data `from` sends without waiting for a
    /// CTS (see [`Config::unsolicited_credit`]): its transfer starts with
    /// the data that came before it, if any, and the message takes its
    /// place in the matching order.
    pub(super) fn arrive_unsolicited(&mut self, from: u32, send_id: u64, envelope: Envelope) -> Result<()> {
        let key = (from, send_id);
        if self.unsolicited.contains_key(&key) {
            return Err(ErrorKind::Protocol(format!("rank {from} sent a second RTS for send {send_id}")).into());
        }
        let total = envelope.wire_len();
        let early = match self.early.remove(&key) {
            Some(early) if early.total == total => early,
            Some(early) => {
                return Err(ErrorKind::Protocol(format!(
                    "rank {from} announced {total} bytes for send {send_id} after sending data of {}",
                    early.total
                )).into())
            }
            None => {
                let credit = self.charge_unsolicited(from, total)?;
                Early { total, received: Received::Nothing, credit }
            }
        };
        self.next_unsolicited += 1;
        let transfer = UNSOLICITED_KEYS | self.next_unsolicited;
        let t = Transfer::unsolicited(envelope, send_id, early);
        if !t.complete {
            self.unsolicited.insert(key, transfer);
        }
        self.transfers.insert(transfer, t);
        self.arrive(Unexpected { envelope, body: Body::InFlight { transfer } });
        Ok(())
    }

    /// A chunk of unsolicited data: for the transfer its RTS started, or,
    /// before that RTS, kept for it within the sender's unsolicited credit.
    pub(super) fn unsolicited_data(&mut self, from: u32, h: Header, payload: Bytes) -> Result<()> {
        let key = (from, h.send_id);
        if let Some(&transfer) = self.unsolicited.get(&key) {
            self.rendezvous_data(from, transfer, h, payload)?;
            if self.transfers.get(&transfer).is_none_or(|t| t.complete) {
                self.unsolicited.remove(&key);
            }
            return Ok(());
        }
        if !self.early.contains_key(&key) {
            if self.peers[from as usize].gave_up() || self.sends_no_more(from) {
                // No RTS can claim it: its sender failed (this is data it
                // had sent when it said so) or all its messages are in.
                return Ok(());
            }
            let credit = self.charge_unsolicited(from, h.data_len)?;
            self.early.insert(key, Early { total: h.data_len, received: Received::Nothing, credit });
        }
        let early = self.early.get_mut(&key).expect("inserted above");
        if payload.is_empty() {
            return Err(ErrorKind::Protocol(format!("empty unsolicited data from rank {from}")).into());
        }
        check_next_chunk(from, &h, payload.len(), early.total, early.received.len())?;
        // The credit it holds covers the whole message.
        early.received.push(payload, early.total, early.total, true, &mut self.pool);
        Ok(())
    }

    /// Charges `from`'s unsolicited credit for a message of `total` bytes
    /// of data (and [`UNSOLICITED_OVERHEAD`]), or fails it for sending beyond what this
    /// rank granted. Returns the charge.
    fn charge_unsolicited(&mut self, from: u32, total: u64) -> Result<u64> {
        let granted = self.config.unsolicited_credit;
        let peer = &mut self.peers[from as usize];
        let cost = unsolicited_cost(total);
        if total == 0 || peer.unsolicited_in_use.saturating_add(cost) > granted {
            return Err(ErrorKind::Protocol(format!(
                "rank {from} sent a {total}-byte message unsolicited with {} bytes of the {granted} granted in use",
                peer.unsolicited_in_use
            )).into());
        }
        peer.unsolicited_in_use += cost;
        Ok(cost)
    }

    /// An answer for a send that is not pending: harmless if the send was
    /// failed because the peer finished meanwhile, a protocol error otherwise.
    pub(super) fn unknown_send(&self, from: u32, send_id: u64) -> Result<()> {
        if self.peers[from as usize].finished || self.gave_up {
            // Or this rank failed and dropped it (see `farewell`).
            return Ok(());
        }
        Err(ErrorKind::Protocol(format!("answer from rank {from} for unknown send {send_id}")).into())
    }

    /// The envelope of a data frame whose message is `total` bytes (see
    /// [`Envelope::from_header`]), numbered in its sender's order among
    /// every message of the sender's that arrived, those of a rank of this
    /// process handed over without frames included (see
    /// [`local`](super::local)).
    fn frame_envelope(&self, h: &Header, total: u64) -> Result<Envelope> {
        let mut envelope = Envelope::from_header(h, total)?;
        envelope.seq += self.peers[h.source as usize].local_arrivals;
        Ok(envelope)
    }

    /// A data message arrived: match it to the first posted receive that
    /// accepts it, or queue it.
    pub(super) fn arrive(&mut self, u: Unexpected) {
        match self.posted.take_match(&u.envelope) {
            Some((id, limit)) => self.take_unexpected(id, u, limit),
            None if self.is_late(&u.envelope) => self.drop_unexpected(u),
            None => {
                tracing::trace!(rank = self.rank, source = u.envelope.source, tag = u.envelope.tag, "queued unexpected");
                self.unexpected.push_back(u);
            }
        }
    }

    /// A ready-mode rendezvous request: answered at once, by a CTS if a
    /// receive is posted, "not ready" otherwise.
    pub(super) fn arrive_ready_request(&mut self, u: Unexpected, send_id: u64) {
        // A rank that has said goodbye takes no ready message (see
        // `arrive_ready`).
        let posted = if self.finished { None } else { self.posted.take_match(&u.envelope) };
        match posted {
            Some((id, limit)) => self.take_unexpected(id, u, limit),
            None => {
                let source = u.envelope.source;
                let p = &mut self.peers[source as usize];
                p.slots_in_use = p.slots_in_use.saturating_sub(1);
                let header = Header { send_id, data_len: 0, ..Header::control(Kind::ReadyAck, self.rank) };
                self.push_frame(source, Frame::control(header));
            }
        }
    }

    pub(super) fn arrive_ready(&mut self, h: Header, data: Bytes) -> Result<()> {
        let envelope = self.frame_envelope(&h, data.len() as u64)?;
        // A rank that has said goodbye takes no ready message, though it
        // may have receives posted: its sender, which has its goodbye
        // first, fails the send.
        let posted = if self.finished { None } else { self.posted.take_match(&envelope) };
        let taken = match posted {
            Some((id, _)) => {
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
}

/// Checks that a chunk of `len` bytes of rendezvous data from `from`, with
/// header `h`, is the next of a `total`-byte message of which `got` bytes
/// are in.
fn check_next_chunk(from: u32, h: &Header, len: usize, total: u64, got: u64) -> Result<()> {
    if h.data_len != total || h.seq != got || got + len as u64 > total {
        return Err(ErrorKind::Protocol(format!(
            "rendezvous data from rank {from}: {len} bytes at offset {} of {}, for a {total}-byte message with {got} bytes in",
            h.seq, h.data_len
        )).into());
    }
    Ok(())
}
