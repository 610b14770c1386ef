//! Collectives that combine data with an [`Op`]: `reduce`, `allreduce`,
//! `reduce_scatter_block`, `reduce_scatter`, `scan` and `exscan`.


use super::movement::{root_salt, Bcast, Ring, REDUCE_ROOTED};
use super::{check_len, sent, sent_after, Call, CollMut, CollRef, Collective, Op, Posted, Starting};
use crate::comm::Comm;
use crate::error::{ErrorKind, Result};
use crate::mpi_type::MpiType;
use crate::pack::copy::copy_slice;
use crate::pack::spare::Values;
use crate::request::Request;

/// A reduction to rank 0 under way, along the binomial tree of rank 0 in
/// rank order: each rank combines its children's partial results (each
/// covering the ranks just above its own) after its own, lower ranks
/// first, so every order of arrival gives the same bits.
struct ToZero<T: Copy + 'static> {
    /// This rank's own values.
    own: Values<T>,
    /// The children's partial results, smallest subtree first (ranks
    /// `me + 1`, `me + 2..me + 4`, ...).
    children: Vec<Posted>,
    /// The parent, `None` at rank 0.
    parent: Option<usize>,
    /// A leaf's contribution, sent at once.
    sends: Vec<Request<'static>>,
}

impl<T: MpiType> ToZero<T> {
    fn start(call: &Call, send: &[T]) -> Result<ToZero<T>> {
        let (n, me) = (call.size(), call.rank());
        let mut children = Vec::new();
        let mut parent = None;
        let mut mask = 1;
        while mask < n {
            if me & mask != 0 {
                parent = Some(me - mask);
                break;
            }
            if me + mask < n {
                children.push(call.post::<T>(me + mask, send.len())?);
            }
            mask <<= 1;
        }
        let sends = match parent {
            Some(p) if children.is_empty() => vec![call.send(send, p)],
            _ => Vec::new(),
        };
        Ok(ToZero { own: Values::copy_of(send), children, parent, sends })
    }

    /// Combines the children's results with this rank's `send`: the
    /// result, on rank 0; elsewhere the partial result goes to the parent
    /// and `None` comes back. With it come the sends still under way: a
    /// rank that receives something next awaits them after that receive,
    /// so that a rank that gave up on the call (and will never take the
    /// send) is heard of there.
    async fn finish(self, call: &Call, op: &Op<T>) -> Result<(Option<Values<T>>, Vec<Request<'static>>)> {
        let ToZero { own, children, parent, mut sends } = self;
        let mut acc = own;
        if !children.is_empty() {
            // Room for a child's values (a leaf, most ranks' place in
            // large trees, needs none).
            let mut theirs = Values::copy_of(&acc);
            for child in children {
                child.into(&mut theirs).await?;
                // Lower ranks' values first: acc ∘ theirs, into theirs.
                op.apply(&acc, &mut theirs)?;
                std::mem::swap(&mut acc, &mut theirs);
            }
        }
        match parent {
            None => Ok((Some(acc), sends)),
            Some(p) => {
                if sends.is_empty() {
                    sends.push(call.send(&acc[..], p));
                }
                Ok((None, sends))
            }
        }
    }
}

/// Allreduce by recursive doubling, on a power-of-two number of ranks: in
/// step `k` each rank exchanges its partial result with the rank whose
/// number differs in bit `k`, and both compute `lower ∘ higher` from the
/// same two operands, so both get the same bits, and each partial result
/// covers a run of consecutive ranks in order.
fn doubling<'a, T: MpiType>(call: Call, send: &[T], recv: &'a mut [T], op: Op<T>) -> Collective<'a> {
    let (n, me) = (call.size(), call.rank());
    // Step `k`'s partner; the steps' receives are posted now, the first
    // step's values sent now.
    let partner = move |k: u32| me ^ (1 << k);
    let steps = n.trailing_zeros();
    let started = (|| -> Result<_> {
        op.check()?;
        check_len("allreduce: the receive buffer", recv.len(), send.len())?;
        let posted = (0..steps).map(|k| call.post::<T>(partner(k), send.len())).collect::<Result<Vec<_>>>()?;
        let first = (steps > 0).then(|| call.send(send, partner(0)));
        // The partial result builds up in `recv`.
        copy_slice(recv, send);
        Ok((posted, first))
    })();
    Collective::new(call.clone(), async move {
        let (posted, first) = started?;
        let acc = recv;
        // A higher partner's values go on the right, `acc ∘ theirs`:
        // `theirs` takes them first. A lower partner's go on the left, and
        // fold into `acc` straight from their message.
        let mut theirs: Option<Vec<T>> = None;
        let mut later = Vec::new();
        for (k, p) in (0..).zip(posted) {
            if k > 0 {
                later.push(call.send(acc, partner(k)));
            }
            if partner(k) < me {
                p.fold_into(&op, acc).await?;
            } else {
                let theirs = theirs.get_or_insert_with(|| acc.to_vec());
                p.into(theirs).await?;
                op.apply(acc, theirs)?;
                copy_slice(acc, theirs);
            }
        }
        sent_after(first, later).await
    })
}

