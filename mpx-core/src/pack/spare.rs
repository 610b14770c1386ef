//! Buffers kept per thread for the next large pack.
//!
//! A message of a megabyte or more packed into a fresh allocation pays a
//! page fault for every 4 KiB it fills whenever the allocator hands out
//! new memory, and with glibc's allocator on one thread it does so for
//! every message of a one-way stream (a sender packing 1 MiB messages for
//! a receiver on the same thread ran at a tenth of its speed, 256 faults a
//! message). So the receive that has unpacked a large message gives its
//! buffer back ([`Engine::recycle`](crate::proto::engine::Engine::recycle),
//! once the engine's own pool of gather buffers is full), and a large pack
//! on the same thread takes it ([`take`]). At most [`KEEP`] buffers of
//! [`LARGE`] bytes or more are kept per thread, the largest offered.
//!
//! Buffers from [`MEDIUM`] bytes up to [`LARGE`] are kept too, at most
//! [`KEEP_MEDIUM`] (under 8 MiB in all): glibc serves them with `mmap`
//! until its threshold adapts, and gives the top of its heap back to the
//! system whenever more than twice that threshold is free there, so that
//! several such buffers freed together fault in again when next packed
//! (the parts of 4 ranks' alltoall of 64 KiB blocks, meeting on one
//! thread, faulted 56 pages a call and took 3 times as long).
//! A thread's buffers are freed when it ends.

use std::cell::RefCell;

use bytes::BytesMut;

/// Buffers from this size on are large: at most [`KEEP`] are kept.
pub(crate) const LARGE: usize = 1 << 20;

/// Large buffers kept per thread at most.
pub(crate) const KEEP: usize = 2;

/// Smaller buffers are not worth keeping: the allocator reuses them well.
pub(crate) const MEDIUM: usize = 64 << 10;

/// Buffers of [`MEDIUM`] bytes and more, below [`LARGE`], kept per
/// thread at most.
pub(crate) const KEEP_MEDIUM: usize = 8;

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
    static SPARE: RefCell<Spare> = const { RefCell::new(Spare { large: Kept::new(KEEP), medium: Kept::new(KEEP_MEDIUM) }) };
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
/// (see [`take`]).
pub(crate) fn copy_of(bytes: &[u8]) -> Vec<u8> {
    match take(bytes.len()) {
        Some(mut buffer) => {
            buffer.extend_from_slice(bytes);
            buffer
        }
        None => bytes.to_vec(),
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
        let buffer = Vec::<u8>::with_capacity(2 * LARGE);
        let at = buffer.as_ptr();
        give(buffer);
        assert!(take(3 * LARGE).is_none(), "too small for the pack");
        let taken = take(LARGE + 1).expect("kept");
        assert_eq!((taken.as_ptr(), taken.len()), (at, 0));
        assert!(take(LARGE).is_none(), "taken once");
    }

    #[test]
    fn small_buffers_are_not_kept_and_at_most_keep_large_ones_are() {
        give(Vec::with_capacity(MEDIUM - 1));
        assert!(take(1).is_none() && take(MEDIUM - 1).is_none());
        for size in [LARGE, 3 * LARGE, 2 * LARGE] {
            give(Vec::with_capacity(size));
        }
        // The two largest stay.
        let mut kept: Vec<usize> = std::iter::from_fn(|| take(LARGE)).map(|b| b.capacity()).collect();
        kept.sort_unstable();
        assert_eq!(kept.len(), KEEP);
        assert!(kept[0] >= 2 * LARGE && kept[1] >= 3 * LARGE);
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
