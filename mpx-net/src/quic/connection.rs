//! Setting up the connections to each peer and the tasks that carry
//! them: a writer and a reader for each of the control and bulk streams
//! (the control stream's reader is shared with waiting program tasks: see
//! [`inlet`](super::inlet)), and a watcher per connection.
//!
//! The rank with the higher number dials; the other accepts. Each side
//! opens a unidirectional control stream led by a [`StreamHead`] that
//! says where its bulk socket listens, and sends its hello first on it.
//! When both have a bulk socket, the dialler then dials the other's bulk
//! socket from its own, and each side opens its bulk stream on that
//! connection, led by its rank; otherwise each opens its bulk stream on
//! the control stream's connection. With two connections, a small message
//! never waits in a socket's queue behind rendezvous data. The accepting
//! side learns who dialled from the client's certificate, once TLS has
//! checked it, and holds the hello (and a bulk connection's head) to that
//! rank before anything reaches the endpoint.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mpx_core::proto::wire::ChunkDecoder;
use mpx_core::runtime::WeakEndpoint;
use mpx_core::{Error, ErrorKind, Result};
use quinn::VarInt;
use rustls::pki_types::CertificateDer;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::credential::{rank_name, RankCredential};
use super::greeting::{Greeting, StreamHead};
use super::inlet::{Inlet, Reader};
use super::link::{Drained, Lane, Outbox};

/// Close codes mpx uses on its connections.
pub(crate) mod code {
    /// The peer broke mpx's protocol (a bad frame, a bad hello or stream
    /// head).
    pub const PROTOCOL: u32 = 1;
    /// The peer's certificate names no rank of the job, or a rank that
    /// does not dial this one (a lower rank, or this rank itself), or
    /// not the rank its hello (or its bulk connection's head) claims.
    pub const IDENTITY: u32 = 2;
    /// A second connection (or bulk connection) from a rank already
    /// connected, or one from a rank given up on (after the connect
    /// timeout).
    pub const DUPLICATE: u32 = 3;
    /// The peer's other connection closed, and this one with it.
    pub const OTHER_CLOSED: u32 = 4;
    /// The peer's endpoint was dropped without finalizing.
    pub const DROPPED: u32 = 5;
    /// This rank's engine failed the peer on its own finding (a breach of
    /// the protocol in what its frames said, a peer that stopped reading):
    /// the connection closes once the parting goodbye has gone, or after
    /// the linger.
    pub const FAILED: u32 = 6;
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
    spawn_on(None, registry, task)
}

