//! The main job: four ranks on the in-memory backend exchanging typed and
//! derived data, after a short tour of the datatype engine (build a few
//! types, print their bounds, pack and unpack, decode one).
//!
//! ```text
//! cargo run --release --example quickstart
//! ```

use mpx::prelude::*;
use mpx::{pack, unpack, Combiner};

/// A particle as a C program would lay it out; the derive builds its datatype.
#[derive(MpiType, Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
struct Particle {
    id: u32,
    pos: [f64; 3],
    charge: f32,
}

fn show(name: &str, t: &Datatype) {
    println!(
        "{name:<28} size {:>4}  lb {:>4}  ub {:>4}  extent {:>4}  true_lb {:>4}  true_extent {:>4}  elements {:>3}",
        t.size(),
        t.lb(),
        t.ub(),
        t.extent(),
        t.true_lb(),
        t.true_extent(),
        t.num_elements()
    );
}

#[tokio::main]
async fn main() -> mpx::Result<()> {
    datatype_tour()?;
    ring().await
}

/// Four ranks: each sends particles and a matrix column to its right
/// neighbour, receives from its left, then all meet at a barrier.
async fn ring() -> mpx::Result<()> {
    // Alone, the four ranks run in this process on the in-memory backend;
    // under a launcher (`mpxrun -n 4`, `mpiexec.hydra -n 4`, ...) this
    // process runs one of them, over QUIC.
    println!("\n-- four ranks --");
    let reports = mpx::launch(4, |world| async move {
        let (rank, size) = (world.rank(), world.size());
        let right = (rank + 1) % size;
        let left = (rank + size - 1) % size;

        // Derived structs, received into a preallocated slice.
        let out: Vec<Particle> =
            (0..1000).map(|i| Particle { id: (rank * 1000 + i) as u32, pos: [i as f64; 3], charge: -1.0 }).collect();
        let mut inp = vec![Particle::default(); 1000];
        let (sent, status) = futures::join!(world.send(&out, right, 7), world.recv_into(&mut inp, left, 7));
        sent?;
        let status = status?;

        // Column `rank` of a 100x100 matrix, sent with a vector type, received as a plain row.
        let matrix: Vec<f64> = (0..100 * 100).map(|i| (rank * 100_000 + i) as f64).collect();
        let column = Datatype::vector(100, 1, 100, &Datatype::double())?.commit();
        let mut row = vec![0f64; 100];
        let send = world.send(SendBuf::new(Region::of(&matrix[rank..]), 1, &column), right, 8);
        let (sent, got) = futures::join!(send, world.recv_into(&mut row, left, 8));
        sent?;
        got?;

        world.barrier().await?;
        Ok(format!(
            "rank {rank}: {} particles from rank {} (first id {}), column of rank {left}'s matrix starts {}",
            status.count::<Particle>().unwrap_or(0),
            status.source.unwrap_or(0),
            inp[0].id,
            row[0]
        ))
    })
    .await?;
    for line in reports {
        println!("{line}");
    }
    Ok(())
}

/// Builds a few types, prints their bounds, packs, unpacks and decodes.
fn datatype_tour() -> mpx::Result<()> {
    println!("-- the datatype engine --");
    // A column of a 4x4 row-major matrix of doubles.
    let column = Datatype::vector(4, 1, 4, &Datatype::double())?.commit();
    // A C struct {double x; char tag;} (padded to 16 bytes by the alignment rule).
    let particle = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::char()])?;
    // The interior 2x2 block of a 4x4 array.
    let interior = Datatype::subarray(&[4, 4], &[2, 2], &[1, 1], Order::C, &Datatype::int())?;
    // The MPI-1 markers: {(lb,-3), (int,0), (ub,6)} has extent 9.
    let marked = Datatype::structure(
        &[1, 1, 1],
        &[-3, 0, 6],
        &[Datatype::lb_marker(), Datatype::int(), Datatype::ub_marker()],
    )?;
    for (name, t) in [("column of 4x4 f64", &column), ("struct {double; char}", &particle),
                      ("2x2 interior of 4x4 int", &interior), ("struct with lb/ub markers", &marked)] {
        show(name, t);
    }

    // Pack the second column, then unpack it into the first column of another matrix.
    let matrix: Vec<f64> = (0..16).map(f64::from).collect();
    let mut packed = vec![0u8; column.pack_size(1)?];
    let mut position = 0;
    column.pack_into(Region::of(&matrix[1..]), 1, &mut packed, &mut position)?;
    let mut target = vec![0.0f64; 16];
    column.unpack_from(&packed, &mut 0, RegionMut::of(&mut target), 1)?;
    let first_column: Vec<f64> = target.iter().step_by(4).copied().collect();
    println!("packed {position} bytes; column 1 of the matrix unpacked into column 0: {first_column:?}");

    // Typed slices use their own datatype; unpacking validates values.
    let mut buf = vec![0u8; 16];
    let mut pos = 0;
    pack(&[true, false, true], &mut buf, &mut pos)?;
    let mut flags = [false; 3];
    unpack(&buf, &mut 0, &mut flags)?;
    println!("bools round-tripped: {flags:?}; a 7 unpacked as bool gives: {}",
             unpack(&[7u8], &mut 0, &mut [false]).unwrap_err());

    // external32 is big-endian.
    let ints = Datatype::contiguous(2, &Datatype::int())?;
    let mut ext = vec![0u8; ints.pack_external_size(1)?];
    ints.pack_external(Region::of(&[1i32, 258]), 1, &mut ext, &mut 0)?;
    println!("external32 of [1, 258]: {ext:?}");

    // Decoding: the constructor and its arguments, as MPI_Type_get_contents gives them.
    let env = interior.envelope();
    let contents = interior.contents()?;
    assert_eq!(env.combiner, Combiner::Subarray);
    println!("interior decodes as {:?} with integers {:?} over {:?}",
             env.combiner, contents.integers, contents.datatypes[0]);
    Ok(())
}
