//! Predefined (named) datatypes: the basic types a typemap is made of, and
//! the predefined pair types that are two basic entries.
//!
//! Every predefined type of MPI-4.1 that a C program can name is here: the C
//! integer, floating, character and complex types, the fixed-width
//! integers, `c_bool`, `aint`, `offset`, `count`, `byte` and `packed`; the
//! Fortran types the C bindings expose (`integer`, `real`,
//! `double_precision`, `complex`, `double_complex`, `logical`,
//! `character`, at gfortran's default kinds); the pair types of both
//! languages; and the MPI-1 `lb`/`ub` markers.
//!
//! # Type matching
//!
//! Types match by name (MPI-1 §3.3.1): every basic type has its own entry
//! in a type signature, so `integer` matches `integer` and not `int`, a
//! `character` matches one `character` (a Fortran `CHARACTER*10` travels as
//! ten of them), and a complex number is one element that matches only the
//! same complex type, not two of its component. `MPI_C_COMPLEX` is another
//! name of `c_float_complex` ([`Basic::from_name`] takes both).

/// A basic (elementary) datatype: one entry of a typemap.
///
/// Sizes and alignments are those of the C types on x86-64 Linux (`long` is
/// 8 bytes, `wchar_t` 4, `long double` the x87 80-bit format in 16 bytes)
/// and of gfortran's default kinds for the Fortran types. The alignment is
/// the size, except for the complex types, which are aligned as their
/// component. Every variant also has an external32 size
/// ([`Basic::external32_size`]).
///
/// ```
/// use mpx::Basic;
/// assert_eq!(Basic::Double.size(), 8);
/// assert_eq!(Basic::Long.external32_size(), 4);
/// assert_eq!(Basic::from_name("unsigned_long_long"), Some(Basic::UnsignedLongLong));
/// // A complex number is one basic element, aligned as its component.
/// assert_eq!((Basic::CDoubleComplex.size(), Basic::CDoubleComplex.align()), (16, 8));
/// assert_eq!((Basic::LongDouble.size(), Basic::LongDouble.align()), (16, 16));
/// assert_eq!(Basic::from_name("c_complex"), Some(Basic::CFloatComplex));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Basic {
    /// `MPI_BYTE`: untyped 8-bit data; matches only `byte`.
    Byte,
    /// `MPI_PACKED`: packed data; matches any type.
    Packed,
    /// `MPI_CHAR` (C `char`).
    Char,
    /// `MPI_SIGNED_CHAR`.
    SignedChar,
    /// `MPI_UNSIGNED_CHAR`.
    UnsignedChar,
    /// `MPI_SHORT`.
    Short,
    /// `MPI_UNSIGNED_SHORT`.
    UnsignedShort,
    /// `MPI_INT`.
    Int,
    /// `MPI_UNSIGNED`.
    Unsigned,
    /// `MPI_LONG`.
    Long,
    /// `MPI_UNSIGNED_LONG`.
    UnsignedLong,
    /// `MPI_LONG_LONG`.
    LongLong,
    /// `MPI_UNSIGNED_LONG_LONG`.
    UnsignedLongLong,
    /// `MPI_FLOAT`.
    Float,
    /// `MPI_DOUBLE`.
    Double,
    /// `MPI_INT8_T`.
    Int8,
    /// `MPI_INT16_T`.
    Int16,
    /// `MPI_INT32_T`.
    Int32,
    /// `MPI_INT64_T`.
    Int64,
    /// `MPI_UINT8_T`.
    Uint8,
    /// `MPI_UINT16_T`.
    Uint16,
    /// `MPI_UINT32_T`.
    Uint32,
    /// `MPI_UINT64_T`.
    Uint64,
    /// `MPI_C_BOOL`.
    CBool,
    /// `MPI_AINT` (an address-sized signed integer).
    Aint,
    /// `MPI_OFFSET`.
    Offset,
    /// `MPI_COUNT`.
    Count,
    /// `MPI_WCHAR` (C `wchar_t`, 4 bytes; 2 bytes in external32, so a wide
    /// character above `0xFFFF` cannot be sent in external32).
    WChar,
    /// `MPI_LONG_DOUBLE`: the x87 80-bit extended format in the low 10 of 16
    /// bytes, alignment 16. Native packing copies all 16 bytes; external32
    /// is IEEE binary128, converted exactly both ways or not at all.
    LongDouble,
    /// `MPI_C_FLOAT_COMPLEX` (also named `MPI_C_COMPLEX`): `{float re; float im}`.
    CFloatComplex,
    /// `MPI_C_DOUBLE_COMPLEX`: `{double re; double im}`.
    CDoubleComplex,
    /// `MPI_C_LONG_DOUBLE_COMPLEX`: `{long double re; long double im}`,
    /// 32 bytes, alignment 16.
    CLongDoubleComplex,
    /// `MPI_INTEGER`: Fortran `INTEGER` (4 bytes).
    Integer,
    /// `MPI_REAL`: Fortran `REAL` (4 bytes, IEEE single).
    Real,
    /// `MPI_DOUBLE_PRECISION`: Fortran `DOUBLE PRECISION` (8 bytes).
    DoublePrecision,
    /// `MPI_COMPLEX`: Fortran `COMPLEX`, two `REAL` (8 bytes, alignment 4).
    Complex,
    /// `MPI_DOUBLE_COMPLEX`: Fortran `DOUBLE COMPLEX`, two `DOUBLE
    /// PRECISION` (16 bytes, alignment 8).
    DoubleComplex,
    /// `MPI_LOGICAL`: Fortran `LOGICAL` (4 bytes).
    Logical,
    /// `MPI_CHARACTER`: one character of a Fortran `CHARACTER` variable.
    Character,
}