/// [`spawn_in`] on `runtime` (`None`: the current one).
pub(crate) fn spawn_on(runtime: Option<&tokio::runtime::Handle>, registry: &Weak<Registry>, task: impl std::future::Future<Output = ()> + Send + 'static) {
    let handle = match runtime {
        Some(runtime) => runtime.spawn(task).abort_handle(),
        None => tokio::spawn(task).abort_handle(),
    };
    match registry.upgrade() {
        Some(r) => {
            let mut tasks = r.0.lock().unwrap_or_else(|e| e.into_inner());
            // Tasks that have ended (one per connection attempt accepted,
            // for one) need no handle kept.
            tasks.retain(|t| !t.is_finished());
            tasks.push(handle);
        }
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
    /// How this rank dials a peer's bulk socket.
    pub(crate) bulk_client: quinn::ClientConfig,
    /// The largest frame payload accepted (the decoder's cap).
    pub(crate) max_payload: usize,
    pub(crate) registry: Weak<Registry>,
    pub(crate) connect_timeout: Duration,
    /// [`Options::idle_timeout`](super::Options::idle_timeout): how long
    /// a peer this rank's engine failed keeps its connections for the
    /// parting goodbye to go, and (four fifths of it) how long one attempt
    /// to connect waits for an answer.
    pub(crate) idle_timeout: Duration,
    /// The receiving side of each peer's control stream.
    pub(crate) inlets: Arc<Vec<Arc<Inlet>>>,
    /// The peers connected so far, or all of them once the connect
    /// timeout has passed (a connection of a peer marked is refused).
    pub(crate) connected: Mutex<Vec<bool>>,
    /// This rank's bulk socket's QUIC endpoint, if it has one
    /// ([`Options::bulk_connection`](super::Options::bulk_connection)).
    pub(crate) bulk: Option<quinn::Endpoint>,
    /// Its port, as this rank's control streams announce it (0: none).
    /// Both ranks of a pair decide from the two announced ports.
    pub(crate) bulk_port: u16,
    /// The bulk connections higher ranks have made, on their way from the
    /// bulk endpoint's accept loop to the setup of the control connection.
    pub(crate) bulk_arrivals: BulkArrivals,
    /// How many TLS handshakes each socket runs at once at most from one
    /// source, an IPv4 address or an IPv6 /64 (see [`accept_loop`]).
    pub(crate) max_handshakes: usize,
    /// The connection-level receive window of a connection once it is set
    /// up (an accepted one starts with [`SETUP_RECEIVE_WINDOW`]).
    pub(crate) receive_window: VarInt,
    /// The runtime of the bulk socket's connections, when they have a
    /// thread of their own ([`Options::bulk_thread`](super::Options::bulk_thread)):
    /// the bulk streams' readers and writers run there too.
    pub(crate) bulk_thread: Option<tokio::runtime::Handle>,
}

impl Shared {
    /// [`Shared::max_handshakes`] for a world of `size`: every higher rank
    /// at once, twice over, and some room.
    pub(crate) fn max_handshakes(size: u32) -> usize {
        2 * size as usize + 16
    }

    /// `peer` is lost because of `cause`: its outbox refuses frames and the
    /// endpoint fails what depends on it.
    pub(crate) fn fail(&self, peer: u32, cause: Error) {
        self.outboxes[peer as usize].fail(cause.clone());
        if let Some(ep) = self.endpoint.upgrade() {
            ep.peer_failed(peer as usize, cause);
        }
    }
}

/// Where each higher rank's bulk connection is: not come yet (its
/// control connection's setup waiting for it, or not), come and waiting
/// for that setup, or taken by it.
pub(crate) enum BulkSlot {
    Open,
    Awaited,
    Arrived(Box<BulkLane>),
    Taken,
    /// Given up on at the connect timeout: none is taken any more.
    Closed,
}

/// Both directions' bulk streams on a connection of their own.
pub(crate) struct BulkLane {
    conn: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
}

/// The bulk connections of higher ranks (see [`Shared::bulk_arrivals`]).
pub(crate) struct BulkArrivals {
    slots: Mutex<Vec<BulkSlot>>,
    arrived: Notify,
}

impl BulkArrivals {
    pub(crate) fn new(size: u32) -> BulkArrivals {
        BulkArrivals { slots: Mutex::new((0..size).map(|_| BulkSlot::Open).collect()), arrived: Notify::new() }
    }

    /// Leaves `peer`'s bulk lane for its control connection; false if it
    /// already has one.
    fn put(&self, peer: u32, lane: BulkLane) -> bool {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut slots[peer as usize];
        if !matches!(slot, BulkSlot::Open | BulkSlot::Awaited) {
            return false;
        }
        *slot = BulkSlot::Arrived(Box::new(lane));
        drop(slots);
        self.arrived.notify_waiters();
        true
    }

    /// Closes the bulk connections still waiting for their control
    /// connection's setup, and takes no more; returns the ranks whose
    /// control connection's setup was waiting for theirs (that setup
    /// gives up at once).
    fn close_waiting(&self) -> Vec<u32> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut awaited = Vec::new();
        for (rank, slot) in (0..).zip(slots.iter_mut()) {
            match slot {
                BulkSlot::Taken => {}
                BulkSlot::Arrived(lane) => lane.conn.close(VarInt::from_u32(code::DUPLICATE), b"given up on"),
                BulkSlot::Awaited => awaited.push(rank),
                BulkSlot::Open | BulkSlot::Closed => {}
            }
            if !matches!(slot, BulkSlot::Taken) {
                *slot = BulkSlot::Closed;
            }
        }
        drop(slots);
        self.arrived.notify_waiters();
        awaited
    }

    /// `peer`'s bulk lane, once it has come.
    ///
    /// # Cancel safety
    /// Cancel-safe: a lane that comes after the future is dropped stays in
    /// its slot until the connect timeout closes it.
    async fn take(&self, peer: u32) -> Result<BulkLane> {
        loop {
            let notified = self.arrived.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
                let slot = &mut slots[peer as usize];
                match std::mem::replace(slot, BulkSlot::Taken) {
                    BulkSlot::Arrived(lane) => return Ok(*lane),
                    BulkSlot::Open | BulkSlot::Awaited => *slot = BulkSlot::Awaited,
                    BulkSlot::Taken => return Err(ErrorKind::Protocol(format!("rank {peer}'s bulk connection was taken already")).into()),
                    BulkSlot::Closed => {
                        *slot = BulkSlot::Closed;
                        return Err(ErrorKind::Protocol(format!("rank {peer}'s bulk connection did not come within the connect timeout")).into());
                    }
                }
            }
            notified.await;
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
    // Bulk connections that no control connection came for are closed.
    let awaited = shared.bulk_arrivals.close_waiting();
    let bulk_port = shared.bulk_port;
    for peer in missing {
        let why = if awaited.contains(&peer) {
            format!("its hello came, but no bulk connection within {:?} (can it reach UDP port {bulk_port} here?)", shared.connect_timeout)
        } else {
            format!("no connection within {:?}", shared.connect_timeout)
        };
        let waited = std::io::Error::new(std::io::ErrorKind::TimedOut, why);
        shared.fail(peer, io_error(format!("waiting for rank {peer} to connect"), waited));
    }
}

/// Which of a rank's two QUIC endpoints accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Socket {
    /// The rank's address: control connections.
    Control,
    /// The bulk socket: bulk connections.
    Bulk,
}

