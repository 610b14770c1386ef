//! Cartesian topologies: `dims_create`, `cart_create` (ranks left out,
//! grids too large), coordinates and ranks, `shift` at edges and around
//! periodic dimensions, `sub`, and the neighbour collectives, degenerate
//! grids (a periodic dimension of 1 or 2) and empty buffers included,
//! against a serial computation. Every test runs on every transport of the
//! harness.

use mpx::coll::{dims_create, Cart};
use mpx::Peer;

#[macro_use]
mod support;
use support::returns;

/// The value rank `r` sends towards its `k`-th neighbour.
fn value(r: usize, k: usize) -> u64 {
    (r * 100 + k) as u64
}

/// Neighbour `k` of the rank at `coords` in a grid, by arithmetic alone.
fn neighbour(dims: &[usize], periods: &[bool], coords: &[usize], k: usize) -> Option<usize> {
    let (d, step) = (k / 2, if k.is_multiple_of(2) { -1i64 } else { 1 });
    let mut c: Vec<i64> = coords.iter().map(|&x| x as i64).collect();
    c[d] += step;
    if periods[d] {
        c[d] = c[d].rem_euclid(dims[d] as i64);
    } else if !(0..dims[d] as i64).contains(&c[d]) {
        return None;
    }
    Some(c.iter().zip(dims).fold(0usize, |acc, (&x, &n)| acc * n + x as usize))
}

/// Checks every neighbour function of `grid` against the arithmetic.
async fn check_grid(grid: &Cart) -> mpx::Result<()> {
    let (dims, periods) = (grid.dims().to_vec(), grid.periods().to_vec());
    let me = grid.rank();
    let coords = grid.coords(me)?;
    assert_eq!(grid.rank_of(&coords)?, me);
    let expected: Vec<Option<usize>> = (0..2 * dims.len()).map(|k| neighbour(&dims, &periods, &coords, k)).collect();
    let peers: Vec<Option<usize>> = grid.neighbors()?.iter().map(|p| p.rank()).collect();
    assert_eq!(peers, expected);
    for d in 0..dims.len() {
        let (source, dest) = grid.shift(d, 1)?;
        assert_eq!((source.rank(), dest.rank()), (expected[2 * d], expected[2 * d + 1]));
    }
    // allgather: block k holds neighbour k's rank, or stays untouched.
    let blocks = 2 * dims.len();
    let mut around = vec![u64::MAX; blocks];
    grid.neighbor_allgather(&(me as u64), &mut around[..]).await?;
    assert_eq!(around, expected.iter().map(|n| n.map_or(u64::MAX, |r| r as u64)).collect::<Vec<_>>());
    // alltoall: block k holds what neighbour k sent in the opposite direction.
    let send: Vec<u64> = (0..blocks).flat_map(|k| [value(me, k); 2]).collect();
    let mut recv = vec![u64::MAX; 2 * blocks];
    grid.neighbor_alltoall(&send, &mut recv).await?;
    let want: Vec<u64> = (0..blocks).flat_map(|k| [expected[k].map_or(u64::MAX, |r| value(r, k ^ 1)); 2]).collect();
    assert_eq!(recv, want, "rank {me} at {coords:?} of {dims:?} {periods:?}");
    Ok(())
}

