//! Type sequences: the basic types of a message, run-length encoded, so a
//! receiver that knows no datatype can still convert external32 data.
//!
//! A typed message in external32 can be received as `packed` (MPI allows
//! any message to be received so), and the receiver then unpacks it with
//! the native pack API. The bytes must therefore be converted to the
//! receiver's native packed form on delivery, which needs the sequence of
//! basic types, not only its hash. The sender puts that sequence in front
//! of the data, as
//!
//! `items: u64 LE, runs: u32 LE, then runs × (basic: u8, count: u64 LE)`
//!
//! describing one item (the runs) and how many items follow. Its size
//! follows the number of runs in one item, never the message length; a
//! receiver checks it against the message's signature hash and length
//! before trusting it.

use super::external32;
use super::program::Op;
use crate::datatype::{Basic, Datatype, Signature};
use crate::error::{Error, ErrorKind, Result};

/// Bytes of the fixed part of an encoded sequence.
const FIXED: usize = 12;
/// Bytes of one run.
const RUN: usize = 9;

/// One item's basic types as runs, and the number of items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeSequence {
    runs: Vec<(Basic, u64)>,
    items: u64,
}

impl TypeSequence {
    /// The sequence of `count` items of `datatype`. It is built by walking
    /// one item's elements: an item whose data the system could not
    /// allocate is [`ErrorKind::Overflow`] rather than a walk of hours.
    ///
    /// ```
    /// use mpx::{pack::TypeSequence, Datatype};
    /// let pair = Datatype::structure(&[1, 2], &[0, 8], &[Datatype::int(), Datatype::double()])?.commit();
    /// let seq = TypeSequence::of(&pair, 10)?;
    /// assert_eq!(seq.elements(), Some(30));
    /// assert_eq!(seq.signature(), pair.signature().repeat(10));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn of(datatype: &Datatype, count: u64) -> Result<TypeSequence> {
        if count > 0 {
            super::fits_in_memory(usize::try_from(datatype.size()).map_err(|_| ErrorKind::Overflow("one item's data"))?)?;
        }
        Ok(TypeSequence::within(datatype, count, usize::MAX).expect("no bound on the encoded length"))
    }

    /// [`of`](TypeSequence::of), if its encoded form takes at most
    /// `max_encoded` bytes: `None` as soon as it would take more, without
    /// building the rest (a type of a few bytes can have billions of runs).
    pub(crate) fn within(datatype: &Datatype, count: u64, max_encoded: usize) -> Option<TypeSequence> {
        let mut runs: Vec<(Basic, u64)> = Vec::new();
        if count == 0 {
            // No data: nothing to convert, and no runs to describe it, so a
            // description is never longer than its data allows (see
            // [`TypeSequence::max_encoded_len`]).
            return Some(TypeSequence { runs, items: 0 });
        }
        let max_runs = max_encoded.saturating_sub(FIXED) / RUN;
        let too_long = datatype.for_each_entry(|basic, _| {
            let full = runs.len() >= max_runs;
            match runs.last_mut() {
                Some((b, n)) if *b == basic => *n += 1,
                _ if full => return std::ops::ControlFlow::Break(()),
                _ => runs.push((basic, 1)),
            }
            std::ops::ControlFlow::Continue(())
        });
        too_long.is_none().then_some(TypeSequence { runs, items: count })
    }

    /// Basic elements in the whole sequence, if that fits in a `u64`.
    pub fn elements(&self) -> Option<u64> {
        self.runs.iter().try_fold(0u64, |acc, &(_, n)| acc.checked_add(n))?.checked_mul(self.items)
    }

    /// The signature of the sequence.
    pub fn signature(&self) -> Signature {
        let item = self.runs.iter().fold(Signature::EMPTY, |s, &(b, n)| s.concat(Signature::basic(b).repeat(n)));
        item.repeat(self.items)
    }

    /// The longest encoded sequence a message of `data` bytes of
    /// external32 data needs: every run holds at least one element, of at
    /// least one byte, of each item (and a message without data, none).
    /// A receiver refuses a longer description, so that a small message
    /// cannot carry a large one.
    ///
    /// ```
    /// use mpx::{pack::TypeSequence, Datatype};
    /// let pair = Datatype::structure(&[1, 2], &[0, 8], &[Datatype::int(), Datatype::double()])?;
    /// let encoded = TypeSequence::of(&pair, 3)?.encode().len() as u64;
    /// assert!(encoded <= TypeSequence::max_encoded_len(pair.external32_size() * 3));
    /// assert_eq!(TypeSequence::of(&pair, 0)?.encode().len() as u64, TypeSequence::max_encoded_len(0));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn max_encoded_len(data: u64) -> u64 {
        (FIXED as u64).saturating_add((RUN as u64).saturating_mul(data))
    }

    /// The encoded form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FIXED + RUN * self.runs.len());
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoded form to `out`.
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.items.to_le_bytes());
        out.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        for &(b, n) in &self.runs {
            out.push(Basic::ALL.iter().position(|&x| x == b).expect("every basic type is listed") as u8);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }

    /// Decodes an encoded sequence that fills `bytes` exactly. Malformed
    /// input (a bad length, an unknown basic type, an empty run, a marker
    /// type) is an [`ErrorKind::Protocol`].
    pub fn decode(bytes: &[u8]) -> Result<TypeSequence> {
        let bad = |what: &str| -> Error { ErrorKind::Protocol(format!("malformed type sequence: {what}")).into() };
        if bytes.len() < FIXED {
            return Err(bad("shorter than its header"));
        }
        let items = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let n = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
        let expected = n.checked_mul(RUN).and_then(|runs| runs.checked_add(FIXED)).ok_or_else(|| bad("run count"))?;
        if bytes.len() != expected {
            return Err(bad("its length does not match its runs"));
        }
        let runs = bytes[FIXED..]
            .chunks_exact(RUN)
            .map(|run| {
                let basic = *Basic::ALL.get(run[0] as usize).ok_or_else(|| bad("unknown basic type"))?;
                if basic == Basic::Packed {
                    return Err(bad("packed is not a basic type of typed data"));
                }
                let count = u64::from_le_bytes(run[1..].try_into().expect("8 bytes"));
                if count == 0 || count > i64::MAX as u64 {
                    return Err(bad("a run of no or too many elements"));
                }
                Ok((basic, count))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TypeSequence { runs, items })
    }

    /// Converts `data`, this sequence in external32, to the native packed
    /// form (what `pack` of the same values gives on this machine). The
    /// data must hold the whole sequence exactly.
    pub fn external32_to_native(&self, data: &[u8]) -> Result<Vec<u8>> {
        let mismatch = || -> Error { ErrorKind::Protocol("external32 data does not match its type sequence".into()).into() };
        let (mut ext, mut native) = (0u64, 0u64);
        for &(b, n) in &self.runs {
            ext = n.checked_mul(b.external32_size() as u64).and_then(|s| ext.checked_add(s)).ok_or_else(mismatch)?;
            native = n.checked_mul(b.size() as u64).and_then(|s| native.checked_add(s)).ok_or_else(mismatch)?;
        }
        if ext.checked_mul(self.items) != Some(data.len() as u64) {
            return Err(mismatch());
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        // One item laid out densely in memory is exactly its native packed
        // form: each run converts in place, one after another, with no
        // datatype built for the sequence (a peer's sequence may have a
        // run per element, and a datatype costs hundreds of bytes a run).
        let total = native.checked_mul(self.items).and_then(|t| usize::try_from(t).ok()).ok_or_else(mismatch)?;
        let mut out = vec![0u8; total];
        // A sequence of one run is one run of all its items' elements
        // (fewer than `total` bytes, so the product fits).
        let merged;
        let (runs, items) = match self.runs[..] {
            [(kind, n)] => {
                merged = [(kind, n * self.items)];
                (&merged[..], 1)
            }
            _ => (&self.runs[..], self.items),
        };
        let (mut at_native, mut at_ext) = (0usize, 0usize);
        for _ in 0..items {
            for &(kind, n) in runs {
                // Within `out` and `data`: their lengths are the sums
                // checked above.
                let (len, ext_len) = (n as usize * kind.size(), n as usize * kind.external32_size());
                let (mem, stream) = (&mut out[at_native..at_native + len], &data[at_ext..at_ext + ext_len]);
                let run = Op::Leaf { kind: Some(kind), len };
                // SAFETY: `mem` holds the run's `n` native elements and
                // `stream` their external32 bytes (sliced above, so in
                // bounds); `Decode` reads the stream and writes only memory,
                // so the stream's pointer, made mutable for the shared
                // signature, is never written through.
                unsafe { external32::run::<external32::Decode>(&run, mem.as_mut_ptr(), stream.as_ptr().cast_mut()) }?;
                (at_native, at_ext) = (at_native + len, at_ext + ext_len);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::Region;

    #[test]
    fn external32_converts_to_the_native_packed_form() {
        let t = Datatype::structure(&[1, 3, 2], &[0, 8, 40], &[Datatype::basic(Basic::Short), Datatype::double(), Datatype::basic(Basic::Long)])
            .unwrap()
            .commit();
        let mut mem = vec![0u8; t.extent() as usize * 5];
        for (i, b) in mem.iter_mut().enumerate() {
            *b = (i * 7 % 251) as u8;
        }
        let native = t.pack_to_vec(Region::new(&mem), 5).unwrap();
        let mut ext = vec![0u8; t.pack_external_size(5).unwrap()];
        // `long` values must fit in external32's 4 bytes.
        let longs_ok = (0..5).all(|i| {
            let at = i * t.extent() as usize + 40;
            (0..2).all(|k| {
                let v = i64::from_ne_bytes(mem[at + 8 * k..at + 8 * k + 8].try_into().unwrap());
                i32::try_from(v).is_ok()
            })
        });
        if !longs_ok {
            for i in 0..5 {
                let at = i * t.extent() as usize + 40;
                mem[at..at + 16].copy_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0, 0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
            }
        }
        let native = if longs_ok { native } else { t.pack_to_vec(Region::new(&mem), 5).unwrap() };
        t.pack_external(Region::new(&mem), 5, &mut ext, &mut 0).unwrap();
        let seq = TypeSequence::decode(&TypeSequence::of(&t, 5).unwrap().encode()).unwrap();
        assert_eq!(seq.signature(), t.signature().repeat(5));
        assert_eq!(seq.external32_to_native(&ext).unwrap(), native);
        assert!(seq.external32_to_native(&ext[1..]).is_err());
    }

    /// Runs of one element each, alternating kinds (no two merge), and a
    /// sequence of one run over many items: both convert as a datatype of
    /// the same layout unpacks them.
    #[test]
    fn sequences_of_many_runs_or_many_items_convert() {
        let pairs = 5_000;
        let kinds = [Datatype::int(), Datatype::basic(Basic::Short)];
        let lengths = vec![1i64; 2 * pairs];
        let displacements: Vec<i64> = (0..2 * pairs as i64).map(|i| i / 2 * 6 + i % 2 * 4).collect();
        let types: Vec<Datatype> = (0..2 * pairs).map(|i| kinds[i % 2].clone()).collect();
        let alternating = Datatype::structure(&lengths, &displacements, &types).unwrap();
        let many = Datatype::contiguous(3_000, &Datatype::double()).unwrap();
        for (t, items) in [(alternating, 2u64), (many, 7)] {
            let mem: Vec<u8> = (0..t.extent() as usize * items as usize).map(|i| (i * 13 % 251) as u8).collect();
            let native = t.pack_to_vec(Region::new(&mem), items).unwrap();
            let mut ext = vec![0u8; t.pack_external_size(items).unwrap()];
            t.pack_external(Region::new(&mem), items, &mut ext, &mut 0).unwrap();
            let seq = TypeSequence::decode(&TypeSequence::of(&t, items).unwrap().encode()).unwrap();
            assert_eq!(seq.external32_to_native(&ext).unwrap(), native);
            assert!(seq.external32_to_native(&ext[..ext.len() - 1]).is_err());
        }
    }

    #[test]
    fn malformed_sequences_are_errors() {
        let good = TypeSequence::of(&Datatype::int(), 3).unwrap().encode();
        assert!(TypeSequence::decode(&good).is_ok());
        for cut in 0..good.len() {
            assert!(TypeSequence::decode(&good[..cut]).is_err());
        }
        let mut bad = good.clone();
        bad[12] = 200;
        assert!(TypeSequence::decode(&bad).is_err());
        let mut empty_run = good.clone();
        empty_run[13..21].copy_from_slice(&0u64.to_le_bytes());
        assert!(TypeSequence::decode(&empty_run).is_err());
        let mut huge = good;
        huge[0..8].copy_from_slice(&u64::MAX.to_le_bytes());
        let seq = TypeSequence::decode(&huge).unwrap();
        assert!(seq.external32_to_native(&[0; 12]).is_err(), "a claimed item count the data does not hold");
    }
}
