//! Pack and unpack: position semantics, truncation, bounds, regions with
//! negative displacements, typed validation, external32, absolute addresses.

use mpx::{address_of, address_of_mut, pack, unpack, Datatype, ErrorKind, Order, Region, RegionMut};

fn ne_f64(bytes: &[u8]) -> Vec<f64> {
    bytes.chunks(8).map(|c| f64::from_ne_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn several_packs_append_and_unpacks_consume_in_order() {
    let col = Datatype::vector(3, 1, 3, &Datatype::double()).unwrap();
    let m: Vec<f64> = (0..9).map(f64::from).collect();
    let total = col.pack_size(2).unwrap() + Datatype::int().pack_size(1).unwrap();
    let mut buf = vec![0u8; total];
    let mut pos = 0;
    col.pack_into(Region::of(&m), 1, &mut buf, &mut pos).unwrap();
    pack(&[42i32], &mut buf, &mut pos).unwrap();
    col.pack_into(Region::of(&m[2..]), 1, &mut buf, &mut pos).unwrap();
    assert_eq!(pos, total);

    let mut pos = 0;
    let mut out = vec![-1.0f64; 9];
    col.unpack_from(&buf, &mut pos, RegionMut::of(&mut out), 1).unwrap();
    let mut x = [0i32];
    unpack(&buf, &mut pos, &mut x).unwrap();
    let mut out2 = vec![-1.0f64; 9];
    col.unpack_from(&buf, &mut pos, RegionMut::of(&mut out2[2..]), 1).unwrap();
    assert_eq!(pos, total);
    assert_eq!(x, [42]);
    assert_eq!(out, [0.0, -1.0, -1.0, 3.0, -1.0, -1.0, 6.0, -1.0, -1.0], "gaps must stay untouched");
    assert_eq!(out2, [-1.0, -1.0, 2.0, -1.0, -1.0, 5.0, -1.0, -1.0, 8.0]);
}

#[test]
fn truncation_is_an_error_that_keeps_earlier_data() {
    let mut buf = vec![0u8; 12];
    let mut pos = 0;
    pack(&[1.5f64], &mut buf, &mut pos).unwrap();
    let before = buf.clone();
    let err = pack(&[1u32, 2], &mut buf, &mut pos).unwrap_err();
    assert_eq!(err, ErrorKind::Truncate { needed: 8, available: 4, message: None });
    assert_eq!(pos, 8, "position unchanged");
    assert_eq!(buf, before, "nothing written");
    let mut pos = 13;
    assert!(matches!(pack(&[1u8], &mut buf, &mut pos), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))));
}

#[test]
fn short_input_is_an_error() {
    let mut out = [0u32; 3];
    let err = unpack(&[0u8; 10], &mut 0, &mut out).unwrap_err();
    assert_eq!(err, ErrorKind::ShortInput { requested: 12, available: 10 });
    assert_eq!(out, [0; 3]);
}

#[test]
fn types_that_do_not_fit_the_region_are_errors() {
    let col = Datatype::vector(4, 1, 4, &Datatype::double()).unwrap(); // true extent 104
    let m = vec![0.0f64; 13];
    assert_eq!(col.pack_to_vec(Region::of(&m), 1).unwrap().len(), 32);
    let err = col.pack_to_vec(Region::of(&m[1..]), 1).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::OutOfBounds { low: 0, high: 104, len: 96 }), "{err:?}");
    // Two items need 104 + extent bytes.
    assert!(col.pack_to_vec(Region::of(&m), 2).is_err());
    let mut dst = vec![0.0f64; 12];
    assert!(matches!(col.unpack_from(&[0u8; 32], &mut 0, RegionMut::of(&mut dst), 1),
        Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })));
    assert!(Region::with_origin(&[0u8; 4], 5).is_err());
}

#[test]
fn negative_displacements_read_before_the_origin() {
    // Items at -8 (a double) and +0 (an int), resized so items are 16 apart.
    let t = Datatype::structure(&[1, 1], &[-8, 0], &[Datatype::double(), Datatype::int()]).unwrap();
    assert_eq!((t.lb(), t.true_lb(), t.extent()), (-8, -8, 16));
    let mut mem = vec![0u8; 40];
    for (i, b) in mem.iter_mut().enumerate() {
        *b = i as u8;
    }
    let region = Region::with_origin(&mem, 8).unwrap();
    let packed = t.pack_to_vec(region, 2).unwrap();
    let expect: Vec<u8> = (0..12).chain(16..28).collect();
    assert_eq!(packed, expect);
    assert!(t.pack_to_vec(Region::new(&mem), 1).is_err(), "origin 0 would read before the buffer");

    let mut back = vec![0xffu8; 40];
    t.unpack_from(&packed, &mut 0, RegionMut::with_origin(&mut back, 8).unwrap(), 2).unwrap();
    for (i, &byte) in back.iter().enumerate() {
        let touched = (0..12).contains(&i) || (16..28).contains(&i);
        assert_eq!(byte, if touched { i as u8 } else { 0xff }, "byte {i}");
    }
}

