//! The predefined types beyond C's integers and reals: `wchar`, `long
//! double`, the C and Fortran complex types, the Fortran types and the pair
//! types built from them. Layouts are checked against the C layouts Rust
//! computes for the same shapes; packing against the memory it came from;
//! external32 against the big-endian IEEE encodings of the same values.
//! (mpx's predefined types have the layouts of x86-64 Linux.)

#![cfg(all(unix, target_arch = "x86_64"))]

use std::mem::{align_of, offset_of, size_of};
use std::ops::ControlFlow;

use mpx::{Basic, Combiner, Datatype, ErrorKind, Predefined, Region, RegionMut};

/// C's `long double` on x86-64: 16 bytes, aligned to 16.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq)]
struct LongDouble([u8; 16]);

#[repr(C)]
struct Pair<A, B>(A, B);

/// A complex number as C and Fortran lay it out.
#[repr(C)]
struct Cx<T>(T, T);

fn named(name: &str) -> Datatype {
    Datatype::named(name).unwrap_or_else(|| panic!("{name} is not a predefined type"))
}

/// What a predefined type must look like: the layout of the Rust type `X`
/// with the same C layout, alone and after a `char` in a struct.
struct Row {
    name: &'static str,
    size: usize,
    align: usize,
    after_char_offset: usize,
    after_char_extent: usize,
}

fn row<X>(name: &'static str) -> Row {
    Row {
        name,
        size: size_of::<X>(),
        align: align_of::<X>(),
        after_char_offset: offset_of!(Pair<u8, X>, 1),
        after_char_extent: size_of::<Pair<u8, X>>(),
    }
}

/// The new basic types, with gfortran's default kinds for Fortran's.
fn basic_rows() -> Vec<Row> {
    vec![
        row::<libc::wchar_t>("wchar"),
        row::<LongDouble>("long_double"),
        row::<Cx<f32>>("c_float_complex"),
        row::<Cx<f64>>("c_double_complex"),
        row::<Cx<LongDouble>>("c_long_double_complex"),
        row::<i32>("integer"),
        row::<f32>("real"),
        row::<f64>("double_precision"),
        row::<Cx<f32>>("complex"),
        row::<Cx<f64>>("double_complex"),
        row::<i32>("logical"),
        row::<u8>("character"),
    ]
}

/// The new pair types: name, the C layout, and the offset of the second
/// member and the data size.
fn pair_rows() -> Vec<(&'static str, usize, usize, usize)> {
    fn pair<A, B>(name: &'static str) -> (&'static str, usize, usize, usize) {
        (name, size_of::<Pair<A, B>>(), offset_of!(Pair<A, B>, 1), size_of::<A>() + size_of::<B>())
    }
    vec![
        pair::<LongDouble, i32>("long_double_int"),
        pair::<f32, f32>("2real"),
        pair::<f64, f64>("2double_precision"),
        pair::<i32, i32>("2integer"),
    ]
}

fn all_new_names() -> Vec<&'static str> {
    basic_rows().iter().map(|r| r.name).chain(pair_rows().iter().map(|p| p.0)).collect()
}

#[test]
fn basic_types_have_their_c_and_fortran_layouts() {
    for r in basic_rows() {
        let t = named(r.name);
        let b = Basic::from_name(r.name).unwrap();
        assert_eq!(t.as_predefined(), Some(Predefined::Basic(b)), "{}", r.name);
        assert_eq!((t.size(), t.lb(), t.extent()), (r.size as u64, 0, r.size as i64), "{}", r.name);
        assert_eq!((t.true_lb(), t.true_extent()), (0, r.size as i64), "{}", r.name);
        assert_eq!((b.size(), b.align()), (r.size, r.align), "{}", r.name);
        assert_eq!(t.num_elements(), 1, "{}: one element, complex or not", r.name);
        // The alignment shows where a struct places it and how it pads.
        let s = Datatype::structure(&[1, 1], &[0, r.after_char_offset as i64], &[Datatype::char(), t.clone()]).unwrap();
        assert_eq!(s.extent(), r.after_char_extent as i64, "{{char; {}}}", r.name);
        assert_eq!(s.size(), 1 + r.size as u64);
    }
}

