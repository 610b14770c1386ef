//! What a completed operation reports ([`Status`]).

use crate::datatype::Datatype;
use crate::error::{Error, Result};
use crate::mpi_type::MpiType;

/// What a completed receive reports (`MPI_Status`).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |comm| async move {
/// use mpx::Any;
/// comm.send(&[1u16, 2, 3], 0, 4).await?; // to itself
/// let mut buf = [0u16; 8];
/// let status = comm.recv_into(&mut buf, Any, Any).await?;
/// assert_eq!((status.source, status.tag, status.bytes), (Some(0), Some(4), 6));
/// assert!(!status.test_cancelled() && status.error.is_none());
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The sender's rank, or `None` for the null process.
    pub source: Option<usize>,
    /// The message's tag, or `None` for the null process.
    pub tag: Option<i32>,
    /// Bytes received, in this rank's native representation. A probe,
    /// which knows no datatype yet, reports the bytes as they travel; they
    /// differ for external32 messages holding types whose external32 size
    /// is not their native one (on most 64-bit hosts `long`, `unsigned
    /// long`, `wchar` and the `long_int` pair), so a count
    /// taken from such a probe's status ([`Status::count`],
    /// [`Status::get_count`]) may be short: size a buffer for those from
    /// the sender's own count, or receive with `recv_vec`, which sizes
    /// itself.
    pub bytes: u64,
    /// The receive was cancelled before it matched.
    pub cancelled: bool,
    /// The operation's error, for statuses that report a failed operation
    /// (MPI's `MPI_ERROR` field): see [`Status::from_outcome`]. Operations
    /// return `Result<Status>`, so a status they return has `None` here.
    pub error: Option<Error>,
}

impl Status {
    /// The status of an operation on the null process: no source, no tag,
    /// no data.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::{Status, PROC_NULL};
    /// let mut x = 5u32;
    /// let status = comm.recv_into(&mut x, PROC_NULL, 0).await?;
    /// assert_eq!(status, Status::empty());
    /// assert_eq!((status.source, status.tag, status.bytes, x), (None, None, 0, 5));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn empty() -> Status {
        Status { source: None, tag: None, bytes: 0, cancelled: false, error: None }
    }

    /// The status of a message from `source` with `tag` and `bytes` of data.
    ///
    /// ```
    /// use mpx::Status;
    /// let status = Status::of(2, 7, 24);
    /// assert_eq!((status.source, status.tag), (Some(2), Some(7)));
    /// assert_eq!(status.count::<f64>(), Some(3));
    /// ```
    pub fn of(source: usize, tag: i32, bytes: u64) -> Status {
        Status { source: Some(source), tag: Some(tag), bytes, ..Status::empty() }
    }

    /// Folds an operation's outcome into one status, MPI style
    /// (`MPI_ERR_IN_STATUS`): a failure becomes an empty status whose
    /// `error` is set.
    ///
    /// ```
    /// use mpx::{ErrorKind, Status};
    /// let st = Status::from_outcome(Err(ErrorKind::TypeMismatch.into()));
    /// assert_eq!(st.error.unwrap(), ErrorKind::TypeMismatch);
    /// ```
    pub fn from_outcome(outcome: Result<Status>) -> Status {
        outcome.unwrap_or_else(|e| Status { error: Some(e), ..Status::empty() })
    }

    /// `MPI_Get_count`: whole items of `datatype` received, or `None` if a
    /// partial item arrived.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::Datatype;
    /// comm.send(&[1.0f64, 2.0, 3.0][..], 0, 0).await?; // to itself
    /// let mut buf = [0.0f64; 4];
    /// let status = comm.recv_into(&mut buf[..], 0, 0).await?;
    /// assert_eq!(status.get_count(&Datatype::double()), Some(3));
    /// let pair = Datatype::contiguous(2, &Datatype::double())?;
    /// assert_eq!(status.get_count(&pair), None); // one and a half pairs
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn get_count(&self, datatype: &Datatype) -> Option<u64> {
        datatype.get_count(self.bytes)
    }

    /// `MPI_Get_elements`: basic elements received.
    ///
    /// ```
    /// use mpx::{Datatype, Status};
    /// let pair = Datatype::contiguous(2, &Datatype::double())?;
    /// let status = Status::of(0, 0, 40); // five doubles: two pairs and a half
    /// assert_eq!(status.get_count(&pair), None);
    /// assert_eq!(status.get_elements(&pair), 5);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn get_elements(&self, datatype: &Datatype) -> u64 {
        datatype.get_elements(self.bytes)
    }

    /// `MPI_Get_count` for the datatype of `T`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// if comm.rank() == 0 {
    ///     comm.send(&[1u32, 2, 3], 1, 0).await?;
    /// } else {
    ///     let mut buf = [0u32; 8];
    ///     let status = comm.recv_into(&mut buf, 0, 0).await?;
    ///     assert_eq!(status.count::<u32>(), Some(3)); // of the 8 there was room for
    ///     assert_eq!(status.count::<[u32; 2]>(), None); // not whole pairs
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn count<T: MpiType>(&self) -> Option<u64> {
        self.get_count(&T::datatype())
    }

    /// `MPI_Test_cancelled`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// let mut buf = [0u8; 4];
    /// let mut recv = comm.irecv(&mut buf, 0, 0);
    /// recv.cancel();
    /// let status = recv.await?;
    /// assert!(status.test_cancelled());
    /// assert_eq!(status.bytes, 0);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn test_cancelled(&self) -> bool {
        self.cancelled
    }
}

