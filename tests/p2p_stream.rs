//! Incoming messages as a `Stream` (`Comm::incoming`): order, errors,
//! the end of the stream, deadlines, and drops that lose nothing.

#![cfg(feature = "serde")]

use std::time::Duration;

use futures::stream::FusedStream;
use futures::StreamExt;
use mpx::prelude::*;
use mpx::MpiType;


#[macro_use]
mod support;
use support::{returns, LIMIT};

/// A typed value with a field that needs validation.
#[derive(Debug, Clone, Copy, Default, PartialEq, MpiType)]
#[repr(C)]
struct Reading {
    sensor: u16,
    valid: bool,
    value: f64,
}

each_transport! {
    /// Typed and serde streams yield every message in the order sent, with
    /// its status; an any-source stream keeps each sender's order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streams_yield_in_order() {
        let run = launch(3, |comm| async move {
            const N: usize = 50;
            if comm.rank() > 0 {
                for i in 0..N {
                    let reading = Reading { sensor: comm.rank() as u16, valid: i % 2 == 0, value: i as f64 };
                    comm.send(&[reading], 0, 1).await?;
                }
                for i in 0..N {
                    // Every tenth text is long enough for the rendezvous path.
                    let text = "x".repeat(if i % 10 == 0 { 100_000 } else { i });
                    comm.send(Serde(&(i, text)), 0, 2).await?;
                }
                return Ok(());
            }
            let mut readings = comm.incoming::<Reading>(Any, 1);
            let mut next_of = [0usize; 3];
            for _ in 0..2 * N {
                let (reading, status) = readings.next().await.expect("a reading")?;
                let from = status.source.expect("a source");
                assert_eq!(reading.sensor as usize, from);
                let i = next_of[from];
                assert_eq!(reading, Reading { sensor: from as u16, valid: i % 2 == 0, value: i as f64 });
                assert_eq!((status.tag, status.bytes), (Some(1), Reading::datatype().size()));
                next_of[from] += 1;
            }
            drop(readings);
            for from in 1..3 {
                let mut texts = comm.incoming::<Serde<(usize, String)>>(from, 2);
                for i in 0..N {
                    let ((n, text), status) = texts.next().await.expect("a text")?;
                    assert_eq!((n, text.len(), status.source), (i, if i % 10 == 0 { 100_000 } else { i }, Some(from)));
                }
            }
            Ok(())
        });
        returns(run).await;
    }

    /// A message that does not become a value is yielded as its error and
    /// the stream goes on: a serde message in a typed stream, a typed one in
    /// a serde stream, a message with no whole value or more than one, an
    /// invalid value.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_messages_are_errors_and_the_stream_goes_on() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 0 {
                comm.send(Serde(&5u32), 1, 0).await?;
                comm.send(&[0u8; 0], 1, 0).await?;
                comm.send(&[1u32, 2], 1, 0).await?;
                comm.send(&vec![9u32; 100_000], 1, 0).await?; // rendezvous, far too long
                comm.send(&[6u32], 1, 0).await?;
                comm.send(&[1u32], 1, 1).await?;
                comm.send(Serde(&[0xffu8; 3]), 1, 1).await?;
                comm.send(Serde("ok"), 1, 1).await?;
                let mut raw = vec![0u8; Reading::datatype().pack_size(1)?];
                mpx::pack(&[Reading { sensor: 1, valid: true, value: 2.0 }], &mut raw, &mut 0)?;
                raw[2] = 5; // `valid` is neither 0 nor 1
                comm.send(SendBuf::packed(&raw), 1, 2).await?;
                comm.send(&[Reading { sensor: 3, valid: false, value: 4.0 }], 1, 2).await?;
                return Ok(());
            }
            let mut numbers = comm.incoming::<u32>(0, 0);
            assert_eq!(numbers.next().await.unwrap().unwrap_err(), ErrorKind::TypeMismatch);
            assert!(matches!(numbers.next().await.unwrap(), Err(ref e) if matches!(e.kind(), ErrorKind::ShortInput { requested: 4, available: 0 })));
            assert!(matches!(numbers.next().await.unwrap(), Err(ref e) if matches!(e.kind(), ErrorKind::Truncate { .. })));
            assert!(matches!(numbers.next().await.unwrap(), Err(ref e) if matches!(e.kind(), ErrorKind::Truncate { .. })));
            assert_eq!(numbers.next().await.unwrap()?.0, 6);

            let mut texts = comm.incoming::<Serde<String>>(0, 1);
            assert_eq!(texts.next().await.unwrap().unwrap_err(), ErrorKind::TypeMismatch);
            assert!(matches!(texts.next().await.unwrap(), Err(ref e) if matches!(e.kind(), ErrorKind::Serialization(_))));
            assert_eq!(texts.next().await.unwrap()?.0, "ok");

            // A packed message has no signature: it unpacks, and is validated.
            let mut readings = comm.incoming::<Reading>(0, 2);
            assert!(matches!(readings.next().await.unwrap(), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidValue { .. })));
            assert_eq!(readings.next().await.unwrap()?.0, Reading { sensor: 3, valid: false, value: 4.0 });
            Ok(())
        });
        returns(run).await;
    }

    /// Dropping a stream whose receive is posted but unmatched, or whose
    /// receive matched a message it had not yielded, loses nothing: the next
    /// receive gets every message, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_a_stream_loses_nothing() {
        let run = launch(2, |comm| async move {
            const N: u32 = 6;
            if comm.rank() == 0 {
                comm.recv::<u8>(1, 9).await?;
                for i in 0..N {
                    comm.send(&[i], 1, 0).await?;
                    comm.send(Serde(&format!("text {i}")), 1, 1).await?;
                }
                comm.send(&[0u8], 1, 10).await?;
                return Ok(());
            }
            // Posted, never matched: polled once, then dropped.
            let mut early = comm.incoming::<u32>(0, 0);
            assert!(tokio::time::timeout(Duration::from_millis(10), early.next()).await.is_err());
            drop(early);
            let numbers = comm.incoming::<u32>(0, 0);
            let mut texts = comm.incoming::<Serde<String>>(0, 1);
            comm.send(&[0u8], 0, 9).await?;
            comm.recv::<u8>(0, 10).await?; // everything has arrived
            // `numbers` matched message 0 and never yielded it.
            drop(numbers);
            assert_eq!(comm.iprobe(0, 0)?.map(|s| s.bytes), Some(4));
            assert_eq!(comm.recv::<u32>(0, 0).await?.0, 0);
            // `texts` yielded two and matched the third.
            for i in 0..2 {
                assert_eq!(texts.next().await.expect("a text")?.0, format!("text {i}"));
            }
            drop(texts);
            for i in 2..N {
                assert_eq!(comm.recv::<Serde<String>>(0, 1).await?.0, format!("text {i}"));
            }
            for i in 1..N {
                assert_eq!(comm.recv::<u32>(0, 0).await?.0, i);
            }
            Ok(())
        });
        returns(run).await;
    }

    /// A deadline from `tokio::time::timeout`: a `next()` that times out
    /// leaves the stream as it was, and the late message is yielded next.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_timed_out_next_loses_nothing() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 0 {
                for i in 0..3u64 {
                    comm.recv::<u8>(1, 9).await?;
                    comm.send(Serde(&vec![i; i as usize]), 1, 0).await?;
                }
                return Ok(());
            }
            let mut vectors = comm.incoming::<Serde<Vec<u64>>>(0, 0);
            for i in 0..3u64 {
                let late = tokio::time::timeout(Duration::from_millis(20), vectors.next()).await;
                assert!(late.is_err(), "nothing was sent yet");
                comm.send(&[0u8], 0, 9).await?;
                let (v, _) = tokio::time::timeout(LIMIT, vectors.next()).await.expect("in time").expect("a value")?;
                assert_eq!(v, vec![i; i as usize]);
            }
            Ok(())
        });
        returns(run).await;
    }

    /// A stream from a sender that finishes yields its messages, then the
    /// failure, then ends; a stream from the null process is empty, and one
    /// with a bad rank yields that error and ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streams_end() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 0 {
                for i in 0..3i64 {
                    comm.send(&[i], 1, 0).await?;
                }
                return Ok(());
            }
            let mut numbers = comm.incoming::<i64>(0, 0);
            for i in 0..3 {
                assert_eq!(numbers.next().await.expect("a number")?.0, i);
            }
            assert!(matches!(numbers.next().await, Some(Err(ref e)) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })));
            assert!(numbers.next().await.is_none());
            assert!(numbers.is_terminated());

            let mut nothing = comm.incoming::<Serde<String>>(PROC_NULL, 0);
            assert!(nothing.next().await.is_none());
            let mut bad = comm.incoming::<u8>(7, 0);
            assert!(matches!(bad.next().await, Some(Err(ref e)) if matches!(e.kind(), ErrorKind::InvalidRank { rank: 7, .. })));
            assert!(bad.next().await.is_none());
            Ok(())
        });
        returns(run).await;
    }

    /// A stream is `'static`, `Send` and `Unpin`: a spawned task can serve it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_spawned_task_serves_a_stream() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 0 {
                for i in 0..10u32 {
                    comm.send(Serde(&i.to_string()), 1, 0).await?;
                }
                return Ok(());
            }
            let texts = comm.incoming::<Serde<String>>(0, 0);
            let served = tokio::spawn(async move {
                texts.take(10).map(|item| item.map(|(text, _)| text)).collect::<Vec<_>>().await
            });
            let texts: Vec<String> = served.await.expect("the task ends").into_iter().collect::<mpx::Result<_>>()?;
            assert_eq!(texts, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
            Ok(())
        });
        returns(run).await;
    }
}
