//! Tests of the engine, driven by hand.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::native::{LongDoubleFormat, NativeLayout};
use super::*;

fn msg(dest: u32, tag: i32, data: &'static [u8]) -> Outgoing {
    Outgoing { dest, context: 0, tag, signature: Some((7, data.len() as u64)), repr: Repr::Native, desc_len: 0, data: Bytes::from_static(data) }
}

fn spec(source: Option<u32>, tag: Option<i32>) -> MatchSpec {
    MatchSpec { context: 0, source, tag }
}

/// The next frame any engine has for `dest`... for tests that hold
/// frames back: the next frame of engine `from`, with its destination.
fn next_frame(e: &mut Engine) -> Option<(u32, Frame)> {
    while let Some(dest) = e.poll_writable() {
        if let Some(f) = e.poll_transmit(dest) {
            e.writable(dest); // more may follow for the same peer
            return Some((dest, f));
        }
    }
    None
}

/// Moves every queued frame to its destination engine until all are quiet.
fn pump(engines: &mut [Engine]) {
    loop {
        let mut moved = false;
        for i in 0..engines.len() {
            while let Some((dest, frame)) = next_frame(&mut engines[i]) {
                engines[dest as usize].handle_frame(i as u32, frame).unwrap();
                moved = true;
            }
        }
        if !moved {
            return;
        }
    }
}

/// Completions (connection events left out).
fn events(e: &mut Engine) -> Vec<Event> {
    std::iter::from_fn(|| e.poll_event()).filter(|ev| !matches!(ev, Event::Connected { .. })).collect()
}

/// The receives completed so far, with their data.
fn deliveries(e: &mut Engine) -> Vec<(ReqId, Bytes)> {
    events(e)
        .into_iter()
        .map(|ev| match ev {
            Event::RecvDone { id, result } => (id, result.unwrap().data),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// Two engines that have exchanged hellos.
fn pair(config: Config) -> Vec<Engine> {
    let mut e = vec![Engine::new(0, 2, config).unwrap(), Engine::new(1, 2, config).unwrap()];
    pump(&mut e);
    events(&mut e[0]);
    events(&mut e[1]);
    e
}

#[test]
fn eager_messages_match_in_arrival_order() {
    let mut e = pair(Config::default());
    e[0].post_send(1, SendMode::Standard, msg(1, 5, b"first"));
    e[0].post_send(2, SendMode::Standard, msg(1, 5, b"second"));
    pump(&mut e);
    assert_eq!(events(&mut e[0]).len(), 2);
    e[1].post_recv(10, spec(Some(0), None));
    e[1].post_recv(11, spec(None, Some(5)));
    let got = deliveries(&mut e[1]);
    assert_eq!(got, [(10, Bytes::from_static(b"first")), (11, Bytes::from_static(b"second"))]);
}

#[test]
fn rendezvous_completes_the_send_only_after_a_match() {
    let mut e = pair(Config::default());
    e[0].post_send(1, SendMode::Synchronous, msg(1, 0, b"sync"));
    pump(&mut e);
    assert!(events(&mut e[0]).is_empty(), "no match yet");
    e[1].post_recv(7, spec(Some(0), Some(0)));
    pump(&mut e);
    assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 1, result: Ok(()) }]));
    assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 7, result: Ok(d) }] if d.data == "sync"));
}

#[test]
fn credit_bounds_unexpected_data_then_falls_back_to_rendezvous() {
    // Credit for one 8-byte message, not two.
    let mut e = pair(Config { eager_threshold: 100, eager_credit: eager_cost(8) + 50, ..Config::default() });
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"12345678"));
    e[0].post_send(2, SendMode::Standard, msg(1, 0, b"abcdefgh"));
    pump(&mut e);
    let done: Vec<_> = events(&mut e[0]).into_iter().map(|ev| matches!(ev, Event::SendDone { .. })).collect();
    assert_eq!(done, [true], "the second send waits: no credit left");
    e[1].post_recv(5, spec(None, None));
    e[1].post_recv(6, spec(None, None));
    pump(&mut e);
    assert_eq!(events(&mut e[0]).len(), 1, "second send completed after its match");
    assert_eq!(events(&mut e[1]).len(), 2);
}

#[test]
fn ready_send_without_a_posted_receive_is_refused() {
    let mut e = pair(Config::default());
    e[0].post_send(1, SendMode::Ready, msg(1, 0, b"early"));
    pump(&mut e);
    assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 1, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::NotReady)));
    assert_eq!(e[1].unexpected_len(), 0, "not delivered");
    e[1].post_recv(3, spec(Some(0), Some(0)));
    e[0].post_send(2, SendMode::Ready, msg(1, 0, b"ok"));
    pump(&mut e);
    assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 2, result: Ok(()) }]));
}

#[test]
fn out_of_order_and_forged_frames_are_protocol_errors() {
    let mut e = pair(Config::default());
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"a"));
    e[0].post_send(2, SendMode::Standard, msg(1, 0, b"b"));
    let (_, f1) = next_frame(&mut e[0]).unwrap();
    let (_, f2) = next_frame(&mut e[0]).unwrap();
    assert!(matches!(e[1].handle_frame(0, f2), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    assert!(matches!(e[1].handle_frame(1, f1.clone()), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))), "source mismatch");
    assert!(e[1].is_failed(0));
    let mut e = pair(Config::default());
    let cts = Frame { header: Header { send_id: 99, ..Header::control(Kind::Cts, 0) }, payload: Bytes::new() };
    assert!(e[1].handle_frame(0, cts).is_err());
}

#[test]
fn a_failed_peer_fails_what_depends_on_it() {
    let config = Config::default();
    let mut e = [Engine::new(0, 3, config).unwrap(), Engine::new(1, 3, config).unwrap()];
    e[1].post_recv(1, spec(Some(0), None));
    e[1].post_recv(2, spec(None, None));
    e[1].post_send(3, SendMode::Synchronous, msg(0, 0, b"x"));
    e[1].fail_peer(0, Error::process_failed(0, "connection lost"));
    let ev = events(&mut e[1]);
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert!(matches!(ev[2], Event::PeerFailed { rank: 0 }), "the runtime is told last: {ev:?}");
    assert_eq!(e[1].posted_len(), 1, "the any-source receive stays posted: rank 2 may still send");
    e[1].post_recv(4, spec(Some(0), None));
    assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 4, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { .. })));
    // Once every other rank is gone, any-source receives fail too.
    e[1].fail_peer(2, Error::process_failed(2, "connection lost"));
    // Not failed yet: rank 1 may still send to itself.
    assert!(matches!(events(&mut e[1])[..], [Event::Orphaned { id: 2 }, Event::PeerFailed { rank: 2 }]));
    assert!(e[1].orphaned(2));
    e[1].post_recv(5, spec(Some(1), None));
    assert!(events(&mut e[1]).is_empty(), "a receive from itself can still match");
}

#[test]
fn a_withdrawn_rendezvous_receive_keeps_the_message_in_place() {
    let mut e = pair(Config { eager_threshold: 2, eager_credit: 4 * EAGER_OVERHEAD, ..Config::default() });
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"big one")); // rendezvous
    e[0].post_send(2, SendMode::Standard, msg(1, 0, b"s")); // eager, later
    e[1].post_recv(5, spec(None, None));
    // Deliver the RTS and the eager message, and the CTS, but not the data yet.
    let (_, rts) = next_frame(&mut e[0]).unwrap();
    let (_, eager) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, rts).unwrap();
    e[1].handle_frame(0, eager).unwrap();
    assert!(e[1].withdraw_recv(5), "receive 5 was waiting for data");
    e[1].post_recv(6, spec(None, None));
    assert!(events(&mut e[1]).is_empty(), "receive 6 took the in-flight message, not the later one");
    pump(&mut e);
    assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 6, result: Ok(d) }] if d.data == "big one"));
}

#[test]
fn data_of_a_withdrawn_receive_lands_in_the_messages_place() {
    let mut e = pair(Config { eager_threshold: 2, eager_credit: 4 * EAGER_OVERHEAD, ..Config::default() });
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"big one"));
    e[0].post_send(2, SendMode::Standard, msg(1, 0, b"s"));
    e[1].post_recv(5, spec(None, None));
    let (_, rts) = next_frame(&mut e[0]).unwrap();
    let (_, eager) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, rts).unwrap();
    e[1].handle_frame(0, eager).unwrap();
    assert!(e[1].withdraw_recv(5));
    pump(&mut e); // CTS out, data back: nobody owns it now
    assert_eq!(e[1].unexpected_bytes(), 8, "the data took its place in the queue");
    e[1].post_recv(9, spec(None, None));
    e[1].post_recv(10, spec(None, None));
    let got = deliveries(&mut e[1]);
    assert_eq!(got, [(9, Bytes::from_static(b"big one")), (10, Bytes::from_static(b"s"))]);
}

#[test]
fn rendezvous_data_reaches_a_message_held_by_a_matched_probe() {
    let mut e = pair(Config { eager_threshold: 2, eager_credit: 4 * EAGER_OVERHEAD, ..Config::default() });
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"held"));
    e[1].post_recv(5, spec(None, None));
    let (_, rts) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, rts).unwrap();
    assert!(e[1].withdraw_recv(5));
    let held = e[1].improbe(&spec(None, None)).expect("the in-flight message");
    pump(&mut e); // the data arrives while the probe holds the message
    e[1].mrecv(6, held);
    assert_eq!(deliveries(&mut e[1]), [(6, Bytes::from_static(b"held"))]);
}

#[test]
fn requeued_messages_go_ahead_of_later_ones() {
    let mut e = pair(Config::default());
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"one"));
    e[0].post_send(2, SendMode::Standard, msg(1, 0, b"two"));
    pump(&mut e);
    e[1].post_recv(5, spec(None, None));
    let Some(Event::RecvDone { result: Ok(first), .. }) = e[1].poll_event() else { panic!() };
    e[1].requeue(first);
    e[1].post_recv(6, spec(None, None));
    assert!(matches!(e[1].poll_event(), Some(Event::RecvDone { id: 6, result: Ok(d) }) if d.data == "one"));
}

fn process_failed(ev: &[Event]) -> usize {
    ev.iter()
        .filter(|e| matches!(e, Event::SendDone { result: Err(e), .. } | Event::RecvDone { result: Err(e), .. } if matches!(e.kind(), ErrorKind::ProcessFailed { .. })))
        .count()
}

