//! The compiled form of a datatype: a small tree of copy operations.
//!
//! Committing a datatype lowers its constructor tree into an [`Op`] tree made
//! of three node kinds:
//! * `Leaf`: `len` contiguous bytes at offset 0,
//! * `Repeat`: `count` copies of a body, `stride` bytes apart,
//! * `Seq`: children at byte displacements, in typemap order.
//!
//! Smart constructors normalise the tree as it is built: adjacent leaves
//! merge into one run, a repeat whose stride equals its leaf's length
//! becomes one longer leaf, nested repeats whose strides compose fuse into
//! one, and single-child sequences hoist their offset outward. So a
//! contiguous type becomes one leaf (one `memcpy`), a vector of doubles one
//! strided loop, and a subarray face one loop however many dimensions it
//! was written with. The tree's size follows the constructor tree, never the
//! element count.
//!
//! Each datatype has two programs ([`Programs`]): `typed`, an [`Op`] tree
//! whose leaves are runs of one basic type (used for external32 conversion,
//! element counts and typemap walks), and `native`, a [`Native`] tree for
//! native pack/unpack, the hot path (see [`super::exec`]).
//!
//! # Native programs
//!
//! The native program is the typed one with type boundaries erased (so
//! heterogeneous neighbours merge into one run) and then lowered for
//! execution: every subtree that is *flat* becomes one [`Gather`], the list
//! of its byte runs `(offset, len)` in stream order. A subtree is flat when
//! it has at most [`FLAT_RUNS`] runs, or at most twice as many runs as tree
//! nodes (a sequence of leaves, such as an indexed type); so flattening
//! never expands a type by its element count, and `Repeat`s with large
//! counts stay loops. What remains above the gathers is `Repeat` and `Seq`.
//!
//! Each gather also carries a copy [`Plan`], chosen once here so that the
//! executor's inner loops never test run lengths. Every plan copies exactly
//! the typemap's bytes with fixed-size moves, which may overlap each other
//! inside a run but never leave it:
//! * [`Plan::Run`]: a single run (a vector's block, a face's element or
//!   row): a loop compiled for its length if it is at most 32, or 40, 48,
//!   56, 64; if it is too long for `Moves`, one bulk copy per item, with
//!   the next item's first line prefetched (see `exec::long_runs`).
//! * [`Plan::Moves`]: a few runs per item (a struct). Each run is covered by
//!   moves of the widest power of two that fits it (at most [`MAX_WIDTH`]),
//!   plus one narrower move ending at the run's end for the rest ([`Tails`]):
//!   the `{int; double; char[3]}` struct's runs (0, 4) and (8, 11) are a
//!   4-byte move, an 8-byte one, and a 4-byte one at 15 overlapping the
//!   8-byte one by a byte. The moves are precomputed as (memory offset,
//!   stream offset) pairs grouped by width, at most [`MAX_MOVES`] per width.
//! * [`Plan::Overlap`]: many runs (an irregular indexed type), each covered
//!   by the same number `k` of moves of the shortest run's width at offsets
//!   `min(i * width, len - width)`, whatever its length: a branch-free loop.
//! * [`Plan::Bytes`]: runs too long or too uneven for those; each run is a
//!   `memcpy` or a short overlapping-word copy.
//!
//! # Displacement arithmetic
//!
//! Every byte of a type's data lies at a displacement that fits in an `i64`
//! (the layout checks it when the type is built), but the origins of
//! subtrees on the way there need not: a member whose data lies far after
//! its own origin, placed far before the struct's. Displacements along a
//! path are therefore summed modulo 2^64 (`wrapping_add`, `wrapping_mul`),
//! like the pointer arithmetic they feed (`wrapping_offset`): the sums that
//! locate data are the exact values, since those fit.

use std::ops::ControlFlow;

use crate::datatype::{Basic, Ctor, Datatype};

/// One node of a compiled program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// `len` contiguous bytes at offset 0; in a typed program, `len /
    /// kind.size()` elements of `kind`.
    Leaf { kind: Option<Basic>, len: usize },
    /// `count` copies of `body`, `stride` bytes apart (`count >= 2`).
    Repeat { count: u64, stride: i64, body: Box<Op> },
    /// Children at byte displacements, executed in order.
    Seq(Vec<(i64, Op)>),
}

/// The compiled programs of one datatype.
#[derive(Debug)]
pub(crate) struct Programs {
    /// Leaves are runs of a single basic type.
    pub typed: Op,
    /// Byte runs with copy plans; the hot path.
    pub native: Native,
    /// Whether some element's external32 form may have no native form
    /// (a `long double`), so unpacking external32 checks the data first.
    pub external32_checked: bool,
    /// What the structure of the program tells of the bytes one item
    /// writes ([`Op::writes`]): a receive into a type known to
    /// write each byte once needs no look at its runs (see
    /// [`disjoint::check_writes_once`](super::disjoint::check_writes_once)).
    pub writes: Writes,
}

/// What a program's structure tells of the bytes it writes, found from its
/// nodes without walking its runs ([`Op::writes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writes {
    /// No byte.
    Nothing,
    /// Each byte at most once, all within `[lo, hi)` of the origin. `comb`:
    /// the program is `count` copies, `stride` bytes apart (`stride > 0`),
    /// of something `width` bytes wide, so that copies of the whole program
    /// placed closer than its span may still fall into its gaps.
    Once { lo: i128, hi: i128, comb: Option<(u64, i128, i128)> },
    /// Perhaps some byte twice.
    Unknown,
}

impl Writes {
    /// What `count` copies of something that writes `self`, `stride` bytes
    /// apart, write: each byte once if each copy ends before the next
    /// begins, or if the copies fall into each other's gaps (a comb of
    /// blocks whose copies fit side by side between two of its teeth: a
    /// column type resized to one element's extent, repeated).
    pub fn repeated(self, count: u64, stride: i64) -> Writes {
        let Writes::Once { lo, hi, comb } = self else { return self };
        if count <= 1 {
            return self;
        }
        // (Saturating: a type's data spans fit in 64 bits, but a count
        // given to a receive need not make sense with its extent.)
        let (stride, last) = (stride as i128, count as i128 - 1);
        let reach = last.saturating_mul(stride);
        let (first_lo, last_hi) = (lo.saturating_add(reach.min(0)), hi.saturating_add(reach.max(0)));
        if stride.abs() >= hi - lo {
            return Writes::Once { lo: first_lo, hi: last_hi, comb: (stride > 0).then_some((count, stride, hi - lo)) };
        }
        match comb {
            Some((_, teeth, width)) if stride > 0 && width <= stride && reach.saturating_add(width) <= teeth => {
                Writes::Once { lo: first_lo, hi: last_hi, comb: None }
            }
            _ => Writes::Unknown,
        }
    }

