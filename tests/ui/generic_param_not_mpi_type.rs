#[derive(Clone, Copy, mpx::MpiType)]
#[repr(C)]
struct Pair<T> {
    a: T,
    b: T,
}

fn main() {
    let _ = <Pair<&'static str> as mpx::MpiType>::datatype();
}
