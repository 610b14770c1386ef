//! `MPI_Barrier`.

use bytes::Bytes;

use crate::comm::{Comm, Dest, Packed, RawRecv};
use crate::error::Result;
use crate::proto::engine::SendMode;

impl Comm {
    // ----- barrier --------------------------------------------------------------------------

    /// `MPI_Barrier`: returns once every rank of the communicator has
    /// entered it (a dissemination barrier over point-to-point messages on
    /// the communicator's collective context).
    ///
    /// # Cancel safety
    /// Not cancel-safe: a barrier dropped half-way leaves its messages in
    /// flight, and the next barrier on this communicator will be confused.
    pub async fn barrier(&self) -> Result<()> {
        let n = self.size();
        let me = self.rank();
        let context = self.context | 1;
        let mut step = 1;
        let mut round = 0;
        while step < n {
            let to = (me + step) % n;
            let from = (me + n - step) % n;
            let empty = |_| Ok(Packed::untyped(Bytes::new()));
            let sent = self.start_send(empty, Dest::Rank(to as i64), round, SendMode::Standard, context);
            if let Some(id) = self.post_recv(from, round, context, Some(0))? {
                RawRecv::new(self.shared.clone(), id).await?;
            }
            sent.await?;
            step *= 2;
            round += 1;
        }
        Ok(())
    }
}