/// Accepts the connections of higher ranks to `socket` for as long as the
/// endpoint lives.
///
/// A connection from an address not validated yet gets a QUIC retry
/// first, so packets with forged source addresses take nothing here.
/// What a connection may hold before it is known is bounded in two
/// steps:
///
/// - *The TLS handshake*, before the peer has shown a certificate: at
///   most [`Shared::max_handshakes`] from one source at once (every
///   higher rank, twice over, and some room), and eight times that in
///   all; a source is an IPv4 address or an IPv6 /64 network (see
///   [`handshake_source`]). A stranger that starts handshakes and never
///   finishes them, or a flood of them, takes the slots of its own
///   source: ranks elsewhere still connect, unless the stranger has eight
///   sources or more that pass the retry. (Ranks on the stranger's own
///   host or /64 share its source, and so do all link-local IPv6 peers:
///   they are still let in while the stranger holds fewer than the
///   bound, which every higher rank fits in twice over.)
/// - *The setup*, from the handshake to the hello: once TLS has checked
///   the client's certificate, the rank it names is known
///   ([`RankCredential::rank_of`]), and each higher rank sets up at most
///   [`SETUPS_PER_RANK`] connections to a socket at a time; a rank
///   already connected, or one that is not a higher rank, is refused at
///   once. Until its setup is over, a connection may send this rank at
///   most [`SETUP_RECEIVE_WINDOW`] bytes in all, whatever its streams'
///   windows. So even a holder of the job's credential, connecting again
///   and again with one rank's certificate and saying nothing, holds a
///   few setups' worth of memory.
///
/// Every step runs within the connect timeout; a connection refused for
/// want of a slot is refused at once, and a rank refused so dials again
/// until its own connect timeout.
pub(crate) async fn accept_loop(quic: quinn::Endpoint, shared: Arc<Shared>, socket: Socket) {
    // Handshakes by source address; setups by rank (a few per rank, so
    // no bound in all is needed).
    let handshakes: Arc<Slots<IpAddr>> = Slots::new(shared.max_handshakes, 8 * shared.max_handshakes);
    let setups: Arc<Slots<u32>> = Slots::new(SETUPS_PER_RANK, usize::MAX);
    while let Some(incoming) = quic.accept().await {
        // Every rank that dials this one has connected (or was given up
        // on): nobody is left to set up.
        if shared.connected.lock().unwrap_or_else(|e| e.into_inner()).iter().skip(shared.me as usize + 1).all(|&c| c) {
            incoming.refuse();
            continue;
        }
        // An address not shown to be real yet (its client has not echoed
        // a retry token) is asked to: a stranger spoofing addresses then
        // never gets to take one of the handshakes.
        if !incoming.remote_address_validated() && incoming.may_retry() {
            let _ = incoming.retry();
            continue;
        }
        let from = handshake_source(incoming.remote_address().ip());
        let Some(handshake) = handshakes.try_take(from) else {
            tracing::warn!(rank = shared.me, %from, "refused a connection: too many handshakes under way from its address or network");
            incoming.refuse();
            continue;
        };
        let (shared2, setups) = (shared.clone(), setups.clone());
        spawn_in(&shared.registry, async move {
            let accepted = async {
                let conn = incoming.await.map_err(|e| io_error("accepting a connection".into(), e))?;
                drop(handshake);
                let rank = dialler(&conn, &shared2)?;
                let Some(_setup) = setups.try_take(rank) else {
                    return refuse(&conn, code::DUPLICATE, format!("rank {rank} is setting up {SETUPS_PER_RANK} connections already"));
                };
                match socket {
                    Socket::Control => accept_one(conn, rank, &shared2).await,
                    Socket::Bulk => accept_bulk(conn, rank, &shared2).await,
                }
            };
            match tokio::time::timeout(shared2.connect_timeout, accepted).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(rank = shared2.me, error = %e, "refused a connection"),
                Err(_) => tracing::warn!(rank = shared2.me, "a connecting peer did not finish its setup in time"),
            }
        });
    }
}

