//! The posted-receive and unexpected-message queues, each indexed by what
//! matches: a message finds its receive, and a receive its message, in
//! time that does not grow with what else is queued.

use std::collections::hash_map::Entry;
use std::collections::VecDeque;

// The maps here are keyed by this process's own request ids, message ids
// and receive specs, so a fast unkeyed hash (Fx) is safe from collision
// flooding (SipHash cost a quarter of a small message's cycles). The one
// map whose keys a peer chooses, the unexpected queue's lanes (by a
// message's context and tag), is seeded at random (see `Lanes`).
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
    /// The receives posted, in posting order, while there are at most
    /// [`FEW`] (a program waiting for its next message or two, the common
    /// case): kept out of the maps, so that posting and matching one costs
    /// a few comparisons. While any are here the maps hold no receive; one
    /// more moves them all into the maps.
    few: Vec<FewPosted>,
    /// Receives per spec, in posting order. A queue that empties stays
    /// (most programs post the same spec again at once) until a sweep
    /// finds it still empty, once [`EMPTIED_KEPT`] queues have emptied; a
    /// queue a burst grew beyond [`Spare::ROOM`] goes at once.
    queues: HashMap<MatchSpec, Posted>,
    /// The spec of every posted receive, and the most data it holds (see
    /// [`Engine::post_recv_limited`](super::engine::Engine::post_recv_limited)).
    specs: HashMap<ReqId, (MatchSpec, Option<u64>)>,
    /// Receives posted of each shape ([`shape`]): a message looks only at
    /// the shapes some receive has (most programs name source and tag).
    per_shape: [usize; 4],
    /// Specs whose queue emptied since the last sweep: every empty queue
    /// in `queues` is listed here. (A spec whose queue
    /// [`remove_where`](PostedQueue::remove_where) took may stay listed,
    /// and be listed again once a new queue of it empties: the sweep skips
    /// what is gone.)
    emptied: Vec<MatchSpec>,
    /// Queues swept out, kept for their memory: a spec posted and matched
    /// over and over allocates nothing.
    spare: Spare<(u64, ReqId)>,
    /// The next posting number.
    next: u64,
}

/// Receives or messages at most kept apart from the maps (see
/// [`PostedQueue::few`] and [`UnexpectedQueue::few`]): below this, a scan
/// costs less than the maps' lookups.
const FEW: usize = 8;

/// A receive kept apart from the maps (see [`PostedQueue::few`]).
#[derive(Clone, Copy)]
struct FewPosted {
    number: u64,
    id: ReqId,
    spec: MatchSpec,
    limit: Option<u64>,
}

/// Queues listed as emptied at most; the next to empty first sweeps those
/// still empty out.
const EMPTIED_KEPT: usize = 32;

/// The receives posted with one spec.
#[derive(Default)]
struct Posted {
    /// (posting number, receive), in posting order.
    receives: VecDeque<(u64, ReqId)>,
    /// Whether the spec is in [`PostedQueue::emptied`].
    listed: bool,
}

/// What becomes of a queue a receive has just left.
enum Left {
    /// Nothing: it holds receives, or is listed already.
    Kept,
    /// It is empty: the caller lists it (it counts as listed from now on).
    List,
    /// It is empty and a burst grew it large: the caller drops it.
    Drop,
}

impl Posted {
    /// What becomes of this queue, which a receive has just left.
    fn left(&mut self) -> Left {
        if !self.receives.is_empty() {
            Left::Kept
        } else if self.receives.capacity() > Spare::<(u64, ReqId)>::ROOM {
            Left::Drop
        } else if self.listed {
            Left::Kept
        } else {
            self.listed = true;
            Left::List
        }
    }
}

/// Emptied queues kept for their memory (at most [`Spare::KEEP`] of them,
/// each of at most [`Spare::ROOM`] entries: a burst that grew a queue
/// large gives its memory back), so that a spec queued and emptied over
/// and over allocates nothing.
struct Spare<T>(Vec<VecDeque<T>>);

impl<T> Default for Spare<T> {
    fn default() -> Self {
        Spare(Vec::new())
    }
}

impl<T> Spare<T> {
    const KEEP: usize = 16;
    const ROOM: usize = 256;

    /// An empty queue, with memory if one was kept.
    fn take(&mut self) -> VecDeque<T> {
        self.0.pop().unwrap_or_default()
    }

    /// Keeps `queue`'s memory.
    fn keep(&mut self, mut queue: VecDeque<T>) {
        if self.0.len() < Self::KEEP && queue.capacity() <= Self::ROOM {
            queue.clear();
            self.0.push(queue);
        }
    }
}

/// The index of `spec`'s shape, as [`specs_accepting`] orders them.
fn shape(spec: &MatchSpec) -> usize {
    usize::from(spec.source.is_none()) | usize::from(spec.tag.is_none()) << 1
}

impl PostedQueue {
    pub(crate) fn len(&self) -> usize {
        self.specs.len() + self.few.len()
    }

    /// Whether any receive naming no source is posted.
    pub(crate) fn any_source_posted(&self) -> bool {
        self.per_shape[1] + self.per_shape[3] > 0
    }

    pub(crate) fn push(&mut self, id: ReqId, spec: MatchSpec, limit: Option<u64>) {
        let new = FewPosted { number: self.next, id, spec, limit };
        self.next += 1;
        self.per_shape[shape(&spec)] += 1;
        if self.few.len() < FEW && self.specs.is_empty() {
            self.few.push(new);
            return;
        }
        // Moved in posting order; the vector keeps its memory.
        let mut few = std::mem::take(&mut self.few);
        for receive in few.drain(..) {
            self.index(receive);
        }
        self.few = few;
        self.index(new);
    }

