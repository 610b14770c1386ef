//! Collectives against a serial computation of what they must give, on 1,
//! 2, 3, 4, 7 and 8 ranks, with roots other than 0, counts of zero, a
//! derived type, and non-commutative operations; bit-identical allreduce;
//! collectives beside point-to-point traffic on the same tags, and two in
//! flight at once; arguments that disagree. Every test runs on every
//! transport of the harness.

use mpx::coll::{Builtin, Loc, Op, Reducible, BXOR, LOR, MAX, MIN, MINLOC, PROD, SUM};
use mpx::MpiType;

#[macro_use]
mod support;
use support::returns;

/// What a collective `call` that may fail ended with (its error, if
/// any), once an allreduce after it shows that the communicator works on.
/// A call still waiting after 30 s is an error of its own: it would have
/// waited for ever.
async fn outcome_then_works_on<T>(comm: &mpx::Comm, what: &str, call: impl std::future::Future<Output = mpx::Result<T>>) -> mpx::Result<Option<mpx::Error>> {
    let called = tokio::time::timeout(std::time::Duration::from_secs(30), call).await;
    let called = called.map_err(|_| mpx::Error::user(std::io::Error::other(format!("the {what} waited 30 s"))))?;
    let mut sum = 0u32;
    comm.allreduce(&1u32, &mut sum, SUM).await?;
    assert_eq!(sum as usize, comm.size());
    Ok(called.err())
}

/// Checks the outcomes of a call on two ranks that both took themselves
/// for its root: every rank that failed names the other (at least one
/// did, if `one_fails`).
fn each_failed_root_names_the_other(outcomes: &[Option<mpx::Error>], one_fails: bool, what: &str) {
    let failed: Vec<(usize, &mpx::Error)> = outcomes.iter().enumerate().filter_map(|(r, e)| Some((r, e.as_ref()?))).collect();
    assert!(!one_fails || !failed.is_empty(), "{what}: {outcomes:?}");
    for (rank, e) in failed {
        assert!(matches!(e.kind(), mpx::ErrorKind::CollectiveMismatch { rank: other, .. } if *other == 1 - rank), "{what}, rank {rank}: {e}");
    }
}

/// The rank counts every collective is checked on.
const SIZES: [usize; 6] = [1, 2, 3, 4, 7, 8];

/// A derived type: a struct with padding after `id`.
#[derive(Debug, Clone, Copy, Default, PartialEq, MpiType)]
#[repr(C)]
struct Particle {
    id: u16,
    mass: f64,
    charge: i32,
}

fn particle(rank: usize, i: usize) -> Particle {
    Particle { id: (rank * 100 + i) as u16, mass: rank as f64 + i as f64 / 8.0, charge: i as i32 - rank as i32 }
}

/// A 2x2 integer matrix, row-major: products do not commute.
type Matrix = [i64; 4];

fn matmul(a: &Matrix, b: &Matrix) -> Matrix {
    [a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]]
}

/// Rank `r`'s matrix, element `i`: small entries, so products stay exact.
fn matrix(r: usize, i: usize) -> Matrix {
    [1, (r + i) as i64 % 3, (r * 2 + i) as i64 % 2, 1]
}

/// Matrix products in MPI's convention, `b = a ∘ b`.
fn matrix_product() -> Op<Matrix> {
    Op::user(
        |a: &[Matrix], b: &mut [Matrix]| {
            for (x, y) in a.iter().zip(b.iter_mut()) {
                *y = matmul(x, y);
            }
        },
        false,
    )
}

/// A matrix whose `PROD` is the matrix product: a program's own
/// [`Reducible`] type, whose built-in operations need not commute.
#[derive(Debug, Clone, Copy, Default, PartialEq, MpiType)]
#[repr(C)]
struct OwnMatrix([i64; 4]);

impl Reducible for OwnMatrix {
    fn combine(op: Builtin, input: &[Self], inout: &mut [Self]) -> mpx::Result<()> {
        if op != Builtin::Prod {
            return Err(mpx::ErrorKind::InvalidArgument(format!("{op:?} of matrices")).into());
        }
        for (a, b) in input.iter().zip(inout.iter_mut()) {
            b.0 = matmul(&a.0, &b.0);
        }
        Ok(())
    }
}

/// Rank `r`'s float for [`large_allreduces_combine_blocks_in_rank_order`]'s
/// `MAX` (no NaN, no negative zero: which of two a tie keeps is not
/// specified).
fn floats_of(r: usize, i: usize) -> f64 {
    ((r * 13 + i) % 17) as f64 - 8.5
}

/// The product of ranks `range`'s matrices, element `i`, in rank order.
fn serial_product(range: std::ops::Range<usize>, i: usize) -> Matrix {
    range.map(|r| matrix(r, i)).fold([1, 0, 0, 1], |acc, m| matmul(&acc, &m))
}

/// Displacements of blocks of `sizes` values, one after another in rank
/// order, but for the empty blocks: those point past the end of the
/// blocks, or (every other one) at `usize::MAX`.
fn empty_blocks_past_the_end(sizes: &[usize]) -> Vec<usize> {
    let end: usize = sizes.iter().sum();
    (0..sizes.len())
        .map(|r| match sizes[r] {
            0 if r % 2 == 0 => usize::MAX,
            0 => end + r,
            _ => sizes[..r].iter().sum(),
        })
        .collect()
}

