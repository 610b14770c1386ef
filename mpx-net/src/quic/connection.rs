//! Setting up the connection to each peer and the four tasks that carry
//! it: a writer and a reader for each of the control and bulk streams
//! (the control stream's reader is shared with waiting program tasks: see
//! [`inlet`](super::inlet)).
//!
//! The rank with the higher number dials; the other accepts. Each side
//! opens two unidirectional streams, whose first byte says which lane
//! ([`Lane`]) it carries, and sends its hello first on the control stream.
//! The accepting side learns who dialled from that hello and checks that
//! the client's certificate names that rank before anything reaches the
//! endpoint.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mpx_core::proto::wire::ChunkDecoder;
use mpx_core::runtime::WeakEndpoint;
use mpx_core::{Error, Result};
use quinn::VarInt;
use rustls::pki_types::CertificateDer;
use tokio::task::AbortHandle;

use super::credential::{rank_name, RankCredential};
use super::greeting::{lane_of, Greeting};
use super::inlet::{Inlet, Reader};
use super::link::{Drained, Lane, Outbox};

/// Close codes mpx uses on its connections.
pub(crate) mod code {
    /// The peer broke mpx's protocol (a bad frame, a bad hello).
    pub const PROTOCOL: u32 = 1;
    /// The peer's certificate does not name the rank its hello claims.
    pub const IDENTITY: u32 = 2;
    /// A second connection from a rank already connected, or one from a
    /// rank given up on (after the connect timeout).
    pub const DUPLICATE: u32 = 3;
}

/// The tasks of one rank's transport; dropping the registry (with the
/// endpoint that owns it) aborts them all.
#[derive(Default)]
pub(crate) struct Registry(Mutex<Vec<AbortHandle>>);

impl Drop for Registry {
    fn drop(&mut self) {
        for task in self.0.get_mut().unwrap_or_else(|e| e.into_inner()).drain(..) {
            task.abort();
        }
    }
}

/// Spawns `task` as one of the registry's (at once aborted if the registry
/// is gone).
pub(crate) fn spawn_in(registry: &Weak<Registry>, task: impl std::future::Future<Output = ()> + Send + 'static) {
    let handle = tokio::spawn(task).abort_handle();
    match registry.upgrade() {
        Some(r) => r.0.lock().unwrap_or_else(|e| e.into_inner()).push(handle),
        None => handle.abort(),
    }
}

/// What every task of one rank's transport shares.
pub(crate) struct Shared {
    pub(crate) me: u32,
    pub(crate) size: u32,
    pub(crate) endpoint: WeakEndpoint,
    pub(crate) outboxes: Arc<Vec<Arc<Outbox>>>,
    pub(crate) credential: RankCredential,
    pub(crate) client: quinn::ClientConfig,
    /// The largest frame payload accepted (the decoder's cap).
    pub(crate) max_payload: usize,
    pub(crate) registry: Weak<Registry>,
    pub(crate) connect_timeout: Duration,
    /// The receiving side of each peer's control stream.
    pub(crate) inlets: Arc<Vec<Arc<Inlet>>>,
    /// The peers connected so far, or all of them once the connect
    /// timeout has passed (a connection of a peer marked is refused).
    pub(crate) connected: Mutex<Vec<bool>>,
}

impl Shared {
    /// `peer` is lost because of `cause`: its outbox refuses frames and the
    /// endpoint fails what depends on it.
    pub(crate) fn fail(&self, peer: u32, cause: Error) {
        self.outboxes[peer as usize].fail(cause.clone());
        if let Some(ep) = self.endpoint.upgrade() {
            ep.peer_failed(peer as usize, cause);
        }
    }
}

fn io_error(context: String, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::transport(context, e)
}

/// Fails every higher rank that has not connected once the connect
/// timeout has passed (a lower rank is failed by its own dial).
pub(crate) async fn fail_unconnected(shared: Arc<Shared>) {
    tokio::time::sleep(shared.connect_timeout).await;
    let missing: Vec<u32> = {
        let mut connected = shared.connected.lock().unwrap_or_else(|e| e.into_inner());
        let missing = (shared.me + 1..shared.size).filter(|&peer| !connected[peer as usize]).collect();
        // Settled: a connection that comes later is refused.
        connected.iter_mut().for_each(|c| *c = true);
        missing
    };
    for peer in missing {
        let waited = std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no connection within {:?}", shared.connect_timeout));
        shared.fail(peer, io_error(format!("waiting for rank {peer} to connect"), waited));
    }
}

/// Accepts the connections of higher ranks for as long as the endpoint lives.
pub(crate) async fn accept_loop(quic: quinn::Endpoint, shared: Arc<Shared>) {
    while let Some(incoming) = quic.accept().await {
        let shared2 = shared.clone();
        spawn_in(&shared.registry, async move {
            let deadline = shared2.connect_timeout;
            match tokio::time::timeout(deadline, accept_one(incoming, &shared2)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(rank = shared2.me, error = %e, "refused a connection"),
                Err(_) => tracing::warn!(rank = shared2.me, "a connecting peer did not finish its handshake in time"),
            }
        });
    }
}

