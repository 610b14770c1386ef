//! The QUIC transport: ranks in different processes or on different hosts,
//! with the same semantics as the loopback.
//!
//! # Connections
//!
//! Every pair of ranks gets a QUIC connection (two, see below), set up when the endpoint
//! starts (the higher rank dials the lower), authenticated both ways with
//! the job's credential ([`JobCredential`], [`RankCredential`]): mutual
//! TLS 1.3 under a CA made for the job, each rank's certificate naming
//! its rank. A process without a certificate of the job's CA cannot
//! connect; a rank cannot claim another's number (a dialler asks for the
//! rank's name, an acceptor checks the name against the rank the hello
//! claims); a certificate of another job is refused by TLS.
//!
//! Each direction carries two unidirectional streams: the control stream
//! (hellos, messages, rendezvous requests and answers, goodbyes) and the
//! bulk stream (rendezvous data). QUIC's streams are independent, so a
//! large transfer never holds back a small message to the same peer in
//! quinn (see [`link`](self) for the queues behind them); and the bulk
//! streams travel on a second connection, between a second UDP socket of
//! each rank ([`Options::bulk_connection`]), so neither does it in the
//! receiving socket's queue, which a connection's packets share. That
//! socket's port is any the system picks, or one of a [`PortRange`] given
//! for a firewall ([`Options::bulk_ports`], `MPX_PORT_RANGE`); peers learn
//! it from the rank's control stream. Frames are
//! written header and payload as separate chunks, and decoded from each
//! stream with a capped decoder; a malformed frame or a protocol violation
//! closes the connection and fails the peer.
//!
//! # Progress and shutdown
//!
//! A writer and a reader per stream, a task per connection that fails the
//! peer when it closes, and one accepting connections per socket make the
//! endpoint's driver; the endpoint owns
//! them, and they end with it. The bulk socket's connections, with the
//! bulk streams' readers and writers, run on a thread of the endpoint's own
//! ([`Options::bulk_thread`]), so a large transfer keeps that thread busy
//! rather than the program's workers. A program task waiting on the endpoint
//! reads the control streams too, so a message wakes it with no task in
//! between; the reader tasks make progress whether or not one waits (see
//! [`inlet`](self)). `finalize` closes the endpoint, then each
//! writer drains its queue, finishes its stream and waits until the peer
//! has acknowledged all of it. A connection that breaks or closes (an
//! I/O error, QUIC's idle timeout: [`Options::idle_timeout`], timed on
//! the bulk connection where both ranks have a bulk thread, so that a
//! program busy computing is not taken for dead; a peer
//! dropped without finalizing) closes the peer's other connection and
//! fails the peer with
//! [`ErrorKind::ProcessFailed`], whose source
//! is the transport error.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mpx_core::Result<()> {
//! let got = mpx_net::quic::launch(3, |world| async move {
//!     let right = (world.rank() + 1) % world.size();
//!     let left = (world.rank() + world.size() - 1) % world.size();
//!     let mut from_left = 0usize;
//!     world.sendrecv(&world.rank(), right, 0, &mut from_left, left, 0).await?;
//!     Ok(from_left)
//! })
//! .await?;
//! assert_eq!(got, [2, 0, 1]);
//! # Ok(()) }
//! ```

mod bulk_thread;
mod connection;
mod credential;
mod greeting;
mod inlet;
mod link;
mod ports;
#[cfg(test)]
mod tests;

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mpx_core::proto::engine::Config;
use mpx_core::{Comm, Endpoint, Error, ErrorKind, Result};

pub use credential::{fingerprint, rank_name, Fingerprint, JobCredential, RankCredential};
pub use greeting::{Greeting, StreamHead};
pub use ports::PortRange;

use bulk_thread::BulkThread;
use connection::{spawn_in, BulkArrivals, Registry, Shared, Socket};
use inlet::Inlet;
use link::{Outbox, QuicTransport};

