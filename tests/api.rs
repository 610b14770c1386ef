//! The user API as a program meets it: one way to send anything, single
//! values received directly, one neighbour value for both directions,
//! completion over any collection, the program's own errors, and the
//! prelude.


use bytes::Bytes;
use mpx::prelude::*;

#[macro_use]
mod support;

#[derive(MpiType, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Particle {
    position: [f64; 3],
    charge: i8,
}

each_transport! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_data_goes_through_the_one_send() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            let p = Particle { position: [1.0, 2.0, 3.0], charge: -1 };
            comm.send(&p, 1, 0).await?; // a value
            comm.send(&[p, p], 1, 1).await?; // an array
            comm.send(&vec![4u16, 5, 6][..], 1, 2).await?; // a slice
            comm.send(&vec![7u16, 8], 1, 3).await?; // a borrowed Vec
            comm.send(vec![9u16; 1000], 1, 4).await?; // an owned Vec
            comm.send(SendBuf::bytes(b"raw"), 1, 5).await?; // MPI's byte
            comm.send(Bytes::from_static(b"packed"), 1, 6).await?; // packed
            let grid = [1i32, 2, 3, 4, 5, 6];
            let column = Datatype::vector(3, 1, 2, &i32::datatype())?;
            comm.send(SendBuf::new(Region::of(&grid), 1, &column), 1, 7).await?; // a derived type
            Ok(Vec::new())
        } else {
            let (p, status) = comm.recv::<Particle>(0, 0).await?;
            assert_eq!(p, Particle { position: [1.0, 2.0, 3.0], charge: -1 });
            assert_eq!(status.count::<Particle>(), Some(1));
            let (pair, _) = comm.recv::<[Particle; 2]>(0, 1).await?;
            assert_eq!(pair, [p, p]);
            assert_eq!(comm.recv_vec::<u16>(0, 2).await?.0, [4, 5, 6]);
            let mut two = [0u16; 2];
            comm.recv_into(&mut two, 0, 3).await?;
            assert_eq!(two, [7, 8]);
            assert_eq!(comm.recv_vec::<u16>(0, 4).await?.0, vec![9; 1000]);
            let mut raw = [0u8; 3];
            comm.recv_into(RecvBuf::bytes(&mut raw), 0, 5).await?;
            assert_eq!(&raw, b"raw");
            // Packed data matches a typed receive too.
            assert_eq!(comm.recv_vec::<u8>(0, 6).await?.0, b"packed");
            let (column, _) = comm.recv::<[i32; 3]>(0, 7).await?;
            Ok(column.to_vec())
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [1, 3, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_and_u8_values_are_different_types() {
    launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&[1u8, 2], 1, 0).await?; // uint8_t values
            comm.send(SendBuf::bytes(&[3, 4]), 1, 1).await?; // MPI's byte
            comm.send(&[5u8, 6], 1, 2).await?;
            comm.send(SendBuf::bytes(&[7, 8]), 1, 3).await?;
        } else {
            // MPI's rule: byte matches only byte; uint8_t only uint8_t.
            let mut raw = [0u8; 2];
            let e = comm.recv_into(RecvBuf::bytes(&mut raw), 0, 0).await;
            assert_eq!(e, Err(ErrorKind::TypeMismatch.into()));
            let e = comm.recv_into(&mut raw, 0, 1).await;
            assert_eq!(e, Err(ErrorKind::TypeMismatch.into()));
            assert_eq!(raw, [0, 0], "a mismatch writes nothing");
            // Each matches its own kind.
            comm.recv_into(&mut raw, 0, 2).await?;
            assert_eq!(raw, [5, 6]);
            comm.recv_into(RecvBuf::bytes(&mut raw), 0, 3).await?;
            assert_eq!(raw, [7, 8]);
        }
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_all_takes_a_vec_of_requests_and_releases_their_borrows() {
    launch(2, |comm| async move {
        let other = 1 - comm.rank();
        let mut inbox = [[0u32; 2]; 8];
        let recvs: Vec<Request> = inbox.iter_mut().enumerate().map(|(tag, b)| comm.irecv(b, other, tag as i32)).collect();
        let sends: Vec<Request> = (0..8).map(|tag| comm.isend(&[tag as u32, comm.rank() as u32], other, tag)).collect();
        let sent = wait_all(sends).await;
        assert_eq!(sent.len(), 8);
        sent.into_iter().collect::<Result<Vec<_>>>()?;
        let statuses = wait_all(recvs).await.into_iter().collect::<Result<Vec<_>>>()?;
        assert!(statuses.iter().enumerate().all(|(tag, st)| st.tag == Some(tag as i32) && st.source == Some(other)));
        inbox[0][0] += 100; // the receives' borrows have ended
        assert_eq!(inbox[0], [100, other as u32]);
        assert!(inbox[1..].iter().enumerate().all(|(i, m)| *m == [i as u32 + 1, other as u32]));
        // An error in one request is that request's outcome, not the call's.
        let mut small = [0u32; 1];
        let mutual = [comm.isend(&[1u32, 2], other, 9), comm.irecv(&mut small, other, 9)];
        let [sent, received] = <[_; 2]>::try_from(wait_all(mutual).await).unwrap();
        sent?;
        assert!(matches!(received, Err(ref e) if matches!(e.kind(), ErrorKind::Truncate { .. })));
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_all_starts_an_iterators_requests_when_called() {
    launch(2, |comm| async move {
        if comm.rank() == 0 {
            // Synchronous sends, made by the iterator: rank 1 receives them
            // before this rank first polls the wait_all.
            let sends = wait_all((0..3).map(|tag| comm.issend(&(tag as u8), 1, tag)));
            comm.recv::<u8>(1, 9).await?;
            for outcome in sends.await {
                outcome?;
            }
        } else {
            let waited = std::time::Duration::from_secs(10);
            for tag in 0..3 {
                let got = tokio::time::timeout(waited, comm.recv::<u8>(0, tag)).await;
                let (x, _) = got.map_err(|_| Error::user("wait_all did not start its sends when called"))??;
                assert_eq!(x, tag as u8);
            }
            comm.send(&1u8, 0, 9).await?;
        }
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_receives_are_served_and_reposted_in_a_request_set() {
    const CLIENTS: usize = 3;
    const ROUNDS: u32 = 20;
    let out = launch(CLIENTS + 1, |comm| async move {
        if comm.rank() > 0 {
            for round in 0..ROUNDS {
                comm.send(&[comm.rank() as u32, round], 0, 0).await?;
            }
            return Ok(vec![]);
        }
        // One owned buffer per client, handed back by each receive and
        // posted again into the same slot.
        let mut set: RequestSet<_> = (1..=CLIENTS).map(|c| comm.irecv_owned(vec![0u32; 2], c, 0)).collect();
        let mut next = vec![0u32; CLIENTS + 1];
        while let Some((slot, outcome)) = set.wait_any().await {
            let (buf, status) = outcome?;
            let client = slot + 1;
            assert_eq!((status.source, buf[0] as usize, buf[1]), (Some(client), client, next[client]));
            next[client] += 1;
            if next[client] < ROUNDS {
                set.set(slot, comm.irecv_owned(buf, client, 0))?;
            }
        }
        Ok(next)
    })
    .await
    .unwrap();
    assert_eq!(out[0][1..], [ROUNDS; CLIENTS]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_buffer_is_free_as_soon_as_the_send_starts() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            let mut data = vec![1u32; 4];
            let sent = comm.issend(&data, 1, 0); // synchronous: not complete yet
            data[0] = 99; // the message was packed when the send started
            drop(data);
            sent.await?;
            Ok(Vec::new())
        } else {
            Ok(comm.recv_vec::<u32>(0, 0).await?.0)
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], [1, 1, 1, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_value_receive_needs_a_whole_value() {
    let out = launch(2, |comm| async move {
        if comm.rank() == 0 {
            comm.send(&[1u64, 2], 1, 0).await?;
            comm.send(&[] as &[u64], 1, 1).await?;
            comm.send(&3u64, 1, 2).await?;
            Ok(None)
        } else {
            let more = comm.recv::<u64>(0, 0).await;
            assert!(matches!(more, Err(ref e) if matches!(e.kind(), ErrorKind::Truncate { .. })), "{more:?}");
            let none = comm.recv::<u64>(0, 1).await;
            assert!(matches!(none, Err(ref e) if matches!(e.kind(), ErrorKind::ShortInput { .. })), "{none:?}");
            assert!(matches!(comm.recv::<u64>(PROC_NULL, 0).await, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))));
            Ok(Some(comm.recv::<u64>(0, 2).await?.0))
        }
    })
    .await
    .unwrap();
    assert_eq!(out[1], Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_neighbour_value_serves_both_directions() {
    // A non-periodic line: the ends have a null neighbour.
    let out = launch(3, |comm| async move {
        let (rank, size) = (comm.rank(), comm.size());
        let left = Peer::from(rank.checked_sub(1));
        let right = Peer::from((rank + 1 < size).then_some(rank + 1));
        let (mut from_left, mut from_right) = (usize::MAX, usize::MAX);
        let a = comm.sendrecv(&rank, right, 0, &mut from_left, left, 0);
        let b = comm.sendrecv(&rank, left, 1, &mut from_right, right, 1);
        let (sa, sb) = futures::join!(a, b);
        let (sa, sb) = (sa?, sb?);
        assert_eq!(sa.source, left.rank(), "a null neighbour's status names no source");
        assert_eq!(sb.source, right.rank());
        Ok((from_left, from_right))
    })
    .await
    .unwrap();
    assert_eq!(out, [(usize::MAX, 1), (0, 2), (1, usize::MAX)], "receives from null leave the buffer as it was");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_all_takes_vectors_arrays_iterators_and_borrowed_slots() {
    launch(2, |comm| async move {
        let other = 1 - comm.rank();
        // An array of sends, an iterator of receives.
        let sends = [comm.isend(&1u8, other, 0), comm.isend(&2u8, other, 1)];
        let mut inbox = [0u8; 2];
        let recvs = inbox.iter_mut().zip(0..).map(|(b, tag)| comm.irecv(b, other, tag));
        for outcome in wait_all(recvs).await {
            outcome?;
        }
        assert_eq!(inbox, [1, 2], "the borrows ended with wait_all");
        wait_all(sends).await.into_iter().collect::<Result<Vec<_>>>()?;
        // Slots with MPI's null request, borrowed: completed slots empty.
        let mut slots = vec![Some(comm.isend(&3u8, other, 2)), None];
        let outcomes = wait_all(&mut slots).await;
        assert!(matches!(outcomes[..], [Some(Ok(_)), None]));
        assert!(slots.iter().all(Option::is_none));
        comm.recv::<u8>(other, 2).await?;
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_receives_convert_their_errors_and_need_no_unpin() {
    // Generic code over any MpiType, no Unpin bound.
    async fn first<T: MpiType + Default>(comm: &Comm, from: usize) -> Result<T> {
        let (buf, _) = comm.irecv_owned(vec![T::default(); 1], from, 0).await?;
        Ok(buf[0])
    }
    let out = launch(2, |comm| async move {
        let other = 1 - comm.rank();
        comm.send(&[2.5f32, 1.0], other, 0).await?;
        let too_long = first::<f32>(&comm, other).await;
        assert!(matches!(too_long, Err(ref e) if matches!(e.kind(), ErrorKind::Truncate { .. })), "{too_long:?}");
        comm.send(&7.5f32, other, 0).await?;
        first::<f32>(&comm, other).await
    })
    .await
    .unwrap();
    assert_eq!(out, [7.5, 7.5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_can_fail_with_its_own_error() {
    #[derive(Debug)]
    struct NoReply;
    impl std::fmt::Display for NoReply {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("no reply in time")
        }
    }
    impl std::error::Error for NoReply {}
    let result = launch(2, |comm| async move {
        if comm.rank() == 1 {
            let wait = std::time::Duration::from_millis(20);
            match tokio::time::timeout(wait, comm.recv::<u8>(0, 0)).await {
                Ok(r) => r.map(drop),
                Err(_) => Err(Error::user(NoReply)),
            }
        } else {
            // Waits for rank 1, which never sends: it fails when rank 1 does.
            comm.recv::<u8>(1, 0).await.map(drop)
        }
    })
    .await;
    let err = result.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::User(cause) if cause.0.downcast_ref::<NoReply>().is_some()), "{err:?}");
    assert_eq!(err.to_string(), "no reply in time");
    // Boxed errors and strings convert with `?` and `into`.
    let boxed: Box<dyn std::error::Error + Send + Sync> = "bad input".into();
    assert_eq!(Error::from(boxed).to_string(), "bad input");
    // A rank's closure uses `?` on the errors programs meet (I/O, parsing)
    // and returns a message of its own, with no conversion written out.
    let result = launch(3, |comm| async move {
        match comm.rank() {
            0 => {
                std::fs::read("/no/such/mpx/input")?;
                Ok(())
            }
            1 => {
                let _: u32 = "seven".parse()?;
                Ok(())
            }
            _ => Err("rank 2 gives up".into()),
        }
    })
    .await;
    // Every rank failed with its own error: launch reports the lowest rank's.
    let err = result.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::User(cause) if cause.0.is::<std::io::Error>()), "{err:?}");
    let parse = launch(1, |_| async move { Ok("seven".parse::<u32>()?) }).await.unwrap_err();
    assert!(matches!(parse.kind(), ErrorKind::User(cause) if cause.0.is::<std::num::ParseIntError>()), "{parse:?}");
    let text = launch(1, |_| async move { Err::<(), _>("rank 0 gives up".into()) }).await.unwrap_err();
    assert_eq!(text.to_string(), "rank 0 gives up");
    // A timeout converts with `?` too.
    let late = launch(1, |comm| async move {
        tokio::time::timeout(std::time::Duration::from_millis(5), comm.recv::<u8>(0, 0)).await??;
        Ok(())
    })
    .await
    .unwrap_err();
    assert!(matches!(late.kind(), ErrorKind::User(cause) if cause.0.is::<tokio::time::error::Elapsed>()), "{late:?}");
}

/// A sendrecv whose outgoing data cannot be packed posts no receive: the
/// message it would have taken goes to the next receive, while the failed
/// sendrecv is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sendrecv_whose_send_fails_to_start_posts_no_receive() {
    launch(2, |comm| async move {
        let other = 1 - comm.rank();
        if comm.rank() == 1 {
            comm.barrier().await?;
            return comm.send(&5u8, 0, 8).await;
        }
        let small = [0u8; 4];
        let eight = Datatype::contiguous(8, &Datatype::byte())?;
        let (mut got, mut replaced) = (0u8, [0u8; 4]);
        let failed = comm.sendrecv(SendBuf::new(Region::new(&small), 1, &eight), other, 0, &mut got, other, 8);
        let replace = comm.sendrecv_replace(RecvBuf::new(RegionMut::new(&mut replaced), 1, &eight), other, 0, other, 8);
        comm.barrier().await?;
        let wait = std::time::Duration::from_secs(10);
        let (value, _) = tokio::time::timeout(wait, comm.recv::<u8>(other, 8)).await.map_err(|_| Error::user("a failed sendrecv took the message"))??;
        assert_eq!(value, 5);
        for outcome in [failed.await, replace.await] {
            assert!(matches!(outcome, Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })), "{outcome:?}");
        }
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_start_when_called() {
    launch(2, |comm| async move {
        let other = 1 - comm.rank();
        // Never polled: a sendrecv still sends.
        let mut got = 0u8;
        let exchange = comm.sendrecv(&(comm.rank() as u8), other, 0, &mut got, other, 0);
        drop(exchange);
        assert_eq!(comm.recv::<u8>(other, 0).await?.0, other as u8);
        // A barrier not polled yet has already sent its part: rank 1 gets
        // through its own barrier before rank 0 polls its barrier.
        let barrier = comm.barrier();
        let waited = std::time::Duration::from_secs(10);
        if comm.rank() == 1 {
            tokio::time::timeout(waited, barrier).await.map_err(|_| Error::user("rank 0's barrier never started"))??;
            comm.send(&1u8, 0, 3).await?;
        } else {
            let through = tokio::time::timeout(waited, comm.recv::<u8>(1, 3)).await;
            through.map_err(|_| Error::user("rank 0's unpolled barrier sent nothing"))??;
            barrier.await?;
        }
        // Nothing of the rejected sendrecvs was sent: tag 7 has no message.
        comm.barrier().await?;
        assert!(comm.iprobe(other, 7)?.is_none(), "a rejected sendrecv sent its valid half");
        // Argument errors come at the first poll, whatever else is pending,
        // and the half that was valid was not sent.
        {
            let bad = std::pin::pin!(comm.sendrecv(&0u8, 5, 0, &mut got, other, 7));
            assert!(matches!(futures::poll!(bad), std::task::Poll::Ready(Err(e)) if matches!(e.kind(), ErrorKind::InvalidRank { rank: 5, .. })));
        }
        {
            let bad = std::pin::pin!(comm.sendrecv(&0u8, other, 7, &mut got, other, -1));
            assert!(matches!(futures::poll!(bad), std::task::Poll::Ready(Err(e)) if matches!(e.kind(), ErrorKind::InvalidTag(-1))));
        }
        let bad = std::pin::pin!(comm.probe(other, -1));
        assert!(matches!(futures::poll!(bad), std::task::Poll::Ready(Err(e)) if matches!(e.kind(), ErrorKind::InvalidTag(-1))));
        comm.barrier().await
    })
    .await
    .unwrap();
}
}
