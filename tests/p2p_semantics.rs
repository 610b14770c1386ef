//! Send modes, receive selectors, probes, status, sendrecv, PROC_NULL,
//! communicator contexts and the barrier on the loopback backend.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mpx::prelude::*;

#[macro_use]
mod support;

each_transport! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_send_completes_only_after_the_receive_starts() {
    let posted = Arc::new(AtomicBool::new(false));
    let p = posted.clone();
    launch(2, move |comm| {
        let posted = p.clone();
        async move {
            if comm.rank() == 0 {
                comm.ssend(&[1u8; 4], 1, 0).await?;
                assert!(posted.load(Ordering::SeqCst), "ssend returned before the receive was posted");
            } else {
                // The RTS arrives and sits unmatched for a while.
                comm.probe(0, 0).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                posted.store(true, Ordering::SeqCst);
                comm.recv_into(&mut [0u8; 4], 0, 0).await?;
            }
            Ok(())
        }
    })
    .await
    .unwrap();
}

/// Within the unsolicited credit the receiver grants, a large standard
/// send starts its data with its request and completes before any receive
/// matches it, as an eager one would; the receive still finds it in order,
/// and one too small for it fails with `Truncate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_standard_send_within_the_unsolicited_credit_completes_before_its_receive() {
    let mut opts = options(2);
    opts.engine.eager_threshold = 1024;
    opts.engine.unsolicited_credit = 1 << 20;
    let run = launch_with(opts, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&vec![7u32; 10_000], 1, 0).await?;
            comm.send(&vec![8u32; 100_000], 1, 1).await?;
            comm.send(&vec![9u32; 100_000], 1, 0).await?;
            // Only now does rank 1 start receiving.
            comm.send(&[0u8], 1, 9).await?;
        } else {
            comm.recv_vec::<u8>(0, 9).await?;
            let mut small = vec![0u32; 10];
            let e = comm.recv_into(&mut small, 0, 1).await.unwrap_err();
            assert!(matches!(e.kind(), ErrorKind::Truncate { needed: 400_000, available: 40, message: Some((0, 1)) }), "{e:?}");
            let (first, _) = comm.recv_vec::<u32>(0, 0).await?;
            let (second, _) = comm.recv_vec::<u32>(0, 0).await?;
            assert!(first.len() == 10_000 && first.iter().all(|&x| x == 7));
            assert!(second.len() == 100_000 && second.iter().all(|&x| x == 9));
        }
        Ok(())
    });
    tokio::time::timeout(Duration::from_secs(20), run).await.expect("the sends completed unmatched").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_send_of_a_large_message_waits_for_the_receiver() {
    let mut opts = options(2);
    opts.engine.eager_threshold = 1024;
    opts.engine.unsolicited_credit = 0; // no data sent ahead of a match either
    let received = Arc::new(AtomicBool::new(false));
    let r = received.clone();
    launch_with(opts, move |comm| {
        let received = r.clone();
        async move {
            if comm.rank() == 0 {
                comm.send(&vec![7u32; 10_000], 1, 0).await?;
                assert!(received.load(Ordering::SeqCst), "a 40 KB send completed before the receive was posted");
                comm.send(&[7u32; 10], 1, 1).await?;
            } else {
                comm.probe(0, 0).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                received.store(true, Ordering::SeqCst);
                let (v, st) = comm.recv_vec::<u32>(0, 0).await?;
                assert_eq!((v.len(), st.bytes), (10_000, 40_000));
                assert!(v.iter().all(|&x| x == 7));
                comm.recv_vec::<u32>(0, 1).await?;
            }
            Ok(())
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_send_is_an_error_without_a_posted_receive() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            let early = comm.rsend(&[1i32], 1, 0).await;
            comm.send(&[0u8], 1, 99).await?; // tell rank 1 to post its receive
            comm.recv_vec::<u8>(1, 98).await?; // it is posted
            let ready = comm.rsend(&[2i32], 1, 0).await;
            Ok(vec![format!("{early:?}"), format!("{ready:?}")])
        } else {
            comm.recv_vec::<u8>(0, 99).await?;
            assert!(comm.iprobe(0, 0)?.is_none(), "the early ready message was not delivered");
            let mut got = [0i32];
            let recv = comm.recv_into(&mut got, 0, 0);
            let ack = async {
                tokio::task::yield_now().await;
                comm.send(&[0u8], 0, 98).await
            };
            let (st, _) = futures::join!(recv, ack);
            st?;
            Ok(vec![got[0].to_string()])
        }
    })
    .await
    .unwrap();
    assert_eq!(out[0], ["Err(NotReady)", "Ok(())"]);
    assert_eq!(out[1], ["2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_source_any_tag_probe_and_status() {
    let out = launch(3, |comm| async move {
        match comm.rank() {
            0 => {
                let mut seen = vec![];
                for _ in 0..2 {
                    let st = comm.probe(Any, Any).await?;
                    let probed = (st.source.unwrap(), st.tag.unwrap(), st.bytes);
                    let mut buf = [0u16; 8];
                    let got = comm.recv_into(&mut buf, st.source.unwrap(), st.tag.unwrap()).await?;
                    assert_eq!((got.source.unwrap(), got.tag.unwrap(), got.bytes), probed);
                    assert_eq!(got.count::<u16>(), Some(probed.2 / 2));
                    assert_eq!(got.get_elements(&Datatype::named("uint16_t").unwrap()), probed.2 / 2);
                    assert!(!got.test_cancelled());
                    seen.push(probed);
                }
                seen.sort();
                Ok(seen)
            }
            r => {
                comm.send(&vec![r as u16; r], 0, 10 + r as i32).await?;
                Ok(vec![])
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(out[0], [(1, 11, 2), (2, 12, 4)]);
}

/// A probe waiting in one task is woken by a message its own rank sends
/// itself from another, in every send mode: no frame arrives for such a
/// message, and the probe waited for one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_probe_sees_a_message_its_rank_sends_itself() {
    launch(2, |comm| async move {
        for (tag, mode) in [(1, "standard"), (2, "buffered"), (3, "synchronous"), (4, "large")] {
            let prober = comm.clone();
            let probe = tokio::spawn(async move {
                let me = prober.rank();
                prober.probe(me, tag).await
            });
            tokio::time::sleep(Duration::from_millis(10)).await;
            let me = comm.rank();
            let sent = match mode {
                "standard" => comm.isend(&[7u8; 4], me, tag),
                "buffered" => {
                    comm.buffer_attach(vec![0; 4 + mpx::BSEND_OVERHEAD])?;
                    comm.ibsend(&[7u8; 4], me, tag)
                }
                "synchronous" => comm.issend(&[7u8; 4], me, tag),
                _ => comm.isend(vec![7u8; 1 << 20], me, tag),
            };
            let status = tokio::time::timeout(Duration::from_secs(10), probe).await.expect("the probe was woken").unwrap()?;
            assert_eq!((status.source, status.tag), (Some(me), Some(tag)), "{mode}");
            let mut got = vec![0u8; status.bytes as usize];
            comm.recv_into(&mut got[..], me, tag).await?;
            sent.await?;
            if mode == "buffered" {
                comm.buffer_detach().await?;
            }
        }
        Ok(())
    })
    .await
    .unwrap();
}

/// A send to this rank itself held for want of rendezvous slots joins the
/// queue when a receive frees its slot: a probe waiting for it is woken
/// then, though no frame arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_probe_sees_a_held_send_to_its_own_rank() {
    let mut opts = options(1);
    opts.engine.rndv_slots = 1;
    opts.engine.eager_threshold = 64;
    launch_with(opts, |comm| async move {
        let first = comm.isend(vec![1u8; 1000], 0, 1);
        let second = comm.isend(vec![2u8; 1000], 0, 2); // held: the one slot is taken
        let prober = comm.clone();
        let probe = tokio::spawn(async move { prober.probe(0, 2).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let (got, _) = comm.recv_vec::<u8>(0, 1).await?;
        assert_eq!(got, [1u8; 1000]);
        let status = tokio::time::timeout(Duration::from_secs(10), probe).await.expect("the probe was woken").unwrap()?;
        assert_eq!((status.tag, status.bytes), (Some(2), 1000));
        let (got, _) = comm.recv_vec::<u8>(0, 2).await?;
        assert_eq!(got, [2u8; 1000]);
        first.await?;
        second.await?;
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matched_probe_reserves_the_message() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&[5i64, 6], 1, 3).await?;
            comm.send(&[7i64], 1, 3).await?;
            Ok(vec![])
        } else {
            let m = comm.mprobe(0, 3).await?;
            assert_eq!(m.status().bytes, 16);
            // A concurrent receive cannot steal the probed message.
            let (other, _) = comm.recv_vec::<i64>(0, 3).await?;
            let mut first = [0i64; 2];
            m.recv_into(&mut first).await?;
            // improbe of nothing; dropping an unreceived message gives it back.
            assert!(comm.improbe(0, 4)?.is_none());
            comm.send(&[8i64], 1, 4).await?;
            let dropped = comm.mprobe(1, 4).await?;
            drop(dropped);
            let (again, _) = comm.recv_vec::<i64>(1, 4).await?;
            Ok(vec![first[0], first[1], other[0], again[0]])
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [5, 6, 7, 8]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sendrecv_and_sendrecv_replace_rotate_a_ring() {
    let out = launch(5, |comm| async move {
        let n = comm.size();
        let right = (comm.rank() + 1) % n;
        let left = (comm.rank() + n - 1) % n;
        let mut got = [0usize; 3];
        comm.sendrecv(&[comm.rank(); 3], right, 1, &mut got, left, 1).await?;
        let mut buf = [comm.rank() * 10; 2];
        comm.sendrecv_replace(&mut buf, left, 2, right, 2).await?;
        Ok((got[0], buf[1]))
    })
    .await
    .unwrap();
    for (r, (from_left, from_right)) in out.into_iter().enumerate() {
        assert_eq!(from_left, (r + 4) % 5);
        assert_eq!(from_right, (r + 1) % 5 * 10);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sendrecv_replace_takes_values_and_described_buffers() {
    launch(2, |comm| async move {
        let other = 1 - comm.rank();
        let me = comm.rank() as f64;
        // One value.
        let mut x = me + 0.5;
        comm.sendrecv_replace(&mut x, other, 0, other, 0).await?;
        assert_eq!(x, other as f64 + 0.5);
        // The diagonal of a 3x3 matrix, swapped with the other rank's; the rest stays.
        let diagonal = Datatype::vector(3, 1, 4, &Datatype::double())?;
        let mut m = [me; 9];
        let status = comm.sendrecv_replace(RecvBuf::new(RegionMut::of(&mut m), 1, &diagonal), other, 1, other, 1).await?;
        assert_eq!(status.bytes, 24);
        for (i, v) in m.iter().enumerate() {
            assert_eq!(*v, if i % 4 == 0 { other as f64 } else { me }, "element {i}");
        }
        // A buffer its datatype does not fit is refused before anything is sent.
        let mut short = [0.0f64; 5];
        let refused = comm.sendrecv_replace(RecvBuf::new(RegionMut::of(&mut short), 1, &diagonal), other, 2, other, 2).await;
        assert!(matches!(refused, Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })), "{refused:?}");
        comm.barrier().await?;
        assert!(comm.iprobe(other, 2)?.is_none(), "the refused call sent nothing");
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proc_null_completes_at_once_with_an_empty_status() {
    launch(1, |comm| async move {
        comm.send(&[1u8], PROC_NULL, 0).await?;
        comm.ssend(&[1u8], PROC_NULL, 0).await?;
        comm.rsend(&[1u8], PROC_NULL, 0).await?;
        let mut b = [9u8];
        let st = comm.recv_into(&mut b, PROC_NULL, Any).await?;
        assert_eq!(st, Status::empty());
        assert_eq!((st.source, st.tag, st.bytes, b[0]), (None, None, 0, 9));
        assert_eq!(st.count::<u8>(), Some(0));
        let st = comm.sendrecv(&[1u8], PROC_NULL, 0, &mut b, PROC_NULL, 0).await?;
        assert_eq!(st, Status::empty());
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dup_gives_a_separate_matching_context() {
    let out = launch(2, |comm| async move {
        let lib = comm.dup();
        let lib2 = comm.dup();
        if comm.rank() == 0 {
            lib.send(&[1u8], 1, 0).await?;
            comm.send(&[2u8], 1, 0).await?;
            lib2.send(&[3u8], 1, 0).await?;
            Ok(vec![])
        } else {
            // Receive in the opposite order: each communicator sees only its own.
            let (c, _) = lib2.recv_vec::<u8>(0, 0).await?;
            let (b, _) = comm.recv_vec::<u8>(0, Any).await?;
            let (a, _) = lib.recv_vec::<u8>(Any, Any).await?;
            Ok(vec![a[0], b[0], c[0]])
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn barrier_holds_everyone_until_the_last_arrives() {
    let arrived = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let a = arrived.clone();
    launch(7, move |comm| {
        let arrived = a.clone();
        async move {
            for round in 0..5 {
                if comm.rank() == round {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                arrived.fetch_add(1, Ordering::SeqCst);
                comm.barrier().await?;
                assert!(arrived.load(Ordering::SeqCst) >= (round + 1) * 7, "left barrier {round} early");
                comm.barrier().await?;
            }
            Ok(())
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_receive_is_withdrawn_and_loses_nothing() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.recv_vec::<u8>(1, 1).await?; // wait until rank 1 timed out
            comm.send(&[42u8], 1, 0).await?;
            Ok(0)
        } else {
            let mut b = [0u8];
            let timed_out = tokio::time::timeout(Duration::from_millis(30), comm.recv_into(&mut b, 0, 0)).await;
            assert!(timed_out.is_err());
            comm.send(&[0u8], 0, 1).await?;
            comm.recv_into(&mut b, 0, 0).await?;
            Ok(b[0])
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_matched_probe_keeps_the_senders_order() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&[1u8], 1, 1).await?;
            comm.send(&[2u8], 1, 2).await?;
            // Not completed by a probe that is dropped: only by a real receive.
            comm.ssend(&[3u8], 1, 3).await?;
            Ok(vec![])
        } else {
            comm.probe(0, 2).await?;
            drop(comm.mprobe(0, 2).await?); // taken, then given back
            let (a, _) = comm.recv_vec::<u8>(0, Any).await?;
            let (b, _) = comm.recv_vec::<u8>(0, Any).await?;
            drop(comm.mprobe(0, 3).await?);
            let (c, _) = comm.recv_vec::<u8>(0, 3).await?;
            Ok(vec![a[0], b[0], c[0]])
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [1, 2, 3], "non-overtaking must survive a returned message");
}

/// A message a dropped receive gives back goes to the head of the queue,
/// ahead of a message of another sender that arrived after it (and of its
/// own sender's later ones), as if never taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_given_back_goes_ahead_of_later_arrivals_from_other_senders() {
    let out = launch(3, |comm| async move {
        const DATA: i32 = 1;
        const GO: i32 = 9;
        const DONE: i32 = 8;
        match comm.rank() {
            0 => {
                // Returns once rank 1's receive has matched it.
                comm.ssend(&[1u32], 1, DATA).await?;
                comm.send(&[0u8], 2, GO).await?;
                comm.recv_vec::<u8>(1, GO).await?;
                comm.send(&[2u32], 1, DATA).await?;
                comm.send(&[0u8], 1, DONE).await?;
                Ok(vec![])
            }
            2 => {
                comm.recv_vec::<u8>(0, GO).await?;
                comm.send(&[3u32], 1, DATA).await?;
                comm.send(&[0u8], 1, DONE).await?;
                Ok(vec![])
            }
            _ => {
                let mut first = [0u32];
                let taking = comm.irecv(&mut first[..], Any, DATA); // matches 1, never awaited
                comm.recv_vec::<u8>(2, DONE).await?; // 3 has arrived
                comm.send(&[0u8], 0, GO).await?;
                comm.recv_vec::<u8>(0, DONE).await?; // 2 has arrived
                drop(taking); // gives 1 back
                let mut got = Vec::new();
                for _ in 0..3 {
                    got.push(comm.recv_vec::<u32>(Any, DATA).await?.0[0]);
                }
                Ok(got)
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [1, 3, 2], "the message given back first, then the others as they came");
}
}
