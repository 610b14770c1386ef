//! [`MpiType`]: Rust types that have an MPI datatype.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::borrow::Cow;
use std::num::{NonZeroI16, NonZeroI32, NonZeroI64, NonZeroI8, NonZeroU16, NonZeroU32, NonZeroU64, NonZeroU8};

use crate::datatype::{Basic, Datatype};

/// A Rust type with an MPI datatype describing its memory, so slices of it
/// can be packed, sent and received directly.
///
/// Implemented for the primitive numbers, `bool`, `char`, the `NonZero*`
/// integers, arrays of `MpiType`s, and by `#[derive(MpiType)]` for
/// `#[repr(C)]` structs and integer-repr enums. Primitives map to
/// fixed-width types: `u8`..`u64`/`i8`..`i64` to `uint8_t`..`int64_t`,
/// `f32`/`f64` to `float`/`double`, `bool` to `c_bool`, `usize`/`isize` to
/// `uint64_t`/`int64_t` (64-bit targets), `char` to `uint32_t`.
///
/// With the `num-complex` cargo feature, `num_complex::Complex<f32>` and
/// `Complex<f64>` map to `c_float_complex` and `c_double_complex` (one
/// element each, real part first, as C's `float _Complex` and `double
/// _Complex`), so slices, arrays and derived structs of them work as usual:
///
/// ```
/// # #[cfg(feature = "num-complex")] {
/// use mpx::{Basic, MpiType, Predefined};
/// use num_complex::Complex;
/// let t = Complex::<f64>::datatype();
/// assert_eq!(t.as_predefined(), Some(Predefined::Basic(Basic::CDoubleComplex)));
/// assert_eq!(<[Complex<f32>; 4]>::datatype().num_elements(), 4);
/// let mut buf = [0u8; 16];
/// mpx::pack(&[Complex::new(1.5f64, -2.0)], &mut buf, &mut 0)?;
/// assert_eq!(buf[..8], 1.5f64.to_ne_bytes());
/// # }
/// # Ok::<(), mpx::Error>(())
/// ```
///
/// # Safety
///
/// Implementing this trait by hand is `unsafe`. An implementation promises:
/// * [`datatype`](MpiType::datatype) describes one value of `Self`: its lb is
///   0, its extent is `size_of::<Self>()`, and every basic entry lies inside
///   `0..size_of::<Self>()` on bytes that are always initialised in a value
///   of `Self` (never padding), with a basic type of the same size and
///   representation as the field there; and the entries cover every byte
///   of `Self` that is not padding (so values written whole through the
///   datatype into uninitialised memory are initialised);
/// * every bit pattern of those bytes that [`is_valid`](MpiType::is_valid)
///   accepts (all of them when [`NEEDS_VALIDATION`](MpiType::NEEDS_VALIDATION)
///   is false) is a valid `Self`, whatever its other bytes (its padding)
///   hold, uninitialised included: receives build values so, in
///   uninitialised memory. In particular `Self` has values: a type with
///   none (an empty enum, `Infallible`, a struct with such a field) must
///   not implement it;
/// * `datatype` returns the same typemap every time, and so does the
///   hidden `datatype_ref` where an implementation overrides it (mpx's
///   own do, for the predefined types).
///
/// ```
/// use mpx::MpiType;
/// assert_eq!(f64::datatype().size(), 8);
/// assert_eq!(<[u16; 3]>::datatype().extent(), 6);
/// ```
pub unsafe trait MpiType: Copy + Send + Sync + 'static {
    /// The datatype of one value (cheap: a cached handle).
    fn datatype() -> Datatype;

    /// [`datatype`](MpiType::datatype), lent where it can be: the
    /// predefined types lend theirs without touching its reference count,
    /// which every message of such a type would otherwise bump from every
    /// thread (a detail of mpx).
    #[doc(hidden)]
    fn datatype_ref() -> Cow<'static, Datatype> {
        Cow::Owned(Self::datatype())
    }

    /// Whether some bit patterns of the typemap bytes are not valid values,
    /// so received data must pass [`is_valid`](MpiType::is_valid) first.
    const NEEDS_VALIDATION: bool = false;

    /// Whether the value at `ptr` is valid, reading only typemap bytes.
    ///
    /// # Safety
    /// `ptr` points to `size_of::<Self>()` readable bytes whose typemap
    /// bytes are initialised.
    unsafe fn is_valid(ptr: *const u8) -> bool {
        let _ = ptr;
        true
    }
}

macro_rules! primitive {
    ($($t:ty => $b:ident),* $(,)?) => {$(
        // SAFETY: a value of the type is one basic entry of its own size and
        // representation, and every bit pattern is valid.
        unsafe impl MpiType for $t {
            fn datatype() -> Datatype {
                Datatype::basic(Basic::$b)
            }

            fn datatype_ref() -> Cow<'static, Datatype> {
                Cow::Borrowed(Datatype::basic_ref(Basic::$b))
            }
        }
    )*};
}