/// One incoming connection: TLS (the client's certificate checked against
/// the job's CA), then the client's streams and hello, then the check that
/// its certificate names the rank the hello claims.
async fn accept_one(incoming: quinn::Incoming, shared: &Arc<Shared>) -> Result<()> {
    let conn = incoming.await.map_err(|e| io_error("accepting a connection".into(), e))?;
    let certs = conn
        .peer_identity()
        .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
        .ok_or_else(|| Error::Protocol("a connecting peer showed no certificate".into()))?;
    let (mut streams, first) = accept_lanes(&conn).await?;
    // This side's streams carry nothing until the peer is known; opening
    // them lets the dialler's setup finish, and its hello come.
    let (control, bulk) = open_lanes(&conn).await?;
    let refuse = |code: u32, why: String| {
        conn.close(VarInt::from_u32(code), why.as_bytes());
        Err(Error::Protocol(why))
    };
    let mut greeting = Greeting::new(shared.me, shared.size, shared.max_payload);
    let mut more = first;
    let hello = loop {
        match greeting.push(&more) {
            Ok(Some(hello)) => break hello,
            Ok(None) => {}
            Err(e) => return refuse(code::PROTOCOL, e.to_string()),
        }
        match streams[0].read_chunk(64 << 10, true).await.map_err(|e| io_error("reading a hello".into(), e))? {
            Some(chunk) => more = chunk.bytes.into(),
            None => return Err(Error::Protocol("a connecting peer closed its stream before its hello".into())),
        }
    };
    let claimed = hello.header.source;
    let buf = greeting.into_rest();
    if let Err(e) = certs.first().map_or(Err(Error::Protocol("no certificate".into())), |c| shared.credential.check_names(c, claimed)) {
        return refuse(code::IDENTITY, format!("a peer claiming rank {claimed}: {e}"));
    }
    if std::mem::replace(&mut shared.connected.lock().unwrap_or_else(|e| e.into_inner())[claimed as usize], true) {
        return refuse(code::DUPLICATE, format!("rank {claimed} is already connected, or was given up on"));
    }
    let [control_in, bulk_in] = streams;
    // The hello goes to the endpoint first, then whatever followed it.
    let Some(ep) = shared.endpoint.upgrade() else { return Ok(()) };
    if let Err(e) = ep.handle_frame(claimed as usize, hello) {
        conn.close(VarInt::from_u32(code::PROTOCOL), b"bad hello");
        return Err(e);
    }
    drop(ep);
    run(shared, claimed, conn, [control, bulk], [(control_in, buf), (bulk_in, BytesMut::new())]);
    Ok(())
}

