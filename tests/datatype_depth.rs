//! Deeply nested datatypes: every operation works at 100,000 levels on a
//! thread with a 2 MiB stack (nothing recurses over the constructor tree),
//! and a constructor past `Datatype::MAX_DEPTH` is an error, never an abort.

use std::ops::ControlFlow;

use mpx::{Basic, Combiner, Datatype, ErrorKind, Order, Region, RegionMut};

const LEVELS: usize = 100_000;

/// Runs `f` on a thread with a 2 MiB stack, as an application thread might
/// have, and propagates its panics.
fn on_small_stack<F: FnOnce() + Send + 'static>(f: F) {
    std::thread::Builder::new().stack_size(2 << 20).spawn(f).unwrap().join().unwrap();
}

/// `{int at 0; double at 8}`: size 12, extent 16, two runs of different
/// basic types (so external32 converts each).
fn base() -> Datatype {
    Datatype::structure(&[1, 1], &[0, 8], &[Datatype::int(), Datatype::double()]).unwrap()
}

/// One level of a chain: a constructor that keeps the typemap of `t`.
type Level = fn(&Datatype) -> mpx::Result<Datatype>;

const CONTIGUOUS: Level = |t| Datatype::contiguous(1, t);
const VECTOR: Level = |t| Datatype::vector(1, 1, 1, t);
const HVECTOR: Level = |t| Datatype::hvector(1, 1, 0, t);
const RESIZED: Level = |t| Datatype::resized(t.lb(), t.extent(), t);
const DUP: Level = |t| t.dup();
const STRUCT: Level = |t| Datatype::structure(&[1], &[0], std::slice::from_ref(t));
const INDEXED: Level = |t| Datatype::indexed(&[1], &[0], t);
const HINDEXED_BLOCK: Level = |t| Datatype::hindexed_block(1, &[0], t);

/// `levels` applications of `level` (taken in turn from `levels_of`) on `base`.
fn chain(base: &Datatype, levels_of: &[Level], levels: usize) -> Datatype {
    let mut t = base.clone();
    for i in 0..levels {
        t = levels_of[i % levels_of.len()](&t).unwrap_or_else(|e| panic!("level {i}: {e}"));
    }
    t
}

/// Every operation on `deep`, whose typemap is `base`'s, gives `base`'s
/// results.
fn same_as_base(deep: &Datatype, base: &Datatype, top: Combiner) {
    assert_eq!(deep.depth(), base.depth() + LEVELS);
    let deep = deep.clone().commit();

    // Bounds, counts, signatures.
    assert_eq!(
        (deep.size(), deep.lb(), deep.extent(), deep.true_lb(), deep.true_extent(), deep.num_elements()),
        (base.size(), base.lb(), base.extent(), base.true_lb(), base.true_extent(), base.num_elements())
    );
    assert_eq!(deep.signature(), base.signature());
    assert_eq!(deep.signature().hash(), base.signature().hash());
    for (count, elements) in [(3, 0), (3, 1), (3, 5), (3, 6), (3, 7)] {
        assert_eq!(deep.signature_prefix(count, elements), base.signature_prefix(count, elements));
    }
    assert!(deep.signature_prefix(3, 5).is_some());
    for bytes in [0, 4, 12, 20, 36, 37] {
        assert_eq!(deep.get_count(bytes), base.get_count(bytes), "{bytes} bytes");
        assert_eq!(deep.get_elements(bytes), base.get_elements(bytes), "{bytes} bytes");
    }
    assert_eq!(deep.get_elements(20), 3);

    // The typemap.
    let entries = |t: &Datatype| {
        let mut v = Vec::new();
        t.for_each_entry(|b, d| {
            v.push((b, d));
            ControlFlow::<()>::Continue(())
        });
        v
    };
    assert_eq!(entries(&deep), entries(base));
    assert_eq!(entries(&deep), [(Basic::Int, 0), (Basic::Double, 8)]);
    assert!(deep.is_contiguous() == base.is_contiguous());

    // Decoding: one level at a time.
    let env = deep.envelope();
    assert_eq!(env.combiner, top);
    let contents = deep.contents().unwrap();
    assert_eq!(contents.datatypes.len(), 1);
    assert_eq!(contents.datatypes[0].depth(), deep.depth() - 1);
    let text = format!("{deep:?} {contents:?}");
    assert!(text.contains(&format!("{top:?}")), "{text}");

    // Native pack and unpack of three items.
    let mem: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(37)).collect();
    let packed = deep.pack_to_vec(Region::new(&mem), 3).unwrap();
    assert_eq!(packed, base.pack_to_vec(Region::new(&mem), 3).unwrap());
    assert_eq!(packed.len(), 36);
    assert_eq!(&packed[..4], &mem[..4]);
    let mut out = vec![0xa5u8; 48];
    let mut pos = 0;
    deep.unpack_from(&packed, &mut pos, RegionMut::new(&mut out), 3).unwrap();
    assert_eq!(pos, 36);
    for (i, (&o, &m)) in out.iter().zip(&mem).enumerate() {
        let data = matches!(i % 16, 0..=3 | 8..=15);
        assert_eq!(o, if data { m } else { 0xa5 }, "byte {i}");
    }

    // External32 pack and unpack.
    let ints = [7i32, 0, -9, 0, 11, 0];
    let values: Vec<u8> = (0..3)
        .flat_map(|i| {
            let mut item = [0u8; 16];
            item[..4].copy_from_slice(&ints[2 * i].to_ne_bytes());
            item[8..].copy_from_slice(&(i as f64 + 0.5).to_ne_bytes());
            item
        })
        .collect();
    let mut ext = vec![0u8; deep.pack_external_size(3).unwrap()];
    deep.pack_external(Region::new(&values), 3, &mut ext, &mut 0).unwrap();
    let mut ext_base = vec![0u8; ext.len()];
    base.pack_external(Region::new(&values), 3, &mut ext_base, &mut 0).unwrap();
    assert_eq!(ext, ext_base);
    assert_eq!(&ext[..4], &7i32.to_be_bytes());
    assert_eq!(&ext[4..12], &0.5f64.to_be_bytes());
    let mut back = vec![0u8; 48];
    deep.unpack_external(&ext, &mut 0, RegionMut::new(&mut back), 3).unwrap();
    for i in 0..3 {
        assert_eq!(&back[16 * i..16 * i + 4], &values[16 * i..16 * i + 4]);
        assert_eq!(&back[16 * i + 8..16 * i + 16], &values[16 * i + 8..16 * i + 16]);
    }

    // Types built on top of the deep one.
    let pair = Datatype::contiguous(2, &deep).unwrap();
    assert_eq!(pair.size(), 2 * base.size());
    assert_eq!(pair.pack_to_vec(Region::new(&mem), 1).unwrap(), base.pack_to_vec(Region::new(&mem), 2).unwrap());
}

