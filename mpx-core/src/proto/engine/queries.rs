//! What the engine holds and knows about its peers: the queries the
//! runtime, tests and fuzzers ask.

use super::*;

impl Engine {
    /// Number of messages waiting in the unexpected queue.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// The envelopes of the messages waiting in the unexpected queue, in
    /// no particular order.
    pub fn unexpected_envelopes(&self) -> impl Iterator<Item = &Envelope> {
        self.unexpected.iter().map(|u| &u.envelope)
    }

    /// Bytes of data waiting in the unexpected queue.
    pub fn unexpected_bytes(&self) -> u64 {
        self.unexpected
            .iter()
            .map(|u| match &u.body {
                Body::Data { data, .. } | Body::Local { data, .. } => data.len() as u64,
                Body::Rts { .. } | Body::InFlight { .. } => 0,
            })
            .sum()
    }

    /// Bytes of eager data, sent under credit, waiting in the unexpected
    /// queue: never above the credit this rank grants all ranks together.
    /// (The rest of [`unexpected_bytes`](Engine::unexpected_bytes) is
    /// rendezvous data given back by abandoned receives, which asked for
    /// it.)
    pub fn unexpected_eager_bytes(&self) -> u64 {
        self.unexpected
            .iter()
            .map(|u| match &u.body {
                Body::Data { data, credit } if *credit > 0 => data.len() as u64,
                _ => 0,
            })
            .sum()
    }

    /// Bytes of `source`'s message data (type descriptions left out) this
    /// engine holds outside its eager credit: data gathered for rendezvous
    /// transfers, and queued messages that hold no credit (rendezvous data
    /// whose receive was withdrawn, messages given back by abandoned
    /// receives), but for unsolicited data no receive has matched yet
    /// ([`unsolicited_bytes`](Engine::unsolicited_bytes)). Never above what
    /// the receives that matched those messages hold (see
    /// [`post_recv_limited`](Engine::post_recv_limited)).
    pub fn rendezvous_bytes(&self, source: u32) -> u64 {
        let desc = |e: &Envelope| u64::from(e.desc_len);
        let gathered = self
            .transfers
            .values()
            .filter(|t| t.envelope.source == source && t.credit == 0)
            .map(|t| t.received.kept().saturating_sub(desc(&t.envelope)));
        let queued = self.unexpected.iter().filter(|u| u.envelope.source == source).map(|u| match &u.body {
            Body::Data { data, credit: 0 } => (data.len() as u64).saturating_sub(desc(&u.envelope)),
            _ => 0,
        });
        gathered.chain(queued).sum()
    }

    /// Bytes of unsolicited data (see [`Config::unsolicited_credit`]) from
    /// `source` held for messages no receive has matched yet, and
    /// unsolicited credit (bytes, each message counted with
    /// [`UNSOLICITED_OVERHEAD`]) those messages hold:
    /// the data never above the credit, the credit never above
    /// [`Config::unsolicited_credit`].
    pub fn unsolicited_bytes(&self, source: u32) -> (u64, u64) {
        let early = self.early.iter().filter(|(&(from, _), _)| from == source).map(|(_, e)| e.received.kept());
        let queued = self.transfers.values().filter(|t| t.envelope.source == source && t.credit > 0).map(|t| t.received.kept());
        let held = early.chain(queued).sum();
        (held, self.peers.get(source as usize).map_or(0, |p| p.unsolicited_in_use))
    }

    /// The rendezvous slots `source` has been granted here:
    /// [`Config::rndv_slots`], and those granted after its goodbye.
    pub fn rendezvous_slots_granted(&self, source: u32) -> u64 {
        self.peers.get(source as usize).map_or(0, |p| self.config.rndv_slots.saturating_add(p.extra_slots))
    }

    /// Transfers of `source`'s data answered only to drop it (see
    /// [`consume_truncated`](Engine::consume_truncated)) whose data is
    /// still to come: never above [`Config::rndv_slots`] before this rank's
    /// goodbye, nor above it and
    /// [`rendezvous_slots_granted`](Engine::rendezvous_slots_granted) after.
    pub fn transfers_to_drop(&self, source: u32) -> u64 {
        self.transfers.values().filter(|t| t.envelope.source == source && t.drop_in_flight).count() as u64
    }

    /// Eager credit (bytes, each message counted with
    /// [`EAGER_OVERHEAD`]) `source` has spent here and
    /// not been given back: never above [`Config::eager_credit`].
    pub fn credit_in_use(&self, source: u32) -> u64 {
        self.peers.get(source as usize).map_or(0, |p| p.credit_in_use)
    }

    /// Credit the messages `source`, a rank of this process, handed over
    /// without frames hold here ([`Engine::arrive_local`]): never above
    /// [`Config::eager_credit`] plus [`Config::unsolicited_credit`]. (The
    /// data of its messages whose sends wait for their match is not
    /// counted: it is its sender's, as many as the sends it started.)
    pub fn local_credit_in_use(&self, source: u32) -> u64 {
        self.peers.get(source as usize).map_or(0, |p| p.local_credit_in_use)
    }

