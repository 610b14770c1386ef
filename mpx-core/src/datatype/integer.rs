//! [`Integer`]: the integer arguments of datatype constructors, in whatever
//! integer type the caller has.

use crate::error::{ErrorKind, Result};

mod sealed {
    pub trait Sealed {}
}

/// Any of Rust's primitive integer types, as datatype constructors take
/// counts, block lengths, strides, displacements and sizes: pass the
/// `usize` lengths and `i32` offsets a program has without casting. MPI
/// defines these values as (at most) 64-bit signed integers, so a value
/// outside `i64` (a `u64` or `usize` above `i64::MAX`) is an
/// [`ErrorKind::InvalidArgument`]. An unsuffixed literal is an `i32`, as
/// everywhere in Rust: write `1i64 << 40`, not `1 << 40` (which the
/// compiler rejects as an overflow), and give an empty slice its type
/// (`&[] as &[i64]`).
///
/// ```
/// use mpx::Datatype;
/// let n: usize = 3;
/// let a = Datatype::contiguous(n, &Datatype::int())?;
/// let b = Datatype::indexed(&[2u32, 1], &[0i32, 5], &Datatype::int())?;
/// assert_eq!((a.size(), b.size()), (12, 12));
/// assert!(Datatype::contiguous(u64::MAX, &Datatype::int()).is_err());
/// # Ok::<(), mpx::Error>(())
/// ```
pub trait Integer: Copy + std::fmt::Display + sealed::Sealed {
    /// The value as an `i64`, if it fits.
    fn to_i64(self) -> Option<i64>;
}

macro_rules! integers {
    ($($t:ty)*) => {$(
        impl sealed::Sealed for $t {}
        impl Integer for $t {
            fn to_i64(self) -> Option<i64> {
                i64::try_from(self).ok()
            }
        }
    )*};
}

integers!(i8 i16 i32 i64 i128 isize u8 u16 u32 u64 u128 usize);

/// `value` (the argument called `what`) as an `i64`, or why not.
pub(crate) fn int(what: &str, value: impl Integer) -> Result<i64> {
    value.to_i64().ok_or_else(|| ErrorKind::InvalidArgument(format!("{what} {value} does not fit in a 64-bit signed integer")).into())
}

/// Every value of `values` (the argument called `what`) as an `i64`.
pub(crate) fn ints<T: Integer>(what: &str, values: &[T]) -> Result<Vec<i64>> {
    values.iter().map(|&v| int(what, v)).collect()
}
