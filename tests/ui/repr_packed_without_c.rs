#[derive(Clone, Copy, mpx::MpiType)]
#[repr(packed)]
struct Header {
    kind: u8,
    len: u32,
}

fn main() {}