#[test]
fn packing_raw_bytes_never_validates_but_typed_unpack_does() {
    let t = Datatype::named("c_bool").unwrap();
    assert_eq!(t.pack_to_vec(Region::new(&[7u8]), 1).unwrap(), [7]);
    let (mut flags, mut pos) = ([true, true], 0);
    assert_eq!(unpack(&[1u8, 7], &mut pos, &mut flags), Err(ErrorKind::InvalidValue { type_name: "bool", item: 1 }.into()));
    assert_eq!((flags, pos), ([true, true], 0), "neither the values nor the position move");
    let surrogate = 0xd800u32.to_ne_bytes();
    let mut c = ['x'];
    assert!(matches!(unpack(&surrogate, &mut 0, &mut c), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidValue { .. })));
    assert_eq!(c, ['x']);
    let mut nz = [std::num::NonZeroU16::new(5).unwrap()];
    assert!(unpack(&[0u8, 0], &mut 0, &mut nz).is_err());
    let mut pos = 0;
    unpack(&'é'.to_string().chars().map(u32::from).next().unwrap().to_ne_bytes(), &mut pos, &mut c).unwrap();
    assert_eq!((c, pos), (['é'], 4));
}

#[test]
fn external32_round_trips_and_is_big_endian() {
    let t = Datatype::structure(
        &[1, 1, 1, 1],
        &[0, 8, 16, 18],
        &[Datatype::named("long").unwrap(), Datatype::double(), Datatype::named("short").unwrap(), Datatype::named("c_bool").unwrap()],
    )
    .unwrap();
    assert_eq!((t.size(), t.external32_size()), (19, 15));
    #[repr(C)]
    #[derive(Clone, Copy, Default, Debug, PartialEq)]
    struct S {
        l: i64,
        d: f64,
        s: i16,
        b: u8,
        pad: [u8; 5],
    }
    let v = [S { l: -3, d: 0.5, s: 0x0102, b: 1, pad: [0; 5] }];
    // SAFETY: `S` is 24 bytes with no padding (its `pad` field fills the
    // tail), so all 24 bytes of `v` are initialised.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), 24) };
    let mut ext = vec![0u8; t.pack_external_size(1).unwrap()];
    t.pack_external(Region::new(bytes), 1, &mut ext, &mut 0).unwrap();
    let mut expect = (-3i32).to_be_bytes().to_vec();
    expect.extend(0.5f64.to_be_bytes());
    expect.extend([1, 2, 1]);
    assert_eq!(ext, expect);
    let mut back = [0u8; 24];
    t.unpack_external(&ext, &mut 0, RegionMut::new(&mut back), 1).unwrap();
    assert_eq!(&back[..23], &bytes[..23]);

    let big = [(1i64 << 40)];
    let long = Datatype::named("long").unwrap();
    let err = long.pack_external(Region::of(&big), 1, &mut [0u8; 4], &mut 0).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Conversion { what: "long", .. }));
}

#[test]
fn absolute_addresses_pack_from_bottom() {
    let a = [1.0f64, 2.0];
    let b = 9u16;
    // The address of the whole array: the type reads both of its values.
    let t = Datatype::structure(&[1, 1], &[address_of(&a), address_of(&b)], &[
        Datatype::contiguous(2, &Datatype::double()).unwrap(),
        Datatype::named("uint16_t").unwrap(),
    ])
    .unwrap();
    let mut out = vec![0u8; 18];
    let mut pos = 0;
    // SAFETY: the type's addresses are those of `a` and `b`, alive here.
    unsafe { t.pack_from_bottom(1, &mut out, &mut pos).unwrap() };
    assert_eq!(ne_f64(&out[..16]), [1.0, 2.0]);
    assert_eq!(&out[16..], &9u16.to_ne_bytes());

    let mut c = [0.0f64; 2];
    let mut d = 0u16;
    // Addresses taken to write through, of all the memory written.
    let back = Datatype::structure(&[1, 1], &[address_of_mut(&mut c), address_of_mut(&mut d)], &[
        Datatype::contiguous(2, &Datatype::double()).unwrap(),
        Datatype::named("uint16_t").unwrap(),
    ])
    .unwrap();
    // SAFETY: the type's addresses were exposed for writing from `c` and
    // `d`, whole, which are alive and not used between.
    unsafe { back.unpack_to_bottom(&out, &mut 0, 1).unwrap() };
    assert_eq!((c, d), ([1.0, 2.0], 9));
}