/// What a connection's TLS handshake counts against in [`accept_loop`]:
/// its IPv4 address (an IPv4-mapped IPv6 address's too), or the /64
/// network of its IPv6 address, since a host commonly holds a whole /64
/// and could otherwise take every slot with addresses of its own.
fn handshake_source(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128))),
        },
    }
}

/// Slots counted per key (a source address, a rank): at most `per_key`
/// taken for one key and `total` in all; each taken slot gives itself back
/// when dropped (see [`accept_loop`]).
struct Slots<K> {
    counts: Mutex<HashMap<K, usize>>,
    per_key: usize,
    total: usize,
}

impl<K: std::hash::Hash + Eq + Copy> Slots<K> {
    fn new(per_key: usize, total: usize) -> Arc<Slots<K>> {
        Arc::new(Slots { counts: Mutex::new(HashMap::new()), per_key, total })
    }

    /// A slot for `key`, if it and the whole have one free.
    fn try_take(self: &Arc<Self>, key: K) -> Option<Slot<K>> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = counts.values().sum();
        if counts.get(&key).copied().unwrap_or(0) >= self.per_key || total >= self.total {
            return None;
        }
        *counts.entry(key).or_insert(0) += 1;
        Some(Slot { slots: self.clone(), key })
    }
}

/// One taken slot (see [`Slots::try_take`]).
struct Slot<K: std::hash::Hash + Eq + Copy> {
    slots: Arc<Slots<K>>,
    key: K,
}

impl<K: std::hash::Hash + Eq + Copy> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut counts = self.slots.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = counts.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

/// The connection-level receive window of a connection this rank
/// accepts, until its setup is over: the dialler's stream heads and hello
/// (a few dozen bytes), and room for the first frames it sends once its
/// own side is set up.
pub(crate) const SETUP_RECEIVE_WINDOW: u32 = 256 << 10;

/// How many connections one rank's certificate sets up to one socket at
/// once: an honest rank sets up one (it dials again only once an attempt
/// has failed), and a dishonest holder of its certificate (one that
/// claims another rank in its hello) does not keep it out by racing it.
pub(crate) const SETUPS_PER_RANK: usize = 4;

/// The rank that dialled `conn`, as its certificate names it: a higher
/// rank (only those dial this one) not connected yet; otherwise the
/// connection is closed.
fn dialler(conn: &quinn::Connection, shared: &Shared) -> Result<u32> {
    let certs = client_certificates(conn)?;
    let named = certs.first().map_or_else(|| Err(ErrorKind::Protocol("no certificate".into()).into()), |c| shared.credential.rank_of(c));
    let rank = match named {
        Ok(rank) => rank,
        Err(e) => return refuse(conn, code::IDENTITY, format!("a connecting peer: {e}")),
    };
    if rank <= shared.me || rank >= shared.size {
        return refuse(conn, code::IDENTITY, format!("rank {rank} dials this rank {}: only higher ranks do", shared.me));
    }
    if shared.connected.lock().unwrap_or_else(|e| e.into_inner())[rank as usize] {
        return refuse(conn, code::DUPLICATE, format!("rank {rank} is already connected, or was given up on"));
    }
    Ok(rank)
}

/// The certificate chain a connection's client showed (TLS has checked it
/// against the job's CA).
fn client_certificates(conn: &quinn::Connection) -> Result<Vec<CertificateDer<'static>>> {
    conn.peer_identity()
        .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
        .map(|certs| *certs)
        .ok_or_else(|| ErrorKind::Protocol("a connecting peer showed no certificate".into()).into())
}

/// Closes `conn` with `code` and says why.
fn refuse<T>(conn: &quinn::Connection, code: u32, why: String) -> Result<T> {
    conn.close(VarInt::from_u32(code), why.as_bytes());
    Err(ErrorKind::Protocol(why).into())
}

