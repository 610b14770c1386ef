//! Communicators over subgroups: `split` and `create`, groups and their
//! operations, and what a communicator promises: its own numbering (in
//! statuses and probes too), its own matching context, collectives over
//! its members only. Every test runs on every transport of the harness.

use mpx::{Any, Group, GroupRelation};
use mpx::coll::SUM;

#[macro_use]
mod support;
use support::returns;

each_transport! {
    /// Seven ranks split by rank mod 3, numbered by descending world rank:
    /// point-to-point, any-source receives, probes, collectives and `dup`
    /// all speak the new numbering, and the parent's messages with the same
    /// tags never meet the child's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn split_communicators_number_their_members_and_keep_apart() {
        returns(launch(7, |world| async move {
            let me = world.rank();
            let color = (me % 3) as u32;
            let sub = world.split(Some(color), -(me as i32)).await?.expect("every rank has a color");
            // Members: the world ranks of this color, highest first.
            let members: Vec<usize> = (0..7).rev().filter(|r| r % 3 == me % 3).collect();
            assert_eq!(sub.size(), members.len());
            assert_eq!(members[sub.rank()], me);
            assert_eq!(sub.group().ranks(), members);
            // The parent, on the same tag, first: it must not meet the child's.
            let world_right = (me + 1) % 7;
            let parent_send = world.isend(&(1000 + me as u64), world_right, 5);
            let (n, r) = (sub.size(), sub.rank());
            let right = (r + 1) % n;
            let left = (r + n - 1) % n;
            let sent = sub.isend(&(me as u64), right, 5);
            let (got, status) = sub.recv::<u64>(left, 5).await?;
            assert_eq!((got, status.source), (members[left] as u64, Some(left)));
            sent.await?;
            // Any source: the status names the sender in the child's numbering.
            if n > 1 {
                let probe_send = sub.isend(&(r as u32), right, 6);
                let probed = sub.probe(Any, 6).await?;
                assert_eq!(probed.source, Some(left));
                assert_eq!(sub.iprobe(left, 6)?.and_then(|s| s.source), Some(left));
                let (from, status) = sub.recv::<u32>(Any, 6).await?;
                assert_eq!((from as usize, status.source), (left, Some(left)));
                probe_send.await?;
            }
            let (got, status) = world.recv::<u64>((me + 6) % 7, 5).await?;
            assert_eq!((got, status.source), (1000 + ((me + 6) % 7) as u64, Some((me + 6) % 7)));
            parent_send.await?;
            // Collectives over the members only.
            let mut total = 0usize;
            sub.allreduce(&me, &mut total, SUM).await?;
            assert_eq!(total, members.iter().sum::<usize>());
            let mut everyone = vec![0usize; n];
            sub.allgather(&me, &mut everyone[..]).await?;
            assert_eq!(everyone, members);
            // A dup keeps the members and numbering, with a context of its own.
            let twin = sub.dup();
            let sent = twin.isend(&(r as u16), right, 5);
            let (got, status) = twin.recv::<u16>(Any, 5).await?;
            assert_eq!((got as usize, status.source), (left, Some(left)));
            sent.await?;
            // A split of the split.
            let half = sub.split(Some((sub.rank() % 2) as u32), 0).await?.expect("a color");
            let mut ids = vec![0usize; half.size()];
            half.allgather(&me, &mut ids[..]).await?;
            assert_eq!(ids, members.iter().enumerate().filter(|(i, _)| i % 2 == r % 2).map(|(_, &m)| m).collect::<Vec<_>>());
            world.barrier().await?;
            Ok(())
        }))
        .await;
    }

    /// `create` over a subgroup in another order; ranks outside it get
    /// `None`; ranks that pass different groups all fail; a rank that gives
    /// no color to `split` gets `None`, and the others carry on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn create_and_split_leave_out_who_they_should() {
        returns(launch(5, |world| async move {
            let me = world.rank();
            let chosen = world.group().incl(&[4, 1, 3])?;
            let sub = world.create(&chosen).await?;
            match (&sub, me) {
                (Some(sub), 4 | 1 | 3) => {
                    assert_eq!(sub.rank(), [4, 1, 3].iter().position(|&r| r == me).unwrap());
                    let mut order = vec![0usize; 3];
                    sub.allgather(&me, &mut order[..]).await?;
                    assert_eq!(order, [4, 1, 3]);
                }
                (None, 0 | 2) => {}
                (got, _) => panic!("rank {me}: {got:?}"),
            }
            // Different groups: every rank fails.
            let own = world.group().incl(&[me])?;
            assert!(world.create(&own).await.is_err());
            // Ranks 0 and 2 sit out a split.
            let color = (me % 2 == 1 || me == 4).then_some(7);
            let odd = world.split(color, 0).await?;
            assert_eq!(odd.as_ref().map(|c| c.size()), color.map(|_| 3));
            if let Some(odd) = odd {
                odd.barrier().await?;
            }
            world.barrier().await?;
            Ok(())
        }))
        .await;
    }

    /// Communicator constructors start when called, like every collective:
    /// ranks that poll them in different orders against other collectives
    /// and `dup`s still agree on every communicator.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn constructors_start_when_called_whatever_the_polling_order() {
        returns(launch(2, |world| async move {
            let me = world.rank();
            // `maybe_done`: a constructor may finish at its first poll, and
            // is not polled again after that.
            let mut split = Box::pin(futures::future::maybe_done(world.split(Some(0), -(me as i32))));
            let mut grid = Box::pin(futures::future::maybe_done(world.cart_create(&[2], &[true], false)));
            if me == 0 {
                // Rank 0 polls the constructors before it starts the barrier.
                let _ = futures::poll!(split.as_mut());
                let _ = futures::poll!(grid.as_mut());
            }
            let barrier = world.barrier();
            let dup = world.dup();
            if me == 1 {
                // Rank 1 finishes the barrier before it polls them.
                barrier.await?;
                split.as_mut().await;
                grid.as_mut().await;
            } else {
                let (_, _, b) = tokio::join!(split.as_mut(), grid.as_mut(), barrier);
                b?;
            }
            let split = split.as_mut().take_output().expect("finished")?.expect("a color");
            let grid = grid.as_mut().take_output().expect("finished")?.expect("2 ranks");
            assert_eq!(split.rank(), 1 - me, "keys reverse the order");
            // Each communicator carries its own traffic between the ranks.
            let wait = std::time::Duration::from_secs(5);
            for (name, comm) in [("split", &split), ("grid", grid.comm()), ("dup", &dup)] {
                let other = 1 - comm.rank();
                let sent = comm.isend(&(me as u32), other, 3);
                let got = tokio::time::timeout(wait, comm.recv::<u32>(other, 3)).await.map_err(|_| format!("{name}: the ranks disagree on the communicator"))??;
                assert_eq!(got.0 as usize, 1 - me, "{name}");
                sent.await?;
            }
            Ok(())
        }))
        .await;
    }
}