    /// Puts `receive` in the maps, behind the receives of its spec.
    fn index(&mut self, receive: FewPosted) {
        let FewPosted { number, id, spec, limit } = receive;
        let spare = &mut self.spare;
        let posted = self.queues.entry(spec).or_insert_with(|| Posted { receives: spare.take(), listed: false });
        posted.receives.push_back((number, id));
        self.specs.insert(id, (spec, limit));
    }

    /// Removes and returns the first receive posted that accepts `env`,
    /// with its limit.
    pub(crate) fn take_match(&mut self, env: &Envelope) -> Option<(ReqId, Option<u64>)> {
        if !self.few.is_empty() {
            let at = self.few.iter().position(|receive| receive.spec.accepts(env))?;
            let receive = self.few.remove(at);
            self.per_shape[shape(&receive.spec)] -= 1;
            return Some((receive.id, receive.limit));
        }
        let specs = specs_accepting(env);
        let mut shapes = (0..specs.len()).filter(|&shape| self.per_shape[shape] > 0);
        let (id, spec, left) = match (shapes.next(), shapes.next()) {
            (None, _) => return None,
            (Some(shape), None) => {
                // One shape in use (the common case): one lookup.
                let spec = &specs[shape];
                let posted = self.queues.get_mut(spec)?;
                let (_, id) = posted.receives.pop_front()?;
                (id, spec, posted.left())
            }
            (Some(a), Some(b)) => {
                let mut first: Option<(u64, usize)> = None;
                for shape in [a, b].into_iter().chain(shapes) {
                    if let Some(&(number, _)) = self.queues.get(&specs[shape]).and_then(|p| p.receives.front()) {
                        if first.is_none_or(|(earliest, _)| number < earliest) {
                            first = Some((number, shape));
                        }
                    }
                }
                let spec = &specs[first?.1];
                let posted = self.queues.get_mut(spec).expect("found above");
                let (_, id) = posted.receives.pop_front().expect("found above");
                (id, spec, posted.left())
            }
        };
        self.after_leaving(*spec, left);
        let (_, limit) = self.specs.remove(&id).expect("every posted receive has a spec");
        self.per_shape[shape(spec)] -= 1;
        Some((id, limit))
    }

    /// Does what [`Posted::left`] said for `spec`'s queue: lists it (after
    /// sweeping out the listed queues still empty, if there are enough of
    /// them), or drops it.
    fn after_leaving(&mut self, spec: MatchSpec, left: Left) {
        match left {
            Left::Kept => return,
            Left::Drop => {
                self.queues.remove(&spec);
                return;
            }
            Left::List => {}
        }
        if self.emptied.len() >= EMPTIED_KEPT {
            let mut listed = std::mem::take(&mut self.emptied);
            for spec in listed.drain(..) {
                match self.queues.entry(spec) {
                    Entry::Occupied(entry) if entry.get().receives.is_empty() => self.spare.keep(entry.remove().receives),
                    Entry::Occupied(mut entry) => entry.get_mut().listed = false,
                    Entry::Vacant(_) => {}
                }
            }
            self.emptied = listed;
        }
        self.emptied.push(spec);
    }

    /// Removes receive `id`; `false` if it is not posted.
    pub(crate) fn remove(&mut self, id: ReqId) -> bool {
        if let Some(at) = self.few.iter().position(|receive| receive.id == id) {
            let receive = self.few.remove(at);
            self.per_shape[shape(&receive.spec)] -= 1;
            return true;
        }
        let Some((spec, _)) = self.specs.remove(&id) else { return false };
        let posted = self.queues.get_mut(&spec).expect("every posted receive is queued");
        let at = posted.receives.iter().position(|&(_, x)| x == id).expect("every posted receive is queued");
        posted.receives.remove(at);
        let left = posted.left();
        self.after_leaving(spec, left);
        self.per_shape[shape(&spec)] -= 1;
        true
    }

    /// The spec of posted receive `id`.
    pub(crate) fn spec(&self, id: ReqId) -> Option<&MatchSpec> {
        match self.few.iter().find(|receive| receive.id == id) {
            Some(receive) => Some(&receive.spec),
            None => self.specs.get(&id).map(|(spec, _)| spec),
        }
    }

    /// The posted receives whose spec satisfies `pred`, in no particular order.
    pub(crate) fn ids_where(&self, pred: impl Fn(&MatchSpec) -> bool) -> Vec<ReqId> {
        let few = self.few.iter().map(|receive| (&receive.id, &receive.spec));
        let indexed = self.specs.iter().map(|(id, (spec, _))| (id, spec));
        few.chain(indexed).filter(|(_, spec)| pred(spec)).map(|(&id, _)| id).collect()
    }

    /// Removes and returns, in posting order, the receives whose spec
    /// satisfies `pred`.
    pub(crate) fn remove_where(&mut self, pred: impl Fn(&MatchSpec) -> bool) -> Vec<ReqId> {
        let specs: Vec<MatchSpec> = self.queues.keys().filter(|spec| pred(spec)).copied().collect();
        let mut removed = Vec::new();
        let per_shape = &mut self.per_shape;
        self.few.retain(|receive| {
            let keep = !pred(&receive.spec);
            if !keep {
                per_shape[shape(&receive.spec)] -= 1;
                removed.push((receive.number, receive.id));
            }
            keep
        });
        for spec in specs {
            // (A listed spec stays listed: the sweep finds it gone.)
            for (number, id) in self.queues.remove(&spec).expect("a key just listed").receives {
                self.specs.remove(&id);
                self.per_shape[shape(&spec)] -= 1;
                removed.push((number, id));
            }
        }
        removed.sort_unstable_by_key(|&(number, _)| number);
        removed.into_iter().map(|(_, id)| id).collect()
    }
}