/// The unsolicited credit ([`Config::unsolicited_credit`]) a rank grants
/// each peer by default over QUIC: a few megabyte-sized messages may each
/// start their data with their request, saving a network round trip (on
/// 127.0.0.1 between two processes, about 8 % of a 1 MiB message's time);
/// larger ones wait for their clear-to-send. It bounds what a peer makes
/// this rank hold for messages no receive has matched, beside the eager
/// credit.
pub const UNSOLICITED_CREDIT: u64 = 4 << 20;

/// The largest [`Options::mtu`]: above it a batch of packets exceeds what
/// the kernel sends at once with segmentation offload, and the kernel
/// drops it (the connection then hangs until its timeout), and from about
/// 16,450 bytes quinn refuses the packets it builds.
pub const MAX_MTU: u16 = 6550;

/// The longest [`Options::connect_timeout`]: a day, beyond any start-up
/// worth waiting for (the deadlines it sets must be representable).
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// How a rank's QUIC endpoint is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Protocol tunables (eager threshold, credit, chunk size, ...).
    /// [`Options::network`] and [`Options::local`] grant each peer
    /// [`UNSOLICITED_CREDIT`] of unsolicited credit
    /// ([`Config::unsolicited_credit`]): a rendezvous message that fits
    /// starts its data without waiting a round trip for the receiver's
    /// clear-to-send. Change fields of `Options::local().engine` rather
    /// than starting from `Config::default()`, which grants none. Its
    /// `idle_timeout` must stay `None`: over QUIC a silent peer fails
    /// after [`Options::idle_timeout`].
    pub engine: Config,
    /// The UDP payload size of every packet (QUIC's MTU), fixed: at least
    /// 1200 (smaller values are taken as 1200) and at most [`MAX_MTU`]
    /// (larger ones fail [`start`]); 1472 fits any Ethernet path.
    pub mtu: u16,
    /// A peer whose connection hears nothing for this long fails, and
    /// everything pending on it with it (keep-alives go five times as
    /// often, so a live peer never does): the bound on noticing a dead
    /// peer or a lost path. With a [`bulk_thread`](Options::bulk_thread)
    /// on both sides, the bulk connection, driven from that thread, is
    /// the one timed: a program that computes for longer without awaiting
    /// (its runtime, and the control connection's driver on it, held up,
    /// even on a current-thread runtime) is still heard. So is a process
    /// whose runtime is stuck for good while its bulk thread runs, and a
    /// path that stops carrying the control socket's packets alone (a
    /// firewall that lets the bulk port through): such a peer's messages
    /// wait rather than fail. Each attempt to connect to a peer at start
    /// waits for an answer this long too (four fifths of it, at least
    /// 2 s) before it dials again. QUIC's own idle timeout is set to four fifths
    /// of it, since QUIC restarts its timer when a keep-alive goes out.
    /// At least 10 ms (to QUIC, zero would mean no timeout at all). It
    /// also bounds how long `finalize` waits, once a peer's goodbye has
    /// arrived, for that peer to end its streams.
    ///
    /// On a path whose round trips are long or vary widely, quinn takes
    /// three of its probe timeouts as the idle timeout when that is
    /// longer (a probe timeout is about a round trip plus four times its
    /// variation): the bound stretches with such a path's round trips, in
    /// practice once they reach about a second at the 10 s default.
    pub idle_timeout: Duration,
    /// How long connecting to every peer may take, retries included: the
    /// connection and its streams set up (each peer's within this time
    /// of the start), then its hello (within this time again of that
    /// setup: a peer that sets up and says nothing fails after twice this
    /// at most). At most [`MAX_CONNECT_TIMEOUT`] (a longer one fails
    /// [`start`]).
    pub connect_timeout: Duration,
    /// Bytes a peer may send on one stream beyond what this rank has read
    /// (QUIC flow control; the connection as a whole may carry four times
    /// as much). A transfer runs at most this much per round trip: 16 MiB
    /// covers a gigabyte a second over 16 ms.
    pub stream_window: u32,
    /// Whether rendezvous data travels on a connection of its own, between
    /// a second UDP socket of each rank (bound to the address of the
    /// rank's own socket, on a port of [`bulk_ports`](Options::bulk_ports): it must be
    /// reachable too). A connection's packets share one queue in the
    /// receiving socket, so on one connection a small message waits
    /// behind whatever rendezvous data is queued ahead of it; on two it
    /// does not. A pair of ranks uses it when both have it on; otherwise
    /// both lanes share the one connection. On by default.
    pub bulk_connection: bool,
    /// The ports the bulk socket (see
    /// [`bulk_connection`](Options::bulk_connection)) may take, on the
    /// address of the rank's own socket: the first free one of the range
    /// that no rank of `addrs` listens at, or, with [`PortRange::ANY`]
    /// (the default), one the system picks. Set it where a firewall must
    /// let the bulk connections through. Peers learn the port from the
    /// rank's control stream, so nothing else needs to know it; a range
    /// with no such port fails [`start`] with [`ErrorKind::Transport`]. A rank
    /// started from the environment takes it from `MPX_PORT_RANGE`
    /// ([`env::PORT_RANGE`]) when that is set. Unused without a bulk
    /// socket (`bulk_connection` off, or a world of one rank).
    ///
    /// ```
    /// use mpx_net::quic::{Options, PortRange};
    /// let behind_a_firewall = Options { bulk_ports: PortRange::new(7100, 7199)?, ..Options::network() };
    /// assert_eq!(Options::network().bulk_ports, PortRange::ANY, "the system picks by default");
    /// # let _ = behind_a_firewall;
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub bulk_ports: PortRange,
    /// Whether the bulk socket's connections run on a thread of their own
    /// (a one-worker tokio runtime the endpoint owns) rather than on the
    /// program's runtime: quinn's drivers for them and the bulk streams'
    /// readers and writers. A large transfer then keeps that thread busy,
    /// not the program's workers, so they look at the control socket as
    /// soon as a small message arrives; on the program's runtime a busy
    /// worker looks at its sockets only every
    /// [`event_interval`](tokio::runtime::Builder::event_interval) tasks.
    /// Only for the bulk connections this rank has (both ranks of a pair
    /// with [`bulk_connection`](Options::bulk_connection) on); a frame that
    /// finds its stream idle is still written into it by the program's
    /// task that sent it. On by default.
    pub bulk_thread: bool,
}

