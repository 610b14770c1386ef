//! The raw-quinn twin of mpx's `examples/quic_bench.rs`: the same figures,
//! measured the same way, with quinn alone.
//!
//! Two endpoints on 127.0.0.1 with mpx's `Options::local()` transport
//! settings (MTU 6550 fixed, discovery off, stream window 16 MiB,
//! connection window 64 MiB, send window 64 MiB, Cubic starting at 10 ×
//! MTU, idle timeout 10 s with keep-alives every 2.5 s, 1 MiB socket
//! buffers on both sides). Rank 0 (the server) opens two streams to rank 1
//! (the client): a bidirectional one for 8-byte messages both ways, and a
//! unidirectional one for bulk data, like mpx's control and bulk streams.
//!
//! - `latency`: 8-byte ping-pong on the bidirectional stream, one-way =
//!   round trip / 2, 2,000 round trips a round.
//! - `bandwidth`: 1 MiB, 16 MiB, 256 MiB messages on the bulk stream, one in
//!   flight: an owned `Vec` (copied from a source buffer, untimed) handed
//!   to quinn as `Bytes` without a copy, read with `read_exact` into a
//!   buffer of the message's size, then an 8-byte ack back on the other
//!   stream; bytes over the time from the write to the ack.
//! - `latency_during_bulk`: the ping-pong while 256 MiB go on the bulk
//!   stream, until rank 1 has read them all (it then answers `STOP`), beside
//!   the idle latency.
//!
//! `procs` 1: both endpoints in one multi_thread runtime with two workers,
//! each rank a task. `procs` 2: this binary runs itself again as rank 1 (the
//! server's address and certificate in environment variables), with the
//! same runtime in each process. The lines are the same as mpx's, with
//! `"impl":"quinn"`.
use bytes::Bytes;
use quinn::{ClientConfig, Connection, Endpoint, EndpointConfig, RecvStream, SendStream, ServerConfig, TransportConfig, VarInt};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::{
    net::{Ipv4Addr, SocketAddr, UdpSocket},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use crate::{E, R};

/// Set in the second process: the server's address.
const CHILD_ADDR: &str = "QUINN_RAW_TWIN_ADDR";
/// The server's certificate (DER, hex), for the second process to trust.
const CHILD_CERT: &str = "QUINN_RAW_TWIN_CERT";

const MTU: u16 = 6550;
const MIB: usize = 1 << 20;
const LAT_ITERS: usize = 2_000;
const WARMUP_ITERS: usize = 1_000;
/// Message size and messages per round (as mpx's bench).
const BANDWIDTH: [(usize, usize); 3] = [(MIB, 32), (16 * MIB, 4), (256 * MIB, 1)];
const BULK: usize = 256 * MIB;
const STOP: u64 = u64::MAX;

/// mpx's `Options::local()` transport, as `Options::transport` builds it.
fn transport() -> TransportConfig {
    let mut t = TransportConfig::default();
    t.stream_receive_window(VarInt::from_u32(16 << 20));
    t.receive_window(VarInt::from_u32(64 << 20));
    t.send_window(64 << 20);
    t.max_idle_timeout(Some(quinn::IdleTimeout::try_from(Duration::from_secs(10)).unwrap()));
    t.keep_alive_interval(Some(Duration::from_millis(2500)));
    t.initial_mtu(MTU);
    t.min_mtu(MTU);
    t.mtu_discovery_config(None);
    let mut cubic = quinn::congestion::CubicConfig::default();
    cubic.initial_window(10 * u64::from(MTU));
    t.congestion_controller_factory(Arc::new(cubic));
    t
}

/// A UDP socket on 127.0.0.1 with 1 MiB buffers (mpx's `quic::bind`).
fn bind(port: u16) -> R<UdpSocket> {
    let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, port))?;
    let s = socket2::SockRef::from(&sock);
    s.set_recv_buffer_size(MIB)?;
    s.set_send_buffer_size(MIB)?;
    Ok(sock)
}

fn endpoint(sock: UdpSocket, server: Option<ServerConfig>) -> R<Endpoint> {
    let mut ec = EndpointConfig::default();
    ec.max_udp_payload_size(MTU)?;
    Ok(Endpoint::new(ec, server, sock, Arc::new(quinn::TokioRuntime))?)
}

