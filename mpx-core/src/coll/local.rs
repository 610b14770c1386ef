//! Collectives among ranks of one process, without messages.
//!
//! When every rank of the world lives in this process (the in-memory
//! loopback: [`Transport::local_world`](crate::Transport::local_world)),
//! `barrier`, `bcast`, `allreduce`, `allgather` and `alltoall` (with their
//! in-place forms, and `alltoallv`; `allgather` and `alltoall` only for
//! blocks under 256 KiB, see [`MEET_BELOW`]) meet at their communicator's
//! [`LocalComm`] instead of exchanging messages: each rank packs what it
//! contributes when the call starts and leaves it there, then, once every
//! rank has left its part, takes what it needs from the others' parts
//! into its own memory, in its own future's poll. A rank whose call finds
//! the parts it needs there already (it is the last to come, or, in a
//! broadcast, the root's part is there), with less than 64 KiB to take
//! from them ([`TAKE_IN_CALL_BELOW`]; not the two rounds of a large
//! allreduce), takes them in the call itself and returns a finished
//! future: nothing to wait for, nothing boxed. At most one wake-up per
//! rank and call, against a message per step of the message algorithms.
//!
//! Every rank waits for every other's part, so a rank can never run ahead
//! of the others by more than the calls it starts without awaiting them;
//! but a broadcast's ranks other than the root wait only for the root's
//! part, and the root, which has nothing to take, finishes once its data
//! is there, while the calls open on the communicator hold at most 4 MiB
//! (their rounds and the root's data: [`LocalComm::run_ahead`], at least
//! 16 calls and at most 4,096) and its data is under 64 KiB (otherwise it
//! waits for every part), as a root whose messages go eagerly runs ahead
//! of its receivers. Every rank checks every part it waited for: ranks that
//! called another collective, or whose blocks hold other types or counts,
//! are reported on every rank that checks them
//! ([`ErrorKind::CollectiveMismatch`]), and a rank
//! that gave up on the call (its arguments were wrong) leaves a part that
//! says so. A rank gone without its part ([`LocalWorld::leave`]) fails the
//! call on the others with [`ErrorKind::ProcessFailed`].
//!
//! Calls of a few plain values that any bytes make valid (at most 24 bytes
//! a block: [`INLINE`]; no `bool` or `char`, whose values are checked
//! outside the lock, in the general way) of barrier, bcast, allreduce,
//! allgather and alltoall (24 bytes in all) take a small lane
//! ([`SmallPart`]): each rank leaves its values in a small part, held in
//! the round itself with no list and nothing shared, and reads every part
//! it needs where it lies, under the round's lock, copying out only what
//! it needs (an allreduce's operands, combined once the lock is
//! released, but for a built-in operation on one of mpx's own types: no
//! code of the user's runs under it). A round where
//! small parts meet others (typed and described buffers of the same
//! values, or ranks that disagree) shares them all as parts, so every
//! reader sees every part as before.
//!
//! Reductions combine the parts as the message algorithms do, so a
//! program gets the same bits on every transport: below 64 KiB in the
//! binomial pattern in rank order of recursive doubling and of the
//! binomial tree to rank 0, computed by every rank; from 64 KiB (and at
//! least a value per rank), each rank combines one block (1/n of the
//! values) by a left fold in rank order, as the reduce-scatter does, and
//! leaves it at a second round, from which every rank copies every block. Every rank
//! computes the same operations on the same operands: every rank gets the
//! same bits.
//!
//! [`LocalWorld::leave`]: crate::runtime::LocalWorld
//! [`LocalComm`]: crate::runtime::LocalComm

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use smallvec::SmallVec;

use super::op::Builtin;
use super::reduce::LARGE_ALLREDUCE;
use super::element::sealed::AnyBytes;
use super::{checked_into, native_message, Call, Collective, Element, Op, Starting};
use crate::comm::data::{Packed, SendData};
use crate::datatype::Datatype;
use crate::error::{Error, ErrorKind, Result};
use crate::mpi_type::MpiType;
use crate::pack::spare::Values;
use crate::pack::Repr;
use crate::proto::engine::Delivered;
use crate::runtime::{block_list, one_block, recycle, recycle_bytes, Arrival, Block, BlockBytes, Glimpse, LocalComm, MemberParts, Mixed, Part, Parts, Seat, SmallPart, Want, INLINE, MESSAGES};

/// A root runs ahead only with less data than this: larger data is packed
/// into large buffers, reused from one call to the next only when the
/// others are done with them.
const RUN_AHEAD_BYTES: u64 = 64 << 10;

/// Blocks of this many bytes or more (the same on every rank of a legal
/// call) make `allgather` and `alltoall` exchange messages even where the
/// ranks meet: every rank reads every other's large block after all have
/// packed theirs, cold in the cache, where the ring and the pairwise
/// exchange copy each block while it is fresh (at 1 MiB per rank on 4
/// ranks, meeting took 1.3-1.6 times as long). A call whose ranks choose
/// differently (their counts disagree) fails: whichever side comes later
/// finds the other's part (a rank over messages fails at once; a rank
/// that meets tells those over messages).
const MEET_BELOW: u64 = 256 << 10;

/// Whether an `allgather` or `alltoall` of blocks of `block_bytes` meets
/// where the ranks can (see [`MEET_BELOW`]).
pub(super) fn meets(block_bytes: u64) -> bool {
    block_bytes < MEET_BELOW
}

/// The collective a part is of, and what its ranks must agree on besides:
/// a broadcast's root, or an allreduce's algorithm and operation
/// ([`allreduce_kind`]): `(code, arg)`, the codes those of [`name`].
type Kind = (u8, usize);
const BARRIER: u8 = 0;
const BCAST: u8 = 1;
const ALLGATHER: u8 = 2;
const ALLTOALL: u8 = 3;
const ALLREDUCE: u8 = 4;

/// A kind of part, for error messages.
fn name((code, arg): Kind) -> String {
    // A call that exchanges messages keeps its sub-tags where a root goes.
    match code {
        BARRIER => "barrier".into(),
        BCAST => format!("bcast from root {arg}"),
        ALLGATHER => "allgather".into(),
        ALLTOALL => "alltoall".into(),
        ALLREDUCE => {
            let (two_rounds, op) = allreduce_kind_parts(arg);
            let op = op.map_or_else(|| "a user's operation".to_string(), |b| format!("{b:?}"));
            match two_rounds {
                true => format!("allreduce with {op} of large data in two rounds (at least one value for each rank)"),
                false => format!("allreduce with {op}"),
            }
        }
        _ => "a collective that exchanges messages".into(),
    }
}

/// The second half of an allreduce's part kind: whether it runs in two
/// rounds, and its operation (ranks that pass different built-in
/// operations disagree, rather than each combine with its own; user
/// operations cannot be told apart).
fn allreduce_kind(two_rounds: bool, op: Option<Builtin>) -> usize {
    let op = op.map_or(0, |b| b as usize + 1);
    usize::from(two_rounds) | op << 1
}

/// What [`allreduce_kind`] put together.
fn allreduce_kind_parts(kind: usize) -> (bool, Option<Builtin>) {
    (kind & 1 == 1, (kind >> 1).checked_sub(1).and_then(|i| BUILTINS.get(i).copied()))
}

/// MPI's built-in operations, in the order of their declaration (their
/// numbers in [`allreduce_kind`]).
const BUILTINS: [Builtin; 12] = [
    Builtin::Sum,
    Builtin::Prod,
    Builtin::Min,
    Builtin::Max,
    Builtin::Land,
    Builtin::Lor,
    Builtin::Lxor,
    Builtin::Band,
    Builtin::Bor,
    Builtin::Bxor,
    Builtin::MinLoc,
    Builtin::MaxLoc,
];

