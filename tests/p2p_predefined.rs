//! The complex, long double and Fortran types across the transports:
//! `num_complex` values (alone, in arrays, in derived structs), long
//! doubles, and type matching by name (MPI-1 §3.3.1).

use mpx::prelude::*;
use num_complex::Complex;

#[macro_use]
mod support;

each_transport! {
#[derive(Clone, Copy, Debug, Default, PartialEq, mpx::MpiType)]
#[repr(C)]
struct Wave {
    id: u16,
    amplitude: Complex<f64>,
    harmonics: [Complex<f32>; 3],
}

fn wave(i: u16) -> Wave {
    let f = f32::from(i);
    Wave {
        id: i,
        amplitude: Complex::new(f64::from(i) * 0.5, -f64::from(i)),
        harmonics: [Complex::new(f, 1.0), Complex::new(-f, 2.5), Complex::new(0.25, f * f)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn num_complex_values_arrays_and_structs_round_trip() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            let zs: Vec<Complex<f64>> = (0..500).map(|i| Complex::new(i as f64 / 3.0, -(i as f64))).collect();
            comm.send(&zs, 1, 1).await?;
            comm.send(&[[Complex::new(1.5f32, -0.5); 4]; 2], 1, 2).await?;
            let waves: Vec<Wave> = (0..100).map(wave).collect();
            comm.send(&waves, 1, 3).await?;
            Ok(None)
        } else {
            let mut zs = vec![Complex::<f64>::default(); 500];
            let st = comm.recv_into(&mut zs, 0, 1).await?;
            assert_eq!(st.count::<Complex<f64>>(), Some(500));
            assert_eq!(st.get_elements(&Datatype::named("c_double_complex").unwrap()), 500);
            let mut arrays = [[Complex::<f32>::default(); 4]; 2];
            comm.recv_into(&mut arrays, 0, 2).await?;
            let mut waves = vec![Wave::default(); 100];
            let st = comm.recv_into(&mut waves, 0, 3).await?;
            assert_eq!(st.count::<Wave>(), Some(100));
            Ok(Some((zs, arrays, waves)))
        }
    })
    .await
    .unwrap();
    let (zs, arrays, waves) = out[1].clone().unwrap();
    assert!(zs.iter().enumerate().all(|(i, z)| *z == Complex::new(i as f64 / 3.0, -(i as f64))));
    assert_eq!(arrays, [[Complex::new(1.5, -0.5); 4]; 2]);
    assert_eq!(waves, (0..100).map(wave).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complex_numbers_match_only_the_same_complex_type() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            let z = [Complex::new(1.0f64, 2.0), Complex::new(3.0, 4.0)];
            comm.send(&z, 1, 0).await?;
            comm.send(&z, 1, 1).await?;
            comm.send(&[Complex::new(1.0f32, 2.0)], 1, 2).await?;
            Ok(vec![])
        } else {
            // Two complex numbers are not four doubles...
            let mut parts = [0f64; 4];
            let e1 = comm.recv_into(&mut parts, 0, 0).await.unwrap_err();
            // ...nor Fortran's DOUBLE COMPLEX, of the same layout.
            let mut raw = [0u8; 32];
            let dz = Datatype::named("double_complex").unwrap();
            let e2 = comm.recv_into(RecvBuf::new(RegionMut::new(&mut raw), 2, &dz), 0, 1).await.unwrap_err();
            // MPI_C_COMPLEX is MPI_C_FLOAT_COMPLEX.
            let mut one = [0u8; 8];
            let c = Datatype::named("c_complex").unwrap();
            comm.recv_into(RecvBuf::new(RegionMut::new(&mut one), 1, &c), 0, 2).await?;
            assert_eq!(one[..4], 1.0f32.to_ne_bytes());
            assert_eq!(one[4..], 2.0f32.to_ne_bytes());
            Ok(vec![e1, e2])
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [ErrorKind::TypeMismatch, ErrorKind::TypeMismatch]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fortran_types_match_by_name() {
    let out = launch(2, |comm| async move {
        let character = Datatype::named("character").unwrap();
        let integer = Datatype::named("integer").unwrap();
        if comm.rank() == 0 {
            // Example 3.4: CHARACTER*10 a; five characters of it.
            let a = *b"ABCDEFGHIJ";
            comm.send(SendBuf::new(Region::new(&a), 5, &character), 1, 0).await?;
            comm.send(SendBuf::new(Region::new(&a), 5, &character), 1, 1).await?;
            let n = 42i32.to_ne_bytes();
            comm.send(SendBuf::new(Region::new(&n), 1, &integer), 1, 2).await?;
            comm.send(SendBuf::new(Region::new(&n), 1, &integer), 1, 3).await?;
            Ok((vec![], vec![]))
        } else {
            // ...replace the last five of b.
            let mut b = *b"abcdefghij";
            let st = comm.recv_into(RecvBuf::new(RegionMut::new(&mut b[5..]), 5, &character), 0, 0).await?;
            assert_eq!(st.get_count(&character), Some(5));
            // `char` is another type.
            let mut c = [0u8; 5];
            let e1 = comm.recv_into(RecvBuf::new(RegionMut::new(&mut c), 5, &Datatype::char()), 0, 1).await.unwrap_err();
            let mut n = [0u8; 4];
            comm.recv_into(RecvBuf::new(RegionMut::new(&mut n), 1, &integer), 0, 2).await?;
            assert_eq!(i32::from_ne_bytes(n), 42);
            // An INTEGER is not an `int`, though both are 4 bytes.
            let e2 = comm.recv_into(&mut [0i32], 0, 3).await.unwrap_err();
            Ok((b.to_vec(), vec![e1, e2]))
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1].0, b"abcdeABCDE");
    assert_eq!(out[1].1, [ErrorKind::TypeMismatch, ErrorKind::TypeMismatch]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_doubles_arrive_with_their_value() {
    // 1/3 with x87's 64 significant bits, 2^-16445 (the smallest denormal),
    // -infinity and a quiet NaN with a payload, each in 16 bytes with zero
    // padding: what arrives is what was sent, natively or through binary128.
    let x87 = |sign: u16, exp: u16, significand: u64| {
        let mut v = [0u8; 16];
        v[..8].copy_from_slice(&significand.to_le_bytes());
        v[8..10].copy_from_slice(&(sign << 15 | exp).to_le_bytes());
        v
    };
    let values = [
        x87(0, 16381, 0xaaaa_aaaa_aaaa_aaab),
        x87(0, 0, 1),
        x87(1, 0x7fff, 1 << 63),
        x87(0, 0x7fff, 0xc000_0000_0000_1234),
    ]
    .concat();
    let sent = values.clone();
    let out = launch(2, move |comm| {
        let values = values.clone();
        async move {
            let ld = Datatype::named("long_double").unwrap();
            let pair = Datatype::named("long_double_int").unwrap();
            if comm.rank() == 0 {
                comm.send(SendBuf::new(Region::new(&values), 4, &ld), 1, 0).await?;
                let mut item = values[..32].to_vec();
                item[16..20].copy_from_slice(&(-9i32).to_ne_bytes());
                comm.send(SendBuf::new(Region::new(&item), 1, &pair), 1, 1).await?;
                Ok(vec![])
            } else {
                let mut got = vec![0xffu8; 64];
                let st = comm.recv_into(RecvBuf::new(RegionMut::new(&mut got), 4, &ld), 0, 0).await?;
                assert_eq!(st.get_elements(&ld), 4);
                let mut item = vec![0u8; 32];
                let st = comm.recv_into(RecvBuf::new(RegionMut::new(&mut item), 1, &pair), 0, 1).await?;
                assert_eq!(st.get_elements(&pair), 2);
                assert_eq!(item[..16], values[..16]);
                assert_eq!(item[16..20], (-9i32).to_ne_bytes());
                Ok(got)
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], sent);
}
}