#[test]
fn pair_types_are_their_two_members() {
    for (name, extent, second, size) in pair_rows() {
        let t = named(name);
        assert_eq!((t.size(), t.extent(), t.lb()), (size as u64, extent as i64, 0), "{name}");
        assert_eq!(t.num_elements(), 2, "{name}");
        let mut entries = vec![];
        t.for_each_entry(|b, d| {
            entries.push((b, d));
            ControlFlow::<()>::Continue(())
        });
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].1, second as i64, "{name}");
        assert_eq!(entries[0].0.size() + entries[1].0.size(), size, "{name}");
        assert_eq!(t.true_extent(), (second + entries[1].0.size()) as i64, "{name}");
        // The same signature as a struct of the two members.
        let members = Datatype::structure(
            &[1, 1],
            &[0, second as i64],
            &[Datatype::basic(entries[0].0), Datatype::basic(entries[1].0)],
        )
        .unwrap();
        assert_eq!(t.signature(), members.signature(), "{name}");
    }
    assert_eq!(named("2real").signature(), Datatype::contiguous(2, &named("real")).unwrap().signature());
}

#[test]
fn names_decode_and_alias() {
    for name in all_new_names() {
        let t = named(name);
        assert_eq!(t.envelope().combiner, Combiner::Named);
        assert_eq!(t.as_predefined().map(Predefined::name), Some(name));
        assert!(t.contents().is_err(), "a predefined type has no contents");
        let d = Datatype::contiguous(2, &t).unwrap().contents().unwrap();
        assert_eq!(d.datatypes[0].as_predefined().map(Predefined::name), Some(name));
    }
    // MPI_C_COMPLEX is MPI_C_FLOAT_COMPLEX, and decodes under that name.
    let c = named("c_complex");
    assert_eq!(c.as_predefined().map(Predefined::name), Some("c_float_complex"));
    assert!(Datatype::ptr_eq(&c, &named("c_float_complex")));
    assert!(Datatype::named("c_complex_float").is_none());
}

#[test]
fn elements_count_a_complex_once_and_a_pair_twice() {
    for name in all_new_names() {
        let t = named(name);
        let per = t.num_elements();
        let size = t.size();
        assert_eq!(t.get_count(3 * size), Some(3), "{name}");
        assert_eq!(t.get_count(3 * size + 1), (size == 1).then_some(4), "{name}");
        assert_eq!(t.get_elements(3 * size), 3 * per, "{name}");
        // A partial item: a complex number missing its last byte is no
        // element; a pair whose first member arrived is one.
        let first = t.for_each_entry(|b, _| ControlFlow::Break(b.size() as u64)).unwrap();
        assert_eq!(t.get_elements(2 * size + first - 1), 2 * per, "{name}");
        assert_eq!(t.get_elements(2 * size + first), 2 * per + 1, "{name}");
    }
    let z = named("double_complex");
    assert_eq!(Datatype::vector(3, 2, 4, &z).unwrap().num_elements(), 6);
}

#[test]
fn signatures_tell_every_type_apart() {
    let names = all_new_names();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            assert_ne!(named(a).signature(), named(b).signature(), "{a} vs {b}");
        }
    }
    // Matching is by name: same sizes and representations do not match.
    for (new, old) in [("integer", "int"), ("real", "float"), ("double_precision", "double"), ("character", "char"), ("wchar", "int"), ("logical", "int")] {
        assert_eq!(named(new).size(), named(old).size());
        assert_ne!(named(new).signature(), named(old).signature(), "{new} vs {old}");
    }
    // A complex number is not its two components.
    for (z, part) in [("c_float_complex", "float"), ("c_double_complex", "double"), ("c_long_double_complex", "long_double"), ("complex", "real"), ("double_complex", "double_precision")] {
        let two = Datatype::contiguous(2, &named(part)).unwrap();
        assert_eq!(named(z).size(), two.size());
        assert_ne!(named(z).signature(), two.signature(), "{z}");
    }
}

/// Bytes that tell their offset, and then some.
fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt)).collect()
}

