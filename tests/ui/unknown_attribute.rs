#[derive(Clone, Copy, mpx::MpiType)]
#[mpx(krate = "mpx")]
#[repr(C)]
struct Point {
    x: f64,
}

#[derive(Clone, Copy, mpx::MpiType)]
#[repr(C)]
struct Field {
    #[mpx(skip)]
    x: f64,
}

fn main() {}
