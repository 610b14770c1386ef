//! `#[derive(MpiType)]` for mpx: builds the MPI datatype of a `#[repr(C)]`
//! struct from its fields' real offsets, or of a fieldless integer-repr enum
//! from its integer type.
//!
//! Use it through the `mpx` crate, which re-exports it next to the trait:
//! `#[derive(mpx::MpiType)]` works with `mpx` as the only dependency.
//!
//! # What is accepted
//!
//! * `#[repr(C)]` structs with named or tuple fields (also with `packed`,
//!   `packed(N)` or `align(N)`), and `#[repr(transparent)]` newtypes. Each
//!   field's type must implement `MpiType`: primitives, `bool`, `char`,
//!   `NonZero*`, fixed-size arrays (nested too), other derived types.
//!   `PhantomData` fields are allowed and describe no bytes.
//! * Generic structs: each field whose type names a parameter gets an
//!   `MpiType` bound (`T: MpiType` for a field `T`, `[T; N]: MpiType` for
//!   `[T; N]`); a parameter that only a `PhantomData` names gets none, so a
//!   typed id (`struct Id<K> { raw: u32, kind: PhantomData<K> }`) works with
//!   any marker `K` (as `MpiType` requires of every type, `Id<K>` must be
//!   `Copy`, `Send`, `Sync` and `'static`).
//! * Fieldless enums with an integer repr (`#[repr(u8)]`, `#[repr(i32)]`,
//!   ...).
//!
//! Anything whose memory cannot be described by a datatype is rejected at
//! compile time with an error on the offending field or attribute:
//! references, raw pointers, function pointers, trait objects, slices,
//! tuples, heap-owning types (`String`, `Vec`, `Box`, `Rc`, ...), structs
//! without `#[repr(C)]`/`#[repr(transparent)]`, unions, enums that carry data
//! or lack an integer repr, and lifetime parameters. Any other field type
//! that does not implement `MpiType` fails its trait bound, reported on the
//! field's type.
//!
//! # What is generated
//!
//! For a struct, an `unsafe impl MpiType` (inside `const _: () = { ... };`)
//! whose
//! * `datatype()` is `Datatype::structure` of every field's datatype at
//!   `core::mem::offset_of!(Self, field)`, resized to lb 0 and extent
//!   `size_of::<Self>()`, so that slices of the struct pack, send and receive
//!   correctly and padding bytes are never read or written. It is built once
//!   per concrete type and cached (a `OnceLock` for non-generic types,
//!   `Datatype::__derive_cached`, keyed by type, for generic ones: an
//!   inherent function of the real `Datatype`, so that a crate path given
//!   with `#[mpx(crate = "...")]` cannot redirect it). A transparent newtype
//!   uses its field's datatype directly;
//! * `NEEDS_VALIDATION` is true when any field's is;
//! * `is_valid` checks every field that needs it at its offset (raw pointer
//!   arithmetic only, so packed structs are fine).
//!
//! For an enum with `#[repr(u8)]` (say), the datatype is `u8`'s,
//! `NEEDS_VALIDATION` is true, and `is_valid` accepts exactly the declared
//! discriminants (`Enum::Variant as u8`, so explicit and implicit
//! discriminants both work): unpacking any other value is an
//! `mpx::ErrorKind::InvalidValue`, never an invalid enum.
//!
//! Compile-time assertions check the layout facts the impl relies on (a
//! `packed` struct has no padding, an enum has its repr's size).
//!
//! # Example
//!
//! ```ignore
//! use mpx::MpiType;
//!
//! #[derive(Clone, Copy, MpiType)]
//! #[repr(C)]
//! struct Particle {
//!     position: [f64; 3],
//!     charge: i8,      // followed by 3 bytes of padding, never sent
//!     species: Species,
//! }
//!
//! #[derive(Clone, Copy, MpiType)]
//! #[repr(u32)]
//! enum Species { Electron = 1, Proton, Neutron }
//!
//! let t = Particle::datatype();
//! assert_eq!(t.size(), 24 + 1 + 4);
//! assert_eq!(t.extent() as usize, std::mem::size_of::<Particle>());
//! ```
//!
//! # Attributes
//!
//! `#[mpx(crate = "path")]` on the type sets the path through which the
//! generated code names mpx items (default `::mpx`), for crates that use
//! `mpx_core` directly or rename the dependency.

