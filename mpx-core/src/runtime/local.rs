//! A meeting place for the ranks of one world that share one process.
//!
//! Ranks in one process need no messages for a collective: each rank
//! leaves its part of a call (the values it contributes, packed) at a
//! *round* that every member of the communicator sees, and once the parts
//! it needs are there (every member's, or one member's, such as a
//! broadcast's root), takes what it needs from them. A transport
//! whose ranks all live in one process (the in-memory loopback) hands its
//! endpoints one [`LocalWorld`] ([`Transport::local_world`]); collectives
//! on such endpoints meet there (see `coll::local`), on other transports
//! they exchange messages.
//!
//! A round completes when every member has left its part. A member waiting
//! at it fails when a member whose part it waits for is gone without
//! leaving it: its endpoint finalized, aborted, closed or dropped
//! ([`LocalWorld::leave`]); a gone member's own calls fail with
//! [`ErrorKind::Finalized`]. Parts are values the round owns (no part
//! points into a caller's memory), so a rank may drop its future at any
//! time: what it left stays for the others.
//!
//! Point-to-point messages between such ranks may meet too
//! ([`LocalWorld::meeting`]): a sender hands its message to its
//! receiver's engine itself, without frames (see
//! [`Engine::arrive_local`](crate::proto::engine::Engine::arrive_local)).
//!
//! [`Transport::local_world`]: super::Transport::local_world

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The ranks of one world that live in one process, as their transport
/// sees them: where their collectives meet, and where their
/// point-to-point messages may meet their receivers
/// ([`LocalWorld::meeting`]).
///
/// Ranks in one process need no messages for a collective: each rank
/// leaves its part of a call (the values it contributes, packed) at a
/// round every member of the communicator sees, and once the parts it
/// needs are there (every member's, or a broadcast's root's), takes what
/// it needs from them into its own memory, in its own call (if they were
/// there when it left its part) or its own future's poll. A
/// rank waiting at a round fails when a member whose part it waits for is
/// gone without leaving it: its endpoint finalized, aborted, closed or
/// dropped. Parts are values the round
/// owns, so a rank may drop its future at any time: what it left stays
/// for the others. A transport whose ranks all live in one process hands
/// every endpoint of the world the same `LocalWorld`
/// ([`Transport::local_world`](super::Transport::local_world)).
///
/// ```
/// use mpx_core::runtime::LocalWorld;
/// let world = LocalWorld::new(4);
/// assert_eq!(world.ranks(), 4);
/// ```
pub struct LocalWorld {
    /// Per world rank: its endpoint has gone.
    gone: Arc<[AtomicBool]>,
    /// The communicators whose collectives meet here, by collective
    /// context and members (world ranks, in communicator order).
    comms: Mutex<HashMap<CommKey, Arc<LocalComm>>>,
    /// Collectives meet here.
    collectives: bool,
    /// Point-to-point messages meet at their receivers' engines.
    messages: bool,
    /// Per world rank, its endpoint, once made (see [`LocalWorld::join`]).
    endpoints: Box<[OnceLock<Weak<super::endpoint::Shared>>]>,
}

impl std::fmt::Debug for LocalWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalWorld({} ranks)", self.ranks())
    }
}

impl LocalWorld {
    /// A world of `ranks` ranks in this process, for their transport to
    /// hand to each of their endpoints: collectives meet here, messages
    /// travel as frames (see [`meeting`](LocalWorld::meeting)).
    pub fn new(ranks: usize) -> Arc<LocalWorld> {
        LocalWorld::meeting(ranks, true, false)
    }

    /// A world of `ranks` ranks in this process where collectives meet
    /// (`collectives`) and where point-to-point messages meet at their
    /// receivers (`messages`): a send to another rank of the world hands
    /// its message to the receiver's engine, without frames or the
    /// transport, once both ranks' endpoints are made and neither has
    /// gone (a rank that has finalized, closed or aborted sends and is
    /// sent to through its transport, which reports what it should).
    ///
    /// ```
    /// use mpx_core::runtime::LocalWorld;
    /// let world = LocalWorld::meeting(2, false, true);
    /// assert!(!world.collectives_meet() && world.messages_meet());
    /// ```
    pub fn meeting(ranks: usize, collectives: bool, messages: bool) -> Arc<LocalWorld> {
        Arc::new(LocalWorld {
            gone: (0..ranks).map(|_| AtomicBool::new(false)).collect(),
            comms: Mutex::new(HashMap::new()),
            collectives,
            messages,
            endpoints: (0..ranks).map(|_| OnceLock::new()).collect(),
        })
    }

    /// Whether collectives meet here.
    pub fn collectives_meet(&self) -> bool {
        self.collectives
    }

    /// Whether point-to-point messages meet at their receivers.
    pub fn messages_meet(&self) -> bool {
        self.messages
    }

    /// World rank `rank`'s endpoint is made: messages to it may meet it.
    /// A rank joins once; a later endpoint claiming it is ignored.
    pub(crate) fn join(&self, rank: u32, endpoint: Weak<super::endpoint::Shared>) {
        if let Some(slot) = self.endpoints.get(rank as usize) {
            let _ = slot.set(endpoint);
        }
    }

    /// Rank `to`'s endpoint, for rank `from` to hand a message to, if
    /// messages meet here and neither rank has gone.
    #[inline]
    pub(crate) fn receiver(&self, from: u32, to: u32) -> Option<Arc<super::endpoint::Shared>> {
        if !self.messages || from == to {
            return None;
        }
        let gone = |rank: u32| self.gone.get(rank as usize).is_none_or(|g| g.load(Ordering::Acquire));
        if gone(from) || gone(to) {
            return None;
        }
        self.endpoints.get(to as usize)?.get()?.upgrade()
    }

    /// Tells each sender of `answers` (sender, send, outcome) that its send
    /// whose message waited at another rank is done (see
    /// [`Event::LocalSendDone`](crate::proto::engine::Event::LocalSendDone)),
    /// if its endpoint is still there. Takes each sender's lock: the caller
    /// holds none.
    pub(crate) fn answer_senders(&self, answers: Vec<(u32, crate::proto::engine::ReqId, Result<()>)>) {
        for (rank, id, result) in answers {
            if let Some(sender) = self.endpoints.get(rank as usize).and_then(OnceLock::get).and_then(Weak::upgrade) {
                sender.local_send_done(id, result);
            }
        }
    }

    /// The number of ranks.
    pub fn ranks(&self) -> usize {
        self.gone.len()
    }

    /// The meeting places open (held, or with rounds open).
    #[cfg(test)]
    pub(crate) fn meeting_places(&self) -> usize {
        lock(&self.comms).len()
    }

    /// The meeting place of the communicator with collective context
    /// `context` and `members`, for its member `me` (a communicator rank),
    /// who holds it until it drops the returned [`LocalMember`].
    pub(crate) fn comm(self: &Arc<Self>, context: u64, members: Arc<[u32]>, me: usize) -> LocalMember {
        let mut comms = lock(&self.comms);
        let comm = comms
            .entry((context, members.clone()))
            .or_insert_with(|| {
                let n = members.len();
                Arc::new(LocalComm {
                    world: Arc::downgrade(self),
                    context,
                    gone: self.gone.clone(),
                    members,
                    state: Mutex::new(CommState::new(n)),
                })
            })
            .clone();
        lock(&comm.state).holders[me] = true;
        LocalMember { comm, me }
    }

    /// World rank `rank`'s endpoint has gone: every round that waits for
    /// a part it has not left fails (its waiting ranks are woken to see
    /// it), and it leaves no more parts. Once gone, a rank stays gone.
    pub(crate) fn leave(&self, rank: u32) {
        let Some(flag) = self.gone.get(rank as usize) else { return };
        if flag.swap(true, Ordering::SeqCst) {
            return;
        }
        let comms: Vec<Arc<LocalComm>> = lock(&self.comms).values().filter(|c| c.members.contains(&rank)).cloned().collect();
        for comm in comms {
            let (wakers, idle) = {
                let mut st = lock(&comm.state);
                let mut wakers = st.sweep(&comm);
                st.open_rounds_mut().flat_map(|round| round.wakers.iter_mut().filter_map(Option::take)).for_each(|(w, _)| wakers.push(w));
                (wakers, st.is_idle())
            };
            wakers.wake();
            if idle {
                comm.remove_if_idle();
            }
        }
    }
}

/// A communicator as its meeting place is known: its collective context
/// and its members (world ranks, in communicator order).
type CommKey = (u64, Arc<[u32]>);

/// One member's hold on its communicator's meeting place: the
/// communicator's collectives' state keeps it (its registration's, or
/// the endpoint's for the world). The place goes once no
/// member holds it and no round is open there (a member that dropped its
/// communicator may have left parts the others have yet to take).
pub(crate) struct LocalMember {
    pub(crate) comm: Arc<LocalComm>,
    me: usize,
}

impl Drop for LocalMember {
    fn drop(&mut self) {
        let idle = {
            let mut st = lock(&self.comm.state);
            st.holders[self.me] = false;
            st.is_idle()
        };
        if idle {
            self.comm.remove_if_idle();
        }
    }
}

/// A communicator's meeting place: its rounds, by call number and phase.
pub(crate) struct LocalComm {
    world: Weak<LocalWorld>,
    context: u64,
    gone: Arc<[AtomicBool]>,
    /// World ranks, in communicator order.
    members: Arc<[u32]>,
    state: Mutex<CommState>,
}

