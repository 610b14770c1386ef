//! Collectives that move data without combining it: `bcast`, `gather`,
//! `scatter`, `allgather`, `alltoall` and their `v` forms.

use std::future::Future;
use std::ops::Range;

use super::element::sealed::Blocks;
use super::local::Layout;
use super::{check_len, guarded, sent, sent_after, Call, CollMut, CollRef, Collective, Described, Element, Posted, Starting};
use crate::comm::{RecvBuf, SendBuf};
use crate::datatype::Datatype;
use crate::pack::disjoint::{check_parts, Access, Part};
use crate::pack::{Region, RegionMut};
use crate::comm::Comm;
use crate::error::{Error, ErrorKind, Result};
use crate::mpi_type::MpiType;
use crate::request::Request;

/// The binomial tree of `n` ranks rooted at `root`: `me`'s parent (`None`
/// at the root) and its children, largest subtree first.
pub(super) fn binomial(n: usize, root: usize, me: usize) -> (Option<usize>, Vec<usize>) {
    let relative = (me + n - root) % n;
    let mut mask = 1;
    let mut parent = None;
    while mask < n {
        if relative & mask != 0 {
            parent = Some((relative - mask + root) % n);
            break;
        }
        mask <<= 1;
    }
    let mut children = Vec::new();
    mask >>= 1;
    while mask > 0 {
        if relative + mask < n {
            children.push((relative + mask + root) % n);
        }
        mask >>= 1;
    }
    (parent, children)
}

/// A binomial broadcast under way: the receive from the parent, if any,
/// and the children to pass the data on to.
pub(super) struct Bcast {
    from_parent: Option<Posted>,
    children: Vec<usize>,
    sends: Vec<Request<'static>>,
}

impl Bcast {
    /// Posts this rank's part of a broadcast of `count` items of
    /// `datatype` from `root`; the root's `data`, when given, goes out now.
    pub(super) fn start<E: Element>(call: &Call, root: usize, count: usize, datatype: &Datatype, data: Option<&E::Dst<'_>>) -> Result<Bcast> {
        let (parent, children) = binomial(call.size(), root, call.rank());
        let from_parent = parent.map(|p| call.post_typed(p, count, datatype, 0)).transpose()?;
        let sends = match data {
            Some(values) if from_parent.is_none() => call.forward_items_to::<E>(values, 0..count, &children),
            _ => Vec::new(),
        };
        Ok(Bcast { from_parent, children, sends })
    }

    /// The rank this one takes the data from: its parent in the tree,
    /// `None` at the root.
    pub(super) fn parent(&self) -> Option<usize> {
        self.from_parent.as_ref().map(|posted| posted.from)
    }

    /// Receives into `buf` (except at the root, whose `buf` holds the data)
    /// and passes it on.
    pub(super) async fn finish<E: Element>(self, call: &Call, buf: &mut E::Dst<'_>) -> Result<()> {
        let Bcast { from_parent, children, mut sends } = self;
        let count = E::dst_len(buf);
        if let Some(posted) = from_parent {
            let msg = posted.take_items::<E>(buf, 0..count).await?;
            sends = call.forward_received_to::<E>(&msg, buf, 0..count, &children);
            call.recycle(msg);
        } else if sends.is_empty() {
            sends = call.forward_items_to::<E>(buf, 0..count, &children);
        }
        sent(sends).await
    }
}

/// An allgather around a ring under way: the receives posted from the
/// left (step `k` brings the block of rank `me - k - 1`), and the first
/// send to the right, of this rank's own block.
pub(super) struct Ring {
    ranges: Vec<Range<usize>>,
    posted: Vec<Posted>,
    first: Option<Request<'static>>,
}

impl Ring {
    /// Checks the layout, posts the receives, sends this rank's block and
    /// copies it into its place in `recv`.
    pub(super) fn start<E: Element>(call: &Call, send: &E::Src<'_>, recv: &mut E::Dst<'_>, counts: &[usize], displs: &[usize], what: &str) -> Result<Ring> {
        let (n, me) = (call.size(), call.rank());
        let layout = || blocks(what, call.size(), counts, displs, E::dst_len(recv), true);
        let (mine, ranges) = Ring::checked_blocks::<E>(call.rank(), send, recv, layout, what)?;
        let posted = Ring::post::<E>(call, recv, counts)?;
        let first = (n > 1).then(|| call.send_items::<E>(send, mine.clone(), (me + 1) % n));
        E::copy(send, mine, recv, ranges[me].clone())?;
        Ok(Ring { ranges, posted, first })
    }

    /// [`start`](Ring::start) with this rank's block already in its place
    /// in `recv`: sent from there.
    pub(super) fn start_in_place<E: Element>(call: &Call, recv: &mut E::Dst<'_>, counts: &[usize], displs: &[usize], what: &str) -> Result<Ring> {
        let (n, me) = (call.size(), call.rank());
        let ranges = Ring::layout::<E>(call, recv, counts, displs, what)?;
        let posted = Ring::post::<E>(call, recv, counts)?;
        let first = (n > 1).then(|| call.forward_items::<E>(recv, ranges[me].clone(), (me + 1) % n));
        Ok(Ring { ranges, posted, first })
    }

    /// This rank's `send` (its items), checked against its block, and
    /// each rank's block of `recv`, checked: what an allgather checks
    /// before it sends anything. `layout` lays the blocks out, one per
    /// rank, checked against `recv`'s length.
    fn checked_blocks<E: Element>(
        me: usize,
        send: &E::Src<'_>,
        recv: &E::Dst<'_>,
        layout: impl FnOnce() -> Result<Vec<Range<usize>>>,
        what: &str,
    ) -> Result<(Range<usize>, Vec<Range<usize>>)> {
        let mine = 0..E::src_len(send);
        E::check_src(send, mine.clone())?;
        let ranges = layout()?;
        check_dst_blocks::<E>(recv, &ranges)?;
        if E::ONE_TYPE {
            check_len(format_args!("{what}: this rank's send"), mine.len(), ranges[me].len())?;
        }
        Ok((mine, ranges))
    }

    /// [`checked_blocks`](Ring::checked_blocks) of `n` blocks of `count`
    /// items one after another (an allgather's), each checked as it is
    /// laid out, with no list of them made: this rank's `send` items.
    pub(super) fn checked_even<E: Element>(me: usize, send: &E::Src<'_>, recv: &E::Dst<'_>, (n, count): (usize, usize), what: &str) -> Result<Range<usize>> {
        let mine = 0..E::src_len(send);
        E::check_src(send, mine.clone())?;
        for r in 0..n {
            E::check_dst(recv, block(what, r.saturating_mul(count), count, E::dst_len(recv))?)?;
        }
        if E::ONE_TYPE && me < n {
            check_len(format_args!("{what}: this rank's send"), mine.len(), count)?;
        }
        Ok(mine)
    }

    /// Each rank's block of `recv`, checked.
    fn layout<E: Element>(call: &Call, recv: &E::Dst<'_>, counts: &[usize], displs: &[usize], what: &str) -> Result<Vec<Range<usize>>> {
        let ranges = blocks(what, call.size(), counts, displs, E::dst_len(recv), true)?;
        check_dst_blocks::<E>(recv, &ranges)?;
        Ok(ranges)
    }

    /// The rank whose block step `k` brings from the left.
    fn owner(call: &Call, k: usize) -> usize {
        let (n, me) = (call.size(), call.rank());
        (me + 2 * n - k - 1) % n
    }

