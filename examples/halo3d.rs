//! A 3-D halo exchange with subarray faces: four ranks on a 2×2×1 process
//! grid, periodic in every direction, each holding a 16×24×32 block (z, y,
//! x) of a 16×48×64 global array plus one ghost layer. One
//! `Comm::exchange` sends the six faces of the block and fills the six
//! ghost faces straight from the neighbours; along z the only rank is the
//! rank itself, so both z faces travel from a rank to itself.
//!
//! Every interior cell holds a value unique to its global position. After
//! each exchange every ghost face cell must hold the value of the cell it
//! mirrors (across the periodic wrap), every edge and corner ghost must be
//! untouched (a face exchange does not fill them), and the interior must be
//! unchanged. Exits non-zero on any mismatch.
//!
//! ```text
//! cargo run --release --example halo3d
//! ```

use mpx::prelude::*;
use mpx::Transfer;

/// Ranks along z, y and x.
const DIMS: [usize; 3] = [1, 2, 2];
/// Interior cells of one rank's block along z, y and x.
const LOCAL: [usize; 3] = [16, 24, 32];
/// Exchanges (each with new interior values).
const ROUNDS: usize = 3;
/// What ghosts hold before any exchange.
const UNTOUCHED: f64 = -1.0;

/// The global extent along each axis.
fn global_extent(axis: usize) -> usize {
    DIMS[axis] * LOCAL[axis]
}

/// The value of the global cell `g` in round `round`.
fn value(g: [usize; 3], round: usize) -> f64 {
    ((round * global_extent(0) + g[0]) * global_extent(1) + g[1]) as f64 * global_extent(2) as f64 + g[2] as f64
}

/// The rank at process-grid coordinates `c`.
fn rank_at(c: [usize; 3]) -> usize {
    (c[0] * DIMS[1] + c[1]) * DIMS[2] + c[2]
}

/// The process-grid coordinates of `rank`.
fn coords(rank: usize) -> [usize; 3] {
    [rank / (DIMS[1] * DIMS[2]), rank / DIMS[2] % DIMS[1], rank % DIMS[2]]
}

/// The six faces: for each axis and side (0: low, 1: high), the neighbour,
/// the face sent to it and the ghost face filled from it. A message's tag
/// is the face it leaves through: `2 * axis + side`.
fn halo(rank: usize) -> mpx::Result<Vec<Transfer>> {
    let c = coords(rank);
    let sizes = LOCAL.map(|n| n + 2);
    let mut transfers = Vec::new();
    for axis in 0..3 {
        for side in 0..2 {
            let mut neighbour = c;
            neighbour[axis] = (c[axis] + if side == 0 { DIMS[axis] - 1 } else { 1 }) % DIMS[axis];
            let neighbour = rank_at(neighbour);
            // The whole interior along the other axes, one layer along this one.
            let mut subsizes = LOCAL;
            subsizes[axis] = 1;
            let layer = |at: usize| {
                let mut starts = [1; 3];
                starts[axis] = at;
                Datatype::subarray(&sizes, &subsizes, &starts, Order::C, &Datatype::double())
            };
            let (face, ghost) =
                if side == 0 { (layer(1)?, layer(0)?) } else { (layer(LOCAL[axis])?, layer(LOCAL[axis] + 1)?) };
            let leaving = (2 * axis + side) as i32;
            let arriving = (2 * axis + 1 - side) as i32; // the neighbour's message leaves through its opposite face
            transfers.push(Transfer::recv(1, &ghost, neighbour, arriving));
            transfers.push(Transfer::send(1, &face, neighbour, leaving));
        }
    }
    Ok(transfers)
}

/// Checks the block of the rank at `c` after round `round`'s exchange;
/// returns the number of cells that are wrong.
fn check(block: &[f64], c: [usize; 3], round: usize) -> usize {
    let w = LOCAL.map(|n| n + 2);
    let mut wrong = 0;
    for (k, &got) in block.iter().enumerate() {
        let local = [k / (w[1] * w[2]), k / w[2] % w[1], k % w[2]];
        let ghost_axes = (0..3).filter(|&a| local[a] == 0 || local[a] == LOCAL[a] + 1).count();
        let expected = if ghost_axes > 1 {
            UNTOUCHED
        } else {
            // A face ghost mirrors the interior cell across the periodic wrap.
            let g = [0, 1, 2].map(|a| (c[a] * LOCAL[a] + local[a] + global_extent(a) - 1) % global_extent(a));
            value(g, round)
        };
        if got.to_bits() != expected.to_bits() {
            wrong += 1;
        }
    }
    wrong
}

/// One rank: fills its interior, exchanges, checks; returns (cells
/// checked, cells wrong).
async fn run(comm: Comm) -> mpx::Result<(usize, usize)> {
    let c = coords(comm.rank());
    let w = LOCAL.map(|n| n + 2);
    let halo = halo(comm.rank())?;
    let mut block = vec![UNTOUCHED; w[0] * w[1] * w[2]];
    let mut wrong = 0;
    for round in 0..ROUNDS {
        for (k, cell) in block.iter_mut().enumerate() {
            let local = [k / (w[1] * w[2]), k / w[2] % w[1], k % w[2]];
            if (0..3).all(|a| (1..=LOCAL[a]).contains(&local[a])) {
                *cell = value([0, 1, 2].map(|a| c[a] * LOCAL[a] + local[a] - 1), round);
            }
        }
        comm.exchange(&mut block, &halo).await?;
        wrong += check(&block, c, round);
    }
    Ok((ROUNDS * block.len(), wrong))
}

#[tokio::main]
async fn main() -> mpx::Result<()> {
    let started = std::time::Instant::now();
    let ranks = DIMS.iter().product();
    let results = mpx::launch(ranks, run).await?;
    let (checked, wrong) = results.iter().fold((0, 0), |(c, w), &(rc, rw)| (c + rc, w + rw));
    println!(
        "halo3d: {ranks} ranks on a {:?} periodic grid, {:?} cells each, {ROUNDS} exchanges of six subarray faces in {:.0?}: {checked} cells checked",
        DIMS,
        LOCAL,
        started.elapsed()
    );
    if wrong > 0 {
        println!("MISMATCH: {wrong} cells hold the wrong value");
        std::process::exit(1);
    }
    println!("every ghost face mirrors its neighbour, edges and corners untouched, interiors unchanged");
    Ok(())
}