/// How an element's bytes are interpreted when converting representations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumClass {
    /// Raw bytes: copied as they are.
    Bytes,
    /// Signed integer.
    Signed,
    /// Unsigned integer (and `c_bool`).
    Unsigned,
    /// IEEE float: byte-swapped, never resized.
    Float,
    /// x87 80-bit extended natively, IEEE binary128 in external32.
    LongDouble,
}

impl Basic {
    /// Every basic type, in declaration order.
    pub const ALL: [Basic; 39] = [
        Basic::Byte,
        Basic::Packed,
        Basic::Char,
        Basic::SignedChar,
        Basic::UnsignedChar,
        Basic::Short,
        Basic::UnsignedShort,
        Basic::Int,
        Basic::Unsigned,
        Basic::Long,
        Basic::UnsignedLong,
        Basic::LongLong,
        Basic::UnsignedLongLong,
        Basic::Float,
        Basic::Double,
        Basic::Int8,
        Basic::Int16,
        Basic::Int32,
        Basic::Int64,
        Basic::Uint8,
        Basic::Uint16,
        Basic::Uint32,
        Basic::Uint64,
        Basic::CBool,
        Basic::Aint,
        Basic::Offset,
        Basic::Count,
        Basic::WChar,
        Basic::LongDouble,
        Basic::CFloatComplex,
        Basic::CDoubleComplex,
        Basic::CLongDoubleComplex,
        Basic::Integer,
        Basic::Real,
        Basic::DoublePrecision,
        Basic::Complex,
        Basic::DoubleComplex,
        Basic::Logical,
        Basic::Character,
    ];

    /// Size in bytes in the native representation.
    pub const fn size(self) -> usize {
        use Basic::*;
        match self {
            Byte | Packed | Char | SignedChar | UnsignedChar | Int8 | Uint8 | CBool | Character => 1,
            Short | UnsignedShort | Int16 | Uint16 => 2,
            Int | Unsigned | Float | Int32 | Uint32 | WChar | Integer | Real | Logical => 4,
            Long | UnsignedLong | LongLong | UnsignedLongLong | Double | Int64 | Uint64 | Aint
            | Offset | Count | DoublePrecision | CFloatComplex | Complex => 8,
            LongDouble | CDoubleComplex | DoubleComplex => 16,
            CLongDoubleComplex => 32,
        }
    }

    /// Alignment in bytes in the native representation: the size, except
    /// for complex types, which are aligned as their component.
    ///
    /// ```
    /// use mpx::Basic;
    /// assert_eq!(Basic::Int.align(), 4);
    /// assert_eq!(Basic::Complex.align(), Basic::Real.align());
    /// ```
    pub const fn align(self) -> usize {
        self.parts().0.size()
    }

