//! The transport boundary, through real endpoints: a peer that stops
//! reading holds back only its own frames, the sender's memory for it stays
//! bounded, and the engine's timers run on the driver's clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use mpx::prelude::*;
use mpx::proto::engine::Config;
use mpx::proto::wire::{Frame, HEADER_LEN};
use mpx::runtime::{SendError, WeakEndpoint};
use mpx::{Endpoint, LaunchOptions, Transport};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

/// Bytes the link from rank 0 to rank 2 takes while rank 2 does not read.
const LINK: usize = 32 * 1024;

/// A network of three ranks in which rank 2 can stop reading what rank 0
/// sends: the link then fills up and refuses frames, as a stream whose
/// receiver stopped reading would.
struct Net {
    me: usize,
    inboxes: Vec<UnboundedSender<(usize, Frame)>>,
    stall: Arc<Stall>,
}

struct Stall {
    on: AtomicBool,
    /// Frames rank 0 sent rank 2 while stalled, and their bytes.
    held: Mutex<(Vec<Frame>, usize)>,
    /// Rank 0's endpoint, to tell it the link drained.
    sender: OnceLock<WeakEndpoint>,
}

impl Transport for Net {
    fn send(&self, dest: usize, frame: Frame) -> Result<(), SendError> {
        if self.me == 0 && dest == 2 && self.stall.on.load(Ordering::SeqCst) {
            let mut held = self.stall.held.lock().unwrap();
            if held.1 > 0 && held.1 + frame.wire_len() > LINK {
                return Err(SendError::Full(frame));
            }
            held.1 += frame.wire_len();
            held.0.push(frame);
            return Ok(());
        }
        self.inboxes[dest].send((self.me, frame)).map_err(|_| SendError::Failed(ErrorKind::Finalized.into()))
    }
}

