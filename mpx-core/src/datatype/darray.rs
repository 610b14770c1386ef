//! Subarray and distributed-array (darray) constructors.
//!
//! Both describe the part of a global n-dimensional array that one process
//! owns. mpx lowers them to a nest of one-dimensional index sets, one per
//! dimension, each placing copies of the inner dimensions at byte offsets
//! (`i * stride_d`): a contiguous range for subarrays and block
//! distributions, whole blocks plus a trailing partial block for cyclic
//! ones. The lowered type costs O(ndims) whatever the array sizes. As the
//! standard says, the result keeps only the basic entries of `oldtype` and
//! gets markers at 0 and at the extent of the whole array.

use super::layout::LayoutBuilder;
use super::{check_count, int, ints, Ctor, Datatype, Integer};
use crate::error::{Error, ErrorKind, Result};

/// Storage order of a multidimensional array.
///
/// ```
/// use mpx::{Datatype, Order};
/// // Row 1 of a 2x3 array of doubles: contiguous in C order, strided in Fortran order.
/// let c = Datatype::subarray(&[2, 3], &[1, 3], &[1, 0], Order::C, &Datatype::double())?;
/// let f = Datatype::subarray(&[2, 3], &[1, 3], &[1, 0], Order::Fortran, &Datatype::double())?;
/// assert_eq!((c.true_lb(), c.true_extent()), (24, 24));
/// assert_eq!((f.true_lb(), f.true_extent()), (8, 40));
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Row-major (`MPI_ORDER_C`): the last dimension varies fastest.
    C,
    /// Column-major (`MPI_ORDER_FORTRAN`): the first dimension varies fastest.
    Fortran,
}

/// How one dimension of a darray is distributed over the process grid.
///
/// ```
/// use mpx::{unpack, Datatype, DistArg, Distribution, Order, Region};
/// let v: Vec<f64> = (0..8).map(f64::from).collect();
/// // What rank 1 of 2 owns of 8 elements.
/// let mine = |dist: Distribution| -> mpx::Result<[f64; 4]> {
///     let t = Datatype::darray(2, 1, &[8], &[dist], &[DistArg::Default], &[2], Order::C, &Datatype::double())?;
///     let mut out = [0.0; 4];
///     unpack(&t.pack_to_vec(Region::of(&v), 1)?, &mut 0, &mut out)?;
///     Ok(out)
/// };
/// assert_eq!(mine(Distribution::Block)?, [4.0, 5.0, 6.0, 7.0]);
/// assert_eq!(mine(Distribution::Cyclic)?, [1.0, 3.0, 5.0, 7.0]);
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// `MPI_DISTRIBUTE_BLOCK`: one contiguous block per process.
    Block,
    /// `MPI_DISTRIBUTE_CYCLIC`: blocks dealt round-robin.
    Cyclic,
    /// `MPI_DISTRIBUTE_NONE`: not distributed (the grid size must be 1).
    None,
}

/// A darray distribution argument (block size).
///
/// ```
/// use mpx::{unpack, Datatype, DistArg, Distribution, Order, Region};
/// // Rank 1 of 2 in a cyclic distribution of 8 ints in blocks of 2.
/// let darray = |darg: DistArg| {
///     Datatype::darray(2, 1, &[8], &[Distribution::Cyclic], &[darg], &[2], Order::C, &Datatype::int())
/// };
/// let t = darray(DistArg::Size(2))?;
/// let v: Vec<i32> = (0..8).collect();
/// let mut mine = [0i32; 4];
/// unpack(&t.pack_to_vec(Region::of(&v), 1)?, &mut 0, &mut mine)?;
/// assert_eq!(mine, [2, 3, 6, 7]);
/// assert!(darray(DistArg::Size(0)).is_err());
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DistArg {
    /// `MPI_DISTRIBUTE_DFLT_DARG`: `ceil(gsize / psize)` for block, 1 for cyclic.
    Default,
    /// An explicit block size (at least 1).
    Size(i64),
}

pub(crate) struct SubarrayArgs {
    pub sizes: Vec<i64>,
    pub subsizes: Vec<i64>,
    pub starts: Vec<i64>,
    pub order: Order,
    pub old: Datatype,
    pub lowered: Datatype,
}

pub(crate) struct DarrayArgs {
    pub size: i64,
    pub rank: i64,
    pub gsizes: Vec<i64>,
    pub distribs: Vec<Distribution>,
    pub dargs: Vec<DistArg>,
    pub psizes: Vec<i64>,
    pub order: Order,
    pub old: Datatype,
    pub lowered: Datatype,
}