/// The four specs that accept a message with envelope `env`: its source
/// and tag, any source with its tag, its source with any tag, any source
/// and tag (in its context).
fn specs_accepting(env: &Envelope) -> [MatchSpec; 4] {
    let (context, source, tag) = (env.context, Some(env.source), Some(env.tag));
    [(source, tag), (None, tag), (source, None), (None, None)].map(|(source, tag)| MatchSpec { context, source, tag })
}

/// Whether every receive and probe of `context` names its tag, and most
/// name their source too: so for the collective contexts (odd ids: a
/// communicator's collective context is its own id `| 1`), whose
/// algorithms receive from one rank at a time, and look for a call's data
/// from any rank only to drop it once the call is over
/// ([`Engine::discard_call`](super::engine::Engine::discard_call)) or to
/// catch a rank that sends it where it should not (a broadcast's watch
/// for stray data). The unexpected queue lists their messages in their
/// exact lane and their tag's lane only; a spec with any tag there (which
/// mpx never makes) is still answered, by a scan.
fn exact_only(context: u64) -> bool {
    context & 1 == 1
}

/// The specs whose lanes list a message with envelope `env`: the four
/// that accept it ([`specs_accepting`]), or only its exact one and its
/// tag's on a context where every spec names its tag ([`exact_only`]).
fn lanes_of(env: &Envelope) -> impl Iterator<Item = MatchSpec> {
    let kept = if exact_only(env.context) { 2 } else { 4 };
    specs_accepting(env).into_iter().take(kept)
}

/// What the unexpected queue holds: anything with an envelope.
pub(crate) trait Queued {
    fn envelope(&self) -> &Envelope;
}

/// Places are spaced this far apart, so that a message put back between
/// two others usually finds a free place without renumbering.
const STEP: u64 = 1 << 20;

/// The place of the first message of an empty queue: far enough from 0
/// that messages put back ahead of it find room.
const FIRST_PLACE: u64 = 1 << 62;

/// The messages of one spec, in queue order: (place, id). A message taken
/// from the front of a lane leaves it at once; entries of messages taken
/// from further back (by another spec) stay until they reach the front or
/// outnumber the live ones.
struct Lane {
    entries: Entries,
    live: usize,
}

/// The lanes of the unexpected queue, by spec. Their keys are made from
/// what peers send (a message's context and tag), so the map hashes with
/// a random seed (foldhash's, per process): a peer cannot choose envelopes
/// that collide, as it could under the unkeyed Fx hash of the other maps
/// here (a few thousand colliding contexts would make every later lookup
/// probe thousands of slots).
type Lanes = std::collections::HashMap<MatchSpec, Lane, foldhash::fast::RandomState>;

/// A lane's entries, in queue order. One entry is kept inline: a spec
/// that sees one message at a time (each collective call has a tag of its
/// own) has lanes made and dropped message after message, and those then
/// allocate nothing.
enum Entries {
    One((u64, u64)),
    Many(VecDeque<(u64, u64)>),
}

impl Entries {
    fn front(&self) -> Option<&(u64, u64)> {
        match self {
            Entries::One(entry) => Some(entry),
            Entries::Many(entries) => entries.front(),
        }
    }