/// One incoming control connection of rank `rank` (as its certificate,
/// checked by TLS against the job's CA, names it): the client's control
/// stream and hello, which must come from that rank, and its bulk lane
/// (on this connection or its own).
async fn accept_one(conn: quinn::Connection, rank: u32, shared: &Arc<Shared>) -> Result<()> {
    let (mut control_in, head) = accept_stream(&conn).await?;
    let StreamHead::Control { bulk_port: their_bulk } = head else {
        return refuse(&conn, code::PROTOCOL, format!("a connection's first stream is a {head:?}, not its control stream"));
    };
    // This side's control stream carries nothing until the peer is known;
    // opening it lets the dialler's setup go on, and its hello come.
    let control = open_stream(&conn, StreamHead::Control { bulk_port: shared.bulk_port }).await?;
    let own_connection = shared.bulk_port != 0 && their_bulk != 0;
    let same_connection = if own_connection { None } else { Some(exchange_heads(&conn, None, StreamHead::Bulk, StreamHead::Bulk, "a connection's second stream").await?) };
    let mut greeting = Greeting::new(shared.me, shared.size);
    let hello = loop {
        let chunk = match control_in.read_chunk(64 << 10, true).await.map_err(|e| io_error("reading a hello".into(), e))? {
            Some(chunk) => chunk.bytes,
            None => return Err(ErrorKind::Protocol("a connecting peer closed its stream before its hello".into()).into()),
        };
        match greeting.push(&chunk) {
            Ok(Some(hello)) => break hello,
            Ok(None) => {}
            Err(e) => return refuse(&conn, code::PROTOCOL, e.to_string()),
        }
    };
    let claimed = hello.header.source;
    let buf = greeting.into_rest();
    if claimed != rank {
        return refuse(&conn, code::IDENTITY, format!("a peer claiming rank {claimed}: its certificate does not name rank {claimed} (it names rank {rank})"));
    }
    let duplicate = || format!("rank {claimed} is already connected, or was given up on");
    let connected = || shared.connected.lock().unwrap_or_else(|e| e.into_inner());
    if connected()[claimed as usize] {
        return refuse(&conn, code::DUPLICATE, duplicate());
    }
    // The peer counts as connected only once its bulk lane is here too: a
    // peer that never brings it is failed by the connect timeout.
    let (bulk_conn, bulk, bulk_in) = match same_connection {
        Some((bulk, bulk_in)) => (None, bulk, bulk_in),
        // A dialler whose control connection closes meanwhile is failed
        // now, not at the connect timeout.
        None => match tokio::select! {
            lane = shared.bulk_arrivals.take(claimed) => lane,
            why = conn.closed() => return Err(io_error(format!("rank {claimed}'s connection closed before its bulk connection came"), why)),
        } {
            Ok(lane) => (Some(lane.conn), lane.send, lane.recv),
            Err(e) => return refuse(&conn, code::DUPLICATE, e.to_string()),
        },
    };
    if std::mem::replace(&mut connected()[claimed as usize], true) {
        if let Some(bulk) = &bulk_conn {
            bulk.close(VarInt::from_u32(code::DUPLICATE), b"already connected");
        }
        return refuse(&conn, code::DUPLICATE, duplicate());
    }
    // The hello goes to the endpoint first, then whatever followed it.
    let Some(ep) = shared.endpoint.upgrade() else { return Ok(()) };
    if let Err(e) = ep.handle_frame(claimed as usize, hello) {
        conn.close(VarInt::from_u32(code::PROTOCOL), b"bad hello");
        return Err(e);
    }
    drop(ep);
    let lanes = Lanes { control: conn, bulk: bulk_conn, writers: [control, bulk], readers: [(control_in, buf), (bulk_in, BytesMut::new())] };
    run(shared, claimed, lanes);
    Ok(())
}

/// One incoming bulk connection of rank `rank` (as its certificate
/// names it): the client's bulk stream, whose head must name that rank;
/// this side's bulk stream is opened on it and both wait for the rank's
/// control connection.
async fn accept_bulk(conn: quinn::Connection, rank: u32, shared: &Arc<Shared>) -> Result<()> {
    let (recv, head) = accept_stream(&conn).await?;
    let claimed = match head.bulk_dialler(shared.me, shared.size) {
        Ok(rank) => rank,
        Err(e) => return refuse(&conn, code::PROTOCOL, e.to_string()),
    };
    if claimed != rank {
        return refuse(&conn, code::IDENTITY, format!("a peer claiming rank {claimed}: its certificate does not name rank {claimed} (it names rank {rank})"));
    }
    if shared.connected.lock().unwrap_or_else(|e| e.into_inner())[claimed as usize] {
        return refuse(&conn, code::DUPLICATE, format!("rank {claimed} is already connected, or was given up on"));
    }
    let send = open_stream(&conn, StreamHead::BulkConnection { rank: shared.me }).await?;
    if !shared.bulk_arrivals.put(claimed, BulkLane { conn: conn.clone(), send, recv }) {
        return refuse(&conn, code::DUPLICATE, format!("rank {claimed} has a bulk connection already"));
    }
    Ok(())
}

