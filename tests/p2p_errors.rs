//! Bad arguments and dead peers give clear errors, never panics or hangs.

use std::time::Duration;

use mpx::prelude::*;

#[macro_use]
mod support;

each_transport! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_ranks_tags_and_counts() {
    launch(2, |comm| async move {
        assert_eq!(comm.send(&[1u8], 2, 0).await, Err(ErrorKind::InvalidRank { rank: 2, size: 2 }.into()));
        assert_eq!(comm.send(&[1u8], usize::MAX, 0).await, Err(ErrorKind::InvalidRank { rank: usize::MAX, size: 2 }.into()));
        assert!(matches!(comm.recv_vec::<u8>(5, 0).await, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidRank { .. })));
        assert_eq!(comm.send(&[1u8], 0, -3).await, Err(ErrorKind::InvalidTag(-3).into()));
        assert!(matches!(comm.recv_vec::<u8>(0, -1).await, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidTag(-1))));
        assert!(matches!(comm.iprobe(0, -7), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidTag(-7))));
        assert!(matches!(comm.recv_vec::<u8>(0, i32::MIN).await, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidTag(i32::MIN))));
        // A receive buffer that does not hold `count` items.
        let mut small = [0u8; 4];
        let t = Datatype::contiguous(8, &Datatype::byte())?;
        let r = comm.recv_into(RecvBuf::new(RegionMut::new(&mut small), 1, &t), PROC_NULL, 0).await;
        assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })), "checked before anything is posted");
        let send = comm.send(SendBuf::new(Region::new(&small), 1, &t), 1 - comm.rank(), 0).await;
        assert!(matches!(send, Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })));
        // A receive whose typemap writes a byte twice (MPI: erroneous), and
        // sending from one (reading a byte twice is fine).
        let twice = Datatype::indexed(&[2, 1], &[0, 1], &u8::datatype())?;
        let r = comm.recv_into(RecvBuf::new(RegionMut::new(&mut small), 1, &twice), 1 - comm.rank(), 0).await;
        assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::Overlap { .. })), "checked before anything is posted: {r:?}");
        let other = 1 - comm.rank();
        let (sent, got) = tokio::join!(comm.send(SendBuf::new(Region::new(&[1, 2, 3]), 1, &twice), other, 9), comm.recv::<[u8; 3]>(other, 9));
        sent?;
        assert_eq!(got?.0, [1, 2, 2]);
        Ok(())
    })
    .await
    .unwrap();
}

/// A synchronous send whose message the receiver took with a matching
/// probe and then ended without receiving (its handle leaked) fails,
/// rather than wait for the handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_send_probed_by_a_rank_that_ends_fails() {
    let run = launch(2, |comm| async move {
        if comm.rank() == 1 {
            let message = comm.mprobe(0, 0).await?;
            std::mem::forget(message);
            return Ok(None);
        }
        Ok(Some(comm.ssend(&[1u8, 2], 1, 0).await))
    });
    let out = tokio::time::timeout(Duration::from_secs(10), run).await.expect("no hang").unwrap();
    let sent = out[0].as_ref().expect("rank 0's outcome");
    assert!(matches!(sent, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_on_a_rank_that_finished_fails_instead_of_hanging() {
    let run = launch(3, |comm| async move {
        match comm.rank() {
            0 => Ok("done".to_string()),
            1 => {
                let r = comm.recv_vec::<u8>(0, 0).await;
                Ok(format!("{r:?}"))
            }
            _ => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let r = comm.ssend(&[1u8], 0, 0).await;
                Ok(format!("{r:?}"))
            }
        }
    });
    let out = tokio::time::timeout(Duration::from_secs(10), run).await.expect("no hang").unwrap();
    assert!(out[1].contains("ProcessFailed { rank: 0"), "{}", out[1]);
    assert!(out[2].contains("ProcessFailed { rank: 0"), "{}", out[2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_rank_fails_the_launch_and_frees_its_peers() {
    let run = launch(2, |comm| async move {
        if comm.rank() == 0 {
            panic!("rank 0 gives up");
        }
        let r = comm.recv_vec::<u8>(0, 0).await;
        assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })));
        Ok(())
    });
    let err = tokio::time::timeout(Duration::from_secs(10), run).await.expect("no hang").unwrap_err();
    // The root cause, not the failure it caused on rank 1.
    assert_eq!(err, ErrorKind::RankPanicked { rank: 0, message: "rank 0 gives up".into() });
}