impl Options {
    /// For ranks on one host (127.0.0.1): large packets.
    ///
    /// ```
    /// use mpx_net::quic::Options;
    /// assert_eq!(Options::local().mtu, 6550);
    /// assert!(Options::network().mtu <= 1472);
    /// let patient = Options { idle_timeout: std::time::Duration::from_secs(60), ..Options::local() };
    /// assert_eq!(patient.engine, Options::local().engine);
    /// ```
    pub fn local() -> Options {
        Options { mtu: 6550, ..Options::network() }
    }

    /// For ranks on different hosts: packets that fit any Ethernet path.
    pub fn network() -> Options {
        Options {
            engine: Config { unsolicited_credit: UNSOLICITED_CREDIT, ..Config::default() },
            mtu: 1472,
            idle_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(30),
            stream_window: 16 << 20,
            bulk_connection: true,
            bulk_ports: PortRange::ANY,
            bulk_thread: true,
        }
    }

    /// A connection's receive window: four streams' worth.
    fn receive_window(&self) -> quinn::VarInt {
        quinn::VarInt::from_u64(4 * u64::from(self.stream_window.max(1200))).unwrap_or(quinn::VarInt::MAX)
    }

    /// quinn's settings for a control connection: those of
    /// [`transport`](Options::transport), but with no idle timeout of its
    /// own where this rank's bulk connections run on a thread of their
    /// own (`bulk_thread`): the bulk connection to the same peer, which
    /// that thread keeps answering while the program computes without
    /// awaiting (even on a current-thread runtime), bounds a silent peer
    /// instead, and closes the control connection with it. A program busy
    /// for longer than the idle timeout is not taken for dead. (QUIC takes
    /// the shorter of the two sides' timeouts: a pair in which either side
    /// has no bulk thread keeps the timeout on the control connection.)
    fn control_transport(&self, bulk_thread: bool) -> Result<quinn::TransportConfig> {
        let mut t = self.transport()?;
        if bulk_thread {
            t.max_idle_timeout(None);
        }
        Ok(t)
    }

