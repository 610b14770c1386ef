//! Bounds of a typemap computed from the constructor tree, never from the
//! expanded typemap.
//!
//! Every datatype keeps a [`Layout`]: its size, element count, the span of its
//! basic entries, its sticky lb/ub markers and its alignment. A constructor's
//! layout follows from its children's layouts and the *extreme* displacements
//! at which it places copies of them, so `contiguous(2^40)` costs the same as
//! `contiguous(2)`. All arithmetic is checked; overflow is [`ErrorKind::Overflow`].
//!
//! The rules (MPI-4.1 §5.1 plus the MPI-1 markers):
//! * `lb` is the lowest lb marker if there is one, else the lowest
//!   displacement of a basic entry (0 for an empty typemap);
//! * `ub` is the highest ub marker if there is one, else the highest end of a
//!   basic entry plus ε, the least increment that makes `ub - lb` a multiple
//!   of the largest alignment of a basic type in the typemap. A child's own ε
//!   is not an entry: replicating a padded type contributes its entries only;
//! * `true_lb`/`true_ub` are the span of the basic entries, ignoring markers.

use crate::error::{Error, ErrorKind, Result};

/// The size, bounds and counts of one item of a datatype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Bytes of data (sum of basic entry sizes).
    pub size: u64,
    /// Bytes of data in the external32 representation.
    pub external32_size: u64,
    /// Number of basic entries.
    pub elements: u64,
    /// `[lowest displacement, highest end)` of the basic entries, if any;
    /// `hi - lo` fits in an `i64` (checked by [`LayoutBuilder::finish`]),
    /// so every byte of data lies at a displacement that fits too.
    pub data: Option<(i64, i64)>,
    /// The lowest lb marker, if any.
    pub lb_marker: Option<i64>,
    /// The highest ub marker, if any.
    pub ub_marker: Option<i64>,
    /// Largest alignment of a basic entry (1 when there is none).
    pub align: i64,
    /// The lower bound.
    pub lb: i64,
    /// The upper bound.
    pub ub: i64,
}

impl Layout {
    /// The extent, `ub - lb`.
    pub fn extent(&self) -> i64 {
        // Cannot overflow: `finish` checked it.
        self.ub - self.lb
    }
}

fn overflow(what: &'static str) -> Error {
    ErrorKind::Overflow(what).into()
}

pub(crate) fn to_i64(v: i128, what: &'static str) -> Result<i64> {
    i64::try_from(v).map_err(|_| overflow(what))
}

/// Accumulates the layout of a typemap made of copies of child types.
#[derive(Debug, Clone, Default)]
pub(crate) struct LayoutBuilder {
    size: u64,
    external32_size: u64,
    elements: u64,
    data: Option<(i64, i64)>,
    lb_marker: Option<i64>,
    ub_marker: Option<i64>,
    align: i64,
}

impl LayoutBuilder {
    pub fn new() -> Self {
        LayoutBuilder { align: 1, ..Default::default() }
    }

    /// Adds one basic entry of `size` bytes (external32: `ext_size`) and
    /// alignment `align` at `disp`.
    pub fn basic(&mut self, disp: i64, size: u64, ext_size: u64, align: i64) -> Result<()> {
        let end = disp.checked_add(size as i64).ok_or(overflow("displacement"))?;
        self.size = self.size.checked_add(size).ok_or(overflow("size"))?;
        self.external32_size =
            self.external32_size.checked_add(ext_size).ok_or(overflow("size"))?;
        self.elements = self.elements.checked_add(1).ok_or(overflow("element count"))?;
        self.widen_data(disp, end);
        self.align = self.align.max(align);
        Ok(())
    }

    /// Adds an lb marker at `disp`.
    pub fn lb_marker(&mut self, disp: i64) {
        self.lb_marker = Some(self.lb_marker.map_or(disp, |m| m.min(disp)));
    }

    /// Adds a ub marker at `disp`.
    pub fn ub_marker(&mut self, disp: i64) {
        self.ub_marker = Some(self.ub_marker.map_or(disp, |m| m.max(disp)));
    }

    fn widen_data(&mut self, lo: i64, hi: i64) {
        self.data = Some(match self.data {
            None => (lo, hi),
            Some((a, b)) => (a.min(lo), b.max(hi)),
        });
    }