/// What a part says about one of its blocks: type signature and bytes.
type Shape = (Option<(u64, u64)>, u64);

/// The shape of blocks that carry no data (a barrier's, an alltoall's,
/// whose blocks each receiver checks against its own).
const NO_SHAPE: Shape = (None, 0);

impl Starting<'_> {
    /// Where the call's ranks meet (a call that meets has one).
    fn place(&self) -> &Arc<LocalComm> {
        self.local().expect("a call that meets has a meeting place")
    }

    /// Leaves this rank's `part` of the call and is done with it at once
    /// if at most `open` calls are open (see [`LocalComm::leave`]), with
    /// what `look` sees of the parts there then.
    fn leave<R>(&self, part: Part, open: usize, look: impl FnOnce(MemberParts<'_>) -> R) -> Arrival<R> {
        self.place().leave((self.number(), 0), self.rank(), part, open, look)
    }

    /// Leaves this rank's word that its collective exchanges messages
    /// (see [`LocalComm::leave_word`]).
    fn leave_word(&self, part: Part) -> Arrival<Option<Error>> {
        self.place().leave_word((self.number(), 0), self.rank(), part)
    }

    /// [`leave`](Starting::leave) of a small part.
    fn leave_small<R>(&self, part: SmallPart, open: usize, look: impl FnOnce(MemberParts<'_>) -> R) -> Arrival<R> {
        self.place().leave_small((self.number(), 0), self.rank(), part, open, look)
    }

    /// This rank alone fails with `e`, its part (`left`) left all the same
    /// and done with: ranks over messages that have come are told.
    fn fails_alone<'a>(&self, left: Arrival<Option<Mixed>>, e: Error) -> Collective<'a> {
        if let Arrival::Took(mixed) = left {
            self.tell_if_mixed(mixed);
        }
        Collective::finished(Err(e))
    }

    /// Leaves this rank's part of phase `phase` of the call: the rank
    /// waits at its seat, or takes what it `wants` at once if it is there
    /// already (see [`LocalComm::sit`]).
    fn meet(&self, phase: u8, kind: Kind, shape: Shape, blocks: Result<Vec<Block>>, wants: Option<Want>) -> Arrival {
        self.meet_sharing(phase, kind, shape, blocks, Vec::new(), wants)
    }

    /// [`meet`](Starting::meet) with blocks that are slices of `whole`.
    fn meet_sharing(&self, phase: u8, kind: Kind, shape: Shape, blocks: Result<Vec<Block>>, whole: Vec<Bytes>, wants: Option<Want>) -> Arrival {
        let part = Part { kind, shape, blocks: blocks.map_err(|e| e.to_string()), whole };
        self.place().sit((self.number(), phase), self.rank(), part, wants)
    }
}

/// Packed native data as a block.
fn block(packed: Packed) -> Block {
    Block::from(packed)
}

impl From<Packed> for Block {
    fn from(packed: Packed) -> Block {
        debug_assert_eq!(packed.desc_len, 0, "native data carries no type description");
        Block { data: packed.data.into(), signature: packed.signature }
    }
}

/// Items `items` of a source buffer as a block: plain values of a few
/// bytes copied into the block itself (no allocation), others packed as
/// for a message.
pub(super) fn pack_part<E: Element>(src: &E::Src<'_>, items: Range<usize>) -> Result<Block> {
    match E::plain_src(src, items.clone(), INLINE) {
        Some(plain) => Ok(Block { data: BlockBytes::copy_of(plain.bytes)?, signature: plain.signature }),
        None => E::pack(src, items, Repr::Native).map(block),
    }
}

/// [`pack_part`] of items of a destination buffer (a broadcast's root's).
fn pack_dst_part<E: Element>(dst: &E::Dst<'_>, items: Range<usize>) -> Result<Block> {
    match E::plain_dst(dst, items.clone(), INLINE) {
        Some(plain) => Ok(Block { data: BlockBytes::copy_of(plain.bytes)?, signature: plain.signature }),
        None => E::pack_dst(dst, items, Repr::Native).map(block),
    }
}

/// `count` items of `datatype`, as a block of them would be.
fn shape_of(datatype: &Datatype, count: usize) -> Shape {
    let signature = datatype.signature().repeat(count as u64);
    (Some((signature.hash(), signature.len())), datatype.size().saturating_mul(count as u64))
}

fn shape_of_block(block: &Block) -> Shape {
    (block.signature, block.data.len() as u64)
}

impl Call {
    /// Leaves word at this call's round, if the ranks meet in this
    /// process, that this rank's collective exchanges messages instead (a
    /// part of kind `(MESSAGES, sub-tags its messages use)`). If a rank
    /// whose collective meets has left its part already, this rank's call
    /// fails at once (`Call::fails_with`): that rank may be done with the
    /// call (a broadcast's ranks take the root's part alone), and would
    /// never tell it. A rank that meets and comes later tells it.
    pub(super) fn mark_messages(&mut self) {
        if self.local.is_none() {
            return;
        }
        let part = Part { kind: (MESSAGES, self.subtags), shape: NO_SHAPE, blocks: Ok(Vec::new()), whole: Vec::new() };
        if let Arrival::Took(Some(error)) = self.starting().leave_word(part) {
            self.fails_with = Some(error);
        }
    }
}

impl Starting<'_> {
    /// Tells the ranks whose collective exchanges messages that the call
    /// failed, if they had left their word at the round when this rank
    /// looked (see [`Mixed`]): for ranks that do not check every part (a
    /// broadcast's).
    #[inline]
    fn tell_if_mixed(&self, mixed: Option<Mixed>) {
        if let Some(mixed) = mixed {
            self.give_up_on(mixed.subtags);
        }
    }
}

/// Tells the ranks whose call exchanges messages (they left word at the
/// round: see [`Call::mark_messages`]) that this rank gave up on it: they
/// wait for messages this rank will never send.
fn tell_those_over_messages(call: Starting<'_>, parts: &[Part]) {
    let subtags = parts.iter().filter(|p| p.kind.0 == MESSAGES).map(|p| p.kind.1).max();
    if let Some(subtags) = subtags {
        call.give_up_on(subtags);
    }
}

/// Checks every rank's part against this rank's `kind` and `shape`: the
/// first that disagrees, or gave up, fails the call on this rank. A rank
/// whose collective exchanges messages waits for this one's: it is told
/// by message that this rank gave up.
fn agree(call: Starting<'_>, parts: &[Part], kind: Kind, shape: Shape) -> Result<()> {
    if parts.iter().all(|part| part.kind == kind && part.shape == shape && part.blocks.is_ok()) {
        // Every legal call: one pass, no error built.
        return Ok(());
    }
    let agreed = parts.iter().enumerate().try_for_each(|(r, part)| agree_with(r, (part.kind, part.shape, part.blocks.as_ref().err().map(String::as_str)), kind, shape));
    if agreed.is_err() {
        tell_those_over_messages(call, parts);
    }
    agreed
}