/// The largest value, in bytes, [`Comm::allreduce`] combines: its
/// algorithms keep a few values of the type in their stack frames, which
/// values of an array type as large as a buffer (`[f64; 16384]`) would
/// overflow. A larger one fails the call with
/// [`ErrorKind::InvalidArgument`] on every rank, whose values are the same
/// type; a slice of its elements reduces the same numbers.
pub const MAX_REDUCED_VALUE: usize = 16 << 10;

/// Bytes per rank from which [`Comm::allreduce`] cuts the values in
/// blocks, one per rank, rather than moving them whole.
pub(super) const LARGE_ALLREDUCE: u64 = 64 << 10;

/// Allreduce of large data: a reduce-scatter, then an allgather. The
/// values are cut in `n` blocks; each rank sends block `r` to rank `r`,
/// combines the `n` contributions to its own block in rank order (a left
/// fold, the same bits whatever order they arrive in), and the combined
/// blocks go around a ring to every rank. Each rank moves `2(n-1)/n` of
/// the data and combines `1/n` of it, against all of it `log₂ n` times
/// for recursive doubling.
///
/// Ranks choose between this and the algorithms for small data by their
/// own counts: its messages are salted ([`SCATTERED_SALT`]), so a rank
/// that chose otherwise fails on the first of them it receives, and the
/// ranks that chose this on the first of its messages, whatever their
/// sizes (every rank receives from another in every algorithm, and a rank
/// that fails tells every other).
fn scattered<'a, T: MpiType>(call: Call, send: &[T], mut recv: &'a mut [T], op: Op<T>) -> Collective<'a> {
    let call = call.salted(SCATTERED_SALT);
    let (n, me) = (call.size(), call.rank());
    let counts: Vec<usize> = (0..n).map(|r| send.len() / n + usize::from(r < send.len() % n)).collect();
    let displs: Vec<usize> = (0..n).map(|r| r * (send.len() / n) + r.min(send.len() % n)).collect();
    let block = |r: usize| displs[r]..displs[r] + counts[r];
    let (mine, last) = (block(me), n - 1);
    let started = (|| -> Result<_> {
        op.check()?;
        check_len("allreduce: the receive buffer", recv.len(), send.len())?;
        let posted = (0..n).filter(|&r| r != me).map(|r| Ok((r, call.post::<T>(r, counts[me])?))).collect::<Result<Vec<_>>>()?;
        // Each rank starts with its right neighbour's block.
        let sends: Vec<Request<'static>> = (1..n).map(|k| (me + k) % n).map(|r| call.send(&send[block(r)], r)).collect();
        // The last rank's contribution to this rank's block goes in its
        // place in `recv` (the fold ends there); this rank's own goes
        // there now if it is the last, in a buffer of its own otherwise.
        let own = if me == last {
            copy_slice(&mut recv[mine.clone()], &send[mine.clone()]);
            None
        } else {
            Some(Values::copy_of(&send[mine.clone()]))
        };
        Ok((posted, sends, own))
    })();
    Collective::new(call.clone(), async move {
        let (posted, sends, mut own) = started?;
        let mut posted = posted.into_iter().map(|(_, p)| p);
        // Every rank's contribution to this rank's block, folded in rank
        // order: `acc` is the fold of ranks 0..r, and a buffer the fold
        // is done with takes the next contribution received.
        let mut acc: Option<Values<T>> = None;
        let mut spare: Option<Values<T>> = None;
        // `lower op theirs` is `theirs op lower`, bit for bit: another
        // rank's part then folds into the accumulator straight from its
        // message, still the left fold in rank order.
        let from_message = op.commutes_exactly();
        for r in 0..last {
            if let Some(lower) = acc.as_mut().filter(|_| from_message && r != me) {
                posted.next().expect("a receive per other rank").fold_into(&op, lower).await?;
                continue;
            }
            let mut part = if r == me {
                own.take().expect("this rank's own part, taken once")
            } else {
                let mut theirs = spare.take().unwrap_or_else(|| Values::copy_of(&recv[mine.clone()]));
                posted.next().expect("a receive per other rank").into(&mut theirs).await?;
                theirs
            };
            if let Some(lower) = acc.take() {
                // lower ∘ part, into part.
                op.apply(&lower, &mut part)?;
                spare = Some(lower);
            }
            acc = Some(part);
        }
        if me != last {
            posted.next().expect("the last rank's receive").into(&mut recv[mine.clone()]).await?;
        }
        op.apply(acc.as_deref().expect("ranks 0..n-1 folded: n > 1"), &mut recv[mine.clone()])?;
        drop((acc, spare));
        sent(sends).await?;
        let ring = Ring::start_in_place::<T>(&call, &mut recv, &counts, &displs, "allreduce")?;
        ring.finish::<T>(&call, &mut recv).await
    })
}

