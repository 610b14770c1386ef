//! Point-to-point messages between ranks of one process that meet at their
//! receivers ([`LocalWorld::meeting`]): what their senders learn when the
//! receiver goes, closes or holds too much, and the order they keep.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::comm::Comm;
use crate::error::ErrorKind;
use crate::proto::engine::Config;
use crate::proto::wire::Frame;
use crate::request::Request;
use crate::runtime::{Endpoint, LocalWorld, SendError, Transport};

/// A transport that carries no frame: every message between its ranks
/// meets at its receiver, so nothing here depends on frames.
struct MeetingOnly(Arc<LocalWorld>);

impl Transport for MeetingOnly {
    fn send(&self, _dest: usize, _frame: Frame) -> Result<(), SendError> {
        Ok(())
    }

    fn local_world(&self) -> Option<Arc<LocalWorld>> {
        Some(self.0.clone())
    }
}

/// Two endpoints of one world whose messages meet.
fn pair(config: Config) -> (Endpoint, Endpoint) {
    let world = LocalWorld::meeting(2, false, true);
    let zero = Endpoint::new(0, 2, config, MeetingOnly(world.clone())).expect("rank 0");
    let one = Endpoint::new(1, 2, config, MeetingOnly(world)).expect("rank 1");
    (zero, one)
}

/// A transport whose world in one process has fewer ranks than the
/// endpoint's world is refused as the endpoint is made (the meeting place
/// would be asked for ranks it does not hold).
#[test]
fn a_local_world_of_another_size_is_refused() {
    let world = LocalWorld::meeting(2, false, true);
    let refused = Endpoint::new(0, 4, Config::default(), MeetingOnly(world.clone()));
    assert!(matches!(refused, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))));
    assert!(Endpoint::new(0, 2, Config::default(), MeetingOnly(world)).is_ok());
}

/// Polls `request` once, without waiting.
fn poll_once(request: &mut Request<'_>) -> Poll<crate::Result<crate::Status>> {
    std::pin::Pin::new(request).poll(&mut Context::from_waker(Waker::noop()))
}

/// Receives one `u32` from rank 0 with `tag`.
fn recv_u32(comm: &Comm, tag: i32) -> crate::Result<u32> {
    futures::executor::block_on(async { Ok(comm.recv::<u32>(0, tag).await?.0) })
}

/// A synchronous send waits at its receiver until a receive matches it,
/// and completes then.
#[test]
fn a_synchronous_send_completes_when_its_receiver_matches_it() {
    let (zero, one) = pair(Config::default());
    let mut send = zero.world().issend(&7u32, 1, 0);
    assert!(poll_once(&mut send).is_pending(), "no receive has matched it");
    assert_eq!(recv_u32(&one.world(), 0).expect("received"), 7);
    assert!(matches!(poll_once(&mut send), Poll::Ready(Ok(_))), "matched: done");
}

/// A send waiting at a receiver whose endpoint goes (without closing)
/// fails, rather than waiting for ever.
#[test]
fn a_send_waiting_at_a_dropped_endpoint_fails() {
    let (zero, one) = pair(Config::default());
    let mut send = zero.world().issend(&7u32, 1, 0);
    assert!(poll_once(&mut send).is_pending());
    drop(one);
    // Answered from a thread of its own (see `Shared`'s drop).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let outcome = loop {
        match poll_once(&mut send) {
            Poll::Ready(outcome) => break outcome,
            Poll::Pending if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(1)),
            Poll::Pending => panic!("the send did not fail within 10 s"),
        }
    };
    assert!(matches!(outcome, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "{outcome:?}");
}

/// A send waiting at a receiver that closes fails; a sender that closes
/// fails its own waiting sends, and its message stays with the receiver.
#[test]
fn closing_either_side_fails_a_waiting_send() {
    let (zero, one) = pair(Config::default());
    let mut send = zero.world().issend(&7u32, 1, 0);
    one.close();
    assert!(matches!(poll_once(&mut send), Poll::Ready(Err(ref e)) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })));

    let (zero, one) = pair(Config::default());
    let mut send = zero.world().issend(&8u32, 1, 0);
    zero.close();
    assert!(matches!(poll_once(&mut send), Poll::Ready(Err(ref e)) if *e == ErrorKind::Finalized));
    assert_eq!(recv_u32(&one.world(), 0).expect("the message stayed"), 8);
}

/// Small standard sends are done as they arrive while the receiver holds
/// less than the credit it grants; beyond it they wait for their match,
/// and every message arrives in order.
#[test]
fn standard_sends_beyond_the_credit_wait_and_keep_their_order() {
    let config = Config { eager_credit: 4 * crate::proto::engine::EAGER_OVERHEAD, ..Config::default() };
    let (zero, one) = pair(config);
    let mut sends: Vec<Request<'static>> = (0..8u32).map(|i| zero.world().isend(&i, 1, 0)).collect();
    let done: Vec<bool> = sends.iter_mut().map(|s| poll_once(s).is_ready()).collect();
    assert_eq!(done, [true, true, true, false, false, false, false, false], "three fit the credit of four overheads");
    let got: Vec<u32> = (0..8).map(|_| recv_u32(&one.world(), 0).expect("received")).collect();
    assert_eq!(got, (0..8).collect::<Vec<_>>());
    assert!(sends.iter_mut().all(|s| matches!(poll_once(s), Poll::Ready(Ok(_)))), "all matched: all done");
}

