#[derive(Clone, Copy)]
#[repr(C)]
struct NotDerived {
    x: u32,
}

#[derive(Clone, Copy, mpx::MpiType)]
#[repr(C)]
struct Outer {
    ok: [u16; 2],
    inner: NotDerived,
    maybe: Option<u32>,
}

fn main() {}
