//! Combined send and receive (`MPI_Sendrecv`, `MPI_Sendrecv_replace`).

use super::buffer::{RecvBuf, SendBuf};
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

    /// `MPI_Sendrecv` with datatypes: sends a described buffer to `dest`
    /// and receives into another from `source` at the same time. Argument
    /// errors of either half (a rank, a tag, a buffer that cannot hold its
    /// items) are reported before anything starts; a send that fails as it
    /// starts fails the call before the receive is posted. A send and a
    /// receive in one buffer come from [`ExchangeBuf::split`](super::ExchangeBuf::split), or use
    /// [`exchange`](Comm::exchange).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx_core::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx_core::{Datatype, RecvBuf, Region, RegionMut, SendBuf};
    /// let other = 1 - comm.rank();
    /// // Send column 0 of a 3x3 matrix, receive the other rank's as a row.
    /// let matrix: Vec<f64> = (0..9).map(|i| (10 * comm.rank() + i) as f64).collect();
    /// let column = Datatype::vector(3, 1, 3, &Datatype::double())?;
    /// let mut row = [0f64; 3];
    /// let send = SendBuf::new(Region::of(&matrix), 1, &column);
    /// let recv = RecvBuf::new(RegionMut::of(&mut row), 3, &Datatype::double());
    /// let status = comm.sendrecv_buf(send, other, 0, recv, other, 0).await?;
    /// assert_eq!(status.bytes, 24);
    /// let base = (10 * other) as f64;
    /// assert_eq!(row, [base, base + 3.0, base + 6.0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send) and [`recv_into`](Comm::recv_into).
    #[allow(clippy::too_many_arguments)]
    pub async fn sendrecv_buf(
        &self,
        send: SendBuf<'_>,
        dest: impl Into<Dest>,
        send_tag: i32,
        recv: RecvBuf<'_>,
        source: impl Into<Source>,
        recv_tag: impl Into<TagSel>,
    ) -> Result<Status> {
        let (dest, source, recv_tag) = (dest.into(), source.into(), recv_tag.into());
        self.check_sendrecv(dest, send_tag, source, recv_tag)?;
        recv.check()?;
        let mut sent = self.isend_buf(send, dest, send_tag);
        if sent.is_complete() {
            // Failed as it started (or needs no waiting): report it now.
            (&mut sent).await?;
        }
        let status = self.irecv_buf(recv, source, recv_tag).await?;
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