each_transport! {
    /// bcast, gather, scatter, allgather and alltoall, even and `v` forms,
    /// of plain values and of a derived type, with every root tried.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn data_movement_matches_a_serial_computation() {
        for n in SIZES {
            returns(launch(n, move |comm| async move {
                let (me, n) = (comm.rank(), comm.size());
                for root in [0, n - 1, n / 2] {
                    for count in [0, 3] {
                        // bcast
                        let mut buf: Vec<u64> = if me == root { (0..count as u64).map(|i| i * 7 + root as u64).collect() } else { vec![0; count] };
                        comm.bcast(&mut buf, root).await?;
                        assert_eq!(buf, (0..count as u64).map(|i| i * 7 + root as u64).collect::<Vec<_>>());
                        // gather of a derived type
                        let mine: Vec<Particle> = (0..count).map(|i| particle(me, i)).collect();
                        let mut all = vec![Particle::default(); if me == root { n * count } else { 0 }];
                        comm.gather(&mine, &mut all, root).await?;
                        if me == root {
                            let want: Vec<Particle> = (0..n).flat_map(|r| (0..count).map(move |i| particle(r, i))).collect();
                            assert_eq!(all, want);
                        }
                        // scatter
                        let work: Vec<i32> = if me == root { (0..(n * count) as i32).collect() } else { Vec::new() };
                        let mut part = vec![-1i32; count];
                        comm.scatter(&work, &mut part, root).await?;
                        assert_eq!(part, ((me * count) as i32..((me + 1) * count) as i32).collect::<Vec<_>>());
                    }
                    // gatherv and scatterv: rank r has r % 3 values, laid
                    // out backwards with a gap of one.
                    let counts: Vec<usize> = (0..n).map(|r| r % 3).collect();
                    let mut displs = vec![0; n];
                    let mut at = 0;
                    for r in (0..n).rev() {
                        displs[r] = at;
                        at += counts[r] + 1;
                    }
                    let mine: Vec<f64> = (0..counts[me]).map(|i| me as f64 + i as f64 / 4.0).collect();
                    let mut all = vec![f64::NAN; if me == root { at } else { 0 }];
                    comm.gatherv(&mine, &mut all, &counts, &displs, root).await?;
                    if me == root {
                        for r in 0..n {
                            for i in 0..counts[r] {
                                assert_eq!(all[displs[r] + i], r as f64 + i as f64 / 4.0);
                            }
                            assert!(all[displs[r] + counts[r]].is_nan(), "the gap stays untouched");
                        }
                    }
                    let source: Vec<f64> = if me == root { all.clone() } else { Vec::new() };
                    let mut back = vec![0.0; counts[me]];
                    comm.scatterv(&source, &counts, &displs, &mut back, root).await?;
                    assert_eq!(back, mine);
                }
                // allgather of single values, of a derived type
                let mut everyone = vec![Particle::default(); n];
                comm.allgather(&particle(me, 1), &mut everyone).await?;
                assert_eq!(everyone, (0..n).map(|r| particle(r, 1)).collect::<Vec<_>>());
                let mut nothing: Vec<u8> = Vec::new();
                comm.allgather(&[] as &[u8], &mut nothing).await?;
                // allgatherv: rank r gives r + 1 values
                let counts: Vec<usize> = (1..=n).collect();
                let displs: Vec<usize> = (0..n).map(|r| r * (r + 1) / 2).collect();
                let mine = vec![me as u32; me + 1];
                let mut all = vec![0u32; n * (n + 1) / 2];
                comm.allgatherv(&mine, &mut all, &counts, &displs).await?;
                assert_eq!(all, (0..n).flat_map(|r| std::iter::repeat_n(r as u32, r + 1)).collect::<Vec<_>>());
                // alltoall: block r of rank s's send is 100 s + r
                let send: Vec<u64> = (0..n).flat_map(|r| [100 * me as u64 + r as u64; 2]).collect();
                let mut recv = vec![0u64; 2 * n];
                comm.alltoall(&send, &mut recv).await?;
                assert_eq!(recv, (0..n).flat_map(|s| [100 * s as u64 + me as u64; 2]).collect::<Vec<_>>());
                // alltoallv: rank s sends (s + r) % 3 values to rank r
                let scounts: Vec<usize> = (0..n).map(|r| (me + r) % 3).collect();
                let sdispls: Vec<usize> = (0..n).map(|r| scounts[..r].iter().sum()).collect();
                let send: Vec<i64> = (0..n).flat_map(|r| std::iter::repeat_n(-(me as i64) * 10 - r as i64, scounts[r])).collect();
                let rcounts = scounts.clone(); // (s + me) % 3, symmetric
                let rdispls: Vec<usize> = (0..n).map(|s| rcounts[..s].iter().sum()).collect();
                let mut recv = vec![0i64; rcounts.iter().sum()];
                comm.alltoallv(&send, &scounts, &sdispls, &mut recv, &rcounts, &rdispls).await?;
                assert_eq!(recv, (0..n).flat_map(|s| std::iter::repeat_n(-(s as i64) * 10 - me as i64, rcounts[s])).collect::<Vec<_>>());
                comm.barrier().await?;
                Ok(())
            }))
            .await;
        }
    }

    /// Blocks of 0 values in gatherv, scatterv, allgatherv and alltoallv
    /// (and of 0 items in alltoallw) touch no memory: displacements past
    /// the end of the buffer, or anywhere, are no error, the blocks of
    /// values land where theirs say, and nothing else is written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn empty_blocks_may_lie_anywhere() {
        use mpx::coll::Block;
        use mpx::{Datatype, RecvBuf, Region, RegionMut, SendBuf};
        for n in SIZES {
            returns(launch(n, move |comm| async move {
                let (me, n) = (comm.rank(), comm.size());
                let double = Datatype::double();
                if n == 3 {
                    // Counts [1, 0, 1] at [0, 5, 1] into 2 values.
                    let mine = vec![me as u8 + 1; [1, 0, 1][me]];
                    let mut all = vec![0u8; if me == 0 { 2 } else { 0 }];
                    comm.gatherv(&mine, &mut all, &[1, 0, 1], &[0, 5, 1], 0).await?;
                    if me == 0 {
                        assert_eq!(all, [1, 3]);
                    }
                }
                // Even ranks have r / 2 + 1 values, odd ones none.
                let counts: Vec<usize> = (0..n).map(|r| if r % 2 == 0 { r / 2 + 1 } else { 0 }).collect();
                let displs = empty_blocks_past_the_end(&counts);
                let total: usize = counts.iter().sum();
                let value = |r: usize, i: usize| (10 * r + i) as u32;
                let mine: Vec<u32> = (0..counts[me]).map(|i| value(me, i)).collect();
                let laid_out: Vec<u32> = (0..n).flat_map(|r| (0..counts[r]).map(move |i| value(r, i))).collect();
                for root in [0, n - 1, n / 2] {
                    let mut all = vec![u32::MAX; if me == root { total } else { 0 }];
                    comm.gatherv(&mine, &mut all, &counts, &displs, root).await?;
                    if me == root {
                        assert_eq!(all, laid_out, "gatherv to {root}");
                    }
                    let mut back = vec![u32::MAX; counts[me]];
                    comm.scatterv(&laid_out, &counts, &displs, &mut back, root).await?;
                    assert_eq!(back, mine, "scatterv from {root}");
                    // The same over described buffers.
                    let mine_f: Vec<f64> = mine.iter().map(|&v| f64::from(v)).collect();
                    let mut all_f = vec![-1.0f64; if me == root { total } else { 0 }];
                    let into = RecvBuf::new(RegionMut::of(&mut all_f), if me == root { total as u64 } else { 0 }, &double);
                    comm.gatherv(SendBuf::new(Region::of(&mine_f), counts[me] as u64, &double), into, &counts, &displs, root).await?;
                    if me == root {
                        assert_eq!(all_f, laid_out.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), "described gatherv to {root}");
                    }
                }
                let mut everyone = vec![u32::MAX; total];
                comm.allgatherv(&mine, &mut everyone, &counts, &displs).await?;
                assert_eq!(everyone, laid_out, "allgatherv");
                // alltoallv: rank s sends (s + r) % 3 values to rank r.
                let scounts: Vec<usize> = (0..n).map(|r| (me + r) % 3).collect();
                let rcounts = scounts.clone(); // (s + me) % 3, symmetric
                let (sdispls, rdispls) = (empty_blocks_past_the_end(&scounts), empty_blocks_past_the_end(&rcounts));
                let send: Vec<i64> = (0..n).flat_map(|r| std::iter::repeat_n(-(me as i64) * 10 - r as i64, scounts[r])).collect();
                let mut recv = vec![0i64; rcounts.iter().sum()];
                comm.alltoallv(&send, &scounts, &sdispls, &mut recv, &rcounts, &rdispls).await?;
                assert_eq!(recv, (0..n).flat_map(|s| std::iter::repeat_n(-(s as i64) * 10 - me as i64, rcounts[s])).collect::<Vec<_>>());
                // alltoallw: a double to each rank of the same parity, empty
                // blocks to and from the others, at displacements far off.
                let talks = |s: usize, r: usize| (s + r).is_multiple_of(2);
                let far = [isize::MAX, isize::MIN, isize::MAX / 2, -8];
                let sends: Vec<Block> =
                    (0..n).map(|r| if talks(me, r) { Block::new(1, &double, (8 * r) as isize) } else { Block::new(0, &double, far[r % 4]) }).collect();
                let recvs: Vec<Block> =
                    (0..n).map(|s| if talks(s, me) { Block::new(1, &double, (8 * s) as isize) } else { Block::new(0, &double, far[(s + 1) % 4]) }).collect();
                let out: Vec<f64> = (0..n).map(|r| (100 * me + r) as f64).collect();
                let mut got = vec![-1.0f64; n];
                comm.alltoallw(Region::of(&out), &sends, RegionMut::of(&mut got), &recvs).await?;
                let want: Vec<f64> = (0..n).map(|s| if talks(s, me) { (100 * s + me) as f64 } else { -1.0 }).collect();
                assert_eq!(got, want, "alltoallw");
                comm.barrier().await?;
                Ok(())
            }))
            .await;
        }
    }

    /// reduce, allreduce, reduce_scatter(_block), scan and exscan with
    /// built-in operations and with a non-commutative one, against the
    /// serial result in rank order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reductions_match_a_serial_computation() {
        for n in SIZES {
            returns(launch(n, move |comm| async move {
                let (me, n) = (comm.rank(), comm.size());
                let values = |r: usize| [r as i64 * 3 - 5, (r as i64 * 7) % 5, 1 << (r % 8)];
                let serial = |op: fn(i64, i64) -> i64, upto: usize| {
                    let mut acc = values(0);
                    for r in 1..upto {
                        for (a, b) in acc.iter_mut().zip(values(r)) {
                            *a = op(*a, b);
                        }
                    }
                    acc
                };
                for root in [0, n - 1, n / 2] {
                    let mut got = [0i64; 3];
                    comm.reduce(&values(me), &mut got, SUM, root).await?;
                    if me == root {
                        assert_eq!(got, serial(|a, b| a + b, n));
                    }
                    let mut got = [Matrix::default(); 2];
                    let mine = [matrix(me, 0), matrix(me, 1)];
                    comm.reduce(&mine[..], &mut got[..], matrix_product(), root).await?;
                    if me == root {
                        assert_eq!(got, [serial_product(0..n, 0), serial_product(0..n, 1)]);
                    }
                }
                let mut got = [0i64; 3];
                comm.allreduce(&values(me), &mut got, MAX).await?;
                assert_eq!(got, serial(i64::max, n));
                comm.allreduce(&values(me), &mut got, MIN).await?;
                assert_eq!(got, serial(i64::min, n));
                comm.allreduce(&values(me), &mut got, BXOR).await?;
                assert_eq!(got, serial(|a, b| a ^ b, n));
                // MINLOC and MAXLOC on a pair type: values repeat every 3
                // ranks, so several ranks hold the extremes.
                let load = (me % 3) as f64 * 1.5;
                let mut least = mpx::coll::Loc { value: 0.0, index: 0 };
                comm.allreduce(&mpx::coll::Loc { value: load, index: me as i32 }, &mut least, mpx::coll::MINLOC).await?;
                assert_eq!((least.value, least.index), (0.0, 0));
                // NaN is passed over by MINLOC, as by MIN, wherever it lies:
                // the result is the same whichever rank holds it.
                for nan_at in 0..n {
                    let value = if me == nan_at { f64::NAN } else { 2.0 + me as f64 };
                    let mut least = mpx::coll::Loc { value: 0.0, index: 0 };
                    comm.allreduce(&mpx::coll::Loc { value, index: me as i32 }, &mut least, mpx::coll::MINLOC).await?;
                    let mut min = 0.0;
                    comm.allreduce(&value, &mut min, MIN).await?;
                    if n == 1 {
                        assert!(least.value.is_nan() && min.is_nan() && least.index == 0);
                    } else {
                        let first = usize::from(nan_at == 0);
                        assert_eq!((least.value, least.index, min), (2.0 + first as f64, first as i32, 2.0 + first as f64), "NaN at {nan_at}");
                    }
                }
                let mut most = mpx::coll::Loc { value: 0i32, index: 0 };
                comm.allreduce(&mpx::coll::Loc { value: (me % 3) as i32, index: me as i32 }, &mut most, mpx::coll::MAXLOC).await?;
                assert_eq!((most.value, most.index), ((n.min(3) - 1) as i32, (n.min(3) - 1) as i32));
                let mut product = [Matrix::default(); 1];
                comm.allreduce(&[matrix(me, 2)][..], &mut product[..], matrix_product()).await?;
                assert_eq!(product[0], serial_product(0..n, 2));
                let mut empty: Vec<f64> = Vec::new();
                comm.allreduce(&Vec::new(), &mut empty, SUM).await?;
                // scan and exscan
                let mut upto = [0i64; 3];
                comm.scan(&values(me), &mut upto, SUM).await?;
                assert_eq!(upto, serial(|a, b| a + b, me + 1));
                let mut before = [i64::MIN; 3];
                comm.exscan(&values(me), &mut before, SUM).await?;
                if me == 0 {
                    assert_eq!(before, [i64::MIN; 3], "rank 0's is left alone");
                } else {
                    assert_eq!(before, serial(|a, b| a + b, me));
                }
                let mut prefix = Matrix::default();
                comm.scan(&matrix(me, 3), &mut prefix, matrix_product()).await?;
                assert_eq!(prefix, serial_product(0..me + 1, 3));
                let mut prefix = [9; 4];
                comm.exscan(&matrix(me, 3), &mut prefix, matrix_product()).await?;
                if me > 0 {
                    assert_eq!(prefix, serial_product(0..me, 3));
                }
                // An exscan's rank 0 buffer is not significant: it may be empty.
                let mut before = if me == 0 { Vec::new() } else { vec![0i64; 3] };
                comm.exscan(&values(me)[..], &mut before[..], SUM).await?;
                if me > 0 {
                    assert_eq!(before, serial(|a, b| a + b, me));
                }
                // reduce_scatter_block: element j of rank r's send is r * j
                let send: Vec<u64> = (0..2 * n).map(|j| (me * j) as u64).collect();
                let mut mine = [0u64; 2];
                comm.reduce_scatter_block(&send, &mut mine[..], SUM).await?;
                let total = |j: usize| (0..n).map(|r| (r * j) as u64).sum::<u64>();
                assert_eq!(mine, [total(2 * me), total(2 * me + 1)]);
                // reduce_scatter: rank r gets r % 3 values
                let counts: Vec<usize> = (0..n).map(|r| r % 3).collect();
                let len: usize = counts.iter().sum();
                let send: Vec<u64> = (0..len).map(|j| (me * j) as u64).collect();
                let mut mine = vec![0u64; counts[me]];
                comm.reduce_scatter(&send, &mut mine, &counts, SUM).await?;
                let start: usize = counts[..me].iter().sum();
                assert_eq!(mine, (start..start + counts[me]).map(total).collect::<Vec<_>>());
                Ok(())
            }))
            .await;
        }
    }

    /// A sum whose value depends on the order of its terms gives the same
    /// bits on every rank, every time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn allreduce_is_bit_identical_on_every_rank() {
        for n in SIZES {
            let bits = returns(launch(n, move |comm| async move {
                let terms = [1e16, 1.0, -1e16, 3.5, 1e-3, -7.25e15, 2.0, 1e16];
                let mine = [terms[comm.rank() % 8], terms[(comm.rank() + 3) % 8] * 1.5];
                let mut sum = [0.0f64; 2];
                comm.allreduce(&mine, &mut sum, SUM).await?;
                let mut again = [0.0f64; 2];
                comm.allreduce(&mine, &mut again, SUM).await?;
                assert_eq!(sum.map(f64::to_bits), again.map(f64::to_bits));
                Ok(sum.map(f64::to_bits))
            }))
            .await;
            assert!(bits.iter().all(|b| *b == bits[0]), "{n} ranks: {bits:?}");
        }
    }

    /// Allreduce on both sides of the size from which it reduce-scatters
    /// and allgathers (64 KiB per rank): above it, every element is the
    /// left fold of the ranks' values in rank order, bit for bit, for a
    /// floating-point sum whose value depends on the order; below it the
    /// bits agree on every rank; a non-commutative product matches the
    /// serial one on both sides, blocks uneven.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_allreduces_combine_blocks_in_rank_order() {
        const THRESHOLD: usize = 64 << 10;
        let terms = [1e16, 1.0, -1e16, 3.5, 1e-3, -7.25e15, 2.0, 1e16];
        let value = move |rank: usize, i: usize| terms[(rank + i) % 8] * (1.0 + (i % 5) as f64);
        for n in SIZES {
            for count in [THRESHOLD / 8 - 1, THRESHOLD / 8 + 5] {
                let large = n > 1 && count * 8 >= THRESHOLD;
                let bits = returns(launch(n, move |comm| async move {
                    let me = comm.rank();
                    let mine: Vec<f64> = (0..count).map(|i| value(me, i)).collect();
                    let mut sum = vec![0.0f64; count];
                    comm.allreduce(&mine, &mut sum, SUM).await?;
                    if large {
                        for (i, got) in sum.iter().enumerate() {
                            let want = (1..n).fold(value(0, i), |acc, r| acc + value(r, i));
                            assert_eq!(got.to_bits(), want.to_bits(), "{n} ranks, element {i}");
                        }
                    }
                    let elements = count * 8 / std::mem::size_of::<Matrix>();
                    let mats: Vec<Matrix> = (0..elements).map(|i| matrix(me, i)).collect();
                    let mut product = vec![[0i64; 4]; elements];
                    comm.allreduce(&mats, &mut product, matrix_product()).await?;
                    for (i, got) in product.iter().enumerate() {
                        assert_eq!(*got, serial_product(0..n, i), "{n} ranks, {elements} matrices, element {i}");
                    }
                    // Built-ins that fold from either side (integers) and
                    // those that do not (float MAX, MINLOC on a padded pair,
                    // LOR on bools, whose values are validated), each
                    // against a left fold in rank order.
                    let ints: Vec<i32> = (0..count).map(|i| (me * 7 + i) as i32 * 0x0101).collect();
                    let mut xor = vec![0i32; count];
                    comm.allreduce(&ints, &mut xor, BXOR).await?;
                    let floats: Vec<f64> = (0..count).map(|i| floats_of(me, i)).collect();
                    let mut most = vec![1.0f64; count];
                    comm.allreduce(&floats, &mut most, MAX).await?;
                    let pairs: Vec<Loc<f64>> = (0..count / 2).map(|i| Loc { value: ((me + i) % 3) as f64, index: me as i32 }).collect();
                    let mut least = vec![Loc { value: 0.0, index: 0 }; count / 2];
                    comm.allreduce(&pairs, &mut least, MINLOC).await?;
                    let flags: Vec<bool> = (0..count * 8).map(|i| (me + i) % (n + 1) == 0).collect();
                    let mut any = vec![false; count * 8];
                    comm.allreduce(&flags, &mut any, LOR).await?;
                    for i in 0..count {
                        let want = (0..n).fold(0i32, |acc, r| acc ^ ((r * 7 + i) as i32 * 0x0101));
                        assert_eq!(xor[i], want, "{n} ranks, BXOR element {i}");
                        let want = (1..n).fold(floats_of(0, i), |acc, r| acc.max(floats_of(r, i)));
                        assert_eq!(most[i].to_bits(), want.to_bits(), "{n} ranks, MAX element {i}");
                    }
                    for (i, got) in least.iter().enumerate() {
                        let (value, index) = (0..n).map(|r| (((r + i) % 3) as f64, r as i32)).fold((f64::INFINITY, i32::MAX), |a, b| if b.0 < a.0 { b } else { a });
                        assert_eq!((got.value, got.index), (value, index), "{n} ranks, MINLOC element {i}");
                    }
                    for (i, got) in any.iter().enumerate() {
                        assert_eq!(*got, (0..n).any(|r| (r + i) % (n + 1) == 0), "{n} ranks, LOR element {i}");
                    }
                    // The same through a built-in on a type of the program's own.
                    let own: Vec<OwnMatrix> = mats.iter().map(|&m| OwnMatrix(m)).collect();
                    let mut own_product = vec![OwnMatrix::default(); elements];
                    comm.allreduce(&own, &mut own_product, PROD).await?;
                    for (i, got) in own_product.iter().enumerate() {
                        assert_eq!(got.0, serial_product(0..n, i), "{n} ranks, {elements} own matrices, element {i}");
                    }
                    Ok(sum.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
                }))
                .await;
                assert!(bits.iter().all(|b| *b == bits[0]), "{n} ranks, {count} values: the ranks disagree");
            }
        }
    }

    /// Point-to-point messages on the tags collectives number their calls
    /// with never meet a collective; two collectives in flight on one
    /// communicator each get their own messages, whichever is awaited
    /// first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn collectives_keep_apart_from_point_to_point_and_each_other() {
        returns(launch(4, |comm| async move {
            let (me, n) = (comm.rank(), comm.size());
            let right = (me + 1) % n;
            let left = (me + n - 1) % n;
            let early: Vec<_> = (0..3).map(|tag| comm.isend(&(1000 + tag), right, tag)).collect();
            let mut a = [me as u32; 2];
            let mut b = [0u32; 8];
            let mut total = 0u32;
            {
                let first = comm.bcast(&mut a, 1);
                let second = comm.allreduce(&(me as u32), &mut total, SUM);
                let third = comm.allgather(&[me as u32, 7][..], &mut b[..]);
                // Awaited in reverse: each still takes its own messages.
                third.await?;
                second.await?;
                first.await?;
            }
            assert_eq!((a, total, b), ([1, 1], 6, [0, 7, 1, 7, 2, 7, 3, 7]));
            for tag in 0..3 {
                let (got, _) = comm.recv::<i32>(left, tag).await?;
                assert_eq!(got, 1000 + tag);
            }
            for request in early {
                request.await?;
            }
            Ok(())
        }))
        .await;
    }

    /// Ranks may wait for their collectives in different orders: each moves
    /// on only while polled, so waiting for the first must not stall the
    /// others. Among 4 ranks, rank 0 waits for the second of two barriers
    /// first: its second round (two ranks away) then needs rank 2's second
    /// barrier to move, while rank 2 waits for its first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ranks_may_wait_for_their_collectives_in_any_order() {
        returns(launch(4, |comm| async move {
            for reversed in [0, 1, 2, 3] {
                let (a, b) = (comm.barrier(), comm.barrier());
                let both = if comm.rank() == reversed { mpx::wait_all([b, a]) } else { mpx::wait_all([a, b]) };
                let outcomes = tokio::time::timeout(std::time::Duration::from_secs(20), both).await.expect("no rank waits for ever");
                assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
            }
            Ok(())
        }))
        .await;
    }

    /// Collectives are operations like point-to-point requests: several
    /// wait together (`wait_all`, a `RequestSet` completing them in any
    /// order), `test` says whether one has finished without waiting, and a
    /// finished one gives its outcome once, then a null request's `Ok(())`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn collectives_wait_together_and_test_like_requests() {
        use mpx::{Operation, RequestSet};
        returns(launch(3, |comm| async move {
            let me = comm.rank() as u64;
            let (mut sum, mut max, mut all) = (0u64, 0u64, [0u64; 3]);
            let outcomes = mpx::wait_all([
                comm.allreduce(&me, &mut sum, SUM),
                comm.allreduce(&me, &mut max, MAX),
                comm.allgather(&(me * 10), &mut all[..]),
            ])
            .await;
            assert_eq!(outcomes.len(), 3);
            assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
            assert_eq!((sum, max, all), (3, 2, [0, 10, 20]));

            // Rank 0 enters the barrier only once the others have found
            // theirs unfinished: test says so without waiting.
            let mut barrier = if me == 0 {
                for _ in 1..3 {
                    comm.recv::<u8>(mpx::Any, 9).await?;
                }
                comm.barrier()
            } else {
                let mut barrier = comm.barrier();
                assert!(barrier.test().is_none(), "finished before rank 0 entered");
                assert!(!barrier.is_complete());
                comm.send(&1u8, 0, 9).await?;
                barrier
            };
            let outcome = loop {
                if let Some(outcome) = barrier.test() {
                    break outcome;
                }
                tokio::task::yield_now().await;
            };
            outcome?;
            assert!(barrier.is_complete());
            assert_eq!(barrier.take_output(), Ok(()), "taken twice: a null request's outcome");

            // A set completes them in whatever order they finish.
            let (mut a, mut b) = (0i64, 0i64);
            let mut set: RequestSet<mpx::coll::Collective<'_>> = [comm.allreduce(&1i64, &mut a, SUM), comm.allreduce(&(me as i64), &mut b, MIN)].into_iter().collect();
            let mut done = Vec::new();
            while let Some((slot, outcome)) = set.wait_any().await {
                outcome?;
                done.push(slot);
            }
            done.sort_unstable();
            assert_eq!(done, [0, 1]);
            drop(set);
            assert_eq!((a, b), (3, 0));
            Ok(())
        }))
        .await;
    }

    /// Two ranks that both call themselves a broadcast's root: neither
    /// waits for ever, and a rank that fails names the other; the
    /// communicator works on. With data too large to go before its
    /// receiver asks for it (8 MiB, above every transport's eager and
    /// unsolicited limits), at least one fails (smaller data may go out
    /// and finish both calls). The same for serde values.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_roots_of_one_broadcast_wait_for_nothing() {
        for (values, serde) in [(1usize << 17, false), (1 << 20, false), (1 << 20, true)] {
            let outcomes = returns(launch(2, move |comm| async move {
                let me = comm.rank();
                let mut data = vec![me as f64; values];
                let call = match serde {
                    false => comm.bcast(&mut data[..], me),
                    true => comm.bcast_serde(&mut data, me),
                };
                outcome_then_works_on(&comm, "broadcast", call).await
            }))
            .await;
            each_failed_root_names_the_other(&outcomes, values >= 1 << 20, &format!("{values} values, serde {serde}"));
        }
    }

    /// A rank that takes another rank as a broadcast's root than the
    /// others do fails on the data it gets, naming its parent (on four
    /// ranks, rank 3 has rank 2 as its parent under root 0 and root 2
    /// alike), rather than take it for its own; the communicator works on.
    /// The same for serde values.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_that_takes_another_root_fails() {
        for serde in [false, true] {
            let outcomes = returns(launch(4, move |comm| async move {
                let me = comm.rank();
                let mut data = [me as u32; 3];
                let root = if me == 3 { 2 } else { 0 };
                let call = match serde {
                    false => comm.bcast(&mut data[..], root),
                    true => comm.bcast_serde(&mut data, root),
                };
                outcome_then_works_on(&comm, "broadcast", call).await
            }))
            .await;
            let named = |e: &Option<mpx::Error>| match e.as_ref().map(mpx::Error::kind) {
                Some(mpx::ErrorKind::CollectiveMismatch { rank, .. }) => Some(*rank),
                _ => None,
            };
            assert_eq!(named(&outcomes[3]), Some(2), "serde {serde}: {outcomes:?}");
            for outcome in &outcomes[..3] {
                assert!(outcome.is_none() || named(outcome) == Some(3), "serde {serde}: {outcomes:?}");
            }
        }
    }

    /// A rank that waits for a broadcast's or a scatter's data from a rank
    /// that sends it none, since the others take another root (on three
    /// ranks, rank 2 takes rank 1 as the root and waits for its data, while
    /// ranks 0 and 1 take rank 0, which sends rank 2 its data), fails
    /// rather than wait for ever, naming a rank that takes the other root
    /// (over messages, rank 0, on the data it sends; ranks that meet
    /// compare their roots); the communicator works on. The same for serde
    /// values.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_whose_root_sends_it_nothing_fails() {
        for collective in ["bcast", "bcast_serde", "scatter", "scatter_serde"] {
            let outcomes = returns(launch(3, move |comm| async move {
                let me = comm.rank();
                let root = if me == 2 { 1 } else { 0 };
                let call = async {
                    let mut data = vec![me as u32; 3];
                    match collective {
                        "bcast" => comm.bcast(&mut data[..], root).await,
                        "bcast_serde" => comm.bcast_serde(&mut data, root).await,
                        "scatter_serde" => comm.scatter_serde(&vec![vec![7u32; 3]; 3], root).await.map(|mine| data = mine),
                        _ => comm.scatter(&[7u32; 9][..], &mut data[..], root).await,
                    }
                };
                outcome_then_works_on(&comm, collective, call).await
            }))
            .await;
            let named = |e: &Option<mpx::Error>| match e.as_ref().map(mpx::Error::kind) {
                Some(mpx::ErrorKind::CollectiveMismatch { rank, .. }) => Some(*rank),
                _ => None,
            };
            assert!(matches!(named(&outcomes[2]), Some(0 | 1)), "{collective}: {outcomes:?}");
            for outcome in &outcomes[..2] {
                assert!(outcome.is_none() || named(outcome) == Some(2), "{collective}: {outcomes:?}");
            }
        }
    }

    /// An allreduce whose ranks choose different algorithms from their own
    /// arguments (four values of an array type on rank 0, a slice of as
    /// many of its elements on the others: the same bytes and types, but
    /// four values are fewer than a value per rank, so rank 0 does not
    /// reduce in blocks) fails on every rank rather than leave some
    /// waiting; the communicator works on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_allreduce_whose_ranks_choose_different_algorithms_fails() {
        const N: usize = mpx::coll::MAX_REDUCED_VALUE / 8;
        let outcomes = returns(launch(5, |comm| async move {
            let call = async {
                match comm.rank() {
                    0 => {
                        let (mine, mut sum) = (vec![[1.0f64; N]; 4], vec![[0.0f64; N]; 4]);
                        comm.allreduce(&mine[..], &mut sum[..], SUM).await
                    }
                    _ => comm.allreduce(&vec![1.0f64; 4 * N][..], &mut vec![0.0f64; 4 * N][..], SUM).await,
                }
            };
            outcome_then_works_on(&comm, "allreduce", call).await
        }))
        .await;
        for (rank, outcome) in outcomes.iter().enumerate() {
            assert!(matches!(outcome.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { rank: other, .. }) if *other != rank), "rank {rank}: {outcomes:?}");
        }
    }

    /// An allreduce of values of an array type as large as a buffer fails
    /// with a clear error on every rank (its algorithms would keep a few
    /// such values on the stack, and overflowed it), where reduce, scan
    /// and exscan take them and an allreduce of values up to
    /// `MAX_REDUCED_VALUE` bytes reduces; the communicator works on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_allreduce_of_values_too_large_for_the_stack_fails() {
        const SMALL: usize = mpx::coll::MAX_REDUCED_VALUE / 8;
        const LARGE: usize = 16_384;
        returns(launch(3, |comm| async move {
            let one: Box<[f64; LARGE]> = vec![1.0f64; LARGE].into_boxed_slice().try_into().expect("LARGE values");
            let mut sum: Box<[f64; LARGE]> = vec![0.0f64; LARGE].into_boxed_slice().try_into().expect("LARGE values");
            let refused = comm.allreduce(&*one, &mut *sum, SUM).await;
            assert!(matches!(refused.as_ref().map_err(mpx::Error::kind), Err(mpx::ErrorKind::InvalidArgument(why)) if why.contains("too large")), "{refused:?}");
            // The other reductions take them (their frames hold none).
            comm.reduce(&*one, &mut *sum, SUM, 1).await?;
            assert!(comm.rank() != 1 || sum.iter().all(|&v| v == 3.0));
            comm.scan(&*one, &mut *sum, SUM).await?;
            assert!(sum.iter().all(|&v| v == (comm.rank() + 1) as f64));
            comm.exscan(&*one, &mut *sum, SUM).await?;
            assert!(comm.rank() == 0 || sum.iter().all(|&v| v == comm.rank() as f64));
            let one: Box<[f64; SMALL]> = vec![1.0f64; SMALL].into_boxed_slice().try_into().expect("SMALL values");
            let mut sum: Box<[f64; SMALL]> = vec![0.0f64; SMALL].into_boxed_slice().try_into().expect("SMALL values");
            comm.allreduce(&*one, &mut *sum, SUM).await?;
            assert!(sum.iter().all(|&v| v == 3.0));
            Ok(())
        }))
        .await;
    }

    /// Ranks that take different roots for a reduce do not wait for ever:
    /// the values of a rank that takes another root fail rank 0, whose
    /// word that it gave up reaches every rank waiting for the result;
    /// the communicator works on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ranks_that_take_different_roots_for_a_reduce_fail() {
        for roots in [vec![0, 1], vec![1, 1, 2]] {
            let n = roots.len();
            let outcomes = returns(launch(n, move |comm| {
                let root = roots[comm.rank()];
                async move {
                    let mut total = 0u64;
                    let call = comm.reduce(&(comm.rank() as u64), &mut total, SUM, root);
                    outcome_then_works_on(&comm, "reduce", call).await
                }
            }))
            .await;
            assert!(outcomes[0].is_some(), "rank 0 takes a value of another root's: {outcomes:?}");
            for outcome in outcomes.iter().flatten() {
                assert!(matches!(outcome.kind(), mpx::ErrorKind::CollectiveMismatch { .. }), "{outcomes:?}");
            }
        }
    }

    /// Two ranks that both call themselves a scatter's root, with blocks
    /// too large to go before they are asked for: at least one fails,
    /// naming the other, rather than both waiting for ever; the
    /// communicator works on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_roots_of_one_scatter_wait_for_nothing() {
        let outcomes = returns(launch(2, |comm| async move {
            let me = comm.rank();
            let all = vec![me as f64; 2 << 20];
            let mut mine = vec![0.0f64; 1 << 20];
            let call = comm.scatter(&all, &mut mine, me);
            outcome_then_works_on(&comm, "scatter", call).await
        }))
        .await;
        each_failed_root_names_the_other(&outcomes, true, "scatter");
    }

    /// The same of `scatter_serde`, whose values go out as serialized
    /// messages.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_roots_of_one_serde_scatter_wait_for_nothing() {
        let outcomes = returns(launch(2, |comm| async move {
            let me = comm.rank();
            let all = vec![vec![me as u8; 8 << 20]; 2];
            let call = async { comm.scatter_serde(&all, me).await.map(drop) };
            outcome_then_works_on(&comm, "scatter_serde", call).await
        }))
        .await;
        each_failed_root_names_the_other(&outcomes, true, "scatter_serde");
    }

    /// Arguments every rank gets wrong alike are errors on every rank, and
    /// a count that disagrees with the root's is reported by the rank that
    /// sees it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn arguments_that_disagree_are_errors() {
        let meets = options(3).local_collectives;
        returns(launch(3, move |comm| async move {
            let mut x = [0.0f64; 2];
            assert!(matches!(comm.bcast(&mut x, 3).await, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::InvalidRank { rank: 3, size: 3 })));
            let err = comm.allreduce(&[1.0f64, 2.0], &mut x, mpx::coll::BOR).await.unwrap_err();
            assert!(matches!(err.kind(), mpx::ErrorKind::InvalidArgument(_)), "{err}");
            // Rank 2 sends 3 values where the root expects 2.
            let mine = vec![comm.rank() as u8; if comm.rank() == 2 { 3 } else { 2 }];
            let mut all = vec![0u8; if comm.rank() == 0 { 6 } else { 0 }];
            let got = comm.gather(&mine, &mut all, 0).await;
            if comm.rank() == 0 {
                assert!(matches!(got, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::CollectiveMismatch { rank: 2, .. })), "{got:?}");
            } else {
                got?;
            }
            // A large message longer than the receive (it fails before its
            // data moves): a mismatch too, naming the root.
            let mut values = vec![0.0f64; if comm.rank() == 0 { 20_000 } else { 10_000 }];
            let got = comm.bcast(&mut values[..], 0).await;
            if comm.rank() == 0 && meets {
                // Ranks that meet in memory each check every rank's part,
                // a root with this much data too (it waits for the others).
                assert!(matches!(got.as_ref().map_err(mpx::Error::kind), Err(mpx::ErrorKind::CollectiveMismatch { rank: 1, detail }) if detail.contains("80000 bytes")), "{got:?}");
            } else if comm.rank() == 0 {
                got?;
            } else {
                assert!(matches!(got.as_ref().map_err(mpx::Error::kind), Err(mpx::ErrorKind::CollectiveMismatch { rank: 0, detail }) if detail.contains("160000 bytes")), "{got:?}");
            }
            // Blocks that overlap at the root.
            let mut all = vec![0u8; 4];
            let got = comm.gatherv(&1u8, &mut all, &[1, 1, 1], &[0, 1, 1], 0).await;
            if comm.rank() == 0 {
                assert!(matches!(got, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::InvalidArgument(_))), "{got:?}");
            }
            // Counts whose sum cannot be counted (values without bytes make
            // any length free): an error on every rank, not a wrapped sum.
            let got = comm.reduce_scatter(&[[0u8; 0]; 0][..], &mut [[0u8; 0]; 1][..], &[usize::MAX, 1, 1], mpx::coll::BOR).await;
            assert!(matches!(got, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::Overflow(_))), "{got:?}");
            comm.barrier().await?;
            Ok(())
        }))
        .await;
    }

    /// Typed blocks of one size but another type (`u32` on rank 0, `f32`
    /// elsewhere) are reported by every rank that takes a block of the
    /// other type: never copied over as the bytes they are.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocks_of_another_type_of_the_same_size_are_errors() {
        returns(launch(3, move |comm| async move {
            let me = comm.rank();
            let mismatch = |got: &mpx::Result<()>| matches!(got.as_ref().map_err(mpx::Error::kind), Err(mpx::ErrorKind::CollectiveMismatch { .. }) | Err(mpx::ErrorKind::TypeMismatch));
            let (ints, floats) = ([7u32; 6], [7.0f32; 6]);
            let (mut int_out, mut float_out) = ([0u32; 6], [0.0f32; 6]);
            let got = match me {
                0 => comm.alltoall(&ints[..], &mut int_out[..]).await,
                _ => comm.alltoall(&floats[..], &mut float_out[..]).await,
            };
            assert!(mismatch(&got), "alltoall, rank {me}: {got:?}");
            let got = match me {
                0 => comm.allgather(&ints[..2], &mut int_out[..]).await,
                _ => comm.allgather(&floats[..2], &mut float_out[..]).await,
            };
            assert!(mismatch(&got), "allgather, rank {me}: {got:?}");
            let got = match me {
                0 => comm.bcast(&mut int_out[..], 0).await,
                _ => comm.bcast(&mut float_out[..], 0).await,
            };
            // The root takes nothing; every other rank takes its block.
            assert!(me == 0 || mismatch(&got), "bcast, rank {me}: {got:?}");
            // Each rank's own block lands (7.0); rank 0's integers never do.
            assert!(float_out.iter().all(|&x| x == 0.0 || x == 7.0), "rank {me}: {float_out:?}");
            comm.barrier().await?;
            Ok(())
        }))
        .await;
    }

    /// A rank whose block to itself does not fit its own room (described
    /// buffers, whose counts each side gives) fails alone, on every
    /// transport: the others' blocks went as they should.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_block_to_itself_that_does_not_fit_fails_that_rank_alone() {
        use mpx::{Datatype, RecvBuf, Region, RegionMut, SendBuf};
        returns(launch(3, move |comm| async move {
            let (me, n) = (comm.rank(), comm.size());
            let int = Datatype::int();
            let send: Vec<i32> = (0..2 * n as i32).map(|i| me as i32 * 10 + i).collect();
            let mut recv = vec![-1i32; 3 * n];
            let room = recv.len() as u64;
            // Rank 0 makes room for 3 values from itself, which sends it 2.
            let rcounts: Vec<usize> = (0..n).map(|s| if me == 0 && s == 0 { 3 } else { 2 }).collect();
            let rdispls: Vec<usize> = (0..n).map(|s| 3 * s).collect();
            let got = comm
                .alltoallv(
                    SendBuf::new(Region::of(&send), send.len() as u64, &int),
                    &[2; 3][..n],
                    &[0, 2, 4][..n],
                    RecvBuf::new(RegionMut::of(&mut recv), room, &int),
                    &rcounts,
                    &rdispls,
                )
                .await;
            if me == 0 {
                assert!(got.is_err(), "{got:?}");
            } else {
                got?;
                for s in 0..n {
                    let from = s as i32 * 10 + 2 * me as i32;
                    assert_eq!(recv[3 * s..3 * s + 2], [from, from + 1], "rank {me}, block from {s}");
                }
            }
            comm.barrier().await?;
            Ok(())
        }))
        .await;
    }

    /// Allreduce counts that disagree across the size from which the data
    /// is cut in blocks (each rank chooses its algorithm from its own
    /// count), sized so that one rank's blocks are exactly the others'
    /// whole data: every rank fails (none waits forever, none takes the
    /// blocks for a result), whichever rank disagrees, whatever the rank
    /// count (recursive doubling or a tree for the small data), on a
    /// communicator numbered otherwise than the world too; and the
    /// communicator works on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn allreduce_counts_that_disagree_across_algorithms_fail_on_every_rank() {
        for ranks in 2usize..=5 {
            for odd in 0..ranks {
                returns(launch(ranks, move |world| async move {
                    // Reversed: ranks are named otherwise than in the world.
                    let comm = world.split(Some(0), -(world.rank() as i32)).await?.expect("a color");
                    // 8191 doubles are just under 64 KiB.
                    let count = if comm.rank() == odd { 8191 * ranks } else { 8191 };
                    let send = vec![1.0f64; count];
                    let mut recv = vec![0.0f64; count];
                    let got = tokio::time::timeout(std::time::Duration::from_secs(20), comm.allreduce(&send[..], &mut recv[..], SUM)).await;
                    let me = comm.rank();
                    let got = got.unwrap_or_else(|_| panic!("rank {me} of {ranks} (rank {odd} odd): the allreduce hangs"));
                    match got.map_err(mpx::Error::into_kind) {
                        Err(mpx::ErrorKind::CollectiveMismatch { rank, .. }) => assert!(rank < ranks && rank != me, "rank {me}: named {rank}"),
                        other => panic!("rank {me} of {ranks} (rank {odd} odd): {other:?}"),
                    }
                    comm.barrier().await?;
                    let mut total = 0usize;
                    comm.allreduce(&1usize, &mut total, SUM).await?;
                    assert_eq!(total, ranks);
                    Ok(())
                }))
                .await;
            }
        }
    }

    /// Collectives over described buffers: columns of row-major matrices
    /// (strided vectors, resized so that successive items are successive
    /// columns) against contiguous rows, for bcast, gather(v), scatter(v),
    /// allgather(v), alltoall(v) and alltoallw, on every rank count; and
    /// the errors of signatures that disagree and of alltoallw receive
    /// blocks that overlap.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn described_buffers_move_as_their_datatypes_say() {
        use mpx::coll::Block;
        use mpx::{Datatype, RecvBuf, Region, RegionMut, SendBuf};
        for n in SIZES {
            returns(launch(n, move |comm| async move {
                let (me, n) = (comm.rank(), comm.size());
                let double = Datatype::double();
                // Column j of an n x n row-major matrix, as one item whose
                // extent is one double: item j is column j.
                let column = Datatype::resized(0, 8, &Datatype::vector(n, 1, n, &double)?)?;
                let value = |rank: usize, i: usize, j: usize| (1000 * rank + 10 * i + j) as f64;
                let matrix: Vec<f64> = (0..n * n).map(|k| value(me, k / n, k % n)).collect();
                let root = n / 2;

                // bcast of the root's column 1 (or 0) into every rank's same column.
                let c = 1 % n;
                let mut grid: Vec<f64> = if me == root { matrix.clone() } else { vec![-1.0; n * n] };
                let at = c * 8;
                comm.bcast(RecvBuf::new(RegionMut::with_origin(bytemuck::cast_slice_mut(&mut grid), at)?, 1, &column), root).await?;
                for k in 0..n * n {
                    let want = if k % n == c { value(root, k / n, c) } else if me == root { matrix[k] } else { -1.0 };
                    assert_eq!(grid[k], want, "bcast, element {k}");
                }

                // gather: each rank's column `me` lands as row `me` of the root's
                // transposed matrix (contiguous doubles).
                let mine = SendBuf::new(Region::with_origin(bytemuck::cast_slice(&matrix), me * 8)?, 1, &column);
                let mut rows = vec![0.0f64; if me == root { n * n } else { 0 }];
                let rows_buf = RecvBuf::new(RegionMut::of(&mut rows), if me == root { (n * n) as u64 } else { 0 }, &double);
                comm.gather(mine, rows_buf, root).await?;
                if me == root {
                    for r in 0..n {
                        for i in 0..n {
                            assert_eq!(rows[r * n + i], value(r, i, r), "gather: row {r}, element {i}");
                        }
                    }
                }

                // scatter: the root's column r goes to rank r as contiguous doubles.
                let columns = SendBuf::new(Region::of(&matrix), if me == root { n as u64 } else { 0 }, &column);
                let mut got = vec![0.0f64; n];
                comm.scatter(columns, RecvBuf::new(RegionMut::of(&mut got), n as u64, &double), root).await?;
                assert_eq!(got, (0..n).map(|i| value(root, i, me)).collect::<Vec<_>>());

                // allgather: rank r's row r (contiguous) lands in column r of everyone's matrix.
                let row: Vec<f64> = (0..n).map(|i| value(me, me, i)).collect();
                let mut cols = vec![0.0f64; n * n];
                comm.allgather(SendBuf::new(Region::of(&row), n as u64, &double), RecvBuf::new(RegionMut::of(&mut cols), n as u64, &column)).await?;
                for (k, got) in cols.iter().enumerate() {
                    let (i, r) = (k / n, k % n);
                    assert_eq!(*got, value(r, r, i), "allgather, element {k}");
                }

                // alltoall: column r of this rank's matrix goes to rank r, landing
                // as row `me`: a distributed transpose of blocks.
                let mut recv = vec![0.0f64; n * n];
                comm.alltoall(SendBuf::new(Region::of(&matrix), n as u64, &column), RecvBuf::new(RegionMut::of(&mut recv), (n * n) as u64, &double)).await?;
                for s in 0..n {
                    for i in 0..n {
                        assert_eq!(recv[s * n + i], value(s, i, me), "alltoall: from {s}, element {i}");
                    }
                }

                // allgatherv with columns: rank r sends its first r % 2 + 1
                // columns (as many as there are), landing as contiguous rows.
                let ncols = |r: usize| (r % 2 + 1).min(n);
                let counts: Vec<usize> = (0..n).map(|r| ncols(r) * n).collect();
                let displs: Vec<usize> = (0..n).map(|r| counts[..r].iter().sum()).collect();
                let total: usize = counts.iter().sum();
                let first = SendBuf::new(Region::of(&matrix), ncols(me) as u64, &column);
                let mut all = vec![0.0f64; total];
                comm.allgatherv(first, RecvBuf::new(RegionMut::of(&mut all), total as u64, &double), &counts, &displs).await?;
                for r in 0..n {
                    for (b, k) in (displs[r]..displs[r] + counts[r]).enumerate() {
                        let (col, i) = (b / n, b % n);
                        assert_eq!(all[k], value(r, i, col), "allgatherv: rank {r}'s element {b}");
                    }
                }

                // alltoallw: rank r gets this rank's column r (a vector, no
                // resize, at a byte displacement) and this rank gets rank s's
                // column `me` as row s of contiguous doubles.
                let plain_column = Datatype::vector(n, 1, n, &double)?;
                let sends: Vec<Block> = (0..n).map(|r| Block::new(1, &plain_column, (r * 8) as isize)).collect();
                let recvs: Vec<Block> = (0..n).map(|s| Block::new(n as u64, &double, (s * n * 8) as isize)).collect();
                let mut out = vec![0.0f64; n * n];
                comm.alltoallw(Region::of(&matrix), &sends, RegionMut::of(&mut out), &recvs).await?;
                assert_eq!(out, recv, "alltoallw gives what alltoall gave");

                // Signatures that disagree: ints sent where doubles are expected.
                if n > 1 {
                    let ints = [me as i32; 2];
                    let mut doubles = vec![0.0f64; 2 * n];
                    let send = if me == 0 { SendBuf::new(Region::of(&ints), 2, &Datatype::int()) } else { SendBuf::new(Region::of(&matrix), 2, &double) };
                    let got = comm.allgather(send, RecvBuf::new(RegionMut::of(&mut doubles), (2 * n) as u64, &double)).await;
                    assert!(matches!(got.as_ref().map_err(mpx::Error::kind), Err(mpx::ErrorKind::CollectiveMismatch { .. }) | Err(mpx::ErrorKind::TypeMismatch)), "rank {me}: {got:?}");
                    comm.barrier().await?;
                        // Packed data has no signature to check: refused at once
                    // (on every rank here, so none waits).
                    let raw = [0u8; 16];
                    let got = comm.bcast(RecvBuf::new(RegionMut::of(&mut [0u8; 16]), 16, &Datatype::packed()), 0).await;
                    assert!(matches!(got, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::InvalidArgument(_))), "{got:?}");
                    let got = comm.allgather(SendBuf::packed(&raw), RecvBuf::new(RegionMut::of(&mut vec![0u8; 16 * n]), (16 * n) as u64, &Datatype::byte())).await;
                    assert!(got.is_err(), "{got:?}");
                    comm.barrier().await?;
                    // alltoallw receive blocks that overlap (on the last rank):
                    // that rank fails at the start, and every other rank hears of it.
                    let overlapping: Vec<Block> = (0..n).map(|s| Block::new(n as u64, &double, if me == n - 1 { 0 } else { (s * n * 8) as isize })).collect();
                    let got = comm.alltoallw(Region::of(&matrix), &sends, RegionMut::of(&mut out), &overlapping).await;
                    if me == n - 1 {
                        assert!(matches!(got, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::Overlap { .. })), "{got:?}");
                    } else {
                        assert!(matches!(got, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::CollectiveMismatch { .. })), "rank {me}: {got:?}");
                    }
                    comm.barrier().await?;
                }
                Ok(())
            }))
            .await;
        }
    }

    /// Allgathers on both sides of the block size up to which blocks go
    /// by Bruck's algorithm (8 KiB) rather than around a ring, of typed
    /// values, in place and of a column type, on every rank count (Bruck's
    /// groups of blocks wrap past the last rank on some steps, and the
    /// last step of a rank count that is not a power of two moves fewer
    /// blocks); and an allgatherv of even blocks (always the ring).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn allgathers_on_both_sides_of_the_bruck_threshold() {
        const THRESHOLD: usize = 8 << 10;
        let value = |rank: usize, i: usize| (rank * 1_000_003 + i * 7) as f64;
        for n in 1..=8 {
            for count in [THRESHOLD / 8, THRESHOLD / 8 + 1] {
                returns(launch(n, move |comm| async move {
                    let me = comm.rank();
                    let mine: Vec<f64> = (0..count).map(|i| value(me, i)).collect();
                    let check = |all: &[f64], what: &str| {
                        for r in 0..n {
                            for i in 0..count {
                                assert_eq!(all[r * count + i], value(r, i), "{what}: {n} ranks, {count} values, rank {r}'s {i}");
                            }
                        }
                    };
                    let mut all = vec![0.0f64; n * count];
                    comm.allgather(&mine, &mut all).await?;
                    check(&all, "allgather");
                    let mut table = vec![-1.0f64; n * count];
                    table[me * count..(me + 1) * count].copy_from_slice(&mine);
                    comm.allgather_in_place(&mut table).await?;
                    check(&table, "in place");
                    let counts = vec![count; n];
                    let displs: Vec<usize> = (0..n).map(|r| r * count).collect();
                    let mut even = vec![0.0f64; n * count];
                    comm.allgatherv(&mine, &mut even, &counts, &displs).await?;
                    check(&even, "allgatherv");
                    // Rank r's values land in column r of an n-column matrix.
                    let column = mpx::Datatype::resized(0, 8, &mpx::Datatype::vector(count, 1, n, &mpx::Datatype::double())?)?;
                    let mut matrix = vec![0.0f64; n * count];
                    let double = mpx::Datatype::double();
                    let send = mpx::SendBuf::new(mpx::Region::of(&mine), count as u64, &double);
                    comm.allgather(send, mpx::RecvBuf::new(mpx::RegionMut::of(&mut matrix), n as u64, &column)).await?;
                    for r in 0..n {
                        for i in 0..count {
                            assert_eq!(matrix[i * n + r], value(r, i), "columns: {n} ranks, {count} values, rank {r}'s {i}");
                        }
                    }
                    Ok(())
                }))
                .await;
            }
        }
    }

    /// Ranks whose counts disagree across the size at which the
    /// allgather's algorithm changes: one rank takes the ring while the
    /// rest take Bruck's algorithm, or the other way round; both start
    /// with a block to the rank above, so the mismatch shows on that first
    /// message and every rank returns (the harness fails a test that
    /// hangs), those next to a disagreeing rank with an error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn allgather_counts_that_disagree_across_the_threshold_fail_without_a_hang() {
        const SMALL: usize = (8 << 10) / 8;
        for (n, odd, odd_count, others) in [
            (3, 0, SMALL + 1, SMALL),
            (4, 1, SMALL + 1, SMALL),
            (5, 4, SMALL + 1, SMALL),
            (8, 3, SMALL + 1, SMALL),
            (8, 6, SMALL + 1, SMALL),
            (3, 2, SMALL, SMALL + 1),
            (6, 1, SMALL, SMALL + 1),
            (8, 0, SMALL, SMALL + 1),
        ] {
            let outcomes = returns(launch(n, move |comm| async move {
                let me = comm.rank();
                let count = if me == odd { odd_count } else { others };
                let mut all = vec![0.0f64; n * count];
                Ok(comm.allgather(&vec![me as f64; count], &mut all).await.err())
            }))
            .await;
            assert!(outcomes[odd].is_some(), "{n} ranks: rank {odd} must fail");
            assert!(outcomes[(odd + 1) % n].is_some(), "{n} ranks: the rank above {odd} must fail");
        }
    }

    /// A rank whose part disagrees fails, and tells the others: every rank
    /// of the collective fails rather than waits, those that depended on it
    /// naming the rank that gave up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_that_fails_its_part_fails_every_rank() {
        // Ranks that meet in memory each check every rank's part.
        let meets = options(8).local_collectives;
        let failed = returns(launch(8, |comm| async move {
            let me = comm.rank();
            // Rank 4 broadcasts a buffer of another length than the root's.
            let mut buf = vec![0u32; if me == 4 { 3 } else { 4 }];
            let bcast = comm.bcast(&mut buf, 0).await;
            // Rank 1 sends 3 values around the allgather ring, the others 2.
            let mine = vec![me as u8; if me == 1 { 3 } else { 2 }];
            let mut all = vec![0u8; 2 * comm.size()];
            let allgather = comm.allgather(&mine, &mut all).await;
            comm.barrier().await?;
            Ok((bcast.err(), allgather.err()))
        }))
        .await;
        for (rank, (bcast, allgather)) in failed.iter().enumerate() {
            // Rank 4 and the ranks below it in the tree (5, 6, and 7 below 6)
            // fail the broadcast; only rank 4 where they meet in memory
            // (every rank takes the root's data from the root), and the
            // root too if rank 4's part was there before its own (a root
            // that runs ahead checks the parts left before it).
            if meets && rank == 0 {
                if let Some(e) = bcast {
                    assert!(matches!(e.kind(), mpx::ErrorKind::CollectiveMismatch { rank: 4, .. }), "the root: {e}");
                }
            } else {
                assert_eq!(bcast.is_some(), if meets { rank == 4 } else { rank >= 4 }, "rank {rank}: {bcast:?}");
            }
            assert!(allgather.is_some(), "rank {rank} must fail the allgather, not finish it");
        }
        if meets {
            assert!(matches!(failed[4].0.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { rank: 0, .. })), "{:?}", failed[4].0);
        } else {
            assert!(matches!(failed[5].0.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { rank: 4, .. })), "{:?}", failed[5].0);
            assert!(matches!(failed[7].0.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { rank: 6, .. })), "{:?}", failed[7].0);
        }
        assert!(matches!(failed[2].1.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { rank: 1, .. })), "{:?}", failed[2].1);
    }

    /// A rank that finishes without taking part: every other rank's
    /// allreduce fails within the harness's bound, none hangs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_gone_mid_collective_fails_the_others() {
        let outcomes = returns(launch(4, |comm| async move {
            if comm.rank() == 2 {
                return Ok(None);
            }
            let mut sum = 0u64;
            Ok(Some(comm.allreduce(&1u64, &mut sum, SUM).await))
        }))
        .await;
        for (rank, outcome) in outcomes.iter().enumerate() {
            if rank != 2 {
                assert!(matches!(outcome, Some(Err(_))), "rank {rank}: {outcome:?}");
            }
        }
    }

    /// A rank gone before the call fails every other rank's call that
    /// needs it, directly or through the ranks that gave up for it, with
    /// `ProcessFailed` naming it, never with a mismatch naming a live rank
    /// that passed its failure on: under every algorithm (small and large
    /// allreduce, Bruck's and the ring's allgather); a broadcast's ranks
    /// that do not need it finish.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_gone_fails_the_others_naming_it() {
        for (which, values) in [("barrier", 0), ("allreduce", 1), ("allreduce", 20_000), ("allgather", 1), ("allgather", 4_000), ("bcast", 3)] {
            let outcomes = returns(launch(4, move |comm| async move {
                if comm.rank() == 2 {
                    return Ok(None);
                }
                let mine = vec![comm.rank() as u64; values];
                let mut out = vec![0u64; values * comm.size()];
                Ok(Some(match which {
                    "barrier" => comm.barrier().await,
                    "allreduce" => comm.allreduce(&mine[..], &mut out[..values], SUM).await,
                    "allgather" => comm.allgather(&mine[..], &mut out[..]).await,
                    _ => comm.bcast(&mut out[..values], 0).await,
                }))
            }))
            .await;
            for (rank, outcome) in outcomes.iter().enumerate().filter(|&(r, _)| r != 2) {
                let named = matches!(outcome, Some(Err(e)) if matches!(e.kind(), mpx::ErrorKind::ProcessFailed { rank: 2, .. }));
                let finished = matches!(outcome, Some(Ok(())));
                assert!(named || (which == "bcast" && finished), "{which} of {values} values, rank {rank}: {outcome:?}");
            }
        }
    }

    /// A rank that drops its part of a collective before it finished
    /// tells the others it gave up: a broadcast's rank below it in the
    /// tree fails, naming it, rather than wait for ever for data that
    /// never comes (where ranks meet in memory, every rank takes the
    /// root's part alone, and it finishes). The communicator works on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_that_drops_its_part_unfinished_tells_the_others() {
        let meets = options(4).local_collectives;
        let outcomes = returns(launch(4, |comm| async move {
            let me = comm.rank();
            let mut buf = [if me == 0 { 7u32 } else { 0 }; 3];
            let bcast = match me {
                // Started, then dropped before it could pass the root's
                // data on to rank 3 (the root sends only once told).
                2 => {
                    drop(comm.bcast(&mut buf, 0));
                    comm.send(&1u8, 0, 5).await?;
                    None
                }
                0 => {
                    comm.recv::<u8>(2, 5).await?;
                    Some(comm.bcast(&mut buf, 0).await)
                }
                _ => Some(comm.bcast(&mut buf, 0).await),
            };
            // Rank 2 lives on until rank 3's broadcast has returned (a rank
            // that finishes fails its peers' calls anyway).
            if me == 3 {
                comm.send(&1u8, 2, 6).await?;
            }
            if me == 2 {
                comm.recv::<u8>(3, 6).await?;
            }
            let mut ranks = 0u32;
            comm.allreduce(&1u32, &mut ranks, SUM).await?;
            Ok((bcast, buf, ranks))
        }))
        .await;
        for (rank, (bcast, buf, ranks)) in outcomes.iter().enumerate() {
            assert_eq!(*ranks, 4, "rank {rank}: the allreduce after it");
            match rank {
                2 => assert!(bcast.is_none()),
                3 if !meets => assert!(matches!(bcast, Some(Err(ref e)) if matches!(e.kind(), mpx::ErrorKind::CollectiveMismatch { rank: 2, .. })), "rank 3: {bcast:?}"),
                _ => {
                    assert!(matches!(bcast, Some(Ok(()))), "rank {rank}: {bcast:?}");
                    assert_eq!(*buf, [7; 3], "rank {rank}");
                }
            }
        }
    }

    /// A root that rejects its own arguments gives up on the call, and
    /// the messages its leaves sent it are received and dropped: a leaf
    /// whose data goes by rendezvous (80 KB, above the eager threshold)
    /// is not left waiting for an answer, and both ranks go on to the
    /// next calls. (Before, the leaf's request to send stayed in the
    /// root's queue and the leaf waited for ever.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn senders_are_answered_when_the_root_gives_up() {
        let outcomes = returns(launch(2, |comm| async move {
            let send = vec![1.0f64; 10_000];
            let mut recv = vec![0.0f64; if comm.rank() == 0 { 9_999 } else { 0 }];
            let reduce = comm.reduce(&send[..], &mut recv[..], SUM, 0).await;
            let mut ranks = 0u32;
            comm.allreduce(&1u32, &mut ranks, SUM).await?;
            let other = 1 - comm.rank();
            let mut got = 0u32;
            comm.sendrecv(&7u32, other, 3, &mut got, other, 3).await?;
            Ok((reduce, ranks, got))
        }))
        .await;
        assert!(matches!(outcomes[0].0, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::InvalidArgument(_))), "{:?}", outcomes[0].0);
        assert!(outcomes.iter().all(|(_, ranks, got)| (*ranks, *got) == (2, 7)));
    }

    /// Two ranks with credit for a few dozen small messages and four
    /// rendezvous slots each run `calls` 300 times, then check that they
    /// still talk: a message each way and an allreduce. Messages that
    /// `calls` leaves queued for good would hold that credit and stop
    /// every send between them.
    async fn still_talking_after<F, Fut>(calls: F)
    where
        F: Fn(mpx::Comm) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = mpx::Result<()>> + Send + 'static,
    {
        let mut opts = options(2);
        opts.engine.eager_credit = 32 * 1024;
        opts.engine.rndv_slots = 4;
        let calls = std::sync::Arc::new(calls);
        let talked = returns(launch_with(opts, move |comm| {
            let calls = calls.clone();
            async move {
                let other = 1 - comm.rank();
                for _ in 0..300 {
                    calls(comm.clone()).await?;
                }
                let mut got = 0u32;
                comm.sendrecv(&9u32, other, 3, &mut got, other, 3).await?;
                let mut ranks = 0u32;
                comm.allreduce(&1u32, &mut ranks, SUM).await?;
                Ok((got, ranks))
            }
        }))
        .await;
        assert!(talked.iter().all(|&(got, ranks)| (got, ranks) == (9, 2)));
    }

    /// Calls a root drops leave nothing behind: the data its leaf sent it
    /// and the word it sends the leaf are dropped by the rank that no
    /// longer needs them, so that neither holds the other's eager credit
    /// or rendezvous slots (300 dropped calls used to stop every send
    /// between the two).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropped_calls_leave_no_messages_behind() {
        still_talking_after(|comm| async move {
            let (send, mut recv) = ([2u64; 4], [0u64; 4]);
            let reduce = comm.reduce(&send[..], &mut recv[..], SUM, 0);
            if comm.rank() == 0 {
                drop(reduce);
                Ok(())
            } else {
                reduce.await
            }
        })
        .await;
    }

    /// A communicator freed on one rank leaves nothing of its collectives
    /// behind there: the data a leaf sends a root that freed its handle
    /// without joining the call is dropped, queued or still to come, so it
    /// holds none of the leaf's eager credit or rendezvous slots (300 such
    /// calls used to stop every send between the two; over QUIC,
    /// unsolicited credit sends the data unasked, so it passes either way).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_freed_communicator_drops_the_late_messages_of_its_collectives() {
        still_talking_after(|comm| async move {
            let freed = comm.dup();
            if comm.rank() == 1 {
                let (send, mut recv) = ([2u64; 4], [0u64; 4]);
                freed.reduce(&send[..], &mut recv[..], SUM, 0).await?;
            }
            Ok(())
        })
        .await;
    }

    /// The in-place forms against their two-buffer forms.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_place_forms_match_the_two_buffer_forms() {
        for n in SIZES {
            returns(launch(n, move |comm| async move {
                let (me, n) = (comm.rank(), comm.size());
                let mine = [me as i64 * 5 - 3, 1 << me];
                let mut want = [0i64; 2];
                comm.allreduce(&mine[..], &mut want[..], SUM).await?;
                let mut buf = mine;
                comm.allreduce_in_place(&mut buf[..], SUM).await?;
                assert_eq!(buf, want);
                let mut buf = mine;
                comm.reduce_in_place(&mut buf[..], MAX, n - 1).await?;
                if me == n - 1 {
                    assert_eq!(buf, [(n as i64 - 1) * 5 - 3, 1 << (n - 1)]);
                }
                comm.scan(&mine[..], &mut want[..], SUM).await?;
                let mut buf = mine;
                comm.scan_in_place(&mut buf[..], SUM).await?;
                assert_eq!(buf, want);
                let mut product = [matrix(me, 5)];
                comm.exscan_in_place(&mut product[..], matrix_product()).await?;
                if me > 0 {
                    assert_eq!(product[0], serial_product(0..me, 5));
                }
                let mut table = vec![u16::MAX; 2 * n];
                table[2 * me..2 * me + 2].copy_from_slice(&[me as u16, 7]);
                comm.allgather_in_place(&mut table).await?;
                assert_eq!(table, (0..n).flat_map(|r| [r as u16, 7]).collect::<Vec<_>>());
                let mut blocks: Vec<u32> = (0..n).map(|r| (100 * me + r) as u32).collect();
                comm.alltoall_in_place(&mut blocks).await?;
                assert_eq!(blocks, (0..n).map(|s| (100 * s + me) as u32).collect::<Vec<_>>());
                // alltoallv in place: me + r + 1 values with rank r, each way,
                // the blocks laid out in reverse rank order.
                let counts: Vec<usize> = (0..n).map(|r| me + r + 1).collect();
                let mut displs = vec![0; n];
                let mut at = 0;
                for r in (0..n).rev() {
                    displs[r] = at;
                    at += counts[r];
                }
                let mut buf = vec![0u32; at];
                for r in 0..n {
                    for i in 0..counts[r] {
                        buf[displs[r] + i] = (1000 * me + 10 * r + i) as u32;
                    }
                }
                comm.alltoallv_in_place(&mut buf[..], &counts, &displs).await?;
                for r in 0..n {
                    let got = &buf[displs[r]..displs[r] + counts[r]];
                    assert!(got.iter().enumerate().all(|(i, &v)| v == (1000 * r + 10 * me + i) as u32), "{n} ranks, block {r}: {got:?}");
                }
                Ok(())
            }))
            .await;
        }
    }

    /// The in-place forms of gather, gatherv, scatter and scatterv at the
    /// root, of allgatherv on every rank, and of reduce_scatter_block and
    /// reduce_scatter, against a serial computation, on 1 to 4 ranks with
    /// every root tried from the last down: the root's own block stays in
    /// its buffer; the other ranks call the two-buffer form (even ranks)
    /// or the in-place one (odd ranks), which agree. Typed values, doubles
    /// described by a datatype, and a non-commutative operation.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_place_forms_at_the_root_match_a_serial_computation() {
        for n in [1, 2, 3, 4] {
            returns(launch(n, move |comm| async move {
                let (me, n) = (comm.rank(), comm.size());
                for root in [n - 1, n / 2, 0] {
                    // Rank r's i-th value, another for each root.
                    let value = move |r: usize, i: usize| (1000 * root + 10 * r + i) as i64;
                    let what = format!("{n} ranks, root {root}, rank {me}");
                    // gather
                    let count = 3;
                    let mine: Vec<i64> = (0..count).map(|i| value(me, i)).collect();
                    let every: Vec<i64> = (0..n).flat_map(|r| (0..count).map(move |i| value(r, i))).collect();
                    if me == root {
                        let mut all = vec![-1i64; n * count];
                        all[me * count..(me + 1) * count].copy_from_slice(&mine);
                        comm.gather_in_place(&mut all, root).await?;
                        assert_eq!(all, every, "gather_in_place: {what}");
                    } else if me % 2 == 0 {
                        comm.gather(&mine, &mut Vec::<i64>::new(), root).await?;
                    } else {
                        let mut sent = mine.clone();
                        comm.gather_in_place(&mut sent, root).await?;
                        assert_eq!(sent, mine, "gather_in_place leaves what it sends: {what}");
                    }
                    // scatter
                    if me == root {
                        let mut buf = every.clone();
                        comm.scatter_in_place(&mut buf, root).await?;
                        assert_eq!(buf, every, "scatter_in_place: the root's buffer stays as it is: {what}");
                    } else {
                        let mut part = vec![-1i64; count];
                        if me % 2 == 0 {
                            comm.scatter(&Vec::<i64>::new(), &mut part, root).await?;
                        } else {
                            comm.scatter_in_place(&mut part, root).await?;
                        }
                        assert_eq!(part, mine, "scatter_in_place: {what}");
                    }
                    // gatherv, scatterv and allgatherv: rank r has
                    // (r + root) % 3 values, laid out backwards with a gap
                    // of one.
                    let counts: Vec<usize> = (0..n).map(|r| (r + root) % 3).collect();
                    let mut displs = vec![0; n];
                    let mut at = 0;
                    for r in (0..n).rev() {
                        displs[r] = at;
                        at += counts[r] + 1;
                    }
                    let own = displs[me]..displs[me] + counts[me];
                    let mine: Vec<i64> = (0..counts[me]).map(|i| value(me, i)).collect();
                    let mut laid_out = vec![-1i64; at];
                    for r in 0..n {
                        for i in 0..counts[r] {
                            laid_out[displs[r] + i] = value(r, i);
                        }
                    }
                    if me == root {
                        let mut all = vec![-1i64; at];
                        all[own.clone()].copy_from_slice(&mine);
                        comm.gatherv_in_place(&mut all, &counts, &displs, root).await?;
                        assert_eq!(all, laid_out, "gatherv_in_place: {what}");
                    } else if me % 2 == 0 {
                        comm.gatherv(&mine, &mut Vec::<i64>::new(), &counts, &displs, root).await?;
                    } else {
                        let mut sent = mine.clone();
                        comm.gatherv_in_place(&mut sent, &counts, &displs, root).await?;
                    }
                    let data: Vec<i64> = (0..at as i64).map(|k| 7 * k - root as i64).collect();
                    if me == root {
                        let mut buf = data.clone();
                        comm.scatterv_in_place(&mut buf, &counts, &displs, root).await?;
                        assert_eq!(buf, data, "scatterv_in_place: the root's buffer stays as it is: {what}");
                    } else {
                        let mut part = vec![-1i64; counts[me]];
                        if me % 2 == 0 {
                            comm.scatterv(&Vec::<i64>::new(), &counts, &displs, &mut part, root).await?;
                        } else {
                            comm.scatterv_in_place(&mut part, &counts, &displs, root).await?;
                        }
                        assert_eq!(part, &data[own.clone()], "scatterv_in_place: {what}");
                    }
                    let mut table = vec![-1i64; at];
                    table[own.clone()].copy_from_slice(&mine);
                    comm.allgatherv_in_place(&mut table, &counts, &displs).await?;
                    assert_eq!(table, laid_out, "allgatherv_in_place: {what}");
                    // Described buffers: doubles, gathered and scattered in
                    // place on every rank.
                    let double = mpx::Datatype::double();
                    let floats: Vec<f64> = (0..count).map(|i| value(me, i) as f64).collect();
                    let every_float: Vec<f64> = every.iter().map(|&v| v as f64).collect();
                    let mut buf = if me == root { vec![-1.0f64; n * count] } else { floats.clone() };
                    if me == root {
                        buf[me * count..(me + 1) * count].copy_from_slice(&floats);
                    }
                    let items = buf.len() as u64;
                    comm.gather_in_place(mpx::RecvBuf::new(mpx::RegionMut::of(&mut buf), items, &double), root).await?;
                    assert_eq!(buf, if me == root { &every_float[..] } else { &floats[..] }, "gather_in_place, described: {what}");
                    let mut buf = if me == root { every_float.clone() } else { vec![-1.0f64; count] };
                    let items = buf.len() as u64;
                    comm.scatter_in_place(mpx::RecvBuf::new(mpx::RegionMut::of(&mut buf), items, &double), root).await?;
                    assert_eq!(buf, if me == root { &every_float[..] } else { &floats[..] }, "scatter_in_place, described: {what}");
                    // reduce_scatter_block and reduce_scatter in place, of
                    // matrix products: each rank's block of the result at
                    // the start of its buffer.
                    let block = 2;
                    let mut buf: Vec<Matrix> = (0..n * block).map(|k| matrix(me, k + root)).collect();
                    comm.reduce_scatter_block_in_place(&mut buf, matrix_product()).await?;
                    let want: Vec<Matrix> = (me * block..(me + 1) * block).map(|k| serial_product(0..n, k + root)).collect();
                    assert_eq!(buf[..block], want[..], "reduce_scatter_block_in_place: {what}");
                    let total: usize = counts.iter().sum();
                    let start: usize = counts[..me].iter().sum();
                    let mut buf: Vec<Matrix> = (0..total).map(|k| matrix(me, k)).collect();
                    comm.reduce_scatter_in_place(&mut buf, &counts, matrix_product()).await?;
                    let want: Vec<Matrix> = (start..start + counts[me]).map(|k| serial_product(0..n, k)).collect();
                    assert_eq!(buf[..counts[me]], want[..], "reduce_scatter_in_place: {what}");
                }
                Ok(())
            }))
            .await;
        }
    }

    /// Serde values: broadcast, gathered, scattered and allgathered, of
    /// several lengths (a rendezvous-sized one too); a typed message where
    /// a serde value is expected is a mismatch.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serde_values_travel_through_collectives() {
        for n in SIZES {
            returns(launch(n, move |comm| async move {
                let (me, n) = (comm.rank(), comm.size());
                let root = n / 2;
                let text = |r: usize| format!("rank {r}: {}", "x".repeat(if r == 1 { 100_000 } else { r * 3 }));
                let mut config: Vec<(String, u32)> = if me == root { vec![("depth".into(), 3), (text(1), 1)] } else { Vec::new() };
                comm.bcast_serde(&mut config, root).await?;
                assert_eq!(config, [("depth".to_string(), 3), (text(1), 1)]);
                let gathered = comm.gather_serde(&text(me), root).await?;
                assert_eq!(gathered, (me == root).then(|| (0..n).map(text).collect::<Vec<_>>()));
                let jobs: Vec<Option<Vec<u8>>> = if me == 0 { (0..n).map(|r| (r % 2 == 0).then(|| vec![r as u8; r])).collect() } else { Vec::new() };
                let job: Option<Vec<u8>> = comm.scatter_serde(&jobs, 0).await?;
                assert_eq!(job, (me % 2 == 0).then(|| vec![me as u8; me]));
                let all: Vec<String> = comm.allgather_serde(&text(me)).await?;
                assert_eq!(all, (0..n).map(text).collect::<Vec<_>>());
                Ok(())
            }))
            .await;
        }
    }
}

