//! Copies of memory that keep clear of a slow case of `memcpy`.
//!
//! On processors with fast string moves (ERMS, FSRM), glibc's `memcpy`
//! moves copies from about 2 KiB up to its non-temporal threshold (or, on
//! AMD processors, the size of the L2 cache) with `rep movsb`. Where the
//! destination starts just ahead of the source modulo 4 KiB, every load of
//! that instruction shares its page offset with a store it has just made
//! ("4K aliasing"), and it slows down by an order of magnitude: on the AMD
//! EPYC and glibc 2.36 the benchmarks ran on, 64 KiB moved at 1.2-2.7 GB/s
//! with the destination 8 to 24 bytes ahead, against 30-45 GB/s at other
//! distances, at every length from 2,176 bytes to 480 KiB. Whether a copy
//! hits it depends only on where two allocations happen to lie, so a
//! message's or a collective's time could change fivefold from one run (or
//! one earlier allocation) to the next: a 2-rank alltoall of 64 KiB blocks
//! took 60-90 µs per call instead of 15-18 once a 1 MiB collective had run
//! before it on the thread, which moved the allocator's placement of the
//! program's buffers to 16 bytes apart modulo 4 KiB. The copies here move
//! a copy whose destination is 1 to 255 bytes ahead a cache line at a time
//! with vector moves instead ([`copy_by_lines`]), which the aliasing slows
//! by a fraction (26-34 GB/s); every other copy is a plain `memcpy`.
//!
//! mpx copies with these wherever a copy may be large: packing and
//! unpacking contiguous data, the copies a send makes of a borrowed
//! buffer, rendezvous data gathered from its chunks, collectives' blocks
//! and values.

use std::ptr;

use bytes::{BufMut, Bytes, BytesMut};

/// Lengths whose copies are checked for aliasing: glibc's `memcpy` uses
/// vector moves up to 2 KiB (its smallest threshold for string moves is
/// 2,048 bytes, FSRM's 2,112), and non-temporal stores from a threshold of
/// a few hundred KiB to a few MiB, below which the lines copied here lose
/// to it by a fifth (1 MiB, 31 against 25 GB/s) and above which they lose
/// by half.
const CHECKED: std::ops::RangeInclusive<usize> = 2049..=(1 << 20);

/// How far ahead of a copy's source, modulo 4 KiB, its destination may not
/// start. Measured: 8 to 24 bytes ahead slowed `rep movsb` down twentyfold
/// on 64 KiB, 1 to about 56 bytes ahead by up to four times on 1 KiB rows;
/// the window leaves a margin.
pub(crate) const ALIASING_WINDOW: usize = 256;

/// Whether `dst` is less than [`ALIASING_WINDOW`] bytes ahead of `src`
/// modulo 4 KiB, where a forward copy's loads share page offsets with its
/// recent stores.
#[inline(always)]
pub(crate) fn aliases_4k(src: *const u8, dst: *const u8) -> bool {
    ahead_in_page(src, dst) < ALIASING_WINDOW
}

/// How far `dst` lies ahead of `src` modulo 4 KiB.
#[inline(always)]
fn ahead_in_page(src: *const u8, dst: *const u8) -> usize {
    (dst as usize).wrapping_sub(src as usize) % 4096
}

/// Whether `dst` is 1 to [`ALIASING_WINDOW`] - 1 bytes ahead of `src`
/// modulo 4 KiB: [`aliases_4k`] but for the same page offset, where
/// `memcpy`'s string move runs at full speed (64 KiB at 45 GB/s, measured
/// beside the 1.2-2.7 GB/s of 8 to 24 bytes ahead).
#[inline(always)]
fn just_ahead(src: *const u8, dst: *const u8) -> bool {
    aliases_4k(src, dst) && ahead_in_page(src, dst) != 0
}