/// Dials `peer` (a lower rank) at `addr` until it answers or the connect
/// timeout passes, then sets up the connection (and the bulk connection,
/// when both have a bulk socket).
pub(crate) async fn dial(shared: Arc<Shared>, quic: quinn::Endpoint, peer: u32, addr: std::net::SocketAddr) {
    let deadline = Instant::now() + shared.connect_timeout;
    let setup = async {
        let conn = connect(&shared, &quic, &shared.client, peer, addr, deadline, "").await?;
        let control = open_stream(&conn, StreamHead::Control { bulk_port: shared.bulk_port }).await?;
        let (control_in, head) = accept_stream(&conn).await?;
        let StreamHead::Control { bulk_port: their_bulk } = head else {
            return refuse(&conn, code::PROTOCOL, format!("rank {peer}'s first stream is a {head:?}, not its control stream"));
        };
        let (bulk_conn, bulk, bulk_in) = match &shared.bulk {
            Some(own) if shared.bulk_port != 0 && their_bulk != 0 => {
                let mut bulk_addr = addr;
                bulk_addr.set_port(their_bulk);
                let bulk_conn = connect(&shared, own, &shared.bulk_client, peer, bulk_addr, deadline, "'s bulk socket").await?;
                let (mine, theirs) = (StreamHead::BulkConnection { rank: shared.me }, StreamHead::BulkConnection { rank: peer });
                let (bulk, bulk_in) = exchange_heads(&bulk_conn, Some(&conn), mine, theirs, &format!("rank {peer}'s bulk connection")).await?;
                (Some(bulk_conn), bulk, bulk_in)
            }
            _ => {
                let (bulk, bulk_in) = exchange_heads(&conn, None, StreamHead::Bulk, StreamHead::Bulk, &format!("rank {peer}'s second stream")).await?;
                (None, bulk, bulk_in)
            }
        };
        Ok(Lanes { control: conn, bulk: bulk_conn, writers: [control, bulk], readers: [(control_in, BytesMut::new()), (bulk_in, BytesMut::new())] })
    };
    // Every step under the one deadline: a peer that never opens a stream
    // or gives no room in one is failed too.
    let result = match tokio::time::timeout_at(deadline.into(), setup).await {
        Ok(result) => result,
        Err(_) => Err(io_error(format!("setting up the connection to rank {peer}"), std::io::Error::from(std::io::ErrorKind::TimedOut))),
    };
    match result {
        Ok(lanes) => {
            shared.connected.lock().unwrap_or_else(|e| e.into_inner())[peer as usize] = true;
            let control = lanes.control.clone();
            run(&shared, peer, lanes);
            // The peer sends its hello once its side is set up, at once:
            // a peer that keeps its connection alive and says nothing
            // fails after the connect timeout.
            let registry = shared.registry.clone();
            spawn_in(&registry, async move {
                tokio::time::sleep(shared.connect_timeout).await;
                let Some(ep) = shared.endpoint.upgrade() else { return };
                if ep.awaiting_hello().contains(&(peer as usize)) {
                    let silent = std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no hello within {:?} of the connection's setup", shared.connect_timeout));
                    shared.fail(peer, io_error(format!("waiting for rank {peer}'s hello"), silent));
                    control.close(VarInt::from_u32(code::PROTOCOL), b"no hello");
                }
            });
        }
        Err(e) => shared.fail(peer, e),
    }
}

/// The shortest time one attempt to connect is given (see [`connect`]).
const MIN_ATTEMPT: Duration = Duration::from_secs(2);