/// Ranks in one process whose collectives meet in memory (the loopback's
/// default: `LaunchOptions::local_collectives`): what meeting adds to
/// the semantics every transport shares.
mod meeting {
    use super::support::returns;
    use mpx::coll::{Op, SUM};
    use mpx::Operation;

    fn launch_with<F, Fut, R>(ranks: usize, f: F) -> impl std::future::Future<Output = mpx::Result<Vec<R>>>
    where
        F: Fn(mpx::Comm) -> Fut,
        Fut: std::future::Future<Output = mpx::Result<R>> + Send + 'static,
        R: Send + 'static,
    {
        let options = mpx::LaunchOptions::ranks(ranks);
        assert!(options.local_collectives);
        mpx::launch_with(options, f)
    }

    /// Which collective a test runs.
    #[derive(Clone, Copy, Debug)]
    enum Which {
        Barrier,
        Bcast,
        Allreduce,
        Allgather,
        Alltoall,
    }

    const ALL: [Which; 5] = [Which::Barrier, Which::Bcast, Which::Allreduce, Which::Allgather, Which::Alltoall];

    /// Starts `which` on `comm` with `values` per rank (a barrier: none).
    async fn run(comm: &mpx::Comm, which: Which, values: usize) -> mpx::Result<()> {
        let n = comm.size();
        let mine = vec![comm.rank() as f64; values];
        let mut out = vec![0.0f64; values * n];
        match which {
            Which::Barrier => comm.barrier().await,
            Which::Bcast => comm.bcast(&mut out[..values], 0).await,
            Which::Allreduce => comm.allreduce(&mine[..], &mut out[..values], SUM).await,
            Which::Allgather => comm.allgather(&mine[..], &mut out[..]).await,
            Which::Alltoall => comm.alltoall(&vec![1.0f64; values * n][..], &mut out[..]).await,
        }
    }

