//! MPI derived datatypes.
//!
//! A [`Datatype`] is an immutable, cheaply cloned handle (an `Arc`) on a node
//! of a constructor tree. Each node keeps
//! * its constructor and arguments, so it can be decoded
//!   ([`Datatype::envelope`], [`Datatype::contents`]);
//! * its layout (size, bounds, counts) computed from its
//!   children, never from an expanded typemap, with checked arithmetic;
//! * its [`Signature`];
//! * a slot for what a layer above compiles from it once (the pack engine
//!   keeps its programs there), filled on first use.
//!
//! # Lifetimes
//!
//! MPI's `MPI_Type_free` is `drop`: a datatype lives as long as a handle to
//! it, and types built from it hold their own handles, so dropping a type
//! never affects the types built from it. Commit is implicit: every type can
//! be used for communication as soon as it is built; committing only does
//! the compilation of first use eagerly.
//!
//! # Where mpx follows the standard rather than MPICH or Open MPI
//!
//! Bounds follow MPI-4.1's typemap rules for *every* constructor (the ε
//! alignment padding is computed on the resulting typemap, not inherited
//! from a child's extent), the MPI-1 lb/ub markers are sticky through every
//! replicating constructor, and an empty typemap has `lb = ub = 0`. MPICH
//! departs from the first two in some cases and Open MPI from the first and
//! the last; see `shared/conformance/README.md` for the cases. A
//! `long_double` is one basic entry of 16 bytes, so packing it copies all
//! 16 in every layout (MPICH copies only the 10 significant bytes when the
//! layout is not contiguous).

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod basic;
mod darray;
mod decode;
mod integer;
pub(crate) mod layout;
mod signature;

pub use basic::{Basic, Predefined};
pub(crate) use basic::NumClass;
pub use darray::{DistArg, Distribution, Order};
pub use decode::{consts, Combiner, Contents, Envelope};
pub use integer::Integer;
pub(crate) use integer::{int, ints};
pub use signature::Signature;

use std::any::Any;
use std::fmt;
use std::sync::{Arc, LazyLock, OnceLock};

use crate::error::{ErrorKind, Result};
use layout::{Layout, LayoutBuilder};

/// An MPI datatype: a typemap (basic types at byte displacements) plus
/// optional lb/ub markers, built from predefined types with MPI's
/// constructors.
///
/// Cloning is cheap (a reference count). Every count, displacement and size
/// is 64-bit, and a type is never expanded element by element: building and
/// querying `contiguous(2^40)` of a struct is as cheap as `contiguous(2)`.
///
/// ```
/// use mpx::Datatype;
/// // A column of a 100x100 row-major matrix of doubles.
/// let column = Datatype::vector(100, 1, 100, &Datatype::double())?;
/// assert_eq!(column.size(), 800);
/// assert_eq!(column.extent(), 99 * 800 + 8);
/// # Ok::<(), mpx::Error>(())
/// ```
///
/// # Nesting depth
///
/// A predefined type has depth 0 and every constructor adds one level to the
/// deepest type it is applied to ([`Datatype::depth`]); `subarray` and
/// `darray` add a few levels per dimension, since they are built from
/// hvector, hindexed and struct types. Types may be nested up to
/// [`Datatype::MAX_DEPTH`] levels: every operation on them (building,
/// committing, packing, external32, signatures, counts, decoding, dropping)
/// works without recursion, so on any thread's stack. A constructor whose
/// result would be deeper returns [`ErrorKind::InvalidDatatype`].
///
/// ```
/// use mpx::Datatype;
/// let mut t = Datatype::int();
/// for _ in 0..1000 {
///     t = Datatype::contiguous(1, &t)?;
/// }
/// assert_eq!((t.depth(), t.size()), (1000, 4));
/// # Ok::<(), mpx::Error>(())
/// ```
///
/// # Size written out
///
/// A type holds its children by reference, so a type may use one child
/// many times: `structure` of a type `t` twice, of that twice, and so on,
/// describes 2^k copies of `t` in k small levels. Packing compiles a type
/// into a program of loops and runs in which such repeated entries that
/// lie at evenly spaced displacements (the same child with the same block
/// length, one after another: `t` twice, of that twice, ...) become one
/// loop, so that chain stays as small as its description. Otherwise each
/// use of a child is written out in the program. A constructor whose
/// result would be more nodes written out that way than the most of
/// [`Datatype::MAX_UNFOLDED`], eight per entry of its own constructor
/// (an indexed type of many entries) and the most allowed the types it
/// holds (so that `dup`, `resized` or a vector of such a type is allowed
/// too), returns [`ErrorKind::InvalidDatatype`] rather than a type whose
/// program would not fit in memory (a type whose entries each hold a
/// different, ever larger child, level after level). Within that bound a
/// program takes memory in proportion to its nodes, up to a few kilobytes
/// a node where the native program lists a small loop's runs (at most 64)
/// in place of the loop.
///
/// ```
/// use mpx::{Datatype, ErrorKind};
/// // Twice the level below, evenly spaced: one loop a level, however deep.
/// let mut t = Datatype::double();
/// for _ in 0..60 {
///     t = Datatype::structure(&[1, 1], &[0, 16], &[t.clone(), t.clone()])?;
/// }
/// // Twice the level below, once as it is and once with a byte after it:
/// // the program doubles at every level.
/// let mut t = Datatype::double();
/// let refused = (0..60).find_map(|_| {
///     let with_byte = Datatype::structure(&[1, 1], &[0, 8], &[t.clone(), Datatype::byte()]).ok()?;
///     match Datatype::structure(&[1, 1], &[0, 16], &[t.clone(), with_byte]) {
///         Ok(next) => { t = next; None }
///         Err(e) => Some(e),
///     }
/// });
/// assert!(matches!(refused.unwrap().kind(), ErrorKind::InvalidDatatype(_)));
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Clone)]
pub struct Datatype(Arc<Node>);