#[test]
fn sends_to_a_finished_peer_that_need_it_fail() {
    let config = Config { eager_threshold: 16, eager_credit: 2 * eager_cost(10) + 20, ..Config::default() };
    let mut e = pair(config);
    // A rendezvous send waiting for its match when the peer finishes.
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"rendezvous-sized data"));
    pump(&mut e);
    e[1].farewell(false);
    pump(&mut e);
    assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 1, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })));
    // Large, synchronous and ready sends after it finished fail at once.
    e[0].post_send(2, SendMode::Standard, msg(1, 0, b"rendezvous-sized data"));
    e[0].post_send(3, SendMode::Synchronous, msg(1, 0, b"s"));
    e[0].post_send(4, SendMode::Buffered, msg(1, 0, b"rendezvous-sized data"));
    assert_eq!(process_failed(&events(&mut e[0])), 3);
    // Short sends go eagerly while credit lasts, then fail.
    let mut eager_ok = 0;
    for id in 10..20 {
        e[0].post_send(id, SendMode::Standard, msg(1, 0, b"0123456789"));
        match &events(&mut e[0])[..] {
            [Event::SendDone { result: Ok(()), .. }] => eager_ok += 1,
            [Event::SendDone { result: Err(e), .. }] if matches!(e.kind(), ErrorKind::ProcessFailed { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(eager_ok, 2, "the credit holds two 10-byte messages");
    assert!(e[0].is_flushed() || e[0].queued_bytes(1) > 0);
}

/// A peer whose stream of frames ends before its goodbye fails; one that
/// said goodbye first does not, nor does any peer of an engine that has
/// closed (it drops every frame, goodbyes too).
#[test]
fn a_peer_whose_stream_ends_before_its_goodbye_or_its_messages_fails() {
    let mut e = pair(Config::default());
    e[1].post_recv(1, spec(Some(0), None));
    e[1].peer_ended(0);
    let ev = events(&mut e[1]);
    assert!(matches!(ev[..], [Event::RecvDone { id: 1, result: Err(ref err) }, Event::PeerFailed { rank: 0 }] if matches!(err.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{ev:?}");
    assert!(format!("{:?}", ev[0]).contains("ended before its goodbye"), "{ev:?}");

    let mut e = pair(Config::default());
    e[0].farewell(false);
    pump(&mut e);
    events(&mut e[1]);
    e[1].peer_ended(0);
    assert!(events(&mut e[1]).is_empty(), "rank 0 said goodbye");

    let mut e = pair(Config::default());
    e[1].close();
    e[1].peer_ended(0);
    assert!(events(&mut e[1]).iter().all(|ev| !matches!(ev, Event::PeerFailed { .. })), "a closed engine fails nobody");

    // A goodbye that announces a message that never comes on the stream:
    // the receive waiting for it fails once the stream ends.
    let mut e = pair(Config::default());
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"lost"));
    e[0].farewell(false);
    let (_, data) = next_frame(&mut e[0]).expect("the message");
    assert_eq!(data.header.kind, Kind::Eager);
    let (_, bye) = next_frame(&mut e[0]).expect("the goodbye");
    e[1].handle_frame(0, bye).unwrap();
    e[1].post_recv(5, spec(Some(0), None));
    assert!(events(&mut e[1]).is_empty(), "the message may still come");
    e[1].peer_ended(0);
    let ev = events(&mut e[1]);
    assert!(matches!(ev[..], [Event::RecvDone { id: 5, result: Err(ref err) }, ..] if matches!(err.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{ev:?}");
}

/// A finished peer whose streams all end while data it started is still
/// owed (rendezvous data this rank asked for) fails: that data can come no
/// more. The end of its message stream alone does not fail it, since the
/// data may travel on a stream of its own.
#[test]
fn a_finished_peer_whose_streams_end_before_data_it_owes_fails() {
    let mut e = pair(Config { eager_threshold: 8, unsolicited_credit: 0, ..Config::default() });
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"sixteen bytes!!!"));
    let (_, rts) = next_frame(&mut e[0]).expect("the request to send");
    assert_eq!(rts.header.kind, Kind::Rts);
    e[1].handle_frame(0, rts).unwrap();
    e[1].post_recv(5, spec(Some(0), None));
    // A goodbye that counts the one message: all its messages came.
    e[1].handle_frame(0, Frame::control(Header { seq: 1, ..Header::control(Kind::Bye, 0) })).unwrap();
    e[1].peer_ended(0);
    assert!(events(&mut e[1]).is_empty(), "the data may still come on another stream");
    assert!(e[1].anything_waits_on(0));
    e[1].peer_streams_ended(0);
    let ev = events(&mut e[1]);
    assert!(matches!(ev[..], [Event::RecvDone { id: 5, result: Err(ref err) }, ..] if matches!(err.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{ev:?}");
    assert!(!e[1].anything_waits_on(0));

    // A request to send still queued unmatched owes its data too: a
    // receive that takes it later would wait for ever. Its sender fails;
    // the messages that came whole stay, to be received.
    let mut e = pair(Config { eager_threshold: 8, unsolicited_credit: 0, ..Config::default() });
    e[0].post_send(1, SendMode::Standard, msg(1, 1, b"small"));
    e[0].post_send(2, SendMode::Standard, msg(1, 0, b"sixteen bytes!!!"));
    for _ in 0..2 {
        let (_, frame) = next_frame(&mut e[0]).expect("a message");
        e[1].handle_frame(0, frame).unwrap();
    }
    e[1].handle_frame(0, Frame::control(Header { seq: 2, ..Header::control(Kind::Bye, 0) })).unwrap();
    e[1].peer_streams_ended(0);
    assert!(events(&mut e[1]).iter().any(|ev| matches!(ev, Event::PeerFailed { rank: 0 })));
    e[1].post_recv(6, spec(Some(0), Some(0)));
    e[1].post_recv(7, spec(Some(0), Some(1)));
    let ev = events(&mut e[1]);
    assert!(matches!(ev[..], [Event::RecvDone { id: 6, result: Err(ref err) }, Event::RecvDone { id: 7, result: Ok(ref m) }] if matches!(err.kind(), ErrorKind::ProcessFailed { rank: 0, .. }) && m.data[..] == b"small"[..]), "{ev:?}");

    // With nothing owed, a finished peer's streams end quietly.
    let mut e = pair(Config::default());
    e[0].farewell(false);
    pump(&mut e);
    events(&mut e[1]);
    e[1].peer_streams_ended(0);
    assert!(events(&mut e[1]).is_empty(), "rank 0 said goodbye and owes nothing");
}

/// Frames a rank sends itself are handled one after another, however many
/// one frame releases: a clear-to-send that frees a send held for a
/// rendezvous slot frees the 200,000 ready sends held behind it at once.
#[test]
fn a_batch_of_frames_to_itself_takes_no_stack() {
    static DATA: [u8; 64] = [7; 64];
    let config = Config { rndv_slots: 1, eager_threshold: 8, unsolicited_credit: 0, ..Config::default() };
    let mut e = Engine::new(0, 1, config).unwrap();
    events(&mut e);
    e.post_send(1, SendMode::Standard, msg(0, 0, &DATA)); // takes the only slot
    e.post_send(2, SendMode::Standard, msg(0, 0, &DATA)); // held for a slot
    let ready = 200_000;
    for id in 3..3 + ready {
        e.post_send(id, SendMode::Ready, msg(0, 1, b"")); // held behind it
    }
    assert!(events(&mut e).is_empty());
    e.post_recv(1_000_000, spec(Some(0), Some(0)));
    let ev = events(&mut e);
    let refused = ev.iter().filter(|ev| matches!(ev, Event::SendDone { result: Err(err), .. } if matches!(err.kind(), ErrorKind::NotReady))).count();
    assert_eq!(refused, ready as usize, "no receive was posted for the ready sends");
    assert!(ev.iter().any(|ev| matches!(ev, Event::RecvDone { id: 1_000_000, result: Ok(_) })));
}

#[test]
fn the_goodbye_follows_sends_held_for_credit() {
    let config = Config { eager_threshold: 0, rndv_slots: 1, ..Config::default() };
    let mut e = pair(config);
    for id in 1..=3 {
        e[0].post_send(id, SendMode::Standard, msg(1, 0, b"x"));
    }
    e[0].farewell(false);
    pump(&mut e);
    for id in 10..=12 {
        e[1].post_recv(id, spec(Some(0), Some(0)));
        pump(&mut e);
    }
    assert_eq!(deliveries(&mut e[1]).len(), 3, "every send started before the goodbye is received");
    assert_eq!(events(&mut e[0]).len(), 3);
    assert!(e[0].is_flushed());
}

#[test]
fn rendezvous_data_moves_in_chunks_behind_small_messages() {
    let config = Config { eager_threshold: 8, rndv_chunk: 100, ..Config::default() };
    let mut e = pair(config);
    let big: Bytes = (0..1000u32).map(|i| i as u8).collect::<Vec<u8>>().into();
    e[0].post_send(1, SendMode::Standard, Outgoing { data: big.clone(), ..msg(1, 0, b"") });
    e[1].post_recv(7, spec(Some(0), Some(0)));
    // The RTS goes, the CTS comes back: the data is ready to stream.
    let (_, rts) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, rts).unwrap();
    let (_, cts) = next_frame(&mut e[1]).unwrap();
    e[0].handle_frame(1, cts).unwrap();
    let mut first = next_frame(&mut e[0]).unwrap().1;
    assert_eq!((first.header.kind, first.payload.len()), (Kind::RndvData, 100));
    e[0].post_send(2, SendMode::Standard, msg(1, 1, b"small"));
    let second = next_frame(&mut e[0]).unwrap().1;
    assert_eq!(second.header.kind, Kind::Eager, "the small message overtakes the rest of the transfer");
    e[1].handle_frame(0, std::mem::replace(&mut first, second.clone())).unwrap();
    e[1].handle_frame(0, second).unwrap();
    pump(&mut e);
    let got = deliveries(&mut e[1]);
    assert!(got.contains(&(7, big)));
}

/// A frame as a hostile rank 0 would forge it.
fn forged(kind: Kind, seq: u64, payload: &'static [u8]) -> Frame {
    Frame { header: Header { seq, ..Header::control(kind, 0) }, payload: Bytes::from_static(payload) }
}

#[test]
fn eager_data_beyond_the_credit_fails_the_peer_and_stays_bounded() {
    let config = Config { eager_threshold: 100, eager_credit: 5 * eager_cost(100) + 100, ..Config::default() };
    let mut e = pair(config);
    e[1].post_recv(9, spec(Some(0), Some(5)));
    let mut seq = 0;
    let violation = loop {
        match e[1].handle_frame(0, forged(Kind::Eager, seq, &[1; 100])) {
            Ok(()) => seq += 1,
            Err(err) => break err,
        }
        assert!(seq < 100);
    };
    assert!(matches!(violation.kind(), ErrorKind::Protocol(_)));
    assert_eq!(seq, 5, "the credit holds five 100-byte messages");
    assert!(e[1].credit_in_use(0) <= config.eager_credit);
    // Later frames are dropped, and what waited on the peer failed.
    for s in seq..seq + 100 {
        e[1].handle_frame(0, forged(Kind::Eager, s, &[1; 100])).unwrap();
    }
    assert!(e[1].unexpected_bytes() <= 1000);
    assert_eq!(process_failed(&events(&mut e[1])), 1);
    assert!(!e[1].anything_waits_on(0));
}

#[test]
fn eager_data_above_the_announced_limit_fails_the_peer() {
    let mut e = pair(Config { eager_threshold: 4, ..Config::default() });
    assert!(e[1].handle_frame(0, forged(Kind::Eager, 0, b"12345")).is_err());
    assert!(e[1].is_failed(0));
}

#[test]
fn ready_data_above_the_announced_limit_fails_the_peer() {
    let mut e = pair(Config { eager_threshold: 4, ..Config::default() });
    e[1].post_recv(9, spec(Some(0), None));
    assert!(e[1].handle_frame(0, forged(Kind::Ready, 0, b"12345")).is_err());
    assert!(e[1].is_failed(0));
    // Within the limit it matches, as before.
    let mut e = pair(Config { eager_threshold: 4, ..Config::default() });
    e[1].post_recv(9, spec(Some(0), None));
    e[1].handle_frame(0, forged(Kind::Ready, 0, b"1234")).unwrap();
    assert_eq!(deliveries(&mut e[1]), [(9, Bytes::from_static(b"1234"))]);
}

/// Only data frames carry a payload: one on any other kind is refused
/// and fails its sender, rather than being held while nothing reads it.
#[test]
fn a_payload_on_a_frame_that_carries_none_fails_the_peer() {
    for kind in [Kind::Rts, Kind::Cts, Kind::ReadyAck, Kind::Credit, Kind::Bye, Kind::Ping, Kind::Hello] {
        let mut e = pair(Config::default());
        let err = e[1].handle_frame(0, forged(kind, 0, b"junk")).unwrap_err();
        assert!(err.to_string().contains("carries a payload"), "{kind:?}: {err}");
        assert!(e[1].is_failed(0), "{kind:?}");
    }
}

#[test]
fn rendezvous_data_of_the_wrong_length_fails_the_receive() {
    for wrong in [&b"too long!"[..], b"short", b""] {
        let mut e = pair(Config { eager_threshold: 2, ..Config::default() });
        e[0].post_send(1, SendMode::Standard, msg(1, 0, b"seven!!"));
        e[1].post_recv(5, spec(Some(0), None));
        let (_, rts) = next_frame(&mut e[0]).unwrap();
        e[1].handle_frame(0, rts).unwrap();
        let (_, cts) = next_frame(&mut e[1]).unwrap();
        let data = Frame {
            header: Header { recv_id: cts.header.recv_id, data_len: wrong.len() as u64, ..Header::control(Kind::RndvData, 0) },
            payload: Bytes::copy_from_slice(wrong),
        };
        let outcome = e[1].handle_frame(0, data);
        if wrong.is_empty() {
            // An empty chunk announcing an empty message is a lie about the length.
            assert!(outcome.is_err());
        } else {
            assert!(outcome.is_err(), "{wrong:?}");
        }
        assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 5, result: Err(ref e) }, Event::PeerFailed { rank: 0 }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })));
        assert!(!e[1].anything_waits_on(0));
    }
}

#[test]
fn rendezvous_requests_beyond_the_slots_fail_the_peer() {
    let mut e = pair(Config { rndv_slots: 3, ..Config::default() });
    for seq in 0..3 {
        e[1].handle_frame(0, forged(Kind::Rts, seq, b"")).unwrap();
    }
    assert!(e[1].handle_frame(0, forged(Kind::Rts, 3, b"")).is_err());
    assert_eq!(e[1].unexpected_len(), 0, "a failed peer's requests are dropped");
}

#[test]
fn frames_before_the_hello_or_from_another_job_are_refused() {
    let mut lone = Engine::new(1, 2, Config::default()).unwrap();
    assert!(lone.handle_frame(0, forged(Kind::Eager, 0, b"x")).is_err());
    let mut other = Engine::new(0, 2, Config { job: 7, ..Config::default() }).unwrap();
    let (_, hello) = next_frame(&mut other).unwrap();
    let mut e = Engine::new(1, 2, Config::default()).unwrap();
    assert!(e.handle_frame(0, hello).is_err());
    assert!(e.is_failed(0));
    // A frame that claims another source is refused too.
    let mut e = pair(Config::default());
    assert!(e[1].handle_frame(0, Frame::control(Header::control(Kind::Ping, 1))).is_err());
}

#[test]
fn a_peer_that_never_reads_its_answers_fails() {
    let mut e = pair(Config::default());
    let mut seq = 0;
    while !e[1].is_failed(0) {
        let _ = e[1].handle_frame(0, forged(Kind::Ready, seq, b"r"));
        seq += 1;
        assert!(seq as usize <= MAX_QUEUED_FRAMES + 1);
    }
    assert_eq!(e[1].queued_bytes(0), 0, "its frames are dropped");
}

#[test]
fn a_silent_peer_fails_after_the_idle_timeout_and_pings_keep_a_live_one() {
    let config = Config { idle_timeout: Some(Duration::from_secs(3)), ..Config::default() };
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    // Both alive, pumping: pings keep them connected for a minute.
    let mut e = pair(config);
    for s in 0..60 {
        e[0].handle_timeout(at(s));
        e[1].handle_timeout(at(s));
        pump(&mut e);
    }
    assert!(!e[0].is_failed(1) && !e[1].is_failed(0));
    assert!(e[0].poll_timeout().is_some_and(|t| t > at(59)));
    // Rank 0 goes silent (its frames are no longer delivered).
    e[1].post_recv(4, spec(Some(0), None));
    let mut failed_at = None;
    for s in 60..70 {
        e[1].handle_timeout(at(s));
        if process_failed(&events(&mut e[1])) == 1 {
            failed_at = Some(s);
            break;
        }
    }
    let s = failed_at.expect("the silent peer failed");
    assert!((63..=65).contains(&s), "failed {} s after it went silent", s - 60);
}

#[test]
fn hellos_choose_the_representation() {
    let mut e = vec![Engine::new(0, 2, Config::default()).unwrap(), Engine::new(1, 2, Config::default()).unwrap()];
    pump(&mut e);
    assert!(std::iter::from_fn(|| e[0].poll_event()).any(|ev| matches!(ev, Event::Connected { rank: 1, repr: Repr::Native })));
    assert_eq!(e[0].repr_for(1), Repr::Native);
    let ext = Config { repr: Repr::External32, ..Config::default() };
    let mut e = vec![Engine::new(0, 2, ext).unwrap(), Engine::new(1, 2, ext).unwrap()];
    assert_eq!(e[0].repr_for(1), Repr::External32, "before the hello");
    pump(&mut e);
    assert_eq!(e[0].repr_for(1), Repr::External32);
    assert!(e[0].is_connected());
}

#[test]
fn a_message_to_self_matches_before_the_call_returns() {
    let mut e = Engine::new(0, 2, Config::default()).unwrap();
    e.post_recv(1, spec(None, None));
    e.post_send(2, SendMode::Ready, msg(0, 3, b"me"));
    let ev: Vec<Event> = std::iter::from_fn(|| e.poll_event()).filter(|ev| !matches!(ev, Event::Connected { .. })).collect();
    assert!(ev.iter().any(|ev| matches!(ev, Event::RecvDone { id: 1, result: Ok(d) } if d.data == "me")));
    assert!(ev.iter().any(|ev| matches!(ev, Event::SendDone { id: 2, result: Ok(()) })));
}


#[test]
fn rendezvous_to_self_never_leaves_the_engine() {
    let config = Config { eager_threshold: 4, rndv_chunk: 3, ..Config::default() };
    let mut e = Engine::new(0, 2, config).unwrap();
    e.post_send(1, SendMode::Synchronous, msg(0, 3, b"to myself, in one piece"));
    e.post_recv(2, spec(Some(0), Some(3)));
    let ev: Vec<Event> = std::iter::from_fn(|| e.poll_event()).filter(|ev| !matches!(ev, Event::Connected { .. })).collect();
    assert!(ev.iter().any(|ev| matches!(ev, Event::RecvDone { id: 2, result: Ok(d) } if d.data == "to myself, in one piece")));
    assert!(ev.iter().any(|ev| matches!(ev, Event::SendDone { id: 1, result: Ok(()) })));
    // Only the hello to rank 1 waits for a transport.
    assert_eq!(e.poll_writable(), Some(1));
    assert_eq!(e.poll_transmit(1).map(|f| f.header.kind), Some(Kind::Hello));
    assert_eq!(e.poll_transmit(1), None);
    assert_eq!(e.poll_writable(), None);
}

/// A rendezvous message longer than the receive that matches it fails the
/// receive at once, before any data moves; once the error is taken the
/// message counts as received: the sender completes, the data is counted,
/// never kept.
#[test]
fn a_message_longer_than_its_receive_fails_it_at_once_and_is_counted_not_kept() {
    let config = Config { eager_threshold: 8, rndv_chunk: 1000, ..Config::default() };
    let mut e = pair(config);
    let big = Bytes::from(vec![3u8; 10_000]);
    e[0].post_send(1, SendMode::Standard, Outgoing { data: big, ..msg(1, 0, b"") });
    e[1].post_recv_limited(5, spec(Some(0), Some(0)), 16);
    pump(&mut e);
    let ev = events(&mut e[1]);
    assert!(matches!(ev[..], [Event::RecvDone { id: 5, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::Truncate { needed: 10_000, available: 16, message: Some((0, 0)) })), "{ev:?}");
    assert!(events(&mut e[0]).is_empty(), "unanswered until the receive's error is taken");
    e[1].consume_truncated(5);
    assert_eq!(stream(&mut e, None), 0, "nothing kept");
    pump(&mut e);
    assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 1, result: Ok(()) }]), "the sender completes");
    assert!(e[1].transfers.is_empty() && e[1].truncated.is_empty());
    // A receive that holds the whole message gets it.
    e[0].post_send(2, SendMode::Standard, Outgoing { data: Bytes::from(vec![4u8; 10_000]), ..msg(1, 0, b"") });
    e[1].post_recv_limited(6, spec(Some(0), Some(0)), 10_000);
    pump(&mut e);
    assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 6, result: Ok(d) }] if d.data.len() == 10_000));
}

