//! Probes and matched probes (`MPI_Probe`, `MPI_Iprobe`, `MPI_Mprobe`,
//! `MPI_Improbe`, `MPI_Mrecv`).

use std::future::Future;
use std::task::Poll;

use super::data::RecvData;
use super::selectors::{Source, TagSel};
use super::{Comm, Status};
use crate::error::Result;
use crate::proto::engine::{Engine, MatchSpec};
use crate::request::{Finish, Kind, Request};
use crate::runtime::Shared;

impl Comm {
    // ----- probes --------------------------------------------------------------------

    /// `MPI_Iprobe`: the status of the first queued message matching
    /// `source` and `tag`, without receiving it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// assert_eq!(comm.iprobe(0, 3)?, None, "nothing sent yet");
    /// comm.send(&[1u64, 2], 0, 3).await?; // to itself
    /// let status = loop {
    ///     match comm.iprobe(0, 3)? {
    ///         Some(status) => break status,
    ///         None => tokio::task::yield_now().await, // let it arrive
    ///     }
    /// };
    /// assert_eq!((status.source, status.count::<u64>()), (Some(0), Some(2)));
    /// assert_eq!(comm.recv::<[u64; 2]>(0, 3).await?.0, [1, 2]); // still queued
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn iprobe(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> Result<Option<Status>> {
        let Some(spec) = self.spec(source.into(), tag.into(), self.context)? else { return Ok(Some(Status::empty())) };
        // Frames that have arrived are taken first, as `test` does: a loop
        // of `iprobe`s sees a message sent, on any transport.
        self.shared.progress();
        let st = self.shared.lock();
        if st.engine.is_closed() {
            return Err(crate::ErrorKind::Finalized.into());
        }
        Ok(st.engine.iprobe(&spec).map(|e| Status::of(self.rank_of_sender(e.source) as usize, e.tag, e.len)))
    }

    /// `MPI_Probe`: waits until a matching message is queued and returns its
    /// status. With several tasks receiving, another may take the message
    /// first: use [`mprobe`](Comm::mprobe) then. The arguments are checked
    /// when `probe` is called.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::Any;
    /// if comm.rank() == 0 {
    ///     comm.send(&[1u32, 2, 3], 1, 9).await?;
    /// } else {
    ///     let status = comm.probe(Any, Any).await?;
    ///     assert_eq!((status.source, status.tag, status.count::<u32>()), (Some(0), Some(9), Some(3)));
    ///     comm.recv_vec::<u32>(0, 9).await?;
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe: a probe takes nothing.
    pub fn probe(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> impl Future<Output = Result<Status>> + Send + 'static {
        let spec = self.spec(source.into(), tag.into(), self.context);
        let shared = self.shared.clone();
        let comm = self.clone();
        async move {
            let Some(spec) = spec? else { return Ok(Status::empty()) };
            let status = wait_for_arrival(&shared, spec, |engine, spec| engine.iprobe(spec).map(|e| Status::of(e.source as usize, e.tag, e.len))).await;
            status.map(|s| Status { source: s.source.map(|w| comm.rank_of_sender(w as u32) as usize), ..s })
        }
    }

    /// `MPI_Improbe`: takes the first queued matching message out of the
    /// queue, so no other receive can match it; receive it with
    /// [`Message::recv_into`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// comm.send(&[4i32, 5], 0, 0).await?; // to itself
    /// let message = loop {
    ///     if let Some(message) = comm.improbe(0, 0)? { break message; }
    ///     tokio::task::yield_now().await; // let it arrive
    /// };
    /// assert_eq!(comm.iprobe(0, 0)?, None, "taken: no other receive can match it");
    /// let mut buf = [0i32; 2];
    /// message.recv_into(&mut buf).await?;
    /// assert_eq!(buf, [4, 5]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn improbe(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> Result<Option<Message>> {
        let Some(spec) = self.spec(source.into(), tag.into(), self.context)? else { return Ok(Some(Message::null(self))) };
        // As `iprobe`: frames that have arrived are taken first.
        self.shared.progress();
        let mut st = self.shared.lock();
        if st.engine.is_closed() {
            return Err(crate::ErrorKind::Finalized.into());
        }
        Ok(st.engine.improbe(&spec).map(|m| Message { comm: self.clone(), matched: Some(m) }))
    }

