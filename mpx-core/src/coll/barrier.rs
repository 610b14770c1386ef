//! `MPI_Barrier`.

use bytes::Bytes;

use std::future::Future;

use crate::comm::{Comm, Packed, Peer, RawRecv};
use crate::error::Result;
use crate::proto::engine::SendMode;

impl Comm {
    // ----- barrier --------------------------------------------------------------------------

    /// `MPI_Barrier`: returns once every rank of the communicator has
    /// entered it (a dissemination barrier over point-to-point messages on
    /// the communicator's collective context).
    ///
    /// It starts when called: the first round's message goes out before
    /// the future is first polled.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx_core::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// comm.barrier().await?; // every rank has arrived
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe: a barrier dropped half-way leaves its messages in
    /// flight, and the next barrier on this communicator will be confused.
    pub fn barrier(&self) -> impl Future<Output = Result<()>> + Send + 'static {
        let comm = self.clone();
        let n = comm.size();
        let me = comm.rank();
        let context = comm.context | 1;
        let round = move |step: usize, round: i32| {
            let to = (me + step) % n;
            let from = (me + n - step) % n;
            let empty = |_| Ok(Packed::untyped(Bytes::new()));
            let sent = comm.start_send(empty, Peer::Rank(to), round, SendMode::Standard, context);
            let received = comm.post_recv(from, round, context, Some(0)).map(|id| id.map(|id| RawRecv::new(comm.shared.clone(), id)));
            async move {
                if let Some(raw) = received? {
                    raw.await?;
                }
                sent.await.map(drop)
            }
        };
        // The first round starts now; each later one once the previous is done.
        let first = (n > 1).then(|| round(1, 0));
        async move {
            let Some(first) = first else { return Ok(()) };
            first.await?;
            let (mut step, mut r) = (2, 1);
            while step < n {
                round(step, r).await?;
                step *= 2;
                r += 1;
            }
            Ok(())
        }
    }
}