#![deny(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{
    Attribute, Data, DataEnum, DataStruct, DeriveInput, Error, Fields, GenericArgument, GenericParam, Ident, LitInt,
    LitStr, Path, PathArguments, Result, Type,
};

/// Derives `mpx::MpiType`; see the [crate docs](crate).
#[proc_macro_derive(MpiType, attributes(mpx))]
pub fn derive_mpi_type(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    expand(&input).unwrap_or_else(Error::into_compile_error).into()
}

/// The whole expansion, or the first error found.
fn expand(input: &DeriveInput) -> Result<TokenStream2> {
    let krate = crate_path(&input.attrs)?;
    let repr = Repr::parse(&input.attrs)?;
    reject_lifetimes(input)?;
    match &input.data {
        Data::Struct(data) => expand_struct(input, data, &repr, &krate),
        Data::Enum(data) => expand_enum(input, data, &repr, &krate),
        Data::Union(data) => Err(Error::new(
            data.union_token.span(),
            "#[derive(MpiType)] cannot describe a union: which field holds a value is not known, \
             so there is no typemap of initialised bytes; use a #[repr(C)] struct or an integer-repr enum",
        )),
    }
}

// ----- attributes -------------------------------------------------------------

/// The path of the mpx crate in generated code: `#[mpx(crate = "...")]` or
/// `::mpx`.
fn crate_path(attrs: &[Attribute]) -> Result<Path> {
    let mut path = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("mpx")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                if path.is_some() {
                    return Err(meta.error("duplicate `crate` in #[mpx(...)]"));
                }
                let lit: LitStr = meta.value()?.parse()?;
                path = Some(lit.parse::<Path>()?);
                Ok(())
            } else {
                Err(meta.error("unknown #[mpx(...)] option; the only one is `crate = \"path\"`"))
            }
        })?;
    }
    Ok(path.unwrap_or_else(|| syn::parse_quote!(::mpx)))
}

/// `#[mpx(...)]` belongs on the type only.
fn reject_mpx_attrs(attrs: &[Attribute]) -> Result<()> {
    match attrs.iter().find(|a| a.path().is_ident("mpx")) {
        Some(attr) => Err(Error::new_spanned(attr, "#[mpx(...)] is only allowed on the type itself")),
        None => Ok(()),
    }
}

/// The parts of `#[repr(...)]` that matter here.
#[derive(Default)]
struct Repr {
    /// `C`, with its span.
    c: Option<Span>,
    transparent: bool,
    /// `packed` (1) or `packed(N)`.
    packed: Option<u64>,
    /// An integer type (`u8`, `i32`, ...).
    int: Option<Ident>,
    /// The first `#[repr]` attribute, for errors about the repr as a whole.
    first: Option<TokenStream2>,
}

