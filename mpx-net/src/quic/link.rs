//! The transport side of the endpoint: a bounded outbox per peer, with one
//! queue per stream, that the endpoint fills ([`QuicTransport::send`])
//! and the peer's writer tasks drain.
//!
//! Rendezvous data travels on a stream of its own (the bulk stream), every
//! other frame on the control stream, so a large transfer never holds back
//! a small message or a control frame: when the bulk queue is full the
//! engine is refused only rendezvous data (see
//! [`Engine::unsend`](mpx_core::proto::engine::Engine::unsend)), and
//! messages still go.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use mpx_core::proto::wire::{Frame, Kind};
use mpx_core::runtime::{SendError, Transport};
use mpx_core::{Error, Result};

/// The two streams a connection carries each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Hellos, messages, rendezvous requests and answers, goodbyes.
    Control = 0,
    /// Rendezvous data.
    Bulk = 1,
}

impl Lane {
    /// The lane a frame travels in.
    pub(crate) fn of(frame: &Frame) -> Lane {
        if frame.header.kind == Kind::RndvData {
            Lane::Bulk
        } else {
            Lane::Control
        }
    }
}

/// Bytes (headers included) the control queue to one peer takes before it
/// refuses frames. The engine bounds what it produces by the credit and
/// slots the peer grants, so this is rarely reached.
///
/// With [`BULK_CAP`], this bounds what waits here for one peer at 4 MiB
/// (plus one frame per lane); beyond it, frames wait in the engine, bounded
/// by credit, and what quinn holds unacknowledged is bounded by its send
/// window (64 MiB per connection with [`Options::local`](super::Options::local)).
pub(crate) const CONTROL_CAP: usize = 2 << 20;

/// Bytes of rendezvous data queued for one peer before the bulk queue
/// refuses more: enough to keep the stream busy.
pub(crate) const BULK_CAP: usize = 2 << 20;

#[derive(Default)]
struct Queue {
    frames: VecDeque<Frame>,
    bytes: usize,
    writer: Option<Waker>,
    /// The writer has finished the stream and the peer has acknowledged it
    /// (or the peer failed).
    finished: bool,
}

#[derive(Default)]
struct OutState {
    lanes: [Queue; 2],
    /// The engine was refused a frame and waits for `writable`.
    refused: bool,
    /// The peer failed: frames for it are refused with this error.
    failed: Option<Error>,
    /// `finalize` is flushing: once drained, writers finish their streams.
    closing: bool,
    flush_waiter: Option<Waker>,
}

/// What the endpoint has queued for one peer.
#[derive(Default)]
pub(crate) struct Outbox {
    state: Mutex<OutState>,
}

/// What a writer gets from [`Outbox::poll_next`].
pub(crate) enum Next {
    /// A frame to write, and whether the engine waits to be told the
    /// outbox has room again.
    Frame(Frame, bool),
    /// Nothing more will come: finish the stream.
    Finish,
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, OutState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `frame`, or gives it back if its lane is full.
    fn push(&self, frame: Frame) -> std::result::Result<(), SendError> {
        let mut guard = self.lock();
        let st = &mut *guard;
        if let Some(e) = &st.failed {
            return Err(SendError::Failed(e.clone()));
        }
        let lane = Lane::of(&frame);
        let cap = if lane == Lane::Bulk { BULK_CAP } else { CONTROL_CAP };
        let size = frame.wire_len();
        let q = &mut st.lanes[lane as usize];
        if q.finished {
            // The stream is finished: only a last goodbye can come this late.
            return Ok(());
        }
        if q.bytes > 0 && q.bytes + size > cap {
            st.refused = true;
            return Err(SendError::Full(frame));
        }
        q.bytes += size;
        q.frames.push_back(frame);
        if let Some(w) = q.writer.take() {
            w.wake();
        }
        Ok(())
    }

