#[derive(Clone, mpx::MpiType)]
#[repr(C)]
struct Boxed {
    small: u8,
    big: Box<[f64; 1024]>,
}

fn main() {}
