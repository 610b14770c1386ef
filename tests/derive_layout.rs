//! `#[derive(MpiType)]`: derived datatypes against datatypes built by hand
//! from the same offsets, packed bytes against the fields' bytes, round
//! trips, and validation of received values.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::mem::{offset_of, size_of};
use std::num::{NonZeroU16, NonZeroU32};
use std::ops::ControlFlow;

use mpx::{Basic, Datatype, ErrorKind, MpiType, Region};

// ----- helpers ----------------------------------------------------------------

/// Every basic entry of one item with its displacement.
fn entries(t: &Datatype) -> Vec<(Basic, i64)> {
    let mut v = Vec::new();
    t.for_each_entry(|b, d| {
        v.push((b, d));
        ControlFlow::<()>::Continue(())
    });
    v
}

/// `T::NEEDS_VALIDATION`, read at run time.
fn needs_validation<T: MpiType>() -> bool {
    T::NEEDS_VALIDATION
}

fn b(basic: Basic) -> Datatype {
    Datatype::basic(basic)
}

fn array(n: i64, t: &Datatype) -> Datatype {
    Datatype::contiguous(n, t).unwrap()
}

/// `MPI_Type_create_struct` of one block per field, resized to `T`'s size.
fn hand_struct<T>(offsets: &[usize], types: &[Datatype]) -> Datatype {
    let ones = vec![1; types.len()];
    let disps: Vec<i64> = offsets.iter().map(|&o| o as i64).collect();
    let s = Datatype::structure(&ones, &disps, types).unwrap();
    Datatype::resized(0, size_of::<T>() as i64, &s).unwrap()
}

/// The derived datatype of `T` has the same typemap, bounds and signature as
/// `hand`, lb 0 and extent `size_of::<T>()`.
fn assert_same_layout<T: MpiType>(hand: &Datatype) {
    let name = std::any::type_name::<T>();
    let d = T::datatype();
    assert_eq!(d.lb(), 0, "{name}");
    assert_eq!(d.extent() as usize, size_of::<T>(), "{name}");
    assert_eq!(d.size(), hand.size(), "{name}");
    assert_eq!(d.lb(), hand.lb(), "{name}");
    assert_eq!(d.ub(), hand.ub(), "{name}");
    assert_eq!(d.extent(), hand.extent(), "{name}");
    assert_eq!(d.true_lb(), hand.true_lb(), "{name}");
    assert_eq!(d.true_extent(), hand.true_extent(), "{name}");
    assert_eq!(d.num_elements(), hand.num_elements(), "{name}");
    assert_eq!(d.signature(), hand.signature(), "{name}");
    assert_eq!(entries(&d), entries(hand), "{name}");
    // Cached: the same handle every time.
    assert!(Datatype::ptr_eq(&d, &T::datatype()), "{name}");
}

/// The memory image of values, field by field: `(offset, bytes)` of each
/// basic field in typemap order.
type Fields = Vec<(usize, Vec<u8>)>;

/// Packs `values` with `mpx::pack` and checks the bytes are the fields'
/// bytes in order; packs a memory image of the same values (padding filled
/// with 0xAA) through `hand` and checks it gives the same bytes; unpacks the
/// bytes back and checks the values. Returns the packed bytes.
fn check_pack<T: MpiType + PartialEq + Debug>(
    values: &[T],
    hand: &Datatype,
    fields: impl Fn(&T) -> Fields,
    fill: T,
) -> Vec<u8> {
    let name = std::any::type_name::<T>();
    let d = T::datatype();
    let mut packed = vec![0u8; d.pack_size(values.len() as u64).unwrap()];
    let mut pos = 0;
    mpx::pack(values, &mut packed, &mut pos).unwrap();
    assert_eq!(pos, packed.len(), "{name}");

    let mut expected = Vec::new();
    let mut image = vec![0xAAu8; size_of_val(values)];
    for (i, v) in values.iter().enumerate() {
        for (off, bytes) in fields(v) {
            expected.extend_from_slice(&bytes);
            let at = i * size_of::<T>() + off;
            image[at..at + bytes.len()].copy_from_slice(&bytes);
        }
    }
    assert_eq!(packed, expected, "{name}: packed bytes are the fields' bytes in order");
    let by_hand = hand.pack_to_vec(Region::new(&image), values.len() as u64).unwrap();
    assert_eq!(packed, by_hand, "{name}: same bytes as the hand-built type");

    let mut back = vec![fill; values.len()];
    let mut pos = 0;
    mpx::unpack(&packed, &mut pos, &mut back).unwrap();
    assert_eq!(pos, packed.len(), "{name}");
    assert_eq!(back, values, "{name}: round trip");
    packed
}

