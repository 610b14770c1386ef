//! Cartesian topologies (MPI-4.1 §8.5): [`dims_create`], [`Cart`]
//! communicators with coordinates, shifts and sub-grids, and the neighbour
//! collectives over them.

use std::future::Future;
use std::ops::Deref;

use super::{sent, Call, CollMut, CollRef, Collective, Posted};
use crate::comm::{Comm, Peer};
use crate::datatype::{int, ints, Integer};
use crate::error::{Error, Result};
use crate::mpi_type::MpiType;

/// `MPI_Dims_create`: a grid of `nodes` ranks in `dims.len()` dimensions,
/// as close to cubic as it can be, with the dimensions that are not 0 in
/// `dims` kept as given; the others are filled in, in non-increasing order.
///
/// ```
/// use mpx::coll::dims_create;
/// assert_eq!(dims_create(12, &[0, 0])?, [4, 3]);
/// assert_eq!(dims_create(12, &[0, 2, 0])?, [3, 2, 2]);
/// assert!(dims_create(7, &[2, 0]).is_err(), "7 ranks in rows of 2");
/// assert!(dims_create(0, &[0, 0]).is_err(), "no ranks");
/// assert!(dims_create(4, &[usize::MAX / 2, 3]).is_err(), "more than can be counted");
/// // The largest prime below 2^32: one dimension of it, at once.
/// assert_eq!(dims_create(4_294_967_291, &[0, 0])?, [4_294_967_291, 1]);
/// # #[cfg(target_pointer_width = "64")]
/// assert!(dims_create(usize::MAX - 58, &[0]).is_err(), "ranks are numbered in 32 bits");
/// # Ok::<(), mpx::Error>(())
/// ```
pub fn dims_create(nodes: usize, dims: &[usize]) -> Result<Vec<usize>> {
    if nodes == 0 || u32::try_from(nodes).is_err() {
        // mpx numbers ranks in 32 bits.
        return Err(Error::InvalidArgument(format!("a grid of {nodes} ranks")));
    }
    let fixed = grid_size(dims.iter().copied().filter(|&d| d > 0));
    let free = dims.iter().filter(|&&d| d == 0).count();
    let Some(fixed) = fixed.filter(|&f| f > 0 && nodes.is_multiple_of(f) && (free > 0 || f == nodes)) else {
        return Err(Error::InvalidArgument(format!("{nodes} ranks do not fill a grid of {dims:?}")));
    };
    // Spread the prime factors of what is left over the free dimensions,
    // largest factor first onto the smallest dimension so far.
    let mut left = nodes / fixed;
    let mut factors = Vec::new();
    let mut p = 2;
    while p <= left / p {
        while left.is_multiple_of(p) {
            factors.push(p);
            left /= p;
        }
        p += 1;
    }
    if left > 1 {
        factors.push(left);
    }
    let mut filled = vec![1usize; free];
    for f in factors.into_iter().rev() {
        if let Some(smallest) = filled.iter_mut().min() {
            *smallest *= f;
        }
    }
    filled.sort_unstable_by(|a, b| b.cmp(a));
    let mut filled = filled.into_iter();
    Ok(dims.iter().map(|&d| if d > 0 { d } else { filled.next().unwrap_or(1) }).collect())
}

/// The number of ranks of a grid of `dims`, if it can be counted.
fn grid_size(dims: impl IntoIterator<Item = usize>) -> Option<usize> {
    dims.into_iter().try_fold(1usize, |n, d| n.checked_mul(d))
}

/// A communicator whose ranks form a grid (`MPI_Cart_create`): rank `r`
/// sits at the coordinates of `r` in row-major order. It dereferences to
/// its [`Comm`], so every operation of a communicator works on it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(6, |world| async move {
/// use mpx::Peer;
/// // 3 rows of 2, the rows wrapping around, the columns not.
/// let grid = world.cart_create(&[3, 2], &[true, false], false).await?.expect("6 ranks fill it");
/// let [row, col] = grid.coords(grid.rank())?[..] else { unreachable!() };
/// let (up, down) = grid.shift(0, 1)?;
/// assert_eq!(down, grid.rank_of(&[(row as i64 + 1), col as i64])?.into());
/// let (_, right) = grid.shift(1, 1)?;
/// assert_eq!(right == Peer::Null, col == 1, "no wrap along the rows");
/// # let _ = up;
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Cart {
    comm: Comm,
    dims: Vec<usize>,
    periods: Vec<bool>,
}