    /// Whether each byte is known to be written at most once.
    pub fn at_most_once(self) -> bool {
        !matches!(self, Writes::Unknown)
    }
}

impl Programs {
    /// Compiles the programs of `dt` and of every type below it that has
    /// none yet, children first, and returns those of `dt`.
    ///
    /// A type's typed program is built from its children's, so they are
    /// compiled first; the walk keeps its own stack rather than recursing,
    /// since types may nest [`Datatype::MAX_DEPTH`] levels deep. (The
    /// programs themselves stay shallow: a `Repeat` of a non-empty body at
    /// least doubles the bytes packed, and `Seq`s never nest directly, so a
    /// program is at most about 128 nodes deep whatever the type's depth.)
    pub fn compile(dt: &Datatype) -> &Programs {
        // (type, whether its children have been pushed)
        let mut stack: Vec<(&Datatype, bool)> = vec![(dt, false)];
        while let Some((t, children_done)) = stack.pop() {
            if Programs::cached(t).is_some() {
                continue;
            }
            if children_done {
                t.compiled().get_or_init(|| match same_programs_as(t) {
                    Some(base) => Box::new(SameAs(base)),
                    None => Box::new(Programs::compile_one(t)),
                });
                continue;
            }
            stack.push((t, true));
            stack.extend(program_inputs(t).filter(|c| Programs::cached(c).is_none()).map(|c| (c, false)));
        }
        Programs::cached(dt).expect("compiled above")
    }

    /// The programs of `dt`, compiled now if they were not yet.
    #[inline]
    pub fn of(dt: &Datatype) -> &Programs {
        match Programs::cached(dt) {
            Some(p) => p,
            None => Programs::compile(dt),
        }
    }

    /// The programs of `dt` if they are compiled. The datatype's slot
    /// holds what this module put there: its `Programs`, or [`SameAs`] the
    /// type whose programs they are (whose slot holds `Programs`).
    #[inline]
    fn cached(dt: &Datatype) -> Option<&Programs> {
        let any = dt.compiled().get()?;
        match any.downcast_ref::<Programs>() {
            Some(programs) => Some(programs),
            None => {
                let SameAs(base) = any.downcast_ref::<SameAs>().expect("a datatype's compiled slot holds Programs or SameAs");
                base.compiled().get()?.downcast_ref::<Programs>()
            }
        }
    }

    /// Compiles the programs of `dt`, whose inputs are compiled.
    fn compile_one(dt: &Datatype) -> Programs {
        let typed = compile_typed(dt);
        let erased = typed.erase_kinds();
        let native = Native::lower(&erased);
        let external32_checked = typed.has_kind(super::external32::decode_can_fail);
        // From the program before it is lowered, where loops show copies
        // that fall into each other's gaps (a comb), and failing that from
        // the lowered one, whose gathers list small subtrees' runs (two
        // interleaved arrays of a struct): each answer that vouches for
        // the type is sound.
        let writes = match erased.writes() {
            Writes::Unknown => match native.writes() {
                Writes::Unknown => listed_runs_write(&erased),
                known => known,
            },
            known => known,
        };
        Programs { typed, native, external32_checked, writes }
    }
}

/// What the compiled slot of a type whose programs are another's holds
/// (a `dup` or `resized` type, a subarray or darray, which compile to
/// their lowered form): that other type, which compiles them. A chain of
/// such types, however long, keeps one copy of the programs, not one per
/// level, and finds them in two steps.
struct SameAs(Datatype);

/// The type whose programs are `dt`'s, if `dt` is not the one to compile
/// them (see [`SameAs`]); its inputs are compiled.
fn same_programs_as(dt: &Datatype) -> Option<Datatype> {
    let target = match &dt.node().ctor {
        Ctor::Dup(old) | Ctor::Resized { old, .. } => old,
        Ctor::Subarray(a) => &a.lowered,
        Ctor::Darray(a) => &a.lowered,
        _ => return None,
    };
    let any = target.compiled().get().expect("inputs are compiled first");
    Some(match any.downcast_ref::<SameAs>() {
        Some(SameAs(base)) => base.clone(),
        None => target.clone(),
    })
}

/// The most runs [`listed_runs_write`] lists (16 bytes each, once per type).
const LISTED_RUNS_MOST: u64 = 1 << 20;

/// What `op` writes, from its runs listed and sorted, where neither its
/// structure nor its lowered form vouches for it (two loops of single runs
/// interleaved: an indexed type listing the real parts of an array, then
/// its imaginary parts), for programs of at most [`LISTED_RUNS_MOST`] runs.
fn listed_runs_write(op: &Op) -> Writes {
    if op.run_count() > LISTED_RUNS_MOST {
        return Writes::Unknown;
    }
    let mut runs = Vec::with_capacity(op.run_count() as usize);
    op.collect_runs(0, &mut runs);
    runs_write(&runs)
}

/// What byte runs `(offset, len)` write: [`parts_write`] of runs that each
/// write their bytes once.
fn runs_write(runs: &[(i64, usize)]) -> Writes {
    parts_write(runs.iter().map(|&(offset, len)| (offset, Writes::Once { lo: 0, hi: len as i128, comb: None })))
}

/// The types whose programs the typed program of `dt` is built from.
fn program_inputs(dt: &Datatype) -> impl Iterator<Item = &Datatype> {
    let lowered = match &dt.node().ctor {
        Ctor::Subarray(a) => Some(&a.lowered),
        Ctor::Darray(a) => Some(&a.lowered),
        _ => None,
    };
    // Subarrays and darrays are compiled from their lowered form only.
    let direct = if lowered.is_some() { None } else { Some(dt.node().ctor.children()) };
    direct.into_iter().flatten().chain(lowered)
}

/// One node of a native program (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Native {
    /// The byte runs of a flat subtree, with their copy plan.
    Gather(Gather),
    /// `count` copies of `body`, `stride` bytes apart (`count >= 2`).
    Repeat { count: u64, stride: i64, body: Box<Native> },
    /// Children at byte displacements, executed in order.
    Seq(Box<[(i64, Native)]>),
}

/// A subtree with at most this many runs is always flattened into a
/// [`Gather`].
pub(crate) const FLAT_RUNS: u64 = 64;

/// The most moves of one width a [`Plan::Moves`] item, or a
/// [`Plan::Overlap`] run, may take.
pub(crate) const MAX_MOVES: usize = 8;

/// The widest move, in bytes (one SSE register).
pub(crate) const MAX_WIDTH: usize = 16;