/// Unpacking `bytes` into `T`s fails with `InvalidValue` at `item` and
/// leaves the destination unchanged.
fn assert_rejected<T: MpiType + PartialEq + Debug>(bytes: &[u8], fill: T, count: usize, item: usize) {
    let mut dst = vec![fill; count];
    let err = mpx::unpack(bytes, &mut 0, &mut dst).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::InvalidValue { item: i, .. } if *i == item), "{err:?}");
    assert!(dst.iter().all(|v| *v == fill), "destination changed");
}

fn ne<const N: usize>(b: [u8; N]) -> Vec<u8> {
    b.to_vec()
}

// ----- nested structs ---------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Default, MpiType)]
#[repr(C)]
struct Inner {
    a: u8,
    b: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Default, mpx::MpiType)]
#[repr(C)]
struct Outer {
    tag: u16,
    inner: Inner,
    arr: [i32; 3],
    flag: bool,
}

fn inner_hand() -> Datatype {
    hand_struct::<Inner>(&[offset_of!(Inner, a), offset_of!(Inner, b)], &[b(Basic::Uint8), b(Basic::Double)])
}

fn inner_fields(v: &Inner) -> Fields {
    vec![(offset_of!(Inner, a), ne(v.a.to_ne_bytes())), (offset_of!(Inner, b), ne(v.b.to_ne_bytes()))]
}

#[test]
fn nested_struct() {
    assert_eq!((offset_of!(Outer, inner), offset_of!(Outer, arr), offset_of!(Outer, flag)), (8, 24, 36));
    let hand = hand_struct::<Outer>(
        &[offset_of!(Outer, tag), offset_of!(Outer, inner), offset_of!(Outer, arr), offset_of!(Outer, flag)],
        &[b(Basic::Uint16), inner_hand(), array(3, &b(Basic::Int32)), b(Basic::CBool)],
    );
    assert_same_layout::<Inner>(&inner_hand());
    assert_same_layout::<Outer>(&hand);
    assert_eq!(Outer::datatype().size(), 2 + 9 + 12 + 1);
    assert_eq!(size_of::<Outer>(), 40);
    assert!(!needs_validation::<Inner>());
    assert!(needs_validation::<Outer>(), "a bool field needs validation");

    let values: Vec<Outer> = (0..3)
        .map(|i| Outer {
            tag: 0x100 + i,
            inner: Inner { a: 7 * i as u8, b: f64::from(i) + 0.5 },
            arr: [i as i32, -(i as i32), 1 << (i + 20)],
            flag: i % 2 == 1,
        })
        .collect();
    check_pack(
        &values,
        &hand,
        |v| {
            let mut f = vec![(offset_of!(Outer, tag), ne(v.tag.to_ne_bytes()))];
            f.extend(inner_fields(&v.inner).into_iter().map(|(o, b)| (offset_of!(Outer, inner) + o, b)));
            for (k, x) in v.arr.iter().enumerate() {
                f.push((offset_of!(Outer, arr) + 4 * k, ne(x.to_ne_bytes())));
            }
            f.push((offset_of!(Outer, flag), vec![v.flag as u8]));
            f
        },
        Outer::default(),
    );
}

// ----- arrays -----------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Default, MpiType)]
#[repr(C)]
struct Grid {
    cells: [[u16; 3]; 2],
    id: u32,
    pairs: [Inner; 2],
    last: u8,
}

