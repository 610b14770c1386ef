//! Dropping receive and send futures at every point loses no message and
//! misdelivers none.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use mpx::prelude::*;
use mpx::LaunchOptions;

#[macro_use]
mod support;

each_transport! {
/// Polls `fut` at most `polls` times (with a no-op waker, yielding between
/// polls so the drivers run), then drops it. Returns its output if it
/// completed.
async fn poll_then_drop<F: Future + Unpin>(mut fut: F, polls: u32) -> Option<F::Output> {
    for _ in 0..polls {
        if let Poll::Ready(v) = Pin::new(&mut fut).poll(&mut Context::from_waker(Waker::noop())) {
            return Some(v);
        }
        tokio::task::yield_now().await;
    }
    None
}

/// A small deterministic generator, so failures reproduce.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

const MESSAGES: u64 = 3000;

async fn dropping_receives(opts: LaunchOptions) {
    let out = launch_with(opts, |comm| async move {
        if comm.rank() == 0 {
            let mut rng = Lcg(7);
            for i in 0..MESSAGES {
                let len = if rng.next(5) == 0 { 300 } else { 2 }; // some rendezvous
                let mut v = vec![i; len];
                v[len - 1] = !i;
                // Sends dropped at random points still deliver.
                let send = comm.isend(&v, 1, (i % 3) as i32);
                let polls = rng.next(3) as u32;
                let _ = poll_then_drop(send, polls).await;
            }
            Ok(0)
        } else {
            let mut rng = Lcg(11);
            let mut next = 0u64;
            let mut buf = vec![0u64; 300];
            let mut dropped = 0u64;
            while next < MESSAGES {
                // A receive polled 0, 1 or 2 times, then dropped unless done.
                let req = comm.irecv(&mut buf, 0, Any);
                let polls = rng.next(3) as u32;
                match poll_then_drop(req, polls).await {
                    Some(result) => {
                        let st = result?;
                        let n = st.count::<u64>().unwrap() as usize;
                        assert_eq!(buf[0], next, "lost, duplicated or reordered");
                        assert_eq!(buf[n - 1], !next);
                        assert_eq!(st.tag, Some((next % 3) as i32));
                        next += 1;
                    }
                    None => dropped += 1,
                }
            }
            assert!(comm.iprobe(Any, Any)?.is_none());
            Ok(dropped)
        }
    })
    .await
    .unwrap();
    assert!(out[1] > 100, "the test dropped receives ({} times)", out[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_receives_and_sends_lose_nothing() {
    dropping_receives(options(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_receives_and_sends_lose_nothing_under_rendezvous() {
    let mut opts = options(2);
    opts.engine.eager_threshold = 0;
    dropping_receives(opts).await;
}

#[tokio::test(flavor = "current_thread")]
async fn dropped_receives_on_a_current_thread_runtime() {
    let mut opts = options(2);
    opts.engine.eager_credit = 4 * mpx::proto::engine::EAGER_OVERHEAD;
    dropping_receives(opts).await;
}

/// A receive too small for its message (eager or rendezvous, the same)
/// that is dropped before its error is taken gives the message back
/// whole: the next receive gets it. One whose error is taken has received
/// the message (as MPI says): the next receive gets the one after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncating_receive_dropped_unread_gives_its_message_back_whole() {
    for len in [1usize << 10, 1 << 20] {
        launch(2, move |comm| async move {
            if comm.rank() == 0 {
                for i in 0..3u8 {
                    comm.send(&vec![i; len], 1, 0).await?;
                }
                return Ok(());
            }
            let mut small = [0u8; 16];
            // Matched, failed, dropped unread.
            let early = comm.irecv(&mut small[..], 0, 0);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            drop(early);
            let mut whole = vec![9u8; len];
            let status = comm.recv_into(&mut whole[..], 0, 0).await?;
            assert_eq!(status.bytes, len as u64, "{len}");
            assert!(whole.iter().all(|&b| b == 0), "{len}: the first message, whole");
            // Its error taken: the second message is received (truncated).
            let err = comm.recv_into(&mut small[..], 0, 0).await.unwrap_err();
            assert!(matches!(err.kind(), mpx::ErrorKind::Truncate { available: 16, .. }), "{len}: {err:?}");
            assert_eq!(small, [0u8; 16], "{len}: a truncated receive writes nothing");
            comm.recv_into(&mut whole[..], 0, 0).await?;
            assert!(whole.iter().all(|&b| b == 2), "{len}: the third message");
            assert!(comm.iprobe(Any, Any)?.is_none());
            Ok(())
        })
        .await
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaked_futures_are_sound() {
    launch(2, |comm| async move {
        if comm.rank() == 0 {
            let data = vec![5u8; 100];
            std::mem::forget(comm.isend(&data, 1, 0));
            drop(data); // the engine owns its own copy
            comm.send(&[6u8], 1, 1).await?;
        } else {
            let mut buf = vec![0u8; 100];
            // A leaked receive: it stays posted and takes the next tag-0
            // message, but never writes into `buf` (the data waits in the
            // engine for a poll that never comes).
            std::mem::forget(comm.irecv(&mut buf, 0, 0));
            comm.recv_vec::<u8>(0, 1).await?;
            buf.fill(1);
            assert!(buf.iter().all(|&b| b == 1));
        }
        Ok(())
    })
    .await
    .unwrap();
}

/// The async functions too: `recv_into`, `recv`, matched receives and
/// synchronous sends, each dropped after a random number of polls.
async fn dropping_async_functions(sender_waits: bool) {
    let mut opts = options(2);
    opts.engine.eager_threshold = 64;
    let run = launch_with(opts, move |comm| async move {
        const N: u64 = 1500;
        if comm.rank() == 0 {
            let mut rng = Lcg(3);
            for i in 0..N {
                let len = if rng.next(4) == 0 { 40 } else { 1 };
                let v = vec![i; len];
                let polls = rng.next(3) as u32;
                if rng.next(2) == 0 {
                    let _ = poll_then_drop(Box::pin(comm.ssend(&v, 1, 0)), polls).await;
                } else {
                    let _ = poll_then_drop(Box::pin(comm.send(&v, 1, 0)), polls).await;
                }
            }
            if sender_waits {
                // Stay until the receiver has everything (tag 1).
                comm.recv_vec::<u8>(1, 1).await?;
            }
            // Otherwise return at once: the receiver then takes the rest from
            // a rank that has finished.
            Ok(0)
        } else {
            let mut rng = Lcg(5);
            let mut next = 0u64;
            let mut dropped = 0;
            let mut buf = vec![0u64; 40];
            while next < N {
                let polls = rng.next(3) as u32;
                let first = match rng.next(3) {
                    0 => poll_then_drop(Box::pin(comm.recv_into(&mut buf, 0, Any)), polls).await.map(|r| r.map(|_| buf[0])),
                    1 => poll_then_drop(Box::pin(comm.recv_vec::<u64>(0, 0)), polls).await.map(|r| r.map(|(v, _)| v[0])),
                    _ => {
                        let taken = poll_then_drop(Box::pin(comm.mprobe(0, Any)), polls).await;
                        match taken {
                            Some(Ok(m)) => {
                                let polls = rng.next(3) as u32;
                                poll_then_drop(m.irecv(&mut buf), polls).await.map(|r| r.map(|_| buf[0]))
                            }
                            Some(Err(e)) => Some(Err(e)),
                            None => None,
                        }
                    }
                };
                match first {
                    Some(v) => {
                        assert_eq!(v?, next, "lost, duplicated or reordered");
                        next += 1;
                    }
                    None => dropped += 1,
                }
            }
            assert!(comm.iprobe(Any, Any)?.is_none());
            if sender_waits {
                comm.send(&[0u8], 0, 1).await?;
            }
            Ok(dropped)
        }
    });
    // A lost message would leave the receiver waiting: fail instead of hanging.
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), run).await.expect("every message arrived").unwrap();
    assert!(out[1] > 100, "the test dropped futures ({} times)", out[1]);
}

/// Length, in `u64`s, of the large messages of the streaming tests (4 MiB).
const LEN: usize = 1 << 19;

/// Message `m` of the streaming tests: each value says its message and place.
fn pattern(m: u64) -> Vec<u64> {
    (0..LEN as u64).map(|i| m << 32 | i).collect()
}

/// Two ranks whose large messages go by rendezvous in small chunks, and
/// whose receives take their data as it arrives, in small steps.
fn streaming_options() -> mpx::LaunchOptions {
    let mut opts = options(2);
    opts.engine.eager_threshold = 64;
    opts.engine.rndv_chunk = 16 << 10;
    opts.engine.stream_step = 32 << 10;
    opts
}

/// A receive of a large message puts the data in its buffer as it
/// arrives (over a network); dropped part way, it gives what it took
/// back, and the next receive gets the whole message. Each way of ending,
/// in turn: the receive dropped as soon as it holds some data, dropped
/// later, and (the last two) awaited to the end. A receive whose message
/// came whole before it was looked at (a busy machine) is awaited
/// instead; over a network at least two of the ten must have been
/// dropped part way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_dropped_while_its_data_arrives_gives_it_back() {
    const MESSAGES: u64 = 12;
    let run = launch_with(streaming_options(), |comm| async move {
        if comm.rank() == 0 {
            for m in 0..MESSAGES {
                comm.send(&pattern(m), 1, 0).await?;
            }
            return Ok(0);
        }
        let mut buf = vec![0u64; LEN];
        let mut dropped_with_data = 0;
        for m in 0..MESSAGES {
            let mut req = comm.irecv(&mut buf, 0, 0);
            // Until it holds data (or, for every other message, some more),
            // then dropped; the last two are awaited to the end.
            let enough = if m % 2 == 0 { 1 } else { 1 << 20 };
            let mut done = None;
            while m < MESSAGES - 2 && req.bytes_taken_early() < enough {
                if let Some(outcome) = req.test() {
                    done = Some(outcome);
                    break;
                }
                tokio::task::yield_now().await;
            }
            if m < MESSAGES - 2 && done.is_none() {
                assert!(req.bytes_taken_early() >= enough);
                dropped_with_data += 1;
                drop(req);
                let mut whole = vec![0u64; LEN];
                let status = comm.recv_into(&mut whole, 0, 0).await?;
                assert_eq!(status.bytes, LEN as u64 * 8);
                assert!(whole == pattern(m), "message {m}: the next receive got it damaged");
            } else {
                let status = match done {
                    Some(outcome) => {
                        drop(req);
                        outcome?
                    }
                    None => req.await?,
                };
                assert_eq!(status.bytes, LEN as u64 * 8);
                assert!(buf == pattern(m), "message {m} arrived damaged");
            }
        }
        Ok(dropped_with_data)
    });
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), run).await.expect("every message arrived").unwrap();
    // In one process the data of a message arrives in one go, while its
    // receive waits: only over a network does a receive hold part of one.
    if module_path!().ends_with("quic") {
        assert!(out[1] >= 2, "only {} receives were dropped holding data", out[1]);
    }
}

/// A receive freed (`MPI_Request_free`) part way through its message's
/// data, or matched by a large message too long for it, still takes that
/// message: its sender completes, its buffer is written no further, and
/// the next receive gets the next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_freed_while_its_data_arrives_still_takes_it() {
    let run = launch_with(streaming_options(), |comm| async move {
        if comm.rank() == 0 {
            for m in 0..4u64 {
                comm.send(&pattern(m), 1, 0).await?;
                comm.send(&pattern(m + 100), 1, 0).await?;
            }
            comm.send(&pattern(7), 1, 1).await?; // too long for the freed receive
            comm.send(&[9u8], 1, 1).await?;
            return Ok(0);
        }
        let mut freed_with_data = 0;
        for m in 0..4u64 {
            let mut buf = vec![0u64; LEN];
            let mut req = comm.irecv(&mut buf, 0, 0);
            let mut done = false;
            while req.bytes_taken_early() == 0 {
                if req.test().is_some() {
                    done = true;
                    break;
                }
                tokio::task::yield_now().await;
            }
            if !done {
                let taken = req.bytes_taken_early();
                req.free();
                freed_with_data += 1;
                let copy = buf.clone();
                let mut next = vec![0u64; LEN];
                comm.recv_into(&mut next, 0, 0).await?;
                assert!(next == pattern(m + 100), "message {m}: the freed receive did not take its message whole");
                assert_eq!(buf, copy, "written after it was freed");
                assert!(buf[..taken / 8] == pattern(m)[..taken / 8], "what it took before it was freed");
            } else {
                drop(req);
                comm.recv_into(&mut buf, 0, 0).await?;
            }
        }
        let mut short = [0u64; 4];
        comm.irecv(&mut short, 0, 1).free();
        assert_eq!(comm.recv_vec::<u8>(0, 1).await?.0, [9]);
        assert_eq!(short, [0; 4]);
        Ok(freed_with_data)
    });
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), run).await.expect("every send completed").unwrap();
    if module_path!().ends_with("quic") {
        assert!(out[1] >= 1, "no receive was freed holding data");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_async_functions_lose_nothing() {
    dropping_async_functions(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_async_functions_lose_nothing_after_the_sender_returns() {
    dropping_async_functions(false).await;
}
}
