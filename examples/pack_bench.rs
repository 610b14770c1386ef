//! Pack/unpack throughput of the datatype engine on eight common layouts.
//!
//! ```text
//! cargo run --release --example pack_bench
//! ../shared/reference-bench/run.sh pack      # MPICH, Open MPI and hand-written C, same types
//! scripts/pack_compare.py 21                 # both, in interleaved rounds, as medians
//! ```
//!
//! Prints one JSON line per datatype, `{"type", "bytes", "pack_GBps",
//! "unpack_GBps", "memcpy_GBps"}`, best of seven trials, with the same types,
//! sizes, repetitions per trial and best-of as the two C programs of
//! `shared/reference-bench`. Like `manual_bench.c` (the hand-written loops),
//! it packs from and unpacks into one buffer; `pack_bench.c` (MPICH, Open
//! MPI) unpacks into a second one, whose lines are out of cache by then,
//! which lowers every unpack figure it measures (see the README). Every type
//! is built through the public datatype API and packed through the public
//! pack/unpack API.
//! Measured figures, with the reference run beside them, are in the README's
//! "Performance" section.

use std::hint::black_box;
use std::time::Instant;

use mpx::{Datatype, Order, Region, RegionMut};

const N: i64 = 1 << 20;

fn bench(name: &str, t: Datatype, count: u64, span: usize) {
    let t = t.commit();
    let bytes = t.pack_size(count).expect("benchmark types are small");
    // As in manual_bench.c, one buffer is packed from and unpacked into.
    let mut mem = vec![1u8; span];
    let mut packed = vec![2u8; bytes];
    let mut copy = vec![0u8; bytes];
    let reps = ((2e8 / (bytes as f64 + 1.0)) as usize + 1).min(2000);
    let (mut best_pack, mut best_unpack, mut best_copy) = (f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..7 {
        let t0 = Instant::now();
        for _ in 0..reps {
            t.pack_into(Region::new(black_box(&mem)), count, &mut packed, &mut 0).expect("pack");
            black_box(&mut packed);
        }
        let t1 = Instant::now();
        for _ in 0..reps {
            let mut pos = 0;
            t.unpack_from(black_box(&packed), &mut pos, RegionMut::new(&mut mem), count).expect("unpack");
            black_box(&mut mem);
        }
        let t2 = Instant::now();
        for _ in 0..reps {
            copy.copy_from_slice(black_box(&packed));
            black_box(&mut copy);
        }
        let t3 = Instant::now();
        best_pack = best_pack.min((t1 - t0).as_secs_f64() / reps as f64);
        best_unpack = best_unpack.min((t2 - t1).as_secs_f64() / reps as f64);
        best_copy = best_copy.min((t3 - t2).as_secs_f64() / reps as f64);
    }
    let gbps = |secs: f64| bytes as f64 / secs / 1e9;
    println!(
        "{{\"type\":\"{name}\",\"bytes\":{bytes},\"pack_GBps\":{:.2},\"unpack_GBps\":{:.2},\"memcpy_GBps\":{:.2}}}",
        gbps(best_pack),
        gbps(best_unpack),
        gbps(best_copy)
    );
}

fn main() -> mpx::Result<()> {
    let double = Datatype::double();
    let n = N as usize;
    bench("contiguous_1M_double", Datatype::contiguous(N, &double)?, 1, n * 8);
    bench("vector_stride2_double", Datatype::vector(N, 1, 2, &double)?, 1, n * 16);
    bench("vector_block8_stride16_double", Datatype::vector(N / 8, 8, 16, &double)?, 1, n * 16);
    bench("vector_xyz_of_xyzw_float", Datatype::vector(N / 4, 3, 4, &Datatype::float())?, 1, n * 4);
    // An array of C structs {int id; double x; char tag[3];}: 24-byte stride, 15 useful bytes.
    let s = Datatype::structure(&[1, 1, 3], &[0, 8, 16], &[Datatype::int(), double.clone(), Datatype::char()])?;
    bench("struct_int_double_char3_x1M", Datatype::resized(0, 24, &s)?, (N / 2) as u64, n / 2 * 24);
    // A 128^3 cube of doubles: an x face (stride 128) and a y face (128 runs of 1 KiB).
    let cube = [128, 128, 128];
    let xface = Datatype::subarray(&cube, &[128, 128, 1], &[0, 0, 5], Order::C, &double)?;
    bench("subarray_128cube_xface_double", xface, 1, 128 * 128 * 128 * 8);
    let yface = Datatype::subarray(&cube, &[128, 1, 128], &[0, 5, 0], Order::C, &double)?;
    bench("subarray_128cube_yface_double", yface, 1, 128 * 128 * 128 * 8);
    // 64k blocks of 1..7 doubles at scattered displacements, from pack_bench.c's 32-bit LCG.
    let (mut lens, mut disps) = (Vec::new(), Vec::new());
    let (mut off, mut s) = (0i64, 12345u32);
    for _ in 0..65536 {
        s = s.wrapping_mul(1103515245).wrapping_add(12345);
        let len = 1 + ((s >> 16) % 7) as i64;
        lens.push(len);
        disps.push(off);
        off += len + 1 + ((s >> 8) % 5) as i64;
    }
    let indexed = Datatype::indexed(&lens, &disps, &double)?;
    bench("indexed_irregular_64k_blocks", indexed, 1, (off as usize + 8) * 8);
    Ok(())
}
