//! The end of a rank or a peer: goodbyes, closing, and failing what
//! depended on a peer that failed or finished.

use super::*;

impl Engine {
    /// Says goodbye to every peer, at once: this rank posts no more
    /// receives, so the peers fail their sends that need it to match. The
    /// goodbye says how many data frames this rank sends in all: its sends
    /// still waiting for credit or slots follow it under the usual flow
    /// control (and if the peer finishes first, they fail and a second
    /// goodbye lowers the count). `failed` says the program failed rather
    /// than returned: this rank then serves nothing more, and its sends
    /// still waiting, or waiting for a clear-to-send, or streaming
    /// rendezvous data, fail with [`ErrorKind::Finalized`]. Otherwise the
    /// messages its receives took though too long for them count as
    /// received first, and their senders are answered ahead of the goodbye.
    pub fn farewell(&mut self, failed: bool) {
        if self.finished {
            return;
        }
        if !failed {
            self.answer_received_before_goodbye();
        }
        self.finished = true;
        self.gave_up = failed;
        if failed {
            let mut dropped: Vec<ReqId> = Vec::new();
            for (r, p) in self.peers.iter_mut().enumerate() {
                if r as u32 != self.rank {
                    dropped.extend(p.held.drain(..).map(|h| h.id));
                    dropped.extend(p.bulk.drain(..).map(|b| b.send_id));
                }
            }
            let me = self.rank;
            let waiting = |s: &PendingSend| matches!(s, PendingSend::Rendezvous { dest, .. } if *dest != me);
            let rendezvous: Vec<ReqId> = self.sends.iter().filter(|(_, s)| waiting(s)).map(|(&id, _)| id).collect();
            for id in &rendezvous {
                self.sends.remove(id);
            }
            dropped.extend(rendezvous);
            for id in dropped {
                self.events.push_back(Event::SendDone { id, result: Err(ErrorKind::Finalized.into()) });
            }
        }
        // Sends to itself that still need a match never get one now, nor
        // the sends of ranks of this process waiting here.
        let me = self.rank;
        self.fail_sends_to(me, &Self::own_match_lost(me));
        self.fail_sends_waiting_here(&self.local_sends_end());
        for dest in 0..self.size() {
            if dest != self.rank {
                let p = &self.peers[dest as usize];
                let last = p.next_seq + p.held.len() as u64;
                self.say_goodbye(dest, last);
            }
        }
    }

    /// Before a goodbye: the messages this rank's receives took though too
    /// long for them count as received, the errors taken or not (nothing
    /// receives after the goodbye, so none goes back to the queue), and
    /// every sender of such a message still waiting for its clear-to-send
    /// gets it now, ahead of the goodbye (which fails the sends still
    /// waiting for this rank to match them), whatever the transfers being
    /// dropped already: each such request held one of the rendezvous slots
    /// the peer was granted, so the transfers being dropped stay within
    /// [`Config::rndv_slots`] and those slots
    /// ([`rendezvous_slots_granted`](Engine::rendezvous_slots_granted)).
    /// Answers stop while half of [`MAX_QUEUED_FRAMES`] answers wait for the
    /// peer (a peer of tens of thousands of such requests, granted slots
    /// after its own goodbye): the rest fail, as before a goodbye they
    /// would have.
    fn answer_received_before_goodbye(&mut self) {
        let truncated: Vec<ReqId> = self.truncated.keys().copied().collect();
        for id in truncated {
            self.consume_truncated(id);
        }
        for source in 0..self.size() {
            while self.peers[source as usize].queue.answers() < MAX_QUEUED_FRAMES / 2 {
                let Some((id, envelope, send_id)) = self.peers[source as usize].to_drop.pop_front() else { break };
                self.answer_to_drop(id, envelope, send_id, true);
            }
        }
    }

    /// The error of a send to itself that needs a match once this rank's
    /// program has returned.
    pub(super) fn own_match_lost(me: u32) -> Error {
        Error::process_failed(me, "this rank's program returned before matching its send to itself")
    }