#[test]
fn a_live_rank_keeps_pinging_a_finished_peer_that_watches_it() {
    let config = Config { idle_timeout: Some(Duration::from_secs(3)), ..Config::default() };
    let t0 = Instant::now();
    let mut e = pair(config);
    e[1].farewell(false);
    pump(&mut e);
    // Rank 1 has finished and waits for rank 0, which sends it nothing
    // of its own for a minute: its pings must keep rank 1 from failing it.
    for s in 0..60 {
        e[0].handle_timeout(t0 + Duration::from_secs(s));
        e[1].handle_timeout(t0 + Duration::from_secs(s));
        pump(&mut e);
    }
    assert!(!e[1].is_failed(0), "{:?}", e[1].dead(0, false));
    assert!(!e[0].is_failed(1), "{:?}", e[0].dead(1, false));
}

#[test]
fn a_finished_rank_does_not_clear_a_message_its_sender_gives_up() {
    let mut e = pair(Config::default());
    e[1].post_recv(9, spec(None, None));
    // Rank 0's rendezvous request is on its way when rank 1 says goodbye.
    e[0].post_send(1, SendMode::Synchronous, msg(1, 0, b"late"));
    let (_, rts) = next_frame(&mut e[0]).unwrap();
    e[1].farewell(false);
    e[1].handle_frame(0, rts).unwrap();
    assert!(
        matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 9, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::Finalized)),
        "no clear-to-send goes out after the goodbye"
    );
    pump(&mut e);
    assert!(matches!(&events(&mut e[0])[..], [Event::SendDone { id: 1, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })));
    assert!(e[0].is_flushed() && e[1].is_flushed());
    assert!(!e[0].is_failed(1) && !e[1].is_failed(0), "neither is in breach of the protocol");
}

/// The hello rank 0 of a world of two sends under `config`, as `edit`
/// changes it.
fn hello_from_zero(config: Config, edit: impl FnOnce(&mut Header)) -> Frame {
    let mut zero = Engine::new(0, 2, config).unwrap();
    let (_, mut hello) = next_frame(&mut zero).expect("a hello");
    assert_eq!(hello.header.kind, Kind::Hello);
    edit(&mut hello.header);
    hello
}

#[test]
fn a_hello_can_neither_lift_the_eager_limit_nor_shrink_frames() {
    let config = Config { eager_threshold: 100, rndv_chunk: 100, ..Config::default() };
    // A peer announcing an eager limit of u64::MAX still may not send eager
    // frames above what this rank accepts.
    let mut e = Engine::new(1, 2, config).unwrap();
    e.handle_frame(0, hello_from_zero(config, |h| h.send_id = u64::MAX)).unwrap();
    let big = Frame { header: Header { seq: 0, ..Header::control(Kind::Eager, 0) }, payload: Bytes::from(vec![1u8; 5000]) };
    assert!(matches!(e.handle_frame(0, big), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    assert!(e.is_failed(0));
    // A peer that accepts less than MIN_PAYLOAD per frame fails at its hello.
    for accepts in [0, 1, MIN_PAYLOAD as u32 - 1] {
        let mut e = Engine::new(1, 2, config).unwrap();
        assert!(e.handle_frame(0, hello_from_zero(config, |h| h.desc_len = accepts)).is_err(), "accepts {accepts}");
        assert!(e.is_failed(0));
    }
    // At the minimum, rendezvous data moves in chunks of that size.
    let (mut zero, mut one) = (Engine::new(0, 2, config).unwrap(), Engine::new(1, 2, config).unwrap());
    let (_, to_one) = next_frame(&mut zero).unwrap();
    let (_, mut to_zero) = next_frame(&mut one).unwrap();
    to_zero.header.desc_len = MIN_PAYLOAD as u32;
    one.handle_frame(0, to_one).unwrap();
    zero.handle_frame(1, to_zero).unwrap();
    let mut e = [zero, one];
    e[0].post_send(1, SendMode::Synchronous, Outgoing { data: Bytes::from(vec![5u8; 1000]), ..msg(1, 0, b"") });
    e[1].post_recv(3, spec(Some(0), Some(0)));
    let (_, rts) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, rts).unwrap();
    let (_, cts) = next_frame(&mut e[1]).unwrap();
    e[0].handle_frame(1, cts).unwrap();
    let (_, chunk) = next_frame(&mut e[0]).unwrap();
    assert_eq!((chunk.header.kind, chunk.payload.len()), (Kind::RndvData, MIN_PAYLOAD));
}

/// What a peer's hello grants is capped, and what it gives back may not
/// exceed what was spent: a peer granting endless credit and never reading
/// cannot make this rank complete sends (and queue their data) without
/// bound, and one granting no slot at all breaks the protocol.
#[test]
fn a_peer_can_neither_grant_unbounded_credit_nor_give_back_more_than_was_spent() {
    let config = Config::default();
    let mut e = Engine::new(1, 2, config).unwrap();
    e.handle_frame(0, hello_from_zero(config, |h| (h.sig_len, h.recv_id) = (u64::MAX, u64::MAX))).unwrap();
    events(&mut e);
    // Rank 1 sends to rank 0, whose link never takes anything.
    let data = Bytes::from(vec![1u8; 32 << 10]);
    let sends = 2 * MAX_GRANTED_CREDIT / (32 << 10);
    for id in 0..sends {
        e.post_send(id + 1, SendMode::Standard, Outgoing { data: data.clone(), ..msg(0, 0, b"") });
    }
    let done = events(&mut e).iter().filter(|ev| matches!(ev, Event::SendDone { result: Ok(()), .. })).count() as u64;
    assert_eq!(done, MAX_GRANTED_CREDIT / eager_cost(data.len()), "eager sends complete while the capped credit lasts");
    assert!(e.queued_bytes(0) as u64 <= MAX_GRANTED_CREDIT, "{}", e.queued_bytes(0));
    // Giving back the credit of messages that have left is fine; that of
    // messages still queued here is a protocol error (a peer giving it
    // back could make the queue grow without bound).
    let cost = eager_cost(data.len());
    let credit = |bytes| Frame::control(Header { data_len: bytes, ..Header::control(Kind::Credit, 0) });
    assert_eq!(e.poll_transmit(0).map(|f| f.header.kind), Some(Kind::Hello));
    let left = 4;
    for _ in 0..left {
        assert_eq!(e.poll_transmit(0).map(|f| f.header.kind), Some(Kind::Eager));
    }
    e.handle_frame(0, credit(left * cost)).unwrap();
    assert!(e.queued_bytes(0) as u64 <= MAX_GRANTED_CREDIT, "held sends took the credit given back: {}", e.queued_bytes(0));
    assert!(matches!(e.handle_frame(0, credit(cost)), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    assert!(e.is_failed(0));
    // Slots the same way: a hello granting none fails its peer.
    let mut e = Engine::new(1, 2, config).unwrap();
    assert!(matches!(e.handle_frame(0, hello_from_zero(config, |h| h.recv_id = 0)), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    assert!(e.is_failed(0));
    let mut e = Engine::new(1, 2, config).unwrap();
    e.handle_frame(0, hello_from_zero(config, |h| h.recv_id = 2)).unwrap();
    let slots = |n| Frame::control(Header { recv_id: n, ..Header::control(Kind::Credit, 0) });
    assert!(matches!(e.handle_frame(0, slots(MAX_AFTER_GOODBYE + 1)), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
}

/// A type description may be no longer than its data needs: a small
/// message (or a rendezvous request for a few bytes, which a small receive
/// would take) cannot bring a large one.
#[test]
fn a_type_description_longer_than_its_data_needs_is_refused() {
    let described = |kind, desc: u32, data: u64, seq| Header { kind, repr: Repr::External32, desc_len: desc, seq, data_len: u64::from(desc) + data, send_id: 1, ..Header::control(kind, 0) };
    let mut e = pair(Config::default());
    let most = crate::pack::TypeSequence::max_encoded_len(8) as u32;
    let fits = Frame { header: described(Kind::Eager, most, 8, 0), payload: Bytes::from(vec![0u8; most as usize + 8]) };
    e[1].handle_frame(0, fits).unwrap();
    let rts = Frame::control(described(Kind::Rts, MAX_DESC_LEN, 8, 1));
    assert!(matches!(e[1].handle_frame(0, rts), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    let mut e = pair(Config::default());
    let long = Frame { header: described(Kind::Eager, most + 1, 8, 0), payload: Bytes::from(vec![0u8; most as usize + 9]) };
    assert!(matches!(e[1].handle_frame(0, long), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    assert!(e[1].is_failed(0));
}

#[test]
fn a_bounded_receive_taken_by_a_ready_message_leaves_no_limit_behind() {
    let mut e = pair(Config::default());
    e[1].post_recv_limited(5, spec(Some(0), Some(0)), 10);
    e[0].post_send(1, SendMode::Ready, msg(1, 0, b"ready"));
    pump(&mut e);
    assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 5, result: Ok(d) }] if d.data == "ready"));
    assert_eq!(e[1].posted_len(), 0, "the ready message took the receive");
}

#[test]
fn the_native_representation_covers_wchar_and_long_double() {
    let native = NativeLayout::native();
    let ids = [
        native.id(),
        NativeLayout { wchar: (2, 2), ..native }.id(),
        NativeLayout { long_double: (8, 8, LongDoubleFormat::Double), ..native }.id(),
        NativeLayout { long_double: (16, 16, LongDoubleFormat::Binary128), ..native }.id(),
        NativeLayout { long_double: (16, 16, LongDoubleFormat::DoubleDouble), ..native }.id(),
        NativeLayout { long_double: (12, 4, LongDoubleFormat::X87), ..native }.id(),
    ];
    for (i, a) in ids.iter().enumerate() {
        assert!(ids[i + 1..].iter().all(|b| a != b), "layout {i} shares its identifier");
    }
    assert_eq!(native_repr_id(), native.id());
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        // The layout the datatype engine's basic types describe.
        use crate::datatype::Basic;
        assert_eq!(native.wchar, (Basic::WChar.size(), Basic::WChar.align()));
        assert_eq!(native.long_double, (Basic::LongDouble.size(), Basic::LongDouble.align(), LongDoubleFormat::X87));
    }
}

#[test]
fn a_rank_outside_the_world_and_frames_from_itself_are_refused() {
    assert!(matches!(Engine::new(2, 2, Config::default()), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidRank { rank: 2, size: 2 })));
    assert!(Engine::new(0, 0, Config::default()).is_err());
    let mut e = pair(Config::default());
    e[1].post_recv(5, spec(None, None));
    // A frame that claims to come from rank 1 itself, through a transport.
    let own = Frame { header: Header { seq: 0, ..Header::control(Kind::Eager, 1) }, payload: Bytes::from_static(b"forged") };
    assert!(matches!(e[1].handle_frame(1, own), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    assert!(events(&mut e[1]).is_empty(), "the forged frame matched nothing");
    assert_eq!(e[1].posted_len(), 1);
    // Its own messages to itself still match.
    e[1].post_send(6, SendMode::Standard, msg(1, 0, b"mine"));
    let ev = events(&mut e[1]);
    assert!(ev.iter().any(|ev| matches!(ev, Event::RecvDone { id: 5, result: Ok(d) } if d.data == "mine")), "{ev:?}");
}

#[test]
fn rendezvous_transfers_to_one_peer_take_turns() {
    let config = Config { eager_threshold: 8, rndv_chunk: 1000, ..Config::default() };
    let mut e = pair(config);
    let big = Bytes::from(vec![1u8; 100_000]);
    e[0].post_send(1, SendMode::Standard, Outgoing { data: big.clone(), ..msg(1, 0, b"") });
    e[1].post_recv(7, spec(Some(0), Some(0)));
    let (_, rts) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, rts).unwrap();
    let (_, cts) = next_frame(&mut e[1]).unwrap();
    e[0].handle_frame(1, cts).unwrap();
    let (_, chunk) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, chunk).unwrap();
    // A small synchronous send to the same peer, while 99 chunks remain.
    e[0].post_send(2, SendMode::Synchronous, msg(1, 1, b"small"));
    e[1].post_recv(8, spec(Some(0), Some(1)));
    let mut big_chunks = 0;
    let mut done = Vec::new();
    while !done.iter().any(|ev| matches!(ev, Event::SendDone { id: 2, .. })) {
        let (_, f) = next_frame(&mut e[0]).expect("frames keep coming");
        if f.header.kind == Kind::RndvData && f.header.recv_id == 7 {
            big_chunks += 1;
        }
        e[1].handle_frame(0, f).unwrap();
        while let Some((_, f)) = next_frame(&mut e[1]) {
            e[0].handle_frame(1, f).unwrap();
        }
        done.extend(events(&mut e[0]));
    }
    assert!(matches!(done[..], [Event::SendDone { id: 2, result: Ok(()) }]), "{done:?}");
    assert!(big_chunks <= 2, "the small message waited for {big_chunks} chunks of the large one");
    pump(&mut e);
    let got = deliveries(&mut e[1]);
    assert_eq!(got, [(8, Bytes::from_static(b"small")), (7, big)]);
}

/// Rank 0 sends rank 1 `len` bytes by rendezvous (chunks of `chunk`),
/// rank 1 posts receive 5 (bounded by `limit`, if any) and answers: the
/// data is ready to stream, none has moved.
fn rendezvous_answered(len: usize, chunk: usize, limit: Option<u64>) -> Vec<Engine> {
    let config = Config { eager_threshold: 8, rndv_chunk: chunk, ..Config::default() };
    rendezvous_answered_with(config, Bytes::from(vec![9u8; len]), limit)
}

/// [`rendezvous_answered`] of `data`, both ranks configured with `config`
/// (whose eager threshold `data` must exceed).
fn rendezvous_answered_with(config: Config, data: Bytes, limit: Option<u64>) -> Vec<Engine> {
    let mut e = pair(config);
    e[0].post_send(1, SendMode::Standard, Outgoing { data, ..msg(1, 0, b"") });
    match limit {
        Some(limit) => e[1].post_recv_limited(5, spec(Some(0), Some(0)), limit),
        None => e[1].post_recv(5, spec(Some(0), Some(0))),
    }
    let (_, rts) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, rts).unwrap();
    let (_, cts) = next_frame(&mut e[1]).unwrap();
    e[0].handle_frame(1, cts).unwrap();
    e
}

/// Moves `n` frames (all, if `None`) from rank 0 to rank 1; returns the
/// most rendezvous bytes rank 1 held meanwhile.
fn stream(e: &mut [Engine], n: Option<usize>) -> u64 {
    let mut most = 0;
    for _ in 0..n.unwrap_or(usize::MAX) {
        let Some((_, f)) = next_frame(&mut e[0]) else { break };
        e[1].handle_frame(0, f).unwrap();
        most = most.max(e[1].rendezvous_bytes(0));
    }
    most
}

/// A matched probe's message received into a small buffer
/// (`mrecv_limited`): its rendezvous data is counted, never kept.
#[test]
fn a_bounded_mrecv_keeps_no_rendezvous_data() {
    const LEN: usize = 1 << 20;
    let config = Config { eager_threshold: 8, rndv_chunk: 64 << 10, ..Config::default() };
    let mut e = pair(config);
    e[0].post_send(1, SendMode::Standard, Outgoing { data: Bytes::from(vec![9u8; LEN]), ..msg(1, 0, b"") });
    let (_, rts) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, rts).unwrap();
    let message = e[1].improbe(&spec(Some(0), None)).expect("the rendezvous request");
    e[1].mrecv_limited(7, message, 16);
    let ev = events(&mut e[1]);
    assert!(matches!(ev[..], [Event::RecvDone { id: 7, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::Truncate { needed, available: 16, .. } if *needed == LEN as u64)), "{ev:?}");
    e[1].consume_truncated(7);
    let (_, cts) = next_frame(&mut e[1]).unwrap();
    e[0].handle_frame(1, cts).unwrap();
    assert_eq!(stream(&mut e, None), 0, "nothing kept");
    assert!(events(&mut e[1]).is_empty());
    assert!(e[1].transfers.is_empty());
}

/// A receive too small for its rendezvous message that is dropped without
/// taking its error gives the message back unanswered and whole: the next
/// receive gets all of it, from a matched probe too.
#[test]
fn a_message_too_long_for_a_dropped_receive_goes_back_whole() {
    const LEN: usize = 100_000;
    let config = Config { eager_threshold: 8, rndv_chunk: 4096, ..Config::default() };
    for way in ["receive", "matched probe"] {
        let mut e = pair(config);
        let data = pattern(LEN, 7);
        e[0].post_send(1, SendMode::Standard, Outgoing { data: data.clone(), ..msg(1, 0, b"") });
        pump(&mut e);
        match way {
            "receive" => e[1].post_recv_limited(5, spec(Some(0), None), 10),
            _ => {
                let m = e[1].improbe(&spec(None, None)).expect("the rendezvous request");
                e[1].mrecv_limited(5, m, 10);
            }
        }
        assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 5, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::Truncate { available: 10, .. })), "{way}");
        assert_eq!(e[1].unexpected_len(), 0, "{way}: held for the receive");
        e[1].restore_truncated(5);
        assert_eq!(e[1].unexpected_len(), 1, "{way}: back in its place");
        assert!(next_frame(&mut e[1]).is_none(), "{way}: never answered");
        e[1].post_recv(6, spec(None, None));
        pump(&mut e);
        assert_eq!(deliveries(&mut e[1]), [(6, data)], "{way}");
        assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 1, result: Ok(()) }]), "{way}");
        assert!(e[1].transfers.is_empty() && e[1].truncated.is_empty(), "{way}");
    }
}

