//! Collectives that move data without combining it: `bcast`, `gather`,
//! `scatter`, `allgather`, `alltoall` and their `v` forms.

use std::ops::Range;

use super::{check_len, sent, Call, CollMut, CollRef, Collective, Posted};
use crate::comm::Comm;
use crate::error::{Error, Result};
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
    /// Posts this rank's part of a broadcast of `count` values from
    /// `root`; the root's `data`, when given, goes out now.
    pub(super) fn start<T: MpiType>(call: &Call, root: usize, count: usize, data: Option<&[T]>) -> Result<Bcast> {
        let (parent, children) = binomial(call.size(), root, call.rank());
        let from_parent = parent.map(|p| call.post::<T>(p, count)).transpose()?;
        let sends = match data {
            Some(values) if from_parent.is_none() => children.iter().map(|&c| call.send(values, c)).collect(),
            _ => Vec::new(),
        };
        Ok(Bcast { from_parent, children, sends })
    }

    /// Receives into `buf` (except at the root, whose `buf` holds the data)
    /// and passes it on.
    pub(super) async fn finish<T: MpiType>(self, call: &Call, buf: &mut [T]) -> Result<()> {
        let Bcast { from_parent, children, mut sends } = self;
        if let Some(posted) = from_parent {
            posted.into(buf).await?;
        }
        if sends.is_empty() {
            sends = children.iter().map(|&c| call.send(buf, c)).collect();
        }
        sent(sends).await
    }
}

/// `count` values at `displ` of a buffer of `len`, checked.
fn block(what: &str, displ: usize, count: usize, len: usize) -> Result<Range<usize>> {
    let end = displ.checked_add(count).filter(|&e| e <= len);
    end.map(|e| displ..e).ok_or_else(|| Error::InvalidArgument(format!("{what}: {count} values at {displ} overrun a buffer of {len}")))
}

/// The blocks `counts` and `displs` lay over a buffer of `len`, one per
/// rank; with `disjoint`, blocks that overlap are an error (a receive
/// would write some values twice).
fn blocks(what: &str, n: usize, counts: &[usize], displs: &[usize], len: usize, disjoint: bool) -> Result<Vec<Range<usize>>> {
    if counts.len() != n || displs.len() != n {
        return Err(Error::InvalidArgument(format!("{what}: {} counts and {} displacements for {n} ranks", counts.len(), displs.len())));
    }
    let ranges = (0..n).map(|r| block(what, displs[r], counts[r], len)).collect::<Result<Vec<_>>>()?;
    if disjoint {
        let mut sorted: Vec<&Range<usize>> = ranges.iter().filter(|r| !r.is_empty()).collect();
        sorted.sort_by_key(|r| r.start);
        if let Some(w) = sorted.windows(2).find(|w| w[0].end > w[1].start) {
            return Err(Error::InvalidArgument(format!("{what}: blocks {:?} and {:?} overlap", w[0], w[1])));
        }
    }
    Ok(ranges)
}

/// Evenly sized blocks: `count` values for each of `n` ranks.
fn even(n: usize, count: usize) -> (Vec<usize>, Vec<usize>) {
    (vec![count; n], (0..n).map(|r| r * count).collect())
}

/// `rank`'s block of `values`, by the layout `ranges`.
fn piece<'v, T>(values: &'v mut [T], ranges: &[Range<usize>], rank: usize) -> &'v mut [T] {
    &mut values[ranges[rank].clone()]
}

