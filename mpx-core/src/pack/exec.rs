//! The native pack/unpack executor.
//!
//! [`run`] walks a [`Native`] program (see [`super::program`]) once per
//! call; [`repeat`] runs `count` copies of one, which is also how `count`
//! items of a type are processed (with the type's extent as stride). The
//! walk dispatches only on `Repeat` and `Seq` nodes, never per element: the
//! bytes are moved by the kernels of the [`Gather`] leaves, each a tight
//! loop over all the items of a repeat, chosen by the gather's [`Plan`]:
//! * a single run whose items are adjacent (a contiguous type, or an array
//!   of one) is one `memcpy`;
//! * [`Plan::Run`]: one run of a given length per item (vector blocks, face
//!   elements): a loop monomorphised for that length, so an item is the
//!   fewest loads and stores the compiler can make of it (12 bytes are an
//!   8-byte and a 4-byte move). Packing 8-byte runs, two items share one
//!   16-byte store (stores, not loads, bound a strided gather), four items
//!   per iteration. On x86_64, every other item of an array of 4- or
//!   8-byte items (stride twice the item, 32 items or more) moves 64
//!   stream bytes at a time with AVX-512 masked loads or stores and
//!   permutations, where the processor has them ([`alternate_items`]);
//!   items of 4 or 8 bytes 512 or more bytes apart (a column of a large
//!   matrix) move one per iteration of a loop that is not unrolled, so the
//!   processor's stride prefetcher sees their true stride
//!   ([`scattered_items`]). Long runs (a face's rows, [`long_runs`]) call
//!   `memcpy` directly, after asking for the first cache line of the next
//!   run, whose miss then overlaps the copy; unpacked runs of 0.5-2 KiB use `rep movsb`, which (on the
//!   processors where it is used) writes whole destination lines without
//!   first reading them, except where the destination is just ahead of
//!   the source modulo 4 KiB ([`copy_string`]);
//! * [`Plan::Moves`]: a few precomputed moves per item (arrays of structs):
//!   `K` moves of `W` bytes, or `K` of `W` and `J` of `V` bytes, in loops
//!   monomorphised for each width and count, so an item is a fixed sequence
//!   of load/store pairs. Items with moves of three or more widths run one
//!   width at a time over blocks of [`BLOCK`] items, still in L1 cache for
//!   the later widths: a kernel per (width, count) rather than per mix;
//! * [`Plan::Overlap`]: many runs of similar lengths (irregular indexed
//!   types), each covered by the same `K` overlapping `W`-byte moves at
//!   offsets `min(i * W, len - W)`: branch-free, so no mispredicted length
//!   tests;
//! * [`Plan::Bytes`]: other runs, each with [`copy_bytes`] (`memcpy` for
//!   long ones).
//!
//! Every kernel touches exactly the typemap's bytes in memory and exactly
//! the items' bytes in the stream: moves may overlap each other inside a
//! run but never leave it, and masked vector accesses touch only their
//! unmasked lanes, so nothing else is read or written, not even
//! temporarily (the bytes between runs may be another thread's, unmapped,
//! or uninitialised padding). Prefetch hints are not accesses: they may name
//! any address, and never fault or change memory.
//!
//! Direction is a type parameter ([`Pack`], [`Unpack`]), so both directions
//! share one walker and compile to separate specialised code.
//!
//! The kernels and walkers here are `unsafe`: callers guarantee that every
//! byte the program touches at `mem` is valid for the access (see the bounds
//! check in [`super::check_span`]) and that the stream holds the bytes
//! copied.
//! Pointer offsets into memory use `wrapping_offset`, so intermediate item
//! bases outside the buffer are harmless; only the bytes actually copied
//! must be in bounds.

use std::ptr;

#[cfg(target_arch = "x86_64")]
use super::copy::aliases_4k;
use super::copy::copy_raw;
use super::program::{Gather, Moves, Native, Plan};

/// A copy direction between user memory and the packed stream.
pub(crate) trait Direction {
    /// Copies `N` bytes between `mem` and `stream`.
    unsafe fn copy_fixed<const N: usize>(mem: *mut u8, stream: *mut u8);
    /// Copies `len` bytes between `mem` and `stream`.
    unsafe fn copy(mem: *mut u8, stream: *mut u8, len: usize);
    /// Copies `len` bytes between `mem` and `stream` with `memcpy`, for
    /// runs known to be long.
    unsafe fn copy_long(mem: *mut u8, stream: *mut u8, len: usize);
    /// Whether the copies write user memory (unpacking).
    const TO_MEMORY: bool;
    /// Copies 8 bytes at `mem0` and 8 at `mem1` to or from 16 at `stream`.
    #[inline(always)]
    unsafe fn copy_pair8(mem0: *mut u8, mem1: *mut u8, stream: *mut u8) {
        // SAFETY: the caller guarantees 8 bytes at `mem0` and at `mem1` and 16 at
        // `stream`, valid for this direction's accesses.
        unsafe {
            Self::copy_fixed::<8>(mem0, stream);
            Self::copy_fixed::<8>(mem1, stream.add(8));
        }
    }
}

/// Memory to stream.
pub(crate) struct Pack;
/// Stream to memory.
pub(crate) struct Unpack;

impl Direction for Pack {
    const TO_MEMORY: bool = false;
    #[inline(always)]
    unsafe fn copy_fixed<const N: usize>(mem: *mut u8, stream: *mut u8) {
        // SAFETY: the caller guarantees `N` readable bytes at `mem` and `N`
        // writable ones at `stream`, in separate buffers.
        unsafe {
            ptr::copy_nonoverlapping(mem, stream, N)
        }
    }
    #[inline(always)]
    unsafe fn copy(mem: *mut u8, stream: *mut u8, len: usize) {
        // SAFETY: the caller guarantees `len` readable bytes at `mem` and `len`
        // writable ones at `stream`, in separate buffers.
        unsafe {
            copy_bytes(mem, stream, len)
        }
    }
    #[inline(always)]
    unsafe fn copy_long(mem: *mut u8, stream: *mut u8, len: usize) {
        // SAFETY: as for `copy`.
        unsafe {
            copy_raw(mem, stream, len)
        }
    }
    /// One 16-byte store rather than two 8-byte ones: stores, not loads,
    /// limit a strided gather. The compiler does not merge the two halves
    /// by itself; SSE2 is part of x86_64.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn copy_pair8(mem0: *mut u8, mem1: *mut u8, stream: *mut u8) {
        // SAFETY: SSE2 is part of x86_64; the caller guarantees 8 readable bytes
        // at `mem0` and at `mem1` and 16 writable ones at `stream`, which these
        // unaligned loads and store access exactly.
        unsafe {
            use std::arch::x86_64::{__m128i, _mm_loadl_epi64, _mm_storeu_si128, _mm_unpacklo_epi64};
            let a = _mm_loadl_epi64(mem0 as *const __m128i);
            let b = _mm_loadl_epi64(mem1 as *const __m128i);
            _mm_storeu_si128(stream as *mut __m128i, _mm_unpacklo_epi64(a, b));
        }
    }
}

impl Direction for Unpack {
    const TO_MEMORY: bool = true;
    #[inline(always)]
    unsafe fn copy_fixed<const N: usize>(mem: *mut u8, stream: *mut u8) {
        // SAFETY: the caller guarantees `N` readable bytes at `stream` and `N`
        // writable ones at `mem`, in separate buffers.
        unsafe {
            ptr::copy_nonoverlapping(stream, mem, N)
        }
    }
    #[inline(always)]
    unsafe fn copy(mem: *mut u8, stream: *mut u8, len: usize) {
        // SAFETY: the caller guarantees `len` readable bytes at `stream` and `len`
        // writable ones at `mem`, in separate buffers.
        unsafe {
            copy_bytes(stream, mem, len)
        }
    }
    #[inline(always)]
    unsafe fn copy_long(mem: *mut u8, stream: *mut u8, len: usize) {
        // SAFETY: as for `copy`.
        unsafe {
            copy_raw(stream, mem, len)
        }
    }
}