#[test]
fn native_packing_copies_every_byte_of_every_entry() {
    for name in all_new_names() {
        let t = named(name);
        // Every other item: a strided layout, not one copy.
        let v = Datatype::vector(3, 1, 2, &t).unwrap();
        let mem = pattern(v.true_extent() as usize, 7);
        let packed = v.pack_to_vec(Region::new(&mem), 1).unwrap();
        let (mut expect, mut data) = (vec![], vec![false; mem.len()]);
        v.for_each_entry(|b, d| {
            let bytes = d as usize..d as usize + b.size();
            expect.extend_from_slice(&mem[bytes.clone()]);
            data[bytes].fill(true);
            ControlFlow::<()>::Continue(())
        });
        assert_eq!(packed, expect, "{name}");
        assert_eq!(packed.len() as u64, 3 * t.size());
        let mut back = vec![0u8; mem.len()];
        v.unpack_from(&packed, &mut 0, RegionMut::new(&mut back), 1).unwrap();
        let kept: Vec<u8> = mem.iter().zip(&data).map(|(&m, &d)| if d { m } else { 0 }).collect();
        assert_eq!(back, kept, "{name}: the entries' bytes and nothing else");
    }
    // A long double's 6 padding bytes travel with it.
    let v = Datatype::vector(2, 1, 2, &named("long_double")).unwrap();
    let mem = pattern(48, 1);
    assert_eq!(v.pack_to_vec(Region::new(&mem), 1).unwrap(), [&mem[..16], &mem[32..48]].concat());
}

fn external32(t: &Datatype, mem: &[u8], count: u64) -> mpx::Result<Vec<u8>> {
    let mut out = vec![0u8; t.pack_external_size(count)?];
    t.pack_external(Region::new(mem), count, &mut out, &mut 0)?;
    Ok(out)
}

fn from_external32(t: &Datatype, data: &[u8], count: u64, len: usize) -> mpx::Result<Vec<u8>> {
    let mut mem = vec![0u8; len];
    t.unpack_external(data, &mut 0, RegionMut::new(&mut mem), count)?;
    Ok(mem)
}

#[test]
fn external32_complex_numbers_are_two_big_endian_components() {
    let (re, im) = (1.25f32, -3.0e-7f32);
    let mem = [re.to_ne_bytes(), im.to_ne_bytes()].concat();
    for name in ["c_float_complex", "complex", "2real"] {
        let t = named(name);
        let ext = external32(&t, &mem, 1).unwrap();
        assert_eq!(ext, [re.to_be_bytes(), im.to_be_bytes()].concat(), "{name}");
        assert_eq!(from_external32(&t, &ext, 1, 8).unwrap(), mem, "{name}");
    }
    let values = [std::f64::consts::E, -0.0, f64::MIN_POSITIVE, 1e300];
    let mem: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    for name in ["c_double_complex", "double_complex", "2double_precision"] {
        let t = named(name);
        let ext = external32(&t, &mem, 2).unwrap();
        assert_eq!(ext, values.iter().flat_map(|v| v.to_be_bytes()).collect::<Vec<_>>(), "{name}");
        assert_eq!(from_external32(&t, &ext, 2, 32).unwrap(), mem, "{name}");
    }
}

#[test]
fn external32_fortran_scalars_are_big_endian() {
    let ints = [-123_456_789i32, 1, 0x0102_0304];
    let mem: Vec<u8> = ints.iter().flat_map(|v| v.to_ne_bytes()).collect();
    for name in ["integer", "logical"] {
        let ext = external32(&named(name), &mem, 3).unwrap();
        assert_eq!(ext, ints.iter().flat_map(|v| v.to_be_bytes()).collect::<Vec<_>>(), "{name}");
        assert_eq!(from_external32(&named(name), &ext, 3, 12).unwrap(), mem, "{name}");
    }
    let ext = external32(&named("2integer"), &mem[..8], 1).unwrap();
    assert_eq!(ext, [ints[0].to_be_bytes(), ints[1].to_be_bytes()].concat());
    let r = [0.1f32, -7.5];
    let mem: Vec<u8> = r.iter().flat_map(|v| v.to_ne_bytes()).collect();
    assert_eq!(external32(&named("real"), &mem, 2).unwrap(), r.iter().flat_map(|v| v.to_be_bytes()).collect::<Vec<_>>());
    let d = [0.1f64, f64::NEG_INFINITY];
    let mem: Vec<u8> = d.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let ext = external32(&named("double_precision"), &mem, 2).unwrap();
    assert_eq!(ext, d.iter().flat_map(|v| v.to_be_bytes()).collect::<Vec<_>>());
    assert_eq!(from_external32(&named("double_precision"), &ext, 2, 16).unwrap(), mem);
    let text = b"HELLO, MPI";
    let ext = external32(&named("character"), text, 10).unwrap();
    assert_eq!(ext, text);
    assert_eq!(from_external32(&named("character"), &ext, 10, 10).unwrap(), text);
}