/// [`agree`] for rank `r`'s part, of `(kind, shape, why it gave up)`.
fn agree_with(r: usize, (their_kind, their_shape, gave_up): (Kind, Shape, Option<&str>), kind: Kind, shape: Shape) -> Result<()> {
    let mismatch = |detail: String| Err(ErrorKind::CollectiveMismatch { rank: r, detail }.into());
    if let Some(why) = gave_up {
        return mismatch(format!("it gave up on the collective: {why}"));
    }
    if their_kind != kind {
        return mismatch(format!("it called {} where this rank called {}", name(their_kind), name(kind)));
    }
    if their_shape != shape {
        let describe = |(signature, bytes): Shape| match signature {
            Some((_, elements)) => format!("{elements} basic values ({bytes} bytes)"),
            None => format!("{bytes} bytes"),
        };
        return mismatch(format!("its block holds {} where this rank's holds {}", describe(their_shape), describe(shape)));
    }
    Ok(())
}

/// Why a broadcast's root that finishes at once, without waiting for the
/// others' parts, fails: the first part left before its own (but those
/// of ranks over messages, which [`MemberParts::mixed`] covers) that
/// disagrees with its `kind` and `shape`. So of two ranks that both call
/// themselves the root, the later fails, naming the earlier (which may
/// have finished already, and the ranks that take its data with it). A
/// rank that gave up, or whose part disagrees, fails such a root only if
/// its part came first (a root that waits checks every part), as
/// erroneous calls fail whichever ranks see the difference.
#[inline]
fn disagreeing(parts: &MemberParts<'_>, me: usize, kind: Kind, shape: Shape) -> Option<Error> {
    match parts.arrived() == 1 || (0..parts.len()).all(|r| r == me || !parts.has(r) || parts.agrees(r, kind, shape)) {
        true => None,
        false => first_disagreeing(parts, me, kind, shape),
    }
}

/// [`disagreeing`], once some part does.
#[cold]
fn first_disagreeing(parts: &MemberParts<'_>, me: usize, kind: Kind, shape: Shape) -> Option<Error> {
    (0..parts.len()).filter(|&r| r != me && parts.has(r) && !parts.agrees(r, kind, shape)).find_map(|r| {
        let part = parts.get(r);
        if part.kind.0 == MESSAGES {
            return None;
        }
        agree_with(r, (part.kind, part.shape, part.block.err()), kind, shape).err()
    })
}

/// Why a small call failed, as [`agree_small`] finds it under the round's
/// lock: the error, and the sub-tags of a rank whose collective exchanges
/// messages, if one does (it waits for this rank's messages: it must be
/// told, once the lock is released).
type Disagreement = (Error, Option<usize>);

/// [`agree`] over the parts of a round of small parts, read under its lock.
fn agree_small(parts: &MemberParts<'_>, kind: Kind, shape: Shape) -> std::result::Result<(), Disagreement> {
    if (0..parts.len()).all(|r| parts.agrees(r, kind, shape)) {
        // Every legal call: one pass, no error built.
        return Ok(());
    }
    let agreed = (0..parts.len()).try_for_each(|r| {
        let part = parts.get(r);
        agree_with(r, (part.kind, part.shape, part.block.err()), kind, shape)
    });
    agreed.map_err(|e| (e, parts.over_messages()))
}

/// The outcome of a small call, once the lock is released: a rank whose
/// collective exchanges messages is told that this one gave up.
fn told<T>(call: Starting<'_>, outcome: std::result::Result<T, Disagreement>) -> Result<T> {
    outcome.map_err(|(e, subtags)| {
        if let Some(subtags) = subtags {
            call.give_up_on(subtags);
        }
        e
    })
}

