//! How fast ranks of one process can pass 8-byte messages with the least an
//! MPI-style matcher needs, beside the floor of `../shared/reference-bench/
//! tokio-floor` (two tokio tasks and a `tokio::sync::mpsc` channel), on a
//! current-thread and on a 2-worker multi-thread runtime.
//!
//! The mailbox: one per rank, a mutex around a queue of posted receives and
//! a queue of unexpected messages, each matched in order by (source, tag).
//! A send copies the caller's bytes into a new vector and either hands it
//! to the first matching posted receive (a slot shared with the receiving
//! task: its own mutex, the vector, the waker) or queues it; a receive
//! takes the first matching unexpected message, or posts its slot and
//! waits on it, copying into the caller's buffer in its own poll (no other
//! task ever writes into it, as mpx's soundness rule asks). No
//! communicators, wildcards, type signatures, statuses, truncation, send
//! modes, probes, cancellation or failure: what mpx's per-message cost
//! beyond this one pays for.
//!
//! ```text
//! cargo run --release
//! ```
//!
//! Prints one JSON line per runtime: the one-way time of a ping-pong (the
//! mailbox's and the floor's, alternating, median of 9 runs) and the time
//! per message with 64 in flight (rank 0 sends 64, rank 1 receives them,
//! then answers with one), as `mpx`'s `loopback_bench` measures its
//! `latency` and `rate` figures.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Instant;

use tokio::sync::mpsc;

/// Where a posted receive's message lands, and the task to wake for it.
struct Slot {
    data: Option<Vec<u8>>,
    waker: Option<Waker>,
}

struct Posted {
    source: u32,
    tag: i32,
    slot: Arc<Mutex<Slot>>,
}

#[derive(Default)]
struct Mailbox {
    posted: VecDeque<Posted>,
    unexpected: VecDeque<(u32, i32, Vec<u8>)>,
}

/// Every rank's mailbox.
struct World {
    mailboxes: Vec<Mutex<Mailbox>>,
}

impl World {
    fn new(ranks: usize) -> Arc<World> {
        Arc::new(World { mailboxes: (0..ranks).map(|_| Mutex::new(Mailbox::default())).collect() })
    }

    fn send(&self, me: u32, to: u32, tag: i32, buf: &[u8]) {
        let data = buf.to_vec();
        let mut mailbox = self.mailboxes[to as usize].lock().unwrap();
        match mailbox.posted.iter().position(|p| p.source == me && p.tag == tag) {
            Some(i) => {
                let posted = mailbox.posted.remove(i).expect("found above");
                drop(mailbox);
                let mut slot = posted.slot.lock().unwrap();
                slot.data = Some(data);
                if let Some(waker) = slot.waker.take() {
                    drop(slot);
                    waker.wake();
                }
            }
            None => mailbox.unexpected.push_back((me, tag, data)),
        }
    }

    async fn recv_into(&self, me: u32, from: u32, tag: i32, buf: &mut [u8]) {
        let slot = {
            let mut mailbox = self.mailboxes[me as usize].lock().unwrap();
            if let Some(i) = mailbox.unexpected.iter().position(|u| u.0 == from && u.1 == tag) {
                let (_, _, data) = mailbox.unexpected.remove(i).expect("found above");
                buf.copy_from_slice(&data);
                return;
            }
            let slot = Arc::new(Mutex::new(Slot { data: None, waker: None }));
            mailbox.posted.push_back(Posted { source: from, tag, slot: slot.clone() });
            slot
        };
        let data = std::future::poll_fn(|cx| {
            let mut slot = slot.lock().unwrap();
            match slot.data.take() {
                Some(data) => Poll::Ready(data),
                None => {
                    slot.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await;
        buf.copy_from_slice(&data);
    }
}

/// One-way seconds per 8-byte message, ping-pong through the mailboxes.
async fn mailbox_pingpong(iters: usize) -> f64 {
    let world = World::new(2);
    let peer = world.clone();
    let echo = tokio::spawn(async move {
        let mut buf = [1u8; 8];
        for _ in 0..iters {
            peer.recv_into(1, 0, 0, &mut buf).await;
            peer.send(1, 0, 0, &buf);
        }
    });
    let mut buf = [1u8; 8];
    let start = Instant::now();
    for _ in 0..iters {
        world.send(0, 1, 0, &buf);
        world.recv_into(0, 1, 0, &mut buf).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    echo.await.unwrap();
    elapsed / iters as f64 / 2.0
}

/// Seconds per 8-byte message with `window` in flight through the
/// mailboxes.
async fn mailbox_windowed(window: usize, iters: usize) -> f64 {
    let world = World::new(2);
    let peer = world.clone();
    let receiver = tokio::spawn(async move {
        let mut inbox = vec![[0u8; 8]; window];
        for _ in 0..iters {
            for slot in inbox.iter_mut() {
                peer.recv_into(1, 0, 0, slot).await;
            }
            peer.send(1, 0, 1, &[0u8; 8]);
        }
    });
    let mut answer = [0u8; 8];
    let start = Instant::now();
    for _ in 0..iters {
        for i in 0..window {
            world.send(0, 1, 0, &(i as u64).to_le_bytes());
        }
        world.recv_into(0, 1, 1, &mut answer).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    receiver.await.unwrap();
    elapsed / (iters * window) as f64
}

/// The floor: one-way seconds per 8-byte message between two tasks over
/// `tokio::sync::mpsc`, as `tokio-floor` measures it.
async fn floor_pingpong(iters: usize) -> f64 {
    let (to_echo, mut echo_inbox) = mpsc::channel::<Vec<u8>>(1);
    let (to_main, mut main_inbox) = mpsc::channel::<Vec<u8>>(1);
    let echo = tokio::spawn(async move {
        let mut dst = vec![0u8; 8];
        while let Some(m) = echo_inbox.recv().await {
            dst.copy_from_slice(&m);
            if to_main.send(m).await.is_err() {
                break;
            }
        }
    });
    let mut buf = vec![1u8; 8];
    let mut dst = vec![0u8; 8];
    let start = Instant::now();
    for _ in 0..iters {
        to_echo.send(std::mem::take(&mut buf)).await.unwrap();
        buf = main_inbox.recv().await.unwrap();
        dst.copy_from_slice(&buf);
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(to_echo);
    echo.await.unwrap();
    elapsed / iters as f64 / 2.0
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn on<F: Future<Output = f64> + Send + 'static>(rt: &tokio::runtime::Runtime, run: F) -> f64 {
    rt.block_on(async { tokio::spawn(run).await.unwrap() })
}

fn main() {
    let runtimes = [
        ("current_thread", tokio::runtime::Builder::new_current_thread().build().unwrap()),
        ("multi_thread_2", tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap()),
    ];
    for (name, rt) in runtimes {
        let (mut mailbox, mut floor, mut windowed) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..9 {
            mailbox.push(on(&rt, mailbox_pingpong(200_000)));
            floor.push(on(&rt, floor_pingpong(200_000)));
            windowed.push(on(&rt, mailbox_windowed(64, 3_000)));
        }
        let (mailbox, floor, windowed) = (median(mailbox), median(floor), median(windowed));
        println!(
            "{{\"runtime\":\"{name}\",\"mailbox_us\":{:.3},\"floor_us\":{:.3},\"latency_ratio\":{:.2},\"windowed_us_per_msg\":{:.3},\"rate_ratio\":{:.2}}}",
            mailbox * 1e6,
            floor * 1e6,
            mailbox / floor,
            windowed * 1e6,
            mailbox / windowed
        );
    }
}