    /// Posts the receive of every step from the left.
    fn post<E: Element>(call: &Call, recv: &E::Dst<'_>, counts: &[usize]) -> Result<Vec<Posted>> {
        let (n, me) = (call.size(), call.rank());
        let left = (me + n - 1) % n;
        (0..n - 1).map(|k| call.post_items::<E>(recv, left, counts[Ring::owner(call, k)])).collect()
    }

    /// Takes each block from the left and passes it on to the right.
    pub(super) async fn finish<E: Element>(self, call: &Call, recv: &mut E::Dst<'_>) -> Result<()> {
        let Ring { ranges, posted, first } = self;
        let (n, me) = (call.size(), call.rank());
        let mut later = Vec::new();
        for (k, p) in posted.into_iter().enumerate() {
            let owner = Ring::owner(call, k);
            let msg = p.take_items::<E>(recv, ranges[owner].clone()).await?;
            if k + 2 < n {
                later.push(call.forward_received::<E>(&msg, recv, ranges[owner].clone(), (me + 1) % n));
            }
            call.recycle(msg);
        }
        sent_after(first, later).await
    }
}

/// Blocks of at most this many bytes are allgathered by Bruck's
/// algorithm: ⌈log₂ n⌉ steps, each a message or two per rank, instead of
/// the ring's n − 1 messages, each of which costs more than copying a few
/// kilobytes. Larger blocks go around the ring, which passes on the bytes
/// it received without packing them again.
pub(super) const SMALL_ALLGATHER: u64 = 8 << 10;

/// Bruck's allgather, of even blocks in rank order: at step `k` each rank
/// sends the `m` blocks of the ranks just below it, ending with its own
/// (`m = min(2^k, n − 2^k)`: all it holds but on the last step of a rank
/// count that is not a power of two), to the rank `2^k` above it, and gets
/// as many from the rank `2^k` below, so after ⌈log₂ n⌉ steps it holds
/// all n. A group that wraps past the last rank goes as two messages, one
/// per run of the buffer.
///
/// Its first step is the ring's (this rank's block to the rank above):
/// ranks whose counts disagree, and so choose different algorithms, fail
/// on that first message instead of waiting for messages the other
/// algorithm never sends.
pub(super) struct Bruck {
    /// Items in each rank's block.
    count: usize,
    /// Per step, the receives of its pieces: the items each fills, and
    /// its message.
    posted: Vec<Vec<(Range<usize>, Posted)>>,
    first: Option<Request<'static>>,
}

impl Bruck {
    /// Whether an allgather of `count` items of `item_bytes` bytes per
    /// rank among `n` ranks goes by [`Bruck`]: it depends on nothing a
    /// correct program lets differ between ranks.
    pub(super) fn suits(n: usize, count: usize, item_bytes: u64) -> bool {
        n > 2 && (count as u64).saturating_mul(item_bytes) <= SMALL_ALLGATHER
    }

    /// Steps: ⌈log₂ n⌉.
    fn steps(n: usize) -> u32 {
        usize::BITS - n.saturating_sub(1).leading_zeros()
    }

    /// The runs of ranks, in order, of the `m` ranks ending at `last`
    /// (cyclically): one run, or two where they wrap past rank n − 1.
    fn runs(n: usize, last: usize, m: usize) -> [Range<usize>; 2] {
        let first = (last + n + 1 - m) % n;
        if first + m <= n {
            [first..first + m, 0..0]
        } else {
            [first..n, 0..(first + m) % n]
        }
    }

    /// The blocks step `k` moves: how many, and the rank above (to send
    /// to) and below (to get from).
    fn step(n: usize, me: usize, k: u32) -> (usize, usize, usize) {
        let distance = 1usize << k;
        (distance.min(n - distance), (me + distance) % n, (me + n - distance) % n)
    }

