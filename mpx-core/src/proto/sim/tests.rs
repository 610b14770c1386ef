//! Property tests: worlds of honest engines driven at random must deliver
//! every message intact and leave nothing waiting once all ranks are done;
//! rank 0's view of each world is a script of valid frames, which replays
//! identically and seeds the fuzzers; scripts cut and corrupted at random
//! must keep every invariant.

use std::path::PathBuf;

use bytes::BytesMut;

use super::*;

/// xorshift64*: a small deterministic generator for test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

/// Three honest ranks whose links carry bytes between them; rank 0's steps
/// are recorded.
struct World {
    nodes: Vec<Node>,
    /// Bytes in flight, by (from, to), on each lane: 0 carries every frame
    /// but, when `split`, rendezvous data, which goes on lane 1.
    links: Vec<Vec<[BytesMut; 2]>>,
    /// Rendezvous data travels on a link of its own, as over QUIC: it may
    /// overtake what was sent before it (an RTS, a hello).
    split: bool,
    /// Times rendezvous data reached a rank that had not had its sender's
    /// hello yet, and was kept.
    data_before_hello: usize,
}

impl World {
    fn new(repr: [Repr; SIZE as usize]) -> World {
        World::with_lanes(repr, false)
    }

    fn with_lanes(repr: [Repr; SIZE as usize], split: bool) -> World {
        let mut nodes: Vec<Node> = (0..SIZE).map(|r| Node::new(r, repr[r as usize])).collect();
        nodes[0].recording = Some(Script { external32: repr[0] == Repr::External32, ops: Vec::new() });
        let links = (0..SIZE).map(|_| (0..SIZE).map(|_| [BytesMut::new(), BytesMut::new()]).collect()).collect();
        let mut world = World { nodes, links, split, data_before_hello: 0 };
        if split {
            // The hellos towards lower ranks stay in flight: a rank's
            // rendezvous data may then reach a lower rank before its hello
            // does, as over QUIC, where it overtakes the control stream.
            world.pump_where(|from, to| from < to);
        } else {
            world.pump();
        }
        world
    }

    /// The selector node `at` uses for peer `peer`.
    fn selector(at: u32, peer: u32) -> u8 {
        (if peer > at { peer - 1 } else { peer }) as u8
    }

    fn apply(&mut self, at: u32, op: &Op) {
        for sent in self.nodes[at as usize].apply(op) {
            let lane = usize::from(self.split && sent.bulk);
            self.links[at as usize][sent.dest as usize][lane].extend_from_slice(&sent.bytes);
        }
        self.nodes[at as usize].check();
    }

    /// Moves up to `max` bytes (at least one) from `from` to `to`.
    fn deliver(&mut self, from: u32, to: u32, max: usize) {
        self.deliver_on(from, to, max, 0);
    }

    /// Moves up to `max` bytes (at least one) from `from` to `to` on
    /// `lane`.
    fn deliver_on(&mut self, from: u32, to: u32, max: usize, lane: usize) {
        let link = &mut self.links[from as usize][to as usize][lane];
        let n = max.clamp(1, link.len().max(1)).min(link.len());
        if n == 0 {
            return;
        }
        let data = link.split_to(n).to_vec();
        let no_hello = self.nodes[to as usize].engine().awaiting_hello().contains(&(from as usize));
        let selector = Self::selector(to, from);
        self.apply(to, &if lane == 0 { Op::Bytes { from: selector, data } } else { Op::BulkBytes { from: selector, data } });
        if lane == 1 && no_hello && self.nodes[to as usize].engine().unsolicited_bytes(from).0 > 0 {
            self.data_before_hello += 1;
        }
    }

    /// Transmits and delivers everything, unblocking every link, until
    /// nothing moves.
    fn pump(&mut self) {
        self.pump_where(|_, _| true);
    }

