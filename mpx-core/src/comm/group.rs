//! Groups of ranks ([`Group`], MPI's `MPI_Group` and its set operations)
//! and the communicators made from them: [`Comm::split`] and
//! [`Comm::create`].
//!
//! A communicator other than the world (or a `dup` of it) holds its
//! members' world ranks; its operations take and report ranks in its own
//! numbering, and it has a matching context of its own, so its messages
//! never meet its parent's.
//!
//! Every communicator but the world has entries in its endpoint's state
//! (its members by context, for a communicator over a subgroup) and its
//! collectives' state (their count, its hold on a meeting place), shared
//! by its handles through a [`Registration`]: the last handle to go (or a
//! receive started on it, once complete) removes them, so a program that
//! makes and drops communicators in a loop keeps that state bounded.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, TryLockError};

use super::{derive_context, Comm};
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::{CommCollectives, Shared};

/// An ordered set of ranks, each named by its rank in the world: what a
/// communicator is over. Made from a communicator ([`Comm::group`]) and
/// from other groups by MPI's operations; [`Comm::create`] turns one into
/// a communicator.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(4, |comm| async move {
/// let world = comm.group();
/// let evens = world.incl(&[0, 2])?;
/// let low = world.incl(&[0, 1])?;
/// assert_eq!(evens.union(&low).ranks(), [0, 2, 1]);
/// assert_eq!(evens.intersection(&low).ranks(), [0]);
/// assert_eq!(world.difference(&evens).ranks(), [1, 3]);
/// assert_eq!(world.translate_ranks(&[2, 3], &evens)?, [Some(1), None]);
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    /// The members' world ranks, in group order.
    pub(super) world: Arc<[u32]>,
}

/// How two groups compare (`MPI_Group_compare`).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(3, |comm| async move {
/// use mpx::GroupRelation;
/// // The same ranks, numbered backwards.
/// let reversed = comm.split(Some(0), -(comm.rank() as i32)).await?.expect("a color");
/// assert_eq!(reversed.group().compare(&comm.group()), GroupRelation::Similar);
/// assert_eq!(comm.dup().group().compare(&comm.group()), GroupRelation::Identical);
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRelation {
    /// The same members in the same order (`MPI_IDENT`).
    Identical,
    /// The same members in another order (`MPI_SIMILAR`).
    Similar,
    /// Other members (`MPI_UNEQUAL`).
    Unequal,
}

/// How two communicators compare (`MPI_Comm_compare`, see
/// [`Comm::compare`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(3, |comm| async move {
/// use mpx::CommRelation;
/// assert_eq!(comm.compare(&comm.clone()), CommRelation::Identical);
/// assert_eq!(comm.compare(&comm.dup()), CommRelation::Congruent);
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommRelation {
    /// Handles of one communicator: the same members in the same order,
    /// and the same context (`MPI_IDENT`).
    Identical,
    /// The same members in the same order, with another context: a `dup`,
    /// or a split or `create` that keeps every member in place
    /// (`MPI_CONGRUENT`).
    Congruent,
    /// The same members in another order (`MPI_SIMILAR`).
    Similar,
    /// Other members (`MPI_UNEQUAL`).
    Unequal,
}

impl Group {
    fn of(world: Vec<u32>) -> Group {
        Group { world: world.into() }
    }

    /// The members' world ranks, in group order.
    pub(crate) fn world_ranks(&self) -> Arc<[u32]> {
        self.world.clone()
    }

