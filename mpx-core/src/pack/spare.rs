//! Memory kept per thread for the next large pack or reduction.
//!
//! A message of a megabyte or more packed into a fresh allocation pays a
//! page fault for every 4 KiB it fills whenever the allocator hands out
//! new memory, and with glibc's allocator on one thread it does so for
//! every message of a one-way stream (a sender packing 1 MiB messages for
//! a receiver on the same thread ran at a tenth of its speed, 256 faults a
//! message). So the receive that has unpacked a large message gives its
//! buffer back ([`Engine::recycle`](crate::proto::engine::Engine::recycle),
//! once the engine's own pool of gather buffers is full), and a large pack
//! on the same thread takes it ([`take`]). Of buffers of [`LARGE`] bytes
//! or more, the largest offered are kept per thread: [`KEEP`] of any
//! size, up to [`KEEP_LARGE`] while they hold at most [`LARGE_BUDGET`]
//! bytes (4 ranks' allreduce of 1 MiB meeting on one thread packs four
//! parts a call: keeping two, it faulted 270 pages a call).
//!
//! Buffers from [`MEDIUM`] bytes up to [`LARGE`] are kept too, at most
//! [`KEEP_MEDIUM`] (under 16 MiB in all): glibc serves them with `mmap`
//! until its threshold adapts, and gives the top of its heap back to the
//! system whenever more than twice that threshold is free there, so that
//! several such buffers freed together fault in again when next packed
//! (the parts of 4 ranks' alltoall of 64 KiB blocks, meeting on one
//! thread, faulted 48-56 pages a call and took 3 times as long), and the
//! vectors of values large reductions work in ([`Values`]), at most 4
//! holding at most 64 MiB.
//!
//! A thread's buffers are freed when it ends: a thread keeps at most
//! 64 MiB of large buffers (or its 2 largest, if larger), 16 MiB of medium
//! ones and 64 MiB of values. A kept buffer serves only a request of at
//! least a quarter of its size.

use std::cell::RefCell;

use bytes::BytesMut;

/// Buffers from this size on are large (see [`KEEP`] and [`KEEP_LARGE`]).
pub(crate) const LARGE: usize = 1 << 20;

/// Large buffers of any size kept per thread.
pub(crate) const KEEP: usize = 2;

/// Large buffers kept per thread at most, while they hold at most
/// [`LARGE_BUDGET`] bytes in all (several ranks of one process on one
/// thread each pack their part of a large collective).
pub(crate) const KEEP_LARGE: usize = 8;

/// Bytes the large buffers beyond [`KEEP`] may bring the kept ones to.
pub(crate) const LARGE_BUDGET: usize = 64 << 20;

/// Smaller buffers are not worth keeping: the allocator reuses them well.
pub(crate) const MEDIUM: usize = 64 << 10;

/// Buffers of [`MEDIUM`] bytes and more, below [`LARGE`], kept per
/// thread at most.
pub(crate) const KEEP_MEDIUM: usize = 16;

/// A thread's kept buffers: large and medium ones.
struct Spare {
    large: Kept<Vec<u8>>,
    medium: Kept<Vec<u8>>,
}

impl Spare {
    fn class(&mut self, len: usize) -> Option<&mut Kept<Vec<u8>>> {
        match len {
            _ if len >= LARGE => Some(&mut self.large),
            _ if len >= MEDIUM => Some(&mut self.medium),
            _ => None,
        }
    }
}

thread_local! {
    static SPARE: RefCell<Spare> = const { RefCell::new(Spare { large: Kept::with_budget(KEEP, KEEP_LARGE, LARGE_BUDGET), medium: Kept::with_budget(KEEP_MEDIUM, KEEP_MEDIUM, usize::MAX) }) };
}

/// An empty buffer with room for `len` bytes, if this thread keeps one
/// (the smallest of its class that has room).
pub(crate) fn take(len: usize) -> Option<Vec<u8>> {
    if len < MEDIUM {
        return None;
    }
    SPARE.try_with(|spare| spare.borrow_mut().class(len)?.take(len)).ok().flatten()
}

