//! A serde deserializer that bounds what a message's lengths can make a
//! decode do: it wraps another (postcard's) and every deserializer, seed and
//! access it hands out, and charges each element of a sequence, each entry
//! of a map and each room reserved for them to one budget of the message,
//! and the memory each such element or entry takes to another (see
//! [`Budget`]). postcard alone reads a sequence of values that take no
//! bytes (`()`, unit structs) for as many elements as the bytes claim, lets
//! a map reserve room for the entries it claims whatever the bytes left,
//! and decodes a byte per element into a collection of large values
//! (`Vec<Option<[[f64; 32]; 16]>>` of `None`s: 4 KiB of memory per byte of the
//! message).

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};

/// Elements, entries and reserved room a decode may still take: 8 per
/// byte of the message, and 1024 more. A value that takes at least a byte
/// costs one unit for the room reserved for it and one for itself, so a
/// message of such values stays far inside the budget; values that take no
/// bytes cost their unit all the same.
///
/// And the memory the elements of sequences and the entries of maps whose
/// lengths the message claims may still take, as their types lay them out
/// (`size_of` each): [`MEMORY_PER_BYTE`] times the message's bytes, and
/// [`MEMORY_ALLOWANCE`] more. A collection's memory is its elements', so
/// this bounds what a decode keeps, whatever the values' types, to a
/// multiple of what the peer sent. The room a collection reserves ahead
/// of its elements for the length it claims (up to a megabyte, as serde's
/// collections do) is paid for as its first element is read, and covers
/// the elements that fill it: nested collections cannot each reserve
/// room beyond the budget before their elements come.
pub(super) struct Budget {
    left: Cell<u64>,
    memory_left: Cell<u64>,
    /// Why the decode was refused, if it was for the budget (the error
    /// that carries it may lose its text on the way out: postcard's does).
    refused: Cell<Option<Refusal>>,
}

/// Bytes of decoded elements a byte of a serde message may bring (see
/// [`Budget`]; `comm::serde`'s docs say it too): far more than honest data needs (a `Vec<String>` of empty
/// strings takes 24 per byte, a `Vec<Option<u64>>` of `None`s 16).
pub(super) const MEMORY_PER_BYTE: u64 = 64;

/// Bytes of decoded elements any serde message may bring beyond
/// [`MEMORY_PER_BYTE`] per byte.
pub(super) const MEMORY_ALLOWANCE: u64 = 1 << 20;

impl Budget {
    /// The budget of a message of `len` bytes.
    pub(super) fn of(len: usize) -> Budget {
        let len = len as u64;
        Budget {
            left: Cell::new(len.saturating_mul(8).saturating_add(1024)),
            memory_left: Cell::new(len.saturating_mul(MEMORY_PER_BYTE).saturating_add(MEMORY_ALLOWANCE)),
            refused: Cell::new(None),
        }
    }

    /// Why the decode was refused, if it was for the budget.
    pub(super) fn refused(&self) -> Option<Refusal> {
        self.refused.get()
    }

    fn refuse<E: serde::de::Error>(&self, why: Refusal) -> E {
        self.refused.set(Some(why));
        E::custom(why)
    }

    /// Takes the memory of one element or entry of `T`, or fails if the
    /// decode would take more than the message allows.
    fn take_memory<T, E: serde::de::Error>(&self) -> Result<(), E> {
        match self.memory_left.get().checked_sub(std::mem::size_of::<T>() as u64) {
            Some(left) => {
                self.memory_left.set(left);
                Ok(())
            }
            None => Err(self.refuse(Refusal::Memory)),
        }
    }

    /// Takes one unit, or fails if none is left.
    fn take<E: serde::de::Error>(&self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(self.refuse(Refusal::Elements)),
        }
    }

    /// The room a sequence or map that claims `hint` elements may reserve:
    /// at most what is left, which it then costs.
    fn reserve(&self, hint: Option<usize>) -> Option<usize> {
        let granted = hint.map(|h| (h as u64).min(self.left.get()))?;
        self.left.set(self.left.get() - granted);
        Some(granted as usize)
    }
}