#[test]
fn subarray_pack_and_unpack_round_trip() {
    let cube: Vec<f64> = (0..4 * 5 * 6).map(f64::from).collect();
    for order in [Order::C, Order::Fortran] {
        let t = Datatype::subarray(&[4, 5, 6], &[2, 3, 2], &[1, 2, 3], order, &Datatype::double()).unwrap();
        let packed = t.pack_to_vec(Region::of(&cube), 1).unwrap();
        let values = ne_f64(&packed);
        // Expected order: slowest dimension first.
        let mut expect = vec![];
        match order {
            Order::C => {
                for i in 1..3 { for j in 2..5 { for k in 3..5 { expect.push((i * 30 + j * 6 + k) as f64); } } }
            }
            Order::Fortran => {
                // Fortran: index (i,j,k) at i + 4j + 20k, first index fastest.
                for k in 3..5 { for j in 2..5 { for i in 1..3 { expect.push((i + 4 * j + 20 * k) as f64); } } }
            }
        }
        assert_eq!(values, expect, "{order:?}");
        let mut back = vec![0.0f64; cube.len()];
        t.unpack_from(&packed, &mut 0, RegionMut::of(&mut back), 1).unwrap();
        let moved = back.iter().filter(|v| **v != 0.0).count();
        assert_eq!(moved, 12);
    }
}

/// An unpack whose typemap writes a byte twice is erroneous in MPI (the
/// byte would hold whichever copy came last): it is an `Overlap` error
/// that writes nothing and leaves the position, whether one item's entries
/// overlap or items of a type resized smaller than its data overlap each
/// other. Types whose items interleave without overlapping (a column
/// resized to one element's extent, a vector with a negative stride, a
/// struct with its fields in reverse order) unpack as before.
#[test]
fn unpacking_into_a_typemap_that_writes_a_byte_twice_is_an_error() {
    let short = Datatype::named("short").unwrap();
    let overlapping = [
        (Datatype::structure(&[1, 1], &[0, 0], &[Datatype::char(), short.clone()]).unwrap(), 1),
        (Datatype::indexed(&[2, 1], &[0, 1], &Datatype::int()).unwrap(), 1),
        (Datatype::resized(0, 2, &Datatype::int()).unwrap(), 2),
        (Datatype::vector(2, 2, 1, &Datatype::char()).unwrap(), 1),
    ];
    for (t, count) in overlapping {
        let packed = vec![7u8; t.pack_size(count).unwrap()];
        let mut m = [0u8; 16];
        let mut pos = 0;
        let got = t.unpack_from(&packed, &mut pos, RegionMut::new(&mut m), count);
        assert!(matches!(got, Err(ref e) if matches!(e.kind(), ErrorKind::Overlap { .. })), "{t:?}: {got:?}");
        assert_eq!((pos, m), (0, [0; 16]), "nothing written");
        let got = t.unpack_external(&vec![7u8; t.pack_external_size(count).unwrap()], &mut pos, RegionMut::new(&mut m), count);
        assert!(matches!(got, Err(ref e) if matches!(e.kind(), ErrorKind::Overlap { .. })), "{t:?}: {got:?}");
    }

    // A 4x4 matrix's columns, each resized to one element, four of them:
    // the whole matrix in column order.
    let n = 4;
    let column = Datatype::resized(0, 8, &Datatype::vector(n, 1, n, &Datatype::double()).unwrap()).unwrap();
    let packed: Vec<u8> = (0..16).flat_map(|i| f64::from(i).to_ne_bytes()).collect();
    let mut m = [0f64; 16];
    column.unpack_from(&packed, &mut 0, RegionMut::of(&mut m), n as u64).unwrap();
    assert_eq!(m.to_vec(), (0..16).map(|i| f64::from((i % 4) * 4 + i / 4)).collect::<Vec<_>>());
    // Backwards, and fields in reverse order.
    let backwards = Datatype::hvector(4, 1, -8, &Datatype::double()).unwrap();
    let mut bytes = [0u8; 32];
    backwards.unpack_from(&packed[..32], &mut 0, RegionMut::with_origin(&mut bytes, 24).unwrap(), 1).unwrap();
    assert_eq!(ne_f64(&bytes), [3.0, 2.0, 1.0, 0.0]);
    // Two combs of bytes, one in the other's gaps (their spans overlap,
    // their bytes do not).
    let comb = Datatype::hvector(1000, 1, 2, &Datatype::char()).unwrap();
    let combs = Datatype::structure(&[1, 1], &[0, 1], &[comb.clone(), comb]).unwrap();
    let stream: Vec<u8> = (0..2000).map(|i| (i % 251) as u8).collect();
    let mut m = vec![0u8; 2000];
    combs.unpack_from(&stream, &mut 0, RegionMut::new(&mut m), 1).unwrap();
    assert!((0..1000).all(|i| m[2 * i] == stream[i] && m[2 * i + 1] == stream[1000 + i]));
    let reversed = Datatype::structure(&[1, 1], &[8, 0], &[Datatype::double(), Datatype::double()]).unwrap();
    let mut m = [0f64; 4];
    reversed.unpack_from(&packed[..32], &mut 0, RegionMut::of(&mut m), 2).unwrap();
    assert_eq!(m, [1.0, 0.0, 3.0, 2.0]);
}