    /// Checks the layout, posts the receive of every step, sends this
    /// rank's block to the rank above and copies it into its place.
    pub(super) fn start<E: Element>(call: &Call, send: &E::Src<'_>, recv: &mut E::Dst<'_>, count: usize, what: &str) -> Result<Bruck> {
        let (n, me) = (call.size(), call.rank());
        let layout = || even_blocks(what, n, count, E::dst_len(recv));
        let (mine, ranges) = Ring::checked_blocks::<E>(call.rank(), send, recv, layout, what)?;
        let posted = (0..Bruck::steps(n))
            .map(|k| {
                let (m, _, below) = Bruck::step(n, me, k);
                Bruck::runs(n, below, m)
                    .into_iter()
                    .filter(|run| !run.is_empty())
                    .map(|run| {
                        let items = run.start * count..run.end * count;
                        Ok((items.clone(), call.post_items::<E>(recv, below, items.len())?))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let first = call.send_items::<E>(send, mine.clone(), (me + 1) % n);
        E::copy(send, mine, recv, ranges[me].clone())?;
        Ok(Bruck { count, posted, first: Some(first) })
    }

    /// Takes each step's blocks, then sends the next step's from `recv`.
    pub(super) async fn finish<E: Element>(self, call: &Call, recv: &mut E::Dst<'_>) -> Result<()> {
        let Bruck { count, posted, first } = self;
        let (n, me) = (call.size(), call.rank());
        let steps = posted.len() as u32;
        let mut later = Vec::new();
        for (k, pieces) in (0..).zip(posted) {
            for (items, p) in pieces {
                p.into_items::<E>(recv, items).await?;
            }
            if k + 1 < steps {
                let (m, above, _) = Bruck::step(n, me, k + 1);
                for run in Bruck::runs(n, me, m).into_iter().filter(|run| !run.is_empty()) {
                    later.push(call.forward_items::<E>(recv, run.start * count..run.end * count, above));
                }
            }
        }
        sent_after(first, later).await
    }
}

/// An allgather, as `call`, around the [`Ring`] of the blocks `counts` and
/// `displs` lay over every rank's `recv`; `send` is this rank's values,
/// `None` (in place) where its block of `recv` holds them.
fn allgather_blocks<'a, E: Element>(
    call: Call,
    checked: Result<()>,
    send: Option<E::Src<'_>>,
    mut recv: E::Dst<'a>,
    counts: Vec<usize>,
    displs: Vec<usize>,
    what: &'static str,
) -> Collective<'a> {
    let started = checked.and_then(|()| match &send {
        Some(send) => Ring::start::<E>(&call, send, &mut recv, &counts, &displs, what),
        None => Ring::start_in_place::<E>(&call, &mut recv, &counts, &displs, what),
    });
    Collective::new(call.clone(), async move { started?.finish::<E>(&call, &mut recv).await })
}

/// `count` values at `displ` of a buffer of `len`, checked. A block of no
/// values touches no memory, wherever its displacement points (MPI reads
/// and writes nothing for it): it is the empty range at the buffer's
/// start, which every buffer holds, described ones included.
fn block(what: &str, displ: usize, count: usize, len: usize) -> Result<Range<usize>> {
    if count == 0 {
        return Ok(0..0);
    }
    let end = displ.checked_add(count).filter(|&e| e <= len);
    end.map(|e| displ..e).ok_or_else(|| ErrorKind::InvalidArgument(format!("{what}: {count} values at {displ} overrun a buffer of {len}")).into())
}

/// The blocks `counts` and `displs` lay over a buffer of `len`, one per
/// rank; with `disjoint`, blocks that overlap are an error (a receive
/// would write some values twice). Blocks of no values are never out of
/// range and overlap nothing.
fn blocks(what: &str, n: usize, counts: &[usize], displs: &[usize], len: usize, disjoint: bool) -> Result<Vec<Range<usize>>> {
    if counts.len() != n || displs.len() != n {
        return Err(ErrorKind::InvalidArgument(format!("{what}: {} counts and {} displacements for {n} ranks", counts.len(), displs.len())).into());
    }
    let ranges = (0..n).map(|r| block(what, displs[r], counts[r], len)).collect::<Result<Vec<_>>>()?;
    if disjoint {
        let mut sorted: Vec<&Range<usize>> = ranges.iter().filter(|r| !r.is_empty()).collect();
        sorted.sort_by_key(|r| r.start);
        if let Some(w) = sorted.windows(2).find(|w| w[0].end > w[1].start) {
            return Err(ErrorKind::InvalidArgument(format!("{what}: blocks {:?} and {:?} overlap", w[0], w[1])).into());
        }
    }
    Ok(ranges)
}

/// The salt of the messages of a `collective` (one of the `*_ROOTED`
/// constants) from or to `root` (see [`Call::salted`]): a rank that takes
/// another rank as the root fails on the first message it takes from a
/// rank that does not.
pub(super) fn root_salt(collective: u64, root: usize) -> u64 {
    collective ^ (root as u64).wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// [`root_salt`]'s collectives.
pub(super) const BCAST_ROOTED: u64 = 0xb0ad_ca57_7007_5a17;
pub(super) const REDUCE_ROOTED: u64 = 0x7ed0_ce70_7007_5a17;
pub(super) const SCATTER_ROOTED: u64 = 0x5ca7_7e70_7007_5a17;

/// The count of each of `n` even blocks of a buffer of `len` items.
fn per_rank(what: &str, len: usize, n: usize) -> Result<usize> {
    if n == 0 || !len.is_multiple_of(n) {
        return Err(ErrorKind::InvalidArgument(format!("{what} of {len} items cannot be cut in {n} even blocks")).into());
    }
    Ok(len / n)
}

/// Evenly sized blocks: `count` values for each of `n` ranks.
fn even(n: usize, count: usize) -> (Vec<usize>, Vec<usize>) {
    // A block past the largest offset (values without bytes can be that
    // many) is laid at it, and found to overrun its buffer there.
    (vec![count; n], (0..n).map(|r| r.saturating_mul(count)).collect())
}

/// The blocks of [`even`] counts laid over a buffer of `len`, checked as
/// [`blocks`] checks them (they never overlap), without the counts and
/// displacements in between.
fn even_blocks(what: &str, n: usize, count: usize, len: usize) -> Result<Vec<Range<usize>>> {
    (0..n).map(|r| block(what, r.saturating_mul(count), count, len)).collect()
}

/// Checks that every block of `ranges` lies in a destination's memory.
fn check_dst_blocks<E: Element>(dst: &E::Dst<'_>, ranges: &[Range<usize>]) -> Result<()> {
    ranges.iter().try_for_each(|r| E::check_dst(dst, r.clone()))
}

/// Checks that every block of `ranges` lies in a source's memory.
fn check_src_blocks<E: Element>(src: &E::Src<'_>, ranges: &[Range<usize>]) -> Result<()> {
    ranges.iter().try_for_each(|r| E::check_src(src, r.clone()))
}

impl Comm {
    /// `MPI_Bcast`: the root's `buf` is copied into every other rank's
    /// `buf`, which must hold as many values (a binomial tree).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let mut settings = if comm.rank() == 2 { [1.5, 7.0] } else { [0.0; 2] };
    /// comm.bcast(&mut settings, 2).await?;
    /// assert_eq!(settings, [1.5, 7.0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe: dropped before it finishes, this rank leaves the
    /// broadcast unfinished, and the ranks below it in the tree fail with
    /// [`ErrorKind::CollectiveMismatch`] naming it (see [`crate::coll`]).
    pub fn bcast<'a, T: Element>(&self, buf: impl CollMut<'a, T>, root: usize) -> Collective<'a> {
        let mut buf = buf.values();
        let start = Starting::new(self);
        let count = T::dst_len(&buf);
        let checked = start.check_root(root).and_then(|()| T::check_dst(&buf, 0..count));
        if start.local().is_some() {
            return super::local::bcast::<T>(start, checked, root, buf);
        }
        // Salted with the root: a rank that takes another rank as the root
        // fails on the first message it takes (see `Call::salted`), or on
        // data from a rank it takes none from (see `Call::stray_data`).
        let call = start.call().salted(root_salt(BCAST_ROOTED, root));
        let started = checked.and_then(|()| Bcast::start::<T>(&call, root, count, &T::item_type(&buf), Some(&buf)));
        Collective::new(call.clone(), async move {
            let bcast = started?;
            let from = bcast.parent();
            call.watching_for_stray_data("bcast", from, bcast.finish::<T>(&call, &mut buf)).await
        })
    }

    /// `MPI_Gather`: each rank's `send` goes to the root, which receives
    /// rank `r`'s values into block `r` of `recv` (size × `send.len()`
    /// values; ignored, and may be empty, on other ranks).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let mine = vec![comm.rank() as u32; 2];
    /// let mut all = vec![0u32; if comm.rank() == 0 { 6 } else { 0 }];
    /// comm.gather(&mine, &mut all, 0).await?;
    /// if comm.rank() == 0 {
    ///     assert_eq!(all, [0, 0, 1, 1, 2, 2]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn gather<'a, 's, T: Element>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>, root: usize) -> Collective<'a> {
        let (send, recv) = (send.values(), recv.values());
        let n = self.size();
        // The root's blocks: as many items as each rank sends, or (with
        // datatypes of its own) its buffer's count cut in n.
        let count = if T::ONE_TYPE || self.rank() != root { Ok(T::src_len(&send)) } else { per_rank("gather: the root's receive", T::dst_len(&recv), n) };
        let (counts, displs) = even(n, *count.as_ref().unwrap_or(&0));
        self.gather_blocks::<T>(count.map(drop), Some(send), recv, counts, displs, root, "gather")
    }

