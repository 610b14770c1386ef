//! The endpoint: one rank's engine behind a lock, with its transport, and
//! the bookkeeping that turns engine completions into woken requests.

use std::collections::{HashMap, HashSet};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::transport::Transport;
use crate::error::Result;
use crate::pack::Repr;
use crate::proto::engine::{Config, Delivered, Engine, Event, ReqId};
use crate::proto::wire::Frame;

pub(crate) enum Completion {
    Send(Result<()>),
    Recv(Result<Delivered>),
    /// A receive withdrawn by `MPI_Cancel`.
    Cancelled,
}

/// State of the attached buffer for buffered sends.
#[derive(Default)]
pub(crate) struct BsendBuffer {
    pub(crate) attached: Option<Vec<u8>>,
    pub(crate) used: usize,
    /// Buffered sends in flight: request id -> bytes they hold.
    pub(crate) in_flight: HashMap<ReqId, usize>,
    pub(crate) detach_waiters: Vec<Waker>,
}

pub(crate) struct State {
    pub(crate) engine: Engine,
    pub(crate) done: HashMap<ReqId, Completion>,
    pub(crate) wakers: HashMap<ReqId, Waker>,
    /// Sends whose requests were dropped or freed before completing: their
    /// completions are discarded (failures are traced).
    pub(crate) abandoned: HashSet<ReqId>,
    /// Woken whenever a data frame arrives (probe).
    pub(crate) arrival_wakers: Vec<Waker>,
    /// Wakers to call once the lock is released (see [`Locked`]).
    pub(crate) to_wake: Vec<Waker>,
    pub(crate) bsend: BsendBuffer,
}

pub(crate) struct Shared {
    pub(crate) rank: u32,
    /// The representation this rank sends typed data in.
    pub(crate) repr: Repr,
    pub(crate) size: u32,
    pub(crate) transport: Box<dyn Transport>,
    pub(crate) state: Mutex<State>,
}

/// One rank's connection to the world; see the [module docs](self).
#[derive(Clone)]
pub struct Endpoint {
    pub(crate) shared: Arc<Shared>,
}

/// A weak handle on an [`Endpoint`], for transports that must reach
/// endpoints without keeping them alive.
#[derive(Clone)]
pub struct WeakEndpoint {
    shared: std::sync::Weak<Shared>,
}

impl WeakEndpoint {
    /// The endpoint, if it still exists.
    pub fn upgrade(&self) -> Option<Endpoint> {
        self.shared.upgrade().map(|shared| Endpoint { shared })
    }
}

impl Endpoint {
    /// An endpoint for `rank` of `size` ranks over `transport`.
    pub fn new(rank: u32, size: u32, config: Config, transport: impl Transport) -> Endpoint {
        let state = State {
            engine: Engine::new(rank, size, config),
            done: HashMap::new(),
            wakers: HashMap::new(),
            abandoned: HashSet::new(),
            arrival_wakers: Vec::new(),
            to_wake: Vec::new(),
            bsend: BsendBuffer::default(),
        };
        Endpoint {
            shared: Arc::new(Shared {
                rank,
                repr: config.repr,
                size,
                transport: Box::new(transport),
                state: Mutex::new(state),
            }),
        }
    }

    /// A weak handle on this endpoint.
    pub fn downgrade(&self) -> WeakEndpoint {
        WeakEndpoint { shared: Arc::downgrade(&self.shared) }
    }


    /// Gives a frame from rank `from` to the engine. A frame that breaks
    /// the protocol fails that peer.
    pub fn handle_frame(&self, from: u32, frame: Frame) {
        self.shared.deliver(from, frame);
    }

    /// The transport lost rank `rank`: everything that depends on it fails.
    pub fn peer_failed(&self, rank: u32, reason: &str) {
        let mut st = self.shared.lock();
        st.engine.fail_peer(rank, reason);
        st.wake_probes();
        self.shared.flush(&mut st);
    }

    /// Ends this rank's part: waits for buffered sends to be delivered, then
    /// tells every peer this rank will post no more receives.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping it before completion sends no farewell.
    pub async fn finalize(&self) {
        let mut st = std::future::poll_fn(|cx| self.shared.poll_bsend_drained(cx)).await;
        st.engine.farewell();
        self.shared.flush(&mut st);
    }

    /// Tells every peer at once that this rank will post no more receives
    /// (what [`finalize`](Endpoint::finalize) does after its wait).
    pub fn farewell(&self) {
        let mut st = self.shared.lock();
        st.engine.farewell();
        self.shared.flush(&mut st);
    }
}

/// The endpoint's state, locked. Wakers queued in `to_wake` while it is
/// held run after the lock is released, so a waker that calls back into
/// mpx (a custom `Wake`, an executor that polls inline) cannot deadlock.
pub(crate) struct Locked<'a> {
    guard: Option<MutexGuard<'a, State>>,
}