/// Which part of its [`Budget`] a decode would have overdrawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// More elements, entries or reserved room than its bytes can hold.
    Elements,
    /// More memory than [`MEMORY_PER_BYTE`] and [`MEMORY_ALLOWANCE`] allow.
    Memory,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Elements => f.write_str("the message claims more elements than its bytes can hold"),
            Refusal::Memory => write!(
                f,
                "its elements would take more memory than {MEMORY_PER_BYTE} bytes per byte of the message, and {} MiB more",
                MEMORY_ALLOWANCE >> 20
            ),
        }
    }
}

/// A deserializer whose sequences and maps are charged to a [`Budget`].
pub(super) struct Bounded<'b, D> {
    pub(super) inner: D,
    pub(super) budget: &'b Budget,
}

/// A visitor whose sequences, maps, enums and nested values are charged.
struct Visiting<'b, V> {
    inner: V,
    budget: &'b Budget,
    /// Whether the elements of a sequence it visits cost (a sequence's,
    /// whose length the message claims); a tuple's and a struct's, whose
    /// lengths the type fixes, do not.
    charged: bool,
}

/// A seed whose deserializer is charged.
struct Seeded<'b, S> {
    inner: S,
    budget: &'b Budget,
}

/// A sequence, map or enum access whose elements are charged (those of a
/// sequence only if `charged`).
struct Access<'b, A> {
    inner: A,
    budget: &'b Budget,
    charged: bool,
    /// Elements the collection was told it may reserve room for
    /// ([`size_hint`](SeqAccess::size_hint)), whose memory is not paid yet:
    /// the first element pays it (its type says how much the room takes).
    hinted: Cell<Option<u64>>,
    /// A map's hint, for its values' room (paid by the first value).
    hinted_values: Option<u64>,
    /// Elements (or keys) and values whose memory the room paid covers.
    prepaid: u64,
    prepaid_values: u64,
}