#[test]
fn arrays_nested_and_of_structs() {
    let hand = hand_struct::<Grid>(
        &[offset_of!(Grid, cells), offset_of!(Grid, id), offset_of!(Grid, pairs), offset_of!(Grid, last)],
        &[array(2, &array(3, &b(Basic::Uint16))), b(Basic::Uint32), array(2, &inner_hand()), b(Basic::Uint8)],
    );
    assert_same_layout::<Grid>(&hand);
    assert_eq!(Grid::datatype().size(), 12 + 4 + 2 * 9 + 1);
    assert!(!needs_validation::<Grid>());

    let values: Vec<Grid> = (0..3u16)
        .map(|i| Grid {
            cells: [[i, i + 1, i + 2], [10 * i, 11 * i, 12 * i]],
            id: 0xdead_0000 + u32::from(i),
            pairs: [Inner { a: i as u8, b: -1.25 }, Inner { a: 200, b: f64::from(i) * 3.0 }],
            last: 0xf0 | i as u8,
        })
        .collect();
    check_pack(
        &values,
        &hand,
        |v| {
            let mut f = Vec::new();
            for (r, row) in v.cells.iter().enumerate() {
                for (c, x) in row.iter().enumerate() {
                    f.push((offset_of!(Grid, cells) + 2 * (3 * r + c), ne(x.to_ne_bytes())));
                }
            }
            f.push((offset_of!(Grid, id), ne(v.id.to_ne_bytes())));
            for (k, p) in v.pairs.iter().enumerate() {
                let base = offset_of!(Grid, pairs) + k * size_of::<Inner>();
                f.extend(inner_fields(p).into_iter().map(|(o, b)| (base + o, b)));
            }
            f.push((offset_of!(Grid, last), vec![v.last]));
            f
        },
        Grid::default(),
    );
}

// ----- generics ---------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Default, MpiType)]
#[repr(C)]
struct Pair<T> {
    count: u8,
    first: T,
    second: T,
}

#[derive(Clone, Copy, Debug, PartialEq, MpiType)]
#[repr(C)]
struct Buffer<T, const N: usize> {
    len: u16,
    data: [T; N],
}

#[test]
fn generic_structs() {
    let hand_u16 = hand_struct::<Pair<u16>>(
        &[offset_of!(Pair<u16>, count), offset_of!(Pair<u16>, first), offset_of!(Pair<u16>, second)],
        &[b(Basic::Uint8), b(Basic::Uint16), b(Basic::Uint16)],
    );
    let hand_f64 = hand_struct::<Pair<f64>>(
        &[offset_of!(Pair<f64>, count), offset_of!(Pair<f64>, first), offset_of!(Pair<f64>, second)],
        &[b(Basic::Uint8), b(Basic::Double), b(Basic::Double)],
    );
    assert_same_layout::<Pair<u16>>(&hand_u16);
    assert_same_layout::<Pair<f64>>(&hand_f64);

    // Two instances, two datatypes.
    let (a, c) = (Pair::<u16>::datatype(), Pair::<f64>::datatype());
    assert!(!Datatype::ptr_eq(&a, &c));
    assert_ne!(a.signature(), c.signature());
    assert_ne!((a.size(), a.extent()), (c.size(), c.extent()));
    assert_eq!((a.size(), a.extent()), (5, 6));
    assert_eq!((c.size(), c.extent()), (17, 24));

    // Validation follows the parameter.
    assert!(!needs_validation::<Pair<u16>>());
    assert!(needs_validation::<Pair<bool>>());
    assert_rejected::<Pair<bool>>(&[3, 1, 0, 3, 1, 2], Pair::default(), 2, 1);

    let values = [
        Pair { count: 1, first: 1.5, second: -2.0 },
        Pair { count: 2, first: 0.0, second: 1e300 },
        Pair { count: 255, first: f64::MAX, second: f64::MIN_POSITIVE },
    ];
    check_pack(
        &values,
        &hand_f64,
        |v| {
            vec![
                (offset_of!(Pair<f64>, count), vec![v.count]),
                (offset_of!(Pair<f64>, first), ne(v.first.to_ne_bytes())),
                (offset_of!(Pair<f64>, second), ne(v.second.to_ne_bytes())),
            ]
        },
        Pair::default(),
    );

    // A generic struct of a generic struct, and a const parameter.
    type B = Buffer<Pair<u16>, 3>;
    let hand = hand_struct::<B>(&[offset_of!(B, len), offset_of!(B, data)], &[b(Basic::Uint16), array(3, &hand_u16)]);
    assert_same_layout::<B>(&hand);
    assert_ne!(Buffer::<u8, 2>::datatype().signature(), Buffer::<u8, 3>::datatype().signature());
    let values = [Buffer { len: 3, data: [Pair { count: 1, first: 2u16, second: 3 }; 3] }; 3];
    check_pack(
        &values,
        &hand,
        |v| {
            let mut f = vec![(offset_of!(B, len), ne(v.len.to_ne_bytes()))];
            for (k, p) in v.data.iter().enumerate() {
                let base = offset_of!(B, data) + k * size_of::<Pair<u16>>();
                f.push((base + offset_of!(Pair<u16>, count), vec![p.count]));
                f.push((base + offset_of!(Pair<u16>, first), ne(p.first.to_ne_bytes())));
                f.push((base + offset_of!(Pair<u16>, second), ne(p.second.to_ne_bytes())));
            }
            f
        },
        Buffer { len: 0, data: [Pair::default(); 3] },
    );
}

