//! One buffer, several operations: [`Comm::exchange`] runs a list of sends
//! and receives over one `&mut` buffer at once (the shape of MPI's
//! `MPI_Neighbor_alltoallw`: a halo exchange), and [`ExchangeBuf::split`]
//! cuts one buffer into described receive and send buffers for operations
//! of the caller's choice.
//!
//! Both check at run time, before anything starts, that no receive's
//! typemap overlaps another receive's (or its own) or a send's; sends may
//! overlap each other, since they only read. The check works on the byte
//! runs of the datatypes' compiled programs, sorted, and never expands a
//! typemap element by element: a column of a 1000×1000 array is 1000 runs,
//! a band of whole rows one run.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::buffer::{RecvBuf, SendBuf};
use super::selectors::{Peer, Source, TagSel};
use super::{Comm, Status};
use crate::datatype::Datatype;
use crate::error::{Error, Result};
use crate::mpi_type::MpiType;
use crate::pack::disjoint::{Access, Part, Values};
use crate::pack::RegionMut;
use crate::request::Request;

/// One send or receive of an exchange: `count` items of a datatype laid
/// over the exchange's buffer, a peer and a tag.
///
/// A transfer list describes where each face and ghost region lies in the
/// buffer, so it is built once and reused for every exchange over buffers
/// of the same layout.
///
/// ```
/// use mpx::{comm::Transfer, Datatype, Order, PROC_NULL};
/// // Row 1 of a 4x4 array of doubles goes up; row 0 is filled from above.
/// let row = |r| Datatype::subarray(&[4, 4], &[1, 4], &[r, 0], Order::C, &Datatype::double());
/// let up = 3; // the rank above, or PROC_NULL at the top edge
/// let halo = [Transfer::send(1, &row(1)?, up, 0), Transfer::recv(1, &row(0)?, up, 1)];
/// let edge = [Transfer::send(1, &row(1)?, PROC_NULL, 0), Transfer::recv(1, &row(0)?, PROC_NULL, 1)];
/// # let _ = (halo, edge);
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Transfer {
    datatype: Datatype,
    count: u64,
    direction: Direction,
}

#[derive(Debug, Clone, Copy)]
enum Direction {
    Send { dest: Peer, tag: i32 },
    Recv { source: Source, tag: TagSel },
}

impl Transfer {
    /// A standard-mode send of `count` items of `datatype` read from the
    /// buffer, to `dest` (a rank or [`PROC_NULL`](super::PROC_NULL)) with
    /// `tag`.
    ///
    /// ```
    /// use mpx::{comm::Transfer, Datatype};
    /// let column = Datatype::vector(4, 1, 4, &Datatype::double())?;
    /// let east = Transfer::send(1, &column, 1, 7);
    /// # let _ = east;
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn send(count: u64, datatype: &Datatype, dest: impl Into<Peer>, tag: i32) -> Transfer {
        Transfer { datatype: datatype.clone(), count, direction: Direction::Send { dest: dest.into(), tag } }
    }

    /// A receive of up to `count` items of `datatype` written into the
    /// buffer, from `source` (a rank, [`Any`](super::Any) or
    /// [`PROC_NULL`](super::PROC_NULL)) with `tag` (or [`Any`](super::Any)).
    ///
    /// ```
    /// use mpx::{comm::Transfer, Datatype, PROC_NULL};
    /// let column = Datatype::vector(4, 1, 4, &Datatype::double())?;
    /// let west_ghost = Transfer::recv(1, &column, PROC_NULL, 7);
    /// # let _ = west_ghost;
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn recv(count: u64, datatype: &Datatype, source: impl Into<Source>, tag: impl Into<TagSel>) -> Transfer {
        Transfer {
            datatype: datatype.clone(),
            count,
            direction: Direction::Recv { source: source.into(), tag: tag.into() },
        }
    }

    fn part(&self) -> Part<'_> {
        let access = match self.direction {
            Direction::Send { .. } => Access::Read,
            Direction::Recv { .. } => Access::Write,
        };
        Part { datatype: &self.datatype, count: self.count, access, offset: 0 }
    }
}