impl Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.guard.as_ref().expect("held until drop")
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.guard.as_mut().expect("held until drop")
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let wakers = self.guard.as_mut().map(|g| std::mem::take(&mut g.to_wake)).unwrap_or_default();
        drop(self.guard.take());
        for w in wakers {
            w.wake();
        }
    }
}

impl State {
    /// Probes wait for messages to appear in the queue: wake them.
    pub(crate) fn wake_probes(&mut self) {
        let probes = std::mem::take(&mut self.arrival_wakers);
        self.to_wake.extend(probes);
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> Locked<'_> {
        // A panic while holding the lock cannot leave the engine half-updated
        // in a way that matters more than the panic itself.
        Locked { guard: Some(self.state.lock().unwrap_or_else(|e| e.into_inner())) }
    }

    /// Hands queued frames to the transport and dispatches completions.
    pub(crate) fn flush(&self, st: &mut State) {
        loop {
            let mut progressed = false;
            while let Some((dest, frame)) = st.engine.poll_transmit() {
                progressed = true;
                if let Err(e) = self.transport.send(dest, frame) {
                    st.engine.fail_peer(dest, &e.to_string());
                }
            }
            while let Some(ev) = st.engine.poll_event() {
                progressed = true;
                let (id, completion) = match ev {
                    Event::SendDone { id, result } => (id, Completion::Send(result)),
                    Event::RecvDone { id, result } => (id, Completion::Recv(result)),
                };
                self.complete(st, id, completion);
            }
            if !progressed {
                break;
            }
        }
    }

    /// Takes request `id`'s completion, or registers `cx`'s waker for it.
    /// A receive's message counts as consumed once taken here: its eager
    /// credit goes back to the sender.
    pub(crate) fn poll_done(&self, id: ReqId, cx: &mut Context<'_>) -> Poll<Completion> {
        let mut st = self.lock();
        match st.done.remove(&id) {
            Some(c) => {
                if let Completion::Recv(Ok(msg)) = &c {
                    if msg.credit > 0 {
                        st.engine.release_credit(msg.envelope.source, msg.credit);
                        self.flush(&mut st);
                    }
                }
                Poll::Ready(c)
            }
            None => {
                st.wakers.insert(id, cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// Processes frames that have already arrived (see [`Transport::progress`]).
    pub(crate) fn progress(&self) {
        self.transport.progress(&mut |from, frame| self.deliver(from, frame));
    }

    pub(crate) fn deliver(&self, from: u32, frame: Frame) {
        let mut st = self.lock();
        if let Err(e) = st.engine.handle_frame(from, frame) {
            st.engine.fail_peer(from, &e.to_string());
        }
        st.wake_probes();
        self.flush(&mut st);
    }

    /// The request `id` was dropped before completing: a receive is
    /// withdrawn or, if it matched, its message goes back to the head of
    /// the queue; a send completes in the background.
    pub(crate) fn withdraw(&self, id: ReqId) {
        let mut st = self.lock();
        st.wakers.remove(&id);
        match st.done.remove(&id) {
            Some(Completion::Recv(Ok(msg))) => {
                st.engine.requeue(msg);
                st.wake_probes();
                self.flush(&mut st);
            }
            Some(Completion::Send(Err(e))) => {
                tracing::warn!(rank = self.rank, id, error = %e, "dropped or freed send failed");
            }
            Some(_) => {}
            None => {
                if st.engine.withdraw_recv(id) {
                    st.wake_probes();
                    self.flush(&mut st);
                } else {
                    // A send still in flight: it completes in the background.
                    st.abandoned.insert(id);
                }
            }
        }
    }

    pub(crate) fn complete(&self, st: &mut State, id: ReqId, completion: Completion) {
        if let Some(bytes) = st.bsend.in_flight.remove(&id) {
            st.bsend.used -= bytes;
            if let Completion::Send(Err(e)) = &completion {
                tracing::error!(rank = self.rank, id, error = %e, "buffered send failed");
            }
            let waiters = std::mem::take(&mut st.bsend.detach_waiters);
            st.to_wake.extend(waiters);
            return;
        }
        if st.abandoned.remove(&id) {
            if let Completion::Send(Err(e)) = completion {
                tracing::warn!(rank = self.rank, id, error = %e, "dropped or freed send failed");
            }
            return;
        }
        tracing::trace!(rank = self.rank, id, "completed");
        st.done.insert(id, completion);
        if let Some(w) = st.wakers.remove(&id) {
            st.to_wake.push(w);
        }
    }
}

impl Shared {
    /// Ready, with the state still locked, once no buffered send is in
    /// flight: what follows (detaching, saying farewell) happens under the
    /// same lock, so no buffered send can slip in between.
    pub(crate) fn poll_bsend_drained(&self, cx: &mut Context<'_>) -> Poll<Locked<'_>> {
        let mut st = self.lock();
        if st.bsend.in_flight.is_empty() {
            Poll::Ready(st)
        } else {
            st.bsend.detach_waiters.push(cx.waker().clone());
            Poll::Pending
        }
    }
}

