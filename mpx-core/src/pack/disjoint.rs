//! Disjoint parts of one buffer.
//!
//! Several operations may share one buffer, each through its own datatype,
//! as long as no byte one of them writes is touched by another (MPI's rule
//! for a halo exchange: two receives, or a receive and a send, must not
//! overlap; sends may, since they only read). This module checks that rule
//! and hands out one handle per part.
//!
//! The check works on byte runs, taken from each datatype's compiled native
//! program ([`Native`]): a contiguous item is one run whatever its element
//! count, a subarray one run per contiguous row of it, and runs that touch
//! merge. It never expands a typemap element by element. The runs of the
//! parts that write are sorted and scanned for overlaps, then the runs of
//! the parts that read are looked up among them: `O(r log r)` for `r`
//! runs. Runs that write more bytes than the buffer holds must overlap
//! somewhere, so collecting them stops there: whatever the writers'
//! datatypes claim, their runs are at most as many as the buffer's bytes.

use std::marker::PhantomData;
use std::ops::ControlFlow;

use super::program::Native;
use super::{check_span, Region, RegionMut};
use crate::datatype::Datatype;
use crate::error::{Error, ErrorKind, Result};
use crate::mpi_type::MpiType;

/// Whether a part of a buffer is read (a send) or written (a receive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

/// `count` items of a datatype laid over a shared buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Part<'d> {
    pub datatype: &'d Datatype,
    pub count: u64,
    pub access: Access,
    /// Where the part's own origin lies, in bytes from the buffer's origin
    /// (0 for parts whose datatypes say where they lie).
    pub offset: i64,
}

impl Part<'_> {
    /// The part's origin in a buffer whose origin is `origin` bytes in
    /// (checked by [`check_parts`] to lie in it).
    fn origin(&self, origin: usize) -> usize {
        (origin as i128 + self.offset as i128) as usize
    }
}

/// Calls `f(start, len)` for each byte run of `count` items of `datatype`
/// whose origin lies `origin` bytes into a buffer, in stream order, with
/// runs that touch merged. Item `i` lies `i * extent` bytes after the
/// first; items that are one run as long as their extent are one run
/// together. The items must lie inside the buffer ([`check_span`]), so
/// every run lies in it too.
pub(crate) fn for_each_run<B>(
    datatype: &Datatype,
    count: u64,
    origin: usize,
    f: impl FnMut(usize, usize) -> ControlFlow<B>,
) -> Option<B> {
    if datatype.size() == 0 || count == 0 {
        return None;
    }
    let native = &datatype.programs().native;
    let extent = datatype.extent();
    let mut runs = Merged { pending: None, f };
    let walked = match native {
        Native::Gather(g) if g.single_run().is_some_and(|(_, len)| len as i64 == extent) => {
            let (offset, len) = g.single_run().expect("matched above");
            // In the buffer, so `len * count` fits.
            runs.push((origin as i64).wrapping_add(offset), len * count as usize)
        }
        _ => (0..count).try_for_each(|i| {
            // (Modulo 2^64, like the pack engine's pointer arithmetic.)
            let base = (origin as i64).wrapping_add((i as i64).wrapping_mul(extent));
            walk(native, base, &mut |start, len| runs.push(start, len))
        }),
    };
    match walked {
        ControlFlow::Break(b) => Some(b),
        ControlFlow::Continue(()) => runs.finish(),
    }
}

/// The runs of a native program at `base`, in stream order.
fn walk<B>(op: &Native, base: i64, emit: &mut impl FnMut(i64, usize) -> ControlFlow<B>) -> ControlFlow<B> {
    match op {
        Native::Gather(g) => g.runs.iter().try_for_each(|&(offset, len)| emit(base.wrapping_add(offset), len)),
        Native::Repeat { count, stride, body } => {
            (0..*count).try_for_each(|i| walk(body, base.wrapping_add((i as i64).wrapping_mul(*stride)), emit))
        }
        Native::Seq(items) => items.iter().try_for_each(|(d, op)| walk(op, base.wrapping_add(*d), emit)),
    }
}

/// Passes runs on to `f`, merging each with the next when they touch.
struct Merged<F> {
    pending: Option<(i64, usize)>,
    f: F,
}

