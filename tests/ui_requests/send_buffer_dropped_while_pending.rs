// A send buffer cannot be dropped while its request is alive.
async fn run(comm: mpx::Comm) -> mpx::Result<()> {
    let data = vec![1u8; 8];
    let request = comm.isend(&data, 1, 0);
    drop(data);
    request.await?;
    Ok(())
}

fn main() {
    let _ = run;
}
