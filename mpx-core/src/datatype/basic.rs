//! Predefined (named) datatypes: the basic types a typemap is made of, and
//! the predefined pair types that are two basic entries.

/// A basic (elementary) datatype: one entry of a typemap.
///
/// Sizes and alignments are those of the C types on the platform mpx is
/// built for (x86-64 / aarch64 Linux: `long` is 8 bytes). Every variant also
/// has an external32 size ([`Basic::external32_size`]).
///
/// ```
/// use mpx_core::Basic;
/// assert_eq!(Basic::Double.size(), 8);
/// assert_eq!(Basic::Long.external32_size(), 4);
/// assert_eq!(Basic::from_name("unsigned_long_long"), Some(Basic::UnsignedLongLong));
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
}

impl Basic {
    /// Every basic type, in declaration order.
    pub const ALL: [Basic; 27] = [
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
    ];

    /// Size in bytes in the native representation.
    pub const fn size(self) -> usize {
        use Basic::*;
        match self {
            Byte | Packed | Char | SignedChar | UnsignedChar | Int8 | Uint8 | CBool => 1,
            Short | UnsignedShort | Int16 | Uint16 => 2,
            Int | Unsigned | Float | Int32 | Uint32 => 4,
            Long | UnsignedLong | LongLong | UnsignedLongLong | Double | Int64 | Uint64 | Aint
            | Offset | Count => 8,
        }
    }

    /// Alignment in bytes in the native representation (equal to the size
    /// for every basic type mpx knows).
    pub const fn align(self) -> usize {
        self.size()
    }

    /// Size in bytes in the external32 representation (MPI-4.1 §13.5.2):
    /// `long` and `unsigned long` are 4 bytes there, everything else keeps
    /// its size.
    pub const fn external32_size(self) -> usize {
        match self {
            Basic::Long | Basic::UnsignedLong => 4,
            other => other.size(),
        }
    }

    pub(crate) const fn num_class(self) -> NumClass {
        use Basic::*;
        match self {
            Byte | Packed | Char => NumClass::Bytes,
            SignedChar | Short | Int | Long | LongLong | Int8 | Int16 | Int32 | Int64 | Aint
            | Offset | Count => NumClass::Signed,
            UnsignedChar | UnsignedShort | Unsigned | UnsignedLong | UnsignedLongLong | Uint8
            | Uint16 | Uint32 | Uint64 | CBool => NumClass::Unsigned,
            Float | Double => NumClass::Float,
        }
    }

    /// The name mpx uses for the type (MPI's name without the `MPI_` prefix,
    /// in lower case: `double`, `unsigned_long`, `int8_t`, `c_bool`, ...).
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
        }
    }

    /// Looks a basic type up by [`name`](Basic::name).
    pub fn from_name(name: &str) -> Option<Basic> {
        Basic::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// A predefined datatype: a basic type, one of MPI's pair types (used by
/// `MPI_MAXLOC`/`MPI_MINLOC`), or one of the MPI-1 bound markers.
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
    /// `MPI_LB`: the MPI-1 lower-bound marker (size 0, extent 0).
    Lb,
    /// `MPI_UB`: the MPI-1 upper-bound marker (size 0, extent 0).
    Ub,
}

impl Predefined {
    /// Every predefined type.
    pub fn all() -> impl Iterator<Item = Predefined> {
        Basic::ALL.into_iter().map(Predefined::Basic).chain([
            Predefined::FloatInt,
            Predefined::DoubleInt,
            Predefined::LongInt,
            Predefined::TwoInt,
            Predefined::ShortInt,
            Predefined::Lb,
            Predefined::Ub,
        ])
    }

    /// The name of the type (`double`, `double_int`, `2int`, `lb`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Predefined::Basic(b) => b.name(),
            Predefined::FloatInt => "float_int",
            Predefined::DoubleInt => "double_int",
            Predefined::LongInt => "long_int",
            Predefined::TwoInt => "2int",
            Predefined::ShortInt => "short_int",
            Predefined::Lb => "lb",
            Predefined::Ub => "ub",
        }
    }

    /// Looks a predefined type up by [`name`](Predefined::name).
    pub fn from_name(name: &str) -> Option<Predefined> {
        Predefined::all().find(|p| p.name() == name)
    }

    /// The basic entries of the type: (basic type, displacement).
    pub(crate) fn entries(self) -> &'static [(Basic, i64)] {
        use Basic::*;
        match self {
            Predefined::Basic(b) => BASIC_ENTRIES[b as usize],
            Predefined::FloatInt => &[(Float, 0), (Int, 4)],
            Predefined::DoubleInt => &[(Double, 0), (Int, 8)],
            Predefined::LongInt => &[(Long, 0), (Int, 8)],
            Predefined::TwoInt => &[(Int, 0), (Int, 4)],
            Predefined::ShortInt => &[(Short, 0), (Int, 4)],
            Predefined::Lb | Predefined::Ub => &[],
        }
    }
}

/// `BASIC_ENTRIES[b as usize]` is the one-entry typemap `[(b, 0)]`.
static BASIC_ENTRIES: [&[(Basic, i64)]; 27] = {
    use Basic::*;
    [
        &[(Byte, 0)],
        &[(Packed, 0)],
        &[(Char, 0)],
        &[(SignedChar, 0)],
        &[(UnsignedChar, 0)],
        &[(Short, 0)],
        &[(UnsignedShort, 0)],
        &[(Int, 0)],
        &[(Unsigned, 0)],
        &[(Long, 0)],
        &[(UnsignedLong, 0)],
        &[(LongLong, 0)],
        &[(UnsignedLongLong, 0)],
        &[(Float, 0)],
        &[(Double, 0)],
        &[(Int8, 0)],
        &[(Int16, 0)],
        &[(Int32, 0)],
        &[(Int64, 0)],
        &[(Uint8, 0)],
        &[(Uint16, 0)],
        &[(Uint32, 0)],
        &[(Uint64, 0)],
        &[(CBool, 0)],
        &[(Aint, 0)],
        &[(Offset, 0)],
        &[(Count, 0)],
    ]
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_entries_table_matches_discriminants() {
        for b in Basic::ALL {
            assert_eq!(BASIC_ENTRIES[b as usize], &[(b, 0)]);
            assert_eq!(Basic::from_name(b.name()), Some(b));
        }
    }

    #[test]
    fn pair_types_have_c_layouts() {
        assert_eq!(Predefined::ShortInt.entries(), &[(Basic::Short, 0), (Basic::Int, 4)]);
        assert_eq!(Predefined::from_name("2int"), Some(Predefined::TwoInt));
    }
}