/// Run lengths that unpacking moves with [`copy_string`] where
/// [`fast_string_moves`] holds: below, the instruction's start-up cost
/// dominates; from about 2 KiB on, glibc's `memcpy` switches to it by
/// itself on such processors.
#[cfg(target_arch = "x86_64")]
const STRING_MOVE_RUNS: std::ops::Range<usize> = 512..2048;

/// Whether the processor has fast short string moves (CPUID FSRM, with
/// ERMS), the processors [`copy_string`] was measured on. Checked once.
#[cfg(target_arch = "x86_64")]
fn fast_string_moves() -> bool {
    static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FAST.get_or_init(|| {
        // CPUID leaf 7 exists wherever the ERMS bit (leaf 7, EBX bit 9) is
        // found, and FSRM is leaf 7, EDX bit 4 (where leaf 7 does not exist,
        // the result is not used).
        #[allow(unused_unsafe)]
        // SAFETY: every x86_64 processor has the CPUID instruction, which
        // only reads identification registers.
        let leaf7 = unsafe { std::arch::x86_64::__cpuid_count(7, 0) };
        std::is_x86_feature_detected!("ermsb") && leaf7.edx & (1 << 4) != 0
    })
}

/// Copies `len > 64` bytes between non-overlapping buffers, normally with
/// `rep movsb`, for a destination that is likely not in cache (a row of a
/// face, far from the previous row, being unpacked).
///
/// A vector copy (what `memcpy` does for these lengths) reads every
/// destination line before overwriting it. On the processor the benchmarks
/// ran on (AMD EPYC, FSRM), `rep movsb` from a 64-byte aligned destination
/// does not: the first 64 bytes are copied by hand and the rest from the
/// next line boundary. Unpacking the scattered 1 KiB rows of a cube face
/// gains 15-30% this way.
///
/// Where the destination is less than [`ALIASING_WINDOW`](super::copy::ALIASING_WINDOW) bytes ahead of
/// the source modulo 4 KiB, `rep movsb` slows down up to fourfold (its
/// loads wait on its own earlier stores to the same page offset, "4K
/// aliasing"), so such copies go to `memcpy` instead, which moves these
/// lengths (under 2 KiB) with vector registers at full speed whatever the
/// distance (1 KiB rows copied a line at a time ran at 61 GB/s against
/// `memcpy`'s 76).
///
/// # Safety
/// `len > 64` bytes at `src` are readable, `len` bytes at `dst` writable,
/// and the two ranges do not overlap.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn copy_string(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller guarantees `len > 64` readable bytes at `src` and
    // `len` writable ones at `dst`, not overlapping; see below for each access.
    unsafe {
        debug_assert!(len > 64);
        if aliases_4k(src, dst) {
            // SAFETY: the caller's guarantees.
            return ptr::copy_nonoverlapping(src, dst, len);
        }
        // SAFETY (here and for the asm): the caller guarantees that `len` bytes
        // at `src` are readable, `len` bytes at `dst` writable, and that the
        // two do not overlap; the first 64 are within them since `len > 64`.
        ptr::copy_nonoverlapping(src, dst, 64);
        let skip = 64 - (dst as usize % 64);
        // `skip <= 64 < len`, so both ranges below stay inside those bytes (the
        // bytes between `skip` and 64 are written twice, with the same values).
        // `rep movsb` moves `rcx` bytes from `rsi` to `rdi` upwards (Rust keeps
        // the direction flag clear), changes no flags and touches nothing else;
        // the three registers are declared clobbered.
        std::arch::asm!(
            "rep movsb",
            inout("rcx") len - skip => _,
            inout("rsi") src.add(skip) => _,
            inout("rdi") dst.add(skip) => _,
            options(nostack, preserves_flags),
        );
    }
}

/// Copies `len` bytes between non-overlapping buffers; short copies use two
/// possibly overlapping word moves instead of a call.
#[inline(always)]
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller guarantees `len` readable bytes at `src` and `len`
    // writable ones at `dst`, not overlapping. Each arm accesses only those:
    // for a length in `w..=2w` the two `w`-byte words at 0 and `len - w` lie
    // inside it (overlapping each other, not its ends).
    unsafe {
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
            _ => copy_raw(src, dst, len),
        }
    }
}

/// Runs `op` with the type's origin at `mem`; returns the stream position
/// after the copied bytes.
pub(crate) unsafe fn run<D: Direction>(op: &Native, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    // SAFETY: the caller guarantees every byte `op` touches at `mem` and the
    // stream bytes it copies (see the module docs); each child below runs at
    // its displacement inside the same item.
    unsafe {
        match op {
            Native::Gather(g) => gather::<D>(g, 1, 0, mem, stream),
            Native::Repeat { count, stride, body } => repeat::<D>(body, *count, *stride, mem, stream),
            Native::Seq(items) => {
                let mut s = stream;
                for (d, op) in items.iter() {
                    s = run::<D>(op, mem.wrapping_offset(*d as isize), s);
                }
                s
            }
        }
    }
}

/// Runs `count` copies of `body`, `stride` bytes apart (also how `count`
/// items of a type are processed, with the type's extent as stride).
pub(crate) unsafe fn repeat<D: Direction>(body: &Native, count: u64, stride: i64, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    // SAFETY: the caller guarantees `count` copies of `body`, `stride` bytes
    // apart from `mem`, and their packed bytes at `stream`; each runs below.
    unsafe {
        match body {
            _ if count == 1 => run::<D>(body, mem, stream),
            Native::Gather(g) => gather::<D>(g, count, stride, mem, stream),
            body => {
                let (mut m, mut s) = (mem, stream);
                for _ in 0..count {
                    s = run::<D>(body, m, s);
                    m = m.wrapping_offset(stride as isize);
                }
                s
            }
        }
    }
}

/// Runs `count` items of a gather, `stride` bytes apart.
unsafe fn gather<D: Direction>(g: &Gather, count: u64, stride: i64, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    // SAFETY: the caller guarantees the bytes of `count` items at `mem`, `stride`
    // apart, and their packed bytes at `stream` (see the module docs); every
    // kernel below moves exactly the items' run bytes and `count * g.size`
    // stream bytes.
    unsafe {
        if count == 0 {
            return stream;
        }
        if let Some((off, len)) = g.single_run() {
            if count == 1 || stride == len as i64 {
                // One contiguous block of items: a single copy.
                let n = len * count as usize;
                D::copy(mem.wrapping_offset(off as isize), stream, n);
                return stream.add(n);
            }
        }
        let stride = stride as isize;
        match &g.plan {
            &Plan::Run { offset, len } => run_kernel::<D>(len, count, stride, mem.wrapping_offset(offset as isize), stream),
            Plan::Moves(groups) => match &**groups {
                [group] => moves::<D>(group, g.size, count, stride, mem, stream),
                [wide, narrow] if wide.moves.len() <= 4 && narrow.moves.len() <= 2 => {
                    moves2::<D>(wide, narrow, g.size, count, stride, mem, stream)
                }
                groups => {
                    let (mut m, mut s, mut left) = (mem, stream, count);
                    while left > 0 {
                        let n = left.min(BLOCK);
                        for group in groups {
                            moves::<D>(group, g.size, n, stride, m, s);
                        }
                        m = m.wrapping_offset(n as isize * stride);
                        s = s.add(n as usize * g.size);
                        left -= n;
                    }
                    s
                }
            },
            &Plan::Overlap { width, k } => overlap::<D>(width, k, &g.runs, count, stride, mem, stream),
            Plan::Bytes => {
                let mut s = stream;
                for i in 0..count as isize {
                    let m = mem.wrapping_offset(i * stride);
                    for &(off, len) in g.runs.iter() {
                        D::copy(m.wrapping_offset(off as isize), s, len);
                        s = s.add(len);
                    }
                }
                s
            }
        }
    }
}

