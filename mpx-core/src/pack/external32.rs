//! The external32 data representation (MPI-4.1 §13.5.2): big-endian, IEEE
//! floats, fixed sizes (`long` is 4 bytes, `wchar` 2, `aint`/`offset`/`count`
//! 8, `c_bool` 1, `long double` 16 as IEEE binary128).
//!
//! Conversion walks the *typed* program, whose leaves are runs of a single
//! basic type, converting element by element; a complex number converts
//! as its two components, real part first, each big-endian. Integers that
//! shrink (`long` to 4 bytes, `wchar` to 2) are range-checked: a value that
//! does not fit is an [`ErrorKind::Conversion`], never silently truncated.
//! Integers that grow on unpack are sign- or zero-extended. `long double`
//! converts exactly between x87 extended and binary128, or fails
//! ([`long_double`] says which values cannot convert); unpacking writes its
//! 6 padding bytes as zeros.

mod long_double;

use crate::datatype::{Basic, NumClass};
use crate::error::{ErrorKind, Result};

use super::program::Op;
use long_double::X87_BYTES;

/// The conversions below hold a scalar in a `u64` and an `[u8; 8]`, read
/// and write native scalars as 1, 2, 4 or 8 bytes (anything else as 8),
/// and only shrink integers when packing (growing them when unpacking):
/// every basic type must be one or two scalars (its [`Basic::parts`]) that
/// are 1, 2, 4 or 8 bytes natively and no wider in external32, or `long
/// double`s, which convert on their own, 16 bytes both ways.
const _: () = {
    let mut i = 0;
    while i < Basic::ALL.len() {
        let (part, n) = Basic::ALL[i].parts();
        let (size, ext) = (part.size(), part.external32_size());
        assert!(n == 1 || n == 2, "a basic type is not one or two scalars");
        assert!(n * size == Basic::ALL[i].size(), "a basic type's parts do not fill it");
        if matches!(part.num_class(), NumClass::LongDouble) {
            assert!(size == 16 && ext == 16, "a long double is not 16 bytes both ways");
        } else {
            assert!(size == 1 || size == 2 || size == 4 || size == 8, "a scalar is not 1, 2, 4 or 8 bytes");
            assert!(ext >= 1 && ext <= size, "a scalar is wider in external32 than natively");
        }
        i += 1;
    }
};

/// Reads a native-endian integer of `size` bytes, zero-extended.
unsafe fn read_native(src: *const u8, size: usize) -> u64 {
    // SAFETY: the caller guarantees `size` readable bytes at `src`; `[u8; N]`
    // has alignment 1, and `size` is 1, 2, 4 or 8 (the compile-time assertion
    // above, over every basic type's scalars).
    unsafe {
        match size {
            1 => *src as u64,
            2 => u16::from_ne_bytes(*(src as *const [u8; 2])) as u64,
            4 => u32::from_ne_bytes(*(src as *const [u8; 4])) as u64,
            _ => u64::from_ne_bytes(*(src as *const [u8; 8])),
        }
    }
}

/// Writes the low `size` bytes of `v` natively.
unsafe fn write_native(dst: *mut u8, size: usize, v: u64) {
    // SAFETY: the caller guarantees `size` writable bytes at `dst`; as in
    // `read_native`.
    unsafe {
        match size {
            1 => *dst = v as u8,
            2 => *(dst as *mut [u8; 2]) = (v as u16).to_ne_bytes(),
            4 => *(dst as *mut [u8; 4]) = (v as u32).to_ne_bytes(),
            _ => *(dst as *mut [u8; 8]) = v.to_ne_bytes(),
        }
    }
}

/// Sign-extends the low `bytes` bytes of `v`.
fn sign_extend(v: u64, bytes: usize) -> u64 {
    let shift = 64 - 8 * bytes as u32;
    (((v << shift) as i64) >> shift) as u64
}

/// Converts one native element at `src` to external32 at `dst`: each of
/// its parts in turn.
unsafe fn encode(kind: Basic, src: *const u8, dst: *mut u8) -> Result<()> {
    let (part, n) = kind.parts();
    for i in 0..n {
        // SAFETY: the caller guarantees `kind.size()` readable bytes at `src`
        // and `kind.external32_size()` writable ones at `dst`: `n` parts of
        // `part.size()` and of `part.external32_size()` bytes.
        let fits = unsafe { encode_scalar(part, src.add(i * part.size()), dst.add(i * part.external32_size())) };
        if !fits {
            return Err(ErrorKind::Conversion { what: kind.name(), representation: "external32" }.into());
        }
    }
    Ok(())
}