    /// Number of receives posted and not yet matched.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Whether receive `id` is posted and waits on `source` (for tests and
    /// fuzzing: no receive may wait on a failed peer).
    pub fn waits_on(&self, id: ReqId, source: u32) -> bool {
        self.posted.spec(id).is_some_and(|s| s.source == Some(source))
            || self.transfers.values().any(|t| t.owner == Some(id) && t.envelope.source == source)
    }

    /// Whether any receive waits on `source`: a posted receive naming it,
    /// or a rendezvous transfer from it with an owner.
    pub fn anything_waits_on(&self, source: u32) -> bool {
        !self.posted.ids_where(|s| s.source == Some(source)).is_empty()
            || self.transfers.values().any(|t| t.owner.is_some() && t.envelope.source == source && !t.complete)
    }

    /// Whether `rank` has failed.
    pub fn is_failed(&self, rank: u32) -> bool {
        self.peers.get(rank as usize).is_some_and(|p| p.failed.is_some())
    }

    /// Why `rank` can no longer take part: it failed, or (when the operation
    /// needs it to match) it finished.
    pub fn dead(&self, rank: u32, need_match: bool) -> Option<Error> {
        let p = self.peers.get(rank as usize)?;
        self.gone(rank).or_else(|| (need_match && p.finished).then(|| Self::returned(rank)))
    }

    /// The error of every operation once the engine is closed, or of one
    /// that depends on `rank` once it has failed.
    pub(super) fn gone(&self, rank: u32) -> Option<Error> {
        if self.closed {
            return Some(ErrorKind::Finalized.into());
        }
        self.peers.get(rank as usize)?.failed.clone()
    }

    pub(super) fn returned(rank: u32) -> Error {
        Error::process_failed(rank, "its program returned")
    }

    /// Whether `rank` will send nothing more: it failed, or it finished and
    /// every data frame it announced in its goodbye has arrived.
    pub(super) fn sends_no_more(&self, rank: u32) -> bool {
        let p = &self.peers[rank as usize];
        p.failed.is_some() || (p.finished && p.final_seq.is_some_and(|last| p.expected_seq >= last))
    }

    /// Whether `rank` finished with more messages for this rank than this
    /// rank takes in unmatched (see [`MAX_AFTER_GOODBYE`]): the rest can
    /// arrive only as this rank receives those it holds.
    pub(super) fn stalled(&self, rank: u32) -> bool {
        let p = &self.peers[rank as usize];
        p.finished
            && p.failed.is_none()
            && !self.sends_no_more(rank)
            && p.extra_slots >= MAX_AFTER_GOODBYE
            && p.slots_in_use >= self.config.rndv_slots.saturating_add(p.extra_slots)
    }

    /// Why a receive naming a [stalled](Engine::stalled) peer fails.
    pub(super) fn stalled_reason() -> String {
        format!(
            "it finished with more messages for this rank than this rank takes in unmatched \
             ({MAX_AFTER_GOODBYE} rendezvous requests beyond its slots): receive those first"
        )
    }

    /// Why a receive naming `rank` can never be matched: it failed, or it
    /// finished and all it sent has arrived (or what it still sends cannot
    /// arrive before this rank receives what it holds of it).
    pub fn silent(&self, rank: u32) -> Option<Error> {
        self.peers.get(rank as usize)?;
        self.gone(rank)
            .or_else(|| self.sends_no_more(rank).then(|| Self::returned(rank)))
            .or_else(|| self.stalled(rank).then(|| Error::process_failed(rank, Self::stalled_reason())))
    }

    /// Whether `rank` will send this one nothing more: it failed, stalled,
    /// or finished with every data frame it announced in, or this engine
    /// is closed.
    pub fn sends_nothing_more(&self, rank: u32) -> bool {
        self.closed || self.sends_no_more(rank) || self.stalled(rank)
    }

    /// When every other rank will send nothing more (or there is none), the
    /// error an any-source receive that stays unmatched gets: only this
    /// rank's own messages could still match it.
    pub fn others_gone(&self) -> Option<Error> {
        self.gone_of(0..self.size())
    }

    /// [`others_gone`](Engine::others_gone) for the receives of `context`:
    /// on a context over a subgroup of the world
    /// ([`set_members`](Engine::set_members)), once every other member
    /// will send nothing more, whatever the ranks outside it do.
    pub fn others_gone_in(&self, context: u64) -> Option<Error> {
        match self.members.get(&context) {
            Some(members) => self.gone_of(members.iter().copied()),
            None => self.others_gone(),
        }
    }