pub(crate) struct Node {
    pub(crate) ctor: Ctor,
    pub(crate) layout: Layout,
    signature: Signature,
    /// The signature is all `packed` elements (see [`Datatype::is_packed`]),
    /// worked out once: every message asks.
    packed: bool,
    /// Levels of constructors below and including this one (0 for a
    /// predefined type).
    depth: u32,
    /// The nodes of the type written out where it is used
    /// ([`Ctor::unfolded_nodes`]): what its compiled program may hold.
    unfolded: u64,
    /// The most `unfolded` may be: [`Datatype::MAX_UNFOLDED`], eight per
    /// entry of its own constructor, or its children's most, whichever is
    /// more (see [Size written out](Datatype#size-written-out)).
    unfolded_most: u64,
    compiled: Compiled,
}

/// What a layer above compiles from a datatype, computed once and kept
/// with it (the pack engine's programs). Type-erased, so this module does
/// not depend on what is kept; the one module that fills the slot is the
/// one that reads it, and it downcasts to its own type.
pub(crate) type Compiled = OnceLock<Box<dyn Any + Send + Sync>>;

/// A constructor and its arguments, as given (the decoded form).
pub(crate) enum Ctor {
    Named(Predefined),
    Dup(Datatype),
    Contiguous { count: i64, old: Datatype },
    Vector { count: i64, blocklength: i64, stride: i64, old: Datatype },
    Hvector { count: i64, blocklength: i64, stride: i64, old: Datatype },
    Indexed { blocklengths: Vec<i64>, displacements: Vec<i64>, old: Datatype },
    Hindexed { blocklengths: Vec<i64>, displacements: Vec<i64>, old: Datatype },
    IndexedBlock { blocklength: i64, displacements: Vec<i64>, old: Datatype },
    HindexedBlock { blocklength: i64, displacements: Vec<i64>, old: Datatype },
    Struct { blocklengths: Vec<i64>, displacements: Vec<i64>, types: Vec<Datatype> },
    Subarray(Box<darray::SubarrayArgs>),
    Darray(Box<darray::DarrayArgs>),
    Resized { lb: i64, extent: i64, old: Datatype },
}

impl Ctor {
    /// The datatypes this node holds: the types the constructor was applied
    /// to and, for subarray and darray, the lowered type.
    pub(crate) fn children(&self) -> impl Iterator<Item = &Datatype> {
        let (some, more): (&[Datatype], Option<&Datatype>) = match self {
            Ctor::Named(_) => (&[], None),
            Ctor::Dup(old)
            | Ctor::Contiguous { old, .. }
            | Ctor::Vector { old, .. }
            | Ctor::Hvector { old, .. }
            | Ctor::Indexed { old, .. }
            | Ctor::Hindexed { old, .. }
            | Ctor::IndexedBlock { old, .. }
            | Ctor::HindexedBlock { old, .. }
            | Ctor::Resized { old, .. } => (std::slice::from_ref(old), None),
            Ctor::Struct { types, .. } => (types, None),
            Ctor::Subarray(a) => (std::slice::from_ref(&a.old), Some(&a.lowered)),
            Ctor::Darray(a) => (std::slice::from_ref(&a.old), Some(&a.lowered)),
        };
        some.iter().chain(more)
    }

    /// How many nodes the type is written out as where it is used: a
    /// predefined type's entries (and a node for a list of them), the
    /// child's nodes and a node per loop of more than one (contiguous,
    /// vector: its blocks and its count), a node for an empty one, and for
    /// a list of entries (indexed, struct) a node, plus, for each run of
    /// entries that hold the same child with the same block length at
    /// evenly spaced displacements, that child's nodes, a node for the
    /// run's loop and one for the block's if it holds more than one child. The pack engine's typed
    /// program of the type, which writes such runs as one loop too, is no
    /// longer than this (see [Size written out](Datatype#size-written-out)).
    fn unfolded_nodes(&self) -> u64 {
        let of = |t: &Datatype| t.0.unfolded;
        let more = |n: i64| u64::from(n > 1);
        match self {
            Ctor::Named(p) => {
                // A list of entries is a node beside them (the markers', empty).
                let entries = p.entries().len() as u64;
                entries + u64::from(entries != 1)
            }
            Ctor::Dup(old) | Ctor::Resized { old, .. } => of(old),
            Ctor::Subarray(a) => of(&a.lowered),
            Ctor::Darray(a) => of(&a.lowered),
            Ctor::Contiguous { count: 0, .. } => 1,
            Ctor::Contiguous { count, old } => of(old).saturating_add(more(*count)),
            Ctor::Vector { count, blocklength, old, .. } | Ctor::Hvector { count, blocklength, old, .. } => match (*count, *blocklength) {
                (0, _) | (_, 0) => 1,
                _ => of(old).saturating_add(more(*count) + more(*blocklength)),
            },
            Ctor::Indexed { blocklengths, displacements, old } | Ctor::Hindexed { blocklengths, displacements, old } => {
                runs_unfolded(blocklengths.iter().zip(displacements).map(|(&b, &d)| (b, d, old)))
            }
            Ctor::IndexedBlock { blocklength, displacements, old } | Ctor::HindexedBlock { blocklength, displacements, old } => {
                runs_unfolded(displacements.iter().map(|&d| (*blocklength, d, old)))
            }
            Ctor::Struct { blocklengths, displacements, types } => {
                runs_unfolded(blocklengths.iter().zip(displacements).zip(types).map(|((&b, &d), t)| (b, d, t)))
            }
        }
    }

    /// The entries of the constructor itself (a list's length; 1 for the
    /// others).
    fn own_entries(&self) -> u64 {
        match self {
            Ctor::Indexed { displacements, .. }
            | Ctor::Hindexed { displacements, .. }
            | Ctor::IndexedBlock { displacements, .. }
            | Ctor::HindexedBlock { displacements, .. }
            | Ctor::Struct { displacements, .. } => displacements.len() as u64,
            _ => 1,
        }
    }