/// The move counts [`Plan::Moves`] kernels exist for; a plan is padded up to
/// the next one by repeating its last move.
pub(crate) const MOVE_COUNTS: [usize; 6] = [1, 2, 3, 4, 6, 8];

/// Byte runs of one item, in stream order, and how to copy them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gather {
    /// `(offset, len)` of each run: `len > 0`, no run starting where the
    /// previous one ends (those are merged).
    pub runs: Box<[(i64, usize)]>,
    /// Bytes one item packs (the sum of the run lengths).
    pub size: usize,
    pub plan: Plan,
}

/// How a [`Gather`]'s runs are copied; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// One run of `len` bytes at `offset`: a loop compiled for its length
    /// if there is one ([`has_run_kernel`]), else one bulk copy per item
    /// (for runs too long for [`Plan::Moves`]).
    Run { offset: i64, len: usize },
    /// One item is exactly these groups of fixed-size moves, widest first.
    Moves(Box<[Moves]>),
    /// Every run is copied by `k` moves of `width` bytes at run offsets
    /// `min(i * width, len - width)`; `width <= len <= k * width` for every
    /// run, and `k` is 1, 2, 4 or 8.
    Overlap { width: usize, k: usize },
    /// Each run is copied on its own.
    Bytes,
}

/// The moves of one width in a [`Plan::Moves`] item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Moves {
    /// Bytes per move: 1, 2, 4, 8 or 16.
    pub width: usize,
    /// (memory offset, stream offset) of each move; their number is one of
    /// [`MOVE_COUNTS`].
    pub moves: Box<[(i64, usize)]>,
}

impl Native {
    /// Lowers an erased (native) [`Op`] tree.
    fn lower(op: &Op) -> Native {
        let runs = op.run_count();
        if runs <= FLAT_RUNS.max(2 * op.node_count()) {
            let mut out = Vec::with_capacity(runs as usize);
            op.collect_runs(0, &mut out);
            return Native::Gather(Gather::new(out));
        }
        match op {
            Op::Leaf { .. } => unreachable!("a leaf is one run"),
            Op::Repeat { count, stride, body } => {
                Native::Repeat { count: *count, stride: *stride, body: Box::new(Native::lower(body)) }
            }
            Op::Seq(items) => Native::Seq(items.iter().map(|(d, op)| (*d, Native::lower(op))).collect()),
        }
    }

    /// What the program writes, as far as its structure tells (see
    /// [`Op::writes`]): a gather's runs are looked at one by one, and
    /// sorted only if they do not ascend.
    pub fn writes(&self) -> Writes {
        match self {
            Native::Gather(g) => {
                let span = |&(offset, len): &(i64, usize)| (offset as i128, offset as i128 + len as i128);
                // Most gathers' runs ascend: no list of them then.
                if g.runs.windows(2).all(|w| span(&w[0]).1 <= span(&w[1]).0) {
                    return match (g.runs.first(), g.runs.last()) {
                        (Some(first), Some(last)) => Writes::Once { lo: span(first).0, hi: span(last).1, comb: None },
                        _ => Writes::Nothing,
                    };
                }
                runs_write(&g.runs)
            }
            Native::Repeat { count, stride, body } => body.writes().repeated(*count, *stride),
            Native::Seq(items) => parts_write(items.iter().map(|(d, op)| (*d, op.writes()))),
        }
    }

    /// Whether the program is one run of `size` bytes at offset 0.
    pub fn is_single_run(&self, size: u64) -> bool {
        match self {
            Native::Gather(g) => match *g.runs {
                [] => size == 0,
                [(0, len)] => len as u64 == size,
                _ => false,
            },
            Native::Seq(items) => size == 0 && items.is_empty(),
            Native::Repeat { .. } => false,
        }
    }
}

impl Gather {
    pub fn new(runs: Vec<(i64, usize)>) -> Gather {
        let size = runs.iter().map(|&(_, len)| len).sum();
        let plan = Plan::choose(&runs);
        Gather { runs: runs.into(), size, plan }
    }

    /// The single run `(offset, len)`, if there is exactly one.
    pub fn single_run(&self) -> Option<(i64, usize)> {
        match *self.runs {
            [run] => Some(run),
            _ => None,
        }
    }
}

/// What parts at displacements write, given what each writes from its own
/// origin (`(displacement, writes)`, as [`Op::writes`] and
/// [`Native::writes`] list a sequence's items or a gather's runs): each
/// byte once if every part writes each of its bytes once and no two
/// parts' spans meet (sorted first unless they ascend). A sum that leaves
/// 64 bits tells nothing (a program's displacements wrap, see the module
/// docs).
fn parts_write(parts: impl Iterator<Item = (i64, Writes)>) -> Writes {
    let fits = |v: i128| (i64::MIN as i128..=i64::MAX as i128).contains(&v);
    let mut spans: Vec<(i128, i128)> = Vec::new();
    let mut ascending = true;
    for (d, writes) in parts {
        let (lo, hi) = match writes {
            Writes::Nothing => continue,
            Writes::Once { lo, hi, .. } => (lo + d as i128, hi + d as i128),
            Writes::Unknown => return Writes::Unknown,
        };
        if !fits(lo) || !fits(hi) {
            return Writes::Unknown;
        }
        ascending &= spans.last().is_none_or(|&(_, end)| lo >= end);
        spans.push((lo, hi));
    }
    if !ascending {
        spans.sort_unstable();
        if spans.windows(2).any(|w| w[1].0 < w[0].1) {
            return Writes::Unknown;
        }
    }
    match (spans.first(), spans.iter().map(|s| s.1).max()) {
        (Some(&(lo, _)), Some(hi)) => Writes::Once { lo, hi, comb: None },
        _ => Writes::Nothing,
    }
}

/// Whether [`Plan::Run`] has a kernel for runs of `len` bytes: every length
/// up to 32, and multiples of 8 up to 64.
pub(crate) fn has_run_kernel(len: usize) -> bool {
    (1..=32).contains(&len) || (len <= 64 && len.is_multiple_of(8))
}

/// The widest move for a run of `len > 0` bytes: the largest power of two
/// not above `len` or [`MAX_WIDTH`].
fn width_for(len: usize) -> usize {
    1 << len.min(MAX_WIDTH).ilog2()
}

impl Plan {
    fn choose(runs: &[(i64, usize)]) -> Plan {
        match *runs {
            [] => return Plan::Bytes,
            [(offset, len)] if has_run_kernel(len) => return Plan::Run { offset, len },
            _ => {}
        }
        if let Some(groups) = Plan::moves(runs) {
            return Plan::Moves(groups);
        }
        if let [(offset, len)] = *runs {
            return Plan::Run { offset, len };
        }
        // Too many moves for one item: cover every run alike with moves as
        // wide as the shortest run allows.
        let width = runs.iter().map(|&(_, len)| width_for(len)).min().expect("runs are not empty");
        let k = runs.iter().map(|&(_, len)| len.div_ceil(width)).max().expect("runs are not empty");
        if k <= MAX_MOVES {
            return Plan::Overlap { width, k: k.next_power_of_two() };
        }
        Plan::Bytes
    }

