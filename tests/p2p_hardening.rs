//! Faults a real peer or a careless program can cause: each ends in an
//! error in bounded time, never a hang.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mpx::prelude::*;
use mpx::{launch_with, LaunchOptions};


#[macro_use]
mod support;
use support::{returns, LIMIT};

// On every transport.
each_transport! {
    /// With `max_message` set, a receive without a limit of its own
    /// (`recv_vec`, `irecv_bytes`, a serde receive) keeps no
    /// longer message: it fails with `Truncate`, and the next message still
    /// arrives. A receive into a buffer is bounded by its buffer instead.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn receives_without_a_limit_keep_no_message_above_max_message() {
        let mut opts = options(2);
        opts.engine.max_message = Some(256 << 10);
        /// The error of a receive that must fail (its value, a megabyte, is
        /// not printed if it does not).
        fn refused<T, E: std::fmt::Debug>(r: std::result::Result<T, E>) -> E {
            match r {
                Ok(_) => panic!("a message longer than max_message was received"),
                Err(e) => e,
            }
        }
        let run = launch_with(opts, |comm| async move {
            let big = vec![3u8; 1 << 20];
            if comm.rank() == 0 {
                for tag in 0..4 {
                    comm.send(&big, 1, tag).await?;
                }
                comm.send(Serde(&big), 1, 4).await?;
                comm.send(&[9u8; 100_000][..], 1, 5).await?;
                return Ok(());
            }
            let e = refused(comm.recv_vec::<u8>(0, 0).await);
            assert!(matches!(e.kind(), ErrorKind::Truncate { needed, available, .. } if *needed == 1 << 20 && *available == 256 << 10), "{e:?}");
            let e = refused(comm.recv_vec::<u64>(0, 1).await);
            assert!(matches!(e.kind(), ErrorKind::Truncate { .. }), "{e:?}");
            let e = refused(comm.irecv_bytes(0, 2).await).error;
            assert!(matches!(e.kind(), ErrorKind::Truncate { .. }), "{e:?}");
            let mut buf = vec![0u8; 1 << 20];
            comm.recv_into(&mut buf, 0, 3).await?;
            assert!(buf == big, "a receive into a buffer takes what its buffer holds");
            let e = refused(comm.recv::<Serde<Vec<u8>>>(0, 4).await);
            assert!(matches!(e.kind(), ErrorKind::Truncate { .. }), "{e:?}");
            let (small, _) = comm.recv_vec::<u8>(0, 5).await?;
            assert_eq!(small.len(), 100_000);
            Ok(())
        });
        returns(run).await;
    }

    /// A ready send too large for one frame asks first, and is delivered
    /// when the receive is posted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_ready_send_is_delivered() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 1 {
                let mut buf = vec![0u8; 256 * 1024];
                let r = comm.irecv(&mut buf, 0, 0);
                comm.send(&[1u8], 0, 1).await?; // posted
                let st = r.await?;
                assert_eq!(st.bytes, 256 * 1024);
                assert!(buf.iter().all(|&b| b == 7));
                // Not posted: "not ready", and nothing arrives.
                comm.send(&[2u8], 0, 1).await?;
                comm.recv_vec::<u8>(0, 3).await?;
                assert!(comm.iprobe(0, 2)?.is_none());
                return Ok(());
            }
            comm.recv_vec::<u8>(1, 1).await?;
            comm.rsend(&vec![7u8; 256 * 1024], 1, 0).await?;
            comm.recv_vec::<u8>(1, 1).await?;
            assert_eq!(comm.rsend(&vec![7u8; 256 * 1024], 1, 2).await, Err(ErrorKind::NotReady.into()));
            comm.send(&[3u8], 1, 3).await?;
            Ok(())
        });
        returns(run).await;
    }

    /// A receive that matched a large message and was dropped, on a rank that
    /// then returned: the sender's transfer still completes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn data_streaming_to_a_rank_that_has_finished_completes() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 1 {
                let r = comm.irecv_bytes(0, 0);
                comm.recv_vec::<u8>(0, 1).await?;
                drop(r);
                return Ok(());
            }
            let big = vec![7u8; 64 << 20];
            let req = comm.isend(&big, 1, 0);
            comm.send(&[1u8], 1, 1).await?;
            req.await?;
            Ok(())
        });
        returns(run).await;
    }

    /// A send of a type of a few bytes whose items repeat at one place
    /// billions of times (an `hvector` of stride 0) fails at once in either
    /// representation: its data would not fit in memory, and its external32
    /// description (a run per element) is not built to find that out; a
    /// type with more runs of basic types than a description may hold
    /// fails without building them all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sends_of_types_too_large_to_pack_or_describe_fail_promptly() {
        use mpx::{Datatype, Region, SendBuf};
        let opts = options(2);
        let external = opts.engine.repr == mpx::Repr::External32;
        let run = launch_with(opts, move |comm| async move {
            let pair = Datatype::structure(&[1, 1], &[0, 4], &[Datatype::int(), Datatype::float()])?;
            let buf = [0u8; 8];
            let huge = Datatype::hvector(1i64 << 36, 1, 0, &pair)?;
            let got = comm.send(SendBuf::new(Region::new(&buf), 1, &huge), 1 - comm.rank(), 0).await;
            assert!(matches!(got, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::Overflow(_))), "{got:?}");
            let many_runs = Datatype::hvector(1i64 << 22, 1, 0, &pair)?;
            let send = comm.isend(SendBuf::new(Region::new(&buf), 1, &many_runs), 1 - comm.rank(), 0);
            if external {
                let got = send.await;
                assert!(matches!(got, Err(ref e) if matches!(e.kind(), mpx::ErrorKind::InvalidDatatype(_))), "{got:?}");
            } else {
                // Sent natively: 32 MiB of the same 8 bytes.
                let (data, _) = comm.irecv_bytes(1 - comm.rank(), 0).await?;
                assert_eq!(data.len(), 8 << 22);
                send.await?;
            }
            Ok(())
        });
        returns(run).await;
    }

    /// Ranks that free more rendezvous sends than their slots and return
    /// without receiving do not wait for each other.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn freed_sends_beyond_the_slots_both_ways_end() {
        let mut opts = options(2);
        opts.engine.rndv_slots = 1;
        let run = launch_with(opts, |comm| async move {
            let other = 1 - comm.rank();
            for _ in 0..3 {
                comm.isend(vec![1u8; 200_000], other, 0).free();
            }
            Ok(())
        });
        returns(run).await;
    }

    /// A rank that returned with sends waiting for slots is seen as finished
    /// once they arrive: a receive for another tag fails.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_that_returned_with_held_sends_is_finished() {
        let mut opts = options(2);
        opts.engine.rndv_slots = 1;
        let run = launch_with(opts, |comm| async move {
            if comm.rank() == 0 {
                for _ in 0..3 {
                    comm.isend(vec![1u8; 200_000], 1, 0).free();
                }
                return Ok(());
            }
            let r = comm.recv_vec::<u8>(0, 5).await;
            assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{r:?}");
            // The messages it sent are still there to receive.
            for _ in 0..3 {
                assert_eq!(comm.recv_vec::<u8>(0, 0).await?.0.len(), 200_000);
            }
            Ok(())
        });
        returns(run).await;
    }

    /// A send to self started after the receive was first polled, in the
    /// same `join!`, still matches it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_send_to_self_started_after_the_first_poll_matches() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 1 {
                return Ok(());
            }
            assert!(comm.recv_vec::<u8>(1, 9).await.is_err());
            let mut b = [0u32];
            let (st, sent) = futures::join!(comm.recv_into(&mut b, Any, 2), async { comm.send(&[22u32], 0, 2).await });
            st?;
            sent?;
            assert_eq!(b, [22]);
            // The same through a request set, which polls each request at
            // most once per call.
            let mut c = [0u32];
            let mut set = RequestSet::new();
            set.push(comm.irecv(&mut c, Any, 3));
            let (got, sent) = futures::join!(set.wait_any(), async { comm.send(&[33u32], 0, 3).await });
            got.expect("one request").1?;
            sent?;
            drop(set);
            assert_eq!(c, [33]);
            Ok(())
        });
        returns(run).await;
    }

    /// Every kind of send that needs the peer's cooperation fails once the
    /// peer has finished, and the sender's own end (buffer detach, finalize)
    /// is not held up by them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sends_to_a_finished_rank_fail_instead_of_hanging() {
        let mut opts = options(2);
        opts.engine.eager_threshold = 64;
        opts.engine.eager_credit = 2 * mpx::proto::engine::EAGER_OVERHEAD + 400;
        let run = launch_with(opts, |comm| async move {
            if comm.rank() == 1 {
                return Ok(vec![]);
            }
            // Wait until rank 1 has said goodbye.
            let r = comm.recv_vec::<u8>(1, 0).await;
            assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "{r:?}");
            let big = vec![1u8; 10_000];
            let mut outcomes = vec![comm.send(&big, 1, 0).await];
            // Short standard sends: eager while credit lasts, then they need rank 1.
            for _ in 0..10 {
                outcomes.push(comm.send(&[1u8; 32], 1, 0).await);
            }
            comm.buffer_attach(vec![0u8; 20_000 + 2 * mpx::BSEND_OVERHEAD])?;
            outcomes.push(comm.bsend(&big, 1, 0).await);
            // A short one, with the credit spent: it needs rank 1 too.
            outcomes.push(comm.bsend(&[1u8; 32], 1, 0).await);
            // Detaching does not wait for the buffered send.
            tokio::time::timeout(LIMIT, comm.buffer_detach()).await.expect("detach returns")?;
            Ok(outcomes.into_iter().map(|o| o.is_ok()).collect())
        });
        let out = returns(run).await;
        let sent = &out[0];
        assert!(!sent[0], "a rendezvous send to a finished rank fails");
        assert!(sent[1..11].contains(&false), "short sends fail once the credit is spent");
        assert!(sent[1], "the first short send went eagerly");
        assert!(!sent[11], "a buffered send that needs the finished rank to match fails at once, as every send that does");
        assert!(!sent[12], "so does a short one once the credit is spent");
    }

    /// A rank that returns with sends to itself nobody received (dropped
    /// requests: a rendezvous one, and eager ones beyond its credit to
    /// itself) ends: the sends fail in the background, and `launch` returns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_that_returns_with_unreceived_sends_to_itself_ends() {
        let run = launch(2, |comm| async move {
            drop(comm.isend(vec![0u8; 100_000], comm.rank(), 0));
            for _ in 0..100 {
                drop(comm.isend(vec![1u8; 20_000], comm.rank(), 1));
            }
            Ok(())
        });
        returns(run).await;
    }

    /// Dropping a launch future ends every task it started.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_a_launch_ends_its_tasks() {
        struct Alive(Arc<AtomicBool>);
        impl Drop for Alive {
            fn drop(&mut self) {
                self.0.store(false, Ordering::SeqCst);
            }
        }
        let flags: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::new(AtomicBool::new(true))).collect();
        let f2 = flags.clone();
        let run = launch(3, move |comm| {
            let alive = Alive(f2[comm.rank()].clone());
            async move {
                let _alive = alive;
                // Wait for a message that never comes.
                comm.recv_vec::<u8>(Any, 99).await?;
                Ok(())
            }
        });
        let endpoint_probe = tokio::time::timeout(Duration::from_millis(200), run).await;
        assert!(endpoint_probe.is_err(), "the launch was still running");
        for _ in 0..100 {
            if flags.iter().all(|f| !f.load(Ordering::SeqCst)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(flags.iter().all(|f| !f.load(Ordering::SeqCst)), "every rank's task was dropped");
        let metrics = tokio::runtime::Handle::current().metrics();
        for _ in 0..100 {
            if metrics.num_alive_tasks() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(metrics.num_alive_tasks(), 0, "no driver or rank task is left");
    }

    /// A buffered send whose data goes by rendezvous, still waiting for its
    /// match when its receiver returns without receiving it, fails in the
    /// background: the sender's detach and its own end do not wait for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rendezvous_bsend_pending_when_its_receiver_returns_ends() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 1 {
                // Returns once the buffered send has been announced, without receiving it.
                comm.recv_vec::<u8>(0, 1).await?;
                return Ok(());
            }
            let big = vec![5u8; 1 << 20];
            comm.buffer_attach(vec![0u8; big.len() + mpx::BSEND_OVERHEAD])?;
            comm.bsend(&big, 1, 0).await?;
            comm.send(&[1u8], 1, 1).await?;
            let detached = tokio::time::timeout(LIMIT, comm.buffer_detach()).await.expect("detach returns")?;
            assert_eq!(detached.len(), big.len() + mpx::BSEND_OVERHEAD);
            Ok(())
        });
        returns(run).await;
    }

    /// An any-source receive posted when every other rank is gone still gets
    /// a message this rank sends itself, in each common shape.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn any_source_receives_still_get_messages_to_self() {
        let run = launch(3, |comm| async move {
            if comm.rank() != 0 {
                return Ok(());
            }
            // Wait until the others are gone.
            assert!(comm.recv_vec::<u8>(1, 9).await.is_err() && comm.recv_vec::<u8>(2, 9).await.is_err());
            // irecv from any, then send to self.
            let mut a = [0u32];
            let recv = comm.irecv(&mut a, Any, 1);
            comm.send(&[11u32], 0, 1).await?;
            recv.await?;
            assert_eq!(a, [11]);
            // join! of a receive and a send to self.
            let mut b = [0u32];
            let (st, sent) = futures::join!(comm.recv_into(&mut b, Any, 2), comm.send(&[22u32], 0, 2));
            st?;
            sent?;
            assert_eq!(b, [22]);
            // select! with the send started right after the receive was posted.
            let mut c = [0u32];
            let recv = comm.irecv(&mut c, Any, 3);
            let send = comm.isend(&[33u32], 0, 3);
            tokio::select! {
                r = recv => { r?; }
                _ = tokio::time::sleep(LIMIT) => panic!("the receive did not get the message to self"),
            }
            send.await?;
            assert_eq!(c, [33]);
            // A ready send to self finds the receive posted.
            let mut d = [0u32];
            let recv = comm.irecv(&mut d, Any, 4);
            comm.rsend(&[44u32], 0, 4).await?;
            recv.await?;
            assert_eq!(d, [44]);
            // With nothing to match it, the receive fails (on its second poll).
            let lonely = comm.recv_vec::<u32>(Any, 5).await;
            assert!(matches!(lonely, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { .. })), "{lonely:?}");
            let probe = comm.probe(Any, 5).await;
            assert!(matches!(probe, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { .. })), "{probe:?}");
            Ok(())
        });
        returns(run).await;
    }

    /// Argument errors of either half of a sendrecv come at once, without
    /// waiting for the other half.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sendrecv_reports_argument_errors_at_once() {
        let run = launch(2, |comm| async move {
            let mut buf = [0u8; 4];
            let quick = Duration::from_secs(2);
            let e = tokio::time::timeout(quick, comm.sendrecv(&[1u8], 7, 0, &mut buf, 1 - comm.rank(), 0)).await.expect("at once");
            assert!(matches!(e, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidRank { rank: 7, .. })), "{e:?}");
            let e = tokio::time::timeout(quick, comm.sendrecv_replace(&mut buf, 1 - comm.rank(), -3, Any, 0)).await.expect("at once");
            assert!(matches!(e, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidTag(-3))), "{e:?}");
            let e = tokio::time::timeout(quick, comm.sendrecv_replace(&mut buf, 9, 0, Any, 0)).await.expect("at once");
            assert!(matches!(e, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidRank { rank: 9, .. })), "{e:?}");
            Ok(())
        });
        returns(run).await;
    }

    /// A communicator kept past its launch fails every operation.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_communicator_used_after_its_launch_fails() {
        let comms = launch(2, |comm| async move { Ok(comm) }).await.unwrap();
        let comm = &comms[0];
        let quick = Duration::from_secs(2);
        let sent = tokio::time::timeout(quick, comm.send(&[1u8], 0, 0)).await.expect("no hang");
        assert_eq!(sent, Err(ErrorKind::Finalized.into()));
        let got = tokio::time::timeout(quick, comm.recv_vec::<u8>(0, 0)).await.expect("no hang");
        assert_eq!(got.unwrap_err(), ErrorKind::Finalized);
        let got = tokio::time::timeout(quick, comm.recv_vec::<u8>(Any, Any)).await.expect("no hang");
        assert_eq!(got.unwrap_err(), ErrorKind::Finalized);
        assert_eq!(comm.iprobe(Any, Any).unwrap_err(), ErrorKind::Finalized);
        assert_eq!(tokio::time::timeout(quick, comm.probe(1, 0)).await.expect("no hang").unwrap_err(), ErrorKind::Finalized);
        assert_eq!(comm.buffer_attach(vec![0; 100]).unwrap_err(), ErrorKind::Finalized);
        let buffered = tokio::time::timeout(quick, comm.bsend(&[1u8], 1, 0)).await.expect("no hang");
        assert_eq!(buffered.unwrap_err(), ErrorKind::Finalized);
        assert_eq!(tokio::time::timeout(quick, comm.barrier()).await.expect("no hang"), Err(ErrorKind::Finalized.into()));
        // A broadcast's root, which need not wait for the others.
        assert_eq!(tokio::time::timeout(quick, comm.bcast(&mut [1u8][..], 0)).await.expect("no hang"), Err(ErrorKind::Finalized.into()));
    }

    /// `launch` returns only after sends that were dropped or freed have been
    /// delivered: the receiver gets every one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn finalize_waits_for_dropped_and_freed_sends() {
        let mut opts = options(2);
        opts.engine.eager_threshold = 16;
        let run = launch_with(opts, |comm| async move {
            if comm.rank() == 0 {
                for i in 0..50u64 {
                    let data = vec![i; 100]; // rendezvous
                    let req = comm.isend(&data, 1, 0);
                    if i % 2 == 0 {
                        drop(req);
                    } else {
                        req.free();
                    }
                }
                comm.issend(&[7u8], 1, 1).free();
                return Ok(0);
            }
            // Receive late: rank 0's program has long returned.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut total = 0;
            for i in 0..50u64 {
                let (v, _) = comm.recv_vec::<u64>(0, 0).await?;
                assert_eq!(v, vec![i; 100]);
                total += 1;
            }
            comm.recv_vec::<u8>(0, 1).await?;
            Ok(total)
        });
        let out = returns(run).await;
        assert_eq!(out[1], 50);
    }
}

