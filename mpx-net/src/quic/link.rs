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
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use mpx_core::proto::wire::{Frame, Kind};
use mpx_core::runtime::{SendError, Transport};
use mpx_core::{Error, ErrorKind, Result};

use super::inlet::Inlet;

/// The two streams that carry a peer's frames each way (on one connection,
/// or each on a connection of its own: see [`connection`](super::connection)).
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

/// A frame waiting for its stream: header and payload as separate chunks
/// (the payload is never copied), emptied from the front as the stream
/// takes them.
struct Queued {
    chunks: [Bytes; 2],
}

impl Queued {
    fn new(frame: Frame) -> Queued {
        Queued { chunks: [Bytes::copy_from_slice(&frame.encode_header()), frame.payload] }
    }
}

#[derive(Default)]
struct Queue {
    /// The stream, once the connection is up and until it is finished.
    stream: Option<quinn::SendStream>,
    frames: VecDeque<Queued>,
    bytes: usize,
    writer: Option<Waker>,
    /// The writer has finished the stream and the peer has acknowledged it
    /// (or the peer failed).
    finished: bool,
    /// The peer's stream of this lane has ended: read to its end (the
    /// peer finalized), or lost with the peer.
    ended: bool,
}

/// What writing the front of a queue to its stream gave.
enum Wrote {
    /// All of it: the stream takes more.
    All,
    /// Not all of it: the stream is blocked (flow control) and wakes the
    /// task that polled once it takes more, or it is not attached yet.
    Blocked,
    /// The stream or its connection failed.
    Failed(quinn::WriteError),
}

impl Queue {
    /// Writes queued frames to the stream, in order, until the queue is
    /// empty or the stream blocks. quinn takes the chunks without copying
    /// them and wakes the connection's driver to send them.
    fn write(&mut self, cx: &mut Context<'_>) -> Wrote {
        let Some(stream) = self.stream.as_mut() else { return Wrote::Blocked };
        while let Some(front) = self.frames.front_mut() {
            let polled = std::pin::pin!(stream.write_chunks(&mut front.chunks)).poll(cx);
            match polled {
                Poll::Ready(Ok(written)) => {
                    self.bytes -= written.bytes;
                    // Taken in part, the frame is offered again: quinn
                    // keeps the waker only of a write it refuses outright.
                    if written.chunks == 2 {
                        self.frames.pop_front();
                    }
                }
                Poll::Ready(Err(e)) => return Wrote::Failed(e),
                Poll::Pending => return Wrote::Blocked,
            }
        }
        Wrote::All
    }
}

#[derive(Default)]
struct OutState {
    lanes: [Queue; 2],
    /// Per lane, the size of the frame the engine was refused there (it
    /// holds a refused control frame and a refused chunk of rendezvous
    /// data apart), while it waits for `writable`.
    refused: [Option<usize>; 2],
    /// The peer failed: frames for it are refused with this error.
    failed: Option<Error>,
    /// The endpoint failed the peer on its own finding (see
    /// [`Outbox::lost`]): the flush no longer waits for it.
    lost: bool,
    /// `finalize` is flushing: once drained, writers finish their streams.
    closing: bool,
    /// When the flush began.
    closing_since: Option<Instant>,
    /// When the peer's goodbye arrived (the engine took it): from then on,
    /// or from the flush's start if later, the flush waits for its streams
    /// only so long (see [`QuicTransport::linger`]). On tokio's clock.
    goodbye: Option<Instant>,
    /// The tasks waiting for the flush to end.
    flush_waiters: Vec<Waker>,
}

impl OutState {
    /// Has `cx`'s task woken with the flush waiters.
    fn wait_for_flush(&mut self, cx: &mut Context<'_>) {
        if !self.flush_waiters.iter().any(|w| w.will_wake(cx.waker())) {
            self.flush_waiters.push(cx.waker().clone());
        }
    }

    fn wake_flush_waiters(&mut self) {
        for w in self.flush_waiters.drain(..) {
            w.wake();
        }
    }