    /// Adds `count` blocks of `blocklength` copies of `child`: block `i`
    /// starts at `first + i * stride` bytes and its copies are `child`'s
    /// extent apart. Costs O(1) whatever the counts.
    pub fn strided(
        &mut self,
        child: &Layout,
        first: i64,
        count: i64,
        stride: i64,
        blocklength: i64,
    ) -> Result<()> {
        debug_assert!(count >= 0 && blocklength >= 0);
        let copies = (count as i128) * (blocklength as i128);
        if copies == 0 {
            return Ok(());
        }
        // Copies of an empty child add nothing, however many there are
        // (`count * blocklength` may exceed 64 bits then).
        let mul = |v: u64| match v {
            0 => Ok(0),
            v => u64::try_from(copies).map_err(|_| overflow("count"))?.checked_mul(v).ok_or(overflow("size")),
        };
        self.size = self.size.checked_add(mul(child.size)?).ok_or(overflow("size"))?;
        self.external32_size = self
            .external32_size
            .checked_add(mul(child.external32_size)?)
            .ok_or(overflow("size"))?;
        self.elements =
            self.elements.checked_add(mul(child.elements)?).ok_or(overflow("element count"))?;

        // Extreme offsets of a copy: first + i*stride + j*extent.
        let span = |n: i64, step: i64| -> (i128, i128) {
            let last = (n as i128 - 1) * step as i128;
            (last.min(0), last.max(0))
        };
        let (s_lo, s_hi) = span(count, stride);
        let (e_lo, e_hi) = span(blocklength, child.extent());
        let lo = first as i128 + s_lo + e_lo;
        let hi = first as i128 + s_hi + e_hi;
        let shift = |v: i64, base: i128| to_i64(base + v as i128, "displacement");
        if let Some((dlo, dhi)) = child.data {
            let (a, b) = (shift(dlo, lo)?, shift(dhi, hi)?);
            self.widen_data(a, b);
        }
        if let Some(m) = child.lb_marker {
            self.lb_marker(shift(m, lo)?);
        }
        if let Some(m) = child.ub_marker {
            self.ub_marker(shift(m, hi)?);
        }
        if child.data.is_some() {
            self.align = self.align.max(child.align);
        }
        Ok(())
    }

    /// Adds one copy of `child` at `disp`.
    pub fn copy(&mut self, child: &Layout, disp: i64) -> Result<()> {
        self.strided(child, disp, 1, 0, 1)
    }

    /// Replaces all markers by an lb marker at `lb` and a ub marker at `ub`
    /// (what `resized`, `subarray` and `darray` do).
    pub fn set_markers(&mut self, lb: i64, ub: i64) {
        self.lb_marker = Some(lb);
        self.ub_marker = Some(ub);
    }

    /// Applies the bound rules and returns the finished layout.
    pub fn finish(self) -> Result<Layout> {
        let lb = match (self.lb_marker, self.data, self.ub_marker) {
            (Some(m), _, _) => m,
            (None, Some((lo, _)), _) => lo,
            (None, None, Some(u)) => u,
            (None, None, None) => 0,
        };
        let ub = match (self.ub_marker, self.data) {
            (Some(m), _) => m,
            (None, Some((_, hi))) => {
                let span = hi as i128 - lb as i128;
                let align = self.align as i128;
                let eps = (align - span.rem_euclid(align)) % align;
                to_i64(hi as i128 + eps, "upper bound")?
            }
            (None, None) => lb,
        };
        // The extent must itself be representable, and so must the true
        // extent (markers can make the extent small while the data spans
        // more than 64 bits).
        to_i64(ub as i128 - lb as i128, "extent")?;
        if let Some((lo, hi)) = self.data {
            to_i64(hi as i128 - lo as i128, "true extent")?;
        }
        Ok(Layout {
            size: self.size,
            external32_size: self.external32_size,
            elements: self.elements,
            data: self.data,
            lb_marker: self.lb_marker,
            ub_marker: self.ub_marker,
            align: self.align,
            lb,
            ub,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(disp: i64, size: u64) -> LayoutBuilder {
        let mut b = LayoutBuilder::new();
        b.basic(disp, size, size, size as i64).unwrap();
        b
    }

    #[test]
    fn epsilon_pads_to_largest_alignment() {
        let mut b = basic(0, 8);
        b.basic(8, 1, 1, 1).unwrap();
        let l = b.finish().unwrap();
        assert_eq!((l.lb, l.ub, l.size), (0, 16, 9));
    }

    #[test]
    fn replicating_padded_type_contributes_entries_only() {
        // hvector(2, 1, 58, double_int): entries end at 70, ub = 72.
        let mut di = basic(0, 8);
        di.basic(8, 4, 4, 4).unwrap();
        let di = di.finish().unwrap();
        assert_eq!(di.extent(), 16);
        let mut hv = LayoutBuilder::new();
        hv.strided(&di, 0, 2, 58, 1).unwrap();
        let hv = hv.finish().unwrap();
        assert_eq!((hv.lb, hv.ub, hv.data), (0, 72, Some((0, 70))));
    }

    #[test]
    fn markers_are_sticky() {
        // struct {(lb,-3), (int,0), (ub,6)}: extent 9; contiguous(2) of it: lb -3, ub 15.
        let mut s = basic(0, 4);
        s.lb_marker(-3);
        s.ub_marker(6);
        let s = s.finish().unwrap();
        assert_eq!((s.lb, s.ub), (-3, 6));
        let mut c = LayoutBuilder::new();
        c.strided(&s, 0, 2, s.extent(), 1).unwrap();
        let c = c.finish().unwrap();
        assert_eq!((c.lb, c.ub, c.data), (-3, 15, Some((0, 13))));
    }

    #[test]
    fn huge_counts_are_cheap_and_overflow_is_an_error() {
        let d = basic(0, 8).finish().unwrap();
        let mut c = LayoutBuilder::new();
        c.strided(&d, 0, 1 << 40, 8, 1).unwrap();
        let c = c.finish().unwrap();
        assert_eq!(c.size, 8 << 40);
        let mut c2 = LayoutBuilder::new();
        assert_eq!(c2.strided(&c, 0, 1 << 30, c.extent(), 1), Err(ErrorKind::Overflow("size").into()));
    }
}
