//! Decoding a datatype: `MPI_Type_get_envelope` and `MPI_Type_get_contents`.
//!
//! The arguments come back in the standard's order (MPI-4.1 §5.1.13), with
//! 64-bit integers. Orders and distributions, which MPI passes as integer
//! constants, are encoded with the constants in [`consts`].

use super::darray::{DistArg, Distribution, Order};
use super::{Ctor, Datatype};
use crate::error::{ErrorKind, Result};

/// Integer encodings of the enumerated arguments in [`Contents::integers`],
/// with MPICH's values.
pub mod consts {
    /// `MPI_ORDER_C`.
    pub const ORDER_C: i64 = 56;
    /// `MPI_ORDER_FORTRAN`.
    pub const ORDER_FORTRAN: i64 = 57;
    /// `MPI_DISTRIBUTE_BLOCK`.
    pub const DISTRIBUTE_BLOCK: i64 = 121;
    /// `MPI_DISTRIBUTE_CYCLIC`.
    pub const DISTRIBUTE_CYCLIC: i64 = 122;
    /// `MPI_DISTRIBUTE_NONE`.
    pub const DISTRIBUTE_NONE: i64 = 123;
    /// `MPI_DISTRIBUTE_DFLT_DARG`.
    pub const DISTRIBUTE_DFLT_DARG: i64 = -49767;
}

/// Which constructor made a datatype (`MPI_COMBINER_*`).
///
/// ```
/// use mpx::{Combiner, Datatype};
/// let t = Datatype::vector(2, 1, 4, &Datatype::int())?;
/// assert_eq!(t.envelope().combiner, Combiner::Vector);
/// assert_eq!(Datatype::int().envelope().combiner, Combiner::Named);
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Combiner {
    /// A predefined type.
    Named,
    /// `MPI_Type_dup`.
    Dup,
    /// `MPI_Type_contiguous`.
    Contiguous,
    /// `MPI_Type_vector`.
    Vector,
    /// `MPI_Type_create_hvector`.
    Hvector,
    /// `MPI_Type_indexed`.
    Indexed,
    /// `MPI_Type_create_hindexed`.
    Hindexed,
    /// `MPI_Type_create_indexed_block`.
    IndexedBlock,
    /// `MPI_Type_create_hindexed_block`.
    HindexedBlock,
    /// `MPI_Type_create_struct`.
    Struct,
    /// `MPI_Type_create_subarray`.
    Subarray,
    /// `MPI_Type_create_darray`.
    Darray,
    /// `MPI_Type_create_resized`.
    Resized,
}

impl Combiner {
    /// The lower-case name (`"named"`, `"hindexed_block"`, ...).
    ///
    /// ```
    /// use mpx::{Combiner, Datatype};
    /// let t = Datatype::hindexed_block(1, &[0, 8], &Datatype::int())?;
    /// assert_eq!(t.envelope().combiner.name(), "hindexed_block");
    /// assert_eq!(Combiner::Named.name(), "named");
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Combiner::Named => "named",
            Combiner::Dup => "dup",
            Combiner::Contiguous => "contiguous",
            Combiner::Vector => "vector",
            Combiner::Hvector => "hvector",
            Combiner::Indexed => "indexed",
            Combiner::Hindexed => "hindexed",
            Combiner::IndexedBlock => "indexed_block",
            Combiner::HindexedBlock => "hindexed_block",
            Combiner::Struct => "struct",
            Combiner::Subarray => "subarray",
            Combiner::Darray => "darray",
            Combiner::Resized => "resized",
        }
    }
}

/// What `MPI_Type_get_envelope` returns: the combiner and how many
/// arguments of each kind [`Datatype::contents`] will return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    /// Number of integer arguments.
    pub num_integers: usize,
    /// Number of address (byte displacement) arguments.
    pub num_addresses: usize,
    /// Number of datatype arguments.
    pub num_datatypes: usize,
    /// The constructor.
    pub combiner: Combiner,
}

/// What `MPI_Type_get_contents` returns: the constructor's arguments in the
/// standard's order.
#[derive(Debug, Clone)]
pub struct Contents {
    /// Integer arguments (counts, block lengths, displacements in extents,
    /// array shapes; orders and distributions as [`consts`]).
    pub integers: Vec<i64>,
    /// Address arguments (byte displacements, strides, lb/extent).
    pub addresses: Vec<i64>,
    /// Datatype arguments.
    pub datatypes: Vec<Datatype>,
}

fn order_code(o: Order) -> i64 {
    match o {
        Order::C => consts::ORDER_C,
        Order::Fortran => consts::ORDER_FORTRAN,
    }
}

fn distrib_code(d: Distribution) -> i64 {
    match d {
        Distribution::Block => consts::DISTRIBUTE_BLOCK,
        Distribution::Cyclic => consts::DISTRIBUTE_CYCLIC,
        Distribution::None => consts::DISTRIBUTE_NONE,
    }
}