    /// `MPI_Gatherv`: as [`gather`](Comm::gather), rank `r`'s values
    /// landing in `counts[r]` values at `displs[r]` of the root's `recv`
    /// (blocks that must not overlap). `counts` and `displs` matter at the
    /// root only; every other rank sends its `send`, whose length must be
    /// the root's `counts[r]`. A block of 0 values touches no memory: its
    /// displacement may point anywhere, past the buffer too.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// // Rank r sends r + 1 copies of r.
    /// let mine = vec![comm.rank() as u32; comm.rank() + 1];
    /// let mut all = vec![0u32; if comm.rank() == 0 { 6 } else { 0 }];
    /// comm.gatherv(&mine, &mut all, &[1, 2, 3], &[0, 1, 3], 0).await?;
    /// if comm.rank() == 0 {
    ///     assert_eq!(all, [0, 1, 1, 2, 2, 2]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn gatherv<'a, 's, T: Element>(
        &self,
        send: impl CollRef<'s, T>,
        recv: impl CollMut<'a, T>,
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Collective<'a> {
        self.gather_blocks::<T>(Ok(()), Some(send.values()), recv.values(), counts.to_vec(), displs.to_vec(), root, "gatherv")
    }

    /// A gather of the blocks `counts` and `displs` lay over the root's
    /// `recv`. `send` is this rank's values; `None` (in place) at the
    /// root: its block of `recv` holds them already and stays as it is;
    /// `None` elsewhere: the whole of `recv` is what the rank sends.
    #[allow(clippy::too_many_arguments)]
    fn gather_blocks<'a, E: Element>(
        &self,
        checked: Result<()>,
        send: Option<E::Src<'_>>,
        mut recv: E::Dst<'a>,
        counts: Vec<usize>,
        displs: Vec<usize>,
        root: usize,
        what: &'static str,
    ) -> Collective<'a> {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        let started = (|| -> Result<_> {
            checked?;
            call.check_root(root)?;
            if let Some(send) = &send {
                E::check_src(send, 0..E::src_len(send))?;
            }
            if me != root {
                let request = match &send {
                    Some(send) => call.send_items::<E>(send, 0..E::src_len(send), root),
                    None => {
                        let mine = 0..E::dst_len(&recv);
                        E::check_dst(&recv, mine.clone())?;
                        call.forward_items::<E>(&recv, mine, root)
                    }
                };
                return Ok((Vec::new(), vec![request], Vec::new()));
            }
            let ranges = blocks(what, n, &counts, &displs, E::dst_len(&recv), true)?;
            check_dst_blocks::<E>(&recv, &ranges)?;
            if let (Some(send), true) = (&send, E::ONE_TYPE) {
                check_len(format_args!("{what}: the root's own send"), E::src_len(send), counts[me])?;
            }
            let posted = (0..n).filter(|&r| r != me).map(|r| Ok((r, call.post_items::<E>(&recv, r, counts[r])?))).collect::<Result<Vec<_>>>()?;
            if let Some(send) = &send {
                E::copy(send, 0..E::src_len(send), &mut recv, ranges[me].clone())?;
            }
            Ok((posted, Vec::new(), ranges))
        })();
        Collective::new(call.clone(), async move {
            let (posted, sends, ranges) = started?;
            for (r, p) in posted {
                p.into_items::<E>(&mut recv, ranges[r].clone()).await?;
            }
            sent(sends).await
        })
    }

    /// `MPI_Scatter`: the root's `send` (size × `recv.len()` values;
    /// ignored, and may be empty, elsewhere) is cut in blocks, block `r`
    /// going to rank `r`'s `recv`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let work: Vec<u64> = if comm.rank() == 1 { (0..6).collect() } else { Vec::new() };
    /// let mut mine = [0u64; 2];
    /// comm.scatter(&work, &mut mine[..], 1).await?;
    /// assert_eq!(mine, [2 * comm.rank() as u64, 2 * comm.rank() as u64 + 1]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn scatter<'a, 's, T: Element>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>, root: usize) -> Collective<'a> {
        let (send, recv) = (send.values(), recv.values());
        let n = self.size();
        // The root's blocks: as many items as each rank receives, or (with
        // datatypes of its own) its buffer's count cut in n.
        let count = if T::ONE_TYPE || self.rank() != root { Ok(T::dst_len(&recv)) } else { per_rank("scatter: the root's send", T::src_len(&send), n) };
        let (counts, displs) = even(n, *count.as_ref().unwrap_or(&0));
        self.scatter_blocks::<T>(count.map(drop), Some(send), recv, counts, displs, root, "scatter")
    }

    /// `MPI_Scatterv`: as [`scatter`](Comm::scatter), rank `r` getting
    /// `counts[r]` values at `displs[r]` of the root's `send` (`counts`
    /// and `displs` matter at the root only; each rank's `recv` must hold
    /// its count). A block of 0 values touches no memory, wherever its
    /// displacement points.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let data: Vec<u32> = if comm.rank() == 0 { (0..6).collect() } else { Vec::new() };
    /// // Rank r gets r + 1 values.
    /// let mut mine = vec![0u32; comm.rank() + 1];
    /// comm.scatterv(&data, &[1, 2, 3], &[0, 1, 3], &mut mine, 0).await?;
    /// let expected: [&[u32]; 3] = [&[0], &[1, 2], &[3, 4, 5]];
    /// assert_eq!(mine, expected[comm.rank()]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn scatterv<'a, 's, T: Element>(
        &self,
        send: impl CollRef<'s, T>,
        counts: &[usize],
        displs: &[usize],
        recv: impl CollMut<'a, T>,
        root: usize,
    ) -> Collective<'a> {
        self.scatter_blocks::<T>(Ok(()), Some(send.values()), recv.values(), counts.to_vec(), displs.to_vec(), root, "scatterv")
    }

    /// A scatter of the blocks `counts` and `displs` lay over the root's
    /// `send` into each rank's `recv`. `None` (in place) at the root: the
    /// blocks go out from its `recv`, its own staying where it is; a rank
    /// other than the root receives into its `recv` either way.
    #[allow(clippy::too_many_arguments)]
    fn scatter_blocks<'a, E: Element>(
        &self,
        checked: Result<()>,
        send: Option<E::Src<'_>>,
        mut recv: E::Dst<'a>,
        counts: Vec<usize>,
        displs: Vec<usize>,
        root: usize,
        what: &'static str,
    ) -> Collective<'a> {
        // Salted with the root, and every rank watching for stray data, as
        // a broadcast's (two ranks that both call themselves the root fail
        // rather than wait for ever for their large blocks to be taken; a
        // rank whose root sends it nothing fails on another root's block).
        let call = Call::start(self).salted(root_salt(SCATTER_ROOTED, root));
        let (n, me) = (call.size(), call.rank());
        let mine = 0..E::dst_len(&recv);
        let started = (|| -> Result<_> {
            checked?;
            call.check_root(root)?;
            E::check_dst(&recv, mine.clone())?;
            if me != root {
                return Ok((Some(call.post_items::<E>(&recv, root, mine.len())?), Vec::new()));
            }
            // Blocks read by several sends may overlap.
            let ranges = blocks(what, n, &counts, &displs, send.as_ref().map_or(mine.len(), |send| E::src_len(send)), false)?;
            match &send {
                Some(send) => {
                    check_src_blocks::<E>(send, &ranges)?;
                    if E::ONE_TYPE {
                        check_len(format_args!("{what}: the root's own receive"), mine.len(), counts[me])?;
                    }
                    E::copy(send, ranges[me].clone(), &mut recv, mine.clone())?;
                }
                None => check_dst_blocks::<E>(&recv, &ranges)?,
            }
            let sends = (0..n)
                .filter(|&r| r != me)
                .map(|r| match &send {
                    Some(send) => call.send_items::<E>(send, ranges[r].clone(), r),
                    None => call.forward_items::<E>(&recv, ranges[r].clone(), r),
                })
                .collect();
            Ok((None, sends))
        })();
        Collective::new(call.clone(), async move {
            let (posted, sends) = started?;
            match posted {
                Some(p) => {
                    let part = async {
                        p.into_items::<E>(&mut recv, mine).await?;
                        sent(sends).await
                    };
                    call.watching_for_stray_data("scatter", Some(root), part).await
                }
                None => call.watching_for_stray_data("scatter", None, sent(sends)).await,
            }
        })
    }

    /// `MPI_Allgather`: every rank's `send` lands in block `r` (its rank)
    /// of every rank's `recv` (size × `send.len()` values): by Bruck's
    /// algorithm for blocks up to 8 KiB on 3 ranks or more, otherwise
    /// around a ring (see the [module docs](super)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let mut all = [0usize; 3];
    /// comm.allgather(&comm.rank(), &mut all[..]).await?;
    /// assert_eq!(all, [0, 1, 2]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn allgather<'a, 's, T: Element>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>) -> Collective<'a> {
        let (send, recv) = (send.values(), recv.values());
        let n = self.size();
        let count = if T::ONE_TYPE { Ok(T::src_len(&send)) } else { per_rank("allgather: the receive", T::dst_len(&recv), n) };
        self.allgather_even::<T>(count, send, recv, "allgather")
    }

    /// An allgather of `count` items from every rank (an error if the
    /// arguments say otherwise), by [`Bruck`] for small blocks and
    /// otherwise around the [`Ring`].
    fn allgather_even<'a, E: Element>(&self, count: Result<usize>, send: E::Src<'_>, mut recv: E::Dst<'a>, what: &'static str) -> Collective<'a> {
        let start = Starting::new(self);
        let n = start.size();
        // The count as far as choosing the algorithm goes (wrong
        // arguments fail either way).
        let even_count = *count.as_ref().unwrap_or(&0);
        let block_bytes = E::item_type(&recv).size().saturating_mul(even_count as u64);
        if start.local().is_some() && super::local::meets(block_bytes) {
            let checked = count.and_then(|count| Ok((count, Ring::checked_even::<E>(start.rank(), &send, &recv, (n, count), what)?)));
            return super::local::allgather::<E>(start, checked, &send, recv);
        }
        let mut call = start.call();
        call.mark_messages();
        if Bruck::suits(n, even_count, E::item_type(&recv).size()) {
            let started = count.and_then(|count| Bruck::start::<E>(&call, &send, &mut recv, count, what));
            return Collective::new(call.clone(), async move { started?.finish::<E>(&call, &mut recv).await });
        }
        let (counts, displs) = even(n, even_count);
        allgather_blocks::<E>(call, count.map(drop), Some(send), recv, counts, displs, what)
    }

    /// `MPI_Allgatherv`: as [`allgather`](Comm::allgather), rank `r`'s
    /// `counts[r]` values landing at `displs[r]` of every `recv` (blocks
    /// that must not overlap; the same `counts` and `displs` on every rank).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// // Rank r contributes r + 1 copies of r.
    /// let mine = vec![comm.rank() as u8; comm.rank() + 1];
    /// let mut all = [0u8; 6];
    /// comm.allgatherv(&mine, &mut all[..], &[1, 2, 3], &[0, 1, 3]).await?;
    /// assert_eq!(all, [0, 1, 1, 2, 2, 2]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn allgatherv<'a, 's, T: Element>(
        &self,
        send: impl CollRef<'s, T>,
        recv: impl CollMut<'a, T>,
        counts: &[usize],
        displs: &[usize],
    ) -> Collective<'a> {
        allgather_blocks::<T>(Call::start(self), Ok(()), Some(send.values()), recv.values(), counts.to_vec(), displs.to_vec(), "allgatherv")
    }

    /// Numbers a collective this rank cannot take part in (its arguments
    /// are wrong) and gives up on it at once, so that the other ranks fail
    /// it rather than wait; returns `e`.
    pub(crate) fn refuse_collective(&self, e: Error) -> Error {
        let call = Call::start(self);
        call.give_up();
        call.over();
        e
    }

    /// An allgather of one value per rank into a `Vec` the future owns:
    /// started when called, like every collective (communicator
    /// constructors build on it).
    pub(crate) fn allgather_owned<T: MpiType + Default>(&self, mine: T) -> impl Future<Output = Result<Vec<T>>> + Send + 'static {
        let call = Call::start(self);
        let n = call.size();
        let mut all = vec![T::default(); n];
        let (counts, displs) = even(n, 1);
        let started = Ring::start::<T>(&call, &std::slice::from_ref(&mine), &mut &mut all[..], &counts, &displs, "allgather");
        guarded(call.clone(), async move {
            started?.finish::<T>(&call, &mut &mut all[..]).await?;
            Ok(all)
        })
    }

    /// `MPI_Alltoall`: block `r` of each rank's `send` (size × c values)
    /// goes to rank `r`, landing in block `s` (the sender's rank) of its
    /// `recv` (size × c values too).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let me = comm.rank() as u32;
    /// let send = [10 * me, 10 * me + 1, 10 * me + 2];
    /// let mut recv = [0u32; 3];
    /// comm.alltoall(&send[..], &mut recv[..]).await?;
    /// assert_eq!(recv, [me, 10 + me, 20 + me]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn alltoall<'a, 's, T: Element>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>) -> Collective<'a> {
        let (send, recv) = (send.values(), recv.values());
        let n = self.size();
        let (send_len, recv_len) = (T::src_len(&send), T::dst_len(&recv));
        let scount = send_len / n.max(1);
        // Described buffers: each side's blocks by its own count.
        let rcount = if T::ONE_TYPE { scount } else { recv_len / n.max(1) };
        let what = "alltoall";
        // Blocks of `scount` and `rcount` items one after another, which
        // the lengths hold exactly.
        let layout = check_len("alltoall: the send buffer", send_len, n * scount)
            .and_then(|()| check_len("alltoall: the receive buffer", recv_len, n * rcount))
            .map(|()| Layout::Even(scount, rcount));
        let block_bytes = T::src_item_type(&send).size().saturating_mul(scount as u64);
        self.alltoall_blocks::<T>(layout, send, recv, Some(block_bytes), what)
    }

    /// `MPI_Alltoallv`: `scounts[r]` values at `sdispls[r]` of each rank's
    /// `send` go to rank `r`, landing at `rdispls[s]` of its `recv`, where
    /// `rcounts[s]` must equal the sender's `scounts[r]`. Blocks of 0
    /// values touch no memory, wherever their displacements point.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// let me = comm.rank() as u32;
    /// // One value for rank 0, two for rank 1: rank k gets k + 1 from each rank.
    /// let send = [10 * me, 10 * me + 1, 10 * me + 2];
    /// let k = comm.rank() + 1;
    /// let mut recv = vec![0u32; 2 * k];
    /// comm.alltoallv(&send[..], &[1, 2], &[0, 1], &mut recv, &[k, k], &[0, k]).await?;
    /// assert_eq!(recv, if me == 0 { vec![0, 10] } else { vec![1, 2, 11, 12] });
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallv<'a, 's, T: Element>(
        &self,
        send: impl CollRef<'s, T>,
        scounts: &[usize],
        sdispls: &[usize],
        recv: impl CollMut<'a, T>,
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Collective<'a> {
        let (send, recv, n, what) = (send.values(), recv.values(), self.size(), "alltoallv");
        let layout = blocks(what, n, scounts, sdispls, T::src_len(&send), false)
            .and_then(|out| Ok(Layout::Listed(out, blocks(what, n, rcounts, rdispls, T::dst_len(&recv), true)?)));
        self.alltoall_blocks::<T>(layout, send, recv, None, what)
    }

    /// An alltoall of the blocks `layout` gives (an error if the arguments
    /// say otherwise): those of `send` each rank sends to, then those of
    /// `recv` each rank's block lands in. `block_bytes`: the bytes of every
    /// block, where every rank's blocks have the same (`alltoall`), which
    /// may then choose messages for large blocks where ranks meet.
    fn alltoall_blocks<'a, E: Element>(
        &self,
        layout: Result<Layout>,
        send: E::Src<'_>,
        mut recv: E::Dst<'a>,
        block_bytes: Option<u64>,
        what: &'static str,
    ) -> Collective<'a> {
        let start = Starting::new(self);
        let (n, me) = (start.size(), start.rank());
        let layout = layout.and_then(|layout| {
            for r in 0..n {
                let (out, into) = layout.block(r);
                E::check_src(&send, out)?;
                E::check_dst(&recv, into)?;
            }
            if E::ONE_TYPE {
                let (out, into) = layout.block(me);
                check_len(format_args!("{what}: this rank's block to itself"), into.len(), out.len())?;
            }
            Ok(layout)
        });
        if start.local().is_some() && block_bytes.is_none_or(super::local::meets) {
            return super::local::alltoall::<E>(start, layout, send, recv);
        }
        let mut call = start.call();
        call.mark_messages();
        let started = (|| -> Result<_> {
            let (out, into) = layout?.listed(n);
            // Each rank starts with its right neighbour, so that the ranks
            // do not all send to rank 0 first.
            let order = (1..n).map(|k| (me + k) % n);
            let posted = order.clone().map(|r| Ok((r, call.post_items::<E>(&recv, r, into[r].len())?))).collect::<Result<Vec<_>>>()?;
            let sends: Vec<_> = order.rev().map(|r| call.send_items::<E>(&send, out[r].clone(), r)).collect();
            E::copy(&send, out[me].clone(), &mut recv, into[me].clone())?;
            Ok((into, posted, sends))
        })();
        Collective::new(call.clone(), async move {
            let (into, posted, sends) = started?;
            for (r, p) in posted {
                p.into_items::<E>(&mut recv, into[r].clone()).await?;
            }
            sent(sends).await
        })
    }
}

