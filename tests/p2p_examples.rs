//! Examples 3.1 to 3.9 of MPI-1 §3.3–3.5 (shared/seeds/004), with the known
//! defects of their text fixed as shared/seeds/README.md says.

use std::time::Duration;

use mpx::prelude::*;

#[macro_use]
mod support;

each_transport! {
/// Example 3.1: ten reals sent, received into room for fifteen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_1_reals_into_a_larger_buffer() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            let a: Vec<f32> = (0..10).map(|i| i as f32).collect();
            comm.send(&a, 1, 5).await?;
            Ok(None)
        } else {
            let mut b = [0f32; 15];
            let st = comm.recv_into(&mut b, 0, 5).await?;
            assert_eq!(st.count::<f32>(), Some(10));
            Ok(Some(b))
        }
    })
    .await
    .unwrap();
    let b = out[1].unwrap();
    assert_eq!(&b[..10], &(0..10).map(|i| i as f32).collect::<Vec<_>>()[..]);
    assert_eq!(&b[10..], &[0.0; 5]);
}

/// Example 3.2: reals sent, bytes received: a type mismatch, reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_2_real_sent_byte_received_is_an_error() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&[1.5f32; 10], 1, 0).await?;
            Ok(None)
        } else {
            let mut b = [0u8; 40];
            let r = comm.recv_into(RecvBuf::new(RegionMut::new(&mut b), 40, &Datatype::byte()), 0, 0).await;
            assert_eq!(b, [0; 40], "nothing written");
            Ok(Some(r))
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1].clone().unwrap().unwrap_err(), ErrorKind::TypeMismatch);
}

/// Example 3.3: untyped bytes sent and received as bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_3_bytes_match_bytes() {
    let out = launch(2, |comm| async move {
        let byte = Datatype::byte();
        if comm.rank() == 0 {
            let a: Vec<u8> = (0..40).collect();
            comm.send(SendBuf::new(Region::new(&a), 40, &byte), 1, 0).await?;
            Ok(vec![])
        } else {
            let mut b = vec![0u8; 60];
            let st = comm.recv_into(RecvBuf::new(RegionMut::new(&mut b), 60, &byte), 0, 0).await?;
            assert_eq!(st.get_count(&byte), Some(40));
            Ok(b)
        }
    })
    .await
    .unwrap();
    assert_eq!(&out[1][..40], &(0..40).collect::<Vec<u8>>()[..]);
}

/// Example 3.4: characters match characters one for one (five of them land
/// in the second half of the receiver's string).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_4_characters() {
    let out = launch(2, |comm| async move {
        let ch = Datatype::char();
        if comm.rank() == 0 {
            comm.send(SendBuf::new(Region::new(b"helloworld"), 5, &ch), 1, 0).await?;
            Ok(vec![])
        } else {
            let mut b = b"..........".to_vec();
            comm.recv_into(RecvBuf::new(RegionMut::new(&mut b[5..]), 5, &ch), 0, 0).await?;
            Ok(b)
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], b".....hello");
}

/// Example 3.5: two buffered sends are received in order even though the
/// first receive accepts any tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_5_messages_are_non_overtaking() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.buffer_attach(vec![0; 2 * (40 + mpx::BSEND_OVERHEAD)])?;
            comm.bsend(&[1.0f32; 10], 1, 3).await?;
            comm.bsend(&[2.0f32; 10], 1, 3).await?;
            comm.buffer_detach().await?;
            Ok((0.0, 0.0))
        } else {
            let (mut b1, mut b2) = ([0f32; 10], [0f32; 10]);
            comm.recv_into(&mut b1, 0, Any).await?;
            comm.recv_into(&mut b2, 0, 3).await?;
            Ok((b1[0], b2[0]))
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], (1.0, 2.0));
}

/// Example 3.6: a buffered send then a synchronous send, received in the
/// opposite order: progress requires both to complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_6_progress_with_crossed_receives() {
    // Make the buffered message large enough to go by rendezvous too.
    for eager_threshold in [64 * 1024, 16] {
        let mut opts = options(2);
        opts.engine.eager_threshold = eager_threshold;
        let out = launch_with(opts, |comm| async move {
            if comm.rank() == 0 {
                comm.buffer_attach(vec![0; 1024])?;
                comm.bsend(&[1i32; 8], 1, 1).await?;
                comm.ssend(&[2i32; 8], 1, 2).await?;
                comm.buffer_detach().await?;
                Ok((0, 0))
            } else {
                let (mut b1, mut b2) = ([0i32; 8], [0i32; 8]);
                comm.recv_into(&mut b1, 0, 2).await?;
                comm.recv_into(&mut b2, 0, 1).await?;
                Ok((b1[0], b2[0]))
            }
        });
        let out = tokio::time::timeout(Duration::from_secs(10), out).await.expect("no deadlock").unwrap();
        assert_eq!(out[1], (2, 1), "threshold {eager_threshold}");
    }
}

