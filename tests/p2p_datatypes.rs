//! Typed slices, derived datatypes, packed data, type matching and
//! truncation across the loopback backend.

use mpx::prelude::*;
use mpx::{pack, unpack};
use mpx::MpiType;

#[macro_use]
mod support;

each_transport! {
#[derive(Clone, Copy, Debug, Default, PartialEq, MpiType)]
#[repr(C)]
struct Particle {
    id: u32,
    pos: [f64; 3],
    charge: f32,
    alive: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn derived_structs_round_trip() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            let ps: Vec<Particle> =
                (0..1000).map(|i| Particle { id: i, pos: [i as f64, 0.5, -1.0], charge: -1.5, alive: i % 2 == 0 }).collect();
            comm.send(&ps, 1, 7).await?;
            Ok(vec![])
        } else {
            let mut inp = vec![Particle::default(); 1000];
            let st = comm.recv_into(&mut inp, 0, 7).await?;
            assert_eq!(st.count::<Particle>(), Some(1000));
            Ok(inp)
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1][999], Particle { id: 999, pos: [999.0, 0.5, -1.0], charge: -1.5, alive: false });
    assert!(out[1].iter().enumerate().all(|(i, p)| p.id == i as u32 && p.alive == (i % 2 == 0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_sent_with_a_vector_type_received_as_a_row() {
    let out = launch(2, |comm| async move {
        let n = 100;
        if comm.rank() == 0 {
            let matrix: Vec<f64> = (0..n * n).map(|i| i as f64).collect();
            let column = Datatype::vector(n as i64, 1, n as i64, &Datatype::double())?.commit();
            comm.send(SendBuf::new(Region::of(&matrix[3..]), 1, &column), 1, 8).await?;
            Ok(vec![])
        } else {
            let mut row = vec![0f64; n];
            comm.recv_into(&mut row, 0, 8).await?;
            Ok(row)
        }
    })
    .await
    .unwrap();
    let expect: Vec<f64> = (0..100).map(|i| (i * 100 + 3) as f64).collect();
    assert_eq!(out[1], expect);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_messages_match_any_type_both_ways() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            // Sent typed, received as packed then unpacked.
            comm.send(&[1.5f64, 2.5], 1, 0).await?;
            // Made with the pack API, sent as packed, received typed.
            let mut buf = vec![0u8; 12];
            let mut pos = 0;
            pack(&[10u32, 20], &mut buf, &mut pos)?;
            pack(&[30u32], &mut buf, &mut pos)?;
            comm.send(SendBuf::packed(&buf[..pos]), 1, 1).await?;
            Ok(vec![])
        } else {
            let mut raw = vec![0u8; 64];
            let st = comm.recv_into(RecvBuf::packed(&mut raw), 0, 0).await?;
            assert_eq!(st.bytes, 16);
            let mut xs = [0f64; 2];
            unpack(&raw[..16], &mut 0, &mut xs)?;
            let mut ys = [0u32; 3];
            comm.recv_into(&mut ys, 0, 1).await?;
            Ok(vec![xs[0], xs[1], ys[0] as f64, ys[1] as f64, ys[2] as f64])
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [1.5, 2.5, 10.0, 20.0, 30.0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_mismatch_and_truncation_are_errors_that_write_nothing() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&[1i32, 2, 3], 1, 0).await?;
            comm.send(&[1i32, 2, 3], 1, 1).await?;
            comm.send(&[1.0f32, 2.0], 1, 2).await?;
            comm.send(&[1u8, 2], 1, 3).await?;
            Ok(vec![])
        } else {
            let mut small = [0i32; 2];
            let e1 = comm.recv_into(&mut small, 0, 0).await.unwrap_err();
            assert_eq!(small, [0, 0]);
            let mut wrong = [0f32; 3];
            let e2 = comm.recv_into(&mut wrong, 0, 1).await.unwrap_err();
            assert_eq!(wrong, [0.0; 3]);
            // float vs int32 with the same size: still a mismatch.
            let mut ints = [0i32; 2];
            let e3 = comm.recv_into(&mut ints, 0, 2).await.unwrap_err();
            // uint8 data into bool: type mismatch (uint8_t is not c_bool).
            let mut flags = [false; 2];
            let e4 = comm.recv_into(&mut flags, 0, 3).await.unwrap_err();
            Ok(vec![e1, e2, e3, e4])
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1][0], ErrorKind::Truncate { needed: 12, available: 8, message: Some((0, 0)) });
    assert_eq!(&out[1][1..], &[ErrorKind::TypeMismatch, ErrorKind::TypeMismatch, ErrorKind::TypeMismatch]);
}

/// A message of fewer plain values than the buffer holds fills the first
/// ones and leaves the rest as they were; values of another type or a
/// partial value are refused, whatever their byte count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fewer_values_fill_the_front_of_the_buffer() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&[5u64, 6][..], 1, 0).await?;
            comm.send(&[[1u16, 2], [3, 4]][..], 1, 1).await?;
            comm.send(&[1u16, 2, 3, 4][..], 1, 2).await?;
            comm.send(&[9u8, 9, 9][..], 1, 3).await?;
            comm.send(&[7i64][..], 1, 4).await?;
            comm.send(&[1u16, 2, 3][..], 1, 5).await?;
            Ok(vec![])
        } else {
            // Slices: a receive of up to four u64, not of one [u64; 4].
            let mut longs = [u64::MAX; 4];
            let st = comm.recv_into(&mut longs[..], 0, 0).await?;
            assert_eq!((longs, st.bytes, st.get_count(&u64::datatype())), ([5, 6, u64::MAX, u64::MAX], 16, Some(2)));
            // Pairs of u16 and four u16 have the same signature.
            let mut pairs = [[0u16; 2]; 3];
            assert_eq!(comm.recv_into(&mut pairs[..], 0, 1).await?.bytes, 8);
            assert_eq!(pairs, [[1, 2], [3, 4], [0, 0]]);
            let mut pairs = [[0u16; 2]; 3];
            comm.recv_into(&mut pairs[..], 0, 2).await?;
            assert_eq!(pairs, [[1, 2], [3, 4], [0, 0]]);
            // Three bytes are no whole u16s, and no u16s at all.
            let mut shorts = [0u16; 4];
            let odd = comm.recv_into(&mut shorts[..], 0, 3).await.unwrap_err();
            assert_eq!(shorts, [0; 4]);
            // An i64 into u64s: the same size, another type.
            let other = comm.recv_into(&mut longs[..], 0, 4).await.unwrap_err();
            assert_eq!(longs, [5, 6, u64::MAX, u64::MAX]);
            // Three u16 into pairs of u16: one pair and half of the next.
            let mut pairs = [[9u16; 2]; 2];
            let half = comm.recv_into(&mut pairs[..], 0, 5).await?;
            assert_eq!((half.bytes, half.get_count(&<[u16; 2]>::datatype())), (6, None));
            assert_eq!(pairs[0], [1, 2]);
            assert_eq!(pairs[1][0], 3);
            Ok(vec![odd, other])
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [ErrorKind::TypeMismatch, ErrorKind::TypeMismatch]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_messages_and_partial_items() {
    let out = launch(2, |comm| async move {
        let pair = Datatype::named("double_int").unwrap();
        if comm.rank() == 0 {
            // One double_int and a lone double: a partial item.
            let t = Datatype::structure(&[1, 1], &[0, 16], &[pair.clone(), Datatype::double()])?;
            let mut mem = vec![0u8; 24];
            mem[..8].copy_from_slice(&1.5f64.to_ne_bytes());
            mem[8..12].copy_from_slice(&7i32.to_ne_bytes());
            mem[16..24].copy_from_slice(&2.5f64.to_ne_bytes());
            comm.send(SendBuf::new(Region::new(&mem), 1, &t), 1, 0).await?;
            Ok(vec![])
        } else {
            let mut mem = vec![0xffu8; 48];
            let st = comm.recv_into(RecvBuf::new(RegionMut::new(&mut mem), 3, &pair), 0, 0).await?;
            assert_eq!(st.bytes, 20);
            assert_eq!(st.get_count(&pair), None);
            assert_eq!(st.get_elements(&pair), 3);
            Ok(mem)
        }
    })
    .await
    .unwrap();
    let mem = &out[1];
    assert_eq!(&mem[..8], &1.5f64.to_ne_bytes());
    assert_eq!(&mem[8..12], &7i32.to_ne_bytes());
    assert_eq!(&mem[12..16], &[0xff; 4], "padding untouched");
    assert_eq!(&mem[16..24], &2.5f64.to_ne_bytes());
    assert!(mem[24..].iter().all(|&b| b == 0xff), "nothing past the data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_values_are_rejected_on_receive() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            // A c_bool of 7, sent as raw c_bool data.
            let t = Datatype::named("c_bool").unwrap();
            comm.send(SendBuf::new(Region::new(&[1, 7]), 2, &t), 1, 0).await?;
            Ok(None)
        } else {
            let mut flags = [false, false];
            let r = comm.recv_into(&mut flags[..], 0, 0).await;
            assert_eq!(flags, [false, false]);
            Ok(Some(r))
        }
    })
    .await
    .unwrap();
    assert!(matches!(out[1], Some(Err(ref e)) if matches!(e.kind(), ErrorKind::InvalidValue { item: 1, .. })));
}

