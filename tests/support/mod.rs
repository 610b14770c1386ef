//! The transport-neutral harness: a test is written once and runs on every
//! transport.
//!
//! `each_transport! { ... }` instantiates the items it wraps once per
//! transport, in a module named after it (tokio's `rt_test!` pattern). In
//! each module, `options(ranks)` gives that transport's launch options (to
//! adjust and pass to `launch_with`) and `launch(ranks, f)` launches on it.
//! A new transport is one more arm here.
//!
//! * `loopback`: the in-memory transport as `launch` makes it: messages
//!   meet at their receivers, without frames, and collectives meet in
//!   memory;
//! * `frames`: the in-memory transport with frames as values: messages go
//!   through the engines' protocols (eager, rendezvous in chunks, credit)
//!   and the links, as between processes; collectives meet in memory;
//! * `network_like`: frames encoded to bytes and decoded, small credit,
//!   rendezvous data in small chunks, external32 between the ranks;
//!   collectives exchange messages;
//! * `quic`: every rank its own QUIC endpoint on 127.0.0.1, mutual TLS
//!   under a job credential, frames on QUIC streams.
//!
//! [`returns`] runs a launch that must end, within [`LIMIT`], without error.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

/// How long a launch (or one awaited step) may take before a test counts
/// it as hung.
pub const LIMIT: Duration = Duration::from_secs(20);

/// The outcome of `run` (a `launch`), which must return within [`LIMIT`]
/// and without error: a hang or an error fails the test, naming which.
pub async fn returns<T>(run: impl Future<Output = mpx::Result<T>>) -> T {
    match tokio::time::timeout(LIMIT, run).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("launch failed: {e} ({e:?})"),
        Err(_) => panic!("launch did not return within {LIMIT:?}"),
    }
}

#[macro_export]
macro_rules! each_transport {
    (@on $name:ident, $options:path, $launcher:path; $($item:item)*) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            /// This transport's launch options for `ranks` ranks.
            #[allow(dead_code)]
            fn options(ranks: usize) -> mpx::LaunchOptions {
                $options(ranks)
            }

            /// `mpx::launch_with` on this transport.
            #[allow(dead_code)]
            async fn launch_with<F, Fut, R>(options: mpx::LaunchOptions, f: F) -> mpx::Result<Vec<R>>
            where
                F: Fn(mpx::Comm) -> Fut,
                Fut: std::future::Future<Output = mpx::Result<R>> + Send + 'static,
                R: Send + 'static,
            {
                $launcher(options, f).await
            }

            /// `mpx::launch` on this transport.
            #[allow(dead_code)]
            async fn launch<F, Fut, R>(ranks: usize, f: F) -> mpx::Result<Vec<R>>
            where
                F: Fn(mpx::Comm) -> Fut,
                Fut: std::future::Future<Output = mpx::Result<R>> + Send + 'static,
                R: Send + 'static,
            {
                launch_with(options(ranks), f).await
            }

            $($item)*
        }
    };
    ($($item:item)*) => {
        $crate::each_transport!(@on loopback, mpx::LaunchOptions::ranks, mpx::launch_with; $($item)*);
        $crate::each_transport!(@on frames, $crate::support::frames_options, mpx::launch_with; $($item)*);
        $crate::each_transport!(@on network_like, mpx::LaunchOptions::network_like, mpx::launch_with; $($item)*);
        $crate::each_transport!(@on quic, $crate::support::quic_options, $crate::support::quic_launch_with; $($item)*);
    };
}

/// Launch options for `ranks` ranks on the in-memory transport whose
/// messages travel as frames (values, not bytes), through the engines'
/// protocols and the links.
pub fn frames_options(ranks: usize) -> mpx::LaunchOptions {
    mpx::LaunchOptions { local_messages: false, ..mpx::LaunchOptions::ranks(ranks) }
}

/// Launch options for `ranks` ranks over QUIC: the engine's defaults (the
/// link settings of the loopback do not apply).
/// Its ranks are processes of their own as far as collectives go: they
/// exchange messages (`local_collectives` is false).
pub fn quic_options(ranks: usize) -> mpx::LaunchOptions {
    mpx::LaunchOptions { engine: mpx_net::quic::Options::local().engine, local_collectives: false, ..mpx::LaunchOptions::ranks(ranks) }
}

/// `launch_with` over QUIC on 127.0.0.1, with `options`' ranks and engine
/// configuration.
pub async fn quic_launch_with<F, Fut, R>(options: mpx::LaunchOptions, f: F) -> mpx::Result<Vec<R>>
where
    F: Fn(mpx::Comm) -> Fut,
    Fut: Future<Output = mpx::Result<R>> + Send + 'static,
    R: Send + 'static,
{
    let quic = mpx_net::quic::Options { engine: options.engine, ..mpx_net::quic::Options::local() };
    mpx_net::quic::launch_with(options.ranks, quic, f).await
}