    /// Moves the datatypes this node holds out, passing each to `f`.
    fn into_children(self, mut f: impl FnMut(Datatype)) {
        match self {
            Ctor::Named(_) => {}
            Ctor::Dup(old)
            | Ctor::Contiguous { old, .. }
            | Ctor::Vector { old, .. }
            | Ctor::Hvector { old, .. }
            | Ctor::Indexed { old, .. }
            | Ctor::Hindexed { old, .. }
            | Ctor::IndexedBlock { old, .. }
            | Ctor::HindexedBlock { old, .. }
            | Ctor::Resized { old, .. } => f(old),
            Ctor::Struct { types, .. } => types.into_iter().for_each(f),
            Ctor::Subarray(a) => {
                let a = *a;
                f(a.old);
                f(a.lowered);
            }
            Ctor::Darray(a) => {
                let a = *a;
                f(a.old);
                f(a.lowered);
            }
        }
    }
}

/// Dropping a node drops its children's handles, and where a handle was the
/// last one, the child's node, and so on down the tree: recursion as deep
/// as the type. Instead, the nodes this drop would free are taken out of
/// their handles and freed one at a time here, each with its children
/// already taken out.
impl Drop for Node {
    fn drop(&mut self) {
        fn orphans(ctor: Ctor, out: &mut Vec<Node>) {
            ctor.into_children(|child| {
                if let Some(node) = Arc::into_inner(child.0) {
                    out.push(node);
                }
            });
        }
        // A compiled slot may hold a handle of a type below this one (the
        // type whose programs a `dup` keeps): it goes first, while the
        // children still hold that type, so that it is never the last
        // handle, whose drop would nest here.
        drop(self.compiled.take());
        let mut pending = Vec::new();
        orphans(std::mem::replace(&mut self.ctor, Ctor::Named(Predefined::Lb)), &mut pending);
        while let Some(mut node) = pending.pop() {
            drop(node.compiled.take());
            orphans(std::mem::replace(&mut node.ctor, Ctor::Named(Predefined::Lb)), &mut pending);
            // `node` has no children left: its own drop ends here.
        }
    }
}

static PREDEFINED: LazyLock<Vec<Datatype>> = LazyLock::new(|| {
    Predefined::all()
        .map(|p| {
            let mut b = LayoutBuilder::new();
            let mut sig = Signature::EMPTY;
            for &(basic, disp) in p.entries() {
                b.basic(disp, basic.size() as u64, basic.external32_size() as u64, basic.align() as i64)
                    .expect("predefined layouts are small");
                sig = sig.concat(Signature::basic(basic));
            }
            match p {
                Predefined::Lb => b.lb_marker(0),
                Predefined::Ub => b.ub_marker(0),
                _ => {}
            }
            let layout = b.finish().expect("predefined layouts are small");
            let packed = all_packed(sig, layout.elements);
            let unfolded = Ctor::Named(p).unfolded_nodes();
            let unfolded_most = Datatype::MAX_UNFOLDED;
            Datatype(Arc::new(Node { ctor: Ctor::Named(p), layout, signature: sig, packed, depth: 0, unfolded, unfolded_most, compiled: OnceLock::new() }))
        })
        .collect()
});

/// [`Ctor::unfolded_nodes`] of a list of entries `(blocklength,
/// displacement, child)`: a node for the list, and for each run of
/// entries of the same child and block length at evenly spaced
/// displacements, the child's nodes, one for the block if it holds more
/// than one child and one for the run's loop. An empty block counts
/// nothing and ends a run.
fn runs_unfolded<'a>(entries: impl Iterator<Item = (i64, i64, &'a Datatype)>) -> u64 {
    let mut total: u64 = 1;
    // The run so far: its entry's block length and child, its last
    // displacement, and its step once it has two entries.
    let mut run: Option<(i64, &Datatype, i64, Option<i64>)> = None;
    for (b, d, t) in entries {
        if b == 0 {
            run = None;
            continue;
        }
        if let Some((rb, rt, last, step)) = &mut run {
            let same = *rb == b && Arc::ptr_eq(&rt.0, &t.0);
            let gap = d.wrapping_sub(*last);
            if same && step.is_none_or(|s| s == gap) {
                (*last, *step) = (d, Some(gap));
                continue;
            }
        }
        // The run's loop is counted whatever its length: the compiler,
        // which joins equal entries whatever types hold them, may start a
        // loop of two inside a run counted here as one entry.
        total = total.saturating_add(t.0.unfolded).saturating_add(1 + u64::from(b > 1));
        run = Some((b, t, d, None));
    }
    total
}

/// Whether `signature`, of `elements` elements, is all `packed` ones.
fn all_packed(signature: Signature, elements: u64) -> bool {
    elements > 0 && signature == Signature::basic(Basic::Packed).repeat(elements)
}

fn check_count(what: &'static str, value: i64) -> Result<()> {
    if value < 0 {
        Err(ErrorKind::InvalidCount { what, value }.into())
    } else {
        Ok(())
    }
}

fn check_lengths(what: &str, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(ErrorKind::InvalidArgument(format!(
            "{what}: blocklengths has {a} entries but displacements has {b}"
        )).into());
    }
    Ok(())
}

fn mul(a: i64, b: i64, what: &'static str) -> Result<i64> {
    a.checked_mul(b).ok_or_else(|| ErrorKind::Overflow(what).into())
}

impl Datatype {
    /// The deepest nesting of constructors a datatype may have (see
    /// [Nesting depth](Datatype#nesting-depth)).
    pub const MAX_DEPTH: usize = 1 << 17;

    /// The most nodes a datatype may be written out as where it is used
    /// beyond eight per entry of its own constructor (see
    /// [Size written out](Datatype#size-written-out)).
    pub const MAX_UNFOLDED: u64 = 1 << 22;

