//! Examples 3.10 to 3.15 of MPI-1 §3.7 (shared/seeds/004), with the known
//! defects of their text fixed as shared/seeds/README.md says.

use std::time::Duration;

use mpx::prelude::*;
use mpx::RequestSet;

#[macro_use]
mod support;

each_transport! {
/// Example 3.10: isend / irecv, computation, then wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_10_nonblocking_with_wait() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            let a: Vec<f32> = (0..10).map(|i| i as f32).collect();
            let req = comm.isend(&a, 1, 4);
            let busy: f32 = a.iter().sum(); // computation overlapping the send
            req.await?;
            Ok((busy, vec![]))
        } else {
            let mut a = [0f32; 15];
            let req = comm.irecv(&mut a, 0, 4);
            let busy = (0..1000).map(|i| i as f32).sum::<f32>();
            let st = req.await?;
            assert_eq!(st.count::<f32>(), Some(10));
            Ok((busy, a.to_vec()))
        }
    })
    .await
    .unwrap();
    assert_eq!(&out[1].1[..10], &(0..10).map(|i| i as f32).collect::<Vec<_>>()[..]);
}

/// Example 3.11: request_free in a reply loop: each side frees its send
/// request and learns that the send completed from the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_11_request_free_in_a_reply_loop() {
    let n = 200;
    let out = launch(2, move |comm| async move {
        let mut inval = [0f32];
        let mut received = 0;
        if comm.rank() == 0 {
            for i in 0..n {
                comm.isend(&[i as f32], 1, 0).free();
                comm.irecv(&mut inval, 1, 0).await?;
                assert_eq!(inval[0], i as f32 + 0.5);
                received += 1;
            }
        } else {
            comm.irecv(&mut inval, 0, 0).await?;
            received += 1;
            for _ in 0..n - 1 {
                comm.isend(&[inval[0] + 0.5], 0, 0).free();
                comm.irecv(&mut inval, 0, 0).await?;
                received += 1;
            }
            comm.isend(&[inval[0] + 0.5], 0, 0).await?;
        }
        Ok(received)
    })
    .await
    .unwrap();
    assert_eq!(out, [n, n]);
}

/// Example 3.12: nonblocking operations are ordered by when they start: the
/// first isend matches the first irecv even if both messages arrived first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_12_nonblocking_order() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            let (a, b) = ([1.0f32], [2.0f32]);
            let r1 = comm.isend(&a, 1, 0);
            let r2 = comm.isend(&b, 1, 0);
            r1.await?;
            r2.await?;
            comm.send(&[0u8], 1, 9).await?;
            Ok((0.0, 0.0))
        } else {
            comm.recv_vec::<u8>(0, 9).await?; // both messages have arrived
            let (mut a, mut b) = ([0f32], [0f32]);
            let r1 = comm.irecv(&mut a, 0, Any);
            let r2 = comm.irecv(&mut b, 0, 0);
            // Wait in the opposite order: matching followed the posting order.
            r2.await?;
            r1.await?;
            Ok((a[0], b[0]))
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], (1.0, 2.0));
}

/// Example 3.13: the synchronous send completes once the matching irecv is
/// posted, although its owner waits on it only later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_13_progress_without_waiting() {
    let run = launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.ssend(&[1.0f32], 1, 0).await?;
            comm.send(&[2.0f32], 1, 1).await?;
            Ok((0.0, 0.0))
        } else {
            let (mut a, mut b) = ([0f32], [0f32]);
            let r = comm.irecv(&mut a, 0, 0);
            comm.recv_into(&mut b, 0, 1).await?;
            r.await?;
            Ok((a[0], b[0]))
        }
    });
    let out = tokio::time::timeout(Duration::from_secs(10), run).await.expect("no deadlock").unwrap();
    assert_eq!(out[1], (1.0, 2.0));
}

const ROUNDS: usize = 50;

/// A client of examples 3.14 and 3.15: sends `ROUNDS` numbered requests to
/// the server, rank 0.
async fn client(comm: &Comm) -> mpx::Result<()> {
    for i in 0..ROUNDS {
        comm.isend(&(i as u32), 0, 0).await?;
    }
    Ok(())
}

/// Example 3.14: a server with one pending receive per client, completed
/// with wait_any, re-posting into the slot it served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_14_client_server_with_wait_any() {
    let out = launch(5, |comm| async move {
        let size = comm.size();
        if comm.rank() > 0 {
            client(&comm).await?;
            return Ok(vec![]);
        }
        let mut requests: RequestSet<_> = (1..size).map(|c| comm.recv::<u32>(c, 0)).collect();
        let mut served = vec![0usize; size];
        while let Some((index, outcome)) = requests.wait_any().await {
            let (n, status) = outcome?;
            let client = index + 1;
            assert_eq!(status.source, Some(client));
            assert_eq!(n as usize, served[client], "in order per client");
            served[client] += 1;
            if served[client] < ROUNDS {
                requests.set(index, comm.recv(client, 0))?;
            }
        }
        Ok(served)
    })
    .await
    .unwrap();
    assert_eq!(&out[0][1..], &[ROUNDS; 4]);
}

/// Example 3.15: the same server with wait_some, which serves every client
/// whose request completed, so no client can starve: with every client's
/// messages waiting, each call serves all clients at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_15_client_server_with_wait_some() {
    const CLIENTS: usize = 4;
    // Few enough that every client's messages are buffered at the server
    // within its eager credit (64 KiB on network_like, each small message
    // counting 1 KiB).
    const EACH: usize = 40;
    let out = launch(CLIENTS + 1, |comm| async move {
        let size = comm.size();
        if comm.rank() > 0 {
            for i in 0..EACH {
                comm.isend(&(i as u32), 0, 0).await?;
            }
            comm.send(&[0u8], 0, 1).await?; // all sent (and buffered at the server)
            return Ok(vec![]);
        }
        for _ in 1..size {
            comm.recv_vec::<u8>(Any, 1).await?;
        }
        let mut requests: RequestSet<_> = (1..size).map(|c| comm.recv::<u32>(c, 0)).collect();
        let mut served = vec![0usize; size];
        let mut per_call = vec![];
        while let Some(done) = requests.wait_some().await {
            per_call.push(done.len());
            for (index, outcome) in done {
                let (n, _) = outcome?;
                let client = index + 1;
                assert_eq!(n as usize, served[client], "in order per client");
                served[client] += 1;
                if served[client] < EACH {
                    requests.set(index, comm.recv(client, 0))?;
                }
            }
        }
        assert_eq!(&served[1..], &[EACH; CLIENTS]);
        Ok(per_call)
    })
    .await
    .unwrap();
    // Every client had a message waiting at every call: each call served them all.
    assert!(out[0].iter().all(|&n| n == CLIENTS), "{:?}", out[0]);
}
}
