//! How operations name peers and tags.
//!
//! Ranks are `usize` and tags `i32` everywhere. A [`Peer`] is a rank or
//! the null process ([`PROC_NULL`]): one value that serves as the
//! destination of sends and the source of receives, as a neighbour that may
//! not exist does in a halo exchange. Receives also take [`Any`] for the
//! source or the tag.

/// The largest user tag (`MPI_TAG_UB`). Tags are `0..=TAG_UB`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |comm| async move {
/// use mpx::{ErrorKind, TAG_UB};
/// comm.send(&1u8, 0, TAG_UB).await?; // to itself
/// assert_eq!(comm.recv::<u8>(0, TAG_UB).await?.1.tag, Some(TAG_UB));
/// assert!(matches!(comm.send(&1u8, 0, -1).await, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidTag(-1))), "tags are 0..=TAG_UB");
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub const TAG_UB: i32 = i32::MAX;

/// Wildcard for a source rank or a tag (`MPI_ANY_SOURCE`, `MPI_ANY_TAG`).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(3, |comm| async move {
/// use mpx::Any;
/// if comm.rank() == 0 {
///     // One message from each other rank, whichever comes first, any tag.
///     let mut from = vec![];
///     for _ in 1..comm.size() {
///         let (value, status) = comm.recv::<u32>(Any, Any).await?;
///         assert_eq!(status.tag, Some(value as i32 * 10));
///         from.push(status.source.unwrap());
///     }
///     from.sort();
///     assert_eq!(from, [1, 2]);
/// } else {
///     comm.send(&(comm.rank() as u32), 0, comm.rank() as i32 * 10).await?;
/// }
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Any;

/// The null process (`MPI_PROC_NULL`): sends to it and receives from it
/// complete at once and move no data.
///
/// ```
/// use mpx::{comm::ProcNull, Peer, Source};
/// assert_eq!(Peer::from(ProcNull), Peer::Null);
/// assert_eq!(Source::from(ProcNull), Source::Null);
/// assert!(Peer::from(ProcNull).is_null());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcNull;

/// `MPI_PROC_NULL`: a send to it and a receive from it complete at once
/// and move nothing, with an empty [`Status`](crate::Status) (every
/// receive that fills a buffer, `recv_vec` (an empty vector), `irecv_owned`,
/// `irecv_bytes`, a stream of [`Comm::incoming`](crate::Comm::incoming)
/// (empty), probes). The one exception is [`Comm::recv`](crate::Comm::recv)
/// of a single value, which has no value to return: it fails with
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument), so a
/// neighbour that may be null receives into a buffer instead.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |comm| async move {
/// use mpx::PROC_NULL;
/// comm.send(&[1u32, 2], PROC_NULL, 0).await?; // completes at once
/// let mut buf = [9u32; 2];
/// let status = comm.recv_into(&mut buf[..], PROC_NULL, 0).await?;
/// assert_eq!((buf, status.source, status.bytes), ([9, 9], None, 0)); // nothing moved
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub const PROC_NULL: ProcNull = ProcNull;

/// A peer: a rank of the communicator, or the null process. Sends take it
/// as their destination and receives as their source, so one neighbour
/// value serves both directions; operations with the null peer complete at
/// once and move no data.
///
/// ```
/// use mpx::{Peer, PROC_NULL};
/// // The left neighbour on a non-periodic line: none for rank 0.
/// let left = |rank: usize| Peer::from(rank.checked_sub(1));
/// assert_eq!(left(3), Peer::Rank(2));
/// assert_eq!(left(0), Peer::Null);
/// assert_eq!(Peer::from(PROC_NULL), Peer::Null);
/// assert_eq!(Peer::Rank(2).rank(), Some(2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A rank of the communicator.
    Rank(usize),
    /// The null process.
    Null,
}

impl Peer {
    /// The rank, or `None` for the null process.
    ///
    /// ```
    /// use mpx::Peer;
    /// assert_eq!(Peer::Rank(3).rank(), Some(3));
    /// assert_eq!(Peer::Null.rank(), None);
    /// // The neighbours that exist.
    /// let neighbours = [Peer::Null, Peer::Rank(1), Peer::Rank(4)];
    /// assert_eq!(neighbours.iter().filter_map(|p| p.rank()).collect::<Vec<_>>(), [1, 4]);
    /// ```
    pub fn rank(self) -> Option<usize> {
        match self {
            Peer::Rank(r) => Some(r),
            Peer::Null => None,
        }
    }

    /// Whether this is the null process.
    ///
    /// ```
    /// use mpx::Peer;
    /// // The right neighbour on a non-periodic line of 4 ranks.
    /// let right = |rank: usize| Peer::from((rank + 1 < 4).then_some(rank + 1));
    /// assert!(!right(2).is_null());
    /// assert!(right(3).is_null());
    /// ```
    pub fn is_null(self) -> bool {
        self == Peer::Null
    }
}

/// Where a receive or probe takes messages from: a rank, [`Any`] rank, or
/// the null process. Built from a `usize` rank, a [`Peer`], [`Any`] or
/// [`PROC_NULL`].
///
/// ```
/// use mpx::{Any, Peer, Source};
/// assert_eq!(Source::from(3), Source::Rank(3));
/// assert_eq!(Source::from(Peer::Null), Source::Null);
/// assert_eq!(Source::from(Any), Source::Any);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// A rank of the communicator.
    Rank(usize),
    /// Any source.
    Any,
    /// The null process.
    Null,
}

/// Which tag a receive or probe accepts: an `i32` tag or [`Any`].
///
/// ```
/// use mpx::{Any, TagSel};
/// assert_eq!(TagSel::from(7), TagSel::Tag(7));
/// assert_eq!(TagSel::from(Any), TagSel::Any);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TagSel {
    /// This tag.
    Tag(i32),
    /// Any tag.
    Any,
}

impl From<usize> for Peer {
    fn from(r: usize) -> Peer {
        Peer::Rank(r)
    }
}

impl From<Option<usize>> for Peer {
    fn from(r: Option<usize>) -> Peer {
        r.map_or(Peer::Null, Peer::Rank)
    }
}

impl From<ProcNull> for Peer {
    fn from(_: ProcNull) -> Peer {
        Peer::Null
    }
}

impl From<usize> for Source {
    fn from(r: usize) -> Source {
        Source::Rank(r)
    }
}

impl From<Peer> for Source {
    fn from(p: Peer) -> Source {
        match p {
            Peer::Rank(r) => Source::Rank(r),
            Peer::Null => Source::Null,
        }
    }
}

impl From<Option<usize>> for Source {
    fn from(r: Option<usize>) -> Source {
        Peer::from(r).into()
    }
}

impl From<ProcNull> for Source {
    fn from(_: ProcNull) -> Source {
        Source::Null
    }
}

impl From<Any> for Source {
    fn from(_: Any) -> Source {
        Source::Any
    }
}

impl From<i32> for TagSel {
    fn from(t: i32) -> TagSel {
        TagSel::Tag(t)
    }
}

impl From<Any> for TagSel {
    fn from(_: Any) -> TagSel {
        TagSel::Any
    }
}