fn server_config() -> R<(ServerConfig, CertificateDer<'static>)> {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    let cert: CertificateDer<'static> = ck.cert.der().clone();
    let key = PrivateKeyDer::from(ck.signing_key);
    let mut sc = ServerConfig::with_single_cert(vec![cert.clone()], key)?;
    sc.transport_config(Arc::new(transport()));
    Ok((sc, cert))
}

fn client_config(cert: CertificateDer<'static>) -> R<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    let mut cc = ClientConfig::with_root_certificates(Arc::new(roots))?;
    cc.transport_config(Arc::new(transport()));
    Ok(cc)
}

/// One side's streams: the 8-byte stream both ways, and the bulk stream
/// (rank 0 writes it, rank 1 reads it).
struct Streams {
    tx: SendStream,
    rx: RecvStream,
    bulk_tx: Option<SendStream>,
    bulk_rx: Option<RecvStream>,
}

/// Rank 0 opens both streams, each led by a byte (as mpx's lane byte) so
/// that rank 1 sees them at once.
async fn open(conn: &Connection) -> R<Streams> {
    let (mut tx, mut rx) = conn.open_bi().await?;
    tx.write_all(&[0]).await?;
    let mut bulk = conn.open_uni().await?;
    bulk.write_all(&[1]).await?;
    rx.read_exact(&mut [0u8; 1]).await?;
    Ok(Streams { tx, rx, bulk_tx: Some(bulk), bulk_rx: None })
}

async fn accept(conn: &Connection) -> R<Streams> {
    let (mut tx, mut rx) = conn.accept_bi().await?;
    rx.read_exact(&mut [0u8; 1]).await?;
    let mut bulk = conn.accept_uni().await?;
    bulk.read_exact(&mut [0u8; 1]).await?;
    tx.write_all(&[0]).await?;
    Ok(Streams { tx, rx, bulk_tx: None, bulk_rx: Some(bulk) })
}

