//! Reduction operations: MPI's built-ins ([`Builtin`], on the types that
//! implement [`Reducible`]) and operations of the user's own ([`Op::user`]).

use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
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
    /// `MPI_MIN`: integers, floating point (a NaN is passed over: the
    /// result is NaN only where every value is; MPI leaves NaN to the
    /// implementation).
    Min,
    /// `MPI_MAX`: integers, floating point (NaN as `Min`).
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
    /// `MPI_MINLOC`: the pair types ([`Loc`]): the smallest value, and the
    /// smallest index among the pairs that hold it. A NaN value is passed
    /// over, as by `Min`: a pair holding one is the result only where
    /// every pair holds one (the smallest index among them).
    MinLoc,
    /// `MPI_MAXLOC`: the pair types ([`Loc`]): the largest value, and the
    /// smallest index among the pairs that hold it (NaN as `MinLoc`).
    MaxLoc,
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
/// `MPI_MINLOC`.
pub const MINLOC: Builtin = Builtin::MinLoc;
/// `MPI_MAXLOC`.
pub const MAXLOC: Builtin = Builtin::MaxLoc;

/// A type MPI's built-in operations apply to: `combine` computes
/// `inout[i] = input[i] op inout[i]` for each `i`, or refuses an operation
/// the type does not take (`MPI_BAND` of doubles, say) with
/// [`ErrorKind::InvalidArgument`].
///
/// ```
/// use mpx::coll::{Builtin, Reducible};
/// let mut acc = [1.5f64, 7.0];
/// f64::combine(Builtin::Max, &[2.0, 3.0], &mut acc)?;
/// assert_eq!(acc, [2.0, 7.0]);
/// assert!(f64::combine(Builtin::Bor, &[1.0], &mut [2.0]).is_err());
/// # Ok::<(), mpx::Error>(())
/// ```
pub trait Reducible: MpiType + Copy {
    /// `inout[i] = input[i] op inout[i]`; the slices have the same length.
    fn combine(op: Builtin, input: &[Self], inout: &mut [Self]) -> Result<()>;
}

fn refused<T>(op: Builtin) -> Error {
    ErrorKind::InvalidArgument(format!("{op:?} does not apply to {}", std::any::type_name::<T>())).into()
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
                    Builtin::MinLoc | Builtin::MaxLoc => return Err(refused::<$t>(op)),
                }
                Ok(())
            }
        }
    )*};
}
integers!(u8, i8, u16, i16, u32, i32, u64, i64, usize, isize);

/// Whether `x` compares with nothing, itself included (a floating-point
/// NaN; never an integer).
fn unordered<T: PartialOrd>(x: T) -> bool {
    x.partial_cmp(&x).is_none()
}

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

/// A value and its index: MPI's pair types (`MPI_DOUBLE_INT`,
/// `MPI_FLOAT_INT`, `MPI_2INT`, `MPI_SHORT_INT`, `MPI_LONG_INT`), which
/// [`MINLOC`] and [`MAXLOC`] reduce: where is the smallest (largest) value,
/// the index telling (a rank, or a position).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(4, |comm| async move {
/// use mpx::coll::{Loc, MAXLOC};
/// let load = [3.0, 9.5, 9.5, 1.0][comm.rank()];
/// let mut busiest = Loc { value: 0.0, index: 0 };
/// comm.allreduce(&Loc { value: load, index: comm.rank() as i32 }, &mut busiest, MAXLOC).await?;
/// assert_eq!(busiest, Loc { value: 9.5, index: 1 }, "the lowest rank among equals");
/// # Ok(()) }).await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[repr(C)]
pub struct Loc<V> {
    /// The value compared.
    pub value: V,
    /// Where it came from.
    pub index: i32,
}

