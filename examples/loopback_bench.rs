//! Point-to-point speed between ranks on the in-memory loopback, beside
//! the floor: two tokio tasks passing the same message over a
//! `tokio::sync::mpsc` channel (as `../shared/reference-bench/tokio-floor`
//! does), measured in the same run.
//!
//! ```text
//! cargo run --release --example loopback_bench [trials] [figure] [runtime]
//! ```
//!
//! (With a figure's name, only that figure (`all` for every one); with a runtime's name,
//! `current_thread` or `multi_thread_2`, only that runtime.)
//!
//! Prints one JSON line per figure, each the median of `trials` (default
//! 7), mpx and the floor measured alternately:
//!
//! - `latency`: one-way time of an 8-byte `send`/`recv_into` ping-pong;
//! - `bandwidth`: the same ping-pong at 1 MiB and 16 MiB, sending a
//!   borrowed slice (`send(&buf)`, received with `recv_into`) or an owned
//!   `Vec` (`send(vec)`, received with `recv_vec`);
//! - `datatype`: 1 MiB of every other double (a vector of stride 2) sent
//!   and received contiguous, against the time of packing it plus a 1 MiB
//!   contiguous send;
//! - `rate`: 8-byte messages with 64 in flight, against the ping-pong;
//! - `stream`: 1 MiB and 4 MiB borrowed sends one way, one after another
//!   (each awaited, received with `recv_into`), against the borrowed
//!   ping-pong of the same size: each trial of both in a fresh process
//!   (this program run again), so that no earlier figure has warmed the
//!   allocator; a stream frees each message's memory while the next is
//!   packed, which a ping-pong hides (a stream of fresh pages ran at a
//!   tenth of the ping-pong's pace; the target, at least half of it, says
//!   there is no such storm: a stream also keeps more messages' memory in
//!   flight than a ping-pong, which at 4 MiB no longer stays in the cache);
//! - `matching`: posting (and withdrawing) a receive of each shape with
//!   0 to 100,000 unexpected messages of another communicator queued, and
//!   a message's arrival with 0 to 100,000 receives of another
//!   communicator posted.
//!
//! Latency, bandwidth, datatype and rate run on a current-thread runtime
//! and on a 2-worker multi-thread runtime; matching on the current-thread
//! one (it measures the engine, not the scheduler).

use std::time::Instant;

use mpx::prelude::*;
use mpx::{Datatype, Region, SendBuf, Source, TagSel};

/// How a message is sent in a ping-pong.
#[derive(Clone, Copy, PartialEq)]
enum Buffer {
    /// `send(&buf)` and `recv_into(&mut buf)`.
    Borrowed,
    /// `send(vec)` and `recv_vec`.
    Owned,
}

/// One-way seconds per message of `len` bytes in a ping-pong of `iters`
/// round trips between two ranks.
async fn pingpong(len: usize, iters: usize, buffer: Buffer) -> mpx::Result<f64> {
    let out = mpx::launch(2, move |comm| async move {
        let other = 1 - comm.rank();
        let mut buf = vec![1u8; len];
        let round = |mut buf: Vec<u8>| {
            let comm = comm.clone();
            async move {
                let first = comm.rank() == 0;
                for turn in 0..2 {
                    if (turn == 0) == first {
                        match buffer {
                            Buffer::Borrowed => comm.send(&buf, other, 0).await?,
                            Buffer::Owned => comm.send(std::mem::take(&mut buf), other, 0).await?,
                        }
                    } else {
                        match buffer {
                            Buffer::Borrowed => drop(comm.recv_into(&mut buf, other, 0).await?),
                            Buffer::Owned => buf = comm.recv_vec::<u8>(other, 0).await?.0,
                        }
                    }
                }
                Ok::<_, mpx::Error>(buf)
            }
        };
        buf = round(buf).await?; // warm up
        let start = Instant::now();
        for _ in 0..iters {
            buf = round(buf).await?;
        }
        Ok(start.elapsed().as_secs_f64() / (2 * iters) as f64)
    })
    .await?;
    Ok(out[0])
}