/// Copies `len >= 64` bytes between non-overlapping buffers 64 bytes (a
/// cache line's worth) at a time, the last 64 ending at `len` (they may
/// overlap the ones before, rewriting bytes with the same values).
///
/// On x86_64 the loop is written out in assembly (SSE2 moves, which every
/// x86_64 processor has): written in Rust, a loop of 64-byte copies is an
/// idiom the compiler turns back into one call of `memmove` for the whole
/// length, which takes the very string move this exists to avoid.
///
/// # Safety
/// `len >= 64` bytes at `src` are readable, `len` bytes at `dst` writable,
/// and the two ranges do not overlap.
#[inline(always)]
unsafe fn copy_by_lines(src: *const u8, dst: *mut u8, len: usize) {
    debug_assert!(len >= 64);
    // SAFETY: every line moved covers bytes `i..i + 64` with `i + 64 <=
    // len`, inside both ranges the caller vouches for, which do not
    // overlap.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        std::arch::asm!(
            // Lines from 0 while `i < len - 64` (the first at least: with
            // `len == 64` it is the last line, copied again below).
            "2:",
            "movdqu xmm0, [{src} + {i}]",
            "movdqu xmm1, [{src} + {i} + 16]",
            "movdqu xmm2, [{src} + {i} + 32]",
            "movdqu xmm3, [{src} + {i} + 48]",
            "movdqu [{dst} + {i}], xmm0",
            "movdqu [{dst} + {i} + 16], xmm1",
            "movdqu [{dst} + {i} + 32], xmm2",
            "movdqu [{dst} + {i} + 48], xmm3",
            "add {i}, 64",
            "cmp {i}, {last}",
            "jb 2b",
            src = in(reg) src,
            dst = in(reg) dst,
            last = in(reg) len - 64,
            i = inout(reg) 0usize => _,
            out("xmm0") _,
            out("xmm1") _,
            out("xmm2") _,
            out("xmm3") _,
            options(nostack),
        );
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mut i = 0;
            while i + 64 < len {
                ptr::copy_nonoverlapping(src.add(i), dst.add(i), 64);
                i += 64;
            }
        }
        ptr::copy_nonoverlapping(src.add(len - 64), dst.add(len - 64), 64);
    }
}

/// Copies `len` bytes from `src` to `dst`, as `ptr::copy_nonoverlapping`
/// does, but a line at a time where `memcpy` would take the slow string
/// move (see the [module docs](self)).
///
/// # Safety
/// As for `ptr::copy_nonoverlapping::<u8>`: `len` bytes at `src` are
/// readable, `len` bytes at `dst` writable, and the two do not overlap.
#[inline]
pub(crate) unsafe fn copy_raw(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's guarantees, and `len > 2048 >= 64` for the
    // copy by lines.
    unsafe {
        if CHECKED.contains(&len) && just_ahead(src, dst) {
            return copy_by_lines(src, dst, len);
        }
        ptr::copy_nonoverlapping(src, dst, len)
    }
}

/// `dst.copy_from_slice(src)`, a line at a time where `memcpy` would take
/// the slow string move (see the [module docs](self)).
///
/// # Panics
/// If the two slices differ in length, as `copy_from_slice` does.
#[inline]
pub(crate) fn copy_slice<T: Copy>(dst: &mut [T], src: &[T]) {
    assert_eq!(dst.len(), src.len(), "copies between slices of different lengths");
    // SAFETY: both slices hold `size_of_val(src)` bytes, and a shared and
    // an exclusive borrow never overlap. The bytes are copied as they lie
    // (padding included), as `copy_from_slice` copies them.
    unsafe { copy_raw(src.as_ptr().cast(), dst.as_mut_ptr().cast(), std::mem::size_of_val(src)) }
}

/// `vec.extend_from_slice(src)`, a line at a time where `memcpy` would take
/// the slow string move (see the [module docs](self)).
#[inline]
pub(crate) fn extend_from<T: Copy>(vec: &mut Vec<T>, src: &[T]) {
    vec.reserve(src.len());
    let len = vec.len();
    // SAFETY: `reserve` made room for `src.len()` more values past `len`,
    // in the vector's own memory, apart from `src` (borrowed while the
    // vector is borrowed mutably); the copy initialises them before
    // `set_len` counts them.
    unsafe {
        copy_raw(src.as_ptr().cast(), vec.as_mut_ptr().add(len).cast(), std::mem::size_of_val(src));
        vec.set_len(len + src.len());
    }
}