impl<B, F: FnMut(usize, usize) -> ControlFlow<B>> Merged<F> {
    fn push(&mut self, start: i64, len: usize) -> ControlFlow<B> {
        match &mut self.pending {
            Some((s, n)) if s.wrapping_add(*n as i64) == start => {
                *n += len;
                ControlFlow::Continue(())
            }
            pending => match pending.replace((start, len)) {
                Some((s, n)) => (self.f)(s as usize, n),
                None => ControlFlow::Continue(()),
            },
        }
    }

    fn finish(mut self) -> Option<B> {
        let (s, n) = self.pending.take()?;
        match (self.f)(s as usize, n) {
            ControlFlow::Break(b) => Some(b),
            ControlFlow::Continue(()) => None,
        }
    }
}

/// Bytes `[start, end)` of the buffer, written by part `part`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Written {
    start: usize,
    end: usize,
    part: usize,
}

fn overlap(a: usize, b: usize, byte: usize) -> Error {
    ErrorKind::Overlap { first: a.min(b), second: a.max(b), byte }.into()
}

/// Checks `parts` of a buffer of `len` bytes whose origin is at `origin`:
/// that they lie inside it, touch only data of the `values` it holds if it
/// is typed, and that no byte is written by two parts (or twice by one) or
/// written by one and read by another. Errors name the parts by their
/// position in `parts`.
pub(crate) fn check_parts(parts: &[Part<'_>], origin: usize, len: usize, values: Option<&Values>) -> Result<()> {
    for part in parts {
        let at = origin as i128 + part.offset as i128;
        if at < 0 || at > len as i128 {
            return Err(ErrorKind::InvalidArgument(format!("a part whose origin lies {at} bytes into a {len}-byte buffer: past its ends")).into());
        }
        check_span(part.datatype, part.count, at as usize, len)?;
        // The checks below walk every run of every part, and a type can
        // repeat a few bytes billions of times (items of extent 0). The
        // walk of the parts that write stops once they wrote more bytes
        // than the buffer holds (some twice: an overlap); a part that reads
        // sends as many bytes as it reads, which must fit in memory, as its
        // send's packing would find out after the walk.
        if part.access == Access::Read {
            super::fits_in_memory(part.datatype.pack_size(part.count)?)?;
        }
    }
    // Overlaps first: after them the parts that write hold at most the
    // buffer's bytes, and the walk for padding is bounded too.
    check_disjoint(parts, origin, len)?;
    if let Some(values) = values {
        values.check(parts, origin)?;
    }
    Ok(())
}

/// Checks that `count` items of `datatype`, whose origin lies `origin`
/// bytes into a buffer of `len` bytes (inside it: [`check_span`]), write
/// no byte twice: MPI makes a receive into such a typemap erroneous, and
/// what the byte would hold depends on the order of the copies. Most types
/// are known to pass from their program's structure
/// ([`Programs::writes`](super::program::Programs)), repeated `count`
/// times: without a look at their runs; any other has its runs marked in
/// a bitmap of the buffer's bytes.
pub(crate) fn check_writes_once(datatype: &Datatype, count: u64, origin: usize, len: usize) -> Result<()> {
    if count == 0 || datatype.size() == 0 {
        return Ok(());
    }
    if datatype.programs().writes.repeated(count, datatype.extent()).at_most_once() {
        return Ok(());
    }
    // Each run's bytes marked in a bitmap of the buffer, one bit a byte:
    // an eighth of the buffer, however many runs there are.
    let words = len.div_ceil(64);
    let mut marked: Vec<u64> = Vec::new();
    marked.try_reserve_exact(words).map_err(|_| Error::from(ErrorKind::Overflow("a bitmap of the receive buffer's bytes")))?;
    marked.resize(words, 0);
    let twice = for_each_run(datatype, count, origin, |start, n| {
        // Inside the buffer ([`check_span`]): `start + n <= len`.
        let (mut at, end) = (start, start + n);
        while at < end {
            let (word, bit) = (at / 64, at % 64);
            let bits = (end - at).min(64 - bit);
            let mask = if bits == 64 { u64::MAX } else { ((1u64 << bits) - 1) << bit };
            let clash = marked[word] & mask;
            if clash != 0 {
                return ControlFlow::Break(word * 64 + clash.trailing_zeros() as usize);
            }
            marked[word] |= mask;
            at += bits;
        }
        ControlFlow::Continue(())
    });
    match twice {
        Some(byte) => Err(overlap(0, 0, byte)),
        None => Ok(()),
    }
}

/// The overlap rule of [`check_parts`], for parts inside the buffer.
fn check_disjoint(parts: &[Part<'_>], origin: usize, len: usize) -> Result<()> {
    let written = written_runs(parts, origin, len)?;
    if written.is_empty() {
        return Ok(());
    }
    let reads = parts.iter().enumerate().filter(|(_, p)| p.access == Access::Read);
    for (i, part) in reads {
        let clash = for_each_run(part.datatype, part.count, part.origin(origin), |start, n| {
            // The first written run ending after `start`: the only one that
            // can hold bytes of `[start, start + n)` before any later one.
            let k = written.partition_point(|w| w.end <= start);
            match written.get(k) {
                Some(w) if w.start < start + n => ControlFlow::Break(overlap(i, w.part, start.max(w.start))),
                _ => ControlFlow::Continue(()),
            }
        });
        if let Some(e) = clash {
            return Err(e);
        }
    }
    Ok(())
}

/// The runs the writing parts write, sorted and disjoint (runs of one part
/// that touch merged), or the first overlap among them.
fn written_runs(parts: &[Part<'_>], origin: usize, len: usize) -> Result<Vec<Written>> {
    let mut runs = Vec::new();
    let mut bytes = 0usize;
    let writes = parts.iter().enumerate().filter(|(_, p)| p.access == Access::Write);
    for (part, p) in writes {
        let full = for_each_run(p.datatype, p.count, p.origin(origin), |start, n| {
            runs.push(Written { start, end: start + n, part });
            bytes += n;
            // More bytes than the buffer holds: these runs overlap already.
            if bytes > len {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        if full.is_some() {
            break;
        }
    }
    runs.sort_unstable_by_key(|w| (w.start, w.end));
    let mut merged: Vec<Written> = Vec::with_capacity(runs.len());
    for w in runs {
        if let Some(last) = merged.last_mut() {
            // Sorted and disjoint so far: `last` ends after every other.
            if w.start < last.end {
                return Err(overlap(last.part, w.part, w.start));
            }
            if w.start == last.end && w.part == last.part {
                last.end = w.end;
                continue;
            }
        }
        merged.push(w);
    }
    Ok(merged)
}

/// Checks that every part (inside the buffer) touches only bytes that hold data in a buffer of
/// `size`-byte values whose data bytes `data` marks (a value's padding may
/// be uninitialised, and must be neither read nor written). `type_name`
/// names the values' type in the error.
fn check_value_data(parts: &[Part<'_>], origin: usize, data: &[bool], type_name: &str) -> Result<()> {
    let size = data.len();
    if size == 0 || data.iter().all(|&d| d) {
        return Ok(());
    }
    for (i, part) in parts.iter().enumerate() {
        let padding = for_each_run(part.datatype, part.count, part.origin(origin), |start, n| {
            // A run as long as a value covers every byte of one, padding too.
            match (start..start + n.min(size)).find(|b| !data[b % size]) {
                Some(b) => ControlFlow::Break(b),
                None => ControlFlow::Continue(()),
            }
        });
        if let Some(byte) = padding {
            return Err(ErrorKind::InvalidDatatype(format!(
                "part {i} touches byte {byte} of the buffer, which is padding of {type_name}"
            )).into());
        }
    }
    Ok(())
}

/// Which bytes of a value of `datatype`, `size` bytes long, hold data.
fn data_bytes(datatype: &Datatype, size: usize) -> Vec<bool> {
    let mut data = vec![false; size];
    let _ = for_each_run(datatype, 1, 0, |start, n| {
        // The datatype describes a value of `size` bytes: its runs lie in it.
        data[start..start + n].fill(true);
        ControlFlow::<()>::Continue(())
    });
    data
}

/// What a typed buffer holds: values of one [`MpiType`], whose padding
/// may be uninitialised and whose typemap bytes may not accept every bit
/// pattern.
#[derive(Debug, Clone)]
pub(crate) struct Values {
    type_name: &'static str,
    /// Which bytes of a value hold data (empty: all of them).
    data: Vec<bool>,
    /// Whether every bit pattern of the data bytes is a valid value.
    any_bit_pattern: bool,
}

impl Values {
    /// The values of `T`.
    pub(crate) fn of<T: MpiType>() -> Values {
        let (datatype, size) = (T::datatype(), std::mem::size_of::<T>());
        // As many typemap bytes as the value has is not enough (entries may
        // overlap and leave padding): they must lie in one run.
        let data = if super::covers_every_byte::<T>(&datatype) { Vec::new() } else { data_bytes(&datatype, size) };
        Values { type_name: std::any::type_name::<T>(), data, any_bit_pattern: !T::NEEDS_VALIDATION }
    }

    /// Checks that `parts` touch only data bytes of the values, and write
    /// only where any bit pattern is valid.
    fn check(&self, parts: &[Part<'_>], origin: usize) -> Result<()> {
        if !self.any_bit_pattern && parts.iter().any(|p| p.access == Access::Write) {
            return Err(ErrorKind::InvalidDatatype(format!(
                "{} has invalid bit patterns: receive it with its own datatype",
                self.type_name
            )).into());
        }
        check_value_data(parts, origin, &self.data, self.type_name)
    }
}

impl<'a> RegionMut<'a> {
    /// The same bytes, to read: a `&mut` borrow given up for a shared one.
    pub(crate) fn into_region(self) -> Region<'a> {
        Region { ptr: self.ptr, len: self.len, origin: self.origin, _borrow: PhantomData }
    }

    /// Checks `parts` ([`check_parts`]) and gives one handle per part on
    /// the whole region.
    ///
    /// # Safety
    /// Each handle may only be used through its own part's datatype, count
    /// and access (a [`RecvBuf`](crate::comm::RecvBuf) for a part that
    /// writes, a [`SendBuf`](crate::comm::SendBuf) over
    /// [`into_region`](RegionMut::into_region) for one that reads), which
    /// confines it to bytes no other handle writes.
    pub(crate) unsafe fn split_parts(self, parts: &[Part<'_>], values: Option<&Values>) -> Result<Vec<RegionMut<'a>>> {
        check_parts(parts, self.origin, self.len, values)?;
        // Every handle points at the same bytes with the same provenance as
        // `self`, which is consumed: the parts are the only ways left to
        // reach them, and their bytes are disjoint wherever one of them
        // writes (checked above).
        Ok(parts
            .iter()
            .map(|_| RegionMut { ptr: self.ptr, len: self.len, origin: self.origin, _borrow: PhantomData })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::Order;

    fn runs(t: &Datatype, count: u64, origin: usize) -> Vec<(usize, usize)> {
        let mut out = vec![];
        let _ = for_each_run(t, count, origin, |s, n| {
            out.push((s, n));
            ControlFlow::<()>::Continue(())
        });
        out
    }

    fn write(datatype: &Datatype, count: u64) -> Part<'_> {
        Part { datatype, count, access: Access::Write, offset: 0 }
    }

    fn read(datatype: &Datatype, count: u64) -> Part<'_> {
        Part { datatype, count, access: Access::Read, offset: 0 }
    }

    fn check(parts: &[Part<'_>], origin: usize, len: usize) -> Result<()> {
        check_parts(parts, origin, len, None)
    }

    fn subarray(sizes: &[i64], subsizes: &[i64], starts: &[i64]) -> Datatype {
        Datatype::subarray(sizes, subsizes, starts, Order::C, &Datatype::double()).unwrap()
    }

    #[test]
    fn runs_come_from_the_program_not_the_elements() {
        let d = Datatype::double();
        // A million doubles: one run.
        assert_eq!(runs(&d, 1 << 20, 8), [(8, 8 << 20)]);
        // Full rows of a 1000x1000 array: one run; a band of half rows: a
        // run per row.
        assert_eq!(runs(&subarray(&[1000, 1000], &[998, 1000], &[1, 0]), 1, 0), [(8000, 998 * 8000)]);
        let band = runs(&subarray(&[1000, 1000], &[1000, 500], &[0, 500]), 1, 0);
        assert_eq!(band.len(), 1000);
        assert_eq!((band[0], band[999]), ((4000, 4000), (999 * 8000 + 4000, 4000)));
        // Runs that touch across items merge: each item's second run ends
        // where the next item's first begins.
        let v = Datatype::vector(2, 1, 2, &d).unwrap();
        assert_eq!(runs(&v, 3, 0), [(0, 8), (16, 16), (40, 16), (64, 8)]);
    }

    #[test]
    fn receives_that_touch_are_accepted_those_that_overlap_are_not() {
        let d = Datatype::double();
        let left = subarray(&[4, 4], &[4, 2], &[0, 0]);
        let right = subarray(&[4, 4], &[4, 2], &[0, 2]);
        let shifted = subarray(&[4, 4], &[4, 2], &[0, 1]);
        check(&[write(&left, 1), write(&right, 1)], 0, 128).unwrap();
        assert_eq!(
            check(&[write(&left, 1), read(&d, 1), write(&shifted, 1)], 0, 128),
            Err(ErrorKind::Overlap { first: 0, second: 2, byte: 8 }.into())
        );
        // A receive overlapping a send, in either order.
        let row = subarray(&[4, 4], &[1, 4], &[1, 0]);
        assert_eq!(
            check(&[read(&row, 1), write(&left, 1)], 0, 128),
            Err(ErrorKind::Overlap { first: 0, second: 1, byte: 32 }.into())
        );
        assert_eq!(
            check(&[write(&left, 1), read(&row, 1)], 0, 128),
            Err(ErrorKind::Overlap { first: 0, second: 1, byte: 32 }.into())
        );
        // Sends may overlap each other, not a receive.
        check(&[read(&row, 1), read(&left, 1)], 0, 128).unwrap();
        assert_eq!(
            check(&[read(&row, 1), read(&left, 1), write(&right, 1)], 0, 128),
            Err(ErrorKind::Overlap { first: 0, second: 2, byte: 48 }.into())
        );
        // A receive overlapping itself.
        let twice = Datatype::hindexed(&[2, 2], &[0, 8], &d).unwrap();
        assert_eq!(check(&[write(&twice, 1)], 0, 128), Err(ErrorKind::Overlap { first: 0, second: 0, byte: 8 }.into()));
        // And out of bounds is reported as such.
        assert!(matches!(check(&[write(&left, 2)], 0, 128), Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })));
    }

    #[test]
    fn writes_past_the_buffer_length_stop_early() {
        // A billion repeats of one byte at stride 0: found after the buffer's
        // length in bytes, not a billion runs.
        let b = Datatype::byte();
        let same = Datatype::hvector(1_000_000_000, 1, 0, &b).unwrap();
        assert_eq!(check(&[write(&same, 1)], 0, 16), Err(ErrorKind::Overlap { first: 0, second: 0, byte: 0 }.into()));
    }

    #[test]
    fn reads_of_more_than_memory_holds_stop_before_the_walk() {
        // One double read at one place 2^44 times (128 TiB to send) or more
        // than can be counted: an error at once, not trillions of runs.
        let d = Datatype::double();
        let stamp = Datatype::resized(0, 0, &d).unwrap();
        let tail = Datatype::hindexed(&[1], &[8], &d).unwrap();
        for count in [1u64 << 44, u64::MAX] {
            let got = check(&[write(&tail, 1), read(&stamp, count)], 0, 16);
            assert!(matches!(got, Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))), "{count}: {got:?}");
        }
        // Read a few times over, it is an exchange like any other.
        assert_eq!(check(&[write(&tail, 1), read(&stamp, 1000)], 0, 16), Ok(()));
    }

    #[test]
    fn padding_is_found_run_by_run() {
        // 16-byte values with data in bytes 0..9.
        let mut data = vec![false; 16];
        data[..9].fill(true);
        let first_doubles = Datatype::vector(4, 1, 2, &Datatype::double()).unwrap();
        check_value_data(&[read(&first_doubles, 1)], 0, &data, "T").unwrap();
        let all = Datatype::contiguous(8, &Datatype::double()).unwrap();
        let err = check_value_data(&[read(&first_doubles, 1), write(&all, 1)], 0, &data, "T").unwrap_err();
        assert_eq!(err, ErrorKind::InvalidDatatype("part 1 touches byte 9 of the buffer, which is padding of T".into()));
        let s = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::char()]).unwrap();
        let s = Datatype::resized(0, 16, &s).unwrap();
        assert_eq!(data_bytes(&s, 16), data);
    }
}