// ----- packed -----------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Default, MpiType)]
#[repr(C, packed)]
struct Packed {
    a: u8,
    b: u32,
    c: char,
    d: Inner,
    e: bool,
}

#[test]
fn packed_struct_unaligned_fields() {
    assert_eq!(size_of::<Packed>(), 1 + 4 + 4 + 16 + 1);
    let offs = [
        offset_of!(Packed, a),
        offset_of!(Packed, b),
        offset_of!(Packed, c),
        offset_of!(Packed, d),
        offset_of!(Packed, e),
    ];
    assert_eq!(offs, [0, 1, 5, 9, 25]);
    let hand = hand_struct::<Packed>(
        &offs,
        &[b(Basic::Uint8), b(Basic::Uint32), b(Basic::Uint32), inner_hand(), b(Basic::CBool)],
    );
    assert_same_layout::<Packed>(&hand);
    assert!(needs_validation::<Packed>());

    let values = [
        Packed { a: 1, b: 0x0102_0304, c: 'é', d: Inner { a: 9, b: 2.5 }, e: true },
        Packed { a: 2, b: u32::MAX, c: '\u{10FFFF}', d: Inner { a: 0, b: -0.0 }, e: false },
        Packed { a: 3, b: 7, c: 'z', d: Inner { a: 255, b: 1e-300 }, e: true },
    ];
    let packed = check_pack(
        &values,
        &hand,
        |v| {
            let (b, c, d, e) = (v.b, v.c, v.d, v.e);
            let mut f = vec![(0, vec![v.a]), (1, ne(b.to_ne_bytes())), (5, ne((c as u32).to_ne_bytes()))];
            f.extend(inner_fields(&d).into_iter().map(|(o, b)| (9 + o, b)));
            f.push((25, vec![e as u8]));
            f
        },
        Packed::default(),
    );

    // Invalid char (a surrogate) in the second item, read at an odd offset.
    let item = Packed::datatype().size() as usize;
    let mut bad = packed.clone();
    bad[item + 5..item + 9].copy_from_slice(&0xD800u32.to_ne_bytes());
    assert_rejected::<Packed>(&bad, Packed::default(), 3, 1);
    // Invalid bool in the third.
    let mut bad = packed;
    bad[3 * item - 1] = 2;
    assert_rejected::<Packed>(&bad, Packed::default(), 3, 2);
}

// ----- align(N) ---------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Default, MpiType)]
#[repr(C, align(16))]
struct Aligned {
    x: u32,
    y: u8,
}