/// This rank's part of a small call (see [`SmallPart`]): `finish`ed with
/// what `read` reads from every part under the round's lock, at once if
/// they are all there when the call starts, otherwise by the returned
/// future once they are.
fn with_small_parts<'a, R: Send + 'a>(
    call: Starting<'_>,
    part: SmallPart,
    read: impl FnOnce(MemberParts<'_>) -> std::result::Result<R, Disagreement> + Send + Unpin + 'a,
    finish: impl FnOnce(Starting<'_>, R) -> Result<()> + Send + Unpin + 'a,
) -> Collective<'a> {
    with_small_part_of(call, part, None, read, finish)
}

/// [`with_small_parts`] reading member `from`'s part alone, if given.
fn with_small_part_of<'a, R: Send + 'a>(
    call: Starting<'_>,
    part: SmallPart,
    from: Option<usize>,
    read: impl FnOnce(MemberParts<'_>) -> std::result::Result<R, Disagreement> + Send + Unpin + 'a,
    finish: impl FnOnce(Starting<'_>, R) -> Result<()> + Send + Unpin + 'a,
) -> Collective<'a> {
    let mut read = Some(read);
    match call.place().sit_small((call.number(), 0), call.rank(), part, from, &mut read) {
        Arrival::Took(outcome) => Collective::finished(told(call, outcome).and_then(|r| finish(call, r))),
        Arrival::Waits(seat) => read_when_there(call.call(), seat, from, read, finish),
    }
}

/// The future of a rank waiting at `seat` of a small call: `read` (once)
/// reads the parts under the round's lock when they are there, and
/// `finish` finishes with what it read.
fn read_when_there<'a, R: Send + 'a>(
    call: Call,
    seat: Seat,
    from: Option<usize>,
    read: Option<impl FnOnce(MemberParts<'_>) -> std::result::Result<R, Disagreement> + Send + Unpin + 'a>,
    finish: impl FnOnce(Starting<'_>, R) -> Result<()> + Send + Unpin + 'a,
) -> Collective<'a> {
    Collective::met(ReadWhenThere { call, seat, from, read, finish: Some(finish) })
}

/// The `finish` of a small call that is done once it has read the parts.
fn read_is_all(_: Starting<'_>, (): ()) -> Result<()> {
    Ok(())
}

/// The future [`read_when_there`] makes.
struct ReadWhenThere<F, G> {
    call: Call,
    seat: Seat,
    from: Option<usize>,
    read: Option<F>,
    finish: Option<G>,
}

impl<R, F, G> std::future::Future for ReadWhenThere<F, G>
where
    F: FnOnce(MemberParts<'_>) -> std::result::Result<R, Disagreement> + Unpin,
    G: FnOnce(Starting<'_>, R) -> Result<()> + Unpin,
{
    type Output = Result<()>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<()>> {
        let this = self.get_mut();
        let outcome = std::task::ready!(this.seat.poll_read(cx, this.from, &mut this.read))?;
        let finish = this.finish.take().expect("a collective polled after it finished");
        let call = this.call.starting();
        std::task::Poll::Ready(told(call, outcome).and_then(|r| finish(call, r)))
    }
}

/// Rank `from`'s block `k`.
fn block_at(parts: &[Part], from: usize, k: usize) -> &Block {
    parts[from].blocks.as_ref().ok().and_then(|b| b.get(k)).expect("parts agreed: every block is there")
}

/// `block`, from rank `from`, as a delivered message of native data.
fn delivered_block(block: &Block, from: usize) -> Delivered {
    native_message(block.data.to_shared(), block.signature, from)
}

/// `block`, from rank `from`, into `items` of `dst`: copied as it lies if
/// it is exactly plain values of the destination's type (most calls),
/// checked and unpacked as a delivered message otherwise.
fn take_block<E: Element>(block: &Block, from: usize, dst: &mut E::Dst<'_>, items: Range<usize>) -> Result<()> {
    if E::copy_native(dst, items.clone(), block.signature, &block.data) {
        return Ok(());
    }
    checked_into::<E>(delivered_block(block, from), from, items.len(), dst, items).map(drop)
}

/// A collective whose part failed before it met: its part says so, and
/// it fails with `e`, once every rank has come (so that a rank whose call
/// exchanges messages, and waits for this one's, is told).
fn refused<'a>(start: Starting<'_>, kind: Kind, e: Error) -> Collective<'a> {
    let seat = start.meet(0, kind, NO_SHAPE, Err(e.clone()), None).seat();
    let call = start.call();
    Collective::met(async move {
        if let Ok(parts) = seat.await {
            tell_those_over_messages(call.starting(), &parts);
        }
        Err(e)
    })
}

/// `MPI_Barrier`.
pub(super) fn barrier(call: Starting<'_>) -> Collective<'static> {
    let kind = (BARRIER, 0);
    if call.size() > SMALL_LANE_RANKS {
        let arrival = call.meet(0, kind, NO_SHAPE, Ok(Vec::new()), Some(Want::All));
        return with_every_part(call, arrival, move |call, parts| {
            agree(call, &parts, kind, NO_SHAPE)?;
            recycle(parts);
            Ok(())
        });
    }
    let part = SmallPart::new(kind, NO_SHAPE, &[], None).expect("no bytes fit");
    with_small_parts(call, part, move |parts| agree_small(&parts, kind, NO_SHAPE), read_is_all)
}

/// This rank's part of a call that needs every rank's part: `finish`ed
/// with them when the call starts if it took them as it arrived (it
/// completed the round: no future to run, no wait), otherwise by the
/// returned future once they are there.
fn with_every_part<'a>(call: Starting<'_>, arrival: Arrival, finish: impl FnOnce(Starting<'_>, Parts) -> Result<()> + Send + 'a) -> Collective<'a> {
    match arrival {
        Arrival::Took(got) => Collective::finished(finish(call, got.all())),
        Arrival::Waits(seat) => {
            let call = call.call();
            Collective::met(async move { finish(call.starting(), seat.await?) })
        }
    }
}

/// Communicators of more ranks than this take the small lane for none of
/// their calls: each rank reads every rank's part under the round's
/// lock, work that grows as the square of the ranks.
const SMALL_LANE_RANKS: usize = 64;

/// A rank takes what it waits for in the call that starts the collective
/// (if it is there) only if it is less than this many bytes: a larger
/// copy waits for the future's poll, so that starting a nonblocking
/// collective stays cheap.
const TAKE_IN_CALL_BELOW: u64 = 64 << 10;

/// What a rank that takes `bytes` wants at once: every part, if that is
/// little (see [`TAKE_IN_CALL_BELOW`]).
fn every_part_if_small(bytes: u64) -> Option<Want> {
    (bytes < TAKE_IN_CALL_BELOW).then_some(Want::All)
}

/// `MPI_Bcast` of `buf` from `root`; `checked`: the arguments' checks.
pub(super) fn bcast<'a, E: Element>(start: Starting<'_>, checked: Result<()>, root: usize, mut buf: E::Dst<'a>) -> Collective<'a> {
    let kind = (BCAST, root);
    if let Err(e) = checked {
        return refused(start, kind, e);
    }
    let count = E::dst_len(&buf);
    let me = start.rank();
    let plain = E::plain_dst(&buf, 0..count, INLINE).filter(|_| start.size() <= SMALL_LANE_RANKS);
    if let Some((bytes, signature, any_bytes)) = plain.and_then(|plain| Some((plain.bytes, plain.signature, plain.any_bytes?))) {
        // A few plain values that any bytes make valid: the small lane.
        // Their packed data is their bytes: that is the block's shape.
        let shape = (signature, bytes.len() as u64);
        let part = match me == root {
            true => SmallPart::new(kind, shape, bytes, signature),
            false => SmallPart::new(kind, shape, &[], None),
        };
        return small_bcast::<E>(start, part.expect("few enough bytes"), root, buf, any_bytes);
    }
    let shape = shape_of(&E::item_type(&buf), count);
    let blocks = match me == root {
        true => match pack_dst_part::<E>(&buf, 0..count) {
            Ok(block) => one_block(block),
            Err(e) => return refused(start, kind, e),
        },
        false => Vec::new(),
    };
    if me == root {
        // The root has nothing to take: it is done once its data is there
        // for the others (as a root whose sends went eagerly is), unless
        // its data is large or the others are too far behind.
        let part = Part { kind, shape, blocks: Ok(blocks), whole: Vec::new() };
        let run_ahead = if shape.1 < RUN_AHEAD_BYTES { start.place().run_ahead(shape.1) } else { 0 };
        let seat = match start.leave(part, run_ahead, |parts| (parts.mixed(), disagreeing(&parts, me, kind, shape))) {
            Arrival::Took((mixed, disagreement)) => {
                start.tell_if_mixed(mixed);
                return Collective::finished(disagreement.map_or(Ok(()), Err));
            }
            Arrival::Waits(seat) => seat,
        };
        // A root that waits checks every part.
        let call = start.call();
        return Collective::met(async move {
            let parts = seat.await?;
            agree(call.starting(), &parts, kind, shape)?;
            recycle(parts);
            Ok(())
        });
    }
    // The others take the root's part as soon as it is there (when the
    // call starts, if the root's call started first), without waiting
    // for each other, and check only it.
    let wants = (shape.1 < TAKE_IN_CALL_BELOW).then_some(Want::One(root));
    let arrival = start.meet(0, kind, shape, Ok(blocks), wants);
    let mut take = move |call: Starting<'_>, root_part: Glimpse| {
        if let Err(e) = agree_with(root, (root_part.kind, root_part.shape, root_part.block.as_ref().err().map(String::as_str)), kind, shape) {
            if root_part.kind.0 == MESSAGES {
                // The root's call exchanges messages: the ranks of its
                // tree that do too may wait for this rank's.
                call.give_up_on(root_part.kind.1);
            }
            return Err(e);
        }
        let block = root_part.block.ok().flatten().ok_or_else(|| ErrorKind::CollectiveMismatch { rank: root, detail: "its part holds no data".into() })?;
        take_block::<E>(&block, root, &mut buf, 0..count)?;
        if let BlockBytes::Shared(data) = block.data {
            recycle_bytes(data);
        }
        // Those over messages that have come are told.
        call.tell_if_mixed(root_part.mixed);
        Ok(())
    };
    match arrival {
        Arrival::Took(got) => Collective::finished(take(start, got.one())),
        Arrival::Waits(mut seat) => {
            let call = start.call();
            Collective::met(async move {
                let root_part = std::future::poll_fn(|cx| seat.poll_part(cx, root)).await?;
                take(call.starting(), root_part)
            })
        }
    }
}

/// [`bcast`] of a few plain values: the root leaves them in a small
/// part, and the others take them from it under the round's lock.
fn small_bcast<'a, E: Element>(call: Starting<'_>, part: SmallPart, root: usize, mut buf: E::Dst<'a>, any_bytes: AnyBytes<E>) -> Collective<'a> {
    let (kind, shape) = (part.kind, part.shape);
    let count = E::dst_len(&buf);
    if call.rank() == root {
        // The root has nothing to take (see `bcast`): it is done once its
        // part is left, unless too many calls are open.
        let run_ahead = call.place().run_ahead(shape.1);
        let seat = match call.leave_small(part, run_ahead, |parts| (parts.mixed(), disagreeing(&parts, root, kind, shape))) {
            Arrival::Took((mixed, disagreement)) => {
                call.tell_if_mixed(mixed);
                return Collective::finished(disagreement.map_or(Ok(()), Err));
            }
            Arrival::Waits(seat) => seat,
        };
        // A root that waits checks every part.
        return read_when_there(call.call(), seat, None, Some(move |parts: MemberParts<'_>| agree_small(&parts, kind, shape)), read_is_all);
    }
    let take = move |parts: MemberParts<'_>| {
        let root_part = parts.get(root);
        if let Err(e) = agree_with(root, (root_part.kind, root_part.shape, root_part.block.err()), kind, shape) {
            // A root whose call exchanges messages: the ranks of its tree
            // that do too may wait for this rank's.
            return Err((e, (root_part.kind.0 == MESSAGES).then_some(root_part.kind.1)));
        }
        let (bytes, signature) = root_part.block.expect("agreed: the root did not give up");
        take_bytes::<E>((bytes, signature, Some(any_bytes)), root, &mut buf, 0..count).map_err(|e| (e, None))?;
        // Taken: this rank checks no other part, but those over messages
        // that have come are told.
        Ok(parts.mixed())
    };
    with_small_part_of(call, part, Some(root), take, |call, mixed| {
        call.tell_if_mixed(mixed);
        Ok(())
    })
}

/// Bytes of a part to take, as [`take_bytes`] takes them: the bytes, their
/// type signature, and the proof that the destination's items take any
/// bytes, if it does.
type TakenBytes<'b, E> = (&'b [u8], Option<(u64, u64)>, Option<AnyBytes<E>>);

/// `bytes` of native data of type signature `signature`, from rank
/// `from`'s part, which agreed with this rank's, into `items` of `dst`:
/// copied as they lie if they are plain values of the destination's type,
/// which any bytes make valid (the proof, given by `plain_dst`, says so:
/// the signatures agreed), or if their signature shows them to be
/// (`copy_native`); checked and unpacked as a delivered message
/// otherwise.
fn take_bytes<E: Element>((bytes, signature, any_bytes): TakenBytes<'_, E>, from: usize, dst: &mut E::Dst<'_>, items: Range<usize>) -> Result<()> {
    if any_bytes.is_some_and(|proof| E::copy_agreed(dst, items.clone(), bytes, proof)) || E::copy_native(dst, items.clone(), signature, bytes) {
        return Ok(());
    }
    checked_into::<E>(native_message(Bytes::copy_from_slice(bytes), signature, from), from, items.len(), dst, items).map(drop)
}

/// `MPI_Allgather`: `checked` is the items of each rank's block of
/// `recv` (the blocks one after another from the start) and this rank's
/// items of `send`, checked (or why the arguments are wrong).
pub(super) fn allgather<'a, E: Element>(call: Starting<'_>, checked: Result<(usize, Range<usize>)>, send: &E::Src<'_>, mut recv: E::Dst<'a>) -> Collective<'a> {
    let kind = (ALLGATHER, 0);
    let (count, mine) = match checked {
        Ok(checked) => checked,
        Err(e) => return refused(call, kind, e),
    };
    let n = call.size();
    let ranges = move || (0..n).map(move |r| r * count..(r + 1) * count).enumerate();
    // A block of plain values comes with the proof that any bytes make
    // valid items of its type: the receive buffer's type too (only typed
    // buffers give one, and they hold one type on both sides).
    let plain = E::plain_src(send, mine.clone(), INLINE).filter(|_| n <= SMALL_LANE_RANKS);
    let small = plain.and_then(|plain| {
        let shape = (plain.signature, plain.bytes.len() as u64);
        Some((SmallPart::new(kind, shape, plain.bytes, plain.signature)?, shape, plain.any_bytes?))
    });
    if let Some((part, shape, any_bytes)) = small {
        // A block of a few plain values each: the small lane, every
        // rank's block taken where it lies, under the round's lock.
        let read = move |parts: MemberParts<'_>| {
            agree_small(&parts, kind, shape)?;
            for (r, items) in ranges() {
                // Every part agreed with this rank's: its block is as
                // long as this rank's items.
                let (bytes, signature) = parts.block(r, 0);
                if !E::copy_agreed(&mut recv, items.clone(), bytes, any_bytes) {
                    take_bytes::<E>((bytes, signature, None), r, &mut recv, items).map_err(|e| (e, None))?;
                }
            }
            Ok(())
        };
        return with_small_parts(call, part, read, read_is_all);
    }
    let mine = match pack_part::<E>(send, mine) {
        Ok(block) => block,
        Err(e) => return refused(call, kind, e),
    };
    let shape = shape_of_block(&mine);
    let taken = (n * count) as u64 * E::item_type(&recv).size();
    let arrival = call.meet(0, kind, shape, Ok(one_block(mine)), every_part_if_small(taken));
    with_every_part(call, arrival, move |call, parts| {
        agree(call, &parts, kind, shape)?;
        for (r, items) in ranges() {
            take_block::<E>(block_at(&parts, r, 0), r, &mut recv, items)?;
        }
        recycle(parts);
        Ok(())
    })
}