    /// Whether the engine, refused a frame, is to be told there is room:
    /// once a refused frame's lane has drained to half its cap (so the
    /// engine can go on a while) and has room for that very frame. (Told
    /// while it would be refused again, the engine would be, and its writer
    /// would tell it again at once, round and round, never letting quinn's
    /// driver run on its thread to drain the stream: a frame of 1 MiB and
    /// a header, with the header taken by the stream and the 1 MiB payload
    /// still queued, did that.) The writer of a lane whose refusal ends
    /// is woken: at a flush it waits for that to finish its stream.
    fn take_room(&mut self) -> bool {
        let OutState { lanes, refused, .. } = self;
        let mut room = false;
        for (i, (q, refused)) in lanes.iter_mut().zip(refused.iter_mut()).enumerate() {
            let Some(size) = *refused else { continue };
            let cap = cap(i);
            if q.bytes <= cap / 2 && (q.bytes == 0 || q.bytes + size <= cap) {
                *refused = None;
                room = true;
                if let Some(w) = q.writer.take() {
                    w.wake();
                }
            }
        }
        room
    }
}

/// What the endpoint has queued for one peer, and the streams to it.
///
/// A frame goes straight into its stream when nothing waits before it
/// (from [`QuicTransport::send`], with no task in between); otherwise it
/// waits here, and the lane's writer task moves it into the stream as
/// flow control allows.
#[derive(Default)]
pub(crate) struct Outbox {
    state: Mutex<OutState>,
}

/// What a writer gets from [`Outbox::poll_drain`].
pub(crate) enum Drained {
    /// The outbox has room again for an engine that was refused a frame:
    /// tell it ([`Endpoint::writable`](mpx_core::Endpoint::writable)).
    Room,
    /// Nothing more will come: finish the stream.
    Finish(quinn::SendStream),
    /// The stream failed.
    Failed(quinn::WriteError),
}

