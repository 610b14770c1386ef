//! Serde messages: round trips of any serde value in every mode, the mark
//! that keeps them apart from typed and packed messages, and bad bytes.

#![cfg(feature = "serde")]

use std::collections::{BTreeMap, HashMap};

use mpx::prelude::*;
use serde::{Deserialize, Serialize};


#[macro_use]
mod support;
use support::returns;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Event {
    Started { at: u64, by: String },
    Moved(i32, i32),
    Tagged(Vec<String>),
    Stopped,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Journal {
    name: String,
    events: Vec<Event>,
    index: HashMap<String, Vec<u32>>,
    parent: Option<Box<Journal>>,
}

fn journal() -> Journal {
    let inner = Journal {
        name: "inner ✓".into(),
        events: vec![Event::Stopped],
        index: HashMap::new(),
        parent: None,
    };
    Journal {
        name: "outer".into(),
        events: vec![
            Event::Started { at: 17, by: "rank 0".into() },
            Event::Moved(-3, 4),
            Event::Tagged(vec!["a".into(), String::new(), "ccc".into()]),
            Event::Stopped,
        ],
        index: HashMap::from([("moves".into(), vec![1]), ("all".into(), vec![0, 1, 2, 3])]),
        parent: Some(Box::new(inner)),
    }
}

/// A recursive type: each level is a length, then that many children.
#[derive(Debug, Deserialize)]
struct Tree(#[allow(dead_code)] Vec<Tree>);

/// A value whose serialization always fails.
struct Unserializable;

impl Serialize for Unserializable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("this value cannot be serialized"))
    }
}