/// Keeps `buffer` (emptied) for a later [`take`] if it is large or
/// medium, in place of the smallest kept one of its class if its class
/// is full.
pub(crate) fn give(buffer: Vec<u8>) {
    if buffer.capacity() >= MEDIUM {
        let _ = SPARE.try_with(|spare| spare.borrow_mut().class(buffer.capacity()).map(|kept| kept.offer(buffer)));
    }
}

/// A copy of `bytes`, in a kept buffer if this thread has one with room
/// (see [`take`]); from [`MEDIUM`] bytes on,
/// [`ErrorKind::Overflow`](crate::ErrorKind::Overflow) if memory cannot
/// hold it (fewer are allocated as any small vector is).
pub(crate) fn copy_of(bytes: &[u8]) -> crate::Result<Vec<u8>> {
    if bytes.len() < MEDIUM {
        // Nothing is kept for so few bytes, and an allocation this small
        // that fails aborts anyway (a vector built field by field here
        // would cost the processor more than the copy). From a few KiB
        // on, the copy keeps clear of `memcpy`'s slow case.
        if bytes.len() <= 2048 {
            return Ok(bytes.to_vec());
        }
        return Ok(super::copy::vec_of(bytes));
    }
    let mut buffer = match take(bytes.len()) {
        Some(buffer) => buffer,
        None => {
            let mut fresh = Vec::new();
            super::reserve_packed(&mut fresh, bytes.len())?;
            fresh
        }
    };
    super::copy::extend_from(&mut buffer, bytes);
    Ok(buffer)
}

/// Vectors of values kept per thread at most (see [`Values`]).
const KEEP_VALUES: usize = 4;

/// Bytes the kept vectors of values may hold in all.
const VALUES_BUDGET: usize = 64 << 20;

thread_local! {
    /// Kept vectors of values, each a `Vec<T>` for some `T`.
    static VALUES: RefCell<Kept<KeptValues>> = const { RefCell::new(Kept::with_budget(0, KEEP_VALUES, VALUES_BUDGET)) };
}

/// A kept `Vec<T>`, for some `T`, and its capacity in bytes.
struct KeptValues {
    bytes: usize,
    vec: Box<dyn std::any::Any>,
}

impl Reusable for KeptValues {
    fn room(&self) -> usize {
        self.bytes
    }
    /// Emptied when taken, as the `Vec<T>` it is.
    fn empty(&mut self) {}
}

/// A vector of values whose memory, if [`MEDIUM`] bytes or more, goes
/// back to this thread's kept vectors when it is dropped, for the next
/// [`Values::copy_of`] of its type: the operands and partial results of
/// large reductions, which would otherwise fault in fresh pages for every
/// call (4 ranks' allreduce of 1 MiB on one thread: 250 faults a call).
/// At most 4 are kept, the largest offered, holding at most 64 MiB.
#[derive(Debug)]
pub(crate) struct Values<T: Copy + 'static>(Vec<T>);

impl<T: Copy + 'static> Values<T> {
    /// A copy of `values`, in a kept vector if this thread has one with
    /// room.
    pub(crate) fn copy_of(values: &[T]) -> Self {
        let bytes = std::mem::size_of_val(values);
        let kept = match bytes >= MEDIUM {
            true => VALUES.try_with(|kept| kept.borrow_mut().take_where(bytes, |kept| kept.vec.is::<Vec<T>>())).ok().flatten(),
            false => None,
        };
        let mut vec = kept.and_then(|kept| kept.vec.downcast::<Vec<T>>().ok()).map_or_else(Vec::new, |vec| *vec);
        vec.clear();
        super::copy::extend_from(&mut vec, values);
        Values(vec)
    }
}

impl<T: Copy + 'static> std::ops::Deref for Values<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T: Copy + 'static> std::ops::DerefMut for Values<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T: Copy + 'static> Drop for Values<T> {
    fn drop(&mut self) {
        let bytes = self.0.capacity() * std::mem::size_of::<T>();
        // One larger than the budget would only displace the others.
        if !(MEDIUM..=VALUES_BUDGET).contains(&bytes) {
            return;
        }
        let vec = Box::new(std::mem::take(&mut self.0));
        let _ = VALUES.try_with(|kept| kept.borrow_mut().offer(KeptValues { bytes, vec }));
    }
}