    /// The moves of one item grouped by width, widest first, or `None` if
    /// some width needs more than [`MAX_MOVES`] moves. Runs are split with
    /// narrow tails ([`Tails::Narrow`]) unless that needs more widths than
    /// tails as wide as their run.
    fn moves(runs: &[(i64, usize)]) -> Option<Box<[Moves]>> {
        let narrow = Plan::group(runs, Tails::Narrow);
        if narrow.as_ref().is_some_and(|groups| groups.len() <= 2) {
            return narrow;
        }
        match (narrow, Plan::group(runs, Tails::Wide)) {
            (Some(narrow), Some(wide)) if narrow.len() <= wide.len() => Some(narrow),
            (narrow, None) => narrow,
            (_, wide) => wide,
        }
    }

    fn group(runs: &[(i64, usize)], tails: Tails) -> Option<Box<[Moves]>> {
        // Moves of width 1 << i in by_width[i].
        let mut by_width: [Vec<(i64, usize)>; 5] = Default::default();
        let mut pos = 0;
        for &(off, len) in runs {
            for (o, width) in tails.split(len) {
                let moves = &mut by_width[width.ilog2() as usize];
                moves.push((off + o as i64, pos + o));
                if moves.len() > MAX_MOVES {
                    return None;
                }
            }
            pos += len;
        }
        let groups = by_width.into_iter().enumerate().rev().filter(|(_, moves)| !moves.is_empty());
        Some(
            groups
                .map(|(i, mut moves)| {
                    // Pad to a kernel's move count by repeating the last move.
                    let k = *MOVE_COUNTS.iter().find(|&&k| k >= moves.len()).expect("at most MAX_MOVES moves");
                    moves.resize(k, *moves.last().expect("not empty"));
                    Moves { width: 1 << i, moves: moves.into() }
                })
                .collect(),
        )
    }
}

/// How a run that is not a multiple of its width ends.
#[derive(Clone, Copy)]
enum Tails {
    /// With a move of the narrowest width that covers the rest, ending at
    /// the run's end: 12 bytes are 8 + 4, 11 bytes 8 + 4 (overlapping one
    /// byte). Exact where it can be; overlapping stores are slower than a
    /// narrower one.
    Narrow,
    /// With a move of the run's width ending at its end: 12 bytes are two
    /// overlapping 8-byte moves. One width per run.
    Wide,
}

impl Tails {
    /// The moves covering a run of `len > 0` bytes: (offset, width).
    fn split(self, len: usize) -> impl Iterator<Item = (usize, usize)> {
        let width = width_for(len);
        let rest = len % width;
        let tail = match self {
            Tails::Narrow => rest.next_power_of_two(),
            Tails::Wide => width,
        };
        (0..len / width).map(move |i| (i * width, width)).chain((rest > 0).then_some((len - tail, tail)))
    }
}

fn compile_typed(dt: &Datatype) -> Op {
    let child = |old: &Datatype| Programs::cached(old).expect("inputs are compiled first").typed.clone();
    let block = |len: i64, old: &Datatype| Op::repeat(len as u64, old.extent(), child(old));
    // Products below were checked when the type was built (strides and
    // displacements in extents, converted to bytes).
    match &dt.node().ctor {
        Ctor::Named(p) => Op::seq(
            p.entries().iter().map(|&(b, d)| (d, Op::Leaf { kind: Some(b), len: b.size() })).collect(),
        ),
        // Those keep the programs of the type they name (`SameAs`) and are
        // never compiled here; these are the programs they would have.
        Ctor::Dup(old) | Ctor::Resized { old, .. } => child(old),
        Ctor::Subarray(a) => child(&a.lowered),
        Ctor::Darray(a) => child(&a.lowered),
        Ctor::Contiguous { count, old } => block(*count, old),
        Ctor::Vector { count, blocklength, stride, old } => {
            Op::repeat(*count as u64, stride * old.extent(), block(*blocklength, old))
        }
        Ctor::Hvector { count, blocklength, stride, old } => {
            Op::repeat(*count as u64, *stride, block(*blocklength, old))
        }
        Ctor::Indexed { blocklengths, displacements, old } => Op::entries(
            blocklengths.iter().zip(displacements).map(|(&n, &d)| (d * old.extent(), block(n, old))),
        ),
        Ctor::IndexedBlock { blocklength, displacements, old } => Op::entries(
            displacements.iter().map(|&d| (d * old.extent(), block(*blocklength, old))),
        ),
        Ctor::Hindexed { blocklengths, displacements, old } => {
            Op::entries(blocklengths.iter().zip(displacements).map(|(&n, &d)| (d, block(n, old))))
        }
        Ctor::HindexedBlock { blocklength, displacements, old } => {
            Op::entries(displacements.iter().map(|&d| (d, block(*blocklength, old))))
        }
        Ctor::Struct { blocklengths, displacements, types } => Op::entries(
            blocklengths.iter().zip(displacements).zip(types).map(|((&n, &d), t)| (d, block(n, t))),
        ),
    }
}