/// A rendezvous request held for a receive too small for it whose sender
/// fails before the receive is dropped is not given back (its data never
/// comes): the next receive gets the messages of the ranks still alive.
/// (Unsolicited data that came whole before the failure is a message like
/// an eager one, and is given back.)
#[test]
fn a_held_request_of_a_failed_sender_is_not_given_back() {
    let config = Config { eager_threshold: 8, ..Config::default() };
    {
        let mut e = pair(config);
        e[0].post_send(1, SendMode::Standard, Outgoing { data: pattern(10_000, 3), ..msg(1, 0, b"") });
        pump(&mut e);
        e[1].post_recv_limited(5, spec(None, None), 10);
        assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 5, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::Truncate { .. })));
        e[1].fail_peer(0, ErrorKind::Protocol("gone".into()).into());
        let _ = events(&mut e[1]);
        e[1].post_send(2, SendMode::Standard, msg(1, 0, b"hi"));
        e[1].restore_truncated(5);
        e[1].post_recv(6, spec(None, None));
        let got: Vec<_> = events(&mut e[1])
            .into_iter()
            .filter_map(|ev| match ev {
                Event::RecvDone { id, result } => Some((id, result.map(|d| d.data.to_vec()))),
                _ => None,
            })
            .collect();
        assert!(matches!(&got[..], [(6, Ok(d))] if d == b"hi"), "{:?}", got.iter().map(|(id, r)| (id, r.as_ref().map(Vec::len))).collect::<Vec<_>>());
    }
}

/// Messages that receives too short for them took count as received
/// when the receiving rank says goodbye: their senders' requests waiting
/// for a clear-to-send (more than the transfers dropped at once), and the
/// one whose receive's error was never taken, are answered ahead of the
/// goodbye, and every send completes.
#[test]
fn messages_too_long_for_their_receives_complete_their_sends_at_a_goodbye() {
    let config = Config { eager_threshold: 8, rndv_chunk: 64, rndv_slots: 2, ..Config::default() };
    let mut e = pair(config);
    for id in 1..=4 {
        e[0].post_send(id, SendMode::Standard, send_of(1, 0, pattern(1000, id as u8)));
    }
    for id in 11..=14 {
        e[1].post_recv_limited(id, spec(Some(0), Some(0)), 10);
    }
    // Requests, answers and credit go; the data is held back, so the
    // transfers dropped stay in flight. Every error is taken but the last.
    let mut data = Vec::new();
    let mut truncated = 0;
    loop {
        let mut moved = false;
        for f in all_frames(&mut e[0]) {
            if f.header.kind == Kind::RndvData {
                data.push(f);
            } else {
                e[1].handle_frame(0, f).unwrap();
                moved = true;
            }
        }
        for ev in events(&mut e[1]) {
            let Event::RecvDone { id, result: Err(error) } = ev else { panic!("{ev:?}") };
            assert!(matches!(error.kind(), ErrorKind::Truncate { .. }));
            truncated += 1;
            if id != 14 {
                e[1].consume_truncated(id);
            }
        }
        for f in all_frames(&mut e[1]) {
            e[0].handle_frame(1, f).unwrap();
            moved = true;
        }
        if !moved {
            break;
        }
    }
    assert_eq!(truncated, 4);
    assert!(!e[1].peers[0].to_drop.is_empty(), "answers wait for the transfers dropped");
    e[1].farewell(false);
    let frames = all_frames(&mut e[1]);
    let kinds: Vec<Kind> = frames.iter().map(|f| f.header.kind).filter(|&k| k != Kind::Credit).collect();
    let answers = kinds.iter().filter(|&&k| k == Kind::Cts).count();
    assert!(answers >= 2 && kinds[answers..] == [Kind::Bye], "every answer ahead of the goodbye: {kinds:?}");
    for f in frames {
        e[0].handle_frame(1, f).unwrap();
    }
    for f in data {
        e[1].handle_frame(0, f).unwrap();
    }
    pump(&mut e);
    let mut done: Vec<(ReqId, bool)> = events(&mut e[0])
        .into_iter()
        .filter_map(|ev| match ev {
            Event::SendDone { id, result } => Some((id, result.is_ok())),
            _ => None,
        })
        .collect();
    done.sort();
    assert_eq!(done, [(1, true), (2, true), (3, true), (4, true)]);
    assert!(e[1].transfers.is_empty(), "the data dropped as it came");
}

/// A message in flight (its first receive withdrawn, part of its data in)
/// that a receive too small for it takes over: the receive fails at once;
/// taking the error drops what came and what is still coming, dropping
/// the receive gives the message back, data and all.
#[test]
fn a_message_in_flight_taken_over_by_a_receive_too_small_for_it() {
    const LEN: usize = 1 << 20;
    for consumed in [true, false] {
        let mut e = rendezvous_answered(LEN, 64 << 10, None);
        stream(&mut e, Some(3));
        assert_eq!(e[1].rendezvous_bytes(0), 3 * (64 << 10));
        assert!(e[1].withdraw_recv(5));
        e[1].post_recv_limited(6, spec(Some(0), None), 100);
        assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 6, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::Truncate { available: 100, .. })));
        if consumed {
            e[1].consume_truncated(6);
            assert_eq!(e[1].rendezvous_bytes(0), 0, "what came is dropped");
            assert_eq!(stream(&mut e, None), 0, "and what comes");
            assert!(e[1].transfers.is_empty() && e[1].unexpected_len() == 0);
        } else {
            e[1].restore_truncated(6);
            stream(&mut e, None);
            e[1].post_recv(7, spec(None, None));
            let got = deliveries(&mut e[1]);
            assert!(matches!(&got[..], [(7, d)] if d.len() == LEN), "given back whole");
        }
        assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 1, result: Ok(()) }]));
    }
}

#[test]
fn this_ranks_own_sends_never_count_as_a_peer_not_reading() {
    // The peer grants more slots than MAX_QUEUED_FRAMES and no credit: every
    // send becomes a rendezvous request, queued while its link is blocked.
    let config = Config::default();
    let mut e = Engine::new(0, 2, config).unwrap();
    let hello = {
        let mut one = Engine::new(1, 2, config).unwrap();
        let (_, mut hello) = next_frame(&mut one).unwrap();
        hello.header.recv_id = MAX_GRANTED_SLOTS;
        hello.header.sig_len = 0;
        hello
    };
    e.handle_frame(1, hello).unwrap();
    let sends = MAX_QUEUED_FRAMES as u64 + 100;
    assert!(sends <= MAX_GRANTED_SLOTS);
    for id in 0..sends {
        e.post_send(id, SendMode::Standard, msg(1, 0, b"x"));
    }
    assert!(!e.is_failed(1), "{:?}", e.dead(1, false));
    assert_eq!(e.peers[1].queue.len() as u64, sends + 1, "every request (and the hello) waits");
}

