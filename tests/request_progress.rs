//! test calls make progress by themselves: with no driver task and no
//! runtime at all, a loop of `test` calls completes a rendezvous exchange.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use mpx::proto::engine::Config;
use mpx::proto::wire::Frame;
use mpx::runtime::SendError;
use mpx::{Endpoint, Request, Transport};

/// A transport with a queue per rank and no driver: frames wait until a
/// `test` call processes them.
/// Frames waiting for each rank, with their senders.
type Mailboxes = Arc<Vec<Mutex<VecDeque<(usize, Frame)>>>>;

#[derive(Clone)]
struct Queues {
    me: usize,
    queues: Mailboxes,
}

impl Transport for Queues {
    fn send(&self, dest: usize, frame: Frame) -> Result<(), SendError> {
        self.queues[dest].lock().unwrap().push_back((self.me, frame));
        Ok(())
    }

    fn progress(&self, deliver: &mut dyn FnMut(usize, Frame)) {
        let mut q = self.queues[self.me].lock().unwrap();
        while let Some((from, frame)) = q.pop_front() {
            deliver(from, frame);
        }
    }
}

fn poll_until_done(reqs: &mut [&mut Request<'_>]) -> usize {
    let mut rounds = 0;
    let mut done = vec![false; reqs.len()];
    while !done.iter().all(|d| *d) {
        for (i, r) in reqs.iter_mut().enumerate() {
            if !done[i] {
                if let Some(result) = r.test() {
                    result.unwrap();
                    done[i] = true;
                }
            }
        }
        rounds += 1;
        assert!(rounds < 1000, "no progress");
    }
    rounds
}

#[test]
fn a_test_loop_progresses_without_a_driver() {
    let queues = Arc::new(vec![Mutex::new(VecDeque::new()), Mutex::new(VecDeque::new())]);
    let config = Config { eager_threshold: 8, ..Config::default() };
    let a = Endpoint::new(0, 2, config, Queues { me: 0, queues: queues.clone() }).unwrap().world();
    let b = Endpoint::new(1, 2, config, Queues { me: 1, queues }).unwrap().world();
    let data: Vec<u64> = (0..100).collect();
    let mut inbox = vec![0u64; 100];
    // A synchronous (rendezvous) send needs RTS, CTS and data to travel:
    // each hop happens inside some test call.
    let mut send = a.issend(&data, 1, 3);
    let mut recv = b.irecv(&mut inbox, 0, 3);
    let rounds = poll_until_done(&mut [&mut send, &mut recv]);
    assert!(rounds >= 2);
    drop((send, recv));
    assert_eq!(inbox, data);
}

#[test]
fn a_busy_test_loop_on_a_current_thread_runtime_completes_a_rendezvous() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut opts = mpx::LaunchOptions::ranks(2);
    opts.engine.eager_threshold = 16;
    let out = rt
        .block_on(mpx::launch_with(opts, |comm| async move {
            if comm.rank() == 0 {
                let data = vec![3u64; 1000];
                comm.isend(&data, 1, 0).await?;
                Ok(0)
            } else {
                // Let rank 0 start its send, then never yield again: only the
                // test calls themselves can move the RTS, CTS and data.
                comm.probe(0, 0).await?;
                let mut buf = vec![0u64; 1000];
                let mut req = comm.irecv(&mut buf, 0, 0);
                let mut calls = 0u64;
                let status = loop {
                    calls += 1;
                    assert!(calls < 1_000_000, "no progress from test calls");
                    if let Some(r) = req.test() {
                        break r?;
                    }
                };
                drop(req);
                assert_eq!((status.bytes, buf[999]), (8000, 3));
                Ok(calls)
            }
        }))
        .unwrap();
    assert!(out[1] >= 1);
}

/// A loop of `iprobe` (and of `improbe`) calls makes progress by itself
/// too: with no driver task, it sees a message once it has been sent.
#[test]
fn a_probe_loop_progresses_without_a_driver() {
    let queues = Arc::new(vec![Mutex::new(VecDeque::new()), Mutex::new(VecDeque::new())]);
    let a = Endpoint::new(0, 2, Config::default(), Queues { me: 0, queues: queues.clone() }).unwrap().world();
    let b = Endpoint::new(1, 2, Config::default(), Queues { me: 1, queues }).unwrap().world();
    let mut send = a.isend(&7u8, 1, 0);
    let mut other = a.isend(&8u8, 1, 1);
    let status = within_1000_calls("the iprobe loop seeing the message", || {
        let _ = send.test();
        b.iprobe(0, 0).unwrap()
    });
    assert_eq!(status.count::<u8>(), Some(1));
    let message = within_1000_calls("the improbe loop taking the message", || {
        let _ = other.test();
        b.improbe(0, 1).unwrap()
    });
    assert_eq!(message.status().count::<u8>(), Some(1));
}

/// What `step` gives, once it gives something, in at most 1,000 calls.
fn within_1000_calls<T>(what: &str, mut step: impl FnMut() -> Option<T>) -> T {
    (0..1000).find_map(|_| step()).unwrap_or_else(|| panic!("no {what} in 1,000 calls"))
}
