//! The QUIC transport's own guarantees: who may connect, what a hostile
//! peer's bytes do, and that a failure keeps its cause.

use std::error::Error as _;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use mpx_core::proto::engine::{Config, Engine};

use mpx_core::{Endpoint, Error};

use super::*;

/// `n` sockets on 127.0.0.1 and their addresses.
fn sockets(n: usize) -> (Vec<UdpSocket>, Vec<SocketAddr>) {
    let sockets: Vec<UdpSocket> = (0..n).map(|_| bind(([127, 0, 0, 1], 0).into()).unwrap()).collect();
    let addrs = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
    (sockets, addrs)
}

/// Ranks 0 and 1 of a new job `job` on 127.0.0.1.
fn pair(job: u64) -> (Endpoint, Endpoint) {
    pair_with(job, &options())
}

/// [`pair`] with `options`.
fn pair_with(job: u64, options: &Options) -> (Endpoint, Endpoint) {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(job).unwrap();
    let one = start(sockets.pop().unwrap(), &addrs, job.issue(1).unwrap(), options).unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), options).unwrap();
    (zero, one)
}

fn options() -> Options {
    Options { connect_timeout: Duration::from_secs(2), ..Options::local() }
}

/// `credential` relabelled as rank `rank`: its certificate still names
/// the rank it was issued for.
fn relabelled(credential: &RankCredential, rank: u32) -> RankCredential {
    let pem = credential.to_pem().replacen(&format!("rank={}", credential.rank()), &format!("rank={rank}"), 1);
    let forged = RankCredential::from_pem(&pem).unwrap();
    assert_eq!(forged.rank(), rank);
    forged
}

/// The messages of `e`'s source chain, outermost first.
fn chain(e: &Error) -> String {
    let mut out = e.to_string();
    let mut at: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(cause) = at {
        out += " / ";
        out += &cause.to_string();
        at = cause.source();
    }
    out
}

/// A rank played by hand: a client endpoint on `socket` and the client
/// settings of rank `rank`'s credential of `job`, with `options`'
/// transport settings.
fn hand_client(job: &JobCredential, rank: u32, socket: UdpSocket, options: &Options) -> (quinn::Endpoint, quinn::ClientConfig) {
    let mut client = job.issue(rank).unwrap().client_config().unwrap();
    client.transport_config(std::sync::Arc::new(options.transport().unwrap()));
    let quic = quinn::Endpoint::new(quinn::EndpointConfig::default(), None, socket, quinn::default_runtime().unwrap()).unwrap();
    (quic, client)
}

/// The hello rank `rank` of `size` sends rank 0.
fn hello_to_zero(rank: u32, size: u32) -> mpx_core::proto::wire::Frame {
    let mut engine = Engine::new(rank, size, Config::default()).unwrap();
    std::iter::from_fn(|| engine.poll_writable().and_then(|d| engine.poll_transmit(d).map(|f| (d, f))))
        .find(|(dest, _)| *dest == 0)
        .expect("a hello for rank 0")
        .1
}

/// Writes rank `rank`'s hello to rank 0 (of `size` ranks) on `control`, as
/// a rank played by hand says it.
async fn say_hello_to_zero(control: &mut quinn::SendStream, rank: u32, size: u32) {
    let hello = hello_to_zero(rank, size);
    control.write_all(&hello.encode_header()).await.unwrap();
    control.write_all(&hello.payload).await.unwrap();
}

/// Accepts the peer's control stream on `conn` and reads its head: the
/// stream, and the port of the peer's bulk socket.
async fn their_control_head(conn: &quinn::Connection) -> (quinn::RecvStream, u16) {
    let mut theirs = conn.accept_uni().await.unwrap();
    let mut head = [0u8; 3];
    theirs.read_exact(&mut head).await.unwrap();
    let StreamHead::Control { bulk_port } = StreamHead::decode(&head).unwrap() else { panic!("not a control head: {head:?}") };
    (theirs, bulk_port)
}

/// A UDP port of 127.0.0.1 that is free now.
fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Rank 0 of `job` played by hand: a quinn endpoint on `socket` that
/// accepts connections with rank 0's credential.
fn hand_rank_zero(job: &JobCredential, socket: UdpSocket) -> quinn::Endpoint {
    let mut server = job.issue(0).unwrap().server_config().unwrap();
    server.transport_config(std::sync::Arc::new(options().transport().unwrap()));
    quinn::Endpoint::new(quinn::EndpointConfig::default(), Some(server), socket, quinn::default_runtime().unwrap()).unwrap()
}

/// A rank played by hand that announces a bulk socket: its control
/// connection to rank 0 of job `job_id` at `addr`, its control stream (led
/// by its head), and the port of rank 0's bulk socket, read from rank 0's
/// control stream.
struct HandRank {
    quic: quinn::Endpoint,
    client: quinn::ClientConfig,
    name: String,
    conn: quinn::Connection,
    control: quinn::SendStream,
    /// Rank 0's control stream: kept, as dropping it would tell rank 0 to
    /// stop sending.
    _theirs: quinn::RecvStream,
    bulk_port: u16,
}

async fn hand_rank(job: &JobCredential, job_id: u64, rank: u32, socket: UdpSocket, addr: SocketAddr, options: &Options) -> HandRank {
    let (quic, client) = hand_client(job, rank, socket, options);
    let name = rank_name(job_id, 0);
    let conn = quic.connect_with(client.clone(), addr, &name).unwrap().await.unwrap();
    let mut control = conn.open_uni().await.unwrap();
    control.write_all(&StreamHead::Control { bulk_port: 1 }.encode()).await.unwrap();
    let (_theirs, bulk_port) = their_control_head(&conn).await;
    HandRank { quic, client, name, conn, control, _theirs, bulk_port }
}

/// Ranks 0 and 1 exchange a message both ways.
async fn ping_pong(zero: &Endpoint, one: &Endpoint) {
    let (a, b) = (zero.world(), one.world());
    let (sent, got) = tokio::join!(a.send(&41u32, 1, 5), b.recv::<u32>(0, 5));
    sent.unwrap();
    assert_eq!(got.unwrap().0, 41);
    let (sent, got) = tokio::join!(b.send(&42u32, 0, 6), a.recv::<u32>(1, 6));
    sent.unwrap();
    assert_eq!(got.unwrap().0, 42);
}

/// A process holding a credential of another job connects to nobody: TLS
/// refuses it both ways, and the job's ranks carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_of_another_job_is_refused() {
    let (mut sockets, addrs) = sockets(3);
    let job = JobCredential::generate(1).unwrap();
    let other = JobCredential::generate(1).unwrap(); // the same id, another CA
    let intruder = start(sockets.pop().unwrap(), &addrs, other.issue(2).unwrap(), &options()).unwrap();
    let one = start(sockets.pop().unwrap(), &addrs, job.issue(1).unwrap(), &options()).unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();
    ping_pong(&zero, &one).await;
    let late = intruder.world().isend(&7u32, 0, 0);
    let e = intruder.world().recv::<u32>(0, 0).await.expect_err("rank 0 never answers the intruder");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. }), "{e:?}");
    assert!(chain(&e).contains("connecting to rank 0"), "{}", chain(&e));
    drop(late);
    assert!(zero.world().iprobe(mpx_core::Any, mpx_core::Any).unwrap().is_none(), "nothing of the intruder's arrived");
}

/// A rank holding its own certificate cannot claim another rank's number:
/// the rank it dials learns from the certificate which rank it is, and
/// closes the connection, at its hello claiming another number, or at
/// once if the certificate's rank is connected already (the honest rank 1
/// came first); nothing the impostor sends arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_cannot_claim_another_ranks_number() {
    let (mut sockets, addrs) = sockets(3);
    let job = JobCredential::generate(2).unwrap();
    let one_cred = job.issue(1).unwrap();
    let impostor = start(sockets.pop().unwrap(), &addrs, relabelled(&one_cred, 2), &options()).unwrap();
    let one = start(sockets.pop().unwrap(), &addrs, one_cred, &options()).unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();
    ping_pong(&zero, &one).await;
    let e = impostor.world().recv::<u32>(0, 0).await.expect_err("rank 0 refuses the impostor");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. }), "{e:?}");
    let why = chain(&e);
    assert!(why.contains("does not name rank 2") || why.contains("rank 1 is already connected"), "{why}");
    assert!(zero.world().iprobe(mpx_core::Any, mpx_core::Any).unwrap().is_none());
    assert!(one.world().iprobe(mpx_core::Any, mpx_core::Any).unwrap().is_none());
}

/// A rank that answers at another rank's address with its own certificate
/// is refused by the rank dialling it: TLS asks for the dialled rank's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_cannot_pose_as_another_rank() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(3).unwrap();
    let one_cred = job.issue(1).unwrap();
    let one = start(sockets.pop().unwrap(), &addrs, one_cred.clone(), &options()).unwrap();
    // At rank 0's address: a process holding rank 1's certificate.
    let _poser = start(sockets.pop().unwrap(), &addrs, relabelled(&one_cred, 0), &options()).unwrap();
    let e = one.world().recv::<u32>(0, 0).await.expect_err("rank 1 refuses the poser");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. }), "{e:?}");
    assert!(chain(&e).to_lowercase().contains("certificate"), "{}", chain(&e));
}

/// Ranks with self-signed certificates pinned by fingerprint (the trust a
/// launcher's key-value space carries) talk to each other; a process whose
/// certificate is not pinned connects to nobody, and a pinned rank cannot
/// claim another rank's number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_ranks_talk_and_nobody_else_gets_in() {
    let (mut sockets, addrs) = sockets(4);
    let mut creds: Vec<RankCredential> = (0..3).map(|r| RankCredential::self_signed(5, r).unwrap()).collect();
    let pins: Vec<Fingerprint> = creds.iter().map(RankCredential::fingerprint).collect();
    for c in &mut creds {
        c.pin(pins.clone()).unwrap();
    }
    // Rank 3 of the world is unknown to the job: its pins include itself,
    // but nobody pinned it.
    let mut stranger = RankCredential::self_signed(5, 3).unwrap();
    let mut with_stranger = pins.clone();
    with_stranger.push(stranger.fingerprint());
    stranger.pin(with_stranger).unwrap();
    let stranger = start(sockets.pop().unwrap(), &addrs, stranger, &options()).unwrap();
    // Rank 2's certificate, relabelled as rank 2 but used by a process
    // claiming rank 2 at rank 2's address is the honest case; an impostor
    // claiming rank 2 with rank 1's certificate is refused.
    let mut impostor = RankCredential::self_signed(5, 2).unwrap();
    impostor.pin(pins.iter().enumerate().map(|(r, p)| if r == 2 { impostor.fingerprint() } else { *p }).collect()).unwrap();
    let impostor = start(sockets.pop().unwrap(), &addrs, impostor, &options()).unwrap();
    let [c0, c1, _c2] = <[RankCredential; 3]>::try_from(creds).unwrap();
    let one = start(sockets.pop().unwrap(), &addrs, c1, &options()).unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, c0, &options()).unwrap();
    ping_pong(&zero, &one).await;
    for (who, ep) in [("stranger", &stranger), ("impostor", &impostor)] {
        let e = ep.world().recv::<u32>(0, 0).await.expect_err("rank 0 refuses it");
        assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. }), "{who}: {e:?}");
    }
    assert!(zero.world().iprobe(mpx_core::Any, mpx_core::Any).unwrap().is_none(), "nothing of theirs arrived");
    assert!(one.world().iprobe(mpx_core::Any, mpx_core::Any).unwrap().is_none());
    let mut wrong = RankCredential::self_signed(5, 0).unwrap();
    assert!(wrong.pin(pins.clone()).is_err(), "pins that miss this rank's own certificate");
    assert!(JobCredential::generate(5).unwrap().issue(0).unwrap().pin(pins).is_err(), "a CA credential takes no pins");
}