struct CommState {
    /// The open rounds, in call order: usually few (the calls ranks have
    /// started and not all finished). Boxed, so that a round made or
    /// retired moves a pointer, not the round.
    rounds: VecDeque<(RoundKey, Box<Round>)>,
    /// Rounds gone, emptied, for the next ones (their lists kept): boxed
    /// as the open ones are, so that they move between the two lists as
    /// pointers. At most `spare_most` (see [`SPARE_MEMORY`]).
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Round>>,
    /// The most emptied rounds kept: as many as fit in [`SPARE_MEMORY`].
    spare_most: usize,
    /// Per member: it holds the place ([`LocalMember`]).
    holders: Vec<bool>,
}

/// What the rounds open on a communicator may hold when a broadcast's
/// root leaves its part and finishes without waiting for the others
/// (see [`LocalComm::run_ahead`]): the rounds' own memory and the data of
/// the root's parts.
const RUN_AHEAD_MEMORY: usize = 4 << 20;

/// The fewest and the most calls a broadcast's root may run ahead, within
/// [`RUN_AHEAD_MEMORY`].
const RUN_AHEAD_CALLS: std::ops::RangeInclusive<usize> = 16..=4096;

/// The memory of the emptied rounds a meeting place keeps for its next
/// calls (at least 32 rounds): half of what a root running ahead may hold
/// open, so that a root broadcasting in a loop seldom makes a round, once
/// warmed up. A program that once left more rounds open keeps no more.
const SPARE_MEMORY: usize = RUN_AHEAD_MEMORY / 2;

/// The memory of an open round of `members` members, its parts empty:
/// what [`RUN_AHEAD_MEMORY`] and [`SPARE_MEMORY`] count.
fn round_memory(members: usize) -> usize {
    use std::mem::size_of;
    let member = size_of::<Option<Part>>() + size_of::<Option<SmallPart>>() + size_of::<Option<(Waker, Option<usize>)>>();
    size_of::<(RoundKey, Box<Round>)>() + size_of::<Round>() + members * member
}

/// A collective call's number on its communicator, and the phase of the
/// call (0 for calls of one phase).
pub(crate) type RoundKey = (u32, u8);

/// A round where members whose collective exchanges messages and members
/// whose collective meets have left parts (see [`MESSAGES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mixed {
    /// The most sub-tags the members over messages use.
    pub(crate) subtags: usize,
    /// A member that meets.
    pub(crate) meets: usize,
}

/// The kind of part a member leaves whose collective exchanges messages
/// instead of meeting (its kind's second field: the sub-tags its messages
/// use): where such parts meet parts of members that meet, the call is
/// erroneous, and the members over messages must be told (see
/// [`Round::mixed`]).
pub(crate) const MESSAGES: u8 = 5;

/// Round `a` belongs to a later call than `b`, or to a later phase of the
/// same call. Call numbers wrap around: the open rounds of a
/// communicator span far fewer than 2³¹ calls, so a number up to 2³¹
/// ahead is later.
fn newer(a: RoundKey, b: RoundKey) -> bool {
    let ahead = a.0.wrapping_sub(b.0) as i32;
    ahead > 0 || (ahead == 0 && a.1 > b.1)
}

/// A part as it is left: a [`Part`], or a [`SmallPart`].
enum Placed {
    Part(Part),
    Small(SmallPart),
}

impl Placed {
    fn kind(&self) -> (u8, usize) {
        match self {
            Placed::Part(part) => part.kind,
            Placed::Small(part) => part.kind,
        }
    }
}

/// One phase of one collective call.
struct Round {
    /// Each member's part, once left (unless it is small).
    parts: Vec<Option<Part>>,
    /// Each member's small part, once left (see [`SmallPart`]).
    small: Vec<Option<SmallPart>>,
    /// Some member left a part that is not small.
    any_part: bool,
    /// Members whose part says their collective exchanges messages (of
    /// kind [`MESSAGES`]), and the most sub-tags any of them uses.
    over_messages: (usize, usize),
    arrived: usize,
    /// Every part, shared with the members that read them, once all have
    /// arrived, unless every part is small (small parts are read where
    /// they lie, under the lock).
    complete: Option<Parts>,
    /// Members done with the round (took the parts, failed, or dropped
    /// their [`Seat`]).
    done: usize,
    /// Members waiting: for the round to complete (`None`), or for one
    /// member's part.
    wakers: Vec<Option<(Waker, Option<usize>)>>,
}

/// What one rank leaves at a round.
#[derive(Debug)]
pub(crate) struct Part {
    /// The collective the rank called (a number the collectives give
    /// themselves), and its root (0 where there is none).
    pub(crate) kind: (u8, usize),
    /// What one block of the rank's part holds (or, where it sends none,
    /// would hold): its type signature and bytes. Every rank's must agree.
    pub(crate) shape: (Option<(u64, u64)>, u64),
    /// The rank's blocks, in this process's native representation: one
    /// for every rank, one for each rank in turn, or none; `Err` if the
    /// rank gave up on the call, saying why.
    pub(crate) blocks: std::result::Result<Vec<Block>, String>,
    /// Large buffers the blocks are slices of, if they share them (kept
    /// to be reused, see [`recycle`]): an alltoall's blocks before and
    /// after the rank's own.
    pub(crate) whole: Vec<Bytes>,
}

/// What one rank leaves at a round for a call of a few plain bytes: its
/// kind and shape, as a [`Part`]'s, and its blocks' bytes held in itself
/// (one block, or a few of one size one after another, as an alltoall's
/// for each rank in turn), with no list and no shared buffer. A member
/// that left one reads the parts it needs under the round's lock (see
/// [`LocalComm::sit_small`]), so a round whose parts are all small shares
/// no list of parts to recycle; where small parts meet others, the round
/// shares them all as parts (small ones of their few blocks).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SmallPart {
    pub(crate) kind: (u8, usize),
    pub(crate) shape: (Option<(u64, u64)>, u64),
    pub(crate) data: InlineBytes,
    /// The type signature of each block.
    pub(crate) signature: Option<(u64, u64)>,
    /// How many blocks of one size `data` holds (at least 1).
    blocks: u8,
}

impl SmallPart {
    /// A part of `kind` and `shape` whose one block is `bytes` of type
    /// signature `signature`, if they are few enough ([`INLINE`]).
    #[inline(always)]
    pub(crate) fn new(kind: (u8, usize), shape: (Option<(u64, u64)>, u64), bytes: &[u8], signature: Option<(u64, u64)>) -> Option<SmallPart> {
        SmallPart::of_blocks(kind, shape, bytes, signature, 1)
    }

    /// A part of `kind` and `shape` whose `blocks` blocks of one size are
    /// `bytes`, one after another, each of type signature `signature`, if
    /// they are few enough ([`INLINE`]) and cut evenly.
    #[inline(always)]
    pub(crate) fn of_blocks(kind: (u8, usize), shape: (Option<(u64, u64)>, u64), bytes: &[u8], signature: Option<(u64, u64)>, blocks: usize) -> Option<SmallPart> {
        let blocks = u8::try_from(blocks).ok().filter(|&b| b > 0 && bytes.len().is_multiple_of(usize::from(b)))?;
        Some(SmallPart { kind, shape, data: InlineBytes::copy_of(bytes)?, signature, blocks })
    }

    /// Block `k`'s bytes and type signature, if the part has that many.
    #[inline]
    fn block(&self, k: usize) -> Option<BlockView<'_>> {
        let data = self.data.as_slice();
        if self.blocks == 1 {
            return (k == 0).then_some((data, self.signature));
        }
        let size = data.len() / usize::from(self.blocks);
        (k < usize::from(self.blocks)).then(|| (&data[k * size..(k + 1) * size], self.signature))
    }

    /// The part as a [`Part`] of its blocks.
    fn into_part(self) -> Part {
        let blocks = match self.blocks {
            1 => one_block(Block { data: BlockBytes::Inline(self.data), signature: self.signature }),
            n => {
                let mut list = block_list(usize::from(n));
                for (data, signature) in (0..usize::from(n)).filter_map(|k| self.block(k)) {
                    list.push(Block { data: BlockBytes::Inline(InlineBytes::copy_of(data).expect("a block of inline bytes fits")), signature });
                }
                list
            }
        };
        Part { kind: self.kind, shape: self.shape, blocks: Ok(blocks), whole: Vec::new() }
    }
}

/// One member's part, as a member reading a round under its lock sees it
/// (see [`MemberParts`]): kind, shape, and the block read (bytes and
/// signature), or why it gave up.
pub(crate) struct MemberPart<'r> {
    pub(crate) kind: (u8, usize),
    pub(crate) shape: (Option<(u64, u64)>, u64),
    pub(crate) block: std::result::Result<BlockView<'r>, &'r str>,
}

/// A block as a reader sees it: its bytes and their type signature.
pub(crate) type BlockView<'r> = (&'r [u8], Option<(u64, u64)>);

/// The members' parts of a round, as a member reading them under the
/// round's lock sees them: every part of a complete round, or the part
/// the member waits for alone.
pub(crate) struct MemberParts<'r> {
    round: &'r Round,
}

impl<'r> MemberParts<'r> {
    /// The number of members.
    pub(crate) fn len(&self) -> usize {
        self.round.parts.len()
    }

    /// The number of members that have left their parts.
    #[inline]
    pub(crate) fn arrived(&self) -> usize {
        self.round.arrived
    }

    /// Member `r` has left its part (every member has, in a round a
    /// member reads whole).
    #[inline]
    pub(crate) fn has(&self, r: usize) -> bool {
        self.round.has_part(r)
    }

