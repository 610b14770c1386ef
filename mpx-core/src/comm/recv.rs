//! Receives: into any [`RecvData`] (a value, a slice, a described
//! buffer), of one value, into new or owned vectors, and as owned bytes.

use std::future::Future;

use bytes::Bytes;

use super::buffer::{capacity, native_packed, status_of, unpack_typed_message, unpack_typed_message_uninit};
use super::data::{RecvData, RecvTarget};
use super::recv_owned::{OwnedRecv, RawRecv, ValueRecv};
use super::selectors::{Source, TagSel};
use super::incoming::Receivable;
use super::{Comm, Status};
use crate::error::Result;
use crate::mpi_type::MpiType;
use crate::pack::Repr;
use crate::proto::engine::ReqId;
use crate::request::{Finish, Kind, Request};

/// The most memory [`Comm::recv_vec`] takes for a message: this many times
/// its length, plus [`RECV_VEC_ALLOWANCE`] (a type whose values outweigh
/// their data, by padding or alignment, needs more than the message).
const RECV_VEC_GROWTH: usize = 16;
/// See [`RECV_VEC_GROWTH`].
const RECV_VEC_ALLOWANCE: usize = 1 << 20;

impl Comm {
    // ----- receives ----------------------------------------------------------------

    /// Posts a receive now; `Ok(None)` for the null process. `limit`: the
    /// most data bytes it can hold, if it is bounded (see
    /// [`Engine::post_recv_limited`](crate::proto::engine::Engine::post_recv_limited)).
    pub(crate) fn post_recv(
        &self,
        source: impl Into<Source>,
        tag: impl Into<TagSel>,
        context: u64,
        limit: Option<u64>,
    ) -> Result<Option<ReqId>> {
        let Some(spec) = self.spec(source.into(), tag.into(), context)? else { return Ok(None) };
        let mut st = self.shared.lock();
        let id = st.engine.next_id();
        match limit {
            Some(limit) => st.engine.post_recv_limited(id, spec, limit),
            None => st.engine.post_recv(id, spec),
        }
        self.shared.flush(&mut st);
        Ok(Some(id))
    }

