#[derive(Clone, mpx::MpiType)]
#[repr(C)]
struct Samples(u32, std::vec::Vec<f64>);

fn main() {}
