//! The external32 data representation (MPI-4.1 §13.5.2): big-endian, IEEE
//! floats, fixed sizes (`long` is 4 bytes, `aint`/`offset`/`count` 8,
//! `c_bool` 1).
//!
//! Conversion walks the *typed* program, whose leaves are runs of a single
//! basic type, converting element by element. Integers that shrink (`long`
//! to 4 bytes) are range-checked: a value that does not fit is an
//! [`Error::Conversion`], never silently truncated. Integers that grow on
//! unpack are sign- or zero-extended.

use crate::datatype::{Basic, NumClass};
use crate::error::{Error, Result};

use super::program::Op;

/// The conversions below hold an element in a `u64` and an `[u8; 8]`, read
/// and write native elements as 1, 2, 4 or 8 bytes (anything else as 8),
/// and only shrink integers when packing (growing them when unpacking):
/// every basic type must be 1, 2, 4 or 8 bytes natively, and no wider in
/// external32.
const _: () = {
    let mut i = 0;
    while i < Basic::ALL.len() {
        let (size, ext) = (Basic::ALL[i].size(), Basic::ALL[i].external32_size());
        assert!(size == 1 || size == 2 || size == 4 || size == 8, "a basic type is not 1, 2, 4 or 8 bytes");
        assert!(ext >= 1 && ext <= size, "a basic type is wider in external32 than natively");
        i += 1;
    }
};

/// Reads a native-endian integer of `size` bytes, zero-extended.
unsafe fn read_native(src: *const u8, size: usize) -> u64 {
    // SAFETY: the caller guarantees `size` readable bytes at `src`; `[u8; N]`
    // has alignment 1, and `size` is 1, 2, 4 or 8 (asserted below).
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

/// Converts one native element at `src` to external32 at `dst`.
unsafe fn encode(kind: Basic, src: *const u8, dst: *mut u8) -> Result<()> {
    // SAFETY: the caller guarantees `kind.size()` readable bytes at `src` and
    // `kind.external32_size()` writable ones at `dst`; `be` has 8 bytes and
    // the external32 size is at most 8 (asserted below).
    unsafe {
        let (size, ext) = (kind.size(), kind.external32_size());
        let v = read_native(src, size);
        let fits = match kind.num_class() {
            NumClass::Signed if ext < size => sign_extend(v, size) == sign_extend(v, ext) & mask(size),
            NumClass::Unsigned if ext < size => v >> (8 * ext) == 0,
            _ => true,
        };
        if !fits {
            return Err(Error::Conversion { what: kind.name(), representation: "external32" });
        }
        let be = v.to_be_bytes();
        std::ptr::copy_nonoverlapping(be.as_ptr().add(8 - ext), dst, ext);
        Ok(())
    }
}

fn mask(bytes: usize) -> u64 {
    if bytes >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * bytes)) - 1
    }
}

/// Converts one external32 element at `src` to native at `dst`.
unsafe fn decode(kind: Basic, src: *const u8, dst: *mut u8) {
    // SAFETY: the caller guarantees `kind.external32_size()` readable bytes at
    // `src` and `kind.size()` writable ones at `dst`; as in `encode`.
    unsafe {
        let (size, ext) = (kind.size(), kind.external32_size());
        let mut be = [0u8; 8];
        std::ptr::copy_nonoverlapping(src, be.as_mut_ptr().add(8 - ext), ext);
        let mut v = u64::from_be_bytes(be);
        if kind.num_class() == NumClass::Signed && ext < size {
            v = sign_extend(v, ext);
        }
        write_native(dst, size, v);
    }
}

/// Packs (`UNPACK = false`) or unpacks a typed program in external32 with
/// the type's origin at `mem`. Returns the stream position after the data.
///
/// # Safety
/// As for [`super::exec::run`]: every byte the program touches at `mem`
/// must be valid, and the stream must hold the external32 size.
pub(crate) unsafe fn run<const UNPACK: bool>(op: &Op, mem: *mut u8, stream: *mut u8) -> Result<*mut u8> {
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
                    let m = mem.add(i * size);
                    if UNPACK {
                        decode(kind, s, m);
                    } else {
                        encode(kind, m, s)?;
                    }
                    s = s.add(ext);
                }
                Ok(s)
            }
            Op::Repeat { count, stride, body } => {
                let (mut m, mut s) = (mem, stream);
                for _ in 0..*count {
                    s = run::<UNPACK>(body, m, s)?;
                    m = m.wrapping_offset(*stride as isize);
                }
                Ok(s)
            }
            Op::Seq(items) => {
                let mut s = stream;
                for (d, op) in items {
                    s = run::<UNPACK>(op, mem.wrapping_offset(*d as isize), s)?;
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
            decode(Basic::Long, out.as_ptr(), back.as_mut_ptr());
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