/// The one buffer an exchange (or a [`split`](ExchangeBuf::split)) works
/// on: raw bytes ([`RegionMut`]), or a typed slice, array or `Vec` of an
/// [`MpiType`].
///
/// In a typed buffer, every part must touch only bytes that hold data of
/// the element type (never its padding), and receives need a type that
/// accepts every bit pattern there (no `bool`, `char` or enums); breaking
/// either is [`ErrorKind::InvalidDatatype`](crate::ErrorKind::InvalidDatatype).
///
/// ```
/// use mpx::{comm::ExchangeBuf, RegionMut};
/// let mut grid = vec![0.0f64; 16];
/// let typed = ExchangeBuf::from(&mut grid);
/// # drop(typed);
/// let mut bytes = [0u8; 64];
/// let raw = ExchangeBuf::from(RegionMut::with_origin(&mut bytes, 8)?);
/// # drop(raw);
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug)]
pub struct ExchangeBuf<'a> {
    region: RegionMut<'a>,
    /// What a typed buffer holds.
    values: Option<Values>,
}

impl<'a> From<RegionMut<'a>> for ExchangeBuf<'a> {
    fn from(region: RegionMut<'a>) -> ExchangeBuf<'a> {
        ExchangeBuf { region, values: None }
    }
}

impl<'a, T: MpiType> From<&'a mut [T]> for ExchangeBuf<'a> {
    fn from(values: &'a mut [T]) -> ExchangeBuf<'a> {
        // SAFETY: the same memory, seen as values that may be invalid.
        let view = unsafe {
            std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<std::mem::MaybeUninit<T>>(), values.len())
        };
        // SAFETY: the region is used only through parts checked against
        // `Values::of::<T>()` (`ExchangeBuf::handles`): they touch only
        // typemap bytes of `T`, and write only where any bit pattern is
        // valid.
        let region = unsafe { RegionMut::typed(view) };
        ExchangeBuf { region, values: Some(Values::of::<T>()) }
    }
}

impl<'a, T: MpiType> From<&'a mut Vec<T>> for ExchangeBuf<'a> {
    fn from(values: &'a mut Vec<T>) -> ExchangeBuf<'a> {
        ExchangeBuf::from(values.as_mut_slice())
    }
}

impl<'a, T: MpiType, const N: usize> From<&'a mut [T; N]> for ExchangeBuf<'a> {
    fn from(values: &'a mut [T; N]) -> ExchangeBuf<'a> {
        ExchangeBuf::from(values.as_mut_slice())
    }
}