/// `buf.extend_from_slice(src)` for a `BytesMut`, a line at a time where
/// `memcpy` would take the slow string move (see the [module docs](self)).
#[inline]
pub(crate) fn extend_bytes(buf: &mut BytesMut, src: &[u8]) {
    buf.reserve(src.len());
    let room = buf.chunk_mut();
    debug_assert!(room.len() >= src.len());
    // SAFETY: `reserve` made room for `src.len()` bytes past the buffer's
    // length (`chunk_mut`, uninitialised, in the buffer's own memory, apart
    // from `src`); the copy initialises them before `advance_mut` counts
    // them.
    unsafe {
        copy_raw(src.as_ptr(), room.as_mut_ptr(), src.len());
        buf.advance_mut(src.len());
    }
}

/// `Bytes::copy_from_slice(src)`, a line at a time where `memcpy` would
/// take the slow string move (see the [module docs](self)).
pub(crate) fn bytes_of(src: &[u8]) -> Bytes {
    Bytes::from(vec_of(src))
}

/// `src.to_vec()`, a line at a time where `memcpy` would take the slow
/// string move (see the [module docs](self)).
pub(crate) fn vec_of(src: &[u8]) -> Vec<u8> {
    let mut copy = Vec::with_capacity(src.len());
    extend_from(&mut copy, src);
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// Every copy is exact, in and out of the aliasing window, at lengths
    /// around the bounds of the checked range and at every remainder
    /// modulo 64; nothing past the destination is written.
    #[test]
    fn copies_are_exact_at_every_distance_and_length() {
        for len in [0usize, 1, 63, 64, 65, 2048, 2049, 2050, 4095, 4096, 70_001, (1 << 20) - 1, 1 << 20, (1 << 20) + 1] {
            for ahead in [0, 1, 8, 16, 63, 64, 255, 256, 1000, 4095] {
                let from = 5;
                // A whole number of pages past the source, then `ahead`.
                let to = from + len.div_ceil(4096).max(1) * 4096 + ahead;
                let mut whole = pattern(to + len + 64);
                let want_src = whole[from..from + len].to_vec();
                let (head, tail) = whole.split_at_mut(to);
                assert_eq!(aliases_4k(head[from..].as_ptr(), tail.as_ptr()), ahead < ALIASING_WINDOW, "{ahead} ahead");
                let after = tail[len..].to_vec();
                copy_slice(&mut tail[..len], &head[from..from + len]);
                assert!(tail[..len] == want_src[..], "{len} bytes {ahead} ahead");
                assert!(tail[len..] == after[..], "{len} bytes {ahead} ahead: wrote past the end");
            }
        }
    }

    #[test]
    fn extensions_append_exactly() {
        let src = pattern(100_000);
        let mut vec = vec![1u8, 2, 3];
        extend_from(&mut vec, &src);
        assert_eq!(&vec[..3], [1, 2, 3]);
        assert!(vec[3..] == src[..]);
        let values: Vec<u64> = (0..5000).collect();
        let mut more = vec![7u64];
        extend_from(&mut more, &values);
        assert_eq!(more.len(), 5001);
        assert!(more[1..] == values[..]);
        let mut buf = BytesMut::from(&b"ab"[..]);
        extend_bytes(&mut buf, &src);
        assert_eq!(&buf[..2], b"ab");
        assert!(buf[2..] == src[..]);
        assert!(bytes_of(&src) == src[..]);
    }

    #[test]
    #[should_panic(expected = "different lengths")]
    fn slices_of_different_lengths_are_refused() {
        copy_slice(&mut [0u8; 3], &[1u8; 4]);
    }
}
