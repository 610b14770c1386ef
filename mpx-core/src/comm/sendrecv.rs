//! Combined send and receive (`MPI_Sendrecv`, `MPI_Sendrecv_replace`).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use super::data::{RecvData, SendData};
use super::selectors::{Peer, Source, TagSel};
use super::{Comm, Status};
use crate::error::Result;
use crate::proto::engine::SendMode;
use crate::request::Request;

impl Comm {
    // ----- combined -------------------------------------------------------------------

    /// `MPI_Sendrecv`: sends `send` (any [`SendData`]) to `dest` and
    /// receives into `recv` (any [`RecvData`]: a typed buffer or a
    /// [`RecvBuf`](super::RecvBuf) of a derived datatype) from `source`, at
    /// the same time, so pairwise exchanges cannot deadlock. Both halves
    /// start when `sendrecv` is called; argument errors of either half are
    /// reported at once, before anything is sent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |world| async move {
    /// // Pass the rank around a ring.
    /// let right = (world.rank() + 1) % world.size();
    /// let left = (world.rank() + world.size() - 1) % world.size();
    /// let mut from_left = 0usize;
    /// world.sendrecv(&world.rank(), right, 0, &mut from_left, left, 0).await?;
    /// assert_eq!(from_left, left);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// With datatypes (a send and a receive in one buffer come from
    /// [`ExchangeBuf::split`](super::ExchangeBuf::split), or use
    /// [`exchange`](Comm::exchange)):
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{Datatype, RecvBuf, Region, RegionMut, SendBuf};
    /// let other = 1 - comm.rank();
    /// // Send column 0 of a 3x3 matrix, receive the other rank's as a row.
    /// let matrix: Vec<f64> = (0..9).map(|i| (10 * comm.rank() + i) as f64).collect();
    /// let column = Datatype::vector(3, 1, 3, &Datatype::double())?;
    /// let mut row = [0f64; 3];
    /// let send = SendBuf::new(Region::of(&matrix), 1, &column);
    /// let recv = RecvBuf::new(RegionMut::of(&mut row), 3, &Datatype::double());
    /// let status = comm.sendrecv(send, other, 0, recv, other, 0).await?;
    /// assert_eq!(status.bytes, 24);
    /// let base = (10 * other) as f64;
    /// assert_eq!(row, [base, base + 3.0, base + 6.0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send) and [`recv_into`](Comm::recv_into): a
    /// dropped sendrecv still sends, and its receive is withdrawn or its
    /// message given back.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<'a>(
        &self,
        send: impl SendData,
        dest: impl Into<Peer>,
        send_tag: i32,
        recv: impl RecvData<'a>,
        source: impl Into<Source>,
        recv_tag: impl Into<TagSel>,
    ) -> impl Future<Output = Result<Status>> + Send + 'a {
        let (dest, source, recv_tag) = (dest.into(), source.into(), recv_tag.into());
        // A receive buffer that cannot hold its items fails before the send leaves.
        let started = self.check_sendrecv(dest, send_tag, source, recv_tag).and_then(|()| recv.into_target()).and_then(|target| {
            let sent = self.isend(send, dest, send_tag).failed_at_start()?;
            Ok((sent, self.start_recv(source, recv_tag, target.limit, target.finish)))
        });
        Self::both(started)
    }

    /// `MPI_Sendrecv_replace`: sends what `buf` holds and receives into
    /// the same memory. `buf` is any receive buffer ([`RecvData`]: a value,
    /// a slice, a `Vec`, or a [`RecvBuf`](super::RecvBuf) of a derived
    /// datatype), read for the send through the same type it is written
    /// through. The outgoing data is packed before the receive starts, and
    /// both halves start when it is called.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{Datatype, RecvBuf, RegionMut};
    /// let other = 1 - comm.rank();
    /// let mut buf = [comm.rank() as u8; 4];
    /// comm.sendrecv_replace(&mut buf, other, 0, other, 0).await?;
    /// assert_eq!(buf, [other as u8; 4]);
    ///
    /// // Swap the first column of a 3×3 matrix with the other rank's.
    /// let mut m = [comm.rank() as f64; 9];
    /// let column = Datatype::vector(3, 1, 3, &Datatype::double())?;
    /// comm.sendrecv_replace(RecvBuf::new(RegionMut::of(&mut m), 1, &column), other, 1, other, 1).await?;
    /// let me = comm.rank() as f64;
    /// assert_eq!(m, [other as f64, me, me, other as f64, me, me, other as f64, me, me]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`sendrecv`](Comm::sendrecv).
    pub fn sendrecv_replace<'a>(
        &self,
        buf: impl RecvData<'a>,
        dest: impl Into<Peer>,
        send_tag: i32,
        source: impl Into<Source>,
        recv_tag: impl Into<TagSel>,
    ) -> impl Future<Output = Result<Status>> + Send + 'a {
        let (dest, source, recv_tag) = (dest.into(), source.into(), recv_tag.into());
        // The outgoing data is packed when the send starts, so the memory is
        // free for the receive at once. A buffer that cannot hold its items
        // fails before the send leaves.
        let started = self.check_sendrecv(dest, send_tag, source, recv_tag).and_then(|()| {
            let outgoing = &buf;
            let sent = self.start_send(|repr| outgoing.pack_contents(repr), dest, send_tag, SendMode::Standard, self.context).failed_at_start()?;
            let target = buf.into_target()?;
            Ok((sent, self.start_recv(source, recv_tag, target.limit, target.finish)))
        });
        Self::both(started)
    }

    /// Completes a started send and receive: the receive's status, or the
    /// first error of either half (a failed send is reported at once, not
    /// after the receive, which may never complete).
    async fn both(started: Result<(Request<'static>, Request<'_>)>) -> Result<Status> {
        let (mut sent, mut received) = started?;
        let (mut send_done, mut status) = (false, None);
        std::future::poll_fn(|cx| {
            if !send_done {
                if let Poll::Ready(outcome) = Pin::new(&mut sent).poll(cx) {
                    outcome?;
                    send_done = true;
                }
            }
            if status.is_none() {
                if let Poll::Ready(outcome) = Pin::new(&mut received).poll(cx) {
                    status = Some(outcome?);
                }
            }
            match (send_done, status.take()) {
                (true, Some(status)) => Poll::Ready(Ok(status)),
                (_, pending) => {
                    status = pending;
                    Poll::Pending
                }
            }
        })
        .await
    }

    /// The argument checks of both halves of a sendrecv.
    fn check_sendrecv(&self, dest: Peer, send_tag: i32, source: Source, recv_tag: TagSel) -> Result<()> {
        self.dest(dest)?;
        Comm::tag(send_tag.into())?;
        self.spec(source, recv_tag, self.context)?;
        Ok(())
    }
}
