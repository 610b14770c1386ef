//! Sends in MPI's four modes: standard, buffered, synchronous and ready,
//! each blocking (a future) and nonblocking (a [`Request`]), of any
//! [`SendData`].

use std::future::Future;

use super::buffer::Packed;
use super::data::SendData;
use super::selectors::Peer;
use super::{Comm, Status, BSEND_OVERHEAD};
use crate::error::Result;
use crate::pack::Repr;
use crate::proto::engine::{Outgoing, SendMode};
use crate::request::{Kind, Request};
use crate::runtime::{Completion, Tracked};

impl Comm {
    // ----- sends ------------------------------------------------------------------

    /// Checks the arguments, packs the data in the representation the
    /// destination takes (`pack`), and posts it: the start of every send,
    /// as a request.
    pub(crate) fn start_send<'a>(
        &self,
        pack: impl FnOnce(Repr) -> Result<Packed>,
        dest: Peer,
        tag: i32,
        mode: SendMode,
        context: u64,
    ) -> Request<'a> {
        match self.post_send(pack, dest, tag, mode, context) {
            Ok(Some(id)) => Request::active(self.shared.clone(), id, Kind::Send, None),
            Ok(None) => Request::completed(Ok(Status::empty())),
            Err(e) => Request::completed(Err(e)),
        }
    }

    /// [`start_send`](Comm::start_send)'s work: the send's id while it is
    /// under way, `None` if it completed as it started.
    #[inline]
    fn post_send(&self, pack: impl FnOnce(Repr) -> Result<Packed>, dest: Peer, tag: i32, mode: SendMode, context: u64) -> Result<Option<u64>> {
        let tag = Comm::tag(tag.into())?.expect("a concrete tag");
        let Some(dest) = self.dest(dest)? else { return Ok(None) };
        let Packed { data, repr, signature, desc_len } = pack(self.shared.repr_for(dest))?;
        // A buffered send holds its data as MPI counts it (pack_size), not
        // the type description that may lead it on the wire.
        let bsend = (mode == SendMode::Buffered).then(|| data.len() - desc_len as usize + BSEND_OVERHEAD);
        let msg = Outgoing { dest, context, tag, signature, repr, desc_len, data };
        if let Some(receiver) = self.shared.local_receiver(dest) {
            return self.shared.send_local(&receiver, mode, msg, bsend);
        }
        self.shared.sent_frames_to(dest);
        let mut st = self.shared.lock();
        let id = st.engine.next_id();
        if let Some(need) = bsend {
            // Why a send could never go comes before a full buffer.
            if let Some(e) = st.refuses_send(dest, mode, msg.data.len()) {
                return Err(e);
            }
            st.reserve_bsend(id, need)?;
            return match self.shared.start_send(&mut st, id, mode, msg) {
                // Done as it started (gone at once, or refused, as the
                // engine refuses a send that could never go): its room in
                // the buffer is free again, and a refusal is the caller's.
                Some(completion) => {
                    st.release_bsend(id);
                    match completion {
                        Completion::Send(result) => result.map(|()| None),
                        Completion::Recv(_) | Completion::Cancelled => Ok(None),
                    }
                }
                None => Ok(None),
            };
        }
        // An eager send is usually complete already: its request needs
        // no second look at the endpoint.
        match self.shared.start_send(&mut st, id, mode, msg) {
            Some(Completion::Send(result)) => result.map(|()| None),
            Some(other) => {
                st.requests.insert(id, Tracked::Done(other));
                Ok(Some(id))
            }
            None => Ok(Some(id)),
        }
    }

    fn start_send_data(&self, data: impl SendData, dest: impl Into<Peer>, tag: i32, mode: SendMode) -> Request<'static> {
        self.start_send(|repr| data.into_packed(repr), dest.into(), tag, mode, self.context)
    }

    /// `MPI_Isend`: starts a standard-mode send of `data` (a value, a
    /// slice, a `Vec`, a [`SendBuf`](super::SendBuf) or packed
    /// [`Bytes`](bytes::Bytes): see [`SendData`]) to `dest` (a rank, or a
    /// [`Peer`] that may be [`PROC_NULL`](super::PROC_NULL)) with `tag`, and
    /// returns its request. The data is packed (copied; an owned `Vec` of a
    /// type without padding is taken as it is) before `isend` returns, so a
    /// borrowed buffer is free again at once and the request is `'static`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// let other = 1 - comm.rank();
    /// let (outbox, mut inbox) = ([comm.rank() as u64; 3], [0u64; 3]);
    /// let recv = comm.irecv(&mut inbox, other, 0); // posted now
    /// let send = comm.isend(&outbox, other, 0);
    /// send.await?;
    /// recv.await?;
    /// assert_eq!(inbox, [other as u64; 3]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the request lets the send complete in the background.
    pub fn isend(&self, data: impl SendData, dest: impl Into<Peer>, tag: i32) -> Request<'static> {
        self.start_send_data(data, dest, tag, SendMode::Standard)
    }

    /// `MPI_Ibsend`: copies the data into the attached buffer (see
    /// [`buffer_attach`](Comm::buffer_attach)); the request is complete at
    /// once, or failed with [`ErrorKind::BufferExhausted`](crate::ErrorKind::BufferExhausted),
    /// or with the error any send gets at once (this rank has finalized,
    /// `dest` has failed, or has finished and the message needs its match):
    /// a message that could never go is not taken into the buffer.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::BSEND_OVERHEAD;
    /// if comm.rank() == 0 {
    ///     comm.buffer_attach(vec![0; 64 + BSEND_OVERHEAD])?;
    ///     comm.ibsend(&[1u64, 2], 1, 0).await?; // complete at once
    ///     comm.buffer_detach().await?;
    /// } else {
    ///     assert_eq!(comm.recv::<[u64; 2]>(0, 0).await?.0, [1, 2]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// The request is complete when returned; dropping it changes nothing.
    pub fn ibsend(&self, data: impl SendData, dest: impl Into<Peer>, tag: i32) -> Request<'static> {
        self.start_send_data(data, dest, tag, SendMode::Buffered)
    }

    /// `MPI_Issend`: completes once a matching receive has started, even if
    /// its owner has not waited on it yet.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// if comm.rank() == 0 {
    ///     let mut sent = comm.issend(&7u8, 1, 0);
    ///     assert!(sent.test().is_none(), "not matched yet");
    ///     comm.send(&0u8, 1, 1).await?; // tell rank 1 to receive
    ///     sent.await?;
    /// } else {
    ///     comm.recv::<u8>(0, 1).await?;
    ///     assert_eq!(comm.recv::<u8>(0, 0).await?.0, 7);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the request lets the send complete in the background.
    pub fn issend(&self, data: impl SendData, dest: impl Into<Peer>, tag: i32) -> Request<'static> {
        self.start_send_data(data, dest, tag, SendMode::Synchronous)
    }

    /// `MPI_Irsend`: valid only if the matching receive is already posted
    /// when the message arrives; if it is not, the message is not delivered
    /// and the request fails with [`ErrorKind::NotReady`](crate::ErrorKind::NotReady) (MPI leaves this
    /// undefined; mpx reports it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// if comm.rank() == 0 {
    ///     comm.recv::<u8>(1, 1).await?; // rank 1's receive is posted
    ///     comm.irsend(&3i16, 1, 0).await?;
    /// } else {
    ///     let recv = comm.recv::<i16>(0, 0);
    ///     comm.send(&0u8, 0, 1).await?;
    ///     assert_eq!(recv.await?.0, 3);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the request lets the send complete in the background; a
    /// failure is then reported through `tracing`.
    pub fn irsend(&self, data: impl SendData, dest: impl Into<Peer>, tag: i32) -> Request<'static> {
        self.start_send_data(data, dest, tag, SendMode::Ready)
    }

    /// `MPI_Send`: a standard-mode send of any [`SendData`]. It may
    /// complete as soon as the data is buffered at the receiver, or wait for
    /// a matching receive when the receiver's budget for unexpected data
    /// from this rank is spent (which throttles a producer that outpaces its
    /// consumer). The blocking spelling of [`isend`](Comm::isend): the send
    /// starts when `send` is called.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// if comm.rank() == 0 {
    ///     comm.send(&[1.5f32, 2.5], 1, 0).await?;
    /// } else {
    ///     let (v, status) = comm.recv_vec::<f32>(0, 0).await?;
    ///     assert_eq!((v, status.source), (vec![1.5, 2.5], Some(0)));
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Like every operation, the send starts when `send` is called, before
    /// the future is first polled: dropping the future at any point lets the
    /// send complete in the background.
    pub fn send(&self, data: impl SendData, dest: impl Into<Peer>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'static {
        self.completion(data, dest.into(), tag, SendMode::Standard)
    }

    /// `MPI_Bsend`: copies the data into the attached buffer and returns at
    /// once. A send that does not fit (or with no buffer attached) is
    /// [`ErrorKind::BufferExhausted`](crate::ErrorKind::BufferExhausted) and sends nothing. See
    /// [`ibsend`](Comm::ibsend).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{ErrorKind, BSEND_OVERHEAD};
    /// if comm.rank() == 0 {
    ///     assert!(matches!(comm.bsend(&7u64, 1, 0).await, Err(ref e) if matches!(e.kind(), ErrorKind::BufferExhausted { .. })), "no buffer");
    ///     comm.buffer_attach(vec![0; 64 + BSEND_OVERHEAD])?;
    ///     comm.bsend(&7u64, 1, 0).await?; // copied: returns at once
    ///     comm.buffer_detach().await?;
    /// } else {
    ///     assert_eq!(comm.recv::<u64>(0, 0).await?.0, 7);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Completes on its first poll.
    pub fn bsend(&self, data: impl SendData, dest: impl Into<Peer>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'static {
        self.completion(data, dest.into(), tag, SendMode::Buffered)
    }

    /// `MPI_Ssend`: completes only once a matching receive has started. See
    /// [`issend`](Comm::issend).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// if comm.rank() == 0 {
    ///     comm.ssend(&[1u8, 2], 1, 0).await?; // returns once rank 1's receive has matched it
    /// } else {
    ///     assert_eq!(comm.recv::<[u8; 2]>(0, 0).await?.0, [1, 2]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send): a dropped synchronous send is still matched
    /// and delivered.
    pub fn ssend(&self, data: impl SendData, dest: impl Into<Peer>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'static {
        self.completion(data, dest.into(), tag, SendMode::Synchronous)
    }

    /// `MPI_Rsend`: valid only if the matching receive is already posted.
    /// See [`irsend`](Comm::irsend).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::ErrorKind;
    /// if comm.rank() == 0 {
    ///     // Rank 1 posts no receive for tag 0: the send fails, nothing is delivered.
    ///     assert!(matches!(comm.rsend(&1u8, 1, 0).await, Err(ref e) if matches!(e.kind(), ErrorKind::NotReady)));
    ///     comm.send(&2u8, 1, 1).await?;
    /// } else {
    ///     assert_eq!(comm.recv::<u8>(0, 1).await?.0, 2);
    ///     assert_eq!(comm.iprobe(0, 0)?, None);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send).
    pub fn rsend(&self, data: impl SendData, dest: impl Into<Peer>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'static {
        self.completion(data, dest.into(), tag, SendMode::Ready)
    }

    /// A blocking send's future: the send starts now, and the future
    /// resolves to `()`.
    fn completion(&self, data: impl SendData, dest: Peer, tag: i32, mode: SendMode) -> SendCompletion {
        match self.post_send(|repr| data.into_packed(repr), dest, tag, mode, self.context) {
            Ok(None) => SendCompletion::Done(Some(Ok(()))),
            Ok(Some(id)) => SendCompletion::Waiting(Box::new(Request::active(self.shared.clone(), id, Kind::Send, None))),
            Err(e) => SendCompletion::Done(Some(Err(e))),
        }
    }
}

/// What the blocking sends return: resolves to `()`. (A plain future
/// rather than an `async fn`'s state machine, and two words: a send that
/// completed as it started, as most small messages do, is moved into its
/// caller's future and is ready at its first poll, without a request.)
enum SendCompletion {
    /// Completed as it started: the outcome, until it is taken.
    Done(Option<Result<()>>),
    /// Under way: its request (dropping it abandons the send, as
    /// dropping the request does).
    Waiting(Box<Request<'static>>),
}

impl Future for SendCompletion {
    type Output = Result<()>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<()>> {
        match &mut *self {
            SendCompletion::Done(outcome) => std::task::Poll::Ready(outcome.take().unwrap_or(Ok(()))),
            SendCompletion::Waiting(request) => std::pin::Pin::new(&mut **request).poll(cx).map(|outcome| outcome.map(drop)),
        }
    }
}
