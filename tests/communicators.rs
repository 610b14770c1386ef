//! Communicators over subgroups: `split` and `create`, groups and their
//! operations, and what a communicator promises: its own numbering (in
//! statuses and probes too), its own matching context, collectives over
//! its members only. Every test runs on every transport of the harness.

use mpx::{Any, CommRelation, Group, GroupRelation};
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
    /// `None`; ranks that each pass a group of themselves alone (different
    /// groups, each passed by all its members) each get a communicator of
    /// one; a rank that gives no color to `split` gets `None`, and the
    /// others carry on.
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
            // A group of itself alone for each rank: the groups differ, but
            // each one's only member passed it, so each is a communicator.
            let own = world.group().incl(&[me])?;
            let alone = world.create(&own).await?.expect("a member of its own group");
            assert_eq!((alone.size(), alone.rank(), alone.group().ranks()), (1, 0, vec![me]));
            let mut total = 0usize;
            alone.allreduce(&me, &mut total, SUM).await?;
            assert_eq!(total, me);
            let sent = alone.isend(&(me as u16), 0, 1);
            let (got, status) = alone.recv::<u16>(Any, 1).await?;
            assert_eq!((got as usize, status.source), (me, Some(0)));
            sent.await?;
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

    /// Disjoint groups made in one `create`: each pair of four ranks passes
    /// its own pair, numbered backwards, and gets a communicator over it
    /// with a context of its own; both pairs exchange on the same tag at
    /// the same time, and run collectives, each among its own members.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn create_makes_disjoint_groups_in_one_call() {
        returns(launch(4, |world| async move {
            let me = world.rank();
            let pair: [usize; 2] = if me < 2 { [1, 0] } else { [3, 2] };
            let sub = world.create(&world.group().incl(&pair)?).await?.expect("a member of its pair");
            let r = pair.iter().position(|&m| m == me).unwrap();
            assert_eq!((sub.size(), sub.rank()), (2, r));
            assert_eq!(sub.group().ranks(), pair);
            // Both pairs on tag 0 at once, received from any source.
            let other = 1 - r;
            let sent = sub.isend(&(me as u32), other, 0);
            let (got, status) = sub.recv::<u32>(Any, 0).await?;
            assert_eq!((got as usize, status.source), (pair[other], Some(other)));
            sent.await?;
            // Collectives over each pair's members only.
            let mut both = [0usize; 2];
            sub.allgather(&me, &mut both[..]).await?;
            assert_eq!(both, pair);
            let mut total = 0usize;
            sub.allreduce(&me, &mut total, SUM).await?;
            assert_eq!(total, pair[0] + pair[1]);
            // The members of a pair agree on its context; the pairs' differ.
            let mut contexts = [0u64; 4];
            world.allgather(&context_of(&sub), &mut contexts[..]).await?;
            assert_eq!((contexts[0], contexts[2]), (contexts[1], contexts[3]));
            assert_ne!(contexts[0], contexts[2]);
            world.barrier().await?;
            Ok(())
        }))
        .await;
    }

    /// A rank that passes the empty group, or a group it is not in (whose
    /// members all passed it), gets `None`, taking part in the call all
    /// the same; the group's members get their communicator.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn create_gives_none_for_the_empty_group_and_groups_without_the_rank() {
        returns(launch(4, |world| async move {
            let me = world.rank();
            let low = world.group().incl(&[0, 1])?;
            let empty = world.group().incl(&[])?;
            assert_eq!(empty.size(), 0);
            // Ranks 0 and 1 make their pair, rank 2 names it without being
            // in it, rank 3 passes the empty group.
            let sub = world.create(if me == 3 { &empty } else { &low }).await?;
            match (&sub, me) {
                (Some(sub), 0 | 1) => {
                    assert_eq!((sub.size(), sub.rank()), (2, me));
                    sub.barrier().await?;
                }
                (None, 2 | 3) => {}
                (got, _) => panic!("rank {me}: {got:?}"),
            }
            // Every rank passes the empty group: nobody gets a communicator.
            assert!(world.create(&empty).await?.is_none());
            // The ranks that got none took part in every call: the world
            // goes on.
            let mut total = 0usize;
            world.allreduce(&me, &mut total, SUM).await?;
            assert_eq!(total, 6);
            Ok(())
        }))
        .await;
    }

    /// Ranks 0 and 1 name each other in different orders: each fails,
    /// naming the member that passed another group; rank 4, outside that
    /// group but naming it as rank 0 does, fails too (a member of the group
    /// it passed passed another). Ranks 2 and 3, whose group both passed,
    /// get their communicator. The call is complete on every rank: the
    /// world goes on, and a `create` after it works.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn create_fails_the_ranks_whose_group_members_disagree() {
        returns(launch(5, |world| async move {
            let me = world.rank();
            let named: &[usize] = match me {
                0 | 4 => &[0, 1],
                1 => &[1, 0],
                _ => &[2, 3],
            };
            let made = world.create(&world.group().incl(named)?).await;
            match (made.map_err(mpx::Error::into_kind), me) {
                (Err(mpx::ErrorKind::CollectiveMismatch { rank, .. }), 0 | 1 | 4) => assert_eq!(rank, if me == 1 { 0 } else { 1 }),
                (Ok(Some(sub)), 2 | 3) => {
                    assert_eq!((sub.size(), sub.rank()), (2, me - 2));
                    sub.barrier().await?;
                }
                (got, _) => panic!("rank {me}: {got:?}"),
            }
            world.barrier().await?;
            let again = world.create(&world.group().incl(&[1, 0])?).await?;
            assert_eq!(again.map(|c| c.rank()), match me { 0 => Some(1), 1 => Some(0), _ => None });
            Ok(())
        }))
        .await;
    }

    /// Rank 1 makes a `dup` the others do not: the communicators made from
    /// the world after it would have other contexts on rank 1 than on the
    /// others, and wait for ever. A `split` then fails on every rank whose
    /// color rank 1 shares (naming a rank that counted otherwise), while
    /// ranks of another color carry on; so does a `create`. The calls are
    /// complete everywhere: once rank 1 no longer counts one more, new
    /// communicators work again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn communicators_made_after_a_dup_of_one_rank_fail_rather_than_wait() {
        returns(launch(4, |world| async move {
            let me = world.rank();
            if me == 1 {
                drop(world.dup());
            }
            let colors = [0u32, 0, 1, 0];
            let made = world.split(Some(colors[me]), 0).await;
            match (made.map_err(mpx::Error::into_kind), me) {
                (Err(mpx::ErrorKind::CollectiveMismatch { rank, .. }), 0 | 1 | 3) => assert_eq!(rank, if me == 1 { 0 } else { 1 }),
                (Ok(Some(alone)), 2) => alone.barrier().await?,
                (got, _) => panic!("rank {me}: split: {got:?}"),
            }
            let pair = if me < 2 { world.group().incl(&[0, 1])? } else { world.group().incl(&[2, 3])? };
            match (world.create(&pair).await.map_err(mpx::Error::into_kind), me) {
                (Err(mpx::ErrorKind::CollectiveMismatch { rank, .. }), 0 | 1) => assert_eq!(rank, 1 - me),
                (Ok(Some(sub)), 2 | 3) => sub.barrier().await?,
                (got, _) => panic!("rank {me}: create: {got:?}"),
            }
            // The others catch up with rank 1's count; all agree again.
            if me != 1 {
                drop(world.dup());
            }
            let all = world.split(Some(0), 0).await?.expect("a color");
            all.barrier().await?;
            let mut total = 0u32;
            all.allreduce(&1u32, &mut total, SUM).await?;
            assert_eq!(total, 4);
            Ok(())
        }))
        .await;
    }

    /// A receive too small for its message names the message in its
    /// error as the communicator numbers its sender (reversed here), small
    /// and large messages alike.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn truncation_errors_name_the_sender_as_the_communicator_does() {
        returns(launch(2, |world| async move {
            let me = world.rank();
            let reversed = world.split(Some(0), -(me as i32)).await?.expect("a color");
            let other = 1 - reversed.rank();
            for (tag, len) in [(3, 64usize), (4, 1 << 20)] {
                let sent = reversed.isend(vec![1u8; len], other, tag);
                let mut small = [0u8; 8];
                let err = reversed.recv_into(&mut small[..], other, tag).await.unwrap_err();
                assert_eq!(err, mpx::ErrorKind::Truncate { needed: len as u64, available: 8, message: Some((other, tag)) }, "rank {me}");
                sent.await?;
            }
            world.barrier().await?;
            Ok(())
        }))
        .await;
    }

    /// Receives started on a communicator whose handles are all dropped
    /// before they complete still name their senders in its numbering
    /// (reversed here, so the world's numbering would differ).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn receives_outliving_their_communicator_keep_its_numbering() {
        returns(launch(2, |world| async move {
            let me = world.rank();
            let reversed = world.split(Some(0), -(me as i32)).await?.expect("a color");
            let other = 1 - reversed.rank();
            let value = reversed.recv::<u32>(Any, 9);
            let mut got = 0u32;
            let request = reversed.irecv(&mut got, Any, 10);
            let sends = [reversed.isend(&(me as u32), other, 9), reversed.isend(&(me as u32 + 10), other, 10)];
            drop(reversed);
            let (from, status) = value.await?;
            assert_eq!((from as usize, status.source), (1 - me, Some(other)), "rank {me}");
            let status = request.await?;
            assert_eq!((got as usize, status.source), (11 - me, Some(other)), "rank {me}");
            for sent in sends {
                sent.await?;
            }
            world.barrier().await?;
            Ok(())
        }))
        .await;
    }

    /// Communicators made by every constructor and dropped, in a loop: the
    /// endpoint keeps no entries for those that are gone (those whose last
    /// handle went while it was busy go at its next use).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropped_communicators_leave_no_state_behind() {
        returns(launch(4, |world| async move {
            let me = world.rank();
            world.barrier().await?;
            let before = world.kept_communicators();
            let mine: &[usize] = if me < 2 { &[0, 1] } else { &[2, 3] };
            let pair = world.group().incl(mine)?;
            for i in 0..100usize {
                let half = world.split(Some((me % 2) as u32), 0).await?.expect("a color");
                let made = world.create(&pair).await?.expect("a member of its pair");
                let twin = made.dup();
                let mut total = 0usize;
                half.allreduce(&i, &mut total, SUM).await?;
                assert_eq!(total, 2 * i);
                twin.barrier().await?;
                made.barrier().await?;
                assert!(world.kept_communicators() > before);
            }
            assert_eq!(world.kept_communicators(), before);
            world.barrier().await?;
            Ok(())
        }))
        .await;
    }

    /// `compare`: handles of one communicator are identical; a `dup`, a
    /// split that keeps the order and a `create` over the whole group are
    /// congruent with their parent and with each other (the same members
    /// in the same order, contexts of their own); a split that reverses
    /// the order is similar; a subgroup is unequal. The same over a
    /// subcommunicator, and every relation holds both ways round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn communicators_compare_by_context_members_and_order() {
        returns(launch(4, |world| async move {
            let me = world.rank();
            let twin = world.dup();
            let kept = world.split(Some(0), 0).await?.expect("a color");
            let made = world.create(&world.group()).await?.expect("a member");
            let reversed = world.split(Some(0), -(me as i32)).await?.expect("a color");
            let half = world.split(Some((me / 2) as u32), 0).await?.expect("a color");
            let other_half = world.split(Some((me / 2) as u32), 0).await?.expect("a color");
            let half_reversed = half.split(Some(0), -(half.rank() as i32)).await?.expect("a color");
            let half_twin = half.dup();
            let cases = [
                ("world, a clone", &world, world.clone(), CommRelation::Identical),
                ("dup, a clone", &twin, twin.clone(), CommRelation::Identical),
                ("world, dup", &world, twin.clone(), CommRelation::Congruent),
                ("world, split in order", &world, kept.clone(), CommRelation::Congruent),
                ("world, create", &world, made.clone(), CommRelation::Congruent),
                ("split in order, create", &kept, made.clone(), CommRelation::Congruent),
                ("world, split reversed", &world, reversed.clone(), CommRelation::Similar),
                ("dup, split reversed", &twin, reversed.clone(), CommRelation::Similar),
                ("world, half", &world, half.clone(), CommRelation::Unequal),
                ("half, a clone", &half, half.clone(), CommRelation::Identical),
                ("half, its dup", &half, half_twin.clone(), CommRelation::Congruent),
                ("half, the same split again", &half, other_half.clone(), CommRelation::Congruent),
                ("half, reversed", &half, half_reversed.clone(), CommRelation::Similar),
                ("half reversed, world", &half_reversed, world.clone(), CommRelation::Unequal),
            ];
            for (name, a, b, want) in cases {
                assert_eq!(a.compare(&b), want, "{name}, rank {me}");
                assert_eq!(b.compare(a), want, "{name} the other way round, rank {me}");
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

    /// An any-source receive or probe on a communicator fails once every
    /// other member is gone, though a rank outside it still runs (and here
    /// waits for the receiving rank): a receive posted before the last
    /// member left, and receives and probes started after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn any_source_receives_fail_once_the_other_members_are_gone() {
        returns(launch(3, |world| async move {
            let me = world.rank();
            let pair = world.split(Some(u32::from(me == 2)), 0).await?.expect("a color");
            match me {
                0 => {
                    let mut got = 0u8;
                    let posted = pair.irecv(&mut got, Any, 7);
                    world.send(&0u8, 1, 1).await?;
                    let wait = std::time::Duration::from_secs(10);
                    let gone = |what: &str, r: mpx::Result<()>| -> mpx::Result<()> { match r {
                        Err(e) if matches!(e.kind(), mpx::ErrorKind::ProcessFailed { rank: 1, .. }) => Ok(()),
                        other => Err(mpx::ErrorKind::InvalidArgument(format!("{what}: {other:?}")).into()),
                    } };
                    let r = tokio::time::timeout(wait, posted).await.expect("the posted receive fails, not hangs");
                    gone("posted before", r.map(drop))?;
                    let r = tokio::time::timeout(wait, pair.recv::<u8>(Any, 7)).await.expect("no hang");
                    gone("posted after", r.map(drop))?;
                    let r = tokio::time::timeout(wait, pair.probe(Any, Any)).await.expect("no hang");
                    gone("probe", r.map(drop))?;
                    let r = tokio::time::timeout(wait, pair.mprobe(Any, 7)).await.expect("no hang");
                    gone("mprobe", r.map(drop))?;
                    // Rank 2, outside the pair, was waiting for this.
                    world.send(&2u8, 2, 2).await?;
                }
                1 => {
                    world.recv::<u8>(0, 1).await?;
                }
                _ => {
                    world.recv::<u8>(0, 2).await?;
                }
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
    // Many ranks at once (looked up in a map rather than one by one):
    // the same answers as one at a time, errors included.
    let world = group_of(64);
    let evens: Vec<usize> = (0..64).step_by(2).collect();
    let (all, even) = (world.incl(&(0..64).rev().collect::<Vec<_>>()).unwrap(), world.incl(&evens).unwrap());
    let many: Vec<usize> = (0..64).collect();
    let one_by_one: Vec<Option<usize>> = many.iter().map(|&r| all.translate_ranks(&[r], &even).unwrap()[0]).collect();
    assert_eq!(all.translate_ranks(&many, &even).unwrap(), one_by_one);
    assert_eq!(one_by_one[1], Some(31), "world rank 62");
    assert_eq!(one_by_one[0], None, "world rank 63 is odd");
    assert!(all.translate_ranks(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 64], &even).is_err());
    assert_eq!(all.union(&even).ranks(), (0..64).rev().collect::<Vec<_>>());
    assert_eq!(all.intersection(&even).size(), 32);
    assert_eq!(all.difference(&even).ranks(), (0..64).rev().filter(|r| r % 2 == 1).collect::<Vec<_>>());
}

/// The ranks triplets name by their definition: `first + k * stride` for
/// k = 0, 1, ... as long as it does not pass `last` (no rank for a triplet
/// whose stride leads away from `last`).
fn serial_expansion(ranges: &[(usize, usize, isize)]) -> Vec<usize> {
    ranges
        .iter()
        .flat_map(|&(first, last, stride)| {
            let (first, last, stride) = (first as i64, last as i64, stride as i64);
            (0..).map(move |k| first + k * stride).take_while(move |&r| if stride > 0 { r <= last } else { r >= last }).map(|r| r as usize)
        })
        .collect()
}

/// `range_incl` and `range_excl` against `incl` and `excl` of the ranks
/// their triplets name, serially expanded, for every triplet over a group
/// of 7 (ranks out of range among them) and for pairs of triplets (ranks
/// named twice among them); bad strides; and huge or extreme values, which
/// fail (or name their one rank) without overflowing or listing ranks.
#[test]
fn group_ranges_name_the_ranks_their_triplets_expand_to() {
    let world = group_of(7);
    let mut triplets = Vec::new();
    for first in 0..9 {
        for last in 0..9 {
            for stride in [-3, -2, -1, 1, 2, 3, 7] {
                triplets.push((first, last, stride));
            }
        }
    }
    let away = |&(first, last, stride): &(usize, usize, isize)| (first < last && stride < 0) || (first > last && stride > 0);
    for t in &triplets {
        if away(t) {
            assert!(world.range_incl(&[*t]).is_err(), "{t:?} steps away from its last rank");
            assert!(world.range_excl(&[*t]).is_err(), "{t:?} steps away from its last rank");
            continue;
        }
        let ranks = serial_expansion(&[*t]);
        assert_eq!(world.range_incl(&[*t]).ok(), world.incl(&ranks).ok(), "range_incl {t:?}");
        assert_eq!(world.range_excl(&[*t]).ok(), world.excl(&ranks).ok(), "range_excl {t:?}");
    }
    let some: Vec<_> = triplets.iter().copied().filter(|t| !away(t)).step_by(5).collect();
    for a in &some {
        for b in &some {
            let ranges = [*a, *b];
            let ranks = serial_expansion(&ranges);
            assert_eq!(world.range_incl(&ranges).ok(), world.incl(&ranks).ok(), "range_incl {ranges:?}");
            assert_eq!(world.range_excl(&ranges).ok(), world.excl(&ranks).ok(), "range_excl {ranges:?}");
        }
    }
    // A few by hand.
    assert_eq!(world.range_incl(&[(6, 0, -3), (1, 5, 4)]).unwrap().ranks(), [6, 3, 0, 1, 5]);
    assert_eq!(world.range_excl(&[(6, 0, -3), (1, 5, 4)]).unwrap().ranks(), [2, 4]);
    assert_eq!(world.range_incl(&[]).unwrap().size(), 0);
    assert_eq!(world.range_excl(&[]).unwrap(), world);
    assert!(world.range_incl(&[(0, 6, 1), (3, 3, 1)]).is_err(), "rank 3 twice");
    // A stride of 0, at either end.
    for t in [(0, 0, 0), (0, 6, 0), (usize::MAX, usize::MAX, 0)] {
        assert!(world.range_incl(&[t]).is_err(), "{t:?}");
        assert!(world.range_excl(&[t]).is_err(), "{t:?}");
    }
    // Extreme values: out of range, or one rank whatever the stride.
    for t in [(0, usize::MAX, 1), (usize::MAX, 0, -1), (usize::MAX, usize::MAX, 1), (0, usize::MAX, isize::MAX), (usize::MAX, 0, isize::MIN), (7, 7, 1)] {
        assert!(world.range_incl(&[t]).is_err(), "{t:?}");
        assert!(world.range_excl(&[t]).is_err(), "{t:?}");
    }
    assert_eq!(world.range_incl(&[(6, 0, isize::MIN)]).unwrap().ranks(), [6]);
    assert_eq!(world.range_incl(&[(0, 6, isize::MAX)]).unwrap().ranks(), [0]);
    assert_eq!(world.range_excl(&[(2, 5, 100)]).unwrap().ranks(), [0, 1, 3, 4, 5, 6]);
    // Many triplets naming more ranks than the group has: refused before
    // any is listed.
    let many = vec![(0, 0, 1); 1 << 16];
    assert!(world.range_incl(&many).is_err());
    assert!(world.range_excl(&many).is_err());
}

/// A communicator's context, as its `Debug` form shows it
/// (`Comm(rank r of n, context 0x…)`).
fn context_of(comm: &mpx::Comm) -> u64 {
    let shown = format!("{comm:?}");
    let hex = shown.rsplit_once("context 0x").and_then(|(_, rest)| rest.strip_suffix(')')).expect("a context in the Debug form");
    u64::from_str_radix(hex, 16).expect("a hexadecimal context")
}

/// The world group of `n` ranks, from a communicator of that many.
fn group_of(n: usize) -> Group {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(mpx::launch(n, |comm| async move { Ok(comm.group()) })).unwrap().remove(0)
}