    /// Member `r`'s part is of `kind` and `shape`, and did not give up.
    #[inline]
    pub(crate) fn agrees(&self, r: usize, kind: (u8, usize), shape: (Option<(u64, u64)>, u64)) -> bool {
        match &self.round.small[r] {
            Some(small) => small.kind == kind && small.shape == shape,
            None => {
                let part = self.get(r);
                part.kind == kind && part.shape == shape && part.block.is_ok()
            }
        }
    }

    /// Member `r`'s first block's bytes (none if it gave up).
    #[inline]
    pub(crate) fn bytes(&self, r: usize) -> &'r [u8] {
        self.block(r, 0).0
    }

    /// Member `r`'s block `k`: its bytes and type signature (none if it
    /// gave up or has no such block). A small part's is read where it
    /// lies, without the rest of [`get_block`](MemberParts::get_block).
    #[inline]
    pub(crate) fn block(&self, r: usize, k: usize) -> BlockView<'r> {
        let none = (&[][..], None);
        match &self.round.small[r] {
            Some(small) => small.block(k).unwrap_or(none),
            None => self.get_block(r, k).block.unwrap_or(none),
        }
    }

    /// If members whose collective exchanges messages and members whose
    /// collective meets have both left parts: what [`Mixed`] says, to tell
    /// the former that the call failed.
    #[inline]
    pub(crate) fn mixed(&self) -> Option<Mixed> {
        self.round.mixed()
    }

    /// The most sub-tags a member whose collective exchanges messages
    /// uses (see [`MESSAGES`]), if any such member has left its part.
    pub(crate) fn over_messages(&self) -> Option<usize> {
        let (members, subtags) = self.round.over_messages;
        (members > 0).then_some(subtags)
    }

    /// Member `r`'s part, with its first block.
    pub(crate) fn get(&self, r: usize) -> MemberPart<'r> {
        self.get_block(r, 0)
    }

    /// Member `r`'s part, with its block `k` (empty if it has none).
    pub(crate) fn get_block(&self, r: usize, k: usize) -> MemberPart<'r> {
        let general = |part: &'r Part| MemberPart {
            kind: part.kind,
            shape: part.shape,
            block: match &part.blocks {
                Ok(blocks) => Ok(blocks.get(k).map_or((&[][..], None), |b| (&b.data[..], b.signature))),
                Err(why) => Err(why.as_str()),
            },
        };
        let round = self.round;
        if let Some(parts) = &round.complete {
            return general(&parts[r]);
        }
        match (&round.small[r], &round.parts[r]) {
            (Some(small), _) => MemberPart { kind: small.kind, shape: small.shape, block: Ok(small.block(k).unwrap_or((&[][..], None))) },
            (None, Some(part)) => general(part),
            (None, None) => unreachable!("a part read is there"),
        }
    }
}

/// Every member's part of a complete round, in member order, shared by
/// the members that read them.
pub(crate) type Parts = Arc<Vec<Part>>;

/// Packed values a rank leaves for others: native bytes and their type
/// signature.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub(crate) data: BlockBytes,
    pub(crate) signature: Option<(u64, u64)>,
}

/// A block's bytes: up to [`INLINE`] of them held in the block itself (a
/// small collective's values: no allocation, nothing shared), more in a
/// shared buffer.
#[derive(Debug, Clone)]
pub(crate) enum BlockBytes {
    Inline(InlineBytes),
    Shared(Bytes),
}

/// The most bytes a block holds in itself.
pub(crate) const INLINE: usize = 24;

/// Up to [`INLINE`] bytes, aligned for every basic type of 8 bytes or
/// fewer (values are read where they lie: see `coll::local`).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct InlineBytes {
    bytes: [u8; INLINE],
    len: u8,
}

impl InlineBytes {
    /// A copy of `bytes`, if they fit.
    #[inline]
    fn copy_of(bytes: &[u8]) -> Option<InlineBytes> {
        let len = u8::try_from(bytes.len()).ok().filter(|&len| usize::from(len) <= INLINE)?;
        let mut inline = InlineBytes { bytes: [0; INLINE], len };
        inline.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(inline)
    }

    /// The bytes held.
    #[inline]
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl BlockBytes {
    /// No bytes.
    pub(crate) const EMPTY: BlockBytes = BlockBytes::Inline(InlineBytes { bytes: [0; INLINE], len: 0 });

    /// A copy of `bytes`, held inline if they fit.
    pub(crate) fn copy_of(bytes: &[u8]) -> crate::Result<BlockBytes> {
        if let Some(inline) = InlineBytes::copy_of(bytes) {
            return Ok(BlockBytes::Inline(inline));
        }
        Ok(BlockBytes::Shared(Bytes::from(crate::pack::spare::copy_of(bytes)?)))
    }

    /// The bytes as a shared buffer (copied if inline).
    pub(crate) fn to_shared(&self) -> Bytes {
        match self {
            BlockBytes::Inline(_) => Bytes::copy_from_slice(self),
            BlockBytes::Shared(bytes) => bytes.clone(),
        }
    }
}

impl std::ops::Deref for BlockBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            BlockBytes::Inline(inline) => inline.as_slice(),
            BlockBytes::Shared(bytes) => bytes,
        }
    }
}

impl From<Bytes> for BlockBytes {
    fn from(bytes: Bytes) -> BlockBytes {
        BlockBytes::Shared(bytes)
    }
}

impl LocalComm {
    /// The number of members.
    pub(crate) fn size(&self) -> usize {
        self.members.len()
    }

    /// How many calls may be open on this communicator when a broadcast's
    /// root with `data` bytes to leave finishes without waiting for the
    /// others: as many as [`RUN_AHEAD_MEMORY`] holds, rounds and data
    /// (between 16 and 4,096 calls: [`RUN_AHEAD_CALLS`]).
    pub(crate) fn run_ahead(&self, data: u64) -> usize {
        let per_call = round_memory(self.size()).saturating_add(usize::try_from(data).unwrap_or(usize::MAX));
        (RUN_AHEAD_MEMORY / per_call).clamp(*RUN_AHEAD_CALLS.start(), *RUN_AHEAD_CALLS.end())
    }

    /// Leaves member `me`'s `part` at round `key`; the returned seat waits
    /// for the round to complete (a [`Future`](std::future::Future)), or
    /// for one member's part ([`Seat::poll_part`]). This member wakes
    /// those waiting for its part, and every waiting member if it
    /// completes the round. A member whose endpoint has gone leaves nothing: its seat
    /// fails with [`ErrorKind::Finalized`].
    ///
    /// If what the member `wants` is there already (it completed the
    /// round, or the part it waits for was left before its own), the
    /// member takes it now, done with the round ([`Arrival::Took`]): it
    /// finishes its call without waiting, under this one lock.
    pub(crate) fn sit(self: &Arc<Self>, key: RoundKey, me: usize, part: Part, wants: Option<Want>) -> Arrival {
        self.sit_with(key, me, Placed::Part(part), |round, _| match wants {
            Some(Want::All) => round.shared_parts().map(Got::All),
            Some(Want::One(r)) => round.glimpse(r).map(Got::One),
            None => None,
        })
    }