/// The floor: the same ping-pong between two tokio tasks over channels,
/// each receive copying into the receiver's buffer (as
/// `../shared/reference-bench/tokio-floor`).
async fn floor(len: usize, iters: usize) -> f64 {
    let (tx_a, mut rx_a) = tokio::sync::mpsc::channel::<Vec<u8>>(1);
    let (tx_b, mut rx_b) = tokio::sync::mpsc::channel::<Vec<u8>>(1);
    let echo = tokio::spawn(async move {
        let mut dst = vec![0u8; len];
        while let Some(m) = rx_a.recv().await {
            dst.copy_from_slice(&m);
            if tx_b.send(m).await.is_err() {
                break;
            }
        }
    });
    let mut buf = vec![1u8; len];
    let mut dst = vec![0u8; len];
    let start = Instant::now();
    for _ in 0..iters {
        tx_a.send(std::mem::take(&mut buf)).await.expect("echo task runs");
        buf = rx_b.recv().await.expect("echo task runs");
        dst.copy_from_slice(&buf);
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(tx_a);
    echo.await.expect("echo task ends");
    elapsed / (2 * iters) as f64
}

/// One round trip of `send` out and a contiguous message back into
/// `contiguous` (rank 0), or the mirror image (rank 1).
async fn round_trip(comm: &Comm, send: SendBuf<'_>, contiguous: &mut [f64]) -> mpx::Result<()> {
    let other = 1 - comm.rank();
    if comm.rank() == 0 {
        comm.send(send, other, 0).await?;
        comm.recv_into(contiguous, other, 0).await?;
    } else {
        comm.recv_into(contiguous, other, 0).await?;
        comm.send(send, other, 0).await?;
    }
    Ok(())
}

/// One-way seconds per message of 1 MiB of every other double, sent as a
/// vector of stride 2 and received contiguous, and the seconds to pack it.
async fn strided(iters: usize) -> mpx::Result<(f64, f64)> {
    const DOUBLES: usize = 1 << 17; // 1 MiB of data
    let out = mpx::launch(2, move |comm| async move {
        let every_other = Datatype::vector(DOUBLES, 1, 2, &Datatype::double())?;
        let spread = vec![1.0f64; 2 * DOUBLES];
        let mut contiguous = vec![0.0f64; DOUBLES];
        let send = || SendBuf::new(Region::of(&spread), 1, &every_other);
        round_trip(&comm, send(), &mut contiguous).await?;
        let start = Instant::now();
        for _ in 0..iters {
            round_trip(&comm, send(), &mut contiguous).await?;
        }
        let message = start.elapsed().as_secs_f64() / (2 * iters) as f64;
        let mut packed = vec![0u8; 8 * DOUBLES];
        let start = Instant::now();
        for _ in 0..iters {
            every_other.pack_into(Region::of(&spread), 1, &mut packed, &mut 0)?;
        }
        Ok((message, start.elapsed().as_secs_f64() / iters as f64))
    })
    .await?;
    Ok(out[0])
}

/// Rank 0 sends `inbox.len()` 8-byte messages at once, rank 1 receives
/// them all at once, then answers with one.
async fn batch(comm: &Comm, inbox: &mut [u64]) -> mpx::Result<()> {
    let other = 1 - comm.rank();
    if comm.rank() == 0 {
        let sends: Vec<_> = (0..inbox.len()).map(|i| comm.isend(&(i as u64), other, 0)).collect();
        for outcome in mpx::wait_all(sends).await {
            outcome?;
        }
        comm.recv_into(&mut inbox[0], other, 1).await?;
    } else {
        let recvs: Vec<_> = inbox.iter_mut().map(|slot| comm.irecv(slot, other, 0)).collect();
        for outcome in mpx::wait_all(recvs).await {
            outcome?;
        }
        comm.send(&0u64, other, 1).await?;
    }
    Ok(())
}

/// Seconds per 8-byte message with `window` in flight.
async fn windowed(window: usize, iters: usize) -> mpx::Result<f64> {
    let out = mpx::launch(2, move |comm| async move {
        let mut inbox = vec![0u64; window];
        batch(&comm, &mut inbox).await?;
        let start = Instant::now();
        for _ in 0..iters {
            batch(&comm, &mut inbox).await?;
        }
        Ok(start.elapsed().as_secs_f64() / (iters * window) as f64)
    })
    .await?;
    Ok(out[0])
}

/// Seconds per message of `len` bytes sent one way: `iters` borrowed
/// sends in a row, each awaited, received with `recv_into`, then an
/// 8-byte answer.
async fn stream(len: usize, iters: usize) -> mpx::Result<f64> {
    let out = mpx::launch(2, move |comm| async move {
        let other = 1 - comm.rank();
        let mut buf = vec![1u8; len];
        let mut answer = 0u64;
        let start = Instant::now();
        if comm.rank() == 0 {
            for _ in 0..iters {
                comm.send(&buf[..], other, 0).await?;
            }
            comm.recv_into(&mut answer, other, 1).await?;
        } else {
            for _ in 0..iters {
                comm.recv_into(&mut buf[..], other, 0).await?;
            }
            comm.send(&answer, other, 1).await?;
        }
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    })
    .await?;
    Ok(out[0])
}

/// Set in a child run of this program that measures one `stream` or
/// borrowed ping-pong trial in a fresh process: `stream|pingpong len iters
/// runtime`; it prints the seconds per message.
const FRESH: &str = "LOOPBACK_BENCH_FRESH";

/// Seconds per message of one trial of `what` (`stream` or `pingpong`),
/// measured by this program run again.
fn fresh(what: &str, len: usize, iters: usize, runtime: &str) -> mpx::Result<f64> {
    let exe = std::env::current_exe().map_err(|e| mpx::Error::transport("finding this program", e))?;
    let out = std::process::Command::new(exe)
        .env(FRESH, format!("{what} {len} {iters} {runtime}"))
        .output()
        .map_err(|e| mpx::Error::transport("running this program again", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().parse().map_err(|_| mpx::ErrorKind::InvalidArgument(format!("a fresh {what} trial printed {text:?} ({})", out.status)).into())
}

/// The child's side of [`fresh`].
fn fresh_child(spec: &str) -> mpx::Result<()> {
    let parts: Vec<&str> = spec.split_whitespace().collect();
    let bad = || -> Error { mpx::ErrorKind::InvalidArgument(format!("{FRESH}={spec:?}")).into() };
    let [what, len, iters, runtime] = parts[..] else { return Err(bad()) };
    let (len, iters): (usize, usize) = (len.parse().map_err(|_| bad())?, iters.parse().map_err(|_| bad())?);
    let rt = match runtime {
        "current_thread" => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        _ => tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?,
    };
    let seconds = rt.block_on(async move {
        match what {
            "stream" => tokio::spawn(stream(len, iters)).await.expect("benchmark task"),
            _ => tokio::spawn(pingpong(len, iters, Buffer::Borrowed)).await.expect("benchmark task"),
        }
    })?;
    println!("{seconds}");
    Ok(())
}

/// The four receive shapes: (any source, any tag).
const SHAPES: [(&str, bool, bool); 4] = [
    ("source_tag", false, false),
    ("any_source", true, false),
    ("any_tag", false, true),
    ("any_source_any_tag", true, true),
];

/// Seconds to post and withdraw one receive of `shape` with `queued`
/// unexpected messages of another communicator waiting, and seconds for
/// one message to arrive and be received with `posted` receives of
/// another communicator waiting. Rank 0 measures; half the queued messages
/// are its own, half rank 1's: the eager credit one sender may hold
/// (`MAX_GRANTED_CREDIT`, 64 MiB, each message counting its bookkeeping)
/// keeps at most about 65,000 queued, and beyond it they would wait in the
/// sender as rendezvous requests, holding back its later messages to the
/// same rank.
async fn matching(queued: usize, posted: usize, iters: usize) -> mpx::Result<Vec<f64>> {
    const QUEUED: i32 = 7;
    const ALL_QUEUED: i32 = 8;
    const DONE: i32 = 99;
    let mut options = mpx::LaunchOptions::ranks(2);
    options.engine.eager_credit = mpx::proto::engine::MAX_GRANTED_CREDIT;
    let out = mpx::launch_with(options, move |comm| async move {
        let elsewhere = comm.dup();
        let own = queued / 2;
        if comm.rank() == 1 {
            let sends: Vec<_> = (own..queued).map(|i| elsewhere.isend(&(i as u64), 0, QUEUED)).collect();
            elsewhere.send(&0u8, 0, ALL_QUEUED).await?;
            comm.recv::<u8>(0, DONE).await?;
            for outcome in mpx::wait_all(sends).await {
                outcome?;
            }
            return Ok(Vec::new());
        }
        let sends: Vec<_> = (0..own).map(|i| elsewhere.isend(&(i as u64), 0, QUEUED)).collect();
        // Non-overtaking: rank 1's messages are all queued once this is in.
        elsewhere.recv::<u8>(1, ALL_QUEUED).await?;
        let mut figures = Vec::new();
        for (_, any_source, any_tag) in SHAPES {
            let source = if any_source { Source::from(Any) } else { Source::from(0) };
            let tag = if any_tag { TagSel::from(Any) } else { TagSel::from(3) };
            let mut slot = 0u64;
            let start = Instant::now();
            for _ in 0..iters {
                drop(comm.irecv(&mut slot, source, tag));
            }
            figures.push(start.elapsed().as_secs_f64() / iters as f64);
        }
        // Arrivals: receives of another communicator posted.
        let mut slots = vec![0u64; posted];
        let waiting: Vec<_> = slots.iter_mut().map(|slot| elsewhere.irecv(slot, 0, 9)).collect();
        let start = Instant::now();
        for i in 0..iters {
            let mut got = 0u64;
            let recv = comm.irecv(&mut got, 0, 5);
            comm.send(&(i as u64), 0, 5).await?;
            recv.await?;
        }
        figures.push(start.elapsed().as_secs_f64() / iters as f64);
        drop(waiting);
        let mut slot = 0u64;
        for _ in 0..queued {
            elsewhere.recv_into(&mut slot, Any, QUEUED).await?;
        }
        for outcome in mpx::wait_all(sends).await {
            outcome?;
        }
        comm.send(&0u8, 1, DONE).await?;
        Ok(figures)
    })
    .await?;
    Ok(out.into_iter().next().expect("rank 0's figures"))
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Runs `mpx` and `reference` alternately `trials` times each; medians.
fn paired(
    rt: &tokio::runtime::Runtime,
    trials: usize,
    mut mpx: impl FnMut(&tokio::runtime::Runtime) -> mpx::Result<f64>,
    mut reference: impl FnMut(&tokio::runtime::Runtime) -> f64,
) -> mpx::Result<(f64, f64)> {
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..trials {
        ours.push(mpx(rt)?);
        theirs.push(reference(rt));
    }
    Ok((median(ours), median(theirs)))
}

fn main() -> mpx::Result<()> {
    if let Ok(spec) = std::env::var(FRESH) {
        return fresh_child(&spec);
    }
    let trials: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(7).max(1);
    let only = std::env::args().nth(2);
    let wanted = |figure: &str| only.as_deref().is_none_or(|only| only == "all" || only == figure);
    let only_runtime = std::env::args().nth(3);
    let runtimes = [
        (
            "current_thread",
            tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        ),
        (
            "multi_thread_2",
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?,
        ),
    ];
    for (name, rt) in runtimes.iter().filter(|(name, _)| only_runtime.as_deref().is_none_or(|only| only == *name)) {
        // Every figure runs inside a spawned task, as a program's ranks do.
        let block = |rt: &tokio::runtime::Runtime, f: std::pin::Pin<Box<dyn std::future::Future<Output = mpx::Result<f64>> + Send>>| {
            rt.block_on(async { tokio::spawn(f).await.expect("benchmark task") })
        };
        if wanted("latency") {
            let (ours, theirs) = paired(
                rt,
                trials,
                |rt| block(rt, Box::pin(pingpong(8, 20_000, Buffer::Borrowed))),
                |rt| rt.block_on(async { tokio::spawn(floor(8, 20_000)).await.expect("floor task") }),
            )?;
            println!(
            "{{\"figure\":\"latency\",\"runtime\":\"{name}\",\"bytes\":8,\"mpx_us\":{:.3},\"floor_us\":{:.3},\"ratio\":{:.2},\"target\":\"<= 2\"}}",
            ours * 1e6,
            theirs * 1e6,
            ours / theirs
        );
        }
        for (len, iters) in [(1usize << 20, 300), (16 << 20, 20)].into_iter().filter(|_| wanted("bandwidth")) {
            for (buffer, label, target) in [(Buffer::Owned, "owned", 0.8), (Buffer::Borrowed, "borrowed", 0.45)] {
                let (ours, theirs) = paired(
                    rt,
                    trials,
                    |rt| block(rt, Box::pin(pingpong(len, iters, buffer))),
                    |rt| rt.block_on(async { tokio::spawn(floor(len, iters)).await.expect("floor task") }),
                )?;
                println!(
                    "{{\"figure\":\"bandwidth\",\"runtime\":\"{name}\",\"buffer\":\"{label}\",\"bytes\":{len},\"mpx_gb_per_s\":{:.2},\"floor_gb_per_s\":{:.2},\"ratio\":{:.2},\"target\":\">= {target}\"}}",
                    len as f64 / ours / 1e9,
                    len as f64 / theirs / 1e9,
                    theirs / ours
                );
            }
        }
        if wanted("datatype") {
            let mut pack = Vec::new();
            let (strided_message, contiguous) = paired(
                rt,
                trials,
                |rt| {
                    let (message, packing) = rt.block_on(async { tokio::spawn(strided(200)).await.expect("benchmark task") })?;
                    pack.push(packing);
                    Ok(message)
                },
                |rt| block(rt, Box::pin(pingpong(1 << 20, 200, Buffer::Borrowed))).expect("contiguous ping-pong"),
            )?;
            let pack = median(pack);
            println!(
            "{{\"figure\":\"datatype\",\"runtime\":\"{name}\",\"bytes\":{},\"vector_us\":{:.1},\"pack_us\":{:.1},\"contiguous_us\":{:.1},\"ratio\":{:.2},\"target\":\"<= 1\"}}",
            1 << 20,
            strided_message * 1e6,
            pack * 1e6,
            contiguous * 1e6,
            strided_message / (pack + contiguous)
        );
        }
        if wanted("rate") {
            let (window, single) = paired(
                rt,
                trials,
                |rt| block(rt, Box::pin(windowed(64, 500))),
                |rt| block(rt, Box::pin(pingpong(8, 20_000, Buffer::Borrowed))).expect("ping-pong"),
            )?;
            println!(
            "{{\"figure\":\"rate\",\"runtime\":\"{name}\",\"bytes\":8,\"window\":64,\"windowed_msgs_per_s\":{:.0},\"pingpong_msgs_per_s\":{:.0},\"ratio\":{:.2},\"target\":\">= 3\"}}",
            1.0 / window,
            1.0 / single,
            single / window
        );
        }
        for (len, iters) in [(1usize << 20, 1000), (4 << 20, 250)].into_iter().filter(|_| wanted("stream")) {
            let (ours, pingpong) = paired(
                rt,
                trials,
                |_| fresh("stream", len, iters, name),
                |_| fresh("pingpong", len, iters / 2, name).expect("a fresh ping-pong trial"),
            )?;
            println!(
                "{{\"figure\":\"stream\",\"runtime\":\"{name}\",\"buffer\":\"borrowed\",\"bytes\":{len},\"stream_gb_per_s\":{:.2},\"pingpong_gb_per_s\":{:.2},\"ratio\":{:.2},\"target\":\">= 0.5\"}}",
                len as f64 / ours / 1e9,
                len as f64 / pingpong / 1e9,
                pingpong / ours
            );
        }
    }
    if !wanted("matching") {
        return Ok(());
    }
    let rt = &runtimes[0].1;
    let mut base: Option<Vec<f64>> = None;
    for n in [0usize, 1_000, 10_000, 100_000] {
        let iters = 20_000;
        let mut samples: Vec<Vec<f64>> = Vec::new();
        for _ in 0..trials.min(5) {
            samples.push(rt.block_on(async { tokio::spawn(matching(n, n, iters)).await.expect("benchmark task") })?);
        }
        let figures: Vec<f64> = (0..samples[0].len())
            .map(|k| median(samples.iter().map(|s| s[k]).collect()))
            .collect();
        let zero = base.get_or_insert_with(|| figures.clone()).clone();
        for (k, (shape, _, _)) in SHAPES.iter().enumerate() {
            println!(
                "{{\"figure\":\"matching\",\"case\":\"post\",\"shape\":\"{shape}\",\"queued\":{n},\"us\":{:.3},\"ratio_to_empty\":{:.2},\"target\":\"<= 2\"}}",
                figures[k] * 1e6,
                figures[k] / zero[k]
            );
        }
        let k = SHAPES.len();
        println!(
            "{{\"figure\":\"matching\",\"case\":\"arrival\",\"posted\":{n},\"us\":{:.3},\"ratio_to_empty\":{:.2},\"target\":\"<= 2\"}}",
            figures[k] * 1e6,
            figures[k] / zero[k]
        );
    }
    Ok(())
}
