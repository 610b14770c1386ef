//! Persistent requests (`MPI_Send_init`, `MPI_Recv_init`, `MPI_Start`,
//! `MPI_Startall`).
//!
//! A persistent request fixes the arguments of an operation once and starts
//! it as often as needed. Each [`start`](Persistent::start) returns an
//! ordinary [`Request`] that borrows the persistent request, so its buffer
//! is out of reach while that start is in flight and usable again
//! (readable, and writable for owned buffers) between starts:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mpx_core::Result<()> {
//! # mpx_net::loopback::launch(2, |comm| async move {
//! use mpx_core::comm::persistent::Persistent;
//! let other = 1 - comm.rank();
//! let mut send = comm.send_init_vec(vec![0u32; 4], other, 0);
//! let mut recv = comm.recv_init_vec(vec![0u32; 4], other, 0);
//! for step in 1..=3u32 {
//!     send.buffer_mut().fill(step);
//!     let r = recv.start();
//!     let s = send.start();
//!     s.await?;
//!     r.await?;
//!     assert_eq!(recv.buffer(), &[step; 4]);
//! }
//! # Ok(()) }).await?; Ok(()) }
//! ```
//!
//! An inactive persistent request (one not started, or whose start has
//! completed) is, for the completion functions, a `None` entry or a
//! [`Request::inactive`]: waiting on it returns an empty status at once, and
//! `wait_any`/`wait_some` over only inactive entries report that nothing is
//! active, as MPI says.

use super::{Comm, Dest, SendBuf, Source, TagSel};
use crate::proto::engine::SendMode;
use crate::mpi_type::MpiType;
use crate::request::Request;

/// An operation that can be started repeatedly.
pub trait Persistent {
    /// `MPI_Start`: starts the operation; the returned request completes it
    /// and borrows `self` until then.
    fn start(&mut self) -> Request<'_>;
}

/// `MPI_Startall`: starts every request, returning their requests in order,
/// ready for [`wait_all`](crate::request::wait_all).
pub fn start_all<'b>(requests: impl IntoIterator<Item = &'b mut dyn Persistent>) -> Vec<Option<Request<'b>>> {
    requests.into_iter().map(|p| Some(p.start())).collect()
}

enum Storage<'a, T> {
    Borrowed(&'a [T]),
    Owned(Vec<T>),
}

/// A persistent send (`MPI_Send_init`, `MPI_Bsend_init`, `MPI_Ssend_init`,
/// `MPI_Rsend_init`). Each start packs the buffer's current contents.
pub struct PersistentSend<'a, T> {
    comm: Comm,
    buf: Storage<'a, T>,
    dest: Dest,
    tag: i32,
    mode: SendMode,
}

impl<T: MpiType> PersistentSend<'_, T> {
    /// The buffer.
    pub fn buffer(&self) -> &[T] {
        match &self.buf {
            Storage::Borrowed(b) => b,
            Storage::Owned(v) => v,
        }
    }
}

impl<T: MpiType> PersistentSend<'static, T> {
    /// The owned buffer, to fill between starts (a `'static` borrowed
    /// buffer is copied into an owned one first).
    pub fn buffer_mut(&mut self) -> &mut Vec<T> {
        if let Storage::Borrowed(b) = self.buf {
            self.buf = Storage::Owned(b.to_vec());
        }
        match &mut self.buf {
            Storage::Owned(v) => v,
            Storage::Borrowed(_) => unreachable!("converted above"),
        }
    }

    /// Gives the owned buffer back.
    pub fn into_buffer(self) -> Vec<T> {
        match self.buf {
            Storage::Owned(v) => v,
            Storage::Borrowed(b) => b.to_vec(),
        }
    }
}

impl<T: MpiType> Persistent for PersistentSend<'_, T> {
    fn start(&mut self) -> Request<'_> {
        let buf = match &self.buf {
            Storage::Borrowed(b) => SendBuf::typed(b),
            Storage::Owned(v) => SendBuf::typed(v),
        };
        self.comm.start_send_buf(buf, self.dest, self.tag, self.mode)
    }
}

/// A persistent receive (`MPI_Recv_init`).
pub struct PersistentRecv<'a, T> {
    comm: Comm,
    buf: RecvStorage<'a, T>,
    source: Source,
    tag: TagSel,
}

enum RecvStorage<'a, T> {
    Borrowed(&'a mut [T]),
    Owned(Vec<T>),
}

