//! Serde messages: any `Serialize` value sent, any `DeserializeOwned` value
//! received, encoded with postcard (the `serde` feature).

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::buffer::{status_of, Packed};
use super::serde_bound::{Bounded, Budget};
use super::data::SendData;
use super::incoming::{sealed, Receivable};
use super::Status;
use crate::error::{Error, ErrorKind, Result};
use crate::pack::Repr;
use crate::proto::engine::Delivered;
use crate::proto::wire::SERIALIZED_SIGNATURE;

/// A serde message: any [`Serialize`] value, sent with any send of the
/// four modes as `comm.send(Serde(&value), dest, tag)`, and received as any
/// [`DeserializeOwned`] type with `comm.recv::<Serde<T>>(source, tag)` or
/// as a stream with `comm.incoming::<Serde<T>>(source, tag)` (see
/// [`Receivable`]).
///
/// A serde message carries its value (`String`s, `Vec`s, maps, enums with
/// data, nested structs) in the compact binary format of [postcard], in a
/// message of any length: mpx's form of mpi4py's lowercase, any-object
/// API. The value is serialized when the send starts, so the request
/// borrows nothing; a value that cannot be serialized fails the send with
/// [`ErrorKind::Serialization`].
///
/// ```
/// use std::collections::BTreeMap;
/// use futures::StreamExt;
/// use mpx::comm::Serde;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(2, |comm| async move {
/// if comm.rank() == 0 {
///     let stock = BTreeMap::from([("apples".to_string(), 3u32), ("pears".to_string(), 0)]);
///     comm.send(Serde(&stock), 1, 0).await?;
///     comm.isend(Serde(BTreeMap::<String, u32>::new()), 1, 0).await?;
/// } else {
///     let mut inventories = comm.incoming::<Serde<BTreeMap<String, u32>>>(0, 0);
///     let (stock, status) = inventories.next().await.expect("a message")?;
///     assert_eq!(stock["apples"], 3);
///     assert_eq!(status.source, Some(0));
///     let (empty, _) = inventories.next().await.expect("a message")?;
///     assert!(empty.is_empty());
/// }
/// # Ok(()) }).await?; Ok(()) }
/// ```
///
/// # Marked on the wire
///
/// A serde message carries its own type signature,
/// [`SERIALIZED_SIGNATURE`], which no datatype has. So a typed receive of
/// it fails with [`ErrorKind::TypeMismatch`] (a bounded receive too small for
/// a large message's bytes may report [`ErrorKind::Truncate`] first), and a
/// serde receive of a typed or `packed` message fails with
/// [`ErrorKind::TypeMismatch`]. A receive as `packed` bytes
/// ([`Comm::irecv_bytes`](crate::Comm::irecv_bytes), [`RecvBuf::packed`](crate::RecvBuf::packed))
/// takes any message, serde ones included, as its postcard bytes. The
/// bytes travel as they are in every representation: postcard's format does
/// not depend on the machine.
///
/// The mark says "serde", not which type: as with `packed` data, the
/// receiver asks for the type that was sent. postcard's bytes carry no
/// field names or type tags, so another type whose layout the bytes happen
/// to fit (an `i32` read as a `u32`, a struct read as a tuple of its
/// fields) decodes to a value of that type rather than failing.
///
/// # Bad bytes
///
/// Bytes that do not decode into the type asked for (corrupt, or another
/// type's value), or that hold more than one value, are
/// [`ErrorKind::Serialization`], never a panic. postcard reads strings and
/// byte strings out of the message only after checking they are there,
/// and reserves room for a sequence only when the message has at least as
/// many bytes left as it claims elements; serde caps any reservation, of a
/// sequence or a map, at 1 MiB. On top of that, a decode has a budget of
/// 8 elements per byte of the message and 1024 more: each element of a
/// sequence, each entry of a map, and each element's room a sequence or a
/// map reserves takes one, at every level of nesting together (the fields
/// of structs and tuples, which their types fix, take none); a message
/// that claims more is [`ErrorKind::Serialization`]. So a map cannot reserve
/// room for entries the bytes could never hold, nor a sequence of values
/// that take no bytes (`()`, unit structs) claim 2^64 of them and keep its
/// receiver decoding. A message of values that take bytes stays far inside
/// the budget; a legitimate sequence of more than 8 values per byte of its
/// message (a `Vec<()>` of a million) does not decode. The elements of
/// sequences and the entries of maps a message claims may also take at
/// most 64 bytes of memory per byte of the message, and 1 MiB more, as
/// their types lay them out: a collection of large values that take a
/// byte each in the message (a `Vec<Option<[[f64; 32]; 16]>>` of `None`s, 4 KiB
/// per byte) fails with [`ErrorKind::Serialization`] instead of asking for
/// gigabytes (honest data takes far less: a `Vec<String>` of empty strings
/// 24 bytes per byte, a `Vec<u64>` of small values 8). What a `Box`, `Rc`
/// or `Arc` holds is not counted, only the pointer: a type that boxes a
/// large value a byte can stand for (a `Vec<Box<Option<[[u64; 32]; 32]>>>` of
/// `None`s, 8 KiB per byte) is one to keep out of messages from peers not
/// trusted. Nor can they nest a
/// recursive type (a tree of itself) deep enough to overflow the stack: a
/// decode stops with [`ErrorKind::Serialization`] once it has used 256 KiB of
/// stack, which is some thousands of levels in release builds (5 000 of an
/// `Option<Box<Self>>`, 2 000 of an enum holding a `Vec<Self>`) and some
/// hundreds in debug builds.
///
/// # Why postcard
///
/// `cargo run --release --example serde_bench` measures postcard against
/// bincode 2 (serde mode, standard configuration) and JSON: the encoded
/// size, and the time to encode into a new `Vec` and to decode back (what a
/// send and a receive do), medians of 21 rounds, on a 2-core machine; three
/// runs agreed within a few percent.
///
/// | message | bytes: postcard / bincode 2 / JSON | postcard: µs to encode / decode | bincode 2: µs to encode / decode | JSON: µs to encode / decode |
/// |---|---|---|---|---|
/// | request (struct, enum with a `String` and 16 bytes) | 33 / 33 / 94 | 0.14 / 0.12 | 0.18 / 0.13 | 0.19 / 0.47 |
/// | reply (struct, `String`, enum with 4 `f64`) | 72 / 72 / 100 | 0.11 / 0.10 | 0.10 / 0.09 | 0.22 / 0.31 |
/// | map of 64 `String` → `u64` | 899 / 995 / 1286 | 1.4 / 6.9 | 1.0 / 6.6 | 1.6 / 8.2 |
/// | 100 nested records | 5163 / 5090 / 10435 | 5.6 / 28 | 4.4 / 27 | 24 / 50 |
/// | 10 000 `f64` | 80002 / 80003 / 104145 | 19 / 15 | 22 / 18 | 270 / 245 |
/// | 10 000 small `u32` | 10002 / 10003 / 29001 | 50 / 12 | 16 / 29 | 66 / 134 |
///
/// The two binary formats are alike in size (within 10%) and in speed
/// (within 15% for a send and a receive together, except for arrays of
/// small integers, which bincode 2 encodes 3× faster and postcard decodes
/// 2.5× faster), so the choice rests on safety and upkeep: postcard decodes a
/// hostile length without allocating for it, where bincode 2 allocates a
/// string's or byte vector's claimed length before reading it unless every
/// decode is given a fixed limit; postcard's format is specified and stable
/// since 1.0; and bincode is no longer maintained.
pub struct Serde<T>(pub T);

