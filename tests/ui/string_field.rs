#[derive(Clone, mpx::MpiType)]
#[repr(C)]
struct Named {
    id: u64,
    name: String,
}

fn main() {}