    /// quinn's transport settings: the flow-control windows, the fixed
    /// MTU, and a congestion window that starts at ten packets.
    fn transport(&self) -> Result<quinn::TransportConfig> {
        // QUIC counts in whole milliseconds, and a timeout that rounds to
        // 0 means none at all.
        if self.idle_timeout < Duration::from_millis(10) {
            return Err(ErrorKind::InvalidArgument(format!("an idle timeout of {:?} (at least 10 ms: a silent peer must fail after some time)", self.idle_timeout)).into());
        }
        if self.mtu > MAX_MTU {
            return Err(ErrorKind::InvalidArgument(format!("an MTU of {} (at most {MAX_MTU}: larger batches of packets are dropped by the kernel)", self.mtu)).into());
        }
        if self.connect_timeout > MAX_CONNECT_TIMEOUT {
            return Err(ErrorKind::InvalidArgument(format!("a connect timeout of {:?} (at most {MAX_CONNECT_TIMEOUT:?})", self.connect_timeout)).into());
        }
        if let Some(engine_idle) = self.engine.idle_timeout {
            return Err(ErrorKind::InvalidArgument(format!("an engine idle timeout ({engine_idle:?}): over QUIC, Options::idle_timeout bounds a silent peer")).into());
        }
        let mut t = quinn::TransportConfig::default();
        let window = self.stream_window.max(1200);
        t.stream_receive_window(quinn::VarInt::from_u32(window));
        t.receive_window(self.receive_window());
        t.send_window(64 << 20);
        // A silent peer fails within `idle_timeout`: QUIC restarts its
        // idle timer when it sends the first ack-eliciting packet after a
        // receipt, which a keep-alive makes happen within one interval, so
        // QUIC's own timeout is the bound less that interval.
        let keep_alive = self.idle_timeout / 5;
        let idle = quinn::IdleTimeout::try_from(self.idle_timeout - keep_alive)
            .map_err(|e| ErrorKind::InvalidArgument(format!("idle timeout {:?}: {e}", self.idle_timeout)))?;
        t.max_idle_timeout(Some(idle));
        t.keep_alive_interval(Some(keep_alive));
        let mtu = self.mtu.max(1200);
        t.initial_mtu(mtu);
        t.min_mtu(mtu);
        t.mtu_discovery_config(None);
        let mut cubic = quinn::congestion::CubicConfig::default();
        cubic.initial_window(10 * u64::from(mtu));
        t.congestion_controller_factory(Arc::new(cubic));
        // A connection carries the control stream, and the bulk stream
        // unless the bulk lane has a connection of its own.
        t.max_concurrent_uni_streams(quinn::VarInt::from_u32(2));
        t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(0));
        // mpx sends no datagrams, and reads none a peer sends.
        t.datagram_receive_buffer_size(None);
        Ok(t)
    }
}

/// Binds a UDP socket for a rank at `addr` (port 0: any free port), with
/// large socket buffers.
///
/// ```
/// let socket = mpx_net::quic::bind("127.0.0.1:0".parse().unwrap())?;
/// assert_ne!(socket.local_addr()?.port(), 0);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn bind(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let socket = UdpSocket::bind(addr)?;
    let sock = socket2::SockRef::from(&socket);
    // A smaller buffer loses packets under bulk transfer; a larger one
    // makes a small message wait behind more bulk data queued in it (1 MiB
    // gives the bandwidth of 4 MiB here, with a quarter of the wait). The
    // kernel doubles the figure, and caps it at its own maximum.
    let _ = sock.set_recv_buffer_size(1 << 20);
    let _ = sock.set_send_buffer_size(1 << 20);
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// The address of every interface of `ip`'s family (`0.0.0.0` or `::`).
pub(crate) fn unspecified_like(ip: std::net::IpAddr) -> std::net::IpAddr {
    if ip.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    }
}