#[derive(Clone, Copy, Debug, Default, PartialEq, MpiType)]
#[repr(C)]
struct Sample {
    t: f64,
    id: u16, // followed by 6 bytes of padding
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn derived_datatypes_over_typed_structs() {
    let out = launch(2, |comm| async move {
        let every_other = Datatype::vector(3, 1, 2, &Sample::datatype())?;
        if comm.rank() == 0 {
            let samples: Vec<Sample> = (0..6).map(|i| Sample { t: i as f64, id: i }).collect();
            comm.send(SendBuf::typed_with(&samples, 1, &every_other)?, 1, 0).await?;
            // A datatype that would read padding is refused.
            let raw = Datatype::contiguous(16, &Datatype::byte())?;
            let err = SendBuf::typed_with(&samples, 1, &raw).unwrap_err();
            assert!(matches!(err.kind(), ErrorKind::InvalidDatatype(_)), "{err:?}");
            Ok(vec![])
        } else {
            let mut got = vec![Sample::default(); 6];
            comm.recv_into(RecvBuf::typed_with(&mut got, 1, &every_other)?, 0, 0).await?;
            // Types with invalid bit patterns only take their own datatype.
            let mut flags = [false; 4];
            let bools = Datatype::contiguous(4, &Datatype::named("c_bool").unwrap())?;
            assert!(matches!(RecvBuf::typed_with(&mut flags, 1, &bools), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidDatatype(_))));
            Ok(got)
        }
    })
    .await
    .unwrap();
    let got = &out[1];
    assert_eq!(got[0], Sample { t: 0.0, id: 0 });
    assert_eq!(got[1], Sample::default());
    assert_eq!(got[2], Sample { t: 2.0, id: 2 });
    assert_eq!(got[4], Sample { t: 4.0, id: 4 });
}