#[test]
fn external32_wide_characters_are_two_bytes_or_an_error() {
    let t = named("wchar");
    assert_eq!(t.external32_size(), 2);
    let chars = ['A' as i32, 0x20ac, 0xffff, 0];
    let mem: Vec<u8> = chars.iter().flat_map(|c| c.to_ne_bytes()).collect();
    let ext = external32(&t, &mem, 4).unwrap();
    assert_eq!(ext, chars.iter().flat_map(|&c| (c as u16).to_be_bytes()).collect::<Vec<_>>());
    assert_eq!(from_external32(&t, &ext, 4, 16).unwrap(), mem);
    for bad in [0x10000i32, 0x1f600, -1] {
        let mem = [chars[0].to_ne_bytes(), bad.to_ne_bytes()].concat();
        let err = external32(&t, &mem, 2).unwrap_err();
        assert_eq!(err, ErrorKind::Conversion { what: "wchar", representation: "external32" }, "{bad:#x}");
    }
}

// ----- long double ------------------------------------------------------------

const BIAS: u16 = 16383;

/// A native x87 long double from its fields, padding filled with `0xee`.
fn x87(sign: bool, exp: u16, significand: u64) -> [u8; 16] {
    let mut v = [0xee; 16];
    v[..8].copy_from_slice(&significand.to_le_bytes());
    v[8..10].copy_from_slice(&(u16::from(sign) << 15 | exp).to_le_bytes());
    v
}

/// The same value as unpacking writes it: padding zeroed.
fn unpacked(mut v: [u8; 16]) -> [u8; 16] {
    v[10..].fill(0);
    v
}

/// IEEE binary128, big-endian, from its fields.
fn quad(sign: bool, exp: u16, fraction: u128) -> [u8; 16] {
    (u128::from(sign) << 127 | u128::from(exp) << 112 | fraction).to_be_bytes()
}

/// A normal f64 as x87 and as binary128, from its own fields.
fn both(v: f64) -> ([u8; 16], [u8; 16]) {
    let bits = v.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as u16;
    assert!(exp != 0 && exp != 0x7ff);
    let fraction = bits & ((1 << 52) - 1);
    let exp = exp - 1023 + BIAS;
    (x87(v < 0.0, exp, 1 << 63 | fraction << 11), quad(v < 0.0, exp, u128::from(fraction) << 60))
}

#[test]
fn long_double_external32_is_binary128_exactly() {
    let t = named("long_double");
    assert_eq!(t.external32_size(), 16);
    let mut cases: Vec<(&str, [u8; 16], [u8; 16])> = vec![];
    for v in [1.0, -2.5, 0.1, 1e-300, -6.02e23, f64::MAX] {
        let (x, q) = both(v);
        cases.push(("normal", x, q));
    }
    let max_sig = u64::MAX;
    cases.extend([
        ("64 significant bits", x87(false, BIAS + 3, max_sig), quad(false, BIAS + 3, u128::from(max_sig >> 1) << 49)),
        ("largest finite", x87(false, 0x7ffe, max_sig), quad(false, 0x7ffe, u128::from(max_sig >> 1) << 49)),
        ("zero", x87(false, 0, 0), quad(false, 0, 0)),
        ("negative zero", x87(true, 0, 0), quad(true, 0, 0)),
        ("+infinity", x87(false, 0x7fff, 1 << 63), quad(false, 0x7fff, 0)),
        ("-infinity", x87(true, 0x7fff, 1 << 63), quad(true, 0x7fff, 0)),
        ("quiet NaN", x87(false, 0x7fff, 3 << 62), quad(false, 0x7fff, 1 << 111)),
        ("quiet NaN with payload", x87(true, 0x7fff, 3 << 62 | 0xbeef), quad(true, 0x7fff, (1 << 111) | 0xbeef << 49)),
        ("signalling NaN", x87(false, 0x7fff, 1 << 63 | 1), quad(false, 0x7fff, 1 << 49)),
        ("smallest denormal", x87(false, 0, 1), quad(false, 0, 1 << 49)),
        ("largest denormal", x87(true, 0, (1 << 63) - 1), quad(true, 0, ((1 << 63) - 1) << 49)),
        ("smallest normal", x87(false, 1, 1 << 63), quad(false, 1, 0)),
    ]);
    for (what, x, q) in cases {
        let ext = external32(&t, &x, 1).unwrap();
        assert_eq!(ext, q, "{what}");
        assert_eq!(from_external32(&t, &ext, 1, 16).unwrap(), unpacked(x), "{what}");
    }
}

