//! Latency and bandwidth between two ranks over QUIC on 127.0.0.1, in one
//! process and in two.
//!
//! ```text
//! cargo run --release --example quic_bench [rounds] [event_interval] [bulk_thread]
//! ```
//!
//! Prints one JSON line per figure, the median over `rounds` (default 7)
//! rounds, with the lowest and highest round. `event_interval` sets
//! tokio's [`event_interval`](tokio::runtime::Builder::event_interval) of
//! the runtimes (`default`: tokio's, 61): how many tasks a busy worker runs
//! between two looks at the sockets, which is what a small message waited
//! for during a transfer that kept both workers busy, before the transfer
//! had a thread of its own (see docs/PERFORMANCE.md, "QUIC"). `bulk_thread`
//! `off` runs the bulk connections on the program's runtime
//! ([`Options::bulk_thread`](mpx::quic::Options::bulk_thread) false). The
//! figures:
//!
//! - `latency`: one-way time of an 8-byte message in a send/recv ping-pong
//!   (round trip / 2, over 2,000 round trips a round);
//! - `bandwidth`: 1 MiB, 16 MiB and 256 MiB messages with one in flight: an
//!   owned `Vec` sent, received with `recv_into` into a buffer of the
//!   message's size, then an 8-byte ack back; bytes over the time from the
//!   send to the ack (the copy of the `Vec` made for each send is not
//!   timed);
//! - `latency_during_bulk`: 8-byte ping-pong on another tag while a 256 MiB
//!   `isend`/`irecv` to the same peer is in flight (until the receiver has
//!   it all), beside the idle latency; each round's figure is the median of
//!   its round trips.
//!
//! `procs` 1: both ranks in this process, one multi_thread runtime with two
//! workers (`mpx_net::quic::launch`). `procs` 2: this binary runs itself
//! again as rank 1 (its rank, both addresses and its credential passed in
//! `MPX_RANK`, `MPX_ADDRS`, `MPX_CREDENTIAL`, see
//! `mpx_net::quic::start_from_env`), with the same runtime in each process.
//! Both use `Options::local()` (but for `bulk_thread`).
//!
//! Its raw-quinn twin, `reference/quinn-raw` (`cargo run --release -- twin`
//! there), measures the same figures the same way and prints the same lines
//! with `"impl":"quinn"`; `scripts/quic_compare.py` puts the two side by
//! side (see docs/PERFORMANCE.md, "QUIC").

use std::time::{Duration, Instant};

use mpx::prelude::*;
use mpx_net::quic;

/// Set in the second process (rank 1 of the two-process arrangement).
const CHILD: &str = "MPX_QUIC_BENCH_CHILD";

const LAT_ITERS: usize = 2_000;
const WARMUP_ITERS: usize = 1_000;
/// Message size and messages per round.
const BANDWIDTH: [(usize, usize); 3] = [(1 << 20, 32), (16 << 20, 4), (256 << 20, 1)];
const BULK: usize = 256 << 20;
/// Rank 1's answer to a ping once the bulk transfer has arrived whole.
const STOP: u64 = u64::MAX;

const PING: i32 = 1;
const DATA: i32 = 2;
const ACK: i32 = 3;