fn check_chain(levels_of: &'static [Level], top: Combiner) {
    on_small_stack(move || {
        let base = base();
        let deep = chain(&base, levels_of, LEVELS);
        same_as_base(&deep, &base, top);
        // Dropping the only handle frees all 100,000 levels.
        drop(deep);
    });
}

#[test]
fn deep_contiguous_chain() {
    check_chain(&[CONTIGUOUS], Combiner::Contiguous);
}

#[test]
fn deep_vector_chain() {
    check_chain(&[VECTOR], Combiner::Vector);
}

#[test]
fn deep_resized_chain() {
    check_chain(&[RESIZED], Combiner::Resized);
}

#[test]
fn deep_dup_chain() {
    check_chain(&[DUP], Combiner::Dup);
}

#[test]
fn deep_struct_chain() {
    check_chain(&[STRUCT], Combiner::Struct);
}

#[test]
fn deep_mixed_chain() {
    // 100,000 is a multiple of 8: the last level is the last of the list.
    check_chain(&[CONTIGUOUS, VECTOR, HVECTOR, RESIZED, DUP, STRUCT, INDEXED, HINDEXED_BLOCK], Combiner::HindexedBlock);
}

#[test]
fn deep_chain_with_shared_levels_drops_only_what_it_owns() {
    on_small_stack(|| {
        let base = base();
        let half = chain(&base, &[CONTIGUOUS], LEVELS / 2);
        let deep = chain(&half, &[STRUCT], LEVELS / 2);
        assert_eq!(deep.depth(), LEVELS + 1);
        drop(deep);
        // The lower half is still alive and usable.
        assert_eq!(half.depth(), LEVELS / 2 + 1);
        let mem = [3u8; 16];
        assert_eq!(half.pack_to_vec(Region::new(&mem), 1).unwrap(), [3u8; 12]);
        drop(half);
    });
}

#[test]
fn dropping_an_uncommitted_deep_chain() {
    on_small_stack(|| {
        let deep = chain(&Datatype::double(), &[CONTIGUOUS, STRUCT], LEVELS);
        assert_eq!(deep.size(), 8);
        drop(deep);
    });
}

#[test]
fn deep_empty_and_subarray_levels() {
    on_small_stack(|| {
        // An empty type nested deep, then used at the bottom of a subarray.
        let empty = chain(&Datatype::contiguous(0, &Datatype::int()).unwrap(), &[CONTIGUOUS, STRUCT], LEVELS);
        assert_eq!((empty.size(), empty.extent(), empty.num_elements()), (0, 0, 0));
        assert_eq!(empty.clone().commit().pack_to_vec(Region::new(&[]), 5).unwrap(), Vec::<u8>::new());
        let deep = chain(&Datatype::int(), &[CONTIGUOUS], LEVELS);
        let sub = Datatype::subarray(&[4, 4], &[2, 2], &[1, 1], Order::C, &deep).unwrap();
        assert!(sub.depth() > LEVELS);
        let mem: Vec<i32> = (0..16).collect();
        let packed = sub.pack_to_vec(Region::of(&mem), 1).unwrap();
        let got: Vec<i32> = packed.chunks(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, [5, 6, 9, 10]);
    });
}

#[test]
fn nesting_past_the_limit_is_an_error() {
    on_small_stack(|| {
        let max = Datatype::MAX_DEPTH;
        assert!(max >= 100_000);
        let deepest = chain(&Datatype::int(), &[CONTIGUOUS, DUP, STRUCT, RESIZED], max);
        assert_eq!(deepest.depth(), max);
        let too_deep = |r: mpx::Result<Datatype>| matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidDatatype(_)));
        for level in [CONTIGUOUS, VECTOR, HVECTOR, RESIZED, DUP, STRUCT, INDEXED, HINDEXED_BLOCK] {
            assert!(too_deep(level(&deepest)));
        }
        // A struct is as deep as its deepest member.
        assert!(too_deep(Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), deepest.clone()])));
        assert!(too_deep(Datatype::subarray(&[4], &[2], &[1], Order::C, &deepest)));
        // The deepest type itself works.
        let deepest = deepest.commit();
        let mem = 5i32.to_ne_bytes();
        assert_eq!(deepest.pack_to_vec(Region::new(&mem), 1).unwrap(), mem);
        // One level less than the limit still takes one more.
        let below = deepest.contents().unwrap().datatypes[0].clone();
        assert_eq!(below.depth(), max - 1);
        assert_eq!(Datatype::contiguous(1, &below).unwrap().depth(), max);
    });
}