/// A peer of the job that sends bytes that are not frames after its hello
/// is failed and cut off; the ranks' other connections are not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_sending_garbage_is_cut_off_and_nobody_else_is_affected() {
    let (mut sockets, addrs) = sockets(3);
    let job = JobCredential::generate(4).unwrap();
    let hostile_socket = sockets.pop().unwrap();
    let one = start(sockets.pop().unwrap(), &addrs, job.issue(1).unwrap(), &options()).unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();

    // Rank 2 by hand: a real hello, then bytes that are no frame header.
    let (conn, mut control, _bulk) = hand_rank_greeting_zero(&job, 4, 2, 3, hostile_socket, addrs[0]).await;
    control.write_all(&[0xff; 200]).await.unwrap();

    // Rank 0 fails rank 2 with the decoder's error and closes the connection.
    let e = zero.world().recv::<u32>(2, 0).await.expect_err("rank 2 broke the protocol");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 2, .. }), "{e:?}");
    let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("rank 0 closes the connection");
    assert!(closed.to_string().contains("malformed frame"), "{closed}");
    ping_pong(&zero, &one).await;
}

/// A lower rank that sets up its side of the connection and then says
/// nothing, its connection kept alive, fails the rank that dialled it
/// after the connect timeout: a receive from it ends with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialled_rank_that_never_sends_its_hello_is_failed() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(38).unwrap();
    let quick = Options { connect_timeout: Duration::from_millis(500), bulk_connection: false, ..options() };
    let one_socket = sockets.pop().unwrap();
    let hand = hand_rank_zero(&job, sockets.pop().unwrap());
    let one = start(one_socket, &addrs, job.issue(1).unwrap(), &quick).unwrap();

    // Rank 0 by hand: both streams opened, no hello.
    let conn = hand.accept().await.unwrap().await.unwrap();
    let (_control_in, _) = their_control_head(&conn).await;
    let mut control = conn.open_uni().await.unwrap();
    control.write_all(&StreamHead::Control { bulk_port: 0 }.encode()).await.unwrap();
    let mut bulk = conn.open_uni().await.unwrap();
    bulk.write_all(&StreamHead::Bulk.encode()).await.unwrap();

    let got = tokio::time::timeout(Duration::from_secs(10), one.world().recv::<u8>(0, 0)).await.expect("the receive ended");
    let e = got.expect_err("rank 0 never said hello");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. }), "{e:?}");
    assert!(chain(&e).contains("no hello within"), "{}", chain(&e));
    let why = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("rank 1 closes the connection");
    assert!(why.to_string().contains("no hello"), "{why}");
}

/// A frame in the wrong lane (here a credit frame, a control frame, in
/// the bulk stream) breaks the protocol as a malformed one does: the peer
/// is failed and its connection closed; the other ranks carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_in_the_wrong_stream_cuts_the_peer_off() {
    use mpx_core::proto::wire::{Frame, Header, Kind};
    let (mut sockets, addrs) = sockets(3);
    let job = JobCredential::generate(37).unwrap();
    let hostile_socket = sockets.pop().unwrap();
    let one = start(sockets.pop().unwrap(), &addrs, job.issue(1).unwrap(), &options()).unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();

    let (conn, _control, mut bulk) = hand_rank_greeting_zero(&job, 37, 2, 3, hostile_socket, addrs[0]).await;
    let credit = Frame::control(Header { data_len: 4096, ..Header::control(Kind::Credit, 2) });
    bulk.write_all(&credit.encode_header()).await.unwrap();

    let got = tokio::time::timeout(Duration::from_secs(10), zero.world().recv::<u32>(2, 0)).await.expect("rank 0 acts at once");
    let e = got.expect_err("rank 2 broke the protocol");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 2, .. }), "{e:?}");
    assert!(chain(&e).contains("Credit frame in its Bulk stream"), "{}", chain(&e));
    let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("rank 0 closes the connection");
    assert!(closed.to_string().contains("malformed frame"), "{closed}");
    ping_pong(&zero, &one).await;
}

/// Rank `rank` of a world of `size` played by hand, connected to rank 0
/// at `addr` (job `job_id`) with no bulk socket (both its streams on one
/// connection), its hello sent: the connection and its control and bulk
/// streams.
async fn hand_rank_greeting_zero(job: &JobCredential, job_id: u64, rank: u32, size: u32, socket: UdpSocket, addr: SocketAddr) -> (quinn::Connection, quinn::SendStream, quinn::SendStream) {
    let (quic, client) = hand_client(job, rank, socket, &options());
    let conn = quic.connect_with(client, addr, &rank_name(job_id, 0)).unwrap().await.unwrap();
    let mut control = conn.open_uni().await.unwrap();
    control.write_all(&StreamHead::Control { bulk_port: 0 }.encode()).await.unwrap();
    let mut bulk = conn.open_uni().await.unwrap();
    bulk.write_all(&StreamHead::Bulk.encode()).await.unwrap();
    say_hello_to_zero(&mut control, rank, size).await;
    (conn, control, bulk)
}

/// A peer the engine fails on a frame that breaks no framing (a goodbye
/// saying it cut this rank off), and that never ends its streams, does
/// not hold up this rank's finalize.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalize_does_not_wait_for_a_peer_the_engine_failed() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(33).unwrap();
    let hostile = sockets.pop().unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();
    let (_conn, mut control, _bulk) = hand_rank_greeting_zero(&job, 33, 1, 2, hostile, addrs[0]).await;
    let bye = goodbye_of_rank_one(2);
    control.write_all(&bye.encode_header()).await.unwrap();
    let e = zero.world().recv::<u32>(1, 0).await.expect_err("rank 1 said it cut rank 0 off");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. }), "{e:?}");
    let finalized = tokio::time::timeout(Duration::from_secs(10), zero.finalize()).await;
    assert!(matches!(finalized, Ok(Ok(()))), "{finalized:?}");
}

/// Rank 1's goodbye, as a hand-played rank sends it: `data_len` 0 a
/// clean one (no data frames sent), 2 one that says it cut the other rank
/// off.
fn goodbye_of_rank_one(data_len: u64) -> mpx_core::proto::wire::Frame {
    mpx_core::proto::wire::Frame::control(mpx_core::proto::wire::Header {
        data_len,
        seq: 0,
        ..mpx_core::proto::wire::Header::control(mpx_core::proto::wire::Kind::Bye, 1)
    })
}

/// A peer the engine fails on its own finding (here its control stream
/// ends without a goodbye, or its goodbye says it cut this rank off) has
/// its connections closed once the parting goodbye has gone: it is not
/// left connected, its frames read and dropped, until this rank ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_the_engine_fails_is_cut_off() {
    for ends_stream in [true, false] {
        let (mut sockets, addrs) = sockets(2);
        let job = JobCredential::generate(35).unwrap();
        let hostile = sockets.pop().unwrap();
        let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();
        let (conn, mut control, _bulk) = hand_rank_greeting_zero(&job, 35, 1, 2, hostile, addrs[0]).await;
        if ends_stream {
            control.finish().unwrap();
        } else {
            let bye = goodbye_of_rank_one(2);
            control.write_all(&bye.encode_header()).await.unwrap();
        }
        let e = zero.world().recv::<u32>(1, 0).await.expect_err("rank 1 failed");
        assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. }), "{e:?}");
        let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("rank 0 closed the connection");
        assert!(
            matches!(closed, quinn::ConnectionError::ApplicationClosed(ref close) if close.error_code == quinn::VarInt::from_u32(crate::quic::connection::code::FAILED)),
            "ends its stream: {ends_stream}: {closed:?}"
        );
        zero.finalize().await.unwrap();
    }
}

/// A peer that says a clean goodbye, then keeps its connection and its
/// streams open (acknowledging packets, so no idle timeout fires), holds
/// up this rank's finalize no longer than the idle timeout after its
/// goodbye or the finalize's start, whichever is later: whether the
/// goodbye came just before the finalize, long before it (the finalize
/// still waits its while for the peer's streams), or while it waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalize_waits_a_bounded_time_for_a_peer_that_said_goodbye() {
    for (case, before) in [("just before", Some(Duration::ZERO)), ("long before", Some(Duration::from_millis(2500))), ("during", None)] {
        let (mut sockets, addrs) = sockets(2);
        let job = JobCredential::generate(34).unwrap();
        let hostile = sockets.pop().unwrap();
        let linger = Options { idle_timeout: Duration::from_secs(2), ..options() };
        let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &linger).unwrap();
        let (_conn, mut control, _bulk) = hand_rank_greeting_zero(&job, 34, 1, 2, hostile, addrs[0]).await;
        let bye = goodbye_of_rank_one(0);
        let (finalized, took) = match before {
            Some(wait) => {
                control.write_all(&bye.encode_header()).await.unwrap();
                let e = zero.world().recv::<u32>(1, 0).await.expect_err("rank 1 has finished");
                assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. }), "{e:?}");
                tokio::time::sleep(wait).await;
                let begun = std::time::Instant::now();
                (tokio::time::timeout(Duration::from_secs(15), zero.finalize()).await, begun.elapsed())
            }
            None => {
                let begun = std::time::Instant::now();
                let closer = zero.clone();
                let finalizing = tokio::spawn(async move { tokio::time::timeout(Duration::from_secs(15), zero.finalize()).await });
                tokio::time::sleep(Duration::from_millis(500)).await;
                assert!(!finalizing.is_finished(), "finalize waits for rank 1");
                control.write_all(&bye.encode_header()).await.unwrap();
                // A close from another handle meanwhile (which only starts
                // the flush) does not take the finalize's timer from it.
                tokio::time::sleep(Duration::from_millis(200)).await;
                closer.close();
                (finalizing.await.unwrap(), begun.elapsed())
            }
        };
        assert!(matches!(finalized, Ok(Ok(()))), "goodbye {case}: {finalized:?}");
        assert!(took < Duration::from_secs(6), "goodbye {case}: finalize took {took:?}");
        assert!(took > Duration::from_millis(1500), "goodbye {case}: finalize gave up on rank 1's streams after {took:?}");
    }
}

