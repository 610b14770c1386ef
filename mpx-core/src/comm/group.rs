//! Groups of ranks ([`Group`], MPI's `MPI_Group` and its set operations)
//! and the communicators made from them: [`Comm::split`] and
//! [`Comm::create`].
//!
//! A communicator other than the world (or a `dup` of it) holds its
//! members' world ranks; its operations take and report ranks in its own
//! numbering, and it has a matching context of its own, so its messages
//! never meet its parent's.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{derive_context, Comm};
use crate::error::{Error, Result};

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

impl Group {
    fn of(world: Vec<u32>) -> Group {
        Group { world: world.into() }
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
        self.world.get(r).copied().ok_or(Error::InvalidRank { rank: r, size: self.size() })
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
                return Err(Error::InvalidArgument(format!("rank {r} is named twice")));
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
                return Err(Error::InvalidArgument(format!("rank {r} is named twice")));
            }
        }
        Ok(Group::of(self.world.iter().zip(&out).filter(|(_, &o)| !o).map(|(&w, _)| w).collect()))
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
        let mut world = self.world.to_vec();
        world.extend(other.world.iter().filter(|w| !self.world.contains(w)));
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
        Group::of(self.world.iter().copied().filter(|w| other.world.contains(w)).collect())
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
        Group::of(self.world.iter().copied().filter(|w| !other.world.contains(w)).collect())
    }

    /// `MPI_Group_translate_ranks`: the rank in `other` of each of this
    /// group's `ranks` (`None` where it is not a member: `MPI_UNDEFINED`).
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
        ranks.iter().map(|&r| Ok(other.rank_of_world(self.member(r)? as usize))).collect()
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

    /// A communicator over `group` (which holds this rank) with a context
    /// derived from this one's next `dup` number and `salt`, registered so
    /// that the statuses of its receives name senders in its numbering.
    /// A communicator over `group` with a context of this one's, derived
    /// from the `number` taken from its counter when the constructor was
    /// called (so that every rank numbers its constructors in call order)
    /// and `salt`.
    fn derive(&self, number: u64, group: Group, salt: u64) -> Option<Comm> {
        let n = number;
        let context = derive_context(derive_context(self.context, n), salt);
        let members = Arc::new(Members::new(group, self.shared.rank)?);
        let mut st = self.shared.lock();
        st.groups.insert(context, members.clone());
        st.groups.insert(context | 1, members.clone());
        drop(st);
        Some(Comm { shared: self.shared.clone(), context, dups: Arc::new(AtomicU64::new(0)), members: Some(members) })
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
        let mine = [color.map_or(-1, i64::from), i64::from(key)];
        // Started now, and numbered now, in the order of the calls.
        let gathered = self.allgather_owned(mine);
        let number = self.dups.fetch_add(1, Ordering::Relaxed);
        async move {
            let all = gathered.await?;
            let Some(color) = color else { return Ok(None) };
            let parent = comm.group();
            let mut chosen: Vec<(i64, usize)> = all.iter().enumerate().filter(|(_, ck)| ck[0] == i64::from(color)).map(|(r, ck)| (ck[1], r)).collect();
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

    /// `MPI_Comm_create`: collective over this communicator, every rank
    /// passing the same `group` (a subgroup of this communicator's): its
    /// members get a communicator over it, the other ranks `None`. A rank
    /// whose `group` differs from the others' fails, and so do they.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let outer = comm.group().incl(&[2, 0])?;
    /// match comm.create(&outer).await? {
    ///     Some(sub) => assert_eq!(sub.rank(), if comm.rank() == 2 { 0 } else { 1 }),
    ///     None => assert_eq!(comm.rank(), 1),
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`split`](Comm::split)).
    pub fn create(&self, group: &Group) -> impl Future<Output = Result<Option<Comm>>> + Send + 'static {
        let comm = self.clone();
        let group = group.clone();
        let parent = self.group();
        let outside = group.world.iter().find(|w| !parent.world.contains(w)).copied();
        // Every rank must pass the same group: compare digests of it,
        // gathered from every rank (started now, and numbered now).
        let digest = group.world.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &w| (h ^ u64::from(w)).wrapping_mul(0x100_0000_01b3));
        let gathered = self.allgather_owned(digest);
        let number = self.dups.fetch_add(1, Ordering::Relaxed);
        async move {
            let digests = gathered.await?;
            if digests.iter().any(|&d| d != digest) {
                return Err(Error::InvalidArgument("the ranks passed different groups to create".into()));
            }
            if let Some(w) = outside {
                return Err(Error::InvalidArgument(format!("world rank {w} of the group is not in the communicator")));
            }
            if group.rank_of_world(comm.shared.rank as usize).is_none() {
                return Ok(None);
            }
            Ok(comm.derive(number, group, 0))
        }
    }
}
