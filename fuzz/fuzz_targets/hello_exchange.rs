//! What a rank accepting a QUIC connection reads from the connecting peer
//! after the TLS handshake: the lane byte of its control stream, its hello
//! (checked by `mpx_net::quic::Greeting`), then the frames that follow,
//! handed to an engine, all from arbitrary bytes cut at arbitrary points.
//! Asserts that nothing panics, that only a hello from a rank that dials
//! this one is accepted, and that the engine's invariants hold after.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mpx_core::proto::engine::Engine;
use mpx_core::proto::sim;
use mpx_core::proto::wire::{Decoder, Kind, Repr};
use mpx_net::quic::Greeting;

fuzz_target!(|data: &[u8]| {
    let [me, size, piece, lane, rest @ ..] = data else { return };
    let size = u32::from(*size % 5) + 2;
    let me = u32::from(*me) % size;
    let piece = usize::from(*piece).max(1);
    if *lane != 0 {
        // Not the control lane's byte: the stream is refused before any frame.
        return;
    }
    let config = sim::config(Repr::Native);
    let mut greeting = Greeting::new(me, size, config.max_payload());
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
    if engine.is_failed(claimed) {
        assert!(!engine.anything_waits_on(claimed));
    }
});