impl Deref for Cart {
    type Target = Comm;
    fn deref(&self) -> &Comm {
        &self.comm
    }
}

impl Comm {
    /// `MPI_Cart_create`: collective over this communicator. Its first
    /// `dims.iter().product()` ranks form a grid of `dims`, wrapping around
    /// along the dimensions whose `periods` entry is `true`; the others
    /// get `None`. `reorder` lets an implementation renumber ranks for a
    /// better fit to the machine; mpx keeps their order. A grid larger than
    /// the communicator is an error.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// // A ring of 2 out of 3 ranks: rank 2 is left out.
    /// match comm.cart_create(&[2], &[true], false).await? {
    ///     Some(ring) => assert_eq!((ring.rank(), ring.dims()), (comm.rank(), &[2][..])),
    ///     None => assert_eq!(comm.rank(), 2),
    /// }
    /// assert!(comm.cart_create(&[2, 2], &[false, false], false).await.is_err(), "4 ranks > 3");
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe: it is a collective (a [`split`](Comm::split)).
    pub fn cart_create(&self, dims: &[usize], periods: &[bool], reorder: bool) -> impl Future<Output = Result<Option<Cart>>> + Send + 'static {
        let _ = reorder;
        let (dims, periods) = (dims.to_vec(), periods.to_vec());
        let nodes = grid_size(dims.iter().copied());
        let comm = self.clone();
        let checked = if 2 * dims.len() > Call::SUBTAGS as usize {
            Err(Error::InvalidArgument(format!("a grid of {} dimensions (mpx takes up to {})", dims.len(), Call::SUBTAGS / 2)))
        } else if dims.len() != periods.len() {
            Err(Error::InvalidArgument(format!("{} dimensions, {} periodicity flags", dims.len(), periods.len())))
        } else if nodes.is_none_or(|n| n > self.size()) {
            let needs = nodes.map_or_else(|| "more than can be counted".to_string(), |n| n.to_string());
            Err(Error::InvalidArgument(format!("a grid of {dims:?} needs {needs} ranks, the communicator has {}", self.size())))
        } else {
            Ok(())
        };
        // The split starts now, like every collective.
        let color = (comm.rank() < nodes.unwrap_or(0)).then_some(0);
        // A rank whose arguments are wrong refuses the split: the others
        // fail it rather than wait for this rank.
        let split = checked.map(|()| comm.split(color, comm.rank() as i32)).map_err(|e| comm.refuse_split(e));
        async move {
            let grid = split?.await?;
            Ok(grid.map(|comm| Cart { comm, dims, periods }))
        }
    }
}

