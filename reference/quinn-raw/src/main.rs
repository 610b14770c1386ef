//! quinn-raw: what quinn itself does over 127.0.0.1, client and server endpoints in one process.
//! Latency (8-byte messages, one-way = round trip / 2): ping-pong on ONE bidi stream; a new bidi
//! stream per message (request/response); a new uni stream per message each way. Plus raw-UDP
//! floors (two OS threads, no quinn/tokio/crypto): blocking sockets, and busy-polled sockets.
//! Bulk: 256 MiB in 1 MiB write_all()s on 1 uni stream, and split over 4 parallel uni streams,
//! timed until the server has read every byte; default vs tuned configs (see CONFIGS).
//! Runtime flavors: "ct2" = one current_thread runtime per endpoint, each on its own OS thread;
//! "mt" = one multi_thread runtime (worker count = nproc) hosting both endpoints.
//! Output: JSON lines on stdout and in results.txt next to Cargo.toml. Env ONLY=<substring of
//! "flavor/config"> runs a subset (results.txt then holds only that subset).
//!
//! `quinn-raw twin [rounds]` runs instead the twin of mpx's `examples/quic_bench.rs` (see
//! src/twin.rs): the same figures with mpx's `Options::local()` settings, in one process and in
//! two, as the same JSON lines on stdout.
use quinn::{ClientConfig, Connection, Endpoint, EndpointConfig, ServerConfig, TransportConfig, VarInt};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::{net::{Ipv4Addr, SocketAddr, UdpSocket}, sync::Arc, time::Instant};

mod twin;

type E = Box<dyn std::error::Error + Send + Sync>;
type R<T> = Result<T, E>;

const MIB: usize = 1 << 20;
static CHUNK: [u8; MIB] = [0x5a; MIB]; // one 1 MiB write
const LAT_MSGS: usize = 20_000;
const LAT_TRIALS: usize = 15;
const LAT_TESTS: [&str; 3] = ["pingpong_one_bidi_stream", "new_bidi_stream_per_msg", "new_uni_stream_per_msg_each_way"];
const BULK_BYTES: usize = 256 * MIB;
const BULK_TRIALS: usize = 15;