/// An endpoint closed, or aborted, from a thread outside any tokio runtime
/// (a plain thread, a panic's unwinding) does not panic: its close does
/// not wait for the connections' close to go out, which needs tokio's
/// timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_closed_outside_a_runtime_does_not_panic() {
    let job = JobCredential::generate(35).unwrap();
    for abort in [false, true] {
        let (mut sockets, addrs) = sockets(1);
        let alone = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();
        let ended = std::thread::spawn(move || {
            if abort {
                alone.abort();
            } else {
                alone.close();
            }
            alone
        })
        .join();
        assert!(ended.is_ok(), "abort: {abort}");
    }
}

/// A rank that closes its endpoint and keeps holding it has ended, as far
/// as its peers go: their finalize returns, without waiting for the
/// endpoint to be dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_endpoint_still_held_lets_its_peers_finalize() {
    let (zero, one) = pair(39);
    let mut got = 0u32;
    let (sent, received) = tokio::join!(zero.world().send(&7u32, 1, 0), one.world().recv_into(&mut got, 0, 0));
    sent.unwrap();
    received.unwrap();
    one.close();
    let finalized = tokio::time::timeout(Duration::from_secs(10), zero.finalize()).await;
    assert!(matches!(finalized, Ok(Ok(()))), "{finalized:?}");
    assert_eq!(one.world().send(&1u32, 0, 0).await.unwrap_err(), ErrorKind::Finalized);
    drop(one);
}

/// The transport's flush may be asked for again once it is done: a rank
/// alone in its job closes at once, and a finalize after `close` (which
/// starts the flush) finds it done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalize_after_close_finds_the_flush_done() {
    let (mut sockets, addrs) = sockets(1);
    let job = JobCredential::generate(40).unwrap();
    let alone = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();
    alone.close();
    tokio::task::yield_now().await;
    let finalized = tokio::time::timeout(Duration::from_secs(10), alone.finalize()).await;
    assert!(matches!(finalized, Ok(Ok(()))), "{finalized:?}");
    let again = tokio::time::timeout(Duration::from_secs(10), alone.finalize()).await;
    assert!(matches!(again, Ok(Err(_)) | Ok(Ok(()))), "{again:?}");
}

/// A peer that ends its streams without a goodbye, its connection kept
/// open (keep-alives answered, so no idle timeout comes), fails: a
/// receive from it ends with `ProcessFailed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_ends_its_streams_without_a_goodbye_fails() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(34).unwrap();
    let hostile = sockets.pop().unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();
    let (_conn, mut control, mut bulk) = hand_rank_greeting_zero(&job, 34, 1, 2, hostile, addrs[0]).await;
    control.finish().unwrap();
    bulk.finish().unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), zero.world().recv::<u32>(1, 0)).await.expect("the receive ended");
    let e = got.expect_err("rank 1 ended its streams without a goodbye");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. }), "{e:?}");
    assert!(chain(&e).contains("ended before its goodbye"), "{}", chain(&e));
}

/// A peer that says goodbye after a rendezvous request, then ends both
/// its streams without the data the receive asked for, fails that
/// receive: the data can come no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_ends_its_streams_owing_rendezvous_data_fails() {
    use mpx_core::proto::wire::{Frame, Header, Kind};
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(36).unwrap();
    let hostile = sockets.pop().unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();
    let (_conn, mut control, mut bulk) = hand_rank_greeting_zero(&job, 36, 1, 2, hostile, addrs[0]).await;
    // A request to send 64 bytes on tag 0, data to follow once asked for.
    let rts = Frame::control(Header { seq: 0, data_len: 64, send_id: 1, ..Header::control(Kind::Rts, 1) });
    control.write_all(&rts.encode_header()).await.unwrap();
    let world = zero.world();
    let receive = tokio::spawn(async move { world.recv_vec::<u8>(1, 0).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!receive.is_finished(), "the data may still come");
    // A goodbye counting that one message, then the end of both streams.
    let bye = Frame::control(Header { seq: 1, ..Header::control(Kind::Bye, 1) });
    control.write_all(&bye.encode_header()).await.unwrap();
    control.finish().unwrap();
    bulk.finish().unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), receive).await.expect("the receive ended").unwrap();
    let e = got.expect_err("rank 1 ended its streams owing the data");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. }), "{e:?}");
    assert!(chain(&e).contains("before the data"), "{}", chain(&e));
}

/// A stranger's first packet, from an address it has not shown to be its
/// own, is answered with a QUIC retry (a token the client must echo from
/// that address), never with the handshake: packets with forged source
/// addresses take none of the few connection setups a rank runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_packet_from_an_unproven_address_gets_a_retry() {
    let (mut sockets, addrs) = sockets(3);
    let job = JobCredential::generate(16).unwrap();
    let stranger = sockets.pop().unwrap();
    let _zero = start(sockets.remove(0), &addrs[..2], job.issue(0).unwrap(), &options()).unwrap();
    // The client's first packet, made by quinn's protocol core alone.
    let mut client = quinn_proto::Endpoint::new(Default::default(), None, false, None);
    let config = job.issue(1).unwrap().client_config().unwrap();
    let (_, mut conn) = client.connect(std::time::Instant::now(), config, addrs[0], &rank_name(16, 0)).unwrap();
    let mut packet = Vec::new();
    let sent = conn.poll_transmit(std::time::Instant::now(), 1, &mut packet).expect("an initial packet");
    stranger.send_to(&packet[..sent.size], addrs[0]).unwrap();
    stranger.set_nonblocking(false).unwrap();
    stranger.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = [0u8; 2048];
    let (n, from) = stranger.recv_from(&mut answer).expect("an answer");
    assert_eq!(from, addrs[0]);
    // A QUIC v1 long header: form and fixed bits set, type 3 (retry).
    assert!(n > 0 && answer[0] & 0xf0 == 0xf0, "not a retry: first byte {:#04x}", answer[0]);
}

/// A rank with nobody left to accept sets up no connection, even for a
/// peer holding the job's credential: a rank whose diallers have all
/// connected refuses it at once, and the highest rank (it dials every
/// other, and accepts none) has no server side at all: quinn drops the
/// attempt, which times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_with_nobody_left_to_accept_refuse_connections() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(31).unwrap();
    let one = start(sockets.pop().unwrap(), &addrs, job.issue(1).unwrap(), &options()).unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();
    ping_pong(&zero, &one).await;
    let impatient = Options { idle_timeout: Duration::from_secs(1), ..options() };
    for target in [0u32, 1] {
        let (quic, client) = hand_client(&job, 1 - target, bind(([127, 0, 0, 1], 0).into()).unwrap(), &impatient);
        let attempt = quic.connect_with(client, addrs[target as usize], &rank_name(31, target)).unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(5), attempt).await.expect("the attempt ended");
        match target {
            0 => assert!(matches!(outcome, Err(quinn::ConnectionError::ConnectionClosed(_))), "rank 0: {outcome:?}"),
            _ => assert!(matches!(outcome, Err(quinn::ConnectionError::TimedOut)), "rank 1: {outcome:?}"),
        }
    }
    ping_pong(&zero, &one).await;
}

/// An idle timeout of zero, or one so short that QUIC's whole
/// milliseconds round it to zero (to QUIC: none at all), and an engine
/// idle timeout (which QUIC's replaces) are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_without_a_bound_on_silent_peers_is_refused() {
    let job = JobCredential::generate(32).unwrap();
    let unbounded = [Duration::ZERO, Duration::from_micros(1100)].map(|idle_timeout| Options { idle_timeout, ..options() });
    let engine_bound = Options { engine: Config { idle_timeout: Some(Duration::from_secs(1)), ..options().engine }, ..options() };
    for options in unbounded.into_iter().chain([engine_bound]) {
        let (mut sockets, addrs) = sockets(1);
        let Err(e) = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options) else { panic!("refused") };
        assert!(matches!(e.kind(), ErrorKind::InvalidArgument(_)) && e.to_string().contains("idle timeout"), "{e}");
    }
}

/// An MTU above what segmentation offload sends whole (a connection that
/// would hang, or quinn panic), and a connect timeout too long to set a
/// deadline with, are refused, not taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_that_would_hang_or_overflow_are_refused() {
    let job = JobCredential::generate(33).unwrap();
    let refused = [
        (Options { mtu: 9000, ..options() }, "MTU"),
        (Options { mtu: u16::MAX, ..options() }, "MTU"),
        (Options { connect_timeout: Duration::MAX, ..options() }, "connect timeout"),
    ];
    for (options, named) in refused {
        let (mut sockets, addrs) = sockets(1);
        let Err(e) = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options) else { panic!("{named}: refused") };
        assert!(matches!(e.kind(), ErrorKind::InvalidArgument(_)) && e.to_string().contains(named), "{e}");
    }
    let (mut sockets, addrs) = sockets(1);
    let largest = Options { mtu: MAX_MTU, connect_timeout: MAX_CONNECT_TIMEOUT, ..options() };
    start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &largest).expect("the largest MTU and connect timeout");
}

/// A peer that opens a stream beyond its control and bulk streams (data
/// nobody would read, held in quinn's buffers up to the stream's window) is
/// cut off: the connection is closed and the peer failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_beyond_the_setup_cuts_the_peer_off() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(15).unwrap();
    let hand_socket = sockets.pop().unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();

    // Rank 1 by hand, with a bulk connection of its own: one stream on
    // each connection, so each could take one more.
    let HandRank { quic, client, name, conn, mut control, _theirs, bulk_port } = hand_rank(&job, 15, 1, hand_socket, addrs[0], &options()).await;
    let bulk = quic.connect_with(client, ([127, 0, 0, 1], bulk_port).into(), &name).unwrap().await.unwrap();
    let mut bulk_stream = bulk.open_uni().await.unwrap();
    bulk_stream.write_all(&StreamHead::BulkConnection { rank: 1 }.encode()).await.unwrap();
    say_hello_to_zero(&mut control, 1, 2).await;
    tokio::time::timeout(Duration::from_secs(10), zero.connected()).await.expect("rank 1's hello is taken");

    let mut extra = conn.open_uni().await.unwrap();
    extra.write_all(&[0u8; 4096]).await.unwrap();
    let why = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("rank 0 closes the connection");
    assert!(why.to_string().contains("a stream beyond the setup"), "{why}");
    let e = zero.world().recv::<u32>(1, 0).await.expect_err("rank 1 is cut off");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. }), "{e:?}");
    assert!(chain(&e).contains("opened a stream beyond"), "{}", chain(&e));
    drop((bulk_stream, bulk));
}