    /// Leaves member `me`'s small `part` at round `key` (see
    /// [`SmallPart`]); if the parts the member waits for are there now
    /// (every member's, or member `from`'s), reads them with `read` under
    /// the lock, done with the round ([`Arrival::Took`]); otherwise (or
    /// with no `read`) the member waits at its seat, and reads them with
    /// [`Seat::poll_read`]. Otherwise as [`sit`](LocalComm::sit).
    pub(crate) fn sit_small<R>(
        self: &Arc<Self>,
        key: RoundKey,
        me: usize,
        part: SmallPart,
        from: Option<usize>,
        read: &mut Option<impl FnOnce(MemberParts<'_>) -> R>,
    ) -> Arrival<R> {
        self.sit_with(key, me, Placed::Small(part), |round, _| match read.is_some() && round.has(from) {
            true => Some(read.take().expect("read once")(MemberParts { round })),
            false => None,
        })
    }

    /// Leaves member `me`'s small `part` at round `key` and is done with
    /// the round at once ([`Arrival::Took`]) if at most `open` rounds are
    /// open with it (a broadcast's root, which has nothing to take, runs
    /// ahead so); waits at its seat otherwise, as
    /// [`sit_small`](LocalComm::sit_small). A member done at once takes
    /// what `look` sees of the parts there (those left before its own, and
    /// its own) once its part is left.
    pub(crate) fn leave_small<R>(self: &Arc<Self>, key: RoundKey, me: usize, part: SmallPart, open: usize, look: impl FnOnce(MemberParts<'_>) -> R) -> Arrival<R> {
        self.sit_with(key, me, Placed::Small(part), |round, now_open| (now_open <= open).then(|| look(MemberParts { round })))
    }

    /// [`leave_small`](LocalComm::leave_small) of a `part` that is not
    /// small.
    pub(crate) fn leave<R>(self: &Arc<Self>, key: RoundKey, me: usize, part: Part, open: usize, look: impl FnOnce(MemberParts<'_>) -> R) -> Arrival<R> {
        self.sit_with(key, me, Placed::Part(part), |round, now_open| (now_open <= open).then(|| look(MemberParts { round })))
    }

    /// Leaves the word of member `me`, whose collective exchanges messages
    /// (a `part` of kind [`MESSAGES`]), at round `key`, and is done with the
    /// round at once: takes why its call fails, if a member whose
    /// collective meets has left its part already (see [`Round::why_mixed`]).
    pub(crate) fn leave_word(self: &Arc<Self>, key: RoundKey, me: usize, part: Part) -> Arrival<Option<Error>> {
        self.sit_with(key, me, Placed::Part(part), |round, _| Some(round.mixed().map(|mixed| round.why_mixed(mixed.meets))))
    }

    /// Leaves member `me`'s `part` at round `key`, then takes what `take`
    /// takes from the round under the lock (given the number of rounds
    /// open), if anything: done with the round then, or waiting at its
    /// seat otherwise.
    #[inline]
    fn sit_with<R>(self: &Arc<Self>, key: RoundKey, me: usize, part: Placed, take: impl FnOnce(&mut Round, usize) -> Option<R>) -> Arrival<R> {
        // Whom to wake, and wakers to drop, once the lock is released
        // (filled in place: a list of wakers copied out of a call stalls
        // the processor on its fresh stores).
        let (mut wakers, mut dropped) = (Wakers::default(), Wakers::default());
        let mut st = lock(&self.state);
        let (at, open) = match self.place(&mut st, key, me, part, &mut wakers) {
            Ok(placed) => placed,
            Err(error) => {
                drop(st);
                return Arrival::Waits(self.refused(key, me, error));
            }
        };
        let early = take(st.round_at(at), open).map(|got| (got, Seat::finish(self, key, &mut st, &mut dropped)));
        drop(st);
        wakers.wake();
        drop(dropped);
        match early {
            Some((got, idle)) => {
                Seat::finished(self, idle);
                Arrival::Took(got)
            }
            None => Arrival::Waits(Seat { comm: self.clone(), key, me, done: false, refused: None }),
        }
    }

    /// A seat that failed to leave its part, with `error`.
    fn refused(self: &Arc<Self>, key: RoundKey, me: usize, error: Error) -> Seat {
        Seat { comm: self.clone(), key, me, done: true, refused: Some(error) }
    }

    /// Leaves member `me`'s `part` at round `key`, making the round if it
    /// is not open: returns where the round is, how many are open, and
    /// whom to wake (every waiting member if this part completes the
    /// round, those waiting for this member's part otherwise) once the
    /// lock is released. A member whose endpoint has gone leaves nothing.
    #[inline]
    fn place(&self, st: &mut CommState, key: RoundKey, me: usize, part: Placed, wakers: &mut Wakers) -> Result<(usize, usize)> {
        let n = self.size();
        // Under the lock: `leave` marks a member gone before it takes the
        // lock to fail the rounds that wait for it.
        if self.is_gone(me) {
            return Err(ErrorKind::Finalized.into());
        }
        let at = match st.find(key) {
            Ok(at) => at,
            Err(at) => st.open_round(at, key, n),
        };
        let open = st.rounds.len();
        let round = st.round_at(at);
        if round.is_complete() || round.has_part(me) {
            // Only if this member's call numbers came round to a call
            // still open, four billion calls ago.
            return Err(ErrorKind::InvalidArgument(format!("collective call {} is still open on this communicator", key.0)).into());
        }
        if part.kind().0 == MESSAGES {
            round.over_messages = (round.over_messages.0 + 1, round.over_messages.1.max(part.kind().1));
        }
        match part {
            Placed::Part(part) => {
                round.parts[me] = Some(part);
                round.any_part = true;
            }
            Placed::Small(part) => round.small[me] = Some(part),
        }
        round.arrived += 1;
        let complete = round.is_complete();
        if complete && round.any_part {
            // Some part is not small: the parts are shared with the
            // members that read them.
            round.share_parts();
        }
        // Those waiting for the round, once it is complete, and those
        // waiting for this member's part.
        for slot in round.wakers.iter_mut().filter(|slot| slot.as_ref().is_some_and(|(_, wants)| complete || *wants == Some(me))) {
            wakers.push(slot.take().expect("filtered").0);
        }
        Ok((at, open))
    }

    /// Member `r`'s endpoint has gone.
    #[inline]
    fn is_gone(&self, r: usize) -> bool {
        self.gone[self.members[r] as usize].load(Ordering::SeqCst)
    }

    /// Removes this place from its world if no member holds it and no
    /// round is open there.
    fn remove_if_idle(self: &Arc<Self>) {
        let Some(world) = self.world.upgrade() else { return };
        let mut comms = lock(&world.comms);
        let key = (self.context, self.members.clone());
        if comms.get(&key).is_some_and(|c| Arc::ptr_eq(c, self)) && lock(&self.state).is_idle() {
            comms.remove(&key);
        }
    }
}

impl CommState {
    fn new(members: usize) -> CommState {
        let spare_most = (SPARE_MEMORY / round_memory(members)).max(32);
        CommState { rounds: VecDeque::new(), spare: Vec::new(), spare_most, holders: vec![false; members] }
    }

    /// The open round `key`, if it is.
    fn round(&mut self, key: RoundKey) -> Option<&mut Round> {
        let at = self.find(key).ok()?;
        Some(self.round_at(at))
    }

    /// The open round at `at` among the open rounds.
    #[inline]
    fn round_at(&mut self, at: usize) -> &mut Round {
        &mut self.rounds[at].1
    }

    /// Where round `key` is among the open rounds (`Ok`), or where it
    /// goes to keep them in call order (`Err`). A member waits at the
    /// oldest round or makes the newest (a broadcast's root running ahead
    /// makes one every call), so both ends are looked at first; members
    /// between them (a root thousands of calls ahead, the others behind
    /// it at their own pace) search in call order.
    #[inline]
    fn find(&self, key: RoundKey) -> std::result::Result<usize, usize> {
        let (Some((first, _)), Some((last, _))) = (self.rounds.front(), self.rounds.back()) else {
            return Err(0);
        };
        if *first == key {
            return Ok(0);
        }
        if *last == key {
            return Ok(self.rounds.len() - 1);
        }
        if newer(key, *last) {
            return Err(self.rounds.len());
        }
        self.rounds.binary_search_by(|(k, _)| match *k == key {
            true => std::cmp::Ordering::Equal,
            false if newer(*k, key) => std::cmp::Ordering::Greater,
            false => std::cmp::Ordering::Less,
        })
    }

    /// Opens round `key` for `n` members at `at` among the open rounds
    /// (where [`find`](CommState::find) says it goes), with a spare
    /// round's lists if there is one.
    fn open_round(&mut self, at: usize, key: RoundKey, n: usize) -> usize {
        let round = self.spare.pop().unwrap_or_else(|| {
            Box::new(Round {
                parts: (0..n).map(|_| None).collect(),
                small: (0..n).map(|_| None).collect(),
                any_part: false,
                over_messages: (0, 0),
                arrived: 0,
                complete: None,
                done: 0,
                wakers: (0..n).map(|_| None).collect(),
            })
        });
        self.rounds.insert(at, (key, round));
        debug_assert!(self.rounds.iter().zip(self.rounds.iter().skip(1)).all(|(a, b)| newer(b.0, a.0)), "open rounds in call order");
        at
    }

    /// The open rounds, in call order.
    fn open_rounds_mut(&mut self) -> impl Iterator<Item = &mut Round> {
        self.rounds.iter_mut().map(|(_, round)| &mut **round)
    }

    /// No member holds the place and no round is open.
    fn is_idle(&self) -> bool {
        self.rounds.is_empty() && !self.holders.iter().any(|&held| held)
    }

    /// Member `me` is done with round `key`, which goes if nobody needs
    /// it any more (see [`CommState::sweep`]); adds to `dropped` the
    /// wakers to drop once the lock is released.
    #[inline]
    fn done_with(&mut self, comm: &LocalComm, key: RoundKey, dropped: &mut Wakers) {
        let Ok(at) = self.find(key) else { return };
        let round = self.round_at(at);
        round.done += 1;
        if round.finished(comm) {
            self.retire(at, dropped);
        }
    }

    /// Removes every round nobody needs any more (see [`Round::finished`]).
    /// Returns the wakers they held, to drop once the lock is released
    /// (dropping a waker may drop a task, whose futures may lock this
    /// place).
    fn sweep(&mut self, comm: &LocalComm) -> Wakers {
        let mut dropped = Wakers::default();
        while let Some(at) = self.rounds.iter().position(|(_, round)| round.finished(comm)) {
            self.retire(at, &mut dropped);
        }
        dropped
    }

    /// Removes the round at `at`, emptied for the next round (its lists
    /// kept).
    #[inline]
    fn retire(&mut self, at: usize, dropped: &mut Wakers) {
        let (_, mut round) = self.rounds.remove(at).expect("an open round");
        if round.any_part {
            round.parts.iter_mut().for_each(|p| *p = None);
            round.any_part = false;
        }
        round.small.iter_mut().for_each(|p| *p = None);
        if let Some(parts) = round.complete.take() {
            // The last to read them (a broadcast's root may never have).
            recycle(parts);
        }
        round.wakers.iter_mut().filter_map(Option::take).for_each(|(w, _)| dropped.push(w));
        (round.arrived, round.done, round.over_messages) = (0, 0, (0, 0));
        if self.spare.len() < self.spare_most {
            self.spare.push(round);
        }
    }
}

impl Round {
    /// Nobody needs the round any more: every member is done with it, or
    /// it is incomplete, every member that left a part is done with it,
    /// and every member that did not is gone (a member still alive will come, and
    /// must find the others' parts there).
    fn finished(&self, comm: &LocalComm) -> bool {
        match self.is_complete() {
            true => self.done >= self.parts.len(),
            false => self.done >= self.arrived && (0..self.parts.len()).filter(|&r| !self.has_part(r)).all(|r| comm.is_gone(r)),
        }
    }

    /// If members whose collective exchanges messages and members whose
    /// collective meets have both left parts (an erroneous call): the most
    /// sub-tags the former use, to tell them by message that the call
    /// failed (they wait for messages the others never send), and a
    /// member that meets.
    #[inline]
    fn mixed(&self) -> Option<Mixed> {
        match self.over_messages {
            (0, _) => None,
            (over_messages, _) if over_messages == self.arrived => None,
            (_, subtags) => self.a_member_that_meets(subtags),
        }
    }

    /// [`mixed`](Round::mixed), once members over messages and members that
    /// meet have both left parts.
    #[cold]
    fn a_member_that_meets(&self, subtags: usize) -> Option<Mixed> {
        let meets = (0..self.parts.len()).find(|&r| self.has_part(r) && MemberParts { round: self }.get(r).kind.0 != MESSAGES)?;
        Some(Mixed { subtags, meets })
    }

    /// Why the call of a member whose collective exchanges messages fails
    /// where member `meets`, whose collective meets, has left its part: it
    /// gave up on the call (its arguments were wrong: its part says why),
    /// or it called a collective that meets.
    #[cold]
    fn why_mixed(&self, meets: usize) -> Error {
        let detail = match (MemberParts { round: self }).get(meets).block {
            Err(why) => format!("it gave up on the collective: {why}"),
            Ok(_) => "it called a collective that meets where this rank called one that exchanges messages".to_string(),
        };
        ErrorKind::CollectiveMismatch { rank: meets, detail }.into()
    }

    /// Member `from` has left its part, or every member has (`None`).
    fn has(&self, from: Option<usize>) -> bool {
        from.map_or_else(|| self.is_complete(), |r| self.has_part(r))
    }

    /// Every member has left its part.
    fn is_complete(&self) -> bool {
        self.arrived == self.parts.len()
    }

    /// Member `r` has left its part.
    fn has_part(&self, r: usize) -> bool {
        self.complete.is_some() || self.parts[r].is_some() || self.small[r].is_some()
    }

    /// Moves every part of a complete round into the list its members
    /// share (small parts as parts of their few blocks).
    fn share_parts(&mut self) {
        let mut all = spare_parts(self.parts.len());
        let list = Arc::get_mut(&mut all).expect("a spare list of parts is held by nobody else");
        for (part, small) in self.parts.iter_mut().zip(self.small.iter_mut()) {
            match part.take() {
                Some(part) => list.push(part),
                None => list.push(small.take().expect("every part arrived").into_part()),
            }
        }
        debug_assert_eq!(list.len(), self.parts.len(), "a kept list of parts is empty");
        self.complete = Some(all);
    }

    /// Every part, shared, if the round is complete.
    fn shared_parts(&mut self) -> Option<Parts> {
        if !self.is_complete() {
            return None;
        }
        if self.complete.is_none() {
            // Every part is small: a reader of shared parts leaves a part
            // that is not, so `place` has shared them already; kept so
            // that any reader gets every part.
            self.share_parts();
        }
        self.complete.clone()
    }

    /// Member `r`'s part, as a seat that waits for it alone sees it, if
    /// it is there.
    fn glimpse(&self, r: usize) -> Option<Glimpse> {
        let mut glimpse = self.glimpse_of(r)?;
        glimpse.mixed = self.mixed();
        Some(glimpse)
    }

    fn glimpse_of(&self, r: usize) -> Option<Glimpse> {
        match (&self.complete, &self.parts[r], &self.small[r]) {
            (Some(parts), _, _) => Some(parts[r].glimpse()),
            (None, Some(part), _) => Some(part.glimpse()),
            (None, None, Some(small)) => Some(Glimpse {
                kind: small.kind,
                shape: small.shape,
                block: Ok(small.block(0).map(|(data, signature)| Block { data: BlockBytes::Inline(InlineBytes::copy_of(data).expect("a block of inline bytes fits")), signature })),
                mixed: None,
            }),
            (None, None, None) => None,
        }
    }
}

/// A member (or the round, as it retires) is done with `parts`: if it was
/// the last to hold them, their large buffers go to this thread's spare
/// buffers for the next large pack (see [`spare`](crate::pack::spare)),
/// so that a collective of large blocks called in a loop does not fault
/// in fresh pages for every call; the emptied lists of blocks and of
/// parts are kept for the next parts and rounds this thread makes
/// ([`block_list`], [`one_block`], [`spare_parts`]), so that a small
/// collective allocates little per call.
pub(crate) fn recycle(mut shared: Parts) {
    let Some(parts) = Arc::get_mut(&mut shared) else { return };
    for part in parts.iter_mut() {
        // The blocks first: slices of `whole` go before it is given.
        if let Ok(blocks) = &mut part.blocks {
            while let Some(block) = blocks.pop() {
                if let BlockBytes::Shared(data) = block.data {
                    recycle_bytes(data);
                }
            }
            give_block_list(std::mem::take(blocks));
        }
        part.whole.drain(..).for_each(recycle_bytes);
    }
    parts.clear();
    if parts.capacity() <= KEEP_LIST_ROOM {
        keep(&SPARE_PART_LISTS, shared);
    }
}

/// An empty list for a complete round's `n` parts, held by nobody else:
/// one this thread read last (see [`recycle`]) if it has one.
fn spare_parts(n: usize) -> Parts {
    let mut list = reuse(&SPARE_PART_LISTS).unwrap_or_default();
    let parts = Arc::get_mut(&mut list).expect("kept lists are held by nobody else");
    debug_assert!(parts.is_empty(), "kept lists are emptied");
    parts.reserve_exact(n);
    list
}

thread_local! {
    /// Emptied lists of blocks, from parts this thread was the last to
    /// read, for the next parts it leaves: where one thread both reads a
    /// round last and leaves the next part (every rank on a current-thread
    /// runtime), a part's list costs no allocation per call.
    static SPARE_BLOCK_LISTS: std::cell::RefCell<Vec<Vec<Block>>> = const { std::cell::RefCell::new(Vec::new()) };

    /// Emptied lists of a complete round's parts, likewise.
    static SPARE_PART_LISTS: std::cell::RefCell<Vec<Parts>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Lists of blocks, and lists of parts, kept per thread, at most.
const KEEP_LISTS: usize = 16;

/// A list with room for more than this is not kept.
const KEEP_LIST_ROOM: usize = 64;

/// The last list kept in `lists`, if any.
fn reuse<T: 'static>(lists: &'static std::thread::LocalKey<std::cell::RefCell<Vec<T>>>) -> Option<T> {
    lists.try_with(|lists| lists.borrow_mut().pop()).ok().flatten()
}

/// Keeps `list` in `lists` unless [`KEEP_LISTS`] are kept already.
fn keep<T: 'static>(lists: &'static std::thread::LocalKey<std::cell::RefCell<Vec<T>>>, list: T) {
    let _ = lists.try_with(|lists| {
        let mut lists = lists.borrow_mut();
        if lists.len() < KEEP_LISTS {
            lists.push(list);
        }
    });
}

/// An empty list of blocks with room for `room`, reused if this thread
/// has one.
pub(crate) fn block_list(room: usize) -> Vec<Block> {
    let mut list = reuse(&SPARE_BLOCK_LISTS).unwrap_or_default();
    list.reserve(room);
    list
}

/// `block` alone, as a part's blocks.
pub(crate) fn one_block(block: Block) -> Vec<Block> {
    match reuse(&SPARE_BLOCK_LISTS) {
        Some(mut list) => {
            list.push(block);
            list
        }
        None => vec![block],
    }
}

/// Keeps an emptied list of blocks for [`block_list`].
fn give_block_list(list: Vec<Block>) {
    debug_assert!(list.is_empty());
    if (1..=KEEP_LIST_ROOM).contains(&list.capacity()) {
        keep(&SPARE_BLOCK_LISTS, list);
    }
}

/// [`recycle`] for a handle on one block's bytes: kept if large and held
/// by nothing else.
#[inline]
pub(crate) fn recycle_bytes(data: Bytes) {
    if data.len() >= crate::pack::spare::MEDIUM {
        if let Ok(buffer) = data.try_into_mut() {
            crate::pack::spare::give(Vec::from(buffer));
        }
    }
}

/// Wakers to wake (or drop) once a lock is released: the first without
/// an allocation (most rounds wake one member; the last to arrive wakes
/// the others).
#[derive(Default)]
struct Wakers {
    first: Option<Waker>,
    rest: Vec<Waker>,
}

impl Wakers {
    fn push(&mut self, waker: Waker) {
        match self.first {
            None => self.first = Some(waker),
            Some(_) => self.rest.push(waker),
        }
    }

    #[inline]
    fn wake(self) {
        if let Some(first) = self.first {
            first.wake();
            self.rest.into_iter().for_each(Waker::wake);
        }
    }
}

/// A member's place at a round: a future of every part, in rank order,
/// once the round completes (or of one member's: [`Seat::poll_part`]; or
/// read under the round's lock, for a member that left a small part:
/// [`Seat::poll_read`]).
///
/// # Cancel safety
/// Dropping it is sound at any time; the part this member left stays for
/// the others.
#[must_use = "a seat waits for the round only when awaited"]
pub(crate) struct Seat {
    comm: Arc<LocalComm>,
    key: RoundKey,
    me: usize,
    /// Done with the round (or never at it).
    done: bool,
    /// Why this member could not leave its part, until the seat reports it.
    refused: Option<Error>,
}

impl Seat {
    /// The seat at round `key` of `comm` is done with it: adds to
    /// `dropped` the wakers to drop once the lock is released, and says
    /// whether the place is idle.
    #[inline]
    fn finish(comm: &LocalComm, key: RoundKey, st: &mut CommState, dropped: &mut Wakers) -> bool {
        st.done_with(comm, key, dropped);
        st.is_idle()
    }

    /// After [`finish`](Seat::finish), with the lock released and the
    /// wakers dropped.
    #[inline]
    fn finished(comm: &Arc<LocalComm>, idle: bool) {
        if idle {
            comm.remove_if_idle();
        }
    }
}

/// A member that left its part: it waits at its seat, or took what it
/// wanted at once ([`LocalComm::sit`], [`LocalComm::sit_small`]).
pub(crate) enum Arrival<T = Got> {
    Waits(Seat),
    Took(T),
}

impl<T> Arrival<T> {
    /// The seat of a member that wanted nothing at once.
    pub(crate) fn seat(self) -> Seat {
        match self {
            Arrival::Waits(seat) => seat,
            Arrival::Took(_) => unreachable!("a member that wants nothing takes nothing"),
        }
    }
}

/// What a seat waits for: every part, or one member's.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Want {
    All,
    One(usize),
}

/// What a seat got.
pub(crate) enum Got {
    All(Parts),
    One(Glimpse),
}

impl Got {
    /// Every part (what a seat that wants them all gets).
    pub(crate) fn all(self) -> Parts {
        match self {
            Got::All(parts) => parts,
            Got::One(_) => unreachable!("every part was wanted"),
        }
    }

