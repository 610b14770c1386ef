//! Receives: into typed slices, described buffers, owned vectors and
//! owned bytes.

use std::future::Future;

use bytes::Bytes;

use super::buffer::{capacity, deliver_into, native_packed, status_of, unpack_typed_message, RecvBuf};
use super::recv_owned::{OwnedRecv, RawRecv};
use super::selectors::{Source, TagSel};
use super::{Comm, Status};
use crate::error::Result;
use crate::mpi_type::MpiType;
use crate::pack::Repr;
use crate::proto::engine::ReqId;
use crate::request::{Finish, Kind, Request};

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
        let Some(spec) = self.spec(source, tag, context)? else { return Ok(None) };
        let mut st = self.shared.lock();
        let id = st.engine.next_id();
        match limit {
            Some(limit) => st.engine.post_recv_limited(id, spec, limit),
            None => st.engine.post_recv(id, spec),
        }
        self.shared.flush(&mut st);
        Ok(Some(id))
    }

    fn start_recv<'a>(&self, source: impl Into<Source>, tag: impl Into<TagSel>, limit: Option<u64>, finish: Finish<'a>) -> Request<'a> {
        match self.post_recv(source, tag, self.context, limit) {
            Ok(Some(id)) => Request::active(self.shared.clone(), id, Kind::Recv(finish)),
            Ok(None) => Request::completed(Ok(Status::empty())),
            Err(e) => Request::completed(Err(e)),
        }
    }

    /// `MPI_Irecv` into a typed slice: posts the receive now (a message that
    /// arrives before anyone polls the request still matches it) and
    /// returns its request. The slice stays mutably borrowed until the
    /// request completes; the data is written into it only when the request
    /// is polled, never by a background task. A longer message is
    /// [`Error::Truncate`](crate::Error::Truncate), a message of another type
    /// [`Error::TypeMismatch`](crate::Error::TypeMismatch), and values invalid for `T` are
    /// [`Error::InvalidValue`](crate::Error::InvalidValue); in each case the slice is left unchanged.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the request withdraws the receive, or gives its
    /// message back to the head of the queue (see the [module docs](super)).
    pub fn irecv<'a, T: MpiType>(&self, buf: &'a mut [T], source: impl Into<Source>, tag: impl Into<TagSel>) -> Request<'a> {
        let limit = capacity(&T::datatype(), buf.len() as u64);
        self.start_recv(source, tag, limit, Box::new(move |msg| unpack_typed_message(&msg, buf)))
    }

    /// `MPI_Irecv` into any buffer (a derived datatype, or packed bytes with
    /// [`RecvBuf::packed`]).
    ///
    /// # Cancel safety
    /// As [`irecv`](Comm::irecv).
    pub fn irecv_buf<'a>(&self, buf: RecvBuf<'a>, source: impl Into<Source>, tag: impl Into<TagSel>) -> Request<'a> {
        // A buffer that cannot hold `count` items fails before the receive
        // is posted, so no message is consumed by it.
        if let Err(e) = buf.check() {
            return Request::completed(Err(e));
        }
        let limit = capacity(&buf.datatype, buf.count);
        self.start_recv(source, tag, limit, Box::new(move |msg| deliver_into(&msg, &buf.datatype, buf.count, buf.region)))
    }

    /// A receive into an owned `Vec` (room for `buf.len()` values), as a
    /// `'static` future that can be spawned. It resolves to the vector and
    /// the status; on failure the vector comes back with the error.
    ///
    /// # Cancel safety
    /// As [`irecv`](Comm::irecv).
    pub fn irecv_vec<T: MpiType>(&self, buf: Vec<T>, source: impl Into<Source>, tag: impl Into<TagSel>) -> OwnedRecv<Vec<T>> {
        let limit = capacity(&T::datatype(), buf.len() as u64);
        OwnedRecv::start(self, buf, source.into(), tag.into(), limit, |buf, msg| unpack_typed_message(&msg, buf))
    }

    /// A receive of a message of any length as owned bytes, taken from the
    /// transport without a copy (`packed`: no type check), as a `'static`
    /// future.
    ///
    /// # Cancel safety
    /// As [`irecv`](Comm::irecv).
    pub fn irecv_bytes(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> OwnedRecv<Bytes> {
        OwnedRecv::start(self, Bytes::new(), source.into(), tag.into(), None, |buf, msg| {
            let status = status_of(&msg);
            *buf = native_packed(&msg)?;
            Ok(status)
        })
    }

    /// `MPI_Recv` into a typed slice: receives up to `buf.len()` values from
    /// `source` (a rank, [`Any`](super::Any) or [`PROC_NULL`](super::PROC_NULL)) with `tag` (or [`Any`](super::Any)).
    /// Errors as for [`irecv`](Comm::irecv), of which this is the blocking
    /// spelling: the receive is posted when called.
    ///
    /// # Cancel safety
    /// Cancel-safe: if the future is dropped, the receive is withdrawn, or
    /// its message, if one had matched, is given back (see the
    /// [module docs](super)).
    pub fn recv_into<'a, T: MpiType>(&self, buf: &'a mut [T], source: impl Into<Source>, tag: impl Into<TagSel>) -> Request<'a> {
        self.irecv(buf, source, tag)
    }

    /// `MPI_Recv` of a message of any length into a new `Vec`.
    ///
    /// # Cancel safety
    /// As [`recv_into`](Comm::recv_into).
    pub fn recv<T: MpiType + Default>(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> impl Future<Output = Result<(Vec<T>, Status)>> + Send + 'static {
        let posted = self.post_recv(source, tag, self.context, None).map(|id| id.map(|id| RawRecv::new(self.shared.clone(), id)));
        async move {
            let Some(raw) = posted? else { return Ok((Vec::new(), Status::empty())) };
            let msg = raw.await?;
            let size = match msg.envelope.repr {
                Repr::Native => T::datatype().size(),
                Repr::External32 => T::datatype().external32_size(),
            }
            .max(1) as usize;
            let mut out = vec![T::default(); msg.data.len().div_ceil(size)];
            let status = unpack_typed_message(&msg, &mut out)?;
            Ok((out, status))
        }
    }

    /// `MPI_Recv` into any buffer (a derived datatype, or packed bytes with
    /// [`RecvBuf::packed`]).
    ///
    /// # Cancel safety
    /// As [`recv_into`](Comm::recv_into).
    pub fn recv_buf<'a>(&self, buf: RecvBuf<'a>, source: impl Into<Source>, tag: impl Into<TagSel>) -> Request<'a> {
        self.irecv_buf(buf, source, tag)
    }
}