/// An alltoall's blocks: those of the send buffer for each rank in turn,
/// and those of the receive buffer each rank's block lands in.
pub(super) enum Layout {
    /// As many items for each rank, one block after another from the
    /// start of each buffer (an alltoall's): the items of a block of the
    /// send buffer, and of the receive buffer.
    Even(usize, usize),
    /// Each rank's block of each buffer (an alltoallv's).
    Listed(Vec<Range<usize>>, Vec<Range<usize>>),
}

impl Layout {
    /// Rank `r`'s block of the send buffer, and of the receive buffer.
    pub(super) fn block(&self, r: usize) -> (Range<usize>, Range<usize>) {
        match self {
            Layout::Even(out, into) => (r * out..(r + 1) * out, r * into..(r + 1) * into),
            Layout::Listed(out, into) => (out[r].clone(), into[r].clone()),
        }
    }

    /// Every rank's block of each buffer, as lists.
    pub(super) fn listed(self, n: usize) -> (Vec<Range<usize>>, Vec<Range<usize>>) {
        match self {
            Layout::Even(..) => (0..n).map(|r| self.block(r)).unzip(),
            Layout::Listed(out, into) => (out, into),
        }
    }
}

/// `MPI_Alltoall` (and `v`): `layout` is the blocks of `send` for each
/// rank in turn and those of `recv` each rank's block lands in, checked.
/// A rank's block for itself is copied when the call starts, straight
/// from `send` into `recv` (for typed buffers one copy, not a pack and an
/// unpack); the others are packed and left at the round. A copy that
/// fails (the block's type signatures disagree) fails this rank alone,
/// as over messages: its part is left for the others all the same.
pub(super) fn alltoall<'a, E: Element>(
    call: Starting<'_>,
    layout: Result<Layout>,
    send: E::Src<'_>,
    mut recv: E::Dst<'a>,
) -> Collective<'a> {
    let kind = (ALLTOALL, 0);
    let (n, me) = (call.size(), call.rank());
    if let Some((c, part, signature, any_bytes)) = small_alltoall::<E>(call, &layout, &send, &recv) {
        // A few plain values for every rank: the small lane. This rank's
        // block to itself is copied now; each other rank's part holds a
        // block for every rank, this one's taken where it lies, under the
        // round's lock.
        if let Err(e) = E::copy(&send, me * c..(me + 1) * c, &mut recv, me * c..(me + 1) * c) {
            // This rank alone fails (see above).
            return call.fails_alone(call.leave_small(part, usize::MAX, |parts| parts.mixed()), e);
        }
        let read = move |parts: MemberParts<'_>| {
            agree_small(&parts, kind, NO_SHAPE)?;
            for r in (0..n).filter(|&r| r != me) {
                let (bytes, theirs) = parts.block(r, me);
                // Each receiver checks each block against its own items:
                // copied on proof where the signatures agree.
                let items = r * c..(r + 1) * c;
                if theirs != signature || !E::copy_agreed(&mut recv, items.clone(), bytes, any_bytes) {
                    take_bytes::<E>((bytes, theirs, None), r, &mut recv, items).map_err(|e| (e, None))?;
                }
            }
            Ok(())
        };
        return with_small_parts(call, part, read, read_is_all);
    }
    let mut own_copy = Ok(());
    let packed = layout.and_then(|layout| {
        let (out, into) = layout.listed(n);
        own_copy = E::copy(&send, out[me].clone(), &mut recv, into[me].clone());
        // Nobody reads a rank's block for itself.
        let own = Block { data: BlockBytes::EMPTY, signature: None };
        // Blocks of one size, one after another from the start (an
        // alltoall's), larger than a block holds inline: those before the
        // rank's own and those after it packed as one buffer each, which
        // each block is a slice of (at most two allocations, reused for
        // the next call if large).
        let c = out.first().map_or(0, Range::len);
        let even = c > 0 && out.iter().enumerate().all(|(r, items)| items.start == r * c && items.len() == c);
        if even && E::plain_src(&send, 0..c, INLINE).is_none() {
            let signature = shape_of(&E::src_item_type(&send), c).0;
            let mut blocks = block_list(out.len());
            let mut whole = Vec::new();
            for (side, ranks) in [0..me, me + 1..out.len()].into_iter().enumerate() {
                if side == 1 {
                    blocks.push(own.clone());
                }
                if ranks.is_empty() {
                    continue;
                }
                let packed = E::pack(&send, ranks.start * c..ranks.end * c, Repr::Native)?.data;
                if ranks.len() == 1 {
                    // A block of its own (slicing would share it, which
                    // costs an allocation).
                    blocks.push(Block { data: packed.into(), signature });
                    continue;
                }
                let bytes = packed.len() / ranks.len();
                blocks.extend((0..ranks.len()).map(|i| Block { data: packed.slice(i * bytes..(i + 1) * bytes).into(), signature }));
                if packed.len() >= crate::pack::spare::MEDIUM {
                    // Worth reusing once every block is done with.
                    whole.push(packed);
                }
            }
            return Ok((into, blocks, whole));
        }
        // Otherwise (blocks of a few plain bytes, held inline, or blocks
        // of several sizes) each block on its own.
        let mut blocks = block_list(out.len());
        for (r, items) in out.into_iter().enumerate() {
            blocks.push(if r == me { own.clone() } else { pack_part::<E>(&send, items)? });
        }
        Ok((into, blocks, Vec::new()))
    });
    let (into, blocks, whole) = match packed {
        Ok(packed) => packed,
        Err(e) => return refused(call, kind, e),
    };
    let taken = into.iter().map(Range::len).sum::<usize>() as u64 * E::item_type(&recv).size();
    if let Err(e) = own_copy {
        // This rank alone fails.
        return call.fails_alone(call.leave(Part { kind, shape: NO_SHAPE, blocks: Ok(blocks), whole }, usize::MAX, |parts| parts.mixed()), e);
    }
    let arrival = call.meet_sharing(0, kind, NO_SHAPE, Ok(blocks), whole, every_part_if_small(taken));
    with_every_part(call, arrival, move |call, parts| {
        agree(call, &parts, kind, NO_SHAPE)?;
        for (r, items) in into.into_iter().enumerate().filter(|&(r, _)| r != me) {
            take_block::<E>(block_at(&parts, r, me), r, &mut recv, items)?;
        }
        recycle(parts);
        Ok(())
    })
}