#[test]
fn aligned_struct_has_its_padded_extent() {
    assert_eq!(size_of::<Aligned>(), 16);
    let hand = hand_struct::<Aligned>(&[0, 4], &[b(Basic::Uint32), b(Basic::Uint8)]);
    assert_same_layout::<Aligned>(&hand);
    assert_eq!((Aligned::datatype().size(), Aligned::datatype().extent()), (5, 16));
    let values = [Aligned { x: 1, y: 2 }, Aligned { x: 0xffff_ffff, y: 0 }, Aligned { x: 42, y: 43 }];
    check_pack(&values, &hand, |v| vec![(0, ne(v.x.to_ne_bytes())), (4, vec![v.y])], Aligned::default());
}

// ----- tuple structs and newtypes ---------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Default, MpiType)]
#[repr(C)]
struct Tuple(u8, i64, [f32; 2]);

#[test]
fn tuple_struct() {
    let offs = [offset_of!(Tuple, 0), offset_of!(Tuple, 1), offset_of!(Tuple, 2)];
    assert_eq!(offs, [0, 8, 16]);
    let hand = hand_struct::<Tuple>(&offs, &[b(Basic::Uint8), b(Basic::Int64), array(2, &b(Basic::Float))]);
    assert_same_layout::<Tuple>(&hand);
    let values = [Tuple(1, -1, [0.5, 1.5]), Tuple(2, i64::MIN, [f32::NAN.copysign(1.0), 3.0]), Tuple(3, 3, [0.0; 2])];
    // NaN != NaN: compare bytes only for that item, round trip the others.
    let bytes = |v: &Tuple| -> Fields {
        vec![(0, vec![v.0]), (8, ne(v.1.to_ne_bytes())), (16, ne(v.2[0].to_ne_bytes())), (20, ne(v.2[1].to_ne_bytes()))]
    };
    check_pack(&[values[0], values[2]], &hand, bytes, Tuple::default());
    let mut out = vec![0u8; 3 * 17];
    mpx::pack(&values, &mut out, &mut 0).unwrap();
    let expected: Vec<u8> = bytes(&values[1]).into_iter().flat_map(|(_, b)| b).collect();
    assert_eq!(out[17..34], expected[..]);
}

#[derive(Clone, Copy, Debug, PartialEq, Default, MpiType)]
#[repr(transparent)]
struct Meters(f64);

#[derive(Clone, Copy, Debug, PartialEq, MpiType)]
#[repr(transparent)]
struct Id<T> {
    raw: NonZeroU32,
    _kind: PhantomData<T>,
}

#[test]
fn transparent_newtypes() {
    assert_same_layout::<Meters>(&Datatype::double());
    assert_eq!(entries(&Meters::datatype()), [(Basic::Double, 0)]);
    let values = [Meters(1.0), Meters(-2.5), Meters(1e10)];
    check_pack(&values, &Datatype::double(), |v| vec![(0, ne(v.0.to_ne_bytes()))], Meters::default());

    assert_same_layout::<Id<Outer>>(&b(Basic::Uint32));
    // A marker that is no MpiType: a parameter only `PhantomData` names
    // needs none (the typed-id pattern).
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Account;
    assert_same_layout::<Id<Account>>(&b(Basic::Uint32));
    assert!(needs_validation::<Id<Account>>(), "NonZero inside");
    assert!(needs_validation::<Id<u8>>(), "NonZero inside");
    let one = NonZeroU32::new(1).unwrap();
    let ids = [Id::<u8> { raw: NonZeroU32::new(7).unwrap(), _kind: PhantomData }; 3];
    check_pack(
        &ids,
        &b(Basic::Uint32),
        |v| vec![(0, ne(v.raw.get().to_ne_bytes()))],
        Id { raw: one, _kind: PhantomData },
    );
    let mut bytes = vec![0u8; 12];
    bytes[..4].copy_from_slice(&5u32.to_ne_bytes());
    assert_rejected::<Id<u8>>(&bytes, Id { raw: one, _kind: PhantomData }, 3, 1);
}

/// Every shape of field left out of the datatype: `PhantomData` as
/// imported and fully spelled, `()`, and arrays of them.
#[derive(Clone, Copy, Debug, PartialEq, MpiType)]
#[repr(C)]
struct Tagged<T> {
    value: u32,
    _unit: (),
    _marks: [PhantomData<T>; 3],
    _units: [(); 2],
    _full: std::marker::PhantomData<fn() -> T>,
}

