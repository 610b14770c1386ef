// A field spelled `PhantomData` that is not `std::marker::PhantomData`:
// leaving it out of the datatype would let a receive make a value of a
// type that has none.
use std::convert::Infallible as PhantomData;

#[derive(Clone, Copy, mpx::MpiType)]
#[repr(C)]
struct Never {
    x: u32,
    never: PhantomData,
}

mod token {
    /// A zero-sized proof only this module can make.
    #[derive(Clone, Copy)]
    pub struct PhantomData(());
}

#[derive(Clone, Copy, mpx::MpiType)]
#[repr(C)]
struct Forged {
    x: u32,
    proof: token::PhantomData,
}

fn main() {}