/// A peer that announces another representation in its hello (big-endian,
/// 4-byte `long`) is sent external32 and sends external32: values arrive
/// intact both ways, and a `long` that does not fit in 4 bytes is an error
/// at the sender, never a truncated value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_representation_gets_its_values_intact_both_ways() {
    use mpx_core::comm::{RecvBuf, SendBuf};
    use mpx_core::proto::engine::repr_id_with;
    use mpx_core::{Datatype, Region, RegionMut};
    use std::ffi::c_long;

    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(5).unwrap();
    let foreign = Options { engine: Config { repr_id: Some(repr_id_with(!cfg!(target_endian = "big"), 4)), ..Config::default() }, ..options() };
    let one = start(sockets.pop().unwrap(), &addrs, job.issue(1).unwrap(), &foreign).unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();
    let (a, b) = (zero.world(), one.world());
    let values = [1.5f64, -2.25, f64::MAX];
    let ints = [i64::MIN, -1, 1 << 40];
    let longs: [c_long; 3] = [-7, 1 << 20, c_long::from(i32::MAX)];
    for (from, to) in [(&a, &b), (&b, &a)] {
        let (src, dst) = (from.rank(), to.rank());
        let (s1, s2, s3) = (
            from.isend(&values, dst, 1),
            from.isend(&ints, dst, 2),
            from.isend(SendBuf::new(Region::of(&longs), 3, &Datatype::basic(mpx_core::Basic::Long)), dst, 3),
        );
        let (got, st) = to.recv::<[f64; 3]>(src, 1).await.unwrap();
        assert_eq!(got, values);
        assert_eq!(st.source, Some(src));
        assert_eq!(to.recv::<[i64; 3]>(src, 2).await.unwrap().0, ints);
        let mut back: [c_long; 3] = [0; 3];
        to.recv_into(RecvBuf::new(RegionMut::of(&mut back), 3, &Datatype::basic(mpx_core::Basic::Long)), src, 3).await.unwrap();
        assert_eq!(back, longs);
        for s in [s1, s2, s3] {
            s.await.unwrap();
        }
    }
    // A `long` beyond 4 bytes cannot travel in external32.
    let too_long: [c_long; 1] = [1 << 40];
    let e = a.send(SendBuf::new(Region::of(&too_long), 1, &Datatype::basic(mpx_core::Basic::Long)), 1, 4).await.expect_err("it does not fit");
    assert!(matches!(e.kind(), ErrorKind::Conversion { .. }), "{e:?}");
    let e = b.send(SendBuf::new(Region::of(&too_long), 1, &Datatype::basic(mpx_core::Basic::Long)), 0, 4).await.expect_err("it does not fit");
    assert!(matches!(e.kind(), ErrorKind::Conversion { .. }), "{e:?}");
}

/// Collectives that pass received data on (the ring of an allgather, the
/// tree of a broadcast) among ranks of two representations: a rank passes
/// a block on in the representation its next rank takes, whatever it came
/// in (native bytes go on as they came only between native peers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collectives_pass_data_on_between_ranks_of_two_representations() {
    use mpx_core::proto::engine::repr_id_with;

    let (mut sockets, addrs) = sockets(4);
    let job = JobCredential::generate(33).unwrap();
    // Rank 2 announces the other byte order: ranks 1 and 3 send it
    // external32, and it sends them external32.
    let foreign = Options { engine: Config { repr_id: Some(repr_id_with(!cfg!(target_endian = "big"), 4)), ..Config::default() }, ..options() };
    let mut endpoints = Vec::new();
    for rank in (0..4u32).rev() {
        let options = if rank == 2 { foreign } else { options() };
        endpoints.push(start(sockets.pop().unwrap(), &addrs, job.issue(rank).unwrap(), &options).unwrap());
    }
    endpoints.reverse();
    let value = |rank: usize, i: usize| ((rank as i64) << 40) - i as i64;
    let tasks: Vec<_> = endpoints
        .iter()
        .map(|endpoint| {
            let comm = endpoint.world();
            tokio::spawn(async move {
                let me = comm.rank();
                let mine: Vec<i64> = (0..3000).map(|i| value(me, i)).collect();
                let mut all = vec![0i64; 4 * 3000];
                comm.allgather(&mine[..], &mut all[..]).await?;
                for root in [0, 1, 2, 3] {
                    let mut got = vec![0.0f64; 5000];
                    if me == root {
                        got.iter_mut().enumerate().for_each(|(i, x)| *x = root as f64 + i as f64 / 8.0);
                    }
                    comm.bcast(&mut got[..], root).await?;
                    assert!(got.iter().enumerate().all(|(i, &x)| x == root as f64 + i as f64 / 8.0), "rank {me}: broadcast from {root}");
                }
                Ok::<_, Error>(all)
            })
        })
        .collect();
    for task in tasks {
        let all = tokio::time::timeout(Duration::from_secs(30), task).await.expect("in time").unwrap().unwrap();
        assert!(all.chunks(3000).enumerate().all(|(r, block)| block.iter().enumerate().all(|(i, &x)| x == value(r, i))));
    }
}

/// The environment variable that makes this test binary a child rank for
/// [`a_killed_peer_process_fails_its_operations_within_the_bound`]:
/// `rank;addr0,addr1,...;credential file`.
const CHILD: &str = "MPX_QUIC_TEST_CHILD";

fn peer_death_options() -> Options {
    Options { idle_timeout: Duration::from_secs(4), connect_timeout: Duration::from_secs(20), ..Options::local() }
}

/// A child rank (a no-op unless this process was started as one): answers
/// each number rank 0 sends with the next, until it gets `u32::MAX`.
#[test]
fn child_rank() {
    let Ok(spec) = std::env::var(CHILD) else { return };
    let mut parts = spec.split(';');
    let rank: u32 = parts.next().unwrap().parse().unwrap();
    let addrs: Vec<SocketAddr> = parts.next().unwrap().split(',').map(|a| a.parse().unwrap()).collect();
    let credential = RankCredential::from_pem(&std::fs::read_to_string(parts.next().unwrap()).unwrap()).unwrap();
    assert_eq!(credential.rank(), rank);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let endpoint = start(bind(addrs[rank as usize]).unwrap(), &addrs, credential, &peer_death_options()).unwrap();
        let world = endpoint.world();
        loop {
            let (n, _) = world.recv::<u32>(0, 0).await.unwrap();
            if n == u32::MAX {
                break;
            }
            world.send(&(n + 1), 0, 1).await.unwrap();
        }
        endpoint.finalize().await.unwrap();
    });
}

/// Ranks 1 and 2 run in child processes. Rank 2's process is killed in the
/// middle of an exchange: rank 0's operations on it fail within the idle
/// timeout, with the transport's error as their cause, and rank 0 and rank 1
/// carry on and end cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_peer_process_fails_its_operations_within_the_bound() {
    let (mut sockets, addrs) = sockets(3);
    let job = JobCredential::generate(6).unwrap();
    let dir = std::env::temp_dir().join(format!("mpx-quic-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let list = addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    // The children bind their own ports: free them.
    sockets.truncate(1);
    let mut children = Vec::new();
    for rank in 1..3u32 {
        let file = dir.join(format!("rank-{rank}.pem"));
        std::fs::write(&file, job.issue(rank).unwrap().to_pem()).unwrap();
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "quic::tests::child_rank", "--nocapture", "--test-threads=1"])
            .env(CHILD, format!("{rank};{list};{}", file.display()))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        children.push(child);
    }
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &peer_death_options()).unwrap();
    let world = zero.world();
    tokio::time::timeout(Duration::from_secs(30), zero.connected()).await.expect("the children connect");
    for round in 0..5u32 {
        for peer in 1..3 {
            world.send(&round, peer, 0).await.unwrap();
            assert_eq!(world.recv::<u32>(peer, 1).await.unwrap().0, round + 1);
        }
    }
    // Kill rank 2 in the middle of an exchange: the number is sent, the answer never comes.
    world.send(&100u32, 2, 0).await.unwrap();
    children[1].kill().unwrap();
    let killed_at = std::time::Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(15), world.recv::<u32>(2, 1))
        .await
        .expect("the receive fails instead of hanging")
        .expect_err("rank 2 is dead");
    let waited = killed_at.elapsed();
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 2, .. }), "{e:?}");
    // The idle timeout is the bound, not QUIC's idle timeout plus a
    // keep-alive interval (5 s here, as it was).
    let bound = peer_death_options().idle_timeout;
    assert!(waited < bound + Duration::from_millis(600), "failed only after {waited:?}");
    assert!(chain(&e).contains("transport error"), "{}", chain(&e));
    // Rank 1 is not affected.
    world.send(&7u32, 1, 0).await.unwrap();
    assert_eq!(world.recv::<u32>(1, 1).await.unwrap().0, 8);
    world.send(&u32::MAX, 1, 0).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), zero.finalize()).await.expect("finalize returns").unwrap();
    let status = tokio::task::spawn_blocking(move || children[0].wait().unwrap()).await.unwrap();
    assert!(status.success(), "rank 1's process ended with {status}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The seed corpus of the `hello_exchange` fuzz target: a rank's hello and
/// the frames that follow it, as it sends them to a lower rank, led by the
/// target's header bytes. Each seed must pass the greeting; with
/// `MPX_WRITE_CORPUS=1` they are written to `fuzz/corpus/hello_exchange`.
#[test]
fn hello_exchange_corpus() {
    use mpx_core::proto::engine::{MatchSpec, Outgoing, SendMode};
    use mpx_core::Repr;
    let config = mpx_core::proto::engine::Config { eager_threshold: 64, eager_credit: 4096, rndv_slots: 4, rndv_chunk: 48, ..Config::default() };
    let mut seeds = Vec::new();
    for (me, size, claimed) in [(0u32, 2u32, 1u32), (0, 3, 2), (1, 4, 3)] {
        let mut sender = Engine::new(claimed, size, config).unwrap();
        for (i, len) in [0usize, 5, 40, 200].into_iter().enumerate() {
            let data = bytes::Bytes::from(vec![i as u8; len]);
            let msg = Outgoing { dest: me, context: 0, tag: i as i32, signature: Some((9, len as u64)), repr: Repr::Native, desc_len: 0, data };
            sender.post_send(i as u64 + 1, SendMode::Standard, msg);
        }
        sender.post_recv(99, MatchSpec { context: 0, source: Some(me), tag: None });
        let mut stream = Vec::new();
        while let Some(dest) = sender.poll_writable() {
            while let Some(frame) = sender.poll_transmit(dest) {
                if dest == me {
                    stream.extend_from_slice(&frame.encode_header());
                    stream.extend_from_slice(&frame.payload);
                }
            }
        }
        let mut greeting = Greeting::new(me, size);
        assert_eq!(greeting.push(&stream).unwrap().unwrap().header.source, claimed);
        // The target's header: rank, world size - 2, piece size; then the
        // control stream's head.
        for (piece, bulk_port) in [(1u8, 0u16), (7, 40_000), (255, 1)] {
            let mut seed = vec![me as u8, (size - 2) as u8, piece];
            seed.extend_from_slice(&StreamHead::Control { bulk_port }.encode());
            seed.extend_from_slice(&stream);
            seeds.push(seed);
        }
    }
    if std::env::var_os("MPX_WRITE_CORPUS").is_some() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/hello_exchange");
        std::fs::create_dir_all(&dir).unwrap();
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), seed).unwrap();
        }
    }
}