/// Group operations against their definitions, and bad arguments.
#[test]
fn group_operations_follow_mpi() {
    let world = group_of(6);
    let a = world.incl(&[5, 0, 3]).unwrap();
    let b = world.excl(&[1, 2]).unwrap();
    assert_eq!(b.ranks(), [0, 3, 4, 5]);
    assert_eq!(a.union(&b).ranks(), [5, 0, 3, 4]);
    assert_eq!(b.intersection(&a).ranks(), [0, 3, 5]);
    assert_eq!(b.difference(&a).ranks(), [4]);
    assert_eq!(a.compare(&b.intersection(&a)), GroupRelation::Similar);
    assert_eq!(a.compare(&a.clone()), GroupRelation::Identical);
    assert_eq!(a.compare(&b), GroupRelation::Unequal);
    assert_eq!(a.translate_ranks(&[0, 1, 2], &b).unwrap(), [Some(3), Some(0), Some(1)]);
    assert!(world.incl(&[6]).is_err(), "out of range");
    assert!(world.incl(&[1, 1]).is_err(), "named twice");
    assert!(world.excl(&[9]).is_err());
    assert!(a.translate_ranks(&[3], &b).is_err());
}

/// The world group of `n` ranks, from a communicator of that many.
fn group_of(n: usize) -> Group {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(mpx::launch(n, |comm| async move { Ok(comm.group()) })).unwrap().remove(0)
}
