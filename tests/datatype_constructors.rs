//! Constructors, bounds, markers, decoding and status counting through the
//! public API.

use std::ops::ControlFlow;

use mpx::{consts, Basic, Combiner, Datatype, DistArg, Distribution, ErrorKind, Order, Predefined};

fn entries(t: &Datatype) -> Vec<(Basic, i64)> {
    let mut v = vec![];
    t.for_each_entry(|b, d| {
        v.push((b, d));
        ControlFlow::<()>::Continue(())
    });
    v
}

fn bounds(t: &Datatype) -> (u64, i64, i64, i64, i64) {
    (t.size(), t.lb(), t.ub(), t.true_lb(), t.true_extent())
}

#[test]
fn predefined_types_have_c_sizes() {
    for (name, size, extent) in [
        ("char", 1, 1), ("short", 2, 2), ("int", 4, 4), ("long", 8, 8), ("long_long", 8, 8),
        ("float", 4, 4), ("double", 8, 8), ("c_bool", 1, 1), ("aint", 8, 8), ("packed", 1, 1),
        ("float_int", 8, 8), ("double_int", 12, 16), ("long_int", 12, 16), ("2int", 8, 8), ("short_int", 6, 8),
    ] {
        let t = Datatype::named(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!((t.size(), t.extent()), (size, extent), "{name}");
    }
    assert_eq!(entries(&Datatype::named("short_int").unwrap()), [(Basic::Short, 0), (Basic::Int, 4)]);
    assert_eq!(Datatype::predefined(Predefined::Lb).extent(), 0);
}

#[test]
fn the_standards_marker_example() {
    let lb = Datatype::lb_marker();
    let ub = Datatype::ub_marker();
    let t = Datatype::structure(&[1, 1, 1], &[-3, 0, 6], &[lb.clone(), Datatype::int(), ub.clone()]).unwrap();
    assert_eq!((t.lb(), t.ub(), t.extent()), (-3, 6, 9));
    let two = Datatype::contiguous(2, &t).unwrap();
    assert_eq!(entries(&two), [(Basic::Int, 0), (Basic::Int, 9)]);
    assert_eq!((two.lb(), two.ub()), (-3, 15));
    // Sticky through vector and hvector; resized erases them.
    let v = Datatype::vector(2, 1, 2, &t).unwrap();
    assert_eq!((v.lb(), v.ub()), (-3, 24));
    let r = Datatype::resized(0, 4, &v).unwrap();
    assert_eq!((r.lb(), r.ub(), r.true_lb(), r.true_extent()), (0, 4, 0, 22));
    // Only an lb marker: ub is the data end padded to alignment from that lb.
    let only_lb = Datatype::structure(&[1, 1], &[-1, 0], &[lb, Datatype::double()]).unwrap();
    assert_eq!((only_lb.lb(), only_lb.ub()), (-1, 15));
    // Only markers: true extent 0.
    let only_markers = Datatype::structure(&[1, 1], &[2, 10], &[Datatype::lb_marker(), ub]).unwrap();
    assert_eq!(bounds(&only_markers), (0, 2, 10, 0, 0));
}

#[test]
fn subarray_and_darray_replace_markers_with_the_array_bounds() {
    let r = Datatype::resized(-4, 16, &Datatype::int()).unwrap();
    let s = Datatype::subarray(&[3], &[1], &[1], Order::C, &r).unwrap();
    assert_eq!(bounds(&s), (4, 0, 48, 16, 4));
}

#[test]
fn darray_block_and_cyclic_over_a_grid() {
    // 4x4 array over a 2x2 grid, block x block: rank 3 owns rows 2-3, cols 2-3.
    let d = Datatype::double();
    let blk = [Distribution::Block, Distribution::Block];
    let dflt = [DistArg::Default, DistArg::Default];
    let t = Datatype::darray(4, 3, &[4, 4], &blk, &dflt, &[2, 2], Order::C, &d).unwrap();
    let offsets: Vec<i64> = entries(&t).iter().map(|e| e.1 / 8).collect();
    assert_eq!(offsets, [10, 11, 14, 15]);
    // Fortran order: same ownership, column-major addresses, first index fastest.
    let f = Datatype::darray(4, 1, &[4, 4], &blk, &dflt, &[2, 2], Order::Fortran, &d).unwrap();
    // rank 1 = grid (0, 1): rows 0-1, cols 2-3; (i, j) at i + 4j.
    let offsets: Vec<i64> = entries(&f).iter().map(|e| e.1 / 8).collect();
    assert_eq!(offsets, [8, 9, 12, 13]);
    // Cyclic(1) over 3 processes in one dimension of 7.
    let c = Datatype::darray(3, 1, &[7], &[Distribution::Cyclic], &[DistArg::Default], &[3], Order::C, &d).unwrap();
    assert_eq!(entries(&c).iter().map(|e| e.1 / 8).collect::<Vec<_>>(), [1, 4]);
    assert_eq!(c.extent(), 56);
}

#[test]
fn decoding_round_trips_every_combiner() {
    let d = Datatype::double();
    let s = Datatype::structure(&[1, 2], &[0, 8], &[d.clone(), Datatype::char()]).unwrap();
    let types = vec![
        Datatype::contiguous(3, &s).unwrap(),
        Datatype::vector(2, 3, -4, &s).unwrap(),
        Datatype::hvector(2, 3, 40, &d).unwrap(),
        Datatype::indexed(&[1, 2], &[5, 0], &s).unwrap(),
        Datatype::hindexed(&[1, 2], &[50, 0], &s).unwrap(),
        Datatype::indexed_block(2, &[4, 0], &s).unwrap(),
        Datatype::hindexed_block(2, &[64, 0], &s).unwrap(),
        s.clone(),
        Datatype::subarray(&[4, 5], &[2, 2], &[1, 3], Order::Fortran, &d).unwrap(),
        Datatype::darray(4, 2, &[9, 8], &[Distribution::Cyclic, Distribution::Block], &[DistArg::Size(2), DistArg::Default], &[2, 2], Order::C, &d).unwrap(),
        Datatype::resized(-8, 32, &s).unwrap(),
        s.dup().unwrap(),
    ];
    for t in &types {
        let env = t.envelope();
        let c = t.contents().unwrap();
        assert_eq!((c.integers.len(), c.addresses.len(), c.datatypes.len()), (env.num_integers, env.num_addresses, env.num_datatypes));
        let rebuilt = rebuild(env.combiner, &c.integers, &c.addresses, &c.datatypes);
        assert_eq!(bounds(&rebuilt), bounds(t), "{t:?}");
        assert_eq!(rebuilt.signature(), t.signature());
        assert_eq!(entries(&rebuilt), entries(t));
    }
    assert_eq!(Datatype::double().envelope().combiner, Combiner::Named);
    assert!(matches!(Datatype::double().contents(), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidDatatype(_))));
}