/// `n` endpoints over a [`Net`] sharing `stall`, each with a task that
/// hands it the frames reaching it; and the senders into their inboxes.
fn net(n: usize, config: Config, stall: &Arc<Stall>) -> (Vec<Endpoint>, Vec<UnboundedSender<(usize, Frame)>>) {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| unbounded_channel()).unzip();
    let endpoints: Vec<Endpoint> = (0..n)
        .map(|r| Endpoint::new(r, n, config, Net { me: r, inboxes: senders.clone(), stall: stall.clone() }).unwrap())
        .collect();
    for (ep, mut rx) in endpoints.iter().map(Endpoint::downgrade).zip(receivers) {
        tokio::spawn(async move {
            while let Some((from, frame)) = rx.recv().await {
                let Some(ep) = ep.upgrade() else { return };
                ep.handle_frame(from, frame).unwrap();
            }
        });
    }
    (endpoints, senders)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_reading_holds_back_only_its_own_frames() {
    // Credit for 100 of the 500-byte messages below: more than the link
    // holds.
    let eager_credit = 100 * (500 + mpx::proto::engine::EAGER_OVERHEAD);
    let config = Config { eager_threshold: 1024, eager_credit, rndv_chunk: 4096, rndv_slots: 64, ..Config::default() };
    let stall = Arc::new(Stall { on: AtomicBool::new(true), held: Mutex::new((Vec::new(), 0)), sender: OnceLock::new() });
    let (endpoints, senders) = net(3, config, &stall);
    let _ = stall.sender.set(endpoints[0].downgrade());
    // The hellos to rank 2 are held too: let them through first.
    let release = |stall: &Stall| {
        let (frames, _) = std::mem::take(&mut *stall.held.lock().unwrap());
        for f in frames {
            senders[2].send((0, f)).unwrap();
        }
    };
    release(&stall);
    for e in &endpoints {
        tokio::time::timeout(Duration::from_secs(10), e.connected()).await.expect("connected");
    }
    let (zero, one, two) = (endpoints[0].world(), endpoints[1].world(), endpoints[2].world());

    // Rank 0 floods rank 2, which does not read: eager messages until the
    // credit is spent, then rendezvous requests, then held sends.
    let payload = vec![7u8; 3000];
    let mut to_two = Vec::new();
    for i in 0..200u32 {
        to_two.push(zero.isend(vec![i as u8; if i % 3 == 0 { 3000 } else { 500 }], 2, 0));
    }
    drop(payload);
    // Meanwhile rank 0 and rank 1 exchange 200 messages each way, promptly.
    let started = std::time::Instant::now();
    let echo = tokio::spawn(async move {
        for i in 0..200u32 {
            let (v, _) = one.recv_vec::<u32>(0, 1).await?;
            one.send(&[v[0] + 1], 0, 2).await?;
            assert_eq!(v[0], i);
        }
        Ok::<_, Error>(())
    });
    for i in 0..200u32 {
        zero.send(&[i], 1, 1).await.unwrap();
        let (v, _) = zero.recv_vec::<u32>(1, 2).await.unwrap();
        assert_eq!(v, [i + 1]);
    }
    echo.await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(15), "the stalled peer delayed the others");

    // What waits for rank 2 is bounded: the link, and in the engine at most
    // the credit plus one header per rendezvous slot.
    let in_engine = endpoints[0].queued_bytes(2);
    let on_link = stall.held.lock().unwrap().1;
    assert!(on_link <= LINK && on_link > LINK / 2, "the link filled up: {on_link}");
    assert!(in_engine > 0, "frames wait in the engine once the link is full");
    let bound = config.eager_credit as usize + config.rndv_slots as usize * HEADER_LEN;
    assert!(in_engine <= bound, "{in_engine} bytes queued for the stalled peer, bound {bound}");

    // Rank 2 reads again: everything arrives, in order.
    stall.on.store(false, Ordering::SeqCst);
    release(&stall);
    endpoints[0].writable(2);
    let reader = tokio::spawn(async move {
        for i in 0..200u32 {
            let (v, _) = two.recv_vec::<u8>(0, 0).await?;
            assert_eq!((v.len(), v[0]), (if i % 3 == 0 { 3000 } else { 500 }, i as u8));
        }
        Ok::<_, Error>(())
    });
    tokio::time::timeout(Duration::from_secs(20), reader).await.expect("rank 2 gets everything").unwrap().unwrap();
    for r in to_two {
        r.await.unwrap();
    }
}

/// With an idle timeout, the drivers' pings keep live peers connected across
/// long quiet stretches (on tokio's paused clock: no real waiting).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn pings_keep_quiet_peers_alive_on_the_drivers_clock() {
    let mut opts = LaunchOptions::ranks(3);
    opts.engine.idle_timeout = Some(Duration::from_secs(2));
    let out = mpx::launch_with(opts, |comm| async move {
        // A minute of silence between ranks, in quiet steps.
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let right = (comm.rank() + 1) % comm.size();
        let left = (comm.rank() + comm.size() - 1) % comm.size();
        let mut got = [0u32];
        comm.sendrecv(&[comm.rank() as u32], right, 0, &mut got, left, 0).await?;
        Ok(got[0])
    })
    .await
    .unwrap();
    assert_eq!(out, [2, 0, 1]);
}

/// Two endpoints whose rank 1 can go silent (its frames are lost).
struct Lossy {
    me: usize,
    inboxes: Vec<UnboundedSender<(usize, Frame)>>,
    mute: Arc<AtomicBool>,
}

impl Transport for Lossy {
    fn send(&self, dest: usize, frame: Frame) -> Result<(), SendError> {
        if self.me == 1 && self.mute.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.inboxes[dest].send((self.me, frame)).map_err(|_| SendError::Failed(ErrorKind::Finalized.into()))
    }
}