impl Cart {
    /// The communicator.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// use mpx::Comm;
    /// let grid = comm.cart_create(&[2, 2], &[false, false], false).await?.expect("4 ranks fill it");
    /// // A plain communicator over the grid's ranks, to keep without the topology.
    /// let plain: Comm = grid.comm().clone();
    /// assert_eq!((plain.rank(), plain.size()), (grid.rank(), 4));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// The grid's extent along each dimension.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// use mpx::coll::dims_create;
    /// let dims = dims_create(comm.size(), &[0, 0])?;
    /// let grid = comm.cart_create(&dims, &[false, false], false).await?.expect("fills the communicator");
    /// assert_eq!(grid.dims(), [2, 2]);
    /// assert_eq!(grid.dims().iter().product::<usize>(), grid.size());
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Which dimensions wrap around.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let grid = comm.cart_create(&[2, 2], &[true, false], false).await?.expect("4 ranks fill it");
    /// assert_eq!(grid.periods(), [true, false]);
    /// let row = grid.sub(&[false, true]).await?; // keep dimension 1
    /// assert_eq!(row.periods(), [false]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn periods(&self) -> &[bool] {
        &self.periods
    }

    /// `MPI_Cart_coords`: the coordinates of `rank`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(6, |comm| async move {
    /// let grid = comm.cart_create(&[2, 3], &[false, false], false).await?.expect("6 ranks fill it");
    /// assert_eq!(grid.coords(4)?, [1, 1]); // row-major: 4 = 1 * 3 + 1
    /// assert_eq!(grid.rank_of(&[1, 1])?, 4);
    /// assert!(grid.coords(6).is_err(), "not a rank of the grid");
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn coords(&self, rank: usize) -> Result<Vec<usize>> {
        if rank >= self.size() {
            return Err(Error::InvalidRank { rank, size: self.size() });
        }
        let mut left = rank;
        let mut coords = vec![0; self.dims.len()];
        for (c, &d) in coords.iter_mut().zip(&self.dims).rev() {
            *c = left % d;
            left /= d;
        }
        Ok(coords)
    }

    /// `MPI_Cart_rank`: the rank at `coords`, in any integer type (the
    /// `usize` coordinates [`coords`](Cart::coords) gives, or signed ones
    /// that step past an edge), which wrap around along periodic
    /// dimensions; off the grid along another is an error.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let grid = comm.cart_create(&[2, 2], &[true, false], false).await?.expect("4 ranks fill it");
    /// assert_eq!(grid.rank_of(&[1, 0])?, 2); // row-major: 2 = 1 * 2 + 0
    /// assert_eq!(grid.rank_of(&[-1, 1])?, 3, "dimension 0 wraps around");
    /// assert!(grid.rank_of(&[0, 2]).is_err(), "dimension 1 does not");
    /// assert_eq!(grid.rank_of(&grid.coords(3)?)?, 3);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn rank_of<I: Integer>(&self, coords: &[I]) -> Result<usize> {
        let coords = ints("coordinate", coords)?;
        self.try_rank_of(&coords)?.ok_or_else(|| Error::InvalidArgument(format!("{coords:?} is off the grid {:?}", self.dims)))
    }

    fn try_rank_of(&self, coords: &[i64]) -> Result<Option<usize>> {
        if coords.len() != self.dims.len() {
            return Err(Error::InvalidArgument(format!("{} coordinates for a grid of {} dimensions", coords.len(), self.dims.len())));
        }
        let mut rank = 0usize;
        for ((&c, &d), &periodic) in coords.iter().zip(&self.dims).zip(&self.periods) {
            let d = d as i64;
            let c = if periodic { c.rem_euclid(d) } else { c };
            if !(0..d).contains(&c) {
                return Ok(None);
            }
            rank = rank * d as usize + c as usize;
        }
        Ok(Some(rank))
    }

    /// `MPI_Cart_shift`: the ranks `disp` steps behind and ahead of this
    /// one along dimension `dim`, as `(source, dest)`: a send to `dest`
    /// and a receive from `source` shift data by `disp`. Off the edge of a
    /// dimension that does not wrap, the neighbour is
    /// [`PROC_NULL`](crate::PROC_NULL). `disp` is any integer type.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// use mpx::Peer;
    /// let line = comm.cart_create(&[3], &[false], false).await?.expect("3 ranks fill it");
    /// let (source, dest) = line.shift(0, 1)?;
    /// let r = line.rank();
    /// assert_eq!(source, if r == 0 { Peer::Null } else { Peer::Rank(r - 1) });
    /// assert_eq!(dest, if r == 2 { Peer::Null } else { Peer::Rank(r + 1) });
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn shift(&self, dim: usize, disp: impl Integer) -> Result<(Peer, Peer)> {
        if dim >= self.dims.len() {
            return Err(Error::InvalidArgument(format!("dimension {dim} of a grid of {}", self.dims.len())));
        }
        let disp = int("displacement", disp)?;
        // A step of a whole period or more lands where its remainder does
        // (periodic) or off the grid (not): keep it small.
        let period = self.dims[dim] as i64;
        let disp = if self.periods[dim] { disp.rem_euclid(period) } else { disp.clamp(-period, period) };
        let here: Vec<i64> = self.coords(self.rank())?.into_iter().map(|c| c as i64).collect();
        let at = |delta: i64| -> Result<Peer> {
            let mut c = here.clone();
            c[dim] += delta;
            Ok(self.try_rank_of(&c)?.map_or(Peer::Null, Peer::Rank))
        };
        Ok((at(-disp)?, at(disp)?))
    }

    /// `MPI_Cart_sub`: collective over the grid. Keeps the dimensions
    /// whose `remain` entry is `true`: each rank gets the sub-grid of the
    /// ranks that share its coordinates along the others.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(6, |comm| async move {
    /// let grid = comm.cart_create(&[2, 3], &[false, true], false).await?.expect("6 ranks fill it");
    /// let row = grid.sub(&[false, true]).await?; // keep dimension 1: this rank's row
    /// assert_eq!((row.dims(), row.periods()), (&[3][..], &[true][..]));
    /// assert_eq!(row.rank(), grid.coords(grid.rank())?[1]); // ranked by column
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe: it is a collective (a [`split`](Comm::split)).
    pub fn sub(&self, remain: &[bool]) -> impl Future<Output = Result<Cart>> + Send + 'static {
        let cart = self.clone();
        let remain = remain.to_vec();
        // The split starts now, like every collective.
        let split = (|| {
            if remain.len() != cart.dims.len() {
                return Err(Error::InvalidArgument(format!("{} flags for a grid of {} dimensions", remain.len(), cart.dims.len())));
            }
            let coords = cart.coords(cart.rank())?;
            // Ranks that agree on every dropped coordinate share a sub-grid.
            let color = coords.iter().zip(&cart.dims).zip(&remain).filter(|(_, &keep)| !keep).fold(0usize, |acc, ((&c, &d), _)| acc * d + c);
            Ok(cart.comm.split(Some(color as u32), cart.rank() as i32))
        })()
        .map_err(|e| cart.comm.refuse_split(e));
        async move {
            let comm = split?.await?.expect("a color was given");
            fn keep<X: Copy>(v: &[X], remain: &[bool]) -> Vec<X> {
                v.iter().zip(remain).filter(|(_, &k)| k).map(|(x, _)| *x).collect()
            }
            Ok(Cart { comm, dims: keep(&cart.dims, &remain), periods: keep(&cart.periods, &remain) })
        }
    }

    /// The neighbours of the neighbour collectives, in MPI's order: along
    /// each dimension, the one behind, then the one ahead.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// use mpx::Peer;
    /// let grid = comm.cart_create(&[2, 2], &[true, false], false).await?.expect("4 ranks fill it");
    /// assert_eq!(grid.neighbors()?.len(), 4); // 2 per dimension
    /// if grid.rank() == 0 { // at [0, 0]
    ///     assert_eq!(grid.neighbors()?, [Peer::Rank(2), Peer::Rank(2), Peer::Null, Peer::Rank(1)]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn neighbors(&self) -> Result<Vec<Peer>> {
        (0..self.dims.len()).try_fold(Vec::new(), |mut all, d| {
            let (behind, ahead) = self.shift(d, 1)?;
            all.extend([behind, ahead]);
            Ok(all)
        })
    }

    /// `MPI_Neighbor_allgather`: this rank's `send` goes to each neighbour
    /// (see [`neighbors`](Cart::neighbors)), and the `k`-th block of `recv`
    /// (2 × dimensions × `send.len()` values) gets the `k`-th neighbour's;
    /// the blocks of [`PROC_NULL`](crate::PROC_NULL) neighbours are left as
    /// they are.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |world| async move {
    /// let line = world.cart_create(&[3], &[false], false).await?.expect("a line");
    /// let mut around = [usize::MAX; 2];
    /// line.neighbor_allgather(&line.rank(), &mut around[..]).await?;
    /// let behind = line.rank().checked_sub(1).unwrap_or(usize::MAX);
    /// let ahead = if line.rank() == 2 { usize::MAX } else { line.rank() + 1 };
    /// assert_eq!(around, [behind, ahead]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`Comm::bcast`]).
    pub fn neighbor_allgather<'a, 's, T: MpiType>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>) -> Collective<'a> {
        let send = send.values();
        let blocks = 2 * self.dims.len();
        let out: Vec<&[T]> = vec![send; blocks];
        self.neighbor_exchange(&out, recv.values(), send.len())
    }

    /// `MPI_Neighbor_alltoall`: block `k` of `send` (2 × dimensions × c
    /// values) goes to the `k`-th neighbour, and block `k` of `recv` gets
    /// what the `k`-th neighbour sent this rank.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |world| async move {
    /// let ring = world.cart_create(&[4], &[true], false).await?.expect("4 ranks fill it");
    /// let r = ring.rank();
    /// let mut got = [0usize; 2];
    /// ring.neighbor_alltoall(&[10 * r, 10 * r + 1][..], &mut got[..]).await?; // to behind, to ahead
    /// // Behind sent its block 1 (ahead) here, ahead its block 0 (behind).
    /// assert_eq!(got, [10 * ((r + 3) % 4) + 1, 10 * ((r + 1) % 4)]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`Comm::bcast`]).
    pub fn neighbor_alltoall<'a, 's, T: MpiType>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>) -> Collective<'a> {
        let send = send.values();
        let blocks = 2 * self.dims.len();
        let count = send.len() / blocks.max(1);
        let out: Vec<&[T]> = if send.len() == count * blocks { send.chunks(count.max(1)).take(blocks).collect() } else { Vec::new() };
        self.neighbor_exchange(&out, recv.values(), count)
    }

    /// Sends `out[k]` to neighbour `k` and receives `count` values from
    /// each into block `k` of `recv`. Each message carries the direction it
    /// travels in, so two neighbours that are the same rank (a periodic
    /// dimension of 1 or 2) still fill the right blocks.
    fn neighbor_exchange<'a, T: MpiType>(&self, out: &[&[T]], recv: &'a mut [T], count: usize) -> Collective<'a> {
        let mut call = Call::start(&self.comm);
        let dims = self.dims.len();
        call.subtags = 2 * dims;
        let started = (|| -> Result<_> {
            let neighbors = self.neighbors()?;
            if out.len() != 2 * dims || out.iter().any(|b| b.len() != count) {
                return Err(Error::InvalidArgument(format!("the send buffer holds no {} blocks of {count}", 2 * dims)));
            }
            let needed = count.checked_mul(2 * dims).ok_or(Error::Overflow("the neighbour collective's receive buffer"))?;
            super::check_len("the neighbour collective's receive buffer", recv.len(), needed)?;
            // Block k = 2d (behind) receives what that neighbour sent ahead
            // (direction 2d + 1), and block 2d + 1 what was sent behind.
            let mut posted: Vec<(usize, Posted)> = Vec::new();
            for (k, peer) in neighbors.iter().enumerate() {
                if let Peer::Rank(r) = *peer {
                    posted.push((k, call.post_direction::<T>(r, count, k ^ 1)?));
                }
            }
            let sends: Vec<_> = neighbors
                .iter()
                .enumerate()
                .filter_map(|(k, peer)| match *peer {
                    Peer::Rank(r) => Some(call.send_direction(out[k], r, k)),
                    _ => None,
                })
                .collect();
            Ok((posted, sends))
        })();
        Collective::new(call.clone(), async move {
            let (posted, sends) = started?;
            for (k, p) in posted {
                p.into(&mut recv[k * count..(k + 1) * count]).await?;
            }
            sent(sends).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::dims_create;

    #[test]
    fn dims_fill_the_grid_as_evenly_as_they_can() {
        for (nodes, dims, want) in [
            (6, vec![0, 0], vec![3, 2]),
            (7, vec![0, 0], vec![7, 1]),
            (6, vec![0, 3, 0], vec![2, 3, 1]),
            (24, vec![0, 0, 0], vec![4, 3, 2]),
            (1, vec![0], vec![1]),
            (16, vec![0, 0], vec![4, 4]),
            (8, vec![2, 4], vec![2, 4]),
        ] {
            assert_eq!(dims_create(nodes, &dims).unwrap(), want, "{nodes} over {dims:?}");
        }
        assert!(dims_create(8, &[3, 0]).is_err());
        assert!(dims_create(8, &[2, 2]).is_err());
    }
}
