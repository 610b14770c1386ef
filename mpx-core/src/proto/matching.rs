//! The posted-receive queue: receives matched in posting order, indexed by
//! what they accept.

use std::collections::VecDeque;

// The maps here are keyed by this process's own request ids and receive
// specs, never by values a peer chooses, so a fast unkeyed hash (Fx) is
// safe from collision flooding; SipHash cost a quarter of a small
// message's cycles.
use rustc_hash::FxHashMap as HashMap;

use super::engine::{Envelope, MatchSpec, ReqId};

/// The posted receives, matched in posting order, indexed by what they
/// accept.
///
/// A receive accepts a message exactly when its [`MatchSpec`] is one of
/// four specs made from the message's envelope: its source and tag, any
/// source with its tag, its source with any tag, or any source and tag (in
/// its context). Receives are queued per spec in posting order, each with
/// its posting number, so the first receive posted that accepts a message
/// is the earliest of at most four queue heads: matching costs the same
/// with ten or ten thousand receives posted.
#[derive(Default)]
pub(crate) struct PostedQueue {
    /// Receives per spec: (posting number, receive), in posting order.
    queues: HashMap<MatchSpec, VecDeque<(u64, ReqId)>>,
    /// The spec of every posted receive.
    specs: HashMap<ReqId, MatchSpec>,
    /// The next posting number.
    next: u64,
}

impl PostedQueue {
    pub(crate) fn len(&self) -> usize {
        self.specs.len()
    }

    pub(crate) fn push(&mut self, id: ReqId, spec: MatchSpec) {
        self.queues.entry(spec).or_default().push_back((self.next, id));
        self.specs.insert(id, spec);
        self.next += 1;
    }

    /// Removes and returns the first receive posted that accepts `env`.
    pub(crate) fn take_match(&mut self, env: &Envelope) -> Option<ReqId> {
        let (context, source, tag) = (env.context, Some(env.source), Some(env.tag));
        let (_, id) = [(source, tag), (None, tag), (source, None), (None, None)]
            .into_iter()
            .filter_map(|(source, tag)| self.queues.get(&MatchSpec { context, source, tag })?.front().copied())
            .min_by_key(|&(number, _)| number)?;
        self.remove(id);
        Some(id)
    }

    /// Removes receive `id`; `false` if it is not posted.
    pub(crate) fn remove(&mut self, id: ReqId) -> bool {
        let Some(spec) = self.specs.remove(&id) else { return false };
        let queue = self.queues.get_mut(&spec).expect("every posted receive is queued");
        // The head, when matching: found at once.
        let at = queue.iter().position(|&(_, x)| x == id).expect("every posted receive is queued");
        queue.remove(at);
        if queue.is_empty() {
            self.queues.remove(&spec);
        }
        true
    }

    /// Whether receive `id` is posted.
    pub(crate) fn contains(&self, id: ReqId) -> bool {
        self.specs.contains_key(&id)
    }

    /// The spec of posted receive `id`.
    pub(crate) fn spec(&self, id: ReqId) -> Option<&MatchSpec> {
        self.specs.get(&id)
    }

    /// The posted receives whose spec satisfies `pred`, in no particular order.
    pub(crate) fn ids_where(&self, pred: impl Fn(&MatchSpec) -> bool) -> Vec<ReqId> {
        self.specs.iter().filter(|(_, spec)| pred(spec)).map(|(&id, _)| id).collect()
    }

    /// Removes and returns, in posting order, the receives whose spec
    /// satisfies `pred`.
    pub(crate) fn remove_where(&mut self, pred: impl Fn(&MatchSpec) -> bool) -> Vec<ReqId> {
        let specs: Vec<MatchSpec> = self.queues.keys().filter(|spec| pred(spec)).copied().collect();
        let mut removed = Vec::new();
        for spec in specs {
            for (number, id) in self.queues.remove(&spec).expect("a key just listed") {
                self.specs.remove(&id);
                removed.push((number, id));
            }
        }
        removed.sort_unstable_by_key(|&(number, _)| number);
        removed.into_iter().map(|(_, id)| id).collect()
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::Repr;

    /// The posted-receive index against a list scanned in posting order,
    /// over random posts (with wildcards), arrivals, withdrawals and peer
    /// failures.
    #[test]
    fn posted_index_matches_like_a_scan_in_posting_order() {
        let mut x = 0x9e37_79b9u32;
        let mut next = move |n: u32| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % n
        };
        for _ in 0..200 {
            // The reference: (receive, spec) in posting order.
            let (mut index, mut list) = (PostedQueue::default(), Vec::<(ReqId, MatchSpec)>::new());
            let mut id = 0;
            for _ in 0..300 {
                let wild = |v: u32, n: u32| (v < n).then_some(v);
                match next(10) {
                    0..=4 => {
                        let spec = MatchSpec {
                            context: next(2) as u64,
                            source: wild(next(4), 3),
                            tag: wild(next(4), 3).map(|t| t as i32),
                        };
                        index.push(id, spec);
                        list.push((id, spec));
                        id += 1;
                    }
                    5..=7 => {
                        let env = Envelope {
                            context: next(2) as u64,
                            source: next(3),
                            tag: next(3) as i32,
                            signature: None,
                            repr: Repr::Native,
                            len: 0,
                            desc_len: 0,
                            seq: 0,
                        };
                        let want = list.iter().position(|(_, spec)| spec.accepts(&env)).map(|i| list.remove(i).0);
                        assert_eq!(index.take_match(&env), want);
                    }
                    8 => {
                        let victim = next(id.max(1) as u32) as u64;
                        let want = list.iter().position(|&(x, _)| x == victim).map(|i| list.remove(i)).is_some();
                        assert_eq!(index.remove(victim), want);
                    }
                    _ => {
                        let rank = wild(next(4), 3);
                        let pred = |spec: &MatchSpec| spec.source == rank;
                        let want: Vec<ReqId> = list.iter().filter(|(_, spec)| pred(spec)).map(|&(x, _)| x).collect();
                        list.retain(|(_, spec)| !pred(spec));
                        assert_eq!(index.remove_where(pred), want);
                    }
                }
                assert_eq!(index.len(), list.len());
            }
        }
    }

}
