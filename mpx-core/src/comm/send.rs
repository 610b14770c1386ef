//! Sends in MPI's four modes: standard, buffered, synchronous and ready,
//! each blocking (an async fn) and nonblocking (a [`Request`]).

use std::future::Future;

use bytes::Bytes;

use super::buffer::{ContiguousVec, Packed, SendBuf};
use super::selectors::Dest;
use super::{Comm, Status, BSEND_OVERHEAD};
use crate::error::{Error, Result};
use crate::mpi_type::MpiType;
use crate::pack::Repr;
use crate::proto::engine::{Outgoing, SendMode};
use crate::request::{Kind, Request};

impl Comm {
    // ----- sends ------------------------------------------------------------------

    /// Checks the arguments, packs the data in the representation the
    /// destination takes (`pack`), and posts it: the start of every send.
    pub(crate) fn start_send<'a>(
        &self,
        pack: impl FnOnce(Repr) -> Result<Packed>,
        dest: Dest,
        tag: i32,
        mode: SendMode,
        context: u64,
    ) -> Request<'a> {
        let posted = (|| {
            let tag = Comm::tag(tag)?.expect("a concrete tag");
            let Some(dest) = self.dest(dest)? else { return Ok(None) };
            let Packed { data, repr, signature, desc_len } = pack(self.shared.repr_for(dest))?;
            let mut st = self.shared.lock();
            let id = st.engine.next_id();
            if mode == SendMode::Buffered {
                // The data as MPI counts it (pack_size), not the type description
                // that may lead it on the wire.
                let need = data.len() - desc_len as usize + BSEND_OVERHEAD;
                let b = &mut st.bsend;
                let capacity = b.attached.as_ref().map_or(0, Vec::len);
                if b.used + need > capacity {
                    let available = capacity.saturating_sub(b.used) as u64;
                    return Err(Error::BufferExhausted { needed: need as u64, available });
                }
                b.used += need;
                b.in_flight.insert(id, need);
            }
            let msg = Outgoing { dest, context, tag, signature, repr, desc_len, data };
            st.engine.post_send(id, mode, msg);
            self.shared.flush(&mut st);
            Ok((mode != SendMode::Buffered).then_some(id))
        })();
        match posted {
            Ok(Some(id)) => Request::active(self.shared.clone(), id, Kind::Send),
            Ok(None) => Request::completed(Ok(Status::empty())),
            Err(e) => Request::completed(Err(e)),
        }
    }

    pub(crate) fn start_send_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32, mode: SendMode) -> Request<'a> {
        self.start_send(|repr| buf.pack(repr), dest.into(), tag, mode, self.context)
    }

    /// `MPI_Isend` of a typed slice: starts a standard-mode send now and
    /// returns its request. The slice stays borrowed until the request
    /// completes, as MPI requires, though mpx has already copied the data.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx_core::Result<()> {
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
    pub fn isend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(SendBuf::typed(buf), dest, tag, SendMode::Standard)
    }

    /// `MPI_Isend` of any buffer (a derived datatype, packed bytes).
    ///
    /// # Cancel safety
    /// As [`isend`](Comm::isend).
    pub fn isend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(buf, dest, tag, SendMode::Standard)
    }

    /// `MPI_Ibsend`: copies the data into the attached buffer; the request is
    /// complete at once (or failed with [`Error::BufferExhausted`]).
    ///
    /// # Cancel safety
    /// The request is complete when returned; dropping it changes nothing.
    pub fn ibsend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(SendBuf::typed(buf), dest, tag, SendMode::Buffered)
    }

    /// `MPI_Ibsend` of any buffer.
    ///
    /// # Cancel safety
    /// As [`ibsend`](Comm::ibsend).
    pub fn ibsend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(buf, dest, tag, SendMode::Buffered)
    }

    /// `MPI_Issend`: completes once a matching receive has started, even if
    /// its owner has not waited on it yet.
    ///
    /// # Cancel safety
    /// Dropping the request lets the send complete in the background.
    pub fn issend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(SendBuf::typed(buf), dest, tag, SendMode::Synchronous)
    }

    /// `MPI_Issend` of any buffer.
    ///
    /// # Cancel safety
    /// As [`issend`](Comm::issend).
    pub fn issend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(buf, dest, tag, SendMode::Synchronous)
    }

    /// `MPI_Irsend`: fails with [`Error::NotReady`] if no matching receive
    /// was posted when the message arrived.
    ///
    /// # Cancel safety
    /// Dropping the request lets the send complete in the background; a
    /// failure is then reported through `tracing`.
    pub fn irsend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(SendBuf::typed(buf), dest, tag, SendMode::Ready)
    }

    /// `MPI_Irsend` of any buffer.
    ///
    /// # Cancel safety
    /// As [`irsend`](Comm::irsend).
    pub fn irsend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> Request<'a> {
        self.start_send_buf(buf, dest, tag, SendMode::Ready)
    }

    /// A standard send of an owned `Vec`, as a `'static` request that can be
    /// spawned. When `T`'s datatype is contiguous (no padding) the vector
    /// becomes the message without a copy.
    ///
    /// # Cancel safety
    /// As [`isend`](Comm::isend).
    pub fn isend_vec<T: MpiType>(&self, buf: Vec<T>, dest: impl Into<Dest>, tag: i32) -> Request<'static> {
        let pack = move |repr: Repr| {
            let datatype = T::datatype();
            if datatype.is_contiguous() && repr == Repr::Native {
                let signature = datatype.signature().repeat(buf.len() as u64);
                let data = Bytes::from_owner(ContiguousVec(buf));
                Ok(Packed { data, repr, signature: Some((signature.hash(), signature.len())), desc_len: 0 })
            } else {
                SendBuf::typed(&buf).pack(repr)
            }
        };
        self.start_send(pack, dest.into(), tag, SendMode::Standard, self.context)
    }

    /// A standard send of owned `packed` bytes, without a copy, as a
    /// `'static` request. The message carries no type signature: receive it
    /// with any type.
    ///
    /// # Cancel safety
    /// As [`isend`](Comm::isend).
    pub fn isend_bytes(&self, data: Bytes, dest: impl Into<Dest>, tag: i32) -> Request<'static> {
        self.start_send(|_| Ok(Packed::untyped(data)), dest.into(), tag, SendMode::Standard, self.context)
    }

    /// `MPI_Send` of a typed slice: a standard-mode send. It may complete as
    /// soon as the data is buffered at the receiver, or wait for a matching
    /// receive when the receiver's budget for unexpected data from this rank
    /// is spent (which throttles a producer that outpaces its consumer).
    ///
    /// # Cancel safety
    /// Like every operation, the send starts when `send` is called, before
    /// the future is first polled: dropping the future at any point lets the
    /// send complete in the background.
    pub fn send<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.isend(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Send` of any buffer (a derived datatype, packed bytes).
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send).
    pub fn send_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.isend_buf(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Bsend`: copies the data into the attached buffer and returns at
    /// once. A send that does not fit (or with no buffer attached) is
    /// [`Error::BufferExhausted`] and sends nothing.
    ///
    /// # Cancel safety
    /// Completes on its first poll.
    pub fn bsend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.ibsend(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Bsend` of any buffer.
    ///
    /// # Cancel safety
    /// Completes on its first poll.
    pub fn bsend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.ibsend_buf(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Ssend`: completes only once a matching receive has started.
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send): a dropped synchronous send is still matched
    /// and delivered.
    pub fn ssend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.issend(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Ssend` of any buffer.
    ///
    /// # Cancel safety
    /// As [`ssend`](Comm::ssend).
    pub fn ssend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.issend_buf(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Rsend`: valid only if the matching receive is already posted.
    /// If it is not, the message is not delivered and the result is
    /// [`Error::NotReady`] (MPI leaves this undefined; mpx reports it).
    ///
    /// # Cancel safety
    /// As [`send`](Comm::send).
    pub fn rsend<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.irsend(buf, dest, tag);
        async move { request.await.map(drop) }
    }

    /// `MPI_Rsend` of any buffer.
    ///
    /// # Cancel safety
    /// As [`rsend`](Comm::rsend).
    pub fn rsend_buf<'a>(&self, buf: SendBuf<'a>, dest: impl Into<Dest>, tag: i32) -> impl Future<Output = Result<()>> + Send + 'a {
        let request = self.irsend_buf(buf, dest, tag);
        async move { request.await.map(drop) }
    }
}
