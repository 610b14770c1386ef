//! A ring over QUIC: each rank passes a token around the ring and sends a
//! 16 MiB buffer to its right neighbour. Started by a launcher (`mpxrun`,
//! `mpiexec.hydra`, Open MPI's `mpirun`) or by hand (`MPX_RANK`,
//! `MPX_ADDRS`, `MPX_CREDENTIAL`: the README's "Two processes by hand"),
//! this process is one rank of any number; started alone, it runs four
//! ranks in this process over QUIC on 127.0.0.1.

use mpx::prelude::*;
use mpx_net::quic;

async fn ring(world: Comm) -> mpx::Result<()> {
    let (rank, size) = (world.rank(), world.size());
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let mut token = 0u64;
    if rank == 0 {
        world.send(&1u64, right, 0).await?;
        token = world.recv::<u64>(left, 0).await?.0;
        assert_eq!(token, size as u64);
    } else {
        let (got, _) = world.recv::<u64>(left, 0).await?;
        world.send(&(got + 1), right, 0).await?;
    }
    let big = vec![rank as u8; 16 << 20];
    let sent = world.isend(big, right, 1);
    let (got, _) = world.recv_vec::<u8>(left, 1).await?;
    sent.await?;
    assert!(got.len() == 16 << 20 && got.iter().all(|&b| b == left as u8));
    println!("rank {rank} of {size}: token {token}, 16 MiB from rank {left} checked");
    Ok(())
}

#[tokio::main]
async fn main() -> mpx::Result<()> {
    match mpx_net::bootstrap::start(&quic::Options::network()).await? {
        Some(endpoint) => {
            let result = ring(endpoint.world()).await;
            endpoint.finalize().await?;
            result
        }
        None => {
            quic::launch(4, ring).await?;
            Ok(())
        }
    }
}