    /// Number of members.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let world = comm.group();
    /// assert_eq!(world.size(), comm.size());
    /// assert_eq!(world.excl(&[0])?.size(), 2);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn size(&self) -> usize {
        self.world.len()
    }

    /// The members' world ranks, in group order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let world = comm.group();
    /// assert_eq!(world.ranks(), [0, 1, 2, 3]);
    /// // World ranks, whatever a member's rank in the group.
    /// assert_eq!(world.excl(&[1])?.incl(&[2, 0])?.ranks(), [3, 0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn ranks(&self) -> Vec<usize> {
        self.world.iter().map(|&w| w as usize).collect()
    }

    /// The group rank of world rank `world`, if it is a member.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let backwards = comm.group().incl(&[3, 2, 1])?;
    /// assert_eq!(backwards.rank_of_world(3), Some(0));
    /// assert_eq!(backwards.rank_of_world(1), Some(2));
    /// assert_eq!(backwards.rank_of_world(0), None); // not a member
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn rank_of_world(&self, world: usize) -> Option<usize> {
        self.world.iter().position(|&w| w as usize == world)
    }

    fn member(&self, r: usize) -> Result<u32> {
        self.world.get(r).copied().ok_or_else(|| ErrorKind::InvalidRank { rank: r, size: self.size() }.into())
    }

    /// `MPI_Group_incl`: the members at `ranks` (this group's ranks), in
    /// that order; a rank out of range or named twice is an error.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let world = comm.group();
    /// let picked = world.incl(&[3, 0])?;
    /// assert_eq!(picked.ranks(), [3, 0]); // in the order named
    /// assert_eq!(picked.incl(&[0])?.ranks(), [3]); // `picked`'s rank 0
    /// assert!(world.incl(&[1, 1]).is_err(), "named twice");
    /// assert!(world.incl(&[4]).is_err(), "no rank 4");
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn incl(&self, ranks: &[usize]) -> Result<Group> {
        let mut seen = vec![false; self.size()];
        let mut world = Vec::with_capacity(ranks.len());
        for &r in ranks {
            let w = self.member(r)?;
            if std::mem::replace(&mut seen[r], true) {
                return Err(ErrorKind::InvalidArgument(format!("rank {r} is named twice")).into());
            }
            world.push(w);
        }
        Ok(Group::of(world))
    }

    /// `MPI_Group_excl`: the members not at `ranks`, in this group's order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let workers = comm.group().excl(&[0])?;
    /// assert_eq!(workers.ranks(), [1, 2, 3]);
    /// // `workers`' ranks 0 and 2 are world ranks 1 and 3.
    /// assert_eq!(workers.excl(&[0, 2])?.ranks(), [2]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn excl(&self, ranks: &[usize]) -> Result<Group> {
        let mut out = vec![false; self.size()];
        for &r in ranks {
            self.member(r)?;
            if std::mem::replace(&mut out[r], true) {
                return Err(ErrorKind::InvalidArgument(format!("rank {r} is named twice")).into());
            }
        }
        Ok(Group::of(self.world.iter().zip(&out).filter(|(_, &o)| !o).map(|(&w, _)| w).collect()))
    }

    /// `MPI_Group_range_incl`: the members at the ranks `ranges` name, in
    /// order. Each triplet `(first, last, stride)` names `first`,
    /// `first + stride`, `first + 2 * stride`, ... as far as `last` (which
    /// is named only if a step lands on it); a negative stride counts
    /// down. As for [`incl`](Group::incl), a rank out of range or named
    /// twice (by one triplet or by two) is an error, and so are a stride of
    /// 0 and a triplet whose stride leads away from its last rank. Every
    /// triplet is checked before any rank is listed: a triplet that would
    /// name more ranks than the group has fails without listing them.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(6, |comm| async move {
    /// let world = comm.group();
    /// // The even ranks up, then the odd ranks down.
    /// let zigzag = world.range_incl(&[(0, 4, 2), (5, 1, -2)])?;
    /// assert_eq!(zigzag.ranks(), [0, 2, 4, 5, 3, 1]);
    /// // Rank 5 is not on the way from 1 by steps of 3.
    /// assert_eq!(world.range_incl(&[(1, 5, 3)])?, world.incl(&[1, 4])?);
    /// assert!(world.range_incl(&[(0, 3, 0)]).is_err(), "a stride of 0");
    /// assert!(world.range_incl(&[(3, 0, 1)]).is_err(), "away from rank 0");
    /// assert!(world.range_incl(&[(0, 3, 1), (3, 5, 1)]).is_err(), "rank 3 twice");
    /// assert!(world.range_incl(&[(4, 7, 1)]).is_err(), "past the last rank, 5");
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn range_incl(&self, ranges: &[(usize, usize, isize)]) -> Result<Group> {
        self.incl(&self.expand(ranges)?)
    }

    /// `MPI_Group_range_excl`: the members not at the ranks `ranges` name
    /// (triplets as for [`range_incl`](Group::range_incl), with the same
    /// errors: each rank named once at most), in this group's order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(6, |comm| async move {
    /// let world = comm.group();
    /// assert_eq!(world.range_excl(&[(0, 4, 2)])?.ranks(), [1, 3, 5]);
    /// assert_eq!(world.range_excl(&[(5, 3, -1), (0, 0, 1)])?.ranks(), [1, 2]);
    /// assert_eq!(world.range_excl(&[])?, world);
    /// assert!(world.range_excl(&[(0, 2, 1), (2, 2, 1)]).is_err(), "rank 2 twice");
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn range_excl(&self, ranges: &[(usize, usize, isize)]) -> Result<Group> {
        self.excl(&self.expand(ranges)?)
    }

    /// The ranks `ranges`' triplets name, in order (see
    /// [`range_incl`](Group::range_incl)). Every triplet is checked, and
    /// the ranks they name counted, before any is listed: more ranks in all
    /// than the group has means some are named twice, an error.
    fn expand(&self, ranges: &[(usize, usize, isize)]) -> Result<Vec<usize>> {
        let size = self.size();
        let mut total = 0usize;
        let mut checked = Vec::with_capacity(ranges.len().min(size));
        for &triplet in ranges {
            let (step, count) = self.triplet(triplet)?;
            total = total.saturating_add(count);
            if total > size {
                return Err(ErrorKind::InvalidArgument(format!("the triplets name more ranks than the group's {size}: some are named twice")).into());
            }
            checked.push((triplet.0, triplet.2 > 0, step, count));
        }
        let mut ranks = Vec::with_capacity(total);
        for (first, up, step, count) in checked {
            // Each rank lies between `first` and the last rank named, both
            // checked by `triplet`: neither sum nor difference overflows.
            ranks.extend((0..count).map(|k| if up { first + k * step } else { first - k * step }));
        }
        Ok(ranks)
    }

    /// A triplet `(first, last, stride)`, checked: the size of its stride
    /// and how many ranks it names (at most the group's size). Its first
    /// and its last rank named must be members; so, then, are those in
    /// between.
    fn triplet(&self, (first, last, stride): (usize, usize, isize)) -> Result<(usize, usize)> {
        let wrong = |why: &str| -> Error { ErrorKind::InvalidArgument(format!("the triplet ({first}, {last}, {stride}) {why}")).into() };
        if stride == 0 {
            return Err(wrong("has a stride of 0"));
        }
        if (first < last && stride < 0) || (first > last && stride > 0) {
            return Err(wrong("steps away from its last rank"));
        }
        let step = stride.unsigned_abs();
        // From `first` to the last rank a step lands on, without passing
        // `last`: within `first..=last` (or `last..=first`).
        let span = first.abs_diff(last) / step * step;
        let end = if stride > 0 { first + span } else { first - span };
        self.member(first)?;
        self.member(end)?;
        // `span` < the group's size, as `end` (or `first`) is a member.
        Ok((step, span / step + 1))
    }

    /// `MPI_Group_union`: this group's members, then `other`'s that are
    /// not among them.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let world = comm.group();
    /// let (a, b) = (world.incl(&[2, 0])?, world.incl(&[1, 2])?);
    /// assert_eq!(a.union(&b).ranks(), [2, 0, 1]);
    /// assert_eq!(b.union(&a).ranks(), [1, 2, 0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn union(&self, other: &Group) -> Group {
        let mine = self.members();
        let mut world = self.world.to_vec();
        world.extend(other.world.iter().filter(|w| !mine.contains(w)));
        Group::of(world)
    }

    /// `MPI_Group_intersection`: this group's members that are in `other`,
    /// in this group's order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let world = comm.group();
    /// let (a, b) = (world.incl(&[3, 2, 1])?, world.incl(&[1, 2])?);
    /// assert_eq!(a.intersection(&b).ranks(), [2, 1]);
    /// assert_eq!(b.intersection(&a).ranks(), [1, 2]);
    /// assert_eq!(a.intersection(&world.incl(&[0])?).size(), 0);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn intersection(&self, other: &Group) -> Group {
        let theirs = other.members();
        Group::of(self.world.iter().copied().filter(|w| theirs.contains(w)).collect())
    }

    /// `MPI_Group_difference`: this group's members that are not in
    /// `other`, in this group's order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let world = comm.group();
    /// let odd = world.incl(&[3, 1])?;
    /// assert_eq!(world.difference(&odd).ranks(), [0, 2]);
    /// assert_eq!(odd.difference(&world).size(), 0);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn difference(&self, other: &Group) -> Group {
        let theirs = other.members();
        Group::of(self.world.iter().copied().filter(|w| !theirs.contains(w)).collect())
    }

    /// The members' world ranks, as a set: the set operations look each
    /// rank up in it, in time that does not grow with the group.
    fn members(&self) -> std::collections::HashSet<u32> {
        self.world.iter().copied().collect()
    }

    /// `MPI_Group_translate_ranks`: the rank in `other` of each of this
    /// group's `ranks` (`None` where it is not a member: `MPI_UNDEFINED`).
    /// MPI also takes `MPI_PROC_NULL`, which it translates to itself; here
    /// `ranks` are ranks only (a rank beyond the group is
    /// [`ErrorKind::InvalidRank`](crate::ErrorKind::InvalidRank)), and
    /// [`Peer::Null`](crate::Peer::Null) needs no translation.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let world = comm.group();
    /// let backwards = world.incl(&[3, 2, 1, 0])?;
    /// assert_eq!(world.translate_ranks(&[0, 1], &backwards)?, [Some(3), Some(2)]);
    /// assert_eq!(backwards.translate_ranks(&[0], &world)?, [Some(3)]);
    /// assert_eq!(world.translate_ranks(&[0], &world.excl(&[0])?)?, [None]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn translate_ranks(&self, ranks: &[usize], other: &Group) -> Result<Vec<Option<usize>>> {
        // A few ranks are looked up where they stand; more, in a map of
        // `other`'s members made once.
        if ranks.len() <= 8 {
            return ranks.iter().map(|&r| Ok(other.rank_of_world(self.member(r)? as usize))).collect();
        }
        let theirs: HashMap<u32, usize> = other.world.iter().enumerate().map(|(rank, &w)| (w, rank)).collect();
        ranks.iter().map(|&r| Ok(theirs.get(&self.member(r)?).copied())).collect()
    }

    /// `MPI_Group_compare`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// use mpx::GroupRelation;
    /// let world = comm.group();
    /// assert_eq!(world.compare(&world.incl(&[0, 1, 2])?), GroupRelation::Identical);
    /// assert_eq!(world.compare(&world.incl(&[2, 0, 1])?), GroupRelation::Similar);
    /// assert_eq!(world.compare(&world.excl(&[1])?), GroupRelation::Unequal);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn compare(&self, other: &Group) -> GroupRelation {
        if self.world == other.world {
            return GroupRelation::Identical;
        }
        let (mut a, mut b) = (self.world.to_vec(), other.world.to_vec());
        a.sort_unstable();
        b.sort_unstable();
        if a == b {
            GroupRelation::Similar
        } else {
            GroupRelation::Unequal
        }
    }
}

