//! 10,000 outstanding receives completed through a RequestSet: the work of
//! each wait_some call follows what completed, not what is outstanding
//! (counted in request polls, not in time).
//!
//! Over QUIC a waiting request's waker is also one of the (at most
//! `ARRIVAL_WAKERS`) wakers the connection wakes on an arrival, so that the
//! waiting task reads it itself: each arrival may cost that many extra
//! polls, whatever the number outstanding.

use mpx::RequestSet;

#[macro_use]
mod support;

each_transport! {
const OUTSTANDING: usize = 10_000;
/// Slots an arrival may wake besides those it completes (QUIC's inlet
/// remembers at most 8 waiting wakers).
const ARRIVAL_WAKERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_some_work_follows_completions() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            // Send to the tags in a scrambled order, in small batches.
            let mut order: Vec<usize> = (0..OUTSTANDING).collect();
            let mut x = 12345u64;
            for i in (1..order.len()).rev() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                order.swap(i, (x >> 33) as usize % (i + 1));
            }
            for batch in order.chunks(7) {
                for &tag in batch {
                    comm.send(&[tag as u32], 1, tag as i32).await?;
                }
                comm.recv_vec::<u8>(1, OUTSTANDING as i32).await?; // the batch was consumed
            }
            Ok(vec![])
        } else {
            let mut bufs = vec![[u32::MAX]; OUTSTANDING];
            let mut set = RequestSet::new();
            for (tag, b) in bufs.iter_mut().enumerate() {
                set.push(comm.irecv(b, 0, tag as i32));
            }
            let mut completed = 0usize;
            let mut per_call = vec![];
            let mut first = true;
            while completed < OUTSTANDING {
                let before = set.polls();
                let done = set.wait_some().await.expect("active requests");
                let polls = set.polls() - before;
                if first {
                    // The first call polls every new request once to register it.
                    assert!(polls as usize <= OUTSTANDING + 2 * (done.len() + ARRIVAL_WAKERS), "{polls} polls");
                    first = false;
                } else {
                    per_call.push((polls, done.len()));
                }
                for (_, r) in &done {
                    r.as_ref().map_err(Clone::clone)?;
                }
                completed += done.len();
                if completed.is_multiple_of(7) || completed == OUTSTANDING {
                    comm.send(&[0u8], 0, OUTSTANDING as i32).await?;
                }
            }
            drop(set);
            assert!(bufs.iter().enumerate().all(|(t, b)| b[0] == t as u32));
            Ok(per_call)
        }
    })
    .await
    .unwrap();
    let per_call = &out[1];
    let polls: u64 = per_call.iter().map(|p| p.0).sum();
    let done: usize = per_call.iter().map(|p| p.1).sum();
    // Each call polls only the requests that were woken: about one per completion.
    let bound = 2 * done + (1 + ARRIVAL_WAKERS) * per_call.len();
    assert!(polls as usize <= bound, "{polls} polls for {done} completions in {} calls", per_call.len());
    assert!(per_call.iter().all(|&(p, d)| p as usize <= 2 * (d + ARRIVAL_WAKERS)), "a call polled far more than it completed");
}
}
