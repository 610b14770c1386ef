//! The native data representation: the C layouts that differ between
//! platforms, and the identifier peers compare in their hellos.

/// The layout of the C types whose representation varies between
/// platforms, as [`native_repr_id`] identifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NativeLayout {
    /// Whether integers are big-endian.
    pub(super) big_endian: bool,
    /// Sizes of `short`, `int`, `long`, `long long` and `usize`.
    pub(super) int_sizes: [usize; 5],
    /// Alignments of `f64` and `u64`.
    pub(super) aligns: [usize; 2],
    /// Size and alignment of `wchar_t`.
    pub(super) wchar: (usize, usize),
    /// Size and alignment of `long double`, and its format.
    pub(super) long_double: (usize, usize, LongDoubleFormat),
}

/// The format of C `long double` on a platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LongDoubleFormat {
    /// A platform mpx does not know: only peers of the same architecture
    /// are assumed to share it (see [`NativeLayout::native`]).
    Unknown,
    /// The same as `double` (IEEE binary64): MSVC, 32-bit ARM, Apple arm64.
    Double,
    /// x87 80-bit extended precision, padded (x86 and x86-64 outside MSVC).
    X87,
    /// IEEE binary128 (64-bit ARM, RISC-V, LoongArch and s390x Linux).
    Binary128,
    /// IBM double-double (64-bit PowerPC).
    DoubleDouble,
}

impl NativeLayout {
    /// This target's layout.
    pub(super) const fn native() -> NativeLayout {
        use std::ffi::{c_int, c_long, c_longlong, c_short};
        use std::mem::{align_of, size_of};
        use LongDoubleFormat::*;
        let long_double = if cfg!(target_env = "msvc") {
            (8, 8, Double)
        } else if cfg!(any(target_arch = "x86_64", all(target_arch = "x86", target_vendor = "apple"))) {
            (16, 16, X87)
        } else if cfg!(target_arch = "x86") {
            (12, 4, X87)
        } else if cfg!(all(target_arch = "aarch64", any(target_vendor = "apple", windows))) {
            (8, 8, Double)
        } else if cfg!(target_arch = "s390x") {
            (16, 8, Binary128)
        } else if cfg!(any(target_arch = "aarch64", target_arch = "riscv64", target_arch = "loongarch64")) {
            (16, 16, Binary128)
        } else if cfg!(target_arch = "powerpc64") {
            (16, 16, DoubleDouble)
        } else if cfg!(any(target_arch = "arm", target_arch = "wasm32")) {
            (8, 8, Double)
        } else {
            (0, 0, Unknown)
        };
        NativeLayout {
            big_endian: cfg!(target_endian = "big"),
            int_sizes: [size_of::<c_short>(), size_of::<c_int>(), size_of::<c_long>(), size_of::<c_longlong>(), size_of::<usize>()],
            aligns: [align_of::<f64>(), align_of::<u64>()],
            wchar: if cfg!(windows) { (2, 2) } else { (4, 4) },
            long_double,
        }
    }

    /// The identifier of this layout: equal layouts, equal identifiers.
    pub(super) fn id(&self) -> u64 {
        let (ld_size, ld_align, format) = self.long_double;
        let mut words = vec![u64::from(self.big_endian) + 1];
        words.extend(self.int_sizes.iter().chain(&self.aligns).map(|&s| s as u64));
        words.extend([self.wchar.0 as u64, self.wchar.1 as u64, ld_size as u64, ld_align as u64, format as u64]);
        if format == LongDoubleFormat::Unknown {
            // Only the same architecture is assumed to share an unknown format.
            words.extend(std::env::consts::ARCH.bytes().map(u64::from));
        }
        words.into_iter().fold(0u64, |id, w| id.wrapping_mul(31).wrapping_add(w))
    }
}

/// An identifier of this machine's native data representation: byte order,
/// the sizes of the C integer types whose size varies between platforms,
/// and the sizes, alignments and formats of `wchar_t` and `long double`.
/// Peers with equal identifiers exchange native data.
pub fn native_repr_id() -> u64 {
    NativeLayout::native().id()
}

/// The identifier of this machine's representation with its byte order
/// and the size of C `long` changed: `repr_id_with(true, 4)` is a
/// big-endian machine with 4-byte `long`s, as a peer would announce it.
///
/// ```
/// use mpx::proto::engine::{native_repr_id, repr_id_with};
/// let big_endian = cfg!(target_endian = "big");
/// let long = std::mem::size_of::<std::ffi::c_long>();
/// assert_eq!(repr_id_with(big_endian, long), native_repr_id());
/// assert_ne!(repr_id_with(!big_endian, 4), native_repr_id());
/// ```
pub fn repr_id_with(big_endian: bool, long_size: usize) -> u64 {
    let mut layout = NativeLayout::native();
    layout.big_endian = big_endian;
    layout.int_sizes[2] = long_size;
    layout.id()
}