fn cap(lane: usize) -> usize {
    if lane == Lane::Bulk as usize {
        BULK_CAP
    } else {
        CONTROL_CAP
    }
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, OutState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives `lane`'s stream to the outbox, once the connection is up;
    /// frames queued before go first.
    pub(crate) fn attach(&self, lane: Lane, stream: quinn::SendStream) {
        let mut st = self.lock();
        let q = &mut st.lanes[lane as usize];
        q.stream = Some(stream);
        if let Some(w) = q.writer.take() {
            w.wake();
        }
    }

    /// Writes `frame` to its stream, or queues it, or gives it back if its
    /// lane is full.
    fn push(&self, frame: Frame) -> std::result::Result<(), SendError> {
        let mut guard = self.lock();
        let st = &mut *guard;
        if let Some(e) = &st.failed {
            return Err(SendError::Failed(e.clone()));
        }
        let lane = Lane::of(&frame);
        let size = frame.wire_len();
        let q = &mut st.lanes[lane as usize];
        if q.finished {
            // The stream is finished: only a last goodbye can come this late.
            return Ok(());
        }
        if q.bytes > 0 && q.bytes + size > cap(lane as usize) {
            st.refused[lane as usize] = Some(size);
            return Err(SendError::Full(frame));
        }
        let was_empty = q.frames.is_empty();
        q.bytes += size;
        q.frames.push_back(Queued::new(frame));
        if was_empty {
            // Straight into the stream. The writer, if the stream blocks or
            // fails, polls again with its own waker and handles it.
            if let Wrote::All = q.write(&mut Context::from_waker(Waker::noop())) {
                return Ok(());
            }
        }
        if let Some(w) = q.writer.take() {
            w.wake();
        }
        Ok(())
    }

    /// Moves `lane`'s queued frames into its stream for the lane's writer
    /// task: pending while the queue is empty or the stream blocked.
    pub(crate) fn poll_drain(&self, lane: Lane, cx: &mut Context<'_>) -> Poll<Drained> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let q = &mut st.lanes[lane as usize];
        let wrote = q.write(cx);
        if st.take_room() {
            return Poll::Ready(Drained::Room);
        }
        let q = &mut st.lanes[lane as usize];
        match wrote {
            Wrote::Failed(e) => Poll::Ready(Drained::Failed(e)),
            Wrote::Blocked if q.stream.is_some() && st.failed.is_none() => Poll::Pending,
            Wrote::All | Wrote::Blocked => {
                // While the engine holds a frame this lane refused (its
                // goodbye, at an abort) the stream stays open for it.
                if ((st.closing || st.lost) && st.refused[lane as usize].is_none()) || st.failed.is_some() {
                    if let Some(stream) = q.stream.take() {
                        return Poll::Ready(Drained::Finish(stream));
                    }
                }
                q.writer = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// `lane`'s stream is finished and acknowledged (or lost with its peer).
    pub(crate) fn finished(&self, lane: Lane) {
        let mut st = self.lock();
        st.lanes[lane as usize].finished = true;
        st.wake_flush_waiters();
    }

    /// The peer's stream of `lane` has been read to its end; true if the
    /// other lane's has too (said to one caller only).
    pub(crate) fn ended(&self, lane: Lane) -> bool {
        let mut st = self.lock();
        st.lanes[lane as usize].ended = true;
        st.wake_flush_waiters();
        st.lanes.iter().all(|q| q.ended)
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
            q.ended = true;
            if let Some(w) = q.writer.take() {
                w.wake();
            }
        }
        st.wake_flush_waiters();
    }

    /// The peer's goodbye has arrived (the first, if it says more): a
    /// flush under way is woken to start counting its wait.
    pub(crate) fn said_goodbye(&self) {
        let mut st = self.lock();
        if st.goodbye.is_none() {
            st.goodbye = Some(Instant::now());
            st.wake_flush_waiters();
        }
    }

    /// The endpoint has failed the peer on its own finding (a breach of
    /// the protocol its frames did not show the transport, a peer that
    /// stopped reading): what is queued for it (its parting goodbye)
    /// still goes, then the writers finish their streams and the peer's
    /// connections close (see [`poll_lost`](Outbox::poll_lost)); the
    /// flush waits for it no more.
    pub(crate) fn lost(&self) {
        let mut st = self.lock();
        st.lost = true;
        for q in &mut st.lanes {
            if let Some(w) = q.writer.take() {
                w.wake();
            }
        }
        st.wake_flush_waiters();
    }

    /// Ready once the endpoint has failed the peer on its own finding
    /// (see [`lost`](Outbox::lost)), the transport not: its writers finish
    /// their streams once drained, and its connections are to close. (A
    /// peer the transport failed ([`fail`](Outbox::fail)) has its
    /// connections closed by the transport, with its reason.)
    pub(crate) fn poll_lost(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.lock();
        if st.lost && st.failed.is_none() {
            return Poll::Ready(());
        }
        st.wait_for_flush(cx);
        Poll::Pending
    }

    /// Whether the transport has failed the peer (see [`fail`](Outbox::fail)).
    pub(crate) fn has_failed(&self) -> bool {
        self.lock().failed.is_some()
    }

    /// Ready once both lanes' streams are finished and acknowledged (or
    /// lost with the peer).
    pub(crate) fn poll_lanes_finished(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.lock();
        if st.failed.is_some() || st.lanes.iter().all(|q| q.finished) {
            return Poll::Ready(());
        }
        st.wait_for_flush(cx);
        Poll::Pending
    }

    /// Starts the flush: writers finish their streams once drained. Ready
    /// when both streams are finished and acknowledged and the peer's two
    /// have been read to their ends (it has finalized too), or the peer
    /// failed, or `linger` has passed since its goodbye arrived and the
    /// flush began. Pending otherwise, with when that will be, if its
    /// goodbye has arrived.
    fn poll_flush(&self, cx: &mut Context<'_>, linger: Duration) -> std::result::Result<(), Option<Instant>> {
        let mut st = self.lock();
        if !st.closing {
            st.closing = true;
            for q in &mut st.lanes {
                if let Some(w) = q.writer.take() {
                    w.wake();
                }
            }
        }
        let since = *st.closing_since.get_or_insert_with(Instant::now);
        let given_up = st.goodbye.map(|said| said.max(since) + linger);
        if st.failed.is_some() || st.lost || st.lanes.iter().all(|q| q.finished && q.ended) || given_up.is_some_and(|at| at <= Instant::now()) {
            return Ok(());
        }
        st.wait_for_flush(cx);
        Err(given_up)
    }
}

/// The [`Transport`] of one rank over QUIC: one outbox and one control
/// inlet per peer.
pub(crate) struct QuicTransport {
    pub(crate) me: u32,
    pub(crate) outboxes: Arc<Vec<Arc<Outbox>>>,
    pub(crate) inlets: Arc<Vec<Arc<Inlet>>>,
    /// The QUIC endpoints (the rank's own socket's, and its bulk socket's
    /// if it has one), closed once the flush is done.
    pub(crate) quic: Vec<quinn::Endpoint>,
    /// Closing the connections and waiting for the close to go out.
    pub(crate) closing: Mutex<CloseState>,
    /// How long the flush waits for a peer's streams to end once its
    /// goodbye has arrived ([`Options::idle_timeout`](super::Options::idle_timeout)):
    /// a peer that said goodbye and keeps its streams open, or stops
    /// reading this rank's, does not hold up this rank's finalize for ever.
    pub(crate) linger: Duration,
    /// The timer of the earliest such wait, while the flush waits.
    pub(crate) linger_timer: Mutex<Option<Pin<Box<tokio::time::Sleep>>>>,
}

/// How far the transport's close has come ([`QuicTransport::poll_flush`],
/// which every later call finds done once it is).
#[derive(Default)]
pub(crate) enum CloseState {
    #[default]
    Open,
    /// The connections are closing; the future waits for the close to go
    /// out (at most [`CLOSE_WAIT`]).
    Closing(Pin<Box<dyn Future<Output = ()> + Send>>),
    Closed,
}

/// How long a finished rank waits for its connections' close to reach
/// its peers.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Transport for QuicTransport {
    fn send(&self, dest: usize, frame: Frame) -> std::result::Result<(), SendError> {
        match self.outboxes.get(dest) {
            Some(outbox) if dest != self.me as usize => outbox.push(frame),
            _ => Err(SendError::Failed(ErrorKind::InvalidRank { rank: dest, size: self.outboxes.len() }.into())),
        }
    }

    fn peer_lost(&self, rank: usize) {
        if let Some(outbox) = self.outboxes.get(rank) {
            outbox.lost();
        }
    }

    /// Reads the control streams in the waiting program's task (see
    /// [`inlet`](super::inlet)).
    fn poll_arrivals(&self, cx: &mut Context<'_>) {
        for (rank, inlet) in self.inlets.iter().enumerate() {
            if rank != self.me as usize {
                inlet.poll_for_program(cx);
            }
        }
    }

    /// Ready once, with every peer, both ways' streams are finished (this
    /// rank's acknowledged, the peer's read to their ends: it has
    /// finalized too) or the peer has failed, and the connections are
    /// closed. A rank that ends thus lingers until its peers have finalized
    /// (as MPI's finalize is collective), keeps reading what they still
    /// send it, and leaves no peer waiting for an idle timeout; but a peer
    /// whose goodbye has arrived holds it up at most [`linger`](QuicTransport::linger)
    /// after that (or after the flush began, if later).
    fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.flush(cx, false)
    }

    /// Starts the flush, as a poll of it that leaves its timer alone.
    fn start_flush(&self) {
        let _ = self.flush(&mut Context::from_waker(Waker::noop()), true);
    }
}

