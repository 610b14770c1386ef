//! Every rank floods every other with numbered 8-byte messages and checks
//! that each peer's arrive complete and in order (MPI's non-overtaking
//! rule), in rounds of 64 messages per peer in flight.
//!
//! ```text
//! cargo run --release --example flood [messages per pair] [ranks]   # alone: ranks in this process
//! mpxrun -n 8 target/release/examples/flood 20000                    # one rank per process
//! ```
//!
//! Each rank prints its process id first, then a line every 10,000
//! messages received with its resident memory, then its total and its
//! peak resident memory; any loss, duplicate or reordering is an error.

use mpx::prelude::*;

const WINDOW: u64 = 64;
const TAG: i32 = 3;

async fn flood(world: Comm, per_pair: u64) -> mpx::Result<u64> {
    let (me, size) = (world.rank(), world.size());
    println!("rank {me} pid {}", std::process::id());
    let peers: Vec<usize> = (0..size).filter(|&p| p != me).collect();
    let mut received = 0u64;
    let mut next_report = 10_000;
    let mut sent = 0u64;
    while sent < per_pair {
        let round = WINDOW.min(per_pair - sent);
        let mut sends = Vec::new();
        for &p in &peers {
            for i in sent..sent + round {
                sends.push(world.isend(&i, p, TAG));
            }
        }
        for &p in &peers {
            for i in sent..sent + round {
                let (got, _) = world.recv::<u64>(p, TAG).await?;
                if got != i {
                    return Err(mpx::Error::user(format!("rank {me}: message {i} from rank {p} arrived as {got}")));
                }
                received += 1;
            }
        }
        wait_all(sends).await.into_iter().collect::<mpx::Result<Vec<_>>>()?;
        sent += round;
        if received >= next_report {
            println!("rank {me}: {received} messages received, resident {} kB", resident_kb("VmRSS"));
            next_report += 10_000;
        }
    }
    println!("rank {me}: flood of {received} messages checked, peak resident {} kB", resident_kb("VmHWM"));
    Ok(received)
}

/// A line of /proc/self/status, in kB (0 where there is none).
fn resident_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_default();
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[tokio::main]
async fn main() -> mpx::Result<()> {
    let mut args = std::env::args().skip(1);
    let per_pair: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let ranks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    // Under a launcher, the world's size is the launcher's.
    let ranks = mpx_net::bootstrap::Start::detect()?.size().map_or(ranks, |s| s as usize);
    mpx::launch(ranks, move |world| flood(world, per_pair)).await?;
    Ok(())
}