/// Builds a type again from its decoded arguments, as the standard lays them out.
fn rebuild(c: Combiner, i: &[i64], a: &[i64], t: &[Datatype]) -> Datatype {
    let n = i.first().copied().unwrap_or(0) as usize;
    let order = |code| if code == consts::ORDER_C { Order::C } else { Order::Fortran };
    match c {
        Combiner::Contiguous => Datatype::contiguous(i[0], &t[0]),
        Combiner::Vector => Datatype::vector(i[0], i[1], i[2], &t[0]),
        Combiner::Hvector => Datatype::hvector(i[0], i[1], a[0], &t[0]),
        Combiner::Indexed => Datatype::indexed(&i[1..=n], &i[n + 1..], &t[0]),
        Combiner::Hindexed => Datatype::hindexed(&i[1..=n], a, &t[0]),
        Combiner::IndexedBlock => Datatype::indexed_block(i[1], &i[2..], &t[0]),
        Combiner::HindexedBlock => Datatype::hindexed_block(i[1], a, &t[0]),
        Combiner::Struct => Datatype::structure(&i[1..=n], a, t),
        Combiner::Subarray => Datatype::subarray(&i[1..=n], &i[n + 1..=2 * n], &i[2 * n + 1..=3 * n], order(i[3 * n + 1]), &t[0]),
        Combiner::Darray => {
            let n = i[2] as usize;
            let dist = |code| match code {
                consts::DISTRIBUTE_BLOCK => Distribution::Block,
                consts::DISTRIBUTE_CYCLIC => Distribution::Cyclic,
                _ => Distribution::None,
            };
            let darg = |v| if v == consts::DISTRIBUTE_DFLT_DARG { DistArg::Default } else { DistArg::Size(v) };
            let distribs: Vec<_> = i[3 + n..3 + 2 * n].iter().map(|&v| dist(v)).collect();
            let dargs: Vec<_> = i[3 + 2 * n..3 + 3 * n].iter().map(|&v| darg(v)).collect();
            Datatype::darray(i[0], i[1], &i[3..3 + n], &distribs, &dargs, &i[3 + 3 * n..3 + 4 * n], order(i[3 + 4 * n]), &t[0])
        }
        Combiner::Resized => Datatype::resized(a[0], a[1], &t[0]),
        Combiner::Dup => t[0].dup(),
        Combiner::Named => unreachable!(),
    }
    .unwrap()
}