/// The salt of [`scattered`]'s messages (see [`Call::salted`]).
const SCATTERED_SALT: u64 = 0x5ca7_7e2e_d0a1_12ed;

impl Comm {
    /// `MPI_Reduce`: combines every rank's `send` with `op`, element by
    /// element, in rank order, into the root's `recv` (as many values as
    /// `send`; ignored, and may be empty, on other ranks).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// use mpx::coll::{MAX, SUM};
    /// let mine = [comm.rank() as i64, 10];
    /// let mut total = [0i64; 2];
    /// comm.reduce(&mine, &mut total, SUM, 3).await?;
    /// if comm.rank() == 3 {
    ///     assert_eq!(total, [6, 40]);
    /// }
    /// let mut top = 0.0f64;
    /// comm.reduce(&(comm.rank() as f64), &mut top, MAX, 0).await?;
    /// if comm.rank() == 0 {
    ///     assert_eq!(top, 3.0);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe: dropped before it finishes, this rank leaves the
    /// reduction unfinished, and the ranks that wait for its part fail
    /// with [`ErrorKind::CollectiveMismatch`] naming it (see
    /// [`crate::coll`]).
    pub fn reduce<'a, 's, T: MpiType>(
        &self,
        send: impl CollRef<'s, T>,
        recv: impl CollMut<'a, T>,
        op: impl Into<Op<T>>,
        root: usize,
    ) -> Collective<'a> {
        let (send, recv, op) = (send.values(), recv.values(), op.into());
        // Salted with the root: the tree to rank 0 is the same whatever the
        // root, so a rank that takes another root would otherwise wait for
        // ever for a result rank 0 never sends it. Rank 0 fails on the
        // first value it takes from such a rank, and its word that it gave
        // up reaches the rank.
        let call = Call::start(self).salted(root_salt(REDUCE_ROOTED, root));
        let me = call.rank();
        let started = (|| -> Result<_> {
            op.check()?;
            call.check_root(root)?;
            if me == root {
                check_len("reduce: the root's receive buffer", recv.len(), send.len())?;
            }
            let tree = ToZero::start(&call, send)?;
            // The result travels from rank 0 to the root.
            let from_zero = (me == root && root != 0).then(|| call.post::<T>(0, send.len())).transpose()?;
            Ok((tree, from_zero))
        })();
        Collective::new(call.clone(), async move {
            let (tree, from_zero) = started?;
            let (result, sends) = tree.finish(&call, &op).await?;
            match (result, from_zero) {
                (Some(result), _) if root == 0 => copy_slice(recv, &result),
                (Some(result), _) => call.send(&result, root).await.map(drop)?,
                (None, Some(posted)) => posted.into(recv).await?,
                (None, None) => {}
            }
            sent(sends).await?;
            Ok(())
        })
    }

    /// `MPI_Allreduce`: [`reduce`](Comm::reduce) into every rank's `recv`
    /// (as many values as `send`).
    ///
    /// Every rank gets the same bits, and the values are combined in rank
    /// order: from 64 KiB per rank, by a reduce-scatter (each rank
    /// combines one block of every rank's values, a left fold in rank
    /// order) and a ring allgather of the blocks; below that, on a
    /// power-of-two number of ranks by recursive doubling (where the two
    /// ranks of each exchange compute the same `lower ∘ higher` from the
    /// same operands), otherwise by `reduce` to rank 0 and a broadcast of
    /// its result. A floating-point sum whose value depends on the order
    /// of its terms is identical on every rank.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// use mpx::coll::SUM;
    /// let mut residual = 0.0;
    /// comm.allreduce(&(0.5 * comm.rank() as f64), &mut residual, SUM).await?;
    /// assert_eq!(residual, 1.5);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn allreduce<'a, 's, T: MpiType>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>, op: impl Into<Op<T>>) -> Collective<'a> {
        let (send, recv, op) = (send.values(), recv.values(), op.into());
        let start = Starting::new(self);
        if std::mem::size_of::<T>() > MAX_REDUCED_VALUE {
            // Known when the program is built: for such a type, nothing
            // below is built into this function, whose frame then stays
            // small.
            let e = ErrorKind::InvalidArgument(format!(
                "allreduce: values of {} bytes ({}) are too large to combine one at a time: reduce a slice of their elements",
                std::mem::size_of::<T>(),
                std::any::type_name::<T>()
            ));
            return super::local::allreduce_refused(start, e.into());
        }
        if start.local().is_some() {
            return super::local::allreduce(start, send, recv, op);
        }
        let call = start.call();
        let n = call.size();
        if n > 1 && send.len() >= n && std::mem::size_of_val(send) as u64 >= LARGE_ALLREDUCE {
            return scattered(call, send, recv, op);
        }
        if n.is_power_of_two() {
            return doubling(call, send, recv, op);
        }
        let started = (|| -> Result<_> {
            op.check()?;
            check_len("allreduce: the receive buffer", recv.len(), send.len())?;
            Ok((ToZero::start(&call, send)?, Bcast::start::<T>(&call, 0, send.len(), &T::datatype(), None)?))
        })();
        Collective::new(call.clone(), async move {
            let (tree, bcast) = started?;
            let (result, tree_sends) = tree.finish(&call, &op).await?;
            if let Some(result) = result {
                copy_slice(recv, &result);
            }
            let mut recv = recv;
            bcast.finish::<T>(&call, &mut recv).await?;
            sent(tree_sends).await
        })
    }

    /// `MPI_Reduce_scatter_block`: combines every rank's `send` (size ×
    /// `recv.len()` values) as [`reduce`](Comm::reduce) does, and block `r`
    /// of the result lands in rank `r`'s `recv`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::coll::SUM;
    /// let mut mine = [0u32; 2];
    /// comm.reduce_scatter_block(&[1u32, 2, 3, 4][..], &mut mine[..], SUM).await?;
    /// assert_eq!(mine, if comm.rank() == 0 { [2, 4] } else { [6, 8] });
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn reduce_scatter_block<'a, 's, T: MpiType>(
        &self,
        send: impl CollRef<'s, T>,
        recv: impl CollMut<'a, T>,
        op: impl Into<Op<T>>,
    ) -> Collective<'a> {
        let recv = recv.values();
        let counts = vec![recv.len(); self.size()];
        self.reduce_scatter_counts(send.values(), recv, counts, op.into(), "reduce_scatter_block")
    }

    /// `MPI_Reduce_scatter`: as
    /// [`reduce_scatter_block`](Comm::reduce_scatter_block) with blocks of
    /// `counts[r]` values, one after the other (`send` holds their sum;
    /// every rank passes the same `counts`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::coll::SUM;
    /// // Rank 0 gets the first sum, rank 1 the other two.
    /// let counts = [1, 2];
    /// let mut mine = vec![0i64; counts[comm.rank()]];
    /// comm.reduce_scatter(&[1i64, 2, 3][..], &mut mine, &counts, SUM).await?;
    /// assert_eq!(mine, if comm.rank() == 0 { vec![2] } else { vec![4, 6] });
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn reduce_scatter<'a, 's, T: MpiType>(
        &self,
        send: impl CollRef<'s, T>,
        recv: impl CollMut<'a, T>,
        counts: &[usize],
        op: impl Into<Op<T>>,
    ) -> Collective<'a> {
        self.reduce_scatter_counts(send.values(), recv.values(), counts.to_vec(), op.into(), "reduce_scatter")
    }

    fn reduce_scatter_counts<'a, T: MpiType>(
        &self,
        send: &[T],
        recv: &'a mut [T],
        counts: Vec<usize>,
        op: Op<T>,
        what: &'static str,
    ) -> Collective<'a> {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        let started = (|| -> Result<_> {
            op.check()?;
            check_len(format_args!("{what}: the counts"), counts.len(), n)?;
            let total = counts.iter().try_fold(0usize, |sum, &c| sum.checked_add(c)).ok_or(ErrorKind::Overflow("the counts' sum"))?;
            check_len(format_args!("{what}: the send buffer"), send.len(), total)?;
            check_len(format_args!("{what}: the receive buffer"), recv.len(), counts[me])?;
            let tree = ToZero::start(&call, send)?;
            let from_zero = (me != 0).then(|| call.post::<T>(0, counts[me])).transpose()?;
            Ok((tree, from_zero))
        })();
        Collective::new(call.clone(), async move {
            let (tree, from_zero) = started?;
            let (result, tree_sends) = tree.finish(&call, &op).await?;
            if let Some(result) = result {
                let mut at = 0;
                let mut sends = Vec::with_capacity(n);
                for (r, &c) in counts.iter().enumerate() {
                    let block = &result[at..at + c];
                    if r == me {
                        copy_slice(recv, block);
                    } else {
                        sends.push(call.send(block, r));
                    }
                    at += c;
                }
                sent(sends).await?;
            }
            if let Some(posted) = from_zero {
                posted.into(recv).await?;
            }
            sent(tree_sends).await
        })
    }

    /// `MPI_Scan`: rank `r`'s `recv` gets the combination of ranks `0..=r`'s
    /// `send`, in rank order (a chain: rank `r` waits for rank `r - 1`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// use mpx::coll::SUM;
    /// let mut upto = 0u32;
    /// comm.scan(&1u32, &mut upto, SUM).await?;
    /// assert_eq!(upto, comm.rank() as u32 + 1);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn scan<'a, 's, T: MpiType>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>, op: impl Into<Op<T>>) -> Collective<'a> {
        self.prefix(send.values(), recv.values(), op.into(), true)
    }

    /// `MPI_Exscan`: rank `r`'s `recv` gets the combination of ranks
    /// `0..r`'s `send`, in rank order; rank 0's `recv` is left as it is,
    /// and, as in MPI, is not looked at (it may be empty).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// use mpx::coll::SUM;
    /// // Where each rank's 10 values start in a global numbering.
    /// let mut offset = 0u64;
    /// comm.exscan(&10u64, &mut offset, SUM).await?;
    /// assert_eq!(offset, 10 * comm.rank() as u64);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn exscan<'a, 's, T: MpiType>(&self, send: impl CollRef<'s, T>, recv: impl CollMut<'a, T>, op: impl Into<Op<T>>) -> Collective<'a> {
        self.prefix(send.values(), recv.values(), op.into(), false)
    }

    /// The chain of `scan` (`inclusive`) and `exscan`.
    fn prefix<'a, T: MpiType>(&self, send: &[T], recv: &'a mut [T], op: Op<T>, inclusive: bool) -> Collective<'a> {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        let what = if inclusive { "scan" } else { "exscan" };
        let started = (|| -> Result<_> {
            op.check()?;
            // An exscan's rank 0 receives nothing: its buffer is not significant.
            if inclusive || me > 0 {
                check_len(format_args!("{what}: the receive buffer"), recv.len(), send.len())?;
            }
            let from_left = (me > 0).then(|| call.post::<T>(me - 1, send.len())).transpose()?;
            let first = (me == 0 && n > 1).then(|| call.send(send, 1));
            if me == 0 && inclusive {
                copy_slice(recv, send);
            }
            Ok((from_left, first, Values::copy_of(send)))
        })();
        Collective::new(call.clone(), async move {
            let (from_left, first, own) = started?;
            let Some(posted) = from_left else {
                return sent(first).await;
            };
            // The combination of the ranks before this one.
            let mut before = Values::copy_of(&own);
            posted.into(&mut before).await?;
            let mut upto = own;
            op.apply(&before, &mut upto)?;
            copy_slice(recv, if inclusive { &upto } else { &before });
            if me + 1 < n {
                call.send(&upto, me + 1).await?;
            }
            Ok(())
        })
    }
}