impl Comm {
    /// `MPI_Bcast`: the root's `buf` is copied into every other rank's
    /// `buf`, which must hold as many values (a binomial tree).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx_core::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let mut settings = if comm.rank() == 2 { [1.5, 7.0] } else { [0.0; 2] };
    /// comm.bcast(&mut settings, 2).await?;
    /// assert_eq!(settings, [1.5, 7.0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe: dropped before it finishes, this rank leaves the
    /// broadcast unfinished, and ranks below it in the tree wait in vain.
    pub fn bcast<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>, root: usize) -> Collective<'a> {
        let buf = buf.values();
        let call = Call::start(self);
        let started = call.check_root(root).and_then(|()| Bcast::start(&call, root, buf.len(), Some(&*buf)));
        Collective::new(call.clone(), async move { started?.finish(&call, buf).await })
    }

    /// `MPI_Gather`: each rank's `send` goes to the root, which receives
    /// rank `r`'s values into block `r` of `recv` (size × `send.len()`
    /// values; ignored, and may be empty, on other ranks).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx_core::Result<()> {
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
    pub fn gather<'a, 's, T: MpiType>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>, root: usize) -> Collective<'a> {
        let send = send.values();
        let (counts, displs) = even(self.size(), send.len());
        self.gather_blocks(send, recv.values(), counts, displs, root, "gather")
    }

    /// `MPI_Gatherv`: as [`gather`](Comm::gather), rank `r`'s values
    /// landing in `counts[r]` values at `displs[r]` of the root's `recv`
    /// (blocks that must not overlap). `counts` and `displs` matter at the
    /// root only; every other rank sends its `send`, whose length must be
    /// the root's `counts[r]`.
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn gatherv<'a, 's, T: MpiType>(
        &self,
        send: impl CollRef<'s, T>,
        recv: impl CollMut<'a, T>,
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Collective<'a> {
        self.gather_blocks(send.values(), recv.values(), counts.to_vec(), displs.to_vec(), root, "gatherv")
    }

    fn gather_blocks<'a, T: MpiType>(
        &self,
        send: &[T],
        recv: &'a mut [T],
        counts: Vec<usize>,
        displs: Vec<usize>,
        root: usize,
        what: &'static str,
    ) -> Collective<'a> {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        let started = (|| -> Result<_> {
            call.check_root(root)?;
            if me != root {
                return Ok((Vec::new(), vec![call.send(send, root)], Vec::new()));
            }
            let ranges = blocks(what, n, &counts, &displs, recv.len(), true)?;
            check_len(&format!("{what}: the root's own send"), send.len(), counts[me])?;
            let posted = (0..n).filter(|&r| r != me).map(|r| Ok((r, call.post::<T>(r, counts[r])?))).collect::<Result<Vec<_>>>()?;
            piece(recv, &ranges, me).copy_from_slice(send);
            Ok((posted, Vec::new(), ranges))
        })();
        Collective::new(call.clone(), async move {
            let (posted, sends, ranges) = started?;
            for (r, p) in posted {
                p.into(piece(recv, &ranges, r)).await?;
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
    /// # async fn main() -> mpx_core::Result<()> {
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
    pub fn scatter<'a, 's, T: MpiType>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>, root: usize) -> Collective<'a> {
        let recv = recv.values();
        let (counts, displs) = even(self.size(), recv.len());
        self.scatter_blocks(send.values(), recv, counts, displs, root, "scatter")
    }

    /// `MPI_Scatterv`: as [`scatter`](Comm::scatter), rank `r` getting
    /// `counts[r]` values at `displs[r]` of the root's `send` (`counts`
    /// and `displs` matter at the root only; each rank's `recv` must hold
    /// its count).
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn scatterv<'a, 's, T: MpiType>(
        &self,
        send: impl CollRef<'s, T>,
        counts: &[usize],
        displs: &[usize],
        recv: impl CollMut<'a, T>,
        root: usize,
    ) -> Collective<'a> {
        self.scatter_blocks(send.values(), recv.values(), counts.to_vec(), displs.to_vec(), root, "scatterv")
    }

    fn scatter_blocks<'a, T: MpiType>(
        &self,
        send: &[T],
        recv: &'a mut [T],
        counts: Vec<usize>,
        displs: Vec<usize>,
        root: usize,
        what: &'static str,
    ) -> Collective<'a> {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        let started = (|| -> Result<_> {
            call.check_root(root)?;
            if me != root {
                return Ok((Some(call.post::<T>(root, recv.len())?), Vec::new()));
            }
            // Blocks read by several sends may overlap.
            let ranges = blocks(what, n, &counts, &displs, send.len(), false)?;
            check_len(&format!("{what}: the root's own receive"), recv.len(), counts[me])?;
            recv.copy_from_slice(&send[ranges[me].clone()]);
            let sends = (0..n).filter(|&r| r != me).map(|r| call.send(&send[ranges[r].clone()], r)).collect();
            Ok((None, sends))
        })();
        Collective::new(call.clone(), async move {
            let (posted, sends) = started?;
            if let Some(p) = posted {
                p.into(recv).await?;
            }
            sent(sends).await
        })
    }

    /// `MPI_Allgather`: every rank's `send` lands in block `r` (its rank)
    /// of every rank's `recv` (size × `send.len()` values), around a ring.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx_core::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let mut all = [0usize; 3];
    /// comm.allgather(&comm.rank(), &mut all[..]).await?;
    /// assert_eq!(all, [0, 1, 2]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn allgather<'a, 's, T: MpiType>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>) -> Collective<'a> {
        let send = send.values();
        let (counts, displs) = even(self.size(), send.len());
        self.allgather_blocks(Ok(()), send, recv.values(), counts, displs, "allgather")
    }

    /// `MPI_Allgatherv`: as [`allgather`](Comm::allgather), rank `r`'s
    /// `counts[r]` values landing at `displs[r]` of every `recv` (blocks
    /// that must not overlap; the same `counts` and `displs` on every rank).
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn allgatherv<'a, 's, T: MpiType>(
        &self,
        send: impl CollRef<'s, T>,
        recv: impl CollMut<'a, T>,
        counts: &[usize],
        displs: &[usize],
    ) -> Collective<'a> {
        self.allgather_blocks(Ok(()), send.values(), recv.values(), counts.to_vec(), displs.to_vec(), "allgatherv")
    }

    fn allgather_blocks<'a, T: MpiType>(
        &self,
        checked: Result<()>,
        send: &[T],
        recv: &'a mut [T],
        counts: Vec<usize>,
        displs: Vec<usize>,
        what: &'static str,
    ) -> Collective<'a> {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        let (left, right) = ((me + n - 1) % n, (me + 1) % n);
        let started = (|| -> Result<_> {
            checked?;
            let ranges = blocks(what, n, &counts, &displs, recv.len(), true)?;
            check_len(&format!("{what}: this rank's send"), send.len(), counts[me])?;
            // Step k brings the block of rank me - k - 1 from the left.
            let posted = (0..n - 1).map(|k| call.post::<T>(left, counts[(me + 2 * n - k - 1) % n])).collect::<Result<Vec<_>>>()?;
            let first = (n > 1).then(|| call.send(send, right));
            piece(recv, &ranges, me).copy_from_slice(send);
            Ok((ranges, posted, first))
        })();
        Collective::new(call.clone(), async move {
            let (ranges, posted, first) = started?;
            let mut sends: Vec<Request<'static>> = first.into_iter().collect();
            for (k, p) in posted.into_iter().enumerate() {
                let owner = (me + 2 * n - k - 1) % n;
                p.into(piece(recv, &ranges, owner)).await?;
                if k + 2 < n {
                    sends.push(call.send(piece(recv, &ranges, owner), right));
                }
            }
            sent(sends).await
        })
    }

    /// `MPI_Alltoall`: block `r` of each rank's `send` (size × c values)
    /// goes to rank `r`, landing in block `s` (the sender's rank) of its
    /// `recv` (size × c values too).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx_core::Result<()> {
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
    pub fn alltoall<'a, 's, T: MpiType>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>) -> Collective<'a> {
        let (send, recv) = (send.values(), recv.values());
        let n = self.size();
        let count = send.len() / n.max(1);
        let (counts, displs) = even(n, count);
        let checked = check_len("alltoall: the send buffer", send.len(), n * count)
            .and_then(|()| check_len("alltoall: the receive buffer", recv.len(), n * count));
        self.alltoall_blocks(checked, send, counts.clone(), displs.clone(), recv, counts, displs, "alltoall")
    }

    /// `MPI_Alltoallv`: `scounts[r]` values at `sdispls[r]` of each rank's
    /// `send` go to rank `r`, landing at `rdispls[s]` of its `recv`, where
    /// `rcounts[s]` must equal the sender's `scounts[r]`.
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallv<'a, 's, T: MpiType>(
        &self,
        send: impl CollRef<'s, T>,
        scounts: &[usize],
        sdispls: &[usize],
        recv: impl CollMut<'a, T>,
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Collective<'a> {
        self.alltoall_blocks(Ok(()), send.values(), scounts.to_vec(), sdispls.to_vec(), recv.values(), rcounts.to_vec(), rdispls.to_vec(), "alltoallv")
    }

    #[allow(clippy::too_many_arguments)]
    fn alltoall_blocks<'a, T: MpiType>(
        &self,
        checked: Result<()>,
        send: &[T],
        scounts: Vec<usize>,
        sdispls: Vec<usize>,
        recv: &'a mut [T],
        rcounts: Vec<usize>,
        rdispls: Vec<usize>,
        what: &'static str,
    ) -> Collective<'a> {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        let started = (|| -> Result<_> {
            checked?;
            let out = blocks(what, n, &scounts, &sdispls, send.len(), false)?;
            let into = blocks(what, n, &rcounts, &rdispls, recv.len(), true)?;
            check_len(&format!("{what}: this rank's block to itself"), rcounts[me], scounts[me])?;
            // Each rank starts with its right neighbour, so that the ranks
            // do not all send to rank 0 first.
            let order: Vec<usize> = (1..n).map(|k| (me + k) % n).collect();
            let posted = order.iter().map(|&r| Ok((r, call.post::<T>(r, rcounts[r])?))).collect::<Result<Vec<_>>>()?;
            let sends = order.iter().rev().map(|&r| call.send(&send[out[r].clone()], r)).collect();
            piece(recv, &into, me).copy_from_slice(&send[out[me].clone()]);
            Ok((into, posted, sends))
        })();
        Collective::new(call.clone(), async move {
            let (into, posted, sends) = started?;
            for (r, p) in posted {
                p.into(piece(recv, &into, r)).await?;
            }
            sent(sends).await
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
    /// # async fn main() -> mpx_core::Result<()> {
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
        let (counts, displs) = even(n, count);
        let checked = check_len("allgather_in_place: the buffer", buf.len(), n * count);
        self.allgather_blocks(checked, &mine, buf, counts, displs, "allgather_in_place")
    }

    /// [`alltoall`](Comm::alltoall) where `buf` (size × c values) holds the
    /// blocks to send and receives the blocks that come.
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn alltoall_in_place<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>) -> Collective<'a> {
        let buf = buf.values();
        let mine = buf.to_vec();
        self.alltoall(&mine[..], buf)
    }
}

#[cfg(test)]
mod tests {
    use super::binomial;

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