/// [`Plan::Run`]: one run of `len` bytes per item.
unsafe fn run_kernel<D: Direction>(len: usize, count: u64, stride: isize, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    // SAFETY: the caller guarantees `count` runs of `len` bytes at `mem`,
    // `stride` apart, and `count * len` stream bytes; the kernels move those.
    unsafe {
        macro_rules! lengths {
            ($($n:literal)*) => {
                match len {
                    $($n => run_loop::<D, $n>(count, stride, mem, stream),)*
                    _ => long_runs::<D>(len, count, stride, mem, stream),
                }
            };
        }
        lengths!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 40 48 56 64)
    }
}

/// Long runs (a face's rows), one `memcpy` each, or, unpacking runs of
/// [`STRING_MOVE_RUNS`] on processors with fast string moves, one
/// [`copy_string`] each (which of the two is decided once per call).
///
/// Not inlined: inside [`gather`] the loop's cursors lived on the stack,
/// and reloading one right after each `rep movsb` made unpacking a cube
/// face about 5% slower than the same loop written in C.
#[inline(never)]
unsafe fn long_runs<D: Direction>(len: usize, count: u64, stride: isize, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    // SAFETY: as for `run_kernel`; `copy_string` gets runs of more than 64
    // bytes (`STRING_MOVE_RUNS`) in separate buffers.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        if D::TO_MEMORY && STRING_MOVE_RUNS.contains(&len) && fast_string_moves() {
            return each_long_run(len, count, stride, mem, stream, |m, s| copy_string(s, m, len));
        }
        each_long_run(len, count, stride, mem, stream, |m, s| D::copy_long(m, s, len))
    }
}

/// Runs `copy(mem, stream)` for `count` runs of `len` bytes. A run far
/// from the last one starts with a cache miss that the copy waits for: the
/// hardware prefetcher has not seen that stream yet. So the first line of
/// the next run is requested before the current one is copied, and its
/// latency overlaps the copy (about 15% for the rows of a cube face). More
/// lines than the first gain nothing: the prefetcher follows the run from
/// there.
#[inline(always)]
unsafe fn each_long_run(
    len: usize,
    count: u64,
    stride: isize,
    mem: *mut u8,
    stream: *mut u8,
    copy: impl Fn(*mut u8, *mut u8),
) -> *mut u8 {
    // SAFETY: the caller guarantees `count` runs of `len` bytes at `mem`,
    // `stride` apart, and `count * len` stream bytes, which `copy` moves one
    // run at a time; the prefetch hint accesses nothing.
    unsafe {
        let (mut m, mut s) = (mem, stream);
        for _ in 0..count {
            let next = m.wrapping_offset(stride);
            prefetch(next);
            copy(m, s);
            m = next;
            s = s.add(len);
        }
        s
    }
}

/// Hints that the cache line holding `p` will be used soon. A hint only:
/// it never faults and reads or writes nothing, whatever the address.
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no architectural effect and cannot fault.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Copies `N` bytes per item: the compiler turns the copy into the fewest
/// loads and stores (12 bytes are an 8-byte and a 4-byte move). On x86_64,
/// 4- and 8-byte items [`SCATTERED_STRIDE`] or more apart go to
/// [`scattered_items`] instead, and [`ALTERNATE_MIN_COUNT`] or more of them
/// exactly two item sizes apart (stride `+2N`) to [`alternate_items`] where
/// the processor has AVX-512F.
unsafe fn run_loop<D: Direction, const N: usize>(count: u64, stride: isize, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    // SAFETY: the caller guarantees `count` items of `N` bytes at `mem`,
    // `stride` apart, and `count * N` stream bytes; each move below copies
    // one or two of those items, and the specialised loops move the same.
    // `alternate_items` needs AVX-512F, checked by `has_avx512f`.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        if (N == 4 || N == 8) && stride.unsigned_abs() >= SCATTERED_STRIDE {
            return scattered_items::<D, N>(count, stride, mem, stream);
        }
        #[cfg(target_arch = "x86_64")]
        if (N == 4 || N == 8) && stride == 2 * N as isize && count >= ALTERNATE_MIN_COUNT && has_avx512f() {
            // (Named per width: only these two widths are instantiated.)
            return if N == 4 { alternate_items::<D, 4>(count, mem, stream) } else { alternate_items::<D, 8>(count, mem, stream) };
        }
        let mut m = mem;
        let mut s = stream;
        let mut count = count;
        if N == 8 {
            // Two items per 16-byte stream access, two accesses per iteration
            // (the loop's own counting was a third of its instructions), then
            // one pair if two items are left. (Written out: the same loop with
            // the pair step as a closure compiled to a slower loop, 0.93-0.95
            // of the hand-written one against 0.96-1.02.)
            while count >= 4 {
                let [m1, m2, m3] = [1, 2, 3].map(|k| m.wrapping_offset(k * stride));
                D::copy_pair8(m, m1, s);
                D::copy_pair8(m2, m3, s.add(16));
                m = m3.wrapping_offset(stride);
                s = s.add(32);
                count -= 4;
            }
            if count >= 2 {
                let m1 = m.wrapping_offset(stride);
                D::copy_pair8(m, m1, s);
                m = m1.wrapping_offset(stride);
                s = s.add(16);
                count -= 2;
            }
        }
        for _ in 0..count {
            D::copy_fixed::<N>(m, s);
            m = m.wrapping_offset(stride);
            s = s.add(N);
        }
        s
    }
}

/// Strides (in bytes) from which 4- and 8-byte items move in
/// [`scattered_items`]: eight of them, what one load instruction of the
/// compiler's unrolled loop steps over, span more than a 4 KiB page.
#[cfg(target_arch = "x86_64")]
const SCATTERED_STRIDE: usize = 512;

/// [`run_loop`] for 4- and 8-byte items [`SCATTERED_STRIDE`] or more
/// apart (a column of a large matrix, an x face of a cube): one load and
/// one store per item in a loop that is not unrolled.
///
/// Each item is a cache miss, so the loop runs at the pace of the
/// processor's stride prefetcher, which learns the stride of each load
/// instruction. Unrolled by 8, as the compiler does, each load instruction
/// sees 8 strides, which for a 1 KiB stride is past the 4 KiB page the
/// prefetcher stays within: packing a cube's x face (1 KiB stride) ran at
/// 0.86 of a plain C loop that way, and at 0.95-1.05 of it in this loop.
/// Unpacking, where the strided accesses are stores, measured the same in
/// both loops (0.98 of the C loop). Shorter strides keep the unrolled loop
/// (or [`alternate_items`]). The loop is written in assembly because
/// nothing else stops the compiler from unrolling it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn scattered_items<D: Direction, const N: usize>(count: u64, stride: isize, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    // SAFETY: see the comment at the loop.
    unsafe {
        if count == 0 {
            return stream;
        }
        let (src, src_step, dst, dst_step) =
            if D::TO_MEMORY { (stream, N as isize, mem, stride) } else { (mem, stride, stream, N as isize) };
        // SAFETY: the caller guarantees `count` items of `N` bytes at `mem`,
        // `stride` apart, and `count * N` bytes at `stream`; the loop moves
        // exactly those, and `count > 0` for its `dec`/`jnz`.
        macro_rules! moves {
            ($load:literal, $store:literal) => {
                std::arch::asm!(
                    ".p2align 5",
                    "2:",
                    $load,
                    $store,
                    "add {src}, {src_step}",
                    "add {dst}, {dst_step}",
                    "dec {n}",
                    "jnz 2b",
                    src = inout(reg) src => _,
                    dst = inout(reg) dst => _,
                    src_step = in(reg) src_step,
                    dst_step = in(reg) dst_step,
                    n = inout(reg) count => _,
                    t = out(reg) _,
                    options(nostack),
                )
            };
        }
        if N == 8 {
            moves!("mov {t}, qword ptr [{src}]", "mov qword ptr [{dst}], {t}");
        } else {
            moves!("mov {t:e}, dword ptr [{src}]", "mov dword ptr [{dst}], {t:e}");
        }
        stream.add(count as usize * N)
    }
}