/// Starts rank `credential.rank()` of a world whose ranks listen at
/// `addrs` (this rank on `socket`, bound to its own entry), and returns its
/// endpoint at once: connections to the peers are set up in the
/// background (sends wait for them; see
/// [`Endpoint::connected`](mpx_core::Endpoint::connected)). A peer that
/// cannot be reached within [`Options::connect_timeout`] fails (a lower
/// rank this rank dials, or a higher rank that has not dialled it by
/// then), and so does a peer whose connection closes, however it closes.
///
/// Must be called within a tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// use mpx_net::quic::{bind, start, JobCredential, Options};
/// // Two ranks of one job, both in this process for the example.
/// let sockets = [bind("127.0.0.1:0".parse().unwrap()).unwrap(), bind("127.0.0.1:0".parse().unwrap()).unwrap()];
/// let addrs: Vec<_> = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
/// let job = JobCredential::generate(1)?;
/// let [s0, s1] = sockets;
/// let zero = start(s0, &addrs, job.issue(0)?, &Options::local())?;
/// let one = start(s1, &addrs, job.issue(1)?, &Options::local())?;
/// let (sent, got) = tokio::join!(zero.world().send(&[1.5f64, 2.5], 1, 0), one.world().recv::<[f64; 2]>(0, 0));
/// sent?;
/// assert_eq!(got?.0, [1.5, 2.5]);
/// # Ok(()) }
/// ```
pub fn start(socket: UdpSocket, addrs: &[SocketAddr], credential: RankCredential, options: &Options) -> Result<Endpoint> {
    let me = credential.rank();
    let size = u32::try_from(addrs.len()).map_err(|_| ErrorKind::InvalidArgument("too many ranks".into()))?;
    if me >= size {
        return Err(ErrorKind::InvalidRank { rank: me as usize, size: size as usize }.into());
    }
    let bulk_thread_on = options.bulk_connection && options.bulk_thread && size > 1;
    // Configurations for each socket's connections: dialled (client) and
    // accepted (server). A connection this rank accepts may send it little
    // until its setup is over (see `connection::accept_loop`);
    // `connection::run` opens the window.
    let configs = |control: bool| -> Result<(quinn::ClientConfig, quinn::ServerConfig)> {
        let transport = || match control {
            true => options.control_transport(bulk_thread_on),
            false => options.transport(),
        };
        let mut setup = transport()?;
        setup.receive_window(quinn::VarInt::from_u32(connection::SETUP_RECEIVE_WINDOW));
        let mut server = credential.server_config()?;
        server.transport_config(Arc::new(setup));
        let mut client = credential.client_config()?;
        client.transport_config(Arc::new(transport()?));
        Ok((client, server))
    };
    let (client, server) = configs(true)?;
    let (bulk_client, bulk_server) = configs(false)?;
    let mut endpoint_config = quinn::EndpointConfig::default();
    endpoint_config
        .max_udp_payload_size(options.mtu.max(1200))
        .map_err(|e| ErrorKind::InvalidArgument(format!("mtu {}: {e}", options.mtu)))?;
    let runtime = quinn::default_runtime().ok_or_else(|| ErrorKind::InvalidArgument("no tokio runtime".into()))?;
    let accepts = me + 1 < size;
    let bulk_thread = bulk_thread_on.then(|| BulkThread::start(credential.job(), me)).transpose()?;
    let bulk = if options.bulk_connection && size > 1 {
        let own = socket.local_addr().map_err(|e| Error::transport("reading the socket's address", e))?;
        // Never at a port a rank listens at (by hand, ranks of one host
        // may share a range with their own ports in it).
        let listening: Vec<u16> = addrs.iter().map(SocketAddr::port).collect();
        let bulk_socket = options.bulk_ports.bind_excluding(own.ip(), &listening, None)?;
        let bulk_runtime = match &bulk_thread {
            Some(thread) => thread.quinn_runtime(),
            None => runtime.clone(),
        };
        let bulk = quinn::Endpoint::new(endpoint_config.clone(), accepts.then_some(bulk_server), bulk_socket, bulk_runtime)
            .map_err(|e| Error::transport("opening the bulk QUIC endpoint", e))?;
        Some(bulk)
    } else {
        None
    };
    // The highest rank dials every peer and accepts none: with no server
    // configuration, quinn drops a connection attempt (it times out at
    // the client) rather than queue it for an accept that never comes.
    let quic = quinn::Endpoint::new(endpoint_config, accepts.then_some(server), socket, runtime)
        .map_err(|e| Error::transport("opening the QUIC endpoint", e))?;
    let outboxes: Arc<Vec<Arc<Outbox>>> = Arc::new((0..size).map(|_| Arc::new(Outbox::default())).collect());
    let inlets: Arc<Vec<Arc<Inlet>>> = Arc::new((0..size).map(|_| Arc::new(Inlet::default())).collect());
    let quics: Vec<quinn::Endpoint> = std::iter::once(quic.clone()).chain(bulk.clone()).collect();
    let transport = QuicTransport {
        me,
        outboxes: outboxes.clone(),
        inlets: inlets.clone(),
        quic: quics.clone(),
        closing: Default::default(),
        linger: options.idle_timeout,
        linger_timer: Default::default(),
    };
    let endpoint = Endpoint::new(me as usize, size as usize, options.engine, transport)?;
    let registry = Arc::new(Registry::default());
    let shared = Arc::new(Shared {
        me,
        size,
        endpoint: endpoint.downgrade(),
        outboxes,
        inlets,
        credential,
        client,
        bulk_client,
        max_payload: options.engine.max_payload(),
        registry: Arc::downgrade(&registry),
        connect_timeout: options.connect_timeout,
        idle_timeout: options.idle_timeout,
        connected: Mutex::new(vec![false; size as usize]),
        bulk_port: bulk_port(&bulk)?,
        bulk: bulk.clone(),
        bulk_arrivals: BulkArrivals::new(size),
        max_handshakes: Shared::max_handshakes(size),
        receive_window: options.receive_window(),
        bulk_thread: bulk_thread.as_ref().map(BulkThread::handle),
    });
    if accepts {
        spawn_in(&shared.registry, connection::accept_loop(quic.clone(), shared.clone(), Socket::Control));
        if let Some(bulk) = bulk {
            spawn_in(&shared.registry, connection::accept_loop(bulk, shared.clone(), Socket::Bulk));
        }
        spawn_in(&shared.registry, connection::fail_unconnected(shared.clone()));
    }
    for (peer, &addr) in addrs.iter().enumerate().take(me as usize) {
        spawn_in(&shared.registry, connection::dial(shared.clone(), quic.clone(), peer as u32, addr));
    }
    // The endpoint owns its driver: the tasks and the QUIC endpoints end
    // with it.
    endpoint.own(registry);
    endpoint.own(quics);
    // Last: its runtime drops whatever still runs on it (the bulk
    // connections' drivers, closed by then after a finalize), without
    // waiting.
    if let Some(thread) = bulk_thread {
        endpoint.own(thread);
    }
    Ok(endpoint)
}