    /// `MPI_Mprobe`: waits for a matching message and takes it. The
    /// arguments are checked when `mprobe` is called.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::Any;
    /// if comm.rank() == 0 {
    ///     comm.send(&[5u16; 4], 1, 0).await?;
    /// } else {
    ///     let message = comm.mprobe(0, Any).await?;
    ///     let mut buf = vec![0u16; message.status().count::<u16>().unwrap_or(0) as usize];
    ///     message.recv_into(&mut buf).await?;
    ///     assert_eq!(buf, [5; 4]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing is taken until it resolves.
    pub fn mprobe(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> impl Future<Output = Result<Message>> + Send + 'static {
        let spec = self.spec(source.into(), tag.into(), self.context);
        let comm = self.clone();
        async move {
            let Some(spec) = spec? else { return Ok(Message::null(&comm)) };
            let matched = wait_for_arrival(&comm.shared, spec, |engine, spec| engine.improbe(spec)).await?;
            Ok(Message { comm, matched: Some(matched) })
        }
    }
}

/// Retries `attempt` on the engine whenever a message may have appeared,
/// until it finds something; fails if the messages `spec` names can no
/// longer come. The attempt, the check and the waker registration happen
/// under one lock, so a message that arrives just before its sender's
/// farewell is never missed. An any-source probe fails for "every other
/// rank is gone" only on the second poll in a row that finds nothing, as a
/// receive does (see the [module docs](super)).
async fn wait_for_arrival<T>(shared: &Shared, spec: MatchSpec, mut attempt: impl FnMut(&mut Engine, &MatchSpec) -> Option<T>) -> Result<T> {
    /// The key this wait is listed under to be woken at the next arrival
    /// (`State::list_probe` in the runtime), taken
    /// off the list when the wait is dropped: a dropped probe leaves no
    /// waker behind.
    struct Listed<'s> {
        shared: &'s Shared,
        key: Option<u64>,
    }
    impl Drop for Listed<'_> {
        fn drop(&mut self) {
            if self.key.is_some() {
                self.shared.lock().unlist_probe(self.key);
            }
        }
    }
    let mut listed = Listed { shared, key: None };
    let mut orphan_polls = 0;
    std::future::poll_fn(|cx| {
        let mut st = shared.lock();
        if let Some(found) = attempt(&mut st.engine, &spec) {
            st.unlist_probe(listed.key.take());
            return Poll::Ready(Ok(found));
        }
        let dead = match spec.source {
            Some(r) => st.engine.silent(r),
            None => st.engine.others_gone_in(spec.context),
        };
        if let Some(e) = dead {
            if spec.source.is_some() || matches!(e.kind(), crate::ErrorKind::Finalized) || orphan_polls > 0 {
                st.unlist_probe(listed.key.take());
                return Poll::Ready(Err(e));
            }
            orphan_polls += 1;
            // Polled again once the lock is released (see `Locked`).
            st.to_wake.push(cx.waker().clone());
            return Poll::Pending;
        }
        st.list_probe(&mut listed.key, cx);
        Poll::Pending
    })
    .await
}

/// A message taken by [`Comm::improbe`] or [`Comm::mprobe`]; it can only
/// be received through this handle (`MPI_Mrecv`). Dropping the handle
/// without receiving gives the message back to the queue.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |comm| async move {
/// comm.send(&[1u16, 2, 3], 0, 5).await?;
/// let message = comm.mprobe(mpx::Any, mpx::Any).await?;
/// // Size the buffer from the probe, then receive exactly that message.
/// let n = message.status().count::<u16>().unwrap() as usize;
/// let mut values = vec![0u16; n];
/// message.irecv(&mut values).await?;
/// assert_eq!(values, [1, 2, 3]);
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub struct Message {
    comm: Comm,
    matched: Option<crate::proto::engine::Matched>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message").field("status", &self.status()).finish()
    }
}

impl Message {
    fn null(comm: &Comm) -> Message {
        Message { comm: comm.clone(), matched: None }
    }

    /// The message's status (source, tag, length); empty for PROC_NULL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::{Any, Status, PROC_NULL};
    /// comm.send(&[1.5f32, 2.5, 3.5], 0, 4).await?; // to itself
    /// let message = comm.mprobe(0, Any).await?;
    /// let status = message.status();
    /// assert_eq!((status.source, status.tag, status.count::<f32>()), (Some(0), Some(4), Some(3)));
    /// message.recv_into(&mut [0.0f32; 3]).await?;
    /// assert_eq!(comm.mprobe(PROC_NULL, Any).await?.status(), Status::empty());
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn status(&self) -> Status {
        match &self.matched {
            None => Status::empty(),
            Some(m) => {
                let e = m.envelope();
                Status::of(self.comm.rank_of_sender(e.source) as usize, e.tag, e.len)
            }
        }
    }