/// Whether the processor has AVX-512F (the masked loads and stores of
/// [`alternate_items`]). Checked once.
#[cfg(target_arch = "x86_64")]
fn has_avx512f() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| std::is_x86_feature_detected!("avx512f"))
}

/// Items from which [`alternate_items`] is used: below, the 64-byte steps
/// leave most items to the scalar tail.
#[cfg(target_arch = "x86_64")]
const ALTERNATE_MIN_COUNT: u64 = 32;

/// [`run_loop`] for every other item of an array of 4- or 8-byte items (a
/// vector of stride 2: the real parts of complex numbers, one colour of a
/// red-black ordering), on processors with AVX-512F.
///
/// Each step moves one 64-byte stream block, which holds the items of two
/// 64-byte memory blocks: packing, two masked block loads and one
/// two-source permutation; unpacking, one load, two permutations and two
/// masked block stores. The scalar loops need a load and a store per item
/// or pair (16 or 8 per block). A few single items first align the memory
/// blocks to cache lines where the items' grid allows (glibc's large
/// blocks start 16 bytes into a line), so that the two memory accesses of
/// a step do not straddle lines.
///
/// Masked-out lanes are neither read nor written and never fault (AVX-512
/// fault suppression), so only the items' bytes are accessed, as every
/// kernel here promises: the gaps may be another thread's or unmapped.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn alternate_items<D: Direction, const N: usize>(count: u64, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    // SAFETY: the caller guarantees `count` items of `N` bytes at `mem`, every
    // other `N` bytes, and `count * N` stream bytes, and that the processor
    // has AVX-512F. Masked accesses touch only their unmasked lanes (the
    // items; masked-out lanes never fault); the stream accesses are whole
    // 64-byte blocks of the `count * N` bytes.
    unsafe {
        use std::arch::x86_64::{
            _mm512_loadu_epi32, _mm512_mask_storeu_epi32, _mm512_maskz_loadu_epi32, _mm512_permutex2var_epi32,
            _mm512_permutexvar_epi32, _mm512_storeu_epi32,
        };
        /// 4-byte lanes per item; an item and its gap are `2 * L` lanes.
        const fn lanes(n: usize) -> usize {
            n / 4
        }
        /// The lanes of a memory line that hold items (not gaps).
        const fn item_mask(n: usize) -> u16 {
            let mut mask = 0;
            let mut p = 0;
            while p < 16 {
                if p % (2 * lanes(n)) < lanes(n) {
                    mask |= 1 << p;
                }
                p += 1;
            }
            mask
        }
        /// Packing: stream lane `j` comes from lane `gather[j]` of two memory
        /// lines taken as one 32-lane vector.
        const fn gather_lanes(n: usize) -> [i32; 16] {
            let mut idx = [0; 16];
            let mut j = 0;
            while j < 16 {
                idx[j] = ((j / lanes(n)) * 2 * lanes(n) + j % lanes(n)) as i32;
                j += 1;
            }
            idx
        }
        /// Unpacking: lane `p` of the first memory line comes from stream lane
        /// `scatter[p]` (masked lanes take any); the second line's from 8 more.
        const fn scatter_lanes(n: usize) -> [i32; 16] {
            let mut idx = [0; 16];
            let mut p = 0;
            while p < 16 {
                idx[p] = ((p / (2 * lanes(n))) * lanes(n) + p % lanes(n)) as i32;
                p += 1;
            }
            idx
        }
        let mask = const { item_mask(N) };
        let items_per_step = 64 / N;
        let (mut m, mut s) = (mem, stream);
        // Single items up to a line boundary of memory where one is on the
        // items' grid (memory has two accesses per step, the stream one).
        let singles = |n: usize, (mut m, mut s): (*mut u8, *mut u8)| {
            for _ in 0..n {
                D::copy_fixed::<N>(m, s);
                m = m.wrapping_add(2 * N);
                s = s.add(N);
            }
            (m, s)
        };
        let misalignment = m as usize % 64;
        let head = if misalignment.is_multiple_of(2 * N) { (64 - misalignment) % 64 / (2 * N) } else { 0 };
        (m, s) = singles(head, (m, s));
        let count = count as usize - head;
        let steps = count / items_per_step;
        if D::TO_MEMORY {
            let first = _mm512_loadu_epi32(const { scatter_lanes(N) }.as_ptr());
            let second = _mm512_loadu_epi32(const { scatter_lanes(N) }.map(|i| i + 8).as_ptr());
            for _ in 0..steps {
                let v = _mm512_loadu_epi32(s as *const i32);
                _mm512_mask_storeu_epi32(m as *mut i32, mask, _mm512_permutexvar_epi32(first, v));
                _mm512_mask_storeu_epi32(m.wrapping_add(64) as *mut i32, mask, _mm512_permutexvar_epi32(second, v));
                m = m.wrapping_add(128);
                s = s.add(64);
            }
        } else {
            let idx = _mm512_loadu_epi32(const { gather_lanes(N) }.as_ptr());
            for _ in 0..steps {
                let a = _mm512_maskz_loadu_epi32(mask, m as *const i32);
                let b = _mm512_maskz_loadu_epi32(mask, m.wrapping_add(64) as *const i32);
                _mm512_storeu_epi32(s as *mut i32, _mm512_permutex2var_epi32(a, idx, b));
                m = m.wrapping_add(128);
                s = s.add(64);
            }
        }
        singles(count % items_per_step, (m, s)).1
    }
}

/// Expands `$kernel!(W)` for the move width `$width`: the one place that
/// lists the widths a plan's moves have (1, 2, 4, 8 and 16 bytes).
macro_rules! for_move_width {
    ($width:expr, $kernel:ident) => {
        match $width {
            1 => $kernel!(1),
            2 => $kernel!(2),
            4 => $kernel!(4),
            8 => $kernel!(8),
            16 => $kernel!(16),
            w => unreachable!("no kernel for {w}-byte moves"),
        }
    };
}

/// Items per block when a [`Plan::Moves`] item has moves of three or more
/// widths (a few KiB for small structs).
const BLOCK: u64 = 128;

/// Runs the moves of one width of `count` items, `stride` bytes apart, with
/// `size` stream bytes per item.
unsafe fn moves<D: Direction>(group: &Moves, size: usize, count: u64, stride: isize, mem: *mut u8, stream: *mut u8) -> *mut u8 {
    // SAFETY: the caller guarantees `count` items at `mem`, `stride` apart,
    // holding the bytes of `group`'s moves, and `count * size` stream bytes.
    unsafe {
        macro_rules! of_width {
            ($w:literal) => {
                match group.moves.len() {
                    1 => moves_loop::<D, $w, 1, 1, 0>(&group.moves, &[], size, count, stride, mem, stream),
                    2 => moves_loop::<D, $w, 2, 1, 0>(&group.moves, &[], size, count, stride, mem, stream),
                    3 => moves_loop::<D, $w, 3, 1, 0>(&group.moves, &[], size, count, stride, mem, stream),
                    4 => moves_loop::<D, $w, 4, 1, 0>(&group.moves, &[], size, count, stride, mem, stream),
                    6 => moves_loop::<D, $w, 6, 1, 0>(&group.moves, &[], size, count, stride, mem, stream),
                    8 => moves_loop::<D, $w, 8, 1, 0>(&group.moves, &[], size, count, stride, mem, stream),
                    k => unreachable!("no kernel for {k} moves"),
                }
            };
        }
        for_move_width!(group.width, of_width)
    }
}