/// A rendezvous request from rank 0, as a hostile or scripted peer forges it.
fn forged_rts(seq: u64, tag: i32) -> Frame {
    Frame::control(Header { seq, tag, data_len: 10, send_id: seq + 1, ..Header::control(Kind::Rts, 0) })
}

/// Slots rank `e` granted rank 0 in the credit frames it queued for it.
fn slots_granted(e: &mut Engine) -> u64 {
    std::iter::from_fn(|| next_frame(e)).filter(|(_, f)| f.header.kind == Kind::Credit).map(|(_, f)| f.header.recv_id).sum()
}

/// A goodbye saying the peer failed drops its rendezvous requests (their
/// data never comes); the same goodbye again finds nothing new and does not
/// walk the queue again. Such a goodbye counts only frames already sent: one
/// that leaves requests still to come (each would cost a walk of the queues
/// to drop) breaks the protocol.
#[test]
fn a_failed_goodbye_drops_requests_once_and_owes_nothing() {
    let mut e = pair(Config::default());
    for seq in 0..3 {
        e[1].handle_frame(0, forged_rts(seq, 0)).unwrap();
    }
    assert_eq!(e[1].unexpected_len(), 3);
    let failed_bye = |seq| Frame::control(Header { data_len: 1, seq, ..Header::control(Kind::Bye, 0) });
    e[1].handle_frame(0, failed_bye(3)).unwrap();
    assert_eq!(e[1].unexpected_len(), 0, "requests whose data never comes are dropped");
    assert!(e[1].peers[0].said_it_failed);
    for _ in 0..1000 {
        e[1].handle_frame(0, failed_bye(3)).unwrap();
    }
    assert!(!e[1].is_failed(0));
    // No request may follow it.
    let err = e[1].handle_frame(0, forged_rts(3, 0)).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Protocol(why) if why.contains("after its goodbye")), "{err}");
    assert!(e[1].is_failed(0));
    // A failed goodbye that counts requests not yet sent.
    let mut e = pair(Config::default());
    e[1].handle_frame(0, forged_rts(0, 0)).unwrap();
    let err = e[1].handle_frame(0, failed_bye(5)).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Protocol(why) if why.contains("still to come")), "{err}");
    assert!(e[1].is_failed(0));
}

/// A rendezvous request of a peer that said it failed is never answered,
/// even one this rank's program held (taken by a probe) while the goodbye
/// came: put back, it is dropped; received, the receive fails.
#[test]
fn a_request_held_through_a_failed_goodbye_is_not_answered() {
    let mut e = pair(Config::default());
    e[1].handle_frame(0, forged_rts(0, 0)).unwrap();
    e[1].handle_frame(0, forged_rts(1, 1)).unwrap();
    let held = e[1].improbe(&spec(Some(0), Some(0))).expect("the first request");
    let kept = e[1].improbe(&spec(Some(0), Some(1))).expect("the second request");
    e[1].handle_frame(0, Frame::control(Header { data_len: 1, seq: 2, ..Header::control(Kind::Bye, 0) })).unwrap();
    events(&mut e[1]);
    e[1].unmatch(held);
    assert_eq!(e[1].unexpected_len(), 0, "put back, it is dropped");
    e[1].mrecv(7, kept);
    let ev = events(&mut e[1]);
    assert!(matches!(&ev[..], [Event::RecvDone { id: 7, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{ev:?}");
    assert!(std::iter::from_fn(|| next_frame(&mut e[1])).all(|(_, f)| f.header.kind != Kind::Cts), "no clear-to-send");
}

/// A rank configured to grant more credit or slots than a peer takes
/// grants what a peer takes: the peer then spends the quarters of its
/// grant that bring credit back (granting more than the peer holds, the
/// receiver waited for a quarter the peer could never spend).
#[test]
fn credit_beyond_what_a_peer_takes_still_comes_back() {
    let config = Config { eager_credit: 1 << 30, rndv_slots: 1 << 30, ..Config::default() };
    let hello = hello_from_zero(config, |_| {});
    assert_eq!((hello.header.sig_len, hello.header.recv_id), (MAX_GRANTED_CREDIT, MAX_GRANTED_SLOTS));
    let mut e = pair(config);
    let data = Bytes::from(vec![1u8; 60 << 10]);
    let messages = 2 * MAX_GRANTED_CREDIT / data.len() as u64;
    for id in 0..messages {
        e[0].post_send(id + 1, SendMode::Standard, Outgoing { data: data.clone(), ..msg(1, 0, b"") });
        e[1].post_recv(id + 1, spec(Some(0), Some(0)));
        pump(&mut e);
        for ev in events(&mut e[1]) {
            if let Event::RecvDone { result: Ok(d), .. } = ev {
                assert_eq!(d.data.len(), data.len());
                e[1].release_credit(0, d.credit);
            }
        }
        pump(&mut e);
        events(&mut e[0]);
    }
    assert!(e[0].peers[1].credit > MAX_GRANTED_CREDIT / 2, "credit came back: {}", e[0].peers[1].credit);
}

#[test]
fn a_finished_peer_gets_slots_for_what_it_still_sends_up_to_a_bound() {
    let config = Config { rndv_slots: 4, ..Config::default() };
    let mut e = pair(config);
    e[1].post_recv(9, spec(Some(0), Some(7))); // tag 7 never comes
    // Rank 0 says goodbye announcing a billion more messages, and sends a
    // rendezvous request whenever it holds a slot.
    e[1].handle_frame(0, Frame::control(Header { seq: 1_000_000_000, ..Header::control(Kind::Bye, 0) })).unwrap();
    let (mut seq, mut slots) = (0, config.rndv_slots);
    while slots > 0 {
        for _ in 0..slots {
            e[1].handle_frame(0, forged_rts(seq, 0)).unwrap();
            seq += 1;
        }
        slots = slots_granted(&mut e[1]);
    }
    // What it makes rank 1 hold is bounded, whatever it announced.
    assert_eq!(seq, config.rndv_slots + MAX_AFTER_GOODBYE);
    assert_eq!(e[1].unexpected_len() as u64, seq);
    assert!(!e[1].is_failed(0));
    // The receive that waits for a message that cannot arrive before rank 1
    // receives those fails, as does a new one; the messages stay.
    let ev = events(&mut e[1]);
    assert!(matches!(ev[..], [Event::RecvDone { id: 9, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{ev:?}");
    e[1].post_recv(10, spec(Some(0), Some(7)));
    assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 10, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { .. })));
    e[1].post_recv(11, spec(Some(0), Some(0)));
    assert!(events(&mut e[1]).is_empty(), "it matched a request, whose data is awaited");
    // One request beyond the slots granted breaks the protocol.
    assert!(e[1].handle_frame(0, forged_rts(seq, 0)).is_ok(), "the clear-to-send gave a slot back");
    assert!(e[1].handle_frame(0, forged_rts(seq + 1, 0)).is_err());
}

#[test]
fn crossing_goodbyes_lower_the_count_of_sends_that_fail() {
    let config = Config { eager_threshold: 100, eager_credit: 3 * eager_cost(10) + 30, rndv_slots: 1, ..Config::default() };
    let mut e = pair(config);
    // Three eager sends spend the credit, the fourth takes the one slot,
    // the fifth waits.
    for id in 1..=5 {
        e[0].post_send(id, SendMode::Standard, msg(1, 0, b"0123456789"));
    }
    e[1].post_recv(9, spec(Some(0), Some(5))); // never matched
    // Both ranks finish before either goodbye arrives.
    e[0].farewell(false);
    e[1].farewell(false);
    pump(&mut e);
    let sent = events(&mut e[0]);
    let mut failed: Vec<ReqId> = sent
        .iter()
        .filter_map(|ev| match ev {
            Event::SendDone { id, result: Err(e) } if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. }) => Some(*id),
            _ => None,
        })
        .collect();
    failed.sort_unstable();
    assert_eq!(failed, [4, 5], "the request that needs rank 1 and the send still waiting: {sent:?}");
    assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 9, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })));
    assert!(!e[0].is_failed(1) && !e[1].is_failed(0), "neither broke the protocol");
    assert!(e[0].is_flushed() && e[1].is_flushed());
    assert!(e[1].silent(0).is_some());
}

/// A rank that closed before a peer's hello came still takes the hello
/// (and nothing else): it does not wait for the peer's hello any more, so
/// a transport that fails peers whose hello never comes leaves it be.
#[test]
fn a_closed_rank_still_takes_a_peers_hello() {
    let config = Config::default();
    let mut e = [Engine::new(0, 2, config).unwrap(), Engine::new(1, 2, config).unwrap()];
    let (_, hello) = next_frame(&mut e[0]).unwrap();
    assert_eq!(hello.header.kind, Kind::Hello);
    e[1].close();
    assert_eq!(e[1].awaiting_hello(), [0]);
    e[1].handle_frame(0, hello).unwrap();
    assert!(e[1].awaiting_hello().is_empty() && !e[1].is_failed(0));
    // Nothing else is taken.
    e[1].handle_frame(0, Frame { header: Header { seq: 0, ..Header::control(Kind::Eager, 0) }, payload: Bytes::from_static(b"x") }).unwrap();
    assert_eq!(e[1].unexpected_len(), 0);
}

#[test]
fn a_closed_rank_still_says_goodbye_once_its_link_drains() {
    let mut e = pair(Config::default());
    e[1].post_recv(9, spec(Some(0), Some(99)));
    for id in 1..=4 {
        e[0].post_send(id, SendMode::Standard, msg(1, 0, b"data"));
    }
    let (_, first) = next_frame(&mut e[0]).unwrap();
    assert_eq!(first.header.kind, Kind::Eager);
    // The link is full after the first message.
    let dest = e[0].poll_writable().unwrap();
    let second = e[0].poll_transmit(dest).unwrap();
    e[0].unsend(dest, second);
    // The program panics: the endpoint says it failed, then closes.
    e[0].farewell(true);
    e[0].close();
    assert!(next_frame(&mut e[0]).is_none(), "nothing goes while the link is full");
    e[1].handle_frame(0, first).unwrap();
    e[0].writable(1);
    let rest: Vec<Frame> = std::iter::from_fn(|| next_frame(&mut e[0])).map(|(_, f)| f).collect();
    assert!(matches!(&rest[..], [f] if f.header.kind == Kind::Bye && f.header.seq == 1 && f.header.data_len == 1), "{rest:?}");
    e[1].handle_frame(0, rest[0].clone()).unwrap();
    assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 9, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })));
    assert_eq!(e[1].unexpected_len(), 1, "the message that went can still be received");
    assert!(!e[1].is_failed(0));
    // The goodbye waits for the link again if the transport gives it back.
    let mut e = pair(Config::default());
    e[0].close();
    let dest = e[0].poll_writable().unwrap();
    let bye = e[0].poll_transmit(dest).unwrap();
    assert_eq!(bye.header.kind, Kind::Bye);
    e[0].unsend(dest, bye.clone());
    assert!(next_frame(&mut e[0]).is_none());
    e[0].writable(1);
    assert_eq!(next_frame(&mut e[0]).map(|(_, f)| f), Some(bye));
}

#[test]
fn a_rank_closed_after_its_goodbye_went_sends_nothing_more() {
    let mut e = pair(Config::default());
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"x"));
    e[0].farewell(false);
    pump(&mut e);
    e[0].close();
    assert!(next_frame(&mut e[0]).is_none());
}

#[test]
fn a_failed_goodbye_drops_what_only_that_rank_could_complete() {
    let config = Config { eager_threshold: 8, rndv_chunk: 100, ..Config::default() };
    let mut e = pair(config);
    let data = Bytes::from(vec![3u8; 1000]);
    e[0].post_send(1, SendMode::Standard, Outgoing { data: data.clone(), ..msg(1, 0, b"") });
    e[0].post_send(2, SendMode::Standard, Outgoing { data, ..msg(1, 0, b"") });
    e[1].post_recv(5, spec(Some(0), Some(0)));
    // Both requests go, the first is answered, one chunk of its data arrives.
    for _ in 0..2 {
        let (_, rts) = next_frame(&mut e[0]).unwrap();
        e[1].handle_frame(0, rts).unwrap();
    }
    let (_, cts) = next_frame(&mut e[1]).unwrap();
    e[0].handle_frame(1, cts).unwrap();
    let (_, chunk) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, chunk).unwrap();
    e[0].farewell(true);
    pump(&mut e);
    let mut sent: Vec<(ReqId, bool)> = events(&mut e[0])
        .into_iter()
        .map(|ev| match ev {
            Event::SendDone { id, result } => (id, matches!(result, Err(ref e) if matches!(e.kind(), ErrorKind::Finalized))),
            other => panic!("{other:?}"),
        })
        .collect();
    sent.sort_unstable();
    assert_eq!(sent, [(1, true), (2, true)]);
    // The transfer in flight fails, the unanswered request is dropped, and
    // nothing more can come from rank 0.
    assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 5, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })));
    assert_eq!(e[1].unexpected_len(), 0);
    e[1].post_recv(6, spec(Some(0), None));
    assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 6, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })));
    assert!(!e[0].is_failed(1) && !e[1].is_failed(0));
    assert!(e[0].is_flushed() && e[1].is_flushed());
}