/// A panic while the launch's closure builds a rank's program (before its
/// task starts) is that rank's panic too: the launch returns it, and the
/// rank's peers learn it failed rather than wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_a_program_is_built_fails_the_launch_and_frees_its_peers() {
    let table = [7u8];
    let run = launch(2, move |comm| {
        let first = table[comm.rank()]; // rank 1 is out of the table
        async move {
            let r = comm.recv_vec::<u8>(1, 0).await;
            assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "{r:?}");
            Ok(first)
        }
    });
    let err = tokio::time::timeout(Duration::from_secs(10), run).await.expect("no hang").unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::RankPanicked { rank: 1, message } if message.contains("index out of bounds")), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_is_reported_before_the_failures_it_causes_on_lower_ranks() {
    let run = launch(3, |comm| async move {
        if comm.rank() == 2 {
            panic!("rank {} gives up", comm.rank());
        }
        // Ranks 0 and 1 fail because of rank 2, and return that error.
        comm.recv_vec::<u8>(2, 0).await?;
        Ok(())
    });
    let err = tokio::time::timeout(Duration::from_secs(10), run).await.expect("no hang").unwrap_err();
    assert_eq!(err, ErrorKind::RankPanicked { rank: 2, message: "rank 2 gives up".into() });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_error_is_the_launch_error() {
    let err = launch(2, |comm| async move {
        if comm.rank() == 1 {
            return Err(ErrorKind::InvalidArgument("rank 1 failed".into()).into());
        }
        Ok(())
    })
    .await
    .unwrap_err();
    assert_eq!(err, ErrorKind::InvalidArgument("rank 1 failed".into()));
    assert!(launch(0, |_comm| async move { Ok(()) }).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_any_source_receives_fail_when_peers_are_gone() {
    let run = launch(2, |comm| async move {
        if comm.rank() == 0 {
            return Ok(vec![]);
        }
        let probe = comm.probe(0, 0).await;
        let mprobe = comm.mprobe(0, 0).await.map(|_| ());
        let any = comm.recv_vec::<u8>(Any, Any).await.map(|_| ());
        let probe_any = comm.probe(Any, Any).await.map(|_| ());
        Ok(vec![probe.map(|_| ()), mprobe, any, probe_any])
    });
    let out = tokio::time::timeout(Duration::from_secs(10), run).await.expect("no hang").unwrap();
    for r in &out[1] {
        assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{r:?}");
    }
}

/// A rank alone: tests of an any-source receive only look (as MPI_Test
/// does), however many, and the receive takes the message the rank sends
/// itself afterwards; waiting on one with no message coming fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tests_of_an_orphaned_any_source_receive_only_look() {
    launch(1, |comm| async move {
        let mut got = 0u32;
        let mut request = comm.irecv(&mut got, Any, 0);
        for _ in 0..5 {
            assert!(request.test().is_none(), "a test only looks");
            tokio::task::yield_now().await;
        }
        comm.send(&5u32, 0, 0).await?;
        let status = request.await?;
        assert_eq!((got, status.source), (5, Some(0)));
        // The tests of a request set only look too.
        let mut set = mpx::RequestSet::new();
        set.push(comm.recv::<u8>(Any, 5));
        for _ in 0..3 {
            assert!(matches!(set.test_some(), mpx::request::Tested::Pending), "a set's test only looks");
            assert!(set.test_all().is_none());
            tokio::task::yield_now().await;
        }
        comm.send(&9u8, 0, 5).await?;
        let (slot, outcome) = set.wait_any().await.expect("a request");
        assert_eq!((slot, outcome?.0), (0, 9));
        // Tested, then waited on with nothing coming: the wait fails it.
        for wait_all in [false, true] {
            let mut set = mpx::RequestSet::new();
            set.push(comm.recv::<u8>(Any, 6));
            assert!(matches!(set.test_some(), mpx::request::Tested::Pending));
            let waited = if wait_all {
                tokio::time::timeout(Duration::from_secs(10), set.wait_all()).await.expect("no hang").pop().map(|(_, o)| o)
            } else {
                tokio::time::timeout(Duration::from_secs(10), set.wait_any()).await.expect("no hang").map(|(_, o)| o)
            };
            assert!(matches!(waited, Some(Err(ref e)) if matches!(e.kind(), ErrorKind::ProcessFailed { .. } | ErrorKind::Finalized)), "{waited:?}");
        }
        let waited = tokio::time::timeout(Duration::from_secs(10), comm.recv::<u32>(Any, 0)).await.expect("no hang");
        assert!(matches!(waited.as_ref().map_err(mpx::Error::kind), Err(ErrorKind::ProcessFailed { .. }) | Err(ErrorKind::Finalized)), "{waited:?}");
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_buffer_too_small_for_its_count_consumes_no_message() {
    launch(1, |comm| async move {
        comm.send(&[1u64, 2], 0, 0).await?;
        let mut small = [0u8; 8];
        let t = Datatype::named("uint64_t").unwrap();
        let r = comm.recv_into(RecvBuf::new(RegionMut::new(&mut small), 2, &t), 0, 0).await;
        assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })));
        let m = comm.mprobe(0, 0).await?;
        let r = m.recv_into(RecvBuf::new(RegionMut::new(&mut small), 2, &t)).await;
        assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })));
        let (v, _) = comm.recv_vec::<u64>(0, 0).await?;
        assert_eq!(v, [1, 2], "the message is still there");
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_counts_are_errors_not_aborts() {
    launch(1, |comm| async move {
        let d = Datatype::double();
        let r = comm.send(SendBuf::new(Region::new(&[0u8; 16]), 1 << 42, &d), 0, 0).await;
        assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })));
        // Zero extent: every item reads the same 8 bytes, but the message would be 8 TiB.
        let flat = Datatype::resized(0, 0, &d)?;
        let r = comm.send(SendBuf::new(Region::new(&[0u8; 8]), 1 << 40, &flat), 0, 0).await;
        assert!(r.is_err());
        Ok(())
    })
    .await
    .unwrap();
}
}

