//! Large buffers kept per thread for the next large pack.
//!
//! A message of a megabyte or more packed into a fresh allocation pays a
//! page fault for every 4 KiB it fills whenever the allocator hands out
//! new memory, and with glibc's allocator on one thread it does so for
//! every message of a one-way stream (a sender packing 1 MiB messages for
//! a receiver on the same thread ran at a tenth of its speed, 256 faults a
//! message). So the receive that has unpacked a large message gives its
//! buffer back ([`Engine::recycle`](crate::proto::engine::Engine::recycle),
//! once the engine's own pool of gather buffers is full), and a large pack
//! on the same thread takes it ([`take`]). At most [`KEEP`] buffers are kept
//! per thread, the largest offered; a thread's buffers are freed when it
//! ends.

use std::cell::RefCell;

use bytes::BytesMut;

/// Smaller buffers are not worth keeping: the allocator reuses them well.
pub(crate) const MIN: usize = 1 << 20;

/// Buffers kept per thread at most.
pub(crate) const KEEP: usize = 2;

thread_local! {
    static SPARE: RefCell<Kept<Vec<u8>>> = const { RefCell::new(Kept::new(KEEP)) };
}

/// An empty buffer with room for `len` bytes, if this thread keeps one
/// (the smallest that has room).
pub(crate) fn take(len: usize) -> Option<Vec<u8>> {
    if len < MIN {
        return None;
    }
    SPARE.try_with(|spare| spare.borrow_mut().take(len)).ok().flatten()
}

/// Keeps `buffer` (emptied) for a later [`take`] if it is large, in place
/// of the smallest kept one if [`KEEP`] are kept already.
pub(crate) fn give(buffer: Vec<u8>) {
    if buffer.capacity() >= MIN {
        let _ = SPARE.try_with(|spare| spare.borrow_mut().offer(buffer));
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
/// allocation they fit.
#[derive(Debug)]
pub(crate) struct Kept<B> {
    buffers: Vec<B>,
    keep: usize,
}

impl<B: Reusable> Kept<B> {
    pub(crate) const fn new(keep: usize) -> Self {
        Kept { buffers: Vec::new(), keep }
    }

    /// The smallest kept buffer with room for `room` bytes, emptied.
    pub(crate) fn take(&mut self, room: usize) -> Option<B> {
        let fits = self.buffers.iter().enumerate().filter(|(_, b)| b.room() >= room).min_by_key(|(_, b)| b.room())?.0;
        Some(self.buffers.swap_remove(fits))
    }

    /// Keeps `buffer` if fewer than `keep` are kept or it is larger than
    /// the smallest kept one; returns the buffer not kept (`buffer` or the
    /// one it displaced), if any.
    pub(crate) fn offer(&mut self, mut buffer: B) -> Option<B> {
        buffer.empty();
        if self.buffers.len() < self.keep {
            self.buffers.push(buffer);
            return None;
        }
        if let Some(smallest) = self.buffers.iter_mut().min_by_key(|b| b.room()) {
            if smallest.room() < buffer.room() {
                std::mem::swap(smallest, &mut buffer);
            }
        }
        Some(buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_given_is_taken_by_a_pack_it_fits() {
        let buffer = Vec::<u8>::with_capacity(2 * MIN);
        let at = buffer.as_ptr();
        give(buffer);
        assert!(take(3 * MIN).is_none(), "too small for the pack");
        let taken = take(MIN + 1).expect("kept");
        assert_eq!((taken.as_ptr(), taken.len()), (at, 0));
        assert!(take(MIN).is_none(), "taken once");
    }

    #[test]
    fn small_buffers_are_not_kept_and_at_most_keep_large_ones_are() {
        give(Vec::with_capacity(MIN - 1));
        assert!(take(1).is_none() && take(MIN - 1).is_none());
        for size in [MIN, 3 * MIN, 2 * MIN] {
            give(Vec::with_capacity(size));
        }
        // The two largest stay.
        let mut kept: Vec<usize> = std::iter::from_fn(|| take(MIN)).map(|b| b.capacity()).collect();
        kept.sort_unstable();
        assert_eq!(kept.len(), KEEP);
        assert!(kept[0] >= 2 * MIN && kept[1] >= 3 * MIN);
    }
}
