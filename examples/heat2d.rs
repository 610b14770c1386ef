//! A 2-D heat solver on a 2×2 process grid (`cart_create`): the 256×256
//! grid is cut into four 128×128 blocks, each with one ghost layer; every
//! Jacobi iteration starts with a halo exchange with the neighbours the
//! grid's shifts give, whose faces are sent straight from the block and
//! received straight into its ghost rows and columns, through subarray
//! datatypes (`Comm::exchange`). Ghosts on the grid's edge hold the fixed
//! boundary values: their neighbour is `PROC_NULL`, so they are never
//! written. The last sweep's largest change is an `allreduce` of each
//! rank's. At the end rank 0 gathers the blocks straight into one global
//! array and compares it with a serial run of the same iterations: the
//! arithmetic is the same in the same order, so the results must be
//! identical to the bit. Exits non-zero if they are not.
//!
//! ```text
//! cargo run --release --example heat2d
//! ```

use mpx::coll::{Cart, MAX};
use mpx::prelude::*;
use mpx::{ExchangeBuf, Transfer};

/// Interior cells along each side of the global grid.
const N: usize = 256;
/// Ranks along each side of the process grid.
const RANKS_PER_SIDE: usize = 2;
/// Interior cells along each side of one rank's block.
const BLOCK: usize = N / RANKS_PER_SIDE;
/// Jacobi iterations.
const ITERATIONS: usize = 500;
/// The tag of the blocks gathered to rank 0.
const GATHER_TAG: i32 = 9;

/// A message's direction of travel, used as its tag.
#[derive(Clone, Copy)]
enum Travel {
    North = 0,
    South = 1,
    West = 2,
    East = 3,
}

/// The value of global cell `(i, j)` of the `(N + 2)²` grid before the
/// first iteration; the outer ring is the fixed boundary.
fn initial(i: usize, j: usize) -> f64 {
    if i == 0 {
        100.0 // a hot northern edge
    } else if i == N + 1 || j == 0 || j == N + 1 {
        0.0
    } else {
        ((i * 31 + j * 17) % 11) as f64
    }
}

/// One Jacobi sweep over the `rows × cols` interior of a grid stored row by
/// row with one ghost layer around it. The serial run and every rank use
/// this same function, so each cell is computed by the same operations in
/// the same order.
fn sweep(u: &[f64], next: &mut [f64], rows: usize, cols: usize) {
    let width = cols + 2;
    for i in 1..=rows {
        for j in 1..=cols {
            let at = i * width + j;
            next[at] = 0.25 * (u[at - width] + u[at + width] + u[at - 1] + u[at + 1]);
        }
    }
}

/// `rows × cols` cells at `(row, col)` of a `size × size` array of doubles.
fn block(size: usize, rows: usize, cols: usize, row: usize, col: usize) -> mpx::Result<Datatype> {
    Datatype::subarray(&[size, size], &[rows, cols], &[row, col], Order::C, &Datatype::double())
}

/// The halo exchange of a rank of the process grid over its block of
/// `(BLOCK + 2)²` cells: each face goes to the neighbour on its side, and
/// each ghost row or column is filled from there. The neighbours come from
/// the grid's shifts: `PROC_NULL` off the grid's edges, where the ghosts
/// keep the boundary.
fn halo(grid: &Cart) -> mpx::Result<Vec<Transfer>> {
    let (w, b) = (BLOCK + 2, BLOCK);
    let (north, south) = grid.shift(0, 1)?;
    let (west, east) = grid.shift(1, 1)?;
    // (neighbour, face sent to it, ghost filled from it, direction of travel towards it, from it)
    let sides = [
        (north, block(w, 1, b, 1, 1)?, block(w, 1, b, 0, 1)?, Travel::North, Travel::South),
        (south, block(w, 1, b, b, 1)?, block(w, 1, b, b + 1, 1)?, Travel::South, Travel::North),
        (west, block(w, b, 1, 1, 1)?, block(w, b, 1, 1, 0)?, Travel::West, Travel::East),
        (east, block(w, b, 1, 1, b)?, block(w, b, 1, 1, b + 1)?, Travel::East, Travel::West),
    ];
    let mut transfers = Vec::new();
    for (neighbour, face, ghost, towards, from) in sides {
        transfers.push(Transfer::recv(1, &ghost, neighbour, from as i32));
        transfers.push(Transfer::send(1, &face, neighbour, towards as i32));
    }
    Ok(transfers)
}

/// The largest change of a cell between `u` and `next` over the `rows ×
/// cols` interior.
fn largest_change(u: &[f64], next: &[f64], rows: usize, cols: usize) -> f64 {
    let width = cols + 2;
    (1..=rows).flat_map(|i| (1..=cols).map(move |j| i * width + j)).map(|at| (next[at] - u[at]).abs()).fold(0.0, f64::max)
}

/// The global grid before the first iteration.
fn initial_grid() -> Vec<f64> {
    (0..(N + 2) * (N + 2)).map(|k| initial(k / (N + 2), k % (N + 2))).collect()
}

