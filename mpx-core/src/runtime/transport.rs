//! The boundary between an endpoint and the network (or memory) that
//! carries its frames.

use std::sync::Arc;
use std::task::{Context, Poll};

use super::LocalWorld;

use crate::error::{Error, Result};
use crate::proto::wire::Frame;

/// Why a transport did not take a frame.
#[derive(Debug)]
pub enum SendError {
    /// The link to the peer cannot take more now: the frame comes back, and
    /// the transport calls [`Endpoint::writable`](crate::Endpoint::writable)
    /// for that peer once it can. Frames to other peers still go.
    Full(Frame),
    /// The peer is unreachable; the endpoint fails it, and what depends on
    /// it gets [`ErrorKind::ProcessFailed`](crate::ErrorKind::ProcessFailed) with this error as its source
    /// (see [`Error::peer_failure`]).
    Failed(Error),
}

/// Carries frames between ranks: the in-memory loopback and the QUIC
/// transport in `mpx-net` implement it.
///
/// The endpoint pulls frames from its engine per peer and offers them with
/// [`send`](Transport::send), under the endpoint's lock, in the order the
/// engine produced them; `send` must not block and must not call back into
/// the endpoint. A transport keeps its own buffering per peer bounded and
/// answers [`SendError::Full`] beyond it, so one slow peer holds back only
/// its own frames, and the frames waiting for it stay in the engine, whose
/// memory for them is bounded by credit. Frames to this rank itself never
/// reach the transport.
///
/// This is quinn's pull model with the queue kept in the engine: the
/// engine holds each peer's frames, and hands them over only while the
/// transport says that peer's link can take more, so a transport's own
/// queue stays small and bounded while the engine's is bounded by credit.
/// Offering under the lock spares the common path a hop: a transport whose
/// link has room (the loopback always, QUIC while its per-peer queues are
/// below their caps) takes the frame at once, with no task switch.
///
/// Frames that arrive go to [`Endpoint::handle_frame`](crate::Endpoint::handle_frame)
/// from the transport's own driver, in the order the peer sent them; a
/// connection that breaks goes to
/// [`Endpoint::peer_failed`](crate::Endpoint::peer_failed).
pub trait Transport: Send + Sync + 'static {
    /// Offers `frame` for rank `dest` (never this rank).
    fn send(&self, dest: usize, frame: Frame) -> std::result::Result<(), SendError>;

    /// Called after the endpoint's lock is released, on the thread that
    /// offered frames with [`send`](Transport::send) while holding it
    /// (only then): a transport that can hand frames to their receivers
    /// itself, with no task switch (the loopback), does it here, where
    /// calling into endpoints is allowed. The default does nothing.
    fn deliver_offered(&self) {}

    /// Hands every frame that has already arrived to `deliver`, in order,
    /// without waiting. `test` calls use it to progress where no driver
    /// task gets to run (a polling loop on a current-thread runtime).
    /// Implementations must not interleave this with their driver's
    /// deliveries (hold the inbox while delivering).
    fn progress(&self, deliver: &mut dyn FnMut(usize, Frame)) {
        let _ = deliver;
    }

    /// Called from a program's task that is about to wait on the endpoint
    /// (a request not complete yet), before it does, without the
    /// endpoint's lock: a transport whose frames are read by a task of its
    /// own (QUIC) may read what has arrived here instead, handing frames to
    /// [`Endpoint::handle_frame`](crate::Endpoint::handle_frame), and have
    /// `cx` woken when more arrives, so the task that waits for a message
    /// is the one that runs when it comes, with no task in between. The
    /// transport's own tasks must still make progress when no program
    /// waits, or when the waker is a no-op (a `test` call). The default
    /// does nothing.
    fn poll_arrivals(&self, cx: &mut Context<'_>) {
        let _ = cx;
    }

    /// The endpoint has failed rank `rank` (on its own finding, or on the
    /// transport's word): nothing more is owed to it or awaited from it.
    /// What was offered for it before (its parting goodbye) may still go
    /// out, but [`poll_flush`](Transport::poll_flush) waits for it no
    /// more. Called with the endpoint's lock held: it must not call into
    /// the endpoint. The default does nothing.
    fn peer_lost(&self, rank: usize) {
        let _ = rank;
    }

    /// Ready once every frame taken by [`send`](Transport::send) has left
    /// this process (or its peer has failed); `finalize` waits for it,
    /// after the endpoint has closed, so no frame but a last goodbye
    /// follows the first call.
    fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let _ = cx;
        Poll::Ready(Ok(()))
    }

    /// Starts the flush without waiting for it (the endpoint's `close`
    /// and `abort`; `finalize` waits with
    /// [`poll_flush`](Transport::poll_flush)): the goodbyes go out, and
    /// peers waiting for this rank to end see it end. No task is to be
    /// woken for it. The default polls the flush once with a waker that
    /// wakes nobody.
    fn start_flush(&self) {
        let _ = self.poll_flush(&mut Context::from_waker(std::task::Waker::noop()));
    }

    /// Where the collectives of a world whose ranks all live in this
    /// process meet, without messages, and where its point-to-point
    /// messages meet their receivers, without frames, as the world says
    /// ([`LocalWorld::meeting`]): every endpoint of the world must get the
    /// same one, and every rank of the world must be an endpoint of this
    /// process. The default, `None`, has collectives exchange messages and
    /// messages travel as frames.
    fn local_world(&self) -> Option<Arc<LocalWorld>> {
        None
    }
}