/// The network-like loopback (frames encoded and decoded, small credit,
/// chunked rendezvous, external32) carries the same exchanges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_like_loopback_carries_large_and_small_messages() {
    let run = launch_with(LaunchOptions::network_like(3), |comm| async move {
        let right = (comm.rank() + 1) % comm.size();
        let left = (comm.rank() + comm.size() - 1) % comm.size();
        let big: Vec<f64> = (0..200_000).map(|i| i as f64 * 0.5 + comm.rank() as f64).collect();
        let mut got = vec![0f64; 200_000];
        let mine = [comm.rank() as i64 * -3];
        let small = comm.isend(&mine, right, 1);
        comm.sendrecv(&big, right, 0, &mut got, left, 0).await?;
        assert!(got.iter().enumerate().all(|(i, &v)| v == i as f64 * 0.5 + left as f64));
        let (v, _) = comm.recv_vec::<i64>(left, 1).await?;
        assert_eq!(v, [left as i64 * -3]);
        small.await?;
        Ok(())
    });
    returns(run).await;
}

/// Empty datatypes at huge counts touch nothing and return at once.
#[test]
fn empty_datatypes_at_huge_counts_are_checked_at_once() {
    let empty = Datatype::contiguous(0, &Datatype::int()).unwrap();
    let values = [0u32; 4];
    let started = std::time::Instant::now();
    assert!(SendBuf::typed_with(&values, u64::MAX, &empty).is_ok());
    let mut out = [0u32; 4];
    assert!(RecvBuf::typed_with(&mut out, u64::MAX, &empty).is_ok());
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// A type of zero extent that is not empty repeats the same bytes for
/// every item: checking it against a padded `T` at a huge count looks at
/// one period of item offsets, not at every item.
#[test]
fn zero_extent_types_at_huge_counts_are_checked_at_once() {
    #[derive(MpiType, Clone, Copy, Default)]
    #[repr(C)]
    struct Padded {
        flag: u8,
        value: u32,
    }
    let values = [Padded::default(); 4];
    let started = std::time::Instant::now();
    // The first byte, again and again: a data byte.
    let first = Datatype::resized(0, 0, &Datatype::basic(mpx::Basic::UnsignedChar)).unwrap();
    assert!(SendBuf::typed_with(&values, u64::MAX, &first).is_ok());
    // The second byte, padding of `Padded`: refused.
    let second = Datatype::resized(0, 0, &Datatype::hindexed(&[1], &[1], &Datatype::basic(mpx::Basic::UnsignedChar)).unwrap()).unwrap();
    assert!(matches!(SendBuf::typed_with(&values, u64::MAX, &second), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidDatatype(_))));
    // A stride of 3 bytes reaches every offset within a `Padded` within 8 items.
    let strided = Datatype::resized(0, 3, &Datatype::basic(mpx::Basic::UnsignedChar)).unwrap();
    assert!(matches!(SendBuf::typed_with(&values, 5, &strided), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidDatatype(_))));
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// A transport that keeps what it is given, to forge frames from.
#[derive(Clone, Default)]
struct Capture(Arc<std::sync::Mutex<Vec<(usize, mpx::proto::wire::Frame)>>>);