impl Op {
    pub fn empty() -> Op {
        Op::Seq(Vec::new())
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, Op::Seq(v) if v.is_empty())
    }

    /// `count` copies of `body`, `stride` bytes apart, normalised.
    pub fn repeat(count: u64, stride: i64, body: Op) -> Op {
        if count == 0 || body.is_empty() {
            return Op::empty();
        }
        if count == 1 {
            return body;
        }
        match body {
            // Bytes of data: the type's size, which fits.
            Op::Leaf { kind, len } if stride == len as i64 => Op::Leaf { kind, len: len * count as usize },
            Op::Seq(mut items) if items.len() == 1 => {
                let (d, inner) = items.pop().expect("one item");
                Op::seq(vec![(d, Op::repeat(count, stride, inner))])
            }
            Op::Repeat { count: m, stride: t, body: inner }
                if (m as i64).checked_mul(t) == Some(stride) =>
            {
                Op::repeat(count * m, t, *inner)
            }
            body => Op::Repeat { count, stride, body: Box::new(body) },
        }
    }

    /// The entries of an indexed or struct type, in typemap order: each
    /// run of equal entries at evenly spaced displacements becomes one
    /// loop (runs of a leaf that touch, one longer leaf), so a type that
    /// holds a child twice, level after level, compiles to a loop per
    /// level rather than to every copy (see
    /// [Size written out](crate::Datatype#size-written-out)).
    fn entries(items: impl Iterator<Item = (i64, Op)>) -> Op {
        // Each run: its first displacement, its step, its length, its entry.
        let mut runs: Vec<(i64, i64, u64, Op)> = Vec::new();
        for (d, op) in items {
            if let Some((first, step, count, entry)) = runs.last_mut() {
                let next = first.wrapping_add(step.wrapping_mul(*count as i64));
                let gap = d.wrapping_sub(*first);
                let spaced = if *count == 1 { true } else { d == next };
                if spaced && op == *entry {
                    if *count == 1 {
                        *step = gap;
                    }
                    *count += 1;
                    continue;
                }
            }
            runs.push((d, 0, 1, op));
        }
        Op::seq(runs.into_iter().map(|(d, step, count, op)| (d, Op::repeat(count, step, op))).collect())
    }

    /// Children at displacements, flattened and with adjacent leaves of the
    /// same kind merged.
    pub fn seq(items: Vec<(i64, Op)>) -> Op {
        let mut out = Vec::with_capacity(items.len());
        for (d, op) in items {
            push_flat(&mut out, d, op);
        }
        if out.len() == 1 && out[0].0 == 0 {
            return out.pop().expect("one item").1;
        }
        Op::Seq(out)
    }

    /// The same program with leaf kinds erased, so neighbouring runs of
    /// different types merge.
    pub fn erase_kinds(&self) -> Op {
        match self {
            Op::Leaf { len, .. } => Op::Leaf { kind: None, len: *len },
            Op::Repeat { count, stride, body } => Op::repeat(*count, *stride, body.erase_kinds()),
            Op::Seq(items) => Op::seq(items.iter().map(|(d, op)| (*d, op.erase_kinds())).collect()),
        }
    }

    /// What the program writes, as far as its structure tells: a walk of
    /// its nodes (a `Repeat` is looked at once; a `Seq`'s items' spans are
    /// sorted only if they do not ascend). Displacements are summed
    /// exactly: a sum that leaves 64 bits (a program's displacements wrap,
    /// see the module docs) tells nothing.
    pub fn writes(&self) -> Writes {
        match self {
            Op::Leaf { len: 0, .. } => Writes::Nothing,
            Op::Leaf { len, .. } => Writes::Once { lo: 0, hi: *len as i128, comb: None },
            Op::Repeat { count, stride, body } => body.writes().repeated(*count, *stride),
            Op::Seq(items) => parts_write(items.iter().map(|(d, op)| (*d, op.writes()))),
        }
    }

    /// Bytes the program packs.
    pub fn size(&self) -> u64 {
        match self {
            Op::Leaf { len, .. } => *len as u64,
            Op::Repeat { count, body, .. } => count * body.size(),
            Op::Seq(items) => items.iter().map(|(_, op)| op.size()).sum(),
        }
    }

    /// Runs the program copies (saturating): its number of leaf executions.
    fn run_count(&self) -> u64 {
        match self {
            Op::Leaf { .. } => 1,
            Op::Repeat { count, body, .. } => count.saturating_mul(body.run_count()),
            Op::Seq(items) => items.iter().fold(0, |n, (_, op)| n.saturating_add(op.run_count())),
        }
    }

    /// Nodes in the tree.
    fn node_count(&self) -> u64 {
        match self {
            Op::Leaf { .. } => 1,
            Op::Repeat { body, .. } => 1 + body.node_count(),
            Op::Seq(items) => 1 + items.iter().map(|(_, op)| op.node_count()).sum::<u64>(),
        }
    }

    /// Appends the program's byte runs at `base` to `out` in stream order,
    /// merging each with the previous run when they touch.
    fn collect_runs(&self, base: i64, out: &mut Vec<(i64, usize)>) {
        match self {
            Op::Leaf { len: 0, .. } => {}
            Op::Leaf { len, .. } => match out.last_mut() {
                Some((d, n)) if d.wrapping_add(*n as i64) == base => *n += len,
                _ => out.push((base, *len)),
            },
            Op::Repeat { count, stride, body } => {
                let mut at = base;
                for _ in 0..*count {
                    body.collect_runs(at, out);
                    at = at.wrapping_add(*stride);
                }
            }
            Op::Seq(items) => {
                for (d, op) in items {
                    op.collect_runs(base.wrapping_add(*d), out);
                }
            }
        }
    }

    /// Whether a leaf of the program is of a kind `f` accepts (a walk over
    /// the program's nodes, not its elements).
    pub fn has_kind(&self, f: fn(Basic) -> bool) -> bool {
        match self {
            Op::Leaf { kind, .. } => kind.is_some_and(f),
            Op::Repeat { body, .. } => body.has_kind(f),
            Op::Seq(items) => items.iter().any(|(_, op)| op.has_kind(f)),
        }
    }

    /// Basic elements in a typed program.
    fn elements(&self) -> u64 {
        match self {
            Op::Leaf { kind, len } => (len / kind.map_or(1, Basic::size)) as u64,
            Op::Repeat { count, body, .. } => count * body.elements(),
            Op::Seq(items) => items.iter().map(|(_, op)| op.elements()).sum(),
        }
    }

    /// Whole basic elements within the first `bytes` packed bytes of a typed
    /// program (`bytes` at most its size).
    pub fn elements_in_prefix(&self, bytes: u64) -> u64 {
        let mut budget = bytes;
        self.prefix_elements(&mut budget)
    }

    fn prefix_elements(&self, budget: &mut u64) -> u64 {
        match self {
            Op::Leaf { kind, len } => {
                let elem = kind.map_or(1, Basic::size) as u64;
                let take = (*len as u64).min(*budget);
                *budget -= take;
                take / elem
            }
            Op::Repeat { count, body, .. } => {
                let size = body.size();
                let whole = (*budget / size).min(*count);
                *budget -= whole * size;
                let mut n = whole * body.elements();
                if whole < *count && *budget > 0 {
                    n += body.prefix_elements(budget);
                }
                n
            }
            Op::Seq(items) => {
                let mut n = 0;
                for (_, op) in items {
                    if *budget == 0 {
                        break;
                    }
                    n += op.prefix_elements(budget);
                }
                n
            }
        }
    }

    /// Calls `f` on every basic element of a typed program, in order.
    pub fn for_each_element<B>(&self, mut f: impl FnMut(Basic, i64) -> ControlFlow<B>) -> Option<B> {
        match self.walk(0, &mut f) {
            ControlFlow::Break(b) => Some(b),
            ControlFlow::Continue(()) => None,
        }
    }

    fn walk<B>(&self, base: i64, f: &mut impl FnMut(Basic, i64) -> ControlFlow<B>) -> ControlFlow<B> {
        match self {
            Op::Leaf { kind, len } => {
                let kind = kind.unwrap_or(Basic::Byte);
                for i in 0..len / kind.size() {
                    f(kind, base.wrapping_add((i * kind.size()) as i64))?;
                }
            }
            Op::Repeat { count, stride, body } => {
                let mut at = base;
                for _ in 0..*count {
                    body.walk(at, f)?;
                    at = at.wrapping_add(*stride);
                }
            }
            Op::Seq(items) => {
                for (d, op) in items {
                    op.walk(base.wrapping_add(*d), f)?;
                }
            }
        }
        ControlFlow::Continue(())
    }
}

