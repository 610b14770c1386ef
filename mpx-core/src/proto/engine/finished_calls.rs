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
//! and its data dropped (within its rendezvous slots and unsolicited
//! credit until that data is in, see [`Engine::consume_truncated`]: a
//! sender that never sends it holds no more than it was granted). The
//! engine remembers the last
//! [`REMEMBERED_CALLS`] finished calls of each context. A communicator
//! that goes closes its collective context whole
//! ([`Engine::close_context`]): words still on their way to it are
//! dropped as they come.

use std::collections::VecDeque;

use rustc_hash::FxHashSet as HashSet;

use super::{Body, Engine, Envelope, HashMap, MatchSpec, Unexpected};

/// Finished calls remembered per context: a late message of a call
/// finished longer ago waits in the queue, as any unmatched message.
pub const REMEMBERED_CALLS: usize = 1024;

/// Closed contexts remembered (see [`Engine::close_context`]): a late
/// message on a context closed longer ago waits in the queue, as any
/// unmatched message.
pub const REMEMBERED_CLOSED: usize = 1024;

/// The last `N` keys inserted, as a set: the oldest goes when one more
/// comes.
#[derive(Debug)]
struct Recent<T, const N: usize> {
    order: VecDeque<T>,
    set: HashSet<T>,
}

impl<T, const N: usize> Default for Recent<T, N> {
    fn default() -> Self {
        Recent { order: VecDeque::new(), set: HashSet::default() }
    }
}

impl<T: std::hash::Hash + Eq + Copy, const N: usize> Recent<T, N> {
    fn insert(&mut self, key: T) {
        if self.set.insert(key) {
            self.order.push_back(key);
            if self.order.len() > N {
                let oldest = self.order.pop_front().expect("over the limit");
                self.set.remove(&oldest);
            }
        }
    }

    fn contains(&self, key: &T) -> bool {
        !self.set.is_empty() && self.set.contains(key)
    }
}

/// The finished calls of one context.
#[derive(Debug, Default)]
pub(super) struct FinishedCalls {
    /// Each call's block of tags is this many, starting at a multiple of it
    /// (a power of two).
    span: u32,
    /// The first tags of the calls' blocks.
    firsts: Recent<i32, REMEMBERED_CALLS>,
}

impl FinishedCalls {
    fn holds(&self, tag: i32) -> bool {
        self.firsts.contains(&(tag & !(self.span as i32 - 1)))
    }
}

/// The finished calls of every context that has some, and the contexts
/// closed whole.
#[derive(Debug, Default)]
pub(super) struct Finished {
    calls: HashMap<u64, FinishedCalls>,
    closed: Recent<u64, REMEMBERED_CLOSED>,
}

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
        if self.finished_calls.closed.contains(&context) {
            return;
        }
        let calls = self.finished_calls.calls.entry(context).or_default();
        if calls.span != span {
            // A context's calls all have blocks of one size.
            *calls = FinishedCalls { span, ..FinishedCalls::default() };
        }
        calls.firsts.insert(first);
        // Its messages already queued: looked up tag by tag, each tag's
        // lane of the queue at once (later calls' messages, of a rank
        // that runs ahead, are not looked at).
        for tag in first..=first + (span as i32 - 1) {
            let spec = MatchSpec { context, source: None, tag: Some(tag) };
            while let Some(u) = self.unexpected.take_first(&spec) {
                self.drop_unexpected(u);
            }
        }
    }

    /// Whether a message on `context` with `tag` belongs to a call this
    /// rank has finished (see [`discard_call`](Engine::discard_call)), or
    /// to a context closed whole (see [`close_context`](Engine::close_context)).
    pub fn discards(&self, context: u64, tag: i32) -> bool {
        let finished = &self.finished_calls;
        (!finished.calls.is_empty() && finished.calls.get(&context).is_some_and(|calls| calls.holds(tag)))
            || finished.closed.contains(&context)
    }

    /// Nothing will receive on `context` any more (the communicator whose
    /// collective context it is has gone): every message on it, queued or
    /// still to come, is received and dropped, as by a freed receive, and
    /// the record of its finished calls goes. The last
    /// [`REMEMBERED_CLOSED`] contexts closed are remembered.
    ///
    /// ```
    /// use mpx::proto::engine::{Config, Engine};
    /// let mut engine = Engine::new(0, 1, Config::default())?;
    /// engine.discard_call(1, 64, 64);
    /// engine.close_context(1);
    /// assert!(engine.discards(1, 5) && engine.discards(1, 64) && !engine.discards(3, 64));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn close_context(&mut self, context: u64) {
        self.finished_calls.calls.remove(&context);
        self.finished_calls.closed.insert(context);
        for u in self.unexpected.take_where(|u| u.envelope.context == context) {
            self.drop_unexpected(u);
        }
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
            Body::Local { send_id, credit, .. } => self.local_message_left(u.envelope.source, send_id, credit, Ok(())),
            Body::Rts { .. } | Body::InFlight { .. } => {
                let id = self.next_id();
                self.truncated.insert(id, u);
                self.consume_truncated(id);
            }
        }
    }
}
