//! Types with no data (size 0) at huge counts: every pack, unpack, size and
//! counting path returns at once with nothing moved, whatever the extent.

use std::ops::ControlFlow;
use std::ptr::NonNull;
use std::sync::mpsc;
use std::time::Duration;

use mpx::{address_of, pack, unpack, Datatype, Region, RegionMut, Signature};

/// Runs `f` on another thread and fails if it has not returned within a
/// few seconds (a loop over `u64::MAX` items would take centuries).
fn promptly<F: FnOnce() + Send + 'static>(what: &str, f: F) {
    let (done, wait) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    match wait.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => handle.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic)
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} did not return"),
    }
}

/// Types of size 0: with extent 0, and with extents that are not 0 (bound
/// markers, resized), and built by several constructors.
fn empty_types() -> Vec<Datatype> {
    let int = Datatype::int();
    let none = Datatype::contiguous(0, &int).unwrap();
    vec![
        none.clone(),
        Datatype::vector(5, 0, 3, &Datatype::double()).unwrap(),
        Datatype::structure(&[0, 0], &[0, 8], &[int.clone(), Datatype::double()]).unwrap(),
        Datatype::structure(&[1, 1], &[-4, 12], &[Datatype::lb_marker(), Datatype::ub_marker()]).unwrap(),
        Datatype::resized(0, 8, &none).unwrap(),
        Datatype::resized(0, -8, &none).unwrap(),
        Datatype::contiguous(1i64 << 40, &Datatype::resized(0, 16, &none).unwrap()).unwrap(),
        Datatype::indexed::<i64, i64>(&[], &[], &int).unwrap(),
    ]
}

#[test]
fn empty_types_have_no_data_and_some_have_an_extent() {
    let types = empty_types();
    assert!(types.iter().all(|t| t.size() == 0 && t.external32_size() == 0 && t.num_elements() == 0));
    let extents: Vec<i64> = types.iter().map(Datatype::extent).collect();
    assert_eq!(extents, [0, 0, 0, 16, 8, -8, 16 << 40, 0]);
}

#[test]
fn packing_huge_counts_of_empty_types_moves_nothing() {
    for (i, t) in empty_types().into_iter().enumerate() {
        promptly(&format!("native pack of type {i}"), move || {
            for count in [u64::MAX, 1 << 62, 12345] {
                assert_eq!(t.pack_size(count).unwrap(), 0);
                let mut out = [7u8; 4];
                let mut pos = 2;
                t.pack_into(Region::new(&[]), count, &mut out, &mut pos).unwrap();
                assert_eq!((pos, out), (2, [7; 4]));
                assert!(t.pack_to_vec(Region::new(&[1, 2, 3]), count).unwrap().is_empty());
            }
        });
    }
}

#[test]
fn unpacking_huge_counts_of_empty_types_moves_nothing() {
    for (i, t) in empty_types().into_iter().enumerate() {
        promptly(&format!("native unpack of type {i}"), move || {
            for count in [u64::MAX, 1 << 62, 12345] {
                let mut mem = [9u8; 8];
                let mut pos = 1;
                t.unpack_from(&[1, 2, 3], &mut pos, RegionMut::new(&mut mem), count).unwrap();
                assert_eq!((pos, mem), (1, [9; 8]));
            }
        });
    }
}

#[test]
fn external32_of_huge_counts_of_empty_types_moves_nothing() {
    for (i, t) in empty_types().into_iter().enumerate() {
        promptly(&format!("external32 of type {i}"), move || {
            for count in [u64::MAX, 1 << 62] {
                assert_eq!(t.pack_external_size(count).unwrap(), 0);
                let mut out = [7u8; 4];
                let mut pos = 4;
                t.pack_external(Region::new(&[]), count, &mut out, &mut pos).unwrap();
                assert_eq!((pos, out), (4, [7; 4]));
                let mut mem = [9u8; 8];
                let mut pos = 0;
                t.unpack_external(&[], &mut pos, RegionMut::new(&mut mem), count).unwrap();
                assert_eq!((pos, mem), (0, [9; 8]));
            }
        });
    }
}

