//! Cartesian topologies (MPI-4.1 §8.5): [`dims_create`], [`Cart`]
//! communicators with coordinates, shifts and sub-grids, and the neighbour
//! collectives over them.

use std::future::Future;
use std::ops::Deref;

use super::{sent, Call, CollMut, CollRef, Collective, Posted};
use crate::comm::{derive_context, Comm, Peer};
use crate::datatype::{int, ints, Integer};
use crate::error::{ErrorKind, Result};
use crate::mpi_type::MpiType;

/// `MPI_Dims_create`: a grid of `nodes` ranks in `dims.len()` dimensions,
/// with the dimensions that are not 0 in `dims` kept as given and the
/// others (the free ones) filled in, in non-increasing order, as close to
/// each other as they can be. Precisely: of every way to write the ranks
/// left for the free dimensions (`nodes` over the product of the kept
/// ones) as a product of that many factors in non-increasing order, the
/// free dimensions get one whose largest factor minus its smallest is
/// least, and of those the lexicographically smallest (the smallest
/// largest dimension, then the smallest second, and so on): "as close to
/// each other as possible", in MPI-4.1 §8.5.2's words, made exact. Kept
/// dimensions whose product does not divide `nodes` are an error, as are
/// kept dimensions alone (none free) whose product is not `nodes`.
///
/// ```
/// use mpx::coll::dims_create;
/// assert_eq!(dims_create(12, &[0, 0])?, [4, 3]);
/// assert_eq!(dims_create(72, &[0, 0])?, [9, 8]);
/// // [4, 2, 2] (a spread of 2) rather than [4, 4, 1] (3) or [8, 2, 1] (7).
/// assert_eq!(dims_create(16, &[0, 0, 0])?, [4, 2, 2]);
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
        return Err(ErrorKind::InvalidArgument(format!("a grid of {nodes} ranks")).into());
    }
    let fixed = grid_size(dims.iter().copied().filter(|&d| d > 0));
    let free = dims.iter().filter(|&&d| d == 0).count();
    let Some(fixed) = fixed.filter(|&f| f > 0 && nodes.is_multiple_of(f) && (free > 0 || f == nodes)) else {
        return Err(ErrorKind::InvalidArgument(format!("{nodes} ranks do not fill a grid of {dims:?}")).into());
    };
    // `nodes` fits in 32 bits, and so does each factor of it: both casts
    // are exact.
    let mut filled = balanced_factors((nodes / fixed) as u64, free).into_iter();
    Ok(dims.iter().map(|&d| if d > 0 { d } else { filled.next().map_or(1, |f| f as usize) }).collect())
}

/// The `k` factors of `m` (1 or more) that [`dims_create`] gives its free
/// dimensions: in non-increasing order, the largest minus the smallest
/// least, and of those products the lexicographically smallest.
///
/// A depth-first search over the divisors of `m`, the smallest first at
/// every position, which finds products in lexicographic order: it keeps a
/// product only if it narrows the best spread so far (so of equal spreads
/// it keeps the first), and prunes every branch that cannot narrow it.
/// Each factor after the first is at most the one before it and, with
/// `j` factors left to choose for `r`, at least the `j`-th root of `r`;
/// none exceeds the first or falls a whole best spread below it; and
/// what is left must have no prime factor above the factor just chosen.
/// Past one factor per prime factor of `m`, the factors are all 1 and the
/// search does not go on. Even for the most composite `m` below 2^32 it
/// visits some hundreds of branches.
fn balanced_factors(m: u64, k: usize) -> Vec<u64> {
    if k == 0 {
        return Vec::new();
    }
    let primes = prime_factors(m);
    // At most one factor per prime factor (counted with multiplicity)
    // exceeds 1. With more slots than that, the smallest factor is 1
    // whatever the others, and the products are those of one slot more
    // than there are prime factors, padded with 1s, in the same order by
    // spread and lexicographically: the search fills that many slots.
    let slots = k.min(primes.len() + 1);
    let mut divisors = vec![1u64];
    for run in primes.chunk_by(|a, b| a == b) {
        let p = run[0];
        let grown: Vec<u64> = divisors.iter().flat_map(|&d| (1..=run.len() as u32).map(move |e| d * p.pow(e))).collect();
        divisors.extend(grown);
    }
    divisors.sort_unstable();
    let mut distinct = primes;
    distinct.dedup();
    distinct.reverse();
    let search = Balance { divisors, largest_first: distinct };
    let mut path = Vec::with_capacity(slots);
    let mut best: Best = None;
    let largest_prime = search.largest_prime(m);
    for &first in &search.divisors {
        if best.is_some() && power(Balance::floor(first, &best), slots) > m {
            // Every factor of a narrower product lies within the floor and
            // `first`, so `first` is too large to narrow it, and so is
            // every larger one.
            break;
        }
        if power(first, slots) < m || first < largest_prime {
            continue;
        }
        path.push(first);
        search.extend(m / first, slots - 1, &mut path, &mut best);
        path.pop();
    }
    // `first = m` always completes a product (m, 1, …, 1).
    let mut factors = best.map(|(_, factors)| factors).unwrap_or_default();
    factors.resize(k, 1);
    factors
}

