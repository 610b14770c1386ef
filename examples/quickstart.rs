//! A tour of the mpx datatype engine: build a few types, print their bounds,
//! pack and unpack, decode one.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```

use mpx::prelude::*;
use mpx::Combiner;

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

fn main() -> mpx::Result<()> {
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
