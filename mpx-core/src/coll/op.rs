//! Reduction operations: MPI's built-ins ([`Builtin`], on the types that
//! implement [`Reducible`]) and operations of the user's own ([`Op::user`]).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::mpi_type::MpiType;

/// MPI's built-in reduction operations (`MPI_SUM`, ...). Each is
/// commutative and associative in MPI's sense; on floating-point values
/// the order of evaluation still changes the result's last bits, which is
/// why mpx fixes that order (see [`Comm::allreduce`](crate::Comm::allreduce)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `MPI_SUM`: integers, floating point, complex.
    Sum,
    /// `MPI_PROD`: integers, floating point, complex.
    Prod,
    /// `MPI_MIN`: integers, floating point.
    Min,
    /// `MPI_MAX`: integers, floating point.
    Max,
    /// `MPI_LAND`: integers (non-zero is true; the result is 0 or 1) and `bool`.
    Land,
    /// `MPI_LOR`: as `Land`.
    Lor,
    /// `MPI_LXOR`: as `Land`.
    Lxor,
    /// `MPI_BAND`: integers.
    Band,
    /// `MPI_BOR`: integers.
    Bor,
    /// `MPI_BXOR`: integers.
    Bxor,
}

/// `MPI_SUM`.
pub const SUM: Builtin = Builtin::Sum;
/// `MPI_PROD`.
pub const PROD: Builtin = Builtin::Prod;
/// `MPI_MIN`.
pub const MIN: Builtin = Builtin::Min;
/// `MPI_MAX`.
pub const MAX: Builtin = Builtin::Max;
/// `MPI_LAND`.
pub const LAND: Builtin = Builtin::Land;
/// `MPI_LOR`.
pub const LOR: Builtin = Builtin::Lor;
/// `MPI_LXOR`.
pub const LXOR: Builtin = Builtin::Lxor;
/// `MPI_BAND`.
pub const BAND: Builtin = Builtin::Band;
/// `MPI_BOR`.
pub const BOR: Builtin = Builtin::Bor;
/// `MPI_BXOR`.
pub const BXOR: Builtin = Builtin::Bxor;

/// A type MPI's built-in operations apply to: `combine` computes
/// `inout[i] = input[i] op inout[i]` for each `i`, or refuses an operation
/// the type does not take (`MPI_BAND` of doubles, say) with
/// [`Error::InvalidArgument`].
///
/// ```
/// use mpx_core::coll::{Builtin, Reducible};
/// let mut acc = [1.5f64, 7.0];
/// f64::combine(Builtin::Max, &[2.0, 3.0], &mut acc)?;
/// assert_eq!(acc, [2.0, 7.0]);
/// assert!(f64::combine(Builtin::Bor, &[1.0], &mut [2.0]).is_err());
/// # Ok::<(), mpx_core::Error>(())
/// ```
pub trait Reducible: MpiType + Copy {
    /// `inout[i] = input[i] op inout[i]`; the slices have the same length.
    fn combine(op: Builtin, input: &[Self], inout: &mut [Self]) -> Result<()>;
}

fn refused<T>(op: Builtin) -> Error {
    Error::InvalidArgument(format!("{op:?} does not apply to {}", std::any::type_name::<T>()))
}

/// `inout[i] = f(input[i], inout[i])`.
fn each<T: Copy>(input: &[T], inout: &mut [T], f: impl Fn(T, T) -> T) {
    for (o, &i) in inout.iter_mut().zip(input) {
        *o = f(i, *o);
    }
}

macro_rules! integers {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            fn combine(op: Builtin, input: &[Self], inout: &mut [Self]) -> Result<()> {
                let truth = |b: bool| b as $t;
                match op {
                    // MPI's integer sums and products wrap, as C's unsigned ones do.
                    Builtin::Sum => each(input, inout, |a, b| a.wrapping_add(b)),
                    Builtin::Prod => each(input, inout, |a, b| a.wrapping_mul(b)),
                    Builtin::Min => each(input, inout, |a, b| a.min(b)),
                    Builtin::Max => each(input, inout, |a, b| a.max(b)),
                    Builtin::Land => each(input, inout, |a, b| truth(a != 0 && b != 0)),
                    Builtin::Lor => each(input, inout, |a, b| truth(a != 0 || b != 0)),
                    Builtin::Lxor => each(input, inout, |a, b| truth((a != 0) != (b != 0))),
                    Builtin::Band => each(input, inout, |a, b| a & b),
                    Builtin::Bor => each(input, inout, |a, b| a | b),
                    Builtin::Bxor => each(input, inout, |a, b| a ^ b),
                }
                Ok(())
            }
        }
    )*};
}
integers!(u8, i8, u16, i16, u32, i32, u64, i64, usize, isize);

macro_rules! floats {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            fn combine(op: Builtin, input: &[Self], inout: &mut [Self]) -> Result<()> {
                match op {
                    Builtin::Sum => each(input, inout, |a, b| a + b),
                    Builtin::Prod => each(input, inout, |a, b| a * b),
                    Builtin::Min => each(input, inout, |a, b| a.min(b)),
                    Builtin::Max => each(input, inout, |a, b| a.max(b)),
                    _ => return Err(refused::<$t>(op)),
                }
                Ok(())
            }
        }
    )*};
}
floats!(f32, f64);