/// Dials `peer` (a lower rank) at `addr` until it answers or the connect
/// timeout passes, then sets up the connection.
pub(crate) async fn dial(shared: Arc<Shared>, quic: quinn::Endpoint, peer: u32, addr: std::net::SocketAddr) {
    let deadline = Instant::now() + shared.connect_timeout;
    let name = rank_name(shared.credential.job(), peer);
    let result = async {
        let conn = loop {
            let attempt = quic.connect_with(shared.client.clone(), addr, &name).map_err(|e| io_error(format!("connecting to rank {peer}"), e))?;
            match tokio::time::timeout_at(deadline.into(), attempt).await {
                Ok(Ok(conn)) => break conn,
                Ok(Err(e)) if Instant::now() + Duration::from_millis(50) < deadline => {
                    // Not listening yet (another process still starting): try again.
                    tracing::debug!(rank = shared.me, peer, error = %e, "connect failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(Err(e)) => return Err(io_error(format!("connecting to rank {peer}"), e)),
                Err(_) => return Err(io_error(format!("connecting to rank {peer}"), std::io::Error::from(std::io::ErrorKind::TimedOut))),
            }
        };
        let (control, bulk) = open_lanes(&conn).await?;
        let lanes = tokio::time::timeout_at(deadline.into(), accept_lanes(&conn))
            .await
            .map_err(|_| io_error(format!("rank {peer}'s streams"), std::io::Error::from(std::io::ErrorKind::TimedOut)))??;
        Ok::<_, Error>((conn, control, bulk, lanes))
    }
    .await;
    match result {
        Ok((conn, control, bulk, ([control_in, bulk_in], buf))) => {
            shared.connected.lock().unwrap_or_else(|e| e.into_inner())[peer as usize] = true;
            run(&shared, peer, conn, [control, bulk], [(control_in, buf), (bulk_in, BytesMut::new())]);
        }
        Err(e) => shared.fail(peer, e),
    }
}

/// Opens this side's two streams, each led by its lane's byte.
async fn open_lanes(conn: &quinn::Connection) -> Result<(quinn::SendStream, quinn::SendStream)> {
    let open = async |lane: Lane| {
        let mut s = conn.open_uni().await.map_err(|e| io_error("opening a stream".into(), e))?;
        // quinn sends the control stream's data before the bulk stream's.
        let _ = s.set_priority(if lane == Lane::Control { 1 } else { 0 });
        s.write_all(&[lane as u8]).await.map_err(|e| io_error("opening a stream".into(), e))?;
        Ok::<_, Error>(s)
    };
    let control = open(Lane::Control).await?;
    let bulk = open(Lane::Bulk).await?;
    Ok((control, bulk))
}

/// Accepts the peer's two streams, ordered by the lane byte that leads
/// each, with whatever followed that byte on the control stream.
async fn accept_lanes(conn: &quinn::Connection) -> Result<([quinn::RecvStream; 2], BytesMut)> {
    let mut lanes: [Option<quinn::RecvStream>; 2] = [None, None];
    let mut rest = BytesMut::new();
    for _ in 0..2 {
        let mut s = conn.accept_uni().await.map_err(|e| io_error("accepting a stream".into(), e))?;
        let mut first = loop {
            match s.read_chunk(64 << 10, true).await.map_err(|e| io_error("reading a stream".into(), e))? {
                Some(chunk) if !chunk.bytes.is_empty() => break chunk.bytes,
                Some(_) => continue,
                None => return Err(Error::Protocol("a stream ended before its lane byte".into())),
            }
        };
        let lane = lane_of(first[0])?;
        first = first.slice(1..);
        match lane {
            Lane::Control if lanes[0].is_none() => rest.extend_from_slice(&first),
            Lane::Bulk if lanes[1].is_none() && first.is_empty() => {}
            _ => return Err(Error::Protocol(format!("a second {lane:?} stream, or data before a frame could start"))),
        }
        lanes[lane as usize] = Some(s);
    }
    let [Some(control), Some(bulk)] = lanes else { unreachable!("both lanes were filled above") };
    Ok(([control, bulk], rest))
}

/// Starts the four tasks that carry the connection to `peer`.
fn run(
    shared: &Arc<Shared>,
    peer: u32,
    conn: quinn::Connection,
    writers: [quinn::SendStream; 2],
    readers: [(quinn::RecvStream, BytesMut); 2],
) {
    // However the connection ends, the peer is gone: its streams may have
    // ended cleanly (a peer dropped without finalizing) before the close,
    // and nothing else would notice. After a finalize this changes nothing
    // (both sides are done with each other before either closes).
    let watched = conn.clone();
    let watcher = shared.clone();
    spawn_in(&shared.registry, async move {
        let why = watched.closed().await;
        watcher.fail(peer, io_error(format!("the connection to rank {peer} closed"), why));
    });
    for (lane, stream) in [Lane::Control, Lane::Bulk].into_iter().zip(writers) {
        shared.outboxes[peer as usize].attach(lane, stream);
        spawn_in(&shared.registry, write(shared.clone(), peer, lane));
    }
    for ((stream, buf), lane) in readers.into_iter().zip([Lane::Control, Lane::Bulk]) {
        let mut reader = Reader {
            shared: shared.clone(),
            peer,
            lane,
            conn: conn.clone(),
            stream,
            decoder: ChunkDecoder::new(shared.max_payload),
            start: Some(buf.freeze()),
        };
        match lane {
            Lane::Control => {
                let inlet = shared.inlets[peer as usize].clone();
                inlet.attach(reader);
                spawn_in(&shared.registry, inlet.run());
            }
            Lane::Bulk => spawn_in(&shared.registry, std::future::poll_fn(move |cx| reader.poll_read(cx))),
        }
    }
}

/// Moves the frames queued in the outbox for `lane` into its stream
/// whenever the stream has room (frames that find the queue empty go
/// straight in, without this task); once the endpoint is flushing and the
/// lane is drained, finishes the stream and waits for the peer to
/// acknowledge it.
async fn write(shared: Arc<Shared>, peer: u32, lane: Lane) {
    let outbox = shared.outboxes[peer as usize].clone();
    loop {
        match std::future::poll_fn(|cx| outbox.poll_drain(lane, cx)).await {
            Drained::Room => {
                if let Some(ep) = shared.endpoint.upgrade() {
                    ep.writable(peer as usize);
                }
            }
            Drained::Failed(e) => {
                shared.fail(peer, io_error(format!("writing to rank {peer}"), e));
                return;
            }
            Drained::Finish(mut stream) => {
                let _ = stream.finish();
                // Acknowledged, stopped, or lost with the connection: done either way.
                let _ = stream.stopped().await;
                outbox.finished(lane);
                return;
            }
        }
    }
}