#[test]
fn long_double_pseudo_denormals_convert_to_their_value() {
    // Exponent 0 with the integer bit set reads as 1.f × 2^-16382: the
    // smallest normal exponent, which is what comes back.
    let t = named("long_double");
    let pseudo = x87(false, 0, 1 << 63 | 5);
    let ext = external32(&t, &pseudo, 1).unwrap();
    assert_eq!(ext, quad(false, 1, 5 << 49));
    assert_eq!(from_external32(&t, &ext, 1, 16).unwrap(), unpacked(x87(false, 1, 1 << 63 | 5)));
}

#[test]
fn long_double_encodings_with_no_value_do_not_pack() {
    let t = named("long_double");
    let (one, _) = both(1.0);
    for (what, bad) in [
        ("unnormal", x87(false, BIAS, 1 << 62)),
        ("pseudo-infinity", x87(false, 0x7fff, 0)),
        ("pseudo-NaN", x87(true, 0x7fff, 1 << 62)),
    ] {
        let mem = [one, bad].concat();
        let err = external32(&t, &mem, 2).unwrap_err();
        assert_eq!(err, ErrorKind::Conversion { what: "long_double", representation: "external32" }, "{what}");
        // Natively they are bytes like any other.
        assert_eq!(t.pack_to_vec(Region::new(&mem), 2).unwrap(), mem);
    }
}

#[test]
fn binary128_values_x87_cannot_hold_fail_and_write_nothing() {
    let t = named("long_double");
    let (_, good) = both(3.0);
    for (what, bad) in [
        ("113 significant bits", quad(false, BIAS, 1)),
        ("65 significant bits", quad(true, BIAS + 40, 1 << 47)),
        ("subnormal below x87's denormals", quad(false, 0, 1 << 48)),
        ("smallest subnormal", quad(false, 0, 1)),
        ("NaN payload in the low bits", quad(false, 0x7fff, 1 << 111 | 1)),
        ("signalling NaN x87 would make an infinity", quad(false, 0x7fff, 1)),
    ] {
        let data = [good, good, bad].concat();
        let mut mem = vec![0x5a; 48];
        let err = t.unpack_external(&data, &mut 0, RegionMut::new(&mut mem), 3).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Conversion { what: "long_double", .. }), "{what}: {err:?}");
        assert_eq!(mem, vec![0x5a; 48], "{what}: nothing written");
    }
    // 1 + 2^-63 has 64 significant bits: it fits.
    let ok = quad(false, BIAS, 1 << 49);
    assert_eq!(from_external32(&t, &ok, 1, 16).unwrap(), unpacked(x87(false, BIAS, 1 << 63 | 1)));
}

#[test]
fn long_double_complex_and_pair_round_trip() {
    let (a, qa) = both(-1.5);
    let (b, qb) = both(1e100);
    let z = named("c_long_double_complex");
    assert_eq!((z.size(), z.external32_size(), z.extent()), (32, 32, 32));
    let ext = external32(&z, &[a, b].concat(), 1).unwrap();
    assert_eq!(ext, [qa, qb].concat());
    assert_eq!(from_external32(&z, &ext, 1, 32).unwrap(), [unpacked(a), unpacked(b)].concat());

    let p = named("long_double_int");
    assert_eq!((p.size(), p.external32_size()), (20, 20));
    let mut item = [0u8; 32];
    item[..16].copy_from_slice(&b);
    item[16..20].copy_from_slice(&(-7i32).to_ne_bytes());
    let two = [item, item].concat();
    let ext = external32(&p, &two, 2).unwrap();
    let one = [&qb[..], &(-7i32).to_be_bytes()].concat();
    assert_eq!(ext, [one.clone(), one].concat());
    let back = from_external32(&p, &ext, 2, 64).unwrap();
    for i in 0..2 {
        assert_eq!(back[32 * i..32 * i + 16], unpacked(b));
        assert_eq!(back[32 * i + 16..32 * i + 20], (-7i32).to_ne_bytes());
    }
}