/// Rank 0's measurements, one entry per round.
#[derive(Default)]
struct Rounds {
    /// One-way seconds.
    latency: Vec<f64>,
    /// Seconds per message size of `BANDWIDTH`, the messages of a round together.
    bandwidth: Vec<Vec<f64>>,
    /// Median one-way seconds during the transfer, ping count, transfer seconds.
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

/// One-way seconds of an 8-byte message over `iters` round trips.
async fn pingpong(comm: &Comm, iters: usize) -> mpx::Result<f64> {
    let other = 1 - comm.rank();
    let mut got = 0u64;
    let start = Instant::now();
    for i in 0..iters as u64 {
        if comm.rank() == 0 {
            comm.send(&i, other, PING).await?;
            comm.recv_into(&mut got, other, PING).await?;
        } else {
            comm.recv_into(&mut got, other, PING).await?;
            comm.send(&got, other, PING).await?;
        }
    }
    Ok(start.elapsed().as_secs_f64() / (2 * iters) as f64)
}

/// `msgs` messages of `len` bytes from rank 0 to rank 1, one in flight,
/// each acknowledged; rank 0 returns the seconds from each send to its ack,
/// summed.
async fn bandwidth(comm: &Comm, source: &[u8], buf: &mut [u8], len: usize, msgs: usize) -> mpx::Result<f64> {
    let mut ack = 0u64;
    let mut total = Duration::ZERO;
    for _ in 0..msgs {
        if comm.rank() == 0 {
            let data = source[..len].to_vec();
            let start = Instant::now();
            comm.send(data, 1, DATA).await?;
            comm.recv_into(&mut ack, 1, ACK).await?;
            total += start.elapsed();
        } else {
            comm.recv_into(&mut buf[..len], 0, DATA).await?;
            comm.send(&ack, 0, ACK).await?;
        }
    }
    Ok(total.as_secs_f64())
}

/// 8-byte ping-pong while `BULK` bytes go from rank 0 to rank 1: rank 1
/// answers `STOP` to the first ping after its receive has completed. Rank 0
/// returns the median one-way seconds of the round trips before that, their
/// count, and the seconds until the `STOP`.
async fn during_bulk(comm: &Comm, source: &[u8], buf: &mut [u8]) -> mpx::Result<(f64, usize, f64)> {
    let mut got = 0u64;
    if comm.rank() == 0 {
        let data = source[..BULK].to_vec();
        let start = Instant::now();
        let sent = comm.isend(data, 1, DATA);
        let mut samples = Vec::new();
        for i in 0u64.. {
            let ping = Instant::now();
            comm.send(&i, 1, PING).await?;
            comm.recv_into(&mut got, 1, PING).await?;
            if got == STOP {
                break;
            }
            samples.push(ping.elapsed().as_secs_f64() / 2.0);
        }
        let transfer = start.elapsed().as_secs_f64();
        sent.await?;
        let one_way = if samples.is_empty() { f64::NAN } else { median(&samples) };
        Ok((one_way, samples.len(), transfer))
    } else {
        let mut recv = comm.irecv(&mut buf[..BULK], 0, DATA);
        let mut done = None;
        loop {
            comm.recv_into(&mut got, 0, PING).await?;
            if done.is_none() {
                done = recv.test();
            }
            let answer = if done.is_some() { STOP } else { got };
            comm.send(&answer, 0, PING).await?;
            if answer == STOP {
                break;
            }
        }
        drop(recv);
        done.expect("the receive completed")?;
        Ok((0.0, 0, 0.0))
    }
}

/// Both ranks' program: the same sequence of exchanges, rank 0 timing them.
async fn bench(comm: Comm, rounds: usize) -> mpx::Result<Rounds> {
    let (source, mut buf) = if comm.rank() == 0 { (vec![0x5au8; BULK], Vec::new()) } else { (Vec::new(), vec![0u8; BULK]) };
    let mut out = Rounds::default();
    pingpong(&comm, WARMUP_ITERS).await?;
    for _ in 0..rounds {
        out.latency.push(pingpong(&comm, LAT_ITERS).await?);
    }
    bandwidth(&comm, &source, &mut buf, 16 << 20, 1).await?; // warm-up
    for &(len, msgs) in &BANDWIDTH {
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            times.push(bandwidth(&comm, &source, &mut buf, len, msgs).await?);
        }
        out.bandwidth.push(times);
    }
    for _ in 0..rounds {
        out.during_bulk.push(during_bulk(&comm, &source, &mut buf).await?);
    }
    if comm.rank() == 1 {
        assert!(buf.iter().all(|&b| b == 0x5a), "the data arrived intact");
    }
    Ok(out)
}