#[derive(Clone, Copy, Debug, Default, PartialEq, MpiType)]
#[repr(C)]
struct Pair<A, B> {
    a: A,
    b: [B; 2],
}

#[derive(Clone, Copy, Debug, PartialEq, MpiType)]
#[repr(i16)]
enum Phase {
    Solid = -1,
    Liquid = 3,
    Gas,
}

#[derive(Clone, Copy, Debug, PartialEq, MpiType)]
#[repr(C, packed)]
struct Packed {
    tag: u8,
    value: f64,
    phase: Phase,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_enum_and_packed_derives_cross_the_loopback() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&[Pair { a: 1u8, b: [2.5f32, 3.5] }, Pair { a: 9, b: [0.0, -1.0] }], 1, 0).await?;
            comm.send(&[Pair { a: 'x', b: [true, false] }], 1, 1).await?;
            comm.send(&[Packed { tag: 7, value: 0.25, phase: Phase::Gas }; 3], 1, 2).await?;
            // An i16 that is no Phase: sent as raw int16 data.
            let t = Datatype::named("int16_t").unwrap();
            comm.send(SendBuf::new(Region::of(&[3i16, 5]), 2, &t), 1, 3).await?;
            Ok(None)
        } else {
            let mut p1 = [Pair::<u8, f32>::default(); 2];
            comm.recv_into(&mut p1, 0, 0).await?;
            assert_eq!(p1[1], Pair { a: 9, b: [0.0, -1.0] });
            let mut p2 = [Pair { a: 'a', b: [false, false] }];
            comm.recv_into(&mut p2, 0, 1).await?;
            assert_eq!(p2[0], Pair { a: 'x', b: [true, false] });
            let mut packed = [Packed { tag: 0, value: 0.0, phase: Phase::Solid }; 3];
            comm.recv_into(&mut packed, 0, 2).await?;
            assert_eq!(packed[2], Packed { tag: 7, value: 0.25, phase: Phase::Gas });
            let mut phases = [Phase::Solid; 2];
            let r = comm.recv_into(&mut phases[..], 0, 3).await;
            assert_eq!(phases, [Phase::Solid; 2], "nothing written");
            Ok(Some(r))
        }
    })
    .await
    .unwrap();
    assert!(matches!(out[1], Some(Err(ref e)) if matches!(e.kind(), ErrorKind::InvalidValue { item: 1, .. })), "{:?}", out[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_in_external32_are_converted_by_the_receiver() {
    let mut opts = options(2);
    opts.engine.repr = mpx::proto::wire::Repr::External32;
    opts.engine.eager_threshold = 64; // rendezvous too
    let out = mpx::launch_with(opts, |comm| async move {
        let long = Datatype::named("long").unwrap();
        if comm.rank() == 0 {
            let ps: Vec<Particle> = (0..50).map(|i| Particle { id: i, pos: [0.5, 1.5, i as f64], charge: 2.0, alive: true }).collect();
            comm.send(&ps, 1, 0).await?;
            comm.send(&[-7i64, 1 << 40], 1, 1).await?;
            // `long` shrinks to 4 bytes in external32: in range it converts ...
            comm.send(SendBuf::new(Region::of(&[-3i64, 70_000]), 2, &long), 1, 2).await?;
            // ... and out of range it is an error, not a silent truncation.
            let err = comm.send(SendBuf::new(Region::of(&[1i64 << 40]), 1, &long), 1, 3).await.unwrap_err();
            assert!(matches!(err.kind(), ErrorKind::Conversion { what: "long", .. }));
            Ok(vec![])
        } else {
            let mut ps = vec![Particle::default(); 50];
            let st = comm.recv_into(&mut ps, 0, 0).await?;
            assert_eq!(st.count::<Particle>(), Some(50));
            assert_eq!(ps[49], Particle { id: 49, pos: [0.5, 1.5, 49.0], charge: 2.0, alive: true });
            let (xs, _) = comm.recv_vec::<i64>(0, 1).await?;
            assert_eq!(xs, [-7, 1 << 40]);
            let mut longs = [0i64; 2];
            let st = comm.recv_into(RecvBuf::new(RegionMut::of(&mut longs), 2, &long), 0, 2).await?;
            assert_eq!((st.bytes, st.get_count(&long)), (16, Some(2)), "the status counts native bytes");
            Ok(longs.to_vec())
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [-3, 70_000]);
}
}