    pub(super) fn start_recv<'a>(&self, source: impl Into<Source>, tag: impl Into<TagSel>, limit: Option<u64>, finish: Finish<'a>) -> Request<'a> {
        match self.post_recv(source, tag, self.context, limit) {
            Ok(Some(id)) => Request::active(self.shared.clone(), id, Kind::Recv(finish), self.keep_alive()),
            Ok(None) => Request::completed(Ok(Status::empty())),
            Err(e) => Request::completed(Err(e)),
        }
    }

    /// `MPI_Irecv`: posts a receive into `buf` (a value, a slice, a `Vec`
    /// or a [`RecvBuf`](super::RecvBuf): see [`RecvData`]) now, so a
    /// message that arrives before anyone polls the request still matches
    /// it, and returns its request. `source` is a rank, a [`Peer`](super::Peer),
    /// [`Any`](super::Any) or [`PROC_NULL`](super::PROC_NULL); `tag` an
    /// `i32` or [`Any`](super::Any). The buffer stays mutably borrowed until
    /// the request completes; the data is written into it only when the
    /// request is polled, never by a background task. A longer message is
    /// [`ErrorKind::Truncate`](crate::ErrorKind::Truncate), a message of another
    /// type [`ErrorKind::TypeMismatch`](crate::ErrorKind::TypeMismatch), and values
    /// invalid for the type [`ErrorKind::InvalidValue`](crate::ErrorKind::InvalidValue);
    /// in each case the buffer is left unchanged.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::Any;
    /// let other = 1 - comm.rank();
    /// let mut inbox = [0i64; 2];
    /// let recv = comm.irecv(&mut inbox, Any, 5);
    /// comm.send(&[-1i64, -2], other, 5).await?;
    /// let status = recv.await?;
    /// assert_eq!((inbox, status.source, status.tag), ([-1, -2], Some(other), Some(5)));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the request withdraws the receive, or gives its
    /// message back to the head of the queue (see the [module docs](super)).
    pub fn irecv<'a>(&self, buf: impl RecvData<'a>, source: impl Into<Source>, tag: impl Into<TagSel>) -> Request<'a> {
        match buf.into_target() {
            Ok(RecvTarget { limit, finish }) => self.start_recv(source, tag, limit, finish),
            Err(e) => Request::completed(Err(e)),
        }
    }

    /// `MPI_Recv` into `buf`: the blocking spelling of
    /// [`irecv`](Comm::irecv), with the same arguments and errors. Like
    /// every operation it starts (the receive is posted) when called; what
    /// it returns is a plain future, where `irecv`'s [`Request`] can also be
    /// tested, cancelled and kept in a [`RequestSet`](crate::RequestSet).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// let other = 1 - comm.rank();
    /// comm.isend(&(comm.rank() as u16), other, 0);
    /// let mut got = 0u16;
    /// comm.recv_into(&mut got, other, 0).await?;
    /// assert_eq!(got, other as u16);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe: if the future is dropped, the receive is withdrawn, or
    /// its message, if one had matched, is given back (see the
    /// [module docs](super)).
    pub fn recv_into<'a>(
        &self,
        buf: impl RecvData<'a>,
        source: impl Into<Source>,
        tag: impl Into<TagSel>,
    ) -> impl Future<Output = Result<Status>> + Send + 'a {
        self.irecv(buf, source, tag)
    }

    /// `MPI_Recv` of exactly one value, returned with the status: a value
    /// of an [`MpiType`] `T` with `recv::<T>`, or (with the `serde`
    /// feature) any `DeserializeOwned` value `T` of a serde message with
    /// `recv::<Serde<T>>` (see [`Receivable`]). A message of more values
    /// is [`ErrorKind::Truncate`](crate::ErrorKind::Truncate), one of none
    /// [`ErrorKind::ShortInput`](crate::ErrorKind::ShortInput), one of another
    /// type [`ErrorKind::TypeMismatch`](crate::ErrorKind::TypeMismatch). From
    /// [`PROC_NULL`](super::PROC_NULL) there is no value:
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::comm::Serde;
    /// if comm.rank() == 0 {
    ///     comm.send(&[0.5f64, 1.5], 1, 0).await?;
    ///     comm.send(Serde(&vec!["a", "bc"]), 1, 1).await?;
    /// } else {
    ///     // A derived `#[repr(C)]` struct works the same way.
    ///     let (reading, _) = comm.recv::<[f64; 2]>(0, 0).await?;
    ///     assert_eq!(reading, [0.5, 1.5]);
    ///     let (words, _) = comm.recv::<Serde<Vec<String>>>(0, 1).await?;
    ///     assert_eq!(words, ["a", "bc"]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`recv_into`](Comm::recv_into).
    pub fn recv<R: Receivable>(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> ValueRecv<R> {
        ValueRecv::start(self, source.into(), tag.into())
    }

    /// `MPI_Recv` of a message of any length into a new `Vec`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// if comm.rank() == 0 {
    ///     comm.send(&(1..=5).collect::<Vec<u32>>(), 1, 0).await?;
    /// } else {
    ///     let (v, status) = comm.recv_vec::<u32>(0, 0).await?;
    ///     assert_eq!((v, status.count::<u32>()), (vec![1, 2, 3, 4, 5], Some(5)));
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`recv_into`](Comm::recv_into).
    pub fn recv_vec<T: MpiType>(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> impl Future<Output = Result<(Vec<T>, Status)>> + Send + 'static {
        let posted = self.post_recv(source, tag, self.context, None).map(|id| id.map(|id| RawRecv::kept(self.shared.clone(), id, self.keep_alive())));
        async move {
            let Some(raw) = posted? else { return Ok((Vec::new(), Status::empty())) };
            let msg = raw.await?;
            let size = match msg.envelope.repr {
                Repr::Native => T::datatype().size(),
                Repr::External32 => T::datatype().external32_size(),
            }
            .max(1) as usize;
            let room = msg.data.len().div_ceil(size);
            // A type's values may take far more memory than their data (a
            // large alignment): the sender's length must not make this rank
            // take, or ask the system for, many times what it sent.
            let needed = room.saturating_mul(std::mem::size_of::<T>());
            if needed > msg.data.len().saturating_mul(RECV_VEC_GROWTH).saturating_add(RECV_VEC_ALLOWANCE) {
                return Err(crate::error::ErrorKind::InvalidArgument(format!(
                    "recv_vec: {room} values of {} bytes each for a message of {} bytes",
                    std::mem::size_of::<T>(),
                    msg.data.len()
                ))
                .into());
            }
            let mut out = Vec::new();
            out.try_reserve_exact(room).map_err(|_| {
                crate::error::ErrorKind::InvalidArgument(format!("recv_vec: no memory for {room} values of {} bytes each", std::mem::size_of::<T>()))
            })?;
            let (status, whole) = unpack_typed_message_uninit(&msg, &mut out.spare_capacity_mut()[..room])?;
            // SAFETY: the first `whole` values were written whole and validated.
            unsafe { out.set_len(whole) };
            Ok((out, status))
        }
    }

    /// A receive into an owned `Vec` (room for `buf.len()` values, as with
    /// a `&mut` slice; [`recv_vec`](Comm::recv_vec) instead makes a new
    /// vector as long as the message), as a `'static` future that can be
    /// spawned or kept in a [`RequestSet`](crate::RequestSet) and handed
    /// back for the next receive. It resolves to the vector and
    /// the status; on failure the vector comes back with the error
    /// ([`RecvError`](super::RecvError), which converts into [`Error`](crate::Error)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// let other = 1 - comm.rank();
    /// let recv = tokio::spawn(comm.irecv_owned(vec![0u8; 3], other, 0));
    /// comm.send(&[9u8, 8, 7], other, 0).await?;
    /// let (buf, _) = recv.await.expect("not cancelled")?;
    /// assert_eq!(buf, [9, 8, 7]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`irecv`](Comm::irecv).
    pub fn irecv_owned<T: MpiType>(&self, buf: Vec<T>, source: impl Into<Source>, tag: impl Into<TagSel>) -> OwnedRecv<Vec<T>> {
        let limit = capacity(&T::datatype_ref(), buf.len() as u64);
        OwnedRecv::start(self, buf, source.into(), tag.into(), limit, |buf, msg| unpack_typed_message(&msg, buf))
    }

    /// A receive of a message of any length as owned bytes, taken from the
    /// transport without a copy (`packed`: no type check; typed external32
    /// data is converted to this rank's native packed form), as a `'static`
    /// future.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// let other = 1 - comm.rank();
    /// comm.isend(bytes::Bytes::from_static(b"raw"), other, 0);
    /// let (bytes, _) = comm.irecv_bytes(other, 0).await?;
    /// assert_eq!(&bytes[..], b"raw");
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`irecv`](Comm::irecv).
    pub fn irecv_bytes(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> OwnedRecv<Bytes> {
        OwnedRecv::start(self, Bytes::new(), source.into(), tag.into(), None, |buf, msg| {
            // The status counts the bytes handed back: this rank's native
            // packed form, which for external32 data of some types (`long`
            // among them) is longer than what came.
            let status = status_of(&msg);
            *buf = native_packed(&msg)?;
            Ok(Status { bytes: buf.len() as u64, ..status })
        })
    }
}
