//! `MPI_Barrier`.

use super::{sent_after, Collective, Starting};
use crate::comm::Comm;
use crate::error::Result;

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
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// comm.barrier().await?; // every rank has arrived
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe: a barrier dropped half-way has sent only part of
    /// its messages, and the other ranks are told it gave up: those whose
    /// barrier waits for it fail with
    /// [`ErrorKind::CollectiveMismatch`](crate::ErrorKind::CollectiveMismatch)
    /// naming this rank. Later collectives on the communicator are not
    /// confused by it (each call has its own tags; see [`crate::coll`] for
    /// what the word costs the ranks that did not need it).
    pub fn barrier(&self) -> Collective<'static> {
        let start = Starting::new(self);
        if start.local().is_some() {
            return super::local::barrier(start);
        }
        let call = start.call();
        let (n, me) = (call.size(), call.rank());
        // Round k: a signal to the rank 2^k ahead, one from the rank 2^k
        // behind, for ⌈log₂ n⌉ rounds. Every round's receive is posted
        // now (messages between a pair arrive in the order sent, so one
        // tag serves every round); each round's signal goes once the
        // previous round is done.
        let rounds = usize::BITS - (n - 1).leading_zeros();
        let distance = |k: u32| 1usize << k;
        let posted = (0..rounds).map(|k| call.post::<u8>((me + n - distance(k)) % n, 0)).collect::<Result<Vec<_>>>();
        let first = (rounds > 0).then(|| call.signal((me + 1) % n));
        Collective::new(call.clone(), async move {
            let posted = posted?;
            let mut later = Vec::new();
            for (k, from) in (1..).zip(posted) {
                from.signal().await?;
                if k < rounds {
                    later.push(call.signal((me + distance(k)) % n));
                }
            }
            sent_after(first, later).await
        })
    }
}