/// Example 3.7: send/receive on one side, receive/send on the other:
/// succeeds even with no buffering at all (synchronous sends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_7_exchange_that_needs_no_buffering() {
    let out = launch(2, |comm| async move {
        let mut got = [0u64; 4];
        if comm.rank() == 0 {
            comm.ssend(&[10u64; 4], 1, 0).await?;
            comm.recv_into(&mut got, 1, 0).await?;
        } else {
            comm.recv_into(&mut got, 0, 0).await?;
            comm.ssend(&[11u64; 4], 0, 0).await?;
        }
        Ok(got[0])
    })
    .await
    .unwrap();
    assert_eq!(out, [11, 10]);
}

/// Example 3.8: both ranks receive first: always deadlocks. Detected with a
/// timeout, not by hanging the suite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_8_receive_first_exchange_deadlocks() {
    let run = launch(2, |comm| async move {
        let other = 1 - comm.rank();
        let mut got = [0u64];
        comm.recv_into(&mut got, other, 0).await?;
        comm.send(&[1u64], other, 0).await?;
        Ok(())
    });
    assert!(tokio::time::timeout(Duration::from_millis(300), run).await.is_err(), "must deadlock");
}

/// Example 3.9: both ranks send first, then receive: completes because the
/// system buffers the messages (eager); with rendezvous only it deadlocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_9_exchange_that_relies_on_buffering() {
    let body = |comm: Comm| async move {
        let other = 1 - comm.rank();
        let mut got = [0f32; 100];
        comm.send(&[comm.rank() as f32; 100], other, 0).await?;
        comm.recv_into(&mut got, other, 0).await?;
        Ok(got[0])
    };
    let out = tokio::time::timeout(Duration::from_secs(10), launch(2, body)).await.expect("buffered").unwrap();
    assert_eq!(out, [1.0, 0.0]);
    let mut unbuffered = options(2);
    unbuffered.engine.eager_threshold = 0;
    unbuffered.engine.unsolicited_credit = 0; // nor data sent ahead of a match
    let run = launch_with(unbuffered, body);
    assert!(tokio::time::timeout(Duration::from_millis(300), run).await.is_err(), "no buffering: deadlock");
}

/// Buffered sends that exhaust the attached buffer fail clearly, and detach
/// waits for the buffered messages. Rendezvous only, with no data sent
/// ahead of a match, so buffered messages hold their space until the
/// receiver matches them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_sends_exhaust_the_attached_buffer() {
    let mut opts = options(2);
    opts.engine.eager_threshold = 0;
    opts.engine.unsolicited_credit = 0;
    let out = launch_with(opts, |comm| async move {
        if comm.rank() == 0 {
            let one = 800 + mpx::BSEND_OVERHEAD;
            assert!(matches!(comm.bsend(&[0u8; 8], 1, 0).await, Err(ref e) if matches!(e.kind(), ErrorKind::BufferExhausted { available: 0, .. })));
            comm.buffer_attach(vec![0; 2 * one + 10])?;
            assert!(matches!(comm.buffer_attach(vec![]), Err(ref e) if matches!(e.kind(), ErrorKind::BufferState(_))));
            comm.bsend(&[1u64; 100], 1, 0).await?;
            comm.bsend(&[2u64; 100], 1, 0).await?;
            let third = comm.bsend(&[3u64; 100], 1, 0).await;
            assert_eq!(third, Err(ErrorKind::BufferExhausted { needed: one as u64, available: 10 }.into()));
            comm.send(&[0u8], 1, 9).await?; // the receiver may start now
            let buffer = comm.buffer_detach().await?;
            assert_eq!(buffer.len(), 2 * one + 10);
            assert!(comm.buffer_detach().await.is_err());
            Ok(vec![])
        } else {
            let mut got = vec![];
            comm.recv_vec::<u8>(0, 9).await?;
            for _ in 0..2 {
                let (v, _) = comm.recv_vec::<u64>(0, 0).await?;
                got.push(v[0]);
            }
            assert!(comm.iprobe(0, 0)?.is_none(), "the refused send sent nothing");
            Ok(got)
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [1, 2]);
}
}