/// No head-of-line blocking: while a 256 MiB message to a peer is in
/// flight, small messages to and from the same peer go back and forth;
/// all of them complete before the large one does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_messages_overtake_a_large_transfer_to_the_same_peer() {
    let (zero, one) = pair(7);
    let (a, b) = (zero.world(), one.world());
    const BIG: usize = 256 << 20;
    let receiver = tokio::spawn(async move {
        let big = b.irecv_bytes(0, 1);
        // Echo small messages while the large one arrives.
        for _ in 0..20 {
            let (n, _) = b.recv::<u64>(0, 2).await?;
            b.send(&(n + 1), 0, 3).await?;
        }
        let (data, status) = big.await?;
        assert_eq!((data.len(), status.bytes), (BIG, BIG as u64));
        Ok::<_, Error>(())
    });
    let started = std::time::Instant::now();
    let big = tokio::spawn(a.isend(vec![9u8; BIG], 1, 1));
    // Let the transfer get going first.
    tokio::time::sleep(Duration::from_millis(20)).await;
    for n in 0..20u64 {
        a.send(&n, 1, 2).await.unwrap();
        assert_eq!(a.recv::<u64>(1, 3).await.unwrap().0, n + 1);
    }
    let small_done = started.elapsed();
    big.await.unwrap().unwrap();
    let big_done = started.elapsed();
    receiver.await.unwrap().unwrap();
    assert!(small_done < big_done, "20 round trips took {small_done:?}, the 256 MiB transfer {big_done:?}");
}

/// A transfer larger than the peer's stream window: quinn takes each
/// chunk of rendezvous data in parts, as the receiver's reads open the
/// window, and the writer offers the rest until quinn asks it to wait (a
/// write it takes in part registers no waker, so stopping there would
/// never resume).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_larger_than_the_stream_window_arrives_whole() {
    let (zero, one) = pair_with(9, &Options { stream_window: 64 << 10, ..options() });
    let (a, b) = (zero.world(), one.world());
    const BIG: usize = 4 << 20;
    let data: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    let exchange = async {
        let (sent, got) = tokio::join!(a.send(&data[..], 1, 1), b.irecv_bytes(0, 1));
        sent.unwrap();
        let (got, status) = got.unwrap();
        assert_eq!(status.bytes, BIG as u64);
        assert!(got[..] == data[..], "the data arrived intact");
        // And back, with small messages behind it.
        let (sent, got, small) = tokio::join!(b.send(&data[..], 0, 2), a.irecv_bytes(1, 2), async {
            b.send(&7u64, 0, 3).await.unwrap();
            a.recv::<u64>(1, 3).await.unwrap().0
        });
        sent.unwrap();
        assert!(got.unwrap().0[..] == data[..]);
        assert_eq!(small, 7);
    };
    tokio::time::timeout(Duration::from_secs(30), exchange).await.expect("the transfers completed");
}

/// A higher rank that never connects is failed once the connect timeout
/// has passed: a receive from it ends with an error instead of waiting
/// forever (the lower rank dials nobody, so only that timeout can tell).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_rank_that_never_connects_is_failed_after_the_connect_timeout() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(10).unwrap();
    let quick = Options { connect_timeout: Duration::from_millis(500), idle_timeout: Duration::from_secs(60), ..options() };
    drop(sockets.pop()); // rank 1 never starts
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &quick).unwrap();
    let started = std::time::Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(20), zero.world().recv::<u64>(1, 0)).await.expect("the receive ended");
    let e = got.expect_err("rank 1 never connected");
    assert!(chain(&e).contains("rank 1"), "{}", chain(&e));
    assert!(started.elapsed() >= Duration::from_millis(400), "failed only after the timeout: {:?}", started.elapsed());
}

/// A peer whose endpoint is dropped without finalizing (its runtime going
/// on) ends its streams cleanly and then closes the connection: the other
/// rank fails it at the close, long before any idle timeout, and a
/// receive from it ends with an error. (A dropped endpoint's last packets
/// are not always sent, on a loaded machine about one run in ten: the
/// keep-alive, at a fifth of the idle timeout, then finds the peer gone,
/// 12-20 s after the drop here, still well before the 60 s timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_dropped_without_finalizing_is_failed_when_its_connection_closes() {
    let (zero, one) = pair_with(11, &Options { idle_timeout: Duration::from_secs(60), ..options() });
    ping_pong(&zero, &one).await;
    drop(one);
    let got = tokio::time::timeout(Duration::from_secs(45), zero.world().recv::<u64>(1, 0)).await.expect("the receive ended");
    got.expect_err("rank 1 is gone");
}

/// A rank whose program computes without awaiting for longer than the
/// idle timeout (on a current-thread runtime, nothing else of its runtime
/// runs meanwhile, its control connection's driver included) is not taken
/// for dead: its bulk connection, on a thread of its own, answers for it.
#[test]
fn a_rank_busy_for_longer_than_the_idle_timeout_is_not_taken_for_dead() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(12).unwrap();
    let options = Options { idle_timeout: Duration::from_secs(1), ..options() };
    let rank = |rank: u32, socket: UdpSocket| {
        let (addrs, credential) = (addrs.clone(), job.issue(rank).unwrap());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let endpoint = start(socket, &addrs, credential, &options)?;
                tokio::time::timeout(Duration::from_secs(10), endpoint.connected()).await.expect("connected");
                let world = endpoint.world();
                let got = match rank {
                    1 => {
                        // Computing, without awaiting, for 2.5 idle timeouts.
                        std::thread::sleep(Duration::from_millis(2500));
                        world.send(&7u64, 0, 0).await?;
                        0
                    }
                    _ => world.recv::<u64>(1, 0).await?.0,
                };
                endpoint.finalize().await?;
                Ok::<u64, mpx_core::Error>(got)
            })
        })
    };
    let one = rank(1, sockets.pop().unwrap());
    let zero = rank(0, sockets.pop().unwrap());
    assert_eq!(zero.join().unwrap().expect("rank 1 was busy, not dead"), 7);
    one.join().unwrap().expect("rank 0 waited for it");
}

/// A rank dialling a peer that starts listening late dials it again,
/// rather than wait on the slowing retransmissions of a first packet the
/// peer never got: the two connect soon after the peer starts (here with
/// a bulk thread on both sides, whose control connections have no idle
/// timeout of their own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_starts_late_is_dialled_again() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(13).unwrap();
    let options = Options { idle_timeout: Duration::from_secs(1), connect_timeout: Duration::from_secs(20), ..options() };
    // Rank 0 does not listen yet.
    drop(sockets.remove(0));
    let one = start(sockets.pop().unwrap(), &addrs, job.issue(1).unwrap(), &options).unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let zero = start(bind(addrs[0]).unwrap(), &addrs, job.issue(0).unwrap(), &options).unwrap();
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(15), async { tokio::join!(zero.connected(), one.connected()) }).await.expect("connected");
    assert!(started.elapsed() < Duration::from_millis(2500), "connected {:?} after rank 0 started", started.elapsed());
    ping_pong(&zero, &one).await;
}

/// A program task that read the control stream while waiting on a receive
/// (so quinn wakes it at the next arrival), then waits for something else
/// entirely, does not hold up progress: the inlet's own task reads what
/// arrives, here the message another task of the same rank waits for
/// before it lets the first one go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_never_waits_for_a_program_task_that_moved_on() {
    let (zero, one) = pair(8);
    tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(zero.connected(), one.connected()) }).await.unwrap();
    let (a, b) = (zero.world(), one.world());
    let (go_tx, go_rx) = tokio::sync::oneshot::channel();
    let b2 = b.clone();
    let helper = tokio::spawn(async move {
        let (n, _) = b2.recv::<u64>(0, 2).await?;
        let _ = go_tx.send(n);
        Ok::<_, Error>(())
    });
    let waiter = tokio::spawn(async move {
        let mut first = b.irecv_bytes(0, 1);
        // Wait on the receive once (reading the stream), then give up on it
        // for now and wait for the helper instead.
        tokio::select! {
            _ = &mut first => panic!("nothing was sent with tag 1 yet"),
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        let n = go_rx.await.expect("the helper got its message");
        let (data, _) = first.await?;
        Ok::<_, Error>((n, data))
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    a.send(&5u64, 1, 2).await.unwrap();
    a.send(&[1u8, 2, 3][..], 1, 1).await.unwrap();
    let (n, data) = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("no progress").unwrap().unwrap();
    assert_eq!((n, &data[..]), (5, &[1u8, 2, 3][..]));
    helper.await.unwrap().unwrap();
}

/// An arrival whose only waiting task has moved on is still read, whether
/// the inlet's task watches (arrivals came within the last tick, so the
/// arrival wakes only the program tasks that wait) or not: a synchronous
/// send completes only once the receiving engine has matched it, and the
/// one task of the receiving rank polled its receive once, then waits for
/// that send to complete before it looks at the receive again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arrival_is_read_when_the_task_woken_for_it_has_moved_on() {
    let (zero, one) = pair(12);
    tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(zero.connected(), one.connected()) }).await.unwrap();
    let (a, b) = (zero.world(), one.world());
    for round in 0..40u8 {
        // Arrivals just before (every other round) keep the inlet's task
        // watching; the other rounds start from an idle inlet.
        if round % 2 == 0 {
            for _ in 0..3 {
                a.send(&round, 1, 100).await.unwrap();
            }
        } else {
            tokio::time::sleep(super::inlet::WATCH_TICK * 3).await;
        }
        let (polled_tx, polled_rx) = tokio::sync::oneshot::channel();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let b = b.clone();
        let waiter = tokio::spawn(async move {
            let mut first = b.irecv_bytes(0, 1);
            let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(std::future::Future::poll(std::pin::Pin::new(&mut first), cx).is_pending())).await;
            assert!(pending, "nothing was sent with tag 1 yet");
            polled_tx.send(()).unwrap();
            go_rx.await.unwrap();
            first.await
        });
        polled_rx.await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), a.ssend(&[round, 7][..], 1, 1)).await.expect("the arrival was never read").unwrap();
        go_tx.send(()).unwrap();
        let (data, _) = waiter.await.unwrap().unwrap();
        assert_eq!(&data[..], &[round, 7]);
    }
    for _ in 0..20 * 3 {
        b.recv::<u8>(0, 100).await.unwrap();
    }
}

