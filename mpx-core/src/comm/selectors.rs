//! How operations name peers and tags: ranks, [`Any`], [`PROC_NULL`].

/// The largest user tag (`MPI_TAG_UB`). Tags are `0..=TAG_UB`.
pub const TAG_UB: i32 = i32::MAX;

/// Wildcard for a source rank or a tag (`MPI_ANY_SOURCE`, `MPI_ANY_TAG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Any;

/// The null process (`MPI_PROC_NULL`): sends to it and receives from it
/// complete at once and move no data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcNull;

/// `MPI_PROC_NULL`.
pub const PROC_NULL: ProcNull = ProcNull;

/// A destination: a rank or [`PROC_NULL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// A rank of the communicator.
    Rank(i64),
    /// The null process.
    Null,
}

/// A source selector: a rank, [`Any`] or [`PROC_NULL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A rank of the communicator.
    Rank(i64),
    /// Any source.
    Any,
    /// The null process.
    Null,
}

/// A tag selector: a tag or [`Any`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagSel {
    /// This tag.
    Tag(i64),
    /// Any tag.
    Any,
}

macro_rules! rank_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Dest { fn from(r: $t) -> Dest { Dest::Rank(r as i64) } }
        impl From<$t> for Source { fn from(r: $t) -> Source { Source::Rank(r as i64) } }
        impl From<$t> for TagSel { fn from(t: $t) -> TagSel { TagSel::Tag(t as i64) } }
    )*};
}
rank_from!(usize, u32, i32, i64);
impl From<ProcNull> for Dest {
    fn from(_: ProcNull) -> Dest {
        Dest::Null
    }
}
impl From<ProcNull> for Source {
    fn from(_: ProcNull) -> Source {
        Source::Null
    }
}
impl From<Any> for Source {
    fn from(_: Any) -> Source {
        Source::Any
    }
}
impl From<Any> for TagSel {
    fn from(_: Any) -> TagSel {
        TagSel::Any
    }
}