impl<'a> ExchangeBuf<'a> {
    /// Checks `parts` against the buffer and gives one handle per part.
    ///
    /// # Safety
    /// As [`RegionMut::split_parts`]: each handle may only be used through
    /// its own part's datatype, count and access.
    unsafe fn handles(self, parts: &[Part<'_>]) -> Result<Vec<RegionMut<'a>>> {
        // SAFETY: our caller's contract is split_parts' own.
        unsafe { self.region.split_parts(parts, self.values.as_ref()) }
    }

    /// Cuts the buffer into described receive buffers (`count` items of a
    /// datatype each) and send buffers, for operations of the caller's
    /// choice (any mode, persistent or not, each awaited on its own). No
    /// receive may overlap another receive (or itself) or a send:
    /// [`ErrorKind::Overlap`](crate::ErrorKind::Overlap) otherwise, whose positions count the receives
    /// first, then the sends. A part outside the buffer is
    /// [`ErrorKind::OutOfBounds`](crate::ErrorKind::OutOfBounds).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::{comm::ExchangeBuf, Datatype};
    /// let other = 1 - comm.rank();
    /// // Send the first half of the array and receive into the second.
    /// let mut data = [comm.rank() as f64; 8];
    /// let half = Datatype::contiguous(4, &Datatype::double())?;
    /// let second = Datatype::hindexed(&[1], &[32], &half)?;
    /// let (mut recvs, sends) = ExchangeBuf::from(&mut data).split(&[(1, &second)], &[(1, &half)])?;
    /// let (recv, send) = (recvs.remove(0), sends[0].clone());
    /// let (got, sent) = futures::join!(comm.recv_into(recv, other, 0), comm.isend(send, other, 0));
    /// got?;
    /// sent?;
    /// assert_eq!(data[4..], [other as f64; 4]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn split(
        self,
        recvs: &[(u64, &Datatype)],
        sends: &[(u64, &Datatype)],
    ) -> Result<(Vec<RecvBuf<'a>>, Vec<SendBuf<'a>>)> {
        let parts: Vec<Part<'_>> = recvs
            .iter()
            .map(|&(count, datatype)| Part { datatype, count, access: Access::Write, offset: 0 })
            .chain(sends.iter().map(|&(count, datatype)| Part { datatype, count, access: Access::Read, offset: 0 }))
            .collect();
        // SAFETY: each handle becomes the buffer of its own part's datatype,
        // count and access.
        let mut handles = unsafe { self.handles(&parts)? }.into_iter().zip(&parts);
        let recv_bufs =
            handles.by_ref().take(recvs.len()).map(|(region, p)| RecvBuf::new(region, p.count, p.datatype)).collect();
        let send_bufs = handles.map(|(region, p)| SendBuf::new(region.into_region(), p.count, p.datatype)).collect();
        Ok((recv_bufs, send_bufs))
    }
}

impl Comm {
    /// Runs every transfer of the list over one buffer at once, and
    /// completes when all are done: MPI's `MPI_Neighbor_alltoallw`, with
    /// the sends and receives of a halo exchange described by datatypes
    /// over the grid itself, so faces leave and ghost regions fill without
    /// copies by hand.
    ///
    /// `buffer` is raw bytes ([`RegionMut`]) or a typed slice, array or
    /// `Vec` (see [`ExchangeBuf`]). Before anything starts, the call checks
    /// the peers and tags, that every transfer lies inside the buffer, and
    /// that no receive overlaps another receive (or itself) or a send
    /// ([`ErrorKind::Overlap`](crate::ErrorKind::Overlap), naming the transfers by their positions in the
    /// list); if any check fails, nothing is started and the future
    /// resolves to that error. The check costs `O(r log r)` for the `r`
    /// byte runs of the datatypes' compiled programs, never their element
    /// count. Sends may overlap each other. Transfers with
    /// [`PROC_NULL`](super::PROC_NULL) are checked like the others (a list
    /// valid on one rank is valid on all) and move no data.
    ///
    /// Every send and receive starts when `exchange` is called (sends in
    /// standard mode, their data copied before it returns). The future
    /// resolves to one status per transfer, in list order (empty for sends
    /// and null peers), once all have completed; if some failed, to the
    /// first failure in list order, still only once all have completed.
    ///
    /// Receives write into the buffer only inside the poll that completes
    /// the exchange, all of them in that one poll: before it, every message
    /// that has arrived waits in the engine.
    ///
    /// A ring: each rank sends the first half of its array to the right
    /// and receives the second half from the left, in one buffer.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// use mpx::{comm::Transfer, Datatype};
    /// let (rank, size) = (comm.rank(), comm.size());
    /// let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    /// let half = Datatype::contiguous(4, &Datatype::double())?;
    /// let second_half = Datatype::hindexed(&[1], &[32], &half)?;
    /// let ring = [Transfer::send(1, &half, right, 0), Transfer::recv(1, &second_half, left, 0)];
    ///
    /// let mut data = [rank as f64; 8];
    /// let statuses = comm.exchange(&mut data, &ring).await?;
    /// assert_eq!(statuses[1].source, Some(left));
    /// assert_eq!(data[..4], [rank as f64; 4]);
    /// assert_eq!(data[4..], [left as f64; 4]);
    ///
    /// // Receiving into the half being sent is rejected before anything starts.
    /// let clash = [Transfer::send(1, &half, right, 1), Transfer::recv(1, &half, left, 1)];
    /// let err = comm.exchange(&mut data, &clash).await.unwrap_err();
    /// assert_eq!(err, mpx::ErrorKind::Overlap { first: 0, second: 1, byte: 0 });
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe, and all or nothing for the buffer: dropping the future
    /// before it completes writes nothing into the buffer. Every receive is
    /// withdrawn, or gives its message back to the head of the queue (see
    /// the [module docs](super)), and the sends complete in the background.
    pub fn exchange<'a>(&self, buffer: impl Into<ExchangeBuf<'a>>, transfers: &[Transfer]) -> Exchange<'a> {
        match self.start_exchange(buffer.into(), transfers) {
            Ok(requests) => Exchange::running(requests),
            Err(e) => Exchange { rejected: Some(e), ..Exchange::running(Vec::new()) },
        }
    }

    /// Checks every transfer, then starts them all, in list order.
    fn start_exchange<'a>(&self, buffer: ExchangeBuf<'a>, transfers: &[Transfer]) -> Result<Vec<Request<'a>>> {
        for t in transfers {
            match t.direction {
                Direction::Send { dest, tag } => {
                    self.dest(dest)?;
                    Comm::tag(tag.into())?;
                }
                Direction::Recv { source, tag } => {
                    self.spec(source, tag, self.context)?;
                }
            }
        }
        let parts: Vec<Part<'_>> = transfers.iter().map(Transfer::part).collect();
        // SAFETY: each handle becomes the buffer of its own transfer's
        // datatype, count and direction.
        let handles = unsafe { buffer.handles(&parts)? };
        let started = transfers.iter().zip(handles).map(|(t, region)| match t.direction {
            Direction::Send { dest, tag } => {
                self.isend(SendBuf::new(region.into_region(), t.count, &t.datatype), dest, tag)
            }
            Direction::Recv { source, tag } => self.irecv(RecvBuf::new(region, t.count, &t.datatype), source, tag),
        });
        Ok(started.collect())
    }
}

