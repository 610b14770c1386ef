#[derive(Clone, Copy, mpx::MpiType)]
#[repr(C)]
struct Borrowing {
    len: u32,
    data: &'static [u8; 4],
}

fn main() {}
