//! `long double` between its native form, the x87 80-bit extended format,
//! and external32's IEEE binary128.
//!
//! x87 extended (little-endian in memory): a 64-bit significand whose top
//! bit is an explicit integer bit `J`, then 15 exponent bits (bias 16383)
//! and the sign. binary128: the sign, 15 exponent bits with the same bias,
//! and a 112-bit fraction with an implicit integer bit. The two formats
//! have the same exponent range, subnormal scale included, so a value
//! converts by moving the x87 fraction's 63 bits to the top of binary128's
//! 112:
//! * every x87 value converts exactly: zeros, denormals, pseudo-denormals
//!   (exponent 0 with `J` set, which the x87 reads as exponent 1), normal
//!   numbers, infinities and NaNs with their payload (the quiet bit lands on
//!   binary128's quiet bit);
//! * a binary128 value converts back if and only if the low 49 bits of its
//!   fraction are zero; otherwise it has more precision than x87 holds (a
//!   normal number with more than 64 significant bits, a subnormal below
//!   x87's smallest denormal, a NaN payload in the low bits) and the
//!   conversion fails rather than round.
//!
//! Encodings with no value (unnormals, pseudo-infinities and pseudo-NaNs:
//! `J` clear with a nonzero exponent, which the x87 rejects as invalid
//! operands since the 80387) do not convert either.

/// Bytes of the value in an x87 `long double` (the other 6 are padding).
pub(super) const X87_BYTES: usize = 10;

/// Low fraction bits binary128 has beyond x87's 63.
const EXTRA_BITS: u32 = 112 - 63;

const EXP_MAX: u16 = 0x7fff;

/// The binary128 bits of the x87 value `x`, or `None` if `x` encodes no
/// value.
pub(super) fn x87_to_binary128(x: [u8; X87_BYTES]) -> Option<u128> {
    let (significand, sign_exp) = split(x);
    let sign = u128::from(sign_exp >> 15);
    let exp = sign_exp & EXP_MAX;
    let integer_bit = significand >> 63 == 1;
    let fraction = u128::from(significand & !(1 << 63));
    let exp = match (exp, integer_bit) {
        // Zero or denormal: 0.f × 2^-16382, binary128's subnormal scale.
        (0, false) => 0,
        // Pseudo-denormal: 1.f × 2^-16382, binary128's smallest exponent.
        (0, true) => 1,
        // Normal, infinity or NaN.
        (e, true) => e,
        // Unnormal, pseudo-infinity or pseudo-NaN.
        (_, false) => return None,
    };
    Some(sign << 127 | u128::from(exp) << 112 | fraction << EXTRA_BITS)
}

/// The x87 value of the binary128 bits `q`, or `None` if x87 cannot hold it
/// exactly.
pub(super) fn binary128_to_x87(q: u128) -> Option<[u8; X87_BYTES]> {
    let fraction = q & ((1 << 112) - 1);
    if fraction & ((1 << EXTRA_BITS) - 1) != 0 {
        return None;
    }
    let sign = (q >> 127) as u16;
    let exp = (q >> 112) as u16 & EXP_MAX;
    // Zero and subnormals have no integer bit; normal numbers, infinities
    // and NaNs have it set.
    let integer_bit = u64::from(exp != 0) << 63;
    let significand = integer_bit | (fraction >> EXTRA_BITS) as u64;
    Some(join(significand, sign << 15 | exp))
}

fn split(x: [u8; X87_BYTES]) -> (u64, u16) {
    let mut lo = [0u8; 8];
    lo.copy_from_slice(&x[..8]);
    (u64::from_le_bytes(lo), u16::from_le_bytes([x[8], x[9]]))
}