    fn build(ctor: Ctor, layout: Layout, signature: Signature) -> Result<Datatype> {
        let below = ctor.children().map(|c| c.0.depth).max().unwrap_or(0);
        let depth = below + 1;
        if depth as usize > Datatype::MAX_DEPTH {
            return Err(ErrorKind::InvalidDatatype(format!(
                "the type would be nested {depth} levels deep, more than the {} levels a datatype may have",
                Datatype::MAX_DEPTH
            )).into());
        }
        let unfolded = ctor.unfolded_nodes();
        let children_most = ctor.children().map(|c| c.0.unfolded_most).max().unwrap_or(0);
        let unfolded_most = Datatype::MAX_UNFOLDED.max(ctor.own_entries().saturating_mul(8)).max(children_most);
        if unfolded > unfolded_most {
            return Err(ErrorKind::InvalidDatatype(format!(
                "the type would be {unfolded} nodes written out where it is used (each child as many times as it is \
                 held), more than its {unfolded_most} (the most of {}, eight per entry of its own constructor, and \
                 the most of the types it holds)",
                Datatype::MAX_UNFOLDED
            )).into());
        }
        let packed = all_packed(signature, layout.elements);
        Ok(Datatype(Arc::new(Node { ctor, layout, signature, packed, depth, unfolded, unfolded_most, compiled: OnceLock::new() })))
    }