/// A communicator's members, as its operations need them: world ranks by
/// communicator rank and back, and this process's own rank.
#[derive(Debug)]
pub(crate) struct Members {
    pub(crate) group: Group,
    pub(crate) rank: u32,
    by_world: HashMap<u32, u32>,
}

impl Members {
    fn new(group: Group, me_world: u32) -> Option<Members> {
        let rank = group.rank_of_world(me_world as usize)? as u32;
        let by_world = group.world.iter().enumerate().map(|(r, &w)| (w, r as u32)).collect();
        Some(Members { group, rank, by_world })
    }

    /// The communicator rank of world rank `world` (a sender not in the
    /// communicator cannot have sent on its context; it keeps its number).
    pub(crate) fn rank_of_sender(&self, world: u32) -> u32 {
        self.by_world.get(&world).copied().unwrap_or(world)
    }
}

/// A communicator's entries in its endpoint's state, for every
/// communicator but the world: its members under its context and its
/// collective context (a communicator over a subgroup); and its
/// collectives' state (their count, where they meet), which goes with it.
///
/// Every handle of the communicator shares one, and so does everything
/// that holds a handle (a collective in flight, a matched probe's
/// [`Message`](super::Message), an [`Incoming`](super::Incoming) stream,
/// a persistent request, a [`Cart`](crate::coll::Cart)); the last of them
/// to go removes the entries.
pub(crate) struct Registration {
    shared: Arc<Shared>,
    context: u64,
    pub(crate) collectives: CommCollectives,
}

