//! Combined send and receive (`MPI_Sendrecv`, `MPI_Sendrecv_replace`).

use super::buffer::SendBuf;
use super::selectors::{Dest, Source, TagSel};
use super::{Comm, Status};
use crate::error::Result;
use crate::mpi_type::MpiType;
use crate::proto::engine::SendMode;

impl Comm {
    // ----- combined -------------------------------------------------------------------

    /// `MPI_Sendrecv`: sends `send` to `dest` and receives into `recv` from
    /// `source` at the same time, so pairwise exchanges cannot deadlock.
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send) and [`recv_into`](Comm::recv_into).
    #[allow(clippy::too_many_arguments)]
    pub async fn sendrecv<S: MpiType, R: MpiType>(
        &self,
        send: &[S],
        dest: impl Into<Dest>,
        send_tag: i32,
        recv: &mut [R],
        source: impl Into<Source>,
        recv_tag: impl Into<TagSel>,
    ) -> Result<Status> {
        // Argument errors of either half are reported at once.
        let (dest, source, recv_tag) = (dest.into(), source.into(), recv_tag.into());
        self.check_sendrecv(dest, send_tag, source, recv_tag)?;
        let sent = self.isend(send, dest, send_tag);
        let status = self.recv_into(recv, source, recv_tag).await?;
        sent.await?;
        Ok(status)
    }

    /// `MPI_Sendrecv_replace`: sends `buf` and receives into the same
    /// buffer (the outgoing data is packed before the receive starts).
    ///
    /// # Cancel safety
    /// As [`sendrecv`](Comm::sendrecv).
    pub async fn sendrecv_replace<T: MpiType>(
        &self,
        buf: &mut [T],
        dest: impl Into<Dest>,
        send_tag: i32,
        source: impl Into<Source>,
        recv_tag: impl Into<TagSel>,
    ) -> Result<Status> {
        let (dest, source, recv_tag) = (dest.into(), source.into(), recv_tag.into());
        self.check_sendrecv(dest, send_tag, source, recv_tag)?;
        // The outgoing data is packed when the send starts, so the buffer is
        // free for the receive at once.
        let typed = SendBuf::typed(buf);
        let sent = self.start_send(|repr| typed.pack(repr), dest, send_tag, SendMode::Standard, self.context);
        let status = self.recv_into(buf, source, recv_tag).await?;
        sent.await?;
        Ok(status)
    }

    /// The argument checks of both halves of a sendrecv.
    fn check_sendrecv(&self, dest: Dest, send_tag: i32, source: Source, recv_tag: TagSel) -> Result<()> {
        self.dest(dest)?;
        Comm::tag(send_tag)?;
        self.spec(source, recv_tag, self.context)?;
        Ok(())
    }
}