    /// Levels of constructors in the type: 0 for a predefined type, one
    /// more than the deepest type a constructor was applied to otherwise.
    /// At most [`Datatype::MAX_DEPTH`].
    ///
    /// ```
    /// use mpx::Datatype;
    /// let v = Datatype::vector(2, 1, 2, &Datatype::double())?;
    /// let s = Datatype::structure(&[1, 1], &[0, 32], &[v.clone(), Datatype::int()])?;
    /// assert_eq!((Datatype::double().depth(), v.depth(), s.depth()), (0, 1, 2));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn depth(&self) -> usize {
        self.0.depth as usize
    }

    /// [`Ctor::unfolded_nodes`] of the type: a bound on its typed
    /// program's nodes.
    #[cfg(test)]
    pub(crate) fn unfolded(&self) -> u64 {
        self.0.unfolded
    }

    pub(crate) fn node(&self) -> &Node {
        &self.0
    }

    // ----- predefined types -------------------------------------------------

    /// The predefined datatype `p`.
    ///
    /// ```
    /// use mpx::{Datatype, Predefined};
    /// let t = Datatype::predefined(Predefined::ShortInt);
    /// assert_eq!((t.size(), t.extent()), (6, 8));
    /// ```
    pub fn predefined(p: Predefined) -> Datatype {
        let index = Predefined::all().position(|q| q == p).expect("every predefined type is listed");
        PREDEFINED[index].clone()
    }

    /// The predefined datatype of basic type `b`.
    ///
    /// ```
    /// use mpx::{Basic, Datatype};
    /// let t = Datatype::basic(Basic::UnsignedShort);
    /// assert_eq!((t.size(), t.extent()), (2, 2));
    /// assert!(Datatype::ptr_eq(&Datatype::basic(Basic::Double), &Datatype::double()));
    /// ```
    pub fn basic(b: Basic) -> Datatype {
        Datatype::basic_ref(b).clone()
    }

    /// The datatype of basic type `b`, lent.
    pub(crate) fn basic_ref(b: Basic) -> &'static Datatype {
        &PREDEFINED[b as usize]
    }

    /// Looks a predefined type up by name (`"double"`, `"2int"`, `"lb"`, ...).
    ///
    /// ```
    /// assert_eq!(mpx::Datatype::named("long_int").unwrap().size(), 12);
    /// ```
    pub fn named(name: &str) -> Option<Datatype> {
        Predefined::from_name(name).map(Datatype::predefined)
    }

    /// `MPI_BYTE`.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::byte();
    /// assert_eq!((t.size(), t.extent()), (1, 1));
    /// // Untyped bytes match only `byte`, not `char` of the same size.
    /// assert_ne!(t.signature(), Datatype::char().signature());
    /// ```
    pub fn byte() -> Datatype {
        Datatype::basic(Basic::Byte)
    }
    /// `MPI_PACKED`.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::packed();
    /// assert_eq!(t.size(), 1);
    /// assert!(t.is_packed() && !Datatype::byte().is_packed());
    /// ```
    pub fn packed() -> Datatype {
        Datatype::basic(Basic::Packed)
    }
    /// `MPI_CHAR`.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let name = Datatype::contiguous(16, &Datatype::char())?;
    /// assert_eq!((Datatype::char().size(), name.size()), (1, 16));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn char() -> Datatype {
        Datatype::basic(Basic::Char)
    }
    /// `MPI_INT`.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::int();
    /// assert_eq!((t.size(), t.extent(), t.num_elements()), (4, 4, 1));
    /// assert_eq!(t.as_predefined().unwrap().name(), "int");
    /// ```
    pub fn int() -> Datatype {
        Datatype::basic(Basic::Int)
    }
    /// `MPI_FLOAT`.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::float();
    /// assert_eq!((t.size(), t.extent(), t.external32_size()), (4, 4, 4));
    /// ```
    pub fn float() -> Datatype {
        Datatype::basic(Basic::Float)
    }
    /// `MPI_DOUBLE`.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::double();
    /// assert_eq!((t.size(), t.extent()), (8, 8));
    /// assert_eq!(Datatype::vector(3, 1, 2, &t)?.size(), 24);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn double() -> Datatype {
        Datatype::basic(Basic::Double)
    }
    /// `MPI_LB`, the MPI-1 lower-bound marker, for use in [`Datatype::structure`].
    ///
    /// ```
    /// use mpx::Datatype;
    /// // An int whose items start 4 bytes before it.
    /// let t = Datatype::structure(&[1, 1], &[-4, 0], &[Datatype::lb_marker(), Datatype::int()])?;
    /// assert_eq!((t.lb(), t.ub(), t.size()), (-4, 4, 4));
    /// assert_eq!(Datatype::lb_marker().size(), 0);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn lb_marker() -> Datatype {
        Datatype::predefined(Predefined::Lb)
    }
    /// `MPI_UB`, the MPI-1 upper-bound marker, for use in [`Datatype::structure`].
    ///
    /// ```
    /// use mpx::Datatype;
    /// // A double padded to 16 bytes: consecutive items are 16 bytes apart.
    /// let t = Datatype::structure(&[1, 1], &[0, 16], &[Datatype::double(), Datatype::ub_marker()])?;
    /// assert_eq!((t.size(), t.extent()), (8, 16));
    /// assert_eq!(Datatype::contiguous(3, &t)?.true_extent(), 40);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn ub_marker() -> Datatype {
        Datatype::predefined(Predefined::Ub)
    }

    // ----- constructors -----------------------------------------------------

    /// `MPI_Type_contiguous`: `count` copies of `old`, each `old.extent()`
    /// after the previous.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::contiguous(3, &Datatype::int())?;
    /// assert_eq!((t.size(), t.extent()), (12, 12));
    /// assert!(Datatype::contiguous(-1, &Datatype::int()).is_err());
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn contiguous(count: impl Integer, old: &Datatype) -> Result<Datatype> {
        let count = int("count", count)?;
        check_count("count", count)?;
        let child = old.layout();
        let mut b = LayoutBuilder::new();
        b.strided(child, 0, 1, 0, count)?;
        Datatype::build(Ctor::Contiguous { count, old: old.clone() }, b.finish()?, old.signature().repeat(count as u64))
    }

    /// `MPI_Type_vector`: `count` blocks of `blocklength` copies of `old`,
    /// block starts `stride` extents of `old` apart (stride may be negative).
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::vector(2, 3, 4, &Datatype::double())?;
    /// assert_eq!((t.size(), t.extent()), (48, 56));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn vector(count: impl Integer, blocklength: impl Integer, stride: impl Integer, old: &Datatype) -> Result<Datatype> {
        let (count, blocklength, stride) = (int("count", count)?, int("blocklength", blocklength)?, int("stride", stride)?);
        let stride_bytes = mul(stride, old.extent(), "stride")?;
        Datatype::strided(count, blocklength, stride_bytes, old, |old| Ctor::Vector {
            count,
            blocklength,
            stride,
            old,
        })
    }

    /// `MPI_Type_create_hvector`: like [`vector`](Datatype::vector) with the
    /// stride in bytes.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::hvector(4, 1, 32, &Datatype::double())?;
    /// assert_eq!((t.size(), t.extent()), (32, 104));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn hvector(
        count: impl Integer,
        blocklength: impl Integer,
        stride_bytes: impl Integer,
        old: &Datatype,
    ) -> Result<Datatype> {
        let (count, blocklength) = (int("count", count)?, int("blocklength", blocklength)?);
        let stride_bytes = int("stride", stride_bytes)?;
        Datatype::strided(count, blocklength, stride_bytes, old, |old| Ctor::Hvector {
            count,
            blocklength,
            stride: stride_bytes,
            old,
        })
    }

    fn strided(
        count: i64,
        blocklength: i64,
        stride_bytes: i64,
        old: &Datatype,
        ctor: impl FnOnce(Datatype) -> Ctor,
    ) -> Result<Datatype> {
        check_count("count", count)?;
        check_count("blocklength", blocklength)?;
        let mut b = LayoutBuilder::new();
        b.strided(old.layout(), 0, count, stride_bytes, blocklength)?;
        let sig = old.signature().repeat(blocklength as u64).repeat(count as u64);
        Datatype::build(ctor(old.clone()), b.finish()?, sig)
    }

    /// `MPI_Type_indexed`: blocks of `blocklengths[i]` copies of `old` at
    /// `displacements[i]` extents of `old`.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::indexed(&[3, 1], &[4, 0], &Datatype::int())?;
    /// assert_eq!((t.size(), t.lb(), t.extent()), (16, 0, 28));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn indexed<B: Integer, D: Integer>(blocklengths: &[B], displacements: &[D], old: &Datatype) -> Result<Datatype> {
        let (blocklengths, displacements) = (&ints("blocklength", blocklengths)?, &ints("displacement", displacements)?);
        check_lengths("indexed", blocklengths.len(), displacements.len())?;
        let ext = old.extent();
        let bytes = displacements.iter().map(|&d| mul(d, ext, "displacement")).collect::<Result<Vec<_>>>()?;
        Datatype::blocks(blocklengths, &bytes, old, || Ctor::Indexed {
            blocklengths: blocklengths.to_vec(),
            displacements: displacements.to_vec(),
            old: old.clone(),
        })
    }

    /// `MPI_Type_create_hindexed`: like [`indexed`](Datatype::indexed) with
    /// displacements in bytes.
    ///
    /// ```
    /// use mpx::{unpack, Datatype, Region};
    /// // Two ints at byte 0 and one at byte 20.
    /// let t = Datatype::hindexed(&[2, 1], &[0, 20], &Datatype::int())?;
    /// assert_eq!((t.size(), t.extent()), (12, 24));
    /// let v: Vec<i32> = (0..6).collect();
    /// let mut picked = [0i32; 3];
    /// unpack(&t.pack_to_vec(Region::of(&v), 1)?, &mut 0, &mut picked)?;
    /// assert_eq!(picked, [0, 1, 5]);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn hindexed<B: Integer, D: Integer>(blocklengths: &[B], displacements_bytes: &[D], old: &Datatype) -> Result<Datatype> {
        let blocklengths = &ints("blocklength", blocklengths)?;
        let displacements_bytes = &ints("displacement", displacements_bytes)?;
        check_lengths("hindexed", blocklengths.len(), displacements_bytes.len())?;
        Datatype::blocks(blocklengths, displacements_bytes, old, || Ctor::Hindexed {
            blocklengths: blocklengths.to_vec(),
            displacements: displacements_bytes.to_vec(),
            old: old.clone(),
        })
    }

    /// `MPI_Type_create_indexed_block`: blocks of the same length at
    /// displacements in extents of `old`.
    ///
    /// ```
    /// use mpx::{unpack, Datatype, Region};
    /// // Pairs of ints starting at elements 0 and 5.
    /// let t = Datatype::indexed_block(2, &[0, 5], &Datatype::int())?;
    /// assert_eq!((t.size(), t.extent()), (16, 28));
    /// let v: Vec<i32> = (0..8).collect();
    /// let mut picked = [0i32; 4];
    /// unpack(&t.pack_to_vec(Region::of(&v), 1)?, &mut 0, &mut picked)?;
    /// assert_eq!(picked, [0, 1, 5, 6]);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn indexed_block<D: Integer>(blocklength: impl Integer, displacements: &[D], old: &Datatype) -> Result<Datatype> {
        let (blocklength, displacements) = (int("blocklength", blocklength)?, &ints("displacement", displacements)?);
        check_count("blocklength", blocklength)?;
        let ext = old.extent();
        let bytes = displacements.iter().map(|&d| mul(d, ext, "displacement")).collect::<Result<Vec<_>>>()?;
        let lens = vec![blocklength; displacements.len()];
        Datatype::blocks(&lens, &bytes, old, || Ctor::IndexedBlock {
            blocklength,
            displacements: displacements.to_vec(),
            old: old.clone(),
        })
    }

    /// `MPI_Type_create_hindexed_block`: blocks of the same length at
    /// displacements in bytes.
    ///
    /// ```
    /// use mpx::Datatype;
    /// // Pairs of floats at bytes 0 and 16.
    /// let t = Datatype::hindexed_block(2, &[0, 16], &Datatype::float())?;
    /// assert_eq!((t.size(), t.true_extent(), t.extent()), (16, 24, 24));
    /// assert!(Datatype::hindexed_block(-1, &[0], &Datatype::float()).is_err());
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn hindexed_block<D: Integer>(
        blocklength: impl Integer,
        displacements_bytes: &[D],
        old: &Datatype,
    ) -> Result<Datatype> {
        let blocklength = int("blocklength", blocklength)?;
        let displacements_bytes = &ints("displacement", displacements_bytes)?;
        check_count("blocklength", blocklength)?;
        let lens = vec![blocklength; displacements_bytes.len()];
        Datatype::blocks(&lens, displacements_bytes, old, || Ctor::HindexedBlock {
            blocklength,
            displacements: displacements_bytes.to_vec(),
            old: old.clone(),
        })
    }

    fn blocks(
        blocklengths: &[i64],
        displacements_bytes: &[i64],
        old: &Datatype,
        ctor: impl FnOnce() -> Ctor,
    ) -> Result<Datatype> {
        let types = vec![old.clone(); blocklengths.len()];
        let (layout, sig) = Datatype::struct_layout(blocklengths, displacements_bytes, &types)?;
        Datatype::build(ctor(), layout, sig)
    }

    fn struct_layout(
        blocklengths: &[i64],
        displacements: &[i64],
        types: &[Datatype],
    ) -> Result<(Layout, Signature)> {
        let mut b = LayoutBuilder::new();
        let mut sig = Signature::EMPTY;
        for ((&len, &disp), t) in blocklengths.iter().zip(displacements).zip(types) {
            check_count("blocklength", len)?;
            b.strided(t.layout(), disp, 1, 0, len)?;
            sig = sig.concat(t.signature().repeat(len as u64));
        }
        Ok((b.finish()?, sig))
    }

    /// `MPI_Type_create_struct`: blocks of `blocklengths[i]` copies of
    /// `types[i]` at byte displacements. [`Datatype::lb_marker`] and
    /// [`Datatype::ub_marker`] entries set the MPI-1 bound markers.
    ///
    /// ```
    /// use mpx::Datatype;
    /// // The standard's example: {(lb,-3), (int,0), (ub,6)} has extent 9.
    /// let t = Datatype::structure(
    ///     &[1, 1, 1], &[-3, 0, 6],
    ///     &[Datatype::lb_marker(), Datatype::int(), Datatype::ub_marker()])?;
    /// assert_eq!((t.lb(), t.extent()), (-3, 9));
    /// let two = Datatype::contiguous(2, &t)?;
    /// assert_eq!((two.lb(), two.ub(), two.size()), (-3, 15, 8));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn structure<B: Integer, D: Integer>(
        blocklengths: &[B],
        displacements_bytes: &[D],
        types: &[Datatype],
    ) -> Result<Datatype> {
        let blocklengths = &ints("blocklength", blocklengths)?;
        let displacements_bytes = &ints("displacement", displacements_bytes)?;
        check_lengths("struct", blocklengths.len(), displacements_bytes.len())?;
        if types.len() != blocklengths.len() {
            return Err(ErrorKind::InvalidArgument(format!(
                "struct: blocklengths has {} entries but types has {}",
                blocklengths.len(),
                types.len()
            )).into());
        }
        let (layout, sig) = Datatype::struct_layout(blocklengths, displacements_bytes, types)?;
        Datatype::build(
            Ctor::Struct {
                blocklengths: blocklengths.to_vec(),
                displacements: displacements_bytes.to_vec(),
                types: types.to_vec(),
            },
            layout,
            sig,
        )
    }

    /// `MPI_Type_create_resized`: the same entries with the lb/ub markers
    /// replaced by `lb` and `lb + extent`.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::resized(-8, 24, &Datatype::double())?;
    /// assert_eq!((t.lb(), t.ub(), t.true_lb(), t.true_extent()), (-8, 16, 0, 8));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn resized(lb: impl Integer, extent: impl Integer, old: &Datatype) -> Result<Datatype> {
        let (lb, extent) = (int("lb", lb)?, int("extent", extent)?);
        let ub = lb.checked_add(extent).ok_or(ErrorKind::Overflow("upper bound"))?;
        let mut b = LayoutBuilder::new();
        b.copy(old.layout(), 0)?;
        b.set_markers(lb, ub);
        Datatype::build(Ctor::Resized { lb, extent, old: old.clone() }, b.finish()?, old.signature())
    }

    /// `MPI_Type_dup`: a new handle on the same typemap, which decodes as a
    /// duplicate of `self`. Fails only if `self` is already
    /// [`Datatype::MAX_DEPTH`] levels deep.
    ///
    /// ```
    /// use mpx::{Combiner, Datatype};
    /// let d = Datatype::double().dup()?;
    /// assert_eq!((d.size(), d.envelope().combiner), (8, Combiner::Dup));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn dup(&self) -> Result<Datatype> {
        Datatype::build(Ctor::Dup(self.clone()), self.0.layout, self.signature())
    }

    /// The slot for what is compiled from this type (see [`Compiled`]).
    pub(crate) fn compiled(&self) -> &Compiled {
        &self.0.compiled
    }

    // ----- queries ----------------------------------------------------------

    pub(crate) fn layout(&self) -> &Layout {
        &self.0.layout
    }

    /// `MPI_Type_size`: bytes of data in one item (the sum of the sizes of
    /// its basic entries).
    ///
    /// ```
    /// use mpx::Datatype;
    /// // Three doubles spread over 40 bytes: the gaps are not data.
    /// let t = Datatype::vector(3, 1, 2, &Datatype::double())?;
    /// assert_eq!((t.size(), t.extent()), (24, 40));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn size(&self) -> u64 {
        self.0.layout.size
    }

    /// Bytes of one item in the external32 representation.
    ///
    /// ```
    /// use mpx::{Basic, Datatype};
    /// // `long` is 8 bytes here, 4 in external32.
    /// let t = Datatype::contiguous(3, &Datatype::basic(Basic::Long))?;
    /// assert_eq!((t.size(), t.external32_size()), (24, 12));
    /// assert_eq!(Datatype::double().external32_size(), 8);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn external32_size(&self) -> u64 {
        self.0.layout.external32_size
    }

    /// The lower bound (`MPI_Type_get_extent`).
    ///
    /// ```
    /// use mpx::Datatype;
    /// // One int at element 2: the type starts 8 bytes after its origin.
    /// let t = Datatype::indexed(&[1], &[2], &Datatype::int())?;
    /// assert_eq!((t.lb(), t.ub()), (8, 12));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn lb(&self) -> i64 {
        self.0.layout.lb
    }

    /// The upper bound.
    ///
    /// ```
    /// use mpx::Datatype;
    /// // Ints at bytes 0 and 12: the last one ends at byte 16.
    /// let t = Datatype::vector(2, 1, 3, &Datatype::int())?;
    /// assert_eq!((t.lb(), t.ub()), (0, 16));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn ub(&self) -> i64 {
        self.0.layout.ub
    }

    /// `ub - lb`: the distance between consecutive items.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::vector(3, 1, 2, &Datatype::double())?;
    /// assert_eq!(t.extent(), 40);
    /// // The second of two items starts one extent after the first.
    /// assert_eq!(Datatype::contiguous(2, &t)?.extent(), 80);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn extent(&self) -> i64 {
        self.0.layout.extent()
    }

    /// `MPI_Type_get_true_extent`'s lower bound: the lowest displacement of
    /// a basic entry, ignoring markers (0 if there is none).
    ///
    /// ```
    /// use mpx::Datatype;
    /// // An int at byte 16 of a type resized to start at 0.
    /// let t = Datatype::resized(0, 32, &Datatype::hindexed(&[1], &[16], &Datatype::int())?)?;
    /// assert_eq!((t.lb(), t.true_lb()), (0, 16));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn true_lb(&self) -> i64 {
        self.0.layout.data.map_or(0, |(lo, _)| lo)
    }

    /// The span of the basic entries, ignoring markers and padding (0 if
    /// there is none).
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::resized(0, 16, &Datatype::int())?;
    /// assert_eq!((t.extent(), t.true_extent()), (16, 4));
    /// assert_eq!(Datatype::contiguous(0, &t)?.true_extent(), 0);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn true_extent(&self) -> i64 {
        // Fits: checked when the layout was built.
        self.0.layout.data.map_or(0, |(lo, hi)| hi - lo)
    }

    /// Number of basic elements in one item (a pair type counts two).
    ///
    /// ```
    /// use mpx::Datatype;
    /// let pairs = Datatype::contiguous(3, &Datatype::named("double_int").unwrap())?;
    /// assert_eq!(pairs.num_elements(), 6);
    /// assert_eq!(Datatype::lb_marker().num_elements(), 0);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn num_elements(&self) -> u64 {
        self.0.layout.elements
    }

    /// The type signature: the sequence of basic types, as a length and hash.
    ///
    /// ```
    /// use mpx::{Basic, Datatype, Signature};
    /// let t = Datatype::vector(3, 1, 2, &Datatype::double())?;
    /// assert_eq!(t.signature().len(), 3);
    /// assert_eq!(t.signature(), Signature::basic(Basic::Double).repeat(3)); // the gaps do not count
    /// assert_eq!(t.signature(), Datatype::contiguous(3, &Datatype::double())?.signature());
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn signature(&self) -> Signature {
        self.0.signature
    }

    /// The predefined type this is, if it is one (not a duplicate of one).
    ///
    /// ```
    /// use mpx::{Basic, Datatype, Predefined};
    /// let d = Datatype::double();
    /// assert_eq!(d.as_predefined(), Some(Predefined::Basic(Basic::Double)));
    /// assert_eq!(d.dup()?.as_predefined(), None);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn as_predefined(&self) -> Option<Predefined> {
        match self.0.ctor {
            Ctor::Named(p) => Some(p),
            _ => None,
        }
    }

    /// Whether two handles refer to the same datatype object.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::contiguous(2, &Datatype::int())?;
    /// assert!(Datatype::ptr_eq(&t, &t.clone())); // a clone is another handle on it
    /// let d = t.dup()?;
    /// assert!(!Datatype::ptr_eq(&t, &d)); // a duplicate is a new object
    /// assert_eq!(t.signature(), d.signature());
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn ptr_eq(a: &Datatype, b: &Datatype) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// Whether every basic element of the type is `packed` (data of such a
    /// type matches any message, and any receiver matches it).
    ///
    /// ```
    /// use mpx::Datatype;
    /// assert!(Datatype::contiguous(16, &Datatype::packed())?.is_packed());
    /// assert!(!Datatype::byte().is_packed());
    /// assert!(!Datatype::contiguous(0, &Datatype::packed())?.is_packed(), "no elements");
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn is_packed(&self) -> bool {
        self.0.packed
    }

    // ----- status counting ---------------------------------------------------

    /// `MPI_Get_count`: the number of whole items in a message of `bytes`
    /// bytes of this type, or `None` (MPI_UNDEFINED) when a partial item
    /// arrived. A type of no data counts 0 items, whatever the bytes (MPI:
    /// "if the size of the datatype is zero, this routine will return a
    /// count of zero").
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::named("double_int").unwrap(); // 12 bytes of data
    /// assert_eq!(t.get_count(24), Some(2));
    /// assert_eq!(t.get_count(20), None);
    /// let nothing = Datatype::contiguous(0, &Datatype::int())?;
    /// assert_eq!((nothing.get_count(0), nothing.get_count(8)), (Some(0), Some(0)));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn get_count(&self, bytes: u64) -> Option<u64> {
        let size = self.size();
        if size == 0 {
            return Some(0);
        }
        bytes.is_multiple_of(size).then_some(bytes / size)
    }
}