fn push_flat(out: &mut Vec<(i64, Op)>, d: i64, op: Op) {
    match op {
        Op::Seq(items) => {
            for (e, inner) in items {
                push_flat(out, d.wrapping_add(e), inner);
            }
        }
        Op::Leaf { kind, len } => {
            if let Some((pd, Op::Leaf { kind: pk, len: plen })) = out.last_mut() {
                if *pk == kind && pd.wrapping_add(*plen as i64) == d {
                    *plen += len;
                    return;
                }
            }
            out.push((d, Op::Leaf { kind, len }));
        }
        op => out.push((d, op)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::Order;
    use crate::error::ErrorKind;

    fn gather(runs: &[(i64, usize)]) -> Native {
        Native::Gather(Gather::new(runs.to_vec()))
    }

    fn plan(t: &Datatype) -> &Plan {
        match &t.programs().native {
            Native::Gather(g) => &g.plan,
            other => panic!("not a gather: {other:?}"),
        }
    }

    #[test]
    fn contiguous_types_compile_to_one_leaf() {
        let t = Datatype::contiguous(1i64 << 20, &Datatype::double()).unwrap();
        assert_eq!(t.programs().typed, Op::Leaf { kind: Some(Basic::Double), len: 8 << 20 });
        assert_eq!(t.programs().native, gather(&[(0, 8 << 20)]));
        assert!(t.programs().native.is_single_run(8 << 20));
        let two = Datatype::named("2int").unwrap();
        assert_eq!(two.programs().typed, Op::Leaf { kind: Some(Basic::Int), len: 8 });
        let empty = Datatype::contiguous(0, &Datatype::double()).unwrap();
        assert!(empty.programs().native.is_single_run(0));
    }

    #[test]
    fn huge_contiguous_of_a_struct_is_one_loop() {
        let s = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::char()]).unwrap();
        let big = Datatype::contiguous(1i64 << 40, &s).unwrap().commit();
        assert_eq!(big.programs().native, Native::Repeat { count: 1 << 40, stride: 16, body: Box::new(gather(&[(0, 9)])) });
        assert_eq!(big.programs().typed.size(), 9 << 40);
    }

    #[test]
    fn heterogeneous_runs_merge_only_natively() {
        let s = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::char()]).unwrap();
        assert_eq!(s.programs().native, gather(&[(0, 9)]));
        assert!(matches!(s.programs().typed, Op::Seq(ref v) if v.len() == 2));
    }

    #[test]
    fn subarray_face_is_one_strided_loop() {
        let d = Datatype::double();
        let x = Datatype::subarray(&[128, 128, 128], &[128, 128, 1], &[0, 0, 5], Order::C, &d).unwrap();
        let strided = |count, stride, len| Native::Repeat { count, stride, body: Box::new(gather(&[(0, len)])) };
        assert_eq!(x.programs().native, Native::Seq(Box::new([(40, strided(128 * 128, 1024, 8))])));
        let y = Datatype::subarray(&[128, 128, 128], &[128, 1, 128], &[0, 5, 0], Order::C, &d).unwrap();
        assert_eq!(y.programs().native, Native::Seq(Box::new([(5 * 1024, strided(128, 128 * 1024, 1024))])));
    }

    #[test]
    fn small_subtrees_flatten_large_repeats_stay_loops() {
        let f = Datatype::float();
        // Three 12-byte blocks: one gather of three runs.
        let v = Datatype::vector(3, 3, 4, &f).unwrap();
        assert_eq!(v.programs().native, gather(&[(0, 12), (16, 12), (32, 12)]));
        // A struct holding it: still one gather, runs merged across members.
        let s = Datatype::structure(&[1, 1], &[0, 44], &[v.clone(), Datatype::int()]).unwrap();
        assert_eq!(s.programs().native, gather(&[(0, 12), (16, 12), (32, 16)]));
        // Many blocks: a loop over one run.
        let big = Datatype::vector(1000, 3, 4, &f).unwrap();
        assert_eq!(
            big.programs().native,
            Native::Repeat { count: 1000, stride: 16, body: Box::new(gather(&[(0, 12)])) }
        );
        // An indexed type is flat however many blocks it has.
        let n = 1000;
        let lens: Vec<i64> = (0..n).map(|i| 1 + i % 3).collect();
        let disps: Vec<i64> = (0..n).map(|i| 5 * i).collect();
        let ix = Datatype::indexed(&lens, &disps, &Datatype::double()).unwrap();
        assert!(matches!(&ix.programs().native, Native::Gather(g) if g.runs.len() == n as usize));
    }

    /// `levels` levels of "the level below twice, the second copy `gap`
    /// bytes after the first's end", and the byte offsets of its doubles
    /// (for up to 12 levels).
    fn doubled(levels: usize, gap: i64) -> (Datatype, Vec<i64>) {
        let (mut t, mut offsets) = (Datatype::double(), vec![0i64]);
        for _ in 0..levels {
            let second = t.extent() + gap;
            if offsets.len() < 1 << 12 {
                offsets = offsets.iter().copied().chain(offsets.iter().map(|o| o + second)).collect();
            }
            t = Datatype::structure(&[1, 1], &[0, second], &[t.clone(), t.clone()]).unwrap();
        }
        (t, offsets)
    }

    #[test]
    fn a_child_held_twice_level_after_level_is_one_loop_a_level() {
        // 2^50 doubles in 50 small levels: a loop a level, not 2^50 runs.
        let (deep, _) = doubled(50, 8);
        assert!(deep.programs().typed.node_count() <= 2 * 50 + 2, "{}", deep.programs().typed.node_count());
        // Packing follows the typemap: the same bytes as the doubles listed.
        let (t, offsets) = doubled(10, 8);
        let listed = Datatype::hindexed_block(1, &offsets, &Datatype::double()).unwrap();
        assert_eq!(t.signature(), listed.signature());
        let memory: Vec<u8> = (0..t.extent() as usize).map(|i| (i * 7 % 251) as u8).collect();
        let ours = t.pack_to_vec(crate::pack::Region::new(&memory), 1).unwrap();
        assert_eq!(ours, listed.pack_to_vec(crate::pack::Region::new(&memory), 1).unwrap());
        assert!(t.programs().typed.node_count() <= 2 * 10 + 2);
        // Copies that overlap (each at the same place): a loop of stride 0;
        // sends may read a byte twice, receives refuse to write one twice.
        let mut same = Datatype::double();
        for _ in 0..40 {
            same = Datatype::structure(&[1, 1], &[0, 0], &[same.clone(), same.clone()]).unwrap();
        }
        assert_eq!(same.size(), 8 << 40);
        assert!(same.programs().typed.node_count() <= 2 * 40 + 2);
        assert_eq!(same.programs().writes, Writes::Unknown);
        let (pair, _) = doubled(1, 8);
        let both = Datatype::structure(&[1, 1], &[0, 0], &[pair.clone(), pair]).unwrap();
        let packed = both.pack_to_vec(crate::pack::Region::new(&memory[..48]), 2).unwrap();
        let one = [&memory[..8], &memory[16..24]].concat();
        assert_eq!(packed, [&one[..], &one, &memory[24..32], &memory[40..48], &memory[24..32], &memory[40..48]].concat());
    }

    #[test]
    fn a_type_written_out_too_long_is_refused_as_it_is_built() {
        // Each level holds the one below and a different type holding it:
        // no loop can stand for both, so the program would double a level.
        let mut t = Datatype::double();
        let mut built = 0;
        let refused = loop {
            let with_byte = Datatype::structure(&[1, 1], &[0, 8], &[t.clone(), Datatype::byte()]).unwrap();
            match Datatype::structure(&[1, 1], &[0, 16], &[t.clone(), with_byte]) {
                Ok(next) => (t, built) = (next, built + 1),
                Err(e) => break e,
            }
            assert!(built < 64, "never refused");
        };
        assert!(matches!(refused.kind(), ErrorKind::InvalidDatatype(m) if m.contains("written out")), "{refused}");
        // The last type built still compiles, within the bound.
        assert!(built >= 15, "refused at level {built}");
        assert!(t.programs().typed.node_count() <= Datatype::MAX_UNFOLDED);
        // A list of many entries of its own may be long: eight nodes an
        // entry, and so may the types that hold it.
        let many: Vec<i64> = (0..(Datatype::MAX_UNFOLDED as i64 / 2)).map(|i| 3 * i * i % 1_000_003 * 8).collect();
        let pair = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::int()]).unwrap();
        let long = Datatype::hindexed_block(1, &many, &pair).unwrap();
        assert_eq!(long.size(), 12 * many.len() as u64);
        let resized = Datatype::resized(0, long.extent() + 8, &long).unwrap();
        let wrapped = Datatype::structure(&[1, 1], &[0i64, 1 << 40], &[resized.dup().unwrap(), Datatype::contiguous(2, &long).unwrap()]).unwrap();
        assert_eq!(wrapped.size(), 3 * long.size());
    }

    /// The estimate a type is bounded by is never below its typed
    /// program's nodes: the compiler joins equal entries whatever types
    /// hold them (an `int` and a `dup` of it), markers are a node.
    #[test]
    fn a_programs_nodes_are_within_its_estimate() {
        let int = Datatype::int();
        let same = int.dup().unwrap();
        let mut t = Datatype::structure(&[1; 4], &[0, 100, 108, 116], &[int.clone(), same.clone(), same.clone(), same]).unwrap();
        for _ in 0..4 {
            let again = t.dup().unwrap();
            let ext = t.extent();
            t = Datatype::structure(&[1; 4], &[0, ext + 100, 2 * ext + 100, 3 * ext + 100], &[t.clone(), again.clone(), again.clone(), again]).unwrap();
        }
        let pair = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::int()]).unwrap();
        let column: Vec<i64> = (0..100).map(|i| 16 * i).collect();
        use crate::datatype::{DistArg, Distribution};
        let cyclic = Datatype::darray(2, 1, &[10, 7], &[Distribution::Cyclic, Distribution::None], &[DistArg::Size(3), DistArg::Default], &[2, 1], Order::C, &pair);
        let mut types = vec![
            t,
            Datatype::lb_marker(),
            Datatype::lb_marker().dup().unwrap(),
            Datatype::named("long_int").unwrap(),
            Datatype::indexed(&[0, 1, 0, 2, 2, 0], &[0, 3, 5, 8, 12, 20], &pair).unwrap(),
            Datatype::hindexed_block(1, &column, &Datatype::double()).unwrap(),
            Datatype::vector(0, 2, 3, &pair).unwrap(),
            Datatype::contiguous(1, &pair).unwrap(),
        ];
        types.push(cyclic.unwrap());
        for t in &types {
            assert!(t.programs().typed.node_count() <= t.unfolded(), "{} nodes, estimated {}", t.programs().typed.node_count(), t.unfolded());
        }
    }

    /// Real parts listed, then imaginary parts: two loops whose spans
    /// overlap, whose runs do not. The type still writes each byte once.
    #[test]
    fn interleaved_listings_write_each_byte_once() {
        let n = 40;
        let displacements: Vec<i64> = (0..n).map(|i| 2 * i).chain((0..n).map(|i| 2 * i + 1)).collect();
        let listed = Datatype::indexed_block(1, &displacements, &Datatype::double()).unwrap();
        assert!(listed.programs().writes.at_most_once(), "{:?}", listed.programs().writes);
    }

    #[test]
    fn evenly_spaced_entries_of_one_run_are_a_loop() {
        // A column listed block by block is a vector: one loop, not a run
        // per entry, so a type holding it many times stays small.
        let column: Vec<i64> = (0..20_000).map(|i| 16 * i).collect();
        let listed = Datatype::hindexed_block(1, &column, &Datatype::double()).unwrap();
        let vector = Datatype::hvector(20_000, 1, 16, &Datatype::double()).unwrap();
        assert_eq!(listed.programs().typed, vector.programs().typed);
        assert_eq!(listed.programs().native, vector.programs().native);
        let rows: Vec<i64> = (0..20_000).map(|i| (i * 7919 % 20_000) * 8).collect();
        let many = Datatype::hindexed_block(1, &rows, &listed).unwrap();
        assert!(many.programs().typed.node_count() <= 2 * 20_000 + 1, "{}", many.programs().typed.node_count());
    }

    fn moves(width: usize, moves: &[(i64, usize)]) -> Moves {
        Moves { width, moves: moves.into() }
    }

    #[test]
    fn plans_follow_run_lengths() {
        // {int; double; char[3]}: runs (0, 4) and (8, 11); the 11 bytes are
        // an 8-byte move and a 4-byte one overlapping it by a byte.
        let s = Datatype::structure(&[1, 1, 3], &[0, 8, 16], &[Datatype::int(), Datatype::double(), Datatype::char()])
            .unwrap();
        assert_eq!(plan(&s), &Plan::Moves(Box::new([moves(8, &[(8, 4)]), moves(4, &[(0, 0), (15, 11)])])));
        // A single run of up to 32 bytes, or 64: a kernel for its length.
        assert_eq!(Plan::choose(&[(-4, 12)]), Plan::Run { offset: -4, len: 12 });
        assert_eq!(Plan::choose(&[(0, 64)]), Plan::Run { offset: 0, len: 64 });
        // 12 bytes: 8 + 4, exactly.
        assert_eq!(
            Plan::choose(&[(0, 12), (16, 12)]),
            Plan::Moves(Box::new([moves(8, &[(0, 0), (16, 12)]), moves(4, &[(8, 8), (24, 20)])]))
        );
        // 7 bytes: two overlapping 4-byte moves (a narrower tail would be as wide).
        assert_eq!(
            Plan::choose(&[(3, 7), (20, 7)]),
            Plan::Moves(Box::new([moves(4, &[(3, 0), (6, 3), (20, 7), (23, 10)])]))
        );
        // Narrow tails would need three widths (8, 4, 1), wide ones two.
        assert_eq!(
            Plan::choose(&[(0, 9), (12, 4)]),
            Plan::Moves(Box::new([moves(8, &[(0, 0), (1, 1)]), moves(4, &[(12, 9)])]))
        );
        // Five moves of one width are padded to six by repeating the last.
        let runs: Vec<(i64, usize)> = (0..5).map(|i| (8 * i, 4)).collect();
        assert_eq!(
            Plan::choose(&runs),
            Plan::Moves(Box::new([moves(4, &[(0, 0), (8, 4), (16, 8), (24, 12), (32, 16), (32, 16)])]))
        );
        // A 72-byte block: four 16-byte moves and an 8-byte one.
        assert_eq!(
            Plan::choose(&[(0, 72)]),
            Plan::Moves(Box::new([moves(16, &[(0, 0), (16, 16), (32, 32), (48, 48)]), moves(8, &[(64, 64)])]))
        );
        // Runs of 8..56 bytes: eight overlapping 8-byte moves each.
        let runs: Vec<(i64, usize)> = (0..100).map(|i| (100 * i, 8 * (1 + i as usize % 7))).collect();
        assert_eq!(Plan::choose(&runs), Plan::Overlap { width: 8, k: 8 });
        // Runs of 12 bytes: two overlapping 8-byte moves each.
        let runs: Vec<(i64, usize)> = (0..100).map(|i| (20 * i, 12)).collect();
        assert_eq!(Plan::choose(&runs), Plan::Overlap { width: 8, k: 2 });
        // A long run: a memcpy per item.
        assert_eq!(Plan::choose(&[(8, 1024)]), Plan::Run { offset: 8, len: 1024 });
        // Uneven or long runs are copied one by one.
        assert_eq!(Plan::choose(&[(0, 1024), (2000, 3)]), Plan::Bytes);
        let runs: Vec<(i64, usize)> = (0..100).map(|i| (100 * i, 1 + i as usize % 50)).collect();
        assert_eq!(Plan::choose(&runs), Plan::Bytes);
        assert_eq!(Plan::choose(&[]), Plan::Bytes);
    }

    #[test]
    fn prefix_elements_count_partial_items() {
        let t = Datatype::vector(2, 3, 4, &Datatype::named("double_int").unwrap()).unwrap();
        let p = &t.programs().typed;
        assert_eq!(p.elements_in_prefix(0), 0);
        assert_eq!(p.elements_in_prefix(8), 1);
        assert_eq!(p.elements_in_prefix(11), 1);
        assert_eq!(p.elements_in_prefix(12), 2);
        assert_eq!(p.elements_in_prefix(72), 12);
    }

    /// Types whose items write each byte once are known to from their
    /// programs' structure, interleaved items included, without a look at
    /// their runs; types that may write a byte twice are not.
    #[test]
    fn the_structure_tells_which_types_write_each_byte_once() {
        let double = Datatype::double();
        let once = |t: &Datatype, count: u64| t.programs().writes.repeated(count, t.extent()).at_most_once();
        for n in [2, 8, 9, 64, 65, 1000] {
            let column = Datatype::resized(0, 8, &Datatype::vector(n, 1, n, &double).unwrap()).unwrap();
            assert!(once(&column, n as u64), "{n} columns side by side");
            assert!(!once(&column, n as u64 + 1), "one column too many wraps onto the first");
            // The same transpose as one type.
            let transpose = Datatype::hvector(n, 1, 8, &Datatype::vector(n, 1, n, &double).unwrap()).unwrap();
            assert!(once(&transpose, 1), "{n} columns in one type");
        }
        let backwards = Datatype::hvector(1 << 20, 1, -8, &double).unwrap();
        assert!(once(&backwards, 3));
        let reversed = Datatype::structure(&[1, 1], &[8, 0], &[double.clone(), double.clone()]).unwrap();
        assert!(once(&reversed, 2));
        // Two strided arrays of different types interleaved in a struct:
        // their loops' spans overlap, the gather they lower to lists
        // disjoint runs.
        let strided = Datatype::hvector(4, 1, 16, &double).unwrap();
        let other = Datatype::hvector(4, 1, 16, &Datatype::basic(Basic::Int64)).unwrap();
        let interleaved = Datatype::structure(&[1, 1], &[0, 8], &[strided.clone(), other]).unwrap();
        assert_eq!(interleaved.programs().typed.erase_kinds().writes(), Writes::Unknown);
        assert!(once(&interleaved, 1));
        // Of one type, they are one loop of two, a comb the structure vouches for.
        let same = Datatype::structure(&[1, 1], &[0, 8], &[strided.clone(), strided]).unwrap();
        assert!(matches!(same.programs().typed.erase_kinds().writes(), Writes::Once { .. }));
        assert!(once(&same, 1));
        let blocks = Datatype::indexed(&[2, 1, 3], &[10, 0, 4], &double).unwrap();
        assert!(once(&blocks, 5));
        assert!(!once(&Datatype::indexed(&[2, 1], &[0, 1], &double).unwrap(), 1));
        assert!(!once(&Datatype::resized(0, 4, &double).unwrap(), 2));
        assert!(once(&Datatype::resized(0, 4, &double).unwrap(), 1));
        assert_eq!(Datatype::contiguous(0, &double).unwrap().programs().writes, Writes::Nothing);
    }
}
