//! Collectives between ranks in one process, on the in-memory loopback:
//! time per call of barrier, bcast, allreduce (sum of doubles), allgather
//! and alltoall at 8 B, 64 KiB and 1 MiB per rank, on 2 and 4 ranks.
//!
//! ```text
//! cargo run --release --example coll_bench [multi_thread_2|current_thread] [meet|messages]
//! ```
//!
//! The ranks run as tasks of one tokio runtime: two worker threads by
//! default (ranks run in parallel, on both cores of a 2-core machine), or
//! one thread (`current_thread`: every rank in turn, no thread ever woken).
//! Their collectives meet in memory (`meet`, the loopback's default), or
//! exchange messages as between processes (`messages`): the `path` field
//! of each line says which.
//!
//! Prints one JSON line per figure, as `../shared/reference-bench/run.sh
//! coll` does for MPICH and Open MPI over shared memory: the median of 15
//! trials, each the mean of a run of calls between barriers.

use std::time::Instant;

use mpx::coll::SUM;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Barrier,
    Bcast,
    Allreduce,
    Allgather,
    Alltoall,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Barrier => "barrier",
            Op::Bcast => "bcast",
            Op::Allreduce => "allreduce",
            Op::Allgather => "allgather",
            Op::Alltoall => "alltoall",
        }
    }
}

/// Median microseconds per call of `op` with `bytes` per rank on `ranks`
/// ranks, `iters` calls per trial.
async fn measure(op: Op, ranks: usize, bytes: usize, iters: usize, meet: bool) -> mpx::Result<f64> {
    let options = mpx::LaunchOptions { local_collectives: meet, ..mpx::LaunchOptions::ranks(ranks) };
    let per_rank = mpx::launch_with(options, move |comm| async move {
        let n = bytes / 8;
        let size = comm.size();
        let input: Vec<f64> = (0..n * size).map(|i| comm.rank() as f64 + i as f64 * 0.5).collect();
        let mut output = vec![0.0f64; n * size];
        let mut samples = Vec::with_capacity(15);
        for _ in 0..15 {
            comm.barrier().await?;
            let start = Instant::now();
            for _ in 0..iters {
                match op {
                    Op::Barrier => comm.barrier().await?,
                    Op::Bcast => {
                        let buf = &mut output[..n];
                        comm.bcast(buf, 0).await?
                    }
                    Op::Allreduce => comm.allreduce(&input[..n], &mut output[..n], SUM).await?,
                    Op::Allgather => comm.allgather(&input[..n], &mut output[..]).await?,
                    Op::Alltoall => comm.alltoall(&input[..], &mut output[..]).await?,
                }
            }
            samples.push(start.elapsed().as_secs_f64() / iters as f64);
        }
        samples.sort_by(f64::total_cmp);
        Ok(samples[7])
    })
    .await?;
    Ok(per_rank[0] * 1e6)
}

/// The runtime `name` names: `multi_thread_2` (two workers, the default)
/// or `current_thread`.
fn runtime(name: &str) -> mpx::Result<tokio::runtime::Runtime> {
    let built = match name {
        "multi_thread_2" => tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build(),
        "current_thread" => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        other => return Err(mpx::ErrorKind::InvalidArgument(format!("unknown runtime {other:?}: multi_thread_2 or current_thread")).into()),
    };
    built.map_err(|e| mpx::Error::transport("building the runtime", e))
}

fn main() -> mpx::Result<()> {
    let name = std::env::args().nth(1).unwrap_or_else(|| "multi_thread_2".into());
    let path = std::env::args().nth(2).unwrap_or_else(|| "meet".into());
    let meet = match path.as_str() {
        "meet" => true,
        "messages" => false,
        other => return Err(mpx::ErrorKind::InvalidArgument(format!("unknown path {other:?}: meet or messages")).into()),
    };
    runtime(&name)?.block_on(async {
        for ranks in [2, 4] {
            let us = measure(Op::Barrier, ranks, 8, 2000, meet).await?;
            println!(r#"{{"lib":"mpx-loopback","bench":"coll","runtime":"{name}","path":"{path}","op":"barrier","ranks":{ranks},"bytes":0,"us":{us:.3}}}"#);
            for op in [Op::Bcast, Op::Allreduce, Op::Allgather, Op::Alltoall] {
                for (bytes, iters) in [(8, 2000), (64 << 10, 200), (1 << 20, 20)] {
                    let us = measure(op, ranks, bytes, iters, meet).await?;
                    println!(r#"{{"lib":"mpx-loopback","bench":"coll","runtime":"{name}","path":"{path}","op":"{}","ranks":{ranks},"bytes":{bytes},"us":{us:.3}}}"#, op.name());
                }
            }
        }
        Ok(())
    })
}