    /// Queues this rank's goodbye to `dest`, saying it sends `last` data
    /// frames in all.
    pub(super) fn say_goodbye(&mut self, dest: u32, last: u64) {
        let header = Header { data_len: u64::from(self.gave_up), seq: last, ..Header::control(Kind::Bye, self.rank) };
        self.peers[dest as usize].announced = Some(last);
        self.push_frame(dest, Frame::control(header));
    }

    /// Closes the engine: every operation still waiting fails with
    /// [`ErrorKind::Finalized`], and every later one too, and the frames still
    /// queued are dropped. A live peer still gets this rank's last goodbye
    /// once its link can take it, even if an earlier one was among the
    /// frames dropped: it counts the data frames that did go to the peer,
    /// and says this rank failed if anything the peer could wait for was
    /// dropped (a message, rendezvous data, an answer to a request).
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        let me = self.rank;
        for dest in 0..self.size() {
            if dest == me || self.peers[dest as usize].failed.is_some() {
                continue;
            }
            let waits = self.sends.values().any(|s| matches!(s, PendingSend::Rendezvous { dest: d, .. } if *d == dest));
            let p = &mut self.peers[dest as usize];
            let is_data = |f: &&Frame| matches!(f.header.kind, Kind::Eager | Kind::Rts | Kind::Ready);
            // Data frames go in order: the first one still queued is the
            // first the peer will not get.
            let unsent = p.queue.iter().find(is_data).map(|f| f.header.seq);
            let sent = unsent.unwrap_or(p.next_seq);
            // A chunk the transport gave back is rendezvous data dropped
            // too, though its send completed when the chunk was taken.
            let dropped = unsent.is_some() || waits || !p.held.is_empty() || !p.bulk.is_empty() || p.bulk_back.is_some();
            let goodbye_queued = p.queue.iter().any(|f| f.header.kind == Kind::Bye);
            if goodbye_queued || dropped || p.announced != Some(sent) {
                let failed = self.gave_up || dropped;
                let header = Header { data_len: u64::from(failed), seq: sent, ..Header::control(Kind::Bye, me) };
                p.parting = Some(Frame::control(header));
                p.announced = Some(sent);
            }
        }
        self.closed = true;
        self.next_tick = None;
        self.fail_sends_waiting_here(&self.local_sends_end());
        for id in self.posted.remove_where(|_| true) {
            self.events.push_back(Event::RecvDone { id, result: Err(ErrorKind::Finalized.into()) });
        }
        self.unsolicited.clear();
        self.early.clear();
        self.truncated.clear();
        for (_, t) in self.transfers.drain() {
            if let Some(id) = t.owner {
                self.events.push_back(Event::RecvDone { id, result: Err(ErrorKind::Finalized.into()) });
            }
        }
        let mut failed: Vec<ReqId> = self.sends.drain().map(|(id, _)| id).collect();
        for p in &mut self.peers {
            failed.extend(p.held.drain(..).map(|h| h.id));
            failed.extend(p.bulk.drain(..).map(|b| b.send_id));
            p.queue.clear();
        }
        for id in failed {
            self.events.push_back(Event::SendDone { id, result: Err(ErrorKind::Finalized.into()) });
        }
        self.unexpected.clear();
        for dest in 0..self.size() {
            if self.peers[dest as usize].parting.is_some() {
                self.schedule(dest);
            }
        }
    }

    /// Whether this rank has said [`farewell`](Engine::farewell): it posts
    /// no more receives.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Whether [`close`](Engine::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// `rank` has finished, after sending `last` data frames in all: fail
    /// what needs it to match now, and what waits for its messages once the
    /// last has arrived. A later goodbye may lower the count (some of its
    /// sends failed), never raise it. If it `failed`, it serves nothing
    /// more: its rendezvous requests are never answered and its data in
    /// flight never completes.
    pub(super) fn peer_finished(&mut self, rank: u32, failed: bool, last: u64) -> Result<()> {
        let p = &mut self.peers[rank as usize];
        if let Some(announced) = p.final_seq.filter(|&announced| last > announced) {
            return Err(ErrorKind::Protocol(format!("rank {rank} raised the count in its goodbye from {announced} to {last}")).into());
        }
        if failed && last > p.expected_seq {
            // A rank that fails drops what it had not sent and counts what
            // it did, all of which went ahead of this goodbye (data frames
            // and goodbyes share one ordered lane): data frames still to
            // come would be requests nobody serves, each one more walk of
            // the queues to drop it.
            return Err(ErrorKind::Protocol(format!(
                "rank {rank} said it failed with data frames {} to {last} still to come",
                p.expected_seq
            ))
            .into());
        }
        let again = p.finished;
        p.finished = true;
        p.final_seq = Some(last.max(p.expected_seq));
        let error = if failed { Self::gave_up_error(rank) } else { Error::process_failed(rank, "its program returned before matching") };
        let p = &mut self.peers[rank as usize];
        if failed && !p.said_it_failed {
            p.said_it_failed = true;
            self.drop_served_by(rank, &error);
        }
        if !again {
            self.fail_sends_to(rank, &error);
            // What this rank still held for it has failed: if this rank
            // already counted it in its own goodbye, the count goes down.
            let p = &self.peers[rank as usize];
            if p.announced.is_some_and(|announced| announced > p.next_seq) {
                let last = p.next_seq;
                self.say_goodbye(rank, last);
            }
            if self.sends_no_more(rank) {
                self.fail_recvs_from(rank, &error);
            }
        }
        if self.sends_no_more(rank) {
            // Unsolicited data no RTS can claim any more.
            self.forget_early(rank);
        }
        Ok(())
    }

    /// The error of what waits for a rank that said it failed.
    pub(super) fn gave_up_error(rank: u32) -> Error {
        Error::process_failed(rank, "it failed before matching")
    }

    /// Drops what only `rank` could complete: its unanswered rendezvous
    /// requests, and the transfers of its data still arriving (a receive
    /// that owns one fails).
    pub(super) fn drop_served_by(&mut self, rank: u32, error: &Error) {
        let failed: Vec<ReqId> =
            self.transfers.iter().filter(|(_, t)| t.envelope.source == rank && !t.complete).map(|(id, _)| *id).collect();
        for transfer in failed {
            let t = self.transfers.remove(&transfer).expect("listed above");
            self.peers[rank as usize].free_unsolicited(t.credit);
            match t.owner {
                Some(id) => {
                    self.events.push_back(Event::RecvDone { id, result: Err(error.clone()) });
                }
                None => self.unexpected.retain(|u| !matches!(u.body, Body::InFlight { transfer: x } if x == transfer)),
            }
        }
        self.unexpected.retain(|u| !(u.envelope.source == rank && matches!(u.body, Body::Rts { .. })));
        // A message of a rank of this process waits for its match with its
        // data in hand: its send fails with this failure.
        self.fail_sends_waiting_here_of(|source| source == rank, error);
        self.unsolicited.retain(|&(source, _), _| source != rank);
        let p = &mut self.peers[rank as usize];
        p.drops_in_flight = 0;
        p.to_drop.clear();
        self.forget_early(rank);
    }

    /// Drops the unsolicited data from `rank` that no RTS has claimed,
    /// freeing its credit.
    pub(super) fn forget_early(&mut self, rank: u32) {
        let mut freed = 0;
        self.early.retain(|&(source, _), early| {
            if source == rank {
                freed += early.credit;
            }
            source != rank
        });
        self.peers[rank as usize].free_unsolicited(freed);
    }

    /// `rank` has failed (its connection broke, it broke the protocol, or it
    /// went silent): every operation that depends on it fails with
    /// [`Error::peer_failure`] of `cause`, and its later frames are dropped.
    pub fn fail_peer(&mut self, rank: u32, cause: Error) {
        if rank == self.rank || rank as usize >= self.peers.len() || self.peers[rank as usize].failed.is_some() {
            return;
        }
        tracing::warn!(rank = self.rank, peer = rank, cause = %cause, "peer failed");
        let error = Error::peer_failure(rank as usize, cause);
        let me = self.rank;
        let p = &mut self.peers[rank as usize];
        p.failed = Some(error.clone());
        p.queue.clear();
        p.bulk_back = None;
        let bulk: Vec<ReqId> = p.bulk.drain(..).map(|b| b.send_id).collect();
        // Tell it, so that it does not wait for this rank (best effort: the
        // transport may already have lost it).
        p.parting = Some(Frame::control(Header { data_len: 2, ..Header::control(Kind::Bye, me) }));
        self.schedule(rank);
        for id in bulk {
            self.events.push_back(Event::SendDone { id, result: Err(error.clone()) });
        }
        self.fail_sends_to(rank, &error);
        self.fail_recvs_from(rank, &error);
        self.drop_served_by(rank, &error);
        self.events.push_back(Event::PeerFailed { rank });
    }

    /// Rank `rank`'s stream of frames has ended, every frame of it handled:
    /// a peer that has not said goodbye by then never will, and fails; so
    /// does one whose goodbye announced data frames that have not come
    /// (they travel on that stream), rather than leave the receives that
    /// wait for them waiting for ever. A closed engine fails nobody: it
    /// drops every frame, a goodbye too.
    pub fn peer_ended(&mut self, rank: u32) {
        let Some(p) = self.peers.get(rank as usize).filter(|_| !self.closed) else { return };
        if !p.finished {
            self.fail_peer(rank, Error::process_failed(rank, "its stream ended before its goodbye"));
        } else if !self.sends_no_more(rank) {
            self.fail_peer(rank, Error::process_failed(rank, "its stream ended before the messages its goodbye announced"));
        }
    }

    /// Every stream of rank `rank`'s has ended, every frame of them
    /// handled (rendezvous data may travel on a stream of its own, see
    /// [`peer_ended`](Engine::peer_ended) for the one with its messages):
    /// beyond what `peer_ended` fails it for, a peer fails if it still
    /// owes data of messages it started (rendezvous data this rank asked
    /// for, the rest of a message whose first data came, the data of a
    /// request to send still queued), which can no longer come, rather
    /// than leave their receives waiting for ever. Its messages that came
    /// whole stay to be received.
    pub fn peer_streams_ended(&mut self, rank: u32) {
        self.peer_ended(rank);
        let Some(p) = self.peers.get(rank as usize).filter(|_| !self.closed) else { return };
        if p.failed.is_none() && queries::owes_data(&self.transfers, &self.early, &self.unexpected, rank) {
            self.fail_peer(rank, Error::process_failed(rank, "its streams ended before the data of messages it had started"));
        }
    }

    /// Fails the sends that need `rank` to match or answer.
    pub(super) fn fail_sends_to(&mut self, rank: u32, error: &Error) {
        let error = || error.clone();
        let failed_sends: Vec<ReqId> = self.sends.iter().filter(|(_, s)| s.dest() == rank).map(|(id, _)| *id).collect();
        for id in failed_sends {
            self.sends.remove(&id);
            self.events.push_back(Event::SendDone { id, result: Err(error()) });
        }
        let held: Vec<ReqId> = self.peers[rank as usize].held.drain(..).map(|h| h.id).collect();
        for id in held {
            self.events.push_back(Event::SendDone { id, result: Err(error()) });
        }
    }

    /// Fails the receives that name `rank`, and reports the any-source
    /// receives that only this rank can now match.
    pub(super) fn fail_recvs_from(&mut self, rank: u32, error: &Error) {
        let error = || error.clone();
        for id in self.posted.remove_where(|spec| spec.source == Some(rank)) {
            self.events.push_back(Event::RecvDone { id, result: Err(error()) });
        }
        self.report_orphans();
    }
}