/// The indices one process owns along one dimension.
enum IndexSet {
    /// `len` consecutive indices from `start`.
    Range { start: i64, len: i64 },
    /// `full` blocks of `block` indices, block `k` starting at
    /// `start + k * period`, then one block of `tail` indices (possibly 0).
    Cyclic { start: i64, block: i64, period: i64, full: i64, tail: i64 },
}

fn arg_error(msg: String) -> Error {
    ErrorKind::InvalidArgument(msg).into()
}

fn mul(a: i64, b: i64) -> Result<i64> {
    a.checked_mul(b).ok_or_else(|| ErrorKind::Overflow("array extent").into())
}

fn add(a: i64, b: i64) -> Result<i64> {
    a.checked_add(b).ok_or_else(|| ErrorKind::Overflow("array extent").into())
}

/// Copies of `child` at `offset + i * stride` for `i` in `0..len`.
fn run(offset: i64, len: i64, stride: i64, child: &Datatype) -> Result<Datatype> {
    let line = Datatype::hvector(len, 1, stride, child)?;
    Datatype::hindexed(&[1], &[offset], &line)
}

impl IndexSet {
    /// The type placing `child` at byte offset `i * stride` for each index `i`.
    fn lower(&self, stride: i64, child: &Datatype) -> Result<Datatype> {
        match *self {
            IndexSet::Range { start, len } => run(mul(start, stride)?, len, stride, child),
            IndexSet::Cyclic { start, block, period, full, tail } => {
                let block_type = Datatype::hvector(block, 1, stride, child)?;
                // One block or none needs no distance between blocks (which
                // may not fit when the period is the whole array or more).
                let between = if full > 1 { mul(period, stride)? } else { 0 };
                let blocks = Datatype::hvector(full, 1, between, &block_type)?;
                // Where a partial last block starts (< gsize); without one,
                // the block after the last full one may start past
                // i64::MAX, and the empty tail is placed at 0 instead.
                let tail_start = if tail == 0 { 0 } else { add(start, mul(full, period)?)? };
                let tail_type = Datatype::hvector(tail, 1, stride, child)?;
                Datatype::structure(
                    &[1, 1],
                    &[mul(start, stride)?, mul(tail_start, stride)?],
                    &[blocks, tail_type],
                )
            }
        }
    }
}

/// Nests the per-dimension index sets into one type over `old`.
/// `sets[d]` belongs to dimension `d` of an array of `sizes`.
fn lower_nest(sizes: &[i64], sets: &[IndexSet], order: Order, old: &Datatype) -> Result<(Datatype, i64)> {
    let ext = old.extent();
    let n = sizes.len();
    // Dimensions from fastest- to slowest-varying.
    let dims: Vec<usize> = match order {
        Order::C => (0..n).rev().collect(),
        Order::Fortran => (0..n).collect(),
    };
    let mut stride = ext;
    let mut t = old.clone();
    for d in dims {
        t = sets[d].lower(stride, &t)?;
        stride = mul(stride, sizes[d])?;
    }
    Ok((t, stride))
}

/// Wraps `lowered` with markers at 0 and `total_extent`.
fn with_array_bounds(lowered: &Datatype, total_extent: i64) -> Result<super::layout::Layout> {
    let mut b = LayoutBuilder::new();
    b.copy(lowered.layout(), 0)?;
    b.set_markers(0, total_extent);
    b.finish()
}

fn check_dims(what: &str, n: usize, others: &[(&str, usize)]) -> Result<()> {
    if n == 0 {
        return Err(arg_error(format!("{what}: ndims must be at least 1")));
    }
    for (name, len) in others {
        if *len != n {
            return Err(arg_error(format!("{what}: {name} has {len} entries, expected {n}")));
        }
    }
    Ok(())
}