    /// [`others_gone`](Engine::others_gone) of the ranks `ranks`.
    fn gone_of(&self, ranks: impl Iterator<Item = u32>) -> Option<Error> {
        if self.closed {
            return Some(ErrorKind::Finalized.into());
        }
        let mut last = None;
        for r in ranks.filter(|&r| r != self.rank && (r as usize) < self.peers.len()) {
            if !self.sends_nothing_more(r) {
                return None;
            }
            last = Some(r);
        }
        Some(match last {
            Some(rank) => Error::process_failed(rank, "every other rank (of the communicator) has finished or failed"),
            None => Error::process_failed(self.rank, "this rank is alone in its communicator: only its own messages could match"),
        })
    }

    /// Tells the engine that `context` is a communicator's over a subgroup
    /// of the world, whose members are the world ranks `members`: its
    /// any-source receives fail once those ranks are gone
    /// ([`others_gone_in`](Engine::others_gone_in)). Told before any
    /// receive is posted on it.
    ///
    /// ```
    /// use mpx::proto::engine::{Config, Engine};
    /// let mut engine = Engine::new(0, 3, Config::default())?;
    /// engine.set_members(8, vec![0, 1].into());
    /// engine.fail_peer(1, mpx::ErrorKind::Protocol("a bad frame".into()).into());
    /// assert!(engine.others_gone_in(8).is_some(), "rank 1 was the only other member");
    /// assert!(engine.others_gone().is_none(), "rank 2 is still there");
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn set_members(&mut self, context: u64, members: std::sync::Arc<[u32]>) {
        self.members.insert(context, members);
    }

    /// Forgets what [`set_members`](Engine::set_members) said of `context`.
    pub fn forget_members(&mut self, context: u64) {
        self.members.remove(&context);
    }

    /// Whether posted receive `id` accepts any source while every other
    /// rank of its context is gone: only this rank can still match it.
    pub fn orphaned(&self, id: ReqId) -> bool {
        self.orphan_error(id).is_some()
    }

    /// The error an [orphaned](Engine::orphaned) receive `id` fails with.
    pub fn orphan_error(&self, id: ReqId) -> Option<Error> {
        if !self.posted.any_source_posted() {
            return None;
        }
        let spec = self.posted.spec(id).filter(|spec| spec.source.is_none())?;
        self.others_gone_in(spec.context)
    }

    /// Reports the posted any-source receives that only this rank can now
    /// match ([`Event::Orphaned`]).
    pub(super) fn report_orphans(&mut self) {
        if !self.posted.any_source_posted() {
            return;
        }
        // Each context's answer once, whatever the receives posted on it.
        let answers = std::cell::RefCell::new(Vec::<(u64, bool)>::new());
        let gone = |context: u64| {
            let known = answers.borrow().iter().find(|(c, _)| *c == context).map(|&(_, gone)| gone);
            known.unwrap_or_else(|| {
                let gone = self.others_gone_in(context).is_some();
                answers.borrow_mut().push((context, gone));
                gone
            })
        };
        let orphans = self.posted.ids_where(|spec| spec.source.is_none() && gone(spec.context));
        self.events.extend(orphans.into_iter().map(|id| Event::Orphaned { id }));
    }

    /// The representation to send typed data to `dest` in: native only to
    /// a peer whose hello said it shares this rank's representation.
    pub fn repr_for(&self, dest: u32) -> Repr {
        match self.peers.get(dest as usize).and_then(|p| p.hello) {
            Some(hello) if hello.native && self.config.repr == Repr::Native => Repr::Native,
            _ => Repr::External32,
        }
    }

    /// Whether every peer's hello has arrived (or the peer failed).
    pub fn is_connected(&self) -> bool {
        !self.peers.iter().any(awaits_hello)
    }

    /// The peers whose hello has not arrived (and that have not failed):
    /// what [`is_connected`](Engine::is_connected) still waits for.
    pub fn awaiting_hello(&self) -> Vec<usize> {
        self.peers.iter().enumerate().filter(|(_, p)| awaits_hello(p)).map(|(rank, _)| rank).collect()
    }
}

/// Whether `peer`'s hello is still awaited: not arrived, and the peer has
/// not failed.
fn awaits_hello(peer: &Peer) -> bool {
    peer.hello.is_none() && peer.failed.is_none()
}

/// Whether data of messages `rank` has started is still to come from it:
/// rendezvous data of a transfer not complete, data that came before the
/// message it belongs to (`early`), or the data of a request to send still
/// queued unmatched (a rank's finalize waits until its rendezvous sends
/// are answered and their data sent).
pub(super) fn owes_data(transfers: &HashMap<ReqId, Transfer>, early: &KeyedHashMap<(u32, u64), Early>, unexpected: &UnexpectedQueue<Unexpected>, rank: u32) -> bool {
    transfers.values().any(|t| t.envelope.source == rank && !t.complete)
        || early.keys().any(|&(source, _)| source == rank)
        || unexpected.iter().any(|u| u.envelope.source == rank && matches!(u.body, Body::Rts { .. }))
}