macro_rules! pairs {
    ($($v:ty => $p:ident),*) => {$(
        // SAFETY: `Loc<V>` is `#[repr(C)] { value: V, index: i32 }`, the C
        // struct the pair type describes: `value` at 0, `index` at the next
        // 4-aligned offset (the layout is checked against the datatype in
        // this module's tests). The pair type's extent is rounded to `V`'s
        // size, which is its alignment on 64-bit targets; where `V`'s
        // alignment is below its size (`f64` and `i64` on 32-bit x86) the
        // struct is shorter, and the pair is resized to `size_of::<Self>()`.
        // Every bit pattern of both fields is valid.
        unsafe impl MpiType for Loc<$v> {
            fn datatype() -> crate::Datatype {
                let pair = crate::Datatype::predefined(crate::Predefined::$p);
                if pair.extent() == std::mem::size_of::<Self>() as i64 {
                    return pair;
                }
                static RESIZED: std::sync::OnceLock<crate::Datatype> = std::sync::OnceLock::new();
                RESIZED
                    .get_or_init(|| {
                        crate::Datatype::resized(0, std::mem::size_of::<Self>() as i64, &pair)
                            .expect("a pair type resized to its struct's size")
                    })
                    .clone()
            }
        }

        impl Reducible for Loc<$v> {
            fn combine(op: Builtin, input: &[Self], inout: &mut [Self]) -> Result<()> {
                let better = match op {
                    Builtin::MinLoc => |a: $v, b: $v| a < b,
                    Builtin::MaxLoc => |a: $v, b: $v| a > b,
                    _ => return Err(refused::<Self>(op)),
                };
                for (o, i) in inout.iter_mut().zip(input) {
                    // A NaN value (which compares as neither better nor
                    // equal) is passed over, as MIN and MAX pass over it:
                    // a pair holding one wins only over another such pair,
                    // by its index, so the result does not depend on which
                    // rank holds it.
                    let taken = match (unordered(i.value), unordered(o.value)) {
                        (false, false) => better(i.value, o.value) || (i.value == o.value && i.index < o.index),
                        (false, true) => true,
                        (true, false) => false,
                        (true, true) => i.index < o.index,
                    };
                    if taken {
                        *o = *i;
                    }
                }
                Ok(())
            }
        }
    )*};
}
pairs!(f32 => FloatInt, f64 => DoubleInt, i32 => TwoInt, i16 => ShortInt, i64 => LongInt);

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
    /// use mpx::coll::Op;
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
    ///
    /// ```
    /// use mpx::coll::{Op, SUM};
    /// let sum: Op<i64> = SUM.into();
    /// assert!(sum.is_commutative()); // every built-in is
    /// let keep_first = Op::user(|a: &[i64], b: &mut [i64]| b.copy_from_slice(a), false);
    /// assert!(!keep_first.is_commutative());
    /// ```
    pub fn is_commutative(&self) -> bool {
        self.commutative
    }
}

impl<T: 'static> Op<T> {
    /// Whether `a op b` and `b op a` give the same bits for all values of
    /// `T`, so that a fold may take a contribution from either side: a
    /// built-in on one of the primitive integer types (wrapping sums and
    /// products, min and max, the logical and bitwise operations), or the
    /// sum or product of floats (IEEE addition and multiplication commute;
    /// only which NaN a sum of two NaNs keeps may differ). Not a user's
    /// [`Reducible`] type (its `PROD` may be a matrix product), nor
    /// `MINLOC`/`MAXLOC`, nor `MIN`/`MAX` of floats (which zero or NaN a
    /// tie keeps depends on the order).
    pub(crate) fn commutes_exactly(&self) -> bool {
        let Kind::Builtin(op, _) = &self.kind else { return false };
        match own_type::<T>() {
            Some(OwnType::Integer) => true,
            Some(OwnType::Float) => matches!(op, Builtin::Sum | Builtin::Prod),
            Some(OwnType::Other) | None => false,
        }
    }

    /// The built-in operation, if it is one (a user's operation has no
    /// name ranks could compare).
    pub(crate) fn builtin(&self) -> Option<Builtin> {
        match self.kind {
            Kind::Builtin(b, _) => Some(b),
            Kind::User(_) => None,
        }
    }

    /// Whether combining runs mpx's code alone (quick, never panicking,
    /// never calling back into mpx): a built-in on one of the types mpx
    /// makes [`Reducible`]. Not a user's function, nor a built-in on a
    /// user's [`Reducible`] type (its `combine` is the user's code), nor
    /// on an array (whose elements may be a user's type).
    pub(crate) fn runs_only_mpx_code(&self) -> bool {
        matches!(self.kind, Kind::Builtin(..)) && own_type::<T>().is_some()
    }
}