#[derive(Clone, Copy)]
struct Cfg { name: &'static str, tuned: bool, mtu: u16, gso: bool, sockbuf: Option<usize> }
const CONFIGS: [Cfg; 5] = [
    // quinn defaults: stream window 1.25 MB, conn window unlimited, send window 10 MB, MTU 1200 -> PLPMTUD up to 1452.
    Cfg { name: "default", tuned: false, mtu: 0, gso: true, sockbuf: None },
    Cfg { name: "default+sockbuf4MiB", tuned: false, mtu: 0, gso: true, sockbuf: Some(4 * MIB) },
    // 6550 = largest MTU that works with GSO on: quinn batches up to 10 segments per sendmsg, Linux rejects
    // a GSO send over 65507 B with EMSGSIZE, and quinn-udp silently swallows EMSGSIZE, so every full
    // batch is lost and retransmits fail the same way: at MTU 8192 (or 6551) the transfer stalls forever.
    Cfg { name: "tuned_mtu6550", tuned: true, mtu: 6550, gso: true, sockbuf: None },
    Cfg { name: "tuned_mtu6550+sockbuf4MiB", tuned: true, mtu: 6550, gso: true, sockbuf: Some(4 * MIB) },
    // Bigger datagrams need GSO off; MTU 16420 works, 16450+ panics in quinn-proto (packet.rs:486,
    // `len < 2usize.pow(14)`: a handshake (long-header) packet may grow to the MTU, but its Length field
    // is reserved as 2 bytes).
    Cfg { name: "tuned_mtu16384_nogso", tuned: true, mtu: 16384, gso: false, sockbuf: None },
];

fn transport(c: Cfg) -> TransportConfig {
    let mut t = TransportConfig::default();
    if c.tuned {
        let mut cubic = quinn::congestion::CubicConfig::default();
        // Cubic's initial window is a fixed 14720 B and a packet goes out only if in_flight + MTU < cwnd:
        // at MTU >= 14720 not even the handshake is sent (silent hang). Scale it with the MTU.
        cubic.initial_window(10 * c.mtu as u64);
        t.stream_receive_window(VarInt::from_u32(16 * MIB as u32))
            .receive_window(VarInt::from_u32(64 * MIB as u32))
            .send_window(64 * MIB as u64)
            .initial_mtu(c.mtu) // UDP payload bytes; capped by the PEER's EndpointConfig::max_udp_payload_size
            .min_mtu(c.mtu)
            .mtu_discovery_config(None) // fixed MTU, no probing
            .enable_segmentation_offload(c.gso)
            .congestion_controller_factory(Arc::new(cubic));
    }
    t
}

fn endpoint(c: Cfg, server: Option<ServerConfig>) -> R<Endpoint> {
    let mut ec = EndpointConfig::default();
    // Sent as the max_udp_payload_size transport parameter (default 1472) and sizes the receive buffers:
    // without it on BOTH endpoints the path MTU is silently clamped to 1472.
    if c.tuned { ec.max_udp_payload_size(c.mtu)?; }
    let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    if let Some(b) = c.sockbuf { // quinn leaves SO_RCVBUF/SO_SNDBUF at the OS default (212992 here)
        let s = socket2::SockRef::from(&sock);
        s.set_recv_buffer_size(b)?; // Linux caps at net.core.rmem_max, then doubles
        s.set_send_buffer_size(b)?;
    }
    Ok(Endpoint::new(ec, server, sock, Arc::new(quinn::TokioRuntime))?)
}

fn configs(c: Cfg) -> R<(ServerConfig, ClientConfig)> {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    let cert: CertificateDer<'static> = ck.cert.der().clone();
    let key = PrivateKeyDer::from(ck.signing_key); // rcgen 0.14: field is `signing_key` (0.13: `key_pair`)
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone())?;
    let t = Arc::new(transport(c));
    let mut sc = ServerConfig::with_single_cert(vec![cert], key)?; // passes quinn's provider (ring) explicitly
    sc.transport_config(t.clone());
    let mut cc = ClientConfig::with_root_certificates(Arc::new(roots))?;
    cc.transport_config(t);
    Ok((sc, cc))
}

/// Server: bidi stream = echo; uni stream = sink, then reply with the byte count (u64 LE) on a new uni stream.
async fn serve(ep: Endpoint) {
    let conn = ep.accept().await.expect("incoming").await.expect("handshake");
    let c = conn.clone();
    let uni = tokio::spawn(async move {
        while let Ok(mut rx) = c.accept_uni().await {
            let c = c.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while let Some(ch) = rx.read_chunk(usize::MAX, true).await.ok()? { n += ch.bytes.len() as u64; }
                let mut tx = c.open_uni().await.ok()?;
                tx.write_all(&n.to_le_bytes()).await.ok()?;
                tx.finish().ok()
            });
        }
    });
    while let Ok((mut tx, mut rx)) = conn.accept_bi().await {
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Some(n) = rx.read(&mut buf).await.ok()? { tx.write_all(&buf[..n]).await.ok()?; }
            tx.finish().ok()
        });
    }
    let _ = uni.await;
    ep.wait_idle().await;
}

/// One latency trial of `n` 8-byte round trips; returns one-way latency in µs.
async fn latency(conn: &Connection, test: &str, n: usize) -> R<f64> {
    let mut buf = [0u8; 8];
    let t = Instant::now();
    match test {
        "pingpong_one_bidi_stream" => {
            let (mut tx, mut rx) = conn.open_bi().await?;
            for i in 0..n as u64 { tx.write_all(&i.to_le_bytes()).await?; rx.read_exact(&mut buf).await?; }
            let dt = t.elapsed();
            tx.finish()?;
            rx.read_to_end(0).await?;
            return Ok(dt.as_secs_f64() * 1e6 / n as f64 / 2.0);
        }
        "new_bidi_stream_per_msg" => for i in 0..n as u64 {
            let (mut tx, mut rx) = conn.open_bi().await?;
            tx.write_all(&i.to_le_bytes()).await?;
            tx.finish()?;
            assert_eq!(rx.read_to_end(8).await?.len(), 8);
        },
        "new_uni_stream_per_msg_each_way" => for i in 0..n as u64 {
            let mut tx = conn.open_uni().await?;
            tx.write_all(&i.to_le_bytes()).await?;
            tx.finish()?;
            assert_eq!(conn.accept_uni().await?.read_to_end(8).await?, 8u64.to_le_bytes());
        },
        _ => unreachable!(),
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64 / 2.0)
}

