#[derive(Clone, Copy, mpx::MpiType)]
struct Point {
    x: f64,
    y: f64,
}

fn main() {}