impl<'b, A> Access<'b, A> {
    fn new(inner: A, budget: &'b Budget, charged: bool) -> Access<'b, A> {
        Access { inner, budget, charged, hinted: Cell::new(None), hinted_values: None, prepaid: 0, prepaid_values: 0 }
    }
}

/// The most room serde's collections reserve ahead of their elements,
/// whatever their length claims (its `size_hint::cautious`).
const ROOM_CAP: u64 = 1 << 20;

/// Pays, from `budget`, for the room a collection reserved for elements of
/// `T` (`hinted`: the elements granted, paid for here once), which covers
/// `prepaid` elements from then on.
fn pay_room<T, E: serde::de::Error>(budget: &Budget, hinted: Option<u64>, prepaid: &mut u64) -> Result<(), E> {
    if let Some(granted) = hinted {
        let size = (std::mem::size_of::<T>() as u64).max(1);
        let room = granted.saturating_mul(size).min(ROOM_CAP);
        match budget.memory_left.get().checked_sub(room) {
            Some(left) => budget.memory_left.set(left),
            None => return Err(budget.refuse(Refusal::Memory)),
        }
        *prepaid += room / size;
    }
    Ok(())
}

/// Pays, from `budget`, for one element of `T` a collection got: from the
/// room it reserved (`prepaid`), or by itself.
fn pay_element<T, E: serde::de::Error>(budget: &Budget, prepaid: &mut u64) -> Result<(), E> {
    match prepaid.checked_sub(1) {
        Some(left) => {
            *prepaid = left;
            Ok(())
        }
        None => budget.take_memory::<T, E>(),
    }
}

macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*) $charged:expr;)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Self::Error> {
                self.inner.$method($($arg,)* Visiting { inner: visitor, budget: self.budget, charged: $charged })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Bounded<'_, D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any() true;
        deserialize_bool() true;
        deserialize_i8() true;
        deserialize_i16() true;
        deserialize_i32() true;
        deserialize_i64() true;
        deserialize_i128() true;
        deserialize_u8() true;
        deserialize_u16() true;
        deserialize_u32() true;
        deserialize_u64() true;
        deserialize_u128() true;
        deserialize_f32() true;
        deserialize_f64() true;
        deserialize_char() true;
        deserialize_str() true;
        deserialize_string() true;
        deserialize_bytes() true;
        deserialize_byte_buf() true;
        deserialize_option() true;
        deserialize_unit() true;
        deserialize_unit_struct(name: &'static str) true;
        deserialize_newtype_struct(name: &'static str) true;
        deserialize_seq() true;
        deserialize_tuple(len: usize) false;
        deserialize_tuple_struct(name: &'static str, len: usize) false;
        deserialize_map() true;
        deserialize_struct(name: &'static str, fields: &'static [&'static str]) false;
        deserialize_enum(name: &'static str, variants: &'static [&'static str]) true;
        deserialize_identifier() true;
        deserialize_ignored_any() true;
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {
        $(
            fn $method<E: serde::de::Error>(self, value: $ty) -> Result<Self::Value, E> {
                self.inner.$method(value)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Visiting<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(Bounded { inner: deserializer, budget: self.budget })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_newtype_struct(Bounded { inner: deserializer, budget: self.budget })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_seq(Access::new(seq, self.budget, self.charged))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(Access::new(map, self.budget, true))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_enum(Access::new(data, self.budget, true))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seeded<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.inner.deserialize(Bounded { inner: deserializer, budget: self.budget })
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Access<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, A::Error> {
        if !self.charged {
            return self.inner.next_element_seed(Seeded { inner: seed, budget: self.budget });
        }
        pay_room::<T::Value, _>(self.budget, self.hinted.take(), &mut self.prepaid)?;
        let element = self.inner.next_element_seed(Seeded { inner: seed, budget: self.budget })?;
        // An element is paid for once it is there: every sequence ends
        // with a call that finds none, which costs nothing (its elements'
        // type may be large, and a message may hold many empty sequences).
        if element.is_some() {
            self.budget.take()?;
            pay_element::<T::Value, _>(self.budget, &mut self.prepaid)?;
        }
        Ok(element)
    }

    fn size_hint(&self) -> Option<usize> {
        if self.charged {
            let granted = self.budget.reserve(self.inner.size_hint());
            self.hinted.set(granted.map(|g| g as u64));
            granted
        } else {
            self.inner.size_hint()
        }
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Access<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        let hinted = self.hinted.take();
        self.hinted_values = self.hinted_values.or(hinted);
        pay_room::<K::Value, _>(self.budget, hinted, &mut self.prepaid)?;
        let key = self.inner.next_key_seed(Seeded { inner: seed, budget: self.budget })?;
        // Paid for once it is there (see `next_element_seed`).
        if key.is_some() {
            self.budget.take()?;
            pay_element::<K::Value, _>(self.budget, &mut self.prepaid)?;
        }
        Ok(key)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        pay_room::<V::Value, _>(self.budget, self.hinted_values.take(), &mut self.prepaid_values)?;
        pay_element::<V::Value, _>(self.budget, &mut self.prepaid_values)?;
        self.inner.next_value_seed(Seeded { inner: seed, budget: self.budget })
    }

    fn size_hint(&self) -> Option<usize> {
        let granted = self.budget.reserve(self.inner.size_hint());
        self.hinted.set(granted.map(|g| g as u64));
        granted
    }
}

impl<'b, 'de, A: EnumAccess<'de>> EnumAccess<'de> for Access<'b, A> {
    type Error = A::Error;
    type Variant = Access<'b, A::Variant>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self::Variant), A::Error> {
        let budget = self.budget;
        let (value, variant) = self.inner.variant_seed(Seeded { inner: seed, budget })?;
        Ok((value, Access::new(variant, budget, true)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Access<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.newtype_variant_seed(Seeded { inner: seed, budget: self.budget })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.inner.tuple_variant(len, Visiting { inner: visitor, budget: self.budget, charged: false })
    }

    fn struct_variant<V: Visitor<'de>>(self, fields: &'static [&'static str], visitor: V) -> Result<V::Value, A::Error> {
        self.inner.struct_variant(fields, Visiting { inner: visitor, budget: self.budget, charged: false })
    }
}
