//! Running one program per rank over endpoints a transport has made: what
//! every in-process launch shares (loopback, QUIC on one host).

use std::future::Future;
use std::time::Duration;

use mpx_core::{Comm, Endpoint, Error, ErrorKind, Result};
use tokio::task::AbortHandle;

/// Aborts the tasks of a launch when dropped.
pub(crate) struct Tasks(pub(crate) Vec<AbortHandle>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// How long an in-process launch waits for every rank's hello.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits (at most `hello_timeout`) until every endpoint has its peers'
/// hellos, then runs `f` once
/// per rank as a task, finalizes each rank's endpoint after its program,
/// and returns the results in rank order, or the root cause of a failure
/// (see [`loopback::launch`](crate::loopback::launch)). `tasks` (the
/// transport's tasks) are aborted when this returns or is dropped.
pub(crate) async fn run_ranks<F, Fut, R>(endpoints: Vec<Endpoint>, mut tasks: Tasks, hello_timeout: Duration, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Fut,
    Fut: Future<Output = Result<R>> + Send + 'static,
    R: Send + 'static,
{
    let n = endpoints.len();
    let hellos = async {
        for e in &endpoints {
            e.connected().await;
        }
    };
    if tokio::time::timeout(hello_timeout, hellos).await.is_err() {
        let silent: Vec<String> = endpoints
            .iter()
            .filter_map(|e| {
                let awaiting = e.awaiting_hello();
                (!awaiting.is_empty()).then(|| format!("rank {} has none from {awaiting:?}", e.rank()))
            })
            .collect();
        // None silent: the last hello came, or the transport failed the
        // last silent peer (its own bound may be this one), just as the
        // wait ended. The programs start, and learn of a failed peer as
        // they use it.
        if !silent.is_empty() {
            return Err(Error::transport(
                format!("waiting {hello_timeout:?} for every peer's hello ({})", silent.join("; ")),
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            ));
        }
    }
    let mut programs = Vec::with_capacity(n);
    // Every endpoint (and so its driver) lives until every rank is done: a
    // rank that has finished still reads, and drops, what peers send it.
    let _alive = endpoints.clone();
    for endpoint in endpoints {
        let rank = endpoint.rank();
        // `f` builds the program here, on the caller's task: a panic there
        // is the rank's, as one in its task is (its peers learn it failed).
        let program = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(endpoint.world()))) {
            Ok(program) => program,
            Err(payload) => {
                drop(Farewell(Some(endpoint)));
                programs.push((rank, Started::Panicked(panic_message(payload))));
                continue;
            }
        };
        let task = tokio::spawn(async move {
            // Finalizes even if the program panics or is aborted.
            let farewell = Farewell(Some(endpoint));
            let result = program.await;
            farewell.finish().await;
            result
        });
        tasks.0.push(task.abort_handle());
        programs.push((rank, Started::Task(task)));
    }
    let mut results = Vec::with_capacity(n);
    let mut errors = Vec::new();
    for (rank, started) in programs {
        let outcome = match started {
            Started::Task(task) => task.await,
            Started::Panicked(message) => {
                errors.push(ErrorKind::RankPanicked { rank, message }.into());
                continue;
            }
        };
        match outcome {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(e)) => errors.push(e),
            Err(join) if join.is_panic() => {
                let message = panic_message(join.into_panic());
                errors.push(ErrorKind::RankPanicked { rank, message }.into());
            }
            Err(join) => errors.push(Error::transport(format!("rank {rank}'s task"), join)),
        }
    }
    drop(tasks);
    let rank_of = |e: &Error| match e.kind() {
        ErrorKind::RankPanicked { .. } => 0,
        ErrorKind::ProcessFailed { .. } => 2,
        _ => 1,
    };
    match errors.into_iter().min_by_key(rank_of) {
        Some(e) => Err(e),
        None => Ok(results),
    }
}

/// A rank's program: running as a task, or failed as `f` built it.
enum Started<R> {
    Task(tokio::task::JoinHandle<Result<R>>),
    Panicked(String),
}

/// The message of a panic's payload.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into())
}

/// Finalizes a rank's endpoint when its program ends, however it ends.
struct Farewell(Option<Endpoint>);

impl Farewell {
    async fn finish(mut self) {
        if let Some(ep) = self.0.take() {
            if let Err(e) = ep.finalize().await {
                tracing::warn!(rank = ep.rank(), error = %e, "finalize failed");
            }
        }
    }
}

impl Drop for Farewell {
    fn drop(&mut self) {
        if let Some(ep) = self.0.take() {
            // The program panicked or was aborted: peers learn it failed.
            ep.abort();
        }
    }
}