#[test]
fn fields_without_bytes_are_left_out() {
    assert_same_layout::<Tagged<u16>>(&b(Basic::Uint32));
    assert_eq!(entries(&Tagged::<u16>::datatype()), [(Basic::Uint32, 0)]);
    let v = Tagged::<u16> { value: 9, _unit: (), _marks: [PhantomData; 3], _units: [(); 2], _full: PhantomData };
    check_pack(&[v; 2], &b(Basic::Uint32), |v| vec![(0, ne(v.value.to_ne_bytes()))], v);
}

// ----- enums ------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, MpiType)]
#[repr(u8)]
enum Color {
    Red = 1,
    Green,
    Blue = 10,
    Black = 0,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, MpiType)]
#[repr(i32)]
enum Sign {
    Negative = -1,
    Zero,
    Positive,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, MpiType)]
#[repr(u16)]
enum Implicit {
    A,
    B,
    C,
}

#[test]
fn enums_map_to_their_repr_and_reject_undeclared_values() {
    assert_same_layout::<Color>(&b(Basic::Uint8));
    assert_same_layout::<Sign>(&b(Basic::Int32));
    assert_same_layout::<Implicit>(&b(Basic::Uint16));
    assert!(needs_validation::<Color>() && needs_validation::<Sign>() && needs_validation::<Implicit>());

    let colors = [Color::Red, Color::Green, Color::Blue, Color::Black];
    let packed = check_pack(&colors, &b(Basic::Uint8), |c| vec![(0, vec![*c as u8])], Color::Red);
    assert_eq!(packed, [1, 2, 10, 0]);
    let signs = [Sign::Negative, Sign::Zero, Sign::Positive];
    let packed = check_pack(&signs, &b(Basic::Int32), |s| vec![(0, ne((*s as i32).to_ne_bytes()))], Sign::Zero);
    assert_eq!(packed, [-1i32, 0, 1].iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<_>>());
    check_pack(
        &[Implicit::C, Implicit::A],
        &b(Basic::Uint16),
        |e| vec![(0, ne((*e as u16).to_ne_bytes()))],
        Implicit::B,
    );

    assert_rejected::<Color>(&[1, 2, 3], Color::Blue, 3, 2);
    assert_rejected::<Color>(&[11], Color::Blue, 1, 0);
    assert_rejected::<Color>(&[255, 1], Color::Blue, 2, 0);
    let bytes: Vec<u8> = [0i32, 2, 1].iter().flat_map(|x| x.to_ne_bytes()).collect();
    assert_rejected::<Sign>(&bytes, Sign::Positive, 3, 1);
    let bytes: Vec<u8> = [-2i32].iter().flat_map(|x| x.to_ne_bytes()).collect();
    assert_rejected::<Sign>(&bytes, Sign::Positive, 1, 0);
    assert_rejected::<Implicit>(&3u16.to_ne_bytes(), Implicit::A, 1, 0);
}

// ----- validation of fields ---------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, MpiType)]
#[repr(C)]
struct Checked {
    on: bool,
    letter: char,
    count: NonZeroU16,
    color: Color,
    value: f32,
}

const CHECKED: Checked = Checked {
    on: true,
    letter: 'x',
    count: match NonZeroU16::new(3) {
        Some(n) => n,
        None => unreachable!(),
    },
    color: Color::Green,
    value: 0.25,
};