impl QuicTransport {
    /// [`poll_flush`](Transport::poll_flush), or, `starting`, the poll of
    /// [`start_flush`](Transport::start_flush), whose waker wakes nobody.
    fn flush(&self, cx: &mut Context<'_>, starting: bool) -> Poll<Result<()>> {
        let mut ready = true;
        let mut earliest: Option<Instant> = None;
        for (rank, outbox) in self.outboxes.iter().enumerate() {
            if rank as u32 != self.me {
                if let Err(given_up) = outbox.poll_flush(cx, self.linger) {
                    ready = false;
                    earliest = match (earliest, given_up) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
            }
        }
        if !ready {
            // Woken when the earliest wait after a goodbye ends (with tokio's
            // timer; outside a runtime, at the next poll after it). A poll
            // that only starts the flush (`close`) leaves the timer to the
            // tasks that wait; when it fires, every task waiting for the
            // flush is woken, not only the one that polled it last.
            if let Some(deadline) = earliest.filter(|_| !starting && tokio::runtime::Handle::try_current().is_ok()) {
                let mut timer = self.linger_timer.lock().unwrap_or_else(|e| e.into_inner());
                match &mut *timer {
                    Some(sleep) if sleep.deadline() == deadline => {}
                    Some(sleep) => sleep.as_mut().reset(deadline),
                    None => *timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
                }
                if timer.as_mut().is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready()) {
                    drop(timer);
                    for outbox in self.outboxes.iter() {
                        outbox.lock().wake_flush_waiters();
                    }
                }
            }
            return Poll::Pending;
        }
        let mut closing = self.closing.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*closing, CloseState::Open) {
            let quic = self.quic.clone();
            for endpoint in &quic {
                endpoint.close(quinn::VarInt::from_u32(0), b"finalized");
            }
            // The wait needs tokio's timer: a close polled outside a tokio
            // runtime (a plain thread, another executor) does not wait for
            // the close to go out, which quinn's drivers still send.
            let timer = tokio::runtime::Handle::try_current().is_ok();
            *closing = CloseState::Closing(Box::pin(async move {
                // Both close at once; waiting for one then the other
                // takes as long as the slower.
                let idle = async {
                    for endpoint in &quic {
                        endpoint.wait_idle().await;
                    }
                };
                if timer {
                    let _ = tokio::time::timeout(CLOSE_WAIT, idle).await;
                }
            }));
        }
        if let CloseState::Closing(close) = &mut *closing {
            if close.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        *closing = CloseState::Closed;
        Poll::Ready(Ok(()))
    }
}