/// A transport that refuses rendezvous data for a peer (its bulk stream is
/// full) holds back only that: messages and control frames to the peer
/// still go, and the refused chunk goes first once the peer is writable.
#[test]
fn refused_rendezvous_data_holds_back_only_rendezvous_data() {
    let mut e = pair(Config { eager_threshold: 16, rndv_chunk: 8, ..Config::default() });
    e[1].post_recv(9, spec(Some(0), Some(1)));
    e[0].post_send(1, SendMode::Standard, msg(1, 1, b"a long message in chunks"));
    // RTS out, CTS back: the data is ready to stream.
    let (_, rts) = next_frame(&mut e[0]).expect("the RTS");
    e[1].handle_frame(0, rts).unwrap();
    let (_, cts) = next_frame(&mut e[1]).expect("the CTS");
    e[0].handle_frame(1, cts).unwrap();
    let (dest, chunk) = next_frame(&mut e[0]).expect("a chunk");
    assert_eq!((dest, chunk.header.kind), (1, Kind::RndvData));
    e[0].unsend(1, chunk.clone());
    // The bulk stream is full; a short message still goes.
    e[0].post_send(2, SendMode::Standard, msg(1, 2, b"short"));
    let dest = e[0].poll_writable().expect("the peer has a message to go");
    let frame = e[0].poll_transmit(dest).expect("the message");
    assert_eq!(frame.header.kind, Kind::Eager);
    assert!(e[0].poll_transmit(dest).is_none(), "no rendezvous data while refused");
    e[1].handle_frame(0, frame).unwrap();
    e[1].post_recv(10, spec(Some(0), Some(2)));
    assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 10, result: Ok(d) }] if d.data == "short"));
    // Writable again: the refused chunk first, then the rest.
    e[0].writable(1);
    let (_, again) = next_frame(&mut e[0]).expect("the refused chunk");
    assert_eq!((again.header.seq, again.payload.clone()), (chunk.header.seq, chunk.payload.clone()));
    e[1].handle_frame(0, again).unwrap();
    pump(&mut e);
    assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 9, result: Ok(d) }] if d.data == "a long message in chunks"));
    assert!(e[0].is_flushed());
}

/// A small send goes straight to the transport only when nothing for its
/// peer must go first and it would go eagerly anyway; otherwise it is
/// given back untouched, and what it gives matches in order with sends
/// posted the usual way.
#[test]
fn a_send_goes_at_once_only_when_nothing_is_ahead_of_it() {
    // Credit for the five short messages below and a few more.
    let config = Config { eager_threshold: 64, eager_credit: 8 * eager_cost(8), ..Config::default() };
    // Before the hello: held back.
    let mut lone = Engine::new(0, 2, config).unwrap();
    assert!(lone.send_eager_now(1, SendMode::Standard, msg(1, 0, b"early")).is_err());

    let mut e = pair(config);
    let frame = e[0].send_eager_now(1, SendMode::Standard, msg(1, 0, b"one")).expect("nothing ahead");
    assert!(events(&mut e[0]).is_empty(), "complete without an event");
    e[1].handle_frame(0, frame).unwrap();
    // To itself, in modes that need a match, too large or out of credit:
    // given back, nothing sent.
    for (mode, m) in [
        (SendMode::Standard, msg(0, 0, b"self")),
        (SendMode::Synchronous, msg(1, 0, b"sync")),
        (SendMode::Buffered, msg(1, 0, b"buffered")),
        (SendMode::Ready, msg(1, 0, b"ready")),
        (SendMode::Standard, msg(1, 0, &[0; 65])),
    ] {
        let back = e[0].send_eager_now(2, mode, m.clone()).expect_err("cannot go at once");
        assert_eq!(back.data, m.data);
    }
    assert!(next_frame(&mut e[0]).is_none() && events(&mut e[0]).is_empty());
    // A frame queued ahead (not yet taken by the transport) goes first.
    e[0].post_send(3, SendMode::Standard, msg(1, 0, b"two"));
    assert!(e[0].send_eager_now(4, SendMode::Standard, msg(1, 0, b"three")).is_err());
    e[0].post_send(4, SendMode::Standard, msg(1, 0, b"three"));
    pump(&mut e);
    // A refused frame holds back the next until the link drains.
    let refused = e[0].send_eager_now(5, SendMode::Standard, msg(1, 0, b"four")).expect("nothing ahead");
    e[0].unsend(1, refused);
    assert!(e[0].send_eager_now(6, SendMode::Standard, msg(1, 0, b"five")).is_err(), "the refused frame waits first");
    e[0].post_send(6, SendMode::Standard, msg(1, 0, b"five"));
    e[0].writable(1);
    pump(&mut e);
    // Credit runs out, each message costing its length and EAGER_OVERHEAD.
    let mut spent = 0;
    while let Ok(frame) = e[0].send_eager_now(100 + spent, SendMode::Standard, msg(1, 1, &[1; 60])) {
        e[1].handle_frame(0, frame).unwrap();
        spent += 1;
        assert!(spent < 10, "credit never ran out");
    }
    assert!(spent >= 1);
    for id in 10..15 {
        e[1].post_recv(id, spec(Some(0), Some(0)));
    }
    let got: Vec<Bytes> = deliveries(&mut e[1]).into_iter().map(|(_, data)| data).collect();
    assert_eq!(got, ["one", "two", "three", "four", "five"].map(|s| Bytes::from_static(s.as_bytes())));
}

/// Rank 0 sends rank 1 a 1 MiB message by rendezvous in 64 KiB chunks,
/// matched by receive 5, which is told of its data every 128 KiB: the
/// data is ready to stream.
fn streaming_pair() -> (Vec<Engine>, Bytes) {
    let data: Bytes = (0..1u32 << 20).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into();
    let config = Config { eager_threshold: 8, rndv_chunk: 64 << 10, stream_step: 128 << 10, ..Config::default() };
    (rendezvous_answered_with(config, data.clone(), None), data)
}

/// Moves frames of [`streaming_pair`]'s message until receive 5 is told
/// of data, and takes it.
fn take_first_data(e: &mut [Engine]) -> Vec<u8> {
    let mut taken = Vec::new();
    while taken.is_empty() {
        let (_, f) = next_frame(&mut e[0]).unwrap();
        e[1].handle_frame(0, f).unwrap();
        if events(&mut e[1]).iter().any(|ev| matches!(ev, Event::DataArrived { id: 5 })) {
            let arrived = e[1].take_arrived(5, |_| true).unwrap();
            arrived.chunks.iter().for_each(|c| taken.extend_from_slice(c));
        }
    }
    taken
}

#[test]
fn a_receive_takes_its_data_as_it_arrives() {
    let (mut e, data) = streaming_pair();
    let step = 128 << 10;
    let (mut taken, mut words, mut tail) = (Vec::new(), 0, None);
    while let Some((_, f)) = next_frame(&mut e[0]) {
        e[1].handle_frame(0, f).unwrap();
        assert!(e[1].rendezvous_bytes(0) <= step + (64 << 10), "the engine holds only what the receive has not taken yet");
        for ev in events(&mut e[1]) {
            match ev {
                Event::DataArrived { id: 5 } => {
                    words += 1;
                    let arrived = e[1].take_arrived(5, |env| env.len == data.len() as u64).expect("the receive streams");
                    assert_eq!(arrived.offset, taken.len() as u64);
                    arrived.chunks.iter().for_each(|c| taken.extend_from_slice(c));
                }
                Event::RecvDone { id: 5, result } => tail = Some(result.unwrap()),
                other => panic!("{other:?}"),
            }
        }
    }
    let tail = tail.expect("the receive completed");
    assert_eq!(words, 7, "told every {step} bytes, never of the last ones");
    assert_eq!(taken.len() as u64 + tail.data.len() as u64, tail.envelope.len, "the completion holds what was not taken");
    taken.extend_from_slice(&tail.data);
    assert_eq!(taken, data);
}

/// Rendezvous data a streaming receive takes as it arrives, cut into tiny
/// pieces (as a hostile peer may send a byte a datagram): the engine
/// keeps the small pieces as copies gathered together, not one by one
/// (each kept slice would hold its whole datagram), and the data arrives
/// whole and in order, larger pieces kept as they came.
#[test]
fn a_streaming_receive_gathers_tiny_pieces_of_its_data() {
    let (mut e, data) = streaming_pair();
    let mut taken = take_first_data(&mut e);
    let (mut tail, mut kept_small) = (None, 0);
    while let Some((_, f)) = next_frame(&mut e[0]) {
        let mut offset = 0;
        while offset < f.payload.len() {
            // Half of each frame 7 bytes at a time, the rest 2 KiB at a time.
            let n = if offset < f.payload.len() / 2 { 7 } else { 2048 }.min(f.payload.len() - offset);
            let piece = Frame { header: Header { seq: f.header.seq + offset as u64, ..f.header }, payload: f.payload.slice(offset..offset + n) };
            e[1].handle_frame(0, piece).unwrap();
            offset += n;
            for ev in events(&mut e[1]) {
                match ev {
                    Event::DataArrived { id: 5 } => {
                        let arrived = e[1].take_arrived(5, |_| true).expect("the receive streams");
                        assert_eq!(arrived.offset, taken.len() as u64);
                        kept_small += arrived.chunks.iter().filter(|c| c.len() < 1024).count();
                        arrived.chunks.iter().for_each(|c| taken.extend_from_slice(c));
                    }
                    Event::RecvDone { id: 5, result } => tail = Some(result.unwrap()),
                    other => panic!("{other:?}"),
                }
            }
        }
    }
    let tail = tail.expect("the receive completed");
    taken.extend_from_slice(&tail.data);
    assert_eq!(taken, data);
    assert!(kept_small <= 8, "{kept_small} pieces below 1 KiB kept as they came");
}

#[test]
fn a_streaming_receive_withdrawn_gives_its_data_back_to_the_next() {
    let (mut e, data) = streaming_pair();
    let taken = take_first_data(&mut e);
    stream(&mut e, Some(2));
    e[1].give_back(5, BytesMut::from(&taken[..]));
    assert!(e[1].withdraw_recv(5));
    e[1].post_recv(6, spec(None, None));
    stream(&mut e, None);
    let done: Vec<_> = events(&mut e[1]).into_iter().filter(|ev| !matches!(ev, Event::DataArrived { .. })).collect();
    assert!(matches!(&done[..], [Event::RecvDone { id: 6, result: Ok(d) }] if d.data == data), "the next receive gets the whole message");

    // A receive that does not take its data as it arrives is told once.
    let (mut e, data) = streaming_pair();
    let mut words = 0;
    while let Some((_, f)) = next_frame(&mut e[0]) {
        e[1].handle_frame(0, f).unwrap();
        for ev in events(&mut e[1]) {
            match ev {
                Event::DataArrived { id: 5 } => {
                    words += 1;
                    assert!(e[1].take_arrived(5, |_| false).is_none());
                }
                Event::RecvDone { id: 5, result } => assert_eq!(result.unwrap().data, data),
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(words, 1);
}

#[test]
fn a_message_of_a_few_steps_is_not_streamed() {
    let config = Config { eager_threshold: 8, rndv_chunk: 64 << 10, stream_step: 256 << 10, ..Config::default() };
    let mut e = pair(config);
    e[0].post_send(1, SendMode::Standard, Outgoing { data: Bytes::from(vec![3u8; 1 << 20]), ..msg(1, 0, b"") });
    e[1].post_recv(5, spec(Some(0), Some(0)));
    pump(&mut e);
    assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 5, result: Ok(d) }] if d.data.len() == 1 << 20), "no word before the completion");
}

#[test]
fn a_streaming_receive_that_gives_back_other_data_than_it_took_fails_the_next() {
    let (mut e, data) = streaming_pair();
    let mut taken = take_first_data(&mut e);
    taken.pop();
    e[1].give_back(5, BytesMut::from(&taken[..]));
    assert!(e[1].withdraw_recv(5));
    e[1].post_recv(6, spec(None, None));
    stream(&mut e, None);
    let done: Vec<_> = events(&mut e[1]).into_iter().filter(|ev| !matches!(ev, Event::DataArrived { .. })).collect();
    assert!(matches!(done[..], [Event::RecvDone { id: 6, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::Truncate { .. })), "never delivered with its data wrong: {done:?}");
    // A completion given back without the part its receive took is
    // dropped, never queued as a whole message.
    let envelope = Envelope { context: 0, source: 0, tag: 0, signature: Some((7, 1)), repr: Repr::Native, len: data.len() as u64, desc_len: 0, seq: 9 };
    let short = Delivered::new(envelope, data.slice(1..), 0);
    e[1].requeue(short);
    assert_eq!(e[1].unexpected_len(), 0);
}

/// A pair granting each other `credit` bytes of unsolicited credit, with
/// rendezvous above 8 bytes in chunks of 100.
fn unsolicited_pair(credit: u64) -> Vec<Engine> {
    pair(Config { eager_threshold: 8, rndv_chunk: 100, unsolicited_credit: credit, ..Config::default() })
}

/// `len` bytes of a recognisable pattern.
fn pattern(len: usize, salt: u8) -> Bytes {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(salt)).collect::<Vec<u8>>().into()
}

fn send_of(dest: u32, tag: i32, data: Bytes) -> Outgoing {
    Outgoing { dest, context: 0, tag, signature: Some((7, data.len() as u64)), repr: Repr::Native, desc_len: 0, data }
}

/// Every frame engine `e` has to send, in order.
fn all_frames(e: &mut Engine) -> Vec<Frame> {
    std::iter::from_fn(|| next_frame(e)).map(|(_, f)| f).collect()
}

/// What an RTS asks for: `Some(true)` data following unsolicited,
/// `Some(false)` a CTS first; `None` for other frames.
fn rts_unsolicited(f: &Frame) -> Option<bool> {
    (f.header.kind == Kind::Rts).then_some(f.header.recv_id == RTS_UNSOLICITED)
}