/// Rank 0's measurements, one entry per round (as in mpx's bench).
#[derive(Default)]
struct Rounds {
    latency: Vec<f64>,
    bandwidth: Vec<Vec<f64>>,
    during_bulk: Vec<(f64, usize, f64)>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

async fn pingpong(rank: usize, s: &mut Streams, iters: usize) -> R<f64> {
    let mut got = [0u8; 8];
    let start = Instant::now();
    for i in 0..iters as u64 {
        if rank == 0 {
            s.tx.write_all(&i.to_le_bytes()).await?;
            s.rx.read_exact(&mut got).await?;
        } else {
            s.rx.read_exact(&mut got).await?;
            s.tx.write_all(&got).await?;
        }
    }
    Ok(start.elapsed().as_secs_f64() / (2 * iters) as f64)
}

async fn bandwidth(rank: usize, s: &mut Streams, source: &[u8], buf: &mut [u8], len: usize, msgs: usize) -> R<f64> {
    let mut ack = [0u8; 8];
    let mut total = Duration::ZERO;
    for _ in 0..msgs {
        if rank == 0 {
            let data = Bytes::from(source[..len].to_vec());
            let start = Instant::now();
            s.bulk_tx.as_mut().unwrap().write_chunk(data).await?;
            s.rx.read_exact(&mut ack).await?;
            total += start.elapsed();
        } else {
            s.bulk_rx.as_mut().unwrap().read_exact(&mut buf[..len]).await?;
            s.tx.write_all(&ack).await?;
        }
    }
    Ok(total.as_secs_f64())
}

async fn during_bulk(rank: usize, s: &mut Streams, source: &[u8], buf: &mut Vec<u8>) -> R<(f64, usize, f64)> {
    let mut got = [0u8; 8];
    if rank == 0 {
        let data = Bytes::from(source[..BULK].to_vec());
        let start = Instant::now();
        let mut bulk = s.bulk_tx.take().unwrap();
        let writer = tokio::spawn(async move {
            bulk.write_chunk(data).await?;
            Ok::<_, E>(bulk)
        });
        let mut samples = Vec::new();
        for i in 0u64.. {
            let ping = Instant::now();
            s.tx.write_all(&i.to_le_bytes()).await?;
            s.rx.read_exact(&mut got).await?;
            if u64::from_le_bytes(got) == STOP {
                break;
            }
            samples.push(ping.elapsed().as_secs_f64() / 2.0);
        }
        let transfer = start.elapsed().as_secs_f64();
        s.bulk_tx = Some(writer.await??);
        let one_way = if samples.is_empty() { f64::NAN } else { median(&samples) };
        Ok((one_way, samples.len(), transfer))
    } else {
        let done = Arc::new(AtomicBool::new(false));
        let mut bulk = s.bulk_rx.take().unwrap();
        let mut data = std::mem::take(buf);
        let flag = done.clone();
        let reader = tokio::spawn(async move {
            bulk.read_exact(&mut data[..BULK]).await?;
            flag.store(true, Ordering::Release);
            Ok::<_, E>((bulk, data))
        });
        loop {
            s.rx.read_exact(&mut got).await?;
            let answer = if done.load(Ordering::Acquire) { STOP.to_le_bytes() } else { got };
            s.tx.write_all(&answer).await?;
            if answer == STOP.to_le_bytes() {
                break;
            }
        }
        let (bulk, data) = reader.await??;
        s.bulk_rx = Some(bulk);
        *buf = data;
        Ok((0.0, 0, 0.0))
    }
}

/// Both ranks' program, as mpx's `bench`: rank 0 times it.
async fn bench(rank: usize, conn: Connection, rounds: usize) -> R<Rounds> {
    let mut s = if rank == 0 { open(&conn).await? } else { accept(&conn).await? };
    let (source, mut buf) = if rank == 0 { (vec![0x5au8; BULK], Vec::new()) } else { (Vec::new(), vec![0u8; BULK]) };
    let mut out = Rounds::default();
    pingpong(rank, &mut s, WARMUP_ITERS).await?;
    for _ in 0..rounds {
        out.latency.push(pingpong(rank, &mut s, LAT_ITERS).await?);
    }
    bandwidth(rank, &mut s, &source, &mut buf, 16 * MIB, 1).await?; // warm-up
    for &(len, msgs) in &BANDWIDTH {
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            times.push(bandwidth(rank, &mut s, &source, &mut buf, len, msgs).await?);
        }
        out.bandwidth.push(times);
    }
    for _ in 0..rounds {
        out.during_bulk.push(during_bulk(rank, &mut s, &source, &mut buf).await?);
    }
    if rank == 1 {
        assert!(buf.iter().all(|&b| b == 0x5a), "the data arrived intact");
    }
    // Rank 0 closes once rank 1 has said it is done.
    if rank == 0 {
        s.rx.read_exact(&mut [0u8; 1]).await?;
        conn.close(0u32.into(), b"done");
    } else {
        s.tx.write_all(&[0]).await?;
        conn.closed().await;
    }
    Ok(out)
}