    /// One member's part (what a seat that wants it alone gets).
    pub(crate) fn one(self) -> Glimpse {
        match self {
            Got::One(glimpse) => glimpse,
            Got::All(_) => unreachable!("one part was wanted"),
        }
    }
}

/// One member's part, as a seat that waits for it alone sees it: its
/// kind, shape and first block (a handle on the same bytes).
pub(crate) struct Glimpse {
    pub(crate) kind: (u8, usize),
    pub(crate) shape: (Option<(u64, u64)>, u64),
    pub(crate) block: std::result::Result<Option<Block>, String>,
    /// What [`MemberParts::mixed`] says of the round, as the part is taken.
    pub(crate) mixed: Option<Mixed>,
}

impl Part {
    fn glimpse(&self) -> Glimpse {
        Glimpse { kind: self.kind, shape: self.shape, block: self.blocks.as_ref().map(|b| b.first().cloned()).map_err(Clone::clone), mixed: None }
    }
}

impl Seat {
    /// Waits for member `from`'s part alone (the root's, for a member that
    /// takes only the root's data), without waiting for the others.
    pub(crate) fn poll_part(&mut self, cx: &mut Context<'_>, from: usize) -> Poll<Result<Glimpse>> {
        self.poll_for(cx, Want::One(from)).map_ok(Got::one)
    }

