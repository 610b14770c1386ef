// A receive buffer cannot be read (or written) while its receive is alive.
async fn run(comm: mpx::Comm) -> mpx::Result<()> {
    let mut inbox = [0u64; 4];
    let request = comm.irecv(&mut inbox, 0, 0);
    println!("{}", inbox[0]);
    request.await?;
    Ok(())
}

fn main() {
    let _ = run;
}
