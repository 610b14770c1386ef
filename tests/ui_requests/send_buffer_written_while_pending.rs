// A send buffer cannot be written while its send request is alive.
async fn run(comm: mpx::Comm) -> mpx::Result<()> {
    let mut data = vec![1u32; 4];
    let request = comm.isend(&data, 1, 0);
    data[0] = 2;
    request.await?;
    Ok(())
}

fn main() {
    let _ = run;
}