    /// Ranks that pass different built-in operations to one allreduce
    /// (erroneous in MPI) fail with `CollectiveMismatch`, small and large
    /// (two rounds) alike, rather than each combine with its own and
    /// return different results; the communicator works on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ranks_that_pass_different_operations_fail() {
        use mpx::coll::MAX;
        for values in [1usize, 16_384] {
            let outcomes = returns(launch_with(3, move |comm| async move {
                let op = if comm.rank() == 1 { MAX } else { SUM };
                let mine = vec![comm.rank() as f64 + 1.0; values];
                let mut out = vec![0.0f64; values];
                let outcome = comm.allreduce(&mine[..], &mut out[..], op).await.err();
                comm.allreduce(&mine[..], &mut out[..], SUM).await?;
                assert!(out.iter().all(|&v| v == 6.0));
                Ok(outcome)
            }))
            .await;
            for (rank, outcome) in outcomes.iter().enumerate() {
                let mismatch = matches!(outcome.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { rank: other, detail }) if *other != rank && detail.contains("Max") && detail.contains("Sum"));
                assert!(mismatch, "{values} values, rank {rank}: {outcomes:?}");
            }
        }
    }

    /// A rank gone without its part is named by its world rank, as every
    /// `ProcessFailed` names a process, on a communicator whose ranks are
    /// numbered otherwise.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_gone_is_named_by_its_world_rank() {
        let outcomes = returns(launch_with(4, |comm| async move {
            // Ranks in reverse order: world rank 2 is rank 1 here.
            let reversed = comm.split(Some(0), -(comm.rank() as i32)).await?.expect("a color");
            if comm.rank() == 2 {
                return Ok(None);
            }
            let mut sum = 0u64;
            Ok(Some(reversed.allreduce(&1u64, &mut sum, SUM).await))
        }))
        .await;
        for (rank, outcome) in outcomes.iter().enumerate().filter(|&(r, _)| r != 2) {
            assert!(matches!(outcome, Some(Err(ref e)) if matches!(e.kind(), mpx::ErrorKind::ProcessFailed { rank: 2, .. })), "rank {rank}: {outcome:?}");
        }
    }

    /// A rank gone without its part fails every other rank's call that
    /// waits for it with `ProcessFailed` naming it (a broadcast's ranks
    /// wait only for the root's part, and its root, with little data, for
    /// nobody);
    /// a rank that left its part and then went (its future dropped
    /// unfinished) does not: the others finish, but for a large
    /// allreduce, which needs a block the rank was to combine.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_gone_fails_the_call_only_if_its_part_is_missing() {
        for which in ALL {
            for values in [1, 20_000] {
                let outcomes = returns(launch_with(4, move |comm| async move {
                    match comm.rank() {
                        // Gone before the call.
                        2 => Ok(None),
                        _ => Ok(Some(run(&comm, which, values).await)),
                    }
                }))
                .await;
                for (rank, outcome) in outcomes.iter().enumerate().filter(|&(r, _)| r != 2) {
                    // A broadcast's other ranks take the root's part alone,
                    // and a root with little data does not wait.
                    let unaffected = matches!(which, Which::Bcast) && (rank != 0 || values == 1);
                    if unaffected {
                        assert!(matches!(outcome, Some(Ok(()))), "{which:?}, {values} values, rank {rank}: {outcome:?}");
                    } else {
                        assert!(matches!(outcome, Some(Err(ref e)) if matches!(e.kind(), mpx::ErrorKind::ProcessFailed { rank: 2, .. })), "{which:?}, {values} values, rank {rank}: {outcome:?}");
                    }
                }
                let outcomes = returns(launch_with(4, move |comm| async move {
                    if comm.rank() == 2 {
                        // Its part is left when the call starts; polled
                        // once, before the others start, then dropped.
                        let started = run(&comm, which, values);
                        let mut started = Box::pin(started);
                        assert!(futures::poll!(started.as_mut()).is_pending());
                        drop(started);
                        for other in [0, 1, 3] {
                            comm.send(&1u8, other, 0).await?;
                        }
                        return Ok(None);
                    }
                    comm.recv::<u8>(2, 0).await?;
                    Ok(Some(run(&comm, which, values).await))
                }))
                .await;
                // A large allreduce's second round needs the block rank 2
                // would have combined: there, its word that it gave up.
                let two_rounds = matches!(which, Which::Allreduce) && values > 8192;
                for (rank, outcome) in outcomes.iter().enumerate().filter(|&(r, _)| r != 2) {
                    if two_rounds {
                        assert!(matches!(outcome, Some(Err(ref e)) if matches!(e.kind(), mpx::ErrorKind::CollectiveMismatch { rank: 2, .. })), "{which:?}, dropped part, rank {rank}: {outcome:?}");
                    } else {
                        assert!(matches!(outcome, Some(Ok(()))), "{which:?}, {values} values, dropped part, rank {rank}: {outcome:?}");
                    }
                }
            }
        }
    }

    /// Ranks that call different collectives at one point, or whose parts
    /// disagree, fail on every rank that sees the difference, naming the
    /// rank; a rank whose own arguments are wrong fails with its own
    /// error and the others name it. The communicator works on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parts_that_disagree_fail_every_rank() {
        let outcomes = returns(launch_with(3, |comm| async move {
            let me = comm.rank();
            // Rank 1 calls a barrier where the others allreduce.
            let kinds = if me == 1 { run(&comm, Which::Barrier, 0).await } else { run(&comm, Which::Allreduce, 2).await };
            // Rank 2 allgathers 3 values where the others allgather 2.
            let counts = run(&comm, Which::Allgather, if me == 2 { 3 } else { 2 }).await;
            // Rank 0's receive buffer is too short for its send.
            let mut short = [0.0f64; 1];
            let own = if me == 0 { comm.allreduce(&[1.0f64, 2.0][..], &mut short[..], SUM).await } else { run(&comm, Which::Allreduce, 2).await };
            run(&comm, Which::Allreduce, 2).await?;
            Ok((kinds.err(), counts.err(), own.err()))
        }))
        .await;
        let named = |e: &Option<mpx::Error>| match e.as_ref().map(mpx::Error::kind) {
            Some(mpx::ErrorKind::CollectiveMismatch { rank, .. }) => Some(*rank),
            _ => None,
        };
        assert_eq!(outcomes.iter().map(|o| named(&o.0)).collect::<Vec<_>>(), [Some(1), Some(0), Some(1)], "{outcomes:?}");
        assert!(outcomes[0].0.as_ref().is_some_and(|e| e.to_string().contains("barrier")), "{outcomes:?}");
        assert_eq!(outcomes.iter().map(|o| named(&o.1)).collect::<Vec<_>>(), [Some(2), Some(2), Some(0)], "{outcomes:?}");
        assert!(matches!(outcomes[0].2.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::InvalidArgument(_))), "{outcomes:?}");
        assert_eq!(named(&outcomes[1].2), Some(0), "{outcomes:?}");
        assert_eq!(named(&outcomes[2].2), Some(0), "{outcomes:?}");
    }

    /// Two ranks that both call themselves a broadcast's root, each
    /// finishing without waiting for the other: the later fails, naming
    /// the earlier, for a few values (the small lane) and for more; the
    /// communicator works on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_ranks_that_both_call_themselves_the_root_fail() {
        for values in [1usize, 1000] {
            let outcomes = returns(launch_with(2, move |comm| async move {
                let me = comm.rank();
                let mut data = vec![me as f64; values];
                let called = comm.bcast(&mut data[..], me).await;
                run(&comm, Which::Allreduce, 2).await?;
                Ok(called.err())
            }))
            .await;
            let failed: Vec<(usize, &mpx::Error)> = outcomes.iter().enumerate().filter_map(|(r, e)| Some((r, e.as_ref()?))).collect();
            assert_eq!(failed.len(), 1, "{values} values: {outcomes:?}");
            let (later, e) = failed[0];
            assert!(matches!(e.kind(), mpx::ErrorKind::CollectiveMismatch { rank, .. } if *rank == 1 - later), "{e}");
            assert!(e.to_string().contains(&format!("bcast from root {}", 1 - later)), "{e}");
        }
    }

    /// Typed and described buffers of the same few values meet in one
    /// call (a legal mix: the type signatures agree): a broadcast, an
    /// allgather and an alltoall, every rank's results whatever the mix, with each rank
    /// first in turn (the other starts its calls once a message says the
    /// first has started its own).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn typed_and_described_buffers_of_few_values_meet_in_one_call() {
        use mpx::{Datatype, RecvBuf, Region, RegionMut, SendBuf};
        for described in [[false, true], [true, false], [true, true]] {
            for first in [0, 1] {
                let outcomes = returns(launch_with(2, move |comm| async move {
                    let me = comm.rank();
                    let double = Datatype::double();
                    let mut value = [if me == 1 { 2.5f64 } else { 0.0 }];
                    let mine = [me as f64 + 0.25];
                    let mut all = [0.0f64; 2];
                    let blocks = [me as f64 * 10.0, me as f64 * 10.0 + 1.0];
                    let mut exchanged = [0.0f64; 2];
                    if me != first {
                        comm.recv::<u8>(first, 9).await?;
                    }
                    let (bcast, allgather, alltoall) = if described[me] {
                        (
                            comm.bcast(RecvBuf::new(RegionMut::of(&mut value), 1, &double), 1),
                            comm.allgather(SendBuf::new(Region::of(&mine), 1, &double), RecvBuf::new(RegionMut::of(&mut all), 2, &double)),
                            comm.alltoall(SendBuf::new(Region::of(&blocks), 2, &double), RecvBuf::new(RegionMut::of(&mut exchanged), 2, &double)),
                        )
                    } else {
                        (comm.bcast(&mut value[..], 1), comm.allgather(&mine[..], &mut all[..]), comm.alltoall(&blocks[..], &mut exchanged[..]))
                    };
                    if me == first {
                        comm.send(&0u8, 1 - first, 9).await?;
                    }
                    let all_three = async { (bcast.await, allgather.await, alltoall.await) };
                    let (bcast, allgather, alltoall) = tokio::time::timeout(std::time::Duration::from_secs(20), all_three).await.expect("no hang");
                    bcast?;
                    allgather?;
                    alltoall?;
                    Ok((value[0], all, exchanged))
                }))
                .await;
                assert_eq!(outcomes, [(2.5, [0.25, 1.25], [0.0, 10.0]), (2.5, [0.25, 1.25], [1.0, 11.0])], "described: {described:?}, rank {first} first");
            }
        }
    }

    /// Values whose bytes are checked (`bool`, `char`) take the general
    /// way where ranks meet, and arrive intact: a broadcast, an allgather
    /// and an alltoall of a few of them, on 2 and 3 ranks.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn few_values_whose_bytes_are_checked_meet_intact() {
        for n in [2usize, 3] {
            let outcomes = returns(launch_with(n, move |comm| async move {
                let me = comm.rank();
                let mut flags = [me == 1, me != 1, true];
                comm.bcast(&mut flags[..], 1).await?;
                let mut letters = vec![' '; n];
                comm.allgather(&char::from(b'a' + me as u8), &mut letters[..]).await?;
                let mine: Vec<bool> = (0..n).map(|r| (me + r) % 2 == 0).collect();
                let mut theirs = vec![false; n];
                comm.alltoall(&mine[..], &mut theirs[..]).await?;
                Ok((flags, letters, theirs))
            }))
            .await;
            for (me, (flags, letters, theirs)) in outcomes.into_iter().enumerate() {
                assert_eq!(flags, [true, false, true], "{n} ranks, rank {me}");
                assert_eq!(letters, (0..n).map(|r| char::from(b'a' + r as u8)).collect::<Vec<_>>());
                assert_eq!(theirs, (0..n).map(|r| (r + me) % 2 == 0).collect::<Vec<_>>());
            }
        }
    }

    /// Ranks 0 and 1 broadcast `values` values from rank `from` (0, or a
    /// rank that does not exist: they then give up on the call), which
    /// meets, where rank 2 gathers them to `root`, which exchanges
    /// messages; the
    /// ranks start their calls in `order` (forced by messages), and ranks
    /// 0 and 1 stay until rank 2 is done (its gather must not fail only
    /// because they finished). Each rank's error, if any, and the bytes of
    /// data waiting in its queue at the end.
    async fn rank_2_gathers_where_the_others_broadcast(order: [usize; 3], values: usize, from: usize, root: usize) -> Vec<(Option<mpx::Error>, u64)> {
        returns(launch_with(3, move |comm| async move {
            let me = comm.rank();
            let at = order.iter().position(|&r| r == me).expect("every rank has its turn");
            if at > 0 {
                comm.recv::<u8>(order[at - 1], 5).await?;
            }
            let mut data = vec![me as f64; values];
            let mut gathered = vec![0.0f64; 3 * values];
            let call = match me {
                2 => comm.gather(&data.clone()[..], &mut gathered[..], root),
                _ => comm.bcast(&mut data[..], from),
            };
            if at < 2 {
                comm.send(&0u8, order[at + 1], 5).await?;
            }
            let outcome = tokio::time::timeout(std::time::Duration::from_secs(20), call).await.expect("told, not left waiting");
            match me {
                2 => {
                    comm.send(&0u8, 0, 6).await?;
                    comm.send(&0u8, 1, 6).await?;
                }
                _ => drop(comm.recv::<u8>(2, 6).await?),
            }
            Ok((outcome.err(), comm.queued().1))
        }))
        .await
    }

    /// A rank whose collective exchanges messages (a gather to itself: it
    /// waits for the others' values) where the others broadcast, which
    /// meets, fails rather than waits for messages that never come, in
    /// every order of arrival, for a broadcast of a few values (the small
    /// lane) and of more: whichever rank comes last sees the others' parts
    /// and reports the disagreement (a broadcast's root may have finished
    /// before it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_over_messages_among_ranks_that_broadcast_is_told() {
        let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
        for values in [1usize, 1024] {
            for order in orders {
                let outcomes = rank_2_gathers_where_the_others_broadcast(order, values, 0, 2).await;
                assert!(matches!(outcomes[2].0.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { .. })), "{values} values, order {order:?}: the gather fails: {outcomes:?}");
                // The broadcast between ranks 0 and 1 is whole: each checks
                // the root's part alone.
                assert!(outcomes[0].0.is_none() && outcomes[1].0.is_none(), "{values} values, order {order:?}: {outcomes:?}");
            }
        }
    }

    /// A rank whose collective exchanges messages, coming to a round where
    /// ranks whose collective meets have left their parts, fails at once
    /// and sends none of its data: nothing of it waits in another rank's
    /// queue (the word that it gave up carries no data).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_that_fails_at_once_over_messages_sends_no_data() {
        for order in [[0, 1, 2], [1, 0, 2]] {
            // Rank 2 gathers to rank 0: it would send its values there.
            let outcomes = rank_2_gathers_where_the_others_broadcast(order, 4, 0, 0).await;
            assert!(matches!(outcomes[2].0.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { .. })), "order {order:?}: {outcomes:?}");
            assert!(outcomes[0].0.is_none() && outcomes[1].0.is_none(), "order {order:?}: {outcomes:?}");
            assert_eq!(outcomes[0].1, 0, "order {order:?}: rank 2's values wait at rank 0");
        }
    }

    /// A rank whose collective exchanges messages, coming to a round where
    /// ranks whose collective meets gave up on it (their arguments were
    /// wrong), fails at once, saying that they gave up and why, as a rank
    /// that meets and finds their parts does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_over_messages_where_the_others_gave_up_says_why() {
        for order in [[0, 1, 2], [1, 0, 2]] {
            let outcomes = rank_2_gathers_where_the_others_broadcast(order, 4, 7, 2).await;
            for (r, (error, _)) in outcomes[..2].iter().enumerate() {
                assert!(matches!(error.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::InvalidRank { rank: 7, size: 3 })), "order {order:?}: rank {r}: {outcomes:?}");
            }
            match outcomes[2].0.as_ref().map(mpx::Error::kind) {
                Some(mpx::ErrorKind::CollectiveMismatch { rank, detail }) => {
                    assert!(*rank < 2, "order {order:?}: a rank that gave up is named: {rank}");
                    assert!(detail.starts_with("it gave up on the collective: ") && detail.contains("rank 7"), "order {order:?}: {detail}");
                }
                other => panic!("order {order:?}: {other:?}"),
            }
        }
    }

    /// A value whose `Reducible::combine` (a user's code) panics.
    #[derive(Debug, Clone, Copy, Default, PartialEq, mpx::MpiType)]
    #[repr(C)]
    struct Touchy(u64);

    impl mpx::coll::Reducible for Touchy {
        fn combine(_: mpx::coll::Builtin, input: &[Self], _: &mut [Self]) -> mpx::Result<()> {
            // (Asked with no values first: whether the operation applies.)
            assert!(input.is_empty(), "touchy values do not combine");
            Ok(())
        }
    }

    /// A built-in operation on a user's `Reducible` type runs the user's
    /// `combine`, so not under the round's lock where ranks meet: when it
    /// panics, the rank that waited for the round is woken all the same
    /// (it then panics too), and the launch reports its panic instead of
    /// waiting for ever (rank 0 catches its own, and waits for rank 1). Rank 1 leaves its part first and waits (its
    /// waker left with the round); rank 0 completes the round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_users_combine_that_panics_strands_no_rank() {
        let run = launch_with(2, |comm| async move {
            let mut out = [Touchy::default(); 2];
            if comm.rank() == 1 {
                let mut call = std::pin::pin!(comm.allreduce(&[Touchy(1), Touchy(2)][..], &mut out[..], mpx::coll::MAX));
                // Waiting, its waker with the round, before rank 0 comes.
                assert!(futures::poll!(call.as_mut()).is_pending());
                comm.send(&0u8, 0, 5).await?;
                call.await?;
            } else {
                comm.recv::<u8>(1, 5).await?;
                // Rank 0's own panic caught: the launch waits for rank 1.
                let call = async { comm.allreduce(&[Touchy(3), Touchy(4)][..], &mut out[..], mpx::coll::MAX).await };
                let caught = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(call)).await;
                assert!(caught.is_err(), "rank 0 runs the panicking combine");
                // Alive until rank 1 is done: its end wakes nothing there.
                assert!(comm.recv::<u8>(1, 6).await.is_err(), "rank 1 panics too, and sends nothing");
            }
            Ok(())
        });
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(20), run).await.expect("no rank left waiting");
        assert!(
            matches!(outcome.as_ref().map_err(mpx::Error::kind), Err(mpx::ErrorKind::RankPanicked { rank: 1, message }) if message.contains("touchy")),
            "{outcome:?}"
        );
    }

    /// A value whose `Reducible::combine` refuses negative values: a
    /// user's code that fails on some values only.
    #[derive(Debug, Clone, Copy, Default, PartialEq, mpx::MpiType)]
    #[repr(C)]
    struct Picky(i64);

    impl mpx::coll::Reducible for Picky {
        fn combine(_: mpx::coll::Builtin, input: &[Self], inout: &mut [Self]) -> mpx::Result<()> {
            for (a, b) in input.iter().zip(inout.iter_mut()) {
                if a.0 < 0 || b.0 < 0 {
                    return Err(mpx::ErrorKind::InvalidArgument("a negative value".into()).into());
                }
                b.0 += a.0;
            }
            Ok(())
        }
    }

    /// A large allreduce where ranks meet combines each rank's block of
    /// the values in that rank's call: where a user's `combine` refuses
    /// the values of one rank's block only, that rank fails, and the
    /// others, whose blocks combined, fail too (told that it gave up, and
    /// why) rather than wait for its combined block.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_allreduce_whose_combine_fails_in_one_block_fails_every_rank() {
        for n in [2, 3] {
            let count = 16_384; // 128 KiB of values: each rank combines a block.
            let outcomes = returns(launch_with(n, move |comm| async move {
                let mut mine = vec![Picky(comm.rank() as i64); count];
                // In the last rank's block only.
                mine[count - 1] = Picky(-1);
                let mut sum = vec![Picky::default(); count];
                let call = comm.allreduce(&mine[..], &mut sum[..], SUM);
                Ok(tokio::time::timeout(std::time::Duration::from_secs(20), call).await.expect("no rank left waiting").err())
            }))
            .await;
            for (r, error) in outcomes.iter().enumerate() {
                let error = error.as_ref().unwrap_or_else(|| panic!("{n} ranks: rank {r} fails: {outcomes:?}"));
                let why = if r == n - 1 { error.to_string() } else {
                    match error.kind() {
                        mpx::ErrorKind::CollectiveMismatch { rank, detail } => {
                            assert_eq!(*rank, n - 1, "{n} ranks: rank {r}: {error}");
                            detail.clone()
                        }
                        other => panic!("{n} ranks: rank {r}: {other:?}"),
                    }
                };
                assert!(why.contains("a negative value"), "{n} ranks: rank {r}: {why}");
            }
        }
    }

    /// A rank that comes last to a round, and so checks every part in the
    /// call itself, reports what disagrees there, and tells a rank whose
    /// collective exchanges messages that it gave up (that rank fails
    /// rather than waits): the order is forced by a message sent once the
    /// first rank's call has started.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_that_checks_the_parts_in_its_call_reports_what_disagrees() {
        let outcomes = returns(launch_with(2, |comm| async move {
            let me = comm.rank();
            let (mut sum, mut all) = ([0.0f64; 2], [0u32; 2]);
            let (counts, kinds);
            if me == 0 {
                // Rank 0 allreduces one value and rank 1 two.
                let call = comm.allreduce(&[1.0f64][..], &mut sum[..1], SUM);
                comm.send(&0u8, 1, 7).await?;
                counts = call.await;
                // Rank 0 gathers (over messages) where rank 1 barriers.
                let gather = comm.gather(&5u32, &mut all[..], 0);
                comm.send(&0u8, 1, 7).await?;
                kinds = tokio::time::timeout(std::time::Duration::from_secs(20), gather).await.expect("told, not left waiting");
            } else {
                comm.recv::<u8>(0, 7).await?;
                counts = comm.allreduce(&[1.0f64, 2.0][..], &mut sum[..], SUM).await;
                comm.recv::<u8>(0, 7).await?;
                kinds = comm.barrier().await;
            }
            Ok((counts.err(), kinds.err()))
        }))
        .await;
        let named = |e: &Option<mpx::Error>| match e.as_ref().map(mpx::Error::kind) {
            Some(mpx::ErrorKind::CollectiveMismatch { rank, .. }) => Some(*rank),
            _ => None,
        };
        assert_eq!(outcomes.iter().map(|o| named(&o.0)).collect::<Vec<_>>(), [Some(1), Some(0)], "{outcomes:?}");
        assert_eq!(named(&outcomes[1].1), Some(0), "{outcomes:?}");
        assert!(outcomes[1].1.as_ref().is_some_and(|e| e.to_string().contains("exchanges messages")), "{outcomes:?}");
        assert!(outcomes[0].1.is_some(), "the gather fails: {outcomes:?}");
    }

    /// A large allreduce (two rounds: each rank combines a block) whose
    /// future one rank drops between them fails on the others, naming it,
    /// rather than waiting for the block it will never combine.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_allreduce_dropped_half_way_fails_the_others() {
        let outcomes = returns(launch_with(3, |comm| async move {
            let values = 3 * 8192;
            let mine = vec![1.0f64; values];
            let mut out = vec![0.0f64; values];
            if comm.rank() == 1 {
                // Polled while the others have not started: its first
                // round cannot complete, it never combines its block.
                let mut call = comm.allreduce(&mine[..], &mut out[..], SUM);
                assert!(futures::poll!(&mut call).is_pending());
                drop(call);
                for other in [0, 2] {
                    comm.send(&1u8, other, 0).await?;
                }
                return Ok(None);
            }
            comm.recv::<u8>(1, 0).await?;
            Ok(Some(comm.allreduce(&mine[..], &mut out[..], SUM).await))
        }))
        .await;
        for rank in [0, 2] {
            assert!(matches!(outcomes[rank], Some(Err(ref e)) if matches!(e.kind(), mpx::ErrorKind::CollectiveMismatch { rank: 1, .. })), "rank {rank}: {:?}", outcomes[rank]);
        }
    }

    /// A rank whose part is left and whose communicator then goes (a
    /// broadcast's root, done at once) leaves the part for the others,
    /// who come to the communicator only later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_part_outlives_its_ranks_communicator() {
        returns(launch_with(3, |comm| async move {
            let sub = comm.dup();
            if comm.rank() == 0 {
                sub.bcast(&mut [7u32, 8][..], 0).await?;
                drop(sub);
                comm.send(&1u8, 1, 0).await?;
                comm.send(&1u8, 2, 0).await?;
            } else {
                comm.recv::<u8>(0, 0).await?;
                let mut got = [0u32; 2];
                sub.bcast(&mut got[..], 0).await?;
                assert_eq!(got, [7, 8]);
            }
            comm.barrier().await
        }))
        .await;
    }

    /// A rank that meets where another calls a collective that exchanges
    /// messages (a programming error) fails, naming it, and tells it by
    /// message: neither waits forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_collective_that_meets_against_one_over_messages_fails_both() {
        let outcomes = returns(launch_with(2, |comm| async move {
            let got = if comm.rank() == 0 {
                comm.barrier().await
            } else {
                let mut all = [0u8; 2];
                comm.gather(&1u8, &mut all[..], 1).await
            };
            Ok(got.err())
        }))
        .await;
        assert!(matches!(outcomes[0].as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { rank: 1, detail }) if detail.contains("exchanges messages")), "{outcomes:?}");
        assert!(matches!(outcomes[1].as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { rank: 0, .. })), "{outcomes:?}");
    }

    /// Allgather and alltoall meet only for blocks under 256 KiB, and
    /// exchange messages for larger ones: ranks whose counts disagree
    /// across that size fail, every one, none waiting forever (those that
    /// meet find the other's word that it exchanges messages, and tell it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn counts_that_disagree_across_the_size_that_meets_fail_every_rank() {
        for which in [Which::Allgather, Which::Alltoall] {
            for odd in 0..3 {
                let outcomes = returns(launch_with(3, move |comm| async move {
                    // 20,000 doubles are 160,000 bytes; 40,000 are 320,000.
                    let values = if comm.rank() == odd { 40_000 } else { 20_000 };
                    Ok(run(&comm, which, values).await.err())
                }))
                .await;
                for (rank, outcome) in outcomes.iter().enumerate() {
                    assert!(outcome.is_some(), "{which:?}, rank {odd} odd: rank {rank} must fail");
                    if rank != odd {
                        assert!(matches!(outcome.as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { rank, .. }) if *rank == odd), "{which:?}: {outcome:?}");
                    }
                }
            }
        }
    }

    /// A broadcast's ranks take the root's data without waiting for each
    /// other: a rank that broadcasts only after another has finished its
    /// part (of a large broadcast, whose root waits for every rank) gets
    /// the data too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn broadcast_ranks_wait_only_for_the_root() {
        returns(launch_with(3, |comm| async move {
            let data: Vec<u64> = (0..20_000).collect();
            let mut buf = if comm.rank() == 0 { data.clone() } else { vec![0; 20_000] };
            match comm.rank() {
                1 => {
                    comm.bcast(&mut buf[..], 0).await?;
                    comm.send(&1u8, 2, 0).await?;
                }
                2 => {
                    comm.recv::<u8>(1, 0).await?;
                    comm.bcast(&mut buf[..], 0).await?;
                }
                _ => comm.bcast(&mut buf[..], 0).await?,
            }
            assert_eq!(buf, data);
            Ok(())
        }))
        .await;
    }

    /// Three ranks at one call: one whose arguments are wrong (it meets,
    /// and gives up), one that meets, one whose blocks are large enough
    /// to exchange messages: every rank fails, none waits forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_that_gives_up_a_rank_that_meets_and_one_over_messages_all_fail() {
        let outcomes = returns(launch_with(3, |comm| async move {
            let values = if comm.rank() == 2 { 40_000 } else { 20_000 };
            let mine = vec![1.0f64; values];
            // Rank 0's receive buffer is a value short.
            let mut all = vec![0.0f64; 3 * values - usize::from(comm.rank() == 0)];
            Ok(comm.allgather(&mine[..], &mut all[..]).await.err())
        }))
        .await;
        assert!(matches!(outcomes[0].as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::InvalidArgument(_))), "{outcomes:?}");
        assert!(matches!(outcomes[1].as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { rank: 0, .. })), "{outcomes:?}");
        assert!(matches!(outcomes[2].as_ref().map(mpx::Error::kind), Some(mpx::ErrorKind::CollectiveMismatch { .. })), "{outcomes:?}");
    }

    /// A neighbour collective (messages on sub-tags of its own) against a
    /// barrier that meets: both fail, the neighbour collective told on
    /// every sub-tag it receives on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_neighbour_collective_against_a_barrier_fails_both() {
        let outcomes = returns(launch_with(2, |comm| async move {
            let cart = comm.cart_create(&[2], &[true], false).await?.expect("every rank in the grid");
            let got = if cart.rank() == 0 {
                let mut from = [0u32; 2];
                cart.neighbor_allgather(&7u32, &mut from[..]).await
            } else {
                cart.barrier().await
            };
            Ok(got.err())
        }))
        .await;
        assert!(outcomes.iter().all(Option::is_some), "{outcomes:?}");
    }

    /// Many collectives in flight at once, of every kind that meets and of
    /// some that exchange messages, on the world and on a reversed split,
    /// each rank awaiting them in an order of its own (the same calls in
    /// the same order on every rank, as MPI requires): every result is
    /// right, round after round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_collectives_in_flight_awaited_in_any_order() {
        for n in [2, 3, 5, 8] {
            returns(launch_with(n, move |world| async move {
                let me = world.rank();
                let split = world.split(Some(0), -(me as i32)).await?.expect("a color");
                let mut seed = 0x9e37_79b9_7f4a_7c15u64;
                let mut next = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed
                };
                for round in 0..200u64 {
                    let calls = 1 + (next() % 6) as usize;
                    let kinds: Vec<(u64, bool)> = (0..calls).map(|_| (next() % 6, next() % 2 == 0)).collect();
                    let mut outs: Vec<Vec<u64>> = kinds.iter().map(|_| vec![0; 3 * n]).collect();
                    let mut pending = Vec::new();
                    for ((kind, on_split), out) in kinds.iter().zip(outs.iter_mut()) {
                        let comm = if *on_split { &split } else { &world };
                        let r = comm.rank() as u64;
                        let call = match kind {
                            0 => comm.barrier(),
                            1 => {
                                if r == 1 % n as u64 {
                                    out[..3].copy_from_slice(&[round, 7, 9]);
                                }
                                comm.bcast(&mut out[..3], 1 % n)
                            }
                            2 => comm.allreduce(&[r, round, 1][..], &mut out[..3], SUM),
                            3 => comm.allgather(&[r + round][..], &mut out[..n]),
                            4 => comm.alltoall(&(0..n as u64).map(|k| 100 * r + k).collect::<Vec<_>>()[..], &mut out[..n]),
                            _ => comm.gather(&[r][..], &mut out[..if r == 0 { n } else { 0 }], 0),
                        };
                        pending.push(call);
                    }
                    // Awaited in an order that differs from rank to rank.
                    let shift = me % pending.len();
                    pending.rotate_left(shift);
                    for call in pending {
                        call.await?;
                    }
                    let total = (n * (n - 1) / 2) as u64;
                    for ((kind, on_split), out) in kinds.iter().zip(&outs) {
                        let comm = if *on_split { &split } else { &world };
                        let r = comm.rank() as u64;
                        match kind {
                            1 => assert_eq!(out[..3], [round, 7, 9]),
                            2 => assert_eq!(out[..3], [total, round * n as u64, n as u64]),
                            3 => assert_eq!(out[..n], (0..n as u64).map(|s| s + round).collect::<Vec<_>>()[..]),
                            4 => assert_eq!(out[..n], (0..n as u64).map(|s| 100 * s + r).collect::<Vec<_>>()[..]),
                            5 if r == 0 => assert_eq!(out[..n], (0..n as u64).collect::<Vec<_>>()[..]),
                            _ => {}
                        }
                    }
                }
                Ok(())
            }))
            .await;
        }
    }

    /// A broadcast's root finishes once its data is there, up to a bounded
    /// number of calls ahead of the slowest rank (at most 4,096; with
    /// little data, more than the 16 of a root with 64 KiB), then waits;
    /// every rank gets every call's data, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_root_runs_ahead_a_bounded_way() {
        returns(launch_with(2, |comm| async move {
            if comm.rank() == 0 {
                let mut data: Vec<[u64; 1]> = (0..=4096).map(|k| [k]).collect();
                let mut ahead = 0u64;
                let mut calls = data.iter_mut();
                let waits = loop {
                    let buf = calls.next().unwrap_or_else(|| panic!("the root ran {ahead} calls ahead"));
                    let mut call = comm.bcast(&mut buf[..], 0);
                    if call.test().is_none() {
                        break call;
                    }
                    ahead += 1;
                };
                // 8 bytes on 2 ranks: far more than the 16 calls a root
                // with the most data that runs ahead gets.
                assert!(ahead > 16, "the root waited after {ahead} calls");
                comm.send(&ahead, 1, 0).await?;
                waits.await?;
            } else {
                let ahead = comm.recv::<u64>(0, 0).await?.0;
                for k in 0..=ahead {
                    let mut got = [u64::MAX];
                    comm.bcast(&mut got[..], 0).await?;
                    assert_eq!(got, [k]);
                }
            }
            comm.barrier().await
        }))
        .await;
    }

    /// Every rank's results of `bcast` (from rank 1), `allreduce` (`MAX`),
    /// `allgather` and `alltoall` of `count` values of `T` (`value(rank, i)`
    /// each), where the ranks meet or over messages.
    async fn small_results<T: mpx::MpiType + mpx::coll::Reducible + Default + PartialEq + std::fmt::Debug + Send + Sync>(
        n: usize,
        count: usize,
        local_collectives: bool,
        value: fn(usize, usize) -> T,
    ) -> Vec<Vec<T>> {
        let options = mpx::LaunchOptions { local_collectives, ..mpx::LaunchOptions::ranks(n) };
        returns(mpx::launch_with(options, move |comm| async move {
            let r = comm.rank();
            let mine: Vec<T> = (0..count).map(|i| value(r, i)).collect();
            let mut got = Vec::new();
            let mut bcast = if r == 1 { mine.clone() } else { vec![T::default(); count] };
            comm.bcast(&mut bcast[..], 1).await?;
            let mut max = vec![T::default(); count];
            comm.allreduce(&mine[..], &mut max[..], mpx::coll::MAX).await?;
            let mut all = vec![T::default(); count * n];
            comm.allgather(&mine[..], &mut all[..]).await?;
            let blocks: Vec<T> = (0..count * n).map(|i| value(r * 7 + i / count, i)).collect();
            let mut exchanged = vec![T::default(); count * n];
            comm.alltoall(&blocks[..], &mut exchanged[..]).await?;
            got.extend(bcast.into_iter().chain(max).chain(all).chain(exchanged));
            Ok(got)
        }))
        .await
    }

    /// A value aligned to 16 bytes, without padding.
    #[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, mpx::MpiType)]
    #[repr(C, align(16))]
    struct Wide(u64, u64);

    impl mpx::coll::Reducible for Wide {
        fn combine(op: mpx::coll::Builtin, input: &[Self], inout: &mut [Self]) -> mpx::Result<()> {
            assert_eq!(op, mpx::coll::Builtin::Max);
            for (a, b) in input.iter().zip(inout.iter_mut()) {
                if *a > *b {
                    *b = *a;
                }
            }
            Ok(())
        }
    }

    /// Blocks of a few bytes, held in the part itself where ranks meet,
    /// give what messages give for every size about the inline room (24
    /// bytes) and every alignment (values aligned to 16 bytes, which a
    /// block held inline keeps at 8: read in place where they happen to
    /// lie aligned, copied out where they do not).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_blocks_held_inline_give_what_messages_give() {
        for n in [2, 3, 4] {
            for count in [1, 23, 24, 25] {
                let bytes = |r: usize, i: usize| (r * 31 + i * 7) as u8;
                let (met, sent) = (small_results(n, count, true, bytes).await, small_results(n, count, false, bytes).await);
                assert_eq!(met, sent, "{n} ranks, {count} bytes");
            }
            for count in [1, 2] {
                let wide = |r: usize, i: usize| Wide(r as u64 + 1, i as u64);
                let (met, sent) = (small_results(n, count, true, wide).await, small_results(n, count, false, wide).await);
                assert_eq!(met, sent, "{n} ranks, {count} 16-aligned values");
            }
            for count in [1, 3, 4] {
                let doubles = |r: usize, i: usize| r as f64 * 0.5 - i as f64;
                let (met, sent) = (small_results(n, count, true, doubles).await, small_results(n, count, false, doubles).await);
                assert_eq!(met, sent, "{n} ranks, {count} f64");
                // And what they must be: rank 1's values, the largest
                // rank's, every rank's in turn, each rank's block for this one.
                for (r, got) in met.iter().enumerate() {
                    let expect: Vec<f64> = (0..count)
                        .map(|i| doubles(1, i))
                        .chain((0..count).map(|i| doubles(n - 1, i)))
                        .chain((0..count * n).map(|k| doubles(k / count, k % count)))
                        .chain((0..count * n).map(|k| doubles((k / count) * 7 + r, r * count + k % count)))
                        .collect();
                    assert_eq!(got, &expect, "rank {r} of {n}, {count} f64");
                }
            }
        }
    }

    /// Reductions meet in the pattern of the message algorithms: the
    /// same bits as over messages, for a float sum whose value depends on
    /// the grouping, on both sides of the size from which each rank
    /// combines a block; and a non-commutative operation in rank order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn meeting_and_messages_give_the_same_bits() {
        for n in [2, 3, 4, 5, 7, 8] {
            for values in [3, 3 * 8192] {
                let sums = |local_collectives: bool| async move {
                    let options = mpx::LaunchOptions { local_collectives, ..mpx::LaunchOptions::ranks(n) };
                    let got = returns(mpx::launch_with(options, move |comm| async move {
                        let r = comm.rank();
                        let mine: Vec<f64> = (0..values).map(|i| [1e16, 1.0, -1e16, 3.5, 1e-3][(r + i) % 5] * (1 + i % 3) as f64).collect();
                        let mut sum = vec![0.0f64; values];
                        comm.allreduce(&mine[..], &mut sum[..], SUM).await?;
                        let strings: Vec<[i64; 4]> = (0..values).map(|i| [1, (r + i) as i64 % 3, (r * 2 + i) as i64 % 2, 1]).collect();
                        let mut product = vec![[0i64; 4]; values];
                        let matmul = Op::user(
                            |a: &[[i64; 4]], b: &mut [[i64; 4]]| {
                                for (x, y) in a.iter().zip(b.iter_mut()) {
                                    *y = [x[0] * y[0] + x[1] * y[2], x[0] * y[1] + x[1] * y[3], x[2] * y[0] + x[3] * y[2], x[2] * y[1] + x[3] * y[3]];
                                }
                            },
                            false,
                        );
                        comm.allreduce(&strings[..], &mut product[..], matmul).await?;
                        Ok((sum.iter().map(|s| s.to_bits()).collect::<Vec<_>>(), product))
                    }))
                    .await;
                    assert!(got.windows(2).all(|w| w[0] == w[1]), "every rank the same bits");
                    got.into_iter().next().expect("a rank")
                };
                assert_eq!(sums(true).await, sums(false).await, "{n} ranks, {values} values");
            }
        }
    }
}