/// One rank's block in [`Comm::alltoallw`]: `count` items of a datatype
/// whose origin lies `displacement` bytes from the buffer's origin.
///
/// ```
/// use mpx::{coll::Block, Datatype};
/// // Two doubles at the start of the buffer; one int 16 bytes in.
/// let pair = Block::new(2, &Datatype::double(), 0);
/// let tail = Block::new(1, &Datatype::int(), 16);
/// # let _ = (pair, tail);
/// ```
#[derive(Debug, Clone)]
pub struct Block {
    count: u64,
    datatype: Datatype,
    displacement: isize,
}

impl Block {
    /// `count` items of `datatype`, their origin `displacement` bytes from
    /// the buffer's origin.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{coll::Block, Datatype, Region, RegionMut};
    /// let me = comm.rank() as i32;
    /// // One int to and from each rank r, at byte 4 * r of each buffer.
    /// let blocks: Vec<Block> = (0..2).map(|r| Block::new(1, &Datatype::int(), 4 * r)).collect();
    /// let send = [10 * me, 10 * me + 1];
    /// let mut recv = [0i32; 2];
    /// comm.alltoallw(Region::of(&send), &blocks, RegionMut::of(&mut recv), &blocks).await?;
    /// assert_eq!(recv, [me, 10 + me]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn new(count: u64, datatype: &Datatype, displacement: isize) -> Block {
        Block { count, datatype: datatype.clone(), displacement }
    }

    /// Where the block's origin lies, in bytes from the buffer's: its
    /// displacement, or the buffer's own origin for a block of no items,
    /// which touches no memory wherever its displacement points.
    fn offset(&self) -> i128 {
        if self.count == 0 {
            0
        } else {
            self.displacement as i128
        }
    }
}