impl mpx::Transport for Capture {
    fn send(&self, dest: usize, frame: mpx::proto::wire::Frame) -> std::result::Result<(), mpx::runtime::SendError> {
        self.0.lock().unwrap().push((dest, frame));
        Ok(())
    }
}

/// A message whose header claims 2^32 elements in 4 bytes is a type
/// mismatch, found without walking the claimed elements.
#[tokio::test(flavor = "current_thread")]
async fn a_forged_signature_length_is_refused_at_once() {
    let config = mpx::proto::engine::Config::default();
    let from_zero = Capture::default();
    // Rank 0's hello, as its endpoint sends it.
    let _zero = mpx::Endpoint::new(0, 2, config, from_zero.clone()).unwrap();
    let one = mpx::Endpoint::new(1, 2, config, Capture::default()).unwrap();
    let frames: Vec<_> = from_zero.0.lock().unwrap().drain(..).collect();
    let (_, hello) = frames.into_iter().find(|(d, _)| *d == 1).expect("a hello for rank 1");
    one.handle_frame(0, hello).unwrap();
    let mut header = mpx::proto::wire::Header {
        sig_hash: 1,
        sig_len: 1 << 32,
        ..mpx::proto::wire::Header::control(mpx::proto::wire::Kind::Eager, 0)
    };
    header.data_len = 4;
    one.handle_frame(0, mpx::proto::wire::Frame { header, payload: bytes::Bytes::from_static(&[0, 0, 0, 5]) }).unwrap();
    let mut got = [0u32; 1];
    let started = std::time::Instant::now();
    let r = one.world().recv_into(&mut got, 0, 0).await;
    assert_eq!(r, Err(ErrorKind::TypeMismatch.into()));
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// Between ranks sending external32, a typed message received as `packed`
/// unpacks natively to the values sent (the receiver converts it on
/// delivery), into a slice or as owned bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_external32_messages_received_as_packed_unpack_to_the_values_sent() {
    #[derive(mpx::MpiType, Clone, Copy, Default, Debug, PartialEq)]
    #[repr(C)]
    struct Sample {
        id: i16,
        value: f64,
        count: i64,
        flags: [u8; 3],
    }
    let samples: Vec<Sample> =
        (0..50).map(|i| Sample { id: i as i16 - 7, value: i as f64 * 1.25, count: -(i as i64) * 1000, flags: [i as u8, 1, 2] }).collect();
    let ints: Vec<i32> = (0..5000).map(|i| i * 7919 - 1_000_000).collect();
    let (s2, i2) = (samples.clone(), ints.clone());
    let run = launch_with(LaunchOptions::network_like(2), move |comm| {
        let (samples, ints) = (s2.clone(), i2.clone());
        async move {
            if comm.rank() == 0 {
                comm.send(&samples, 1, 0).await?;
                comm.send(&ints, 1, 1).await?; // rendezvous, several chunks
                comm.send(&samples[..3], 1, 2).await?;
                // `long`: 4 bytes in external32, 8 here.
                let longs = [1i64, -2, 3];
                let long = mpx::Datatype::named("long").expect("a predefined type");
                comm.send(mpx::SendBuf::new(mpx::Region::of(&longs), 3, &long), 1, 3).await?;
                return Ok(());
            }
            let t = Sample::datatype();
            let mut packed = vec![0u8; t.pack_size(50)?];
            let st = comm.recv_into(RecvBuf::packed(&mut packed), 0, 0).await?;
            assert_eq!(st.bytes as usize, t.pack_size(50)?, "the status counts native packed bytes");
            let mut got = vec![Sample::default(); 50];
            mpx::unpack(&packed, &mut 0, &mut got)?;
            assert_eq!(got, samples);

            let mut packed = vec![0u8; 4 * 5000];
            comm.recv_into(RecvBuf::packed(&mut packed), 0, 1).await?;
            let mut got = vec![0i32; 5000];
            mpx::unpack(&packed, &mut 0, &mut got)?;
            assert_eq!(got, ints);

            let (bytes, _) = comm.irecv_bytes(0, 2).await?;
            let mut got = vec![Sample::default(); 3];
            mpx::unpack(&bytes, &mut 0, &mut got)?;
            assert_eq!(got, samples[..3]);
            // The status counts the bytes handed back, in this rank's
            // native form, not the external32 bytes that came.
            let (bytes, status) = comm.irecv_bytes(0, 3).await?;
            assert_eq!((bytes.len(), status.bytes), (24, 24));
            let got: Vec<i64> = bytes.chunks(8).map(|c| i64::from_ne_bytes(c.try_into().expect("8 bytes"))).collect();
            assert_eq!(got, [1, -2, 3]);
            Ok(())
        }
    });
    returns(run).await;
}