impl Drop for Registration {
    /// Removes the entries at once if the endpoint's lock is free.
    /// Otherwise they wait in the endpoint's list of retired contexts for
    /// the lock's next hold ([`Shared::retire`]): the lock may be held
    /// by another thread, or by this one, which must not wait for it (a
    /// task's waker, dropped under the lock, can be the last owner of the
    /// task's future and so of a handle). The collectives' state goes at
    /// once either way: its hold on a meeting place takes only the meeting
    /// place's own locks, which nothing holds while it takes another.
    fn drop(&mut self) {
        let mut locked = match self.shared.state.try_lock() {
            Ok(locked) => locked,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.shared.retire(self.context);
                return;
            }
        };
        // Taken without `Shared::lock`: what waits in the list goes too.
        let st = &mut *locked;
        self.shared.sweep_retired(st);
        st.forget_communicator(self.context);
        // Not flushed under this bare guard (its release wakes nothing
        // and hands nothing to the transport): at the next hold.
        if st.engine.has_output() {
            self.shared.flush_at_next_hold();
        }
    }
}

/// A digest of `group`'s members in order, which ranks compare to tell
/// whether they passed the same group: its size and each member in turn,
/// mixed into 64 bits, so that two groups share one only by chance.
fn digest(group: &Group) -> u64 {
    let size = group.world.len() as u64;
    group.world.iter().fold(derive_context(0x6372_6561_7465_0000, size), |h, &w| derive_context(h, u64::from(w)))
}

