//! `MPI_Barrier`.

use super::{sent, Call, Collective};
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
    /// its messages, so the other ranks' barrier (and so their program)
    /// waits for this rank's rest, which never comes. Later collectives on
    /// the communicator are not confused by it (each call has its own
    /// number).
    pub fn barrier(&self) -> Collective<'static> {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        // Round r: a signal to the rank 2^r ahead, one from the rank 2^r
        // behind. Every round's receive is posted now (messages between a
        // pair arrive in the order sent, so one tag serves every round);
        // each round's signal goes once the previous round is done.
        let mut steps = Vec::new();
        let mut step = 1;
        while step < n {
            steps.push(step);
            step *= 2;
        }
        let posted = steps.iter().map(|&s| call.post::<u8>((me + n - s) % n, 0)).collect::<Result<Vec<_>>>();
        let first = steps.first().map(|&s| call.signal((me + s) % n));
        Collective::new(call.clone(), async move {
            let posted = posted?;
            let mut sends: Vec<_> = first.into_iter().collect();
            for (i, from) in posted.into_iter().enumerate() {
                from.signal().await?;
                if let Some(&s) = steps.get(i + 1) {
                    sends.push(call.signal((me + s) % n));
                }
            }
            sent(sends).await
        })
    }
}
