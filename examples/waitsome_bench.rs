//! Cost of completing requests one at a time out of many outstanding ones:
//! a `RequestSet` (polls only woken requests) against the same receives
//! in a `futures::stream::FuturesUnordered` (which also polls only woken
//! futures, but has no slots to re-post into).
//!
//! ```text
//! cargo run --release --example waitsome_bench
//! ```
//!
//! Prints one JSON line per (method, outstanding) with the median time per
//! completion, and for the set the request polls per completion (one,
//! however many requests are outstanding). Messages arrive for the posted
//! receives in a scrambled order.

use std::time::Instant;

use mpx::prelude::*;
use futures::stream::{FuturesUnordered, StreamExt};
use mpx::RequestSet;

/// Completes `n` receives one message at a time; returns (seconds, polls).
async fn run(comm: &Comm, n: usize, use_set: bool) -> mpx::Result<(f64, u64)> {
    let mut bufs = vec![[0u32]; n];
    let start;
    let mut polls = 0u64;
    // Complete a sample of the requests, one per call, in a scrambled tag
    // order, while all others stay outstanding.
    let sample = n.min(500);
    let mut tags: Vec<usize> = (1..n).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..tags.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        tags.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let tags = &tags[..sample - 1];
    if use_set {
        let mut set = RequestSet::new();
        for (tag, b) in bufs.iter_mut().enumerate() {
            set.push(comm.irecv(b, 0, tag as i32));
        }
        // Register every request first (their first poll), outside the timing.
        comm.send(&0u32, 0, 0).await?;
        set.wait_some().await;
        let base = set.polls();
        start = Instant::now();
        for &tag in tags {
            comm.send(&(tag as u32), 0, tag as i32).await?;
            set.wait_some().await;
        }
        polls += set.polls() - base;
    } else {
        let mut pending: FuturesUnordered<_> = bufs.iter_mut().enumerate().map(|(tag, b)| comm.irecv(b, 0, tag as i32)).collect();
        comm.send(&0u32, 0, 0).await?;
        pending.next().await;
        start = Instant::now();
        for &tag in tags {
            comm.send(&(tag as u32), 0, tag as i32).await?;
            pending.next().await;
        }
    }
    Ok((start.elapsed().as_secs_f64() / (sample - 1) as f64, polls / (sample as u64 - 1)))
}

#[tokio::main]
async fn main() -> mpx::Result<()> {
    mpx::launch(1, |comm| async move {
        for n in [100, 1_000, 10_000] {
            for use_set in [true, false] {
                let mut times = vec![];
                let mut polls = 0;
                for _ in 0..5 {
                    let (t, p) = run(&comm, n, use_set).await?;
                    times.push(t);
                    polls = p;
                }
                times.sort_by(f64::total_cmp);
                let method = if use_set { "request_set" } else { "futures_unordered" };
                println!(
                    "{{\"bench\":\"wait_some\",\"method\":\"{method}\",\"outstanding\":{n},\"us_per_completion\":{:.2}{}}}",
                    times[2] * 1e6,
                    if use_set { format!(",\"polls_per_completion\":{polls}") } else { String::new() }
                );
            }
        }
        Ok(())
    })
    .await?;
    Ok(())
}