    /// The next frame of `lane` for its writer.
    pub(crate) fn poll_next(&self, lane: Lane, cx: &mut Context<'_>) -> Poll<Next> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let q = &mut st.lanes[lane as usize];
        if let Some(frame) = q.frames.pop_front() {
            q.bytes -= frame.wire_len();
            let cap = if lane == Lane::Bulk { BULK_CAP } else { CONTROL_CAP };
            let room = q.bytes <= cap / 2;
            let wake_engine = room && std::mem::take(&mut st.refused);
            return Poll::Ready(Next::Frame(frame, wake_engine));
        }
        if st.closing || st.failed.is_some() {
            return Poll::Ready(Next::Finish);
        }
        q.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// `lane`'s stream is finished and acknowledged (or lost with its peer).
    pub(crate) fn finished(&self, lane: Lane) {
        let mut st = self.lock();
        st.lanes[lane as usize].finished = true;
        if let Some(w) = st.flush_waiter.take() {
            w.wake();
        }
    }

    /// The peer failed: frames for it are refused from now on, and its
    /// writers stop.
    pub(crate) fn fail(&self, error: Error) {
        let mut st = self.lock();
        st.failed.get_or_insert(error);
        for q in &mut st.lanes {
            q.frames.clear();
            q.bytes = 0;
            q.finished = true;
            if let Some(w) = q.writer.take() {
                w.wake();
            }
        }
        if let Some(w) = st.flush_waiter.take() {
            w.wake();
        }
    }

    /// Starts the flush: writers finish their streams once drained. Ready
    /// when both streams are finished and acknowledged, or the peer failed.
    fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.lock();
        if !st.closing {
            st.closing = true;
            for q in &mut st.lanes {
                if let Some(w) = q.writer.take() {
                    w.wake();
                }
            }
        }
        if st.failed.is_some() || st.lanes.iter().all(|q| q.finished) {
            return Poll::Ready(());
        }
        st.flush_waiter = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// The [`Transport`] of one rank over QUIC: one outbox per peer.
pub(crate) struct QuicTransport {
    pub(crate) me: u32,
    pub(crate) outboxes: Arc<Vec<Arc<Outbox>>>,
}

impl Transport for QuicTransport {
    fn send(&self, dest: u32, frame: Frame) -> std::result::Result<(), SendError> {
        match self.outboxes.get(dest as usize) {
            Some(outbox) if dest != self.me => outbox.push(frame),
            _ => Err(SendError::Failed(Error::InvalidRank { rank: i64::from(dest), size: self.outboxes.len() as u32 })),
        }
    }

    /// Ready once every peer's streams are finished and acknowledged (or
    /// the peer has failed).
    fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut ready = true;
        for (rank, outbox) in self.outboxes.iter().enumerate() {
            if rank as u32 != self.me && outbox.poll_flush(cx).is_pending() {
                ready = false;
            }
        }
        if ready {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use mpx_core::proto::wire::{Frame, Header, Kind};

    use super::*;

    fn frame(kind: Kind, len: usize) -> Frame {
        Frame { header: Header::control(kind, 0), payload: Bytes::from(vec![0u8; len]) }
    }

    /// Each lane takes frames up to its cap, then refuses them, the other
    /// lane still taking its own; what waits stays within the caps; and the
    /// engine is told once a refused lane has drained to half.
    #[test]
    fn an_outbox_holds_at_most_its_caps_and_refuses_one_lane_alone() {
        let outbox = Outbox::default();
        let mut bulk = 0;
        while outbox.push(frame(Kind::RndvData, 64 << 10)).is_ok() {
            bulk += 1;
            assert!(bulk < 1000, "the bulk lane never refused");
        }
        assert!(matches!(outbox.push(frame(Kind::RndvData, 64 << 10)), Err(SendError::Full(_))));
        // Control frames still go while bulk data is refused.
        for _ in 0..10 {
            assert!(outbox.push(frame(Kind::Eager, 1000)).is_ok());
        }
        let mut control = 10;
        while outbox.push(frame(Kind::Eager, 64 << 10)).is_ok() {
            control += 1;
            assert!(control < 1000, "the control lane never refused");
        }
        let held: usize = outbox.lock().lanes.iter().map(|q| q.bytes).sum();
        assert!(held <= CONTROL_CAP + BULK_CAP, "{held} bytes held");
        // Draining the bulk lane to half its cap says the engine may send again.
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut told = false;
        for _ in 0..bulk {
            match outbox.poll_next(Lane::Bulk, &mut cx) {
                Poll::Ready(Next::Frame(_, wake)) => told |= wake,
                _ => panic!("a queued frame"),
            }
        }
        assert!(told, "the engine was told the outbox has room");
    }
}