/// One byte of data in a value of 4 KiB: a type whose values take far
/// more memory than their data.
#[derive(MpiType, Clone, Copy, Debug, PartialEq)]
#[repr(C, align(4096))]
struct Page {
    byte: u8,
}

/// A sender's length cannot make `recv_vec` abort the receiver: 64 MiB of
/// bytes received as `Page`s would take 256 GiB, far more than the message
/// (the most it takes is 16 times the message and 1 MiB), so the receive
/// fails with an error and the rank goes on; a message that fits is
/// received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recv_vec_of_values_larger_than_their_data_fails_instead_of_aborting() {
    mpx::launch_with(mpx::LaunchOptions::ranks(2), |comm| async move {
        if comm.rank() == 0 {
            comm.send(&vec![1u8; 64 << 20][..], 1, 0).await?;
            comm.send(&[2u8; 3][..], 1, 1).await?;
        } else {
            let err = comm.recv_vec::<Page>(0, 0).await.expect_err("256 GiB of pages");
            assert!(matches!(err.kind(), mpx::ErrorKind::InvalidArgument(_)), "{err}");
            let (pages, _) = comm.recv_vec::<Page>(0, 1).await?;
            assert_eq!(pages, [Page { byte: 2 }; 3]);
        }
        Ok(())
    })
    .await
    .unwrap();
}