/// The divisors and prime factors of [`balanced_factors`]'s product.
struct Balance {
    /// In increasing order.
    divisors: Vec<u64>,
    /// The distinct prime factors, largest first.
    largest_first: Vec<u64>,
}

/// The best product found so far: its spread (largest factor minus
/// smallest) and its factors.
type Best = Option<(u64, Vec<u64>)>;

impl Balance {
    /// The least factor of a product whose largest is `first` that is
    /// narrower than `best`.
    fn floor(first: u64, best: &Best) -> u64 {
        best.as_ref().map_or(1, |(spread, _)| (first + 1).saturating_sub(*spread).max(1))
    }

    /// The largest prime factor of `r` (a divisor of the product), 1 for 1.
    fn largest_prime(&self, r: u64) -> u64 {
        self.largest_first.iter().copied().find(|&p| r.is_multiple_of(p)).unwrap_or(1)
    }

    /// Completes `path` (non-empty, non-increasing) with `slots` more
    /// factors of product `rest`, recording in `best` each product
    /// narrower than it.
    fn extend(&self, rest: u64, slots: usize, path: &mut Vec<u64>, best: &mut Best) {
        let (Some(&first), Some(&prev)) = (path.first(), path.last()) else { return };
        let floor = Balance::floor(first, best);
        if rest == 1 {
            // The remaining factors are all 1.
            let least = if slots > 0 { 1 } else { prev };
            if least >= floor {
                let mut factors = path.clone();
                factors.resize(path.len() + slots, 1);
                *best = Some((first - least, factors));
            }
            return;
        }
        if slots == 0 || self.largest_prime(rest) > prev {
            return;
        }
        if slots == 1 {
            if (floor..=prev).contains(&rest) {
                let mut factors = path.clone();
                factors.push(rest);
                *best = Some((first - rest, factors));
            }
            return;
        }
        let start = self.divisors.partition_point(|&d| d < floor);
        // Once a factor's `slots`-th power reaches `rest`, so do the larger ones'.
        let mut large_enough = false;
        for &a in &self.divisors[start..] {
            // The floor rises as narrower products turn up.
            let floor = Balance::floor(first, best);
            if a > prev || rest / a < power(floor, slots - 1) {
                // What `a` leaves cannot fill the other slots with factors
                // of at least the floor, nor can a larger factor's.
                break;
            }
            if a < floor || !rest.is_multiple_of(a) {
                continue;
            }
            large_enough = large_enough || power(a, slots) >= rest;
            if !large_enough {
                continue;
            }
            path.push(a);
            self.extend(rest / a, slots - 1, path, best);
            path.pop();
        }
    }
}

/// `base` to the power `exp`, or `u64::MAX` if larger.
fn power(base: u64, exp: usize) -> u64 {
    (0..exp).try_fold(1u64, |p, _| p.checked_mul(base)).unwrap_or(u64::MAX)
}

