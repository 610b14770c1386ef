//! The native pack/unpack interpreter.
//!
//! [`run`] walks a native [`Op`] program once per call, so the work per
//! byte is that of the innermost loop. Two shapes get dedicated loops because
//! they carry nearly all the bytes of real layouts:
//! * a `Repeat` of one leaf (vectors, subarray faces, columns): a strided
//!   loop, monomorphised for 1, 2, 4, 8, 12, 16, 24 and 32-byte blocks so
//!   each copy is a couple of register moves; other sizes use an
//!   overlapping-word small copy or `memcpy`;
//! * a `Repeat` of a sequence of leaves (arrays of structs): a gather loop
//!   over the precomputed (offset, length) runs of one item.
//!
//! Direction is a type parameter ([`Pack`], [`Unpack`]), so both directions
//! share one walker and compile to separate specialised code.
//!
//! All functions here are `unsafe`: callers guarantee that every byte the
//! program touches at `mem` is valid for the access (see the bounds check in
//! [`super::check_span`]) and that the stream holds `op.size()` bytes.
//! Pointer offsets use `wrapping_offset`, so intermediate item bases outside
//! the buffer are harmless; only the bytes actually copied must be in bounds.

use std::ptr;

use super::program::Op;

/// A copy direction between user memory and the packed stream.
pub(crate) trait Direction {
    /// Copies `N` bytes between `mem` and `stream`.
    unsafe fn copy_fixed<const N: usize>(mem: *mut u8, stream: *mut u8);
    /// Copies `len` bytes between `mem` and `stream`.
    unsafe fn copy(mem: *mut u8, stream: *mut u8, len: usize);
}

/// Memory to stream.
pub(crate) struct Pack;
/// Stream to memory.
pub(crate) struct Unpack;

impl Direction for Pack {
    #[inline(always)]
    unsafe fn copy_fixed<const N: usize>(mem: *mut u8, stream: *mut u8) {
        ptr::copy_nonoverlapping(mem, stream, N)
    }
    #[inline(always)]
    unsafe fn copy(mem: *mut u8, stream: *mut u8, len: usize) {
        copy_bytes(mem, stream, len)
    }
}

impl Direction for Unpack {
    #[inline(always)]
    unsafe fn copy_fixed<const N: usize>(mem: *mut u8, stream: *mut u8) {
        ptr::copy_nonoverlapping(stream, mem, N)
    }
    #[inline(always)]
    unsafe fn copy(mem: *mut u8, stream: *mut u8, len: usize) {
        copy_bytes(stream, mem, len)
    }
}

/// Copies `len` bytes between non-overlapping buffers; short copies use two
/// possibly overlapping word moves instead of a call.
#[inline(always)]
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    macro_rules! two_words {
        ($t:ty) => {{
            let w = std::mem::size_of::<$t>();
            let a = ptr::read_unaligned(src as *const $t);
            let b = ptr::read_unaligned(src.add(len - w) as *const $t);
            ptr::write_unaligned(dst as *mut $t, a);
            ptr::write_unaligned(dst.add(len - w) as *mut $t, b);
        }};
    }
    match len {
        0 => {}
        1 => *dst = *src,
        2..=3 => two_words!(u16),
        4..=7 => two_words!(u32),
        8..=16 => two_words!(u64),
        17..=32 => two_words!(u128),
        _ => ptr::copy_nonoverlapping(src, dst, len),
    }
}

/// Runs `op` with the type's origin at `mem`; returns the stream position
/// after the copied bytes.
pub(crate) unsafe fn run<D: Direction>(op: &Op, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    match op {
        Op::Leaf { len, .. } => {
            D::copy(mem, stream, *len);
            stream.add(*len)
        }
        Op::Repeat { count, stride, body } => repeat::<D>(body, *count, *stride, mem, stream),
        Op::Seq(items) => {
            let mut s = stream;
            for (d, op) in items {
                s = run::<D>(op, mem.wrapping_offset(*d as isize), s);
            }
            s
        }
    }
}