#[test]
fn invalid_field_values_are_rejected_and_leave_the_destination_unchanged() {
    assert!(needs_validation::<Checked>());
    let hand = hand_struct::<Checked>(
        &[
            offset_of!(Checked, on),
            offset_of!(Checked, letter),
            offset_of!(Checked, count),
            offset_of!(Checked, color),
            offset_of!(Checked, value),
        ],
        &[b(Basic::CBool), b(Basic::Uint32), b(Basic::Uint16), b(Basic::Uint8), b(Basic::Float)],
    );
    assert_same_layout::<Checked>(&hand);
    let values = [
        CHECKED,
        Checked { on: false, letter: '\0', count: NonZeroU16::MAX, color: Color::Black, value: -1.0 },
        Checked { on: true, letter: '🦀', count: NonZeroU16::MIN, color: Color::Blue, value: 1e30 },
    ];
    let fill = Checked { on: false, letter: 'f', count: NonZeroU16::MAX, color: Color::Red, value: 9.0 };
    let good = check_pack(
        &values,
        &hand,
        |v| {
            vec![
                (offset_of!(Checked, on), vec![v.on as u8]),
                (offset_of!(Checked, letter), ne((v.letter as u32).to_ne_bytes())),
                (offset_of!(Checked, count), ne(v.count.get().to_ne_bytes())),
                (offset_of!(Checked, color), vec![v.color as u8]),
                (offset_of!(Checked, value), ne(v.value.to_ne_bytes())),
            ]
        },
        fill,
    );
    // Packed item: bool @0, char @1..5, u16 @5..7, enum @7, f32 @8..12.
    let item = 12;
    assert_eq!(Checked::datatype().size(), item as u64);
    let corrupt = |index: usize, at: usize, bytes: &[u8]| {
        let mut bad = good.clone();
        bad[index * item + at..index * item + at + bytes.len()].copy_from_slice(bytes);
        assert_rejected::<Checked>(&bad, fill, 3, index);
    };
    corrupt(0, 0, &[2]); // bool
    corrupt(1, 1, &0x11_0000u32.to_ne_bytes()); // char past U+10FFFF
    corrupt(2, 1, &0xDFFFu32.to_ne_bytes()); // surrogate
    corrupt(1, 5, &0u16.to_ne_bytes()); // NonZero
    corrupt(2, 7, &[3]); // undeclared enum value
                         // A bad value in an array field of a nested struct.
    assert_rejected::<[Pair<bool>; 2]>(&[0, 0, 1, 0, 0, 7], [Pair::default(); 2], 1, 0);
}

// ----- odd shapes and the crate attribute ---------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Default, MpiType)]
#[repr(C)]
struct Empty {}

#[derive(Clone, Copy, Debug, PartialEq, Default, MpiType)]
#[repr(C)]
struct Unit;

#[derive(Clone, Copy, Debug, PartialEq, Default, MpiType)]
#[mpx(crate = "mpx_core")]
#[repr(C)]
struct ThroughCore {
    a: u32,
    b: [u8; 3],
}

#[test]
fn empty_structs_and_crate_path() {
    for t in [Empty::datatype(), Unit::datatype()] {
        assert_eq!((t.size(), t.lb(), t.extent()), (0, 0, 0));
    }
    assert!(!needs_validation::<Empty>());
    let mut out = [];
    mpx::pack(&[Empty {}, Empty {}], &mut out, &mut 0).unwrap();

    let hand = hand_struct::<ThroughCore>(&[0, 4], &[b(Basic::Uint32), array(3, &b(Basic::Uint8))]);
    assert_same_layout::<ThroughCore>(&hand);
    let values = [ThroughCore { a: 1, b: [2, 3, 4] }; 3];
    check_pack(&values, &hand, |v| vec![(0, ne(v.a.to_ne_bytes())), (4, v.b.to_vec())], ThroughCore::default());
}

/// A program's own types may bear the names of std's pointer types: a
/// bare `Box` or `Arc` (std's take a type argument) is the program's type,
/// described by its own datatype.
mod own_types_named_as_std_pointers {
    use super::*;

    /// A box of two corners.
    #[derive(Clone, Copy, Debug, Default, PartialEq, MpiType)]
    #[repr(C)]
    pub struct Box {
        pub lo: [f64; 2],
        pub hi: [f64; 2],
    }

    /// An arc of a circle.
    #[derive(Clone, Copy, Debug, Default, PartialEq, MpiType)]
    #[repr(C)]
    pub struct Arc {
        pub from: f32,
        pub to: f32,
    }

    #[derive(Clone, Copy, Debug, Default, PartialEq, MpiType)]
    #[repr(C)]
    pub struct Cell {
        pub bounds: Box,
        pub edge: Arc,
        pub id: u16,
    }