/// An endpoint dropped without finalizing closes its connections at
/// once, so its peers find it gone from the close rather than from the
/// idle timeout, even if a handle on a connection outlives it (after a
/// finalize they are closed already, and this does nothing).
impl Drop for QuicTransport {
    fn drop(&mut self) {
        for endpoint in &self.quic {
            endpoint.close(quinn::VarInt::from_u32(super::connection::code::DROPPED), b"endpoint dropped");
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
    /// engine is told once a refused lane has drained to half (and its
    /// refused frame fits), for each lane apart.
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
        // The engine, refused a chunk and a control frame, is told there
        // is room once either lane has drained to half its cap, once each.
        let mut st = outbox.lock();
        let drain = |q: &mut Queue, to: usize| {
            while q.bytes > to {
                let f = q.frames.pop_front().expect("a queued frame");
                q.bytes -= f.chunks.iter().map(Bytes::len).sum::<usize>();
            }
        };
        assert!(!st.take_room(), "told while both lanes are full");
        drain(&mut st.lanes[Lane::Bulk as usize], 0);
        assert!(st.take_room(), "told once the bulk lane has drained");
        assert!(!st.take_room(), "told again while the control lane is full");
        drain(&mut st.lanes[Lane::Control as usize], CONTROL_CAP / 2);
        assert!(st.take_room(), "told once the control lane has drained to half");
        assert!(!st.take_room(), "told twice");
    }

    /// The engine is told there is room only once the frame it was refused
    /// fits: a lane at half its cap with a payload of 1 MiB still queued
    /// (its header taken by the stream) has no room for the next 1 MiB
    /// chunk and its header.
    #[test]
    fn the_engine_is_told_of_room_only_once_its_refused_frame_fits() {
        let outbox = Outbox::default();
        let chunk = || frame(Kind::RndvData, BULK_CAP / 2);
        assert!(outbox.push(chunk()).is_ok());
        assert!(matches!(outbox.push(chunk()), Err(SendError::Full(_))));
        let mut st = outbox.lock();
        let q = &mut st.lanes[Lane::Bulk as usize];
        let header = q.frames[0].chunks[0].len();
        q.frames[0].chunks[0] = Bytes::new();
        q.bytes -= header;
        assert_eq!(q.bytes, BULK_CAP / 2, "half full, the payload still queued");
        assert!(!st.take_room(), "told while the refused chunk would not fit");
        let q = &mut st.lanes[Lane::Bulk as usize];
        q.frames.clear();
        q.bytes = 0;
        assert!(st.take_room(), "told once the lane is empty");
        drop(st);
        assert!(outbox.push(chunk()).is_ok(), "the chunk goes once told");
    }
}