impl Reducible for bool {
    fn combine(op: Builtin, input: &[Self], inout: &mut [Self]) -> Result<()> {
        match op {
            Builtin::Land => each(input, inout, |a, b| a && b),
            Builtin::Lor => each(input, inout, |a, b| a || b),
            Builtin::Lxor => each(input, inout, |a, b| a != b),
            _ => return Err(refused::<bool>(op)),
        }
        Ok(())
    }
}

/// An array reduces element by element: `&[1, 2, 3]` passed where one value
/// is taken is one value of three elements, each combined with its peers.
impl<T: Reducible, const N: usize> Reducible for [T; N] {
    fn combine(op: Builtin, input: &[Self], inout: &mut [Self]) -> Result<()> {
        T::combine(op, input.as_flattened(), inout.as_flattened_mut())
    }
}

#[cfg(feature = "num-complex")]
macro_rules! complex {
    ($($t:ty),*) => {$(
        impl Reducible for num_complex::Complex<$t> {
            fn combine(op: Builtin, input: &[Self], inout: &mut [Self]) -> Result<()> {
                match op {
                    Builtin::Sum => each(input, inout, |a, b| a + b),
                    Builtin::Prod => each(input, inout, |a, b| a * b),
                    _ => return Err(refused::<Self>(op)),
                }
                Ok(())
            }
        }
    )*};
}
#[cfg(feature = "num-complex")]
complex!(f32, f64);

/// A user operation's function, with MPI's convention: `f(a, b)` sets
/// `b[i] = a[i] ∘ b[i]`.
type UserFn<T> = dyn Fn(&[T], &mut [T]) + Send + Sync;

/// A reduction operation on values of `T`: a [`Builtin`] (`SUM.into()`,
/// or pass the constant where an `impl Into<Op<T>>` is taken), or a
/// function of the user's own ([`Op::user`]).
pub struct Op<T> {
    kind: Kind<T>,
    commutative: bool,
}

/// A built-in's element function for `T`, taken when the operation is made
/// (only a [`Reducible`] type has one).
type Combine<T> = fn(Builtin, &[T], &mut [T]) -> Result<()>;

enum Kind<T> {
    Builtin(Builtin, Combine<T>),
    User(Arc<UserFn<T>>),
}

impl<T> Clone for Op<T> {
    fn clone(&self) -> Self {
        let kind = match &self.kind {
            Kind::Builtin(b, c) => Kind::Builtin(*b, *c),
            Kind::User(f) => Kind::User(f.clone()),
        };
        Op { kind, commutative: self.commutative }
    }
}

impl<T> std::fmt::Debug for Op<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Builtin(b, _) => write!(f, "Op({b:?})"),
            Kind::User(_) => write!(f, "Op(user, commutative: {})", self.commutative),
        }
    }
}

impl<T: Reducible> From<Builtin> for Op<T> {
    fn from(b: Builtin) -> Op<T> {
        Op { kind: Kind::Builtin(b, T::combine), commutative: true }
    }
}

impl<T: MpiType> Op<T> {
    /// `MPI_Op_create`: an operation from `f`, which combines two vectors
    /// element by element with MPI's convention, `f(a, b)` setting `b[i] =
    /// a[i] ∘ b[i]`, where `a` holds the contributions of lower ranks than
    /// `b`'s. It must be associative; if it is not `commutative`, mpx
    /// combines contributions in rank order, as the standard requires.
    ///
    /// ```
    /// use mpx_core::coll::Op;
    /// // 2x2 matrix products, in rank order: not commutative.
    /// let matmul = Op::user(|a: &[[i64; 4]], b: &mut [[i64; 4]]| {
    ///     for (x, y) in a.iter().zip(b.iter_mut()) {
    ///         *y = [x[0] * y[0] + x[1] * y[2], x[0] * y[1] + x[1] * y[3], x[2] * y[0] + x[3] * y[2], x[2] * y[1] + x[3] * y[3]];
    ///     }
    /// }, false);
    /// assert!(!matmul.is_commutative());
    /// ```
    pub fn user(f: impl Fn(&[T], &mut [T]) + Send + Sync + 'static, commutative: bool) -> Op<T> {
        Op { kind: Kind::User(Arc::new(f)), commutative }
    }
}

impl<T> Op<T> {
    /// Whether contributions may be combined in any order.
    pub fn is_commutative(&self) -> bool {
        self.commutative
    }
}

impl<T> Op<T> {
    /// Checks that the operation applies to `T` before a collective sends
    /// anything (a built-in the type does not take is an error on every
    /// rank alike).
    pub(crate) fn check(&self) -> Result<()> {
        match &self.kind {
            Kind::Builtin(b, combine) => combine(*b, &[], &mut []),
            Kind::User(_) => Ok(()),
        }
    }

    /// `inout[i] = input[i] ∘ inout[i]`, `input` holding lower ranks'
    /// contributions.
    pub(crate) fn apply(&self, input: &[T], inout: &mut [T]) -> Result<()> {
        if input.len() != inout.len() {
            return Err(Error::InvalidArgument(format!("combining {} values with {}", input.len(), inout.len())));
        }
        match &self.kind {
            Kind::Builtin(b, combine) => combine(*b, input, inout),
            Kind::User(f) => {
                f(input, inout);
                Ok(())
            }
        }
    }
}
