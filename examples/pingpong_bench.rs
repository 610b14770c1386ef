//! Point-to-point latency and bandwidth between two ranks on the in-memory
//! loopback.
//!
//! ```text
//! cargo run --release --example pingpong_bench [rounds]
//! ```
//!
//! Prints one JSON line per message size: the median over `rounds` (default
//! 7) of the one-way time per message in a ping-pong, and the bandwidth it
//! gives. Compare with `../shared/reference-bench/tokio-floor` (the cost of
//! moving a message between two tokio tasks) in the same sitting.

use std::time::Instant;


/// One-way seconds per message of `len` bytes, over `iters` round trips.
async fn pingpong(len: usize, iters: usize) -> mpx::Result<f64> {
    let out = mpx::launch(2, move |comm| async move {
        let other = 1 - comm.rank();
        let mut buf = vec![0u8; len];
        // One round trip: rank 0 sends first, rank 1 answers.
        let round = |buf: &mut Vec<u8>| {
            let comm = comm.clone();
            let mut owned = std::mem::take(buf);
            async move {
                if comm.rank() == 0 {
                    comm.send(&owned, other, 0).await?;
                    comm.recv_into(&mut owned, other, 0).await?;
                } else {
                    comm.recv_into(&mut owned, other, 0).await?;
                    comm.send(&owned, other, 0).await?;
                }
                Ok::<_, mpx::Error>(owned)
            }
        };
        buf = round(&mut buf).await?; // warm up
        let start = Instant::now();
        for _ in 0..iters {
            buf = round(&mut buf).await?;
        }
        Ok(start.elapsed().as_secs_f64() / (2 * iters) as f64)
    })
    .await?;
    Ok(out[0])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> mpx::Result<()> {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(7);
    for (len, iters) in [(8, 20_000), (4096, 10_000), (65536, 2_000), (1 << 20, 200), (16 << 20, 20)] {
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            times.push(pingpong(len, iters).await?);
        }
        times.sort_by(f64::total_cmp);
        let median = times[rounds / 2];
        println!(
            "{{\"bench\":\"pingpong\",\"bytes\":{len},\"one_way_us\":{:.3},\"gb_per_s\":{:.3},\"rounds\":{rounds}}}",
            median * 1e6,
            len as f64 / median / 1e9
        );
    }
    Ok(())
}