const INT_REPRS: [&str; 12] = ["u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "u128", "i128", "usize", "isize"];

impl Repr {
    fn parse(attrs: &[Attribute]) -> Result<Repr> {
        let mut repr = Repr::default();
        for attr in attrs.iter().filter(|a| a.path().is_ident("repr")) {
            repr.first.get_or_insert_with(|| attr.to_token_stream());
            attr.parse_nested_meta(|meta| {
                let p = &meta.path;
                if p.is_ident("C") {
                    repr.c = Some(p.span());
                } else if p.is_ident("transparent") {
                    repr.transparent = true;
                } else if p.is_ident("packed") {
                    let n = if meta.input.peek(syn::token::Paren) {
                        let content;
                        syn::parenthesized!(content in meta.input);
                        content.parse::<LitInt>()?.base10_parse::<u64>()?
                    } else {
                        1
                    };
                    repr.packed = Some(n);
                } else if let Some(ident) = p.get_ident().filter(|i| INT_REPRS.iter().any(|n| i == n)) {
                    repr.int = Some(ident.clone());
                } else if meta.input.peek(syn::token::Paren) {
                    // Something rustc will judge; skip its arguments.
                    let content;
                    syn::parenthesized!(content in meta.input);
                    content.parse::<TokenStream2>()?;
                }
                Ok(())
            })?;
        }
        Ok(repr)
    }
}

/// A datatype describes `'static` data only: no lifetime parameters.
fn reject_lifetimes(input: &DeriveInput) -> Result<()> {
    match input.generics.lifetimes().next() {
        Some(lt) => Err(Error::new_spanned(
            lt,
            "#[derive(MpiType)] types must be 'static: a lifetime parameter means the type borrows memory, \
             which cannot be sent",
        )),
        None => Ok(()),
    }
}

// ----- field types ------------------------------------------------------------

/// How a field takes part in the datatype.
enum FieldKind {
    /// Described by `<T as MpiType>`.
    Typed,
    /// `PhantomData<_>`: no bytes.
    Phantom,
}

/// Owning or shared-pointer types from std whose bytes are an address.
/// Those of them that std defines with type parameters (all but the last
/// four) are taken for std's only when written with arguments (`Vec<T>`):
/// written bare, the name is the program's own type (a `Box` of two
/// corners, say), described by its own `MpiType` like any other.
const POINTER_TYPES: [&str; 17] = [
    "Vec",
    "VecDeque",
    "LinkedList",
    "BinaryHeap",
    "HashMap",
    "HashSet",
    "BTreeMap",
    "BTreeSet",
    "Box",
    "Rc",
    "Arc",
    "Weak",
    "NonNull",
    "String",
    "CString",
    "OsString",
    "PathBuf",
];

/// How many of [`POINTER_TYPES`], from the first, std defines with type
/// parameters.
const GENERIC_POINTER_TYPES: usize = 13;

/// Rejects the field types whose memory no datatype can describe, with an
/// error on the type; says how an accepted type is described.
fn classify(ty: &Type) -> Result<FieldKind> {
    match ty {
        Type::Group(g) => classify(&g.elem),
        Type::Paren(p) => classify(&p.elem),
        Type::Array(a) => match classify(&a.elem)? {
            FieldKind::Typed => Ok(FieldKind::Typed),
            FieldKind::Phantom => Ok(FieldKind::Phantom),
        },
        Type::Reference(_) => Err(Error::new_spanned(
            ty,
            "a reference cannot be described by an MPI datatype: its bytes are an address in this process; \
             store the referenced value itself",
        )),
        Type::Ptr(_) => Err(Error::new_spanned(
            ty,
            "a raw pointer cannot be described by an MPI datatype: its bytes are an address in this process, \
             meaningless to the receiver",
        )),
        Type::BareFn(_) => Err(Error::new_spanned(
            ty,
            "a function pointer cannot be described by an MPI datatype: its bytes are an address in this process",
        )),
        Type::TraitObject(_) | Type::ImplTrait(_) => Err(Error::new_spanned(
            ty,
            "a trait object has no fixed layout and cannot be described by an MPI datatype; \
             use a concrete #[repr(C)] type",
        )),
        Type::Slice(_) => Err(Error::new_spanned(
            ty,
            "a slice has no fixed size and cannot be described by an MPI datatype; use a fixed-size array `[T; N]`",
        )),
        Type::Tuple(t) if t.elems.is_empty() => Ok(FieldKind::Phantom),
        Type::Tuple(_) => Err(Error::new_spanned(
            ty,
            "a tuple has no guaranteed layout and cannot be described by an MPI datatype; \
             use a #[repr(C)] struct deriving MpiType",
        )),
        Type::Path(p) if p.qself.is_none() => {
            let Some(last) = p.path.segments.last() else { return Ok(FieldKind::Typed) };
            let name = last.ident.to_string();
            if name == "PhantomData" {
                return Ok(FieldKind::Phantom);
            }
            if name == "str" {
                return Err(Error::new_spanned(ty, "`str` has no fixed size; use a fixed-size byte array `[u8; N]`"));
            }
            let Some(at) = POINTER_TYPES.iter().position(|p| *p == name) else { return Ok(FieldKind::Typed) };
            if at < GENERIC_POINTER_TYPES && matches!(last.arguments, syn::PathArguments::None) {
                return Ok(FieldKind::Typed);
            }
            if name == "Box" {
                if let Some(dyn_ty) = boxed_trait_object(&last.arguments) {
                    return Err(Error::new_spanned(
                        dyn_ty,
                        "a boxed trait object cannot be described by an MPI datatype: the box is an address in \
                         this process and the trait object has no fixed layout; use a concrete #[repr(C)] type",
                    ));
                }
            }
            Err(Error::new_spanned(
                ty,
                format!(
                    "`{name}` cannot be described by an MPI datatype: it holds a pointer to memory elsewhere, \
                     not the data; use fixed-size fields (arrays, #[repr(C)] structs) or send the data separately"
                ),
            ))
        }
        _ => Ok(FieldKind::Typed),
    }
}

/// The `dyn Trait` in `Box<dyn Trait>`.
fn boxed_trait_object(args: &PathArguments) -> Option<&Type> {
    let PathArguments::AngleBracketed(args) = args else { return None };
    args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t @ Type::TraitObject(_)) => Some(t),
        _ => None,
    })
}