    fn poll_for(&mut self, cx: &mut Context<'_>, want: Want) -> Poll<Result<Got>> {
        let wants = match want {
            Want::All => None,
            Want::One(r) => Some(r),
        };
        self.poll_with(cx, wants, |round| match want {
            Want::All => round.shared_parts().map(Got::All),
            Want::One(r) => round.glimpse(r).map(Got::One),
        })
    }

    /// Waits for every part of a round (or member `from`'s part alone),
    /// as a member that left a small part does (see
    /// [`LocalComm::sit_small`]), and reads them with `read` under the
    /// lock, once.
    pub(crate) fn poll_read<R>(&mut self, cx: &mut Context<'_>, from: Option<usize>, read: &mut Option<impl FnOnce(MemberParts<'_>) -> R>) -> Poll<Result<R>> {
        self.poll_with(cx, from, |round| match round.has(from) {
            true => Some(read.take().expect("read once")(MemberParts { round })),
            false => None,
        })
    }

    /// Waits until `take` takes what the member waits for (every part, or
    /// member `wants`'s) from its round, under the lock; fails if a
    /// member it waits for is gone without its part.
    #[inline]
    fn poll_with<R>(&mut self, cx: &mut Context<'_>, wants: Option<usize>, take: impl FnOnce(&mut Round) -> Option<R>) -> Poll<Result<R>> {
        if let Some(error) = self.refused.take() {
            return Poll::Ready(Err(error));
        }
        assert!(!self.done, "a seat polled after it finished");
        let comm = &self.comm;
        let mut st = lock(&comm.state);
        // Named by its world rank, as every `ProcessFailed` is.
        let gone = |r: usize| -> Error { Error::process_failed(comm.members[r], "it ended without taking part in the collective") };
        let outcome = match st.round(self.key) {
            // This member's own endpoint has gone: as every operation on
            // it, the call fails.
            Some(_) if comm.is_gone(self.me) => Err(ErrorKind::Finalized.into()),
            Some(round) => match take(round) {
                Some(got) => Ok(got),
                None => {
                    // Not there yet: a member waited for that is gone
                    // without its part fails the wait.
                    let waited_for = |r: usize| wants.is_none_or(|w| w == r);
                    match (0..round.parts.len()).find(|&r| !round.has_part(r) && waited_for(r) && comm.is_gone(r)) {
                        Some(r) => Err(gone(r)),
                        None => {
                            let old = match &mut round.wakers[self.me] {
                                Some((waker, w)) if *w == wants && waker.will_wake(cx.waker()) => None,
                                slot => slot.replace((cx.waker().clone(), wants)),
                            };
                            drop(st);
                            drop(old);
                            return Poll::Pending;
                        }
                    }
                }
            },
            None => Err(ErrorKind::InvalidArgument(format!("collective call {} is no longer open on this communicator", self.key.0)).into()),
        };
        self.done = true;
        let mut dropped = Wakers::default();
        let idle = Seat::finish(comm, self.key, &mut st, &mut dropped);
        drop(st);
        drop(dropped);
        Seat::finished(comm, idle);
        Poll::Ready(outcome)
    }
}