/// The port of a rank's bulk socket, 0 if it has none.
fn bulk_port(bulk: &Option<quinn::Endpoint>) -> Result<u16> {
    match bulk {
        Some(endpoint) => Ok(endpoint.local_addr().map_err(|e| Error::transport("reading the bulk socket's address", e))?.port()),
        None => Ok(0),
    }
}

/// Runs `f` once per rank, `ranks` ranks in this process, each over its own
/// QUIC endpoint on 127.0.0.1 with a credential of a new job: the same
/// contract as [`loopback::launch`](crate::loopback::launch), with every
/// frame through QUIC, TLS and UDP.
///
/// # Cancel safety
/// Dropping the returned future aborts every task it started.
pub async fn launch<F, Fut, R>(ranks: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Fut,
    Fut: std::future::Future<Output = Result<R>> + Send + 'static,
    R: Send + 'static,
{
    launch_with(ranks, Options::local(), f).await
}

/// [`launch`] with explicit [`Options`].
///
/// # Cancel safety
/// As [`launch`].
pub async fn launch_with<F, Fut, R>(ranks: usize, options: Options, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Fut,
    Fut: std::future::Future<Output = Result<R>> + Send + 'static,
    R: Send + 'static,
{
    if ranks == 0 || ranks > u32::MAX as usize {
        return Err(ErrorKind::InvalidArgument(format!("cannot launch {ranks} ranks")).into());
    }
    let localhost: SocketAddr = ([127, 0, 0, 1], 0).into();
    let sockets: Vec<UdpSocket> = (0..ranks)
        .map(|_| bind(localhost))
        .collect::<std::io::Result<_>>()
        .map_err(|e| Error::transport("binding a UDP socket", e))?;
    let addrs: Vec<SocketAddr> = sockets
        .iter()
        .map(UdpSocket::local_addr)
        .collect::<std::io::Result<_>>()
        .map_err(|e| Error::transport("binding a UDP socket", e))?;
    let job = JobCredential::generate(options.engine.job)?;
    let endpoints: Vec<Endpoint> = sockets
        .into_iter()
        .enumerate()
        .map(|(rank, socket)| start(socket, &addrs, job.issue(rank as u32)?, &options))
        .collect::<Result<_>>()?;
    crate::run::run_ranks(endpoints, crate::run::Tasks(Vec::new()), crate::run::HELLO_TIMEOUT.max(options.connect_timeout), f).await
}

/// The environment variables [`start_from_env`] reads.
pub mod env {
    /// This process's rank.
    pub const RANK: &str = "MPX_RANK";
    /// Every rank's address (`host:port`), comma-separated, in rank order.
    pub const ADDRS: &str = "MPX_ADDRS";
    /// This rank's credential, read the same way however the rank was
    /// started (by hand, or under a launcher that makes none of its own):
    /// the PEM text itself (see
    /// [`RankCredential::to_pem`](super::RankCredential::to_pem)), which a
    /// value starting with `#` or `-----BEGIN` is taken to be; any other
    /// value is the path of a file holding it (of at most 64 KiB), such as
    /// the `rank-<r>.pem` files `mpx-credential` writes. Under a PMI
    /// launcher, `-` means the PEM text comes on standard input (how
    /// `mpxrun` hands one to a rank on another host).
    pub const CREDENTIAL: &str = "MPX_CREDENTIAL";
    /// The UDP ports this rank's sockets may take, if set, as a
    /// [`PortRange`](super::PortRange) (`7000:7099`): for a rank behind a
    /// firewall. A rank started by hand takes its bulk socket's port from
    /// it ([`Options::bulk_ports`](super::Options::bulk_ports); its own
    /// port is its entry of `MPX_ADDRS`); under a launcher, both sockets
    /// of every rank take theirs from it. Set but blank, it counts as not
    /// set.
    pub const PORT_RANGE: &str = "MPX_PORT_RANGE";
}

/// The credential PEM text a value of `MPX_CREDENTIAL` gives: the value
/// itself, or the file it names (see [`env::CREDENTIAL`]).
pub(crate) fn credential_text(value: &str) -> Result<String> {
    use std::io::Read;
    // A credential is a few kilobytes: a larger file is not one.
    const LONGEST: u64 = 64 << 10;
    let start = value.trim_start();
    if start.starts_with('#') || start.starts_with("-----BEGIN") {
        return Ok(value.to_string());
    }
    let bad = |why: String| -> Error { ErrorKind::InvalidArgument(format!("{}: {value}: {why}", env::CREDENTIAL)).into() };
    // Opened without waiting: a FIFO no process writes to would hold the
    // open for ever. Read with waiting, so that a pipe being written (a
    // shell's `<(...)`) gives what is written, and one nobody writes to
    // ends at once, empty.
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(value).map_err(|e| bad(e.to_string()))?
    };
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns, with flags
        // read from it: no memory is involved.
        let cleared = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
        };
        if !cleared {
            return Err(bad(std::io::Error::last_os_error().to_string()));
        }
    }
    let mut text = String::new();
    file.take(LONGEST + 1).read_to_string(&mut text).map_err(|e| bad(e.to_string()))?;
    if text.len() as u64 > LONGEST {
        return Err(bad(format!("larger than {LONGEST} bytes, not a credential")));
    }
    Ok(text)
}