#[test]
fn get_count_and_get_elements_with_partial_items() {
    let t = Datatype::vector(2, 1, 2, &Datatype::named("double_int").unwrap()).unwrap(); // 24 bytes, 4 elements
    assert_eq!(t.get_count(48), Some(2));
    assert_eq!(t.get_elements(48), 8);
    assert_eq!(t.get_count(30), None);
    assert_eq!(t.get_elements(30), 4); // one item and 6 bytes of a double
    assert_eq!(t.get_elements(32), 4 + 1); // one item and a double
    assert_eq!(t.get_elements(24 + 12 + 8), 4 + 3);
    assert_eq!(t.get_elements(3), 0);
}

#[test]
fn signatures_compare_sequences_of_basic_types() {
    let d = Datatype::double();
    let i = Datatype::int();
    let a = Datatype::structure(&[1, 1], &[0, 8], &[d.clone(), i.clone()]).unwrap();
    let b = Datatype::named("double_int").unwrap();
    assert_eq!(a.signature(), b.signature());
    let c = Datatype::structure(&[1, 1], &[0, 8], &[i.clone(), d.clone()]).unwrap();
    assert_ne!(a.signature(), c.signature());
    assert_eq!(Datatype::contiguous(1i64 << 40, &a).unwrap().signature().len(), 2 << 40);
    // byte and char are different basic types.
    assert_ne!(Datatype::byte().signature(), Datatype::char().signature());
}

#[test]
fn huge_types_cost_what_their_constructor_tree_costs() {
    let s = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::char()]).unwrap();
    let huge = Datatype::contiguous(1i64 << 40, &s).unwrap();
    let vec = Datatype::hvector(1 << 16, 3, 1 << 10, &huge).unwrap().commit();
    assert_eq!(vec.size(), 9u64 * 3 * (1 << 56));
    assert_eq!(vec.get_elements(vec.size()), 6 * (1 << 56));
    assert_eq!(vec.get_elements(vec.size() - 1), 6 * (1 << 56) - 1);
    assert!(matches!(Datatype::hvector(1 << 20, 3, 1 << 10, &huge), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    assert!(matches!(Datatype::contiguous(1i64 << 20, &vec), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    // An indexed type with a negative count is an error, not a panic.
    assert!(matches!(Datatype::indexed_block(-2, &[0], &s), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidCount { .. })));
    assert!(Datatype::hindexed(&[i64::MAX], &[0], &s).is_err());
}

/// Constructors take the integer types programs have: the same arguments
/// in `usize`, `u32`, `i32` or `i64` build equal typemaps, and a value
/// beyond `i64` is an error naming it, never a wrapped number.
#[test]
fn constructors_take_any_integer_type_and_refuse_values_beyond_i64() {
    let int = Datatype::int();
    let lens: (usize, u32, i32, i64) = (2, 2, 2, 2);
    let a = Datatype::vector(lens.0, 3usize, 4usize, &int).unwrap();
    let b = Datatype::vector(lens.1, 3u32, 4u32, &int).unwrap();
    let c = Datatype::vector(lens.2, 3, 4, &int).unwrap();
    let d = Datatype::vector(lens.3, 3i64, 4i64, &int).unwrap();
    for t in [&b, &c, &d] {
        assert_eq!((t.size(), t.extent(), t.signature()), (a.size(), a.extent(), a.signature()));
    }
    let offsets: Vec<usize> = vec![0, 8, 16];
    let blocks: [u16; 3] = [1, 2, 1];
    let x = Datatype::indexed(&blocks, &offsets, &int).unwrap();
    let y = Datatype::indexed(&[1i64, 2, 1], &[0i64, 8, 16], &int).unwrap();
    assert_eq!((x.size(), x.extent()), (y.size(), y.extent()));
    let sub = Datatype::subarray(&[4usize, 6], &[2u8, 3], &[1i16, 2], Order::C, &Datatype::double()).unwrap();
    assert_eq!((sub.size(), sub.true_lb()), (48, 64));

    let too_big = u64::MAX;
    let refused = [
        Datatype::contiguous(too_big, &int),
        Datatype::vector(1, too_big, 1, &int),
        Datatype::hvector(1, 1, usize::MAX, &int),
        Datatype::indexed(&[too_big], &[0], &int),
        Datatype::hindexed(&[1], &[too_big], &int),
        Datatype::indexed_block(1, &[u128::MAX], &int),
        Datatype::structure(&[1], &[too_big], std::slice::from_ref(&int)),
        Datatype::resized(0, too_big, &int),
        Datatype::subarray(&[too_big], &[1], &[0], Order::C, &int),
    ];
    for (i, r) in refused.into_iter().enumerate() {
        match r.map_err(mpx::Error::into_kind) {
            Err(ErrorKind::InvalidArgument(why)) => assert!(why.contains("does not fit"), "{i}: {why}"),
            other => panic!("{i}: {other:?}"),
        }
    }
}