/// Connects from `quic` to `peer` at `addr`, trying again while it does
/// not answer (another process still starting) until `deadline`; `what`
/// completes "rank N" in the error (the socket dialled). The error names
/// why the last attempt that ended failed (a refused certificate, say),
/// even when a later one was still waiting at the deadline.
async fn connect(shared: &Shared, quic: &quinn::Endpoint, client: &quinn::ClientConfig, peer: u32, addr: std::net::SocketAddr, deadline: Instant, what: &str) -> Result<quinn::Connection> {
    let name = rank_name(shared.credential.job(), peer);
    let context = || format!("connecting to rank {peer}{what} at {addr}");
    let mut last_failure = None;
    loop {
        let attempt = quic.connect_with(client.clone(), addr, &name).map_err(|e| io_error(context(), e))?;
        // Each attempt ends after four fifths of the idle timeout, as
        // QUIC's own idle timeout would end it (a control connection may
        // have none: see `Options::control_transport`), but no sooner than
        // `MIN_ATTEMPT`, time for a handshake's round trips: a peer that
        // starts listening late is dialled again rather than waited for on
        // the slowing retransmissions of a first packet it never got.
        let attempt_ends = deadline.min(Instant::now() + (shared.idle_timeout * 4 / 5).max(MIN_ATTEMPT));
        match tokio::time::timeout_at(attempt_ends.into(), attempt).await {
            Ok(Ok(conn)) => return Ok(conn),
            Ok(Err(e)) if Instant::now() + Duration::from_millis(50) < deadline => {
                tracing::debug!(rank = shared.me, peer, error = %e, "connect failed; retrying");
                last_failure = Some(e);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(Err(e)) => return Err(io_error(context(), e)),
            Err(_) if Instant::now() + Duration::from_millis(50) < deadline => {
                tracing::debug!(rank = shared.me, peer, "no answer to a connect; retrying");
            }
            Err(_) => {
                return Err(match last_failure {
                    Some(e) => io_error(format!("{} (no answer by the deadline; the last attempt failed)", context()), e),
                    None => io_error(context(), std::io::Error::from(std::io::ErrorKind::TimedOut)),
                })
            }
        }
    }
}

/// Opens a stream led by `head`.
async fn open_stream(conn: &quinn::Connection, head: StreamHead) -> Result<quinn::SendStream> {
    let mut s = conn.open_uni().await.map_err(|e| io_error("opening a stream".into(), e))?;
    // quinn sends the control stream's data before the bulk stream's.
    let _ = s.set_priority(if matches!(head, StreamHead::Control { .. }) { 1 } else { 0 });
    s.write_all(&head.encode()).await.map_err(|e| io_error("opening a stream".into(), e))?;
    Ok(s)
}

/// Accepts the peer's next stream and reads its head (leaving the frames
/// after it in the stream).
async fn accept_stream(conn: &quinn::Connection) -> Result<(quinn::RecvStream, StreamHead)> {
    let mut s = conn.accept_uni().await.map_err(|e| io_error("accepting a stream".into(), e))?;
    let mut head = [0u8; StreamHead::MAX_LEN];
    let read_err = |e| io_error("reading a stream's head".into(), e);
    s.read_exact(&mut head[..1]).await.map_err(read_err)?;
    let len = StreamHead::len(head[0])?;
    s.read_exact(&mut head[1..len]).await.map_err(read_err)?;
    Ok((s, StreamHead::decode(&head[..len])?))
}

/// Opens this side's stream led by `mine` and accepts the peer's next,
/// which must be led by `theirs`; if it is not, the connection (and
/// `sibling`, the peer's other connection) is closed, `what` naming the
/// peer's stream in the error.
async fn exchange_heads(
    conn: &quinn::Connection,
    sibling: Option<&quinn::Connection>,
    mine: StreamHead,
    theirs: StreamHead,
    what: &str,
) -> Result<(quinn::SendStream, quinn::RecvStream)> {
    let send = open_stream(conn, mine).await?;
    let (recv, head) = accept_stream(conn).await?;
    if head != theirs {
        if let Some(sibling) = sibling {
            sibling.close(VarInt::from_u32(code::PROTOCOL), b"a bad bulk connection");
        }
        return refuse(conn, code::PROTOCOL, format!("{what} is led by {head:?}, not {theirs:?}"));
    }
    Ok((send, recv))
}

/// What carries one peer: the control connection, the bulk connection if
/// the bulk streams have their own, and both lanes' streams.
struct Lanes {
    control: quinn::Connection,
    bulk: Option<quinn::Connection>,
    writers: [quinn::SendStream; 2],
    /// Each lane's stream, with what was read of it already.
    readers: [(quinn::RecvStream, BytesMut); 2],
}

/// Starts the tasks that carry the connections to `peer`.
fn run(shared: &Arc<Shared>, peer: u32, lanes: Lanes) {
    let Lanes { control, bulk, writers, readers } = lanes;
    let conns: Vec<quinn::Connection> = std::iter::once(control.clone()).chain(bulk.clone()).collect();
    // A connection this rank accepted had a small window while it was set
    // up (see `accept_loop`); the peer is known now.
    for conn in &conns {
        conn.set_receive_window(shared.receive_window);
    }
    // However a connection ends, the peer is gone (and its other
    // connection with it): its streams may have ended cleanly (a peer
    // dropped without finalizing) before the close, and nothing else
    // would notice. After a finalize this changes nothing (both sides are
    // done with each other before either closes).
    for watched in &conns {
        let watched = watched.clone();
        let others = conns.clone();
        let watcher = shared.clone();
        spawn_in(&shared.registry, async move {
            let outbox = watcher.outboxes[peer as usize].clone();
            // A peer the engine failed on its own finding is cut off once
            // what was queued for it (its parting goodbye) has gone, or
            // after the linger (a peer that stopped reading takes none).
            let lost = async {
                std::future::poll_fn(|cx| outbox.poll_lost(cx)).await;
                let _ = tokio::time::timeout(watcher.idle_timeout, std::future::poll_fn(|cx| outbox.poll_lanes_finished(cx))).await;
            };
            tokio::select! {
                // A peer opens no stream beyond those of the setup: one
                // more would sit in quinn's buffers, unread, up to its
                // window. (The wait for one ends with an error once the
                // connection closes.)
                opened = watched.accept_uni() => if opened.is_ok() {
                    // The reason first: closing makes the readers fail the
                    // peer too, for the connection's loss.
                    watcher.fail(peer, ErrorKind::Protocol(format!("rank {peer} opened a stream beyond its control and bulk streams")).into());
                    watched.close(VarInt::from_u32(code::PROTOCOL), b"a stream beyond the setup");
                },
                // Unless the transport failed the peer meanwhile: it
                // closes the connections itself, with its reason.
                () = lost => if !outbox.has_failed() {
                    watched.close(VarInt::from_u32(code::FAILED), b"failed by this rank");
                },
            }
            let why = watched.closed().await;
            for other in &others {
                other.close(VarInt::from_u32(code::OTHER_CLOSED), b"the other connection closed");
            }
            watcher.fail(peer, io_error(format!("the connection to rank {peer} closed"), why));
        });
    }
    // The bulk lane's tasks run where its connection's driver runs.
    let runtime = |lane| match lane {
        Lane::Bulk if bulk.is_some() => shared.bulk_thread.as_ref(),
        _ => None,
    };
    let conn_of = |lane| match (lane, &bulk) {
        (Lane::Bulk, Some(bulk)) => bulk.clone(),
        _ => control.clone(),
    };
    for (lane, stream) in [Lane::Control, Lane::Bulk].into_iter().zip(writers) {
        shared.outboxes[peer as usize].attach(lane, stream);
        spawn_on(runtime(lane), &shared.registry, write(shared.clone(), peer, lane, conn_of(lane)));
    }
    for ((stream, buf), lane) in readers.into_iter().zip([Lane::Control, Lane::Bulk]) {
        let conn = conn_of(lane);
        let mut reader = Reader {
            shared: shared.clone(),
            peer,
            lane,
            conn,
            stream,
            decoder: ChunkDecoder::new(shared.max_payload),
            start: (!buf.is_empty()).then(|| buf.freeze()),
        };
        match lane {
            Lane::Control => {
                let inlet = shared.inlets[peer as usize].clone();
                inlet.attach(reader);
                spawn_in(&shared.registry, inlet.run());
            }
            Lane::Bulk => spawn_on(runtime(lane), &shared.registry, std::future::poll_fn(move |cx| reader.poll_read(cx))),
        }
    }
}

/// Moves the frames queued in the outbox for `lane` into its stream
/// whenever the stream has room (frames that find the queue empty go
/// straight in, without this task); once the endpoint is flushing and the
/// lane is drained, finishes the stream and waits for the peer to
/// acknowledge it. A stream that fails (the peer stopped it) fails the
/// peer, and closes `conn`, the lane's connection, to tell it.
async fn write(shared: Arc<Shared>, peer: u32, lane: Lane, conn: quinn::Connection) {
    let outbox = shared.outboxes[peer as usize].clone();
    loop {
        match std::future::poll_fn(|cx| outbox.poll_drain(lane, cx)).await {
            Drained::Room => {
                if let Some(ep) = shared.endpoint.upgrade() {
                    ep.writable(peer as usize);
                }
            }
            Drained::Failed(e) => {
                // The reason first: the close makes the readers fail the
                // peer too, for the connection's loss.
                shared.fail(peer, io_error(format!("writing to rank {peer}"), e));
                conn.close(VarInt::from_u32(code::PROTOCOL), b"a stream failed");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Handshakes count against an IPv4 address, or an IPv6 address's /64:
    /// addresses of one /64 are one source, of two /64s two, and an
    /// IPv4-mapped address is its IPv4 address.
    #[test]
    fn handshakes_count_per_ipv4_address_and_per_ipv6_network() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(handshake_source(ip("2001:db8:1:2::1")), handshake_source(ip("2001:db8:1:2:ffff:1:2:3")));
        assert_eq!(handshake_source(ip("2001:db8:1:2::1")), ip("2001:db8:1:2::"));
        assert_ne!(handshake_source(ip("2001:db8:1:2::1")), handshake_source(ip("2001:db8:1:3::1")));
        assert_eq!(handshake_source(ip("10.0.0.7")), ip("10.0.0.7"));
        assert_ne!(handshake_source(ip("10.0.0.7")), handshake_source(ip("10.0.0.8")));
        assert_eq!(handshake_source(ip("::ffff:10.0.0.7")), ip("10.0.0.7"));
        let slots: Arc<Slots<IpAddr>> = Slots::new(2, 100);
        let taken: Vec<_> = ["2001:db8::1", "2001:db8::2"].iter().map(|a| slots.try_take(handshake_source(ip(a))).expect("a slot")).collect();
        assert!(slots.try_take(handshake_source(ip("2001:db8::3"))).is_none(), "a third from one /64");
        assert!(slots.try_take(handshake_source(ip("2001:db8:0:1::3"))).is_some(), "another /64");
        drop(taken);
    }
}