impl std::future::Future for Seat {
    type Output = Result<Parts>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Parts>> {
        self.poll_for(cx, Want::All).map_ok(Got::all)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            let mut st = lock(&self.comm.state);
            let waker = st.round(self.key).and_then(|round| round.wakers[self.me].take());
            let mut dropped = Wakers::default();
            let idle = Seat::finish(&self.comm, self.key, &mut st, &mut dropped);
            drop(st);
            drop((waker, dropped));
            Seat::finished(&self.comm, idle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;

    fn part() -> Part {
        Part { kind: (0, 0), shape: (None, 0), blocks: Ok(Vec::new()), whole: Vec::new() }
    }

    fn poll(seat: &mut Seat) -> Poll<Result<Parts>> {
        pin!(seat).poll(&mut Context::from_waker(Waker::noop()))
    }

    /// A world of as many ranks as `members`, and the meeting place of the
    /// communicator of `members` (world ranks) with collective context
    /// `context`, held by every member.
    fn place(members: &[u32], context: u64) -> (Arc<LocalWorld>, Vec<LocalMember>, Arc<LocalComm>) {
        let world = LocalWorld::new(members.len());
        let members: Arc<[u32]> = Arc::from(members);
        let holds: Vec<LocalMember> = (0..members.len()).map(|me| world.comm(context, members.clone(), me)).collect();
        let comm = holds[0].comm.clone();
        (world, holds, comm)
    }

    /// A waker that records that it was woken.
    struct Flag(std::sync::atomic::AtomicBool);

    impl Flag {
        fn new() -> (Arc<Flag>, Waker) {
            let flag = Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
            (flag.clone(), Waker::from(flag))
        }
    }

    impl std::task::Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A meeting place keeps at most [`SPARE_MEMORY`] of emptied rounds,
    /// however many were once open at the same time.
    #[test]
    fn a_place_keeps_a_bounded_number_of_spare_rounds() {
        let (_world, _holds, comm) = place(&[0, 1], 3);
        let most = SPARE_MEMORY / round_memory(2);
        assert!((32..4096).contains(&most), "{most} spare rounds");
        let calls = most as u32 + 100;
        for member in [0, 1] {
            for call in 0..calls {
                drop(comm.sit((call, 0), member, part(), None).seat());
            }
        }
        let st = lock(&comm.state);
        assert!(st.rounds.is_empty(), "every round done with");
        assert_eq!(st.spare.len(), most, "{calls} rounds were open at once");
    }

    /// The list of blocks of a part whose round every member is done with
    /// serves the next part this thread leaves, and the round's list of
    /// parts the next round (no allocation per call); a list too long is
    /// not kept.
    #[test]
    fn finished_parts_lend_their_block_lists() {
        fn kept() -> (usize, usize) {
            (SPARE_BLOCK_LISTS.with(|l| l.borrow().len()), SPARE_PART_LISTS.with(|l| l.borrow().len()))
        }
        fn complete(seat: &mut Seat) -> Parts {
            match poll(seat) {
                Poll::Ready(Ok(parts)) => parts,
                other => panic!("{other:?}"),
            }
        }
        let (_world, _holds, comm) = place(&[0, 1], 3);
        let block = Block { data: Bytes::from_static(b"8 bytes!").into(), signature: None };
        assert_eq!(kept(), (0, 0), "a fresh thread keeps nothing");
        // A list told apart by its room (a fresh one-block list has less).
        let mut marked = block_list(5);
        marked.push(block.clone());
        let room = marked.capacity();
        let mut a = comm.sit((0, 0), 0, Part { blocks: Ok(marked), ..part() }, None).seat();
        let mut b = comm.sit((0, 0), 1, part(), None).seat();
        let (first, second) = (complete(&mut a), complete(&mut b));
        assert_eq!(first.len(), 2);
        let list_of_parts = Arc::as_ptr(&first);
        recycle(first);
        assert_eq!(kept(), (0, 0), "nothing is kept while another member reads");
        recycle(second);
        assert_eq!(kept(), (1, 1), "the last reader keeps the lists");
        let again = one_block(block.clone());
        assert_eq!((again.capacity(), again.len(), kept().0), (room, 1, 0), "the finished part's list serves the next part");
        // A list with too much room is not kept; the round's list of parts
        // is the one kept, emptied.
        let mut long = block_list(KEEP_LIST_ROOM + 1);
        long.push(block);
        let mut c = comm.sit((1, 0), 0, Part { blocks: Ok(long), ..part() }, None).seat();
        let mut d = comm.sit((1, 0), 1, Part { blocks: Ok(again), ..part() }, None).seat();
        let (first, second) = (complete(&mut c), complete(&mut d));
        assert_eq!(Arc::as_ptr(&first), list_of_parts, "the finished round's list of parts is reused");
        assert_eq!(first.len(), 2, "emptied before reuse");
        assert!(first.iter().all(|p| p.blocks.as_ref().is_ok_and(|b| b.len() == 1)), "each part holds its own block alone");
        recycle(first);
        recycle(second);
        assert_eq!(kept(), (1, 1), "the long list is not kept");
        assert_eq!(block_list(1).capacity(), room, "the list kept is the one with room for few");
        assert_eq!(lock(&comm.state).rounds.len(), 0, "both rounds retired");
    }

    /// A member that finds what it wants at the round when it leaves its
    /// part (every part: it is the last to come; one member's: that part
    /// is there) takes it at once, done with the round; the others wait as
    /// before, are woken as before, and the round goes once every member
    /// is done.
    #[test]
    fn a_member_whose_parts_are_there_takes_them_as_it_sits() {
        let (world, _holds, comm) = place(&[0, 1, 2], 5);
        // Member 1 waits for member 0's part alone, which is not there.
        let Arrival::Waits(mut first) = comm.sit((0, 0), 1, part(), Some(Want::One(0))) else { panic!("member 0's part is not there") };
        let (flag, waker) = Flag::new();
        let wait = |seat: &mut Seat| pin!(std::future::poll_fn(|cx| seat.poll_part(cx, 0))).poll(&mut Context::from_waker(&waker));
        assert!(wait(&mut first).is_pending());
        // Member 2 wants member 1's part: there.
        let Arrival::Took(Got::One(glimpse)) = comm.sit((0, 0), 2, Part { kind: (9, 1), ..part() }, Some(Want::One(1))) else { panic!("member 1's part is there") };
        assert_eq!(glimpse.kind, (0, 0), "member 1's part");
        assert!(!flag.0.load(Ordering::SeqCst), "member 1 waits for member 0 alone");
        // Member 0 completes the round: every part, at once; member 1,
        // waiting for it, is woken.
        let Arrival::Took(got) = comm.sit((0, 0), 0, part(), Some(Want::All)) else { panic!("every part is there") };
        let parts = got.all();
        assert_eq!(parts.iter().map(|p| p.kind).collect::<Vec<_>>(), [(0, 0), (0, 0), (9, 1)]);
        assert!(flag.0.load(Ordering::SeqCst), "the waiting member is woken");
        assert_eq!(lock(&comm.state).rounds.len(), 1, "member 1 is not done yet");
        let Poll::Ready(Ok(glimpse)) = wait(&mut first) else { panic!("member 0's part is there") };
        assert_eq!(glimpse.kind, (0, 0));
        assert_eq!(lock(&comm.state).rounds.len(), 0, "every member done: the round goes");
        // A member whose endpoint has gone takes nothing, and its seat fails.
        world.leave(2);
        let mut gone = comm.sit((1, 0), 2, part(), Some(Want::All)).seat();
        assert!(matches!(poll(&mut gone), Poll::Ready(Err(e)) if matches!(e.kind(), ErrorKind::Finalized)));
        drop(parts);
    }

    /// Small parts are read where they lie, under the lock; a round where
    /// small parts meet parts that are not (a call whose ranks disagree,
    /// or typed and described buffers of the same values) shares every
    /// part as a part, small ones as parts of one block, and both kinds of
    /// reader see the same kinds, shapes and bytes.
    #[test]
    fn small_parts_are_read_in_place_and_shared_with_parts() {
        let (_world, _holds, comm) = place(&[0, 1], 11);
        let small = |me: u8| SmallPart::new((4, 0), (None, 3), &[me, me, me], Some((7, 3))).expect("3 bytes fit");
        let read = |parts: MemberParts<'_>| (0..parts.len()).map(|r| (parts.get(r).kind, parts.bytes(r).to_vec())).collect::<Vec<_>>();
        // Two small parts: read in place, nothing shared.
        let Arrival::Waits(mut first) = comm.sit_small((0, 0), 0, small(0), None, &mut Some(read)) else { panic!("alone") };
        let Arrival::Took(got) = comm.sit_small((0, 0), 1, small(1), None, &mut Some(read)) else { panic!("complete") };
        assert_eq!(got, [((4, 0), vec![0; 3]), ((4, 0), vec![1; 3])]);
        assert!(lock(&comm.state).round((0, 0)).is_some_and(|round| round.complete.is_none()), "small parts are not shared");
        let Poll::Ready(Ok(got)) = first.poll_read(&mut Context::from_waker(Waker::noop()), None, &mut Some(read)) else { panic!("complete") };
        assert_eq!(got, [((4, 0), vec![0; 3]), ((4, 0), vec![1; 3])]);
        assert_eq!(lock(&comm.state).rounds.len(), 0);
        // A small part, then a part: shared, the small one as a block.
        let Arrival::Waits(mut first) = comm.sit_small((1, 0), 0, small(0), None, &mut Some(read)) else { panic!("alone") };
        let Arrival::Took(got) = comm.sit((1, 0), 1, Part { kind: (5, 2), ..part() }, Some(Want::All)) else { panic!("complete") };
        let parts = got.all();
        assert_eq!(parts[0].kind, (4, 0));
        assert!(parts[0].blocks.as_ref().is_ok_and(|b| b.len() == 1 && b[0].data[..] == [0; 3] && b[0].signature == Some((7, 3))));
        let Poll::Ready(Ok(got)) = first.poll_read(&mut Context::from_waker(Waker::noop()), None, &mut Some(read)) else { panic!("complete") };
        assert_eq!(got, [((4, 0), vec![0; 3]), ((5, 2), vec![])]);
        drop(parts);
        // A part, then a small part that completes the round.
        let mut first = comm.sit((2, 0), 0, Part { kind: (5, 2), ..part() }, None).seat();
        let Arrival::Took(got) = comm.sit_small((2, 0), 1, small(1), None, &mut Some(read)) else { panic!("complete") };
        assert_eq!(got, [((5, 2), vec![]), ((4, 0), vec![1; 3])]);
        let Poll::Ready(Ok(parts)) = poll(&mut first) else { panic!("complete") };
        assert_eq!(parts[1].kind, (4, 0));
        drop(parts);
        assert_eq!(lock(&comm.state).rounds.len(), 0, "every round done with");
    }

    /// A small part of several blocks (an alltoall's, one for each member)
    /// is read block by block in place, and shared block by block where
    /// it meets a part; bytes that do not cut evenly, or too many blocks,
    /// make no part.
    #[test]
    fn small_parts_of_several_blocks_are_read_and_shared_block_by_block() {
        assert!(SmallPart::of_blocks((3, 0), (None, 0), &[1, 2, 3], None, 2).is_none(), "3 bytes in 2 blocks");
        assert!(SmallPart::of_blocks((3, 0), (None, 0), &[], None, 0).is_none(), "no blocks");
        assert!(SmallPart::of_blocks((3, 0), (None, 0), &[], None, 256).is_none(), "256 blocks");
        let (_world, _holds, comm) = place(&[0, 1], 12);
        let small = |me: u8| SmallPart::of_blocks((3, 0), (None, 0), &[me, me, me + 10, me + 10], Some((9, 2)), 2).expect("4 bytes in 2 blocks");
        let read = |me: usize| move |parts: MemberParts<'_>| (0..parts.len()).map(|r| parts.get_block(r, me).block.map(|(b, s)| (b.to_vec(), s)).map_err(str::to_owned)).collect::<Vec<_>>();
        let Arrival::Waits(mut first) = comm.sit_small((0, 0), 0, small(0), None, &mut Some(read(0))) else { panic!("alone") };
        let Arrival::Took(got) = comm.sit_small((0, 0), 1, small(1), None, &mut Some(read(1))) else { panic!("complete") };
        assert_eq!(got, [Ok((vec![10, 10], Some((9, 2)))), Ok((vec![11, 11], Some((9, 2))))]);
        let Poll::Ready(Ok(got)) = first.poll_read(&mut Context::from_waker(Waker::noop()), None, &mut Some(read(0))) else { panic!("complete") };
        assert_eq!(got, [Ok((vec![0, 0], Some((9, 2)))), Ok((vec![1, 1], Some((9, 2))))]);
        // A block past the last reads as empty.
        let Arrival::Waits(mut first) = comm.sit_small((1, 0), 0, small(0), None, &mut Some(read(0))) else { panic!("alone") };
        let Arrival::Took(got) = comm.sit_small((1, 0), 1, small(1), None, &mut Some(read(2))) else { panic!("complete") };
        assert_eq!(got, [Ok((vec![], None)), Ok((vec![], None))]);
        drop(first.poll_read(&mut Context::from_waker(Waker::noop()), None, &mut Some(read(0))));
        // Met by a part: shared as a part of two blocks of their own.
        let Arrival::Waits(mut first) = comm.sit_small((2, 0), 0, small(0), None, &mut Some(read(0))) else { panic!("alone") };
        let Arrival::Took(got) = comm.sit((2, 0), 1, Part { kind: (3, 0), ..part() }, Some(Want::All)) else { panic!("complete") };
        let parts = got.all();
        let blocks = parts[0].blocks.as_ref().expect("did not give up");
        assert_eq!(blocks.iter().map(|b| (b.data.to_vec(), b.signature)).collect::<Vec<_>>(), [(vec![0, 0], Some((9, 2))), (vec![10, 10], Some((9, 2)))]);
        let Poll::Ready(Ok(got)) = first.poll_read(&mut Context::from_waker(Waker::noop()), None, &mut Some(read(1))) else { panic!("complete") };
        assert_eq!(got, [Ok((vec![10, 10], Some((9, 2)))), Ok((vec![], None))]);
        drop(parts);
        assert_eq!(lock(&comm.state).rounds.len(), 0, "every round done with");
    }

    /// A round where a member over messages (a part of kind
    /// [`MESSAGES`]) and members that meet have both left parts says so to
    /// whoever looks after its own part is left, naming a member that
    /// meets and the most sub-tags used; a round of one sort says nothing.
    #[test]
    fn rounds_where_messages_meet_meeting_say_so() {
        let (_world, _holds, comm) = place(&[0, 1, 2], 13);
        let small = |me: u8| SmallPart::new((1, 0), (None, 1), &[me], None).expect("1 byte fits");
        let word = |subtags: usize| Part { kind: (MESSAGES, subtags), ..part() };
        // Member 0 meets, alone: nothing to say.
        let Arrival::Took(None) = comm.leave_small((0, 0), 0, small(0), usize::MAX, |parts| parts.mixed()) else { panic!("done at once, nothing mixed") };
        // Member 2 over messages finds member 0's part.
        let Arrival::Took(Some(mixed)) = comm.leave((0, 0), 2, word(3), usize::MAX, |parts| parts.mixed()) else { panic!("mixed") };
        assert_eq!(mixed, Mixed { subtags: 3, meets: 0 });
        // Member 1, meeting, sees it too.
        let mixed_read = |parts: MemberParts<'_>| parts.mixed();
        let Arrival::Took(Some(mixed)) = comm.sit_small((0, 0), 1, small(1), Some(0), &mut Some(mixed_read)) else { panic!("read") };
        assert_eq!(mixed, Mixed { subtags: 3, meets: 0 });
        // Members over messages alone: nothing to say.
        let Arrival::Took(None) = comm.leave((1, 0), 0, word(1), usize::MAX, |parts| parts.mixed()) else { panic!("nothing mixed") };
        let Arrival::Took(None) = comm.leave((1, 0), 1, word(2), usize::MAX, |parts| parts.mixed()) else { panic!("nothing mixed") };
        // A member that meets comes last: it names the most sub-tags.
        let Arrival::Took(Some(mixed)) = comm.leave_small((1, 0), 2, small(2), usize::MAX, |parts| parts.mixed()) else { panic!("mixed") };
        assert_eq!(mixed, Mixed { subtags: 2, meets: 2 });
        assert_eq!(lock(&comm.state).rounds.len(), 0, "every round done with");
    }

    /// A member that left a small part and waits for one member's part
    /// alone takes it at once if it is there, or is woken when it comes;
    /// one waiting for every part fails if a member is gone without its
    /// part; a seat dropped counts as done, and the round goes.
    #[test]
    fn small_seats_wait_for_one_part_fail_and_go() {
        let (world, _holds, comm) = place(&[0, 1, 2], 13);
        let small = |me: u8| SmallPart::new((1, 0), (None, 1), &[me], Some((3, 1))).expect("1 byte fits");
        let root_byte = |parts: MemberParts<'_>| parts.bytes(0).to_vec();
        // Member 1 waits for member 0's part alone; member 0 comes and
        // wakes it; member 2 finds member 0's part there.
        let Arrival::Waits(mut waiting) = comm.sit_small((0, 0), 1, small(1), Some(0), &mut Some(root_byte)) else { panic!("not there") };
        let (flag, waker) = Flag::new();
        assert!(waiting.poll_read(&mut Context::from_waker(&waker), Some(0), &mut Some(root_byte)).is_pending());
        let no_read = &mut None::<fn(MemberParts<'_>)>;
        let Arrival::Waits(root) = comm.sit_small((0, 0), 0, small(7), None, no_read) else { panic!("reads nothing") };
        assert!(flag.0.load(Ordering::SeqCst), "the member waiting for this part is woken");
        let Poll::Ready(Ok(got)) = waiting.poll_read(&mut Context::from_waker(&waker), Some(0), &mut Some(root_byte)) else { panic!("there") };
        assert_eq!(got, [7]);
        let Arrival::Took(got) = comm.sit_small((0, 0), 2, small(2), Some(0), &mut Some(root_byte)) else { panic!("there") };
        assert_eq!(got, [7]);
        assert_eq!(lock(&comm.state).rounds.len(), 1, "the root is not done yet");
        drop(root);
        assert_eq!(lock(&comm.state).rounds.len(), 0, "a dropped seat is done: the round goes");
        // Member 0 waits for every part; member 2 is gone without its part.
        let every = |parts: MemberParts<'_>| parts.len();
        let Arrival::Waits(mut waiting) = comm.sit_small((1, 0), 0, small(0), None, &mut Some(every)) else { panic!("alone") };
        let Arrival::Waits(second) = comm.sit_small((1, 0), 1, small(1), None, no_read) else { panic!("reads nothing") };
        world.leave(2);
        assert!(matches!(waiting.poll_read(&mut Context::from_waker(&waker), None, &mut Some(every)), Poll::Ready(Err(e)) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 2, .. })));
        drop(second);
        assert_eq!(lock(&comm.state).rounds.len(), 0, "the members that came are done: the round goes");
        // A member whose endpoint has gone leaves nothing, and fails.
        let Arrival::Waits(mut gone) = comm.sit_small((2, 0), 2, small(2), None, &mut Some(every)) else { panic!("refused") };
        assert!(matches!(gone.poll_read(&mut Context::from_waker(&waker), None, &mut Some(every)), Poll::Ready(Err(e)) if matches!(e.kind(), ErrorKind::Finalized)));
    }

    /// Open rounds stay in call order whatever order they are made in (a
    /// large allreduce's second phase after the next call's first), across
    /// the wrap of call numbers, and each is found where it is.
    #[test]
    fn rounds_stay_in_call_order() {
        assert!(newer((1, 0), (0, 0)) && newer((0, 1), (0, 0)) && newer((0, 0), (u32::MAX, 1)));
        assert!(!newer((0, 0), (0, 0)) && !newer((u32::MAX, 0), (0, 0)));
        let (_world, _holds, comm) = place(&[0, 1], 9);
        let keys = [(u32::MAX - 1, 0), (u32::MAX, 0), (0, 0), (u32::MAX, 1), (u32::MAX - 1, 1), (1, 0)];
        let seats: Vec<Seat> = keys.iter().map(|&key| comm.sit(key, 0, part(), None).seat()).collect();
        let order: Vec<RoundKey> = lock(&comm.state).rounds.iter().map(|(k, _)| *k).collect();
        assert_eq!(order, [(u32::MAX - 1, 0), (u32::MAX - 1, 1), (u32::MAX, 0), (u32::MAX, 1), (0, 0), (1, 0)]);
        // Member 1 completes each round, found wherever it is.
        for &key in keys.iter().rev() {
            let Arrival::Took(got) = comm.sit(key, 1, part(), Some(Want::All)) else { panic!("{key:?} is complete") };
            assert_eq!(got.all().len(), 2, "{key:?}");
        }
        drop(seats);
        assert!(lock(&comm.state).rounds.is_empty(), "every round done with");
    }

    /// A round completes once every member has left its part, whatever
    /// the order, and goes once every member is done with it; a member
    /// gone before leaving its part fails the others; one gone after it
    /// does not.
    #[test]
    fn rounds_complete_fail_and_go() {
        let (world, holds, comm) = place(&[2, 0, 1], 7);
        let mut a = comm.sit((0, 0), 2, part(), None).seat();
        let mut b = comm.sit((0, 0), 0, part(), None).seat();
        assert!(poll(&mut a).is_pending());
        drop(b);
        let mut c = comm.sit((0, 0), 1, part(), None).seat();
        let parts = match poll(&mut c) {
            Poll::Ready(Ok(parts)) => parts,
            other => panic!("{other:?}"),
        };
        assert_eq!(parts.len(), 3);
        assert!(matches!(poll(&mut a), Poll::Ready(Ok(_))));
        assert_eq!(lock(&comm.state).rounds.len(), 0, "every member done: the round goes");
        // World rank 1 (member 2) leaves after its part, world rank 0
        // (member 1) before: the round fails naming world rank 0.
        b = comm.sit((1, 0), 2, part(), None).seat();
        world.leave(1);
        let mut d = comm.sit((1, 0), 0, part(), None).seat();
        assert!(poll(&mut d).is_pending());
        world.leave(0);
        assert!(matches!(poll(&mut d), Poll::Ready(Err(e)) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })));
        drop(b);
        assert_eq!(lock(&comm.state).rounds.len(), 0, "the members that came are done: the failed round goes");
        drop(holds);
        assert!(lock(&world.comms).is_empty(), "no member holds the place: it goes");
    }
}