impl fmt::Debug for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.ctor {
            Ctor::Named(p) => write!(f, "Datatype({})", p.name()),
            _ => write!(
                f,
                "Datatype({:?}, size {}, lb {}, extent {})",
                self.envelope().combiner,
                self.size(),
                self.lb(),
                self.extent()
            ),
        }
    }
}

/// The address of `value` (`MPI_Get_address`), for building types with
/// absolute displacements, to pack from absolute addresses
/// ([`pack_from_bottom`](Datatype::pack_from_bottom)). Reading through
/// the address is allowed within `value` only: take the address of the
/// whole array a type reads, not of its first element. To unpack to an
/// address, take it with [`address_of_mut`].
///
/// ```
/// let xs = [1.0f64, 2.0];
/// assert_eq!(mpx::address_of(&xs[1]) - mpx::address_of(&xs[0]), 8);
/// assert_eq!(mpx::address_of(&xs), mpx::address_of(&xs[0]));
/// ```
pub fn address_of<T: ?Sized>(value: &T) -> i64 {
    (value as *const T as *const u8).expose_provenance() as i64
}

/// The address of `value`, as [`address_of`], through which a type may
/// also write: what [`unpack_to_bottom`](Datatype::unpack_to_bottom)
/// needs. An address taken from a shared reference may only be read
/// through, whatever the memory (writing through it is undefined
/// behaviour), and either may only be used within `value`.
///
/// ```
/// use mpx::{address_of_mut, Datatype};
/// let mut xs = [0.0f64; 2];
/// let t = Datatype::structure(&[2], &[address_of_mut(&mut xs)], &[Datatype::double()])?;
/// let data: Vec<u8> = [1.5f64, 2.5].iter().flat_map(|v| v.to_ne_bytes()).collect();
/// // SAFETY: the type's one entry is `xs`, whose address was taken to
/// // write through, and `xs` is not used until the call returns.
/// unsafe { t.unpack_to_bottom(&data, &mut 0, 1)? };
/// assert_eq!(xs, [1.5, 2.5]);
/// # Ok::<(), mpx::Error>(())
/// ```
pub fn address_of_mut<T: ?Sized>(value: &mut T) -> i64 {
    (value as *mut T as *mut u8).expose_provenance() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_predefined_types_contiguity_read_from_its_layout_is_its_programs() {
        for t in PREDEFINED.iter() {
            let l = t.layout();
            let by_programs = l.lb == 0 && l.extent() as u64 == l.size && t.programs().native.is_single_run(l.size);
            let Ctor::Named(p) = t.node().ctor else { unreachable!("predefined") };
            assert_eq!(t.is_contiguous(), by_programs, "{}", p.name());
        }
        assert!(Datatype::double().is_contiguous());
        assert!(!Datatype::named("short_int").unwrap().is_contiguous(), "a gap between its short and its int");
    }

    #[test]
    fn dropping_a_child_keeps_parent_valid() {
        let s = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::char()]).unwrap();
        let v = Datatype::vector(2, 3, 4, &s).unwrap();
        drop(s);
        assert_eq!((v.size(), v.extent(), v.true_extent()), (54, 112, 105));
    }

    #[test]
    fn huge_contiguous_is_cheap() {
        let s = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::char()]).unwrap();
        let big = Datatype::contiguous(1i64 << 40, &s).unwrap();
        assert_eq!(big.size(), 9 << 40);
        assert_eq!(big.extent(), 16 << 40);
        assert_eq!(big.num_elements(), 2 << 40);
        assert!(Datatype::contiguous(1i64 << 40, &big).is_err());
    }

    #[test]
    fn invalid_arguments_are_errors() {
        let d = Datatype::double();
        assert!(matches!(Datatype::vector(1, -1, 1, &d), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidCount { .. })));
        assert!(matches!(Datatype::indexed(&[1, 2], &[0], &d), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))));
        assert!(matches!(Datatype::indexed(&[-1], &[0], &d), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidCount { .. })));
        assert!(matches!(Datatype::structure(&[1], &[0], &[]), Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))));
        assert!(matches!(Datatype::hvector(2, 1, i64::MAX, &d), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
        assert!(matches!(Datatype::resized(i64::MAX, 1, &d), Err(ref e) if matches!(e.kind(), ErrorKind::Overflow(_))));
    }

    #[test]
    fn empty_type_has_zero_bounds() {
        let e = Datatype::contiguous(0, &Datatype::double()).unwrap();
        assert_eq!((e.size(), e.lb(), e.ub(), e.true_lb(), e.true_extent()), (0, 0, 0, 0, 0));
        assert_eq!(e.get_count(0), Some(0));
        assert_eq!(e.get_elements(0), 0);
    }
}