    /// The scalar a value is made of and how many of them: `(Float, 2)` for
    /// `c_float_complex`, `(self, 1)` for every type that is not complex.
    /// Conversions between representations treat a complex value as its
    /// two components, real part first.
    pub(crate) const fn parts(self) -> (Basic, usize) {
        use Basic::*;
        match self {
            CFloatComplex => (Float, 2),
            CDoubleComplex => (Double, 2),
            CLongDoubleComplex => (LongDouble, 2),
            Complex => (Real, 2),
            DoubleComplex => (DoublePrecision, 2),
            other => (other, 1),
        }
    }

    /// Size in bytes in the external32 representation (MPI-4.1 §13.5.2):
    /// `long` and `unsigned long` are 4 bytes there and `wchar` 2; `long
    /// double` is 16 (IEEE binary128), a complex number its two components;
    /// everything else keeps its size.
    ///
    /// ```
    /// use mpx::Basic;
    /// assert_eq!(Basic::WChar.external32_size(), 2);
    /// assert_eq!(Basic::CLongDoubleComplex.external32_size(), 32);
    /// ```
    pub const fn external32_size(self) -> usize {
        let (part, n) = self.parts();
        n * match part {
            Basic::Long | Basic::UnsignedLong => 4,
            Basic::WChar => 2,
            scalar => scalar.size(),
        }
    }

    /// How a scalar's bytes convert between representations (for a complex
    /// type: its component's).
    pub(crate) const fn num_class(self) -> NumClass {
        use Basic::*;
        match self.parts().0 {
            Byte | Packed | Char | Character => NumClass::Bytes,
            SignedChar | Short | Int | Long | LongLong | Int8 | Int16 | Int32 | Int64 | Aint
            | Offset | Count | Integer => NumClass::Signed,
            // A wide character is a code point: unsigned, so one above the
            // 2 bytes of external32 (or negative) fails the range check.
            // A Fortran LOGICAL keeps its bit pattern.
            UnsignedChar | UnsignedShort | Unsigned | UnsignedLong | UnsignedLongLong | Uint8
            | Uint16 | Uint32 | Uint64 | CBool | WChar | Logical => NumClass::Unsigned,
            Float | Double | Real | DoublePrecision => NumClass::Float,
            LongDouble => NumClass::LongDouble,
            // `parts` returns no complex type.
            CFloatComplex | CDoubleComplex | CLongDoubleComplex | Complex | DoubleComplex => NumClass::Bytes,
        }
    }

    /// The name mpx uses for the type (MPI's name without the `MPI_` prefix,
    /// in lower case: `double`, `unsigned_long`, `int8_t`, `c_bool`, ...).
    ///
    /// ```
    /// use mpx::Basic;
    /// assert_eq!(Basic::UnsignedLong.name(), "unsigned_long");
    /// assert_eq!(Basic::from_name(Basic::Int8.name()), Some(Basic::Int8));
    /// ```
    pub const fn name(self) -> &'static str {
        use Basic::*;
        match self {
            Byte => "byte",
            Packed => "packed",
            Char => "char",
            SignedChar => "signed_char",
            UnsignedChar => "unsigned_char",
            Short => "short",
            UnsignedShort => "unsigned_short",
            Int => "int",
            Unsigned => "unsigned",
            Long => "long",
            UnsignedLong => "unsigned_long",
            LongLong => "long_long",
            UnsignedLongLong => "unsigned_long_long",
            Float => "float",
            Double => "double",
            Int8 => "int8_t",
            Int16 => "int16_t",
            Int32 => "int32_t",
            Int64 => "int64_t",
            Uint8 => "uint8_t",
            Uint16 => "uint16_t",
            Uint32 => "uint32_t",
            Uint64 => "uint64_t",
            CBool => "c_bool",
            Aint => "aint",
            Offset => "offset",
            Count => "count",
            WChar => "wchar",
            LongDouble => "long_double",
            CFloatComplex => "c_float_complex",
            CDoubleComplex => "c_double_complex",
            CLongDoubleComplex => "c_long_double_complex",
            Integer => "integer",
            Real => "real",
            DoublePrecision => "double_precision",
            Complex => "complex",
            DoubleComplex => "double_complex",
            Logical => "logical",
            Character => "character",
        }
    }

    /// Looks a basic type up by [`name`](Basic::name); MPI's other names
    /// of a type are taken too: `c_complex` (`MPI_C_COMPLEX`) for
    /// `c_float_complex` and `long_long_int` (`MPI_LONG_LONG_INT`) for
    /// `long_long`.
    ///
    /// ```
    /// use mpx::Basic;
    /// assert_eq!(Basic::from_name("long_long_int"), Some(Basic::LongLong));
    /// assert_eq!(Basic::from_name("c_complex"), Some(Basic::CFloatComplex));
    /// assert_eq!(Basic::from_name("no_such_type"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Basic> {
        match name {
            "c_complex" => Some(Basic::CFloatComplex),
            "long_long_int" => Some(Basic::LongLong),
            _ => Basic::ALL.into_iter().find(|b| b.name() == name),
        }
    }
}