/// Through real endpoints and their timers on tokio's paused clock: a peer
/// that goes silent fails what waits on it with `ProcessFailed` after the
/// idle timeout, and not before.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_silent_peer_fails_after_the_idle_timeout() {
    let config = Config { idle_timeout: Some(Duration::from_secs(3)), ..Config::default() };
    let mute = Arc::new(AtomicBool::new(false));
    let (inboxes, receivers): (Vec<_>, Vec<_>) = (0..2).map(|_| unbounded_channel()).unzip();
    let eps: Vec<Endpoint> =
        (0..2).map(|r| Endpoint::new(r, 2, config, Lossy { me: r, inboxes: inboxes.clone(), mute: mute.clone() }).unwrap()).collect();
    // Each endpoint's driver: its inbox and its timers.
    for (ep, mut rx) in eps.iter().zip(receivers) {
        let weak = ep.downgrade();
        tokio::spawn(async move {
            let now = || tokio::time::Instant::now().into_std();
            if let Some(ep) = weak.upgrade() {
                ep.handle_timeout(now());
            }
            loop {
                let Some(at) = weak.upgrade().and_then(|ep| ep.poll_timeout()) else { return };
                tokio::select! {
                    got = rx.recv() => match (got, weak.upgrade()) {
                        (Some((from, frame)), Some(ep)) => ep.handle_frame(from, frame).unwrap(),
                        _ => return,
                    },
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {
                        let Some(ep) = weak.upgrade() else { return };
                        ep.handle_timeout(now());
                    }
                }
            }
        });
    }
    eps[0].connected().await;
    eps[1].connected().await;
    let zero = eps[0].world();
    // Alive and quiet for a while: pings keep the connection.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(zero.iprobe(1, 0).unwrap().is_none());
    // Rank 1 goes silent; a receive from it fails after the timeout.
    mute.store(true, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let r = zero.recv_vec::<u8>(1, 0).await;
    let waited = started.elapsed();
    assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "{r:?}");
    assert!(waited >= Duration::from_secs(2) && waited <= Duration::from_secs(5), "failed after {waited:?}");
}