impl Datatype {
    /// `MPI_Type_create_subarray`: the block `starts[d] .. starts[d] +
    /// subsizes[d]` of an array of `sizes` elements of `old`. The type's
    /// extent is the whole array's.
    ///
    /// ```
    /// use mpx::{Datatype, Order};
    /// let t = Datatype::subarray(&[4, 6], &[2, 3], &[1, 2], Order::C, &Datatype::double())?;
    /// assert_eq!((t.size(), t.extent(), t.true_lb(), t.true_extent()), (48, 192, 64, 72));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn subarray<A: Integer, B: Integer, C: Integer>(
        sizes: &[A],
        subsizes: &[B],
        starts: &[C],
        order: Order,
        old: &Datatype,
    ) -> Result<Datatype> {
        let (sizes, subsizes, starts) = (&ints("size", sizes)?, &ints("subsize", subsizes)?, &ints("start", starts)?);
        check_dims("subarray", sizes.len(), &[("subsizes", subsizes.len()), ("starts", starts.len())])?;
        let mut sets = Vec::with_capacity(sizes.len());
        for d in 0..sizes.len() {
            let (size, sub, start) = (sizes[d], subsizes[d], starts[d]);
            if size < 1 || sub < 1 || start < 0 || sub > size || start > size - sub {
                return Err(arg_error(format!(
                    "subarray dimension {d}: need 1 <= subsize <= size and 0 <= start <= size - subsize, \
                     got size {size}, subsize {sub}, start {start}"
                )));
            }
            sets.push(IndexSet::Range { start, len: sub });
        }
        let (lowered, total) = lower_nest(sizes, &sets, order, old)?;
        let layout = with_array_bounds(&lowered, total)?;
        let sig = lowered.signature();
        let args = SubarrayArgs {
            sizes: sizes.to_vec(),
            subsizes: subsizes.to_vec(),
            starts: starts.to_vec(),
            order,
            old: old.clone(),
            lowered,
        };
        Datatype::build(Ctor::Subarray(Box::new(args)), layout, sig)
    }

    /// `MPI_Type_create_darray`: the part of a global array of `gsizes`
    /// elements of `old` that process `rank` of `size` owns when the array
    /// is distributed over a `psizes` process grid. The grid is row-major
    /// (rank to coordinates with the last grid dimension fastest) whatever
    /// the array's `order`, as the standard says.
    ///
    /// ```
    /// use mpx::{Datatype, DistArg, Distribution, Order};
    /// let t = Datatype::darray(4, 1, &[8, 6], &[Distribution::Block, Distribution::Cyclic],
    ///     &[DistArg::Default, DistArg::Size(2)], &[2, 2], Order::C, &Datatype::double())?;
    /// assert_eq!((t.size(), t.extent(), t.true_lb()), (64, 384, 16));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn darray<G: Integer, P: Integer>(
        size: impl Integer,
        rank: impl Integer,
        gsizes: &[G],
        distribs: &[Distribution],
        dargs: &[DistArg],
        psizes: &[P],
        order: Order,
        old: &Datatype,
    ) -> Result<Datatype> {
        let (size, rank) = (int("size", size)?, int("rank", rank)?);
        let (gsizes, psizes) = (&ints("gsize", gsizes)?, &ints("psize", psizes)?);
        let n = gsizes.len();
        check_dims(
            "darray",
            n,
            &[("distribs", distribs.len()), ("dargs", dargs.len()), ("psizes", psizes.len())],
        )?;
        check_count("size", size)?;
        if size < 1 || rank < 0 || rank >= size {
            return Err(arg_error(format!("darray: rank {rank} is not in 0..{size}")));
        }
        let mut grid: i64 = 1;
        for (d, &p) in psizes.iter().enumerate() {
            if p < 1 {
                return Err(arg_error(format!("darray: psizes[{d}] = {p} must be at least 1")));
            }
            grid = grid.checked_mul(p).ok_or(ErrorKind::Overflow("process grid size"))?;
        }
        if grid != size {
            return Err(arg_error(format!("darray: psizes multiply to {grid}, but size is {size}")));
        }
        // Row-major grid coordinates of `rank`.
        let mut coords = vec![0; n];
        let mut r = rank;
        for d in (0..n).rev() {
            coords[d] = r % psizes[d];
            r /= psizes[d];
        }
        let mut sets = Vec::with_capacity(n);
        for d in 0..n {
            let (g, p, c) = (gsizes[d], psizes[d], coords[d]);
            if g < 1 {
                return Err(arg_error(format!("darray: gsizes[{d}] = {g} must be at least 1")));
            }
            let darg = match dargs[d] {
                DistArg::Default => None,
                DistArg::Size(k) if k >= 1 => Some(k),
                DistArg::Size(k) => {
                    return Err(arg_error(format!("darray: dargs[{d}] = {k} must be at least 1")))
                }
            };
            let set = match distribs[d] {
                Distribution::None => {
                    if p != 1 {
                        return Err(arg_error(format!(
                            "darray: dimension {d} is not distributed, so psizes[{d}] must be 1, got {p}"
                        )));
                    }
                    IndexSet::Range { start: 0, len: g }
                }
                Distribution::Block => {
                    let b = darg.unwrap_or(g / p + i64::from(g % p != 0));
                    if b.checked_mul(p).is_some_and(|cover| cover < g) {
                        return Err(arg_error(format!(
                            "darray: block size {b} on {p} processes cannot cover {g} elements in dimension {d}"
                        )));
                    }
                    let start = c.saturating_mul(b).min(g);
                    let len = b.min(g - start);
                    IndexSet::Range { start, len }
                }
                Distribution::Cyclic => {
                    // A block longer than the dimension covers it all on
                    // the first process, as a block of the dimension's
                    // length does: the same indices, with counts that fit.
                    let b = darg.unwrap_or(1).min(g);
                    let start = c.saturating_mul(b);
                    // A period past i64 leaves room for one block only
                    // (the count below then comes to 1).
                    let period = b.saturating_mul(p);
                    if start >= g {
                        IndexSet::Range { start: 0, len: 0 }
                    } else {
                        // Blocks start at start + k*period < g (so there
                        // is at least one, and the last start fits).
                        let blocks = (g - start) / period + i64::from((g - start) % period != 0);
                        let last_start = add(start, mul(blocks - 1, period)?)?;
                        let last_len = b.min(g - last_start);
                        let (full, tail) = if last_len == b { (blocks, 0) } else { (blocks - 1, last_len) };
                        IndexSet::Cyclic { start, block: b, period, full, tail }
                    }
                }
            };
            sets.push(set);
        }
        let (lowered, total) = lower_nest(gsizes, &sets, order, old)?;
        let layout = with_array_bounds(&lowered, total)?;
        let sig = lowered.signature();
        let args = DarrayArgs {
            size,
            rank,
            gsizes: gsizes.to_vec(),
            distribs: distribs.to_vec(),
            dargs: dargs.to_vec(),
            psizes: psizes.to_vec(),
            order,
            old: old.clone(),
            lowered,
        };
        Datatype::build(Ctor::Darray(Box::new(args)), layout, sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subarray_arguments_are_checked() {
        let d = Datatype::double();
        assert!(Datatype::subarray(&[4], &[5], &[0], Order::C, &d).is_err());
        assert!(Datatype::subarray(&[4], &[2], &[3], Order::C, &d).is_err());
        assert!(Datatype::subarray(&[4], &[0], &[0], Order::C, &d).is_err());
        assert!(Datatype::subarray(&[4, 4], &[2], &[0], Order::C, &d).is_err());
        assert!(Datatype::subarray::<i64, i64, i64>(&[], &[], &[], Order::C, &d).is_err());
    }

    #[test]
    fn darray_arguments_are_checked() {
        let d = Datatype::double();
        let blk = [Distribution::Block];
        let dflt = [DistArg::Default];
        // psizes must multiply to size
        assert!(Datatype::darray(4, 0, &[8], &blk, &dflt, &[2], Order::C, &d).is_err());
        // rank out of range
        assert!(Datatype::darray(2, 2, &[8], &blk, &dflt, &[2], Order::C, &d).is_err());
        // block size 3 on 2 processes cannot cover 8
        assert!(Datatype::darray(2, 0, &[8], &blk, &[DistArg::Size(3)], &[2], Order::C, &d).is_err());
        // distribute none needs psize 1
        assert!(Datatype::darray(2, 0, &[8], &[Distribution::None], &dflt, &[2], Order::C, &d).is_err());
        assert!(Datatype::darray(2, 0, &[8], &blk, &[DistArg::Size(0)], &[2], Order::C, &d).is_err());
    }

    #[test]
    fn cyclic_with_partial_tail() {
        // 10 elements, cyclic(3) over 2 processes: rank 0 owns 0,1,2, 6,7,8; rank 1 owns 3,4,5, 9.
        let d = Datatype::int();
        let cyc = [Distribution::Cyclic];
        let r1 = Datatype::darray(2, 1, &[10], &cyc, &[DistArg::Size(3)], &[2], Order::C, &d).unwrap();
        assert_eq!((r1.size(), r1.true_lb(), r1.true_extent(), r1.extent()), (16, 12, 28, 40));
        let r0 = Datatype::darray(2, 0, &[10], &cyc, &[DistArg::Size(3)], &[2], Order::C, &d).unwrap();
        assert_eq!((r0.size(), r0.true_lb(), r0.true_extent()), (24, 0, 36));
    }
}