/// A predefined datatype: a basic type, one of MPI's pair types (used by
/// `MPI_MAXLOC`/`MPI_MINLOC`), or one of the MPI-1 bound markers.
///
/// A pair type is a struct of its two basic entries, padded to the largest
/// alignment among them; it counts as two elements.
///
/// ```
/// use mpx::{Datatype, Predefined};
/// let t = Datatype::predefined(Predefined::LongDoubleInt);
/// assert_eq!((t.size(), t.extent(), t.num_elements()), (20, 32, 2));
/// assert_eq!(Predefined::from_name("2double_precision"), Some(Predefined::TwoDoublePrecision));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Predefined {
    /// A basic type.
    Basic(Basic),
    /// `MPI_FLOAT_INT`: `{float; int}`.
    FloatInt,
    /// `MPI_DOUBLE_INT`: `{double; int}`, extent 16.
    DoubleInt,
    /// `MPI_LONG_INT`: `{long; int}`, extent 16.
    LongInt,
    /// `MPI_2INT`: `{int; int}`.
    TwoInt,
    /// `MPI_SHORT_INT`: `{short; int}`, size 6, extent 8.
    ShortInt,
    /// `MPI_LONG_DOUBLE_INT`: `{long double; int}`, size 20, extent 32.
    LongDoubleInt,
    /// `MPI_2REAL`: `{REAL; REAL}` (Fortran), size and extent 8.
    TwoReal,
    /// `MPI_2DOUBLE_PRECISION`: `{DOUBLE PRECISION; DOUBLE PRECISION}`
    /// (Fortran), size and extent 16.
    TwoDoublePrecision,
    /// `MPI_2INTEGER`: `{INTEGER; INTEGER}` (Fortran), size and extent 8.
    TwoInteger,
    /// `MPI_LB`: the MPI-1 lower-bound marker (size 0, extent 0).
    Lb,
    /// `MPI_UB`: the MPI-1 upper-bound marker (size 0, extent 0).
    Ub,
}

impl Predefined {
    /// Every predefined type.
    ///
    /// ```
    /// use mpx::{Datatype, Predefined};
    /// // Every one can be looked up by its name; nine are pair types.
    /// assert!(Predefined::all().all(|p| Datatype::named(p.name()).unwrap().as_predefined() == Some(p)));
    /// let pairs = Predefined::all().filter(|&p| Datatype::predefined(p).num_elements() == 2);
    /// assert_eq!(pairs.count(), 9);
    /// ```
    pub fn all() -> impl Iterator<Item = Predefined> {
        Basic::ALL.into_iter().map(Predefined::Basic).chain([
            Predefined::FloatInt,
            Predefined::DoubleInt,
            Predefined::LongInt,
            Predefined::TwoInt,
            Predefined::ShortInt,
            Predefined::LongDoubleInt,
            Predefined::TwoReal,
            Predefined::TwoDoublePrecision,
            Predefined::TwoInteger,
            Predefined::Lb,
            Predefined::Ub,
        ])
    }