/// Ranks `zero` and `one` exchange a message of 1 MiB (rendezvous data,
/// on the bulk lane) both ways, and a small one.
async fn bulk_both_ways(zero: &Endpoint, one: &Endpoint) {
    let (a, b) = (zero.world(), one.world());
    let data: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let (sent, got) = tokio::join!(a.send(&data[..], one.rank(), 9), b.irecv_bytes(zero.rank(), 9));
    sent.unwrap();
    assert!(got.unwrap().0[..] == data[..]);
    let (sent, got) = tokio::join!(b.send(&data[..], zero.rank(), 9), a.irecv_bytes(one.rank(), 9));
    sent.unwrap();
    assert!(got.unwrap().0[..] == data[..]);
    let (sent, got) = tokio::join!(a.send(&3u8, one.rank(), 10), b.recv::<u8>(zero.rank(), 10));
    sent.unwrap();
    assert_eq!(got.unwrap().0, 3);
}

/// Ranks with a bulk socket and ranks without one talk to each other: a
/// pair uses a bulk connection when both have a bulk socket and shares
/// one connection otherwise, and rendezvous data arrives either way; and
/// a rank whose bulk connections run on the program's runtime talks to
/// ranks whose bulk connections have a thread of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_with_and_without_a_bulk_connection_talk() {
    // Ranks 0 and 3 without: pairs with the lower rank, the higher, both
    // or neither without a bulk socket. Rank 4 with a bulk socket but no
    // thread for it.
    let (mut sockets, addrs) = sockets(5);
    let job = JobCredential::generate(12).unwrap();
    let without = Options { bulk_connection: false, ..options() };
    let unthreaded = Options { bulk_thread: false, ..options() };
    let four = start(sockets.pop().unwrap(), &addrs, job.issue(4).unwrap(), &unthreaded).unwrap();
    let three = start(sockets.pop().unwrap(), &addrs, job.issue(3).unwrap(), &without).unwrap();
    let two = start(sockets.pop().unwrap(), &addrs, job.issue(2).unwrap(), &options()).unwrap();
    let one = start(sockets.pop().unwrap(), &addrs, job.issue(1).unwrap(), &options()).unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &without).unwrap();
    let ranks = [&zero, &one, &two, &three, &four];
    let all = async {
        for (i, a) in ranks.iter().enumerate() {
            for b in &ranks[i + 1..] {
                bulk_both_ways(a, b).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), all).await.expect("every pair exchanged its messages");
    let finalized = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(zero.finalize(), one.finalize(), two.finalize(), three.finalize(), four.finalize())
    });
    let (f0, f1, f2, f3, f4) = finalized.await.expect("every rank finalized");
    for result in [f0, f1, f2, f3, f4] {
        result.unwrap();
    }
}

/// The threads of this process named `mpx-bulk-<rank>-<job>` (the bulk
/// threads of the ranks of job `job`, a job number short enough for the
/// name to show whole), each with the CPU time it has used, in clock
/// ticks.
#[cfg(target_os = "linux")]
fn bulk_threads(job: u64) -> Vec<u64> {
    let names: Vec<String> = (0..8).map(|rank| format!("mpx-bulk-{rank}-{job}")).collect();
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let (Ok(comm), Ok(stat)) = (std::fs::read_to_string(task.path().join("comm")), std::fs::read_to_string(task.path().join("stat"))) else {
            continue; // ended meanwhile
        };
        if names.iter().any(|name| name == comm.trim_end()) {
            // Fields after the name: state is the 3rd field, utime and stime the 14th and 15th.
            let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
            found.push(fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap());
        }
    }
    found
}

/// Each rank's bulk connections run on a thread of its own, which carries
/// the rendezvous data (it uses the CPU time of the transfer), and which
/// ends with its endpoint, finalized or dropped in the middle of a
/// transfer; with `bulk_thread` off there is none.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_connections_run_on_a_thread_that_ends_with_the_endpoint() {
    let (zero, one) = pair(31);
    // (A thread names itself once it runs.)
    let named = async {
        while bulk_threads(31).len() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), named).await.expect("a thread per rank");
    assert_eq!(bulk_threads(31).len(), 2, "a thread per rank");
    let (a, b) = (zero.world(), one.world());
    let data = vec![7u8; 64 << 20];
    let (sent, got) = tokio::join!(a.send(&data[..], 1, 0), b.irecv_bytes(0, 0));
    sent.unwrap();
    assert!(got.unwrap().0.iter().all(|&x| x == 7));
    let used: u64 = bulk_threads(31).iter().sum();
    assert!(used > 0, "64 MiB went through the bulk threads");
    let (f0, f1) = tokio::join!(zero.finalize(), one.finalize());
    f0.unwrap();
    f1.unwrap();
    drop((a, b, zero, one));
    let gone = async {
        while !bulk_threads(31).is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), gone).await.expect("the bulk threads end with their endpoints");

    let (zero, one) = pair_with(32, &Options { bulk_thread: false, ..options() });
    bulk_both_ways(&zero, &one).await;
    assert!(bulk_threads(32).is_empty(), "no bulk thread when asked for none");

    // Dropped without a finalize, in the middle of a transfer, from a task.
    let (zero, one) = pair(34);
    bulk_both_ways(&zero, &one).await;
    let transfer = zero.world().isend(vec![1u8; 32 << 20], 1, 0);
    tokio::time::sleep(Duration::from_millis(5)).await;
    drop((transfer, zero, one));
    let gone = async {
        while !bulk_threads(34).is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), gone).await.expect("the bulk threads end with endpoints dropped mid-transfer");
}

/// A bulk connection says which rank it comes from in its stream's head,
/// and is held to it as a control connection is to its hello: a rank
/// claiming another rank's number, or a lower rank's, is refused, and so is
/// a second bulk connection of one rank; the job's other ranks carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_connection_is_checked_like_a_control_connection() {
    let (mut sockets, addrs) = sockets(3);
    let job = JobCredential::generate(13).unwrap();
    let hand_socket = sockets.pop().unwrap();
    // Rank 1 starts after the claims below, so that its slot is free for
    // an impostor to try.
    let one_socket = sockets.pop().unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &options()).unwrap();

    // Rank 2 by hand: rank 0's control stream says where its bulk socket is.
    let HandRank { quic, client, name, conn: _conn, control: _control, _theirs, bulk_port } = hand_rank(&job, 13, 2, hand_socket, addrs[0], &options()).await;
    assert_ne!(bulk_port, 0, "rank 0 has a bulk socket");
    assert_ne!(bulk_port, addrs[0].port());
    let bulk_addr: SocketAddr = ([127, 0, 0, 1], bulk_port).into();

    // Bulk connections led by `rank`: the reason rank 0 closes one with,
    // or None while it keeps it open.
    let claim = |rank: u32| {
        let (quic, client, name) = (quic.clone(), client.clone(), name.clone());
        async move {
            let bulk = quic.connect_with(client, bulk_addr, &name).unwrap().await.unwrap();
            let mut s = bulk.open_uni().await.unwrap();
            s.write_all(&StreamHead::BulkConnection { rank }.encode()).await.unwrap();
            let closed = tokio::time::timeout(Duration::from_millis(500), bulk.closed()).await;
            (closed.ok().map(|why| why.to_string()), bulk, s)
        }
    };
    let (why, ..) = claim(1).await;
    assert!(why.as_deref().is_some_and(|w| w.contains("does not name rank 1")), "{why:?}");
    let (why, ..) = claim(0).await;
    assert!(why.as_deref().is_some_and(|w| w.contains("higher ranks only")), "{why:?}");
    let (why, _kept, _stream) = claim(2).await;
    assert_eq!(why, None, "rank 2's own bulk connection is kept");
    let (why, ..) = claim(2).await;
    assert!(why.as_deref().is_some_and(|w| w.contains("has a bulk connection already")), "{why:?}");

    let one = start(one_socket, &addrs, job.issue(1).unwrap(), &options()).unwrap();
    bulk_both_ways(&zero, &one).await;
}

/// A higher rank that says it has a bulk socket and sends its hello but
/// never makes its bulk connection is not taken as connected: the connect
/// timeout fails it, and a receive from it ends with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_that_never_makes_its_bulk_connection_is_failed() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(14).unwrap();
    let quick = Options { connect_timeout: Duration::from_millis(500), idle_timeout: Duration::from_secs(60), ..options() };
    let hand_socket = sockets.pop().unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &quick).unwrap();

    let HandRank { quic, client, name, conn: _conn, mut control, _theirs, bulk_port } = hand_rank(&job, 14, 1, hand_socket, addrs[0], &quick).await;
    say_hello_to_zero(&mut control, 1, 2).await;

    let got = tokio::time::timeout(Duration::from_secs(20), zero.world().recv::<u64>(1, 0)).await.expect("the receive ended");
    let e = got.expect_err("rank 1 never made its bulk connection");
    assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 1, .. }), "{e:?}");
    assert!(chain(&e).contains("waiting for rank 1 to connect"), "{}", chain(&e));
    assert!(chain(&e).contains(&format!("its hello came, but no bulk connection within 500ms (can it reach UDP port {bulk_port} here?)")), "{}", chain(&e));

    // Its bulk connection, come too late, is refused: rank 0 has nobody
    // left to accept.
    let late = quic.connect_with(client, ([127, 0, 0, 1], bulk_port).into(), &name).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(5), late).await.expect("refused at once");
    assert!(matches!(outcome, Err(quinn::ConnectionError::ConnectionClosed(_))), "{outcome:?}");
}

/// A rank that connects late, says its hello and never makes its bulk
/// connection is given up on at the connect timeout, and its control
/// connection is closed then, not held until its own setup's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_rank_without_its_bulk_connection_is_closed_at_the_connect_timeout() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(16).unwrap();
    let patient = Options { connect_timeout: Duration::from_secs(2), idle_timeout: Duration::from_secs(60), ..options() };
    let hand_socket = sockets.pop().unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &patient).unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let HandRank { conn, mut control, _theirs, .. } = hand_rank(&job, 16, 1, hand_socket, addrs[0], &patient).await;
    say_hello_to_zero(&mut control, 1, 2).await;
    let got = tokio::time::timeout(Duration::from_secs(20), zero.world().recv::<u64>(1, 0)).await.expect("the receive ended");
    assert!(matches!(got.expect_err("no bulk connection").kind(), ErrorKind::ProcessFailed { rank: 1, .. }));
    let closed = tokio::time::timeout(Duration::from_secs(1), conn.closed()).await;
    assert!(closed.is_ok(), "rank 1's control connection stayed open after it was given up on");
}