#[test]
fn absolute_addresses_with_huge_counts_of_empty_types() {
    for (i, t) in empty_types().into_iter().enumerate() {
        promptly(&format!("absolute addresses of type {i}"), move || {
            let mut out = [7u8; 2];
            let mut pos = 0;
            // SAFETY: the type has no basic entries, so no address is read
            // or written.
            unsafe { t.pack_from_bottom(u64::MAX, &mut out, &mut pos).unwrap() };
            assert_eq!((pos, out), (0, [7; 2]));
            // SAFETY: as above.
            unsafe { t.unpack_to_bottom(&out, &mut pos, u64::MAX).unwrap() };
            assert_eq!(pos, 0);
        });
    }
    // An empty member at an absolute address next to a real one.
    promptly("absolute addresses of a struct with an empty member", || {
        let x = 5i32;
        let none = Datatype::contiguous(0, &Datatype::double()).unwrap();
        let t = Datatype::structure(&[1, 1i64 << 40], &[address_of(&x), 0], &[Datatype::int(), none]).unwrap();
        let mut out = [0u8; 4];
        // SAFETY: the only basic entry is `x`.
        unsafe { t.pack_from_bottom(1, &mut out, &mut 0).unwrap() };
        assert_eq!(out, 5i32.to_ne_bytes());
    });
}

#[test]
fn counting_and_signatures_of_empty_types() {
    for (i, t) in empty_types().into_iter().enumerate() {
        promptly(&format!("counting type {i}"), move || {
            assert_eq!(t.signature_prefix(u64::MAX, 0), Some(Signature::EMPTY));
            assert_eq!(t.signature_prefix(u64::MAX, 1), None);
            assert_eq!(t.get_count(0), Some(0));
            assert_eq!(t.get_count(4), Some(0), "a type of no data counts 0 items, whatever the bytes");
            assert_eq!(t.get_elements(u64::MAX), 0);
            let mut n = 0;
            t.for_each_entry(|_, _| {
                n += 1;
                ControlFlow::<()>::Continue(())
            });
            assert_eq!(n, 0);
            // Huge counts of it (made extent 0 so the counts fit), nested:
            // still nothing.
            let flat = Datatype::resized(0, 0, &t).unwrap();
            let big = Datatype::contiguous(i64::MAX, &flat).unwrap();
            let bigger = Datatype::vector(i64::MAX, i64::MAX, 1, &big).unwrap().commit();
            assert_eq!((bigger.size(), bigger.num_elements()), (0, 0));
            assert!(bigger.pack_to_vec(Region::new(&[]), u64::MAX).unwrap().is_empty());
        });
    }
}

/// `len` zero-sized values, without touching memory.
fn zst_slice<T>(len: usize) -> &'static mut [T] {
    assert_eq!(std::mem::size_of::<T>(), 0);
    // SAFETY: a slice of zero-sized values needs no memory, only an
    // aligned non-null pointer; any length is valid.
    unsafe { std::slice::from_raw_parts_mut(NonNull::<T>::dangling().as_ptr(), len) }
}

#[test]
fn typed_slices_of_zero_sized_values() {
    promptly("pack of usize::MAX empty arrays", || {
        let values: &[[u8; 0]] = zst_slice(usize::MAX);
        let mut out = [7u8; 1];
        let mut pos = 0;
        pack(values, &mut out, &mut pos).unwrap();
        assert_eq!((pos, out), (0, [7]));
    });
    promptly("unpack of usize::MAX empty arrays", || {
        let values: &mut [[f64; 0]] = zst_slice(usize::MAX);
        let mut pos = 0;
        unpack(&[], &mut pos, values).unwrap();
        assert_eq!(pos, 0);
    });
    promptly("validated unpack of usize::MAX empty arrays", || {
        // `bool` needs validation; an empty array of them has nothing to check.
        let values: &mut [[bool; 0]] = zst_slice(usize::MAX);
        let mut pos = 0;
        unpack(&[], &mut pos, values).unwrap();
        assert_eq!(pos, 0);
    });
    promptly("a huge array of empty arrays", || {
        type Huge = [[bool; 0]; usize::MAX];
        assert_eq!(<Huge as mpx::MpiType>::datatype().size(), 0);
        let values: &mut [Huge] = zst_slice(3);
        unpack(&[], &mut 0, values).unwrap();
    });
}

#[test]
fn sending_huge_counts_of_an_empty_type() {
    promptly("send and receive of u64::MAX empty items", || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(mpx::launch(2, |world| async move {
            let empty = Datatype::resized(0, 8, &Datatype::contiguous(0, &Datatype::int()).unwrap()).unwrap();
            if world.rank() == 0 {
                world.send(mpx::SendBuf::new(Region::new(&[]), u64::MAX, &empty), 1, 3).await?;
            } else {
                let mut mem = [9u8; 4];
                let status = world.recv_into(mpx::RecvBuf::new(RegionMut::new(&mut mem), u64::MAX, &empty), 0, 3).await?;
                assert_eq!(status.get_count(&empty), Some(0));
                assert_eq!(mem, [9; 4]);
            }
            Ok(())
        }))
        .unwrap();
    });
}