    fn pop_front(&mut self) {
        match self {
            Entries::One(_) => *self = Entries::Many(VecDeque::new()),
            Entries::Many(entries) => drop(entries.pop_front()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Entries::One(_) => 1,
            Entries::Many(entries) => entries.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &(u64, u64)> {
        let (one, many) = match self {
            Entries::One(entry) => (Some(entry), None),
            Entries::Many(entries) => (None, Some(entries.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// Adds `entry` in place order (at the back, unless it was put back
    /// ahead of others), growing into a deque from `spare`.
    fn insert(&mut self, entry: (u64, u64), spare: &mut Spare<(u64, u64)>) {
        if let Entries::One(only) = *self {
            let mut entries = spare.take();
            entries.push_back(only);
            *self = Entries::Many(entries);
        }
        let Entries::Many(entries) = self else { unreachable!("made a deque above") };
        if entries.back().is_none_or(|&(last, _)| last < entry.0) {
            entries.push_back(entry);
        } else {
            let at = entries.partition_point(|&(place, _)| place < entry.0);
            entries.insert(at, entry);
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&(u64, u64)) -> bool) {
        match self {
            Entries::One(entry) => {
                if !keep(entry) {
                    self.pop_front();
                }
            }
            Entries::Many(entries) => entries.retain(keep),
        }
    }

    /// Gives the deque's memory, if any, to `spare`.
    fn give_memory(self, spare: &mut Spare<(u64, u64)>) {
        if let Entries::Many(entries) = self {
            spare.keep(entries);
        }
    }
}

/// Lists the message `entry` (place, id) with envelope `envelope` in its
/// lanes ([`lanes_of`]).
fn list(lanes: &mut Lanes, spare: &mut Spare<(u64, u64)>, envelope: &Envelope, entry: (u64, u64)) {
    for spec in lanes_of(envelope) {
        match lanes.entry(spec) {
            Entry::Occupied(mut lane) => {
                let lane = lane.get_mut();
                lane.live += 1;
                lane.entries.insert(entry, spare);
            }
            Entry::Vacant(lane) => {
                lane.insert(Lane { entries: Entries::One(entry), live: 1 });
            }
        }
    }
}

/// The unexpected messages, in queue order, indexed by the specs that
/// accept them.
///
/// Each message is listed in the lanes of the four specs that accept it
/// ([`specs_accepting`]); a receive or probe with spec `s` accepts exactly
/// the messages of lane `s`, so the first message it accepts is that
/// lane's first live entry: posting a receive costs the same with none
/// or a hundred thousand messages of other tags or communicators queued.
/// (On a collective context, where every receive names its source and
/// tag, a message is listed in its exact lane only: see [`exact_only`].)
/// Each message has a place (its position in the queue, with gaps) and an
/// id never reused, so a lane's entry of a message taken elsewhere is
/// recognised as stale.
pub(crate) struct UnexpectedQueue<T> {
    /// The messages queued, with their places, in queue order, while there
    /// are at most [`FEW`] (messages that arrived just before their
    /// receives, the common case): kept out of the maps, so that queueing
    /// and taking one costs a few comparisons. While any are here the maps
    /// hold nothing; one more, or a message put back, moves them all into
    /// the maps.
    few: Vec<(u64, T)>,
    messages: HashMap<u64, (u64, T)>,
    lanes: Lanes,
    /// Emptied lanes' memory.
    spare: Spare<(u64, u64)>,
    next_id: u64,
    /// The place of the next message queued at the back.
    back: u64,
}

impl<T> Default for UnexpectedQueue<T> {
    fn default() -> Self {
        UnexpectedQueue {
            few: Vec::new(),
            messages: HashMap::default(),
            lanes: Lanes::default(),
            spare: Spare::default(),
            next_id: 0,
            back: FIRST_PLACE,
        }
    }
}

impl<T: Queued> UnexpectedQueue<T> {
    pub(crate) fn len(&self) -> usize {
        self.messages.len() + self.few.len()
    }

    /// Queues `message` behind every other.
    pub(crate) fn push_back(&mut self, message: T) {
        let place = self.next_back();
        if self.few.len() < FEW && self.messages.is_empty() {
            self.few.push((place, message));
            return;
        }
        self.index_few();
        self.insert(place, message);
    }

    /// Moves the messages kept apart (see [`few`](UnexpectedQueue::few))
    /// into the maps.
    fn index_few(&mut self) {
        // The vector keeps its memory.
        let mut few = std::mem::take(&mut self.few);
        for (place, message) in few.drain(..) {
            self.insert(place, message);
        }
        self.few = few;
    }

    /// The place of a message queued at the back, behind every other.
    /// Places start again from [`FIRST_PLACE`] whenever the queue is
    /// empty, and are spaced out again before they would run past
    /// `u64::MAX` (a queue never empty for some 10^13 messages), so that
    /// they never wrap round and break the queue's order.
    fn next_back(&mut self) -> u64 {
        if self.len() == 0 {
            self.back = FIRST_PLACE;
        } else if self.back > u64::MAX - STEP {
            self.index_few();
            self.renumber();
        }
        let place = self.back;
        self.back += STEP;
        place
    }

    fn insert(&mut self, place: u64, message: T) {
        let id = self.next_id;
        self.next_id += 1;
        list(&mut self.lanes, &mut self.spare, message.envelope(), (place, id));
        self.messages.insert(id, (place, message));
    }

    /// The id of the first message `spec` accepts, dropping stale entries
    /// met at the front of its lane.
    fn first_id(&mut self, spec: &MatchSpec) -> Option<u64> {
        if !self.listed(spec) {
            return self.scan(spec).map(|(id, _)| id);
        }
        let lane = self.lanes.get_mut(spec)?;
        while let Some(&(_, id)) = lane.entries.front() {
            if self.messages.contains_key(&id) {
                return Some(id);
            }
            lane.entries.pop_front();
        }
        None
    }

    /// Whether the messages `spec` accepts have a lane of their own: all
    /// but a spec with any tag on a context where every spec names its tag
    /// ([`exact_only`]).
    fn listed(&self, spec: &MatchSpec) -> bool {
        !exact_only(spec.context) || spec.tag.is_some()
    }

    /// The first message `spec` accepts, and its id, found by looking at
    /// every message (for a spec without a lane: see [`listed`](UnexpectedQueue::listed)).
    fn scan(&self, spec: &MatchSpec) -> Option<(u64, &T)> {
        let accepted = self.messages.iter().filter(|(_, (_, message))| spec.accepts(message.envelope()));
        accepted.min_by_key(|(_, (place, _))| *place).map(|(&id, (_, message))| (id, message))
    }

    /// The first message `spec` accepts, left queued.
    pub(crate) fn first(&self, spec: &MatchSpec) -> Option<&T> {
        if !self.few.is_empty() {
            return self.few.iter().map(|(_, message)| message).find(|message| spec.accepts(message.envelope()));
        }
        if !self.listed(spec) {
            return self.scan(spec).map(|(_, message)| message);
        }
        let lane = self.lanes.get(spec)?;
        lane.entries.iter().find_map(|(_, id)| self.messages.get(id)).map(|(_, message)| message)
    }

    /// Removes and returns the first message `spec` accepts.
    pub(crate) fn take_first(&mut self, spec: &MatchSpec) -> Option<T> {
        if !self.few.is_empty() {
            let at = self.few.iter().position(|(_, message)| spec.accepts(message.envelope()))?;
            return Some(self.few.remove(at).1);
        }
        let id = self.first_id(spec)?;
        self.remove(id)
    }

    fn remove(&mut self, id: u64) -> Option<T> {
        let (_, message) = self.messages.remove(&id)?;
        let messages = &self.messages;
        for spec in lanes_of(message.envelope()) {
            let Entry::Occupied(mut entry) = self.lanes.entry(spec) else { continue };
            let lane = entry.get_mut();
            lane.live -= 1;
            if lane.live == 0 {
                entry.remove().entries.give_memory(&mut self.spare);
                continue;
            }
            if lane.entries.front().is_some_and(|&(_, first)| first == id) {
                // Taken in queue order (the common case): the lane stays
                // free of stale entries.
                lane.entries.pop_front();
            }
            if lane.entries.len() > 2 * lane.live + 16 {
                lane.entries.retain(|(_, id)| messages.contains_key(id));
            }
        }
        Some(message)
    }

    /// Every message, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.few.iter().chain(self.messages.values()).map(|(_, message)| message)
    }

    /// The first message (in no particular order) `pred` picks, to change.
    pub(crate) fn find_mut(&mut self, mut pred: impl FnMut(&T) -> bool) -> Option<&mut T> {
        self.few.iter_mut().chain(self.messages.values_mut()).map(|(_, message)| message).find(|message| pred(message))
    }

    /// Removes and returns every message `take` picks, in queue order, in
    /// one pass over the queue (where taking them one
    /// [`take_first`](UnexpectedQueue::take_first) at a time would scan it
    /// for each on a context without any-tag lanes).
    pub(crate) fn take_where(&mut self, take: impl Fn(&T) -> bool) -> Vec<T> {
        if !self.few.is_empty() {
            let (taken, kept) = std::mem::take(&mut self.few).into_iter().partition(|(_, message)| take(message));
            self.few = kept;
            return taken.into_iter().map(|(_, message): (u64, T)| message).collect();
        }
        let mut picked: Vec<(u64, u64)> = self.messages.iter().filter(|(_, (_, message))| take(message)).map(|(&id, &(place, _))| (place, id)).collect();
        picked.sort_unstable();
        picked.into_iter().filter_map(|(_, id)| self.remove(id)).collect()
    }

    /// Keeps only the messages `keep` accepts.
    pub(crate) fn retain(&mut self, keep: impl Fn(&T) -> bool) {
        drop(self.take_where(|message| !keep(message)));
    }

    pub(crate) fn clear(&mut self) {
        self.few.clear();
        self.messages.clear();
        self.lanes.clear();
    }

    /// Ids in queue order.
    fn ordered(&self) -> Vec<(u64, u64)> {
        let mut order: Vec<(u64, u64)> = self.messages.iter().map(|(&id, &(place, _))| (place, id)).collect();
        order.sort_unstable();
        order
    }

    /// Puts `message` back where `before` says: ahead of the first queued
    /// message `before` picks, in queue order, or behind the last one
    /// `after` picks, or else at the head. (A rare path: it walks the
    /// queue.)
    pub(crate) fn put_back(&mut self, message: T, before: impl Fn(&T) -> bool, after: impl Fn(&T) -> bool) {
        self.index_few();
        let mut order = self.ordered();
        let at = |order: &[(u64, u64)], messages: &HashMap<u64, (u64, T)>| {
            let pick = |f: &dyn Fn(&T) -> bool, i: usize| f(&messages[&order[i].1].1);
            (0..order.len())
                .find(|&i| pick(&before, i))
                .or_else(|| (0..order.len()).rev().find(|&i| pick(&after, i)).map(|i| i + 1))
                .unwrap_or(0)
        };
        let mut i = at(&order, &self.messages);
        let place = loop {
            let prev = i.checked_sub(1).map(|j| order[j].0);
            let next = order.get(i).map(|&(place, _)| place);
            match (prev, next) {
                (_, None) if self.back <= u64::MAX - STEP => {
                    let place = self.back;
                    self.back += STEP;
                    break place;
                }
                (None, Some(next)) if next >= STEP => break next - STEP,
                (Some(prev), Some(next)) if next - prev >= 2 => break prev + (next - prev) / 2,
                _ => {
                    self.renumber();
                    order = self.ordered();
                    i = at(&order, &self.messages);
                }
            }
        };
        self.insert(place, message);
    }

    /// Spaces the places out again ([`STEP`] apart, in queue order) and
    /// rebuilds the lanes.
    fn renumber(&mut self) {
        let order = self.ordered();
        self.lanes.clear();
        self.back = FIRST_PLACE;
        for (_, id) in order {
            let (place, message) = self.messages.get_mut(&id).expect("listed above");
            *place = self.back;
            self.back += STEP;
            list(&mut self.lanes, &mut self.spare, message.envelope(), (*place, id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::Repr;

    impl Queued for Envelope {
        fn envelope(&self) -> &Envelope {
            self
        }
    }

    /// A small deterministic generator: `next(n)` is in `0..n`.
    fn xorshift(mut x: u32) -> impl FnMut(u32) -> u32 {
        move |n| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % n
        }
    }

    /// The envelope of a message with no data.
    fn envelope(context: u64, source: u32, tag: i32, seq: u64) -> Envelope {
        Envelope { context, source, tag, signature: None, repr: Repr::Native, len: 0, desc_len: 0, seq }
    }

    /// `take_where` takes every message it picks, in queue order, from the
    /// few kept apart and from the maps alike, and leaves the rest as they
    /// were: here a collective context's messages (no any-tag lane) among
    /// a point-to-point context's.
    #[test]
    fn take_where_takes_what_it_picks_in_queue_order() {
        for queued in [3u64, 200] {
            let mut queue = UnexpectedQueue::default();
            for seq in 0..queued {
                let context = if seq % 3 == 0 { 2 } else { 3 };
                queue.push_back(envelope(context, (seq % 2) as u32, (seq % 5) as i32, seq));
            }
            let taken = queue.take_where(|env| env.context == 3);
            let expected: Vec<u64> = (0..queued).filter(|seq| seq % 3 != 0).collect();
            assert_eq!(taken.iter().map(|env| env.seq).collect::<Vec<_>>(), expected, "{queued} queued");
            assert_eq!(queue.len() as u64, queued - expected.len() as u64);
            let any_of_3 = MatchSpec { context: 3, source: None, tag: Some(1) };
            assert!(queue.take_first(&any_of_3).is_none(), "none of context 3 left");
            let any_of_2 = MatchSpec { context: 2, source: None, tag: None };
            let left: Vec<u64> = std::iter::from_fn(|| queue.take_first(&any_of_2)).map(|env| env.seq).collect();
            assert_eq!(left, (0..queued).filter(|seq| seq % 3 == 0).collect::<Vec<_>>(), "the rest in order");
        }
    }

    /// Emptied queues stay for the next receive of their spec, and are
    /// swept out once more than [`EMPTIED_KEPT`] have emptied: receives of
    /// ever new specs leave no trail behind.
    #[test]
    fn emptied_queues_stay_a_while_then_go() {
        let mut index = PostedQueue::default();
        // Receives that stay posted, so that the others go through the maps.
        let anchor = MatchSpec { context: 9, source: Some(0), tag: Some(0) };
        for i in 0..FEW as u64 {
            index.push(u64::MAX - i, anchor, None);
        }
        for tag in 0..1000 {
            let spec = MatchSpec { context: 1, source: Some(0), tag: Some(tag) };
            for round in 0..2 {
                index.push(tag as u64 * 2 + round, spec, None);
                assert_eq!(index.take_match(&envelope(1, 0, tag, 0)).map(|(id, _)| id), Some(tag as u64 * 2 + round));
                assert!(index.queues.contains_key(&spec), "tag {tag}, round {round}: kept for the next receive");
                assert_eq!(index.emptied.iter().filter(|&&s| s == spec).count(), 1, "listed once");
            }
            assert!(index.queues.len() <= EMPTIED_KEPT + 1, "{} queues after {tag}", index.queues.len());
        }
        // Withdrawn receives empty their queues too.
        for tag in 0..100 {
            let spec = MatchSpec { context: 2, source: None, tag: Some(tag) };
            index.push(5000 + tag as u64, spec, None);
            assert!(index.remove(5000 + tag as u64));
            assert!(index.queues.contains_key(&spec), "kept for the next receive");
            assert!(index.queues.len() <= EMPTIED_KEPT + 1);
        }
        // A queue a burst grew large gives its memory back as it empties.
        let spec = MatchSpec { context: 3, source: Some(1), tag: Some(1) };
        for id in 0..1000 {
            index.push(10_000 + id, spec, None);
        }
        for id in 0..1000 {
            assert_eq!(index.take_match(&envelope(3, 1, 1, 0)).map(|(id, _)| id), Some(10_000 + id));
        }
        assert!(!index.queues.contains_key(&spec), "a large emptied queue is dropped");
        assert_eq!(index.len(), FEW);
        for anchor in 0..FEW as u64 {
            assert!(index.remove(u64::MAX - anchor));
        }
        assert_eq!(index.len(), 0);
        assert_eq!(index.per_shape, [0; 4]);
    }

    /// A few receives stay out of the maps; one more moves them in, and
    /// they match, are listed and are withdrawn as any would be, in
    /// posting order.
    #[test]
    fn a_few_receives_are_held_apart_until_more_come() {
        let mut index = PostedQueue::default();
        let any_tag = MatchSpec { context: 1, source: Some(2), tag: None };
        let tag_5 = MatchSpec { context: 1, source: None, tag: Some(5) };
        index.push(1, any_tag, Some(8));
        assert!(index.few.len() == 1 && index.specs.is_empty() && index.queues.is_empty());
        assert_eq!((index.len(), index.spec(1), index.ids_where(|s| s.tag.is_none())), (1, Some(&any_tag), vec![1]));
        assert!(!index.any_source_posted() && index.take_match(&envelope(2, 2, 5, 0)).is_none(), "another context");
        assert!(index.take_match(&envelope(1, 3, 5, 0)).is_none(), "another source");
        assert_eq!(index.take_match(&envelope(1, 2, 7, 0)), Some((1, Some(8))));
        assert_eq!((index.len(), index.per_shape), (0, [0; 4]));
        // Kept apart, then moved in: posting order still decides.
        for round in 0..2 {
            let ids: Vec<ReqId> = (0..FEW as u64 + round).map(|i| 10 + i).collect();
            for &id in &ids {
                index.push(id, if id % 2 == 0 { tag_5 } else { any_tag }, None);
            }
            assert_eq!(index.few.is_empty(), round == 1, "{} receives", ids.len());
            assert_eq!(index.specs.len(), if round == 1 { ids.len() } else { 0 });
            assert!(index.any_source_posted());
            for &id in &ids {
                assert_eq!(index.take_match(&envelope(1, 2, 5, 0)).map(|(id, _)| id), Some(id), "posted in this order");
            }
            assert_eq!((index.len(), index.per_shape), (0, [0; 4]));
        }
        // Withdrawn, and taken by a failure, while kept apart.
        index.push(4, tag_5, None);
        index.push(5, any_tag, None);
        index.push(6, tag_5, None);
        assert!(index.few.len() == 3 && index.remove(4) && !index.remove(4));
        assert_eq!(index.remove_where(|s| s.source == Some(2)), vec![5]);
        assert_eq!((index.len(), index.spec(6)), (1, Some(&tag_5)));
        assert!(index.remove(6));
        assert_eq!((index.len(), index.per_shape), (0, [0; 4]));
    }

    /// A few messages stay out of the maps; one more moves them in behind
    /// nothing, a message put back goes ahead of them, and every query sees
    /// them.
    #[test]
    fn a_few_messages_are_held_apart_until_more_come() {
        let mut queue = UnexpectedQueue::<Envelope>::default();
        let from = |source: u32, tag: i32| MatchSpec { context: 1, source: Some(source), tag: Some(tag) };
        let any = MatchSpec { context: 1, source: None, tag: None };
        queue.push_back(envelope(1, 0, 7, 1));
        queue.push_back(envelope(1, 1, 8, 2));
        assert!(queue.few.len() == 2 && queue.messages.is_empty() && queue.lanes.is_empty());
        assert_eq!((queue.len(), queue.iter().count()), (2, 2));
        assert!(queue.first(&from(0, 8)).is_none() && queue.take_first(&from(1, 7)).is_none());
        assert!(queue.first(&MatchSpec { context: 2, ..any }).is_none(), "another context");
        assert_eq!(queue.first(&any).map(|e| e.seq), Some(1));
        assert_eq!(queue.first(&MatchSpec { source: None, ..from(0, 8) }).map(|e| e.seq), Some(2));
        queue.find_mut(|e| e.tag == 7).expect("found").len = 5;
        assert_eq!(queue.take_first(&from(0, 7)).map(|e| (e.seq, e.len)), Some((1, 5)));
        assert_eq!(queue.take_first(&any).map(|e| e.seq), Some(2));
        assert_eq!(queue.len(), 0);
        // One more than a few moves them into the maps, queue order kept.
        for seq in 0..=FEW as u64 {
            queue.push_back(envelope(1, (seq % 3) as u32, 7, 10 + seq));
        }
        assert!(queue.few.is_empty() && queue.messages.len() == FEW + 1);
        for seq in 0..=FEW as u64 {
            assert_eq!(queue.take_first(&any).map(|e| e.seq), Some(10 + seq));
        }
        // Put back ahead of messages kept apart (the head: nothing picked).
        queue.push_back(envelope(1, 0, 7, 5));
        queue.put_back(envelope(1, 0, 7, 4), |_| false, |_| false);
        assert_eq!((queue.take_first(&any).map(|e| e.seq), queue.take_first(&any).map(|e| e.seq)), (Some(4), Some(5)));
        // Dropped by retain and clear while kept apart.
        queue.push_back(envelope(1, 3, 1, 6));
        queue.push_back(envelope(1, 2, 1, 7));
        queue.retain(|e| e.source != 3);
        assert_eq!(queue.iter().map(|e| e.seq).collect::<Vec<_>>(), [7]);
        queue.clear();
        assert!(queue.len() == 0 && queue.first(&any).is_none());
    }

    /// The unexpected-message index against a list scanned in queue
    /// order, over random arrivals, receives and probes (with wildcards),
    /// messages put back by sender order, and removals.
    #[test]
    fn unexpected_index_matches_like_a_scan_in_queue_order() {
        let mut next = xorshift(0x2545_f491);
        for round in 0..200 {
            let (mut index, mut list) = (UnexpectedQueue::<Envelope>::default(), Vec::<Envelope>::new());
            let mut seq = 0u64;
            let mut taken: Vec<Envelope> = Vec::new();
            for _ in 0..400 {
                let wild = |v: u32, n: u32| (v < n).then_some(v);
                let spec = MatchSpec { context: next(2) as u64, source: wild(next(4), 3), tag: wild(next(4), 3).map(|t| t as i32) };
                match next(12) {
                    0..=4 => {
                        seq += 1;
                        let env = envelope(next(2) as u64, next(3), next(3) as i32, seq);
                        index.push_back(env);
                        list.push(env);
                    }
                    5..=6 => {
                        let want = list.iter().position(|env| spec.accepts(env)).map(|i| list.remove(i));
                        let got = index.take_first(&spec);
                        assert_eq!(got, want, "round {round}");
                        taken.extend(got);
                    }
                    7 => {
                        assert_eq!(index.first(&spec), list.iter().find(|env| spec.accepts(env)));
                    }
                    8..=9 if !taken.is_empty() => {
                        // Put a taken message back in its sender's order.
                        let u = taken.swap_remove(next(taken.len() as u32) as usize);
                        let same = |q: &Envelope| q.source == u.source;
                        let before = |q: &Envelope| same(q) && q.seq > u.seq;
                        let after = |q: &Envelope| same(q) && q.seq < u.seq;
                        let at = list
                            .iter()
                            .position(before)
                            .or_else(|| list.iter().rposition(after).map(|i| i + 1))
                            .unwrap_or(0);
                        list.insert(at, u);
                        index.put_back(u, before, after);
                    }
                    10 => {
                        let source = next(3);
                        list.retain(|env| env.source != source);
                        index.retain(|env| env.source != source);
                    }
                    _ => {}
                }
                assert_eq!(index.len(), list.len());
            }
            // Everything left comes out in queue order, on either context
            // (1 is a collective context: a spec with any tag scans).
            for context in [0, 1] {
                let all = MatchSpec { context, source: None, tag: None };
                let want: Vec<Envelope> = list.iter().filter(|env| env.context == context).copied().collect();
                let got: Vec<Envelope> = std::iter::from_fn(|| index.take_first(&all)).collect();
                assert_eq!(got, want);
            }
            assert_eq!(index.len(), 0);
        }
    }

    /// On a collective context, a call's messages from any rank are found
    /// in their tag's lane, without a look at other calls' messages (a
    /// root that runs ahead over messages queues hundreds of them, and
    /// every rank drops each call's late messages as the call ends): only
    /// a spec with any tag scans there.
    #[test]
    fn a_collective_context_lists_messages_by_tag() {
        let mut queue = UnexpectedQueue::<Envelope>::default();
        for seq in 0..100u64 {
            queue.push_back(envelope(1, (seq % 3) as u32, seq as i32, seq));
        }
        let by_tag = MatchSpec { context: 1, source: None, tag: Some(42) };
        assert!(queue.listed(&by_tag) && queue.lanes.contains_key(&by_tag), "any source with a tag has a lane");
        assert!(!queue.listed(&MatchSpec { context: 1, source: Some(0), tag: None }), "any tag scans");
        assert_eq!(queue.take_first(&by_tag).map(|e| e.seq), Some(42));
        assert!(queue.take_first(&by_tag).is_none());
        assert_eq!(queue.len(), 99);
    }

    /// Places run out between two neighbours: the queue renumbers and keeps
    /// its order.
    #[test]
    fn putting_back_between_close_neighbours_renumbers() {
        let env = |source: u32, seq: u64| envelope(0, source, 0, seq);
        let mut index = UnexpectedQueue::<Envelope>::default();
        index.push_back(env(0, 1));
        index.push_back(env(0, 1000));
        let any = MatchSpec { context: 0, source: None, tag: None };
        // Each message goes just after the previous one: halving the gap
        // every time exhausts it after about twenty.
        for seq in 2..100 {
            index.put_back(env(0, seq), |q| q.seq > seq, |q| q.seq < seq);
        }
        let got: Vec<u64> = std::iter::from_fn(|| index.take_first(&any)).map(|e| e.seq).collect();
        assert_eq!(got, [1].into_iter().chain(2..100).chain([1000]).collect::<Vec<_>>());
    }

    /// A queue that is never empty for as many messages as places run to
    /// (set here to their last few) spaces its places out again rather
    /// than wrap round, and keeps its order; an emptied queue starts its
    /// places again.
    #[test]
    fn places_never_wrap_round() {
        let env = |source: u32, tag: i32, seq: u64| envelope(0, source, tag, seq);
        let any = MatchSpec { context: 0, source: None, tag: None };
        for held in [1u64, 40] {
            let mut queue = UnexpectedQueue::<Envelope>::default();
            for seq in 0..held {
                queue.push_back(env(seq as u32 % 3, 0, seq));
            }
            queue.back = u64::MAX - 2 * STEP;
            for seq in held..held + 10 {
                queue.push_back(env(seq as u32 % 3, 1, seq));
            }
            assert!(queue.back < u64::MAX / 2, "places spaced out again: {}", queue.back);
            // A message put back at the end, once places run out again.
            queue.back = u64::MAX - STEP / 2;
            queue.put_back(env(0, 2, held + 10), |_| false, |_| true);
            let lane = MatchSpec { context: 0, source: Some(1), tag: None };
            let got: Vec<u64> = std::iter::from_fn(|| queue.take_first(&lane)).map(|e| e.seq).collect();
            assert_eq!(got, (0..held + 10).filter(|seq| seq % 3 == 1).collect::<Vec<_>>());
            let got: Vec<u64> = std::iter::from_fn(|| queue.take_first(&any)).map(|e| e.seq).collect();
            assert_eq!(got, (0..held + 11).filter(|seq| seq % 3 != 1 || *seq == held + 10).collect::<Vec<_>>());
            // Empty: the next message takes the first place.
            queue.back = u64::MAX - STEP / 2;
            queue.push_back(env(0, 0, 0));
            assert_eq!(queue.back, FIRST_PLACE + STEP);
        }
    }
    /// The posted-receive index against a list scanned in posting order,
    /// over random posts (with wildcards), arrivals, withdrawals and peer
    /// failures.
    #[test]
    fn specs_hash_as_they_compare() {
        use std::hash::BuildHasher;
        let hash = |spec: &MatchSpec| rustc_hash::FxBuildHasher.hash_one(spec);
        let specs: Vec<MatchSpec> = [0u64, 1, 1 << 40]
            .into_iter()
            .flat_map(|context| {
                [None, Some(0u32), Some(1), Some(2), Some(3), Some(u32::MAX)].into_iter().flat_map(move |source| {
                    [None, Some(0i32), Some(-1), Some(1), Some(i32::MIN), Some(i32::MAX)]
                        .into_iter()
                        .map(move |tag| MatchSpec { context, source, tag })
                })
            })
            .collect();
        let mut seen = std::collections::HashMap::new();
        for spec in &specs {
            let copy = *spec;
            assert_eq!(hash(spec), hash(&copy), "{spec:?}");
            if let Some(other) = seen.insert(hash(spec), *spec) {
                panic!("{spec:?} and {other:?} hash alike");
            }
        }
    }

    #[test]
    fn posted_index_matches_like_a_scan_in_posting_order() {
        let mut next = xorshift(0x9e37_79b9);
        for _ in 0..200 {
            // The reference: (receive, spec) in posting order.
            let (mut index, mut list) = (PostedQueue::default(), Vec::<(ReqId, MatchSpec)>::new());
            let mut id = 0;
            for _ in 0..300 {
                let wild = |v: u32, n: u32| (v < n).then_some(v);
                match next(10) {
                    0..=4 => {
                        // Up to 48 specs: more than EMPTIED_KEPT, so
                        // sweeps run.
                        let spec = MatchSpec {
                            context: next(3) as u64,
                            source: wild(next(4), 3),
                            tag: wild(next(4), 3).map(|t| t as i32),
                        };
                        index.push(id, spec, None);
                        list.push((id, spec));
                        id += 1;
                    }
                    5..=7 => {
                        let env = envelope(next(3) as u64, next(3), next(3) as i32, 0);
                        let want = list.iter().position(|(_, spec)| spec.accepts(&env)).map(|i| list.remove(i).0);
                        assert_eq!(index.take_match(&env).map(|(id, _)| id), want);
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
                let mut per_shape = [0; 4];
                for (_, spec) in &list {
                    per_shape[shape(spec)] += 1;
                }
                assert_eq!(index.per_shape, per_shape, "receives counted per shape");
                assert!(index.spare.0.len() <= Spare::<(u64, ReqId)>::KEEP);
                assert!(index.emptied.len() <= EMPTIED_KEPT);
                for (spec, posted) in &index.queues {
                    assert!(!posted.receives.is_empty() || (posted.listed && index.emptied.contains(spec)), "every empty queue is listed");
                }
            }
        }
    }

}
