//! Many messages between many ranks: none lost, duplicated or reordered,
//! and a fast producer cannot grow a slow consumer's memory without bound.

use std::time::Duration;

use mpx::prelude::*;

#[macro_use]
mod support;

each_transport! {
const RANKS: usize = 8;
const PER_PAIR: u64 = 1800; // 8 * 7 * 1800 = 100,800 messages

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_rank_flood_of_over_100k_messages() {
    let mut opts = options(RANKS);
    // Small credit and threshold so eager, credit exhaustion and rendezvous all happen.
    opts.engine.eager_credit = 40 * (96 + mpx::proto::engine::EAGER_OVERHEAD);
    opts.engine.eager_threshold = 96;
    let run = launch_with(opts, |comm| async move {
        let me = comm.rank();
        let n = comm.size();
        let sender = async {
            for seq in 0..PER_PAIR {
                for k in 1..n {
                    let dest = (me + k) % n;
                    // Every 7th message is large enough for rendezvous.
                    let len = if seq % 7 == 0 { 20 } else { 3 };
                    let mut msg = vec![me as u64, seq, dest as u64];
                    msg.resize(len, seq ^ 0x5555);
                    comm.send(&msg, dest, (seq % 5) as i32).await?;
                }
            }
            Ok::<_, Error>(())
        };
        let receiver = async {
            let mut next = vec![0u64; n];
            for _ in 0..PER_PAIR * (n as u64 - 1) {
                let (msg, st) = comm.recv_vec::<u64>(Any, Any).await?;
                let src = st.source.unwrap();
                assert_eq!(msg[0] as usize, src, "payload names its sender");
                assert_eq!(msg[2] as usize, me, "delivered to the right rank");
                assert_eq!(msg[1], next[src], "from {src}: lost, duplicated or reordered");
                assert_eq!(st.tag, Some((msg[1] % 5) as i32));
                assert!(msg[3..].iter().all(|&x| x == msg[1] ^ 0x5555));
                next[src] += 1;
            }
            Ok::<_, Error>(next)
        };
        let (sent, received) = futures::join!(sender, receiver);
        sent?;
        let next = received?;
        // Nothing more is queued: no duplicates.
        comm.barrier().await?;
        assert!(comm.iprobe(Any, Any)?.is_none());
        Ok(next.iter().sum::<u64>())
    });
    let out = tokio::time::timeout(Duration::from_secs(300), run).await.expect("flood finished").unwrap();
    assert_eq!(out.iter().sum::<u64>(), RANKS as u64 * (RANKS as u64 - 1) * PER_PAIR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_producer_is_throttled_by_the_consumers_credit() {
    let mut opts = options(2);
    opts.engine.eager_credit = 16 * 1024;
    let out = launch_with(opts, |comm| async move {
        if comm.rank() == 0 {
            for i in 0..2000u32 {
                comm.send(&[i; 256], 1, 0).await?; // 1 KiB each
            }
            Ok(0)
        } else {
            let mut most = 0;
            for i in 0..2000u32 {
                if i % 100 == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                let (_, bytes) = comm.queued();
                most = most.max(bytes);
                let (v, _) = comm.recv_vec::<u32>(0, 0).await?;
                assert_eq!(v[255], i);
            }
            Ok(most)
        }
    })
    .await
    .unwrap();
    assert!(out[1] > 0, "some messages were buffered");
    assert!(out[1] <= 16 * 1024, "unexpected data {} exceeded the credit", out[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_messages_are_bounded_by_credit_too() {
    let mut opts = options(2);
    opts.engine.eager_credit = 4096;
    let out = launch_with(opts, |comm| async move {
        if comm.rank() == 0 {
            for _ in 0..5000 {
                comm.send(&[] as &[u8], 1, 0).await?;
            }
            Ok(0)
        } else {
            let mut most = 0;
            for i in 0..5000 {
                if i % 500 == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                most = most.max(comm.queued().0);
                comm.recv_vec::<u8>(0, 0).await?;
            }
            Ok(most)
        }
    })
    .await
    .unwrap();
    // Each queued empty message costs EAGER_OVERHEAD of credit; at most
    // one more waits as a rendezvous request.
    assert!(out[1] as u64 <= 4096 / mpx::proto::engine::EAGER_OVERHEAD + 2, "{} empty messages queued", out[1]);
}
}