/// Which of the types mpx makes [`Reducible`] `T` is, if it is one.
enum OwnType {
    /// A primitive integer.
    Integer,
    /// `f32` or `f64`.
    Float,
    /// `bool`, a complex number, a value-and-index pair.
    Other,
}

fn own_type<T: 'static>() -> Option<OwnType> {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    let integers = [
        TypeId::of::<u8>(),
        TypeId::of::<i8>(),
        TypeId::of::<u16>(),
        TypeId::of::<i16>(),
        TypeId::of::<u32>(),
        TypeId::of::<i32>(),
        TypeId::of::<u64>(),
        TypeId::of::<i64>(),
        TypeId::of::<usize>(),
        TypeId::of::<isize>(),
    ];
    let floats = [TypeId::of::<f32>(), TypeId::of::<f64>()];
    let others = [
        TypeId::of::<bool>(),
        #[cfg(feature = "num-complex")]
        TypeId::of::<num_complex::Complex<f32>>(),
        #[cfg(feature = "num-complex")]
        TypeId::of::<num_complex::Complex<f64>>(),
        TypeId::of::<Loc<f32>>(),
        TypeId::of::<Loc<f64>>(),
        TypeId::of::<Loc<i32>>(),
        TypeId::of::<Loc<i16>>(),
        TypeId::of::<Loc<i64>>(),
    ];
    if integers.contains(&t) {
        Some(OwnType::Integer)
    } else if floats.contains(&t) {
        Some(OwnType::Float)
    } else {
        others.contains(&t).then_some(OwnType::Other)
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
            return Err(ErrorKind::InvalidArgument(format!("combining {} values with {}", input.len(), inout.len())).into());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each pair type's datatype lays its two entries where `Loc` has its
    /// fields, with `Loc`'s size as extent.
    #[test]
    fn pair_types_describe_loc() {
        fn check<V: Copy>(datatype: crate::Datatype) {
            let mut entries = Vec::new();
            datatype.for_each_entry(|b, disp| {
                entries.push((disp, b.size()));
                std::ops::ControlFlow::<()>::Continue(())
            });
            assert_eq!(entries, [(0, std::mem::size_of::<V>()), (std::mem::offset_of!(Loc<V>, index) as i64, 4)]);
            assert_eq!(datatype.extent(), std::mem::size_of::<Loc<V>>() as i64);
        }
        check::<f32>(Loc::<f32>::datatype());
        check::<f64>(Loc::<f64>::datatype());
        check::<i32>(Loc::<i32>::datatype());
        check::<i16>(Loc::<i16>::datatype());
        check::<i64>(Loc::<i64>::datatype());
    }

    #[test]
    fn minloc_and_maxloc_keep_the_lowest_index_among_equals() {
        let a = [Loc { value: 2.0, index: 5 }, Loc { value: 1.0, index: 0 }, Loc { value: 4.0, index: 3 }];
        let mut b = [Loc { value: 2.0, index: 1 }, Loc { value: 7.0, index: 2 }, Loc { value: 4.0, index: 9 }];
        Loc::<f64>::combine(Builtin::MinLoc, &a, &mut b).unwrap();
        assert_eq!(b.map(|l| (l.value, l.index)), [(2.0, 1), (1.0, 0), (4.0, 3)]);
        let mut c = [Loc { value: 3i32, index: 4 }];
        Loc::<i32>::combine(Builtin::MaxLoc, &[Loc { value: 3, index: 2 }], &mut c).unwrap();
        assert_eq!(c[0].index, 2);
        assert!(Loc::<f32>::combine(Builtin::Sum, &[], &mut []).is_err());
        assert!(i32::combine(Builtin::MinLoc, &[], &mut []).is_err());
    }
}