impl<T: Serialize> SendData for Serde<T> {
    fn into_packed(self, _: Repr) -> Result<Packed> {
        serialize(&self.0)
    }
}

impl<T> sealed::Sealed for Serde<T> {}

impl<T: DeserializeOwned + Send + 'static> Receivable for Serde<T> {
    type Value = T;

    fn limit() -> Option<u64> {
        None
    }

    fn decode(msg: &Delivered) -> Result<(T, Status)> {
        if msg.envelope.signature != Some(SERIALIZED_SIGNATURE) {
            return Err(ErrorKind::TypeMismatch.into());
        }
        Ok((deserialize(&msg.data)?, status_of(msg)))
    }
}

/// `value` in postcard's format, ready to send as a serde message.
pub(crate) fn serialize<T: Serialize + ?Sized>(value: &T) -> Result<Packed> {
    let data = postcard::to_allocvec(value)
        .map_err(|e| ErrorKind::Serialization(format!("{}: {e}", std::any::type_name::<T>())))?;
    Ok(serialized(Bytes::from(data)))
}

/// Bytes a value was serialized into, ready to send as a serde message.
pub(crate) fn serialized(data: Bytes) -> Packed {
    Packed { data, repr: Repr::Native, signature: Some(SERIALIZED_SIGNATURE), desc_len: 0 }
}