    /// [`pump`](World::pump), delivering only on the links from `from` to
    /// `to` that `links` accepts.
    fn pump_where(&mut self, links: impl Fn(u32, u32) -> bool) {
        for at in 0..SIZE {
            for peer in (0..SIZE).filter(|&p| p != at) {
                self.apply(at, &Op::Writable { dest: Self::selector(at, peer) });
            }
        }
        loop {
            let mut moved = false;
            for at in 0..SIZE {
                self.apply(at, &Op::Transmit { frames: u8::MAX });
            }
            for from in 0..SIZE {
                for to in (0..SIZE).filter(|&to| links(from, to)) {
                    // Rendezvous data first: it overtakes what went before it.
                    for lane in [1, 0] {
                        let n = self.links[from as usize][to as usize][lane].len();
                        if n > 0 {
                            self.deliver_on(from, to, n, lane);
                            moved = true;
                        }
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// Time passes on every rank; the transports then move everything, so
    /// honest ranks never go silent.
    fn advance(&mut self, millis: u16) {
        for at in 0..SIZE {
            self.apply(at, &Op::Advance { millis });
        }
        self.pump();
    }

    /// One random step of a random rank.
    fn random_step(&mut self, rng: &mut Rng) {
        let at = rng.below(u64::from(SIZE)) as u32;
        let sel = rng.byte();
        let op = match rng.below(20) {
            0..=4 => Op::Send { to: rng.byte(), mode: rng.byte(), context: rng.byte(), tag: rng.byte(), len: rng.below(3) as u16 * rng.below(250) as u16 },
            5..=8 => Op::Recv {
                source: if rng.below(3) == 0 { 255 } else { rng.byte() % 3 },
                tag: if rng.below(3) == 0 { 255 } else { rng.byte() },
                context: rng.byte(),
                limit: if rng.below(4) == 0 { rng.below(400) as u16 } else { u16::MAX },
            },
            9 => Op::Cancel { which: sel },
            10 => Op::Withdraw { which: sel },
            11 => Op::Probe { source: if rng.below(2) == 0 { 255 } else { rng.byte() % 3 }, tag: 255, context: rng.byte() },
            12 => Op::Mrecv { which: sel },
            13 => Op::Unmatch { which: sel },
            14 | 15 => Op::Consume { which: sel, requeue: rng.below(5) == 0 },
            16 => Op::Block { dest: sel },
            17 => Op::Transmit { frames: rng.byte() % 8 },
            18 => {
                let from = rng.below(u64::from(SIZE)) as u32;
                let lane = usize::from(self.split && rng.below(2) == 0);
                self.deliver_on(from, at, 1 + rng.below(200) as usize, lane);
                return;
            }
            _ => {
                self.advance(rng.below(200) as u16);
                return;
            }
        };
        self.apply(at, &op);
    }

    /// Every rank takes what it holds and says goodbye; time passes well
    /// beyond the idle timeout with the transports moving everything.
    fn finish(&mut self) {
        for at in 0..SIZE {
            while self.nodes[at as usize].held().1 > 0 {
                self.apply(at, &Op::Unmatch { which: 0 });
            }
            self.apply(at, &Op::Farewell { failed: false });
        }
        for _ in 0..12 {
            self.pump();
            for at in 0..SIZE {
                while self.nodes[at as usize].held().0 > 0 {
                    self.apply(at, &Op::Consume { which: 0, requeue: false });
                }
            }
            self.advance(300);
        }
    }

    /// The properties of an honest world: no rank ever failed another,
    /// every message taken is intact and came from the rank it names.
    fn check_honest(&self) {
        let failures: Vec<_> = (0..SIZE)
            .flat_map(|at| (0..SIZE).filter_map(move |p| self.nodes[at as usize].engine().is_failed(p).then_some((at, p))))
            .map(|(at, p)| (at, p, self.nodes[at as usize].engine().dead(p, false)))
            .collect();
        assert!(failures.is_empty(), "honest ranks failed each other: {failures:?}");
        for (at, node) in self.nodes.iter().enumerate() {
            for peer in 0..SIZE {
                assert!(!node.engine().is_failed(peer), "rank {at} failed honest rank {peer}: {:?}", node.engine().dead(peer, false));
            }
            for r in &node.received {
                let (hash, len) = r.envelope.signature.expect("scripted sends are typed");
                let (rank, n) = ((hash >> 32) as u32, hash & 0xffff_ffff);
                assert_eq!(r.envelope.source, rank, "a message claims the wrong sender");
                assert_eq!(r.data, pattern(rank, n, len as usize), "message {n} of rank {rank} arrived corrupted");
            }
            for (id, e) in &node.errors {
                assert!(
                    matches!(e.kind(),
                        crate::ErrorKind::NotReady | crate::ErrorKind::Truncate { .. } | crate::ErrorKind::ProcessFailed { .. } | crate::ErrorKind::Finalized
                    ),
                    "request {id} of rank {at} failed for no reason an honest run gives: {e}"
                );
            }
        }
    }
}

fn reprs(rng: &mut Rng) -> [Repr; SIZE as usize] {
    std::array::from_fn(|_| if rng.below(4) == 0 { Repr::External32 } else { Repr::Native })
}

/// A random honest world of `steps` steps, finished; with an odd seed,
/// rendezvous data travels on links of its own.
fn honest_world(seed: u64, steps: usize) -> World {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut world = World::with_lanes(reprs(&mut rng), seed % 2 == 1);
    for _ in 0..steps {
        world.random_step(&mut rng);
    }
    world.check_honest();
    world.finish();
    world
}

#[test]
fn honest_worlds_deliver_everything_and_leave_nothing_waiting() {
    let mut delivered = 0;
    for seed in 0..300 {
        let world = honest_world(seed, 150);
        world.check_honest();
        for (at, node) in world.nodes.iter().enumerate() {
            assert_eq!(node.waiting_on_others(), Vec::<ReqId>::new(), "seed {seed}: rank {at} still waits on others");
            delivered += node.received.len();
        }
    }
    assert!(delivered > 3000, "the worlds exchanged only {delivered} messages: the generator is too weak");
}

/// In worlds whose rendezvous data travels apart, a lower rank holds
/// unsolicited data from a rank whose hello has not reached it yet, and
/// every invariant holds.
#[test]
fn rendezvous_data_may_arrive_before_its_senders_hello() {
    let mut before_hello = 0;
    for seed in (1..200).step_by(2) {
        before_hello += honest_world(seed, 60).data_before_hello;
    }
    assert!(before_hello > 0, "no world had data arrive before its sender's hello");
}

#[test]
fn a_recorded_script_replays_identically() {
    for seed in 0..40 {
        let world = honest_world(seed, 150);
        let recorded = world.nodes[0].recording.clone().expect("rank 0 records");
        let script = Script::parse(&recorded.to_bytes());
        assert_eq!(script, recorded, "seed {seed}: the script does not survive its encoding");
        let mut replay = Node::new(0, if script.external32 { Repr::External32 } else { Repr::Native });
        for op in &script.ops {
            replay.apply(op);
            replay.check();
        }
        let original = &world.nodes[0];
        let sigs = |n: &Node| n.received.iter().map(|r| (r.envelope.signature, r.data.clone())).collect::<Vec<_>>();
        assert_eq!(sigs(&replay), sigs(original), "seed {seed}: the replay took other messages");
        assert_eq!(replay.errors.len(), original.errors.len(), "seed {seed}");
        assert_eq!(replay.waiting_on_others(), original.waiting_on_others(), "seed {seed}");
    }
}

#[test]
fn cut_and_corrupted_scripts_keep_every_invariant() {
    let mut rng = Rng(0xfeed);
    for seed in 0..60 {
        let bytes = honest_world(seed, 120).nodes[0].recording.clone().expect("records").to_bytes();
        for _ in 0..25 {
            let mut b = bytes.clone();
            match rng.below(4) {
                0 => b.truncate(rng.below(b.len() as u64) as usize),
                1 => {
                    for _ in 0..1 + rng.below(8) {
                        let i = rng.below(b.len() as u64) as usize;
                        b[i] ^= 1 << rng.below(8);
                    }
                }
                2 => {
                    let i = rng.below(b.len() as u64) as usize;
                    let j = rng.below(b.len() as u64) as usize;
                    let (lo, hi) = (i.min(j), i.max(j));
                    b.drain(lo..hi);
                }
                _ => {
                    let i = rng.below(b.len() as u64) as usize;
                    let junk: Vec<u8> = (0..rng.below(64)).map(|_| rng.byte()).collect();
                    b.splice(i..i, junk);
                }
            }
            Node::run(&b);
        }
    }
}

#[test]
fn random_bytes_keep_every_invariant() {
    let mut rng = Rng(7);
    for _ in 0..2000 {
        let len = rng.below(600) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
        Node::run(&bytes);
        check_decoder(&bytes);
    }
}

/// Every stream rank 0 received in honest worlds, control and bulk, whole
/// from its start, decodes alike however it is cut.
#[test]
fn streams_decode_the_same_however_they_are_cut() {
    let mut bulk_streams = 0;
    for seed in 0..20 {
        let world = honest_world(seed, 100);
        let script = world.nodes[0].recording.as_ref().expect("records");
        for (index, stream) in streams_by_peer_and_lane(script).into_iter().enumerate() {
            if stream.is_empty() {
                continue;
            }
            bulk_streams += index % 2;
            check_decoder(&[vec![seed as u8], stream].concat());
        }
    }
    assert!(bulk_streams > 0, "some worlds carry rendezvous data on a stream of its own");
}

/// The bytes of each stream a script's node received, in order: entry
/// `2 * peer` is the peer's control stream, `2 * peer + 1` its bulk stream
/// ([`Op::BulkBytes`]).
fn streams_by_peer_and_lane(script: &Script) -> Vec<Vec<u8>> {
    let mut streams = vec![Vec::new(); 2 * SIZE as usize];
    for op in &script.ops {
        let (Op::Bytes { from, data } | Op::BulkBytes { from, data }) = op else { continue };
        let lane = usize::from(matches!(op, Op::BulkBytes { .. }));
        streams[2 * (usize::from(*from) % SIZE as usize) + lane].extend_from_slice(data);
    }
    streams
}

/// Rank 0's recorded view of a world in which its bounded receive (10
/// bytes) matches a 500-byte rendezvous message from rank 1 and is
/// withdrawn after `chunks` chunks of the data have arrived; then `then`
/// runs on the world and the rest of the data arrives.
fn withdrawn_bounded_receive(chunks: u8, then: &[Op], last: &[Op]) -> (World, Script) {
    let mut world = World::new([Repr::Native; SIZE as usize]);
    world.apply(0, &Op::Recv { source: 1, tag: 0, context: 0, limit: 10 });
    world.apply(1, &Op::Send { to: 0, mode: 0, context: 0, tag: 0, len: 500 });
    // The request to send, its answer, then `chunks` chunks.
    world.apply(1, &Op::Transmit { frames: u8::MAX });
    world.deliver(1, 0, usize::MAX);
    world.apply(0, &Op::Transmit { frames: u8::MAX });
    world.deliver(0, 1, usize::MAX);
    if chunks > 0 {
        world.apply(1, &Op::Transmit { frames: chunks });
        world.deliver(1, 0, usize::MAX);
    }
    world.apply(0, &Op::Withdraw { which: 0 });
    for op in then {
        world.apply(0, op);
    }
    world.pump();
    for op in last {
        world.apply(0, op);
    }
    let script = world.nodes[0].recording.clone().expect("rank 0 records");
    (world, script)
}

/// Regression scripts for bounded receives withdrawn from a rendezvous
/// message (see `Engine::withdraw_recv`): `(name, script)`. Each ends with
/// rank 0's receive failing with `Truncate`.
fn regression_seeds() -> Vec<(&'static str, Script)> {
    let any = Op::Recv { source: 255, tag: 255, context: 0, limit: u16::MAX };
    let cases: [(&str, u8, &[Op], &[Op]); 3] = [
        // Withdrawn before any data arrived: the data must not be kept.
        ("seed-regress-withdrawn-bounded-receive", 0, &[], std::slice::from_ref(&any)),
        // Two chunks dropped, then an unbounded receive takes the message
        // over: it must not succeed with the data missing.
        ("seed-regress-partly-discarded-taken-over", 2, std::slice::from_ref(&any), &[]),
        // Two chunks dropped, a matched probe holds the message while the
        // rest arrives, then receives it.
        ("seed-regress-partly-discarded-probed", 2, &[Op::Probe { source: 1, tag: 255, context: 0 }], &[Op::Mrecv { which: 0 }]),
    ];
    cases
        .into_iter()
        .map(|(name, chunks, then, last)| {
            let (world, script) = withdrawn_bounded_receive(chunks, then, last);
            let errors = &world.nodes[0].errors;
            assert!(
                matches!(errors[..], [(_, ref e)] if matches!(e.kind(), crate::ErrorKind::Truncate { needed: 500, available: 10, .. })),
                "{name}: {errors:?}"
            );
            assert_eq!(world.nodes[0].held(), (0, 0), "{name}: nothing was delivered");
            (name, script)
        })
        .collect()
}

/// Rank 0's recorded view of a world in which its receive takes a
/// 500-byte rendezvous message rank 1 sends in `mode` (0 standard, which
/// may come unsolicited; 2 synchronous, which waits for the answer), and
/// gives it up: withdrawn after two chunks of the data have arrived, or,
/// with `delivered`, abandoned to the queue once it has the message whole.
/// A second receive then takes the message, which must arrive whole.
fn requeued_rendezvous(mode: u8, delivered: bool) -> (World, Script) {
    let any = Op::Recv { source: 255, tag: 255, context: 0, limit: u16::MAX };
    let mut world = World::new([Repr::Native; SIZE as usize]);
    world.apply(0, &Op::Recv { source: 1, tag: 0, context: 0, limit: u16::MAX });
    world.apply(1, &Op::Send { to: 0, mode, context: 0, tag: 0, len: 500 });
    // The request to send (unsolicited data queued behind it waits), its
    // answer if one is due.
    world.apply(1, &Op::Transmit { frames: 1 });
    world.deliver(1, 0, usize::MAX);
    world.apply(0, &Op::Transmit { frames: u8::MAX });
    world.deliver(0, 1, usize::MAX);
    if delivered {
        world.pump();
        assert_eq!(world.nodes[0].held(), (1, 0), "the first receive has the message");
        world.apply(0, &Op::Consume { which: 0, requeue: true });
    } else {
        world.apply(1, &Op::Transmit { frames: 2 });
        world.deliver(1, 0, usize::MAX);
        assert_eq!(world.nodes[0].held(), (0, 0), "the first receive is still waiting for data");
        assert_eq!(world.nodes[0].engine().rendezvous_bytes(1), 2 * config(Repr::Native).rndv_chunk as u64, "two chunks are in");
        world.apply(0, &Op::Withdraw { which: 0 });
    }
    world.apply(0, &any);
    world.pump();
    world.apply(0, &Op::Consume { which: 0, requeue: false });
    let script = world.nodes[0].recording.clone().expect("rank 0 records");
    (world, script)
}

/// Regression scripts for rendezvous messages a receive gave up (see
/// `Engine::withdraw_recv` and `Engine::requeue`), each ending with the
/// message received whole by the next receive: `(name, script)`.
fn requeued_rendezvous_seeds() -> Vec<(&'static str, Script)> {
    let cases = [
        ("seed-regress-requeued-rendezvous-0", 2, false),
        ("seed-regress-requeued-rendezvous-1", 2, true),
        ("seed-regress-requeued-rendezvous-2", 0, false),
        ("seed-regress-requeued-rendezvous-3", 0, true),
    ];
    cases
        .into_iter()
        .map(|(name, mode, delivered)| {
            let (world, script) = requeued_rendezvous(mode, delivered);
            let node = &world.nodes[0];
            assert!(node.errors.is_empty(), "{name}: {:?}", node.errors);
            assert_eq!(node.received.len(), 1, "{name}: one message taken");
            assert_eq!(node.received[0].data, pattern(1, 0, 500), "{name}: the message arrived whole");
            assert_eq!(node.held(), (0, 0), "{name}: nothing else held");
            (name, script)
        })
        .collect()
}

/// The regression scripts replay under every invariant; with
/// `MPX_WRITE_CORPUS=1` set, they are written to the engine target's
/// corpus too.
#[test]
fn regression_scripts_keep_every_invariant() {
    for (name, script) in regression_seeds().into_iter().chain(requeued_rendezvous_seeds()) {
        let bytes = script.to_bytes();
        if std::env::var_os("MPX_WRITE_CORPUS").is_some() {
            std::fs::write(corpus_dir("engine_frames").join(name), &bytes).expect("corpus file");
        }
        Node::run(&bytes);
    }
}

/// The fuzzers' seed corpora, committed under `fuzz/corpus/`.
fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target)
}

/// Seeds for the engine target: rank 0's recorded view of honest worlds
/// (valid frame streams from both peers, interleaved with its own steps);
/// for the decoder target: the frame streams alone.
fn seeds() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (mut engine, mut decoder) = (Vec::new(), Vec::new());
    for seed in 0..24 {
        let script = honest_world(1000 + seed, 40 + 10 * seed as usize).nodes[0].recording.clone().expect("records");
        engine.push(script.to_bytes());
        decoder.extend(streams_by_peer_and_lane(&script).into_iter().filter(|s| !s.is_empty()).map(|s| [vec![seed as u8], s].concat()));
    }
    (engine, decoder)
}

/// Replays the committed corpora (and any crash inputs kept beside them);
/// with `MPX_WRITE_CORPUS=1` set, writes the generated seeds there first.
#[test]
fn fuzz_corpora_replay() {
    let (engine, decoder) = seeds();
    if std::env::var_os("MPX_WRITE_CORPUS").is_some() {
        for (target, inputs) in [("engine_frames", &engine), ("frame_decoder", &decoder)] {
            let dir = corpus_dir(target);
            std::fs::create_dir_all(&dir).expect("corpus directory");
            for (i, input) in inputs.iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{i:02}")), input).expect("corpus file");
            }
        }
    }
    for input in &engine {
        Node::run(input);
    }
    for input in &decoder {
        check_decoder(input);
    }
    for (target, run) in [("engine_frames", Node::run as fn(&[u8])), ("frame_decoder", check_decoder)] {
        let Ok(entries) = std::fs::read_dir(corpus_dir(target)) else { continue };
        for entry in entries {
            let path = entry.expect("corpus entry").path();
            run(&std::fs::read(&path).expect("corpus file"));
        }
    }
}

/// The number a handed-over message's signature carries (see [`Op::Local`]).
fn handed_over_number(envelope: &crate::proto::engine::Envelope) -> u64 {
    envelope.signature.expect("handed-over messages are typed").0 & 0x7fff_ffff
}

/// Messages a peer hands over, done at once or waiting with their data
/// for a match, are taken in the order it handed them over.
#[test]
fn handed_over_messages_are_taken_in_order() {
    let mut node = Node::new(0, Repr::Native);
    for (mode, len) in [(0, 3), (2, 300), (0, 5), (0, 600), (2, 1)] {
        node.apply(&Op::Local { from: 0, mode, context: 0, tag: 2, len });
    }
    for _ in 0..5 {
        node.apply(&Op::Recv { source: 255, tag: 255, context: 0, limit: 65535 });
        node.apply(&Op::Consume { which: 0, requeue: false });
    }
    let numbers: Vec<u64> = node.received.iter().map(|r| handed_over_number(&r.envelope)).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5]);
}

/// The order check fires when a receive takes a handed-over message
/// while an earlier one of its sender with the same envelope waits.
#[test]
#[should_panic(expected = "while its earlier message 1 with the same envelope waits")]
fn the_order_check_fires_on_a_message_that_overtakes() {
    let mut node = Node::new(0, Repr::Native);
    for _ in 0..2 {
        node.apply(&Op::Local { from: 0, mode: 0, context: 0, tag: 2, len: 3 });
    }
    let second = *node.engine.unexpected_envelopes().find(|e| handed_over_number(e) == 2).expect("queued");
    node.check_order("receive 99", &second);
}