/// A rank with a bulk socket dials the bulk socket its lower peer
/// announces and leads its bulk stream there with its rank, and refuses a
/// bulk connection that answers with another rank's head; a rank without
/// one sends its bulk stream on the control connection. The lower rank
/// is played by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_dials_the_bulk_socket_its_peer_announces() {
    for bulk_connection in [true, false] {
        let (mut sockets, addrs) = sockets(2);
        let job = JobCredential::generate(15).unwrap();
        let hand_bulk = hand_rank_zero(&job, bind(([127, 0, 0, 1], 0).into()).unwrap());
        let hand_bulk_port = hand_bulk.local_addr().unwrap().port();
        let one_socket = sockets.pop().unwrap();
        let hand = hand_rank_zero(&job, sockets.pop().unwrap());
        let one = start(one_socket, &addrs, job.issue(1).unwrap(), &Options { bulk_connection, ..options() }).unwrap();

        let conn = hand.accept().await.unwrap().await.unwrap();
        let (_control_in, bulk_port) = their_control_head(&conn).await;
        assert_eq!(bulk_port != 0, bulk_connection, "rank 1 announces its bulk socket if it has one");
        let mut control = conn.open_uni().await.unwrap();
        control.write_all(&StreamHead::Control { bulk_port: hand_bulk_port }.encode()).await.unwrap();

        if bulk_connection {
            let bulk = tokio::time::timeout(Duration::from_secs(5), hand_bulk.accept()).await.expect("rank 1 dials the bulk socket").unwrap().await.unwrap();
            let mut bulk_in = bulk.accept_uni().await.unwrap();
            let mut head = [0u8; 5];
            bulk_in.read_exact(&mut head).await.unwrap();
            assert_eq!(StreamHead::decode(&head).unwrap(), StreamHead::BulkConnection { rank: 1 });
            // Answered as if by rank 5: rank 1 refuses it and fails rank 0.
            let mut bulk_out = bulk.open_uni().await.unwrap();
            bulk_out.write_all(&StreamHead::BulkConnection { rank: 5 }.encode()).await.unwrap();
            let e = tokio::time::timeout(Duration::from_secs(10), one.world().recv::<u8>(0, 0)).await.expect("the receive ended").expect_err("rank 0 is refused");
            assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. }), "{e:?}");
            assert!(chain(&e).contains("bulk connection is led by"), "{}", chain(&e));
            let why = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("the control connection is closed too");
            assert!(why.to_string().contains("a bad bulk connection"), "{why}");
        } else {
            let mut bulk_in = tokio::time::timeout(Duration::from_secs(5), conn.accept_uni()).await.expect("the bulk stream comes").unwrap();
            let mut head = [0u8; 1];
            bulk_in.read_exact(&mut head).await.unwrap();
            assert_eq!(StreamHead::decode(&head).unwrap(), StreamHead::Bulk, "on the control connection");
            assert!(tokio::time::timeout(Duration::from_millis(200), hand_bulk.accept()).await.is_err(), "no bulk connection");
        }
    }
}

/// A rank given bulk ports ([`Options::bulk_ports`]) binds its bulk
/// socket on one and announces it; two ranks sharing a range take ports
/// of their own in it and exchange rendezvous data through them; a range
/// whose ports another socket holds fails the start with a transport
/// error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_binds_its_bulk_socket_on_a_port_it_is_given() {
    // Announced on the control stream, to a lower rank played by hand.
    let (mut hand_sockets, addrs) = sockets(2);
    let job = JobCredential::generate(35).unwrap();
    let one_socket = hand_sockets.pop().unwrap();
    let hand = hand_rank_zero(&job, hand_sockets.pop().unwrap());
    let port = free_port();
    let one = start(one_socket, &addrs, job.issue(1).unwrap(), &Options { bulk_ports: PortRange::new(port, port).unwrap(), ..options() }).unwrap();
    let conn = hand.accept().await.unwrap().await.unwrap();
    let (_control_in, announced) = their_control_head(&conn).await;
    assert_eq!(announced, port, "rank 1 announces the port it was given");
    drop((one, conn, hand));

    // Two ranks, each on a port of its own.
    let (mut pair_sockets, addrs) = sockets(2);
    let job = JobCredential::generate(36).unwrap();
    // Two free ports in a row (a port the system gave, and the next).
    let (first, range) = loop {
        let first = free_port();
        if first < u16::MAX && UdpSocket::bind(("127.0.0.1", first + 1)).is_ok() {
            break (first, PortRange::new(first, first + 1).unwrap());
        }
    };
    let shared = Options { bulk_ports: range, ..options() };
    let one = start(pair_sockets.pop().unwrap(), &addrs, job.issue(1).unwrap(), &shared).unwrap();
    let zero = start(pair_sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &shared).unwrap();
    tokio::time::timeout(Duration::from_secs(20), bulk_both_ways(&zero, &one)).await.expect("the ranks exchanged their messages");
    for port in [first, first + 1] {
        let taken = UdpSocket::bind(("127.0.0.1", port)).expect_err("a bulk socket holds each port of the range");
        assert_eq!(taken.kind(), std::io::ErrorKind::AddrInUse);
    }
    let (f0, f1) = tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(zero.finalize(), one.finalize()) }).await.expect("both finalized");
    f0.unwrap();
    f1.unwrap();

    // A port in use.
    let (mut last_sockets, addrs) = sockets(2);
    let job = JobCredential::generate(37).unwrap();
    let holder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let held = holder.local_addr().unwrap().port();
    let e = start(last_sockets.remove(0), &addrs, job.issue(0).unwrap(), &Options { bulk_ports: PortRange::new(held, held).unwrap(), ..options() })
        .expect_err("the port is taken");
    assert!(matches!(e.kind(), ErrorKind::Transport { .. }), "{e:?}");
    assert!(e.to_string().contains(&format!("every port of {held}:{held} is in use")), "{e}");
}

/// Set in a child process started as a rank from the environment
/// ([`env_child_rank`]).
const ENV_CHILD: &str = "MPX_QUIC_TEST_ENV_CHILD";

/// A rank started from the environment (a no-op unless this process was
/// started as one): [`start_from_env`] with `MPX_RANK`, `MPX_ADDRS`,
/// `MPX_CREDENTIAL` (the PEM text) and `MPX_PORT_RANGE`; it then waits to be
/// killed. A start that fails prints its error and exits with status 3.
#[test]
fn env_child_rank() {
    if std::env::var_os(ENV_CHILD).is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        match start_from_env(&options()) {
            Ok(endpoint) => {
                assert!(endpoint.is_some(), "MPX_RANK is set");
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Err(e) => {
                eprintln!("start failed: {e}");
                std::process::exit(3);
            }
        }
    });
}

/// A rank started by hand from the environment binds its bulk socket in
/// `MPX_PORT_RANGE` and announces that port to the lower rank (played by
/// hand here); a value that is no range fails its start, naming the
/// variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_started_from_the_environment_takes_its_bulk_port_from_its_range() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(38).unwrap();
    let list = addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    let child = |ports: &str| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "quic::tests::env_child_rank", "--nocapture", "--test-threads=1"])
            .env(ENV_CHILD, "1")
            .env(env::RANK, "1")
            .env(env::ADDRS, &list)
            .env(env::CREDENTIAL, job.issue(1).unwrap().to_pem())
            .env(env::PORT_RANGE, ports)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Rank 1 binds its own port: free it.
    sockets.truncate(1);
    let hand = hand_rank_zero(&job, sockets.pop().unwrap());
    let port = free_port();
    let mut one = child(&format!("{port}:{port}"));
    let Ok(conn) = tokio::time::timeout(Duration::from_secs(30), async { hand.accept().await.unwrap().await.unwrap() }).await else {
        one.kill().unwrap();
        let out = one.wait_with_output().unwrap();
        panic!("rank 1 never dialled rank 0: {}", String::from_utf8_lossy(&out.stderr));
    };
    let (_control_in, announced) = their_control_head(&conn).await;
    assert_eq!(announced, port, "rank 1 announces the port MPX_PORT_RANGE gave it");
    one.kill().unwrap();
    one.wait().unwrap();

    let bad = child("7001:7000");
    let out = tokio::task::spawn_blocking(move || bad.wait_with_output().unwrap()).await.unwrap();
    assert_eq!(out.status.code(), Some(3), "the start fails");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("MPX_PORT_RANGE"), "{said}");
}

/// A rank sets up a bounded number of incoming connections of one rank's
/// certificate at once: while [`connection::SETUPS_PER_RANK`] connections
/// with rank 2's certificate say nothing after their handshake, the next
/// is closed at once, none of them gets rank 0 to take more than its
/// setup window of data, and rank 1 connects as usual meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_being_set_up_are_bounded_per_rank() {
    let (mut sockets, addrs) = sockets(3);
    let job = JobCredential::generate(16).unwrap();
    let patient = Options { connect_timeout: Duration::from_secs(20), ..options() };
    let hand_socket = sockets.pop().unwrap();
    let one_socket = sockets.pop().unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &patient).unwrap();

    // Connections with rank 2's certificate that never open a stream.
    let (quic, client) = hand_client(&job, 2, hand_socket, &patient);
    let connect = || quic.connect_with(client.clone(), addrs[0], &rank_name(16, 0)).unwrap();
    let mut silent = Vec::new();
    for _ in 0..connection::SETUPS_PER_RANK {
        silent.push(connect().await.expect("a connection within the bound"));
    }
    // Their setups under way at rank 0 (a client counts its handshake done
    // before the server does) before the next comes.
    for conn in &silent {
        let open = tokio::time::timeout(Duration::from_millis(200), conn.closed()).await;
        assert!(open.is_err(), "the connections within the bound stay open: {open:?}");
    }
    let beyond = connect().await.expect("the handshake completes");
    let why = tokio::time::timeout(Duration::from_secs(5), beyond.closed()).await.expect("closed at once").to_string();
    assert!(why.contains("setting up 4 connections already"), "{why}");
    // Whatever it sends before its hello, such a connection gets rank 0 to
    // take at most its setup window of it.
    let mut stream = silent[0].open_uni().await.unwrap();
    let chunk = vec![7u8; 64 << 10];
    let mut taken = 0;
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(500), stream.write(&chunk)).await {
        taken += n;
        assert!(taken <= connection::SETUP_RECEIVE_WINDOW as usize, "{taken} bytes taken before the hello");
    }
    assert!(taken > 0);

    let one = start(one_socket, &addrs, job.issue(1).unwrap(), &patient).unwrap();
    tokio::time::timeout(Duration::from_secs(10), ping_pong(&zero, &one)).await.expect("rank 1 connects while rank 2's connections wait");
    drop(silent);
}