/// A buffer type [`Kept`] can hold.
pub(crate) trait Reusable {
    fn room(&self) -> usize;
    fn empty(&mut self);
}

impl Reusable for Vec<u8> {
    fn room(&self) -> usize {
        self.capacity()
    }
    fn empty(&mut self) {
        self.clear()
    }
}

impl Reusable for BytesMut {
    fn room(&self) -> usize {
        self.capacity()
    }
    fn empty(&mut self) {
        self.clear()
    }
}

/// At most `keep` buffers, the largest offered, for reuse by the next
/// allocation they fit: `keep_any` of any size, and more only while all
/// kept hold at most `budget` bytes. A buffer serves only a request of
/// at least `1 / share` of its room.
#[derive(Debug)]
pub(crate) struct Kept<B> {
    buffers: Vec<B>,
    keep_any: usize,
    keep: usize,
    budget: usize,
    share: usize,
}

impl<B: Reusable> Kept<B> {
    /// At most `keep` buffers of any size, each serving any request it
    /// has room for (a transfer's gather buffer grows to the message's
    /// length from a first guess).
    pub(crate) const fn new(keep: usize) -> Self {
        Kept { buffers: Vec::new(), keep_any: keep, keep, budget: usize::MAX, share: usize::MAX }
    }

    /// `keep_any` buffers of any size, and up to `keep` while they hold at
    /// most `budget` bytes in all; a buffer serves requests of at least a
    /// quarter of its room (a small pack does not tie up a large buffer).
    pub(crate) const fn with_budget(keep_any: usize, keep: usize, budget: usize) -> Self {
        Kept { buffers: Vec::new(), keep_any, keep, budget, share: 4 }
    }

    /// The smallest kept buffer with room for `room` bytes that serves a
    /// request that size (see [`Kept`]), emptied.
    pub(crate) fn take(&mut self, room: usize) -> Option<B> {
        self.take_where(room, |_| true)
    }

    /// [`take`](Kept::take) of a buffer that `fits` besides.
    fn take_where(&mut self, room: usize, fits: impl Fn(&B) -> bool) -> Option<B> {
        let at = self.smallest(|b| b.room() >= room && b.room() / self.share <= room && fits(b))?;
        Some(self.buffers.remove(at))
    }

    /// Where the smallest kept buffer that `fits` is: of buffers as small,
    /// the one offered last (kept in the order offered), the likeliest
    /// still in the cache.
    fn smallest(&self, fits: impl Fn(&B) -> bool) -> Option<usize> {
        self.buffers.iter().enumerate().filter(|(_, b)| fits(b)).min_by_key(|&(i, b)| (b.room(), std::cmp::Reverse(i))).map(|(i, _)| i)
    }