/// An endpoint owns what its transport hands it (its driver's guard): the
/// guard lives while any handle on the endpoint does, and drops with the last.
#[test]
fn an_endpoint_owns_its_drivers_guard() {
    struct Guard(Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicBool::new(false));
    let endpoint = mpx::Endpoint::new(0, 2, mpx::proto::engine::Config::default(), Capture::default()).unwrap();
    endpoint.own(Guard(dropped.clone()));
    let comm = endpoint.world();
    drop(endpoint);
    assert!(!dropped.load(Ordering::SeqCst), "a communicator still holds the endpoint");
    drop(comm);
    assert!(dropped.load(Ordering::SeqCst));
}

/// A rank that frees far more sends than its credit and slots let through
/// and returns is not cut off: its sends follow its goodbye under the usual
/// flow control, and the receiver gets every one, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_that_returns_with_many_held_sends_delivers_them_all() {
    const SENDS: u32 = 70_000;
    let mut opts = LaunchOptions::ranks(2);
    opts.engine.eager_credit = 2000;
    opts.engine.rndv_slots = 1;
    let run = launch_with(opts, |comm| async move {
        if comm.rank() == 0 {
            for i in 0..SENDS {
                comm.isend(std::slice::from_ref(&i), 1, 0).free();
            }
            return Ok(0);
        }
        let mut got = [0u32];
        for i in 0..SENDS {
            comm.recv_into(&mut got[..], 0, 0).await?;
            assert_eq!(got, [i]);
        }
        // And then nothing more comes.
        let r = comm.recv::<u32>(0, 0).await;
        assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{r:?}");
        Ok(SENDS)
    });
    let out = tokio::time::timeout(Duration::from_secs(60), run).await.expect("launch returns").unwrap();
    assert_eq!(out[1], SENDS);
}

/// In a world of one rank, an any-source receive that nothing matches
/// fails (only the rank's own messages could match it), instead of
/// waiting forever; one its own send matches still completes.
#[tokio::test(flavor = "current_thread")]
async fn an_any_source_receive_alone_in_its_world_fails_instead_of_hanging() {
    let run = mpx::launch(1, |comm| async move {
        let lonely = comm.recv::<u32>(Any, 0).await;
        assert!(matches!(lonely, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{lonely:?}");
        let (got, sent) = futures::join!(comm.recv::<u32>(Any, 1), comm.send(&5u32, 0, 1));
        sent?;
        assert_eq!(got?.0, 5);
        Ok(())
    });
    returns(run).await;
}