/// A relay for one QUIC client's packets to `server`, at a socket on
/// `at`: passes the server's packets back whole, and of the client's only
/// its Initial packets (a datagram's first packet, when that is an Initial
/// one, cut from the packets coalesced behind it). A handshake through it
/// never completes: the client's certificate and Finished, in Handshake
/// packets, never arrive. Returns where the client sends to; the server
/// sees the relay's own address on `at`.
async fn initial_only_relay(at: std::net::IpAddr, server: SocketAddr) -> SocketAddr {
    let near = tokio::net::UdpSocket::bind((at, 0)).await.unwrap();
    let far = tokio::net::UdpSocket::bind((at, 0)).await.unwrap();
    let near_addr = near.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut from_client, mut from_server) = (vec![0u8; 65536], vec![0u8; 65536]);
        let mut client = None;
        loop {
            tokio::select! {
                Ok((n, addr)) = near.recv_from(&mut from_client) => {
                    client = Some(addr);
                    if let Some(len) = initial_packet_len(&from_client[..n]) {
                        let _ = far.send_to(&from_client[..len], server).await;
                    }
                }
                Ok((n, _)) = far.recv_from(&mut from_server) => {
                    if let Some(client) = client {
                        let _ = near.send_to(&from_server[..n], client).await;
                    }
                }
            }
        }
    });
    near_addr
}

/// The length of `datagram`'s first packet if it is a QUIC Initial packet
/// (RFC 9000, 17.2.2: the length field is not protected).
fn initial_packet_len(datagram: &[u8]) -> Option<usize> {
    fn varint(b: &[u8], at: &mut usize) -> Option<usize> {
        let first = *b.get(*at)?;
        let len = 1usize << (first >> 6);
        let mut v = u64::from(first & 0x3f);
        for i in 1..len {
            v = v << 8 | u64::from(*b.get(*at + i)?);
        }
        *at += len;
        usize::try_from(v).ok()
    }
    let flags = *datagram.first()?;
    if flags & 0x80 == 0 || (flags >> 4) & 0x03 != 0 {
        return None;
    }
    let mut at = 5;
    for _ in 0..2 {
        at += 1 + usize::from(*datagram.get(at)?); // a connection id
    }
    let token = varint(datagram, &mut at)?;
    at += token;
    let payload = varint(datagram, &mut at)?;
    (at + payload <= datagram.len()).then_some(at + payload)
}

/// A stranger (no credential needed) that starts TLS handshakes and never
/// finishes them takes only the handshake slots of its own address: with
/// more of them stalled at rank 0 than a rank's whole bound, from
/// 127.0.0.2, rank 1 on 127.0.0.1 still connects at once; the stranger's
/// handshakes beyond its address's bound are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_keep_out_only_their_own_address() {
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(35).unwrap();
    let patient = Options { connect_timeout: Duration::from_secs(20), idle_timeout: Duration::from_secs(60), ..options() };
    let one_socket = sockets.pop().unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &patient).unwrap();

    let relay = initial_only_relay([127, 0, 0, 2].into(), addrs[0]).await;
    // The stranger's client trusts rank 0's certificate (with the job's CA
    // here, for brevity; a stranger would skip the check); the certificate
    // it shows never arrives.
    let (quic, client) = hand_client(&job, 1, bind(([127, 0, 0, 1], 0).into()).unwrap(), &patient);
    let bound = connection::Shared::max_handshakes(2);
    let attempt = || tokio::spawn(tokio::time::timeout(Duration::from_secs(3), quic.connect_with(client.clone(), relay, &rank_name(35, 0)).unwrap()));
    let attempts: Vec<_> = (0..bound + 8).map(|_| attempt()).collect();
    let mut ended = Vec::new();
    for a in attempts {
        ended.push(a.await.unwrap());
    }
    // The client counts its handshake done once it has sent its Finished;
    // rank 0 never gets it. Those beyond the address's bound are refused.
    let refused = ended.iter().filter(|outcome| matches!(outcome, Ok(Err(_)))).count();
    assert_eq!(refused, 8, "{ended:?}");

    // While they stall there, rank 1 connects.
    let one = start(one_socket, &addrs, job.issue(1).unwrap(), &patient).unwrap();
    tokio::time::timeout(Duration::from_secs(10), ping_pong(&zero, &one)).await.expect("rank 1 connects past the stalled handshakes");
    let late = attempt().await.unwrap();
    assert!(matches!(late, Ok(Err(_))), "the stranger's address is still at its bound: {late:?}");
    drop(ended);
}

/// Tests `req` until it has taken `at_least` bytes of its message as they
/// arrived, or completed (its outcome then); yields between tests.
async fn test_until_taken(req: &mut mpx_core::Request<'_>, at_least: usize) -> Option<mpx_core::Result<mpx_core::Status>> {
    loop {
        if req.bytes_taken_early() >= at_least {
            return None;
        }
        if let Some(outcome) = req.test() {
            return Some(outcome);
        }
        tokio::task::yield_now().await;
    }
}

/// Receives into a slice take a large message's data as it arrives only
/// where the slice may hold any bytes and the message is this rank's own
/// values of its type: a `bool` slice, a message longer than the slice, a
/// message from a peer of another representation never stream. A
/// streaming receive whose message completed while nobody polled it,
/// dropped then, gives the whole message back; one taken through a
/// matched probe, dropped part way, too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_receives_take_data_as_it_arrives_only_where_they_may() {
    use mpx_core::proto::engine::repr_id_with;
    // Large enough that some of each message arrives while its receive
    // looks (a short one may be in before the receive's first look).
    const N: usize = 1 << 21; // 16 MiB of u64
    let streaming = Options { engine: Config { stream_step: 16 << 10, ..Config::default() }, ..options() };
    let (zero, one) = pair_with(13, &streaming);
    // Sent before the peer's hello, typed data goes in external32.
    tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(zero.connected(), one.connected()) }).await.unwrap();
    let (a, b) = (zero.world(), one.world());
    let values: Vec<u64> = (0..N as u64).map(|i| i * 3 + 1).collect();
    let mut buf = vec![0u64; N];

    // Streamed, complete while nobody polls, then dropped: given back
    // whole. Then through a matched probe, dropped part way. (On a loaded
    // machine a message may be in before its receive first looks: then it
    // is checked and the next one tried.)
    let mut whole = vec![0u64; N];
    for through_probe in [false, true] {
        let mut streamed = false;
        for tag in 0..8 {
            let send = a.isend(&values, 1, tag);
            let mut req = if through_probe { b.mprobe(0, tag).await.unwrap().irecv(&mut buf) } else { b.irecv(&mut buf, 0, tag) };
            if let Some(outcome) = test_until_taken(&mut req, 64 << 10).await {
                outcome.unwrap();
                drop(req);
                assert!(buf == values);
                send.await.unwrap();
                continue;
            }
            if !through_probe {
                // Let the rest arrive, unpolled.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            drop(req);
            whole.fill(0);
            b.recv_into(&mut whole, 0, tag).await.unwrap();
            assert!(whole == values, "given back whole (through a probe: {through_probe})");
            send.await.unwrap();
            streamed = true;
            break;
        }
        assert!(streamed, "no receive took data as it arrived (through a probe: {through_probe})");
    }

    // Never streamed: a bool slice, a message longer than the slice.
    let bools: Vec<bool> = (0..8 * N).map(|i| i % 3 == 0).collect(); // 16 MiB
    let send = a.isend(&bools, 1, 3);
    let mut got = vec![false; 8 * N];
    let mut req = b.irecv(&mut got, 0, 3);
    let outcome = test_until_taken(&mut req, 1).await.expect("a bool slice never streams");
    assert_eq!(outcome.unwrap().bytes, 8 * N as u64);
    drop(req);
    assert!(got == bools);
    send.await.unwrap();
    let send = a.isend(&values, 1, 4);
    let mut short = vec![0u64; N / 2];
    let mut req = b.irecv(&mut short, 0, 4);
    let outcome = test_until_taken(&mut req, 1).await.expect("a message longer than its receive never streams");
    assert!(matches!(outcome, Err(ref e) if matches!(e.kind(), ErrorKind::Truncate { .. })), "{outcome:?}");
    drop(req);
    assert!(short.iter().all(|&v| v == 0), "nothing written by a truncated receive");
    send.await.unwrap();

    // A peer of another representation sends external32: never streamed.
    let (mut sockets, addrs) = sockets(2);
    let job = JobCredential::generate(14).unwrap();
    let foreign = Options { engine: Config { repr_id: Some(repr_id_with(!cfg!(target_endian = "big"), 4)), ..streaming.engine }, ..streaming };
    let one = start(sockets.pop().unwrap(), &addrs, job.issue(1).unwrap(), &foreign).unwrap();
    let zero = start(sockets.pop().unwrap(), &addrs, job.issue(0).unwrap(), &streaming).unwrap();
    tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(zero.connected(), one.connected()) }).await.unwrap();
    let floats: Vec<f64> = (0..N).map(|i| i as f64 * 0.5).collect();
    let send = one.world().isend(&floats, 0, 5);
    let mut got = vec![0f64; N];
    let mut req = zero.world().irecv(&mut got, 1, 5);
    let outcome = test_until_taken(&mut req, 1).await.expect("external32 never streams");
    outcome.unwrap();
    drop(req);
    assert!(got == floats);
    send.await.unwrap();
}

/// A streaming receive whose sender goes away part way fails, within the
/// idle timeout, rather than waiting for the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_receive_fails_when_its_sender_goes_away_part_way() {
    let opts = Options { engine: Config { stream_step: 16 << 10, ..Config::default() }, idle_timeout: Duration::from_secs(3), ..options() };
    let (zero, one) = pair_with(15, &opts);
    tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(zero.connected(), one.connected()) }).await.unwrap();
    let big = vec![7u64; 16 << 20]; // 128 MiB
    let send = zero.world().isend(&big, 1, 0);
    let mut buf = vec![0u64; big.len()];
    let mut req = one.world().irecv(&mut buf, 0, 0);
    assert!(test_until_taken(&mut req, 1 << 20).await.is_none(), "the receive streams");
    drop(send);
    drop(zero);
    let outcome = tokio::time::timeout(Duration::from_secs(30), req).await.expect("the receive ended");
    assert!(matches!(outcome, Err(ref e) if matches!(e.kind(), ErrorKind::ProcessFailed { rank: 0, .. })), "{outcome:?}");
}