impl Comm {
    /// `MPI_Alltoallw`: the most general exchange. Rank `r` gets
    /// `sends[r]` of this rank's `send` memory and this rank receives
    /// `recvs[s]` of `recv` from rank `s`, each block with its own count,
    /// byte displacement and datatype (derived ones included), as long as
    /// the type signatures of each pair of blocks agree. Receive blocks
    /// must not overlap (checked on the datatypes' byte runs, never by
    /// expanding typemaps). A block of 0 items touches no memory: its
    /// displacement may point anywhere, past the buffer too.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{coll::Block, Datatype, Region, RegionMut};
    /// let me = comm.rank();
    /// // A 2x2 matrix per rank: column 0 goes to rank 0, column 1 to rank 1,
    /// // each landing as a contiguous row of the receiver's matrix.
    /// let mine: [f64; 4] = std::array::from_fn(|i| (10 * me + i) as f64);
    /// let column = Datatype::vector(2, 1, 2, &Datatype::double())?;
    /// let sends = [Block::new(1, &column, 0), Block::new(1, &column, 8)];
    /// let recvs = [Block::new(2, &Datatype::double(), 0), Block::new(2, &Datatype::double(), 16)];
    /// let mut rows = [0.0f64; 4];
    /// comm.alltoallw(Region::of(&mine), &sends, RegionMut::of(&mut rows), &recvs).await?;
    /// // Row s holds column `me` of rank s's matrix.
    /// assert_eq!(rows, [me as f64, (me + 2) as f64, (10 + me) as f64, (12 + me) as f64]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn alltoallw<'a>(&self, send: Region<'_>, sends: &[Block], mut recv: RegionMut<'a>, recvs: &[Block]) -> Collective<'a> {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        let started = (|| -> Result<_> {
            if sends.len() != n || recvs.len() != n {
                return Err(ErrorKind::InvalidArgument(format!("alltoallw: {} send blocks and {} receive blocks for {n} ranks", sends.len(), recvs.len())).into());
            }
            // Blocks of no items write nothing, and overlap nothing.
            let parts: Vec<Part<'_>> = recvs
                .iter()
                .filter(|b| b.count > 0)
                .map(|b| Part { datatype: &b.datatype, count: b.count, access: Access::Write, offset: b.displacement as i64 })
                .collect();
            check_parts(&parts, recv.origin(), recv.len(), None)?;
            let out = sends
                .iter()
                .map(|b| {
                    let buf = SendBuf::new(send.shifted(b.offset())?, b.count, &b.datatype);
                    Described::check_src(&buf, 0..b.count as usize).map(|()| buf)
                })
                .collect::<Result<Vec<_>>>()?;
            // Each rank starts with its right neighbour, as in alltoall.
            let order: Vec<usize> = (1..n).map(|k| (me + k) % n).collect();
            let posted = order.iter().map(|&r| Ok((r, call.post_typed(r, recvs[r].count as usize, &recvs[r].datatype, 0)?))).collect::<Result<Vec<_>>>()?;
            let requests: Vec<_> = order.iter().rev().map(|&r| call.send_items::<Described>(&out[r], 0..sends[r].count as usize, r)).collect();
            let own = &recvs[me];
            let mut block = RecvBuf::new(recv.shifted(own.offset())?, own.count, &own.datatype);
            Described::copy(&out[me], 0..sends[me].count as usize, &mut block, 0..own.count as usize)?;
            Ok((posted, requests))
        })();
        let recvs = recvs.to_vec();
        Collective::new(call.clone(), async move {
            let (posted, requests) = started?;
            for (r, p) in posted {
                let b = &recvs[r];
                let mut block = RecvBuf::new(recv.shifted(b.offset())?, b.count, &b.datatype);
                p.into_items::<Described>(&mut block, 0..b.count as usize).await?;
            }
            sent(requests).await
        })
    }
}