fn darg_code(d: DistArg) -> i64 {
    match d {
        DistArg::Default => consts::DISTRIBUTE_DFLT_DARG,
        DistArg::Size(k) => k,
    }
}

fn counted(count: usize, rest: impl IntoIterator<Item = i64>) -> Vec<i64> {
    std::iter::once(count as i64).chain(rest).collect()
}

impl Datatype {
    /// `MPI_Type_get_envelope`.
    ///
    /// ```
    /// use mpx::{Combiner, Datatype};
    /// let t = Datatype::hvector(4, 1, 32, &Datatype::double())?;
    /// let e = t.envelope();
    /// assert_eq!((e.combiner, e.num_integers, e.num_addresses, e.num_datatypes),
    ///            (Combiner::Hvector, 2, 1, 1));
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn envelope(&self) -> Envelope {
        match self.contents_parts() {
            None => Envelope { num_integers: 0, num_addresses: 0, num_datatypes: 0, combiner: Combiner::Named },
            Some((combiner, c)) => Envelope {
                num_integers: c.integers.len(),
                num_addresses: c.addresses.len(),
                num_datatypes: c.datatypes.len(),
                combiner,
            },
        }
    }

    /// `MPI_Type_get_contents`: the arguments the type was built with.
    /// Decoding a predefined type is an error, as in MPI.
    ///
    /// ```
    /// use mpx::Datatype;
    /// let t = Datatype::indexed(&[3, 1], &[4, 0], &Datatype::int())?;
    /// let c = t.contents()?;
    /// assert_eq!(c.integers, [2, 3, 1, 4, 0]);
    /// assert_eq!(c.datatypes[0].as_predefined(), Datatype::int().as_predefined());
    /// assert!(Datatype::int().contents().is_err());
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn contents(&self) -> Result<Contents> {
        self.contents_parts().map(|(_, c)| c).ok_or_else(|| {
            ErrorKind::InvalidDatatype("a predefined datatype has no contents to decode".into()).into()
        })
    }

    fn contents_parts(&self) -> Option<(Combiner, Contents)> {
        let c = |combiner, integers, addresses, datatypes| Some((combiner, Contents { integers, addresses, datatypes }));
        match &self.node().ctor {
            Ctor::Named(_) => None,
            Ctor::Dup(old) => c(Combiner::Dup, vec![], vec![], vec![old.clone()]),
            Ctor::Contiguous { count, old } => c(Combiner::Contiguous, vec![*count], vec![], vec![old.clone()]),
            Ctor::Vector { count, blocklength, stride, old } => {
                c(Combiner::Vector, vec![*count, *blocklength, *stride], vec![], vec![old.clone()])
            }
            Ctor::Hvector { count, blocklength, stride, old } => {
                c(Combiner::Hvector, vec![*count, *blocklength], vec![*stride], vec![old.clone()])
            }
            Ctor::Indexed { blocklengths, displacements, old } => c(
                Combiner::Indexed,
                counted(blocklengths.len(), blocklengths.iter().chain(displacements).copied()),
                vec![],
                vec![old.clone()],
            ),
            Ctor::Hindexed { blocklengths, displacements, old } => c(
                Combiner::Hindexed,
                counted(blocklengths.len(), blocklengths.iter().copied()),
                displacements.clone(),
                vec![old.clone()],
            ),
            Ctor::IndexedBlock { blocklength, displacements, old } => c(
                Combiner::IndexedBlock,
                counted(displacements.len(), std::iter::once(*blocklength).chain(displacements.iter().copied())),
                vec![],
                vec![old.clone()],
            ),
            Ctor::HindexedBlock { blocklength, displacements, old } => c(
                Combiner::HindexedBlock,
                vec![displacements.len() as i64, *blocklength],
                displacements.clone(),
                vec![old.clone()],
            ),
            Ctor::Struct { blocklengths, displacements, types } => c(
                Combiner::Struct,
                counted(blocklengths.len(), blocklengths.iter().copied()),
                displacements.clone(),
                types.clone(),
            ),
            Ctor::Subarray(a) => c(
                Combiner::Subarray,
                counted(
                    a.sizes.len(),
                    a.sizes.iter().chain(&a.subsizes).chain(&a.starts).copied().chain([order_code(a.order)]),
                ),
                vec![],
                vec![a.old.clone()],
            ),
            Ctor::Darray(a) => {
                let mut ints = vec![a.size, a.rank, a.gsizes.len() as i64];
                ints.extend(&a.gsizes);
                ints.extend(a.distribs.iter().map(|&d| distrib_code(d)));
                ints.extend(a.dargs.iter().map(|&d| darg_code(d)));
                ints.extend(&a.psizes);
                ints.push(order_code(a.order));
                c(Combiner::Darray, ints, vec![], vec![a.old.clone()])
            }
            Ctor::Resized { lb, extent, old } => c(Combiner::Resized, vec![], vec![*lb, *extent], vec![old.clone()]),
        }
    }
}