/// Checks that every member of a new communicator (`(rank, number)`: its
/// rank here and the number it gave the call) numbered the call as this
/// rank did (`number`). A communicator's `dup`, `split`, `create`,
/// `cart_create` and `sub` calls are numbered by one counter, which makes
/// the new context without messages; ranks that made another count of
/// them before this one (a `dup` on one rank only) would get contexts that
/// differ, and everything on the new communicator would wait for ever.
fn agree_on_number(members: impl Iterator<Item = (usize, u64)>, number: u64, call: &str) -> Result<()> {
    for (rank, theirs) in members {
        if theirs != number {
            let detail = format!(
                "it had made {theirs} communicators from this one (dup, split, create, cart_create or sub) before this {call}, this rank {number}: every member must make them in the same order"
            );
            return Err(ErrorKind::CollectiveMismatch { rank, detail }.into());
        }
    }
    Ok(())
}

impl Comm {
    /// `MPI_Comm_group`: the communicator's members.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// assert_eq!(comm.group().ranks(), [0, 1, 2]);
    /// // Rank 0 alone, ranks 1 and 2 together: members named by world rank.
    /// let sub = comm.split(Some((comm.rank() > 0) as u32), 0).await?.expect("a color");
    /// let expected: &[usize] = if comm.rank() == 0 { &[0] } else { &[1, 2] };
    /// assert_eq!(sub.group().ranks(), expected);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn group(&self) -> Group {
        match &self.members {
            Some(m) => m.group.clone(),
            None => Group::of((0..self.shared.size).collect()),
        }
    }

    /// `MPI_Comm_compare`: local, no messages.
    /// [`Identical`](CommRelation::Identical) for two handles of one
    /// communicator (clones, on this rank's endpoint);
    /// [`Congruent`](CommRelation::Congruent) for communicators over the
    /// same members in the same order with contexts of their own (a `dup`);
    /// otherwise their groups decide, as [`Group::compare`] does:
    /// [`Similar`](CommRelation::Similar) for the same members in another
    /// order, [`Unequal`](CommRelation::Unequal) for other members.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// use mpx::CommRelation;
    /// let me = comm.rank();
    /// assert_eq!(comm.compare(&comm.clone()), CommRelation::Identical);
    /// assert_eq!(comm.compare(&comm.dup()), CommRelation::Congruent);
    /// let backwards = comm.split(Some(0), -(me as i32)).await?.expect("a color");
    /// assert_eq!(backwards.compare(&comm), CommRelation::Similar);
    /// let half = comm.split(Some((me / 2) as u32), 0).await?.expect("a color");
    /// assert_eq!(half.compare(&comm), CommRelation::Unequal);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn compare(&self, other: &Comm) -> CommRelation {
        match self.group().compare(&other.group()) {
            GroupRelation::Identical if Arc::ptr_eq(&self.shared, &other.shared) && self.context == other.context => CommRelation::Identical,
            GroupRelation::Identical => CommRelation::Congruent,
            GroupRelation::Similar => CommRelation::Similar,
            GroupRelation::Unequal => CommRelation::Unequal,
        }
    }

    /// A communicator over `group` with a context of this one's, derived
    /// from the `number` taken from its counter when the constructor was
    /// called (so that every rank numbers its constructors in call order)
    /// and `salt`; `None` if `group` does not hold this rank.
    fn derive(&self, number: u64, group: Group, salt: u64) -> Option<Comm> {
        let context = derive_context(derive_context(self.context, number), salt);
        let members = Arc::new(Members::new(group, self.shared.rank)?);
        Some(self.register(context, Some(members)))
    }

    /// A new communicator over this one's endpoint with `context` and
    /// `members` (`None`: the world's ranks as they are), its members
    /// entered in the endpoint's state so that the statuses of its
    /// receives name senders in its numbering. Its last handle removes
    /// its entries (see [`Registration`]).
    pub(super) fn register(&self, context: u64, members: Option<Arc<Members>>) -> Comm {
        if let Some(m) = &members {
            let mut st = self.shared.lock();
            st.groups.insert(context, m.clone());
            st.groups.insert(context | 1, m.clone());
            // Its any-source receives fail once its members are gone.
            st.engine.set_members(context, m.group.world.clone());
            st.engine.set_members(context | 1, m.group.world.clone());
        }
        let registration = Some(Arc::new(Registration { shared: self.shared.clone(), context, collectives: CommCollectives::default() }));
        Comm { shared: self.shared.clone(), context, dups: Arc::new(AtomicU64::new(0)), members, registration }
    }

    /// This communicator's rank of world rank `world`, if it is a member.
    fn member_rank(&self, world: u32) -> Option<usize> {
        match &self.members {
            Some(m) => m.by_world.get(&world).map(|&r| r as usize),
            None => (world < self.shared.size).then_some(world as usize),
        }
    }

    /// `MPI_Comm_split`: collective over this communicator. Ranks that give
    /// the same `color` form a new communicator, ordered by `key` (ties by
    /// their rank here); each gets its own (`None` for a rank that gives no
    /// color: `MPI_UNDEFINED`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// // Rows of a 2x2 grid, numbered right to left.
    /// let row = comm.split(Some((comm.rank() / 2) as u32), -(comm.rank() as i32)).await?.expect("a color");
    /// assert_eq!((row.size(), row.rank()), (2, 1 - comm.rank() % 2));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe: it is a collective (an allgather of the colors and
    /// keys), with its rules (see [`crate::coll`]).
    pub fn split(&self, color: Option<u32>, key: i32) -> impl Future<Output = Result<Option<Comm>>> + Send + 'static {
        let comm = self.clone();
        // Numbered now, in the order of the calls; the number goes into
        // the new context, and with the color and key to every rank, so
        // that ranks which numbered it differently fail rather than make
        // communicators whose contexts differ (see `agree_on_number`).
        let number = self.dups.fetch_add(1, Ordering::Relaxed);
        let mine = [color.map_or(-1, i64::from), i64::from(key), number as i64];
        let gathered = self.allgather_owned(mine);
        async move {
            let all = gathered.await?;
            let Some(color) = color else { return Ok(None) };
            let same_color = all.iter().enumerate().filter(|(_, ck)| ck[0] == i64::from(color));
            agree_on_number(same_color.clone().map(|(r, ck)| (r, ck[2] as u64)), number, "split")?;
            let parent = comm.group();
            let mut chosen: Vec<(i64, usize)> = same_color.map(|(r, ck)| (ck[1], r)).collect();
            chosen.sort_unstable();
            let world = chosen.iter().map(|&(_, r)| parent.world[r]).collect();
            Ok(comm.derive(number, Group::of(world), u64::from(color) + 1))
        }
    }

    /// A `split` this rank cannot take part in (its arguments are wrong):
    /// numbered and refused as the split's allgather would be, so that the
    /// other ranks fail it rather than wait; returns `e`.
    pub(crate) fn refuse_split(&self, e: Error) -> Error {
        let e = self.refuse_collective(e);
        self.dups.fetch_add(1, Ordering::Relaxed);
        e
    }

    /// `MPI_Comm_create`: collective over this communicator (every rank
    /// calls it), each rank passing a group of this communicator's ranks.
    /// A rank in the group it passes gets a communicator over that group,
    /// numbered in the group's order; a rank not in it, or passing the
    /// empty group, gets `None`. Ranks may pass different groups, as long
    /// as every member of a group passes that same group (the same ranks
    /// in the same order): disjoint groups made in one call are each a
    /// communicator, each with a context of its own.
    ///
    /// Each rank checks the group it passed against what its members
    /// passed: it fails with [`ErrorKind::CollectiveMismatch`], naming that
    /// member, if a member of its group passed another group (the empty
    /// group among them, or the same ranks in another order). Whatever
    /// ranks outside its group pass changes nothing for it. So
    /// when the members of a group disagree, every one of them that passed
    /// it fails, and so does every rank outside it that named it; a rank
    /// whose own group its members all passed carries on. A group with a
    /// rank outside this communicator is [`ErrorKind::InvalidArgument`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let (world, me) = (comm.group(), comm.rank());
    /// // Two pairs in one call, each numbered backwards.
    /// let pair = if me < 2 { world.incl(&[1, 0])? } else { world.incl(&[3, 2])? };
    /// let sub = comm.create(&pair).await?.expect("a member of its pair");
    /// assert_eq!((sub.size(), sub.rank()), (2, 1 - me % 2));
    /// // Rank 0 passes the empty group, rank 2 the odd ranks' group without
    /// // being in it: both get `None`.
    /// let odd = world.incl(&[1, 3])?;
    /// let mine = if me == 0 { world.incl(&[])? } else { odd };
    /// assert_eq!(comm.create(&mine).await?.map(|c| c.rank()), [None, Some(0), None, Some(1)][me]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`split`](Comm::split)).
    pub fn create(&self, group: &Group) -> impl Future<Output = Result<Option<Comm>>> + Send + 'static {
        let comm = self.clone();
        let group = group.clone();
        // Every rank's digest of its group, gathered from every rank
        // (started now, and numbered now): each checks its group's
        // members' digests against its own. The digest also goes into the
        // new context, so that groups made in one call get contexts of
        // their own, on which their members agree.
        let mine = digest(&group);
        // Numbered as a split is (see `agree_on_number`).
        let number = self.dups.fetch_add(1, Ordering::Relaxed);
        let gathered = self.allgather_owned([mine, number]);
        async move {
            let digests = gathered.await?;
            let mut differs = None;
            let mut members = Vec::with_capacity(group.size());
            for &w in group.world.iter() {
                let Some(r) = comm.member_rank(w) else {
                    return Err(ErrorKind::InvalidArgument(format!("world rank {w} of the group is not in the communicator")).into());
                };
                if differs.is_none() && digests[r][0] != mine {
                    differs = Some(r);
                }
                members.push(r);
            }
            if let Some(rank) = differs {
                let detail = format!("it is a member of the group this rank passed to create ({} ranks) but passed another group", group.size());
                return Err(ErrorKind::CollectiveMismatch { rank, detail }.into());
            }
            agree_on_number(members.into_iter().map(|r| (r, digests[r][1])), number, "create")?;
            Ok(comm.derive(number, group, mine))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashSet;

    use super::{digest, Group};
    use crate::comm::Comm;
    use crate::proto::engine::Config;
    use crate::proto::wire::Frame;
    use crate::runtime::{Endpoint, LocalWorld, SendError, Transport};
    use std::sync::Arc;

    /// The transport of a world of one rank, which has no peer to carry
    /// frames to.
    struct Alone;

    impl Transport for Alone {
        fn send(&self, _dest: usize, _frame: Frame) -> Result<(), SendError> {
            Ok(())
        }
    }

    /// The world communicator of a world of one rank.
    pub(crate) fn alone() -> Comm {
        Endpoint::new(0, 1, Config::default(), Alone).expect("a world of one rank").world()
    }

    /// The endpoint's entries for communicators: members by context.
    fn kept(comm: &Comm) -> usize {
        comm.shared.lock().groups.len()
    }

    /// A transport for one rank whose collectives meet in this process.
    struct AloneMeeting(Arc<LocalWorld>);

    impl Transport for AloneMeeting {
        fn send(&self, _dest: usize, _frame: Frame) -> Result<(), SendError> {
            Ok(())
        }

        fn local_world(&self) -> Option<Arc<LocalWorld>> {
            Some(self.0.clone())
        }
    }

    /// Handles of one communicator number their collective calls in one
    /// sequence (every handle of the world too, however it was got);
    /// another communicator has its own.
    #[test]
    fn handles_of_a_communicator_share_its_call_numbers() {
        let endpoint = Endpoint::new(0, 1, Config::default(), Alone).expect("a world of one rank");
        let (a, b) = (endpoint.world(), endpoint.world());
        let c = a.clone();
        let numbers: Vec<u32> = [&a, &b, &c, &a].into_iter().map(|comm| crate::coll::Call::begin(comm).number()).collect();
        assert_eq!(numbers, [0, 1, 2, 3]);
        let dup = a.dup();
        let twin = dup.clone();
        let numbers: Vec<u32> = [&dup, &twin, &dup].into_iter().map(|comm| crate::coll::Call::begin(comm).number()).collect();
        assert_eq!(numbers, [0, 1, 2], "a communicator of its own numbers from 0");
        assert_eq!(crate::coll::Call::begin(&b).number(), 4);
    }

    /// A communicator's hold on its meeting place goes with its last
    /// handle, also when that goes under its endpoint's lock (which must
    /// not deadlock), while the endpoint's entries wait for later.
    #[test]
    fn a_meeting_place_goes_with_the_last_handle_even_under_the_lock() {
        futures::executor::block_on(async {
            let place = LocalWorld::new(1);
            let world = Endpoint::new(0, 1, Config::default(), AloneMeeting(place.clone())).expect("a world of one rank").world();
            world.barrier().await.expect("a barrier of one");
            let before = (kept(&world), place.meeting_places());
            let split = world.split(Some(0), 0).await.expect("a split of one").expect("a color");
            split.barrier().await.expect("a barrier of one");
            assert_eq!(place.meeting_places(), before.1 + 1, "the split meets in a place of its own");
            let held = world.shared.lock();
            drop(split);
            assert_eq!(place.meeting_places(), before.1, "its place went at once");
            assert_eq!(held.groups.len(), before.0 + 2, "its members wait for the lock's next hold");
            drop(held);
            assert_eq!((kept(&world), place.meeting_places()), before);
        });
    }

    /// A watch on `comm`'s registration (and so on its collectives'
    /// state): gone once every handle is.
    fn watch(comm: &Comm) -> std::sync::Weak<super::Registration> {
        std::sync::Arc::downgrade(comm.registration.as_ref().expect("not the world"))
    }

    /// Communicators made by every constructor, each running a collective,
    /// then dropped, ten thousand times over: the endpoint keeps nothing
    /// for them once they are gone, and a clone keeps a communicator's
    /// entries for as long as it lives.
    #[test]
    fn ten_thousand_dropped_communicators_leave_nothing_behind() {
        futures::executor::block_on(async {
            let world = alone();
            world.barrier().await.expect("a barrier of one");
            let before = kept(&world);
            let everyone = world.group();
            for _ in 0..10_000 {
                let split = world.split(Some(0), 0).await.expect("a split of one").expect("a color");
                let made = world.create(&everyone).await.expect("a create of one").expect("a member");
                let (twin, world_twin) = (split.dup(), world.dup());
                for comm in [&split, &made, &twin, &world_twin] {
                    comm.barrier().await.expect("a barrier of one");
                }
                let watches = [&split, &made, &twin, &world_twin].map(watch);
                // Members under two contexts for each of the three over a
                // subgroup.
                assert_eq!(kept(&world), before + 6);
                let clone = split.clone();
                drop(split);
                assert_eq!(kept(&world), before + 6, "a clone keeps the entries");
                assert!(watches.iter().all(|w| w.upgrade().is_some()), "a clone keeps its collectives' state");
                drop((clone, made, twin, world_twin));
                assert_eq!(kept(&world), before);
                assert!(watches.iter().all(|w| w.upgrade().is_none()), "the collectives' state goes with the last handle");
            }
        });
    }

    /// A communicator whose last handle goes while its endpoint's lock is
    /// held (here by the same thread) leaves its entries for the lock's
    /// next hold to remove, whatever takes it (before, only the next
    /// communicator constructor did: a program that made none kept them,
    /// and the late messages of their collectives held credit).
    #[test]
    fn a_communicator_dropped_under_the_lock_goes_at_the_next_hold_of_the_lock() {
        futures::executor::block_on(async {
            let world = alone();
            world.barrier().await.expect("a barrier of one");
            let before = kept(&world);
            let split = world.split(Some(0), 0).await.expect("a split of one").expect("a color");
            split.barrier().await.expect("a barrier of one");
            let held = world.shared.lock();
            drop(split);
            assert_eq!(held.groups.len(), before + 2, "left for later");
            drop(held);
            assert_eq!(kept(&world), before, "gone at the next hold");
        });
    }

    /// A receive started on a communicator whose last handle is dropped
    /// before the receive is taken still gets its message.
    #[test]
    fn a_receive_outliving_its_communicator_still_completes() {
        futures::executor::block_on(async {
            let world = alone();
            let split = world.split(Some(0), 0).await.expect("a split of one").expect("a color");
            let recv = split.recv::<u32>(0, 3);
            let sent = split.isend(&7u32, 0, 3);
            drop(split);
            let (got, status) = recv.await.expect("the message");
            assert_eq!((got, status.source, status.tag), (7, Some(0), Some(3)));
            sent.await.expect("sent to itself");
            assert_eq!(kept(&world), 0);
        });
    }

    /// A group with a rank outside the communicator is an argument error;
    /// the call is complete all the same, and the next one works.
    #[test]
    fn create_refuses_a_group_beyond_the_communicator() {
        futures::executor::block_on(async {
            let world = alone();
            let beyond = Group { world: vec![0, 5].into() };
            assert!(matches!(world.create(&beyond).await, Err(ref e) if matches!(e.kind(), crate::ErrorKind::InvalidArgument(_))));
            assert!(world.create(&world.group()).await.expect("a create of one").is_some());
        });
    }

    /// Digests tell groups apart by their members and by their order: no
    /// two of the groups of at most two of 300 ranks share one.
    #[test]
    fn group_digests_tell_members_and_orders_apart() {
        fn of(world: &[u32]) -> u64 {
            digest(&Group { world: world.into() })
        }
        assert_ne!(of(&[0, 1]), of(&[1, 0]));
        assert_ne!(of(&[]), of(&[0]));
        let mut seen = HashSet::new();
        assert!(seen.insert(of(&[])));
        for a in 0..300 {
            assert!(seen.insert(of(&[a])), "[{a}]");
            for b in (0..300).filter(|&b| b != a) {
                assert!(seen.insert(of(&[a, b])), "[{a}, {b}]");
            }
        }
    }
}
