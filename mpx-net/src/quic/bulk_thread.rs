//! The bulk socket's own thread (see
//! [`Options::bulk_thread`](super::Options::bulk_thread)): a one-worker
//! tokio runtime that the endpoint owns, and the quinn [`Runtime`] that
//! puts the bulk endpoint's drivers, timers and socket on it.
//!
//! Why: a worker of a tokio runtime that always has tasks to run looks at
//! its sockets only every `event_interval` tasks (61 by default). A large
//! transfer on the program's runtime keeps its workers busy with quinn's
//! drivers and the bulk reader, a few short tasks per packet, so a small
//! message's datagram waited in the control socket until a worker looked:
//! about 120 µs in one process. With the transfer on a thread of its own,
//! the program's workers stay free to look at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use mpx_core::{Error, Result};
use quinn::{AsyncTimer, AsyncUdpSocket, Runtime, TokioRuntime};
use tokio::runtime::Handle;

/// A one-worker tokio runtime on a thread of its own, shut down (its tasks
/// dropped, without waiting) when dropped, from any context.
pub(crate) struct BulkThread(Option<tokio::runtime::Runtime>);

impl BulkThread {
    /// Starts the thread of rank `rank` of job `job`, named
    /// `mpx-bulk-<rank>-<job>` (the rank first: Linux shows a thread's
    /// first 15 bytes).
    pub(crate) fn start(job: u64, rank: u32) -> Result<BulkThread> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("mpx-bulk-{rank}-{job}"))
            .enable_all()
            .build()
            .map_err(|e| Error::transport("starting the bulk socket's thread", e))?;
        Ok(BulkThread(Some(runtime)))
    }

    /// Where to spawn tasks on it.
    pub(crate) fn handle(&self) -> Handle {
        self.0.as_ref().expect("the runtime lives until drop").handle().clone()
    }

    /// quinn's tokio runtime, but on this thread.
    pub(crate) fn quinn_runtime(&self) -> Arc<dyn Runtime> {
        Arc::new(OnThread(self.handle()))
    }
}

impl Drop for BulkThread {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            // Not `drop`: that blocks, which a runtime refuses inside
            // another's task (where endpoints are usually dropped).
            runtime.shutdown_background();
        }
    }
}

/// [`TokioRuntime`] on a given runtime rather than the current one: its
/// timers and socket registered with that runtime's drivers, its tasks
/// spawned there.
#[derive(Debug)]
struct OnThread(Handle);

impl Runtime for OnThread {
    fn new_timer(&self, at: Instant) -> Pin<Box<dyn AsyncTimer>> {
        let _on = self.0.enter();
        TokioRuntime.new_timer(at)
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        self.0.spawn(future);
    }

    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> std::io::Result<Arc<dyn AsyncUdpSocket>> {
        let _on = self.0.enter();
        TokioRuntime.wrap_udp_socket(socket)
    }
}