/// One bulk trial: `total` bytes split over `streams` uni streams, timed until the server's byte-count
/// replies arrived (i.e. it has read everything). Returns GB/s (1e9 B/s).
async fn bulk(conn: &Connection, streams: usize, total: usize) -> R<f64> {
    let t = Instant::now();
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let conn = conn.clone();
        writers.spawn(async move {
            let mut tx = conn.open_uni().await?;
            for _ in 0..total / streams / MIB { tx.write_all(&CHUNK).await?; }
            tx.finish()?;
            Ok::<_, E>(())
        });
    }
    let mut got = 0u64;
    for _ in 0..streams {
        got += u64::from_le_bytes(conn.accept_uni().await?.read_to_end(8).await?.as_slice().try_into()?);
    }
    let dt = t.elapsed();
    while let Some(r) = writers.join_next().await { r??; }
    assert_eq!(got, total as u64);
    Ok(total as f64 / dt.as_secs_f64() / 1e9)
}

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    format!("\"median\":{:.3},\"min\":{:.3},\"max\":{:.3}", v[v.len() / 2], v[0], v[v.len() - 1])
}

async fn client(c: Cfg, cc: ClientConfig, addr: SocketAddr, tag: String) -> R<Vec<String>> {
    let ep = endpoint(c, None)?;
    let conn = ep.connect_with(cc, addr, "localhost")?.await?;
    for test in LAT_TESTS { latency(&conn, test, 2_000).await?; } // warm-up
    bulk(&conn, 1, 64 * MIB).await?;
    bulk(&conn, 4, 64 * MIB).await?;
    let mut out = Vec::new();
    let mut emit = |s: String| { println!("{s}"); out.push(s); };
    if c.name == "default" {
        for test in LAT_TESTS {
            let mut v = Vec::new();
            for _ in 0..LAT_TRIALS { v.push(latency(&conn, test, LAT_MSGS).await?); }
            emit(format!("{{{tag},\"test\":\"{test}\",\"msg_bytes\":8,\"msgs\":{LAT_MSGS},\"trials\":{LAT_TRIALS},\"unit\":\"one_way_us\",{}}}", stats(v)));
        }
    }
    for streams in [1, 4] {
        let before = conn.stats().path;
        let mut v = Vec::new();
        for _ in 0..BULK_TRIALS { v.push(bulk(&conn, streams, BULK_BYTES).await?); }
        let after = conn.stats().path;
        emit(format!(
            "{{{tag},\"test\":\"bulk_uni\",\"streams\":{streams},\"bytes\":{BULK_BYTES},\"write_bytes\":{MIB},\"trials\":{BULK_TRIALS},\"unit\":\"GBps\",{},\"path_mtu\":{},\"lost_packets\":{},\"congestion_events\":{}}}",
            stats(v), after.current_mtu, after.lost_packets - before.lost_packets, after.congestion_events - before.congestion_events));
    }
    conn.close(0u32.into(), b"done");
    ep.wait_idle().await;
    Ok(out)
}

fn suite(flavor: &str, c: Cfg) -> R<Vec<String>> {
    let (sc, cc) = configs(c)?;
    let tag = format!("\"flavor\":\"{flavor}\",\"config\":\"{}\"", c.name);
    if flavor == "ct2" {
        let (atx, arx) = std::sync::mpsc::channel();
        let server = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let ep = endpoint(c, Some(sc)).unwrap();
                atx.send(ep.local_addr().unwrap()).unwrap();
                serve(ep).await
            })
        });
        let addr = arx.recv()?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let out = rt.block_on(client(c, cc, addr, tag))?; // on error, don't wait for the server
        server.join().unwrap();
        Ok(out)
    } else {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(async move {
            let ep = endpoint(c, Some(sc))?;
            let addr = ep.local_addr()?;
            let server = tokio::spawn(serve(ep));
            let out = tokio::spawn(client(c, cc, addr, tag)).await??; // run on a worker, not the block_on thread
            server.await?;
            Ok(out)
        })
    }
}