/// The JSON lines of rank 0's rounds.
fn report(procs: usize, r: &Rounds) {
    let interval = event_interval().map_or(String::new(), |n| format!(",\"event_interval\":{n}"));
    let thread = if options().bulk_thread { "" } else { ",\"bulk_thread\":false" };
    let head = format!("\"bench\":\"quic\",\"impl\":\"mpx\",\"procs\":{procs}{interval}{thread}");
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

fn rounds() -> usize {
    std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(7).max(1)
}

/// The runtimes' event interval, if one is given.
fn event_interval() -> Option<u32> {
    std::env::args().nth(2).and_then(|a| a.parse().ok())
}

/// `Options::local()`, with the bulk thread as the command line says.
fn options() -> quic::Options {
    let bulk_thread = std::env::args().nth(3).is_none_or(|a| a != "off");
    quic::Options { bulk_thread, ..quic::Options::local() }
}

/// Both ranks in this process.
async fn one_process(rounds: usize) -> mpx::Result<()> {
    let mut out = quic::launch_with(2, options(), move |comm| bench(comm, rounds)).await?;
    report(1, &out.swap_remove(0));
    Ok(())
}

/// Rank 0 here, rank 1 in a second process: this binary again.
async fn two_processes(rounds: usize) -> mpx::Result<()> {
    let transport = |e: std::io::Error| mpx::Error::transport("starting rank 1's process", e);
    let options = options();
    let sockets = [quic::bind(([127, 0, 0, 1], 0).into()), quic::bind(([127, 0, 0, 1], 0).into())];
    let [Ok(zero), Ok(one)] = sockets else { return Err(transport(std::io::Error::other("binding"))) };
    let addrs = [zero.local_addr().map_err(transport)?, one.local_addr().map_err(transport)?];
    drop(one); // rank 1 binds its own port
    let job = quic::JobCredential::generate(options.engine.job)?;
    let list = addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    let mut child = std::process::Command::new(std::env::current_exe().map_err(transport)?)
        .args(std::env::args().skip(1))
        .env(CHILD, "1")
        .env(quic::env::RANK, "1")
        .env(quic::env::ADDRS, &list)
        .env(quic::env::CREDENTIAL, job.issue(1)?.to_pem())
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(transport)?;
    let result = async {
        let endpoint = quic::start(zero, &addrs, job.issue(0)?, &options)?;
        tokio::time::timeout(Duration::from_secs(30), endpoint.connected())
            .await
            .map_err(|_| mpx::Error::transport("connecting to rank 1", std::io::Error::from(std::io::ErrorKind::TimedOut)))?;
        let out = tokio::spawn(bench(endpoint.world(), rounds)).await.expect("rank 0's task")?;
        endpoint.finalize().await?;
        Ok::<_, mpx::Error>(out)
    };
    let out = match tokio::time::timeout(Duration::from_secs(300), result).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            let _ = child.kill();
            return Err(e);
        }
        Err(_) => {
            let _ = child.kill();
            return Err(transport(std::io::Error::from(std::io::ErrorKind::TimedOut)));
        }
    };
    let status = tokio::task::spawn_blocking(move || child.wait()).await.expect("waiting").map_err(transport)?;
    if !status.success() {
        return Err(transport(std::io::Error::other(format!("rank 1's process ended with {status}"))));
    }
    report(2, &out);
    Ok(())
}

fn main() -> mpx::Result<()> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.worker_threads(2).enable_all();
    if let Some(interval) = event_interval() {
        runtime.event_interval(interval);
    }
    let runtime = runtime.build().map_err(|e| mpx::Error::transport("building the runtime", e))?;
    runtime.block_on(run())
}

async fn run() -> mpx::Result<()> {
    if std::env::var_os(CHILD).is_some() {
        let endpoint = quic::start_from_env(&options())?.expect("MPX_RANK is set");
        let result = tokio::spawn(bench(endpoint.world(), rounds())).await.expect("rank 1's task");
        endpoint.finalize().await?;
        return result.map(drop);
    }
    let rounds = rounds();
    one_process(rounds).await?;
    two_processes(rounds).await
}
