//! What a rank accepting a QUIC connection reads from the connecting peer
//! after the TLS handshake: the head of its control stream
//! (`mpx_net::quic::StreamHead`), its hello (checked by
//! `mpx_net::quic::Greeting`), then the frames that follow,
//! handed to an engine, all from arbitrary bytes cut at arbitrary points.
//! Asserts that nothing panics, that only a hello from a rank that dials
//! this one is accepted, and that the engine's invariants hold after.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mpx_core::proto::engine::Engine;
use mpx_core::proto::sim;
use mpx_core::proto::wire::{Decoder, Kind, Repr};
use mpx_net::quic::{Greeting, StreamHead};

fuzz_target!(|data: &[u8]| {
    let [me, size, piece, first, ..] = data else { return };
    let size = u32::from(*size % 5) + 2;
    let me = u32::from(*me) % size;
    let piece = usize::from(*piece).max(1);
    let Ok(len) = StreamHead::len(*first) else { return };
    let Some(head) = data.get(3..3 + len) else { return };
    let rest = &data[3 + len..];
    match StreamHead::decode(head) {
        Ok(StreamHead::Control { .. }) => {}
        Ok(other) => {
            // Not a control stream: the connection is refused before any
            // frame, unless it leads a bulk connection from a higher rank.
            assert_eq!(StreamHead::decode(&other.encode()).ok(), Some(other));
            let accepted = other.bulk_dialler(me, size);
            let from_higher = matches!(other, StreamHead::BulkConnection { rank } if rank > me && rank < size);
            assert_eq!(accepted.is_ok(), from_higher, "rank {me} of {size} and a stream led by {other:?}");
            return;
        }
        Err(e) => panic!("a head of the length its first byte names was refused: {e}"),
    }
    let config = sim::config(Repr::Native);
    let mut greeting = Greeting::new(me, size);
    let mut chunks = rest.chunks(piece);
    let hello = loop {
        let Some(chunk) = chunks.next() else { return };
        match greeting.push(chunk) {
            Ok(Some(hello)) => break hello,
            Ok(None) => {}
            Err(_) => return,
        }
    };
    let claimed = hello.header.source;
    assert_eq!(hello.header.kind, Kind::Hello);
    assert!(claimed > me && claimed < size, "rank {me} of {size} accepted a hello from rank {claimed}");
    let mut engine = Engine::new(me, size, config).expect("a rank inside the world");
    let _ = engine.handle_frame(claimed, hello);
    let mut stream = greeting.into_rest();
    for chunk in chunks {
        stream.extend_from_slice(chunk);
    }
    let decoder = Decoder::new(config.max_payload());
    while let Ok(Some(frame)) = decoder.decode(&mut stream) {
        let _ = engine.handle_frame(claimed, frame);
    }
    // Memory for what the peer sent stays within the credit granted it.
    assert!(engine.credit_in_use(claimed) <= config.eager_credit);
    assert!(engine.unexpected_eager_bytes() <= config.eager_credit);
    let (held, credit) = engine.unsolicited_bytes(claimed);
    assert!(held <= credit && credit <= config.unsolicited_credit, "{held} unsolicited bytes held on {credit} of credit");
    if engine.is_failed(claimed) {
        assert!(!engine.anything_waits_on(claimed));
    }
});