/// Runs the moves of an item with two widths, up to four wide and two
/// narrow ones, in one pass.
unsafe fn moves2<D: Direction>(
    wide: &Moves,
    narrow: &Moves,
    size: usize,
    count: u64,
    stride: isize,
    mem: *mut u8,
    stream: *mut u8,
) -> *mut u8 {
    // SAFETY: as for `moves`, with both groups' moves.
    unsafe {
        macro_rules! of_widths {
            ($w:literal, $v:literal) => {{
                let (a, b) = (&wide.moves, &narrow.moves);
                match (a.len(), b.len()) {
                    (1, 1) => moves_loop::<D, $w, 1, $v, 1>(a, b, size, count, stride, mem, stream),
                    (1, 2) => moves_loop::<D, $w, 1, $v, 2>(a, b, size, count, stride, mem, stream),
                    (2, 1) => moves_loop::<D, $w, 2, $v, 1>(a, b, size, count, stride, mem, stream),
                    (2, 2) => moves_loop::<D, $w, 2, $v, 2>(a, b, size, count, stride, mem, stream),
                    (3, 1) => moves_loop::<D, $w, 3, $v, 1>(a, b, size, count, stride, mem, stream),
                    (3, 2) => moves_loop::<D, $w, 3, $v, 2>(a, b, size, count, stride, mem, stream),
                    (4, 1) => moves_loop::<D, $w, 4, $v, 1>(a, b, size, count, stride, mem, stream),
                    (4, 2) => moves_loop::<D, $w, 4, $v, 2>(a, b, size, count, stride, mem, stream),
                    (k, j) => unreachable!("no kernel for {k} + {j} moves"),
                }
            }};
        }
        match (wide.width, narrow.width) {
            (16, 8) => of_widths!(16, 8),
            (16, 4) => of_widths!(16, 4),
            (16, 2) => of_widths!(16, 2),
            (16, 1) => of_widths!(16, 1),
            (8, 4) => of_widths!(8, 4),
            (8, 2) => of_widths!(8, 2),
            (8, 1) => of_widths!(8, 1),
            (4, 2) => of_widths!(4, 2),
            (4, 1) => of_widths!(4, 1),
            (2, 1) => of_widths!(2, 1),
            (w, v) => unreachable!("no kernel for {w} + {v}-byte moves"),
        }
    }
}

/// [`Plan::Overlap`]: `count` items of `runs`, each run `k` moves of
/// `width` bytes.
unsafe fn overlap<D: Direction>(
    width: usize,
    k: usize,
    runs: &[(i64, usize)],
    count: u64,
    stride: isize,
    mem: *mut u8,
    stream: *mut u8,
) -> *mut u8 {
    // SAFETY: the caller guarantees `count` items of `runs` at `mem`,
    // `stride` apart, and their packed bytes at `stream`.
    unsafe {
        macro_rules! of_width {
            ($w:literal) => {
                match k {
                    1 => overlap_loop::<D, $w, 1>(runs, count, stride, mem, stream),
                    2 => overlap_loop::<D, $w, 2>(runs, count, stride, mem, stream),
                    4 => overlap_loop::<D, $w, 4>(runs, count, stride, mem, stream),
                    8 => overlap_loop::<D, $w, 8>(runs, count, stride, mem, stream),
                    k => unreachable!("no kernel for {k} moves per run"),
                }
            };
        }
        for_move_width!(width, of_width)
    }
}

/// [`Plan::Overlap`]: each run is `K` moves of `W` bytes at run offsets
/// `min(i * W, len - W)` (`W <= len <= K * W`).
unsafe fn overlap_loop<D: Direction, const W: usize, const K: usize>(
    runs: &[(i64, usize)],
    count: u64,
    stride: isize,
    mem: *mut u8,
    stream: *mut u8,
) -> *mut u8 {
    // SAFETY: the caller guarantees `count` items of `runs` at `mem`,
    // `stride` apart, and their packed bytes at `stream`. Each move lies
    // inside its run: `W <= len` and offsets `min(j * W, len - W)`.
    unsafe {
        let mut s = stream;
        for i in 0..count as isize {
            let item = mem.wrapping_offset(i * stride);
            for &(off, len) in runs {
                let m = item.wrapping_offset(off as isize);
                let last = len - W;
                for j in 0..K {
                    let o = (j * W).min(last);
                    D::copy_fixed::<W>(m.wrapping_add(o), s.add(o));
                }
                s = s.add(len);
            }
        }
        s
    }
}

/// [`Plan::Moves`]: each item is `K` moves of `W` bytes and `J` (possibly
/// none) of `V` bytes, (memory offset, stream offset) pairs; `size` stream
/// bytes per item.
#[allow(clippy::too_many_arguments)]
unsafe fn moves_loop<D: Direction, const W: usize, const K: usize, const V: usize, const J: usize>(
    wide: &[(i64, usize)],
    narrow: &[(i64, usize)],
    size: usize,
    count: u64,
    stride: isize,
    mem: *mut u8,
    stream: *mut u8,
) -> *mut u8 {
    // SAFETY: the caller guarantees `count` items at `mem`, `stride` apart,
    // holding the bytes of every move, and `count * size` stream bytes; the
    // loop ends at `stream + count * size`.
    unsafe {
        let wide: [(isize, usize); K] = std::array::from_fn(|i| (wide[i].0 as isize, wide[i].1));
        let narrow: [(isize, usize); J] = std::array::from_fn(|i| (narrow[i].0 as isize, narrow[i].1));
        let mut m = mem;
        let mut s = stream;
        let end = stream.add(size * count as usize);
        // Looping to an end pointer rather than counting keeps the compiler
        // from unrolling into extra address arithmetic per move.
        while s != end {
            for &(mo, so) in &wide {
                D::copy_fixed::<W>(m.wrapping_offset(mo), s.add(so));
            }
            for &(mo, so) in &narrow {
                D::copy_fixed::<V>(m.wrapping_offset(mo), s.add(so));
            }
            m = m.wrapping_offset(stride);
            s = s.add(size);
        }
        s
    }
}