/// The small lane of an alltoall (see [`alltoall`]), if it takes it:
/// blocks of `c` items for every rank one after another from the start of
/// both buffers (an even layout), plain values of at most [`INLINE`] bytes in all, on a
/// communicator of at most [`SMALL_LANE_RANKS`], of a type that any bytes
/// make valid. Returns `c`, this rank's part (every block it sends, each
/// of the type signature of `c` items), that signature, and the proof
/// that the receive buffer's items take any bytes.
#[allow(clippy::type_complexity)]
fn small_alltoall<E: Element>(call: Starting<'_>, layout: &Result<Layout>, send: &E::Src<'_>, recv: &E::Dst<'_>) -> Option<(usize, SmallPart, Option<(u64, u64)>, AnyBytes<E>)> {
    let Ok(Layout::Even(c, into)) = *layout else { return None };
    let (n, me) = (call.size(), call.rank());
    if n > SMALL_LANE_RANKS || into != c {
        return None;
    }
    let all = E::plain_src(send, 0..n * c, INLINE)?;
    // Typed buffers (the only plain ones) hold items of one type on both
    // sides: a block of the receive buffer has the signature of a block
    // of the send buffer.
    let mine = E::plain_dst(recv, me * c..(me + 1) * c, INLINE)?;
    let part = SmallPart::of_blocks((ALLTOALL, 0), NO_SHAPE, all.bytes, mine.signature, n)?;
    Some((c, part, mine.signature, mine.any_bytes?))
}

/// An allreduce this rank refuses with `e`, whichever way its ranks
/// meet: the others are told, as for any argument a rank gets wrong.
pub(super) fn allreduce_refused<'a>(start: Starting<'_>, e: Error) -> Collective<'a> {
    match start.local() {
        Some(_) => refused(start, (ALLREDUCE, 0), e),
        None => Collective::new(start.call(), async move { Err(e) }),
    }
}