fn join(significand: u64, sign_exp: u16) -> [u8; X87_BYTES] {
    let mut x = [0u8; X87_BYTES];
    x[..8].copy_from_slice(&significand.to_le_bytes());
    x[8..].copy_from_slice(&sign_exp.to_le_bytes());
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIAS: u16 = 16383;

    /// An x87 value from its fields.
    fn x87(sign: bool, exp: u16, significand: u64) -> [u8; X87_BYTES] {
        join(significand, u16::from(sign) << 15 | exp)
    }

    /// A binary128 value from its fields.
    fn quad(sign: bool, exp: u16, fraction: u128) -> u128 {
        u128::from(sign) << 127 | u128::from(exp) << 112 | fraction
    }

    /// binary128 from an f64, exactly (f64 has the same layout with an
    /// 11-bit exponent and a 52-bit fraction), for normal f64 values.
    fn quad_of(v: f64) -> u128 {
        let b = v.to_bits();
        let exp = ((b >> 52) & 0x7ff) as u16;
        assert!(exp != 0 && exp != 0x7ff, "normal values only");
        quad(v.is_sign_negative(), exp + BIAS - 1023, u128::from(b & ((1 << 52) - 1)) << 60)
    }

    /// The x87 encoding of a normal f64, exactly.
    fn x87_of(v: f64) -> [u8; X87_BYTES] {
        let b = v.to_bits();
        let exp = ((b >> 52) & 0x7ff) as u16;
        x87(v.is_sign_negative(), exp + BIAS - 1023, 1 << 63 | (b & ((1 << 52) - 1)) << 11)
    }

    #[test]
    fn normal_numbers_convert_exactly_both_ways() {
        for v in [1.0, -1.0, 0.1, 3.5e300, -2.2e-300, f64::MAX, f64::MIN_POSITIVE, std::f64::consts::PI] {
            assert_eq!(x87_to_binary128(x87_of(v)), Some(quad_of(v)), "{v}");
            assert_eq!(binary128_to_x87(quad_of(v)), Some(x87_of(v)), "{v}");
        }
        // Every bit of x87's 64-bit significand survives the round trip.
        let full = x87(true, BIAS + 5, 0xffff_ffff_ffff_ffff);
        let q = x87_to_binary128(full).unwrap();
        assert_eq!(q & ((1 << EXTRA_BITS) - 1), 0);
        assert_eq!(binary128_to_x87(q), Some(full));
        // The extremes of the exponent range are the same in both formats.
        for exp in [1, EXP_MAX - 1] {
            let x = x87(false, exp, 0xc000_0000_0000_0001);
            let q = x87_to_binary128(x).unwrap();
            assert_eq!((q >> 112) as u16, exp);
            assert_eq!(binary128_to_x87(q), Some(x));
        }
    }

    #[test]
    fn zeros_denormals_and_pseudo_denormals() {
        for sign in [false, true] {
            assert_eq!(x87_to_binary128(x87(sign, 0, 0)), Some(quad(sign, 0, 0)));
            assert_eq!(binary128_to_x87(quad(sign, 0, 0)), Some(x87(sign, 0, 0)));
        }
        // x87's smallest denormal, 2^-16445, is binary128's subnormal with
        // only bit 49 of the fraction set.
        let tiny = x87(false, 0, 1);
        assert_eq!(x87_to_binary128(tiny), Some(quad(false, 0, 1 << EXTRA_BITS)));
        assert_eq!(binary128_to_x87(quad(false, 0, 1 << EXTRA_BITS)), Some(tiny));
        // The largest denormal.
        let big = x87(true, 0, (1 << 63) - 1);
        assert_eq!(binary128_to_x87(x87_to_binary128(big).unwrap()), Some(big));
        // A pseudo-denormal (exponent 0, integer bit set) is 1.f × 2^-16382:
        // binary128's exponent 1, which converts back to the normal form.
        let pseudo = x87(false, 0, 1 << 63 | 0x1234);
        let q = x87_to_binary128(pseudo).unwrap();
        assert_eq!(q, quad(false, 1, 0x1234 << EXTRA_BITS));
        assert_eq!(binary128_to_x87(q), Some(x87(false, 1, 1 << 63 | 0x1234)));
    }

    #[test]
    fn infinities_and_nan_payloads() {
        for sign in [false, true] {
            let inf = x87(sign, EXP_MAX, 1 << 63);
            assert_eq!(x87_to_binary128(inf), Some(quad(sign, EXP_MAX, 0)));
            assert_eq!(binary128_to_x87(quad(sign, EXP_MAX, 0)), Some(inf));
        }
        // Quiet and signalling NaNs keep their payload and quiet bit.
        for payload in [1u64 << 62, 1 << 62 | 0xdead_beef, 1, 0x2bad_cafe_0000_0001] {
            let nan = x87(true, EXP_MAX, 1 << 63 | payload);
            let q = x87_to_binary128(nan).unwrap();
            assert_eq!(q, quad(true, EXP_MAX, u128::from(payload) << EXTRA_BITS));
            assert_eq!((q >> 111) & 1 == 1, payload >> 62 == 1, "quiet bit");
            assert_eq!(binary128_to_x87(q), Some(nan));
        }
        // A binary128 NaN whose payload lies in the low 49 bits has no x87
        // form (dropping the bits would even make it an infinity).
        assert_eq!(binary128_to_x87(quad(false, EXP_MAX, 1)), None);
        assert_eq!(binary128_to_x87(quad(false, EXP_MAX, 1 << 111 | 1 << 48)), None);
    }

    #[test]
    fn binary128_values_x87_cannot_hold_are_refused() {
        // One ulp of binary128 on 1.0: 113 significant bits.
        assert_eq!(binary128_to_x87(quad(false, BIAS, 1)), None);
        // 1 + 2^-64 needs 65 bits; 1 + 2^-63 fits.
        assert_eq!(binary128_to_x87(quad(false, BIAS, 1 << (112 - 64))), None);
        assert!(binary128_to_x87(quad(false, BIAS, 1 << (112 - 63))).is_some());
        // Subnormals below x87's smallest denormal.
        assert_eq!(binary128_to_x87(quad(false, 0, 1)), None);
        assert_eq!(binary128_to_x87(quad(true, 0, 1 << (EXTRA_BITS - 1))), None);
        // Near the top of the range, the same rule.
        assert_eq!(binary128_to_x87(quad(false, EXP_MAX - 1, (1 << 112) - 1)), None);
    }

    #[test]
    fn encodings_with_no_value_are_refused() {
        // Unnormal: a nonzero exponent without the integer bit.
        assert_eq!(x87_to_binary128(x87(false, BIAS, 1 << 62)), None);
        // Pseudo-infinity and pseudo-NaN.
        assert_eq!(x87_to_binary128(x87(false, EXP_MAX, 0)), None);
        assert_eq!(x87_to_binary128(x87(true, EXP_MAX, 1 << 62)), None);
    }

    /// The x87 itself, to check the layout the conversions assume.
    #[cfg(target_arch = "x86_64")]
    mod hardware {
        use super::*;
        use std::arch::asm;

        /// `v` loaded by the x87 and stored as extended precision.
        fn extended_of(v: f64) -> [u8; X87_BYTES] {
            let mut out = [0u8; X87_BYTES];
            // SAFETY: `fld` reads the 8 bytes of `v`, `fstp` writes the 10
            // bytes of `out` and pops what `fld` pushed; the x87 registers
            // are declared clobbered.
            unsafe {
                asm!("fld qword ptr [{src}]", "fstp tbyte ptr [{dst}]",
                     src = in(reg) &v, dst = in(reg) out.as_mut_ptr(),
                     out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                     out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                     options(nostack));
            }
            out
        }

        /// `a / b` computed by the x87 in extended precision.
        fn quotient(a: f64, b: f64) -> [u8; X87_BYTES] {
            let mut out = [0u8; X87_BYTES];
            // SAFETY: as in `extended_of`: two loads, one divide-and-pop and
            // one store-and-pop leave the stack as it was.
            unsafe {
                asm!("fld qword ptr [{a}]", "fld qword ptr [{b}]", "fdivp st(1), st", "fstp tbyte ptr [{dst}]",
                     a = in(reg) &a, b = in(reg) &b, dst = in(reg) out.as_mut_ptr(),
                     out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                     out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                     options(nostack));
            }
            out
        }

        /// The extended value `x` rounded to double by the x87.
        fn double_of(x: [u8; X87_BYTES]) -> f64 {
            let mut out = 0f64;
            // SAFETY: `fld` reads the 10 bytes of `x`, `fstp` writes the 8 of
            // `out`; as in `extended_of`.
            unsafe {
                asm!("fld tbyte ptr [{src}]", "fstp qword ptr [{dst}]",
                     src = in(reg) x.as_ptr(), dst = in(reg) &mut out,
                     out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                     out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                     options(nostack));
            }
            out
        }

        #[test]
        fn the_x87_stores_what_the_conversions_expect() {
            for v in [1.0, -0.1, 6.02e23, f64::MAX, f64::MIN_POSITIVE, 5e-324, 0.0, -0.0, f64::INFINITY] {
                let x = extended_of(v);
                let q = x87_to_binary128(x).unwrap();
                assert_eq!(binary128_to_x87(q), Some(x), "{v}");
                assert_eq!(double_of(binary128_to_x87(q).unwrap()).to_bits(), v.to_bits(), "{v}");
            }
            let nan = extended_of(f64::NAN);
            assert!(double_of(binary128_to_x87(x87_to_binary128(nan).unwrap()).unwrap()).is_nan());
            // A quotient with all 64 significand bits in use: 1/3 is 0xaaaa...ab
            // in x87's significand, and survives binary128 bit for bit.
            let third = quotient(1.0, 3.0);
            assert_eq!(split(third).0, 0xaaaa_aaaa_aaaa_aaab);
            let q = x87_to_binary128(third).unwrap();
            assert_eq!(binary128_to_x87(q), Some(third));
            assert_eq!(double_of(third), 1.0 / 3.0);
            // Normal f64s, by the field-by-field encoding the other tests use.
            for v in [1.0, -0.1, 6.02e23, f64::MAX] {
                assert_eq!(extended_of(v), x87_of(v), "{v}");
            }
        }
    }
}