    #[test]
    fn are_described_by_their_own_datatypes() {
        let hand = hand_struct::<Cell>(
            &[offset_of!(Cell, bounds), offset_of!(Cell, edge), offset_of!(Cell, id)],
            &[Box::datatype(), Arc::datatype(), b(Basic::Uint16)],
        );
        assert_same_layout::<Cell>(&hand);
        assert_eq!(Cell::datatype().size(), 4 * 8 + 2 * 4 + 2);
    }
}

#[test]
fn datatype_is_built_once_across_threads() {
    let handles: Vec<_> = (0..4).map(|_| std::thread::spawn(|| (Outer::datatype(), Pair::<i8>::datatype()))).collect();
    let (o, p) = (Outer::datatype(), Pair::<i8>::datatype());
    for h in handles {
        let (o2, p2) = h.join().unwrap();
        assert!(Datatype::ptr_eq(&o, &o2));
        assert!(Datatype::ptr_eq(&p, &p2));
    }
}

/// Derived code is clean under strict lints in the user's crate.
#[deny(
    warnings,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    unused_unsafe,
    unused_results,
    unused_qualifications,
    trivial_casts,
    trivial_numeric_casts,
    unreachable_pub,
    non_camel_case_types,
    non_upper_case_globals
)]
mod strict {
    use mpx::MpiType;

    /// A struct.
    #[derive(Clone, Copy, MpiType)]
    #[repr(C, packed)]
    pub(crate) struct S<T> {
        /// A field.
        pub(crate) a: u8,
        /// A field.
        pub(crate) b: T,
    }

    /// A tuple struct.
    #[derive(Clone, Copy, MpiType)]
    #[repr(C)]
    pub(crate) struct U(pub(crate) bool, pub(crate) [E; 2]);

    /// An enum.
    #[derive(Clone, Copy, MpiType)]
    #[repr(u64)]
    pub(crate) enum E {
        /// A variant.
        A = 3,
        /// A variant.
        B,
    }

    /// A newtype.
    #[derive(Clone, Copy, MpiType)]
    #[repr(transparent)]
    pub(crate) struct N(pub(crate) S<U>);

    #[test]
    fn strict_lints() {
        assert_eq!(N::datatype().size(), 1 + 1 + 16);
        assert_eq!(E::B as u64, 4);
    }
}

// ----- the crate path cannot redirect the datatype ----------------------------

/// A path given with `#[mpx(crate = "...")]` names where `MpiType` and
/// `Datatype` live, which the trait's signature pins to mpx's own; a
/// module beside them with a `derive_support::cached` of its own (which
/// here would describe the struct as plain bytes, its padding included)
/// is not what the derive calls.
mod lookalike {
    pub use mpx::{Datatype, MpiType};
    pub mod derive_support {
        /// # Safety
        /// None: it ignores `build` and claims every byte is data.
        #[allow(dead_code)] // never called: what the test below shows
        pub unsafe fn cached<T: 'static>(_build: impl FnOnce() -> mpx::Result<mpx::Datatype>) -> mpx::Datatype {
            mpx::Datatype::contiguous(std::mem::size_of::<T>() as i64, &mpx::Datatype::byte()).unwrap()
        }
    }
}

#[derive(Clone, Copy, MpiType)]
#[mpx(crate = "lookalike")]
#[repr(C)]
struct Padded {
    a: u8,
    b: u64,
}

#[derive(Clone, Copy, MpiType)]
#[mpx(crate = "lookalike")]
#[repr(C)]
struct PaddedGeneric<T> {
    a: u8,
    b: T,
}

#[test]
fn a_crate_path_cannot_redirect_the_datatype() {
    for t in [Padded::datatype(), PaddedGeneric::<u64>::datatype()] {
        assert_eq!(t.size(), 9, "the fields' bytes, not the padding");
        assert_eq!(t.extent(), 16);
        assert_eq!(entries(&t), vec![(Basic::Uint8, 0), (Basic::Uint64, 8)]);
    }
    let _ = (Padded { a: 1, b: 2 }.a, Padded { a: 1, b: 2 }.b, PaddedGeneric { a: 1u8, b: 2u64 }.a, PaddedGeneric { a: 1u8, b: 2u64 }.b);
}
