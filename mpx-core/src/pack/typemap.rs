//! Datatype queries answered from the compiled programs: committing,
//! contiguity, typemap walks, signature prefixes and element counts of
//! partial items.

use std::ops::ControlFlow;

use crate::datatype::{Basic, Datatype, Signature};

use super::program::Programs;

impl Datatype {
    /// Forces compilation of the pack program now (MPI_Type_commit). Types
    /// are also compiled on first use, so calling this is optional; it moves
    /// the cost out of the first pack or send.
    ///
    /// ```
    /// use mpx::{Datatype, Region};
    /// // Compiled here, not in the first pack.
    /// let column = Datatype::vector(4, 1, 4, &Datatype::int())?.commit();
    /// let m: Vec<i32> = (0..16).collect();
    /// let packed = column.pack_to_vec(Region::of(&m[2..]), 1)?;
    /// assert_eq!(packed.len(), 16);
    /// assert_eq!(packed[4..8], 6i32.to_ne_bytes());
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn commit(self) -> Datatype {
        self.programs();
        self
    }

    /// The compiled programs of this type, compiled now on first use.
    #[inline]
    pub(crate) fn programs(&self) -> &Programs {
        Programs::of(self)
    }

    /// Whether the typemap is exactly `size()` bytes starting at offset 0 and
    /// the extent equals the size, so `count` items are one contiguous run
    /// of `count * size` bytes.
    pub fn is_contiguous(&self) -> bool {
        let l = self.layout();
        if l.lb != 0 || l.extent() as u64 != l.size {
            return false;
        }
        // A predefined type with gaps has an extent beyond its size: the
        // check above decides it, without the compiled programs (every
        // message of a primitive type asks).
        matches!(self.node().ctor, crate::datatype::Ctor::Named(_)) || self.programs().native.is_single_run(l.size)
    }

    /// Calls `f` on every basic entry of one item, in typemap order, with its
    /// byte displacement. This expands the typemap, so its cost is the number
    /// of elements; stop early by returning [`ControlFlow::Break`].
    ///
    /// ```
    /// use mpx::{Basic, Datatype};
    /// use std::ops::ControlFlow;
    /// let t = Datatype::vector(2, 1, 3, &Datatype::named("short_int").unwrap())?;
    /// let mut entries = vec![];
    /// t.for_each_entry(|b, d| { entries.push((b, d)); ControlFlow::<()>::Continue(()) });
    /// assert_eq!(entries, [(Basic::Short, 0), (Basic::Int, 4), (Basic::Short, 24), (Basic::Int, 28)]);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn for_each_entry<B>(&self, f: impl FnMut(Basic, i64) -> ControlFlow<B>) -> Option<B> {
        self.programs().typed.for_each_element(f)
    }

    /// The signature of the first `elements` basic elements of `count`
    /// items of this type, or `None` if the items have fewer elements.
    /// Whole items cost O(log count); a partial item walks its elements.
    pub fn signature_prefix(&self, count: u64, elements: u64) -> Option<Signature> {
        let per_item = self.num_elements();
        if per_item == 0 {
            return (elements == 0).then_some(Signature::EMPTY);
        }
        let whole = elements / per_item;
        if whole > count || (whole == count && !elements.is_multiple_of(per_item)) {
            return None;
        }
        let mut sig = self.signature().repeat(whole);
        let mut rest = elements % per_item;
        if rest > 0 {
            self.for_each_entry(|b, _| {
                sig = sig.concat(Signature::basic(b));
                rest -= 1;
                if rest == 0 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
        }
        Some(sig)
    }

    /// `MPI_Get_elements`: the number of whole basic elements in a message of
    /// `bytes` bytes of this type, counting those of a partial last item.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::named("double_int").unwrap();
    /// assert_eq!(t.get_elements(20), 3); // one pair and a double
    /// ```
    pub fn get_elements(&self, bytes: u64) -> u64 {
        let size = self.size();
        if size == 0 {
            return 0;
        }
        let whole = bytes / size;
        let rest = bytes % size;
        let partial = if rest == 0 { 0 } else { self.programs().typed.elements_in_prefix(rest) };
        whole.saturating_mul(self.num_elements()).saturating_add(partial)
    }
}