/// An endpoint is not made for a rank outside its world, and refuses
/// frames that claim to come from itself (its messages to itself never
/// reach a transport).
#[tokio::test(flavor = "current_thread")]
async fn an_endpoint_refuses_a_rank_outside_the_world_and_frames_from_itself() {
    let (tx, _rx) = unbounded_channel();
    let net = |me| Lossy { me, inboxes: vec![tx.clone(), tx.clone()], mute: Arc::new(AtomicBool::new(false)) };
    let r = Endpoint::new(2, 2, Config::default(), net(2));
    assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidRank { rank: 2, size: 2 })), "{r:?}");
    assert!(Endpoint::new(0, 0, Config::default(), net(0)).is_err());
    let ep = Endpoint::new(0, 2, Config::default(), net(0)).unwrap();
    let forged = Frame {
        header: mpx::proto::wire::Header { seq: 0, ..mpx::proto::wire::Header::control(mpx::proto::wire::Kind::Eager, 0) },
        payload: bytes::Bytes::from_static(b"forged"),
    };
    assert!(matches!(ep.handle_frame(0, forged.clone()), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    assert!(matches!(ep.handle_frame(5, forged), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    assert!(ep.world().iprobe(Any, Any).unwrap().is_none(), "nothing was queued");
}

/// A rank that panics while its link to a peer is full still says goodbye
/// once the link drains: the peer's receive fails, and `launch` returns the
/// panic promptly instead of waiting forever (no idle timeout is set).
#[tokio::test(flavor = "current_thread")]
async fn a_rank_that_panics_with_a_full_link_still_says_goodbye() {
    // Messages as frames, over links (ranks whose messages meet use none).
    let mut opts = LaunchOptions { local_messages: false, ..LaunchOptions::ranks(2) };
    opts.link_capacity = 1024;
    let run = mpx::launch_with(opts, |comm| async move {
        if comm.rank() == 0 {
            for _ in 0..4 {
                comm.isend(&[7u8; 4096][..], 1, 0).free();
            }
            panic!("rank 0 gives up with its link full");
        }
        let r = comm.recv::<u8>(0, 99).await;
        assert!(matches!(r, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{r:?}");
        Ok(())
    });
    let started = std::time::Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(20), run).await.expect("launch returns");
    assert!(matches!(out.as_ref().map_err(mpx::Error::kind), Err(ErrorKind::RankPanicked { rank: 0, message }) if message.contains("link full")), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

/// Two endpoints whose link from rank 0 to rank 1 breaks with an I/O
/// error once `broken` is set.
struct Breakable {
    me: usize,
    inboxes: Vec<UnboundedSender<(usize, Frame)>>,
    broken: Arc<AtomicBool>,
}

impl Transport for Breakable {
    fn send(&self, dest: usize, frame: Frame) -> Result<(), SendError> {
        if self.me == 0 && self.broken.load(Ordering::SeqCst) {
            let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer");
            return Err(SendError::Failed(Error::transport(format!("writing to rank {dest}"), io)));
        }
        self.inboxes[dest].send((self.me, frame)).map_err(|_| SendError::Failed(ErrorKind::Finalized.into()))
    }
}

/// The source chain of `e`, outermost first.
fn chain(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    std::iter::successors(Some(e), |e| e.source()).map(|e| e.to_string()).collect()
}

/// A link that breaks fails what depends on the peer with `ProcessFailed`
/// naming it, whose source is the transport's error with the I/O error
/// inside; a failure the transport reports itself keeps its cause too.
#[tokio::test(flavor = "current_thread")]
async fn a_broken_link_fails_the_peer_with_its_cause() {
    let broken = Arc::new(AtomicBool::new(false));
    let (inboxes, receivers): (Vec<_>, Vec<_>) = (0..3).map(|_| unbounded_channel()).unzip();
    let eps: Vec<Endpoint> = (0..3)
        .map(|r| Endpoint::new(r, 3, Config::default(), Breakable { me: r, inboxes: inboxes.clone(), broken: broken.clone() }).unwrap())
        .collect();
    for (ep, mut rx) in eps.iter().zip(receivers) {
        let weak = ep.downgrade();
        tokio::spawn(async move {
            while let Some((from, frame)) = rx.recv().await {
                let Some(ep) = weak.upgrade() else { return };
                let _ = ep.handle_frame(from, frame);
            }
        });
    }
    for ep in &eps {
        ep.connected().await;
    }
    let zero = eps[0].world();
    broken.store(true, Ordering::SeqCst);
    let e = zero.ssend(&[7u8; 16][..], 1, 0).await.expect_err("the link is broken");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. }), "{e:?}");
    let causes = chain(&e);
    assert_eq!(causes.len(), 3, "{causes:?}");
    assert_eq!(causes[1], "transport error: writing to rank 1");
    assert_eq!(causes[2], "connection reset by peer");
    // Later operations on rank 1 fail with the same cause.
    let later = zero.recv_vec::<u8>(1, 0).await.expect_err("rank 1 has failed");
    assert_eq!(chain(&later), causes);

    // A transport that sees a connection break tells the endpoint so.
    let io = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "stream closed mid-frame");
    eps[1].peer_failed(2, Error::transport("reading from rank 2", io));
    let e = eps[1].world().recv_vec::<u8>(2, 0).await.expect_err("rank 2 is lost");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 2, .. }), "{e:?}");
    assert_eq!(chain(&e)[1..], ["transport error: reading from rank 2", "stream closed mid-frame"]);
}