/// The one `T` that `bytes` hold in postcard's format.
pub(crate) fn deserialize<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let fail = |what: String| -> Error { ErrorKind::Serialization(format!("{}: {what}", std::any::type_name::<T>())).into() };
    let mut deserializer = postcard::Deserializer::from_flavor(StackBounded::new(bytes));
    let budget = Budget::of(bytes.len());
    let value = T::deserialize(Bounded { inner: &mut deserializer, budget: &budget });
    let (rest, too_deep) = deserializer.finalize().map_err(|e| fail(e.to_string()))?;
    match value {
        Err(_) if too_deep => Err(fail(format!("nested deeper than {} KiB of stack allow", DECODE_STACK >> 10))),
        Err(e) => Err(fail(budget.refused().map_or_else(|| e.to_string(), |why| why.to_string()))),
        Ok(value) if rest.is_empty() => Ok(value),
        Ok(_) => Err(fail(format!("{} bytes left over after the value", rest.len()))),
    }
}

/// The most stack a decode may use. Every level of a recursive type reads
/// at least one byte (its `Option`, variant or length), so without a bound
/// hostile bytes could nest deep enough to overflow the stack.
const DECODE_STACK: usize = 256 << 10;

/// postcard's slice flavor that stops reading once decoding has used more
/// than [`DECODE_STACK`] of stack since it started.
struct StackBounded<'de> {
    bytes: postcard::de_flavors::Slice<'de>,
    /// The stack address where decoding started.
    base: usize,
    /// Whether reading stopped for the bound.
    too_deep: bool,
}

impl<'de> StackBounded<'de> {
    fn new(bytes: &'de [u8]) -> StackBounded<'de> {
        StackBounded { bytes: postcard::de_flavors::Slice::new(bytes), base: stack_address(), too_deep: false }
    }

    /// Fails once decoding has used more than [`DECODE_STACK`] of stack.
    /// It looks at the stack on every read: each level of nesting reads at
    /// least one byte, so it overshoots by one level at most, however
    /// large the frames of the value's type.
    #[inline]
    fn check_depth(&mut self) -> postcard::Result<()> {
        if stack_address().abs_diff(self.base) > DECODE_STACK {
            self.too_deep = true;
        }
        if self.too_deep {
            return Err(postcard::Error::DeserializeBadEncoding);
        }
        Ok(())
    }
}

/// An address in the caller's stack frame.
#[inline(always)]
fn stack_address() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

impl<'de> postcard::de_flavors::Flavor<'de> for StackBounded<'de> {
    /// The bytes left, and whether reading stopped for the bound.
    type Remainder = (&'de [u8], bool);
    type Source = &'de [u8];

    #[inline]
    fn pop(&mut self) -> postcard::Result<u8> {
        self.check_depth()?;
        self.bytes.pop()
    }

    fn size_hint(&self) -> Option<usize> {
        self.bytes.size_hint()
    }

    #[inline]
    fn try_take_n(&mut self, ct: usize) -> postcard::Result<&'de [u8]> {
        self.check_depth()?;
        self.bytes.try_take_n(ct)
    }

    fn finalize(self) -> postcard::Result<(&'de [u8], bool)> {
        Ok((self.bytes.finalize()?, self.too_deep))
    }
}