/// `MPI_Allreduce` of `send` into `recv` with `op`.
pub(super) fn allreduce<'a, T: MpiType>(call: Starting<'_>, send: &[T], recv: &'a mut [T], op: Op<T>) -> Collective<'a> {
    let (n, count) = (call.size(), send.len());
    // Large data in two rounds (each rank combining a block of values),
    // smaller in one: the choice is each rank's own (its count of values,
    // and their bytes), so its part says which, and ranks that choose
    // differently (one value of an array type against a slice of its
    // elements: the same bytes and signature) disagree rather than wait
    // at a round the others never come to.
    let blocks = n > 1 && count >= n && std::mem::size_of_val(send) as u64 >= LARGE_ALLREDUCE;
    let kind = (ALLREDUCE, allreduce_kind(blocks, op.builtin()));
    if let Err(e) = op.check().and_then(|()| super::check_len("allreduce: the receive buffer", recv.len(), count)) {
        return refused(call, kind, e);
    }
    // Plain values (no padding, checked by `small_native_values`) that
    // any bytes make valid: what `native_values_in` says of them.
    let plain = !T::NEEDS_VALIDATION && std::mem::size_of::<T>() > 0;
    let small = crate::comm::data::small_native_values(send, INLINE).filter(|_| plain && n <= SMALL_LANE_RANKS);
    if let Some((bytes, signature)) = small {
        // A few plain values: every rank's are copied out under the
        // round's lock, and combined once it is released.
        let shape = (signature, bytes.len() as u64);
        let part = SmallPart::new(kind, shape, bytes, signature).expect("few enough bytes");
        let gather = move |parts: &MemberParts<'_>| {
            agree_small(parts, kind, shape)?;
            let mut all = SmallValues::<T>::with_capacity(parts.len() * count);
            for r in 0..parts.len() {
                // SAFETY: `T` is plain: no padding (`small_native_values`)
                // and any bytes valid (not `NEEDS_VALIDATION`), checked
                // above.
                unsafe { push_plain(&mut all, parts.bytes(r), count) };
            }
            Ok(all)
        };
        if op.runs_only_mpx_code() {
            // One of MPI's operations on one of mpx's types, quick, never
            // panicking nor calling back into mpx: the values are combined
            // under the round's lock, and only the outcome leaves it.
            let read = move |parts: MemberParts<'_>| {
                let all = gather(&parts)?;
                Ok(combine_tree(&op, n, &|r| &all[r * count..(r + 1) * count], recv))
            };
            return with_small_parts(call, part, read, |_, combined: Result<()>| combined);
        }
        // A user's code (a function, or the `combine` of a user's
        // `Reducible` type) runs once the lock is released: a panic there
        // must not strand the members waiting to be woken.
        let read = move |parts: MemberParts<'_>| gather(&parts);
        return with_small_parts(call, part, read, move |_, all: SmallValues<T>| {
            combine_tree(&op, n, &|r| &all[r * count..(r + 1) * count], recv)
        });
    }
    let mine = match pack_part::<T>(&send, 0..count) {
        Ok(block) => block,
        Err(e) => return refused(call, kind, e),
    };
    let shape = shape_of_block(&mine);
    let wants = if blocks { None } else { every_part_if_small(shape.1.saturating_mul(n as u64)) };
    let arrival = call.meet(0, kind, shape, Ok(one_block(mine)), wants);
    if !blocks {
        return with_every_part(call, arrival, move |call, parts| {
            agree(call, &parts, kind, shape)?;
            let mut values = RankValues::new();
            values_of::<T>(&parts, recv, 0..count, &mut values)?;
            combine_tree(&op, values.len(), &|r| &values[r], recv)?;
            drop(values);
            recycle(parts);
            Ok(())
        });
    }
    // Each rank combines its own block of the values, leaves it at the
    // call's second round, and copies every rank's from there. A rank that
    // fails (or is dropped) before it leaves its block leaves word of it.
    let me = call.rank();
    let block_of = move |r: usize| {
        let start = r * (count / n) + r.min(count % n);
        start..start + count / n + usize::from(r < count % n)
    };
    let call = call.call();
    let mut owed = Owed { call: Some(call.clone()) };
    let seat = arrival.seat();
    Collective::met(async move {
        let first = async {
            let parts = seat.await?;
            if let Err(e) = agree(call.starting(), &parts, kind, shape) {
                // Every rank reads the same parts, so every rank fails here
                // alike (a rank that refused its arguments among them): none
                // comes to the second round, which would stay open for ever
                // with a word of this one's in it.
                owed.forgive();
                return Err(e);
            }
            let mut values = RankValues::new();
            values_of::<T>(&parts, recv, block_of(me), &mut values)?;
            combine_in_order(&op, &values, me, &mut recv[block_of(me)])?;
            drop(values);
            recycle(parts);
            Ok::<(), Error>(())
        };
        if let Err(e) = first.await {
            // Others may have combined their blocks where this rank failed
            // (a user's `Reducible` may refuse some values only): they wait
            // at the second round for word of this one's.
            if owed.call.is_some() {
                drop(owed.pay(kind, Err(e.clone())));
            }
            return Err(e);
        }
        let combined = block((&recv[block_of(me)]).into_packed(Repr::Native)?);
        let seat = owed.pay(kind, Ok(one_block(combined)));
        let parts = seat.await?;
        for r in (0..n).filter(|&r| r != me) {
            // Each rank's block is its own size: checked against it.
            let (items, part) = (block_of(r), &parts[r]);
            agree_with(r, (part.kind, part.shape, part.blocks.as_ref().err().map(String::as_str)), kind, shape_of(&T::datatype(), items.len()))?;
            take_block::<T>(block_at(&parts, r, 0), r, &mut &mut recv[..], items)?;
        }
        recycle(parts);
        Ok(())
    })
}

/// The second round a large allreduce owes the others: paid with this
/// rank's combined block, or, if the rank's part ends first, with word
/// that it gave up.
struct Owed {
    call: Option<Call>,
}

impl Owed {
    /// Nothing is owed after all: no rank comes to the second round.
    fn forgive(&mut self) {
        self.call = None;
    }

    fn pay(&mut self, kind: Kind, blocks: Result<Vec<Block>>) -> Seat {
        let call = self.call.take().expect("paid once");
        let shape = match &blocks {
            Ok(b) => shape_of_block(&b[0]),
            Err(_) => NO_SHAPE,
        };
        call.starting().meet(1, kind, shape, blocks, None).seat()
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        if self.call.is_some() {
            drop(self.pay((ALLREDUCE, 0), Err(ErrorKind::InvalidArgument("its part ended before it combined its block".into()).into())));
        }
    }
}

/// Every rank's few values of a small allreduce, one after another: held
/// inline up to 8 values.
type SmallValues<T> = SmallVec<[T; 8]>;

/// Appends the `count` values of `T` that `bytes` hold to `all`.
///
/// # Safety
/// `T` must be plain: a type without padding that any bytes make valid
/// (`native_values_in` says so for `T`'s own data), so that any `count`
/// values' worth of bytes are `count` valid values. The length is checked.
unsafe fn push_plain<T: MpiType>(all: &mut SmallValues<T>, bytes: &[u8], count: usize) {
    assert_eq!(bytes.len(), count * std::mem::size_of::<T>(), "parts that agree hold as many values");
    all.reserve(count);
    // SAFETY: `bytes` is `count` values' worth of bytes of `T` (checked
    // above), which any bytes make valid (the caller's contract); `all`
    // has room for them past its length (reserved above), and its memory
    // is distinct from `bytes` (a part's, under the round's lock). The new
    // length covers exactly the values written.
    unsafe {
        crate::pack::copy::copy_raw(bytes.as_ptr(), all.as_mut_ptr().add(all.len()).cast::<u8>(), bytes.len());
        all.set_len(all.len() + count);
    }
}

/// Every rank's values, in rank order: held inline for up to 8 ranks.
type RankValues<'p, T> = SmallVec<[Cow<'p, [T]>; 8]>;

/// A partial result a fold keeps beside its output: held inline up to 4
/// values.
type Scratch<T> = SmallVec<[T; 4]>;

/// Items `items` of every rank's values (as many as `template` holds, a
/// buffer of that many), into `values`: read where they lie in the parts
/// if they are plain native values of `T` at its alignment, unpacked
/// otherwise.
fn values_of<'p, T: MpiType>(parts: &'p [Part], template: &[T], items: Range<usize>, values: &mut RankValues<'p, T>) -> Result<()> {
    let count = template.len();
    let block = |r: usize| block_at(parts, r, 0);
    // The parts agreed on their shape (signature and length), so one
    // check of native values holds for every part.
    let first = block(0);
    let plain = crate::comm::native_values_in::<T>(first.signature, first.data.len(), &T::datatype_ref()) == Some(count);
    values.clear();
    for r in 0..parts.len() {
        let data = &block(r).data;
        // Every part's length is the first's where the callers checked
        // that the parts agree: checked again here, where it makes the
        // read below sound.
        if plain && data.len() == first.data.len() && data.as_ptr().align_offset(std::mem::align_of::<T>()) == 0 {
            // SAFETY: the block's bytes are `count` native values of `T`
            // (the first block's signature and length say so, checked
            // above, and this block is as long), a type without padding
            // that any bytes make valid, at `T`'s alignment; the slice
            // borrows `parts`, which holds them.
            let all = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<T>(), count) };
            values.push(Cow::Borrowed(&all[items.clone()]));
            continue;
        }
        let mut all = template.to_vec();
        take_block::<T>(block(r), r, &mut &mut all[..], 0..count)?;
        values.push(Cow::Owned(all[items.clone()].to_vec()));
    }
    Ok(())
}

