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
    assert!(matches!(e, Error::ProcessFailed { rank: 0, .. }), "{e:?}");
    assert!(chain(&e).contains("connecting to rank 0"), "{}", chain(&e));
    drop(late);
    assert!(zero.world().iprobe(mpx_core::Any, mpx_core::Any).unwrap().is_none(), "nothing of the intruder's arrived");
}

/// A rank holding its own certificate cannot claim another rank's number:
/// the rank it dials checks the certificate against the hello and closes
/// the connection, and nothing the impostor sends arrives.
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
    assert!(matches!(e, Error::ProcessFailed { rank: 0, .. }), "{e:?}");
    assert!(chain(&e).contains("does not name rank 2"), "{}", chain(&e));
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
    assert!(matches!(e, Error::ProcessFailed { rank: 0, .. }), "{e:?}");
    assert!(chain(&e).to_lowercase().contains("certificate"), "{}", chain(&e));
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
    let cred = job.issue(2).unwrap();
    let mut client = cred.client_config().unwrap();
    client.transport_config(std::sync::Arc::new(options().transport().unwrap()));
    let quic = quinn::Endpoint::new(quinn::EndpointConfig::default(), None, hostile_socket, quinn::default_runtime().unwrap()).unwrap();
    let conn = quic.connect_with(client, addrs[0], &rank_name(4, 0)).unwrap().await.unwrap();
    let mut engine = Engine::new(2, 3, Config::default()).unwrap();
    let hello = std::iter::from_fn(|| engine.poll_writable().and_then(|d| engine.poll_transmit(d).map(|f| (d, f))))
        .find(|(dest, _)| *dest == 0)
        .expect("a hello for rank 0")
        .1;
    let mut control = conn.open_uni().await.unwrap();
    control.write_all(&[0]).await.unwrap();
    let mut bulk = conn.open_uni().await.unwrap();
    bulk.write_all(&[1]).await.unwrap();
    control.write_all(&hello.encode_header()).await.unwrap();
    control.write_all(&hello.payload).await.unwrap();
    control.write_all(&[0xff; 200]).await.unwrap();

    // Rank 0 fails rank 2 with the decoder's error and closes the connection.
    let e = zero.world().recv::<u32>(2, 0).await.expect_err("rank 2 broke the protocol");
    assert!(matches!(e, Error::ProcessFailed { rank: 2, .. }), "{e:?}");
    let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("rank 0 closes the connection");
    assert!(closed.to_string().contains("malformed frame"), "{closed}");
    ping_pong(&zero, &one).await;
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
    assert!(matches!(e, Error::Conversion { .. }), "{e:?}");
    let e = b.send(SendBuf::new(Region::of(&too_long), 1, &Datatype::basic(mpx_core::Basic::Long)), 0, 4).await.expect_err("it does not fit");
    assert!(matches!(e, Error::Conversion { .. }), "{e:?}");
}