/// The in-place forms (`MPI_IN_PLACE`): one buffer is both this rank's
/// contribution and where its result lands.
impl Comm {
    /// [`allreduce`](Comm::allreduce) with `buf` as both contribution and
    /// result.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// use mpx::coll::MAX;
    /// let mut best = [comm.rank() as i32, -(comm.rank() as i32)];
    /// comm.allreduce_in_place(&mut best[..], MAX).await?;
    /// assert_eq!(best, [2, 0]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn allreduce_in_place<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>, op: impl Into<Op<T>>) -> Collective<'a> {
        let buf = buf.values();
        let mine = buf.to_vec();
        self.allreduce(&mine[..], buf, op)
    }

    /// [`reduce`](Comm::reduce) with `buf` as every rank's contribution
    /// and, at the root, the result.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// use mpx::coll::SUM;
    /// let mut totals = [comm.rank() as u32, 1];
    /// comm.reduce_in_place(&mut totals[..], SUM, 0).await?;
    /// if comm.rank() == 0 {
    ///     assert_eq!(totals, [3, 3]); // 0 + 1 + 2, and one per rank
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn reduce_in_place<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>, op: impl Into<Op<T>>, root: usize) -> Collective<'a> {
        let buf = buf.values();
        let mine = buf.to_vec();
        self.reduce(&mine[..], buf, op, root)
    }

    /// [`reduce_scatter_block`](Comm::reduce_scatter_block) with `buf`
    /// (size × c values) as this rank's contribution: its block of the
    /// result lands in the first c values of `buf`, and the rest is left
    /// as it is.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::coll::SUM;
    /// let mut buf = [1u32, 2, 3, 4];
    /// comm.reduce_scatter_block_in_place(&mut buf[..], SUM).await?;
    /// assert_eq!(buf[..2], if comm.rank() == 0 { [2, 4] } else { [6, 8] });
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn reduce_scatter_block_in_place<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>, op: impl Into<Op<T>>) -> Collective<'a> {
        let buf = buf.values();
        let mine = buf.to_vec();
        let n = self.size();
        // A buffer that n blocks do not fill fails the check of the send
        // buffer against their sum.
        let count = buf.len() / n;
        self.reduce_scatter_counts(&mine, &mut buf[..count], vec![count; n], op.into(), "reduce_scatter_block_in_place")
    }

    /// [`reduce_scatter`](Comm::reduce_scatter) with `buf` (the sum of
    /// `counts` values) as this rank's contribution: its block of the
    /// result (`counts[rank]` values) lands at the start of `buf`, and the
    /// rest is left as it is.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::coll::SUM;
    /// // Rank 0 gets the first sum, rank 1 the other two.
    /// let counts = [1, 2];
    /// let mut buf = [1i64, 2, 3];
    /// comm.reduce_scatter_in_place(&mut buf[..], &counts, SUM).await?;
    /// let mine = &buf[..counts[comm.rank()]];
    /// assert_eq!(mine, if comm.rank() == 0 { &[2][..] } else { &[4, 6][..] });
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn reduce_scatter_in_place<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>, counts: &[usize], op: impl Into<Op<T>>) -> Collective<'a> {
        let buf = buf.values();
        let mine = buf.to_vec();
        // This rank's block; a count beyond `buf` fails the check of the
        // send buffer against the counts' sum.
        let own = counts.get(self.rank()).map_or(0, |&c| c.min(buf.len()));
        self.reduce_scatter_counts(&mine, &mut buf[..own], counts.to_vec(), op.into(), "reduce_scatter_in_place")
    }

    /// [`scan`](Comm::scan) with `buf` as both contribution and result.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// use mpx::coll::PROD;
    /// let mut factorial = comm.rank() as u64 + 1;
    /// comm.scan_in_place(&mut factorial, PROD).await?;
    /// assert_eq!(factorial, [1, 2, 6, 24][comm.rank()]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn scan_in_place<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>, op: impl Into<Op<T>>) -> Collective<'a> {
        let buf = buf.values();
        let mine = buf.to_vec();
        self.scan(&mine[..], buf, op)
    }

    /// [`exscan`](Comm::exscan) with `buf` as both contribution and result
    /// (rank 0's is left as it is).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(4, |comm| async move {
    /// use mpx::coll::SUM;
    /// // Rank r holds r + 1 items: where do they start in a global numbering?
    /// let mut start = comm.rank() as u64 + 1;
    /// comm.exscan_in_place(&mut start, SUM).await?;
    /// if comm.rank() == 0 {
    ///     start = 0; // rank 0's is left as it was
    /// }
    /// assert_eq!(start, [0, 1, 3, 6][comm.rank()]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`reduce`](Comm::reduce)).
    pub fn exscan_in_place<'a, T: MpiType>(&self, buf: impl CollMut<'a, T>, op: impl Into<Op<T>>) -> Collective<'a> {
        let buf = buf.values();
        let mine = buf.to_vec();
        self.exscan(&mine[..], buf, op)
    }
}