// ----- structs ----------------------------------------------------------------

/// Whether `ty` names any of `params` (a generic parameter of the struct).
fn names_any(ty: &Type, params: &[Ident]) -> bool {
    fn walk(tokens: TokenStream2, params: &[Ident]) -> bool {
        tokens.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => params.contains(&i),
            proc_macro2::TokenTree::Group(g) => walk(g.stream(), params),
            _ => false,
        })
    }
    walk(ty.to_token_stream(), params)
}

/// One field: how to name it in `offset_of!` and its type.
struct Field<'a> {
    member: TokenStream2,
    ty: &'a Type,
}

fn expand_struct(input: &DeriveInput, data: &DataStruct, repr: &Repr, krate: &Path) -> Result<TokenStream2> {
    let name = &input.ident;
    if repr.c.is_none() && !repr.transparent {
        let message = "#[derive(MpiType)] needs #[repr(C)] (or #[repr(transparent)]): \
                       the default Rust layout may reorder fields, so their offsets are not part of the type";
        return Err(match &repr.first {
            Some(attr) => Error::new_spanned(attr, message),
            None => Error::new(name.span(), message),
        });
    }

    let mut fields = Vec::new();
    let mut phantoms = Vec::new();
    let mut errors: Option<Error> = None;
    let mut push_error = |e: Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };
    for (i, f) in data.fields.iter().enumerate() {
        if let Err(e) = reject_mpx_attrs(&f.attrs) {
            push_error(e);
        }
        match classify(&f.ty) {
            Ok(FieldKind::Typed) => {
                let member = match &f.ident {
                    Some(ident) => ident.to_token_stream(),
                    None => syn::Index::from(i).to_token_stream(),
                };
                fields.push(Field { member, ty: &f.ty });
            }
            Ok(FieldKind::Phantom) => phantoms.push(&f.ty),
            Err(e) => push_error(e),
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }

    // A generic struct is described by its fields' types, so those that
    // name a parameter must be `MpiType` (a parameter only a `PhantomData`
    // names, a typed id's marker, need not be), and the struct must be what
    // `MpiType` requires of any type, for whatever parameters it is used with.
    let mut generics = input.generics.clone();
    let params: Vec<Ident> = generics
        .params
        .iter()
        .filter_map(|p| match p {
            GenericParam::Type(t) => Some(t.ident.clone()),
            GenericParam::Const(c) => Some(c.ident.clone()),
            GenericParam::Lifetime(_) => None,
        })
        .collect();
    let is_generic = !params.is_empty();
    if is_generic {
        let (_, ty_generics, _) = input.generics.split_for_impl();
        let where_clause = generics.make_where_clause();
        for f in fields.iter().filter(|f| names_any(f.ty, &params)) {
            let ty = f.ty;
            where_clause.predicates.push(syn::parse_quote_spanned!(ty.span()=> #ty: #krate::MpiType));
        }
        where_clause.predicates.push(syn::parse_quote!(
            #name #ty_generics: ::core::marker::Copy + ::core::marker::Send + ::core::marker::Sync + 'static
        ));
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();

    // `<F as MpiType>`, spanned at the field type so an unsatisfied bound
    // is reported there.
    let as_mpi: Vec<TokenStream2> = fields
        .iter()
        .map(|f| {
            let ty = f.ty;
            quote_spanned!(ty.span()=> <#ty as #krate::MpiType>)
        })
        .collect();
    let offsets: Vec<TokenStream2> = fields
        .iter()
        .map(|f| {
            let member = &f.member;
            quote!(::core::mem::offset_of!(Self, #member))
        })
        .collect();

    let datatype_body = if repr.transparent && fields.len() == 1 {
        let inner = &as_mpi[0];
        quote!(#inner::datatype())
    } else {
        let n = fields.len();
        let ones = vec![quote!(1); n];
        let build = quote! {
            || {
                let __mpx_blocklengths: [i64; #n] = [#(#ones),*];
                let __mpx_displacements: [i64; #n] = [#(#offsets as i64),*];
                let __mpx_types: [#krate::Datatype; #n] = [#(#as_mpi::datatype()),*];
                let __mpx_struct = #krate::Datatype::structure(
                    &__mpx_blocklengths, &__mpx_displacements, &__mpx_types,
                )?;
                #krate::Datatype::resized(0, ::core::mem::size_of::<Self>() as i64, &__mpx_struct)
            }
        };
        if is_generic {
            // SAFETY: `build` describes `Self` as this derive guarantees.
            quote!(unsafe { <#krate::Datatype>::__derive_cached::<Self>(#build) })
        } else {
            quote! {
                static __MPX_DATATYPE: ::std::sync::OnceLock<#krate::Datatype> = ::std::sync::OnceLock::new();
                // SAFETY: `build` describes `Self` as this derive guarantees.
                __MPX_DATATYPE.get_or_init(|| unsafe { <#krate::Datatype>::__derive_cached::<Self>(#build) }).clone()
            }
        }
    };

    let needs_validation = if fields.is_empty() { quote!(false) } else { quote!(#(#as_mpi::NEEDS_VALIDATION)||*) };
    let checks: Vec<TokenStream2> = as_mpi
        .iter()
        .zip(&offsets)
        .map(|(t, off)| quote!((!#t::NEEDS_VALIDATION || #t::is_valid(ptr.add(#off)))))
        .collect();
    // SAFETY (of the generated block): `is_valid`'s caller guarantees that
    // `ptr` points at `size_of::<Self>()` readable bytes, and each field's
    // offset lies inside them with room for the field, so each field's own
    // `is_valid` gets a pointer that meets the same contract.
    let is_valid_body = if checks.is_empty() { quote!(true) } else { quote!(unsafe { #(#checks)&&* }) };

    // Layout facts the typemap relies on, checked at compile time: in a
    // `const` item for a concrete type, in an inline `const` block of
    // `datatype()` for a generic one (evaluated per instance).
    let container = if is_generic { quote!(Self) } else { quote!(#name) };
    let size_of_self = quote!(::core::mem::size_of::<#container>());
    let mut assertions = Vec::new();
    for f in &fields {
        let (member, ty) = (&f.member, f.ty);
        assertions.push(quote! {
            ::core::assert!(
                ::core::mem::offset_of!(#container, #member) + ::core::mem::size_of::<#ty>() <= #size_of_self,
                "a field lies inside its struct",
            );
        });
    }
    // A field left out of the datatype must be a type with no bytes and
    // one value (`PhantomData`, `()`, arrays of them): its spelling alone
    // proves nothing, so the type is checked.
    let no_bytes_checks: Vec<TokenStream2> =
        phantoms.iter().map(|ty| quote!(<#krate::Datatype>::__derive_no_bytes::<#ty>();)).collect();
    if repr.packed == Some(1) {
        let sizes = fields.iter().map(|f| {
            let ty = f.ty;
            quote!(::core::mem::size_of::<#ty>())
        });
        assertions.push(quote! {
            ::core::assert!(#size_of_self == 0 #(+ #sizes)*, "a #[repr(C, packed)] struct has no padding");
        });
    }
    let (outer_assertions, inner_assertions) = if assertions.is_empty() {
        (quote!(), quote!())
    } else if is_generic {
        (quote!(), quote!(const { #(#assertions)* };))
    } else {
        (quote!(const _: () = { #(#assertions)* };), quote!())
    };

    Ok(quote! {
        const _: () = {
            #outer_assertions

            // SAFETY: the datatype has one entry per field (its own datatype,
            // which covers only initialised bytes of the field) at the field's
            // real offset, lb 0 and extent size_of::<Self>(); padding is never
            // covered. A value is valid when each field's bytes are.
            #[automatically_derived]
            unsafe impl #impl_generics #krate::MpiType for #name #ty_generics #where_clause {
                fn datatype() -> #krate::Datatype {
                    #inner_assertions
                    #(#no_bytes_checks)*
                    #datatype_body
                }

                const NEEDS_VALIDATION: bool = #needs_validation;

                #[allow(unused_variables)]
                unsafe fn is_valid(ptr: *const u8) -> bool {
                    #is_valid_body
                }
            }
        };
    })
}

// ----- enums ------------------------------------------------------------------

fn expand_enum(input: &DeriveInput, data: &DataEnum, repr: &Repr, krate: &Path) -> Result<TokenStream2> {
    let name = &input.ident;
    let mut errors: Option<Error> = None;
    for v in &data.variants {
        let e = if !matches!(v.fields, Fields::Unit) {
            Some(Error::new_spanned(
                &v.fields,
                format!(
                    "#[derive(MpiType)] supports fieldless enums only: variant `{}` carries data, and which \
                     variant's fields are initialised depends on the value; use a #[repr(C)] struct with an \
                     integer-repr tag enum instead",
                    v.ident
                ),
            ))
        } else {
            reject_mpx_attrs(&v.attrs).err()
        };
        if let Some(e) = e {
            match &mut errors {
                Some(all) => all.combine(e),
                None => errors = Some(e),
            }
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }
    let Some(int) = &repr.int else {
        let message = "#[derive(MpiType)] on an enum needs an explicit integer repr such as #[repr(u8)] or \
                       #[repr(i32)], which fixes the size of its values";
        return Err(match (repr.c, &repr.first) {
            (Some(c), _) => Error::new(c, format!("{message}; #[repr(C)] alone leaves the size to the C compiler")),
            (None, Some(attr)) => Error::new_spanned(attr, message),
            (None, None) => Error::new(name.span(), message),
        });
    };
    if int == "u128" || int == "i128" {
        return Err(Error::new_spanned(int, "mpx has no 128-bit integer datatype; use a repr of 64 bits or fewer"));
    }
    if let Some(g) = input.generics.params.first() {
        return Err(Error::new_spanned(g, "#[derive(MpiType)] does not support generic enums"));
    }

    let consts: Vec<Ident> = (0..data.variants.len()).map(|i| format_ident!("__MPX_VARIANT_{}", i)).collect();
    let variants = data.variants.iter().map(|v| &v.ident);
    let int_as_mpi = quote_spanned!(int.span()=> <#int as #krate::MpiType>);
    let is_valid_body = if consts.is_empty() {
        quote!(false)
    } else {
        // SAFETY (of the generated read): `is_valid`'s caller guarantees
        // that `ptr` points at `size_of::<Self>()` readable bytes, which for
        // an enum with `#[repr(int)]` and no data is one `int`; the read is
        // unaligned, so any address will do.
        quote! {
            #(const #consts: #int = #name::#variants as #int;)*
            match unsafe { ::core::ptr::read_unaligned(ptr.cast::<#int>()) } {
                #(#consts)|* => true,
                _ => false,
            }
        }
    };

    Ok(quote! {
        const _: () = {
            const _: () = ::core::assert!(
                ::core::mem::size_of::<#name>() == ::core::mem::size_of::<#int>(),
                "an integer-repr fieldless enum has the size of its repr",
            );

            // SAFETY: a fieldless enum with an integer repr is that integer
            // (every byte initialised), and `is_valid` accepts exactly the
            // declared discriminants.
            #[automatically_derived]
            unsafe impl #krate::MpiType for #name {
                fn datatype() -> #krate::Datatype {
                    #int_as_mpi::datatype()
                }

                const NEEDS_VALIDATION: bool = true;

                #[allow(unused_variables)]
                unsafe fn is_valid(ptr: *const u8) -> bool {
                    #is_valid_body
                }
            }
        };
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_ok(input: DeriveInput) -> String {
        match expand(&input) {
            Ok(tokens) => {
                // The expansion is one well-formed item.
                syn::parse2::<syn::ItemConst>(tokens.clone()).expect("expansion parses as `const _: () = ...;`");
                tokens.to_string()
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn expand_err(input: DeriveInput) -> String {
        match expand(&input) {
            Ok(tokens) => panic!("expected an error, got {tokens}"),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"),
        }
    }

    #[test]
    fn struct_uses_offsets_resized_and_mpx_paths() {
        let out = expand_ok(syn::parse_quote! {
            #[repr(C)]
            struct P { a: u8, b: [f64; 2], c: bool }
        });
        for needle in [
            "unsafe impl :: mpx :: MpiType for P",
            ":: core :: mem :: offset_of ! (Self , a)",
            ":: core :: mem :: offset_of ! (Self , c)",
            ":: mpx :: Datatype :: structure",
            ":: mpx :: Datatype :: resized (0 , :: core :: mem :: size_of :: < Self > () as i64",
            "< bool as :: mpx :: MpiType > :: NEEDS_VALIDATION",
            "is_valid (ptr . add (:: core :: mem :: offset_of ! (Self , b)))",
            "OnceLock",
            ":: core :: mem :: offset_of ! (P , b)",
        ] {
            assert!(out.contains(needle), "missing `{needle}` in {out}");
        }
    }

    #[test]
    fn tuple_struct_uses_indices() {
        let out = expand_ok(syn::parse_quote! {
            #[repr(C)]
            struct T(u8, u32);
        });
        assert!(out.contains("offset_of ! (Self , 0)"), "{out}");
        assert!(out.contains("offset_of ! (Self , 1)"), "{out}");
    }

    #[test]
    fn generics_get_bounds_and_the_type_id_cache() {
        let out = expand_ok(syn::parse_quote! {
            #[repr(C)]
            struct G<T, U: Copy, K, const N: usize> where U: Send { a: T, b: [U; N], c: u8, k: PhantomData<K> }
        });
        // The fields' types that name a parameter are bounded, not the
        // parameters: `K`, named by a `PhantomData` only, is not.
        assert!(out.contains("T : :: mpx :: MpiType"), "{out}");
        assert!(out.contains("[U ; N] : :: mpx :: MpiType"), "{out}");
        assert!(!out.contains("u8 : :: mpx :: MpiType"), "{out}");
        assert!(!out.contains("K : :: mpx :: MpiType"), "{out}");
        assert!(out.contains("G < T , U , K , N > : :: core :: marker :: Copy"), "{out}");
        assert!(out.contains("U : Send"), "{out}");
        assert!(out.contains("< :: mpx :: Datatype > :: __derive_cached :: < Self >"), "{out}");
        assert!(!out.contains("OnceLock"), "no generic statics: {out}");
        assert!(out.contains("const {"), "per-instance layout assertions: {out}");
    }

    #[test]
    fn crate_attribute_overrides_the_path() {
        let out = expand_ok(syn::parse_quote! {
            #[mpx(crate = "mpx_core")]
            #[repr(C)]
            struct P { a: u8 }
        });
        assert!(out.contains("unsafe impl mpx_core :: MpiType for P"), "{out}");
        assert!(!out.contains(":: mpx ::"), "{out}");
        let err = expand_err(syn::parse_quote! {
            #[mpx(crate = "not a path")]
            #[repr(C)]
            struct P { a: u8 }
        });
        assert!(err.contains("expected"), "{err}");
    }

    #[test]
    fn packed_struct_asserts_no_padding() {
        let out = expand_ok(syn::parse_quote! {
            #[repr(C, packed)]
            struct P { a: u8, b: u32 }
        });
        assert!(out.contains("has no padding"), "{out}");
        let out = expand_ok(syn::parse_quote! {
            #[repr(C, packed(2))]
            struct P { a: u8, b: u32 }
        });
        assert!(!out.contains("has no padding"), "packed(2) may pad: {out}");
    }

    #[test]
    fn transparent_newtype_uses_the_inner_datatype() {
        let out = expand_ok(syn::parse_quote! {
            #[repr(transparent)]
            struct M(f64, core::marker::PhantomData<u8>);
        });
        assert!(out.contains("< f64 as :: mpx :: MpiType > :: datatype () }"), "{out}");
        // The field left out is checked to be a type with no bytes.
        assert!(out.contains("< :: mpx :: Datatype > :: __derive_no_bytes :: < core :: marker :: PhantomData < u8 > > ()"), "{out}");
    }

    #[test]
    fn enum_checks_declared_discriminants() {
        let out = expand_ok(syn::parse_quote! {
            #[repr(i16)]
            enum E { A = -3, B, C = 7 }
        });
        for needle in [
            "< i16 as :: mpx :: MpiType > :: datatype ()",
            "const NEEDS_VALIDATION : bool = true",
            "const __MPX_VARIANT_0 : i16 = E :: A as i16 ;",
            "const __MPX_VARIANT_1 : i16 = E :: B as i16 ;",
            "read_unaligned (ptr . cast :: < i16 > ())",
            "__MPX_VARIANT_0 | __MPX_VARIANT_1 | __MPX_VARIANT_2 => true",
        ] {
            assert!(out.contains(needle), "missing `{needle}` in {out}");
        }
    }

    #[test]
    fn rejected_shapes_say_why() {
        let cases: Vec<(DeriveInput, &str)> = vec![
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S {
                        r: &'static u8,
                    }
                ),
                "a reference",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S {
                        p: *mut u8,
                    }
                ),
                "a raw pointer",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S {
                        f: fn(),
                    }
                ),
                "a function pointer",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S {
                        s: String,
                    }
                ),
                "`String`",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S {
                        v: std::vec::Vec<u8>,
                    }
                ),
                "`Vec`",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S {
                        b: Box<u8>,
                    }
                ),
                "`Box`",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S {
                        b: Box<dyn Send>,
                    }
                ),
                "boxed trait object",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S {
                        a: [std::rc::Rc<u8>; 2],
                    }
                ),
                "`Rc`",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S {
                        t: (u8, u16),
                    }
                ),
                "a tuple",
            ),
            (
                syn::parse_quote!(
                    struct S {
                        a: u8,
                    }
                ),
                "needs #[repr(C)]",
            ),
            (
                syn::parse_quote!(
                    #[repr(align(8))]
                    struct S {
                        a: u8,
                    }
                ),
                "needs #[repr(C)]",
            ),
            (syn::parse_quote!(#[repr(C)] union U { a: u8 }), "union"),
            (
                syn::parse_quote!(
                    #[repr(u8)]
                    enum E {
                        A(u8),
                    }
                ),
                "carries data",
            ),
            (
                syn::parse_quote!(
                    enum E {
                        A,
                    }
                ),
                "explicit integer repr",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    enum E {
                        A,
                    }
                ),
                "#[repr(C)] alone",
            ),
            (
                syn::parse_quote!(
                    #[repr(u128)]
                    enum E {
                        A,
                    }
                ),
                "128-bit",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S<'a> {
                        a: &'a u8,
                    }
                ),
                "'static",
            ),
            (
                syn::parse_quote!(
                    #[mpx(skip)]
                    #[repr(C)]
                    struct S {
                        a: u8,
                    }
                ),
                "unknown #[mpx",
            ),
            (
                syn::parse_quote!(
                    #[repr(C)]
                    struct S {
                        #[mpx(crate = "x")]
                        a: u8,
                    }
                ),
                "only allowed on the type",
            ),
        ];
        for (input, expected) in cases {
            let err = expand_err(input);
            assert!(err.contains(expected), "expected `{expected}` in `{err}`");
        }
    }

    #[test]
    fn every_bad_field_is_reported() {
        let err = expand_err(syn::parse_quote! {
            #[repr(C)]
            struct S { a: &'static u8, b: u32, c: String }
        });
        assert!(err.contains("a reference") && err.contains("`String`"), "{err}");
    }

    #[test]
    fn phantom_and_unit_fields_describe_no_bytes() {
        let out = expand_ok(syn::parse_quote! {
            #[repr(C)]
            struct S<T> { a: u32, _p: ::std::marker::PhantomData<T>, _u: () }
        });
        assert!(!out.contains("PhantomData < T > as"), "{out}");
        assert!(out.contains("[i64 ; 1usize]"), "one block: {out}");
    }
}
