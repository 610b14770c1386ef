// A persistent request's buffer is out of reach while a start is in flight.
use mpx::Persistent;

async fn run(comm: mpx::Comm) -> mpx::Result<()> {
    let mut send = comm.send_init(vec![0u32; 4], 1, 0);
    let started = send.start();
    send.buffer_mut()[0] = 1;
    started.await?;
    Ok(())
}

fn main() {
    let _ = run;
}