/// `options` with the bulk socket's ports from `MPX_PORT_RANGE`, if set.
pub(crate) fn with_port_range_from_env(options: &Options) -> Result<Options> {
    match port_range_from_env()? {
        Some(ports) => Ok(Options { bulk_ports: ports, ..*options }),
        None => Ok(*options),
    }
}

/// The range `MPX_PORT_RANGE` gives, if it is set.
pub(crate) fn port_range_from_env() -> Result<Option<PortRange>> {
    match std::env::var(env::PORT_RANGE) {
        Ok(range) if !range.trim().is_empty() => {
            range.parse().map(Some).map_err(|e| ErrorKind::InvalidArgument(format!("{}: {e}", env::PORT_RANGE)).into())
        }
        Err(std::env::VarError::NotUnicode(v)) => Err(ErrorKind::InvalidArgument(format!("{}: {v:?} is no range", env::PORT_RANGE)).into()),
        _ => Ok(None),
    }
}

/// Starts this process's rank from the environment ([`env`](mod@env)): its rank,
/// every rank's address, its credential, and, if `MPX_PORT_RANGE` is set,
/// the ports its bulk socket may take (replacing `options.bulk_ports`); `Ok(None)` when `MPX_RANK`
/// is not set (the process was not started as a rank). The rank listens on
/// its own address's port on every interface of its family.
///
/// Must be called within a tokio runtime.
///
/// ```no_run
/// # #[tokio::main]
/// # async fn main() -> mpx_core::Result<()> {
/// let options = mpx_net::quic::Options::network();
/// if let Some(endpoint) = mpx_net::quic::start_from_env(&options)? {
///     let world = endpoint.world();
///     println!("rank {} of {}", world.rank(), world.size());
///     endpoint.finalize().await?;
/// }
/// # Ok(()) }
/// ```
pub fn start_from_env(options: &Options) -> Result<Option<Endpoint>> {
    start_from_env_with(options, |options, _| options)
}

