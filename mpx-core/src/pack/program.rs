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
//! Each datatype has two programs ([`Programs`]): `typed`, whose leaves are
//! runs of one basic type (used for external32 conversion, element counts
//! and typemap walks), and `native`, the same with type boundaries erased so
//! that heterogeneous neighbours merge (used for native pack/unpack, the hot
//! path; see [`super::exec`]).

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
    /// Leaves are byte runs; the hot path.
    pub native: Op,
}

impl Programs {
    pub fn compile(dt: &Datatype) -> Programs {
        let typed = compile_typed(dt);
        let native = typed.erase_kinds();
        Programs { typed, native }
    }
}

fn compile_typed(dt: &Datatype) -> Op {
    let child = |old: &Datatype| old.programs().typed.clone();
    let block = |len: i64, old: &Datatype| Op::repeat(len as u64, old.extent(), child(old));
    // Products below were checked when the type was built.
    match &dt.node().ctor {
        Ctor::Named(p) => Op::seq(
            p.entries().iter().map(|&(b, d)| (d, Op::Leaf { kind: Some(b), len: b.size() })).collect(),
        ),
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
        Ctor::Indexed { blocklengths, displacements, old } => Op::seq(
            blocklengths.iter().zip(displacements).map(|(&n, &d)| (d * old.extent(), block(n, old))).collect(),
        ),
        Ctor::IndexedBlock { blocklength, displacements, old } => Op::seq(
            displacements.iter().map(|&d| (d * old.extent(), block(*blocklength, old))).collect(),
        ),
        Ctor::Hindexed { blocklengths, displacements, old } => {
            Op::seq(blocklengths.iter().zip(displacements).map(|(&n, &d)| (d, block(n, old))).collect())
        }
        Ctor::HindexedBlock { blocklength, displacements, old } => {
            Op::seq(displacements.iter().map(|&d| (d, block(*blocklength, old))).collect())
        }
        Ctor::Struct { blocklengths, displacements, types } => Op::seq(
            blocklengths
                .iter()
                .zip(displacements)
                .zip(types)
                .map(|((&n, &d), t)| (d, block(n, t)))
                .collect(),
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

    /// Bytes the program packs.
    pub fn size(&self) -> u64 {
        match self {
            Op::Leaf { len, .. } => *len as u64,
            Op::Repeat { count, body, .. } => count * body.size(),
            Op::Seq(items) => items.iter().map(|(_, op)| op.size()).sum(),
        }
    }

    /// Whether the program is one run of `size` bytes at offset 0.
    pub fn is_single_run(&self, size: u64) -> bool {
        match self {
            Op::Leaf { len, .. } => *len as u64 == size,
            op => size == 0 && op.is_empty(),
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
                    f(kind, base + (i * kind.size()) as i64)?;
                }
            }
            Op::Repeat { count, stride, body } => {
                for i in 0..*count {
                    body.walk(base + i as i64 * stride, f)?;
                }
            }
            Op::Seq(items) => {
                for (d, op) in items {
                    op.walk(base + d, f)?;
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
                push_flat(out, d + e, inner);
            }
        }
        Op::Leaf { kind, len } => {
            if let Some((pd, Op::Leaf { kind: pk, len: plen })) = out.last_mut() {
                if *pk == kind && *pd + *plen as i64 == d {
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

    fn leaf(len: usize) -> Op {
        Op::Leaf { kind: None, len }
    }

    #[test]
    fn contiguous_types_compile_to_one_leaf() {
        let t = Datatype::contiguous(1 << 20, &Datatype::double()).unwrap();
        assert_eq!(t.programs().native, leaf(8 << 20));
        let two = Datatype::named("2int").unwrap();
        assert_eq!(two.programs().typed, Op::Leaf { kind: Some(Basic::Int), len: 8 });
    }

    #[test]
    fn heterogeneous_runs_merge_only_natively() {
        let s = Datatype::structure(&[1, 1], &[0, 8], &[Datatype::double(), Datatype::char()]).unwrap();
        assert_eq!(s.programs().native, leaf(9));
        assert!(matches!(s.programs().typed, Op::Seq(ref v) if v.len() == 2));
    }

    #[test]
    fn subarray_face_is_one_strided_loop() {
        let d = Datatype::double();
        let x = Datatype::subarray(&[128, 128, 128], &[128, 128, 1], &[0, 0, 5], Order::C, &d).unwrap();
        assert_eq!(
            x.programs().native,
            Op::seq(vec![(40, Op::Repeat { count: 128 * 128, stride: 1024, body: Box::new(leaf(8)) })])
        );
        let y = Datatype::subarray(&[128, 128, 128], &[128, 1, 128], &[0, 5, 0], Order::C, &d).unwrap();
        assert_eq!(
            y.programs().native,
            Op::seq(vec![(5 * 1024, Op::Repeat { count: 128, stride: 128 * 1024, body: Box::new(leaf(1024)) })])
        );
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
}