    /// Keeps `buffer` if it is among the largest offered that fit (see
    /// [`Kept`]): the smallest kept go (the buffer itself, if it is the
    /// smallest) until the rest fit. Returns the last buffer not kept, if
    /// any (any other is freed).
    pub(crate) fn offer(&mut self, mut buffer: B) -> Option<B> {
        buffer.empty();
        self.buffers.push(buffer);
        let mut not_kept = None;
        loop {
            let over = self.buffers.len() > self.keep
                || (self.buffers.len() > self.keep_any && self.buffers.iter().map(B::room).fold(0, usize::saturating_add) > self.budget);
            if !over {
                return not_kept;
            }
            let smallest = self.smallest(|_| true).expect("over: some kept");
            not_kept = Some(self.buffers.remove(smallest));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_given_is_taken_by_a_pack_it_fits() {
        let buffer = Vec::<u8>::with_capacity(2 * LARGE);
        let at = buffer.as_ptr();
        give(buffer);
        assert!(take(3 * LARGE).is_none(), "too small for the pack");
        let taken = take(LARGE + 1).expect("kept");
        assert_eq!((taken.as_ptr(), taken.len()), (at, 0));
        assert!(take(LARGE).is_none(), "taken once");
    }

    #[test]
    fn small_buffers_are_not_kept_and_large_ones_within_the_budget() {
        give(Vec::with_capacity(MEDIUM - 1));
        assert!(take(1).is_none() && take(MEDIUM - 1).is_none());
        for size in [LARGE, 3 * LARGE, 2 * LARGE] {
            give(Vec::with_capacity(size));
        }
        let mut kept: Vec<usize> = std::iter::from_fn(|| take(LARGE)).map(|b| b.capacity()).collect();
        kept.sort_unstable();
        assert_eq!(kept, [LARGE, 2 * LARGE, 3 * LARGE]);
        // Beyond the budget, the largest KEEP stay.
        let huge = LARGE_BUDGET / 2;
        for size in [huge, LARGE, huge + 1, huge + 2] {
            give(Vec::with_capacity(size));
        }
        let mut kept: Vec<usize> = std::iter::from_fn(|| take(huge)).map(|b| b.capacity()).collect();
        kept.sort_unstable();
        assert_eq!(kept.len(), KEEP, "{kept:?}");
        assert!(kept[0] > huge && kept[1] > huge + 1);
    }

    #[test]
    fn a_buffer_larger_than_the_budget_displaces_smaller_ones() {
        for size in [LARGE, LARGE, LARGE] {
            give(Vec::with_capacity(size));
        }
        give(Vec::with_capacity(100 * LARGE));
        assert!(take(30 * LARGE).is_some(), "the large one is kept");
        let rest: Vec<usize> = std::iter::from_fn(|| take(LARGE)).map(|b| b.capacity()).collect();
        assert_eq!(rest, [LARGE], "the 2 largest of any size stay");
        give(Vec::with_capacity(8 * LARGE));
        assert!(take(LARGE).is_none(), "a request of under a quarter of a kept buffer's size does not take it");
        assert!(take(2 * LARGE).is_some());
    }

    #[test]
    fn at_most_keep_large_buffers_are_kept() {
        for _ in 0..KEEP_LARGE + 3 {
            give(Vec::with_capacity(LARGE));
        }
        assert_eq!(std::iter::from_fn(|| take(LARGE)).count(), KEEP_LARGE);
    }

    #[test]
    fn values_dropped_are_copied_into_next() {
        let n = MEDIUM / 8;
        let first = Values::copy_of(&vec![1.5f64; n]);
        let at = first.as_ptr();
        drop(first);
        let small = Values::copy_of(&[2u8; 10]);
        assert_eq!(&small[..], [2; 10]);
        assert!(Values::<u64>::copy_of(&vec![3; n])[..].iter().all(|&v| v == 3), "another type does not take it");
        let again = Values::copy_of(&vec![2.5f64; n]);
        assert_eq!(again.as_ptr(), at);
        assert!(again.iter().all(|&v| v == 2.5));
        for _ in 0..2 * KEEP_VALUES {
            drop(Values::copy_of(&vec![0.0f64; n]));
        }
        assert!(VALUES.with(|kept| kept.borrow().buffers.len()) <= KEEP_VALUES);
        // Within the budget: a vector larger than it is not kept, and the
        // smallest make room for a large one.
        drop(Values::copy_of(&vec![0u8; VALUES_BUDGET + 1]));
        drop(Values::copy_of(&vec![0u8; VALUES_BUDGET - MEDIUM]));
        let held: usize = VALUES.with(|kept| kept.borrow().buffers.iter().map(|v| v.bytes).sum());
        assert!(held <= VALUES_BUDGET, "{held}");
        assert!(VALUES.with(|kept| kept.borrow().buffers.iter().any(|v| v.bytes == VALUES_BUDGET - MEDIUM)));
    }

    #[test]
    fn medium_buffers_are_kept_apart_from_large_ones() {
        for _ in 0..KEEP_MEDIUM + 2 {
            give(Vec::with_capacity(MEDIUM));
        }
        give(Vec::with_capacity(LARGE));
        assert!(take(MEDIUM + 1).is_none(), "no medium buffer has room, and a large one serves large packs only");
        let medium: Vec<Vec<u8>> = std::iter::from_fn(|| take(MEDIUM)).collect();
        assert_eq!(medium.len(), KEEP_MEDIUM);
        assert!(medium.iter().all(|b| b.capacity() < LARGE));
        assert!(take(LARGE).is_some(), "the large one is still there");
    }
}
