//! wait/test and the completion combinators: null entries, per-request
//! errors, fairness, progress from test loops, composition with futures
//! combinators, cancel, request_free, owned buffers, persistent requests.

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use mpx::prelude::*;
use mpx::{start_all, wait_all, Persistent, Request, RequestSet, Tested};

#[macro_use]
mod support;

each_transport! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_start_when_called() {
    launch(2, |comm| async move {
        if comm.rank() == 0 {
            // Nobody polls the irecv before the message arrives; it still matches.
            let mut buf = [0u8; 2];
            let req = comm.irecv(&mut buf, 1, 0);
            comm.send(&[0u8], 1, 1).await?; // go
            comm.recv_vec::<u8>(1, 2).await?; // rank 1's ssend completed
            assert!(comm.iprobe(1, 0)?.is_none(), "the message matched the unpolled irecv");
            req.await?;
            assert_eq!(buf, [7, 8]);
        } else {
            comm.recv_vec::<u8>(0, 1).await?;
            // Completes because the matching irecv is posted, though not awaited.
            comm.ssend(&[7u8, 8], 0, 0).await?;
            comm.send(&[0u8], 0, 2).await?;
        }
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_and_inactive_entries() {
    launch(1, |comm| async move {
        // A set with no active slot: MPI_UNDEFINED from every call.
        let mut none: RequestSet<Request> = RequestSet::new();
        assert!(none.wait_any().await.is_none());
        assert!(matches!(none.test_any(), Tested::Inactive));
        assert!(none.wait_some().await.is_none());
        assert!(matches!(none.test_some(), Tested::Inactive));
        assert!(none.wait_all().await.is_empty());
        assert_eq!(none.test_all().map(|all| all.len()), Some(0));
        // A slot emptied by its completion is a null request from then on.
        let mut set: RequestSet<_> = [comm.isend(&1u8, 0, 0), Request::inactive()].into_iter().collect();
        let all = set.wait_all().await;
        assert!(matches!(&all[..], [(0, Ok(_)), (1, Ok(st))] if *st == Status::empty()));
        assert!(set.wait_any().await.is_none());
        assert_eq!((set.len(), set.active()), (2, 0));
        assert_eq!(comm.recv::<u8>(0, 0).await?.0, 1);
        // wait_any, wait_some, test_any and test_some pass over null and
        // inactive requests (MPI-4.1 §3.7.5): with one active request
        // beside them, they return it and then report nothing active.
        let mut x = 0u8;
        let mut set = RequestSet::new();
        set.push(Request::inactive());
        let recv = set.push(comm.irecv(&mut x, 0, 5));
        set.push(Request::inactive());
        assert_eq!(set.active(), 1);
        assert!(matches!(set.test_any(), Tested::Pending), "the receive has no message yet");
        comm.send(&4u8, 0, 5).await?;
        assert!(matches!(set.wait_any().await, Some((slot, Ok(_))) if slot == recv));
        assert!(set.wait_any().await.is_none());
        assert!(set.wait_some().await.is_none());
        assert!(matches!(set.test_any(), Tested::Inactive));
        assert!(matches!(set.test_some(), Tested::Inactive));
        assert_eq!((set.len(), set.active()), (3, 0));
        let all = set.wait_all().await;
        assert_eq!(all.iter().map(|(slot, _)| *slot).collect::<Vec<_>>(), [0, 2]);
        assert!(all.iter().all(|(_, st)| matches!(st, Ok(st) if *st == Status::empty())));
        drop(set);
        assert_eq!(x, 4);
        // wait_all over slots: None entries are null requests, with no outcome.
        let mut slots: Vec<Option<Request>> = vec![None, None];
        assert!(wait_all(&mut slots).await.iter().all(Option::is_none));
        // PROC_NULL requests complete at once with an empty status.
        let st = comm.irecv(&mut [0u8], PROC_NULL, Any).await?;
        assert_eq!(st, Status::empty());
        Ok(())
    })
    .await
    .unwrap();
}

/// Receives of a value, owned receives and collectives whose outcome was
/// taken are inactive, as a taken `Request` is: a set passes over them
/// rather than reporting them again (or panicking); a set's `wait_all`
/// gives them nothing (they have no empty outcome), and taking a spent
/// value receive's outcome is an error.
/// Taking the outcome of a collective that has not finished is an error,
/// as it is of a request; the collective finishes afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outcome_of_an_unfinished_collective_is_an_error() {
    launch(2, |comm| async move {
        use mpx::Operation;
        if comm.rank() == 1 {
            comm.recv::<u8>(0, 0).await?;
            return comm.barrier().await;
        }
        let mut barrier = comm.barrier();
        assert!(matches!(barrier.take_output(), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))), "rank 1 has not come");
        comm.send(&0u8, 1, 0).await?;
        barrier.await
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spent_receives_and_collectives_are_inactive() {
    launch(1, |comm| async move {
        use mpx::{OwnedRecv, Operation, ValueRecv};
        comm.send(&1u8, 0, 0).await?;
        comm.send(&[2u8; 3], 0, 1).await?;
        let mut value: ValueRecv<u8> = comm.recv(0, 0);
        assert_eq!((&mut value).await?.0, 1);
        let mut owned: OwnedRecv<Vec<u8>> = comm.irecv_owned(vec![0; 3], 0, 1);
        assert_eq!((&mut owned).await.map_err(|e| e.error)?.0, [2; 3]);
        let mut barrier = comm.barrier();
        (&mut barrier).await?;
        assert!(value.is_inactive() && owned.is_inactive() && barrier.is_inactive());
        assert!(matches!(value.take_output(), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))));
        // Taking the outcome of one not complete is an error too.
        let mut early: ValueRecv<u8> = comm.recv(0, 9);
        assert!(matches!(early.take_output(), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))));
        let mut inbox = 0u8;
        let mut request = comm.irecv(&mut inbox, 0, 9);
        assert!(matches!(Operation::take_output(&mut request), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))));
        assert!(!request.is_complete(), "still posted");
        drop(early);
        comm.send(&9u8, 0, 9).await?;
        request.await?;
        assert_eq!(inbox, 9);

        let mut values = RequestSet::new();
        values.push(value);
        let pending = values.push(comm.recv::<u8>(0, 2));
        assert_eq!(values.active(), 1);
        assert!(matches!(values.test_any(), Tested::Pending));
        comm.send(&3u8, 0, 2).await?;
        assert!(matches!(values.wait_any().await, Some((slot, Ok((3, _)))) if slot == pending));
        assert!(values.wait_any().await.is_none(), "the spent receive is passed over");
        assert!(values.wait_all().await.is_empty(), "no outcome left to give");

        let mut owneds = RequestSet::new();
        owneds.push(owned);
        assert!(owneds.wait_some().await.is_none());
        assert!(matches!(owneds.test_some(), Tested::Inactive));
        assert!(owneds.wait_all().await.is_empty(), "no outcome left to give");
        let mut slots = [Some(comm.irecv_owned(vec![0u8; 1], 0, 3))];
        comm.send(&[4u8], 0, 3).await?;
        assert!(matches!(&wait_all(&mut slots).await[..], [Some(Ok((v, _)))] if *v == [4]));
        assert!(matches!(&wait_all(&mut slots).await[..], [None]), "taken: nothing left");

        let mut collectives = RequestSet::new();
        collectives.push(barrier);
        assert_eq!(collectives.active(), 0);
        assert!(collectives.wait_any().await.is_none(), "the finished barrier is not reported again");
        let again = collectives.push(comm.barrier());
        assert!(matches!(collectives.wait_any().await, Some((slot, Ok(()))) if slot == again));
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_reports_its_own_error() {
    launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&[1u32, 2, 3], 1, 0).await?;
            comm.send(&[4u32], 1, 1).await?;
            Ok(())
        } else {
            let (mut small, mut ok, mut bad_rank) = ([0u32; 2], [0u32; 1], [0u32; 1]);
            let mut reqs = vec![
                Some(comm.irecv(&mut small, 0, 0)),
                Some(comm.irecv(&mut ok, 0, 1)),
                Some(comm.irecv(&mut bad_rank, 9, 1)),
                None,
            ];
            let results = wait_all(&mut reqs).await;
            assert!(matches!(results[0], Some(Err(ref e)) if matches!(e.kind(), ErrorKind::Truncate { .. })));
            assert!(matches!(&results[1], Some(Ok(st)) if st.bytes == 4));
            assert!(matches!(results[2], Some(Err(ref e)) if matches!(e.kind(), ErrorKind::InvalidRank { rank: 9, .. })));
            assert!(results[3].is_none());
            assert!(reqs.iter().all(Option::is_none));
            drop(reqs);
            assert_eq!(ok, [4]);
            Ok(())
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_all_waits_for_every_slot_and_wait_some_returns_all() {
    launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&1u8, 1, 0).await?;
            comm.send(&0u8, 1, 8).await?; // after tag 0, which is delivered first
            comm.recv::<u8>(1, 9).await?;
            comm.send(&2u8, 1, 1).await?;
            comm.send(&3u8, 1, 2).await?;
            comm.send(&4u8, 1, 3).await?;
            comm.send(&0u8, 1, 10).await?; // after tags 2 and 3
            Ok(())
        } else {
            let mut set: RequestSet<_> = (0..2).map(|tag| comm.recv::<u8>(0, tag)).collect();
            comm.recv::<u8>(0, 8).await?; // so tag 0 has completed
            for _ in 0..10 {
                assert!(set.test_all().is_none(), "tag 1 is still pending");
                tokio::task::yield_now().await;
            }
            assert_eq!(set.active(), 2, "test_all returns nothing until all complete");
            comm.send(&0u8, 0, 9).await?;
            let all = set.wait_all().await;
            let got: Vec<(usize, u8)> = all.into_iter().map(|(slot, r)| r.map(|(v, _)| (slot, v))).collect::<Result<_>>()?;
            assert_eq!(got, [(0, 1), (1, 2)]);
            // wait_some returns every completed request at once.
            comm.recv::<u8>(0, 10).await?; // tags 2 and 3 are queued now
            let mut set: RequestSet<_> = (2..4).map(|tag| comm.recv::<u8>(0, tag)).collect();
            let done = set.wait_some().await.unwrap();
            assert_eq!(done.iter().map(|(slot, _)| *slot).collect::<Vec<_>>(), [0, 1]);
            assert!(set.wait_some().await.is_none());
            Ok(())
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_set_serves_every_slot_in_turn() {
    const K: usize = 4;
    const ROUNDS: u32 = 400;
    let wins = launch(1, |comm| async move {
        let mut wins = vec![0usize; K];
        // One receive per "client" tag, each re-posted once served, with
        // the next message of every client always waiting: a server that
        // favoured low slots would starve the others.
        let mut set: RequestSet<_> = (0..K as i32).map(|tag| comm.recv::<u32>(0, tag)).collect();
        for tag in 0..K as i32 {
            comm.send(&0u32, 0, tag).await?;
        }
        for round in 0..ROUNDS {
            let (slot, outcome) = set.wait_any().await.expect("every slot is active");
            outcome?;
            wins[slot] += 1;
            comm.send(&round, 0, slot as i32).await?;
            set.set(slot, comm.recv::<u32>(0, slot as i32))?;
            assert!(matches!(set.set(99, comm.recv::<u32>(0, 99)), Err(ref e) if matches!(e.kind(), mpx::ErrorKind::InvalidArgument(_))), "a slot the set does not have");
        }
        for (_, outcome) in set.wait_all().await {
            outcome?;
        }
        Ok(wins)
    })
    .await
    .unwrap()
    .remove(0);
    // Each slot should be served about ROUNDS / K = 100 times.
    assert!(wins.iter().all(|&w| w >= 50), "some slots were starved: {wins:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_compose_with_futures_combinators() {
    launch(1, |comm| async move {
        for tag in 0..4 {
            comm.send(&[tag as u8], 0, tag).await?;
        }
        let mut bufs = vec![[0u8]; 4];
        let [a, b, c, d] = &mut bufs[..] else { unreachable!() };
        // tokio::select! over two receives: the other is dropped (withdrawn).
        let winner = tokio::select! {
            r = comm.irecv(&mut *a, 0, 0) => r.map(|_| 0),
            r = comm.irecv(&mut *b, 0, 42) => r.map(|_| 42),
        }?;
        assert_eq!(winner, 0);
        // select_all and join_all.
        let (r, _, rest) = futures::future::select_all(vec![comm.irecv(&mut *b, 0, 1), comm.irecv(&mut *c, 0, 99)]).await;
        r?;
        drop(rest);
        let all = futures::future::join_all(vec![comm.irecv(c, 0, 2), comm.irecv(d, 0, 3)]).await;
        assert!(all.iter().all(Result::is_ok));
        assert_eq!(bufs, [[0], [1], [2], [3]]);
        // FuturesUnordered of owned receives.
        for tag in 0..3 {
            comm.send(&[tag as u16], 0, 10 + tag).await?;
        }
        let mut pending: FuturesUnordered<_> = (0..3).map(|t| comm.recv::<u16>(0, 10 + t)).collect();
        let mut got = vec![];
        while let Some(r) = pending.next().await {
            got.push(r?.0);
        }
        got.sort();
        assert_eq!(got, [0, 1, 2]);
        assert!(comm.iprobe(Any, Any)?.is_none(), "the dropped receives took nothing");
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_marks_a_pending_receive_and_spares_a_matched_one() {
    launch(1, |comm| async move {
        let mut buf = [0u8];
        let mut req = comm.irecv(&mut buf, 0, 5);
        assert!(req.cancel());
        let st = req.await?;
        assert!(st.test_cancelled());
        comm.send(&[9u8], 0, 6).await?;
        comm.probe(0, 6).await?;
        let mut req = comm.irecv(&mut buf, 0, 6);
        assert!(!req.cancel(), "already matched");
        let st = req.await?;
        assert!(!st.test_cancelled());
        assert_eq!(buf, [9]);
        let mut send = comm.isend(&[1u8], 0, 7);
        assert!(!send.cancel(), "sends are not cancelled");
        send.await?;
        comm.recv_vec::<u8>(0, 7).await?;
        Ok(())
    })
    .await
    .unwrap();
}

/// A receive cancelled while another task waits on it (a request shared
/// behind a lock) wakes that task, which finds it cancelled: a borrowed
/// receive's request and an owned receive alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_receive_another_task_waits_on_wakes_that_task() {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};

    /// Spawns a task awaiting `shared`, returns it once it has polled it.
    async fn waiting_on<F>(shared: Arc<Mutex<F>>) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Unpin + Send + 'static,
        F::Output: Send,
    {
        let (polled, was_polled) = tokio::sync::oneshot::channel();
        let mut polled = Some(polled);
        let task = tokio::spawn(std::future::poll_fn(move |cx| {
            let outcome = Pin::new(&mut *shared.lock().unwrap()).poll(cx);
            if let Some(polled) = polled.take() {
                let _ = polled.send(());
            }
            outcome
        }));
        was_polled.await.unwrap();
        task
    }
    const WOKEN_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

    launch(1, |comm| async move {
        let buf: &'static mut [u8; 4] = Box::leak(Box::new([0u8; 4]));
        let borrowed = Arc::new(Mutex::new(comm.irecv(&mut buf[..], 0, 1)));
        let task = waiting_on(borrowed.clone()).await;
        assert!(borrowed.lock().unwrap().cancel());
        let status = tokio::time::timeout(WOKEN_WITHIN, task).await.expect("the waiting task is woken").unwrap()?;
        assert!(status.test_cancelled());

        let owned = Arc::new(Mutex::new(comm.irecv_owned(vec![0u8; 4], 0, 2)));
        let task = waiting_on(owned.clone()).await;
        assert!(owned.lock().unwrap().cancel());
        let (buffer, status) = tokio::time::timeout(WOKEN_WITHIN, task).await.expect("the waiting task is woken").unwrap()?;
        assert!(status.test_cancelled() && buffer == [0; 4]);
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_buffers_give_static_spawnable_requests() {
    launch(2, |comm| async move {
        if comm.rank() == 0 {
            let send = tokio::spawn(comm.isend(vec![1.5f64; 1000], 1, 0));
            let bytes = tokio::spawn(comm.isend(Bytes::from_static(b"raw"), 1, 1));
            send.await.unwrap()?;
            bytes.await.unwrap()?;
            Ok(())
        } else {
            let recv = tokio::spawn(comm.irecv_owned(vec![0f64; 1000], 0, 0));
            let (v, st) = recv.await.unwrap()?;
            assert_eq!((v[999], st.bytes), (1.5, 8000));
            let (raw, _) = comm.irecv_bytes(0, 1).await?;
            assert_eq!(&raw[..], b"raw");
            // A failed owned receive hands its buffer back.
            comm.send(&[1u64, 2, 3], 1, 2).await?;
            let err = comm.irecv_owned(vec![7u64; 2], 1, 2).await.unwrap_err();
            assert_eq!(err.error, ErrorKind::Truncate { needed: 24, available: 16, message: Some((1, 2)) });
            assert_eq!(err.buffer, [7, 7]);
            Ok(())
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freed_sends_still_deliver() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            for i in 0..100u32 {
                comm.issend(&[i], 1, 0).free();
            }
            Ok(vec![])
        } else {
            let mut got = vec![];
            for _ in 0..100 {
                got.push(comm.recv_vec::<u32>(0, 0).await?.0[0]);
            }
            Ok(got)
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], (0..100).collect::<Vec<_>>());
}

/// `MPI_Request_free` of a receive (MPI-4.1 §3.7.3): it stays posted and
/// takes the message it matches, whether freed before the message came,
/// after it matched, for a rendezvous message, or too short for it; its
/// buffer is never written, and the next receive gets the next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freed_receives_still_take_their_messages() {
    const BIG: usize = 1 << 20;
    launch(2, |comm| async move {
        let comm = &comm;
        let go = |tag| async move { comm.send(&[0u8], 1 - comm.rank(), 100 + tag).await };
        let wait_go = |tag| async move { comm.recv::<u8>(1 - comm.rank(), 100 + tag).await.map(drop) };
        if comm.rank() == 0 {
            wait_go(0).await?;
            comm.send(&[1u8, 1], 1, 0).await?;
            comm.send(&[2u8, 2], 1, 0).await?;
            comm.ssend(&[3u8, 3], 1, 1).await?; // matched once this returns
            go(1).await?;
            wait_go(2).await?;
            comm.send(&[4u8, 4], 1, 1).await?;
            comm.send(&vec![1u8; BIG][..], 1, 2).await?; // completes: taken by the freed receive
            comm.send(&vec![7u8; BIG][..], 1, 2).await?;
            comm.send(&[5u8; 3], 1, 3).await?; // too long for the freed receive
            comm.send(&[6u8], 1, 3).await?;
            for i in 0..64u8 {
                comm.send(&vec![i; 64 << 10][..], 1, 4).await?;
            }
            comm.send(&[9u8], 1, 4).await?;
        } else {
            let (mut before, mut matched, mut big, mut short) = ([0u8; 2], [0u8; 2], vec![0u8; BIG], [0u8; 1]);
            let mut many = vec![[0u8; 64 << 10]; 64];
            comm.irecv(&mut before, 0, 0).free();
            let matching = comm.irecv(&mut matched, 0, 1);
            comm.irecv(&mut big[..], 0, 2).free();
            comm.irecv(&mut short, 0, 3).free();
            for buf in many.iter_mut() {
                comm.irecv(&mut buf[..], 0, 4).free();
            }
            go(0).await?;
            assert_eq!(comm.recv::<[u8; 2]>(0, 0).await?.0, [2, 2], "the freed receive took the first message");
            wait_go(1).await?;
            matching.free();
            go(2).await?;
            assert_eq!(comm.recv::<[u8; 2]>(0, 1).await?.0, [4, 4], "the message it matched went with it");
            let (data, _) = comm.recv_vec::<u8>(0, 2).await?;
            assert!(data.len() == BIG && data.iter().all(|&b| b == 7), "the freed receive took the first large message");
            assert_eq!(comm.recv_vec::<u8>(0, 3).await?.0, [6], "a message too long for it is still taken");
            assert_eq!(comm.recv_vec::<u8>(0, 4).await?.0, [9], "64 freed receives took 64 messages");
            assert_eq!((before, matched, short), ([0; 2], [0; 2], [0]), "no freed receive's buffer is written");
            assert!(big.iter().all(|&b| b == 0) && many.iter().all(|b| b.iter().all(|&x| x == 0)));
        }
        Ok(())
    })
    .await
    .unwrap();
}

/// Messages taken by freed receives give their eager credit back, whether
/// they were queued when the receives were freed or came after: with
/// credit for eight 1 KiB messages and a little more, eight go to freed
/// receives, and a ninth still goes eagerly (its send completes before
/// its receive is posted), where credit held for ever would make it wait
/// for a receive that comes only after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freed_receives_give_their_credit_back() {
    let mut opts = options(2);
    // Each message costs its length, its type description (external32
    // sends one, under 128 bytes) and EAGER_OVERHEAD: credit for the eight
    // and the "all sent" after them, but not a ninth 1 KiB message.
    let cost = |len: u64| len + 128 + mpx::proto::engine::EAGER_OVERHEAD;
    opts.engine.eager_credit = 8 * cost(1024) + cost(1) + 128;
    let run = launch_with(opts, |comm| async move {
        let comm = &comm;
        // Phase 0: the messages are queued before their receives are
        // posted and freed; phase 1: the receives are freed first.
        for phase in 0..2 {
            let tag = |t: i32| 10 * phase + t;
            if comm.rank() == 0 {
                comm.recv::<u8>(1, tag(0)).await?; // go
                for i in 0..8u8 {
                    comm.send(&[i; 1024][..], 1, tag(1)).await?;
                }
                comm.send(&[0u8], 1, tag(2)).await?; // all sent
                comm.recv::<u8>(1, tag(3)).await?; // the freed receives have their messages
                comm.send(&[5u8; 1024][..], 1, tag(4)).await?; // eager: completes unreceived
                comm.send(&[0u8], 1, tag(5)).await?;
            } else {
                let mut bufs = vec![[0u8; 1024]; 8];
                if phase == 1 {
                    for buf in bufs.iter_mut() {
                        comm.irecv(&mut buf[..], 0, tag(1)).free();
                    }
                }
                comm.send(&[0u8], 0, tag(0)).await?;
                comm.recv::<u8>(0, tag(2)).await?;
                if phase == 0 {
                    for buf in bufs.iter_mut() {
                        comm.irecv(&mut buf[..], 0, tag(1)).free();
                    }
                }
                comm.send(&[0u8], 0, tag(3)).await?;
                comm.recv::<u8>(0, tag(5)).await?;
                assert_eq!(comm.recv_vec::<u8>(0, tag(4)).await?.0, [5u8; 1024]);
                assert!(comm.iprobe(0, tag(1))?.is_none(), "phase {phase}: every message went to a freed receive");
                assert!(bufs.iter().all(|b| b.iter().all(|&x| x == 0)));
            }
        }
        Ok(())
    });
    tokio::time::timeout(std::time::Duration::from_secs(20), run).await.expect("credit held by freed receives came back").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_requests_take_described_buffers() {
    launch(2, |comm| async move {
        let other = 1 - comm.rank();
        // A 4x4 matrix of doubles: send column 0 every start, receive it into column 3.
        let column = Datatype::vector(4, 1, 4, &Datatype::double())?;
        let mut send_matrix = [0.0f64; 16];
        let mut recv_matrix = [-1.0f64; 16];
        for round in 0..3 {
            for row in 0..4 {
                send_matrix[4 * row] = (100 * comm.rank() + 10 * round + row) as f64;
            }
            let mut send = comm.send_init(SendBuf::new(Region::of(&send_matrix), 1, &column), other, 5);
            let mut recv = comm.recv_init(
                RecvBuf::new(RegionMut::with_origin(bytemuck::cast_slice_mut(&mut recv_matrix), 3 * 8)?, 1, &column),
                other,
                5,
            );
            // Two starts of each: the second one sees the same buffers.
            for _ in 0..2 {
                let mut reqs = start_all([&mut recv as &mut dyn Persistent, &mut send]);
                let [received, sent] = <[_; 2]>::try_from(wait_all(&mut reqs).await).unwrap();
                assert_eq!(received?.bytes, 32);
                sent?;
            }
            drop((send, recv));
            for row in 0..4 {
                assert_eq!(recv_matrix[4 * row + 3], (100 * other + 10 * round + row) as f64);
                assert_eq!(recv_matrix[4 * row], -1.0, "only column 3 is written");
            }
        }
        // A receive too small for the message fails its start, and the next start works.
        let mut small = [0u8; 2];
        let mut recv = comm.recv_init(RecvBuf::bytes(&mut small), other, 6);
        comm.send(SendBuf::bytes(&[1, 2, 3]), other, 6).await?;
        assert!(matches!(recv.start().await, Err(ref e) if matches!(e.kind(), ErrorKind::Truncate { .. })));
        comm.send(SendBuf::bytes(&[4, 5]), other, 6).await?;
        assert_eq!(recv.start().await?.bytes, 2);
        drop(recv);
        assert_eq!(small, [4, 5]);
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_requests_restart_and_inactive_ones_are_null() {
    launch(2, |comm| async move {
        let other = 1 - comm.rank();
        let data = [comm.rank() as u32; 3];
        let mut send = comm.send_init(&data, other, 0);
        let mut ssend = comm.ssend_init(&data, other, 1);
        let mut recv = comm.recv_init(vec![0u32; 3], other, 0);
        let mut srecv_buf = [0u32; 3];
        let mut srecv = comm.recv_init(&mut srecv_buf, other, 1);
        for _ in 0..20 {
            let mut reqs = start_all([&mut recv as &mut dyn Persistent, &mut srecv, &mut send, &mut ssend]);
            let results = wait_all(&mut reqs).await;
            assert!(results.iter().all(|r| r.is_ok()));
        }
        assert_eq!(recv.buffer(), &[other as u32; 3]);
        assert_eq!(srecv.buffer(), &[other as u32; 3]);
        // Owned persistent sends are writable between starts.
        let mut owned = comm.send_init(vec![0u8; 2], other, 3);
        owned.buffer_mut()[0] = 42;
        owned.start().await?;
        let (got, _) = comm.recv_vec::<u8>(other, 3).await?;
        assert_eq!(got, [42, 0]);
        // An inactive persistent request is a None entry: empty status at once.
        let mut inactive: Vec<Option<Request>> = vec![None];
        assert!(wait_all(&mut inactive).await[0].is_none());
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_and_ready_nonblocking_sends() {
    launch(2, |comm| async move {
        if comm.rank() == 0 {
            // ibsend is complete at once, or fails at once.
            assert!(matches!(comm.ibsend(&[1u8], 1, 0).await, Err(ref e) if matches!(e.kind(), ErrorKind::BufferExhausted { .. })));
            comm.buffer_attach(vec![0; 200])?;
            let req = comm.ibsend(&[1u8; 8], 1, 0);
            assert!(req.is_complete());
            req.await?;
            comm.buffer_detach().await?;
            comm.recv_vec::<u8>(1, 9).await?; // rank 1 has posted its receive
            comm.irsend(&[2u8], 1, 1).await?;
        } else {
            let (v, _) = comm.recv_vec::<u8>(0, 0).await?;
            assert_eq!(v, [1; 8]);
            let mut b = [0u8];
            let r = comm.irecv(&mut b, 0, 1);
            comm.send(&[0u8], 0, 9).await?;
            r.await?;
            assert_eq!(b, [2]);
        }
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_set_test_some_and_wait_any() {
    launch(1, |comm| async move {
        let mut set: RequestSet<_> = (0..4).map(|tag| comm.recv::<u8>(0, tag)).collect();
        assert!(matches!(set.test_some(), Tested::Pending));
        comm.send(&2u8, 0, 2).await?;
        comm.send(&3u8, 0, 3).await?;
        // wait_any returns one; the other is returned by a later call.
        let (i, r) = set.wait_any().await.unwrap();
        let other = loop {
            match set.test_some() {
                Tested::Done(done) => break done,
                Tested::Pending => tokio::task::yield_now().await,
                Tested::Inactive => panic!("two requests are active"),
            }
        };
        assert_eq!(other.len(), 1);
        let mut got = vec![(i, r?.0), (other[0].0, *other[0].1.as_ref().map(|(v, _)| v).unwrap())];
        got.sort();
        assert_eq!(got, [(2, 2), (3, 3)]);
        assert_eq!(set.active(), 2);
        // A receive of one value can be cancelled: it completes with Cancelled.
        let mut pending = set.take(0).unwrap();
        assert!(pending.cancel());
        assert!(matches!(pending.await, Err(ref e) if matches!(e.kind(), ErrorKind::Cancelled)));
        // An owned receive hands its buffer back when cancelled.
        let mut owned = comm.irecv_owned(vec![0u8; 2], 0, 9);
        assert!(owned.cancel());
        let (buf, st) = owned.await?;
        assert!(st.test_cancelled());
        assert_eq!(buf, [0, 0]);
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inactive_persistent_requests_and_owned_modes() {
    launch(2, |comm| async move {
        let other = 1 - comm.rank();
        let mut ssend = comm.ssend_init(vec![comm.rank() as u16; 2], other, 0);
        let mut recv = comm.recv_init(vec![0u16; 2], other, 0);
        // Nothing started: both inactive; waiting returns empty statuses at once.
        let mut reqs = vec![Some(Request::inactive()), None];
        let results = wait_all(&mut reqs).await;
        assert!(matches!(&results[0], Some(Ok(st)) if *st == Status::empty()));
        // A set of inactive requests has none to wait for (MPI_UNDEFINED);
        // wait_all gives each an empty status.
        let mut set: RequestSet<_> = [Request::inactive()].into_iter().collect();
        assert!(set.wait_any().await.is_none());
        assert!(matches!(&set.wait_all().await[..], [(0, Ok(st))] if *st == Status::empty()));
        assert!(set.wait_all().await.is_empty());
        for round in 0..5u16 {
            ssend.buffer_mut()[1] = round;
            let mut reqs = start_all([&mut recv as &mut dyn Persistent, &mut ssend]);
            assert!(wait_all(&mut reqs).await.iter().all(|r| r.is_ok()));
            drop(reqs);
            assert_eq!(recv.buffer(), &[other as u16, round]);
        }
        if comm.rank() == 0 {
            comm.buffer_attach(vec![0; 1000])?;
            let mut bsend = comm.bsend_init(vec![5u8; 3], 1, 1);
            bsend.start().await?;
            comm.buffer_detach().await?;
            comm.recv_vec::<u8>(1, 2).await?;
            let mut rsend = comm.rsend_init(vec![6u8; 3], 1, 3);
            rsend.start().await?;
        } else {
            assert_eq!(comm.recv_vec::<u8>(0, 1).await?.0, [5; 3]);
            let mut b = [0u8; 3];
            let r = comm.irecv(&mut b, 0, 3);
            comm.send(&[0u8], 0, 2).await?;
            r.await?;
            assert_eq!(b, [6; 3]);
        }
        Ok(())
    })
    .await
    .unwrap();
}

/// A set takes no message it does not return: `wait_any` and `test_any`
/// leave the other completed receives in their slots, and `test_all` and
/// a `wait_all` given up leave every one there, so dropping the set gives
/// their messages back to the queue, as for any receive dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_dropped_gives_back_the_messages_it_did_not_return() {
    launch(1, |comm| async move {
        let within = |f| tokio::time::timeout(std::time::Duration::from_secs(10), f);
        for tag in 0..3u8 {
            comm.send(&tag, 0, tag as i32).await?; // to itself
        }
        let mut set: RequestSet<_> = (0..3).map(|tag| comm.recv::<u8>(0, tag)).collect();
        let (slot, outcome) = set.wait_any().await.expect("active");
        assert_eq!(outcome?.0, slot as u8);
        assert_eq!(set.active(), 2);
        assert!(matches!(set.test_any(), Tested::Done((_, Ok(_)))));
        drop(set);
        let left = (0..3u8).find(|&tag| tag != slot as u8 && comm.iprobe(0, tag as i32).ok().flatten().is_some());
        let left = left.expect("one message went back to the queue");
        assert_eq!(within(comm.recv::<u8>(0, left as i32)).await.expect("no hang")?.0, left);

        // test_all finds tag 3 there, tag 4 not: nothing is taken.
        comm.send(&3u8, 0, 3).await?;
        let mut set: RequestSet<_> = (3..5).map(|tag| comm.recv::<u8>(0, tag)).collect();
        for _ in 0..5 {
            assert!(set.test_all().is_none(), "tag 4 is not sent");
        }
        assert_eq!(set.active(), 2);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), set.wait_all()).await;
        assert!(waited.is_err(), "tag 4 is not sent");
        drop(set);
        assert_eq!(within(comm.recv::<u8>(0, 3)).await.expect("tag 3 went back to the queue")?.0, 3);

        // The free wait_all, given up, gives them back too.
        comm.send(&5u8, 0, 5).await?;
        let all = wait_all([comm.recv::<u8>(0, 5), comm.recv::<u8>(0, 6)]);
        assert!(tokio::time::timeout(std::time::Duration::from_millis(50), all).await.is_err(), "tag 6 is not sent");
        assert_eq!(within(comm.recv::<u8>(0, 5)).await.expect("tag 5 went back to the queue")?.0, 5);
        Ok(())
    })
    .await
    .unwrap();
}

/// `test_all` takes no outcome before every request has finished, even
/// when a request it found finished (an any-source receive only this
/// rank can match, settled on its second look) is not complete yet when
/// a test polls it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_all_keeps_every_outcome_until_all_have_finished() {
    launch(1, |comm| async move {
        let mut set: RequestSet<_> = [comm.recv::<u8>(0, 0), comm.recv::<u8>(Any, 1)].into_iter().collect();
        comm.send(&5u8, 0, 0).await?; // to itself
        assert!(set.test_all().is_none());
        assert!(set.test_all().is_none());
        comm.send(&6u8, 0, 1).await?;
        let all = set.wait_all().await;
        let got: Vec<(usize, u8)> = all.into_iter().map(|(slot, r)| r.map(|(v, _)| (slot, v))).collect::<Result<_>>()?;
        assert_eq!(got, [(0, 5), (1, 6)]);

        // The same receive settled by a wait given up: a test that finds
        // every request settled still takes nothing while that one would
        // not complete, and dropping the set gives both messages back.
        let mut set: RequestSet<_> = [comm.recv::<u8>(0, 0), comm.recv::<u8>(Any, 1), comm.recv::<u8>(0, 2)].into_iter().collect();
        comm.send(&7u8, 0, 0).await?;
        assert!(tokio::time::timeout(std::time::Duration::from_millis(50), set.wait_all()).await.is_err(), "tag 2 is not sent");
        comm.send(&8u8, 0, 2).await?;
        assert!(set.test_all().is_none(), "the any-source receive is only settled by a wait");
        drop(set);
        assert_eq!(comm.recv::<u8>(0, 0).await?.0, 7);
        assert_eq!(comm.recv::<u8>(0, 2).await?.0, 8);
        Ok(())
    })
    .await
    .unwrap();
}
}

/// A test of an any-source receive that only this rank can match does not
/// count as the wait that lets the rest of the rank run before it fails:
/// a send to itself that is ready to run still reaches it.
#[tokio::test(flavor = "current_thread")]
async fn a_test_does_not_count_as_an_orphaned_receives_first_wait() {
    mpx::launch(1, |comm| async move {
        let mut set = RequestSet::new();
        set.push(comm.recv::<u8>(Any, 5));
        assert!(set.test_all().is_none());
        assert!(set.test_all().is_none());
        let sender = comm.clone();
        let send = tokio::spawn(async move { sender.send(&9u8, 0, 5).await });
        let (_, outcome) = set.wait_any().await.expect("active");
        assert_eq!(outcome?.0, 9);
        send.await.expect("the send's task")?;
        Ok(())
    })
    .await
    .unwrap();
}