/// Runs `count` copies of `body`, `stride` bytes apart (also how `count`
/// items of a type are processed, with the type's extent as stride).
pub(crate) unsafe fn repeat<D: Direction>(body: &Op, count: u64, stride: i64, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    match body {
        _ if count == 1 => run::<D>(body, mem, stream),
        Op::Leaf { len, .. } if stride == *len as i64 => {
            let n = len * count as usize;
            D::copy(mem, stream, n);
            stream.add(n)
        }
        Op::Leaf { len, .. } => strided::<D>(mem, stream, count, stride, *len),
        Op::Seq(items) if items.iter().all(|(_, op)| matches!(op, Op::Leaf { .. })) => {
            gather::<D>(mem, stream, count, stride, items)
        }
        body => {
            let mut s = stream;
            for i in 0..count {
                s = run::<D>(body, mem.wrapping_offset(i as isize * stride as isize), s);
            }
            s
        }
    }
}

#[inline(always)]
unsafe fn strided_fixed<D: Direction, const N: usize>(mem: *mut u8, stream: *mut u8, count: u64, stride: isize) -> *mut u8 {
    let mut m = mem;
    let mut s = stream;
    for _ in 0..count {
        D::copy_fixed::<N>(m, s);
        m = m.wrapping_offset(stride);
        s = s.add(N);
    }
    s
}

unsafe fn strided<D: Direction>(mem: *mut u8, stream: *mut u8, count: u64, stride: i64, len: usize) -> *mut u8 {
    let stride = stride as isize;
    match len {
        1 => strided_fixed::<D, 1>(mem, stream, count, stride),
        2 => strided_fixed::<D, 2>(mem, stream, count, stride),
        4 => strided_fixed::<D, 4>(mem, stream, count, stride),
        8 => strided_fixed::<D, 8>(mem, stream, count, stride),
        12 => strided_fixed::<D, 12>(mem, stream, count, stride),
        16 => strided_fixed::<D, 16>(mem, stream, count, stride),
        24 => strided_fixed::<D, 24>(mem, stream, count, stride),
        32 => strided_fixed::<D, 32>(mem, stream, count, stride),
        _ => {
            let mut m = mem;
            let mut s = stream;
            for _ in 0..count {
                D::copy(m, s, len);
                m = m.wrapping_offset(stride);
                s = s.add(len);
            }
            s
        }
    }
}

unsafe fn gather<D: Direction>(mem: *mut u8, stream: *mut u8, count: u64, stride: i64, items: &[(i64, Op)]) -> *mut u8 {
    let runs: Vec<(isize, usize)> = items
        .iter()
        .map(|(d, op)| match op {
            Op::Leaf { len, .. } => (*d as isize, *len),
            _ => unreachable!("gather is only called on sequences of leaves"),
        })
        .collect();
    let mut m = mem;
    let mut s = stream;
    for _ in 0..count {
        for &(d, len) in &runs {
            D::copy(m.wrapping_offset(d), s, len);
            s = s.add(len);
        }
        m = m.wrapping_offset(stride as isize);
    }
    s
}

/// Runs `op` but copies at most `*budget` stream bytes, stopping mid-leaf if
/// needed (the last, partial item of a short message). Decrements `budget`.
pub(crate) unsafe fn run_bounded<D: Direction>(op: &Op, mem: *mut u8, stream: *mut u8, budget: &mut usize) -> *mut u8 {
    if *budget == 0 {
        return stream;
    }
    match op {
        Op::Leaf { len, .. } => {
            let n = (*len).min(*budget);
            D::copy(mem, stream, n);
            *budget -= n;
            stream.add(n)
        }
        Op::Repeat { count, stride, body } => {
            let mut s = stream;
            for i in 0..*count {
                if *budget == 0 {
                    break;
                }
                s = run_bounded::<D>(body, mem.wrapping_offset(i as isize * *stride as isize), s, budget);
            }
            s
        }
        Op::Seq(items) => {
            let mut s = stream;
            for (d, op) in items {
                if *budget == 0 {
                    break;
                }
                s = run_bounded::<D>(op, mem.wrapping_offset(*d as isize), s, budget);
            }
            s
        }
    }
}