/// Runs `op` but copies at most `*budget` stream bytes, stopping mid-run if
/// needed (the last, partial item of a short message). Decrements `budget`.
pub(crate) unsafe fn run_bounded<D: Direction>(op: &Native, mem: *mut u8, stream: *mut u8, budget: &mut usize) -> *mut u8 {
    // SAFETY: the caller guarantees the bytes one item of `op` touches at
    // `mem` and `*budget` stream bytes; the walk copies at most `*budget`
    // bytes, in stream order.
    unsafe {
        if *budget == 0 {
            return stream;
        }
        match op {
            Native::Gather(g) => {
                let mut s = stream;
                for &(off, len) in g.runs.iter() {
                    if *budget == 0 {
                        break;
                    }
                    let n = len.min(*budget);
                    D::copy(mem.wrapping_offset(off as isize), s, n);
                    *budget -= n;
                    s = s.add(n);
                }
                s
            }
            Native::Repeat { count, stride, body } => {
                let (mut m, mut s) = (mem, stream);
                for _ in 0..*count {
                    if *budget == 0 {
                        break;
                    }
                    s = run_bounded::<D>(body, m, s, budget);
                    m = m.wrapping_offset(*stride as isize);
                }
                s
            }
            Native::Seq(items) => {
                let mut s = stream;
                for (d, op) in items.iter() {
                    if *budget == 0 {
                        break;
                    }
                    s = run_bounded::<D>(op, mem.wrapping_offset(*d as isize), s, budget);
                }
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use super::*;
    use crate::datatype::{Basic, Datatype, Order};
    use crate::error::ErrorKind;
    #[cfg(target_arch = "x86_64")]
    use crate::pack::copy::ALIASING_WINDOW;
    use crate::pack::{Region, RegionMut};

    /// A buffer holding `count` items of `t` with a few bytes of slack on
    /// each side, and the offset of the first item's origin in it.
    fn layout(t: &Datatype, count: u64) -> (usize, usize) {
        let (lo, hi) = data_span(t, count);
        let origin = (3 - lo.min(0)) as usize;
        (origin, (origin as i64 + hi.max(0) + 5) as usize)
    }

    /// The lowest and one past the highest displacement of the data of
    /// `count` items, relative to the first item's origin.
    fn data_span(t: &Datatype, count: u64) -> (i64, i64) {
        let last = count.saturating_sub(1) as i64 * t.extent();
        (t.true_lb() + last.min(0), t.true_lb() + t.true_extent() + last.max(0))
    }

    /// What packing `count` items from `mem` must produce, and what
    /// unpacking that into a buffer of `background` bytes must leave there.
    fn expected(t: &Datatype, count: u64, origin: usize, mem: &[u8], background: u8) -> (Vec<u8>, Vec<u8>) {
        let at = typemap_bytes(t, count, origin);
        let stream = at.iter().map(|&i| mem[i]).collect();
        let mut unpacked = vec![background; mem.len()];
        for &i in &at {
            unpacked[i] = mem[i];
        }
        (stream, unpacked)
    }

    /// Memory offsets of every typemap byte of `count` items, in stream order.
    fn typemap_bytes(t: &Datatype, count: u64, origin: usize) -> Vec<usize> {
        let mut at = Vec::new();
        for i in 0..count as i64 {
            t.for_each_entry(|b: Basic, d| {
                let base = origin as i64 + i * t.extent() + d;
                at.extend((0..b.size() as i64).map(|k| (base + k) as usize));
                ControlFlow::<()>::Continue(())
            });
        }
        at
    }

    fn pattern(len: usize) -> Vec<u8> {
        let mut x = 0x2545_f491u32;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    /// Packs and unpacks `count` items of `t` against the reference given by
    /// the typemap walk: the stream is the typemap's bytes in order, and
    /// unpacking writes those bytes and nothing else.
    fn round_trip(t: &Datatype, count: u64) {
        let (origin, len) = layout(t, count);
        let mem = pattern(len);
        let (expected, want) = expected(t, count, origin, &mem, 0xa5);
        let packed = t.pack_to_vec(Region::with_origin(&mem, origin).unwrap(), count).unwrap();
        assert_eq!(packed, expected, "pack of {count} items");

        let mut out = vec![0xa5u8; len];
        unpack_or_refuse(t, count, &packed, &mut out, origin);
        assert_eq!(out, want, "unpack of {count} items");
    }

    /// Unpacks `count` items of `t` from `packed` into `out` at `origin`:
    /// through `unpack_from` if no byte of the typemap is written twice,
    /// and otherwise checks that `unpack_from` refuses it (MPI makes such a
    /// receive erroneous) and runs the kernels directly, which move such a
    /// typemap's bytes as it says (each copy of a byte holds the same
    /// value in these tests, so the order does not show).
    fn unpack_or_refuse(t: &Datatype, count: u64, packed: &[u8], out: &mut [u8], origin: usize) {
        let mut at = typemap_bytes(t, count, origin);
        at.sort_unstable();
        let mut pos = 0;
        let unpacked = t.unpack_from(packed, &mut pos, RegionMut::with_origin(out, origin).unwrap(), count);
        if at.windows(2).all(|w| w[0] != w[1]) {
            unpacked.unwrap();
            assert_eq!(pos, packed.len());
            return;
        }
        assert!(matches!(unpacked, Err(ref e) if matches!(e.kind(), ErrorKind::Overlap { .. })), "{unpacked:?}");
        assert_eq!(pos, 0);
        // SAFETY: `out` holds `count` items at `origin` (the caller's
        // layout, checked by `unpack_from` before its overlap check), and
        // `packed` their packed bytes, read only.
        unsafe { repeat::<Unpack>(&t.programs().native, count, t.extent(), out.as_mut_ptr().add(origin), packed.as_ptr() as *mut u8) };
    }

    /// `run_bounded` on one item with every budget up to its size: the first
    /// `budget` stream bytes land at (or come from) their typemap places.
    fn bounded(t: &Datatype) {
        let (origin, len) = layout(t, 1);
        let mem = pattern(len);
        let at = typemap_bytes(t, 1, origin);
        let packed: Vec<u8> = at.iter().map(|&i| mem[i]).collect();
        let native = &t.programs().native;
        let budgets: Vec<usize> = if at.len() <= 300 { (0..=at.len()).collect() } else { vec![0, 1, 7, 100, at.len() - 1, at.len()] };
        for b in budgets {
            let mut out = vec![0xa5u8; len];
            let mut budget = b;
            // SAFETY: `out` holds one item at `origin` (`layout`), and
            // `packed` its `at.len() >= b` packed bytes, read only.
            let end = unsafe {
                let s = packed.as_ptr() as *mut u8;
                run_bounded::<Unpack>(native, out.as_mut_ptr().add(origin), s, &mut budget).offset_from(s)
            };
            assert_eq!((end, budget), (b as isize, 0));
            let mut want = vec![0xa5u8; len];
            for &i in &at[..b] {
                want[i] = mem[i];
            }
            assert_eq!(out, want, "bounded unpack of {b} bytes");

            let mut stream = vec![0xa5u8; at.len()];
            let mut budget = b;
            // SAFETY: `mem` holds one item at `origin`, read only; `stream`
            // has room for all of it.
            unsafe { run_bounded::<Pack>(native, mem.as_ptr().add(origin) as *mut u8, stream.as_mut_ptr(), &mut budget) };
            assert_eq!(&stream[..b], &packed[..b]);
            assert!(stream[b..].iter().all(|&x| x == 0xa5), "bounded pack of {b} bytes wrote past its budget");
        }
    }

    fn check(t: &Datatype) {
        for count in [0, 1, 2, 3, 70] {
            round_trip(t, count);
        }
        #[cfg(unix)]
        for count in [1, 3] {
            guarded_round_trip(t, count);
        }
        bounded(t);
    }

    /// `len` bytes flush against an inaccessible page, after them or before
    /// them: an access past that edge faults (the test process dies).
    #[cfg(unix)]
    struct Guarded {
        map: *mut u8,
        map_len: usize,
        data: *mut u8,
        len: usize,
    }

    #[cfg(unix)]
    impl Guarded {
        fn new(len: usize, guard_after: bool) -> Guarded {
            // SAFETY: plain anonymous mappings, unmapped on drop.
            unsafe {
                let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
                let body = len.div_ceil(page).max(1) * page;
                let map_len = body + 2 * page;
                let prot = libc::PROT_READ | libc::PROT_WRITE;
                let map = libc::mmap(ptr::null_mut(), map_len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
                assert_ne!(map, libc::MAP_FAILED);
                let map = map as *mut u8;
                assert_eq!(libc::mprotect(map as *mut _, page, libc::PROT_NONE), 0);
                assert_eq!(libc::mprotect(map.add(page + body) as *mut _, page, libc::PROT_NONE), 0);
                let data = if guard_after { map.add(page + body - len) } else { map.add(page) };
                Guarded { map, map_len, data, len }
            }
        }

        fn bytes(&mut self) -> &mut [u8] {
            // SAFETY: `len` readable and writable bytes, borrowed from self.
            unsafe { std::slice::from_raw_parts_mut(self.data, self.len) }
        }
    }

    #[cfg(unix)]
    impl Drop for Guarded {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`.
            unsafe { libc::munmap(self.map as *mut _, self.map_len) };
        }
    }

    /// [`round_trip`] with every buffer flush against an inaccessible page,
    /// at its end and then at its start: packing reads no memory byte
    /// outside the typemap's span and writes no stream byte past the items,
    /// and unpacking the other way round. (The start of the memory buffer is
    /// flush only for types whose data begins at or below their origin.)
    #[cfg(unix)]
    fn guarded_round_trip(t: &Datatype, count: u64) {
        let (lo, hi) = data_span(t, count);
        let origin = (-lo).max(0) as usize;
        let len = (origin as i64 + hi) as usize;
        let reference = pattern(len);
        let (expected, want) = expected(t, count, origin, &reference, 0);
        for guard_after in [true, false] {
            let mut mem = Guarded::new(len, guard_after);
            mem.bytes().copy_from_slice(&reference);
            let mut stream = Guarded::new(expected.len(), guard_after);
            t.pack_into(Region::with_origin(mem.bytes(), origin).unwrap(), count, stream.bytes(), &mut 0).unwrap();
            assert!(stream.bytes() == &expected[..], "pack of {count} items");
            mem.bytes().fill(0);
            unpack_or_refuse(t, count, stream.bytes(), mem.bytes(), origin);
            assert!(mem.bytes() == &want[..], "unpack of {count} items");
        }
    }

    fn check_all(types: impl IntoIterator<Item = Datatype>) {
        for t in types {
            check(&t);
        }
    }

    fn chars(n: i64) -> Datatype {
        Datatype::contiguous(n, &Datatype::char()).unwrap()
    }

    #[test]
    fn single_runs_and_empty_types() {
        let d = Datatype::double();
        check_all([
            d.clone(),
            Datatype::char(),
            Datatype::contiguous(5, &d).unwrap(),
            chars(1000),
            Datatype::contiguous(0, &d).unwrap(),
            Datatype::named("short_int").unwrap(),
            Datatype::resized(-4, 16, &d).unwrap(),
        ]);
    }

    #[test]
    fn strided_blocks_of_every_small_length() {
        // Blocks of 1..=150 bytes and a few longer: every run length with a
        // loop of its own, every move width and count, padded move counts,
        // overlapping tails, and long blocks copied whole.
        for len in (1..=150).chain([200, 1000]) {
            for (count, gap) in [(100, 3), (5, 1)] {
                check(&Datatype::hvector(count, len, len + gap, &Datatype::char()).unwrap());
            }
        }
    }

    /// Asserts that 300 runs of `len` bytes `stride` apart compile to a
    /// loop over `Plan::Run`, the kernels of [`run_kernel`], rather than one
    /// flat gather (what up to `FLAT_RUNS` runs become).
    fn assert_runs_in_a_loop(len: i64, stride: i64) {
        let t = Datatype::hvector(300, len, stride, &Datatype::char()).unwrap();
        let plan = match &t.programs().native {
            Native::Repeat { count: 300, body, .. } => match &**body {
                Native::Gather(g) => g.plan.clone(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        };
        assert_eq!(plan, Plan::Run { offset: 0, len: len as usize }, "{len} bytes every {stride}");
    }

    #[test]
    fn eight_byte_items_in_fours_pairs_and_singles() {
        // The 8-byte loop moves four items per iteration, then a pair, then
        // one: every remainder (counts above `FLAT_RUNS`). Stride 16 goes
        // to `alternate_items` instead where the processor has AVX-512F;
        // the other strides take this loop everywhere.
        for stride in [16, 24, 40, -16, -24] {
            assert_runs_in_a_loop(8, stride);
            for count in 65..=72 {
                check(&Datatype::hvector(count, 8, stride, &Datatype::char()).unwrap());
            }
        }
    }

    #[test]
    fn every_other_item() {
        // 4- and 8-byte items two apart, the stride `alternate_items` takes
        // (with AVX-512F): counts above `FLAT_RUNS`, so every remainder
        // of its 64-byte steps, and longer; the guarded round trips put the
        // last item's line flush against an inaccessible page.
        for len in [4, 8] {
            assert_runs_in_a_loop(len, 2 * len);
            for count in (65..=81).chain([300, 1001]) {
                check(&Datatype::hvector(count, len, 2 * len, &Datatype::char()).unwrap());
            }
        }
        check(&Datatype::vector(1000, 1, 2, &Datatype::double()).unwrap());
        check(&Datatype::vector(1000, 1, 2, &Datatype::float()).unwrap());
    }

    /// `alternate_items` called directly, where the processor has AVX-512F
    /// (elsewhere nothing calls it): every count remainder; the first item
    /// at every multiple of N within a line (the buffer starts at a page,
    /// `start` bytes before it), and the last item flush against an
    /// inaccessible page; unpacking leaves the gaps as they were.
    #[cfg(all(unix, target_arch = "x86_64"))]
    #[test]
    fn alternate_items_directly() {
        fn width<const N: usize>() {
            for count in (32..=48).chain([100, 1001]) {
                for (start, guard_after) in (0..64).step_by(N).map(|start| (start, false)).chain([(0, true)]) {
                    let len = start + 2 * N * count - N;
                    let mut mem = Guarded::new(len, guard_after);
                    if !guard_after {
                        assert_eq!((mem.data as usize + start) % 64, start, "the first item's place in its line");
                    }
                    let reference = pattern(len);
                    let items: Vec<usize> = (0..count).flat_map(|i| start + 2 * N * i..start + 2 * N * i + N).collect();
                    let packed: Vec<u8> = items.iter().map(|&i| reference[i]).collect();

                    mem.bytes().copy_from_slice(&reference);
                    let mut stream = Guarded::new(count * N, true);
                    // SAFETY: `start < len`, inside the mapping.
                    let (m, st) = (unsafe { mem.data.add(start) }, stream.data);
                    // SAFETY: AVX-512F is present (checked below); `mem`
                    // holds `count` items every other `N` bytes from
                    // `start` (`len` was sized for them) and `stream`
                    // `count * N` bytes.
                    let end = unsafe { alternate_items::<Pack, N>(count as u64, m, st) };
                    // SAFETY: one past the end of the stream's bytes.
                    assert_eq!(end, unsafe { st.add(count * N) });
                    assert!(stream.bytes() == &packed[..], "pack of {count} {N}-byte items from {start}");

                    mem.bytes().fill(0xa5);
                    // SAFETY: as for the pack above.
                    let end = unsafe { alternate_items::<Unpack, N>(count as u64, m, st) };
                    // SAFETY: one past the end of the stream's bytes.
                    assert_eq!(end, unsafe { st.add(count * N) });
                    let mut want = vec![0xa5; len];
                    for &i in &items {
                        want[i] = reference[i];
                    }
                    assert!(mem.bytes() == &want[..], "unpack of {count} {N}-byte items to {start}");
                }
            }
        }
        if !has_avx512f() {
            eprintln!("no AVX-512F here: alternate_items is never used");
            return;
        }
        width::<4>();
        width::<8>();
    }

    #[test]
    fn items_far_apart() {
        // 4- and 8-byte items at strides around `SCATTERED_STRIDE`, both
        // signs, odd ones too. Counts above `FLAT_RUNS` keep the items a
        // loop (`Plan::Run`, checked below) rather than one flat gather.
        for len in [4, 8] {
            for stride in [64, 511, 512, 513, 1024, -512, -1000] {
                assert_runs_in_a_loop(len, stride);
                for count in [65, 300, 1000] {
                    check(&Datatype::hvector(count, len, stride, &Datatype::char()).unwrap());
                }
            }
        }
    }

    #[test]
    fn long_runs_at_every_alignment() {
        // Runs on both sides of the string-move window of unpacking, with
        // gaps that start successive runs at every offset within a line,
        // and negative strides; more runs than `FLAT_RUNS`, so they stay a
        // loop of long runs.
        for len in [300, 511, 512, 513, 1000, 1024, 2047, 2048, 4100] {
            for stride in [len + 1, len + 64, -len - 37] {
                assert_runs_in_a_loop(len, stride);
                check(&Datatype::hvector(70, len, stride, &Datatype::char()).unwrap());
            }
        }
    }

    #[test]
    fn negative_strides_and_displacements() {
        let f = Datatype::float();
        check_all([
            Datatype::hvector(100, 3, -11, &Datatype::char()).unwrap(),
            Datatype::vector(100, 2, -3, &f).unwrap(),
            Datatype::vector(5, 2, -3, &f).unwrap(),
            Datatype::hindexed(&[2, 1, 3], &[-40, 0, -20], &f).unwrap(),
            Datatype::resized(0, -24, &Datatype::contiguous(3, &f).unwrap()).unwrap(),
            Datatype::resized(-8, 4, &Datatype::hvector(3, 5, 7, &Datatype::char()).unwrap()).unwrap(),
        ]);
    }

    #[test]
    fn struct_arrays() {
        let (i, d, c) = (Datatype::int(), Datatype::double(), Datatype::char());
        let s = Datatype::structure(&[1, 1, 3], &[0, 8, 16], &[i.clone(), d.clone(), c.clone()]).unwrap();
        let padded = Datatype::resized(0, 24, &s).unwrap();
        check_all([
            s.clone(),
            padded.clone(),
            Datatype::contiguous(100, &padded).unwrap(),
            Datatype::vector(3, 2, 3, &padded).unwrap(),
            Datatype::structure(&[1, 2], &[0, 5], &[c.clone(), Datatype::named("short").unwrap()]).unwrap(),
            Datatype::structure(&[2, 1, 7], &[-16, 4, 9], &[i.clone(), d.clone(), c.clone()]).unwrap(),
            // Runs of three widths (1, 2, 4): one width at a time, in blocks.
            Datatype::structure(&[1, 1, 1], &[0, 2, 8], &[c.clone(), Datatype::named("short").unwrap(), i.clone()]).unwrap(),
            Datatype::contiguous(300, &Datatype::structure(&[1, 1, 1], &[0, 2, 9], &[c.clone(), Datatype::named("short").unwrap(), i.clone()]).unwrap()).unwrap(),
            // Two widths in one pass ([`moves2`]): every pair of widths.
            Datatype::structure(&[2, 1], &[0, 20], &[d.clone(), c.clone()]).unwrap(),
            Datatype::structure(&[1, 1], &[0, 12], &[d.clone(), i.clone()]).unwrap(),
            Datatype::structure(&[1, 1], &[0, 12], &[d.clone(), Datatype::named("short").unwrap()]).unwrap(),
            Datatype::structure(&[1, 1], &[0, 12], &[d.clone(), c.clone()]).unwrap(),
            Datatype::structure(&[1, 1], &[0, 6], &[i.clone(), Datatype::named("short").unwrap()]).unwrap(),
            Datatype::structure(&[1, 1], &[0, 6], &[i.clone(), c.clone()]).unwrap(),
            Datatype::structure(&[1, 1], &[0, 3], &[Datatype::named("short").unwrap(), c.clone()]).unwrap(),
            // A struct whose member is a long loop: a sequence, not a gather.
            Datatype::structure(&[1, 1], &[0, 8], &[Datatype::vector(100, 1, 2, &Datatype::float()).unwrap(), i]).unwrap(),
        ]);
    }

    /// The widths of the moves of a type that compiles to one gather.
    fn move_widths(t: &Datatype) -> Vec<usize> {
        match &t.programs().native {
            Native::Gather(g) => match &g.plan {
                Plan::Moves(groups) => groups.iter().map(|m| m.width).collect(),
                plan => panic!("not a move plan: {plan:?}"),
            },
            op => panic!("not a gather: {op:?}"),
        }
    }

    #[test]
    fn two_width_structs_take_the_two_width_kernels() {
        let (i, d, c, h) = (Datatype::int(), Datatype::double(), Datatype::char(), Datatype::named("short").unwrap());
        for (lens, disps, types, widths) in [
            (vec![2, 1], vec![0, 20], vec![d.clone(), c.clone()], vec![16, 1]),
            (vec![1, 1], vec![0, 12], vec![d.clone(), i.clone()], vec![8, 4]),
            (vec![1, 1], vec![0, 12], vec![d.clone(), h.clone()], vec![8, 2]),
            (vec![1, 1], vec![0, 12], vec![d.clone(), c.clone()], vec![8, 1]),
            (vec![1, 1], vec![0, 6], vec![i.clone(), h.clone()], vec![4, 2]),
            (vec![1, 1], vec![0, 6], vec![i.clone(), c.clone()], vec![4, 1]),
            (vec![1, 1], vec![0, 3], vec![h.clone(), c.clone()], vec![2, 1]),
        ] {
            let t = Datatype::structure(&lens, &disps, &types).unwrap().commit();
            assert_eq!(move_widths(&t), widths, "{t:?}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn string_copies_at_every_destination_alignment() {
        let src = pattern(4200);
        for len in [65, 511, 512, 1000, 2047, 2048, 4100] {
            for (from, off) in [0, 3].into_iter().flat_map(|from| (0..64).map(move |off| (from, off))) {
                let src_ptr = src[from..].as_ptr();
                let mut buf = vec![0xa5u8; 4096 + len + 64];
                // The destination 1 KiB + `off` ahead of the source modulo
                // 4 KiB: at every alignment within a line, and outside the
                // aliasing window, so the copy takes `rep movsb` (the next
                // test covers the window).
                let at = (src_ptr as usize + 1024 + off).wrapping_sub(buf.as_ptr() as usize) % 4096;
                assert!(!aliases_4k(src_ptr, buf[at..].as_ptr()));
                // SAFETY: both ranges are in bounds and in different buffers.
                unsafe { copy_string(src_ptr, buf.as_mut_ptr().add(at), len) };
                let mut want = vec![0xa5u8; buf.len()];
                want[at..at + len].copy_from_slice(&src[from..from + len]);
                assert!(buf == want, "{len} bytes from {from} at offset {off}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn string_copies_either_side_of_the_aliasing_window() {
        // Source and destination in one buffer, the destination `ahead`
        // bytes (modulo 4 KiB) past the source: below the window the copy
        // is `memcpy`'s, from it on `rep movsb`; both must copy exactly,
        // whatever the length's remainder modulo 64.
        for (len, ahead) in [65, 100, 1000, 1024].into_iter().flat_map(|len| {
            [0, 1, 8, 63, 64, 255, 256, 257, 1000, 4095].into_iter().map(move |ahead| (len, ahead))
        }) {
            for from in [0, 5, 64] {
                let mut buf = pattern(3 * 4096 + 2048);
                let want_src = buf[from..from + len].to_vec();
                let to = from + 2 * 4096 + ahead;
                let (head, tail) = buf.split_at_mut(to);
                let src = head[from..].as_ptr();
                let dst = tail.as_mut_ptr();
                assert_eq!(aliases_4k(src, dst), ahead < ALIASING_WINDOW, "{ahead} bytes ahead");
                let before = tail[len..].to_vec();
                // SAFETY: `len` bytes from `src` end before `to`, where the
                // destination's `len` bytes start, inside the buffer.
                unsafe { copy_string(src, dst, len) };
                assert!(tail[..len] == want_src[..], "{len} bytes {ahead} ahead, from {from}");
                assert!(tail[len..] == before[..], "{len} bytes {ahead} ahead: wrote past the end");
            }
        }
    }

    #[test]
    fn irregular_indexed() {
        let mut seed = 12345u32;
        let mut next = |m: u32| {
            seed = seed.wrapping_mul(1103515245).wrapping_add(12345);
            (seed >> 16) % m
        };
        let (d, c) = (Datatype::double(), Datatype::char());
        let mut types = Vec::new();
        for (elem, max_len, n) in [(&d, 7, 500), (&c, 7, 500), (&c, 40, 300), (&d, 100, 100), (&c, 1, 200)] {
            let (mut lens, mut disps, mut off) = (Vec::new(), Vec::new(), 0);
            for _ in 0..n {
                let len = 1 + next(max_len) as i64;
                lens.push(len);
                disps.push(off);
                off += len + 1 + next(5) as i64;
            }
            types.push(Datatype::indexed(&lens, &disps, elem).unwrap());
            lens.reverse();
            disps.reverse();
            types.push(Datatype::indexed(&lens, &disps, elem).unwrap());
        }
        types.push(Datatype::indexed_block(3, &[0, 10, 4, 20, 30, 40, 50, 60, 70, 80, 90], &d).unwrap());
        check_all(types);
    }

    #[test]
    fn subarrays() {
        let d = Datatype::double();
        let cube = [12, 10, 9];
        check_all([
            Datatype::subarray(&cube, &[12, 10, 1], &[0, 0, 5], Order::C, &d).unwrap(),
            Datatype::subarray(&cube, &[12, 1, 9], &[0, 5, 0], Order::C, &d).unwrap(),
            Datatype::subarray(&cube, &[1, 10, 9], &[3, 0, 0], Order::C, &d).unwrap(),
            Datatype::subarray(&cube, &[5, 3, 2], &[1, 2, 3], Order::Fortran, &Datatype::float()).unwrap(),
        ]);
    }
}