/// The serde decoder's fuzz target: decodes `input[1..]` as the type
/// `input[0]` picks, among shapes a hostile peer would aim at (large values
/// in sequences and maps, a recursive type of large values, strings, enums
/// with data, values that take no bytes), and asserts that the decode ends
/// as a value or an [`ErrorKind::Serialization`] (a panic, an abort on a
/// failed allocation or a stack overflow fails the fuzzer itself, and its
/// memory limit catches a decode that takes far more than its bytes), and
/// that a value it gives encodes to bytes that decode to it again.
#[cfg(any(test, feature = "fuzzing"))]
pub fn check_decode(input: &[u8]) {
    use std::collections::BTreeMap;
    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    #[allow(clippy::large_enum_variant)]
    enum Tree {
        Leaf([[u64; 32]; 32]),
        Node(Box<Tree>, Option<Box<Tree>>),
    }
    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    enum Message {
        Ping,
        Text(String),
        Block { id: u32, rows: Vec<Option<[[u64; 32]; 4]>> },
        Nothing((), Vec<()>),
    }
    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
        match deserialize::<T>(bytes) {
            Ok(value) => {
                let again = serialize(&value).expect("a decoded value encodes");
                match deserialize::<T>(&again.data) {
                    Ok(decoded) => assert_eq!(decoded, value),
                    // The budget grows with a message's length: a value
                    // decoded from bytes with slack after it may claim more
                    // elements (of values that take no bytes) than its own,
                    // shorter, encoding can hold.
                    Err(e) if again.data.len() < bytes.len() && matches!(e.kind(), ErrorKind::Serialization(_)) => {}
                    Err(e) => panic!("its {} bytes (from {}) do not decode: {e:?}", again.data.len(), bytes.len()),
                }
            }
            Err(e) => assert!(matches!(e.kind(), ErrorKind::Serialization(_)), "{e:?}"),
        }
    }
    let Some((&pick, bytes)) = input.split_first() else { return };
    match pick % 6 {
        0 => round_trip::<Vec<Option<[[u64; 32]; 4]>>>(bytes),
        1 => round_trip::<Tree>(bytes),
        2 => round_trip::<BTreeMap<String, Vec<Option<u32>>>>(bytes),
        3 => round_trip::<Vec<Message>>(bytes),
        4 => round_trip::<(String, Vec<u8>, char, bool, i64)>(bytes),
        _ => round_trip::<BTreeMap<u64, (Vec<()>, Option<Box<[u16; 32]>>)>>(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Shape {
        Circle { radius: f64 },
        Polygon(Vec<(i32, i32)>),
        Empty,
    }

    #[test]
    fn values_round_trip_through_postcard() {
        let shapes = vec![Shape::Circle { radius: 1.5 }, Shape::Polygon(vec![(0, 0), (1, -1)]), Shape::Empty];
        let packed = serialize(&shapes).unwrap();
        assert_eq!(packed.signature, Some(SERIALIZED_SIGNATURE));
        assert_eq!(deserialize::<Vec<Shape>>(&packed.data).unwrap(), shapes);
    }

    #[test]
    fn leftover_bytes_are_an_error() {
        let packed = serialize(&(7u8, 9u8)).unwrap();
        assert!(matches!(deserialize::<u8>(&packed.data), Err(ref e) if matches!(e.kind(), ErrorKind::Serialization(_))));
    }

    /// A hostile length: far more elements or bytes than the message holds
    /// fails without allocating for them.
    #[test]
    fn hostile_lengths_fail_without_allocating() {
        let huge = serialize(&u64::MAX).unwrap().data;
        assert!(matches!(deserialize::<Vec<u8>>(&huge), Err(ref e) if matches!(e.kind(), ErrorKind::Serialization(_))));
        assert!(matches!(deserialize::<String>(&huge), Err(ref e) if matches!(e.kind(), ErrorKind::Serialization(_))));
        assert!(matches!(deserialize::<Vec<u64>>(&huge), Err(ref e) if matches!(e.kind(), ErrorKind::Serialization(_))));
        assert!(matches!(deserialize::<BTreeMap<String, Vec<u8>>>(&huge), Err(ref e) if matches!(e.kind(), ErrorKind::Serialization(_))));
    }

    /// Every byte string, decoded as a few shapes of value, is a value or an
    /// error, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..2000 {
            let bytes: Vec<u8> = (0..len % 64)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = deserialize::<Vec<Shape>>(&bytes);
            let _ = deserialize::<BTreeMap<String, Option<u16>>>(&bytes);
            let _ = deserialize::<(char, bool, f32, String)>(&bytes);
        }
    }

    /// A recursive type nested deeper than the stack bound is an error, not
    /// a stack overflow; nesting within it decodes.
    #[test]
    fn hostile_nesting_is_an_error() {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Node {
            parent: Option<Box<Node>>,
        }
        // Each level is one byte: `Some`; the last `None`.
        let nested = |depth: usize| [vec![1u8; depth], vec![0]].concat();
        let node = deserialize::<Node>(&nested(200)).unwrap();
        let mut depth = 0;
        let mut at = &node;
        while let Some(parent) = &at.parent {
            (depth, at) = (depth + 1, parent);
        }
        assert_eq!(depth, 200);
        let err = deserialize::<Node>(&nested(10_000_000)).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Serialization(m) if m.contains("nested deeper")), "{err:?}");
    }

    /// A recursive type with large values nested past the stack bound is an
    /// error even on a thread with little stack beyond it: the bound is
    /// checked at every level, so it overshoots by one level's frames, not
    /// sixteen.
    #[test]
    fn hostile_nesting_of_large_values_stops_within_a_level() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code, clippy::large_enum_variant)]
        enum Tree {
            Leaf([[u64; 32]; 32]),
            Node(Box<Tree>),
        }
        // Each level is one byte: variant 1, `Node`.
        let nested = vec![1u8; 1_000_000];
        let decoded = std::thread::Builder::new()
            .stack_size(DECODE_STACK + (DECODE_STACK >> 1))
            .spawn(move || deserialize::<Tree>(&nested).map(drop))
            .unwrap()
            .join()
            .expect("the decode returns");
        let err = decoded.unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Serialization(m) if m.contains("nested deeper")), "{err:?}");
    }

    /// A collection of large values that take a byte each in the message
    /// (`None`s of 8 KiB options) fails once its elements would take more
    /// than the message's memory budget, instead of asking for gigabytes;
    /// honest data that takes more memory than bytes (empty strings, 24
    /// bytes each) decodes.
    #[test]
    fn the_memory_a_message_decodes_into_is_bounded_by_its_bytes() {
        let nones = 300_000usize;
        let mut bytes = serialize(&(nones as u64)).unwrap().data.to_vec();
        bytes.resize(bytes.len() + nones, 0);
        let err = deserialize::<Vec<Option<[[u64; 32]; 32]>>>(&bytes).map(|nones| nones.len()).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Serialization(m) if m.contains("memory")), "{err:?}");
        let empty = vec![String::new(); 200_000];
        assert_eq!(deserialize::<Vec<String>>(&serialize(&empty).unwrap().data).unwrap(), empty);
        let map: BTreeMap<u32, Option<[u64; 4]>> = (0..50_000).map(|k| (k, None)).collect();
        assert_eq!(deserialize::<BTreeMap<u32, Option<[u64; 4]>>>(&serialize(&map).unwrap().data).unwrap(), map);
        // Empty sequences and maps of large elements cost no element: a
        // decode asks each for one more element and finds none.
        let empties: Vec<Vec<[[u64; 32]; 16]>> = vec![Vec::new(); 1000];
        assert_eq!(deserialize::<Vec<Vec<[[u64; 32]; 16]>>>(&serialize(&empties).unwrap().data).unwrap(), empties);
        type Large = [[u64; 32]; 8];
        let maps: Vec<BTreeMap<Large, Large>> = vec![BTreeMap::new(); 1000];
        assert_eq!(deserialize::<Vec<BTreeMap<Large, Large>>>(&serialize(&maps).unwrap().data).unwrap(), maps);
    }

    /// The room collections reserve for the elements their lengths claim
    /// counts against the memory budget as soon as it is reserved: nested
    /// collections of large values, each claiming 255 elements (no more
    /// than the bytes left) and holding one (the next), fail for memory at
    /// the second level, rather than reserve a megabyte at each of as many
    /// levels as the bytes nest; honest nested data still decodes.
    #[test]
    fn room_reserved_for_claimed_elements_is_paid_for() {
        // Large on purpose: its values are what a hostile length multiplies.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        enum Node {
            Leaf([[u64; 32]; 16]),
            Branch(Vec<Node>),
        }
        // Variant 1 (`Branch`), then 255 as a varint, five levels (as deep
        // as the stack lets a value this large nest), then bytes enough
        // for each level's claim.
        let nested: Vec<u8> = std::iter::repeat_n([1u8, 0xff, 0x01], 5).flatten().chain([0; 2000]).collect();
        let err = deserialize::<Node>(&nested).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Serialization(m) if m.contains("memory")), "{err:?}");
        let honest = Node::Branch(vec![Node::Branch(vec![Node::Leaf([[7; 32]; 16]); 3]), Node::Leaf([[1; 32]; 16])]);
        assert_eq!(deserialize::<Node>(&serialize(&honest).unwrap().data).unwrap(), honest);
    }

    /// The fuzz target's check holds on hostile inputs of each kind: a
    /// byte per large element, deep nesting, claims of huge lengths.
    #[test]
    fn the_fuzz_check_holds_on_hostile_inputs() {
        for pick in 0..6u8 {
            for body in [vec![], vec![0xff; 16], [vec![0x80, 0x80, 0x04], vec![0; 70_000]].concat(), vec![1; 100_000], vec![0; 3]] {
                check_decode(&[vec![pick], body].concat());
            }
        }
    }

    /// A sequence of values that take no bytes, claiming 2^64 of them in
    /// 10 bytes, fails at once (it decoded for as long as it claimed); a
    /// legitimate one of some hundreds still decodes.
    #[test]
    fn lengths_of_values_without_bytes_are_bounded_by_the_message() {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct Ack;
        let claim = serialize(&u64::MAX).unwrap().data;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send((deserialize::<Vec<()>>(&claim).is_err(), deserialize::<Vec<Ack>>(&claim).is_err()));
        });
        let refused = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("decoding stops at once");
        assert_eq!(refused, (true, true));
        let some = serialize(&vec![(); 500]).unwrap().data;
        assert_eq!(deserialize::<Vec<()>>(&some).unwrap().len(), 500);
        // The fields of structs and tuples cost nothing (the type fixes
        // how many there are): deep records of one byte each decode.
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct L1 { v: (L2, ()) }
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct L2 { v: [L3; 1] }
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct L3 { v: u8, nothing: (), marker: std::marker::PhantomData<u8> }
        let records: Vec<L1> = (0..2000).map(|i| L1 { v: (L2 { v: [L3 { v: i as u8, nothing: (), marker: std::marker::PhantomData }] }, ()) }).collect();
        let bytes = serialize(&records).unwrap().data;
        assert_eq!(deserialize::<Vec<L1>>(&bytes).unwrap(), records);
    }

    /// The room a map or a sequence reserves for what it claims is bounded
    /// by the message's budget, at every level of nesting together: a map
    /// that claims 2^21 entries in 4 bytes sees a size hint of at most the
    /// budget, and a second map after it only what is left.
    #[test]
    fn room_reserved_for_claimed_entries_is_bounded_by_the_message() {
        use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
        /// Records the size hints its maps are given, and takes no entry.
        #[derive(Debug)]
        struct Hints(Vec<Option<usize>>);
        impl<'de> Deserialize<'de> for Hints {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Hints, D::Error> {
                struct Maps;
                impl<'de> Visitor<'de> for Maps {
                    type Value = Hints;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a map")
                    }
                    fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Hints, A::Error> {
                        Ok(Hints(vec![map.size_hint(), map.size_hint()]))
                    }
                }
                d.deserialize_map(Maps)
            }
        }
        let claim = [0x80u8, 0x80, 0x80, 0x01]; // 2^21
        let mut deserializer = postcard::Deserializer::from_bytes(&claim);
        let budget = super::Budget::of(claim.len());
        let hints = Hints::deserialize(super::Bounded { inner: &mut deserializer, budget: &budget }).unwrap();
        assert_eq!(hints.0, [Some(4 * 8 + 1024), Some(0)]);
        // The same claim as a real map fails once its entries run out.
        assert!(deserialize::<BTreeMap<u8, u8>>(&claim).is_err());
    }

    #[test]
    fn the_serialized_signature_is_no_datatype_s() {
        use crate::MpiType;
        assert!(SERIALIZED_SIGNATURE.0 >= 1 << 61);
        for signature in [crate::Signature::EMPTY, u8::datatype().signature(), <[f64; 9]>::datatype().signature()] {
            assert_ne!((signature.hash(), signature.len()), SERIALIZED_SIGNATURE);
        }
    }
}