/// [`start_from_env`], with the options `choose` makes of `options` (its
/// bulk ports from `MPX_PORT_RANGE` already) and every rank's address.
pub(crate) fn start_from_env_with(options: &Options, choose: impl FnOnce(Options, &[SocketAddr]) -> Options) -> Result<Option<Endpoint>> {
    let bad = |what: &str, why: String| -> Error { ErrorKind::InvalidArgument(format!("{what}: {why}")).into() };
    let Ok(rank) = std::env::var(env::RANK) else { return Ok(None) };
    let rank: u32 = rank.trim().parse().map_err(|e| bad(env::RANK, format!("{rank:?}: {e}")))?;
    let addrs = std::env::var(env::ADDRS).map_err(|e| bad(env::ADDRS, e.to_string()))?;
    let addrs: Vec<SocketAddr> = addrs
        .split(',')
        .map(|a| {
            use std::net::ToSocketAddrs;
            a.trim().to_socket_addrs().ok().and_then(|mut all| all.next()).ok_or_else(|| bad(env::ADDRS, format!("{a:?} is no address")))
        })
        .collect::<Result<_>>()?;
    let own = *addrs.get(rank as usize).ok_or(ErrorKind::InvalidRank { rank: rank as usize, size: addrs.len() })?;
    let credential = std::env::var(env::CREDENTIAL).map_err(|e| bad(env::CREDENTIAL, e.to_string()))?;
    let credential = RankCredential::from_pem(&credential_text(&credential)?)?;
    if credential.rank() != rank {
        return Err(bad(env::CREDENTIAL, format!("it is rank {}'s, not rank {rank}'s", credential.rank())));
    }
    let options = choose(with_port_range_from_env(options)?, &addrs);
    let socket = bind((unspecified_like(own.ip()), own.port()).into()).map_err(|e| Error::transport(format!("binding port {}", own.port()), e))?;
    start(socket, &addrs, credential, &options).map(Some)
}