/// Combines every rank's `values` into `out`, the block of rank `me`, by a
/// left fold in rank order, `((v₀ ∘ v₁) ∘ v₂) ∘ …`, with each operation's
/// operands in the order the message algorithm for large data gives them
/// for this block (see `reduce::scattered`): where `lower ∘ theirs` is
/// `theirs ∘ lower` bit for bit, another rank's values fold in as
/// `theirs ∘ lower`, this rank's own and the last rank's as `lower ∘ …`.
fn combine_in_order<T: MpiType>(op: &Op<T>, values: &[Cow<'_, [T]>], me: usize, out: &mut [T]) -> Result<()> {
    let last = values.len() - 1;
    let from_message = op.commutes_exactly();
    let mut acc: Option<Fold<'_, T>> = None;
    for (r, theirs) in values[..last].iter().enumerate() {
        if let Some(lower) = acc.as_mut().filter(|_| from_message && r != me) {
            op.apply(theirs, lower.to_mut())?;
            continue;
        }
        acc = Some(match acc.take() {
            None => Fold::Lying(theirs),
            Some(lower) => {
                let mut part = Values::copy_of(theirs);
                op.apply(lower.as_slice(), &mut part)?;
                Fold::Kept(part)
            }
        });
    }
    crate::pack::copy::copy_slice(out, &values[last]);
    match acc {
        Some(lower) => op.apply(lower.as_slice(), out),
        None => Ok(()),
    }
}

/// A fold's partial result: a rank's values as they lie in its part,
/// until an operation writes it (one copy fewer), then values of its own.
enum Fold<'v, T: Copy + 'static> {
    Lying(&'v [T]),
    Kept(Values<T>),
}

impl<T: Copy + 'static> Fold<'_, T> {
    fn as_slice(&self) -> &[T] {
        match self {
            Fold::Lying(values) => values,
            Fold::Kept(values) => values,
        }
    }

    fn to_mut(&mut self) -> &mut [T] {
        if let Fold::Lying(values) = self {
            *self = Fold::Kept(Values::copy_of(values));
        }
        match self {
            Fold::Kept(values) => values,
            Fold::Lying(_) => unreachable!("made its own above"),
        }
    }
}

/// Combines the values of every one of `n` ranks (rank `r`'s:
/// `values(r)`) into `out` in the binomial pattern in rank order (see
/// [`subtree`]).
fn combine_tree<'v, T: MpiType>(op: &Op<T>, n: usize, values: &dyn Fn(usize) -> &'v [T], out: &mut [T]) -> Result<()> {
    subtree(op, (n, values), 0, n.next_power_of_two(), out)
}

/// The partial result of the ranks from `r` in a subtree of `width`
/// ranks, into `into`: the left half's result `∘` the right half's,
/// halving down to single ranks' values (a half beyond the last rank
/// left out). This is what the binomial tree to rank 0 computes at rank
/// `r` (rank `r`'s values, then for each `mask` below `width` the partial
/// result of the `mask` ranks from `r + mask` on the right), and what
/// recursive doubling computes everywhere on a power of two. The right
/// half goes into `into` first and the left is applied to it (`into =
/// left ∘ into`), so a left half of one rank is used where it lies: 2
/// ranks copy one rank's values and apply the other's, with no scratch.
fn subtree<'v, T: MpiType>(op: &Op<T>, values: (usize, &dyn Fn(usize) -> &'v [T]), r: usize, width: usize, into: &mut [T]) -> Result<()> {
    let (n, value) = values;
    let half = width / 2;
    if half == 0 {
        crate::pack::copy::copy_slice(into, value(r));
        return Ok(());
    }
    if r + half >= n {
        // No rank in the right half.
        return subtree(op, values, r, half, into);
    }
    subtree(op, values, r + half, half, into)?;
    if half == 1 {
        return op.apply(value(r), into);
    }
    let mut left = Scratch::from_slice(into);
    subtree(op, values, r, half, &mut left)?;
    op.apply(&left, into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::SUM;

    /// Every built-in operation's number in a part's kind names it again.
    #[test]
    fn allreduce_kinds_name_their_operation() {
        // Every variant is listed (a new one fails to build here first).
        for b in BUILTINS {
            use Builtin::*;
            match b {
                Sum | Prod | Min | Max | Land | Lor | Lxor | Band | Bor | Bxor | MinLoc | MaxLoc => {}
            }
        }
        for (i, &b) in BUILTINS.iter().enumerate() {
            assert_eq!(b as usize, i);
            for two_rounds in [false, true] {
                assert_eq!(allreduce_kind_parts(allreduce_kind(two_rounds, Some(b))), (two_rounds, Some(b)));
            }
        }
        assert_eq!(allreduce_kind_parts(allreduce_kind(true, None)), (true, None));
    }

    /// For every rank count, the tree groups and orders operands as the
    /// binomial tree to rank 0 does at its root (rank `r`'s values, then
    /// for each `mask` the subtree of `mask` ranks from `r + mask` on the
    /// right): checked with an operation that neither commutes nor
    /// associates, so any other grouping or order shows.
    #[test]
    fn the_tree_keeps_the_binomial_pattern_for_every_rank_count() {
        fn mix(a: u64, b: u64) -> u64 {
            a.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ b.wrapping_add(0x5555)
        }
        fn binomial(values: &[u64], r: usize, width: usize) -> u64 {
            let mut acc = values[r];
            let mut mask = 1;
            while mask < width && r + mask < values.len() {
                acc = mix(acc, binomial(values, r + mask, mask));
                mask <<= 1;
            }
            acc
        }
        let op = Op::user(|a: &[u64], b: &mut [u64]| b.iter_mut().zip(a).for_each(|(b, a)| *b = mix(*a, *b)), false);
        for n in 1..=17usize {
            let values: Vec<u64> = (0..n as u64).map(|r| r * 1_000_003 + 7).collect();
            let cows: Vec<Cow<'_, [u64]>> = values.iter().map(|v| Cow::Owned(vec![*v])).collect();
            let mut out = [0u64];
            combine_tree(&op, cows.len(), &|r| &cows[r], &mut out).unwrap();
            assert_eq!(out[0], binomial(&values, 0, n.next_power_of_two()), "{n} ranks");
        }
    }

    /// The pattern is the binomial tree's: on 4 ranks `(a∘b)∘(c∘d)`, on 3
    /// `(a∘b)∘c`, on 6 `((a∘b)∘(c∘d))∘(e∘f)`; checked with values whose
    /// float sum depends on the grouping.
    #[test]
    fn reductions_group_as_the_binomial_tree() {
        let sum = |values: &[f64]| {
            let values: Vec<Cow<'_, [f64]>> = values.iter().map(|v| Cow::Owned(vec![*v])).collect();
            let mut out = [0.0];
            combine_tree(&SUM.into(), values.len(), &|r| &values[r], &mut out).unwrap();
            out[0]
        };
        let (a, b, c, d, e, f) = (1e16, 1.0, -1e16, 1.0, 3.0, 1e-3);
        assert_eq!(sum(&[a, b, c, d]).to_bits(), ((a + b) + (c + d)).to_bits());
        assert_eq!(sum(&[a, b, c]).to_bits(), ((a + b) + c).to_bits());
        assert_eq!(sum(&[a, b, c, d, e, f]).to_bits(), (((a + b) + (c + d)) + (e + f)).to_bits());
        assert_eq!(sum(&[a, b, c, d, e, f, b]).to_bits(), (((a + b) + (c + d)) + ((e + f) + b)).to_bits());
        assert_ne!(((a + b) + (c + d)).to_bits(), (((a + b) + c) + d).to_bits(), "the grouping shows in the bits");
    }
}
