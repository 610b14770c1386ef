//! Calls this rank has finished: late messages for them are received and
//! dropped.
//!
//! A collective call has a block of tags to itself on its communicator's
//! collective context. Once this rank's part of a call is over (finished,
//! failed or dropped), nothing will ever receive a message of that call
//! here: the word another rank sends when it gives up on the call, data a
//! rank that failed in turn still sent, a message its dropped receive had
//! matched and gave back. Left in the unexpected queue, such messages
//! would hold their sender's eager credit and rendezvous slots for good
//! (thousands of dropped calls would stop every send between two ranks),
//! and a rendezvous sender would wait for ever for its clear-to-send; the
//! call that reuses the tags, 2^25 calls later, would take them for its
//! own. So the runtime tells the engine of each finished call
//! ([`Engine::discard_call`]), and the engine receives and drops its
//! messages, those queued and those still to come, as a receive that is
//! freed would: eager credit goes back, a rendezvous sender is answered
//! and its data dropped. The engine remembers the last
//! [`REMEMBERED_CALLS`] finished calls of each context.

use std::collections::VecDeque;

use rustc_hash::FxHashSet as HashSet;

use super::{Body, Engine, Envelope, HashMap, MatchSpec, Unexpected};

/// Finished calls remembered per context: a late message of a call
/// finished longer ago waits in the queue, as any unmatched message.
pub const REMEMBERED_CALLS: usize = 1024;

/// The finished calls of one context.
#[derive(Debug, Default)]
pub(super) struct FinishedCalls {
    /// Each call's block of tags is this many, starting at a multiple of it
    /// (a power of two).
    span: u32,
    /// The first tags of the calls' blocks, oldest first, and as a set.
    order: VecDeque<i32>,
    firsts: HashSet<i32>,
}

impl FinishedCalls {
    fn holds(&self, tag: i32) -> bool {
        self.firsts.contains(&(tag & !(self.span as i32 - 1)))
    }
}

/// The finished calls of every context that has some.
pub(super) type Finished = HashMap<u64, FinishedCalls>;

impl Engine {
    /// The call whose messages on `context` have the `span` tags from
    /// `first` on (`span` a power of two, `first` a multiple of it) is
    /// over on this rank: its messages, queued or still to come, are
    /// received and dropped from now on, as by a freed receive.
    ///
    /// ```
    /// use mpx::proto::engine::{Config, Engine};
    /// let mut engine = Engine::new(0, 1, Config::default())?;
    /// engine.discard_call(1, 64, 64);
    /// assert!(engine.discards(1, 64 + 5) && !engine.discards(1, 128) && !engine.discards(3, 64));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn discard_call(&mut self, context: u64, first: i32, span: u32) {
        if !span.is_power_of_two() || span > 1 << 30 || first & (span as i32 - 1) != 0 {
            debug_assert!(false, "a call's tags are an aligned block: {first}, {span}");
            return;
        }
        let calls = self.finished_calls.entry(context).or_default();
        if calls.span != span {
            // A context's calls all have blocks of one size.
            *calls = FinishedCalls { span, ..FinishedCalls::default() };
        }
        if calls.firsts.insert(first) {
            calls.order.push_back(first);
            if calls.order.len() > REMEMBERED_CALLS {
                let oldest = calls.order.pop_front().expect("over the limit");
                calls.firsts.remove(&oldest);
            }
        }
        // Its messages already queued: looked up tag by tag, and only if
        // anything at all waits on the context.
        let anything = MatchSpec { context, source: None, tag: None };
        if self.unexpected.first(&anything).is_none() {
            return;
        }
        for tag in first..=first + (span as i32 - 1) {
            let spec = MatchSpec { context, source: None, tag: Some(tag) };
            while let Some(u) = self.unexpected.take_first(&spec) {
                self.drop_unexpected(u);
            }
        }
    }

    /// Whether a message on `context` with `tag` belongs to a call this
    /// rank has finished (see [`discard_call`](Engine::discard_call)).
    pub fn discards(&self, context: u64, tag: i32) -> bool {
        !self.finished_calls.is_empty() && self.finished_calls.get(&context).is_some_and(|calls| calls.holds(tag))
    }

    /// Forgets the finished calls of `context` (its communicator is gone).
    pub fn forget_calls(&mut self, context: u64) {
        self.finished_calls.remove(&context);
    }

    /// Whether a message that matched no receive is of a finished call.
    pub(super) fn is_late(&self, envelope: &Envelope) -> bool {
        self.discards(envelope.context, envelope.tag)
    }

    /// Receives and drops `u`, a message no receive will take: its eager
    /// credit goes back; a rendezvous request is answered and its data
    /// dropped as it arrives.
    pub(super) fn drop_unexpected(&mut self, u: Unexpected) {
        tracing::trace!(rank = self.rank, source = u.envelope.source, tag = u.envelope.tag, "late message of a finished call dropped");
        match u.body {
            Body::Data { credit, .. } => self.release_credit(u.envelope.source, credit),
            Body::Rts { .. } | Body::InFlight { .. } => {
                let id = self.next_id();
                self.truncated.insert(id, u);
                self.consume_truncated(id);
            }
        }
    }
}
