//! Size, extent and displacement arithmetic near the 64-bit limits is
//! checked explicitly: the same results in debug and release builds (which
//! have no overflow checks), an `ErrorKind::Overflow` where a value does not fit,
//! never a panic or a wrapped value.

use mpx::{Datatype, DistArg, Distribution, ErrorKind, Order};

fn cyclic(size: i64, rank: i64, gsize: i64, darg: DistArg, old: &Datatype) -> mpx::Result<Datatype> {
    Datatype::darray(size, rank, &[gsize], &[Distribution::Cyclic], &[darg], &[size], Order::C, old)
}

#[test]
fn cyclic_darray_up_to_the_largest_array() {
    // i64::MAX bytes dealt one at a time to two processes: rank 0 owns the
    // even indices (2^62 of them), rank 1 the odd ones; the last block of
    // rank 0 ends the array, so the block after it would start past i64::MAX.
    let byte = Datatype::byte();
    let r0 = cyclic(2, 0, i64::MAX, DistArg::Default, &byte).unwrap();
    let r1 = cyclic(2, 1, i64::MAX, DistArg::Default, &byte).unwrap();
    assert_eq!((r0.size(), r1.size()), (1 << 62, (1 << 62) - 1));
    assert_eq!((r0.extent(), r1.extent()), (i64::MAX, i64::MAX));
    assert_eq!((r0.true_lb(), r0.true_extent()), (0, i64::MAX));
    assert_eq!((r1.true_lb(), r1.true_extent()), (1, i64::MAX - 2));
    // Blocks of 2^61: rank 1's last block is partial.
    let b = DistArg::Size(1 << 61);
    let r0 = cyclic(2, 0, i64::MAX, b, &byte).unwrap();
    let r1 = cyclic(2, 1, i64::MAX, b, &byte).unwrap();
    assert_eq!(r0.size() + r1.size(), i64::MAX as u64);
    assert_eq!(r0.size(), 1 << 62);
}

/// A period (block size times processes) past 64 bits, or a block longer
/// than the dimension, is valid MPI and a type that fits: each process owns
/// one block or nothing.
#[test]
fn cyclic_darray_blocks_as_long_as_the_array_or_longer() {
    let byte = Datatype::byte();
    let half = i64::MAX / 2 + 1;
    let r0 = cyclic(2, 0, i64::MAX, DistArg::Size(half), &byte).unwrap();
    let r1 = cyclic(2, 1, i64::MAX, DistArg::Size(half), &byte).unwrap();
    assert_eq!((r0.size(), r1.size()), (half as u64, (i64::MAX - half) as u64));
    assert_eq!((r1.true_lb(), r1.true_extent()), (half, i64::MAX - half));
    // Blocks far longer than the dimension: the first process owns it all.
    let first = cyclic(3, 0, 100, DistArg::Size(i64::MAX / 2), &byte).unwrap();
    let last = cyclic(3, 2, 100, DistArg::Size(i64::MAX / 2), &byte).unwrap();
    assert_eq!((first.size(), first.extent(), last.size(), last.extent()), (100, 100, 0, 100));
    // Two dimensions, the slow one of 2 rows dealt in blocks of 2^31 - 1
    // on one process: the whole array, 2 × (2^31 - 1) doubles.
    let whole = Datatype::darray(
        1,
        0,
        &[2, (1i64 << 31) - 1],
        &[Distribution::Cyclic, Distribution::None],
        &[DistArg::Size((1i64 << 31) - 1), DistArg::Default],
        &[1, 1],
        Order::C,
        &Datatype::double(),
    )
    .unwrap();
    let bytes = 2 * 8 * ((1i64 << 31) - 1);
    assert_eq!((whole.size(), whole.extent()), (bytes as u64, bytes));
    let fortran = Datatype::darray(1, 0, &[4], &[Distribution::Cyclic], &[DistArg::Size(1 << 61)], &[1], Order::Fortran, &Datatype::double()).unwrap();
    assert_eq!((fortran.size(), fortran.extent()), (32, 32));
}

#[test]
fn cyclic_darray_arithmetic_that_does_not_fit_is_an_error() {
    let byte = Datatype::byte();
    // The array's bytes do not fit.
    let double = Datatype::double();
    assert!(matches!(cyclic(2, 0, i64::MAX / 4, DistArg::Default, &double), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    assert!(matches!(cyclic(2, 1, i64::MAX, DistArg::Size(7), &double), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    // Block distribution at the limit, and past it.
    let block = |g: i64, old: &Datatype| {
        Datatype::darray(2, 1, &[g], &[Distribution::Block], &[DistArg::Default], &[2], Order::C, old)
    };
    assert_eq!(block(i64::MAX, &byte).unwrap().size(), (1 << 62) - 1);
    assert!(matches!(block(i64::MAX, &double), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
}

#[test]
fn data_spread_wider_than_64_bits_is_an_error() {
    // Bound markers make the extent small, but the data itself spans more
    // than i64::MAX bytes: its true extent cannot be represented.
    let (int, lb, ub) = (Datatype::int(), Datatype::lb_marker(), Datatype::ub_marker());
    let wide = Datatype::structure(&[1, 1, 1, 1], &[0, i64::MIN + 8, i64::MAX - 4, 8], &[lb, int.clone(), int.clone(), ub]);
    assert!(matches!(wide, Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))), "{wide:?}");
    // Just inside the limit it is fine.
    let (lb, ub) = (Datatype::lb_marker(), Datatype::ub_marker());
    let t = Datatype::structure(&[1, 1, 1, 1], &[0, -4, i64::MAX - 8, 8], &[lb, int.clone(), int.clone(), ub]).unwrap();
    assert_eq!((t.extent(), t.true_lb(), t.true_extent()), (8, -4, i64::MAX));
    // Without markers the extent itself does not fit.
    assert!(matches!(Datatype::hindexed(&[1, 1], &[i64::MIN, i64::MAX - 4], &int), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    // And a displacement whose end does not fit.
    assert!(matches!(Datatype::hindexed(&[1], &[i64::MAX - 2], &int), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
}

#[test]
fn products_of_counts_and_extents_that_do_not_fit_are_errors() {
    let d = Datatype::double();
    assert!(matches!(Datatype::vector(2, 1, i64::MAX / 4, &d), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    assert!(matches!(Datatype::indexed(&[1], &[i64::MIN / 4], &d), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    assert!(matches!(Datatype::indexed_block(1, &[i64::MAX / 7], &d), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    assert!(matches!(Datatype::contiguous(i64::MAX / 8 + 1, &d), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    assert!(matches!(Datatype::subarray(&[i64::MAX / 8 + 1], &[1], &[0], Order::C, &d), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    assert!(matches!(Datatype::resized(i64::MIN, -1, &d), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    assert!(d.pack_size(u64::MAX / 4).is_err());
    assert!(d.pack_external_size(u64::MAX / 4).is_err());
}