/// The JSON lines of rank 0's rounds: mpx's, with `"impl":"quinn"`.
fn report(procs: usize, r: &Rounds) {
    let head = format!("\"bench\":\"quic\",\"impl\":\"quinn\",\"procs\":{procs}");
    let us: Vec<f64> = r.latency.iter().map(|s| s * 1e6).collect();
    let idle = median(&us);
    let (lo, hi) = min_max(&us);
    println!(
        "{{{head},\"test\":\"latency\",\"bytes\":8,\"one_way_us\":{idle:.3},\"min_us\":{lo:.3},\"max_us\":{hi:.3},\"iters\":{LAT_ITERS},\"rounds\":{}}}",
        us.len()
    );
    for (&(len, msgs), times) in BANDWIDTH.iter().zip(&r.bandwidth) {
        let gbps: Vec<f64> = times.iter().map(|t| (len * msgs) as f64 / t / 1e9).collect();
        let (lo, hi) = min_max(&gbps);
        println!(
            "{{{head},\"test\":\"bandwidth\",\"bytes\":{len},\"msgs\":{msgs},\"gb_per_s\":{:.3},\"min\":{lo:.3},\"max\":{hi:.3},\"rounds\":{}}}",
            median(&gbps),
            gbps.len()
        );
    }
    let us: Vec<f64> = r.during_bulk.iter().map(|d| d.0 * 1e6).collect();
    let pings: Vec<f64> = r.during_bulk.iter().map(|d| d.1 as f64).collect();
    let gbps: Vec<f64> = r.during_bulk.iter().map(|d| BULK as f64 / d.2 / 1e9).collect();
    let (lo, hi) = min_max(&us);
    let busy = median(&us);
    println!(
        "{{{head},\"test\":\"latency_during_bulk\",\"bytes\":8,\"bulk_bytes\":{BULK},\"one_way_us\":{busy:.3},\"min_us\":{lo:.3},\"max_us\":{hi:.3},\"idle_one_way_us\":{idle:.3},\"vs_idle\":{:.2},\"pings\":{},\"bulk_gb_per_s\":{:.3},\"rounds\":{}}}",
        busy / idle,
        median(&pings),
        median(&gbps),
        us.len()
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> R<Vec<u8>> {
    (0..s.len()).step_by(2).map(|i| Ok(u8::from_str_radix(s.get(i..i + 2).ok_or("odd hex")?, 16)?)).collect()
}

fn runtime() -> R<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// Rank 0: accepts rank 1's connection on `sock` and runs the bench.
async fn rank0(sock: UdpSocket, sc: ServerConfig, rounds: usize) -> R<Rounds> {
    let ep = endpoint(sock, Some(sc))?;
    let incoming = tokio::time::timeout(Duration::from_secs(30), ep.accept()).await?.ok_or("no connection")?;
    let conn = incoming.await?;
    let out = bench(0, conn, rounds).await?;
    ep.wait_idle().await;
    Ok(out)
}

/// Rank 1: dials rank 0 at `addr` and runs the bench.
async fn rank1(addr: SocketAddr, cc: ClientConfig, rounds: usize) -> R<()> {
    let ep = endpoint(bind(0)?, None)?;
    let conn = ep.connect_with(cc, addr, "localhost")?.await?;
    bench(1, conn, rounds).await?;
    ep.wait_idle().await;
    Ok(())
}

fn one_process(rounds: usize) -> R<()> {
    let (sc, cert) = server_config()?;
    let cc = client_config(cert)?;
    let sock = bind(0)?;
    let addr = sock.local_addr()?;
    let out = runtime()?.block_on(async move {
        let zero = tokio::spawn(rank0(sock, sc, rounds));
        let one = tokio::spawn(rank1(addr, cc, rounds));
        let out = zero.await??;
        one.await??;
        Ok::<_, E>(out)
    })?;
    report(1, &out);
    Ok(())
}

fn two_processes(rounds: usize) -> R<()> {
    let (sc, cert) = server_config()?;
    let sock = bind(0)?;
    let addr = sock.local_addr()?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["twin", &rounds.to_string()])
        .env(CHILD_ADDR, addr.to_string())
        .env(CHILD_CERT, hex(&cert))
        .stdout(std::process::Stdio::null())
        .spawn()?;
    let out: R<Rounds> = runtime()?.block_on(async move {
        let rank0 = tokio::spawn(rank0(sock, sc, rounds));
        tokio::time::timeout(Duration::from_secs(300), rank0).await??
    });
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            let _ = child.kill();
            return Err(e);
        }
    };
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("rank 1's process ended with {status}").into());
    }
    report(2, &out);
    Ok(())
}

/// `quinn-raw twin [rounds]`.
pub fn main(rounds: Option<&str>) -> R<()> {
    let rounds = rounds.and_then(|r| r.parse().ok()).unwrap_or(7usize).max(1);
    if let Ok(addr) = std::env::var(CHILD_ADDR) {
        let cert = CertificateDer::from(unhex(&std::env::var(CHILD_CERT)?)?);
        let cc = client_config(cert)?;
        return runtime()?.block_on(async move { tokio::spawn(rank1(addr.parse()?, cc, rounds)).await? });
    }
    one_process(rounds)?;
    two_processes(rounds)
}
