//! Type signatures as compact, composable hashes.
//!
//! A type signature is the sequence of basic types of a typemap. mpx never
//! expands it: each datatype keeps the signature's length and a polynomial
//! hash `h(s) = Σ code(s_i) · B^(n-1-i) mod P` (P = 2^61 − 1), which
//! composes: `h(a·b) = h(a)·B^|b| + h(b)` and `h(a^n)` is a geometric series
//! computed in O(log n). Two signatures with equal length and hash are
//! treated as equal; a receiver compares the hash of the prefix it expects.

use super::basic::Basic;

const P: u64 = (1 << 61) - 1;
const BASE: u64 = 0x1f3d_5b79_a3c6_e4d1 % P;

fn mul(a: u64, b: u64) -> u64 {
    let r = (a as u128) * (b as u128);
    let lo = (r as u64) & P;
    let hi = (r >> 61) as u64;
    let s = lo + hi;
    if s >= P {
        s - P
    } else {
        s
    }
}

fn add(a: u64, b: u64) -> u64 {
    let s = a + b;
    if s >= P {
        s - P
    } else {
        s
    }
}

#[cfg(test)]
fn pow(mut b: u64, mut e: u64) -> u64 {
    let mut r = 1;
    while e > 0 {
        if e & 1 == 1 {
            r = mul(r, b);
        }
        b = mul(b, b);
        e >>= 1;
    }
    r
}

/// The type signature of a datatype: its number of basic elements and a hash
/// of their sequence.
///
/// ```
/// use mpx::Datatype;
/// let two = Datatype::contiguous(2, &Datatype::double())?;
/// let other = Datatype::vector(2, 1, 5, &Datatype::double())?;
/// assert_eq!(two.signature(), other.signature()); // same sequence of basic types
/// assert_ne!(two.signature(), Datatype::contiguous(2, &Datatype::int())?.signature());
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature {
    len: u64,
    hash: u64,
    /// `B^len mod P`, kept so that appending this signature costs two
    /// multiplications, not a power.
    scale: u64,
}

impl Signature {
    /// The empty signature.
    pub const EMPTY: Signature = Signature { len: 0, hash: 0, scale: 1 };

    /// The signature of one basic element.
    pub fn basic(b: Basic) -> Signature {
        // A well-mixed nonzero code per basic type.
        let x = (b as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Signature { len: 1, hash: (x ^ (x >> 29)) % (P - 1) + 1, scale: BASE }
    }

    /// Number of basic elements.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the signature has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The 61-bit hash of the sequence (what a message carries on the wire).
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The signature of `self` followed by `other`.
    pub fn concat(self, other: Signature) -> Signature {
        Signature {
            len: self.len.saturating_add(other.len),
            hash: add(mul(self.hash, other.scale), other.hash),
            scale: mul(self.scale, other.scale),
        }
    }

    /// The signature of `self` repeated `n` times.
    pub fn repeat(self, n: u64) -> Signature {
        if n <= 1 {
            return if n == 1 { self } else { Signature::EMPTY };
        }
        // Every message computes the signature of its count of items, on
        // both sides, usually the same few (type, count) pairs again and
        // again: the last ones are kept per thread, each in a slot chosen
        // by its inputs.
        let slot = (self.hash ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)) as usize % REPEATS_KEPT;
        let key = (self, n);
        if let Ok(Some(sig)) = REPEATS.try_with(|kept| kept[slot].get().filter(|(k, _)| *k == key).map(|(_, sig)| sig)) {
            return sig;
        }
        let sig = self.repeat_uncached(n);
        let _ = REPEATS.try_with(|kept| kept[slot].set(Some((key, sig))));
        sig
    }

    fn repeat_uncached(self, n: u64) -> Signature {
        // Binary method on (signature, count): s^(2k) = s^k · s^k.
        let mut result = Signature::EMPTY;
        let mut base = self;
        let mut n = n;
        while n > 0 {
            if n & 1 == 1 {
                result = result.concat(base);
            }
            n >>= 1;
            if n > 0 {
                base = base.concat(base);
            }
        }
        result
    }
}

/// Slots of [`REPEATS`].
const REPEATS_KEPT: usize = 16;

type KeptRepeat = std::cell::Cell<Option<((Signature, u64), Signature)>>;

thread_local! {
    /// Signatures lately repeated on this thread: `((base, n), base^n)`.
    static REPEATS: [KeptRepeat; REPEATS_KEPT] = const { [const { std::cell::Cell::new(None) }; REPEATS_KEPT] };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_equals_concatenation() {
        let a = Signature::basic(Basic::Int).concat(Signature::basic(Basic::Double));
        let mut c = Signature::EMPTY;
        for n in 0..20u64 {
            assert_eq!(a.repeat(n), c, "n = {n}");
            c = c.concat(a);
        }
    }

    #[test]
    fn kept_repeats_are_those_computed() {
        let a = Signature::basic(Basic::Int).concat(Signature::basic(Basic::Double));
        let b = Signature::basic(Basic::Double);
        for round in 0..3 {
            for n in 0..40u64 {
                assert_eq!(a.repeat(n), a.repeat_uncached(n), "round {round}, n = {n}");
                assert_eq!(b.repeat(n), b.repeat_uncached(n), "round {round}, n = {n}");
            }
        }
    }

    #[test]
    fn the_kept_power_is_the_length_s() {
        let a = Signature::basic(Basic::Int).concat(Signature::basic(Basic::Double));
        for n in [0u64, 1, 2, 7, 1000, 1 << 40] {
            let s = a.repeat(n);
            assert_eq!(s.scale, pow(BASE, s.len), "n = {n}");
        }
    }

    #[test]
    fn order_matters() {
        let i = Signature::basic(Basic::Int);
        let d = Signature::basic(Basic::Double);
        assert_ne!(i.concat(d), d.concat(i));
        assert_ne!(Signature::basic(Basic::Byte), Signature::basic(Basic::Char));
    }
}