/// The serial run: the whole grid, the same sweeps; and the last sweep's
/// largest change.
fn serial() -> (Vec<f64>, f64) {
    let mut u = initial_grid();
    let mut next = u.clone();
    let mut change = 0.0;
    for _ in 0..ITERATIONS {
        sweep(&u, &mut next, N, N);
        change = largest_change(&u, &next, N, N);
        std::mem::swap(&mut u, &mut next);
    }
    (u, change)
}

/// One rank's solver: the last sweep's largest change over the whole grid
/// (every rank's), and on rank 0 the gathered global grid.
async fn solve(world: Comm) -> mpx::Result<(f64, Option<Vec<f64>>)> {
    let grid = world.cart_create(&[RANKS_PER_SIDE, RANKS_PER_SIDE], &[false, false], false).await?.expect("the world fills the grid");
    let comm: &Comm = &grid;
    let [row, col] = grid.coords(grid.rank())?[..] else { unreachable!("two dimensions") };
    let w = BLOCK + 2;
    // The block with its ghost layer, cut from the global initial grid:
    // ghosts on the grid's edge keep their boundary values for good.
    let global = initial_grid();
    let mut u: Vec<f64> = (0..w * w).map(|k| global[(row * BLOCK + k / w) * (N + 2) + col * BLOCK + k % w]).collect();
    let mut next = u.clone();
    let halo = halo(&grid)?;
    let mut change = 0.0;
    for _ in 0..ITERATIONS {
        comm.exchange(&mut u, &halo).await?;
        sweep(&u, &mut next, BLOCK, BLOCK);
        change = largest_change(&u, &next, BLOCK, BLOCK);
        std::mem::swap(&mut u, &mut next);
    }
    // The largest change over the whole grid: a maximum is exact, so it
    // must equal the serial run's.
    let mut global_change = 0.0;
    comm.allreduce(&change, &mut global_change, MAX).await?;

    // Every rank sends its interior; rank 0 receives the four straight into
    // their places in the global grid, whose ring already holds the boundary.
    let interior = block(w, BLOCK, BLOCK, 1, 1)?;
    let sent = comm.isend(SendBuf::new(Region::of(&u), 1, &interior), 0, GATHER_TAG);
    let gathered = if comm.rank() == 0 {
        let mut result = initial_grid();
        let places: Vec<Datatype> = (0..comm.size())
            .map(|r| block(N + 2, BLOCK, BLOCK, 1 + r / RANKS_PER_SIDE * BLOCK, 1 + r % RANKS_PER_SIDE * BLOCK))
            .collect::<mpx::Result<_>>()?;
        let places: Vec<(u64, &Datatype)> = places.iter().map(|p| (1, p)).collect();
        let (blocks, _) = ExchangeBuf::from(&mut result).split(&places, &[])?;
        let receives = blocks.into_iter().enumerate().map(|(r, buf)| comm.recv_into(buf, r, GATHER_TAG));
        futures::future::try_join_all(receives).await?;
        Some(result)
    } else {
        None
    };
    sent.await?;
    Ok((global_change, gathered))
}

#[tokio::main]
async fn main() -> mpx::Result<()> {
    let started = std::time::Instant::now();
    let ranks = RANKS_PER_SIDE * RANKS_PER_SIDE;
    let gathered = mpx::launch(ranks, solve).await?;
    // Rank 0 gathers the grid. Under a launcher this process runs one rank:
    // any other has checked its own part of the exchange, and is done.
    let ran_rank_0 = gathered.len() == ranks || gathered.first().is_some_and(|(_, grid)| grid.is_some());
    if !ran_rank_0 {
        return Ok(());
    }
    let changes: Vec<f64> = gathered.iter().map(|(change, _)| *change).collect();
    let Some(parallel) = gathered.into_iter().next().and_then(|(_, grid)| grid) else {
        println!("MISMATCH: rank 0 gathered no grid");
        std::process::exit(1);
    };
    let parallel_time = started.elapsed();
    let (expected, serial_change) = serial();
    if changes.iter().any(|c| c.to_bits() != serial_change.to_bits()) {
        println!("MISMATCH: the ranks' largest last change {changes:?}, the serial run's {serial_change}");
        std::process::exit(1);
    }

    let differing = parallel.iter().zip(&expected).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    let max_diff = parallel.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    let mean = expected.iter().sum::<f64>() / expected.len() as f64;
    println!(
        "heat2d: {N}x{N} grid on {RANKS_PER_SIDE}x{RANKS_PER_SIDE} ranks, {ITERATIONS} Jacobi iterations in {:.0?}; mean temperature {mean:.6}; last largest change {serial_change:.3e} (allreduce)",
        parallel_time
    );
    if differing > 0 {
        println!("MISMATCH: {differing} cells differ from the serial run (largest difference {max_diff:e})");
        std::process::exit(1);
    }
    println!("identical to the serial run, bit for bit, in all {} cells", expected.len());
    Ok(())
}