/// A message larger than the eager threshold waits for its match with its
/// data in hand; a small message sent after it does not overtake it.
#[test]
fn a_small_message_does_not_overtake_a_large_one() {
    let (zero, one) = pair(Config { eager_threshold: 64, ..Config::default() });
    let mut large = zero.world().isend(vec![5u32; 1000], 1, 0);
    let mut small = zero.world().isend(&6u32, 1, 0);
    assert!(poll_once(&mut large).is_pending() && poll_once(&mut small).is_ready());
    let world = one.world();
    let (first, _) = futures::executor::block_on(world.recv_vec::<u32>(0, 0)).expect("the large one");
    assert_eq!(first, vec![5u32; 1000]);
    assert_eq!(recv_u32(&world, 0).expect("the small one"), 6);
    assert!(matches!(poll_once(&mut large), Poll::Ready(Ok(_))));
}

/// A receive too short for a synchronous send's message fails with
/// `Truncate` without taking the message in (as for a rendezvous
/// message), and the send completes once the receive's owner takes the
/// error: the message counts as received.
#[test]
fn a_receive_too_short_for_a_waiting_message_completes_its_send() {
    let (zero, one) = pair(Config::default());
    let mut send = zero.world().issend(vec![1u32; 100], 1, 0);
    let mut short = [0u32; 2];
    let e = futures::executor::block_on(one.world().recv_into(&mut short[..], 0, 0)).expect_err("too short");
    assert!(matches!(e.kind(), ErrorKind::Truncate { needed: 400, available: 8, .. }), "{e:?}");
    assert!(matches!(poll_once(&mut send), Poll::Ready(Ok(_))), "received: done");
    assert!(one.world().iprobe(0, 0).expect("probe").is_none(), "the message was taken");
}

/// A receiver that fails its sender (here by hand, as a transport does
/// when a peer is lost) fails the sender's send waiting there.
#[test]
fn a_receiver_that_fails_its_sender_fails_the_waiting_send() {
    let (zero, one) = pair(Config::default());
    let mut send = zero.world().issend(&7u32, 1, 0);
    assert!(poll_once(&mut send).is_pending());
    one.peer_failed(0, crate::Error::process_failed(0, "lost by the test"));
    assert!(matches!(poll_once(&mut send), Poll::Ready(Err(ref e)) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })));
}

/// `finalize` waits for a dropped send whose message waits at its
/// receiver, and ends once a receive takes it.
#[test]
fn finalize_waits_for_a_dropped_send_waiting_at_its_receiver() {
    let (zero, one) = pair(Config { eager_threshold: 64, ..Config::default() });
    drop(zero.world().isend(vec![2u8; 1000], 1, 0));
    let mut finalize = Box::pin(zero.finalize());
    assert!(finalize.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending(), "the send waits for its match");
    let (got, _) = futures::executor::block_on(one.world().recv_vec::<u8>(0, 0)).expect("received");
    assert_eq!(got, vec![2u8; 1000]);
    assert!(matches!(futures::executor::block_on(finalize), Ok(())), "matched: finalize ends");
}