/// The in-place forms (`MPI_IN_PLACE`) of the data-moving collectives.
impl Comm {
    /// [`allgather`](Comm::allgather) where this rank's values already sit
    /// in its block of `buf` (size × c values).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let mut table = [0u8; 3];
    /// table[comm.rank()] = 10 + comm.rank() as u8;
    /// comm.allgather_in_place(&mut table[..]).await?;
    /// assert_eq!(table, [10, 11, 12]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn allgather_in_place<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>) -> Collective<'a> {
        let buf = buf.values();
        let (n, me) = (self.size(), self.rank());
        let count = buf.len() / n;
        let mine = buf.get(me * count..(me + 1) * count).map(<[T]>::to_vec).unwrap_or_default();
        let checked = check_len("allgather_in_place: the buffer", buf.len(), n * count);
        self.allgather_even::<T>(checked.map(|()| count), &mine[..], buf, "allgather_in_place")
    }

    /// [`alltoall`](Comm::alltoall) where `buf` (size × c values) holds the
    /// blocks to send and receives the blocks that come.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let me = comm.rank() as u32;
    /// let mut blocks = [10 * me, 10 * me + 1, 10 * me + 2]; // block r for rank r
    /// comm.alltoall_in_place(&mut blocks[..]).await?;
    /// assert_eq!(blocks, [me, 10 + me, 20 + me]); // block s from rank s
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn alltoall_in_place<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>) -> Collective<'a> {
        let buf = buf.values();
        let mine = buf.to_vec();
        self.alltoall(&mine[..], buf)
    }

    /// [`alltoallv`](Comm::alltoallv) where `buf` holds the blocks to send
    /// and receives the blocks that come (`MPI_IN_PLACE`): `counts[r]`
    /// values at `displs[r]` go to rank `r`, and rank `r`'s block replaces
    /// them, so `counts[r]` must equal rank `r`'s `counts` for this rank.
    /// The blocks must not overlap.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// let me = comm.rank() as u32;
    /// // Rank 0 and rank 1 swap two values; each keeps its one value to itself.
    /// let (mut buf, counts, displs) = if me == 0 { (vec![0, 1, 2], [1, 2], [0, 1]) } else { (vec![10, 11, 12], [2, 1], [1, 0]) };
    /// comm.alltoallv_in_place(&mut buf[..], &counts, &displs).await?;
    /// assert_eq!(buf, if me == 0 { vec![0, 11, 12] } else { vec![10, 1, 2] });
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn alltoallv_in_place<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>, counts: &[usize], displs: &[usize]) -> Collective<'a> {
        let buf = buf.values();
        let mine = buf.to_vec();
        self.alltoallv(&mine[..], counts, displs, buf, counts, displs)
    }

    /// [`gather`](Comm::gather) where the root's own values already sit
    /// in its block of `buf` (size × c values), which receives every other
    /// rank's block and keeps the root's as it is (`MPI_IN_PLACE` at the
    /// root). Any other rank sends its whole `buf` (c values), as `gather`
    /// sends its `send`: those ranks may call either.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let me = comm.rank() as u32;
    /// let mine = [10 * me, 10 * me + 1];
    /// if me == 1 {
    ///     let mut all = [0u32; 6];
    ///     all[2..4].copy_from_slice(&mine); // the root's own block
    ///     comm.gather_in_place(&mut all[..], 1).await?;
    ///     assert_eq!(all, [0, 1, 10, 11, 20, 21]);
    /// } else if me == 0 {
    ///     comm.gather(&mine[..], &mut Vec::<u32>::new(), 1).await?;
    /// } else {
    ///     let mut mine = mine;
    ///     comm.gather_in_place(&mut mine[..], 1).await?; // the same
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn gather_in_place<'a, T: Element>(&self, buf: impl CollMut<'a, T>, root: usize) -> Collective<'a> {
        let buf = buf.values();
        // Elsewhere than at the root, `buf` is the values sent.
        let (checked, counts, displs) = self.even_in_place(T::dst_len(&buf), root, "gather_in_place: the root's buffer");
        self.gather_blocks::<T>(checked, None, buf, counts, displs, root, "gather_in_place")
    }

    /// The even blocks of an in-place gather or scatter of `len` values
    /// in this rank's buffer: at the root the buffer cut in `n` blocks
    /// (an error, `what`, if it cannot be), elsewhere `len` values each.
    fn even_in_place(&self, len: usize, root: usize, what: &str) -> (Result<()>, Vec<usize>, Vec<usize>) {
        let n = self.size();
        let count = if self.rank() == root { per_rank(what, len, n) } else { Ok(len) };
        let (counts, displs) = even(n, *count.as_ref().unwrap_or(&0));
        (count.map(drop), counts, displs)
    }

    /// [`gatherv`](Comm::gatherv) where the root's own values already sit
    /// in its block of `buf` (`counts[root]` values at `displs[root]`),
    /// which stays as it is (`MPI_IN_PLACE` at the root). Any other rank
    /// sends its whole `buf`, as `gatherv` sends its `send`: those ranks
    /// may call either.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// // Rank r sends r + 1 copies of r; the root, rank 2, holds its own.
    /// let me = comm.rank();
    /// let (counts, displs) = ([1, 2, 3], [0, 1, 3]);
    /// if me == 2 {
    ///     let mut all = [9u32, 9, 9, 2, 2, 2];
    ///     comm.gatherv_in_place(&mut all[..], &counts, &displs, 2).await?;
    ///     assert_eq!(all, [0, 1, 1, 2, 2, 2]);
    /// } else {
    ///     let mut mine = vec![me as u32; me + 1];
    ///     comm.gatherv_in_place(&mut mine, &counts, &displs, 2).await?;
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn gatherv_in_place<'a, T: Element>(&self, buf: impl CollMut<'a, T>, counts: &[usize], displs: &[usize], root: usize) -> Collective<'a> {
        self.gather_blocks::<T>(Ok(()), None, buf.values(), counts.to_vec(), displs.to_vec(), root, "gatherv_in_place")
    }

    /// [`scatter`](Comm::scatter) where the root's `buf` (size × c values)
    /// holds the blocks and keeps its own block where it is, receiving
    /// nothing (`MPI_IN_PLACE` at the root). Any other rank's `buf`
    /// (c values) receives its block, as `scatter`'s `recv` does: those
    /// ranks may call either.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let me = comm.rank() as u64;
    /// if me == 1 {
    ///     let mut work: Vec<u64> = (0..6).collect();
    ///     comm.scatter_in_place(&mut work, 1).await?;
    ///     assert_eq!(work, [0, 1, 2, 3, 4, 5]); // its own block, 2 and 3, is its part
    /// } else {
    ///     let mut mine = [0u64; 2];
    ///     comm.scatter_in_place(&mut mine[..], 1).await?;
    ///     assert_eq!(mine, [2 * me, 2 * me + 1]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn scatter_in_place<'a, T: Element>(&self, buf: impl CollMut<'a, T>, root: usize) -> Collective<'a> {
        let buf = buf.values();
        // Elsewhere than at the root, `buf` is where the rank's block lands.
        let (checked, counts, displs) = self.even_in_place(T::dst_len(&buf), root, "scatter_in_place: the root's buffer");
        self.scatter_blocks::<T>(checked, None, buf, counts, displs, root, "scatter_in_place")
    }

    /// [`scatterv`](Comm::scatterv) where the root's `buf` holds the
    /// blocks (`counts[r]` values at `displs[r]` for rank `r`) and keeps
    /// its own block where it is, receiving nothing (`MPI_IN_PLACE` at the
    /// root). Any other rank's `buf` receives its block, as `scatterv`'s
    /// `recv` does: those ranks may call either.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// // Rank r gets r + 1 values; the root, rank 0, keeps its one in place.
    /// let me = comm.rank();
    /// let (counts, displs) = ([1, 2, 3], [0, 1, 3]);
    /// if me == 0 {
    ///     let mut data: Vec<u32> = (0..6).collect();
    ///     comm.scatterv_in_place(&mut data, &counts, &displs, 0).await?;
    /// } else {
    ///     let mut mine = vec![0u32; me + 1];
    ///     comm.scatterv_in_place(&mut mine, &counts, &displs, 0).await?;
    ///     let expected: [&[u32]; 2] = [&[1, 2], &[3, 4, 5]];
    ///     assert_eq!(mine, expected[me - 1]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn scatterv_in_place<'a, T: Element>(&self, buf: impl CollMut<'a, T>, counts: &[usize], displs: &[usize], root: usize) -> Collective<'a> {
        self.scatter_blocks::<T>(Ok(()), None, buf.values(), counts.to_vec(), displs.to_vec(), root, "scatterv_in_place")
    }

    /// [`allgatherv`](Comm::allgatherv) where each rank's own values
    /// already sit in its block of `buf` (`counts[r]` values at
    /// `displs[r]`), sent from there around the ring.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// // Rank r contributes r + 1 copies of r, already in its place.
    /// let me = comm.rank();
    /// let (counts, displs) = ([1, 2, 3], [0, 1, 3]);
    /// let mut all = [9u8; 6];
    /// all[displs[me]..displs[me] + counts[me]].fill(me as u8);
    /// comm.allgatherv_in_place(&mut all[..], &counts, &displs).await?;
    /// assert_eq!(all, [0, 1, 1, 2, 2, 2]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn allgatherv_in_place<'a, T: Element>(&self, buf: impl CollMut<'a, T>, counts: &[usize], displs: &[usize]) -> Collective<'a> {
        allgather_blocks::<T>(Call::start(self), Ok(()), None, buf.values(), counts.to_vec(), displs.to_vec(), "allgatherv_in_place")
    }
}

