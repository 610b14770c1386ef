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
//! and its data dropped. Calls are numbered in the order a rank starts
//! them, and mostly finish in that order: the engine keeps, per context,
//! the first call not finished yet (every call before it is), and which
//! of the calls after it have finished (one still under way while later
//! ones finish, or one whose ranks met in memory and sent no messages:
//! up to [`MOST_OVERTAKING`] of them, past which the call is taken for
//! finished). A communicator
//! that goes closes its collective context whole
//! ([`Engine::close_context`]): words still on their way to it are
//! dropped as they come.

use std::collections::VecDeque;

use rustc_hash::FxHashSet as HashSet;

use super::{Body, Engine, Envelope, HashMap, MatchSpec, Unexpected};


/// Calls finished after one not finished (see [`FinishedCalls`]) that
/// a context keeps track of: one more, and the call not finished is
/// taken for finished. That call is most often one whose ranks met in
/// memory (whose end the engine never hears of, and whose messages there
/// are none); a call over messages under way that long, with receives
/// still to post, would have messages of its own taken for late.
pub const MOST_OVERTAKING: usize = 1 << 16;

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
    /// The number of the first call not finished yet: every call before
    /// it (by up to half the numbers, which wrap) is.
    unfinished: u32,
    /// Whether each call after `unfinished` has finished, in order from
    /// `unfinished + 1`: empty but while a call that later ones have
    /// overtaken is under way (or met in memory); at most
    /// [`MOST_OVERTAKING`].
    after: VecDeque<bool>,
}

impl FinishedCalls {
    /// The call whose block of tags starts at `first` is over.
    fn finish(&mut self, first: i32) {
        let ahead = self.ahead(self.number(first));
        if ahead == 0 {
            // The first call not finished: the watermark moves past it
            // and past those after it that finished already.
            self.unfinished = (self.unfinished + 1) % self.numbers();
            while let Some(true) = self.after.pop_front() {
                self.unfinished = (self.unfinished + 1) % self.numbers();
            }
        } else if ahead <= self.numbers() / 2 {
            let at = ahead as usize - 1;
            if self.after.len() <= at {
                self.after.resize(at + 1, false);
            }
            self.after[at] = true;
            if self.after.len() > MOST_OVERTAKING {
                // Taken for finished itself, and every call up to this one.
                self.unfinished = (self.unfinished + ahead + 1) % self.numbers();
                self.after.clear();
            }
        }
        // Otherwise a call before the watermark: finished already.
    }

    fn holds(&self, tag: i32) -> bool {
        // No call's block has negative tags (a peer may send any).
        let first = tag & !(self.span as i32 - 1);
        if first < 0 {
            return false;
        }
        match self.ahead(self.number(first)) {
            0 => false,
            ahead if ahead > self.numbers() / 2 => true,
            ahead => self.after.get(ahead as usize - 1) == Some(&true),
        }
    }

    /// How many call numbers there are: the tags of a collective context
    /// are 31 bits, a block of `span` to each call.
    fn numbers(&self) -> u32 {
        (1u32 << 31) / self.span
    }

    /// The number of the call whose block of tags starts at `first`
    /// (not negative).
    fn number(&self, first: i32) -> u32 {
        first as u32 / self.span
    }

    /// How far call `number` lies ahead of the first call not finished,
    /// the numbers wrapping (more than half of them: it lies before).
    fn ahead(&self, number: u32) -> u32 {
        (number + self.numbers() - self.unfinished) % self.numbers()
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
        if !span.is_power_of_two() || span > 1 << 30 || first < 0 || first & (span as i32 - 1) != 0 {
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
        calls.finish(first);
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
        let anything = MatchSpec { context, source: None, tag: None };
        while let Some(u) = self.unexpected.take_first(&anything) {
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
            Body::Rts { .. } | Body::InFlight { .. } => {
                let id = self.next_id();
                self.truncated.insert(id, u);
                self.consume_truncated(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, Engine};

    /// Calls finished in order are all remembered, however many: a late
    /// message of the first of 10,000 is dropped (the last 1,024 alone
    /// were remembered before); a call still under way is not taken for
    /// finished while later ones finish, nor are calls after the newest
    /// finished; once it finishes, the watermark moves past every call
    /// finished after it. Negative tags (a peer may send any) are no
    /// call's.
    #[test]
    fn calls_finished_in_order_are_remembered_however_many() {
        let span = 64;
        let first = |call: i32| call * span as i32;
        let mut engine = Engine::new(0, 1, Config::default()).unwrap();
        for call in 0..10_000 {
            engine.discard_call(1, first(call), span);
        }
        assert!(engine.discards(1, first(0) + 3) && engine.discards(1, first(9_999)));
        assert!(!engine.discards(1, first(10_000)) && !engine.discards(1, first(10_001) + 63));
        assert!(!engine.discards(1, -5) && !engine.discards(1, i32::MIN));

        // Call 10,000 stays under way while the next 5,000 finish, one
        // of them (12,000) late.
        let newest = 15_000;
        for call in (10_001..=newest).filter(|&c| c != 12_000) {
            engine.discard_call(1, first(call), span);
        }
        assert!(!engine.discards(1, first(10_000)), "under way");
        assert!(engine.discards(1, first(9_000)) && engine.discards(1, first(10_001)) && engine.discards(1, first(newest)));
        assert!(!engine.discards(1, first(12_000)) && !engine.discards(1, first(newest + 1)));
        // It finishes: the watermark stops at 12,000.
        engine.discard_call(1, first(10_000), span);
        assert!(engine.discards(1, first(11_999)) && !engine.discards(1, first(12_000)) && engine.discards(1, first(12_001)));
        engine.discard_call(1, first(12_000), span);
        assert!(engine.discards(1, first(newest)) && !engine.discards(1, first(newest + 1)));
    }

    /// A call the engine never hears finish (its ranks met in memory) is
    /// taken for finished once [`super::MOST_OVERTAKING`] later calls
    /// have: the record stays bounded.
    #[test]
    fn a_call_overtaken_long_enough_is_taken_for_finished() {
        let mut calls = super::FinishedCalls { span: 64, ..Default::default() };
        let first = |number: u32| (number * 64) as i32;
        let most = super::MOST_OVERTAKING as u32;
        for number in 1..=most {
            calls.finish(first(number));
        }
        assert!(!calls.holds(first(0)) && calls.holds(first(most)) && calls.after.len() == most as usize);
        calls.finish(first(most + 1));
        assert!(calls.holds(first(0)) && calls.holds(first(most + 1)) && !calls.holds(first(most + 2)));
        assert!(calls.after.is_empty());
    }

    /// The numbers wrap (2^25 calls of 64 tags): past the last, the
    /// watermark comes round to 0, and the calls at the end of the numbers
    /// are then behind it while those at the start are ahead.
    #[test]
    fn the_watermark_wraps_with_the_call_numbers() {
        let mut calls = super::FinishedCalls { span: 64, ..Default::default() };
        let last = calls.numbers() - 1;
        assert_eq!(last, (1 << 25) - 1);
        calls.unfinished = last - 1;
        let first = |number: u32| (number * 64) as i32;
        calls.finish(first(0));
        assert!(calls.holds(first(0)) && !calls.holds(first(last)) && !calls.holds(first(1)));
        calls.finish(first(last - 1));
        calls.finish(first(last));
        assert_eq!(calls.unfinished, 1, "past 0, finished already");
        assert!(calls.holds(first(last - 5)) && calls.holds(first(last)) && calls.holds(first(0) + 63));
        assert!(!calls.holds(first(1)) && !calls.holds(first(2)));
    }
}