/// Whether this target's C `long double` is x87 extended precision in 16
/// bytes, the one native format the conversions know. Elsewhere a `long
/// double` converts to or from external32 as an [`ErrorKind::Conversion`],
/// never as wrong values.
const NATIVE_LONG_DOUBLE_IS_X87: bool = cfg!(all(target_arch = "x86_64", not(target_env = "msvc")));

/// Converts one native scalar; `false` if external32 cannot hold it.
unsafe fn encode_scalar(kind: Basic, src: *const u8, dst: *mut u8) -> bool {
    // SAFETY: the caller guarantees `kind.size()` readable bytes at `src` and
    // `kind.external32_size()` writable ones at `dst`; a long double is 16
    // bytes both ways and its value the first 10, other scalars are at most
    // 8 bytes both ways (asserted above), and `be` has 8.
    unsafe {
        let (size, ext) = (kind.size(), kind.external32_size());
        if kind.num_class() == NumClass::LongDouble {
            if !NATIVE_LONG_DOUBLE_IS_X87 {
                return false;
            }
            let Some(q) = long_double::x87_to_binary128(*(src as *const [u8; X87_BYTES])) else { return false };
            *(dst as *mut [u8; 16]) = q.to_be_bytes();
            return true;
        }
        let v = read_native(src, size);
        let fits = match kind.num_class() {
            NumClass::Signed if ext < size => sign_extend(v, size) == sign_extend(v, ext) & mask(size),
            NumClass::Unsigned if ext < size => v >> (8 * ext) == 0,
            _ => true,
        };
        if fits {
            let be = v.to_be_bytes();
            std::ptr::copy_nonoverlapping(be.as_ptr().add(8 - ext), dst, ext);
        }
        fits
    }
}

fn mask(bytes: usize) -> u64 {
    if bytes >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * bytes)) - 1
    }
}

/// Converts one external32 element at `src` to native at `dst`, or with
/// `WRITE = false` only checks that it converts (`dst` is not touched).
unsafe fn decode<const WRITE: bool>(kind: Basic, src: *const u8, dst: *mut u8) -> Result<()> {
    let (part, n) = kind.parts();
    for i in 0..n {
        // SAFETY: the caller guarantees `kind.external32_size()` readable bytes
        // at `src` and, when writing, `kind.size()` writable ones at `dst`:
        // `n` parts of each part's size.
        let fits = unsafe {
            decode_scalar::<WRITE>(part, src.add(i * part.external32_size()), dst.wrapping_add(i * part.size()))
        };
        if !fits {
            return Err(ErrorKind::Conversion { what: kind.name(), representation: "native (x87 extended)" }.into());
        }
    }
    Ok(())
}

/// Converts one external32 scalar; `false` if the native representation
/// cannot hold it (only `long double` can fail).
unsafe fn decode_scalar<const WRITE: bool>(kind: Basic, src: *const u8, dst: *mut u8) -> bool {
    // SAFETY: the caller guarantees `kind.external32_size()` readable bytes at
    // `src` and, when writing, `kind.size()` writable ones at `dst`; as in
    // `encode_scalar`.
    unsafe {
        let (size, ext) = (kind.size(), kind.external32_size());
        if kind.num_class() == NumClass::LongDouble {
            if !NATIVE_LONG_DOUBLE_IS_X87 {
                return false;
            }
            let Some(x) = long_double::binary128_to_x87(u128::from_be_bytes(*(src as *const [u8; 16]))) else {
                return false;
            };
            if WRITE {
                let mut native = [0u8; 16];
                native[..X87_BYTES].copy_from_slice(&x);
                *(dst as *mut [u8; 16]) = native;
            }
            return true;
        }
        if WRITE {
            let mut be = [0u8; 8];
            std::ptr::copy_nonoverlapping(src, be.as_mut_ptr().add(8 - ext), ext);
            let mut v = u64::from_be_bytes(be);
            if kind.num_class() == NumClass::Signed && ext < size {
                v = sign_extend(v, ext);
            }
            write_native(dst, size, v);
        }
        true
    }
}

/// What [`run`] does with each element.
pub(crate) trait Convert {
    /// Converts (or checks) one element of `kind` at `mem` and `stream`.
    ///
    /// # Safety
    /// `kind.size()` bytes at `mem` and `kind.external32_size()` at
    /// `stream`, valid for the conversion's accesses.
    unsafe fn element(kind: Basic, mem: *mut u8, stream: *mut u8) -> Result<()>;
}