/// The prime factors of `m`, with multiplicity, in increasing order.
fn prime_factors(mut m: u64) -> Vec<u64> {
    let mut primes = Vec::new();
    let mut p = 2;
    while p <= m / p {
        while m.is_multiple_of(p) {
            primes.push(p);
            m /= p;
        }
        p += 1;
    }
    if m > 1 {
        primes.push(m);
    }
    primes
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
    /// the communicator, with a dimension of 0, or of more than 32
    /// dimensions (MPI sets no limit; mpx numbers a neighbour exchange's
    /// directions within one call's 64 sub-tags) is an error, and ranks of
    /// the grid that passed different shapes fail with
    /// [`ErrorKind::CollectiveMismatch`] (their neighbour exchanges would
    /// wait for each other for ever).
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
        let checked: Result<()> = if 2 * dims.len() > Call::SUBTAGS as usize {
            Err(ErrorKind::InvalidArgument(format!("a grid of {} dimensions (mpx takes up to {})", dims.len(), Call::SUBTAGS / 2)).into())
        } else if dims.len() != periods.len() {
            Err(ErrorKind::InvalidArgument(format!("{} dimensions, {} periodicity flags", dims.len(), periods.len())).into())
        } else if dims.contains(&0) {
            Err(ErrorKind::InvalidArgument(format!("a grid of {dims:?}: every dimension needs at least one rank")).into())
        } else if nodes.is_none_or(|n| n > self.size()) {
            let needs = nodes.map_or_else(|| "more than can be counted".to_string(), |n| n.to_string());
            Err(ErrorKind::InvalidArgument(format!("a grid of {dims:?} needs {needs} ranks, the communicator has {}", self.size())).into())
        } else {
            Ok(())
        };
        // Every rank checks that all agree on the grid's shape (ranks that
        // disagree would take each other's neighbours for others, and wait
        // for ever in a neighbour exchange; or leave themselves out of a
        // grid the others count them in): an allgather of its digest, then
        // the split, both started now, like every collective.
        let mine = shape_digest(&dims, &periods);
        let shapes = comm.allgather_owned(mine);
        let color = (comm.rank() < nodes.unwrap_or(0)).then_some(0);
        // A rank whose arguments are wrong refuses the split: the others
        // fail it rather than wait for this rank.
        let split = checked.map(|()| comm.split(color, comm.rank() as i32)).map_err(|e| comm.refuse_split(e));
        async move {
            // Dropped unfinished, either collective tells the others.
            let split = split?;
            if let Some(rank) = shapes.await?.iter().position(|&theirs| theirs != mine) {
                let detail = format!("it passed another grid than this rank's {dims:?} (periodic {periods:?})");
                return Err(ErrorKind::CollectiveMismatch { rank, detail }.into());
            }
            let grid = split.await?;
            Ok(grid.map(|comm| Cart { comm, dims, periods }))
        }
    }
}

/// A digest of a grid's shape, its dimensions and their periodicity: the
/// same on every rank that passes the same shape.
fn shape_digest(dims: &[usize], periods: &[bool]) -> u64 {
    let start = derive_context(0x6361_7274_0000_0000, dims.len() as u64);
    dims.iter().zip(periods).fold(start, |h, (&d, &p)| derive_context(derive_context(h, d as u64), u64::from(p)))
}