#[cfg(test)]
mod tests {
    use super::{binomial, blocks, Bruck, SMALL_ALLGATHER};

    /// Blocks of no values lie anywhere: past the buffer's end, at the
    /// largest displacement, over other blocks. Blocks of values are still
    /// checked against the buffer and, for receives, against each other.
    #[test]
    fn blocks_of_no_values_lie_anywhere() {
        assert_eq!(blocks("gatherv", 3, &[1, 0, 1], &[0, 5, 1], 2, true).unwrap(), [0..1, 0..0, 1..2]);
        assert_eq!(blocks("gatherv", 2, &[0, 0], &[usize::MAX, 7], 0, true).unwrap(), [0..0, 0..0]);
        assert_eq!(blocks("gatherv", 3, &[2, 0, 0], &[0, 1, 1], 2, true).unwrap(), [0..2, 0..0, 0..0]);
        assert_eq!(blocks("scatterv", 2, &[0, 2], &[usize::MAX, 0], 2, false).unwrap(), [0..0, 0..2]);
        assert!(blocks("gatherv", 3, &[1, 0, 1], &[0, 5, 2], 2, true).is_err(), "a block of a value past the end");
        assert!(blocks("gatherv", 3, &[1, 0, 1], &[1, 5, 1], 2, true).is_err(), "blocks that overlap");
        assert!(blocks("scatterv", 3, &[1, 0, 1], &[1, 5, 1], 2, false).is_ok(), "sends may overlap");
        assert!(blocks("scatterv", 2, &[0, 1], &[0, usize::MAX], 2, false).is_err());
    }

    /// Bruck's steps, simulated for every rank count up to 64: each rank
    /// sends only blocks it holds, what it sends is what its receiver
    /// expects (the same runs, in the same order), nothing arrives twice,
    /// and at the end every rank holds every block.
    #[test]
    fn bruck_steps_give_every_rank_every_block_once() {
        for n in 3..=64usize {
            let mut holds: Vec<Vec<bool>> = (0..n).map(|me| (0..n).map(|r| r == me).collect()).collect();
            for k in 0..Bruck::steps(n) {
                let mut arriving = vec![Vec::new(); n];
                for (me, held) in holds.iter().enumerate() {
                    let (m, above, _) = Bruck::step(n, me, k);
                    let sent: Vec<usize> = Bruck::runs(n, me, m).into_iter().flatten().collect();
                    assert_eq!(sent.len(), m, "n {n} rank {me} step {k}");
                    assert!(sent.iter().all(|&b| held[b]), "n {n} rank {me} step {k} sends a block it lacks");
                    // What the rank above expects from this one.
                    let (m_above, _, its_below) = Bruck::step(n, above, k);
                    assert_eq!((its_below, m_above), (me, m));
                    assert_eq!(Bruck::runs(n, its_below, m_above), Bruck::runs(n, me, m));
                    assert!(Bruck::runs(n, me, m).iter().all(|run| run.end <= n && run.start <= run.end));
                    arriving[above] = sent;
                }
                for (me, blocks) in arriving.into_iter().enumerate() {
                    for b in blocks {
                        assert!(!holds[me][b], "n {n} rank {me} step {k}: block {b} twice");
                        holds[me][b] = true;
                    }
                }
            }
            assert!(holds.iter().all(|h| h.iter().all(|&x| x)), "n {n}: a block missing");
        }
    }

    /// Bruck's algorithm takes blocks up to 8 KiB on 3 ranks or more.
    #[test]
    fn bruck_suits_small_blocks_on_three_ranks_or_more() {
        assert!(Bruck::suits(3, 1024, 8));
        assert!(Bruck::suits(64, SMALL_ALLGATHER as usize, 1));
        assert!(!Bruck::suits(3, 1025, 8), "8,200 bytes");
        assert!(!Bruck::suits(2, 1, 8), "2 ranks: the ring");
        assert!(!Bruck::suits(1, 1, 8));
        assert!(Bruck::suits(5, 0, 8), "empty blocks");
        assert!(!Bruck::suits(4, usize::MAX, 8), "no overflow");
    }

    /// Every rank but the root has one parent, the parent lists it as a
    /// child, and following parents reaches the root.
    #[test]
    fn binomial_trees_span_every_rank_once() {
        for n in 1..40 {
            for root in [0, n / 2, n - 1] {
                let trees: Vec<_> = (0..n).map(|me| binomial(n, root, me)).collect();
                for me in 0..n {
                    let (parent, _) = &trees[me];
                    assert_eq!(parent.is_none(), me == root, "n {n} root {root} rank {me}");
                    if let Some(p) = parent {
                        assert!(trees[*p].1.contains(&me));
                    }
                    let (mut at, mut hops) = (me, 0);
                    while let Some(p) = trees[at].0 {
                        at = p;
                        hops += 1;
                        assert!(hops <= n);
                    }
                    assert_eq!(at, root);
                }
                assert_eq!(trees.iter().map(|t| t.1.len()).sum::<usize>(), n - 1);
            }
        }
    }
}