each_transport! {
    /// Grids of several shapes, periodic and not, degenerate ones too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cartesian_grids_find_their_neighbours() {
        for (ranks, dims, periods) in [
            (7, vec![3, 2], vec![true, false]),
            (6, vec![3, 2], vec![false, true]),
            (8, vec![2, 2, 2], vec![true, false, true]),
            (2, vec![2, 1], vec![true, true]),
            (1, vec![1], vec![true]),
            (5, vec![5], vec![false]),
        ] {
            returns(launch(ranks, move |world| {
                let (dims, periods) = (dims.clone(), periods.clone());
                async move {
                    let grid = world.cart_create(&dims, &periods, true).await?;
                    let nodes: usize = dims.iter().product();
                    match grid {
                        Some(grid) => {
                            assert!(world.rank() < nodes);
                            assert_eq!(grid.size(), nodes);
                            check_grid(&grid).await?;
                        }
                        None => assert!(world.rank() >= nodes, "rank {} left out", world.rank()),
                    }
                    world.barrier().await?;
                    Ok(())
                }
            }))
            .await;
        }
    }

    /// `sub` keeps the chosen dimensions: the rows and columns of a grid;
    /// a grid larger than the communicator is an error on every rank.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sub_grids_and_grids_too_large() {
        returns(launch(6, |world| async move {
            let grid = world.cart_create(&dims_create(6, &[0, 0])?, &[false, true], false).await?.expect("6 ranks");
            assert_eq!(grid.dims(), [3, 2]);
            let coords = grid.coords(grid.rank())?;
            let row = grid.sub(&[false, true]).await?;
            assert_eq!((row.dims(), row.periods(), row.rank()), (&[2usize][..], &[true][..], coords[1]));
            let mut members = vec![0usize; 2];
            row.allgather(&grid.rank(), &mut members[..]).await?;
            assert_eq!(members, [coords[0] * 2, coords[0] * 2 + 1]);
            let column = grid.sub(&[true, false]).await?;
            assert_eq!((column.size(), column.rank()), (3, coords[0]));
            check_grid(&column).await?;
            assert!(world.cart_create(&[4, 2], &[false, false], false).await.is_err());
            // Grids whose size overflows are too large, not wrapped around
            // to a size that fits (a product that wraps to 0 or 1).
            for dims in [[usize::MAX / 2, 3], [usize::MAX / 2 + 2, usize::MAX / 2 + 2]] {
                assert!(world.cart_create(&dims, &[true, true], false).await.is_err(), "{dims:?}");
            }
            assert_eq!(grid.shift(0, 5)?.1, Peer::Null, "5 steps off a 3-rank column");
            assert_eq!(grid.shift(0, -5i64)?.0, Peer::Null);
            assert_eq!(grid.shift(0, i64::MIN)?, (Peer::Null, Peer::Null));
            assert_eq!(row.shift(0, 2usize + 1)?, row.shift(0, 1)?, "a whole period more lands in the same place");
            assert_eq!(row.shift(0, i64::MAX)?, row.shift(0, i64::MAX % 2)?);
            assert!(grid.shift(0, u64::MAX).is_err(), "not a 64-bit signed displacement");
            // One rank's arguments are wrong: it fails, and so does every
            // other rank, rather than wait for it; then the communicators
            // carry on in step.
            let dims: &[usize] = if world.rank() == 4 { &[7] } else { &[6] };
            let got = world.cart_create(dims, &[false], false).await;
            assert!(got.is_err(), "rank {}: {got:?}", world.rank());
            let remain: &[bool] = if grid.rank() == 1 { &[true] } else { &[true, false] };
            let got = grid.sub(remain).await;
            assert!(got.is_err(), "rank {}: {got:?}", grid.rank());
            world.barrier().await?;
            let again = world.cart_create(&[6], &[true], false).await?.expect("6 ranks");
            check_grid(&again).await?;
            // A dimension of 0 is an error on every rank, not a grid that
            // leaves every rank out.
            assert!(world.cart_create(&[0, 2], &[false, false], false).await.is_err());
            // Grids of the same size but other shapes, or periodicity, on
            // some ranks: every rank of the grid fails, naming one that
            // disagrees, rather than a neighbour exchange waiting for ever.
            // (Rank 5's grid of 5 leaves it out of the others' grid of 6.)
            let agreed: (&[usize], &[bool]) = (&[6], &[false]);
            let odd: [(usize, &[usize], &[bool]); 3] = [(2, &[3, 2], &[false, false]), (2, &[6], &[true]), (5, &[5], &[false])];
            for (odd_rank, dims, periods) in odd {
                let (dims, periods) = if world.rank() == odd_rank { (dims, periods) } else { agreed };
                let got = world.cart_create(dims, periods, false).await;
                let named = match &got {
                    Err(e) => match e.kind() {
                        mpx::ErrorKind::CollectiveMismatch { rank, .. } => Some(*rank),
                        _ => None,
                    },
                    Ok(_) => None,
                };
                assert_eq!(named, Some(if world.rank() == odd_rank { 0 } else { odd_rank }), "rank {}: {got:?}", world.rank());
            }
            // A rank that keeps other dimensions of a grid than the others
            // (its sub-grid's size would not match its shape): every rank
            // fails, naming one that disagrees.
            let odd_rank = 3;
            let remain: &[bool] = if grid.rank() == odd_rank { &[true, false] } else { &[false, true] };
            let got = grid.sub(remain).await;
            let named = got.as_ref().err().and_then(|e| match e.kind() {
                mpx::ErrorKind::CollectiveMismatch { rank, .. } => Some(*rank),
                _ => None,
            });
            assert_eq!(named, Some(if grid.rank() == odd_rank { 0 } else { odd_rank }), "rank {}: {got:?}", grid.rank());
            check_grid(&again).await?;
            Ok(())
        }))
        .await;
    }

    /// Neighbour collectives of 0 values per neighbour (empty buffers), on
    /// lines and grids, periodic and not, degenerate ones too: they succeed
    /// and move nothing, and collectives of values follow in step.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn neighbour_collectives_of_no_values() {
        for (ranks, dims, periods) in [
            (3, vec![3], vec![false]),
            (3, vec![3], vec![true]),
            (2, vec![2], vec![true]),
            (1, vec![1], vec![true]),
            (6, vec![3, 2], vec![false, false]),
            (6, vec![3, 2], vec![true, true]),
            (4, vec![2, 2], vec![true, false]),
        ] {
            returns(launch(ranks, move |world| {
                let (dims, periods) = (dims.clone(), periods.clone());
                async move {
                    let grid = world.cart_create(&dims, &periods, false).await?.expect("the ranks fill the grid");
                    let empty: Vec<u64> = Vec::new();
                    let mut nothing: Vec<u64> = Vec::new();
                    grid.neighbor_alltoall(&empty, &mut nothing).await?;
                    grid.neighbor_allgather(&empty, &mut nothing).await?;
                    grid.neighbor_alltoall(&empty, &mut nothing).await?;
                    assert!(nothing.is_empty());
                    check_grid(&grid).await?;
                    Ok(())
                }
            }))
            .await;
        }
    }
}