/// A digest of the dimensions a sub-grid keeps: the same on every rank
/// that passes the same flags.
fn remain_digest(remain: &[bool]) -> u64 {
    let start = derive_context(0x7375_6267_0000_0000, remain.len() as u64);
    remain.iter().fold(start, |h, &keep| derive_context(h, u64::from(keep)))
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

    /// `MPI_Comm_dup` of a grid: the same grid (dimensions, periods, ranks)
    /// over a new matching context, as MPI's duplicate keeps a
    /// communicator's topology. It takes its context as
    /// [`Comm::dup`] does, so every rank of the grid must call it in the
    /// same order as its other duplicates, splits and creations of
    /// communicators from the grid. (`grid.comm().dup()` gives a plain
    /// communicator instead.)
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// let grid = comm.cart_create(&[2, 2], &[true, false], false).await?.expect("4 ranks fill it");
    /// let copy = grid.dup(); // e.g. a library's own grid
    /// assert_eq!((copy.dims(), copy.periods()), (grid.dims(), grid.periods()));
    /// assert_eq!(copy.shift(0, 1)?, grid.shift(0, 1)?);
    /// // Its messages never meet the grid's, whatever their tags.
    /// let (_, ahead) = copy.shift(0, 1)?;
    /// let (behind, _) = copy.shift(0, 1)?;
    /// copy.isend(&1u8, ahead, 0);
    /// grid.isend(&2u8, ahead, 0);
    /// assert_eq!(grid.recv::<u8>(behind, 0).await?.0, 2);
    /// assert_eq!(copy.recv::<u8>(behind, 0).await?.0, 1);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn dup(&self) -> Cart {
        Cart { comm: self.comm.dup(), dims: self.dims.clone(), periods: self.periods.clone() }
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
            return Err(ErrorKind::InvalidRank { rank, size: self.size() }.into());
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
        self.try_rank_of(&coords)?.ok_or_else(|| ErrorKind::InvalidArgument(format!("{coords:?} is off the grid {:?}", self.dims)).into())
    }

    fn try_rank_of(&self, coords: &[i64]) -> Result<Option<usize>> {
        if coords.len() != self.dims.len() {
            return Err(ErrorKind::InvalidArgument(format!("{} coordinates for a grid of {} dimensions", coords.len(), self.dims.len())).into());
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
            return Err(ErrorKind::InvalidArgument(format!("dimension {dim} of a grid of {}", self.dims.len())).into());
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
    /// ranks that share its coordinates along the others. Ranks that keep
    /// other dimensions than the rest fail, and so do the rest
    /// ([`CollectiveMismatch`](ErrorKind::CollectiveMismatch), naming one
    /// that disagrees).
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
        let split = (|| -> Result<_> {
            if remain.len() != cart.dims.len() {
                return Err(ErrorKind::InvalidArgument(format!("{} flags for a grid of {} dimensions", remain.len(), cart.dims.len())).into());
            }
            let coords = cart.coords(cart.rank())?;
            // Ranks that agree on every dropped coordinate share a sub-grid.
            let color = coords.iter().zip(&cart.dims).zip(&remain).filter(|(_, &keep)| !keep).fold(0usize, |acc, ((&c, &d), _)| acc * d + c);
            Ok(cart.comm.split(Some(color as u32), cart.rank() as i32))
        })()
        .map_err(|e| cart.comm.refuse_split(e));
        // Every rank checks that all keep the same dimensions (ranks that
        // disagree would make sub-grids whose shapes do not match their
        // members): an allgather of a digest, started now with the split.
        let mine = remain_digest(&remain);
        let kept = cart.comm.allgather_owned(mine);
        async move {
            // Dropped unfinished, either collective tells the others.
            let split = split?;
            if let Some(rank) = kept.await?.iter().position(|&theirs| theirs != mine) {
                let detail = format!("it kept other dimensions of the grid than this rank's {remain:?}");
                return Err(ErrorKind::CollectiveMismatch { rank, detail }.into());
            }
            let comm = split.await?.expect("a color was given");
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
    /// what the `k`-th neighbour sent this rank. With c = 0 (both buffers
    /// empty) every block is empty, and no values move.
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
        // Blocks of 0 values (an empty buffer) included: one per neighbour.
        let out: Vec<&[T]> = if send.len() == count * blocks { (0..blocks).map(|k| &send[k * count..(k + 1) * count]).collect() } else { Vec::new() };
        self.neighbor_exchange(&out, recv.values(), count)
    }

    /// Sends `out[k]` to neighbour `k` and receives `count` values from
    /// each into block `k` of `recv`. Each message carries the direction it
    /// travels in, so two neighbours that are the same rank (a periodic
    /// dimension of 1 or 2) still fill the right blocks.
    fn neighbor_exchange<'a, T: MpiType>(&self, out: &[&[T]], recv: &'a mut [T], count: usize) -> Collective<'a> {
        let mut call = Call::begin(&self.comm);
        let dims = self.dims.len();
        call.subtags = 2 * dims;
        call.mark_messages();
        let started = (|| -> Result<_> {
            let neighbors = self.neighbors()?;
            if out.len() != 2 * dims || out.iter().any(|b| b.len() != count) {
                return Err(ErrorKind::InvalidArgument(format!("the send buffer holds no {} blocks of {count}", 2 * dims)).into());
            }
            let needed = count.checked_mul(2 * dims).ok_or(ErrorKind::Overflow("the neighbour collective's receive buffer"))?;
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

    /// The free dimensions whose largest minus smallest is least, and of
    /// those the lexicographically smallest, placed in the free slots in
    /// order; kept dimensions stay.
    #[test]
    fn dims_are_the_narrowest_product() {
        for (nodes, dims, want) in [
            (72, vec![0, 0], vec![9, 8]),
            (16, vec![0, 0, 0], vec![4, 2, 2]),
            (12, vec![0, 0], vec![4, 3]),
            (7, vec![0, 0], vec![7, 1]),
            (1, vec![0, 0, 0], vec![1, 1, 1]),
            (24, vec![0, 0, 0], vec![4, 3, 2]),
            (36, vec![0, 0], vec![6, 6]),
            (72, vec![0, 0, 0], vec![6, 4, 3]),
            (72, vec![0, 0, 0, 0], vec![4, 3, 3, 2]),
            // Spreads of 4 all: [5, 2, 2, 1] before [5, 4, 1, 1].
            (20, vec![0, 0, 0, 0], vec![5, 2, 2, 1]),
            // 24 ranks left for two free dimensions: [6, 4].
            (72, vec![0, 3, 0], vec![6, 3, 4]),
            (72, vec![2, 0, 0, 3], vec![2, 4, 3, 3]),
            (72, vec![8, 9], vec![8, 9]),
            (5, vec![5, 0, 0], vec![5, 1, 1]),
            (720, vec![0; 10], vec![5, 3, 3, 2, 2, 2, 2, 1, 1, 1]),
        ] {
            assert_eq!(dims_create(nodes, &dims).unwrap(), want, "{nodes} over {dims:?}");
        }
        for (nodes, dims) in [(72, vec![5, 0]), (72, vec![0, 0, 7]), (72, vec![8, 8]), (72, vec![]), (72, vec![0, 144]), (1, vec![2, 0])] {
            assert!(dims_create(nodes, &dims).is_err(), "{nodes} over {dims:?}");
        }
        assert_eq!(dims_create(1, &[]).unwrap(), Vec::<usize>::new());
    }

    /// Large rank counts and many dimensions: the product is right, the
    /// dimensions do not increase, and the search ends at once.
    #[test]
    fn dims_of_large_grids_and_many_dimensions() {
        let checked = |nodes: usize, free: usize| {
            let dims = dims_create(nodes, &vec![0; free]).unwrap();
            assert_eq!(dims.len(), free);
            assert_eq!(dims.iter().map(|&d| d as u64).product::<u64>(), nodes as u64, "{nodes} in {free}: {dims:?}");
            assert!(dims.windows(2).all(|w| w[0] >= w[1]), "{nodes} in {free}: {dims:?}");
            dims
        };
        // 2^32 - 5, a prime; 2^32 - 1 = 3 · 5 · 17 · 257 · 65537.
        assert_eq!(checked(4_294_967_291, 2), [4_294_967_291, 1]);
        assert_eq!(checked(4_294_967_295, 2), [65_537, 65_535]);
        assert_eq!(checked(4_294_967_295, 3), [65_537, 257, 255]);
        assert_eq!(checked(4_294_967_295, 6), [65_537, 257, 17, 5, 3, 1]);
        // 2^4 · 3^3 · 5^2 · 7 · 11 · 13 · 17 · 19: 14 prime factors, 1,920 divisors.
        let composite = 3_491_888_400;
        assert_eq!(checked(composite, 2), [59_280, 58_905]);
        assert_eq!(checked(composite, 3), [1_540, 1_530, 1_482]);
        assert_eq!(checked(composite, 4), [255, 247, 240, 231]);
        assert_eq!(checked(composite, 6), [45, 44, 39, 38, 35, 34]);
        let mut many = vec![19, 17, 13, 11, 7, 5, 5, 3, 3, 3, 2, 2, 2, 2];
        many.resize(64, 1);
        assert_eq!(checked(composite, 64), many);
        assert_eq!(checked(1 << 31, 3), [2048, 1024, 1024]);
        assert_eq!(checked(1 << 31, 31), [2; 31]);
        let mut twos = vec![2; 31];
        twos.push(1);
        assert_eq!(checked(1 << 31, 32), twos);
        for nodes in [composite, 4_294_967_295, 4_294_967_291, 1 << 31, 3_603_600, 2_147_483_646] {
            for free in (1..=40).chain([64, 1000]) {
                checked(nodes, free);
            }
        }
        assert_eq!(checked(720, 100_000).iter().filter(|&&d| d > 1).count(), 7);
    }

    /// Every way to write `m` as `k` factors in non-increasing order, none
    /// above `cap`.
    fn products(m: usize, k: usize, cap: usize) -> Vec<Vec<usize>> {
        if k == 0 {
            return if m == 1 { vec![Vec::new()] } else { Vec::new() };
        }
        (1..=cap.min(m))
            .filter(|&a| m.is_multiple_of(a))
            .flat_map(|a| {
                products(m / a, k - 1, a).into_iter().map(move |mut rest| {
                    rest.insert(0, a);
                    rest
                })
            })
            .collect()
    }

    /// Against every product, for every rank count up to 2,000 in up to 4
    /// dimensions: the least spread, then the lexicographically smallest.
    #[test]
    fn dims_match_an_exhaustive_search() {
        for m in 1..=2000usize {
            for k in 1..=4 {
                let want = products(m, k, m).into_iter().min_by_key(|f| (f[0] - f[k - 1], f.clone())).expect("(m, 1, ...) at least");
                assert_eq!(dims_create(m, &vec![0; k]).unwrap(), want, "{m} in {k}");
            }
        }
    }
}