/// A running [`Comm::exchange`]: a future resolving to one [`Status`] per
/// transfer, in list order, once every send and receive has completed.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |comm| async move {
/// use mpx::{comm::{Exchange, Transfer}, Datatype};
/// let int = Datatype::int();
/// let second = Datatype::hindexed(&[1], &[4], &int)?;
/// // Rank 0 sends its first int to itself, into its second.
/// let mut pair = [5i32, 0];
/// let exchange: Exchange<'_> = comm.exchange(&mut pair, &[Transfer::send(1, &int, 0, 0), Transfer::recv(1, &second, 0, 0)]);
/// let statuses = exchange.await?;
/// assert_eq!((pair, statuses[1].bytes), ([5, 5], 4));
/// # Ok(()) }).await?; Ok(()) }
/// ```
///
/// # Cancel safety
/// See [`Comm::exchange`]: dropping it writes nothing into the buffer and
/// loses no message.
#[must_use = "an exchange does nothing useful unless awaited; dropping it withdraws its receives"]
pub struct Exchange<'a> {
    /// The arguments' error: nothing was started.
    rejected: Option<Error>,
    /// One request per transfer, in list order.
    requests: Vec<Request<'a>>,
    /// Each request's outcome, once taken.
    outcomes: Vec<Option<Result<Status>>>,
    /// Every request has finished in the engine: outcomes are being taken.
    taking: bool,
}

impl std::fmt::Debug for Exchange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let taken = self.outcomes.iter().filter(|o| o.is_some()).count();
        write!(f, "Exchange({} transfers, {taken} taken, rejected: {:?})", self.requests.len(), self.rejected)
    }
}

impl<'a> Exchange<'a> {
    fn running(requests: Vec<Request<'a>>) -> Exchange<'a> {
        let outcomes = requests.iter().map(|_| None).collect();
        Exchange { rejected: None, requests, outcomes, taking: false }
    }
}

impl Future for Exchange<'_> {
    type Output = Result<Vec<Status>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Vec<Status>>> {
        let this = self.get_mut();
        if let Some(e) = this.rejected.take() {
            return Poll::Ready(Err(e));
        }
        if !this.taking {
            // Every request is polled, so each one wakes this task.
            let unsettled = this.requests.iter_mut().map(|r| r.poll_settled(cx)).filter(Poll::is_pending).count();
            if unsettled > 0 {
                return Poll::Pending;
            }
            this.taking = true;
        }
        // All have finished: unpack every receive now, in this one poll.
        for (request, outcome) in this.requests.iter_mut().zip(&mut this.outcomes) {
            if outcome.is_none() {
                if let Poll::Ready(o) = Pin::new(request).poll(cx) {
                    *outcome = Some(o);
                }
            }
        }
        if this.outcomes.iter().any(Option::is_none) {
            return Poll::Pending;
        }
        this.requests.clear();
        Poll::Ready(std::mem::take(&mut this.outcomes).into_iter().flatten().collect())
    }
}