    /// The name of the type (`double`, `double_int`, `2int`, `lb`, ...).
    ///
    /// ```
    /// use mpx::{Basic, Predefined};
    /// assert_eq!(Predefined::TwoInt.name(), "2int");
    /// assert_eq!(Predefined::Basic(Basic::Double).name(), "double");
    /// assert_eq!(Predefined::from_name(Predefined::ShortInt.name()), Some(Predefined::ShortInt));
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Predefined::Basic(b) => b.name(),
            Predefined::FloatInt => "float_int",
            Predefined::DoubleInt => "double_int",
            Predefined::LongInt => "long_int",
            Predefined::TwoInt => "2int",
            Predefined::ShortInt => "short_int",
            Predefined::LongDoubleInt => "long_double_int",
            Predefined::TwoReal => "2real",
            Predefined::TwoDoublePrecision => "2double_precision",
            Predefined::TwoInteger => "2integer",
            Predefined::Lb => "lb",
            Predefined::Ub => "ub",
        }
    }

    /// Looks a predefined type up by [`name`](Predefined::name), or by a
    /// basic type's other name ([`Basic::from_name`]).
    pub fn from_name(name: &str) -> Option<Predefined> {
        Basic::from_name(name).map(Predefined::Basic).or_else(|| Predefined::all().find(|p| p.name() == name))
    }

    /// The basic entries of the type: (basic type, displacement).
    pub(crate) fn entries(self) -> &'static [(Basic, i64)] {
        use Basic::*;
        match self {
            Predefined::Basic(b) => &BASIC_ENTRIES[b as usize],
            Predefined::FloatInt => &[(Float, 0), (Int, 4)],
            Predefined::DoubleInt => &[(Double, 0), (Int, 8)],
            Predefined::LongInt => &[(Long, 0), (Int, 8)],
            Predefined::TwoInt => &[(Int, 0), (Int, 4)],
            Predefined::ShortInt => &[(Short, 0), (Int, 4)],
            Predefined::LongDoubleInt => &[(LongDouble, 0), (Int, 16)],
            Predefined::TwoReal => &[(Real, 0), (Real, 4)],
            Predefined::TwoDoublePrecision => &[(DoublePrecision, 0), (DoublePrecision, 8)],
            Predefined::TwoInteger => &[(Integer, 0), (Integer, 4)],
            Predefined::Lb | Predefined::Ub => &[],
        }
    }
}

/// `BASIC_ENTRIES[b as usize]` is the one-entry typemap `[(b, 0)]`.
static BASIC_ENTRIES: [[(Basic, i64); 1]; Basic::ALL.len()] = {
    let mut table = [[(Basic::Byte, 0)]; Basic::ALL.len()];
    let mut i = 0;
    while i < table.len() {
        table[i] = [(Basic::ALL[i], 0)];
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_entries_table_matches_discriminants() {
        for b in Basic::ALL {
            assert_eq!(BASIC_ENTRIES[b as usize], [(b, 0)]);
            assert_eq!(Basic::from_name(b.name()), Some(b));
        }
    }

    #[test]
    fn pair_types_have_c_layouts() {
        assert_eq!(Predefined::ShortInt.entries(), &[(Basic::Short, 0), (Basic::Int, 4)]);
        assert_eq!(Predefined::from_name("2int"), Some(Predefined::TwoInt));
        // The second member sits at the first's size, rounded up to its own alignment.
        for p in Predefined::all() {
            if let [(a, 0), (b, at)] = *p.entries() {
                assert_eq!(at as usize, a.size().next_multiple_of(b.align()), "{}", p.name());
            }
        }
    }

    #[test]
    fn complex_types_are_two_of_their_component() {
        for b in Basic::ALL {
            let (part, n) = b.parts();
            assert_eq!(part.size() * n, b.size(), "{}", b.name());
            assert_eq!(part.external32_size() * n, b.external32_size(), "{}", b.name());
            assert_eq!(b.align(), part.align(), "{}", b.name());
            assert!(b.size().is_multiple_of(b.align()), "{}", b.name());
            assert_eq!(n == 2, b.name().contains("complex"), "{}", b.name());
        }
        assert_eq!(Basic::from_name("c_complex"), Some(Basic::CFloatComplex));
        assert_eq!(Predefined::from_name("c_complex"), Some(Predefined::Basic(Basic::CFloatComplex)));
    }
}