#[test]
fn unsolicited_data_follows_its_rts_without_waiting_for_a_cts() {
    let mut e = unsolicited_pair(4000);
    let data = pattern(350, 1);
    e[1].post_recv(5, spec(Some(0), Some(3)));
    e[0].post_send(1, SendMode::Standard, send_of(1, 3, data.clone()));
    let frames = all_frames(&mut e[0]);
    assert_eq!(rts_unsolicited(&frames[0]), Some(true));
    let chunks: Vec<_> = frames[1..].iter().map(|f| (f.header.kind, f.header.recv_id, f.header.send_id, f.payload.len())).collect();
    assert_eq!(chunks, [(Kind::RndvData, 0, 1, 100), (Kind::RndvData, 0, 1, 100), (Kind::RndvData, 0, 1, 100), (Kind::RndvData, 0, 1, 50)]);
    assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 1, result: Ok(()) }]), "done once its data went");
    for f in frames {
        e[1].handle_frame(0, f).unwrap();
    }
    assert_eq!(deliveries(&mut e[1]), [(5, data)]);
    // The match gave the credit back at once.
    let back = all_frames(&mut e[1]);
    assert!(matches!(&back[..], [f] if f.header.kind == Kind::Credit && f.header.seq == 350 + UNSOLICITED_OVERHEAD));
    assert_eq!(e[1].unsolicited_bytes(0), (0, 0));
}

#[test]
fn unsolicited_data_that_arrives_before_its_rts_waits_for_it() {
    let mut e = unsolicited_pair(4000);
    let (first, second) = (pattern(250, 2), pattern(120, 3));
    e[0].post_send(1, SendMode::Standard, send_of(1, 3, first.clone()));
    e[0].post_send(2, SendMode::Standard, send_of(1, 3, second.clone()));
    let (control, data): (Vec<_>, Vec<_>) = all_frames(&mut e[0]).into_iter().partition(|f| f.header.kind == Kind::Rts);
    // The data overtakes the requests, as it may on a connection of its own.
    for f in data {
        e[1].handle_frame(0, f).unwrap();
    }
    assert_eq!(e[1].unexpected_len(), 0, "no message before its RTS");
    assert_eq!(e[1].unsolicited_bytes(0), (370, 370 + 2 * UNSOLICITED_OVERHEAD));
    for f in control {
        e[1].handle_frame(0, f).unwrap();
    }
    assert_eq!(e[1].unexpected_len(), 2);
    assert_eq!(e[1].iprobe(&spec(None, None)).map(|env| env.len), Some(250), "in the order of the requests");
    e[1].post_recv(7, spec(Some(0), None));
    e[1].post_recv(8, spec(Some(0), None));
    assert_eq!(deliveries(&mut e[1]), [(7, first), (8, second)]);
    assert_eq!(e[1].unsolicited_bytes(0), (0, 0));
}

#[test]
fn unsolicited_credit_runs_out_then_messages_wait_for_their_cts() {
    let mut e = unsolicited_pair(2 * (300 + UNSOLICITED_OVERHEAD));
    let sent: Vec<Bytes> = (0..4).map(|i| pattern(300, i)).collect();
    for (i, data) in sent.iter().enumerate() {
        e[0].post_send(i as u64 + 1, SendMode::Standard, send_of(1, 0, data.clone()));
    }
    let frames = all_frames(&mut e[0]);
    let asks: Vec<bool> = frames.iter().filter_map(rts_unsolicited).collect();
    assert_eq!(asks, [true, true, false, false], "two within the credit, then the handshake");
    assert_eq!(frames.iter().filter(|f| f.header.kind == Kind::RndvData).count(), 6, "data of the first two only");
    for f in frames {
        e[1].handle_frame(0, f).unwrap();
    }
    assert_eq!(e[1].unsolicited_bytes(0), (600, 600 + 2 * UNSOLICITED_OVERHEAD));
    for id in 10..14 {
        e[1].post_recv(id, spec(Some(0), Some(0)));
    }
    pump(&mut e);
    let got = deliveries(&mut e[1]);
    assert_eq!(got, (10..14).zip(sent).collect::<Vec<_>>(), "every message in order");
    // The credit came back: the next send goes unsolicited again.
    e[0].post_send(9, SendMode::Standard, send_of(1, 0, pattern(300, 9)));
    assert_eq!(all_frames(&mut e[0]).iter().filter_map(rts_unsolicited).collect::<Vec<_>>(), [true]);
}

#[test]
fn synchronous_and_ready_sends_never_go_unsolicited() {
    let mut e = unsolicited_pair(4000);
    e[0].post_send(1, SendMode::Synchronous, send_of(1, 0, pattern(300, 1)));
    let frames = all_frames(&mut e[0]);
    assert!(matches!(&frames[..], [f] if rts_unsolicited(f) == Some(false)), "a synchronous send waits for its match");
    e[0].post_send(2, SendMode::Ready, send_of(1, 0, pattern(300, 2)));
    let frames = all_frames(&mut e[0]);
    assert!(matches!(&frames[..], [f] if f.header.kind == Kind::Rts && f.header.recv_id == 1));
}

/// Unsolicited data of send `send_id`, as a hostile rank 0 would forge it.
fn forged_data(send_id: u64, offset: u64, total: u64, payload: &'static [u8]) -> Frame {
    let header = Header { send_id, seq: offset, data_len: total, ..Header::control(Kind::RndvData, 0) };
    Frame { header, payload: Bytes::from_static(payload) }
}

fn forged_unsolicited_rts(seq: u64, send_id: u64, len: u64) -> Frame {
    Frame::control(Header { seq, send_id, data_len: len, recv_id: RTS_UNSOLICITED, ..Header::control(Kind::Rts, 0) })
}