/// Floors without quinn/tokio/crypto: 8-byte ping-pong over raw UDP between two OS threads, either
/// blocking (a sleep + wake-up per message) or busy-polling non-blocking sockets. Trial 0 = warm-up.
fn udp_floor(busy: bool) -> R<String> {
    fn recv(s: &UdpSocket, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match s.recv(buf) { Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(), r => return r }
        }
    }
    let (a, b) = (UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?, UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?);
    a.connect(b.local_addr()?)?;
    b.connect(a.local_addr()?)?;
    a.set_nonblocking(busy)?;
    b.set_nonblocking(busy)?;
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 8];
        for _ in 0..LAT_MSGS * (LAT_TRIALS + 1) { recv(&b, &mut buf).unwrap(); b.send(&buf).unwrap(); }
    });
    let (mut v, mut buf) = (Vec::new(), [0u8; 8]);
    for trial in 0..=LAT_TRIALS {
        let t = Instant::now();
        for i in 0..LAT_MSGS as u64 { a.send(&i.to_le_bytes())?; recv(&a, &mut buf)?; }
        if trial > 0 { v.push(t.elapsed().as_secs_f64() * 1e6 / LAT_MSGS as f64 / 2.0); }
    }
    echo.join().unwrap();
    let test = if busy { "udp_pingpong_busypoll" } else { "udp_pingpong_blocking" };
    Ok(format!("{{\"flavor\":\"os_threads\",\"config\":\"raw_udp_no_quic\",\"test\":\"{test}\",\"msg_bytes\":8,\"msgs\":{LAT_MSGS},\"trials\":{LAT_TRIALS},\"unit\":\"one_way_us\",{}}}", stats(v)))
}

fn main() -> R<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("twin") {
        return twin::main(args.get(2).map(String::as_str));
    }
    let only = std::env::var("ONLY").unwrap_or_default();
    let lock = include_str!("../Cargo.lock");
    let ver = |name: &str| {
        lock.split("[[package]]").find(|p| p.contains(&format!("name = \"{name}\"\n")))
            .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
            .map(|v| v.trim_end_matches('"').to_string()).unwrap_or_default()
    };
    let nproc = std::process::Command::new("nproc").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())?;
    let meta = format!(
        "{{\"meta\":\"quinn-raw loopback anchor\",\"quinn\":\"{}\",\"quinn-proto\":\"{}\",\"quinn-udp\":\"{}\",\"rustls\":\"{}\",\"ring\":\"{}\",\"rcgen\":\"{}\",\"tokio\":\"{}\",\"crypto_provider\":\"ring\",\"nproc\":{nproc},\"tuned\":\"stream_receive_window=16MiB receive_window=64MiB send_window=64MiB initial_mtu=min_mtu=EndpointConfig.max_udp_payload_size=MTU mtu_discovery=off cubic.initial_window=10*MTU\",\"sockbuf\":\"SO_RCVBUF=SO_SNDBUF=4MiB requested (kernel reports 8MiB)\"}}",
        ver("quinn"), ver("quinn-proto"), ver("quinn-udp"), ver("rustls"), ver("ring"), ver("rcgen"), ver("tokio"));
    println!("{meta}");
    let mut lines = vec![meta];
    if "os_threads/raw_udp_no_quic".contains(&only) {
        for busy in [false, true] {
            let l = udp_floor(busy)?;
            println!("{l}");
            lines.push(l);
        }
    }
    for flavor in ["ct2", "mt"] {
        for c in CONFIGS {
            if format!("{flavor}/{}", c.name).contains(&only) { lines.extend(suite(flavor, c)?); }
        }
    }
    std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/results.txt"), lines.join("\n") + "\n")?;
    Ok(())
}
