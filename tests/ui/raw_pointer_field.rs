#[derive(Clone, Copy, mpx::MpiType)]
#[repr(C)]
struct Node {
    value: f64,
    next: *const Node,
}

fn main() {}