#[test]
fn unsolicited_data_beyond_the_credit_or_unlike_its_rts_fails_the_peer() {
    let cost = |len: u64| len + UNSOLICITED_OVERHEAD;
    // Data, or a request, beyond the credit granted.
    let mut e = unsolicited_pair(cost(20));
    assert!(matches!(e[1].handle_frame(0, forged_data(1, 0, 21, b"abc")), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    let mut e = unsolicited_pair(cost(20));
    assert!(matches!(e[1].handle_frame(0, forged_unsolicited_rts(0, 1, 21)), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    // Two messages that fit only one at a time.
    let mut e = unsolicited_pair(cost(20));
    e[1].handle_frame(0, forged_data(1, 0, 20, b"abc")).unwrap();
    assert!(matches!(e[1].handle_frame(0, forged_data(2, 0, 20, b"abc")), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    assert_eq!(e[1].unsolicited_bytes(0).0, 0, "dropped with the peer");
    // A rank that grants none takes none.
    let mut e = unsolicited_pair(0);
    assert!(matches!(e[1].handle_frame(0, forged_unsolicited_rts(0, 1, 20)), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    let mut e = unsolicited_pair(0);
    assert!(matches!(e[1].handle_frame(0, forged_data(1, 0, 20, b"abc")), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    // A request whose length is not its data's, data out of place, too
    // much data, empty data, a request repeated.
    let mut e = unsolicited_pair(4000);
    e[1].handle_frame(0, forged_data(1, 0, 20, b"abc")).unwrap();
    assert!(matches!(e[1].handle_frame(0, forged_unsolicited_rts(0, 1, 30)), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    let mut e = unsolicited_pair(4000);
    e[1].handle_frame(0, forged_data(1, 0, 5, b"abc")).unwrap();
    assert!(matches!(e[1].handle_frame(0, forged_data(1, 2, 5, b"de")), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))), "a gap");
    let mut e = unsolicited_pair(4000);
    e[1].handle_frame(0, forged_data(1, 0, 5, b"abc")).unwrap();
    assert!(matches!(e[1].handle_frame(0, forged_data(1, 3, 5, b"def")), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))), "past the end");
    let mut e = unsolicited_pair(4000);
    assert!(matches!(e[1].handle_frame(0, forged_data(1, 0, 5, b"")), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    let mut e = unsolicited_pair(4000);
    e[1].handle_frame(0, forged_unsolicited_rts(0, 1, 30)).unwrap();
    assert!(matches!(e[1].handle_frame(0, forged_unsolicited_rts(1, 1, 30)), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
    // Data for a receive that holds an unsolicited message's transfer is
    // not taken as solicited data.
    let mut e = unsolicited_pair(4000);
    e[1].handle_frame(0, forged_unsolicited_rts(0, 1, 30)).unwrap();
    let key = UNSOLICITED_KEYS | 1;
    let mut as_solicited = forged_data(1, 0, 30, b"abc");
    as_solicited.header.recv_id = key;
    assert!(matches!(e[1].handle_frame(0, as_solicited), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
}

#[test]
fn an_unsolicited_message_too_long_for_its_receive_fails_it_and_gives_the_credit_back() {
    let mut e = unsolicited_pair(4000);
    e[1].post_recv_limited(5, spec(Some(0), None), 100);
    e[0].post_send(1, SendMode::Standard, send_of(1, 0, pattern(300, 1)));
    pump(&mut e);
    assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 5, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::Truncate { needed: 300, available: 100, .. })));
    e[1].consume_truncated(5);
    pump(&mut e);
    assert_eq!(e[1].unsolicited_bytes(0), (0, 0));
    assert_eq!(e[1].rendezvous_bytes(0), 0, "nothing kept");
    e[0].post_send(2, SendMode::Standard, send_of(1, 0, pattern(300, 2)));
    assert_eq!(all_frames(&mut e[0]).iter().filter_map(rts_unsolicited).collect::<Vec<_>>(), [true], "the credit came back");
}

#[test]
fn a_sender_failing_part_way_drops_its_unsolicited_data_and_fails_the_receive() {
    let mut e = unsolicited_pair(4000);
    e[0].post_send(1, SendMode::Standard, send_of(1, 0, pattern(300, 1)));
    e[0].post_send(2, SendMode::Standard, send_of(1, 1, pattern(300, 2)));
    let frames = all_frames(&mut e[0]);
    // The first message's request and some of each message's data.
    for f in frames.iter().filter(|f| f.header.kind == Kind::Rts && f.header.send_id == 1) {
        e[1].handle_frame(0, f.clone()).unwrap();
    }
    for f in frames.iter().filter(|f| f.header.kind == Kind::RndvData && f.header.seq == 0) {
        e[1].handle_frame(0, f.clone()).unwrap();
    }
    e[1].post_recv(5, spec(Some(0), Some(0)));
    assert!(events(&mut e[1]).is_empty());
    assert_eq!(e[1].unsolicited_bytes(0).0, 100, "the second message's first chunk");
    e[1].fail_peer(0, ErrorKind::Protocol("gone".into()).into());
    assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 5, result: Err(ref e) }, Event::PeerFailed { rank: 0 }] if matches!(e.kind(), ErrorKind::ProcessFailed { .. })));
    assert_eq!(e[1].unsolicited_bytes(0).0, 0);
    assert_eq!(e[1].unexpected_len(), 0);
}

#[test]
fn an_unsolicited_message_taken_by_a_matched_probe_is_received_whole() {
    let mut e = unsolicited_pair(4000);
    let data = pattern(300, 4);
    e[0].post_send(1, SendMode::Standard, send_of(1, 2, data.clone()));
    let frames = all_frames(&mut e[0]);
    e[1].handle_frame(0, frames[0].clone()).unwrap();
    e[1].handle_frame(0, frames[1].clone()).unwrap();
    let m = e[1].improbe(&spec(None, Some(2))).expect("the request fixed its place");
    assert_eq!(m.envelope().len, 300);
    for f in &frames[2..] {
        e[1].handle_frame(0, f.clone()).unwrap();
    }
    assert_eq!(e[1].unsolicited_bytes(0).0, 300, "held for the probe, on credit");
    e[1].mrecv(9, m);
    assert_eq!(deliveries(&mut e[1]), [(9, data)]);
    assert_eq!(e[1].unsolicited_bytes(0), (0, 0));
}

#[test]
fn unsolicited_data_may_overtake_its_senders_hello() {
    let config = Config { eager_threshold: 8, rndv_chunk: 100, unsolicited_credit: 4000, ..Config::default() };
    let mut e = [Engine::new(0, 2, config).unwrap(), Engine::new(1, 2, config).unwrap()];
    let (_, hello) = next_frame(&mut e[1]).unwrap();
    e[0].handle_frame(1, hello).unwrap();
    let data = pattern(250, 5);
    e[0].post_send(1, SendMode::Standard, send_of(1, 0, data.clone()));
    let (control, bulk): (Vec<_>, Vec<_>) = all_frames(&mut e[0]).into_iter().partition(|f| f.header.kind != Kind::RndvData);
    assert_eq!(control.iter().map(|f| f.header.kind).collect::<Vec<_>>(), [Kind::Hello, Kind::Rts]);
    for f in bulk.into_iter().chain(control) {
        e[1].handle_frame(0, f).unwrap();
    }
    e[1].post_recv(3, spec(Some(0), None));
    let got: Vec<_> = events(&mut e[1]).into_iter().filter_map(|ev| match ev {
        Event::RecvDone { id, result } => Some((id, result.unwrap().data)),
        _ => None,
    }).collect();
    assert_eq!(got, [(3, data)]);
}

#[test]
fn an_unsolicited_message_that_came_whole_is_bounded_by_the_receive_that_takes_it() {
    let mut e = unsolicited_pair(4000);
    e[0].post_send(1, SendMode::Standard, send_of(1, 0, pattern(300, 1)));
    pump(&mut e);
    assert_eq!(e[1].unsolicited_bytes(0).0, 300, "whole, unmatched");
    e[1].post_recv_limited(5, spec(Some(0), None), 299);
    assert!(matches!(&events(&mut e[1])[..], [Event::RecvDone { id: 5, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::Truncate { needed: 300, available: 299, .. })));
    assert_eq!(e[1].unsolicited_bytes(0).0, 300, "held until the error is taken");
    e[1].consume_truncated(5);
    assert_eq!(e[1].unsolicited_bytes(0), (0, 0));
}

#[test]
fn unsolicited_data_no_request_can_claim_is_dropped_with_its_credit() {
    let bye = |failed: u64| Frame::control(Header { data_len: failed, seq: 0, ..Header::control(Kind::Bye, 0) });
    for failed in [0, 1] {
        let mut e = unsolicited_pair(4000);
        e[1].handle_frame(0, forged_data(1, 0, 20, b"abc")).unwrap();
        assert_eq!(e[1].unsolicited_bytes(0), (3, 20 + UNSOLICITED_OVERHEAD));
        // Its goodbye says it sent no request: nothing can claim the data.
        e[1].handle_frame(0, bye(failed)).unwrap();
        assert_eq!(e[1].unsolicited_bytes(0), (0, 0), "goodbye (failed: {failed})");
        // Data still arriving is dropped, not kept and not an error.
        e[1].handle_frame(0, forged_data(1, 3, 20, b"def")).unwrap();
        e[1].handle_frame(0, forged_data(2, 0, 20, b"abc")).unwrap();
        assert_eq!(e[1].unsolicited_bytes(0), (0, 0));
        assert!(!e[1].is_failed(0));
    }
    // A failed goodbye drops a transfer whose data was still coming, and
    // frees its credit.
    let mut e = unsolicited_pair(4000);
    e[1].handle_frame(0, forged_unsolicited_rts(0, 1, 30)).unwrap();
    e[1].handle_frame(0, forged_data(1, 0, 30, b"abc")).unwrap();
    assert_eq!(e[1].unsolicited_bytes(0), (3, 30 + UNSOLICITED_OVERHEAD));
    e[1].handle_frame(0, Frame::control(Header { data_len: 1, seq: 1, ..Header::control(Kind::Bye, 0) })).unwrap();
    assert_eq!(e[1].unsolicited_bytes(0), (0, 0));
    assert_eq!(e[1].unexpected_len(), 0);
    e[1].handle_frame(0, forged_data(1, 3, 30, b"def")).unwrap();
    assert_eq!(e[1].unsolicited_bytes(0), (0, 0));
}

#[test]
fn a_rank_closed_holding_a_chunk_its_transport_gave_back_says_it_failed() {
    let mut e = pair(Config { eager_threshold: 8, ..Config::default() });
    e[1].post_recv(9, spec(Some(0), None));
    e[0].post_send(1, SendMode::Standard, msg(1, 0, b"rendezvous data"));
    let (_, rts) = next_frame(&mut e[0]).unwrap();
    e[1].handle_frame(0, rts).unwrap();
    let (_, cts) = next_frame(&mut e[1]).unwrap();
    e[0].handle_frame(1, cts).unwrap();
    let dest = e[0].poll_writable().unwrap();
    let chunk = e[0].poll_transmit(dest).unwrap();
    assert_eq!(chunk.header.kind, Kind::RndvData);
    assert!(matches!(events(&mut e[0])[..], [Event::SendDone { id: 1, result: Ok(()) }]), "complete once its last chunk was taken");
    e[0].unsend(dest, chunk);
    e[0].close();
    e[0].writable(1);
    let rest = all_frames(&mut e[0]);
    assert!(matches!(&rest[..], [f] if f.header.kind == Kind::Bye && f.header.data_len == 1), "{rest:?}");
    e[1].handle_frame(0, rest[0].clone()).unwrap();
    assert!(matches!(events(&mut e[1])[..], [Event::RecvDone { id: 9, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })));
}

/// Messages of a call rank 1 has finished (context 0, tags 64..128) are
/// received and dropped, queued or still to come: eager ones give their
/// credit back, a rendezvous sender is answered and completes, and
/// messages of other calls stay queued.
#[test]
fn late_messages_of_a_finished_call_are_dropped() {
    let config = Config { eager_threshold: 16, eager_credit: 4 * EAGER_OVERHEAD, ..Config::default() };
    let mut e = pair(config);
    e[0].post_send(1, SendMode::Standard, msg(1, 64, b"queued"));
    e[0].post_send(2, SendMode::Standard, msg(1, 65, b"a rendezvous message, queued"));
    e[0].post_send(3, SendMode::Standard, msg(1, 128, b"next call"));
    pump(&mut e);
    assert!(matches!(&events(&mut e[0])[..], [Event::SendDone { id: 1, .. }, Event::SendDone { id: 3, .. }]), "the rendezvous send waits");
    assert!(e[1].credit_in_use(0) > 0);
    e[1].discard_call(0, 64, 64);
    pump(&mut e);
    assert!(matches!(&events(&mut e[0])[..], [Event::SendDone { id: 2, result: Ok(()) }]), "answered, its data dropped");
    // Still to come: dropped as it arrives.
    e[0].post_send(4, SendMode::Standard, msg(1, 127, b"late"));
    e[0].post_send(5, SendMode::Standard, msg(1, 66, b"a late rendezvous message"));
    pump(&mut e);
    assert_eq!(events(&mut e[0]).len(), 2, "both sends complete");
    // Only the next call's message is left, and only its credit held.
    e[1].post_recv(9, spec(Some(0), None));
    assert_eq!(deliveries(&mut e[1]), [(9, Bytes::from_static(b"next call"))]);
    e[1].post_recv(10, spec(Some(0), None));
    assert!(events(&mut e[1]).is_empty(), "nothing else queued");
    assert!(!e[1].discards(0, 128) && e[1].discards(0, 127));
    // A closed context drops everything, queued or to come.
    assert!(e[1].cancel_recv(10));
    let held = e[1].credit_in_use(0);
    e[0].post_send(6, SendMode::Standard, msg(1, 3, b"queued"));
    pump(&mut e);
    assert!(e[1].credit_in_use(0) > held);
    e[1].close_context(0);
    assert_eq!(e[1].credit_in_use(0), held, "its credit given back");
    e[0].post_send(7, SendMode::Standard, msg(1, 2, b"a rendezvous message to a closed context"));
    pump(&mut e);
    assert_eq!(events(&mut e[0]).len(), 2, "both sends complete");
    e[1].post_recv(11, spec(Some(0), None));
    assert!(events(&mut e[1]).is_empty(), "nothing queued");
    assert!(e[1].discards(0, 64) && e[1].discards(0, 5));
}

/// A rendezvous request for a message of a finished call (or one a
/// truncated receive took), from a peer that never sends the data it is
/// then asked for, holds what the peer was granted until the data comes:
/// the peer gets as many answers as it has slots, its later requests wait
/// unanswered in their slots, and one beyond those fails it. Data that
/// does come frees the room for the next. Without that, a peer could make
/// the receiver keep a transfer for every request it sends, for ever.
#[test]
fn late_rendezvous_requests_whose_data_never_comes_stay_within_the_slots() {
    let mut e = pair(Config { rndv_slots: 3, ..Config::default() });
    e[1].discard_call(0, 64, 64);
    let late = |seq: u64| Frame::control(Header { seq, send_id: 100 + seq, tag: 64, data_len: 10, recv_id: 0, ..Header::control(Kind::Rts, 0) });
    let answers = |e: &mut Engine| std::iter::from_fn(|| next_frame(e)).filter(|(_, f)| f.header.kind == Kind::Cts).map(|(_, f)| f.header).collect::<Vec<_>>();
    for seq in 0..6 {
        e[1].handle_frame(0, late(seq)).unwrap();
    }
    let first = answers(&mut e[1]);
    assert_eq!(first.len(), 3, "one answer per slot");
    // The data of one comes: the next request is answered.
    let cts = first[0];
    let data = Frame { header: Header { recv_id: cts.recv_id, send_id: cts.send_id, seq: 0, data_len: 10, ..Header::control(Kind::RndvData, 0) }, payload: Bytes::from_static(&[7; 10]) };
    e[1].handle_frame(0, data).unwrap();
    assert_eq!(answers(&mut e[1]).len(), 1, "answered once data freed the room");
    // Three answered and waiting for data, two waiting in their slots: one
    // more request is one beyond the slots.
    e[1].handle_frame(0, late(6)).unwrap();
    assert!(answers(&mut e[1]).is_empty());
    assert!(e[1].handle_frame(0, late(7)).is_err(), "beyond the slots");
    assert_eq!(process_failed(&events(&mut e[1])), 0, "nothing of this rank's waited on it");
}

/// Unsolicited data of a message of a finished call holds its credit
/// until the last of it is in, so that a peer that sends requests
/// without their data stays within its unsolicited credit.
#[test]
fn late_unsolicited_requests_hold_their_credit_until_their_data_is_in() {
    let mut e = pair(Config { unsolicited_credit: 3 * unsolicited_cost(10), ..Config::default() });
    e[1].discard_call(0, 64, 64);
    let late = |seq: u64| Frame::control(Header { seq, send_id: 100 + seq, tag: 64, data_len: 10, recv_id: RTS_UNSOLICITED, ..Header::control(Kind::Rts, 0) });
    for seq in 0..3 {
        e[1].handle_frame(0, late(seq)).unwrap();
    }
    assert_eq!(e[1].unsolicited_bytes(0).1, 3 * unsolicited_cost(10), "held while the data is to come");
    assert!(e[1].handle_frame(0, late(3)).is_err(), "beyond the credit");
    // Between honest ranks, the data comes and the credit goes back.
    let mut e = pair(Config { unsolicited_credit: 3 * unsolicited_cost(10), ..Config::default() });
    e[1].discard_call(0, 64, 64);
    e[1].handle_frame(0, late(0)).unwrap();
    e[1].handle_frame(0, forged_data(100, 0, 10, &[7; 10])).unwrap();
    assert_eq!(e[1].unsolicited_bytes(0), (0, 0), "given back");
    assert!(std::iter::from_fn(|| next_frame(&mut e[1])).any(|(_, f)| f.header.kind == Kind::Credit));
}

/// A rank that has said goodbye takes no ready message, though it has a
/// receive posted: handed over by a rank of this process (whose sender
/// looked just before the goodbye), it fails; as a frame, it is not
/// delivered, and its sender, which gets the goodbye first, fails it.
#[test]
fn a_rank_that_said_goodbye_takes_no_ready_message() {
    let mut e = Engine::new(1, 2, Config::default()).unwrap();
    e.post_recv(5, spec(Some(0), Some(3)));
    e.farewell(false);
    let arrival = e.arrive_local(0, LocalMessage { msg: msg(1, 3, b"ab"), mode: SendMode::Ready, send_id: 0 });
    assert!(matches!(arrival, LocalArrival::Done(Err(ref e)) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "{arrival:?}");
    assert!(events(&mut e).iter().all(|ev| !matches!(ev, Event::RecvDone { .. })), "not delivered");

    let mut e = pair(Config::default());
    e[1].post_recv(5, spec(Some(0), Some(3)));
    e[0].post_send(1, SendMode::Ready, msg(1, 3, b"ab"));
    e[1].farewell(false);
    pump(&mut e);
    assert!(events(&mut e[1]).iter().all(|ev| !matches!(ev, Event::RecvDone { .. })), "not delivered");
    let sent = events(&mut e[0]);
    assert!(matches!(sent[..], [Event::SendDone { id: 1, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "{sent:?}");

    // A ready message too large to go whole asks first: the request is
    // not matched either.
    let mut e = pair(Config { eager_threshold: 1, ..Config::default() });
    e[1].post_recv(5, spec(Some(0), Some(3)));
    e[0].post_send(1, SendMode::Ready, msg(1, 3, b"ab"));
    e[1].farewell(false);
    pump(&mut e);
    assert!(events(&mut e[1]).is_empty(), "the receive stays posted, unmatched");
    let sent = events(&mut e[0]);
    assert!(matches!(sent[..], [Event::SendDone { id: 1, result: Err(ref e) }] if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. })), "{sent:?}");
}

/// A receive without a limit of its own, bounded only by
/// `Config::max_message`, does not take room for the whole length a
/// sender claims once its first chunks arrive: its buffer grows with what
/// has arrived. A receive into a buffer of that size takes it at once.
#[test]
fn the_message_cap_reserves_no_room_ahead_of_the_data() {
    let total = 16 << 20;
    let config = Config { max_message: Some(2 * total as u64), rndv_chunk: 64 << 10, ..Config::default() };
    for own_limit in [false, true] {
        let mut e = pair(config);
        let data = Bytes::from(vec![7u8; total]);
        e[0].post_send(1, SendMode::Synchronous, Outgoing { dest: 1, context: 0, tag: 0, signature: Some((7, total as u64)), repr: Repr::Native, desc_len: 0, data });
        match own_limit {
            true => e[1].post_recv_limited(5, spec(Some(0), Some(0)), total as u64),
            false => e[1].post_recv(5, spec(Some(0), Some(0))),
        }
        let mut chunks = 0;
        while chunks < 2 {
            if let Some((_, f)) = next_frame(&mut e[0]) {
                chunks += usize::from(f.header.kind == Kind::RndvData);
                e[1].handle_frame(0, f).unwrap();
            } else if let Some((_, f)) = next_frame(&mut e[1]) {
                e[0].handle_frame(1, f).unwrap();
            } else {
                panic!("no frame moves");
            }
        }
        let Received::Gathered(gathered) = &e[1].transfers.get(&5).expect("the transfer").received else { panic!("two chunks gathered") };
        match own_limit {
            true => assert!(gathered.capacity() >= total, "{}", gathered.capacity()),
            false => assert!(gathered.capacity() <= 2 << 20, "{} bytes for 128 KiB arrived", gathered.capacity()),
        }
    }
}

/// A send of a rank of this process whose waiting message a probe took is
/// answered once when this rank ends (failed), and not again when the
/// probe's handle is received afterwards or put back.
#[test]
fn a_probed_waiting_send_is_answered_once() {
    for receive in [true, false] {
        let mut e = Engine::new(1, 2, Config::default()).unwrap();
        let arrival = e.arrive_local(0, LocalMessage { msg: msg(1, 3, b"ab"), mode: SendMode::Synchronous, send_id: 9 });
        assert!(matches!(arrival, LocalArrival::AwaitsMatch), "{arrival:?}");
        let m = e.improbe(&spec(Some(0), Some(3))).expect("taken");
        e.farewell(false);
        let answered = |ev: &Event| matches!(ev, Event::LocalSendDone { rank: 0, id: 9, .. });
        assert_eq!(events(&mut e).iter().filter(|ev| answered(ev)).count(), 1);
        match receive {
            true => e.mrecv(5, m),
            false => e.unmatch(m),
        }
        e.close();
        assert!(!events(&mut e).iter().any(answered), "answered once (received {receive})");
    }
}