/// Native memory to external32.
pub(crate) struct Encode;
/// External32 to native memory.
pub(crate) struct Decode;
/// Checks that external32 data converts to native, writing nothing.
pub(crate) struct CheckDecode;

impl Convert for Encode {
    unsafe fn element(kind: Basic, mem: *mut u8, stream: *mut u8) -> Result<()> {
        // SAFETY: the caller's guarantee, read from memory, written to the stream.
        unsafe { encode(kind, mem, stream) }
    }
}

impl Convert for Decode {
    unsafe fn element(kind: Basic, mem: *mut u8, stream: *mut u8) -> Result<()> {
        // SAFETY: the caller's guarantee, read from the stream, written to memory.
        unsafe { decode::<true>(kind, stream, mem) }
    }
}

impl Convert for CheckDecode {
    unsafe fn element(kind: Basic, mem: *mut u8, stream: *mut u8) -> Result<()> {
        // SAFETY: the caller's guarantee; only the stream is read.
        unsafe { decode::<false>(kind, stream, mem) }
    }
}

/// Whether external32 data of `kind` can fail to convert to native: some
/// binary128 values have no x87 form.
pub(crate) fn decode_can_fail(kind: Basic) -> bool {
    kind.num_class() == NumClass::LongDouble
}

/// Packs ([`Encode`]), unpacks ([`Decode`]) or checks ([`CheckDecode`]) a
/// typed program in external32 with the type's origin at `mem`. Returns the
/// stream position after the data.
///
/// # Safety
/// As for [`super::exec::run`]: every byte the program touches at `mem`
/// must be valid (for `CheckDecode`, it is not touched), and the stream
/// must hold the external32 size.
pub(crate) unsafe fn run<C: Convert>(op: &Op, mem: *mut u8, stream: *mut u8) -> Result<*mut u8> {
    // SAFETY: the caller guarantees every element `op` touches at `mem` and
    // the external32 bytes of them at `stream`; each element below is one of
    // those, the stream advancing by its external32 size.
    unsafe {
        match op {
            Op::Leaf { kind, len } => {
                let kind = kind.unwrap_or(Basic::Byte);
                let (size, ext) = (kind.size(), kind.external32_size());
                let mut s = stream;
                for i in 0..len / size {
                    C::element(kind, mem.wrapping_add(i * size), s)?;
                    s = s.add(ext);
                }
                Ok(s)
            }
            Op::Repeat { count, stride, body } => {
                let (mut m, mut s) = (mem, stream);
                for _ in 0..*count {
                    s = run::<C>(body, m, s)?;
                    m = m.wrapping_offset(*stride as isize);
                }
                Ok(s)
            }
            Op::Seq(items) => {
                let mut s = stream;
                for (d, op) in items {
                    s = run::<C>(op, mem.wrapping_offset(*d as isize), s)?;
                }
                Ok(s)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_shrinks_with_range_check() {
        let mut out = [0u8; 4];
        // SAFETY: every source is an 8-byte `long`, every destination 4
        // bytes (`out`, external32) or 8 (`back`, native).
        unsafe {
            encode(Basic::Long, (-2i64).to_ne_bytes().as_ptr(), out.as_mut_ptr()).unwrap();
            assert_eq!(out, (-2i32).to_be_bytes());
            let mut back = [0u8; 8];
            decode::<true>(Basic::Long, out.as_ptr(), back.as_mut_ptr()).unwrap();
            assert_eq!(i64::from_ne_bytes(back), -2);
            assert!(encode(Basic::Long, (1i64 << 40).to_ne_bytes().as_ptr(), out.as_mut_ptr()).is_err());
            assert!(encode(Basic::UnsignedLong, (1u64 << 32).to_ne_bytes().as_ptr(), out.as_mut_ptr()).is_err());
            encode(Basic::UnsignedLong, u32::MAX.to_ne_bytes().iter().chain(&[0; 4]).copied().collect::<Vec<_>>().as_ptr(), out.as_mut_ptr()).unwrap();
            assert_eq!(out, u32::MAX.to_be_bytes());
        }
    }

    #[test]
    fn doubles_are_big_endian() {
        let mut out = [0u8; 8];
        // SAFETY: 8 bytes each way.
        unsafe { encode(Basic::Double, 1.5f64.to_ne_bytes().as_ptr(), out.as_mut_ptr()).unwrap() };
        assert_eq!(out, 1.5f64.to_be_bytes());
    }
}
