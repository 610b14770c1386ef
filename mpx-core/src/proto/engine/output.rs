//! Output, per peer: queueing frames, handing them to the transport as it
//! can take them, and giving back what it could not.

use super::*;

impl Engine {
    /// Queues `frame` for `dest`; frames to self are handled at once.
    pub(super) fn push_frame(&mut self, dest: u32, frame: Frame) {
        if dest == self.rank {
            self.local.push_back(frame);
            return;
        }
        let p = &mut self.peers[dest as usize];
        if p.failed.is_some() {
            return;
        }
        p.queue.push_back(frame);
        let too_many = p.queue.answers() > MAX_QUEUED_FRAMES;
        self.schedule(dest);
        if too_many {
            self.fail_peer(dest, Error::process_failed(dest, "it stopped reading: too many answers wait for it"));
        }
    }

    pub(super) fn schedule(&mut self, dest: u32) {
        let p = &mut self.peers[dest as usize];
        let held_back = p.blocked && p.bulk_blocked;
        if !p.scheduled && !held_back {
            p.scheduled = true;
            self.writable.push_back(dest);
        }
    }

    /// Handles the frames this rank sent itself, one after another: a
    /// frame whose handling sends more (calling this again) leaves them to
    /// the loop already running, so a batch of any size takes no stack.
    pub(super) fn handle_local(&mut self) {
        if self.local.is_empty() || std::mem::replace(&mut self.handling_local, true) {
            return;
        }
        // The flag is cleared however the loop ends: a panic in it must not
        // leave later frames to a loop that no longer runs.
        let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while let Some(frame) = self.local.pop_front() {
                self.local_arrival |= matches!(frame.header.kind, Kind::Eager | Kind::Rts | Kind::Ready);
                // Frames the engine made itself cannot break the protocol.
                let _ = self.handle_peer_frame(self.rank, frame);
            }
        }));
        self.handling_local = false;
        if let Err(panic) = handled {
            std::panic::resume_unwind(panic);
        }
    }

    /// The next peer with frames to transmit (skipping peers whose transport
    /// is blocked for what they have); call
    /// [`poll_transmit`](Engine::poll_transmit) for it until it returns
    /// `None`.
    pub fn poll_writable(&mut self) -> Option<u32> {
        while let Some(dest) = self.writable.pop_front() {
            let p = &mut self.peers[dest as usize];
            p.scheduled = false;
            let control = !p.blocked && (!p.queue.is_empty() || p.parting.is_some());
            let bulk = !p.bulk_blocked && (p.bulk_back.is_some() || !p.bulk.is_empty());
            if control || bulk {
                return Some(dest);
            }
        }
        None
    }

    /// The next frame for `dest`: queued frames first, then the next chunk
    /// of rendezvous data, from each of the peer's transfers in turn. A
    /// rendezvous send completes when its last chunk is taken. While the
    /// transport refuses rendezvous data only, control frames and messages
    /// still go.
    pub fn poll_transmit(&mut self, dest: u32) -> Option<Frame> {
        let closed = self.closed;
        let p = self.peers.get_mut(dest as usize)?;
        if p.failed.is_some() || closed {
            return if p.blocked { None } else { p.parting.take() };
        }
        if !p.blocked {
            if let Some(frame) = p.queue.pop_front() {
                p.sent = true;
                return Some(frame);
            }
        }
        if p.bulk_blocked {
            return None;
        }
        if let Some(frame) = p.bulk_back.take() {
            p.sent = true;
            return Some(frame);
        }
        let accepts = p.hello.map_or(u64::MAX, |h| h.accepts).max(1);
        let chunk = (self.config.rndv_chunk.max(1) as u64).min(accepts) as usize;
        let b = p.bulk.front_mut()?;
        let n = chunk.min(b.data.len() - b.offset);
        let header = Header {
            recv_id: b.recv_id,
            send_id: b.send_id,
            seq: b.offset as u64,
            data_len: b.data.len() as u64,
            ..Header::control(Kind::RndvData, self.rank)
        };
        let frame = Frame { header, payload: b.data.slice(b.offset..b.offset + n) };
        b.offset += n;
        p.sent = true;
        if b.offset == b.data.len() {
            let done = p.bulk.pop_front().expect("the front was just used");
            self.events.push_back(Event::SendDone { id: done.send_id, result: Ok(()) });
        } else {
            // Transfers to one peer take turns, a chunk each: a small one
            // waits for at most a chunk of each transfer ahead of it.
            p.bulk.rotate_left(1);
        }
        Some(frame)
    }

    /// Gives back a frame the transport could not take for `dest`: it goes
    /// out first once the transport calls [`writable`](Engine::writable).
    /// A refused chunk of rendezvous data holds back only rendezvous data
    /// (the transport may carry it on a stream of its own); any other
    /// refused frame holds back everything but rendezvous data.
    pub fn unsend(&mut self, dest: u32, frame: Frame) {
        let closed = self.closed;
        let Some(p) = self.peers.get_mut(dest as usize) else { return };
        if p.failed.is_some() || closed {
            // The last frame for the peer: it waits for the link again.
            p.parting = Some(frame);
            p.blocked = true;
            return;
        }
        if frame.header.kind == Kind::RndvData {
            p.bulk_back = Some(frame);
            p.bulk_blocked = true;
        } else {
            p.queue.push_front(frame);
            p.blocked = true;
        }
        // What is not held back may still go.
        self.schedule(dest);
    }

    /// The transport can take frames for `dest` again.
    pub fn writable(&mut self, dest: u32) {
        let Some(p) = self.peers.get_mut(dest as usize) else { return };
        p.blocked = false;
        p.bulk_blocked = false;
        self.schedule(dest);
    }

    /// Payload bytes queued for `dest` (not counting rendezvous data not yet
    /// cut into chunks, which the sends own).
    pub fn queued_bytes(&self, dest: u32) -> usize {
        self.peers.get(dest as usize).map_or(0, |p| p.queue.bytes())
    }

    /// Whether nothing this rank started is still on its way: no send
    /// waits for an answer, credit or the transport, and no frame waits for
    /// a live peer.
    pub fn is_flushed(&self) -> bool {
        self.sends.is_empty()
            && self.peers.iter().all(|p| {
                p.failed.is_some() || (p.held.is_empty() && p.queue.is_empty() && p.bulk.is_empty() && p.bulk_back.is_none())
            })
    }

    /// Whether [`poll_writable`](Engine::poll_writable) or
    /// [`poll_event`](Engine::poll_event) may have something, or
    /// [`take_local_arrival`](Engine::take_local_arrival) is true: when
    /// not, the first two return `None`.
    #[inline]
    pub fn has_output(&self) -> bool {
        !self.writable.is_empty() || !self.events.is_empty() || self.local_arrival
    }

    /// Whether a message this rank sent itself has arrived (matched or
    /// queued) since the last call: no frame comes with such a message, so
    /// whoever waits for arrivals (probes) must be told this way. Part of
    /// [`has_output`](Engine::has_output) until taken.
    pub fn take_local_arrival(&mut self) -> bool {
        std::mem::take(&mut self.local_arrival)
    }

    /// The next completion.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}