    /// Starts receiving the message as a request that runs `finish` on it,
    /// keeping at most `limit` bytes of its data if given (a longer
    /// rendezvous message fails the request at once).
    fn start<'a>(mut self, limit: Option<u64>, finish: Finish<'a>) -> Request<'a> {
        let Some(m) = self.matched.take() else { return Request::completed(Ok(Status::empty())) };
        let shared = self.comm.shared.clone();
        let keep = self.comm.keep_alive();
        let mut st = shared.lock();
        let id = st.engine.next_id();
        match limit {
            Some(limit) => st.engine.mrecv_limited(id, m, limit),
            None => st.engine.mrecv(id, m),
        }
        shared.flush(&mut st);
        drop(st);
        Request::active(shared, id, Kind::Recv(finish), keep)
    }

    /// `MPI_Imrecv` into any [`RecvData`]: starts receiving the message.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// use mpx::Any;
    /// comm.send(&[10u64, 20], 0, 1).await?; // to itself
    /// let message = comm.mprobe(Any, 1).await?;
    /// let mut buf = [0u64; 2];
    /// let recv = message.irecv(&mut buf); // a Request: it can be tested, or kept in a RequestSet
    /// let status = recv.await?;
    /// assert_eq!((buf, status.bytes), ([10, 20], 16));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`Comm::irecv`]: if dropped, the message goes back to the head of
    /// the queue.
    pub fn irecv<'a>(self, buf: impl RecvData<'a>) -> Request<'a> {
        // On a bad buffer the message goes back to the queue (when `self` drops).
        match buf.into_target() {
            Ok(target) => self.start(target.limit, target.finish),
            Err(e) => Request::completed(Err(e)),
        }
    }

    /// `MPI_Mrecv` into any [`RecvData`]: the blocking spelling of
    /// [`irecv`](Message::irecv), a plain future rather than a
    /// [`Request`] (see [`Comm::mprobe`] for an example).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// comm.send(&[3i16, 4, 5], 0, 0).await?; // to itself
    /// let message = comm.mprobe(0, 0).await?;
    /// let mut buf = vec![0i16; message.status().count::<i16>().unwrap() as usize];
    /// let status = message.recv_into(&mut buf).await?;
    /// assert_eq!((buf, status.source), (vec![3, 4, 5], Some(0)));
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`Message::irecv`].
    pub fn recv_into<'a>(self, buf: impl RecvData<'a>) -> impl Future<Output = Result<Status>> + Send + 'a {
        self.irecv(buf)
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if let Some(m) = self.matched.take() {
            let mut st = self.comm.shared.lock();
            st.engine.unmatch(m);
            st.wake_probes();
            self.comm.shared.flush(&mut st);
        }
    }
}


#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Wake, Waker};

    /// A waker of a task of its own.
    struct Task;

    impl Wake for Task {
        fn wake(self: Arc<Self>) {}
    }

    /// Probes polled once each, from tasks of their own, then dropped
    /// before anything arrives, leave no waker listed at the endpoint; one
    /// polled again from another task is listed once.
    #[test]
    fn dropped_probes_leave_no_waker_behind() {
        let comm = crate::comm::group::tests::alone();
        let listed = || comm.shared.lock().arrival_wakers.len();
        for _ in 0..100 {
            let mut probe = Box::pin(comm.probe(0, 5));
            let waker = Waker::from(Arc::new(Task));
            assert!(probe.as_mut().poll(&mut Context::from_waker(&waker)).is_pending(), "nothing sent");
            assert_eq!(listed(), 1);
        }
        assert_eq!(listed(), 0, "each went with its probe");
        let mut probe = Box::pin(comm.mprobe(0, 5));
        for _ in 0..3 {
            let waker = Waker::from(Arc::new(Task));
            assert!(probe.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
        }
        assert_eq!(listed(), 1, "one entry per probe, its latest waker");
        futures::executor::block_on(comm.send(&1u8, 0, 5)).expect("sent to itself");
        assert!(futures::executor::block_on(probe).is_ok(), "found");
        assert_eq!(listed(), 0);
    }
}