each_transport! {
    /// Strings, enums with data, maps and nested values arrive as sent,
    /// blocking and nonblocking, in every mode, small and large.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn values_round_trip_in_every_mode() {
        let run = launch(2, |comm| async move {
            let big: Vec<String> = (0..20_000).map(|i| format!("item {i}")).collect();
            if comm.rank() == 0 {
                comm.send(Serde("plain text"), 1, 0).await?;
                comm.send(Serde(&Event::Started { at: 1, by: "me".into() }), 1, 1).await?;
                comm.ssend(Serde(&BTreeMap::from([(3u8, 'c'), (1, 'a')])), 1, 2).await?;
                comm.isend(Serde(&journal()), 1, 3).await?;
                comm.issend(Serde(&big), 1, 4).await?;
                comm.buffer_attach(vec![0; 1024])?;
                comm.bsend(Serde(&vec![Event::Moved(1, 2)]), 1, 5).await?;
                comm.ibsend(Serde(&()), 1, 6).await?;
                comm.buffer_detach().await?;
                comm.recv::<u8>(1, 99).await?; // rank 1's ready receives are posted
                comm.rsend(Serde(&Some(-1i64)), 1, 7).await?;
                comm.irsend(Serde(&big), 1, 8).await?;
                return Ok(());
            }
            let ready = comm.recv::<Serde<Option<i64>>>(0, 7);
            let ready_big = comm.recv::<Serde<Vec<String>>>(0, 8);
            assert_eq!(comm.recv::<Serde<String>>(0, 0).await?.0, "plain text");
            assert_eq!(comm.recv::<Serde<Event>>(0, 1).await?.0, Event::Started { at: 1, by: "me".into() });
            let (map, status) = comm.recv::<Serde<BTreeMap<u8, char>>>(Any, Any).await?;
            assert_eq!(map.into_iter().collect::<Vec<_>>(), [(1, 'a'), (3, 'c')]);
            assert_eq!((status.source, status.tag), (Some(0), Some(2)));
            assert_eq!(comm.recv::<Serde<Journal>>(0, 3).await?.0, journal());
            let (got, status) = comm.recv::<Serde<Vec<String>>>(0, 4).await?;
            assert_eq!(got, big);
            assert!(status.bytes > 100_000, "a rendezvous-sized message: {} bytes", status.bytes);
            assert_eq!(comm.recv::<Serde<Vec<Event>>>(0, 5).await?.0, [Event::Moved(1, 2)]);
            comm.recv::<Serde<()>>(0, 6).await?;
            comm.send(&[0u8], 0, 99).await?;
            assert_eq!(ready.await?.0, Some(-1));
            assert_eq!(ready_big.await?.0, big);
            Ok(())
        });
        returns(run).await;
    }

    /// A typed receive of a serde message is a type mismatch, whatever the
    /// buffer; so is a serde receive of a typed or packed message. A receive
    /// as packed bytes takes a serde message's postcard bytes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serde_and_typed_messages_do_not_mix() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 0 {
                for tag in 0..3 {
                    comm.send(Serde(&[7u8; 8]), 1, tag).await?;
                }
                comm.send(&[1u32, 2], 1, 3).await?;
                comm.send(&[0u8; 0], 1, 4).await?;
                comm.send(SendBuf::packed(&[1, 2, 3]), 1, 5).await?;
                comm.send(Serde("raw"), 1, 6).await?;
                comm.send(Serde("still fine"), 1, 7).await?;
                return Ok(());
            }
            assert_eq!(comm.recv::<u8>(0, 0).await.unwrap_err(), ErrorKind::TypeMismatch);
            let mut small = [0u16; 1]; // too small for the message's 8 bytes, too
            assert_eq!(comm.recv_into(&mut small, 0, 1).await.unwrap_err(), ErrorKind::TypeMismatch);
            let message = comm.mprobe(0, 2).await?;
            let mut exact = [0u8; 8];
            assert_eq!(message.recv_into(&mut exact).await.unwrap_err(), ErrorKind::TypeMismatch);
            assert_eq!(exact, [0; 8], "the buffer is untouched");
            for tag in 3..6 {
                assert_eq!(comm.recv::<Serde<Vec<u8>>>(0, tag).await.unwrap_err(), ErrorKind::TypeMismatch, "tag {tag}");
            }
            let (bytes, _) = comm.irecv_bytes(0, 6).await?;
            assert_eq!(postcard::from_bytes::<String>(&bytes).unwrap(), "raw");
            assert_eq!(comm.recv::<Serde<String>>(0, 7).await?.0, "still fine");
            Ok(())
        });
        returns(run).await;
    }

    /// Bytes that are not the value asked for are an error, never a panic:
    /// arbitrary bytes (a byte array travels as its bytes), a length far
    /// beyond the message, bytes left over, nesting deeper than the stack
    /// allows. Later messages arrive as usual.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_bytes_are_an_error() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 0 {
                comm.send(Serde(&[0xffu8; 12]), 1, 0).await?; // not a length, not UTF-8
                comm.send(Serde(&u64::MAX), 1, 0).await?; // a length of 2^64 - 1
                comm.send(Serde(&(u32::MAX, 1u8)), 1, 0).await?; // 4 billion elements claimed
                comm.send(Serde(&(5u8, 6u8)), 1, 0).await?; // one byte left over
                comm.send(Serde(&7u8), 1, 0).await?; // not a variant of `Event`
                comm.send(Serde(&(2u8, [0xc0u8, 0x80])), 1, 0).await?; // a string of overlong UTF-8
                comm.send(Serde(&vec![1u8; 1 << 20]), 1, 0).await?; // a tree a million levels deep
                comm.send(Serde("fine"), 1, 0).await?;
                return Ok(());
            }
            let bad = |e: Error| assert!(matches!(e.kind(), ErrorKind::Serialization(_)), "{e:?}");
            bad(comm.recv::<Serde<String>>(0, 0).await.unwrap_err());
            bad(comm.recv::<Serde<Vec<u8>>>(0, 0).await.unwrap_err());
            bad(comm.recv::<Serde<Vec<u64>>>(0, 0).await.unwrap_err());
            bad(comm.recv::<Serde<u8>>(0, 0).await.unwrap_err());
            bad(comm.recv::<Serde<Event>>(0, 0).await.unwrap_err());
            bad(comm.recv::<Serde<String>>(0, 0).await.unwrap_err());
            bad(comm.recv::<Serde<Tree>>(0, 0).await.unwrap_err());
            assert_eq!(comm.recv::<Serde<String>>(0, 0).await?.0, "fine");
            Ok(())
        });
        returns(run).await;
    }

    /// A value that cannot be serialized fails the send, which sends
    /// nothing; the null process takes sends and has no value to receive.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_serialization_and_the_null_process() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 0 {
                let err = comm.send(Serde(&Unserializable), 1, 0).await.unwrap_err();
                assert!(matches!(err.kind(), ErrorKind::Serialization(m) if m.contains("Unserializable")), "{err:?}");
                comm.send(Serde("after"), 1, 0).await?;
                comm.send(Serde("nobody"), PROC_NULL, 0).await?;
                let err = comm.recv::<Serde<String>>(PROC_NULL, 0).await.unwrap_err();
                assert!(matches!(err.kind(), ErrorKind::InvalidArgument(_)), "{err:?}");
                assert!(matches!(comm.send(Serde("x"), 5, 0).await, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidRank { .. })));
                return Ok(());
            }
            assert_eq!(comm.recv::<Serde<String>>(0, 0).await?.0, "after");
            Ok(())
        });
        returns(run).await;
    }

    /// A serde receive dropped before or after its message matched loses
    /// nothing: the next receive gets every message, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropped_serde_receives_lose_nothing() {
        let run = launch(2, |comm| async move {
            if comm.rank() == 0 {
                comm.recv::<u8>(1, 9).await?;
                for i in 0..3u32 {
                    comm.send(Serde(&format!("message {i}")), 1, 0).await?;
                }
                comm.send(&[0u8], 1, 10).await?;
                return Ok(());
            }
            drop(comm.recv::<Serde<String>>(0, 0)); // posted, withdrawn unmatched
            let matched = comm.recv::<Serde<String>>(0, 0);
            comm.send(&[0u8], 0, 9).await?;
            comm.recv::<u8>(0, 10).await?; // all three have arrived; `matched` took the first
            drop(matched);
            for i in 0..3u32 {
                assert_eq!(comm.recv::<Serde<String>>(0, 0).await?.0, format!("message {i}"));
            }
            Ok(())
        });
        returns(run).await;
    }
}