impl<T: MpiType> PersistentRecv<'_, T> {
    /// The buffer, holding what the last completed start received.
    pub fn buffer(&self) -> &[T] {
        match &self.buf {
            RecvStorage::Borrowed(b) => b,
            RecvStorage::Owned(v) => v,
        }
    }

    /// The buffer, writable between starts.
    pub fn buffer_mut(&mut self) -> &mut [T] {
        match &mut self.buf {
            RecvStorage::Borrowed(b) => b,
            RecvStorage::Owned(v) => v,
        }
    }
}

impl<T: MpiType> Persistent for PersistentRecv<'_, T> {
    fn start(&mut self) -> Request<'_> {
        let buf: &mut [T] = match &mut self.buf {
            RecvStorage::Borrowed(b) => b,
            RecvStorage::Owned(v) => v,
        };
        self.comm.irecv(buf, self.source, self.tag)
    }
}

impl Comm {
    fn persistent_send<'a, T>(&self, buf: Storage<'a, T>, dest: impl Into<Dest>, tag: i32, mode: SendMode) -> PersistentSend<'a, T> {
        PersistentSend { comm: self.clone(), buf, dest: dest.into(), tag, mode }
    }

    /// `MPI_Send_init`: a persistent standard send of a borrowed slice.
    pub fn send_init<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> PersistentSend<'a, T> {
        self.persistent_send(Storage::Borrowed(buf), dest, tag, SendMode::Standard)
    }

    /// `MPI_Bsend_init`.
    pub fn bsend_init<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> PersistentSend<'a, T> {
        self.persistent_send(Storage::Borrowed(buf), dest, tag, SendMode::Buffered)
    }

    /// `MPI_Ssend_init`.
    pub fn ssend_init<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> PersistentSend<'a, T> {
        self.persistent_send(Storage::Borrowed(buf), dest, tag, SendMode::Synchronous)
    }

    /// `MPI_Rsend_init`.
    pub fn rsend_init<'a, T: MpiType>(&self, buf: &'a [T], dest: impl Into<Dest>, tag: i32) -> PersistentSend<'a, T> {
        self.persistent_send(Storage::Borrowed(buf), dest, tag, SendMode::Ready)
    }

    /// `MPI_Send_init` with an owned buffer, writable between starts.
    pub fn send_init_vec<T: MpiType>(&self, buf: Vec<T>, dest: impl Into<Dest>, tag: i32) -> PersistentSend<'static, T> {
        self.persistent_send(Storage::Owned(buf), dest, tag, SendMode::Standard)
    }

    /// `MPI_Bsend_init` with an owned buffer.
    pub fn bsend_init_vec<T: MpiType>(&self, buf: Vec<T>, dest: impl Into<Dest>, tag: i32) -> PersistentSend<'static, T> {
        self.persistent_send(Storage::Owned(buf), dest, tag, SendMode::Buffered)
    }

    /// `MPI_Ssend_init` with an owned buffer.
    pub fn ssend_init_vec<T: MpiType>(&self, buf: Vec<T>, dest: impl Into<Dest>, tag: i32) -> PersistentSend<'static, T> {
        self.persistent_send(Storage::Owned(buf), dest, tag, SendMode::Synchronous)
    }

    /// `MPI_Rsend_init` with an owned buffer.
    pub fn rsend_init_vec<T: MpiType>(&self, buf: Vec<T>, dest: impl Into<Dest>, tag: i32) -> PersistentSend<'static, T> {
        self.persistent_send(Storage::Owned(buf), dest, tag, SendMode::Ready)
    }

    /// `MPI_Recv_init`: a persistent receive into a borrowed slice.
    pub fn recv_init<'a, T: MpiType>(&self, buf: &'a mut [T], source: impl Into<Source>, tag: impl Into<TagSel>) -> PersistentRecv<'a, T> {
        PersistentRecv { comm: self.clone(), buf: RecvStorage::Borrowed(buf), source: source.into(), tag: tag.into() }
    }

    /// `MPI_Recv_init` with an owned buffer.
    pub fn recv_init_vec<T: MpiType>(&self, buf: Vec<T>, source: impl Into<Source>, tag: impl Into<TagSel>) -> PersistentRecv<'static, T> {
        PersistentRecv { comm: self.clone(), buf: RecvStorage::Owned(buf), source: source.into(), tag: tag.into() }
    }
}