/// A synchronous send whose message a probe took at its receiver
/// (`improbe`) fails once the receiver ends, closing or finalizing,
/// though the probe's handle is still out, as over frames, rather than
/// wait for the handle; the sender's `finalize` then ends.
#[test]
fn a_send_a_probe_took_fails_when_its_receiver_ends() {
    for close in [true, false] {
        within_10_s(move || {
            let (zero, one) = pair(Config::default());
            let mut send = zero.world().issend(&7u32, 1, 0);
            let message = one.world().improbe(0, 0).expect("probe").expect("the message is there");
            assert!(poll_once(&mut send).is_pending(), "probed, not received");
            if close {
                one.close();
            } else {
                futures::executor::block_on(one.finalize()).expect("finalize");
            }
            let outcome = poll_once(&mut send);
            assert!(matches!(outcome, Poll::Ready(Err(ref e)) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "close {close}: {outcome:?}");
            futures::executor::block_on(zero.finalize()).expect("nothing left to wait for");
            drop(message);
        });
    }
}

/// Once a sender has failed its receiver (its transport lost it), its
/// sends there fail as through its engine, rather than being handed over.
#[test]
fn sends_to_a_receiver_the_sender_failed_fail() {
    let (zero, _one) = pair(Config::default());
    zero.peer_failed(1, crate::Error::process_failed(1, "lost by the test"));
    let sent = futures::executor::block_on(zero.world().send(&1u8, 1, 0));
    assert!(matches!(sent, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "{sent:?}");
}

/// A receive too short for its message names the sender as the receive's
/// communicator numbers it, even when its owner takes the error only after
/// the endpoint has closed (which lets go of the message it held).
#[test]
fn a_truncated_receive_names_its_sender_in_its_communicator_after_a_close() {
    let world = LocalWorld::meeting(2, true, true);
    let zero = Endpoint::new(0, 2, Config::default(), MeetingOnly(world.clone())).expect("rank 0");
    let one = Endpoint::new(1, 2, Config::default(), MeetingOnly(world)).expect("rank 1");
    // The ranks in reverse: world rank 1 is rank 0 of `reversed`.
    let split = |endpoint: &Endpoint, key: i32| endpoint.world().split(Some(0), key);
    let (of_zero, of_one) = futures::executor::block_on(futures::future::join(split(&zero, 1), split(&one, 0)));
    let (of_zero, of_one) = (of_zero.expect("split").expect("a member"), of_one.expect("split").expect("a member"));
    assert_eq!((of_zero.rank(), of_one.rank()), (1, 0));
    let mut send = of_one.issend(vec![1u32; 100], 1, 5);
    assert!(poll_once(&mut send).is_pending(), "no receive has matched it");
    let mut short = [0u32; 2];
    let mut recv = of_zero.irecv(&mut short[..], 0, 5);
    zero.close();
    let outcome = poll_once(&mut recv);
    assert!(
        matches!(outcome, Poll::Ready(Err(ref e)) if matches!(e.kind(), ErrorKind::Truncate { needed: 400, available: 8, message: Some((0, 5)) })),
        "{outcome:?}"
    );
}

/// A waker that calls back into its endpoint when woken, as an executor
/// that polls inline may.
struct CallsBack(Comm);

impl std::task::Wake for CallsBack {
    fn wake(self: Arc<Self>) {
        let _ = self.0.iprobe(crate::Any, 0);
    }
}

/// Runs `body` on a thread of its own and fails if it has not ended
/// within 10 s (a deadlock), rather than hang.
fn within_10_s(body: impl FnOnce() + Send + 'static) {
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        body();
        let _ = done.send(());
    });
    assert!(ended.recv_timeout(std::time::Duration::from_secs(10)).is_ok(), "deadlocked (or panicked)");
}

/// A probe or an any-source receive that finds every other rank failed
/// polls its task once more before it fails: that wake comes once the
/// endpoint's lock is released, so a waker that calls back into the
/// endpoint does not deadlock.
#[test]
fn orphaned_probes_and_receives_wake_their_task_outside_the_lock() {
    within_10_s(|| {
        let (zero, _one) = pair(Config::default());
        zero.peer_failed(1, crate::Error::process_failed(1, "lost by the test"));
        let world = zero.world();
        let waker = Waker::from(Arc::new(CallsBack(world.clone())));
        let mut cx = Context::from_waker(&waker);
        let mut probe = Box::pin(world.probe(crate::Any, 0));
        assert!(probe.as_mut().poll(&mut cx).is_pending(), "the first poll lets the rest run");
        assert!(matches!(probe.as_mut().poll(&mut cx), Poll::Ready(Err(ref e)) if matches!(e.kind(), ErrorKind::ProcessFailed { .. })));
        let mut got = 0u32;
        let mut recv = world.irecv(&mut got, crate::Any, 0);
        assert!(std::pin::Pin::new(&mut recv).poll(&mut cx).is_pending(), "the first poll lets the rest run");
        assert!(matches!(std::pin::Pin::new(&mut recv).poll(&mut cx), Poll::Ready(Err(_))));
    });
}

/// A waker the endpoint lets go of is dropped once its lock is released:
/// it may be the last owner of its task's future, whose requests then
/// take the lock to withdraw.
#[test]
fn a_displaced_waker_is_dropped_outside_the_lock() {
    /// Owns a request, as a task's future does; dropping it withdraws the
    /// request.
    struct OwnsRequest(#[allow(dead_code)] std::sync::Mutex<Request<'static>>);
    impl std::task::Wake for OwnsRequest {
        fn wake(self: Arc<Self>) {}
    }
    within_10_s(|| {
        let (zero, _one) = pair(Config::default());
        let world = zero.world();
        let mut send = world.issend(&7u32, 1, 3);
        assert!(poll_once(&mut send).is_pending(), "waits for its match");
        let first = Waker::from(Arc::new(OwnsRequest(std::sync::Mutex::new(send))));
        let mut got = 0u32;
        let mut recv = world.irecv(&mut got, 1, 0);
        assert!(std::pin::Pin::new(&mut recv).poll(&mut Context::from_waker(&first)).is_pending());
        // The endpoint now holds the only handle to the first waker; the
        // next poll's waker displaces it.
        drop(first);
        assert!(std::pin::Pin::new(&mut recv).poll(&mut Context::from_waker(Waker::noop())).is_pending());
    });
}