primitive! {
    u8 => Uint8, i8 => Int8, u16 => Uint16, i16 => Int16, u32 => Uint32, i32 => Int32,
    u64 => Uint64, i64 => Int64, f32 => Float, f64 => Double,
}
#[cfg(target_pointer_width = "64")]
primitive! { usize => Uint64, isize => Int64 }
#[cfg(target_pointer_width = "32")]
primitive! { usize => Uint32, isize => Int32 }
// `Complex<T>` is `#[repr(C)] { re: T, im: T }`: C's complex layout, with
// no padding, alignment of `T`.
#[cfg(feature = "num-complex")]
primitive! { num_complex::Complex<f32> => CFloatComplex, num_complex::Complex<f64> => CDoubleComplex }

macro_rules! validated {
    ($($t:ty => $b:ident, |$p:ident| $check:expr);* $(;)?) => {$(
        // SAFETY: one basic entry of the type's size; `is_valid` accepts
        // exactly the valid bit patterns.
        unsafe impl MpiType for $t {
            fn datatype() -> Datatype {
                Datatype::basic(Basic::$b)
            }

            fn datatype_ref() -> Cow<'static, Datatype> {
                Cow::Borrowed(Datatype::basic_ref(Basic::$b))
            }

            const NEEDS_VALIDATION: bool = true;
            unsafe fn is_valid($p: *const u8) -> bool {
                // SAFETY: the caller guarantees `size_of::<Self>()` readable,
                // initialised bytes at the pointer: the one basic entry the
                // check reads (unaligned where wider than a byte).
                unsafe { $check }
            }
        }
    )*};
}

validated! {
    bool => CBool, |p| *p <= 1;
    char => Uint32, |p| char::from_u32(std::ptr::read_unaligned(p.cast::<u32>())).is_some();
    NonZeroU8 => Uint8, |p| *p != 0;
    NonZeroI8 => Int8, |p| *p != 0;
    NonZeroU16 => Uint16, |p| std::ptr::read_unaligned(p.cast::<u16>()) != 0;
    NonZeroI16 => Int16, |p| std::ptr::read_unaligned(p.cast::<u16>()) != 0;
    NonZeroU32 => Uint32, |p| std::ptr::read_unaligned(p.cast::<u32>()) != 0;
    NonZeroI32 => Int32, |p| std::ptr::read_unaligned(p.cast::<u32>()) != 0;
    NonZeroU64 => Uint64, |p| std::ptr::read_unaligned(p.cast::<u64>()) != 0;
    NonZeroI64 => Int64, |p| std::ptr::read_unaligned(p.cast::<u64>()) != 0;
}

// SAFETY: an array is `N` values of `T` back to back (`contiguous(N)` of a
// type whose extent is `size_of::<T>()`), valid when each element is.
unsafe impl<T: MpiType, const N: usize> MpiType for [T; N] {
    fn datatype() -> Datatype {
        // An array longer than `i64::MAX` fits in memory only if `T` is
        // zero-sized, whose datatype has no entries and extent 0: any count
        // of it is the same empty typemap.
        let count = i64::try_from(N).unwrap_or(i64::MAX);
        // SAFETY: `N` values of `T` back to back, as argued above.
        unsafe { crate::derive_support::cached::<Self>(|| Datatype::contiguous(count, &T::datatype())) }
    }
    const NEEDS_VALIDATION: bool = T::NEEDS_VALIDATION;
    unsafe fn is_valid(ptr: *const u8) -> bool {
        if std::mem::size_of::<T>() == 0 {
            // Every element is at `ptr`: one check answers for all of them
            // (and `N` may be `usize::MAX`).
            // SAFETY: the caller's guarantee for the array covers its
            // (zero-sized) first element.
            return N == 0 || unsafe { T::is_valid(ptr) };
        }
        // SAFETY: element `i` lies at `i * size_of::<T>()` inside the array
        // the caller vouches for.
        (0..N).all(|i| unsafe { T::is_valid(ptr.add(i * std::mem::size_of::<T>())) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_layout<T: MpiType>() {
        let t = T::datatype();
        assert_eq!(t.lb(), 0, "{}", std::any::type_name::<T>());
        assert_eq!(t.extent() as usize, std::mem::size_of::<T>(), "{}", std::any::type_name::<T>());
        assert!(t.true_extent() as usize <= std::mem::size_of::<T>());
    }

    #[test]
    fn primitive_layouts_match_rust() {
        check_layout::<u8>();
        check_layout::<i64>();
        check_layout::<f32>();
        check_layout::<bool>();
        check_layout::<char>();
        check_layout::<usize>();
        check_layout::<NonZeroU32>();
        check_layout::<[[f64; 3]; 2]>();
        check_layout::<[bool; 5]>();
        #[cfg(feature = "num-complex")]
        {
            check_layout::<num_complex::Complex<f32>>();
            check_layout::<num_complex::Complex<f64>>();
            check_layout::<[num_complex::Complex<f64>; 3]>();
            assert_eq!(<num_complex::Complex<f32>>::datatype().num_elements(), 1);
        }
        assert_eq!(<[[f64; 3]; 2]>::datatype().num_elements(), 6);
        const { assert!(<[char; 2]>::NEEDS_VALIDATION) };
    }
}