/// A stream of messages from any source goes on when one sender fails
/// while its message is on the way: it yields that failure, then the next
/// message of a rank still alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_any_source_stream_outlives_a_failed_sender() {
    use futures::StreamExt;
    use mpx::proto::wire::Kind;
    let config = Config { eager_threshold: 1024, unsolicited_credit: 0, ..Config::default() };
    let (inboxes, receivers): (Vec<_>, Vec<_>) = (0..3).map(|_| unbounded_channel::<(usize, Frame)>()).unzip();
    let unbroken = Arc::new(AtomicBool::new(false));
    let eps: Vec<Endpoint> = (0..3)
        .map(|r| Endpoint::new(r, 3, config, Breakable { me: r, inboxes: inboxes.clone(), broken: unbroken.clone() }).unwrap())
        .collect();
    for (r, (ep, mut rx)) in eps.iter().zip(receivers).enumerate() {
        let weak = ep.downgrade();
        tokio::spawn(async move {
            while let Some((from, frame)) = rx.recv().await {
                // Rank 1 takes nothing but hellos: the data of its message
                // never moves.
                if r == 1 && frame.header.kind != Kind::Hello {
                    continue;
                }
                let Some(ep) = weak.upgrade() else { return };
                let _ = ep.handle_frame(from, frame);
            }
        });
    }
    for ep in &eps {
        ep.connected().await;
    }
    let mut stream = eps[0].world().incoming::<[u8; 2048]>(Any, 0);
    let stuck = eps[1].world().isend(&[1u8; 2048], 0, 0);
    // Rank 1's request to send reaches the stream's receive, which answers it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let io = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "stream closed mid-frame");
    eps[0].peer_failed(1, Error::transport("reading from rank 1", io));
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("no hang");
    assert!(matches!(first, Some(Err(ref e)) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "{first:?}");
    let sent = eps[2].world().isend(&[2u8; 2048], 0, 0);
    let next = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("no hang");
    let (value, status) = next.expect("the stream goes on").expect("rank 2's message");
    assert_eq!((value[0], status.source), (2, Some(2)));
    sent.await.unwrap();
    drop(stuck);
}

/// The endpoint keeps state for a request only while it is under way:
/// receives polled and then cancelled (a `Request`, an `OwnedRecv`), a
/// matched receive dropped before its poll (its message goes back and is
/// received again), and a rendezvous send dropped in flight all leave
/// nothing behind once done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_kept_for_requests_done_with() {
    let config = Config { eager_threshold: 1024, ..Config::default() };
    let stall = Arc::new(Stall { on: AtomicBool::new(false), held: Mutex::new((Vec::new(), 0)), sender: OnceLock::new() });
    let (endpoints, _) = net(2, config, &stall);
    for e in &endpoints {
        tokio::time::timeout(Duration::from_secs(10), e.connected()).await.expect("connected");
    }
    let (zero, one) = (endpoints[0].world(), endpoints[1].world());
    let mut byte = 0u8;

    // A receive request polled, then cancelled.
    let mut recv = one.irecv(&mut byte, 0, 1);
    assert!(futures::poll!(&mut recv).is_pending());
    assert_eq!(endpoints[1].tracked_requests(), 1);
    assert!(recv.cancel());
    assert!(recv.await.unwrap().test_cancelled());

    // An owned receive polled, then cancelled.
    let mut owned = one.irecv_owned(vec![0u8; 4], 0, 2);
    assert!(futures::poll!(&mut owned).is_pending());
    assert!(owned.cancel());
    drop(owned);

    // A matched receive dropped unpolled: its message is received again.
    let recv = one.irecv(&mut byte, 0, 3);
    zero.send(&9u8, 1, 3).await.unwrap();
    // (By then the delivery task has handed the message over and it has
    // matched the receive; were it still on its way, the receive would be
    // withdrawn instead, which must leave nothing behind either.)
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(recv);
    let (again, _) = tokio::time::timeout(Duration::from_secs(10), one.recv::<u8>(0, 3)).await.expect("in time").unwrap();
    assert_eq!(again, 9);

    // A rendezvous send dropped in flight still arrives.
    drop(zero.isend(vec![5u8; 100_000], 1, 4));
    let (data, _) = tokio::time::timeout(Duration::from_secs(10), one.recv_vec::<u8>(0, 4)).await.expect("in time").unwrap();
    assert_eq!(data, vec![5u8; 100_000]);
    // The sender hears of the delivery a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while endpoints[0].tracked_requests() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!((endpoints[0].tracked_requests(), endpoints[1].tracked_requests()), (0, 0));
}
